/*
 * ps_role.c - ps-i: serve partition i of the model's variables until stopped.
 *
 * The PS builds the model only to learn the variables' names and shapes (the server copies
 * them and keeps its own storage), starts the data-plane server on its TF_CONFIG port and
 * waits for SIGTERM or SIGINT, when it answers the frames in hand, saves its partition and
 * exits 128 + the signal. Its partition checkpoints live in JOB_DIR/checkpoints/ps-i/, so a
 * PS restarted by the master comes back with the values of its newest one: the values it
 * had when it was stopped, or those of the chief's last checkpoint when it was killed.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/ps.h"
#include "role/role-impl.h"

#define BIND_ATTEMPTS 20
#define BIND_RETRY_US (500 * 1000)

dt_err dt__role_ps(dt__role *r) {
    if (r->index >= r->nps)
        return dt_err_set(DT_ERR_ARG, "TF_CONFIG: task ps-%d is not in cluster.ps (%d entries)",
                          r->index, r->nps);
    if (!r->token || !*r->token)
        return dt_err_set(DT_ERR_ARG, "DTRAIN_JOB_TOKEN is not set: the data plane needs the "
                                      "job's token");
    /* Block the stop signals before any thread starts, so that only sigwait sees them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    dt_dataset *train = NULL;
    dt_model *model = NULL;
    dt_ps_server *server = NULL;
    dt_param **params = NULL;
    int np = 0;
    dt_err e = dt__role_model(r, 1, NULL, &train, NULL, &model);
    if (e) return e;
    char dir[DT__PATH_MAX];
    if ((e = dt__path(dir, sizeof dir, "%s/ps-%d", r->ckpt_dir, r->index)) || (e = dt__mkdirs(dir)))
        goto end;
    if (!(params = dt__role_params(model, &np))) {
        e = dt_err_set(DT_ERR_NOMEM, "out of memory");
        goto end;
    }
    dt_ps_server_conf conf = {.host = r->self_host[0] ? r->self_host : NULL,
                              .port = r->self_port,
                              .token = r->token,
                              .max_frame = r->job->ps.max_frame,
                              .index = r->index,
                              .nps = r->nps,
                              .optim = dt__role_optim(r, train->n),
                              .threads = 1,
                              .sync = r->job->ps.sync,
                              .sync_timeout_ms = r->job->ps.sync_timeout_ms,
                              .ckpt_dir = dir,
                              .keep = r->spec->checkpoint_keep,
                              .no_shm = !r->job->ps.shared_memory,
                              .log = r->log};
    /* The port may still be held for a moment (a connection of the PS this one replaces):
     * try for a few seconds before failing. */
    for (int attempt = 0;; attempt++) {
        e = dt_ps_server_start(&server, &conf, params, np);
        if (e != DT_ERR_NETWORK || attempt == BIND_ATTEMPTS) break; /* address in use */
        usleep(BIND_RETRY_US);
    }
    if (e) goto end;
    int64_t step = dt_ps_server_step(server);
    fprintf(r->log, "%s: serving partition %d of %d on port %d (%s, %s)\n", r->name, r->index,
            r->nps, dt_ps_server_port(server), r->job->ps.sync ? "synchronous" : "asynchronous",
            step >= 0 ? "restored from its checkpoint" : "waiting for initial values");
    fflush(r->log);
    free(params);
    params = NULL;
    dt_model_free(model);
    model = NULL;
    dt_dataset_free(train);
    train = NULL;
    int sig = 0;
    sigwait(&stop, &sig);
    /* Stopped (the job's end or stop, or a preemption): answer what is in hand, then save
     * the partition, so that a PS started again continues from exactly what this one
     * applied and no client's push is applied twice or lost. */
    fprintf(r->log, "%s: stopping (%s) at step %lld: saving the partition\n", r->name,
            strsignal(sig), (long long)dt_ps_server_step(server));
    fflush(r->log);
    int64_t saved;
    char path[DT__PATH_MAX];
    if ((e = dt_ps_server_drain(server, &saved, path, sizeof path))) {
        dt_err_wrap(e, "%s: saving the partition when stopped", r->name);
        goto end;
    }
    if (saved >= 0) fprintf(r->log, "%s: saved step %lld to %s\n", r->name, (long long)saved, path);
    r->stopped_by = sig;
end:
    dt_ps_server_stop(server);
    free(params);
    dt_model_free(model);
    dt_dataset_free(train);
    return e;
}
