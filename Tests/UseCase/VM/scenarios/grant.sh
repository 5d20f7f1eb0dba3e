# shellcheck shell=bash
# The enforcement engine on real nodes: vivid (one instance) and snd-dummy, a
# fresh user vmuser outside video/audio, and a ledger in /run/devaccess-test,
# with devaccessd running: every decision goes through it (the one writer), and
# the replug and the expiry are its doing, with no command run.
# Every step is followed by getfacl of every video/sound node, status --json
# and check as vmuser, and real open()s as vmuser:
#   s1 nothing decided (a foreign entry u:nobody:r is set first; it must
#      survive every step)                                    -> notDetermined
#   s2 grant camera                                          -> user:vmuser:rw- on the capture node
#   s3 revoke camera                                         -> entry gone
#   s4 grant camera, rmmod/modprobe vivid (fresh node): devaccessd re-adds the
#      entry on udev's event; reconcile then has nothing to change
#   s5 grant microphone --for 10s: devaccessd removes the entries when it runs
#      out; reconcile afterwards has nothing to change
#   s6 deny camera, then vmuser joins group video            -> denied + drift
#   s7 audit --verify
# Checked by check_grant in Tests/UseCase/VM/lib/check.py.
STATE=/run/devaccess-test
SOCK=/run/devaccess-vm/broker.sock
U=vmuser
FOREIGN=u:nobody:r
DAEMON=$(dirname "$VM_BIN")/devaccessd

modprobe vivid n_devs=1
modprobe snd-dummy index=0
settle
record_inventory inv
make_user "$U"

# Every node vivid and ALSA made, so an entry on any other node shows up too.
all_nodes() {
  local n
  for n in /dev/video* /dev/vbi* /dev/radio* /dev/swradio* /dev/v4l-* /dev/media* /dev/snd/*; do
    [[ -c $n ]] && printf '%s\n' "$n"
  done
  return 0
}

# dav NAME ARGS...: a command that decides or records, through devaccessd, recorded as NAME.
dav() {
  local name=$1
  shift
  rec "$name" da "$@" --socket "$SOCK"
}

# dstat NAME ARGS...: status/check as root, reading the test ledger itself (read-only).
dstat() {
  local name=$1
  shift
  rec "$name" da "$@" --state-dir "$STATE"
}

# wait_entry NODE PRESENT: up to 10 s for vmuser's entry on NODE to be there (1) or gone (0);
# prints the milliseconds it took, or "timeout".
wait_entry() {
  local node=$1 want=$2 t0=${EPOCHREALTIME/./} have
  while :; do
    have=0
    if getfacl -p "$node" 2>/dev/null | grep -q "^user:$U:"; then have=1; fi
    if [[ $have == "$want" ]]; then
      printf '%s\n' $(((${EPOCHREALTIME/./} - t0) / 1000))
      return 0
    fi
    if (((${EPOCHREALTIME/./} - t0) > 10000000)); then
      echo timeout
      return 0
    fi
    sleep 0.02
  done
}

# Guest wall clock (what the ledger's created/expires use), s since the epoch.
stamp() { date +%s.%N >"$OUT/$1.at"; }

# observe STEP: the nodes' ACLs, devaccess's view and the kernel's, as vmuser.
observe() {
  local p=$1 perm
  mapfile -t cams < <(camera_nodes)
  mapfile -t nodes < <(all_nodes)
  rec "$p-getfacl" getfacl -p "${nodes[@]}"
  rec "$p-groups" id "$U"
  dstat "$p-status" status --user "$U" --json
  for perm in camera microphone; do
    dstat "$p-check-$perm" check "$perm" --user "$U"
  done
  probe_opens "$U" "$p" "${cams[@]}" /dev/snd/pcmC0D0c /dev/snd/controlC0
}

mapfile -t cams < <(camera_nodes)
foreign_nodes=("${cams[@]}" /dev/snd/pcmC0D0c /dev/snd/controlC0)

# devaccessd, as the unit starts it, on the test ledger; ready when it answers.
"$DAEMON" --state-dir "$STATE" --socket "$SOCK" --log-target stderr --gpsd 127.0.0.1:9 --gpsd-timeout 200 \
  2>"$OUT/daemon.log" </dev/null &
echo $! >"$OUT/daemon.pid"
for _ in $(seq 1 600); do
  if da pending --socket "$SOCK" >/dev/null 2>&1; then break; fi
  sleep 0.1
done
rec daemon-ready da pending --socket "$SOCK"

mark s1
setfacl -m "$FOREIGN" "${foreign_nodes[@]}"
observe s1
dav s1-list list --all --json

mark s2
dav s2-grant grant camera --user "$U"
observe s2
dav s2-list list --json

mark s3
dav s3-revoke revoke camera --user "$U"
observe s3
dav s3-list list --all --json

mark s4
dav s4-grant grant camera --user "$U"
observe s4-granted
rmmod vivid
settle
modprobe vivid n_devs=1
settle
mapfile -t cams < <(camera_nodes)
# No command runs: devaccessd sees udev's event for the fresh node and adds the entry.
wait_entry "${cams[0]}" 1 >"$OUT/s4-replug-wait.out"
rec s4-replug-getfacl getfacl -p "${cams[@]}"
record_inventory s4-inv
# The fresh node gets the foreign entry again, so the reconcile can be seen
# to leave it alone.
setfacl -m "$FOREIGN" "${cams[@]}"
observe s4-replugged
dav s4-reconcile reconcile --json
observe s4-reconciled

mark s5
stamp s5-grant-start
dav s5-grant grant microphone --user "$U" --for 10s
stamp s5-grant-end
# Probe first: the grant runs out 10 s after it was made.
probe_opens "$U" s5-granted /dev/snd/pcmC0D0c /dev/snd/controlC0
mapfile -t nodes < <(all_nodes)
rec s5-granted-getfacl getfacl -p "${nodes[@]}"
stamp s5-list-start
dav s5-list list --all --json
stamp s5-list-end
dstat s5-granted-status status --user "$U" --json
for perm in camera microphone; do
  dstat "s5-granted-check-$perm" check "$perm" --user "$U"
done
stamp s5-checked
# No command runs: devaccessd removes the entries when the grant runs out.
wait_entry /dev/snd/pcmC0D0c 0 >"$OUT/s5-expiry-wait.out"
stamp s5-removed
# Wait until the grant has surely run out (6 s after the grant command ended).
end=$(cat "$OUT/s5-grant-end.at")
until awk -v e="$end" -v now="$(date +%s.%N)" 'BEGIN { exit !(now >= e + 11) }'; do
  sleep 0.2
done
stamp s5-reconcile-start
dav s5-reconcile reconcile --json
observe s5-expired
dav s5-list-all list --all --json

mark s6
dav s6-deny deny camera --user "$U"
observe s6-denied
shadow_edit usermod -a -G video "$U"
observe s6-group
dav s6-reconcile reconcile --json
dav s6-list list --all --json

mark s7
dav s7-audit audit --verify
kill -TERM "$(cat "$OUT/daemon.pid")"
daemon_rc=0
wait "$(cat "$OUT/daemon.pid")" || daemon_rc=$?
echo "$daemon_rc" >"$OUT/daemon.rc"
mark finished
