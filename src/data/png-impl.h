/* png-impl.h - PNG images for model clients (dtrain predict, tests/tools/idx2png): any PNG
 * read as 8-bit grayscale, resized to a model's input, and 8-bit grayscale PNGs written.
 * Not part of the public API.
 *
 * The conversion is exact integer arithmetic and the resize is a fixed sequence of double
 * operations, so python/dtrain_serving_client.py, which repeats it step by step, gets the
 * same bytes (png.c's design comment has the formulas). */
#ifndef DTRAIN_PNG_IMPL_H
#define DTRAIN_PNG_IMPL_H

#include <stdint.h>

#include "dtrain/err.h"

/* The largest image read: at most DT__PNG_MAX_SIDE pixels a side, DT__PNG_MAX_PIXELS in all. */
#define DT__PNG_MAX_SIDE 32768
#define DT__PNG_MAX_PIXELS (1L << 25)

/* An 8-bit grayscale image: w * h bytes, row-major, 0 = black. */
typedef struct dt__gray_image {
    int w, h;
    uint8_t *px;
} dt__gray_image;

/* Flags of dt__png_read_gray. */
enum dt__png_flag {
    /* Dark items on a light background: composite on white and invert (v -> 255 - v), so
     * that the background becomes 0 as in Fashion-MNIST. */
    DT__PNG_FLAG_INVERT = 1u << 0,
};

/* Read any PNG (grayscale, gray+alpha, RGB, RGBA, palette, 1 to 16 bits, interlaced or not)
 * as 8-bit grayscale into *out (caller frees with dt__gray_image_free): luma
 * (19595 R + 38470 G + 7471 B + 32768) >> 16 of the 8-bit samples (16-bit samples scaled with
 * rounding; gAMA, cHRM and iCCP ignored), alpha composited on black (transparent pixels are
 * background). Errors name the file: DT_ERR_IO (cannot open or read it, not a regular file),
 * DT_ERR_FORMAT (not a PNG, or corrupt or truncated: libpng's reason), DT_ERR_ARG (larger
 * than DT__PNG_MAX_SIDE / DT__PNG_MAX_PIXELS), DT_ERR_NOMEM. *out is zeroed on failure. */
dt_err dt__png_read_gray(const char *path, unsigned flags, dt__gray_image *out);

/* Free the pixels and zero the image; NULL or an empty image: no-op. */
void dt__gray_image_free(dt__gray_image *img);

/* Resize src (sw x sh) into dst (dw x dh bytes, caller's): each axis on its own, area
 * averaging when it shrinks, bilinear (pixel centres, edges clamped) when it grows, a copy
 * when equal; rounded to the nearest integer. DT_ERR_ARG for a size < 1, DT_ERR_NOMEM. */
dt_err dt__gray_resize(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh);

/* Write w x h 8-bit gray pixels as a PNG (non-interlaced, no ancillary chunks) to path,
 * atomically (dt__write_file_atomic). DT_ERR_ARG (bad size), DT_ERR_IO, DT_ERR_NOMEM. */
dt_err dt__png_write_gray(const char *path, const uint8_t *px, int w, int h);

#endif
