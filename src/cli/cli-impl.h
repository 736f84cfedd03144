/* cli-impl.h - the subcommands of the dtrain binary, one file each, dispatched by table. */
#ifndef DTRAIN_CLI_IMPL_H
#define DTRAIN_CLI_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/path-impl.h"
#include "dtrain/err.h"

struct dt__http_client;
struct json_t;

/* Exit codes shared by every subcommand. */
enum {
    DT_EXIT_OK = 0,
    DT_EXIT_FAILED = 1, /* the job or operation failed */
    DT_EXIT_USAGE = 2,  /* bad command line or malformed spec */
    /* `dtrain role`: a failure a restart may mend (a peer lost, I/O). The lowest code the
     * training operator's ExitCode restart policy retries (1-127 are permanent there). */
    DT_EXIT_RETRY = 128,
};

typedef struct dt__cli_cmd {
    const char *name;
    const char *summary;               /* one line for `dtrain help` */
    const char *usage;                 /* the full text of `dtrain CMD --help` */
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} dt__cli_cmd;

extern const dt__cli_cmd dt__cmd_plan;
extern const dt__cli_cmd dt__cmd_train;
extern const dt__cli_cmd dt__cmd_role;
extern const dt__cli_cmd dt__cmd_run;
extern const dt__cli_cmd dt__cmd_status;
extern const dt__cli_cmd dt__cmd_logs;
extern const dt__cli_cmd dt__cmd_stop;
extern const dt__cli_cmd dt__cmd_scale;
extern const dt__cli_cmd dt__cmd_list;
extern const dt__cli_cmd dt__cmd_version;
extern const dt__cli_cmd dt__cmd_operator;
extern const dt__cli_cmd dt__cmd_predict;
extern const dt__cli_cmd dt__cmd_export;
extern const dt__cli_cmd dt__cmd_serve;
extern const dt__cli_cmd dt__cmd_server;
extern const dt__cli_cmd dt__cmd_submit;
extern const dt__cli_cmd dt__cmd_suspend;
extern const dt__cli_cmd dt__cmd_resume;
extern const dt__cli_cmd dt__cmd_tune;

/* A decimal integer in [lo, hi] (the whole string); 0 on success, -1 otherwise. */
int dt__cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Is `arg` -h or --help? */
int dt__cli_is_help(const char *arg);
/* Print "dtrain CMD: message" plus a hint to see --help, return DT_EXIT_USAGE. */
int dt__cli_usage_error(const dt__cli_cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A job named on the command line (a registered name or a job dir) and how to reach its
 * master (jobref.c). */
/* Where a job runs, from the command line: --backend kubernetes, --kubeconfig, --context,
 * --namespace (any of the last three implies kubernetes). */
typedef struct dt__cli_kube {
    int on;
    const char *kubeconfig, *context, *namespace;
    /* Or through a job server (docs/SERVER.md): --server URL (else $DTRAIN_SERVER) and its
     * token --token (else $DTRAIN_SERVER_TOKEN, else the server.json of $DTRAIN_HOME/server
     * when its url is URL). */
    const char *server, *server_token;
} dt__cli_kube;
/* Is argv[*i] one of those options (or --server, --token)? 1: taken (with its value; *i
 * moved past it), 0: not one, -1: wrong (said; exit DT_EXIT_USAGE). */
int dt__cli_kube_opt(const struct dt__cli_cmd *cmd, int argc, char **argv, int *i, dt__cli_kube *ko);

typedef struct dt__jobref {
    char dir[DT__PATH_MAX]; /* "" for a job in a cluster */
    char name[64];
    char url[1200]; /* from master.json; "" when none */
    char token[80];
    int live;       /* a master holds the job dir's lock (runs, in a cluster) */
    dt__cli_kube kube; /* kube.on: the job runs in a cluster */
    char ns[64];       /* ... in this namespace */
    int server;        /* reached through a job server: url and token are the server's;
                          live: the job is not finished there */
} dt__jobref;

/* Resolve JOB|DIR: an existing directory holding a job, else a name in the registry.
 * Prints "dtrain CMD: ..." and returns nonzero when neither. */
int dt__jobref_resolve(const dt__cli_cmd *cmd, const char *arg, dt__jobref *out);
/* The same, or (ko->on) the job named arg in a cluster: its token from its Secret, its
 * master reached through the API server's service proxy. */
int dt__jobref_find(const dt__cli_cmd *cmd, const char *arg, const dt__cli_kube *ko,
                    dt__jobref *out);
/* A client of the job's master (through the cluster's API server for a job there). */
dt_err dt__jobref_client(const dt__jobref *ref, long timeout_ms, struct dt__http_client **out);
/* The job's status: from its live master when there is one, else from status.json.
 * Returns a new reference, or NULL after printing why. */
struct json_t *dt__jobref_status(const dt__cli_cmd *cmd, const dt__jobref *ref);
/* The job server the command goes through: ko->server, else $DTRAIN_SERVER (not with a
 * cluster's options); NULL when none. */
const char *dt__cli_server_url(const dt__cli_kube *ko);
/* The server's token into out: ko->server_token, $DTRAIN_SERVER_TOKEN, or the server.json
 * of dir (NULL: $DTRAIN_HOME/server) whose url is url; "" when none is known. */
void dt__cli_server_token(const dt__cli_kube *ko, const char *url, const char *dir, char *out,
                          size_t cap);
/* One request to the server; *out the answer parsed (NULL when not JSON). Prints why and
 * returns nonzero on a transport failure. */
int dt__cli_server_call(const struct dt__cli_cmd *cmd, const char *url, const char *token,
                        const char *method, const char *path, const char *body, long *status,
                        struct json_t **out);
/* Seconds between now and an RFC 3339 time ("" when absent) for AGE columns. */
double dt__cli_age(const char *rfc3339);

#endif
