/*
 * master-impl.h - the master's internal pieces: the job's state, the policies that move it,
 * the backend that runs replicas, the journal, and the HTTP API.
 *
 * Ownership: one dt__master owns everything here and is touched only by its event-loop
 * thread (master.c), so nothing below takes a lock.
 */
#ifndef DTRAIN_MASTER_IMPL_H
#define DTRAIN_MASTER_IMPL_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <jansson.h>

#include "core/path-impl.h"
#include "dtrain/job.h"
#include "dtrain/master.h"
#include "net/http-impl.h"
#include "shard/ledger-impl.h"

#define DT__MAX_REPLICAS 1024
/* Most bytes a replica's report (POST .../replicas/:replica/report) may carry, as compact
 * JSON: figures and paths, not data (it is journaled, and rewritten with status.json). */
#define DT__REPORT_MAX 16384

typedef struct dt__ports dt__ports;
typedef struct dt__journal dt__journal;
typedef struct dt__rdzv dt__rdzv;

#define DT__RDZV_MAX_ADDR 255 /* bytes of a data-plane "host:port" */

typedef enum dt__replica_state {
    DT__REPLICA_PENDING = 0, /* not launched yet */
    DT__REPLICA_RUNNING,
    DT__REPLICA_RESTARTING, /* exited; waiting for its relaunch */
    DT__REPLICA_SUCCEEDED,
    DT__REPLICA_FAILED,
    DT__REPLICA_STOPPED, /* stopped by the master (clean-up, stop request) */
} dt__replica_state;
const char *dt__replica_state_name(dt__replica_state s);
struct dt__replica;
/* Why a replica is in its state, for a person: its message when the master set one, else
 * one said by its state and last exit ("exit 137 (SIGKILL)"). */
void dt__replica_why(const struct dt__replica *r, char *msg, size_t len);
/* "exit 3", "exit 137 (SIGKILL)" */
void dt__replica_exit_text(int code, char *out, size_t len);

typedef struct dt__replica {
    dt_replica_type type;
    int index;
    char name[32]; /* "worker-1" */
    dt__replica_state state;
    int port;     /* its address in TF_CONFIG */
    int attempt;  /* launches so far (1 = first) */
    int restarts; /* attempt - 1 */
    pid_t pid;    /* local backend: the replica's supervisor, shown in tables; 0: none */
    json_t *facts; /* how the backend finds it again (journaled with its launch); owned */
    int exit_code;       /* last exit: 0-255, 128+signal when killed; -1: none yet */
    double start_time, end_time; /* wall clock of the current attempt (0: none) */
    int stopping;                /* SIGTERM sent by the master */
    json_t *report;              /* what the replica reported through the API; owned */
    json_t *progress;            /* its last training progress post (not journaled); owned */
    char message[320];           /* why it is in its state, for a person ("" : said by state) */
    double progress_time;        /* wall clock of that post */
    double restart_at;           /* DT__REPLICA_RESTARTING: when to launch it again */
    /* Launches that failed for a reason worth retrying (the backend timed out or could not
     * be reached), since the last that worked, and the time of the first of them (0: none) */
    int launch_retries;
    double launch_failing_since;
    double kill_at;              /* stopping: when SIGKILL follows the SIGTERM (0: none) */
    /* Scaled away (`dtrain scale`): being stopped; its end is neither a failure nor a
     * success, the policies do not see it, and it leaves the table once ended (gone). */
    int removing;
    int gone; /* ended after removing: dropped from the table by dt__job_state_sweep */
} dt__replica;

typedef enum dt__cond_type {
    DT__COND_CREATED = 0,
    DT__COND_RUNNING,
    DT__COND_RESTARTING,
    DT__COND_SUCCEEDED,
    DT__COND_FAILED,
    DT__COND__COUNT
} dt__cond_type;

typedef struct dt__condition {
    int set;    /* has appeared */
    int status; /* 1: "True", 0: "False" */
    char reason[64];
    char message[256];
    double update_time, transition_time;
} dt__condition;

typedef struct dt__job_state {
    dt__replica *replicas; /* owned; start order: chief, master, ps, worker, evaluator */
    int nreplicas;
    int cap; /* allocated entries of replicas (workers may be added: dtrain scale) */
    dt__condition cond[DT__COND__COUNT];
    double start_time, completion_time;
    int finished;
    dt_job_outcome outcome;
    int total_restarts;
} dt__job_state;

/* ---- the master (master.c), as the HTTP API (api.c) sees it ---- */
typedef struct dt__master {
    const dt_job_spec *job;
    dt_master_opts opts;
    char dir[DT__PATH_MAX]; /* the job dir, absolute (realpath) */
    char url[128];      /* http://HOST:PORT */
    char token[64];     /* the job's secret, hex */
    dt__job_state st;
    dt__journal *journal;
    dt__http_server *http;
    dt__ledger *ledger; /* the shard service's datasets */
    dt__rdzv *rdzv;     /* the rendezvous of an all-reduce job's rings */
    int stop_requested;
    int stop_now; /* `dtrain stop --now`: SIGKILL, no grace for saving */
    char stop_reason[128];
    int journal_broken; /* an append failed and the backlog is not written yet (said once) */
    int dirty;        /* status.json is out of date */
    uint64_t version; /* bumped by every change of the job's state */
    /* The last status body served, while version has not moved: the status route is
     * polled far more often than the state changes, and building it is most of a
     * request's cost. */
    char *status_cache;
    size_t status_cache_len;
    uint64_t status_cache_version;
    struct dt__series *series; /* the dashboard's curves (series.c); NULL until a point */
    /* 1: this is the loop's master (dt_master_run), which a scale acts through; 0: a master
     * state without its loop (the routes' fuzz harness), which refuses to scale (409). */
    int has_loop;
} dt__master;

/* Note a change of the job's state (status.json and the status cache are out of date). */
static inline void dt__master_touch(dt__master *m) {
    m->dirty = 1;
    m->version++;
}

/* Append ev (stolen; "time" added) to the journal. A failed write is said once, and the
 * event waits in the journal's backlog (dt__journal_ok); DT_ERR_IO then. */
dt_err dt__master_journal(dt__master *m, json_t *ev);
/* The journal cannot be written (what: why, said once): the status says so, changes are
 * refused and nothing expires until it can. Called by dt__master_journal on a failed write,
 * and by the API when a held batch of lines could not be written on release. */
void dt__master_journal_broken(dt__master *m, const char *what);

/* Scale the job's workers to `workers` (POST .../scale): adds worker-K.. (new ports,
 * launched with a TF_CONFIG listing the current workers) or stops the highest-index ones
 * (their shards go back to the ledger; their end is neither a failure nor a success).
 * Journaled as "scale". *added and *removed (new arrays of names) say what changed.
 * DT_ERR_ARG for a count the job cannot take (HTTP 400), DT_ERR_STATE when the job has
 * finished or a worker to add is still being removed (HTTP 409). */
dt_err dt__master_scale(dt__master *m, int workers, json_t **added, json_t **removed);
/* A progress line in the master's output (opts.out, unless it draws the table). */
void dt__master_say(dt__master *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Ask the job to stop (API, signals): replicas are stopped (trainers first, each with the
 * grace period to save its work; with `now`, killed at once), the outcome is Stopped. */
void dt__master_request_stop(dt__master *m, const char *why, int now);
/* Record what a replica reported (a JSON object; reference stolen) in the journal. */
dt_err dt__master_record_report(dt__master *m, dt__replica *r, json_t *report);
/* obj[key] when it is a number, else `absent` (figures replicas post, the ledger's). */
static inline double dt__json_num(const json_t *obj, const char *key, double absent) {
    const json_t *v = json_object_get(obj, key);
    return json_is_number(v) ? json_number_value(v) : absent;
}
/* The job's training progress (progress.c) from data, the shard service's progress
 * (dt__ledger_progress): samples done of all, the rate the trainers report, the ETA, the
 * epoch; NULL when the job has no dataset yet. A new object. */
json_t *dt__master_progress(dt__master *m, const json_t *data);
/* The job's status object (docs/API.md) as status.json and the status route give it, url
 * its master's address or NULL (progress.c). A new object. */
json_t *dt__master_status_json(dt__master *m, const char *url);
/* A replica's progress post (POST .../progress), reference stolen: kept, not journaled. */
void dt__master_record_progress(dt__master *m, dt__replica *r, json_t *progress);
/* The dashboard's curves (series.c): a trainer's progress post, an evaluator's report,
 * and all of them as JSON (GET .../series). */
void dt__series_progress(dt__master *m, const char *replica, const json_t *progress);
void dt__series_report(dt__master *m, const dt__replica *r, const json_t *report);
json_t *dt__series_json(dt__master *m);
void dt__series_free(dt__master *m);
/* The dashboard's page (GET /) and its assets (GET /ui/:file) (ui.c): public routes, as
 * the page holds no secret (the token stays in the URL's fragment, docs/DASHBOARD.md). */
void dt__ui_page(void *ctx, const dt__http_req *req, dt__http_resp *resp);
void dt__ui_asset(void *ctx, const dt__http_req *req, dt__http_resp *resp);
/* The job's Prometheus metrics into b (metrics.c, docs/METRICS.md). */
struct dt_prom;
void dt__master_metrics(dt__master *m, struct dt_prom *b);
/* A replica's status object (dt__replica_json) says "Waiting" with why while it waits in
 * the rendezvous for a ring to form (rendezvous.c). */
void dt__rdzv_annotate(const dt__master *m, json_t *replica);
/* The HTTP routes of the job's API (api.c). */
extern const dt__http_route dt__master_routes[];
extern const int dt__master_nroutes;

/* ---- the rendezvous of an all-reduce job (rendezvous.c, docs/API.md "Rendezvous") ---- */
dt_err dt__rdzv_init(dt__rdzv **out);
void dt__rdzv_free(dt__rdzv *z); /* NULL: no-op */
int64_t dt__rdzv_generation(const dt__rdzv *z); /* the newest ring formed; 0: none */
/* The job forms rings: a TrainJob with strategy allreduce. */
int dt__rdzv_job(const dt__master *m);
/* DT_ERR_STATE (HTTP 409) unless the job is a TrainJob with strategy allreduce, and, when
 * forming, has not finished and is not stopping. */
dt_err dt__rdzv_check_job(const dt__master *m, int forming);
typedef struct dt__rdzv_reg {
    const char *replica;     /* who joins */
    const char *address;     /* its data-plane "host:port" */
    int64_t generation;      /* the last ring it was in; 0: none */
    int64_t step;            /* its last completed step */
    const char *unreachable; /* the replica it lost, or NULL */
} dt__rdzv_reg;
/* A join or a poll (POST .../rendezvous) at time now: *answer (a new object) is the ring
 * formed with the replica, or {"formed": false, "generation": G}. DT_ERR_ARG (400) for a
 * replica, generation or unreachable replica that is not right, naming the field;
 * DT_ERR_STATE (409) for a job that forms no rings, or a replica that is not running. */
dt_err dt__rdzv_join(dt__master *m, const dt__rdzv_reg *reg, double now, json_t **answer);
/* GET .../rendezvous?generation=G: {generation, members, waiting, broken, leave}. */
dt_err dt__rdzv_status(dt__master *m, int64_t generation, double now, json_t **answer);
/* The replica exited, restarts, is stopped or scaled away: it leaves the waiting set, and a
 * ring holding it is broken (why: "exited with code 137"). */
void dt__rdzv_replica_gone(dt__master *m, const char *name, const char *why);
/* Replay of a journaled "rdzv.ring" or "rdzv.broken" event. */
void dt__rdzv_replay(dt__rdzv *z, const json_t *ev);

/* ---- job state (job_state.c) ---- */
dt_err dt__job_state_init(dt__job_state *st, const dt_job_spec *job);
void dt__job_state_free(dt__job_state *st);
dt__replica *dt__job_state_find(dt__job_state *st, const char *name);
/* Add replica (type, index) in start order (after the others of its type, before later
 * types), state Pending; the table grows as needed. Pointers into it are invalidated.
 * *out (may be NULL) is the new entry. */
dt_err dt__job_state_add(dt__job_state *st, dt_replica_type type, int index, dt__replica **out);
/* Drop the entry at position i (its report is freed). */
void dt__job_state_remove(dt__job_state *st, int i);
/* Drop every entry marked gone; returns how many. */
int dt__job_state_sweep(dt__job_state *st);
/* Set condition t to True (and the exclusive ones, Running/Restarting, to False). */
void dt__job_state_condition(dt__job_state *st, dt__cond_type t, const char *reason,
                             const char *message, double now);
const char *dt__cond_type_name(dt__cond_type t);
/* A stopped job is continued (dtrain run --resume): not finished, its Failed condition
 * False (reason, message), its start now (activeDeadlineSeconds counts from it, as for a
 * Kubernetes Job resumed from suspension), its stopped replicas Pending (launched again). */
void dt__job_state_reopen(dt__job_state *st, const char *reason, const char *message,
                          double now);
/* "Created", "Running", "Restarting", "Succeeded", "Failed": the newest true condition. */
const char *dt__job_state_phase(const dt__job_state *st);
/* The status object (status.json and GET /v1/jobs/NAME). */
json_t *dt__job_state_json(const dt__job_state *st, const dt_job_spec *job, const char *url);
/* One replica as JSON (GET .../replicas). */
json_t *dt__replica_json(const dt__replica *r, const char *job_dir);
/* RFC 3339 UTC with milliseconds into buf. */
const char *dt__rfc3339(double t, char *buf, size_t len);
double dt__wall_now(void);

/* ---- policies (policy.c): what the training operator would do ---- */
typedef enum dt__exit_action {
    DT__EXIT_SUCCEEDED = 0, /* the replica is done */
    DT__EXIT_RESTART,       /* launch it again */
    DT__EXIT_FAILED,        /* a permanent failure */
} dt__exit_action;
/* What an exit with code (128+signal when killed) means under policy. */
dt__exit_action dt__policy_on_exit(dt_restart_policy policy, int code);
/* Has the job succeeded, by its success policy and the states of its replicas? */
int dt__policy_job_succeeded(const dt_job_spec *job, const dt__job_state *st);
/* Workers that have not failed for good; *total (when not NULL): all workers. */
int dt__policy_workers_left(const dt__job_state *st, int *total);
/* Under elasticPolicy, may the job go on with the replicas that failed for good? 1 when
 * every one of them is a worker and at least minReplicas workers are left; 0 otherwise,
 * and always 0 for a job without elasticPolicy. */
int dt__policy_worker_loss_ok(const dt_job_spec *job, const dt__job_state *st);

/* ---- ports (ports.c): the ports of a job's processes, held for the master's life ---- */

#define DT__PORTS_LOW 20000 /* no port below this is chosen */
/* A set of held ports on host (a numeric address; NULL: 127.0.0.1), locked against other
 * masters in lock_dir (NULL: /tmp/dtrain-ports). Freed (every lock dropped) with
 * dt__ports_free (NULL: no-op). */
dt_err dt__ports_init(dt__ports **out, const char *host, const char *lock_dir);
void dt__ports_free(dt__ports *p);
/* Choose a port that the kernel never hands out (outside ip_local_port_range and the
 * reserved ports), that no other master holds and that can be bound now, and hold it. */
dt_err dt__ports_take(dt__ports *p, int *port);
/* Hold a port known already (a resumed master's): *busy when another master holds it (it
 * is held here all the same, without the lock). */
dt_err dt__ports_hold(dt__ports *p, int port, int *busy);
void dt__ports_release(dt__ports *p, int port); /* not held: no-op */
int dt__ports_held(const dt__ports *p, int port);
int dt__ports_candidates(const dt__ports *p); /* ports that can be drawn (0: the kernel's) */
/* The lock directory in use; NULL when it cannot be used (no locks against other masters). */
const char *dt__ports_lock_dir(const dt__ports *p);

/* ---- the journal (journal.c) ---- */
dt_err dt__journal_open(dt__journal **out, const char *path);
void dt__journal_close(dt__journal *j);
/* Append one event (a JSON object; the reference is stolen) as a line. A failed write
 * leaves the file as it was and keeps the line for later (dt__journal_ok); DT_ERR_IO. */
dt_err dt__journal_append(dt__journal *j, json_t *event);
/* Between hold and release, appended events wait in memory and release writes them all in
 * one write(2) (a handler whose one request makes several events: a batch of shards). A
 * handler holds only while it runs and checks dt__journal_ok before it answers a change
 * (a failed write stays in the backlog), so nothing acknowledged waits. */
void dt__journal_hold(dt__journal *j);
void dt__journal_release(dt__journal *j);
/* Is everything appended so far written (the backlog of failed writes empty: it tries to
 * write it now) and nothing lost? While not, the master acknowledges no change. NULL: 1. */
int dt__journal_ok(dt__journal *j);
int dt__journal_lost(const dt__journal *j); /* a line was dropped (the backlog overflowed) */
const char *dt__journal_why(const dt__journal *j); /* the last write's failure */
/* Make everything appended so far durable. */
dt_err dt__journal_sync(dt__journal *j);
/* Read every event of the journal at path; calls fn(ctx, event) per line in order. A torn
 * last line (a master killed while writing) is ignored; a malformed line elsewhere is
 * DT_ERR_FORMAT naming the line. An error fn returns ends the replay, its message prefixed
 * with "PATH:LINE: ". (The master's replay of the events: replay-impl.h.) */
dt_err dt__journal_replay(const char *path, dt_err (*fn)(void *ctx, json_t *event), void *ctx);

#endif
