import Foundation
import Glibc
import DevAccessSystem
import DevAccessLedger

/// The process a `once` grant lasts for: "for as long as the process that asked lives".
///
/// A library client asks for itself: the peer. The `devaccess` CLI asks for whoever ran
/// it (it exits right after the answer): the peer's parent, read from /proc by the broker,
/// never from the message. The CLI is recognised by its executable: the `devaccess` next
/// to devaccessd's own (or in `../bin` when devaccessd is in `sbin`).
enum RequestHolder {
    /// The executables taken for the CLI, resolved once.
    static let cliPrograms: Set<String> = {
        guard let daemon = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return [] }
        let directory = URL(fileURLWithPath: daemon).deletingLastPathComponent()
        let candidates = [directory.appendingPathComponent("devaccess"),
                          directory.deletingLastPathComponent().appendingPathComponent("bin/devaccess")]
        return Set(candidates.compactMap { url in
            let path = url.standardizedFileURL.path
            guard let resolved = realpath(path, nil) else { return nil }
            defer { free(resolved) }
            return String(cString: resolved)
        })
    }()

    /// The holder and its name for people ("/usr/bin/bash (pid 812)"); nil when the process
    /// that asked is gone already (then nothing is granted `once`).
    static func find(_ peer: Peer) -> (holder: ProcessHolder, name: String)? {
        guard let bootID = ProcessTable.bootID(), let own = ProcessTable.entry(peer.pid) else { return nil }
        var pid = peer.pid
        var entry = own
        if let program = peer.program, cliPrograms.contains(program) {
            // The parent, checked against a pid reused between the two reads: it started no
            // later than its child, and is still the child's parent afterwards.
            guard own.parent > 1, let parent = ProcessTable.entry(own.parent), parent.startTicks <= own.startTicks,
                  ProcessTable.entry(peer.pid)?.parent == own.parent else { return nil }
            pid = own.parent
            entry = parent
        }
        guard !entry.hasExited else { return nil }
        let name = pid == peer.pid ? "\(peer.program ?? "the program") (pid \(pid))" : "\(executable(pid)) (pid \(pid))"
        return (ProcessHolder(pid: pid, startTicks: entry.startTicks, bootID: bootID), name)
    }

    private static func executable(_ pid: Int32) -> String {
        if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe") { return path }
        return (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
    }
}
