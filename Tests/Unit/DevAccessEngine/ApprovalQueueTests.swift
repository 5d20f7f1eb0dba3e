import Foundation
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessEnforcement
import DevAccessProtocol
import DevAccessInterface
import DevAccessEngine

/// The approval queue on the engine (`EngineService.pending`, `approve`, `reject`), built
/// directly: a ledger in a temporary directory, an engine run in this thread, no daemon.
/// Who may do what is checked against a table written by hand from devaccess(1) ("root
/// and members of devaccess-admin list every request, approve and reject; anyone else
/// lists and withdraws their own"), not from the code: review it on its own.
struct ApprovalQueueTests {
    /// The requester (uid 1002) and another user (uid 1003) each have a request waiting.
    static let requester = Principal(uid: 1002, name: "u1002")
    static let other = Principal(uid: 1003, name: "u1003")
    static let program = Program(path: "/usr/bin/cheese")
    static let run = RunScope(id: 7, gid: RunGroups.first + 6, strict: false, permissions: [.camera], program: program)
    static let strictRun = RunScope(id: 8, gid: RunGroups.first + 7, strict: true, permissions: [.camera],
                                    program: program)

    static let callers: [(String, Caller)] = [
        ("root", Caller(principal: Principal(uid: 0, name: "root"), standing: .root)),
        ("admin", Caller(principal: Principal(uid: 1001, name: "u1001"), standing: .admin)),
        ("requester", Caller(principal: requester, standing: .user)),
        ("another user", Caller(principal: Principal(uid: 1004, name: "u1004"), standing: .user)),
        ("run", Caller(principal: requester, standing: .user, run: run)),
        ("strict run", Caller(principal: requester, standing: .user, run: strictRun)),
        ("admin's strict run", Caller(principal: Principal(uid: 1001, name: "u1001"), standing: .admin, run: strictRun)),
    ]

    //  operation     root        admin       requester  another user  run    strict run  admin's strict run
    //  pending: the uids whose requests are listed ("-": none); approve/reject: A allowed, R refused.
    static let matrix: [(String, String)] = [
        ("pending",       "1002,1003 1002,1003 1002 - 1002 1002 -"),
        ("approve",       "A A R R R R R"),
        ("reject",        "A A R R R R R"),
        ("reject --deny", "A A R R R R R"),
    ]

    /// The engine in this thread, over `ledger`, for a test.
    struct DirectRunner: EngineRunner {
        let enforcer: Enforcer

        func run<R: Sendable>(
            _ operation: String, _ body: @escaping @Sendable (Enforcer) throws(EnforcementError) -> (R, EnforcementReport)
        ) async throws(InterfaceError) -> R {
            do {
                return try body(enforcer).0
            } catch {
                throw InterfaceError(error)
            }
        }
    }

    /// A fresh ledger with the two waiting requests (ids 1 and 2), and the engine over it.
    static func engine(_ caller: Caller) throws -> (EngineService, Ledger, URL) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("approval-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let ledger = try Ledger(path: directory.path + "/ledger.db", journal: .disabled)
        _ = try ledger.queueRequest(NewPendingRequest(subject: requester, permissions: [.camera], scope: .always,
                                                      reason: "call"))
        _ = try ledger.queueRequest(NewPendingRequest(subject: other, permissions: [.microphone], scope: .always))
        let policy = try PolicyParser.parse([(path: "/etc/devaccess/devaccess.conf",
                                              text: "[camera]\nDefault=auth_admin\n[microphone]\nDefault=auth_admin\n")])
        let enforcer = Enforcer(ledger: ledger, devices: DeclaredDeviceSource(devices: []), actor: caller.principal,
                                identities: { UserIdentity(uid: $0, name: "u\($0)", primaryGID: $0, groups: []) },
                                policy: { .loaded(policy) })
        return (EngineService(caller: caller, runner: DirectRunner(enforcer: enforcer)), ledger, directory)
    }

    /// One cell: what `operation` did for `caller`, as the table writes it.
    static func cell(_ operation: String, _ caller: Caller) async throws -> String {
        let (service, ledger, directory) = try engine(caller)
        defer { try? FileManager.default.removeItem(at: directory) }
        if operation == "pending" {
            let uids = try await service.pending().requests.map { String($0.uid) }
            return uids.isEmpty ? "-" : uids.joined(separator: ",")
        }
        let refusal: (operation: String, reason: String)?
        do throws(InterfaceError) {
            try await resolve(operation, service)
            refusal = nil
        } catch {
            guard case .refused(let name, let reason) = error else { throw error }
            refusal = (name, reason)
        }
        guard let refusal else {
            #expect(try ledger.pendingRequest(id: 1)?.isWaiting == false)
            return "A"
        }
        #expect(refusal.operation == (operation == "approve" ? "approve" : "reject"))
        #expect(refusal.reason.contains("may not \(refusal.operation) request 1"), "\(refusal.reason)")
        #expect(try ledger.pendingRequest(id: 1)?.isWaiting == true, "a refusal decides nothing")
        #expect(try ledger.grants(uid: requester.uid, includeInactive: true).isEmpty)
        return "R"
    }

    /// `approve`, `reject` or `reject --deny` of request 1, and what an allowed one answers.
    static func resolve(_ operation: String, _ service: EngineService) async throws(InterfaceError) {
        switch operation {
        case "approve":
            let reply = try await service.approve(PendingAction(pending: 1))
            #expect(reply.resolution == .approved && reply.results.map(\.outcome) == [.granted], "\(reply)")
        case "reject":
            let reply = try await service.reject(PendingAction(pending: 1))
            #expect(reply.resolution == .declined && reply.results.map(\.outcome) == [.undecided], "\(reply)")
        default:
            let reply = try await service.reject(PendingAction(pending: 1, deny: true))
            #expect(reply.resolution == .rejected && reply.results.map(\.outcome) == [.denied], "\(reply)")
        }
    }

    @Test func everyCellIsAsWritten() async throws {
        #expect(Self.callers.map(\.1.kind) == [.root, .admin, .user, .user, .inRun, .inStrictRun, .inStrictRun])
        for (operation, expected) in Self.matrix {
            var got: [String] = []
            for (_, caller) in Self.callers { got.append(try await Self.cell(operation, caller)) }
            #expect(got.joined(separator: " ") == expected,
                    "\(operation): \(Self.callers.map(\.0).joined(separator: ", "))")
        }
    }

    /// A request resolved once is not resolved again; an unknown one is not found; a
    /// request whose uid names someone else now is not decided for.
    @Test func onlyAWaitingRequestOfTheSameUserIsDecided() async throws {
        let root = Self.callers[0].1
        let (service, ledger, directory) = try Self.engine(root)
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try await service.approve(PendingAction(pending: 1))
        await #expect(throws: InterfaceError.self) { try await service.approve(PendingAction(pending: 1)) }
        do {
            _ = try await service.reject(PendingAction(pending: 1))
            Issue.record("a resolved request was rejected")
        } catch {
            #expect(error.description.hasPrefix("request 1 was already approved by root at "), "\(error)")
            guard case .notFound = error else { Issue.record("not 'not found': \(error)"); return }
        }
        do {
            _ = try await service.approve(PendingAction(pending: 99))
            Issue.record("an unknown request was approved")
        } catch {
            guard case .notFound(let text) = error else { Issue.record("\(error)"); return }
            #expect(text == "there is no request 99; 'devaccess pending' lists those waiting")
        }
        let renamed = ApprovalPlan.Resolving.subjectChanged(try #require(try ledger.pendingRequest(id: 2)), now: "mallory")
        #expect(renamed.resolved == nil, "nobody is told of a request that was not decided")
        guard case .failure(let error) = renamed.answer(.approve(nil)) else { Issue.record("decided"); return }
        #expect(error.description.contains("uid 1003 is mallory's now") && error.description.contains("nothing was decided"))
    }

    /// What a requester waiting for a queued request hears.
    @Test func aQueuedRequesterHearsItsRequestsResolution() throws {
        let earlier = PendingRequest(id: 4, subject: Self.requester, program: nil, permissions: [.camera], scope: nil,
                                     reason: "", created: Date(), resolution: nil, resolved: nil, resolvedBy: nil)
        var plan = QueuePlan([.camera, .microphone], waiting: [earlier], location: nil)
        #expect(plan.uncovered == [.microphone])
        plan.queued(5)
        #expect(plan.ids == [4, 5] && plan.permissions(of: 5) == [.microphone] && plan.fresh == [5])
        let waiting = plan.result(.camera, resolved: nil, waited: false)
        #expect(waiting.outcome == .pending && waiting.pending == 4)
        #expect(waiting.message.contains("(an earlier request of yours, still waiting)"))
        var declined = earlier
        declined.resolution = .declined
        declined.resolvedBy = Principal(uid: 0, name: "root")
        let told = plan.result(.camera, resolved: (declined, []), waited: true)
        #expect(told.outcome == .undecided && told.message.hasPrefix("request 4 was declined by root"))
    }
}
