import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessSystem
import DevAccessTestSupport

/// The fourth hostile review (2026-12-07): an unprivileged local user against the consent
/// answer, `devaccess run`'s opening of the program, the judge of strict runs, the open
/// audit budget and the protocol version.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, mounts FUSE, makes users"))
struct HostileReview4Tests {
    /// A FUSE server that answers INIT and the root's GETATTR and never answers a LOOKUP:
    /// a lookup under its mount waits for it, and once the server has read the request not
    /// even SIGKILL ends the waiting process (the kernel waits the request out). A user
    /// mounts one with the setuid `fusermount3`; here root mounts it for the user
    /// (`user_id`), which is the same mount as far as the lookup is concerned.
    static let holdingFuseServer = """
        import ctypes, os, struct, sys
        mnt, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        fd = os.open("/dev/fuse", os.O_RDWR)
        libc = ctypes.CDLL(None, use_errno=True)
        opts = ("fd=%d,rootmode=40000,user_id=%d,group_id=%d" % (fd, uid, gid)).encode()
        if libc.mount(b"hostile4", mnt.encode(), b"fuse", 0, opts) != 0:
            sys.exit("mount: %s" % os.strerror(ctypes.get_errno()))
        print("mounted", flush=True)
        def reply(unique, error, body=b""):
            os.write(fd, struct.pack("<IiQ", 16 + len(body), error, unique) + body)
        while True:
            data = os.read(fd, 1 << 20)
            length, opcode, unique = struct.unpack_from("<IIQ", data)
            if opcode == 26:
                reply(unique, 0, struct.pack("<IIIIHHI", 7, 19, 0, 0, 16, 12, 131072))
            elif opcode == 3:
                attr = struct.pack("<QQQQQQIIIIIIIIII", 1, 0, 0, 0, 0, 0, 0, 0, 0, 0o40755, 2, uid, gid, 0, 4096, 0)
                reply(unique, 0, struct.pack("<QII", 1, 0, 0) + attr)
            elif opcode in (1, 18, 36):
                pass
            else:
                reply(unique, -38)
        """

    /// devaccessd opens a run's program in a child as the caller, kills it after 2 s, and then
    /// waited for it on the request handler thread until it ended. A lookup on the user's
    /// FUSE mount whose server read the request and never answers does not end at SIGKILL,
    /// so each run named there held a handler thread for as long as the user's server
    /// liked: eight runs (devaccessd has four handler threads) and nobody's request, root's
    /// included, was answered again (the review measured 30 s and more, until the FUSE
    /// server was killed).
    @Test func runsOfAProgramOnAFuseMountThatNeverAnswersDoNotStopDevaccessdAnsweringOthers() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let user = try TestUser("h4fuse")
        let other = try TestUser("h4other")
        let scratch = try TemporaryDirectory()
        #expect(chmod(scratch.path, 0o755) == 0)
        let mount = scratch.path + "/mnt"
        #expect(mkdir(mount, 0o755) == 0)
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        server.arguments = ["-c", Self.holdingFuseServer, mount, String(user.uid), String(user.gid)]
        let serverOutput = Pipe()
        server.standardOutput = serverOutput
        try server.run()
        defer {
            // Ending the server aborts the connection: every lookup waiting on it fails.
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
            _ = try? TestProcess.run("/usr/bin/umount", ["-l", mount])
        }
        let mounted = serverOutput.fileHandleForReading.availableData
        try #require(String(decoding: mounted, as: UTF8.self).hasPrefix("mounted"), "the FUSE mount failed")
        let flood = try user.background(RunAttackTests.rawClient + """
            import json, sys, threading, time
            for i in range(8):
                threading.Thread(target=lambda i=i: run(sys.argv[1], "%s/p%d" % (sys.argv[2], i)), daemon=True).start()
            time.sleep(3)
            print(json.dumps({"sent": 8}), flush=True)
            time.sleep(120)
            """, [setup.daemon.socketPath, mount])
        defer { flood.stop() }
        let hello = try other.python(RunAttackTests.timedHello, [setup.daemon.socketPath, "10"])
        #expect(hello.stdout.contains("\"hello\""),
                "another user's hello was not answered while \(user.name)'s runs hung on a FUSE lookup: \(hello.stdout)")
    }

    /// A FUSE server that says everything it serves is root's: its root directory (mode
    /// 0755) and one file `cam` (mode 0755) are owned by uid 0 whoever runs the server.
    static let rootClaimingFuseServer = """
        import ctypes, os, struct, sys
        mnt, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        fd = os.open("/dev/fuse", os.O_RDWR)
        libc = ctypes.CDLL(None, use_errno=True)
        opts = ("fd=%d,rootmode=40000,user_id=%d,group_id=%d,allow_other" % (fd, uid, gid)).encode()
        if libc.mount(b"hostile4", mnt.encode(), b"fuse", 0x2 | 0x4, opts) != 0:
            sys.exit("mount: %s" % os.strerror(ctypes.get_errno()))
        print("mounted", flush=True)
        def reply(unique, error, body=b""):
            os.write(fd, struct.pack("<IiQ", 16 + len(body), error, unique) + body)
        def attr(node):
            mode = 0o40755 if node == 1 else 0o100755
            return struct.pack("<QQQQQQIIIIIIIIII", node, 10, 1, 0, 0, 0, 0, 0, 0, mode, 1, 0, 0, 0, 4096, 0)
        while True:
            data = os.read(fd, 1 << 20)
            length, opcode, unique, node = struct.unpack_from("<IIQQ", data)
            if opcode == 26:
                reply(unique, 0, struct.pack("<IIIIHHI", 7, 19, 0, 0, 16, 12, 131072))
            elif opcode == 3:
                reply(unique, 0, struct.pack("<QII", 1, 0, 0) + attr(node))
            elif opcode == 1:
                if data[40:].split(b"\\0")[0] == b"cam":
                    reply(unique, 0, struct.pack("<QQQQII", 2, 0, 1, 1, 0, 0) + attr(2))
                else:
                    reply(unique, -2)
            elif opcode in (18, 36):
                pass
            else:
                reply(unique, -38)
        """

    /// `RootInstalledFile` (what `Program=` rules, program grants that outlast a run and the
    /// run's trust rest on) believed the owner a file system reports. A FUSE server reports
    /// whatever owner it likes: a user who may mount one with `allow_other` (`user_allow_other`
    /// in /etc/fuse.conf) on a directory of theirs in /tmp served "root's" files that the
    /// user changes at will, and devaccessd took them for code only root can have put there.
    @Test func aFileOnAUsersFuseMountIsNotTakenForRootsInstalledCode() throws {
        let user = try TestUser("h4root")
        let scratch = try TemporaryDirectory()
        // As /tmp: root's, sticky, anyone may add an entry; the mount point is the user's.
        #expect(chmod(scratch.path, 0o1777) == 0)
        let mount = scratch.path + "/mnt"
        #expect(mkdir(mount, 0o755) == 0 && chown(mount, user.uid, user.gid) == 0)
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        server.arguments = ["-c", Self.rootClaimingFuseServer, mount, String(user.uid), String(user.gid)]
        let serverOutput = Pipe()
        server.standardOutput = serverOutput
        try server.run()
        defer {
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
            _ = try? TestProcess.run("/usr/bin/umount", ["-l", mount])
        }
        let mounted = serverOutput.fileHandleForReading.availableData
        try #require(String(decoding: mounted, as: UTF8.self).hasPrefix("mounted"), "the FUSE mount failed")
        var info = stat()
        try #require(lstat(mount + "/cam", &info) == 0, "the FUSE file cannot be read: \(Errno.current)")
        #expect(info.st_uid == 0, "the FUSE server's claim did not reach stat: uid \(info.st_uid)")
        var checker = RootInstalledFile()
        let flaw = checker.flaw(mount + "/cam", expected: FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)))
        #expect(flaw != nil, "\(mount)/cam, served by \(user.name)'s FUSE server, was taken for root's installed code")
    }

    /// A FUSE server (mounted `allow_other`) serving one root-claiming file, `lib`, that stops
    /// answering LOOKUP and GETATTR once the file named by its fourth argument exists.
    static let turningFuseServer = """
        import ctypes, os, struct, sys
        mnt, uid, gid, flag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        fd = os.open("/dev/fuse", os.O_RDWR)
        libc = ctypes.CDLL(None, use_errno=True)
        opts = ("fd=%d,rootmode=40000,user_id=%d,group_id=%d,allow_other" % (fd, uid, gid)).encode()
        if libc.mount(b"hostile4", mnt.encode(), b"fuse", 0x2 | 0x4, opts) != 0:
            sys.exit("mount: %s" % os.strerror(ctypes.get_errno()))
        print("mounted", flush=True)
        def reply(unique, error, body=b""):
            os.write(fd, struct.pack("<IiQ", 16 + len(body), error, unique) + body)
        def attr(node):
            mode = 0o40755 if node == 1 else 0o100755
            return struct.pack("<QQQQQQIIIIIIIIII", node, 4096, 8, 0, 0, 0, 0, 0, 0, mode, 1, 0, 0, 0, 4096, 0)
        while True:
            data = os.read(fd, 1 << 20)
            length, opcode, unique, node = struct.unpack_from("<IIQQ", data)
            holding = os.path.exists(flag)
            if opcode == 26:
                reply(unique, 0, struct.pack("<IIIIHHI", 7, 19, 0, 0, 16, 12, 131072))
            elif opcode in (1, 3) and holding:
                print("held", opcode, flush=True)
            elif opcode == 3:
                reply(unique, 0, struct.pack("<QII", 0, 0, 0) + attr(node))
            elif opcode == 1:
                if data[40:].split(b"\\0")[0] == b"lib":
                    reply(unique, 0, struct.pack("<QQQQII", 2, 0, 0, 0, 0, 0) + attr(2))
                else:
                    reply(unique, -2)
            elif opcode == 14:
                reply(unique, 0, struct.pack("<QII", 1, 0, 0))
            elif opcode == 15:
                offset, fh, size = struct.unpack_from("<QQI", data, 40)[0], 0, struct.unpack_from("<QQI", data, 40)[2]
                reply(unique, 0, b"\\0" * min(size, max(0, 4096 - offset)))
            elif opcode in (18, 25):
                reply(unique, 0)
            elif opcode in (2, 36, 42):
                pass
            else:
                reply(unique, -38)
        """

    /// devaccessd identifies every connecting process at accept, on the event loop's thread:
    /// it stats the executable and every file mapped executable, and lstats their paths (as
    /// root). A process that maps a file of its user's FUSE mount executable, then has the
    /// server stop answering, and connects: the stat waits on the server for good, and
    /// devaccessd accepts and answers nobody again (the review: root's `status --broker` got
    /// no answer). Needs a mount root may enter: `allow_other` (`user_allow_other` in
    /// /etc/fuse.conf).
    @Test func aProcessMappingAFileOfItsUsersFuseMountDoesNotStopDevaccessdAtAccept() throws {
        let daemon = try RunningDaemon()
        let user = try TestUser("h4map")
        let other = try TestUser("h4other2")
        let scratch = try TemporaryDirectory()
        #expect(chmod(scratch.path, 0o1777) == 0)
        let mount = scratch.path + "/mnt", flag = scratch.path + "/flag"
        #expect(mkdir(mount, 0o755) == 0 && chown(mount, user.uid, user.gid) == 0)
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        server.arguments = ["-c", Self.turningFuseServer, mount, String(user.uid), String(user.gid), flag]
        let serverOutput = Pipe()
        server.standardOutput = serverOutput
        try server.run()
        defer {
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
            _ = try? TestProcess.run("/usr/bin/umount", ["-l", mount])
        }
        let mounted = serverOutput.fileHandleForReading.availableData
        try #require(String(decoding: mounted, as: UTF8.self).hasPrefix("mounted"), "the FUSE mount failed")
        let mapper = try user.background("""
            import mmap, os, socket, sys, time
            lib, flag, sock = sys.argv[1], sys.argv[2], sys.argv[3]
            f = open(lib, "rb")
            m = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC, flags=mmap.MAP_PRIVATE)
            open(flag, "w").close()
            time.sleep(0.5)
            s = socket.socket(socket.AF_UNIX); s.connect(sock)
            print('{"connected": true}', flush=True)
            time.sleep(300)
            """, [mount + "/lib", flag, daemon.socketPath])
        defer { mapper.stop() }
        let hello = try other.python(RunAttackTests.timedHello, [daemon.socketPath, "10"])
        #expect(hello.stdout.contains("\"hello\""),
                "another user's hello was not answered after \(user.name)'s process mapping a FUSE file connected: \(hello.stdout)")
    }
}
