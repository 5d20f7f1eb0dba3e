import FoundationEssentials
import Glibc

/// Whether a program can push input into a terminal (`TIOCSTI`), which decides whether
/// an answer typed on a terminal can be trusted to come from a person.
public enum TerminalInjection {
    public static let setting = "/proc/sys/dev/tty/legacy_tiocsti"

    /// Why terminal input can be forged on this machine, or nil when it cannot.
    public static func problem(setting path: String = setting) -> String? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            return "this kernel lets any program type into a terminal (TIOCSTI, no dev.tty.legacy_tiocsti setting), "
                + "so an answer typed there may not come from a person"
        }
        guard text.trimmingWhitespace() == "0" else {
            return "dev.tty.legacy_tiocsti is 1: any program can type into a terminal (TIOCSTI), so an answer typed "
                + "there may not come from a person (sysctl -w dev.tty.legacy_tiocsti=0 turns that off)"
        }
        return nil
    }
}
