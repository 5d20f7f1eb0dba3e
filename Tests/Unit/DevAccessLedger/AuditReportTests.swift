import Foundation
import Testing
import DevAccessCore
@testable import DevAccessLedger

/// Report queries over a real ledger file, and the checkpoint reports verify from.
@Suite struct AuditReportTests {
    @Test func aCheckpointWalksOnlyWhatCameAfterItAndStillCatchesEditsThere() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        try ledger.append(contentsOf: (1...50).map { sampleEvent($0) })
        let first = try ledger.verifyFromCheckpoint()
        #expect(first.verification == .intact(count: 50) && first.from == nil)
        try ledger.append(contentsOf: (51...60).map { sampleEvent($0) })
        let second = try ledger.verifyFromCheckpoint()
        #expect(second.verification == .intact(count: 60) && second.from == 50)

        // An edit after the checkpoint (60) is caught by the short walk.
        try ledger.append(contentsOf: (61...70).map { sampleEvent($0) })
        try rawSQL(dir.ledgerPath, "UPDATE audit_events SET program = '/tmp/evil' WHERE seq = 65")
        let edited = try ledger.verifyFromCheckpoint()
        #expect(edited.from == 60 && edited.verification.chainBreak?.seq == 65, "\(edited)")
        #expect(edited.verification.chainBreak?.kind == .edited)
    }

    @Test func anEditOfTheCheckpointEventOrARemovalMakesTheWalkWholeAgain() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        try ledger.append(contentsOf: (1...30).map { sampleEvent($0) })
        #expect(try ledger.verifyFromCheckpoint().verification.isIntact)
        // The checkpoint event's fields change, its stored hash does not: whole walk, found.
        try rawSQL(dir.ledgerPath, "UPDATE audit_events SET subject_name = 'mallory' WHERE seq = 30")
        let rewritten = try ledger.verifyFromCheckpoint()
        #expect(rewritten.from == nil && rewritten.verification.chainBreak?.seq == 30, "\(rewritten)")

        let other = TemporaryLedgerDirectory()
        let second = try openLedger(other)
        try second.append(contentsOf: (1...30).map { sampleEvent($0) })
        #expect(try second.verifyFromCheckpoint().verification.isIntact)
        try second.append(contentsOf: (31...40).map { sampleEvent($0) })
        // The newest events removed and the head rolled back by hand to before the checkpoint.
        try rawSQL(other.ledgerPath, """
            DELETE FROM audit_events WHERE seq >= 25;
            UPDATE chain_head SET seq = 24, hash = (SELECT hash FROM audit_events WHERE seq = 24);
            """)
        let truncated = try second.verifyFromCheckpoint()
        #expect(truncated.from == nil, "the checkpoint event is gone: the whole chain is walked")
        // A consistent truncation is what the chain alone cannot see (the journal anchors the
        // head); the walk is whole and says intact with 24 events, not the 40 written.
        #expect(truncated.verification == .intact(count: 24))
    }

    /// The checkpoint lives in the ledger: a new process (a restarted devaccessd, an offline
    /// report) walks from it, still catches an edit after it, and `verify()` (the whole
    /// chain) catches an edit before it, which a walk from the checkpoint cannot see.
    @Test func theCheckpointIsKeptInTheLedgerForTheNextProcess() throws {
        let dir = TemporaryLedgerDirectory()
        do {
            let ledger = try openLedger(dir)
            try ledger.append(contentsOf: (1...40).map { sampleEvent($0) })
            #expect(try ledger.storedCheckpoint() == nil)
            #expect(try ledger.verify() == .intact(count: 40))
            #expect(try ledger.storedCheckpoint()?.seq == 40)
            try ledger.append(contentsOf: (41...50).map { sampleEvent($0) })
        }
        // A bystander reading the file (doctor) walks from it but leaves it as it is.
        let bystander = try openLedger(dir, mode: .readOnly)
        #expect(try bystander.verifyFromCheckpoint().from == 40)
        #expect(try bystander.storedCheckpoint()?.seq == 40)
        // A new process, read-only as offline reports open it (the one writer): it starts at
        // 40, and moves the checkpoint on.
        let reader = try openLedger(dir, mode: .readOnly)
        reader.writesCheckpoints()
        let walk = try reader.verifyFromCheckpoint()
        #expect(walk.from == 40 && walk.verification == .intact(count: 50), "\(walk)")
        #expect(try reader.storedCheckpoint() == ChainCheckpoint(
            seq: 50, hash: try #require(try reader.events().last?.hash), events: 50))

        let writer = try openLedger(dir)
        try writer.append(contentsOf: (51...60).map { sampleEvent($0) })
        try rawSQL(dir.ledgerPath, "UPDATE audit_events SET program = '/tmp/evil' WHERE seq = 55")
        let afterEdit = try openLedger(dir).verifyFromCheckpoint()
        #expect(afterEdit.from == 50 && afterEdit.verification.chainBreak?.seq == 55, "\(afterEdit)")
        // A broken walk leaves the checkpoint where it was.
        #expect(try writer.storedCheckpoint()?.seq == 50)
        try rawSQL(dir.ledgerPath, "UPDATE audit_events SET program = '/usr/bin/cheese' WHERE seq = 55")
        #expect(try openLedger(dir).verifyFromCheckpoint().verification == .intact(count: 60))

        // An edit before the checkpoint (60): only the whole walk sees it.
        try rawSQL(dir.ledgerPath, "UPDATE audit_events SET program = '/tmp/evil' WHERE seq = 20")
        #expect(try openLedger(dir).verifyFromCheckpoint().from == 60)
        #expect(try openLedger(dir).verify().chainBreak?.seq == 20)
    }

    /// A ledger written before checkpoints were kept (schema 7) migrates, verifies, and
    /// keeps one from then on.
    @Test func anOlderLedgerGainsTheCheckpointTable() throws {
        let dir = TemporaryLedgerDirectory()
        do {
            let ledger = try openLedger(dir)
            try ledger.append(contentsOf: (1...5).map { sampleEvent($0) })
        }
        try rawSQL(dir.ledgerPath, "DROP TABLE chain_checkpoint; PRAGMA user_version = 7;")
        let ledger = try openLedger(dir)
        #expect(try ledger.storedSchemaVersion() == Ledger.schemaVersion)
        #expect(try ledger.verifyFromCheckpoint().verification == .intact(count: 5))
        #expect(try ledger.storedCheckpoint()?.seq == 5)
    }

    /// The summary's one pass reads decision, how and run time from details the way the
    /// decoder does, also where a text needs the decoder (escapes) or names a key inside a value.
    @Test func theSummaryReadsDetailsAsTheDecoderDoes() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let alice = Principal(uid: 1000, name: "alice")
        func decision(_ details: [String: String]) -> AuditEvent {
            AuditEvent(type: .decision, actor: alice, subject: alice, permission: .camera, details: details)
        }
        try ledger.append(contentsOf: [
            decision(["decision": "deny", "how": "consent"]),
            // A value that spells another key: not a decision of deny.
            decision(["note": ",\"decision\":\"deny\"", "how": "policy"]),
            decision(["decision": "allow", "how": "auth_self", "reason": "back\\slash \"quoted\""]),
            decision(["xdecision": "deny", "how": "admin"]),
            AuditEvent(type: .runEnd, actor: alice, subject: alice, details: ["duration_usec": "2500000"]),
            AuditEvent(type: .runEnd, actor: alice, subject: alice, details: ["duration_usec": "1500000", "x": "\\"]),
        ])
        let total = try ledger.auditSummary(AuditFilter()).total
        #expect(total.denials == 1 && total.grantsPolicy == 1 && total.grantsPassword == 1 && total.grantsAdmin == 1,
                "\(total)")
        #expect(total.runSeconds == 4, "\(total)")
    }

    /// A run of `devaccess run` names no permission of its own (its details list them): it is
    /// counted, and found by `--permission`, under each permission it used.
    @Test func runsCountUnderEachPermissionTheyUsed() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        let alice = Principal(uid: 1000, name: "alice")
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let run = try ledger.beginRun(NewRun(subject: alice, program: Program(path: "/usr/bin/cheese"),
                                             permissions: [.camera, .microphone]), at: start)
        try ledger.runStarted(run.id, process: ProcessHolder(pid: 7, startTicks: 1, bootID: "b"), at: start)
        try ledger.endRuns([(runID: run.id, status: "exited 0")], by: alice, at: start.addingTimeInterval(90))
        try ledger.append(sampleEvent(3))
        let summary = try ledger.auditSummary(AuditFilter())
        let rows = Dictionary(uniqueKeysWithValues: summary.permissions.map { ($0.key, $0.counts) })
        #expect(rows["camera"]?.runs == 1 && rows["microphone"]?.runs == 1 && rows["-"] == nil, "\(rows)")
        #expect(rows["microphone"]?.runSeconds == 90 && rows["microphone"]?.events == 2, "\(rows)")
        #expect(summary.total.runs == 1 && summary.total.runSeconds == 90 && summary.total.events == 3)
        #expect(try ledger.auditEvents(AuditFilter(permission: "microphone")).map(\.event.type) == [.runStart, .runEnd])
        #expect(try ledger.auditEvents(AuditFilter(permission: "location")).isEmpty)
        #expect(try ledger.auditSummary(AuditFilter(permission: "microphone")).total.runs == 1)
    }

    @Test func filtersAreBoundNotSpliced() throws {
        let dir = TemporaryLedgerDirectory()
        let ledger = try openLedger(dir)
        var odd = sampleEvent(1)
        odd.program = "/opt/100%_sure/app"
        var quote = sampleEvent(2)
        quote.program = "/usr/bin/it's"
        try ledger.append(contentsOf: [odd, quote, sampleEvent(3)])
        #expect(try ledger.auditEvents(AuditFilter(program: "app")).map(\.seq) == [1])
        // LIKE's wildcards in a name match only themselves.
        #expect(try ledger.auditEvents(AuditFilter(program: "%")).map(\.seq) == [])
        #expect(try ledger.auditEvents(AuditFilter(program: "it's")).map(\.seq) == [2])
        #expect(try ledger.auditEvents(AuditFilter(program: "cheese"), after: 1, limit: 5).map(\.seq) == [3])
        #expect(try ledger.auditEvents(AuditFilter(types: ["decision"])).map(\.seq) == [1, 3])
        let summary = try ledger.auditSummary(AuditFilter(types: ["decision", "request"]))
        #expect(summary.total.events == 3 && summary.total.requests == 1)
        #expect(summary.programs.map(\.program).sorted() == ["/opt/100%_sure/app", "/usr/bin/cheese", "/usr/bin/it's"])
    }
}

/// The decoder's fast path accepts exactly what JSONDecoder accepts, with the same result.
@Suite struct DetailsJSONTests {
    @Test func thePlainPathAgreesWithJSONDecoder() throws {
        let texts = [
            "{}", #"{"a":"b"}"#, #"{"how":"consent","n":"7","scope":"until"}"#, #"{"k":"ünïcødé ✓ 🎥"}"#,
            #"{"a":"b","a":"c"}"#, #"{"a":"b",}"#, #"{"a":"b"} "#, #"{ "a":"b"}"#, #"{"a":1}"#, #"{"a":"b""#,
            "{\"a\":\"line\nbreak\"}", #"{"a":"quote \" inside"}"#, #"{"a":"\u0041"}"#, #"{"a"}"#, #"{"":""}"#,
            #"["a"]"#, "", #"{"a":"b","c":"d","e":"f"}"#,
        ]
        for text in texts {
            let reference = try? JSONDecoder().decode([String: String].self, from: Data(text.utf8))
            #expect(DetailsJSON.decode(text) == reference, "\(text)")
            if let plain = DetailsJSON.decodePlain(text) { #expect(plain == reference, "\(text)") }
        }
        // What encode writes comes back, escapes or not.
        for details in [["reason": "a \"quoted\"\nline\\"], ["x": "\u{1}"], ["n": "1", "how": "admin"]] {
            #expect(DetailsJSON.decode(DetailsJSON.encode(details)) == details)
        }
    }
}

/// The summary over a ledger of 1,000,000 events whose contents are known by construction
/// (written straight into the table with one SQL statement): every count exact, per total,
/// permission and user. The chain is not what is counted, so its columns stay empty here.
@Suite struct AuditSummaryMillionTests {
    static let events = 1_000_000
    static let types = ["request", "decision", "decision", "revoke", "expiry", "refused", "hotplug", "drift_seen",
                        "run_start", "run_end"]

    @Test func aMillionEventsAreCountedExactly() throws {
        let dir = TemporaryLedgerDirectory()
        _ = try openLedger(dir)
        // Event i: type by i % 10 (decision 1: a consent grant, 2: an admin's denial; run_end: 2 s),
        // permission by i % 3, user by i % 7.
        try rawSQL(dir.ledgerPath, """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(Self.events))
            INSERT INTO audit_events (seq, time_usec, type, subject_uid, subject_name, permission, details, prev_hash, hash)
            SELECT i, 1700000000000000 + i * 1000,
                   CASE i % 10 \((0..<10).map { "WHEN \($0) THEN '\(Self.types[$0])'" }.joined(separator: " ")) END,
                   1000 + i % 7, 'user' || (i % 7),
                   CASE i % 3 WHEN 0 THEN 'camera' WHEN 1 THEN 'microphone' ELSE 'location' END,
                   CASE i % 10 WHEN 1 THEN '{"decision":"allow","how":"consent"}'
                               WHEN 2 THEN '{"decision":"deny","how":"admin"}'
                               WHEN 9 THEN '{"duration_usec":"2000000"}' ELSE '{}' END,
                   '', ''
            FROM n;
            """)
        let ledger = try openLedger(dir)
        let summary = try ledger.auditSummary(AuditFilter())

        // What each group must hold, counted here the slow way.
        func expected(_ include: (Int) -> Bool) -> AuditCounts {
            var counts = AuditCounts()
            for i in 1...Self.events where include(i) {
                let type = Self.types[i % 10]
                let details: (String?, String?) = i % 10 == 1 ? ("allow", "consent") : i % 10 == 2 ? ("deny", "admin") : (nil, nil)
                counts.add(type: type, decision: details.0, how: details.1, count: 1, first: Int64(i), last: Int64(i),
                           runMicroseconds: type == "run_end" ? 2_000_000 : 0)
            }
            return counts
        }
        let total = expected { _ in true }
        #expect(total.events == 1_000_000 && total.requests == 100_000 && total.grantsConsent == 100_000
                    && total.denials == 100_000 && total.runs == 100_000 && total.runSeconds == 200_000)
        #expect(summary.total == total, "\(summary.total)")
        let permissions = ["camera": 0, "microphone": 1, "location": 2]
        #expect(summary.permissions.map(\.key).sorted() == permissions.keys.sorted())
        for row in summary.permissions {
            let residue = try #require(permissions[row.key])
            #expect(row.counts == expected { $0 % 3 == residue }, "\(row.key)")
        }
        #expect(summary.users.count == 7)
        for row in summary.users {
            let uid = try #require(row.uid)
            #expect(row.key == "user\(uid - 1000)")
            #expect(row.counts == expected { 1000 + $0 % 7 == Int(uid) }, "\(row.key)")
        }
    }
}
