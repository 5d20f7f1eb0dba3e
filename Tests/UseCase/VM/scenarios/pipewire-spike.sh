# shellcheck shell=bash
# OPT-IN: not in the default list; run it by name: run-scenarios.sh --timeout 900 pipewire-spike
# Issue 28, step 0: who may open the hardware when capture goes through PipeWire. snd-aloop
# (card 0, "Loopback") under the opt-in deny-by-default rules; its nodes stay root:audio 0660
# and a user pwuser outside group audio. The capture PCMs and the control node get one ACL
# entry, for a dedicated group pwgate (as `devaccess run` names a run's group). pipewire,
# wireplumber and pipewire-pulse of pwuser run as one process tree that carries pwgate (here
# setpriv --groups; devaccess would start it as a run).
# Root plays a 440 Hz sine into hw:Loopback,1,0 from step b on; it comes out of hw:Loopback,0,0,
# the capture PCM (pcmC0D0c) of the ACP profile WirePlumber picks for the card (front:0).
#   a0 pwuser's own arecord -D hw:Loopback,0,0 fails: alsa-lib's card lookup gets EACCES on
#      the control node (strace shows the kernel's answer), and open(2) of the capture PCM and of
#      the control node get EACCES; the same user with pwgate records (the ACL is the way in)
#   c  what WirePlumber 0.4.13 needs here, stock configuration: with and without a session
#      bus (dbus-run-session), with and without /run/systemd/{seats,sessions,users}
#   h  the tree started naively (the user's HOME and config, dbus-run-session): programs the
#      user chooses run inside it and open the hardware (pipewire.conf.d context.exec,
#      WirePlumber Lua package.loadlib, a D-Bus service file in $XDG_RUNTIME_DIR)
#   g  the tree started hardened (env -i, root-owned config dirs, no user HOME, no session
#      bus, no /run/systemd), the same hostile files in place: none runs. The gate names every
#      PCM of the card (playback too: PipeWire's ALSA monitor skips a card unless access(2)
#      allows the control node and all its PCMs; c1-c4 had the capture PCMs only and never
#      showed the card). Time to start; RSS of each process
#   b  pwuser's plain pw-record and parecord (no pwgate) record the sine through the gated
#      instance; who holds which /dev/snd node meanwhile; arecord still EACCES meanwhile;
#      a same-uid pidfd_getfd(2) of the open capture PCM (Yama ptrace_scope decides)
#   e  the sine stopped, the gate's entry taken off one playback PCM while the tree runs: the
#      card goes away; put back: it comes back (no restart)
# Checked by check_pipewire_spike in Tests/UseCase/VM/lib/check.py (recordings judged per 10 ms).
U=pwuser
G=pwgate
SPIKE=/run/pwspike
CAP=/dev/snd/pcmC0D0c
CTL=/dev/snd/controlC0

cp "$VM_TREE/udev-rules/72-devaccess-deny-by-default.rules" /etc/udev/rules.d/
udevadm control --reload
modprobe snd-aloop index=0
settle
make_user "$U"
groupadd --system "$G"
uid=$(id -u "$U")
ugid=$(id -g "$U")
ggid=$(getent group "$G" | cut -d: -f3)
RUNDIR=/run/user/$uid
HOMEDIR=/home/$U
mkdir -p "$RUNDIR" "$HOMEDIR" "$SPIKE"
chown "$U:$U" "$RUNDIR" "$HOMEDIR"
chmod 0700 "$RUNDIR"
id "$U" >"$OUT/id.out"
echo "$ggid" >"$OUT/gate-gid"
cat /proc/sys/kernel/yama/ptrace_scope >"$OUT/ptrace-scope" 2>&1 || true
rec versions dpkg-query -W pipewire wireplumber pipewire-pulse pulseaudio-utils dbus-daemon alsa-utils

# The gate: capture PCMs and control node name pwgate, nothing else (a devaccess microphone run's set).
for n in /dev/snd/pcmC0D*c "$CTL"; do setfacl -m "g:$G:rw" "$n"; done
rec nodes stat -c '%n %U %G %a' /dev/snd/controlC0 /dev/snd/pcmC0D0c /dev/snd/pcmC0D0p /dev/snd/pcmC0D1c /dev/snd/pcmC0D1p
rec udev-card udevadm info -q property -p /sys/class/sound/card0
rec nodes-getfacl getfacl -n -p /dev/snd/controlC0 /dev/snd/pcmC0D0c /dev/snd/pcmC0D0p /dev/snd/pcmC0D1c /dev/snd/pcmC0D1p

USER_ENV=(env -i PATH=/usr/bin:/bin LC_ALL=C.UTF-8 USER="$U" LOGNAME="$U" HOME="$HOMEDIR" XDG_RUNTIME_DIR="$RUNDIR")
# as_user CMD...: pwuser with its login groups (not audio, not pwgate), its own environment.
as_user() { setpriv --reuid="$U" --regid="$U" --init-groups -- "${USER_ENV[@]}" "$@"; }
# as_gate CMD...: the same user and environment, plus the gate group: the naive way to start the tree.
as_gate() { setpriv --reuid="$U" --regid="$U" --groups="$ugid,$ggid" -- "${USER_ENV[@]}" "$@"; }

# errno of open(2) of $1 for reading, as the calling user ("opened" if it opened).
cat >"$SPIKE/open.py" <<'EOF'
import errno, os, sys
try:
    os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK))
    print("opened")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
EOF
ARECORD=(arecord -D hw:Loopback,0,0 -d 1 -f S16_LE -c 2 -r 48000 -t raw)

mark a0
rec a0-arecord as_user "${ARECORD[@]}" /dev/null
rec a0-arecord-strace as_user strace -f -e trace=access,open,openat "${ARECORD[@]}" /dev/null
rec a0-open as_user python3 "$SPIKE/open.py" "$CAP"
rec a0-open-ctl as_user python3 "$SPIKE/open.py" "$CTL"
rec a0-gate-arecord as_gate "${ARECORD[@]}" /dev/null
probe_opens "$U" a0 "$CAP" /dev/snd/pcmC0D1c "$CTL"

# The sine, 440 Hz at half scale (RMS 11585), played by root once the gated tree has the card:
# PipeWire's ALSA monitor also leaves a card alone while any of its substreams is open.
cat >"$SPIKE/sine.py" <<'EOF'
import math, struct, sys
one = b"".join(struct.pack("<hh", v, v) for v in
               (int(16384 * math.sin(2 * math.pi * 440 * i / 48000)) for i in range(48000)))
try:
    while True:
        sys.stdout.buffer.write(one)
except BrokenPipeError:
    pass
EOF

# tree.sh DIR: the instance, started inside whatever wraps it (setpriv, dbus-run-session):
# pipewire, then wireplumber and pipewire-pulse once its socket is there; pids and exit
# statuses into DIR; ends everything when DIR/stop appears.
cat >"$SPIKE/tree.sh" <<'EOF'
d=$1
pipewire >"$d/pipewire.log" 2>&1 &
pw=$!
echo "$pw" >"$d/pipewire.pid"
for _ in $(seq 1 400); do [ -S "$XDG_RUNTIME_DIR/pipewire-0" ] && break; sleep 0.05; done
wireplumber >"$d/wireplumber.log" 2>&1 &
wp=$!
echo "$wp" >"$d/wireplumber.pid"
pipewire-pulse >"$d/pipewire-pulse.log" 2>&1 &
pp=$!
echo "$pp" >"$d/pipewire-pulse.pid"
env >"$d/env"
while [ ! -e "$d/stop" ]; do sleep 0.1; done
for p in "$wp" "$pp" "$pw"; do kill -TERM "$p" 2>/dev/null; done
for n in wireplumber:$wp pipewire-pulse:$pp pipewire:$pw; do
  wait "${n#*:}"; echo "$?" >"$d/${n%%:*}.rc"
done
EOF

# source_nodes: the instance's Audio/Source nodes as root sees them (the manager's view),
# one "id name api.alsa.path alsa.device" line each; ALSA devices ("id device NAME PROFILE");
# "id settled auto_null -" once WirePlumber has run its policy (its fallback sink).
cat >"$SPIKE/nodes.py" <<'EOF'
import json, sys
try:
    objs = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
for o in objs:
    p = (o.get("info") or {}).get("props") or {}
    t = o.get("type", "").rsplit(":", 1)[-1]
    if t == "Node" and p.get("media.class") == "Audio/Source":
        print(o["id"], p.get("node.name"), p.get("api.alsa.path", "-"), p.get("alsa.device", "-"))
    elif t == "Device" and p.get("device.api") == "alsa":
        print(o["id"], "device", p.get("device.name"), p.get("device.profile", "-"))
    elif t == "Node" and p.get("node.name") == "auto_null":
        print(o["id"], "settled", "auto_null", "-")
EOF
pwdump() { PIPEWIRE_REMOTE="$RUNDIR/pipewire-0" timeout 10 pw-dump 2>/dev/null; }
source_nodes() { pwdump | python3 "$SPIKE/nodes.py"; }

# start_tree NAME WRAPPER...: the tree under WRAPPER (as_gate, gated_start, ...) in the background.
start_tree() {
  local name=$1
  shift
  rm -rf "${SPIKE:?}/$name" "$RUNDIR"/pipewire-0* "$RUNDIR/pulse"
  mkdir -p "$SPIKE/$name"
  chown "$U" "$SPIKE/$name"
  T0=${EPOCHREALTIME/./}
  "$@" bash "$SPIKE/tree.sh" "$SPIKE/$name" >"$OUT/$name-launcher.out" 2>&1 </dev/null &
  echo $! >"$SPIKE/$name.launcher"
}
since() { printf '%s\n' $(((${EPOCHREALTIME/./} - T0) / 1000)); }
# wait_tree NAME SECONDS: times (ms from the start) until the native socket, the pulse socket,
# WirePlumber's policy has run (settled) and an ALSA Audio/Source node exists, into
# NAME-times.tsv; the nodes into NAME-nodes.out. Gives up when wireplumber has exited, or
# (with ANY_SETTLED=1) once settled without a source.
wait_tree() {
  local name=$1 limit=$(($2 * 1000)) sock='' pulse='' settled='' node='' wp seen
  while (($(since) < limit)); do
    [[ -z $sock && -S $RUNDIR/pipewire-0 ]] && sock=$(since)
    [[ -z $pulse && -S $RUNDIR/pulse/native ]] && pulse=$(since)
    if [[ -n $sock ]]; then
      seen=$(source_nodes || true)
      [[ -z $settled && $seen == *settled* ]] && settled=$(since)
      [[ -z $node && $seen == *alsa_input* ]] && node=$(since)
    fi
    [[ -n $sock && -n $pulse && -n $node ]] && break
    [[ ${ANY_SETTLED:-0} == 1 && -n $pulse && -n $settled ]] && break
    wp=$(cat "$SPIKE/$name/wireplumber.pid" 2>/dev/null || true)
    [[ -n $wp ]] && ! kill -0 "$wp" 2>/dev/null && break
    kill -0 "$(cat "$SPIKE/$name.launcher")" 2>/dev/null || break
    sleep 0.5
  done
  printf 'socket\t%s\npulse\t%s\nsettled\t%s\nsource\t%s\n' "${sock:-none}" "${pulse:-none}" \
    "${settled:-none}" "${node:-none}" >"$OUT/$name-times.tsv"
  source_nodes >"$OUT/$name-nodes.out" || true
}
# tree_procs NAME: each process of the tree: alive?, its Groups line and memory.
tree_procs() {
  local name=$1 p pid
  for p in pipewire wireplumber pipewire-pulse; do
    pid=$(cat "$SPIKE/$name/$p.pid" 2>/dev/null) || continue
    if [[ -r /proc/$pid/status ]]; then
      printf '%s\t%s\t%s\t%s\t%s\n' "$p" "$pid" \
        "$(awk '/^Groups:/ {$1=""; print substr($0,2)}' "/proc/$pid/status")" \
        "$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")" "$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")"
    else
      printf '%s\t%s\tgone\n' "$p" "$pid"
    fi
  done
}
# stop_tree NAME: ends the tree and keeps its logs, pids and exit statuses.
stop_tree() {
  local name=$1
  local rc=0
  : >"$SPIKE/$name/stop"
  wait "$(cat "$SPIKE/$name.launcher")" 2>/dev/null || rc=$?
  echo "$rc" >"$OUT/$name-launcher.rc"
  mkdir -p "$OUT/$name"
  cp -r "$SPIKE/$name/." "$OUT/$name/"
}

# --- c: what WirePlumber needs ------------------------------------------------------------
# c_phase NAME WRAPPER...: the stock tree under WRAPPER until WirePlumber exits or settles.
c_phase() {
  local name=$1
  shift
  mark "$name"
  ls -d /run/systemd/seats /run/systemd/sessions /run/systemd/users >"$OUT/$name-run-systemd.out" 2>&1 || true
  start_tree "$name" "$@"
  ANY_SETTLED=1 wait_tree "$name" 90
  tree_procs "$name" >"$OUT/$name-procs.tsv"
  stop_tree "$name"
}
c_phase c1 as_gate
c_phase c2 as_gate dbus-run-session --
mkdir -p /run/systemd/seats /run/systemd/sessions /run/systemd/users
c_phase c3 as_gate
c_phase c4 as_gate dbus-run-session --

# --- h: the user's own files run inside a naively started tree ------------------------------
# grab.sh NAME: what a hostile program does with the tree's credentials: say who it is, record.
cat >"$HOMEDIR/grab.sh" <<EOF
#!/bin/sh
d=$SPIKE/grab
mkdir -p "\$d"
id >"\$d/\$1.id"
${ARECORD[*]} "\$d/\$1.raw" 2>"\$d/\$1.err"
echo "\$?" >"\$d/\$1.rc"
EOF
mkdir -p "$HOMEDIR/.config/pipewire/pipewire.conf.d" "$HOMEDIR/.config/wireplumber/main.lua.d" \
  "$RUNDIR/dbus-1/services" "$SPIKE/grab"
printf 'context.exec = [ { path = "%s" args = "pipewire-exec" } ]\n' "$HOMEDIR/grab.sh" \
  >"$HOMEDIR/.config/pipewire/pipewire.conf.d/99-grab.conf"
printf '#include <stdlib.h>\n__attribute__((constructor)) static void grab(void) { system("%s wireplumber-loadlib"); }\n' \
  "$HOMEDIR/grab.sh" >"$SPIKE/grab.c"
rec h-cc cc -shared -fPIC -o "$HOMEDIR/grab.so" "$SPIKE/grab.c"
printf 'package.loadlib("%s", "*")\n' "$HOMEDIR/grab.so" >"$HOMEDIR/.config/wireplumber/main.lua.d/99-grab.lua"
printf '[D-BUS Service]\nName=org.example.Grab\nExec=%s dbus-activation\n' "$HOMEDIR/grab.sh" \
  >"$RUNDIR/dbus-1/services/org.example.Grab.service"
chmod 0755 "$HOMEDIR/grab.sh"
chown -R "$U:$U" "$HOMEDIR" "$RUNDIR" "$SPIKE/grab"
find "$HOMEDIR" "$RUNDIR/dbus-1" -type f -printf '%p %u %m\n' >"$OUT/h-hostile-files.out"

mark h-naive
start_tree h as_gate dbus-run-session --
ANY_SETTLED=1 wait_tree h 90
# The user's plain shell asks the tree's session bus (its address is in the tree's environ,
# which a same-uid process reads) to start the service the user wrote.
addr=$(tr '\0' '\n' <"/proc/$(cat "$SPIKE/h/pipewire.pid")/environ" | sed -n 's/^DBUS_SESSION_BUS_ADDRESS=//p' || true)
echo "$addr" >"$OUT/h-bus-address.out"
rec h-activate as_user env DBUS_SESSION_BUS_ADDRESS="$addr" timeout 20 dbus-send --session --print-reply \
  --dest=org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus.StartServiceByName \
  string:org.example.Grab uint32:0
for _ in $(seq 1 50); do [[ -e $SPIKE/grab/dbus-activation.rc ]] && break; sleep 0.2; done
tree_procs h >"$OUT/h-procs.tsv"
rec h-ps ps -o pid,ppid,uid,supgid,args -e
stop_tree h
cp -r "$SPIKE/grab" "$OUT/h-grab"
rm -rf "${SPIKE:?}/grab"/*

# --- g: the hardened start --------------------------------------------------------------
# Root-owned copies of the stock configuration; WirePlumber's D-Bus users (device
# reservation, the portal permission store, Bluetooth with its logind plugin) turned off.
CFG=$SPIKE/config
mkdir -p "$CFG"
cp -a /usr/share/pipewire "$CFG/pipewire"
cp -a /usr/share/wireplumber "$CFG/wireplumber"
cat >"$CFG/wireplumber/main.lua.d/51-gated.lua" <<'EOF'
alsa_monitor.properties["alsa.reserve"] = false
default_access.properties["enable-flatpak-portal"] = false
EOF
echo '-- Bluetooth (and with it the logind plugin) off in the gated instance' \
  >"$CFG/wireplumber/bluetooth.lua.d/90-enable-all.lua"
chown -R root:root "$CFG"
mkdir -p "$SPIKE/state-$U"
chown "$U:$U" "$SPIKE/state-$U"
# gated_start CMD...: pwuser with the gate group, an environment root chose (no HOME the user
# writes, config from root's copies, state in a data-only folder), no session bus.
gated_start() {
  setpriv --reuid="$U" --regid="$U" --groups="$ugid,$ggid" -- env -i PATH=/usr/bin:/bin LC_ALL=C.UTF-8 \
    USER="$U" LOGNAME="$U" HOME=/nonexistent XDG_CONFIG_HOME=/nonexistent XDG_DATA_HOME=/nonexistent \
    XDG_STATE_HOME="$SPIKE/state-$U" XDG_RUNTIME_DIR="$RUNDIR" \
    PIPEWIRE_CONFIG_DIR="$CFG/pipewire" WIREPLUMBER_CONFIG_DIR="$CFG/wireplumber" \
    DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent WIREPLUMBER_DEBUG=4 "$@"
}

# No logind directories for the hardened tree: Bluetooth, which loads the logind plugin, is off.
rm -rf /run/systemd

# The monitor checks access(2) on the control node and every pcmC0D* node, playback too.
for n in /dev/snd/pcmC0D*p; do setfacl -m "g:$G:rw" "$n"; done
rec g-access as_gate python3 -c 'import glob, os
for p in sorted(glob.glob("/dev/snd/*C0*")): print(p, os.access(p, os.R_OK | os.W_OK))'
mark g-start
start_tree g gated_start
wait_tree g 180
# Above the tree's priority, with a 1 s buffer: a gap in what it plays is not PipeWire's.
python3 "$SPIKE/sine.py" | nice -n -10 aplay -q -D hw:Loopback,1,0 --buffer-time=1000000 \
  -f S16_LE -c 2 -r 48000 -t raw - 2>"$OUT/sine.err" &
sine=$!
rec g-getfacl getfacl -n -p /dev/snd/controlC0 /dev/snd/pcmC0D0c /dev/snd/pcmC0D0p /dev/snd/pcmC0D1c /dev/snd/pcmC0D1p
pwdump >"$OUT/g-pwdump.json" || true
tree_procs g >"$OUT/g-procs-idle.tsv"
rec g-ps ps -o pid,ppid,uid,gid,supgid,rss,args -e

mark a1
rec a1-arecord as_user "${ARECORD[@]}" /dev/null
rec a1-open as_user python3 "$SPIKE/open.py" "$CAP"

# The recording target: the card's Audio/Source node (front:0, i.e. hw:Loopback,0,0's PCM).
target=$(awk '$2 ~ /^alsa_input/ { print $2; exit }' "$OUT/g-nodes.out")
echo "${target:-none}" >"$OUT/b-target.out"

# fds_now NAME: which process of the tree holds which /dev/snd node.
fds_now() {
  local p pid
  for p in pipewire wireplumber pipewire-pulse; do
    pid=$(cat "$SPIKE/g/$p.pid" 2>/dev/null) || continue
    for fd in /proc/"$pid"/fd/*; do
      l=$(readlink "$fd" 2>/dev/null) || continue
      if [[ $l == /dev/snd/* ]]; then printf '%s\t%s\t%s\n' "$p" "${fd##*/}" "$l"; fi
    done
  done >"$OUT/$1.tsv"
  return 0
}
fds_now b-fds-idle

# steal.py PID: a same-uid process takes a copy of PID's descriptor of the capture PCM
# (pidfd_open + pidfd_getfd, the kernel's ptrace access check) and reads from it.
cat >"$SPIKE/steal.py" <<'EOF'
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
fds = []
for f in os.listdir(f"/proc/{pid}/fd"):
    try:
        if os.readlink(f"/proc/{pid}/fd/{f}") == sys.argv[2]:
            fds.append(int(f))
    except OSError:
        pass
if not fds:
    print("no-fd"); sys.exit(0)
pidfd = libc.syscall(434, pid, 0)
if pidfd < 0:
    print("pidfd_open", errno.errorcode[ctypes.get_errno()]); sys.exit(0)
fd = libc.syscall(438, pidfd, fds[0], 0)
if fd < 0:
    print("pidfd_getfd", errno.errorcode[ctypes.get_errno()]); sys.exit(0)
print("got-fd", fd, os.readlink(f"/proc/self/fd/{fd}"))
EOF

mkdir -p "$SPIKE/rec"
chown "$U" "$SPIKE/rec"
mark b-pw-record
as_user timeout -s INT 15 pw-record --target "$target" --rate 48000 --channels 2 --format s16 \
  "$SPIKE/rec/b-pw-record.wav" >"$OUT/b-pw-record.out" 2>"$OUT/b-pw-record.err" </dev/null &
rec_pid=$!
# Every process holding a PCM while pw-record runs (sampled), and the user's steal attempts on it.
: >"$OUT/b-pcm-holders.tsv"
while kill -0 "$rec_pid" 2>/dev/null; do
  # One find(1) a round: a readlink per descriptor is too slow under TCG to see a 6 s stream.
  find /proc/[0-9]*/fd -lname '/dev/snd/pcm*' -printf '%p\t%l\n' 2>/dev/null \
    | while IFS=$'\t' read -r fd l; do
        pid=${fd#/proc/}
        pid=${pid%%/*}
        printf '%s\t%s\t%s\n' "$(cat "/proc/$pid/comm" 2>/dev/null)" "$pid" "$l"
      done >>"$OUT/b-pcm-holders.tsv" || true
  holder=$(awk -F'\t' -v cap="$CAP" '$3 == cap && $1 != "aplay" { print $2; exit }' "$OUT/b-pcm-holders.tsv")
  if [[ -n $holder && ! -e $OUT/b-steal.out ]]; then
    fds_now b-fds-pw-record
    rec b-arecord-during as_user "${ARECORD[@]}" /dev/null
    rec b-open-during as_user python3 "$SPIKE/open.py" "$CAP"
    rec b-steal as_user python3 "$SPIKE/steal.py" "$holder" "$CAP"
  fi
  sleep 0.3
done
sort -u -o "$OUT/b-pcm-holders.tsv" "$OUT/b-pcm-holders.tsv"
rc=0
wait "$rec_pid" || rc=$?
echo "$rc" >"$OUT/b-pw-record.rc"
tree_procs g >"$OUT/g-procs-recording.tsv"

mark b-parecord
rec b-parecord as_user timeout -s INT 10 parecord -d "$target" --rate=48000 --channels=2 --format=s16le \
  --file-format=wav "$SPIKE/rec/b-parecord.wav"
tree_procs g >"$OUT/g-procs-after.tsv"
cp "$SPIKE"/rec/b-*.wav "$OUT/" 2>/dev/null || true
ls -la "$SPIKE/grab" >"$OUT/g-grab.out" 2>&1

kill "$sine" 2>/dev/null || true
wait "$sine" 2>/dev/null || true
# e: one playback PCM loses the gate's entry; the monitor (inotify on /dev/snd) drops the card.
mark e-playback-acl-off
setfacl -x "g:$G" /dev/snd/pcmC0D0p
sleep 5
source_nodes >"$OUT/e-nodes-off.out" || true
setfacl -m "g:$G:rw" /dev/snd/pcmC0D0p
sleep 5
source_nodes >"$OUT/e-nodes-on.out" || true

mark g-stop
stop_tree g
cp "$SPIKE/tree.sh" "$CFG/wireplumber/main.lua.d/51-gated.lua" "$OUT/"
mark finished
