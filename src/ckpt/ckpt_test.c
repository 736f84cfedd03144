/* ckpt_test.c - the safetensors reader and writer (checkpoint_test.c covers checkpoints). */
#include <dirent.h>
#include <sys/stat.h>

#include "dtrain/checkpoint.h"
#include "testing/dt_test.h"

/* A safetensors file from a header string and raw data: 8-byte little-endian length, the
 * header padded with spaces to `pad` bytes (0 = no padding), then the data. */
static const char *st_file(const char *name, const char *header, size_t pad, const void *data,
                           size_t datalen) {
    size_t hlen = strlen(header);
    size_t n = pad > hlen ? pad : hlen;
    unsigned char *buf = malloc(8 + n + datalen);
    if (!buf) abort();
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, hlen);
    memset(buf + 8 + hlen, ' ', n - hlen);
    if (datalen) memcpy(buf + 8 + n, data, datalen);
    const char *path = dt_test_write_file(name, buf, 8 + n + datalen);
    free(buf);
    return path;
}

static int count_dir_entries(const char *dir, const char *containing) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += strstr(e->d_name, containing) != NULL;
    closedir(d);
    return n;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

/* ---- round trip ---- */

static void test_roundtrip_with_metadata(void) {
    float a[6] = {1, -2, 3.5f, 4, 5e-20f, -0.0f};
    float b[4] = {NAN, INFINITY, 7, 8};
    float s[1] = {42};
    float q[4] = {9, 10, 11, 12};
    dt_tensor ta = {a, dt_shape_make(2, (int64_t[]){2, 3})};
    dt_tensor tb = {b, dt_shape_make(1, (int64_t[]){4})};
    dt_tensor ts = {s, dt_shape_make(0, NULL)};
    dt_tensor te = {NULL, dt_shape_make(3, (int64_t[]){2, 0, 3})};
    dt_tensor tq = {q, dt_shape_make(4, (int64_t[]){1, 2, 2, 1})};
    dt_st_tensor ts_list[] = {{"dense_1/kernel", &ta}, {"dense_1/bias", &tb}, {"scalar", &ts},
                              {"empty", &te},          {"conv/kernel", &tq}};
    dt_st_meta meta[] = {{"format", "dtrain-checkpoint"}, {"step", "17"}, {"unicode", "é∑"}};
    char path[512];
    snprintf(path, sizeof path, "%s/roundtrip.safetensors", dt_test_tmpdir());
    DT_CHECK_OK(dt_safetensors_write(path, ts_list, 5, meta, 3));

    /* the layout: length, header padded with spaces to a multiple of 8, then 15 floats */
    FILE *f = fopen(path, "rb");
    DT_CHECK(f);
    unsigned char len8[8];
    DT_CHECK(fread(len8, 1, 8, f) == 8);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)len8[i] << (8 * i);
    char *hdr = calloc(1, n + 1);
    DT_CHECK(hdr && fread(hdr, 1, n, f) == n);
    fclose(f);
    DT_CHECK(n % 8 == 0);
    DT_CHECK(file_size(path) == (long)(8 + n + 15 * 4));
    static const char head[] = "{\"__metadata__\":{\"format\":\"dtrain-checkpoint\",";
    DT_CHECK(!strncmp(hdr, head, sizeof head - 1));
    DT_CHECK(strstr(hdr, "\"dense_1/kernel\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                         "\"data_offsets\":[0,24]}"));
    DT_CHECK(strstr(hdr, "\"empty\":{\"dtype\":\"F32\",\"shape\":[2,0,3],"
                         "\"data_offsets\":[44,44]}"));
    DT_CHECK(strstr(hdr, "\"dense_1/kernel\"") < strstr(hdr, "\"dense_1/bias\""));
    size_t hl = strlen(hdr);
    DT_CHECK(hl <= n && hl + 8 > n && hdr[n - 1] != '\0');
    free(hdr);

    dt_safetensors *st = NULL;
    DT_CHECK_OK(dt_safetensors_read(&st, path));
    DT_CHECK(dt_safetensors_count(st) == 5);
    for (int i = 0; i < 5; i++) DT_CHECK(!strcmp(dt_safetensors_name(st, i), ts_list[i].name));
    for (int i = 0; i < 5; i++) {
        dt_tensor t;
        DT_CHECK_OK(dt_safetensors_find(st, ts_list[i].name, &t));
        DT_CHECK(dt_shape_eq(&t.shape, &ts_list[i].t->shape));
        int64_t ne = dt_tensor_numel(&t);
        DT_CHECK(((uintptr_t)t.data % 4) == 0);
        DT_CHECK(ne == 0 || !memcmp(t.data, ts_list[i].t->data, (size_t)ne * 4));
    }
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "format"), "dtrain-checkpoint"));
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "step"), "17"));
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "unicode"), "é∑"));
    DT_CHECK(dt_safetensors_meta(st, "nope") == NULL);
    dt_tensor t;
    DT_CHECK_ERR(dt_safetensors_find(st, "missing/kernel", &t), DT_ERR_NOTFOUND,
                 "roundtrip.safetensors: no tensor missing/kernel");
    dt_safetensors_free(st);
    dt_safetensors_free(NULL);

    /* no tensors, no metadata */
    DT_CHECK_OK(dt_safetensors_write(path, NULL, 0, NULL, 0));
    DT_CHECK_OK(dt_safetensors_read(&st, path));
    DT_CHECK(dt_safetensors_count(st) == 0 && !dt_safetensors_meta(st, "format"));
    dt_safetensors_free(st);
    DT_CHECK(file_size(path) == 16); /* "{}" padded to 8 */
}

/* A file as Python's safetensors writes it (header from safetensors.torch.save_file for
 * {"weight": torch.zeros(2, 3), "bias": torch.zeros(2)} with metadata {"format": "pt"}):
 * keys not in data order, metadata first, space padding. */
static void test_reads_foreign_file(void) {
    const float data[8] = {1, 2, 3, 4, 5, 6, -1, -2};
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
                      "\"weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    size_t pad = (strlen(hdr) + 7) / 8 * 8;
    float reordered[8];
    memcpy(reordered, data, sizeof data);
    for (int variant = 0; variant < 3; variant++) {
        /* 0: padded; 1: unpadded (data misaligned in the file); 2: pretty-printed */
        const char *path;
        if (variant == 2)
            path = st_file("foreign2.safetensors",
                           "{\n  \"weight\": {\"data_offsets\": [0, 24], \"shape\": [2, 3],\n"
                           "    \"dtype\": \"F32\"},\n  \"bias\": {\"dtype\": \"F32\", "
                           "\"shape\": [2], \"data_offsets\": [24, 32]}\n}\n",
                           0, reordered, sizeof reordered);
        else
            path = st_file(variant ? "foreign1.safetensors" : "foreign0.safetensors", hdr,
                           variant ? 0 : pad, data, sizeof data);
        dt_safetensors *st = NULL;
        DT_CHECK_OK(dt_safetensors_read(&st, path));
        DT_CHECK(dt_safetensors_count(st) == 2);
        DT_CHECK(!strcmp(dt_safetensors_name(st, 0), variant == 2 ? "weight" : "bias"));
        dt_tensor w, b;
        DT_CHECK_OK(dt_safetensors_find(st, "weight", &w));
        DT_CHECK_OK(dt_safetensors_find(st, "bias", &b));
        DT_CHECK(w.shape.ndim == 2 && w.shape.dim[0] == 2 && w.shape.dim[1] == 3);
        DT_CHECK(b.shape.ndim == 1 && b.shape.dim[0] == 2);
        DT_CHECK(((uintptr_t)w.data % 4) == 0 && ((uintptr_t)b.data % 4) == 0);
        for (int i = 0; i < 6; i++) DT_CHECK(w.data[i] == data[i]);
        DT_CHECK(b.data[0] == -1 && b.data[1] == -2);
        const char *fmt = dt_safetensors_meta(st, "format");
        DT_CHECK(variant == 2 ? fmt == NULL : !strcmp(fmt, "pt"));
        dt_safetensors_free(st);
    }
}

/* ---- malformed files ---- */

#define W_OK_HDR(offs) "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":" offs "}}"

static void test_header_length_checks(void) {
    unsigned char tiny[5] = {1, 2, 3, 4, 5};
    const char *p = dt_test_write_file("tiny.safetensors", tiny, sizeof tiny);
    dt_safetensors *st = NULL;
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT, "tiny.safetensors: 5 bytes");
    p = dt_test_write_file("empty.safetensors", "", 0);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT, "empty.safetensors: 0 bytes");

    /* a length beyond the file */
    unsigned char beyond[24] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    p = dt_test_write_file("beyond.safetensors", beyond, sizeof beyond);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "beyond.safetensors: header length 100 runs past the end of the file");
    /* a length that would overflow size arithmetic */
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    p = dt_test_write_file("huge.safetensors", huge, sizeof huge);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT, "huge.safetensors: header length");
    /* beyond the 100 MB limit (checked before the file size) */
    unsigned char big[16] = {0, 0, 0, 0x80, 0, 0, 0, 0, '{', '}'};
    p = dt_test_write_file("big.safetensors", big, sizeof big);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT, "exceeds the limit");
    DT_CHECK(st == NULL);
}

static void test_bad_json(void) {
    dt_safetensors *st = NULL;
    const char *p = st_file("badjson.safetensors", "{\"w\":\n {\"dtype\": \"F32\",, }}", 0,
                            NULL, 0);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "badjson.safetensors: header JSON line 2 column");
    p = st_file("array.safetensors", "[1, 2]", 8, NULL, 0);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "array.safetensors: header JSON is not an object");
    p = st_file("dup.safetensors",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                0, (float[]){1, 2}, 8);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT, "duplicate");
    p = st_file("meta.safetensors", "{\"__metadata__\":{\"step\":3}}", 0, NULL, 0);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "meta.safetensors: __metadata__.step is not a string");
    p = st_file("meta2.safetensors", "{\"__metadata__\":[\"a\"]}", 0, NULL, 0);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "meta2.safetensors: __metadata__ is not an object");
}

static void test_bad_entries(void) {
    float d[6] = {0};
    dt_safetensors *st = NULL;
    const char *p;
    p = st_file("f16.safetensors", "{\"w\":{\"dtype\":\"F16\",\"shape\":[6],\"data_offsets\":[0,12]}}",
                0, d, 12);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "f16.safetensors: tensor w: dtype F16 is not supported (only F32)");
    p = st_file("mismatch.safetensors", W_OK_HDR("[0,20]"), 0, d, 20);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "mismatch.safetensors: tensor w: data_offsets [0, 20] hold 20 bytes, but its "
                 "shape needs 24");
    p = st_file("negdim.safetensors",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2,3],\"data_offsets\":[0,24]}}", 0, d, 24);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "negdim.safetensors: tensor w: shape[0] is not a non-negative integer");
    p = st_file("fdim.safetensors",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0,3],\"data_offsets\":[0,24]}}", 0, d, 24);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT, "tensor w: shape[0]");
    p = st_file("5d.safetensors",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3,1],\"data_offsets\":[0,24]}}", 0, d,
                24);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "5d.safetensors: tensor w: shape must be a list of at most 4 integers");
    p = st_file("ovf.safetensors",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
                "\"data_offsets\":[0,24]}}",
                0, d, 24);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT, "tensor w: data_offsets [0, 24]");
    p = st_file("offs.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}",
                0, d, 4);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "offs.safetensors: tensor w: data_offsets must be [begin, end]");
    p = st_file("missing.safetensors", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 0,
                d, 4);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "missing.safetensors: tensor w: missing \"shape\"");
    p = st_file("extra.safetensors",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 0, d, 4);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "extra.safetensors: tensor w: unexpected key \"x\"");
    p = st_file("notobj.safetensors", "{\"w\":[1]}", 0, d, 0);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "notobj.safetensors: tensor w: expected an object");
}

static void test_bad_layout(void) {
    float d[8] = {0};
    dt_safetensors *st = NULL;
    const char *p;
    p = st_file("overlap.safetensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[12,28]}}",
                0, d, 28);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "overlap.safetensors: tensors a and b overlap");
    p = st_file("same.safetensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                0, d, 8);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT, "overlap");
    p = st_file("hole.safetensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                0, d, 20);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "hole.safetensors: tensor b: data section bytes 8..12");
    p = st_file("trailing.safetensors", W_OK_HDR("[0,24]"), 0, d, 32);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "trailing.safetensors: data section has 32 bytes but its tensors cover only 24");
    /* truncated: a good file missing its last bytes */
    p = st_file("truncated.safetensors", W_OK_HDR("[0,24]"), 0, d, 20);
    DT_CHECK_ERR(dt_safetensors_read(&st, p), DT_ERR_FORMAT,
                 "truncated.safetensors: tensor w: data_offsets [0, 24] outside the data "
                 "section (20 bytes; file truncated?)");
    DT_CHECK(st == NULL);
}

static void test_truncated_written_file(void) {
    float a[64];
    for (int i = 0; i < 64; i++) a[i] = (float)i;
    dt_tensor t = {a, dt_shape_make(2, (int64_t[]){8, 8})};
    char path[512];
    snprintf(path, sizeof path, "%s/cut.safetensors", dt_test_tmpdir());
    DT_CHECK_OK(dt_safetensors_write(path, &(dt_st_tensor){"x", &t}, 1, NULL, 0));
    long size = file_size(path);
    dt_safetensors *st = NULL;
    /* every truncation point fails cleanly */
    for (long cut = size - 1; cut >= 0; cut -= 7) {
        DT_CHECK(truncate(path, cut) == 0);
        dt_err err = dt_safetensors_read(&st, path);
        if (err != DT_ERR_FORMAT || !strstr(dt_errmsg(), "cut.safetensors"))
            DT_FAIL("cut at %ld: %s: %s", cut, dt_strerror(err), dt_errmsg());
    }
    DT_CHECK(st == NULL);
}

static void test_nonexistent_file(void) {
    dt_safetensors *st = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/no-such.safetensors", dt_test_tmpdir());
    DT_CHECK_ERR(dt_safetensors_read(&st, path), DT_ERR_IO, "no-such.safetensors: cannot open");
    DT_CHECK_ERR(dt_safetensors_read(&st, dt_test_tmpdir()), DT_ERR_IO, "not a regular file");
}

/* ---- atomic writes ---- */

static void test_atomic_write_replaces_and_leaves_no_temp(void) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/atomic", dt_test_tmpdir());
    DT_CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    float one[3] = {1, 2, 3}, two[5] = {5, 6, 7, 8, 9};
    dt_tensor t1 = {one, dt_shape_make(1, (int64_t[]){3})};
    dt_tensor t2 = {two, dt_shape_make(1, (int64_t[]){5})};
    DT_CHECK_OK(dt_safetensors_write(path, &(dt_st_tensor){"a", &t1}, 1, NULL, 0));
    DT_CHECK_OK(dt_safetensors_write(path, &(dt_st_tensor){"b", &t2}, 1,
                                     &(dt_st_meta){"run", "2"}, 1));
    dt_safetensors *st = NULL;
    DT_CHECK_OK(dt_safetensors_read(&st, path));
    dt_tensor t;
    DT_CHECK(dt_safetensors_count(st) == 1);
    DT_CHECK_OK(dt_safetensors_find(st, "b", &t));
    DT_CHECK(t.shape.dim[0] == 5 && t.data[4] == 9);
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "run"), "2"));
    dt_safetensors_free(st);
    DT_CHECK(count_dir_entries(dir, "tmp") == 0);
    DT_CHECK(count_dir_entries(dir, "model.safetensors") == 1);
    struct stat sb;
    DT_CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0644);

    /* a failed write (bad argument) leaves the old file and no temporary */
    DT_CHECK_ERR(dt_safetensors_write(path,
                                      (dt_st_tensor[]){{"a", &t1}, {"a", &t2}}, 2, NULL, 0),
                 DT_ERR_ARG, "tensor name a is given twice");
    DT_CHECK_OK(dt_safetensors_read(&st, path));
    DT_CHECK_OK(dt_safetensors_find(st, "b", &t));
    dt_safetensors_free(st);
    DT_CHECK(count_dir_entries(dir, "tmp") == 0);

    /* a relative path writes into the current directory */
    char cwd[512];
    DT_CHECK(getcwd(cwd, sizeof cwd));
    DT_CHECK(chdir(dir) == 0);
    dt_err err = dt_safetensors_write("rel.safetensors", &(dt_st_tensor){"a", &t1}, 1, NULL, 0);
    DT_CHECK(chdir(cwd) == 0);
    DT_CHECK_OK(err);
    snprintf(path, sizeof path, "%s/rel.safetensors", dir);
    DT_CHECK(file_size(path) > 0);
    DT_CHECK(count_dir_entries(dir, "tmp") == 0);
}

static void test_write_errors(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/no-such-dir/x.safetensors", dt_test_tmpdir());
    float v[1] = {1};
    dt_tensor t = {v, dt_shape_make(1, (int64_t[]){1})};
    DT_CHECK_ERR(dt_safetensors_write(path, &(dt_st_tensor){"a", &t}, 1, NULL, 0), DT_ERR_IO,
                 path);
    snprintf(path, sizeof path, "%s/args.safetensors", dt_test_tmpdir());
    DT_CHECK_ERR(dt_safetensors_write(path, &(dt_st_tensor){"__metadata__", &t}, 1, NULL, 0),
                 DT_ERR_ARG, "args.safetensors: tensor name __metadata__ is reserved");
    DT_CHECK_ERR(dt_safetensors_write(path, &(dt_st_tensor){"a", &t}, 1,
                                      (dt_st_meta[]){{"k", "1"}, {"k", "2"}}, 2),
                 DT_ERR_ARG, "args.safetensors: metadata key k given twice");
    DT_CHECK_ERR(dt_safetensors_write(path, &(dt_st_tensor){"bad\xff", &t}, 1, NULL, 0),
                 DT_ERR_ARG, "not UTF-8");
    DT_CHECK_ERR(dt_safetensors_write(path, NULL, 0, (dt_st_meta[]){{"k", "\xc3"}}, 1),
                 DT_ERR_ARG, "metadata k");
    DT_CHECK(file_size(path) == -1);
}

DT_TEST_MAIN(DT_T(test_roundtrip_with_metadata), DT_T(test_reads_foreign_file),
             DT_T(test_header_length_checks), DT_T(test_bad_json), DT_T(test_bad_entries),
             DT_T(test_bad_layout), DT_T(test_truncated_written_file),
             DT_T(test_nonexistent_file), DT_T(test_atomic_write_replaces_and_leaves_no_temp),
             DT_T(test_write_errors))
