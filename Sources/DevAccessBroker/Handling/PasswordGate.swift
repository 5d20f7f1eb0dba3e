import Synchronization

/// Who may have a password checked now, per uid, across every request and connection:
/// one check at a time, and after each wrong password a wait before the next that
/// doubles (`first`, 2×`first`, … up to `cap`) until a right password resets it. Kept in
/// the daemon's memory only; pam_faillock (config/pam.d/devaccess) keeps its own count
/// across restarts.
final class PasswordGate: Sendable {
    enum Turn: Sendable, Equatable {
        /// Check now; the uid's check is in flight until `finish`.
        case go
        /// Another check of this uid runs.
        case inFlight
        /// `failures` wrong passwords in a row: no check for `wait` yet.
        case backingOff(Duration, failures: Int)
    }

    private struct Record {
        var failures = 0
        var notBefore: ContinuousClock.Instant
        var inFlight = false
    }

    let first: Duration
    let cap: Duration
    /// A uid with no wrong password for this long starts over (and its record is dropped).
    let forgetAfter: Duration
    private let records = Mutex<[UInt32: Record]>([:])

    init(first: Duration = .seconds(1), cap: Duration = .seconds(300), forgetAfter: Duration = .seconds(900)) {
        self.first = max(first, .milliseconds(1))
        self.cap = max(cap, self.first)
        self.forgetAfter = max(forgetAfter, self.cap)
    }

    /// The wait after `failures` wrong passwords in a row.
    func delay(afterFailures failures: Int) -> Duration {
        guard failures > 0 else { return .zero }
        var wait = first
        for _ in 1..<min(failures, 64) where wait < cap { wait *= 2 }
        return min(wait, cap)
    }

    /// Whether `uid` may start a check now; `.go` marks it in flight.
    func take(_ uid: UInt32, now: ContinuousClock.Instant = .now) -> Turn {
        records.withLock { records in
            var record = current(uid, in: &records, now: now)
            if record.inFlight { return .inFlight }
            if now < record.notBefore { return .backingOff(record.notBefore - now, failures: record.failures) }
            record.inFlight = true
            records[uid] = record
            return .go
        }
    }

    /// The wait `uid` faces now, without taking a turn (zero when none).
    func waiting(_ uid: UInt32, now: ContinuousClock.Instant = .now) -> (wait: Duration, failures: Int) {
        records.withLock { records in
            let record = current(uid, in: &records, now: now)
            return (max(.zero, record.notBefore - now), record.failures)
        }
    }

    /// Ends `uid`'s check: `accepted` true resets the back-off, false doubles it, nil
    /// (PAM could not check) leaves it as it was.
    func finish(_ uid: UInt32, accepted: Bool?, now: ContinuousClock.Instant = .now) {
        records.withLock { records in
            var record = current(uid, in: &records, now: now)
            record.inFlight = false
            switch accepted {
            case true?:
                records[uid] = nil
                return
            case false?:
                record.failures += 1
                record.notBefore = now + delay(afterFailures: record.failures)
            case nil:
                break
            }
            records[uid] = record
        }
    }

    /// `uid`'s record, forgotten when it is old; old records of others are dropped too
    /// once there are many (memory stays bounded whatever uids come and go).
    private func current(_ uid: UInt32, in records: inout [UInt32: Record],
                         now: ContinuousClock.Instant) -> Record {
        if records.count > 1024 {
            records = records.filter { $0.value.inFlight || now - $0.value.notBefore < forgetAfter }
        }
        guard let record = records[uid], record.inFlight || now - record.notBefore < forgetAfter else {
            return Record(notBefore: now)
        }
        return record
    }
}
