# shellcheck shell=bash
# vivid with two instances (the second multi-planar), snd-dummy and snd-aloop:
# classification of two cameras, then one unprivileged user through four
# access states, each compared with real open()s of the nodes as that user:
#   A  nodes as udev leaves them (root:video / root:audio 0660)  -> notDetermined
#   V  user in group video only                                  -> camera authorized,
#      microphone notDetermined; status as the user itself in its default (golden:
#      at most 10 lines), verbose, JSON and explain forms, devices with and without --all
#   B  user in groups video and audio                            -> authorized
#   C  out of the groups, ACL u:vmuser:rw on the first camera and
#      on card 0's capture PCM + control                         -> limited
#   D  ACL on every camera node                                   -> camera authorized
# Checked by check_access in Tests/UseCase/VM/lib/check.py.
load_drivers n_devs=2 multiplanar=1,2
record_inventory inv
make_user vmuser
mapfile -t cams < <(camera_nodes)
mapfile -t mics < <(microphone_nodes)

step() {
  rec "$1-getfacl" getfacl -p "${cams[@]}" "${mics[@]}"
  rec "$1-groups" id vmuser
  record_status "$1" vmuser camera microphone
  probe_opens vmuser "$1" "${cams[@]}" "${mics[@]}"
}

mark A
rec A-devices da devices --json
step A
# As vmuser itself: alsa-lib's "No such file or directory" must not hide that the
# control node is root:audio 0660 (EACCES).
rec A-self-status setpriv --reuid=vmuser --regid=vmuser --init-groups -- "$VM_BIN" status microphone --json

mark V
shadow_edit usermod -a -G video vmuser
step V
as_vmuser() { setpriv --reuid=vmuser --regid=vmuser --init-groups -- "$VM_BIN" "$@"; }
rec V-self-default as_vmuser status
rec V-self-verbose as_vmuser status -v
rec V-self-json as_vmuser status --json
rec V-self-explain as_vmuser explain camera
rec V-devices da devices
rec V-devices-all da devices --all
shadow_edit gpasswd -d vmuser video >/dev/null

mark B
shadow_edit usermod -a -G video,audio vmuser
step B

mark C
shadow_edit gpasswd -d vmuser video >/dev/null
shadow_edit gpasswd -d vmuser audio >/dev/null
setfacl -m u:vmuser:rw "${cams[0]}" /dev/snd/pcmC0D0c /dev/snd/controlC0
step C

mark D
for c in "${cams[@]}"; do setfacl -m u:vmuser:rw "$c"; done
step D
mark finished
