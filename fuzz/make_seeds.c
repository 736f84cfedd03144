/*
 * make_seeds.c - writes the binary seeds of fuzz/corpus/ with the project's own writers:
 * PS frames (dt__frame_encode, dt__ps_meta_encode: the client's HELLO, INIT, PUSH, PULL,
 * SAVE to fuzz_ps_frames' PS; pushes in float32, in bfloat16 and of an unknown dtype), ring
 * frames (rank 1's HELLO and DATA to fuzz_ring_frames' rank 0: 8 floats in 16-byte chunks),
 * safetensors (dt_safetensors_write), IDX files in the layout fuzz_idx reads (2-byte images length,
 * images, labels) and CSV files (fuzz_csv: an options byte, then the file). Run once by hand; its
 * output is committed.
 *
 *   make_seeds CORPUS_DIR
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dtrain/checkpoint.h"
#include "ps/wire-impl.h"
#include "ring/ring-impl.h"

static const char *root;

static void put(const char *harness, const char *name, const void *data, size_t len) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, harness);
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        perror(p);
        exit(1);
    }
    snprintf(p, sizeof p, "%s/%s/%s", root, harness, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(p);
        exit(1);
    }
}

/* ---- PS frames ---- */
typedef struct buf {
    uint8_t b[4096];
    size_t n;
} buf;

static void frame(buf *o, int type, int64_t arg, const void *payload, size_t len) {
    dt__frame_encode(o->b + o->n, type, arg, len);
    o->n += DT__FRAME_HDR;
    memcpy(o->b + o->n, payload, len);
    o->n += len;
}

static void hello(buf *o, const char *token, const char *replica) {
    uint8_t p[256];
    size_t tl = strlen(token), rl = strlen(replica);
    dt__put32(p, 0);
    dt__put32(p + 4, 1);
    dt__put32(p + 8, (uint32_t)tl);
    memcpy(p + 12, token, tl);
    dt__put32(p + 12 + tl, (uint32_t)rl);
    memcpy(p + 16 + tl, replica, rl);
    frame(o, DT__PS_HELLO, 0, p, 16 + tl + rl);
}

/* the PS's variables: fc/kernel [2,3], fc/bias [3]; the data in dtype (the header's arg:
 * DT__PS_F32 or DT__PS_BF16; another number is sent with float32 data) */
static void tensors_as(buf *o, int type, int64_t dtype, float v) {
    uint8_t p[1024];
    size_t n = 0;
    dt__put32(p, 2);
    n += 4;
    const char *names[2] = {"fc/kernel", "fc/bias"};
    dt_shape shapes[2] = {dt_shape_make(2, (int64_t[]){2, 3}), dt_shape_make(1, (int64_t[]){3})};
    for (int t = 0; t < 2; t++) {
        n += dt__ps_meta_encode(p + n, names[t], &shapes[t]);
        for (int64_t i = 0; i < dt_shape_numel(&shapes[t]); i++) {
            if (dtype == DT__PS_BF16) {
                dt__put16(p + n, dt__bf16_from_f32(v + (float)i));
                n += 2;
            } else {
                memcpy(p + n, &(float){v + (float)i}, 4);
                n += 4;
            }
        }
    }
    frame(o, type, dtype, p, n);
}

static void tensors(buf *o, int type, float v) {
    tensors_as(o, type, DT__PS_F32, v);
}

static void ps_seeds(void) {
    buf o = {.n = 0};
    hello(&o, "t", "worker-0");
    put("fuzz_ps_frames", "hello", o.b, o.n);
    tensors(&o, DT__PS_INIT, 0.5f);
    frame(&o, DT__PS_PULL, 0, NULL, 0);
    tensors(&o, DT__PS_PUSH, 0.01f);
    tensors(&o, DT__PS_PUSH_PULL, 0.02f);
    frame(&o, DT__PS_SAVE, 0, NULL, 0);
    put("fuzz_ps_frames", "session", o.b, o.n);
    o.n = 0;
    hello(&o, "wrong", "worker-1");
    put("fuzz_ps_frames", "wrong-token", o.b, o.n);
    o.n = 0;
    hello(&o, "t", "worker-2");
    frame(&o, DT__PS_SHM_ATTACH, 0, "dt-ps-x", 7);
    frame(&o, DT__PS_SHM_PULL, 0, NULL, 0);
    put("fuzz_ps_frames", "shm-declined", o.b, o.n);
    /* gradients in bfloat16 (docs/WIRE.md, "Wire dtype"), then a push of an unknown dtype */
    o.n = 0;
    hello(&o, "t", "worker-3");
    tensors(&o, DT__PS_INIT, 0.5f);
    tensors_as(&o, DT__PS_PUSH, DT__PS_BF16, 0.01f);
    tensors_as(&o, DT__PS_PUSH_PULL, DT__PS_BF16, 0.02f);
    put("fuzz_ps_frames", "session-bf16", o.b, o.n);
    o.n = 0;
    hello(&o, "t", "worker-4");
    tensors_as(&o, DT__PS_PUSH, 2, 0.01f);
    put("fuzz_ps_frames", "unknown-dtype", o.b, o.n);
}

/* ---- ring frames: HELLO (rank, size, token, wire dtype), DATA (sequence number, 16-byte
 * chunks) ---- */
static void ring_hello_as(buf *o, int64_t generation, uint32_t rank, const char *token,
                          uint32_t dtype) {
    uint8_t p[64];
    size_t tl = strlen(token);
    dt__put32(p, rank);
    dt__put32(p + 4, 2);
    dt__put32(p + 8, (uint32_t)tl);
    memcpy(p + 12, token, tl);
    dt__put32(p + 12 + tl, dtype);
    frame(o, DT__RING_HELLO, generation, p, DT__RING_HELLO_MIN + tl + DT__RING_HELLO_OWN);
}
static void ring_hello(buf *o, int64_t generation, uint32_t rank, const char *token) {
    ring_hello_as(o, generation, rank, token, DT_RING_WIRE_F32);
}

static void ring_seeds(void) {
    buf o = {.n = 0};
    ring_hello(&o, 1, 1, "t");
    put("fuzz_ring_frames", "hello", o.b, o.n);
    float v[4] = {0.5f, -1, 2, 1e3f};
    for (int seq = 0; seq < 2; seq++)
        frame(&o, DT__RING_DATA, seq, v, sizeof v);
    put("fuzz_ring_frames", "allreduce", o.b, o.n);
    o.n = 0;
    ring_hello(&o, 2, 1, "t");
    put("fuzz_ring_frames", "wrong-generation", o.b, o.n);
    o.n = 0;
    ring_hello(&o, 1, 1, "t");
    frame(&o, DT__RING_DATA, 1, v, sizeof v);
    put("fuzz_ring_frames", "wrong-sequence", o.b, o.n);
    o.n = 0;
    ring_hello_as(&o, 1, 1, "t", DT_RING_WIRE_BF16); /* rank 0 is float32: refused for good */
    put("fuzz_ring_frames", "wrong-dtype", o.b, o.n);
}

/* ---- safetensors ---- */
static void st_seeds(const char *tmp) {
    float k[6] = {1, 2, 3, 4, 5, 6}, b[3] = {0.5f, -1, 2};
    dt_tensor tk = {.shape = dt_shape_make(2, (int64_t[]){2, 3}), .data = k};
    dt_tensor tb = {.shape = dt_shape_make(1, (int64_t[]){3}), .data = b};
    dt_st_tensor ts[2] = {{"fc/kernel", &tk}, {"fc/bias", &tb}};
    dt_st_meta meta[2] = {{"step", "42"}, {"format", "dtrain"}};
    char path[1024];
    snprintf(path, sizeof path, "%s/seed.safetensors", tmp);
    if (dt_safetensors_write(path, ts, 2, meta, 2) != DT_OK) {
        fprintf(stderr, "%s\n", dt_errmsg());
        exit(1);
    }
    FILE *f = fopen(path, "rb");
    static uint8_t data[8192];
    size_t n = f ? fread(data, 1, sizeof data, f) : 0;
    if (f) fclose(f);
    remove(path);
    put("fuzz_safetensors", "model", data, n);
}

/* ---- IDX: images [count, rows, cols] u8 (magic 0x803), labels [count] u8 (0x801) ---- */
static void idx_seeds(void) {
    uint8_t o[2 + 16 + 5 * 12 + 8 + 5];
    size_t il = 16 + 5 * 12;
    o[0] = (uint8_t)il;
    o[1] = (uint8_t)(il >> 8);
    uint8_t *img = o + 2, *lab = o + 2 + il;
    const uint32_t ih[4] = {0x803, 5, 3, 4}, lh[2] = {0x801, 5};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            img[4 * i + j] = (uint8_t)(ih[i] >> (24 - 8 * j)); /* big-endian */
    for (int i = 0; i < 60; i++)
        img[16 + i] = (uint8_t)(i * 4);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            lab[4 * i + j] = (uint8_t)(lh[i] >> (24 - 8 * j));
    for (int i = 0; i < 5; i++)
        lab[8 + i] = (uint8_t)(i % 3);
    put("fuzz_idx", "mnist-like", o, sizeof o);
}

static void csv_seeds(void) {
    static const char named[] = "\x01" "sepal,petal,class\n5.1,1.4,setosa\n7.0,4.7,versicolor\n"
                                "\n6.3,6.0,virginica\n";
    static const char numeric[] = "\x00" "0.5,1.5,0\n1,2,1\n-3e2,4.25,2\n";
    static const char regression[] = "\x02" "1,2,3.5\n4,5,-0.25\n";
    static const char semicolon[] = "\x0c" "3;1.5;2\n4;0.5;7\n"; /* ';', label column 0 */
    put("fuzz_csv", "named-classes", named, sizeof named - 1);
    put("fuzz_csv", "integer-classes", numeric, sizeof numeric - 1);
    put("fuzz_csv", "regression", regression, sizeof regression - 1);
    put("fuzz_csv", "semicolon", semicolon, sizeof semicolon - 1);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
        return 2;
    }
    root = argv[1];
    ps_seeds();
    ring_seeds();
    st_seeds(root);
    idx_seeds();
    csv_seeds();
    return 0;
}
