/*
 * evaluator.c - evaluate every new checkpoint of the whole model on the eval set.
 *
 * Design: the evaluator only reads files the chief writes atomically
 * (JOB_DIR/checkpoints/ckpt-<step>.safetensors), so it needs no connection to the PS and
 * can neither slow nor disturb training. It polls for the newest checkpoint twice a
 * second; a checkpoint deleted (rotated away) between listing and reading is skipped. Each
 * evaluation is appended to JOB_DIR/replicas/<name>/result.json and posted to the master's
 * report route, so the figures appear in the job's status and result.json. A restarted
 * evaluator reads that result.json back and goes on: its count of evaluations continues,
 * and the checkpoint evaluated last is not evaluated again. It does not
 * decide the job's success; the master stops it when the job ends.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/path-impl.h"
#include "dtrain/checkpoint.h"
#include "dtrain/shard.h"
#include "role/role-impl.h"
#include "train/train-impl.h"

#define POLL_NS (500 * 1000 * 1000L)

/* An evaluator restarted (by its restartPolicy, or with its job resumed) goes on from what
 * its predecessor wrote to result.json: its evaluations, and the checkpoint it evaluated
 * last (into last: not evaluated again). A result.json that is not an evaluator's is left
 * to be replaced. */
static void resume_history(const dt__role *r, json_t *history, char *last, size_t cap) {
    char path[DT__PATH_MAX]; /* fits: dt__role_run checks the job dir leaves room */
    json_t *old = dt__path(path, sizeof path, "%s/result.json", r->own_dir)
                      ? NULL : json_load_file(path, 0, NULL);
    json_t *evs = json_object_get(old, "evaluations");
    const char *role = json_string_value(json_object_get(old, "role"));
    size_t i;
    json_t *one;
    int ok = role && !strcmp(role, "evaluator") && json_is_array(evs);
    json_array_foreach(evs, i, one) {
        if (!json_is_object(one) || !json_is_integer(json_object_get(one, "step")) ||
            !json_is_string(json_object_get(one, "checkpoint")))
            ok = 0;
    }
    if (ok && json_array_size(evs) > 0) {
        json_array_extend(history, evs);
        const char *ck =
            json_string_value(json_object_get(json_array_get(evs, json_array_size(evs) - 1), "checkpoint"));
        if (dt__path(last, cap, "%s/%s", r->ckpt_dir, ck)) dt_err_clear(); /* "": none */
        fprintf(r->log, "%s: going on from %zu evaluations (the last of %s)\n", r->name,
                json_array_size(history), ck);
    }
    json_decref(old);
}

dt_err dt__role_evaluator(dt__role *r) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    const dt_spec *s = r->spec;
    dt_dataset *eval = NULL;
    dt_model *model = NULL;
    dt_shard_client *sc = NULL;
    json_t *history = json_array();
    dt__batch_bufs b = {0};
    dt__train_tb tb = {0};
    int tb_open = 0;
    dt_err e = dt__role_model(r, s->batch_size, NULL, NULL, &eval, &model);
    if (e) goto end;
    int64_t row = dt_dataset_row(eval);
    int64_t tdim = eval->target_dim > 0 ? eval->target_dim : 1;
    b.x = malloc((size_t)(s->batch_size * row) * sizeof(float));
    b.y = malloc((size_t)s->batch_size * sizeof(int32_t));
    b.t = malloc((size_t)(s->batch_size * tdim) * sizeof(float));
    b.idx = malloc((size_t)s->batch_size * sizeof(int64_t));
    if (!b.x || !b.y || !b.t || !b.idx || !history) {
        e = dt_err_set(DT_ERR_NOMEM, "out of memory");
        goto end;
    }
    /* The master is optional (a report that cannot be posted is only a warning). */
    dt_shard_client_opts so = {.heartbeat_ms = -1, .retry_ms = 5000};
    if (dt_shard_client_open(&sc, &so)) {
        fprintf(r->log, "%s: no master to report to (%s); results go to result.json only\n",
                r->name, dt_errmsg());
        sc = NULL;
    }
    char last[DT__PATH_MAX] = "", failed[DT__PATH_MAX] = "";
    resume_history(r, history, last, sizeof last);
    fprintf(r->log, "%s: watching %s for checkpoints\n", r->name, r->ckpt_dir);
    fflush(r->log);
    for (;;) {
        char path[DT__PATH_MAX];
        if (dt_checkpoint_dir_latest(r->ckpt_dir, path, sizeof path) == DT_OK &&
            strcmp(path, last) != 0) {
            dt_train_state st;
            double loss = 0, acc = 0;
            if (dt_checkpoint_load(path, model, NULL, &st) == DT_OK &&
                dt__train_evaluate(model, eval, s->batch_size, &b, &loss, &acc) == DT_OK) {
                memcpy(last, path, sizeof last); /* the same size */
                const char *base = strrchr(path, '/');
                json_t *one = json_pack("{s:I, s:I, s:f, s:f, s:s}", "step", (json_int_t)st.step,
                                        "epoch", (json_int_t)st.epoch, "accuracy", acc, "loss",
                                        loss, "checkpoint", base ? base + 1 : path);
                json_array_append_new(history, one);
                fprintf(r->log, "%s: step %lld: eval accuracy %.4f, loss %.4f\n", r->name,
                        (long long)st.step, acc, loss);
                if (!tb_open) { /* continuing the run from its first checkpoint's step */
                    dt__tb_open(&tb, s, r->job_dir, st.step, DT__TB_EVAL, r->log);
                    tb_open = 1;
                }
                dt__tb_eval(&tb, st.step, acc, loss);
                fflush(r->log);
                json_t *res = json_pack("{s:s, s:I, s:{s:f, s:f}, s:O}", "role", "evaluator", "step", (json_int_t)st.step, "eval",
                                        "accuracy", acc, "loss", loss, "evaluations", history);
                if ((e = dt__role_write_result(r, res))) goto end;
                if (sc) {
                    char text[256];
                    snprintf(text, sizeof text,
                             "{\"step\": %lld, \"accuracy\": %.6f, \"loss\": %.6f, "
                             "\"evaluations\": %zu}",
                             (long long)st.step, acc, loss, json_array_size(history));
                    if (dt_shard_client_post_report(sc, text))
                        fprintf(r->log, "%s: report not posted: %s\n", r->name, dt_errmsg());
                }
            } else if (strcmp(path, failed) != 0) {
                /* Rotated away meanwhile (the next poll sees the newest), or a checkpoint that
                 * does not fit the model: say so once. */
                fprintf(r->log, "%s: cannot evaluate %s: %s\n", r->name, path, dt_errmsg());
                fflush(r->log);
                memcpy(failed, path, sizeof failed); /* the same size */
            }
        }
        struct timespec ts = {0, POLL_NS};
        int sig = sigtimedwait(&stop, NULL, &ts);
        if (sig > 0) {
            r->stopped_by = sig; /* its history is in result.json: a restarted one goes on */
            break;
        }
    }
    fprintf(r->log, "%s: stopped after %zu evaluations\n", r->name, json_array_size(history));
end:
    dt__tb_close(&tb);
    dt_shard_client_close(sc);
    json_decref(history);
    free(b.x);
    free(b.y);
    free(b.t);
    free(b.idx);
    dt_model_free(model);
    dt_dataset_free(eval);
    return e;
}
