/*
 * fuzz_experiment.c - libFuzzer harness: Katib Experiment and Sweep files through
 * dt__experiment_load (`dtrain tune`), which reads a path: the input is written to a file.
 */
#include "fuzz-impl.h"
#include "tune/tune-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt__experiment *e = NULL;
    if (dt__experiment_load(&e, dt__fuzz_file(0, data, size)) == DT_OK) dt__experiment_free(e);
    dt_err_clear();
    return 0;
}
