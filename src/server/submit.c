/*
 * submit.c - what the server is given to run, in each of its forms, made into one manifest.
 *
 * POST /v1/jobs takes:
 *   - a manifest (TFJob, PyTorchJob, TrainJob) as YAML or JSON text;
 *   - {"manifest": "<yaml text>", "priority": N, "labels": {...}, "path": "/abs/file.yaml"}
 *     (what `dtrain submit` sends: path names the submitter's file, so errors say FILE:LINE
 *     of it and relative data paths resolve next to it);
 *   - the seed's submission {"strategy": "AllReduce"|"ParameterServer", "workers": N,
 *     "ps": M, "image": "...", "command": [...], "task": "name", "workingDir": "..."}.
 * GET /create?strategy=&n_worker=&n_ps=&img=&name= is the seed's client (seed 004).
 *
 * The seed's form becomes a TFJob: Worker replicas (AllReduce) or PS and Worker
 * (ParameterServer), each running the command (default `python3 exec.py`) in the image's
 * directory with NUM_WORKERS beside the TF_CONFIG every replica of a TFJob gets. An image
 * is a directory holding exec.py: an absolute path, or a name under SERVER_DIR/images/; the
 * seed's client appends "_pod" to the name it was given, so NAME_pod and NAME are both
 * looked up.
 *
 * Every manifest goes through the job spec parser (dt_job_spec_parse) and the local
 * backend's check, so a bad one is refused with their "FILE:LINE: field: what" message.
 * Its demand (queue.c) is worked out here from the spec and, for a TFJob or PyTorchJob,
 * the containers' resources, read from the manifest at the container path the parser found;
 * so is one worker's, which `dtrain scale` through the server adds or takes away.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/path-impl.h"
#include "dtrain/job.h"
#include "server/server-impl.h"
#include "spec/yaml_doc-impl.h"

void dt__submission_free(dt__submission *sub) {
    free(sub->yaml);
    json_decref(sub->labels);
    memset(sub, 0, sizeof *sub);
}

/* Follow a field path ("spec.tfReplicaSpecs.Worker.template.spec.containers[0]") down
 * from the root. 0 when some step is not there. */
static int walk(const dt__yval *root, const char *path, dt__yval *out) {
    dt__yval cur = *root;
    char buf[DT__YPATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *seg = strtok_r(buf, ".", &save); seg; seg = strtok_r(NULL, ".", &save)) {
        char *br = strchr(seg, '[');
        int idx = -1;
        if (br) {
            idx = atoi(br + 1);
            *br = 0;
        }
        dt__yval next;
        if (!dt__yval_is_map(&cur) || !dt__ymap_get(&cur, seg, &next)) return 0;
        cur = next;
        if (idx >= 0) {
            if (!dt__yval_is_seq(&cur) || idx >= dt__yseq_size(&cur)) return 0;
            dt__yseq_item(&cur, idx, &next);
            cur = next;
        }
    }
    *out = cur;
    return 1;
}

/* resources.{requests,limits}.<what> of a container, as a quantity; -1 when not given. */
static double resource(const dt__yval *c, const char *what) {
    static const char *const kinds[] = {"requests", "limits"};
    dt__yval res, m, v;
    if (!dt__yval_is_map(c) || !dt__ymap_get(c, "resources", &res) || !dt__yval_is_map(&res))
        return -1;
    for (int k = 0; k < 2; k++) {
        const char *s;
        if (dt__ymap_get(&res, kinds[k], &m) && dt__yval_is_map(&m) && dt__ymap_get(&m, what, &v) &&
            dt__yval_is_scalar(&v) && dt__yget_str(&v, &s) == DT_OK) {
            double q = dt__quantity(s);
            if (q >= 0) return q;
        }
        dt_err_clear();
    }
    return -1;
}

/* The manifest's metadata.labels (string values) into labels. */
static void manifest_labels(const dt__yval *root, json_t *labels) {
    dt__yval md, l;
    if (!dt__yval_is_map(root) || !dt__ymap_get(root, "metadata", &md) || !dt__yval_is_map(&md) ||
        !dt__ymap_get(&md, "labels", &l) || !dt__yval_is_map(&l))
        return;
    for (int i = 0; i < dt__ymap_size(&l); i++) {
        const char *k, *v;
        int line;
        dt__yval val;
        dt__ymap_entry(&l, i, &k, &line, &val);
        if (k && dt__yval_is_scalar(&val) && dt__yget_str(&val, &v) == DT_OK)
            json_object_set_new(labels, k, json_string(v));
        dt_err_clear();
    }
}

/* Parse and check the manifest text; its name, kind, demand and labels. */
static int take_manifest(dt__submission *sub, const char *path, char *err, size_t cap) {
    dt_job_spec *job = NULL;
    size_t len = strlen(sub->yaml);
    dt_err e = dt_job_spec_parse(&job, sub->yaml, len, path);
    if (!e) e = dt_job_spec_check_local(job);
    if (e) {
        snprintf(err, cap, "%s", dt_errmsg());
        dt_err_clear();
        dt_job_spec_free(job);
        return 400;
    }
    snprintf(sub->name, sizeof sub->name, "%s", job->name);
    snprintf(sub->kind, sizeof sub->kind, "%s", dt_job_kind_name(job->kind));
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    dt__ystream *ys = NULL;
    dt__ydoc *doc = NULL;
    dt__yval root = {0};
    if (dt__ystream_open_mem(&ys, sub->yaml, len, path) == DT_OK &&
        dt__ystream_next(ys, &doc) == DT_OK && doc)
        dt__ydoc_root(doc, "", &root);
    dt_err_clear();
    sub->demand = (dt__demand){0, 0};
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++) {
        const dt_replica_spec *rs = &job->replicas[t];
        if (!rs->present) continue;
        double cpu = 1, mem = 0;
        if (job->kind == DT_JOB_KIND_TRAINJOB) {
            if (t != DT_REPLICA_TYPE_PS && t != DT_REPLICA_TYPE_EVALUATOR && job->train)
                cpu = job->train->threads > 0 ? job->train->threads : ncpu;
        } else {
            dt__yval c;
            if (doc && rs->container_path[0] && walk(&root, rs->container_path, &c)) {
                double q = resource(&c, "cpu");
                if (q >= 0) cpu = q;
                q = resource(&c, "memory");
                if (q >= 0) mem = q;
            }
        }
        if (t == DT_REPLICA_TYPE_WORKER) sub->worker = (dt__demand){cpu, (int64_t)mem};
        if (rs->replicas <= 0) continue;
        sub->demand.cpus += cpu * rs->replicas;
        sub->demand.mem += (int64_t)(mem * rs->replicas);
    }
    json_t *labels = json_object();
    if (doc) manifest_labels(&root, labels);
    json_object_update(labels, sub->labels); /* the given ones win */
    json_decref(sub->labels);
    sub->labels = labels;
    dt__ydoc_free(doc);
    dt__ystream_free(ys);
    dt_job_spec_free(job);
    return 0;
}

static int bad(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return 400;
}

static int is_dir_with(const char *dir, const char *file) {
    struct stat sb;
    char p[DT__PATH_MAX];
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) return 0;
    if (!file) return 1;
    if (dt__path(p, sizeof p, "%s/%s", dir, file)) {
        dt_err_clear();
        return 0;
    }
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The image's directory: NAME_pod, NAME, NAME without "_pod", absolute or under images/. */
static int find_image(dt__server *s, const char *img, int need_exec, char *out, size_t cap) {
    char names[3][300];
    int n = 0;
    size_t l = strlen(img);
    if (l >= 250) return 0;
    snprintf(names[n++], sizeof names[0], "%s_pod", img);
    snprintf(names[n++], sizeof names[0], "%s", img);
    if (l > 4 && !strcmp(img + l - 4, "_pod")) snprintf(names[n++], sizeof names[0], "%.*s", (int)(l - 4), img);
    for (int i = 0; i < n; i++) {
        char p[DT__PATH_MAX];
        if (names[i][0] != '/' && strstr(names[i], "..")) continue;
        if (names[i][0] == '/' ? dt__path(p, sizeof p, "%s", names[i])
                               : dt__path(p, sizeof p, "%s/images/%s", s->dir, names[i])) {
            dt_err_clear(); /* not there */
            continue;
        }
        if (is_dir_with(p, need_exec ? "exec.py" : NULL) && strlen(p) < cap) {
            if (!realpath(p, out)) memcpy(out, p, strlen(p) + 1); /* fits: checked */
            return 1;
        }
    }
    return 0;
}

static int dns_label(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 63 || !islower((unsigned char)s[0]) || s[n - 1] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '-') return 0;
    return 1;
}

/* The seed's submission as a TFJob (JSON text, which YAML reads as it is). */
static int seed_manifest(dt__server *s, const char *strategy, long workers, long ps,
                         const char *image, json_t *command, const char *wdir, const char *task,
                         dt__submission *sub, char *err, size_t cap) {
    int allreduce;
    char low[32];
    size_t k = 0;
    for (; strategy && strategy[k] && k + 1 < sizeof low; k++)
        low[k] = (char)tolower((unsigned char)strategy[k]);
    low[k] = 0;
    if (!strcmp(low, "allreduce")) allreduce = 1;
    else if (!strcmp(low, "parameterserver") || !strcmp(low, "parameter_server")) allreduce = 0;
    else return bad(err, cap, "strategy: expected AllReduce or ParameterServer, got '%s'",
                    strategy ? strategy : "");
    if (!task || !dns_label(task))
        return bad(err, cap, "task: '%s' is not a job name (lowercase letters, digits and '-', "
                             "starting with a letter, at most 63)", task ? task : "");
    if (workers < 1 || workers > 1024) return bad(err, cap, "workers: expected 1..1024, got %ld", workers);
    if (allreduce && ps != 0)
        return bad(err, cap, "ps: AllReduce runs no parameter servers, got %ld", ps);
    if (!allreduce && (ps < 1 || ps > 64))
        return bad(err, cap, "ps: ParameterServer needs 1..64 parameter servers, got %ld", ps);
    char dir[DT__PATH_MAX] = "";
    int own_cmd = json_array_size(command) > 0;
    if (image && *image) {
        if (!find_image(s, image, !own_cmd, dir, sizeof dir)) {
            return bad(err, cap,
                       "image '%s': no directory %s_pod or %s (absolute, or under %s/images) "
                       "holding %s",
                       image, image, image, s->dir, own_cmd ? "the command's files" : "exec.py");
        }
    } else if (wdir && *wdir) {
        if (dt__path(dir, sizeof dir, "%s", wdir)) {
            dt_err_clear();
            return bad(err, cap, "workingDir: path too long (at most %d bytes)", DT__PATH_MAX - 1);
        }
    } else {
        return bad(err, cap, "image: required (a directory holding exec.py)");
    }
    json_t *cmd = own_cmd ? json_deep_copy(command) : json_pack("[s, s]", "python3", "exec.py");
    size_t i;
    json_t *a;
    json_array_foreach(cmd, i, a) if (!json_is_string(a)) {
        json_decref(cmd);
        return bad(err, cap, "command: expected a list of strings");
    }
    char nw[32];
    snprintf(nw, sizeof nw, "%ld", workers);
    json_t *specs = json_object();
    for (int t = allreduce ? 1 : 0; t < 2; t++) {
        json_t *c = json_pack("{s:s, s:s, s:O, s:s, s:[{s:s, s:s}]}", "name", "tensorflow", "image",
                              image && *image ? image : "local", "command", cmd, "workingDir", dir,
                              "env", "name", "NUM_WORKERS", "value", nw);
        json_object_set_new(specs, t ? "Worker" : "PS",
                            json_pack("{s:I, s:s, s:{s:{s:[o]}}}", "replicas",
                                      (json_int_t)(t ? workers : ps), "restartPolicy", "Never",
                                      "template", "spec", "containers", c));
    }
    json_decref(cmd);
    json_t *m = json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:o}}", "apiVersion", "kubeflow.org/v1",
                          "kind", "TFJob", "metadata", "name", task, "labels", "dtrain.io/submitted-as",
                          allreduce ? "AllReduce" : "ParameterServer", "spec", "tfReplicaSpecs", specs);
    sub->yaml = json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(m);
    if (!sub->yaml) return bad(err, cap, "out of memory");
    return take_manifest(sub, "submission", err, cap);
}

static int parse_priority(const char *s, int *out) {
    if (!s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < -1000000 || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}

static int take_labels(json_t *l, dt__submission *sub, char *err, size_t cap) {
    if (!l) return 0;
    const char *k;
    json_t *v;
    if (!json_is_object(l)) return bad(err, cap, "labels: expected an object of strings");
    json_object_foreach(l, k, v) {
        if (!json_is_string(v)) return bad(err, cap, "labels.%s: expected a string", k);
        json_object_set(sub->labels, k, v);
    }
    return 0;
}

int dt__submit_parse_body(dt__server *s, const char *body, size_t len, const char *prio_q,
                          dt__submission *sub, char *err, size_t cap) {
    memset(sub, 0, sizeof *sub);
    sub->labels = json_object();
    if (parse_priority(prio_q, &sub->priority))
        return bad(err, cap, "priority: expected an integer, got '%s'", prio_q);
    if (!len || strlen(body) != len) return bad(err, cap, "the body is empty or holds a NUL byte");
    json_t *j = json_loadb(body, len, 0, NULL);
    int rc = 0;
    if (json_is_object(j) && json_object_get(j, "manifest") &&
        !json_is_string(json_object_get(j, "manifest"))) {
        rc = bad(err, cap, "manifest: expected the manifest's text (a string of YAML or JSON)");
    } else if (json_is_object(j) && json_is_string(json_object_get(j, "manifest"))) {
        json_t *p = json_object_get(j, "priority");
        if (p && !json_is_integer(p)) rc = bad(err, cap, "priority: expected an integer");
        else if (p) sub->priority = (int)json_integer_value(p);
        if (!rc) rc = take_labels(json_object_get(j, "labels"), sub, err, cap);
        const char *path = json_string_value(json_object_get(j, "path"));
        if (path && path[0] == '/' && dt__path(sub->origin, sizeof sub->origin, "%s", path)) {
            dt_err_clear();
            rc = bad(err, cap, "path: too long (at most %d bytes)", DT__PATH_MAX - 1);
        }
        if (!rc) {
            sub->yaml = strdup(json_string_value(json_object_get(j, "manifest")));
            rc = take_manifest(sub, sub->origin[0] ? sub->origin : "request.yaml", err, cap);
        }
    } else if (json_is_object(j) && json_object_get(j, "strategy") && !json_object_get(j, "apiVersion")) {
        json_t *w = json_object_get(j, "workers"), *ps = json_object_get(j, "ps");
        json_t *p = json_object_get(j, "priority");
        if (!json_is_string(json_object_get(j, "strategy")))
            rc = bad(err, cap, "strategy: expected AllReduce or ParameterServer (a string)");
        else if (!json_is_integer(w)) rc = bad(err, cap, "workers: expected an integer");
        else if (ps && !json_is_integer(ps)) rc = bad(err, cap, "ps: expected an integer");
        else if (p && !json_is_integer(p)) rc = bad(err, cap, "priority: expected an integer");
        else if (json_object_get(j, "command") && !json_is_array(json_object_get(j, "command")))
            rc = bad(err, cap, "command: expected a list of strings");
        if (!rc && p) sub->priority = (int)json_integer_value(p);
        if (!rc) rc = take_labels(json_object_get(j, "labels"), sub, err, cap);
        if (!rc)
            rc = seed_manifest(s, json_string_value(json_object_get(j, "strategy")),
                               (long)json_integer_value(w), ps ? (long)json_integer_value(ps) : 0,
                               json_string_value(json_object_get(j, "image")),
                               json_object_get(j, "command"),
                               json_string_value(json_object_get(j, "workingDir")),
                               json_string_value(json_object_get(j, "task")), sub, err, cap);
    } else {
        sub->yaml = malloc(len + 1);
        if (sub->yaml) {
            memcpy(sub->yaml, body, len);
            sub->yaml[len] = 0;
        }
        rc = take_manifest(sub, "request.yaml", err, cap);
    }
    json_decref(j);
    return rc;
}

int dt__submit_parse_create(dt__server *s, const char *strategy, const char *nw, const char *nps,
                            const char *img, const char *name, dt__submission *sub, char *err,
                            size_t cap) {
    memset(sub, 0, sizeof *sub);
    sub->labels = json_object();
    char *end;
    long w = nw ? strtol(nw, &end, 10) : 0;
    if (!nw || end == nw || *end) return bad(err, cap, "n_worker: expected an integer, got '%s'", nw ? nw : "");
    long ps = nps && *nps ? strtol(nps, &end, 10) : 0;
    if (nps && *nps && (end == nps || *end))
        return bad(err, cap, "n_ps: expected an integer, got '%s'", nps);
    if (!img || !*img) return bad(err, cap, "img: required (the image's name)");
    return seed_manifest(s, strategy, w, ps, img, NULL, NULL, name, sub, err, cap);
}
