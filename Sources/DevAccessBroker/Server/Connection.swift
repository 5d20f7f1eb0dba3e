import Glibc
import DevAccessProtocol
import DevAccessSystem

/// One client connection. Owned by the event loop thread; never shared.
final class Connection {
    enum Phase {
        /// Reading requests and answering them.
        case open
        /// No more requests are read; close once the in-flight request is answered
        /// and every reply is written.
        case closing
        /// Replies written and our side shut down; reading and discarding until the
        /// peer closes or `until`, so it reads our last reply before end of stream
        /// instead of a reset.
        case lingering(until: ContinuousClock.Instant, discarded: Int)
    }

    let id: UInt64
    let descriptor: CInt
    /// The client's socket, owned here: `closeSocket` closes it when the loop drops the client.
    private var socket: FileDescriptor?
    let peer: Peer
    var framer = LineFramer(maxLineLength: BrokerProtocol.maxRequestSize)
    var outbox: [UInt8] = []
    var outboxOffset = 0
    /// A request is being handled; the next one waits (replies stay in order).
    var inFlight = false
    /// The request in flight sent a prompt: the next message is its answer.
    var awaitingAnswer = false
    /// The conversation of the request in flight.
    var exchange: Exchange?
    /// Counts the requests of this connection, so a reply of an abandoned one is dropped.
    var exchangeSerial: UInt64 = 0
    /// The peer shut down its sending side.
    var readEOF = false
    var phase = Phase.open
    var lastActivity: ContinuousClock.Instant
    /// When the first byte of the message still missing its newline arrived: a message
    /// has `messageTimeout` from there, however slowly its bytes keep coming.
    var partialSince: ContinuousClock.Instant?
    /// Descriptors received (SCM_RIGHTS) and not yet given to a request: a `run` takes them.
    var receivedDescriptors = FileDescriptors()
    /// The request in flight is a running `run`: the client's messages are its `run-signal`s.
    var relayingSignals = false

    /// Descriptors to pass (SCM_RIGHTS), in order, each with the outbox byte at the same
    /// place in `outgoingPositions` (an `opened` reply's first); owned here until sent, or
    /// until the connection closes.
    var outgoingDescriptors = FileDescriptors()
    var outgoingPositions: [Int] = []

    func closeOutgoingDescriptors() {
        outgoingDescriptors.take().close()
        outgoingPositions = []
    }

    /// The first descriptor waiting, once it was sent: the client has its own copy now.
    func closeSentDescriptor() {
        outgoingDescriptors.removeFirst().close()
        outgoingPositions.removeFirst()
    }

    func closeSocket() {
        socket = nil
    }

    func closeReceivedDescriptors() {
        receivedDescriptors.take().close()
    }

    init(id: UInt64, socket: consuming FileDescriptor, peer: Peer, now: ContinuousClock.Instant) {
        self.id = id
        descriptor = socket.rawValue
        self.socket = consume socket
        self.peer = peer
        lastActivity = now
    }

    var hasOutput: Bool { outboxOffset < outbox.count }

    /// Replies owed but unsent, beyond which nothing more is read or answered (one reply
    /// may be larger: it is queued whole).
    static let outboxLimit = 64 * 1024
    /// Nothing more is read or answered: 64 KiB of replies wait, or a descriptor not yet
    /// passed does. Each unsent descriptor is a file open in devaccessd, so a client that
    /// pipelines `open`s and reads no reply holds one here, not one per queued reply
    /// (hundreds a connection, devaccessd's whole descriptor limit over a user's connections).
    var outboxFull: Bool {
        outbox.count - outboxOffset >= Connection.outboxLimit || !outgoingDescriptors.isEmpty
    }

    var isOpen: Bool {
        if case .open = phase { return true }
        return false
    }

    var isLingering: Bool {
        if case .lingering = phase { return true }
        return false
    }

    func enqueue(_ line: [UInt8], passing descriptor: CInt? = nil) {
        if outboxOffset > 0 && outboxOffset == outbox.count {
            outbox.removeAll(keepingCapacity: true)
            outboxOffset = 0
        }
        if let descriptor {
            outgoingDescriptors.adopt([descriptor])
            outgoingPositions.append(outbox.count)
        }
        outbox.append(contentsOf: line)
        outbox.append(0x0a)
    }

    /// Poll events wanted now.
    var pollEvents: Int16 {
        var events: Int16 = 0
        switch phase {
        case .open:
            // Back-pressure: while a request is in flight, read only until one more
            // message is buffered; stop reading while replies pile up unread.
            if !readEOF && (!inFlight || framer.pendingByteCount <= BrokerProtocol.maxRequestSize)
                && !outboxFull {
                events |= Int16(POLLIN)
            }
        case .closing:
            break
        case .lingering:
            events |= Int16(POLLIN)
        }
        if hasOutput { events |= Int16(POLLOUT) }
        return events
    }
}
