/*
 * backend.h - how a job's master runs its replicas: one table of operations per backend.
 *
 * The master decides (policies, restarts, the stop's order) and journals; a backend only
 * starts, signals and watches replicas, and tells the master when one has ended:
 *
 *   local       (local.c)  a supervisor process per replica on this machine
 *   kubernetes  (kube_backend.c)  a Pod and a headless Service per replica
 *
 * A launch is two steps so that the master can journal it in between: launch() prepares
 * it and returns the facts a later master needs to find the replica again (a pid and its
 * start time; a pod's name), go() starts it. A master that dies between the two started
 * nothing, and its successor launches the replica once.
 *
 * Every operation is called from the master's event-loop thread only.
 */
#ifndef DTRAIN_BACKEND_H
#define DTRAIN_BACKEND_H

#include <stddef.h>

#include <jansson.h>

#include "dtrain/err.h"
#include "dtrain/job.h"

typedef struct dt__backend dt__backend;

/* One replica to start. */
typedef struct dt__backend_launch {
    const char *name; /* "worker-1" */
    dt_replica_type type;
    int index;
    int attempt;       /* 1 for the first launch */
    char *const *argv; /* NULL-terminated; NULL: the image's entrypoint (kubernetes only) */
    /* What the replica is told: the container's own env and dtrain's (TF_CONFIG, DTRAIN_*),
     * as dt_job_env computes it. */
    const dt_env_var *env;
    int nenv;
    const char *cwd; /* NULL: the backend's default */
    /* local: run the replica in this named network namespace (/run/netns/NAME, a simulated
     * host: `dtrain run --netns`); NULL: the master's own */
    const char *netns;
} dt__backend_launch;

/* ended(ctx, name, code): replica `name` has ended with code (0-255; 128+signal when it was
 * killed, 137 for a replica lost with its host). */
typedef void (*dt__backend_ended_fn)(void *ctx, const char *name, int code);

typedef struct dt__backend_ops {
    const char *name; /* "local", "kubernetes" */
    /* The form of the addresses in TF_CONFIG: 1 for <job>-<type>-<i>.<ns>.svc:<port>. */
    int kubernetes_addresses;
    /* Prepare l's launch (nothing runs yet). *facts: a new JSON object journaled with the
     * launch; *ticket goes to go(). */
    dt_err (*launch)(dt__backend *b, const dt__backend_launch *l, json_t **facts,
                     void **ticket);
    /* run 1: start what launch() prepared; 0: drop it. An error means nothing runs. */
    dt_err (*go)(dt__backend *b, void *ticket, int run);
    /* SIGTERM: stop it, with the backend's grace (the master sends SIGKILL when its own
     * grace is over); SIGKILL: at once. Nothing happens for a replica not running. */
    void (*signal)(dt__backend *b, const char *name, int sig);
    /* A master restarted: the replica journaled as launched with `facts`. 1: it still runs
     * and is watched (its end comes through events()); 0: it has ended, *code its exit code
     * (-1 when nobody knows: it vanished). */
    int (*adopt)(dt__backend *b, const char *name, const json_t *facts, int *code);
    /* The descriptor that becomes readable when events() has something (-1: none). */
    int (*event_fd)(dt__backend *b);
    /* Take what happened: ended() once per replica that has ended. */
    void (*events)(dt__backend *b, dt__backend_ended_fn ended, void *ctx);
    /* The last line the replica wrote to its log (its own account of why it ended), or "". */
    void (*last_line)(dt__backend *b, const char *name, char *out, size_t size);
    /* The replica has left the job (scaled away): what the backend keeps for it goes. */
    void (*forget)(dt__backend *b, const char *name);
    void (*free)(dt__backend *b);
} dt__backend_ops;

/* Every backend's state starts with this. */
struct dt__backend {
    const dt__backend_ops *ops;
};

/* The local backend for the job in job_dir (absolute): replicas' logs are
 * job_dir/logs/NAME.log, their exit codes job_dir/run/NAME.exit. SIGCHLD must be blocked
 * in every thread (the master does it): the backend reads it from its own signalfd. */
dt_err dt__local_backend_new(dt__backend **out, const char *job_dir);

typedef struct dt__kube dt__kube;
typedef struct dt__kube_backend_opts {
    const dt_job_spec *job;
    dt__kube *kube;            /* the connection (borrowed: used by the event loop's thread) */
    const char *namespace;     /* NULL: the connection's */
    const char *spec_path;     /* the manifest whose pod templates are passed through (NULL:
                                  job->path); for built-in roles, where pods find the spec */
    const char *spec_configmap; /* the ConfigMap holding the spec (mounted at its dir) */
    const char *job_dir;       /* the job dir, where pods mount the claim */
    const char *claim;         /* the PersistentVolumeClaim holding the job dir; NULL: none */
    const char *image;         /* dtrain's image for built-in roles (NULL: dtrain:latest) */
    const char *token_secret;  /* the Secret whose key "token" is the job's token */
    const json_t *owner;       /* an ownerReference put on every object; NULL: none */
    int grace_s;               /* a stopped pod's grace period (0: 30 s) */
} dt__kube_backend_opts;

/* The kubernetes backend (kube_backend.c): lists the job's pods, then watches them. */
dt_err dt__kube_backend_new(dt__backend **out, const dt__kube_backend_opts *o);
/* The same backend without a cluster, for the parsers of the API server's answers alone
 * (fuzz/fuzz_kube_responses.c): its pods those of list (a pod list answer, as the backend's
 * first GET), its events those of w (dt__kube_watch_offline; owned from here, stopped with
 * the backend). Only adopt, events, forget and free may be called: nothing else reaches the
 * API server. */
struct dt__kube_watch;
dt_err dt__kube_backend_offline(dt__backend **out, const dt_job_spec *job, const json_t *list,
                                struct dt__kube_watch *w);

static inline void dt__backend_free(dt__backend *b) {
    if (b) b->ops->free(b);
}

#endif
