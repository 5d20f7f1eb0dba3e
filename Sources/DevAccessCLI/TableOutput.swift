import DevAccessCore
import DevAccessEnforcement

/// Plain-text tables for people (status has its own: StatusRendering).
enum TableOutput {
    /// Who opens the capture nodes without devaccess, and the deny-by-default rules.
    static func gate(_ gate: GateReport) -> String {
        var text = "without devaccess: \(gate.summary)\n"
        text += "  deny-by-default udev rules: \(gate.denyByDefault.message)\n"
        for node in gate.nodes where !node.openers.isEmpty {
            text += "  \(node.path) (\(node.permission.rawValue)):\n"
            for opener in node.openers {
                text += "    - \(opener.message) [\(opener.access.word)]\n"
            }
        }
        return text
    }

    /// `skipped`: also the nodes looked at and left out as no device of the permission.
    static func devices(_ reports: [AdapterReport], skipped: Bool = false) -> String {
        var text = ""
        for report in reports {
            text += "\(report.permission.rawValue):\n"
            if let why = report.unavailableReason {
                text += "  unavailable: \(why)\n"
            } else if report.devices.isEmpty {
                text += "  no devices\n"
            }
            for device in report.devices {
                var line = "  \(device.name)  [\(device.id)]"
                if let driver = device.driver { line += "  driver \(driver)" }
                text += line + "\n"
                if case .service(let service) = device.route {
                    text += "    via \(service.name) at \(service.endpoint)\n"
                }
                for (key, value) in device.details.sorted(by: { $0.key < $1.key }) {
                    text += "    \(key): \(value)\n"
                }
                for node in device.nodes {
                    text += "    " + pad(node.role, 9) + node.path
                    switch node.state {
                    case .present(let facts):
                        let owner = facts.ownerName ?? String(facts.ownerUID)
                        let group = facts.groupName ?? String(facts.groupGID)
                        text += "  \(facts.major):\(facts.minor)  \(owner):\(group) \(facts.modeOctal)"
                        if let acl = facts.acl {
                            text += "  acl " + acl.map(\.text).joined(separator: ",")
                        }
                    case .unusable(let why):
                        text += "  (\(why))"
                    }
                    text += "\n"
                }
            }
            for note in report.notes where skipped || note.kind != .skipped {
                text += "  - \(note.message)\n"
            }
        }
        return text
    }

    /// A cell: on one line whatever it holds (device names come from hardware), padded.
    static func pad(_ text: String, _ width: Int) -> String {
        let text = TerminalText.field(text)
        return text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
    }
}
