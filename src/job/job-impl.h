/*
 * job-impl.h - the parts of the job-spec loader (include/dtrain/job.h).
 *
 * job.c finds the job document in a YAML stream, dispatches on (apiVersion, kind) through a
 * table of layouts, and holds the readers every kind shares (metadata, run policy, success
 * policy, restart policy, env lists, the replica checks). kubeflow.c reads TFJob and
 * PyTorchJob replica specs and their pod templates; trainjob.c reads dtrain's TrainJob;
 * env.c computes replica environments and TF_CONFIG.
 *
 * Every reader reports through yaml_doc's dt__yerr ("FILE:LINE: FIELD.PATH: ...") and
 * leaves whatever it allocated hanging off the dt_job_spec, which dt_job_spec_free
 * releases (so partial results must always be consistent: counts match what is filled).
 */
#ifndef DTRAIN_JOB_IMPL_H
#define DTRAIN_JOB_IMPL_H

#include "dtrain/job.h"
#include "spec/yaml_doc-impl.h"

/* Most replicas of one type. */
#define DT__JOB_MAX_REPLICAS 1024
/* The default ports of the training operator. */
#define DT__JOB_TF_PORT 2222
#define DT__JOB_PYTORCH_PORT 23456

/* The manifest layouts dtrain reads (docs/JOBS.md). */
typedef enum dt__job_layout {
    DT__JOB_LAYOUT_TFJOB_V1 = 0,   /* kubeflow.org/v1 TFJob */
    DT__JOB_LAYOUT_TFJOB_V1ALPHA2, /* kubeflow.org/v1alpha2 TFJob */
    DT__JOB_LAYOUT_TFJOB_V1ALPHA1, /* kubeflow.org/v1alpha1 TFJob: a list of replica specs */
    DT__JOB_LAYOUT_PYTORCH_V1,     /* kubeflow.org/v1 PyTorchJob */
    DT__JOB_LAYOUT_TRAINJOB,       /* dtrain/v1 TrainJob */
} dt__job_layout;

/* The replica type names as Kubeflow spells them: "Chief", "Master", "PS", "Worker",
 * "Evaluator". */
extern const char *const dt__job_kubeflow_type_names[DT_REPLICA_TYPE__COUNT];

/* ---- kubeflow.c, trainjob.c ---- */

/* The spec part of a TFJob or PyTorchJob (metadata is read already). */
dt_err dt__job_parse_kubeflow(dt_job_spec *job, const dt__yval *root, dt__job_layout layout);
/* A whole TrainJob document; base_dir resolves relative data paths (NULL: kept). */
dt_err dt__job_parse_trainjob(dt_job_spec *job, const dt__yval *root, const char *base_dir);

/* ---- shared readers (job.c) ---- */

/* metadata.name (required, DNS-1035 label) and metadata.namespace (DNS-1123 label). Other
 * metadata keys are not looked at. */
dt_err dt__job_parse_metadata(dt_job_spec *job, const dt__yval *root);
/* runPolicy (when run_policy), and with legacy the same four policies directly on spec;
 * a policy given in both places is an error naming both. */
dt_err dt__job_parse_policies(dt_job_spec *job, const dt__yval *spec, int run_policy, int legacy);
/* spec.successPolicy: absent, "" or AllWorkers. */
dt_err dt__job_parse_success_policy(dt_job_spec *job, const dt__yval *spec);
/* spec.elasticPolicy when present: {minReplicas: 1..the number of workers} into
 * job->elastic_min_replicas. Read after the replicas. */
dt_err dt__job_parse_elastic(dt_job_spec *job, const dt__yval *spec);
/* m.restartPolicy when present (Always, OnFailure, Never, ExitCode) into *out. */
dt_err dt__job_parse_restart(const dt__yval *m, dt_restart_policy *out);
/* A replica count in [0, DT__JOB_MAX_REPLICAS]; at most 1 for a chief or master. */
dt_err dt__job_parse_count(const dt__yval *v, dt_replica_type t, int *out);
/* A list of {name, value} / {name, valueFrom} into rs->env ({name, valueFrom} skipped). */
dt_err dt__job_parse_env(const dt__yval *list, dt_replica_spec *rs, const dt_job_spec *job);
/* Mark replica type t present, declared by key at key_line (val: its value, for the path),
 * refusing a type given twice (in any letter case) and a chief next to a master. */
dt_err dt__job_declare_type(dt_job_spec *job, dt_replica_type t, const dt__yval *val, int key_line,
                            const char *key);
/* The whole job: at least one replica in total (at = the replica specs' mapping). */
dt_err dt__job_check_total(const dt_job_spec *job, const dt__yval *at);

/* key for a message: at most 40 bytes, control characters replaced by '?'. */
const char *dt__job_show_key(const char *key, char *buf, size_t cap);
/* strdup that records DT_ERR_NOMEM naming the job's file; NULL on failure. */
char *dt__job_strdup(const dt_job_spec *job, const char *s);

#endif
