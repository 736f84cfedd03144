/*
 * safetensors.c - reading and writing safetensors files (F32 tensors only).
 *
 * Layout (https://github.com/huggingface/safetensors):
 *   bytes [0, 8)        N, the header length, unsigned 64-bit little-endian
 *   bytes [8, 8+N)      a JSON object, UTF-8, padded with spaces so that 8+N is a multiple
 *                       of 8 (the data then starts 8-byte aligned):
 *                         {"__metadata__": {"key": "value", ...},
 *                          "<name>": {"dtype": "F32", "shape": [d0, ...],
 *                                     "data_offsets": [begin, end]}, ...}
 *   bytes [8+N, EOF)    the data section: each tensor's elements, row-major, little-endian,
 *                       at [begin, end) relative to the start of the section
 *
 * Writing: the header is built with jansson (objects keep insertion order, so tensors appear
 * in the caller's order and the data follows in the same order), then everything goes to a
 * temporary file created with mkstemp in the target's directory; every write is checked,
 * the file is flushed and fsync'ed, renamed over the target (atomic on POSIX), and the
 * directory is fsync'ed so that the rename itself is durable. On any failure the temporary
 * file is removed and the target is untouched.
 *
 * Reading: the whole file is read into one buffer, the header is parsed with jansson
 * (duplicate keys rejected), and every entry is validated before anything is handed out:
 * dtype F32, a shape of at most DT_MAX_DIMS non-negative integers, offsets inside the data
 * section with end - begin == 4 * numel, and the tensors tiling the data section exactly
 * (no overlap, no hole, no trailing bytes), as the format requires. Tensors are then views
 * into the buffer. A header longer than the file or than 100 MB is refused before parsing.
 * If the data section does not start 4-byte aligned (another writer did not pad), it is
 * moved to an aligned position within the buffer (slack is allocated for that).
 *
 * The host must be little-endian (checked at compile time); data is copied as is.
 */
#include "dtrain/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/assert-impl.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define HEADER_MAX ((uint64_t)100 * 1024 * 1024)
#define META_KEY "__metadata__"

typedef struct st_entry {
    const char *name; /* a key of root, owned by it */
    dt_tensor t;      /* a view into buf */
    uint64_t begin, end;
} st_entry;

struct dt_safetensors {
    char *path;
    unsigned char *buf; /* the whole file, plus slack for realignment */
    json_t *root;
    json_t *meta; /* borrowed from root; NULL when the file has none */
    st_entry *e;
    int n;
};

/* ---- writing ---- */

/* "dir/.name.tmp-XXXXXX" for a target "dir/name"; dir_out gets "dir" (or "."). */
static dt_err temp_names(const char *path, char **tmpl_out, char **dir_out) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dirlen = slash ? (size_t)(slash - path) : 0;
    size_t len = strlen(path) + 16;
    char *tmpl = malloc(len);
    char *dir = malloc(dirlen + 2);
    if (!tmpl || !dir) {
        free(tmpl);
        free(dir);
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    if (!slash)
        strcpy(dir, ".");
    else if (dirlen == 0)
        strcpy(dir, "/");
    else {
        memcpy(dir, path, dirlen);
        dir[dirlen] = '\0';
    }
    snprintf(tmpl, len, "%.*s.%s.tmp-XXXXXX", (int)(base - path), path, base);
    *tmpl_out = tmpl;
    *dir_out = dir;
    return DT_OK;
}

static dt_err build_header(const char *path, const dt_st_tensor *tensors, int ntensors,
                           const dt_st_meta *meta, int nmeta, char **out) {
    dt_err err = DT_ERR_NOMEM;
    json_t *root = json_object(), *jmeta = NULL;
    if (!root) goto nomem;
    if (nmeta > 0) {
        if (!(jmeta = json_object()) || json_object_set_new(root, META_KEY, jmeta)) goto nomem;
        for (int i = 0; i < nmeta; i++) {
            DT_ASSERT(meta[i].key && meta[i].value);
            if (json_object_get(jmeta, meta[i].key)) {
                err = dt_err_set(DT_ERR_ARG, "%s: metadata key %s given twice", path,
                                 meta[i].key);
                goto fail;
            }
            json_t *v = json_string(meta[i].value);
            if (!v || json_object_set_new(jmeta, meta[i].key, v)) {
                err = dt_err_set(DT_ERR_ARG, "%s: metadata %s: key or value is not UTF-8", path,
                                 meta[i].key);
                goto fail;
            }
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < ntensors; i++) {
        const char *name = tensors[i].name;
        const dt_tensor *t = tensors[i].t;
        DT_ASSERT(name && t);
        if (!strcmp(name, META_KEY) || json_object_get(root, name)) {
            err = dt_err_set(DT_ERR_ARG, "%s: tensor name %s is %s", path, name,
                             strcmp(name, META_KEY) ? "given twice" : "reserved");
            goto fail;
        }
        json_t *entry = json_object();
        if (!entry) goto nomem;
        if (json_object_set_new(root, name, entry)) { /* consumes entry */
            err = dt_err_set(DT_ERR_ARG, "%s: tensor name %s is not UTF-8", path, name);
            goto fail;
        }
        json_t *shape = json_array();
        if (json_object_set_new(entry, "dtype", json_string("F32"))) {
            json_decref(shape);
            goto nomem;
        }
        if (json_object_set_new(entry, "shape", shape)) goto nomem;
        for (int d = 0; d < t->shape.ndim; d++)
            if (json_array_append_new(shape, json_integer(t->shape.dim[d]))) goto nomem;
        uint64_t bytes = (uint64_t)dt_tensor_numel(t) * sizeof(float);
        json_t *offs = json_pack("[II]", (json_int_t)off, (json_int_t)(off + bytes));
        if (!offs || json_object_set_new(entry, "data_offsets", offs)) goto nomem;
        off += bytes;
    }
    /* jansson >= 2.8 keeps insertion order; JSON_PRESERVE_ORDER is kept for older ones */
    *out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!*out) goto nomem;
    json_decref(root);
    return DT_OK;
nomem:
    err = dt_err_set(DT_ERR_NOMEM, "%s: out of memory building the header", path);
fail:
    json_decref(root);
    return err;
}

static int write_all(FILE *f, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, f) == n;
}

dt_err dt_safetensors_write(const char *path, const dt_st_tensor *tensors, int ntensors,
                            const dt_st_meta *meta, int nmeta) {
    DT_ASSERT(path && ntensors >= 0 && nmeta >= 0);
    char *header = NULL, *tmpl = NULL, *dir = NULL;
    FILE *f = NULL;
    int fd = -1, created = 0;
    dt_err err = build_header(path, tensors, ntensors, meta, nmeta, &header);
    if (err) return err;
    if ((err = temp_names(path, &tmpl, &dir))) goto out;

    fd = mkstemp(tmpl);
    if (fd < 0) {
        err = dt_err_set(DT_ERR_IO, "%s: cannot create a temporary file in %s: %s", path, dir,
                         strerror(errno));
        goto out;
    }
    created = 1;
    /* mkstemp makes the file 0600; a checkpoint is an ordinary file */
    if (fchmod(fd, 0644) != 0) {
        err = dt_err_set(DT_ERR_IO, "%s: chmod %s: %s", path, tmpl, strerror(errno));
        goto out;
    }
    if (!(f = fdopen(fd, "wb"))) {
        err = dt_err_set(DT_ERR_IO, "%s: %s", path, strerror(errno));
        goto out;
    }
    fd = -1; /* owned by f now */

    size_t hlen = strlen(header);
    size_t padded = (hlen + 7) & ~(size_t)7;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = "        ";
    int ok = write_all(f, len8, 8) && write_all(f, header, hlen) &&
             write_all(f, spaces, padded - hlen);
    for (int i = 0; ok && i < ntensors; i++) {
        const dt_tensor *t = tensors[i].t;
        size_t bytes = (size_t)dt_tensor_numel(t) * sizeof(float);
        DT_ASSERT(bytes == 0 || t->data);
        ok = write_all(f, t->data, bytes);
    }
    if (!ok || fflush(f) != 0) {
        err = dt_err_set(DT_ERR_IO, "%s: writing %s: %s", path, tmpl, strerror(errno));
        goto out;
    }
    if (fsync(fileno(f)) != 0) {
        err = dt_err_set(DT_ERR_IO, "%s: fsync %s: %s", path, tmpl, strerror(errno));
        goto out;
    }
    int rc = fclose(f);
    f = NULL;
    if (rc != 0) {
        err = dt_err_set(DT_ERR_IO, "%s: closing %s: %s", path, tmpl, strerror(errno));
        goto out;
    }
    if (rename(tmpl, path) != 0) {
        err = dt_err_set(DT_ERR_IO, "%s: cannot rename %s over it: %s", path, tmpl,
                         strerror(errno));
        goto out;
    }
    created = 0;
    /* make the rename durable */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || (fsync(dfd) != 0 && errno != EINVAL)) {
        err = dt_err_set(DT_ERR_IO, "%s: fsync of directory %s: %s", path, dir, strerror(errno));
    }
    if (dfd >= 0) close(dfd);
out:
    if (f) fclose(f);
    if (fd >= 0) close(fd);
    if (created) unlink(tmpl);
    free(dir);
    free(tmpl);
    free(header);
    return err;
}

/* ---- reading ---- */

static dt_err read_file(const char *path, unsigned char **buf_out, uint64_t *size_out,
                        size_t slack) {
    FILE *f = fopen(path, "rb");
    if (!f) return dt_err_set(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    dt_err err = DT_OK;
    unsigned char *buf = NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        err = dt_err_set(DT_ERR_IO, "%s: stat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        err = dt_err_set(DT_ERR_IO, "%s: not a regular file", path);
        goto out;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size > SIZE_MAX - slack || !(buf = malloc((size_t)size + slack))) {
        err = dt_err_set(DT_ERR_NOMEM, "%s: cannot allocate %llu bytes to read it", path,
                         (unsigned long long)size);
        goto out;
    }
    if (size > 0 && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        err = dt_err_set(DT_ERR_IO, "%s: read failed: %s", path,
                         ferror(f) ? strerror(errno) : "file shrank while reading");
        goto out;
    }
    *buf_out = buf;
    *size_out = size;
    buf = NULL;
out:
    free(buf);
    fclose(f);
    return err;
}

/* Parse a JSON integer in [0, max]; 0 if it is not one. */
static int get_uint(const json_t *j, uint64_t max, uint64_t *v) {
    if (!json_is_integer(j) || json_integer_value(j) < 0) return 0;
    *v = (uint64_t)json_integer_value(j);
    return *v <= max;
}

static dt_err parse_entry(const char *path, const char *name, json_t *obj, uint64_t data_len,
                          st_entry *e) {
    if (!json_is_object(obj))
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor %s: expected an object", path, name);
    const char *key;
    json_t *val;
    json_t *dtype = NULL, *shape = NULL, *offs = NULL;
    json_object_foreach(obj, key, val) {
        if (!strcmp(key, "dtype"))
            dtype = val;
        else if (!strcmp(key, "shape"))
            shape = val;
        else if (!strcmp(key, "data_offsets"))
            offs = val;
        else
            return dt_err_set(DT_ERR_FORMAT, "%s: tensor %s: unexpected key \"%s\"", path, name,
                              key);
    }
    if (!dtype || !shape || !offs)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor %s: missing \"%s\"", path, name,
                          !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!json_is_string(dtype))
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor %s: dtype is not a string", path, name);
    if (strcmp(json_string_value(dtype), "F32"))
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor %s: dtype %s is not supported (only F32)",
                          path, name, json_string_value(dtype));

    if (!json_is_array(shape) || json_array_size(shape) > DT_MAX_DIMS)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: tensor %s: shape must be a list of at most %d integers", path,
                          name, DT_MAX_DIMS);
    e->t.shape.ndim = (int)json_array_size(shape);
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < e->t.shape.ndim; d++) {
        uint64_t dim;
        if (!get_uint(json_array_get(shape, (size_t)d), INT64_MAX, &dim))
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: tensor %s: shape[%d] is not a non-negative integer", path,
                              name, d);
        e->t.shape.dim[d] = (int64_t)dim;
        if (dim != 0 && numel > UINT64_MAX / dim) overflow = 1;
        numel *= dim;
    }

    uint64_t begin, end;
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        !get_uint(json_array_get(offs, 0), UINT64_MAX, &begin) ||
        !get_uint(json_array_get(offs, 1), UINT64_MAX, &end) || begin > end)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: tensor %s: data_offsets must be [begin, end] with 0 <= begin "
                          "<= end",
                          path, name);
    if (end > data_len)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: tensor %s: data_offsets [%llu, %llu] outside the data section "
                          "(%llu bytes; file truncated?)",
                          path, name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)data_len);
    if (numel == 0) overflow = 0; /* a zero dimension makes any product 0 */
    if (overflow || numel > (end - begin) / 4 || numel * 4 != end - begin)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes, but its "
                          "shape needs %s%llu",
                          path, name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)(end - begin), overflow ? "more than " : "",
                          overflow ? (unsigned long long)UINT64_MAX
                                   : (unsigned long long)(numel * 4));
    e->name = name;
    e->begin = begin;
    e->end = end;
    return DT_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The tensors must tile [0, data_len) exactly. */
static dt_err check_tiling(const char *path, st_entry *e, int n, uint64_t data_len) {
    dt_err err = DT_OK;
    st_entry **sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
    if (!sorted) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < n; i++) sorted[i] = &e[i];
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_offsets);
    uint64_t at = 0;
    const st_entry *prev = NULL;
    for (int i = 0; i < n; i++) {
        const st_entry *s = sorted[i];
        if (s->begin < at) {
            err = dt_err_set(DT_ERR_FORMAT, "%s: tensors %s and %s overlap (bytes %llu..%llu)",
                             path, prev->name, s->name, (unsigned long long)s->begin,
                             (unsigned long long)at);
            goto out;
        }
        if (s->begin > at) {
            err = dt_err_set(DT_ERR_FORMAT,
                             "%s: tensor %s: data section bytes %llu..%llu before it belong to "
                             "no tensor",
                             path, s->name, (unsigned long long)at,
                             (unsigned long long)s->begin);
            goto out;
        }
        at = s->end;
        prev = s;
    }
    if (at != data_len)
        err = dt_err_set(DT_ERR_FORMAT,
                         "%s: data section has %llu bytes but its tensors cover only %llu",
                         path, (unsigned long long)data_len, (unsigned long long)at);
out:
    free(sorted);
    return err;
}

dt_err dt_safetensors_read(dt_safetensors **out, const char *path) {
    DT_ASSERT(out && path);
    dt_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    uint64_t size = 0;
    dt_err err = read_file(path, &st->buf, &size, 8);
    if (err) goto fail;
    if (size < 8) {
        err = dt_err_set(DT_ERR_FORMAT,
                         "%s: %llu bytes is too short for a safetensors file (8-byte header "
                         "length first)",
                         path, (unsigned long long)size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)st->buf[i] << (8 * i);
    if (hlen > HEADER_MAX) {
        err = dt_err_set(DT_ERR_FORMAT, "%s: header length %llu exceeds the limit of %llu",
                         path, (unsigned long long)hlen, (unsigned long long)HEADER_MAX);
        goto fail;
    }

    if (hlen > size - 8) {
        err = dt_err_set(DT_ERR_FORMAT,
                         "%s: header length %llu runs past the end of the file (%llu bytes)",
                         path, (unsigned long long)hlen, (unsigned long long)size);
        goto fail;
    }
    json_error_t jerr;
    st->root = json_loadb((const char *)st->buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!st->root) {
        err = dt_err_set(DT_ERR_FORMAT, "%s: header JSON line %d column %d: %s", path,
                         jerr.line, jerr.column, jerr.text);
        goto fail;
    }
    if (!json_is_object(st->root)) {
        err = dt_err_set(DT_ERR_FORMAT, "%s: header JSON is not an object", path);
        goto fail;
    }

    /* the data section, moved to an 8-byte boundary if the writer did not pad */
    uint64_t data_len = size - 8 - hlen;
    size_t data_at = (size_t)(8 + hlen);
    if (data_at % 8) {
        size_t aligned = (data_at + 7) & ~(size_t)7;
        memmove(st->buf + aligned, st->buf + data_at, (size_t)data_len);
        data_at = aligned;
    }
    unsigned char *data = st->buf + data_at;

    size_t nkeys = json_object_size(st->root);
    st->e = calloc(nkeys ? nkeys : 1, sizeof *st->e);
    if (!st->e) {
        err = dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    const char *key;
    json_t *val;
    json_object_foreach(st->root, key, val) {
        if (!strcmp(key, META_KEY)) {
            if (!json_is_object(val)) {
                err = dt_err_set(DT_ERR_FORMAT, "%s: %s is not an object", path, META_KEY);
                goto fail;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    err = dt_err_set(DT_ERR_FORMAT, "%s: %s.%s is not a string", path, META_KEY,
                                     mk);
                    goto fail;
                }
            }
            st->meta = val;
            continue;
        }
        st_entry *e = &st->e[st->n];
        if ((err = parse_entry(path, key, val, data_len, e))) goto fail;
        st->n++;
    }
    if ((err = check_tiling(path, st->e, st->n, data_len))) goto fail;
    /* tiled by multiples of 4 bytes from an 8-aligned start: every view is aligned */
    for (int i = 0; i < st->n; i++) st->e[i].t.data = (float *)(void *)(data + st->e[i].begin);
    *out = st;
    return DT_OK;
fail:
    dt_safetensors_free(st);
    return err;
}

void dt_safetensors_free(dt_safetensors *st) {
    if (!st) return;
    json_decref(st->root);
    free(st->e);
    free(st->buf);
    free(st->path);
    free(st);
}

int dt_safetensors_count(const dt_safetensors *st) {
    return st->n;
}

const char *dt_safetensors_name(const dt_safetensors *st, int i) {
    DT_ASSERT(i >= 0 && i < st->n);
    return st->e[i].name;
}

dt_err dt_safetensors_find(const dt_safetensors *st, const char *name, dt_tensor *t) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->e[i].name, name)) {
            *t = st->e[i].t;
            return DT_OK;
        }
    return dt_err_set(DT_ERR_NOTFOUND, "%s: no tensor %s", st->path, name);
}

const char *dt_safetensors_meta(const dt_safetensors *st, const char *key) {
    if (!st->meta) return NULL;
    return json_string_value(json_object_get(st->meta, key));
}
