/*
 * futex-impl.h - waiting for a 32-bit word that another thread or process changes: a short
 * spin (dt__cpu_relax), then a sleep on the word (a futex).
 *
 * The words live in memory two processes share (a sealed memfd segment, core/shm-impl.h) as
 * well as in one process's own, so the calls are the shared (not FUTEX_PRIVATE) kind. A
 * waiter says it is asleep (a flag the waker reads) before it looks at the word a last time
 * and sleeps, and the waker changes the word before it reads the flag: with both sides
 * sequentially consistent, a wake-up is never missed (dt__futex_publish, dt__futex_sleep).
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

/* Store v into word, then wake its sleepers if *asleep (the waiter's flag) says there are. */
static inline void dt__futex_publish(_Atomic uint32_t *word, uint32_t v,
                                     _Atomic uint32_t *asleep) {
    atomic_store(word, v);
    if (atomic_load(asleep)) dt__futex_wake(word);
}

/* Set *asleep, and sleep while word still holds `seen` (at most timeout_ns); *asleep is
 * cleared after. The caller looks at the word again. */
static inline void dt__futex_sleep(_Atomic uint32_t *word, uint32_t seen,
                                   _Atomic uint32_t *asleep, long timeout_ns) {
    atomic_store(asleep, 1);
    if (atomic_load(word) == seen) dt__futex_wait(word, seen, timeout_ns);
    atomic_store_explicit(asleep, 0, memory_order_relaxed);
}

/* One turn of a spin: tells the core (and a sibling hyperthread) that this is a wait. */
static inline void dt__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

#endif
