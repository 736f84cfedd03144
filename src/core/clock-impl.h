/* clock-impl.h - the monotonic clock and an EINTR-proof sleep, for timeouts and polling: the
 * one copy every module uses (seconds or milliseconds as doubles for measuring, whole
 * milliseconds for deadlines). */
#ifndef DTRAIN_CORE_CLOCK_IMPL_H
#define DTRAIN_CORE_CLOCK_IMPL_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

/* Seconds / milliseconds on the monotonic clock (an arbitrary origin: for differences). */
static inline double dt__mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static inline double dt__mono_ms(void) { return dt__mono_s() * 1e3; }

/* Whole milliseconds on the monotonic clock, for deadlines ("now + timeout_ms"). */
static inline int64_t dt__now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Microseconds on the monotonic clock, for short spins. */
static inline int64_t dt__now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ms milliseconds from now as an absolute CLOCK_MONOTONIC time, for pthread_cond_timedwait
 * on a condition variable set to that clock. */
static inline struct timespec dt__mono_after_ms(int64_t ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (ms < 0) ms = 0;
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    return ts;
}

/* Sleep ms milliseconds (nothing when ms <= 0), resumed across signals. */
static inline void dt__sleep_ms(double ms) {
    if (ms <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                          .tv_nsec = (long)((ms - 1000.0 * (double)(time_t)(ms / 1000)) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

#endif
