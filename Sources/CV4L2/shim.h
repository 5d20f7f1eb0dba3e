#ifndef DEVACCESS_CV4L2_SHIM_H
#define DEVACCESS_CV4L2_SHIM_H
#include <sys/types.h>
#include <fcntl.h>
#include <errno.h>
#include <string.h>
#include <linux/videodev2.h>
#include <libv4l2.h>
#include <sys/sysmacros.h>

static inline unsigned int devaccess_v4l2_major(dev_t d) { return major(d); }
static inline unsigned int devaccess_v4l2_minor(dev_t d) { return minor(d); }

/* The ioctl code is a function-like macro; Swift sees this value instead. */
static inline unsigned long devaccess_vidioc_querycap(void) { return VIDIOC_QUERYCAP; }

/* v4l2_open and v4l2_ioctl are variadic; Swift calls these fixed-argument forms.
   Both return -1 and leave errno set on failure. */
static inline int devaccess_v4l2_open(const char *path, int flags) { return v4l2_open(path, flags); }
static inline int devaccess_v4l2_close(int fd) { return v4l2_close(fd); }

/* Fills *cap; returns 0 or -errno. */
static inline int devaccess_v4l2_querycap(int fd, struct v4l2_capability *cap) {
    memset(cap, 0, sizeof(*cap));
    int r;
    do { r = v4l2_ioctl(fd, VIDIOC_QUERYCAP, cap); } while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}
#endif
