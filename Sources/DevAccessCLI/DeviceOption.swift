import DevAccessArguments
import DevAccessCore
import DevAccessEngine
import DevAccessInterface
import DevAccessSystem

/// `--device` (grant, deny, revoke): a device's stable id, or the path of one of its nodes
/// (`/dev/video0`, a /dev/v4l/by-id link). A path is never passed on: the device number
/// (st_rdev) of what it names is matched with the nodes of the permission's devices as
/// the probe finds them, and that device's id goes to devaccessd, which takes ids only.
enum DeviceOption {
    /// The device id `--device` names for `permission`; nil without the option.
    static func id(_ arguments: ParsedArguments, permission: Permission, command: String) async throws -> String? {
        guard let value = arguments.value("device") else { return nil }
        guard !value.isEmpty else {
            throw UsageError(message: "'--device' needs a device id or a node's path", command: command)
        }
        // Ids are PERMISSION:..., never a path.
        guard value.hasPrefix("/") else { return value }
        let node: CharacterDevice?
        do {
            node = try CharacterDevice.at(value, following: true)
        } catch {
            throw notANode(value, permission, because: error.description, command: command)
        }
        guard let node else { throw notANode(value, permission, because: "it is no character device", command: command) }
        let reads = try CommonOptions.reads(arguments, command: command)
        let reports = try await AdminAccess.call(command) { () throws(InterfaceError) in
            try await reads.devices([permission])
        }
        let device = reports.flatMap(\.devices).first { device in
            device.nodes.contains { $0.facts.map { $0.kind == .characterDevice && node.isDevice(major: $0.major,
                                                                                                 minor: $0.minor) } == true }
        }
        guard let device else {
            throw notANode(value, permission, because: "no \(permission.rawValue) device has a node with its number "
                + "\(node.major):\(node.minor)", command: command)
        }
        return device.id
    }

    private static func notANode(_ path: String, _ permission: Permission, because why: String,
                                 command: String) -> UsageError {
        UsageError(message: "--device '\(path)' is no \(permission.rawValue) device's node (\(why)); "
            + "'devaccess devices \(permission.rawValue)' lists them", command: command)
    }
}
