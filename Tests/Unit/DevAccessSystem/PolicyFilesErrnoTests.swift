import Glibc
import Testing
import DevAccessSystem
import DevAccessCore
import DevAccessTestSupport

/// The policy reader decides "absent" from open's ENOENT and reports anything else with the
/// call and errno that failed, never a guess ("permission denied or not a regular file").
@Suite struct PolicyFilesErrnoTests {
    @Test func anAbsentMainFileMeansTheBuiltInDefaults() throws {
        let directory = try TemporaryDirectory()
        #expect(try PolicyFiles.load(directory: directory.path) == Policy())
        #expect(try PolicyFiles.load(directory: directory.path + "/not-there") == Policy())
        #expect(symlink(directory.path + "/nowhere", directory.path + "/" + PolicyFiles.mainFile) == 0)
        #expect(try PolicyFiles.load(directory: directory.path) == Policy(), "a symlink to nothing is no file")
    }

    /// A directory where the main file should be is refused by the descriptor's own type
    /// (the reader checks what it opened before it reads).
    @Test func aMainFileThatIsADirectoryIsRefusedByName() throws {
        let directory = try TemporaryDirectory()
        let main = directory.path + "/" + PolicyFiles.mainFile
        #expect(mkdir(main, 0o755) == 0)
        #expect(throws: PolicyFiles.LoadError.refused(path: main, why: "not a regular file")) {
            try PolicyFiles.load(directory: directory.path)
        }
    }

    /// A main file that cannot be opened keeps the call and errno: a dangling symlink loop.
    @Test func aMainFileThatCannotBeOpenedKeepsTheCallAndErrno() throws {
        let directory = try TemporaryDirectory()
        let main = directory.path + "/" + PolicyFiles.mainFile
        #expect(symlink(main, main) == 0)
        #expect(throws: PolicyFiles.LoadError.unreadable(SystemCallError("open", path: main, Errno(rawValue: ELOOP)))) {
            try PolicyFiles.load(directory: directory.path)
        }
        do {
            _ = try PolicyFiles.load(directory: directory.path)
        } catch {
            #expect(error.description.hasPrefix("cannot read the policy: open(\"\(main)\"): "))
            #expect(error.description.hasSuffix("(ELOOP)"))
        }
    }

    @Test func aDropInThatIsNotTextIsNamed() throws {
        let directory = try TemporaryDirectory()
        #expect(mkdir(directory.path + "/" + PolicyFiles.dropInDirectory, 0o755) == 0)
        let dropIn = directory.path + "/" + PolicyFiles.dropInDirectory + "/10-bad.conf"
        let fd = open(dropIn, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        #expect(fd >= 0)
        let bytes: [UInt8] = [0x5B, 0xFF, 0xFE, 0x5D, 0x0A]
        #expect(bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == bytes.count)
        close(fd)
        #expect(throws: PolicyFiles.LoadError.refused(path: dropIn, why: "not UTF-8 text")) { try PolicyFiles.load(directory: directory.path) }
    }

    /// A `conf.d` that cannot be listed fails the load, with the call and errno: its
    /// drop-ins (a deny among them) must not vanish while the main file alone is obeyed.
    /// Here it is a regular file of root's (ENOTDIR); EMFILE in a daemon out of descriptors
    /// takes the same path.
    @Test func aDropInDirectoryThatCannotBeListedFailsTheLoad() throws {
        let directory = try TemporaryDirectory()
        let main = directory.path + "/" + PolicyFiles.mainFile
        let mainFD = open(main, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        let text = Array("[camera]\nDefault=allow\n".utf8)
        #expect(text.withUnsafeBytes { write(mainFD, $0.baseAddress, $0.count) } == text.count)
        close(mainFD)
        let dropIns = directory.path + "/" + PolicyFiles.dropInDirectory
        let fd = open(dropIns, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        #expect(fd >= 0)
        close(fd)
        #expect(throws: PolicyFiles.LoadError.unreadable(SystemCallError("opendir", path: dropIns, Errno(rawValue: ENOTDIR)))) {
            try PolicyFiles.load(directory: directory.path)
        }
    }

    @Test func aListingHasEveryNameButTheDots() throws {
        let directory = try TemporaryDirectory()
        for name in ["b.conf", "a.conf", "c.txt"] {
            let fd = open(directory.path + "/" + name, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            #expect(fd >= 0)
            close(fd)
        }
        #expect(try DirectoryListing.names(directory.path).sorted() == ["a.conf", "b.conf", "c.txt"])
        #expect(try PolicyFiles.dropInNames(directory.path) == ["a.conf", "b.conf"])
        #expect(try PolicyFiles.dropInNames(directory.path + "/absent") == [])
    }
}
