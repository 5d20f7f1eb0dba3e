import FoundationEssentials
import Glibc

/// The ledger stores times as integer microseconds since the Unix epoch (UTC): exact,
/// sortable, the journal's own unit, and the same bytes every time they are hashed.
enum Timestamp {
    static func microseconds(_ date: Date) throws(LedgerError) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1_000_000).rounded()
        guard let micro = Int64(exactly: value) else {
            throw .invalidArgument("time \(date.timeIntervalSince1970) s is outside what the ledger can store")
        }
        return micro
    }

    static func date(_ microseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(microseconds) / 1_000_000)
    }
}
