#!/usr/bin/env python3
"""Extract the uncompressed ELF kernel from a bzImage, for a PVH boot.

Usage: extract-vmlinux.py BZIMAGE OUT

Under TCG the kernel's self-decompression costs about 4 s per boot; QEMU boots
an ELF vmlinux that carries a PVH entry note directly. Exits 1 (and writes
nothing) if the payload is not xz/gzip or the ELF has no PVH note, so the
caller can fall back to the bzImage.
"""

import gzip
import lzma
import struct
import sys
import zlib

XEN_ELFNOTE_PHYS32_ENTRY = 18


def payload(image):
    for magic, unpack in ((b"\xfd7zXZ\x00", lambda d: lzma.LZMADecompressor().decompress(d)),
                          (b"\x1f\x8b\x08", lambda d: zlib.decompressobj(31).decompress(d))):
        off = image.find(magic)
        while off >= 0:
            try:
                data = unpack(image[off:])
                if data.startswith(b"\x7fELF"):
                    return data
            except (lzma.LZMAError, zlib.error, gzip.BadGzipFile):
                pass
            off = image.find(magic, off + 1)
    return None


def has_pvh_note(elf):
    if elf[4] != 2 or elf[5] != 1:  # 64-bit little-endian only
        return False
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _flags, p_offset, _va, _pa, p_filesz = struct.unpack_from(
            "<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != 4:  # PT_NOTE
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 64
    with open(sys.argv[1], "rb") as f:
        elf = payload(f.read())
    if elf is None or not has_pvh_note(elf):
        print("extract-vmlinux: no PVH-capable ELF kernel inside; booting the bzImage",
              file=sys.stderr)
        return 1
    with open(sys.argv[2], "wb") as f:
        f.write(elf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
