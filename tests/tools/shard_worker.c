/*
 * shard_worker.c - a replica for the shell tests of the shard service: it registers a
 * dataset, then fetches shards until END, "trains" on each (sleeps), reports it and logs
 * one line per shard. It runs as a replica of a dtrain job (DTRAIN_MASTER,
 * DTRAIN_JOB_TOKEN and DTRAIN_REPLICA come from the environment).
 *
 *   shard_worker --dataset NAME --size N --batch B --epochs E --minibatches M
 *                [--shuffle] [--shuffle-shards] [--seed S] [--sleep-ms MS] [--out FILE]
 *                [--fail-once-at K] [--forget-at K] [--heartbeat-ms MS] [--separate]
 *                [--hold-at K --hold-file PATH]
 *
 * Each shard's report goes with the fetch of the next (dt_shard_report_fetch: one request
 * per shard); --separate sends them as two requests (dt_shard_report, dt_shard_fetch).
 *
 * --out FILE gets, per shard, after its report, the line
 *
 *     REPLICA EPOCH ID START END LEASE ok|refused|failed SUM_OF_INDICES COUNT
 *
 * appended with one write(2) on an O_APPEND descriptor, so that the lines of several
 * workers sharing the file never mix. "refused": the master refused the report as late
 * (the shard was re-queued meanwhile; the worker goes on). "failed": --fail-once-at K made
 * the K-th shard this process fetched (1-based) be reported failed, once. --forget-at K
 * makes it lose track of the K-th shard: never reported nor logged, while the process goes
 * on fetching and beating (a user's loop with a bug; its lease must pass its deadline).
 * --hold-at K with --hold-file PATH: the first worker to fetch its K-th shard creates PATH
 * (one worker of the job, once), writes "REPLICA EPOCH ID" to it and then holds the
 * shard without end, so that a test can kill a worker known to hold a shard it has not
 * reported (a kill at a moment of the test's choosing could fall between a report and its
 * log line).
 *
 * Exit status: 0 at END, 1 on any other error (message on stderr), 2 bad arguments.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/shard.h"

static const char usage[] =
    "usage: shard_worker --dataset NAME --size N --batch B --epochs E --minibatches M\n"
    "                    [--shuffle] [--shuffle-shards] [--seed S] [--sleep-ms MS]\n"
    "                    [--out FILE] [--fail-once-at K] [--forget-at K] [--heartbeat-ms MS]\n"
    "                    [--separate] [--hold-at K --hold-file PATH]\n";

static int bad_args(const char *fmt, const char *arg) {
    fprintf(stderr, "shard_worker: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage);
    return 2;
}

/* A non-negative integer argument. */
static int parse_i64(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0) return -1;
    *out = v;
    return 0;
}

static void nap_ms(long long ms) {
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The line of shard s in two parts around its outcome (known only after the report, when
 * a combined report-and-fetch has already replaced s). */
static void line_of(char *head, size_t hlen, char *tail, size_t tlen, const char *replica,
                    const dt_shard *s) {
    unsigned long long sum = 0;
    for (int64_t i = 0; i < s->count; i++)
        sum += (unsigned long long)s->indices[i];
    snprintf(head, hlen, "%s %lld %lld %lld %lld %llu", replica, (long long)s->epoch,
             (long long)s->id, (long long)s->start, (long long)s->end,
             (unsigned long long)s->lease);
    snprintf(tail, tlen, "%llu %lld", sum, (long long)s->count);
}

/* Append one line with one write(2). */
static int log_line(int fd, const char *head, const char *outcome, const char *tail) {
    char line[512];
    int n = snprintf(line, sizeof line, "%s %s %s\n", head, outcome, tail);
    if (n <= 0 || n >= (int)sizeof line) return -1;
    return write(fd, line, (size_t)n) == n ? 0 : -1;
}

/* --hold-at: if no worker has held a shard yet, say which one this is and hold it until
 * killed. The line is written to a file of this process and linked to PATH: link(2) fails
 * if PATH exists (one holder), and a reader never sees PATH half-written. */
static void hold(const char *path, const char *replica, const dt_shard *s) {
    char tmp[4200], line[300];
    int n = snprintf(line, sizeof line, "%s %lld %lld\n", replica, (long long)s->epoch,
                     (long long)s->id);
    int t = snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid());
    int fd = n > 0 && n < (int)sizeof line && t > 0 && t < (int)sizeof tmp
                 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
                 : -1;
    if (fd < 0 || write(fd, line, (size_t)n) != n || close(fd) != 0) {
        fprintf(stderr, "shard_worker: %s: cannot write it\n", tmp);
        exit(1);
    }
    int linked = link(tmp, path) == 0;
    if (!linked && errno != EEXIST) {
        fprintf(stderr, "shard_worker: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    unlink(tmp);
    if (!linked) return;
    for (;;)
        pause();
}

int main(int argc, char **argv) {
    dt_dataset_spec d;
    dt_dataset_spec_init(&d);
    d.name = NULL;
    long long sleep_ms = 0, fail_at = 0, forget_at = 0, heartbeat_ms = 0;
    int separate = 0; /* report, then fetch: two requests per shard */
    const char *out = NULL, *hold_file = NULL;
    long long hold_at = 0;
    int have_size = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--shuffle")) {
            d.shuffle = 1;
            continue;
        }
        if (!strcmp(a, "--shuffle-shards")) {
            d.shuffle_shards = 1;
            continue;
        }
        if (!strcmp(a, "--separate")) {
            separate = 1;
            continue;
        }
        if (i + 1 >= argc) return bad_args("%s: needs a value (or is unknown)", a);
        const char *v = argv[++i];
        long long x = 0;
        if (!strcmp(a, "--dataset")) {
            d.name = v;
            continue;
        }
        if (!strcmp(a, "--out")) {
            out = v;
            continue;
        }
        if (!strcmp(a, "--hold-file")) {
            hold_file = v;
            continue;
        }
        if (parse_i64(v, &x)) return bad_args("%s: expected a non-negative integer", a);
        if (!strcmp(a, "--size")) {
            d.dataset_size = x;
            have_size = 1;
        } else if (!strcmp(a, "--batch")) {
            d.batch_size = x;
        } else if (!strcmp(a, "--epochs")) {
            d.num_epochs = x;
        } else if (!strcmp(a, "--minibatches")) {
            d.num_minibatches_per_shard = x;
        } else if (!strcmp(a, "--seed")) {
            d.seed = (uint64_t)x;
        } else if (!strcmp(a, "--sleep-ms")) {
            sleep_ms = x;
        } else if (!strcmp(a, "--fail-once-at")) {
            fail_at = x;
        } else if (!strcmp(a, "--forget-at")) {
            forget_at = x;
        } else if (!strcmp(a, "--hold-at")) {
            hold_at = x;
        } else if (!strcmp(a, "--heartbeat-ms")) {
            heartbeat_ms = x;
        } else {
            return bad_args("unknown option '%s'", a);
        }
    }
    if (!d.name || !have_size) return bad_args("%s are required", "--dataset and --size");
    if (!hold_at != !hold_file) return bad_args("%s go together", "--hold-at and --hold-file");

    int fd = -1;
    if (out && (fd = open(out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
        fprintf(stderr, "shard_worker: %s: %s\n", out, strerror(errno));
        return 1;
    }
    dt_shard_client *c = NULL;
    dt_shard_client_opts opts = {.heartbeat_ms = (int)heartbeat_ms};
    dt_shard s = {0};
    dt_shard_fetch_status st;
    long long fetched = 0, refused = 0;
    int rc = 1;
    dt_err e = dt_shard_client_open(&c, &opts);
    if (!e) e = dt_shard_register(c, &d);
    if (!e) e = dt_shard_fetch(c, d.name, &s, &st);
    while (!e && st == DT_SHARD_FETCH_SHARD) {
        fetched++;
        if (fetched == forget_at) {
            fprintf(stderr, "shard_worker: forgets shard %lld of epoch %lld (lease %llu)\n",
                    (long long)s.id, (long long)s.epoch, (unsigned long long)s.lease);
            e = dt_shard_fetch(c, d.name, &s, &st);
            continue;
        }
        if (fetched == hold_at) hold(hold_file, dt_shard_client_replica(c), &s);
        nap_ms(sleep_ms);
        int ok = fetched != fail_at;
        const char *outcome = ok ? "ok" : "failed";
        char head[400], tail[64];
        line_of(head, sizeof head, tail, sizeof tail, dt_shard_client_replica(c), &s);
        /* Report this shard and fetch the next in one request; after a refusal (late),
         * nothing was fetched: fetch on its own. */
        e = separate ? dt_shard_report(c, d.name, &s, ok, ok ? "" : "shard_worker: --fail-once-at")
                     : dt_shard_report_fetch(c, d.name, &s, ok,
                                             ok ? "" : "shard_worker: --fail-once-at", &st);
        int fetch_next = separate;
        if (e == DT_ERR_STATE && ok) {
            fprintf(stderr, "shard_worker: %s\n", dt_errmsg());
            outcome = "refused";
            refused++;
            e = DT_OK;
            fetch_next = 1;
        }
        if (!e && fd >= 0 && log_line(fd, head, outcome, tail)) {
            fprintf(stderr, "shard_worker: %s: %s\n", out, strerror(errno));
            goto end;
        }
        if (!e && fetch_next) e = dt_shard_fetch(c, d.name, &s, &st);
    }
    if (e) {
        fprintf(stderr, "shard_worker: %s\n", dt_errmsg());
        goto end;
    }
    printf("%s: END after %lld shards (%lld refused)\n", dt_shard_client_replica(c), fetched,
           refused);
    rc = 0;
end:
    dt_shard_free(&s);
    dt_shard_client_close(c);
    if (fd >= 0) close(fd);
    return rc;
}
