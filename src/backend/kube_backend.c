/*
 * kube_backend.c - the kubernetes backend: every replica a Pod with a headless Service, as
 * Kubeflow's training operator makes them.
 *
 * Names and labels are the operator's: Pod and Service <job>-<type>-<index>, labels
 * training.kubeflow.org/{job-name, replica-type, replica-index, operator-name} (and job-role
 * master for the chief or master), the Service headless on the replica's port (tfjob-port,
 * 2222 by default) selecting that one pod. A TFJob's or PyTorchJob's pod template is passed
 * through as written; dtrain adds its labels, the environment (TF_CONFIG byte-identical to
 * `dtrain plan`; the job token from a Secret through secretKeyRef, never inline) and the
 * port, and sets restartPolicy Never: the master applies the replica's restart policy
 * itself by creating the pod again, as the operator does for ExitCode. A TrainJob's
 * replicas run dtrain's built-in roles in dtrain's image, with the job dir (a
 * PersistentVolumeClaim) and the spec (a ConfigMap) mounted where the master has them.
 *
 * Pods are watched, never polled (kube_client.c: list, then watch from the list's version;
 * resumed when dropped; listed again after 410 Gone). What the master is told comes from
 * what the API server holds (level-triggered): a pod that ended (phase Succeeded or Failed)
 * ended with its container's exit code; a pod that vanished (deleted, its node lost) ended
 * with 137; a launch that finds the replica's pod alive takes it over rather than making a
 * second one, so a master that lost its journal picks up its pods.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/kube-impl.h"
#include "core/path-impl.h"
#include "spec/yaml_doc-impl.h"

#define LABEL_JOB "training.kubeflow.org/job-name"
#define LABEL_TYPE "training.kubeflow.org/replica-type"
#define LABEL_INDEX "training.kubeflow.org/replica-index"
#define LABEL_ROLE "training.kubeflow.org/job-role"
#define LABEL_OPERATOR "training.kubeflow.org/operator-name"

/* What the backend knows of one replica's pod. */
typedef struct pod {
    char name[32];      /* the replica: "worker-1" */
    char pod[128];      /* <job>-worker-1 */
    char uid[64];       /* of the pod this launch made or took over; "" before */
    int live;           /* the master counts it as running (until ended() is said) */
    int exists;         /* the API server has a pod of that name (any uid) */
    int terminal;       /* ... and it has ended (Succeeded or Failed) */
    int deleting;       /* ... and it has a deletionTimestamp */
    int code;           /* its container's exit code once terminated; -1 */
    char exists_uid[64];
    json_t *pending;    /* a pod to create once the old one of that name is gone */
} pod;

typedef struct kube {
    dt__backend base;
    dt__kube_backend_opts o;
    char ns[64];
    char job_dir[DT__PATH_MAX];
    char spec_path[DT__PATH_MAX];
    json_t *manifest; /* the job's manifest as JSON (its pod templates) */
    dt__kube *k;
    dt__kube_watch *watch;
    pod *pods;
    int npods, cap;
    /* ends to report that no pod event will bring (a launch cancelled by a stop) */
    char (*ends)[32];
    int *end_codes;
    int nends;
} kube;

typedef struct ticket {
    char name[32];
    json_t *pod;
} ticket;

static pod *find(kube *b, const char *name) {
    for (int i = 0; i < b->npods; i++)
        if (!strcmp(b->pods[i].name, name)) return &b->pods[i];
    return NULL;
}

static pod *find_pod(kube *b, const char *pod_name) {
    for (int i = 0; i < b->npods; i++)
        if (!strcmp(b->pods[i].pod, pod_name)) return &b->pods[i];
    return NULL;
}

static pod *add(kube *b, const char *name) {
    pod *p = find(b, name);
    if (p) return p;
    if (b->npods == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        pod *n = realloc(b->pods, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        b->pods = n;
        b->cap = cap;
    }
    p = &b->pods[b->npods++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->pod, sizeof p->pod, "%s-%s", b->o.job->name, name);
    p->code = -1;
    return p;
}

static void say_end(kube *b, const char *name, int code) {
    if (b->watch) dt__kube_watch_wake(b->watch); /* events() says it */
    void *n1 = realloc(b->ends, (size_t)(b->nends + 1) * sizeof *b->ends);
    if (!n1) return;
    b->ends = n1;
    void *n2 = realloc(b->end_codes, (size_t)(b->nends + 1) * sizeof *b->end_codes);
    if (!n2) return;
    b->end_codes = n2;
    snprintf(b->ends[b->nends], sizeof b->ends[0], "%s", name);
    b->end_codes[b->nends++] = code;
}

static int default_port(const dt_job_spec *job, dt_replica_type t) {
    int p = job->replicas[t].port;
    return p ? p : job->kind == DT_JOB_KIND_PYTORCHJOB ? 23456 : 2222;
}

static const char *port_name(const dt_job_spec *job) {
    return job->kind == DT_JOB_KIND_PYTORCHJOB ? "pytorchjob-port" : "tfjob-port";
}

/* ---- objects ---- */

static json_t *labels_of(const kube *b, dt_replica_type t, int index) {
    char idx[16];
    snprintf(idx, sizeof idx, "%d", index);
    json_t *l = json_pack("{s:s, s:s, s:s, s:s}", LABEL_JOB, b->o.job->name, LABEL_TYPE,
                          dt_replica_type_name(t), LABEL_INDEX, idx, LABEL_OPERATOR, "dtrain");
    if (l && (t == DT_REPLICA_TYPE_CHIEF || t == DT_REPLICA_TYPE_MASTER))
        json_object_set_new(l, LABEL_ROLE, json_string("master"));
    return l;
}

static json_t *metadata_of(const kube *b, const char *name, json_t *labels) {
    json_t *m = json_pack("{s:s, s:s, s:o}", "name", name, "namespace", b->ns, "labels", labels);
    if (m && b->o.owner)
        json_object_set_new(m, "ownerReferences", json_pack("[O]", b->o.owner));
    return m;
}

/* The replica's headless Service (as the operator's): one port, selecting its one pod. */
static json_t *service_of(const kube *b, const char *pod_name, dt_replica_type t, int index) {
    json_t *sel = labels_of(b, t, index);
    json_object_del(sel, LABEL_ROLE);
    json_object_del(sel, LABEL_OPERATOR);
    int port = default_port(b->o.job, t);
    return json_pack("{s:s, s:s, s:o, s:{s:s, s:o, s:[{s:s, s:i, s:i}]}}", "apiVersion", "v1",
                     "kind", "Service", "metadata", metadata_of(b, pod_name, labels_of(b, t, index)),
                     "spec", "clusterIP", "None", "selector", sel, "ports", "name",
                     port_name(b->o.job), "port", port, "targetPort", port);
}

/* The pod template of replica type t in the manifest (a copy), or NULL for a TrainJob. The
 * container's field path ("spec.tfReplicaSpecs.Worker.template.spec.containers[0]") says
 * where it is. */
static json_t *template_of(const kube *b, dt_replica_type t) {
    const char *cp = b->o.job->replicas[t].container_path;
    const char *end = strstr(cp, ".template.");
    if (!cp[0] || !end || !b->manifest) return NULL;
    char path[256];
    snprintf(path, sizeof path, "%.*s.template", (int)(end - cp), cp);
    json_t *at = b->manifest;
    for (char *save, *seg = strtok_r(path, ".", &save); at && seg; seg = strtok_r(NULL, ".", &save)) {
        char *br = strchr(seg, '[');
        if (br) { /* v1alpha1: spec.replicaSpecs[2] */
            *br = 0;
            at = json_array_get(json_object_get(at, seg), (size_t)atoi(br + 1));
        } else {
            at = json_object_get(at, seg);
        }
    }
    return json_is_object(at) ? json_deep_copy(at) : NULL;
}

/* Variable i of the launch as a pod's env entry: DTRAIN_JOB_TOKEN from the Secret. */
static json_t *env_entry(const kube *b, const dt__backend_launch *l, int i) {
    if (!strcmp(l->env[i].name, "DTRAIN_JOB_TOKEN") && b->o.token_secret)
        return json_pack("{s:s, s:{s:{s:s, s:s}}}", "name", l->env[i].name, "valueFrom",
                         "secretKeyRef", "name", b->o.token_secret, "key", "token");
    return json_pack("{s:s, s:s}", "name", l->env[i].name, "value", l->env[i].value);
}

static int env_index(const dt__backend_launch *l, const char *name) {
    for (int i = 0; name && i < l->nenv; i++)
        if (!strcmp(l->env[i].name, name)) return i;
    return -1;
}

/* The container's environment: the template's entries in their order (valueFrom ones
 * too: the loader skips those), each one dtrain sets given dtrain's value, then the rest of
 * dtrain's; DTRAIN_JOB_TOKEN from the Secret. */
static json_t *env_of(const kube *b, const dt__backend_launch *l, const json_t *tpl_env) {
    json_t *env = json_array();
    char *taken = calloc((size_t)l->nenv + 1, 1);
    size_t k;
    json_t *it;
    json_array_foreach(tpl_env, k, it) {
        int i = env_index(l, json_string_value(json_object_get(it, "name")));
        if (i < 0) {
            json_array_append(env, it);
        } else if (taken && !taken[i]) {
            taken[i] = 1;
            json_array_append_new(env, env_entry(b, l, i));
        }
    }
    for (int i = 0; env && i < l->nenv; i++)
        if (!taken || !taken[i]) json_array_append_new(env, env_entry(b, l, i));
    free(taken);
    return env;
}

/* The container dtrain runs in a pod spec: the one named tensorflow (pytorch), else the
 * first (the spec loader chose it: replica spec's container). */
static json_t *main_container(const kube *b, json_t *spec, dt_replica_type t) {
    json_t *cs = json_object_get(spec, "containers");
    size_t i;
    json_t *c;
    json_array_foreach(cs, i, c) {
        const char *n = json_string_value(json_object_get(c, "name"));
        if (n && !strcmp(n, b->o.job->replicas[t].container)) return c;
    }
    return json_array_get(cs, 0);
}

/* Volumes of dtrain's own: the job dir and the spec, where the master has them. */
static void add_dtrain_volumes(const kube *b, json_t *spec, json_t *container) {
    json_t *vols = json_object_get(spec, "volumes");
    if (!vols) json_object_set_new(spec, "volumes", vols = json_array());
    json_t *mounts = json_object_get(container, "volumeMounts");
    if (!mounts) json_object_set_new(container, "volumeMounts", mounts = json_array());
    if (b->o.claim) {
        json_array_append_new(vols, json_pack("{s:s, s:{s:s}}", "name", "dtrain-job",
                                              "persistentVolumeClaim", "claimName", b->o.claim));
        json_array_append_new(mounts, json_pack("{s:s, s:s}", "name", "dtrain-job", "mountPath",
                                                b->job_dir));
    }
    if (b->o.spec_configmap) {
        char dir[DT__PATH_MAX];
        memcpy(dir, b->spec_path, sizeof dir); /* the same size */
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) *slash = 0;
        json_array_append_new(vols, json_pack("{s:s, s:{s:s}}", "name", "dtrain-spec",
                                              "configMap", "name", b->o.spec_configmap));
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "dtrain-spec",
                                                "mountPath", dir, "readOnly", 1));
    }
}

static dt_err pod_of(const kube *b, const dt__backend_launch *l, const char *pod_name,
                     json_t **out) {
    const dt_job_spec *job = b->o.job;
    json_t *tpl = template_of(b, l->type);
    json_t *spec, *container, *labels = labels_of(b, l->type, l->index);
    if (tpl) {
        spec = json_incref(json_object_get(tpl, "spec"));
        json_t *tl = json_object_get(json_object_get(tpl, "metadata"), "labels");
        if (json_is_object(tl)) { /* the template's labels, then the operator's */
            json_t *merged = json_deep_copy(tl);
            json_object_update(merged, labels);
            json_decref(labels);
            labels = merged;
        }
    } else {
        spec = json_pack("{s:[{s:s, s:s}], s:i}", "containers", "name", "dtrain", "image",
                         b->o.image ? b->o.image : "dtrain:latest",
                         "terminationGracePeriodSeconds", b->o.grace_s > 0 ? b->o.grace_s : 30);
    }
    container = spec ? main_container(b, spec, l->type) : NULL;
    if (!container) {
        json_decref(tpl);
        json_decref(spec);
        json_decref(labels);
        return dt_err_set(DT_ERR_SPEC, "%s: %s: the pod template has no container", job->path,
                          l->name);
    }
    if (!tpl) { /* a TrainJob's built-in role; a template's command and args stay as written */
        json_t *cmd = json_array();
        for (int i = 0; l->argv && l->argv[i]; i++) json_array_append_new(cmd, json_string(l->argv[i]));
        json_object_set_new(container, "command", cmd);
        if (l->cwd) json_object_set_new(container, "workingDir", json_string(l->cwd));
    }
    json_object_set_new(container, "env", env_of(b, l, json_object_get(container, "env")));
    /* The replica's port, named as the operator names it, unless the template has it. */
    json_t *ports = json_object_get(container, "ports");
    int has_port = 0;
    size_t i;
    json_t *pt;
    json_array_foreach(ports, i, pt) {
        const char *n = json_string_value(json_object_get(pt, "name"));
        has_port |= n && !strcmp(n, port_name(job));
    }
    if (!has_port) {
        if (!ports) json_object_set_new(container, "ports", ports = json_array());
        json_array_append_new(ports, json_pack("{s:s, s:i, s:s}", "name", port_name(job),
                                               "containerPort", default_port(job, l->type),
                                               "protocol", "TCP"));
    }
    if (!tpl) add_dtrain_volumes(b, spec, container);
    json_object_set_new(spec, "restartPolicy", json_string("Never"));
    /* The DNS name <pod>.<job>... is the Service's; hostname as the operator leaves it. */
    *out = json_pack("{s:s, s:s, s:o, s:o}", "apiVersion", "v1", "kind", "Pod", "metadata",
                     metadata_of(b, pod_name, labels), "spec", spec);
    json_decref(tpl);
    return *out ? DT_OK : dt_err_set(DT_ERR_NOMEM, "out of memory");
}

/* ---- requests ---- */

static dt_err create(kube *b, const char *plural, json_t *obj, json_t **made, long *status) {
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/%s?fieldValidation=Strict", b->ns, plural);
    json_t *resp = NULL;
    dt_err e = dt__kube_call(b->k, "POST", path, obj, NULL, status, &resp);
    if (e) return e;
    if (*status == 201 || *status == 200) {
        if (made) *made = resp;
        else json_decref(resp);
        return DT_OK;
    }
    if (*status == 409) {
        json_decref(resp);
        return DT_OK; /* the caller decides */
    }
    char why[512];
    const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
    /* 429 and the 5xx of a server that is busy or restarting are worth retrying */
    int again = *status == 429 || *status == 500 || *status == 502 || *status == 503 ||
                *status == 504;
    e = dt_err_set(*status == 400 || *status == 422 ? DT_ERR_SPEC
                   : again                          ? DT_ERR_NETWORK
                                                    : DT_ERR_IO,
                   "cannot create %s %s in namespace %s: %s (HTTP %ld)", plural, name ? name : "?",
                   b->ns, dt__kube_why(resp, *status, why, sizeof why), *status);
    json_decref(resp);
    return e;
}

static void delete_pod(kube *b, const char *pod_name, int grace) {
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", b->ns, pod_name);
    json_t *body = json_pack("{s:s, s:s, s:i, s:s}", "kind", "DeleteOptions", "apiVersion", "v1",
                             "gracePeriodSeconds", grace, "propagationPolicy", "Background");
    long status;
    json_t *resp = NULL;
    if (dt__kube_call(b->k, "DELETE", path, body, NULL, &status, &resp)) dt_err_clear();
    json_decref(resp);
    json_decref(body);
}

static json_t *get_pod(kube *b, const char *pod_name) {
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", b->ns, pod_name);
    long status;
    json_t *resp = NULL;
    if (dt__kube_call(b->k, "GET", path, NULL, NULL, &status, &resp)) dt_err_clear();
    if (status != 200) {
        json_decref(resp);
        return NULL;
    }
    return resp;
}

static dt_err create_pod(kube *b, pod *p, json_t *obj) {
    json_t *made = NULL;
    long status;
    dt_err e = create(b, "pods", obj, &made, &status);
    for (int tries = 0; !e && status == 409 && tries < 3; tries++) {
        /* A pod of that name was made since we looked: alive, it is this replica's (taken
         * over, as at a launch); ended or going, it goes first and ours follows (events). */
        json_t *cur = get_pod(b, p->pod);
        if (!cur) { /* gone meanwhile: try again */
            e = create(b, "pods", obj, &made, &status);
            continue;
        }
        const json_t *md = json_object_get(cur, "metadata");
        const char *ph = json_string_value(json_object_get(json_object_get(cur, "status"), "phase"));
        int deleting = json_object_get(md, "deletionTimestamp") != NULL;
        int ended = ph && (!strcmp(ph, "Succeeded") || !strcmp(ph, "Failed"));
        if (!deleting && !ended) {
            const char *uid = json_string_value(json_object_get(md, "uid"));
            snprintf(p->uid, sizeof p->uid, "%s", uid ? uid : "");
        } else {
            if (!deleting) delete_pod(b, p->pod, 0);
            p->pending = json_incref(obj);
        }
        json_decref(cur);
        return DT_OK;
    }
    if (e) return e;
    if (status == 409) return dt_err_set(DT_ERR_IO, "pods %s: AlreadyExists, again and again", p->pod);
    const char *uid = json_string_value(json_object_get(json_object_get(made, "metadata"), "uid"));
    snprintf(p->uid, sizeof p->uid, "%s", uid ? uid : "");
    json_decref(made);
    return DT_OK;
}

/* ---- operations ---- */

static dt_err kube_launch(dt__backend *base, const dt__backend_launch *l, json_t **facts,
                          void **out) {
    kube *b = (kube *)base;
    ticket *t = calloc(1, sizeof *t);
    if (!t) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    char pod_name[128];
    snprintf(pod_name, sizeof pod_name, "%s-%s", b->o.job->name, l->name);
    /* The Service first (made once; it stays across the pod's attempts). */
    json_t *svc = service_of(b, pod_name, l->type, l->index);
    long status;
    dt_err e = svc ? create(b, "services", svc, NULL, &status) : dt_err_set(DT_ERR_NOMEM, "out of memory");
    json_decref(svc);
    if (!e) e = pod_of(b, l, pod_name, &t->pod);
    if (e) {
        free(t);
        return e;
    }
    snprintf(t->name, sizeof t->name, "%s", l->name);
    *facts = json_pack("{s:s}", "pod", pod_name);
    *out = t;
    return DT_OK;
}

static dt_err kube_go(dt__backend *base, void *vt, int run) {
    kube *b = (kube *)base;
    ticket *t = vt;
    dt_err e = DT_OK;
    pod *p = run ? add(b, t->name) : NULL;
    if (run && !p) e = dt_err_set(DT_ERR_NOMEM, "out of memory");
    if (p) {
        json_decref(p->pending);
        p->pending = NULL;
        p->live = 1;
        p->uid[0] = 0;
        if (p->exists && !p->terminal && !p->deleting) {
            /* Its pod runs already (a master that lost its journal): taken over. */
            snprintf(p->uid, sizeof p->uid, "%s", p->exists_uid);
        } else if (p->exists) {
            /* The pod of the last attempt: gone first, then the new one (events). */
            if (!p->deleting) delete_pod(b, p->pod, 0);
            p->pending = json_incref(t->pod);
        } else {
            e = create_pod(b, p, t->pod);
            if (e) p->live = 0;
        }
    }
    json_decref(t->pod);
    free(t);
    return e;
}

static void kube_signal(dt__backend *base, const char *name, int sig) {
    kube *b = (kube *)base;
    pod *p = find(b, name);
    if (!p || !p->live) return;
    if (p->pending) { /* never created: it ends here */
        json_decref(p->pending);
        p->pending = NULL;
        p->live = 0;
        say_end(b, name, 128 + sig);
        return;
    }
    delete_pod(b, p->pod, sig == SIGKILL ? 0 : (b->o.grace_s > 0 ? b->o.grace_s : 30));
}

static int kube_adopt(dt__backend *base, const char *name, const json_t *facts, int *code) {
    kube *b = (kube *)base;
    pod *p = add(b, name);
    *code = -1;
    if (!p) return 0;
    if (p->exists && !p->terminal) {
        snprintf(p->uid, sizeof p->uid, "%s", p->exists_uid);
        p->live = 1;
        return 1;
    }
    if (p->exists && p->terminal) *code = p->code;
    p->live = 0;
    return 0;
}

static int kube_event_fd(dt__backend *base) { return dt__kube_watch_fd(((kube *)base)->watch); }

/* The exit code of a terminated pod: its main container's. */
static int exit_code_of(const kube *b, const json_t *obj) {
    const json_t *st = json_object_get(obj, "status");
    size_t i;
    json_t *cs;
    int code = -1;
    json_array_foreach(json_object_get(st, "containerStatuses"), i, cs) {
        const json_t *term = json_object_get(json_object_get(cs, "state"), "terminated");
        if (!term) continue;
        int c = (int)json_integer_value(json_object_get(term, "exitCode"));
        if (code < 0 || c != 0) code = c; /* the first failure, else 0 */
    }
    if (code < 0) {
        const char *phase = json_string_value(json_object_get(st, "phase"));
        code = phase && !strcmp(phase, "Succeeded") ? 0 : 1;
    }
    return code > 255 ? 255 : code;
}

/* One pod as the API server holds it now (obj NULL: deleted). */
static void pod_seen(kube *b, const char *pod_name, const json_t *obj, const char *type,
                     dt__backend_ended_fn ended, void *ctx) {
    pod *p = find_pod(b, pod_name);
    if (!p) {
        /* A pod of this job the master has not launched (yet): remember it, so a launch
         * takes it over. Its replica's name is the pod's name less "<job>-". */
        size_t jl = strlen(b->o.job->name);
        if (strncmp(pod_name, b->o.job->name, jl) || pod_name[jl] != '-' ||
            strlen(pod_name + jl + 1) >= sizeof p->name)
            return;
        if (!(p = add(b, pod_name + jl + 1))) return;
    }
    const json_t *md = json_object_get(obj, "metadata");
    const char *uid = json_string_value(json_object_get(md, "uid"));
    if (!obj || !strcmp(type, "DELETED")) {
        /* This attempt's pod (a relist's sweep gives no object: the pod it knew) */
        int was_ours = p->live && !p->pending &&
                       (!obj || !p->uid[0] || (uid && !strcmp(uid, p->uid)));
        int code = p->code >= 0 ? p->code : 128 + SIGKILL;
        p->exists = p->terminal = p->deleting = 0;
        p->exists_uid[0] = 0;
        p->code = -1;
        char name[32];
        snprintf(name, sizeof name, "%s", p->name);
        if (was_ours) { /* p is not used after ended(): the master may forget it */
            p->live = 0;
            p->uid[0] = 0;
            ended(ctx, name, code);
            return;
        }
        if (p->pending) { /* the old pod is gone: the new attempt's can be made */
            json_t *obj2 = p->pending;
            p->pending = NULL;
            if (create_pod(b, p, obj2)) {
                dt_err_clear();
                p->live = 0;
                ended(ctx, name, 128 + SIGKILL);
            }
            json_decref(obj2);
        }
        return;
    }
    const char *phase = json_string_value(json_object_get(json_object_get(obj, "status"), "phase"));
    p->exists = 1;
    snprintf(p->exists_uid, sizeof p->exists_uid, "%s", uid ? uid : "");
    p->deleting = json_object_get(md, "deletionTimestamp") != NULL &&
                  !json_is_null(json_object_get(md, "deletionTimestamp"));
    p->terminal = phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
    if (p->terminal) p->code = exit_code_of(b, obj);
    if (p->live && !p->uid[0] && !p->pending && !p->terminal && uid) /* made: 409 earlier */
        snprintf(p->uid, sizeof p->uid, "%s", uid);
    if (p->live && p->terminal && uid && !strcmp(uid, p->uid)) {
        p->live = 0;
        char name[32];
        snprintf(name, sizeof name, "%s", p->name);
        ended(ctx, name, p->code);
    }
}

static void kube_events(dt__backend *base, dt__backend_ended_fn ended, void *ctx) {
    kube *b = (kube *)base;
    for (int i = 0; i < b->nends; i++) ended(ctx, b->ends[i], b->end_codes[i]);
    b->nends = 0;
    char type[16];
    json_t *obj;
    while (dt__kube_watch_next(b->watch, type, sizeof type, &obj)) {
        if (!strcmp(type, "RELIST")) {
            /* Objects the new list lacks are gone: marked now, seen again in the list. */
            for (int i = 0; i < b->npods; i++)
                if (b->pods[i].exists) b->pods[i].exists = -1;
            continue;
        }
        if (!strcmp(type, "SYNCED")) {
            /* The list is whole: what it did not hold was deleted while no watch ran. (The
             * names first: an end said may make the master forget a replica, and the table
             * move.) */
            int n = 0;
            char(*gone)[128] = calloc((size_t)b->npods + 1, sizeof *gone);
            for (int i = 0; gone && i < b->npods; i++)
                if (b->pods[i].exists == -1) snprintf(gone[n++], sizeof gone[0], "%s", b->pods[i].pod);
            for (int i = 0; i < n; i++) pod_seen(b, gone[i], NULL, "DELETED", ended, ctx);
            free(gone);
            continue;
        }
        const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
        if (name) pod_seen(b, name, obj, type, ended, ctx);
        json_decref(obj);
    }
}

static void kube_last_line(dt__backend *base, const char *name, char *out, size_t size) {
    kube *b = (kube *)base;
    out[0] = 0;
    pod *p = find(b, name);
    if (!p) return;
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s/log?tailLines=5", b->ns, p->pod);
    long status;
    char *text = NULL;
    if (dt__kube_get_text(b->k, path, &status, &text) || status != 200) {
        dt_err_clear();
        free(text);
        return;
    }
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ')) text[--n] = 0;
    char *line = strrchr(text, '\n');
    line = line ? line + 1 : text;
    snprintf(out, size, "%s", line);
    free(text);
}

static void kube_forget(dt__backend *base, const char *name) {
    kube *b = (kube *)base;
    pod *p = find(b, name);
    if (!p) return;
    json_decref(p->pending);
    *p = b->pods[--b->npods];
}

static void kube_free(dt__backend *base) {
    kube *b = (kube *)base;
    dt__kube_watch_stop(b->watch);
    for (int i = 0; i < b->npods; i++) json_decref(b->pods[i].pending);
    free(b->pods);
    free(b->ends);
    free(b->end_codes);
    json_decref(b->manifest);
    free(b);
}

static const dt__backend_ops kube_ops = {
    .name = "kubernetes",
    .kubernetes_addresses = 1,
    .launch = kube_launch,
    .go = kube_go,
    .signal = kube_signal,
    .adopt = kube_adopt,
    .event_fd = kube_event_fd,
    .events = kube_events,
    .last_line = kube_last_line,
    .forget = kube_forget,
    .free = kube_free,
};

/* The manifest's first document that is the job, as JSON. */
static dt_err load_manifest(kube *b) {
    dt__ystream *s;
    dt_err e = dt__ystream_open_file(&s, b->spec_path);
    if (e) return e;
    dt__ydoc *d;
    while (!(e = dt__ystream_next(s, &d)) && d) {
        dt__yval root, kind;
        dt__ydoc_root(d, "", &root);
        if (dt__yval_is_map(&root) && dt__ymap_get(&root, "kind", &kind)) {
            const char *k = NULL;
            if (!dt__yget_str(&kind, &k) && k &&
                (!strcmp(k, dt_job_kind_name(b->o.job->kind)))) {
                e = dt__yval_to_json(&root, &b->manifest);
                dt__ydoc_free(d);
                break;
            }
            dt_err_clear();
        }
        dt__ydoc_free(d);
    }
    dt__ystream_free(s);
    return e;
}

/* The pods of a list answer, as the API server holds them before anything is launched. */
static void seed_pods(kube *b, const json_t *list) {
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(list, "items"), i, it) {
        const char *n = json_string_value(json_object_get(json_object_get(it, "metadata"), "name"));
        if (n) pod_seen(b, n, it, "ADDED", NULL, NULL);
    }
}

dt_err dt__kube_backend_offline(dt__backend **out, const dt_job_spec *job, const json_t *list,
                                dt__kube_watch *w) {
    kube *b = calloc(1, sizeof *b);
    if (!b) {
        dt__kube_watch_stop(w);
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    b->base.ops = &kube_ops;
    b->o.job = job;
    snprintf(b->ns, sizeof b->ns, "default");
    b->watch = w;
    seed_pods(b, list);
    *out = &b->base;
    return DT_OK;
}

dt_err dt__kube_backend_new(dt__backend **out, const dt__kube_backend_opts *o) {
    kube *b = calloc(1, sizeof *b);
    if (!b) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    b->base.ops = &kube_ops;
    b->o = *o;
    b->k = o->kube;
    snprintf(b->ns, sizeof b->ns, "%s", o->namespace ? o->namespace : dt__kube_namespace(o->kube));
    dt_err e;
    if ((e = dt__path(b->job_dir, sizeof b->job_dir, "%s", o->job_dir ? o->job_dir : "")) ||
        (e = dt__path(b->spec_path, sizeof b->spec_path, "%s",
                      o->spec_path ? o->spec_path : o->job->path))) {
        free(b);
        return e;
    }
    e = load_manifest(b);
    char path[512], sel[256];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods", b->ns);
    snprintf(sel, sizeof sel, "%s=%s,%s=dtrain", LABEL_JOB, o->job->name, LABEL_OPERATOR);
    /* What the API server holds now, before the master adopts or launches anything. */
    if (!e) {
        char q[1024], esc[512];
        snprintf(q, sizeof q, "%s?labelSelector=%s", path, dt__kube_escape(sel, esc, sizeof esc));
        long status;
        json_t *resp = NULL;
        e = dt__kube_call(b->k, "GET", q, NULL, NULL, &status, &resp);
        if (!e && status != 200) {
            char why[512];
            e = dt_err_set(DT_ERR_IO, "cannot list the job's pods in namespace %s (%s): %s",
                           b->ns, dt__kube_server(b->k), dt__kube_why(resp, status, why, sizeof why));
        }
        if (!e) seed_pods(b, resp);
        json_decref(resp);
    }
    if (!e) e = dt__kube_watch_start(&b->watch, b->k, path, sel);
    if (e) {
        kube_free(&b->base);
        return e;
    }
    *out = &b->base;
    return DT_OK;
}
