/* clock-impl.h - the monotonic clock and an EINTR-proof sleep, for timeouts and polling. */
#ifndef DTRAIN_CORE_CLOCK_IMPL_H
#define DTRAIN_CORE_CLOCK_IMPL_H

#include <errno.h>
#include <time.h>

/* Seconds / milliseconds on the monotonic clock (an arbitrary origin: for differences). */
static inline double dt__mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static inline double dt__mono_ms(void) { return dt__mono_s() * 1e3; }

/* Sleep ms milliseconds (nothing when ms <= 0), resumed across signals. */
static inline void dt__sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                          .tv_nsec = (long)((ms - 1000.0 * (double)(time_t)(ms / 1000)) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

#endif
