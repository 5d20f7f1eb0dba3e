import FoundationEssentials
import Glibc
import DevAccessCore
import DevAccessLedger
import DevAccessProtocol
import DevAccessEngine
import DevAccessInterface

/// Texts of prompts and results, in one place.
enum RequestText {
    /// "the camera", "the camera and the microphone", "the camera, the microphone and location".
    static func list(_ permissions: [Permission]) -> String {
        let names = permissions.map { $0 == .location ? "location" : "the \($0.rawValue)" }
        guard names.count > 1, let last = names.last else { return names.first ?? "nothing" }
        return names.dropLast().joined(separator: ", ") + " and " + last
    }

    /// "use the camera and know this computer's location to about 10 km (city)": what is
    /// asked, location with the level a grant would record.
    static func purpose(_ permissions: [Permission], location: LocationAsk?) -> String {
        guard let location, permissions.contains(.location) else { return "use \(list(permissions))" }
        let level = location.granted
        let knowing = level == .exact ? "know this computer's exact location (exact)"
            : "know this computer's location to \(level.approximately) (\(level.rawValue))"
        let others = permissions.filter { $0 != .location }
        return others.isEmpty ? knowing : "use \(list(others)) and \(knowing)"
    }

    /// The question, with what asks (the requester: for the CLI, the program that ran
    /// it), which devices and why.
    static func question(_ permissions: [Permission], term: String?, user: UserIdentity, peer: Peer,
                         requester: Requester, devices: [PromptDevice], reason: String?,
                         location: LocationAsk? = nil) -> String {
        // Everything but our own words comes from the requester or from hardware: one line
        // each, so none of it can draw lines of its own under the question.
        let line = { (text: String) in TerminalPrompt.oneLine(text) }
        var text = "Allow \(line(requester.described)) to \(purpose(permissions, location: location))"
            + (term.map { " \($0)" } ?? "") + "?\n"
        if let location, permissions.contains(.location), let cap = location.cappedBy {
            text += "  accuracy: \(location.asked.rawValue) was asked; the policy's \(cap) allows "
                + "\(location.granted.rawValue) at most\n"
        }
        text += "  requested by: \(line(user.name)) (uid \(user.uid)), process \(peer.pid)\n"
        if let cli = requester.cli {
            text += requester.isShell
                ? "  typed at: the shell above ran \(line(cli.path)) (pid \(cli.pid)): typed by a person, or run by a shell script\n"
                : "  through: \(line(cli.path)) (pid \(cli.pid)), which this program ran\n"
        }
        if let untrusted = requester.untrusted {
            text += "  note: \(line(untrusted)); rules for this program do not apply\n"
        }
        // The CLI is rarely what wants the camera: say what started it.
        if !peer.ancestry.isEmpty {
            text += "  started by: " + peer.ancestry.map(line).joined(separator: " <- ") + "\n"
        }
        if devices.isEmpty {
            text += "  devices: none present now; the decision applies to those that appear\n"
        } else {
            text += "  devices: " + devices.map { "\(line($0.name)) [\(line($0.id))]" }.joined(separator: ", ") + "\n"
        }
        text += "  reason: " + (reason.map { $0.isEmpty ? "(none given)" : line($0) } ?? "(none given)")
        return text
    }
}
