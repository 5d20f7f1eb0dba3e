import DevAccessCore
import Glibc

/// Where gpsd listens: a host (name, IPv4 or IPv6 address) and a TCP port.
///
/// Text forms: `HOST`, `HOST:PORT`, `[IPV6]`, `[IPV6]:PORT`, and a bare IPv6
/// address (`::1`) with the default port. The default is gpsd's own,
/// `127.0.0.1:2947`; `DEVACCESS_GPSD` overrides it.
public struct GpsdEndpoint: Sendable, Hashable, CustomStringConvertible {
    public static let defaultHost = "127.0.0.1"
    public static let defaultPort: UInt16 = 2947
    /// The environment variable that names another gpsd (`HOST[:PORT]`).
    public static let environmentVariable = ProcessEnvironment.Name.gpsd
    public static let `default` = GpsdEndpoint(host: defaultHost, port: defaultPort)

    /// Host name or address, IPv6 without brackets (`::1`, `fe80::1%eth0`).
    public var host: String
    public var port: UInt16

    public init(host: String = GpsdEndpoint.defaultHost, port: UInt16 = GpsdEndpoint.defaultPort) {
        self.host = host
        self.port = port
    }

    /// `host:port`, with brackets around an IPv6 address so the port stays readable.
    public var description: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    public struct ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        /// The text as given.
        public var text: String
        /// What is wrong with it.
        public var problem: String

        public var description: String {
            "\"\(text)\" is not a gpsd address: \(problem); write HOST, HOST:PORT or [IPV6]:PORT "
                + "(for example 127.0.0.1:2947)"
        }
    }

    /// Parses `HOST`, `HOST:PORT`, `[IPV6]`, `[IPV6]:PORT` or a bare IPv6 address.
    public init(parsing text: String) throws(ParseError) {
        let trimmed = text.trimmingASCIIWhitespace()
        func fail(_ problem: String) -> ParseError { ParseError(text: text, problem: problem) }
        guard !trimmed.isEmpty else { throw fail("it is empty") }

        var host: Substring
        var portText: Substring?
        if trimmed.hasPrefix("[") {
            guard let close = trimmed.firstIndex(of: "]") else { throw fail("the \"[\" has no \"]\"") }
            host = trimmed[trimmed.index(after: trimmed.startIndex)..<close]
            let rest = trimmed[trimmed.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { throw fail("only \":PORT\" may follow \"]\"") }
                portText = rest.dropFirst()
            }
            guard Self.isIPv6Literal(String(host)) else {
                throw fail("\"\(host)\" in brackets is not an IPv6 address")
            }
        } else {
            let colons = trimmed.count(where: { $0 == ":" })
            if colons == 0 {
                host = Substring(trimmed)
            } else if colons == 1, let colon = trimmed.firstIndex(of: ":") {
                host = trimmed[..<colon]
                portText = trimmed[trimmed.index(after: colon)...]
            } else {
                // Several colons: only a whole IPv6 address makes sense, with the default port.
                guard Self.isIPv6Literal(trimmed) else {
                    throw fail("put an IPv6 address in brackets when it has a port, as in [::1]:2947")
                }
                host = Substring(trimmed)
            }
            guard !host.isEmpty else { throw fail("the host is missing") }
            guard colons > 1 || Self.isHostName(host) else {
                throw fail("\"\(host)\" is not a host name or address (letters, digits, \"-\" and \".\" only)")
            }
        }

        var port = GpsdEndpoint.defaultPort
        if let portText {
            guard !portText.isEmpty, portText.allSatisfy({ $0.isASCII && $0.isNumber }),
                  let value = UInt16(portText), value > 0
            else { throw fail("port \"\(portText)\" is not a number from 1 to 65535") }
            port = value
        }
        self.init(host: String(host), port: port)
    }

    /// The endpoint named by `DEVACCESS_GPSD` in `environment`, or the default when it is
    /// unset or empty.
    public static func fromEnvironment(_ environment: ProcessEnvironment) throws(ParseError) -> GpsdEndpoint {
        guard let value = environment[environmentVariable], !value.trimmingASCIIWhitespace().isEmpty else { return .default }
        do {
            return try GpsdEndpoint(parsing: value)
        } catch {
            throw ParseError(text: value, problem: error.problem + " (from \(environmentVariable))")
        }
    }

    static func isIPv6Literal(_ text: String) -> Bool {
        // A zone (`%eth0`) is not part of inet_pton's syntax; check the address before it.
        let address = text.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false)
        guard let first = address.first, !first.isEmpty else { return false }
        if address.count == 2, address[1].isEmpty { return false }
        var storage = in6_addr()
        return inet_pton(AF_INET6, String(first), &storage) == 1
    }

    static func isHostName(_ text: Substring) -> Bool {
        text.count <= 253 && text.utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_")
        } && !text.hasPrefix(".") && !text.hasPrefix("-") && !text.contains("..")
    }
}

fileprivate extension StringProtocol {
    func trimmingASCIIWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let start = firstIndex(where: { !isSpace($0) }),
              let end = lastIndex(where: { !isSpace($0) }) else { return "" }
        return String(self[start...end])
    }
}
