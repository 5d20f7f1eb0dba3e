import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessTestSupport

/// `devaccess audit` reports through the real binary, `--offline` (root, no daemon), over a
/// ledger written here with known contents; through devaccessd (plain user refused, admin
/// member served, --follow) they are tested in DevAccessBrokerTests.
@Suite(.serialized, .enabled(if: getuid() == 0, "makes users and runs root's --offline mode"))
struct AuditReportCommandTests {
    /// 2026-11-01T10:00:00Z; event N is written N minutes later.
    static let base = Date(timeIntervalSince1970: 1_793_527_200)
    static let formerUID: UInt32 = 4_000_123

    /// The ledger of `KnownLedger` at the fixture's state directory.
    static func fixture(_ tag: String) throws -> (AdminFixture, Principal) {
        let fx = try AdminFixture(tag)
        let alice = Principal(uid: fx.alice.uid, name: fx.alice.name)
        let ledger = try Ledger(stateDirectory: fx.state.path)
        try ledger.append(contentsOf: KnownLedger.events(alice: alice, base: base))
        return (fx, alice)
    }

    static func iso(_ minutes: Int) -> String {
        let formatter = ISO8601DateFormatter()
        return formatter.string(from: base.addingTimeInterval(Double(minutes) * 60))
    }

    /// The event numbers a JSON report lists.
    static func seqs(_ fx: AdminFixture, _ filters: [String]) throws -> [Int] {
        let run = try fx.run(["audit", "--format", "json"] + filters)
        #expect(run.status == 0, "\(filters): \(run.stderr)")
        let events = try fx.json(run)["events"] as? [[String: Any]] ?? []
        return events.compactMap { $0["seq"] as? Int }
    }

    @Test func theSummaryCountsExactlyWhatTheLedgerHolds() throws {
        let (fx, alice) = try Self.fixture("repsum")
        let run = try fx.run(["audit", "--summary", "--format", "json"])
        #expect(run.status == 0, "\(run.stderr)")
        let document = try fx.json(run)
        #expect((document["chain"] as? [String: Any])?["intact"] as? Bool == true)
        let summary = try #require(document["summary"] as? [String: Any])
        let total = try #require(summary["total"] as? [String: Any])
        let expectedTotal: [String: Int] = [
            "events": 18, "requests": 4, "grantsConsent": 1, "grantsPassword": 1, "grantsAdmin": 1, "grantsPolicy": 1,
            "denials": 2, "revocations": 1, "expiries": 1, "refusals": 1, "driftFound": 1, "driftRepaired": 1,
            "hotplug": 2, "runs": 1, "resets": 0, "queued": 0, "firstEvent": 1, "lastEvent": 18,
        ]
        for (key, value) in expectedTotal { #expect(total[key] as? Int == value, "total.\(key): \(total[key] ?? "nil")") }

        func row(_ list: String, _ key: String) -> [String: Any] {
            let rows = summary[list] as? [[String: Any]] ?? []
            return rows.first { $0["key"] as? String == key }?["counts"] as? [String: Any] ?? [:]
        }
        let camera = row("permissions", "camera")
        let expectedCamera: [String: Int] = [
            "events": 13, "requests": 3, "grantsConsent": 1, "grantsPassword": 1, "grantsAdmin": 1, "grantsPolicy": 0,
            "denials": 1, "revocations": 1, "expiries": 1, "driftFound": 1, "driftRepaired": 1, "hotplug": 1, "runs": 1,
            "refusals": 0, "firstEvent": 1, "lastEvent": 17,
        ]
        for (key, value) in expectedCamera { #expect(camera[key] as? Int == value, "camera.\(key): \(camera[key] ?? "nil")") }
        let microphone = row("permissions", "microphone")
        for (key, value) in ["events": 4, "requests": 1, "grantsPolicy": 1, "denials": 1, "hotplug": 1,
                             "firstEvent": 10, "lastEvent": 18] {
            #expect(microphone[key] as? Int == value, "microphone.\(key): \(microphone[key] ?? "nil")")
        }
        #expect(row("permissions", "-")["refusals"] as? Int == 1)

        let aliceRow = row("users", alice.name)
        for (key, value) in ["events": 11, "requests": 3, "grantsConsent": 1, "grantsPassword": 1, "grantsAdmin": 1,
                             "denials": 2, "revocations": 1, "expiries": 1, "runs": 1] {
            #expect(aliceRow[key] as? Int == value, "alice.\(key): \(aliceRow[key] ?? "nil")")
        }
        let former = row("users", "former")
        for (key, value) in ["events": 5, "requests": 1, "grantsPolicy": 1, "refusals": 1, "driftFound": 1,
                             "driftRepaired": 1] {
            #expect(former[key] as? Int == value, "former.\(key): \(former[key] ?? "nil")")
        }
        #expect(row("users", "root")["hotplug"] as? Int == 2)

        let programs = summary["programs"] as? [[String: Any]] ?? []
        #expect(programs.map { $0["program"] as? String ?? "" } == ["/usr/bin/cheese", "/usr/bin/arecord"])
        #expect(programs.map { $0["events"] as? Int ?? 0 } == [10, 2])
        #expect(programs.first?["firstEvent"] as? Int == 1 && programs.first?["lastEvent"] as? Int == 17)

        // The table says the same, with the event numbers to drill into.
        let table = try fx.run(["audit", "--summary"])
        #expect(table.status == 0, "\(table.stderr)")
        let cameraLine = table.stdout.split(separator: "\n").first { $0.hasPrefix("camera ") } ?? ""
        #expect(cameraLine.contains("13") && cameraLine.contains("3 (1/1/1/0)") && cameraLine.contains("#1…#17"),
                "\(table.stdout)")
    }

    @Test func filtersCompose() throws {
        let (fx, alice) = try Self.fixture("repfilt")
        #expect(try Self.seqs(fx, []) == Array(1...18))
        #expect(try Self.seqs(fx, ["--permission", "camera", "--user", alice.name]) == Array(1...9) + [17])
        #expect(try Self.seqs(fx, ["--permission", "camera", "--user", alice.name, "--type", "request,decision"])
            == [1, 2, 3, 4, 6, 7])
        #expect(try Self.seqs(fx, ["--program", "cheese", "--type", "revoke"]) == [5])
        #expect(try Self.seqs(fx, ["--program", "/usr/bin/arecord"]) == [10, 11])
        #expect(try Self.seqs(fx, ["--since", Self.iso(5), "--until", Self.iso(10)]) == [5, 6, 7, 8, 9])
        #expect(try Self.seqs(fx, ["--since", Self.iso(10), "--user", String(Self.formerUID)]) == [10, 11, 12, 13, 14])
        #expect(try Self.seqs(fx, ["--since", Self.iso(10), "--user", String(Self.formerUID), "--type", "refused"]) == [12])
        #expect(try Self.seqs(fx, ["--device", "camera:test-a"]) == [13, 14, 15])
        #expect(try Self.seqs(fx, ["--device", "Test Microphone", "--permission", "microphone"]) == [16])
        #expect(try Self.seqs(fx, ["--permission", "location"]) == [])
        // A duration and the time words parse; everything here is older than a day... or in the future.
        #expect(try Self.seqs(fx, ["--since", "recent"]) == [])
        #expect(try fx.run(["audit", "--since", "yesterday", "--until", "today"]).status == 0)
        #expect(try fx.run(["audit", "--since", "this-week"]).status == 0)
        #expect(try fx.run(["audit", "--since", "boot", "--format", "csv"]).status == 0)
        #expect(try fx.run(["audit", "--since", "2026-11-01"]).status == 0)
        let bad = try fx.run(["audit", "--since", "last tuesday"])
        #expect(bad.status == 64 && bad.stderr.contains("not a time"), "\(bad.stderr)")
        let badType = try fx.run(["audit", "--type", "grnat"])
        #expect(badType.status == 64 && badType.stderr.contains("did you mean 'grant'"), "\(badType.stderr)")

        // Nothing in the range: said, not a header over nothing.
        let empty = try fx.run(["audit", "--since", "yesterday", "--until", "today"])
        #expect(empty.status == 0 && empty.stdout == "no events\n", "\(empty.stdout)")

        // The table: one line per event, newest last, local time. `--type grant` is every
        // grant and denial however made: an admin's (grant) and those at a prompt (decision).
        let table = try fx.run(["audit", "--user", alice.name, "--type", "grant"])
        #expect(table.status == 0, "\(table.stderr)")
        let lines = table.stdout.split(separator: "\n")
        try #require(lines.count == 6, "\(table.stdout)")
        #expect(lines.first?.hasPrefix("#") == true)
        #expect(lines.dropFirst().map { $0.split(separator: " ").first ?? "" } == ["2", "4", "7", "8", "18"], "\(lines)")
        #expect(lines[2].hasPrefix("4 ") && lines[2].contains("decision allow"), "\(lines)")
        #expect(lines[4].hasPrefix("8 ") && lines[4].contains("grant allow") && lines[4].contains("admin"), "\(lines)")
        #expect(lines[5].hasPrefix("18 ") && lines[5].contains("grant deny"), "\(lines)")
        #expect(try Self.seqs(fx, ["--user", alice.name, "--type", "grant"]) == [2, 4, 7, 8, 18])
    }

    /// A request writes a `request` event at each stage (received, prompt, answered): the
    /// summary counts requests by their `received` event, once per permission asked, and an
    /// event of a ledger from before stages as one.
    @Test func theSummaryCountsRequestsNotTheirStages() throws {
        let fx = try AdminFixture("repstage")
        let alice = Principal(uid: fx.alice.uid, name: fx.alice.name)
        func request(_ permission: Permission, _ stage: String?) -> AuditEvent {
            AuditEvent(type: .request, actor: alice, subject: alice, permission: permission,
                       details: stage.map { ["stage": $0, "request_id": "1"] } ?? [:])
        }
        let ledger = try Ledger(stateDirectory: fx.state.path)
        // Three requests: camera (asked, answered), camera and microphone (asked, answered), one old one.
        try ledger.append(contentsOf: [
            request(.camera, "received"), request(.camera, "prompt"), request(.camera, "answered"),
            request(.camera, "received"), request(.microphone, "received"), request(.camera, "prompt"),
            request(.microphone, "prompt"), request(.camera, "answered"), request(.microphone, "answered"),
            request(.camera, nil),
        ])
        let summary = try #require(try fx.json(try fx.run(["audit", "--summary", "--format", "json"]))["summary"]
            as? [String: Any])
        let total = try #require(summary["total"] as? [String: Any])
        #expect(total["events"] as? Int == 10 && total["requests"] as? Int == 4, "\(total)")
        let rows = summary["permissions"] as? [[String: Any]] ?? []
        let counts = { (key: String) in rows.first { $0["key"] as? String == key }?["counts"] as? [String: Any] ?? [:] }
        #expect(counts("camera")["requests"] as? Int == 3 && counts("microphone")["requests"] as? Int == 1, "\(rows)")
    }

    @Test func csvHasTheDocumentedColumnsAndJSONTheDocumentedShape() throws {
        let (fx, _) = try Self.fixture("repfmt")
        let output = fx.state.path + "/report.csv"
        let csv = try fx.run(["audit", "--format", "csv", "--output", output])
        #expect(csv.status == 0 && csv.stdout.isEmpty, "\(csv.stderr)")
        var info = stat()
        #expect(stat(output, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let check = try TestProcess.run("/usr/bin/python3", ["-c", """
            import csv, json, sys
            rows = list(csv.DictReader(open(sys.argv[1], newline='')))
            documented = "seq,time_utc,time_usec,type,actor,actor_uid,user,uid,permission,device,device_name,program,node,decision,how,details,prev_hash,hash".split(",")
            assert list(rows[0].keys()) == documented, list(rows[0].keys())
            assert [int(r['seq']) for r in rows] == list(range(1, 19)), [r['seq'] for r in rows]
            assert rows[6]['decision'] == 'deny' and rows[6]['how'] == 'consent', rows[6]
            assert json.loads(rows[4]['details'])['revoke_reason'] == 'no longer, "needed"', rows[4]['details']
            assert rows[0]['time_utc'] == '2026-11-01T10:01:00.000000Z', rows[0]['time_utc']
            assert all(len(r['hash']) == 64 for r in rows)
            print("ok")
            """, output])
        #expect(check.status == 0 && check.stdout.contains("ok"), "\(check.stdout) \(check.stderr)")

        let summaryPath = fx.state.path + "/summary.csv"
        #expect(try fx.run(["audit", "--summary", "--format", "csv", "-o", summaryPath]).status == 0)
        let checkSummary = try TestProcess.run("/usr/bin/python3", ["-c", """
            import csv, sys
            rows = list(csv.DictReader(open(sys.argv[1], newline='')))
            assert list(rows[0].keys())[:5] == ['section', 'key', 'uid', 'events', 'requests'], rows[0].keys()
            total = [r for r in rows if r['section'] == 'total'][0]
            assert total['events'] == '18' and total['grants_policy'] == '1' and total['hotplug'] == '2', total
            assert [r['key'] for r in rows if r['section'] == 'program'] == ['/usr/bin/cheese', '/usr/bin/arecord']
            print("ok")
            """, summaryPath])
        #expect(checkSummary.status == 0 && checkSummary.stdout.contains("ok"), "\(checkSummary.stdout) \(checkSummary.stderr)")

        let jsonPath = fx.state.path + "/report.json"
        #expect(try fx.run(["audit", "--format", "json", "--output", jsonPath]).status == 0)
        let shape = try TestProcess.run("/usr/bin/python3", ["-c", Self.schemaCheck, jsonPath])
        #expect(shape.status == 0 && shape.stdout.contains("ok"), "\(shape.stdout) \(shape.stderr)")
    }

    /// docs/json.md, "audit reports": the event object's keys and types.
    static let schemaCheck = """
        import json, sys
        doc = json.load(open(sys.argv[1]))
        assert set(doc) == {'chain', 'ledger', 'mode', 'events'}, doc.keys()
        assert doc['mode'] == 'events' and doc['chain']['intact'] is True
        required = {'seq': int, 'time': str, 'timeUsec': int, 'type': str, 'details': dict, 'prevHash': str, 'hash': str}
        optional = {'actor': str, 'actorUid': int, 'user': str, 'uid': int, 'permission': str, 'device': str,
                    'deviceName': str, 'program': str, 'node': str, 'decision': str, 'how': str}
        for event in doc['events']:
            for key, kind in required.items():
                assert isinstance(event.get(key), kind), (key, event)
            for key in event:
                assert key in required or key in optional, ('undocumented key', key)
                if key in optional:
                    assert isinstance(event[key], optional[key]), (key, event)
            assert event['time'].endswith('Z') and len(event['time']) == 27, event['time']
            assert all(isinstance(v, str) for v in event['details'].values())
        assert len(doc['events']) == 18
        print("ok")
        """

    @Test func oneEventInFullWithItsPlaceInTheChain() throws {
        let (fx, _) = try Self.fixture("repevt")
        let run = try fx.run(["audit", "--event", "7"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("decision") && run.stdout.contains("deny"), "\(run.stdout)")
        #expect(run.stdout.contains("event 7 of 1…18 stored; hash matches its stored fields"), "\(run.stdout)")
        #expect(run.stdout.contains("event 6 links to it") && run.stdout.contains("event 8 is chained to it"), "\(run.stdout)")
        let json = try fx.json(try fx.run(["audit", "--event", "18", "--format", "json"]))
        let position = try #require(json["position"] as? [String: Any])
        #expect(position["linksToPrevious"] as? Bool == true && position["linkedFromNext"] == nil)
        let missing = try fx.run(["audit", "--event", "99"])
        #expect(missing.status == 1 && missing.stderr.contains("no event 99"), "\(missing.stderr)")
    }

    @Test func aTamperedLedgerIsReportedAtTheTopOfEveryReport() throws {
        let (fx, _) = try Self.fixture("reptamp")
        let edit = try fx.sql("UPDATE audit_events SET details = replace(details, 'deny', 'allow') WHERE seq = 7")
        #expect(edit.status == 0, "\(edit.stderr)")
        let table = try fx.run(["audit"])
        #expect(table.status == 65, "\(table.stderr)")
        #expect(table.stdout.hasPrefix("WARNING: the audit chain is broken at event 7 (edited)"), "\(table.stdout)")
        let summary = try fx.run(["audit", "--summary"])
        #expect(summary.status == 65 && summary.stdout.hasPrefix("WARNING: the audit chain is broken at event 7"),
                "\(summary.stdout)")
        let csv = try fx.run(["audit", "--format", "csv", "--permission", "microphone"])
        #expect(csv.status == 65 && csv.stdout.hasPrefix("# WARNING: the audit chain is broken at event 7"), "\(csv.stdout)")
        let json = try fx.run(["audit", "--format", "json", "--summary"])
        #expect(json.status == 65)
        let chain = try fx.json(json)["chain"] as? [String: Any]
        #expect(chain?["intact"] as? Bool == false && chain?["brokenAt"] as? Int == 7, "\(json.stdout)")
        let event = try fx.run(["audit", "--event", "7"])
        #expect(event.status == 65 && event.stdout.contains("DOES NOT match"), "\(event.stdout)")
    }
}

extension AuditReportCommandTests {
    /// The page's bars and marks are the ledger's grants and runs, and denials, refusals,
    /// revocations, at their times; nothing in it can load anything.
    @Test func theHTMLTimelineDrawsTheLedger() throws {
        let (fx, alice) = try Self.fixture("rephtml")
        // Two runs as `devaccess run` records them (the ledger's run API: run_start when the
        // program starts, run_end with its duration): one of camera and microphone from
        // minute 19 to 22, one of camera from 24 still running at the report's end.
        let ledger = try Ledger(stateDirectory: fx.state.path)
        let holder = ProcessHolder(pid: 4242, startTicks: 1, bootID: "boot")
        func at(_ minutes: Int) -> Date { Self.base.addingTimeInterval(Double(minutes) * 60) }
        let both = try ledger.beginRun(NewRun(subject: alice, program: Program(path: "/usr/bin/cheese"),
                                              permissions: [.camera, .microphone]), at: at(19))
        try ledger.runStarted(both.id, process: holder, at: at(19))
        try ledger.endRuns([(runID: both.id, status: "exited 0")], by: alice, at: at(22))
        let running = try ledger.beginRun(NewRun(subject: alice, program: Program(path: "/usr/bin/cheese"),
                                                 permissions: [.camera]), at: at(24))
        try ledger.runStarted(running.id, process: holder, at: at(24))
        let page = fx.state.path + "/report.html"
        let run = try fx.run(["audit", "--format", "html", "--output", page, "--until", Self.iso(30)])
        #expect(run.status == 0, "\(run.stderr)")
        func usec(_ minutes: Int) -> Int { Int(Self.base.timeIntervalSince1970) * 1_000_000 + minutes * 60_000_000 }
        let check = try TestProcess.run("/usr/bin/python3", ["-c", """
            import html.parser, json, sys
            class P(html.parser.HTMLParser):
                def __init__(self):
                    super().__init__(); self.bars = {}; self.marks = []; self.svgs = []
                def handle_starttag(self, tag, attrs):
                    a = dict(attrs)
                    if tag == 'svg': self.svgs.append(a.get('data-permission'))
                    if 'grant' in (a.get('class') or '').split():
                        self.bars[a['data-grant']] = (self.svgs[-1], int(a['data-start']), a['data-end'])
                    if 'mark' in (a.get('class') or '').split():
                        self.marks.append((self.svgs[-1], a['class'].split()[1], int(a['data-seq'])))
                    if 'run' in (a.get('class') or '').split() and tag == 'rect':
                        self.runs.append([self.svgs[-1], a['data-run'], a['data-lane'], int(a['data-start']), a['data-end']])
            text = open(sys.argv[1]).read()
            p = P(); p.runs = []; p.feed(text)
            print(json.dumps({'bars': p.bars, 'marks': sorted(p.marks), 'svgs': p.svgs, 'runs': sorted(p.runs)}))
            lowered = text.lower()
            for needle in ['http:', 'https:', '//', 'src=', 'href=', 'url(', '@import', '<script', '<link', '<img', '<iframe']:
                assert needle not in lowered, needle
            """, page])
        #expect(check.status == 0, "\(check.stderr)")
        let found = try fx.json(check)
        let bars = found["bars"] as? [String: [Any]] ?? [:]
        // Grants 1 and 5 stand to the report's end; 2 was revoked at 5, 4 expired at 9.
        let expected: [String: (String, Int, String)] = [
            "1": ("camera", usec(2), ""), "2": ("camera", usec(4), String(usec(5))),
            "4": ("camera", usec(8), String(usec(9))), "5": ("microphone", usec(11), ""),
        ]
        #expect(Set(bars.keys) == Set(expected.keys), "\(bars)")
        for (id, (permission, start, end)) in expected {
            let bar = bars[id] ?? []
            #expect(bar.count == 3 && bar[0] as? String == permission && bar[1] as? Int == start
                    && bar[2] as? String == end, "grant \(id): \(bar)")
        }
        let marks = (found["marks"] as? [[Any]] ?? []).map { "\($0[0]) \($0[1]) \($0[2])" }
        #expect(marks == ["- refused 12", "camera denied 7", "camera revoked 5", "camera run 17", "microphone denied 18"],
                "\(marks)")
        // The runs are bars in each permission they used, in alice's lane for the program,
        // from run_start to run_end (the one still running: to the report's end, no data-end).
        let runs = (found["runs"] as? [[Any]] ?? []).map { "\($0[0]) \($0[1]) \($0[2]) \($0[3]) \($0[4])" }
        let lane = "\(alice.name) (\(alice.uid)) · /usr/bin/cheese"
        #expect(runs == [
            "camera \(both.id) \(lane) \(usec(19)) \(usec(22))", "camera \(running.id) \(lane) \(usec(24)) ",
            "microphone \(both.id) \(lane) \(usec(19)) \(usec(22))",
        ], "\(runs)")

        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium") else {
            Issue.record("chromium is not installed (scripts/install-deps.sh installs it): the page was not rendered")
            return
        }
        // Rendered for real: no console error, no request (the page's CSP would log one), a screenshot.
        let screenshot = "/tmp/devaccess-audit-report.png"
        try? FileManager.default.removeItem(atPath: screenshot)
        let chrome = try TestProcess.run("/usr/bin/timeout", [
            "120", "/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--user-data-dir=\(fx.state.path)/chromium", "--enable-logging=stderr", "--v=0",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1200,1100",
            "--screenshot=\(screenshot)", "file://\(page)"])
        #expect(chrome.status == 0, "\(chrome.stderr)")
        let console = chrome.stderr.split(separator: "\n").filter {
            $0.contains("CONSOLE") || $0.contains("Refused to") || $0.contains("net::ERR")
        }
        #expect(console.isEmpty, "\(console)")
        var info = stat()
        #expect(stat(screenshot, &info) == 0 && info.st_size > 20_000, "screenshot at \(screenshot)")
        let dom = try TestProcess.run("/usr/bin/timeout", [
            "120", "/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--user-data-dir=\(fx.state.path)/chromium", "--dump-dom", "file://\(page)"])
        #expect(dom.stdout.components(separatedBy: "class=\"grant\"").count - 1 == 4, "the rendered DOM has the bars")
        #expect(dom.stdout.components(separatedBy: "class=\"run\"").count - 1 == 3, "the rendered DOM has the run bars")
    }
}

extension AuditReportCommandTests {
    /// Archived events are in a report when their archive file is given, the archive's own
    /// chain checked: an edit in it is said at the top of the report (exit 65).
    @Test func reportsIncludeArchivedEventsWithTheArchiveChecked() throws {
        let (fx, _) = try Self.fixture("reparc")
        let archivePath = fx.state.path + "/old-events.db"
        // Events 1...9 were written before minute 9:30.
        let archived = try fx.run(["audit", "--archive", Self.iso(9) + "", "--to", archivePath, "--json"])
        #expect(archived.status == 0, "\(archived.stderr)")
        #expect(try fx.json(archived)["events"] as? Int == 8, "\(archived.stdout)")
        // Without the archive: what the ledger holds (9...18 and the 'archived' record, 19).
        #expect(try Self.seqs(fx, []) == Array(9...19))
        // With it: everything, in order, and the filters apply to the archive's events too.
        #expect(try Self.seqs(fx, ["--archive-file", archivePath]) == Array(1...19))
        #expect(try Self.seqs(fx, ["--archive-file", archivePath, "--type", "revoke,expiry"]) == [5, 9])
        let json = try fx.json(try fx.run(["audit", "--format", "json", "--archive-file", archivePath]))
        let archives = json["archives"] as? [[String: Any]] ?? []
        #expect(archives.count == 1 && archives.first?["intact"] as? Bool == true
                && archives.first?["link"] as? String == "anchored", "\(archives)")
        let summary = try fx.json(try fx.run(["audit", "--summary", "--format", "json", "--archive-file", archivePath]))
        let total = (summary["summary"] as? [String: Any])?["total"] as? [String: Any] ?? [:]
        for (key, value) in ["events": 19, "requests": 4, "grantsConsent": 1, "grantsPassword": 1, "grantsAdmin": 1,
                             "denials": 2, "revocations": 1, "expiries": 1, "firstEvent": 1, "lastEvent": 19] {
            #expect(total[key] as? Int == value, "total.\(key): \(total[key] ?? "nil")")
        }
        let event = try fx.run(["audit", "--event", "3", "--archive-file", archivePath])
        #expect(event.status == 0 && event.stdout.contains("event 3 of 1…8 stored"), "\(event.stdout) \(event.stderr)")
        let missing = try fx.run(["audit", "--event", "3"])
        #expect(missing.status == 1 && missing.stderr.contains("--archive-file"), "\(missing.stderr)")

        // An edit inside the archive: every report that reads it says so first.
        let edit = try TestProcess.run("/usr/bin/sqlite3", [archivePath,
            "UPDATE audit_events SET details = replace(details, 'deny', 'allow') WHERE seq = 7"])
        #expect(edit.status == 0, "\(edit.stderr)")
        let table = try fx.run(["audit", "--archive-file", archivePath])
        #expect(table.status == 65 && table.stdout.hasPrefix("WARNING: the archive \(archivePath) is broken at event 7"),
                "\(table.stdout)")
        let csv = try fx.run(["audit", "--summary", "--format", "csv", "--archive-file", archivePath])
        #expect(csv.status == 65 && csv.stdout.hasPrefix("# WARNING: the archive"), "\(csv.stdout)")
        let html = try fx.run(["audit", "--format", "html", "--archive-file", archivePath])
        #expect(html.status == 65 && html.stdout.contains("class=\"broken\">WARNING: the archive"), "\(html.stderr)")
        // The ledger alone is intact.
        #expect(try fx.run(["audit", "--summary"]).status == 0)
        // Not an archive at all: named, not read.
        let notArchive = try fx.run(["audit", "--archive-file", fx.state.path + "/ledger.db"])
        #expect(notArchive.status != 0 && notArchive.stderr.contains("not a devaccess audit archive"), "\(notArchive.stderr)")
    }
}

/// 18 events with known counts (see the summary test for what they add up to).
enum KnownLedger {
    static func events(alice: Principal, base: Date) -> [AuditEvent] {
        let root = Principal(uid: 0, name: "root")
        let former = Principal(uid: AuditReportCommandTests.formerUID, name: "former")
        let cheese = "/usr/bin/cheese", arecord = "/usr/bin/arecord"
        func at(_ n: Int) -> Date { base.addingTimeInterval(Double(n) * 60) }
        func decided(_ decision: String, _ how: String, _ id: Int) -> [String: String] {
            ["decision": decision, "how": how, "scope": "always", "grant_id": String(id)]
        }
        return [
            AuditEvent(type: .request, time: at(1), actor: alice, subject: alice, permission: .camera, program: cheese),
            AuditEvent(type: .decision, time: at(2), actor: alice, subject: alice, permission: .camera, program: cheese,
                       details: decided("allow", "consent", 1)),
            AuditEvent(type: .request, time: at(3), actor: alice, subject: alice, permission: .camera, program: cheese),
            AuditEvent(type: .decision, time: at(4), actor: alice, subject: alice, permission: .camera, program: cheese,
                       details: decided("allow", "auth_self", 2)),
            AuditEvent(type: .revoke, time: at(5), actor: root, subject: alice, permission: .camera, program: cheese,
                       details: ["revoke_reason": "no longer, \"needed\"", "grant_id": "2"]),
            AuditEvent(type: .request, time: at(6), actor: alice, subject: alice, permission: .camera, program: cheese),
            AuditEvent(type: .decision, time: at(7), actor: alice, subject: alice, permission: .camera, program: cheese,
                       details: decided("deny", "consent", 3)),
            AuditEvent(type: .grant, time: at(8), actor: root, subject: alice, permission: .camera, program: cheese,
                       details: decided("allow", "admin", 4)),
            AuditEvent(type: .expiry, time: at(9), actor: root, subject: alice, permission: .camera, program: cheese,
                       details: ["grant_id": "4"]),
            AuditEvent(type: .request, time: at(10), actor: former, subject: former, permission: .microphone,
                       program: arecord),
            AuditEvent(type: .decision, time: at(11), actor: former, subject: former, permission: .microphone,
                       program: arecord, details: decided("allow", "policy", 5)),
            AuditEvent(type: .refused, time: at(12), actor: former, details: ["operation": "audit"]),
            AuditEvent(type: .driftSeen, time: at(13), actor: root, subject: former, permission: .camera,
                       deviceID: "camera:test-a"),
            AuditEvent(type: .driftRepaired, time: at(14), actor: root, subject: former, permission: .camera,
                       deviceID: "camera:test-a"),
            AuditEvent(type: .hotplug, time: at(15), actor: root, permission: .camera, deviceID: "camera:test-a",
                       deviceName: "Test Camera", details: ["action": "add"]),
            AuditEvent(type: .hotplug, time: at(16), actor: root, permission: .microphone, deviceID: "microphone:card0",
                       deviceName: "Test Microphone", details: ["action": "add"]),
            AuditEvent(type: .runStart, time: at(17), actor: alice, subject: alice, permission: .camera, program: cheese),
            AuditEvent(type: .grant, time: at(18), actor: root, subject: alice, permission: .microphone,
                       details: decided("deny", "admin", 6)),
        ]
    }
}

extension AuditReportCommandTests {
    /// The page an admin reads (issue 31): the legend says the summary's words ("password",
    /// not `auth_self`), events of no permission are titled so (not "-"), and the wide
    /// summary tables scroll inside the page instead of overflowing it.
    @Test func theHTMLPageSaysTheTablesWordsAndKeepsItsTablesInside() throws {
        let (fx, _) = try Self.fixture("repwords")
        let run = try fx.run(["audit", "--format", "html", "--until", Self.iso(30)])
        #expect(run.status == 0, "\(run.stderr)")
        let page = run.stdout
        #expect(page.contains("granted by password") && !page.contains("auth_self"), "\(page)")
        #expect(!page.contains("<h3>-</h3>") && page.contains("<h3>no permission</h3>"), "\(page)")
        let tables = page.components(separatedBy: "<table>").count - 1
        #expect(tables > 0 && page.components(separatedBy: "<div class=\"wide\"><table>").count - 1 == tables, "\(page)")
        #expect(page.contains(".wide{overflow-x:auto"), "\(page)")
    }
}

extension AuditReportCommandTests {
    /// The table tells a request's stages apart (issue 31: three identical `request` rows):
    /// WHAT names the stage, HOW its outcome (the term asked for when received); DEVICE is
    /// the device's id without its permission's prefix on every row, not a name on some.
    @Test func theTableNamesEachRequestStageItsOutcomeAndOneDeviceWord() throws {
        let fx = try AdminFixture("repstages")
        let alice = Principal(uid: fx.alice.uid, name: fx.alice.name)
        let ledger = try Ledger(stateDirectory: fx.state.path)
        try ledger.append(contentsOf: [
            AuditEvent(type: .request, actor: alice, subject: alice, permission: .camera,
                       details: ["stage": "received", "request_id": "1", "scope": "once"]),
            AuditEvent(type: .request, actor: alice, subject: alice, permission: .camera,
                       details: ["stage": "prompt", "request_id": "1", "outcome": "cancel:dismissed"]),
            AuditEvent(type: .request, actor: alice, subject: alice, permission: .camera,
                       details: ["stage": "answered", "request_id": "1", "outcome": "undecided"]),
            AuditEvent(type: .hotplug, actor: alice, permission: .camera, deviceID: "camera:test-a",
                       deviceName: "Test Camera", details: ["action": "add"]),
            AuditEvent(type: .driftSeen, actor: alice, subject: alice, permission: .camera, deviceID: "camera:test-a"),
        ])
        let table = try fx.run(["audit"])
        #expect(table.status == 0, "\(table.stderr)")
        let rows = table.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true) }
        let requests = rows.filter { $0.contains("request") }.map { row in row.drop { $0 != "request" }.prefix(3).joined(separator: " ") }
        #expect(requests == ["request received once", "request prompt cancel:dismissed", "request answered undecided"],
                "\(table.stdout)")
        let devices = rows.filter { $0.contains("hotplug") || $0.contains("drift_seen") }.map { $0.contains("test-a") }
        #expect(devices == [true, true] && !table.stdout.contains("Test Camera"), "\(table.stdout)")
    }
}

extension AuditReportCommandTests {
    /// The HTML page lists the events as the table does (issue 31: their details were only in
    /// the timeline's tooltips): one row per matching event, numbered as the ledger numbers them.
    @Test func theHTMLPageHasTheEventTable() throws {
        let (fx, _) = try Self.fixture("repevents")
        let page = try fx.run(["audit", "--format", "html", "--until", Self.iso(30)]).stdout
        let section = page.components(separatedBy: "<h2>Events</h2>").dropFirst().first ?? ""
        let rows = section.components(separatedBy: "</section>").first?.components(separatedBy: "<tr><td>").dropFirst()
            .compactMap { $0.split(separator: "<").first.map(String.init) } ?? []
        #expect(rows == (1...18).map(String.init), "\(section)")
        #expect(section.contains("<th>WHAT</th>"), "\(section)")
        let some = try fx.run(["audit", "--format", "html", "--permission", "microphone"]).stdout
        #expect(some.components(separatedBy: "<h2>Events</h2>").last?.contains("microphone") == true)
    }
}
