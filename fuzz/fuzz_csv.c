/*
 * fuzz_csv.c - libFuzzer harness: CSV datasets through dt_dataset_load_csv. The first byte
 * picks the options (header, label column, delimiter, regression); the rest is the file.
 */
#include "dtrain/data.h"
#include "fuzz-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t o = data[0];
    dt_csv_opts opts = {.header = o & 1,
                        .regression = (o >> 1) & 1,
                        .delimiter = (o >> 2) & 1 ? ';' : 0,
                        .label_column = (int)(o >> 3) % 5 - 1};
    dt_dataset *d = NULL;
    if (dt_dataset_load_csv(&d, dt__fuzz_file(0, data + 1, size - 1), &opts) == DT_OK)
        dt_dataset_free(d);
    dt_err_clear();
    return 0;
}
