import Testing
@testable import DevAccessCore

/// `MaxAccuracy=`: where it may be written, what it refuses, and which cap applies.
struct LocationPolicyTests {
    let alice = UserIdentity(uid: 1000, name: "alice", primaryGID: 1000,
                             groups: [GroupRef(gid: 1000, name: "alice"), GroupRef(gid: 2000, name: "students")])
    let bob = UserIdentity(uid: 1001, name: "bob", primaryGID: 1001, groups: [GroupRef(gid: 1001, name: "bob")])
    let file = "/etc/devaccess/devaccess.conf"

    func policy(_ text: String) throws(PolicyParser.ConfigError) -> Policy {
        try PolicyParser.parse([(path: file, text: text)])
    }

    func cap(_ policy: Policy, _ user: UserIdentity, program: String? = nil) -> LocationAccuracy? {
        policy.decision(for: .location, user: user, program: program).accuracyCap?.level
    }

    @Test func theCoarsestMatchingCapHolds() throws {
        let rules = try policy("""
            [location]
            Default=ask
            MaxAccuracy=street

            [Rule]
            Group=students
            MaxAccuracy=city
            Action=ask

            [Rule]
            Permission=location
            User=alice
            Action=allow
            """)
        let decision = rules.decision(for: .location, user: alice)
        // The last rule decides the action; the students' cap still holds.
        #expect(decision.action == .allow && decision.accuracyCap?.level == .city)
        #expect(decision.accuracyCap?.description == "MaxAccuracy=city (\(file):5)")
        #expect(decision.capping(.exact) == .city && decision.capping(.country) == .country)
        #expect(cap(rules, bob) == .street)
        // Caps are about location only.
        #expect(rules.decision(for: .camera, user: alice).accuracyCap == nil)
    }

    @Test func programRulesCapTheirProgramOnly() throws {
        let rules = try policy("[Rule]\nPermission=location\nProgram=/usr/bin/maps\nMaxAccuracy=country\nAction=allow\n")
        #expect(cap(rules, alice, program: "/usr/bin/maps") == .country)
        #expect(cap(rules, alice) == nil)
        #expect(rules.requestDecision(for: .location, user: alice, program: "/usr/bin/maps").accuracyCap?.level == .country)
    }

    @Test func anEmptyValueMeansNoCap() throws {
        let rules = try policy("[location]\nMaxAccuracy=city\nMaxAccuracy=\n")
        #expect(cap(rules, alice) == nil)
    }

    @Test func mistakesAreNamedWithTheirLine() {
        #expect(throws: PolicyParser.ConfigError(file: file, line: 2, problem: "MaxAccuracy=: 'precise' is not a "
            + "location accuracy; use one of: exact, street, neighborhood, city, country")) {
            try policy("[Rule]\nMaxAccuracy=precise\nAction=allow\n")
        }
        #expect(throws: PolicyParser.ConfigError.self) { try policy("[camera]\nMaxAccuracy=city\n") }
        #expect {
            try policy("[Rule]\nPermission=camera microphone\nMaxAccuracy=city\nAction=ask\n")
        } throws: { error in
            (error as? PolicyParser.ConfigError)?.problem.hasPrefix("MaxAccuracy= caps location, but this rule is for "
                + "camera microphone only") == true
        }
        // Level words are taken in any case, as permission names are.
        #expect((try? policy("[location]\nMaxAccuracy=City\n")).map { cap($0, alice) } == .city)
    }
}
