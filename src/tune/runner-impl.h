/*
 * runner-impl.h - `dtrain tune`'s driver: runs an experiment's trials as jobs of a dtrain
 * server and keeps EXPERIMENT_DIR (src/tune/runner.c; docs/TUNE.md "The runner").
 */
#ifndef DTRAIN_TUNE_RUNNER_IMPL_H
#define DTRAIN_TUNE_RUNNER_IMPL_H

#include <stdint.h>

#include "dtrain/err.h"

typedef struct dt__tune_opts {
    const char *experiment; /* the experiment file */
    const char *dir;        /* EXPERIMENT_DIR; NULL: runs/<experiment name>-tune */
    const char *server;     /* a server's URL; NULL: start one in EXPERIMENT_DIR/server */
    const char *token;      /* the server's token (with server); NULL: found as docs/TUNE.md says */
    const char *self;       /* this binary (for `server`); NULL: /proc/self/exe */
    uint64_t seed;          /* the search's seed for a new experiment; 0: from the clock */
    int has_seed;
    double poll_seconds;    /* how often running trials are looked at; 0: 0.25 */
} dt__tune_opts;

/* Run (or continue) the experiment to its end. Returns a process exit code: 0 the
 * experiment Succeeded, 1 it Failed or could not run, 2 a bad experiment (said with
 * FILE:LINE before any job was submitted). Prints each trial as it ends and the best. */
int dt__tune_run(const dt__tune_opts *o);

/* `dtrain tune status`: the experiment in dir (EXPERIMENT_DIR, or a name: runs/NAME-tune);
 * json: state.json as it is. Returns an exit code. */
int dt__tune_status(const char *dir_or_name, int json);

#endif
