/*
 * cmd_stop.c - `dtrain stop JOB|DIR`: ask a job's master to stop the job, and wait for it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli-impl.h"
#include "net/http-impl.h"

static const char usage[] =
    "Usage: dtrain stop JOB|DIR [--no-wait]\n"
    "\n"
    "Stop a running job: its master sends SIGTERM to every replica, then SIGKILL after the\n"
    "grace period, and records the outcome Stopped. Waits until the master has finished\n"
    "(at most a minute) unless --no-wait.\n"
    "\n"
    "Exit status: 0 stopped (or already finished), 1 the job could not be reached.\n";

static int run(int argc, char **argv) {
    const dt__cli_cmd *cmd = &dt__cmd_stop;
    const char *arg = NULL;
    int wait = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-wait")) wait = 0;
        else if (argv[i][0] == '-') return dt__cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        else if (arg) return dt__cli_usage_error(cmd, "expected one JOB or DIR");
        else arg = argv[i];
    }
    if (!arg) return dt__cli_usage_error(cmd, "missing JOB or DIR");
    dt__jobref ref;
    if (dt__jobref_resolve(cmd, arg, &ref)) return DT_EXIT_FAILED;
    if (!ref.live) {
        json_t *st = dt__jobref_status(cmd, &ref);
        printf("job %s is not running (phase %s)\n", ref.name[0] ? ref.name : arg,
               st ? json_string_value(json_object_get(st, "phase")) : "unknown");
        json_decref(st);
        return DT_EXIT_OK;
    }
    dt__http_client *c = NULL;
    char route[160];
    snprintf(route, sizeof route, "/v1/jobs/%s/stop", ref.name);
    long status = 0;
    char *body = NULL;
    size_t len = 0;
    dt_err e = dt__http_client_init(&c, ref.url, ref.token, 10000);
    if (!e) e = dt__http_client_request(c, "POST", route, "", 0, &status, &body, &len);
    dt__http_client_free(c);
    if (e || status != 202) {
        fprintf(stderr, "dtrain stop: %s\n", e ? dt_errmsg() : body ? body : "no answer");
        free(body);
        return DT_EXIT_FAILED;
    }
    free(body);
    if (wait) {
        for (int i = 0; i < 600; i++) {
            dt__jobref now;
            if (dt__jobref_resolve(cmd, ref.dir, &now) || !now.live) break;
            usleep(100 * 1000);
        }
    }
    json_t *st = dt__jobref_status(cmd, &ref);
    printf("job %s: %s\n", ref.name, st ? json_string_value(json_object_get(st, "phase")) : "?");
    json_decref(st);
    return DT_EXIT_OK;
}

const dt__cli_cmd dt__cmd_stop = {
    .name = "stop",
    .summary = "Stop a running job",
    .usage = usage,
    .run = run,
};
