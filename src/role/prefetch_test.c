/*
 * prefetch_test.c - a trainer's shard prefetcher (role/prefetch.c) against a real master
 * (testing/master_fixture.h), this process acting as worker-0.
 *
 * Covered: the finished shard handed over at a take is reported in the same request as the
 * fetch of the shard after the one taken, which the next take then gets without an ask; not
 * in the dataset's last epoch (there every shard is asked for) nor when the trainer says not
 * to (a stop); every shard of every epoch is handed out once and all are reported at the
 * end; a report refused (a wrong lease) drops the shard with a log line and fetches nothing.
 */
#include "role/prefetch-impl.h"

#include <stdio.h>
#include <string.h>

#include "testing/dt_test.h"
#include "testing/master_fixture.h"

/* A take of the prefetcher's answer, asking first when `ask`: got (0 or 1), -1 when the take
 * failed (the test is then failed). */
static int take(dt__prefetch *p, dt_shard *sh, int finished, int ahead, int ask) {
    if (ask) dt__prefetch_ask(p);
    int got = 0;
    dt_err e = dt__prefetch_take(p, sh, finished, ahead, &got);
    if (e) {
        fprintf(stderr, "%s:%d: dt__prefetch_take -> %s: %s\n", __FILE__, __LINE__,
                dt_strerror(e), dt_errmsg());
        dt__test_failed = 1;
        return -1;
    }
    return got;
}

/* 4 shards an epoch, 2 epochs: the first shard is asked for; from the second take on, each
 * report brings the shard after the one taken, through the first shard of epoch 2 (the last
 * epoch), after which every shard needs an ask; the last one is reported by the trainer's own
 * client, and the dataset then ends. */
static void ahead_until_last_epoch(const job *j, dt__prefetch *p, dt_shard *sh, FILE *log) {
    (void)log;
    DT_CHECK(take(p, sh, 0, 1, 1) == 1);
    int seen[2][4] = {{0}};
    seen[sh->epoch][sh->id]++;
    int asked = 1, ahead_got = 0, n = 1;
    for (;;) {
        int got = take(p, sh, 1, 1, 0); /* what the last report fetched, if anything */
        if (got < 0) break;
        if (got) {
            ahead_got++;
        } else {
            asked++;
            if (take(p, sh, 1, 1, 1) != 1) break; /* the end: the last shard is in hand */
        }
        DT_CHECK(sh->epoch >= 0 && sh->epoch < 2 && sh->id >= 0 && sh->id < 4);
        seen[sh->epoch][sh->id]++;
        n++;
        if (!got && ahead_got < 3) DT_CHECK(sh->epoch == 0 && n == 2); /* the second only */
    }
    DT_CHECK(n == 8);
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < 4; i++)
            DT_CHECK(seen[e][i] == 1);
    /* asks: the first shard, the second, epoch 2's last three and a last one that found
     * nothing left to hand out (the last shard was in hand) */
    DT_CHECK(ahead_got == 3);
    DT_CHECK(asked == 6);
    dt__prefetch_quiet(p);
    dt_shard_client *c = NULL;
    DT_CHECK_OK(open_as(&c, j, "worker-0"));
    dt_shard next = {0};
    dt_shard_fetch_status st = DT_SHARD_FETCH_SHARD;
    dt_err e = dt_shard_report(c, "ahead", sh, 1, NULL);
    if (!e) e = dt_shard_fetch(c, "ahead", &next, &st);
    dt_shard_free(&next);
    dt_shard_client_close(c);
    DT_CHECK_OK(e);
    DT_CHECK(st == DT_SHARD_FETCH_END); /* every shard reported */
}

/* ahead = 0 (the trainer is stopping): the report goes alone. */
static void not_ahead_when_told(const job *j, dt__prefetch *p, dt_shard *sh, FILE *log) {
    (void)j;
    (void)log;
    DT_CHECK(take(p, sh, 0, 1, 1) == 1);
    DT_CHECK(take(p, sh, 1, 0, 1) == 1);
    DT_CHECK(take(p, sh, 1, 1, 0) == 0); /* nothing was fetched with the report */
    DT_CHECK(take(p, sh, 1, 1, 1) == 1); /* an ask still brings one */
}

/* A finished shard whose report the master refuses (a lease it never gave): the prefetcher
 * says the shard is dropped, and fetches nothing with that report. */
static void refused_report(const job *j, dt__prefetch *p, dt_shard *sh, FILE *log) {
    (void)j;
    DT_CHECK(take(p, sh, 0, 1, 1) == 1);
    sh->lease += 1000;
    DT_CHECK(take(p, sh, 1, 1, 1) == 1);
    DT_CHECK(take(p, sh, 1, 1, 0) == 0);
    dt__prefetch_quiet(p);
    fflush(log);
    rewind(log);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, log);
    text[n] = '\0';
    DT_CHECK(strstr(text, "late report refused") && strstr(text, "dropped (re-queued"));
}

/* A case: a body run with a prefetcher of its own on dataset `name` (size 40 in shards of
 * 10), which is ended whether the body passes or fails. */
typedef void case_body(const job *j, dt__prefetch *p, dt_shard *sh, FILE *log);

static void with_prefetcher(const job *j, const char *name, int64_t epochs, FILE *log,
                            case_body *body) {
    dt_dataset_spec d = spec_of(name, 40, 10, epochs, 1);
    dt__prefetch p;
    dt_shard sh = {0};
    dt_err e = dt__prefetch_start(&p, &d, "worker-0", log);
    if (!e) body(j, &p, &sh, log);
    dt__prefetch_end(&p);
    dt_shard_free(&sh);
    DT_CHECK_OK(e);
}

static void test_prefetch(void) {
    job j;
    DT_CHECK(job_start(&j, "prefetch") == 0);
    job_env(&j, "worker-0"); /* the prefetcher's client takes its master from there */
    FILE *log = tmpfile();
    if (log) {
        with_prefetcher(&j, "ahead", 2, log, ahead_until_last_epoch);
        with_prefetcher(&j, "told", 3, log, not_ahead_when_told);
        with_prefetcher(&j, "refused", 3, log, refused_report);
        fclose(log);
    }
    job_stop(&j);
    DT_CHECK(log != NULL);
}

DT_TEST_MAIN(DT_T(test_prefetch))
