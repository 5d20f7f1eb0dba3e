import FoundationEssentials
import Glibc
import Synchronization
import DevAccessCore
import DevAccessSystem
import DevAccessLedger
import DevAccessProtocol
import DevAccessLaunch

/// A run's program: forked as its user and held before exec (`ProgramLauncher.hold`) until
/// devaccessd has recorded the run and applied its access (so the program never starts
/// without its access, nor runs unrecorded), then released. It stays devaccessd's child and
/// is reaped only after its end is recorded: until then its pid and process group cannot
/// name another process, so relayed signals reach that program and its group only.
final class HeldProgram: Sendable {
    let pid: Int32
    let holder: ProcessHolder
    private let held: HeldLaunch
    private let launched = Mutex<LaunchedProcess?>(nil)
    private let state = Mutex(State())

    private struct State {
        var execFailure: String?
        var hungUp = false
    }

    private init(held: HeldLaunch, holder: ProcessHolder) {
        self.held = held
        self.pid = held.pid
        self.holder = holder
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func start(program: RunProgram, arguments: [String], environment: [String], directory: String,
                      umask: UInt32, streams: [CInt], uid: UInt32, gid: UInt32, groups: [UInt32],
                      limits: [ResourceLimit], strict: LandlockRuleset?) throws(Failure) -> HeldProgram {
        guard let bootID = ProcessTable.bootID() else { throw Failure(description: "the boot id cannot be read") }
        var spec = LaunchSpec(executable: program.path, arguments: arguments, environment: environment,
                              workingDirectory: directory, standardInput: streams[0], standardOutput: streams[1],
                              standardError: streams[2], uid: uid, gid: gid, supplementaryGroups: groups,
                              umask: umask, landlock: strict)
        // The file devaccessd opened as the caller and decided on, not whatever the path names now.
        spec.executableDescriptor = program.descriptor
        spec.guardedGroup = groups.last { RunGroups.contains($0) }
        spec.resourceLimits = limits
        let held: HeldLaunch
        do {
            held = try ProgramLauncher.hold(spec)
        } catch {
            throw Failure(description: error.description)
        }
        guard let entry = ProcessTable.entry(held.pid) else {
            held.abandon()
            throw Failure(description: "the program's process (pid \(held.pid)) vanished before it could be recorded")
        }
        return HeldProgram(held: held, holder: ProcessHolder(pid: held.pid, startTicks: entry.startTicks,
                                                             bootID: bootID))
    }

    /// Lets the program exec. False when it did not (`execFailure` says why; the child is
    /// reaped then).
    func release() -> Bool {
        do {
            let process = try held.release()
            launched.withLock { $0 = process }
            return true
        } catch {
            state.withLock { $0.execFailure = error.description }
            return false
        }
    }

    var execFailure: String? { state.withLock { $0.execFailure } }

    /// The program is not to run: it exits 127 unrun and is reaped.
    func abandon() { held.abandon() }

    /// Relays a client's signal to the program's process group, while it is unreaped.
    func relay(_ signal: Int32) {
        guard Self.relayable.contains(signal) else { return }
        _ = launched.withLock { $0 }?.signalGroup(signal)
    }

    static let relayable: Set<Int32> = [SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGTSTP, SIGCONT,
                                        SIGWINCH, SIGTTIN, SIGTTOU]

    /// The client is gone (its terminal with it, as far as the program can tell): SIGHUP and
    /// SIGCONT to the group, as a closing terminal would send; SIGKILL after `grace`, to the
    /// group and to the program itself: a program that moved into another group (its own
    /// child's) would otherwise keep running, and its run's access, with no client.
    func hangUp(grace: Duration = .seconds(10)) {
        guard let process = launched.withLock({ $0 }) else { return }
        let first = state.withLock { state -> Bool in
            defer { state.hungUp = true }
            return !state.hungUp
        }
        guard first else { return }
        process.signalGroup(SIGHUP)
        process.signalGroup(SIGCONT)
        do throws(Errno) {
            try DetachedThread.start(name: "devaccessd hang-up") {
                ThreadSleep.sleep(for: .seconds(grace.components.seconds))
                process.signalGroup(SIGKILL)
                process.signalProgram(SIGKILL)
            }
        } catch {
            // No thread to wait out the grace period on: end it now rather than leave it running.
            process.signalGroup(SIGKILL)
            process.signalProgram(SIGKILL)
        }
    }

    /// Waits (on a thread of its own) until the program ended, without reaping it.
    func exit() async -> ProcessExit {
        guard let process = launched.withLock({ $0 }) else { return .exited(127) }
        return await DetachedThread.run(name: "devaccessd run wait") {
            (try? process.waitUntilEnded()) ?? .exited(127)
        }
    }

    /// Frees the pid, once the run's end is recorded. Nothing is sent to the group after.
    func reap() {
        _ = try? launched.withLock({ $0 })?.wait()
    }
}
