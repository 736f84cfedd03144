/*
 * cmd_scale.c - `dtrain scale JOB|DIR --workers N`: add workers to a running job or remove
 * some, without restarting it (POST /v1/jobs/NAME/scale on its master; docs/API.md).
 *
 * The master does the work: new workers (worker-K, ...) get new ports and a TF_CONFIG
 * listing the current workers; removed ones (the highest indices) are stopped, and their
 * data shards go back to the shard service. The command prints what changed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli-impl.h"
#include "net/http-impl.h"

static const char usage[] =
    "Usage: dtrain scale JOB|DIR --workers N [--server URL]\n"
    "\n"
    "Change the number of workers of a running job (a TFJob, or a TrainJob with strategy\n"
    "parameter_server) without restarting it. New workers (worker-K, ...) start with a\n"
    "TF_CONFIG listing the current workers; scaling down stops the highest-index workers\n"
    "(SIGTERM, then SIGKILL after the grace period), hands their data shards back to the\n"
    "shard service and drops them from the job: their end is neither a failure nor a\n"
    "success. The new count survives a restart of the master (dtrain run --resume).\n"
    "\n"
    "Options:\n"
    "  --workers N  the number of workers wanted (N >= 0; at least elasticPolicy.minReplicas)\n"
    "  -h, --help   show this help\n"
    "\n"
    "Exit status: 0 scaled, 1 the job is not running or its master refused (the message\n"
    "says why: a finished job, a PyTorchJob, a count below minReplicas, ...), 2 bad\n"
    "arguments.\n";

static void print_names(const char *what, json_t *names) {
    if (!json_array_size(names)) return;
    printf("  %s:", what);
    size_t i;
    json_t *v;
    json_array_foreach(names, i, v) printf(" %s", json_string_value(v) ? json_string_value(v) : "?");
    printf("\n");
}

static int run(int argc, char **argv) {
    const dt__cli_cmd *cmd = &dt__cmd_scale;
    const char *arg = NULL, *workers = NULL;
    dt__cli_kube ko = {0};
    for (int i = 1; i < argc; i++) {
        int k = dt__cli_kube_opt(cmd, argc, argv, &i, &ko);
        if (k < 0) return DT_EXIT_USAGE;
        if (k) continue;
        if (!strcmp(argv[i], "--workers")) {
            if (i + 1 >= argc) return dt__cli_usage_error(cmd, "--workers needs a value");
            workers = argv[++i];
        } else if (!strncmp(argv[i], "--workers=", 10)) {
            workers = argv[i] + 10;
        } else if (argv[i][0] == '-') {
            return dt__cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        } else if (arg) {
            return dt__cli_usage_error(cmd, "expected one JOB or DIR");
        } else {
            arg = argv[i];
        }
    }
    if (!arg) return dt__cli_usage_error(cmd, "missing JOB or DIR");
    if (!workers) return dt__cli_usage_error(cmd, "missing --workers N");
    int64_t n = 0;
    if (dt__cli_parse_i64(workers, 0, 1024, &n))
        return dt__cli_usage_error(cmd, "--workers: expected an integer in 0..1024, got '%s'",
                                   workers);
    dt__jobref ref;
    if (dt__jobref_find(cmd, arg, &ko, &ref)) return DT_EXIT_FAILED;
    if (!ref.live) {
        json_t *st = dt__jobref_status(cmd, &ref);
        fprintf(stderr, "dtrain scale: job %s is not running (phase %s): nothing to scale\n",
                ref.name[0] ? ref.name : arg,
                st && json_string_value(json_object_get(st, "phase"))
                    ? json_string_value(json_object_get(st, "phase"))
                    : "unknown");
        json_decref(st);
        return DT_EXIT_FAILED;
    }
    char route[160], req[64];
    snprintf(route, sizeof route, "/v1/jobs/%s/scale", ref.name);
    int len = snprintf(req, sizeof req, "{\"workers\": %lld}", (long long)n);
    dt__http_client *c = NULL;
    long status = 0;
    char *body = NULL;
    size_t blen = 0;
    dt_err e = dt__jobref_client(&ref, 30000, &c);
    if (!e) e = dt__http_client_request(c, "POST", route, req, (size_t)len, &status, &body, &blen);
    dt__http_client_free(c);
    json_t *j = !e && body ? json_loadb(body, blen, 0, NULL) : NULL;
    if (e || status != 200) {
        const char *msg = json_string_value(json_object_get(j, "error"));
        fprintf(stderr, "dtrain scale: %s\n",
                e ? dt_errmsg() : msg ? msg : body ? body : "no answer from the master");
        json_decref(j);
        free(body);
        return DT_EXIT_FAILED;
    }
    printf("job %s: %lld worker%s\n", ref.name,
           (long long)json_integer_value(json_object_get(j, "workers")),
           json_integer_value(json_object_get(j, "workers")) == 1 ? "" : "s");
    print_names("added", json_object_get(j, "added"));
    print_names("removed", json_object_get(j, "removed"));
    json_decref(j);
    free(body);
    return DT_EXIT_OK;
}

const dt__cli_cmd dt__cmd_scale = {
    .name = "scale",
    .summary = "Add workers to a running job or remove some",
    .usage = usage,
    .run = run,
};
