/* cmd_version.c - `dtrain version`. */
#include <stdio.h>

#include "cli/cli-impl.h"
#include "core/gemm-impl.h"

static int run(int argc, char **argv) {
    (void)argv;
    if (argc > 1) return dt__cli_usage_error(&dt__cmd_version, "takes no arguments");
    printf("dtrain %s\nBLAS: %s\n", DT_VERSION, dt__blas_name());
    return DT_EXIT_OK;
}

const dt__cli_cmd dt__cmd_version = {
    .name = "version",
    .summary = "Print dtrain's version and the BLAS it uses",
    .usage = "Usage: dtrain version\n\nPrint dtrain's version and the BLAS kernels it uses.\n",
    .run = run,
};
