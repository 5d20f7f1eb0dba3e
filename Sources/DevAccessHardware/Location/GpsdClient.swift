import Glibc
import DevAccessSystem
/// Asks gpsd which receivers it has and what fix they report, within a fixed time.
///
/// This speaks gpsd's documented JSON protocol (gpsd_json(5)) over TCP itself instead of
/// using libgps: libgps's `gps_open()` blocks in `connect()` with no timeout, so a host
/// that drops packets, or a port that accepts and never answers, would hang `devaccess
/// status`. Here every step (resolve, connect, each read and write) is bounded by one
/// deadline, lines are capped at `maxLineLength`, and every way the peer can misbehave
/// ends as a `GpsdError` that says what happened.
///
/// The exchange: gpsd greets every connection with a `VERSION` report; `?WATCH=` makes it
/// open its devices and answer with `DEVICES`; `?POLL;` then returns the last fix of each
/// active device, and streamed `TPV` reports are taken too if they arrive first.
public struct GpsdClient: Sendable {
    public static let defaultTimeout: Duration = .milliseconds(500)
    /// gpsd's longest reports (SKY with many satellites, AIS) stay far below this.
    public static let defaultMaxLineLength = 64 * 1024

    public var endpoint: GpsdEndpoint
    /// The whole budget: connecting, the banner, the device list and the fix.
    public var timeout: Duration
    public var maxLineLength: Int

    public init(endpoint: GpsdEndpoint = .default, timeout: Duration = GpsdClient.defaultTimeout,
                maxLineLength: Int = GpsdClient.defaultMaxLineLength) {
        self.endpoint = endpoint
        self.timeout = timeout
        self.maxLineLength = maxLineLength
    }

    static let watchCommand = "?WATCH={\"enable\":true,\"json\":true};"
    static let pollCommand = "?POLL;"

    /// Connects, reads the banner and the device list, and collects each receiver's fix.
    ///
    /// Returns once every active receiver has reported whether it has a fix, or when
    /// the deadline passes after the device list came (then a receiver that has not
    /// spoken yet keeps `.notReported`). Fails when the device list cannot be had in
    /// time, or when the peer sends anything that is not gpsd's protocol.
    public func query() throws(GpsdError) -> GpsdStatus {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        var connection = try GpsdConnection.open(endpoint, deadline: deadline, budget: timeout,
                                                 maxLineLength: maxLineLength)
        // Whoever listens on gpsd's port while gpsd is down could be any login user's
        // program: what it says (receiver paths, error text) would reach status, devices
        // and the shell completions of everyone else, root included. As GpsdWatcher does.
        if let owner = connection.peerOwner, TCPSocketOwner.isUserAccount(owner) {
            throw .untrusted(endpoint, uid: owner)
        }

        // 1. The banner must come first: it is how we know this is gpsd at all.
        let version = try next(&connection, deadline, .banner).banner(from: endpoint)
        var status = GpsdStatus(endpoint: endpoint, release: version.release, revision: version.rev,
                                protocolMajor: version.protoMajor, protocolMinor: version.protoMinor,
                                receivers: [])

        // 2. Watching activates the devices; gpsd answers with DEVICES.
        switch try connection.send(Self.watchCommand, until: deadline) {
        case .sent: break
        case .deadline: throw .noAnswer(endpoint, timeout, .deviceList)
        case .closed: throw .closedEarly(endpoint, .deviceList)
        }
        var early: [GpsdReport.TPV] = []
        deviceList: while true {
            switch try next(&connection, deadline, .deviceList) {
            case .devices(let devices):
                status.receivers = devices.compactMap { device in
                    guard let path = device.path, !path.isEmpty else { return nil }
                    return GpsdReceiver(path: path, driver: device.driver, activated: device.activated?.text)
                }
                break deviceList
            case .tpv(let tpv): early.append(tpv)
            case .poll(let tpvs): early.append(contentsOf: tpvs)
            case .error(let message): throw .gpsdError(endpoint, message)
            case .version, .device, .sky, .other: continue
            }
        }
        for tpv in early { Self.record(tpv, into: &status) }
        guard !status.receivers.isEmpty, !Self.allActiveReported(status) else { return status }

        // 3. The fix. From here on the main question is answered: running out of time or a
        //    closed connection only leaves fixes unreported, they do not fail the query.
        guard (try? connection.send(Self.pollCommand, until: deadline)) == .sent else { return status }
        while !Self.allActiveReported(status) {
            let line: [UInt8]
            switch try connection.nextLine(until: deadline) {
            case .line(let bytes): line = bytes
            case .deadline, .closed: return status
            }
            switch try GpsdReport.decode(line, from: endpoint) {
            case .tpv(let tpv): Self.record(tpv, into: &status)
            case .poll(let tpvs): for tpv in tpvs { Self.record(tpv, into: &status) }
            // An old gpsd without ?POLL answers ERROR; streamed TPVs may still come.
            case .error, .version, .devices, .device, .sky, .other: continue
            }
        }
        return status
    }

    /// Whether gpsd's port lets an unprivileged program in: asked as root with a socket
    /// made as `nobody` (65534), which nftables' `meta skuid` sees as that user's. true: it
    /// reached gpsd; false: refused (config/nftables/devaccess-gpsd.nft, or gpsd's own
    /// listening addresses), or redirected to devaccessd's endpoint (the same rule, where
    /// the answer is devaccessd's: its VERSION's `rev`, or its refusal); nil: not root (the
    /// answer would be about us), or no answer.
    public func admitsUnprivileged(uid: UInt32 = 65_534, gid: UInt32 = 65_534) -> Bool? {
        guard geteuid() == 0 else { return nil }
        let deadline = ContinuousClock.now.advanced(by: timeout)
        do {
            var connection = try GpsdConnection.open(endpoint, deadline: deadline, budget: timeout,
                                                     maxLineLength: maxLineLength, socketOwner: (uid, gid))
            guard case .line(let line) = try connection.nextLine(until: deadline) else { return true }
            switch try GpsdReport.decode(line, from: endpoint) {
            case .version(let version) where version.rev == Self.brokerRevision: return false
            case .error(let message) where message.hasPrefix(Self.brokerRevision + ":"): return false
            default: return true
            }
        } catch {
            switch error {
            case .refused: return false
            case .unreachable(_, let errno) where errno.rawValue == ECONNRESET || errno.rawValue == EACCES
                || errno.rawValue == EPERM:
                return false
            default: return nil
            }
        }
    }

    /// How devaccessd's gpsd-compatible endpoint names itself (VERSION's `rev`, and the
    /// start of its ERROR messages).
    public static let brokerRevision = "devaccessd"

    private func next(_ connection: inout GpsdConnection, _ deadline: ContinuousClock.Instant,
                      _ stage: GpsdError.Stage) throws(GpsdError) -> GpsdReport {
        switch try connection.nextLine(until: deadline) {
        case .line(let line): return try GpsdReport.decode(line, from: endpoint)
        case .deadline: throw .noAnswer(endpoint, timeout, stage)
        case .closed: throw .closedEarly(endpoint, stage)
        }
    }

    /// Applies a TPV to its receiver. A TPV without `device` belongs to the only receiver.
    /// Mode 0 ("nothing seen yet", what POLL says for a device just opened) never
    /// overwrites a report already taken.
    static func record(_ tpv: GpsdReport.TPV, into status: inout GpsdStatus) {
        guard let mode = GpsdFixMode(rawValue: tpv.mode) else { return }
        let index: Int?
        if let device = tpv.device {
            index = status.receivers.firstIndex { $0.path == device }
        } else {
            index = status.receivers.count == 1 ? 0 : nil
        }
        guard let index else { return }
        if mode == .notReported && status.receivers[index].fix.mode != .notReported { return }
        status.receivers[index].fix = GpsdFix(mode: mode,
                                              latitude: mode.hasFix ? tpv.lat : nil,
                                              longitude: mode.hasFix ? tpv.lon : nil)
    }

    /// True when every receiver gpsd has open said whether it has a fix. Closed
    /// receivers never report, so they are not waited for.
    static func allActiveReported(_ status: GpsdStatus) -> Bool {
        status.receivers.allSatisfy { !$0.isActive || $0.fix.mode != .notReported }
    }
}
