#!/usr/bin/env bash
# Runs inside the VM as PID 1 (after the initramfs switch_roots into the host's
# root): starts udevd with the project's rules, runs one scenario script, and
# leaves its results in /run/vm/out (the host's read-write share).
set -euo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LC_ALL=C.UTF-8 TERM=dumb
: "${VM_TREE:?config.sh must set VM_TREE}" "${VM_SCENARIO:?}" "${VM_BIN:?}"
OUT=/run/vm/out
mkdir -p "$OUT"

# shellcheck source=Tests/UseCase/VM/lib/guest-lib.sh
. "$VM_TREE/Tests/UseCase/VM/lib/guest-lib.sh"
trap 'vm_finish $?' EXIT

uptime_s >"$OUT/boot-uptime"
echo "VM-READY uptime=$(cat "$OUT/boot-uptime")"
hostname devaccess-vm

# Only this tree's devaccess files count: drop any the host has installed
# (config, ledger, rules; removals land in the guest's overlay only).
rm -rf /etc/devaccess /var/lib/devaccess
rm -f /etc/udev/rules.d/*devaccess* /usr/lib/udev/rules.d/*devaccess*
# The project's rules, exactly as shipped, on top of the host's stock rules;
# opt-in ones (marked OPT-IN) only where a scenario installs them.
mkdir -p /etc/udev/rules.d
for f in "$VM_TREE"/udev-rules/*.rules; do
  [[ -f $f ]] && ! grep -q 'OPT-IN' "$f" && cp "$f" /etc/udev/rules.d/
done
ls /etc/udev/rules.d >"$OUT/rules-installed.txt"

/lib/systemd/systemd-udevd --daemon
udevadm trigger --action=add
udevadm settle --timeout=60
uptime_s >"$OUT/udev-ready-uptime"
log "udevd ready"

scenario=$VM_TREE/Tests/UseCase/VM/scenarios/$VM_SCENARIO.sh
[[ -f $scenario ]] || { log "no scenario file $scenario"; exit 70; }
# shellcheck source=/dev/null
. "$scenario"
