import DevAccessLedger
import DevAccessSystem

/// Whether the process a `once` grant lasts for still runs, from /proc: the same pid, the
/// same start time, this boot, not exited. Any doubt ends the grant.
public enum ProcessLiveness {
    /// nil while it runs; otherwise why the grant's term is over, in one sentence.
    public static func gone(_ holder: ProcessHolder, bootID: String? = ProcessTable.bootID()) -> String? {
        guard let bootID, bootID == holder.bootID else {
            return "the process that asked (pid \(holder.pid)) ran before the machine was restarted"
        }
        guard let entry = ProcessTable.entry(holder.pid) else {
            return "the process that asked (pid \(holder.pid)) exited"
        }
        if entry.startTicks != holder.startTicks {
            return "the process that asked (pid \(holder.pid)) exited; the pid now names another process"
        }
        if entry.hasExited { return "the process that asked (pid \(holder.pid)) exited" }
        return nil
    }
}
