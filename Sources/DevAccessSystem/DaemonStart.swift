import Glibc

/// How to start or stop devaccessd on this machine, for the messages that ask for it:
/// systemctl where systemd runs (systemd itself makes /run/systemd/system at boot,
/// sd_booted(3)), else devaccessd started by hand, its log kept out of the terminal.
public enum DaemonStart {
    public static let systemdRuntime = "/run/systemd/system"

    public static func advice(systemdRuntime: String = systemdRuntime) -> String {
        access(systemdRuntime, F_OK) == 0
            ? "start it: sudo systemctl start devaccessd"
            : "start it (no systemd here): sudo sh -c 'devaccessd 2>>/var/log/devaccessd.log &'"
    }

    public static func stopAdvice(systemdRuntime: String = systemdRuntime) -> String {
        access(systemdRuntime, F_OK) == 0
            ? "stop devaccessd ('sudo systemctl stop devaccessd')"
            : "stop devaccessd ('sudo pkill -x devaccessd')"
    }
}
