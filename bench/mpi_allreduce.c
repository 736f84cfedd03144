/*
 * mpi_allreduce.c - Open MPI's MPI_Allreduce, the peer of dtrain's ring all-reduce
 * (bench/allreduce_bench.sh runs it under mpirun with the TCP and the shared-memory BTLs).
 *
 * For each size: MPI_Allreduce(MPI_IN_PLACE, float32, MPI_SUM, MPI_COMM_WORLD), checked once
 * against the exact sum (rank r contributes r + 1 + (i % 7) at element i, so every element
 * must come out as P(P+1)/2 + P*(i % 7): small integers, exact in float32), then warmed up
 * (>= 2 calls and >= ~0.1 s) on zeros (the values of a repeated in-place sum would grow to
 * inf), then timed: rank 0 picks the count from the warm-up's pace so the timed loop lasts
 * >= --min-time seconds (at most --max-iters, at least 3 calls) and broadcasts it; every
 * rank meets at a barrier, times its own loop, and the figure is the largest mean over the
 * ranks (MPI_Reduce MAX). Rank 0 prints one line per size:
 *
 *     mpi-LABEL ranks=P bytes=B avg_us=U busbw_GBps=G
 *
 * with busbw = B * 2(P-1)/P / time (GB = 1e9 bytes), the conventional "bus bandwidth" of an
 * all-reduce (what each rank sends and receives in a bandwidth-optimal algorithm).
 *
 *     mpirun -n P mpi_allreduce [--label L] [--bytes 1K,1M,16M,64M] [--min-time S]
 *                               [--max-iters N]
 *
 * Sizes take K, M, G suffixes (powers of 1024) and must be positive multiples of 4. Not
 * built unless CMake finds MPI; never run by ctest.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define MAX_SIZES 32

static int parse_size(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno || v <= 0) return -1;
    long long mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1LL << 10; end++; break;
    case 'm': case 'M': mul = 1LL << 20; end++; break;
    case 'g': case 'G': mul = 1LL << 30; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0' && *end != ',') return -1;
    if (v > (1LL << 40) / mul) return -1;
    v *= mul;
    /* MPI counts are ints: at most INT_MAX floats. */
    if (v % 4 || v / 4 > 0x7fffffffLL) return -1;
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

/* Returns 0 when the check passed on every rank; prints the first bad element otherwise. */
static int check_sum(float *buf, long long n, int rank, int nranks) {
    for (long long i = 0; i < n; i++) buf[i] = (float)(rank + 1 + i % 7);
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int bad = 0;
    for (long long i = 0; i < n; i++) {
        float want = (float)(nranks * (nranks + 1) / 2 + nranks * (i % 7));
        if (buf[i] != want) {
            fprintf(stderr, "mpi_allreduce: rank %d: element %lld of %lld is %g, expected %g\n",
                    rank, i, n, (double)buf[i], (double)want);
            bad = 1;
            break;
        }
    }
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

static void usage(FILE *f) {
    fprintf(f, "usage: mpirun -n P mpi_allreduce [--label L] [--bytes 1K,1M,16M,64M] "
               "[--min-time S] [--max-iters N]\n");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    const char *label = "mpi", *bytes = "1K,1M,16M,64M";
    double min_time = 0.5;
    long max_iters = 20000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (rank == 0) usage(stdout);
            MPI_Finalize();
            return 0;
        } else if (v && !strcmp(a, "--label")) {
            label = v;
        } else if (v && !strcmp(a, "--bytes")) {
            bytes = v;
        } else if (v && !strcmp(a, "--min-time")) {
            min_time = strtod(v, &end);
            if (*end || !(min_time >= 0 && min_time < 3600)) goto bad_arg;
        } else if (v && !strcmp(a, "--max-iters")) {
            max_iters = strtol(v, &end, 10);
            if (*end || max_iters < 1 || max_iters > 100000000) goto bad_arg;
        } else {
            if (rank == 0) fprintf(stderr, "mpi_allreduce: unknown or incomplete option '%s'\n", a);
            goto usage_err;
        }
        i++;
        continue;
    bad_arg:
        if (rank == 0) fprintf(stderr, "mpi_allreduce: %s: bad value '%s'\n", a, v);
        goto usage_err;
    }

    long long sizes[MAX_SIZES];
    int nsizes;
    if (parse_sizes(bytes, sizes, &nsizes)) {
        if (rank == 0)
            fprintf(stderr, "mpi_allreduce: --bytes '%s': expected a comma-separated list of "
                            "positive multiples of 4 (suffixes K, M, G)\n", bytes);
        goto usage_err;
    }

    int rc = 0;
    for (int s = 0; s < nsizes; s++) {
        long long n = sizes[s] / 4;
        float *buf = malloc((size_t)sizes[s]);
        int nomem = !buf, anynomem = 0;
        MPI_Allreduce(&nomem, &anynomem, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (anynomem) {
            if (rank == 0) fprintf(stderr, "mpi_allreduce: out of memory for %lld bytes\n", sizes[s]);
            free(buf);
            rc = 1;
            break;
        }
        if (check_sum(buf, n, rank, nranks)) {
            if (rank == 0) fprintf(stderr, "mpi_allreduce: wrong sum for %lld bytes\n", sizes[s]);
            free(buf);
            rc = 1;
            break;
        }
        memset(buf, 0, (size_t)sizes[s]);

        /* Warm-up: at least 2 calls and ~0.1 s (rank 0's clock decides when to stop). */
        long warm = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int more = 1; more;) {
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            warm++;
            more = warm < 2 || (MPI_Wtime() - t0 < 0.1 && warm < max_iters);
            MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
        }
        double per = (MPI_Wtime() - t0) / (double)warm;
        long iters = per > 0 ? (long)ceil(min_time / per) : max_iters;
        if (iters < 3) iters = 3;
        if (iters > max_iters) iters = max_iters;
        MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);

        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (long it = 0; it < iters; it++)
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double mean = (MPI_Wtime() - t0) / (double)iters, worst = 0;
        MPI_Reduce(&mean, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double bus = (double)sizes[s] * 2.0 * (nranks - 1) / nranks / worst / 1e9;
            printf("mpi-%s ranks=%d bytes=%lld avg_us=%.1f busbw_GBps=%.4f\n", label, nranks,
                   sizes[s], worst * 1e6, bus);
            fflush(stdout);
        }
        free(buf);
    }
    MPI_Finalize();
    return rc;

usage_err:
    if (rank == 0) usage(stderr);
    MPI_Finalize();
    return 2;
}
