import Testing
import DevAccessInterface

/// Issue 31: how `list` names a `once` grant's term. "once" reads as a single use; the grant
/// lasts until the process that asked exits (JSON keeps the word `once`).
@Suite struct OnceTermTextTests {
    static func grant(whilePid: Int32?, expires: String? = nil) -> GrantDocument {
        var grant = GrantDocument(id: 1, user: "alice", uid: 1000, permission: "camera", decision: "allow",
                                  scope: "once", created: "2026-12-07T22:00:00Z", active: true, decidedBy: "alice",
                                  decidedByUid: 1000, how: "consent")
        grant.whilePid = whilePid
        grant.expires = expires
        return grant
    }

    @Test func aOnceGrantLastsUntilItsProcessExits() {
        #expect(Self.grant(whilePid: 812).term == "until pid 812 exits")
        #expect(Self.grant(whilePid: 812, expires: "2026-12-08T06:00:00Z").term
            == "until pid 812 exits, at most until 2026-12-08T06:00:00Z")
        #expect(Self.grant(whilePid: 812).scope == "once", "the JSON word stays")
    }
}
