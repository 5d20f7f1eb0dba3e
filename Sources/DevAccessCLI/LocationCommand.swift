import DevAccessArguments
import FoundationEssentials
import Glibc
@_spi(CLI) import DevAccess
import DevAccessCore
import DevAccessSystem
import DevAccessInterface

/// `devaccess location`: where this computer is, as devaccessd serves it at your grant.
enum LocationCommand: Command {
    static let spec = CommandSpec(
        name: "location",
        abstract: "Print this computer's position, at the accuracy your location grant allows.",
        usage: "devaccess location [--accuracy LEVEL] [--wait DURATION] [--watch] [--json]",
        options: [accuracy, wait, watch, CommonOptions.json, BrokerOptions.socket],
        discussion: """
        devaccessd is the gpsd client: it asks gpsd and serves the position to you at the
        accuracy of your location grant ('devaccess request location --accuracy LEVEL').
        Levels, finest first: exact, street (about 100 m), neighborhood (about 1 km), city
        (about 10 km), country (about 300 km). Below exact the coordinates are the centre of
        a grid cell of that size (the same for every read, so averaging reads gains
        nothing); speed, track, climb and the altitude are left out. --accuracy asks for a
        coarser level than the grant; a finer one is refused.
        When gpsd has no fix yet, devaccessd waits for one up to --wait (default 5s, at
        most 30s). --watch asks again every second and prints each position that differs
        from the last (a coarse level changes only when the machine moves to another
        cell), until interrupted; gpsd's clients can stream from devaccessd's gpsd endpoint
        instead (gpspipe -w localhost:947).
        Exit codes: 0 printed, 6 no position (gpsd not running, no receiver, no fix within
        --wait; the message says which), 64 usage error, 69 devaccessd unreachable, 77 no
        location grant, or a level finer than the grant (audited).
        """)

    static let accuracy = OptionSpec(long: "accuracy", short: nil, value: "LEVEL",
        help: "exact, street, neighborhood, city or country (default: your grant's).")
    static let watch = OptionSpec(long: "watch", short: nil, value: nil,
        help: "Keep asking, once a second, and print each new position until interrupted.")
    static let wait = OptionSpec(long: "wait", short: nil, value: "DURATION",
        help: "How long to wait for a first fix: 0s to 30s (default 5s).")

    static func run(_ arguments: ParsedArguments, console: Console) async throws -> ExitCode {
        guard arguments.positionals.isEmpty else {
            throw UsageError(message: "location takes no arguments, got '\(arguments.positionals.joined(separator: " "))'",
                             command: spec.name)
        }
        var query = LocationQuery()
        if let text = arguments.value("accuracy") {
            do {
                query.accuracy = try LocationAccuracy.parse(text)
            } catch {
                throw UsageError(message: "\(error.description) for '--accuracy'", command: spec.name)
            }
        }
        if let text = arguments.value("wait") {
            let seconds: Int64
            do {
                seconds = text == "0" ? 0 : try DurationText.seconds(text)
            } catch {
                throw UsageError(message: "\(error.description) for '--wait'", command: spec.name)
            }
            guard seconds * 1000 <= LocationQuery.maxWait else {
                throw UsageError(message: "'--wait \(text)' is longer than 30s", command: spec.name)
            }
            query.waitMilliseconds = seconds * 1000
        }
        // Through the contract, as a program would ask: the document as devaccessd wrote it
        // (for --json), the failure as the contract says it (for the exit codes).
        let access: any DevAccessInterface = BrokerInterface(
            socketPath: try BrokerOptions.socketPath(arguments, command: spec.name), timeout: .seconds(30))
        guard arguments.has("watch") else {
            let document = try await AdminAccess.call(spec.name) { () throws(InterfaceError) in
                try await access.location(query)
            }
            console.out(arguments.has("json") ? try JSONOutput.encode(document) : text(document))
            return .success
        }
        // Watching: a position that did not change is not printed again; a problem is said
        // once until it changes; a refusal (no grant any more) ends the watch.
        var last: LocationDocument?
        var problem: String?
        while true {
            let answer: LocationDocument?
            do throws(InterfaceError) {
                answer = try await access.location(query)
            } catch {
                answer = nil
                switch error {
                case .unavailable, .unreachable, .brokerBusy:
                    if error.description != problem {
                        console.error("devaccess: \(error.description)")
                        problem = error.description
                    }
                default:
                    throw AdminAccess.failure(error, command: spec.name)
                }
            }
            if let document = answer {
                problem = nil
                if document.latitude != last?.latitude || document.longitude != last?.longitude
                    || document.fix != last?.fix || document.accuracy != last?.accuracy {
                    console.out(arguments.has("json") ? try JSONOutput.encodeLine(document) : text(document))
                    last = document
                }
            }
            try await Task.sleep(for: .seconds(1))
        }
    }

    /// `48.12°N 11.52°E ±10000 m (city: about 10 km; grant: exact)` and a line about the fix.
    static func text(_ document: LocationDocument) -> String {
        let level = LocationAccuracy(rawValue: document.accuracy) ?? .exact
        let digits = decimals(level)
        func angle(_ value: Double, _ positive: String, _ negative: String) -> String {
            DecimalText.fixed(abs(value), digits: digits) + "°" + (value < 0 ? negative : positive)
        }
        var first = angle(document.latitude, "N", "S") + " " + angle(document.longitude, "E", "W")
        if let eph = document.eph { first += " ±" + DecimalText.fixed(eph, digits: 0) + " m" }
        first += " (\(document.accuracy): \(document.approximately)"
            + (document.granted == document.accuracy ? ")" : "; grant: \(document.granted))")
        var second = "\(document.fix.uppercased()) fix"
        if let device = document.device { second += " from \(TerminalText.field(device))" }
        if let time = document.time { second += " at \(TerminalText.field(time))" }
        if let altitude = document.altitude { second += ", altitude " + DecimalText.fixed(altitude, digits: 0) + " m" }
        if let speed = document.speed { second += ", speed " + DecimalText.fixed(speed, digits: 1) + " m/s" }
        if let track = document.track { second += ", track " + DecimalText.fixed(track, digits: 0) + "°" }
        return first + "\n" + second
    }

    /// Enough decimals to show the cell's centre, not more (they would only look precise).
    static func decimals(_ level: LocationAccuracy) -> Int {
        switch level {
        case .exact: return 6
        case .street: return 4
        case .neighborhood: return 3
        case .city: return 2
        case .country: return 1
        }
    }
}
