/*
 * stop.c - SIGTERM and SIGINT as a flag (stop-impl.h).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "core/stop-impl.h"
#include "core/thread-impl.h"

static atomic_int stop_sig;
static atomic_int watching;
static sigset_t stop_set;

static void *watch_main(void *arg) {
    (void)arg;
    dt__thread_name("dt-stop-watch");
    int sig = 0;
    /* the first one counts; later ones change nothing (the process is stopping already) */
    while (sigwait(&stop_set, &sig) == 0) {
        int none = 0;
        atomic_compare_exchange_strong(&stop_sig, &none, sig);
    }
    return NULL;
}

/* For a thread that did not block the signals (one a library started before the watch, as
 * OpenBLAS starts its pool when it is loaded): it notes the signal and its system call
 * goes on (SA_RESTART), instead of the default action ending the process. */
static void on_stop(int sig) {
    int none = 0;
    atomic_compare_exchange_strong(&stop_sig, &none, sig);
}

dt_err dt__stop_watch(void) {
    if (atomic_exchange(&watching, 1)) return DT_OK;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    int rc = 0;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0) rc = errno;
    if (!rc) rc = pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
    pthread_t t;
    if (!rc) rc = pthread_create(&t, NULL, watch_main, NULL);
    if (rc) {
        atomic_store(&watching, 0);
        return dt_err_set(DT_ERR_IO, "cannot watch for SIGTERM: %s", strerror(rc));
    }
    pthread_detach(t);
    return DT_OK;
}

int dt__stop_signal(void) { return atomic_load(&stop_sig); }
