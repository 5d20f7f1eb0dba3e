import FoundationEssentials
import Dispatch
import Glibc
import DevAccessSystem
import Synchronization
import DevAccessHardware

/// A device node event from udev, after udevd applied its rules (or, in DEBUG builds, a
/// declared test node's directory event: `subsystem` empty).
struct HotplugEvent: Sendable, Hashable {
    var action: String
    var subsystem: String
    var devnode: String
    var seqnum: UInt64
    /// CLOCK_MONOTONIC µs when the kernel's uevent arrived (nil: not seen).
    var kernelArrival: UInt64?
    /// CLOCK_MONOTONIC µs when udev's event reached devaccessd.
    var received: UInt64
}

extension HotplugEvent {
    init(_ event: UdevNodeEvent, kernelArrival: UInt64?, received: UInt64) {
        self.init(action: event.action, subsystem: event.subsystem, devnode: event.devnode, seqnum: event.seqnum,
                  kernelArrival: kernelArrival, received: received)
    }
}

/// Listens to udev on a thread of its own and hands node events to `deliver`.
///
/// Why a thread and not the worker's poll: `UdevMonitor` owns its netlink sockets and
/// waits in its own `poll`. It wakes every `tick` to notice `stop()`; an event is
/// delivered the moment it arrives, so the tick costs shutdown time, not latency.
///
/// udev's events, not the kernel's, trigger enforcement: udevd's `uaccess` builtin
/// flushes the named user entries of a node it processes, so an entry added on the
/// kernel's event could be wiped a moment later by udevd.
final class UdevWatch: Sendable {
    static let tick: Int32 = 250

    private let stopRequested = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    init() {}

    /// Opens the monitor on its thread and returns once it listens (true) or could not
    /// (false, said in the log), so no event after this returns is missed.
    func start(subsystems: [String], log: BrokerLog, deliver: @escaping @Sendable (HotplugEvent) -> Void) -> Bool {
        started.store(true, ordering: .releasing)
        let opened = DispatchSemaphore(value: 0)
        let outcome = Mutex<Bool>(false)
        DetachedThread.startOrExit(name: "devaccessd udev") { [self] in
            defer { finished.signal() }
            let monitor: UdevMonitor
            do throws(UdevError) {
                monitor = try UdevMonitor(subsystems: subsystems)
            } catch {
                log.warning("no udev monitor: hotplugged devices get their ACL entries at the next periodic "
                            + "reconcile", ["error": error.description])
                opened.signal()
                return
            }
            outcome.withLock { $0 = true }
            opened.signal()
            listen(monitor, log: log, deliver: deliver)
        }
        opened.wait()
        return outcome.withLock { $0 }
    }

    private func listen(_ monitor: UdevMonitor, log: BrokerLog, deliver: @Sendable (HotplugEvent) -> Void) {
        var failures = 0
        while !stopRequested.load(ordering: .acquiring) {
            let received: UdevMonitor.Event?
            do {
                received = try monitor.next(timeoutMilliseconds: Self.tick)
                failures = 0
            } catch {
                // poll(2) itself failed: say so (once in a while) and do not spin.
                if failures % 60 == 0 { log.error("udev monitor failed", ["error": error.description]) }
                failures += 1
                usleep(UInt32(Self.tick) * 1000)
                continue
            }
            // A card or a bind event: its nodes have events of their own.
            guard let received, let event = UdevNodeEvent(received.device) else { continue }
            deliver(HotplugEvent(event, kernelArrival: received.kernelArrivalMicroseconds,
                                 received: MonotonicClock.microseconds()))
        }
    }

    /// Stops the thread and waits for it (at most a tick and a bit).
    func stop() {
        stopRequested.store(true, ordering: .releasing)
        guard started.load(ordering: .acquiring) else { return }
        _ = finished.wait(timeout: .now() + .milliseconds(Int(Self.tick) * 4))
    }
}
