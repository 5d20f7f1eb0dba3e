#ifndef DEVACCESS_CV4L2_SHIM_H
#define DEVACCESS_CV4L2_SHIM_H
#include <sys/types.h>
#include <sys/ioctl.h>
#include <errno.h>
#include <string.h>
#include <linux/videodev2.h>

/* The kernel's V4L2 API, used directly by the camera adapter. libv4l2 is not used for
   VIDIOC_QUERYCAP: v4l2_open() loads libv4l2's plugins, and the mplane plugin printf()s
   "Using mplane plugin for capture output" to the caller's stdout, which corrupts
   `devaccess ... --json`. Format conversion, libv4l2's reason to exist, is not
   needed to ask a node what it is; Examples/snapshot converts through libv4l2 (CV4L2Lib). */

/* Fills *cap; returns 0 or -errno. ioctl is variadic, so Swift calls this. */
static inline int devaccess_v4l2_querycap(int fd, struct v4l2_capability *cap) {
    memset(cap, 0, sizeof(*cap));
    int r;
    do { r = ioctl(fd, VIDIOC_QUERYCAP, cap); } while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}
#endif
