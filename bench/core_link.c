/*
 * core_link.c - what it costs this machine to move data between two of its CPUs.
 *
 * A job of two replicas on one host pays, every step, for data that one CPU wrote and the
 * other reads: the all-reduce pair's gradients, the PS's values and optimizer state. How
 * much that costs is a property of the machine - two cores sharing a cache, or two vCPUs of
 * a VM that sit on different dies - and it bounds what a job can reach against two
 * independent runs, which move nothing. bench/ps_bench.sh prints these figures beside the
 * CPU so that its ratios can be compared across machines.
 *
 *   core_link [--cpus A,B] [--bytes N] [--rounds R]
 *
 * Two threads, pinned to CPUs A and B (default 0 and 1), measure:
 *   - the round trip of one cache line written in turn by each (a flag passed back and
 *     forth: the latency of a hand-off between the two);
 *   - the time for A to copy N bytes (default 940,584: the example MLP's float32 gradient)
 *     that B has just written, against copying N bytes that A wrote itself: the rate of
 *     the link against the rate of A's own caches.
 * Each figure is the median of R rounds (default 200; the round trip: of 9 batches).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PINGS 100000 /* round trips per batch */
#define BATCHES 9

typedef struct pair {
    int cpu_a, cpu_b;
    size_t bytes;
    int rounds;
    float *src, *dst;
    _Alignas(64) _Atomic long flag; /* the ping-pong's line */
    _Alignas(64) _Atomic long turn; /* the copy rounds' hand-off */
    _Atomic int b_ready;             /* B's pin: 1 done, -1 failed (its error in b_err) */
    int b_err;
} pair;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

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

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* B's side: answer every ping, then write the buffer for each copy round. */
static void *side_b(void *arg) {
    pair *l = arg;
    l->b_err = pin(l->cpu_b);
    atomic_store(&l->b_ready, l->b_err ? -1 : 1);
    if (l->b_err) return NULL;
    for (long i = 0; i < (long)BATCHES * PINGS; i++) {
        while (atomic_load_explicit(&l->flag, memory_order_acquire) != 2 * i + 1) relax();
        atomic_store_explicit(&l->flag, 2 * i + 2, memory_order_release);
    }
    size_t n = l->bytes / sizeof(float);
    for (long r = 0; r < l->rounds; r++) {
        while (atomic_load_explicit(&l->turn, memory_order_acquire) != 2 * r) relax();
        for (size_t i = 0; i < n; i++) l->src[i] = (float)(r + (long)i);
        atomic_store_explicit(&l->turn, 2 * r + 1, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv) {
    pair l = {.cpu_a = 0, .cpu_b = 1, .bytes = 235146 * sizeof(float), .rounds = 200};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (!strcmp(argv[i], "--cpus") && v) {
            errno = 0;
            l.cpu_a = (int)strtol(v, &end, 10);
            if (*end != ',' || errno) goto usage;
            l.cpu_b = (int)strtol(end + 1, &end, 10);
            if (*end || errno || l.cpu_a < 0 || l.cpu_b < 0 || l.cpu_a >= CPU_SETSIZE ||
                l.cpu_b >= CPU_SETSIZE || l.cpu_a == l.cpu_b)
                goto usage;
        } else if (!strcmp(argv[i], "--bytes") && v) {
            long long b = strtoll(v, &end, 10);
            if (*end || b < 4096 || b > (1LL << 32)) goto usage;
            l.bytes = (size_t)b / sizeof(float) * sizeof(float);
        } else if (!strcmp(argv[i], "--rounds") && v) {
            long r = strtol(v, &end, 10);
            if (*end || r < 1 || r > 1000000) goto usage;
            l.rounds = (int)r;
        } else {
            goto usage;
        }
        i++;
    }
    int rc = pin(l.cpu_a);
    if (rc) {
        fprintf(stderr, "core_link: CPU %d is not available to this process (%s)\n", l.cpu_a,
                strerror(rc));
        return 1;
    }
    l.src = aligned_alloc(64, (l.bytes + 63) / 64 * 64);
    l.dst = aligned_alloc(64, (l.bytes + 63) / 64 * 64);
    if (!l.src || !l.dst) {
        fprintf(stderr, "core_link: no memory for two buffers of %zu bytes\n", l.bytes);
        return 1;
    }
    memset(l.src, 0, l.bytes);
    memset(l.dst, 0, l.bytes);
    pthread_t tb;
    if ((rc = pthread_create(&tb, NULL, side_b, &l))) {
        fprintf(stderr, "core_link: cannot start a thread (%s)\n", strerror(rc));
        return 1;
    }

    while (!atomic_load(&l.b_ready)) relax();
    if (l.b_ready < 0) {
        pthread_join(tb, NULL);
        fprintf(stderr, "core_link: CPU %d is not available to this process (%s)\n", l.cpu_b,
                strerror(l.b_err));
        return 1;
    }

    /* the cache line's round trip: A writes odd, B answers even */
    double trip[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now();
        for (long i = (long)b * PINGS; i < (long)(b + 1) * PINGS; i++) {
            atomic_store_explicit(&l.flag, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&l.flag, memory_order_acquire) != 2 * i + 2) relax();
        }
        trip[b] = (now() - t0) / PINGS;
    }

    /* copies of what B wrote, then of what A wrote */
    size_t n = l.bytes / sizeof(float);
    double *cross = malloc((size_t)l.rounds * sizeof(double));
    double *own = malloc((size_t)l.rounds * sizeof(double));
    if (!cross || !own) {
        fprintf(stderr, "core_link: no memory\n");
        return 1;
    }
    for (long r = 0; r < l.rounds; r++) {
        while (atomic_load_explicit(&l.turn, memory_order_acquire) != 2 * r + 1) relax();
        double t0 = now();
        memcpy(l.dst, l.src, l.bytes);
        cross[r] = now() - t0;
        atomic_store_explicit(&l.turn, 2 * r + 2, memory_order_release);
    }
    pthread_join(tb, NULL);
    for (long r = 0; r < l.rounds; r++) {
        for (size_t i = 0; i < n; i++) l.src[i] = (float)(r + (long)i);
        double t0 = now();
        memcpy(l.dst, l.src, l.bytes);
        own[r] = now() - t0;
    }
    volatile float sink = l.dst[n - 1]; /* the copies are used */
    (void)sink;

    double rt = median(trip, BATCHES), tc = median(cross, l.rounds), to = median(own, l.rounds);
    printf("core_link: CPUs %d and %d, %zu bytes, medians of %d rounds\n", l.cpu_a, l.cpu_b,
           l.bytes, l.rounds);
    printf("  cache-line round trip            %8.0f ns\n", rt * 1e9);
    printf("  copy of what CPU %d just wrote   %8.1f us  (%.1f GB/s)\n", l.cpu_b, tc * 1e6,
           (double)l.bytes / tc / 1e9);
    printf("  copy of what CPU %d itself wrote %8.1f us  (%.1f GB/s)\n", l.cpu_a, to * 1e6,
           (double)l.bytes / to / 1e9);
    printf("  RESULT link/own copy rate = %.2f, round trip %.0f ns\n", to / tc, rt * 1e9);
    free(cross);
    free(own);
    free(l.src);
    free(l.dst);
    return 0;

usage:
    fprintf(stderr, "usage: core_link [--cpus A,B] [--bytes N >= 4096] [--rounds R >= 1]\n"
                    "  (A and B: two different CPUs this process may run on)\n");
    return 2;
}
