/* master_test.c - the master's pure parts: restart policies, success rules, the journal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/master-impl.h"
#include "testing/dt_test.h"

static void test_restart_policies(void) {
    static const struct {
        dt_restart_policy p;
        int code;
        dt__exit_action want;
    } cases[] = {
        {DT_RESTART_POLICY_NEVER, 0, DT__EXIT_SUCCEEDED},
        {DT_RESTART_POLICY_NEVER, 1, DT__EXIT_FAILED},
        {DT_RESTART_POLICY_NEVER, 137, DT__EXIT_FAILED},
        {DT_RESTART_POLICY_ON_FAILURE, 0, DT__EXIT_SUCCEEDED},
        {DT_RESTART_POLICY_ON_FAILURE, 3, DT__EXIT_RESTART},
        {DT_RESTART_POLICY_ON_FAILURE, 143, DT__EXIT_RESTART},
        {DT_RESTART_POLICY_ALWAYS, 0, DT__EXIT_RESTART},
        {DT_RESTART_POLICY_ALWAYS, 1, DT__EXIT_RESTART},
        {DT_RESTART_POLICY_EXIT_CODE, 0, DT__EXIT_SUCCEEDED},
        {DT_RESTART_POLICY_EXIT_CODE, 1, DT__EXIT_FAILED},
        {DT_RESTART_POLICY_EXIT_CODE, 127, DT__EXIT_FAILED},
        {DT_RESTART_POLICY_EXIT_CODE, 128, DT__EXIT_RESTART},
        {DT_RESTART_POLICY_EXIT_CODE, 137, DT__EXIT_RESTART},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        DT_CHECK(dt__policy_on_exit(cases[i].p, cases[i].code) == cases[i].want);
}

static dt_job_spec *load(const char *yaml) {
    dt_job_spec *job = NULL;
    if (dt_job_spec_parse(&job, yaml, strlen(yaml), "test.yaml"))
        fprintf(stderr, "test spec: %s\n", dt_errmsg());
    return job;
}

#define TFJOB(POLICY, SPECS)                                                                     \
    "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec:\n" POLICY               \
    "  tfReplicaSpecs:\n" SPECS
#define RS(TYPE, N)                                                                              \
    "    " TYPE ":\n      replicas: " #N "\n      template: {spec: {containers: [{name: "         \
    "tensorflow, command: [\"true\"]}]}}\n"

static void set_state(dt__job_state *st, const char *name, dt__replica_state s) {
    dt__replica *r = dt__job_state_find(st, name);
    DT_CHECK(r != NULL);
    if (r) r->state = s;
}

static void test_success_rules(void) {
    /* With a chief: the chief decides, whatever the workers do. */
    dt_job_spec *job = load(TFJOB("", RS("Chief", 1) RS("Worker", 2) RS("PS", 1)));
    DT_CHECK(job != NULL);
    dt__job_state st;
    DT_CHECK_OK(dt__job_state_init(&st, job));
    DT_CHECK(st.nreplicas == 4);
    DT_CHECK(!strcmp(st.replicas[0].name, "chief-0") && !strcmp(st.replicas[1].name, "ps-0"));
    set_state(&st, "worker-0", DT__REPLICA_SUCCEEDED);
    DT_CHECK(!dt__policy_job_succeeded(job, &st));
    set_state(&st, "chief-0", DT__REPLICA_SUCCEEDED);
    DT_CHECK(dt__policy_job_succeeded(job, &st));
    dt__job_state_free(&st);
    dt_job_spec_free(job);

    /* Without: worker-0 decides. */
    job = load(TFJOB("", RS("Worker", 2) RS("PS", 1)));
    DT_CHECK_OK(dt__job_state_init(&st, job));
    set_state(&st, "worker-1", DT__REPLICA_SUCCEEDED);
    DT_CHECK(!dt__policy_job_succeeded(job, &st));
    set_state(&st, "worker-0", DT__REPLICA_SUCCEEDED);
    DT_CHECK(dt__policy_job_succeeded(job, &st));
    dt__job_state_free(&st);
    dt_job_spec_free(job);

    /* AllWorkers: every worker. */
    job = load(TFJOB("  successPolicy: AllWorkers\n", RS("Worker", 2)));
    DT_CHECK_OK(dt__job_state_init(&st, job));
    set_state(&st, "worker-0", DT__REPLICA_SUCCEEDED);
    DT_CHECK(!dt__policy_job_succeeded(job, &st));
    set_state(&st, "worker-1", DT__REPLICA_SUCCEEDED);
    DT_CHECK(dt__policy_job_succeeded(job, &st));
    dt__job_state_free(&st);
    dt_job_spec_free(job);
}

/* elasticPolicy: losing workers, and success without worker-0. */
static void test_elastic_rules(void) {
    dt__job_state st;
    /* 3 workers and a PS, minReplicas 2 */
    dt_job_spec *job =
        load(TFJOB("  elasticPolicy: {minReplicas: 2}\n", RS("Worker", 3) RS("PS", 1)));
    DT_CHECK(job && job->elastic_min_replicas == 2);
    DT_CHECK_OK(dt__job_state_init(&st, job));
    int total = 0;
    DT_CHECK(dt__policy_workers_left(&st, &total) == 3 && total == 3);
    DT_CHECK(dt__policy_worker_loss_ok(job, &st)); /* nothing lost yet */
    set_state(&st, "worker-1", DT__REPLICA_FAILED);
    DT_CHECK(dt__policy_workers_left(&st, NULL) == 2);
    DT_CHECK(dt__policy_worker_loss_ok(job, &st));
    /* worker-0 alone no longer decides */
    set_state(&st, "worker-0", DT__REPLICA_SUCCEEDED);
    DT_CHECK(!dt__policy_job_succeeded(job, &st));
    set_state(&st, "worker-2", DT__REPLICA_RESTARTING);
    DT_CHECK(!dt__policy_job_succeeded(job, &st));
    set_state(&st, "worker-2", DT__REPLICA_SUCCEEDED);
    DT_CHECK(dt__policy_job_succeeded(job, &st)); /* 2 of the 2 left, >= minReplicas */
    /* a second loss: below minReplicas, and no success either */
    set_state(&st, "worker-2", DT__REPLICA_FAILED);
    DT_CHECK(dt__policy_workers_left(&st, NULL) == 1);
    DT_CHECK(!dt__policy_worker_loss_ok(job, &st));
    DT_CHECK(!dt__policy_job_succeeded(job, &st));
    /* a PS failing is never a loss the job survives */
    set_state(&st, "worker-2", DT__REPLICA_SUCCEEDED);
    set_state(&st, "ps-0", DT__REPLICA_FAILED);
    DT_CHECK(!dt__policy_worker_loss_ok(job, &st));
    dt__job_state_free(&st);
    dt_job_spec_free(job);

    /* the lost worker is worker-0: the others decide */
    job = load(TFJOB("  elasticPolicy: {minReplicas: 1}\n", RS("Worker", 2)));
    DT_CHECK_OK(dt__job_state_init(&st, job));
    set_state(&st, "worker-0", DT__REPLICA_FAILED);
    DT_CHECK(dt__policy_worker_loss_ok(job, &st));
    DT_CHECK(!dt__policy_job_succeeded(job, &st));
    set_state(&st, "worker-1", DT__REPLICA_SUCCEEDED);
    DT_CHECK(dt__policy_job_succeeded(job, &st));
    /* every worker lost: below minReplicas 1, never a success */
    set_state(&st, "worker-1", DT__REPLICA_FAILED);
    DT_CHECK(!dt__policy_worker_loss_ok(job, &st));
    DT_CHECK(!dt__policy_job_succeeded(job, &st));
    dt__job_state_free(&st);
    dt_job_spec_free(job);

    /* AllWorkers means the same under elasticPolicy */
    job = load(
        TFJOB("  successPolicy: AllWorkers\n  elasticPolicy: {minReplicas: 1}\n", RS("Worker", 2)));
    DT_CHECK_OK(dt__job_state_init(&st, job));
    set_state(&st, "worker-1", DT__REPLICA_FAILED);
    set_state(&st, "worker-0", DT__REPLICA_SUCCEEDED);
    DT_CHECK(dt__policy_job_succeeded(job, &st));
    dt__job_state_free(&st);
    dt_job_spec_free(job);

    /* with a chief: the chief decides success; losses still count */
    job = load(TFJOB("  elasticPolicy: {minReplicas: 1}\n", RS("Chief", 1) RS("Worker", 2)));
    DT_CHECK_OK(dt__job_state_init(&st, job));
    set_state(&st, "worker-0", DT__REPLICA_FAILED);
    DT_CHECK(dt__policy_worker_loss_ok(job, &st));
    DT_CHECK(!dt__policy_job_succeeded(job, &st));
    set_state(&st, "chief-0", DT__REPLICA_SUCCEEDED);
    DT_CHECK(dt__policy_job_succeeded(job, &st));
    set_state(&st, "chief-0", DT__REPLICA_FAILED);
    DT_CHECK(!dt__policy_worker_loss_ok(job, &st)); /* a chief failing is fatal */
    dt__job_state_free(&st);
    dt_job_spec_free(job);

    /* without elasticPolicy no loss is survived, and worker-0 decides as before */
    job = load(TFJOB("", RS("Worker", 3)));
    DT_CHECK(job && job->elastic_min_replicas == 0);
    DT_CHECK_OK(dt__job_state_init(&st, job));
    set_state(&st, "worker-2", DT__REPLICA_FAILED);
    DT_CHECK(!dt__policy_worker_loss_ok(job, &st));
    set_state(&st, "worker-0", DT__REPLICA_SUCCEEDED);
    DT_CHECK(dt__policy_job_succeeded(job, &st));
    dt__job_state_free(&st);
    dt_job_spec_free(job);
}

static void test_conditions(void) {
    dt_job_spec *job = load(TFJOB("", RS("Worker", 1)));
    DT_CHECK(job != NULL);
    dt__job_state st;
    DT_CHECK_OK(dt__job_state_init(&st, job));
    DT_CHECK(!strcmp(dt__job_state_phase(&st), "Pending"));
    dt__job_state_condition(&st, DT__COND_CREATED, "TFJobCreated", "created", 1.0);
    dt__job_state_condition(&st, DT__COND_RUNNING, "TFJobRunning", "running", 2.0);
    DT_CHECK(!strcmp(dt__job_state_phase(&st), "Running"));
    dt__job_state_condition(&st, DT__COND_RESTARTING, "TFJobRestarting", "restarting", 3.0);
    DT_CHECK(!strcmp(dt__job_state_phase(&st), "Restarting"));
    DT_CHECK(st.cond[DT__COND_RUNNING].status == 0);
    DT_CHECK(st.cond[DT__COND_RUNNING].transition_time == 3.0);
    dt__job_state_condition(&st, DT__COND_RUNNING, "TFJobRunning", "running", 4.0);
    DT_CHECK(st.cond[DT__COND_RESTARTING].status == 0);
    dt__job_state_condition(&st, DT__COND_FAILED, "DeadlineExceeded", "late", 5.0);
    DT_CHECK(!strcmp(dt__job_state_phase(&st), "Failed"));
    DT_CHECK(st.cond[DT__COND_RUNNING].status == 0);
    json_t *j = dt__job_state_json(&st, job, NULL);
    char *text = json_dumps(j, JSON_COMPACT);
    DT_CHECK(strstr(text, "\"type\":\"Failed\",\"status\":\"True\",\"reason\":\"DeadlineExceeded\"") !=
             NULL);
    DT_CHECK(strstr(text, "\"Worker\":{\"active\":0,\"succeeded\":0,\"failed\":0,\"restarts\":0}") !=
             NULL);
    free(text);
    json_decref(j);
    dt__job_state_free(&st);
    dt_job_spec_free(job);
}

typedef struct seen {
    int n;
    int codes[8];
} seen;

static void collect(void *ctx, json_t *ev) {
    seen *s = ctx;
    if (s->n < 8) s->codes[s->n] = (int)json_integer_value(json_object_get(ev, "code"));
    s->n++;
}

static void test_journal(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/journal.jsonl", dt_test_tmpdir());
    remove(path);
    dt__journal *j;
    DT_CHECK_OK(dt__journal_open(&j, path));
    for (int i = 0; i < 3; i++) DT_CHECK_OK(dt__journal_append(j, json_pack("{s:i}", "code", i)));
    DT_CHECK_OK(dt__journal_sync(j));
    dt__journal_close(j);
    seen s = {0};
    DT_CHECK_OK(dt__journal_replay(path, collect, &s));
    DT_CHECK(s.n == 3 && s.codes[2] == 2);

    /* A torn last line (the master died mid-write) is skipped. */
    FILE *f = fopen(path, "a");
    fputs("{\"code\": 9", f);
    fclose(f);
    s.n = 0;
    DT_CHECK_OK(dt__journal_replay(path, collect, &s));
    DT_CHECK(s.n == 3);

    /* A malformed complete line is an error naming the line. */
    f = fopen(path, "a");
    fputs("\n{\"code\": 4}\n", f); /* the torn line is now complete, and malformed */
    fclose(f);
    s.n = 0;
    DT_CHECK_ERR(dt__journal_replay(path, collect, &s), DT_ERR_FORMAT, "journal.jsonl:4:");
}

/* A journal that cannot be written (/dev/full: every write is ENOSPC) keeps its events in
 * the backlog, says so, and is not ok: the master acknowledges nothing meanwhile. */
static void test_journal_full(void) {
    dt__journal *j = NULL;
    DT_CHECK_OK(dt__journal_open(&j, "/dev/full"));
    DT_CHECK(dt__journal_ok(j));
    DT_CHECK_ERR(dt__journal_append(j, json_pack("{s:s}", "ev", "x")), DT_ERR_IO,
                 "No space left on device");
    DT_CHECK(strstr(dt_errmsg(), "bytes waiting"));
    DT_CHECK(!dt__journal_ok(j) && !dt__journal_lost(j));
    DT_CHECK(!strcmp(dt__journal_why(j), "No space left on device"));
    dt__journal_close(j);
}

DT_TEST_MAIN(DT_T(test_restart_policies), DT_T(test_success_rules), DT_T(test_elastic_rules),
             DT_T(test_conditions), DT_T(test_journal), DT_T(test_journal_full))
