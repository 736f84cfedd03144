/*
 * idx2png.c - write image INDEX of an IDX image file (MNIST, Fashion-MNIST; gzipped or raw)
 * as an 8-bit grayscale PNG, for examples and tests of `dtrain predict`.
 *
 *   idx2png IMAGES[.gz] INDEX OUT.png [LABELS[.gz]]
 *
 * With LABELS it prints the image's label ("label 9") on stdout. The pixels are written as
 * stored (0 = background). Exit 0 written, 1 a file cannot be read or written or INDEX is
 * out of range, 2 bad arguments.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "data/png-impl.h"

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Open an IDX file and check its header: magic 0x0803 (images) or 0x0801 (labels). */
static gzFile open_idx(const char *path, uint32_t magic, uint32_t dims[3]) {
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        fprintf(stderr, "idx2png: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    int ndims = (int)(magic & 0xff);
    unsigned char h[16];
    int want = 4 + 4 * ndims;
    if (gzread(gz, h, (unsigned)want) != want || be32(h) != magic) {
        fprintf(stderr, "idx2png: %s: not an IDX %s file\n", path, ndims == 3 ? "image" : "label");
        gzclose(gz);
        return NULL;
    }
    for (int i = 0; i < ndims; i++)
        dims[i] = be32(h + 4 + 4 * i);
    return gz;
}

/* Skip n bytes of a gz stream (gzseek would do it too, byte counts past 2 GiB aside). */
static int skip(gzFile gz, uint64_t n) {
    unsigned char buf[65536];
    while (n > 0) {
        unsigned k = n > sizeof buf ? (unsigned)sizeof buf : (unsigned)n;
        if (gzread(gz, buf, k) != (int)k) return -1;
        n -= k;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: idx2png IMAGES[.gz] INDEX OUT.png [LABELS[.gz]]\n");
        return 2;
    }
    char *end;
    errno = 0;
    unsigned long long index = strtoull(argv[2], &end, 10);
    if (errno || end == argv[2] || *end || argv[2][0] == '-') {
        fprintf(stderr, "idx2png: INDEX: expected a non-negative integer, got '%s'\n", argv[2]);
        return 2;
    }
    uint32_t dims[3];
    gzFile gz = open_idx(argv[1], 0x00000803u, dims);
    if (!gz) return 1;
    if (index >= dims[0] || dims[1] < 1 || dims[2] < 1 || dims[1] > DT__PNG_MAX_SIDE ||
        dims[2] > DT__PNG_MAX_SIDE) {
        fprintf(stderr, "idx2png: %s: no image %llu (%u images of %u x %u)\n", argv[1], index,
                dims[0], dims[1], dims[2]);
        gzclose(gz);
        return 1;
    }
    size_t npx = (size_t)dims[1] * dims[2];
    uint8_t *px = malloc(npx);
    int ok = px && skip(gz, index * npx) == 0 && gzread(gz, px, (unsigned)npx) == (int)npx;
    gzclose(gz);
    if (!ok) {
        fprintf(stderr, "idx2png: %s: cannot read image %llu (truncated?)\n", argv[1], index);
        free(px);
        return 1;
    }
    if (dt__png_write_gray(argv[3], px, (int)dims[2], (int)dims[1])) {
        fprintf(stderr, "idx2png: %s\n", dt_errmsg());
        free(px);
        return 1;
    }
    free(px);
    if (argc == 5) {
        uint32_t ldims[3];
        gzFile lz = open_idx(argv[4], 0x00000801u, ldims);
        if (!lz) return 1;
        unsigned char label;
        if (index >= ldims[0] || skip(lz, index) || gzread(lz, &label, 1) != 1) {
            fprintf(stderr, "idx2png: %s: no label %llu\n", argv[4], index);
            gzclose(lz);
            return 1;
        }
        gzclose(lz);
        printf("label %u\n", label);
    }
    return 0;
}
