import Glibc

/// Descriptors owned together (those that came with one message, SCM_RIGHTS), closed
/// together when their owner goes: `FileDescriptor` for a group an `Array` cannot hold.
public struct FileDescriptors: ~Copyable, Sendable {
    /// The descriptors, to lend (a child's stdin, stdout, stderr); still owned here.
    public private(set) var rawValues: [CInt]

    public init(owning rawValues: [CInt] = []) { self.rawValues = rawValues }

    public var count: Int { rawValues.count }
    public var isEmpty: Bool { rawValues.isEmpty }

    /// Takes `more` over as well.
    public mutating func adopt(_ more: some Sequence<CInt>) {
        rawValues.append(contentsOf: more)
    }

    /// The first one, to a new owner (it is no longer owned here). There must be one.
    public mutating func removeFirst() -> FileDescriptor {
        FileDescriptor(owning: rawValues.removeFirst())
    }

    /// All of them, to a new owner; none are left here.
    public mutating func take() -> FileDescriptors {
        defer { rawValues = [] }
        return FileDescriptors(owning: rawValues)
    }

    /// Closes them now rather than when their owner goes.
    public consuming func close() {}

    deinit {
        // close is never retried: on Linux the fd is gone even after EINTR.
        for fd in rawValues { _ = Glibc.close(fd) }
    }
}
