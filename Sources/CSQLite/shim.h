#ifndef DEVACCESS_CSQLITE_SHIM_H
#define DEVACCESS_CSQLITE_SHIM_H
#include <sqlite3.h>
/* SQLITE_TRANSIENT is a function-like cast macro Swift cannot import. */
static inline sqlite3_destructor_type devaccess_sqlite_transient(void) { return SQLITE_TRANSIENT; }
#endif
