/*
 * fuzz_idx.c - libFuzzer harness: IDX image and label files (MNIST's format) through
 * dt_dataset_load_idx. The input is both files: its first two bytes (little-endian) are
 * the images file's length, the images follow, the labels are the rest.
 */
#include "dtrain/data.h"
#include "fuzz-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    data += 2;
    size -= 2;
    if (n > size) n = size;
    const char *images = dt__fuzz_file(0, data, n);
    const char *labels = dt__fuzz_file(1, data + n, size - n);
    dt_dataset *d = NULL;
    if (dt_dataset_load_idx(&d, images, labels) == DT_OK) dt_dataset_free(d);
    dt_err_clear();
    return 0;
}
