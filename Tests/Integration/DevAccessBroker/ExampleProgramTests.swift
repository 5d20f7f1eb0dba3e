import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessLedger
import DevAccessTestSupport

/// Examples/snapshot and Examples/watch, built with the package, run as real users.
@Suite(.serialized, .enabled(if: isRoot, "starts devaccessd as root, makes users and nodes"))
struct ExampleProgramTests {
    /// Refused by the policy: the snapshot says why and writes nothing.
    @Test func snapshotIsRefusedWithoutConsent() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=deny\n")
        let erin = try TestUser("snapno")
        let output = try TemporaryDirectory()
        try TestProcess.setup("chown", ["\(erin.uid)", output.path])
        let run = try erin.run(LibraryProbe.built("snapshot"), [output.path + "/frame.ppm"],
                               environment: ["DEVACCESS_SOCKET": setup.daemon.socketPath])
        #expect(run.status == 77, "\(run.stdout) \(run.stderr)")
        #expect(run.stderr.contains("camera is restricted by the machine's policy"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: output.path + "/frame.ppm"))
        #expect(try !setup.ledger().events().map(\.event).contains { $0.type == .deviceOpen })
    }

    /// Allowed: devaccessd grants it for the snapshot's life and opens the node for it (an
    /// audited open). The test node is /dev/null's, not a camera: V4L2 says so, nothing is written.
    @Test func snapshotGetsTheNodeFromDevaccessd() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=allow\n")
        let erin = try TestUser("snapyes")
        let output = try TemporaryDirectory()
        try TestProcess.setup("chown", ["\(erin.uid)", output.path])
        let run = try erin.run(LibraryProbe.built("snapshot"), [output.path + "/frame.ppm"],
                               environment: ["DEVACCESS_SOCKET": setup.daemon.socketPath])
        #expect(run.status == 74 && run.stderr.contains("not a V4L2 device"), "\(run.stdout) \(run.stderr)")
        let opens = try setup.ledger().events().map(\.event).filter { $0.type == .deviceOpen }
        #expect(opens.count == 1 && opens.first?.subject?.uid == erin.uid, "\(opens)")
        #expect(opens.first?.program == DaemonTests.realPath(LibraryProbe.built("snapshot")))
    }

    /// A real capture where vivid is loaded (the VM: `modprobe vivid`): a frame of vivid's
    /// test pattern, which is not one colour, as an unprivileged user through devaccessd.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/sys/module/vivid"), "vivid is not loaded"))
    func snapshotCapturesAVividFrame() throws {
        let config = try TemporaryDirectory()
        try Data("[camera]\nDefault=allow\n".utf8).write(to: URL(fileURLWithPath: config.path + "/devaccess.conf"))
        let daemon = try RunningDaemon(arguments: ["--config-dir", config.path])
        let erin = try TestUser("snapvivid")
        let output = try TemporaryDirectory()
        try TestProcess.setup("chown", ["\(erin.uid)", output.path])
        let frame = output.path + "/frame.ppm"
        let run = try erin.run(LibraryProbe.built("snapshot"), [frame], environment: ["DEVACCESS_SOCKET": daemon.socketPath])
        #expect(run.status == 0, "\(run.stdout) \(run.stderr)")
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: frame)))
        #expect(bytes.starts(with: Array("P6\n".utf8)))
        let pixels = bytes.suffix(from: min(bytes.count, 15))
        #expect(Set(pixels).count > 8, "the frame is (nearly) one colour")
    }

    /// An app on the library links the Swift runtime and libc, nothing of the engine (issue 26).
    /// The manifest's side of it is scripts/check-library-closure.sh (`make lint`).
    @Test(arguments: ["watch", "snapshot", "devaccess-library-probe"])
    func theLibraryLinksNoEngineLibrary(program: String) throws {
        let linked = try TestProcess.setup("ldd", [LibraryProbe.built(program)]).stdout
        #expect(linked.contains("libswiftCore.so"), "ldd did not list \(program)'s libraries: \(linked)")
        let engine = ["libsqlite3", "libcrypto", "libudev", "libasound", "libpam", "libacl", "libsystemd"]
        let found = engine.filter { linked.contains($0 + ".so") }
        #expect(found.isEmpty, "\(program) links \(found): \(linked)")
    }

    /// watch prints the status, then the change devaccessd pushes.
    @Test func watchPrintsPushedChanges() throws {
        let setup = try RequestSetup(policy: "[camera]\nDefault=ask\n")
        let erin = try TestUser("watchex")
        let watch = try RunningProbe(erin, socket: setup.daemon.socketPath, ["camera"], binary: LibraryProbe.built("watch"))
        let deadline = Date().addingTimeInterval(10)
        while !watch.text.contains("notDetermined") && Date() < deadline { usleep(10_000) }
        #expect(watch.text.contains("camera") && watch.text.contains("notDetermined"), "\(watch.text)")
        #expect(try TestProcess.devaccess(["grant", "camera", "--user", erin.name] + setup.socket).status == 0)
        while !watch.text.contains("authorized") && Date() < deadline.addingTimeInterval(5) { usleep(10_000) }
        #expect(watch.text.contains("authorized"), "\(watch.text)")
    }
}
