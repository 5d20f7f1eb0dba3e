import DevAccessCore
import DevAccessInterface
import DevAccessProtocol

/// A `run` devaccessd accepted (`BrokerInterface.run`): its replies followed on the
/// connection until the program ends or is not run, the caller's conversation answering
/// prompts and relaying signals.
struct BrokerRun {
    let session: BrokerSession
    let id: Int64
    let order: RunOrder
    let conversation: any RunConversation

    /// `run-signal`s to the program of this run. Best effort: the run may have ended.
    struct Relay: RunSignals {
        let session: BrokerSession
        let id: Int64

        func relay(_ signal: Int32) { try? session.signal(signal, run: id) }
    }

    /// Until the program's `run-ended`, a `decision` (not run), or the conversation stops.
    func follow() throws -> RunOutcome {
        let signals = Relay(session: session, id: id)
        var running = false
        while true {
            let deadline = running ? nil : conversation.startLimit.map { ContinuousClock.now + $0 }
            switch try session.next(to: id, deadline: deadline, watching: conversation.watched) {
            case .watched:
                guard conversation.watchedIsReady(running: running, signals: signals) else { return .stopped }
            case .timedOut:
                throw conversation.limitPassed()
            case .reply(.prompt(let prompt)):
                try conversation.prompt(prompt, line: SessionPromptLine(session: session, prompt: prompt, id: id))
            case .reply(.runStarted(let started)):
                running = true
                conversation.started(started, signals: signals)
            case .reply(.runEnded(let ended)):
                return .ended(ended)
            case .reply(.decision(let decision)):
                return .notRun(decision)
            case .reply(let other):
                throw failure(other)
            }
        }
    }

    /// A reply that ends the run with an error: devaccessd's error frame, or one that does not
    /// belong to a run. No permission named and no `[Program]` section declaring any is the
    /// caller's to fix (`badArgument`).
    func failure(_ reply: BrokerSession.Reply) -> InterfaceError {
        switch reply {
        case .error(let frame) where order.permissions.isEmpty && frame.context == "$.permissions":
            return .badArgument(frame.reason)
        case .error(let frame):
            return InterfaceError(conversation: .rejected(frame))
        default:
            return .failed("devaccessd answered a run with '\(reply.type)'")
        }
    }
}
