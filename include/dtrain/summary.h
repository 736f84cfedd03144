/*
 * summary.h - TensorBoard event files: scalars a run writes as it trains, for TensorBoard
 * (docs/TENSORBOARD.md).
 *
 * A writer owns one file, <dir>/events.out.tfevents.<10-digit unix seconds>.<host>.<pid>.<n>,
 * in a run directory (JOB_DIR/tensorboard/train, .../eval). Each Event is one TFRecord:
 * uint64 length, masked CRC32C of the length, the serialized tensorflow.Event, masked CRC32C
 * of it, little-endian. The first record is file_version "brain.Event:2". A writer opened to
 * continue a run at a step > 0 (a resume) writes SessionLog START at that step next, which
 * tells TensorBoard to drop the points of the run's earlier files at or after that step: the
 * steps a reader keeps never go backwards.
 *
 * Records are written whole and flushed at most every flush_seconds (and on close), so a
 * reader polling the file sees whole records; a process killed mid-write leaves at most a
 * truncated last record, which readers skip.
 *
 * A writer is not thread-safe: one thread writes to it. The scalar calls refuse a step lower
 * than one already written (DT_ERR_ARG) and a non-finite value is written as it is (TensorBoard
 * shows NaN and Inf).
 */
#ifndef DTRAIN_SUMMARY_H
#define DTRAIN_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_summary dt_summary;

/* Open a new event file in dir (created if missing). start_step > 0: this writer continues a
 * run from that step (SessionLog START). The caller frees it with dt_summary_close. */
dt_err dt_summary_open(dt_summary **out, const char *dir, int64_t start_step);
/* Write one event at step holding n scalars (tags such as "loss", "eval/accuracy"). */
dt_err dt_summary_scalars(dt_summary *w, int64_t step, int n, const char *const *tags,
                          const float *values);
dt_err dt_summary_scalar(dt_summary *w, int64_t step, const char *tag, float value);
/* Flush what is buffered to the file now. */
dt_err dt_summary_flush(dt_summary *w);
/* The file's path. */
const char *dt_summary_path(const dt_summary *w);
/* Flush and close; NULL is a no-op. Returns the first write error the writer met. */
dt_err dt_summary_close(dt_summary *w);

/* CRC32C (Castagnoli) of n bytes, and TFRecord's mask of a CRC. */
uint32_t dt_crc32c(const void *p, size_t n);
uint32_t dt_crc32c_mask(uint32_t crc);


/* ---- reading (src/summary/reader.c) ----
 *
 * The reader takes what TensorBoard takes: records checked against both masked CRC32Cs, each
 * Event's wall_time, step, SessionLog START and its summary values that are scalars, either
 * simple_value (TF1, dtrain) or a tensor as TF2's tf.summary.scalar writes it (a rank-0
 * DT_FLOAT or DT_DOUBLE tensor in tensor_content, float_val or double_val; plugin
 * "scalars"). Other values (images, histograms, text) are skipped. A file cut short inside
 * its last record (a writer still writing, a process killed mid-write) ends there without an
 * error; a record whose checksum is wrong or whose Event cannot be decoded is an error
 * naming the file and the record's byte offset. */

typedef struct dt_summary_event {
    double wall_time;
    int64_t step;
    int start;                 /* a SessionLog START at step: a restarted writer */
    int n;                     /* scalars in this event */
    const char *const *tags;   /* valid only during the callback */
    const double *values;
} dt_summary_event;

/* Called once per Event holding scalars or a START; nonzero stops the read (no error). */
typedef int (*dt_summary_event_fn)(void *ctx, const dt_summary_event *ev);

/* Read path's records from byte offset `from` (0, or an earlier *end to poll a growing
 * file); *end (may be NULL) is the offset after the last whole record read. */
dt_err dt_summary_read_file(const char *path, size_t from, dt_summary_event_fn fn, void *ctx,
                            size_t *end);

typedef struct dt_summary_point {
    int64_t step;
    double wall_time;
    double value;
} dt_summary_point;

typedef struct dt_summary_series {
    char *tag;
    size_t n, cap;
    dt_summary_point *pts; /* in step order */
} dt_summary_series;

typedef struct dt_summary_run {
    int files;    /* event files read */
    size_t nseries;
    dt_summary_series *series;
} dt_summary_run;

/* Read a run directory as TensorBoard does: every file whose name holds "tfevents", in name
 * order; a START at step s drops the points at or after s of every tag, and a point whose
 * step is below its tag's last drops that tag's points at or after it. A directory with no
 * event file is an empty run (files 0), a missing one DT_ERR_NOTFOUND. */
dt_err dt_summary_read_run(const char *dir, dt_summary_run **out);
/* The series of tag, or NULL. */
const dt_summary_series *dt_summary_run_tag(const dt_summary_run *run, const char *tag);
void dt_summary_run_free(dt_summary_run *run);

#ifdef __cplusplus
}
#endif
#endif
