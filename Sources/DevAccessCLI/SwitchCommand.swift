import DevAccessArguments
import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessSystem
import DevAccessInterface

/// `devaccess switch [PERMISSION off|on]`: privacy switches, a permission off for everyone.
enum SwitchCommand: Command {
    static let spec = CommandSpec(
        name: "switch",
        abstract: "Turn a permission off for everyone, now, and back on (admin); alone, show the switches.",
        usage: "devaccess switch [PERMISSION off [--hard] [--for DURATION] | PERMISSION on] [--reason TEXT]",
        options: [hard, forDuration, DecisionCommand.reason, CommonOptions.json] + AdminAccess.options,
        discussion: """
        \(CommonOptions.permissionsHelp)
        off: the ACL entries devaccess made on the permission's capture nodes are removed
        (users' grants and 'devaccess run' entries; the grants stay in the ledger and apply
        again when it is on), no request is asked or granted (status 'restricted': "switched
        off by ADMIN at TIME: REASON") and 'devaccess run' refuses it. With --hard, every other
        user's and group's access to those nodes goes too (group bits such as 'video' and
        'audio', ACL entries devaccess did not make, like logind's uaccess; a node a user owns
        is given to root, as its owner could chmod it open again): it is saved in the
        ledger first and put back exactly (mode, owner, group, ACL) by 'on'; devaccessd takes
        it away again when udev re-applies its rules (a change event, a replug), and a device
        plugged in while it is off comes up off. --for turns it back on by itself after
        DURATION. Playback, input and display nodes are never touched: only the capture nodes
        the camera and microphone adapters report. location: devaccessd serves no position
        while off ('devaccess location', its gpsd endpoint, whose clients are cut off within
        2 s); gpsd's own port stays closed only where it is gated to devaccessd
        (config/nftables/devaccess-gpsd.nft).
        What it cannot do: close descriptors already open. A program that has the camera open
        keeps it until it closes it; switching off says how many processes hold the nodes
        ('devaccess who PERMISSION' lists them; end them with 'devaccess revoke --terminate'
        or kill).
        on: the switch is removed, saved node access put back, and devaccess's grants
        re-applied. Without arguments: every permission's switch (anyone may look).
        The switch survives restarts (the ledger), is audited (switch_off, switch_on) and
        shows in 'status' and 'monitor'.
        \(AdminAccess.help)
        Only root and members of devaccess-admin may switch (others: exit 77, audited).
        Exit codes: 0 done, 1 some node was refused or failed, 64 usage error, 69 devaccessd
        unreachable, 74/75 ledger unusable/busy, 77 refused.
        """)

    static let hard = OptionSpec(long: "hard", short: nil, value: nil,
        help: "Off: also take away everyone else's access to the nodes (saved, put back by 'on').")
    static let forDuration = OptionSpec(long: "for", short: nil, value: "DURATION",
        help: "Off: turn back on by itself after this long: 90s, 15m, 8h, 1h30m.")

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        let words = arguments.positionals
        if words.isEmpty {
            for option in ["hard", "for", "reason"] where arguments.has(option) || arguments.value(option) != nil {
                throw UsageError(message: "'--\(option)' goes with 'PERMISSION off|on'", command: spec.name)
            }
            let interface = try AdminAccess.interface(arguments, command: spec.name, readOnly: true)
            let document = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
                try await interface.switches()
            }
            if arguments.has("json") {
                console.out(try JSONOutput.encode(document))
            } else {
                console.out(document.switches.map(line).joined(separator: "\n"))
            }
            return .success
        }
        guard words.count == 2, words[1] == "off" || words[1] == "on" else {
            throw UsageError(message: "expected 'PERMISSION off' or 'PERMISSION on', got '\(words.joined(separator: " "))'",
                             command: spec.name)
        }
        let permission = try CommonOptions.permissions([words[0]], command: spec.name)[0]
        let off = words[1] == "off"
        if !off, arguments.has("hard") || arguments.value("for") != nil {
            throw UsageError(message: "'--hard' and '--for' go with 'off'", command: spec.name)
        }
        if let reason = arguments.value("reason"), reason.utf8.count > 1024 {
            throw UsageError(message: "'--reason' is longer than 1024 bytes", command: spec.name)
        }
        var lasting: Int64?
        if let text = arguments.value("for") {
            do {
                lasting = try DurationText.seconds(text)
            } catch {
                throw UsageError(message: "\(error.description) for '--for'", command: spec.name)
            }
        }
        let interface = try AdminAccess.interface(arguments, command: spec.name)
        let order = SwitchOrder(permission: permission, off: off, hard: arguments.has("hard"),
                                reason: arguments.value("reason"), lastingSeconds: lasting)
        let document = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
            try await interface.setSwitch(order)
        }
        let enforcement = document.enforcement
        if arguments.has("json") {
            console.out(try JSONOutput.encode(document))
            if let enforcement { EnforcementText.printProblems(enforcement, console: console) }
            return enforcement?.hasProblems == true ? .failure : .success
        }
        if let state = document.switches.first(where: { $0.permission == permission.rawValue }) {
            console.out((document.changed == false ? "unchanged: " : "") + line(state))
        }
        if let open = document.stillOpen, open.processes > 0 || open.uninspected > 0 {
            console.error("devaccess: \(open.processes) process(es) still hold \(permission.rawValue) nodes open: "
                + "devaccess who \(permission.rawValue); revoke --terminate or kill them"
                + (open.uninspected > 0 ? " (\(open.uninspected) could not be inspected)" : "")
                + " (an ACL change closes nothing already open)")
        }
        guard let enforcement else { return .success }
        return EnforcementText.print(enforcement, console: console, quietWhenUnchanged: true)
    }

    /// `camera      off --hard by root since 09:12 CET until 18:00 CET, 1h58m left: exam week`
    /// (local time; `--json` keeps UTC).
    static func line(_ state: SwitchesDocument.State) -> String {
        let name = state.permission.padded(to: 12)
        guard state.state == "off" else { return name + "on" }
        let time = HumanTime.now()
        // Who, when and why come from devaccessd's reply: kept on this one line.
        return name + "off" + (state.hard == true ? " --hard" : "") + " by \(TerminalText.field(state.by ?? "?")) since "
            + time.rewritingISOTimes(in: TerminalText.field(state.since ?? "?"))
            + (state.expires.map { time.rewritingISOTimes(in: " until \(TerminalText.field($0))") } ?? "")
            + (state.reason.map { ": \(TerminalText.field($0))" } ?? "")
    }
}
