import DevAccessArguments
import Testing
@testable import DevAccessCLI
import DevAccessCore

struct ArgumentParserTests {
    let spec = CommandSpec(name: "status", abstract: "", usage: "", options: [
        OptionSpec(long: "user", short: "u", value: "USER", help: ""),
        OptionSpec(long: "json", short: nil, value: nil, help: ""),
    ], discussion: "")

    @Test func parsesFlagsValuesAndPositionals() throws {
        let parsed = try ArgumentParser.parse(["camera", "--user", "alice", "--json", "microphone"], for: spec)
        #expect(parsed.positionals == ["camera", "microphone"])
        #expect(parsed.value("user") == "alice")
        #expect(parsed.has("json"))
    }

    @Test func inlineValuesAndShortOptions() throws {
        #expect(try ArgumentParser.parse(["--user=bob"], for: spec).value("user") == "bob")
        #expect(try ArgumentParser.parse(["-u", "bob"], for: spec).value("user") == "bob")
    }

    @Test func doubleDashEndsOptions() throws {
        #expect(try ArgumentParser.parse(["--", "--json"], for: spec).positionals == ["--json"])
    }

    @Test func unknownOptionIsNamedWithASuggestion() {
        #expect(throws: UsageError(message: "unknown option '--jsn' (did you mean '--json'?)", command: "status")) {
            try ArgumentParser.parse(["--jsn"], for: spec)
        }
    }

    @Test func missingValueIsNamed() {
        #expect(throws: UsageError(message: "missing value for '--user USER'", command: "status")) {
            try ArgumentParser.parse(["--user"], for: spec)
        }
    }

    @Test func flagWithValueIsRefused() {
        #expect(throws: UsageError(message: "option '--json' takes no value", command: "status")) {
            try ArgumentParser.parse(["--json=yes"], for: spec)
        }
    }

    @Test func helpIsAlwaysAccepted() throws {
        #expect(try ArgumentParser.parse(["-h"], for: spec).has("help"))
        #expect(spec.helpText.contains("--help"))
    }
}

struct ConsoleTests {
    @Test func controlCharactersFromHardwareAreShownEscaped() {
        #expect(TerminalText.block("cam\u{1B}]0;pwned\u{07}\n") == "cam\\x1B]0;pwned\\x07\n")
        #expect(TerminalText.block("a\u{9B}31mb\tc") == "a\\x9B31mb\tc")
        #expect(TerminalText.block("Integrated Camera: Integrated C") == "Integrated Camera: Integrated C")
    }

    @Test func aFieldStaysOnItsLineAndBidiControlsAreShown() {
        #expect(TerminalText.field("a\nb\tc\rd") == "a\\nb\\tc\\rd")
        #expect(TerminalText.field("now\u{202E}gpj.exe") == "now\\x202Egpj.exe")
        #expect(TerminalText.block("one\ntwo\u{2028}") == "one\ntwo\\x2028")
        #expect(TerminalText.field("Caméra intégrée") == "Caméra intégrée")
    }
}
