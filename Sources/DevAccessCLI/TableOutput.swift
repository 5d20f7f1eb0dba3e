import DevAccessCore

/// Plain-text tables for people (status has its own: StatusRendering).
enum TableOutput {
    /// Who opens the capture nodes without devaccess, and the deny-by-default rules.
    static func gate(_ gate: GateReport) -> String {
        gateLines(gate).map { $0 + "\n" }.joined()
    }

    /// The gate section, a line each; what a line holds is on one line whatever it holds.
    static func gateLines(_ gate: GateReport) -> [String] {
        var lines = ["without devaccess: " + TerminalText.field(gate.summary),
                     "  deny-by-default udev rules: " + TerminalText.field(gate.denyByDefault.message)]
        for node in gate.nodes where !node.openers.isEmpty {
            lines.append("  \(TerminalText.field(node.path)) (\(node.permission.rawValue)):")
            for opener in node.openers {
                lines.append("    - \(TerminalText.field(opener.message)) [\(opener.access.word)]")
            }
        }
        return lines
    }

    /// `skipped`: also the nodes looked at and left out as no device of the permission.
    static func devices(_ reports: [AdapterReport], skipped: Bool = false) -> String {
        var text = ""
        for report in reports {
            text += "\(report.permission.rawValue):\n"
            if let why = report.unavailableReason {
                text += "  unavailable: \(TerminalText.field(why))\n"
            } else if report.devices.isEmpty {
                text += "  no devices\n"
            }
            for device in report.devices {
                // Names, ids, drivers and details come from hardware and from whoever answers
                // on gpsd's port: each on one line.
                var line = "  \(TerminalText.field(device.name))  [\(TerminalText.field(device.id))]"
                if let driver = device.driver { line += "  driver \(TerminalText.field(driver))" }
                text += line + "\n"
                if case .service(let service) = device.route {
                    text += "    via \(TerminalText.field(service.name)) at \(TerminalText.field(service.endpoint))\n"
                }
                for (key, value) in device.details.sorted(by: { $0.key < $1.key }) {
                    text += "    \(TerminalText.field(key)): \(TerminalText.field(value))\n"
                }
                for node in device.nodes {
                    text += "    " + pad(node.role, 9) + TerminalText.field(node.path)
                    switch node.state {
                    case .present(let facts):
                        let owner = facts.ownerName ?? String(facts.ownerUID)
                        let group = facts.groupName ?? String(facts.groupGID)
                        text += "  \(facts.major):\(facts.minor)  \(owner):\(group) \(facts.modeOctal)"
                        if let acl = facts.acl {
                            text += "  acl " + acl.map(\.text).joined(separator: ",")
                        }
                    case .unusable(let why):
                        text += "  (\(TerminalText.field(why)))"
                    }
                    text += "\n"
                }
            }
            for note in report.notes where skipped || note.kind != .skipped {
                text += "  - \(TerminalText.field(note.message))\n"
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
