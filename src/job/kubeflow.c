/*
 * kubeflow.c - the spec of Kubeflow TFJob and PyTorchJob manifests onto dt_job_spec.
 *
 * Design: one schema row per layout (designated initializers): where the replica specs are
 * (a mapping keyed by replica type, or v1alpha1's list), which types the kind has, the
 * container and port names the training operator looks for, the default restart policy and
 * the keys allowed under spec:. One set of functions reads the replica specs, their pod
 * templates and the chosen container for all layouts.
 *
 * Strict where dtrain acts (spec:, a replica spec, runPolicy, the container run, its env
 * and ports), tolerant where only Kubernetes does: the pod template's metadata and every
 * key of its spec but `containers` are not read, and a container's Kubernetes-only keys
 * (KUBERNETES_CONTAINER_KEYS below) are allowed and ignored. Only the container run (the
 * one named tensorflow / pytorch, else the first) is read; sidecars are not.
 *
 * Facts taken from the training operator (kubeflow/training-operator, read for reference):
 * default ports 2222 (port name tfjob-port, container tensorflow) and 23456
 * (pytorchjob-port, pytorch); default restart policies Never (TFJob) and OnFailure
 * (PyTorchJob); at most one chief/master replica.
 *
 * spec.elasticPolicy is a dtrain extension for TFJob v1 and v1alpha2 (job.c reads it): the
 * job survives losing workers. v1alpha1 does not take it (its terminationPolicy makes
 * worker-0 decide), and a PyTorchJob's (the operator's torchrun rendezvous, where the
 * world size itself changes) is refused with its own message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/job-impl.h"

#define TYPE_BIT(t) (1u << (t))

typedef struct kf_schema {
    const char *replicas_key;  /* "tfReplicaSpecs", "pytorchReplicaSpecs", "replicaSpecs" */
    unsigned types;            /* TYPE_BIT of each replica type the kind has */
    const char *type_list;     /* for messages */
    const char *container;     /* the container run when present */
    const char *port_name;     /* the port that gives dt_replica_spec.port (NULL: tfPort) */
    dt_restart_policy restart; /* default restart policy */
    const char *const *spec_keys;
    int run_policy, legacy, success_policy; /* which policy places the layout has */
    int elastic;                            /* dtrain's spec.elasticPolicy */
} kf_schema;

static const char *const tfjob_v1_keys[] = {"tfReplicaSpecs",        "runPolicy",
                                            "successPolicy",         "enableDynamicWorker",
                                            "cleanPodPolicy",        "backoffLimit",
                                            "activeDeadlineSeconds", "ttlSecondsAfterFinished",
                                            "elasticPolicy",         NULL};
static const char *const tfjob_v1alpha2_keys[] = {"tfReplicaSpecs",
                                                  "cleanPodPolicy",
                                                  "backoffLimit",
                                                  "activeDeadlineSeconds",
                                                  "ttlSecondsAfterFinished",
                                                  "elasticPolicy",
                                                  NULL};
/* runtimeId is spelled RuntimeId by the Go type (it has no json tag); tfImage and
 * schedulerName matter only to the v1alpha1 operator. */
static const char *const tfjob_v1alpha1_keys[] = {
    "replicaSpecs", "terminationPolicy", "tfImage", "runtimeId",
    "RuntimeId",    "schedulerName",     NULL};
static const char *const pytorch_v1_keys[] = {"pytorchReplicaSpecs",
                                              "runPolicy",
                                              "cleanPodPolicy",
                                              "backoffLimit",
                                              "activeDeadlineSeconds",
                                              "ttlSecondsAfterFinished",
                                              NULL};

#define ALL_TF_TYPES                                                                               \
    (TYPE_BIT(DT_REPLICA_TYPE_CHIEF) | TYPE_BIT(DT_REPLICA_TYPE_MASTER) |                          \
     TYPE_BIT(DT_REPLICA_TYPE_PS) | TYPE_BIT(DT_REPLICA_TYPE_WORKER) |                             \
     TYPE_BIT(DT_REPLICA_TYPE_EVALUATOR))

static const kf_schema schemas[] = {
    [DT__JOB_LAYOUT_TFJOB_V1] = {.replicas_key = "tfReplicaSpecs",
                                 .types = ALL_TF_TYPES,
                                 .type_list = "Chief, Master, Worker, PS, Evaluator",
                                 .container = "tensorflow",
                                 .port_name = "tfjob-port",
                                 .restart = DT_RESTART_POLICY_NEVER,
                                 .spec_keys = tfjob_v1_keys,
                                 .run_policy = 1,
                                 .legacy = 1,
                                 .success_policy = 1,
                                 .elastic = 1},
    [DT__JOB_LAYOUT_TFJOB_V1ALPHA2] = {.replicas_key = "tfReplicaSpecs",
                                       .types = ALL_TF_TYPES,
                                       .type_list = "Chief, Master, Worker, PS, Evaluator",
                                       .container = "tensorflow",
                                       .port_name = "tfjob-port",
                                       .restart = DT_RESTART_POLICY_NEVER,
                                       .spec_keys = tfjob_v1alpha2_keys,
                                       .legacy = 1,
                                       .elastic = 1},
    [DT__JOB_LAYOUT_TFJOB_V1ALPHA1] = {.replicas_key = "replicaSpecs",
                                       .types = TYPE_BIT(DT_REPLICA_TYPE_MASTER) |
                                                TYPE_BIT(DT_REPLICA_TYPE_WORKER) |
                                                TYPE_BIT(DT_REPLICA_TYPE_PS),
                                       .type_list = "MASTER, WORKER, PS",
                                       .container = "tensorflow",
                                       .port_name = NULL,
                                       .restart = DT_RESTART_POLICY_NEVER,
                                       .spec_keys = tfjob_v1alpha1_keys},
    [DT__JOB_LAYOUT_PYTORCH_V1] = {.replicas_key = "pytorchReplicaSpecs",
                                   .types = TYPE_BIT(DT_REPLICA_TYPE_MASTER) |
                                            TYPE_BIT(DT_REPLICA_TYPE_WORKER),
                                   .type_list = "Master, Worker",
                                   .container = "pytorch",
                                   .port_name = "pytorchjob-port",
                                   .restart = DT_RESTART_POLICY_ON_FAILURE,
                                   .spec_keys = pytorch_v1_keys,
                                   .run_policy = 1,
                                   .legacy = 1},
};

/* A container's keys: those dtrain reads, then those only Kubernetes reads (allowed, not
 * read). docs/JOBS.md lists both. */
static const char *const container_keys[] = {
    "name", "image", "command", "args", "env", "workingDir", "ports",
    /* KUBERNETES_CONTAINER_KEYS */
    "imagePullPolicy", "resources", "volumeMounts", "volumeDevices", "envFrom", "securityContext",
    "livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "terminationMessagePath",
    "terminationMessagePolicy", "stdin", "stdinOnce", "tty", "resizePolicy", "restartPolicy", NULL};

/* ---- containers ---- */

/* A list of strings (plain numbers and booleans are strings too) into argv[*argc...]. */
static dt_err read_strings(const dt_job_spec *job, const dt__yval *v, dt_replica_spec *rs) {
    dt_err e;
    if (!dt__yval_is_seq(v)) {
        char got[80];
        return dt__yerr(v, "expected a list of strings (e.g. [python, train.py]), got %s",
                        dt__yval_describe(v, got, sizeof got));
    }
    for (int i = 0; i < dt__yseq_size(v); i++) {
        dt__yval item;
        const char *s = NULL;
        dt__yseq_item(v, i, &item);
        if ((e = dt__yget_str(&item, &s))) return e;
        if (!(rs->argv[rs->argc] = dt__job_strdup(job, s))) return DT_ERR_NOMEM;
        rs->argc++;
    }
    return DT_OK;
}

static dt_err read_ports(const dt__yval *v, dt_replica_spec *rs, const char *port_name) {
    static const char *const keys[] = {"name",     "containerPort", "protocol",
                                       "hostPort", "hostIP",        NULL};
    dt_err e;
    if ((e = dt__yexpect_seq(v))) return e;
    for (int i = 0; i < dt__yseq_size(v); i++) {
        dt__yval item, pv, nv;
        const char *name = NULL;
        int port = 0;
        dt__yseq_item(v, i, &item);
        if ((e = dt__yexpect_map(&item)) || (e = dt__ymap_check_keys(&item, keys, "a port")) ||
            (e = dt__ymap_require(&item, "containerPort", &pv)) ||
            (e = dt__yget_int(&pv, 1, 65535, &port)))
            return e;
        if (dt__ymap_get(&item, "name", &nv) && (e = dt__yget_str(&nv, &name))) return e;
        if (name && port_name && !strcmp(name, port_name)) rs->port = port;
    }
    return DT_OK;
}

static dt_err parse_container(const dt_job_spec *job, const dt__yval *c, dt_replica_spec *rs,
                              const char *port_name) {
    dt__yval v, cmd, args;
    dt_err e;
    const char *s = NULL;
    if ((e = dt__ymap_check_keys(c, container_keys, "a container"))) return e;
    snprintf(rs->container_path, sizeof rs->container_path, "%s", c->path);
    rs->container_line = c->line;
    if ((dt__ymap_get(c, "name", &v) &&
         (e = dt__yget_strbuf(&v, rs->container, sizeof rs->container))) ||
        (dt__ymap_get(c, "image", &v) && (e = dt__yget_strbuf(&v, rs->image, sizeof rs->image))))
        return e;
    int has_cmd = dt__ymap_get(c, "command", &cmd), has_args = dt__ymap_get(c, "args", &args);
    int n = (has_cmd ? dt__yseq_size(&cmd) : 0) + (has_args ? dt__yseq_size(&args) : 0);
    if (!(rs->argv = calloc((size_t)n + 1, sizeof *rs->argv)))
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", job->path);
    if ((has_cmd && (e = read_strings(job, &cmd, rs))) ||
        (has_args && (e = read_strings(job, &args, rs))))
        return e;
    if (dt__ymap_get(c, "env", &v) && (e = dt__job_parse_env(&v, rs, job))) return e;
    if (dt__ymap_get(c, "workingDir", &v)) {
        if ((e = dt__yget_str(&v, &s))) return e;
        if (*s && !(rs->working_dir = dt__job_strdup(job, s))) return DT_ERR_NOMEM;
    }
    if (dt__ymap_get(c, "ports", &v) && (e = read_ports(&v, rs, port_name))) return e;
    return DT_OK;
}

/* template: {metadata, spec: {containers: [...], anything else Kubernetes reads}}. */
static dt_err parse_template(const dt_job_spec *job, const dt__yval *m, dt_replica_spec *rs,
                             const kf_schema *sc) {
    static const char *const keys[] = {"metadata", "spec", NULL};
    dt__yval tpl, ps, list, item, nv;
    dt_err e;
    char got[80];
    if ((e = dt__ymap_require(m, "template", &tpl)) || (e = dt__yexpect_map(&tpl)) ||
        (e = dt__ymap_check_keys(&tpl, keys, "a pod template")) ||
        (e = dt__ymap_require(&tpl, "spec", &ps)) || (e = dt__yexpect_map(&ps)) ||
        (e = dt__ymap_require(&ps, "containers", &list)))
        return e;
    if (!dt__yval_is_seq(&list) || dt__yseq_size(&list) == 0)
        return dt__yerr(&list, "expected a non-empty list of containers, got %s",
                        dt__yval_is_seq(&list) ? "an empty list"
                                               : dt__yval_describe(&list, got, sizeof got));
    int chosen = -1;
    for (int i = 0; i < dt__yseq_size(&list); i++) {
        const char *name = NULL;
        dt__yseq_item(&list, i, &item);
        if ((e = dt__yexpect_map(&item))) return e;
        if (dt__ymap_get(&item, "name", &nv) && (e = dt__yget_str(&nv, &name))) return e;
        if (chosen < 0 && name && !strcmp(name, sc->container)) chosen = i;
    }
    dt__yseq_item(&list, chosen < 0 ? 0 : chosen, &item);
    return parse_container(job, &item, rs, sc->port_name);
}

/* ---- replica specs ---- */

/* The value of one entry of tfReplicaSpecs / pytorchReplicaSpecs. */
static dt_err parse_replica(dt_job_spec *job, dt_replica_type t, const dt__yval *m,
                            const kf_schema *sc) {
    static const char *const keys[] = {"replicas", "template", "restartPolicy", NULL};
    dt_replica_spec *rs = &job->replicas[t];
    dt__yval v;
    dt_err e;
    rs->restart = sc->restart;
    if ((e = dt__yexpect_map(m)) || (e = dt__ymap_check_keys(m, keys, "a replica spec")) ||
        (dt__ymap_get(m, "replicas", &v) && (e = dt__job_parse_count(&v, t, &rs->replicas))) ||
        (e = dt__job_parse_restart(m, &rs->restart)))
        return e;
    return parse_template(job, m, rs, sc);
}

static dt_err parse_replica_map(dt_job_spec *job, const dt__yval *spec, const kf_schema *sc) {
    dt__yval m;
    dt_err e;
    if ((e = dt__ymap_require(spec, sc->replicas_key, &m)) || (e = dt__yexpect_map(&m))) return e;
    for (int i = 0; i < dt__ymap_size(&m); i++) {
        dt__yval val;
        const char *key = NULL;
        int key_line = 0;
        char buf[48];
        dt__ymap_entry(&m, i, &key, &key_line, &val);
        if (!key) return dt__yerr_line(&val, key_line, "a replica type must be a plain string");
        int t = dt_replica_type_parse(key);
        if (t < 0 || !(sc->types & TYPE_BIT(t)))
            return dt__yerr_line(&val, key_line, "unknown replica type '%s' (allowed: %s)",
                                 dt__job_show_key(key, buf, sizeof buf), sc->type_list);
        if ((e = dt__job_declare_type(job, (dt_replica_type)t, &val, key_line, key)) ||
            (e = parse_replica(job, (dt_replica_type)t, &val, sc)))
            return e;
    }
    return dt__job_check_total(job, &m);
}

/* v1alpha1: spec.replicaSpecs: [{replicas, tfReplicaType, tfPort, template}, ...] */
static dt_err parse_replica_list(dt_job_spec *job, const dt__yval *spec, const kf_schema *sc) {
    /* IsDefaultPS (the v1alpha1 operator's built-in parameter server) is not supported; the
     * key is accepted so such manifests still load when they also give a template. */
    static const char *const keys[] = {"replicas",    "tfReplicaType", "tfPort", "template",
                                       "isDefaultPS", "IsDefaultPS",   NULL};
    dt__yval list, item, v;
    dt_err e;
    char got[80], buf[48];
    if ((e = dt__ymap_require(spec, sc->replicas_key, &list))) return e;
    if (!dt__yval_is_seq(&list) || dt__yseq_size(&list) == 0)
        return dt__yerr(&list, "expected a non-empty list of replica specs, got %s",
                        dt__yval_is_seq(&list) ? "an empty list"
                                               : dt__yval_describe(&list, got, sizeof got));
    for (int i = 0; i < dt__yseq_size(&list); i++) {
        const char *s = NULL;
        dt__yseq_item(&list, i, &item);
        if ((e = dt__yexpect_map(&item)) ||
            (e = dt__ymap_check_keys(&item, keys, "a replica spec")) ||
            (e = dt__ymap_require(&item, "tfReplicaType", &v)) || (e = dt__yget_str(&v, &s)))
            return e;
        int t = dt_replica_type_parse(s);
        if (t < 0 || !(sc->types & TYPE_BIT(t)))
            return dt__yerr(&v, "unknown replica type '%s' (allowed: %s)",
                            dt__job_show_key(s, buf, sizeof buf), sc->type_list);
        dt_replica_spec *rs = &job->replicas[t];
        if ((e = dt__job_declare_type(job, (dt_replica_type)t, &v, v.line, s))) return e;
        rs->restart = sc->restart;
        if ((dt__ymap_get(&item, "replicas", &v) &&
             (e = dt__job_parse_count(&v, (dt_replica_type)t, &rs->replicas))) ||
            (dt__ymap_get(&item, "tfPort", &v) && (e = dt__yget_int(&v, 1, 65535, &rs->port))) ||
            (e = parse_template(job, &item, rs, sc)))
            return e;
    }
    return dt__job_check_total(job, &list);
}

/* v1alpha1 terminationPolicy: {chief: {replicaName, replicaIndex}}. dtrain ends a job when
 * master-0 finishes (worker-0 without a master): that is the operator's default, and the
 * only chief this accepts. */
static dt_err parse_termination(const dt_job_spec *job, const dt__yval *spec) {
    static const char *const keys[] = {"chief", NULL};
    static const char *const chief_keys[] = {"replicaName", "replicaIndex", NULL};
    dt__yval m, c, v;
    dt_err e;
    const char *name = NULL;
    int index = 0;
    char buf[48];
    if (!dt__ymap_get(spec, "terminationPolicy", &m)) return DT_OK;
    if ((e = dt__yexpect_map(&m)) || (e = dt__ymap_check_keys(&m, keys, NULL))) return e;
    if (!dt__ymap_get(&m, "chief", &c)) return DT_OK;
    if ((e = dt__yexpect_map(&c)) || (e = dt__ymap_check_keys(&c, chief_keys, NULL)) ||
        (e = dt__ymap_require(&c, "replicaName", &v)) || (e = dt__yget_str(&v, &name)))
        return e;
    int t = dt_replica_type_parse(name);
    if (t != DT_REPLICA_TYPE_MASTER && t != DT_REPLICA_TYPE_WORKER && t != DT_REPLICA_TYPE_PS)
        return dt__yerr(&v, "unknown replica type '%s' (allowed: MASTER, WORKER, PS)",
                        dt__job_show_key(name, buf, sizeof buf));
    if (dt__ymap_get(&c, "replicaIndex", &v) && (e = dt__yget_int(&v, 0, INT32_MAX, &index)))
        return e;
    const dt_replica_spec *master = &job->replicas[DT_REPLICA_TYPE_MASTER];
    int want =
        master->present && master->replicas > 0 ? DT_REPLICA_TYPE_MASTER : DT_REPLICA_TYPE_WORKER;
    if (t != want || index != 0)
        return dt__yerr(&c,
                        "dtrain ends the job when %s-0 finishes (master-0, or worker-0 without "
                        "a master); a chief of %s %d is not supported",
                        dt_replica_type_name((dt_replica_type)want), name, index);
    return DT_OK;
}

dt_err dt__job_parse_kubeflow(dt_job_spec *job, const dt__yval *root, dt__job_layout layout) {
    const kf_schema *sc = &schemas[layout];
    dt__yval spec, v;
    dt_err e;
    if ((e = dt__ymap_require(root, "spec", &spec)) || (e = dt__yexpect_map(&spec))) return e;
    if (layout == DT__JOB_LAYOUT_PYTORCH_V1 && dt__ymap_get(&spec, "elasticPolicy", &v))
        return dt__yerr_line(&v, v.decl_line, "elastic PyTorch jobs are not supported by dtrain");
    if ((e = dt__ymap_check_keys(&spec, sc->spec_keys, NULL))) return e;
    job->strategy = DT_STRATEGY_NONE;
    job->pytorch_env = layout == DT__JOB_LAYOUT_PYTORCH_V1;
    if (layout == DT__JOB_LAYOUT_TFJOB_V1ALPHA1)
        return (e = parse_replica_list(job, &spec, sc)) ? e : parse_termination(job, &spec);
    if ((e = parse_replica_map(job, &spec, sc)) ||
        (e = dt__job_parse_policies(job, &spec, sc->run_policy, sc->legacy)) ||
        (sc->success_policy && (e = dt__job_parse_success_policy(job, &spec))) ||
        (sc->elastic && (e = dt__job_parse_elastic(job, &spec))))
        return e;
    /* enableDynamicWorker changes only the TF_CONFIG of an operator that supports it: read
     * for its type, not acted on. */
    int dynamic = 0;
    if (dt__ymap_get(&spec, "enableDynamicWorker", &v) && (e = dt__yget_bool(&v, &dynamic)))
        return e;
    return DT_OK;
}
