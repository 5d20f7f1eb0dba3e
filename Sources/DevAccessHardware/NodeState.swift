import DevAccessCore
import DevAccessSystem
import DevAccessACL

/// Examines a node that an adapter found, checking it is the character device
/// udev reported before its owner, mode and ACL are trusted.
enum NodeState {
    static func inspect(_ path: String, major: UInt32? = nil, minor: UInt32? = nil) -> DeviceNode.State {
        let facts: NodeFacts
        do {
            facts = try NodeInspector.inspect(path)
        } catch {
            return .unusable(error.description)
        }
        guard facts.kind == .characterDevice else {
            return .unusable("\(path) is a \(facts.kind.rawValue), not a character device; refusing to trust it")
        }
        if let major, let minor, facts.major != major || facts.minor != minor {
            return .unusable("\(path) is device \(facts.major):\(facts.minor), but udev reports \(major):\(minor)")
        }
        return .present(facts)
    }
}
