import DevAccessCore
import DevAccessSystem
import DevAccessTestSupport
import Foundation
import Glibc
import Testing
import DevAccessLaunch

/// `--strict`: a program confined by `LandlockRuleset.allowingEverythingExcept` cannot open
/// the denied node by any path, while its run group's ACL would let it; everything else works.
@Suite(.serialized, .enabled(if: isRoot, "needs root: creates users, device nodes and ACLs, switches ids"))
struct LandlockRulesetTests {
    let user: TestUser
    let runGroup: UInt32
    let devices: DeviceDirectory
    let scratch: TemporaryDirectory
    let launch: Launch

    init() throws {
        user = try TestUser("strict")
        runGroup = testRunGroup()
        devices = try DeviceDirectory()
        scratch = try TemporaryDirectory()
        launch = Launch(user: user, groups: [user.gid, runGroup])
    }

    /// Tries each way in, prints `name=opened` or `name=ERRNO`, one a line.
    static let probe = #"""
        import os, sys, errno, subprocess, tempfile
        denied, allowed, link, devlink, script = sys.argv[1:6]
        def attempt(name, action):
            try:
                action(); print(name + "=ok")
            except OSError as e:
                print(name + "=" + errno.errorcode[e.errno])
        def opening(path, flags):
            return lambda: os.close(os.open(path, flags))
        def reopen():
            fd = os.open(denied, os.O_PATH)
            try:
                os.close(os.open("/proc/self/fd/%d" % fd, os.O_RDWR))
            finally:
                os.close(fd)
        def write_tmp():
            fd, path = tempfile.mkstemp(dir="/tmp")
            os.write(fd, b"x"); os.close(fd); os.unlink(path)
        def run(argv):
            def go():
                if subprocess.run(argv).returncode != 0: raise OSError(errno.EIO, "exit status")
            return go
        attempt("allowed-rw", opening(allowed, os.O_RDWR))
        attempt("denied-rw", opening(denied, os.O_RDWR))
        attempt("denied-read", opening(denied, os.O_RDONLY))
        attempt("denied-write", opening(denied, os.O_WRONLY))
        attempt("symlink-in-tmp", opening(link, os.O_RDWR))
        attempt("symlink-beside", opening(devlink, os.O_RDWR))
        attempt("proc-root", opening("/proc/self/root" + denied, os.O_RDWR))
        attempt("o-path", opening(denied, os.O_PATH))
        attempt("proc-fd-reopen", reopen)
        attempt("etc-passwd", lambda: open("/etc/passwd").read())
        attempt("write-tmp", write_tmp)
        attempt("exec-true", run(["/bin/true"]))
        attempt("exec-script", run([script]))
        print("no-new-privs=" + [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0])
        """#

    /// The denied node, a node beside it with the same ACL, symlinks to the denied one (in
    /// /tmp and beside it, like /dev/v4l/by-id), and a shell script to execute.
    func fixture() throws -> (denied: String, arguments: [String]) {
        let denied = try devices.makeNode("video0", aclGroup: runGroup)
        let allowed = try devices.makeNode("video1", aclGroup: runGroup)
        let link = scratch.path + "/camera-link"
        let devlink = devices.path + "/by-id-camera"
        #expect(symlink(denied, link) == 0 && symlink("video0", devlink) == 0)
        let script = scratch.path + "/hello.sh"
        #expect(FileManager.default.createFile(atPath: script, contents: Data("#!/bin/sh\nexit 0\n".utf8),
                                               attributes: [.posixPermissions: 0o755]))
        return (denied, [denied, allowed, link, devlink, script])
    }

    func results(_ finished: Finished) -> [String: String] {
        Dictionary(finished.output.split(separator: "\n").compactMap { line -> (String, String)? in
            let parts = line.split(separator: "=", maxSplits: 1)
            return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
        }, uniquingKeysWith: { first, _ in first })
    }

    @Test func theKernelHasLandlock() {
        // Skipping the suite silently would hide a kernel booted without Landlock.
        #expect(LandlockRuleset.abiVersion() != nil, "this kernel has no Landlock: --strict cannot work here")
    }

    @Test func theDeniedNodeStaysClosedByEveryPathAndTheRestWorks() throws {
        try #require(LandlockRuleset.abiVersion() != nil, "no Landlock in this kernel")
        let (denied, arguments) = try fixture()
        // Without Landlock the run group's ACL opens both nodes, by any path.
        let open = results(try launch.python(Self.probe, arguments))
        for name in ["allowed-rw", "denied-rw", "symlink-in-tmp", "symlink-beside", "proc-root", "proc-fd-reopen",
                     "etc-passwd", "write-tmp", "exec-true", "exec-script"] {
            #expect(open[name] == "ok", "without Landlock, \(name): \(open[name] ?? "missing")")
        }
        #expect(open["no-new-privs"] == "0")

        let ruleset = try LandlockRuleset.allowingEverythingExcept([denied])
        #expect(ruleset.deniedPaths == [denied])
        var strict = launch
        strict.landlock = ruleset
        let finished = try strict.python(Self.probe, arguments)
        let confined = results(finished)
        let expected = [
            "allowed-rw": "ok", "denied-rw": "EACCES", "denied-read": "EACCES", "denied-write": "EACCES",
            "symlink-in-tmp": "EACCES", "symlink-beside": "EACCES", "proc-root": "EACCES",
            // O_PATH opens nothing (no read, no write, no driver): allowed, but reopening it is not.
            "o-path": "ok", "proc-fd-reopen": "EACCES",
            "etc-passwd": "ok", "write-tmp": "ok", "exec-true": "ok", "exec-script": "ok", "no-new-privs": "1",
        ]
        #expect(confined == expected, "\(finished.output)\(finished.errors)")
    }

    /// Denied as a symlink (e.g. /dev/v4l/by-id/...): the node it resolves to is what is denied.
    @Test func aDeniedSymlinkDeniesItsTarget() throws {
        try #require(LandlockRuleset.abiVersion() != nil, "no Landlock in this kernel")
        let (denied, arguments) = try fixture()
        let ruleset = try LandlockRuleset.allowingEverythingExcept([devices.path + "/by-id-camera"])
        #expect(ruleset.deniedPaths == [denied])
        var strict = launch
        strict.landlock = ruleset
        let confined = results(try strict.python(Self.probe, arguments))
        #expect(confined["denied-rw"] == "EACCES" && confined["allowed-rw"] == "ok", "\(confined)")
    }

    /// A node that appears later directly in a directory on the way to a denied one (a
    /// device plugged in meanwhile) is denied too: fail closed.
    @Test func aNodeCreatedLaterBesideADeniedOneIsDenied() throws {
        try #require(LandlockRuleset.abiVersion() != nil, "no Landlock in this kernel")
        let denied = try devices.makeNode("video0", aclGroup: runGroup)
        let ruleset = try LandlockRuleset.allowingEverythingExcept([denied])
        let later = try devices.makeNode("video2", aclGroup: runGroup)
        var strict = launch
        strict.landlock = ruleset
        let open = "import os, sys\ntry:\n  os.close(os.open(sys.argv[1], os.O_RDWR)); print('ok')\nexcept OSError as e: print(e.errno)"
        #expect(try strict.python(open, [later]).output == "\(EACCES)\n")
        #expect(try launch.python(open, [later]).output == "ok\n")
    }

    @Test func aClosedRulesetIsALaunchError() throws {
        try #require(LandlockRuleset.abiVersion() != nil, "no Landlock in this kernel")
        let ruleset = try LandlockRuleset.allowingEverythingExcept([devices.path + "/nothing-here"])
        ruleset.close()
        #expect(ruleset.isClosed)
        var strict = launch
        strict.landlock = ruleset
        let error = try #require(throws: LaunchError.self) { try strict.run("/bin/true", ["true"]) }
        #expect(error.step == .landlock)
    }

    /// Nothing to deny still confines (no mounts), but must not deny everything: a ruleset
    /// without rules would.
    @Test func anEmptyDenyListAllowsEveryOpen() throws {
        try #require(LandlockRuleset.abiVersion() != nil, "no Landlock in this kernel")
        let (_, arguments) = try fixture()
        var strict = launch
        strict.landlock = try LandlockRuleset.allowingEverythingExcept([])
        let finished = try strict.python(Self.probe, arguments)
        let confined = results(finished).filter { $0.key != "no-new-privs" }
        #expect(!confined.isEmpty && confined.values.allSatisfy { $0 == "ok" }, "\(finished.output)\(finished.errors)")
    }

    /// A missing node is denied where it would appear, through its directory's real path.
    @Test func aMissingNodeIsDeniedWhereItWouldAppear() throws {
        let link = scratch.path + "/devices"
        #expect(symlink(devices.path, link) == 0)
        let ruleset = try LandlockRuleset.allowingEverythingExcept([link + "/./video9"])
        #expect(ruleset.deniedPaths == [devices.path + "/video9"])
    }

    @Test func pathsItRefuses() {
        #expect(throws: LandlockError.notAbsolute("dev/video0")) { try LandlockRuleset.allowingEverythingExcept(["dev/video0"]) }
        #expect(throws: LandlockError.deniesEverything) { try LandlockRuleset.allowingEverythingExcept(["/dev/.."]) }
    }
}
