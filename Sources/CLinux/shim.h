#ifndef DEVACCESS_CLINUX_SHIM_H
#define DEVACCESS_CLINUX_SHIM_H
#include <sys/types.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <termios.h>

/* O_PATH is hidden behind _GNU_SOURCE, which a shim must not define (it clashes with
   SwiftGlibc); glibc always defines the value itself as __O_PATH. */
static inline int devaccess_o_path(void) { return __O_PATH; }

/* makedev/major/minor are macros in glibc. */
static inline unsigned int devaccess_major(dev_t d) { return major(d); }
static inline unsigned int devaccess_minor(dev_t d) { return minor(d); }
static inline dev_t devaccess_makedev(unsigned int ma, unsigned int mi) { return makedev(ma, mi); }
#endif
