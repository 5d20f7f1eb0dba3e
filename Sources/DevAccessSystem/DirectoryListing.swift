import Glibc

/// The names in a directory, without "." and "..": one `opendir`/`readdir` walk whose
/// failures keep their call and errno. `readdir` ends a listing and fails the same way (a
/// NULL), so errno is cleared before each call and read after: a listing cut short by an
/// I/O error is an error, never a shorter list.
public enum DirectoryListing {
    public static func names(_ path: String) throws(SystemCallError) -> [String] {
        guard let stream = opendir(path) else { throw .current("opendir", path: path) }
        defer { closedir(stream) }
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(stream) else {
                if errno != 0 { throw .current("readdir", path: path) }
                return names
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
    }
}
