# shellcheck shell=bash
# vivid with one instance, snd-dummy, snd-aloop and the playback-only PC
# speaker (snd-pcsp): which nodes are cameras and microphones, the udev rules'
# tags (with the opt-in deny-by-default rules too), and status for root and for
# a fresh unprivileged user. Checked by check_single in Tests/UseCase/VM/lib/check.py.
cp "$VM_TREE/udev-rules/72-devaccess-deny-by-default.rules" /etc/udev/rules.d/
udevadm control --reload
load_drivers n_devs=1
modprobe snd-pcsp index=2
settle
record_inventory inv
make_user vmuser
mapfile -t nodes < <(camera_nodes; microphone_nodes)

mark devaccess-root
record_devaccess root
mark devaccess-user
record_devaccess user vmuser
mark opens
probe_opens root root "${nodes[@]}"
probe_opens vmuser user "${nodes[@]}"

# Location: a receiver marked the documented way (ID_GPS=1 from a local rule
# below 70) is tagged; another serial port is not.
mark gps-rule
printf '%s\n' 'SUBSYSTEM=="tty", KERNEL=="ttyS1", ENV{ID_GPS}="1"' >/etc/udev/rules.d/65-vm-gps.rules
udevadm control --reload
udevadm trigger --action=change --sysname-match=ttyS1 --sysname-match=ttyS2
settle
rec gps-ttyS1 udevadm info --query=property --name=/dev/ttyS1
rec gps-ttyS2 udevadm info --query=property --name=/dev/ttyS2
mark finished
