#!/usr/bin/env bash
# Removes what scripts/install.sh installed, with the same settings (PREFIX, DESTDIR and
# the other directories: see install.sh --help). The ledger (/var/lib/devaccess) is the
# audit trail and every decision: it stays unless --purge is given. A policy, PAM or
# nftables file that differs from the shipped one was edited by an admin: it stays too,
# unless --purge. On the live system (no DESTDIR) devaccessd is stopped and disabled
# first, and udev and systemd reload afterwards, each only when its tool is there. The
# groups stay (files and ACLs may still name them); `groupdel` them by hand.
#
# Usage: uninstall.sh [--purge]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")

purge=false
case "${1:-}" in
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    --purge) purge=true ;;
    "") ;;
    *) echo "uninstall.sh: unknown argument '$1' (--purge; settings come from the environment)" >&2; exit 64 ;;
esac

# shellcheck source=install-paths.sh
source "$here/install-paths.sh"
STATEDIR=/var/lib/devaccess

say() { echo "uninstall.sh: $*"; }
warn() { echo "uninstall.sh: $*" >&2; }

if [ -z "$DESTDIR" ] && [ "$(id -u)" -ne 0 ]; then
    warn "removing from the live system needs root (or set DESTDIR)"
    exit 1
fi

gone() {  # gone PATH: remove one installed file
    local target=$DESTDIR$1
    if [ -e "$target" ] || [ -L "$target" ]; then
        rm -f "$target"
        say "removed $1"
    fi
}

gone_config() {  # gone_config SHIPPED PATH: remove it unless an admin edited it (or --purge)
    local target=$DESTDIR$2
    [ -e "$target" ] || return 0
    if $purge || cmp -s "$1" "$target"; then
        rm -f "$target"
        say "removed $2"
    else
        say "kept $2 (edited; --purge removes it)"
    fi
    if [ -e "$target.new" ]; then
        rm -f "$target.new"
        say "removed $2.new"
    fi
}

prune() {  # prune DIR...: remove directories left empty; under DESTDIR up to its root
    local directory
    for directory in "$@"; do
        while [ -n "$directory" ] && [ "$directory" != / ]; do
            if [ -d "$DESTDIR$directory" ]; then rmdir "$DESTDIR$directory" 2>/dev/null || break; fi
            [ -n "$DESTDIR" ] || break  # the live system's own directories (/usr/local/bin) stay
            directory=$(dirname "$directory")
        done
    done
}

if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now devaccessd 2>/dev/null && say "stopped and disabled devaccessd" || true
fi

gone "$BINDIR/devaccess"
gone "$SBINDIR/devaccessd"
gone "$UNITDIR/devaccessd.service"
gone "$SYSUSERSDIR/devaccess.conf"
gone "$TMPFILESDIR/devaccess.conf"
for file in "$root"/udev-rules/*; do
    [ -f "$file" ] || continue
    gone "$UDEVRULESDIR/$(basename "$file")"
    gone "$DATADIR/udev-rules/$(basename "$file")"
done
gone_config "$root/config/devaccess.conf" "$SYSCONFDIR/devaccess/devaccess.conf"
gone_config "$root/config/nftables/devaccess-gpsd.nft" "$SYSCONFDIR/devaccess/nftables/devaccess-gpsd.nft"
if [ -d "$root/config/pam.d" ]; then
    for file in "$root"/config/pam.d/*; do
        [ -f "$file" ] && gone_config "$file" "$SYSCONFDIR/pam.d/$(basename "$file")"
    done
fi
for page in "$root"/docs/*.1 "$root"/docs/*.5 "$root"/docs/*.8; do
    [ -f "$page" ] || continue
    gone "$MANDIR/man${page##*.}/$(basename "$page")"
done
gone "${COMPLETIONDIRS[0]}/devaccess"
gone "${COMPLETIONDIRS[1]}/_devaccess"
gone "${COMPLETIONDIRS[2]}/devaccess.fish"

if $purge; then
    if [ -d "$DESTDIR$SYSCONFDIR/devaccess" ]; then
        rm -rf "$DESTDIR$SYSCONFDIR/devaccess"  # conf.d and the rest
        say "removed $SYSCONFDIR/devaccess"
    fi
    if [ -d "$DESTDIR$STATEDIR" ]; then
        rm -rf "$DESTDIR$STATEDIR"
        say "removed $STATEDIR (the ledger and its audit trail)"
    fi
elif [ -e "$DESTDIR$STATEDIR/ledger.db" ]; then
    say "kept $STATEDIR (the ledger and its audit trail; --purge removes it)"
fi

prune "$DATADIR/udev-rules" "$DATADIR" "$SYSCONFDIR/devaccess/nftables" "$SYSCONFDIR/devaccess"
if [ -n "$DESTDIR" ]; then
    prune "$BINDIR" "$SBINDIR" "$UNITDIR" "$SYSUSERSDIR" "$TMPFILESDIR" "$UDEVRULESDIR" "$SYSCONFDIR/pam.d" \
        "$MANDIR/man1" "$MANDIR/man5" "$MANDIR/man8" "${COMPLETIONDIRS[@]}" "$(dirname "$STATEDIR")"
fi

if [ -n "$DESTDIR" ]; then
    say "removed from under $DESTDIR"
    exit 0
fi
if command -v udevadm >/dev/null 2>&1 && udevadm control --reload 2>/dev/null; then
    say "udev rules reloaded"
fi
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    systemctl daemon-reload || warn "systemctl daemon-reload failed"
fi
say "done; the group devaccess-admin stays"
