/* server.c - `dtrain serve` from start to stop: models, batch executors, the REST API. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm-impl.h"
#include "serve/serve-impl.h"

int dt__sv_run(const dt__sv_opts *opts) {
    /* the signals that stop the server go to sigwait here, never to a worker thread */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    signal(SIGPIPE, SIG_IGN);
    dt__blas_init(); /* single-threaded BLAS: the server's own threads are the parallelism */

    dt__sv_server *s = calloc(1, sizeof *s);
    if (!s) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    s->opts = *opts;
    pthread_mutex_init(&s->stop_mu, NULL);
    pthread_cond_init(&s->stop_cv, NULL);
    char url[128];
    dt_err e = dt__sv_models_start(s);
    if (!e) e = dt__sv_metrics_init(s);
    if (!e) e = dt__sv_batcher_start(s);
    if (!e) e = dt__sv_rest_start(s, url, sizeof url);
    if (!e) {
        fprintf(opts->log, "dtrain serve: REST API on %s (%d model%s, batching %s)\n", url,
                s->nmodels, s->nmodels == 1 ? "" : "s", opts->batching ? "on" : "off");
        fflush(opts->log);
        int sig = 0;
        sigwait(&set, &sig);
        fprintf(opts->log, "dtrain serve: %s: stopping\n", strsignal(sig));
    }
    char msg[1024] = "";
    if (e) snprintf(msg, sizeof msg, "%s", dt_errmsg());
    dt__sv_rest_stop(s); /* no request is in flight after this */
    dt__sv_batcher_stop(s);
    dt__sv_metrics_free(s); /* before the models: it names them */
    dt__sv_models_stop(s);
    pthread_mutex_destroy(&s->stop_mu);
    pthread_cond_destroy(&s->stop_cv);
    free(s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) dt_err_set(e, "%s", msg);
    return e;
}
