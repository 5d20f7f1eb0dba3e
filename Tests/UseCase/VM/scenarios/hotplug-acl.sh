# shellcheck shell=bash
# Replug -> ACL entry, timed (docs/performance.md, "Hotplug: replug -> ACL entry"): vivid
# (one instance), snd-dummy and snd-aloop, devaccessd on a test ledger with a standing
# camera grant for vmuser; then 8 times `rmmod vivid` + `modprobe vivid` while
# lib/replug-watch.py times, for the capture node's add, the node's appearance, the
# kernel's uevent, udevd's event (its rules done) and the moment vmuser's entry is on the
# node. devaccessd's own log says what each event's run did and took.
# Checked by check_hotplug_acl in Tests/UseCase/VM/lib/check.py.
STATE=/run/devaccess-test
SOCK=/run/devaccess-vm/broker.sock
CONF=/run/devaccess-conf
U=vmuser
ROUNDS=${ROUNDS:-8}

load_drivers n_devs=1
make_user "$U"
mkdir -p "$CONF"
mapfile -t cams < <(camera_nodes)
cam=${cams[0]:-/dev/video-none}
echo "$cam" >"$OUT/camera-node"
start_daemon daemon-ready
rec grant da grant camera --user "$U" --socket "$SOCK"
getfacl -n -p -c "$cam" >"$OUT/acl-granted" 2>&1 || true
uid=$(id -u "$U")

for ((r = 1; r <= ROUNDS; r++)); do
  mark "replug-$r"
  /usr/bin/python3 "$VM_TREE/Tests/UseCase/VM/lib/replug-watch.py" "$cam" "$uid" "$OUT/replug-$r.json" \
    >"$OUT/replug-$r.watch" 2>&1 &
  watch=$!
  for _ in $(seq 1 100); do grep -q listening "$OUT/replug-$r.watch" 2>/dev/null && break; sleep 0.1; done
  rmmod vivid
  modprobe vivid n_devs=1
  wait "$watch" || true
  settle
  getfacl -n -p -c "$cam" >"$OUT/acl-replug-$r" 2>&1 || true
  # Let the node events' runs (and their audit) finish before the next round.
  sleep 2
done
mark finished
stop_daemon daemon-stopped
