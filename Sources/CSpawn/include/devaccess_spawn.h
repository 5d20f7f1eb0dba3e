#ifndef DEVACCESS_SPAWN_H
#define DEVACCESS_SPAWN_H
/* Starting a program as another user (devaccess run), and the Landlock calls --strict needs.
   Named devaccess_spawn.h, not spawn.h: an include directory holding "spawn.h" would shadow
   glibc's <spawn.h> for every module that sees this target. No _GNU_SOURCE here (it clashes
   with SwiftGlibc); spawn.c defines it for itself. */
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Where a launch failed. The child reports the step and errno through a close-on-exec pipe;
   the values are part of the contract with DevAccessSystem.ProgramLauncher. */
enum devaccess_spawn_step {
    DEVACCESS_SPAWN_OK = 0,
    DEVACCESS_SPAWN_PIPE = 1,            /* parent: pipe2 for the child's report */
    DEVACCESS_SPAWN_FORK = 2,            /* parent: fork */
    DEVACCESS_SPAWN_PIDFD = 3,           /* parent: pidfd_open (other than ENOSYS) */
    DEVACCESS_SPAWN_REPORT = 4,          /* parent: reading the child's report */
    DEVACCESS_SPAWN_SIGNALS = 10,        /* child: default dispositions, empty mask */
    DEVACCESS_SPAWN_PROCESS_GROUP = 11,  /* child: setpgid(0, 0) */
    DEVACCESS_SPAWN_STREAMS = 12,        /* child: moving the three descriptors onto 0, 1, 2 */
    DEVACCESS_SPAWN_SETGROUPS = 13,
    DEVACCESS_SPAWN_SETGID = 14,
    DEVACCESS_SPAWN_SETUID = 15,
    DEVACCESS_SPAWN_PRIVILEGES_KEPT = 16, /* child: setuid(0) still worked after dropping */
    DEVACCESS_SPAWN_CHDIR = 17,
    DEVACCESS_SPAWN_NO_NEW_PRIVS = 18,   /* child: prctl(PR_SET_NO_NEW_PRIVS) */
    DEVACCESS_SPAWN_LANDLOCK = 19,       /* child: landlock_restrict_self */
    DEVACCESS_SPAWN_CLOSE_FDS = 20,      /* child: closing descriptors above 2 */
    DEVACCESS_SPAWN_EXEC = 21,           /* child: execve */
    DEVACCESS_SPAWN_GROUP_GUARD = 22,    /* child: the seccomp filter guarding the run's group */
    DEVACCESS_SPAWN_LIMITS = 23,         /* child: setrlimit of the caller's limits */
    DEVACCESS_SPAWN_OPEN = 24,           /* devaccess_open_as's child: the open as the user */
};

/* A resource limit to set in the child (the caller's, from /proc/PID/limits). */
struct devaccess_spawn_limit {
    int resource;
    uint64_t soft;
    uint64_t hard;
};

/* Everything the child needs, prepared before fork: between fork and exec the child only
   reads this and makes async-signal-safe calls. */
struct devaccess_spawn_request {
    const char *path;             /* passed to execve as is (exec_by_fd: names the program only) */
    int exec_by_fd;               /* 1: execveat(exec_fd, "", AT_EMPTY_PATH): that file, not a path */
    int exec_fd;                  /* left open across exec (a #! script's interpreter opens /dev/fd/N) */
    char *const *argv;            /* NULL-terminated, argv[0] included */
    char *const *envp;            /* NULL-terminated "K=V" */
    const char *cwd;              /* entered after the ids are dropped */
    int fds[3];                   /* become the child's 0, 1, 2 (may coincide, may be 0-2) */
    uid_t uid;
    gid_t gid;
    const gid_t *groups;          /* supplementary groups, exactly these */
    size_t group_count;
    mode_t umask;
    int landlock_ruleset_fd;      /* -1: none; else no_new_privs + landlock_restrict_self */
    int guard_group;              /* 1: no chown-family call may give a file `guarded_gid` */
    gid_t guarded_gid;
    const struct devaccess_spawn_limit *limits;   /* set while still root, exactly these */
    size_t limit_count;
};


struct devaccess_spawn_result {
    pid_t pid;     /* > 0 on success */
    int pidfd;     /* -1 when the kernel has no pidfd_open */
    int step;      /* enum devaccess_spawn_step; DEVACCESS_SPAWN_OK on success */
    int error;     /* errno of the failed step */
};

/* Forks, sets the child up and execs. Returns 0 once the exec succeeded (the report pipe
   closed empty); -1 with result->step and result->error otherwise, the child then reaped. */
int devaccess_spawn(const struct devaccess_spawn_request *request, struct devaccess_spawn_result *result);

/* Waits for the child `pid` (through `pidfd` when >= 0: it names that one process, never a
   later one with the same pid) and reaps it. 1: it ended, *wait_status is in waitpid's
   encoding; 0: still running (nohang); -1 with errno. keep: report the ending without
   reaping (WNOWAIT), so the pid stays this process's until a second call reaps it. */
int devaccess_wait(int pidfd, pid_t pid, int nohang, int keep, int *wait_status);

/* A child forked and set up (ids dropped, working directory entered, Landlock applied, no
   other descriptors) that waits before exec, so devaccessd can record the run and apply its
   access first, knowing the pid. */
struct devaccess_spawn_held {
    pid_t pid;
    int pidfd;     /* -1 when the kernel has no pidfd_open */
    int gate;      /* one byte: exec; closed: exit 127 unrun */
    int report;    /* the child's report pipe */
};

/* Like devaccess_spawn, but returns (0) once the child is ready and waiting; a setup failure
   is -1 with result->step/error, the child reaped. Exactly one of release or abandon must
   follow. */
int devaccess_spawn_start(const struct devaccess_spawn_request *request, struct devaccess_spawn_held *held,
                          struct devaccess_spawn_result *result);
/* Lets the held child exec: 0 with result->pid/pidfd (the caller owns the pidfd now) once
   exec succeeded; -1 with result->step/error, the child reaped and everything closed. */
int devaccess_spawn_release(struct devaccess_spawn_held *held, struct devaccess_spawn_result *result);
/* The held child is not to run: it exits 127 without exec, is reaped, and everything closes. */
void devaccess_spawn_abandon(struct devaccess_spawn_held *held);

/* Opens `path` O_PATH as a user: in a child that takes exactly `groups`, then `gid`, then
   `uid`, and enters `cwd` (for a relative path), never on devaccessd's own threads (glibc
   applies setgroups and setresuid to every thread of the process). 0 with *fd (devaccessd's,
   close-on-exec); -1 with result->step/error: DEVACCESS_SPAWN_OPEN or _CHDIR with the errno
   the user got; DEVACCESS_SPAWN_REPORT with ETIMEDOUT when the child did not answer within
   `timeout_ms` (it is killed: the user may stop it, or make the lookup hang on a FUSE mount);
   another step: devaccessd's failure. The child is reaped before this returns. */
struct devaccess_open_request {
    const char *path;
    const char *cwd;              /* NULL: not entered */
    uid_t uid;
    gid_t gid;
    const gid_t *groups;
    size_t group_count;
    int timeout_ms;
};
int devaccess_open_as(const struct devaccess_open_request *request, int *fd, struct devaccess_spawn_result *result);

/* Landlock rights: ABI 1's, and IOCTL_DEV (ABI 5, Linux 6.10). */
enum {
    DEVACCESS_LANDLOCK_ACCESS_FS_EXECUTE = 1,
    DEVACCESS_LANDLOCK_ACCESS_FS_WRITE_FILE = 2,
    DEVACCESS_LANDLOCK_ACCESS_FS_READ_FILE = 4,
    DEVACCESS_LANDLOCK_ACCESS_FS_IOCTL_DEV = 1 << 15,
};

/* The kernel's Landlock ABI version, or -1 with errno (ENOSYS: not built in; EOPNOTSUPP:
   disabled at boot). */
int devaccess_landlock_abi_version(void);
/* A new ruleset handling `handled_access_fs`; a close-on-exec fd, or -1 with errno. */
int devaccess_landlock_create_ruleset(uint64_t handled_access_fs);
/* Allows `allowed_access` beneath the file or directory `parent_fd` refers to (O_PATH is
   enough). 0, or -1 with errno. */
int devaccess_landlock_add_path_rule(int ruleset_fd, int parent_fd, uint64_t allowed_access);

#endif
