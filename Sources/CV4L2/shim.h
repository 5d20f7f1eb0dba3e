#ifndef DEVACCESS_CV4L2_SHIM_H
#define DEVACCESS_CV4L2_SHIM_H
#include <sys/types.h>
#include <sys/ioctl.h>
#include <errno.h>
#include <string.h>
#include <linux/videodev2.h>

/* The kernel's V4L2 API, used directly. libv4l2 is not used for VIDIOC_QUERYCAP:
   v4l2_open() loads libv4l2's plugins, and the mplane plugin printf()s
   "Using mplane plugin for capture output" to the caller's stdout, which corrupts
   `devaccess ... --json`. Format conversion, libv4l2's reason to exist, is not
   needed to ask a node what it is. */

/* Fills *cap; returns 0 or -errno. ioctl is variadic, so Swift calls this. */
static inline int devaccess_v4l2_querycap(int fd, struct v4l2_capability *cap) {
    memset(cap, 0, sizeof(*cap));
    int r;
    do { r = ioctl(fd, VIDIOC_QUERYCAP, cap); } while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}
/* Capture by mmap streaming (Examples/snapshot). Each returns 0 or -errno. */
static inline int devaccess_v4l2_ioctl(int fd, unsigned long request, void *argument) {
    int r;
    do { r = ioctl(fd, request, argument); } while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}
static inline int devaccess_v4l2_s_fmt(int fd, struct v4l2_format *format) {
    return devaccess_v4l2_ioctl(fd, VIDIOC_S_FMT, format);
}
static inline int devaccess_v4l2_reqbufs(int fd, struct v4l2_requestbuffers *request) {
    return devaccess_v4l2_ioctl(fd, VIDIOC_REQBUFS, request);
}
static inline int devaccess_v4l2_querybuf(int fd, struct v4l2_buffer *buffer) {
    return devaccess_v4l2_ioctl(fd, VIDIOC_QUERYBUF, buffer);
}
static inline int devaccess_v4l2_qbuf(int fd, struct v4l2_buffer *buffer) {
    return devaccess_v4l2_ioctl(fd, VIDIOC_QBUF, buffer);
}
static inline int devaccess_v4l2_dqbuf(int fd, struct v4l2_buffer *buffer) {
    return devaccess_v4l2_ioctl(fd, VIDIOC_DQBUF, buffer);
}
static inline int devaccess_v4l2_streamon(int fd) {
    int type = V4L2_BUF_TYPE_VIDEO_CAPTURE;
    return devaccess_v4l2_ioctl(fd, VIDIOC_STREAMON, &type);
}
static inline int devaccess_v4l2_streamoff(int fd) {
    int type = V4L2_BUF_TYPE_VIDEO_CAPTURE;
    return devaccess_v4l2_ioctl(fd, VIDIOC_STREAMOFF, &type);
}
/* The buffer's offset for mmap(2) (a union member Swift reads awkwardly). */
static inline unsigned int devaccess_v4l2_buffer_offset(const struct v4l2_buffer *buffer) {
    return buffer->m.offset;
}
#endif
