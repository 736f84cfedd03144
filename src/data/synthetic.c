/*
 * synthetic.c - a learnable synthetic classification task, for tests and benchmarks.
 *
 * Design: features are uniform in [0, 1) from one seeded stream; a projection P (row x
 * num_classes, standard normal entries, each column scaled to unit length) comes from a
 * second stream of the same seed; the label of x is argmax_j (x - 0.5) . P[:, j]. That is a
 * linear decision rule, so a softmax regression can reach 100% accuracy and deeper models
 * learn it fast. Centring x and normalising the columns keeps the classes roughly balanced
 * (no column wins just by having a larger sum or norm) as long as the sample has at least
 * as many features as there are classes; with fewer, some classes may be rare or empty.
 * Scores are summed in double in a fixed order (no BLAS, whose rounding depends on the CPU),
 * so the same seed gives the same dataset on every machine.
 */
#include <math.h>
#include <stdlib.h>

#include "data/data-impl.h"
#include "dtrain/rng.h"

/* The rng streams of the features and of the projection. */
#define DT_SYNTH_STREAM_X 1
#define DT_SYNTH_STREAM_P 2

dt_err dt_dataset_synthetic(dt_dataset **out, int64_t n, const dt_shape *sample, int num_classes,
                            uint64_t seed) {
    if (n < 1)
        return dt_err_set(DT_ERR_ARG, "synthetic dataset: n = %lld, need at least 1", (long long)n);
    if (sample->ndim < 1 || sample->ndim > DT_MAX_DIMS)
        return dt_err_set(DT_ERR_ARG,
                          "synthetic dataset: a sample needs 1 to %d dimensions, got %d",
                          DT_MAX_DIMS, sample->ndim);
    for (int i = 0; i < sample->ndim; i++)
        if (sample->dim[i] < 1 || sample->dim[i] > INT32_MAX) {
            char buf[96];
            return dt_err_set(DT_ERR_ARG, "synthetic dataset: bad sample shape %s",
                              dt_shape_str(sample, buf, sizeof buf));
        }
    if (num_classes < 2 || num_classes > DT_DATA_MAX_CLASSES)
        return dt_err_set(DT_ERR_ARG, "synthetic dataset: %d classes, need 2 to %d", num_classes,
                          DT_DATA_MAX_CLASSES);

    /* each dim <= 2^31 and at most 4 dims could still overflow: check the product */
    int64_t row = 1;
    for (int i = 0; i < sample->ndim; i++) {
        if (row > INT64_MAX / sample->dim[i])
            return dt_err_set(DT_ERR_ARG, "synthetic dataset: sample too large");
        row *= sample->dim[i];
    }
    dt_dataset *d = NULL;
    double *proj = NULL, *score = NULL;
    dt_err err = dt__dataset_alloc(&d, n, sample, 1, 0);
    if (err) return dt_err_wrap(err, "synthetic dataset");
    if ((uint64_t)row > SIZE_MAX / sizeof(double) / (uint64_t)num_classes) goto nomem;
    proj = malloc((size_t)row * (size_t)num_classes * sizeof(double));
    score = malloc((size_t)num_classes * sizeof(double));
    if (!proj || !score) goto nomem;
    d->num_classes = num_classes;

    dt_rng rp, rx;
    dt_rng_seed2(&rp, seed, DT_SYNTH_STREAM_P);
    dt_rng_seed2(&rx, seed, DT_SYNTH_STREAM_X);
    for (int64_t i = 0; i < row * num_classes; i++)
        proj[i] = dt_rng_normal(&rp);
    for (int j = 0; j < num_classes; j++) {
        double norm = 0;
        for (int64_t i = 0; i < row; i++)
            norm += proj[i * num_classes + j] * proj[i * num_classes + j];
        norm = norm > 0 ? 1.0 / sqrt(norm) : 1.0;
        for (int64_t i = 0; i < row; i++)
            proj[i * num_classes + j] *= norm;
    }

    for (int64_t s = 0; s < n; s++) {
        float *x = d->x + s * row;
        for (int j = 0; j < num_classes; j++)
            score[j] = 0;
        for (int64_t i = 0; i < row; i++) {
            x[i] = dt_rng_uniform(&rx);
            double c = (double)x[i] - 0.5;
            const double *p = proj + i * num_classes;
            for (int j = 0; j < num_classes; j++)
                score[j] += c * p[j];
        }
        int best = 0;
        for (int j = 1; j < num_classes; j++)
            if (score[j] > score[best]) best = j;
        d->labels[s] = best;
    }
    *out = d;
    d = NULL;
    goto end;
nomem:
    err = dt_err_set(DT_ERR_NOMEM, "synthetic dataset: cannot allocate a %lld x %d projection",
                     (long long)row, num_classes);
end:
    free(score);
    free(proj);
    dt_dataset_free(d);
    return err;
}
