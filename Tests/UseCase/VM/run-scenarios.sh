#!/usr/bin/env bash
# Real-driver scenarios for devaccess: boots a stock Debian kernel under QEMU
# (TCG; vivid, snd-dummy, snd-aloop, snd-pcsp), one VM per scenario, with the host's / shared
# read-only, runs the freshly built devaccess inside against the guest's real
# devices, and asserts on the recorded results here on the host.
#
# Usage: Tests/UseCase/VM/run-scenarios.sh [--bin PATH] [--timeout SECONDS] [--verbose] [--list] [SCENARIO...]
#   --bin PATH   devaccess binary to test (default .build/debug/devaccess)
#   --timeout S  kill a VM after S seconds and fail its scenario (default 480: a scenario takes
#                150-250 s under TCG; twice that on a loaded machine, where 240 cut hotplug short)
#   --verbose    print passing expectations too, not only failures
# Without SCENARIO, every scenario except those marked OPT-IN (run them by name).
# Exit 0 only if every expectation of every scenario passed.
set -euo pipefail

vm_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tree=$(cd "$vm_dir/../../.." && pwd)
cache=${DEVACCESS_VM_CACHE:-$vm_dir/cache}
bin=$tree/.build/debug/devaccess
boot_timeout=480
verbose=0

die() { printf 'run-scenarios: %s\n' "$*" >&2; exit 2; }

usage() {
  sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
  exit "${1:-0}"
}

all_scenarios() {
  local f
  for f in "$vm_dir"/scenarios/*.sh; do
    f=${f##*/}
    printf '%s\n' "${f%.sh}"
  done
}

# The default list: scenarios whose file has no "# OPT-IN" line (as udev-rules/ marks opt-in rules).
default_scenarios() {
  local s
  for s in $(all_scenarios); do
    grep -q '^# OPT-IN' "$vm_dir/scenarios/$s.sh" || printf '%s\n' "$s"
  done
}

scenarios=()
while (($#)); do
  case $1 in
    --bin) [[ $# -ge 2 ]] || die "--bin needs a path"; bin=$2; shift 2 ;;
    --bin=*) bin=${1#--bin=}; shift ;;
    --timeout) [[ $# -ge 2 ]] || die "--timeout needs seconds"; boot_timeout=$2; shift 2 ;;
    --verbose|-v) verbose=1; shift ;;
    --list) all_scenarios; exit 0 ;;
    -h|--help) usage 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) scenarios+=("$1"); shift ;;
  esac
done
((${#scenarios[@]})) || mapfile -t scenarios < <(default_scenarios)
for s in "${scenarios[@]}"; do
  [[ -f $vm_dir/scenarios/$s.sh ]] || die "no such scenario '$s' (have: $(all_scenarios | tr '\n' ' '))"
done

# The guest reads the host's whole tree with the host's permissions.
((EUID == 0)) || die "must run as root (the VM shares the host's / and loads modules in the guest)"
for tool in qemu-system-x86_64 python3 timeout; do
  command -v "$tool" >/dev/null \
    || die "missing '$tool': apt-get install \$(grep -v '^#' Tests/UseCase/VM/packages.txt)"
done
# The guest reaches the binary through the host's root, so it needs an absolute path.
bin=$(realpath -m "$bin")
[[ -x $bin ]] || die "devaccess binary not found at $bin: build it first ('swift build') or pass --bin PATH"
case $bin in
  /proc/*|/sys/*|/dev/*|/run/*) die "$bin is hidden inside the guest (its /proc, /sys, /dev, /run are its own)" ;;
esac

mkdir -p "$cache"
image=$("$vm_dir/lib/build-image.sh" "$cache")
kernel=$image/vmlinuz
[[ -f $image/vmlinux ]] && kernel=$image/vmlinux
results=$cache/results
rm -rf "$results"
mkdir -p "$results"

# run_vm NAME: boots one VM for scenario NAME; console lines are echoed with
# the seconds since qemu started, so boot time can be read off the log.
run_vm() {
  local name=$1 dir=$results/$1 rc=0
  mkdir -p "$dir/out"
  {
    printf 'VM_TREE=%q\n' "$tree"
    printf 'VM_BIN=%q\n' "$bin"
    printf 'VM_SCENARIO=%q\n' "$name"
  } >"$dir/config.sh"
  local start=$EPOCHREALTIME
  set +e
  timeout --kill-after=10 "$boot_timeout" \
    qemu-system-x86_64 -accel tcg -cpu max -m 1024 -smp 2 \
      -nodefaults -no-user-config -display none -serial stdio -no-reboot \
      -kernel "$kernel" -initrd "$image/initrd.gz" \
      -append "console=ttyS0 panic=-1 quiet loglevel=3" \
      -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
      -virtfs "local,path=$dir,mount_tag=vmshare,security_model=none,multidevs=remap" \
      </dev/null 2>"$dir/qemu.err" \
    | while IFS= read -r line; do
        line=${line%$'\r'}
        printf '%s %s\n' "$(elapsed "$start")" "$line" >>"$dir/console.log"
        printf '  [%s] %s\n' "$name" "$line"
      done
  rc=${PIPESTATUS[0]}
  set -e
  printf '%s\n' "$(elapsed "$start")" >"$dir/wall-seconds"
  printf '%s\n' "$rc" >"$dir/qemu-rc"
  if ((rc == 124 || rc == 137)); then
    printf 'FAIL %s: VM did not finish within %ss (qemu killed by the timeout)\n' "$name" "$boot_timeout" >&2
  elif ((rc != 0)); then
    printf 'FAIL %s: qemu exited %s: %s\n' "$name" "$rc" "$(tail -n3 "$dir/qemu.err" | tr '\n' ' ')" >&2
  fi
}

# Seconds (3 decimals) since EPOCHREALTIME value $1.
elapsed() {
  local now=${EPOCHREALTIME/./} then=${1/./}
  local d=$((now - then))
  printf '%d.%03d' $((d / 1000000)) $(((d % 1000000) / 1000))
}

total_pass=0 total_fail=0
failed=()
summary=()
for s in "${scenarios[@]}"; do
  echo "=== scenario $s"
  run_vm "$s"
  check_args=("$s" "$results/$s")
  ((verbose)) && check_args=(--verbose "${check_args[@]}")
  crc=0
  python3 "$vm_dir/lib/check.py" "${check_args[@]}" || crc=$?
  read -r p f < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["passed"], d["failed"])' \
                   "$results/$s/check.json" 2>/dev/null || echo "0 1")
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
  ((crc == 0)) || failed+=("$s")
  summary+=("$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("timing",""))' \
               "$results/$s/check.json" 2>/dev/null || echo "$s: no timing")")
done

echo "=== timing"
printf '  %s\n' "${summary[@]}"
echo "=== results in $results"
if ((${#failed[@]})); then
  echo "failed scenarios: ${failed[*]}"
fi
echo "$total_pass passed, $total_fail failed"
((${#failed[@]} == 0))
