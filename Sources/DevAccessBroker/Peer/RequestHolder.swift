import FoundationEssentials
import Glibc
import DevAccessSystem
import DevAccessLedger

/// The process a `once` grant lasts for: "for as long as the process that asked lives".
///
/// That is the requester (`Requester`): a library client asks for itself, the peer; the
/// `devaccess` CLI asks for whoever ran it (it exits right after the answer), the CLI's
/// parent, read from /proc by the broker, never from the message.
enum RequestHolder {
    /// The holder and its name for people ("/usr/bin/bash (pid 812)"); nil when the process
    /// that asked is gone already (then nothing is granted `once`).
    /// `shell`: the CLI's parent is a shell listed in /etc/shells (`isShell`).
    static func find(_ peer: Peer, requester: Requester) -> (holder: ProcessHolder, name: String, shell: Bool)? {
        // The process that connected, and no later one that was given its pid: without its
        // start time from the accept there is nothing to tie a `once` grant to.
        guard let bootID = ProcessTable.bootID(), let own = ProcessTable.entry(peer.pid),
              let connected = peer.identity, own.startTicks == connected.startTime else { return nil }
        var pid = peer.pid
        var entry = own
        if requester.cli != nil {
            // The parent, checked against a pid reused since `Requester` read it: it started
            // no later than its child, and is still the child's parent afterwards.
            guard requester.pid > 1, requester.pid == own.parent, let parent = ProcessTable.entry(requester.pid),
                  parent.startTicks <= own.startTicks, ProcessTable.entry(peer.pid)?.parent == requester.pid
            else { return nil }
            pid = requester.pid
            entry = parent
        }
        guard !entry.hasExited else { return nil }
        let program = requester.program ?? executable(pid)
        return (ProcessHolder(pid: pid, startTicks: entry.startTicks, bootID: bootID), "\(program) (pid \(pid))",
                requester.cli != nil && isShell(program))
    }

    /// Whether `program` is a shell listed in /etc/shells: a `once` grant of the shell a
    /// person typed `devaccess request` in lasts until they close it, and the prompt says
    /// so (wording only: the grant is the same).
    static func isShell(_ program: String) -> Bool {
        guard let listed = try? String(contentsOfFile: "/etc/shells", encoding: .utf8) else { return false }
        return listed.split(separator: "\n").contains { $0.trimmingWhitespace() == program }
    }

    private static func executable(_ pid: Int32) -> String {
        if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe") { return path }
        return (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?
            .trimmingWhitespace() ?? "?"
    }
}
