/*
 * fuzz_safetensors.c - libFuzzer harness: safetensors files (checkpoints, exported models)
 * through dt_safetensors_read.
 */
#include "dtrain/checkpoint.h"
#include "fuzz-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_safetensors *st = NULL;
    if (dt_safetensors_read(&st, dt__fuzz_file(0, data, size)) == DT_OK) dt_safetensors_free(st);
    dt_err_clear();
    return 0;
}
