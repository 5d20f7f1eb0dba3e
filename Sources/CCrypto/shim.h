#ifndef DEVACCESS_CCRYPTO_SHIM_H
#define DEVACCESS_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#endif
