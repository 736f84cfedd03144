/*
 * export_forward.c - dtrain's own outputs for an exported model, to compare with what ONNX
 * Runtime makes of the export's model.onnx (tests/onnx_export_test.sh).
 *
 *   export_forward VERSION_DIR INPUTS N X_OUT Y_OUT [--onnx FILE [--mutate]]
 *
 * Loads the export version VERSION_DIR (dt_export_load: spec, weights, input contract) and
 * takes N raw inputs from INPUTS: an IDX images file (gzip or not), whose first N images'
 * pixel values 0..255 are used, or "synthetic:SEED", N samples of the model's input shape
 * from dt_dataset_synthetic (features uniform in [0, 1)). Writes
 *
 *   X_OUT  the N raw inputs, little-endian float32, [N, <input shape>] (NHWC)
 *   Y_OUT  dtrain's outputs for them, little-endian float32, [N, <output shape>]: the inputs
 *          normalized by the export's scale and shift, then dt_model_predict
 *
 * and prints one JSON line: {"n": N, "input": [...], "output": [...], "output_name": "..."}.
 *
 * --onnx FILE writes the loaded model as ONNX to FILE (dt_onnx_write, with the export's
 * normalization). With --mutate, the model written there first has its first kernel
 * corrupted the way a layout bug would (a conv2d kernel flipped in space, a dense kernel's
 * input rows reversed), after Y_OUT was computed: a negative control that the comparison must
 * catch.
 *
 * Exit status: 0 done, 1 an error (message on stderr), 2 bad arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "dtrain/data.h"
#include "dtrain/export.h"

static const char usage[] =
    "usage: export_forward VERSION_DIR IDX_IMAGES|synthetic:SEED N X_OUT Y_OUT "
    "[--onnx FILE [--mutate]]\n";

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The first n images of an IDX ubyte file (magic 0x00000803) as floats 0..255 into x; each
 * image must hold `row` pixels. */
static int read_idx(const char *path, int64_t n, int64_t row, float *x) {
    gzFile f = gzopen(path, "rb"); /* reads uncompressed files as they are */
    if (!f) {
        fprintf(stderr, "export_forward: cannot open %s\n", path);
        return -1;
    }
    unsigned char hdr[16];
    int rc = -1;
    unsigned char *buf = NULL;
    if (gzread(f, hdr, sizeof hdr) != (int)sizeof hdr || be32(hdr) != 0x803) {
        fprintf(stderr, "export_forward: %s: not an IDX file of ubyte images\n", path);
        goto out;
    }
    int64_t count = be32(hdr + 4), pixels = (int64_t)be32(hdr + 8) * be32(hdr + 12);
    if (count < n || pixels != row) {
        fprintf(stderr, "export_forward: %s: %lld images of %lld pixels; want %lld of %lld\n", path,
                (long long)count, (long long)pixels, (long long)n, (long long)row);
        goto out;
    }
    size_t bytes = (size_t)(n * row);
    if (!(buf = malloc(bytes)) || gzread(f, buf, (unsigned)bytes) != (int)bytes) {
        fprintf(stderr, "export_forward: %s: cannot read %zu bytes of images\n", path, bytes);
        goto out;
    }
    for (size_t i = 0; i < bytes; i++)
        x[i] = (float)buf[i];
    rc = 0;
out:
    free(buf);
    gzclose(f);
    return rc;
}

static int read_synthetic(const char *seed, int64_t n, const dt_shape *shape, float *x) {
    dt_dataset *d = NULL;
    if (dt_dataset_synthetic(&d, n, shape, 2, strtoull(seed, NULL, 10))) {
        fprintf(stderr, "export_forward: %s\n", dt_errmsg());
        return -1;
    }
    memcpy(x, d->x, (size_t)(n * dt_shape_numel(shape)) * sizeof *x);
    dt_dataset_free(d);
    return 0;
}

static int write_floats(const char *path, const float *v, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(v, sizeof *v, n, f) == n; /* x86-64 and arm64: little-endian */
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "export_forward: cannot write %s\n", path);
    return ok ? 0 : -1;
}

/* Corrupt the first kernel as a layout bug would (see the top of the file). */
static void mutate(dt_model *m) {
    for (int i = 0; i < dt_model_num_params(m); i++) {
        dt_param *p = dt_model_param(m, i);
        const char *slash = strrchr(p->name, '/');
        if (!slash || strcmp(slash + 1, "kernel") != 0) continue;
        const dt_shape *s = &p->value.shape;
        int64_t taps, width; /* rows to reverse, floats each */
        if (s->ndim == 4) {  /* HWIO: reversing the kh*kw taps flips the kernel in space */
            taps = s->dim[0] * s->dim[1];
            width = s->dim[2] * s->dim[3];
        } else { /* [in, out]: reverse the input rows */
            taps = s->dim[0];
            width = s->dim[1];
        }
        float *w = p->value.data;
        for (int64_t a = 0, b = taps - 1; a < b; a++, b--)
            for (int64_t j = 0; j < width; j++) {
                float t = w[a * width + j];
                w[a * width + j] = w[b * width + j];
                w[b * width + j] = t;
            }
        return;
    }
}

static void print_shape(const dt_shape *s) {
    printf("[");
    for (int i = 0; i < s->ndim; i++)
        printf("%s%lld", i ? ", " : "", (long long)s->dim[i]);
    printf("]");
}

int main(int argc, char **argv) {
    const char *onnx = NULL;
    int do_mutate = 0;
    if (argc < 6) {
        fputs(usage, stderr);
        return 2;
    }
    for (int i = 6; i < argc; i++) {
        if (!strcmp(argv[i], "--onnx") && i + 1 < argc) {
            onnx = argv[++i];
        } else if (!strcmp(argv[i], "--mutate")) {
            do_mutate = 1;
        } else {
            fputs(usage, stderr);
            return 2;
        }
    }
    const char *dir = argv[1], *inputs = argv[2], *x_out = argv[4], *y_out = argv[5];
    int64_t n = strtoll(argv[3], NULL, 10);
    if (n < 1 || n > 1000000 || (do_mutate && !onnx)) {
        fputs(usage, stderr);
        return 2;
    }
    dt_exported *e = NULL;
    float *raw = NULL, *x = NULL, *y = NULL;
    int rc = 1;
    if (dt_export_load(dir, n < 64 ? n : 64, NULL, &e)) {
        fprintf(stderr, "export_forward: %s\n", dt_errmsg());
        goto out;
    }
    const dt_shape *in = dt_model_input_shape(e->model), *os = dt_model_output_shape(e->model);
    int64_t row = dt_shape_numel(in), k = dt_shape_numel(os);
    if (e->norm.n != row) {
        fprintf(stderr, "export_forward: %s: normalization of %lld features, input of %lld\n", dir,
                (long long)e->norm.n, (long long)row);
        goto out;
    }
    raw = malloc((size_t)(n * row) * sizeof *raw);
    x = malloc((size_t)(n * row) * sizeof *x);
    y = malloc((size_t)(n * k) * sizeof *y);
    if (!raw || !x || !y) {
        fprintf(stderr, "export_forward: out of memory\n");
        goto out;
    }
    int got = !strncmp(inputs, "synthetic:", 10) ? read_synthetic(inputs + 10, n, in, raw)
                                                 : read_idx(inputs, n, row, raw);
    if (got) goto out;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < row; j++)
            x[i * row + j] = raw[i * row + j] * e->norm.scale[j] + e->norm.shift[j];
    if (dt_model_predict(e->model, x, n, y)) {
        fprintf(stderr, "export_forward: %s\n", dt_errmsg());
        goto out;
    }
    if (write_floats(x_out, raw, (size_t)(n * row)) || write_floats(y_out, y, (size_t)(n * k)))
        goto out;
    if (onnx) {
        if (do_mutate) mutate(e->model);
        if (dt_onnx_write(onnx, e->model, &e->norm, do_mutate ? "mutated" : NULL)) {
            fprintf(stderr, "export_forward: %s\n", dt_errmsg());
            goto out;
        }
    }
    printf("{\"n\": %lld, \"input\": ", (long long)n);
    print_shape(in);
    printf(", \"output\": ");
    print_shape(os);
    printf(", \"output_name\": \"%s\"}\n", dt_export_output_name(e->model));
    rc = 0;
out:
    free(y);
    free(x);
    free(raw);
    dt_exported_free(e);
    return rc;
}
