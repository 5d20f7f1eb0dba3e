import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessEngine

/// The authorization table (`Caller.judged`, DevAccessEngine), checked against a matrix written by hand
/// from the rules in devaccess(1) and docs/security.md, not from the code: review this
/// table on its own. A = allowed, P = allowed and judged as the run's program,
/// W = allowed within the run (its permissions, its location level), R = refused.
///
/// The callers: root; an administrator; a user acting on self; a subordinate uid; a user's
/// process in a run given the camera; one in a strict run given the camera and location at
/// street level. "another user" rows are the same callers acting on someone else.
struct AuthorizationMatrixTests {
    static let program = Program(path: "/usr/bin/cheese")
    static let run = RunScope(id: 7, gid: RunGroups.first + 6, strict: false, permissions: [.camera], program: program)
    static let strictRun = RunScope(id: 8, gid: RunGroups.first + 7, strict: true, permissions: [.camera, .location],
                                    program: program, accuracy: .street)

    static let callers: [(String, Caller)] = [
        ("root", Caller(principal: Principal(uid: 0, name: "u0"), standing: .root)),
        ("admin", Caller(principal: Principal(uid: 1001, name: "u1001"), standing: .admin)),
        ("user", Caller(principal: Principal(uid: 1002, name: "u1002"), standing: .user)),
        ("subordinate", Caller(principal: Principal(uid: 100_000, name: "u100000"), standing: .subordinate)),
        ("run", Caller(principal: Principal(uid: 1002, name: "u1002"), standing: .user, run: run)),
        ("strict", Caller(principal: Principal(uid: 1002, name: "u1002"), standing: .user, run: strictRun)),
    ]

    //                 operation                       root admin user sub run strict
    static let matrix: [(String, Authorization.Action, Authorization.Target, String)] = [
        ("status of self",            .status, .itself,                                        "A A A A A A"),
        ("status of another user",    .status, .anotherUser,                                   "A A R R R R"),
        ("pending/approve/reject",    .administer, .itself,                                    "A A R R R R"),
        ("revoke/reset of own",       .ownDecisions, .itself,                                  "A A A A A R"),
        ("revoke/reset of another's", .ownDecisions, .anotherUser,                             "A A R R R R"),
        ("request camera",            .request([.camera], accuracy: nil), .itself,             "A A A A P W"),
        ("request microphone",        .request([.microphone], accuracy: nil), .itself,         "A A A A P R"),
        ("request camera+microphone", .request([.camera, .microphone], accuracy: nil), .itself, "A A A A P R"),
        ("request location exact",    .request([.location], accuracy: .exact), .itself,        "A A A A P R"),
        ("request location street",   .request([.location], accuracy: .street), .itself,       "A A A A P W"),
        ("request location city",     .request([.location], accuracy: .city), .itself,         "A A A A P W"),
        ("open camera",               .open(.camera), .itself,                                 "A A A A A W"),
        ("open microphone",           .open(.microphone), .itself,                             "A A A A A R"),
        ("run camera",                .run([.camera], strict: false), .itself,                 "A A A A A R"),
        ("run camera --strict",       .run([.camera], strict: true), .itself,                  "A A A A A R"),
        ("location at the grant",     .location(nil), .itself,                                 "A A A A A W"),
        ("location street",           .location(.street), .itself,                             "A A A A A W"),
        ("location exact",            .location(.exact), .itself,                              "A A A A A R"),
        ("request for another user",  .request([.camera], accuracy: nil), .anotherUser,        "A A R R R R"),
        ("who (own credentials)",     .who, .itself,                                           "A A A A A A"),
    ]

    static func symbol(_ verdict: Authorization.Verdict) -> String {
        switch verdict {
        case .allowed: return "A"
        case .asProgram: return "P"
        case .withinRun: return "W"
        case .refused: return "R"
        }
    }

    @Test func everyCellIsAsWritten() {
        #expect(Self.callers.map { $0.1.kind } == [.root, .admin, .user, .subordinate, .inRun, .inStrictRun])
        for (name, action, target, expected) in Self.matrix {
            let got = Self.callers.map { Self.symbol($0.1.judged(action, target: target)) }
            #expect(got.joined(separator: " ") == expected, "\(name): root admin user sub run strict")
        }
    }

    /// An administrator's program in a strict run is no administrator; in a plain run it is.
    @Test func aStrictRunIsNeverAnAdministrator() {
        let strictAdmin = Caller(principal: Principal(uid: 1001, name: "u1001"), standing: .admin, run: Self.strictRun)
        let plainAdmin = Caller(principal: Principal(uid: 1001, name: "u1001"), standing: .admin, run: Self.run)
        #expect(strictAdmin.judged(.administer).isRefused)
        #expect(strictAdmin.judged(.status, target: .anotherUser).isRefused)
        #expect(plainAdmin.judged(.administer) == .allowed)
        #expect(plainAdmin.judged(.status, target: .anotherUser) == .allowed)
    }

    /// A strict run not given location (or whose level is not known) gets none; a run group
    /// id the ledger cannot name is a strict run given nothing.
    @Test func whatAStrictRunWasNotGivenItDoesNotGet() {
        var cameraOnly = Self.strictRun
        cameraOnly.permissions = [.camera]
        cameraOnly.accuracy = nil
        let caller = Caller(principal: Principal(uid: 1002, name: "u1002"), standing: .user, run: cameraOnly)
        #expect(caller.judged(.location(nil)).isRefused)
        #expect(caller.judged(.request([.location], accuracy: .country)).isRefused)
        var levelUnknown = Self.strictRun
        levelUnknown.accuracy = nil
        #expect(Caller(principal: Principal(uid: 1002, name: "u1002"), standing: .user, run: levelUnknown)
            .judged(.location(nil)).isRefused)
        let unknown = Caller(principal: Principal(uid: 1002, name: "u1002"), standing: .user,
                             run: .unrecorded(gid: RunGroups.first))
        #expect(unknown.judged(.open(.camera)).isRefused)
        #expect(unknown.judged(.status) == .allowed)
    }

    /// Every refusal says what the run was given and why, for the person reading it.
    @Test func aRefusalNamesTheRunAndWhy() {
        let strict = Caller(principal: Principal(uid: 1002, name: "u1002"), standing: .user, run: Self.strictRun)
        guard case .refused(let reason) = strict.judged(.open(.microphone)) else {
            Issue.record("not refused")
            return
        }
        #expect(reason.contains("/usr/bin/cheese") && reason.contains("camera and location") && reason.contains("--strict"),
                "\(reason)")
    }
}
