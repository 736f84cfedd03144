/*
 * ps_roundtrip.c - what one parameter-server round trip costs next to copying its bytes.
 *
 * A PS runs in a forked child process (its own address space, so the socket copies and the
 * optimizer step are real costs) holding one variable of --floats float32 (default 1M,
 * 4 MB) with plain SGD; the parent is a worker doing --iters push_pull round trips, then
 * --iters separate push + pull pairs, over 127.0.0.1. Printed: microseconds per round trip,
 * the time of memcpy'ing the same bytes twice (the gradient out, the values back) in one
 * process, and the ratio of the two; then the same bytes echoed over a bare loopback TCP
 * connection (no protocol, no optimizer), the transport's own ceiling on this machine.
 *
 *     ps_roundtrip [--floats N] [--iters K]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "dtrain/ps.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static dt_param *param_new(int64_t n) {
    dt_param *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    snprintf(p->name, sizeof p->name, "dense/kernel");
    p->value.shape = dt_shape_make(1, (int64_t[]){n});
    p->grad.shape = p->value.shape;
    if (posix_memalign((void **)&p->value.data, 64, (size_t)n * 4) ||
        posix_memalign((void **)&p->grad.data, 64, (size_t)n * 4))
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        p->value.data[i] = (float)(i % 97) * 0.01f;
        p->grad.data[i] = (float)(i % 13) * 1e-4f;
    }
    return p;
}

static int xfer(int fd, char *b, size_t n, int rd) {
    for (size_t d = 0; d < n;) {
        ssize_t k = rd ? recv(fd, b + d, n - d, 0) : send(fd, b + d, n - d, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        d += (size_t)k;
    }
    return 0;
}

/* The transport's ceiling: a child echoes `bytes` back over plain loopback TCP (default
 * socket options); microseconds per echo. */
static double raw_echo_us(size_t bytes, int iters) {
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
        int c = accept(l, NULL, NULL);
        for (int i = 0; i < iters + 5; i++)
            if (xfer(c, b, bytes, 1) || xfer(c, b, bytes, 0)) break;
        _exit(0);
    }
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&a, sizeof a)) return -1;
    double t0 = 0;
    for (int i = 0; i < iters + 5; i++) {
        if (i == 5) t0 = now_s();
        if (xfer(c, b, bytes, 0) || xfer(c, b, bytes, 1)) return -1;
    }
    double us = (now_s() - t0) / iters * 1e6;
    close(c);
    close(l);
    waitpid(pid, NULL, 0);
    free(b);
    return us;
}

/* --iters push_pull round trips, then --iters push + pull pairs, against a PS in a child
 * process: tensors over TCP (no_shm) or through the shared-memory lane. */
static int roundtrips(dt_param *p, int64_t floats, int iters, int no_shm, double *pp, double *sep) {
    dt_optim_conf oc = {.kind = DT_OPTIM_SGD, .learning_rate = 1e-3f};
    dt_optim_conf_defaults(&oc);

    /* the PS: a child that serves until the parent closes the pipe */
    int up[2], down[2];
    if (pipe(up) || pipe(down)) return 1;
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        FILE *devnull = fopen("/dev/null", "w");
        dt_ps_server_conf sc = {.host = "127.0.0.1",
                                .token = "bench",
                                .nps = 1,
                                .optim = oc,
                                .log = devnull,
                                .max_frame = floats * 4 + (1 << 20)};
        dt_ps_server *s;
        int port = -1;
        if (dt_ps_server_start(&s, &sc, &p, 1) != DT_OK)
            fprintf(stderr, "ps: %s\n", dt_errmsg());
        else
            port = dt_ps_server_port(s);
        if (write(up[1], &port, sizeof port) != sizeof port) _exit(1);
        char c;
        while (read(down[0], &c, 1) < 0 && errno == EINTR) {
        }
        if (port >= 0) dt_ps_server_stop(s);
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    int port;
    if (read(up[0], &port, sizeof port) != sizeof port || port < 0) return 1;

    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    const char *addrs[1] = {addr};
    dt_ps_client_conf cc = {.addrs = addrs,
                            .nps = 1,
                            .token = "bench",
                            .replica = "bench",
                            .max_frame = floats * 4 + (1 << 20),
                            .no_shm = no_shm};
    dt_ps_client *c;
    if (dt_ps_client_open(&c, &cc, &p, 1) || dt_ps_client_init(c, NULL) ||
        dt_ps_client_pull(c, NULL)) {
        fprintf(stderr, "client: %s\n", dt_errmsg());
        return 1;
    }
    /* warm up */
    for (int i = 0; i < 5; i++)
        if (dt_ps_client_push_pull(c, NULL)) return 1;

    double t0 = now_s();
    for (int i = 0; i < iters; i++)
        if (dt_ps_client_push_pull(c, NULL)) {
            fprintf(stderr, "push_pull: %s\n", dt_errmsg());
            return 1;
        }
    *pp = (now_s() - t0) / iters;
    t0 = now_s();
    for (int i = 0; i < iters; i++)
        if (dt_ps_client_push(c, NULL) || dt_ps_client_pull(c, NULL)) {
            fprintf(stderr, "push/pull: %s\n", dt_errmsg());
            return 1;
        }
    *sep = (now_s() - t0) / iters;
    dt_ps_client_close(c);
    close(down[1]);
    close(up[0]);
    waitpid(pid, NULL, 0);
    return 0;
}

static int usage(void) {
    fprintf(stderr, "usage: ps_roundtrip [--floats N] [--iters K]\n");
    return 2;
}

int main(int argc, char **argv) {
    int64_t floats = 1 << 20;
    int iters = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--floats") && i + 1 < argc)
            floats = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else
            return usage();
    }
    if (floats < 1 || iters < 1) return usage();
    dt_param *p = param_new(floats);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    double pp_tcp, sep_tcp, pp_shm, sep_shm;
    if (roundtrips(p, floats, iters, 1, &pp_tcp, &sep_tcp) ||
        roundtrips(p, floats, iters, 0, &pp_shm, &sep_shm))
        return 1;

    /* memcpy baseline: the gradient out and the values back, 2 x floats * 4 bytes */
    size_t bytes = (size_t)floats * 4;
    float *a, *b;
    if (posix_memalign((void **)&a, 64, bytes) || posix_memalign((void **)&b, 64, bytes)) return 1;
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    int reps = iters < 50 ? 50 : iters;
    double t0 = now_s();
    volatile float sink = 0;
    for (int i = 0; i < reps; i++) {
        memcpy(b, a, bytes);
        memcpy(a, b, bytes);
        sink += a[i % floats];
    }
    double mc = (now_s() - t0) / reps;
    (void)sink;

    printf("ps_roundtrip: %lld floats (%.1f MB), %d iterations, PS in a separate process\n",
           (long long)floats, bytes / 1e6, iters);
    printf("push_pull round trip, TCP            %10.1f us  (%.2f GB/s both ways)\n", pp_tcp * 1e6,
           2.0 * bytes / pp_tcp / 1e9);
    printf("push_pull round trip, shared memory  %10.1f us  (%.2f GB/s both ways)\n", pp_shm * 1e6,
           2.0 * bytes / pp_shm / 1e9);
    printf("push + pull, TCP                     %10.1f us\n", sep_tcp * 1e6);
    printf("push + pull, shared memory           %10.1f us\n", sep_shm * 1e6);
    printf("memcpy x2 (%.1f MB)                   %10.1f us\n", bytes / 1e6, mc * 1e6);
    printf("ratio push_pull/memcpy, TCP          %10.1f\n", pp_tcp / mc);
    printf("ratio push_pull/memcpy, shm          %10.1f\n", pp_shm / mc);
    double raw = raw_echo_us(bytes, iters);
    printf("raw TCP echo, same bytes             %10.1f us  (the loopback's ceiling)\n", raw);
    printf("ratio push_pull/raw, TCP             %10.2f\n", pp_tcp * 1e6 / raw);
    free(a);
    free(b);
    free(p->value.data);
    free(p->grad.data);
    free(p);
    return 0;
}
