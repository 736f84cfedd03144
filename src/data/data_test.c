/* data_test.c - IDX and CSV readers (valid and malformed files), the synthetic task,
 * scaling, statistics, splitting, epoch orders, gathering, and the real Fashion-MNIST files
 * when they are installed. */
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <zlib.h>

#include "dtrain/data.h"
#include "dtrain/rng.h"
#include "testing/dt_test.h"

/* ---- fixtures ---- */

/* A path in the test directory (static ring, like dt_test_write_file). */
static const char *tmp_path(const char *name) {
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 512, "%s/%s", dt_test_tmpdir(), name);
    return p;
}

/* Write data gzip-compressed to dir/name with zlib; returns the path. */
static const char *write_gz(const char *name, const void *data, size_t len) {
    const char *p = tmp_path(name);
    gzFile gz = gzopen(p, "wb");
    if (!gz || gzwrite(gz, data, (unsigned)len) != (int)len || gzclose(gz) != Z_OK) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(2);
    }
    return p;
}

/* The whole file as a malloc'd buffer. */
static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) exit(2);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) exit(2);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Pixel j of image i in the fixtures. */
static unsigned char pixel(size_t i, size_t j) {
    return (unsigned char)((i * 37 + j * 11 + (i * j) % 7) & 0xff);
}

/* An IDX images file image: header (magic, count, rows, cols) + count*rows*cols pixels.
 * Returns a malloc'd buffer of *len bytes. */
static unsigned char *idx_images(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols,
                                 size_t *len) {
    size_t px = (size_t)count * rows * cols;
    unsigned char *b = malloc(16 + px);
    put_be32(b, magic);
    put_be32(b + 4, count);
    put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    for (size_t i = 0; i < count; i++)
        for (size_t j = 0; j < (size_t)rows * cols; j++)
            b[16 + i * rows * cols + j] = pixel(i, j);
    *len = 16 + px;
    return b;
}

/* An IDX labels file image with labels[i] = lab[i % nlab]. */
static unsigned char *idx_labels(uint32_t magic, uint32_t count, const unsigned char *lab,
                                 size_t nlab, size_t *len) {
    unsigned char *b = malloc(8 + count);
    put_be32(b, magic);
    put_be32(b + 4, count);
    for (size_t i = 0; i < count; i++)
        b[8 + i] = lab[i % nlab];
    *len = 8 + count;
    return b;
}

static const unsigned char fixture_labels[5] = {0, 3, 1, 3, 2};

/* Writes the 5-image 3x4 fixture (raw or gz) and returns the paths. */
static void write_idx_fixture(int gz, const char **img_path, const char **lab_path) {
    size_t il, ll;
    unsigned char *img = idx_images(0x803, 5, 3, 4, &il);
    unsigned char *lab = idx_labels(0x801, 5, fixture_labels, 5, &ll);
    if (gz) {
        *img_path = write_gz("img.gz", img, il);
        *lab_path = write_gz("lab.gz", lab, ll);
    } else {
        *img_path = dt_test_write_file("img.raw", img, il);
        *lab_path = dt_test_write_file("lab.raw", lab, ll);
    }
    free(img);
    free(lab);
}

/* ---- IDX ---- */

static int check_idx_fixture(const dt_dataset *d) {
    if (d->n != 5 || d->sample.ndim != 3 || d->sample.dim[0] != 3 || d->sample.dim[1] != 4 ||
        d->sample.dim[2] != 1 || dt_dataset_row(d) != 12 || d->num_classes != 4 ||
        d->target_dim != 0 || d->targets || d->class_names)
        return 0;
    for (size_t i = 0; i < 5; i++) {
        if (d->labels[i] != fixture_labels[i]) return 0;
        for (size_t j = 0; j < 12; j++)
            if (d->x[i * 12 + j] != (float)pixel(i, j)) return 0;
    }
    return 1;
}

static void test_idx_raw_roundtrip(void) {
    const char *ip, *lp;
    write_idx_fixture(0, &ip, &lp);
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_idx(&d, ip, lp));
    int ok = check_idx_fixture(d);
    dt_dataset_free(d);
    DT_CHECK(ok);
}

static void test_idx_gz_roundtrip(void) {
    const char *ip, *lp;
    write_idx_fixture(1, &ip, &lp);
    size_t len;
    unsigned char *b = slurp(ip, &len);
    int is_gzip = len > 2 && b[0] == 0x1f && b[1] == 0x8b;
    free(b);
    DT_CHECK(is_gzip);
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_idx(&d, ip, lp));
    int ok = check_idx_fixture(d);
    dt_dataset_free(d);
    DT_CHECK(ok);
    /* mixed: gz images, raw labels */
    const char *rip, *rlp;
    write_idx_fixture(0, &rip, &rlp);
    DT_CHECK_OK(dt_dataset_load_idx(&d, ip, rlp));
    ok = check_idx_fixture(d);
    dt_dataset_free(d);
    DT_CHECK(ok);
}

static void test_idx_missing_file(void) {
    const char *ip, *lp;
    write_idx_fixture(0, &ip, &lp);
    dt_dataset *d = NULL;
    const char *nope = tmp_path("no-such-images.gz");
    DT_CHECK_ERR(dt_dataset_load_idx(&d, nope, lp), DT_ERR_IO, nope);
    DT_CHECK(strstr(dt_errmsg(), "No such file"));
    const char *nolab = tmp_path("no-such-labels");
    DT_CHECK_ERR(dt_dataset_load_idx(&d, ip, nolab), DT_ERR_IO, nolab);
    /* a directory opens but cannot be read */
    DT_CHECK_ERR(dt_dataset_load_idx(&d, dt_test_tmpdir(), lp), DT_ERR_IO, dt_test_tmpdir());
    DT_CHECK(d == NULL);
}

static void test_idx_wrong_magic(void) {
    const char *ip, *lp;
    write_idx_fixture(0, &ip, &lp);
    dt_dataset *d = NULL;
    size_t len;
    unsigned char *b = idx_images(0x12345678, 5, 3, 4, &len);
    const char *bad = dt_test_write_file("magic.idx", b, len);
    free(b);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, bad, lp), DT_ERR_FORMAT,
                 "expected an IDX image file (magic 0x00000803), got 0x12345678: not an IDX file");
    DT_CHECK(strstr(dt_errmsg(), bad));
    /* images and labels swapped: the dimension count is wrong for both roles */
    DT_CHECK_ERR(dt_dataset_load_idx(&d, lp, ip), DT_ERR_FORMAT,
                 "expected an IDX image file (magic 0x00000803), got 0x00000801: 1 dimension "
                 "instead of 3");
    DT_CHECK(strstr(dt_errmsg(), lp));
    DT_CHECK_ERR(dt_dataset_load_idx(&d, ip, ip), DT_ERR_FORMAT,
                 "expected an IDX label file (magic 0x00000801), got 0x00000803: 3 dimensions "
                 "instead of 1");
    /* labels stored as int32 (type 0x0c) are not supported */
    unsigned char lab[8 + 20];
    put_be32(lab, 0x0c01);
    put_be32(lab + 4, 5);
    memset(lab + 8, 0, 20);
    const char *intlab = dt_test_write_file("intlab.idx", lab, sizeof lab);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, ip, intlab), DT_ERR_FORMAT,
                 "got 0x00000c01: element type 0x0c is not unsigned bytes");
    DT_CHECK(strstr(dt_errmsg(), intlab));
    /* float images (type 0x0d) with 3 dims */
    b = idx_images(0x0d03, 5, 3, 4, &len);
    const char *fimg = dt_test_write_file("fimg.idx", b, len);
    free(b);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, fimg, lp), DT_ERR_FORMAT, "element type 0x0d");
    DT_CHECK(d == NULL);
}

static void test_idx_bad_dims(void) {
    const char *ip, *lp;
    write_idx_fixture(0, &ip, &lp);
    dt_dataset *d = NULL;
    size_t len;
    unsigned char *b = idx_images(0x803, 5, 3, 4, &len);
    put_be32(b + 8, 0); /* rows = 0 */
    const char *p = dt_test_write_file("zero-rows.idx", b, len);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, lp), DT_ERR_FORMAT, "IDX header: rows is 0");
    DT_CHECK(strstr(dt_errmsg(), p));
    put_be32(b + 8, 3);
    put_be32(b + 4, 0); /* count = 0 */
    p = dt_test_write_file("zero-count.idx", b, len);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, lp), DT_ERR_FORMAT, "image count is 0");
    /* absurd: 4e9 x 4e9 x 4e9 would overflow 64 bits; must be refused before allocating */
    put_be32(b + 4, 0xffffffffu);
    put_be32(b + 8, 0xffffffffu);
    put_be32(b + 12, 0xffffffffu);
    p = dt_test_write_file("huge.idx", b, len);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, lp), DT_ERR_FORMAT, "exceed the limit");
    DT_CHECK(strstr(dt_errmsg(), p));
    /* just over the 2^34-byte limit: 2^18 images of 256 x 256 + 1 */
    put_be32(b + 4, 1u << 18);
    put_be32(b + 8, 256);
    put_be32(b + 12, 257);
    p = dt_test_write_file("big.idx", b, len);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, lp), DT_ERR_FORMAT,
                 "dimensions 262144 x 256 x 257 exceed the limit of 17179869184 bytes");
    /* within the limit, but more than the file can hold even gzip-compressed (1 GiB from
     * 76 bytes): refused before the 4 GiB of floats are allocated (found by fuzz_idx) */
    put_be32(b + 4, 1u << 14);
    put_be32(b + 8, 256);
    put_be32(b + 12, 256);
    p = dt_test_write_file("promise.idx", b, len);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, lp), DT_ERR_FORMAT,
                 "1073741824 image bytes cannot be in a file of 76 bytes");
    free(b);
    /* a labels file of 0 labels */
    unsigned char lab[8];
    put_be32(lab, 0x801);
    put_be32(lab + 4, 0);
    p = dt_test_write_file("nolabels.idx", lab, 8);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, ip, p), DT_ERR_FORMAT, "label count is 0");
    DT_CHECK(d == NULL);
}

static void test_idx_truncated_header(void) {
    const char *ip, *lp;
    write_idx_fixture(0, &ip, &lp);
    dt_dataset *d = NULL;
    const char *empty = dt_test_write_file("empty.idx", "", 0);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, empty, lp), DT_ERR_FORMAT,
                 "file ends inside the IDX header (0 of 4 magic bytes)");
    DT_CHECK(strstr(dt_errmsg(), empty));
    size_t len;
    unsigned char *b = idx_images(0x803, 5, 3, 4, &len);
    const char *p = dt_test_write_file("short-header.idx", b, 10);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, lp), DT_ERR_FORMAT,
                 "file ends inside the IDX header (6 of 12 dimension bytes)");
    p = write_gz("short-header.idx.gz", b, 10);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, lp), DT_ERR_FORMAT, "inside the IDX header");
    DT_CHECK(strstr(dt_errmsg(), p));
    free(b);
    DT_CHECK(d == NULL);
}

static void test_idx_truncated_raw(void) {
    const char *ip, *lp;
    write_idx_fixture(0, &ip, &lp);
    dt_dataset *d = NULL;
    size_t len;
    unsigned char *b = idx_images(0x803, 5, 3, 4, &len);
    /* 2 whole images and half of the third */
    const char *p = dt_test_write_file("trunc.idx", b, 16 + 2 * 12 + 6);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, lp), DT_ERR_FORMAT,
                 "file ends early: it ends at image 2 of 5");
    DT_CHECK(strstr(dt_errmsg(), p));
    free(b);
    /* labels: 3 of 5 */
    b = idx_labels(0x801, 5, fixture_labels, 5, &len);
    p = dt_test_write_file("trunc-lab.idx", b, 8 + 3);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, ip, p), DT_ERR_FORMAT, "it ends at label 3 of 5");
    DT_CHECK(strstr(dt_errmsg(), p));
    free(b);
    DT_CHECK(d == NULL);
}

/* A gzip fixture large enough to span many deflate blocks: 300 images of 28 x 28. */
static const char *write_big_gz(const char *name, size_t *gzlen, unsigned char **gzbytes) {
    size_t len;
    unsigned char *b = idx_images(0x803, 300, 28, 28, &len);
    /* make the pixels less compressible */
    dt_rng r;
    dt_rng_seed(&r, 7);
    for (size_t i = 16; i < len; i++)
        b[i] = (unsigned char)(b[i] ^ (dt_rng_u64(&r) & 0x0f));
    const char *p = write_gz(name, b, len);
    free(b);
    *gzbytes = slurp(p, gzlen);
    return p;
}

static void test_idx_truncated_gz(void) {
    const char *ip, *lp;
    write_idx_fixture(0, &ip, &lp);
    unsigned char big_lab[8 + 300];
    put_be32(big_lab, 0x801);
    put_be32(big_lab + 4, 300);
    memset(big_lab + 8, 1, 300);
    const char *blp = dt_test_write_file("big-lab.idx", big_lab, sizeof big_lab);
    size_t gzlen;
    unsigned char *gz;
    const char *whole = write_big_gz("big.idx.gz", &gzlen, &gz);
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_idx(&d, whole, blp));
    DT_CHECK(d->n == 300 && d->num_classes == 2);
    dt_dataset_free(d);
    d = NULL;
    /* cut the compressed stream in half: zlib reports an unexpected end of file */
    const char *p = dt_test_write_file("half.idx.gz", gz, gzlen / 2);
    dt_err_clear();
    dt_err e = dt_dataset_load_idx(&d, p, blp);
    free(gz);
    DT_CHECK(e == DT_ERR_FORMAT);
    DT_CHECK(strstr(dt_errmsg(), p));
    DT_CHECK(strstr(dt_errmsg(), "file ends early: it ends at image "));
    DT_CHECK(strstr(dt_errmsg(), " of 300 (the gzip stream ends early)"));
    /* the image where it ends lies inside the file, not at 0 or 300 */
    int at = -1;
    const char *m = strstr(dt_errmsg(), "at image ");
    DT_CHECK(m && sscanf(m, "at image %d", &at) == 1);
    DT_CHECK(at > 0 && at < 300);
    DT_CHECK(d == NULL);
}

static void test_idx_corrupt_gz(void) {
    unsigned char big_lab[8 + 300];
    put_be32(big_lab, 0x801);
    put_be32(big_lab + 4, 300);
    memset(big_lab + 8, 1, 300);
    const char *blp = dt_test_write_file("big-lab2.idx", big_lab, sizeof big_lab);
    size_t gzlen;
    unsigned char *gz;
    write_big_gz("big2.idx.gz", &gzlen, &gz);
    dt_dataset *d = NULL;
    /* a wrong CRC in the gzip trailer: only noticed at the end of the data */
    gz[gzlen - 8] ^= 0xff;
    const char *p = dt_test_write_file("badcrc.idx.gz", gz, gzlen);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, blp), DT_ERR_FORMAT,
                 "corrupt gzip data in images 0 to 299 of 300: incorrect data check");
    DT_CHECK(strstr(dt_errmsg(), p));
    gz[gzlen - 8] ^= 0xff;
    /* garbage in the middle of the deflate stream: it may even decode, but the CRC fails */
    memset(gz + gzlen / 2, 0x00, 64);
    p = dt_test_write_file("garbage.idx.gz", gz, gzlen);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, blp), DT_ERR_FORMAT, "corrupt gzip data");
    DT_CHECK(strstr(dt_errmsg(), p));
    free(gz);
    /* an invalid deflate block after image 100: a full flush there starts a new block on a
     * byte boundary, whose header byte becomes 0xff (BTYPE 11, reserved) */
    size_t len;
    unsigned char *img = idx_images(0x803, 300, 28, 28, &len);
    const char *fp = tmp_path("flushed.idx.gz");
    gzFile w = gzopen(fp, "wb");
    size_t split = 16 + 100 * 784;
    int wrote =
        w && gzwrite(w, img, (unsigned)split) == (int)split && gzflush(w, Z_FULL_FLUSH) == Z_OK;
    struct stat st;
    wrote = wrote && stat(fp, &st) == 0;
    wrote = wrote && gzwrite(w, img + split, (unsigned)(len - split)) == (int)(len - split);
    wrote = gzclose(w) == Z_OK && wrote;
    free(img);
    DT_CHECK(wrote);
    gz = slurp(fp, &gzlen);
    gz[st.st_size] = 0xff;
    p = dt_test_write_file("badblock2.idx.gz", gz, gzlen);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, blp), DT_ERR_FORMAT,
                 "corrupt gzip data in images 0 to 299 of 300: invalid block type");
    DT_CHECK(strstr(dt_errmsg(), p));
    /* the first deflate block header (after zlib's 10-byte gzip header) made invalid:
     * BFINAL 1, BTYPE 11 (reserved) */
    gz[10] = 0xff;
    p = dt_test_write_file("badblock.idx.gz", gz, gzlen);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, blp), DT_ERR_FORMAT,
                 "corrupt gzip data in the header: invalid block type");
    DT_CHECK(strstr(dt_errmsg(), p));
    free(gz);
    DT_CHECK(d == NULL);
}

static void test_idx_trailing_bytes(void) {
    const char *ip, *lp;
    write_idx_fixture(0, &ip, &lp);
    dt_dataset *d = NULL;
    size_t len;
    unsigned char *b = idx_images(0x803, 5, 3, 4, &len);
    b = realloc(b, len + 3);
    memset(b + len, 0, 3);
    const char *p = dt_test_write_file("long.idx", b, len + 3);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, lp), DT_ERR_FORMAT,
                 "trailing data: the file is longer than its header says (5 images of 12 bytes)");
    DT_CHECK(strstr(dt_errmsg(), p));
    p = write_gz("long.idx.gz", b, len + 1);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, p, lp), DT_ERR_FORMAT, "trailing data");
    DT_CHECK(strstr(dt_errmsg(), p));
    free(b);
    b = idx_labels(0x801, 6, fixture_labels, 5, &len);
    put_be32(b + 4, 5); /* says 5, holds 6 */
    p = write_gz("long-lab.idx.gz", b, len);
    DT_CHECK_ERR(dt_dataset_load_idx(&d, ip, p), DT_ERR_FORMAT, "(5 labels of 1 bytes)");
    DT_CHECK(strstr(dt_errmsg(), p));
    free(b);
    DT_CHECK(d == NULL);
}

static void test_idx_count_mismatch(void) {
    const char *ip, *lp;
    write_idx_fixture(0, &ip, &lp);
    size_t len;
    unsigned char *b = idx_labels(0x801, 4, fixture_labels, 5, &len);
    const char *p = dt_test_write_file("four.idx", b, len);
    free(b);
    dt_dataset *d = NULL;
    DT_CHECK_ERR(dt_dataset_load_idx(&d, ip, p), DT_ERR_FORMAT, "has 5 images but");
    DT_CHECK(strstr(dt_errmsg(), ip) && strstr(dt_errmsg(), p));
    DT_CHECK(strstr(dt_errmsg(), "has 4 labels"));
    DT_CHECK(d == NULL);
}

/* The real Fashion-MNIST files, when installed. */
#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

static void check_fashion(const char *images, const char *labels, int64_t n, int per_class) {
    char ip[256], lp[256];
    snprintf(ip, sizeof ip, "%s/%s", FASHION_DIR, images);
    snprintf(lp, sizeof lp, "%s/%s", FASHION_DIR, labels);
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_idx(&d, ip, lp));
    int hist[10] = {0}, bad = 0;
    float lo = 1e9f, hi = -1e9f;
    for (int64_t i = 0; i < d->n; i++) {
        if (d->labels[i] < 0 || d->labels[i] >= 10)
            bad++;
        else
            hist[d->labels[i]]++;
    }
    for (int64_t i = 0; i < d->n * 784; i++) {
        if (d->x[i] < lo) lo = d->x[i];
        if (d->x[i] > hi) hi = d->x[i];
    }
    int ok = d->n == n && d->num_classes == 10 && d->sample.ndim == 3 && d->sample.dim[0] == 28 &&
             d->sample.dim[1] == 28 && d->sample.dim[2] == 1 && !bad && lo == 0.0f && hi == 255.0f;
    for (int c = 0; c < 10; c++)
        ok = ok && hist[c] == per_class;
    dt_dataset_free(d);
    DT_CHECK(ok);
}

static void test_fashion_mnist(void) {
    struct stat st;
    if (stat(FASHION_DIR, &st) != 0) {
        printf("note: %s is absent; test_fashion_mnist skipped\n", FASHION_DIR);
        return;
    }
    check_fashion("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60000, 6000);
    if (dt__test_failed) return;
    check_fashion("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10000, 1000);
    if (dt__test_failed) return;
#if !defined(__SANITIZE_ADDRESS__)
    /* peak memory: under 2x the float dataset (60000 x 784 x 4 bytes) + 100 MB */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long peak_kb = ru.ru_maxrss;
    long limit_kb = (2L * 60000 * 784 * 4 + 100L * 1000 * 1000) / 1024;
    if (peak_kb >= limit_kb) DT_FAIL("peak RSS %ld kB >= %ld kB", peak_kb, limit_kb);
#endif
    /* the files mixed up: t10k labels for the train images */
    dt_dataset *d = NULL;
    DT_CHECK_ERR(dt_dataset_load_idx(&d, FASHION_DIR "/train-images-idx3-ubyte.gz",
                                     FASHION_DIR "/t10k-labels-idx1-ubyte.gz"),
                 DT_ERR_FORMAT, "has 60000 images but");
}

/* ---- CSV ---- */

static const char *write_text(const char *name, const char *text) {
    return dt_test_write_file(name, text, strlen(text));
}

static void test_csv_iris(void) {
    const char *path = DT_SOURCE_DIR "/examples/data/iris.data";
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_csv(&d, path, &(dt_csv_opts){.label_column = -1}));
    int ok = d->n == 150 && d->num_classes == 3 && d->class_names && d->labels && !d->targets &&
             d->sample.ndim == 1 && d->sample.dim[0] == 4 && dt_dataset_row(d) == 4;
    if (ok) {
        ok = !strcmp(d->class_names[0], "Iris-setosa") &&
             !strcmp(d->class_names[1], "Iris-versicolor") &&
             !strcmp(d->class_names[2], "Iris-virginica");
        ok = ok && d->x[0] == 5.1f && d->x[1] == 3.5f && d->x[2] == 1.4f && d->x[3] == 0.2f;
        ok = ok && d->x[149 * 4] == 5.9f && d->x[149 * 4 + 3] == 1.8f;
        int count[3] = {0};
        double sw_setosa = 0;
        for (int i = 0; i < 150; i++) {
            ok = ok && d->labels[i] == i / 50;
            if (d->labels[i] >= 0 && d->labels[i] < 3) count[d->labels[i]]++;
            if (i < 50) sw_setosa += d->x[i * 4 + 1];
        }
        ok = ok && count[0] == 50 && count[1] == 50 && count[2] == 50;
        /* the UCI file's errata: setosa sepal width mean 3.418 (3.428 corrected) */
        ok = ok && fabs(sw_setosa / 50 - 3.418) < 1e-4;
    }
    dt_dataset_free(d);
    DT_CHECK(ok);
    /* NULL options are the defaults */
    DT_CHECK_OK(dt_dataset_load_csv(&d, path, NULL));
    ok = d->n == 150 && d->num_classes == 3;
    dt_dataset_free(d);
    DT_CHECK(ok);
}

static void test_csv_bad_number(void) {
    const dt_csv_opts o = {.label_column = -1};
    dt_dataset *d = NULL;
    const char *p = write_text("badnum.csv", "1,2,a\n\n3,abc,b\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &o), DT_ERR_FORMAT,
                 "badnum.csv:3: field 2: 'abc' is not a number");
    DT_CHECK(strstr(dt_errmsg(), p));
    p = write_text("partial.csv", "1,2,a\n3,4x,b\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &o), DT_ERR_FORMAT,
                 "partial.csv:2: field 2: '4x' is not a number");
    p = write_text("emptyfield.csv", "1,2,a\n3,,b\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &o), DT_ERR_FORMAT,
                 "emptyfield.csv:2: field 2: '' is not a number");
    p = write_text("inf.csv", "1,2,a\ninf,4,b\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &o), DT_ERR_FORMAT,
                 "inf.csv:2: field 1: 'inf' is not a finite number");
    p = write_text("nan.csv", "1,nan,a\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &o), DT_ERR_FORMAT,
                 "nan.csv:1: field 2: 'nan' is not a finite number");
    p = write_text("overflow.csv", "1,1e999,a\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &o), DT_ERR_FORMAT,
                 "field 2: '1e999' is not a finite number");
    /* label column first: the feature numbering still follows the file's columns */
    p = write_text("first.csv", "a;1;2\nb;3;zz\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = 0, .delimiter = ';'}),
                 DT_ERR_FORMAT, "first.csv:2: field 3: 'zz' is not a number");
    DT_CHECK(d == NULL);
}

static void test_csv_field_count(void) {
    dt_dataset *d = NULL;
    const char *p = write_text("fields.csv", "1,2,3,4,a\n1,2,3,4,b\n\n1,2,3,a\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, NULL), DT_ERR_FORMAT,
                 "fields.csv:4: expected 5 fields, got 4");
    p = write_text("more.csv", "1,2,a\n1,2,3,a\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, NULL), DT_ERR_FORMAT,
                 "more.csv:2: expected 3 fields, got 4");
    p = write_text("onefield.csv", "1\n2\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, NULL), DT_ERR_FORMAT,
                 "onefield.csv:1: a row needs a label and at least one feature, got 1 field");
    /* the wrong delimiter makes every row one field */
    p = write_text("semi.csv", "1;2;a\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, NULL), DT_ERR_FORMAT, "is the delimiter ','?");
    DT_CHECK(d == NULL);
}

static void test_csv_empty(void) {
    dt_dataset *d = NULL;
    const char *p = write_text("empty.csv", "");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, NULL), DT_ERR_FORMAT, "empty.csv: no data rows");
    p = write_text("blank.csv", "\n   \n\r\n\t\r\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, NULL), DT_ERR_FORMAT, "blank.csv: no data rows");
    p = write_text("headeronly.csv", "\na,b,label\n\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = -1, .header = 1}),
                 DT_ERR_FORMAT, "headeronly.csv: no data rows (after the header)");
    const char *nope = tmp_path("missing.csv");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, nope, NULL), DT_ERR_IO, nope);
    DT_CHECK(strstr(dt_errmsg(), "No such file"));
    DT_CHECK_ERR(dt_dataset_load_csv(&d, dt_test_tmpdir(), NULL), DT_ERR_IO, dt_test_tmpdir());
    DT_CHECK(d == NULL);
}

static void test_csv_header(void) {
    const char *p = write_text("header.csv", "\n\nsepal, petal ,label\n1,2,x\n3,4,y\n");
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = -1, .header = 1}));
    int ok = d->n == 2 && d->x[0] == 1 && d->x[3] == 4 && d->num_classes == 2 &&
             d->labels[0] == 0 && d->labels[1] == 1;
    dt_dataset_free(d);
    d = NULL;
    DT_CHECK(ok);
    /* without the header option the header is data, and not a number */
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, NULL), DT_ERR_FORMAT,
                 "header.csv:3: field 1: 'sepal' is not a number");
}

static void test_csv_crlf_and_spaces(void) {
    const char *p =
        write_text("crlf.csv", "1.5 , 2,\tcat \r\n  \r\n\r\n-3e2,  4.25 ,dog\r\n7,8,cat");
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_csv(&d, p, NULL));
    int ok = d->n == 3 && d->x[0] == 1.5f && d->x[1] == 2.0f && d->x[2] == -300.0f &&
             d->x[3] == 4.25f && d->x[4] == 7.0f && d->x[5] == 8.0f && d->num_classes == 2 &&
             !strcmp(d->class_names[0], "cat") && !strcmp(d->class_names[1], "dog") &&
             d->labels[0] == 0 && d->labels[1] == 1 && d->labels[2] == 0;
    dt_dataset_free(d);
    DT_CHECK(ok);
    /* a tab-separated file: tabs split, spaces are trimmed */
    p = write_text("tabs.tsv", "1\t 2 \tx\n3\t4\ty\n");
    DT_CHECK_OK(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = -1, .delimiter = '\t'}));
    ok = d->n == 2 && d->x[1] == 2.0f && d->sample.dim[0] == 2;
    dt_dataset_free(d);
    DT_CHECK(ok);
}

static void test_csv_integer_labels(void) {
    const char *p = write_text("ints.csv", "2,0.5,1\n0,1.5,2\n5,2.5,3\n2,3.5,4\n");
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = 0}));
    int ok = d->n == 4 && d->num_classes == 6 && !d->class_names && d->labels[0] == 2 &&
             d->labels[1] == 0 && d->labels[2] == 5 && d->labels[3] == 2 &&
             dt_dataset_row(d) == 2 && d->x[0] == 0.5f && d->x[1] == 1.0f && d->x[7] == 4.0f;
    dt_dataset_free(d);
    d = NULL;
    DT_CHECK(ok);
    /* one non-integer makes them all names, sorted by bytes: "1" < "10" < "2" < "b" */
    p = write_text("mixed.csv", "1,2\n1,10\n1,b\n1,1\n");
    DT_CHECK_OK(dt_dataset_load_csv(&d, p, NULL));
    ok = d->num_classes == 4 && d->class_names && !strcmp(d->class_names[0], "1") &&
         !strcmp(d->class_names[1], "10") && !strcmp(d->class_names[2], "2") &&
         !strcmp(d->class_names[3], "b") && d->labels[0] == 2 && d->labels[1] == 1 &&
         d->labels[2] == 3 && d->labels[3] == 0;
    dt_dataset_free(d);
    d = NULL;
    DT_CHECK(ok);
    /* negative numbers are names too */
    p = write_text("neg.csv", "1,-1\n1,1\n");
    DT_CHECK_OK(dt_dataset_load_csv(&d, p, NULL));
    ok = d->num_classes == 2 && d->class_names && !strcmp(d->class_names[0], "-1");
    dt_dataset_free(d);
    d = NULL;
    DT_CHECK(ok);
    p = write_text("bigint.csv", "1,3\n1,70000\n1,4\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, NULL), DT_ERR_FORMAT,
                 "bigint.csv:2: field 2: integer class label 70000 is too large");
    p = write_text("emptylabel.csv", "1,3\n1,\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, NULL), DT_ERR_FORMAT,
                 "emptylabel.csv:2: field 2: the class label is empty");
    DT_CHECK(d == NULL);
}

static void test_csv_regression(void) {
    const char *p = write_text("reg.csv", "x1,x2,y\n1,2,0.5\n3,4,-1e-3\n");
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_csv(
        &d, p, &(dt_csv_opts){.label_column = 2, .header = 1, .regression = 1}));
    int ok = d->n == 2 && !d->labels && d->targets && d->target_dim == 1 && d->num_classes == 0 &&
             !d->class_names && d->targets[0] == 0.5f && d->targets[1] == -1e-3f && d->x[2] == 3.0f;
    dt_dataset_free(d);
    d = NULL;
    DT_CHECK(ok);
    p = write_text("regbad.csv", "1,2,0.5\n3,4,high\n");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = -1, .regression = 1}),
                 DT_ERR_FORMAT, "regbad.csv:2: field 3: 'high' is not a number");
    DT_CHECK(d == NULL);
}

static void test_csv_bad_options(void) {
    const char *p = write_text("opts.csv", "1,2,a\n");
    dt_dataset *d = NULL;
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = 3}), DT_ERR_ARG,
                 "opts.csv:1: label column 3 does not exist: the row has 3 fields");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = -2}), DT_ERR_ARG,
                 "label column -2 is invalid");
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = -1, .delimiter = '\n'}),
                 DT_ERR_ARG, "line break");
    DT_CHECK(d == NULL);
}

static void test_csv_long_line_and_nul(void) {
    /* one row of 20000 features: a line far longer than any fixed buffer */
    enum { F = 20000 };
    size_t cap = 2 * (size_t)F * 8 + 64, off = 0;
    char *text = malloc(cap);
    for (int r = 0; r < 2; r++) {
        for (int j = 0; j < F; j++)
            off += (size_t)snprintf(text + off, cap - off, "%d.5,", j % 100);
        off += (size_t)snprintf(text + off, cap - off, "%s\n", r ? "b" : "a");
    }
    const char *p = dt_test_write_file("long.csv", text, off);
    free(text);
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_csv(&d, p, NULL));
    int ok = d->n == 2 && dt_dataset_row(d) == F && d->x[F - 1] == 99.5f && d->x[F + 3] == 3.5f;
    dt_dataset_free(d);
    d = NULL;
    DT_CHECK(ok);
    p = dt_test_write_file("nul.csv", "1,2,a\n1,\0,b\n", 12);
    DT_CHECK_ERR(dt_dataset_load_csv(&d, p, NULL), DT_ERR_FORMAT,
                 "nul.csv:2: the line contains a NUL byte");
    DT_CHECK(d == NULL);
}

/* ---- synthetic ---- */

static void test_synthetic_deterministic(void) {
    dt_shape s = dt_shape_make(1, (int64_t[]){20});
    dt_dataset *a = NULL, *b = NULL, *c = NULL;
    DT_CHECK_OK(dt_dataset_synthetic(&a, 500, &s, 10, 42));
    DT_CHECK_OK(dt_dataset_synthetic(&b, 500, &s, 10, 42));
    DT_CHECK_OK(dt_dataset_synthetic(&c, 500, &s, 10, 43));
    int same = !memcmp(a->x, b->x, 500 * 20 * sizeof(float)) &&
               !memcmp(a->labels, b->labels, 500 * sizeof(int32_t));
    int differ = memcmp(a->x, c->x, 500 * 20 * sizeof(float)) != 0;
    int range = a->num_classes == 10 && !a->targets && !a->class_names && a->n == 500;
    for (int64_t i = 0; i < 500 * 20; i++)
        range = range && a->x[i] >= 0.0f && a->x[i] < 1.0f;
    for (int64_t i = 0; i < 500; i++)
        range = range && a->labels[i] >= 0 && a->labels[i] < 10;
    dt_dataset_free(a);
    dt_dataset_free(b);
    dt_dataset_free(c);
    DT_CHECK(same);
    DT_CHECK(differ);
    DT_CHECK(range);
}

static void test_synthetic_balanced_and_learnable(void) {
    enum { N = 10000, F = 20, K = 10 };
    dt_shape s = dt_shape_make(1, (int64_t[]){F});
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_synthetic(&d, N, &s, K, 1));
    int count[K] = {0};
    double cent[K][F] = {{0}};
    for (int i = 0; i < N; i++) {
        count[d->labels[i]]++;
        for (int j = 0; j < F; j++)
            cent[d->labels[i]][j] += d->x[i * F + j];
    }
    int balanced = 1;
    for (int k = 0; k < K; k++) {
        balanced = balanced && count[k] >= N / K / 2 && count[k] <= N / K * 2;
        for (int j = 0; j < F; j++)
            cent[k][j] /= count[k] ? count[k] : 1;
    }
    /* learnable: even a nearest-centroid rule does far better than chance (0.1) */
    int right = 0;
    for (int i = 0; i < N; i++) {
        int best = 0;
        double bd = 1e300;
        for (int k = 0; k < K; k++) {
            double dist = 0;
            for (int j = 0; j < F; j++) {
                double t = d->x[i * F + j] - cent[k][j];
                dist += t * t;
            }
            if (dist < bd) bd = dist, best = k;
        }
        right += best == d->labels[i];
    }
    dt_dataset_free(d);
    DT_CHECK(balanced);
    DT_CHECK((double)right / N > 0.6);
    /* image-shaped samples */
    s = dt_shape_make(3, (int64_t[]){8, 8, 1});
    DT_CHECK_OK(dt_dataset_synthetic(&d, 10, &s, 3, 5));
    int ok = dt_dataset_row(d) == 64 && d->sample.ndim == 3;
    dt_dataset_free(d);
    DT_CHECK(ok);
}

static void test_synthetic_bad_args(void) {
    dt_dataset *d = NULL;
    dt_shape s = dt_shape_make(1, (int64_t[]){4});
    DT_CHECK_ERR(dt_dataset_synthetic(&d, 0, &s, 3, 1), DT_ERR_ARG, "n = 0");
    DT_CHECK_ERR(dt_dataset_synthetic(&d, 10, &s, 1, 1), DT_ERR_ARG, "1 classes");
    dt_shape z = dt_shape_make(2, (int64_t[]){4, 0});
    DT_CHECK_ERR(dt_dataset_synthetic(&d, 10, &z, 3, 1), DT_ERR_ARG, "bad sample shape [4, 0]");
    dt_shape e = {0};
    DT_CHECK_ERR(dt_dataset_synthetic(&d, 10, &e, 3, 1), DT_ERR_ARG, "got 0");
    dt_shape huge = dt_shape_make(2, (int64_t[]){1 << 30, 1 << 30});
    DT_CHECK_ERR(dt_dataset_synthetic(&d, (int64_t)1 << 40, &huge, 3, 1), DT_ERR_ARG, "too large");
    DT_CHECK(d == NULL);
}

/* ---- dataset operations ---- */

/* A synthetic dataset whose feature 0 is the sample's own index. */
static dt_dataset *numbered(int64_t n) {
    dt_shape s = dt_shape_make(1, (int64_t[]){3});
    dt_dataset *d = NULL;
    if (dt_dataset_synthetic(&d, n, &s, 4, 9)) exit(2);
    for (int64_t i = 0; i < n; i++)
        d->x[i * 3] = (float)i;
    return d;
}

static void test_split(void) {
    dt_dataset *d = numbered(101);
    float *before = malloc(101 * 3 * sizeof(float));
    memcpy(before, d->x, 101 * 3 * sizeof(float));
    dt_dataset *tr = NULL, *ev = NULL, *tr2 = NULL, *ev2 = NULL;
    DT_CHECK_OK(dt_dataset_split(d, 0.2, 7, &tr, &ev));
    DT_CHECK_OK(dt_dataset_split(d, 0.2, 7, &tr2, &ev2));
    int ok = tr->n == 81 && ev->n == 20 && tr->num_classes == 4 && ev->num_classes == 4 &&
             dt_shape_eq(&tr->sample, &d->sample);
    int seen[101] = {0};
    int carried = 1;
    for (int64_t i = 0; ok && i < tr->n + ev->n; i++) {
        const dt_dataset *p = i < tr->n ? tr : ev;
        int64_t k = i < tr->n ? i : i - tr->n;
        int id = (int)p->x[k * 3];
        if (id < 0 || id >= 101) {
            ok = 0;
            break;
        }
        seen[id]++;
        carried = carried && p->labels[k] == d->labels[id] && p->x[k * 3 + 2] == d->x[id * 3 + 2];
    }
    for (int i = 0; i < 101; i++)
        ok = ok && seen[i] == 1; /* disjoint and covering */
    int repro = !memcmp(tr->x, tr2->x, 81 * 3 * sizeof(float)) &&
                !memcmp(ev->x, ev2->x, 20 * 3 * sizeof(float));
    int shuffled = 0;
    for (int64_t i = 0; i < tr->n; i++)
        shuffled += tr->x[i * 3] != (float)i;
    int unchanged = !memcmp(before, d->x, 101 * 3 * sizeof(float)) && d->n == 101;
    dt_dataset_free(tr);
    dt_dataset_free(ev);
    dt_dataset_free(tr2);
    dt_dataset_free(ev2);
    free(before);
    DT_CHECK(ok);
    DT_CHECK(carried);
    DT_CHECK(repro);
    DT_CHECK(shuffled > 0);
    DT_CHECK(unchanged);

    tr = ev = NULL;
    DT_CHECK_ERR(dt_dataset_split(d, 0.0, 1, &tr, &ev), DT_ERR_ARG,
                 "eval fraction 0 is not in (0, 1)");
    DT_CHECK_ERR(dt_dataset_split(d, 1.0, 1, &tr, &ev), DT_ERR_ARG, "not in (0, 1)");
    DT_CHECK_ERR(dt_dataset_split(d, -0.5, 1, &tr, &ev), DT_ERR_ARG, "not in (0, 1)");
    DT_CHECK_ERR(dt_dataset_split(d, NAN, 1, &tr, &ev), DT_ERR_ARG, "not in (0, 1)");
    DT_CHECK_ERR(dt_dataset_split(d, 0.001, 1, &tr, &ev), DT_ERR_ARG,
                 "leaves 101 for training and 0");
    DT_CHECK_ERR(dt_dataset_split(d, 0.999, 1, &tr, &ev), DT_ERR_ARG, "leaves 0 for training");
    dt_dataset_free(d);
    DT_CHECK(tr == NULL && ev == NULL);
}

static void test_split_keeps_names_and_targets(void) {
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_load_csv(&d, DT_SOURCE_DIR "/examples/data/iris.data", NULL));
    dt_dataset *tr = NULL, *ev = NULL;
    DT_CHECK_OK(dt_dataset_split(d, 0.2, 3, &tr, &ev));
    int ok = tr->n == 120 && ev->n == 30 && tr->class_names && ev->class_names &&
             !strcmp(ev->class_names[2], "Iris-virginica") &&
             tr->class_names[0] != d->class_names[0];
    dt_dataset_free(tr);
    dt_dataset_free(ev);
    dt_dataset_free(d);
    d = NULL;
    DT_CHECK(ok);
    const char *p = write_text("regsplit.csv", "1,10\n2,20\n3,30\n4,40\n");
    DT_CHECK_OK(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = -1, .regression = 1}));
    DT_CHECK_OK(dt_dataset_split(d, 0.5, 3, &tr, &ev));
    ok = tr->n == 2 && ev->n == 2 && tr->targets && !tr->labels && tr->target_dim == 1;
    for (int i = 0; ok && i < 2; i++)
        ok = tr->targets[i] == 10 * tr->x[i] && ev->targets[i] == 10 * ev->x[i];
    dt_dataset_free(tr);
    dt_dataset_free(ev);
    dt_dataset_free(d);
    DT_CHECK(ok);
}

static int is_permutation(const int64_t *idx, int64_t n) {
    char *seen = calloc((size_t)n, 1);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= n || seen[idx[i]])
            ok = 0;
        else
            seen[idx[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_epoch_order(void) {
    enum { N = 1000 };
    int64_t a[N], b[N], c[N];
    dt_epoch_order(a, N, 5, 0, 1);
    dt_epoch_order(b, N, 5, 1, 1);
    dt_epoch_order(c, N, 5, 0, 1);
    DT_CHECK(is_permutation(a, N));
    DT_CHECK(is_permutation(b, N));
    DT_CHECK(memcmp(a, b, sizeof a) != 0);
    DT_CHECK(!memcmp(a, c, sizeof a));
    int moved = 0;
    for (int i = 0; i < N; i++)
        moved += a[i] != i;
    DT_CHECK(moved > N / 2);
    dt_epoch_order(c, N, 6, 0, 1);
    DT_CHECK(memcmp(a, c, sizeof a) != 0);
    dt_epoch_order(c, N, 5, 3, 0);
    for (int i = 0; i < N; i++)
        DT_CHECK(c[i] == i);
    dt_epoch_order(c, 0, 5, 0, 1); /* n = 0: nothing to do */
}

static void test_standardize_and_scale(void) {
    dt_shape s = dt_shape_make(1, (int64_t[]){5});
    dt_dataset *d = NULL;
    DT_CHECK_OK(dt_dataset_synthetic(&d, 2000, &s, 3, 11));
    for (int64_t i = 0; i < d->n; i++) {
        d->x[i * 5 + 1] = d->x[i * 5 + 1] * 1000.0f + 5000.0f; /* large offset and scale */
        d->x[i * 5 + 4] = 7.0f;                                /* constant */
    }
    float mean[5], std[5];
    dt_dataset_feature_stats(d, mean, std);
    int ok = fabsf(mean[0] - 0.5f) < 0.03f && fabsf(std[0] - 0.2887f) < 0.02f &&
             fabsf(mean[1] - 5500.0f) < 30.0f && mean[4] == 7.0f && std[4] == 1.0f;
    dt_dataset_standardize(d, mean, std);
    float m2[5], s2[5];
    dt_dataset_feature_stats(d, m2, s2);
    for (int j = 0; j < 4; j++)
        ok = ok && fabsf(m2[j]) < 1e-5f && fabsf(s2[j] - 1.0f) < 1e-4f;
    ok = ok && m2[4] == 0.0f && s2[4] == 1.0f; /* the constant feature becomes 0 */
    float x0 = d->x[0];
    dt_dataset_scale(d, 2.0f, 1.0f);
    ok = ok && d->x[0] == x0 * 2.0f + 1.0f;
    dt_dataset_scale(d, 1.0f / 255.0f, 0.0f);
    ok = ok && fabsf(d->x[0] - (x0 * 2.0f + 1.0f) / 255.0f) < 1e-6f;
    dt_dataset_free(d);
    DT_CHECK(ok);

    /* wide samples (statistics in several blocks of features): compare with a direct sum */
    enum { W = 2500, M = 40 };
    s = dt_shape_make(1, (int64_t[]){W});
    DT_CHECK_OK(dt_dataset_synthetic(&d, M, &s, 3, 12));
    float *wm = malloc(W * sizeof(float)), *ws = malloc(W * sizeof(float));
    dt_dataset_feature_stats(d, wm, ws);
    for (int j = 0; ok && j < W; j += 97) {
        double sum = 0, sq = 0;
        for (int i = 0; i < M; i++)
            sum += d->x[i * W + j];
        for (int i = 0; i < M; i++)
            sq += (d->x[i * W + j] - sum / M) * (d->x[i * W + j] - sum / M);
        ok = fabs(wm[j] - sum / M) < 1e-6 && fabs(ws[j] - sqrt(sq / M)) < 1e-6;
    }
    free(wm);
    free(ws);
    dt_dataset_free(d);
    DT_CHECK(ok);
}

static void test_gather(void) {
    dt_dataset *d = numbered(10);
    int64_t idx[4] = {7, 0, 7, 3};
    float x[12];
    int32_t lab[4];
    dt_dataset_gather(d, idx, 4, x, lab, NULL);
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok = ok && x[i * 3] == (float)idx[i] && x[i * 3 + 1] == d->x[idx[i] * 3 + 1] &&
             lab[i] == d->labels[idx[i]];
    dt_dataset_gather(d, idx, 2, x, NULL, NULL); /* labels not wanted */
    /* split over a pool: the same rows, every one written (3 threads, 4 rows, 1 row) */
    dt_pool *pool = NULL;
    DT_CHECK_OK(dt_pool_init(&pool, 3));
    for (int count = 4; count >= 1; count -= 3) {
        float px[12];
        int32_t pl[4];
        memset(px, 0xff, sizeof px);
        memset(pl, 0xff, sizeof pl);
        dt_dataset_gather_on(pool, d, idx, count, px, pl, NULL);
        for (int i = 0; i < count; i++)
            ok = ok && !memcmp(px + i * 3, d->x + idx[i] * 3, 3 * sizeof(float)) &&
                 pl[i] == d->labels[idx[i]];
        ok = ok && (count == 4 || pl[1] == -1); /* nothing past count */
    }
    dt_pool_free(pool);
    dt_dataset_free(d);
    dt_dataset_free(NULL);
    DT_CHECK(ok);
    d = NULL;
    const char *p = write_text("gather.csv", "1,10\n2,20\n3,30\n");
    DT_CHECK_OK(dt_dataset_load_csv(&d, p, &(dt_csv_opts){.label_column = -1, .regression = 1}));
    int64_t gi[2] = {2, 1};
    float tx[2], tt[2];
    int32_t tl[2] = {-5, -5};
    dt_dataset_gather(d, gi, 2, tx, tl, tt);
    ok = tx[0] == 3 && tx[1] == 2 && tt[0] == 30 && tt[1] == 20 && tl[0] == -5; /* no labels */
    dt_dataset_free(d);
    DT_CHECK(ok);
}

/* Not regular files: refused before a byte is read (/dev/zero once had the CSV reader grow
 * to 2 GB; a FIFO would block it forever). */
static void test_not_regular_files(void) {
    const char *ip, *lp;
    write_idx_fixture(0, &ip, &lp);
    const char *fifo = tmp_path("a-fifo");
    unlink(fifo);
    DT_CHECK(mkfifo(fifo, 0600) == 0);
    const char *paths[] = {"/dev/zero", "/dev/null", fifo, dt_test_tmpdir()};
    const char *what[] = {"a character device", "a character device", "a FIFO", "a directory"};
    for (int i = 0; i < 4; i++) {
        dt_dataset *d = NULL;
        DT_CHECK_ERR(dt_dataset_load_csv(&d, paths[i], NULL), DT_ERR_IO, paths[i]);
        DT_CHECK(strstr(dt_errmsg(), what[i]) && strstr(dt_errmsg(), "not a regular file"));
        DT_CHECK_ERR(dt_dataset_load_idx(&d, paths[i], lp), DT_ERR_IO, what[i]);
        DT_CHECK_ERR(dt_dataset_load_idx(&d, ip, paths[i]), DT_ERR_IO, what[i]);
        DT_CHECK(d == NULL);
    }
    unlink(fifo);
}

DT_TEST_MAIN(DT_T(test_idx_raw_roundtrip), DT_T(test_idx_gz_roundtrip), DT_T(test_idx_missing_file),
             DT_T(test_idx_wrong_magic), DT_T(test_idx_bad_dims), DT_T(test_idx_truncated_header),
             DT_T(test_idx_truncated_raw), DT_T(test_idx_truncated_gz), DT_T(test_idx_corrupt_gz),
             DT_T(test_idx_trailing_bytes), DT_T(test_idx_count_mismatch), DT_T(test_fashion_mnist),
             DT_T(test_csv_iris), DT_T(test_csv_bad_number), DT_T(test_csv_field_count),
             DT_T(test_csv_empty), DT_T(test_csv_header), DT_T(test_csv_crlf_and_spaces),
             DT_T(test_csv_integer_labels), DT_T(test_csv_regression), DT_T(test_csv_bad_options),
             DT_T(test_csv_long_line_and_nul), DT_T(test_synthetic_deterministic),
             DT_T(test_synthetic_balanced_and_learnable), DT_T(test_synthetic_bad_args),
             DT_T(test_split), DT_T(test_split_keeps_names_and_targets), DT_T(test_epoch_order),
             DT_T(test_standardize_and_scale), DT_T(test_gather),
             DT_T(test_not_regular_files))
