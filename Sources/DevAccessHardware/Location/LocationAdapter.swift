import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessACL

/// The authority adapter for `location`: what gpsd says, turned into devices.
///
/// Every receiver gpsd lists becomes one `Device` whose node is the receiver's device
/// file (examined with `NodeInspector`) and whose route is gpsd itself, which serves
/// every local client unless its port is gated to devaccessd
/// (config/nftables/devaccess-gpsd.nft): run as root, the probe asks whether an
/// unprivileged program would be let in, with a socket made as `nobody`. Coordinates are
/// deliberately not copied into `details`: devices are listed to anyone, while location
/// is served only at the accuracy a subject was granted.
public enum LocationAdapter {
    /// Asks gpsd at `endpoint`; never takes much longer than `timeout` and never throws:
    /// an unreachable or misbehaving gpsd makes the report `unavailable` with the reason.
    public static func probe(endpoint: GpsdEndpoint = .default,
                             timeout: Duration = GpsdClient.defaultTimeout) -> AdapterReport {
        let status: GpsdStatus
        let client = GpsdClient(endpoint: endpoint, timeout: timeout)
        do {
            status = try client.query()
        } catch {
            if case .refused = error, geteuid() != 0 {
                return AdapterReport(permission: .location, devices: [], unavailableReason: error.description
                    + ": gpsd is not running, or its port is gated to devaccessd; 'devaccess status --broker "
                    + "location' asks devaccessd, which reaches it")
            }
            return AdapterReport(permission: .location, devices: [], unavailableReason: error.description)
        }
        // Not root: we were let in, as an unprivileged program.
        return report(for: status, openToAllLocalUsers: client.admitsUnprivileged() ?? true, inspect: inspectNode)
    }

    /// Maps gpsd's answer to devices; `inspect` examines a receiver's node (tests swap it).
    /// `openToAllLocalUsers` false: gpsd's port refuses unprivileged programs, so only
    /// devaccessd (and a receiver's node, where a user can open it) gives location.
    public static func report(for status: GpsdStatus, openToAllLocalUsers: Bool = true,
                              inspect: (String) -> DeviceNode.State = inspectNode) -> AdapterReport {
        let endpoint = status.endpoint.description
        guard !status.receivers.isEmpty else {
            return AdapterReport(permission: .location, devices: [],
                                 unavailableReason: "gpsd at \(endpoint) is running but reports no GPS receiver",
                                 notes: [Reason(.unavailable, "plug a receiver in, or hand one to gpsd with "
                                                + "`gpsdctl add /dev/ttyACM0`")])
        }
        let route = AccessRoute.service(ServiceAccess(name: "gpsd", endpoint: endpoint,
                                                             openToAllLocalUsers: openToAllLocalUsers))
        var notes: [Reason] = []
        let devices = status.receivers.map { receiver in
            notes.append(Reason(.service, fixSentence(receiver)))
            return Device(
                permission: .location,
                id: "location:gpsd:\(receiver.path)",
                name: receiver.driver ?? "GPS receiver",
                driver: receiver.driver,
                nodes: [DeviceNode(path: receiver.path, role: "receiver", required: .read,
                                   state: inspect(receiver.path))],
                route: route,
                details: ["fix": receiver.fix.mode.word, "gpsdVersion": status.release])
        }
        return AdapterReport(permission: .location, devices: devices, notes: notes)
    }

    /// The node state of a receiver path. gpsd also reads network sources
    /// (`tcp://host:port`, `udp://…`, `gpsd://…`); those have no node on this machine.
    /// A symlink (udev rules often add `/dev/gps0 -> ttyACM0`) is reported by its target,
    /// whose owner, mode and ACL are what decide access.
    public static func inspectNode(_ path: String) -> DeviceNode.State {
        guard path.hasPrefix("/") else {
            return .unusable("\(path) is a network source of gpsd, not a device node on this machine")
        }
        // The path comes from whoever answers on gpsd's port (any local user, when gpsd
        // is down): look only inside /dev, where root decides what exists.
        guard path.hasPrefix("/dev/") else {
            return .unusable("\(path) is not under /dev; devaccess does not examine it")
        }
        var target = path
        if let resolved = realpath(path, nil) {
            target = String(cString: resolved)
            free(resolved)
        }
        guard target.hasPrefix("/dev/") else {
            return .unusable("\(path) leads outside /dev (to \(target)); devaccess does not examine it")
        }
        let facts: NodeFacts
        do {
            facts = try NodeInspector.inspect(target)
        } catch {
            return .unusable(error.description)
        }
        guard facts.kind == .characterDevice else {
            return .unusable("\(target) is a \(facts.kind.rawValue), not a character device as a GPS receiver's "
                             + "serial port is")
        }
        return .present(facts)
    }

    static func fixSentence(_ receiver: GpsdReceiver) -> String {
        switch receiver.fix.mode {
        case .threeD: return "gpsd reports a 3D fix from \(receiver.path)"
        case .twoD: return "gpsd reports a 2D fix from \(receiver.path)"
        case .noFix: return "no fix yet from \(receiver.path): the receiver reports no satellite fix"
        case .notReported:
            return receiver.isActive
                ? "no fix yet from \(receiver.path): gpsd has no data from it yet (it may still be starting)"
                : "no fix yet from \(receiver.path): gpsd does not have it open"
        }
    }
}
