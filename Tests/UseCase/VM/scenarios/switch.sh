# shellcheck shell=bash
# Privacy switches on real devices: vivid (one instance) and snd-aloop with the stock udev
# rules (deny-by-default NOT installed: --hard has to shut out group access too), devaccessd
# on a test ledger. Three users reach the camera three ways: swvideo through group video
# (and audio, for the microphone), swgrant through `devaccess grant camera --user`, swacl
# through a hand-made `setfacl -m u:swacl:rw`. Steps (real opens as each user after each):
#   s0 all three open the camera; swvideo opens the capture PCM
#   s1 `switch camera off --hard --reason test`: nobody opens the camera; swgrant's
#      `request camera` is answered restricted (exit 5, no terminal needed) and its
#      `run --camera` refused (77, nothing run); swvideo's `switch camera on` gets 77
#   s2 `udevadm trigger --action=change` on the node: still nobody (devaccessd strips again)
#   s3 devaccessd restarted: still off, still nobody
#   s4 `switch camera on`: all three open; getfacl -n + stat of the node byte-identical to s0
#      (the same node: no replug in this cycle)
#   s5 off --hard again, then rmmod+modprobe vivid: the fresh node comes up off, nobody opens
#   s6 `switch camera on`: the fresh node gets what was saved for that path and device number
#      (s0's access, swacl's entry included), all three open
# The capture PCM opens for swvideo throughout and its access never changes.
# Checked by check_switch in Tests/UseCase/VM/lib/check.py.
STATE=/run/devaccess-test
SOCK=/run/devaccess-vm/broker.sock
CONF=/run/devaccess-conf
MARKS=/run/devaccess-marks
MIC=/dev/snd/pcmC0D0c
USERS=(swvideo swgrant swacl)

modprobe vivid n_devs=1
modprobe snd-aloop index=0
settle
make_user swvideo --groups video,audio
make_user swgrant
make_user swacl
mapfile -t cams < <(camera_nodes)
cam=${cams[0]:-/dev/video-none}
printf '%s\n' "$cam" >"$OUT/cam.out"
setfacl -m u:swacl:rw "$cam"
mkdir -p "$CONF" "$MARKS"
chmod 1777 "$MARKS"
printf '%s\n' "[camera]" "Default=ask" "[microphone]" "Default=ask" >"$CONF/devaccess.conf"

as_user() {
  local u=$1
  shift
  timeout -k 5 60 setsid -w setpriv --reuid="$u" --regid="$u" --init-groups -- "$@"
}

# snap NAME NODE: the node's access as the bytes the test compares (getfacl -n, stat).
snap() { { getfacl -n "$2"; stat -c '%a %g %u' "$2"; } >"$OUT/$1.access" 2>"$OUT/$1.access-err"; }

# wait_locked NODE: up to 20 s for NODE to be as a hard switch leaves it (mode 600, owner
# root, no ACL); prints the milliseconds it took, or "timeout".
wait_locked() {
  local node=$1 t0=${EPOCHREALTIME/./}
  while :; do
    if [[ $(stat -c '%a %u' "$node" 2>/dev/null) == "600 0" && -z $(getfacl -n -c -s "$node" 2>/dev/null) ]]; then
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

# observe STEP NODE: the camera's and the PCM's access and every user's real opens of them.
observe() {
  local u
  snap "$1-cam" "$2"
  snap "$1-mic" "$MIC"
  for u in "${USERS[@]}"; do probe_opens "$u" "$1" "$2"; done
  probe_opens swvideo "$1-mic" "$MIC"
}

start_daemon daemon-ready
rec grant da grant camera --user swgrant --socket "$SOCK"

mark s0
observe s0 "$cam"

mark s1
rec s1-off da switch camera off --hard --reason test --socket "$SOCK"
observe s1 "$cam"
rec s1-switches da switch --json --socket "$SOCK"
rec s1-status as_user swgrant "$VM_BIN" status camera --broker --json --socket "$SOCK"
rec s1-request as_user swgrant "$VM_BIN" request camera --socket "$SOCK"
rec s1-run as_user swgrant "$VM_BIN" run --camera --socket "$SOCK" -- /usr/bin/touch "$MARKS/s1-ran"
[[ -e $MARKS/s1-ran ]] && echo ran >"$OUT/s1-ran.out"
rec s1-nonadmin as_user swvideo "$VM_BIN" switch camera on --socket "$SOCK"

mark s2
udevadm trigger --action=change --sysname-match="${cam##*/}"
settle
snap s2-settled "$cam"
wait_locked "$cam" >"$OUT/s2-wait.out"
observe s2 "$cam"

mark s3
stop_daemon s3-daemon-stop
start_daemon s3-daemon-ready
observe s3 "$cam"
rec s3-switches da switch --json --socket "$SOCK"

mark s4
rec s4-on da switch camera on --socket "$SOCK"
observe s4 "$cam"

mark s5
rec s5-off da switch camera off --hard --reason test --socket "$SOCK"
for ((i = 0; i < 20; i++)); do
  rmmod vivid 2>>"$OUT/s5-rmmod.err" && break
  sleep 0.5
done
settle
ls /dev/video* >"$OUT/s5-unplugged-nodes.out" 2>&1 || true
modprobe vivid n_devs=1
settle
mapfile -t cams < <(camera_nodes)
cam2=${cams[0]:-/dev/video-none}
printf '%s\n' "$cam2" >"$OUT/cam2.out"
# No command runs: devaccessd sees udev's event for the fresh node and strips it.
wait_locked "$cam2" >"$OUT/s5-wait.out"
observe s5 "$cam2"
rec s5-request as_user swgrant "$VM_BIN" request camera --socket "$SOCK"

mark s6
rec s6-on da switch camera on --socket "$SOCK"
observe s6 "$cam2"

mark final
rec final-audit da audit --format json --socket "$SOCK"
rec final-verify da audit --verify --socket "$SOCK"
stop_daemon daemon
mark finished
