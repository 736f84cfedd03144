/*
 * thread-impl.h - what a thread of dtrain's says about itself to the system: its name (in
 * `top -H`, `ps -L`, perf and gdb) and, for a helper off the training step's path, that it
 * must not take the CPU from the step's thread when it wakes.
 */
#ifndef DTRAIN_CORE_THREAD_IMPL_H
#define DTRAIN_CORE_THREAD_IMPL_H

/* Name the calling thread (at most 15 bytes are kept: "dt-prefetch"). */
void dt__thread_name(const char *name);

/* Name the calling thread and make it a background helper (SCHED_BATCH: the same share of
 * the CPU as any thread, but its wake-up never preempts the thread running on its core; it
 * runs when that one waits or its time slice ends). For the threads of a replica that fetch
 * shards, send heartbeats, watch the ring and write checkpoints: each of their wake-ups
 * used to preempt the step's thread for the whole of an HTTP request (~0.2 ms on a 2-core
 * VM), and in a ring every other member waited that out too (docs/PERFORMANCE.md). Not for
 * a thread the step waits for (the ring's comm thread, the compute pool, a PS's). Best
 * effort: a system that refuses leaves the thread as it was. */
void dt__thread_background(const char *name);

#endif
