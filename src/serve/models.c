/*
 * models.c - the models a server serves and their versions.
 *
 * Each model has a base path of integer-named version directories (TF Serving's layout).
 * Its version policy (latest N, the default latest 1; all; specific) says which it serves.
 * A poll (every --file_system_poll_wait_seconds) lists the base path: a wanted version that
 * is not loaded is loaded (LOADING) and served once ready (AVAILABLE); only then is a
 * version no longer wanted retired (UNLOADING, then END), so a request never finds the
 * model without a version during a switch. A version that fails to load is reported (END
 * with the error) and the others keep serving; it is tried again when its directory changes.
 *
 * Requests hold a reference on the version they use: a retired version is freed by the last
 * request that used it, never under one.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/path-impl.h"
#include "serve/serve-impl.h"

const char *dt__sv_state_name(dt__sv_state s) {
    switch (s) {
    case DT__SV_STATE_START: return "START";
    case DT__SV_STATE_LOADING: return "LOADING";
    case DT__SV_STATE_AVAILABLE: return "AVAILABLE";
    case DT__SV_STATE_UNLOADING: return "UNLOADING";
    case DT__SV_STATE_END: return "END";
    default: return "UNKNOWN";
    }
}

/* ---- versions ---- */

static void version_free(dt__sv_version *v) {
    if (!v) return;
    for (int i = 1; i < v->ninst; i++) /* instance 0 is the export's own model */
        dt_model_free(v->inst[i]);
    free(v->inst);
    free(v->free_idx);
    pthread_cond_destroy(&v->inst_cv);
    dt_exported_free(v->ex);
    free(v);
}

void dt__sv_version_put(dt__sv_version *v) {
    if (atomic_fetch_sub(&v->refs, 1) == 1) version_free(v);
}

int dt__sv_instance_take(dt__sv_version *v) {
    pthread_mutex_lock(&v->model->mu);
    while (v->nfree == 0)
        pthread_cond_wait(&v->inst_cv, &v->model->mu);
    int i = v->free_idx[--v->nfree];
    pthread_mutex_unlock(&v->model->mu);
    return i;
}

void dt__sv_instance_give(dt__sv_version *v, int i) {
    pthread_mutex_lock(&v->model->mu);
    v->free_idx[v->nfree++] = i;
    pthread_cond_signal(&v->inst_cv);
    pthread_mutex_unlock(&v->model->mu);
}

static dt__sv_code code_of(dt_err e) {
    switch (e) {
    case DT_ERR_NOTFOUND: return DT__SV_NOT_FOUND;
    case DT_ERR_NOMEM: return DT__SV_RESOURCE_EXHAUSTED;
    case DT_ERR_IO: return DT__SV_UNAVAILABLE;
    default: return DT__SV_INVALID_ARGUMENT; /* a spec, format or shape that does not load */
    }
}

/* Load one version directory with enough inference instances for the server's threads. */
static dt_err version_load(dt__sv_model *m, int64_t version, dt__sv_version **out) {
    const dt__sv_opts *o = &m->server->opts;
    char dir[DT__PATH_MAX];
    dt_err pe = dt__path(dir, sizeof dir, "%s/%lld", m->conf.base_path, (long long)version);
    if (pe) return pe;
    dt__sv_version *v = calloc(1, sizeof *v);
    if (!v) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    v->model = m;
    v->version = version;
    pthread_cond_init(&v->inst_cv, NULL);
    atomic_init(&v->refs, 1);
    int64_t max_batch = o->batching ? o->max_batch_size : 64;
    dt_err e = dt_export_load(dir, max_batch, NULL, &v->ex);
    if (e) goto fail;
    int n = o->batching ? o->batch_threads : o->http_threads;
    if (n < 1) n = 1;
    v->inst = calloc((size_t)n, sizeof *v->inst);
    v->free_idx = calloc((size_t)n, sizeof *v->free_idx);
    if (!v->inst || !v->free_idx) {
        e = dt_err_set(DT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    v->inst[0] = v->ex->model;
    v->ninst = 1;
    const dt_spec *sp = v->ex->spec;
    const dt_shape *in = dt_model_input_shape(v->ex->model);
    for (int i = 1; i < n; i++) {
        if ((e = dt_model_init(&v->inst[i], in, sp->layers, sp->nlayers, sp->loss, max_batch,
                               NULL)))
            goto fail;
        v->ninst++;
        for (int p = 0; p < dt_model_num_params(v->ex->model); p++) {
            const dt_param *src = dt_model_param(v->ex->model, p);
            dt_param *dst = dt_model_param(v->inst[i], p);
            memcpy(dst->value.data, src->value.data,
                   (size_t)dt_shape_numel(&src->value.shape) * sizeof(float));
        }
    }
    for (int i = 0; i < n; i++)
        v->free_idx[i] = i;
    v->nfree = n;
    snprintf(v->input_name, sizeof v->input_name, "%s", DT_EXPORT_INPUT_NAME);
    snprintf(v->output_name, sizeof v->output_name, "%s", dt_export_output_name(v->ex->model));
    *out = v;
    return DT_OK;
fail:
    version_free(v); /* instances 1..ninst-1 are its own; instance 0 is freed with ex */
    return e;
}

/* ---- records ---- */

static dt__sv_record *record(dt__sv_model *m, int64_t version, int create) {
    for (int i = 0; i < m->nrec; i++)
        if (m->rec[i].version == version) return &m->rec[i];
    if (!create) return NULL;
    if (m->nrec == m->caprec) {
        int cap = m->caprec ? m->caprec * 2 : 8;
        dt__sv_record *r = realloc(m->rec, (size_t)cap * sizeof *r);
        if (!r) return NULL;
        m->rec = r;
        m->caprec = cap;
    }
    /* keep records sorted by version, newest first (the status order) */
    int at = 0;
    while (at < m->nrec && m->rec[at].version > version)
        at++;
    memmove(&m->rec[at + 1], &m->rec[at], (size_t)(m->nrec - at) * sizeof *m->rec);
    m->nrec++;
    memset(&m->rec[at], 0, sizeof m->rec[at]);
    m->rec[at].version = version;
    m->rec[at].state = DT__SV_STATE_START;
    return &m->rec[at];
}

/* ---- the base path ---- */

typedef struct found {
    int64_t version;
    long long mtime;
} found;

static int cmp_desc(const void *a, const void *b) {
    int64_t x = ((const found *)a)->version, y = ((const found *)b)->version;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int parse_version(const char *name, int64_t *out) {
    if (!*name || strlen(name) > 18) return 0;
    int64_t v = 0;
    for (const char *p = name; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (*p - '0');
    }
    *out = v;
    return 1;
}

/* The version directories under base, newest first. */
static int list_versions(const char *base, found **out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(base);
    if (!d) return -1;
    int cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t v;
        if (!parse_version(de->d_name, &v)) continue; /* ".tmp-3-123", "README": not versions */
        char path[DT__PATH_MAX];
        struct stat st;
        if (dt__path(path, sizeof path, "%s/%s", base, de->d_name)) { /* cannot be loaded */
            dt_err_clear();
            continue;
        }
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            found *f = realloc(*out, (size_t)cap * sizeof *f);
            if (!f) break;
            *out = f;
        }
        (*out)[*n].version = v;
        (*out)[*n].mtime = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        (*n)++;
    }
    closedir(d);
    if (*n > 1) qsort(*out, (size_t)*n, sizeof **out, cmp_desc); /* *out is NULL when none */
    return 0;
}

static int wanted(const dt__sv_model_conf *c, const found *f, int n, int i) {
    switch (c->policy) {
    case DT__SV_POLICY_ALL: return 1;
    case DT__SV_POLICY_SPECIFIC:
        for (int k = 0; k < c->nspecific; k++)
            if (c->specific[k] == f[i].version) return 1;
        return 0;
    default: return i < c->latest_n;
    }
    (void)n;
}

/* One pass over a model's base path: load what is wanted and new, then retire what is no
 * longer wanted (only once something is available, or when nothing is wanted at all). */
static void reconcile(dt__sv_model *m, int initial) {
    FILE *log = m->server->opts.log;
    found *f = NULL;
    int n = 0;
    if (list_versions(m->conf.base_path, &f, &n) != 0) {
        if (initial)
            fprintf(log, "dtrain serve: model %s: cannot read base path %s: %s\n", m->conf.name,
                    m->conf.base_path, strerror(errno));
        return;
    }
    if (n == 0 && initial)
        fprintf(log, "dtrain serve: model %s: no versions found under %s yet (directories "
                     "named by integers); waiting for one\n",
                m->conf.name, m->conf.base_path);
    int want_any = 0;
    for (int i = 0; i < n; i++) {
        if (!wanted(&m->conf, f, n, i)) continue;
        want_any = 1;
        pthread_mutex_lock(&m->mu);
        dt__sv_record *r = record(m, f[i].version, 1);
        int skip = !r || r->state == DT__SV_STATE_AVAILABLE || r->state == DT__SV_STATE_LOADING ||
                   (r->state == DT__SV_STATE_END && r->dir_mtime == f[i].mtime);
        if (!skip) {
            r->state = DT__SV_STATE_LOADING;
            r->code = DT__SV_OK;
            r->message[0] = 0;
            r->dir_mtime = f[i].mtime;
        }
        pthread_mutex_unlock(&m->mu);
        if (skip) continue;
        dt__sv_version *v = NULL;
        dt_err e = version_load(m, f[i].version, &v);
        char msg[512];
        if (e) snprintf(msg, sizeof msg, "%s", dt_errmsg());
        pthread_mutex_lock(&m->mu);
        r = record(m, f[i].version, 0);
        if (e) {
            r->state = DT__SV_STATE_END;
            r->code = code_of(e);
            snprintf(r->message, sizeof r->message, "%s", msg);
        } else {
            r->state = DT__SV_STATE_AVAILABLE;
            r->live = v;
        }
        pthread_mutex_unlock(&m->mu);
        if (e)
            fprintf(log, "dtrain serve: model %s: version %lld failed to load: %s\n",
                    m->conf.name, (long long)f[i].version, msg);
        else
            fprintf(log, "dtrain serve: model %s: version %lld AVAILABLE\n", m->conf.name,
                    (long long)f[i].version);
    }
    /* retire: versions served but no longer wanted (or gone from disk) */
    pthread_mutex_lock(&m->mu);
    int available_wanted = 0;
    for (int k = 0; k < m->nrec; k++) {
        if (m->rec[k].state != DT__SV_STATE_AVAILABLE) continue;
        for (int i = 0; i < n; i++)
            if (f[i].version == m->rec[k].version && wanted(&m->conf, f, n, i))
                available_wanted = 1;
    }
    dt__sv_version *retire[64];
    int nretire = 0;
    for (int k = 0; k < m->nrec && nretire < 64; k++) {
        dt__sv_record *r = &m->rec[k];
        if (r->state != DT__SV_STATE_AVAILABLE) continue;
        int keep = 0;
        for (int i = 0; i < n; i++)
            if (f[i].version == r->version && wanted(&m->conf, f, n, i)) keep = 1;
        if (keep) continue;
        /* the last available version stays while nothing wanted has loaded (a new version
         * that failed to load leaves the old one serving) */
        if (!available_wanted && want_any) continue;
        r->state = DT__SV_STATE_END;
        retire[nretire++] = r->live;
        r->live = NULL;
    }
    pthread_mutex_unlock(&m->mu);
    for (int i = 0; i < nretire; i++) {
        fprintf(log, "dtrain serve: model %s: version %lld retired\n", m->conf.name,
                (long long)retire[i]->version);
        dt__sv_version_put(retire[i]); /* freed by the last request that holds it */
    }
    fflush(log);
    free(f);
}

dt__sv_model *dt__sv_model_find(dt__sv_server *s, const char *name) {
    for (int i = 0; i < s->nmodels; i++)
        if (!strcmp(s->models[i].conf.name, name)) return &s->models[i];
    return NULL;
}

dt__sv_code dt__sv_version_get(dt__sv_server *s, const char *model, int64_t version,
                               const char *label, dt__sv_version **out, char *err,
                               size_t errlen) {
    *out = NULL;
    dt__sv_model *m = dt__sv_model_find(s, model);
    if (m && label) {
        int found_label = 0;
        for (int i = 0; i < m->conf.nlabels; i++)
            if (!strcmp(m->conf.label_names[i], label)) {
                version = m->conf.label_versions[i];
                found_label = 1;
            }
        if (!found_label) {
            snprintf(err, errlen, "Unrecognized servable version label: %s", label);
            return DT__SV_INVALID_ARGUMENT;
        }
    }
    if (m) {
        pthread_mutex_lock(&m->mu);
        for (int i = 0; i < m->nrec; i++) { /* newest first */
            dt__sv_record *r = &m->rec[i];
            if (r->state != DT__SV_STATE_AVAILABLE || (version >= 0 && r->version != version))
                continue;
            atomic_fetch_add(&r->live->refs, 1);
            *out = r->live;
            break;
        }
        pthread_mutex_unlock(&m->mu);
    }
    if (*out) return DT__SV_OK;
    if (version >= 0)
        snprintf(err, errlen, "Servable not found for request: Specific(%s, %lld)", model,
                 (long long)version);
    else
        snprintf(err, errlen, "Servable not found for request: Latest(%s)", model);
    return DT__SV_NOT_FOUND;
}

/* ---- polling ---- */

static void *poller(void *arg) {
    dt__sv_server *s = arg;
    pthread_mutex_lock(&s->stop_mu);
    while (!s->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += s->opts.poll_seconds;
        pthread_cond_timedwait(&s->stop_cv, &s->stop_mu, &until);
        if (s->stopping) break;
        pthread_mutex_unlock(&s->stop_mu);
        for (int i = 0; i < s->nmodels; i++)
            reconcile(&s->models[i], 0);
        pthread_mutex_lock(&s->stop_mu);
    }
    pthread_mutex_unlock(&s->stop_mu);
    return NULL;
}

dt_err dt__sv_models_start(dt__sv_server *s) {
    s->nmodels = s->opts.nmodels;
    if (!(s->models = calloc((size_t)s->nmodels, sizeof *s->models)))
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < s->nmodels; i++) {
        s->models[i].server = s;
        s->models[i].conf = s->opts.models[i];
        if (s->models[i].conf.latest_n < 1) s->models[i].conf.latest_n = 1;
        pthread_mutex_init(&s->models[i].mu, NULL);
    }
    for (int i = 0; i < s->nmodels; i++)
        reconcile(&s->models[i], 1);
    if (s->opts.poll_seconds > 0) {
        if (pthread_create(&s->poller, NULL, poller, s) != 0)
            return dt_err_set(DT_ERR_IO, "cannot start the poller thread");
        s->poller_started = 1;
    }
    return DT_OK;
}

void dt__sv_models_stop(dt__sv_server *s) {
    pthread_mutex_lock(&s->stop_mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->stop_cv);
    pthread_mutex_unlock(&s->stop_mu);
    if (s->poller_started) pthread_join(s->poller, NULL);
    s->poller_started = 0;
    for (int i = 0; i < s->nmodels; i++) {
        dt__sv_model *m = &s->models[i];
        for (int k = 0; k < m->nrec; k++)
            if (m->rec[k].live) dt__sv_version_put(m->rec[k].live);
        free(m->rec);
        pthread_mutex_destroy(&m->mu);
    }
    free(s->models);
    s->models = NULL;
    s->nmodels = 0;
}
