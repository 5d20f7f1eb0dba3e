import CUdev
import Glibc

/// A udev netlink monitor: events after udevd has applied its rules (so nodes have
/// their final owner, mode and ACLs), filtered by subsystem in the kernel.
public final class UdevMonitor {
    private let udev: Udev
    private let monitor: OpaquePointer
    private let attributes: [String]

    public init(subsystems: [String], attributes: [String] = []) throws(UdevError) {
        udev = try Udev()
        guard let monitor = udev_monitor_new_from_netlink(udev.handle, "udev") else {
            throw .monitorFailed("cannot open the udev netlink socket")
        }
        self.monitor = monitor
        self.attributes = attributes
        for subsystem in subsystems {
            let rc = udev_monitor_filter_add_match_subsystem_devtype(monitor, subsystem, nil)
            if rc < 0 { throw .monitorFailed("cannot filter on '\(subsystem)': \(String(cString: strerror(-rc)))") }
        }
        let rc = udev_monitor_enable_receiving(monitor)
        if rc < 0 { throw .monitorFailed("cannot start receiving: \(String(cString: strerror(-rc)))") }
    }

    deinit { udev_monitor_unref(monitor) }

    /// Waits up to `timeoutMilliseconds` (-1: forever) for the next event.
    public func next(timeoutMilliseconds: Int32) throws(UdevError) -> UdevDevice? {
        var descriptor = pollfd(fd: udev_monitor_get_fd(monitor), events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptor, 1, timeoutMilliseconds)
        if ready < 0 {
            if errno == EINTR { return nil }
            throw .monitorFailed("poll failed: \(String(cString: strerror(errno)))")
        }
        guard ready > 0, let device = udev_monitor_receive_device(monitor) else { return nil }
        defer { udev_device_unref(device) }
        return Udev.snapshot(device, attributes: attributes, parentSubsystem: nil)
    }
}
