# shellcheck shell=bash
# Where devaccess's files go: the one definition install.sh and uninstall.sh both source,
# so what one puts somewhere the other takes from there. Settings come from the
# environment (see install.sh --help).
PREFIX=${PREFIX:-/usr/local}
PREFIX=${PREFIX%/}
BINDIR=${BINDIR:-$PREFIX/bin}
SBINDIR=${SBINDIR:-$PREFIX/sbin}
MANDIR=${MANDIR:-$PREFIX/share/man}
SYSCONFDIR=${SYSCONFDIR:-/etc}
UNITDIR=${UNITDIR:-$PREFIX/lib/systemd/system}
SYSUSERSDIR=${SYSUSERSDIR:-$PREFIX/lib/sysusers.d}
TMPFILESDIR=${TMPFILESDIR:-$PREFIX/lib/tmpfiles.d}
if [ -z "${UDEVRULESDIR:-}" ]; then
    if [ "$PREFIX" = /usr ]; then UDEVRULESDIR=/usr/lib/udev/rules.d; else UDEVRULESDIR=$SYSCONFDIR/udev/rules.d; fi
fi
DATADIR=$PREFIX/share/devaccess
COMPLETIONDIRS=("$PREFIX/share/bash-completion/completions" "$PREFIX/share/zsh/site-functions"
                "$PREFIX/share/fish/vendor_completions.d")
DESTDIR=${DESTDIR:-}
DESTDIR=${DESTDIR%/}
