import Testing
import Foundation
import DevAccessTestSupport

/// config/nftables/devaccess-gpsd.nft, loaded for real in a network namespace of the
/// test's own: gpsd's port refuses a plain user and serves root (devaccessd), on IPv4 and
/// IPv6 loopback. A listener stands in for gpsd: the rule is about who may connect.
@Suite(.serialized)
struct GpsdGateTests {
    static let ruleFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../config/nftables/devaccess-gpsd.nft").standardizedFileURL.path

    /// $1: the rule file or "none"; $2: the user's uid. Prints one line per attempt.
    static let script = #"""
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
}
