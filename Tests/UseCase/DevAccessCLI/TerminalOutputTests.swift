import Foundation
import Testing
import DevAccessTestSupport

/// What the real binary writes on a real terminal (a pseudo-terminal from openpty), with
/// NO_COLOR, and into a pipe: colour and symbols only on the terminal.
struct TerminalOutputTests {
    static let escape = "\u{1B}["

    func terminalEnvironment(_ fx: AdminFixture, _ extra: [String: String] = [:]) -> [String: String] {
        fx.environment.merging(["PATH": "/usr/bin:/bin", "TERM": "xterm", "TZ": "Europe/Berlin", "LANG": "C.UTF-8"])
        { _, new in new }.merging(extra) { _, new in new }
    }

    @Test func colourAndSymbolsOnATerminalOnly() throws {
        let fx = try AdminFixture("cliterm")
        try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name]).status == 0)
        let arguments = ["status", "--user", fx.alice.name]

        let terminal = try PseudoTerminalRun.run(TestProcess.devaccessBinary, arguments,
                                                 environment: terminalEnvironment(fx))
        #expect(terminal.status == 0, "\(terminal.stderr)")
        #expect(terminal.stdout.contains("\u{1B}[32m●\u{1B}[0m camera      \u{1B}[32mauthorized\u{1B}[0m"),
                "\(terminal.stdout.debugDescription)")
        #expect(terminal.stdout.contains("\u{1B}[32m✓\u{1B}[0m \u{1B}[32musable\u{1B}[0m"), "\(terminal.stdout.debugDescription)")

        let noColor = try PseudoTerminalRun.run(TestProcess.devaccessBinary, arguments,
                                                environment: terminalEnvironment(fx, ["NO_COLOR": "1"]))
        #expect(noColor.status == 0)
        #expect(!noColor.stdout.contains(Self.escape) && !noColor.stdout.contains("●"), "\(noColor.stdout.debugDescription)")
        #expect(noColor.stdout.contains("camera      authorized"), "\(noColor.stdout)")

        let never = try PseudoTerminalRun.run(TestProcess.devaccessBinary, arguments + ["--color=never"],
                                              environment: terminalEnvironment(fx))
        #expect(!never.stdout.contains(Self.escape), "\(never.stdout.debugDescription)")

        let piped = try fx.run(arguments, extra: ["TZ": "Europe/Berlin"])
        #expect(piped.status == 0)
        #expect(!piped.stdout.contains(Self.escape) && !piped.stdout.contains("●") && !piped.stdout.contains("✓"),
                "\(piped.stdout.debugDescription)")
        // The same text as NO_COLOR on the terminal: only the styling differs.
        #expect(piped.stdout == noColor.stdout, "pipe:\n\(piped.stdout)\nterminal, NO_COLOR:\n\(noColor.stdout)")

        let forced = try fx.run(arguments + ["--color", "always"])
        #expect(forced.stdout.contains("\u{1B}[32mauthorized"), "\(forced.stdout.debugDescription)")
        #expect(try fx.run(arguments + ["--color", "rainbow"]).status == 64)
    }

    @Test func grantsAreToldInLocalTimeWithTheTimeLeftAndJSONStaysUTC() throws {
        let fx = try AdminFixture("clitime")
        try fx.camera("video0")
        let end = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 / 60).rounded(.down) * 60 + 3 * 86_400)
        let until = ISO8601DateFormatter().string(from: end)
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name, "--until", until]).status == 0)
        // What a calendar in Berlin says for that moment; the zone's abbreviation (CET in
        // winter, CEST in summer) from the C library's tz database, as devaccess shows it.
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "Europe/Berlin")
        let sameYear = Calendar(identifier: .gregorian).component(.year, from: end)
            == Calendar(identifier: .gregorian).component(.year, from: Date())
        formatter.dateFormat = sameYear ? "EEE d MMM HH:mm" : "d MMM yyyy HH:mm"
        let pattern = "until " + NSRegularExpression.escapedPattern(for: formatter.string(from: end))
            + " CES?T, 2d23h left"
        let berlin = ["TZ": "Europe/Berlin"]

        let status = try fx.run(["status", "camera", "--user", fx.alice.name], extra: berlin)
        #expect(status.stdout.range(of: "grant 1 allows .*" + pattern, options: .regularExpression) != nil,
                "\(pattern)\n\(status.stdout)")
        #expect(!status.stdout.contains(until), "\(status.stdout)")
        let list = try fx.run(["list"], extra: berlin)
        #expect(list.stdout.range(of: pattern, options: .regularExpression) != nil, "\(pattern)\n\(list.stdout)")

        // Machine formats stay UTC ISO 8601.
        let json = try fx.run(["list", "--json"], extra: berlin)
        #expect(json.stdout.contains("\"expires\" : \"\(until)\""), "\(json.stdout)")
        let statusJSON = try fx.run(["status", "camera", "--user", fx.alice.name, "--json"], extra: berlin)
        #expect(statusJSON.stdout.contains("until \(until)"), "\(statusJSON.stdout)")
    }

    /// A pager that marks every line it shows, so the test sees what went through it.
    static let markingPager = "sed 's/^/paged: /'"

    @Test func longListsGoThroughThePagerOnATerminalOnly() throws {
        let fx = try AdminFixture("clipager")
        try fx.camera("video0")
        #expect(try fx.run(["grant", "camera", "--user", fx.alice.name]).status == 0)
        #expect(try fx.run(["revoke", "camera", "--user", fx.alice.name]).status == 0)
        func terminal(_ arguments: [String], _ extra: [String: String]) throws -> ProcessOutput {
            // --offline where AdminFixture.run adds it: no devaccessd here.
            try PseudoTerminalRun.run(TestProcess.devaccessBinary, AdminFixture.offline(arguments),
                                      environment: terminalEnvironment(fx, extra))
        }
        let paged = try terminal(["list", "--all"], ["DEVACCESS_PAGER": Self.markingPager])
        #expect(paged.status == 0, "\(paged.stderr)")
        let lines = paged.stdout.split(separator: "\n")
        #expect(lines.count == 2 && lines.allSatisfy { $0.hasPrefix("paged: ") }, "\(paged.stdout)")
        #expect(paged.stdout.contains("paged: ID"), "\(paged.stdout)")

        let viaPAGER = try terminal(["list", "--all"], ["PAGER": Self.markingPager])
        #expect(viaPAGER.stdout.hasPrefix("paged: ID"), "\(viaPAGER.stdout)")
        let audit = try terminal(["audit"], ["PAGER": Self.markingPager])
        #expect(audit.status == 0, "\(audit.stderr)")
        #expect(audit.stdout.split(separator: "\n").count > 2, "\(audit.stdout)")
        #expect(audit.stdout.split(separator: "\n").allSatisfy { $0.hasPrefix("paged: ") }, "\(audit.stdout)")

        for (arguments, extra) in [(["list", "--all", "--no-pager"], ["PAGER": Self.markingPager]),
                                   (["audit", "--no-pager"], ["PAGER": Self.markingPager]),
                                   (["list", "--all"], ["DEVACCESS_PAGER": "", "PAGER": Self.markingPager])] {
            let plain = try terminal(arguments, extra)
            #expect(plain.status == 0, "\(arguments): \(plain.stderr)")
            let header = arguments[0] == "list" ? "ID " : "#  "
            #expect(plain.stdout.hasPrefix(header) && !plain.stdout.contains("paged: "), "\(arguments) \(extra): \(plain.stdout)")
        }
        // Never into a pipe.
        for arguments in [["list", "--all"], ["audit"]] {
            let piped = try fx.run(arguments, extra: ["PAGER": Self.markingPager, "DEVACCESS_PAGER": Self.markingPager])
            #expect(piped.status == 0 && !piped.stdout.isEmpty && !piped.stdout.contains("paged: "), "\(piped.stdout)")
        }
    }
}
