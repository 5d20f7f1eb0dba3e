import DevAccessCore
import DevAccessHardware
import DevAccessSystem
import FoundationEssentials
import Glibc

/// One uevent as `monitor` uses it: its own properties, nothing probed.
struct MonitorUevent: Sendable {
    var action: String
    var devnode: String?
    var subsystem: String?
    var seqnum: UInt64
    /// CLOCK_MONOTONIC µs when the kernel's uevent of that SEQNUM arrived.
    var kernelUsec: UInt64?
}

/// Where `monitor` gets its uevents: udev's netlink socket (events after udevd applied its
/// rules), or in DEBUG builds a file the tests append declared events to.
protocol MonitorEventSource {
    /// The next event, waiting up to `timeoutMilliseconds` (0: only one already queued).
    func next(timeoutMilliseconds: Int32) throws(CommandFailure) -> MonitorUevent?
}

enum MonitorEvents {
    /// Opened before anything is read or printed, so no event after the first line is missed.
    static func open(subsystems: [String], environment: ProcessEnvironment) throws(CommandFailure)
        -> any MonitorEventSource
    {
        #if DEBUG
        if let path = environment[ProcessEnvironment.Name.testUevents] {
            return try DeclaredUevents(path: path)
        }
        #endif
        do {
            return UdevEvents(monitor: try UdevMonitor(subsystems: subsystems))
        } catch {
            throw CommandFailure(message: error.description)
        }
    }
}

struct UdevEvents: MonitorEventSource {
    let monitor: UdevMonitor

    func next(timeoutMilliseconds: Int32) throws(CommandFailure) -> MonitorUevent? {
        let received: UdevMonitor.Event?
        do {
            received = try monitor.next(timeoutMilliseconds: timeoutMilliseconds)
        } catch {
            throw CommandFailure(message: error.description)
        }
        guard let received else { return nil }
        let device = received.device
        return MonitorUevent(action: device.action ?? "change", devnode: device.devnode, subsystem: device.subsystem,
                             seqnum: device.seqnum, kernelUsec: received.kernelArrivalMicroseconds)
    }
}

#if DEBUG
/// TEST-ONLY (DEBUG builds, `DEVACCESS_TEST_UEVENTS=FILE`): uevents declared by a test, one
/// JSON object a line (`{"action", "devnode", "subsystem", "seqnum"}`) appended to FILE, read
/// as they come. A test host has no udevd; this is how the tests drive `monitor` with the
/// devices they declared (`DEVACCESS_TEST_DEVICES`) and a devaccessd of their own.
final class DeclaredUevents: MonitorEventSource {
    private struct Line: Decodable {
        var action: String
        var devnode: String?
        var subsystem: String?
        var seqnum: UInt64
    }

    private let descriptor: Int32
    private let path: String
    private var offset: off_t = 0
    private var pending: [UInt8] = []

    init(path: String) throws(CommandFailure) {
        descriptor = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw CommandFailure(message: "cannot read DEVACCESS_TEST_UEVENTS: \(SystemCallError.current("open", path: path))")
        }
        self.path = path
    }

    deinit { close(descriptor) }

    func next(timeoutMilliseconds: Int32) throws(CommandFailure) -> MonitorUevent? {
        var waited: Int32 = 0
        while true {
            if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(pending[..<newline])
                pending.removeFirst(newline + 1)
                guard let event = try? JSONDecoder().decode(Line.self, from: Data(line)) else {
                    throw CommandFailure(message: "DEVACCESS_TEST_UEVENTS \(path): not an event: "
                                         + String(decoding: line, as: UTF8.self))
                }
                return MonitorUevent(action: event.action, devnode: event.devnode, subsystem: event.subsystem,
                                     seqnum: event.seqnum, kernelUsec: nil)
            }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = pread(descriptor, &buffer, buffer.count, offset)
            if count > 0 {
                offset += off_t(count)
                pending += buffer[..<count]
                continue
            }
            if waited >= timeoutMilliseconds { return nil }
            usleep(20_000)
            waited += 20
        }
    }
}
#endif
