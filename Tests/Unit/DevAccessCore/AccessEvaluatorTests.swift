import Testing
@testable import DevAccessCore

/// Status computation from node, ACL and group facts, case by case as the kernel decides.
struct AccessEvaluatorTests {
    let video: UInt32 = 44
    let audio: UInt32 = 29
    let staff: UInt32 = 50

    func user(_ uid: UInt32 = 1000, groups: [UInt32] = []) -> UserIdentity {
        UserIdentity(uid: uid, name: "alice", primaryGID: 1000,
                     groups: ([1000] + groups).map { GroupRef(gid: $0, name: nil) })
    }

    func node(owner: UInt32 = 0, group: UInt32 = 44, mode: UInt32 = 0o660, acl: [ACLEntry]? = nil) -> NodeFacts {
        NodeFacts(path: "/dev/video0", kind: .characterDevice, major: 81, minor: 0,
                  ownerUID: owner, groupGID: group, mode: mode, acl: acl)
    }

    func acl(user: AccessMode = .readWrite, group: AccessMode = .readWrite, mask: AccessMode? = nil,
             other: AccessMode = .none, extra: [ACLEntry]) -> [ACLEntry] {
        var entries = [ACLEntry(tag: .userObject, permissions: user)] + extra.filter {
            if case .user = $0.tag { true } else { false }
        }
        entries.append(ACLEntry(tag: .groupObject, permissions: group))
        entries += extra.filter { if case .group = $0.tag { true } else { false } }
        if let mask { entries.append(ACLEntry(tag: .mask, permissions: mask)) }
        entries.append(ACLEntry(tag: .other, permissions: other))
        return entries
    }

    @Test func ownerUsesOwnerBitsOnly() {
        let result = AccessEvaluator.evaluate(node(owner: 1000, mode: 0o066), for: user(groups: [video]))
        // The owner class matches first; the group and other bits do not add to it.
        #expect(result.access == .none)
        #expect(result.decidedBy == .owner)
    }

    @Test func groupMemberGetsGroupBits() {
        let result = AccessEvaluator.evaluate(node(mode: 0o640), for: user(groups: [video]))
        #expect(result.access == .read)
        #expect(result.decidedBy == .groupClass(matching: [video]))
    }

    @Test func primaryGroupCounts() {
        let result = AccessEvaluator.evaluate(node(group: 1000, mode: 0o660), for: user())
        #expect(result.access == .readWrite)
    }

    @Test func groupClassDoesNotFallThroughToOther() {
        let result = AccessEvaluator.evaluate(node(mode: 0o606), for: user(groups: [video]))
        #expect(result.access == .none)
    }

    @Test func strangerGetsOtherBits() {
        #expect(AccessEvaluator.evaluate(node(mode: 0o660), for: user()).access == .none)
        let open = AccessEvaluator.evaluate(node(mode: 0o666), for: user())
        #expect(open.access == .readWrite)
        #expect(open.decidedBy == .other)
    }

    @Test func rootBypassesEverything() {
        let result = AccessEvaluator.evaluate(node(mode: 0o000), for: user(0))
        #expect(result.access == .readWrite)
        #expect(result.decidedBy == .superuser)
    }

    @Test func namedUserEntryGrants() {
        let entries = acl(mask: .readWrite, extra: [ACLEntry(tag: .user(1000), permissions: .readWrite)])
        let result = AccessEvaluator.evaluate(node(acl: entries), for: user())
        #expect(result.access == .readWrite)
        #expect(result.decidedBy == .namedUser(uid: 1000))
    }

    @Test func maskLimitsNamedUser() {
        let entries = acl(mask: .read, extra: [ACLEntry(tag: .user(1000), permissions: .readWrite)])
        let result = AccessEvaluator.evaluate(node(acl: entries), for: user())
        #expect(result.access == .read)
        #expect(result.maskedOut == .write)
    }

    @Test func maskDoesNotLimitOwner() {
        let entries = acl(user: .readWrite, mask: AccessMode.none, extra: [ACLEntry(tag: .user(2000), permissions: .read)])
        #expect(AccessEvaluator.evaluate(node(owner: 1000, acl: entries), for: user()).access == .readWrite)
    }

    @Test func namedUserBeatsGroupMembership() {
        // A named-user entry decides even when a group the user is in would give more.
        let entries = acl(mask: .readWrite, extra: [ACLEntry(tag: .user(1000), permissions: .none)])
        #expect(AccessEvaluator.evaluate(node(acl: entries), for: user(groups: [video])).access == .none)
    }

    @Test func namedGroupEntryGrantsThroughMask() {
        let entries = acl(group: .none, mask: .readWrite, extra: [ACLEntry(tag: .group(staff), permissions: .readWrite)])
        let result = AccessEvaluator.evaluate(node(acl: entries), for: user(groups: [staff]))
        #expect(result.access == .readWrite)
        #expect(result.decidedBy == .groupClass(matching: [staff]))
    }

    @Test func readWriteNeedsOneGroupEntryWithBoth() {
        // Group 'video' gives read, 'staff' gives write: O_RDWR is refused, each alone works.
        let entries = acl(group: .read, mask: .readWrite, extra: [ACLEntry(tag: .group(staff), permissions: .write)])
        let result = AccessEvaluator.evaluate(node(acl: entries), for: user(groups: [video, staff]))
        #expect(result.access == .read)
    }

    @Test func matchingGroupThatGrantsNothingBlocksOther() {
        let entries = acl(group: .none, mask: .readWrite, other: .readWrite, extra: [])
        #expect(AccessEvaluator.evaluate(node(acl: entries), for: user(groups: [video])).access == .none)
        #expect(AccessEvaluator.evaluate(node(acl: entries), for: user()).access == .readWrite)
    }

    @Test func otherIsNotMasked() {
        let entries = acl(mask: AccessMode.none, other: .read, extra: [ACLEntry(tag: .user(2000), permissions: .read)])
        #expect(AccessEvaluator.evaluate(node(acl: entries), for: user()).access == .read)
    }

    @Test func emptyMaskMeansTheModeBitsDecide() {
        // Kernel: with mask --- (group bits 0) the ACL is not consulted at all, so a named
        // user falls through to 'other'. The mode's group bits show the mask.
        let entries = acl(mask: AccessMode.none, other: .read, extra: [ACLEntry(tag: .user(1000), permissions: .readWrite)])
        let result = AccessEvaluator.evaluate(node(mode: 0o604, acl: entries), for: user())
        #expect(result.access == .read)
        #expect(result.decidedBy == .other)
    }
}
