// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "devaccess",
    products: [
        .executable(name: "devaccess", targets: ["devaccess"]),
        .executable(name: "devaccessd", targets: ["devaccessd"]),
        .library(name: "DevAccessCore", targets: ["DevAccessCore"]),
        // The Swift client library: status, request, updates, open, location through devaccessd.
        .library(name: "DevAccess", targets: ["DevAccess"]),
    ],
    targets: [
        // C libraries from Debian, each behind a small shim header.
        .systemLibrary(name: "CUdev", pkgConfig: "libudev", providers: [.apt(["libudev-dev"])]),
        // V4L2 kernel API (header-only; why not libv4l2: Sources/CV4L2/shim.h).
        .systemLibrary(name: "CV4L2"),
        // libv4l2 + libv4lconvert: Examples/snapshot's format conversion, nothing else links it.
        .systemLibrary(name: "CV4L2Lib", pkgConfig: "libv4l2", providers: [.apt(["libv4l-dev"])]),
        .systemLibrary(name: "CAlsa", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        .systemLibrary(name: "CAcl", pkgConfig: "libacl", providers: [.apt(["libacl1-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CPam", providers: [.apt(["libpam0g-dev"])]),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        // Header-only: kernel and libc helpers Swift cannot import directly (macros).
        .systemLibrary(name: "CLinux"),
        // fork + exec as another user for `devaccess run`, and Landlock: C because the code
        // between fork and exec may only make async-signal-safe calls.
        .target(name: "CSpawn"),

        // The model: permissions, statuses, reasons, access evaluation. Pure, no I/O.
        .target(name: "DevAccessCore"),
        // The command-line parser of both executables: options, help text, usage errors; the
        // parsed command carries the environment its main read (options override variables).
        .target(name: "DevAccessArguments", dependencies: ["DevAccessCore"]),
        // The system-call layer, libc only: errno, descriptors, stat, users, groups, processes,
        // sockets, time. The client library links it, so it links no C library but libc.
        .target(name: "DevAccessSystem", dependencies: ["DevAccessCore", "CLinux"]),
        // POSIX ACLs on device nodes (libacl): read, write, lock a node down, inspect a node.
        .target(name: "DevAccessACL", dependencies: ["DevAccessCore", "DevAccessSystem", "CAcl", "CLinux"]),
        // Password checks through PAM (libpam), for consent that asks for a password.
        .target(name: "DevAccessPAM", dependencies: ["CPam"]),
        // Writing to the systemd journal (libsystemd).
        .target(name: "DevAccessJournal", dependencies: ["CSystemd"]),
        // Starting `devaccess run`'s program as its user (CSpawn), its environment, Landlock rulesets.
        .target(name: "DevAccessLaunch", dependencies: ["DevAccessCore", "DevAccessSystem", "CLinux", "CSpawn"]),
        // Authority adapters: camera (udev + V4L2), microphone (ALSA), location (gpsd).
        .target(name: "DevAccessHardware",
                dependencies: ["DevAccessCore", "DevAccessSystem", "DevAccessACL", "CUdev", "CV4L2", "CAlsa",
                               "CLinux"]),
        // The grant ledger: SQLite, versioned schema, hash-chained audit events, journal export.
        .target(name: "DevAccessLedger",
                dependencies: ["DevAccessCore", "DevAccessSystem", "DevAccessJournal", "CSQLite", "CCrypto"]),
        // Turns ledger decisions into ACL entries on device nodes and back; reconcile, drift.
        .target(name: "DevAccessEnforcement",
                dependencies: ["DevAccessCore", "DevAccessSystem", "DevAccessACL", "DevAccessHardware",
                               "DevAccessLedger"]),
        // The contract: every operation that decides or records, as one Swift protocol, its
        // result documents and InterfaceError; the operation values and JSON (value, writer,
        // parser, the model's one encoder). The model only: no wire, no engine; its two
        // implementations: the broker client (DevAccess) and the engine (DevAccessEngine).
        .target(name: "DevAccessInterface", dependencies: ["DevAccessCore"]),
        // The engine behind the contract: EngineService (who may do what, for devaccessd and
        // `--offline`), the engine lock, the result documents built from the engine's records.
        .target(name: "DevAccessEngine",
                dependencies: ["DevAccessCore", "DevAccessSystem", "DevAccessHardware", "DevAccessLedger",
                               "DevAccessEnforcement", "DevAccessProtocol", "DevAccessInterface"]),
        // Commands, argument parsing and output; the executable only calls into it. It reaches
        // the ledger, enforcement and hardware only through the engine, devaccessd only through
        // DevAccess, and the values through Interface, never the wire (scripts/check-cli-imports.sh).
        .target(name: "DevAccessCLI",
                dependencies: ["DevAccessArguments", "DevAccessCore", "DevAccessSystem", "DevAccessInterface",
                               "DevAccessEngine", "DevAccess"]),
        .executableTarget(name: "devaccess", dependencies: ["DevAccessCLI", "DevAccessCore", "DevAccessSystem"]),
        // devaccessd's wire protocol: envelopes, the values' encoding and strict decoding,
        // framing, and the blocking client. It carries Interface's values.
        .target(name: "DevAccessProtocol", dependencies: ["DevAccessCore", "DevAccessInterface", "DevAccessSystem", "CLinux"]),
        // devaccessd's logic: socket server, peer identity, request handling; testable in-process.
        .target(name: "DevAccessBroker",
                dependencies: ["DevAccessArguments", "DevAccessCore", "DevAccessSystem", "DevAccessACL", "DevAccessPAM",
                               "DevAccessJournal", "DevAccessLaunch", "DevAccessHardware", "DevAccessLedger",
                               "DevAccessEnforcement", "DevAccessProtocol", "DevAccessInterface", "DevAccessEngine",
                               "CSystemd", "CLinux", "CSpawn"]),
        .executableTarget(name: "devaccessd", dependencies: ["DevAccessBroker", "DevAccessCore", "DevAccessSystem"]),
        // The client library for Swift programs (docs/client-library.md): async calls over
        // the protocol client; never the daemon's or the engine's code, so an app links libc
        // and the Swift runtime only (`make lint`: scripts/check-library-closure.sh).
        .target(name: "DevAccess",
                dependencies: ["DevAccessCore", "DevAccessProtocol", "DevAccessInterface", "DevAccessSystem"]),
        // The benchmark, run by hand (docs/performance.md): every figure against its anchor measured
        // in the same run (status round trips, load, memory, start-up, ledger, grant -> ACL, hotplug,
        // run, location), as a table or JSON (the interface's JSONWriter).
        .executableTarget(name: "devaccess-bench",
                          dependencies: ["DevAccessCore", "DevAccessSystem", "DevAccessLaunch", "DevAccessLedger",
                                         "DevAccessEnforcement", "DevAccessProtocol", "DevAccessInterface"]),

        // Examples of the library (docs/client-library.md): one camera frame as PPM, status changes.
        .executableTarget(name: "snapshot", dependencies: ["DevAccess", "CV4L2Lib"], path: "Examples/snapshot"),
        .executableTarget(name: "watch", dependencies: ["DevAccess"], path: "Examples/watch"),
        // The library's calls as a program run by a test as a real user (JSON lines out).
        .executableTarget(name: "devaccess-library-probe", dependencies: ["DevAccess"],
                          path: "Tests/UseCase/DevAccessLibraryProbe"),
        // Shared by the test targets: running binaries, real users, temporary nodes.
        .target(name: "DevAccessTestSupport", path: "Tests/Support"),
        // Tests by tier: Tests/Unit/<Module> (one module, its real system calls included),
        // Tests/Integration (the daemon, real users, nodes and ACLs), Tests/UseCase (the built
        // programs as people run them; the VM scenarios in Tests/UseCase/VM are the rest of this tier).
        .testTarget(name: "DevAccessCoreTests", dependencies: ["DevAccessCore"], path: "Tests/Unit/DevAccessCore"),
        .testTarget(name: "DevAccessHardwareTests",
                    dependencies: ["DevAccessCore", "DevAccessSystem", "DevAccessACL", "DevAccessPAM", "DevAccessHardware",
                                   "DevAccessTestSupport"],
                    path: "Tests/Unit/DevAccessHardware", exclude: ["Fixtures"]),
        .testTarget(name: "DevAccessLedgerTests", dependencies: ["DevAccessLedger", "DevAccessCore", "DevAccessTestSupport"],
                    path: "Tests/Unit/DevAccessLedger"),
        .testTarget(name: "DevAccessCLITests", dependencies: ["DevAccessArguments", "DevAccessCLI", "DevAccessCore", "DevAccessSystem",
                                                             "DevAccessProtocol", "DevAccessInterface", "DevAccessEngine",
                                                             "DevAccess", "DevAccessTestSupport"],
                    path: "Tests/UseCase/DevAccessCLI", exclude: ["Golden"]),
        .testTarget(name: "DevAccessProtocolTests",
                    dependencies: ["DevAccessProtocol", "DevAccessInterface", "DevAccessCore", "DevAccessSystem"],
                    path: "Tests/Unit/DevAccessProtocol"),
        .testTarget(name: "DevAccessBrokerTests",
                    dependencies: ["DevAccessArguments", "DevAccessBroker", "DevAccessProtocol", "DevAccessLedger", "DevAccessCore",
                                   "DevAccessSystem", "DevAccessACL", "DevAccessInterface", "DevAccessEngine",
                                   "DevAccessTestSupport"],
                    path: "Tests/Integration/DevAccessBroker"),
        .testTarget(name: "DevAccessEngineTests",
                    dependencies: ["DevAccessEngine", "DevAccessCore", "DevAccessLedger", "DevAccessProtocol",
                                   "DevAccessEnforcement", "DevAccessInterface", "DevAccessSystem"],
                    path: "Tests/Unit/DevAccessEngine"),
        .testTarget(name: "DevAccessSystemTests",
                    dependencies: ["DevAccessSystem", "DevAccessLaunch", "DevAccessCore", "DevAccessTestSupport"],
                    path: "Tests/Unit/DevAccessSystem"),
        .testTarget(name: "DevAccessEnforcementTests",
                    dependencies: ["DevAccessEnforcement", "DevAccessCore", "DevAccessSystem", "DevAccessACL", "DevAccessLedger",
                                   "DevAccessTestSupport"],
                    path: "Tests/Unit/DevAccessEnforcement"),
    ],
    swiftLanguageModes: [.v6]
)

// libFuzzer targets (docs/fuzzing.md), only in the manifest when DEVACCESS_FUZZ=1 so a plain
// `swift build` and `swift test` never see them: they link only with -sanitize=fuzzer.
// scripts/fuzz.sh builds them in .build/fuzz; each reaches internals with @testable import,
// which needs the debug configuration (SwiftPM compiles it with -enable-testing).
if Context.environment["DEVACCESS_FUZZ"] == "1" {
    package.targets.append(.target(name: "FuzzSupport", path: "Fuzz/Support"))
    let fuzzTargets: [(name: String, dependencies: [Target.Dependency])] = [
        ("fuzz-protocol", ["DevAccessProtocol", "DevAccessInterface", "DevAccessCore"]),
        ("fuzz-policy", ["DevAccessCore"]),
        ("fuzz-gpsd-reports", ["DevAccessHardware", "DevAccessCore"]),
        ("fuzz-time", ["DevAccessCLI", "DevAccessCore", "DevAccessSystem"]),
        ("fuzz-gpsd-session", ["DevAccessBroker", "DevAccessProtocol", "DevAccessInterface", "DevAccessCore"]),
        ("fuzz-uevent", ["DevAccessBroker", "DevAccessHardware", "DevAccessCore"]),
    ]
    for target in fuzzTargets {
        package.targets.append(.executableTarget(name: target.name, dependencies: target.dependencies + ["FuzzSupport"],
                                                 path: "Fuzz/Targets/\(target.name)"))
        package.products.append(.executable(name: target.name, targets: [target.name]))
    }
}
