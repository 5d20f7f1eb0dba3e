#!/usr/bin/env bash
# Builds the guest kernel + initramfs once into the cache folder and prints the
# folder holding vmlinuz, initrd.gz and kver. Rebuilds the initramfs when this
# script or the guest init changes; downloads the kernel only when missing.
#
# Usage: build-image.sh CACHE_DIR
set -euo pipefail

die() { printf 'build-image: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 1 ]] || die "usage: build-image.sh CACHE_DIR"
cache=$1
lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Modules the scenarios load at run time, plus what the initramfs needs to reach
# the host (virtio 9p) and to make the host's root writable (overlay).
runtime_modules=(vivid snd-dummy snd-aloop snd-pcsp)  # snd-pcsp: a playback-only card
early_modules=(virtio_pci 9pnet_virtio 9p overlay)

for tool in apt-cache apt-get dpkg-deb dpkg-query depmod modprobe cpio gzip sha256sum python3; do
  command -v "$tool" >/dev/null || die "missing '$tool': install the packages in Tests/UseCase/VM/packages.txt"
done
# busybox-static's binary runs in the initramfs without any shared library.
busybox_bin=/bin/busybox
dpkg-query -S "$busybox_bin" 2>/dev/null | grep -q '^busybox-static:' \
  || die "need a static busybox at $busybox_bin: apt-get install busybox-static"

# The kernel package that the linux-image-amd64 meta package points at.
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null \
  | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')
[[ -n $kpkg ]] || die "cannot resolve linux-image-amd64 to a kernel package; run 'apt-get update' first"

stamp=$( { printf '%s\n' "$kpkg" "${runtime_modules[@]}" "${early_modules[@]}";
           cat "${BASH_SOURCE[0]}" "$lib_dir/init" "$lib_dir/extract-vmlinux.py"; } | sha256sum | cut -c1-16)
out=$cache/$kpkg
if [[ -f $out/stamp && $(cat "$out/stamp") == "$stamp" ]]; then
  printf '%s\n' "$out"
  exit 0
fi

mkdir -p "$out"
deb=$(find "$out" -maxdepth 1 -name "${kpkg}_*.deb" -print -quit)
if [[ -z $deb ]]; then
  echo "build-image: downloading $kpkg (about 70 MB)" >&2
  # apt-get download writes into the current directory.
  if ! (cd "$out" && apt-get download "$kpkg" >&2); then
    die "'apt-get download $kpkg' failed: check the Debian mirror in /etc/apt/sources.list and run 'apt-get update'"
  fi
  deb=$(find "$out" -maxdepth 1 -name "${kpkg}_*.deb" -print -quit)
  [[ -n $deb ]] || die "apt-get download $kpkg produced no .deb in $out"
fi

work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$deb" "$work/pkg"
kver=$(find "$work/pkg/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -n1)
[[ -n $kver && -f $work/pkg/boot/vmlinuz-$kver ]] || die "no kernel found in $deb"
# The .deb ships no modules.dep; depmod makes one so modprobe can compute closures.
depmod -b "$work/pkg" "$kver"

root=$work/initramfs
mkdir -p "$root"/{bin,dev,proc,sys,lower,rw,newroot} "$root/lib/modules/$kver"
cp "$busybox_bin" "$root/bin/busybox"
cp "$lib_dir/init" "$root/init"
chmod 0755 "$root/init"
printf '%s\n' "$kver" >"$root/kver"

# Copy the dependency closure of every module, keeping the kernel's layout so
# the guest's own modprobe/rmmod work on them later.
closure() {
  modprobe -d "$work/pkg" -S "$kver" --show-depends "$1" \
    | awk '$1 == "insmod" { print $2 }'
}
: >"$root/early-modules"
for m in "${early_modules[@]}" "${runtime_modules[@]}"; do
  mods=$(closure "$m") || die "module $m not found in $kpkg"
  if [[ -z $mods ]]; then
    # Built into the kernel: nothing to load.
    modprobe -d "$work/pkg" -S "$kver" --show-depends "$m" | grep -q '^builtin' \
      || die "module $m: no closure"
    continue
  fi
  while IFS= read -r path; do
    rel=${path#"$work/pkg/lib/modules/$kver/"}
    mkdir -p "$root/lib/modules/$kver/$(dirname "$rel")"
    cp -n "$path" "$root/lib/modules/$kver/$rel"
    if [[ " ${early_modules[*]} " == *" $m "* ]] && ! grep -qxF "$rel" "$root/early-modules"; then
      printf '%s\n' "$rel" >>"$root/early-modules"
    fi
  done <<<"$mods"
done
cp "$work/pkg/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$kver/" 2>/dev/null || true
depmod -b "$root" "$kver"

(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) | gzip -6 >"$work/initrd.gz"
cp "$work/pkg/boot/vmlinuz-$kver" "$out/vmlinuz"
# An uncompressed ELF kernel boots about 4 s faster under TCG (PVH entry, no
# self-decompression); run-scenarios.sh falls back to vmlinuz without it.
rm -f "$out/vmlinux"
python3 "$lib_dir/extract-vmlinux.py" "$out/vmlinuz" "$work/vmlinux" && mv "$work/vmlinux" "$out/vmlinux"
mv "$work/initrd.gz" "$out/initrd.gz"
printf '%s\n' "$kver" >"$out/kver"
printf '%s\n' "$stamp" >"$out/stamp"
echo "build-image: built $out (kernel $kver, $(wc -l <"$root/early-modules") early modules)" >&2
printf '%s\n' "$out"
