import Foundation
import Testing
import DevAccessCore
import DevAccessInterface
import DevAccessLedger
import DevAccessProtocol
import DevAccessEngine
import DevAccessEnforcement

/// The contract's reads (`status`, `statusUpdates`, `who`) on the engine constructed directly,
/// for each kind of caller, checked against a table written by hand from devaccess(1) and
/// docs/security.md (anyone sees their own status; only root and administrators, never from a
/// strict run, another user's; status updates come from devaccessd alone; `who` is read with
/// the caller's own credentials, so anyone may), not derived from the code.
///
/// A = served, R = refused (`.refused`: exit 77), U = `.unreachable` (needs devaccessd: exit 69).
/// The callers are real accounts (the engine looks the named user up): root, daemon (uid 1)
/// as an administrator, bin (uid 2) as a user, in a run given the camera, in a strict run given
/// the camera; "another user" is sys (uid 3) for all of them.
struct ReadOperationsTests {
    static let program = Program(path: "/usr/bin/cheese")
    static let run = RunScope(id: 7, gid: RunGroups.first + 6, strict: false, permissions: [.camera], program: program)
    static let strictRun = RunScope(id: 8, gid: RunGroups.first + 7, strict: true, permissions: [.camera],
                                    program: program)
    static let other = "3"

    static let callers: [(String, Caller)] = [
        ("root", Caller(principal: Principal(uid: 0, name: "root"), standing: .root)),
        ("admin", Caller(principal: Principal(uid: 1, name: "daemon"), standing: .admin)),
        ("user", Caller(principal: Principal(uid: 2, name: "bin"), standing: .user)),
        ("run", Caller(principal: Principal(uid: 2, name: "bin"), standing: .user, run: run)),
        ("strict", Caller(principal: Principal(uid: 2, name: "bin"), standing: .user, run: strictRun)),
    ]

    //                 operation                        root admin user run strict
    static let table: [(String, Operation, String)] = [
        ("status, own",                     .status(other: false),  "A A A A A"),
        ("status, another user's",          .status(other: true),   "A A R R R"),
        ("status updates, own (judged)",    .subscribe,             "A A A A A"),
        ("status updates in this process",  .statusUpdates,         "U U U U U"),
        ("who",                             .who,                   "A A A A A"),
    ]

    enum Operation {
        case status(other: Bool)
        case subscribe
        case statusUpdates
        case who
    }

    /// The engine in this process over a state directory without a ledger, no policy file and
    /// declared devices (none): every read is served from what is here.
    static func engine(_ caller: Caller, in directory: String) throws -> EngineService {
        try Data(#"{"devices": []}"#.utf8).write(to: URL(fileURLWithPath: directory + "/devices.json"))
        let reads = EngineReads(EngineReads.Settings(stateDirectory: directory, policyDirectory: directory + "/policy"),
                                environment: [ProcessEnvironment.Name.testDevices: directory + "/devices.json"])
        return reads.readingEngine(caller: caller)
    }

    static func symbol(_ operation: Operation, by caller: Caller, engine: EngineService) async -> String {
        do throws(InterfaceError) {
            switch operation {
            case .status(let other):
                let user = other ? Self.other : String(caller.uid)
                let reply = try await engine.status(StatusQuery(permissions: [.camera], user: user))
                return reply.uid == UInt32(user) && reply.permissions.map(\.permission) == [.camera] ? "A" : "?"
            case .subscribe:
                return try engine.subscription(SubscribeQuery(permissions: [.camera])) == [.camera] ? "A" : "?"
            case .statusUpdates:
                for try await _ in engine.statusUpdates(SubscribeQuery()) { return "?" }
                return "?"
            case .who:
                let document = try await engine.who(WhoQuery(permissions: [.camera]))
                return document.holders.isEmpty ? "A" : "?"
            }
        } catch {
            switch error {
            case .refused: return "R"
            case .unreachable: return "U"
            default: return "\(error)"
            }
        }
    }

    @Test func everyCellIsAsWritten() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("reads-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(Self.callers.map { $0.1.kind } == [.root, .admin, .user, .inRun, .inStrictRun])
        for (name, operation, expected) in Self.table {
            var got: [String] = []
            for (_, caller) in Self.callers {
                got.append(await Self.symbol(operation, by: caller, engine: try Self.engine(caller, in: directory)))
            }
            #expect(got.joined(separator: " ") == expected, "\(name): root admin user run strict")
        }
    }

    /// An administrator's program in a strict run sees no other user's status, and the refusal
    /// says why (the run), as the engine says it to devaccessd's peer and to the CLI alike.
    @Test func aStrictRunOfAnAdministratorSeesOnlyItsOwnStatus() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("reads-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let strictAdmin = Caller(principal: Principal(uid: 1, name: "daemon"), standing: .admin, run: Self.strictRun)
        let engine = try Self.engine(strictAdmin, in: directory)
        #expect(try engine.statusSubject(StatusQuery(user: "1")).uid == 1)
        do {
            _ = try await engine.status(StatusQuery(user: Self.other))
            Issue.record("a strict run read another user's status")
        } catch {
            guard case .refused(let operation, let reason) = error else {
                Issue.record("\(error)")
                return
            }
            #expect(operation == "status for another user")
            #expect(reason.contains("strict run") && reason.contains("/usr/bin/cheese"), "\(reason)")
        }
    }

    /// A user named that does not exist is a usage error, before anything is read.
    @Test func aUserThatIsNoUserIsABadArgument() throws {
        let root = Caller(principal: Principal(uid: 0, name: "root"), standing: .root)
        let engine = EngineService(caller: root, runner: NeverRun())
        #expect(throws: InterfaceError.self) { try engine.statusSubject(StatusQuery(user: "no-such-user-devaccess")) }
        do {
            _ = try engine.statusSubject(StatusQuery(user: "no-such-user-devaccess"))
        } catch {
            guard case .badArgument = error else {
                Issue.record("\(error)")
                return
            }
        }
    }
}

/// Reads never run the enforcement engine.
struct NeverRun: EngineRunner {
    func run<R: Sendable>(_ operation: String,
                          _ body: @escaping @Sendable (Enforcer) throws(EnforcementError) -> (R, EnforcementReport))
        async throws(InterfaceError) -> R
    {
        Issue.record("'\(operation)' ran the enforcement engine")
        throw .failed("not here")
    }
}
