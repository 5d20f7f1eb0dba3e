import DevAccessProtocol
import Glibc

extension DeviceAccess {
    /// `/run/devaccess/broker.sock`: where devaccessd listens unless told otherwise (the CLI's
    /// default when its main found no `$DEVACCESS_SOCKET`).
    @_spi(CLI) public static let defaultSocketPath = BrokerProtocol.defaultSocketPath

    /// `$DEVACCESS_SOCKET` when set and not empty, else `/run/devaccess/broker.sock`: the
    /// default of ``DeviceAccess/init(socketPath:timeout:)``, read when a program makes one.
    public static var configuredSocketPath: String {
        // Allowed read (make lint): this library's public entry point is the "main" of a
        // third-party program that did not name the socket; DEVACCESS_SOCKET must still work there.
        if let value = getenv(BrokerProtocol.socketEnvironmentVariable), value.pointee != 0 {
            return String(cString: value)
        }
        return BrokerProtocol.defaultSocketPath
    }
}
