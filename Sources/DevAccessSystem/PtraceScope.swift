import Glibc

/// Whether another process of the same user can attach to a program `devaccess run` started
/// (ptrace, /proc/PID/mem, pidfd_getfd) and so use the devices opened for it: Yama's
/// ptrace_scope 1 or more confines that to the program's own ancestors, and devaccessd,
/// which starts it, is not the user's.
public enum PtraceScope {
    public static let setting = "/proc/sys/kernel/yama/ptrace_scope"

    /// The scope in force: nil when Yama is not active (the setting does not exist).
    public static func value(setting path: String = setting) -> Int? {
        guard let file = try? FileDescriptor.open(path, O_RDONLY | O_CLOEXEC) else { return nil }
        let fd = file.rawValue
        var buffer = [UInt8](repeating: 0, count: 16)
        guard case .success(let count) = valueOrErrno({ read(fd, &buffer, buffer.count) }), count > 0 else { return nil }
        return Int(String(decoding: buffer[0..<count].filter { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self))
    }

    /// Why a program started by `devaccess run` is not shielded from its user's other
    /// processes, or nil when it is.
    public static func problem(setting path: String = setting) -> String? {
        let risk = "another process of the same user can ptrace a program started by devaccess run and use its "
            + "devices"
        guard let scope = value(setting: path) else {
            return "Yama is absent (no \(path)): \(risk); set kernel.yama.ptrace_scope=1 (or boot with Yama: "
                + "lsm=...,yama)"
        }
        guard scope >= 1 else {
            return "kernel.yama.ptrace_scope is \(scope): \(risk); set kernel.yama.ptrace_scope=1 "
                + "(sysctl -w kernel.yama.ptrace_scope=1, and in /etc/sysctl.d to keep it)"
        }
        return nil
    }
}
