import DevAccessCore

/// `run`: start a program with access to some permissions, for the peer.
///
/// The message carries what the program needs besides its standard streams; those come
/// with it as three file descriptors (SCM_RIGHTS on the message's first byte: stdin,
/// stdout, stderr). The broker decides as for a `request` whose subject is the program,
/// starts it as the peer, replies `run-started`, relays `run-signal`s, and ends the
/// request with `run-ended` when the program exits. Strings are UTF-8; a program that
/// needs other bytes in its arguments or environment cannot be run this way.
public struct RunOrder: Sendable, Hashable {
    /// The program as the client resolved it (absolute); the broker canonicalizes it again.
    public var program: String
    /// argv, argv[0] included.
    public var arguments: [String]
    /// "NAME=value" entries; the broker removes what could inject code (docs/mechanisms.md).
    public var environment: [String]
    public var directory: String
    public var umask: UInt32
    /// Empty: what the policy's `[Program]` section for the program declares.
    public var permissions: [Permission]
    public var reason: String?
    /// nil: the policy's Keep= for a decision that has to be made, else this run only.
    public var scope: GrantTerm?
    /// Also keep the program from capture devices it was not granted that its user's own
    /// groups would open (Landlock).
    public var strict: Bool
    /// With location: the level asked for (nil: exact), capped by the policy as a request's is.
    public var accuracy: LocationAccuracy?

    public init(program: String, arguments: [String], environment: [String], directory: String, umask: UInt32,
                permissions: [Permission], reason: String? = nil, scope: GrantTerm? = nil, strict: Bool = false,
                accuracy: LocationAccuracy? = nil) {
        self.program = program
        self.arguments = arguments
        self.environment = environment
        self.directory = directory
        self.umask = umask
        self.permissions = permissions
        self.reason = reason
        self.scope = scope
        self.strict = strict
        self.accuracy = accuracy
    }

    public static let maxArguments = 4096
    public static let maxEnvironment = 4096
    /// The file descriptors a `run` message carries: stdin, stdout, stderr.
    public static let descriptorCount = 3
}

/// `run-signal`: deliver a signal to the run's program (the client got it: Ctrl-C, a
/// window size change, Ctrl-Z). Same id as the `run` it belongs to.
public struct RunSignal: Sendable, Hashable {
    public var signal: Int32

    public init(signal: Int32) { self.signal = signal }
}

/// `run-started`: the program runs (interim; `run-ended` follows).
public struct RunStartedReply: Sendable, Hashable {
    public var run: Int64
    public var pid: Int32
    /// The group id the program carries for its access.
    public var gid: UInt32
    /// How each permission was decided (or why it needed no decision).
    public var results: [RequestResult]
    /// Environment variables removed before the program started (names only).
    public var removedEnvironment: [String]

    public init(run: Int64, pid: Int32, gid: UInt32, results: [RequestResult], removedEnvironment: [String]) {
        self.run = run
        self.pid = pid
        self.gid = gid
        self.results = results
        self.removedEnvironment = removedEnvironment
    }
}

/// `run-ended`: the program exited (final).
public struct RunEndedReply: Sendable, Hashable {
    public var run: Int64
    public var exit: RunExit

    public init(run: Int64, exit: RunExit) {
        self.run = run
        self.exit = exit
    }
}

/// How a run's program ended: the one model of a process's end (DevAccessCore).
public typealias RunExit = ProcessExit
