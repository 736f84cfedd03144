/*
 * queue.c - the server's queue: its capacity, what running jobs hold, and which queued job
 * starts next.
 *
 * Capacity is CPUs (possibly fractional, as Kubernetes' cpu requests) and memory bytes. A
 * job is admitted whole (gang admission): its whole demand fits in what is free, or it
 * waits. The order is priority (higher first), then submit order, and it is strict: a job
 * at the head that does not fit blocks every job behind it, so a big job is never starved
 * by small ones that keep slipping past it. A job asking for more than the whole capacity
 * would never fit: it runs when nothing else runs (and while it runs, nothing else does).
 * Each queued job's position (1-based) and reason say where it is and why it waits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/server-impl.h"

static const char *const state_names[] = {"Queued",    "Running",   "Suspending", "Suspended",
                                          "Succeeded", "Failed",    "Stopped"};

const char *dt__sjob_state_name(dt__sjob_state s) { return state_names[s]; }

int dt__sjob_state_parse(const char *s) {
    for (int i = 0; s && i < 7; i++)
        if (!strcmp(s, state_names[i])) return i;
    return -1;
}

int dt__sjob_finished(dt__sjob_state s) {
    return s == DT__SJOB_SUCCEEDED || s == DT__SJOB_FAILED || s == DT__SJOB_STOPPED;
}

dt__demand dt__queue_machine(void) {
    dt__demand d = {.cpus = (double)sysconf(_SC_NPROCESSORS_ONLN), .mem = 0};
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        long long kb;
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1) d.mem = (int64_t)kb * 1024;
    }
    if (f) fclose(f);
    if (d.cpus < 1) d.cpus = 1;
    return d;
}

double dt__quantity(const char *s) {
    if (!s || !*s) return -1;
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0) return -1;
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},          {"m", 1e-3},        {"k", 1e3},          {"M", 1e6},
                 {"G", 1e9},       {"T", 1e12},        {"P", 1e15},         {"E", 1e18},
                 {"Ki", 1024.0},   {"Mi", 1048576.0},  {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
                 {"Pi", 1125899906842624.0}, {"Ei", 1152921504606846976.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(end, units[i].suffix)) return v * units[i].mult;
    return -1;
}

static int holds(dt__sjob_state s) {
    return s == DT__SJOB_RUNNING || s == DT__SJOB_SUSPENDING;
}

dt__demand dt__queue_used(const dt__server *s) {
    dt__demand u = {0, 0};
    for (int i = 0; i < s->njobs; i++)
        if (holds(s->jobs[i]->state)) {
            u.cpus += s->jobs[i]->demand.cpus;
            u.mem += s->jobs[i]->demand.mem;
        }
    return u;
}

static int before(const void *a, const void *b) {
    const dt__sjob *x = *(dt__sjob *const *)a, *y = *(dt__sjob *const *)b;
    if (x->priority != y->priority) return x->priority > y->priority ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int fits(dt__demand d, dt__demand cap) {
    return d.cpus <= cap.cpus + 1e-9 && d.mem <= cap.mem;
}

static void mem_text(int64_t b, char *out, size_t cap) {
    if (b >= (1LL << 30)) snprintf(out, cap, "%.1f GiB", (double)b / (1LL << 30));
    else snprintf(out, cap, "%.0f MiB", (double)b / (1 << 20));
}

int dt__queue_plan(dt__server *s, dt__sjob **start, int cap) {
    dt__sjob **q = malloc(sizeof *q * (size_t)(s->njobs ? s->njobs : 1));
    if (!q) return 0;
    int nq = 0, nstart = 0, running = 0;
    for (int i = 0; i < s->njobs; i++) {
        dt__sjob *j = s->jobs[i];
        j->position = 0;
        if (j->state == DT__SJOB_QUEUED) q[nq++] = j;
        else if (holds(j->state)) running++;
    }
    qsort(q, (size_t)nq, sizeof *q, before);
    dt__demand used = dt__queue_used(s);
    const dt__sjob *blocker = NULL;
    int pos = 0;
    for (int k = 0; k < nq; k++) {
        dt__sjob *j = q[k];
        dt__demand free_ = {s->cap.cpus - used.cpus, s->cap.mem - used.mem};
        int whole = fits(j->demand, s->cap);
        if (!blocker && ((whole && fits(j->demand, free_)) || (!whole && running == 0))) {
            if (nstart < cap) start[nstart++] = j;
            used.cpus += j->demand.cpus;
            used.mem += j->demand.mem;
            running++;
            j->reason[0] = j->message[0] = 0;
            continue;
        }
        j->position = ++pos;
        if (blocker) {
            snprintf(j->reason, sizeof j->reason, "Queued");
            snprintf(j->message, sizeof j->message, "behind %s in the queue (position %d)",
                     blocker->name, pos);
            continue;
        }
        blocker = j;
        char need[64], have[64];
        if (!whole) {
            mem_text(j->demand.mem, need, sizeof need);
            mem_text(s->cap.mem, have, sizeof have);
            snprintf(j->reason, sizeof j->reason, "LargerThanCapacity");
            snprintf(j->message, sizeof j->message,
                     "asks for %g cpus and %s, more than the server's whole capacity (%g cpus, "
                     "%s): it runs alone, once the %d running job%s ended",
                     j->demand.cpus, need, s->cap.cpus, have, running, running == 1 ? " has" : "s have");
        } else {
            mem_text(j->demand.mem, need, sizeof need);
            mem_text(free_.mem > 0 ? free_.mem : 0, have, sizeof have);
            snprintf(j->reason, sizeof j->reason, "WaitingForCapacity");
            snprintf(j->message, sizeof j->message,
                     "needs %g cpus and %s; free: %g cpus and %s (used by %d running job%s)",
                     j->demand.cpus, need, free_.cpus > 0 ? free_.cpus : 0, have, running,
                     running == 1 ? "" : "s");
        }
    }
    free(q);
    return nstart;
}

static json_t *time_or_null(double t) {
    if (t <= 0) return json_null();
    char buf[32];
    time_t sec = (time_t)t;
    struct tm tm;
    gmtime_r(&sec, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return json_string(buf);
}

json_t *dt__sjob_summary(const dt__server *s, const dt__sjob *j) {
    (void)s;
    return json_pack("{s:s, s:s, s:s, s:i, s:i, s:s, s:s, s:O, s:{s:f, s:I}, s:o, s:o, s:o, "
                     "s:s, s:s}",
                     "name", j->name, "kind", j->kind, "state", dt__sjob_state_name(j->state),
                     "priority", j->priority, "position", j->position, "reason", j->reason,
                     "message", j->message, "labels", j->labels, "demand", "cpus",
                     j->demand.cpus, "memoryBytes", (json_int_t)j->demand.mem, "submitTime",
                     time_or_null(j->submit_t), "startTime", time_or_null(j->start_t),
                     "finishTime", time_or_null(j->finish_t), "jobDir", j->dir, "phase",
                     dt__sjob_state_name(j->state));
}
