/*
 * cmd_train.c - `dtrain train SPEC.yaml`: train in this process.
 *
 * Exit codes: 0 trained, 1 training failed (data unreadable, I/O), 2 bad command line or a
 * malformed spec (unknown key, wrong type, missing field, impossible shape).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli-impl.h"
#include "core/path-impl.h"
#include "core/stop-impl.h"
#include "dtrain/spec.h"
#include "dtrain/train.h"

static const char usage[] =
    "Usage: dtrain train SPEC.yaml [options]\n"
    "\n"
    "Train the model that SPEC.yaml describes in this process: progress on stderr, an\n"
    "evaluation on the eval set after every epoch, checkpoints in JOB_DIR/checkpoints/ and\n"
    "the outcome in JOB_DIR/result.json. A job dir that holds checkpoints is resumed from\n"
    "the newest one.\n"
    "\n"
    "Options:\n"
    "  --job-dir DIR     where checkpoints, the spec as run and result.json go\n"
    "                    (default: runs/<spec name>/)\n"
    "  --epochs N        train N epochs instead of the spec's\n"
    "  --threads N       compute threads (default: the spec's, else all CPUs)\n"
    "  --seed S          the seed for initialization, shuffling and dropout\n"
    "  --max-steps N     stop after N optimizer steps in total (saving a checkpoint)\n"
    "  --loss-log FILE   write 'step loss' for every step to FILE\n"
    "  --no-progress     print only one line per epoch\n"
    "  -h, --help        show this help\n"
    "\n"
    "Exit status: 0 trained, 1 failed, 2 bad arguments or malformed spec.\n";

static int copy_spec(const char *from, const char *job_dir) {
    char path[DT__PATH_MAX];
    if (dt__path(path, sizeof path, "%s/spec.yaml", job_dir)) return -1;
    FILE *in = fopen(from, "rb");
    if (!in) return -1;
    FILE *out = fopen(path, "wb");
    if (!out) {
        fclose(in);
        return -1;
    }
    char buf[8192];
    size_t n;
    int bad = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) bad = 1;
    fclose(in);
    if (fclose(out) != 0) bad = 1;
    return bad ? -1 : 0;
}

static int run(int argc, char **argv) {
    enum {
        OPT_JOB_DIR = 256,
        OPT_EPOCHS,
        OPT_THREADS,
        OPT_SEED,
        OPT_MAX_STEPS,
        OPT_LOSS_LOG,
        OPT_NO_PROGRESS
    };
    static const struct option longopts[] = {
        {"job-dir", required_argument, NULL, OPT_JOB_DIR},
        {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"seed", required_argument, NULL, OPT_SEED},
        {"max-steps", required_argument, NULL, OPT_MAX_STEPS},
        {"loss-log", required_argument, NULL, OPT_LOSS_LOG},
        {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
        {NULL, 0, NULL, 0},
    };
    const dt__cli_cmd *cmd = &dt__cmd_train;
    dt_train_opts opts = {.progress_bar = isatty(STDERR_FILENO)};
    const char *job_dir = NULL, *loss_log = NULL;
    int quiet = 0;
    int64_t v;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_JOB_DIR:
            job_dir = optarg;
            break;
        case OPT_EPOCHS:
            if (dt__cli_parse_i64(optarg, 1, INT64_MAX, &v))
                return dt__cli_usage_error(cmd, "--epochs: expected a positive integer, got '%s'",
                                           optarg);
            opts.epochs = v;
            break;
        case OPT_THREADS:
            if (dt__cli_parse_i64(optarg, 1, INT64_MAX, &v) || v > 256)
                return dt__cli_usage_error(
                    cmd, "--threads: expected an integer in 1..256, got '%s'", optarg);
            opts.threads = (int)v;
            break;
        case OPT_SEED: {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-')
                return dt__cli_usage_error(cmd, "--seed: expected a non-negative integer, got '%s'",
                                           optarg);
            opts.seed = s;
            opts.has_seed = 1;
            break;
        }
        case OPT_MAX_STEPS:
            if (dt__cli_parse_i64(optarg, 1, INT64_MAX, &v))
                return dt__cli_usage_error(
                    cmd, "--max-steps: expected a positive integer, got '%s'", optarg);
            opts.max_steps = v;
            break;
        case OPT_LOSS_LOG:
            loss_log = optarg;
            break;
        case OPT_NO_PROGRESS:
            quiet = 1;
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
    const char *spec_path = argv[optind];

    dt_spec *spec = NULL;
    dt_err e = dt_spec_load(&spec, spec_path);
    if (e) {
        fprintf(stderr, "dtrain train: %s\n", dt_errmsg());
        return e == DT_ERR_IO ? DT_EXIT_FAILED : DT_EXIT_USAGE;
    }
    char default_dir[512];
    if (!job_dir) {
        snprintf(default_dir, sizeof default_dir, "runs/%s", spec->name);
        job_dir = default_dir;
    }
    opts.job_dir = job_dir;
    FILE *ll = NULL;
    if (loss_log && !(ll = fopen(loss_log, "w"))) {
        fprintf(stderr, "dtrain train: cannot write %s: %s\n", loss_log, strerror(errno));
        dt_spec_free(spec);
        return DT_EXIT_FAILED;
    }
    opts.loss_log = ll;
    if (quiet) opts.progress_bar = 0;
    FILE *devnull = NULL;
    if (quiet) opts.log = devnull = fopen("/dev/null", "w");

    dt_train_result res;
    /* SIGTERM (a stop, a preemption) ends the step in hand and checkpoints it */
    e = dt__stop_watch();
    if (!e) e = dt_train_run(spec, &opts, &res);
    if (!e && copy_spec(spec_path, job_dir) != 0)
        fprintf(stderr, "dtrain train: warning: could not copy the spec into %s\n", job_dir);
    int rc = DT_EXIT_OK;
    if (e) {
        fprintf(stderr, "dtrain train: %s\n", dt_errmsg());
        rc = (e == DT_ERR_SPEC || e == DT_ERR_SHAPE) ? DT_EXIT_USAGE : DT_EXIT_FAILED;
    } else if (res.stopped_by) {
        printf("%s: stopped (%s) at step %lld; checkpoint in %s/checkpoints\n", spec->name,
               strsignal(res.stopped_by), (long long)res.steps, job_dir);
        rc = 128 + res.stopped_by;
    } else {
        printf("%s: eval accuracy %.4f, eval loss %.4f, %lld steps, %.0f samples/s, %.1fs; "
               "result in %s/result.json\n",
               spec->name, res.eval_accuracy, res.eval_loss, (long long)res.steps,
               res.samples_per_sec, res.wall_seconds, job_dir);
    }
    if (ll) fclose(ll);
    if (devnull) fclose(devnull);
    dt_spec_free(spec);
    return rc;
}

const dt__cli_cmd dt__cmd_train = {
    .name = "train",
    .summary = "Train a model from a spec in this process",
    .usage = usage,
    .run = run,
};
