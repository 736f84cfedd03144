/*
 * cmd_suspend.c - `dtrain suspend JOB` and `dtrain resume JOB`: through a job server
 * (docs/SERVER.md), stop a job gracefully and free its capacity (its built-in roles save
 * a checkpoint), and put it back in the queue to continue from there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli-impl.h"

static const char suspend_usage[] =
    "Usage: dtrain suspend JOB --server URL [--token T] [--no-wait]\n"
    "\n"
    "Suspend a job of a job server (docs/SERVER.md): its master stops it as 'dtrain stop'\n"
    "does (dtrain's built-in roles checkpoint), the job becomes Suspended and its capacity\n"
    "is free for the queue. A queued job is suspended at once. 'dtrain resume' puts it back\n"
    "in the queue; once admitted it continues from the checkpoint.\n"
    "Waits until the job is Suspended (at most five minutes) unless --no-wait.\n"
    "\n"
    "Options:\n"
    "  --server URL   the server (default $DTRAIN_SERVER)\n"
    "  --token T      its token (default $DTRAIN_SERVER_TOKEN, else its server.json)\n"
    "  --no-wait      return once the server has the request\n"
    "\n"
    "Exit status: 0 suspended (or asked to, with --no-wait), 1 refused or unreachable.\n";

static const char resume_usage[] =
    "Usage: dtrain resume JOB --server URL [--token T]\n"
    "\n"
    "Put a suspended job back in its server's queue (at its priority and first submit\n"
    "order). Once admitted it runs 'dtrain run --resume' on its job dir: training continues\n"
    "from the checkpoint its suspension saved.\n"
    "\n"
    "Options:\n"
    "  --server URL   the server (default $DTRAIN_SERVER)\n"
    "  --token T      its token (default $DTRAIN_SERVER_TOKEN, else its server.json)\n"
    "\n"
    "Exit status: 0 queued again, 1 refused (the job is not suspended) or unreachable.\n";

static const char *state_of(json_t *o) {
    const char *s = json_string_value(json_object_get(o, "state"));
    return s ? s : "?";
}

static int act(const dt__cli_cmd *cmd, int argc, char **argv, const char *what) {
    const char *arg = NULL;
    int wait = 1;
    dt__cli_kube ko = {0};
    for (int i = 1; i < argc; i++) {
        int k = dt__cli_kube_opt(cmd, argc, argv, &i, &ko);
        if (k < 0) return DT_EXIT_USAGE;
        if (k) continue;
        if (!strcmp(argv[i], "--no-wait") && !strcmp(what, "suspend")) wait = 0;
        else if (argv[i][0] == '-') return dt__cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        else if (arg) return dt__cli_usage_error(cmd, "expected one JOB");
        else arg = argv[i];
    }
    if (!arg) return dt__cli_usage_error(cmd, "missing JOB");
    if (ko.on) return dt__cli_usage_error(cmd, "works through a job server, not a cluster's options");
    const char *url = dt__cli_server_url(&ko);
    if (!url) return dt__cli_usage_error(cmd, "which server? give --server URL (or set DTRAIN_SERVER)");
    dt__jobref ref;
    if (dt__jobref_find(cmd, arg, &ko, &ref)) return DT_EXIT_FAILED;
    char path[200];
    snprintf(path, sizeof path, "/v1/jobs/%s/%s", ref.name, what);
    long status = 0;
    json_t *ans = NULL;
    if (dt__cli_server_call(cmd, ref.url, ref.token, "POST", path, "", &status, &ans))
        return DT_EXIT_FAILED;
    if (status != 202) {
        const char *why = json_string_value(json_object_get(ans, "error"));
        fprintf(stderr, "dtrain %s: %s\n", cmd->name, why ? why : "unexpected answer from the server");
        json_decref(ans);
        return DT_EXIT_FAILED;
    }
    json_decref(ans);
    snprintf(path, sizeof path, "/v1/jobs/%s", ref.name);
    json_t *st = NULL;
    for (int i = 0; i < 3000; i++) {
        json_decref(st);
        st = NULL;
        if (dt__cli_server_call(cmd, ref.url, ref.token, "GET", path, NULL, &status, &st) || status != 200)
            break;
        const char *s = state_of(json_object_get(st, "server"));
        if (!wait || strcmp(s, "Suspending")) break;
        usleep(100 * 1000);
    }
    json_t *sv = json_object_get(st, "server");
    printf("job %s: %s", ref.name, state_of(sv));
    const char *msg = json_string_value(json_object_get(sv, "message"));
    if (json_integer_value(json_object_get(sv, "position")) > 0)
        printf(" (position %lld)", (long long)json_integer_value(json_object_get(sv, "position")));
    if (msg && *msg) printf(": %s", msg);
    printf("\n");
    json_decref(st);
    return DT_EXIT_OK;
}

static int run_suspend(int argc, char **argv) { return act(&dt__cmd_suspend, argc, argv, "suspend"); }
static int run_resume(int argc, char **argv) { return act(&dt__cmd_resume, argc, argv, "resume"); }

const dt__cli_cmd dt__cmd_suspend = {
    .name = "suspend",
    .summary = "Suspend a job of a job server (checkpoint, free its capacity)",
    .usage = suspend_usage,
    .run = run_suspend,
};

const dt__cli_cmd dt__cmd_resume = {
    .name = "resume",
    .summary = "Put a suspended job back in its server's queue",
    .usage = resume_usage,
    .run = run_resume,
};
