/*
 * operator-impl.h - `dtrain operator`: run the jobs that custom resources describe.
 */
#ifndef DTRAIN_OPERATOR_IMPL_H
#define DTRAIN_OPERATOR_IMPL_H

#include <stdio.h>

#include "dtrain/err.h"

typedef struct dt__operator_opts {
    const char *kubeconfig; /* NULL: $KUBECONFIG, ~/.kube/config, in-cluster */
    const char *context;
    const char *namespace;  /* NULL: every namespace */
    int kubeflow;           /* also kubeflow.org/v1 TFJob and PyTorchJob */
    const char *image;      /* dtrain's image for the jobs' masters (NULL: dtrain:latest) */
    FILE *out;              /* one line per action */
} dt__operator_opts;

/* Watch the resources and start each new one's master; returns on SIGINT or SIGTERM. */
dt_err dt__operator_run(const dt__operator_opts *o);

#endif
