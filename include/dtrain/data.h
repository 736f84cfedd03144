/*
 * data.h - datasets in memory: readers, scaling, splitting, shuffling, batching.
 *
 * A dt_dataset holds n samples as float32 (features already converted, row-major) and
 * either integer class labels (classification) or float targets (regression). Readers
 * never trust their input: a wrong magic, a truncated file, a dimension mismatch or a bad
 * CSV field returns DT_ERR_FORMAT (DT_ERR_IO when the file cannot be read) with a message
 * that names the file and the record ("data/x.csv:17: field 3: 'abc' is not a number",
 * "train-images.gz: image 5012: file ends early").
 *
 * Ownership: a dataset returned through an out-parameter belongs to the caller, who frees
 * it with dt_dataset_free. Not thread-safe for writing; concurrent reads are fine.
 */
#ifndef DTRAIN_DATA_H
#define DTRAIN_DATA_H

#include <stdint.h>

#include "dtrain/err.h"
#include "dtrain/tensor.h"
#include "dtrain/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_dataset {
    int64_t n;          /* number of samples */
    dt_shape sample;    /* shape of one sample, without the batch dimension: {28, 28, 1}, {4} */
    float *x;           /* n * numel(sample) features, owned */
    int32_t *labels;    /* n class labels in [0, num_classes) (classification), owned, or NULL */
    float *targets;     /* n * target_dim regression targets, owned, or NULL */
    int target_dim;     /* 0 for classification */
    int num_classes;    /* 0 for regression */
    char **class_names; /* num_classes names when labels were strings (CSV), owned, or NULL */
    /* The normalization applied to x, as x = raw * norm_scale[j] + norm_shift[j] per feature
     * (row floats each, owned), for exports to apply to raw input; NULL: none recorded. */
    float *norm_scale, *norm_shift;
} dt_dataset;

/* IDX files (MNIST, Fashion-MNIST), gzip-compressed (.gz, detected by content) or raw.
 * Images become {rows, cols, 1} float samples holding the raw pixel values 0..255 (scale
 * them with dt_dataset_scale); labels must match the image count. */
dt_err dt_dataset_load_idx(dt_dataset **out, const char *images_path, const char *labels_path);

typedef struct dt_csv_opts {
    int label_column; /* 0-based column of the label; -1 = the last column */
    int header;       /* 1: the first non-blank line is a header and is skipped */
    char delimiter;   /* ',' when 0 */
    int regression;   /* 1: the label is a number (target); 0: a class (name or integer) */
} dt_csv_opts;

/* CSV with one label column; every other column is a float feature. Blank lines are
 * skipped. Class labels that are all integers keep their values; otherwise the distinct
 * names are sorted and numbered 0.. (class_names keeps them). */
dt_err dt_dataset_load_csv(dt_dataset **out, const char *path, const dt_csv_opts *opts);

/* n samples of the given shape, features uniform in [0, 1), num_classes labels: a
 * learnable synthetic task (label = argmax over a seeded random projection), for tests and
 * benchmarks. */
dt_err dt_dataset_synthetic(dt_dataset **out, int64_t n, const dt_shape *sample, int num_classes,
                            uint64_t seed);

void dt_dataset_free(dt_dataset *d);

/* Feature count of one sample. */
int64_t dt_dataset_row(const dt_dataset *d);

/* x = x * scale + shift, on every feature. */
void dt_dataset_scale(dt_dataset *d, float scale, float shift);

/* Per-feature mean and standard deviation (arrays of dt_dataset_row(d) floats, caller-owned),
 * computed over d; std never below 1e-12 (a constant feature keeps std 1). */
void dt_dataset_feature_stats(const dt_dataset *d, float *mean, float *std);
/* x = (x - mean) / std per feature. */
void dt_dataset_standardize(dt_dataset *d, const float *mean, const float *std);

/* Split d into two new datasets: a seeded shuffle, then the last round(n * eval_fraction)
 * samples go to *eval, the rest to *train. d itself is left unchanged. */
dt_err dt_dataset_split(const dt_dataset *d, double eval_fraction, uint64_t seed,
                        dt_dataset **train, dt_dataset **eval);

/* The order of samples in one epoch: idx[0..n) becomes 0..n-1, shuffled (when shuffle) by a
 * stream derived from (seed, epoch) alone, so that any epoch's order can be recomputed. */
void dt_epoch_order(int64_t *idx, int64_t n, uint64_t seed, int64_t epoch, int shuffle);

/* Copy the samples idx[0..count) into a batch: x_out gets count * row floats, labels_out
 * (if non-NULL and d has labels) count labels, targets_out (if non-NULL and d has targets)
 * count * target_dim floats. */
void dt_dataset_gather(const dt_dataset *d, const int64_t *idx, int64_t count, float *x_out,
                       int32_t *labels_out, float *targets_out);

/* The same, the samples split over pool's threads (NULL: the calling thread): a batch's rows
 * are scattered over memory, and each thread waits for its own. */
void dt_dataset_gather_on(dt_pool *pool, const dt_dataset *d, const int64_t *idx, int64_t count,
                          float *x_out, int32_t *labels_out, float *targets_out);

#ifdef __cplusplus
}
#endif
#endif
