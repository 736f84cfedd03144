/*
 * cmd_submit.c - `dtrain submit`: give a job to a job server (docs/SERVER.md): a manifest
 * file, or the seed's form (strategy, workers, parameter servers, task name, a command).
 * The server queues it; this returns once it has answered.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli-impl.h"
#include "core/file-impl.h"
#include "core/path-impl.h"

static const char usage[] =
    "Usage: dtrain submit --server URL JOB.yaml [--priority N] [--label KEY=VALUE]...\n"
    "       dtrain submit --server URL --strategy allreduce|parameterserver --workers N\n"
    "                     [--ps M] --task NAME [--image DIR] [--priority N] [--label K=V]...\n"
    "                     [-- COMMAND...]\n"
    "\n"
    "Submit a job to a job server (dtrain server, docs/SERVER.md). The first form sends a\n"
    "manifest (TFJob, PyTorchJob, TrainJob; its relative data paths resolve next to the\n"
    "file, as with dtrain run). The second is the seed's submission: a TFJob of N workers\n"
    "(and M parameter servers for parameterserver) each running COMMAND (default\n"
    "'python3 exec.py') in the image's directory (--image: a directory, absolute or a name\n"
    "under the server's images/; default: this directory), with NUM_WORKERS and TF_CONFIG.\n"
    "The server queues the job by priority, then submit order, and starts it whole once\n"
    "its demand fits; see it with 'dtrain list --server URL'.\n"
    "\n"
    "Options:\n"
    "  --server URL      the server (default $DTRAIN_SERVER)\n"
    "  --token T         its token (default $DTRAIN_SERVER_TOKEN, else DIR/server.json)\n"
    "  --dir DIR         the server's directory, for its server.json (default\n"
    "                    $DTRAIN_HOME/server)\n"
    "  --priority N      higher runs first (default 0)\n"
    "  --label KEY=VALUE a label on the job (repeatable; 'dtrain list --selector')\n"
    "  -h, --help        show this help\n"
    "\n"
    "Exit status: 0 submitted, 1 the server could not be reached or refused it (409: the\n"
    "name is taken), 2 bad arguments or a malformed manifest.\n";

static int value(const dt__cli_cmd *cmd, int argc, char **argv, int *i, const char *name,
                 const char **out) {
    size_t n = strlen(name);
    if (!strcmp(argv[*i], name)) {
        if (*i + 1 >= argc) return dt__cli_usage_error(cmd, "%s needs a value", name) ? -1 : -1;
        *out = argv[++*i];
        return 1;
    }
    if (!strncmp(argv[*i], name, n) && argv[*i][n] == '=') {
        *out = argv[*i] + n + 1;
        return 1;
    }
    return 0;
}

static int run(int argc, char **argv) {
    const dt__cli_cmd *cmd = &dt__cmd_submit;
    const char *url = NULL, *token = NULL, *dir = NULL, *prio = NULL, *strategy = NULL,
               *workers = NULL, *ps = NULL, *task = NULL, *image = NULL, *spec = NULL;
    json_t *labels = json_object();
    int cmd_at = -1, rc = DT_EXIT_USAGE;
    json_t *body = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int k = 0;
        if (!strcmp(argv[i], "--")) {
            cmd_at = i + 1;
            break;
        }
        static const char *const names[] = {"--server", "--token", "--dir", "--priority",
                                            "--strategy", "--workers", "--ps", "--task",
                                            "--image", "--label"};
        const char **dst[] = {&url, &token, &dir, &prio, &strategy, &workers, &ps, &task, &image, NULL};
        for (int n = 0; n < 10 && !k; n++) {
            k = value(cmd, argc, argv, &i, names[n], &v);
            if (k < 0) goto out;
            if (k && dst[n]) *dst[n] = v;
            if (k && !dst[n]) {
                const char *eq = strchr(v, '=');
                if (!eq || eq == v) {
                    dt__cli_usage_error(cmd, "--label: expected KEY=VALUE, got '%s'", v);
                    goto out;
                }
                char key[256];
                snprintf(key, sizeof key, "%.*s", (int)(eq - v), v);
                json_object_set_new(labels, key, json_string(eq + 1));
            }
        }
        if (k) continue;
        if (argv[i][0] == '-') {
            dt__cli_usage_error(cmd, "unknown option '%s'", argv[i]);
            goto out;
        }
        if (spec) {
            dt__cli_usage_error(cmd, "expected one JOB.yaml (a command goes after --)");
            goto out;
        }
        spec = argv[i];
    }
    if (!url) url = getenv("DTRAIN_SERVER");
    if (!url || !*url) {
        dt__cli_usage_error(cmd, "which server? give --server URL (or set DTRAIN_SERVER)");
        goto out;
    }
    int64_t p = 0, nw = 0, nps = 0;
    if (prio && dt__cli_parse_i64(prio, -1000000, 1000000, &p)) {
        dt__cli_usage_error(cmd, "--priority: expected an integer, got '%s'", prio);
        goto out;
    }
    if (spec && (strategy || workers || ps || task || image || cmd_at >= 0)) {
        dt__cli_usage_error(cmd, "a JOB.yaml takes no --strategy, --workers, --ps, --task, "
                                 "--image or command");
        goto out;
    }
    if (spec) {
        char *text = NULL;
        size_t len = 0;
        if (dt__read_file(spec, &text, &len)) {
            fprintf(stderr, "dtrain submit: %s\n", dt_errmsg());
            goto out;
        }
        char abs[DT__PATH_MAX];
        body = json_pack("{s:s%, s:I, s:O, s:s}", "manifest", text, len, "priority", (json_int_t)p,
                         "labels", labels, "path", realpath(spec, abs) ? abs : spec);
        free(text);
        if (!body) {
            fprintf(stderr, "dtrain submit: %s: not UTF-8 text\n", spec);
            goto out;
        }
    } else {
        if (!strategy || !workers || !task) {
            dt__cli_usage_error(cmd, "expected JOB.yaml, or --strategy, --workers and --task");
            goto out;
        }
        if (dt__cli_parse_i64(workers, 1, 1024, &nw) || (ps && dt__cli_parse_i64(ps, 0, 64, &nps))) {
            dt__cli_usage_error(cmd, "--workers: 1..1024, --ps: 0..64");
            goto out;
        }
        char cwd[DT__PATH_MAX] = "", img[DT__PATH_MAX] = ""; /* getcwd, realpath: whole or none */
        if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
        struct stat sb;
        if (image && stat(image, &sb) == 0 && S_ISDIR(sb.st_mode) && realpath(image, img)) image = img;
        json_t *command = json_array();
        for (int i = cmd_at; cmd_at >= 0 && i < argc; i++) json_array_append_new(command, json_string(argv[i]));
        body = json_pack("{s:s, s:I, s:I, s:s, s:o, s:s, s:I, s:O}", "strategy", strategy,
                         "workers", (json_int_t)nw, "ps", (json_int_t)nps, "task", task, "command",
                         command, "workingDir", cwd, "priority", (json_int_t)p, "labels", labels);
        if (body && image) json_object_set_new(body, "image", json_string(image));
    }
    char tok[128];
    dt__cli_kube ko = {.server = url, .server_token = token};
    dt__cli_server_token(&ko, url, dir, tok, sizeof tok);
    char *text = json_dumps(body, JSON_COMPACT);
    long status = 0;
    json_t *ans = NULL;
    rc = DT_EXIT_FAILED;
    if (text && !dt__cli_server_call(cmd, url, tok, "POST", "/v1/jobs", text, &status, &ans)) {
        if (status == 201) {
            const char *msg = json_string_value(json_object_get(ans, "message"));
            printf("job %s submitted to %s: %s", json_string_value(json_object_get(ans, "name")), url,
                   json_string_value(json_object_get(ans, "state")));
            if (json_integer_value(json_object_get(ans, "position")) > 0)
                printf(" (position %lld: %s)", (long long)json_integer_value(json_object_get(ans, "position")),
                       msg ? msg : "");
            printf("\n");
            rc = DT_EXIT_OK;
        } else {
            const char *why = json_string_value(json_object_get(ans, "error"));
            fprintf(stderr, "dtrain submit: %s\n", why ? why : "unexpected answer from the server");
            rc = status == 400 ? DT_EXIT_USAGE : DT_EXIT_FAILED;
        }
    }
    free(text);
    json_decref(ans);
out:
    json_decref(body);
    json_decref(labels);
    return rc;
}

const dt__cli_cmd dt__cmd_submit = {
    .name = "submit",
    .summary = "Submit a job to a job server (dtrain server)",
    .usage = usage,
    .run = run,
};
