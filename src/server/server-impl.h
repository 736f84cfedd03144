/*
 * server-impl.h - `dtrain server`: one machine's job server. It takes jobs (manifests, the
 * seed's submissions), queues them by priority and submit order, admits each whole when its
 * demand fits the free capacity (gang admission), runs it by exec'ing this same binary
 * (`dtrain run SPEC --job-dir DIR --detach`), watches its master, suspends and resumes it,
 * and survives its own restart through a journal (docs/SERVER.md).
 *
 * The pieces, one concern a file:
 *   server.c  - the event loop, the processes it starts and the masters it watches;
 *   routes.c  - the HTTP API;
 *   proxy.c   - the job API passed to each job's master;
 *   queue.c   - capacity, a job's demand, the admission order and each job's reason;
 *   submit.c  - what a submission is: a manifest, a wrapped manifest or the seed's form;
 *   journal.c - the server's journal: the events and their replay.
 * Everything runs on the loop's one thread: no locks.
 */
#ifndef DTRAIN_SERVER_IMPL_H
#define DTRAIN_SERVER_IMPL_H

#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "core/path-impl.h"
#include "dtrain/err.h"
#include "net/http-impl.h"

/* Room the server dir leaves for its paths: the deepest are in its job dirs,
 * jobs/<name, at most 63 bytes>/ and then a job's own (DT__JOB_DIR_ROOM). */
#define DT__SERVER_DIR_ROOM (DT__JOB_DIR_ROOM + 80)

typedef enum dt__sjob_state {
    DT__SJOB_QUEUED = 0,
    DT__SJOB_RUNNING,
    DT__SJOB_SUSPENDING,
    DT__SJOB_SUSPENDED,
    DT__SJOB_SUCCEEDED,
    DT__SJOB_FAILED,
    DT__SJOB_STOPPED,
} dt__sjob_state;

const char *dt__sjob_state_name(dt__sjob_state s);
int dt__sjob_state_parse(const char *s); /* -1 when unknown */
/* Succeeded, Failed or Stopped: the job holds nothing and will not run again. */
int dt__sjob_finished(dt__sjob_state s);

typedef struct dt__demand {
    double cpus;
    int64_t mem; /* bytes */
} dt__demand;

typedef struct dt__sjob {
    char name[64];
    char kind[16];
    int priority;
    int64_t seq; /* submit order */
    dt__sjob_state state;
    char reason[64];
    char message[512];
    json_t *labels; /* owned: {"k": "v"} */
    dt__demand demand;
    dt__demand worker;   /* one Worker replica's share (a scale changes demand by it) */
    double submit_t, start_t, finish_t; /* unix seconds; 0 = not yet */
    char dir[DT__PATH_MAX];    /* its job dir: SERVER_DIR/jobs/<name> */
    char spec[DT__PATH_MAX];   /* what `dtrain run` is given: SERVER_DIR/specs/<name>.yaml */
    char origin[DT__PATH_MAX]; /* the submitter's own file (relative data paths), "" if none */
    int resume;          /* the next start is `dtrain run --resume DIR` */
    int started_once;    /* the job dir holds a master's journal; more than 1: the starts
                            since the last a user asked for (a master gone without a result
                            is started again at most MAX_RELAUNCH times) */
    pid_t launcher;      /* the `dtrain run --detach` this server runs; 0 = none */
    int launcher_child;  /* launcher is our child (else: one from before a restart) */
    int launch_failed;   /* the launcher exited non-zero */
    int want;            /* 0, or a request not yet sent to a master still starting:
                            DT__WANT_SUSPEND, DT__WANT_STOP, DT__WANT_STOP_NOW */
    double want_retry_t; /* a master that did not take it: not asked again before this */
    int stop_asked;      /* stopped by a user: a dead master is not resumed */
    int position;        /* in the queue (1-based); 0 = not queued */
    int deleted;
} dt__sjob;

enum { DT__WANT_SUSPEND = 1, DT__WANT_STOP, DT__WANT_STOP_NOW };

typedef struct dt__server_opts {
    const char *bind_addr; /* default 127.0.0.1 */
    int port;              /* 0: any */
    const char *dir;       /* the server dir */
    double cpus;           /* 0: online CPUs */
    int64_t mem;           /* 0: MemTotal */
    const char *token;     /* NULL: a random one */
    int no_auth;
} dt__server_opts;

typedef struct dt__server dt__server;

struct dt__journal;
struct dt__http_server;
struct dt_prom;

struct dt__server {
    dt__server_opts opts;
    char dir[DT__PATH_MAX]; /* leaves DT__SERVER_DIR_ROOM (checked at the start) */
    char token[80];
    char url[300];
    dt__demand cap;
    dt__sjob **jobs; /* in submit order */
    int njobs, capjobs;
    int64_t next_seq;
    struct dt__journal *journal;
    struct dt__http_server *http;
    int lock_fd;
    int dirty; /* admission must be worked out again */
    char self_exe[DT__PATH_MAX];
};

/* ---- server.c ---- */
/* Make s valid UTF-8 in place (JSON needs it): a byte that starts no whole sequence (a
 * character cut by a buffer's end, a log's stray byte) becomes '?', a control byte ' '. */
void dt__utf8_repair(char *s);
/* Run the server until SIGTERM/SIGINT. */
dt_err dt__server_run(const dt__server_opts *opts);
dt__sjob *dt__server_find(dt__server *s, const char *name);
/* Add a job (owned by s now). */
dt_err dt__server_add(dt__server *s, dt__sjob *j);
/* Ask a job to suspend (kind DT__WANT_SUSPEND) or stop; the answer's status and message. */
int dt__server_request(dt__server *s, dt__sjob *j, int kind, char *msg, size_t cap);
/* A suspended job back in the queue. */
void dt__server_resume(dt__server *s, dt__sjob *j);
/* Forget a finished job (its dirs removed). */
void dt__server_forget(dt__server *s, dt__sjob *j);
/* Is the job's master live (holding DIR/master.lock)? Its url and token from master.json. */
int dt__server_master(const dt__sjob *j, char *url, size_t ucap, char *token, size_t tcap);
void dt__sjob_free(dt__sjob *j);
/* Work out admission now and start what is admitted. */
void dt__server_admit(dt__server *s);

/* ---- queue.c ---- */
/* The machine's capacity: online CPUs and MemTotal. */
dt__demand dt__queue_machine(void);
/* Admission: sets every job's position and reason; returns the queued jobs to start now
 * (in order) in *start (up to cap). Used excludes nothing: it is summed here. */
int dt__queue_plan(dt__server *s, dt__sjob **start, int cap);
/* What running jobs hold now. */
dt__demand dt__queue_used(const dt__server *s);
/* A job summary (the list's item). */
json_t *dt__sjob_summary(const dt__server *s, const dt__sjob *j);
/* A Kubernetes quantity: "500m" -> 0.5, "2" -> 2, "1Gi" -> 1073741824, "1e3" -> 1000. -1 if bad. */
double dt__quantity(const char *s);

/* ---- submit.c ---- */
typedef struct dt__submission {
    char *yaml;       /* the manifest text (owned) */
    char name[64];
    char kind[16];
    char origin[DT__PATH_MAX]; /* the submitter's file, when it said */
    int priority;
    json_t *labels;   /* owned */
    dt__demand demand;
    dt__demand worker; /* one Worker replica's (0 when the job has no Worker type) */
} dt__submission;
/* Parse a POST /v1/jobs body (query: priority) or GET /create's arguments into sub.
 * On error: an HTTP status (400) and message in err (FILE:LINE for a bad manifest). */
int dt__submit_parse_body(dt__server *s, const char *body, size_t len, const char *prio_q,
                          dt__submission *sub, char *err, size_t cap);
int dt__submit_parse_create(dt__server *s, const char *strategy, const char *nw, const char *nps,
                            const char *img, const char *name, dt__submission *sub, char *err,
                            size_t cap);
void dt__submission_free(dt__submission *sub);

/* ---- journal.c ---- */
dt_err dt__sjournal_open(dt__server *s);
void dt__sjournal_close(dt__server *s);
/* Append an event (stolen) with "ev" and "time"; synced for submit and finish. */
dt_err dt__sjournal(dt__server *s, const char *ev, const dt__sjob *j, json_t *extra);
/* Rebuild s->jobs from the journal (before the loop starts). */
dt_err dt__sjournal_replay(dt__server *s);

/* ---- proxy.c ---- */
/* How long the loop's one thread waits for a job's master (a proxied request, a stop): a
 * master answers at once, so one that does not (stopped, hung, swapping) holds every other
 * client of the server up by at most this. */
#define DT__MASTER_TIMEOUT_MS 3000
/* A request to the job's live master: 1 with its answer in resp; 0 when no master runs (or
 * it went away meanwhile); -1 when its master runs but did not answer: resp is a 504 (it did
 * not answer in DT__MASTER_TIMEOUT_MS) or 502 naming the master and what went wrong. */
int dt__server_proxy(const dt__sjob *j, const char *method, const char *path, const char *body,
                     size_t len, dt__http_resp *resp);
/* The handler of every /v1/jobs/:job/:a1[/:a2[/:a3]] route the server does not answer. */
void dt__server_pass(void *ctx, const dt__http_req *req, dt__http_resp *resp);
/* A JSON file of the job dir (status.json, result.json); NULL when absent or bad. */
json_t *dt__sjob_dir_json(const dt__sjob *j, const char *file);

/* ---- routes.c ---- */
extern const dt__http_route dt__server_routes[];
extern const int dt__server_nroutes;

#endif
