/// The environment `devaccess run` hands the program it starts.
///
/// `Program=` rules and prompts name the file devaccess executes; that name only says what
/// code runs if the caller's environment cannot make the program load other code. Lists of
/// what to drop always miss one (libasound alone reads ALSA_PLUGIN_DIR,
/// ALSA_MIXER_SIMPLE_MODULES, ALSA_CONFIG_UCM2), so, as sudo's env_reset and env_keep, only
/// the variables listed in `kept` reach the program, each with its value checked where a
/// value could make it load code (`acceptable`). Everything else goes.
///
/// What no list can stop: a program that loads code from the user's own files by design
/// (~/.asoundrc `lib`, GStreamer's user plugin directory, Python's user site, PipeWire
/// client modules from the user's configuration), or a program that runs another by name
/// through PATH (a `#!/usr/bin/env` script). docs/security.md ("devaccess run: what a program
/// grant cannot close") says so for users and administrators.
public enum LaunchEnvironment {
    /// A name matched exactly, or every name starting with a prefix.
    public enum Rule: Sendable, Hashable {
        case name(String)
        case prefix(String)

        /// Byte-wise, as libc and the loader compare (Swift's String == is Unicode equivalence).
        func matches(_ variable: ArraySlice<UInt8>) -> Bool {
            switch self {
            case .name(let name): return variable.elementsEqual(name.utf8)
            case .prefix(let prefix): return variable.starts(with: prefix.utf8)
            }
        }
    }

    /// The one list of variables the program gets (the rest is removed).
    public static let kept: [Rule] = [
        // Who and where: the program runs as the caller, for the caller.
        .name("HOME"), .name("USER"), .name("LOGNAME"), .name("PATH"), .name("PWD"), .name("TMPDIR"),
        // The terminal.
        .name("TERM"), .name("COLORTERM"), .name("COLUMNS"), .name("LINES"), .name("NO_COLOR"),
        // Language and time (a locale is a name, never a path: `acceptable`).
        .name("LANG"), .name("LANGUAGE"), .prefix("LC_"), .name("TZ"),
        // The session: display, seat, runtime directory, the session bus.
        .name("DISPLAY"), .name("XAUTHORITY"), .name("WAYLAND_DISPLAY"), .name("XDG_RUNTIME_DIR"),
        .name("XDG_SESSION_TYPE"), .name("XDG_SESSION_CLASS"), .name("XDG_SESSION_ID"), .name("XDG_SESSION_DESKTOP"),
        .name("XDG_CURRENT_DESKTOP"), .name("XDG_SEAT"), .name("XDG_VTNR"), .name("DBUS_SESSION_BUS_ADDRESS"),
    ]

    /// Whether a kept variable's value is one the program may get. A D-Bus address can name a
    /// program to run (`unixexec:`) or a socket of someone else's: only `unix:path=` under the
    /// user's runtime directory. A locale with a '/' is a path glibc loads from (its secure
    /// mode refuses those too).
    static func acceptable(_ name: ArraySlice<UInt8>, _ value: ArraySlice<UInt8>, uid: UInt32) -> Bool {
        if name.elementsEqual("DBUS_SESSION_BUS_ADDRESS".utf8) {
            let prefix = Array("unix:path=/run/user/\(uid)/".utf8)
            guard value.starts(with: prefix) else { return false }
            let path = value.dropFirst(prefix.count)
            let safe = path.allSatisfy { byte in
                (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                    || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || Array("/._-".utf8).contains(byte)
            }
            return safe && !path.isEmpty && !path.split(separator: UInt8(ascii: "/")).contains { $0.elementsEqual("..".utf8) }
        }
        if name.elementsEqual("LANG".utf8) || name.elementsEqual("LANGUAGE".utf8) || name.starts(with: "LC_".utf8) {
            return !value.contains(UInt8(ascii: "/"))
        }
        return true
    }

    /// The entries of `env` that `kept` lists with an acceptable value for `uid`, once each
    /// (the first: glibc's getenv finds the first). `removed` names what went (unlisted,
    /// refused values, repeats, entries without '=' or a name), in order, each name once,
    /// never a value (values may be secrets).
    public static func clean(_ env: [String], uid: UInt32) -> (kept: [String], removed: [String]) {
        var kept: [String] = []
        var removed: [String] = []
        var seen = Set<ArraySlice<UInt8>>()
        var reported = Set<ArraySlice<UInt8>>()
        for entry in env {
            let bytes = Array(entry.utf8)[...]
            guard let equals = bytes.firstIndex(of: UInt8(ascii: "=")), equals != bytes.startIndex else {
                if reported.insert(bytes).inserted { removed.append(entry) }
                continue
            }
            let name = bytes[..<equals]
            let first = seen.insert(name).inserted
            if first && Self.kept.contains(where: { $0.matches(name) })
                && acceptable(name, bytes[(equals + 1)...], uid: uid) {
                kept.append(entry)
            } else if reported.insert(name).inserted {
                removed.append(String(decoding: name, as: UTF8.self))
            }
        }
        return (kept, removed)
    }
}
