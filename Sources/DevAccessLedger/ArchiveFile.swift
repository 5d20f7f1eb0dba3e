import FoundationEssentials
import Glibc
import DevAccessSystem

/// An audit archive: an SQLite file of its own holding events moved out of the ledger,
/// stored exactly as they were (same columns, same bytes, same hashes), and one
/// `archive_info` row saying which range it holds and the hashes at both ends.
enum ArchiveFile {
    /// `PRAGMA application_id` of an archive ("DVAR"), distinct from a ledger's.
    static let applicationID: Int32 = 0x4456_4152
    static let version: Int32 = 1
    /// Default names: `audit-archive-<UTC time>-<first>-<last>.db` in the state directory.
    static let namePrefix = "audit-archive-"

    static func defaultName(firstSeq: Int64, throughSeq: Int64, at time: Date) -> String {
        var seconds = time_t(time.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : String(value) }
        let stamp = "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))Z"
        return "\(namePrefix)\(stamp)-\(firstSeq)-\(throughSeq).db"
    }

    /// The archive's tables, created in the database attached as `archive`: the event
    /// table is the ledger's own (its `CREATE TABLE` as SQLite keeps it, `ledgerEvents`),
    /// so both always have the same columns, in canonical order.
    static func schema(ledgerEvents: String, archivePath: String) throws(LedgerError) -> String {
        let prefix = "CREATE TABLE audit_events"
        guard ledgerEvents.hasPrefix(prefix) else {
            throw .archive(path: archivePath, reason: "the ledger's audit_events table is not as expected: \(ledgerEvents.prefix(60))")
        }
        return "CREATE TABLE archive.audit_events" + ledgerEvents.dropFirst(prefix.count) + ";\n" + rest
    }

    private static let rest = """
        CREATE INDEX archive.audit_events_time ON audit_events (time_usec);
        CREATE TABLE archive.archive_info (
            id              INTEGER PRIMARY KEY CHECK (id = 1),
            first_seq       INTEGER NOT NULL,
            through_seq     INTEGER NOT NULL,
            events          INTEGER NOT NULL,
            first_prev_hash TEXT    NOT NULL,
            through_hash    TEXT    NOT NULL,
            before_usec     INTEGER NOT NULL,
            archived_usec   INTEGER NOT NULL,
            ledger_path     TEXT    NOT NULL
        );
        PRAGMA archive.application_id = \(applicationID);
        PRAGMA archive.user_version = \(version);
        """

    /// Creates the archive file, empty and 0600, so that SQLite opens a new database that
    /// nobody else has open. Refused: an existing file of any kind (a symlink included:
    /// archives are never overwritten), a directory that is a symlink, belongs to another
    /// user than root or this one, or that others may write without the sticky bit (they
    /// could swap the file between its creation and SQLite's open).
    static func create(_ path: String) throws(LedgerError) {
        guard !path.isEmpty, !path.contains("\0") else { throw .archiveTarget(path: path, reason: "it is not a path") }
        let directory = StateFiles.split(path).directory
        var info = stat()
        guard lstat(directory, &info) == 0 else {
            throw .archiveTarget(path: path, reason: "its directory: \(StateFiles.errnoText(errno))")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw .archiveTarget(path: path, reason: "\(directory) is not a directory (a symlink?)")
        }
        guard info.st_uid == 0 || info.st_uid == geteuid() else {
            throw .archiveTarget(path: path, reason: "\(directory) belongs to uid \(info.st_uid)")
        }
        if info.st_mode & 0o022 != 0 && info.st_mode & S_ISVTX == 0 {
            throw .archiveTarget(path: path, reason: "other users may change \(directory) (mode "
                + String(info.st_mode & 0o7777, radix: 8) + ")")
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, StateFiles.fileMode)
        guard fd >= 0 else {
            let failure = errno
            if failure == EEXIST {
                throw .archiveTarget(path: path, reason: "it exists (an archive is never overwritten or appended to)")
            }
            throw .archiveTarget(path: path, reason: StateFiles.errnoText(failure))
        }
        let created = FileDescriptor(owning: fd)
        // The umask may have removed bits; an archive holds every user's events: exactly 0600.
        guard fchmod(created.rawValue, StateFiles.fileMode) == 0 else {
            let failure = errno
            unlink(path)
            throw .archiveTarget(path: path, reason: "chmod 0600: \(StateFiles.errnoText(failure))")
        }
    }

    /// Removes an archive that was not completed (the ledger still holds its events).
    static func discard(_ path: String) {
        unlink(path)
        unlink(path + "-journal")
    }

    /// Makes the new file's directory entry durable before the ledger forgets the events.
    static func syncDirectory(of path: String) throws(LedgerError) {
        let directory = StateFiles.split(path).directory
        let opened: FileDescriptor
        do {
            opened = try .open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        } catch {
            throw .archive(path: path, reason: "opening its directory: \(StateFiles.errnoText(error.errno.rawValue))")
        }
        guard fsync(opened.rawValue) == 0 else { throw .archive(path: path, reason: "fsync of its directory: \(StateFiles.errnoText(errno))") }
    }
}
