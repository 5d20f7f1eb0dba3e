import DevAccessCore
import FuzzSupport

/// devaccess.conf and its drop-ins as the policy loader reads them (devaccess.conf(5)): the
/// input is split at NUL bytes into the main file and drop-ins, in order. Files are
/// root's, but one malformed file must give an error naming its line, never a crash.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPolicy(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let files = fuzzInput(data, size).split(separator: 0, omittingEmptySubsequences: false).enumerated().map {
        (path: $0.offset == 0 ? "/etc/devaccess/devaccess.conf" : "/etc/devaccess/devaccess.conf.d/\($0.offset).conf",
         text: String(decoding: $0.element, as: UTF8.self))
    }
    for file in files {
        if let ini = try? INIFile(parsing: file.text) {
            for section in ini.sections {
                fuzzCheck(section.line >= 1 && section.entries.allSatisfy { $0.line >= section.line },
                          "INI line numbers out of order in \(section)")
            }
        }
    }
    do {
        _ = try PolicyParser.parse(files)
    } catch {
        fuzzCheck(error.line >= 0 && files.contains { $0.path == error.file }, "error names no file: \(error)")
    }
    return 0
}

runFuzzer(fuzzPolicy)
