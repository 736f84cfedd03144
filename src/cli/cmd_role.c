/*
 * cmd_role.c - `dtrain role SPEC.yaml --job-dir DIR`: play this replica's built-in role in
 * a TrainJob (ps, worker, chief or evaluator, as TF_CONFIG says). The job's master runs it
 * for every replica of a parameter-server TrainJob; it is not meant to be typed by hand.
 *
 * Exit codes: 0 done; 2 a failure no restart can mend (bad command line, spec, data or
 * environment); 128 one a restart may mend (a peer lost, I/O); 143 (130) stopped by SIGTERM
 * (SIGINT) after saving what the role owns, so that a replacement continues from there. The
 * master's default restart policy for these replicas, ExitCode, restarts on 128 and up (and
 * on crashes, 128 + the signal) and fails the job on 1-127.
 */
#include <getopt.h>
#include <stdio.h>

#include "cli/cli-impl.h"
#include "dtrain/job.h"
#include "dtrain/role.h"

static const char usage[] =
    "Usage: dtrain role SPEC.yaml --job-dir DIR\n"
    "\n"
    "Play one replica's built-in role in a parameter-server TrainJob: the role (ps, worker,\n"
    "chief, evaluator) and the cluster come from TF_CONFIG; DTRAIN_MASTER, DTRAIN_JOB_TOKEN\n"
    "and DTRAIN_REPLICA from the job's master, which runs this command for every replica\n"
    "(docs/STRATEGIES.md).\n"
    "\n"
    "Options:\n"
    "  --job-dir DIR     the job's directory (checkpoints/, export/, replicas/)\n"
    "  -h, --help        show this help\n"
    "\n"
    "Exit status: 0 done; 2 a failure no restart can mend (bad arguments, spec, data or\n"
    "environment); 128 a failure a restart may mend (a peer lost, I/O); 143 stopped by\n"
    "SIGTERM (130: SIGINT) after saving its work, to be continued by a new one.\n";

static int run(int argc, char **argv) {
    enum { OPT_JOB_DIR = 256 };
    static const struct option longopts[] = {
        {"job-dir", required_argument, NULL, OPT_JOB_DIR},
        {NULL, 0, NULL, 0},
    };
    const dt__cli_cmd *cmd = &dt__cmd_role;
    const char *job_dir = NULL;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_JOB_DIR:
            job_dir = optarg;
            break;
        case ':':
            return dt__cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
        default:
            return dt__cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return dt__cli_usage_error(
            cmd, optind >= argc ? "missing SPEC.yaml" : "expected one SPEC.yaml, got %d arguments",
            argc - optind);
    if (!job_dir) return dt__cli_usage_error(cmd, "--job-dir is required");
    dt_job_spec *job = NULL;
    dt_err e = dt_job_spec_load(&job, argv[optind]);
    if (e) { /* unreadable or malformed: a restart reads the same */
        fprintf(stderr, "dtrain role: %s\n", dt_errmsg());
        return DT_EXIT_USAGE;
    }
    dt_role_opts opts = {.job_dir = job_dir, .log = stderr};
    e = dt_role_run(job, &opts);
    dt_job_spec_free(job);
    if (e) {
        fprintf(stderr, "dtrain role: %s\n", dt_errmsg());
        return opts.permanent ? DT_EXIT_USAGE : DT_EXIT_RETRY;
    }
    return opts.stopped_by ? 128 + opts.stopped_by : DT_EXIT_OK;
}

const dt__cli_cmd dt__cmd_role = {
    .name = "role",
    .summary = "Play a replica's built-in role in a parameter-server TrainJob (run by the master)",
    .usage = usage,
    .run = run,
};
