/*
 * cmd_tune.c - `dtrain tune EXPERIMENT.yaml [options]` and `dtrain tune status DIR|NAME`:
 * a hyperparameter sweep (a Katib Experiment or a plain Sweep) whose trials run as jobs of a
 * dtrain server (src/tune/runner.c; docs/TUNE.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli-impl.h"
#include "tune/runner-impl.h"

static const char usage[] =
    "Usage: dtrain tune EXPERIMENT.yaml [--dir DIR] [--server URL] [--token T] [--seed N]\n"
    "       dtrain tune status DIR|NAME [--json]\n"
    "\n"
    "Run a hyperparameter search: a Katib Experiment (kubeflow.org/v1beta1) as it is, or the\n"
    "plain form (dtrain/v1 Sweep: a job template with placeholders and lists of values). Each\n"
    "trial is a job submitted to a dtrain server with the experiment's labels; up to\n"
    "parallelTrialCount run at once. Each trial is printed as it ends, and at the end the best\n"
    "trial's parameters and objective; its exported model is copied to DIR/best/.\n"
    "\n"
    "The experiment's state is DIR/state.json (default DIR: runs/<experiment>-tune). Run the\n"
    "same command again after an interruption or a crash: finished trials are kept, trials\n"
    "whose jobs still run are adopted.\n"
    "\n"
    "Options:\n"
    "  --dir DIR      the experiment directory (default runs/<experiment>-tune)\n"
    "  --server URL   a running dtrain server (default: start one for the sweep in\n"
    "                 DIR/server, on a free port, and stop it at the end)\n"
    "  --token T      the server's token (default $DTRAIN_SERVER_TOKEN, else the server.json\n"
    "                 of $DTRAIN_HOME/server when its url is URL)\n"
    "  --seed N       the search's random seed for a new experiment (default: the clock; a\n"
    "                 continued experiment keeps its own)\n"
    "  -h, --help     show this help\n"
    "\n"
    "dtrain tune status DIR|NAME prints the trials table (--json: state.json).\n"
    "\n"
    "Exit status: 0 the experiment Succeeded, 1 it Failed (maxFailedTrialCount) or could not\n"
    "run, 2 a bad command line or experiment (FILE:LINE, before any trial starts), 130\n"
    "interrupted (the trials' jobs go on; run the command again to continue).\n";

static int status_cmd(int argc, char **argv) {
    const dt__cli_cmd *cmd = &dt__cmd_tune;
    const char *arg = NULL;
    int json = 0;
    for (int i = 2; i < argc; i++) {
        if (dt__cli_is_help(argv[i])) {
            fputs(usage, stdout);
            return DT_EXIT_OK;
        }
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (argv[i][0] == '-') return dt__cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        else if (arg) return dt__cli_usage_error(cmd, "status: expected one DIR or NAME");
        else arg = argv[i];
    }
    if (!arg) return dt__cli_usage_error(cmd, "status: missing DIR or NAME");
    return dt__tune_status(arg, json);
}

static int run(int argc, char **argv) {
    const dt__cli_cmd *cmd = &dt__cmd_tune;
    if (argc > 1 && !strcmp(argv[1], "status")) return status_cmd(argc, argv);
    dt__tune_opts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (dt__cli_is_help(a)) {
            fputs(usage, stdout);
            return DT_EXIT_OK;
        }
        if (!strcmp(a, "--dir") || !strcmp(a, "--server") || !strcmp(a, "--token") ||
            !strcmp(a, "--seed")) {
            if (i + 1 >= argc) return dt__cli_usage_error(cmd, "%s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--dir")) o.dir = v;
            else if (!strcmp(a, "--server")) o.server = v;
            else if (!strcmp(a, "--token")) o.token = v;
            else {
                int64_t s;
                if (dt__cli_parse_i64(v, 0, INT64_MAX, &s))
                    return dt__cli_usage_error(cmd, "--seed: expected a non-negative integer, got '%s'", v);
                o.seed = (uint64_t)s;
                o.has_seed = 1;
            }
        } else if (a[0] == '-') {
            return dt__cli_usage_error(cmd, "unknown option '%s'", a);
        } else if (o.experiment) {
            return dt__cli_usage_error(cmd, "expected one EXPERIMENT.yaml");
        } else {
            o.experiment = a;
        }
    }
    if (!o.experiment) return dt__cli_usage_error(cmd, "missing EXPERIMENT.yaml");
    if (!o.server) o.server = getenv("DTRAIN_SERVER") && *getenv("DTRAIN_SERVER") ? getenv("DTRAIN_SERVER") : NULL;
    return dt__tune_run(&o);
}

const dt__cli_cmd dt__cmd_tune = {
    .name = "tune",
    .summary = "Run a hyperparameter search (a Katib Experiment or a sweep) on a server",
    .usage = usage,
    .run = run,
};
