/*
 * tensor.c - shapes and the bump arena.
 *
 * Design: the arena is one aligned block; allocation moves an offset. Nothing inside is
 * freed individually, so a training step costs no malloc at all once the model is built.
 */
#include "dtrain/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert-impl.h"

struct dt_arena {
    unsigned char *base;
    size_t used;
    size_t capacity;
};

int64_t dt_shape_numel(const dt_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->dim[i];
    return n;
}

int64_t dt_shape_row(const dt_shape *s) {
    if (s->ndim == 0 || s->dim[0] == 0) return 0;
    return dt_shape_numel(s) / s->dim[0];
}

dt_shape dt_shape_make(int ndim, const int64_t *dims) {
    dt_shape s = {0};
    DT_ASSERT(ndim >= 0 && ndim <= DT_MAX_DIMS);
    s.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        s.dim[i] = dims[i];
    return s;
}

int dt_shape_eq(const dt_shape *a, const dt_shape *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i]) return 0;
    return 1;
}

char *dt_shape_str(const dt_shape *s, char *buf, size_t len) {
    size_t off = 0;
    off += (size_t)snprintf(buf + off, len - off, "[");
    for (int i = 0; i < s->ndim && off < len; i++)
        off +=
            (size_t)snprintf(buf + off, len - off, "%s%lld", i ? ", " : "", (long long)s->dim[i]);
    if (off < len) snprintf(buf + off, len - off, "]");
    return buf;
}

size_t dt_arena_size_of(size_t bytes) {
    return (bytes + DT_ALIGN - 1) & ~(size_t)(DT_ALIGN - 1);
}

dt_err dt_arena_init(dt_arena **out, size_t capacity) {
    dt_arena *a = calloc(1, sizeof *a);
    if (!a) return dt_err_set(DT_ERR_NOMEM, "arena: out of memory");
    capacity = dt_arena_size_of(capacity ? capacity : DT_ALIGN);
    a->base = aligned_alloc(DT_ALIGN, capacity);
    if (!a->base) {
        free(a);
        return dt_err_set(DT_ERR_NOMEM, "arena: cannot allocate %zu bytes", capacity);
    }
    a->capacity = capacity;
    *out = a;
    return DT_OK;
}

void dt_arena_free(dt_arena *a) {
    if (!a) return;
    free(a->base);
    free(a);
}

void *dt_arena_alloc(dt_arena *a, size_t bytes) {
    size_t need = dt_arena_size_of(bytes);
    if (need > a->capacity - a->used) return NULL;
    void *p = a->base + a->used;
    a->used += need;
    return p;
}

dt_err dt_arena_tensor(dt_arena *a, dt_tensor *t, int ndim, const int64_t *dims) {
    t->shape = dt_shape_make(ndim, dims);
    size_t bytes = (size_t)dt_shape_numel(&t->shape) * sizeof(float);
    t->data = dt_arena_alloc(a, bytes);
    if (!t->data)
        return dt_err_set(DT_ERR_NOMEM, "arena: %zu bytes requested, %zu of %zu free", bytes,
                          a->capacity - a->used, a->capacity);
    memset(t->data, 0, bytes);
    return DT_OK;
}

size_t dt_arena_mark(const dt_arena *a) {
    return a->used;
}

void dt_arena_rewind(dt_arena *a, size_t mark) {
    DT_ASSERT(mark <= a->used);
    a->used = mark;
}

void dt_arena_reset(dt_arena *a) {
    a->used = 0;
}

size_t dt_arena_used(const dt_arena *a) {
    return a->used;
}

size_t dt_arena_capacity(const dt_arena *a) {
    return a->capacity;
}
