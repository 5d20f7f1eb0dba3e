import Foundation
import Glibc
import Testing
import DevAccessCore
import DevAccessTestSupport

/// The run's program tries every other way into chown: the seccomp guard must refuse giving
/// a file the run's group by any of them (the setgid-file escape of
/// `theRunsProgramCannotHandItsGroupToAnotherProcessThroughASetgidFile`).
@Suite(.serialized, .enabled(if: isRoot && FileManager.default.isExecutableFile(atPath: "/usr/bin/gcc"),
                             "starts devaccessd as root; builds a test program with gcc"))
struct RunSeccompAttackTests {
    /// Each attempt creates DIR/NAME and tries to give it the run's group; the test reads the
    /// files' groups afterwards. i386 calls go through `int 0x80` from the 64-bit process
    /// (the filter sees AUDIT_ARCH_I386 then); their pointers are static (non-PIE, below 4 GiB).
    static let program = #"""
        #define _GNU_SOURCE
        #include <fcntl.h>
        #include <grp.h>
        #include <stdio.h>
        #include <string.h>
        #include <unistd.h>
        #include <sys/stat.h>
        #include <sys/syscall.h>
        static char path[4096];
        static char empty[1];
        static long i386(long nr, long a, long b, long c, long d, long e) {
            long ret;
            register long r8 __asm__("r8") = 0;
            __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c), "S"(d), "D"(e), "r"(r8) : "memory");
            return ret;
        }
        static int create(const char *dir, const char *name) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            return open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0755);
        }
        int main(int argc, char **argv) {
            if (argc < 2) return 2;
            gid_t groups[256];
            int n = getgroups(256, groups);
            long gid = -1;
            for (int i = 0; i < n; i++) if (groups[i] >= 0x7A000000u && groups[i] <= 0x7AFFFFFFu) gid = groups[i];
            if (gid < 0) { printf("no run group\n"); return 3; }
            int fd;
            fd = create(argv[1], "x64-fchownat-empty-path");
            printf("x64-fchownat-empty-path %ld\n", syscall(SYS_fchownat, fd, "", -1, gid, AT_EMPTY_PATH)); fchmod(fd, 02755);
            fd = create(argv[1], "x32-fchown");
            printf("x32-fchown %ld\n", syscall(93 | 0x40000000, fd, -1, gid)); fchmod(fd, 02755);
            fd = create(argv[1], "i386-fchown32");
            printf("i386-fchown32 %ld\n", i386(207, fd, -1, gid, 0, 0)); fchmod(fd, 02755);
            fd = create(argv[1], "i386-chown32");
            printf("i386-chown32 %ld\n", i386(212, (long)path, -1, gid, 0, 0)); fchmod(fd, 02755);
            fd = create(argv[1], "i386-lchown32");
            printf("i386-lchown32 %ld\n", i386(198, (long)path, -1, gid, 0, 0)); fchmod(fd, 02755);
            fd = create(argv[1], "i386-fchownat");
            printf("i386-fchownat %ld\n", i386(298, fd, (long)empty, -1, gid, AT_EMPTY_PATH)); fchmod(fd, 02755);
            fflush(stdout);
            return 0;
        }
        """#

    @Test func noOtherChownCallGivesAFileTheRunsGroup() throws {
        let setup = try RunTests.setup()
        let user = try TestUser("runsecc")
        let work = try TemporaryDirectory()
        #expect(chmod(work.path, 0o777) == 0)
        try Data(Self.program.utf8).write(to: URL(fileURLWithPath: work.path + "/attack.c"))
        let built = try TestProcess.run("/usr/bin/gcc", ["-static", "-no-pie", "-O1", "-o", work.path + "/attack",
                                                         work.path + "/attack.c"])
        #expect(built.status == 0, "\(built.stderr)")
        let out = work.path + "/out"
        #expect(mkdir(out, 0o777) == 0 && chmod(out, 0o777) == 0)
        let result = try RunTests.run(user, setup, ["--camera", "--", work.path + "/attack", out])
        let said = String(decoding: result.stdout, as: UTF8.self)
        #expect(result.status == 0, "\(said) \(result.stderr)")
        let names = ["x64-fchownat-empty-path", "x32-fchown", "i386-fchown32", "i386-chown32", "i386-lchown32",
                     "i386-fchownat"]
        for name in names {
            var info = stat()
            #expect(stat(out + "/" + name, &info) == 0, "\(name) was not made: \(said)")
            #expect(!RunGroups.contains(info.st_gid), "\(name) gave the file the run's group: \(said)")
        }
    }
}
