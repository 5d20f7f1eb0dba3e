# shellcheck shell=bash
# devaccess run on real devices: vivid (one instance) and snd-aloop under the opt-in
# deny-by-default rules, a fresh user vmuser outside video/audio with no user-wide grant,
# devaccessd on a test ledger with a policy that allows v4l2-ctl, bash and arecord (root's
# files, so Program= matches them) and asks for everything else. Only a run gets in:
#   r0 nothing run: vmuser opens neither the camera nor the capture PCM
#   r1 devaccess run --camera -- v4l2-ctl --info: exit 0, driver vivid; no entry left after
#   r2 a run streams from the camera (v4l2-ctl --stream-mmap); at that moment vmuser's other
#      process is refused, the node has one run group entry, `who camera` names the run;
#      after it ends the entry is gone and vmuser is refused
#   r3 a run lives through `udevadm trigger --action=change` and rmmod+modprobe vivid: its
#      entry is on the (new) node, its program opens it, vmuser's other process does not
#   r4 devaccess run --microphone -- arecord from the capture PCM
#   r5 a program no rule allows (Default=ask), no terminal to ask on: exit 77, nothing runs,
#      nothing recorded for it
#   r6 a strict camera run's program starts a nested microphone run: devaccessd refuses it
#      (exit 77, names --strict); no microphone grant or run is recorded for it
# Checked by check_run in Tests/UseCase/VM/lib/check.py.
STATE=/run/devaccess-test
SOCK=/run/devaccess-vm/broker.sock
CONF=/run/devaccess-conf
MARKS=/run/devaccess-marks
U=vmuser
MIC=/dev/snd/pcmC0D0c

cp "$VM_TREE/udev-rules/72-devaccess-deny-by-default.rules" /etc/udev/rules.d/
udevadm control --reload
modprobe vivid n_devs=1
modprobe snd-aloop index=0
settle
record_inventory inv
make_user "$U"
mapfile -t cams < <(camera_nodes)
cam=${cams[0]:-/dev/video-none}

# The policy: runs of these root-owned programs are allowed; anything else asks.
mkdir -p "$CONF"
allowed="$(realpath /usr/bin/v4l2-ctl) $(realpath /bin/bash) $(realpath /usr/bin/arecord)"
printf '%s\n' "[camera]" "Default=ask" "[microphone]" "Default=ask" "" "[Rule]" \
  "Permission=camera microphone" "Program=$allowed" "Action=allow" >"$CONF/devaccess.conf"
cp "$CONF/devaccess.conf" "$OUT/policy.conf"
# Markers the runs' programs (vmuser) write and wait for; copied to $OUT at the end.
mkdir -p "$MARKS"
chmod 1777 "$MARKS"

start_daemon daemon-ready

# as_user CMD...: CMD as vmuser with its login groups, in a session of its own (no
# terminal); SIGTERM after 150 s (devaccess relays it to the run's program), so a hung run
# fails its expectations instead of the whole boot.
as_user() { timeout -k 5 150 setsid -w setpriv --reuid="$U" --regid="$U" --init-groups -- "$@"; }
# dav_run ARGS...: `devaccess run ARGS` as vmuser through the test daemon.
dav_run() { as_user "$VM_BIN" run --socket "$SOCK" "$@"; }

# run_entries NODE: the node's ACL entries for run group ids (0x7A000000-0x7AFFFFFF).
run_entries() {
  getfacl -n -p -c "$1" 2>/dev/null \
    | awk -F: '$1 == "group" && $2 ~ /^[0-9]+$/ && $2 >= 2046820352 && $2 <= 2063597567'
}

# wait_run_entry NODE PRESENT: up to 20 s for a run entry on NODE to be there (1) or gone (0);
# prints the milliseconds it took, or "timeout".
wait_run_entry() {
  local node=$1 want=$2 t0=${EPOCHREALTIME/./} have
  while :; do
    have=0
    [[ -n $(run_entries "$node") ]] && have=1
    if [[ $have == "$want" ]]; then
      printf '%s\n' $(((${EPOCHREALTIME/./} - t0) / 1000))
      return 0
    fi
    if (((${EPOCHREALTIME/./} - t0) > 20000000)); then
      echo timeout
      return 0
    fi
    sleep 0.05
  done
}

# wait_file FILE [SECONDS]: until FILE exists (default 60 s); 1 when it never did.
wait_file() {
  local file=$1 limit=$((${2:-60} * 10)) i
  for ((i = 0; i < limit; i++)); do
    [[ -e $file ]] && return 0
    sleep 0.1
  done
  log "gave up waiting for $file"
  return 1
}

# frames FILE: the frames v4l2-ctl --stream-mmap has reported in FILE (one '<' each).
frames() { cat "$1" 2>/dev/null | tr -cd '<' | wc -c; }

# wait_job PID NAME: waits for background job PID (as_user's timeout bounds it); its exit
# status goes to $OUT/NAME.rc.
wait_job() {
  local rc=0
  wait "$1" || rc=$?
  echo "$rc" >"$OUT/$2.rc"
}

# observe STEP NODE...: the nodes' ACLs and vmuser's real open()s of them, now.
observe() {
  local p=$1
  shift
  rec "$p-getfacl" getfacl -n -p "$@"
  probe_opens "$U" "$p" "$@"
}

mark r0
observe r0 "$cam" "$MIC"
rec r0-list da list --all --json --socket "$SOCK"

mark r1
rec r1-run dav_run --camera -- v4l2-ctl -d "$cam" --info
observe r1-after "$cam"

mark r2
# The run's program streams in the background and waits for the word to stop.
mkdir -p "$MARKS/r2"
chmod 1777 "$MARKS/r2"
stream='v4l2-ctl -d "$1" --stream-mmap --stream-count=1000000 --stream-to=/dev/null >"$2/stream.out" 2>&1 &
s=$!; echo "$s" >"$2/streamer.pid"; echo "$$" >"$2/shell.pid"
while [ ! -e "$2/stop" ] && kill -0 "$s" 2>/dev/null; do sleep 0.1; done
kill -TERM "$s" 2>/dev/null; wait "$s"; echo "$?" >"$2/streamer.rc"; exit 0'
t0=${EPOCHREALTIME/./}
dav_run --camera -- /bin/bash -c "$stream" bash "$cam" "$MARKS/r2" \
  >"$OUT/r2-run.out" 2>"$OUT/r2-run.err" </dev/null &
r2=$!
# Streaming: v4l2-ctl prints one '<' per dequeued frame.
for ((i = 0; i < 600; i++)); do
  (($(frames "$MARKS/r2/stream.out") >= 3)) && break
  kill -0 "$r2" 2>/dev/null || break
  sleep 0.1
done
printf '%s\n' $(((${EPOCHREALTIME/./} - t0) / 1000)) >"$OUT/r2-first-frames.ms"
frames "$MARKS/r2/stream.out" >"$OUT/r2-frames-before.out"
mark r2-streaming
rec r2-who da who camera
rec r2-who-json da who camera --json
observe r2-during "$cam"
rec r2-ps ps -o pid,ppid,uid,gid,supgid,args -e
frames "$MARKS/r2/stream.out" >"$OUT/r2-frames-after.out"
: >"$MARKS/r2/stop"
wait_job "$r2" r2-run
mark r2-ended
observe r2-after "$cam"
rec r2-who-after da who camera --json

mark r3
mkdir -p "$MARKS/r3"
chmod 1777 "$MARKS/r3"
# The run's program opens the node root names in $2/node at each word (go1, go2) and
# ends at go3. It holds nothing in between, so vivid can be unloaded.
hold=': >"$2/started"
for step in change replug; do
  case $step in change) go=go1 ;; replug) go=go2 ;; esac
  while [ ! -e "$2/$go" ]; do sleep 0.1; done
  n=$(cat "$2/node")
  v4l2-ctl -d "$n" --info >"$2/$step.out" 2>&1; echo "$?" >"$2/$step.rc"
done
while [ ! -e "$2/go3" ]; do sleep 0.1; done
exit 0'
printf '%s\n' "$cam" >"$MARKS/r3/node"
dav_run --camera -- /bin/bash -c "$hold" bash "$cam" "$MARKS/r3" \
  >"$OUT/r3-run.out" 2>"$OUT/r3-run.err" </dev/null &
r3=$!
wait_file "$MARKS/r3/started" || true
wait_run_entry "$cam" 1 >"$OUT/r3-start-wait.out"
rec r3-start-getfacl getfacl -n -p "$cam"

mark r3-change
udevadm trigger --action=change --sysname-match="${cam##*/}"
settle
rec r3-change-getfacl getfacl -n -p "$cam"
: >"$MARKS/r3/go1"
wait_file "$MARKS/r3/change.rc" || true
probe_opens "$U" r3-change "$cam"

mark r3-replug
for ((i = 0; i < 20; i++)); do
  rmmod vivid 2>>"$OUT/r3-rmmod.err" && break
  sleep 0.5
done
echo "$i" >"$OUT/r3-rmmod-retries.out"
settle
ls /dev/video* >"$OUT/r3-unplugged-nodes.out" 2>&1 || true
modprobe vivid n_devs=1
settle
mapfile -t cams < <(camera_nodes)
cam2=${cams[0]:-/dev/video-none}
printf '%s\n' "$cam2" >"$OUT/r3-new-node.out"
# No command runs: devaccessd sees udev's event for the fresh node and adds the run's entry.
wait_run_entry "$cam2" 1 >"$OUT/r3-replug-wait.out"
rec r3-replug-getfacl getfacl -n -p "$cam2"
record_inventory r3-inv
printf '%s\n' "$cam2" >"$MARKS/r3/node"
: >"$MARKS/r3/go2"
wait_file "$MARKS/r3/replug.rc" || true
probe_opens "$U" r3-replug "$cam2"
: >"$MARKS/r3/go3"
wait_job "$r3" r3-run
wait_run_entry "$cam2" 0 >"$OUT/r3-end-wait.out"
mark r3-ended
observe r3-after "$cam2"
cam=$cam2

mark r4
rec r4-run dav_run --microphone -- arecord -q -D hw:0,0 -d 1 -f S16_LE -c 2 -r 48000 -t raw /dev/null
observe r4-after "$MIC"

mark r5
rec r5-run dav_run --camera -- /usr/bin/touch "$MARKS/r5-ran"
[[ -e $MARKS/r5-ran ]] && echo ran >"$OUT/r5-ran.out"
observe r5-after "$cam"

mark r6
# A strict camera run's program asks devaccessd for a nested microphone run (issue 27, item 1):
# refused, as it would run with vmuser's plain groups and no Landlock; nothing is recorded for it.
nested='"$1" run --socket "$2" --microphone -- arecord -q -D hw:0,0 -d 1 -f S16_LE -c 2 -r 48000 -t raw /dev/null \
  >"$3/r6-nested.out" 2>"$3/r6-nested.err"; echo "$?" >"$3/r6-nested.rc"'
rec r6-run dav_run --camera --strict -- /bin/bash -c "$nested" bash "$VM_BIN" "$SOCK" "$MARKS"
observe r6-after "$MIC"

mark final
rec final-list da list --all --json --socket "$SOCK"
rec final-audit da audit --format json --socket "$SOCK"
rec final-verify da audit --verify --socket "$SOCK"
cp -r "$MARKS" "$OUT/marks"
stop_daemon daemon
mark finished
