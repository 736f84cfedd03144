/*
 * export.c - the chief's last duties, shared by the parameter-server and all-reduce trainers:
 * evaluate the final model, export it (JOB_DIR/export/<step>/ in TF Serving's layout, a
 * directory that appears whole: include/dtrain/export.h),
 * record the figures in the chief's result, and wait for the evaluator to report on the final
 * checkpoint.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock-impl.h"
#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/checkpoint.h"
#include "dtrain/export.h"
#include "role/role-impl.h"

/* How long the chief waits at the end for the evaluator to report the final checkpoint. */
#define EVALUATOR_WAIT_S 120

static dt_err export_model(const dt__role *r, dt_model *model, const dt_dataset *train,
                           int64_t step, int64_t epoch, char *dir, size_t len) {
    char base[DT__PATH_MAX];
    dt_err e = dt__path(base, sizeof base, "%s/export", r->job_dir);
    if (e) return dt_err_wrap(e, "%s: export", r->name);
    char *spec = NULL;
    size_t slen = 0;
    if ((e = dt__read_file(r->job->path, &spec, &slen))) return e;
    dt_export_src src;
    dt__export_src_init(&src, r->spec, model, train, spec, slen, step, epoch);
    e = dt_export_write(base, &src, DT_EXPORT_FORMAT_DTRAIN | DT_EXPORT_FORMAT_ONNX, dir, len);
    free(spec);
    return e;
}

/* The evaluator's own result.json names the last step it evaluated: wait until it has seen
 * the final checkpoint, so the job's result carries its figures for it. */
static void wait_for_evaluator(const dt__role *r, int64_t step) {
    const dt_replica_spec *ev = &r->job->replicas[DT_REPLICA_TYPE_EVALUATOR];
    if (!ev->present || ev->replicas < 1) return;
    char path[DT__PATH_MAX];
    if (dt__path(path, sizeof path, "%s/replicas/evaluator-0/result.json", r->job_dir)) {
        fprintf(r->log, "%s: %s; not waiting for the evaluator\n", r->name, dt_errmsg());
        return;
    }
    double t0 = dt__mono_s();
    while (dt__mono_s() - t0 < EVALUATOR_WAIT_S) {
        json_t *j = json_load_file(path, 0, NULL);
        int64_t seen = j ? (int64_t)json_integer_value(json_object_get(j, "step")) : -1;
        json_decref(j);
        if (seen >= step) return;
        usleep(100 * 1000);
    }
    fprintf(r->log, "%s: the evaluator has not reported step %lld after %d s; finishing\n",
            r->name, (long long)step, EVALUATOR_WAIT_S);
}

dt_err dt__role_chief_finish(const dt__role *r, dt_model *model, const dt_dataset *train,
                             const dt_dataset *eval, int64_t batch, const dt__batch_bufs *b,
                             int64_t step, int64_t epoch, double t_train, json_t *res) {
    double eval_loss = 0, eval_acc = 0;
    dt_err e = dt__train_evaluate(model, eval, batch, b, &eval_loss, &eval_acc);
    if (e) return e;
    char dir[DT__PATH_MAX];
    if ((e = export_model(r, model, train, step, epoch, dir, sizeof dir))) return e;
    fprintf(r->log, "%s: done: step %lld, eval accuracy %.4f, loss %.4f; exported %s\n", r->name,
            (long long)step, eval_acc, eval_loss, dir);
    fflush(r->log);
    json_object_set_new(res, "eval", json_pack("{s:f, s:f}", "accuracy", eval_acc, "loss",
                                               eval_loss));
    json_object_set_new(res, "export", json_string(dir));
    const dt_replica_spec *ev = &r->job->replicas[DT_REPLICA_TYPE_EVALUATOR];
    if (!ev->present || ev->replicas < 1) { /* no evaluator to say it: TensorBoard's eval run */
        dt__train_tb tb;
        dt__tb_open(&tb, r->spec, r->job_dir, step, DT__TB_EVAL, r->log);
        dt__tb_eval(&tb, step, eval_acc, eval_loss);
        dt__tb_close(&tb);
    }
    /* Every trainer's samples are the dataset's, once per epoch: the job's aggregate. */
    double all = (double)train->n * (double)r->spec->epochs;
    json_object_set_new(res, "aggregate_samples_per_sec", json_real(t_train > 0 ? all / t_train : 0));
    wait_for_evaluator(r, step);
    return DT_OK;
}
