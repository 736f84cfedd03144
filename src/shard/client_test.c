/*
 * client_test.c - the shard service's C client against a real master: each test starts a
 * job with `$DTRAIN_BIN run --detach` (a TFJob whose two workers only sleep), acts as
 * worker-0 (and worker-1) from this process and stops the job at the end.
 *
 * Covered: every shard of two epochs fetched and reported, then END, with exactly the
 * indices of each epoch; shuffle gives a permutation per epoch, and a registered client's
 * indices, taken from the sample order, are those the master sends; registering again (same
 * spec: no-op, other spec: refused); late reports refused with DT_ERR_STATE (a wrong lease;
 * a shard re-queued because worker-0's process was killed); a fetch that waits while
 * another replica holds the last shard and gets it when that one fails; a master killed
 * and resumed on its port while the client retries; missing environment, unknown dataset,
 * replica and token, an unreachable master, bad register values.
 */
#include "dtrain/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <jansson.h>

#include "net/http-impl.h"
#include "testing/dt_test.h"
#include "testing/master_fixture.h"

/* A replica's entry of GET /v1/jobs/NAME/replicas (a new reference), or NULL. */
static json_t *replica_info(const job *j, const char *replica) {
    dt__http_client *h;
    if (dt__http_client_init(&h, j->url, j->token, 5000)) return NULL;
    char path[200];
    snprintf(path, sizeof path, "/v1/jobs/%s/replicas", j->name);
    long status = 0;
    char *body = NULL;
    size_t len = 0;
    json_t *out = NULL;
    if (dt__http_client_request(h, "GET", path, NULL, 0, &status, &body, &len) == DT_OK &&
        status == 200) {
        json_t *all = json_loadb(body, len, 0, NULL);
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(all, "replicas"), i, r) {
            const char *n = json_string_value(json_object_get(r, "name"));
            if (n && !strcmp(n, replica)) out = json_incref(r);
        }
        json_decref(all);
    }
    free(body);
    dt__http_client_free(h);
    return out;
}

/* Fetch and report every shard of spec d as one replica; check each epoch's indices: every
 * sample exactly once, in shards of the expected size; permuted says whether they must be
 * start..end-1 (0) or must not all be (1). */
static void drain_and_check(dt_shard_client *c, const dt_dataset_spec *d, int permuted) {
    int64_t n = d->dataset_size, per = d->batch_size * d->num_minibatches_per_shard;
    int64_t nshards = (n + per - 1) / per;
    int *seen = calloc((size_t)(n * d->num_epochs), sizeof *seen);
    int *ids = calloc((size_t)(nshards * d->num_epochs), sizeof *ids);
    DT_CHECK(seen && ids);
    dt_shard s = {0};
    dt_shard_fetch_status st;
    int64_t shards = 0, last_epoch = 0, in_order = 1;
    for (;;) {
        dt_err e = dt_shard_fetch(c, d->name, &s, &st);
        if (e) {
            free(seen);
            free(ids);
            dt_shard_free(&s);
            DT_FAIL("fetch: %s", dt_errmsg());
        }
        if (st == DT_SHARD_FETCH_END) break;
        int bad = s.epoch < last_epoch || s.epoch >= d->num_epochs || s.id < 0 ||
                  s.id >= nshards || s.start != s.id * per ||
                  s.end != (s.start + per < n ? s.start + per : n) || s.count != s.end - s.start ||
                  ids[s.epoch * nshards + s.id]++;
        for (int64_t i = 0; i < s.count && !bad; i++) {
            bad = s.indices[i] < 0 || s.indices[i] >= n || seen[s.epoch * n + s.indices[i]]++;
            if (s.indices[i] != s.start + i) in_order = 0;
        }
        if (bad) {
            free(seen);
            free(ids);
            dt_shard_free(&s);
            DT_FAIL("shard epoch %lld id %lld [%lld, %lld) count %lld: unexpected",
                    (long long)s.epoch, (long long)s.id, (long long)s.start, (long long)s.end,
                    (long long)s.count);
        }
        last_epoch = s.epoch;
        shards++;
        if (dt_shard_report(c, d->name, &s, 1, "")) {
            free(seen);
            free(ids);
            dt_shard_free(&s);
            DT_FAIL("report: %s", dt_errmsg());
        }
    }
    int64_t missing = 0;
    for (int64_t i = 0; i < n * d->num_epochs; i++) missing += seen[i] != 1;
    free(seen);
    free(ids);
    dt_shard_free(&s);
    DT_CHECK(shards == nshards * d->num_epochs);
    DT_CHECK(missing == 0);
    DT_CHECK(in_order == !permuted);
    DT_CHECK(s.indices == NULL && s.count == 0);
    /* END stays END. */
    DT_CHECK_OK(dt_shard_fetch(c, d->name, &s, &st));
    DT_CHECK(st == DT_SHARD_FETCH_END);
}

/* ---- tests without a master ---- */

static void test_missing_env(void) {
    unsetenv("DTRAIN_MASTER");
    unsetenv("DTRAIN_JOB_TOKEN");
    unsetenv("DTRAIN_REPLICA");
    dt_shard_client *c = (dt_shard_client *)1;
    DT_CHECK_ERR(dt_shard_client_open(&c, NULL), DT_ERR_ARG, "DTRAIN_MASTER is not set");
    DT_CHECK(c == NULL);
    setenv("DTRAIN_MASTER", "http://127.0.0.1:1", 1);
    DT_CHECK_ERR(dt_shard_client_open(&c, NULL), DT_ERR_ARG, "DTRAIN_JOB_TOKEN is not set");
    setenv("DTRAIN_JOB_TOKEN", "", 1); /* empty counts as unset */
    DT_CHECK_ERR(dt_shard_client_open(&c, NULL), DT_ERR_ARG, "DTRAIN_JOB_TOKEN is not set");
    setenv("DTRAIN_JOB_TOKEN", "t0k", 1);
    DT_CHECK_ERR(dt_shard_client_open(&c, NULL), DT_ERR_ARG, "DTRAIN_REPLICA is not set");
    /* Given in opts, the environment is not needed. */
    unsetenv("DTRAIN_MASTER");
    dt_shard_client_opts o = {.url = "ftp://x", .replica = "worker-0"};
    DT_CHECK_ERR(dt_shard_client_open(&c, &o), DT_ERR_ARG, "ftp://x");
    setenv("DTRAIN_MASTER", "localhost:80", 1);
    setenv("DTRAIN_REPLICA", "worker-0", 1);
    DT_CHECK_ERR(dt_shard_client_open(&c, NULL), DT_ERR_ARG, "DTRAIN_MASTER: bad base URL");
    unsetenv("DTRAIN_MASTER");
    unsetenv("DTRAIN_JOB_TOKEN");
    unsetenv("DTRAIN_REPLICA");
    dt_shard_client_close(NULL); /* no-op */
    dt_shard_free(NULL);
}

static void test_unreachable(void) {
    /* A port nobody listens on: bind one, note it, close it. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    DT_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
             getsockname(fd, (struct sockaddr *)&a, &al) == 0);
    close(fd);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    dt_shard_client *c;
    dt_shard_client_opts o = {.url = url, .token = "t", .replica = "worker-0", .retry_ms = 300};
    DT_CHECK_ERR(dt_shard_client_open(&c, &o), DT_ERR_NETWORK, "no answer from the master");
    DT_CHECK(strstr(dt_errmsg(), url) != NULL);
}

/* ---- tests against a master ---- */

static void two_epochs(job *j) {
    job_env(j, "worker-0"); /* the replica's usual way: everything from the environment */
    dt_shard_client *c;
    DT_CHECK_OK(dt_shard_client_open(&c, NULL));
    DT_CHECK(!strcmp(dt_shard_client_job(c), j->name));
    DT_CHECK(!strcmp(dt_shard_client_replica(c), "worker-0"));
    dt_dataset_spec d = spec_of("training", 1000, 32, 2, 3); /* 11 shards of 96, last 40 */
    dt_err e = dt_shard_register(c, &d);
    if (!e) e = dt_shard_register(c, &d); /* the same again: a no-op */
    if (e) {
        dt_shard_client_close(c);
        DT_FAIL("register: %s", dt_errmsg());
    }
    dt_dataset_spec other = d;
    other.batch_size = 16;
    dt_err_clear();
    e = dt_shard_register(c, &other);
    int named = strstr(dt_errmsg(), "batch_size") != NULL;
    if (e != DT_ERR_STATE || !named) {
        dt_shard_client_close(c);
        DT_FAIL("register with another batch size: %s: %s", dt_strerror(e), dt_errmsg());
    }
    drain_and_check(c, &d, 0);
    dt_shard_client_close(c);
}

/* A dataset drained in batches (each batch's reports riding on the next fetch): every
 * sample once; a batch of reports with one refused names it and records the others. */
static void batches(job *j) {
    dt_shard_client *c;
    DT_CHECK_OK(open_as(&c, j, "worker-1"));
    dt_dataset_spec d = spec_of("batched", 230, 5, 2, 2); /* 23 shards x 2 epochs */
    d.shuffle = 1;
    d.seed = 3;
    DT_CHECK_OK(dt_shard_register(c, &d));
    dt_shard b[DT_SHARD_MAX_BATCH] = {{0}};
    int seen[2 * 230] = {0}, n = 0, nshards = 0, requests = 0;
    dt_shard_fetch_status st;
    for (;;) {
        dt_err e = dt_shard_fetch_many(c, "batched", b, n, b, 7, &n, &st);
        requests++;
        if (e) {
            dt_shard_client_close(c);
            DT_FAIL("fetch_many: %s", dt_errmsg());
        }
        if (st == DT_SHARD_FETCH_END) break;
        DT_CHECK(st == DT_SHARD_FETCH_SHARD && n >= 1 && n <= 7);
        for (int k = 0; k < n; k++) {
            nshards++;
            for (int64_t i = 0; i < b[k].count; i++) seen[b[k].epoch * 230 + b[k].indices[i]]++;
        }
    }
    int once = 0;
    for (int i = 0; i < 2 * 230; i++) once += seen[i] == 1;
    DT_CHECK(once == 2 * 230 && nshards == 46 && requests <= 46 / 7 + 3);
    /* a refused report in a batch: named, the one before it recorded, nothing fetched */
    d = spec_of("batched2", 30, 5, 1, 2); /* 3 shards */
    DT_CHECK_OK(dt_shard_register(c, &d));
    DT_CHECK_OK(dt_shard_fetch_many(c, "batched2", NULL, 0, b, 3, &n, &st));
    DT_CHECK(n == 3);
    b[1].lease += 1000;
    DT_CHECK_ERR(dt_shard_fetch_many(c, "batched2", b, 2, b, 3, &n, &st), DT_ERR_STATE,
                 "reports[1]: worker-1 does not hold shard");
    DT_CHECK(n == 0 && b[2].count == 10);
    b[1].lease -= 1000;
    DT_CHECK_OK(dt_shard_fetch_many(c, "batched2", b, 3, b, 3, &n, &st)); /* b[0] again: once */
    DT_CHECK(st == DT_SHARD_FETCH_END);
    DT_CHECK_ERR(dt_shard_fetch_many(c, "batched2", NULL, 0, b, 65, &n, &st), DT_ERR_ARG, "1..64");
    for (int k = 0; k < DT_SHARD_MAX_BATCH; k++) dt_shard_free(&b[k]);
    dt_shard_client_close(c);
}

static void test_two_epochs(void) {
    job j;
    DT_CHECK(job_start(&j, "shards-2ep") == 0);
    two_epochs(&j);
    batches(&j);
    job_stop(&j);
}

static void shuffled(job *j) {
    dt_shard_client *c;
    DT_CHECK_OK(open_as(&c, j, "worker-1"));
    dt_dataset_spec d = spec_of("shuffled", 500, 10, 2, 2);
    d.shuffle = 1;
    d.shuffle_shards = 1;
    d.seed = 7;
    d.max_failures = 5;
    dt_err e = dt_shard_register(c, &d);
    if (e) {
        dt_shard_client_close(c);
        DT_FAIL("register: %s", dt_errmsg());
    }
    drain_and_check(c, &d, 1);
    dt_shard_client_close(c);
}

/* c1 (which did not register the dataset: the master sends it the indices) fetches a shard
 * and fails it; c0 (which registered it: it asks for no indices and takes them from the
 * epoch's sample order) gets the same shard back: the same indices. */
static void same_shard_both_ways(dt_shard_client *c0, dt_shard_client *c1, const char *name) {
    dt_shard a = {0}, b = {0};
    dt_shard_fetch_status st;
    DT_CHECK_OK(dt_shard_fetch(c1, name, &a, &st));
    DT_CHECK(st == DT_SHARD_FETCH_SHARD && a.count > 0);
    DT_CHECK_OK(dt_shard_report(c1, name, &a, 0, "handed back"));
    DT_CHECK_OK(dt_shard_fetch(c0, name, &b, &st));
    DT_CHECK(st == DT_SHARD_FETCH_SHARD);
    DT_CHECK(b.epoch == a.epoch && b.id == a.id && b.count == a.count);
    if (b.count == a.count && memcmp(a.indices, b.indices, (size_t)a.count * sizeof *a.indices))
        DT_FAIL("epoch %lld shard %lld: the indices taken from the sample order differ from the "
                "master's", (long long)a.epoch, (long long)a.id);
    DT_CHECK_OK(dt_shard_report(c0, name, &b, 1, ""));
    dt_shard_free(&a);
    dt_shard_free(&b);
}

/* A registered client's indices, taken from the sample order, are the master's, in the first
 * epoch and in the next (its cached order recomputed). */
static void local_order(job *j) {
    dt_shard_client *c0, *c1;
    DT_CHECK_OK(open_as(&c0, j, "worker-0"));
    DT_CHECK_OK(open_as(&c1, j, "worker-1"));
    dt_dataset_spec d = spec_of("local", 500, 10, 2, 2);
    d.shuffle = 1;
    d.shuffle_shards = 1;
    d.seed = 11;
    DT_CHECK_OK(dt_shard_register(c0, &d));
    same_shard_both_ways(c0, c1, "local");
    /* the rest of epoch 0 by c0, then a shard of epoch 1 both ways */
    dt_shard s = {0};
    dt_shard_fetch_status st;
    for (int k = 1; k < 25; k++) {
        DT_CHECK_OK(dt_shard_fetch(c0, "local", &s, &st));
        DT_CHECK(st == DT_SHARD_FETCH_SHARD && s.epoch == 0);
        DT_CHECK_OK(dt_shard_report(c0, "local", &s, 1, ""));
    }
    dt_shard_free(&s);
    same_shard_both_ways(c0, c1, "local");
    dt_shard_client_close(c0);
    dt_shard_client_close(c1);
}

static void test_shuffle(void) {
    job j;
    DT_CHECK(job_start(&j, "shards-shuffle") == 0);
    shuffled(&j);
    if (!dt__test_failed) local_order(&j);
    job_stop(&j);
}

static void late_reports(job *j, dt_shard_client *c) {
    dt_dataset_spec d = spec_of("late", 100, 10, 1, 1);
    DT_CHECK_OK(dt_shard_register(c, &d));
    dt_shard s = {0};
    dt_shard_fetch_status st;
    DT_CHECK_OK(dt_shard_fetch(c, "late", &s, &st));
    DT_CHECK(st == DT_SHARD_FETCH_SHARD && s.count == 10);

    /* A wrong lease: refused, the shard still held. */
    dt_shard wrong = s;
    wrong.lease = s.lease + 1000;
    DT_CHECK_ERR(dt_shard_report(c, "late", &wrong, 1, ""), DT_ERR_STATE, "late report refused");
    DT_CHECK(strstr(dt_errmsg(), "worker-0") && strstr(dt_errmsg(), "HTTP 409"));

    /* worker-0's process dies: the master re-queues its shards; this report comes late. */
    json_t *r = replica_info(j, "worker-0");
    int pid = (int)json_integer_value(json_object_get(r, "pid"));
    json_decref(r);
    DT_CHECK(pid > 0);
    /* pid is the replica's supervisor, the leader of its process group: kill them all. */
    DT_CHECK(kill(-pid, SIGKILL) == 0);
    int exited = 0;
    for (int i = 0; i < 400 && !exited; i++) {
        nap_ms(25);
        r = replica_info(j, "worker-0");
        exited = json_integer_value(json_object_get(r, "restarts")) >= 1 ||
                 json_is_integer(json_object_get(r, "exitCode"));
        json_decref(r);
    }
    DT_CHECK(exited);
    dt_shard old = s;
    s = (dt_shard){0};
    DT_CHECK_ERR(dt_shard_report(c, "late", &old, 1, ""), DT_ERR_STATE, "late report refused");
    DT_CHECK(strstr(dt_errmsg(), "re-queued"));
    /* The re-queued shard is handed out again under a new lease, and counts then. */
    dt_err e = dt_shard_fetch(c, "late", &s, &st);
    int same = !e && st == DT_SHARD_FETCH_SHARD && s.epoch == old.epoch && s.id == old.id &&
               s.lease != old.lease;
    if (!e) e = dt_shard_report(c, "late", &s, 1, "");
    dt_shard_free(&old);
    dt_shard_free(&s);
    DT_CHECK_OK(e);
    DT_CHECK(same);
    /* A failed report re-queues the shard too; reporting it again after that is late. */
    DT_CHECK_OK(dt_shard_fetch(c, "late", &s, &st));
    DT_CHECK_OK(dt_shard_report(c, "late", &s, 0, "disk on fire"));
    e = dt_shard_report(c, "late", &s, 1, "");
    dt_shard_free(&s);
    DT_CHECK(e == DT_ERR_STATE);
    /* The rest; 9 shards remain. */
    int left = 0;
    while (!(e = dt_shard_fetch(c, "late", &s, &st)) && st == DT_SHARD_FETCH_SHARD) {
        left++;
        if ((e = dt_shard_report(c, "late", &s, 1, ""))) break;
    }
    dt_shard_free(&s);
    DT_CHECK_OK(e);
    DT_CHECK(left == 9);
}

static void test_late_report(void) {
    job j;
    DT_CHECK(job_start(&j, "shards-late") == 0);
    dt_shard_client *c = NULL;
    dt_err e = open_as(&c, &j, "worker-0");
    if (!e) late_reports(&j, c);
    dt_shard_client_close(c);
    job_stop(&j);
    DT_CHECK_OK(e);
}

static void errors(job *j, dt_shard_client *c) {
    dt_shard s = {0};
    dt_shard_fetch_status st;
    DT_CHECK_ERR(dt_shard_fetch(c, "nosuchdata", &s, &st), DT_ERR_NOTFOUND, "nosuchdata");
    DT_CHECK(strstr(dt_errmsg(), "not registered"));
    DT_CHECK(s.count == 0);
    s = (dt_shard){.epoch = 0, .id = 0, .lease = 1};
    DT_CHECK_ERR(dt_shard_report(c, "nosuchdata", &s, 1, NULL), DT_ERR_NOTFOUND, "nosuchdata");
    DT_CHECK_ERR(dt_shard_fetch(c, "", &s, &st), DT_ERR_ARG, "dataset");
    DT_CHECK_ERR(dt_shard_fetch(c, NULL, &s, &st), DT_ERR_ARG, "dataset");
    /* Every character a dataset name may hold; others are refused by the master (a name
     * that needs escaping in the path still gets there to be refused). */
    dt_dataset_spec d = spec_of("Eval.set-1_x", 5, 5, 1, 1);
    DT_CHECK_OK(dt_shard_register(c, &d));
    DT_CHECK_OK(dt_shard_fetch(c, "Eval.set-1_x", &s, &st));
    DT_CHECK(st == DT_SHARD_FETCH_SHARD && s.count == 5 && s.indices[4] == 4);
    DT_CHECK_OK(dt_shard_report(c, "Eval.set-1_x", &s, 1, "ok \"quoted\"\n"));
    dt_shard_free(&s);
    DT_CHECK_OK(dt_shard_fetch(c, "Eval.set-1_x", &s, &st));
    DT_CHECK(st == DT_SHARD_FETCH_END);
    d = spec_of("eval set?x", 5, 5, 1, 1);
    DT_CHECK_ERR(dt_shard_register(c, &d), DT_ERR_ARG, "name: expected letters");
    DT_CHECK_ERR(dt_shard_fetch(c, "eval set?x", &s, &st), DT_ERR_NOTFOUND, "eval set?x");
    /* Bad register values: named by the master. */
    d = spec_of("bad", 10, 0, 1, 1);
    DT_CHECK_ERR(dt_shard_register(c, &d), DT_ERR_ARG, "batch_size");
    DT_CHECK(strstr(dt_errmsg(), "register dataset bad"));
    d = spec_of("bad", 0, 1, 1, 1);
    DT_CHECK_ERR(dt_shard_register(c, &d), DT_ERR_ARG, "dataset_size");
    d = spec_of("bad", 10, 1, 1, 1);
    d.seed = UINT64_MAX;
    DT_CHECK_ERR(dt_shard_register(c, &d), DT_ERR_ARG, "seed");
    d.seed = 0;
    d.max_failures = 5000;
    DT_CHECK_ERR(dt_shard_register(c, &d), DT_ERR_ARG, "max_failures");
    d.name = NULL;
    DT_CHECK_ERR(dt_shard_register(c, &d), DT_ERR_ARG, "name");
    /* An unknown replica, a wrong token. */
    dt_shard_client *c2 = NULL;
    DT_CHECK_ERR(open_as(&c2, j, "worker-9"), DT_ERR_NOTFOUND, "worker-9");
    DT_CHECK(c2 == NULL);
    dt_shard_client_opts o = {.url = j->url, .token = "not-the-token", .replica = "worker-0"};
    DT_CHECK_ERR(dt_shard_client_open(&c2, &o), DT_ERR_ARG, "refused the job token");
}

static void test_errors(void) {
    job j;
    DT_CHECK(job_start(&j, "shards-errors") == 0);
    dt_shard_client *c = NULL;
    dt_err e = open_as(&c, &j, "worker-0");
    if (!e) errors(&j, c);
    dt_shard_client_close(c);
    job_stop(&j);
    DT_CHECK_OK(e);
}

/* worker-1 reports its shard failed a moment later, from another thread (its own client). */
typedef struct late_fail {
    dt_shard_client *c;
    const dt_shard *s;
    dt_err err;
} late_fail;

static void *fail_later(void *arg) {
    late_fail *f = arg;
    nap_ms(300);
    f->err = dt_shard_report(f->c, "waiting", f->s, 0, "out of memory, try elsewhere");
    return NULL;
}

/* The last shard of the last epoch is held by worker-1: worker-0's fetch waits (the master
 * answers WAIT) until worker-1 reports it failed, then gets that shard; after it, END. */
static void waiting(dt_shard_client *c0, dt_shard_client *c1) {
    dt_dataset_spec d = spec_of("waiting", 20, 10, 1, 1); /* two shards */
    DT_CHECK_OK(dt_shard_register(c0, &d));
    DT_CHECK_OK(dt_shard_register(c1, &d));
    dt_shard a = {0}, b = {0};
    dt_shard_fetch_status st;
    DT_CHECK_OK(dt_shard_fetch(c1, "waiting", &a, &st));
    dt_err e = dt_shard_fetch(c0, "waiting", &b, &st);
    if (!e) e = dt_shard_report(c0, "waiting", &b, 1, NULL);
    late_fail f = {.c = c1, .s = &a};
    pthread_t t;
    if (!e && pthread_create(&t, NULL, fail_later, &f) == 0) {
        e = dt_shard_fetch(c0, "waiting", &b, &st);
        pthread_join(t, NULL);
    }
    int same = !e && st == DT_SHARD_FETCH_SHARD && b.id == a.id && b.epoch == a.epoch;
    if (!e && !f.err) e = dt_shard_report(c0, "waiting", &b, 1, NULL);
    dt_shard_free(&a);
    if (!e && !f.err) e = dt_shard_fetch(c0, "waiting", &b, &st);
    dt_shard_free(&b);
    DT_CHECK_OK(e);
    DT_CHECK_OK(f.err);
    DT_CHECK(same);
    DT_CHECK(st == DT_SHARD_FETCH_END);
}

/* With opts.no_wait a fetch that finds nothing yet answers WAIT at once (no polling). */
static void no_wait(const job *j, dt_shard_client *c1) {
    dt_shard_client *c0 = NULL;
    dt_shard_client_opts o = {.url = j->url, .token = j->token, .replica = "worker-0",
                              .no_wait = 1};
    DT_CHECK_OK(dt_shard_client_open(&c0, &o));
    dt_dataset_spec d = spec_of("nowait", 10, 10, 1, 1); /* one shard */
    DT_CHECK_OK(dt_shard_register(c1, &d));
    dt_shard a = {0}, b = {0};
    dt_shard_fetch_status st, st0 = DT_SHARD_FETCH_SHARD;
    dt_err e = dt_shard_fetch(c1, "nowait", &a, &st);
    if (!e) e = dt_shard_fetch(c0, "nowait", &b, &st0);
    int held = st == DT_SHARD_FETCH_SHARD, waited = !e && st0 == DT_SHARD_FETCH_WAIT && !b.count;
    if (!e) e = dt_shard_report(c1, "nowait", &a, 1, NULL);
    if (!e) e = dt_shard_fetch(c0, "nowait", &b, &st0);
    dt_shard_free(&a);
    dt_shard_free(&b);
    dt_shard_client_close(c0);
    DT_CHECK_OK(e);
    DT_CHECK(held && waited);
    DT_CHECK(st0 == DT_SHARD_FETCH_END);
}

static void test_wait(void) {
    job j;
    DT_CHECK(job_start(&j, "shards-wait") == 0);
    dt_shard_client *c0 = NULL, *c1 = NULL;
    dt_err e = open_as(&c0, &j, "worker-0");
    if (!e) e = open_as(&c1, &j, "worker-1");
    if (!e) waiting(c0, c1);
    if (!e) no_wait(&j, c1);
    dt_shard_client_close(c0);
    dt_shard_client_close(c1);
    job_stop(&j);
    DT_CHECK_OK(e);
}

/* The master is killed (SIGKILL) while worker-0 holds a shard and resumed on its port a
 * moment later: the report waits for it and counts; the rest of the dataset follows. */
static void master_restart(job *j, dt_shard_client *c) {
    dt_dataset_spec d = spec_of("restart", 60, 10, 1, 1);
    DT_CHECK_OK(dt_shard_register(c, &d));
    dt_shard s = {0};
    dt_shard_fetch_status st;
    DT_CHECK_OK(dt_shard_fetch(c, "restart", &s, &st));
    DT_CHECK(st == DT_SHARD_FETCH_SHARD);
    DT_CHECK(kill(j->master_pid, SIGKILL) == 0);
    pid_t child = fork();
    DT_CHECK(child >= 0);
    if (child == 0) {
        nap_ms(700);
        char *argv[] = {(char *)dtrain_bin(), "run", "--resume", j->dir, "--detach", NULL};
        _exit(run(argv) == 0 ? 0 : 1);
    }
    dt_err e = dt_shard_report(c, "restart", &s, 1, "");
    int wst;
    waitpid(child, &wst, 0);
    DT_CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    if (e) {
        dt_shard_free(&s);
        DT_FAIL("report across the restart: %s", dt_errmsg());
    }
    DT_CHECK(read_master_json(j) == 0);
    int n = 1;
    while (!(e = dt_shard_fetch(c, "restart", &s, &st)) && st == DT_SHARD_FETCH_SHARD) {
        n++;
        if ((e = dt_shard_report(c, "restart", &s, 1, ""))) break;
    }
    dt_shard_free(&s);
    DT_CHECK_OK(e);
    DT_CHECK(n == 6);
}

static void test_master_restart(void) {
    job j;
    DT_CHECK(job_start(&j, "shards-restart") == 0);
    dt_shard_client *c = NULL;
    dt_shard_client_opts o = {.url = j.url, .token = j.token, .replica = "worker-0",
                              .heartbeat_ms = 50};
    dt_err e = dt_shard_client_open(&c, &o);
    if (!e) master_restart(&j, c);
    dt_shard_client_close(c);
    job_stop(&j);
    DT_CHECK_OK(e);
}

DT_TEST_MAIN(DT_T(test_missing_env), DT_T(test_unreachable), DT_T(test_two_epochs),
             DT_T(test_shuffle), DT_T(test_late_report), DT_T(test_wait), DT_T(test_errors),
             DT_T(test_master_restart))
