/* rendezvous_test.c - the master's rendezvous rules (rendezvous.c) on a job state built
 * here, with the clock given: rings formed when every trainer waits or after the timeout,
 * ranks, idempotent polls, rings broken by rejoins and exits, unreachable penalties, the
 * journal. The HTTP routes and the client with a real master: rendezvous_job_test.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/master-impl.h"
#include "testing/dt_test.h"

#define SPEC(REPLICAS, EXTRA)                                                                   \
    "apiVersion: dtrain/v1\nkind: TrainJob\nmetadata: {name: rz}\nspec:\n"                      \
    "  data: {train: {format: synthetic, samples: 8, shape: [2], classes: 2}}\n"               \
    "  model: {layers: [{type: dense, units: 2}]}\n  optimizer: {type: sgd}\n"                 \
    "  replicas: " REPLICAS "\n" EXTRA

typedef struct fake {
    dt_job_spec *job;
    dt__master m;
    char log[512];
} fake;

/* A master for spec whose replicas all run; its progress lines go to a file. */
static int fake_init(fake *f, const char *spec, const char *journal) {
    memset(f, 0, sizeof *f);
    if (dt_job_spec_parse(&f->job, spec, strlen(spec), "rz.yaml")) {
        fprintf(stderr, "spec: %s\n", dt_errmsg());
        return -1;
    }
    f->m.job = f->job;
    if (dt__job_state_init(&f->m.st, f->job) || dt__rdzv_init(&f->m.rdzv)) return -1;
    for (int i = 0; i < f->m.st.nreplicas; i++) f->m.st.replicas[i].state = DT__REPLICA_RUNNING;
    snprintf(f->log, sizeof f->log, "%s/master-%p.log", dt_test_tmpdir(), (void *)f);
    f->m.opts.out = fopen(f->log, "w");
    if (journal) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dt_test_tmpdir(), journal);
        if (dt__journal_open(&f->m.journal, path)) return -1;
    }
    return f->m.opts.out ? 0 : -1;
}

static void fake_free(fake *f) {
    if (f->m.opts.out) fclose(f->m.opts.out);
    dt__journal_close(f->m.journal);
    dt__rdzv_free(f->m.rdzv);
    dt__job_state_free(&f->m.st);
    dt_job_spec_free(f->job);
}

static int log_has(fake *f, const char *text) {
    fflush(f->m.opts.out);
    FILE *in = fopen(f->log, "r");
    char buf[16384];
    size_t n = in ? fread(buf, 1, sizeof buf - 1, in) : 0;
    if (in) fclose(in);
    buf[n] = 0;
    if (!strstr(buf, text)) fprintf(stderr, "the log lacks \"%s\":\n%s", text, buf);
    return strstr(buf, text) != NULL;
}

/* A join at time now; the answer (NULL on error). */
static json_t *join(fake *f, const char *name, int64_t gen, int64_t step, const char *lost,
                    double now) {
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", 40000 + (int)strlen(name) * 100 + name[strlen(name) - 1]);
    dt__rdzv_reg reg = {.replica = name, .address = addr, .generation = gen, .step = step,
                        .unreachable = lost};
    json_t *ans = NULL;
    if (dt__rdzv_join(&f->m, &reg, now, &ans)) {
        fprintf(stderr, "join %s: %s\n", name, dt_errmsg());
        return NULL;
    }
    return ans;
}

/* The answer of a join: -1 not formed, else the rank; *gen the generation. */
static int joined(fake *f, const char *name, int64_t gen, int64_t step, const char *lost,
                  double now, int64_t *got_gen) {
    json_t *ans = join(f, name, gen, step, lost, now);
    if (!ans) return -2;
    int formed = json_is_true(json_object_get(ans, "formed"));
    int rank = formed ? (int)json_integer_value(json_object_get(ans, "rank")) : -1;
    if (got_gen) *got_gen = json_integer_value(json_object_get(ans, "generation"));
    json_decref(ans);
    return rank;
}

/* The members of the status answer, joined by commas, into buf; leave into *leave. */
static const char *status(fake *f, int64_t gen, double now, int *leave, const char *key,
                          char *buf, size_t len) {
    json_t *ans = NULL;
    buf[0] = 0;
    if (dt__rdzv_status(&f->m, gen, now, &ans)) {
        fprintf(stderr, "status: %s\n", dt_errmsg());
        return "error";
    }
    *leave = json_is_true(json_object_get(ans, "leave"));
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(ans, key), i, v) {
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, "%s%s", n ? "," : "", json_string_value(v));
    }
    json_decref(ans);
    return buf;
}

static void test_form_when_all_wait(void) {
    fake f;
    DT_CHECK(!fake_init(&f, SPEC("{chief: 1, worker: 2}", ""), NULL));
    int64_t g = -1;
    char buf[256];
    int leave = 0;
    DT_CHECK(joined(&f, "worker-0", 0, 5, NULL, 0.0, &g) == -1 && g == 0);
    DT_CHECK(joined(&f, "chief-0", 0, 5, NULL, 0.1, &g) == -1);
    DT_CHECK(!strcmp(status(&f, 0, 0.15, &leave, "waiting", buf, sizeof buf), "worker-0,chief-0"));
    DT_CHECK(leave == 1);
    /* polls change nothing */
    DT_CHECK(joined(&f, "worker-0", 0, 5, NULL, 0.15, &g) == -1 && g == 0);
    /* the last one: formed, the highest step first, then the chief, then by index */
    DT_CHECK(joined(&f, "worker-1", 0, 7, NULL, 0.2, &g) == 0 && g == 1);
    DT_CHECK(joined(&f, "worker-0", 0, 5, NULL, 0.3, &g) == 2 && g == 1);
    DT_CHECK(joined(&f, "chief-0", 0, 5, NULL, 0.3, &g) == 1 && g == 1);
    DT_CHECK(joined(&f, "worker-0", 0, 5, NULL, 0.35, &g) == 2 && g == 1); /* again */
    json_t *ans = join(&f, "worker-0", 0, 5, NULL, 0.4);
    DT_CHECK(ans != NULL);
    json_t *peers = json_object_get(ans, "peers"), *members = json_object_get(ans, "members");
    DT_CHECK(json_integer_value(json_object_get(ans, "size")) == 3 && json_array_size(peers) == 3);
    DT_CHECK(!strcmp(json_string_value(json_array_get(members, 0)), "worker-1") &&
             !strcmp(json_string_value(json_array_get(members, 1)), "chief-0") &&
             !strcmp(json_string_value(json_array_get(members, 2)), "worker-0"));
    DT_CHECK(!strcmp(json_string_value(json_array_get(peers, 2)), "127.0.0.1:40848"));
    json_decref(ans);
    DT_CHECK(!strcmp(status(&f, 1, 0.5, &leave, "members", buf, sizeof buf),
                     "worker-1,chief-0,worker-0"));
    DT_CHECK(leave == 0);
    status(&f, 0, 0.5, &leave, "members", buf, sizeof buf);
    DT_CHECK(leave == 1); /* superseded */
    DT_CHECK(log_has(&f, "rendezvous: ring generation 1 formed, 3 members by rank: 0 worker-1 "
                         "(step 7), 1 chief-0 (step 5), 2 worker-0 (step 5)"));
    /* a generation the master never formed */
    dt__rdzv_reg reg = {.replica = "worker-0", .address = "h:1", .generation = 2, .step = 0};
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 1.0, &ans), DT_ERR_ARG,
                 "generation: 2 is not a ring this master formed (the newest is 1)");
    DT_CHECK_ERR(dt__rdzv_status(&f.m, 5, 1.0, &ans), DT_ERR_ARG, "generation: 5 is not a ring");

    /* a member joins again with its ring's generation: the ring is broken */
    DT_CHECK(joined(&f, "worker-0", 1, 9, NULL, 1.0, &g) == -1 && g == 1);
    status(&f, 1, 1.0, &leave, "waiting", buf, sizeof buf);
    DT_CHECK(leave == 1 && !strcmp(buf, "worker-0"));
    DT_CHECK(log_has(&f, "rendezvous: ring generation 1 is broken: worker-0 joins again"));
    /* a stale poll of a member of a broken ring waits too */
    DT_CHECK(joined(&f, "chief-0", 0, 9, NULL, 1.1, &g) == -1);
    DT_CHECK(joined(&f, "worker-1", 1, 9, NULL, 1.2, &g) == 2 && g == 2);
    DT_CHECK(joined(&f, "worker-0", 1, 9, NULL, 1.3, &g) == 1 && g == 2);
    DT_CHECK(joined(&f, "chief-0", 1, 9, NULL, 1.3, &g) == 0 && g == 2);
    fake_free(&f);
}

static void test_timeout(void) {
    fake f;
    DT_CHECK(!fake_init(&f, SPEC("{chief: 1, worker: 2}", "  allreduce: {rendezvousTimeoutSeconds: 10}\n"),
                        NULL));
    int64_t g = -1;
    DT_CHECK(joined(&f, "worker-1", 0, 0, NULL, 100.0, &g) == -1);
    DT_CHECK(joined(&f, "worker-0", 0, 0, NULL, 105.0, &g) == -1);
    DT_CHECK(joined(&f, "worker-0", 0, 0, NULL, 109.9, &g) == -1);
    /* worker-1 has waited 10 s: a ring of the two waiting, without the chief */
    DT_CHECK(joined(&f, "worker-0", 0, 0, NULL, 110.0, &g) == 0 && g == 1);
    DT_CHECK(joined(&f, "worker-1", 0, 0, NULL, 110.1, &g) == 1 && g == 1);
    DT_CHECK(log_has(&f, "ring generation 1 formed, 2 members by rank: 0 worker-0 (step 0), 1 "
                         "worker-1 (step 0) (after the rendezvous timeout"));
    /* the chief comes late: the members must leave, and all three form the next ring */
    int leave = 0;
    char buf[128];
    DT_CHECK(joined(&f, "chief-0", 0, 0, NULL, 111.0, &g) == -1 && g == 1);
    status(&f, 1, 111.0, &leave, "waiting", buf, sizeof buf);
    DT_CHECK(leave == 1 && !strcmp(buf, "chief-0"));
    DT_CHECK(joined(&f, "worker-0", 1, 4, NULL, 111.5, &g) == -1);
    DT_CHECK(joined(&f, "worker-1", 1, 4, NULL, 111.6, &g) == 1 && g == 2);
    DT_CHECK(joined(&f, "chief-0", 0, 0, NULL, 111.7, &g) == 2 && g == 2);
    fake_free(&f);
}

static void test_replica_gone(void) {
    fake f;
    DT_CHECK(!fake_init(&f, SPEC("{worker: 3, evaluator: 1}", ""), NULL));
    int64_t g = -1;
    int leave = 0;
    char buf[128];
    DT_CHECK(joined(&f, "worker-0", 0, 0, NULL, 0, &g) == -1);
    DT_CHECK(joined(&f, "worker-1", 0, 0, NULL, 0, &g) == -1);
    /* the evaluator is no trainer: it neither joins nor is waited for */
    dt__rdzv_reg reg = {.replica = "evaluator-0", .address = "h:1", .generation = 0, .step = 0};
    json_t *ans;
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 0, &ans), DT_ERR_ARG,
                 "replica: evaluator-0 is not a trainer");
    reg.replica = "worker-7";
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 0, &ans), DT_ERR_ARG,
                 "replica: job 'rz' has no replica 'worker-7'");
    DT_CHECK(joined(&f, "worker-2", 0, 0, NULL, 0, &g) == 2 && g == 1);
    /* worker-2 exits: its ring is broken */
    dt__rdzv_replica_gone(&f.m, "worker-2", "exited with code 137");
    status(&f, 1, 1, &leave, "members", buf, sizeof buf);
    DT_CHECK(leave == 1);
    DT_CHECK(log_has(&f, "ring generation 1 is broken: worker-2 exited with code 137"));
    /* it is restarting: it cannot join, and the other two are all the master runs */
    dt__replica *r = dt__job_state_find(&f.m.st, "worker-2");
    r->state = DT__REPLICA_RESTARTING;
    reg.replica = "worker-2";
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 1, &ans), DT_ERR_STATE,
                 "replica: worker-2 is not running (it is Restarting)");
    DT_CHECK(joined(&f, "worker-0", 1, 3, NULL, 1, &g) == -1);
    DT_CHECK(joined(&f, "worker-1", 1, 3, NULL, 1, &g) == 1 && g == 2);
    DT_CHECK(joined(&f, "worker-0", 1, 3, NULL, 1, &g) == 0 && g == 2);
    /* back: the members must leave for it */
    r->state = DT__REPLICA_RUNNING;
    DT_CHECK(joined(&f, "worker-2", 0, 0, NULL, 2, &g) == -1);
    status(&f, 2, 2, &leave, "waiting", buf, sizeof buf);
    DT_CHECK(leave == 1 && !strcmp(buf, "worker-2"));
    /* a waiting replica that exits leaves the waiting set */
    dt__rdzv_replica_gone(&f.m, "worker-2", "exited with code 1");
    status(&f, 2, 2, &leave, "waiting", buf, sizeof buf);
    DT_CHECK(leave == 0 && !strcmp(buf, ""));
    /* a member found not running at a request (no hook: a resumed master) breaks its ring */
    dt__job_state_find(&f.m.st, "worker-1")->state = DT__REPLICA_FAILED;
    status(&f, 2, 3, &leave, "members", buf, sizeof buf);
    DT_CHECK(leave == 1);
    DT_CHECK(log_has(&f, "ring generation 2 is broken: worker-1 is not running"));
    /* a replica being scaled away or stopped joins no ring */
    dt__job_state_find(&f.m.st, "worker-0")->removing = 1;
    reg.replica = "worker-0";
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 3, &ans), DT_ERR_STATE,
                 "replica: worker-0 is being removed (scaled down)");
    /* a finished job forms no more rings; its members are told to leave */
    f.m.st.finished = 1;
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 3, &ans), DT_ERR_STATE,
                 "job 'rz' is finished: it forms no more rings");
    status(&f, 2, 3, &leave, "members", buf, sizeof buf);
    DT_CHECK(leave == 1);
    fake_free(&f);
}

static void test_unreachable(void) {
    fake f;
    DT_CHECK(!fake_init(&f, SPEC("{worker: 3, evaluator: 1}", "  allreduce: {rendezvousTimeoutSeconds: 10}\n"),
                        NULL));
    int64_t g = -1;
    int leave = 0;
    char buf[128];
    DT_CHECK(joined(&f, "worker-0", 0, 0, NULL, 0, &g) == -1);
    DT_CHECK(joined(&f, "worker-1", 0, 0, NULL, 0, &g) == -1);
    DT_CHECK(joined(&f, "worker-2", 0, 0, NULL, 0, &g) == 2 && g == 1);
    /* bad reports */
    dt__rdzv_reg reg = {.replica = "worker-0", .address = "h:1", .generation = 1, .step = 5,
                        .unreachable = "worker-9"};
    json_t *ans;
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 1, &ans), DT_ERR_ARG,
                 "unreachable: job 'rz' has no replica 'worker-9'");
    reg.unreachable = "evaluator-0";
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 1, &ans), DT_ERR_ARG,
                 "unreachable: evaluator-0 is not a trainer");
    reg.unreachable = "worker-0";
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 1, &ans), DT_ERR_ARG,
                 "unreachable: worker-0 cannot report itself");
    status(&f, 1, 1, &leave, "members", buf, sizeof buf);
    DT_CHECK(leave == 0); /* refused requests change nothing */

    /* worker-0 lost worker-1: worker-1 is left out for 10 s */
    DT_CHECK(joined(&f, "worker-0", 1, 5, "worker-1", 10, &g) == -1);
    DT_CHECK(log_has(&f, "rendezvous: worker-0 reports worker-1 unreachable: worker-1 is left "
                         "out of rings for 10.0 s"));
    DT_CHECK(joined(&f, "worker-1", 1, 5, NULL, 10.1, &g) == -1);
    DT_CHECK(joined(&f, "worker-2", 1, 5, NULL, 10.2, &g) == 1 && g == 2);
    DT_CHECK(joined(&f, "worker-0", 1, 5, NULL, 10.3, &g) == 0 && g == 2);
    DT_CHECK(joined(&f, "worker-1", 1, 5, NULL, 10.4, &g) == -1 && g == 2);
    /* a penalized replica does not make the members leave */
    status(&f, 2, 15, &leave, "waiting", buf, sizeof buf);
    DT_CHECK(leave == 0 && !strcmp(buf, ""));
    /* once its penalty has passed it does, and the three form the next ring */
    status(&f, 2, 20.5, &leave, "waiting", buf, sizeof buf);
    DT_CHECK(leave == 1 && !strcmp(buf, "worker-1"));
    /* its wait counts from the end of the penalty: no ring of it alone */
    DT_CHECK(joined(&f, "worker-1", 1, 5, NULL, 25, &g) == -1 && g == 2);
    DT_CHECK(joined(&f, "worker-0", 2, 8, NULL, 26, &g) == -1);
    DT_CHECK(joined(&f, "worker-2", 2, 8, NULL, 26, &g) == 1 && g == 3);
    DT_CHECK(joined(&f, "worker-1", 1, 5, NULL, 26, &g) == 2 && g == 3);

    /* worker-1 and worker-2 lose each other: the later in rank order (worker-2) stays out */
    DT_CHECK(joined(&f, "worker-2", 3, 9, "worker-1", 30, &g) == -1);
    DT_CHECK(joined(&f, "worker-1", 3, 9, "worker-2", 30.1, &g) == -1);
    DT_CHECK(log_has(&f, "worker-1 and worker-2 report each other unreachable: worker-2 (later "
                         "in rank order) is left out instead of worker-1"));
    DT_CHECK(joined(&f, "worker-0", 3, 9, NULL, 30.2, &g) == 0 && g == 4);
    DT_CHECK(joined(&f, "worker-1", 3, 9, NULL, 30.3, &g) == 1 && g == 4);
    DT_CHECK(joined(&f, "worker-2", 3, 9, NULL, 30.4, &g) == -1);
    /* the other way round: the earlier one reports last, the later one stays out (worker-0
     * is all that is left: a ring of one) */
    DT_CHECK(joined(&f, "worker-0", 4, 10, "worker-1", 31, &g) == 0 && g == 5);
    DT_CHECK(joined(&f, "worker-1", 4, 10, "worker-0", 31.1, &g) == -1 && g == 5);
    DT_CHECK(log_has(&f, "worker-1 and worker-0 report each other unreachable: worker-1 (later "
                         "in rank order) stays left out"));
    /* worker-1 dies after all (its loss was its death, not a link): its restarted process
     * waits without a penalty, and the ring is asked to take it in */
    dt__rdzv_replica_gone(&f.m, "worker-1", "exited with code 137");
    DT_CHECK(log_has(&f, "rendezvous: worker-1 exited with code 137: its penalty is lifted"));
    DT_CHECK(joined(&f, "worker-1", 0, 0, NULL, 31.5, &g) == -1);
    status(&f, 5, 31.6, &leave, "waiting", buf, sizeof buf);
    DT_CHECK(leave == 1 && !strcmp(buf, "worker-1"));
    fake_free(&f);
}

/* A peer scaled away while its ring ran is gone from the table when the survivor reports
 * it lost: the survivor is not refused (it would exit) and forms a ring alone. */
static void test_lost_scaled_away(void) {
    fake f;
    DT_CHECK(!fake_init(&f, SPEC("{worker: 2}", ""), NULL));
    int64_t g = -1;
    DT_CHECK(joined(&f, "worker-0", 0, 0, NULL, 0, &g) == -1);
    DT_CHECK(joined(&f, "worker-1", 0, 0, NULL, 0, &g) == 1 && g == 1);
    dt__rdzv_replica_gone(&f.m, "worker-1", "is scaled away");
    dt__job_state_remove(&f.m.st, (int)(dt__job_state_find(&f.m.st, "worker-1") - f.m.st.replicas));
    DT_CHECK(joined(&f, "worker-0", 1, 40, "worker-1", 1, &g) == 0 && g == 2);
    DT_CHECK(log_has(&f, "rendezvous: worker-0 lost worker-1, which is no longer in the job: "
                         "no penalty"));
    /* a name that was in no ring is still refused */
    dt__rdzv_reg reg = {.replica = "worker-0", .address = "h:1", .generation = 2, .step = 41,
                        .unreachable = "worker-9"};
    json_t *ans;
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 2, &ans), DT_ERR_ARG,
                 "unreachable: job 'rz' has no replica 'worker-9'");
    fake_free(&f);
}

static dt_err replay_one(void *ctx, json_t *ev) {
    const char *kind = json_string_value(json_object_get(ev, "ev"));
    if (kind && !strncmp(kind, "rdzv.", 5)) dt__rdzv_replay(ctx, ev);
    return DT_OK;
}

static void test_journal(void) {
    fake f;
    DT_CHECK(!fake_init(&f, SPEC("{worker: 2}", ""), "rdzv.jsonl"));
    int64_t g = -1;
    for (int round = 0; round < 3; round++) {
        DT_CHECK(joined(&f, "worker-0", round, round, NULL, round, &g) == -1);
        DT_CHECK(joined(&f, "worker-1", round, round, NULL, round, &g) == 1 && g == round + 1);
        DT_CHECK(joined(&f, "worker-0", round, round, NULL, round, &g) == 0 && g == round + 1);
    }
    fake_free(&f);
    char path[512];
    snprintf(path, sizeof path, "%s/rdzv.jsonl", dt_test_tmpdir());
    /* a resumed master: ring 3, whole, with its members and peers */
    fake r;
    DT_CHECK(!fake_init(&r, SPEC("{worker: 2}", ""), NULL));
    DT_CHECK_OK(dt__journal_replay(path, replay_one, r.m.rdzv));
    DT_CHECK(dt__rdzv_generation(r.m.rdzv) == 3);
    int leave = 1;
    char buf[128];
    DT_CHECK(!strcmp(status(&r, 3, 50, &leave, "members", buf, sizeof buf), "worker-0,worker-1"));
    DT_CHECK(leave == 0);
    DT_CHECK(joined(&r, "worker-1", 2, 2, NULL, 50, &g) == 1 && g == 3); /* a late poll */
    /* the next ring is generation 4 */
    DT_CHECK(joined(&r, "worker-0", 3, 3, NULL, 51, &g) == -1);
    DT_CHECK(joined(&r, "worker-1", 3, 3, NULL, 51, &g) == 1 && g == 4);
    fake_free(&r);
    /* a break is replayed too */
    FILE *j = fopen(path, "a");
    fputs("{\"ev\":\"rdzv.broken\",\"generation\":3,\"reason\":\"worker-0 exited\"}\n", j);
    fclose(j);
    DT_CHECK(!fake_init(&r, SPEC("{worker: 2}", ""), NULL));
    DT_CHECK_OK(dt__journal_replay(path, replay_one, r.m.rdzv));
    status(&r, 3, 60, &leave, "members", buf, sizeof buf);
    DT_CHECK(leave == 1 && dt__rdzv_generation(r.m.rdzv) == 3);
    DT_CHECK(joined(&r, "worker-0", 2, 2, NULL, 60, &g) == -1 && g == 3); /* no stale answer */
    fake_free(&r);
    /* a ring line that is not whole still moves the generation on, as a broken ring */
    j = fopen(path, "a");
    fputs("{\"ev\":\"rdzv.ring\",\"generation\":7,\"members\":[\"worker-0\"],\"peers\":[]}\n", j);
    fclose(j);
    DT_CHECK(!fake_init(&r, SPEC("{worker: 2}", ""), NULL));
    DT_CHECK_OK(dt__journal_replay(path, replay_one, r.m.rdzv));
    status(&r, 7, 70, &leave, "members", buf, sizeof buf);
    DT_CHECK(leave == 1 && dt__rdzv_generation(r.m.rdzv) == 7 && !strcmp(buf, ""));
    fake_free(&r);
}

static void test_jobs_without_rings(void) {
    static const char ps[] = SPEC("{worker: 2, ps: 1}", "");
    static const char tf[] =
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec:\n"
        "  tfReplicaSpecs:\n    Worker:\n      replicas: 2\n"
        "      template: {spec: {containers: [{name: tensorflow, command: [\"true\"]}]}}\n";
    fake f;
    json_t *ans;
    dt__rdzv_reg reg = {.replica = "worker-0", .address = "h:1"};
    DT_CHECK(!fake_init(&f, ps, NULL));
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 0, &ans), DT_ERR_STATE,
                 "job 'rz' is a TrainJob with strategy parameter_server: only the trainers of a "
                 "TrainJob with strategy allreduce form rings");
    DT_CHECK_ERR(dt__rdzv_status(&f.m, 0, 0, &ans), DT_ERR_STATE, "strategy parameter_server");
    fake_free(&f);
    DT_CHECK(!fake_init(&f, tf, NULL));
    DT_CHECK_ERR(dt__rdzv_join(&f.m, &reg, 0, &ans), DT_ERR_STATE, "job 't' is a TFJob: only");
    fake_free(&f);
}

DT_TEST_MAIN(DT_T(test_form_when_all_wait), DT_T(test_timeout), DT_T(test_replica_gone),
             DT_T(test_unreachable), DT_T(test_lost_scaled_away), DT_T(test_journal), DT_T(test_jobs_without_rings))
