#ifndef DEVACCESS_CACL_SHIM_H
#define DEVACCESS_CACL_SHIM_H
#include <sys/types.h>
#include <sys/acl.h>
#include <acl/libacl.h>
#endif
