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
#include <errno.h>
#include <sys/ioctl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/inet_diag.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/kcmp.h>
#include <sys/vfs.h>

/* O_PATH is hidden behind _GNU_SOURCE, which a shim must not define (it clashes with
   SwiftGlibc); glibc always defines the value itself as __O_PATH. */
static inline int devaccess_o_path(void) { return __O_PATH; }

/* The calling thread's name as ps -T shows it (15 bytes kept); prctl is variadic, which
   Swift cannot call. */
static inline int devaccess_set_thread_name(const char *name) { return prctl(PR_SET_NAME, name, 0, 0, 0); }

/* 0 when threads a and b share one descriptor table (kcmp KCMP_FILES), 1 or 2 when not,
   -1 with errno when the kernel cannot say (no CONFIG_KCMP, no ptrace access). */
static inline long devaccess_same_files(pid_t a, pid_t b) { return syscall(SYS_kcmp, a, b, KCMP_FILES, 0, 0); }

/* makedev/major/minor are macros in glibc. */
static inline unsigned int devaccess_major(dev_t d) { return major(d); }
static inline unsigned int devaccess_minor(dev_t d) { return minor(d); }
static inline dev_t devaccess_makedev(unsigned int ma, unsigned int mi) { return makedev(ma, mi); }

/* SCM_RIGHTS needs the CMSG_* macros, which Swift cannot import. */
#ifndef DEVACCESS_MSG_CMSG_CLOEXEC
#define DEVACCESS_MSG_CMSG_CLOEXEC 0x40000000
/* errno's symbolic name ("EACCES"), or NULL for a value glibc does not know (glibc 2.32+).
   string.h declares it only under _GNU_SOURCE, which a shim must not define. */
const char *strerrorname_np(int errnum);

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
/* errno's symbolic name ("EACCES"), or NULL for a value glibc does not know (glibc 2.32+).
   string.h declares it only under _GNU_SOURCE, which a shim must not define. */
const char *strerrorname_np(int errnum);

#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
/* errno's symbolic name ("EACCES"), or NULL for a value glibc does not know (glibc 2.32+).
   string.h declares it only under _GNU_SOURCE, which a shim must not define. */
const char *strerrorname_np(int errnum);

#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
/* errno's symbolic name ("EACCES"), or NULL for a value glibc does not know (glibc 2.32+).
   string.h declares it only under _GNU_SOURCE, which a shim must not define. */
const char *strerrorname_np(int errnum);

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

/* A socket whose file carries uid/gid as its file-system ids, made by this thread alone
   (setfsuid changes only the calling thread's credentials) and restored at once. The
   kernel's per-socket checks (nftables' `meta skuid`, sock_diag's owner) then see that
   user: how root asks "would an unprivileged program be let through?" without forking. */
static inline int devaccess_socket_as(int family, int type, unsigned int uid, unsigned int gid) {
    int previous_gid = setfsgid(gid);
    int previous_uid = setfsuid(uid);
    int fd = socket(family, type, 0);
    int error = errno;
    setfsuid((unsigned int)previous_uid);
    setfsgid((unsigned int)previous_gid);
    errno = error;
    return fd;
}

/* accept4(2) is declared only under _GNU_SOURCE: a new connection close-on-exec from its
   first instant, so a program a run starts at that moment cannot inherit it. */
static inline int devaccess_accept4(int fd, struct sockaddr *address, socklen_t *length, int flags) {
    return (int)syscall(SYS_accept4, fd, address, length, flags);
}

/* Where the client of an accepted TCP connection dialled before netfilter redirected it
   (nft `redirect`/`dnat` in the output hook, as config/nftables/devaccess-gpsd.nft does
   for gpsd's port): conntrack's original destination, SO_ORIGINAL_DST (IPv4) or
   IP6T_SO_ORIGINAL_DST (IPv6), both option 80. The kernel keeps it; the client cannot
   choose it. Fills `storage`; returns 0 or -errno (-ENOENT: the connection is not
   tracked, so nothing redirected it). */
static inline int devaccess_original_destination(int fd, int family, struct sockaddr_storage *storage) {
    socklen_t length = sizeof *storage;
    int level = family == AF_INET6 ? IPPROTO_IPV6 : IPPROTO_IP;
    memset(storage, 0, sizeof *storage);
    if (getsockopt(fd, level, 80, storage, &length) != 0) return -errno;
    return 0;
}

static inline int devaccess_pidfd_send(int pidfd, int signal) {
    return (int)syscall(SYS_pidfd_send_signal, pidfd, signal, NULL, 0);
}

/* Whether an address sock_diag answered with is `wanted` (4 or 16 bytes, per `family`). An
   AF_INET6 socket talking IPv4 (::ffff:127.0.0.1) answers an AF_INET lookup in its own
   family, with the IPv4 address mapped. */
static inline int devaccess_diag_address_is(unsigned char answered_family, const __be32 *answered, int family,
                                            const unsigned char *wanted) {
    const unsigned char *bytes = (const unsigned char *)answered;
    static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    if (answered_family == family) return memcmp(bytes, wanted, family == AF_INET ? 4 : 16) == 0;
    return family == AF_INET && answered_family == AF_INET6 && memcmp(bytes, mapped, 12) == 0 &&
        memcmp(bytes + 12, wanted, 4) == 0;
}

/* The uid that owns the TCP socket whose local end is src:sport and remote end is
   dst:dport (ports in host order, addresses in network order: 4 bytes for AF_INET, 16 for
   AF_INET6), asked of the kernel with one exact sock_diag lookup (inet_diag(7)); a listener
   on src:sport, which the kernel answers with when no connection matches, is nobody's. This is
   how a loopback server learns who connected: TCP has no SO_PEERCRED. Returns the uid, or
   -errno (-ENOENT: no such socket, or no process holds it any more). The uid is the socket's creator's, as
   SO_PEERCRED gives the connecting process's credentials for a Unix socket. `inode` (may be NULL)
   receives the socket's inode, which /proc/PID/fd/N names as socket:[INODE] in every process
   holding it. */
static inline long long devaccess_tcp_socket_uid(int family, const unsigned char *src, unsigned short sport,
                                                 const unsigned char *dst, unsigned short dport,
                                                 unsigned long long *inode) {
    if (family != AF_INET && family != AF_INET6) return -EAFNOSUPPORT;
    size_t length = family == AF_INET ? 4 : 16;
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) return -errno;
    struct timeval timeout = { .tv_sec = 1, .tv_usec = 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    struct { struct nlmsghdr header; struct inet_diag_req_v2 request; } message;
    memset(&message, 0, sizeof message);
    message.header.nlmsg_len = sizeof message;
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    message.header.nlmsg_flags = NLM_F_REQUEST;
    message.request.sdiag_family = (unsigned char)family;
    message.request.sdiag_protocol = IPPROTO_TCP;
    message.request.idiag_states = ~0U;
    message.request.id.idiag_sport = htons(sport);
    message.request.id.idiag_dport = htons(dport);
    memcpy(message.request.id.idiag_src, src, length);
    memcpy(message.request.id.idiag_dst, dst, length);
    message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    struct sockaddr_nl kernel;
    memset(&kernel, 0, sizeof kernel);
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd, &message, sizeof message, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
        int error = errno;
        close(fd);
        return -error;
    }
    long long buffer[1024];  /* 8 KiB, aligned for nlmsghdr */
    ssize_t received;
    do { received = recv(fd, buffer, sizeof buffer, 0); } while (received < 0 && errno == EINTR);
    int error = errno;
    close(fd);
    if (received < 0) return -error;
    struct nlmsghdr *header = (struct nlmsghdr *)buffer;
    int left = (int)received;
    for (; NLMSG_OK(header, left); header = NLMSG_NEXT(header, left)) {
        if (header->nlmsg_type == NLMSG_ERROR) {
            struct nlmsgerr *failure = (struct nlmsgerr *)NLMSG_DATA(header);
            return failure->error < 0 ? failure->error : -EPROTO;
        }
        if (header->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
            header->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
            struct inet_diag_msg *socket_info = (struct inet_diag_msg *)NLMSG_DATA(header);
            /* The kernel looks the tuple up as it would an incoming packet's: with no
               connection there, it answers with a socket listening on src:sport, whoever's
               it is (a client whose source port conntrack rewrote is looked up at a port it
               does not hold). Only the very connection names its owner. */
            if (socket_info->idiag_state == 10 /* TCP_LISTEN */ ||
                socket_info->id.idiag_sport != htons(sport) || socket_info->id.idiag_dport != htons(dport) ||
                !devaccess_diag_address_is(socket_info->idiag_family, socket_info->id.idiag_src, family, src) ||
                !devaccess_diag_address_is(socket_info->idiag_family, socket_info->id.idiag_dst, family, dst))
                return -ENOENT;
            /* No inode and uid 0: no process holds the socket (closed and orphaned, TIME_WAIT,
               a request socket), and the kernel then says 0, which is not root's. A socket
               still waiting to be accepted has no inode either but keeps the listener's uid. */
            if (socket_info->idiag_inode == 0 && socket_info->idiag_uid == 0) return -ENOENT;
            if (inode) *inode = socket_info->idiag_inode;
            return (long long)socket_info->idiag_uid;
        }
    }
    return -EPROTO;
}
/* The type of the file system holding `path` (statfs's f_type: EXT4_SUPER_MAGIC...), or -1
   with errno. */
static inline long long devaccess_fs_type(const char *path) {
    struct statfs info;
    if (statfs(path, &info) < 0) return -1;
    return (long long)info.f_type;
}
/* Bytes waiting to be read on `fd` (FIONREAD), or -1 with errno. */
static inline int devaccess_queued_bytes(int fd) {
    int count = 0;
    if (ioctl(fd, FIONREAD, &count) < 0) return -1;
    return count;
}

/* errno's symbolic name ("EACCES"), or NULL for a value glibc does not know (glibc 2.32+).
   string.h declares it only under _GNU_SOURCE, which a shim must not define. */
const char *strerrorname_np(int errnum);

#endif
