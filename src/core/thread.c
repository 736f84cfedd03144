/*
 * thread.c - thread names and the background class (thread-impl.h).
 */
#include "core/thread-impl.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>

void dt__thread_name(const char *name) {
    char n[16]; /* the kernel keeps 15 bytes and the terminator: longer names fail */
    snprintf(n, sizeof n, "%s", name);
    (void)pthread_setname_np(pthread_self(), n);
}

void dt__thread_background(const char *name) {
    dt__thread_name(name);
    /* pid 0: this thread alone (Linux schedules threads, not processes) */
    struct sched_param sp = {.sched_priority = 0};
    (void)sched_setscheduler(0, SCHED_BATCH, &sp);
}
