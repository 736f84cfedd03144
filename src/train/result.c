/* result.c - JOB_DIR/result.json, the outcome of a training run (docs/CLI.md). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/file-impl.h"
#include "core/gemm-impl.h"
#include "core/path-impl.h"
#include "train/train-impl.h"

dt_err dt__write_result(const char *job_dir, const char *status, const char *message,
                        const dt_spec *spec, const dt_train_result *r, int threads, uint64_t seed) {
    json_t *root =
        json_pack("{s:s, s:s, s:{s:f, s:f}, s:{s:I, s:I, s:I, s:f, s:f, s:f}, s:i, s:s, s:s}",
                  "status", status, "name", spec->name, "eval", "accuracy", r->eval_accuracy,
                  "loss", r->eval_loss, "train", "steps", (json_int_t)r->steps, "samples",
                  (json_int_t)r->samples, "epochs", (json_int_t)r->epochs_done, "samples_per_sec",
                  r->samples_per_sec, "wall_seconds", r->wall_seconds, "loss", r->train_loss,
                  "threads", threads, "blas", dt__blas_name(), "spec", spec->path);
    if (!root) return dt_err_set(DT_ERR_NOMEM, "result.json: out of memory");
    char seedbuf[32];
    snprintf(seedbuf, sizeof seedbuf, "%llu", (unsigned long long)seed);
    json_object_set_new(root, "seed", json_string(seedbuf));
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) /* ru_maxrss is in KiB on Linux */
        json_object_set_new(root, "peak_rss_mb", json_real((double)ru.ru_maxrss / 1024.0));
    if (message) json_object_set_new(root, "message", json_string(message));
    if (r->export_dir[0]) json_object_set_new(root, "export", json_string(r->export_dir));
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (!text) return dt_err_set(DT_ERR_NOMEM, "result.json: out of memory");
    char path[DT__PATH_MAX];
    dt_err e = dt__path(path, sizeof path, "%s/result.json", job_dir);
    if (e) {
        free(text);
        return e;
    }
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps' NUL becomes the final newline */
    e = dt__write_file_atomic(path, text, n + 1);
    free(text);
    return e;
}
