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

/* The job looked up again as it was found: 1 its master still runs, 0 it has ended (cur
 * says how), -1 the lookup failed (a job server or API server out of reach). */
static int lookup(const dt__cli_cmd *cmd, const dt__jobref *ref, dt__cli_kube *ko,
                  dt__jobref *cur) {
    if (dt__jobref_find(cmd, ref->kube.on || ref->server ? ref->name : ref->dir, ko, cur))
        return -1;
    return cur->live ? 1 : 0;
}

/* The phase of a job whose master has ended, or "" when it shows none that ends a job. */
static const char *final_phase(const dt__cli_cmd *cmd, dt__jobref *cur, char *buf, size_t cap) {
    json_t *st = dt__jobref_status(cmd, cur);
    const char *ph = json_string_value(json_object_get(st, "phase"));
    snprintf(buf, cap, "%s",
             ph && (!strcmp(ph, "Succeeded") || !strcmp(ph, "Failed") || !strcmp(ph, "Stopped"))
                 ? ph
                 : "");
    json_decref(st);
    return buf;
}

/* After a request that got no answer: the job ended on its own meanwhile (its master closes
 * the connection as it exits), or the stop was done and its answer lost? Waits up to 5 s
 * for the master to be gone and then wants a final phase in its status; "" if not so. */
static const char *ended_meanwhile(const dt__cli_cmd *cmd, const dt__jobref *ref,
                                   dt__cli_kube *ko, char *buf, size_t cap) {
    dt__jobref cur;
    for (int i = 0; i < 50; i++) {
        int l = lookup(cmd, ref, ko, &cur);
        if (l < 0) break;
        if (l == 0) return final_phase(cmd, &cur, buf, cap);
        usleep(100 * 1000);
    }
    buf[0] = 0;
    return buf;
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
        json_t *st = dt__jobref_status(cmd, &ref);
        printf("job %s is not running (phase %s)\n", ref.name[0] ? ref.name : arg,
               st ? json_string_value(json_object_get(st, "phase")) : "unknown");
        json_decref(st);
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
    char why[512], phase[32];
    snprintf(why, sizeof why, "%s", e ? dt_errmsg() : body ? body : "no answer");
    if (e && *ended_meanwhile(cmd, &ref, &ko, phase, sizeof phase)) {
        if (!strcmp(phase, "Stopped"))
            printf("job %s: Stopped\n", ref.name);
        else
            printf("job %s ended before it could be stopped: %s\n", ref.name, phase);
        free(body);
        return DT_EXIT_OK;
    }
    if (e || status != 202) {
        fprintf(stderr, "dtrain stop: %s\n", why);
        free(body);
        return DT_EXIT_FAILED;
    }
    free(body);
    dt__jobref cur;
    for (int i = 0; wait && i < 3000 && lookup(cmd, &ref, &ko, &cur) == 1; i++)
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
