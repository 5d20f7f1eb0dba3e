# shellcheck shell=bash
# Live hotplug: `devaccess monitor --json` (devaccessd's status updates) runs while
# vivid (two instances) and then snd-aloop are removed and loaded again; `udevadm monitor`
# runs in parallel so each printed event can be matched to its capture node's kernel
# uevent and the delay measured. Status is recorded after every step.
# A second monitor runs as vmuser (in group video, so the nodes alone would say authorized)
# with a standing denial of camera recorded by devaccessd: its status comes from devaccessd,
# and must say denied in the snapshot and after every camera event.
# Both monitors print a snapshot (one line per device) before any event.
# Checked by check_hotplug in Tests/UseCase/VM/lib/check.py.
STATE=/run/devaccess-test
SOCK=/run/devaccess-vm/broker.sock
CONF=/run/devaccess-conf
load_drivers n_devs=2
record_inventory before
record_devaccess before
make_user vmuser --groups video
mkdir -p "$CONF"
printf '%s\n' "[camera]" "Default=ask" "[microphone]" "Default=ask" >"$CONF/devaccess.conf"
start_daemon daemon-ready
rec deny-vmuser da deny camera --user vmuser --socket "$SOCK"

udevadm monitor --kernel --udev --property >"$OUT/uevents.txt" 2>"$OUT/uevents.err" &
umon=$!
# Started directly (not through da) so $! is devaccess itself.
"$VM_BIN" monitor --json --socket "$SOCK" >"$OUT/monitor.jsonl" 2>"$OUT/monitor.err" &
dmon=$!
setpriv --reuid=vmuser --regid=vmuser --init-groups -- env DEVACCESS_SOCKET="$SOCK" \
  "$VM_BIN" monitor --json >"$OUT/monitor-vmuser.jsonl" 2>"$OUT/monitor-vmuser.err" &
umon_user=$!
for ((i = 0; i < 100; i++)); do
  grep -q '^UDEV - ' "$OUT/uevents.txt" 2>/dev/null && break
  sleep 0.1
done
# Ready: a monitor listens once it printed its first (snapshot) line.
for f in monitor.jsonl monitor-vmuser.jsonl; do
  for ((i = 0; i < 200; i++)); do
    [[ -s $OUT/$f ]] && break
    sleep 0.1
  done
  [[ -s $OUT/$f ]] || log "$f: no snapshot line within 20 s"
done

mark rmmod-vivid
rmmod vivid
settle
wait_quiet "$OUT/monitor.jsonl"
record_status after-rmmod-vivid "" camera microphone

mark modprobe-vivid
modprobe vivid n_devs=2
settle
wait_quiet "$OUT/monitor.jsonl"
record_inventory after-modprobe-vivid
record_status after-modprobe-vivid "" camera microphone

mark rmmod-aloop
rmmod snd-aloop
settle
wait_quiet "$OUT/monitor.jsonl"
record_status after-rmmod-aloop "" camera microphone

mark modprobe-aloop
modprobe snd-aloop index=1
settle
wait_quiet "$OUT/monitor.jsonl"
record_status after-modprobe-aloop "" camera microphone
mark finished

# The monitor must still be running after all that.
if kill -0 "$dmon" 2>/dev/null; then echo running; else echo exited; fi >"$OUT/monitor-state"
if kill -0 "$umon_user" 2>/dev/null; then echo running; else echo exited; fi >"$OUT/monitor-vmuser-state"
kill -TERM "$dmon" "$umon_user" 2>/dev/null || true
wait "$dmon" 2>/dev/null || true
wait "$umon_user" 2>/dev/null || true
stop_daemon daemon-stop
kill -TERM "$umon" 2>/dev/null || true
wait "$umon" 2>/dev/null || true
