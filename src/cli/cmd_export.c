/*
 * cmd_export.c - `dtrain export JOB_DIR|CHECKPOINT`: export a checkpoint after the fact, as
 * the chief exports the final model (include/dtrain/export.h).
 *
 * The export needs the spec (the model's layers, the normalization, class names) beside the
 * weights: JOB_DIR/spec.yaml, or --spec. Data is read only when the export depends on it
 * (standard normalization takes its statistics from the training set; CSV labels name the
 * classes; a spec without model.input takes the data's shape).
 */
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli-impl.h"
#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/checkpoint.h"
#include "dtrain/data.h"
#include "dtrain/export.h"
#include "export/export-impl.h"
#include "train/train-impl.h"

static const char usage[] =
    "Usage: dtrain export JOB_DIR|CHECKPOINT [options]\n"
    "\n"
    "Export a model for serving: JOB_DIR's newest checkpoint (JOB_DIR/checkpoints/), or the\n"
    "checkpoint file given, becomes version <step> under the output directory, in TF\n"
    "Serving's layout (<out>/<step>/model.safetensors, spec.yaml, input.safetensors,\n"
    "model.onnx). `dtrain serve --model_base_path OUT` serves it.\n"
    "\n"
    "Options:\n"
    "  --out DIR         the base directory of versions (default: JOB_DIR/export)\n"
    "  --format LIST     onnx, dtrain or onnx,dtrain (the default); `dtrain serve` needs dtrain\n"
    "  --spec FILE       the spec that describes the model (default: JOB_DIR/spec.yaml)\n"
    "  -h, --help        show this help\n"
    "\n"
    "Exit status: 0 exported, 1 failed (no checkpoint, unreadable data, I/O), 2 bad arguments\n"
    "or a spec or checkpoint that does not fit.\n";

enum { OPT_OUT = 256, OPT_FORMAT, OPT_SPEC };

static int parse_formats(const char *s, unsigned *out) {
    *out = 0;
    char buf[64];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "onnx")) *out |= DT_EXPORT_FORMAT_ONNX;
        else if (!strcmp(t, "dtrain")) *out |= DT_EXPORT_FORMAT_DTRAIN;
        else return -1;
    }
    return *out ? 0 : -1;
}

/* The data the export depends on (NULL train when it depends on none). */
static int needs_data(const dt_spec *s) {
    return s->norm == DT_NORM_STANDARD || s->input.ndim == 0 || s->train.format == DT_DATA_CSV;
}

/* The normalization as the trainer records it on its training set, from the spec alone. */
static dt_err norm_from_spec(const dt_spec *s, const dt_shape *input, dt_input_norm *n) {
    float a = 1, b = 0;
    if (s->norm == DT_NORM_SCALE) a = s->scale, b = s->shift;
    if (s->norm == DT_NORM_MEAN_STD) a = s->scale / s->std, b = -s->mean / s->std;
    n->n = dt_shape_numel(input);
    n->scale = malloc((size_t)n->n * sizeof(float));
    n->shift = malloc((size_t)n->n * sizeof(float));
    if (!n->scale || !n->shift) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n->n; i++)
        n->scale[i] = a, n->shift[i] = b;
    return DT_OK;
}

static int export_checkpoint(const char *ckpt, const char *spec_path, const char *out,
                             unsigned formats) {
    char *text = NULL;
    size_t len = 0;
    dt_spec *spec = NULL;
    dt_dataset *train = NULL, *eval = NULL;
    dt_model *model = NULL;
    dt_input_norm own = {0};
    int rc = DT_EXIT_FAILED;
    dt_err e = dt__read_file(spec_path, &text, &len);
    if (e) goto out;
    if ((e = dt__export_parse_spec(&spec, text, len, spec_path))) {
        rc = DT_EXIT_USAGE;
        goto out;
    }
    dt_shape input = spec->input;
    if (needs_data(spec)) {
        if ((e = dt__train_load_data(spec, spec->seed, &train, &eval))) goto out;
        if ((e = dt__train_input_shape(spec, train, &input))) goto out;
    }
    rc = DT_EXIT_USAGE; /* from here on, what fails is a spec or checkpoint that does not fit */
    if ((e = dt__train_build_model(spec, &input, 1, NULL, &model))) goto out;
    dt_train_state st;
    if ((e = dt_checkpoint_load(ckpt, model, NULL, &st))) goto out;
    dt_export_src src;
    if (train) {
        dt__export_src_init(&src, spec, model, train, text, len, st.step, st.epoch);
    } else {
        dt_dataset none = {.sample = input};
        dt__export_src_init(&src, spec, model, &none, text, len, st.step, st.epoch);
        if ((e = norm_from_spec(spec, &input, &own))) goto out;
        src.norm = own;
    }
    char dir[DT__PATH_MAX];
    rc = DT_EXIT_FAILED;
    if ((e = dt_export_write(out, &src, formats, dir, sizeof dir))) {
        if (e == DT_ERR_ARG) rc = DT_EXIT_USAGE; /* an --out too long for its paths */
        goto out;
    }
    printf("exported %s (step %lld)\n", dir, (long long)st.step);
    rc = DT_EXIT_OK;
out:
    if (e) fprintf(stderr, "dtrain export: %s\n", dt_errmsg());
    dt_input_norm_free(&own);
    dt_model_free(model);
    dt_dataset_free(train);
    dt_dataset_free(eval);
    dt_spec_free(spec);
    free(text);
    return rc;
}

static int run(int argc, char **argv) {
    static const struct option opts[] = {
        {"out", required_argument, NULL, OPT_OUT},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"spec", required_argument, NULL, OPT_SPEC},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *out = NULL, *spec = NULL;
    unsigned formats = DT_EXPORT_FORMAT_DTRAIN | DT_EXPORT_FORMAT_ONNX;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_OUT:
            out = optarg;
            break;
        case OPT_FORMAT:
            if (parse_formats(optarg, &formats))
                return dt__cli_usage_error(&dt__cmd_export,
                                           "--format: expected onnx, dtrain or onnx,dtrain, got '%s'",
                                           optarg);
            break;
        case OPT_SPEC:
            spec = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return DT_EXIT_OK;
        default:
            return dt__cli_usage_error(&dt__cmd_export, "unknown option");
        }
    }
    if (optind != argc - 1)
        return dt__cli_usage_error(&dt__cmd_export, "expected one JOB_DIR or CHECKPOINT");
    const char *arg = argv[optind];
    struct stat sb;
    if (stat(arg, &sb) != 0) {
        fprintf(stderr, "dtrain export: %s: no such job directory or checkpoint\n", arg);
        return DT_EXIT_FAILED;
    }
    char job_dir[DT__PATH_MAX], ckpt[DT__PATH_MAX], spec_buf[DT__PATH_MAX], out_buf[DT__PATH_MAX];
    dt_err e;
    if (S_ISDIR(sb.st_mode)) {
        char dir[DT__PATH_MAX];
        if ((e = dt__path(job_dir, sizeof job_dir, "%s", arg)) ||
            (e = dt__path(dir, sizeof dir, "%s/checkpoints", job_dir)))
            goto too_long;
        if (dt_checkpoint_dir_latest(dir, ckpt, sizeof ckpt)) {
            fprintf(stderr, "dtrain export: %s: no checkpoint to export\n", dir);
            return DT_EXIT_FAILED;
        }
    } else {
        /* JOB_DIR/checkpoints/ckpt-N.safetensors: the job dir is two levels up */
        char copy[DT__PATH_MAX];
        if ((e = dt__path(ckpt, sizeof ckpt, "%s", arg)) ||
            (e = dt__path(copy, sizeof copy, "%s", arg)) ||
            (e = dt__path(job_dir, sizeof job_dir, "%s/..", dirname(copy))))
            goto too_long;
    }
    if (!spec) {
        if ((e = dt__path(spec_buf, sizeof spec_buf, "%s/spec.yaml", job_dir))) goto too_long;
        if (access(spec_buf, R_OK) != 0) {
            fprintf(stderr, "dtrain export: %s: not found; name the model's spec with --spec\n",
                    spec_buf);
            return DT_EXIT_USAGE;
        }
        spec = spec_buf;
    }
    if (!out) {
        if ((e = dt__path(out_buf, sizeof out_buf, "%s/export", job_dir))) goto too_long;
        out = out_buf;
    }
    return export_checkpoint(ckpt, spec, out, formats);
too_long:
    fprintf(stderr, "dtrain export: %s\n", dt_errmsg());
    return DT_EXIT_USAGE;
}

const dt__cli_cmd dt__cmd_export = {
    .name = "export",
    .summary = "Export a checkpoint for serving (TF Serving layout, ONNX)",
    .usage = usage,
    .run = run,
};
