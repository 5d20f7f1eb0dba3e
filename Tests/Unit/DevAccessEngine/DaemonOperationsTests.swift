import Testing
import DevAccessCore
import DevAccessInterface
import DevAccessEngine

/// `request`, `open` and `run` on the engine in this process: each needs devaccessd (consent on
/// the login terminal, the node opened as root, the program started and tracked), so for
/// every kind of caller the engine answers `.unreachable` (exit 69, as the CLI without
/// devaccessd), says why in a sentence that names devaccessd and how to start it, asks
/// nothing of the conversation and runs nothing on the engine queue.
struct DaemonOperationsTests {
    static let callers = ReadOperationsTests.callers

    /// A conversation that records any call: the engine must not talk to it.
    final class Silent: RequestConversation, RunConversation {
        var calls: [String] = []
        var watched: CInt? { calls.append("watched"); return nil }
        var startLimit: Duration? { calls.append("startLimit"); return nil }
        func waitLimit(waitingForAdmin: Bool) -> Duration? { calls.append("waitLimit"); return nil }
        func limitPassed() -> InterfaceError { calls.append("limitPassed"); return .failed("") }
        func watchedIsReady(waitingForAdmin: Bool) throws(InterfaceError) { calls.append("watchedIsReady") }
        func watchedIsReady(running: Bool, signals: any RunSignals) -> Bool { calls.append("watchedIsReady"); return true }
        func prompt(_ prompt: PromptMessage, line: any PromptLine) throws(InterfaceError) { calls.append("prompt") }
        func queued(_ reply: QueuedReply) { calls.append("queued") }
        func started(_ reply: RunStartedReply, signals: any RunSignals) { calls.append("started") }
    }

    enum Operation: CaseIterable {
        case request, open, run
    }

    static func answer(_ operation: Operation, engine: EngineService,
                       conversation: Silent) async -> InterfaceError? {
        do throws(InterfaceError) {
            switch operation {
            case .request:
                _ = try await engine.request(AccessRequest(permissions: [.camera], reason: "test"),
                                             conversation: conversation)
            case .open:
                let node = try await engine.open(OpenOrder(permission: .camera, device: "video0"))
                _ = node.release()
            case .run:
                let order = RunOrder(program: "/usr/bin/true", arguments: ["true"], environment: [], directory: "/",
                                     umask: 0o022, permissions: [.camera])
                _ = try await engine.run(order, streams: .inherited, conversation: conversation)
            }
            return nil
        } catch {
            return error
        }
    }

    @Test(arguments: Operation.allCases)
    func needsDevaccessdForEveryCaller(_ operation: Operation) async {
        for (name, caller) in Self.callers {
            let conversation = Silent()
            let error = await Self.answer(operation, engine: EngineService(caller: caller, runner: NeverRun()),
                                          conversation: conversation)
            guard case .unreachable(let sentence) = error else {
                Issue.record("\(operation) by \(name): \(String(describing: error)), not unreachable")
                continue
            }
            #expect(sentence.contains("needs devaccessd"), "\(operation) by \(name): \(sentence)")
            #expect(sentence.contains("start it"), "\(operation) by \(name): \(sentence)")
            #expect(conversation.calls.isEmpty, "\(operation) by \(name): \(conversation.calls)")
        }
    }
}
