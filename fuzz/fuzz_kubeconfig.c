/*
 * fuzz_kubeconfig.c - libFuzzer harness: kubeconfig files through dt__kube_connect (the
 * --kubeconfig of `dtrain run --kube`), which loads the file and opens no connection.
 */
#include "backend/kube-impl.h"
#include "fuzz-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt__kube_conn c = {.kubeconfig = dt__fuzz_file(0, data, size)};
    dt__kube *k = NULL;
    if (dt__kube_connect(&k, &c) == DT_OK) dt__kube_free(k);
    dt_err_clear();
    return 0;
}
