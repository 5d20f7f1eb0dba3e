#define _GNU_SOURCE
#include "devaccess_spawn.h"
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The child's failure: step and errno to the parent, then exit without running anything. */
static void fail(int report, int step) {
    int message[2] = { step, errno };
    ssize_t ignored = write(report, message, sizeof message);
    (void)ignored;
    _exit(127);
}

static void child(const devaccess_spawn_spec *spec, int gate, int report) {
    /* Signals as a fresh program expects them: nothing blocked, every disposition default. */
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) fail(report, DEVACCESS_STEP_SIGNALS);
    for (int number = 1; number < NSIG; number++) {
        if (number == SIGKILL || number == SIGSTOP) continue;
        signal(number, SIG_DFL);   /* EINVAL for the numbers glibc reserves: ignored */
    }
    /* Its own process group in devaccessd's session (not a session of its own: a group whose
       leader's parent is in another session would be orphaned, and SIGTSTP discarded). */
    if (setpgid(0, 0) != 0) fail(report, DEVACCESS_STEP_PROCESS_GROUP);
    /* The caller's streams onto 0, 1, 2: first out of the way (one of them may be 0-2 already). */
    int moved[3];
    for (int i = 0; i < 3; i++) {
        moved[i] = fcntl(spec->streams[i], F_DUPFD_CLOEXEC, 10);
        if (moved[i] < 0) fail(report, DEVACCESS_STEP_STREAMS);
    }
    for (int i = 0; i < 3; i++) {
        if (dup2(moved[i], i) != i) fail(report, DEVACCESS_STEP_STREAMS);
    }
    if (setgroups((size_t)spec->group_count, spec->groups) != 0) fail(report, DEVACCESS_STEP_SETGROUPS);
    if (setresgid(spec->gid, spec->gid, spec->gid) != 0) fail(report, DEVACCESS_STEP_SETGID);
    if (setresuid(spec->uid, spec->uid, spec->uid) != 0) fail(report, DEVACCESS_STEP_SETUID);
    if (spec->uid != 0 && setuid(0) == 0) {
        errno = EPERM;
        fail(report, DEVACCESS_STEP_PRIVILEGES_KEPT);
    }
    /* As the user: a directory the user may not enter is not entered. */
    if (chdir(spec->directory) != 0) fail(report, DEVACCESS_STEP_CHDIR);
    umask(spec->umask);
    char go = 0;
    ssize_t got;
    do { got = read(gate, &go, 1); } while (got < 0 && errno == EINTR);
    if (got != 1) _exit(127);   /* abandoned: devaccessd could not record or apply the run */
    /* Nothing of devaccessd's reaches the program: every descriptor above 2 closes at exec
       (the report pipe too, which is how the parent learns that exec succeeded). */
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
        for (int fd = 3; fd < 65536; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    execve(spec->path, spec->argv, spec->envp);
    fail(report, DEVACCESS_STEP_EXEC);
}

int devaccess_spawn_held(const devaccess_spawn_spec *spec, pid_t *pid, int *gate, int *report) {
    int gates[2], reports[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gates) != 0) return -1;
    if (pipe2(reports, O_CLOEXEC) != 0) {
        close(gates[0]);
        close(gates[1]);
        return -1;
    }
    pid_t forked = fork();
    if (forked < 0) {
        int saved = errno;
        close(gates[0]); close(gates[1]); close(reports[0]); close(reports[1]);
        errno = saved;
        return -1;
    }
    if (forked == 0) {
        close(gates[1]);
        close(reports[0]);
        child(spec, gates[0], reports[1]);
    }
    close(gates[0]);
    close(reports[1]);
    *pid = forked;
    *gate = gates[1];
    *report = reports[0];
    return 0;
}

int devaccess_wait_status(int status, int *code, int *signal, int *core) {
    if (WIFEXITED(status)) {
        *code = WEXITSTATUS(status);
        return 1;
    }
    if (WIFSIGNALED(status)) {
        *signal = WTERMSIG(status);
        *core = WCOREDUMP(status) ? 1 : 0;
        return 2;
    }
    return 0;
}

int devaccess_wait_exit(pid_t pid, int *code, int *signal, int *core) {
    siginfo_t info;
    int result;
    do {
        info.si_pid = 0;
        result = waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT);
    } while (result != 0 && errno == EINTR);
    if (result != 0) return -1;
    switch (info.si_code) {
    case CLD_EXITED: *code = info.si_status; return 1;
    case CLD_KILLED: *signal = info.si_status; *core = 0; return 2;
    case CLD_DUMPED: *signal = info.si_status; *core = 1; return 2;
    default: return 0;
    }
}
