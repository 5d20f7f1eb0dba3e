# shellcheck shell=bash
# Report-only timing (docs/performance.md, "devaccess status against v4l2-ctl + arecord",
# issue 17's cold-start goal): with 2 vivid cameras, snd-dummy and snd-aloop, the wall
# time of `devaccess status` (the CLI's own probe, and through devaccessd with --broker)
# against `v4l2-ctl --list-devices` + `arecord -l` on the same devices, STATUS_ROUNDS
# rounds interleaved, all as root (so the tools open every node, as devaccess's probe
# does); `devaccess --version` and /bin/true as the start-up floor. One line per run in
# status-time.tsv: round, what, ms, exit code. Checked (exit codes only, times reported)
# by check_status_time in Tests/UseCase/VM/lib/check.py.
STATE=/run/devaccess-test
SOCK=/run/devaccess-vm/broker.sock
CONF=/run/devaccess-conf
STATUS_ROUNDS=${STATUS_ROUNDS:-10}

load_drivers n_devs=2
mkdir -p "$CONF"
start_daemon daemon-ready
timed() {
  local what=$1 t0 rc=0
  shift
  t0=${EPOCHREALTIME/./}
  "$@" >/dev/null 2>&1 </dev/null || rc=$?
  printf '%s\t%s\t%s\t%s\n' "$r" "$what" $(((${EPOCHREALTIME/./} - t0) / 1000)) "$rc" >>"$OUT/status-time.tsv"
}
mark status-time
for ((r = 1; r <= STATUS_ROUNDS; r++)); do
  timed status "$VM_BIN" status
  timed status-broker "$VM_BIN" status --broker --socket "$SOCK"
  timed v4l2-ctl v4l2-ctl --list-devices
  timed arecord arecord -l
  timed version "$VM_BIN" --version
  timed true /bin/true
done
rec status-sample da status
rec tools-sample sh -c 'v4l2-ctl --list-devices; arecord -l'
mark finished
stop_daemon daemon-stopped
