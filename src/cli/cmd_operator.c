/*
 * cmd_operator.c - `dtrain operator`: run in a cluster and start a job for every dtrain
 * TrainJob resource (and, with --kubeflow, every TFJob and PyTorchJob) created there.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli-impl.h"
#include "operator/operator-impl.h"

static const char usage[] =
    "Usage: dtrain operator [options]\n"
    "\n"
    "Watch dtrain.io/v1 TrainJob custom resources (deploy/crds.yaml) and run each new one:\n"
    "its master in a pod of the cluster, which makes the replicas' pods and writes the\n"
    "resource's status (conditions, replicaStatuses, startTime, completionTime) as Kubeflow's\n"
    "training operator does. Deleting the resource deletes the job. docs/KUBERNETES.md.\n"
    "\n"
    "Options:\n"
    "  --namespace NS     watch only NS (default: every namespace)\n"
    "  --kubeflow         also kubeflow.org/v1 TFJob and PyTorchJob (for a cluster without\n"
    "                     Kubeflow's training operator: do not run both)\n"
    "  --image IMG        dtrain's image for the jobs' masters (default dtrain:latest)\n"
    "  --kubeconfig F     the cluster (default: $KUBECONFIG, ~/.kube/config, in-cluster)\n"
    "  --context C        the kubeconfig's context\n"
    "  -h, --help         show this help\n"
    "\n"
    "Runs until SIGINT or SIGTERM. Exit status: 0 stopped, 1 cannot connect, 2 bad arguments.\n";

static int run(int argc, char **argv) {
    enum { OPT_NS = 256, OPT_KUBEFLOW, OPT_IMAGE, OPT_KUBECONFIG, OPT_CONTEXT };
    static const struct option longopts[] = {
        {"namespace", required_argument, NULL, OPT_NS},
        {"kubeflow", no_argument, NULL, OPT_KUBEFLOW},
        {"image", required_argument, NULL, OPT_IMAGE},
        {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {NULL, 0, NULL, 0},
    };
    dt__operator_opts o = {.out = stderr};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_NS: o.namespace = optarg; break;
        case OPT_KUBEFLOW: o.kubeflow = 1; break;
        case OPT_IMAGE: o.image = optarg; break;
        case OPT_KUBECONFIG: o.kubeconfig = optarg; break;
        case OPT_CONTEXT: o.context = optarg; break;
        case ':': return dt__cli_usage_error(&dt__cmd_operator, "%s needs a value", argv[optind - 1]);
        default: return dt__cli_usage_error(&dt__cmd_operator, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc) return dt__cli_usage_error(&dt__cmd_operator, "takes no arguments");
    if (dt__operator_run(&o)) {
        fprintf(stderr, "dtrain operator: %s\n", dt_errmsg());
        return DT_EXIT_FAILED;
    }
    return DT_EXIT_OK;
}

const dt__cli_cmd dt__cmd_operator = {
    .name = "operator",
    .summary = "Run jobs from TrainJob (and TFJob, PyTorchJob) resources in a cluster",
    .usage = usage,
    .run = run,
};
