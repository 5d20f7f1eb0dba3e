import Glibc
import DevAccessCore

/// The caller's side of a `request`'s consent conversation: devaccessd's prompts answered,
/// its `queued` notices heard, the wait bounded. devaccessd asks `ask` prompts on the
/// user's login terminal itself; what comes here is what it asks on the connection (a
/// `password` prompt for `auth_self`). A class: the call talks to the one object the
/// caller keeps and reads afterwards (what it showed, a signal that ended a prompt).
public protocol RequestConversation: AnyObject {
    /// A descriptor to watch next to devaccessd's connection (a signal pipe); nil: none.
    var watched: CInt? { get }
    /// How long to wait for devaccessd's next reply; nil: as long as it takes.
    func waitLimit(waitingForAdmin: Bool) -> Duration?
    /// The wait limit passed without a reply: the error the call ends with.
    func limitPassed() -> InterfaceError
    /// `watched` became readable. Return to keep waiting; throw to end the call.
    func watchedIsReady(waitingForAdmin: Bool) throws(InterfaceError)
    /// devaccessd asks a person: answer with `line.answer(_:)`, or not at all when the
    /// prompt ended another way (devaccessd's own answer is next on the line then).
    func prompt(_ prompt: PromptMessage, line: any PromptLine) throws(InterfaceError)
    /// Some permissions wait for an administrator (`reply.waiting`: this request waits with them).
    func queued(_ reply: QueuedReply)
}

/// The connection a prompt came on, as the one answering it sees it.
public protocol PromptLine {
    /// Readable once devaccessd's next reply begins to arrive (it ended the prompt itself,
    /// at its timeout); wait on it next to the person's input.
    var pollDescriptor: CInt { get }
    /// A reply was read already: the descriptor does not show it.
    var hasBufferedReply: Bool { get }
    /// Sends the answer to this prompt.
    func answer(_ answer: PromptAnswer.Answer) throws(InterfaceError)
}

/// The caller's side of a `run`: its prompts, and its signals until the program ends.
public protocol RunConversation: AnyObject {
    /// A descriptor to watch next to devaccessd's connection (a signal pipe); nil: none.
    var watched: CInt? { get }
    /// How long to wait for devaccessd's next reply while the program has not started
    /// (nil: as long as it takes); a running program is waited for without a limit.
    var startLimit: Duration? { get }
    /// The start limit passed without a reply: the error the call ends with.
    func limitPassed() -> InterfaceError
    /// `watched` became readable; `signals` relays to the program (once it runs). False:
    /// stop here, the call returns `.stopped` (devaccessd withdraws the run).
    func watchedIsReady(running: Bool, signals: any RunSignals) -> Bool
    /// devaccessd asks a person, as for a request.
    func prompt(_ prompt: PromptMessage, line: any PromptLine) throws(InterfaceError)
    /// The program started (devaccessd's `run-started`).
    func started(_ reply: RunStartedReply, signals: any RunSignals)
}

/// Relays signals to a run's program (`run-signal`).
public protocol RunSignals {
    func relay(_ signal: Int32)
}

/// How a `run` ended, when devaccessd did not fail it.
public enum RunOutcome: Sendable, Hashable {
    /// The program ran and exited.
    case ended(RunEndedReply)
    /// The program was not run: how each permission was decided.
    case notRun(DecisionReply)
    /// The conversation stopped before the program started (`watchedIsReady` said so).
    case stopped
}

/// The standard streams a `run`'s program gets: the caller's own descriptors, passed to
/// devaccessd (which starts the program); the caller keeps them.
public struct StandardStreams: Sendable, Hashable {
    public var input: CInt
    public var output: CInt
    public var error: CInt

    public init(input: CInt, output: CInt, error: CInt) {
        self.input = input
        self.output = output
        self.error = error
    }

    /// This process's own: 0, 1, 2.
    public static let inherited = StandardStreams(input: 0, output: 1, error: 2)
}

/// A device node opened for the caller by devaccessd (`open`): what was opened, and its
/// descriptor, closed when this goes away unless taken with ``release()``.
public struct OpenedNode: ~Copyable, Sendable {
    public let reply: OpenedReply
    public let descriptor: OwnedDescriptor

    public init(_ reply: OpenedReply, owning rawValue: CInt) {
        self.reply = reply
        descriptor = OwnedDescriptor(owning: rawValue)
    }

    /// The open descriptor (blocking, close-on-exec).
    public var rawValue: CInt { descriptor.rawValue }

    /// Hands the descriptor over: the caller closes it from now on.
    public consuming func release() -> CInt { descriptor.release() }
}

/// An owned descriptor, closed on deinit. Not DevAccessSystem's `FileDescriptor`: the
/// contract depends on the model only (Package.swift), and this is all it needs of one.
public struct OwnedDescriptor: ~Copyable, Sendable {
    public let rawValue: CInt

    public init(owning rawValue: CInt) { self.rawValue = rawValue }

    /// Hands the descriptor over: the caller closes it from now on.
    public consuming func release() -> CInt {
        let descriptor = rawValue
        discard self
        return descriptor
    }

    deinit {
        // close is never retried: on Linux the descriptor is gone even after EINTR.
        _ = Glibc.close(rawValue)
    }
}
