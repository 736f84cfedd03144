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

#ifdef __cplusplus
}
#endif
#endif
