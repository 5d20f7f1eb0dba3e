import DevAccessCore

/// `who`: the processes holding nodes of `permissions` open; `allNodes`: also the nodes
/// that do not capture (a sound card's control node).
public struct WhoQuery: Sendable, Hashable {
    public var permissions: [Permission]
    public var allNodes: Bool

    public init(permissions: [Permission] = Permission.all, allNodes: Bool = false) {
        self.permissions = permissions
        self.allNodes = allNodes
    }
}

/// `devaccess who --json` (docs/json.md): who holds the nodes, how many processes could not
/// be inspected, and what to tell about the rest.
public struct WhoDocument: Encodable, Sendable, Hashable {
    public struct Holder: Encodable, Sendable, Hashable {
        public var pid: Int32
        public var startTicks: UInt64
        public var user: String?
        public var uid: UInt32
        public var euid: UInt32
        public var program: String?
        public var programDeleted: Bool?
        public var command: String?
        public var permission: String
        public var device: String
        public var deviceName: String
        public var node: String
        public var role: String
        public var opened: String
        public var fd: Int32
        public var access: String
        public var run: Int64?
        public var runGroup: UInt32?

        public init(pid: Int32, startTicks: UInt64, user: String?, uid: UInt32, euid: UInt32, program: String?,
                    programDeleted: Bool?, command: String?, permission: String, device: String, deviceName: String,
                    node: String, role: String, opened: String, fd: Int32, access: String, runGroup: UInt32?) {
            self.pid = pid
            self.startTicks = startTicks
            self.user = user
            self.uid = uid
            self.euid = euid
            self.program = program
            self.programDeleted = programDeleted
            self.command = command
            self.permission = permission
            self.device = device
            self.deviceName = deviceName
            self.node = node
            self.role = role
            self.opened = opened
            self.fd = fd
            self.access = access
            self.runGroup = runGroup
            run = runGroup.map(WhoDocument.runID)
        }
    }

    public var holders: [Holder]
    public var uninspected: Int
    public var notes: [String]

    public init(holders: [Holder], uninspected: Int, notes: [String]) {
        self.holders = holders
        self.uninspected = uninspected
        self.notes = notes
    }

    /// The run a group id was handed to: ids go out in order from RunGroups.first (run 1), so
    /// this is the run's id in the ledger ('devaccess list') until 16M runs have wrapped the range.
    public static func runID(_ gid: UInt32) -> Int64 { Int64(gid - RunGroups.first) + 1 }
}

/// `statusUpdates`: each `StatusUpdate` as devaccessd pushes it; it fails with the contract's
/// error (`.unreachable` where there is no devaccessd to follow) and ends when its consumer stops.
public struct StatusUpdateStream: AsyncSequence, Sendable {
    public typealias Element = StatusUpdate
    public typealias Failure = InterfaceError

    private let base: AsyncThrowingStream<StatusUpdate, any Error>

    /// The updates `base` yields; whatever it throws that is not an `InterfaceError` is `.failed`.
    public init(_ base: AsyncThrowingStream<StatusUpdate, any Error>) {
        self.base = base
    }

    /// A stream that fails at once with `error`.
    public static func failing(_ error: InterfaceError) -> StatusUpdateStream {
        StatusUpdateStream(AsyncThrowingStream { $0.finish(throwing: error) })
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator())
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncThrowingStream<StatusUpdate, any Error>.AsyncIterator

        public mutating func next() async throws(InterfaceError) -> StatusUpdate? {
            do {
                return try await base.next()
            } catch let error as InterfaceError {
                throw error
            } catch {
                throw .failed("the status updates failed: \(error)")
            }
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async throws(InterfaceError) -> StatusUpdate? {
            do {
                return try await base.next(isolation: actor)
            } catch let error as InterfaceError {
                throw error
            } catch {
                throw .failed("the status updates failed: \(error)")
            }
        }
    }
}
