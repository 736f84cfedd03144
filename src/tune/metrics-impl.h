/*
 * metrics-impl.h - a trial's metrics, read from its job directory (src/tune/metrics.c;
 * docs/TUNE.md "Metrics").
 *
 * Three collectors, as Katib's:
 *   TensorFlowEvent  the TensorBoard runs of the job: the spec's training.logdir (when
 *                    absolute), JOB_DIR/tensorboard/<run>/ and
 *                    JOB_DIR/replicas/<replica>/tensorboard/<run>/ (a TrainJob's worker
 *                    writes there). A name RUN/TAG is tag TAG of run RUN ("eval/accuracy",
 *                    "train/loss"), else the tag RUN/TAG itself in any run; a plain name is
 *                    the eval run's tag, else the train run's, else any run's.
 *   result.json      the job's outcome: NAME, eval.NAME, or A.B for "A/B" (accuracy =
 *                    eval.accuracy, train/loss = train.loss); the final value only.
 *   File             the file a trial writes (metricsCollectorSpec source.fileSystemPath,
 *                    relative to the job dir): TEXT as StdOut, or JSON lines ({"accuracy":
 *                    "0.9", "epoch": 1}, Katib's JSON format).
 *   StdOut           `name=value` lines in the primary replica's log (chief-0, master-0,
 *                    worker-0, else the first in name order), matched by Katib's default
 *                    regular expression or the experiment's metricsFormat ones (two groups:
 *                    name, value); an `epoch=N` or `step=N` on the same line gives the
 *                    observation its epoch or step, else it is the next in order.
 * An observation carries a step and a resource (the epoch: its 1-based place in the series,
 * or the epoch printed beside it), which medianstop and ASHA compare across trials.
 */
#ifndef DTRAIN_TUNE_METRICS_IMPL_H
#define DTRAIN_TUNE_METRICS_IMPL_H

#include <stdint.h>

#include "dtrain/err.h"

typedef struct dt__metric_obs {
    int64_t step;
    int resource; /* epoch, 1-based */
    double value;
} dt__metric_obs;

typedef struct dt__metric {
    char name[128];
    const char *source;  /* "tensorboard", "stdout", "result" or "" (nothing found) */
    int n, cap;
    dt__metric_obs *obs; /* intermediate observations, in order */
    int has_result;      /* result.json gave the final value */
    double result;
} dt__metric;

/* Collector kinds (metricsCollectorSpec.collector.kind). */
typedef enum dt__collector {
    DT__COLLECT_AUTO,    /* TensorBoard, else StdOut; result.json for the final value */
    DT__COLLECT_STDOUT,  /* StdOut first, else as AUTO (a built-in TrainJob prints none) */
    DT__COLLECT_TFEVENT, /* TensorBoard and result.json only */
    DT__COLLECT_FILE,    /* a file the trial writes (TEXT: name=value lines; JSON: one object
                            a line), else as AUTO */
} dt__collector;

/* "StdOut", "TensorFlowEvent", "File", "" / "Default" / "None" (AUTO); DT_ERR_SPEC otherwise. */
dt_err dt__collector_parse(const char *kind, dt__collector *out);

/* Where a metric is looked for. */
typedef struct dt__metric_src {
    dt__collector kind;
    const char *const *formats; /* Katib metricsFormat regular expressions; NULL/0: default */
    int nformats;
    const char *file; /* File: its path (relative: to the job dir; each trial has its own) */
    int file_json;    /* File: JSON lines instead of TEXT */
} dt__metric_src;

/* The metric `name` of the job in job_dir as it stands now (a running job: what is written so
 * far; finished: 1 when the job has finished, so a last line counts without its newline).
 * A job dir with nothing yet is no error (m->n 0, has_result 0). m is reset first. */
dt_err dt__metric_collect(dt__metric *m, const char *job_dir, const char *name,
                          const dt__metric_src *src, int finished);

/* The metric's final value by Katib's metricStrategies value ("latest" (or ""), "min",
 * "max"): result.json's value when present for latest, else the observations'. 0 when there
 * is none. */
int dt__metric_final(const dt__metric *m, const char *strategy, double *out);
/* The value at resource r (the last observation whose resource is <= r); 0 when none. */
int dt__metric_at(const dt__metric *m, int resource, double *out);
/* The highest resource observed (0 when none). */
int dt__metric_resource(const dt__metric *m);

void dt__metric_free(dt__metric *m);

/* Katib's StdOut default: ([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?) */
extern const char dt__katib_default_format[];

#endif
