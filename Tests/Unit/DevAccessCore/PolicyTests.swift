import Foundation
import Testing
@testable import DevAccessCore

struct DurationTextTests {
    @Test(arguments: [("90s", 90), ("15m", 900), ("8h", 28_800), ("7d", 604_800), ("1h30m", 5400), ("2w", 1_209_600)])
    func parses(text: String, seconds: Int64) throws {
        #expect(try DurationText.seconds(text) == seconds)
        #expect(try DurationText.seconds(DurationText.format(seconds: seconds)) == seconds)
    }

    @Test(arguments: ["", "90", "m", "1x", "-5m", "1.5h", "0s", "99999999999d", "１m"])
    func refuses(text: String) {
        #expect(throws: DurationText.ParseError(text: text)) { try DurationText.seconds(text) }
    }
}

struct INIFileTests {
    @Test func sectionsKeysCommentsAndContinuations() throws {
        let ini = try INIFile(parsing: """
        # comment
        [camera]
        Default = ask
        ; another comment
        Keep=\\
          15m

        [Rule]
        Action=deny
        """)
        #expect(ini.sections.map(\.name) == ["camera", "Rule"])
        #expect(ini.sections[0].entries.map(\.key) == ["Default", "Keep"])
        #expect(ini.sections[0].entries[1].value == "15m")
        #expect(ini.sections[1].entries[0].line == 9)
    }

    @Test func errorsNameTheLine() {
        #expect(throws: INIFile.ParseError(line: 1, problem: "'Default=' appears before any [Section] header")) {
            try INIFile(parsing: "Default=ask")
        }
        #expect(throws: INIFile.ParseError(line: 2, problem: "expected '[Section]' or 'Key=Value', found 'oops'")) {
            try INIFile(parsing: "[camera]\noops")
        }
        #expect(throws: INIFile.ParseError(line: 1, problem: "section header '[camera' lacks its closing ']'")) {
            try INIFile(parsing: "[camera")
        }
    }
}

struct PolicyTests {
    let alice = UserIdentity(uid: 1000, name: "alice", primaryGID: 1000,
                             groups: [GroupRef(gid: 1000, name: "alice"), GroupRef(gid: 2000, name: "students")])
    let bob = UserIdentity(uid: 1001, name: "bob", primaryGID: 1001, groups: [GroupRef(gid: 1001, name: "bob")])

    func policy(_ text: String, dropIn: String? = nil) throws -> Policy {
        var files = [(path: "/etc/devaccess/devaccess.conf", text: text)]
        if let dropIn { files.append((path: "/etc/devaccess/conf.d/50-local.conf", text: dropIn)) }
        return try PolicyParser.parse(files)
    }

    @Test func defaultsApplyPerPermission() throws {
        let policy = try policy("[camera]\nDefault=auth_self\nMaxDuration=8h\n[location]\nDefault=deny")
        #expect(policy.decision(for: .camera, user: alice).action == .authSelf)
        #expect(policy.decision(for: .camera, user: alice).maxDurationSeconds == 28_800)
        #expect(policy.decision(for: .location, user: alice).action == .deny)
        #expect(policy.decision(for: .microphone, user: alice) ==
                PolicyDecision(action: .ask, maxDurationSeconds: nil, keepSeconds: nil, origin: nil))
    }

    @Test func rulesMatchUserGroupAndProgram() throws {
        let policy = try policy("""
        [camera]
        Default=ask
        [Rule]
        Permission=camera
        Group=students
        Action=auth_admin
        [Rule]
        Permission=camera
        User=bob
        Program=/usr/bin/cheese
        Action=allow
        """)
        #expect(policy.decision(for: .camera, user: alice).action == .authAdmin)
        #expect(policy.decision(for: .camera, user: alice).origin == PolicyOrigin(file: "/etc/devaccess/devaccess.conf", line: 3))
        #expect(policy.decision(for: .camera, user: bob).action == .ask)
        #expect(policy.decision(for: .camera, user: bob, program: "/usr/bin/cheese").action == .allow)
        #expect(policy.decision(for: .microphone, user: alice).action == .ask)
    }

    /// A grant is the user's (access lists name users): a Program= allow decides for its
    /// program, except against a deny the user gets whatever the program.
    @Test func aProgramAllowDoesNotOutweighTheUsersDeny() throws {
        let policy = try policy("""
        [camera]
        Default=deny
        [microphone]
        Default=ask
        [Rule]
        Program=/usr/bin/cheese
        Action=allow
        [Rule]
        Program=/usr/bin/arecord
        Action=deny
        """)
        #expect(policy.decision(for: .camera, user: alice, program: "/usr/bin/cheese").action == .allow)
        #expect(policy.requestDecision(for: .camera, user: alice, program: "/usr/bin/cheese").action == .deny)
        #expect(policy.requestDecision(for: .camera, user: alice, program: "/usr/bin/cheese")
                == policy.decision(for: .camera, user: alice), "the default that denies, with its origin")
        #expect(policy.requestDecision(for: .microphone, user: alice, program: "/usr/bin/cheese").action == .allow)
        #expect(policy.requestDecision(for: .microphone, user: alice, program: "/usr/bin/arecord").action == .deny)
        #expect(policy.requestDecision(for: .microphone, user: alice, program: nil).action == .ask)
    }

    @Test func dropInsOverrideTheMainFile() throws {
        let policy = try policy("[Rule]\nAction=allow", dropIn: "[Rule]\nUser=alice\nAction=deny")
        #expect(policy.decision(for: .camera, user: alice).action == .deny)
        #expect(policy.decision(for: .camera, user: bob).action == .allow)
        let restriction = try #require(policy.restriction(for: .camera, user: alice))
        #expect(restriction.kind == .policy)
        #expect(restriction.message == "policy forbids camera for alice (/etc/devaccess/conf.d/50-local.conf:1)")
    }

    @Test func restrictedStatusComesFromPolicy() throws {
        let policy = try policy("[microphone]\nDefault=deny")
        let inputs = DecisionInputs(policyRestriction: policy.restriction(for: .microphone, user: alice))
        let facts = NodeFacts(path: "/dev/snd/pcmC0D0c", kind: .characterDevice, ownerUID: 0, groupGID: 29, mode: 0o666)
        let device = Device(permission: .microphone, id: "m", name: "m",
                            nodes: [DeviceNode(path: facts.path, role: "capture", required: .readWrite, state: .present(facts))])
        let status = StatusEvaluator.evaluate(AdapterReport(permission: .microphone, devices: [device]), for: alice, inputs: inputs)
        #expect(status.status == .restricted)
    }

    @Test(arguments: [
        ("[camera]\nDefault=maybe", 2, "'maybe' is not an action for Default=; valid: allow, deny, ask, auth_self, auth_admin"),
        ("[camera]\nColour=red", 2, "unknown key 'Colour' in [camera]; valid: Default, MaxDuration, Keep"),
        ("[kamera]\nDefault=ask", 1, "unknown section '[kamera]'; valid sections: [camera], [microphone], [location], [Rule], [Program]"),
        ("[Program]\nPermissions=camera", 1, "[Program] has no Path= line"),
        ("[Program]\nPath=cheese\nPermissions=camera", 2, "Path= needs one absolute path, 'cheese' is not one"),
        ("[Program]\nPath=/usr/bin/cheese\nPermissions=camra", 3,
         "unknown permission 'camra' in Permissions=; valid: camera, microphone, location"),
        ("[Rule]\nUser=alice", 1, "[Rule] has no Action= line"),
        ("[Rule]\nPermission=camra\nAction=deny", 2, "unknown permission 'camra' in Permission=; valid: camera, microphone, location, *"),
        ("[Rule]\nProgram=cheese\nAction=allow", 2, "Program= needs absolute paths, 'cheese' is not one"),
        ("[camera]\nMaxDuration=forever", 2, "MaxDuration=: 'forever' is not a duration; write a number with a unit s, m, h, d or w (90s, 15m, 8h, 7d, 2w, 1h30m)"),
        ("[camera\nDefault=ask", 1, "section header '[camera' lacks its closing ']'"),
    ])
    func errorsNameFileLineAndProblem(text: String, line: Int, problem: String) {
        #expect(throws: PolicyParser.ConfigError(file: "/etc/devaccess/devaccess.conf", line: line, problem: problem)) {
            try policy(text)
        }
    }

    @Test func shippedDefaultConfigParses() throws {
        let path = #filePath.replacingOccurrences(of: "Tests/Unit/DevAccessCore/PolicyTests.swift", with: "config/devaccess.conf")
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let policy = try PolicyParser.parse([(path: path, text: text)])
        for permission in Permission.all {
            #expect(policy.decision(for: permission, user: alice).action == .ask)
        }
    }
}
