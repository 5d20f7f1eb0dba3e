#ifndef DEVACCESS_CSYSTEMD_SHIM_H
#define DEVACCESS_CSYSTEMD_SHIM_H
#include <sys/uio.h>
#include <systemd/sd-journal.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-login.h>

/* devaccessd's socket and process helpers. They live here because the broker links
   libsystemd anyway and a shim must not define _GNU_SOURCE (it clashes with
   SwiftGlibc), behind which glibc hides these declarations. */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <signal.h>
#include <unistd.h>
#include <malloc.h>

/* accept4(2): declared by <sys/socket.h> only with _GNU_SOURCE. */
extern int accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags);

/* struct ucred (SO_PEERCRED) is likewise hidden; same layout. */
struct devaccess_ucred {
    pid_t pid;
    uid_t uid;
    gid_t gid;
};

/* SO_PEERPIDFD (Linux 6.5): a pidfd for the process that connected, race-free.
   Older kernel headers do not define it; the value is the same on every architecture
   that uses asm-generic/socket.h. */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* syscall(2) is variadic, which Swift cannot call. */
static inline int devaccess_pidfd_open(pid_t pid, unsigned int flags) {
    return (int)syscall(SYS_pidfd_open, pid, flags);
}
#endif
