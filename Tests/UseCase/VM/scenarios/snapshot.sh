# shellcheck shell=bash
# Examples/snapshot (the DevAccess library: request, then devaccessd opens the camera and
# passes the descriptor) on vivid, as vmuser: outside group video, the node root:video 0660.
# devaccessd on a test ledger whose policy asks for the camera (no terminal here to ask on).
#   p0 no grant: snapshot exits 77 and writes nothing; vmuser cannot open the node itself
#   p1 after an admin's grant: snapshot captures one frame through libv4l2 (RGB24, which
#      vivid offers natively) and writes a PPM of vivid's test pattern (not all one colour);
#      the open is audited (device_open); ldd of snapshot lists libv4l2
#   p2 --native FOURCC: vivid delivers NV12, BA81 (Bayer BGGR), RGBP (RGB565) and YU12
#      unconverted (v4l2-ctl --get-fmt-video after each shows it set) and libv4lconvert
#      converts them: each a 640x480 PPM close to p1's frame;
#      NV21 (vivid has it, libv4lconvert does not) and ZZZZ (nobody has it) fail saying so
#   p3 vivid replugged multi-planar (multiplanar=2): libv4l2's mplane plugin printf()s
#      "Using mplane plugin for capture" to stdout. Written to a file, the line is on
#      snapshot's stdout; with `-` the PPM is on stdout intact and the line on stderr
# Checked by check_snapshot in Tests/UseCase/VM/lib/check.py.
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
rec p1-ldd ldd "$SNAPSHOT"
rec p1-formats v4l2-ctl -d "$cam" --list-formats

mark p2
for f in NV12 BA81 RGBP YU12 NV21 ZZZZ; do
  rec "p2-$f" snap "$SHOTS/p2-$f.ppm" --native "$f"
  # The kernel's side: vivid keeps the format it was last set to.
  rec "p2-$f-fmt" v4l2-ctl -d "$cam" --get-fmt-video
  [[ -e $SHOTS/p2-$f.ppm ]] && cp "$SHOTS/p2-$f.ppm" "$OUT/p2-$f.ppm"
done

mark p3
rmmod vivid
modprobe vivid n_devs=1 multiplanar=2
settle
mapfile -t cams < <(camera_nodes)
rec p3-formats v4l2-ctl -d "${cams[0]:-/dev/video-none}" --list-formats
rec p3-file snap "$SHOTS/p3-file.ppm"
[[ -e $SHOTS/p3-file.ppm ]] && cp "$SHOTS/p3-file.ppm" "$OUT/p3-file.ppm"
rec p3-stdout snap -
rec p3-stdout-NV12 snap - --native NV12

stop_daemon daemon
mark finished
