/*
 * tensor.h - float32 tensors and the arena they live in.
 *
 * A dt_tensor is a view: a pointer to row-major float32 data plus a shape of up to
 * DT_MAX_DIMS dimensions. It never owns its data. Data comes from a dt_arena, a bump
 * allocator sized once (a measure pass over the model decides the size) and released as a
 * whole; tensors are never freed one at a time.
 *
 * Batches are NHWC: shape {N, H, W, C}; dense activations are {N, F}.
 *
 * Usage:
 *     dt_arena *a;
 *     dt_arena_init(&a, bytes);                     // one allocation
 *     dt_tensor t;
 *     dt_arena_tensor(a, &t, 2, (int64_t[]){64, 784});
 *     ...
 *     dt_arena_reset(a);                            // all tensors gone at once
 *     dt_arena_free(a);
 */
#ifndef DTRAIN_TENSOR_H
#define DTRAIN_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_MAX_DIMS 4
/* Every arena allocation is aligned to this many bytes (one cache line, AVX-512 friendly). */
#define DT_ALIGN 64

typedef struct dt_shape {
    int ndim;
    int64_t dim[DT_MAX_DIMS];
} dt_shape;

typedef struct dt_tensor {
    float *data;
    dt_shape shape;
} dt_tensor;

/* Number of elements of a shape (1 for ndim 0). */
int64_t dt_shape_numel(const dt_shape *s);
/* Elements per item of a batch: numel / dim[0]. */
int64_t dt_shape_row(const dt_shape *s);
/* A shape from a dimension list. */
dt_shape dt_shape_make(int ndim, const int64_t *dims);
int dt_shape_eq(const dt_shape *a, const dt_shape *b);
/* Writes "[64, 28, 28, 1]" into buf; returns buf. */
char *dt_shape_str(const dt_shape *s, char *buf, size_t len);

static inline int64_t dt_tensor_numel(const dt_tensor *t) {
    return dt_shape_numel(&t->shape);
}

/* ---- arena ---- */

typedef struct dt_arena dt_arena;

/* Allocate an arena of capacity bytes. Caller frees with dt_arena_free. */
dt_err dt_arena_init(dt_arena **out, size_t capacity);
/* Free the arena and everything in it; NULL is a no-op. */
void dt_arena_free(dt_arena *a);
/* Bump-allocate bytes (rounded up to DT_ALIGN). Returns NULL when the arena is full: the
 * measure pass was wrong, which is a programmer error that callers assert on. */
void *dt_arena_alloc(dt_arena *a, size_t bytes);
/* Allocate zeroed float storage for a tensor of the given shape. */
dt_err dt_arena_tensor(dt_arena *a, dt_tensor *t, int ndim, const int64_t *dims);
/* Release everything allocated since the mark / since creation. */
size_t dt_arena_mark(const dt_arena *a);
void dt_arena_rewind(dt_arena *a, size_t mark);
void dt_arena_reset(dt_arena *a);
size_t dt_arena_used(const dt_arena *a);
size_t dt_arena_capacity(const dt_arena *a);
/* Bytes that an allocation of `bytes` takes in an arena (for measure passes). */
size_t dt_arena_size_of(size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
