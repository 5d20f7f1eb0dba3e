import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessTestSupport
@testable import DevAccessLedger

/// The ledger holds every user's decisions and reasons: its directory is 0700 and its
/// files 0600, made so by every read-write open, never by a read-only one.
@Suite("Ledger privacy: state directory and file modes")
struct StatePrivacyTests {
    static let files = ["ledger.db", "ledger.db-shm", "ledger.db-wal"]

    @Test func freshLedgerIsPrivate() throws {
        let dir = TemporaryLedgerDirectory()
        let state = dir.path + "/parent/state"
        let ledger = try Ledger(stateDirectory: state, journal: .disabled)
        try ledger.recordGrant(grant())
        // After a write, with the ledger still open: SQLite has made -wal and -shm.
        #expect(directoryEntries(state) == Self.files)
        #expect(try permissionBits(state) == 0o700)
        #expect(try ownerUID(state) == geteuid())
        for file in Self.files {
            #expect(try permissionBits(state + "/" + file) == 0o600, "\(file)")
            #expect(try ownerUID(state + "/" + file) == geteuid(), "\(file)")
        }
    }

    @Test func openingByPathMakesTheFilesPrivateToo() throws {
        let dir = TemporaryLedgerDirectory()
        chmod(dir.path, 0o755)
        let ledger = try openLedger(dir)
        try ledger.recordGrant(grant())
        #expect(try permissionBits(dir.path) == 0o700)
        for file in Self.files { #expect(try permissionBits(dir.file(file)) == 0o600, "\(file)") }
    }

    /// An older devaccess left the ledger 0644 in a 0755 directory: a read-only open leaves
    /// it so, the next read-write open tightens all of it.
    @Test func legacyModesAreTightenedAtTheNextReadWriteOpen() throws {
        let dir = TemporaryLedgerDirectory()
        try makeLegacyLedger(dir.path)

        do {
            let reader = try openLedger(dir, mode: .readOnly)
            #expect(try reader.grants(includeInactive: true).count == 1)
        }
        #expect(try permissionBits(dir.path) == 0o755)
        for file in Self.files { #expect(try permissionBits(dir.file(file)) == 0o644, "read-only changed \(file)") }

        let ledger = try openLedger(dir)
        #expect(try permissionBits(dir.path) == 0o700)
        for file in Self.files { #expect(try permissionBits(dir.file(file)) == 0o600, "\(file)") }
        #expect(try ledger.grants(includeInactive: true).count == 1)
        #expect(try ledger.verify().isIntact)
    }

    /// A directory that holds more than the ledger is not devaccess's alone (a state dir
    /// pointed at /var/lib by mistake): its mode stays, the ledger files are still 0600.
    @Test func sharedDirectoryIsLeftButFilesAreTightened() throws {
        let dir = TemporaryLedgerDirectory()
        try makeLegacyLedger(dir.path)
        try Data("not devaccess's".utf8).write(to: URL(fileURLWithPath: dir.file("other")))
        chmod(dir.file("other"), 0o644)
        _ = try openLedger(dir)
        #expect(try permissionBits(dir.path) == 0o755)
        #expect(try permissionBits(dir.file("other")) == 0o644)
        for file in Self.files { #expect(try permissionBits(dir.file(file)) == 0o600, "\(file)") }
    }

    /// A sticky directory is shared by design (/tmp): never locked down, even when empty.
    @Test func stickyDirectoryIsNeverTightened() throws {
        let dir = TemporaryLedgerDirectory()
        chmod(dir.path, 0o1777)
        _ = try openLedger(dir)
        #expect(try permissionBits(dir.path) == 0o1777)
        #expect(try permissionBits(dir.ledgerPath) == 0o600)
    }

    /// A symlink in place of a ledger file is refused, and its target keeps its mode.
    @Test func symlinkInPlaceOfTheWALIsRefused() throws {
        let dir = TemporaryLedgerDirectory()
        do { try openLedger(dir).recordGrant(grant()) }
        let target = dir.path + "/elsewhere"
        try Data("x".utf8).write(to: URL(fileURLWithPath: target))
        chmod(target, 0o644)
        try FileManager.default.removeItem(atPath: dir.file("ledger.db-wal"))
        try FileManager.default.createSymbolicLink(atPath: dir.file("ledger.db-wal"), withDestinationPath: target)
        do throws(LedgerError) {
            _ = try openLedger(dir)
            Issue.record("a ledger with a symlinked -wal opened")
        } catch {
            guard case .stateDirectory(dir.path, let reason) = error else {
                Issue.record("expected .stateDirectory, got \(error)")
                return
            }
            #expect(reason.contains("ledger.db-wal is a symbolic link"), "\(reason)")
        }
        #expect(try permissionBits(target) == 0o644)
    }

    // MARK: - Helpers

    private func grant() -> NewGrant {
        NewGrant(subject: alice, permission: .camera, decision: .allow, scope: .always, decidedBy: alice,
                 method: .consent)
    }

    /// A ledger with one grant, then the modes an older devaccess left: 0755 and 0644.
    private func makeLegacyLedger(_ directory: String) throws {
        do { try Ledger(path: directory + "/" + Ledger.fileName, journal: .disabled).recordGrant(grant()) }
        #expect(directoryEntries(directory) == Self.files, "the WAL files outlive the writer")
        #expect(chmod(directory, 0o755) == 0)
        for file in Self.files { #expect(chmod(directory + "/" + file, 0o644) == 0) }
    }
}

/// What the modes are for: another local user cannot read the ledger. Needs root to make
/// a real user and run a process as that user.
@Suite("Ledger privacy: another user", .serialized,
       .enabled(if: isRoot && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"),
                "needs root and setpriv: creates a user and opens the ledger as that user"))
struct StatePrivacyUserTests {
    @Test func anotherUserCannotOpenTheLedger() throws {
        let user = try TestUser("ledger")
        let outer = TemporaryLedgerDirectory()
        chmod(outer.path, 0o755)  // so that only the state directory and files decide
        let state = outer.path + "/state"
        let files = StatePrivacyTests.files.map { state + "/" + $0 }

        // As an older devaccess left it: the user reads every decision (this also shows
        // that the child really runs and opens as the user).
        do { try Ledger(stateDirectory: state, journal: .disabled).recordGrant(sampleGrant()) }
        #expect(chmod(state, 0o755) == 0)
        for file in files { #expect(chmod(file, 0o644) == 0) }
        for file in files { #expect(try openAsUser(user, file) == nil, "\(file) was not readable before tightening") }

        // The next read-write open makes them private.
        let ledger = try Ledger(stateDirectory: state, journal: .disabled)
        try ledger.recordGrant(sampleGrant())
        let denied = String(cString: strerror(EACCES))
        for file in files {
            let failure = try openAsUser(user, file)
            #expect(failure?.contains(denied) == true, "\(file): \(failure ?? "the user opened it")")
            #expect(try openAsRoot(file), "root cannot open \(file) the same way")
        }

        // The file modes hold on their own, if the directory is widened again (an old unit
        // file with StateDirectoryMode=0755).
        #expect(chmod(state, 0o755) == 0)
        for file in files {
            let failure = try openAsUser(user, file)
            #expect(failure?.contains(denied) == true, "\(file) in a 0755 directory: \(failure ?? "the user opened it")")
        }
    }

    /// A directory owned by someone else is not changed, and that is no error.
    @Test func directoryOfAnotherOwnerIsLeftAlone() throws {
        let user = try TestUser("ledgerdir")
        let dir = TemporaryLedgerDirectory()
        #expect(chown(dir.path, user.uid, user.gid) == 0)
        #expect(chmod(dir.path, 0o755) == 0)
        let ledger = try openLedger(dir)
        try ledger.recordGrant(sampleGrant())
        #expect(try permissionBits(dir.path) == 0o755)
        #expect(try ownerUID(dir.path) == user.uid)
        #expect(try permissionBits(dir.ledgerPath) == 0o600)
    }

    /// A ledger.db, -wal or -shm that belongs to another user (planted in a shared
    /// --state-dir) is refused for writing, and left as it was.
    @Test func ledgerOwnedByAnotherUserIsRefused() throws {
        let user = try TestUser("ledgerown")
        for file in ["ledger.db", "ledger.db-wal", "ledger.db-shm"] {
            let dir = TemporaryLedgerDirectory()
            do { try openLedger(dir).recordGrant(sampleGrant()) }
            #expect(chown(dir.file(file), user.uid, user.gid) == 0)
            let before = try FileSnapshot(dir.ledgerPath)
            do throws(LedgerError) {
                _ = try openLedger(dir)
                Issue.record("a ledger whose \(file) belongs to uid \(user.uid) opened for writing")
            } catch {
                #expect(error == .foreignOwner(path: dir.file(file), owner: user.uid, expected: geteuid()), "\(error)")
                #expect(error.description.contains(dir.file(file)), "\(error.description)")
            }
            #expect(try FileSnapshot(dir.ledgerPath) == before)
            #expect(try ownerUID(dir.file(file)) == user.uid)
            // Reading it is still allowed: nothing is written.
            #expect(try openLedger(dir, mode: .readOnly).grants(includeInactive: true).count == 1)
        }
    }

    private func sampleGrant() -> NewGrant {
        NewGrant(subject: alice, permission: .camera, decision: .allow, scope: .always, decidedBy: alice,
                 method: .consent)
    }

    /// The shell `exec 3<FILE` as `user` (real uid, gid and groups, like `TestUser.canOpen`):
    /// nil when open() succeeded, else the shell's message, which ends in strerror's text.
    private func openAsUser(_ user: TestUser, _ path: String) throws -> String? {
        let result = try TestProcess.run("/usr/bin/setpriv", [
            "--reuid=\(user.uid)", "--regid=\(user.gid)", "--init-groups", "--",
            "/bin/sh", "-c", "exec 3<\"$1\"", "sh", path,
        ])
        return result.status == 0 ? nil : result.stderr
    }

    private func openAsRoot(_ path: String) throws -> Bool {
        try TestProcess.run("/bin/sh", ["-c", "exec 3<\"$1\"", "sh", path]).status == 0
    }
}

/// The permission bits (and set-id/sticky bits) of `path`, not following a symlink.
func permissionBits(_ path: String) throws -> mode_t {
    var info = stat()
    guard lstat(path, &info) == 0 else { throw SetupError("lstat \(path): \(String(cString: strerror(errno)))") }
    return info.st_mode & 0o7777
}

func ownerUID(_ path: String) throws -> uid_t {
    var info = stat()
    guard lstat(path, &info) == 0 else { throw SetupError("lstat \(path): \(String(cString: strerror(errno)))") }
    return info.st_uid
}
