/*
 * summary.c - TensorBoard event files (include/dtrain/summary.h; FORMATS.md 1).
 *
 * An Event is encoded with the protobuf writer (core/pb-impl.h), field numbers from
 * tensorflow/core/util/event.proto and framework/summary.proto:
 *   Event   { wall_time = 1 double, step = 2 int64, file_version = 3 string,
 *             summary = 5 Summary, session_log = 7 SessionLog }
 *   Summary { value = 1 repeated Value { tag = 1 string, simple_value = 2 float } }
 *   SessionLog { status = 1 enum (START = 1) }
 * A scalar as simple_value is what both TensorBoard back ends read as a scalar series
 * without plugin metadata.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/clock-impl.h"
#include "core/file-impl.h"
#include "core/path-impl.h"
#include "core/pb-impl.h"
#include "dtrain/summary.h"

#define FLUSH_SECONDS 2.0

struct dt_summary {
    FILE *f;
    char path[DT__PATH_MAX];
    int64_t last_step;
    double last_flush;
    dt_err err; /* the first write error */
    dt__pb_buf ev, sum, val;
};

/* ---- CRC32C: reflected Castagnoli polynomial 0x82F63B78, slicing by one byte ---- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t dt_crc32c(const void *p, size_t n) {
    pthread_once(&crc_once, crc_init);
    const uint8_t *b = p;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ b[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t dt_crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* ---- records ---- */

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static dt_err write_record(dt_summary *w, const dt__pb_buf *ev) {
    if (w->err) return w->err;
    dt_err e = dt__pb_status(ev);
    if (e) return e;
    uint8_t head[12], tail[4];
    uint64_t n = ev->len;
    for (int i = 0; i < 8; i++)
        head[i] = (uint8_t)(n >> (8 * i));
    uint32_t c = dt_crc32c_mask(dt_crc32c(head, 8));
    for (int i = 0; i < 4; i++)
        head[8 + i] = (uint8_t)(c >> (8 * i));
    c = dt_crc32c_mask(dt_crc32c(ev->data, ev->len));
    for (int i = 0; i < 4; i++)
        tail[i] = (uint8_t)(c >> (8 * i));
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(ev->data, 1, ev->len, w->f) != ev->len ||
        fwrite(tail, 1, 4, w->f) != 4) {
        w->err = dt_err_set(DT_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
        return w->err;
    }
    double now = dt__mono_s();
    if (now - w->last_flush >= FLUSH_SECONDS) return dt_summary_flush(w);
    return DT_OK;
}

dt_err dt_summary_flush(dt_summary *w) {
    if (w->err) return w->err;
    w->last_flush = dt__mono_s();
    if (fflush(w->f) != 0)
        w->err = dt_err_set(DT_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
    return w->err;
}

dt_err dt_summary_open(dt_summary **out, const char *dir, int64_t start_step) {
    *out = NULL;
    dt_err e = dt__mkdirs(dir);
    if (e) return e;
    dt_summary *w = calloc(1, sizeof *w);
    if (!w) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    /* several writers of one process in one dir (none today) would differ by n */
    static atomic_int counter;
    int n = atomic_fetch_add(&counter, 1);
    if ((e = dt__path(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%d.%d", dir,
                      (long long)time(NULL), host, (int)getpid(), n))) {
        free(w);
        return e;
    }
    if (!(w->f = fopen(w->path, "wbx"))) {
        e = dt_err_set(DT_ERR_IO, "%s: cannot create: %s", w->path, strerror(errno));
        free(w);
        return e;
    }
    dt__pb_init(&w->ev);
    dt__pb_init(&w->sum);
    dt__pb_init(&w->val);
    w->last_step = start_step > 0 ? start_step : 0;
    /* record 1: the file version (step 0, as TensorFlow's writer) */
    double t = wall_time();
    dt__pb_double(&w->ev, 1, t);
    dt__pb_string(&w->ev, 3, "brain.Event:2");
    e = write_record(w, &w->ev);
    if (!e && start_step > 0) { /* a resumed run: START at the step it continues from */
        dt__pb_clear(&w->ev);
        dt__pb_clear(&w->val);
        dt__pb_uint(&w->val, 1, 1);
        dt__pb_double(&w->ev, 1, t);
        dt__pb_int(&w->ev, 2, start_step);
        dt__pb_message(&w->ev, 7, &w->val);
        e = write_record(w, &w->ev);
    }
    if (!e) e = dt_summary_flush(w);
    if (e) {
        dt_summary_close(w);
        return e;
    }
    *out = w;
    return DT_OK;
}

dt_err dt_summary_scalars(dt_summary *w, int64_t step, int n, const char *const *tags,
                          const float *values) {
    if (step < w->last_step)
        return dt_err_set(DT_ERR_ARG, "%s: step %lld is before step %lld, already written",
                          w->path, (long long)step, (long long)w->last_step);
    w->last_step = step;
    dt__pb_clear(&w->ev);
    dt__pb_clear(&w->sum);
    for (int i = 0; i < n; i++) {
        dt__pb_clear(&w->val);
        dt__pb_string(&w->val, 1, tags[i]);
        dt__pb_float(&w->val, 2, values[i]);
        dt__pb_message(&w->sum, 1, &w->val);
    }
    dt__pb_double(&w->ev, 1, wall_time());
    dt__pb_int(&w->ev, 2, step);
    dt__pb_message(&w->ev, 5, &w->sum);
    return write_record(w, &w->ev);
}

dt_err dt_summary_scalar(dt_summary *w, int64_t step, const char *tag, float value) {
    return dt_summary_scalars(w, step, 1, &tag, &value);
}

const char *dt_summary_path(const dt_summary *w) {
    return w->path;
}

dt_err dt_summary_close(dt_summary *w) {
    if (!w) return DT_OK;
    dt_err e = w->err;
    if (w->f) {
        if (!e && fflush(w->f) != 0)
            e = dt_err_set(DT_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
        if (fclose(w->f) != 0 && !e)
            e = dt_err_set(DT_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
    }
    dt__pb_free(&w->ev);
    dt__pb_free(&w->sum);
    dt__pb_free(&w->val);
    free(w);
    return e;
}
