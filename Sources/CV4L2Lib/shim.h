#ifndef DEVACCESS_CV4L2LIB_SHIM_H
#define DEVACCESS_CV4L2LIB_SHIM_H
#include <sys/types.h>
#include <errno.h>
#include <string.h>
#include <linux/videodev2.h>
#include <libv4l2.h>
#include <libv4lconvert.h>

/* libv4l2 and libv4lconvert, for Examples/snapshot only (the adapter asks VIDIOC_QUERYCAP
   of the kernel directly: Sources/CV4L2/shim.h). v4l2_ioctl is variadic and the VIDIOC_*
   numbers are macros Swift cannot import, so each request has a wrapper; each returns 0 or
   -errno. */
static inline int devaccess_libv4l2_ioctl(int fd, unsigned long request, void *argument) {
    int r;
    do { r = v4l2_ioctl(fd, request, argument); } while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}
static inline int devaccess_libv4l2_querycap(int fd, struct v4l2_capability *cap) {
    memset(cap, 0, sizeof(*cap));
    return devaccess_libv4l2_ioctl(fd, VIDIOC_QUERYCAP, cap);
}
static inline int devaccess_libv4l2_s_fmt(int fd, struct v4l2_format *format) {
    return devaccess_libv4l2_ioctl(fd, VIDIOC_S_FMT, format);
}
static inline int devaccess_libv4l2_reqbufs(int fd, struct v4l2_requestbuffers *request) {
    return devaccess_libv4l2_ioctl(fd, VIDIOC_REQBUFS, request);
}
static inline int devaccess_libv4l2_querybuf(int fd, struct v4l2_buffer *buffer) {
    return devaccess_libv4l2_ioctl(fd, VIDIOC_QUERYBUF, buffer);
}
static inline int devaccess_libv4l2_qbuf(int fd, struct v4l2_buffer *buffer) {
    return devaccess_libv4l2_ioctl(fd, VIDIOC_QBUF, buffer);
}
static inline int devaccess_libv4l2_dqbuf(int fd, struct v4l2_buffer *buffer) {
    return devaccess_libv4l2_ioctl(fd, VIDIOC_DQBUF, buffer);
}
static inline int devaccess_libv4l2_streamon(int fd) {
    int type = V4L2_BUF_TYPE_VIDEO_CAPTURE;
    return devaccess_libv4l2_ioctl(fd, VIDIOC_STREAMON, &type);
}
static inline int devaccess_libv4l2_streamoff(int fd) {
    int type = V4L2_BUF_TYPE_VIDEO_CAPTURE;
    return devaccess_libv4l2_ioctl(fd, VIDIOC_STREAMOFF, &type);
}
/* The buffer's offset for v4l2_mmap (a union member Swift reads awkwardly). */
static inline unsigned int devaccess_libv4l2_buffer_offset(const struct v4l2_buffer *buffer) {
    return buffer->m.offset;
}
#endif
