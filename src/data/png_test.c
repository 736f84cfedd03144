/* png_test.c - PNG reading as 8-bit gray (every colour type and depth, tRNS, interlaced,
 * 16-bit scaling, the invert flag), bad files (missing, not a PNG, damaged signature, every
 * truncation, a CRC error, too large), the resize (copy, area, bilinear, mixed), and
 * writing. The fixtures are written with libpng itself. */
#include <setjmp.h>
#include <stdint.h>
#include <sys/stat.h>

#include <png.h>
#include <zlib.h>

#include "data/png-impl.h"
#include "testing/dt_test.h"

/* ---- fixtures ---- */

static const char *tmp_path(const char *name) {
    static char paths[8][512];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 512, "%s/%s", dt_test_tmpdir(), name);
    return p;
}

typedef struct fixture {
    int w, h, color, depth, interlace;
    const uint8_t *data; /* packed rows as PNG stores them (16-bit big-endian) */
    const png_color *palette;
    int npalette;
    const uint8_t *trans_alpha; /* palette tRNS */
    int ntrans;
    const png_color_16 *trans_color; /* gray / RGB tRNS */
} fixture;

static int write_fixture_png(const char *path, const fixture *fx) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_bytep *volatile rows = NULL;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(rows);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)fx->w, (png_uint_32)fx->h, fx->depth, fx->color,
                 fx->interlace, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (fx->palette) png_set_PLTE(png, info, fx->palette, fx->npalette);
    if (fx->trans_alpha || fx->trans_color)
        png_set_tRNS(png, info, fx->trans_alpha, fx->ntrans, fx->trans_color);
    int channels = fx->color == PNG_COLOR_TYPE_RGB          ? 3
                   : fx->color == PNG_COLOR_TYPE_RGBA       ? 4
                   : fx->color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                            : 1;
    size_t rowbytes = ((size_t)fx->w * (size_t)channels * (size_t)fx->depth + 7) / 8;
    rows = malloc((size_t)fx->h * sizeof *rows);
    for (int y = 0; y < fx->h; y++)
        rows[y] = (png_bytep)(fx->data + (size_t)y * rowbytes);
    png_set_rows(png, info, rows);
    png_write_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    return fclose(f);
}

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

/* The formulas of png.c's design comment, for the expected values. */
static uint8_t luma(unsigned r, unsigned g, unsigned b) {
    return (uint8_t)((19595u * r + 38470u * g + 7471u * b + 32768u) >> 16);
}
static uint8_t on_black(unsigned l, unsigned a) {
    return (uint8_t)((l * a + 127u) / 255u);
}
static uint8_t scale16(unsigned v) {
    return (uint8_t)((v * 255u + 32895u) >> 16);
}

/* Read path and compare with want (w x h). */
#define CHECK_GRAY(path, flags, W, H, want)                                                        \
    do {                                                                                           \
        dt__gray_image img;                                                                        \
        DT_CHECK_OK(dt__png_read_gray((path), (flags), &img));                                     \
        DT_CHECK(img.w == (W) && img.h == (H));                                                    \
        for (int i = 0; i < (W) * (H); i++)                                                        \
            if (img.px[i] != (want)[i]) {                                                          \
                int got = img.px[i];                                                               \
                dt__gray_image_free(&img);                                                         \
                DT_FAIL("%s: pixel %d (x %d, y %d) = %d, want %d", (path), i, i % (W), i / (W),    \
                        got, (want)[i]);                                                           \
            }                                                                                      \
        dt__gray_image_free(&img);                                                                 \
    } while (0)

/* ---- colour types ---- */

static void test_gray8(void) {
    enum { W = 17, H = 5 };
    uint8_t d[W * H];
    for (int i = 0; i < W * H; i++)
        d[i] = (uint8_t)(i * 3);
    fixture fx = {.w = W, .h = H, .color = PNG_COLOR_TYPE_GRAY, .depth = 8, .data = d};
    const char *p = tmp_path("gray8.png");
    DT_CHECK(write_fixture_png(p, &fx) == 0);
    CHECK_GRAY(p, 0, W, H, d);
    uint8_t inv[W * H];
    for (int i = 0; i < W * H; i++)
        inv[i] = (uint8_t)(255 - d[i]);
    CHECK_GRAY(p, DT__PNG_FLAG_INVERT, W, H, inv);
}

static void test_gray_low_depths(void) {
    enum { W = 11, H = 3 };
    for (int depth = 1; depth <= 4; depth *= 2) {
        int max = (1 << depth) - 1, per_byte = 8 / depth;
        size_t rowbytes = (size_t)(W + per_byte - 1) / (size_t)per_byte;
        uint8_t d[16 * H] = {0}, want[W * H];
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int v = (x + y) % (max + 1);
                int shift = 8 - depth * (x % per_byte + 1);
                d[(size_t)y * rowbytes + (size_t)(x / per_byte)] |= (uint8_t)(v << shift);
                want[y * W + x] = (uint8_t)(v * 255 / max); /* bit replication = exact scaling */
            }
        fixture fx = {.w = W, .h = H, .color = PNG_COLOR_TYPE_GRAY, .depth = depth, .data = d};
        char name[32];
        snprintf(name, sizeof name, "gray%d.png", depth);
        const char *p = tmp_path(name);
        DT_CHECK(write_fixture_png(p, &fx) == 0);
        CHECK_GRAY(p, 0, W, H, want);
        /* tRNS: the value 1 is transparent, so background (0) */
        png_color_16 tc = {.gray = 1};
        fx.trans_color = &tc;
        DT_CHECK(write_fixture_png(p, &fx) == 0);
        for (int i = 0; i < W * H; i++)
            if ((i % W + i / W) % (max + 1) == 1) want[i] = 0;
        CHECK_GRAY(p, 0, W, H, want);
    }
}

/* Every 16-bit value, gray: libpng's png_set_scale_16 is v16 / 257 rounded. */
static void test_gray16_all_values(void) {
    enum { W = 256, H = 256 };
    uint8_t *d = malloc(W * H * 2), *want = malloc(W * H);
    for (unsigned v = 0; v < 65536; v++) {
        d[2 * v] = (uint8_t)(v >> 8);
        d[2 * v + 1] = (uint8_t)v;
        want[v] = scale16(v);
        if (want[v] != (uint8_t)((v + 128) / 257)) DT_FAIL("scale16 formula disagrees at %u", v);
    }
    fixture fx = {.w = W, .h = H, .color = PNG_COLOR_TYPE_GRAY, .depth = 16, .data = d};
    const char *p = tmp_path("gray16.png");
    DT_CHECK(write_fixture_png(p, &fx) == 0);
    CHECK_GRAY(p, 0, W, H, want);
    free(d);
    free(want);
}

static void test_gray_alpha(void) {
    enum { W = 16, H = 16 };
    uint8_t d[W * H * 2], want[W * H], inv[W * H];
    for (int i = 0; i < W * H; i++) {
        unsigned g = (unsigned)(i * 7) & 255, a = (unsigned)(i * 13 + 5) & 255;
        d[2 * i] = (uint8_t)g, d[2 * i + 1] = (uint8_t)a;
        want[i] = on_black(g, a);
        inv[i] = (uint8_t)(255 - (g * a + 255 * (255 - a) + 127) / 255);
    }
    fixture fx = {.w = W, .h = H, .color = PNG_COLOR_TYPE_GRAY_ALPHA, .depth = 8, .data = d};
    const char *p = tmp_path("ga8.png");
    DT_CHECK(write_fixture_png(p, &fx) == 0);
    CHECK_GRAY(p, 0, W, H, want);
    CHECK_GRAY(p, DT__PNG_FLAG_INVERT, W, H, inv);
    /* fully transparent is background with and without invert */
    DT_CHECK(want[0] == on_black(0, 5));
}

static void test_rgb_rgba(void) {
    enum { W = 9, H = 7 };
    uint8_t rgb[W * H * 3], rgba[W * H * 4], want[W * H], want_a[W * H];
    for (int i = 0; i < W * H; i++) {
        unsigned r = (unsigned)(i * 29) & 255, g = (unsigned)(i * 53 + 7) & 255,
                 b = (unsigned)(i * 101 + 3) & 255, a = (unsigned)(i * 37) & 255;
        rgb[3 * i] = (uint8_t)r, rgb[3 * i + 1] = (uint8_t)g, rgb[3 * i + 2] = (uint8_t)b;
        memcpy(rgba + 4 * i, rgb + 3 * i, 3);
        rgba[4 * i + 3] = (uint8_t)a;
        want[i] = luma(r, g, b);
        want_a[i] = on_black(want[i], a);
    }
    fixture fx = {.w = W, .h = H, .color = PNG_COLOR_TYPE_RGB, .depth = 8, .data = rgb};
    const char *p = tmp_path("rgb8.png");
    DT_CHECK(write_fixture_png(p, &fx) == 0);
    CHECK_GRAY(p, 0, W, H, want);
    fixture fa = {.w = W, .h = H, .color = PNG_COLOR_TYPE_RGBA, .depth = 8, .data = rgba};
    p = tmp_path("rgba8.png");
    DT_CHECK(write_fixture_png(p, &fa) == 0);
    CHECK_GRAY(p, 0, W, H, want_a);
    /* RGB with a tRNS colour: that colour is transparent */
    png_color_16 tc = {.red = rgb[3 * 4], .green = rgb[3 * 4 + 1], .blue = rgb[3 * 4 + 2]};
    fx.trans_color = &tc;
    p = tmp_path("rgb8-trns.png");
    DT_CHECK(write_fixture_png(p, &fx) == 0);
    want[4] = 0;
    CHECK_GRAY(p, 0, W, H, want);
    /* gray pixels keep their value through the luma */
    for (unsigned v = 0; v < 256; v++)
        if (luma(v, v, v) != v) DT_FAIL("luma(%u, %u, %u) = %u", v, v, v, luma(v, v, v));
}

static void test_rgb16(void) {
    enum { W = 8, H = 8 };
    uint8_t d[W * H * 8], want[W * H];
    for (int i = 0; i < W * H; i++) {
        unsigned c[4] = {(unsigned)(i * 1031) & 0xffff, (unsigned)(i * 4099 + 77) & 0xffff,
                         (unsigned)(i * 257 * 3) & 0xffff, (unsigned)(i * 997 + 11) & 0xffff};
        for (int k = 0; k < 4; k++)
            d[8 * i + 2 * k] = (uint8_t)(c[k] >> 8), d[8 * i + 2 * k + 1] = (uint8_t)c[k];
        want[i] = on_black(luma(scale16(c[0]), scale16(c[1]), scale16(c[2])), scale16(c[3]));
    }
    fixture fx = {.w = W, .h = H, .color = PNG_COLOR_TYPE_RGBA, .depth = 16, .data = d};
    const char *p = tmp_path("rgba16.png");
    DT_CHECK(write_fixture_png(p, &fx) == 0);
    CHECK_GRAY(p, 0, W, H, want);
}

static void test_palette(void) {
    enum { W = 13, H = 4 };
    png_color pal[16];
    uint8_t alpha[5] = {0, 64, 128, 255, 200};
    for (int k = 0; k < 16; k++)
        pal[k] = (png_color){(png_byte)(k * 16), (png_byte)(255 - k * 9), (png_byte)(k * k)};
    /* 8-bit indices with tRNS for the first 5 entries */
    uint8_t d8[W * H], want[W * H];
    for (int i = 0; i < W * H; i++) {
        int k = (i * 5) % 16;
        d8[i] = (uint8_t)k;
        uint8_t l = luma(pal[k].red, pal[k].green, pal[k].blue);
        want[i] = k < 5 ? on_black(l, alpha[k]) : l;
    }
    fixture fx = {.w = W,
                  .h = H,
                  .color = PNG_COLOR_TYPE_PALETTE,
                  .depth = 8,
                  .data = d8,
                  .palette = pal,
                  .npalette = 16,
                  .trans_alpha = alpha,
                  .ntrans = 5};
    const char *p = tmp_path("pal8.png");
    DT_CHECK(write_fixture_png(p, &fx) == 0);
    CHECK_GRAY(p, 0, W, H, want);
    /* 4-bit indices, no tRNS */
    size_t rowbytes = (W + 1) / 2;
    uint8_t d4[((W + 1) / 2) * H];
    memset(d4, 0, sizeof d4);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int k = (x * 3 + y) % 16;
            d4[(size_t)y * rowbytes + (size_t)x / 2] |= (uint8_t)(x % 2 ? k : k << 4);
            want[y * W + x] = luma(pal[k].red, pal[k].green, pal[k].blue);
        }
    fixture f4 = {.w = W,
                  .h = H,
                  .color = PNG_COLOR_TYPE_PALETTE,
                  .depth = 4,
                  .data = d4,
                  .palette = pal,
                  .npalette = 16};
    p = tmp_path("pal4.png");
    DT_CHECK(write_fixture_png(p, &f4) == 0);
    CHECK_GRAY(p, 0, W, H, want);
}

static void test_interlaced(void) {
    enum { W = 23, H = 19 };
    uint8_t rgb[W * H * 3], want[W * H], g[W * H];
    for (int i = 0; i < W * H; i++) {
        rgb[3 * i] = (uint8_t)(i * 3), rgb[3 * i + 1] = (uint8_t)(i * 5),
                rgb[3 * i + 2] = (uint8_t)i;
        want[i] = luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
        g[i] = (uint8_t)(i * 11);
    }
    fixture fx = {.w = W,
                  .h = H,
                  .color = PNG_COLOR_TYPE_RGB,
                  .depth = 8,
                  .data = rgb,
                  .interlace = PNG_INTERLACE_ADAM7};
    const char *p = tmp_path("rgb-adam7.png");
    DT_CHECK(write_fixture_png(p, &fx) == 0);
    CHECK_GRAY(p, 0, W, H, want);
    fixture fg = {.w = W,
                  .h = H,
                  .color = PNG_COLOR_TYPE_GRAY,
                  .depth = 8,
                  .data = g,
                  .interlace = PNG_INTERLACE_ADAM7};
    p = tmp_path("gray-adam7.png");
    DT_CHECK(write_fixture_png(p, &fg) == 0);
    CHECK_GRAY(p, 0, W, H, g);
}

/* ---- bad files ---- */

static void test_not_png(void) {
    const char *p = dt_test_write_file("notes.txt", "hello, this is text\n", 20);
    DT_CHECK_ERR(dt__png_read_gray(p, 0, &(dt__gray_image){0}), DT_ERR_FORMAT, "not a PNG file");
    DT_CHECK(strstr(dt_errmsg(), "notes.txt"));
    p = dt_test_write_file("empty.png", "", 0);
    DT_CHECK_ERR(dt__png_read_gray(p, 0, &(dt__gray_image){0}), DT_ERR_FORMAT,
                 "empty.png: not a PNG");
    /* a signature mangled by a text-mode transfer (CRLF -> LF) */
    p = dt_test_write_file("crlf.png", "\x89PNG\n\x1a\n\0\0\0\x0dIHDR", 16);
    DT_CHECK_ERR(dt__png_read_gray(p, 0, &(dt__gray_image){0}), DT_ERR_FORMAT, "damaged signature");
    DT_CHECK_ERR(dt__png_read_gray(tmp_path("missing.png"), 0, &(dt__gray_image){0}), DT_ERR_IO,
                 "missing.png");
    DT_CHECK_ERR(dt__png_read_gray(dt_test_tmpdir(), 0, &(dt__gray_image){0}), DT_ERR_IO,
                 dt_test_tmpdir());
    dt__gray_image_free(NULL);
}

/* Every prefix of a valid file: no crash, no leak; an error naming the file, or (cut after
 * the image data) the right image. */
static void test_truncated(void) {
    enum { W = 20, H = 20 };
    uint8_t rgb[W * H * 3], want[W * H];
    for (int i = 0; i < W * H; i++) {
        rgb[3 * i] = (uint8_t)(i * 7), rgb[3 * i + 1] = (uint8_t)(i * 3),
                rgb[3 * i + 2] = (uint8_t)(i * 17);
        want[i] = luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
    }
    for (int il = 0; il < 2; il++) {
        fixture fx = {.w = W,
                      .h = H,
                      .color = PNG_COLOR_TYPE_RGB,
                      .depth = 8,
                      .data = rgb,
                      .interlace = il ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE};
        const char *full = tmp_path("full.png");
        DT_CHECK(write_fixture_png(full, &fx) == 0);
        size_t len;
        unsigned char *bytes = slurp(full, &len);
        int truncated_msgs = 0;
        for (size_t n = 8; n < len; n++) {
            const char *p = dt_test_write_file("cut.png", bytes, n);
            dt__gray_image img;
            dt_err_clear();
            dt_err e = dt__png_read_gray(p, 0, &img);
            if (e == DT_OK) {
                DT_CHECK(img.w == W && img.h == H && !memcmp(img.px, want, W * H));
                dt__gray_image_free(&img);
                DT_CHECK(n >= len - 12 - 12); /* only the last IDAT's CRC / IEND may go */
                continue;
            }
            DT_CHECK(e == DT_ERR_FORMAT);
            DT_CHECK(img.px == NULL && img.w == 0);
            DT_CHECK(strstr(dt_errmsg(), "cut.png: "));
            if (strstr(dt_errmsg(), "truncated PNG: unexpected end of file")) truncated_msgs++;
        }
        DT_CHECK(truncated_msgs > (int)len / 2);
        free(bytes);
    }
}

static void test_corrupt(void) {
    enum { W = 8, H = 8 };
    uint8_t g[W * H];
    for (int i = 0; i < W * H; i++)
        g[i] = (uint8_t)(i * 4);
    fixture fx = {.w = W, .h = H, .color = PNG_COLOR_TYPE_GRAY, .depth = 8, .data = g};
    const char *p = tmp_path("good.png");
    DT_CHECK(write_fixture_png(p, &fx) == 0);
    size_t len;
    unsigned char *b = slurp(p, &len);
    /* a byte of IHDR's data flipped: its CRC no longer matches */
    b[8 + 8 + 3] ^= 0x40;
    p = dt_test_write_file("badcrc.png", b, len);
    DT_CHECK_ERR(dt__png_read_gray(p, 0, &(dt__gray_image){0}), DT_ERR_FORMAT,
                 "badcrc.png: corrupt PNG: IHDR: CRC error");
    free(b);
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* A PNG header claiming w x h (gray 8-bit) and an empty IDAT chunk, nothing after them. */
static const char *header_only(const char *name, uint32_t w, uint32_t h) {
    unsigned char b[8 + 25 + 12];
    memcpy(b, "\x89PNG\r\n\x1a\n", 8);
    put_be32(b + 8, 13);
    memcpy(b + 12, "IHDR", 4);
    put_be32(b + 16, w);
    put_be32(b + 20, h);
    b[24] = 8, b[25] = 0, b[26] = 0, b[27] = 0, b[28] = 0;
    put_be32(b + 29, (uint32_t)crc32(0, b + 12, 17));
    put_be32(b + 33, 0);
    memcpy(b + 37, "IDAT", 4);
    put_be32(b + 41, (uint32_t)crc32(0, b + 37, 4));
    return dt_test_write_file(name, b, sizeof b);
}

static void test_too_large(void) {
    DT_CHECK_ERR(dt__png_read_gray(header_only("wide.png", 40000, 1), 0, &(dt__gray_image){0}),
                 DT_ERR_ARG, "wide.png: image 40000 x 1 is too large");
    DT_CHECK_ERR(dt__png_read_gray(header_only("big.png", 8000, 8000), 0, &(dt__gray_image){0}),
                 DT_ERR_ARG, "too large");
    /* a header that fits, then no data: truncated */
    DT_CHECK_ERR(dt__png_read_gray(header_only("hdr.png", 28, 28), 0, &(dt__gray_image){0}),
                 DT_ERR_FORMAT, "hdr.png: truncated PNG");
}

/* ---- resize ---- */

static void test_resize_copy_and_area(void) {
    uint8_t src[56 * 56], dst[28 * 28];
    for (int i = 0; i < 56 * 56; i++)
        src[i] = (uint8_t)((i * 31) ^ (i >> 3));
    DT_CHECK_OK(dt__gray_resize(src, 56, 56, dst, 56 / 2, 56 / 2));
    for (int y = 0; y < 28; y++)
        for (int x = 0; x < 28; x++) {
            const uint8_t *s = src + 2 * y * 56 + 2 * x;
            int sum = s[0] + s[1] + s[56] + s[57];
            int want = (sum + 2) / 4; /* floor(sum / 4 + 0.5) */
            if (dst[y * 28 + x] != want)
                DT_FAIL("2x2 area (%d,%d) = %d, want %d", x, y, dst[y * 28 + x], want);
        }
    uint8_t same[56 * 56];
    DT_CHECK_OK(dt__gray_resize(src, 56, 56, same, 56, 56));
    DT_CHECK(!memcmp(same, src, sizeof src));
    /* 3 -> 2: weights 2/3, 1/3 and 1/3, 2/3 */
    uint8_t row[3] = {0, 90, 210}, two[2];
    DT_CHECK_OK(dt__gray_resize(row, 3, 1, two, 2, 1));
    DT_CHECK(two[0] == 30 && two[1] == 170);
    /* everything to one pixel: the mean */
    uint8_t one;
    DT_CHECK_OK(dt__gray_resize(row, 3, 1, &one, 1, 1));
    DT_CHECK(one == 100);
}

static void test_resize_bilinear(void) {
    /* 2 -> 4: centres at -0.25 (clamped), 0.25, 0.75, 1.25 (clamped) */
    uint8_t src[2] = {0, 200}, dst[4];
    DT_CHECK_OK(dt__gray_resize(src, 2, 1, dst, 4, 1));
    DT_CHECK(dst[0] == 0 && dst[1] == 50 && dst[2] == 150 && dst[3] == 200);
    /* 1 -> 5: constant */
    uint8_t c = 77, five[5];
    DT_CHECK_OK(dt__gray_resize(&c, 1, 1, five, 5, 1));
    for (int i = 0; i < 5; i++)
        DT_CHECK(five[i] == 77);
    /* 14 -> 28 vertically */
    uint8_t col[14], col28[28];
    for (int i = 0; i < 14; i++)
        col[i] = (uint8_t)(i * 18);
    DT_CHECK_OK(dt__gray_resize(col, 1, 14, col28, 1, 28));
    DT_CHECK(col28[0] == 0 && col28[27] == 234);
    for (int i = 1; i < 27; i++)
        DT_CHECK(col28[i] >= col28[i - 1]);
}

/* A constant image stays constant through any mix of shrinking and growing. */
static void test_resize_constant_mixed(void) {
    static const int sizes[] = {1, 2, 3, 7, 28, 29, 100};
    uint8_t *src = malloc(100 * 100), *dst = malloc(100 * 100);
    memset(src, 173, 100 * 100);
    for (size_t a = 0; a < 7; a++)
        for (size_t b = 0; b < 7; b++)
            for (size_t c = 0; c < 7; c += 3) {
                int sw = sizes[a], sh = sizes[b], dw = sizes[c], dh = sizes[6 - c];
                DT_CHECK_OK(dt__gray_resize(src, sw, sh, dst, dw, dh));
                for (int i = 0; i < dw * dh; i++)
                    if (dst[i] != 173) DT_FAIL("%dx%d -> %dx%d: %d", sw, sh, dw, dh, dst[i]);
            }
    DT_CHECK_ERR(dt__gray_resize(src, 0, 1, dst, 1, 1), DT_ERR_ARG, "cannot resize");
    free(src);
    free(dst);
}

/* ---- writing ---- */

static void test_write_roundtrip(void) {
    enum { W = 28, H = 28 };
    uint8_t px[W * H];
    for (int i = 0; i < W * H; i++)
        px[i] = (uint8_t)(i * 13);
    const char *p = tmp_path("written.png");
    DT_CHECK_OK(dt__png_write_gray(p, px, W, H));
    CHECK_GRAY(p, 0, W, H, px);
    size_t len;
    unsigned char *b = slurp(p, &len);
    DT_CHECK(len > 8 && !png_sig_cmp(b, 0, 8));
    free(b);
    DT_CHECK_ERR(dt__png_write_gray(p, px, 0, H), DT_ERR_ARG, "written.png");
    DT_CHECK_ERR(dt__png_write_gray(tmp_path("no/such/dir.png"), px, W, H), DT_ERR_IO, "dir.png");
}

DT_TEST_MAIN(DT_T(test_gray8), DT_T(test_gray_low_depths), DT_T(test_gray16_all_values),
             DT_T(test_gray_alpha), DT_T(test_rgb_rgba), DT_T(test_rgb16), DT_T(test_palette),
             DT_T(test_interlaced), DT_T(test_not_png), DT_T(test_truncated), DT_T(test_corrupt),
             DT_T(test_too_large), DT_T(test_resize_copy_and_area), DT_T(test_resize_bilinear),
             DT_T(test_resize_constant_mixed), DT_T(test_write_roundtrip))
