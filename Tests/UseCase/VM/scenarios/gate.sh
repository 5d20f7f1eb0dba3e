# shellcheck shell=bash
# Is devaccess the only way in? vivid (one instance), snd-dummy and snd-aloop as
# udev leaves them (root:video / root:audio 0660, tag uaccess), one user in group
# video: status and doctor must name group members and the seat user (uaccess)
# as ways in without devaccess, and the deny-by-default rules as not installed.
# Then the opt-in 72-devaccess-deny-by-default.rules is installed and applied
# (reload, trigger, settle): capture nodes lose uaccess, playback and control
# nodes keep it (udevadm info), and status and doctor say the rules are in
# force. Checked by check_gate in Tests/UseCase/VM/lib/check.py.
load_drivers n_devs=1
# In group video from the start: a usermod right after useradd once failed to
# lock /etc/group in the guest (CI, a fresh clone), ending the scenario early.
make_user vmuser --groups video
settle
mark before
record_inventory before
rec before-status da status camera microphone --json
rec before-status-text da status camera microphone
rec before-status-verbose da status camera microphone -v
rec before-doctor da doctor --json

mark install-rules
cp "$VM_TREE/udev-rules/72-devaccess-deny-by-default.rules" /etc/udev/rules.d/
udevadm control --reload
udevadm trigger --action=change --subsystem-match=video4linux --subsystem-match=sound
settle
mark after
record_inventory after
rec after-status da status camera microphone --json
rec after-doctor da doctor --json
mark finished
