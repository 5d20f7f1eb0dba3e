import DevAccessArguments
import DevAccessCore
import DevAccessSystem
import DevAccessInterface
import FoundationEssentials
import Glibc

/// `grant` and `deny`: record an admin decision in the ledger and apply it to the nodes.
enum DecisionCommand {
    /// Which of the two commands (the order's `allow`).
    enum Decision { case allow, deny }

    static let device = OptionSpec(long: "device", short: nil, value: "ID",
                                   help: "Only this device: its stable id from 'devaccess devices', or the path of "
                                       + "one of its nodes (/dev/video0); default: every device.")
    static let reason = OptionSpec(long: "reason", short: nil, value: "TEXT", help: "Why, for the audit trail.")
    static let adminUser = OptionSpec(long: "user", short: "u", value: "USER", help: "The user (name or uid). Required.")
    static let program = OptionSpec(long: "program", short: nil, value: "PATH",
        help: "Only for this program, run with 'devaccess run' (a program grant); default: the user's every program.")
    static let accuracy = OptionSpec(long: "accuracy", short: nil, value: "LEVEL",
        help: "Location only: how precisely the user is told where this computer is: exact, street (~100 m), "
            + "neighborhood (~1 km), city (~10 km), country (~300 km); default exact.")

    /// `--accuracy LEVEL`: a level, and only on a grant of location.
    static func accuracyLevel(_ arguments: ParsedArguments, permission: Permission,
                              command: String) throws(UsageError) -> LocationAccuracy? {
        guard let text = arguments.value("accuracy") else { return nil }
        guard permission == .location else {
            throw UsageError(message: "'--accuracy' goes with location only, not \(permission.rawValue)", command: command)
        }
        do {
            return try LocationAccuracy.parse(text)
        } catch {
            throw UsageError(message: "--accuracy: \(error.description)", command: command)
        }
    }

    /// `--program PATH`: absolute, or made so from the working directory.
    static func programPath(_ arguments: ParsedArguments, command: String) throws(UsageError) -> String? {
        guard let path = arguments.value("program") else { return nil }
        guard !path.isEmpty else { throw UsageError(message: "'--program' needs a path", command: command) }
        return path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    static func spec(_ decision: Decision) -> CommandSpec {
        let name = decision == .allow ? "grant" : "deny"
        return CommandSpec(
            name: name,
            abstract: decision == .allow
                ? "Let a user use a permission's devices (admin): record it and add ACL entries."
                : "Forbid a user a permission (admin): record a sticky denial and remove devaccess's entries.",
            usage: "devaccess \(name) PERMISSION --user USER [--device ID] [--program PATH] "
                + (decision == .allow ? "[--accuracy LEVEL] " : "") + "[--for DURATION | --until TIME | --always]",
            options: [adminUser, device, program] + (decision == .allow ? [accuracy] : []) + TermOptions.options
                + [reason, CommonOptions.json] + AdminAccess.options,
            discussion: """
            \(CommonOptions.permissionsHelp)
            \(decision == .allow ? """
            The grant is written to the ledger first, then 'user:USER:rw-' is added to every node of
            the matching devices (mask recalculated), each node checked first to be the character
            device udev reports. A grant replaces the user's earlier grants for the same devices.
            Entries devaccess did not make are never changed; they are reported as drift.
            """ : """
            The denial is written to the ledger, the user's standing grants it covers end, and the
            entries devaccess made for them are removed. Status is then 'denied' until a newer grant
            or 'devaccess reset'. Access the user still has through a group or by hand-made ACL
            entries is not removed; it is reported as drift.
            """)
            With --program, the decision is a program grant: only 'devaccess run PATH' by the user
            uses it (ACL entries for the run's group while each run lasts, none for the user);
            a user-wide decision applies to runs too.
            The newest standing decision for a device wins. Location decisions put no ACL on nodes:
            devaccessd serves location to the users it is granted to, at the grant's --accuracy
            (capped by the policy's MaxAccuracy=); gpsd's own port binds only when it is gated to
            devaccessd (config/nftables/devaccess-gpsd.nft; 'devaccess doctor' checks).
            \(AdminAccess.help)
            Root and members of devaccess-admin only. --json prints the result (docs/json.md).
            Exit codes: 0 done, 1 recorded but some node was refused or failed (see the messages;
            fix and run 'devaccess reconcile'), 64 usage error, 69 devaccessd unreachable,
            74/75 ledger unusable/busy, 77 refused.
            """)
    }

    static func run(_ decision: Decision, _ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        let name = decision == .allow ? "grant" : "deny"
        guard arguments.positionals.count == 1 else {
            throw UsageError(message: arguments.positionals.isEmpty
                ? "missing PERMISSION (one of: \(Permission.all.map(\.rawValue).joined(separator: ", ")))"
                : "\(name) takes one PERMISSION, got '\(arguments.positionals.joined(separator: " "))'", command: name)
        }
        let permission = try CommonOptions.permissions(arguments.positionals, command: name)[0]
        let accuracy = try accuracyLevel(arguments, permission: permission, command: name)
        let now = Date()
        let term = try TermOptions.parse(arguments, command: name, now: now)
        let device = try await DeviceOption.id(arguments, permission: permission, command: name)
        let user = try AdminAccess.user(arguments, command: name, purpose: "whose access this is")
        if let reason = arguments.value("reason"), reason.utf8.count > 1024 {
            throw UsageError(message: "'--reason' is longer than 1024 bytes", command: name)
        }
        let interface = try AdminAccess.interface(arguments, command: name)
        let order = DecisionOrder(allow: decision == .allow, permission: permission, user: user,
                                  device: device,
                                  expiresMilliseconds: term.untilMilliseconds, lastingSeconds: term.lastingSeconds,
                                  reason: arguments.value("reason"),
                                  program: try programPath(arguments, command: name), accuracy: accuracy)
        let outcome = try await AdminAccess.call(name) { () throws(InterfaceError) in try await interface.decide(order) }
        if arguments.has("json") {
            console.out(try JSONOutput.encode(outcome))
            EnforcementText.printProblems(outcome.report, console: console)
            return outcome.report.hasProblems ? .failure : .success
        }
        let time = HumanTime.now()
        var lines = ["recorded " + time.rewritingISOTimes(in: outcome.grant.line)]
        for ended in outcome.ended {
            lines.append("ended " + time.rewritingISOTimes(in: ended.line, ends: false)
                + (decision == .allow ? " (replaced)" : " (denied now)"))
        }
        console.out(lines.joined(separator: "\n"))
        let code = EnforcementText.print(outcome.report, console: console, quietWhenUnchanged: true)
        if code != .success {
            console.error("devaccess: grant \(outcome.grant.id) is recorded, but not every node could be changed; "
                + "fix what is named above and run 'devaccess reconcile'")
        }
        return code
    }
}

enum GrantCommand: Command {
    static let spec = DecisionCommand.spec(.allow)
    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        try await DecisionCommand.run(.allow, arguments, console: console)
    }
}

enum DenyCommand: Command {
    static let spec = DecisionCommand.spec(.deny)
    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        try await DecisionCommand.run(.deny, arguments, console: console)
    }
}
