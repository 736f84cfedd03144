/*
 * conv_bench.c - time the conv2d/maxpool2d layers of the Fashion-MNIST CNN (not a test).
 *
 *     conv_bench [iterations] [col_floats]
 *     DT_BENCH_CPU=1: CPU time, not wall time; DT_BENCH_DIRECT=0: im2col + GEMM only
 *
 * For batches of 64: conv 5x5x32 same + relu on 28x28x1 (the first layer: no dx), maxpool
 * 2, conv 5x5x64 same + relu on 14x14x32, maxpool 2; forward and backward through the ops
 * tables with pools of 1 and 2 threads. Prints the best milliseconds per batch over the
 * iterations (the machine may be shared) and GFLOP/s of the
 * convolutions (2 * M * K * F per GEMM: forward, dW and, except the first layer, dX).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gemm-impl.h"
#include "dtrain/rng.h"
#include "dtrain/threadpool.h"
#include "nn/layer-impl.h"

extern int64_t dt__conv2d_col_floats;
extern int dt__conv2d_direct;

enum { BATCH = 64 };

typedef struct bench_layer {
    const char *label;
    dt__layer l;
    int first; /* no dx */
    float *x, *y, *dy, *dx, *state, *scratch, *pv[2], *pg[2];
    double flops; /* forward + backward, per batch */
} bench_layer;

static float *falloc(int64_t n, dt_rng *r) {
    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64) + 64);
    if (!p) {
        perror("aligned_alloc");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = r ? dt_rng_uniform(r) - 0.5f : 0.0f;
    return p;
}

static void layer_init(bench_layer *b, const char *label, const dt__layer_ops *ops,
                       dt_layer_conf conf, dt_shape in, int first, dt_rng *r) {
    memset(b, 0, sizeof *b);
    b->label = label;
    b->first = first;
    b->l.ops = ops;
    b->l.conf = conf;
    snprintf(b->l.conf.name, sizeof b->l.conf.name, "%s", label);
    b->l.in = in;
    if (ops->setup(&b->l)) {
        fprintf(stderr, "%s: %s\n", label, dt_errmsg());
        exit(1);
    }
    int64_t nin = BATCH * dt_shape_numel(&in), nout = BATCH * dt_shape_numel(&b->l.out);
    b->x = falloc(nin, r);
    b->dx = falloc(nin, NULL);
    b->y = falloc(nout, NULL);
    b->dy = falloc(nout, r);
    b->state = falloc(ops->state_floats ? ops->state_floats(&b->l, BATCH) : 0, NULL);
    /* for the pools of 1 and 2 threads below */
    b->scratch = falloc(ops->scratch_floats ? ops->scratch_floats(&b->l, BATCH, 2) : 0, NULL);
    for (int i = 0; i < b->l.nparams; i++) {
        int64_t n = dt_shape_numel(&b->l.params[i].value.shape);
        b->pv[i] = falloc(n, r);
        b->pg[i] = falloc(n, NULL);
        b->l.params[i].value.data = b->pv[i];
        b->l.params[i].grad.data = b->pg[i];
        b->l.params[i].grad.shape = b->l.params[i].value.shape;
    }
    if (conf.kind == DT_LAYER_CONV2D) {
        double m = (double)BATCH * b->l.out.dim[0] * b->l.out.dim[1];
        double k = (double)conf.kernel[0] * conf.kernel[1] * in.dim[2];
        b->flops = 2.0 * m * k * (double)conf.filters * (first ? 2 : 3);
    }
}

static void layer_free(bench_layer *b) {
    free(b->x);
    free(b->dx);
    free(b->y);
    free(b->dy);
    free(b->state);
    free(b->scratch);
    for (int i = 0; i < 2; i++) {
        free(b->pv[i]);
        free(b->pg[i]);
    }
}

static dt__layer_step layer_step(bench_layer *b, dt_pool *pool) {
    dt__layer_step s = {.pool = pool, .batch = BATCH, .training = 1};
    s.x = (dt_tensor){b->x, {4, {BATCH, b->l.in.dim[0], b->l.in.dim[1], b->l.in.dim[2]}}};
    s.dx = s.x;
    s.dx.data = b->first ? NULL : b->dx;
    s.y = (dt_tensor){b->y, {4, {BATCH, b->l.out.dim[0], b->l.out.dim[1], b->l.out.dim[2]}}};
    s.dy = s.y;
    s.dy.data = b->dy;
    s.state = b->state;
    s.scratch = b->scratch;
    return s;
}

static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 30;
    if (argc > 2) dt__conv2d_col_floats = atoll(argv[2]);
    /* DT_BENCH_CPU=1: process CPU time instead of wall time (on a busy machine, 1 thread) */
    if (getenv("DT_BENCH_CPU")) bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    /* DT_BENCH_DIRECT=0: im2col + GEMM only, no direct kernels */
    if (getenv("DT_BENCH_DIRECT")) dt__conv2d_direct = atoi(getenv("DT_BENCH_DIRECT"));
    if (iters < 1) iters = 1;
    dt_rng r;
    dt_rng_seed(&r, 1);
    dt_layer_conf c1 = {.kind = DT_LAYER_CONV2D,
                        .filters = 32,
                        .kernel = {5, 5},
                        .padding = DT_PADDING_SAME,
                        .activation = DT_ACT_RELU};
    dt_layer_conf c2 = c1;
    c2.filters = 64;
    dt_layer_conf p = {.kind = DT_LAYER_MAXPOOL2D};
    bench_layer layers[4];
    layer_init(&layers[0], "conv1", &dt__conv2d_ops, c1, dt_shape_make(3, (int64_t[]){28, 28, 1}),
               1, &r);
    layer_init(&layers[1], "pool1", &dt__maxpool2d_ops, p,
               dt_shape_make(3, (int64_t[]){28, 28, 32}), 0, &r);
    layer_init(&layers[2], "conv2", &dt__conv2d_ops, c2, dt_shape_make(3, (int64_t[]){14, 14, 32}),
               0, &r);
    layer_init(&layers[3], "pool2", &dt__maxpool2d_ops, p,
               dt_shape_make(3, (int64_t[]){14, 14, 64}), 0, &r);
    printf("%s, batch %d, %d iterations, %s, column buffer %lld floats per thread\n",
           dt__blas_name(), BATCH, iters, dt__conv2d_direct ? "direct kernels" : "GEMM only",
           (long long)dt__conv2d_col_floats);
    for (int i = 0; i < 4; i++) {
        const dt__layer_ops *o = layers[i].l.ops;
        printf("%-5s scratch %.2f MB, state %.2f MB\n", layers[i].label,
               (o->scratch_floats ? o->scratch_floats(&layers[i].l, BATCH, 2) : 0) * 4e-6,
               (o->state_floats ? o->state_floats(&layers[i].l, BATCH) : 0) * 4e-6);
    }
    for (int nth = 1; nth <= 2; nth++) {
        dt_pool *pool = NULL;
        if (dt_pool_init(&pool, nth)) {
            fprintf(stderr, "%s\n", dt_errmsg());
            return 1;
        }
        double total = 0, conv_time = 0, total_flops = 0;
        for (int i = 0; i < 4; i++) {
            bench_layer *b = &layers[i];
            dt__layer_step s = layer_step(b, pool);
            for (int w = 0; w < 3; w++) { /* warm up */
                b->l.ops->forward(&b->l, &s);
                b->l.ops->backward(&b->l, &s);
            }
            /* the fastest of the runs: the machine is shared, slower runs were interrupted */
            double tf = 1e30, tb = 1e30;
            for (int it = 0; it < iters; it++) {
                double t0 = now();
                b->l.ops->forward(&b->l, &s);
                double t1 = now();
                b->l.ops->backward(&b->l, &s);
                double t2 = now();
                tf = t1 - t0 < tf ? t1 - t0 : tf;
                tb = t2 - t1 < tb ? t2 - t1 : tb;
            }
            total += tf + tb;
            total_flops += b->flops;
            if (b->flops > 0) conv_time += tf + tb;
            printf("%d thread%s %-5s forward %7.3f ms  backward %7.3f ms", nth, nth > 1 ? "s" : " ",
                   b->label, tf * 1e3, tb * 1e3);
            if (b->flops > 0) printf("  %6.1f GFLOP/s", b->flops / (tf + tb) * 1e-9);
            printf("\n");
        }
        printf("%d thread%s all   %7.3f ms per batch (%.0f samples/s through these layers), "
               "convs %.1f GFLOP/s\n",
               nth, nth > 1 ? "s" : " ", total * 1e3, BATCH / total,
               total_flops / conv_time * 1e-9);
        dt_pool_free(pool);
    }
    for (int i = 0; i < 4; i++)
        layer_free(&layers[i]);
    return 0;
}
