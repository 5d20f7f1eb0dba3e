# shellcheck shell=bash
# Examples/snapshot (the DevAccess library: request, then devaccessd opens the camera and
# passes the descriptor) on vivid, as vmuser: outside group video, the node root:video 0660.
# devaccessd on a test ledger whose policy asks for the camera (no terminal here to ask on).
#   p0 no grant: snapshot exits 77 and writes nothing; vmuser cannot open the node itself
#   p1 after an admin's grant: snapshot captures one frame by mmap streaming and writes a
#      PPM of vivid's test pattern (not all one colour); the open is audited (device_open)
# Checked by check_snapshot in Tests/VM/lib/check.py.
STATE=/run/devaccess-test
SOCK=/run/devaccess-vm/broker.sock
CONF=/run/devaccess-conf
U=vmuser
SNAPSHOT=$(dirname "$VM_BIN")/snapshot
SHOTS=/run/devaccess-shots

modprobe vivid n_devs=1
modprobe snd-aloop index=0  # the inventory reads /proc/asound
settle
record_inventory inv
make_user "$U"
mapfile -t cams < <(camera_nodes)
cam=${cams[0]:-/dev/video-none}

mkdir -p "$CONF"
printf '%s\n' "[camera]" "Default=ask" >"$CONF/devaccess.conf"
mkdir -p "$SHOTS"
chmod 1777 "$SHOTS"

start_daemon daemon-ready

as_user() { timeout -k 5 120 setsid -w setpriv --reuid="$U" --regid="$U" --init-groups -- "$@"; }
snap() { as_user env DEVACCESS_SOCKET="$SOCK" "$SNAPSHOT" "$@"; }

mark p0
rec p0-snapshot snap "$SHOTS/p0.ppm"
[[ -e $SHOTS/p0.ppm ]] && echo written >"$OUT/p0-written.out"
probe_opens "$U" p0 "$cam"

mark p1
rec p1-grant da grant camera --user "$U" --socket "$SOCK"
rec p1-snapshot snap "$SHOTS/p1.ppm"
[[ -e $SHOTS/p1.ppm ]] && cp "$SHOTS/p1.ppm" "$OUT/p1.ppm"
rec p1-audit da audit --type device_open --format json --socket "$SOCK"

stop_daemon daemon
mark finished
