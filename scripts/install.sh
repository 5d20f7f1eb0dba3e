#!/usr/bin/env bash
# Installs devaccess: the devaccess and devaccessd binaries, the systemd unit, the
# sysusers.d and tmpfiles.d files, the udev rules, the default policy, the PAM service,
# the man pages and the bash, zsh and fish completions. Then, when installing into the live system (no DESTDIR), creates
# the group devaccess-admin and the directories and reloads udev and systemd -- each only when its tool
# is present, so it works (and never fails) on machines without systemd as PID 1.
#
# Environment (defaults in brackets):
#   PREFIX        [/usr/local]   BINDIR [$PREFIX/bin]   SBINDIR [$PREFIX/sbin]
#   MANDIR        [$PREFIX/share/man]   SYSCONFDIR [/etc]
#   UNITDIR       [$PREFIX/lib/systemd/system]   (systemd reads /usr/local/lib/systemd/system too)
#   SYSUSERSDIR   [$PREFIX/lib/sysusers.d]       TMPFILESDIR [$PREFIX/lib/tmpfiles.d]
#   UDEVRULESDIR  [/usr/lib/udev/rules.d when PREFIX=/usr, else $SYSCONFDIR/udev/rules.d:
#                  udev does not read /usr/local]
#   DESTDIR       [empty]  staging root for packaging; nothing is activated when set
#   BUILD_DIR     [.build/release]  where the binaries are; built with
#                 'swift build -c release --static-swift-stdlib' when missing and swift is on PATH
#
# Files in udev-rules/ ending in .rules are installed as active rules, except those
# whose first lines say OPT-IN (deny-by-default); those and anything else there
# (READMEs) go to $PREFIX/share/devaccess/udev-rules/ for the admin to enable by hand.
# Existing policy and PAM files are never overwritten: the new one is put beside it
# with a .new suffix.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")

case "${1:-}" in
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    "") ;;
    *) echo "install.sh: unknown argument '$1' (settings come from the environment; see --help)" >&2; exit 64 ;;
esac

# shellcheck source=install-paths.sh
source "$here/install-paths.sh"
BUILD_DIR=${BUILD_DIR:-$root/.build/release}

say() { echo "install.sh: $*"; }
warn() { echo "install.sh: $*" >&2; }

if [ -z "$DESTDIR" ] && [ "$(id -u)" -ne 0 ]; then
    warn "installing into the live system needs root (or set DESTDIR to stage the files)"
    exit 1
fi

# --- binaries -------------------------------------------------------------------
if [ ! -x "$BUILD_DIR/devaccess" ] || [ ! -x "$BUILD_DIR/devaccessd" ]; then
    if command -v swift >/dev/null 2>&1 && [ "$BUILD_DIR" = "$root/.build/release" ]; then
        say "building release binaries (swift build -c release --static-swift-stdlib)"
        (cd "$root" && swift build -c release --static-swift-stdlib --product devaccess \
            && swift build -c release --static-swift-stdlib --product devaccessd)
    else
        warn "no devaccess/devaccessd in $BUILD_DIR; build them first (make release) or set BUILD_DIR"
        exit 1
    fi
fi

put() {  # put MODE SOURCE TARGET: install one file, creating directories
    install -D -m "$1" "$2" "$DESTDIR$3"
    say "installed $3"
}

put_config() {  # like put, but never overwrites a file an admin may have edited
    local target=$DESTDIR$3
    if [ -e "$target" ] && ! cmp -s "$2" "$target"; then
        install -D -m "$1" "$2" "$target.new"
        say "kept $3 (differs from the shipped one); the new one is $3.new"
    else
        put "$1" "$2" "$3"
    fi
}

put 0755 "$BUILD_DIR/devaccess" "$BINDIR/devaccess"
put 0755 "$BUILD_DIR/devaccessd" "$SBINDIR/devaccessd"

# --- systemd unit, groups, directories -------------------------------------------
unit=$(mktemp)
trap 'rm -f "$unit"' EXIT
sed "s|^ExecStart=/usr/sbin/devaccessd|ExecStart=$SBINDIR/devaccessd|" "$root/config/devaccessd.service" > "$unit"
put 0644 "$unit" "$UNITDIR/devaccessd.service"
put 0644 "$root/config/devaccess.sysusers" "$SYSUSERSDIR/devaccess.conf"
put 0644 "$root/config/devaccess.tmpfiles" "$TMPFILESDIR/devaccess.conf"

# --- udev rules -------------------------------------------------------------------
# A rules file whose header says OPT-IN (deny-by-default) is never made active here.
for file in "$root"/udev-rules/*; do
    [ -f "$file" ] || continue
    name=$(basename "$file")
    if [[ "$name" == *.rules ]] && ! head -n 3 "$file" | grep -q 'OPT-IN'; then
        put 0644 "$file" "$UDEVRULESDIR/$name"
    else
        put 0644 "$file" "$DATADIR/udev-rules/$name"
    fi
done

# --- policy, PAM ----------------------------------------------------------------------
if [ -f "$root/config/devaccess.conf" ]; then
    put_config 0644 "$root/config/devaccess.conf" "$SYSCONFDIR/devaccess/devaccess.conf"
fi
# The gpsd gate: installed, never loaded by this script (it changes the firewall).
put_config 0644 "$root/config/nftables/devaccess-gpsd.nft" "$SYSCONFDIR/devaccess/nftables/devaccess-gpsd.nft"
if [ -d "$root/config/pam.d" ]; then
    for file in "$root"/config/pam.d/*; do
        [ -f "$file" ] && put_config 0644 "$file" "$SYSCONFDIR/pam.d/$(basename "$file")"
    done
fi

# --- man pages ----------------------------------------------------------------------
for page in "$root"/docs/*.1 "$root"/docs/*.5 "$root"/docs/*.8; do
    [ -f "$page" ] || continue
    section=${page##*.}
    put 0644 "$page" "$MANDIR/man$section/$(basename "$page")"
done

# --- shell completions (made by the binary from its own command table) -------------
completions=$(mktemp -d)
trap 'rm -f "$unit"; rm -rf "$completions"' EXIT
for shell in bash zsh fish; do
    "$BUILD_DIR/devaccess" completion "$shell" > "$completions/$shell"
done
put 0644 "$completions/bash" "${COMPLETIONDIRS[0]}/devaccess"
put 0644 "$completions/zsh" "${COMPLETIONDIRS[1]}/_devaccess"
put 0644 "$completions/fish" "${COMPLETIONDIRS[2]}/devaccess.fish"

if [ -n "$DESTDIR" ]; then
    say "staged under $DESTDIR; nothing activated"
    exit 0
fi

# --- activation (live system only; every step optional) ---------------------------------
if command -v systemd-sysusers >/dev/null 2>&1; then
    if systemd-sysusers "$SYSUSERSDIR/devaccess.conf"; then
        say "group devaccess-admin created (systemd-sysusers)"
    else
        warn "systemd-sysusers failed; create the group by hand (groupadd -r devaccess-admin)"
    fi
else
    getent group devaccess-admin >/dev/null || groupadd -r devaccess-admin || warn "groupadd devaccess-admin failed"
    say "group devaccess-admin created (groupadd)"
fi
if command -v systemd-tmpfiles >/dev/null 2>&1; then
    if systemd-tmpfiles --create "$TMPFILESDIR/devaccess.conf"; then
        say "directories created (systemd-tmpfiles)"
    else
        warn "systemd-tmpfiles failed; create /run/devaccess (root, 0755) and /var/lib/devaccess (root, 0700)"
    fi
else
    install -d -m 0755 -o root -g root /run/devaccess
    install -d -m 0700 -o root -g root /var/lib/devaccess
    say "directories created"
fi
if command -v udevadm >/dev/null 2>&1 && udevadm control --reload 2>/dev/null; then
    udevadm trigger --action=change --subsystem-match=video4linux --subsystem-match=sound \
        --subsystem-match=tty 2>/dev/null || true
    say "udev rules reloaded and applied"
else
    say "udevd is not running; the rules apply from its next start"
fi
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    systemctl daemon-reload || warn "systemctl daemon-reload failed"
    say "start the broker with: systemctl enable --now devaccessd"
else
    say "systemd is not running: start the broker by hand: $SBINDIR/devaccessd &"
fi
say "check the installation with: devaccess doctor"
