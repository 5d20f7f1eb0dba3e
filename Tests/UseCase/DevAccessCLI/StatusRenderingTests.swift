import DevAccessArguments
import DevAccessCore
import DevAccessSystem
import Foundation
import Testing
@testable import DevAccessCLI

/// `status` text: the default at a glance, the verbose form with every node, facts once,
/// colour only when styled (OutputStyle decides; its terminal behaviour: TerminalOutputTests).
struct StatusRenderingTests {
    let user = UserIdentity(uid: 1000, name: "vmuser", primaryGID: 1000, groups: [])
    let noLedger = Reason(.ledger, "no ledger at /var/lib/devaccess/ledger.db: nothing has been decided")
    /// 2026-12-01 16:02:00 UTC.
    let time = HumanTime(now: 1_796_140_920, zone: .fixed(offsetSeconds: 3600, abbreviation: "CET"))

    func camera(_ index: Int, usable: Bool) -> DeviceStatus {
        let device = Device(permission: .camera, id: "camera:platform-vivid.\(index)-video-index0",
                            name: "vivid-00\(index)-vid-cap",
                            nodes: [DeviceNode(path: "/dev/video\(index * 4)", role: "capture", required: .readWrite,
                                               state: .unusable("test"))])
        return DeviceStatus(device: device, nodes: [], usable: usable)
    }

    var statuses: [PermissionStatus] {
        [PermissionStatus(permission: .camera, status: .authorized,
                          devices: [camera(0, usable: true), camera(1, usable: true)],
                          reasons: [Reason(.summary, "vmuser can use all 2 camera device(s)"),
                                    Reason(.access, "/dev/video0 (root:video 0660): vmuser can open it readwrite"),
                                    Reason(.access, "/dev/video4 (root:video 0660): vmuser can open it readwrite"),
                                    Reason(.skipped, "/dev/radio0: a radio node, not a video node"),
                                    Reason(.ledger, "grant 3 allows vmuser camera on every device (until "
                                        + "2026-12-01T17:00:00Z; decided by root (0) via admin on 2026-12-01T15:00:00Z)"),
                                    noLedger]),
         PermissionStatus(permission: .microphone, status: .notDetermined, devices: [],
                          reasons: [Reason(.summary, "vmuser cannot open any microphone device"),
                                    Reason(.probe, "card 1 (Loopback): permission denied"),
                                    Reason(.drift, "grant 4 allows it, /dev/snd/pcmC0D0c has no entry"), noLedger],
                          drift: [Reason(.drift, "grant 4 allows it, /dev/snd/pcmC0D0c has no entry")])]
    }

    @Test func theDefaultHasOneLinePerPermissionAndDeviceAndSaysFactsOnce() {
        let text = StatusRendering(user: user, statuses: statuses, gate: nil, time: time).summary().rendered(.plain)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        #expect(lines == [
            "user vmuser (uid 1000); no ledger at /var/lib/devaccess/ledger.db: nothing has been decided",
            "camera      authorized     vmuser can use all 2 camera device(s)",
            "  usable  vivid-000-vid-cap  platform-vivid.0-video-index0",
            "  usable  vivid-001-vid-cap  platform-vivid.1-video-index0",
            "    - grant 3 allows vmuser camera on every device (until 18:00 CET, 58m left; decided by root (0) "
                + "via admin on 16:00 CET)",
            "microphone  notDetermined  vmuser cannot open any microphone device",
            "    ! drift: grant 4 allows it, /dev/snd/pcmC0D0c has no entry",
        ], "\(text)")
    }

    @Test func theVerboseFormHasEveryNodeAndTheNodesLeftOut() {
        let text = StatusRendering(user: user, statuses: statuses, gate: nil, time: time).verbose().rendered(.plain)
        for expected in ["    - /dev/video0 (root:video 0660): vmuser can open it readwrite",
                         "    - /dev/video4 (root:video 0660): vmuser can open it readwrite",
                         "    - /dev/radio0: a radio node, not a video node",
                         "    - card 1 (Loopback): permission denied"] {
            #expect(text.contains(expected + "\n"), "\(expected)\n\(text)")
        }
        #expect(text.components(separatedBy: "nothing has been decided").count == 2, "the fact once: \(text)")
        #expect(text.components(separatedBy: "! drift:").count == 2, "drift once, not again as a reason: \(text)")
    }

    @Test func oneFactOfOnePermissionStaysWithIt() {
        let one = [statuses[1]]
        let text = StatusRendering(user: user, statuses: one, gate: nil, time: time).summary().rendered(.plain)
        #expect(text.hasPrefix("user vmuser (uid 1000)\n"), "\(text)")
        #expect(text.contains("    - no ledger at /var/lib/devaccess/ledger.db: nothing has been decided\n"), "\(text)")
    }

    @Test func coloursAndSymbolsOnlyWhenStyled() {
        let rendering = StatusRendering(user: user, statuses: statuses, gate: nil, time: time)
        let plain = rendering.summary().rendered(.plain)
        #expect(!plain.contains("\u{1B}") && !plain.contains("●") && !plain.contains("✓"))
        let styled = rendering.summary().rendered(OutputStyle(styled: true))
        #expect(styled.contains("\u{1B}[32m●\u{1B}[0m camera      \u{1B}[32mauthorized\u{1B}[0m     "), "\(styled)")
        #expect(styled.contains("\u{1B}[33mnotDetermined\u{1B}[0m"), "\(styled)")
        #expect(styled.contains("  \u{1B}[32m✓\u{1B}[0m \u{1B}[32musable\u{1B}[0m  vivid-000-vid-cap"), "\(styled)")
        #expect(styled.contains("\u{1B}[31m! drift:"), "\(styled)")
    }

    @Test func aDeniedPermissionsDevicesAreDeniedInRed() {
        let denied = PermissionStatus(permission: .camera, status: .denied, devices: [camera(0, usable: true)],
                                      reasons: [Reason(.ledger, "vmuser is denied camera: grant 7 (deny, always)")])
        let rendering = StatusRendering(user: user, statuses: [denied], gate: nil, time: time)
        #expect(rendering.summary().rendered(.plain).contains("  denied  vivid-000-vid-cap  platform-vivid.0-video-index0\n"))
        #expect(rendering.summary().rendered(OutputStyle(styled: true)).contains("\u{1B}[31m✗\u{1B}[0m \u{1B}[31mdenied"))
    }

    @Test func hardwareTextCannotBringItsOwnEscapes() {
        var hostile = statuses[0]
        hostile.devices[0].device.name = "cam\u{1B}[2J\nfake line"
        let styled = StatusRendering(user: user, statuses: [hostile], gate: nil, time: time).summary()
            .rendered(OutputStyle(styled: true))
        #expect(!styled.contains("\u{1B}[2J") && !styled.contains("\nfake line"), "\(styled)")
        #expect(styled.contains("cam\\x1B[2J\\nfake line"), "\(styled)")
    }

    /// A reason carries text from outside (gpsd's ERROR message, a receiver's path, a user
    /// name): a newline in it must not start a line of the attacker's in the default, the
    /// verbose or the gate form, plain or styled.
    @Test func aNewlineInAReasonDoesNotMakeALine() {
        var hostile = statuses[0]
        hostile.reasons[0] = Reason(.summary, "x\n● camera      authorized     forged")
        hostile.reasons.append(Reason(.access, "/dev/video9: y\r\n  - forged node line"))
        let rendering = StatusRendering(user: user, statuses: [hostile], gate: nil, time: time)
        for text in [rendering.summary(), rendering.verbose()] {
            for style in [OutputStyle(styled: false), OutputStyle(styled: true)] {
                let shown = text.rendered(style)
                #expect(!shown.contains("\n● camera") && !shown.contains("\n  - forged"), "\(shown)")
                #expect(shown.contains("x\\n● camera"), "shown escaped, on its line: \(shown)")
            }
        }
    }

    /// The devices list and the audit summary's rows hold text from hardware, from gpsd's
    /// port and from program paths: none of it starts a line of its own.
    @Test func devicesAndAuditRowsKeepOutsideTextOnItsLine() {
        let fake = Device(permission: .location, id: "location:gpsd:/dev/x\nlocation:", name: "GPS\n  forged",
                          driver: "u-blox\r\nforged", nodes: [], details: ["gpsdVersion": "3.25\nforged: yes"])
        let listed = TableOutput.devices([AdapterReport(permission: .location, devices: [fake],
                                                        notes: [Reason(.probe, "n\nforged")]),
                                          AdapterReport(permission: .camera, devices: [],
                                                        unavailableReason: "why\nforged")])
        #expect(!listed.contains("\nforged") && !listed.contains("\n  forged") && !listed.contains("\nlocation:"),
                "\(listed)")
        let rows = SummaryRendering.align([["PROGRAM", "EVENTS"], ["/tmp/x\nroot (0)  9", "1"]])
        #expect(rows.split(separator: "\n").count == 2, "\(rows)")
    }

    @Test func colorChoiceFollowsTheTerminalNoColorAndTheOption() throws {
        func style(_ color: String?, noColor: String? = nil, term: String? = "xterm", tty: Bool) throws -> Bool {
            var arguments = ParsedArguments()
            if let color { arguments.values["color"] = color }
            var environment: [String: String] = [:]
            if let noColor { environment["NO_COLOR"] = noColor }
            if let term { environment["TERM"] = term }
            arguments.environment = ProcessEnvironment(environment)
            return try OutputStyle.resolve(arguments, command: "status", isTerminal: tty).styled
        }
        #expect(try style(nil, tty: true))
        #expect(try !style(nil, tty: false), "never in a pipe")
        #expect(try !style(nil, noColor: "1", tty: true))
        #expect(try style(nil, noColor: "", tty: true), "an empty NO_COLOR does not count (no-color.org)")
        #expect(try !style(nil, term: "dumb", tty: true))
        #expect(try style("always", noColor: "1", tty: false))
        #expect(try !style("never", tty: true))
        #expect(throws: UsageError.self) { try style("sometimes", tty: true) }
    }

    @Test func thePagerIsChosenFromTheEnvironment() {
        func command(_ environment: [String: String]) -> String? {
            Pager.command(environment: ProcessEnvironment(environment))
        }
        #expect(command([:]) == "less -FRX")
        #expect(command(["PAGER": "more"]) == "more")
        #expect(command(["DEVACCESS_PAGER": "most", "PAGER": "more"]) == "most")
        #expect(command(["PAGER": ""]) == nil, "set but empty: no pager")
        #expect(command(["DEVACCESS_PAGER": "", "PAGER": "more"]) == nil)
        #expect(command(["DEVACCESS_PAGER": " "]) == nil)
    }
}
