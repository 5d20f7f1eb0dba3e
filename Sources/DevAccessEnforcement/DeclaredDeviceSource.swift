import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessACL

/// A node as udev would report it: its path and the device number it must have.
public struct DeclaredNode: Sendable, Hashable, Decodable {
    public var path: String
    public var role: String
    public var required: AccessMode
    public var major: UInt32
    public var minor: UInt32

    public init(path: String, role: String = "capture", required: AccessMode = .readWrite,
                major: UInt32, minor: UInt32) {
        self.path = path
        self.role = role
        self.required = required
        self.major = major
        self.minor = minor
    }

    enum CodingKeys: String, CodingKey { case path, role, required, major, minor }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        path = try container.decode(String.self, forKey: .path)
        role = try container.decodeIfPresent(String.self, forKey: .role) ?? "capture"
        major = try container.decode(UInt32.self, forKey: .major)
        minor = try container.decode(UInt32.self, forKey: .minor)
        let word = try container.decodeIfPresent(String.self, forKey: .required) ?? "readwrite"
        guard let mode = [AccessMode.read, .write, .readWrite].first(where: { $0.word == word }) else {
            throw DecodingError.dataCorruptedError(forKey: .required, in: container,
                                                   debugDescription: "'\(word)' is not read, write or readwrite")
        }
        required = mode
    }
}

/// A device declared rather than enumerated.
public struct DeclaredDevice: Sendable, Hashable, Decodable {
    public var permission: Permission
    public var id: String
    public var name: String
    public var nodes: [DeclaredNode]
    /// A device reached through a service (gpsd) rather than its nodes: whether the
    /// service lets every local program in (false: gated to devaccessd).
    public var service: DeclaredService?

    public struct DeclaredService: Sendable, Hashable, Decodable {
        public var name: String
        public var endpoint: String
        public var openToAllLocalUsers: Bool
    }

    public init(permission: Permission, id: String, name: String, nodes: [DeclaredNode],
                service: DeclaredService? = nil) {
        self.service = service
        self.permission = permission
        self.id = id
        self.name = name
        self.nodes = nodes
    }
}

/// Devices given by the caller instead of udev. Each call examines the nodes afresh, the
/// way an adapter does, so a node re-created, replaced by a symlink or removed between
/// calls is seen as it is now.
public struct DeclaredDeviceSource: DeviceSource {
    public var devices: [DeclaredDevice]

    public init(devices: [DeclaredDevice]) {
        self.devices = devices
    }

    /// Reads `{"devices": [{"permission", "id", "name", "nodes": [{"path", "major", "minor",
    /// "role"?, "required"?}], "service"?: {"name", "endpoint", "openToAllLocalUsers"}}]}`.
    public init(contentsOf path: String) throws(DeclarationError) {
        let data: Data
        do {
            data = Data(try FileDescriptor.contents(of: path))
        } catch {
            throw DeclarationError(path: path, problem: error.description, systemCall: error)
        }
        struct File: Decodable { var devices: [DeclaredDevice] }
        do {
            devices = try JSONDecoder().decode(File.self, from: data).devices
        } catch {
            throw DeclarationError(path: path, problem: "\(error)")
        }
    }

    public func report(for permission: Permission) -> AdapterReport {
        let matching = devices.filter { $0.permission == permission }
        guard !matching.isEmpty else {
            return AdapterReport(permission: permission, devices: [],
                                 unavailableReason: "no \(permission.rawValue) device is declared")
        }
        return AdapterReport(permission: permission, devices: matching.map { declared in
            Device(permission: permission, id: declared.id, name: declared.name, driver: "declared",
                   nodes: declared.nodes.map { node in
                       DeviceNode(path: node.path, role: node.role, required: node.required,
                                  state: NodeVerification.state(node.path, major: node.major, minor: node.minor))
                   },
                   route: declared.service.map {
                       .service(ServiceAccess(name: $0.name, endpoint: $0.endpoint,
                                              openToAllLocalUsers: $0.openToAllLocalUsers))
                   } ?? .nodes)
        })
    }
}

public struct DeclarationError: Error, Sendable, Hashable, CustomStringConvertible {
    public var path: String
    public var problem: String
    /// The failed call when the file could not be read (nil for a file that is not valid).
    public var systemCall: SystemCallError?

    public init(path: String, problem: String, systemCall: SystemCallError? = nil) {
        self.path = path
        self.problem = problem
        self.systemCall = systemCall
    }

    public var description: String { "cannot read the device declarations in \(path): \(problem)" }
}

/// Examines a node and trusts it only as the character device with the expected numbers
/// (what `DevAccessHardware` does for udev's nodes).
public enum NodeVerification {
    public static func state(_ path: String, major: UInt32, minor: UInt32) -> DeviceNode.State {
        let facts: NodeFacts
        do {
            facts = try NodeInspector.inspect(path)
        } catch {
            return .unusable(error.description)
        }
        guard facts.kind == .characterDevice else {
            return .unusable("\(path) is a \(facts.kind.rawValue), not a character device; refusing to trust it")
        }
        guard facts.major == major, facts.minor == minor else {
            return .unusable("\(path) is device \(facts.major):\(facts.minor), but \(major):\(minor) was expected")
        }
        return .present(facts)
    }
}
