/* master_test.c - the master's pure parts: restart policies, success rules, the journal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/master-impl.h"
#include "master/replay-impl.h"
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

static dt_err collect(void *ctx, json_t *ev) {
    seen *s = ctx;
    if (s->n < 8) s->codes[s->n] = (int)json_integer_value(json_object_get(ev, "code"));
    s->n++;
    return DT_OK;
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


/* ---- the master's replay of its journal (replay.c) ---- */

static void no_ledger_journal(void *ctx, json_t *ev) {
    (void)ctx;
    json_decref(ev);
}

typedef struct replayed {
    dt_job_spec *job;
    dt__job_state st;
    dt__ledger *ledger;
    dt__rdzv *rdzv;
    dt__replay r;
} replayed;

/* The journal of lines (each a JSON object, "\n" added) replayed for a TFJob of 2 workers. */
static dt_err replay_lines(replayed *x, const char *const *lines, const char *torn) {
    char path[512];
    snprintf(path, sizeof path, "%s/journal.jsonl", dt_test_tmpdir());
    FILE *f = fopen(path, "w");
    for (int i = 0; lines[i]; i++) fprintf(f, "%s\n", lines[i]);
    if (torn) fputs(torn, f);
    fclose(f);
    memset(x, 0, sizeof *x);
    x->job = load(TFJOB("", RS("Worker", 2)));
    if (!x->job || dt__job_state_init(&x->st, x->job) ||
        dt__ledger_init(&x->ledger, no_ledger_journal, NULL) || dt__rdzv_init(&x->rdzv))
        return dt_err_set(DT_ERR_STATE, "set-up failed");
    dt__replay_init(&x->r, &x->st, x->ledger, x->rdzv);
    return dt__replay_journal(&x->r, path);
}

static void replayed_free(replayed *x) {
    dt__rdzv_free(x->rdzv);
    dt__ledger_free(x->ledger);
    dt__job_state_free(&x->st);
    dt_job_spec_free(x->job);
}

#define J_START                                                                                \
    "{\"ev\":\"start\",\"token\":\"abc\",\"cwd\":\"/w\",\"spec\":\"/w/t.yaml\",\"url\":"       \
    "\"http://127.0.0.1:30001\",\"httpPort\":30001,\"heartbeatTimeoutMs\":30000,"               \
    "\"leaseTimeoutMs\":0,\"ports\":{\"worker-0\":30002,\"worker-1\":30003},\"time\":100.5}"
#define J_LAUNCH(R, A, PID)                                                                    \
    "{\"ev\":\"launch\",\"replica\":\"" R "\",\"attempt\":" #A ",\"pid\":" #PID                 \
    ",\"procStart\":\"77\",\"time\":101}"

static void test_replay(void) {
    replayed x;
    /* a whole journal: start, launches, an exit, a report, a scale, a condition, the end */
    static const char *const good[] = {
        J_START,
        "{\"ev\":\"condition\",\"type\":\"Created\",\"reason\":\"TFJobCreated\",\"message\":"
        "\"created\",\"time\":100.6}",
        J_LAUNCH("worker-0", 1, 4001),
        J_LAUNCH("worker-1", 1, 4002),
        "{\"ev\":\"exit\",\"replica\":\"worker-1\",\"attempt\":1,\"code\":137,\"state\":"
        "\"Restarting\",\"time\":102}",
        "{\"ev\":\"report\",\"replica\":\"worker-0\",\"report\":{\"accuracy\":0.5},\"time\":103}",
        "{\"ev\":\"scale\",\"workers\":3,\"from\":2,\"added\":[\"worker-2\"],\"removed\":[],"
        "\"ports\":{\"worker-2\":30004},\"time\":104}",
        "{\"ev\":\"rdzv.ring\",\"generation\":1,\"members\":[\"worker-0\"],\"peers\":"
        "[\"127.0.0.1:5000\"],\"steps\":[0],\"time\":105}",
        NULL};
    DT_CHECK_OK(replay_lines(&x, good, "{\"ev\":\"exit\",\"repl")); /* a torn last line */
    DT_CHECK(x.r.started && !strcmp(x.r.token, "abc") && !strcmp(x.r.cwd, "/w"));
    DT_CHECK(x.r.http_port == 30001 && x.r.heartbeat_timeout_ms == 30000 && x.r.workers == 3);
    DT_CHECK(x.st.nreplicas == 3 && x.st.start_time == 100.5);
    dt__replica *w0 = dt__job_state_find(&x.st, "worker-0"),
                *w1 = dt__job_state_find(&x.st, "worker-1"),
                *w2 = dt__job_state_find(&x.st, "worker-2");
    DT_CHECK(w0 && w0->state == DT__REPLICA_RUNNING && w0->pid == 4001 && w0->port == 30002);
    DT_CHECK(w0 && json_real_value(json_object_get(w0->report, "accuracy")) == 0.5);
    DT_CHECK(w1 && w1->state == DT__REPLICA_RESTARTING && w1->exit_code == 137 && !w1->pid);
    DT_CHECK(w2 && w2->state == DT__REPLICA_PENDING && w2->port == 30004);
    DT_CHECK(x.st.cond[DT__COND_CREATED].set && dt__rdzv_generation(x.rdzv) == 1);
    replayed_free(&x);

    /* refused, naming the line, the event and the field */
    static const struct {
        const char *line;
        const char *want;
    } bad[] = {
        {J_LAUNCH("worker-0", 0, 1), ":2: event 'launch': field 'attempt': expected an integer in 1.."},
        {"{\"ev\":\"launch\",\"replica\":\"worker-0\",\"time\":1}",
         ":2: event 'launch': field 'attempt': missing"},
        {"{\"ev\":\"exit\",\"replica\":\"worker-0\",\"attempt\":1,\"code\":1,\"state\":\"Gone\","
         "\"time\":1}",
         "event 'exit': field 'state': expected one of Pending, Running"},
        {"{\"ev\":\"exit\",\"replica\":\"worker-0\",\"attempt\":1,\"code\":\"1\",\"state\":"
         "\"Failed\",\"time\":1}",
         "event 'exit': field 'code': expected an integer in 0..255"},
        {"{\"ev\":\"launch\",\"replica\":\"worker-0\",\"attempt\":1}",
         "event 'launch': field 'time': missing"},
        {"{\"ev\":\"reboot\",\"time\":1}", ":2: event 'reboot': not an event of a master's journal"},
        {"{\"time\":1}", ":2: field 'ev': expected a string"},
        {"[1]", ":2: malformed journal line: not an object"},
        {"{\"ev\":\"report\",\"replica\":\"worker-0\",\"report\":[1],\"time\":1}",
         "event 'report': field 'report': expected an object"},
        {"{\"ev\":\"condition\",\"type\":\"Sleeping\",\"reason\":\"r\",\"message\":\"m\","
         "\"time\":1}",
         "event 'condition': field 'type': expected one of Created"},
        {"{\"ev\":\"finish\",\"outcome\":\"Maybe\",\"reason\":\"r\",\"message\":\"m\",\"time\":1}",
         "event 'finish': field 'outcome'"},
        {"{\"ev\":\"scale\",\"workers\":3,\"added\":[\"ps-9\"],\"removed\":[],\"ports\":"
         "{\"ps-9\":30009},\"time\":1}",
         "event 'scale': field 'added': 'ps-9' is not a worker's name"},
        {"{\"ev\":\"scale\",\"workers\":3,\"added\":[\"worker-2\"],\"removed\":[],\"ports\":{},"
         "\"time\":1}",
         "event 'scale': field 'ports': no port for worker-2"},
        {"{\"ev\":\"continue\",\"reason\":\"r\",\"message\":\"m\",\"httpPort\":70000,\"ports\":{},"
         "\"time\":1}",
         "event 'continue': field 'httpPort': expected an integer in 1..65535"},
        {J_START, ":2: event 'start': a second start"},
        {"{\"ev\":\"shard.fetch\",\"dataset\":\"d\",\"replica\":\"worker-0\",\"epoch\":0,\"id\":0,"
         "\"lease\":1,\"time\":1}",
         ":2: ledger event shard.fetch"},
        {"{\"ev\":\"shard.fetch\",\"dataset\":\"d\",\"replica\":\"worker-0\",\"epoch\":0,"
         "\"lease\":1,\"time\":1}",
         ":2: event 'shard.fetch': field 'id': missing"},
        {"{\"ev\":\"rdzv.ring\",\"generation\":2,\"members\":[1],\"peers\":[],\"time\":1}",
         "event 'rdzv.ring': field 'members': item 0: expected a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *lines[] = {J_START, bad[i].line, J_LAUNCH("worker-1", 1, 9), NULL};
        DT_CHECK_ERR(replay_lines(&x, lines, NULL), DT_ERR_FORMAT, bad[i].want);
        DT_CHECK(strstr(dt_errmsg(), "journal.jsonl:") != NULL);
        replayed_free(&x);
    }
    /* an event before the start; a start without a port for a replica of the job */
    const char *early[] = {J_LAUNCH("worker-0", 1, 9), J_START, NULL};
    DT_CHECK_ERR(replay_lines(&x, early, NULL), DT_ERR_FORMAT,
                 "journal.jsonl:1: event 'launch': before the job's start event");
    replayed_free(&x);
    const char *noport[] = {
        "{\"ev\":\"start\",\"token\":\"t\",\"cwd\":\"/\",\"spec\":\"/t.yaml\",\"httpPort\":1,"
        "\"heartbeatTimeoutMs\":0,\"leaseTimeoutMs\":0,\"ports\":{\"worker-0\":2},\"time\":1}",
        NULL};
    DT_CHECK_ERR(replay_lines(&x, noport, NULL), DT_ERR_FORMAT,
                 "event 'start': field 'ports': no port for replica worker-1");
    replayed_free(&x);
    /* a replica scaled away and ended: its later events are skipped, as live */
    const char *gone[] = {J_START, J_LAUNCH("worker-1", 1, 9),
                          "{\"ev\":\"scale\",\"workers\":1,\"added\":[],\"removed\":[\"worker-1\"],"
                          "\"ports\":{},\"time\":2}",
                          "{\"ev\":\"exit\",\"replica\":\"worker-1\",\"attempt\":1,\"code\":143,"
                          "\"state\":\"Removed\",\"time\":3}",
                          "{\"ev\":\"report\",\"replica\":\"worker-1\",\"report\":{},\"time\":4}",
                          NULL};
    DT_CHECK_OK(replay_lines(&x, gone, NULL));
    DT_CHECK(x.st.nreplicas == 1 && x.r.workers == 1 && !dt__job_state_find(&x.st, "worker-1"));
    replayed_free(&x);
    /* the empty journal: nothing started */
    const char *none[] = {NULL};
    DT_CHECK_OK(replay_lines(&x, none, NULL));
    DT_CHECK(!x.r.started);
    replayed_free(&x);
}

DT_TEST_MAIN(DT_T(test_restart_policies), DT_T(test_success_rules), DT_T(test_elastic_rules),
             DT_T(test_conditions), DT_T(test_journal), DT_T(test_journal_full),
             DT_T(test_replay))
