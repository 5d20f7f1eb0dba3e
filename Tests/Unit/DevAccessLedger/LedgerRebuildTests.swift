import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessTestSupport
@testable import DevAccessLedger

/// An older devaccess left the ledger 0644. Whoever opened it then keeps their descriptors,
/// so chmod is not enough: the next read-write open moves the data into new, private files.
/// Needs root to run a process as another, real user.
@Suite("Ledger privacy: an older public ledger is rebuilt", .serialized,
       .enabled(if: isRoot && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
                    && FileManager.default.isExecutableFile(atPath: "/usr/bin/python3"),
                "needs root, setpriv and python3: runs a process as another user"))
struct LedgerRebuildUserTests {
    /// A reader that opened the public ledger before the upgrade keeps its connection:
    /// it must not see decisions recorded after the rebuild (it read them through the
    /// same inodes when the ledger was only chmod-ed).
    @Test func readerOfTheOldFilesDoesNotSeeNewDecisions() throws {
        let user = try TestUser("rebuildrd")
        let dir = TemporaryLedgerDirectory()
        try makePublicLedger(dir, reasons: ["old one", "old two"])

        let reader = try ChildProcess(user, script: Self.readerScript, arguments: [dir.ledgerPath])
        let before = try reader.readLine()
        #expect(before == "rows old one|old two", "the reader did not read the public ledger: \(before)")

        let secret = "new decision \(UInt32.random(in: 0...UInt32.max))"
        let ledger = try openLedger(dir)
        try ledger.recordGrant(grant(reason: secret))
        #expect(try reasons(ledger) == ["old one", "old two", secret])

        try reader.send("again")
        let after = try reader.readLine()
        #expect(!after.contains(secret), "the old connection read a decision made after the rebuild: \(after)")
    }

    /// A shared lock on the old -shm's WAL write byte (120) blocked every write while the
    /// ledger was only chmod-ed; after the rebuild it locks a file the ledger no longer uses.
    @Test func lockOnTheOldSHMDoesNotBlockWrites() throws {
        let user = try TestUser("rebuildlk")
        let dir = TemporaryLedgerDirectory()
        try makePublicLedger(dir, reasons: ["old"])
        let shm = dir.file("ledger.db-shm")

        let locker = try ChildProcess(user, script: Self.lockerScript, arguments: [shm])
        let locked = try locker.readLine()
        #expect(locked == "locked", "\(locked)")
        // Shows the lock really is there, held by the child, before the open.
        #expect(try readLockHolder(shm, byte: 120) != nil, "no lock on byte 120 of the old -shm")

        let start = ContinuousClock.now
        let ledger = try Ledger(path: dir.ledgerPath, journal: .disabled, busyTimeout: .seconds(5))
        try ledger.recordGrant(grant(reason: "written despite the lock"))
        let elapsed = ContinuousClock.now - start
        #expect(elapsed < .seconds(3), "the write took \(elapsed)")
        #expect(try reasons(ledger) == ["old", "written despite the lock"])
        #expect(try ledger.verify().isIntact)
        try locker.send("done")
    }

    /// A writer that died left a decision only in the WAL (no checkpoint), and nobody has
    /// the -shm open: the copy still has it, read from the WAL without touching the old files.
    @Test func decisionOnlyInTheWALOfACrashedWriterIsCopied() throws {
        let dir = TemporaryLedgerDirectory()
        try makePublicLedger(dir, reasons: ["checkpointed"])
        let crashed = try TestProcess.run("/usr/bin/python3", ["-c", """
            import os, sqlite3, sys
            connection = sqlite3.connect(sys.argv[1])
            connection.execute("PRAGMA wal_autocheckpoint = 0")
            connection.execute("INSERT INTO grants (subject_uid, user_name, permission, decision, scope, created_usec,"
                               " decided_by_uid, decided_by_name, how, reason)"
                               " VALUES (1000, 'alice', 'camera', 'allow', 'always', 1, 0, 'root', 'admin', 'in the WAL')")
            connection.commit()
            os._exit(0)
            """, dir.ledgerPath])
        #expect(crashed.status == 0, "\(crashed.stderr)")
        // Held open like someone else's descriptors: what the old inodes hold afterwards.
        let old = try StatePrivacyTests.files.map { try FileHandle(forReadingFrom: URL(fileURLWithPath: dir.file($0))) }
        let before = try old.map { try $0.readToEnd() ?? Data() }

        let ledger = try openLedger(dir)
        #expect(try reasons(ledger) == ["checkpointed", "in the WAL"])
        #expect(try ledger.verify().isIntact)
        for (index, handle) in old.enumerated() {
            try handle.seek(toOffset: 0)
            #expect(try handle.readToEnd() ?? Data() == before[index], "\(StatePrivacyTests.files[index]) was written")
        }
    }

    /// When the copy cannot be made (here: a process holds the -shm's DMS byte write-locked,
    /// which only the owner can do), the open fails naming the ledger and what to do, and
    /// the old files stay as they were, with no copy left behind. (SQLite's WAL code retries
    /// for about 10 s whatever the busy timeout, so this test takes that long.)
    @Test func failedCopyLeavesTheLedgerAndSaysWhatToDo() throws {
        let dir = TemporaryLedgerDirectory()
        try makePublicLedger(dir, reasons: ["kept"])
        let before = try FileSnapshot(dir.ledgerPath)
        let locker = try ChildProcess("/usr/bin/python3", ["-c", Self.exclusiveLockerScript, dir.file("ledger.db-shm")])
        #expect(try locker.readLine() == "locked")

        do throws(LedgerError) {
            _ = try Ledger(path: dir.ledgerPath, journal: .disabled, busyTimeout: .milliseconds(200))
            Issue.record("the ledger opened although it could not be copied")
        } catch {
            guard case .rebuildFailed(dir.ledgerPath, let reason) = error else {
                Issue.record("expected .rebuildFailed, got \(error)")
                return
            }
            #expect(reason.contains("copying it failed"), "\(reason)")
            #expect(error.description.contains("fuser -v \(dir.ledgerPath)"), "\(error.description)")
        }
        #expect(try FileSnapshot(dir.ledgerPath) == before)
        #expect(directoryEntries(dir.path) == StatePrivacyTests.files, "a copy was left behind")
        for file in StatePrivacyTests.files { #expect(try permissionBits(dir.file(file)) == 0o644, "\(file)") }

        // Once the holder is gone, the next open rebuilds it.
        try locker.send("done")
        #expect(try locker.readLine() == "released")
        let ledger = try openLedger(dir)
        #expect(try reasons(ledger) == ["kept"])
        for file in StatePrivacyTests.files { #expect(try permissionBits(dir.file(file)) == 0o600, "\(file)") }
    }

    // MARK: - Helpers

    /// Prints the reasons of all grants (or the error) through one connection opened once,
    /// read-only, as the user: once at start, once more for every line on stdin.
    static let readerScript = """
        import sqlite3, sys
        connection = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
        def reasons():
            try:
                rows = connection.execute("SELECT reason FROM grants ORDER BY id").fetchall()
                return "rows " + "|".join(row[0] for row in rows)
            except Exception as error:
                return "error " + str(error)
        print(reasons(), flush=True)
        for line in sys.stdin:
            print(reasons(), flush=True)
        """

    /// `fcntl(F_SETLK, F_RDLCK, start 120, len 1)` on the file, held until stdin has a line.
    static let lockerScript = """
        import fcntl, os, sys
        fd = os.open(sys.argv[1], os.O_RDONLY)
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 120)
        print("locked", flush=True)
        sys.stdin.readline()
        """

    /// A write lock on the -shm's "DMS" byte (128), which SQLite's own connections only
    /// share: a reader cannot get its shared lock. Needs write access, so runs as root.
    static let exclusiveLockerScript = """
        import fcntl, os, sys
        fd = os.open(sys.argv[1], os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)
        print("locked", flush=True)
        sys.stdin.readline()
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 128)
        print("released", flush=True)
        """

    /// The pid of a process holding a lock on `byte` of `path` that a write lock would
    /// conflict with (F_GETLK), nil when there is none.
    private func readLockHolder(_ path: String, byte: off_t) throws -> pid_t? {
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw SetupError("open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = byte
        lock.l_len = 1
        guard fcntl(fd, F_GETLK, &lock) == 0 else { throw SetupError("F_GETLK: \(String(cString: strerror(errno)))") }
        return lock.l_type == Int16(F_UNLCK) ? nil : lock.l_pid
    }
}

/// The rebuild keeps everything: grants, ACL entries, the audit chain, the schema version,
/// also what was only in the WAL.
@Suite("Ledger privacy: what the rebuild keeps")
struct LedgerRebuildContentTests {
    @Test func contentAndChainSurviveTheRebuild() throws {
        let dir = TemporaryLedgerDirectory()
        // Kept open, so what it wrote stays in the WAL (no checkpoint at close) when the
        // copy is made: the copy must take it from there.
        let old = try openLedger(dir)
        let first = try old.recordGrant(grant(reason: "first"))
        try old.recordGrant(NewGrant(subject: bob, permission: .microphone, decision: .deny, scope: .always,
                                     decidedBy: rootUser, method: .admin, reason: "second"))
        try old.recordACLEntryAdded(NewACLEntry(nodePath: "/dev/video0", deviceID: "cam", major: 81, minor: 0,
                                                qualifier: .user(alice.uid), grantID: first.id), by: rootUser)
        _ = try old.revoke(permission: .microphone, uid: bob.uid, by: rootUser, reason: "done")
        try old.append(sampleEvent(1))
        let grants = try old.grants(includeInactive: true)
        let events = try old.events()
        let entries = try old.aclEntries()
        let verification = try old.verify()
        #expect(verification.isIntact)
        var walInfo = stat()
        #expect(stat(dir.file("ledger.db-wal"), &walInfo) == 0 && walInfo.st_size > 0, "nothing in the WAL")
        let oldInode = try inode(dir.ledgerPath)
        #expect(chmod(dir.path, 0o755) == 0)
        for file in StatePrivacyTests.files { #expect(chmod(dir.file(file), 0o644) == 0) }

        let ledger = try openLedger(dir)
        #expect(try inode(dir.ledgerPath) != oldInode, "the ledger was not rebuilt into a new file")
        #expect(try ledger.grants(includeInactive: true) == grants)
        #expect(try ledger.events() == events)
        #expect(try ledger.aclEntries() == entries)
        #expect(try ledger.verify() == verification)
        #expect(try ledger.storedSchemaVersion() == Ledger.schemaVersion)
        #expect(try ledger.read { db throws(LedgerError) in try db.integer("PRAGMA application_id") }
                    == Int64(Schema.applicationID))
        // New decisions chain on.
        try ledger.recordGrant(grant(reason: "after"))
        #expect(try ledger.eventCount() > Int64(events.count))
        #expect(try ledger.verify() == .intact(count: try ledger.eventCount()))
        #expect(directoryEntries(dir.path) == StatePrivacyTests.files, "a copy was left behind")
        for file in StatePrivacyTests.files { #expect(try permissionBits(dir.file(file)) == 0o600, "\(file)") }
        #expect(try permissionBits(dir.path) == 0o700)
        withExtendedLifetime(old) {}
    }

    /// The URI that opens the old ledger read-only keeps odd directory names intact.
    @Test func rebuildInADirectoryWithURICharacters() throws {
        #expect(PrivateCopy.fileURI("/var/lib/a b/c?d#e%f/ledger.db") == "file:///var/lib/a%20b/c%3Fd%23e%25f/ledger.db")
        #expect(PrivateCopy.fileURI("state/ledger.db") == "file:state/ledger.db")
        let dir = TemporaryLedgerDirectory()
        let state = dir.path + "/odd ?name#with%25"
        do { try Ledger(stateDirectory: state, journal: .disabled).recordGrant(grant(reason: "odd")) }
        for file in StatePrivacyTests.files { #expect(chmod(state + "/" + file, 0o644) == 0) }
        let oldInode = try inode(state + "/ledger.db")
        let ledger = try Ledger(stateDirectory: state, journal: .disabled)
        #expect(try inode(state + "/ledger.db") != oldInode)
        #expect(try reasons(ledger) == ["odd"])
        for file in StatePrivacyTests.files { #expect(try permissionBits(state + "/" + file) == 0o600, "\(file)") }
    }

    /// A public ledger refused for its content is not copied (nor written): it is only
    /// made 0600 in place, as before, and stays the same file.
    @Test func refusedPublicLedgerIsOnlyTightened() throws {
        let dir = TemporaryLedgerDirectory()
        try rawSQL(dir.ledgerPath, "CREATE TABLE future (x); PRAGMA application_id = \(Schema.applicationID); PRAGMA user_version = 99")
        #expect(chmod(dir.ledgerPath, 0o644) == 0)
        let before = try FileSnapshot(dir.ledgerPath)
        let oldInode = try inode(dir.ledgerPath)
        #expect(throws: LedgerError.schemaTooNew(path: dir.ledgerPath, found: 99, known: Ledger.schemaVersion)) {
            try openLedger(dir)
        }
        #expect(try FileSnapshot(dir.ledgerPath) == before)
        #expect(try inode(dir.ledgerPath) == oldInode)
        #expect(try permissionBits(dir.ledgerPath) == 0o600)
        #expect(directoryEntries(dir.path) == ["ledger.db"])
    }

    /// Public -wal/-shm without their database (it was removed): they belong to nothing,
    /// may be held open, and are removed; a new ledger starts with new ones.
    @Test func strayPublicWALFilesAreRemoved() throws {
        let dir = TemporaryLedgerDirectory()
        try makePublicLedger(dir, reasons: ["gone"])
        #expect(unlink(dir.ledgerPath) == 0)
        let oldSHM = try inode(dir.file("ledger.db-shm"))
        // Held open, as by someone else; this also keeps its inode number from being reused.
        let holder = try FileHandle(forReadingFrom: URL(fileURLWithPath: dir.file("ledger.db-shm")))
        let ledger = try openLedger(dir)
        #expect(try ledger.grants(includeInactive: true).isEmpty)
        try ledger.recordGrant(grant(reason: "new"))
        #expect(try inode(dir.file("ledger.db-shm")) != oldSHM)
        try holder.close()
        for file in StatePrivacyTests.files { #expect(try permissionBits(dir.file(file)) == 0o600, "\(file)") }
    }

    private func inode(_ path: String) throws -> ino_t {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw SetupError("lstat \(path): \(String(cString: strerror(errno)))") }
        return info.st_ino
    }
}

// MARK: - Shared helpers

private func grant(reason: String) -> NewGrant {
    NewGrant(subject: alice, permission: .camera, decision: .allow, scope: .always, decidedBy: alice,
             method: .consent, reason: reason)
}

/// The reasons of all grants, oldest first.
private func reasons(_ ledger: Ledger) throws -> [String] {
    try ledger.grants(includeInactive: true).sorted { $0.id < $1.id }.map(\.reason)
}

/// A ledger as an older devaccess left it: grants with these reasons, written and closed
/// (the WAL files stay), then the directory 0755 and the files 0644.
private func makePublicLedger(_ dir: TemporaryLedgerDirectory, reasons: [String]) throws {
    do {
        let ledger = try openLedger(dir)
        for reason in reasons { try ledger.recordGrant(grant(reason: reason)) }
    }
    #expect(directoryEntries(dir.path) == StatePrivacyTests.files)
    #expect(chmod(dir.path, 0o755) == 0)
    for file in StatePrivacyTests.files { #expect(chmod(dir.file(file), 0o644) == 0) }
}

/// A program run in the background, driven line by line: stdin for commands, stdout and
/// stderr merged for answers. Killed when dropped, if still running.
private final class ChildProcess {
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private var buffer: [UInt8] = []

    init(_ executable: String, _ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = output
        try process.run()
    }

    /// A python3 script run as `user` (real uid, gid and groups).
    convenience init(_ user: TestUser, script: String, arguments: [String]) throws {
        try self.init("/usr/bin/setpriv", ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups", "--",
                                           "/usr/bin/python3", "-c", script] + arguments)
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    func send(_ line: String) throws {
        try input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8))
    }

    /// The next line the child writes, without its newline; throws after `timeout`.
    func readLine(timeout: Duration = .seconds(15)) throws -> String {
        let fd = output.fileHandleForReading.fileDescriptor
        let deadline = ContinuousClock.now + timeout
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            let left = deadline - ContinuousClock.now
            guard left > .zero else {
                throw SetupError("no line from the child within \(timeout); so far: \(String(decoding: buffer, as: UTF8.self))")
            }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(clamping: left.components.seconds * 1000 + 1)
            guard poll(&poller, 1, milliseconds) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = read(fd, &chunk, chunk.count)
            guard count > 0 else {
                throw SetupError("the child ended its output; so far: \(String(decoding: buffer, as: UTF8.self))")
            }
            buffer.append(contentsOf: chunk[..<count])
        }
    }
}
