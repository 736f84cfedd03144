/*
 * idx.c - the IDX reader (MNIST, Fashion-MNIST), gzip-compressed or raw.
 *
 * Format: a big-endian header, magic 00 00 <type> <ndims>, then ndims big-endian uint32
 * dimensions, then the elements in row-major order. dtrain reads images (magic 0x00000803:
 * unsigned bytes, 3 dimensions count x rows x cols) and labels (0x00000801: unsigned bytes,
 * 1 dimension count).
 *
 * Design: both files are opened with zlib's gzopen, whose gzread decompresses gzip content
 * (detected by its 1f 8b magic) and passes any other file through unchanged. Nothing is
 * trusted: both headers are checked before anything is allocated (magic, element type,
 * dimension count, non-zero dimensions, total size at most DT_IDX_MAX_BYTES and at most what
 * the file's size can hold even compressed, image and label counts equal), then the pixels are streamed through one DT_IDX_CHUNK byte buffer straight
 * into the float array, so the peak is the float dataset plus one chunk, never a full uint8
 * copy next to the float copy (Fashion-MNIST train: 188 MB of floats, 47 MB of bytes).
 *
 * Errors: a short read is a truncated file (a raw file that ends early, or a gzip stream
 * that ends early, which zlib reports as Z_BUF_ERROR "unexpected end of file"); any other
 * zlib error is a corrupt gzip stream (DT_ERR_FORMAT) or a read error (DT_ERR_IO). After the
 * last record one more read must find the end of the data (which also makes zlib check the
 * gzip CRC), otherwise the file is longer than its header says. Messages name the file and
 * the 0-based record where reading stopped ("ends at image 5012 of 60000": images 0..5011
 * are complete).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/file-impl.h"
#include "data/data-impl.h"

/* The largest IDX payload accepted, in bytes (= elements): 16 GiB, far above any real set. */
#define DT_IDX_MAX_BYTES (1ULL << 34)
/* Bytes per read: pixels are streamed through a buffer of this size. */
#define DT_IDX_CHUNK ((size_t)1 << 20)
/* deflate's largest expansion (a run of one byte) is 1032:1: the most data a file holds. */
#define DT_IDX_MAX_RATIO 1032u
/* The IDX element type code of unsigned bytes. */
#define DT_IDX_UBYTE 0x08u

typedef struct idx_file {
    const char *path;
    const char *what; /* "image" or "label": names the file kind and its records */
    gzFile gz;
    int ndims;
    uint32_t dims[3];
    uint64_t count;        /* dims[0]: the number of records */
    uint64_t record_bytes; /* bytes per record: rows * cols for images, 1 for labels */
} idx_file;

/* Read up to len bytes into buf; *got is the count read, short only when the data ends.
 * A corrupt gzip stream or a read error is an error; `at` says where, for its message. */
static dt_err idx_read(idx_file *f, void *buf, size_t len, size_t *got, const char *at) {
    *got = 0;
    while (*got < len) {
        size_t want = len - *got;
        if (want > (size_t)INT_MAX / 2) want = (size_t)INT_MAX / 2;
        int r = gzread(f->gz, (unsigned char *)buf + *got, (unsigned)want);
        int zerr = Z_OK;
        const char *zmsg = gzerror(f->gz, &zerr);
        /* Z_BUF_ERROR: a gzip stream that ends early; the caller sees a short count */
        if (r < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR)) {
            if (zerr == Z_ERRNO)
                return dt_err_set(DT_ERR_IO, "%s: read error %s: %s", f->path, at, strerror(errno));
            if (zerr == Z_MEM_ERROR)
                return dt_err_set(DT_ERR_NOMEM, "%s: zlib out of memory %s", f->path, at);
            /* zlib's message is "<path>: <what>": keep only <what> */
            size_t plen = strlen(f->path);
            if (zmsg && !strncmp(zmsg, f->path, plen) && !strncmp(zmsg + plen, ": ", 2))
                zmsg += plen + 2;
            return dt_err_set(DT_ERR_FORMAT, "%s: corrupt gzip data %s: %s", f->path, at,
                              zmsg && *zmsg ? zmsg : "unknown zlib error");
        }
        if (r == 0) break;
        *got += (size_t)r;
    }
    return DT_OK;
}

/* " (the gzip stream ends early)" when zlib saw a truncated gzip stream, else "". */
static const char *idx_trunc_note(idx_file *f) {
    int zerr = Z_OK;
    gzerror(f->gz, &zerr);
    return zerr == Z_BUF_ERROR ? " (the gzip stream ends early)" : "";
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Open path and check its header: magic 0x0000 08 <ndims>, non-zero dimensions, total size
 * within DT_IDX_MAX_BYTES. On error f->gz may be open; the caller closes it. */
static dt_err idx_open(idx_file *f, const char *path, const char *what, int ndims) {
    static const char *const dim_names[2][3] = {{"label count"}, {"image count", "rows", "cols"}};
    const char *const *names = dim_names[ndims == 3];
    f->path = path;
    f->what = what;
    f->ndims = ndims;
    dt_err cerr = dt__check_regular(path);
    if (cerr) return cerr;
    errno = 0;
    f->gz = gzopen(path, "rb");
    if (!f->gz)
        return dt_err_set(DT_ERR_IO, "%s: cannot open: %s", path,
                          errno ? strerror(errno) : "out of memory");

    unsigned char hdr[4 * 3];
    size_t got;
    dt_err err = idx_read(f, hdr, 4, &got, "in the header");
    if (err) return err;
    if (got < 4)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: file ends inside the IDX header (%zu of 4 magic bytes)%s", path, got,
                          idx_trunc_note(f));
    uint32_t magic = be32(hdr);
    uint32_t want = DT_IDX_UBYTE << 8 | (uint32_t)ndims;
    if (magic != want) {
        char why[96];
        if (magic >> 16)
            snprintf(why, sizeof why, "not an IDX file");
        else if ((magic >> 8 & 0xff) != DT_IDX_UBYTE)
            snprintf(why, sizeof why, "element type 0x%02x is not unsigned bytes (0x08)",
                     (unsigned)(magic >> 8 & 0xff));
        else
            snprintf(why, sizeof why, "%u dimension%s instead of %d", (unsigned)(magic & 0xff),
                     (magic & 0xff) == 1 ? "" : "s", ndims);
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: expected an IDX %s file (magic 0x%08x), got 0x%08x: %s", path, what,
                          (unsigned)want, (unsigned)magic, why);
    }

    size_t hlen = 4 * (size_t)ndims;
    err = idx_read(f, hdr, hlen, &got, "in the header");
    if (err) return err;
    if (got < hlen)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: file ends inside the IDX header (%zu of %zu dimension bytes)%s",
                          path, got, hlen, idx_trunc_note(f));
    for (int i = 0; i < ndims; i++) {
        f->dims[i] = be32(hdr + 4 * i);
        if (f->dims[i] == 0)
            return dt_err_set(DT_ERR_FORMAT, "%s: IDX header: %s is 0", path, names[i]);
    }
    /* each factor < 2^32 and the running product <= 2^34: never overflows 64 bits */
    uint64_t total = 1;
    for (int i = 0; i < ndims; i++) {
        total *= f->dims[i];
        if (total > DT_IDX_MAX_BYTES) {
            char dims[64] = "";
            for (int j = 0, off = 0; j < ndims; j++)
                off += snprintf(dims + off, sizeof dims - (size_t)off, "%s%u", j ? " x " : "",
                                (unsigned)f->dims[j]);
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: IDX header: dimensions %s exceed the limit of %llu bytes", path,
                              dims, (unsigned long long)DT_IDX_MAX_BYTES);
        }
    }
    /* The floats are allocated before the data is read: a header that promises more than
     * the file can hold (raw, or gzip, which deflate expands at most DT_IDX_MAX_RATIO:1)
     * is refused first, not a few-byte file made to allocate gigabytes. */
    struct stat st;
    if (stat(path, &st) == 0 && total > (uint64_t)st.st_size * DT_IDX_MAX_RATIO)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: IDX header: %llu %s bytes cannot be in a file of %lld bytes "
                          "(even gzip-compressed)",
                          path, (unsigned long long)total, what, (long long)st.st_size);
    f->count = f->dims[0];
    f->record_bytes = total / f->count;
    return DT_OK;
}

/* After the last record: the data must end here. Reading on also makes zlib verify the
 * gzip trailer (CRC and length). */
static dt_err idx_expect_end(idx_file *f) {
    unsigned char extra;
    size_t got;
    char at[96];
    snprintf(at, sizeof at, "after the last %s (%llu)", f->what, (unsigned long long)f->count);
    dt_err err = idx_read(f, &extra, 1, &got, at);
    if (err) return err;
    if (got)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: trailing data: the file is longer than its header says (%llu %ss "
                          "of %llu bytes)",
                          f->path, (unsigned long long)f->count, f->what,
                          (unsigned long long)f->record_bytes);
    return DT_OK;
}

/* Stream the images into x as floats, one chunk at a time. */
static dt_err idx_read_images(idx_file *f, float *x, unsigned char *buf) {
    uint64_t total = f->count * f->record_bytes, done = 0;
    while (done < total) {
        size_t want = total - done < DT_IDX_CHUNK ? (size_t)(total - done) : DT_IDX_CHUNK;
        char at[96];
        snprintf(at, sizeof at, "in images %llu to %llu of %llu",
                 (unsigned long long)(done / f->record_bytes),
                 (unsigned long long)((done + want - 1) / f->record_bytes),
                 (unsigned long long)f->count);
        size_t got;
        dt_err err = idx_read(f, buf, want, &got, at);
        if (err) return err;
        for (size_t i = 0; i < got; i++)
            x[done + i] = (float)buf[i];
        done += got;
        if (got < want)
            return dt_err_set(DT_ERR_FORMAT, "%s: file ends early: it ends at image %llu of %llu%s",
                              f->path, (unsigned long long)(done / f->record_bytes),
                              (unsigned long long)f->count, idx_trunc_note(f));
    }
    return idx_expect_end(f);
}

/* Read the labels; *max_label gets the largest. */
static dt_err idx_read_labels(idx_file *f, int32_t *labels, unsigned char *buf, int *max_label) {
    uint64_t done = 0;
    int max = 0;
    while (done < f->count) {
        size_t want = f->count - done < DT_IDX_CHUNK ? (size_t)(f->count - done) : DT_IDX_CHUNK;
        char at[96];
        snprintf(at, sizeof at, "in labels %llu to %llu of %llu", (unsigned long long)done,
                 (unsigned long long)(done + want - 1), (unsigned long long)f->count);
        size_t got;
        dt_err err = idx_read(f, buf, want, &got, at);
        if (err) return err;
        for (size_t i = 0; i < got; i++) {
            labels[done + i] = buf[i];
            if (buf[i] > max) max = buf[i];
        }
        done += got;
        if (got < want)
            return dt_err_set(DT_ERR_FORMAT, "%s: file ends early: it ends at label %llu of %llu%s",
                              f->path, (unsigned long long)done, (unsigned long long)f->count,
                              idx_trunc_note(f));
    }
    *max_label = max;
    return idx_expect_end(f);
}

dt_err dt_dataset_load_idx(dt_dataset **out, const char *images_path, const char *labels_path) {
    idx_file img = {0}, lab = {0};
    dt_dataset *d = NULL;
    unsigned char *buf = NULL;
    dt_err err = idx_open(&img, images_path, "image", 3);
    if (err) goto end;
    err = idx_open(&lab, labels_path, "label", 1);
    if (err) goto end;
    if (img.count != lab.count) {
        err = dt_err_set(DT_ERR_FORMAT, "%s has %llu images but %s has %llu labels", images_path,
                         (unsigned long long)img.count, labels_path, (unsigned long long)lab.count);
        goto end;
    }
    dt_shape sample = dt_shape_make(3, (int64_t[]){img.dims[1], img.dims[2], 1});
    err = dt__dataset_alloc(&d, (int64_t)img.count, &sample, 1, 0);
    if (err) {
        dt_err_wrap(err, "%s", images_path);
        goto end;
    }
    buf = malloc(DT_IDX_CHUNK);
    if (!buf) {
        err = dt_err_set(DT_ERR_NOMEM, "%s: cannot allocate a read buffer", images_path);
        goto end;
    }
    err = idx_read_images(&img, d->x, buf);
    if (err) goto end;
    int max_label = 0;
    err = idx_read_labels(&lab, d->labels, buf, &max_label);
    if (err) goto end;
    d->num_classes = max_label + 1; /* unsigned bytes: at most 256 */
    *out = d;
    d = NULL;
end:
    free(buf);
    dt_dataset_free(d);
    if (lab.gz) gzclose(lab.gz);
    if (img.gz) gzclose(img.gz);
    return err;
}
