import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessSystem
import DevAccessTestSupport

/// ACL edits on real nodes, checked by a child process that really opens the node as the
/// user (setpriv), never by reading the ACL back alone.
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: creates users, device nodes and ACLs"))
struct ACLWriterTests {
    let directory: TemporaryDirectory
    let alice: TestUser
    let bob: TestUser
    let crew: TestGroup

    init() throws {
        directory = try TemporaryDirectory()
        alice = try TestUser("aclw")
        bob = try TestUser("aclwb")
        crew = try TestGroup("aclw", members: [alice])
    }

    /// A 1:3 node (so opens really reach /dev/null's driver), owner-only.
    private func node(_ name: String) throws -> String {
        try directory.makeNullNode(name, mode: "0600")
    }

    private func entries(_ path: String) throws -> [ACLEntry]? {
        try ACLReader.extendedEntries(at: path)
    }

    /// Change time and access ACL: any ACL or mode edit moves ctime.
    private func fingerprint(_ path: String) throws -> String {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw SetupError("lstat \(path)") }
        let acl = try TestProcess.run("/usr/bin/getfacl", ["-P", "-c", path]).stdout
        return "\(info.st_ctim.tv_sec).\(info.st_ctim.tv_nsec) \(info.st_mode) \(acl)"
    }

    @Test func userEntryReallyGrantsAndRevokesOpen() throws {
        let path = try node("user")
        #expect(try !alice.canOpen(path, .readWrite))
        #expect(try ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid))
        #expect(try alice.canOpen(path, .readWrite))
        #expect(try !bob.canOpen(path, .read))
        // The same entry again changes nothing.
        #expect(try !ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid))

        #expect(try ACLWriter.removeUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid))
        #expect(try !alice.canOpen(path, .read))
        #expect(try !ACLWriter.removeUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid))
        // No named entries left: no mask left either, the node is mode-only again.
        #expect(try entries(path) == nil)
    }

    @Test func readOnlyEntryGivesReadOnly() throws {
        let path = try node("readonly")
        try ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid, permissions: .read)
        #expect(try alice.canOpen(path, .read))
        #expect(try !alice.canOpen(path, .write))
        // Asking for more widens the entry.
        #expect(try ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid))
        #expect(try alice.canOpen(path, .readWrite))
    }

    @Test func groupEntryReallyGrantsAndRevokesOpen() throws {
        let path = try node("group")
        #expect(try !alice.canOpen(path, .readWrite))
        #expect(try ACLWriter.addGroupEntry(path: path, expectedMajor: 1, expectedMinor: 3, gid: crew.gid))
        #expect(try alice.canOpen(path, .readWrite))
        #expect(try !bob.canOpen(path, .read))
        #expect(try !ACLWriter.addGroupEntry(path: path, expectedMajor: 1, expectedMinor: 3, gid: crew.gid))
        #expect(try ACLWriter.removeGroupEntry(path: path, expectedMajor: 1, expectedMinor: 3, gid: crew.gid))
        #expect(try !alice.canOpen(path, .read))
    }

    @Test func foreignEntrySurvivesOurAddAndRemove() throws {
        let path = try node("foreign")
        try TestProcess.shell("setfacl -m u:\(bob.name):rw '\(path)'")
        try ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        let both = try #require(try entries(path))
        #expect(both.contains(ACLEntry(tag: .user(bob.uid), permissions: .readWrite, qualifierName: bob.name)))
        #expect(both.contains(ACLEntry(tag: .user(alice.uid), permissions: .readWrite, qualifierName: alice.name)))

        try ACLWriter.removeUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        let after = try #require(try entries(path))
        #expect(after.contains(ACLEntry(tag: .user(bob.uid), permissions: .readWrite, qualifierName: bob.name)))
        #expect(!after.contains { $0.tag == .user(alice.uid) })
        #expect(after.contains(ACLEntry(tag: .mask, permissions: .readWrite)))
        #expect(try bob.canOpen(path, .readWrite))
        #expect(try !alice.canOpen(path, .read))
    }

    /// `chmod g-w` on a node with an ACL narrows the mask; adding our entry must make it
    /// effective again, not report "no change".
    @Test func narrowedMaskIsRecalculated() throws {
        let path = try node("mask")
        try TestProcess.shell("setfacl -m u:\(alice.name):rw,m::r '\(path)'")
        #expect(try !alice.canOpen(path, .write))
        #expect(try ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid))
        #expect(try alice.canOpen(path, .readWrite))
    }

    @Test func symlinkIsRefusedAndTargetUntouched() throws {
        let target = try node("target")
        let link = directory.path + "/link"
        try TestProcess.shell("ln -s '\(target)' '\(link)'")
        let before = try fingerprint(target)
        #expect(throws: ACLWriter.WriteError.notCharacterDevice(link, found: .symlink)) {
            try ACLWriter.addUserEntry(path: link, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        }
        #expect(throws: ACLWriter.WriteError.notCharacterDevice(link, found: .symlink)) {
            try ACLWriter.removeUserEntry(path: link, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        }
        #expect(try fingerprint(target) == before)
        #expect(try !alice.canOpen(link, .read))
    }

    @Test func regularFileIsRefusedAndUntouched() throws {
        let file = directory.path + "/plain"
        try TestProcess.shell("install -m 0600 /dev/null '\(file)'")
        let before = try fingerprint(file)
        #expect(throws: ACLWriter.WriteError.notCharacterDevice(file, found: .regular)) {
            try ACLWriter.addUserEntry(path: file, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        }
        #expect(try fingerprint(file) == before)
        #expect(try entries(file) == nil)
    }

    @Test func otherDeviceIsRefusedAndUntouched() throws {
        let planted = directory.path + "/zero"
        // /dev/zero's numbers where /dev/null's were expected.
        try TestProcess.shell("mknod -m 0600 '\(planted)' c 1 5")
        let before = try fingerprint(planted)
        #expect(throws: ACLWriter.WriteError.wrongDevice(planted, expectedMajor: 1, expectedMinor: 3,
                                                          foundMajor: 1, foundMinor: 5)) {
            try ACLWriter.addGroupEntry(path: planted, expectedMajor: 1, expectedMinor: 3, gid: crew.gid)
        }
        #expect(try fingerprint(planted) == before)
        #expect(try !alice.canOpen(planted, .read))
    }

    @Test func missingNodeIsReportedAsVanished() {
        let path = directory.path + "/gone"
        #expect(throws: ACLWriter.WriteError.vanished(path)) {
            try ACLWriter.removeUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        }
    }
}
