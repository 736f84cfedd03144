/*
 * reader.c - reading TensorBoard event files (include/dtrain/summary.h; FORMATS.md 1), for
 * `dtrain tune`'s metrics (src/tune/metrics.c) and anyone who wants a run's scalars back.
 *
 * A file is read whole into memory (event files of a run are small: a point per 10 steps) and
 * walked record by record: uint64 length, masked CRC32C of it, payload, masked CRC32C of the
 * payload. Where the bytes run out inside a record the file is still being written (or its
 * writer was killed mid-record): the read ends there, *end at that record, so a poller reads
 * on from it next time. A checksum that does not match bytes that are all there is
 * corruption: DT_ERR_FORMAT naming the file and the record's offset.
 *
 * The payload is decoded by a schema-less protobuf walker (varint, fixed32, fixed64,
 * length-delimited; unknown fields skipped by their wire type), for the fields of
 * tensorflow.Event, Summary.Value, SessionLog, SummaryMetadata and TensorProto that carry a
 * scalar:
 *   Event      { wall_time 1 double, step 2 int64, summary 5, session_log 7 }
 *   Summary    { value 1 repeated Value }
 *   Value      { tag 1, simple_value 2 float, tensor 8 TensorProto, metadata 9 }
 *   TensorProto{ dtype 1 (DT_FLOAT 1, DT_DOUBLE 2), tensor_shape 2, tensor_content 4,
 *                float_val 5 (packed or not), double_val 6 }
 *   SessionLog { status 1 (START 1) }
 * A tensor value counts as a scalar when it holds exactly one float or double (TF2's
 * tf.summary.scalar: shape [], plugin "scalars"); a tensor of another plugin, dtype or size
 * is skipped, as TensorBoard's scalar dashboard skips it.
 *
 * The run reader merges a directory's files into one series per tag, applying TensorBoard's
 * restarts (a START purges points at or after its step; so does a step going backwards
 * within a tag, as RustBoard does).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/summary.h"

/* ---- a protobuf walker ---- */

typedef struct pb_in {
    const uint8_t *p, *end;
    int bad;
} pb_in;

static uint64_t get_varint(pb_in *in) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (in->p >= in->end) break;
        uint8_t b = *in->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return v;
    }
    in->bad = 1;
    return 0;
}

static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const uint8_t *p) {
    return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

static float as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double as_double(uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* One field: its number and wire type; value in *v (varint, fixed) or *sub (LEN). Returns 0
 * at the end of the message, -1 when malformed, 1 for a field. */
typedef struct pb_field {
    uint32_t num;
    int wire;
    uint64_t v;
    pb_in sub;
} pb_field;

static int next_field(pb_in *in, pb_field *f) {
    if (in->bad) return -1;
    if (in->p >= in->end) return 0;
    uint64_t key = get_varint(in);
    if (in->bad || key >> 3 == 0 || key >> 3 > UINT32_MAX) return -1;
    f->num = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    switch (f->wire) {
    case 0:
        f->v = get_varint(in);
        return in->bad ? -1 : 1;
    case 1:
        if (in->end - in->p < 8) return -1;
        f->v = get_le64(in->p);
        in->p += 8;
        return 1;
    case 5:
        if (in->end - in->p < 4) return -1;
        f->v = get_le32(in->p);
        in->p += 4;
        return 1;
    case 2: {
        uint64_t n = get_varint(in);
        if (in->bad || n > (uint64_t)(in->end - in->p)) return -1;
        f->sub.p = in->p;
        f->sub.end = in->p + n;
        f->sub.bad = 0;
        in->p += n;
        return 1;
    }
    default: /* groups (3, 4) and unknown wire types: no Event field uses them */
        return -1;
    }
}

/* ---- one event ---- */

typedef struct ev_buf {
    int n, cap;
    char **tags;
    double *values;
} ev_buf;

static void ev_reset(ev_buf *b) {
    for (int i = 0; i < b->n; i++)
        free(b->tags[i]);
    b->n = 0;
}

static void ev_free(ev_buf *b) {
    ev_reset(b);
    free(b->tags);
    free(b->values);
}

static dt_err ev_add(ev_buf *b, const uint8_t *tag, size_t tlen, double v) {
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 8;
        char **t = realloc(b->tags, (size_t)cap * sizeof *t);
        if (!t) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        b->tags = t;
        double *vv = realloc(b->values, (size_t)cap * sizeof *vv);
        if (!vv) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        b->values = vv;
        b->cap = cap;
    }
    char *s = malloc(tlen + 1);
    if (!s) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    memcpy(s, tag, tlen);
    s[tlen] = 0;
    b->tags[b->n] = s;
    b->values[b->n++] = v;
    return DT_OK;
}

/* A TensorProto holding one float or double: 1 and *v; 0 when it is not a scalar of those;
 * -1 when malformed. */
static int tensor_scalar(pb_in in, double *v) {
    pb_field f = {0};
    int r, dtype = 0, count = 0;
    double val = 0;
    const uint8_t *content = NULL;
    size_t clen = 0;
    while ((r = next_field(&in, &f)) == 1) {
        if (f.num == 1 && f.wire == 0) {
            dtype = (int)f.v;
        } else if (f.num == 2 && f.wire == 2) {
            /* TensorShapeProto { dim 2 { size 1 } }: every dim must be 1 for one value */
            pb_field d = {0};
            int rr;
            while ((rr = next_field(&f.sub, &d)) == 1) {
                if (d.num != 2 || d.wire != 2) continue;
                pb_field s = {0};
                int r3;
                while ((r3 = next_field(&d.sub, &s)) == 1)
                    if (s.num == 1 && s.wire == 0 && s.v != 1) count = 2;
                if (r3 < 0) return -1;
            }
            if (rr < 0) return -1;
        } else if (f.num == 4 && f.wire == 2) {
            content = f.sub.p;
            clen = (size_t)(f.sub.end - f.sub.p);
        } else if (f.num == 5 && f.wire == 2) { /* packed float_val */
            size_t n = (size_t)(f.sub.end - f.sub.p);
            if (n % 4) return -1;
            count += (int)(n / 4);
            if (n >= 4) val = as_float(get_le32(f.sub.p));
        } else if (f.num == 5 && f.wire == 5) {
            count++;
            val = as_float((uint32_t)f.v);
        } else if (f.num == 6 && f.wire == 2) { /* packed double_val */
            size_t n = (size_t)(f.sub.end - f.sub.p);
            if (n % 8) return -1;
            count += (int)(n / 8);
            if (n >= 8) val = as_double(get_le64(f.sub.p));
        } else if (f.num == 6 && f.wire == 1) {
            count++;
            val = as_double(f.v);
        }
    }
    if (r < 0) return -1;
    if (dtype != 1 && dtype != 2) return 0;
    if (content && clen) {
        size_t w = dtype == 1 ? 4 : 8;
        if (clen != w) return 0;
        val = dtype == 1 ? as_float(get_le32(content)) : as_double(get_le64(content));
        count = 1;
    }
    if (count != 1) return 0;
    *v = val;
    return 1;
}

/* The plugin of a SummaryMetadata ("" when none), into name (size n). */
static int metadata_plugin(pb_in in, char *name, size_t n) {
    pb_field f = {0};
    int r;
    name[0] = 0;
    while ((r = next_field(&in, &f)) == 1) {
        if (f.num != 1 || f.wire != 2) continue;
        pb_field g = {0};
        int rr;
        while ((rr = next_field(&f.sub, &g)) == 1) {
            if (g.num == 1 && g.wire == 2) {
                size_t l = (size_t)(g.sub.end - g.sub.p);
                if (l >= n) l = n - 1;
                memcpy(name, g.sub.p, l);
                name[l] = 0;
            }
        }
        if (rr < 0) return -1;
    }
    return r < 0 ? -1 : 0;
}

/* A Summary.Value: adds its scalar to b when it has one. -1 when malformed. */
static int summary_value(pb_in in, ev_buf *b, dt_err *err) {
    pb_field f = {0};
    int r, has = 0, is_tensor = 0;
    const uint8_t *tag = (const uint8_t *)"";
    size_t tlen = 0;
    double v = 0;
    char plugin[64] = "";
    while ((r = next_field(&in, &f)) == 1) {
        if (f.num == 1 && f.wire == 2) {
            tag = f.sub.p;
            tlen = (size_t)(f.sub.end - f.sub.p);
        } else if (f.num == 2 && f.wire == 5) {
            v = as_float((uint32_t)f.v);
            has = 1;
        } else if (f.num == 8 && f.wire == 2) {
            int t = tensor_scalar(f.sub, &v);
            if (t < 0) return -1;
            has = t;
            is_tensor = 1;
        } else if (f.num == 9 && f.wire == 2) {
            if (metadata_plugin(f.sub, plugin, sizeof plugin) < 0) return -1;
        }
    }
    if (r < 0) return -1;
    /* a tensor of another plugin (text, histograms as tensors) is not a scalar series */
    if (is_tensor && plugin[0] && strcmp(plugin, "scalars") != 0) has = 0;
    if (has && (*err = ev_add(b, tag, tlen, v))) return -1;
    return 0;
}

/* Decode one Event into *ev (its scalars in b). -1 when malformed. */
static int decode_event(const uint8_t *p, size_t n, ev_buf *b, dt_summary_event *ev,
                        int *interesting, dt_err *err) {
    pb_in in = {p, p + n, 0};
    pb_field f = {0};
    int r;
    memset(ev, 0, sizeof *ev);
    ev_reset(b);
    *interesting = 0;
    while ((r = next_field(&in, &f)) == 1) {
        if (f.num == 1 && f.wire == 1) {
            ev->wall_time = as_double(f.v);
        } else if (f.num == 2 && f.wire == 0) {
            ev->step = (int64_t)f.v;
        } else if (f.num == 5 && f.wire == 2) {
            pb_field g = {0};
            int rr;
            while ((rr = next_field(&f.sub, &g)) == 1)
                if (g.num == 1 && g.wire == 2 && summary_value(g.sub, b, err) < 0) return -1;
            if (rr < 0) return -1;
            *interesting = 1;
        } else if (f.num == 7 && f.wire == 2) {
            pb_field g = {0};
            int rr;
            while ((rr = next_field(&f.sub, &g)) == 1)
                if (g.num == 1 && g.wire == 0 && g.v == 1) ev->start = 1;
            if (rr < 0) return -1;
            if (ev->start) *interesting = 1;
        }
    }
    if (r < 0) return -1;
    ev->n = b->n;
    ev->tags = (const char *const *)b->tags;
    ev->values = b->values;
    return 0;
}

dt_err dt_summary_read_file(const char *path, size_t from, dt_summary_event_fn fn, void *ctx,
                            size_t *end) {
    if (end) *end = from;
    dt_err e = dt__check_regular(path);
    if (e) return e;
    char *data;
    size_t n;
    if ((e = dt__read_file(path, &data, &n))) return e;
    const uint8_t *d = (const uint8_t *)data;
    ev_buf b = {0};
    size_t p = from;
    while (!e && p < n) {
        if (n - p < 12) break; /* a header cut short: still being written */
        uint64_t len = get_le64(d + p);
        if (dt_crc32c_mask(dt_crc32c(d + p, 8)) != get_le32(d + p + 8)) {
            e = dt_err_set(DT_ERR_FORMAT, "%s: offset %zu: the record length's checksum is wrong",
                           path, p);
            break;
        }
        if (len > n - p - 12 || n - p - 12 - len < 4) break; /* payload cut short */
        const uint8_t *payload = d + p + 12;
        if (dt_crc32c_mask(dt_crc32c(payload, (size_t)len)) != get_le32(payload + len)) {
            e = dt_err_set(DT_ERR_FORMAT, "%s: offset %zu: the record's checksum is wrong", path,
                           p);
            break;
        }
        dt_summary_event ev;
        int interesting;
        dt_err de = DT_OK;
        if (decode_event(payload, (size_t)len, &b, &ev, &interesting, &de) < 0) {
            e = de ? de
                   : dt_err_set(DT_ERR_FORMAT, "%s: offset %zu: not a tensorflow.Event", path, p);
            break;
        }
        p += 12 + (size_t)len + 4;
        if (end) *end = p;
        if (interesting && fn && fn(ctx, &ev)) break;
    }
    ev_free(&b);
    free(data);
    return e;
}

/* ---- runs ---- */

static dt_summary_series *series_of(dt_summary_run *r, const char *tag, dt_err *e) {
    for (size_t i = 0; i < r->nseries; i++)
        if (!strcmp(r->series[i].tag, tag)) return &r->series[i];
    dt_summary_series *s = realloc(r->series, (r->nseries + 1) * sizeof *s);
    if (!s) {
        *e = dt_err_set(DT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->series = s;
    s = &r->series[r->nseries];
    memset(s, 0, sizeof *s);
    if (!(s->tag = strdup(tag))) {
        *e = dt_err_set(DT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->nseries++;
    return s;
}

static void purge(dt_summary_series *s, int64_t step) {
    while (s->n && s->pts[s->n - 1].step >= step)
        s->n--;
}

typedef struct run_ctx {
    dt_summary_run *run;
    dt_err err;
} run_ctx;

static int on_event(void *ctx, const dt_summary_event *ev) {
    run_ctx *c = ctx;
    dt_summary_run *r = c->run;
    if (ev->start)
        for (size_t i = 0; i < r->nseries; i++)
            purge(&r->series[i], ev->step);
    for (int i = 0; i < ev->n; i++) {
        dt_summary_series *s = series_of(r, ev->tags[i], &c->err);
        if (!s) return 1;
        if (s->n && s->pts[s->n - 1].step > ev->step) purge(s, ev->step);
        if (s->n == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 16;
            dt_summary_point *p = realloc(s->pts, cap * sizeof *p);
            if (!p) {
                c->err = dt_err_set(DT_ERR_NOMEM, "out of memory");
                return 1;
            }
            s->pts = p;
            s->cap = cap;
        }
        s->pts[s->n++] = (dt_summary_point){ev->step, ev->wall_time, ev->values[i]};
    }
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

dt_err dt_summary_read_run(const char *dir, dt_summary_run **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return dt_err_set(errno == ENOENT ? DT_ERR_NOTFOUND : DT_ERR_IO, "%s: cannot open: %s",
                          dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    dt_err e = DT_OK;
    struct dirent *de;
    while (!e && (de = readdir(d))) {
        if (!strstr(de->d_name, "tfevents")) continue;
        size_t l = strlen(de->d_name);
        if (l > 14 && !strcmp(de->d_name + l - 14, ".profile-empty")) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                e = dt_err_set(DT_ERR_NOMEM, "out of memory");
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name))) e = dt_err_set(DT_ERR_NOMEM, "out of memory");
        else n++;
    }
    closedir(d);
    dt_summary_run *r = calloc(1, sizeof *r);
    if (!e && !r) e = dt_err_set(DT_ERR_NOMEM, "out of memory");
    if (!e && n) qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; !e && i < n; i++) {
        char path[DT__PATH_MAX];
        run_ctx c = {r, DT_OK};
        if ((e = dt__path(path, sizeof path, "%s/%s", dir, names[i]))) break;
        e = dt_summary_read_file(path, 0, on_event, &c, NULL);
        if (!e) e = c.err;
        r->files++;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (e) {
        dt_summary_run_free(r);
        return e;
    }
    *out = r;
    return DT_OK;
}

const dt_summary_series *dt_summary_run_tag(const dt_summary_run *run, const char *tag) {
    for (size_t i = 0; run && i < run->nseries; i++)
        if (!strcmp(run->series[i].tag, tag)) return &run->series[i];
    return NULL;
}

void dt_summary_run_free(dt_summary_run *run) {
    if (!run) return;
    for (size_t i = 0; i < run->nseries; i++) {
        free(run->series[i].tag);
        free(run->series[i].pts);
    }
    free(run->series);
    free(run);
}
