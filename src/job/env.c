/*
 * env.c - what each replica is told: TF_CONFIG, the PyTorch variables, DTRAIN_*.
 *
 * TF_CONFIG is built by hand, byte for byte as the training operator's Go json.Marshal of
 * {Cluster map[string][]string, Task {Type, Index}, Environment} writes it: fields in struct
 * order (cluster, task, environment), map keys sorted, no spaces, an empty slice as [].
 * (jansson could write compact JSON, but it does not escape <, > and & as Go does, and
 * its key order would have to be arranged anyway; the whole text is short.) Strings go
 * through go_string(), which escapes like Go's encoder for the bytes that can occur here;
 * hosts are checked up front (check_host) so nothing surprising reaches it.
 *
 * The cluster map lists every replica type the manifest declares (one with replicas: 0
 * gets []), including the evaluator, as the current operator does (older ones left the
 * evaluator out). Addresses:
 *   Kubernetes form  <job>-<type>-<i>.<namespace>.svc[.<cluster_domain>]:<port>, port =
 *                    the type's tfjob-port (tfPort in v1alpha1), else 2222;
 *   local form       <bind_host>:<ports[type][i]>, or with no ports the placeholder 2222 +
 *                    the replica's position in the start order (chief, master, ps, worker,
 *                    evaluator).
 *
 * PyTorch variables (job->pytorch_env), as the operator's PyTorchJob: PYTHONUNBUFFERED=0,
 * MASTER_PORT, MASTER_ADDR, WORLD_SIZE (all replicas), RANK. dtrain's rule, which gives the
 * operator's ranks for a PyTorchJob (master 0, worker i -> i + 1): RANK is the replica's
 * position in the start order, and MASTER_ADDR/MASTER_PORT are those of the replica of rank
 * 0 (master-0; else chief-0; else the first worker ...). Kubernetes form: MASTER_ADDR
 * <job>-<type>-0, MASTER_PORT its pytorchjob-port, else 23456; local form: the bind host
 * and that replica's port (or placeholder).
 *
 * The list: the container's env in manifest order (a later duplicate replaces the earlier
 * value in place, as Kubernetes' last-one-wins), then dtrain's variables in a fixed order;
 * a container variable that dtrain also sets is dropped, so each name occurs once.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert-impl.h"
#include "core/strbuf-impl.h"
#include "job/job-impl.h"

/* A JSON string as Go's encoding/json writes it (HTML-safe): \" \\ \n \r \t, other
 * control characters as \u00XX, and <, >, & as \u003c, \u003e, \u0026. Bytes >= 0x80 are
 * copied (the hosts written here are ASCII; see check_host). */
static void go_string(dt__strbuf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    dt__strbuf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            dt__strbuf_put(b, esc, 2);
        } else if (c == '\n' || c == '\r' || c == '\t') {
            esc[0] = '\\';
            esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            dt__strbuf_put(b, esc, 2);
        } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            dt__strbuf_put(b, esc, 6);
        } else {
            dt__strbuf_put(b, (const char *)&c, 1);
        }
    }
    dt__strbuf_put(b, "\"", 1);
}

/* ---- checks ---- */

static const dt_job_env_opts default_opts;

/* Hosts, domains: [A-Za-z0-9._:[]-], 1 to 253 bytes. */
static int check_host(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 253) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']'))
            return 0;
    }
    return 1;
}

/* A DNS-1123 label. */
static int check_namespace(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

static dt_err check_args(const dt_job_spec *job, dt_replica_type type, int index,
                         const dt_job_env_opts *o) {
    if ((unsigned)type >= DT_REPLICA_TYPE__COUNT)
        return dt_err_set(DT_ERR_ARG, "%s: replica type %d out of range", job->path, (int)type);
    const dt_replica_spec *rs = &job->replicas[type];
    if (!rs->present || index < 0 || index >= rs->replicas)
        return dt_err_set(DT_ERR_ARG, "%s: job %s has no replica %s-%d (it has %d %s replicas)",
                          job->path, job->name, dt_replica_type_name(type), index,
                          rs->present ? rs->replicas : 0, dt_replica_type_name(type));
    if (o->namespace && !check_namespace(o->namespace))
        return dt_err_set(DT_ERR_ARG, "namespace '%.64s' is not a DNS label", o->namespace);
    if (o->cluster_domain && !check_host(o->cluster_domain))
        return dt_err_set(DT_ERR_ARG, "cluster domain '%.64s' is not a host name",
                          o->cluster_domain);
    if (o->bind_host && !check_host(o->bind_host))
        return dt_err_set(DT_ERR_ARG, "bind host '%.64s' is not a host name or address",
                          o->bind_host);
    for (int h = 0; h < o->nhosts; h++)
        if (!o->hosts || !o->hosts[h] || !check_host(o->hosts[h]))
            return dt_err_set(DT_ERR_ARG, "host %d: '%.64s' is not a host name or address", h,
                              o->hosts && o->hosts[h] ? o->hosts[h] : "");
    return DT_OK;
}

/* ---- addresses ---- */

/* Replicas started before (t, i): the start order is the enum order. */
static int position(const dt_job_spec *job, dt_replica_type t, int i) {
    int p = i;
    for (int u = 0; u < (int)t; u++)
        if (job->replicas[u].present) p += job->replicas[u].replicas;
    return p;
}

/* The local port of (t, i): from opts->ports, else the placeholder. */
static dt_err local_port(const dt_job_spec *job, const dt_job_env_opts *o, dt_replica_type t, int i,
                         int *port) {
    if (!o->ports) {
        *port = DT__JOB_TF_PORT + position(job, t, i);
        return DT_OK;
    }
    if (!o->ports[t] || o->ports[t][i] < 1 || o->ports[t][i] > 65535)
        return dt_err_set(DT_ERR_ARG, "%s: no valid port for replica %s-%d", job->path,
                          dt_replica_type_name(t), i);
    *port = o->ports[t][i];
    return DT_OK;
}

static const char *bind_host(const dt_job_env_opts *o) {
    return o->bind_host ? o->bind_host : "127.0.0.1";
}

int dt_job_position(const dt_job_spec *job, dt_replica_type type, int index) {
    return position(job, type, index);
}

/* The host of replica (t, i): its simulated host, else bind_host. */
static const char *host_of(const dt_job_spec *job, const dt_job_env_opts *o, dt_replica_type t,
                           int i) {
    return o->nhosts > 0 ? o->hosts[position(job, t, i) % o->nhosts] : bind_host(o);
}

/* The address of (t, i): "host:port", as TF_CONFIG lists it. */
static dt_err address_of(const dt_job_spec *job, const dt_job_env_opts *o, dt_replica_type t,
                         int i, char *addr, size_t size) {
    if (o->kubernetes) {
        const char *ns = o->namespace ? o->namespace : job->namespace;
        int port = job->replicas[t].port ? job->replicas[t].port : DT__JOB_TF_PORT;
        snprintf(addr, size, "%s-%s-%d.%s.svc%s%s:%d", job->name, dt_replica_type_name(t), i, ns,
                 o->cluster_domain ? "." : "", o->cluster_domain ? o->cluster_domain : "", port);
    } else {
        int port = 0;
        dt_err e = local_port(job, o, t, i, &port);
        if (e) return e;
        snprintf(addr, size, "%s:%d", host_of(job, o, t, i), port);
    }
    return DT_OK;
}

/* The address of (t, i) in TF_CONFIG. */
static dt_err put_address(dt__strbuf *b, const dt_job_spec *job, const dt_job_env_opts *o,
                          dt_replica_type t, int i) {
    char addr[512];
    dt_err e = address_of(job, o, t, i, addr, sizeof addr);
    if (e) return e;
    go_string(b, addr);
    return DT_OK;
}

/* ---- TF_CONFIG ---- */

dt_err dt_job_tf_config(const dt_job_spec *job, dt_replica_type type, int index,
                        const dt_job_env_opts *opts, char **out) {
    /* The replica types in the order of their sorted lowercase names. */
    static const dt_replica_type sorted[] = {DT_REPLICA_TYPE_CHIEF, DT_REPLICA_TYPE_EVALUATOR,
                                             DT_REPLICA_TYPE_MASTER, DT_REPLICA_TYPE_PS,
                                             DT_REPLICA_TYPE_WORKER};
    const dt_job_env_opts *o = opts ? opts : &default_opts;
    dt__strbuf b = {0};
    dt_err e;
    int first = 1;
    *out = NULL;
    if ((e = check_args(job, type, index, o))) return e;
    dt__strbuf_puts(&b, "{\"cluster\":{");
    for (size_t k = 0; k < sizeof sorted / sizeof sorted[0]; k++) {
        dt_replica_type t = sorted[k];
        const dt_replica_spec *rs = &job->replicas[t];
        if (!rs->present) continue;
        if (!first) dt__strbuf_puts(&b, ",");
        first = 0;
        go_string(&b, dt_replica_type_name(t));
        dt__strbuf_puts(&b, ":[");
        for (int i = 0; i < rs->replicas; i++) {
            if (i) dt__strbuf_puts(&b, ",");
            if ((e = put_address(&b, job, o, t, i))) goto fail;
        }
        dt__strbuf_puts(&b, "]");
    }
    dt__strbuf_puts(&b, "},\"task\":{\"type\":");
    go_string(&b, dt_replica_type_name(type));
    dt__strbuf_printf(&b, ",\"index\":%d},\"environment\":\"cloud\"}", index);
    if (b.oom) {
        e = dt_err_set(DT_ERR_NOMEM, "%s: out of memory", job->path);
        goto fail;
    }
    *out = b.p;
    return DT_OK;
fail:
    free(b.p);
    return e;
}

/* ---- the environment ---- */

typedef struct envlist {
    dt_env_var *v;
    int n, cap;
} envlist;

static dt_err env_append(envlist *l, const char *name, const char *value) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        dt_env_var *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return DT_ERR_NOMEM;
        l->v = v;
        l->cap = cap;
    }
    size_t nn = strlen(name) + 1, vn = strlen(value) + 1;
    char *n = malloc(nn), *val = malloc(vn);
    if (!n || !val) {
        free(n);
        free(val);
        return DT_ERR_NOMEM;
    }
    memcpy(n, name, nn);
    memcpy(val, value, vn);
    l->v[l->n++] = (dt_env_var){.name = n, .value = val};
    return DT_OK;
}

static int env_find(const envlist *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->v[i].name, name)) return i;
    return -1;
}

/* A container variable: a repeated name takes the new value where it first was. */
static dt_err env_put_container(envlist *l, const char *name, const char *value) {
    int i = env_find(l, name);
    if (i < 0) return env_append(l, name, value);
    size_t vn = strlen(value) + 1;
    char *val = malloc(vn);
    if (!val) return DT_ERR_NOMEM;
    memcpy(val, value, vn);
    free(l->v[i].value);
    l->v[i].value = val;
    return DT_OK;
}

/* A variable dtrain sets: one of the same name is removed first. */
static dt_err env_set(envlist *l, const char *name, const char *value) {
    int i = env_find(l, name);
    if (i >= 0) {
        free(l->v[i].name);
        free(l->v[i].value);
        memmove(&l->v[i], &l->v[i + 1], (size_t)(l->n - i - 1) * sizeof l->v[0]);
        l->n--;
    }
    return env_append(l, name, value);
}

static dt_err env_set_int(envlist *l, const char *name, int value) {
    char buf[16];
    snprintf(buf, sizeof buf, "%d", value);
    return env_set(l, name, buf);
}

static dt_err pytorch_env(envlist *l, const dt_job_spec *job, const dt_job_env_opts *o,
                          dt_replica_type type, int index) {
    int t0 = 0;
    while (t0 < DT_REPLICA_TYPE__COUNT &&
           !(job->replicas[t0].present && job->replicas[t0].replicas > 0))
        t0++;
    DT_ASSERT(t0 < DT_REPLICA_TYPE__COUNT); /* the loader refuses a job without replicas */
    char addr[320];
    int port = 0;
    dt_err e;
    if (o->kubernetes) {
        port = job->replicas[t0].port ? job->replicas[t0].port : DT__JOB_PYTORCH_PORT;
        snprintf(addr, sizeof addr, "%s-%s-0", job->name,
                 dt_replica_type_name((dt_replica_type)t0));
    } else {
        if ((e = local_port(job, o, (dt_replica_type)t0, 0, &port))) return e;
        snprintf(addr, sizeof addr, "%s", host_of(job, o, (dt_replica_type)t0, 0));
    }
    if ((e = env_set(l, "PYTHONUNBUFFERED", "0")) || (e = env_set_int(l, "MASTER_PORT", port)) ||
        (e = env_set(l, "MASTER_ADDR", addr)) ||
        (e = env_set_int(l, "WORLD_SIZE", dt_job_spec_total_replicas(job))) ||
        (e = env_set_int(l, "RANK", position(job, type, index))))
        return e;
    return DT_OK;
}

dt_err dt_job_env(const dt_job_spec *job, dt_replica_type type, int index,
                  const dt_job_env_opts *opts, dt_env_var **out, int *n) {
    const dt_job_env_opts *o = opts ? opts : &default_opts;
    envlist l = {0};
    char *tf = NULL, name[64];
    dt_err e;
    *out = NULL;
    *n = 0;
    if ((e = check_args(job, type, index, o))) return e;
    const dt_replica_spec *rs = &job->replicas[type];
    for (int i = 0; i < rs->nenv; i++)
        if ((e = env_put_container(&l, rs->env[i].name, rs->env[i].value))) goto nomem;
    if (job->kind != DT_JOB_KIND_PYTORCHJOB && dt_job_spec_total_replicas(job) != 1) {
        if ((e = dt_job_tf_config(job, type, index, o, &tf))) goto fail;
        e = env_set(&l, "TF_CONFIG", tf);
        free(tf);
        if (e) goto nomem;
    } else if (job->kind != DT_JOB_KIND_PYTORCHJOB) {
        /* The only replica: no TF_CONFIG (the operator's rule), but it still learns where it
         * is (a built-in trainer listens there, and peers added later reach it there). */
        char addr[512];
        if ((e = address_of(job, o, type, index, addr, sizeof addr))) goto fail;
        if ((e = env_set(&l, "DTRAIN_ADDRESS", addr))) goto nomem;
    }
    if (job->pytorch_env && (e = pytorch_env(&l, job, o, type, index))) {
        if (e == DT_ERR_NOMEM) goto nomem;
        goto fail;
    }
    snprintf(name, sizeof name, "%s-%d", dt_replica_type_name(type), index);
    if ((o->master_url && (e = env_set(&l, "DTRAIN_MASTER", o->master_url))) ||
        (o->job_token && (e = env_set(&l, "DTRAIN_JOB_TOKEN", o->job_token))) ||
        (e = env_set(&l, "DTRAIN_REPLICA", name)))
        goto nomem;
    *out = l.v;
    *n = l.n;
    return DT_OK;
nomem:
    e = dt_err_set(DT_ERR_NOMEM, "%s: out of memory", job->path);
fail:
    dt_job_env_free(l.v, l.n);
    return e;
}

void dt_job_env_free(dt_env_var *env, int n) {
    if (!env) return;
    for (int i = 0; i < n; i++) {
        free(env[i].name);
        free(env[i].value);
    }
    free(env);
}
