import Testing
import Foundation
import DevAccessSystem
import DevAccessTestSupport

/// /etc/subuid's ranges charge a subordinate uid's use of devaccessd to its owner.
struct SubordinateIDsTests {
    @Test func aSubordinateUidIsChargedToItsOwner() throws {
        let directory = try TemporaryDirectory()
        let file = directory.path + "/subuid"
        try Data("""
            root:100000:65536
            4242:300000:10
            broken line
            nobody-such-user-xyz:400000:5
            1000:500000:0
            """.utf8).write(to: URL(fileURLWithPath: file))
        #expect(SubordinateIDs.accountable(100_000, file: file) == 0)
        #expect(SubordinateIDs.accountable(165_535, file: file) == 0)
        #expect(SubordinateIDs.accountable(165_536, file: file) == 165_536)
        #expect(SubordinateIDs.accountable(300_009, file: file) == 4242)
        #expect(SubordinateIDs.accountable(300_010, file: file) == 300_010)
        // A name that names nobody, and an empty range, charge nobody else.
        #expect(SubordinateIDs.owner(of: 400_001, file: file) == nil)
        #expect(SubordinateIDs.owner(of: 500_000, file: file) == nil)
        #expect(SubordinateIDs.accountable(1000, file: directory.path + "/missing") == 1000)
    }
}
