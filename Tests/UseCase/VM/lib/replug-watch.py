#!/usr/bin/python3
"""Times one replug of a camera node in the guest (VM scenario hotplug-acl).

Usage: replug-watch.py NODE UID OUT.json  (started before `rmmod` + `modprobe`; prints
"listening" on stdout once its sockets are bound, exits when the new node carries a
named-user ACL entry for UID, or after 60 s).

All times are CLOCK_MONOTONIC seconds, for the add of NODE after it was removed:
- node:    when a stat() poll (every 1 ms) first saw the new node;
- kernel:  when the kernel's `add` uevent for NODE reached this socket (kernel receive
           stamp, SO_TIMESTAMPNS, moved to the monotonic clock): devtmpfs made the node
           just before it sends that uevent, so this is the node's appearance when the
           poll was late;
- udev:    when udevd's `add` event for NODE reached this socket: udevd broadcasts it
           after its rules, RUN programs and builtins are done, the same multicast
           devaccessd waits for;
- acl:     when a getxattr() poll (every 1 ms) first saw `user:UID` in the node's access
           ACL.
"""
import json
import os
import select
import socket
import struct
import sys
import time

NETLINK_KOBJECT_UEVENT = 15
SO_TIMESTAMPNS = 35
ACL_USER = 0x02


def has_user_entry(path, uid):
    try:
        raw = os.getxattr(path, "system.posix_acl_access")
    except OSError:
        return False
    for off in range(4, len(raw) - 7, 8):
        tag, _perm, ident = struct.unpack_from("<HHI", raw, off)
        if tag == ACL_USER and ident == uid:
            return True
    return False


def props(data):
    """KEY=VALUE pairs of a kernel uevent or a libudev message."""
    if data.startswith(b"libudev\0"):
        # libudev header: magic, then offsets (see libudev-monitor); properties at 40.
        off, length = struct.unpack_from("<II", data, 16)
        data = data[off:off + length]
    out = {}
    for item in data.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def main():
    node, uid, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    offset = time.clock_gettime(time.CLOCK_REALTIME) - time.monotonic()
    socks = {}
    for group, name in ((1, "kernel"), (2, "udev")):
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_KOBJECT_UEVENT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.bind((0, group))
        socks[s] = name
    print("listening", flush=True)
    seen = {"node": None, "kernel": None, "udev": None, "acl": None}
    removed = not os.path.exists(node)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select(list(socks), [], [], 0.001)
        for s in ready:
            data, anc, _flags, _addr = s.recvmsg(65536, 64)
            stamp = time.monotonic()
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", value[:16])
                    stamp = sec + nsec / 1e9 - offset
            p = props(data)
            if p.get("DEVNAME") not in (node, node.removeprefix("/dev/")):
                continue
            if p.get("ACTION") == "remove":
                removed = True
                for key in seen:
                    seen[key] = None
            elif p.get("ACTION") == "add" and removed and seen[socks[s]] is None:
                seen[socks[s]] = stamp
        now = time.monotonic()
        if removed and seen["node"] is None and os.path.exists(node):
            seen["node"] = now
        if removed and seen["node"] is not None and seen["acl"] is None and has_user_entry(node, uid):
            seen["acl"] = now
        if all(v is not None for v in seen.values()):
            break
    with open(out, "w") as f:
        json.dump(seen, f)


main()
