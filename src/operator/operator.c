/*
 * operator.c - `dtrain operator`: custom resources in, jobs out.
 *
 * Watches dtrain.io/v1 TrainJobs (and, with --kubeflow, kubeflow.org/v1 TFJobs and
 * PyTorchJobs, for clusters without Kubeflow's training operator) and runs each new one as
 * `dtrain run --backend kubernetes` would (kube_submit.c), its master's Job owned by the
 * resource: deleting the resource deletes the job. The job's master writes the resource's
 * status (conditions, replicaStatuses, startTime, completionTime) as the training operator
 * does; the operator itself writes only what happens before a master runs: Created, or
 * Failed with reason InvalidSpec and the loader's message for a spec that cannot run (what
 * the training operator's admission webhook would refuse).
 *
 * Level-triggered: a resource is started when it has no master Job yet and has not failed,
 * whenever it is seen (on a list, a watch event, a relist after 410 Gone); an operator that
 * restarts starts nothing twice.
 */
#include "operator/operator-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "backend/kube-impl.h"
#include "dtrain/job.h"

typedef struct kind {
    const char *group_version; /* "dtrain.io/v1" */
    const char *plural;        /* "trainjobs" */
    const char *kind;          /* "TrainJob" */
} kind;

static const kind kinds[] = {
    {"dtrain.io/v1", "trainjobs", "TrainJob"},
    {"kubeflow.org/v1", "tfjobs", "TFJob"},
    {"kubeflow.org/v1", "pytorchjobs", "PyTorchJob"},
};

static void say(const dt__operator_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const dt__operator_opts *o, const char *fmt, ...) {
    if (!o->out) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(o->out, fmt, ap);
    va_end(ap);
    fputc('\n', o->out);
    fflush(o->out);
}

static int has_condition(const json_t *obj, const char *type) {
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(json_object_get(obj, "status"), "conditions"), i, c) {
        const char *t = json_string_value(json_object_get(c, "type"));
        const char *s = json_string_value(json_object_get(c, "status"));
        if (t && s && !strcmp(t, type) && !strcmp(s, "True")) return 1;
    }
    return 0;
}

static void now_rfc3339(char *buf, size_t len) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The resource's status: one condition (its type True), as the training operator words it. */
static void set_status(dt__kube *k, const kind *kd, const char *ns, const char *name,
                       const char *type, const char *reason, const char *message) {
    char path[600], ts[32];
    now_rfc3339(ts, sizeof ts);
    snprintf(path, sizeof path, "/apis/%s/namespaces/%s/%s/%s/status", kd->group_version, ns,
             kd->plural, name);
    json_t *patch = json_pack("{s:{s:[{s:s, s:s, s:s, s:s, s:s, s:s}], s:{}}}", "status",
                              "conditions", "type", type, "status", "True", "reason", reason,
                              "message", message, "lastUpdateTime", ts, "lastTransitionTime", ts,
                              "replicaStatuses");
    long status;
    json_t *resp = NULL;
    if (dt__kube_call(k, "PATCH", path, patch, "application/merge-patch+json", &status, &resp))
        dt_err_clear();
    json_decref(resp);
    json_decref(patch);
}

/* Does the job's master Job exist? */
static int master_exists(dt__kube *k, const char *ns, const char *name) {
    char path[600];
    snprintf(path, sizeof path, "/apis/batch/v1/namespaces/%s/jobs/%s-master", ns, name);
    long status = 0;
    json_t *resp = NULL;
    if (dt__kube_call(k, "GET", path, NULL, NULL, &status, &resp)) dt_err_clear();
    json_decref(resp);
    return status == 200;
}

/* A new resource: its job is checked, then started with the resource as owner. */
static void reconcile(const dt__operator_opts *o, dt__kube *k, const kind *kd, const json_t *obj) {
    const json_t *md = json_object_get(obj, "metadata");
    const char *name = json_string_value(json_object_get(md, "name"));
    const char *ns = json_string_value(json_object_get(md, "namespace"));
    const char *uid = json_string_value(json_object_get(md, "uid"));
    if (!name || !ns || !uid || json_object_get(md, "deletionTimestamp")) return;
    if (has_condition(obj, "Succeeded") || has_condition(obj, "Failed")) return;
    if (master_exists(k, ns, name)) return;
    /* The spec as the user wrote it: the API server's own metadata and status left out. */
    json_t *doc = json_pack("{s:O, s:O, s:{s:s, s:s}, s:O}", "apiVersion",
                            json_object_get(obj, "apiVersion"), "kind", json_object_get(obj, "kind"),
                            "metadata", "name", name, "namespace", ns, "spec",
                            json_object_get(obj, "spec"));
    char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(doc);
    if (!text) return;
    char file[300];
    snprintf(file, sizeof file, "%s-%s.yaml", ns, name); /* JSON is YAML */
    dt_job_spec *job = NULL;
    dt_err e = dt_job_spec_parse(&job, text, strlen(text), file);
    if (!e) e = dt_job_spec_check_kubernetes(job);
    if (e) {
        say(o, "%s %s/%s: invalid: %s", kd->kind, ns, name, dt_errmsg());
        set_status(k, kd, ns, name, "Failed", "InvalidSpec", dt_errmsg());
        dt_job_spec_free(job);
        free(text);
        return;
    }
    json_t *owner = json_pack("{s:s, s:s, s:s, s:s, s:b, s:b}", "apiVersion", kd->group_version,
                              "kind", kd->kind, "name", name, "uid", uid, "controller", 1,
                              "blockOwnerDeletion", 1);
    dt__kube_submit_opts so = {.spec_path = file, .spec_text = text, .namespace = ns,
                               .image = o->image, .owner = owner};
    if ((e = dt__kube_submit(k, job, &so))) {
        say(o, "%s %s/%s: cannot start: %s", kd->kind, ns, name, dt_errmsg());
        if (e == DT_ERR_SPEC) set_status(k, kd, ns, name, "Failed", "InvalidSpec", dt_errmsg());
    } else {
        char msg[300];
        snprintf(msg, sizeof msg, "%s %s is created.", kd->kind, name);
        set_status(k, kd, ns, name, "Created", "JobCreated", msg);
        say(o, "%s %s/%s: started (master Job %s-master)", kd->kind, ns, name, name);
    }
    json_decref(owner);
    dt_job_spec_free(job);
    free(text);
}

/* SIGINT and SIGTERM are blocked in the operator's threads and read from a signalfd; a
 * library's thread started before (OpenBLAS's pool) does not block them, and one delivered
 * there runs this handler, which passes it on through a pipe. */
static int stop_pipe[2] = {-1, -1};

static void on_stop_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(stop_pipe[1], &b, 1) < 0) {
        /* the pipe is full: a stop is under way already */
    }
    errno = saved;
}

dt_err dt__operator_run(const dt__operator_opts *o) {
    /* Blocked before the watch threads start (they inherit the mask): SIGINT and SIGTERM
     * come only through the signalfd below. */
    sigset_t mask, old;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, &old);
    if (stop_pipe[0] < 0 && pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return dt_err_set(DT_ERR_IO, "pipe: %s", strerror(errno));
    }
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    dt__kube_conn c = {.kubeconfig = o->kubeconfig, .context = o->context};
    dt__kube *k;
    dt_err e = dt__kube_connect(&k, &c);
    if (e) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return e;
    }
    int nk = o->kubeflow ? 3 : 1;
    dt__kube_watch *w[3] = {0};
    for (int i = 0; i < nk && !e; i++) {
        char path[300];
        if (o->namespace)
            snprintf(path, sizeof path, "/apis/%s/namespaces/%s/%s", kinds[i].group_version,
                     o->namespace, kinds[i].plural);
        else
            snprintf(path, sizeof path, "/apis/%s/%s", kinds[i].group_version, kinds[i].plural);
        e = dt__kube_watch_start(&w[i], k, path, NULL);
    }
    int sfd = e ? -1 : signalfd(-1, &mask, SFD_CLOEXEC);
    if (!e && sfd < 0) e = dt_err_set(DT_ERR_IO, "signalfd: %s", strerror(errno));
    if (!e)
        say(o, "dtrain operator: watching %s in %s (%s)",
            o->kubeflow ? "TrainJobs, TFJobs and PyTorchJobs" : "TrainJobs",
            o->namespace ? o->namespace : "every namespace", dt__kube_server(k));
    while (!e) {
        struct pollfd pfd[5];
        for (int i = 0; i < nk; i++) pfd[i] = (struct pollfd){.fd = dt__kube_watch_fd(w[i]), .events = POLLIN};
        pfd[nk] = (struct pollfd){.fd = sfd, .events = POLLIN};
        pfd[nk + 1] = (struct pollfd){.fd = stop_pipe[0], .events = POLLIN};
        if (poll(pfd, (nfds_t)nk + 2, -1) < 0 && errno != EINTR) {
            e = dt_err_set(DT_ERR_IO, "poll: %s", strerror(errno));
            break;
        }
        if (pfd[nk].revents || pfd[nk + 1].revents) {
            say(o, "dtrain operator: stopping");
            break;
        }
        for (int i = 0; i < nk; i++) {
            char type[16];
            json_t *obj;
            while (dt__kube_watch_next(w[i], type, sizeof type, &obj)) {
                if (obj && strcmp(type, "DELETED")) reconcile(o, k, &kinds[i], obj);
                json_decref(obj);
            }
        }
    }
    if (sfd >= 0) close(sfd);
    sigprocmask(SIG_SETMASK, &old, NULL);
    for (int i = 0; i < nk; i++) dt__kube_watch_stop(w[i]);
    dt__kube_free(k);
    return e;
}
