/*
 * shard_bench.c - fetch-and-report round trips per second against a job's master, through
 * the C shard client (include/dtrain/shard.h), and the master's CPU share meanwhile.
 *
 *   shard_bench --url URL --token TOKEN --dataset NAME [--threads N] [--seconds S]
 *               [--rate R] [--master-pid PID] [--size N] [--batch B] [--minibatches M]
 *               [--raw] [--combined] [--per-request K]
 *
 * Registers the dataset (one epoch of N samples, default 2^27, in shards of B * M, default
 * 64 * 4 samples: 524288 shards, more than any run here asks for), then runs N threads
 * (default 1), thread i acting as replica worker-i with its own client (its own kept-alive
 * connection and heartbeat thread): fetch a shard, report it done, again, for S seconds
 * (default 5). With --rate R the threads together are paced to R round trips per second
 * (each at R/N, on an absolute schedule); without, they go as fast as they can. Prints the
 * round trips per second, the mean round trip time, this process's CPU share and, with
 * --master-pid, the master's: (utime + stime) from /proc/PID/stat over the run's wall time,
 * in percent of one core.
 *
 * --raw drives the same protocol without the client library: HTTP/1.1 written by hand on
 * a kept-alive socket per thread (as bench/http_rps does), the fetch answer parsed with
 * jansson, no heartbeats. It costs the clients a fraction of libcurl's CPU, so it tells
 * what the master serves when the clients' cost is taken out of the shared cores.
 *
 * --combined sends each shard's report with the fetch of the next, one request per shard
 * (dt_shard_report_fetch; by hand with --raw), as dtrain's own workers do; without it, a
 * round trip is two requests, a fetch and a report (dt_shard_fetch, dt_shard_report).
 *
 * --per-request K fetches K shards in each request, which carries the reports of the K
 * before (dt_shard_fetch_many; C client only): a round trip is still one shard fetched and
 * reported, K of them per request.
 *
 * Everything runs on the same machine: the clients' CPU (libcurl, JSON) is taken from the
 * master's cores. The job's replicas worker-0..N-1 must exist (they may just sleep).
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_net.h"
#include "dtrain/shard.h"

typedef struct bench {
    const char *url, *token, *dataset;
    const char *job; /* the job's name (for --raw's paths) */
    int raw, combined, per_request;
    char host[256], port[16];
    double seconds, rate; /* rate: round trips/s of all threads together; 0: unpaced */
    int threads;
    atomic_int stop;
} bench;

typedef struct worker {
    pthread_t thread;
    bench *b;
    int index;
    long round_trips;
    double busy_s; /* time spent in fetch + report */
    int failed;
    char error[512];
} worker;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_until(double t) {
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - (double)(time_t)t) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* utime + stime of process pid in seconds; -1 when unreadable. */
static double proc_cpu_s(int pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long utime, stime;
    /* after ")": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
     * utime stime (fields 3..15) */
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                     &stime) != 2)
        return -1;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* ---- --raw: the protocol by hand ---- */

static int dial(const bench *b) { return bench_dial(b->host, b->port); }

/* POST body to path on fd and read the answer; its status (-1: the connection broke) and
 * its body, NUL-terminated, at *body (inside buf). No pipelining, so one answer at most. */
static int post(const bench *b, int fd, const char *path, const char *body, char *buf,
                size_t cap, char **resp_body) {
    char req[2048];
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: %s:%s\r\nAuthorization: Bearer %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     path, b->host, b->port, b->token, strlen(body), body);
    if (n <= 0 || n >= (int)sizeof req || send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) return -1;
    size_t got = 0;
    for (;;) {
        buf[got] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end) {
            const char *cl = strcasestr(buf, "\r\nContent-Length:");
            size_t want = (size_t)(end + 4 - buf) + (cl ? strtoull(cl + 17, NULL, 10) : 0);
            if (want >= cap) return -1;
            if (got >= want) {
                buf[want] = '\0';
                *resp_body = end + 4;
                return strncmp(buf, "HTTP/1.1 ", 9) ? -1 : atoi(buf + 9);
            }
        }
        if (got + 1 >= cap) return -1;
        ssize_t r = recv(fd, buf + got, cap - 1 - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
}

/* One fetch + report by hand (--combined: the report of the last shard, held in *held,
 * goes with the fetch of the next); 0 on success, else a message in w->error. */
static int raw_round_trip(worker *w, int fd, const char *replica, char *buf, size_t cap,
                          char *held, size_t held_len) {
    const bench *b = w->b;
    char path[512], body[512];
    char *resp;
    snprintf(path, sizeof path, "/v1/jobs/%s/datasets/%s/fetch", b->job, b->dataset);
    if (b->combined && held[0])
        snprintf(body, sizeof body, "{\"replica\":\"%s\",\"report\":%s}", replica, held);
    else
        snprintf(body, sizeof body, "{\"replica\":\"%s\"}", replica);
    int st = post(b, fd, path, body, buf, cap, &resp);
    json_t *j = st == 200 ? json_loads(resp, 0, NULL) : NULL;
    json_t *sh = json_object_get(j, "shard");
    if (!sh) {
        snprintf(w->error, sizeof w->error, "%s: fetch: HTTP %d: %.200s", replica, st,
                 st > 0 ? resp : "connection lost");
        json_decref(j);
        return -1;
    }
    snprintf(body, sizeof body,
             "{\"replica\":\"%s\",\"epoch\":%lld,\"id\":%lld,\"lease\":%lld,\"ok\":true,"
             "\"message\":\"\"}",
             replica, (long long)json_integer_value(json_object_get(sh, "epoch")),
             (long long)json_integer_value(json_object_get(sh, "id")),
             (long long)json_integer_value(json_object_get(sh, "lease")));
    json_decref(j);
    if (b->combined) { /* reported with the next fetch */
        snprintf(held, held_len, "{%s", strchr(body, ',') + 1); /* the body minus "replica" */
        return 0;
    }
    snprintf(path, sizeof path, "/v1/jobs/%s/datasets/%s/report", b->job, b->dataset);
    if ((st = post(b, fd, path, body, buf, cap, &resp)) != 200) {
        snprintf(w->error, sizeof w->error, "%s: report: HTTP %d: %.200s", replica, st,
                 st > 0 ? resp : "connection lost");
        return -1;
    }
    return 0;
}

static void *run(void *arg) {
    worker *w = arg;
    bench *b = w->b;
    char replica[32];
    snprintf(replica, sizeof replica, "worker-%d", w->index);
    dt_shard_client *c = NULL;
    dt_shard_client_opts o = {.url = b->url, .token = b->token, .replica = replica};
    dt_shard s = {0}, many[DT_SHARD_MAX_BATCH] = {{0}};
    int nmany = 0;
    dt_shard_fetch_status st;
    dt_err e = DT_OK;
    int fd = -1;
    char buf[1 << 16]; /* --raw: one answer */
    char held[512] = ""; /* --raw --combined: the report of the shard held */
    if (b->raw && (fd = dial(b)) < 0) {
        snprintf(w->error, sizeof w->error, "%s: cannot connect to %s", replica, b->url);
        w->failed = 1;
        return NULL;
    }
    if (!b->raw) e = dt_shard_client_open(&c, &o);
    double period = b->rate > 0 ? b->threads / b->rate : 0;
    double t0 = now_s(), next = t0 + period * w->index / b->threads;
    while (!e && !atomic_load_explicit(&b->stop, memory_order_relaxed)) {
        if (period > 0) {
            sleep_until(next);
            next += period;
        }
        double t = now_s();
        if (b->raw) {
            if (raw_round_trip(w, fd, replica, buf, sizeof buf, held, sizeof held)) {
                w->failed = 1;
                break;
            }
            w->busy_s += now_s() - t;
            w->round_trips++;
            continue;
        }
        if (b->per_request) {
            e = dt_shard_fetch_many(c, b->dataset, many, nmany, many, b->per_request, &nmany,
                                    &st);
            if (!e && st == DT_SHARD_FETCH_SHARD) {
                w->busy_s += now_s() - t;
                w->round_trips += nmany;
                continue;
            }
        } else if (b->combined && s.count)
            e = dt_shard_report_fetch(c, b->dataset, &s, 1, "", &st);
        else
            e = dt_shard_fetch(c, b->dataset, &s, &st);
        if (e) break;
        if (st == DT_SHARD_FETCH_END) {
            snprintf(w->error, sizeof w->error, "%s: the dataset ran out of shards", replica);
            w->failed = 1;
            break;
        }
        if (!b->combined && (e = dt_shard_report(c, b->dataset, &s, 1, ""))) break;
        w->busy_s += now_s() - t;
        w->round_trips++;
    }
    if (e) {
        snprintf(w->error, sizeof w->error, "%s", dt_errmsg());
        w->failed = 1;
    }
    if (fd >= 0) close(fd);
    dt_shard_free(&s);
    for (int i = 0; i < DT_SHARD_MAX_BATCH; i++) dt_shard_free(&many[i]);
    dt_shard_client_close(c);
    return NULL;
}

static int usage(void) {
    fprintf(stderr, "usage: shard_bench --url URL --token TOKEN --dataset NAME [--threads N]\n"
                    "                   [--seconds S] [--rate R] [--master-pid PID] [--size N]\n"
                    "                   [--batch B] [--minibatches M] [--raw] [--combined]\n"
                    "                   [--per-request K]\n");
    return 2;
}

int main(int argc, char **argv) {
    bench b = {.seconds = 5, .threads = 1};
    int master_pid = 0;
    dt_dataset_spec d;
    dt_dataset_spec_init(&d);
    d.dataset_size = (int64_t)1 << 27;
    d.batch_size = 64;
    d.num_minibatches_per_shard = 4;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--combined")) {
            b.combined = 1;
            continue;
        }
        if (!strcmp(a, "--raw")) {
            b.raw = 1;
            continue;
        }
        if (!v) return usage();
        i++;
        if (!strcmp(a, "--url"))
            b.url = v;
        else if (!strcmp(a, "--token"))
            b.token = v;
        else if (!strcmp(a, "--dataset"))
            b.dataset = v;
        else if (!strcmp(a, "--threads"))
            b.threads = atoi(v);
        else if (!strcmp(a, "--seconds"))
            b.seconds = atof(v);
        else if (!strcmp(a, "--rate"))
            b.rate = atof(v);
        else if (!strcmp(a, "--master-pid"))
            master_pid = atoi(v);
        else if (!strcmp(a, "--size"))
            d.dataset_size = atoll(v);
        else if (!strcmp(a, "--batch"))
            d.batch_size = atoll(v);
        else if (!strcmp(a, "--per-request"))
            b.per_request = atoi(v);
        else if (!strcmp(a, "--minibatches"))
            d.num_minibatches_per_shard = atoll(v);
        else
            return usage();
    }
    if (!b.url || !b.token || !b.dataset || b.threads < 1 || b.threads > 256 || b.seconds <= 0 ||
        b.rate < 0 || b.per_request < 0 || b.per_request > DT_SHARD_MAX_BATCH ||
        (b.per_request && b.raw))
        return usage();
    d.name = b.dataset;
    signal(SIGPIPE, SIG_IGN); /* --raw's sockets */
    /* http://HOST:PORT, for --raw */
    const char *h = strncmp(b.url, "http://", 7) ? NULL : b.url + 7, *colon = h ? strrchr(h, ':') : NULL;
    if (!colon || (size_t)(colon - h) >= sizeof b.host) {
        fprintf(stderr, "shard_bench: bad URL '%s': expected http://HOST:PORT\n", b.url);
        return 2;
    }
    snprintf(b.host, sizeof b.host, "%.*s", (int)(colon - h), h);
    snprintf(b.port, sizeof b.port, "%.15s", colon + 1);

    dt_shard_client *c;
    dt_shard_client_opts o = {.url = b.url, .token = b.token, .replica = "worker-0",
                              .heartbeat_ms = -1};
    if (dt_shard_client_open(&c, &o) || dt_shard_register(c, &d)) {
        fprintf(stderr, "shard_bench: %s\n", dt_errmsg());
        return 1;
    }
    char job[256];
    snprintf(job, sizeof job, "%s", dt_shard_client_job(c));
    b.job = job;
    dt_shard_client_close(c);

    worker *w = calloc((size_t)b.threads, sizeof *w);
    if (!w) return 1;
    double cpu0 = self_cpu_s(), m0 = master_pid ? proc_cpu_s(master_pid) : -1, t0 = now_s();
    for (int i = 0; i < b.threads; i++) {
        w[i] = (worker){.b = &b, .index = i};
        if (pthread_create(&w[i].thread, NULL, run, &w[i]) != 0) {
            fprintf(stderr, "shard_bench: cannot start thread %d\n", i);
            return 1;
        }
    }
    sleep_until(t0 + b.seconds);
    atomic_store(&b.stop, 1);
    double m1 = master_pid ? proc_cpu_s(master_pid) : -1, t1 = now_s(), cpu1 = self_cpu_s();
    long total = 0;
    double busy = 0;
    int failed = 0;
    for (int i = 0; i < b.threads; i++) {
        pthread_join(w[i].thread, NULL);
        total += w[i].round_trips;
        busy += w[i].busy_s;
        if (w[i].failed) {
            fprintf(stderr, "shard_bench: %s\n", w[i].error);
            failed = 1;
        }
    }
    double wall = t1 - t0;
    char many_label[48];
    snprintf(many_label, sizeof many_label, "%d per request", b.per_request);
    printf("%d %sclient%s%s, %s, %.1f s: %ld fetch+report round trips, %.0f/s, mean %.0f us "
           "each; clients' CPU %.0f%%",
           b.threads, b.raw ? "raw " : "", b.threads == 1 ? "" : "s", b.rate > 0 ? " (paced)" : "",
           b.per_request ? many_label : b.combined ? "1 request each" : "2 requests each", wall,
           total,
           (double)total / wall, total ? 1e6 * busy / (double)total : 0.0,
           100 * (cpu1 - cpu0) / wall);
    if (m0 >= 0 && m1 >= 0)
        printf("; master's CPU %.1f%% of one core (%.0f us per round trip)", 100 * (m1 - m0) / wall,
               total ? 1e6 * (m1 - m0) / (double)total : 0.0);
    printf("\n");
    free(w);
    return failed || total == 0;
}
