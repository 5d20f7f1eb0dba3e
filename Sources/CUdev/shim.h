#ifndef DEVACCESS_CUDEV_SHIM_H
#define DEVACCESS_CUDEV_SHIM_H
#include <libudev.h>
#include <sys/sysmacros.h>

static inline unsigned int devaccess_udev_major(dev_t d) { return major(d); }
static inline unsigned int devaccess_udev_minor(dev_t d) { return minor(d); }
#endif
