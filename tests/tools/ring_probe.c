/*
 * ring_probe.c - one member of a dt_ring that all-reduces in a loop, for the shell tests that
 * cut links between network namespaces (tests/ring_netns_test.sh).
 *
 *   ring_probe --rank R --peers HOST:PORT,HOST:PORT[,...] --token T [--floats N]
 *              [--timeout-ms MS] [--steps N] [--reform] [--no-shm]
 *
 * Listens on peers[R], forms the ring (generation 1) and all-reduces N floats (each member
 * contributes rank+1 everywhere: the sums are checked) until --steps steps are done. A failed
 * step prints "failed: step S after MS ms without progress: <error>" and, with --reform, the
 * member forms the next generation of the same ring (as a trainer does after the master's
 * rendezvous), takes rank 0's step count and goes on; without it the probe exits 3. Progress lines: "step S gen G".
 * --no-shm: every byte over TCP (namespaces of one machine could otherwise map each other's
 * shared memory, which hosts cannot). Exit 0 when every step is done, 2 on bad arguments, 3 on a failed step, 4 on wrong sums.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/ring.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int usage(const char *why) {
    fprintf(stderr, "ring_probe: %s\nusage: ring_probe --rank R --peers A,B[,...] --token T "
                    "[--floats N] [--timeout-ms MS] [--steps N] [--reform] [--no-shm]\n",
            why);
    return 2;
}

int main(int argc, char **argv) {
    int rank = -1, timeout_ms = 2000, reform = 0, no_shm = 0;
    long floats = 1 << 16, steps = 1000000;
    char *peers_arg = NULL;
    const char *token = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--reform")) { reform = 1; continue; }
        if (!strcmp(a, "--no-shm")) { no_shm = 1; continue; }
        if (!v) return usage("an option lacks its value");
        if (!strcmp(a, "--rank")) rank = atoi(v);
        else if (!strcmp(a, "--peers")) peers_arg = strdup(v);
        else if (!strcmp(a, "--token")) token = v;
        else if (!strcmp(a, "--floats")) floats = atol(v);
        else if (!strcmp(a, "--timeout-ms")) timeout_ms = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atol(v);
        else return usage("unknown option");
        i++;
    }
    if (!peers_arg || !token || floats <= 0 || steps <= 0) return usage("missing options");
    const char *peers[16];
    int size = 0;
    for (char *s = strtok(peers_arg, ","); s && size < 16; s = strtok(NULL, ","))
        peers[size++] = s;
    if (rank < 0 || rank >= size) return usage("--rank out of range");

    char host[256];
    const char *colon = strrchr(peers[rank], ':');
    if (!colon) return usage("a peer is not HOST:PORT");
    snprintf(host, sizeof host, "%.*s", (int)(colon - peers[rank]), peers[rank]);
    int lfd, port;
    if (dt_ring_listen(host, atoi(colon + 1), &lfd, &port)) {
        fprintf(stderr, "ring_probe: %s\n", dt_errmsg());
        return 2;
    }
    float *buf = malloc((size_t)floats * sizeof *buf);
    if (!buf) return 2;
    float want = (float)(size * (size + 1) / 2);
    int64_t gen = 1;
    dt_ring *ring = NULL;
    int rc = 0;
    double last_ok = now_ms(), started = now_ms();
    double deadline_ms = 120000;
    for (long s = 0; s < steps;) {
        if (now_ms() - started > deadline_ms) { /* never hang a test */
            printf("deadline: %ld of %ld steps done\n", s, steps);
            rc = 3;
            break;
        }
        if (!ring) {
            dt_ring_conf c = {.token = token, .generation = gen, .rank = rank, .size = size,
                              .peers = peers, .timeout_ms = timeout_ms, .no_shm = no_shm};
            if (dt_ring_open(&ring, lfd, &c)) {
                printf("open: gen %lld: %s\n", (long long)gen, dt_errmsg());
                fflush(stdout);
                ring = NULL;
                if (!reform) { rc = 3; break; }
                usleep(200 * 1000);
                continue; /* the same generation again: the peer may not be back yet */
            }
            /* as a trainer takes rank 0's state: members that disagree by the step in
             * flight when the ring broke go on from the same one */
            int64_t at = s;
            if (dt_ring_broadcast(ring, &at, sizeof at, 0)) {
                printf("broadcast: gen %lld: %s\n", (long long)gen, dt_errmsg());
                dt_ring_close(ring);
                ring = NULL;
                if (!reform) { rc = 3; break; }
                gen++;
                continue;
            }
            s = (long)at;
            printf("formed gen %lld at step %ld\n", (long long)gen, s);
            fflush(stdout);
            last_ok = now_ms();
        }
        for (long i = 0; i < floats; i++)
            buf[i] = (float)(rank + 1);
        if (dt_ring_allreduce(ring, buf, (size_t)floats)) {
            int fp = dt_ring_failed_peer(ring);
            printf("failed: step %ld after %.0f ms without progress (peer rank %d): %s\n", s,
                   now_ms() - last_ok, fp, dt_errmsg());
            fflush(stdout);
            dt_ring_close(ring);
            ring = NULL;
            if (!reform) { rc = 3; break; }
            gen++;
            continue;
        }
        for (long i = 0; i < floats; i++)
            if (buf[i] != want) {
                printf("wrong sum at %ld: %g, want %g\n", i, buf[i], want);
                rc = 4;
                break;
            }
        if (rc) break;
        last_ok = now_ms();
        if (++s % 50 == 0) {
            printf("step %ld gen %lld\n", s, (long long)gen);
            fflush(stdout);
        }
    }
    /* the peer may still be reading our last bytes: closing at once could reset them */
    if (ring) usleep(500 * 1000);
    dt_ring_close(ring);
    close(lfd);
    free(buf);
    free(peers_arg);
    return rc;
}
