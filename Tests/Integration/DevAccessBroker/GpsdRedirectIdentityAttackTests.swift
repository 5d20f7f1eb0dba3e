import Testing
import Foundation
import DevAccessTestSupport

/// Being taken for someone else through the gpsd rule's redirect, for real: the rule
/// loaded in a network namespace of the test's own, devaccessd's endpoint on 947.
///
/// The endpoint knows a redirected client by the port it came from (as it sees it) and the
/// address it dialled (conntrack's SO_ORIGINAL_DST). A plain user can make conntrack
/// rewrite that port: a socket on port X connected to the endpoint directly, then a
/// second one on X (SO_REUSEADDR, both) dialling gpsd's port: redirected, it would be the
/// same connection as the first, so conntrack gives it a random source port P. The
/// endpoint then looked up the socket at P dialling 127.0.0.1:2947 and found another's:
/// a listener on P (sock_diag falls back to one) or a connection of root's that reached
/// gpsd itself (devaccessd's own is always there). At ~3000 tries a second, one listener
/// or one root connection is hit within a minute; here the victims hold many, so that
/// every few tries hit.
@Suite(.serialized)
struct GpsdRedirectIdentityAttackTests {
    /// $1: the rule; $2: devaccessd; $3: devaccess; $4: the attacker's uid; $5: the
    /// victim's uid and $6 name (granted exact); $7: the attempts. Prints the first line
    /// the endpoint sent each attempt.
    static let script = #"""
        set -u
        ip link set lo up || exit 3
        nft -f "$1" || exit 4
        ready=$(mktemp -d); chmod 777 "$ready"
        # The victim: listeners on 9000 ports of 127.0.0.1. Root: a listener on gpsd's port
        # (it closes what it accepts) and 9000 connections to it, held.
        setpriv --reuid="$5" --regid=65534 --clear-groups /usr/bin/python3 -c '
        import socket, sys, time, resource
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        held = []
        for _ in range(9000):
            s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); held.append(s)
        open(sys.argv[1] + "/victim", "w").close()
        time.sleep(120)' "$ready" &
        victim=$!
        /usr/bin/python3 -c '
        import socket, sys, time, resource, threading
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        gpsd = socket.socket(); gpsd.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        gpsd.bind(("127.0.0.1", 2947)); gpsd.listen(4096)
        def serve():
            while True:
                gpsd.accept()[0].close()
        threading.Thread(target=serve, daemon=True).start()
        held = [socket.create_connection(("127.0.0.1", 2947)) for _ in range(9000)]
        open(sys.argv[1] + "/root", "w").close()
        time.sleep(120)' "$ready" &
        root=$!
        for _ in $(seq 300); do [ -e "$ready/victim" ] && [ -e "$ready/root" ] && break; sleep 0.1; done
        dir=$(mktemp -d)
        setsid "$2" --socket "$dir/sock" --state-dir "$dir/state" --log-target stderr --gpsd 127.0.0.1:2947 \
            > "$dir/log" 2>&1 < /dev/null &
        daemon=$!
        for _ in $(seq 150); do [ -S "$dir/sock" ] && "$3" status location --socket "$dir/sock" --broker > /dev/null 2>&1 && break; sleep 0.1; done
        "$3" grant location --user "$6" --accuracy exact --socket "$dir/sock" > /dev/null || exit 5
        "$3" grant location --user root --accuracy exact --socket "$dir/sock" > /dev/null || exit 6
        setpriv --reuid="$4" --regid=65534 --clear-groups /usr/bin/python3 -c '
        import socket, struct, sys
        for _ in range(int(sys.argv[1])):
            direct = socket.socket(); direct.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            direct.bind(("127.0.0.1", 0)); direct.connect(("127.0.0.1", 947))
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(direct.getsockname()); s.settimeout(5)
            try:
                s.connect(("127.0.0.1", 2947))
                print(s.makefile("rb").readline().decode(errors="replace").strip(), flush=True)
            except OSError as error:
                print("failed:", error, flush=True)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); s.close(); direct.close()
        ' "$7"
        kill -KILL "$daemon" "$victim" "$root" 2>/dev/null
        rm -rf "$dir" "$ready"
        """#

    @Test func aRewrittenSourcePortIsNotTakenForAnotherUserOrRoot() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/nft") else {
            Issue.record("nft is not installed: apt-get install nftables (scripts/debian-packages.txt)")
            return
        }
        let attacker = try TestUser("redirid")
        let victim = try TestUser("redirvic")
        let result = try TestProcess.run("/usr/bin/unshare", ["--net", "--", "/usr/bin/bash", "-c", Self.script, "gate",
                                                              GpsdGateTests.ruleFile, RunningDaemon.binary,
                                                              TestProcess.devaccessBinary, String(attacker.uid),
                                                              String(victim.uid), victim.name, "60"])
        let answers = result.stdout.split(separator: "\n").map(String.init)
        try #require(answers.count == 60, "\(result.stdout) \(result.stderr)")
        // The attack happened: conntrack rewrote ports (the endpoint found nobody there)...
        #expect(answers.contains { $0.contains("cannot tell who connected") }, "\(answers)")
        // ...and nobody else's grant served it: no banner, no other name.
        for answer in answers {
            #expect(answer.contains("cannot tell who connected")
                        || answer.contains("\(attacker.name) may not know this computer's location"), "\(answer)")
        }
    }
}
