/*
 * png.c - PNG images for model clients: any PNG read as 8-bit grayscale (libpng), resized
 * to a model's input, and 8-bit grayscale PNGs written.
 *
 * Design
 *
 * Reading. The 8-byte signature is checked here first, so that a file that is no PNG at all
 * says so rather than giving libpng's "Not a PNG file". libpng then reads through our own
 * read callback (a short read is "truncated PNG: unexpected end of file", not libpng's
 * "Read Error") and reports errors through an error callback that keeps the message and
 * longjmps back to decode(). decode() keeps every resource in the caller's png_reader,
 * never in its own locals, so nothing it allocated is lost or indeterminate after the
 * longjmp; the caller frees them all on one path. libpng's transformations bring every
 * colour type and depth to 8-bit RGBA: png_set_expand (palette to RGB, 1/2/4-bit gray to 8
 * bits by bit replication, tRNS to an alpha channel), png_set_scale_16 (16 to 8 bits
 * rounded: v8 = (v16 * 255 + 32895) >> 16, i.e. v16 / 257 rounded; png_test checks all
 * 65536 values), png_set_gray_to_rgb, png_set_add_alpha(255) when there is no alpha.
 * Interlaced images are de-interlaced by libpng into a full RGBA buffer, others go row by
 * row through one row buffer. No gamma or colour-space transformation: samples are taken
 * as stored.
 *
 * RGBA to gray, exact integers (python/dtrain_serving_client.py repeats it):
 *   L = (19595 R + 38470 G + 7471 B + 32768) >> 16      (ITU-R 601 luma, Pillow's "L")
 *   v = (L A + 127) / 255                                 (composited on black)
 * or with DT__PNG_FLAG_INVERT (dark items on light paper):
 *   v = 255 - (L A + 255 (255 - A) + 127) / 255           (composited on white, inverted)
 * so a transparent pixel is background (0) either way, as in Fashion-MNIST, whose images are
 * light items on a black background. A gray pixel (R = G = B) keeps its value.
 *
 * Resizing is separable: rows first into a double buffer (sh x dw), then columns. Each axis
 * has, per output sample, its taps (first source sample, count, weights):
 *   shrink (dn < sn): area averaging. Output x covers [x sn, (x+1) sn) in units of 1/dn
 *     source sample; source j covers [j dn, (j+1) dn); weight = overlap / sn.
 *   grow (dn > sn): bilinear on pixel centres: src = ((2x+1) sn - dn) / (2 dn), clamped to
 *     [0, sn-1]; weights (d - r) / d and r / d with d = 2 dn, r the remainder.
 *   equal: one tap of weight 1.
 * Weights are quotients of exact integers; each output is acc = 0.0, acc += w * sample in
 * tap order (no fused multiply-add: CMake builds this file with -ffp-contract=off), then
 * floor(acc + 0.5) clamped to 0..255. IEEE doubles make the Python client's result the same.
 *
 * Writing goes into a growing memory buffer through libpng's write callback, then to disk
 * with dt__write_file_atomic.
 */
#include "data/png-impl.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "core/file-impl.h"

/* ---- reading ---- */

typedef struct png_reader {
    const char *path;
    FILE *f;
    png_structp png;
    png_infop info;
    char msg[256];   /* libpng's error message, or ours */
    char iomsg[128]; /* the read callback's message (outlives the png_error call) */
    int eof, ioerr;  /* the read callback failed: the file ends early, a read error */
    int w, h;
    unsigned flags;
    uint8_t *gray;    /* the result: w * h */
    uint8_t *rgba;    /* one row (not interlaced) or the whole image (interlaced) */
    png_bytep *rows;  /* interlaced: row pointers into rgba */
    dt_err limit_err; /* set when decode refuses the image itself (not libpng) */
} png_reader;

static void on_error(png_structp png, png_const_charp msg) {
    png_reader *r = png_get_error_ptr(png);
    snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "unknown error");
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg; /* warnings (a bad ancillary chunk) do not stop the read */
}

static void on_read(png_structp png, png_bytep data, size_t len) {
    png_reader *r = png_get_io_ptr(png);
    if (fread(data, 1, len, r->f) == len) return;
    if (ferror(r->f)) {
        r->ioerr = 1;
        snprintf(r->iomsg, sizeof r->iomsg, "read error: %s", strerror(errno));
    } else {
        r->eof = 1;
        snprintf(r->iomsg, sizeof r->iomsg, "unexpected end of file");
    }
    png_error(png, r->iomsg);
}

static void rgba_to_gray(const uint8_t *rgba, uint8_t *gray, int w, unsigned flags) {
    for (int x = 0; x < w; x++, rgba += 4) {
        uint32_t l = (19595u * rgba[0] + 38470u * rgba[1] + 7471u * rgba[2] + 32768u) >> 16;
        uint32_t a = rgba[3];
        gray[x] =
            (uint8_t)(flags & DT__PNG_FLAG_INVERT ? 255u - (l * a + 255u * (255u - a) + 127u) / 255u
                                                  : (l * a + 127u) / 255u);
    }
}

/* Everything libpng does, under its setjmp: 0 done, -1 libpng failed (r->msg), -2 refused
 * here (r->limit_err, r->msg). Only r's fields change after setjmp. */
static int decode(png_reader *r) {
    if (setjmp(png_jmpbuf(r->png))) return -1;
    png_set_read_fn(r->png, r, on_read);
    png_set_sig_bytes(r->png, 8);
    png_read_info(r->png, r->info);
    png_uint_32 w = png_get_image_width(r->png, r->info);
    png_uint_32 h = png_get_image_height(r->png, r->info);
    if (w > DT__PNG_MAX_SIDE || h > DT__PNG_MAX_SIDE ||
        (uint64_t)w * h > (uint64_t)DT__PNG_MAX_PIXELS) {
        snprintf(r->msg, sizeof r->msg,
                 "image %u x %u is too large (at most %d pixels a side, %ld in all)", (unsigned)w,
                 (unsigned)h, DT__PNG_MAX_SIDE, (long)DT__PNG_MAX_PIXELS);
        r->limit_err = DT_ERR_ARG;
        return -2;
    }
    r->w = (int)w;
    r->h = (int)h;
    int interlaced = png_get_interlace_type(r->png, r->info) != PNG_INTERLACE_NONE;

    png_set_expand(r->png);
    png_set_scale_16(r->png);
    png_set_gray_to_rgb(r->png);
    png_set_add_alpha(r->png, 0xff, PNG_FILLER_AFTER);
    int passes = png_set_interlace_handling(r->png);
    png_read_update_info(r->png, r->info);
    size_t rowbytes = png_get_rowbytes(r->png, r->info);
    if (rowbytes != (size_t)r->w * 4 || png_get_bit_depth(r->png, r->info) != 8) {
        snprintf(r->msg, sizeof r->msg, "unexpected layout after conversion to RGBA");
        r->limit_err = DT_ERR_FORMAT;
        return -2;
    }
    size_t npx = (size_t)r->w * (size_t)r->h;
    if (!(r->gray = malloc(npx ? npx : 1))) goto nomem;
    if (!interlaced && passes == 1) {
        if (!(r->rgba = malloc(rowbytes))) goto nomem;
        for (int y = 0; y < r->h; y++) {
            png_read_row(r->png, r->rgba, NULL);
            rgba_to_gray(r->rgba, r->gray + (size_t)y * (size_t)r->w, r->w, r->flags);
        }
    } else {
        if (!(r->rgba = malloc(rowbytes * (size_t)r->h))) goto nomem;
        if (!(r->rows = malloc((size_t)r->h * sizeof *r->rows))) goto nomem;
        for (int y = 0; y < r->h; y++)
            r->rows[y] = r->rgba + (size_t)y * rowbytes;
        png_read_image(r->png, r->rows);
        for (int y = 0; y < r->h; y++)
            rgba_to_gray(r->rows[y], r->gray + (size_t)y * (size_t)r->w, r->w, r->flags);
    }
    return 0;
nomem:
    snprintf(r->msg, sizeof r->msg, "out of memory for a %d x %d image", r->w, r->h);
    r->limit_err = DT_ERR_NOMEM;
    return -2;
}

dt_err dt__png_read_gray(const char *path, unsigned flags, dt__gray_image *out) {
    memset(out, 0, sizeof *out);
    dt_err err = dt__check_regular(path);
    if (err) return err;
    png_reader r = {.path = path, .flags = flags};
    if (!(r.f = fopen(path, "rb")))
        return dt_err_set(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char sig[8];
    size_t n = fread(sig, 1, sizeof sig, r.f);
    if (n < sizeof sig && ferror(r.f)) {
        err = dt_err_set(DT_ERR_IO, "%s: read error: %s", path, strerror(errno));
        goto end;
    }
    if (n < sizeof sig || png_sig_cmp(sig, 0, sizeof sig)) {
        err = n >= 4 && png_sig_cmp(sig, 0, 4) == 0
                  ? dt_err_set(DT_ERR_FORMAT, "%s: not a PNG file (damaged signature)", path)
                  : dt_err_set(DT_ERR_FORMAT, "%s: not a PNG file (no PNG signature)", path);
        goto end;
    }
    r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, on_error, on_warning);
    if (!r.png || !(r.info = png_create_info_struct(r.png))) {
        err = dt_err_set(DT_ERR_NOMEM, "%s: out of memory creating a PNG reader", path);
        goto end;
    }
    int rc = decode(&r);
    if (rc == -1) {
        err = r.ioerr ? dt_err_set(DT_ERR_IO, "%s: %s", path, r.msg)
              : r.eof ? dt_err_set(DT_ERR_FORMAT, "%s: truncated PNG: %s", path, r.msg)
                      : dt_err_set(DT_ERR_FORMAT, "%s: corrupt PNG: %s", path, r.msg);
        goto end;
    }
    if (rc == -2) {
        err = dt_err_set(r.limit_err, "%s: %s", path, r.msg);
        goto end;
    }
    out->w = r.w;
    out->h = r.h;
    out->px = r.gray;
    r.gray = NULL;
end:
    if (r.png) png_destroy_read_struct(&r.png, r.info ? &r.info : NULL, NULL);
    free(r.rows);
    free(r.rgba);
    free(r.gray);
    fclose(r.f);
    return err;
}

void dt__gray_image_free(dt__gray_image *img) {
    if (!img) return;
    free(img->px);
    memset(img, 0, sizeof *img);
}

/* ---- resizing ---- */

typedef struct axis_taps {
    int *first, *count, *off; /* per output sample */
    double *w;                /* the weights, from off[i] */
} axis_taps;

static void taps_free(axis_taps *t) {
    free(t->first);
    free(t->count);
    free(t->off);
    free(t->w);
}

static dt_err taps_make(axis_taps *t, int sn, int dn) {
    memset(t, 0, sizeof *t);
    t->first = malloc((size_t)dn * sizeof *t->first);
    t->count = malloc((size_t)dn * sizeof *t->count);
    t->off = malloc((size_t)dn * sizeof *t->off);
    t->w = malloc(((size_t)sn + 2 * (size_t)dn) * sizeof *t->w); /* area: < sn + dn taps */
    if (!t->first || !t->count || !t->off || !t->w) {
        taps_free(t);
        return dt_err_set(DT_ERR_NOMEM, "out of memory resizing an image");
    }
    int k = 0;
    for (int x = 0; x < dn; x++) {
        t->off[x] = k;
        if (dn == sn) {
            t->first[x] = x, t->count[x] = 1, t->w[k++] = 1.0;
        } else if (dn < sn) {
            int64_t lo = (int64_t)x * sn, hi = lo + sn;
            int64_t j0 = lo / dn, j1 = (hi - 1) / dn;
            t->first[x] = (int)j0;
            t->count[x] = (int)(j1 - j0 + 1);
            for (int64_t j = j0; j <= j1; j++) {
                int64_t a = j * dn > lo ? j * dn : lo, b = (j + 1) * dn < hi ? (j + 1) * dn : hi;
                t->w[k++] = (double)(b - a) / (double)sn;
            }
        } else {
            int64_t num = (2 * (int64_t)x + 1) * sn - dn, den = 2 * (int64_t)dn;
            int64_t j0 = num > 0 ? num / den : 0, rem = num > 0 ? num % den : 0;
            if (num <= 0 || j0 >= sn - 1 || rem == 0) {
                t->first[x] = num <= 0 ? 0 : j0 >= sn - 1 ? sn - 1 : (int)j0;
                t->count[x] = 1;
                t->w[k++] = 1.0;
            } else {
                t->first[x] = (int)j0;
                t->count[x] = 2;
                t->w[k++] = (double)(den - rem) / (double)den;
                t->w[k++] = (double)rem / (double)den;
            }
        }
    }
    return DT_OK;
}

dt_err dt__gray_resize(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh) {
    if (sw < 1 || sh < 1 || dw < 1 || dh < 1)
        return dt_err_set(DT_ERR_ARG, "cannot resize %d x %d to %d x %d", sw, sh, dw, dh);
    axis_taps tx, ty;
    dt_err err = taps_make(&tx, sw, dw);
    if (err) return err;
    if ((err = taps_make(&ty, sh, dh))) {
        taps_free(&tx);
        return err;
    }
    double *tmp = malloc((size_t)sh * (size_t)dw * sizeof *tmp);
    if (!tmp) {
        err = dt_err_set(DT_ERR_NOMEM, "out of memory resizing an image");
        goto end;
    }
    for (int y = 0; y < sh; y++) {
        const uint8_t *row = src + (size_t)y * (size_t)sw;
        for (int x = 0; x < dw; x++) {
            double acc = 0.0;
            const double *w = tx.w + tx.off[x];
            for (int t = 0; t < tx.count[x]; t++)
                acc += w[t] * (double)row[tx.first[x] + t];
            tmp[(size_t)y * (size_t)dw + (size_t)x] = acc;
        }
    }
    for (int y = 0; y < dh; y++) {
        const double *w = ty.w + ty.off[y];
        for (int x = 0; x < dw; x++) {
            double acc = 0.0;
            for (int t = 0; t < ty.count[y]; t++)
                acc += w[t] * tmp[(size_t)(ty.first[y] + t) * (size_t)dw + (size_t)x];
            double v = floor(acc + 0.5);
            dst[(size_t)y * (size_t)dw + (size_t)x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
end:
    free(tmp);
    taps_free(&ty);
    taps_free(&tx);
    return err;
}

/* ---- writing ---- */

typedef struct png_writer {
    unsigned char *buf;
    size_t len, cap;
    int oom;
    char msg[256];
    png_bytep *rows;
} png_writer;

static void on_write(png_structp png, png_bytep data, size_t len) {
    png_writer *wr = png_get_io_ptr(png);
    if (len > wr->cap - wr->len) {
        size_t cap = wr->cap ? wr->cap : 4096;
        while (cap - wr->len < len)
            cap *= 2;
        unsigned char *b = realloc(wr->buf, cap);
        if (!b) {
            wr->oom = 1;
            png_error(png, "out of memory");
        }
        wr->buf = b;
        wr->cap = cap;
    }
    memcpy(wr->buf + wr->len, data, len);
    wr->len += len;
}

static void on_flush(png_structp png) {
    (void)png;
}

static void on_write_error(png_structp png, png_const_charp msg) {
    png_writer *wr = png_get_error_ptr(png);
    snprintf(wr->msg, sizeof wr->msg, "%s", msg ? msg : "unknown error");
    png_longjmp(png, 1);
}

/* libpng's part of writing, under its setjmp (only wr's fields change after it). */
static int encode(png_structp png, png_infop info, png_writer *wr, const uint8_t *px, int w,
                  int h) {
    if (setjmp(png_jmpbuf(png))) return -1;
    png_set_write_fn(png, wr, on_write, on_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_GRAY,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    for (int y = 0; y < h; y++)
        wr->rows[y] = (png_bytep)(px + (size_t)y * (size_t)w);
    png_set_rows(png, info, wr->rows);
    png_write_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
    return 0;
}

dt_err dt__png_write_gray(const char *path, const uint8_t *px, int w, int h) {
    if (w < 1 || h < 1 || w > DT__PNG_MAX_SIDE || h > DT__PNG_MAX_SIDE)
        return dt_err_set(DT_ERR_ARG, "%s: cannot write a %d x %d image", path, w, h);
    dt_err err = DT_OK;
    png_writer wr = {0};
    png_infop info = NULL;
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, &wr, on_write_error, on_warning);
    if (!png || !(info = png_create_info_struct(png)) ||
        !(wr.rows = malloc((size_t)h * sizeof *wr.rows))) {
        err = dt_err_set(DT_ERR_NOMEM, "%s: out of memory writing a PNG", path);
        goto end;
    }
    if (encode(png, info, &wr, px, w, h)) {
        err = dt_err_set(wr.oom ? DT_ERR_NOMEM : DT_ERR_IO, "%s: cannot encode the PNG: %s", path,
                         wr.msg);
        goto end;
    }
    err = dt__write_file_atomic(path, wr.buf, wr.len);
end:
    if (png) png_destroy_write_struct(&png, info ? &info : NULL);
    free(wr.rows);
    free(wr.buf);
    return err;
}
