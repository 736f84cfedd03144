/*
 * jobref.c - find a job named on the command line and reach its master.
 *
 * A job is named by its job dir or by its name in the registry ($DTRAIN_HOME/jobs). Its
 * master, when one runs, holds an exclusive flock on DIR/master.lock and has written its
 * URL and token to DIR/master.json (mode 0600); a job without a live master is read from
 * DIR/status.json, which the master kept current.
 *
 * Through a job server (--server URL or $DTRAIN_SERVER, docs/SERVER.md) a job is a name on
 * that server: the server answers its status and passes the job API to its master, so the
 * reference holds the server's URL and token.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/kube-impl.h"
#include "cli/cli-impl.h"
#include "master/registry-impl.h"
#include "net/http-impl.h"

int dt__jobref_resolve(const dt__cli_cmd *cmd, const char *arg, dt__jobref *out) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    char journal[DT__PATH_MAX], path[DT__PATH_MAX];
    if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (!realpath(arg, out->dir) && dt__path(out->dir, sizeof out->dir, "%s", arg)) {
            fprintf(stderr, "dtrain %s: %s\n", cmd->name, dt_errmsg());
            return 1;
        }
    } else if (dt__registry_lookup(arg, out->dir, sizeof out->dir) != DT_OK) {
        fprintf(stderr, "dtrain %s: %s: no such job or job directory (see 'dtrain list')\n",
                cmd->name, arg);
        return 1;
    }
    if (dt__path(journal, sizeof journal, "%s/journal.jsonl", out->dir) ||
        dt__path(path, sizeof path, "%s/master.json", out->dir)) {
        fprintf(stderr, "dtrain %s: %s\n", cmd->name, dt_errmsg());
        return 1;
    }
    if (stat(journal, &sb) != 0) {
        fprintf(stderr, "dtrain %s: %s is not a job directory (it has no journal.jsonl)\n",
                cmd->name, out->dir);
        return 1;
    }
    json_t *mj = json_load_file(path, 0, NULL);
    const char *s;
    if ((s = json_string_value(json_object_get(mj, "url"))))
        snprintf(out->url, sizeof out->url, "%s", s);
    if ((s = json_string_value(json_object_get(mj, "token"))))
        snprintf(out->token, sizeof out->token, "%s", s);
    if ((s = json_string_value(json_object_get(mj, "name"))))
        snprintf(out->name, sizeof out->name, "%s", s);
    json_decref(mj);
    out->live = out->url[0] && dt__master_live(out->dir, NULL, 0);
    return 0;
}

static json_t *kube_status_without_master(const dt__cli_cmd *cmd, const dt__jobref *ref);

/* ---- through a job server ---- */

const char *dt__cli_server_url(const dt__cli_kube *ko) {
    if (ko && ko->server) return ko->server;
    const char *e = getenv("DTRAIN_SERVER");
    return e && *e && !(ko && ko->on) ? e : NULL;
}

void dt__cli_server_token(const dt__cli_kube *ko, const char *url, const char *dir, char *out,
                          size_t cap) {
    const char *t = ko ? ko->server_token : NULL;
    if (!t || !*t) t = getenv("DTRAIN_SERVER_TOKEN");
    out[0] = 0;
    if (t && *t) {
        snprintf(out, cap, "%s", t);
        return;
    }
    char path[DT__PATH_MAX];
    const char *home = getenv("DTRAIN_HOME");
    dt_err e = dir ? dt__path(path, sizeof path, "%s/server.json", dir)
               : home && *home ? dt__path(path, sizeof path, "%s/server/server.json", home)
                               : dt__path(path, sizeof path, "%s/.dtrain/server/server.json",
                                          getenv("HOME") ?: ".");
    if (e) { /* no token known: the server will say it wants one */
        dt_err_clear();
        return;
    }
    json_t *sj = json_load_file(path, 0, NULL);
    const char *u = json_string_value(json_object_get(sj, "url"));
    const char *tok = json_string_value(json_object_get(sj, "token"));
    size_t n = u ? strlen(u) : 0;
    while (n && u[n - 1] == '/') n--;
    size_t m = strlen(url);
    while (m && url[m - 1] == '/') m--;
    if (u && tok && n == m && !strncmp(u, url, n)) snprintf(out, cap, "%s", tok);
    json_decref(sj);
}

int dt__cli_server_call(const dt__cli_cmd *cmd, const char *url, const char *token,
                        const char *method, const char *path, const char *body, long *status,
                        json_t **out) {
    dt__http_client *c = NULL;
    char *resp = NULL;
    size_t len = 0;
    *out = NULL;
    dt_err e = dt__http_client_init(&c, url, token && *token ? token : NULL, 60000);
    if (!e) e = dt__http_client_request(c, method, path, body, body ? strlen(body) : 0, status,
                                        &resp, &len);
    dt__http_client_free(c);
    if (e) {
        fprintf(stderr, "dtrain %s: the server at %s: %s\n", cmd->name, url, dt_errmsg());
        free(resp);
        return 1;
    }
    *out = json_loadb(resp ? resp : "", len, 0, NULL);
    free(resp);
    return 0;
}

static int server_find(const dt__cli_cmd *cmd, const char *arg, const dt__cli_kube *ko,
                       const char *url, dt__jobref *out) {
    memset(out, 0, sizeof *out);
    out->server = 1;
    out->kube = *ko;
    snprintf(out->url, sizeof out->url, "%s", url);
    size_t n = strlen(out->url);
    while (n && out->url[n - 1] == '/') out->url[--n] = 0;
    dt__cli_server_token(ko, out->url, NULL, out->token, sizeof out->token);
    snprintf(out->name, sizeof out->name, "%s", arg);
    char path[200];
    snprintf(path, sizeof path, "/v1/jobs/%s", arg);
    long status = 0;
    json_t *j = NULL;
    /* A server's jobs are named by DNS-1035 labels: anything else ('..', '?', '%') would
     * make another URL than the job's. */
    int ok = strlen(arg) < sizeof out->name && *arg >= 'a' && *arg <= 'z';
    for (const char *p = arg; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-';
    if (!ok) {
        fprintf(stderr, "dtrain %s: '%s' is not a job name (lowercase letters, digits and '-', "
                        "starting with a letter)\n", cmd->name, arg);
        return 1;
    }
    if (dt__cli_server_call(cmd, out->url, out->token, "GET", path, NULL, &status, &j)) return 1;
    if (status != 200) {
        const char *why = json_string_value(json_object_get(j, "error"));
        fprintf(stderr, "dtrain %s: the server at %s: %s\n", cmd->name, out->url,
                why ? why : "unexpected answer");
        json_decref(j);
        return 1;
    }
    const char *st = json_string_value(json_object_get(json_object_get(j, "server"), "state"));
    out->live = st && strcmp(st, "Succeeded") && strcmp(st, "Failed") && strcmp(st, "Stopped");
    json_decref(j);
    return 0;
}

json_t *dt__jobref_status(const dt__cli_cmd *cmd, const dt__jobref *ref) {
    if (ref->server) {
        char path[200];
        snprintf(path, sizeof path, "/v1/jobs/%s", ref->name);
        long status = 0;
        json_t *j = NULL;
        if (dt__cli_server_call(cmd, ref->url, ref->token, "GET", path, NULL, &status, &j)) return NULL;
        if (status == 200 && json_is_object(j)) return j;
        const char *why = json_string_value(json_object_get(j, "error"));
        fprintf(stderr, "dtrain %s: the server at %s: %s\n", cmd->name, ref->url,
                why ? why : "unexpected answer");
        json_decref(j);
        return NULL;
    }
    if (ref->live) {
        dt__http_client *c = NULL;
        char route[160];
        snprintf(route, sizeof route, "/v1/jobs/%s", ref->name);
        long status = 0;
        char *body = NULL;
        size_t len = 0;
        if (dt__jobref_client(ref, 5000, &c) == DT_OK &&
            dt__http_client_request(c, "GET", route, NULL, 0, &status, &body, &len) == DT_OK &&
            status == 200) {
            json_t *j = json_loadb(body, len, 0, NULL);
            free(body);
            dt__http_client_free(c);
            if (j) return j;
        } else {
            free(body);
            dt__http_client_free(c);
        }
        /* The master went away meanwhile: fall back to the file it kept. */
    }
    if (ref->kube.on) return kube_status_without_master(cmd, ref);
    char path[DT__PATH_MAX];
    if (dt__path(path, sizeof path, "%s/status.json", ref->dir)) {
        fprintf(stderr, "dtrain %s: %s\n", cmd->name, dt_errmsg());
        return NULL;
    }
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) fprintf(stderr, "dtrain %s: %s: %s\n", cmd->name, path, err.text);
    return j;
}

double dt__cli_age(const char *t) {
    struct tm tm = {0};
    if (!t || !strptime(t, "%Y-%m-%dT%H:%M:%S", &tm)) return 0;
    time_t then = timegm(&tm);
    return difftime(time(NULL), then);
}

/* ---- jobs in a cluster ---- */

int dt__cli_kube_opt(const dt__cli_cmd *cmd, int argc, char **argv, int *i, dt__cli_kube *ko) {
    static const char *const names[] = {"--backend", "--kubeconfig", "--context", "--namespace",
                                        "--server", "--token"};
    const char *a = argv[*i];
    for (int k = 0; k < 6; k++) {
        size_t n = strlen(names[k]);
        const char *v = NULL;
        if (!strcmp(a, names[k])) {
            if (*i + 1 >= argc) {
                dt__cli_usage_error(cmd, "%s needs a value", names[k]);
                return -1;
            }
            v = argv[++*i];
        } else if (!strncmp(a, names[k], n) && a[n] == '=') {
            v = a + n + 1;
        } else {
            continue;
        }
        if (k >= 4) {
            *(k == 4 ? &ko->server : &ko->server_token) = v;
            return 1;
        }
        if (k == 0) {
            if (strcmp(v, "kubernetes") && strcmp(v, "local")) {
                dt__cli_usage_error(cmd, "--backend: expected local or kubernetes, got '%s'", v);
                return -1;
            }
            ko->on = !strcmp(v, "kubernetes");
        } else {
            *(k == 1 ? &ko->kubeconfig : k == 2 ? &ko->context : &ko->namespace) = v;
            ko->on = 1;
        }
        return 1;
    }
    return 0;
}

static dt_err kube_connect(const dt__cli_kube *ko, dt__kube **k) {
    dt__kube_conn c = {.kubeconfig = ko->kubeconfig, .context = ko->context};
    return dt__kube_connect(k, &c);
}

/* A Secret's value (base64) decoded into out. */
static int unbase64(const char *in, char *out, size_t cap) {
    char *v = dt__kube_b64_decode(in);
    int ok = v && strlen(v) < cap;
    if (ok) memcpy(out, v, strlen(v) + 1);
    free(v);
    return ok;
}

static int kube_find(const dt__cli_cmd *cmd, const char *arg, const dt__cli_kube *ko,
                     dt__jobref *out) {
    dt__kube *k = NULL;
    if (kube_connect(ko, &k)) {
        fprintf(stderr, "dtrain %s: %s\n", cmd->name, dt_errmsg());
        return 1;
    }
    snprintf(out->ns, sizeof out->ns, "%s", ko->namespace ? ko->namespace : dt__kube_namespace(k));
    snprintf(out->name, sizeof out->name, "%s", arg);
    out->kube = *ko;
    char path[600];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/secrets/%s-token", out->ns, arg);
    long status = 0;
    json_t *resp = NULL;
    dt_err e = dt__kube_call(k, "GET", path, NULL, NULL, &status, &resp);
    const char *tok = json_string_value(json_object_get(json_object_get(resp, "data"), "token"));
    int rc = 0;
    if (e || status != 200 || !tok || !unbase64(tok, out->token, sizeof out->token)) {
        char why[256];
        fprintf(stderr, "dtrain %s: job %s in namespace %s (%s): %s\n", cmd->name, arg, out->ns,
                dt__kube_server(k),
                e ? dt_errmsg()
                  : status == 404 ? "no such job (its Secret " "is not there)"
                                  : dt__kube_why(resp, status, why, sizeof why));
        rc = 1;
    }
    json_decref(resp);
    if (!rc) {
        snprintf(path, sizeof path,
                 "/api/v1/namespaces/%s/pods?labelSelector=training.kubeflow.org%%2Fjob-name%%3D%s,"
                 "dtrain.io%%2Fcomponent%%3Dmaster&fieldSelector=status.phase%%3DRunning",
                 out->ns, arg);
        resp = NULL;
        if (dt__kube_call(k, "GET", path, NULL, NULL, &status, &resp)) dt_err_clear();
        out->live = json_array_size(json_object_get(resp, "items")) > 0;
        json_decref(resp);
        snprintf(out->url, sizeof out->url, "%s/api/v1/namespaces/%s/services/%s-master:http/proxy",
                 dt__kube_server(k), out->ns, arg);
    }
    dt__kube_free(k);
    return rc;
}

int dt__jobref_find(const dt__cli_cmd *cmd, const char *arg, const dt__cli_kube *ko,
                    dt__jobref *out) {
    const char *url = dt__cli_server_url(ko);
    if (url) return server_find(cmd, arg, ko, url, out);
    if (!ko || !ko->on) return dt__jobref_resolve(cmd, arg, out);
    memset(out, 0, sizeof *out);
    return kube_find(cmd, arg, ko, out);
}

dt_err dt__jobref_client(const dt__jobref *ref, long timeout_ms, dt__http_client **out) {
    if (!ref->kube.on)
        return dt__http_client_init(out, ref->url, ref->token[0] ? ref->token : NULL, timeout_ms);
    dt__kube *k = NULL;
    dt_err e = kube_connect(&ref->kube, &k);
    if (!e) e = dt__kube_master_client(k, ref->ns, ref->name, ref->token, timeout_ms, out);
    dt__kube_free(k);
    return e;
}

/* A job in a cluster whose master does not run: its outcome, from its master's last log. */
static json_t *kube_status_without_master(const dt__cli_cmd *cmd, const dt__jobref *ref) {
    dt__kube *k = NULL;
    if (kube_connect(&ref->kube, &k)) {
        fprintf(stderr, "dtrain %s: %s\n", cmd->name, dt_errmsg());
        return NULL;
    }
    const char *outcome = dt__kube_job_outcome(k, ref->ns, ref->name);
    dt__kube_free(k);
    return json_pack("{s:s, s:s, s:s, s:[], s:{}}", "name", ref->name, "namespace", ref->ns,
                     "phase", outcome ? outcome : "Unknown (its master is not running)",
                     "conditions", "replicaStatuses");
}
