import Glibc

/// A path with every symlink, `.` and `..` resolved (realpath(3)), as the kernel reports a
/// program's executable: what program grants, `[Program]` sections and runs compare.
public enum CanonicalPath {
    /// nil when `path` cannot be resolved (missing, or a directory on the way cannot be searched).
    public static func of(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Resolved, or `path` as given when it cannot be (a program not installed yet).
    public static func orGiven(_ path: String) -> String { of(path) ?? path }

    /// The directory part of `path`, as text: `/run/devaccess` for `/run/devaccess/socket`,
    /// `/` for `/socket`, empty for a bare name. Trailing slashes are not a component.
    public static func directory(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        return slash == trimmed.startIndex ? "/" : String(trimmed[..<slash])
    }
}
