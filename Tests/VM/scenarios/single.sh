# shellcheck shell=bash
# vivid with one instance, snd-dummy, snd-aloop and the playback-only PC
# speaker (snd-pcsp): which nodes are cameras and microphones, the udev rules'
# tags, and status for root and for a fresh unprivileged user.
# Checked by check_single in Tests/VM/lib/check.py.
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
mark finished
