import Glibc

/// How to start devaccessd on this machine, for the "cannot reach devaccessd" messages:
/// systemctl where systemd runs (systemd itself makes /run/systemd/system at boot,
/// sd_booted(3)), else devaccessd started by hand, its log kept out of the terminal.
enum DaemonStart {
    static let systemdRuntime = "/run/systemd/system"

    static func advice(systemdRuntime: String = systemdRuntime) -> String {
        access(systemdRuntime, F_OK) == 0
            ? "start it: sudo systemctl start devaccessd"
            : "start it (no systemd here): sudo sh -c 'devaccessd 2>>/var/log/devaccessd.log &'"
    }
}
