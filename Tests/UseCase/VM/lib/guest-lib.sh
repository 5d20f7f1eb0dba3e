# shellcheck shell=bash
# Helpers for guest-side scenario scripts (sourced by guest-main.sh).
# Scenario scripts only record facts into $OUT; the host asserts on them, so a
# failed expectation is reported with its scenario name on the host.

uptime_s() { cut -d' ' -f1 /proc/uptime; }

log() { printf '[%8s] %s: %s\n' "$(uptime_s)" "$VM_SCENARIO" "$*"; }

vm_finish() {
  local rc=$1
  trap - EXIT
  jobs -p | xargs -r kill 2>/dev/null || true
  uptime_s >"$OUT/end-uptime"
  printf '%s\n' "$rc" >"$OUT/exit-code"
  sync
  echo "VM-DONE rc=$rc"
  echo o >/proc/sysrq-trigger
  # Busy-wait: a sleeping PID 1 can panic when the 9p root goes away.
  while :; do :; done
}

# rec NAME CMD... : run CMD, keep its stdout, stderr, exit code and wall time
# as $OUT/NAME.{out,err,rc,ms}. Never fails, so one broken step still lets the
# others report.
rec() {
  local name=$1 rc=0 t0=${EPOCHREALTIME/./}
  shift
  "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" </dev/null || rc=$?
  printf '%s\n' "$rc" >"$OUT/$name.rc"
  printf '%s\n' $(((${EPOCHREALTIME/./} - t0) / 1000)) >"$OUT/$name.ms"
  return 0
}

# The devaccess binary under test (path from the host's --bin).
da() { "$VM_BIN" "$@"; }

settle() { udevadm settle --timeout=60; }

# Kernel-side inventory, independent of devaccess: what sysfs, udev and the
# drivers say. The host compares devaccess's answers with it.
record_inventory() {
  local p=$1 d n
  rec "$p-udevdb" udevadm info --export-db
  {
    for d in /sys/class/video4linux/*; do
      [[ -e $d ]] || continue
      n=${d##*/}
      printf '%s\t%s\t%s\n' "/dev/$n" "$(cat "$d/name")" "$(cat "$d/index" 2>/dev/null || echo -)"
    done
  } >"$OUT/$p-v4l-nodes.tsv"
  {
    # Only capture nodes: v4l2-ctl costs about a second per node under TCG.
    for d in $(camera_nodes); do
      [[ -e $d ]] || continue
      printf '### %s\n' "$d"
      v4l2-ctl -d "$d" --info 2>&1 || true
    done
  } >"$OUT/$p-v4l2-info.txt"
  cp /proc/asound/pcm "$OUT/$p-pcm.out"
  rec "$p-nodes" stat -c '%n %F %U %G %a %t:%T' /dev/video* /dev/snd/*
  rec "$p-getfacl" getfacl -p /dev/video* /dev/snd/pcm* /dev/snd/control*
}

# devaccess's view for one user ("" = the invoking user, root): status --json
# and check's exit code for each PERMISSION (default: all three).
record_status() {
  local p=$1 user=$2 perm
  shift 2
  local -a as=() perms=("$@")
  ((${#perms[@]})) || perms=(camera microphone location)
  [[ -n $user ]] && as=(--user "$user")
  rec "$p-status" da status "${as[@]}" --json
  for perm in "${perms[@]}"; do
    rec "$p-check-$perm" da check "$perm" "${as[@]}"
  done
}

# status for all permissions plus the devices inventory.
record_devaccess() {
  record_status "$1" "${2:-}"
  rec "$1-devices" da devices --json
}

# The kernel's own verdict: really open each NODE as USER, with that user's
# groups as a login would have them, for read, write and read-write (see
# probe-opens.sh). Appends TSV lines to $OUT/PREFIX-opens.tsv.
probe_opens() {
  local user=$1 p=$2
  shift 2
  timeout 60 setpriv --reuid="$user" --regid="$user" --init-groups -- \
    bash "$VM_TREE/Tests/UseCase/VM/lib/probe-opens.sh" "$@" >>"$OUT/$p-opens.tsv" 2>>"$OUT/$p-opens.err" \
    || log "probe-opens as $user failed (exit $?)"
}

# Capture nodes by the kernel's naming (vivid names its capture node
# vivid-NNN-vid-cap), and ALSA capture PCM + control nodes.
camera_nodes() {
  local d
  for d in /sys/class/video4linux/video*; do
    [[ -e $d ]] || continue
    [[ $(cat "$d/name") == *-vid-cap ]] && printf '/dev/%s\n' "${d##*/}"
  done
  return 0
}
microphone_nodes() { ls /dev/snd/pcmC*D*c /dev/snd/controlC* 2>/dev/null || true; }

# The drivers every scenario uses: vivid with the given parameters, snd-dummy
# and snd-aloop at fixed card indexes so node names are predictable.
load_drivers() {
  modprobe vivid "$@"
  modprobe snd-dummy index=0
  modprobe snd-aloop index=1
  settle
}

# shadow_edit CMD...: usermod/gpasswd, tried again (at most 10 times, 0.3 s apart) when
# it fails: in the guest, shadow's lock on /etc/group was seen to fail now and then
# ("cannot lock /etc/group; try again later", CI on fresh clones), ending a scenario
# early. A command that fails every time still fails the scenario.
shadow_edit() {
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    "$@" && return 0
    log "shadow_edit: '$*' failed (try $i of 10)"
    sleep 0.3
  done
  return 1
}

# An unprivileged login user with its own group, like a desktop user before
# anyone grants anything; more useradd options (--groups video) may follow the
# name. Its uid is recorded for the host.
make_user() {
  local name=$1
  shift
  useradd --no-create-home --user-group --shell /bin/sh "$@" "$name"
  id -u "$name" >"$OUT/uid-$name"
}

# wait_quiet FILE: wait until FILE stops growing for 3 s (at most 30 s), so
# the events a step caused have all been printed before the next step.
wait_quiet() {
  local file=$1 last=-1 size stable=0 i
  for ((i = 0; i < 60; i++)); do
    size=$(stat -c %s "$file" 2>/dev/null || echo 0)
    if [[ $size == "$last" ]]; then
      ((++stable >= 6)) && return 0
    else
      stable=0
      last=$size
    fi
    sleep 0.5
  done
}

# mark NAME: note when a step starts (CLOCK_MONOTONIC-ish guest uptime, s).
mark() { printf '%s\t%s\n' "$1" "$(uptime_s)" >>"$OUT/marks.tsv"; log "$1"; }

# start_daemon NAME: devaccessd (beside $VM_BIN) on the scenario's $STATE, $SOCK and $CONF,
# as the unit starts it, logging to $OUT/daemon.log; ready when `pending` answers (that
# answer recorded as NAME).
start_daemon() {
  "$(dirname "$VM_BIN")/devaccessd" --state-dir "$STATE" --socket "$SOCK" --config-dir "$CONF" \
    --log-target stderr --gpsd 127.0.0.1:9 --gpsd-timeout 200 2>>"$OUT/daemon.log" </dev/null &
  echo $! >"$OUT/daemon.pid"
  for _ in $(seq 1 600); do
    if da pending --socket "$SOCK" >/dev/null 2>&1; then break; fi
    sleep 0.1
  done
  rec "$1" da pending --socket "$SOCK"
}

# stop_daemon NAME: SIGTERM to it; its exit status in $OUT/NAME.rc.
stop_daemon() {
  local rc=0
  kill -TERM "$(cat "$OUT/daemon.pid")"
  wait "$(cat "$OUT/daemon.pid")" || rc=$?
  echo "$rc" >"$OUT/$1.rc"
}
