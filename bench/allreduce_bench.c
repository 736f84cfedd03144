/*
 * allreduce_bench.c - dtrain's ring all-reduce (include/dtrain/ring.h) between processes of
 * this host (through shared memory, or over loopback TCP with --no-shm), measured the way
 * bench/mpi_allreduce.c measures MPI_Allreduce.
 *
 * Forks --ranks processes, each with its own listening socket on 127.0.0.1 and its own
 * dt_ring (generation 1). For each size of --bytes: one all-reduce checked against the exact
 * sum (rank r contributes r + 1 + (i % 7) at element i, so every element must come out as
 * P(P+1)/2 + P*(i % 7), exact in float32; a wrong ring fails the run); then a warm-up on
 * zeros (>= 2 calls and >= 0.1 s by rank 0's clock); then rank 0 picks the count so that the
 * timed loop lasts >= --min-time seconds (at least 3 calls, at most --iters) and broadcasts
 * it; every rank meets at a barrier (a one-float all-reduce), times its own loop, and the
 * figure is the largest mean over the ranks (the ranks' times gathered by an all-reduce).
 * Rank 0 prints one line per size:
 *
 *     dtrain ranks=P bytes=B avg_us=U busbw_GBps=G
 *
 * with busbw = B * 2(P-1)/P / time (GB = 1e9 bytes).
 *
 *     allreduce_bench [--ranks P] [--bytes 1K,1M,16M,64M] [--iters N] [--chunk BYTES]
 *                     [--min-time S] [--small BYTES] [--tcp] [--no-shm] [--bf16]
 *
 * Sizes take K, M, G suffixes (powers of 1024) and must be positive multiples of 4.
 * --small sets the size up to which the ring gathers whole buffers instead of
 * reduce-scatter + all-gather (for measuring the crossover). --tcp first prints the
 * throughput of one plain loopback TCP stream of 64 MiB transfers (default socket options),
 * the transport's own ceiling: "tcp stream GBps=G". --no-shm opens the rings with no_shm
 * (every byte over loopback TCP, as between hosts) and names the lines "dtrain-tcp". --bf16
 * opens them with wire_dtype bfloat16 (the check's small integers are exact in bfloat16) and
 * adds "-bf16" to the lines' names.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "dtrain/ring.h"
#include "ring/ring-impl.h"

#define MAX_SIZES 32
#define MAX_RANKS 64

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_size(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno || v <= 0) return -1;
    long long mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1LL << 10;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1LL << 20;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1LL << 30;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0' && *end != ',') return -1;
    if (v > (1LL << 40) / mul) return -1;
    v *= mul;
    if (v % 4) return -1;
    *out = v;
    return 0;
}

static int parse_sizes(const char *list, long long *sizes, int *n) {
    *n = 0;
    for (const char *p = list; *p;) {
        if (*n == MAX_SIZES || parse_size(p, &sizes[*n])) return -1;
        (*n)++;
        p = strchr(p, ',');
        if (!p) break;
        if (*++p == '\0') return -1;
    }
    return *n > 0 ? 0 : -1;
}

typedef struct opts {
    int ranks;
    long long sizes[MAX_SIZES];
    int nsizes;
    long max_iters;
    long long chunk;
    double min_time;
    int no_shm;
    int bf16; /* --bf16: wire_dtype bfloat16 (the check's values are small integers: exact) */
} opts;

static int die(dt_ring *r, const char *what, dt_err e) {
    fprintf(stderr, "allreduce_bench: rank %d: %s: %s: %s\n", r ? dt_ring_rank(r) : -1, what,
            dt_strerror(e), dt_errmsg());
    return 1;
}

/* One rank's whole run; the process's exit code. */
static int member(const opts *o, int rank, int lfd, const char *const *peers) {
    dt_ring_conf conf = {.token = "allreduce-bench",
                         .generation = 1,
                         .rank = rank,
                         .size = o->ranks,
                         .peers = peers,
                         .timeout_ms = 60000,
                         .chunk_bytes = (size_t)o->chunk,
                         .no_shm = o->no_shm,
                         .wire_dtype = o->bf16 ? DT_RING_WIRE_BF16 : DT_RING_WIRE_F32};
    dt_ring *r = NULL;
    dt_err e = dt_ring_open(&r, lfd, &conf);
    if (e) return die(NULL, "open", e);
    int P = o->ranks;
    float times[MAX_RANKS], one = 0;
    for (int s = 0; s < o->nsizes; s++) {
        size_t n = (size_t)o->sizes[s] / 4;
        float *buf = NULL;
        if (posix_memalign((void **)&buf, 64, n * 4)) {
            fprintf(stderr, "allreduce_bench: out of memory for %lld bytes\n", o->sizes[s]);
            dt_ring_close(r);
            return 1;
        }
        for (size_t i = 0; i < n; i++)
            buf[i] = (float)(rank + 1 + (int)(i % 7));
        if ((e = dt_ring_allreduce(r, buf, n))) return die(r, "check allreduce", e);
        for (size_t i = 0; i < n; i++) {
            float want = (float)(P * (P + 1) / 2 + P * (int)(i % 7));
            if (buf[i] != want) {
                fprintf(stderr, "allreduce_bench: rank %d: element %zu of %zu is %g, expected %g\n",
                        rank, i, n, (double)buf[i], (double)want);
                return 1;
            }
        }
        memset(buf, 0, n * 4);

        long warm = 0;
        int64_t more = 1;
        if ((e = dt_ring_allreduce(r, &one, 1))) return die(r, "barrier", e);
        double t0 = now_s();
        while (more) {
            if ((e = dt_ring_allreduce(r, buf, n))) return die(r, "warm-up allreduce", e);
            warm++;
            more = warm < 2 || (now_s() - t0 < 0.1 && warm < o->max_iters);
            if ((e = dt_ring_broadcast(r, &more, sizeof more, 0))) return die(r, "broadcast", e);
        }
        double per = (now_s() - t0) / (double)warm;
        int64_t iters = per > 0 ? (int64_t)ceil(o->min_time / per) : o->max_iters;
        if (iters < 3) iters = 3;
        if (iters > o->max_iters) iters = o->max_iters;
        if ((e = dt_ring_broadcast(r, &iters, sizeof iters, 0))) return die(r, "broadcast", e);

        if ((e = dt_ring_allreduce(r, &one, 1))) return die(r, "barrier", e);
        t0 = now_s();
        for (int64_t it = 0; it < iters; it++)
            if ((e = dt_ring_allreduce(r, buf, n))) return die(r, "timed allreduce", e);
        double mean = (now_s() - t0) / (double)iters;
        memset(times, 0, sizeof times);
        times[rank] = (float)mean;
        if ((e = dt_ring_allreduce_exact(r, times, (size_t)P))) return die(r, "gather times", e);
        if (rank == 0) {
            double worst = 0;
            for (int q = 0; q < P; q++)
                if (times[q] > worst) worst = times[q];
            double bus = (double)o->sizes[s] * 2.0 * (P - 1) / P / worst / 1e9;
            printf("%s%s ranks=%d bytes=%lld avg_us=%.1f busbw_GBps=%.4f\n",
                   o->no_shm ? "dtrain-tcp" : "dtrain", o->bf16 ? "-bf16" : "", P, o->sizes[s],
                   worst * 1e6, bus);
            fflush(stdout);
        }
        free(buf);
    }
    dt_ring_close(r);
    return 0;
}

static int xfer(int fd, char *b, size_t n, int rd) {
    for (size_t d = 0; d < n;) {
        ssize_t k = rd ? recv(fd, b + d, n - d, 0) : send(fd, b + d, n - d, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        d += (size_t)k;
    }
    return 0;
}

/* One plain loopback TCP stream (default options): a child sends `reps` 64 MiB buffers. */
static double tcp_stream_GBps(void) {
    size_t bytes = 64 << 20;
    int reps = 8;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof a;
    char *b = malloc(bytes);
    if (l < 0 || !b || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &sl))
        return -1;
    memset(b, 1, bytes);
    pid_t pid = fork();
    if (pid == 0) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c, (struct sockaddr *)&a, sizeof a)) _exit(1);
        for (int i = 0; i < reps + 1; i++)
            if (xfer(c, b, bytes, 0)) _exit(1);
        _exit(0);
    }
    int c = accept(l, NULL, NULL);
    double t0 = 0;
    for (int i = 0; i < reps + 1; i++) {
        if (i == 1) t0 = now_s();
        if (xfer(c, b, bytes, 1)) break;
    }
    double t = now_s() - t0;
    waitpid(pid, NULL, 0);
    close(c);
    close(l);
    free(b);
    return (double)bytes * reps / t / 1e9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: allreduce_bench [--ranks P] [--bytes 1K,1M,16M,64M] [--iters N] "
               "[--chunk BYTES] [--min-time S] [--small BYTES] [--tcp] [--no-shm] [--bf16]\n");
}

int main(int argc, char **argv) {
    opts o = {.ranks = 2, .max_iters = 20000, .min_time = 0.5};
    const char *bytes = "1K,1M,16M,64M";
    int tcp = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        long long sz;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tcp")) {
            tcp = 1;
            continue;
        } else if (!strcmp(a, "--bf16")) {
            o.bf16 = 1;
            continue;
        } else if (!strcmp(a, "--no-shm")) {
            o.no_shm = 1;
            continue;
        } else if (v && !strcmp(a, "--ranks")) {
            long p = strtol(v, &end, 10);
            if (*end || p < 1 || p > MAX_RANKS) goto bad_arg;
            o.ranks = (int)p;
        } else if (v && !strcmp(a, "--bytes")) {
            bytes = v;
        } else if (v && !strcmp(a, "--iters")) {
            o.max_iters = strtol(v, &end, 10);
            if (*end || o.max_iters < 1 || o.max_iters > 100000000) goto bad_arg;
        } else if (v && !strcmp(a, "--chunk")) {
            if (parse_size(v, &sz)) goto bad_arg;
            o.chunk = sz;
        } else if (v && !strcmp(a, "--small")) {
            if (!strcmp(v, "0"))
                sz = 0;
            else if (parse_size(v, &sz))
                goto bad_arg;
            dt__ring_small_bytes = (size_t)sz;
        } else if (v && !strcmp(a, "--min-time")) {
            o.min_time = strtod(v, &end);
            if (*end || !(o.min_time >= 0 && o.min_time < 3600)) goto bad_arg;
        } else {
            fprintf(stderr, "allreduce_bench: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        continue;
    bad_arg:
        fprintf(stderr, "allreduce_bench: %s: bad value '%s'\n", a, v);
        usage(stderr);
        return 2;
    }
    if (parse_sizes(bytes, o.sizes, &o.nsizes)) {
        fprintf(stderr,
                "allreduce_bench: --bytes '%s': expected a comma-separated list of "
                "positive multiples of 4 (suffixes K, M, G)\n",
                bytes);
        return 2;
    }
    if (tcp) {
        printf("tcp stream GBps=%.3f\n", tcp_stream_GBps());
        fflush(stdout);
    }

    int lfd[MAX_RANKS];
    static char addr[MAX_RANKS][32];
    const char *peers[MAX_RANKS];
    for (int q = 0; q < o.ranks; q++) {
        int port;
        dt_err e = dt_ring_listen("127.0.0.1", 0, &lfd[q], &port);
        if (e) return die(NULL, "listen", e);
        snprintf(addr[q], sizeof addr[q], "127.0.0.1:%d", port);
        peers[q] = addr[q];
    }
    pid_t pid[MAX_RANKS];
    for (int q = 0; q < o.ranks; q++) {
        pid[q] = fork();
        if (pid[q] < 0) {
            perror("allreduce_bench: fork");
            for (int k = 0; k < q; k++)
                kill(pid[k], SIGKILL);
            return 1;
        }
        if (pid[q] == 0) {
            for (int k = 0; k < o.ranks; k++)
                if (k != q) close(lfd[k]);
            int rc = member(&o, q, lfd[q], peers);
            fflush(stdout);
            _exit(rc);
        }
    }
    int rc = 0;
    for (int q = 0; q < o.ranks; q++) {
        int st = 0;
        waitpid(pid[q], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            rc = 1;
            /* one member failing makes the others fail promptly (their ring breaks) */
        }
    }
    for (int q = 0; q < o.ranks; q++)
        close(lfd[q]);
    return rc;
}
