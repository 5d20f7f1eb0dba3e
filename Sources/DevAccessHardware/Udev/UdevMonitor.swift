import CUdev
import Glibc
import DevAccessSystem

/// A udev netlink monitor: events after udevd has applied its rules (so nodes have
/// their final owner, mode and ACLs), filtered by subsystem in the kernel.
///
/// A second socket listens to the kernel's own uevents, only to note when each
/// SEQNUM arrived: udevd's rule processing sits between the two, and hotplug
/// delays are measured from the kernel's event, not udevd's.
public final class UdevMonitor {
    private let udev: Udev
    private let monitor: OpaquePointer
    private let kernelMonitor: OpaquePointer
    private let attributes: [String]
    /// SEQNUM -> CLOCK_MONOTONIC µs when the kernel uevent arrived (bounded).
    private var kernelArrivals: [UInt64: UInt64] = [:]

    public init(subsystems: [String], attributes: [String] = []) throws(UdevError) {
        udev = try Udev()
        guard let monitor = udev_monitor_new_from_netlink(udev.handle, "udev") else {
            throw .monitorFailed("cannot open the udev netlink socket")
        }
        self.monitor = monitor
        guard let kernelMonitor = udev_monitor_new_from_netlink(udev.handle, "kernel") else {
            udev_monitor_unref(monitor)
            throw .monitorFailed("cannot open the kernel uevent netlink socket")
        }
        self.kernelMonitor = kernelMonitor
        self.attributes = attributes
        for handle in [monitor, kernelMonitor] {
            for subsystem in subsystems {
                let rc = udev_monitor_filter_add_match_subsystem_devtype(handle, subsystem, nil)
                if rc < 0 {
                    throw .monitorCall(SystemCallError("udev_monitor_filter_add_match_subsystem_devtype", Errno(rawValue: -rc)))
                }
            }
            let rc = udev_monitor_enable_receiving(handle)
            if rc < 0 { throw .monitorCall(SystemCallError("udev_monitor_enable_receiving", Errno(rawValue: -rc))) }
        }
    }

    deinit {
        udev_monitor_unref(monitor)
        udev_monitor_unref(kernelMonitor)
    }

    /// An event after udevd processed it, with when its kernel uevent arrived.
    public struct Event: Sendable {
        public var device: UdevDevice
        /// CLOCK_MONOTONIC µs at which the kernel's uevent with the same SEQNUM was received.
        public var kernelArrivalMicroseconds: UInt64?
    }

    /// Waits up to `timeoutMilliseconds` (-1: forever) for the next processed event.
    public func next(timeoutMilliseconds: Int32) throws(UdevError) -> Event? {
        let deadline = timeoutMilliseconds < 0 ? nil : ContinuousClock.now + .milliseconds(timeoutMilliseconds)
        while true {
            let ready: [Int16]
            do {
                guard let events = try Poll.wait([.readable(udev_monitor_get_fd(kernelMonitor)),
                                                  .readable(udev_monitor_get_fd(monitor))], until: deadline) else {
                    return nil
                }
                ready = events
            } catch {
                throw .monitorCall(error)
            }
            if ready[0] & Int16(POLLIN) != 0, let raw = udev_monitor_receive_device(kernelMonitor) {
                noteKernelArrival(udev_device_get_seqnum(raw))
                udev_device_unref(raw)
            }
            if ready[1] & Int16(POLLIN) != 0, let raw = udev_monitor_receive_device(monitor) {
                defer { udev_device_unref(raw) }
                let device = Udev.snapshot(raw, attributes: attributes, parentSubsystem: nil)
                return Event(device: device, kernelArrivalMicroseconds: kernelArrivals.removeValue(forKey: device.seqnum))
            }
        }
    }

    private func noteKernelArrival(_ seqnum: UInt64) {
        if kernelArrivals.count > 4096 { kernelArrivals.removeAll(keepingCapacity: true) }
        kernelArrivals[seqnum] = MonotonicClock.microseconds()
    }
}
