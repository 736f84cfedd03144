/*
 * core_link.c - what it costs this machine to move data between two of its CPUs.
 *
 * A job of two replicas on one host pays, every step, for data that one CPU wrote and the
 * other reads: the all-reduce pair's gradients, the PS's values and optimizer state. How
 * much that costs is a property of the machine - two cores sharing a cache, or two vCPUs of
 * a VM that do not - and it bounds what a job can reach against two independent runs,
 * which move nothing. bench/ps_bench.sh prints these figures beside the CPU so that its
 * ratios can be compared across machines.
 *
 *   core_link [--cpus A,B] [--bytes N] [--rounds R]
 *
 * Two threads, pinned to CPUs A and B (default: the first two this process may use),
 * measure:
 *   - the round trip of one cache line written in turn by each (a counter passed back and
 *     forth with plain spins: the latency of a hand-off between the two);
 *   - the time for A to copy N bytes (default 940,584: the example MLP's float32 gradient)
 *     that B has just written, against copying N bytes that A has just written itself.
 *     The two kinds of rounds alternate, B spinning through both, and before each copy of
 *     B's bytes A writes N bytes of its own elsewhere, so A's caches are in the same state
 *     for both kinds: the ratio of the two is the link's rate against A's own.
 * The copies' figures are medians of R rounds of each kind (default 200); the round trip's
 * the median, min and max of 9 batches of 100,000 (on a VM whose vCPUs move they differ).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock-impl.h"

#define PINGS 100000 /* round trips per batch */
#define BATCHES 9
#define MIN_BYTES (64 << 10) /* smaller copies would time the clock */
#define MAX_BYTES (1L << 30)

typedef struct pair {
    int cpu_a, cpu_b;
    size_t bytes;
    long rounds;
    float *src, *dst, *scratch;
    _Alignas(64) _Atomic long flag; /* the ping-pong's line */
    _Alignas(64) _Atomic long turn; /* the copy rounds' hand-off */
    _Atomic int b_ready;            /* B's pin: 1 done, -1 failed (its error in b_err) */
    int b_err;
} pair;

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* sorts v */
static double median(double *v, long n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void fill(float *p, size_t n, long r) {
    for (size_t i = 0; i < n; i++) p[i] = (float)(r + (long)i);
}

/* B's side: answer every ping; then, in each pair of copy rounds, write the buffer for A's
 * first (turn 4r -> 4r+1) and wait through A's own (4r+2 -> 4r+4). */
static void *side_b(void *arg) {
    pair *p = arg;
    p->b_err = pin(p->cpu_b);
    atomic_store(&p->b_ready, p->b_err ? -1 : 1);
    if (p->b_err) return NULL;
    for (long i = 0; i < (long)BATCHES * PINGS; i++) {
        while (atomic_load_explicit(&p->flag, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(&p->flag, 2 * i + 2, memory_order_release);
    }
    size_t n = p->bytes / sizeof(float);
    for (long r = 0; r < p->rounds; r++) {
        while (atomic_load_explicit(&p->turn, memory_order_acquire) != 4 * r) {
        }
        fill(p->src, n, r);
        atomic_store_explicit(&p->turn, 4 * r + 1, memory_order_release);
    }
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f, "usage: core_link [--cpus A,B] [--bytes N] [--rounds R]\n"
               "  --cpus A,B   two different CPUs this process may use (default: the first two)\n"
               "  --bytes N    bytes copied a round, %d to %ld (default 940584)\n"
               "  --rounds R   copy rounds of each kind, 1 to 1000000 (default 200)\n",
            MIN_BYTES, MAX_BYTES);
}

/* A CPU number at s, up to the next ',' or the end (*end then points there); -1 if none. */
static int cpu_at(const char *s, char **end) {
    errno = 0;
    long v = strtol(s, end, 10);
    if (*end == s || errno || v < 0 || v >= CPU_SETSIZE || *s < '0' || *s > '9') return -1;
    return (int)v;
}

/* The first two CPUs in this process's affinity mask: 0, or -1 when it has fewer. */
static int default_cpus(pair *p) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set)) return -1;
    int found = 0;
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
        if (CPU_ISSET(c, &set)) {
            if (found++ == 0)
                p->cpu_a = c;
            else
                p->cpu_b = c;
        }
    return found == 2 ? 0 : -1;
}

int main(int argc, char **argv) {
    pair p = {.cpu_a = -1, .bytes = 235146 * sizeof(float), .rounds = 200};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (v && !strcmp(a, "--cpus")) {
            if ((p.cpu_a = cpu_at(v, &end)) < 0 || *end != ',') goto bad_arg;
            if ((p.cpu_b = cpu_at(end + 1, &end)) < 0 || *end || p.cpu_a == p.cpu_b)
                goto bad_arg;
        } else if (v && !strcmp(a, "--bytes")) {
            errno = 0;
            long long b = strtoll(v, &end, 10);
            if (end == v || *end || errno || b < MIN_BYTES || b > MAX_BYTES) goto bad_arg;
            p.bytes = (size_t)b / sizeof(float) * sizeof(float);
        } else if (v && !strcmp(a, "--rounds")) {
            errno = 0;
            long r = strtol(v, &end, 10);
            if (end == v || *end || errno || r < 1 || r > 1000000) goto bad_arg;
            p.rounds = r;
        } else {
            fprintf(stderr, "core_link: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        continue;
    bad_arg:
        fprintf(stderr, "core_link: %s: bad value '%s'\n", a, v);
        usage(stderr);
        return 2;
    }
    if (p.cpu_a < 0 && default_cpus(&p)) {
        fprintf(stderr, "core_link: this process may use fewer than two CPUs\n");
        return 1;
    }
    int rc = pin(p.cpu_a);
    if (rc) {
        fprintf(stderr, "core_link: CPU %d is not available to this process (%s)\n", p.cpu_a,
                strerror(rc));
        return 1;
    }
    size_t room = (p.bytes + 63) / 64 * 64;
    p.src = aligned_alloc(64, room);
    p.dst = aligned_alloc(64, room);
    p.scratch = aligned_alloc(64, room);
    double *cross = malloc((size_t)p.rounds * sizeof(double));
    double *own = malloc((size_t)p.rounds * sizeof(double));
    if (!p.src || !p.dst || !p.scratch || !cross || !own) {
        fprintf(stderr, "core_link: no memory for three buffers of %zu bytes\n", p.bytes);
        return 1;
    }
    memset(p.src, 0, p.bytes);
    memset(p.dst, 0, p.bytes);
    memset(p.scratch, 0, p.bytes);
    pthread_t tb;
    if ((rc = pthread_create(&tb, NULL, side_b, &p))) {
        fprintf(stderr, "core_link: cannot start a thread (%s)\n", strerror(rc));
        return 1;
    }
    while (!atomic_load(&p.b_ready)) {
    }
    if (p.b_ready < 0) {
        pthread_join(tb, NULL);
        fprintf(stderr, "core_link: CPU %d is not available to this process (%s)\n", p.cpu_b,
                strerror(p.b_err));
        return 1;
    }

    /* the cache line's round trip: A writes odd, B answers even */
    double trip[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        double t0 = dt__mono_s();
        for (long i = (long)b * PINGS; i < (long)(b + 1) * PINGS; i++) {
            atomic_store_explicit(&p.flag, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&p.flag, memory_order_acquire) != 2 * i + 2) {
            }
        }
        trip[b] = (dt__mono_s() - t0) / PINGS;
    }

    /* copy rounds, alternating: what B just wrote, then what A just wrote */
    size_t n = p.bytes / sizeof(float);
    for (long r = 0; r < p.rounds; r++) {
        while (atomic_load_explicit(&p.turn, memory_order_acquire) != 4 * r + 1) {
        }
        fill(p.scratch, n, r); /* A's caches as before its own round's copy */
        double t0 = dt__mono_s();
        memcpy(p.dst, p.src, p.bytes);
        cross[r] = dt__mono_s() - t0;
        atomic_store_explicit(&p.turn, 4 * r + 2, memory_order_release);
        fill(p.src, n, r);
        t0 = dt__mono_s();
        memcpy(p.dst, p.src, p.bytes);
        own[r] = dt__mono_s() - t0;
        atomic_store_explicit(&p.turn, 4 * r + 4, memory_order_release);
    }
    pthread_join(tb, NULL);

    /* median() sorts: trip[0] and trip[BATCHES - 1] are then the fastest and slowest batch */
    double tc = median(cross, p.rounds), to = median(own, p.rounds), rt = median(trip, BATCHES);
    printf("core_link: CPUs %d and %d, %zu bytes, medians of %ld rounds of each kind\n",
           p.cpu_a, p.cpu_b, p.bytes, p.rounds);
    printf("  cache-line round trip              %8.0f ns  (batches %.0f-%.0f ns)\n", rt * 1e9,
           trip[0] * 1e9, trip[BATCHES - 1] * 1e9);
    printf("  copy of what the other CPU wrote   %8.1f us  (%.1f GB/s)\n", tc * 1e6,
           (double)p.bytes / tc / 1e9);
    printf("  copy of what this CPU wrote        %8.1f us  (%.1f GB/s)\n", to * 1e6,
           (double)p.bytes / to / 1e9);
    printf("  RESULT link/own copy rate = %.2f, round trip %.0f ns\n", to / tc, rt * 1e9);
    free(cross);
    free(own);
    free(p.src);
    free(p.dst);
    free(p.scratch);
    return 0;
}
