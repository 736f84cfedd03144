/* ledger_test.c - the shard ledger: shard sizes, orders, queue, exactly-once, failures,
 * registration, a randomized property test and replay equivalence. */
#include <inttypes.h>

#include "dtrain/data.h"
#include "dtrain/rng.h"
#include "shard/ledger-impl.h"
#include "testing/dt_test.h"

/* ---- helpers ---- */

static void collect(void *ctx, json_t *ev) {
    json_array_append_new((json_t *)ctx, ev);
}

static dt__dataset_conf conf_of(const char *name, int64_t n, int64_t bs, int64_t epochs,
                                int64_t mps, int shuffle, int shuffle_shards, uint64_t seed) {
    dt__dataset_conf c;
    dt__dataset_conf_init(&c);
    snprintf(c.name, sizeof c.name, "%s", name);
    c.dataset_size = n;
    c.batch_size = bs;
    c.num_epochs = epochs;
    c.num_minibatches_per_shard = mps;
    c.shuffle = shuffle;
    c.shuffle_shards = shuffle_shards;
    c.seed = seed;
    return c;
}

/* progress without the (not journaled) late_reports_refused counters */
static json_t *progress_nolate(const dt__ledger *l) {
    json_t *p = dt__ledger_progress(l);
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(p, "datasets"), k, v)
        json_object_del(v, "late_reports_refused");
    return p;
}

static int progress_equal(const dt__ledger *a, const dt__ledger *b) {
    json_t *pa = progress_nolate(a), *pb = progress_nolate(b);
    int eq = json_equal(pa, pb);
    if (!eq) {
        char *sa = json_dumps(pa, JSON_SORT_KEYS), *sb = json_dumps(pb, JSON_SORT_KEYS);
        fprintf(stderr, "progress differs:\n  %s\n  %s\n", sa, sb);
        free(sa);
        free(sb);
    }
    json_decref(pa);
    json_decref(pb);
    return eq;
}

static json_int_t prog_int(const dt__ledger *l, const char *ds, const char *key) {
    json_t *p = dt__ledger_progress(l);
    json_int_t v = json_integer_value(
        json_object_get(json_object_get(json_object_get(p, "datasets"), ds), key));
    json_decref(p);
    return v;
}

static json_int_t prog_nepochs(const dt__ledger *l, const char *ds) {
    json_t *p = dt__ledger_progress(l);
    json_int_t v = (json_int_t)json_array_size(
        json_object_get(json_object_get(json_object_get(p, "datasets"), ds), "epochs"));
    json_decref(p);
    return v;
}

/* ---- shard sizes and orders ---- */

static void test_shard_sizes(void) {
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    dt__dataset_conf c = conf_of("training", 10, 3, 1, 1, 0, 0, 0);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    c = conf_of("evaluation", 10, 2, 1, 2, 0, 0, 0); /* shards of 4: 4, 4, 2 */
    DT_CHECK_OK(dt__ledger_register(l, &c));
    c = conf_of("tiny", 5, 100, 1, 3, 0, 0, 0); /* one shard of 5 */
    DT_CHECK_OK(dt__ledger_register(l, &c));
    DT_CHECK(prog_int(l, "training", "shards_per_epoch") == 4);
    DT_CHECK(prog_int(l, "evaluation", "shards_per_epoch") == 3);
    DT_CHECK(prog_int(l, "tiny", "shards_per_epoch") == 1);
    const int64_t want_tr[] = {3, 3, 3, 1}, want_ev[] = {4, 4, 2};
    dt__fetch_status st;
    dt__shard sh;
    for (int i = 0; i < 4; i++) {
        DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 0, 0, &st, &sh));
        DT_CHECK(st == DT__FETCH_SHARD && sh.id == i && sh.start == 3 * i);
        DT_CHECK(sh.end - sh.start == want_tr[i]);
        DT_CHECK(sh.indices == NULL);
    }
    for (int i = 0; i < 3; i++) {
        DT_CHECK_OK(dt__ledger_fetch(l, "evaluation", "worker-0", 0, 0, &st, &sh));
        DT_CHECK(st == DT__FETCH_SHARD && sh.end - sh.start == want_ev[i]);
    }
    DT_CHECK_OK(dt__ledger_fetch(l, "tiny", "worker-0", 0, 0, &st, &sh));
    DT_CHECK(st == DT__FETCH_SHARD && sh.start == 0 && sh.end == 5);
    dt__ledger_free(l);
}

/* Run a whole dataset with one worker; order[e][pos] = the sample at position pos of epoch
 * e (as handed out), ids[e][k] = the k-th shard id handed out in epoch e. */
static void run_all(dt__ledger *l, const char *name, int64_t n, int64_t epochs, int64_t nshards,
                    int64_t *order, int64_t *ids, int *ok) {
    *ok = 0;
    dt__fetch_status st;
    dt__shard sh;
    int64_t *k = calloc((size_t)epochs, sizeof *k);
    for (;;) {
        if (dt__ledger_fetch(l, name, "worker-0", 0, 0, &st, &sh)) goto out;
        if (st == DT__FETCH_END) break;
        if (st != DT__FETCH_SHARD || sh.epoch >= epochs) goto out;
        if (ids) ids[sh.epoch * nshards + k[sh.epoch]] = sh.id;
        k[sh.epoch]++;
        for (int64_t p = sh.start; p < sh.end; p++)
            order[sh.epoch * n + p] = sh.indices ? sh.indices[p - sh.start] : p;
        if (dt__ledger_report(l, name, "worker-0", sh.epoch, sh.id, sh.lease, 1, "", 0)) goto out;
    }
    *ok = 1;
    for (int64_t e = 0; e < epochs; e++)
        if (k[e] != nshards) *ok = 0;
out:
    free(k);
}

static int is_perm(const int64_t *x, int64_t n) {
    char *seen = calloc((size_t)n, 1);
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        if (x[i] < 0 || x[i] >= n || seen[x[i]])
            ok = 0;
        else
            seen[x[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_no_shuffle_ranges(void) {
    const int64_t n = 103, E = 3, S = 11;
    int64_t order[3 * 103], ids[3 * 11];
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    dt__dataset_conf c = conf_of("training", n, 5, E, 2, 0, 0, 0);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    int ok;
    run_all(l, "training", n, E, S, order, ids, &ok);
    DT_CHECK(ok);
    for (int64_t e = 0; e < E; e++)
        for (int64_t i = 0; i < n; i++)
            DT_CHECK(order[e * n + i] == i);
    for (int64_t e = 0; e < E; e++)
        for (int64_t i = 0; i < S; i++)
            DT_CHECK(ids[e * S + i] == i);
    DT_CHECK(dt__ledger_all_done(l));
    dt__ledger_free(l);
}

static void test_shuffle_permutation(void) {
    const int64_t n = 1000, E = 3, S = 16;
    int64_t *a = malloc(sizeof(int64_t) * n * E), *b = malloc(sizeof(int64_t) * n * E);
    int64_t *c2 = malloc(sizeof(int64_t) * n * E), *want = malloc(sizeof(int64_t) * n);
    int64_t ids[3 * 16];
    dt__ledger *l1, *l2, *l3;
    DT_CHECK_OK(dt__ledger_init(&l1, NULL, NULL));
    DT_CHECK_OK(dt__ledger_init(&l2, NULL, NULL));
    DT_CHECK_OK(dt__ledger_init(&l3, NULL, NULL));
    dt__dataset_conf c = conf_of("training", n, 64, E, 1, 1, 0, 7);
    DT_CHECK_OK(dt__ledger_register(l1, &c));
    DT_CHECK_OK(dt__ledger_register(l2, &c));
    c.seed = 8;
    DT_CHECK_OK(dt__ledger_register(l3, &c));
    int ok1, ok2, ok3;
    run_all(l1, "training", n, E, S, a, ids, &ok1);
    run_all(l2, "training", n, E, S, b, NULL, &ok2);
    run_all(l3, "training", n, E, S, c2, NULL, &ok3);
    DT_CHECK(ok1 && ok2 && ok3);
    for (int64_t e = 0; e < E; e++) {
        DT_CHECK(is_perm(a + e * n, n));
        DT_CHECK(is_perm(c2 + e * n, n));
        /* the single-process trainer's epoch order for the same seed */
        dt_epoch_order(want, n, 7, e, 1);
        DT_CHECK(!memcmp(want, a + e * n, sizeof(int64_t) * n));
        for (int64_t i = 0; i < S; i++) /* without shuffle_shards: ids in order */
            DT_CHECK(ids[e * S + i] == i);
    }
    DT_CHECK(!memcmp(a, b, sizeof(int64_t) * n * E)); /* same seed, same orders */
    DT_CHECK(memcmp(a, c2, sizeof(int64_t) * n));     /* another seed differs */
    DT_CHECK(memcmp(a, a + n, sizeof(int64_t) * n));  /* epochs differ */
    DT_CHECK(memcmp(a + n, a + 2 * n, sizeof(int64_t) * n));
    int identity = 1;
    for (int64_t i = 0; i < n; i++)
        identity &= a[i] == i;
    DT_CHECK(!identity);
    dt__ledger_free(l1);
    dt__ledger_free(l2);
    dt__ledger_free(l3);
    free(a);
    free(b);
    free(c2);
    free(want);
}

static void test_shuffle_shards(void) {
    const int64_t n = 200, E = 2, S = 20;
    int64_t order[2 * 200], ids[2 * 20], ids2[2 * 20];
    dt__ledger *l, *l2;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    DT_CHECK_OK(dt__ledger_init(&l2, NULL, NULL));
    dt__dataset_conf c = conf_of("training", n, 10, E, 1, 0, 1, 42);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    DT_CHECK_OK(dt__ledger_register(l2, &c));
    int ok, ok2;
    run_all(l, "training", n, E, S, order, ids, &ok);
    run_all(l2, "training", n, E, S, order, ids2, &ok2);
    DT_CHECK(ok && ok2);
    for (int64_t e = 0; e < E; e++) {
        DT_CHECK(is_perm(ids + e * S, S));
        int identity = 1;
        for (int64_t i = 0; i < S; i++)
            identity &= ids[e * S + i] == i;
        DT_CHECK(!identity);
        /* the samples stay in their ranges (no sample shuffle) */
        for (int64_t i = 0; i < n; i++)
            DT_CHECK(order[e * n + i] == i);
    }
    DT_CHECK(memcmp(ids, ids + S, sizeof(int64_t) * S));
    DT_CHECK(!memcmp(ids, ids2, sizeof ids));
    dt__ledger_free(l);
    dt__ledger_free(l2);
}

/* ---- queue ---- */

static void test_epochs_wait_end(void) {
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    dt__dataset_conf c = conf_of("training", 4, 2, 3, 1, 0, 0, 0); /* 2 shards, 3 epochs */
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard a, b, x, y, z;
    DT_CHECK(prog_nepochs(l, "training") == 0);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w0", 0, 1, &st, &a));
    DT_CHECK(st == DT__FETCH_SHARD && a.epoch == 0 && a.id == 0 && a.lease == 1);
    DT_CHECK(prog_nepochs(l, "training") == 1);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w1", 0, 1, &st, &b));
    DT_CHECK(st == DT__FETCH_SHARD && b.epoch == 0 && b.id == 1 && b.lease == 2);
    DT_CHECK(prog_nepochs(l, "training") == 1);
    /* epoch 0 has nothing todo: epoch 1 opens while epoch 0 is in flight */
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w2", 0, 1, &st, &x));
    DT_CHECK(st == DT__FETCH_SHARD && x.epoch == 1 && x.id == 0 && x.lease == 3);
    DT_CHECK(prog_nepochs(l, "training") == 2);
    /* a shard of epoch 0 re-queued now is handed out before epoch 1's */
    DT_CHECK(dt__ledger_release(l, "w0", "exited", 2) == 1);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w3", 0, 3, &st, &y));
    DT_CHECK(st == DT__FETCH_SHARD && y.epoch == 0 && y.id == 0 && y.lease == 4);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w3", 0, 3, &st, &z));
    DT_CHECK(st == DT__FETCH_SHARD && z.epoch == 1 && z.id == 1);
    DT_CHECK(prog_nepochs(l, "training") == 2);
    /* epoch 2 opens once nothing is todo */
    dt__shard p, q;
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w4", 0, 3, &st, &p));
    DT_CHECK(st == DT__FETCH_SHARD && p.epoch == 2 && p.id == 0);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w4", 0, 3, &st, &q));
    DT_CHECK(st == DT__FETCH_SHARD && q.epoch == 2 && q.id == 1);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w5", 0, 3, &st, &x));
    DT_CHECK(st == DT__FETCH_WAIT);
    DT_CHECK(!dt__ledger_all_done(l));
    /* report everything (x was overwritten by the WAIT fetch: report the held ones) */
    DT_CHECK_OK(dt__ledger_report(l, "training", "w1", 0, 1, 2, 1, NULL, 4));
    DT_CHECK_OK(dt__ledger_report(l, "training", "w3", 0, 0, 4, 1, NULL, 4));
    DT_CHECK_OK(dt__ledger_report(l, "training", "w2", 1, 0, 3, 1, NULL, 4));
    DT_CHECK_OK(dt__ledger_report(l, "training", "w3", 1, 1, z.lease, 1, NULL, 4));
    DT_CHECK_OK(dt__ledger_report(l, "training", "w4", 2, 0, p.lease, 1, NULL, 4));
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w5", 0, 5, &st, &x));
    DT_CHECK(st == DT__FETCH_WAIT);
    DT_CHECK_OK(dt__ledger_report(l, "training", "w4", 2, 1, q.lease, 1, NULL, 5));
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w5", 0, 6, &st, &x));
    DT_CHECK(st == DT__FETCH_END);
    DT_CHECK(dt__ledger_all_done(l));
    json_t *p1 = dt__ledger_progress(l);
    json_t *d = json_object_get(json_object_get(p1, "datasets"), "training");
    DT_CHECK(!strcmp(json_string_value(json_object_get(d, "state")), "done"));
    json_t *ep = json_array_get(json_object_get(d, "epochs"), 1);
    DT_CHECK(json_integer_value(json_object_get(ep, "shards_done")) == 2);
    DT_CHECK(json_integer_value(json_object_get(ep, "samples_done")) == 4);
    json_t *w3 = json_object_get(json_object_get(d, "replicas"), "w3");
    DT_CHECK(json_integer_value(json_object_get(w3, "shards_done")) == 2);
    DT_CHECK(json_integer_value(json_object_get(w3, "samples_done")) == 4);
    DT_CHECK(json_integer_value(json_object_get(d, "requeued")) == 1);
    json_decref(p1);
    dt__ledger_free(l);
}

static void test_requeue_front(void) {
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    dt__dataset_conf c = conf_of("training", 10, 1, 1, 1, 0, 0, 0);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard s[3], t;
    for (int i = 0; i < 3; i++) {
        DT_CHECK_OK(dt__ledger_fetch(l, "training", "w0", 0, 0, &st, &s[i]));
        DT_CHECK(s[i].id == i);
    }
    DT_CHECK_OK(dt__ledger_report(l, "training", "w0", 0, 1, s[1].lease, 0, "disk error", 1));
    DT_CHECK(prog_int(l, "training", "failures") == 1);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w1", 0, 1, &st, &t));
    DT_CHECK(st == DT__FETCH_SHARD && t.id == 1 && t.lease > s[2].lease);
    DT_CHECK(dt__ledger_release(l, "w0", "exited", 2) == 2); /* holds 0 and 2 */
    DT_CHECK(dt__ledger_release(l, "w0", "exited", 2) == 0);
    DT_CHECK(dt__ledger_release(l, "nobody", "exited", 2) == 0);
    const int64_t want[] = {0, 2, 3, 4};
    for (int i = 0; i < 4; i++) {
        DT_CHECK_OK(dt__ledger_fetch(l, "training", "w1", 0, 3, &st, &t));
        DT_CHECK(st == DT__FETCH_SHARD && t.id == want[i]);
    }
    DT_CHECK(prog_int(l, "training", "requeued") == 3);
    dt__ledger_free(l);
}

/* ---- exactly once ---- */

static void test_late_report_refused(void) {
    json_t *events = json_array();
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, collect, events));
    dt__dataset_conf c = conf_of("training", 100, 10, 2, 1, 1, 0, 3);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard a, b;
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-1", 0, 10, &st, &a));
    DT_CHECK(dt__ledger_release(l, "worker-1", "exited with code 137", 11) == 1);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 0, 12, &st, &b));
    DT_CHECK(b.epoch == a.epoch && b.id == a.id && b.lease > a.lease);
    /* worker-1 reports while worker-0 holds it */
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-1", a.epoch, a.id, a.lease, 1, "", 13),
                 DT_ERR_STATE, "worker-1 does not hold shard 0 of epoch 0 of training");
    DT_CHECK(strstr(dt_errmsg(), "held by worker-0"));
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-0", b.epoch, b.id, b.lease, 1, "", 14));
    size_t nev = json_array_size(events);
    json_t *before = progress_nolate(l);
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-1", a.epoch, a.id, a.lease, 1, "", 15),
                 DT_ERR_STATE, "late report refused");
    DT_CHECK(strstr(dt_errmsg(), "re-queued at 11.000 when worker-1 was released "
                                 "(exited with code 137)"));
    DT_CHECK(strstr(dt_errmsg(), "done by worker-0"));
    /* a failed late report is refused too; the winner's report again (a retry) is answered
     * OK and counts nothing; the winner reporting it failed now is refused */
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-1", a.epoch, a.id, a.lease, 0, "x", 15),
                 DT_ERR_STATE, "done by worker-0");
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-0", b.epoch, b.id, b.lease, 1, "", 15));
    DT_CHECK(json_array_size(events) == nev);
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-0", b.epoch, b.id, b.lease, 0, "x", 15),
                 DT_ERR_STATE, "worker-0 does not hold shard 0");
    /* a wrong lease, an unknown replica, an epoch not begun, ids out of range */
    dt__shard d;
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 0, 16, &st, &d));
    nev = json_array_size(events);
    json_decref(before);
    before = progress_nolate(l);
    DT_CHECK_ERR(
        dt__ledger_report(l, "training", "worker-0", d.epoch, d.id, d.lease + 7, 1, "", 17),
        DT_ERR_STATE, "held by worker-0 under lease");
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-9", d.epoch, d.id, d.lease, 1, "", 17),
                 DT_ERR_STATE, "worker-9 does not hold shard 1 of epoch 0");
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-0", 1, 0, d.lease, 1, "", 17),
                 DT_ERR_STATE, "that epoch has not begun");
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-0", 2, 0, d.lease, 1, "", 17), DT_ERR_ARG,
                 "epoch 2 of training");
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-0", 0, 10, d.lease, 1, "", 17),
                 DT_ERR_ARG, "shard id 10 of training");
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-0", 0, 5, d.lease, 1, "", 17),
                 DT_ERR_STATE, "not handed out yet");
    DT_CHECK(json_array_size(events) == nev); /* refused: no event, no change */
    json_t *after = progress_nolate(l);
    DT_CHECK(json_equal(before, after));
    DT_CHECK(prog_int(l, "training", "late_reports_refused") ==
             8); /* ARG refusals are not late reports */
    json_decref(before);
    json_decref(after);
    dt__ledger_free(l);
    json_decref(events);
}

/* The refusal names the release that re-queued this shard, not the replica's latest one. */
static void test_late_report_names_its_release(void) {
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    dt__dataset_conf c = conf_of("training", 100, 10, 1, 1, 0, 0, 0);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard a, a2, b;
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-1", 0, 10, &st, &a));
    DT_CHECK(dt__ledger_release(l, "worker-1", "exited with code 137", 11) == 1);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 0, 12, &st, &a2));
    DT_CHECK(a2.id == a.id);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-1", 0, 12, &st, &b)); /* restarted */
    dt__ledger_heartbeat(l, "worker-0", 95);
    DT_CHECK(dt__ledger_expire(l, 100, 30) == 1); /* worker-1's b */
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-1", a.epoch, a.id, a.lease, 1, "", 101),
                 DT_ERR_STATE,
                 "re-queued at 11.000 when worker-1 was released (exited with code 137), now "
                 "held by worker-0");
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-1", b.epoch, b.id, b.lease, 1, "", 101),
                 DT_ERR_STATE,
                 "re-queued at 100.000 when worker-1 was released (no heartbeat for 88.0 s");
    dt__ledger_free(l);
}

static void test_done_epoch_report_refused(void) {
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    dt__dataset_conf c = conf_of("training", 2, 1, 2, 1, 0, 0, 0);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard a, b;
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w0", 0, 0, &st, &a));
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w0", 0, 0, &st, &b));
    DT_CHECK_OK(dt__ledger_report(l, "training", "w0", 0, 0, a.lease, 1, "", 1));
    DT_CHECK_OK(dt__ledger_report(l, "training", "w0", 0, 1, b.lease, 1, "", 1));
    DT_CHECK_OK(dt__ledger_report(l, "training", "w0", 0, 1, b.lease, 1, "", 1)); /* a retry */
    DT_CHECK_OK(dt__ledger_report(l, "training", "w0", 0, 0, a.lease, 1, "", 1)); /* a retry */
    DT_CHECK_ERR(dt__ledger_report(l, "training", "w0", 0, 0, b.lease, 1, "", 1), DT_ERR_STATE,
                 "that epoch is done");
    dt__ledger_free(l);
}

static void test_heartbeat_expiry(void) {
    json_t *events = json_array();
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, collect, events));
    dt__dataset_conf c = conf_of("training", 10, 2, 1, 1, 0, 0, 0);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard a, b, a2;
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 0, 0, &st, &a));
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-1", 0, 0, &st, &b));
    dt__ledger_heartbeat(l, "worker-1", 8);
    DT_CHECK(dt__ledger_expire(l, 10, 10) == 0); /* not older than the timeout yet */
    DT_CHECK(dt__ledger_expire(l, 12, 10) == 1);
    json_t *ev = json_array_get(events, json_array_size(events) - 1);
    DT_CHECK(!strcmp(json_string_value(json_object_get(ev, "ev")), "shard.release"));
    DT_CHECK(!strcmp(json_string_value(json_object_get(ev, "replica")), "worker-0"));
    DT_CHECK(strstr(json_string_value(json_object_get(ev, "why")), "no heartbeat for 12.0 s"));
    DT_CHECK(dt__ledger_expire(l, 12, 10) == 0);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-2", 0, 13, &st, &a2));
    DT_CHECK(a2.id == a.id);
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-0", a.epoch, a.id, a.lease, 1, "", 14),
                 DT_ERR_STATE, "no heartbeat");
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-1", b.epoch, b.id, b.lease, 1, "", 14));
    DT_CHECK(prog_int(l, "training", "failures") == 0);
    DT_CHECK(prog_int(l, "training", "requeued") == 1);
    dt__ledger_free(l);
    json_decref(events);
}

/* A shard held past its lease deadline is re-queued although its holder beats (a fetch
 * it lost track of); the late report names why; replay rebuilds the same ledger. */
static void test_lease_deadline(void) {
    json_t *events = json_array();
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, collect, events));
    dt__dataset_conf c = conf_of("training", 10, 2, 1, 1, 0, 0, 0); /* 5 shards */
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard a, b, a2;
    DT_CHECK(dt__ledger_expire_leases(l, 1e9) == 0); /* no deadline set: none */
    dt__ledger_set_leases(l, 5, 0);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 1, 0, &st, &a)); /* forgotten */
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 2, 1, &st, &b));
    DT_CHECK(prog_int(l, "training", "in_flight") == 2);
    dt__ledger_heartbeat(l, "worker-0", 5.5);
    DT_CHECK(dt__ledger_expire(l, 5.5, 30) == 0);   /* alive */
    DT_CHECK(dt__ledger_expire_leases(l, 5) == 0);  /* held 5 s: not past 5 s */
    DT_CHECK(dt__ledger_expire_leases(l, 5.5) == 1); /* a: held 5.5 s */
    json_t *ev = json_array_get(events, json_array_size(events) - 1);
    DT_CHECK(!strcmp(json_string_value(json_object_get(ev, "ev")), "shard.expire"));
    DT_CHECK(json_integer_value(json_object_get(ev, "id")) == a.id);
    DT_CHECK(prog_int(l, "training", "in_flight") == 1);
    DT_CHECK(prog_int(l, "training", "leases_expired") == 1);
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-0", b.epoch, b.id, b.lease, 1, "", 6));
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-1", 3, 6, &st, &a2));
    DT_CHECK(a2.id == a.id && a2.lease != a.lease); /* first in line again, a new lease */
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-0", a.epoch, a.id, a.lease, 1, "", 7),
                 DT_ERR_STATE, "passed its deadline without a report");
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-1", a2.epoch, a2.id, a2.lease, 1, "", 7));
    /* replay: the same ledger, and an expire of a shard not held is malformed */
    dt__ledger *r;
    DT_CHECK_OK(dt__ledger_init(&r, NULL, NULL));
    dt__ledger_set_leases(r, 5, 0); /* a setting of the master, not an event */
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) DT_CHECK_OK(dt__ledger_replay(r, e));
    DT_CHECK(progress_equal(l, r));
    json_t *again = json_deep_copy(json_array_get(events, 3));
    DT_CHECK(!strcmp(json_string_value(json_object_get(again, "ev")), "shard.expire"));
    DT_CHECK_ERR(dt__ledger_replay(r, again), DT_ERR_FORMAT, "is not held by worker-0");
    json_decref(again);
    dt__ledger_free(r);
    /* adaptive: 10 x the mean shard time (1 s here: 10 s), at least the floor */
    dt__ledger_set_leases(l, 0, 2);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-1", 4, 10, &st, &a));
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-1", a.epoch, a.id, a.lease, 1, "", 11));
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-1", 5, 11, &st, &b));
    /* done so far: 5 s (b: 1 -> 6), 1 s (a2: 6 -> 7), 1 s (a: 10 -> 11): 10 x 7/3 s */
    DT_CHECK(dt__ledger_expire_leases(l, 11 + 23) == 0);
    DT_CHECK(dt__ledger_expire_leases(l, 11 + 23.5) == 1);
    dt__ledger_free(l);
    json_decref(events);
}

static void test_max_failures(void) {
    json_t *events = json_array();
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, collect, events));
    dt__dataset_conf c = conf_of("training", 10, 5, 1, 1, 0, 0, 0);
    c.max_failures = 2;
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard s;
    char why[512];
    for (int i = 0; i < 3; i++) {
        DT_CHECK(!dt__ledger_failed(l, why, sizeof why));
        DT_CHECK_OK(dt__ledger_fetch(l, "training", "w0", 0, i, &st, &s));
        DT_CHECK(st == DT__FETCH_SHARD && s.id == 0); /* the failed shard is retried first */
        DT_CHECK_OK(dt__ledger_report(l, "training", "w0", 0, 0, s.lease, 0, "bad record 17", i));
    }
    DT_CHECK(dt__ledger_failed(l, why, sizeof why));
    DT_CHECK(strstr(why, "shard 0 of epoch 0 of dataset training failed 3 times"));
    DT_CHECK(strstr(why, "bad record 17"));
    DT_CHECK_ERR(dt__ledger_fetch(l, "training", "w0", 0, 5, &st, &s), DT_ERR_STATE,
                 "dataset training has failed: shard 0 of epoch 0");
    DT_CHECK(prog_int(l, "training", "failures") == 3);
    json_t *p = dt__ledger_progress(l);
    json_t *d = json_object_get(json_object_get(p, "datasets"), "training");
    DT_CHECK(!strcmp(json_string_value(json_object_get(d, "state")), "failed"));
    DT_CHECK(strstr(json_string_value(json_object_get(d, "reason")), "bad record 17"));
    json_decref(p);
    DT_CHECK(!dt__ledger_all_done(l));
    /* the failure replays */
    dt__ledger *r;
    DT_CHECK_OK(dt__ledger_init(&r, NULL, NULL));
    for (size_t i = 0; i < json_array_size(events); i++)
        DT_CHECK_OK(dt__ledger_replay(r, json_array_get(events, i)));
    DT_CHECK(dt__ledger_failed(r, why, sizeof why));
    DT_CHECK(progress_equal(l, r));
    dt__ledger_free(r);
    dt__ledger_free(l);
    json_decref(events);
}

static void test_event_message_sanitized(void) {
    json_t *events = json_array();
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, collect, events));
    dt__dataset_conf c = conf_of("training", 10, 5, 1, 1, 0, 0, 0);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard s;
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "w0", 0, 0, &st, &s));
    DT_CHECK_OK(dt__ledger_report(l, "training", "w0", 0, 0, s.lease, 0,
                                  "\xff\x01"
                                  "bad\n",
                                  1));
    json_t *ev = json_array_get(events, 2);
    DT_CHECK(!strcmp(json_string_value(json_object_get(ev, "ev")), "shard.report"));
    DT_CHECK(!strcmp(json_string_value(json_object_get(ev, "message")), "? bad "));
    DT_CHECK(json_is_false(json_object_get(ev, "ok")));
    dt__ledger_free(l);
    json_decref(events);
}

/* ---- registration ---- */

static void test_register(void) {
    json_t *events = json_array();
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, collect, events));
    DT_CHECK(!dt__ledger_all_done(l));
    dt__dataset_conf c = conf_of("training", 1000, 32, 2, 1, 1, 1, 99);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    DT_CHECK_OK(dt__ledger_register(l, &c));
    DT_CHECK(json_array_size(events) == 1);
    dt__dataset_conf d = c;
    d.batch_size = 64;
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_STATE,
                 "dataset training is registered with batch_size 32, not 64");
    d = c;
    d.seed = 100;
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_STATE, "seed 99, not 100");
    d = c;
    d.shuffle = 0;
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_STATE, "shuffle 1, not 0");
    DT_CHECK(json_array_size(events) == 1);

    d = conf_of("x", 0, 1, 1, 1, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "dataset_size: expected >= 1, got 0");
    d = conf_of("x", 10, -1, 1, 1, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "batch_size: expected >= 1, got -1");
    d = conf_of("x", 10, 1, 0, 1, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "num_epochs: expected >= 1");
    d = conf_of("x", 10, 1, 1, 0, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "num_minibatches_per_shard: expected");
    d = conf_of("x", 10, 1, 1, 1, 0, 0, 0);
    d.max_failures = -1;
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "max_failures: expected >= 0");
    d = conf_of("", 10, 1, 1, 1, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "name: expected 1 to 63");
    d = conf_of("a b", 10, 1, 1, 1, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "name: expected letters");
    d = conf_of("a/b", 10, 1, 1, 1, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "name: expected letters");
    /* a URL path segment "." or ".." is collapsed by HTTP clients: never reachable */
    d = conf_of("..", 10, 1, 1, 1, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "name: '..' is not a dataset name");
    d = conf_of(".", 10, 1, 1, 1, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "name: '.' is not a dataset name");
    memset(d.name, 'a', sizeof d.name); /* not terminated */
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "name: expected 1 to 63");
    d = conf_of("x", (int64_t)1 << 40, 1, 1, 1, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "num_minibatches_per_shard: batch_size 1");
    d = conf_of("x", (int64_t)1 << 40, (int64_t)1 << 30, 1, 1, 1, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &d), DT_ERR_ARG, "dataset_size: 1099511627776 is more");
    /* huge products do not overflow: one shard */
    d = conf_of("big", 10, INT64_MAX / 2, 1, 4, 0, 0, 0);
    DT_CHECK_OK(dt__ledger_register(l, &d));
    DT_CHECK(prog_int(l, "big", "shards_per_epoch") == 1);
    DT_CHECK_ERR(dt__ledger_register(l, NULL), DT_ERR_ARG, "conf");
    DT_CHECK(json_array_size(events) == 2);
    dt__ledger_free(l);
    json_decref(events);
}

/* Per-replica counters sum samples over every epoch: dataset_size * num_epochs must fit in
 * an int64 (the HTTP route lets dataset_size reach INT64_MAX / 2). */
static void test_huge_counts(void) {
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    dt__dataset_conf c =
        conf_of("big", (int64_t)1 << 62, (int64_t)1 << 31, 2, (int64_t)1 << 31, 0, 0, 0);
    DT_CHECK_ERR(dt__ledger_register(l, &c), DT_ERR_ARG, "dataset big: num_epochs: 2 epochs of");
    c = conf_of("big", INT64_MAX / 2, INT32_MAX, 3, INT32_MAX, 0, 0, 0); /* the API's limits */
    DT_CHECK_ERR(dt__ledger_register(l, &c), DT_ERR_ARG, "num_epochs");
    c = conf_of("big", (int64_t)1 << 61, (int64_t)1 << 31, 3, (int64_t)1 << 31, 0, 0, 0);
    DT_CHECK_OK(dt__ledger_register(l, &c)); /* 3 * 2^61 fits */
    dt__fetch_status st;
    dt__shard s;
    int n = 0;
    for (;;) {
        DT_CHECK_OK(dt__ledger_fetch(l, "big", "w0", 0, 0, &st, &s));
        if (st != DT__FETCH_SHARD) break;
        DT_CHECK_OK(dt__ledger_report(l, "big", "w0", s.epoch, s.id, s.lease, 1, "", 0));
        n++;
    }
    DT_CHECK(st == DT__FETCH_END && n == 3);
    json_t *p = dt__ledger_progress(l);
    json_t *w0 = json_object_get(
        json_object_get(json_object_get(json_object_get(p, "datasets"), "big"), "replicas"), "w0");
    DT_CHECK(json_integer_value(json_object_get(w0, "samples_done")) == 3 * ((int64_t)1 << 61));
    json_decref(p);
    dt__ledger_free(l);
}

static void test_unknown_dataset(void) {
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    dt__fetch_status st;
    dt__shard s;
    DT_CHECK_ERR(dt__ledger_fetch(l, "training", "w0", 0, 0, &st, &s), DT_ERR_NOTFOUND,
                 "dataset training is not registered");
    DT_CHECK_ERR(dt__ledger_report(l, "eval", "w0", 0, 0, 1, 1, "", 0), DT_ERR_NOTFOUND,
                 "dataset eval is not registered");
    dt__dataset_conf c = conf_of("training", 10, 2, 1, 1, 0, 0, 0);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    DT_CHECK_ERR(dt__ledger_fetch(l, "training", "", 0, 0, &st, &s), DT_ERR_ARG, "replica");
    DT_CHECK_ERR(dt__ledger_fetch(l, "training", "w 0", 0, 0, &st, &s), DT_ERR_ARG, "replica");
    DT_CHECK_ERR(dt__ledger_fetch(l, "training", NULL, 0, 0, &st, &s), DT_ERR_ARG, "replica");
    DT_CHECK_ERR(dt__ledger_fetch(l, "training", "w0", 0, NAN, &st, &s), DT_ERR_ARG, "now");
    DT_CHECK_ERR(dt__ledger_report(l, "training", "w0", 0, 0, 1, 1, "", INFINITY), DT_ERR_ARG,
                 "now");
    dt__ledger_free(l);
    dt__ledger_free(NULL);
}

/* ---- randomized property test ---- */

#define SIM_W 5
#define SIM_HOLD 3

typedef struct sim_held {
    dt__shard s;
    int64_t *idx; /* the worker's copy of the indices */
} sim_held;

typedef struct sim_worker {
    char name[16];
    sim_held held[SIM_HOLD];
    int nheld;
    int stalled;
    double last_seen;
} sim_worker;

typedef struct sim {
    int64_t n, E, S, bs, mps;
    int32_t *count;    /* [E * n] times each sample was done */
    int32_t *sdone;    /* [E * S] times each shard was done */
    sim_held *zombies; /* shards of released workers: their reports must be refused */
    int nzombies, capz;
    int refused, accepted, failed, released;
} sim;

static void held_drop(sim *m, sim_held *h, int zombie) {
    if (zombie && m->nzombies < m->capz)
        m->zombies[m->nzombies++] = *h;
    else
        free(h->idx);
}

/* Run a random scenario on l (dataset "training" registered by it); checks invariants
 * on the way; *ok = 0 on a violated one. */
static void run_scenario(dt__ledger *l, uint64_t seed, int shuffle, int shuffle_shards,
                         int steps_max, int finish, int *ok) {
    *ok = 0;
    sim m = {.n = 997, .E = 4, .bs = 7, .mps = 2};
    m.S = (m.n + m.bs * m.mps - 1) / (m.bs * m.mps);
    m.count = calloc((size_t)(m.E * m.n), sizeof *m.count);
    m.sdone = calloc((size_t)(m.E * m.S), sizeof *m.sdone);
    m.capz = 4096;
    m.zombies = calloc((size_t)m.capz, sizeof *m.zombies);
    sim_worker w[SIM_W];
    memset(w, 0, sizeof w);
    for (int i = 0; i < SIM_W; i++)
        snprintf(w[i].name, sizeof w[i].name, "worker-%d", i);
    dt__dataset_conf c =
        conf_of("training", m.n, m.bs, m.E, m.mps, shuffle, shuffle_shards, seed * 31 + 5);
    c.max_failures = 1000;
    dt_rng r;
    dt_rng_seed2(&r, seed, 1234);
    double now = 0, timeout = 5;
    int ended = 0, bad = 0;
    if (dt__ledger_register(l, &c)) goto out;
    for (int step = 0; step < steps_max && !bad; step++) {
        now += 1;
        for (int i = 0; i < SIM_W; i++)
            if (!w[i].stalled) {
                dt__ledger_heartbeat(l, w[i].name, now);
                w[i].last_seen = now;
            }
        int i = (int)dt_rng_below(&r, SIM_W);
        sim_worker *wk = &w[i];
        uint64_t act = dt_rng_below(&r, 100);
        if (wk->stalled) {
            /* stalled: no calls at all until expired */
        } else if (act < 45 && wk->nheld < SIM_HOLD) {
            dt__fetch_status st;
            sim_held h;
            if (dt__ledger_fetch(l, "training", wk->name, 0, now, &st, &h.s)) {
                bad = 1;
                break;
            }
            if (st == DT__FETCH_END) {
                ended = 1;
                if (finish) break;
                continue;
            }
            if (st == DT__FETCH_WAIT) continue;
            int64_t len = h.s.end - h.s.start;
            h.idx = malloc((size_t)len * sizeof *h.idx);
            for (int64_t k = 0; k < len; k++)
                h.idx[k] = h.s.indices ? h.s.indices[k] : h.s.start + k;
            wk->held[wk->nheld++] = h;
        } else if (act < 85 && wk->nheld > 0) {
            int k = (int)dt_rng_below(&r, (uint64_t)wk->nheld);
            sim_held h = wk->held[k];
            wk->held[k] = wk->held[--wk->nheld];
            int good = dt_rng_below(&r, 10) != 0;
            dt_err err = dt__ledger_report(l, "training", wk->name, h.s.epoch, h.s.id, h.s.lease,
                                           good, good ? "" : "simulated failure", now);
            if (err) {
                fprintf(stderr, "report refused: %s\n", dt_errmsg());
                bad = 1;
            } else if (good) {
                m.sdone[h.s.epoch * m.S + h.s.id]++;
                for (int64_t q = 0; q < h.s.end - h.s.start; q++)
                    m.count[h.s.epoch * m.n + h.idx[q]]++;
                m.accepted++;
            } else {
                m.failed++;
            }
            held_drop(&m, &h, 0);
        } else if (act < 88) { /* the worker dies (and comes back under the same name) */
            int got = dt__ledger_release(l, wk->name, "exited with code 137", now);
            if (got != wk->nheld) bad = 1;
            while (wk->nheld > 0)
                held_drop(&m, &wk->held[--wk->nheld], 1);
            m.released++;
        } else if (act < 90) {
            wk->stalled = 1;
        } else if (act < 95 && m.nzombies > 0) { /* a late report: refused, changes nothing */
            int k = (int)dt_rng_below(&r, (uint64_t)m.nzombies);
            sim_held h = m.zombies[k];
            m.zombies[k] = m.zombies[--m.nzombies];
            json_t *before = progress_nolate(l);
            dt_err err = dt__ledger_report(l, "training", wk->name, h.s.epoch, h.s.id, h.s.lease, 1,
                                           "", now);
            json_t *after = progress_nolate(l);
            if (err != DT_ERR_STATE || !strstr(dt_errmsg(), "late report refused") ||
                !json_equal(before, after))
                bad = 1;
            json_decref(before);
            json_decref(after);
            free(h.idx);
            m.refused++;
        }
        if (step % 3 == 0) {
            int want = 0;
            for (int k = 0; k < SIM_W; k++)
                if (w[k].nheld > 0 && now - w[k].last_seen > timeout) want += w[k].nheld;
            int got = dt__ledger_expire(l, now, timeout);
            if (got != want) {
                fprintf(stderr, "expire: %d shards, want %d\n", got, want);
                bad = 1;
            }
            for (int k = 0; k < SIM_W; k++)
                if (now - w[k].last_seen > timeout) {
                    while (w[k].nheld > 0)
                        held_drop(&m, &w[k].held[--w[k].nheld], 1);
                    w[k].stalled = 0;
                }
        }
    }
    if (bad) goto out;
    if (finish) {
        if (!ended || !dt__ledger_all_done(l)) {
            fprintf(stderr, "scenario did not finish\n");
            goto out;
        }
        for (int64_t q = 0; q < m.E * m.S; q++)
            if (m.sdone[q] != 1) goto out;
        for (int64_t q = 0; q < m.E * m.n; q++)
            if (m.count[q] != 1) goto out;
        if (m.refused == 0 || m.failed == 0 || m.released == 0) {
            fprintf(stderr, "scenario too tame: %d refused, %d failed, %d released\n", m.refused,
                    m.failed, m.released);
            goto out;
        }
        if (prog_int(l, "training", "failures") != m.failed) goto out;
    }
    *ok = 1;
out:
    for (int i = 0; i < SIM_W; i++)
        while (w[i].nheld > 0)
            free(w[i].held[--w[i].nheld].idx);
    for (int i = 0; i < m.nzombies; i++)
        free(m.zombies[i].idx);
    free(m.zombies);
    free(m.count);
    free(m.sdone);
}

static void test_random_property(void) {
    for (uint64_t seed = 1; seed <= 6; seed++) {
        dt__ledger *l;
        DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
        int ok;
        run_scenario(l, seed, (int)(seed % 2), (int)(seed / 2 % 2), 200000, 1, &ok);
        if (!ok) fprintf(stderr, "seed %" PRIu64 " failed\n", seed);
        dt__ledger_free(l);
        DT_CHECK(ok);
    }
}

/* ---- replay ---- */

static void test_replay_equivalence(void) {
    for (uint64_t seed = 11; seed <= 14; seed++) {
        json_t *events = json_array();
        dt__ledger *l, *r;
        DT_CHECK_OK(dt__ledger_init(&l, collect, events));
        int ok;
        /* stop midway: epochs open, shards in flight, re-queued ones waiting */
        run_scenario(l, seed, (int)(seed % 2), (int)(seed / 2 % 2), 700, 0, &ok);
        DT_CHECK(ok);
        DT_CHECK(!dt__ledger_all_done(l));
        DT_CHECK(prog_nepochs(l, "training") >= 2);
        DT_CHECK(json_array_size(events) > 100);
        /* through the journal's text form, as a resumed master reads it */
        DT_CHECK_OK(dt__ledger_init(&r, NULL, NULL));
        for (size_t i = 0; i < json_array_size(events); i++) {
            char *line = json_dumps(json_array_get(events, i), JSON_COMPACT);
            json_t *ev = json_loads(line, 0, NULL);
            free(line);
            DT_CHECK(ev != NULL);
            DT_CHECK_OK(dt__ledger_replay(r, ev));
            json_decref(ev);
        }
        DT_CHECK(progress_equal(l, r));
        /* shards in flight stay with their holders: releasing one re-queues the same */
        int held = dt__ledger_release(l, "worker-3", "gone", 4000);
        DT_CHECK(held == dt__ledger_release(r, "worker-3", "gone", 4000));
        DT_CHECK(progress_equal(l, r));
        /* the next fetches (and reports) of both agree */
        for (int k = 0; k < 40; k++) {
            char name[16];
            snprintf(name, sizeof name, "worker-%d", k % 7);
            dt__fetch_status s1, s2;
            dt__shard a, b;
            DT_CHECK_OK(dt__ledger_fetch(l, "training", name, 0, 5000 + k, &s1, &a));
            DT_CHECK_OK(dt__ledger_fetch(r, "training", name, 0, 5000 + k, &s2, &b));
            DT_CHECK(s1 == s2);
            if (s1 != DT__FETCH_SHARD) continue;
            DT_CHECK(a.epoch == b.epoch && a.id == b.id && a.lease == b.lease &&
                     a.start == b.start && a.end == b.end);
            DT_CHECK((a.indices == NULL) == (b.indices == NULL));
            if (a.indices)
                DT_CHECK(
                    !memcmp(a.indices, b.indices, sizeof(int64_t) * (size_t)(a.end - a.start)));
            if (k % 3 == 0) {
                DT_CHECK_OK(
                    dt__ledger_report(l, "training", name, a.epoch, a.id, a.lease, 1, "", 6000));
                DT_CHECK_OK(
                    dt__ledger_report(r, "training", name, b.epoch, b.id, b.lease, 1, "", 6000));
            }
        }
        DT_CHECK(progress_equal(l, r));
        dt__ledger_free(l);
        dt__ledger_free(r);
        json_decref(events);
    }
}

/* A master killed between any two journal writes: replaying the first k events rebuilds
 * the ledger as it was when the k-th was written (progress, and what a release re-queues). */
typedef struct snap_ctx {
    json_t *events, *progress; /* progress[k]: the live ledger's right after event k */
    dt__ledger *l;
} snap_ctx;

static void collect_snap(void *ctx, json_t *ev) {
    snap_ctx *c = ctx;
    json_array_append_new(c->events, ev);
    json_array_append_new(c->progress, progress_nolate(c->l));
}

static void test_replay_every_prefix(void) {
    for (uint64_t seed = 21; seed <= 22; seed++) {
        snap_ctx c = {.events = json_array(), .progress = json_array()};
        DT_CHECK_OK(dt__ledger_init(&c.l, collect_snap, &c));
        int ok;
        run_scenario(c.l, seed, (int)(seed % 2), 1, 400, 0, &ok);
        DT_CHECK(ok);
        size_t n = json_array_size(c.events);
        DT_CHECK(n > 50);
        dt__ledger *r;
        DT_CHECK_OK(dt__ledger_init(&r, NULL, NULL));
        int bad = 0;
        for (size_t k = 0; k < n && !bad; k++) {
            char *line = json_dumps(json_array_get(c.events, k), JSON_COMPACT);
            json_t *ev = json_loads(line, 0, NULL);
            free(line);
            if (dt__ledger_replay(r, ev)) bad = 1;
            json_decref(ev);
            json_t *p = progress_nolate(r);
            if (!json_equal(p, json_array_get(c.progress, k))) {
                fprintf(stderr, "replayed prefix of %zu events differs\n", k + 1);
                bad = 1;
            }
            json_decref(p);
        }
        DT_CHECK(!bad);
        dt__ledger_free(r);
        dt__ledger_free(c.l);
        json_decref(c.events);
        json_decref(c.progress);
    }
}

/* A replica re-fetches the shard it lost (released, then handed back to it): its report
 * under the old lease is refused, under the new one counted once, and both replay. */
static void test_stale_lease_same_replica(void) {
    json_t *events = json_array();
    dt__ledger *l, *r;
    DT_CHECK_OK(dt__ledger_init(&l, collect, events));
    dt__dataset_conf c = conf_of("training", 20, 10, 2, 1, 1, 0, 4);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard a, a2, b;
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 0, 1, &st, &a));
    DT_CHECK(dt__ledger_expire(l, 40, 30) == 1);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 0, 41, &st, &a2));
    DT_CHECK(a2.epoch == a.epoch && a2.id == a.id && a2.lease != a.lease);
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-0", a.epoch, a.id, a.lease, 1, "", 42),
                 DT_ERR_STATE, "now held by worker-0 under lease");
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-0", a2.epoch, a2.id, a2.lease, 1, "", 43));
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-0", a.epoch, a.id, a.lease, 1, "", 44),
                 DT_ERR_STATE, "now done by worker-0");
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-0", a2.epoch, a2.id, a2.lease, 1, "", 44));
    /* the epoch's other shard: done, the epoch closes; a report into it is refused */
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-1", 0, 45, &st, &b));
    DT_CHECK(b.epoch == 0 && b.id == 1);
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-1", b.epoch, b.id, b.lease, 1, "", 46));
    DT_CHECK_ERR(dt__ledger_report(l, "training", "worker-0", a.epoch, a.id, a.lease, 1, "", 47),
                 DT_ERR_STATE, "that epoch is done");
    json_t *p = dt__ledger_progress(l);
    json_t *ep0 = json_array_get(
        json_object_get(json_object_get(json_object_get(p, "datasets"), "training"), "epochs"), 0);
    DT_CHECK(json_integer_value(json_object_get(ep0, "shards_done")) == 2);
    DT_CHECK(json_integer_value(json_object_get(ep0, "samples_done")) == 20);
    json_decref(p);
    DT_CHECK_OK(dt__ledger_init(&r, NULL, NULL));
    for (size_t i = 0; i < json_array_size(events); i++)
        DT_CHECK_OK(dt__ledger_replay(r, json_array_get(events, i)));
    DT_CHECK(progress_equal(l, r));
    dt__ledger_free(r);
    dt__ledger_free(l);
    json_decref(events);
}

/* A client retries a request whose answer it lost (the master died after journaling it):
 * a fetch with the same request id gets the same shard, the same report is answered OK,
 * neither changes the ledger, and both hold across a replay. */
static void test_retries(void) {
    json_t *events = json_array();
    dt__ledger *l, *r;
    DT_CHECK_OK(dt__ledger_init(&l, collect, events));
    dt__dataset_conf c = conf_of("training", 40, 10, 1, 1, 1, 0, 9);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard a, again, b;
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 77, 1, &st, &a));
    size_t nev = json_array_size(events);
    json_t *before = dt__ledger_progress(l);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 77, 2, &st, &again));
    DT_CHECK(st == DT__FETCH_SHARD && again.epoch == a.epoch && again.id == a.id &&
             again.lease == a.lease && again.indices && again.indices[0] == a.indices[0]);
    DT_CHECK(json_array_size(events) == nev);
    json_t *after = dt__ledger_progress(l);
    DT_CHECK(json_equal(before, after));
    json_decref(after);
    /* another replica's fetch with the same id is its own */
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-1", 77, 3, &st, &b));
    DT_CHECK(b.id != a.id);
    /* a new id: a new shard */
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 78, 4, &st, &b));
    DT_CHECK(b.id != a.id);
    /* after a replay, the retries are recognized too */
    DT_CHECK_OK(dt__ledger_init(&r, NULL, NULL));
    for (size_t i = 0; i < json_array_size(events); i++)
        DT_CHECK_OK(dt__ledger_replay(r, json_array_get(events, i)));
    DT_CHECK_OK(dt__ledger_fetch(r, "training", "worker-0", 78, 5, &st, &again));
    DT_CHECK(again.id == b.id && again.lease == b.lease);
    DT_CHECK_OK(dt__ledger_report(r, "training", "worker-0", b.epoch, b.id, b.lease, 1, "", 6));
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-0", b.epoch, b.id, b.lease, 1, "", 6));
    nev = json_array_size(events);
    json_decref(before);
    before = dt__ledger_progress(l);
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-0", b.epoch, b.id, b.lease, 1, "", 7));
    DT_CHECK(json_array_size(events) == nev);
    after = dt__ledger_progress(l);
    DT_CHECK(json_equal(before, after));
    json_decref(after);
    /* once the shard is released, the old request id gets a new shard */
    DT_CHECK(dt__ledger_release(l, "worker-0", "exited with code 137", 8) == 1);
    DT_CHECK_OK(dt__ledger_fetch(l, "training", "worker-0", 77, 9, &st, &again));
    DT_CHECK(again.lease != a.lease);
    json_decref(before);
    dt__ledger_free(r);
    dt__ledger_free(l);
    json_decref(events);
}

/* A fetch of several shards: each taken as a single fetch would take it, a retry gets the
 * same ones (those still held), a batch of reports is counted once when retried, and replay
 * (where the later shards carry "part") rebuilds the same ledger. */
static void test_batches(void) {
    json_t *events = json_array();
    dt__ledger *l, *r;
    DT_CHECK_OK(dt__ledger_init(&l, collect, events));
    dt__dataset_conf c = conf_of("training", 100, 10, 2, 1, 1, 1, 5); /* 10 shards x 2 epochs */
    DT_CHECK_OK(dt__ledger_register(l, &c));
    dt__fetch_status st;
    dt__shard b[DT__LEDGER_MAX_BATCH], again[DT__LEDGER_MAX_BATCH], ra[DT__LEDGER_MAX_BATCH];
    int n = 0, m = 0;
    DT_CHECK_ERR(dt__ledger_fetch_many(l, "training", "worker-0", 1, 0, 0, &st, b, &n),
                 DT_ERR_ARG, "count: expected 1..64");
    DT_CHECK_ERR(dt__ledger_fetch_many(l, "training", "worker-0", 1, 0, 65, &st, b, &n),
                 DT_ERR_ARG, "count: expected 1..64");
    DT_CHECK_OK(dt__ledger_fetch_many(l, "training", "worker-0", 1, 1, 4, &st, b, &n));
    DT_CHECK(st == DT__FETCH_SHARD && n == 4);
    for (int i = 0; i < n; i++)
        DT_CHECK(b[i].epoch == 0 && b[i].indices && b[i].end - b[i].start == 10);
    DT_CHECK(json_array_size(events) == 2 + 3); /* register, 4 fetches */
    DT_CHECK(!json_object_get(json_array_get(events, 1), "part"));
    DT_CHECK(json_integer_value(json_object_get(json_array_get(events, 4), "part")) == 3);
    /* the retry: the same four, nothing journaled */
    DT_CHECK_OK(dt__ledger_fetch_many(l, "training", "worker-0", 1, 2, 4, &st, again, &m));
    DT_CHECK(m == 4 && json_array_size(events) == 5);
    for (int i = 0; i < m; i++) DT_CHECK(again[i].id == b[i].id && again[i].lease == b[i].lease);
    /* one of them reported: the retry gets the three still held */
    DT_CHECK_OK(dt__ledger_report(l, "training", "worker-0", b[1].epoch, b[1].id, b[1].lease, 1,
                                  "", 3));
    DT_CHECK_OK(dt__ledger_fetch_many(l, "training", "worker-0", 1, 3, 4, &st, again, &m));
    DT_CHECK(m == 3 && again[0].id == b[0].id && again[1].id == b[2].id);
    /* the rest of epoch 0 (six todo) and all of epoch 1, which opens once epoch 0 has no
     * todo shard, in one batch; then nothing is left to hand out */
    DT_CHECK_OK(dt__ledger_fetch_many(l, "training", "worker-1", 9, 4, 64, &st, again, &m));
    DT_CHECK(m == 16 && again[5].epoch == 0 && again[6].epoch == 1);
    DT_CHECK_OK(dt__ledger_fetch_many(l, "training", "worker-2", 1, 5, 8, &st, ra, &n));
    DT_CHECK(st == DT__FETCH_WAIT && n == 0);
    /* reports of a batch, then the same reports again (a lost answer): counted once */
    for (int i = 0; i < 4; i++)
        if (i != 1)
            DT_CHECK_OK(dt__ledger_report(l, "training", "worker-0", b[i].epoch, b[i].id,
                                          b[i].lease, 1, "", 6));
    size_t nev = json_array_size(events);
    json_t *before = dt__ledger_progress(l);
    for (int i = 0; i < 4; i++)
        DT_CHECK_OK(dt__ledger_report(l, "training", "worker-0", b[i].epoch, b[i].id, b[i].lease,
                                      1, "", 7));
    DT_CHECK(json_array_size(events) == nev);
    json_t *after = dt__ledger_progress(l);
    DT_CHECK(json_equal(before, after));
    json_decref(before);
    json_decref(after);
    /* replay rebuilds it, the batch retry included */
    DT_CHECK_OK(dt__ledger_init(&r, NULL, NULL));
    for (size_t i = 0; i < json_array_size(events); i++)
        DT_CHECK_OK(dt__ledger_replay(r, json_array_get(events, i)));
    DT_CHECK(progress_equal(l, r));
    dt__shard la[DT__LEDGER_MAX_BATCH];
    int rn = 0, ln = 0;
    DT_CHECK_OK(dt__ledger_fetch_many(r, "training", "worker-1", 9, 8, 64, &st, ra, &rn));
    DT_CHECK_OK(dt__ledger_fetch_many(l, "training", "worker-1", 9, 8, 64, &st, la, &ln));
    DT_CHECK(rn == 16 && ln == 16);
    for (int i = 0; i < rn; i++) DT_CHECK(ra[i].id == la[i].id && ra[i].lease == la[i].lease);
    /* a "part" that does not follow its request's last part is a malformed journal */
    json_t *bad = json_deep_copy(json_array_get(events, 3));
    json_object_set_new(bad, "part", json_integer(7));
    DT_CHECK_ERR(dt__ledger_replay(r, bad), DT_ERR_FORMAT, "part 7 of fetch request 1");
    json_decref(bad);
    dt__ledger_free(r);
    dt__ledger_free(l);
    json_decref(events);
}

static void test_replay_malformed(void) {
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    json_t *ev = json_pack("{s:s}", "ev", "launch"); /* not the ledger's: ignored */
    DT_CHECK_OK(dt__ledger_replay(l, ev));
    json_decref(ev);
    ev = json_pack("[]");
    DT_CHECK_ERR(dt__ledger_replay(l, ev), DT_ERR_FORMAT, "expected a JSON object");
    json_decref(ev);
    ev = json_pack("{s:i}", "ev", 3);
    DT_CHECK_ERR(dt__ledger_replay(l, ev), DT_ERR_FORMAT, "field ev");
    json_decref(ev);
    ev =
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:b, s:s, s:i}", "ev", "shard.register",
                  "dataset", "training", "dataset_size", (json_int_t)10, "batch_size",
                  (json_int_t)0, "num_epochs", (json_int_t)1, "num_minibatches_per_shard",
                  (json_int_t)1, "shuffle", 0, "shuffle_shards", 0, "seed", "5", "max_failures", 3);
    DT_CHECK_ERR(dt__ledger_replay(l, ev), DT_ERR_FORMAT,
                 "ledger event shard.register: field batch_size: expected an integer >= 1");
    json_object_set_new(ev, "batch_size", json_integer(2));
    json_object_set_new(ev, "seed", json_string("-5"));
    DT_CHECK_ERR(dt__ledger_replay(l, ev), DT_ERR_FORMAT, "field seed");
    json_object_set_new(ev, "seed", json_string("18446744073709551615"));
    DT_CHECK_OK(dt__ledger_replay(l, ev));
    json_decref(ev);
    ev = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "ev", "shard.fetch", "dataset", "training",
                   "replica", "w0", "epoch", (json_int_t)0, "id", (json_int_t)0, "lease",
                   (json_int_t)1);
    DT_CHECK_ERR(dt__ledger_replay(l, ev), DT_ERR_FORMAT, "shard.fetch: field time");
    json_object_set_new(ev, "id", json_integer(3)); /* the ledger would hand out shard 0 */
    json_object_set_new(ev, "time", json_real(1.5));
    DT_CHECK_ERR(dt__ledger_replay(l, ev), DT_ERR_FORMAT, "replayed ledger hands out");
    json_decref(ev);
    ev = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:f}", "ev", "shard.report", "dataset",
                   "training", "replica", "w0", "epoch", (json_int_t)0, "id", (json_int_t)4,
                   "lease", (json_int_t)9, "ok", 1, "time", 2.0);
    DT_CHECK_ERR(dt__ledger_replay(l, ev), DT_ERR_FORMAT,
                 "ledger event shard.report: w0 does "
                 "not hold shard 4");
    json_object_set_new(ev, "ok", json_integer(1));
    DT_CHECK_ERR(dt__ledger_replay(l, ev), DT_ERR_FORMAT, "field ok");
    json_decref(ev);
    ev = json_pack("{s:s, s:s}", "ev", "shard.release", "why", "x");
    DT_CHECK_ERR(dt__ledger_replay(l, ev), DT_ERR_FORMAT, "shard.release: field replica");
    json_decref(ev);
    dt__ledger_free(l);
}

/* ---- size ---- */

static void test_ten_million(void) {
    const int64_t n = 10000000;
    dt__ledger *l;
    DT_CHECK_OK(dt__ledger_init(&l, NULL, NULL));
    dt__dataset_conf c = conf_of("training", n, 512, 2, 8, 1, 1, 2024);
    DT_CHECK_OK(dt__ledger_register(l, &c));
    char *seen = calloc((size_t)n, 1);
    dt__fetch_status st;
    dt__shard s;
    int64_t nshards = 0, bad = 0;
    for (;;) {
        DT_CHECK_OK(dt__ledger_fetch(l, "training", "w0", 0, 0, &st, &s));
        if (st != DT__FETCH_SHARD || s.epoch != 0) break;
        for (int64_t k = 0; k < s.end - s.start; k++)
            bad += seen[s.indices[k]]++ != 0;
        nshards++;
        DT_CHECK_OK(dt__ledger_report(l, "training", "w0", 0, s.id, s.lease, 1, "", 0));
    }
    DT_CHECK(st == DT__FETCH_SHARD && s.epoch == 1); /* epoch 1 opened after epoch 0 */
    DT_CHECK(nshards == (n + 4095) / 4096 && bad == 0);
    free(seen);
    dt__ledger_free(l);
}

DT_TEST_MAIN(DT_T(test_shard_sizes), DT_T(test_no_shuffle_ranges), DT_T(test_shuffle_permutation),
             DT_T(test_shuffle_shards), DT_T(test_epochs_wait_end), DT_T(test_requeue_front),
             DT_T(test_late_report_refused), DT_T(test_late_report_names_its_release),
             DT_T(test_done_epoch_report_refused), DT_T(test_heartbeat_expiry), DT_T(test_lease_deadline),
             DT_T(test_max_failures), DT_T(test_event_message_sanitized), DT_T(test_register),
             DT_T(test_huge_counts), DT_T(test_unknown_dataset), DT_T(test_random_property),
             DT_T(test_replay_equivalence), DT_T(test_replay_every_prefix),
             DT_T(test_stale_lease_same_replica), DT_T(test_retries), DT_T(test_batches), DT_T(test_replay_malformed),
             DT_T(test_ten_million))
