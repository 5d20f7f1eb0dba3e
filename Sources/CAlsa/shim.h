#ifndef DEVACCESS_CALSA_SHIM_H
#define DEVACCESS_CALSA_SHIM_H
#include <alsa/asoundlib.h>

/* alsa-lib prints its own errors to stderr; devaccess reports them itself.
   The handler type is variadic, so it is defined here rather than in Swift. */
static void devaccess_alsa_silent_handler(const char *file, int line, const char *function,
                                          int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}
static inline void devaccess_alsa_silence_errors(void) {
    snd_lib_error_set_handler(devaccess_alsa_silent_handler);
}
#endif
