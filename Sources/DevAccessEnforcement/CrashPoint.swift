import Glibc

/// TEST-ONLY crash hooks for the kill -9 tests. In DEBUG builds, when
/// `DEVACCESS_TEST_CRASH_AT` (read by the executable's main, passed in `Enforcer.testCrashAt`)
/// names a point, the process ends there with `_exit(137)` (what
/// SIGKILL leaves), without unwinding or closing anything, to prove that reconcile
/// converges from a crash on either side of an ACL edit. Release builds compile this to
/// nothing, so the variable has no effect there.
enum CrashPoint: String {
    /// Just before an ACL edit: the ledger holds the intent (grant, record, or an ended grant).
    case afterLedgerWrite = "after-ledger-write"
    /// Just after an ACL edit, before the ledger write that follows it.
    case afterACLEdit = "after-acl-edit"

    @inline(__always)
    func hit(_ armed: String?) {
        #if DEBUG
        if armed == rawValue { _exit(137) }
        #endif
    }
}
