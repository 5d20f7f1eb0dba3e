import Testing
import Foundation
import DevAccessTestSupport

/// Ways round config/nftables/devaccess-gpsd.nft a plain user would try, in a network
/// namespace of the test's own with the rule loaded and a listener on gpsd's port: an
/// IPv4-mapped IPv6 address (an AF_INET6 socket whose packets are IPv4), and a user
/// namespace in which the user is uid 0 (the rule's `meta skuid` is the kernel's uid).
@Suite(.serialized)
struct GpsdGateAttackTests {
    static let ruleFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../../config/nftables/devaccess-gpsd.nft").standardizedFileURL.path

    /// $1: the rule file; $2: the user's uid. Prints one line per attempt.
    static let script = GpsdGateTests.prelude + "\n" + #"""
        probe='
        import socket, sys
        s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
        s.settimeout(3)
        try:
            s.connect((sys.argv[1], 2947))
            print(sys.argv[2], sys.argv[1], "open")
        except OSError:
            print(sys.argv[2], sys.argv[1], "refused")'
        as_user="setpriv --reuid=$2 --regid=65534 --clear-groups"
        $as_user /usr/bin/python3 -c "$probe" ::ffff:127.0.0.1 user
        if $as_user unshare --user --map-root-user true 2>/dev/null; then
          $as_user unshare --user --map-root-user /usr/bin/python3 -c "$probe" 127.0.0.1 userns-root
          $as_user unshare --user --map-root-user /usr/bin/python3 -c "$probe" ::1 userns-root
        else
          echo "userns unavailable"
        fi
        /usr/bin/python3 -c "$probe" ::ffff:127.0.0.1 root
        kill -KILL "$listener"
        """#

    @Test func mappedAddressesAndUserNamespacesDoNotGetPastTheRule() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/nft") else {
            Issue.record("nft is not installed: apt-get install nftables (scripts/debian-packages.txt)")
            return
        }
        let user = try TestUser("gateatk")
        let result = try TestProcess.run("/usr/bin/unshare", ["--net", "--", "/usr/bin/bash", "-c", Self.script, "gate",
                                                              Self.ruleFile, String(user.uid)])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        // Where unprivileged user namespaces are off there is nothing to try that way.
        let userns = lines.contains("userns unavailable") ? ["userns unavailable"]
            : ["userns-root 127.0.0.1 refused", "userns-root ::1 refused"]
        #expect(lines == ["user ::ffff:127.0.0.1 refused"] + userns + ["root ::ffff:127.0.0.1 open"],
                "\(result.stdout) \(result.stderr)")
    }
}
