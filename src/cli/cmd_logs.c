/*
 * cmd_logs.c - `dtrain logs JOB REPLICA [-f]`: a replica's stdout and stderr.
 *
 * Through the master's API while it runs (GET .../replicas/REPLICA/logs?offset=N, so the
 * same command works against a master on another host), from DIR/logs/REPLICA.log after.
 * With -f it keeps reading until the replica has ended (or the master is gone).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/kube-impl.h"
#include "cli/cli-impl.h"
#include "net/http-impl.h"

static const char usage[] =
    "Usage: dtrain logs JOB|DIR REPLICA [-f]\n"
    "\n"
    "Print a replica's log (its stdout and stderr, every attempt, separated by a line\n"
    "'--- dtrain: REPLICA attempt N started at TIME'). REPLICA is like worker-0.\n"
    "\n"
    "Options:\n"
    "  -f, --follow   keep printing new output until the replica ends\n"
    "  --server URL   through a job server (docs/SERVER.md; default $DTRAIN_SERVER);\n"
    "                 --token T its token (else $DTRAIN_SERVER_TOKEN or its server.json)\n"
    "  -h, --help     show this help\n";

/* Print the log file from offset; returns the new offset. */
static long long from_file(const char *path, long long offset) {
    FILE *f = fopen(path, "rb");
    if (!f) return offset;
    if (fseeko(f, offset, SEEK_SET) == 0) {
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
            fwrite(buf, 1, n, stdout);
            offset += (long long)n;
        }
    }
    fclose(f);
    fflush(stdout);
    return offset;
}

static int replica_ended(dt__http_client *c, const char *job, const char *replica, int *ended) {
    char route[256];
    snprintf(route, sizeof route, "/v1/jobs/%s/replicas", job);
    long status = 0;
    char *body = NULL;
    size_t len = 0;
    if (dt__http_client_request(c, "GET", route, NULL, 0, &status, &body, &len) || status != 200) {
        free(body);
        return -1;
    }
    json_t *j = json_loadb(body, len, 0, NULL);
    free(body);
    size_t i;
    json_t *r;
    *ended = 1;
    json_array_foreach(json_object_get(j, "replicas"), i, r) {
        const char *name = json_string_value(json_object_get(r, "name"));
        const char *st = json_string_value(json_object_get(r, "state"));
        if (name && st && !strcmp(name, replica))
            *ended = strcmp(st, "Running") && strcmp(st, "Pending") && strcmp(st, "Restarting");
    }
    json_decref(j);
    return 0;
}

/* A replica's log in a cluster: its pod's log (all of its containers' output since its
 * current attempt), followed until the pod ends with -f. */
static int kube_logs(const dt__cli_cmd *cmd, const dt__cli_kube *ko, const char *job,
                     const char *replica, int follow) {
    dt__kube_conn c = {.kubeconfig = ko->kubeconfig, .context = ko->context};
    dt__kube *k = NULL;
    if (dt__kube_connect(&k, &c)) {
        fprintf(stderr, "dtrain %s: %s\n", cmd->name, dt_errmsg());
        return DT_EXIT_FAILED;
    }
    char path[600], esc[200];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s-%s/log%s",
             ko->namespace ? ko->namespace : dt__kube_namespace(k), job,
             dt__kube_escape(replica, esc, sizeof esc), follow ? "?follow=true" : "");
    long status = 0;
    dt_err e = dt__kube_stream(k, path, stdout, &status);
    int rc = DT_EXIT_OK;
    if (e || status != 200) {
        fprintf(stderr, "dtrain %s: %s\n", cmd->name,
                e ? dt_errmsg() : status == 404 ? "no such job or replica in the cluster"
                                                : "the API server refused the log");
        rc = DT_EXIT_FAILED;
    }
    dt__kube_free(k);
    return rc;
}

static int run(int argc, char **argv) {
    const dt__cli_cmd *cmd = &dt__cmd_logs;
    const char *pos[2] = {NULL, NULL};
    int npos = 0, follow = 0;
    dt__cli_kube ko = {0};
    for (int i = 1; i < argc; i++) {
        int k = dt__cli_kube_opt(cmd, argc, argv, &i, &ko);
        if (k < 0) return DT_EXIT_USAGE;
        if (k) continue;
        if (!strcmp(argv[i], "-f") || !strcmp(argv[i], "--follow")) follow = 1;
        else if (argv[i][0] == '-') return dt__cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        else if (npos < 2) pos[npos++] = argv[i];
        else return dt__cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
    }
    if (npos != 2) return dt__cli_usage_error(cmd, "expected JOB and REPLICA");
    if (ko.on) return kube_logs(cmd, &ko, pos[0], pos[1], follow);
    dt__jobref ref;
    if (dt__jobref_find(cmd, pos[0], &ko, &ref)) return DT_EXIT_FAILED;
    const char *replica = pos[1];
    char path[DT__PATH_MAX];
    if (dt__path(path, sizeof path, "%s/logs/%s.log", ref.dir, replica)) {
        fprintf(stderr, "dtrain logs: %s\n", dt_errmsg());
        return DT_EXIT_USAGE;
    }
    long long offset = 0;
    if (ref.live || ref.server) { /* a server answers a finished job's logs itself */
        dt__http_client *c = NULL;
        if (dt__jobref_client(&ref, 10000, &c)) {
            fprintf(stderr, "dtrain logs: %s\n", dt_errmsg());
            return DT_EXIT_FAILED;
        }
        for (;;) {
            char route[256];
            snprintf(route, sizeof route, "/v1/jobs/%s/replicas/%s/logs?offset=%lld", ref.name,
                     replica, offset);
            long status = 0;
            char *body = NULL;
            size_t len = 0;
            if (dt__http_client_request(c, "GET", route, NULL, 0, &status, &body, &len)) {
                free(body);
                break; /* the master is gone: the file has the rest */
            }
            if (status == 404) {
                json_t *j = json_loadb(body, len, 0, NULL);
                fprintf(stderr, "dtrain logs: %s\n",
                        json_string_value(json_object_get(j, "error")) ?: "not found");
                json_decref(j);
                free(body);
                dt__http_client_free(c);
                return DT_EXIT_FAILED;
            }
            if (status != 200) {
                fprintf(stderr, "dtrain logs: HTTP %ld: %s\n", status, body ? body : "");
                free(body);
                dt__http_client_free(c);
                return DT_EXIT_FAILED;
            }
            fwrite(body, 1, len, stdout);
            fflush(stdout);
            free(body);
            offset += (long long)len;
            if (len > 0) continue;
            if (!follow) break;
            int ended = 0;
            if (replica_ended(c, ref.name, replica, &ended) || ended) break;
            usleep(200 * 1000);
        }
        dt__http_client_free(c);
        from_file(path, offset);
        return DT_EXIT_OK;
    }
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "dtrain logs: %s: %s (is '%s' a replica of this job?)\n", path,
                strerror(errno), replica);
        return DT_EXIT_FAILED;
    }
    from_file(path, 0);
    return DT_EXIT_OK;
}

const dt__cli_cmd dt__cmd_logs = {
    .name = "logs",
    .summary = "Print a replica's log",
    .usage = usage,
    .run = run,
};
