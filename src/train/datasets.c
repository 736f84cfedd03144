/*
 * datasets.c - turn a spec's data section into normalized train and eval sets.
 *
 * Normalization statistics always come from the training set and are applied unchanged
 * to the eval set, so evaluation never sees information from itself.
 */
#include <stdlib.h>

#include "train/train-impl.h"

static dt_err load_source(const dt_spec *spec, const dt_data_source *src, uint64_t seed,
                          dt_dataset **out) {
    dt_err e;
    switch (src->format) {
    case DT_DATA_IDX:
        e = dt_dataset_load_idx(out, src->images, src->labels);
        break;
    case DT_DATA_CSV: {
        dt_csv_opts o = {.label_column = src->label_column, .header = src->header};
        e = dt_dataset_load_csv(out, src->path, &o);
        break;
    }
    case DT_DATA_SYNTHETIC:
        e = dt_dataset_synthetic(out, src->samples, &src->shape, src->num_classes, seed);
        break;
    default:
        e = dt_err_set(DT_ERR_ARG, "unknown data format %d", (int)src->format);
    }
    if (e) dt_err_wrap(e, "%s:%d: data", spec->path, src->line);
    return e;
}

/* Record on train the affine x = raw * scale + shift that normalization applied (an export
 * folds it into the model, whose input is then raw features). */
static dt_err record_norm(dt_dataset *train, const float *mean, const float *std, float scale,
                          float shift) {
    int64_t row = dt_dataset_row(train);
    train->norm_scale = malloc((size_t)row * sizeof(float));
    train->norm_shift = malloc((size_t)row * sizeof(float));
    if (!train->norm_scale || !train->norm_shift)
        return dt_err_set(DT_ERR_NOMEM, "normalize: out of memory");
    for (int64_t j = 0; j < row; j++) {
        train->norm_scale[j] = mean ? 1.0f / std[j] : scale;
        train->norm_shift[j] = mean ? -mean[j] / std[j] : shift;
    }
    return DT_OK;
}

static dt_err normalize(const dt_spec *spec, dt_dataset *train, dt_dataset *eval) {
    switch (spec->norm) {
    case DT_NORM_NONE:
        return record_norm(train, NULL, NULL, 1.0f, 0.0f);
    case DT_NORM_SCALE:
        dt_dataset_scale(train, spec->scale, spec->shift);
        dt_dataset_scale(eval, spec->scale, spec->shift);
        return record_norm(train, NULL, NULL, spec->scale, spec->shift);
    case DT_NORM_MEAN_STD: {
        /* (x*scale - mean)/std = x*(scale/std) - mean/std */
        float a = spec->scale / spec->std, b = -spec->mean / spec->std;
        dt_dataset_scale(train, a, b);
        dt_dataset_scale(eval, a, b);
        return record_norm(train, NULL, NULL, a, b);
    }
    case DT_NORM_STANDARD: {
        int64_t row = dt_dataset_row(train);
        float *mean = malloc((size_t)row * sizeof *mean), *std = malloc((size_t)row * sizeof *std);
        if (!mean || !std) {
            free(mean);
            free(std);
            return dt_err_set(DT_ERR_NOMEM, "normalize: out of memory");
        }
        dt_dataset_feature_stats(train, mean, std);
        dt_dataset_standardize(train, mean, std);
        dt_dataset_standardize(eval, mean, std);
        dt_err e = record_norm(train, mean, std, 0, 0);
        free(mean);
        free(std);
        return e;
    }
    }
    return DT_OK;
}

dt_err dt__train_load_data(const dt_spec *spec, uint64_t seed, dt_dataset **train_out,
                           dt_dataset **eval_out) {
    dt_dataset *all = NULL, *train = NULL, *eval = NULL;
    dt_err e = load_source(spec, &spec->train, seed, &all);
    if (e) goto err;
    if (spec->has_eval) {
        train = all;
        all = NULL;
        e = load_source(spec, &spec->eval, seed + 1, &eval);
        if (e) goto err;
        if (dt_dataset_row(eval) != dt_dataset_row(train)) {
            char a[64], b[64];
            e = dt_err_set(DT_ERR_SHAPE, "%s:%d: data.eval: samples of shape %s, but train has %s",
                           spec->path, spec->eval.line, dt_shape_str(&eval->sample, a, sizeof a),
                           dt_shape_str(&train->sample, b, sizeof b));
            goto err;
        }
    } else {
        e = dt_dataset_split(all, spec->eval_fraction, seed, &train, &eval);
        if (e) {
            dt_err_wrap(e, "%s: data.eval_fraction", spec->path);
            goto err;
        }
        dt_dataset_free(all);
        all = NULL;
    }
    e = normalize(spec, train, eval);
    if (e) goto err;
    *train_out = train;
    *eval_out = eval;
    return DT_OK;
err:
    dt_dataset_free(all);
    dt_dataset_free(train);
    dt_dataset_free(eval);
    return e;
}
