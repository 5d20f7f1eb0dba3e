/* fork + exec for devaccess run. The broker is multi-threaded: after fork only the forking
   thread exists in the child, and any lock another thread held stays locked forever, so the
   child makes async-signal-safe calls only (no malloc, no stdio, no Swift) and everything it
   needs was prepared by the caller before fork. */
#define _GNU_SOURCE
#include "devaccess_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <string.h>
#include <stddef.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The generic syscall table gives these the same number on every architecture; older
   headers may lack them. */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_execveat
#define SYS_execveat 322  /* x86_64; other architectures' headers all define it */
#endif
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef PR_SET_NO_NEW_PRIVS
#define PR_SET_NO_NEW_PRIVS 38
#endif

/* The kernel ABI of Landlock (include/uapi/linux/landlock.h), ABI 1 fields only: the kernel
   takes the struct size, so a shorter ruleset attribute is valid on every version. */
struct devaccess_landlock_ruleset_attr {
    uint64_t handled_access_fs;
};
struct devaccess_landlock_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));
#define DEVACCESS_LANDLOCK_CREATE_RULESET_VERSION 1U
#define DEVACCESS_LANDLOCK_RULE_PATH_BENEATH 1

/* What a failing child writes: 8 bytes, less than PIPE_BUF, so one atomic write. */
struct child_report {
    int32_t step;
    int32_t error;
};

__attribute__((noreturn))
static void child_fail(int report_fd, int step) {
    struct child_report report = { step, errno };
    /* Nothing to do if this fails: the parent then sees a bare EOF and a status of 127. */
    ssize_t written = write(report_fd, &report, sizeof report);
    (void)written;
    _exit(127);
}

static int close_from(unsigned int first, unsigned int last, long open_max) {
    if (first > last) return 0;
    if (syscall(SYS_close_range, first, last, 0) == 0) return 0;
    if (errno != ENOSYS) return -1;
    /* Kernels before 5.9: every possible descriptor, up to the limit read before fork. */
    long end = (long)last < open_max ? (long)last : open_max - 1;
    for (long fd = first; fd <= end; fd++) close((int)fd);
    return 0;
}

/* Closes every descriptor from 3 up but the three in `keep` (each above 2, or -1: none). */
static int close_all_but(const int keep[3], long open_max) {
    int sorted[3] = { keep[0], keep[1], keep[2] };
    for (int i = 1; i < 3; i++) {
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            int swap = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = swap;
        }
    }
    unsigned int next = 3;
    for (int i = 0; i < 3; i++) {
        if (sorted[i] < 0 || (unsigned int)sorted[i] < next) continue;
        if (close_from(next, (unsigned int)sorted[i] - 1, open_max) != 0) return -1;
        next = (unsigned int)sorted[i] + 1;
    }
    return close_from(next, ~0U, open_max);
}

/* Groups first, then gid, then uid: once the uid is not 0 the others are no longer allowed.
   Only in a single-threaded child: these change the whole process. 0, or the failed step. */
static int drop_ids(uid_t uid, gid_t gid, const gid_t *groups, size_t group_count) {
    if (setgroups(group_count, groups) != 0) return DEVACCESS_SPAWN_SETGROUPS;
    if (setgid(gid) != 0) return DEVACCESS_SPAWN_SETGID;
    if (setuid(uid) != 0) return DEVACCESS_SPAWN_SETUID;
    if (uid != 0) {
        /* Root's setuid sets real, effective and saved ids and clears the capabilities; if
           any of that did not happen, getting root back would work. */
        if (setuid(0) == 0 || (gid != 0 && setgid(0) == 0)) {
            errno = EPERM;
            return DEVACCESS_SPAWN_PRIVILEGES_KEPT;
        }
    }
    return 0;
}

/* A seccomp filter: chown, fchown, lchown and fchownat (and their 32-bit forms) fail with
   EPERM when they would give a file the group `gid`. The run's program is a member of its
   run's group, and the kernel lets a member chgrp its own files to it: a setgid file of that
   group, executed by another process of the user, would carry the group, and the device
   access with it, out of the run. Every other call, and every other group, is untouched.
   Installed while still root (so no no_new_privs is needed); it survives setuid and exec. */
static int guard_group(gid_t gid) {
#define LOAD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define LOAD_ARG(n) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[n]))
#define ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
    struct sock_filter program[] = {
        /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 2, 0),    /* -> 4 */
        /* 2 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_I386, 8, 0),      /* -> 11 */
        /* 3 */ ALLOW,
        /* x86_64, and x32 (the same numbers with bit 30 set) */
        /* 4 */ LOAD_NR,
        /* 5 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, ~0x40000000U),
        /* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 92, 10, 0),   /* chown -> 17 */
        /* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 93, 9, 0),    /* fchown -> 17 */
        /* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 94, 8, 0),    /* lchown -> 17 */
        /* 9 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 260, 10, 0),  /* fchownat -> 20 */
        /* 10 */ ALLOW,
        /* i386: the 32-bit-id calls (the 16-bit ones cannot name a group this high) */
        /* 11 */ LOAD_NR,
        /* 12 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 212, 4, 0),  /* chown32 -> 17 */
        /* 13 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 207, 3, 0),  /* fchown32 -> 17 */
        /* 14 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 198, 2, 0),  /* lchown32 -> 17 */
        /* 15 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 298, 4, 0),  /* fchownat -> 20 */
        /* 16 */ ALLOW,
        /* the group is the third argument (its low 32 bits, little-endian) */
        /* 17 */ LOAD_ARG(2),
        /* 18 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)gid, 3, 0),   /* -> 22 */
        /* 19 */ ALLOW,
        /* fchownat: the fourth */
        /* 20 */ LOAD_ARG(3),
        /* 21 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)gid, 0, 1),   /* -> 22, 23 */
        /* 22 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        /* 23 */ ALLOW,
    };
#undef LOAD_NR
#undef LOAD_ARG
#undef ALLOW
    struct sock_fprog filter = { (unsigned short)(sizeof program / sizeof program[0]), program };
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &filter);
}

/* `gate_fd` >= 0: held; after everything but exec, report ready (step 0) and wait for a byte
   on the gate (end of file instead: exit 127 unrun). */
__attribute__((noreturn))
static void run_child(const struct devaccess_spawn_request *r, int report_fd, int gate_fd, long open_max) {
    /* Keep the report pipe and the gate above 2 so that the dup2s onto 0-2 cannot replace them. */
    if (report_fd < 3) {
        int moved = fcntl(report_fd, F_DUPFD_CLOEXEC, 3);
        if (moved < 0) child_fail(report_fd, DEVACCESS_SPAWN_STREAMS);
        report_fd = moved;
    }
    if (gate_fd >= 0 && gate_fd < 3) {
        int moved = fcntl(gate_fd, F_DUPFD_CLOEXEC, 3);
        if (moved < 0) child_fail(report_fd, DEVACCESS_SPAWN_STREAMS);
        gate_fd = moved;
    }
    /* The program's file, likewise above 2 (a copy of this process's own). */
    int exec_fd = -1;
    if (r->exec_by_fd) {
        exec_fd = fcntl(r->exec_fd, F_DUPFD_CLOEXEC, 3);
        if (exec_fd < 0) child_fail(report_fd, DEVACCESS_SPAWN_STREAMS);
    }

    /* The parent blocked every signal around fork, so no handler of the broker runs here.
       Caught signals would reset at exec anyway, but ignored ones stay ignored and the mask
       is inherited: both go back to the defaults a program expects. */
    /* The raw system call: glibc's sigaction refuses the signals it reserves (32, 33), yet
       one of those may arrive ignored from the broker's own parent and would stay ignored.
       All zeros is SIG_DFL, no flags, an empty mask in every architecture's layout. */
    unsigned long default_action[8] = { 0 };
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        /* 8: the size of the kernel's signal set (64 signals). */
        if (syscall(SYS_rt_sigaction, sig, default_action, NULL, (size_t)8) != 0)
            child_fail(report_fd, DEVACCESS_SPAWN_SIGNALS);
    }
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) child_fail(report_fd, DEVACCESS_SPAWN_SIGNALS);

    /* A process group of its own, in the broker's session (not setsid: a group whose
       parent is in another session is orphaned, and the kernel discards SIGTSTP for it). */
    if (setpgid(0, 0) != 0) child_fail(report_fd, DEVACCESS_SPAWN_PROCESS_GROUP);

    /* First copy all three above 2, then onto 0-2: correct whether the given descriptors
       coincide or already are 0-2 (dup2(x, x) would keep close-on-exec set). dup2 onto a
       different number clears close-on-exec; the copies go in close_range below. */
    int moved[3];
    for (int i = 0; i < 3; i++) {
        moved[i] = fcntl(r->fds[i], F_DUPFD_CLOEXEC, 3);
        if (moved[i] < 0) child_fail(report_fd, DEVACCESS_SPAWN_STREAMS);
    }
    for (int i = 0; i < 3; i++) {
        if (dup2(moved[i], i) < 0) child_fail(report_fd, DEVACCESS_SPAWN_STREAMS);
    }

    umask(r->umask);

    if (r->landlock_ruleset_fd >= 0) {
        /* Still root here, but no_new_privs belongs to --strict anyway: nothing the program
           executes gains privileges its domain would not bound. The domain survives the id
           change and exec; the ruleset's descriptor can go in close_range after it. */
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) child_fail(report_fd, DEVACCESS_SPAWN_NO_NEW_PRIVS);
        if (syscall(SYS_landlock_restrict_self, r->landlock_ruleset_fd, 0) != 0)
            child_fail(report_fd, DEVACCESS_SPAWN_LANDLOCK);
    }

    /* Nothing of the broker's but 0-2, the report pipe (which closes at exec), the gate and
       the program's file, and that before the process becomes the user's. (It is not dumpable
       until exec, as a process that changed its ids, so the user could not reach its
       descriptors anyway.) */
    int keep[3] = { report_fd, gate_fd, exec_fd };
    if (close_all_but(keep, open_max) != 0) child_fail(report_fd, DEVACCESS_SPAWN_CLOSE_FDS);

    if (r->guard_group && guard_group(r->guarded_gid) != 0) child_fail(report_fd, DEVACCESS_SPAWN_GROUP_GUARD);

    /* The caller's limits, not devaccessd's. Raising a hard limit needs CAP_SYS_RESOURCE;
       without it (a container that drops it) the program gets the lower of the two. */
    for (size_t i = 0; i < r->limit_count; i++) {
        struct rlimit limit = { (rlim_t)r->limits[i].soft, (rlim_t)r->limits[i].hard };
        if (setrlimit(r->limits[i].resource, &limit) == 0) continue;
        struct rlimit current;
        if (errno != EPERM || getrlimit(r->limits[i].resource, &current) != 0) child_fail(report_fd, DEVACCESS_SPAWN_LIMITS);
        if (limit.rlim_max > current.rlim_max) limit.rlim_max = current.rlim_max;
        if (limit.rlim_cur > limit.rlim_max) limit.rlim_cur = limit.rlim_max;
        if (setrlimit(r->limits[i].resource, &limit) != 0) child_fail(report_fd, DEVACCESS_SPAWN_LIMITS);
    }

    int dropped = drop_ids(r->uid, r->gid, r->groups, r->group_count);
    if (dropped != 0) child_fail(report_fd, dropped);

    /* As the user: root could enter a directory the user cannot, and the program would
       then work below it. */
    if (chdir(r->cwd) != 0) child_fail(report_fd, DEVACCESS_SPAWN_CHDIR);

    if (gate_fd >= 0) {
        struct child_report ready = { DEVACCESS_SPAWN_OK, 0 };
        if (write(report_fd, &ready, sizeof ready) != (ssize_t)sizeof ready) _exit(127);
        char go = 0;
        ssize_t got;
        do { got = read(gate_fd, &go, 1); } while (got < 0 && errno == EINTR);
        if (got != 1) _exit(127);  /* abandoned: devaccessd will not have it run */
        close(gate_fd);
    }

    if (exec_fd >= 0) {
        /* The file devaccessd decided on, whatever its path names now. Open across exec: a
           #! script's interpreter is given /dev/fd/N to read it from. */
        if (fcntl(exec_fd, F_SETFD, 0) != 0) child_fail(report_fd, DEVACCESS_SPAWN_EXEC);
        syscall(SYS_execveat, exec_fd, "", r->argv, r->envp, AT_EMPTY_PATH);
    } else {
        execve(r->path, r->argv, r->envp);
    }
    child_fail(report_fd, DEVACCESS_SPAWN_EXEC);
}

/* devaccess_open_as's child: as the user, open the path and send the descriptor (or the step
   and errno) to devaccessd over `sock`. Signals stay blocked as the parent left them: this
   child never execs, so no handler of devaccessd's may run in it. */
__attribute__((noreturn))
static void open_child(const struct devaccess_open_request *r, int sock, long open_max) {
    struct child_report report = { DEVACCESS_SPAWN_OK, 0 };
    int fd = -1;
    int keep[3] = { sock, -1, -1 };
    if (close_all_but(keep, open_max) != 0) {
        report.step = DEVACCESS_SPAWN_CLOSE_FDS;
        report.error = errno;
    } else if ((report.step = drop_ids(r->uid, r->gid, r->groups, r->group_count)) != 0) {
        report.error = errno;
    } else if (r->cwd != NULL && chdir(r->cwd) != 0) {
        report.step = DEVACCESS_SPAWN_CHDIR;
        report.error = errno;
    } else if ((fd = open(r->path, O_PATH | O_CLOEXEC)) < 0) {
        report.step = DEVACCESS_SPAWN_OPEN;
        report.error = errno;
    }
    struct iovec data = { &report, sizeof report };
    union { struct cmsghdr header; char space[CMSG_SPACE(sizeof(int))]; } control;
    memset(&control, 0, sizeof control);
    struct msghdr message = { 0 };
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    if (fd >= 0) {
        message.msg_control = control.space;
        message.msg_controllen = sizeof control.space;
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(header), &fd, sizeof fd);
    }
    /* Nothing to do if this fails: the parent sees end of file. */
    ssize_t sent = sendmsg(sock, &message, MSG_NOSIGNAL);
    (void)sent;
    _exit(0);
}

static void reap(pid_t pid, int pidfd) {
    int status = 0;
    int rc;
    do { rc = devaccess_wait(pidfd, pid, 0, 0, &status); } while (rc < 0 && errno == EINTR);
}

static int failed(struct devaccess_spawn_result *result, int step, int error) {
    result->step = step;
    result->error = error;
    return -1;
}

/* Reads the child's next report: 1 with *report, 0 at end of file (exec closed the pipe, or
   the child died), -1 with *error when the read failed or the report was torn. */
static int read_report(int fd, struct child_report *report, int *error) {
    size_t got = 0;
    while (got < sizeof *report) {
        ssize_t n = read(fd, (char *)report + got, sizeof *report - got);
        if (n > 0) {
            got += (size_t)n;
        } else if (n == 0) {
            break;
        } else if (errno != EINTR) {
            *error = errno;
            return -1;
        }
    }
    if (got == 0) return 0;
    if (got < sizeof *report) {
        *error = EPROTO;
        return -1;
    }
    return 1;
}

/* Forks the child (held: with a gate) and opens its pidfd. 0 with *out filled, or -1. */
static int fork_child(const struct devaccess_spawn_request *request, int held, struct devaccess_spawn_held *out,
                      struct devaccess_spawn_result *result) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) return failed(result, DEVACCESS_SPAWN_PIPE, errno);
    /* A socket, not a pipe: sending to a child that died is EPIPE with MSG_NOSIGNAL, never SIGPIPE. */
    int gate[2] = { -1, -1 };
    if (held && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gate) != 0) {
        int error = errno;
        close(report[0]);
        close(report[1]);
        return failed(result, DEVACCESS_SPAWN_PIPE, error);
    }
    long open_max = sysconf(_SC_OPEN_MAX);
    if (open_max < 0) open_max = 1024 * 1024;

    /* No handler of this process may run in the child before it resets them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);

    pid_t pid = fork();
    if (pid == 0) {
        close(report[0]);
        if (held) close(gate[1]);
        run_child(request, report[1], gate[0], open_max);
    }
    int fork_error = errno;
    int pidfd = -1;
    int pidfd_error = 0;
    if (pid > 0) {
        /* At once, while only this process could reap the child. */
        pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0) pidfd_error = errno;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(report[1]);
    if (held) close(gate[0]);

    if (pid < 0) {
        close(report[0]);
        if (held) close(gate[1]);
        return failed(result, DEVACCESS_SPAWN_FORK, fork_error);
    }
    if (pidfd < 0 && pidfd_error != ENOSYS) {
        /* Without the pidfd the caller cannot follow the program: stop it before it runs. */
        close(report[0]);
        if (held) close(gate[1]);
        kill(pid, SIGKILL);
        reap(pid, -1);
        return failed(result, DEVACCESS_SPAWN_PIDFD, pidfd_error);
    }
    out->pid = pid;
    out->pidfd = pidfd;
    out->report = report[0];
    out->gate = gate[1];
    return 0;
}

/* The child could not be started (or must not run): it is stopped, reaped, and its
   descriptors closed. */
static void discard(struct devaccess_spawn_held *child, int kill_first) {
    if (child->gate >= 0) close(child->gate);
    if (child->report >= 0) close(child->report);
    if (kill_first) kill(child->pid, SIGKILL);
    reap(child->pid, child->pidfd);
    if (child->pidfd >= 0) close(child->pidfd);
    child->gate = child->report = child->pidfd = -1;
}

/* Reads what the exec did: 0 (EOF: the program runs), or -1 with the step after the child
   was reaped. */
static int await_exec(struct devaccess_spawn_held *child, struct devaccess_spawn_result *result) {
    struct child_report report;
    int error = 0;
    int got = read_report(child->report, &report, &error);
    close(child->report);
    child->report = -1;
    if (got == 0) {
        result->pid = child->pid;
        result->pidfd = child->pidfd;
        return 0;
    }
    /* A torn report or a failed read: the child's state is unknown, so it must not run. */
    discard(child, got < 0);
    return got > 0 ? failed(result, report.step, report.error) : failed(result, DEVACCESS_SPAWN_REPORT, error);
}

static void clear(struct devaccess_spawn_result *result) {
    result->pid = -1;
    result->pidfd = -1;
    result->step = DEVACCESS_SPAWN_OK;
    result->error = 0;
}

int devaccess_spawn(const struct devaccess_spawn_request *request, struct devaccess_spawn_result *result) {
    clear(result);
    struct devaccess_spawn_held child;
    if (fork_child(request, 0, &child, result) != 0) return -1;
    return await_exec(&child, result);
}

int devaccess_spawn_start(const struct devaccess_spawn_request *request, struct devaccess_spawn_held *held,
                          struct devaccess_spawn_result *result) {
    clear(result);
    held->pid = -1;
    held->pidfd = held->gate = held->report = -1;
    struct devaccess_spawn_held child;
    if (fork_child(request, 1, &child, result) != 0) return -1;
    struct child_report report;
    int error = 0;
    int got = read_report(child.report, &report, &error);
    if (got == 1 && report.step == DEVACCESS_SPAWN_OK) {
        *held = child;
        result->pid = child.pid;
        result->pidfd = child.pidfd;
        return 0;
    }
    /* Failed setup, or ended before it was ready (killed: after setuid it is the user's). */
    discard(&child, got < 0);
    if (got == 1) return failed(result, report.step, report.error);
    return failed(result, DEVACCESS_SPAWN_REPORT, got == 0 ? ESRCH : error);
}

int devaccess_spawn_release(struct devaccess_spawn_held *held, struct devaccess_spawn_result *result) {
    clear(result);
    char go = 1;
    ssize_t sent;
    do { sent = send(held->gate, &go, 1, MSG_NOSIGNAL); } while (sent < 0 && errno == EINTR);
    close(held->gate);
    held->gate = -1;
    /* A failed send means the child is gone: its report (or EOF) says how. */
    int rc = await_exec(held, result);
    held->pidfd = -1;  /* the result's now, or closed */
    return rc;
}

void devaccess_spawn_abandon(struct devaccess_spawn_held *held) {
    discard(held, 0);  /* the gate's end of file makes it exit 127 unrun */
}

/* Receives open_child's report and descriptor from `sock` within `timeout_ms`. */
static int receive_opened(int sock, int timeout_ms, int *fd, struct devaccess_spawn_result *result) {
    struct pollfd ready = { sock, POLLIN, 0 };
    int polled;
    do { polled = poll(&ready, 1, timeout_ms); } while (polled < 0 && errno == EINTR);
    if (polled <= 0) return failed(result, DEVACCESS_SPAWN_REPORT, polled == 0 ? ETIMEDOUT : errno);
    struct child_report report;
    struct iovec data = { &report, sizeof report };
    union { struct cmsghdr header; char space[CMSG_SPACE(sizeof(int))]; } control;
    struct msghdr message = { 0 };
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control.space;
    message.msg_controllen = sizeof control.space;
    ssize_t got;
    do { got = recvmsg(sock, &message, MSG_CMSG_CLOEXEC | MSG_DONTWAIT); } while (got < 0 && errno == EINTR);
    if (got < 0) return failed(result, DEVACCESS_SPAWN_REPORT, errno);
    int received = -1;
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    if (header != NULL && header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS
        && header->cmsg_len == CMSG_LEN(sizeof(int))) {
        memcpy(&received, CMSG_DATA(header), sizeof received);
    }
    if (got == (ssize_t)sizeof report && report.step == DEVACCESS_SPAWN_OK && received >= 0) {
        *fd = received;
        return 0;
    }
    if (received >= 0) close(received);
    if (got != (ssize_t)sizeof report || report.step == DEVACCESS_SPAWN_OK) {
        return failed(result, DEVACCESS_SPAWN_REPORT, got == 0 ? ESRCH : EPROTO);
    }
    return failed(result, report.step, report.error);
}

int devaccess_open_as(const struct devaccess_open_request *request, int *fd, struct devaccess_spawn_result *result) {
    clear(result);
    *fd = -1;
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return failed(result, DEVACCESS_SPAWN_PIPE, errno);
    long open_max = sysconf(_SC_OPEN_MAX);
    if (open_max < 0) open_max = 1024 * 1024;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = fork();
    if (pid == 0) {
        close(pair[0]);
        open_child(request, pair[1], open_max);
    }
    int fork_error = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(pair[1]);
    if (pid < 0) {
        close(pair[0]);
        return failed(result, DEVACCESS_SPAWN_FORK, fork_error);
    }
    int rc = receive_opened(pair[0], request->timeout_ms, fd, result);
    close(pair[0]);
    /* Still this process's unreaped child: the pid names it alone. */
    if (rc != 0) kill(pid, SIGKILL);
    reap(pid, -1);
    return rc;
}

int devaccess_wait(int pidfd, pid_t pid, int nohang, int keep, int *wait_status) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    int options = WEXITED | (nohang ? WNOHANG : 0) | (keep ? WNOWAIT : 0);
    int rc = -1;
    if (pidfd >= 0) {
        /* P_PIDFD (3) since Linux 5.4; glibc's idtype_t may not name it. */
        rc = waitid((idtype_t)3, (id_t)pidfd, &info, options);
        if (rc != 0 && errno != EINVAL) return -1;
    }
    if (rc != 0 && waitid(P_PID, (id_t)pid, &info, options) != 0) return -1;
    if (info.si_pid == 0) return 0;
    switch (info.si_code) {
    case CLD_EXITED: *wait_status = (info.si_status & 0xff) << 8; return 1;
    case CLD_KILLED: *wait_status = info.si_status & 0x7f; return 1;
    case CLD_DUMPED: *wait_status = (info.si_status & 0x7f) | 0x80; return 1;
    default: return 0; /* stopped or continued: not asked for (no WSTOPPED/WCONTINUED) */
    }
}

int devaccess_landlock_abi_version(void) {
    return (int)syscall(SYS_landlock_create_ruleset, NULL, 0, DEVACCESS_LANDLOCK_CREATE_RULESET_VERSION);
}

int devaccess_landlock_create_ruleset(uint64_t handled_access_fs) {
    struct devaccess_landlock_ruleset_attr attr = { handled_access_fs };
    return (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
}

int devaccess_landlock_add_path_rule(int ruleset_fd, int parent_fd, uint64_t allowed_access) {
    struct devaccess_landlock_path_beneath_attr attr = { allowed_access, parent_fd };
    return (int)syscall(SYS_landlock_add_rule, ruleset_fd, DEVACCESS_LANDLOCK_RULE_PATH_BENEATH, &attr, 0);
}

