import DevAccessCore
import DevAccessSystem
import FoundationEssentials

/// `status` as text. The default view is read at a glance: one line per permission (its
/// status and summary), one per device (usable, blocked or denied), the decisions and
/// drift; the verbose view (`-v`, `explain`) adds every node's reason, the nodes that are
/// not devices of the permission, and who opens the capture nodes without devaccess.
/// Facts that hold for every permission (no ledger, decisions unknown) are said once.
struct StatusRendering {
    var user: UserIdentity
    var statuses: [PermissionStatus]
    var gate: GateReport?
    var time: HumanTime

    /// Reasons kept in the default view besides the summary: what was decided and by whom.
    private static let decisionKinds: Set<Reason.Kind> = [.summary, .ledger, .policy]

    /// A reason every shown permission gives word for word (the ledger is absent, unknown or
    /// unreadable; the policy cannot be read): a fact about the machine, not the permission.
    var facts: [String] {
        guard statuses.count > 1, let first = statuses.first else { return [] }
        return first.reasons.dropFirst().filter { reason in
            reason.kind != .drift && statuses.allSatisfy { $0.reasons.dropFirst().contains(reason) }
        }.map(\.message).uniqued()
    }

    func summary() -> StyledText {
        render(verbose: false)
    }

    func verbose() -> StyledText {
        render(verbose: true)
    }

    private func render(verbose: Bool) -> StyledText {
        var text = StyledText()
        let facts = facts
        text.line("user \(user.name) (uid \(user.uid))" + facts.map { "; " + time.rewritingISOTimes(in: $0) }.joined())
        for status in statuses {
            text.append(permission(status, verbose: verbose, facts: Set(facts)))
        }
        if let gate {
            text.append(verbose ? gateDetail(gate) : gateLine(gate))
        }
        return text
    }

    private func permission(_ status: PermissionStatus, verbose: Bool, facts: Set<String>) -> StyledText {
        var text = StyledText()
        let tone = Tone(status.status)
        text.symbol("●", tone)
        text.add(TableOutput.pad(status.permission.rawValue, 12))
        text.cell(status.status.rawValue, width: 15, tone)
        text.line(time.rewritingISOTimes(in: status.reasons.first?.message ?? ""))
        let names = status.devices.map { TerminalText.field($0.device.name) }
        let width = min(names.map(\.count).max() ?? 0, 40)
        for (device, name) in zip(status.devices, names) {
            let (word, symbol, tone): (String, String, Tone)
            if status.status == .denied {
                (word, symbol, tone) = ("denied", "✗", .bad)
            } else if device.usable {
                (word, symbol, tone) = ("usable", "✓", .good)
            } else {
                (word, symbol, tone) = ("blocked", "✗", .caution)
            }
            text.add("  ")
            text.symbol(symbol, tone)
            text.cell(word, width: 8, tone)
            text.line(TableOutput.pad(name, width + 1) + " " + Self.shortID(device.device))
        }
        var seen = Set<String>()
        for reason in status.reasons.dropFirst() where reason.kind != .drift && !facts.contains(reason.message) {
            guard verbose || Self.decisionKinds.contains(reason.kind), seen.insert(reason.message).inserted else { continue }
            text.line("    - " + time.rewritingISOTimes(in: reason.message))
        }
        for drift in status.drift {
            text.add("    ")
            text.line("! drift: " + time.rewritingISOTimes(in: drift.message), .bad)
        }
        return text
    }

    /// The id without its permission's prefix, which the line it is under already names.
    static func shortID(_ device: Device) -> String {
        let prefix = device.permission.rawValue + ":"
        let id = device.id.hasPrefix(prefix) ? String(device.id.dropFirst(prefix.count)) : device.id
        return TerminalText.field(id)
    }

    private func gateLine(_ gate: GateReport) -> StyledText {
        var text = StyledText()
        let open = !gate.isEffective
        text.add("without devaccess: ")
        text.line(gate.summary + (open ? " (who: 'devaccess status -v')" : ""), open ? .caution : nil)
        return text
    }

    private func gateDetail(_ gate: GateReport) -> StyledText {
        var text = StyledText()
        for line in TableOutput.gateLines(gate) { text.line(line) }
        return text
    }
}

extension Array where Element: Hashable {
    /// The elements in order, each once.
    func uniqued() -> [Element] {
        var seen = Set<Element>()
        return filter { seen.insert($0).inserted }
    }
}

extension HumanTime {
    /// This process's clock and time zone.
    static func now() -> HumanTime {
        HumanTime(now: Date().timeIntervalSince1970)
    }
}
