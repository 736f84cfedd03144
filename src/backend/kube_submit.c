/*
 * kube_submit.c - start a job in a cluster from outside it, and follow it
 * (`dtrain run JOB.yaml --backend kubernetes`).
 *
 * What is made, in the job's namespace (docs/KUBERNETES.md):
 *
 *   Job        <job>-master   batch/v1: runs the job's master pod (`dtrain run --in-cluster`),
 *                             and makes it again if it is deleted or its node is lost; it is
 *                             the root: every other object is owned by it, so deleting it
 *                             deletes the whole job
 *   Service    <job>-master   the master's API (8080): DTRAIN_MASTER of every replica
 *   Secret     <job>-token    the job's token (replicas get it through secretKeyRef)
 *   ConfigMap  <job>-spec     the spec, mounted at /etc/dtrain in the master and replicas
 *   PVC        <job>-data     the job dir (journal, checkpoints, exports), unless a claim is
 *                             given; ReadWriteMany, since every replica mounts it
 *
 * The master pod then makes the replicas' Pods and Services (kube_backend.c), owned by the
 * same Job. The Secret, ConfigMap, claim and Service are made first (the master's pod needs
 * them when it starts), then the Job, and then each of the first four is given the Job as
 * owner (a merge patch of its ownerReferences).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "backend/kube-impl.h"
#include "core/file-impl.h"
#include "dtrain/job.h"

#define MASTER_PORT 8080
#define SPEC_DIR "/etc/dtrain"
#define JOB_ROOT "/var/lib/dtrain/jobs"

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const char *in, size_t n) {
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < n) v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < n) v |= (unsigned char)in[i + 2];
        out[o++] = b64[v >> 18 & 63];
        out[o++] = b64[v >> 12 & 63];
        out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? b64[v & 63] : '=';
    }
    out[o] = 0;
    return out;
}

static dt_err post(dt__kube *k, const char *ns, const char *group_path, const char *plural,
                   json_t *obj, json_t **made) {
    char path[512];
    snprintf(path, sizeof path, "%s/namespaces/%s/%s?fieldValidation=Strict", group_path, ns,
             plural);
    long status;
    json_t *resp = NULL;
    dt_err e = dt__kube_call(k, "POST", path, obj, NULL, &status, &resp);
    const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
    if (!e && status != 201 && status != 200) {
        char why[512];
        e = dt_err_set(status == 409 ? DT_ERR_STATE : status == 422 || status == 400 ? DT_ERR_SPEC
                                                                                      : DT_ERR_IO,
                       "cannot create %s %s in namespace %s (%s): %s%s", plural, name ? name : "?",
                       ns, dt__kube_server(k), dt__kube_why(resp, status, why, sizeof why),
                       status == 409 ? ": delete the job first (kubectl delete job "
                                       "<job>-master) or choose another name"
                                     : "");
    }
    if (!e && made) *made = resp;
    else json_decref(resp);
    return e;
}

static json_t *owner_of(const json_t *job_obj) {
    const json_t *md = json_object_get(job_obj, "metadata");
    return json_pack("{s:s, s:s, s:s, s:s, s:b, s:b}", "apiVersion", "batch/v1", "kind", "Job",
                     "name", json_string_value(json_object_get(md, "name")), "uid",
                     json_string_value(json_object_get(md, "uid")), "controller", 1,
                     "blockOwnerDeletion", 1);
}

static json_t *meta(const char *name, const char *ns, const char *job, json_t *owner) {
    json_t *m = json_pack("{s:s, s:s, s:{s:s, s:s}}", "name", name, "namespace", ns, "labels",
                          "training.kubeflow.org/job-name", job, "dtrain.io/component", "master");
    if (owner) json_object_set_new(m, "ownerReferences", json_pack("[O]", owner));
    return m;
}

/* The master's batch/v1 Job. */
static json_t *master_job(const dt_job_spec *job, const char *ns, const dt__kube_submit_opts *o,
                          const char *claim, const char *spec_file) {
    char name[128], spec_path[4200], job_dir[4200], token_secret[128], cm[128], grace[16];
    snprintf(name, sizeof name, "%s-master", job->name);
    snprintf(spec_path, sizeof spec_path, SPEC_DIR "/%s", spec_file);
    snprintf(job_dir, sizeof job_dir, JOB_ROOT "/%s", job->name);
    snprintf(token_secret, sizeof token_secret, "%s-token", job->name);
    snprintf(cm, sizeof cm, "%s-spec", job->name);
    snprintf(grace, sizeof grace, "%d", o->stop_grace_s > 0 ? o->stop_grace_s : 30);
    const char *image = o->image ? o->image : "dtrain:latest";
    json_t *cmd = json_pack("[s, s, s, s, s, s, s, s, s, s, s, s, s, s, s]", "dtrain", "run",
                            spec_path, "--in-cluster", "--job-dir", job_dir, "--volume-claim",
                            claim, "--image", image, "--bind", "0.0.0.0", "--port", "8080",
                            "--stop-grace");
    json_array_append_new(cmd, json_string(grace));
    json_t *env = json_pack(
        "[{s:s, s:{s:{s:s, s:s}}}, {s:s, s:{s:{s:s}}}, {s:s, s:{s:{s:s}}}]", "name",
        "DTRAIN_JOB_TOKEN", "valueFrom", "secretKeyRef", "name", token_secret, "key", "token",
        "name", "DTRAIN_POD_NAME", "valueFrom", "fieldRef", "fieldPath", "metadata.name", "name",
        "DTRAIN_NAMESPACE", "valueFrom", "fieldRef", "fieldPath", "metadata.namespace");
    json_t *pod_spec = json_pack(
        "{s:s, s:i, s:[{s:s, s:s, s:o, s:o, s:[{s:s, s:i, s:s}], s:[{s:s, s:s}, {s:s, s:s, s:b}]}],"
        " s:[{s:s, s:{s:s}}, {s:s, s:{s:s}}]}",
        "restartPolicy", "OnFailure", "terminationGracePeriodSeconds",
        (o->stop_grace_s > 0 ? o->stop_grace_s : 30) + 30, "containers", "name", "master", "image",
        image, "command", cmd, "env", env, "ports", "name", "http", "containerPort", MASTER_PORT,
        "protocol", "TCP", "volumeMounts", "name", "dtrain-job", "mountPath", job_dir, "name",
        "dtrain-spec", "mountPath", SPEC_DIR, "readOnly", 1, "volumes", "name", "dtrain-job",
        "persistentVolumeClaim", "claimName", claim, "name", "dtrain-spec", "configMap", "name", cm);
    if (o->service_account)
        json_object_set_new(pod_spec, "serviceAccountName", json_string(o->service_account));
    return json_pack("{s:s, s:s, s:o, s:{s:i, s:{s:{s:{s:s, s:s}}, s:o}}}", "apiVersion",
                     "batch/v1", "kind", "Job", "metadata", meta(name, ns, job->name, NULL),
                     "spec", "backoffLimit", 6, "template", "metadata", "labels",
                     "training.kubeflow.org/job-name", job->name, "dtrain.io/component", "master",
                     "spec", pod_spec);
}

dt_err dt__kube_submit(dt__kube *k, const dt_job_spec *job, const dt__kube_submit_opts *o) {
    const char *ns = o->namespace ? o->namespace : dt__kube_namespace(k);
    dt_err e = dt_job_spec_check_kubernetes(job);
    if (e) return e;
    char *spec_text = NULL;
    size_t spec_len = 0;
    if (o->spec_text) {
        if (!(spec_text = strdup(o->spec_text))) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        spec_len = strlen(spec_text);
    } else if ((e = dt__read_file(o->spec_path, &spec_text, &spec_len))) {
        return e;
    }
    const char *base = strrchr(o->spec_path, '/');
    base = base ? base + 1 : o->spec_path;
    char claim[128], name[128];
    snprintf(claim, sizeof claim, "%s", o->claim ? o->claim : "");
    if (!o->claim) snprintf(claim, sizeof claim, "%s-data", job->name);
    unsigned char rnd[16];
    char token[40] = "";
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd) {
        free(spec_text);
        return dt_err_set(DT_ERR_IO, "getrandom: %s", strerror(errno));
    }
    for (int i = 0; i < 16; i++) snprintf(token + 2 * i, 3, "%02x", rnd[i]);

    /* The master pod's Secret, ConfigMap, volume and Service first, then the Job that runs
     * it; then each of them is given the Job as owner, so deleting the Job deletes all. */
    json_t *made = NULL, *owner = NULL, *obj;
    const char *plurals[4];
    char names[4][128];
    int nmade = 0;
    snprintf(name, sizeof name, "%s-token", job->name);
    char *tok64 = b64_encode(token, strlen(token));
    obj = json_pack("{s:s, s:s, s:o, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Secret",
                    "metadata", meta(name, ns, job->name, NULL), "type", "Opaque", "data",
                    "token", tok64 ? tok64 : "");
    e = post(k, ns, "/api/v1", "secrets", obj, NULL);
    json_decref(obj);
    free(tok64);
    if (!e) {
        plurals[nmade] = "secrets";
        snprintf(names[nmade++], sizeof names[0], "%s", name);
        snprintf(name, sizeof name, "%s-spec", job->name);
        obj = json_pack("{s:s, s:s, s:o, s:{s:s%}}", "apiVersion", "v1", "kind", "ConfigMap",
                        "metadata", meta(name, ns, job->name, NULL), "data", base, spec_text,
                        spec_len);
        e = obj ? post(k, ns, "/api/v1", "configmaps", obj, NULL)
                : dt_err_set(DT_ERR_SPEC, "%s: the spec is not UTF-8 text", o->spec_path);
        json_decref(obj);
    }
    if (!e) {
        plurals[nmade] = "configmaps";
        snprintf(names[nmade++], sizeof names[0], "%s", name);
    }
    if (!e && !o->claim) {
        obj = json_pack("{s:s, s:s, s:o, s:{s:[s], s:{s:{s:s}}}}", "apiVersion", "v1", "kind",
                        "PersistentVolumeClaim", "metadata", meta(claim, ns, job->name, NULL),
                        "spec", "accessModes", "ReadWriteMany", "resources", "requests",
                        "storage", o->claim_size ? o->claim_size : "1Gi");
        e = post(k, ns, "/api/v1", "persistentvolumeclaims", obj, NULL);
        json_decref(obj);
        if (!e) {
            plurals[nmade] = "persistentvolumeclaims";
            snprintf(names[nmade++], sizeof names[0], "%s", claim);
        }
    }
    if (!e) {
        snprintf(name, sizeof name, "%s-master", job->name);
        obj = json_pack("{s:s, s:s, s:o, s:{s:{s:s, s:s}, s:[{s:s, s:i, s:i}]}}", "apiVersion",
                        "v1", "kind", "Service", "metadata", meta(name, ns, job->name, NULL),
                        "spec", "selector", "training.kubeflow.org/job-name", job->name,
                        "dtrain.io/component", "master", "ports", "name", "http", "port",
                        MASTER_PORT, "targetPort", MASTER_PORT);
        e = post(k, ns, "/api/v1", "services", obj, NULL);
        json_decref(obj);
        if (!e) {
            plurals[nmade] = "services";
            snprintf(names[nmade++], sizeof names[0], "%s", name);
        }
    }
    if (!e) {
        obj = master_job(job, ns, o, claim, base);
        if (obj && o->owner)
            json_object_set_new(json_object_get(obj, "metadata"), "ownerReferences",
                                json_pack("[O]", o->owner));
        e = obj ? post(k, ns, "/apis/batch/v1", "jobs", obj, &made)
                : dt_err_set(DT_ERR_NOMEM, "out of memory");
        json_decref(obj);
        if (!e) owner = owner_of(made);
        json_decref(made);
    }
    json_t *patch = owner ? json_pack("{s:{s:[O]}}", "metadata", "ownerReferences", owner) : NULL;
    for (int i = 0; i < nmade; i++) {
        char path[512];
        long status;
        json_t *resp = NULL;
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/%s/%s", ns, plurals[i], names[i]);
        if (!patch) { /* the Job could not be made: what was made for it goes */
            if (!dt__kube_call(k, "DELETE", path, NULL, NULL, &status, &resp)) json_decref(resp);
            continue;
        }
        dt_err pe = dt__kube_call(k, "PATCH", path, patch, "application/merge-patch+json",
                                  &status, &resp);
        if (!pe && status != 200) {
            char why[512];
            pe = dt_err_set(DT_ERR_IO, "cannot give %s %s its owner: %s", plurals[i], names[i],
                            dt__kube_why(resp, status, why, sizeof why));
        }
        json_decref(resp);
        if (pe && !e) e = pe;
    }
    json_decref(patch);
    memset(token, 0, sizeof token);
    json_decref(owner);
    free(spec_text);
    return e;
}

/* ---- following a job from outside the cluster ---- */

const char *dt__kube_job_outcome(dt__kube *k, const char *ns, const char *job);

static const char *phase_of(const json_t *pod) {
    const char *p = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    return p ? p : "Pending";
}

/* The outcome the master wrote as its last words: "job NAME Succeeded; ...". -1: none. */
static int outcome_in_log(dt__kube *k, const char *ns, const char *pod, const char *job) {
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s/log?tailLines=20", ns, pod);
    long status;
    char *text = NULL;
    if (dt__kube_get_text(k, path, &status, &text) || status != 200) {
        dt_err_clear();
        free(text);
        return -1;
    }
    static const char *const names[] = {"Succeeded", "Failed", "Stopped"};
    int out = -1;
    char want[160];
    for (int i = 0; i < 3; i++) {
        snprintf(want, sizeof want, "job %s %s;", job, names[i]);
        if (strstr(text, want)) out = i;
    }
    free(text);
    return out;
}

/* Has the job's master Job failed (condition Failed)? Its message said on out. */
static int master_job_failed(dt__kube *k, const char *ns, const char *job, FILE *out) {
    char path[512];
    snprintf(path, sizeof path, "/apis/batch/v1/namespaces/%s/jobs/%s-master", ns, job);
    long status;
    json_t *resp = NULL;
    if (dt__kube_call(k, "GET", path, NULL, NULL, &status, &resp)) dt_err_clear();
    int failed = 0;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(resp, "status"), "conditions"), i, c) {
        const char *t = json_string_value(json_object_get(c, "type"));
        const char *st = json_string_value(json_object_get(c, "status"));
        if (t && st && !strcmp(t, "Failed") && !strcmp(st, "True")) {
            const char *m = json_string_value(json_object_get(c, "message"));
            fprintf(out, "the master's Job %s-master failed: %s\n", job, m ? m : "");
            failed = 1;
        }
    }
    json_decref(resp);
    return failed;
}

/* One pod's row of the live table: {phase, restarts, exit, started}. */
static json_t *row_of(const json_t *pod, const char *type) {
    const json_t *st = json_object_get(pod, "status");
    long long restarts = 0, code = -1;
    size_t i;
    json_t *cs;
    json_array_foreach(json_object_get(st, "containerStatuses"), i, cs) {
        restarts += json_integer_value(json_object_get(cs, "restartCount"));
        const json_t *t = json_object_get(json_object_get(cs, "state"), "terminated");
        if (t) code = json_integer_value(json_object_get(t, "exitCode"));
    }
    const char *started = json_string_value(json_object_get(st, "startTime"));
    return json_pack("{s:s, s:I, s:I, s:s}", "phase",
                     !strcmp(type, "DELETED") ? "Deleted" : phase_of(pod), "restarts",
                     (json_int_t)restarts, "exit", (json_int_t)code, "started",
                     started ? started : "");
}

/* Seconds since an RFC 3339 time ("": 0). */
static double age_of(const char *t) {
    struct tm tm = {0};
    if (!t || !*t || !strptime(t, "%Y-%m-%dT%H:%M:%S", &tm)) return 0;
    return difftime(time(NULL), timegm(&tm));
}

/* The live table on a terminal, drawn over its last drawing (*lines tall). */
static void draw_table(FILE *out, const dt_job_spec *job, const char *ns, json_t *rows,
                       int *lines) {
    if (*lines) fprintf(out, "\033[%dA", *lines);
    int n = 0;
    fprintf(out, "\033[2Kjob %s  namespace %s\n", job->name, ns);
    fprintf(out, "\033[2K%-40s %-10s %8s %5s %8s\n", "POD", "PHASE", "RESTARTS", "EXIT", "AGE");
    n += 2;
    const char *name;
    json_t *r;
    json_object_foreach(rows, name, r) {
        char code[24] = "-";
        json_int_t c = json_integer_value(json_object_get(r, "exit"));
        if (c >= 0) snprintf(code, sizeof code, "%lld", (long long)c);
        fprintf(out, "\033[2K%-40.40s %-10s %8lld %5s %7.0fs\n", name,
                json_string_value(json_object_get(r, "phase")),
                (long long)json_integer_value(json_object_get(r, "restarts")), code,
                age_of(json_string_value(json_object_get(r, "started"))));
        n++;
    }
    for (int extra = n; extra < *lines; extra++) fprintf(out, "\033[2K\n"); /* rows gone */
    if (n < *lines) n = *lines;
    fflush(out);
    *lines = n;
}

dt_err dt__kube_follow(dt__kube *k, const dt_job_spec *job, const char *ns, FILE *out,
                       int *outcome) {
    char path[512], sel[256];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods", ns);
    snprintf(sel, sizeof sel, "training.kubeflow.org/job-name=%s", job->name);
    dt__kube_watch *w;
    dt_err e = dt__kube_watch_start(&w, k, path, sel);
    if (e) return e;
    json_t *seen = json_object(); /* pod name -> "phase" last said */
    json_t *rows = json_object(); /* pod name -> its row of the live table */
    int table = isatty(fileno(out)), lines = 0;
    *outcome = -1;
    int master_down = 0; /* its pod failed with no outcome: is its Job given up? */
    while (*outcome < 0) {
        struct pollfd pfd = {.fd = dt__kube_watch_fd(w), .events = POLLIN};
        int n = poll(&pfd, 1, 1000);
        if (n < 0 && errno != EINTR) {
            e = dt_err_set(DT_ERR_IO, "poll: %s", strerror(errno));
            break;
        }
        if (n == 0 && master_down && master_job_failed(k, ns, job->name, out)) {
            *outcome = 1;
            break;
        }
        char type[16];
        json_t *pod;
        while (*outcome < 0 && dt__kube_watch_next(w, type, sizeof type, &pod)) {
            if (!pod) continue;
            const json_t *md = json_object_get(pod, "metadata");
            const char *name = json_string_value(json_object_get(md, "name"));
            const char *comp = json_string_value(
                json_object_get(json_object_get(md, "labels"), "dtrain.io/component"));
            char state[64];
            snprintf(state, sizeof state, "%s", !strcmp(type, "DELETED") ? "deleted" : phase_of(pod));
            const char *was = json_string_value(json_object_get(seen, name ? name : ""));
            if (name && table) {
                json_object_set_new(rows, name, row_of(pod, type));
            } else if (name && (!was || strcmp(was, state))) {
                fprintf(out, "pod %s: %s\n", name, state);
                fflush(out);
            }
            if (name) json_object_set_new(seen, name, json_string(state));
            int master = comp && !strcmp(comp, "master");
            if (master && name && (!strcmp(state, "Succeeded") || !strcmp(state, "Failed"))) {
                *outcome = outcome_in_log(k, ns, name, job->name);
                /* A master that failed without an outcome is made again by its Job, unless
                 * the Job has failed for good (backoffLimit). */
                if (*outcome < 0 && master_job_failed(k, ns, job->name, out)) *outcome = 1;
                master_down = *outcome < 0;
            }
            if (master && !strcmp(state, "Running")) master_down = 0;
            json_decref(pod);
        }
        if (table) draw_table(out, job, ns, rows, &lines); /* at least once a second: ages */
    }
    json_decref(rows);
    json_decref(seen);
    dt__kube_watch_stop(w);
    return e;
}

const char *dt__kube_job_outcome(dt__kube *k, const char *ns, const char *job) {
    static const char *const names[] = {"Succeeded", "Failed", "Stopped"};
    char path[512];
    snprintf(path, sizeof path,
             "/api/v1/namespaces/%s/pods?labelSelector=training.kubeflow.org%%2Fjob-name%%3D%s,"
             "dtrain.io%%2Fcomponent%%3Dmaster",
             ns, job);
    long status;
    json_t *resp = NULL;
    if (dt__kube_call(k, "GET", path, NULL, NULL, &status, &resp)) dt_err_clear();
    int out = -1;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(resp, "items"), i, p) {
        const char *name = json_string_value(json_object_get(json_object_get(p, "metadata"), "name"));
        int o = name ? outcome_in_log(k, ns, name, job) : -1;
        if (o >= 0) out = o;
    }
    json_decref(resp);
    return out >= 0 ? names[out] : NULL;
}
