# shellcheck shell=bash
# Live hotplug: `devaccess monitor --json` runs while vivid (two instances)
# and then snd-aloop are removed and loaded again; `udevadm monitor` runs in
# parallel so each printed event can be matched to its kernel uevent by SEQNUM
# and the delay measured. Status is recorded after every step.
# Checked by check_hotplug in Tests/VM/lib/check.py.
load_drivers n_devs=2
record_inventory before
record_devaccess before

udevadm monitor --kernel --udev --property >"$OUT/uevents.txt" 2>"$OUT/uevents.err" &
umon=$!
# Started directly (not through da) so $! is devaccess itself.
"$VM_BIN" monitor --json >"$OUT/monitor.jsonl" 2>"$OUT/monitor.err" &
dmon=$!
for ((i = 0; i < 100; i++)); do
  grep -q '^UDEV - ' "$OUT/uevents.txt" 2>/dev/null && break
  sleep 0.1
done
if ! wait_for_socket "$dmon"; then
  log "devaccess monitor did not open a socket (exited or hung)"
fi
sleep 1

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
kill -TERM "$dmon" 2>/dev/null || true
wait "$dmon" 2>/dev/null || true
kill -TERM "$umon" 2>/dev/null || true
wait "$umon" 2>/dev/null || true
