import DevAccessCore
import Glibc

extension ProcessEnvironment {
    /// This process's environment now, entry by entry from `environ`. Called once, by each
    /// executable's `main` (and the client library's public entry points, which are the
    /// "main" of a program that did not say where devaccessd is); everything else is
    /// passed the value (`make lint` checks).
    public static func current() -> ProcessEnvironment {
        ProcessEnvironment(entries: currentEntries())
    }

    /// `environ` as it is, in order (also what `devaccess run` builds its program's
    /// environment from: LaunchEnvironment).
    public static func currentEntries() -> [String] {
        var entries: [String] = []
        var cursor = environ
        while let entry = cursor.pointee {
            entries.append(String(cString: entry))
            cursor += 1
        }
        return entries
    }
}
