/*
 * cmd_list.c - `dtrain list [--json]`: every job in the registry ($DTRAIN_HOME/jobs).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backend/kube-impl.h"
#include "cli/cli-impl.h"
#include "master/registry-impl.h"

static const char usage[] =
    "Usage: dtrain list [--json] [--backend kubernetes] [--namespace NS] [--kubeconfig F]\n"
    "       dtrain list --server URL [--token T] [--selector KEY=VALUE] [--json]\n"
    "\n"
    "List the jobs this user has run: name, phase, replicas active of all, age and job dir.\n"
    "Jobs are registered in $DTRAIN_HOME/jobs (default ~/.dtrain/jobs); a job whose\n"
    "directory is gone, or that finished longer ago than its ttlSecondsAfterFinished, is\n"
    "dropped from the list (its directory is kept).\n"
    "\n"
    "With --backend kubernetes (or --namespace, --kubeconfig, --context): the jobs in the\n"
    "cluster's namespace, each a master Job labelled dtrain.io/component=master; DIR is\n"
    "kubernetes:NAMESPACE.\n"
    "\n"
    "With --server URL (or $DTRAIN_SERVER): the jobs of that job server (docs/SERVER.md):\n"
    "name, state, queue position, priority, CPUs asked, age and why a job waits; --json\n"
    "prints the server's {\"jobs\": [...]} as it is. --selector KEY=VALUE: only jobs with\n"
    "that label.\n"
    "\n"
    "Options:\n"
    "  --json       print {\"jobs\": [{\"name\", \"phase\", \"jobDir\", \"active\", \"replicas\"}]}\n"
    "  -h, --help   show this help\n";

typedef struct list_ctx {
    json_t *jobs;
} list_ctx;

static void one(void *vctx, const char *name, const char *dir) {
    list_ctx *ctx = vctx;
    char path[DT__PATH_MAX];
    json_t *st = dt__path(path, sizeof path, "%s/status.json", dir) ? NULL /* no status */
                                                                     : json_load_file(path, 0, NULL);
    const char *phase = json_string_value(json_object_get(st, "phase"));
    long long active = 0, total = 0;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(st, "replicas"), i, r) {
        total++;
        const char *s = json_string_value(json_object_get(r, "state"));
        if (s && !strcmp(s, "Running")) active++;
    }
    const char *started = json_string_value(json_object_get(st, "startTime"));
    json_array_append_new(ctx->jobs,
                          json_pack("{s:s, s:s, s:s, s:I, s:I, s:f}", "name", name, "phase",
                                    phase ? phase : "Unknown", "jobDir", dir, "active",
                                    (json_int_t)active, "replicas", (json_int_t)total, "age",
                                    started ? dt__cli_age(started) : 0.0));
    json_decref(st);
}

/* The jobs in a cluster's namespace: their masters' Jobs, their pods. */
static dt_err list_kube(const dt__cli_kube *ko, list_ctx *ctx) {
    dt__kube_conn c = {.kubeconfig = ko->kubeconfig, .context = ko->context};
    dt__kube *k = NULL;
    dt_err e = dt__kube_connect(&k, &c);
    if (e) return e;
    const char *ns = ko->namespace ? ko->namespace : dt__kube_namespace(k);
    char path[600], where[128];
    snprintf(where, sizeof where, "kubernetes:%s", ns);
    snprintf(path, sizeof path,
             "/apis/batch/v1/namespaces/%s/jobs?labelSelector=dtrain.io%%2Fcomponent%%3Dmaster", ns);
    long status = 0;
    json_t *jobs = NULL;
    e = dt__kube_call(k, "GET", path, NULL, NULL, &status, &jobs);
    if (!e && status != 200) {
        char why[256];
        e = dt_err_set(DT_ERR_IO, "%s: %s", dt__kube_server(k), dt__kube_why(jobs, status, why, sizeof why));
    }
    size_t i;
    json_t *j;
    json_array_foreach(e ? NULL : json_object_get(jobs, "items"), i, j) {
        const json_t *md = json_object_get(j, "metadata");
        const char *name = json_string_value(json_object_get(json_object_get(md, "labels"),
                                                             "training.kubeflow.org/job-name"));
        if (!name) continue;
        snprintf(path, sizeof path,
                 "/api/v1/namespaces/%s/pods?labelSelector=training.kubeflow.org%%2Fjob-name%%3D%s,"
                 "!dtrain.io%%2Fcomponent", ns, name);
        json_t *pods = NULL;
        if (dt__kube_call(k, "GET", path, NULL, NULL, &status, &pods)) dt_err_clear();
        long long active = 0, total = 0;
        size_t q;
        json_t *p;
        json_array_foreach(json_object_get(pods, "items"), q, p) {
            const char *ph = json_string_value(json_object_get(json_object_get(p, "status"), "phase"));
            total++;
            active += ph && !strcmp(ph, "Running");
        }
        json_decref(pods);
        json_int_t running = json_integer_value(json_object_get(json_object_get(j, "status"), "active"));
        const char *phase = running ? "Running" : dt__kube_job_outcome(k, ns, name);
        const char *created = json_string_value(json_object_get(md, "creationTimestamp"));
        json_array_append_new(ctx->jobs,
                              json_pack("{s:s, s:s, s:s, s:I, s:I, s:f}", "name", name, "phase",
                                        phase ? phase : "Unknown", "jobDir", where, "active",
                                        (json_int_t)active, "replicas", (json_int_t)total, "age",
                                        created ? dt__cli_age(created) : 0.0));
    }
    json_decref(jobs);
    dt__kube_free(k);
    return e;
}

/* The jobs of a job server. */
static int list_server(const dt__cli_cmd *cmd, const dt__cli_kube *ko, const char *url,
                       const char *selector, int as_json) {
    char tok[128], path[600];
    dt__cli_server_token(ko, url, NULL, tok, sizeof tok);
    snprintf(path, sizeof path, "/v1/jobs");
    if (selector) {
        size_t n = strlen(path);
        n += (size_t)snprintf(path + n, sizeof path - n, "?labelSelector=");
        for (const char *p = selector; *p && n + 4 < sizeof path; p++) {
            unsigned char c = (unsigned char)*p;
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.')
                path[n++] = (char)c;
            else
                n += (size_t)snprintf(path + n, sizeof path - n, "%%%02X", c);
        }
        path[n] = 0;
    }
    long status = 0;
    json_t *j = NULL;
    if (dt__cli_server_call(cmd, url, tok, "GET", path, NULL, &status, &j)) return DT_EXIT_FAILED;
    if (status != 200 || !json_is_array(json_object_get(j, "jobs"))) {
        const char *why = json_string_value(json_object_get(j, "error"));
        fprintf(stderr, "dtrain list: the server at %s: %s (HTTP %ld)\n", url,
                why ? why : "unexpected answer", status);
        json_decref(j);
        return DT_EXIT_FAILED;
    }
    if (as_json) {
        char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) puts(text);
        free(text);
        json_decref(j);
        return DT_EXIT_OK;
    }
    printf("%-24s %-10s %4s %5s %6s %8s  %s\n", "NAME", "STATE", "POS", "PRIO", "CPUS", "AGE",
           "REASON");
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(j, "jobs"), i, o) {
        char pos[24] = "-";
        json_int_t p = json_integer_value(json_object_get(o, "position"));
        if (p > 0) snprintf(pos, sizeof pos, "%lld", (long long)p);
        const char *msg = json_string_value(json_object_get(o, "message"));
        printf("%-24s %-10s %4s %5lld %6g %7.0fs  %s\n", json_string_value(json_object_get(o, "name")),
               json_string_value(json_object_get(o, "state")), pos,
               (long long)json_integer_value(json_object_get(o, "priority")),
               json_number_value(json_object_get(json_object_get(o, "demand"), "cpus")),
               dt__cli_age(json_string_value(json_object_get(o, "submitTime"))), msg ? msg : "");
    }
    json_decref(j);
    return DT_EXIT_OK;
}

static int run(int argc, char **argv) {
    const dt__cli_cmd *cmd = &dt__cmd_list;
    int as_json = 0;
    dt__cli_kube ko = {0};
    const char *selector = NULL;
    for (int i = 1; i < argc; i++) {
        if (!argv[i]) continue;
        int k = dt__cli_kube_opt(cmd, argc, argv, &i, &ko);
        if (k < 0) return DT_EXIT_USAGE;
        if (k) continue;
        if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--selector") && i + 1 < argc) selector = argv[++i];
        else return dt__cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
    }
    const char *url = dt__cli_server_url(&ko);
    if (url && *url) return list_server(cmd, &ko, url, selector, as_json);
    list_ctx ctx = {.jobs = json_array()};
    if (ko.on ? list_kube(&ko, &ctx) : dt__registry_list(one, &ctx)) {
        fprintf(stderr, "dtrain list: %s\n", dt_errmsg());
        json_decref(ctx.jobs);
        return DT_EXIT_FAILED;
    }
    if (as_json) {
        json_t *o = json_pack("{s:o}", "jobs", ctx.jobs);
        char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) puts(text);
        free(text);
        json_decref(o);
        return DT_EXIT_OK;
    }
    printf("%-24s %-11s %9s %8s  %s\n", "NAME", "PHASE", "ACTIVE", "AGE", "DIR");
    size_t i;
    json_t *j;
    json_array_foreach(ctx.jobs, i, j) {
        char act[32];
        snprintf(act, sizeof act, "%lld/%lld",
                 (long long)json_integer_value(json_object_get(j, "active")),
                 (long long)json_integer_value(json_object_get(j, "replicas")));
        printf("%-24s %-11s %9s %7.0fs  %s\n", json_string_value(json_object_get(j, "name")),
               json_string_value(json_object_get(j, "phase")), act,
               json_real_value(json_object_get(j, "age")),
               json_string_value(json_object_get(j, "jobDir")));
    }
    json_decref(ctx.jobs);
    return DT_EXIT_OK;
}

const dt__cli_cmd dt__cmd_list = {
    .name = "list",
    .summary = "List jobs",
    .usage = usage,
    .run = run,
};
