/*
 * stop-impl.h - a process's stop request (SIGTERM, SIGINT) as a flag its loops read at
 * their safe points, instead of a handler that interrupts whatever runs.
 *
 * Kubernetes sends SIGTERM before it evicts a pod and waits terminationGracePeriodSeconds;
 * the job master sends it before SIGKILL when it stops a job. A training process uses that
 * time to end its step, save what it owns and exit (docs/JOBS.md, "Stop and preemption").
 *
 * dt__stop_watch blocks both signals in the calling thread (so call it before the process
 * makes its own threads: they inherit the mask) and starts a thread that waits for them
 * with sigwait; a thread that does not block them (a library's, started earlier) runs a
 * handler that notes the signal, its system calls restarted. dt__stop_signal says what
 * came.
 */
#ifndef DTRAIN_CORE_STOP_IMPL_H
#define DTRAIN_CORE_STOP_IMPL_H

#include "dtrain/err.h"

/* Start watching (once per process; later calls do nothing). */
dt_err dt__stop_watch(void);
/* The signal that asked this process to stop (SIGTERM, SIGINT), 0 while none has. */
int dt__stop_signal(void);

#endif
