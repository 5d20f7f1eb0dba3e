import CLinux
import Glibc
import Dispatch
import Synchronization
import DevAccessSystem

/// One resolved socket address, kept as bytes so it crosses threads as plain data.
struct GpsdSocketAddress: Sendable {
    var family: CInt
    var bytes: [UInt8]
}

/// A non-blocking TCP connection to gpsd where every wait (resolve, connect, read,
/// write) is bounded by one deadline, and incoming data is cut into lines of at most
/// `maxLineLength` bytes.
///
/// `wake`, when given, is a descriptor that another thread makes readable to end every
/// wait at once (the watcher's stop): a wait it ends reports the deadline as passed,
/// and the caller, which knows it asked to stop, tells the two apart.
struct GpsdConnection: ~Copyable {
    enum ReadOutcome {
        case line([UInt8])
        case deadline
        case closed
    }

    let endpoint: GpsdEndpoint
    let maxLineLength: Int
    private let descriptor: FileDescriptor
    private let wake: CInt?
    private var buffer: [UInt8] = []

    private init(endpoint: GpsdEndpoint, descriptor: consuming FileDescriptor, maxLineLength: Int, wake: CInt?) {
        self.endpoint = endpoint
        self.descriptor = descriptor
        self.maxLineLength = maxLineLength
        self.wake = wake
    }

    /// The uid that owns gpsd's end of this connection, when the kernel can say (loopback).
    var peerOwner: UInt32? { TCPSocketOwner.peerOwner(ofConnected: descriptor.rawValue) }

    // MARK: Connecting

    /// Resolves the endpoint and connects, trying each address in turn, all within `deadline`.
    /// `socketOwner`: make the socket as that uid and gid (root only): the connection is
    /// then let through or refused as that user's would be.
    static func open(_ endpoint: GpsdEndpoint, deadline: ContinuousClock.Instant, budget: Duration,
                     maxLineLength: Int, wake: CInt? = nil,
                     socketOwner: (uid: UInt32, gid: UInt32)? = nil) throws(GpsdError) -> GpsdConnection {
        let addresses = try resolve(endpoint, deadline: deadline, budget: budget, wake: wake)
        var lastError = GpsdError.unresolvable(endpoint, "no address")
        for address in addresses {
            let type = CInt(SOCK_STREAM.rawValue) | CInt(SOCK_NONBLOCK.rawValue) | CInt(SOCK_CLOEXEC.rawValue)
            let fd = socketOwner.map { devaccess_socket_as(address.family, type, $0.uid, $0.gid) }
                ?? socket(address.family, type, 0)
            guard fd >= 0 else {
                lastError = .socket(endpoint, operation: "socket", .current)
                continue
            }
            let descriptor = FileDescriptor(owning: fd)
            switch connect(fd, to: address, deadline: deadline, wake: wake) {
            case .connected:
                return GpsdConnection(endpoint: endpoint, descriptor: descriptor, maxLineLength: maxLineLength,
                                      wake: wake)
            case .timedOut:
                // The budget is spent; later addresses would get no time either.
                throw .connectTimedOut(endpoint, budget)
            case .failed(let errno):
                lastError = errno == .connectionRefused
                    ? .refused(endpoint) : .unreachable(endpoint, errno)
            }
        }
        throw lastError
    }

    private enum ConnectOutcome { case connected, timedOut, failed(Errno) }

    private static func connect(_ fd: CInt, to address: GpsdSocketAddress,
                                deadline: ContinuousClock.Instant, wake: CInt?) -> ConnectOutcome {
        let started = address.bytes.withUnsafeBytes { raw in
            Result { () throws(SystemCallError) in try NonBlockingConnect.start(fd, to: raw) }
        }
        switch started {
        case .success(.connected): return .connected
        case .success(.inProgress): break
        case .failure(let error): return .failed(error.errno)
        }
        switch wait(fd, for: Int16(POLLOUT), until: deadline, wake: wake) {
        case .ready:
            do throws(SystemCallError) {
                try NonBlockingConnect.outcome(fd)
                return .connected
            } catch {
                return .failed(error.errno)
            }
        case .timedOut:
            return .timedOut
        case .failed(let errno):
            return .failed(errno)
        }
    }

    /// Numeric addresses are parsed at once (`AI_NUMERICHOST` never touches DNS); names
    /// are resolved on a worker thread, because getaddrinfo has no timeout of its own.
    /// When the deadline passes first (or `wake` is signalled), the worker is left to
    /// finish on its own.
    static func resolve(_ endpoint: GpsdEndpoint, deadline: ContinuousClock.Instant,
                        budget: Duration, wake: CInt? = nil) throws(GpsdError) -> [GpsdSocketAddress] {
        switch lookup(endpoint, numericOnly: true) {
        case .success(let addresses): return addresses
        case .failure(let code) where code.rawValue != EAI_NONAME:
            throw .unresolvable(endpoint, String(cString: gai_strerror(code.rawValue)))
        case .failure:
            break
        }
        final class Slot: Sendable {
            let result = Mutex<Result<[GpsdSocketAddress], GaiCode>?>(nil)
            let done = DispatchSemaphore(value: 0)
        }
        let slot = Slot()
        DispatchQueue.global().async {
            let outcome = lookup(endpoint, numericOnly: false)
            slot.result.withLock { $0 = outcome }
            slot.done.signal()
        }
        // In slices when a wake descriptor is given, to notice it between them.
        var resolved = false
        while !resolved {
            let remaining = GpsdTime.milliseconds(ContinuousClock.now.duration(to: deadline))
            if remaining <= 0 || isSignalled(wake) { break }
            let slice = wake == nil ? remaining : min(remaining, 50)
            resolved = slot.done.wait(timeout: .now() + .milliseconds(Int(slice))) == .success
        }
        guard resolved, let outcome = slot.result.withLock({ $0 }) else { throw .resolutionTimedOut(endpoint, budget) }
        switch outcome {
        case .success(let addresses): return addresses
        case .failure(let code): throw .unresolvable(endpoint, String(cString: gai_strerror(code.rawValue)))
        }
    }

    struct GaiCode: Error, Sendable, Equatable {
        var rawValue: CInt
    }

    private static func lookup(_ endpoint: GpsdEndpoint, numericOnly: Bool) -> Result<[GpsdSocketAddress], GaiCode> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = CInt(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV | (numericOnly ? AI_NUMERICHOST : 0)
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(endpoint.host, String(endpoint.port), &hints, &list)
        guard rc == 0 else { return .failure(GaiCode(rawValue: rc)) }
        defer { freeaddrinfo(list) }
        var addresses: [GpsdSocketAddress] = []
        var cursor = list
        while let entry = cursor?.pointee {
            if let address = entry.ai_addr, entry.ai_addrlen > 0 {
                let bytes = Array(UnsafeRawBufferPointer(start: address, count: Int(entry.ai_addrlen)))
                addresses.append(GpsdSocketAddress(family: entry.ai_family, bytes: bytes))
            }
            cursor = entry.ai_next
        }
        guard !addresses.isEmpty else { return .failure(GaiCode(rawValue: EAI_NONAME)) }
        return .success(addresses)
    }

    // MARK: Waiting

    private enum WaitOutcome { case ready, timedOut, failed(Errno) }

    /// Waits for `events` until the deadline (`Poll`). A readable `wake` ends the wait as
    /// if the deadline had passed.
    private static func wait(_ fd: CInt, for events: Int16, until deadline: ContinuousClock.Instant,
                             wake: CInt?) -> WaitOutcome {
        var interests = [Poll.Interest(fd, events: events)]
        if let wake { interests.append(.readable(wake)) }
        do {
            guard let ready = try Poll.wait(interests, until: deadline) else { return .timedOut }
            if wake != nil && ready[1] != 0 { return .timedOut }
            return .ready   // also POLLERR/POLLHUP: the next call reports them
        } catch {
            return .failed(error.errno)
        }
    }

    /// True once `wake` is readable (never for nil).
    static func isSignalled(_ wake: CInt?) -> Bool {
        guard let wake else { return false }
        return Poll.isReady(.readable(wake))
    }

    // MARK: Writing

    enum WriteOutcome { case sent, deadline, closed }

    /// Sends all of `text`; MSG_NOSIGNAL so a peer that already left cannot kill us with SIGPIPE.
    func send(_ text: String, until deadline: ContinuousClock.Instant) throws(GpsdError) -> WriteOutcome {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let sent = valueOrErrno {
                bytes.withUnsafeBytes { raw -> Int in
                    guard let base = raw.baseAddress else { return 0 }
                    return Glibc.send(descriptor.rawValue, base + offset, raw.count - offset, CInt(MSG_NOSIGNAL))
                }
            }
            guard case .failure(let error) = sent else {
                if case .success(let count) = sent { offset += count }
                continue
            }
            switch error {
            case .wouldBlock:
                switch Self.wait(descriptor.rawValue, for: Int16(POLLOUT), until: deadline, wake: wake) {
                case .ready: continue
                case .timedOut: return .deadline
                case .failed(let errno): throw .socket(endpoint, operation: "poll", errno)
                }
            case Errno(rawValue: EPIPE), Errno(rawValue: ECONNRESET):
                return .closed
            default:
                throw .socket(endpoint, operation: "send", error)
            }
        }
        return .sent
    }

    // MARK: Reading

    /// The next non-empty line without its `\r\n`, or why there is none.
    ///
    /// Every gpsd report is one JSON object per line, so pending data that does not start
    /// with `{` is refused at once instead of waiting for a newline that may never come.
    mutating func nextLine(until deadline: ContinuousClock.Instant) throws(GpsdError) -> ReadOutcome {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            // Checked per line too: a peer flooding well-formed but useless reports must
            // not keep the caller past its deadline.
            if ContinuousClock.now >= deadline { return .deadline }
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                guard newline <= maxLineLength else { throw .lineTooLong(endpoint, limit: maxLineLength) }
                var line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                if line.allSatisfy(Self.isBlank) { continue }
                return .line(line)
            }
            if let first = buffer.first(where: { !Self.isBlank($0) }), first != UInt8(ascii: "{") {
                throw .garbage(endpoint, "it began with \(Self.preview(buffer))")
            }
            guard buffer.count <= maxLineLength else { throw .lineTooLong(endpoint, limit: maxLineLength) }

            switch Self.wait(descriptor.rawValue, for: Int16(POLLIN), until: deadline, wake: wake) {
            case .ready: break
            case .timedOut: return .deadline
            case .failed(let errno): throw .socket(endpoint, operation: "poll", errno)
            }
            let read = valueOrErrno {
                chunk.withUnsafeMutableBytes { raw -> Int in
                    guard let base = raw.baseAddress else { return 0 }
                    return Glibc.read(descriptor.rawValue, base, raw.count)
                }
            }
            switch read {
            case .success(let count) where count > 0: buffer.append(contentsOf: chunk[..<count])
            case .success: return .closed
            case .failure(.wouldBlock): continue
            case .failure(Errno(rawValue: ECONNRESET)): return .closed
            case .failure(let error): throw .socket(endpoint, operation: "read", error)
            }
        }
    }

    private static func isBlank(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\r")
    }

    /// Up to 24 bytes as quoted text, non-printable bytes as `\xNN`, for error messages.
    static func preview(_ bytes: some Collection<UInt8>) -> String {
        var text = ""
        for byte in bytes.prefix(24) {
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                text += "\\" + String(Unicode.Scalar(byte))
            } else if byte >= 0x20 && byte < 0x7f {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = String(byte, radix: 16, uppercase: true)
                text += "\\x" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return "\"" + text + (bytes.count > 24 ? "…" : "") + "\""
    }
}
