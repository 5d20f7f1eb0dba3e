import Testing
import Glibc
import Dispatch
import Synchronization
import DevAccessSystem
import DevAccessEngine

/// `EngineLock.daemonHolding` is read by a second devaccessd that could not take the lock.
/// Only a file of the lock's own kind (a regular file of this process's user) is read;
/// anything else in its place names no daemon and never blocks (hostile review 7: a FIFO
/// there blocked the open). The daemon it names is checked by DaemonTests'
/// `aSecondDaemonOnTheSameStateRefusesAtOnceNamingTheFirst`.
struct EngineLockTests {
    enum SetupFailure: Error { case cannotMake, timedOut }

    private static func scratch() throws -> String {
        var template = Array("/tmp/devaccess-enginelock-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw SetupFailure.cannotMake }
        return String(cString: made)
    }

    /// Asks on a thread of its own, so an open that blocks fails the test instead of hanging it.
    private static func holding(_ directory: String) throws -> Int32? {
        let done = DispatchSemaphore(value: 0)
        let answer = Mutex<Int32?>(nil)
        try DetachedThread.start {
            let pid = EngineLock.daemonHolding(stateDirectory: directory)
            answer.withLock { $0 = pid }
            done.signal()
        }
        guard done.wait(timeout: .now() + 5) == .success else { throw SetupFailure.timedOut }
        return answer.withLock { $0 }
    }

    @Test func aFIFOInTheLocksPlaceNamesNoDaemonAndDoesNotBlock() throws {
        let directory = try Self.scratch()
        let path = directory + "/" + EngineLock.fileName
        defer { unlink(path); rmdir(directory) }
        #expect(mkfifo(path, 0o666) == 0)
        #expect(try Self.holding(directory) == nil)
    }
}
