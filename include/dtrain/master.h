/*
 * master.h - the job master: runs one job's replicas through a backend, applies the
 * training operator's policies, serves the job's HTTP API and journals its own state.
 *
 * One master per job. dt_master_run starts (or, with opts.resume, picks up again) the job
 * in job_dir and returns when the job has finished (Succeeded, Failed or Stopped) and the
 * clean-up policy has been applied. Everything it knows is kept in job_dir (docs/JOBS.md):
 *
 *   spec.yaml      the job spec as run          journal.jsonl  the master's journal
 *   status.json    the live status              result.json    the outcome, at the end
 *   master.json    URL, pid and token (0600)    master.lock    held while a master runs
 *   logs/<type>-<i>.log   each replica's stdout and stderr, appended across restarts
 *
 * The master is single-threaded: one event loop (epoll) owns the job's state and handles
 * child exits (signalfd), timers (timerfd) and HTTP requests. SIGINT and SIGTERM stop the
 * job cleanly: the trainers get SIGTERM (then SIGKILL after opts.stop_grace_ms), and once
 * they have ended the PS and the evaluator; built-in roles save their work when they get
 * it. A stopped job is continued by `dtrain run --resume` (opts.resume).
 */
#ifndef DTRAIN_MASTER_H
#define DTRAIN_MASTER_H

#include <stdio.h>

#include "dtrain/err.h"
#include "dtrain/job.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dt_job_outcome {
    DT_JOB_OUTCOME_SUCCEEDED = 0,
    DT_JOB_OUTCOME_FAILED,
    DT_JOB_OUTCOME_STOPPED, /* stopped by request (API, SIGINT, SIGTERM) */
    /* Not an end: the master left the job running (opts.leave_on_signal), for another
     * master to resume. */
    DT_JOB_OUTCOME_LEFT,
} dt_job_outcome;

#define DT_MASTER_LEASE_FLOOR_S 300 /* the least adaptive lease deadline, seconds */
/* SIGTERM to SIGKILL, as Kubernetes' default terminationGracePeriodSeconds */
#define DT_MASTER_STOP_GRACE_MS 30000

/* Run the replicas as pods (the kubernetes backend, docs/KUBERNETES.md). */
typedef struct dt_master_kube {
    const char *kubeconfig;     /* NULL: $KUBECONFIG, ~/.kube/config, in-cluster */
    const char *context;        /* NULL: the current context */
    int in_cluster;             /* the pod's service account */
    const char *namespace;      /* NULL: the context's (the pod's) */
    const char *image;          /* dtrain's image, for built-in roles */
    const char *claim;          /* the PersistentVolumeClaim mounted at the job dir */
    const char *spec_configmap; /* the ConfigMap holding the spec file */
    const char *token_secret;   /* the Secret holding the job's token (key "token") */
    const char *advertise_url;  /* the master's URL as replicas reach it (its Service) */
    /* The owner of every object made (the job's root object); all NULL: none. */
    const char *owner_api_version, *owner_kind, *owner_name, *owner_uid;
    /* The job's custom resource ("/apis/G/V/namespaces/NS/PLURAL/NAME"), whose status the
     * master writes; NULL: none (a job started by `dtrain run --backend kubernetes`). */
    const char *status_resource;
} dt_master_kube;

typedef struct dt_master_opts {
    const char *job_dir;     /* required */
    const char *spec_path;   /* the spec file to copy into job_dir (NULL on resume) */
    const char *bind_addr;   /* HTTP API and replica hosts; default 127.0.0.1 */
    int port;                /* HTTP API port; 0: any free one */
    const char *self_exe;    /* the dtrain binary, for built-in roles (default /proc/self/exe) */
    int resume;              /* pick up the job journaled in job_dir */
    int stop_grace_ms;       /* SIGTERM → SIGKILL delay (default DT_MASTER_STOP_GRACE_MS) */
    int heartbeat_timeout_ms; /* a replica silent this long loses its shards (default 30000) */
    int lease_timeout_ms;    /* a shard held this long without a report is re-queued, even
                                from a replica that beats; 0: 10 x the mean shard time, at
                                least DT_MASTER_LEASE_FLOOR_S */
    int live_table;          /* redraw a table of replicas on `out` (a terminal) */
    FILE *out;               /* progress lines / the table; NULL: silent */
    const dt_master_kube *kube; /* non-NULL: the kubernetes backend; NULL: local processes */
    /* Simulated hosts (local backend): replica p of the start order runs in the network
     * namespace netns_names[p % nnetns] (/run/netns/NAME) and is addressed at
     * netns_hosts[p % nnetns], an address of that namespace; bind_addr must then be
     * reachable from every namespace. nnetns 0: every replica here, at bind_addr. */
    const char *const *netns_names;
    const char *const *netns_hosts;
    int nnetns;
    /* SIGTERM or SIGINT make the master leave, the replicas running and the journal
     * synced, instead of stopping the job: a master pod being deleted or evicted is not a
     * stop request, and its Job makes another master that resumes. */
    int leave_on_signal;
    int ready_fd;            /* > 0: write one byte there once every replica is launched,
                                'R', or 'F' when the job failed while launching (used by
                                `dtrain run --detach`), then close it (left open, the
                                caller's, when dt_master_run fails before); <= 0: none */
} dt_master_opts;

/* Run the job to its end. Returns DT_OK when the job ran (whatever its outcome, given in
 * *outcome); an error when it could not run: DT_ERR_STATE when another master holds the
 * job dir, DT_ERR_IO for an unwritable job dir or a port in use, DT_ERR_SPEC when a
 * replica cannot be run locally (no command). */
dt_err dt_master_run(const dt_job_spec *job, const dt_master_opts *opts, dt_job_outcome *outcome);

/* May a new job named `name` start in dir (docs/JOBS.md, "The job directory")? DT_OK when
 * dir does not exist, is empty, or is a job dir (it holds what dtrain run makes) whose
 * spec.yaml, if any, is of a job of that name; else DT_ERR_STATE naming dir and what it
 * holds. Changes nothing. */
dt_err dt_master_check_job_dir(const char *dir, const char *name);

/* The job spec and opts for resuming the job in job_dir: loads job_dir/spec.yaml. */
dt_err dt_master_load_job(const char *job_dir, dt_job_spec **job);

#ifdef __cplusplus
}
#endif
#endif
