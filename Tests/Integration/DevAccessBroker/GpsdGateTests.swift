import Testing
import Foundation
import DevAccessTestSupport

/// config/nftables/devaccess-gpsd.nft, loaded for real in a network namespace of the
/// test's own: gpsd's port refuses a plain user and serves root (devaccessd), on IPv4 and
/// IPv6 loopback. A listener stands in for gpsd: the rule is about who may connect.
@Suite(.serialized)
struct GpsdGateTests {
    static let ruleFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../../config/nftables/devaccess-gpsd.nft").standardizedFileURL.path

    /// The namespace's setup, shared with GpsdGateAttackTests: loopback up, the rule file
    /// ($1, or "none") loaded, and a listener standing in for gpsd on 2947 (IPv4 and IPv6)
    /// whose pid is in $listener.
    static let prelude = #"""
        set -u
        ip link set lo up || exit 3
        if [ "$1" != none ]; then nft -f "$1" || exit 4; fi
        /usr/bin/python3 -c '
        import socket, time
        listeners = []
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            s = socket.socket(family)
            s.bind((host, 2947))
            s.listen(16)
            listeners.append(s)
        print("listening", flush=True)
        time.sleep(20)' > /tmp/devaccess-gate-listener.$$ 2>/dev/null &
        listener=$!
        for _ in $(seq 100); do grep -q listening /tmp/devaccess-gate-listener.$$ 2>/dev/null && break; sleep 0.1; done
        rm -f /tmp/devaccess-gate-listener.$$
        """#

    /// $1: the rule file or "none"; $2: the user's uid. Prints one line per attempt.
    static let script = prelude + "\n" + #"""
        for host in 127.0.0.1 ::1; do
          if setpriv --reuid="$2" --regid=65534 --clear-groups bash -c 'exec 3<>"/dev/tcp/$0/2947"' "$host" 2>/dev/null
          then echo "user $host open"; else echo "user $host refused"; fi
          if bash -c 'exec 3<>"/dev/tcp/$0/2947"' "$host" 2>/dev/null
          then echo "root $host open"; else echo "root $host refused"; fi
        done
        kill -KILL "$listener"  # SIGKILL: the test runner may have SIGTERM blocked, and children inherit that
        """#

    static func attempts(rules: String, user: TestUser) throws -> [String] {
        let result = try TestProcess.run("/usr/bin/unshare", ["--net", "--", "/usr/bin/bash", "-c", script, "gate",
                                                              rules, String(user.uid)])
        guard result.status == 0 else { throw SetupError("the namespace script failed (\(result.status)): \(result.stderr)") }
        return result.stdout.split(separator: "\n").map(String.init)
    }

    @Test func withTheRuleOnlyRootReachesGpsdsPort() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/nft") else {
            Issue.record("nft is not installed: apt-get install nftables (scripts/debian-packages.txt)")
            return
        }
        let user = try TestUser("gate")
        #expect(try Self.attempts(rules: Self.ruleFile, user: user)
                == ["user 127.0.0.1 refused", "root 127.0.0.1 open", "user ::1 refused", "root ::1 open"])
        // Without it, gpsd's port serves anyone: the gate is the rule, not the namespace.
        #expect(try Self.attempts(rules: "none", user: user)
                == ["user 127.0.0.1 open", "root 127.0.0.1 open", "user ::1 open", "root ::1 open"])
    }

    /// $1: the rule file or "none"; $2: the NMEA log; $3: devaccess; $4: the user's uid.
    /// A real gpsd (gpsfake) on 2947 inside the namespace; `devaccess status location` as
    /// root and as the user. Prints the two JSON documents, one per line.
    static let statusScript = #"""
        set -u
        ip link set lo up || exit 3
        if [ "$1" != none ]; then nft -f "$1" || exit 4; fi
        PATH="$PATH:/usr/sbin" setsid gpsfake -c 0.05 -P 2947 "$2" > /dev/null 2>&1 &
        feeder=$!
        for _ in $(seq 150); do grep -q ':0B83 00000000:0000 0A' /proc/net/tcp 2>/dev/null && break; sleep 0.1; done
        # Until gpsd has identified the receiver and reports a 3D fix (root is let through the gate).
        timeout 15 gpspipe -w 127.0.0.1:2947 | grep -m1 -q '"class":"TPV".*"mode":3'
        "$3" status location --json --gpsd 127.0.0.1:2947 --gpsd-timeout 3000 | tr -d '\n'; echo
        setpriv --reuid="$4" --regid=65534 --clear-groups "$3" status location --json --gpsd 127.0.0.1:2947 \
            --gpsd-timeout 3000 | tr -d '\n'; echo
        "$3" doctor --json --gpsd 127.0.0.1:2947 --gpsd-timeout 3000 | tr -d '\n'; echo
        kill -KILL -- -"$feeder" 2>/dev/null
        """#

    static func statuses(rules: String, user: TestUser)
        throws -> (root: [String: Any], user: [String: Any], doctor: [String: Any])
    {
        let log = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Unit/DevAccessHardware/Fixtures/gps/fix-3d.nmea").standardizedFileURL.path
        let result = try TestProcess.run("/usr/bin/unshare", ["--net", "--", "/usr/bin/bash", "-c", statusScript,
                                                              "gate", rules, log, TestProcess.devaccessBinary,
                                                              String(user.uid)])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        guard lines.count == 3 else {
            throw SetupError("expected two status documents and doctor's: \(result.stdout) \(result.stderr)")
        }
        func location(_ line: String) throws -> [String: Any] {
            let permissions = try json(line)["permissions"] as? [[String: Any]] ?? []
            guard let status = permissions.first(where: { $0["permission"] as? String == "location" }) else {
                throw SetupError("no location status in \(line)")
            }
            return status
        }
        let checks = try json(lines[2])["checks"] as? [[String: Any]] ?? []
        guard let doctor = checks.first(where: { $0["name"] as? String == "location" }) else {
            throw SetupError("doctor has no location check: \(lines[2])")
        }
        return (try location(lines[0]), try location(lines[1]), doctor)
    }

    static func reasons(_ status: [String: Any]) -> [String] {
        (status["reasons"] as? [[String: Any]] ?? []).compactMap { $0["message"] as? String }
    }

    /// Status tells the truth about the gate: root asks with a socket made as `nobody`
    /// whether an unprivileged program would be let in.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, "gpsfake is not installed"))
    func statusSaysWhetherGpsdIsGated() throws {
        let user = try TestUser("gatest")
        let gated = try Self.statuses(rules: Self.ruleFile, user: user)
        #expect(Self.reasons(gated.root).contains { $0.contains("127.0.0.1:2947 is gated: only devaccessd reaches it") },
                "\(gated.root)")
        // root can read the receiver's node (gpsfake's pty) itself: status says so.
        #expect(Self.reasons(gated.root).contains { $0.contains("is a way around the gate") }, "\(gated.root)")
        // The user is refused by the gate and says where to ask.
        #expect(gated.user["status"] as? String == "unavailable", "\(gated.user)")
        #expect(Self.reasons(gated.user).contains { $0.contains("gated to devaccessd") }, "\(gated.user)")

        // doctor: the port is gated, but gpsfake's pty (the receiver) is mode 0666: a way around.
        let gatedMessage = gated.doctor["message"] as? String ?? ""
        #expect(gated.doctor["status"] as? String == "warn", "\(gated.doctor)")
        #expect(!gatedMessage.contains("accepts any local program") && gatedMessage.contains("by everyone"),
                "\(gated.doctor)")

        let open = try Self.statuses(rules: "none", user: user)
        #expect(open.doctor["status"] as? String == "warn", "\(open.doctor)")
        #expect((open.doctor["message"] as? String)?.contains("devaccess-gpsd.nft") == true, "\(open.doctor)")
        #expect(Self.reasons(open.root).contains { $0.contains("accepts any local program: access to it is not gated") },
                "\(open.root)")
        #expect(open.root["status"] as? String == "authorized" && open.user["status"] as? String == "authorized",
                "\(open.root) \(open.user)")
    }

    /// $1: the rule file; $2: the NMEA log; $3: devaccessd; $4: devaccess; $5: the granted
    /// user; $6 and $7: the granted and the ungranted user's uids. A real gpsd on 2947 and
    /// devaccessd (endpoint on 947) inside the namespace; gpspipe as each, pointed at gpsd's
    /// own port. Prints sections "== NAME" followed by what each got.
    static let redirectScript = #"""
        set -u
        ip link set lo up || exit 3
        nft -f "$1" || exit 4
        PATH="$PATH:/usr/sbin" setsid gpsfake -c 0.05 -P 2947 "$2" > /dev/null 2>&1 &
        feeder=$!
        for _ in $(seq 150); do grep -q ':0B83 00000000:0000 0A' /proc/net/tcp 2>/dev/null && break; sleep 0.1; done
        timeout 15 gpspipe -w 127.0.0.1:2947 | grep -m1 -q '"class":"TPV".*"mode":3'
        dir=$(mktemp -d)
        setsid "$3" --socket "$dir/sock" --state-dir "$dir/state" --log-target stderr --gpsd 127.0.0.1:2947 \
            > "$dir/log" 2>&1 < /dev/null &
        daemon=$!
        for _ in $(seq 150); do [ -S "$dir/sock" ] && "$4" status location --socket "$dir/sock" --broker > /dev/null 2>&1 && break; sleep 0.1; done
        "$4" grant location --user "$5" --accuracy city --socket "$dir/sock" > /dev/null || exit 5
        as() { uid=$1; shift; setpriv --reuid="$uid" --regid=65534 --clear-groups "$@"; }
        echo "== granted 127.0.0.1"; as "$6" timeout 20 gpspipe -w -n 8 127.0.0.1:2947
        echo "== granted ::1"; as "$6" timeout 20 /usr/bin/python3 -c '
        import socket
        s = socket.create_connection(("::1", 2947), timeout=10)
        s.sendall(b"?WATCH={\"enable\":true};")
        buffer = b""
        while buffer.count(b"\n") < 6:
            chunk = s.recv(65536)
            if not chunk:
                break
            buffer += chunk
        print(buffer.decode(), end="")'
        echo "== ungranted"; as "$7" timeout 20 gpspipe -w -n 2 127.0.0.1:2947
        echo "== root"; timeout 20 gpspipe -w -n 1 127.0.0.1:2947
        echo "== status"; "$4" status location --json --gpsd 127.0.0.1:2947 --gpsd-timeout 3000 | tr -d '\n'; echo
        echo "== end"
        kill -KILL "$daemon" 2>/dev/null
        kill -KILL -- -"$feeder" 2>/dev/null
        rm -rf "$dir"
        """#

    /// With the rule, gpsd's clients need no change: a plain user's gpspipe pointed at
    /// gpsd's own port (127.0.0.1:2947, and ::1) is redirected to devaccessd's endpoint,
    /// which knows the user from the kernel (sock_diag, with the address dialled from
    /// conntrack) and serves them at their grant (city: the 10 km cell, no altitude); a
    /// user without a grant is told why; root still reaches gpsd itself; status says gated.
    @Test(.enabled(if: GpsFakeProcess.isInstalled, "gpsfake is not installed"))
    func withTheRuleGpsdsClientsReachDevaccessdUnchanged() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/nft") else {
            Issue.record("nft is not installed: apt-get install nftables (scripts/debian-packages.txt)")
            return
        }
        let granted = try TestUser("gateredir")
        let ungranted = try TestUser("gateredno")
        let log = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Unit/DevAccessHardware/Fixtures/gps/fix-3d.nmea").standardizedFileURL.path
        let result = try TestProcess.run("/usr/bin/unshare", ["--net", "--", "/usr/bin/bash", "-c", Self.redirectScript,
                                                              "gate", Self.ruleFile, log, RunningDaemon.binary,
                                                              TestProcess.devaccessBinary, granted.name,
                                                              String(granted.uid), String(ungranted.uid)])
        var sections: [String: [[String: Any]]] = [:]
        var statusLine = ""
        var current = ""
        // gpsd ends its lines with CR LF, which Swift reads as one Character.
        for line in result.stdout.split(whereSeparator: \.isNewline).map(String.init) {
            if line.hasPrefix("== ") {
                current = String(line.dropFirst(3))
            } else if current == "status" {
                statusLine = line
            } else if let report = try? json(line) {
                sections[current, default: []].append(report)
            }
        }
        try #require(sections["end"] == nil && result.stdout.contains("== end"), "\(result.stdout) \(result.stderr)")
        for name in ["granted 127.0.0.1", "granted ::1"] {
            let reports = sections[name] ?? []
            #expect(reports.first?["class"] as? String == "VERSION" && reports.first?["rev"] as? String == "devaccessd",
                    "\(name): \(reports)")
            let tpv = reports.filter { $0["class"] as? String == "TPV" && $0["lat"] != nil }
            #expect(!tpv.isEmpty, "\(name): \(reports)")
            for report in tpv {
                // City: eph is the cell's 10 km, no altitude, no speed (what exact would carry).
                #expect(report["eph"] as? Double == 10_000 && report["altMSL"] == nil && report["speed"] == nil,
                        "\(name): \(report)")
            }
        }
        let refused = sections["ungranted"] ?? []
        #expect(refused.contains { ($0["message"] as? String)?.contains("no location grant") == true }
                    && !refused.contains { $0["class"] as? String == "TPV" }, "\(refused)")
        let root = sections["root"] ?? []
        #expect(root.first?["class"] as? String == "VERSION" && root.first?["rev"] as? String != "devaccessd",
                "root reaches gpsd itself: \(root)")
        let permissions = (try? json(statusLine))?["permissions"] as? [[String: Any]] ?? []
        let status = permissions.first { $0["permission"] as? String == "location" } ?? [:]
        #expect(Self.reasons(status).contains { $0.contains("127.0.0.1:2947 is gated: only devaccessd reaches it") },
                "\(statusLine)")
    }
}
