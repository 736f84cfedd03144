/*
 * metrics.c - a trial's metrics from its job dir: TensorBoard runs, result.json and Katib's
 * StdOut format in the replica logs (src/tune/metrics-impl.h; docs/TUNE.md "Metrics").
 *
 * Each call reads the files as they are now; the runner polls it for running trials (what is
 * there so far are the intermediate values medianstop and ASHA use) and once more when a
 * trial has ended. Reading everything again each time keeps no state between polls: event
 * files and logs of small trials are kilobytes, and a resumed job's purged points (a START)
 * come out right without bookkeeping.
 *
 * Katib's StdOut regular expressions are Perl-style (\w, \d, \s); POSIX regcomp has no such
 * escapes, so they are rewritten into bracket expressions first ([[:alnum:]_], [0-9],
 * [[:space:]]; inside a bracket the class alone). A match whose name group is the metric and
 * whose value group parses as a number is an observation; Katib's rule that the first group
 * is the name and the second the value holds for metricsFormat as well.
 */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/spec.h"
#include "dtrain/summary.h"
#include "tune/metrics-impl.h"

const char dt__katib_default_format[] =
    "([\\w|-]+)\\s*=\\s*([+-]?\\d*(\\.\\d+)?([Ee][+-]?\\d+)?)";

dt_err dt__collector_parse(const char *kind, dt__collector *out) {
    if (!kind || !*kind || !strcmp(kind, "Default") || !strcmp(kind, "None"))
        *out = DT__COLLECT_AUTO;
    else if (!strcmp(kind, "File"))
        *out = DT__COLLECT_FILE;
    else if (!strcmp(kind, "StdOut"))
        *out = DT__COLLECT_STDOUT;
    else if (!strcmp(kind, "TensorFlowEvent"))
        *out = DT__COLLECT_TFEVENT;
    else
        return dt_err_set(DT_ERR_SPEC,
                          "metrics collector '%s': expected StdOut, TensorFlowEvent or File",
                          kind);
    return DT_OK;
}

void dt__metric_free(dt__metric *m) {
    free(m->obs);
    m->obs = NULL;
    m->n = m->cap = 0;
}

static dt_err add_obs(dt__metric *m, int64_t step, int resource, double v) {
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 16;
        dt__metric_obs *o = realloc(m->obs, (size_t)cap * sizeof *o);
        if (!o) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        m->obs = o;
        m->cap = cap;
    }
    m->obs[m->n++] = (dt__metric_obs){step, resource, v};
    return DT_OK;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of dir (sorted, "." and ".." left out); caller frees. -1 when unreadable. */
static int list_dir(const char *dir, char ***out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    char **v = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            char **nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) break;
            v = nv;
        }
        if (!(v[n] = strdup(de->d_name))) break;
        n++;
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *out = v;
    return n;
}

/* A place metrics are looked for, by dt__path's rule (core/path-impl.h) but without an
 * error: 1 when it fits; one that does not is not there (never a cut path, which would
 * name another file). */
static int path_ok(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int path_ok(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < cap) return 1;
    if (cap) buf[0] = 0;
    return 0;
}

static void free_list(char **v, int n) {
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* ---- TensorBoard ---- */

/* Look for tag in run dir run_dir; 1 and the observations added when it has points. */
static int from_run(dt__metric *m, const char *run_dir, const char *tag, dt_err *e) {
    if (!is_dir(run_dir)) return 0;
    dt_summary_run *r = NULL;
    if ((*e = dt_summary_read_run(run_dir, &r))) return 0;
    const dt_summary_series *s = dt_summary_run_tag(r, tag);
    int found = 0;
    if (s && s->n) {
        found = 1;
        for (size_t i = 0; !*e && i < s->n; i++)
            *e = add_obs(m, s->pts[i].step, (int)i + 1, s->pts[i].value);
    }
    dt_summary_run_free(r);
    return found;
}

/* A TrainJob's training.logdir when its spec (JOB_DIR/spec.yaml) gives an absolute one. */
static int spec_logdir(const char *job_dir, char *out, size_t cap) {
    char path[DT__PATH_MAX];
    struct stat st;
    if (!path_ok(path, sizeof path, "%s/spec.yaml", job_dir) || stat(path, &st) != 0) return 0;
    char *text;
    size_t len;
    if (dt__read_file(path, &text, &len)) {
        dt_err_clear();
        return 0;
    }
    int found = 0;
    if (strstr(text, "logdir")) { /* parsed only when it may say (most specs do not) */
        dt_spec *sp = NULL;
        if (!dt_spec_parse(&sp, text, len, path) && sp->logdir[0] == '/' && is_dir(sp->logdir)) {
            found = path_ok(out, cap, "%s", sp->logdir);
        }
        dt_err_clear();
        dt_spec_free(sp);
    }
    free(text);
    return found;
}

/* The logdirs of a job: its spec's training.logdir, JOB_DIR/tensorboard, then each replica's,
 * in name order. */
static int logdirs(const char *job_dir, char ***out) {
    char **reps = NULL;
    char path[DT__PATH_MAX];
    int nr = path_ok(path, sizeof path, "%s/replicas", job_dir) ? list_dir(path, &reps) : -1;
    if (nr < 0) nr = 0;
    char **v = calloc((size_t)nr + 2, sizeof *v);
    int n = 0;
    if (v) {
        if (spec_logdir(job_dir, path, sizeof path)) v[n++] = strdup(path);
        if (path_ok(path, sizeof path, "%s/tensorboard", job_dir) && is_dir(path))
            v[n++] = strdup(path);
        for (int i = 0; i < nr; i++)
            if (path_ok(path, sizeof path, "%s/replicas/%s/tensorboard", job_dir, reps[i]) &&
                is_dir(path))
                v[n++] = strdup(path);
        for (int i = 0; i < n; i++)
            if (!v[i]) { /* out of memory: fewer dirs */
                n = i;
                break;
            }
    }
    free_list(reps, nr);
    *out = v;
    return n;
}

static dt_err from_tensorboard(dt__metric *m, const char *job_dir, const char *name) {
    char **dirs;
    int nd = logdirs(job_dir, &dirs);
    dt_err e = DT_OK;
    int found = 0;
    char path[DT__PATH_MAX];
    const char *slash = strchr(name, '/');
    for (int i = 0; !found && !e && i < nd; i++) {
        if (slash) { /* RUN/TAG */
            found = path_ok(path, sizeof path, "%s/%.*s", dirs[i], (int)(slash - name), name) &&
                    from_run(m, path, slash + 1, &e);
        } else {
            const char *runs[] = {"eval", "train"};
            for (int k = 0; !found && !e && k < 2; k++)
                found = path_ok(path, sizeof path, "%s/%s", dirs[i], runs[k]) &&
                        from_run(m, path, name, &e);
        }
    }
    /* the name as a tag of its own, in the logdir itself (the root run) or any run */
    for (int i = 0; !found && !e && i < nd; i++) {
        found = from_run(m, dirs[i], name, &e);
        char **runs;
        int nrun = list_dir(dirs[i], &runs);
        for (int k = 0; !found && !e && k < nrun; k++)
            found = path_ok(path, sizeof path, "%s/%s", dirs[i], runs[k]) &&
                    from_run(m, path, name, &e);
        if (nrun > 0) free_list(runs, nrun);
    }
    free_list(dirs, nd);
    if (found) m->source = "tensorboard";
    return e;
}

/* ---- result.json ---- */

static const json_t *path_num(const json_t *o, const char *dotted) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", dotted);
    const json_t *v = o;
    for (char *save = NULL, *t = strtok_r(buf, "/.", &save); t; t = strtok_r(NULL, "/.", &save))
        if (!(v = json_is_object(v) ? json_object_get(v, t) : NULL)) return NULL;
    return json_is_number(v) ? v : NULL;
}

static void from_result(dt__metric *m, const char *job_dir, const char *name) {
    char path[DT__PATH_MAX];
    json_t *r = path_ok(path, sizeof path, "%s/result.json", job_dir) ? json_load_file(path, 0, NULL)
                                                                      : NULL;
    if (!r) return;
    const json_t *v = path_num(r, name);
    if (!v) {
        const json_t *ev = json_object_get(r, "eval");
        if (ev) v = path_num(ev, name);
    }
    /* a job's result holds its built-in replicas' own (train.loss is there) */
    const json_t *reps = json_object_get(r, "replicas");
    const char *rk;
    const json_t *rv;
    json_object_foreach((json_t *)reps, rk, rv) {
        if (v) break;
        v = path_num(json_object_get(rv, "result"), name);
    }
    if (v) {
        m->has_result = 1;
        m->result = json_number_value(v);
        if (!*m->source) m->source = "result";
    }
    json_decref(r);
}

/* ---- StdOut ---- */

/* Katib's Perl-style classes into POSIX ERE. */
static void to_posix(const char *in, char *out, size_t cap) {
    size_t o = 0;
    int bracket = 0;
#define PUT(s)                                                                                 \
    do {                                                                                       \
        for (const char *q_ = (s); *q_ && o + 1 < cap; q_++)                                   \
            out[o++] = *q_;                                                                    \
    } while (0)
    for (const char *p = in; *p && o + 1 < cap; p++) {
        if (*p == '\\' && p[1]) {
            char c = *++p;
            const char *cls = c == 'w' ? "[:alnum:]_" : c == 'd' ? "0-9" : c == 's' ? "[:space:]" : NULL;
            if (cls) {
                if (!bracket) PUT("[");
                PUT(cls);
                if (!bracket) PUT("]");
            } else if (bracket) {
                out[o++] = c; /* an escaped character in a bracket is itself */
            } else {
                out[o++] = '\\';
                if (o + 1 < cap) out[o++] = c;
            }
            continue;
        }
        if (!bracket && *p == '[') {
            bracket = 1;
            out[o++] = '[';
            if (p[1] == '^' && o + 1 < cap) out[o++] = *++p;
            if (p[1] == ']' && o + 1 < cap) out[o++] = *++p;
            continue;
        }
        if (bracket && *p == ']') bracket = 0;
        out[o++] = *p;
    }
#undef PUT
    out[o] = 0;
}

/* The number after `key=` in line (epoch=3, step: 200 ...), or -1. */
static int64_t line_int(const char *line, const char *key) {
    size_t kl = strlen(key);
    for (const char *p = line; (p = strstr(p, key)); p += kl) {
        if (p > line && (p[-1] == '_' || p[-1] == '-' || (p[-1] >= 'a' && p[-1] <= 'z') ||
                         (p[-1] >= 'A' && p[-1] <= 'Z')))
            continue;
        const char *q = p + kl;
        while (*q == ' ' || *q == '\t')
            q++;
        if (*q != '=' && *q != ':') continue;
        q++;
        while (*q == ' ' || *q == '\t')
            q++;
        char *end;
        long long v = strtoll(q, &end, 10);
        if (end != q && v >= 0) return v;
    }
    return -1;
}

static const char *primary_log(const char *job_dir, char *path, size_t cap) {
    const char *prefer[] = {"chief-0", "master-0", "worker-0"};
    struct stat st;
    for (int i = 0; i < 3; i++) {
        if (path_ok(path, cap, "%s/logs/%s.log", job_dir, prefer[i]) && stat(path, &st) == 0)
            return path;
    }
    char logs[DT__PATH_MAX];
    char **v;
    int n = path_ok(logs, sizeof logs, "%s/logs", job_dir) ? list_dir(logs, &v) : -1;
    const char *found = NULL;
    for (int i = 0; i < n && !found; i++) {
        size_t l = strlen(v[i]);
        if (l > 4 && !strcmp(v[i] + l - 4, ".log")) {
            if (path_ok(path, cap, "%s/%s", logs, v[i])) found = path;
        }
    }
    if (n > 0) free_list(v, n);
    return found;
}

/* name=value lines of the file at path (a log, or the File collector's TEXT file). */
static dt_err from_lines(dt__metric *m, const char *path, const char *name,
                         const char *const *formats, int nformats, int finished,
                         const char *source) {
    char *data;
    size_t len;
    if (dt__read_file(path, &data, &len)) {
        dt_err_clear(); /* not there yet */
        return DT_OK;
    }
    int nf = nformats > 0 ? nformats : 1;
    regex_t *re = calloc((size_t)nf, sizeof *re);
    dt_err e = re ? DT_OK : dt_err_set(DT_ERR_NOMEM, "out of memory");
    int ncomp = 0;
    for (int i = 0; !e && i < nf; i++) {
        char posix[2048];
        const char *f = nformats > 0 ? formats[i] : dt__katib_default_format;
        to_posix(f, posix, sizeof posix);
        int rc = regcomp(&re[i], posix, REG_EXTENDED);
        if (rc) {
            char msg[256];
            regerror(rc, &re[i], msg, sizeof msg);
            e = dt_err_set(DT_ERR_SPEC, "metricsFormat '%s': %s", f, msg);
        } else {
            ncomp++;
        }
    }
    int order = 0;
    for (char *line = data; !e && line && *line;) {
        char *nl = strchr(line, '\n');
        if (!nl && !finished) break; /* a line still being written */
        if (nl) *nl = 0;
        int64_t epoch = line_int(line, "epoch"), step = line_int(line, "step");
        for (int i = 0; !e && i < ncomp; i++) {
            const char *p = line;
            regmatch_t g[3];
            while (!e && *p && regexec(&re[i], p, 3, g, p == line ? 0 : REG_NOTBOL) == 0) {
                if (g[0].rm_eo == 0) { /* an empty match: move on a character */
                    p++;
                    continue;
                }
                if (g[1].rm_so >= 0 && g[2].rm_so >= 0 &&
                    (size_t)(g[1].rm_eo - g[1].rm_so) == strlen(name) &&
                    !strncmp(p + g[1].rm_so, name, strlen(name))) {
                    char num[64];
                    int vl = (int)(g[2].rm_eo - g[2].rm_so);
                    snprintf(num, sizeof num, "%.*s", vl < 63 ? vl : 63, p + g[2].rm_so);
                    char *end;
                    double v = strtod(num, &end);
                    if (end != num && !*end && isfinite(v)) {
                        order++;
                        int res = epoch >= 0 && epoch < 1 << 30 ? (int)epoch : order;
                        e = add_obs(m, step >= 0 ? step : order, res, v);
                    }
                }
                p += g[0].rm_eo;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    for (int i = 0; i < ncomp; i++)
        regfree(&re[i]);
    free(re);
    free(data);
    if (!e && m->n) m->source = source;
    return e;
}

static dt_err from_stdout(dt__metric *m, const char *job_dir, const char *name,
                          const char *const *formats, int nformats, int finished) {
    char path[DT__PATH_MAX];
    if (!primary_log(job_dir, path, sizeof path)) return DT_OK;
    return from_lines(m, path, name, formats, nformats, finished, "stdout");
}

/* Katib's File collector in JSON format: one object a line, the metric a number or a
 * numeric string under its name, "epoch" or "step" beside it. */
static dt_err from_json_lines(dt__metric *m, const char *path, const char *name, int finished) {
    char *data;
    size_t len;
    if (dt__read_file(path, &data, &len)) {
        dt_err_clear();
        return DT_OK;
    }
    dt_err e = DT_OK;
    int order = 0;
    for (char *line = data; !e && line && *line;) {
        char *nl = strchr(line, '\n');
        if (!nl && !finished) break;
        if (nl) *nl = 0;
        json_t *j = json_loads(line, 0, NULL);
        json_t *v = json_object_get(j, name);
        double x = NAN;
        if (json_is_number(v)) x = json_number_value(v);
        else if (json_is_string(v)) {
            char *end;
            x = strtod(json_string_value(v), &end);
            if (end == json_string_value(v) || *end) x = NAN;
        }
        if (isfinite(x)) {
            order++;
            json_t *ep = json_object_get(j, "epoch"), *st = json_object_get(j, "step");
            int res = json_is_integer(ep) && json_integer_value(ep) >= 0 &&
                              json_integer_value(ep) < 1 << 30
                          ? (int)json_integer_value(ep)
                          : order;
            e = add_obs(m, json_is_integer(st) ? json_integer_value(st) : order, res, x);
        }
        json_decref(j);
        line = nl ? nl + 1 : NULL;
    }
    free(data);
    if (!e && m->n) m->source = "file";
    return e;
}

static dt_err from_file(dt__metric *m, const char *job_dir, const dt__metric_src *src,
                        const char *name, int finished) {
    char path[DT__PATH_MAX];
    if (src->file[0] == '/' ? !path_ok(path, sizeof path, "%s", src->file)
                            : !path_ok(path, sizeof path, "%s/%s", job_dir, src->file))
        return DT_OK; /* not there */
    if (src->file_json) return from_json_lines(m, path, name, finished);
    return from_lines(m, path, name, src->formats, src->nformats, finished, "file");
}

dt_err dt__metric_collect(dt__metric *m, const char *job_dir, const char *name,
                          const dt__metric_src *src, int finished) {
    m->n = 0;
    m->has_result = 0;
    m->result = 0;
    m->source = "";
    snprintf(m->name, sizeof m->name, "%s", name);
    dt_err e = DT_OK;
    if (src->kind == DT__COLLECT_FILE && src->file && src->file[0])
        e = from_file(m, job_dir, src, name, finished);
    if (!e && src->kind == DT__COLLECT_STDOUT)
        e = from_stdout(m, job_dir, name, src->formats, src->nformats, finished);
    if (!e && !m->n) e = from_tensorboard(m, job_dir, name);
    if (!e && !m->n && (src->kind == DT__COLLECT_AUTO || src->kind == DT__COLLECT_FILE))
        e = from_stdout(m, job_dir, name, src->formats, src->nformats, finished);
    /* result.json: the final figure of a built-in trainer (users' scripts have none) */
    if (!e && !strcmp(m->source, "tensorboard")) from_result(m, job_dir, name);
    else if (!e && !m->n) from_result(m, job_dir, name);
    return e;
}

int dt__metric_final(const dt__metric *m, const char *strategy, double *out) {
    int latest = !strategy || !*strategy || !strcmp(strategy, "latest");
    if (m->has_result && (latest || !m->n)) {
        *out = m->result;
        return 1;
    }
    if (!m->n) return 0;
    double v = m->obs[m->n - 1].value;
    if (!latest) {
        int mx = !strcmp(strategy, "max");
        for (int i = 0; i < m->n; i++)
            if (mx ? m->obs[i].value > v : m->obs[i].value < v) v = m->obs[i].value;
        if (m->has_result && (mx ? m->result > v : m->result < v)) v = m->result;
    }
    *out = v;
    return 1;
}

int dt__metric_at(const dt__metric *m, int resource, double *out) {
    int found = 0;
    for (int i = 0; i < m->n; i++)
        if (m->obs[i].resource <= resource) {
            *out = m->obs[i].value;
            found = 1;
        }
    return found;
}

int dt__metric_resource(const dt__metric *m) {
    int r = 0;
    for (int i = 0; i < m->n; i++)
        if (m->obs[i].resource > r) r = m->obs[i].resource;
    return r;
}
