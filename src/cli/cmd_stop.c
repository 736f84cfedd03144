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
    "Usage: dtrain stop JOB|DIR [--now] [--no-wait]\n"
    "\n"
    "Stop a running job and record the outcome Stopped. Its master sends SIGTERM to the\n"
    "trainers, then, once they have ended, to the parameter servers and the evaluator; each\n"
    "gets the grace period (dtrain run --stop-grace) before SIGKILL. dtrain's built-in roles\n"
    "use it to finish the shard in hand and save: the chief checkpoints, each PS saves its\n"
    "partition. 'dtrain run --resume DIR' continues the job from there.\n"
    "Waits until the master has finished (at most five minutes) unless --no-wait.\n"
    "\n"
    "Options:\n"
    "  --now       SIGKILL at once: nothing is saved (a continued job goes back to its last\n"
    "              checkpoint)\n"
    "  --no-wait   return once the master has the request\n"
    "  --server URLthrough a job server (docs/SERVER.md; default $DTRAIN_SERVER);\n"
    "              --token T its token (else $DTRAIN_SERVER_TOKEN or its server.json)\n"
    "\n"
    "Exit status: 0 stopped (or already finished), 1 the job could not be reached.\n";

/* 1 while the job's master still runs (looked up again as it was found). */
static int live(const dt__cli_cmd *cmd, const dt__jobref *ref, dt__cli_kube *ko) {
    dt__jobref cur;
    return !dt__jobref_find(cmd, ref->kube.on || ref->server ? ref->name : ref->dir, ko, &cur) &&
           cur.live;
}

/* The job ends on its own while it is asked to stop: its master closes the connection. */
static int ended_meanwhile(const dt__cli_cmd *cmd, const dt__jobref *ref, dt__cli_kube *ko) {
    for (int i = 0; i < 50; i++) {
        if (!live(cmd, ref, ko)) return 1;
        usleep(100 * 1000);
    }
    return 0;
}

/* "job NAME ... PHASE" (name: the job's, else what the user gave) */
static void say_phase(const dt__cli_cmd *cmd, dt__jobref *ref, const char *name,
                      const char *what) {
    json_t *st = dt__jobref_status(cmd, ref);
    printf("job %s %s (phase %s)\n", ref->name[0] ? ref->name : name, what,
           st ? json_string_value(json_object_get(st, "phase")) : "unknown");
    json_decref(st);
}

static int run(int argc, char **argv) {
    const dt__cli_cmd *cmd = &dt__cmd_stop;
    const char *arg = NULL;
    int wait = 1, now = 0;
    dt__cli_kube ko = {0};
    for (int i = 1; i < argc; i++) {
        int k = dt__cli_kube_opt(cmd, argc, argv, &i, &ko);
        if (k < 0) return DT_EXIT_USAGE;
        if (k) continue;
        if (!strcmp(argv[i], "--no-wait")) wait = 0;
        else if (!strcmp(argv[i], "--now")) now = 1;
        else if (argv[i][0] == '-') return dt__cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        else if (arg) return dt__cli_usage_error(cmd, "expected one JOB or DIR");
        else arg = argv[i];
    }
    if (!arg) return dt__cli_usage_error(cmd, "missing JOB or DIR");
    dt__jobref ref;
    if (dt__jobref_find(cmd, arg, &ko, &ref)) return DT_EXIT_FAILED;
    if (!ref.live) {
        say_phase(cmd, &ref, arg, "is not running");
        return DT_EXIT_OK;
    }
    dt__http_client *c = NULL;
    char route[160];
    snprintf(route, sizeof route, "/v1/jobs/%s/stop%s", ref.name, now ? "?now=true" : "");
    long status = 0;
    char *body = NULL;
    size_t len = 0;
    dt_err e = dt__jobref_client(&ref, 10000, &c);
    if (!e) e = dt__http_client_request(c, "POST", route, "", 0, &status, &body, &len);
    dt__http_client_free(c);
    char why[512];
    snprintf(why, sizeof why, "%s", e ? dt_errmsg() : body ? body : "no answer");
    if (e && ended_meanwhile(cmd, &ref, &ko)) {
        say_phase(cmd, &ref, arg, "ended before it could be stopped");
        free(body);
        return DT_EXIT_OK;
    }
    if (e || status != 202) {
        fprintf(stderr, "dtrain stop: %s\n", why);
        free(body);
        return DT_EXIT_FAILED;
    }
    free(body);
    for (int i = 0; wait && i < 3000 && live(cmd, &ref, &ko); i++)
        usleep(100 * 1000);
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
