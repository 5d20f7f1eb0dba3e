#!/usr/bin/env bash
# Installs every Debian package devaccess needs to build and to run its whole test
# suite, the VM test bed included. Run as root on Debian 12.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps.sh: run as root (sudo $0)" >&2
    exit 1
fi

packages=()
for list in "$here/debian-packages.txt" "$root/Tests/UseCase/VM/packages.txt"; do
    [ -f "$list" ] || continue
    while read -r line; do
        line=${line%%#*}
        for word in $line; do packages+=("$word"); done
    done < "$list"
done

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
echo "install-deps.sh: ${#packages[@]} packages present"

if ! command -v swift >/dev/null 2>&1; then
    echo "install-deps.sh: no 'swift' on PATH; install Swift 6.3 from swift.org (not a Debian package)" >&2
    exit 1
fi
