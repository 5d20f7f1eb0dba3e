import Foundation
import Glibc
import DevAccessCore
@testable import DevAccessLedger

/// A fresh directory under /tmp for one test, removed afterwards.
final class TemporaryLedgerDirectory: @unchecked Sendable {
    let path: String

    init() {
        var template = Array("/tmp/devaccess-ledger-XXXXXX".utf8CString)
        let made = mkdtemp(&template)
        precondition(made != nil, "mkdtemp failed: \(String(cString: strerror(errno)))")
        path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    var ledgerPath: String { path + "/ledger.db" }

    func file(_ name: String) -> String { path + "/" + name }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// Runs SQL on a ledger file through a separate raw SQLite connection, as an attacker or
/// an older devaccess would, bypassing the Ledger API.
func rawSQL(_ path: String, _ sql: String) throws {
    let db = try SQLiteDatabase.open(path: path, readOnly: false)
    try db.setBusyTimeout(milliseconds: 5000)
    try db.execute(sql)
}

/// The bytes and modification time of a file, to show it was not touched.
struct FileSnapshot: Equatable {
    var bytes: Data
    var modified: timespec

    init(_ path: String) throws {
        bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        var info = stat()
        guard stat(path, &info) == 0 else { throw CocoaError(.fileReadNoSuchFile) }
        modified = info.st_mtim
    }

    static func == (a: FileSnapshot, b: FileSnapshot) -> Bool {
        a.bytes == b.bytes && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
    }
}

func directoryEntries(_ path: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
}

let alice = Principal(uid: 1000, name: "alice")
let bob = Principal(uid: 1001, name: "bob")
let rootUser = Principal(uid: 0, name: "root")

/// A plain event for chain tests; `n` varies the content.
func sampleEvent(_ n: Int, time: Date = Date(timeIntervalSince1970: 1_800_000_000)) -> AuditEvent {
    AuditEvent(type: n.isMultiple(of: 2) ? .request : .decision, time: time.addingTimeInterval(Double(n)),
               actor: alice, subject: alice, permission: .camera, deviceID: "pci-0000:00:14.0-usb-0:1:1.0",
               deviceName: "Integrated Camera", program: "/usr/bin/cheese", nodePath: "/dev/video0",
               details: ["n": String(n), "note": "line one\nline \"two\""])
}

func openLedger(_ dir: TemporaryLedgerDirectory, mode: Ledger.OpenMode = .readWrite) throws(LedgerError) -> Ledger {
    try Ledger(path: dir.ledgerPath, mode: mode, journal: .disabled)
}

extension ChainVerification {
    var chainBreak: ChainBreak? {
        if case .broken(let chainBreak) = self { return chainBreak }
        return nil
    }
}
