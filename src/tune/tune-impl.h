/*
 * tune-impl.h - `dtrain tune`'s spec and search: the experiment (a Katib Experiment or
 * dtrain's plain Sweep) and the search algorithms that pick each trial's parameters.
 *
 * experiment.c loads an experiment file (docs/TUNE.md "The experiment spec") into a
 * dt__experiment: the objective, the algorithm and its settings, early stopping, the
 * parameters and their feasible spaces, and the trial template as YAML text whose lines are
 * those of the file it came from, so a rendered trial that does not parse as a job reports
 * the experiment's (or the template file's) FILE:LINE. Every rendered template is checked
 * at load time (rendered with each parameter's first value and parsed as a job), so a bad
 * spec is refused before any trial starts.
 *
 * search.c (and search_*.c per algorithm) suggests trials. A search sees every trial: it
 * creates them (dt__search_next), is told what they report (dt__search_observe) and how
 * they end (dt__search_end). Its whole state is a function of the seed and of that
 * history, which a runner records: after a restart, dt__search_new then dt__search_restore
 * of every recorded trial (in trial order) then dt__search_observe of every recorded
 * observation gives the same future suggestions as the search that was not restarted.
 * Randomness is drawn per trial (a stream seeded by (seed, trial)), never from a state that
 * earlier calls advanced.
 *
 * Values: the parameters of a trial are texts, one per experiment parameter in order: an
 * int "12", a double in shortest round-trip form "0.01", a discrete or categorical value as
 * written in the list. They are what replaces the placeholders.
 *
 * Resources (hyperband, asha): a resource is a count of epochs (or whatever the resource
 * parameter counts). Hyperband, as Katib's, sets the resource parameter of each trial to
 * its rung's resource and runs each rung's trials anew. ASHA runs each trial with the
 * resource parameter at max_resource and pauses it at rungs: the runner reports the trial's
 * objective at each epoch (dt__search_observe) and asks dt__search_promote when it reaches
 * the resource dt__search_next (or the last promote) gave; a paused trial's job is stopped
 * keeping its checkpoint, and a later dt__search_next may hand the same trial back with a
 * higher resource: the runner resumes it from that checkpoint.
 *
 * Not thread-safe: one thread drives one search.
 */
#ifndef DTRAIN_TUNE_IMPL_H
#define DTRAIN_TUNE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/path-impl.h"
#include "dtrain/err.h"

/* ---- the experiment (experiment.c) ---- */

typedef enum { DT__OBJ_MAXIMIZE = 0, DT__OBJ_MINIMIZE } dt__obj_type;
typedef enum {
    DT__PARAM_INT = 0,
    DT__PARAM_DOUBLE,
    DT__PARAM_DISCRETE,
    DT__PARAM_CATEGORICAL
} dt__param_type;

/* Limits of the fixed-size tables below (a spec above them is refused with FILE:LINE). */
#define DT__TUNE_MAX_SETTINGS 16
#define DT__TUNE_MAX_EXTRA 8
#define DT__TUNE_MAX_FILTERS 8
#define DT__TUNE_MAX_PARAMS 64

typedef struct dt__tune_param {
    char name[64];
    dt__param_type type;
    double min, max, step; /* int/double feasibleSpace; step 0 = none */
    int log;               /* distribution logUniform (int/double; min > 0) */
    int nlist;             /* discrete/categorical: the values as text (owned) */
    char **list;
    int line; /* where the parameter is declared */
} dt__tune_param;

typedef struct dt__trial_param {
    char name[64];      /* trialParameters[].name: the placeholder ${trialParameters.NAME} */
    char reference[64]; /* a parameter's name, or a trial's metadata: ${trialSpec.Name},
                           ${trialSpec.Namespace}, ${trialSpec.Kind}, ${trialSpec.APIVersion} */
    int param;          /* index into params; -1 for a ${trialSpec.X} reference */
    int line;
} dt__trial_param;

typedef struct dt__experiment {
    char path[DT__PATH_MAX]; /* the experiment file */
    char name[64];           /* metadata.name (a DNS label); trials are <name>-<NNN> */
    char namespace_name[64]; /* metadata.namespace, default "default" */
    int sweep;               /* 1: the plain form (kind Sweep); 0: a Katib Experiment */

    dt__obj_type obj;
    int has_goal;
    double goal;
    char metric[128]; /* objectiveMetricName (Sweep default: accuracy) */
    /* objective.metricStrategies for the objective metric: "max", "min" or "latest": which of
     * a trial's reported values is its result (default: max when maximizing, else min) */
    char metric_strategy[16];
    int nextra; /* additionalMetricNames */
    char extra[DT__TUNE_MAX_EXTRA][128];

    char algorithm[32]; /* random grid bayesianoptimization tpe hyperband asha */
    int nsettings;      /* algorithmSettings, as written (validated per algorithm) */
    char setting_name[DT__TUNE_MAX_SETTINGS][64], setting_value[DT__TUNE_MAX_SETTINGS][128];
    int setting_line[DT__TUNE_MAX_SETTINGS];

    char early[32]; /* "" or "medianstop" */
    int nearly_settings;
    char early_name[DT__TUNE_MAX_SETTINGS][64], early_value[DT__TUNE_MAX_SETTINGS][128];
    int min_trials_required; /* medianstop: default 3 */
    int start_step;          /* medianstop: default 4 */

    int parallel;      /* parallelTrialCount (default 3 as Katib; Sweep `parallel`, default 1) */
    int max_trials;    /* maxTrialCount; 0 = the algorithm's own end (grid, hyperband) */
    int max_failed;    /* maxFailedTrialCount; -1 = not given */
    int parallel_line; /* where parallelTrialCount is (for messages) */

    int nparams;
    dt__tune_param *params;
    int resource_param; /* hyperband/asha: the parameter named by resource_name; -1: none */

    int ntp; /* trialParameters (Katib); a Sweep's placeholders name parameters directly */
    dt__trial_param *trial_params;

    /* The trial template: YAML text whose line N is line N of template_path (lines outside
     * the template are blank), NUL-terminated, owned. */
    char *template_text;
    char template_path[DT__PATH_MAX];   /* the experiment file, or a Sweep's template file */
    char template_kind[32];     /* TFJob, PyTorchJob or TrainJob */
    char template_api[64];      /* its apiVersion */
    char primary_container[64]; /* trialTemplate.primaryContainerName ("" when not given) */
    int retain;                 /* trialTemplate.retain */

    /* metricsCollectorSpec */
    char collector[32];        /* StdOut (default), TensorFlowEvent, File */
    char collector_path[DT__PATH_MAX]; /* source.fileSystemPath.path ("" when not given) */
    char collector_format[16]; /* source.fileSystemPath.format: TEXT (default) or JSON */
    int nfilters;              /* source.filter.metricsFormat: regular expressions */
    char filters[DT__TUNE_MAX_FILTERS][256];
} dt__experiment;

/* Load and check an experiment file: every error is DT_ERR_SPEC "FILE:LINE: FIELD: what"
 * (DT_ERR_IO when a file cannot be read). Caller frees with dt__experiment_free. */
dt_err dt__experiment_load(dt__experiment **out, const char *path);
void dt__experiment_free(dt__experiment *e);

/* The trial's manifest: placeholders replaced by values[i] (the text of parameter i) and
 * metadata.name set to trial_name (a DNS label; the template's own metadata.name, if any,
 * is replaced). The lines keep the template's numbering. Caller frees *out_yaml. Errors:
 * DT_ERR_ARG naming the parameter whose value cannot be placed (a newline in it). */
dt_err dt__experiment_render(const dt__experiment *e, const char *trial_name, char *const *values,
                             char **out_yaml);

/* The index of the parameter called name, -1 when none. */
int dt__experiment_param(const dt__experiment *e, const char *name);

/* A parameter's value as text: x is the number (int, double) or the index into the list
 * (discrete, categorical). Doubles in shortest round-trip form ("0.01", not 0.01000000001). */
void dt__param_format(const dt__tune_param *p, double x, char *buf, size_t cap);

/* ---- the search (search.c) ---- */

typedef struct dt__search dt__search;

typedef enum {
    DT__TRIAL_RUNNING = 0, /* suggested (or resumed) and not ended */
    DT__TRIAL_PAUSED,      /* ASHA: stopped at a rung; may be resumed by dt__search_next */
    DT__TRIAL_SUCCEEDED,
    DT__TRIAL_FAILED,
    DT__TRIAL_EARLY_STOPPED, /* medianstop stopped it (its last value counts as its result) */
} dt__trial_state;
const char *dt__trial_state_name(dt__trial_state s); /* "Running", "Paused", ... */

/* A search for e (which must outlive it). The seed is the algorithm's random_state setting
 * when the experiment gives one, else seed. Algorithm settings are checked here too
 * (dt__experiment_load already did, with FILE:LINE). */
dt_err dt__search_new(dt__search **out, const dt__experiment *e, uint64_t seed);
void dt__search_free(dt__search *s);

/* The next trial to run.
 *   DT_OK: *trial_out is the trial's number (0, 1, ...: trial k is named <experiment>-<k
 *     with 3 digits at least>). A new trial is the next number (the count of trials so
 *     far); a smaller number is an ASHA trial paused earlier that is now promoted: resume
 *     it. *values gets one text per parameter (free with dt__values_free); *resource the
 *     resource the trial should reach before it reports to dt__search_promote (ASHA), the
 *     resource its resource parameter was given (hyperband), else 0.
 *   DT_ERR_NOTFOUND: nothing to run now; *done = 1 when never again (every trial is made or
 *     maxTrialCount reached, and nothing can be promoted), 0 when results are awaited
 *     (hyperband's rung, ASHA's running trials).
 * values, resource, done and trial_out may not be NULL. */
dt_err dt__search_next(dt__search *s, char ***values, int *resource, int *done, int *trial_out);
void dt__values_free(char **values, int n);

/* Rebuild a trial after a restart: trial must be the count of trials so far (restore them
 * in order), values its parameters' texts, resource what dt__search_next last gave it, state
 * its state. DT_ERR_ARG when a value is not in its parameter's space or the number is out of
 * order. Then dt__search_observe its observations in the order they came. */
dt_err dt__search_restore(dt__search *s, int trial, char *const *values, int resource,
                          dt__trial_state state);

/* An observation of a trial's objective at a resource (an epoch or a step; 0 when the trial
 * reports only at its end). final = 1: the trial's result (its final objective value). */
void dt__search_observe(dt__search *s, int trial, int resource, double value, int final);

/* The trial ended: DT__TRIAL_SUCCEEDED, DT__TRIAL_FAILED or DT__TRIAL_EARLY_STOPPED. A trial
 * that ends without a final observation counts with its last observed value (none: it ranks
 * below every trial with one). */
void dt__search_end(dt__search *s, int trial, dt__trial_state state);

/* ASHA: trial reached resource (the one it was sent to reach) and has observed its value
 * there. Returns the next resource it should reach (it continues), or 0: it is paused (the
 * runner stops its job, keeping the checkpoint). At the last rung (max_resource) the trial
 * simply finishes: returns max_resource. Other algorithms: INT32_MAX (never pause). */
int dt__search_promote(dt__search *s, int trial, int resource);

/* medianstop: should a running trial that reported value at resource (step) stop now? 1
 * stop, 0 go on. Always 0 without earlyStopping. value is counted as the trial's
 * observation at resource (whether or not it was observed already). */
int dt__search_early_stop(dt__search *s, int trial, int resource, double value);

/* The best trial so far (by final value, else last observation of an ended trial): 1 and
 * *trial, *value when there is one, else 0. */
int dt__search_best(const dt__search *s, int *trial, double *value);

/* Trials made so far; a trial's state. */
int dt__search_trials(const dt__search *s);
dt__trial_state dt__search_trial_state(const dt__search *s, int trial);

#endif
