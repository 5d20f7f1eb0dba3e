import DevAccessArguments
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessEngine
import DevAccessInterface
import DevAccessSystem
import FoundationEssentials
import Glibc

/// `devaccess doctor`: checks the installation piece by piece and says what to do
/// about each problem. Exit 0 when nothing failed (warnings allowed), 1 otherwise.
enum DoctorCommand: Command {
    static let spec = CommandSpec(
        name: "doctor",
        abstract: "Check the installation: files, groups, directories, the broker and the ledger.",
        usage: "devaccess doctor [--json] [--socket PATH] [--state-dir DIR] [--gpsd HOST:PORT] [--root DIR]",
        options: [CommonOptions.json, BrokerOptions.socket, CommonOptions.stateDir, CommonOptions.gpsd, CommonOptions.gpsdTimeout,
                  OptionSpec(long: "root", short: nil, value: "DIR",
                             help: "Look for installed files under DIR (a DESTDIR staging tree).")],
        discussion: """
        Each check prints ok, warn or fail with what was found. Checks: the devaccessd
        binary, its systemd unit, sysusers.d and tmpfiles.d files, the udev rules, the
        policy file ($DEVACCESS_CONFIG_DIR, as devaccessd reads it, else /etc/devaccess), man pages, the group devaccess-admin,
        the state and runtime directories, the broker socket (answers hello), the
        ledger (opens, audit chain verifies; needs read access, so run as root), the
        opt-in deny-by-default udev rules (installed, in force) and who can open capture
        nodes without devaccess (owner, groups, other bits, the seat user through
        'uaccess', ACL entries devaccess did not make), whether gpsd is gated to
        devaccessd (config/nftables/devaccess-gpsd.nft; as root, asked with a socket made
        as 'nobody') and who reads a GPS receiver's node without it, and whether Yama keeps a user's
        other processes from attaching to (ptrace) a program devaccess run started.
        Exit codes: 0 no check failed, 1 at least one failed, 64 usage error.
        """)

    enum Outcome: String, Encodable {
        case ok, warn, fail
    }

    struct Check: Encodable {
        var name: String
        var status: Outcome
        var message: String
    }

    struct Report: Encodable {
        var checks: [Check]
        var ok: Int
        var warn: Int
        var fail: Int
    }

    static let groups = ["devaccess-admin"]

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.isEmpty else {
            throw UsageError(message: "doctor takes no arguments, got '\(arguments.positionals[0])'", command: spec.name)
        }
        let root = arguments.value("root").map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 } ?? ""
        let socket = try BrokerOptions.socketPath(arguments, command: spec.name)
        let stateDirectory = try CommonOptions.stateDirectory(arguments, command: spec.name)
        let doctor = Doctor(root: root, configDirectory: PolicyFiles.directory(arguments.environment))
        // Who opens capture nodes without devaccess: the live machine only, not a staging tree.
        let reads = try CommonOptions.reads(arguments, command: spec.name)
        let gate: GateReport? = root.isEmpty
            ? try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
                try await reads.gate([.camera, .microphone])
            }
            : nil
        let location: AdapterReport? = root.isEmpty
            ? try await AdminAccess.call(spec.name) { () throws(InterfaceError) in try await reads.devices([.location]) }.first
            : nil
        var checks = [
            doctor.daemonBinary(),
            doctor.unit(),
            doctor.configFile("sysusers", "devaccess.conf", in: ["/etc/sysusers.d", "/usr/local/lib/sysusers.d",
                                                               "/usr/lib/sysusers.d"],
                              hint: "install config/devaccess.sysusers as sysusers.d/devaccess.conf (scripts/install.sh)"),
            doctor.configFile("tmpfiles", "devaccess.conf", in: ["/etc/tmpfiles.d", "/usr/local/lib/tmpfiles.d",
                                                               "/usr/lib/tmpfiles.d"],
                              hint: "install config/devaccess.tmpfiles as tmpfiles.d/devaccess.conf (scripts/install.sh)"),
            doctor.udevRules(),
            doctor.policy(),
            doctor.manPages(),
            doctor.groupsExist(groups),
            doctor.directory("state-dir", stateDirectory, missing: .fail,
                             hint: "created by systemd-tmpfiles --create or by devaccessd at start", private: true),
            doctor.directory("runtime-dir", CanonicalPath.directory(of: socket), missing: .warn,
                             hint: "created at boot by systemd-tmpfiles and by devaccessd at start"),
            doctor.broker(socket),
            doctor.ledger(stateDirectory),
            doctor.consentChannel(),
            doctor.ptrace(),
        ]
        checks += doctor.gate(gate)
        if let location { checks.append(doctor.locationGate(location)) }
        let report = Report(checks: checks, ok: checks.filter { $0.status == .ok }.count,
                            warn: checks.filter { $0.status == .warn }.count,
                            fail: checks.filter { $0.status == .fail }.count)
        if arguments.has("json") {
            console.out(try JSONOutput.encode(report))
        } else {
            var text = ""
            for check in checks {
                text += TableOutput.pad(check.status.rawValue, 6) + TableOutput.pad(check.name, 13) + check.message + "\n"
            }
            text += "\n\(report.ok) ok, \(report.warn) warn, \(report.fail) fail"
            console.out(text)
        }
        return report.fail == 0 ? .success : .failure
    }
}

/// The individual checks. Paths are looked up under `root` (empty: the live system).
struct Doctor {
    typealias Check = DoctorCommand.Check
    let root: String
    /// The policy directory devaccessd and `policy check` read ($DEVACCESS_CONFIG_DIR or /etc/devaccess).
    var configDirectory = PolicyFiles.systemDirectory

    func path(_ path: String) -> String { root + path }

    func exists(_ path: String) -> Bool {
        var info = stat()
        return stat(self.path(path), &info) == 0
    }

    func first(_ name: String, in directories: [String]) -> String? {
        directories.map { $0 + "/" + name }.first(where: exists)
    }

    func daemonBinary() -> Check {
        var directories = ["/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin", "/usr/libexec/devaccess"]
        if root.isEmpty, let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            directories.append(CanonicalPath.directory(of: exe))
        }
        guard let found = first("devaccessd", in: directories) else {
            return Check(name: "devaccessd", status: .fail,
                         message: "no devaccessd in \(directories.joined(separator: ", ")); run scripts/install.sh")
        }
        guard access(path(found), X_OK) == 0 else {
            return Check(name: "devaccessd", status: .fail, message: "\(found) is not executable")
        }
        return Check(name: "devaccessd", status: .ok, message: found)
    }

    func unit() -> Check {
        let directories = ["/etc/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system",
                           "/lib/systemd/system"]
        guard let found = first("devaccessd.service", in: directories) else {
            return Check(name: "unit", status: .fail,
                         message: "no devaccessd.service in \(directories.joined(separator: ", ")); run scripts/install.sh")
        }
        guard let text = try? String(contentsOfFile: path(found), encoding: .utf8) else {
            return Check(name: "unit", status: .fail, message: "\(found) cannot be read")
        }
        let lines = text.split(separator: "\n").map { $0.trimmingWhitespace() }
        guard let exec = lines.first(where: { $0.hasPrefix("ExecStart=") }) else {
            return Check(name: "unit", status: .fail, message: "\(found) has no ExecStart=")
        }
        let binary = exec.dropFirst("ExecStart=".count).split(separator: " ").first.map(String.init) ?? ""
        guard access(path(binary), X_OK) == 0 else {
            return Check(name: "unit", status: .fail, message: "\(found) starts \(binary), which is not there")
        }
        guard lines.contains("Type=notify") else {
            return Check(name: "unit", status: .warn, message: "\(found) is not Type=notify; readiness is not waited for")
        }
        return Check(name: "unit", status: .ok, message: "\(found) (ExecStart \(binary))")
    }

    func configFile(_ name: String, _ file: String, in directories: [String], hint: String) -> Check {
        guard let found = first(file, in: directories) else {
            return Check(name: name, status: .fail, message: "no \(file) in \(directories.joined(separator: ", ")); \(hint)")
        }
        return Check(name: name, status: .ok, message: found)
    }

    func udevRules() -> Check {
        let read = ["/etc/udev/rules.d", "/run/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d"]
        if let found = first("70-devaccess.rules", in: read) {
            return Check(name: "udev-rules", status: .ok, message: found)
        }
        if let ignored = first("70-devaccess.rules", in: ["/usr/local/lib/udev/rules.d"]) {
            return Check(name: "udev-rules", status: .warn,
                         message: "\(ignored) is in a directory udev does not read; move it to /etc/udev/rules.d")
        }
        return Check(name: "udev-rules", status: .fail,
                     message: "no 70-devaccess.rules in \(read.joined(separator: ", ")); run scripts/install.sh")
    }

    func policy() -> Check {
        // The directory devaccessd and `policy check` read: $DEVACCESS_CONFIG_DIR as they
        // do, else /etc/devaccess (under --root).
        let configured = configDirectory
        let directory = configured == PolicyFiles.systemDirectory ? path(configured) : configured
        let file = directory + "/" + PolicyFiles.mainFile
        guard FileManager.default.fileExists(atPath: file) else {
            return Check(name: "config", status: .warn, message: "no \(file): built-in defaults apply")
        }
        do {
            _ = try PolicyFiles.load(directory: directory)
        } catch {
            return Check(name: "config", status: .fail, message: "\(error); statuses say the policy cannot be read")
        }
        return Check(name: "config", status: .ok, message: "\(file) (parses)")
    }

    func manPages() -> Check {
        let directories = ["/usr/share/man", "/usr/local/share/man"]
        let pages = [("man1", "devaccess.1"), ("man8", "devaccessd.8")]
        let missing = pages.filter { section, page in
            !directories.contains { exists("\($0)/\(section)/\(page)") || exists("\($0)/\(section)/\(page).gz") }
        }.map(\.1)
        guard missing.isEmpty else {
            return Check(name: "man-pages", status: .warn, message: "not installed: \(missing.joined(separator: ", "))")
        }
        return Check(name: "man-pages", status: .ok, message: "devaccess(1), devaccessd(8)")
    }

    func groupsExist(_ names: [String]) -> Check {
        var found: [String] = []
        var missing: [String] = []
        for name in names {
            if let entry = getgrnam(name) {
                found.append("\(name) (\(entry.pointee.gr_gid))")
            } else {
                missing.append(name)
            }
        }
        guard missing.isEmpty else {
            return Check(name: "groups", status: .fail, message: "missing: \(missing.joined(separator: ", ")); "
                             + "run systemd-sysusers (or groupadd -r each)")
        }
        return Check(name: "groups", status: .ok, message: found.joined(separator: ", "))
    }

    /// Root-owned and writable by nobody else: the ledger and socket live there.
    /// `private`: nobody but root may even read it (the ledger's directory: decisions and reasons).
    func directory(_ name: String, _ directory: String, missing: DoctorCommand.Outcome, hint: String,
                   private: Bool = false) -> Check {
        var info = stat()
        guard lstat(directory, &info) == 0 else {
            return Check(name: name, status: missing, message: "\(directory) does not exist; \(hint)")
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            return Check(name: name, status: .fail, message: "\(directory) is not a directory")
        }
        let mode = String(info.st_mode & 0o7777, radix: 8)
        guard info.st_uid == 0 else {
            return Check(name: name, status: .fail,
                         message: "\(directory) belongs to uid \(info.st_uid), not root; chown root:root \(directory)")
        }
        guard info.st_mode & 0o022 == 0 else {
            return Check(name: name, status: .fail,
                         message: "\(directory) has mode \(mode): others can write; chmod \(`private` ? "0700" : "0755") "
                             + directory)
        }
        if `private` && info.st_mode & 0o077 != 0 {
            return Check(name: name, status: .warn,
                         message: "\(directory) has mode \(mode): other users can read decisions and reasons; chmod 0700 "
                             + "\(directory) (devaccessd does so at start)")
        }
        return Check(name: name, status: .ok, message: "\(directory) (root, mode \(mode))")
    }

    func broker(_ socket: String) -> Check {
        do {
            let hello = try BrokerSession(socketPath: socket, timeout: .seconds(3)).hello()
            let peer = hello.peer
            return Check(name: "socket", status: .ok, message: "\(hello.server) answers at \(socket); it sees you as "
                             + "\(peer.user ?? "uid \(peer.uid)") (uid \(peer.uid))\(peer.admin ? ", an admin" : "")")
        } catch {
            return Check(name: "socket", status: .fail, message: "\(error)")
        }
    }

    /// The opt-in deny-by-default rules, and who opens capture nodes without devaccess (nil
    /// gate: a staging tree, where only the rules file is looked for).
    func gate(_ gate: GateReport?) -> [Check] {
        guard let gate else {
            let found = EngineChecks.denyByDefaultRules(root: root)
            return [Check(name: "deny-default", status: found.path == nil ? .warn : .ok,
                          message: found.path ?? "\(DenyByDefaultRules.fileName) not installed (opt-in)")]
        }
        let rules = gate.denyByDefault
        var checks = [Check(name: "deny-default", status: rules.active == false ? .warn : .ok, message: rules.message)]
        let open = gate.nodes.filter { !$0.openers.isEmpty }
        let detail = open.map { node in
            "\(node.path): " + node.openers.map(\.message).joined(separator: "; ")
        }
        checks.append(Check(name: "gate", status: open.isEmpty ? .ok : .warn,
                            message: gate.summary + (detail.isEmpty ? "" : ": " + detail.joined(separator: " | "))))
        return checks
    }

    /// Whether location grants bind: gpsd's port closed to unprivileged programs, and no
    /// receiver node they can read around it.
    func locationGate(_ report: AdapterReport, unprivilegedPortStart: String = "/proc/sys/net/ipv4/ip_unprivileged_port_start")
        -> Check
    {
        // devaccessd's gpsd endpoint is on 947 so that no user can hold it first.
        if let text = try? String(contentsOfFile: unprivilegedPortStart, encoding: .utf8),
           let start = Int(text.trimmingWhitespace()), start <= 947 {
            return Check(name: "location", status: .warn, message: "net.ipv4.ip_unprivileged_port_start is \(start): "
                             + "any user may listen on devaccessd's gpsd endpoint port (947) while devaccessd is down "
                             + "and answer gpsd clients in its place; set it back to 1024")
        }
        if let why = report.unavailableReason {
            return Check(name: "location", status: .ok, message: "no receiver seen from here: \(why)")
        }
        var problems: [String] = []
        for device in report.devices {
            if case .service(let service) = device.route, service.openToAllLocalUsers {
                problems.append("\(service.name) at \(service.endpoint) accepts any local program, so location "
                    + "grants and levels do not bind; load config/nftables/devaccess-gpsd.nft")
                break
            }
        }
        for node in EngineChecks.receivers(report) where !node.openers.isEmpty {
            problems.append("\(node.path) is read without devaccessd by " + node.openers.map(\.message)
                .joined(separator: "; ") + " (a way around the gate: a udev rule can give the node a group of its "
                + "own and mode 0660)")
        }
        guard problems.isEmpty else { return Check(name: "location", status: .warn, message: problems.joined(separator: " | ")) }
        let endpoint = report.devices.compactMap { device -> String? in
            if case .service(let service) = device.route { return service.endpoint }
            return nil
        }.first ?? "?"
        return Check(name: "location", status: .ok, message: "gpsd at \(endpoint) is gated to devaccessd and no "
                         + "receiver node is readable without it")
    }

    /// Where policy `ask` can be put to a person on this machine (devaccessd(8), CONSENT).
    func consentChannel() -> Check {
        if let problem = TerminalInjection.problem() {
            return Check(name: "consent", status: .warn, message: problem + "; 'ask' falls back to the user's password")
        }
        if access("/run/systemd/seats", F_OK) == 0 {
            return Check(name: "consent", status: .ok, message: "'ask' is put on the login terminal of a text session "
                             + "(logind); graphical sessions fall back to the user's password")
        }
        return Check(name: "consent", status: .ok, message: "'ask' is put on the login terminal of the requester's "
                         + "session (its leader under root's login or sshd; no logind here)")
    }

    /// Whether the user's other processes can attach to a program `devaccess run` started
    /// (Yama's ptrace_scope). `setting`: the sysctl file, for tests.
    func ptrace(setting: String = PtraceScope.setting) -> Check {
        if let problem = PtraceScope.problem(setting: setting) {
            return Check(name: "ptrace", status: .warn, message: problem)
        }
        let scope = PtraceScope.value(setting: setting).map(String.init) ?? "?"
        return Check(name: "ptrace", status: .ok, message: "kernel.yama.ptrace_scope is \(scope): a user's other "
                         + "processes cannot attach to a program devaccess run started")
    }

    func ledger(_ stateDirectory: String) -> Check {
        let file = EngineChecks.ledgerPath(in: stateDirectory)
        if access(file, F_OK) != 0 && (errno == EACCES || errno == EPERM) {
            return Check(name: "ledger", status: .ok, message: "\(stateDirectory) is private (root only), as it should "
                             + "be; run doctor as root to verify the ledger")
        }
        guard access(file, F_OK) == 0 else {
            return Check(name: "ledger", status: .fail, message: "no ledger at \(file); devaccessd creates it at start")
        }
        guard access(file, R_OK) == 0 else {
            return Check(name: "ledger", status: .ok,
                         message: "\(file) is private (root only), as it should be; run doctor as root to verify it")
        }
        do throws(InterfaceError) {
            let verification = try EngineChecks.verifyLedger(file)
            guard verification.intact else {
                return Check(name: "ledger", status: .fail,
                             message: "\(file): \(verification.summary); see 'devaccess audit --verify'")
            }
            return Check(name: "ledger", status: .ok, message: "\(file): \(verification.summary)")
        } catch {
            return Check(name: "ledger", status: .fail, message: error.description)
        }
    }
}
