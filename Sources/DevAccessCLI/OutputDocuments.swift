import DevAccessCore
import DevAccessInterface
import DevAccessSystem

/// `monitor --json`'s location and switch lines (docs/json.md). Statuses, devices and
/// nodes have no document here: they print in the wire's encoding (StatusJSON, ModelCoding).

/// `monitor --json`'s location events.
struct LocationEventDocument: Encodable {
    var event: String
    var permission = "location"
    var device: String?
    var from: String?
    var to: String?
    var problem: String?
    var monotonicUsec = MonotonicClock.microseconds()

    init(event: String, device: String? = nil, from: String? = nil, to: String? = nil, problem: String? = nil) {
        self.event = event
        self.device = device
        self.from = from
        self.to = to
        self.problem = problem
    }

    /// `add location receiver /dev/ttyACM0`, `fix location /dev/ttyACM0: none -> 3d`, `location: ...`.
    var line: String {
        let path = TerminalText.field(device ?? "?")
        switch event {
        case "receiver-add": return "add location receiver \(path)"
        case "receiver-remove": return "remove location receiver \(path)"
        case "fix": return "fix location \(path): \(from ?? "?") -> \(to ?? "?")"
        default: return "location: " + TerminalText.field(problem ?? "unavailable")
        }
    }
}

/// `monitor --json`: a privacy switch changed: `"event": "switch"` beside the members of
/// the switch's state as `devaccess switch --json` lists it (`SwitchesDocument.State`).
struct SwitchEvent: Encodable {
    var state: SwitchesDocument.State

    private enum Key: String, CodingKey { case event }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode("switch", forKey: .event)
        try state.encode(to: encoder)
    }
}
