/* ports_test.c - the ports a master holds (ports.c): outside the kernel's ephemeral range,
 * so that no bind() to port 0 or connect() on the host is ever given one; distinct; locked
 * against another master until released. The job-level check, in a network namespace whose
 * range is tiny: tests/ports_netns_test.sh. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "master/master-impl.h"
#include "testing/dt_test.h"

#define N 64

static void ephemeral_range(long *lo, long *hi) {
    *lo = 32768, *hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", lo, hi) != 2) *lo = 32768, *hi = 60999;
        fclose(f);
    }
}

static int bind_port(int port, int *fd_out) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    *fd_out = fd;
    return ntohs(a.sin_port);
}

static void lock_dir(char *buf, size_t size) {
    snprintf(buf, size, "%s/locks", dt_test_tmpdir());
}

static void test_outside_the_kernels_range(void) {
    char dir[512];
    lock_dir(dir, sizeof dir);
    dt__ports *p = NULL;
    DT_CHECK_OK(dt__ports_init(&p, "127.0.0.1", dir));
    long lo, hi;
    ephemeral_range(&lo, &hi);
    DT_CHECK(dt__ports_candidates(p) > 0);
    int got[N];
    for (int i = 0; i < N; i++) {
        DT_CHECK_OK(dt__ports_take(p, &got[i]));
        DT_CHECK(got[i] >= DT__PORTS_LOW && got[i] <= 65535);
        DT_CHECK(got[i] < lo || got[i] > hi);
        for (int j = 0; j < i; j++) DT_CHECK(got[j] != got[i]);
        DT_CHECK(dt__ports_held(p, got[i]));
        /* bindable by whoever it is for, with no SO_REUSEADDR */
        int fd;
        DT_CHECK(bind_port(got[i], &fd) == got[i]);
        close(fd);
    }
    /* The kernel's own choices (a bind to port 0, as an HTTP server or a client socket
     * gets) never fall on a held port: hold them all open so each is a new one. */
    int fds[512], nfd = 0;
    for (int k = 0; k < 512; k++) {
        int fd, port = bind_port(0, &fd);
        if (port < 0) break;
        fds[nfd++] = fd;
        for (int i = 0; i < N; i++) DT_CHECK(port != got[i]);
    }
    for (int k = 0; k < nfd; k++) close(fds[k]);
    DT_CHECK(nfd == 512);
    dt__ports_free(p);
}

static void test_locked_against_another_master(void) {
    char dir[512];
    lock_dir(dir, sizeof dir);
    dt__ports *a = NULL, *b = NULL;
    DT_CHECK_OK(dt__ports_init(&a, "127.0.0.1", dir));
    DT_CHECK_OK(dt__ports_init(&b, "127.0.0.1", dir));
    int port, busy = -1;
    DT_CHECK_OK(dt__ports_take(a, &port));
    char path[600];
    snprintf(path, sizeof path, "%s/%d", dir, port);
    struct stat sb;
    DT_CHECK(stat(path, &sb) == 0);
    /* b (a resumed master, say) finds it held */
    DT_CHECK_OK(dt__ports_hold(b, port, &busy));
    DT_CHECK(busy == 1);
    dt__ports_release(b, port);
    /* released by a, it is b's to hold; the lock file goes with the release */
    dt__ports_release(a, port);
    DT_CHECK(!dt__ports_held(a, port));
    DT_CHECK(stat(path, &sb) != 0);
    DT_CHECK_OK(dt__ports_hold(b, port, &busy));
    DT_CHECK(busy == 0 && dt__ports_held(b, port));
    /* a master's end drops its locks */
    dt__ports_free(b);
    DT_CHECK_OK(dt__ports_hold(a, port, &busy));
    DT_CHECK(busy == 0);
    dt__ports_free(a);
    DT_CHECK(stat(path, &sb) != 0);
}

static void test_without_lock_dir(void) {
    /* a directory that cannot be made: ports are still chosen, without cross-job locks */
    dt__ports *p = NULL;
    DT_CHECK_OK(dt__ports_init(&p, "127.0.0.1", "/proc/dtrain-no-such-dir"));
    int port, busy;
    DT_CHECK_OK(dt__ports_take(p, &port));
    DT_CHECK(port >= DT__PORTS_LOW);
    DT_CHECK_OK(dt__ports_hold(p, port + 1 <= 65535 ? port + 1 : port - 1, &busy));
    DT_CHECK(busy == 0);
    dt__ports_free(p);
}

/* Masters that each take one port and let it go (a killed one, which will want it back
 * when it is resumed) rarely take the same: every candidate is as likely a start. A random
 * start in the whole span fell into the kernel's range most of the time and ran on to the
 * first free port above it, so most of these 32 got that same one. */
static void test_spread(void) {
    char dir[512];
    lock_dir(dir, sizeof dir);
    int got[32], most = 0, most_port = 0, candidates = 0;
    for (int i = 0; i < 32; i++) {
        dt__ports *p = NULL;
        DT_CHECK_OK(dt__ports_init(&p, "127.0.0.1", dir));
        candidates = dt__ports_candidates(p);
        dt_err e = dt__ports_take(p, &got[i]);
        dt__ports_free(p);
        DT_CHECK_OK(e);
    }
    for (int i = 0; i < 32; i++) {
        int same = 0;
        for (int j = 0; j < 32; j++) same += got[j] == got[i];
        if (same > most) most = same, most_port = got[i];
    }
    /* Over 1000 candidates, five alike in 32 draws: under one chance in a million. */
    if (candidates > 1000 && most > 4) DT_FAIL("%d of 32 masters took port %d", most, most_port);
}

DT_TEST_MAIN(DT_T(test_outside_the_kernels_range), DT_T(test_locked_against_another_master),
             DT_T(test_without_lock_dir), DT_T(test_spread))
