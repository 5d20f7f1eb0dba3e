#ifndef DEVACCESS_CUDEV_SHIM_H
#define DEVACCESS_CUDEV_SHIM_H
#include <libudev.h>

#endif
