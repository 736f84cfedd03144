/*
 * fuzz_master_routes.c - libFuzzer harness: the master's HTTP routes (src/master/api.c) with
 * their JSON bodies, through the real request path: one real HTTP server
 * (dt__http_server_start with the master's route table, token "tok") serves on 127.0.0.1 for
 * the whole run, and each request of an input is sent on a connection of its own, the
 * harness running the server (dt__http_server_run, as the master's event loop does) until
 * the answer has come and the server has closed.
 *
 * The master behind the routes is a dt__master set up without its event loop and without
 * child processes (as rendezvous_test.c makes one): an all-reduce TrainJob `rz` of two
 * workers, both running, with a real journal, shard ledger and rendezvous, made anew for
 * each input in a scratch job dir (with a log for worker-0). Everything the routes do to it
 * is real, but the scale itself: dt__master_scale acts through the master's loop (ports,
 * processes), so this master (has_loop 0) has the route check the body, and the scale is
 * refused (409) before anything else is touched.
 *
 * Input: a flags byte, then requests as fuzz-http-impl.h reads them ("METHOD TARGET\n" and
 * a body, separated by lines "%%"; a 500 answer is a finding):
 *   flags & 1   the journal cannot be written (/dev/full): changes are answered 503
 *   flags & 2   the job has finished (Succeeded)
 */
#include <sys/stat.h>

#include "fuzz-http-impl.h"
#include "master/master-impl.h"

static const char spec[] =
    "apiVersion: dtrain/v1\nkind: TrainJob\nmetadata: {name: rz}\nspec:\n"
    "  data: {train: {format: synthetic, samples: 8, shape: [2], classes: 2}}\n"
    "  model: {layers: [{type: dense, units: 2}]}\n  optimizer: {type: sgd}\n"
    "  replicas: {worker: 2}\n";

static dt_job_spec *job;
static dt__master m;
static dt__http_server *server;
static char dir[256], journal_path[300], log_dir[300], log_path[320];

static void cleanup(void) {
    dt__http_server_free(server);
    unlink(journal_path);
    unlink(log_path);
    rmdir(log_dir);
    rmdir(dir);
}

static void ledger_event(void *ctx, json_t *ev) { dt__master_journal(ctx, ev); }

static void setup(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%.200s/dt-fuzz-routes-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) abort();
    snprintf(journal_path, sizeof journal_path, "%s/journal.jsonl", dir);
    snprintf(log_dir, sizeof log_dir, "%s/logs", dir);
    snprintf(log_path, sizeof log_path, "%s/worker-0.log", log_dir);
    atexit(cleanup);
    FILE *f = mkdir(log_dir, 0700) == 0 ? fopen(log_path, "w") : NULL;
    if (!f || fputs("epoch 1: loss 0.5\nepoch 2: loss 0.25\n", f) < 0 || fclose(f) != 0) abort();
    if (dt_job_spec_parse(&job, spec, sizeof spec - 1, "rz.yaml")) abort();
    m.job = job;
    snprintf(m.dir, sizeof m.dir, "%s", dir);
    snprintf(m.token, sizeof m.token, "tok");
    dt__http_server_opts o = {.bind_addr = "127.0.0.1", .token = m.token,
                              .routes = dt__master_routes, .nroutes = dt__master_nroutes,
                              .ctx = &m};
    if (dt__http_server_start(&server, &o)) {
        fprintf(stderr, "fuzz_master_routes: %s\n", dt_errmsg());
        abort();
    }
    m.http = server;
    snprintf(m.url, sizeof m.url, "http://127.0.0.1:%d", dt__http_server_port(server));
}

/* The master as the routes find it: state, ledger, rendezvous and journal made anew. */
static void master_begin(int flags) {
    unlink(journal_path);
    if (dt__journal_open(&m.journal, flags & 1 ? "/dev/full" : journal_path) ||
        dt__job_state_init(&m.st, job) || dt__ledger_init(&m.ledger, ledger_event, &m) ||
        dt__rdzv_init(&m.rdzv))
        abort();
    for (int i = 0; i < m.st.nreplicas; i++) {
        m.st.replicas[i].state = DT__REPLICA_RUNNING;
        m.st.replicas[i].attempt = 1;
        m.st.replicas[i].port = 30000 + i;
    }
    m.st.start_time = 1.7e9;
    dt__job_state_condition(&m.st, DT__COND_CREATED, "TrainJobCreated", "created", 1.7e9);
    dt__job_state_condition(&m.st, DT__COND_RUNNING, "TrainJobRunning", "running", 1.7e9);
    if (flags & 2) {
        m.st.finished = 1;
        m.st.outcome = DT_JOB_OUTCOME_SUCCEEDED;
        m.st.completion_time = 1.7e9 + 1;
        dt__job_state_condition(&m.st, DT__COND_SUCCEEDED, "Succeeded", "done", 1.7e9 + 1);
    }
    /* a journal on /dev/full starts broken: the first append fails, as the master's does */
    if (flags & 1) dt__master_journal(&m, json_pack("{s:s}", "ev", "fuzz"));
    m.journal_broken = !dt__journal_ok(m.journal);
    m.version++;
}

static void master_end(void) {
    dt__journal_close(m.journal);
    m.journal = NULL;
    dt__job_state_free(&m.st);
    dt__ledger_free(m.ledger);
    dt__rdzv_free(m.rdzv);
    dt__series_free(&m);
    free(m.status_cache);
    m.status_cache = NULL;
    m.status_cache_len = 0;
    m.stop_requested = m.stop_now = 0;
    m.stop_reason[0] = 0;
    m.journal_broken = 0;
    m.dirty = 0;
    memset(&m.st, 0, sizeof m.st);
    m.ledger = NULL;
    m.rdzv = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!server) setup();
    if (size < 1) return 0;
    master_begin(data[0]);
    dt__fuzz_http_requests(server, m.token, data + 1, size - 1);
    master_end();
    dt_err_clear();
    return 0;
}
