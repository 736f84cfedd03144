/*
 * ckpt_writer.c - checkpoints written by a thread of their own, from a snapshot
 * (role-impl.h).
 *
 * Design: in a ring, the member that writes a checkpoint on its step's thread stops every
 * member: the others wait for it at the next sum (the Fashion-MNIST MLP's epoch checkpoint
 * held a 2-member ring 4-9 ms on a 2-vCPU VM; a large model on a slow disk holds it for
 * seconds). So the writer keeps a shadow of the trainer's model and optimizer (built from the
 * same spec, for batches of one): dt__ckpt_writer_put copies the parameters' values, the
 * optimizer's slots and step count and the train state into it (one memcpy a tensor) and hands
 * it to the thread, which writes it with dt_checkpoint_dir_save (a temporary renamed into
 * place, then the retention) while training goes on. One write at a time: a put waits for
 * the one in flight. A write's result is taken with dt__ckpt_writer_take, at once or waiting;
 * a failure's message is carried over from the thread's error buffer. The thread finishes
 * the write in hand before it ends.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert-impl.h"
#include "core/thread-impl.h"
#include "dtrain/checkpoint.h"
#include "role/role-impl.h"

struct dt__ckpt_writer {
    const dt__role *r;
    dt_model *model; /* the shadow: written by put, read by the thread */
    dt_optim *optim;
    dt_train_state st;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy;        /* a snapshot handed over and not yet written */
    int stop;
    int done;        /* a write finished and its result not taken */
    int64_t step;    /* the snapshot's step */
    dt_err err;      /* the finished write's result */
    char msg[1024];  /* ... and its message */
};

static void *writer_main(void *arg) {
    dt__ckpt_writer *w = arg;
    dt__thread_background("dt-ckpt-writer");
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->busy) break; /* stopping, nothing in hand */
        pthread_mutex_unlock(&w->mu);
        dt_err e = dt_checkpoint_dir_save(w->r->ckpt_dir, w->r->spec->checkpoint_keep, w->model,
                                          w->optim, &w->st);
        pthread_mutex_lock(&w->mu);
        w->err = e;
        snprintf(w->msg, sizeof w->msg, "%s", e ? dt_errmsg() : "");
        dt_err_clear();
        w->busy = 0;
        w->done = 1;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

dt_err dt__ckpt_writer_start(dt__ckpt_writer **out, const dt__role *r, const dt_shape *input,
                             const dt_optim_conf *oc) {
    *out = NULL;
    dt__ckpt_writer *w = calloc(1, sizeof *w);
    if (!w) return dt_err_set(DT_ERR_NOMEM, "checkpoint writer: out of memory");
    w->r = r;
    int np = 0;
    dt_param **params = NULL;
    dt_err e = dt__train_build_model(r->spec, input, 1, NULL, &w->model);
    if (!e && !(params = dt__role_params(w->model, &np)))
        e = dt_err_set(DT_ERR_NOMEM, "checkpoint writer: out of memory");
    if (!e) e = dt_optim_init(&w->optim, oc, params, np);
    free(params); /* the optimizer keeps its own copy of the array */
    if (e) goto fail;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        e = dt_err_set(DT_ERR_NOMEM, "checkpoint writer: cannot start its thread");
        goto fail;
    }
    *out = w;
    return DT_OK;
fail:
    dt_optim_free(w->optim);
    dt_model_free(w->model);
    free(w);
    return e;
}

dt_err dt__ckpt_writer_take(dt__ckpt_writer *w, int wait, int64_t *step) {
    *step = -1;
    if (!w) return DT_OK;
    pthread_mutex_lock(&w->mu);
    while (wait && w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    dt_err e = DT_OK;
    if (w->done) {
        w->done = 0;
        *step = w->step;
        e = w->err;
        if (e) dt_err_set(e, "%s", w->msg);
    }
    pthread_mutex_unlock(&w->mu);
    return e;
}

void dt__ckpt_writer_put(dt__ckpt_writer *w, dt_model *m, dt_optim *o, const dt_train_state *st) {
    pthread_mutex_lock(&w->mu);
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    DT_ASSERT(!w->done); /* the caller took the last result */
    int np = dt_model_num_params(m), ns = dt_optim_num_slots(o);
    DT_ASSERT(np == dt_model_num_params(w->model) && ns == dt_optim_num_slots(w->optim));
    for (int i = 0; i < np; i++) {
        const dt_tensor *from = &dt_model_param(m, i)->value;
        memcpy(dt_model_param(w->model, i)->value.data, from->data,
               (size_t)dt_tensor_numel(from) * sizeof(float));
    }
    for (int i = 0; i < ns; i++) {
        const dt_tensor *from = dt_optim_slot(o, i);
        memcpy(dt_optim_slot(w->optim, i)->data, from->data,
               (size_t)dt_tensor_numel(from) * sizeof(float));
    }
    dt_optim_set_steps(w->optim, dt_optim_steps(o));
    w->st = *st;
    w->step = st->step;
    w->busy = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void dt__ckpt_writer_end(dt__ckpt_writer *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    dt_optim_free(w->optim);
    dt_model_free(w->model);
    free(w);
}
