#ifndef DEVACCESS_SPAWN_H
#define DEVACCESS_SPAWN_H
#include <sys/types.h>

/* What `devaccess run` starts: everything prepared before fork, so the child only makes
   async-signal-safe calls. */
typedef struct {
    const char *path;
    char *const *argv;
    char *const *envp;
    const char *directory;
    int streams[3];          /* become 0, 1, 2 */
    uid_t uid;
    gid_t gid;
    const gid_t *groups;
    int group_count;
    mode_t umask;
} devaccess_spawn_spec;

/* Steps the child reports a failure of (with errno) over the error pipe. */
enum {
    DEVACCESS_STEP_SIGNALS = 1, DEVACCESS_STEP_PROCESS_GROUP, DEVACCESS_STEP_STREAMS, DEVACCESS_STEP_SETGROUPS,
    DEVACCESS_STEP_SETGID, DEVACCESS_STEP_SETUID, DEVACCESS_STEP_PRIVILEGES_KEPT, DEVACCESS_STEP_CHDIR,
    DEVACCESS_STEP_GATE, DEVACCESS_STEP_EXEC
};

/* Forks a child that drops to spec's user and groups, puts itself in its own process group,
   and then waits, before exec, for one byte on the gate (a socket): EOF instead makes it exit
   127 without running anything. On success returns 0 with *pid, *gate (write one byte to
   release, or close to abandon) and *report (read: EOF = exec'd; else two ints, step and
   errno). Returns -1 with errno when fork or a pipe fails. */
int devaccess_spawn_held(const devaccess_spawn_spec *spec, pid_t *pid, int *gate, int *report);

/* Waits until `pid` exits without reaping it (WNOWAIT): the pid stays the program's until
   devaccess_reap. Returns as devaccess_wait_status does, -1 with errno on failure. */
int devaccess_wait_exit(pid_t pid, int *code, int *signal, int *core);

/* 1 with *code for a normal exit, 2 with *signal (and *core) for death by signal. */
int devaccess_wait_status(int status, int *code, int *signal, int *core);
#endif
