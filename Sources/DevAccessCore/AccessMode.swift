/// Read and write access to a device node, as the kernel checks it at `open()`.
public struct AccessMode: OptionSet, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let read = AccessMode(rawValue: 1 << 2)
    public static let write = AccessMode(rawValue: 1 << 1)
    public static let execute = AccessMode(rawValue: 1 << 0)
    public static let readWrite: AccessMode = [.read, .write]
    public static let none: AccessMode = []

    /// From the three permission bits of one mode class or ACL entry (`rwx` = 7).
    public init(bits: UInt32) { self.init(rawValue: UInt8(truncatingIfNeeded: bits & 0o7)) }

    /// `rw-`, as `ls` and `getfacl` print it.
    public var symbolic: String {
        (contains(.read) ? "r" : "-") + (contains(.write) ? "w" : "-") + (contains(.execute) ? "x" : "-")
    }

    /// `none`, `read`, `write` or `readwrite` — the word used in JSON output.
    public var word: String {
        switch (contains(.read), contains(.write)) {
        case (true, true): return "readwrite"
        case (true, false): return "read"
        case (false, true): return "write"
        case (false, false): return "none"
        }
    }

    public var description: String { word }
}
