/*
 * ports.c - the ports of a job's processes on this host, chosen and held so that no two
 * processes of a job (the master included), nor of two jobs, can get the same one.
 *
 * Design notes. A replica's port is written into every peer's TF_CONFIG when the job starts
 * and must stay its own for the job's life: across its restarts, while nothing listens on
 * it. Three things could take it in the meantime, and each is closed off:
 *
 *  - the kernel, handing it out as an ephemeral port: to a bind() to port 0 (the master's
 *    own HTTP server once got a replica's port that way) or to any connect() on the host
 *    (an HTTP client's socket, a ring link, a PS connection). Ports are therefore drawn
 *    from outside net.ipv4.ip_local_port_range (and ip_local_reserved_ports), which the
 *    kernel never hands out. Only when that leaves nothing (a host whose range is almost
 *    everything) is the kernel's choice taken, as before.
 *  - another dtrain master choosing at the same moment, or while one of our replicas is
 *    restarting: every port taken is held by an advisory lock (flock) on LOCK_DIR/<port>,
 *    shared by every master on the host, for as long as the job has a replica on it. A
 *    master that dies drops its locks with its descriptors (until it is resumed, only the
 *    uniform draw below keeps other masters off its job's ports); the file is unlinked on
 *    release (while still locked; a taker checks that the file it locked is still the one
 *    at the path, so the unlink cannot hand one port to two masters).
 *  - any other program binding it by number: a candidate must accept a bind() without
 *    SO_REUSEADDR (as strict as any replica's own bind) before it is taken. What binds it
 *    after that is outside dtrain's reach.
 *
 * Candidates are scanned from a random one, each as likely as any other, so that two masters
 * rarely even try the same port (nor one a dead master has just let go, which it wants back
 * when it is resumed) and none is missed however few are left. The
 * lock directory is made mode 1777, like /tmp, for masters of several users; when it cannot
 * be used, ports are still chosen as above, without the cross-job locks.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/path-impl.h"
#include "master/master-impl.h"

#define LOCK_DIR_DEFAULT "/tmp/dtrain-ports"
#define TRIES 64 /* of the kernel's choice, when no candidate is left */

typedef struct held {
    int port;
    int fd; /* the lock, -1 without the lock directory */
} held;

struct dt__ports {
    char host[64];       /* numeric IPv4 or IPv6 address the ports are tried on */
    char dir[512];       /* the lock directory; "" when it cannot be used */
    unsigned char avoid[65536 / 8]; /* the ephemeral and reserved ports: never drawn */
    int ncandidates;     /* ports from DT__PORTS_LOW up that are not avoided */
    held *h;
    int n, cap;
};

static void avoid_range(dt__ports *p, long lo, long hi) {
    if (lo < 0) lo = 0;
    if (hi > 65535) hi = 65535;
    for (long port = lo; port <= hi; port++) p->avoid[port / 8] |= (unsigned char)(1u << (port % 8));
}

static int avoided(const dt__ports *p, int port) {
    return p->avoid[port / 8] >> (port % 8) & 1;
}

/* /proc/sys/net/ipv4/ip_local_reserved_ports: "8080,9000-9010" (or empty). */
static void avoid_reserved(dt__ports *p) {
    char buf[4096];
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_reserved_ports", "r");
    if (!f) return;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    for (char *s = buf; *s;) {
        char *end;
        long lo = strtol(s, &end, 10), hi = lo;
        if (end == s) break;
        if (*end == '-') hi = strtol(end + 1, &end, 10);
        avoid_range(p, lo, hi);
        s = end;
        while (*s == ',' || *s == ' ' || *s == '\n') s++;
    }
}

dt_err dt__ports_init(dt__ports **out, const char *host, const char *lock_dir) {
    dt__ports *p = calloc(1, sizeof *p);
    if (!p) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    snprintf(p->host, sizeof p->host, "%s", host && strcmp(host, "localhost") ? host : "127.0.0.1");
    long lo = 32768, hi = 60999; /* the kernel's default, if the file cannot be read */
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        long a, b;
        if (fscanf(f, "%ld %ld", &a, &b) == 2 && a <= b) lo = a, hi = b;
        fclose(f);
    }
    avoid_range(p, 0, DT__PORTS_LOW - 1);
    avoid_range(p, lo, hi);
    avoid_reserved(p);
    for (int port = DT__PORTS_LOW; port <= 65535; port++) p->ncandidates += !avoided(p, port);
    const char *dir = lock_dir ? lock_dir : LOCK_DIR_DEFAULT;
    if (mkdir(dir, 01777) == 0) chmod(dir, 01777); /* the umask took the sticky bit's company */
    struct stat sb;
    /* a dir too long for p->dir (and a port's file in it) is not used: never a cut one */
    if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) && access(dir, W_OK | X_OK) == 0 &&
        dt__path(p->dir, sizeof p->dir - 8, "%s", dir))
        dt_err_clear();
    *out = p;
    return DT_OK;
}

/* Drop the lock fd of port: unlinked while still locked (a taker that opened the file sees
 * it is no longer at the path, and opens the new one), then closed. */
static void unlock_fd(const dt__ports *p, int port, int fd) {
    if (fd < 0) return;
    char path[600];
    snprintf(path, sizeof path, "%s/%d", p->dir, port);
    unlink(path);
    close(fd);
}

static void unlock(const dt__ports *p, held *h) {
    unlock_fd(p, h->port, h->fd);
    h->fd = -1;
}

void dt__ports_free(dt__ports *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) unlock(p, &p->h[i]);
    free(p->h);
    free(p);
}

int dt__ports_candidates(const dt__ports *p) { return p->ncandidates; }

const char *dt__ports_lock_dir(const dt__ports *p) { return p->dir[0] ? p->dir : NULL; }

int dt__ports_held(const dt__ports *p, int port) {
    for (int i = 0; i < p->n; i++)
        if (p->h[i].port == port) return 1;
    return 0;
}

/* Lock LOCK_DIR/port: the fd (held), -1 with *busy when another master holds it, -1 without
 * *busy when the directory cannot be used (no lock, no refusal). */
static int lock_port(const dt__ports *p, int port, int *busy) {
    *busy = 0;
    if (!p->dir[0]) return -1;
    char path[600];
    snprintf(path, sizeof path, "%s/%d", p->dir, port);
    for (;;) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd < 0 && errno == EACCES) fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) return -1;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            close(fd);
            *busy = errno == EWOULDBLOCK;
            return -1;
        }
        /* The holder before us may have unlinked it after we opened it: lock what is there. */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino)
            return fd;
        close(fd);
    }
}

/* Can port be bound on the host right now (no SO_REUSEADDR)? With port 0, *port gets the
 * kernel's choice. */
static int bindable(const dt__ports *p, int *port) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, p->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)*port);
        len = sizeof *a4;
    } else if (inet_pton(AF_INET6, p->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)*port);
        len = sizeof *a6;
    } else {
        a4->sin_family = AF_INET; /* a host name: every interface, the strictest test */
        a4->sin_port = htons((uint16_t)*port);
        len = sizeof *a4;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    int ok = bind(fd, (struct sockaddr *)&ss, len) == 0;
    if (ok && *port == 0) {
        socklen_t l = sizeof ss;
        ok = getsockname(fd, (struct sockaddr *)&ss, &l) == 0;
        *port = ntohs(ss.ss_family == AF_INET6 ? a6->sin6_port : a4->sin_port);
    }
    close(fd);
    return ok;
}

static dt_err add_held(dt__ports *p, int port, int fd) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        held *h = realloc(p->h, (size_t)cap * sizeof *h);
        if (!h) {
            if (fd >= 0) close(fd);
            return dt_err_set(DT_ERR_NOMEM, "out of memory");
        }
        p->h = h;
        p->cap = cap;
    }
    p->h[p->n++] = (held){.port = port, .fd = fd};
    return DT_OK;
}

/* Try cand: not held here, not locked by another master, bindable now; then hold it. */
static int try_take(dt__ports *p, int cand, dt_err *e) {
    if (dt__ports_held(p, cand)) return 0;
    int busy, fd = lock_port(p, cand, &busy);
    if (busy) return 0;
    if (!bindable(p, &cand)) {
        unlock_fd(p, cand, fd);
        return 0;
    }
    *e = add_held(p, cand, fd);
    return 1;
}

/* The (r mod ncandidates)-th candidate, as an offset from DT__PORTS_LOW: every candidate
 * equally likely. (A random offset into the whole span fell into the avoided kernel's range
 * most of the time and its scan ran on to the first free port above it, so most masters
 * took the same lowest free port: the one a killed master had just given up, before it was
 * resumed to listen on it again.) */
static int first_candidate(const dt__ports *p, uint32_t r) {
    int skip = (int)(r % (uint32_t)p->ncandidates);
    for (int port = DT__PORTS_LOW; port <= 65535; port++)
        if (!avoided(p, port) && skip-- == 0) return port - DT__PORTS_LOW;
    return 0;
}

dt_err dt__ports_take(dt__ports *p, int *port) {
    *port = 0;
    dt_err e = DT_OK;
    if (p->ncandidates > 0) {
        /* Every candidate once, from a random one: two masters rarely start together, and
         * none is missed however few are left. */
        uint32_t r;
        if (getrandom(&r, sizeof r, 0) != sizeof r) r = (uint32_t)rand();
        int span = 65536 - DT__PORTS_LOW, start = first_candidate(p, r);
        for (int k = 0; k < span; k++) {
            int cand = DT__PORTS_LOW + (start + k) % span;
            if (avoided(p, cand)) continue;
            if (try_take(p, cand, &e)) {
                if (!e) *port = cand;
                return e;
            }
        }
    }
    /* None outside the kernel's range (a host whose range is almost everything, or every
     * one taken): the kernel's choice, held the same way. */
    for (int tries = 0; tries < TRIES; tries++) {
        int cand = 0;
        if (!bindable(p, &cand)) break;
        if (try_take(p, cand, &e)) {
            if (!e) *port = cand;
            return e;
        }
    }
    return dt_err_set(DT_ERR_IO, "cannot find a free port on %s (%d candidates outside the "
                                 "kernel's ephemeral range from %d up, then the kernel's own)",
                      p->host, p->ncandidates, DT__PORTS_LOW);
}

dt_err dt__ports_hold(dt__ports *p, int port, int *busy) {
    *busy = 0;
    if (port <= 0 || port > 65535 || dt__ports_held(p, port)) return DT_OK;
    int fd = lock_port(p, port, busy);
    return add_held(p, port, fd);
}

void dt__ports_release(dt__ports *p, int port) {
    for (int i = 0; i < p->n; i++)
        if (p->h[i].port == port) {
            unlock(p, &p->h[i]);
            p->h[i] = p->h[--p->n];
            return;
        }
}
