#ifndef DEVACCESS_CLINUX_SHIM_H
#define DEVACCESS_CLINUX_SHIM_H
#include <sys/types.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <termios.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* O_PATH is hidden behind _GNU_SOURCE, which a shim must not define (it clashes with
   SwiftGlibc); glibc always defines the value itself as __O_PATH. */
static inline int devaccess_o_path(void) { return __O_PATH; }

/* makedev/major/minor are macros in glibc. */
static inline unsigned int devaccess_major(dev_t d) { return major(d); }
static inline unsigned int devaccess_minor(dev_t d) { return minor(d); }
static inline dev_t devaccess_makedev(unsigned int ma, unsigned int mi) { return makedev(ma, mi); }

/* SCM_RIGHTS needs the CMSG_* macros, which Swift cannot import. */
#ifndef DEVACCESS_MSG_CMSG_CLOEXEC
#define DEVACCESS_MSG_CMSG_CLOEXEC 0x40000000
#endif
#define DEVACCESS_MAX_PASSED_FDS 8

/* recvmsg() of up to `length` bytes and up to DEVACCESS_MAX_PASSED_FDS descriptors
   (received close-on-exec). Returns the byte count or -1 (errno); *fd_count is the number
   of descriptors stored in fds, *truncated is 1 when the kernel had to drop some. */
static inline ssize_t devaccess_recv_with_fds(int sock, void *buffer, size_t length, int flags,
                                              int *fds, int *fd_count, int *truncated) {
    union { char bytes[CMSG_SPACE(sizeof(int) * DEVACCESS_MAX_PASSED_FDS)]; struct cmsghdr align; } control;
    struct iovec iov = { .iov_base = buffer, .iov_len = length };
    struct msghdr message;
    memset(&message, 0, sizeof message);
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control.bytes;
    message.msg_controllen = sizeof control.bytes;
    *fd_count = 0;
    *truncated = 0;
    ssize_t received = recvmsg(sock, &message, flags | DEVACCESS_MSG_CMSG_CLOEXEC);
    if (received < 0) return received;
    if (message.msg_flags & MSG_CTRUNC) *truncated = 1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&message); c != NULL; c = CMSG_NXTHDR(&message, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *passed = (int *)CMSG_DATA(c);
        for (size_t i = 0; i < count; i++) {
            if (*fd_count < DEVACCESS_MAX_PASSED_FDS) fds[(*fd_count)++] = passed[i];
            else { close(passed[i]); *truncated = 1; }
        }
    }
    return received;
}

/* sendmsg() of `length` bytes with `fd_count` descriptors (at most DEVACCESS_MAX_PASSED_FDS). */
static inline ssize_t devaccess_send_with_fds(int sock, const void *buffer, size_t length, int flags,
                                              const int *fds, int fd_count) {
    union { char bytes[CMSG_SPACE(sizeof(int) * DEVACCESS_MAX_PASSED_FDS)]; struct cmsghdr align; } control;
    struct iovec iov = { .iov_base = (void *)buffer, .iov_len = length };
    struct msghdr message;
    memset(&message, 0, sizeof message);
    memset(&control, 0, sizeof control);
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    if (fd_count > 0 && fd_count <= DEVACCESS_MAX_PASSED_FDS) {
        message.msg_control = control.bytes;
        message.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
        struct cmsghdr *c = CMSG_FIRSTHDR(&message);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * fd_count);
    }
    return sendmsg(sock, &message, flags);
}

/* Open files of other processes and ending processes (who, ProcessTerminator). */
#include <sys/syscall.h>
#include <linux/stat.h>   /* struct statx: glibc declares statx() only with _GNU_SOURCE */
#include <signal.h>

#ifndef AT_STATX_DONT_SYNC
#define AT_STATX_DONT_SYNC 0x4000
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

/* syscall(2) is variadic, which Swift cannot call. */
static inline int devaccess_statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buffer) {
    return (int)syscall(SYS_statx, dirfd, path, flags, mask, buffer);
}

/* A pidfd names one process for as long as it is open: a signal sent through it never
   reaches a later process that was given the same pid. */
static inline int devaccess_process_pidfd(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

static inline int devaccess_pidfd_send(int pidfd, int signal) {
    return (int)syscall(SYS_pidfd_send_signal, pidfd, signal, NULL, 0);
}
#endif
