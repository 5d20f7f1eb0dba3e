@_spi(CLI) import DevAccess
import DevAccessInterface
import DevAccessProtocol
import DevAccessSystem
import Testing
@testable import DevAccessCLI

/// `devaccess request`, `run`, `pending` and `approve`/`reject` report a failed conversation
/// with devaccessd in the client's own sentence and with the exit code scripts rely on
/// (docs/devaccess.1). The CLI sees the failure only as the library states it
/// (`InterfaceError(conversation:)`), so this pins what each of the client's failures prints.
struct ConversationFailureTests {
    func failure(_ error: BrokerClientError) -> CommandFailure? {
        RequestCommand.failure(InterfaceError(conversation: error)) as? CommandFailure
    }

    func rejected(_ code: ErrorCode, _ reason: String) -> CommandFailure? {
        failure(.rejected(ProtocolError(code, context: "request", reason: reason)))
    }

    @Test func aRefusalKeepsTheClientsSentenceAndItsExitCode() {
        let denied = rejected(.permissionDenied, "only an administrator may approve")
        #expect(denied?.message == "devaccessd refused (permission-denied): only an administrator may approve")
        #expect(denied?.code == .noPermission)
        let busy = rejected(.busy, "too many connections")
        #expect(busy?.message == "devaccessd refused (busy): too many connections")
        #expect(busy?.code == .brokerUnreachable)
        let other = rejected(.badArgument, "'--for' is too long")
        #expect(other?.message == "devaccessd refused (bad-argument): '--for' is too long")
        #expect(other?.code == .failure)
    }

    @Test func anUnknownRequestOrPermissionIsAUsageErrorInDevaccessdsWords() {
        let unknown = rejected(.noSuchRequest, "no pending request 7")
        #expect(unknown?.message == "no pending request 7")
        #expect(unknown?.code == .usage)
        let permission = rejected(.unknownPermission, "'bluetooth' is not a permission")
        #expect(permission?.message == "'bluetooth' is not a permission")
        #expect(permission?.code == .usage)
    }

    @Test func noBrokerSaysWhatToDoAndThatNothingWasRequested() {
        let failures: [BrokerClientError] = [
            .unreachable(path: "/run/x.sock", reason: "No such file or directory"),
            .timedOut(path: "/run/x.sock", operation: "answer", seconds: 30),
            .closed(path: "/run/x.sock"),
        ]
        for error in failures {
            let failure = failure(error)
            #expect(failure?.message == "\(error); \(DaemonStart.advice()); nothing was requested")
            #expect(failure?.code == .brokerUnreachable)
        }
    }

    @Test func aBrokenReplyIsAFailureNamingIt() {
        let error = BrokerClientError.badReply(path: "/run/x.sock",
                                               ProtocolError(.badMessage, context: "$.type", reason: "not a request's reply"))
        #expect(failure(error)?.message
            == "devaccessd at /run/x.sock sent a reply that breaks the protocol: $.type: not a request's reply")
        #expect(failure(error)?.code == .failure)
    }
}
