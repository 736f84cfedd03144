/*
 * futex-impl.h - sleeping on a 32-bit word until another thread or process changes it.
 *
 * The words live in memory two processes share (a sealed memfd segment, core/shm-impl.h) as
 * well as in one process's own, so the calls are the shared (not FUTEX_PRIVATE) kind. A
 * waiter says it is asleep (a flag the waker reads) before it looks at the word a last time
 * and sleeps, and the waker changes the word before it reads the flag: with both sides
 * sequentially consistent, a wake-up is never missed.
 */
#ifndef DTRAIN_CORE_FUTEX_IMPL_H
#define DTRAIN_CORE_FUTEX_IMPL_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleep while *word == seen, for at most timeout_ns (< 0: no limit); wakes early on a
 * signal or a spurious wake-up: the caller looks at the word again. */
static inline void dt__futex_wait(_Atomic uint32_t *word, uint32_t seen, long timeout_ns) {
    struct timespec ts = {timeout_ns / 1000000000L, timeout_ns % 1000000000L};
    syscall(SYS_futex, (void *)word, FUTEX_WAIT, seen, timeout_ns < 0 ? NULL : &ts, NULL, 0);
}

/* Wake every sleeper on word. */
static inline void dt__futex_wake(_Atomic uint32_t *word) {
    syscall(SYS_futex, (void *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

#endif
