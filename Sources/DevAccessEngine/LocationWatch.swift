import DevAccessHardware
import DevAccessInterface

/// `devaccess monitor`'s location: follows a gpsd endpoint (devaccessd's, by default) for
/// receivers that come and go and fixes that change, on the watcher's own thread. The CLI
/// reaches gpsd's client (DevAccessHardware) only through here.
public final class LocationWatch: Sendable {
    /// What changed, in the words monitor prints.
    public enum Event: Sendable {
        /// The connection ended or could not be made, with the reason.
        case unavailable(problem: String)
        case receiverAdded(path: String)
        case receiverRemoved(path: String)
        /// A receiver's fix changed between `none`, `2d` and `3d`.
        case fixChanged(device: String, from: String, to: String)
    }

    private let watcher: GpsdWatcher

    /// `endpoint`: `HOST:PORT`; one that does not parse is a bad argument saying why.
    public init(endpoint: String) throws(InterfaceError) {
        do {
            watcher = GpsdWatcher(endpoint: try GpsdEndpoint(parsing: endpoint))
        } catch {
            throw .badArgument(error.description)
        }
    }

    /// Starts watching; `handler` gets each change. A watch that cannot start fails saying why.
    public func start(_ handler: @escaping @Sendable (Event) -> Void) throws(InterfaceError) {
        watcher.setChangeHandler { change in
            switch change {
            case .connected: return
            case .disconnected(let problem): handler(.unavailable(problem: problem))
            case .receiverAdded(let path): handler(.receiverAdded(path: path))
            case .receiverRemoved(let path): handler(.receiverRemoved(path: path))
            case .fixModeChanged(let device, let from, let to): handler(.fixChanged(device: device, from: from.word, to: to.word))
            }
        }
        do {
            try watcher.start()
        } catch {
            throw .failed(error.description)
        }
    }

    public func stop() { watcher.stop() }
}
