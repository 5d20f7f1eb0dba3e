import Glibc
import Testing
import DevAccessSystem
import DevAccessCore
import DevAccessTestSupport
import CLinux

@Suite struct SystemCallErrorTests {
    @Test func describesTheCallThePathTheTextAndTheName() {
        #expect(SystemCallError("open", path: "/dev/video0", .permissionDenied).description
                == #"open("/dev/video0"): Permission denied (EACCES)"#)
        #expect(SystemCallError("socket", .init(rawValue: EMFILE)).description
                == "socket(): Too many open files (EMFILE)")
        #expect(Errno.noSuchFile.name == "ENOENT")
        #expect(Errno(rawValue: 100_000).name == "errno 100000", "a value glibc does not name")
        #expect(Errno.permissionDenied.description == "Permission denied",
                "Errno alone keeps strerror's text: messages built on it do not change")
    }

    @Test func aHostilePathIsShownEscaped() {
        let error = SystemCallError("open", path: "/tmp/a\"\n\u{1B}[2J", .noSuchFile)
        #expect(!error.description.contains("\n"))
        #expect(!error.description.contains("\u{1B}"))
        #expect(error.description.hasPrefix(#"open("/tmp/a\"\n\u{1B}[2J"): "#))
    }

    @Test func tellsAbsentFromDeniedByErrno() {
        #expect(SystemCallError("open", path: "/x", .noSuchFile).isNotFound)
        #expect(!SystemCallError("open", path: "/x", .noSuchFile).isPermissionDenied)
        #expect(SystemCallError("open", path: "/x", .permissionDenied).isPermissionDenied)
        #expect(SystemCallError("chown", path: "/x", .notPermitted).isPermissionDenied)
        #expect(!SystemCallError("open", path: "/x", .permissionDenied).isNotFound)
        switch SystemCallError("open", path: "/x", .noSuchFile) {
        case .noSuchFile: break
        default: Issue.record("an Errno pattern matches the kept errno")
        }
    }

    @Test func aRealFailedOpenKeepsFunctionPathAndErrno() {
        let path = "/nonexistent-devaccess/\(getpid())"
        do {
            _ = try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC)
            Issue.record("opened a path that does not exist")
        } catch {
            #expect(error.function == "open")
            #expect(error.path == path)
            #expect(error.errno == .noSuchFile)
            #expect(error.description == "open(\"\(path)\"): No such file or directory (ENOENT)")
        }
        do {
            // A read-only sysctl: EACCES even for root (sysctl permissions ignore CAP_DAC_OVERRIDE).
            _ = try FileDescriptor.open("/proc/sys/kernel/osrelease", O_WRONLY | O_CLOEXEC)
            Issue.record("opened a read-only sysctl for writing")
        } catch {
            #expect(error.errno == .permissionDenied, "\(error)")
            #expect(error.isPermissionDenied)
        }
    }

    @Test func theWrapperReturnsTheValueRetriesEINTRAndNamesTheCall() throws {
        var calls = 0
        let value = try SystemCall.value("read") { () -> Int in
            calls += 1
            if calls < 3 { errno = EINTR; return -1 }
            return 42
        }
        #expect(value == 42)
        #expect(calls == 3, "EINTR runs the call again")
        calls = 0
        #expect(throws: SystemCallError("poll", .interrupted)) {
            try SystemCall.value("poll", retryOnInterrupt: false) { () -> CInt in
                calls += 1
                errno = EINTR
                return -1
            }
        }
        #expect(calls == 1, "a caller that must see the signal gets it")
        #expect(throws: SystemCallError("close", Errno(rawValue: EBADF))) {
            try SystemCall.check("close") { close(-1) }
        }
    }
}

/// A root-only file opened with a real user's file-system identity: EACCES is kept as a
/// value through `FileDescriptor.open` and `PolicyFiles.load`, never turned into a guess.
@Suite(.enabled(if: isRoot, "needs root to make a user and switch the file-system uid"))
struct SystemCallErrorAsUserTests {
    @Test func aRootOnlyFileIsEACCESForARealUser() async throws {
        let user = try TestUser("syserr")
        let directory = try TemporaryDirectory()
        let main = directory.path + "/" + PolicyFiles.mainFile
        let fd = open(main, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        close(fd)
        let uid = user.uid
        // setfsuid is per thread: a thread of its own, so no test sharing a pool thread runs
        // with the user's identity. Leaving fsuid 0 drops CAP_DAC_OVERRIDE for the thread.
        let (opened, loaded) = await DetachedThread.run(name: "syserr as user") {
            () -> (Result<Void, SystemCallError>, Result<Policy, PolicyFiles.LoadError>) in
            _ = setfsuid(uid)
            defer { _ = setfsuid(0) }
            let opened = Result { () throws(SystemCallError) in _ = try FileDescriptor.open(main, O_RDONLY | O_CLOEXEC) }
            let loaded = Result { () throws(PolicyFiles.LoadError) in try PolicyFiles.load(directory: directory.path) }
            return (opened, loaded)
        }
        #expect(throws: SystemCallError("open", path: main, .permissionDenied)) { try opened.get() }
        #expect(throws: PolicyFiles.LoadError.unreadable(SystemCallError("open", path: main, .permissionDenied))) {
            try loaded.get()
        }
        if case .failure(let error) = loaded {
            #expect(error.description == "cannot read the policy: open(\"\(main)\"): Permission denied (EACCES)")
        }
        #expect(try PolicyFiles.load(directory: directory.path) == Policy(), "root reads the empty file")
    }
}
