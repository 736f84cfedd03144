/* data-impl.h - internals shared by the dataset readers (idx.c, csv.c, synthetic.c) and
 * dataset.c. Not part of the public API. */
#ifndef DTRAIN_DATA_IMPL_H
#define DTRAIN_DATA_IMPL_H

#include <stdint.h>

#include "dtrain/data.h"

/* The most classes a dataset may have (integer CSV labels must be below it). */
#define DT_DATA_MAX_CLASSES 65536

/* Allocate a dataset of n samples of the given shape: x uninitialised, labels (when
 * with_labels) zeroed, targets (when target_dim > 0) zeroed; num_classes, class_names are
 * left for the caller. Checks n * row for overflow. DT_ERR_NOMEM / DT_ERR_ARG on failure.
 * Caller frees with dt_dataset_free. */
dt_err dt__dataset_alloc(dt_dataset **out, int64_t n, const dt_shape *sample, int with_labels,
                         int target_dim);

#endif
