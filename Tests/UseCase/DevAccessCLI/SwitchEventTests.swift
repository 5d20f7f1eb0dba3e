import Foundation
import Testing
@testable import DevAccessCLI
import DevAccessCore
import DevAccessInterface
import DevAccessLedger
import DevAccessEngine

/// `monitor --json`'s switch line is the switch's state as `switch --json` lists it, with
/// `"event": "switch"` in front: no copy of its members to fall behind.
@Suite struct SwitchEventTests {
    @Test func aSwitchLineHasEveryMemberOfTheSwitchState() throws {
        let off = PrivacySwitch(permission: .camera, hard: true, by: Principal(uid: 0, name: "root"),
                                since: Date(timeIntervalSince1970: 1_800_000_000),
                                until: Date(timeIntervalSince1970: 1_800_003_600), reason: "exam week")
        let state = SwitchesDocument.State(permission: .camera, off: off)
        let line = try JSONOutput.encodeLine(SwitchEvent(state: state))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let alone = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(state)) as? [String: Any])
        #expect(object["event"] as? String == "switch", "\(line)")
        #expect(Set(object.keys) == Set(alone.keys).union(["event"]), "\(line)")
        #expect(object["byUid"] as? Int == 0 && object["restricted"] as? String == state.restricted, "\(line)")
        #expect(object["hard"] as? Bool == true && object["reason"] as? String == "exam week", "\(line)")
        // Its end is `expires`, as a grant's (issue 26: `until` went).
        #expect(object["expires"] as? String == "2027-01-15T09:00:00Z" && object["until"] == nil, "\(line)")
    }
}
