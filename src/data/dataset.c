/*
 * dataset.c - the in-memory dataset: allocation, freeing, scaling, standardization,
 * splitting, epoch orders and batch gathering.
 *
 * Design: a dataset is a few flat malloc'd arrays (x, labels or targets, class names), so
 * a batch is a gather of whole rows and a split is two gathers. Everything random here is
 * derived from a seed through dt_rng_seed2, never from carried state: the split uses a
 * fixed stream (DT_SPLIT_STREAM), epoch e uses stream e, so any epoch's order can be
 * recomputed after a restart from the seed alone. Statistics accumulate in double so that
 * 60000 x 784 features do not lose precision in float sums.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/assert-impl.h"
#include "data/data-impl.h"
#include "dtrain/rng.h"

/* The rng stream of dt_dataset_split ("split" in ASCII); epochs use streams 0, 1, 2, ... */
#define DT_SPLIT_STREAM 0x73706c6974ULL

/* Fashion-MNIST's 188 MB of floats took 46k page faults to fill, each a trap into this VM's
 * hypervisor: half of a replica's 0.9 s load. On 2 MB pages (where the kernel's
 * transparent_hugepage setting is "madvise", Debian's default, or "always") the load took
 * 0.30-0.66 s and a PS job's start to end 0.8-1.4 s less; training speed did not change
 * (docs/PERFORMANCE.md, "Memory"). Only the whole pages inside [p, p + bytes) are advised:
 * malloc's block keeps its own bookkeeping; the kernel backs the 2 MB-aligned stretches of
 * them. Advice only: where it is refused, nothing changes. */
static void ask_huge_pages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    long size = sysconf(_SC_PAGESIZE);
    if (bytes < ((size_t)4 << 20) || size <= 0) return;
    uintptr_t page = (uintptr_t)size;
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

dt_err dt__dataset_alloc(dt_dataset **out, int64_t n, const dt_shape *sample, int with_labels,
                         int target_dim) {
    DT_ASSERT(n >= 0 && target_dim >= 0);
    int64_t row = dt_shape_numel(sample);
    if (row <= 0 || (n > 0 && row > INT64_MAX / (int64_t)sizeof(float) / n))
        return dt_err_set(DT_ERR_ARG, "dataset of %lld samples of %lld features is too large",
                          (long long)n, (long long)row);
    if (target_dim > 0 && n > INT64_MAX / (int64_t)sizeof(float) / target_dim)
        return dt_err_set(DT_ERR_ARG, "dataset of %lld targets of %d values is too large",
                          (long long)n, target_dim);
    dt_dataset *d = calloc(1, sizeof *d);
    if (!d) goto nomem;
    d->n = n;
    d->sample = *sample;
    d->target_dim = target_dim;
    /* +1: never malloc(0), so NULL always means failure */
    d->x = malloc((size_t)(n * row) * sizeof(float) + 1);
    if (!d->x) goto nomem;
    ask_huge_pages(d->x, (size_t)(n * row) * sizeof(float));
    if (with_labels) {
        d->labels = calloc((size_t)n + 1, sizeof(int32_t));
        if (!d->labels) goto nomem;
    }
    if (target_dim > 0) {
        d->targets = calloc((size_t)(n * target_dim) + 1, sizeof(float));
        if (!d->targets) goto nomem;
    }
    *out = d;
    return DT_OK;
nomem:
    dt_dataset_free(d);
    return dt_err_set(DT_ERR_NOMEM, "cannot allocate a dataset of %lld samples of %lld features",
                      (long long)n, (long long)row);
}

void dt_dataset_free(dt_dataset *d) {
    if (!d) return;
    if (d->class_names) {
        for (int i = 0; i < d->num_classes; i++)
            free(d->class_names[i]);
        free(d->class_names);
    }
    free(d->norm_scale);
    free(d->norm_shift);
    free(d->x);
    free(d->labels);
    free(d->targets);
    free(d);
}

int64_t dt_dataset_row(const dt_dataset *d) {
    return dt_shape_numel(&d->sample);
}

void dt_dataset_scale(dt_dataset *d, float scale, float shift) {
    int64_t total = d->n * dt_dataset_row(d);
    float *x = d->x;
    for (int64_t i = 0; i < total; i++)
        x[i] = x[i] * scale + shift;
}

/* Features per block of dt_dataset_feature_stats: its double accumulators live on the stack
 * (16 KiB), so the statistics never allocate; wider samples take several passes. */
#define DT_STATS_BLOCK 1024

void dt_dataset_feature_stats(const dt_dataset *d, float *mean, float *std) {
    int64_t row = dt_dataset_row(d);
    double sum[DT_STATS_BLOCK], sq[DT_STATS_BLOCK];
    for (int64_t j0 = 0; j0 < row; j0 += DT_STATS_BLOCK) {
        int64_t nb = row - j0 < DT_STATS_BLOCK ? row - j0 : DT_STATS_BLOCK;
        for (int64_t j = 0; j < nb; j++)
            sum[j] = sq[j] = 0.0;
        /* two passes (mean, then squared deviations): no catastrophic cancellation */
        for (int64_t i = 0; i < d->n; i++) {
            const float *x = d->x + i * row + j0;
            for (int64_t j = 0; j < nb; j++)
                sum[j] += x[j];
        }
        for (int64_t j = 0; j < nb; j++)
            sum[j] = d->n > 0 ? sum[j] / (double)d->n : 0.0;
        for (int64_t i = 0; i < d->n; i++) {
            const float *x = d->x + i * row + j0;
            for (int64_t j = 0; j < nb; j++) {
                double dev = x[j] - sum[j];
                sq[j] += dev * dev;
            }
        }
        for (int64_t j = 0; j < nb; j++) {
            double sd = d->n > 0 ? sqrt(sq[j] / (double)d->n) : 0.0;
            mean[j0 + j] = (float)sum[j];
            std[j0 + j] = sd < 1e-12 ? 1.0f : (float)sd;
        }
    }
}

void dt_dataset_standardize(dt_dataset *d, const float *mean, const float *std) {
    int64_t row = dt_dataset_row(d);
    for (int64_t i = 0; i < d->n; i++) {
        float *x = d->x + i * row;
        for (int64_t j = 0; j < row; j++)
            x[j] = (x[j] - mean[j]) / std[j];
    }
}

/* A new dataset holding d's samples idx[0..count), with copies of the class names. */
static dt_err dataset_subset(const dt_dataset *d, const int64_t *idx, int64_t count,
                             dt_dataset **out) {
    dt_dataset *s = NULL;
    dt_err err = dt__dataset_alloc(&s, count, &d->sample, d->labels != NULL, d->target_dim);
    if (err) return err;
    s->num_classes = d->num_classes;
    dt_dataset_gather(d, idx, count, s->x, s->labels, s->targets);
    if (d->class_names) {
        /* calloc: a partly filled table is freed correctly by dt_dataset_free */
        s->class_names = calloc((size_t)d->num_classes, sizeof(char *));
        if (!s->class_names) goto nomem;
        for (int i = 0; i < d->num_classes; i++)
            if (!(s->class_names[i] = strdup(d->class_names[i]))) goto nomem;
    }
    *out = s;
    return DT_OK;
nomem:
    dt_dataset_free(s);
    return dt_err_set(DT_ERR_NOMEM, "cannot copy %d class names", d->num_classes);
}

dt_err dt_dataset_split(const dt_dataset *d, double eval_fraction, uint64_t seed,
                        dt_dataset **train, dt_dataset **eval) {
    if (!(eval_fraction > 0.0 && eval_fraction < 1.0))
        return dt_err_set(DT_ERR_ARG, "split: eval fraction %g is not in (0, 1)", eval_fraction);
    int64_t n_eval = llround((double)d->n * eval_fraction);
    int64_t n_train = d->n - n_eval;
    if (n_eval < 1 || n_train < 1)
        return dt_err_set(DT_ERR_ARG,
                          "split: an eval fraction of %g of %lld samples leaves %lld for "
                          "training and %lld for evaluation; both need at least one",
                          eval_fraction, (long long)d->n, (long long)n_train, (long long)n_eval);
    int64_t *idx = malloc((size_t)d->n * sizeof *idx);
    if (!idx)
        return dt_err_set(DT_ERR_NOMEM, "split: cannot allocate %lld indices", (long long)d->n);
    for (int64_t i = 0; i < d->n; i++)
        idx[i] = i;
    dt_rng r;
    dt_rng_seed2(&r, seed, DT_SPLIT_STREAM);
    dt_rng_shuffle(&r, idx, d->n);

    dt_dataset *tr = NULL, *ev = NULL;
    dt_err err = dataset_subset(d, idx, n_train, &tr);
    if (err) goto end;
    err = dataset_subset(d, idx + n_train, n_eval, &ev);
    if (err) goto end;
    *train = tr;
    *eval = ev;
    tr = ev = NULL;
end:
    dt_dataset_free(ev);
    dt_dataset_free(tr);
    free(idx);
    return err;
}

void dt_epoch_order(int64_t *idx, int64_t n, uint64_t seed, int64_t epoch, int shuffle) {
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    if (!shuffle) return;
    dt_rng r;
    dt_rng_seed2(&r, seed, (uint64_t)epoch);
    dt_rng_shuffle(&r, idx, n);
}

/* Rows are scattered over a dataset far larger than the caches, and one row is too short for
 * the hardware prefetcher to ramp up: the rows GATHER_AHEAD places on are asked for while this
 * one is copied. */
#define GATHER_AHEAD 4

static void prefetch_row(const float *p, int64_t n) {
    for (const char *b = (const char *)p, *e = (const char *)(p + n); b < e; b += 64)
        __builtin_prefetch(b, 0, 3);
}

void dt_dataset_gather(const dt_dataset *d, const int64_t *idx, int64_t count, float *x_out,
                       int32_t *labels_out, float *targets_out) {
    int64_t row = dt_dataset_row(d);
    int64_t td = d->target_dim;
    for (int64_t i = 0; i < count && i < GATHER_AHEAD; i++)
        if (idx[i] >= 0 && idx[i] < d->n) prefetch_row(d->x + idx[i] * row, row);
    for (int64_t i = 0; i < count; i++) {
        int64_t k = idx[i];
        DT_ASSERT(k >= 0 && k < d->n);
        if (i + GATHER_AHEAD < count && idx[i + GATHER_AHEAD] >= 0 && idx[i + GATHER_AHEAD] < d->n)
            prefetch_row(d->x + idx[i + GATHER_AHEAD] * row, row);
        memcpy(x_out + i * row, d->x + k * row, (size_t)row * sizeof(float));
        if (labels_out && d->labels) labels_out[i] = d->labels[k];
        if (targets_out && d->targets)
            memcpy(targets_out + i * td, d->targets + k * td, (size_t)td * sizeof(float));
    }
}

struct gather_job {
    const dt_dataset *d;
    const int64_t *idx;
    int64_t count;
    float *x;
    int32_t *labels;
    float *targets;
};

static void gather_kernel(void *arg, int ith, int nth) {
    const struct gather_job *j = arg;
    int64_t lo, hi;
    dt_split(j->count, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    int64_t row = dt_dataset_row(j->d), td = j->d->target_dim;
    dt_dataset_gather(j->d, j->idx + lo, hi - lo, j->x + lo * row,
                      j->labels ? j->labels + lo : NULL, j->targets ? j->targets + lo * td : NULL);
}

void dt_dataset_gather_on(dt_pool *pool, const dt_dataset *d, const int64_t *idx, int64_t count,
                          float *x_out, int32_t *labels_out, float *targets_out) {
    struct gather_job j = {d, idx, count, x_out, labels_out, targets_out};
    dt_pool_run(pool, gather_kernel, &j);
}
