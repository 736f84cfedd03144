/* onnx_test.c - the protobuf writer's encodings and the ONNX exporter's graph (decoded here by
 * a few lines of wire-format reader; by `protoc --decode_raw` too when it is installed). The
 * numbers are checked against ONNX Runtime in tests/onnx_export_test.sh. */
#include <stdint.h>

#include "dtrain/export.h"
#include "core/pb-impl.h"
#include "testing/dt_test.h"

/* b holds exactly the n bytes of want */
static int bytes_are(const dt__pb_buf *b, const char *want, size_t n) {
    return b->len == n && !memcmp(b->data, want, n);
}
#define BYTES_ARE(b, lit) bytes_are((b), (lit), sizeof(lit) - 1)

static void test_pb_varint(void) {
    dt__pb_buf b;
    dt__pb_init(&b);
    static const struct {
        uint64_t v;
        const char *enc;
        size_t n;
    } cases[] = {
        {0, "\x00", 1},
        {1, "\x01", 1},
        {127, "\x7f", 1},
        {128, "\x80\x01", 2},
        {150, "\x96\x01", 2},
        {300, "\xac\x02", 2},
        {16383, "\xff\x7f", 2},
        {16384, "\x80\x80\x01", 3},
        {UINT32_MAX, "\xff\xff\xff\xff\x0f", 5},
        {UINT64_MAX, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt__pb_clear(&b);
        dt__pb_varint(&b, cases[i].v);
        if (!bytes_are(&b, cases[i].enc, cases[i].n))
            DT_FAIL("varint %llu: %zu bytes, want %zu", (unsigned long long)cases[i].v, b.len,
                    cases[i].n);
        DT_CHECK(dt__pb_varint_size(cases[i].v) == cases[i].n);
    }
    DT_CHECK_OK(dt__pb_status(&b));
    dt__pb_free(&b);
    dt__pb_free(&b); /* a freed buffer frees again as a no-op */
}

static void test_pb_fields(void) {
    dt__pb_buf b;
    dt__pb_init(&b);
    /* keys: field 1 varint = 0x08; field 16 needs a two-byte key */
    dt__pb_uint(&b, 1, 150);
    DT_CHECK(BYTES_ARE(&b, "\x08\x96\x01"));
    dt__pb_clear(&b);
    dt__pb_key(&b, 16, DT__PB_LEN);
    DT_CHECK(BYTES_ARE(&b, "\x82\x01"));
    /* negative int64 (Softmax axis = -1): two's complement, always 10 bytes */
    dt__pb_clear(&b);
    dt__pb_int(&b, 3, -1);
    DT_CHECK(BYTES_ARE(&b, "\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"));
    dt__pb_clear(&b);
    dt__pb_int(&b, 3, INT64_MIN);
    DT_CHECK(BYTES_ARE(&b, "\x18\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"));
    dt__pb_clear(&b);
    dt__pb_int(&b, 3, -2);
    DT_CHECK(b.len == 11 && b.data[1] == 0xfe);
    dt__pb_clear(&b);
    dt__pb_bool(&b, 2, 7);
    DT_CHECK(BYTES_ARE(&b, "\x10\x01"));
    /* fixed widths, little-endian */
    dt__pb_clear(&b);
    dt__pb_float(&b, 2, 1.0f);
    DT_CHECK(BYTES_ARE(&b, "\x15\x00\x00\x80\x3f"));
    dt__pb_clear(&b);
    dt__pb_double(&b, 1, 1.5);
    DT_CHECK(BYTES_ARE(&b, "\x09\x00\x00\x00\x00\x00\x00\xf8\x3f"));
    dt__pb_clear(&b);
    dt__pb_fixed32(&b, 5, 0x01020304u);
    DT_CHECK(BYTES_ARE(&b, "\x2d\x04\x03\x02\x01"));
    /* length-delimited */
    dt__pb_clear(&b);
    dt__pb_string(&b, 2, "hi");
    dt__pb_string(&b, 4, NULL);
    dt__pb_bytes(&b, 5, "\x00\x01", 2);
    DT_CHECK(BYTES_ARE(&b, "\x12\x02hi\x22\x00\x2a\x02\x00\x01"));
    dt__pb_clear(&b);
    dt__pb_float_array(&b, 9, (const float[]){1.0f, -2.0f}, 2);
    DT_CHECK(BYTES_ARE(&b, "\x4a\x08\x00\x00\x80\x3f\x00\x00\x00\xc0"));
    dt__pb_free(&b);
}

static void test_pb_nested(void) {
    dt__pb_buf inner, mid, outer;
    dt__pb_init(&inner);
    dt__pb_init(&mid);
    dt__pb_init(&outer);
    dt__pb_uint(&inner, 1, 150);     /* 08 96 01 */
    dt__pb_message(&mid, 3, &inner); /* 1a 03 <inner> */
    dt__pb_message(&outer, 7, &mid); /* 3a 05 <mid> */
    DT_CHECK(BYTES_ARE(&outer, "\x3a\x05\x1a\x03\x08\x96\x01"));
    /* a child of 200 bytes: the length takes two bytes */
    char big[197];
    memset(big, 'x', sizeof big);
    dt__pb_clear(&inner);
    dt__pb_bytes(&inner, 1, big, sizeof big); /* 0a c5 01 + 197 = 200 bytes */
    DT_CHECK(inner.len == 200);
    dt__pb_clear(&outer);
    dt__pb_message(&outer, 2, &inner);
    DT_CHECK(outer.len == 203 && !memcmp(outer.data, "\x12\xc8\x01\x0a\xc5\x01xx", 8));
    /* an empty message is a key and a zero length */
    dt__pb_clear(&inner);
    dt__pb_clear(&outer);
    dt__pb_message(&outer, 1, &inner);
    DT_CHECK(BYTES_ARE(&outer, "\x0a\x00"));
    /* a buffer that grows a lot keeps every byte */
    dt__pb_clear(&outer);
    for (int i = 0; i < 100000; i++)
        dt__pb_uint(&outer, 1, (uint64_t)i);
    size_t want = 0;
    for (int i = 0; i < 100000; i++)
        want += 1 + dt__pb_varint_size((uint64_t)i);
    DT_CHECK(outer.len == want);
    DT_CHECK_OK(dt__pb_status(&outer));
    dt__pb_free(&inner);
    dt__pb_free(&mid);
    dt__pb_free(&outer);
}

static void test_pb_sticky_error(void) {
    dt__pb_buf child, parent;
    dt__pb_init(&child);
    dt__pb_init(&parent);
    dt__pb_uint(&child, 1, 1);
    child.failed = 1; /* as after a failed realloc */
    size_t len = child.len;
    dt__pb_uint(&child, 2, 2);
    DT_CHECK(child.len == len); /* appends after a failure do nothing */
    DT_CHECK_ERR(dt__pb_status(&child), DT_ERR_NOMEM, "out of memory");
    dt__pb_message(&parent, 1, &child);
    DT_CHECK_ERR(dt__pb_status(&parent), DT_ERR_NOMEM, "out of memory");
    dt__pb_free(&child);
    dt__pb_free(&parent);
}

/* ---- a minimal wire-format reader, to look inside what the exporter wrote ---- */

typedef struct span {
    const uint8_t *p;
    size_t n;
} span;

typedef struct field {
    uint32_t num;
    int wire;
    uint64_t v; /* varint, fixed */
    span s;     /* length-delimited */
} field;

static int read_varint(span *s, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (!s->n) return 0;
        uint8_t c = *s->p++;
        s->n--;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (c < 0x80) return 1;
    }
    return 0;
}

/* The next field of s; 0 at the end (or on malformed input, with *bad set). */
static int next_field(span *s, field *f, int *bad) {
    uint64_t key;
    memset(f, 0, sizeof *f);
    if (!s->n) return 0;
    if (!read_varint(s, &key)) goto bad;
    f->num = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    switch (f->wire) {
    case 0:
        if (!read_varint(s, &f->v)) goto bad;
        return 1;
    case 1:
    case 5: {
        size_t w = f->wire == 1 ? 8 : 4;
        if (s->n < w) goto bad;
        f->v = 0;
        for (size_t i = 0; i < w; i++)
            f->v |= (uint64_t)s->p[i] << (8 * i);
        s->p += w;
        s->n -= w;
        return 1;
    }
    case 2:
        if (!read_varint(s, &f->v) || f->v > s->n) goto bad;
        f->s = (span){s->p, (size_t)f->v};
        s->p += f->v;
        s->n -= (size_t)f->v;
        return 1;
    }
bad:
    *bad = 1;
    return 0;
}

/* The k-th (0-based) field `num` of s. */
static int get_field(span s, uint32_t num, int k, field *out) {
    int bad = 0;
    field f = {0};
    while (next_field(&s, &f, &bad))
        if (f.num == num && k-- == 0) {
            *out = f;
            return 1;
        }
    return 0;
}

static int count_fields(span s, uint32_t num) {
    int bad = 0, n = 0;
    field f;
    while (next_field(&s, &f, &bad))
        n += f.num == num;
    return bad ? -1 : n;
}

static int span_is(span s, const char *str) {
    return s.n == strlen(str) && !memcmp(s.p, str, s.n);
}

/* The whole file as a span (malloc'd; the caller frees the pointer). */
static uint8_t *slurp(const char *path, span *s) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    *s = (span){buf, n};
    return buf;
}

/* The node of the graph whose output is `out`, or 0. */
static int find_node(span graph, const char *out, span *node) {
    field f, o;
    for (int k = 0; get_field(graph, 1, k, &f); k++)
        if (get_field(f.s, 2, 0, &o) && span_is(o.s, out)) {
            *node = f.s;
            return 1;
        }
    return 0;
}

/* The ints of attribute `name` of a node into v (at most 8); their count, or -1. */
static int node_ints(span node, const char *name, int64_t *v) {
    field a, f;
    for (int k = 0; get_field(node, 5, k, &a); k++) {
        if (!get_field(a.s, 1, 0, &f) || !span_is(f.s, name)) continue;
        if (get_field(a.s, 3, 0, &f)) { /* i */
            v[0] = (int64_t)f.v;
            return 1;
        }
        int n = 0;
        while (n < 8 && get_field(a.s, 8, n, &f))
            v[n++] = (int64_t)f.v;
        return n;
    }
    return -1;
}

/* The initializer `name`: its dims and raw float data. */
static int find_init(span graph, const char *name, int64_t *dims, int *ndims, span *raw) {
    field t, f;
    for (int k = 0; get_field(graph, 5, k, &t); k++) {
        if (!get_field(t.s, 8, 0, &f) || !span_is(f.s, name)) continue;
        *ndims = 0;
        while (*ndims < 4 && get_field(t.s, 1, *ndims, &f))
            dims[(*ndims)++] = (int64_t)f.v;
        if (!get_field(t.s, 2, 0, &f) || f.v != 1) return 0; /* FLOAT */
        if (!get_field(t.s, 9, 0, &f)) return 0;
        *raw = f.s;
        return 1;
    }
    return 0;
}

static float raw_float(span raw, size_t i) {
    uint32_t u = (uint32_t)raw.p[4 * i] | (uint32_t)raw.p[4 * i + 1] << 8 |
                 (uint32_t)raw.p[4 * i + 2] << 16 | (uint32_t)raw.p[4 * i + 3] << 24;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* input [9, 11, 3] -> conv 3x2 stride 2 same, no bias, tanh -> softmax -> maxpool 2x3 stride
 * (1, 2) same -> flatten -> dense 4 (softmax cross-entropy) */
static dt_model *odd_model(void) {
    dt_layer_conf layers[] = {
        {.kind = DT_LAYER_CONV2D,
         .name = "c1",
         .filters = 6,
         .kernel = {3, 2},
         .stride = {2, 2},
         .padding = DT_PADDING_SAME,
         .no_bias = 1,
         .activation = DT_ACT_TANH},
        {.kind = DT_LAYER_ACTIVATION, .name = "sm", .activation = DT_ACT_SOFTMAX},
        {.kind = DT_LAYER_MAXPOOL2D,
         .name = "p1",
         .kernel = {2, 3},
         .stride = {1, 2},
         .padding = DT_PADDING_SAME},
        {.kind = DT_LAYER_DROPOUT, .name = "drop", .rate = 0.5f},
        {.kind = DT_LAYER_FLATTEN, .name = "flat"},
        {.kind = DT_LAYER_DENSE, .name = "out", .units = 4},
    };
    dt_shape in = dt_shape_make(3, (int64_t[]){9, 11, 3});
    dt_model *m = NULL;
    if (dt_model_init(&m, &in, layers, (int)(sizeof layers / sizeof layers[0]),
                      DT_LOSS_SOFTMAX_CROSS_ENTROPY, 2, NULL) != DT_OK) {
        fprintf(stderr, "odd_model: %s\n", dt_errmsg());
        abort();
    }
    dt_model_init_params(m, 11);
    return m;
}

static void test_onnx_graph(void) {
    dt_model *m = odd_model();
    char path[512];
    snprintf(path, sizeof path, "%s/odd.onnx", dt_test_tmpdir());
    int64_t n = 9 * 11 * 3;
    float *scale = malloc((size_t)n * sizeof *scale), *shift = calloc((size_t)n, sizeof *shift);
    for (int64_t i = 0; i < n; i++)
        scale[i] = 1.0f / 255.0f;
    dt_input_norm norm = {.n = n, .scale = scale, .shift = shift};
    DT_CHECK(!strcmp(dt_export_output_name(m), "probabilities"));
    DT_CHECK_OK(dt_onnx_write(path, m, &norm, "a test"));
    span file, graph, node;
    uint8_t *buf = slurp(path, &file);
    DT_CHECK(buf != NULL);
    field f;
    DT_CHECK(get_field(file, 1, 0, &f) && f.v == 8);               /* ir_version */
    DT_CHECK(get_field(file, 2, 0, &f) && span_is(f.s, "dtrain")); /* producer */
    DT_CHECK(get_field(file, 3, 0, &f) && span_is(f.s, DT_VERSION));
    DT_CHECK(get_field(file, 6, 0, &f) && span_is(f.s, "a test")); /* doc_string */
    DT_CHECK(get_field(file, 8, 0, &f));                           /* opset_import */
    field v;
    DT_CHECK(get_field(f.s, 2, 0, &v) && v.v == 17);
    DT_CHECK(!get_field(f.s, 1, 0, &v) || v.s.n == 0); /* the default domain */
    DT_CHECK(get_field(file, 7, 0, &f));
    graph = f.s;

    /* nodes, in order: the scale as one scalar Mul (no Add: shift is 0), then NCHW for the
     * conv, a channel softmax on axis 1, the pool, back to NHWC for flatten, the final
     * softmax; no node for dropout */
    static const char *const ops[] = {"Mul",     "Transpose", "Conv",    "Tanh", "Softmax",
                                      "MaxPool", "Transpose", "Flatten", "Gemm", "Softmax"};
    int nn = (int)(sizeof ops / sizeof ops[0]);
    DT_CHECK(count_fields(graph, 1) == nn);
    for (int i = 0; i < nn; i++) {
        DT_CHECK(get_field(graph, 1, i, &f) && get_field(f.s, 4, 0, &v));
        if (!span_is(v.s, ops[i]))
            DT_FAIL("node %d: op %.*s, want %s", i, (int)v.s.n, v.s.p, ops[i]);
    }
    int64_t a[8];
    DT_CHECK(find_node(graph, "sm/Softmax", &node) && node_ints(node, "axis", a) == 1 && a[0] == 1);
    DT_CHECK(find_node(graph, "probabilities", &node) && node_ints(node, "axis", a) == 1 &&
             a[0] == -1);
    /* conv pads: height 9, k 3, s 2 -> out 5, total 2: 1 and 1; width 11, k 2, s 2 -> out 6,
     * total 1: 0 before, 1 after */
    DT_CHECK(find_node(graph, "c1/Conv", &node));
    DT_CHECK(node_ints(node, "pads", a) == 4 && a[0] == 1 && a[1] == 0 && a[2] == 1 && a[3] == 1);
    DT_CHECK(node_ints(node, "strides", a) == 2 && a[0] == 2 && a[1] == 2);
    DT_CHECK(node_ints(node, "kernel_shape", a) == 2 && a[0] == 3 && a[1] == 2);
    DT_CHECK(count_fields(node, 1) == 2); /* no bias */
    /* pool over 5x6: k (2, 3), s (1, 2) -> out 5x3, totals 1 and 1: after */
    DT_CHECK(find_node(graph, "p1/MaxPool", &node));
    DT_CHECK(node_ints(node, "pads", a) == 4 && a[0] == 0 && a[1] == 0 && a[2] == 1 && a[3] == 1);
    /* the conv kernel, HWIO [3, 2, 3, 6] in dtrain, is OIHW [6, 3, 3, 2] */
    int64_t dims[4];
    int nd;
    span raw;
    DT_CHECK(find_init(graph, "c1/kernel", dims, &nd, &raw));
    DT_CHECK(nd == 4 && dims[0] == 6 && dims[1] == 3 && dims[2] == 3 && dims[3] == 2);
    DT_CHECK(raw.n == 6 * 3 * 3 * 2 * 4);
    const dt_param *k = dt_model_find_param(m, "c1/kernel");
    for (int o = 0; o < 6; o++)
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 3; y++)
                for (int x = 0; x < 2; x++)
                    DT_CHECK(raw_float(raw, (size_t)(((o * 3 + c) * 3 + y) * 2 + x)) ==
                             k->value.data[((y * 2 + x) * 3 + c) * 6 + o]);
    /* the scale is one scalar; the dense kernel is [in, out] as dtrain has it */
    DT_CHECK(find_init(graph, "/normalize/scale", dims, &nd, &raw) && nd == 0 && raw.n == 4);
    DT_CHECK(raw_float(raw, 0) == 1.0f / 255.0f);
    DT_CHECK(!find_init(graph, "/normalize/shift", dims, &nd, &raw));
    DT_CHECK(find_init(graph, "out/kernel", dims, &nd, &raw) && nd == 2 && dims[0] == 5 * 3 * 6 &&
             dims[1] == 4);
    /* input [batch, 9, 11, 3], output [batch, 4]; initializers are not inputs */
    DT_CHECK(count_fields(graph, 11) == 1 && count_fields(graph, 12) == 1);
    DT_CHECK(get_field(graph, 11, 0, &f) && get_field(f.s, 1, 0, &v) && span_is(v.s, "input"));
    field t, sh, d;
    DT_CHECK(get_field(f.s, 2, 0, &t) && get_field(t.s, 1, 0, &t) && get_field(t.s, 1, 0, &v) &&
             v.v == 1 && get_field(t.s, 2, 0, &sh));
    DT_CHECK(count_fields(sh.s, 1) == 4);
    DT_CHECK(get_field(sh.s, 1, 0, &d) && get_field(d.s, 2, 0, &v) && span_is(v.s, "batch"));
    DT_CHECK(get_field(sh.s, 1, 3, &d) && get_field(d.s, 1, 0, &v) && v.v == 3);
    DT_CHECK(get_field(graph, 12, 0, &f) && get_field(f.s, 1, 0, &v) &&
             span_is(v.s, "probabilities"));

    /* an independent decoder agrees that the file is well-formed, when there is one */
    if (system("command -v protoc >/dev/null 2>&1") == 0) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "protoc --decode_raw <'%s' | grep -q '2: \"dtrain\"'", path);
        DT_CHECK(system(cmd) == 0);
    }
    free(buf);
    free(scale);
    free(shift);
    dt_model_free(m);
}

/* An MSE model whose output is an image: "output", transposed back to NHWC at the end; an
 * identity normalization adds no node. */
static void test_onnx_image_output(void) {
    dt_layer_conf layers[] = {
        {.kind = DT_LAYER_CONV2D, .name = "c", .filters = 2, .kernel = {1, 1}},
        {.kind = DT_LAYER_ACTIVATION, .name = "a", .activation = DT_ACT_RELU},
    };
    dt_shape in = dt_shape_make(3, (int64_t[]){4, 5, 3});
    dt_model *m = NULL;
    DT_CHECK_OK(dt_model_init(&m, &in, layers, 2, DT_LOSS_MSE, 1, NULL));
    dt_model_init_params(m, 1);
    float ones[60], zeros[60] = {0};
    for (int i = 0; i < 60; i++)
        ones[i] = 1.0f;
    dt_input_norm norm = {.n = 60, .scale = ones, .shift = zeros};
    char path[512];
    snprintf(path, sizeof path, "%s/image.onnx", dt_test_tmpdir());
    DT_CHECK(!strcmp(dt_export_output_name(m), "output"));
    DT_CHECK_OK(dt_onnx_write(path, m, &norm, NULL));
    span file;
    uint8_t *buf = slurp(path, &file);
    field f, v, t, sh;
    DT_CHECK(!get_field(file, 6, 0, &f)); /* no doc_string */
    DT_CHECK(get_field(file, 7, 0, &f));
    span graph = f.s, node;
    DT_CHECK(count_fields(graph, 1) == 4); /* Transpose, Conv, Relu, Transpose */
    DT_CHECK(find_node(graph, "output", &node) && get_field(node, 4, 0, &v) &&
             span_is(v.s, "Transpose"));
    int64_t a[8];
    DT_CHECK(node_ints(node, "perm", a) == 4 && a[0] == 0 && a[1] == 2 && a[2] == 3 && a[3] == 1);
    DT_CHECK(get_field(graph, 12, 0, &f) && get_field(f.s, 2, 0, &t) && get_field(t.s, 1, 0, &t) &&
             get_field(t.s, 2, 0, &sh) && count_fields(sh.s, 1) == 4);
    free(buf);
    dt_model_free(m);
}

static void test_onnx_errors(void) {
    dt_model *m = odd_model();
    float one = 1.0f;
    dt_input_norm norm = {.n = 1, .scale = &one, .shift = &one};
    char path[512];
    snprintf(path, sizeof path, "%s/bad.onnx", dt_test_tmpdir());
    DT_CHECK_ERR(dt_onnx_write(path, m, &norm, NULL), DT_ERR_ARG, "bad.onnx");
    DT_CHECK_ERR(dt_onnx_write(path, m, &norm, NULL), DT_ERR_ARG, "model's input has 297");
    DT_CHECK(access(path, F_OK) != 0); /* nothing written */
    snprintf(path, sizeof path, "%s/no/such/dir/m.onnx", dt_test_tmpdir());
    DT_CHECK_ERR(dt_onnx_write(path, m, NULL, NULL), DT_ERR_IO, "no/such/dir/m.onnx");
    /* without a normalization the graph starts at the conv */
    snprintf(path, sizeof path, "%s/plain.onnx", dt_test_tmpdir());
    DT_CHECK_OK(dt_onnx_write(path, m, NULL, NULL));
    span file, node;
    uint8_t *buf = slurp(path, &file);
    field f, v;
    DT_CHECK(get_field(file, 7, 0, &f) && find_node(f.s, "c1/to_nchw", &node));
    DT_CHECK(get_field(node, 1, 0, &v) && span_is(v.s, "input"));
    free(buf);
    dt_model_free(m);
}

DT_TEST_MAIN(DT_T(test_pb_varint), DT_T(test_pb_fields), DT_T(test_pb_nested),
             DT_T(test_pb_sticky_error), DT_T(test_onnx_graph), DT_T(test_onnx_image_output),
             DT_T(test_onnx_errors))
