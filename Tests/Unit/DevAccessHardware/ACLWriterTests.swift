import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessSystem
import DevAccessTestSupport
import DevAccessACL

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
        try TestProcess.setup("setfacl", ["-m", "u:\(bob.name):rw", path])
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
        try TestProcess.setup("setfacl", ["-m", "u:\(alice.name):rw,m::r", path])
        #expect(try !alice.canOpen(path, .write))
        #expect(try ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid))
        #expect(try alice.canOpen(path, .readWrite))
    }

    // MARK: - The mask: nobody else's effective rights change

    /// Everyone in the group class but `alice` (the user devaccess adds): the owning group's
    /// member, a named user, a named group's member.
    private struct Others {
        let owner: TestUser
        let named: TestUser
        let member: TestUser
        let owners: TestGroup
        let crew: TestGroup

        init() throws {
            owner = try TestUser("aclwo")
            named = try TestUser("aclwn")
            member = try TestUser("aclwm")
            owners = try TestGroup("aclwo", members: [owner])
            crew = try TestGroup("aclwm", members: [member])
        }

        var users: [TestUser] { [owner, named, member] }
    }

    /// Each of `users` can read the node and cannot write it (real opens).
    private func expectReadOnly(_ users: [TestUser], _ path: String, _ when: String) throws {
        for user in users {
            #expect(try user.canOpen(path, .read), "\(user.name) lost read \(when)")
            #expect(try !user.canOpen(path, .write), "\(user.name) gained write \(when)")
        }
    }

    /// An admin narrowed the mask on purpose (`m::r`) over `group::rw`, `g:G:rw` and
    /// `u:other:rw`: adding our `rw` entry must grow the mask for us alone, and removing it
    /// must not hand the others their stored `rw` either.
    @Test func narrowedMaskStillLimitsEveryoneElse() throws {
        let others = try Others()
        let path = try directory.makeNullNode("narrowed", group: others.owners.name, mode: "0660")
        try TestProcess.setup("setfacl", ["-m", "g:\(others.crew.name):rw,u:\(others.named.name):rw,m::r", path])
        try expectReadOnly(others.users, path, "before the add")

        #expect(try ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid))
        #expect(try alice.canOpen(path, .readWrite))
        try expectReadOnly(others.users, path, "after our add")
        #expect(try !bob.canOpen(path, .read))

        #expect(try ACLWriter.removeUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid))
        #expect(try !alice.canOpen(path, .read))
        try expectReadOnly(others.users, path, "after our remove")
        // The others' entries are still there (clamped to what they could do), and so is a mask.
        let left = try #require(try entries(path))
        #expect(left.contains(ACLEntry(tag: .user(others.named.uid), permissions: .read, qualifierName: others.named.name)))
        #expect(left.contains(ACLEntry(tag: .group(others.crew.gid), permissions: .read, qualifierName: others.crew.name)))
        #expect(left.contains(ACLEntry(tag: .mask, permissions: .read)))
        #expect(!left.contains { $0.tag == .user(alice.uid) })
    }

    /// `chmod g-w` on a node with an ACL narrows the mask, not the owning group's entry.
    @Test func maskNarrowedByChmodStillLimitsEveryoneElse() throws {
        let others = try Others()
        let path = try directory.makeNullNode("chmod", group: others.owners.name, mode: "0660")
        try TestProcess.setup("setfacl", ["-m", "g:\(others.crew.name):rw,u:\(others.named.name):rw", path])
        try TestProcess.setup("chmod", ["g-w", path])
        try expectReadOnly(others.users, path, "before the add")

        try ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        #expect(try alice.canOpen(path, .readWrite))
        try expectReadOnly(others.users, path, "after our add")

        try ACLWriter.removeUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        #expect(try !alice.canOpen(path, .read))
        try expectReadOnly(others.users, path, "after our remove")
    }

    /// `m::r` over `group::rw` with no named entry: after our add and remove no named entry
    /// is left, so the mask goes, but the owning group keeps read-only.
    @Test func droppedMaskDoesNotWidenTheOwningGroup() throws {
        let others = try Others()
        let path = try directory.makeNullNode("dropped", group: others.owners.name, mode: "0660")
        try TestProcess.setup("setfacl", ["-m", "m::r", path])
        try expectReadOnly([others.owner], path, "before the add")

        try ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        #expect(try alice.canOpen(path, .readWrite))
        try expectReadOnly([others.owner], path, "after our add")

        try ACLWriter.removeUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        #expect(try !alice.canOpen(path, .read))
        try expectReadOnly([others.owner], path, "after our remove")
        // Equivalent to the mode again, with the owning group at what it could do: 0640.
        #expect(try entries(path) == nil)
        var info = stat()
        #expect(lstat(path, &info) == 0 && info.st_mode & 0o777 == 0o640)
    }

    /// No mask before (a mode-only node): the new mask is the owning group's rights plus
    /// ours, so the owning group stays read-only; removal leaves the mode as it was.
    @Test func plainNodeKeepsTheOwningGroupsRights() throws {
        let others = try Others()
        let path = try directory.makeNullNode("plain", group: others.owners.name, mode: "0640")
        try ACLWriter.addUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        #expect(try alice.canOpen(path, .readWrite))
        try expectReadOnly([others.owner], path, "after our add")
        #expect(try !others.named.canOpen(path, .read))
        try ACLWriter.removeUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        #expect(try !alice.canOpen(path, .read))
        try expectReadOnly([others.owner], path, "after our remove")
        #expect(try entries(path) == nil)
        var info = stat()
        #expect(lstat(path, &info) == 0 && info.st_mode & 0o777 == 0o640)
    }

    // MARK: - Create-only

    @Test func createOnlyAddsWhenThereIsNoEntry() throws {
        let path = try node("create")
        #expect(try ACLWriter.createUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid) == .created)
        #expect(try alice.canOpen(path, .readWrite))
        #expect(try !bob.canOpen(path, .read))
        // Its own entry, a second time: reported, not rewritten.
        let before = try fingerprint(path)
        #expect(try ACLWriter.createUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
                == .alreadyPresent(permissions: .readWrite, effective: .readWrite))
        #expect(try fingerprint(path) == before)
    }

    /// An entry someone else made for the same user, narrower than ours: left exactly as
    /// it is (no widening, no mask change, no write at all).
    @Test func createOnlyNeverTouchesAnExistingEntry() throws {
        let path = try node("existing")
        try TestProcess.setup("setfacl", ["-m", "u:\(alice.name):r", path])
        let before = try fingerprint(path)
        #expect(try ACLWriter.createUserEntry(path: path, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
                == .alreadyPresent(permissions: .read, effective: .read))
        #expect(try fingerprint(path) == before)
        #expect(try alice.canOpen(path, .read))
        #expect(try !alice.canOpen(path, .write))

        let masked = try node("masked")
        try TestProcess.setup("setfacl", ["-m", "u:\(alice.name):rw,m::r", masked])
        let maskedBefore = try fingerprint(masked)
        #expect(try ACLWriter.createUserEntry(path: masked, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
                == .alreadyPresent(permissions: .readWrite, effective: .read))
        #expect(try fingerprint(masked) == maskedBefore)
        #expect(try !alice.canOpen(masked, .write))
    }

    @Test func createOnlyKeepsTheNodeChecks() throws {
        let target = try node("ctarget")
        let link = directory.path + "/clink"
        try TestProcess.setup("ln", ["-s", target, link])
        let planted = directory.path + "/czero"
        try TestProcess.setup("mknod", ["-m", "0600", planted, "c", "1", "5"])
        let before = (try fingerprint(target), try fingerprint(planted))
        #expect(throws: ACLWriter.WriteError.notCharacterDevice(link, found: .symlink)) {
            try ACLWriter.createUserEntry(path: link, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        }
        #expect(throws: ACLWriter.WriteError.wrongDevice(planted, expectedMajor: 1, expectedMinor: 3,
                                                          foundMajor: 1, foundMinor: 5)) {
            try ACLWriter.createUserEntry(path: planted, expectedMajor: 1, expectedMinor: 3, uid: alice.uid)
        }
        #expect(try fingerprint(target) == before.0)
        #expect(try fingerprint(planted) == before.1)
    }

    @Test func symlinkIsRefusedAndTargetUntouched() throws {
        let target = try node("target")
        let link = directory.path + "/link"
        try TestProcess.setup("ln", ["-s", target, link])
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
        try TestProcess.setup("install", ["-m", "0600", "/dev/null", file])
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
        try TestProcess.setup("mknod", ["-m", "0600", planted, "c", "1", "5"])
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
