import DevAccessCore
import DevAccessInterface
import DevAccessSystem

/// `request`, `open` and `run` need devaccessd: it asks consent on the user's login
/// terminal, opens the node as root and hands the descriptor over, and starts and tracks
/// the program. The engine in the caller's process can do none of these, so it answers
/// `.unreachable`, as the CLI does without devaccessd (exit 69). devaccessd serves these
/// three with its own conversation code, not through this type.
extension EngineService {
    public func request(_ request: AccessRequest,
                        conversation: any RequestConversation) async throws(InterfaceError) -> DecisionReply {
        throw Self.needsDaemon("a request", because: "it asks for consent on your login terminal")
    }

    public func open(_ order: OpenOrder) async throws(InterfaceError) -> OpenedNode {
        throw Self.needsDaemon("opening a device node", because: "it opens the node and hands the descriptor over")
    }

    public func run(_ order: RunOrder, streams: StandardStreams,
                    conversation: any RunConversation) async throws(InterfaceError) -> RunOutcome {
        throw Self.needsDaemon("running a program", because: "it starts the program and tracks the run")
    }

    static func needsDaemon(_ what: String, because why: String) -> InterfaceError {
        .unreachable("\(what) needs devaccessd (\(why)); nothing was done without it; " + DaemonStart.advice())
    }
}
