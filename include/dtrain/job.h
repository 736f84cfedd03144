/*
 * job.h - job specs: which replicas a job runs, how each is started, and what it is told.
 *
 * A job spec is loaded from one of these manifests (docs/JOBS.md has the schema):
 *
 *   - a Kubeflow TFJob: apiVersion kubeflow.org/v1, spec.tfReplicaSpecs.{Chief, Master,
 *     Worker, PS, Evaluator} (any letter case), spec.runPolicy, spec.successPolicy;
 *   - the older TFJob layouts: kubeflow.org/v1alpha2 and early v1 (cleanPodPolicy,
 *     backoffLimit, activeDeadlineSeconds, ttlSecondsAfterFinished directly on spec), and
 *     kubeflow.org/v1alpha1 (spec.replicaSpecs: a list with tfReplicaType MASTER/WORKER/PS);
 *   - dtrain's extension spec.elasticPolicy: {minReplicas: N} (TFJob v1 and v1alpha2,
 *     TrainJob): losing workers does not fail the job while N of them remain;
 *   - a Kubeflow PyTorchJob (spec.pytorchReplicaSpecs.{Master, Worker}): its replicas get
 *     MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK;
 *   - dtrain's own kind (apiVersion dtrain/v1, kind TrainJob) with spec.replicas,
 *     spec.strategy and its settings (spec.parameterServer, spec.allreduce): the engine's
 *     training spec run by dtrain's built-in roles.
 *
 * Loading is strict about what it understands and tolerant of what only Kubernetes uses
 * (image, resources, volumes, affinity, annotations, ... are kept or skipped, never an
 * error). A malformed spec gives DT_ERR_SPEC with one message "FILE:LINE: FIELD.PATH: what
 * is wrong", like the training spec's.
 *
 * The environment of each replica (TF_CONFIG byte-compatible with Kubeflow's training
 * operator, the PyTorch variables, DTRAIN_*) is computed by dt_job_env, for the local
 * backend (hosts 127.0.0.1 with ports the master allocated) or in Kubernetes form
 * (<job>-<type>-<i>.<namespace>.svc:<port>).
 */
#ifndef DTRAIN_JOB_H
#define DTRAIN_JOB_H

#include <stdint.h>

#include "dtrain/err.h"
#include "dtrain/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Replica types, in the order replicas are listed and started. */
typedef enum dt_replica_type {
    DT_REPLICA_TYPE_CHIEF = 0,
    DT_REPLICA_TYPE_MASTER,
    DT_REPLICA_TYPE_PS,
    DT_REPLICA_TYPE_WORKER,
    DT_REPLICA_TYPE_EVALUATOR,
    DT_REPLICA_TYPE__COUNT
} dt_replica_type;

/* "chief", "master", "ps", "worker", "evaluator": the lowercased name used in TF_CONFIG,
 * in replica names (worker-1) and in host names. */
const char *dt_replica_type_name(dt_replica_type t);
/* The type whose name (any letter case) is s; -1 when none. */
int dt_replica_type_parse(const char *s);

typedef enum dt_restart_policy {
    DT_RESTART_POLICY_NEVER = 0, /* the default, as in the training operator */
    DT_RESTART_POLICY_ALWAYS,
    DT_RESTART_POLICY_ON_FAILURE,
    DT_RESTART_POLICY_EXIT_CODE, /* exit 1-127: permanent failure; >= 128: retry */
} dt_restart_policy;
const char *dt_restart_policy_name(dt_restart_policy p); /* "OnFailure", ... */

typedef enum dt_clean_pod_policy {
    DT_CLEAN_POD_POLICY_RUNNING = 0, /* the default: stop replicas still running */
    DT_CLEAN_POD_POLICY_ALL,
    DT_CLEAN_POD_POLICY_NONE, /* leave them running */
} dt_clean_pod_policy;
const char *dt_clean_pod_policy_name(dt_clean_pod_policy p);

typedef enum dt_success_policy {
    DT_SUCCESS_POLICY_DEFAULT = 0, /* chief/master succeeded; without one, worker-0 */
    DT_SUCCESS_POLICY_ALL_WORKERS, /* every worker succeeded */
} dt_success_policy;

typedef enum dt_job_kind {
    DT_JOB_KIND_TFJOB = 0,
    DT_JOB_KIND_PYTORCHJOB,
    DT_JOB_KIND_TRAINJOB, /* dtrain's own */
} dt_job_kind;

typedef enum dt_strategy {
    DT_STRATEGY_NONE = 0, /* users' own commands (TFJob, PyTorchJob) */
    DT_STRATEGY_PARAMETER_SERVER,
    DT_STRATEGY_ALLREDUCE,
} dt_strategy;

/* The most parameter servers a TrainJob may have. */
#define DT_JOB_MAX_PS 64

/* spec.parameterServer of a TrainJob (strategy parameter_server). */
typedef struct dt_ps_job_conf {
    int sync;                /* 1: synchronous rounds (default 0: asynchronous) */
    int64_t sync_timeout_ms; /* sync: the longest a round waits for a worker (default 5000) */
    int64_t max_frame;       /* the data plane's largest frame in bytes (default 64 MiB) */
    int64_t checkpoint_secs; /* chief: also checkpoint every this many seconds (0: only by
                                training.checkpoint.every_steps, and at each epoch's end) */
    int minibatches_per_shard; /* batches in one data shard from the master (default 16) */
    int shared_memory;       /* 1 (default): a trainer on a PS's host passes tensors through
                                shared memory; 0: always over TCP */
    int wire_dtype;          /* a dt_ps_wire_dtype (dtrain/ps.h), wireDtype: the trainers'
                                pushes and push-pulls over TCP in float32 (default) or
                                bfloat16 */
} dt_ps_job_conf;

/* How an all-reduce job's global batch follows its size. */
typedef enum dt_global_batch {
    DT_GLOBAL_BATCH_SCALE = 0, /* each member trains training.batch_size samples per step:
                                  the global batch grows with the ring (the default) */
    DT_GLOBAL_BATCH_FIXED,     /* the global batch stays training.batch_size x the spec's
                                  trainers: with fewer members each accumulates the gradients
                                  of several micro-batches (gradient accumulation) */
} dt_global_batch;

/* spec.allreduce of a TrainJob (strategy allreduce). */
typedef struct dt_allreduce_job_conf {
    dt_global_batch global_batch;
    int64_t bucket_bytes;          /* gradients summed in buckets of about this size
                                      (bucketMB, default 4 MiB) */
    int64_t chunk_bytes;           /* the ring's pipelining unit (chunkKB, default 256 KiB) */
    int64_t timeout_ms;            /* the ring's data plane: no progress for this long fails
                                      a step (timeoutSeconds, default 10 s) */
    int64_t rendezvous_timeout_ms; /* the master forms a ring with the replicas that have
                                      joined once the first has waited this long
                                      (rendezvousTimeoutSeconds, default 10 s) */
    int64_t checkpoint_secs;       /* rank 0 also checkpoints every this many seconds (0: off) */
    int minibatches_per_shard;     /* batches in one data shard from the master (default 4) */
    int shared_memory;             /* 1 (default): ring neighbours on one host pass the data
                                      through shared memory (sharedMemory; docs/WIRE.md) */
    int wire_dtype;                /* a dt_ring_wire_dtype (dtrain/ring.h), wireDtype: the
                                      gradients between ring members in float32 (default) or
                                      bfloat16 */
} dt_allreduce_job_conf;

typedef struct dt_env_var {
    char *name;  /* owned */
    char *value; /* owned; "" when the manifest gives none (valueFrom is skipped) */
} dt_env_var;

typedef struct dt_replica_spec {
    int present;                /* the manifest has this type */
    int replicas;               /* default 1 */
    dt_restart_policy restart;  /* default Never (PyTorchJob, TrainJob: OnFailure) */
    char **argv;                /* owned, NULL-terminated: container command + args;
                                   NULL for a TrainJob (dtrain's built-in role) */
    int argc;
    dt_env_var *env; /* owned: the container's env, in manifest order */
    int nenv;
    char *working_dir;   /* owned, NULL when not given (container workingDir) */
    int port;            /* the container port named tfjob-port (pytorchjob-port for a
                            PyTorchJob); 0 when none: the default 2222 (23456) applies */
    char container[64];  /* the container run: the one named tensorflow (pytorch), else the first */
    char image[256];     /* kept for the Kubernetes backend; ignored locally */
    int line;            /* where the replica type is declared */
    /* Added by the job-spec loader (for messages about the container, e.g. from the local
     * backend): the field path of the container run, such as
     * "spec.tfReplicaSpecs.Worker.template.spec.containers[0]", and its line; "" and 0 for
     * a TrainJob. */
    char container_path[256];
    int container_line;
} dt_replica_spec;

typedef struct dt_job_spec {
    char path[DT_PATH_MAX]; /* the file it was loaded from */
    dt_job_kind kind;
    char api_version[64];
    char name[64];      /* metadata.name: a DNS-1035 label */
    char namespace[64]; /* metadata.namespace, default "default" */
    dt_replica_spec replicas[DT_REPLICA_TYPE__COUNT];

    dt_clean_pod_policy clean_pod_policy;
    int64_t backoff_limit;              /* -1: not set (no limit besides the policies) */
    int64_t active_deadline_seconds;    /* -1: not set */
    int64_t ttl_seconds_after_finished; /* -1: not set */
    dt_success_policy success_policy;
    /* spec.elasticPolicy.minReplicas (a dtrain extension for TFJob and TrainJob): the job
     * goes on while at least this many workers have not failed for good; 0: not elastic
     * (any replica failing for good fails the job). */
    int elastic_min_replicas;

    int pytorch_env;     /* set MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK */
    dt_strategy strategy;
    dt_ps_job_conf ps;   /* strategy parameter_server */
    dt_allreduce_job_conf allreduce; /* strategy allreduce (defaults for every TrainJob) */
    dt_spec *train;      /* owned: the training spec of a TrainJob; NULL otherwise */
} dt_job_spec;

/* Load and validate a job spec from the first document of a YAML file that holds one
 * (other documents, e.g. a PersistentVolumeClaim next to a TFJob, are skipped; a file
 * holding several jobs is an error naming the second). Caller frees with dt_job_spec_free. */
dt_err dt_job_spec_load(dt_job_spec **out, const char *path);
/* The same from a string; path is used in messages and to resolve relative data paths. */
dt_err dt_job_spec_parse(dt_job_spec **out, const char *yaml, size_t len, const char *path);
void dt_job_spec_free(dt_job_spec *job);

/* Total replicas over all types. */
int dt_job_spec_total_replicas(const dt_job_spec *job);

/* Can the local backend run this job? Every replica type of a TFJob or PyTorchJob with
 * replicas > 0 needs a command line (the container's command or args): without Kubernetes
 * the image's entrypoint is not available. A TrainJob always can (dtrain's built-in roles).
 * DT_ERR_SPEC "FILE:LINE: ...containers[0].command: required to run locally: ..." naming
 * the first replica type without one. */
dt_err dt_job_spec_check_local(const dt_job_spec *job);

/* Can the kubernetes backend run this job, as the training operator's admission webhook
 * would let it? metadata.name a DNS-1035 label whose replicas' Service names
 * (<job>-<type>-<index>) fit 63 characters; every replica's container has an image (a
 * TrainJob's run dtrain's). DT_ERR_SPEC "FILE:LINE: FIELD: ..." naming the first fault. */
dt_err dt_job_spec_check_kubernetes(const dt_job_spec *job);

/* "TFJob", "PyTorchJob", "TrainJob". */
const char *dt_job_kind_name(dt_job_kind k);
/* "none", "parameter_server", "allreduce". */
const char *dt_strategy_name(dt_strategy s);

/* How to form hosts in the cluster map. */
typedef struct dt_job_env_opts {
    int kubernetes;                /* 1: <job>-<type>-<i>.<namespace>.svc:<port> */
    const char *namespace;         /* kubernetes form: overrides the spec's (NULL: keep) */
    const char *cluster_domain;    /* kubernetes form: appended after ".svc" when set */
    const char *bind_host;         /* local form: the host of every address (default 127.0.0.1) */
    /* local form, simulated hosts (`dtrain run --netns`): when nhosts > 0, the replica at
     * position p of the start order is at hosts[p % nhosts] instead of bind_host */
    const char *const *hosts;
    int nhosts;
    /* local form: ports[type][i] for each replica; NULL (e.g. for `plan`) uses
     * 2222 + position in the start order as placeholders. */
    const int *const *ports;
    const char *master_url;        /* DTRAIN_MASTER (NULL: left out) */
    const char *job_token;         /* DTRAIN_JOB_TOKEN (NULL: left out) */
} dt_job_env_opts;

/* The environment of replica (type, index): the container's own env first, then
 * TF_CONFIG (left out when the job has one replica in all, and for a PyTorchJob, as the
 * training operator does; the one replica of a job that is not a PyTorchJob gets
 * DTRAIN_ADDRESS, its own "host:port", in its place), the PyTorch variables when
 * the job asks, DTRAIN_MASTER, DTRAIN_JOB_TOKEN and DTRAIN_REPLICA (e.g. "worker-1").
 * A variable dtrain sets replaces one of the same name given by the container.
 * *out (owned, *n entries) is freed with dt_job_env_free. */
dt_err dt_job_env(const dt_job_spec *job, dt_replica_type type, int index,
                  const dt_job_env_opts *opts, dt_env_var **out, int *n);
void dt_job_env_free(dt_env_var *env, int n);

/* The place of replica (type, index) in the start order (the enum order, then index). */
int dt_job_position(const dt_job_spec *job, dt_replica_type type, int index);

/* TF_CONFIG alone, exactly as the training operator's json.Marshal writes it:
 * {"cluster":{"chief":[...],"ps":[...],"worker":[...]},"task":{"type":"worker","index":1},
 *  "environment":"cloud"} with cluster keys sorted and no spaces; the evaluator's own
 * addresses are listed too. Caller frees *out with free(). */
dt_err dt_job_tf_config(const dt_job_spec *job, dt_replica_type type, int index,
                        const dt_job_env_opts *opts, char **out);

#ifdef __cplusplus
}
#endif
#endif
