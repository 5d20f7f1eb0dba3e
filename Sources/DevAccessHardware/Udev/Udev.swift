import CUdev
import CLinux
import Glibc
import FoundationEssentials
import DevAccessCore
import DevAccessSystem

public enum UdevError: Error, Equatable, CustomStringConvertible {
    case contextUnavailable
    case enumerationFailed(subsystem: String, SystemCallError)
    /// libudev gave no monitor (it reports no errno then).
    case monitorFailed(String)
    /// A call on the monitor failed with errno (libudev's -errno, or poll's).
    case monitorCall(SystemCallError)

    public var description: String {
        switch self {
        case .contextUnavailable:
            return "libudev could not create a context (is /sys mounted?)"
        case .enumerationFailed(let subsystem, let failure):
            return "udev enumeration of '\(subsystem)' failed: \(failure)"
        case .monitorFailed(let what):
            return "udev monitor: \(what)"
        case .monitorCall(let failure):
            return "udev monitor: \(failure)"
        }
    }
}

/// Owns a libudev context. Not shared between threads: make one where it is used.
public final class Udev {
    let handle: OpaquePointer

    public init() throws(UdevError) {
        guard let handle = udev_new() else { throw .contextUnavailable }
        self.handle = handle
    }

    deinit { udev_unref(handle) }

    /// All devices of a subsystem, with the given sysfs attributes read.
    /// `sysnames`: only devices whose kernel name matches one of these shell patterns
    /// (`video*`), matched on the directory entry before the device is read; empty: all.
    public func devices(subsystem: String, attributes: [String] = [],
                        parentSubsystem: String? = nil, sysnames: [String] = []) throws(UdevError) -> [UdevDevice] {
        guard let enumerate = udev_enumerate_new(handle) else { throw .contextUnavailable }
        defer { udev_enumerate_unref(enumerate) }
        // libudev returns -errno.
        var rc = udev_enumerate_add_match_subsystem(enumerate, subsystem)
        if rc < 0 {
            throw .enumerationFailed(subsystem: subsystem,
                                     SystemCallError("udev_enumerate_add_match_subsystem", Errno(rawValue: -rc)))
        }
        for pattern in sysnames {
            rc = udev_enumerate_add_match_sysname(enumerate, pattern)
            if rc < 0 {
                throw .enumerationFailed(subsystem: subsystem,
                                         SystemCallError("udev_enumerate_add_match_sysname", Errno(rawValue: -rc)))
            }
        }
        rc = udev_enumerate_scan_devices(enumerate)
        if rc < 0 {
            throw .enumerationFailed(subsystem: subsystem, SystemCallError("udev_enumerate_scan_devices", Errno(rawValue: -rc)))
        }

        var result: [UdevDevice] = []
        var entry = udev_enumerate_get_list_entry(enumerate)
        while let current = entry {
            defer { entry = udev_list_entry_get_next(current) }
            guard let path = udev_list_entry_get_name(current),
                  let device = udev_device_new_from_syspath(handle, path) else {
                continue  // removed between the scan and now
            }
            defer { udev_device_unref(device) }
            result.append(Udev.snapshot(device, attributes: attributes, parentSubsystem: parentSubsystem))
        }
        return result.sorted { NaturalOrder.precedes($0.syspath, $1.syspath) }
    }

    /// The character device `major:minor` as udev knows it (its properties, tags), or nil.
    public func characterDevice(major: UInt32, minor: UInt32) -> UdevDevice? {
        guard let device = udev_device_new_from_devnum(handle, CChar(UInt8(ascii: "c")), devaccess_makedev(major, minor))
        else { return nil }
        defer { udev_device_unref(device) }
        return Udev.snapshot(device, attributes: [], parentSubsystem: nil)
    }

    static func snapshot(_ device: OpaquePointer, attributes wanted: [String],
                         parentSubsystem: String?) -> UdevDevice {
        func string(_ pointer: UnsafePointer<CChar>?) -> String? { pointer.map { String(cString: $0) } }
        let devnum = udev_device_get_devnum(device)
        var attributes: [String: String] = [:]
        for name in wanted {
            if let value = string(udev_device_get_sysattr_value(device, name)) {
                attributes[name] = value.trimmingWhitespace()
            }
        }
        // The parent pointer is owned by the child; it must not be unref'd.
        let parent = parentSubsystem.map { udev_device_get_parent_with_subsystem_devtype(device, $0, nil) }
            ?? udev_device_get_parent(device)
        return UdevDevice(
            syspath: string(udev_device_get_syspath(device)) ?? "",
            sysname: string(udev_device_get_sysname(device)) ?? "",
            subsystem: string(udev_device_get_subsystem(device)),
            devnode: string(udev_device_get_devnode(device)),
            major: devaccess_major(devnum),
            minor: devaccess_minor(devnum),
            action: string(udev_device_get_action(device)),
            seqnum: udev_device_get_seqnum(device),
            properties: properties(udev_device_get_properties_list_entry(device)),
            attributes: attributes,
            parentSyspath: parent.flatMap { string(udev_device_get_syspath($0)) },
            parentDriver: parent.flatMap { string(udev_device_get_driver($0)) },
            parentProperties: parent.map { properties(udev_device_get_properties_list_entry($0)) } ?? [:],
            isInitialized: udev_device_get_is_initialized(device) > 0)
    }

    static func properties(_ first: OpaquePointer?) -> [String: String] {
        var pairs: [(name: String, value: String?)] = []
        var entry = first
        while let current = entry {
            if let name = udev_list_entry_get_name(current) {
                pairs.append((String(cString: name), udev_list_entry_get_value(current).map { String(cString: $0) }))
            }
            entry = udev_list_entry_get_next(current)
        }
        return UdevDevice.properties(pairs)
    }
}
