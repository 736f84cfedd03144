/*
 * job.c - job specs: find the job in a YAML stream, dispatch on (apiVersion, kind), and the
 * readers every kind shares.
 *
 * Design: a manifest file may hold several documents (`---`), e.g. a PersistentVolumeClaim
 * next to the TFJob. Every document is loaded in turn (yaml_doc); one whose `kind` is
 * TFJob, PyTorchJob or TrainJob is a job document, every other one is skipped unread. The
 * first job document is parsed; a second one is an error naming its line (so the whole
 * stream is read, and a syntax error anywhere in it is reported). The (apiVersion, kind)
 * pair selects a row of the layouts table, whose parser reads the rest: kubeflow.c for
 * TFJob/PyTorchJob, trainjob.c for dtrain's TrainJob.
 *
 * Tolerance: a Kubeflow manifest is also a Kubernetes object, so what only Kubernetes reads
 * (metadata.labels, annotations, status, the pod template's volumes, affinity, ...) is
 * skipped, while the keys dtrain acts on are checked strictly (kubeflow.c lists which).
 *
 * Memory: everything a parser allocates hangs off the dt_job_spec as soon as it is made,
 * with counts matching what is filled, so dt_job_spec_free releases any partial result.
 */
#include "job/job-impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "spec/spec-impl.h"

const char *const dt__job_kubeflow_type_names[DT_REPLICA_TYPE__COUNT] = {
    [DT_REPLICA_TYPE_CHIEF] = "Chief",
    [DT_REPLICA_TYPE_MASTER] = "Master",
    [DT_REPLICA_TYPE_PS] = "PS",
    [DT_REPLICA_TYPE_WORKER] = "Worker",
    [DT_REPLICA_TYPE_EVALUATOR] = "Evaluator",
};

static const char *const type_names[DT_REPLICA_TYPE__COUNT] = {
    [DT_REPLICA_TYPE_CHIEF] = "chief",
    [DT_REPLICA_TYPE_MASTER] = "master",
    [DT_REPLICA_TYPE_PS] = "ps",
    [DT_REPLICA_TYPE_WORKER] = "worker",
    [DT_REPLICA_TYPE_EVALUATOR] = "evaluator",
};

const char *dt_replica_type_name(dt_replica_type t) {
    return (unsigned)t < DT_REPLICA_TYPE__COUNT ? type_names[t] : "unknown";
}

int dt_replica_type_parse(const char *s) {
    for (int t = 0; s && t < DT_REPLICA_TYPE__COUNT; t++)
        if (!strcasecmp(s, type_names[t])) return t;
    return -1;
}

const char *dt_restart_policy_name(dt_restart_policy p) {
    static const char *const names[] = {[DT_RESTART_POLICY_NEVER] = "Never",
                                        [DT_RESTART_POLICY_ALWAYS] = "Always",
                                        [DT_RESTART_POLICY_ON_FAILURE] = "OnFailure",
                                        [DT_RESTART_POLICY_EXIT_CODE] = "ExitCode"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "unknown";
}

const char *dt_clean_pod_policy_name(dt_clean_pod_policy p) {
    static const char *const names[] = {[DT_CLEAN_POD_POLICY_RUNNING] = "Running",
                                        [DT_CLEAN_POD_POLICY_ALL] = "All",
                                        [DT_CLEAN_POD_POLICY_NONE] = "None"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "unknown";
}

static const char *const kind_names[] = {[DT_JOB_KIND_TFJOB] = "TFJob",
                                         [DT_JOB_KIND_PYTORCHJOB] = "PyTorchJob",
                                         [DT_JOB_KIND_TRAINJOB] = "TrainJob"};

const char *dt_job_kind_name(dt_job_kind k) {
    return (unsigned)k < sizeof kind_names / sizeof kind_names[0] ? kind_names[k] : "unknown";
}

const char *dt_strategy_name(dt_strategy s) {
    static const char *const names[] = {[DT_STRATEGY_NONE] = "none",
                                        [DT_STRATEGY_PARAMETER_SERVER] = "parameter_server",
                                        [DT_STRATEGY_ALLREDUCE] = "allreduce"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

char *dt__job_strdup(const dt_job_spec *job, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (!d) {
        dt_err_set(DT_ERR_NOMEM, "%s: out of memory", job->path);
        return NULL;
    }
    memcpy(d, s, n);
    return d;
}

const char *dt__job_show_key(const char *key, char *buf, size_t cap) {
    size_t n = 0;
    for (; key[n] && n < 40 && n + 1 < cap; n++)
        buf[n] = ((unsigned char)key[n] < 0x20 || key[n] == 0x7f) ? '?' : key[n];
    buf[n] = '\0';
    return buf;
}

/* ---- metadata ---- */

/* A DNS label: [a-z]([-a-z0-9]*[a-z0-9])? (DNS-1035) or [a-z0-9]([-a-z0-9]*[a-z0-9])?
 * (DNS-1123, digit_first), at most 63 characters. */
static int is_dns_label(const char *s, int digit_first) {
    size_t n = strlen(s);
    if (n == 0 || n > 63) return 0;
    if (!((s[0] >= 'a' && s[0] <= 'z') || (digit_first && s[0] >= '0' && s[0] <= '9'))) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return 0;
    }
    return s[n - 1] != '-';
}

dt_err dt__job_parse_metadata(dt_job_spec *job, const dt__yval *root) {
    dt__yval m, v;
    dt_err e;
    const char *s = NULL;
    char got[80];
    if (!dt__ymap_get(root, "metadata", &m)) return dt__yerr(&m, "required field missing");
    if ((e = dt__yexpect_map(&m)) || (e = dt__ymap_require(&m, "name", &v)) ||
        (e = dt__yget_str(&v, &s)))
        return e;
    if (!is_dns_label(s, 0))
        return dt__yerr(&v,
                        "%s is not a valid name: use at most 63 lowercase letters, digits and "
                        "'-', starting with a letter and not ending with '-'",
                        dt__yval_describe(&v, got, sizeof got));
    memcpy(job->name, s, strlen(s) + 1);
    if (dt__ymap_get(&m, "namespace", &v)) {
        if ((e = dt__yget_str(&v, &s))) return e;
        if (!is_dns_label(s, 1))
            return dt__yerr(&v,
                            "%s is not a valid namespace: use at most 63 lowercase letters, "
                            "digits and '-', not starting or ending with '-'",
                            dt__yval_describe(&v, got, sizeof got));
        memcpy(job->namespace, s, strlen(s) + 1);
    }
    return DT_OK;
}

/* ---- duplicate keys ---- */

/* No mapping of a job document may repeat a key, the parts only Kubernetes reads included
 * (metadata.labels, the pod template's spec, status): the Kubernetes API server refuses such
 * a manifest, and here the second value would be silently ignored. The walk visits each node
 * once (aliases share nodes and may form a cycle), its depth bounded like the nesting the
 * loader accepts, and a mapping's keys are sorted, not compared pairwise, so a big mapping
 * costs n log n. */

typedef struct node_set {
    const void **slot;
    size_t cap, n;
} node_set;

/* 1 when p was added, 0 when it was there, -1 out of memory. */
static int node_set_add(node_set *s, const void *p) {
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        const void **slot = calloc(cap, sizeof *slot);
        if (!slot) return -1;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slot[i]) continue;
            size_t h = ((uintptr_t)s->slot[i] >> 4) * 0x9E3779B97F4A7C15ull & (cap - 1);
            while (slot[h]) h = (h + 1) & (cap - 1);
            slot[h] = s->slot[i];
        }
        free(s->slot);
        s->slot = slot;
        s->cap = cap;
    }
    size_t h = ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull & (s->cap - 1);
    for (; s->slot[h]; h = (h + 1) & (s->cap - 1))
        if (s->slot[h] == p) return 0;
    s->slot[h] = p;
    s->n++;
    return 1;
}

typedef struct key_ref {
    const char *key;
    int line, index;
} key_ref;

static int key_ref_cmp(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* The first repeated key of mapping m (in document order), if any. */
static dt_err map_unique_keys(const dt_job_spec *job, const dt__yval *m) {
    int n = dt__ymap_size(m), k = 0;
    if (n < 2) return DT_OK;
    key_ref *keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", job->path);
    for (int i = 0; i < n; i++) {
        dt__yval v;
        const char *key = NULL;
        int line = 0;
        dt__ymap_entry(m, i, &key, &line, &v);
        if (key) keys[k++] = (key_ref){key, line, i};
    }
    qsort(keys, (size_t)k, sizeof *keys, key_ref_cmp);
    int rep = -1; /* position in keys of the earliest second occurrence */
    for (int i = 1; i < k; i++)
        if (!strcmp(keys[i].key, keys[i - 1].key) && (rep < 0 || keys[i].index < keys[rep].index))
            rep = i;
    dt_err e = DT_OK;
    if (rep >= 0) {
        int first = rep;
        while (first > 0 && !strcmp(keys[first - 1].key, keys[rep].key)) first--;
        char q[64];
        size_t j = 0;
        for (const char *c = keys[rep].key; *c && j + 4 < sizeof q; c++)
            q[j++] = (unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c;
        if (keys[rep].key[j]) q[j++] = '.', q[j++] = '.', q[j++] = '.';
        q[j] = '\0';
        dt__yval v;
        dt__ymap_entry(m, keys[rep].index, NULL, NULL, &v);
        e = dt__yerr_line(&v, keys[rep].line, "duplicate key '%s' (first at line %d)", q,
                          keys[first].line);
    }
    free(keys);
    return e;
}

static dt_err walk_unique_keys(const dt_job_spec *job, const dt__yval *v, node_set *seen,
                               int depth) {
    if (!dt__yval_is_map(v) && !dt__yval_is_seq(v)) return DT_OK;
    int added = node_set_add(seen, v->node);
    if (added < 0) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", job->path);
    if (!added) return DT_OK;
    if (depth >= DT__YDEPTH_MAX)
        return dt__yerr(v, "nested deeper than %d levels (through aliases)", DT__YDEPTH_MAX);
    dt__yval c;
    dt_err e;
    if (dt__yval_is_seq(v)) {
        for (int i = 0; i < dt__yseq_size(v); i++) {
            dt__yseq_item(v, i, &c);
            if ((e = walk_unique_keys(job, &c, seen, depth + 1))) return e;
        }
        return DT_OK;
    }
    if ((e = map_unique_keys(job, v))) return e;
    for (int i = 0; i < dt__ymap_size(v); i++) {
        dt__ymap_entry(v, i, NULL, NULL, &c);
        if ((e = walk_unique_keys(job, &c, seen, depth + 1))) return e;
    }
    return DT_OK;
}

static dt_err check_unique_keys(const dt_job_spec *job, const dt__yval *root) {
    node_set seen = {0};
    dt_err e = walk_unique_keys(job, root, &seen, 0);
    free(seen.slot);
    return e;
}

/* ---- policies ---- */

static const dt__yenum clean_pod_policies[] = {{"Running", DT_CLEAN_POD_POLICY_RUNNING},
                                               {"All", DT_CLEAN_POD_POLICY_ALL},
                                               {"None", DT_CLEAN_POD_POLICY_NONE},
                                               {NULL, 0}};

static const dt__yenum restart_policies[] = {{"Never", DT_RESTART_POLICY_NEVER},
                                             {"Always", DT_RESTART_POLICY_ALWAYS},
                                             {"OnFailure", DT_RESTART_POLICY_ON_FAILURE},
                                             {"ExitCode", DT_RESTART_POLICY_EXIT_CODE},
                                             {NULL, 0}};

enum { POLICY_CLEAN_POD, POLICY_BACKOFF, POLICY_DEADLINE, POLICY_TTL, POLICY__COUNT };
static const char *const policy_keys[POLICY__COUNT] = {
    [POLICY_CLEAN_POD] = "cleanPodPolicy",
    [POLICY_BACKOFF] = "backoffLimit",
    [POLICY_DEADLINE] = "activeDeadlineSeconds",
    [POLICY_TTL] = "ttlSecondsAfterFinished",
};

static dt_err read_policy(dt_job_spec *job, int which, const dt__yval *v) {
    int x = 0;
    dt_err e;
    switch (which) {
    case POLICY_CLEAN_POD:
        if ((e = dt__yget_enum(v, clean_pod_policies, &x))) return e;
        job->clean_pod_policy = (dt_clean_pod_policy)x;
        return DT_OK;
    case POLICY_BACKOFF:
        return dt__yget_i64(v, 0, INT32_MAX, &job->backoff_limit);
    case POLICY_DEADLINE:
        return dt__yget_i64(v, 1, INT64_MAX, &job->active_deadline_seconds);
    default:
        return dt__yget_i64(v, 0, INT32_MAX, &job->ttl_seconds_after_finished);
    }
}

dt_err dt__job_parse_policies(dt_job_spec *job, const dt__yval *spec, int run_policy, int legacy) {
    /* schedulingPolicy, suspend and managedBy only matter to a Kubernetes scheduler or
     * controller: accepted, not read. */
    static const char *const rp_keys[] = {"cleanPodPolicy",
                                          "backoffLimit",
                                          "activeDeadlineSeconds",
                                          "ttlSecondsAfterFinished",
                                          "schedulingPolicy",
                                          "suspend",
                                          "managedBy",
                                          NULL};
    dt__yval rp, a, b;
    dt_err e;
    int has_rp = 0;
    if (run_policy && dt__ymap_get(spec, "runPolicy", &rp)) {
        if ((e = dt__yexpect_map(&rp)) || (e = dt__ymap_check_keys(&rp, rp_keys, NULL))) return e;
        has_rp = 1;
    }
    for (int k = 0; k < POLICY__COUNT; k++) {
        int ha = legacy && dt__ymap_get(spec, policy_keys[k], &a);
        int hb = has_rp && dt__ymap_get(&rp, policy_keys[k], &b);
        if (ha && hb)
            return dt__yerr_line(&a, a.decl_line,
                                 "also given as %s at line %d: give it in one place", b.path,
                                 b.decl_line);
        if ((ha && (e = read_policy(job, k, &a))) || (hb && (e = read_policy(job, k, &b))))
            return e;
    }
    return DT_OK;
}

dt_err dt__job_parse_success_policy(dt_job_spec *job, const dt__yval *spec) {
    dt__yval v;
    const char *s = NULL;
    dt_err e;
    if (!dt__ymap_get(spec, "successPolicy", &v) || dt__yval_is_null(&v)) return DT_OK;
    if ((e = dt__yget_str(&v, &s))) return e;
    if (!*s) {
        job->success_policy = DT_SUCCESS_POLICY_DEFAULT;
    } else if (!strcmp(s, "AllWorkers")) {
        job->success_policy = DT_SUCCESS_POLICY_ALL_WORKERS;
    } else {
        char got[80];
        return dt__yerr(&v, "expected \"\" or AllWorkers, got %s",
                        dt__yval_describe(&v, got, sizeof got));
    }
    return DT_OK;
}

dt_err dt__job_parse_elastic(dt_job_spec *job, const dt__yval *spec) {
    static const char *const keys[] = {"minReplicas", NULL};
    const dt_replica_spec *w = &job->replicas[DT_REPLICA_TYPE_WORKER];
    int workers = w->present ? w->replicas : 0, n = 0;
    const char *type = job->kind == DT_JOB_KIND_TRAINJOB
                           ? type_names[DT_REPLICA_TYPE_WORKER]
                           : dt__job_kubeflow_type_names[DT_REPLICA_TYPE_WORKER];
    dt__yval m, v;
    dt_err e;
    if (!dt__ymap_get(spec, "elasticPolicy", &m)) return DT_OK;
    if ((e = dt__yexpect_map(&m)) || (e = dt__ymap_check_keys(&m, keys, NULL)) ||
        (e = dt__ymap_require(&m, "minReplicas", &v)) || (e = dt__yget_int(&v, 1, INT32_MAX, &n)))
        return e;
    if (workers == 0)
        return dt__yerr(&v, "the job has no %s replicas: elasticPolicy is about workers", type);
    if (n > workers)
        return dt__yerr(&v, "%d is more than the job's %d %s replica%s", n, workers, type,
                        workers == 1 ? "" : "s");
    job->elastic_min_replicas = n;
    return DT_OK;
}

dt_err dt__job_parse_restart(const dt__yval *m, dt_restart_policy *out) {
    dt__yval v;
    int x = 0;
    dt_err e;
    if (!dt__ymap_get(m, "restartPolicy", &v)) return DT_OK;
    if ((e = dt__yget_enum(&v, restart_policies, &x))) return e;
    *out = (dt_restart_policy)x;
    return DT_OK;
}

/* ---- replicas ---- */

dt_err dt__job_parse_count(const dt__yval *v, dt_replica_type t, int *out) {
    int n = 0;
    dt_err e = dt__yget_int(v, 0, DT__JOB_MAX_REPLICAS, &n);
    if (e) return e;
    if (n > 1 && (t == DT_REPLICA_TYPE_CHIEF || t == DT_REPLICA_TYPE_MASTER))
        return dt__yerr(v, "a job runs at most one %s, got %d", type_names[t], n);
    *out = n;
    return DT_OK;
}

dt_err dt__job_declare_type(dt_job_spec *job, dt_replica_type t, const dt__yval *val, int key_line,
                            const char *key) {
    dt_replica_spec *rs = &job->replicas[t];
    if (rs->present)
        return dt__yerr_line(val, key_line, "replica type %s given twice (also at line %d)", key,
                             rs->line);
    int other = t == DT_REPLICA_TYPE_CHIEF    ? DT_REPLICA_TYPE_MASTER
                : t == DT_REPLICA_TYPE_MASTER ? DT_REPLICA_TYPE_CHIEF
                                              : -1;
    if (other >= 0 && job->replicas[other].present)
        return dt__yerr_line(val, key_line,
                             "a job has a Chief or a Master, not both (%s at line %d)",
                             dt__job_kubeflow_type_names[other], job->replicas[other].line);
    rs->present = 1;
    rs->replicas = 1;
    rs->line = key_line;
    return DT_OK;
}

dt_err dt__job_check_total(const dt_job_spec *job, const dt__yval *at) {
    if (dt_job_spec_total_replicas(job) > 0) return DT_OK;
    return dt__yerr_line(at, at->decl_line,
                         "the job has no replicas (every replica type has replicas: 0)");
}

int dt_job_spec_total_replicas(const dt_job_spec *job) {
    int n = 0;
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++)
        if (job->replicas[t].present) n += job->replicas[t].replicas;
    return n;
}

/* An environment variable name: not empty, no '=' or NUL (it would not survive environ). */
static int is_env_name(const char *s) {
    return *s && !strchr(s, '=');
}

dt_err dt__job_parse_env(const dt__yval *list, dt_replica_spec *rs, const dt_job_spec *job) {
    static const char *const keys[] = {"name", "value", "valueFrom", NULL};
    dt_err e;
    if (dt__yval_is_null(list)) return DT_OK; /* `env:` with nothing */
    if ((e = dt__yexpect_seq(list))) return e;
    int n = dt__yseq_size(list);
    if (!(rs->env = calloc((size_t)(n ? n : 1), sizeof *rs->env)))
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", job->path);
    for (int i = 0; i < n; i++) {
        dt__yval item, nv, vv, fv;
        const char *name = NULL, *value = "";
        char got[80];
        dt__yseq_item(list, i, &item);
        if ((e = dt__yexpect_map(&item)) ||
            (e = dt__ymap_check_keys(&item, keys, "an environment variable")) ||
            (e = dt__ymap_require(&item, "name", &nv)) || (e = dt__yget_str(&nv, &name)))
            return e;
        if (!is_env_name(name))
            return dt__yerr(&nv, "%s is not a valid variable name (not empty, no '=')",
                            dt__yval_describe(&nv, got, sizeof got));
        int has_value = dt__ymap_get(&item, "value", &vv);
        if (dt__ymap_get(&item, "valueFrom", &fv)) {
            if (has_value)
                return dt__yerr_line(&fv, fv.decl_line, "give value or valueFrom, not both");
            continue; /* a Kubernetes reference (secret, field, ...): nothing to read here */
        }
        if (has_value && !dt__yval_is_null(&vv) && (e = dt__yget_str(&vv, &value))) return e;
        dt_env_var *ev = &rs->env[rs->nenv];
        if (!(ev->name = dt__job_strdup(job, name))) return DT_ERR_NOMEM;
        if (!(ev->value = dt__job_strdup(job, value))) {
            free(ev->name);
            ev->name = NULL;
            return DT_ERR_NOMEM;
        }
        rs->nenv++;
    }
    return DT_OK;
}

/* ---- the job document ---- */

typedef struct layout {
    const char *api_version;
    dt_job_kind kind;
    dt__job_layout layout;
} layout;

static const layout layouts[] = {
    {.api_version = "kubeflow.org/v1",
     .kind = DT_JOB_KIND_TFJOB,
     .layout = DT__JOB_LAYOUT_TFJOB_V1},
    {.api_version = "kubeflow.org/v1alpha2",
     .kind = DT_JOB_KIND_TFJOB,
     .layout = DT__JOB_LAYOUT_TFJOB_V1ALPHA2},
    {.api_version = "kubeflow.org/v1alpha1",
     .kind = DT_JOB_KIND_TFJOB,
     .layout = DT__JOB_LAYOUT_TFJOB_V1ALPHA1},
    {.api_version = "kubeflow.org/v1",
     .kind = DT_JOB_KIND_PYTORCHJOB,
     .layout = DT__JOB_LAYOUT_PYTORCH_V1},
    /* KubeDL's TFJob and PyTorchJob share Kubeflow v1's schema (their run policy inline,
     * which v1 accepts as its older layout did) */
    {.api_version = "training.kubedl.io/v1alpha1",
     .kind = DT_JOB_KIND_TFJOB,
     .layout = DT__JOB_LAYOUT_TFJOB_V1},
    {.api_version = "training.kubedl.io/v1alpha1",
     .kind = DT_JOB_KIND_PYTORCHJOB,
     .layout = DT__JOB_LAYOUT_PYTORCH_V1},
    {.api_version = "dtrain/v1", .kind = DT_JOB_KIND_TRAINJOB, .layout = DT__JOB_LAYOUT_TRAINJOB},
    /* the same as a Kubernetes custom resource (deploy/crd-trainjob.yaml) */
    {.api_version = "dtrain.io/v1", .kind = DT_JOB_KIND_TRAINJOB, .layout = DT__JOB_LAYOUT_TRAINJOB},
};
#define NLAYOUTS (sizeof layouts / sizeof layouts[0])

/* Is root a job document? Sets *kind and kv (the kind's value) when it is. */
static int is_job_doc(const dt__yval *root, dt_job_kind *kind, dt__yval *kv) {
    if (!dt__yval_is_map(root) || !dt__ymap_get(root, "kind", kv) || !dt__yval_is_scalar(kv))
        return 0;
    const char *s = (const char *)kv->node->data.scalar.value;
    for (size_t k = 0; k < sizeof kind_names / sizeof kind_names[0]; k++)
        if (!strcmp(s, kind_names[k])) return *kind = (dt_job_kind)k, 1;
    return 0;
}

static dt_err find_layout(dt_job_spec *job, const dt__yval *root, dt_job_kind kind,
                          const layout **out) {
    dt__yval v;
    const char *s = NULL;
    char got[80], want[160];
    dt_err e;
    if ((e = dt__ymap_require(root, "apiVersion", &v)) || (e = dt__yget_str(&v, &s))) return e;
    size_t o = 0;
    want[0] = '\0';
    for (size_t i = 0; i < NLAYOUTS; i++) {
        if (layouts[i].kind != kind) continue;
        if (!strcmp(s, layouts[i].api_version)) {
            *out = &layouts[i];
            memcpy(job->api_version, s, strlen(s) + 1);
            return DT_OK;
        }
        o += (size_t)snprintf(want + o, sizeof want - o, "%s%s", o ? " or " : "",
                              layouts[i].api_version);
    }
    return dt__yerr(&v, "kind %s needs apiVersion %s, got %s%s", kind_names[kind], want,
                    dt__yval_describe(&v, got, sizeof got),
                    kind == DT_JOB_KIND_TRAINJOB ? " (Kubeflow Trainer's TrainJob is not supported)"
                                                 : "");
}

static dt_err parse_job_doc(dt_job_spec *job, const dt__yval *root, dt_job_kind kind,
                            const char *base_dir) {
    /* status: what a `kubectl get -o yaml` adds; not read. */
    static const char *const top_keys[] = {"apiVersion", "kind",   "metadata",
                                           "spec",       "status", NULL};
    const layout *l = NULL;
    dt_err e;
    job->kind = kind;
    if ((e = check_unique_keys(job, root)) || (e = find_layout(job, root, kind, &l)))
        return e;
    if (l->layout == DT__JOB_LAYOUT_TRAINJOB) return dt__job_parse_trainjob(job, root, base_dir);
    if ((e = dt__ymap_check_keys(root, top_keys, NULL)) || (e = dt__job_parse_metadata(job, root)))
        return e;
    return dt__job_parse_kubeflow(job, root, l->layout);
}

static dt_err job_new(dt_job_spec **out, const char *path) {
    dt_job_spec *job = calloc(1, sizeof *job);
    *out = NULL;
    if (!job) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
    memcpy(job->path, path, strlen(path) + 1); /* callers checked the length */
    memcpy(job->namespace, "default", sizeof "default");
    job->backoff_limit = -1;
    job->active_deadline_seconds = -1;
    job->ttl_seconds_after_finished = -1;
    *out = job;
    return DT_OK;
}

static dt_err job_from_stream(dt_job_spec **out, dt__ystream *s, const char *path,
                              const char *base_dir) {
    dt_job_spec *job = NULL;
    dt__ydoc *doc = NULL;
    int first_line = 0;
    dt_err e;
    for (;;) {
        dt__yval root, kv;
        dt_job_kind kind;
        if ((e = dt__ystream_next(s, &doc))) goto fail;
        if (!doc) break;
        dt__ydoc_root(doc, "", &root);
        if (is_job_doc(&root, &kind, &kv)) {
            if (job) {
                e = dt__yerr(&kv,
                             "a second job (%s) in one file; the first starts at line %d: "
                             "give each job its own file",
                             kind_names[kind], first_line);
                goto fail;
            }
            if ((e = job_new(&job, path)) || (e = parse_job_doc(job, &root, kind, base_dir)))
                goto fail;
            first_line = root.line;
        }
        dt__ydoc_free(doc);
        doc = NULL;
    }
    if (!job) {
        e = dt_err_set(DT_ERR_SPEC,
                       "%s:1: no job in this file: expected a document of kind TFJob, "
                       "PyTorchJob or TrainJob",
                       path);
        goto fail;
    }
    *out = job;
    return DT_OK;
fail:
    dt__ydoc_free(doc);
    dt_job_spec_free(job);
    return e;
}

dt_err dt_job_spec_load(dt_job_spec **out, const char *path) {
    dt__ystream *s = NULL;
    char dir[DT_PATH_MAX];
    dt_err e;
    *out = NULL;
    if ((e = dt__spec_check_path(path)) || (e = dt__ystream_open_file(&s, path))) return e;
    e = job_from_stream(out, s, path, dt__spec_base_dir(path, dir));
    dt__ystream_free(s);
    return e;
}

dt_err dt_job_spec_parse(dt_job_spec **out, const char *yaml, size_t len, const char *path) {
    dt__ystream *s = NULL;
    dt_err e;
    *out = NULL;
    if (!path) path = "<string>";
    if ((e = dt__spec_check_path(path)) || (e = dt__ystream_open_mem(&s, yaml, len, path))) return e;
    e = job_from_stream(out, s, path, NULL);
    dt__ystream_free(s);
    return e;
}

void dt_job_spec_free(dt_job_spec *job) {
    if (!job) return;
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++) {
        dt_replica_spec *rs = &job->replicas[t];
        for (int i = 0; rs->argv && rs->argv[i]; i++)
            free(rs->argv[i]);
        free(rs->argv);
        dt_job_env_free(rs->env, rs->nenv);
        free(rs->working_dir);
    }
    dt_spec_free(job->train);
    free(job);
}

dt_err dt_job_spec_check_local(const dt_job_spec *job) {
    if (job->kind == DT_JOB_KIND_TRAINJOB) return DT_OK;
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++) {
        const dt_replica_spec *rs = &job->replicas[t];
        if (!rs->present || rs->replicas == 0 || rs->argc > 0) continue;
        return dt_err_set(DT_ERR_SPEC,
                          "%s:%d: %s.command: required to run locally: without Kubernetes the "
                          "image's entrypoint is not available",
                          job->path, rs->container_line, rs->container_path);
    }
    return DT_OK;
}

/* A DNS-1035 label (a Service's name): [a-z]([-a-z0-9]*[a-z0-9])?, at most 63. */
static int dns1035_label(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 63 || !(s[0] >= 'a' && s[0] <= 'z') || s[n - 1] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

dt_err dt_job_spec_check_kubernetes(const dt_job_spec *job) {
    if (!dns1035_label(job->name))
        return dt_err_set(DT_ERR_SPEC,
                          "%s: metadata.name: '%s' is not a DNS-1035 label (lower case "
                          "letters, digits and '-', starting with a letter, at most 63)",
                          job->path, job->name);
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++) {
        const dt_replica_spec *rs = &job->replicas[t];
        if (!rs->present) continue;
        /* The longest replica's Service name: <job>-<type>-<last index>. */
        char name[128];
        int last = rs->replicas > 0 ? rs->replicas - 1 : 0;
        snprintf(name, sizeof name, "%s-%s-%d", job->name, dt_replica_type_name((dt_replica_type)t),
                 last);
        if (strlen(name) > 63)
            return dt_err_set(DT_ERR_SPEC,
                              "%s:%d: metadata.name: '%s' is too long: its Service '%s' would "
                              "have %zu characters, more than the 63 of a DNS-1035 label",
                              job->path, rs->line, job->name, name, strlen(name));
        if (job->kind != DT_JOB_KIND_TRAINJOB && rs->replicas > 0 && !rs->image[0])
            return dt_err_set(DT_ERR_SPEC,
                              "%s:%d: %s.image: required on Kubernetes: every replica's "
                              "container needs an image",
                              job->path, rs->container_line, rs->container_path);
    }
    return DT_OK;
}
