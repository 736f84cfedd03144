/* experiment_test.c - tune experiments: Katib's own example Experiments (tests/tune/, with
 * TFJob and PyTorchJob trialSpecs) and seed 003's templated sweep load; trials render into
 * jobs that parse; every bad spec is refused with the FILE:LINE: FIELD it names.
 *
 * Error tests edit one line of a known-good Experiment (BASE) and expect DT_ERR_SPEC with a
 * message that starts with "PATH:LINE: FIELD...", LINE being that of a marker string. */
#include <stdint.h>

#include "dtrain/job.h"
#include "testing/dt_test.h"
#include "testing/yaml_fixture.h"
#include "tune/tune-impl.h"

#define DATA DT_SOURCE_DIR "/tests/tune/"

static const char BASE[] = "apiVersion: kubeflow.org/v1beta1\n"
                           "kind: Experiment\n"
                           "metadata:\n"
                           "  name: base\n"
                           "spec:\n"
                           "  objective:\n"
                           "    type: minimize\n"
                           "    objectiveMetricName: loss\n"
                           "  algorithm:\n"
                           "    algorithmName: random\n"
                           "  parallelTrialCount: 2\n"
                           "  maxTrialCount: 6\n"
                           "  parameters:\n"
                           "    - name: lr\n"
                           "      parameterType: double\n"
                           "      feasibleSpace:\n"
                           "        min: \"0.01\"\n"
                           "        max: \"0.1\"\n"
                           "    - name: workers\n"
                           "      parameterType: int\n"
                           "      feasibleSpace: {min: \"1\", max: \"3\"}\n"
                           "    - name: opt\n"
                           "      parameterType: categorical\n"
                           "      feasibleSpace:\n"
                           "        list: [sgd, adam]\n"
                           "  trialTemplate:\n"
                           "    trialParameters:\n"
                           "      - name: learningRate\n"
                           "        reference: lr\n"
                           "      - name: numWorkers\n"
                           "        reference: workers\n"
                           "      - name: optimizer\n"
                           "        reference: opt\n"
                           "    trialSpec:\n"
                           "      apiVersion: kubeflow.org/v1\n"
                           "      kind: TFJob\n"
                           "      spec:\n"
                           "        tfReplicaSpecs:\n"
                           "          Worker:\n"
                           "            replicas: ${trialParameters.numWorkers}\n"
                           "            template:\n"
                           "              spec:\n"
                           "                containers:\n"
                           "                  - name: tensorflow\n"
                           "                    command: [python3, t.py, "
                           "\"--lr=${trialParameters.learningRate}\"]\n"
                           "                    args: [\"--opt=${trialParameters.optimizer}\"]\n";

static dt__experiment *load_text(const char *name, const char *text, const char **path) {
    const char *p = dt_test_write_file(name, text, strlen(text));
    dt__experiment *e = NULL;
    if (path) *path = p;
    dt_err err = dt__experiment_load(&e, p);
    if (err) fprintf(stderr, "unexpected: %s: %s\n", dt_strerror(err), dt_errmsg());
    return e;
}

/* Loading text must fail with "PATH:LINE: want...", LINE that of `at` in text. */
static int exp_fails(const char *text, const char *at, const char *want) {
    const char *path = dt_test_write_file("x.yaml", text, strlen(text));
    char prefix[1200];
    snprintf(prefix, sizeof prefix, "%s:%d: %s", path, line_of(text, at), want);
    dt__experiment *e = (dt__experiment *)&prefix; /* must be reset to NULL */
    dt_err_clear();
    dt_err err = dt__experiment_load(&e, path);
    if (err != DT_ERR_SPEC || e || strncmp(dt_errmsg(), prefix, strlen(prefix))) {
        fprintf(stderr, "got %s: \"%s\"\nwant DT_ERR_SPEC: \"%s...\"\n", dt_strerror(err),
                dt_errmsg(), prefix);
        if (err == DT_OK) dt__experiment_free(e);
        return 0;
    }
    return 1;
}

#define CHECK_FAILS(text, at, want) DT_CHECK(exp_fails((text), (at), (want)))
#define CHECK_EDIT_FAILS(from, to, at, want) CHECK_FAILS(edit(BASE, from, to), at, want)

/* Render trial `name` with values and parse it as a job (NULL on failure). */
static dt_job_spec *render_job(const dt__experiment *e, const char *name, char *const *values,
                               char **yaml_out) {
    char *yaml = NULL;
    dt_job_spec *job = NULL;
    if (dt__experiment_render(e, name, values, &yaml)) return NULL;
    if (dt_job_spec_parse(&job, yaml, strlen(yaml), e->template_path)) {
        fprintf(stderr, "rendered trial does not parse: %s\n%s", dt_errmsg(), yaml);
        free(yaml);
        return NULL;
    }
    if (yaml_out)
        *yaml_out = yaml;
    else
        free(yaml);
    return job;
}

static int argv_has(const dt_replica_spec *rs, const char *arg) {
    for (int i = 0; i < rs->argc; i++)
        if (!strcmp(rs->argv[i], arg)) return 1;
    return 0;
}

static void test_katib_random_tfjob(void) {
    dt__experiment *e = NULL;
    DT_CHECK_OK(dt__experiment_load(&e, DATA "random-tfjob.yaml"));
    DT_CHECK(!e->sweep && !strcmp(e->name, "tfjob-mnist-with-summaries"));
    DT_CHECK(!strcmp(e->namespace_name, "kubeflow"));
    DT_CHECK(e->obj == DT__OBJ_MAXIMIZE && e->has_goal && e->goal == 0.99);
    DT_CHECK(!strcmp(e->metric, "accuracy") && !strcmp(e->metric_strategy, "max"));
    DT_CHECK(!strcmp(e->algorithm, "random") && e->nsettings == 0);
    DT_CHECK(e->parallel == 3 && e->max_trials == 12 && e->max_failed == 3);
    DT_CHECK(!strcmp(e->collector, "TensorFlowEvent"));
    DT_CHECK(!strcmp(e->collector_path, "/mnist-with-summaries-logs/test"));
    DT_CHECK(e->nparams == 2 && e->params[0].type == DT__PARAM_DOUBLE);
    DT_CHECK(e->params[0].min == 0.01 && e->params[0].max == 0.05 && !e->params[0].log);
    DT_CHECK(e->params[1].type == DT__PARAM_INT && e->params[1].min == 32 &&
             e->params[1].max == 64);
    DT_CHECK(e->ntp == 2 && !strcmp(e->trial_params[1].name, "batchSize") &&
             e->trial_params[1].param == 1);
    DT_CHECK(!strcmp(e->template_kind, "TFJob") && !strcmp(e->primary_container, "tensorflow"));
    char *values[] = {"0.025", "48"}, *yaml = NULL;
    dt_job_spec *job = render_job(e, "tfjob-mnist-with-summaries-007", values, &yaml);
    DT_CHECK(job);
    DT_CHECK(!strcmp(job->name, "tfjob-mnist-with-summaries-007"));
    const dt_replica_spec *w = &job->replicas[DT_REPLICA_TYPE_WORKER];
    DT_CHECK(w->present && w->replicas == 2);
    DT_CHECK(argv_has(w, "--learning-rate=0.025") && argv_has(w, "--batch-size=48"));
    /* the trial's lines are the experiment's: the command list starts at line 62 */
    DT_CHECK(line_of(yaml, "\"python\"") == 62);
    free(yaml);
    dt_job_spec_free(job);
    dt__experiment_free(e);
}

static void test_katib_grid_pytorchjob(void) {
    dt__experiment *e = NULL;
    DT_CHECK_OK(dt__experiment_load(&e, DATA "grid-pytorchjob.yaml"));
    DT_CHECK(!strcmp(e->algorithm, "grid") && e->nextra == 1);
    DT_CHECK(!strcmp(e->extra[0], "Train-accuracy"));
    DT_CHECK(e->params[0].step == 0.001 && e->params[2].type == DT__PARAM_CATEGORICAL);
    DT_CHECK(e->params[2].nlist == 3 && !strcmp(e->params[2].list[2], "ftrl"));
    DT_CHECK(!strcmp(e->template_kind, "PyTorchJob"));
    char *values[] = {"0.004", "3", "adam"};
    dt_job_spec *job = render_job(e, "grid-011", values, NULL);
    DT_CHECK(job);
    DT_CHECK(job->kind == DT_JOB_KIND_PYTORCHJOB && !strcmp(job->name, "grid-011"));
    DT_CHECK(argv_has(&job->replicas[DT_REPLICA_TYPE_MASTER], "--optimizer=adam"));
    DT_CHECK(argv_has(&job->replicas[DT_REPLICA_TYPE_WORKER], "--lr=0.004"));
    dt_job_spec_free(job);
    dt__experiment_free(e);
}

static void test_katib_bayesian_hyperband(void) {
    dt__experiment *e = NULL;
    DT_CHECK_OK(dt__experiment_load(&e, DATA "bayesian-tfjob.yaml"));
    DT_CHECK(!strcmp(e->algorithm, "bayesianoptimization") && e->nsettings == 1);
    DT_CHECK(!strcmp(e->setting_name[0], "random_state") && !strcmp(e->setting_value[0], "10"));
    DT_CHECK(!strcmp(e->early, "medianstop") && e->min_trials_required == 1 && e->start_step == 2);
    DT_CHECK(e->retain == 1);
    dt__experiment_free(e);
    e = NULL;
    DT_CHECK_OK(dt__experiment_load(&e, DATA "hyperband-pytorchjob.yaml"));
    DT_CHECK(!strcmp(e->algorithm, "hyperband") && e->nsettings == 3);
    DT_CHECK(e->resource_param == 3 && !strcmp(e->params[3].name, "num-epochs"));
    char *values[] = {"0.02", "2", "sgd", "4"};
    dt_job_spec *job = render_job(e, "hyperband-000", values, NULL);
    DT_CHECK(job && argv_has(&job->replicas[DT_REPLICA_TYPE_MASTER], "--num-epochs=4"));
    dt_job_spec_free(job);
    dt__experiment_free(e);
}

/* dtrain's own job as the trial, searched by ASHA over its epochs. */
static void test_asha_trainjob(void) {
    dt__experiment *e = NULL;
    DT_CHECK_OK(dt__experiment_load(&e, DATA "asha-trainjob.yaml"));
    DT_CHECK(!strcmp(e->algorithm, "asha") && e->resource_param == 2);
    DT_CHECK(e->params[0].log == 1 && !strcmp(e->template_kind, "TrainJob"));
    char *values[] = {"0.01", "8", "27"};
    dt_job_spec *job = render_job(e, "iris-asha-003", values, NULL);
    DT_CHECK(job && job->kind == DT_JOB_KIND_TRAINJOB && !strcmp(job->name, "iris-asha-003"));
    DT_CHECK(job->train && job->train->epochs == 27 &&
             job->train->optimizer.learning_rate == 0.01f);
    dt_job_spec_free(job);
    dt__experiment_free(e);
}

/* Seed 003: run.sh's grid over tfjob-templated.yaml, %ID% the trial's name. */
static void test_sweep(void) {
    dt__experiment *e = NULL;
    DT_CHECK_OK(dt__experiment_load(&e, DATA "sweep.yaml"));
    DT_CHECK(e->sweep && !strcmp(e->name, "mnist-sweep") && !strcmp(e->algorithm, "grid"));
    DT_CHECK(e->obj == DT__OBJ_MAXIMIZE && !strcmp(e->metric, "accuracy"));
    DT_CHECK(e->parallel == 2 && e->nparams == 2);
    DT_CHECK(!strcmp(e->params[0].name, "LEARNING_RATE") && e->params[0].nlist == 3);
    DT_CHECK(!strcmp(e->params[0].list[1], "0.01") && !strcmp(e->params[1].list[3], "4"));
    DT_CHECK(strstr(e->template_path, "tests/tune/tfjob-templated.yaml"));
    char *values[] = {"0.001", "3"}, *yaml = NULL;
    dt_job_spec *job = render_job(e, "mnist-sweep-011", values, &yaml);
    DT_CHECK(job && !strcmp(job->name, "mnist-sweep-011"));
    const dt_replica_spec *m = &job->replicas[DT_REPLICA_TYPE_MASTER];
    DT_CHECK(argv_has(m, "0.001") && argv_has(m, "3") && argv_has(m, "./out/vars-mnist-sweep-011"));
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].replicas == 2);
    DT_CHECK(line_of(yaml, "--export_dir") == 26); /* the template file's numbering */
    free(yaml);
    dt_job_spec_free(job);
    dt__experiment_free(e);
}

/* The plain form inline, placeholders in both spellings, in places that are YAML only once
 * rendered, and $${ for a literal ${. */
static void test_sweep_inline(void) {
    static const char text[] =
        "apiVersion: dtrain/v1\n"
        "kind: Sweep\n"
        "metadata: {name: s}\n"
        "spec:\n"
        "  parameters:\n"
        "    WORKERS: [2, 1]\n"
        "    LR: [\"0.5\"]\n"
        "  objective: {type: minimize, objectiveMetricName: loss}\n"
        "  trialSpec:\n"
        "    apiVersion: kubeflow.org/v1\n"
        "    kind: TFJob\n"
        "    spec:\n"
        "      tfReplicaSpecs:\n"
        "        Worker:\n"
        "          replicas: ${WORKERS}\n"
        "          template:\n"
        "            spec:\n"
        "              containers:\n"
        "                - name: tensorflow\n"
        "                  command: [sh, -c, \"echo ${LR} $${HOME} %ID%\"]\n";
    dt__experiment *e = load_text("inline.yaml", text, NULL);
    DT_CHECK(e);
    DT_CHECK(e->obj == DT__OBJ_MINIMIZE && !strcmp(e->metric, "loss") && e->parallel == 1);
    char *values[] = {"1", "0.5"};
    dt_job_spec *job = render_job(e, "s-004", values, NULL);
    DT_CHECK(job && !strcmp(job->name, "s-004"));
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].replicas == 1);
    DT_CHECK(argv_has(&job->replicas[DT_REPLICA_TYPE_WORKER], "echo 0.5 ${HOME} s-004"));
    dt_job_spec_free(job);
    dt__experiment_free(e);
}

/* A trialSpec with metadata but no name keeps its metadata (labels) and gets the name. */
static void test_katib_metadata_kept(void) {
    const char *text = edit(BASE, "      kind: TFJob\n",
                            "      kind: TFJob\n      metadata:\n        labels: {team: "
                            "\"${trialParameters.optimizer}\"}\n");
    dt__experiment *e = load_text("meta.yaml", text, NULL);
    DT_CHECK(e);
    char *values[] = {"0.05", "2", "adam"}, *yaml = NULL;
    dt_job_spec *job = render_job(e, "base-001", values, &yaml);
    DT_CHECK(job && !strcmp(job->name, "base-001"));
    DT_CHECK(strstr(yaml, "\"labels\":{\"team\":\"adam\"}"));
    free(yaml);
    dt_job_spec_free(job);
    dt__experiment_free(e);
    /* a trialParameter may name the trial (Katib's ${trialSpec.Name}) */
    text = edit(BASE, "        reference: opt\n",
                "        reference: opt\n      - name: trialName\n        reference: "
                "${trialSpec.Name}\n");
    text = edit(text, "--opt=${trialParameters.optimizer}", "--name=${trialParameters.trialName}");
    e = load_text("meta2.yaml", text, NULL);
    DT_CHECK(e);
    job = render_job(e, "base-002", values, NULL);
    DT_CHECK(job && argv_has(&job->replicas[DT_REPLICA_TYPE_WORKER], "--name=base-002"));
    dt_job_spec_free(job);
    dt__experiment_free(e);
}

/* Templates in other shapes: a flow-style trialSpec (with its own name: replaced in place;
 * without: refused, there is no line to add one to), a name in a flow mapping, non-ASCII
 * text before and inside the template (columns are characters). */
static void test_template_shapes(void) {
    const char *flow = edit(BASE, "    trialSpec:\n      apiVersion: kubeflow.org/v1\n",
                            "    trialSpec: {metadata: {name: x}, apiVersion: kubeflow.org/v1,\n"
                            "      kind: TFJob, spec: {tfReplicaSpecs: {Worker: {template: {spec: "
                            "{containers: [{name: tensorflow, command: [a]}]}}}}}}\n"
                            "    retain: false\n    old:\n");
    flow = edit(flow, "    old:\n      kind: TFJob\n", "    old:\n");
    char cut[8192];
    snprintf(cut, sizeof cut, "%.*s", (int)(strstr(flow, "    old:\n") - flow), flow);
    dt__experiment *e = load_text("flow.yaml", cut, NULL);
    DT_CHECK(e);
    char *values[] = {"0.05", "2", "adam"}, *yaml = NULL;
    dt_job_spec *job = e ? render_job(e, "base-003", values, &yaml) : NULL;
    DT_CHECK(job && !strcmp(job->name, "base-003"));
    dt_job_spec_free(job);
    free(yaml);
    dt__experiment_free(e);
    char *noname = strdup(cut);
    DT_CHECK(noname);
    memcpy(strstr(noname, "metadata: {name: x}, "), "                     ", 21);
    CHECK_FAILS(noname, "trialSpec:",
                "spec.trialTemplate.trialSpec: the trial's job must be a block mapping");
    free(noname);
    /* a name in a flow mapping, non-ASCII around */
    const char *t = edit(BASE, "    trialSpec:\n      apiVersion: kubeflow.org/v1\n",
                         "    # réglages: ça va\n    trialSpec:  # l'essai\n      metadata: {name: "
                         "\"x\", labels: {équipe: \"été\"}}\n      apiVersion: kubeflow.org/v1\n");
    t = edit(t, "args: [\"--opt=", "args: [\"--nœud=\", \"--opt=");
    e = load_text("utf8.yaml", t, NULL);
    DT_CHECK(e);
    job = e ? render_job(e, "base-004", values, &yaml) : NULL;
    DT_CHECK(job && !strcmp(job->name, "base-004"));
    DT_CHECK(job && argv_has(&job->replicas[DT_REPLICA_TYPE_WORKER], "--nœud="));
    if (job) DT_CHECK(line_of(yaml, "--nœud") == line_of(t, "--nœud"));
    if (job) DT_CHECK(strstr(yaml, "équipe: \"été\""));
    dt_job_spec_free(job);
    free(yaml);
    dt__experiment_free(e);
}

static void test_err_schema(void) {
    CHECK_EDIT_FAILS("algorithmName: random", "algorithmName: annealing", "annealing",
                     "spec.algorithm.algorithmName: unknown algorithm 'annealing'");
    CHECK_EDIT_FAILS("  maxTrialCount: 6\n", "  maxTrialCount: 6\n  maxTrials: 6\n",
                     "maxTrials:", "spec.maxTrials: unknown key 'maxTrials' for an Experiment");
    CHECK_EDIT_FAILS("  maxTrialCount: 6\n", "  maxTrialCount: 6\n  maxTrialCount: 7\n",
                     "maxTrialCount: 7", "spec.maxTrialCount: duplicate key 'maxTrialCount'");
    CHECK_EDIT_FAILS("parallelTrialCount: 2", "parallelTrialCount: 0", "parallelTrialCount",
                     "spec.parallelTrialCount: expected a positive integer");
    CHECK_EDIT_FAILS("type: minimize", "type: minimise", "minimise",
                     "spec.objective.type: expected one of maximize, minimize");
    CHECK_EDIT_FAILS("    objectiveMetricName: loss\n", "",
                     "  objective:", "spec.objective.objectiveMetricName: required field missing");
    CHECK_EDIT_FAILS("  maxTrialCount: 6\n", "",
                     "spec:", "spec.maxTrialCount: required for algorithm random");
    CHECK_EDIT_FAILS("apiVersion: kubeflow.org/v1beta1", "apiVersion: kubeflow.org/v1alpha3",
                     "v1alpha3",
                     "apiVersion: kind Experiment needs apiVersion kubeflow.org/v1beta1");
    CHECK_EDIT_FAILS("  name: base\n", "  name: Base_1\n", "Base_1",
                     "metadata.name: 'Base_1' is not a valid experiment name");
    CHECK_EDIT_FAILS("    algorithmName: random\n",
                     "    algorithmName: random\n    algorithmSettings:\n      - {name: seed, "
                     "value: \"1\"}\n",
                     "seed",
                     "spec.algorithm.algorithmSettings: unknown setting 'seed' for "
                     "algorithm random (allowed: random_state)");
    CHECK_EDIT_FAILS("    algorithmName: random\n",
                     "    algorithmName: random\n    algorithmSettings:\n      - {name: "
                     "random_state, value: \"x\"}\n",
                     "random_state",
                     "spec.algorithm.algorithmSettings: random_state: expected "
                     "an integer");
    CHECK_EDIT_FAILS("  parallelTrialCount: 2\n",
                     "  parallelTrialCount: 2\n  earlyStopping:\n    algorithmName: "
                     "fancystop\n",
                     "fancystop", "spec.earlyStopping.algorithmName: unknown early stopping");
    CHECK_EDIT_FAILS("  parallelTrialCount: 2\n",
                     "  parallelTrialCount: 2\n  earlyStopping:\n    algorithmName: "
                     "medianstop\n    algorithmSettings:\n      - {name: start_step, value: "
                     "\"-1\"}\n",
                     "start_step",
                     "spec.earlyStopping.algorithmSettings: start_step: expected a "
                     "positive integer");
    CHECK_EDIT_FAILS("  parallelTrialCount: 2\n",
                     "  parallelTrialCount: 2\n  metricsCollectorSpec:\n    collector:\n      "
                     "kind: PrometheusMetric\n",
                     "PrometheusMetric",
                     "spec.metricsCollectorSpec.collector.kind: collector "
                     "PrometheusMetric is not supported");
    CHECK_EDIT_FAILS("  parallelTrialCount: 2\n", "  parallelTrialCount: 2\n  nasConfig: {}\n",
                     "nasConfig", "spec.nasConfig: neural architecture search is not supported");
}

/* Each algorithm's settings, at the setting's line. */
static void test_err_algorithms(void) {
#define ALGO(name, settings)                                                                       \
    edit(BASE, "    algorithmName: random\n",                                                      \
         "    algorithmName: " name "\n    algorithmSettings:\n" settings)
    CHECK_FAILS(ALGO("tpe", "      - {name: gamma, value: \"1.5\"}\n"), "gamma",
                "spec.algorithm.algorithmSettings: gamma: expected a number in (0, 1), got '1.5'");
    CHECK_FAILS(ALGO("bayesianoptimization", "      - {name: base_estimator, value: RF}\n"),
                "base_estimator",
                "spec.algorithm.algorithmSettings: base_estimator: expected one "
                "of GP, got 'RF'");
    CHECK_FAILS(ALGO("hyperband", "      - {name: resource_name, value: workers}\n"),
                "algorithmName: hyperband",
                "spec.algorithm.algorithmSettings: algorithm hyperband needs the settings r_l and "
                "resource_name");
    CHECK_FAILS(ALGO("hyperband", "      - {name: resource_name, value: workers}\n"
                                  "      - {name: r_l, value: \"9\"}\n"),
                "parallelTrialCount",
                "spec.parallelTrialCount: algorithm hyperband with eta 3 and "
                "r_l 9 needs at least 9 parallel trials");
    CHECK_FAILS(ALGO("hyperband", "      - {name: resource_name, value: epochs}\n"
                                  "      - {name: r_l, value: \"9\"}\n"),
                "resource_name",
                "spec.algorithm.algorithmSettings: resource_name: 'epochs' names "
                "no parameter");
    CHECK_FAILS(ALGO("hyperband", "      - {name: resource_name, value: workers}\n"
                                  "      - {name: eta, value: \"1\"}\n"),
                "name: eta", "spec.algorithm.algorithmSettings: eta: expected a number > 1");
    CHECK_FAILS(ALGO("asha", "      - {name: reduction_factor, value: \"2\"}\n"),
                "algorithmName: asha",
                "spec.algorithm.algorithmSettings: algorithm asha needs "
                "max_resource");
    CHECK_FAILS(ALGO("asha", "      - {name: resource_name, value: opt}\n"), "resource_name",
                "spec.algorithm.algorithmSettings: resource_name: parameter 'opt' must be an int");
    CHECK_FAILS(ALGO("asha", "      - {name: max_resource, value: \"4\"}\n"
                             "      - {name: min_resource, value: \"8\"}\n"),
                "min_resource",
                "spec.algorithm.algorithmSettings: min_resource 8 is more than "
                "max_resource 4");
    CHECK_FAILS(ALGO("random", "      - {name: random_state, value: \"1\"}\n"
                               "      - {name: random_state, value: \"2\"}\n"),
                "value: \"2\"",
                "spec.algorithm.algorithmSettings[1].name: setting 'random_state' "
                "given twice");
    /* the good ones load */
    dt__experiment *e = load_text("asha.yaml",
                                  ALGO("asha", "      - {name: resource_name, value: workers}\n"
                                               "      - {name: reduction_factor, value: \"2\"}\n"),
                                  NULL);
    DT_CHECK(e && e->resource_param == 1);
    dt__experiment_free(e);
#undef ALGO
}

static void test_err_parameters(void) {
    CHECK_EDIT_FAILS("      feasibleSpace:\n        min: \"0.01\"\n        max: \"0.1\"\n", "",
                     "- name: lr",
                     "spec.parameters[0].feasibleSpace: parameter 'lr' has no "
                     "feasible space");
    CHECK_EDIT_FAILS("max: \"0.1\"", "max: \"0.001\"", "min: \"0.01\"",
                     "spec.parameters[0].feasibleSpace.min: min 0.01 is more than max 0.001");
    CHECK_EDIT_FAILS("        max: \"0.1\"\n", "", "feasibleSpace:\n        min",
                     "spec.parameters[0].feasibleSpace.max: parameter 'lr' has no feasible space");
    CHECK_EDIT_FAILS("list: [sgd, adam]", "list: []", "list: []",
                     "spec.parameters[2].feasibleSpace.list: categorical needs a non-empty list");
    CHECK_EDIT_FAILS("list: [sgd, adam]", "list: [sgd, sgd]", "list: [sgd",
                     "spec.parameters[2].feasibleSpace.list[1]: value 'sgd' is listed twice");
    CHECK_EDIT_FAILS("parameterType: double", "parameterType: float", "float",
                     "spec.parameters[0].parameterType: expected one of int, double, discrete, "
                     "categorical");
    CHECK_EDIT_FAILS("max: \"3\"", "max: \"3.5\"", "3.5",
                     "spec.parameters[1].feasibleSpace.max: expected an integer");
    CHECK_EDIT_FAILS("max: \"0.1\"", "max: \"lots\"", "lots",
                     "spec.parameters[0].feasibleSpace.max: expected a number, got 'lots'");
    CHECK_EDIT_FAILS("        max: \"0.1\"\n",
                     "        max: \"0.1\"\n        distribution: logUniform\n"
                     "        step: \"-1\"\n",
                     "step", "spec.parameters[0].feasibleSpace.step: step must be positive");
    CHECK_FAILS(edit(edit(BASE, "min: \"0.01\"", "min: \"0\""), "        max: \"0.1\"\n",
                     "        max: \"0.1\"\n        distribution: logUniform\n"),
                "min: \"0\"",
                "spec.parameters[0].feasibleSpace.min: a logUniform parameter needs min > 0");
    CHECK_EDIT_FAILS("    - name: workers\n", "    - name: lr\n",
                     "- name: lr\n      parameterType: int",
                     "spec.parameters[1].name: parameter 'lr' given twice (also at line 14)");
    /* grid: a double needs a step (as Katib's) */
    CHECK_EDIT_FAILS("algorithmName: random", "algorithmName: grid", "- name: lr",
                     "spec.parameters: lr: algorithm grid needs feasibleSpace.step");
}

static void test_err_template(void) {
    CHECK_EDIT_FAILS("--lr=${trialParameters.learningRate}", "--lr=${trialParameters.lr}", "--lr=",
                     "spec.trialTemplate.trialSpec: placeholder ${trialParameters.lr} "
                     "names no trialParameter (trialParameters: learningRate, "
                     "numWorkers, optimizer)");
    CHECK_EDIT_FAILS("reference: workers", "reference: replicas", "reference: replicas",
                     "spec.trialTemplate.trialParameters[1].reference: reference 'replicas' "
                     "names no parameter");
    CHECK_EDIT_FAILS("      kind: TFJob", "      kind: Job", "kind: Job",
                     "spec.trialTemplate.trialSpec.kind: dtrain runs trials of kind TFJob, "
                     "PyTorchJob or TrainJob, got 'Job'");
    CHECK_EDIT_FAILS("    trialParameters:\n", "    trialParams:\n", "trialParams",
                     "spec.trialTemplate.trialParams: unknown key 'trialParams' for a trial "
                     "template");
    /* the job itself is checked with the first values, at the experiment's line */
    CHECK_EDIT_FAILS("min: \"1\", max: \"3\"", "min: \"-1\", max: \"3\"",
                     "replicas: ${trialParameters.numWorkers}",
                     "spec.tfReplicaSpecs.Worker.replicas: expected a non-negative integer, got "
                     "'-1'");
    CHECK_EDIT_FAILS(
        "            template:\n", "            templat:\n",
        "templat:", "spec.tfReplicaSpecs.Worker.templat: unknown key 'templat' for a replica spec");
}

static void test_err_sweep(void) {
    static const char good[] = "apiVersion: dtrain/v1\n"
                               "kind: Sweep\n"
                               "metadata: {name: s}\n"
                               "spec:\n"
                               "  parameters:\n"
                               "    N: [1, 2]\n"
                               "  trialSpec:\n"
                               "    apiVersion: kubeflow.org/v1\n"
                               "    kind: TFJob\n"
                               "    spec:\n"
                               "      tfReplicaSpecs:\n"
                               "        Worker:\n"
                               "          replicas: ${N}\n"
                               "          template:\n"
                               "            spec:\n"
                               "              containers:\n"
                               "                - name: tensorflow\n"
                               "                  command: [python3, a.py, \"%N%\"]\n";
    dt__experiment *e = load_text("good-sweep.yaml", good, NULL);
    DT_CHECK(e);
    dt__experiment_free(e);
    CHECK_FAILS(edit(good, "a.py, \"%N%\"", "a.py, \"%M%\""), "a.py",
                "template: placeholder %M% names no parameter (parameters: N)");
    CHECK_FAILS(edit(good, "a.py, \"%N%\"", "a.py, \"${N2}\""), "a.py",
                "template: placeholder ${N2} names no parameter");
    CHECK_FAILS(edit(good, "    N: [1, 2]", "    N: []"), "N: []",
                "spec.parameters.N: a sweep parameter needs a non-empty list of values");
    CHECK_FAILS(edit(good, "    N: [1, 2]", "    ID: [1, 2]"),
                "ID:", "spec.parameters.ID: ID is the trial's name");
    CHECK_FAILS(edit(good, "  parameters:", "  parallel: 0\n  parameters:"), "parallel",
                "spec.parallel: expected a positive integer");
    CHECK_FAILS(edit(good, "  trialSpec:", "  template: t.yaml\n  trialSpec:"),
                "trialSpec:", "spec.trialSpec: give template (a file) or trialSpec, not both");
    CHECK_FAILS(edit(good, "  parameters:", "  algorithm: random\n  parameters:"), "algorithm",
                "spec.algorithm: unknown key 'algorithm' for a Sweep");
    /* a template file: its own lines in the message */
    static const char tpl[] = "apiVersion: kubeflow.org/v1\n"
                              "kind: TFJob\n"
                              "metadata:\n"
                              "  name: job-%ID%\n"
                              "spec:\n"
                              "  tfReplicaSpecs:\n"
                              "    Worker:\n"
                              "      replicas: 1\n"
                              "      template:\n"
                              "        spec:\n"
                              "          containers:\n"
                              "            - name: tensorflow\n"
                              "              command: [python3, \"%RATE%\"]\n"
                              "              bogus: 1\n";
    const char *tpath = dt_test_write_file("tpl.yaml", tpl, strlen(tpl));
    static const char sweep[] = "apiVersion: dtrain/v1\n"
                                "kind: Sweep\n"
                                "metadata: {name: s}\n"
                                "spec:\n"
                                "  template: tpl.yaml\n"
                                "  parameters: {RATE: [\"0.1\"]}\n";
    const char *spath = dt_test_write_file("file-sweep.yaml", sweep, strlen(sweep));
    char want[1200];
    snprintf(want, sizeof want,
             "%s:14: spec.tfReplicaSpecs.Worker.template.spec.containers[0].bogus: unknown key",
             tpath);
    DT_CHECK_ERR(dt__experiment_load(&e, spath), DT_ERR_SPEC, want);
    static const char missing[] = "apiVersion: dtrain/v1\n"
                                  "kind: Sweep\n"
                                  "metadata: {name: s}\n"
                                  "spec:\n"
                                  "  template: nowhere.yaml\n"
                                  "  parameters: {RATE: [\"0.1\"]}\n";
    spath = dt_test_write_file("missing-sweep.yaml", missing, strlen(missing));
    snprintf(want, sizeof want, "%s:5: spec.template: ", spath);
    DT_CHECK_ERR(dt__experiment_load(&e, spath), DT_ERR_SPEC, want);
    DT_CHECK(strstr(dt_errmsg(), "nowhere.yaml: cannot open"));
}

/* Every prefix of the fixtures loads or fails cleanly (no crash, no leak). */
static void test_truncations(void) {
    static const char *const files[] = {"random-tfjob.yaml", "hyperband-pytorchjob.yaml"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[512], buf[8192];
        snprintf(path, sizeof path, DATA "%s", files[f]);
        FILE *fp = fopen(path, "rb");
        DT_CHECK(fp);
        size_t n = fread(buf, 1, sizeof buf, fp);
        fclose(fp);
        for (size_t len = 0; len <= n; len += 11) {
            const char *p = dt_test_write_file("t.yaml", buf, len);
            dt__experiment *e = NULL;
            dt_err err = dt__experiment_load(&e, p);
            DT_CHECK(err == DT_OK || err == DT_ERR_SPEC);
            DT_CHECK((err == DT_OK) == (e != NULL));
            if (err) DT_CHECK(!strncmp(dt_errmsg(), p, strlen(p)));
            dt__experiment_free(e);
        }
    }
}

DT_TEST_MAIN(DT_T(test_katib_random_tfjob), DT_T(test_katib_grid_pytorchjob),
             DT_T(test_katib_bayesian_hyperband), DT_T(test_asha_trainjob), DT_T(test_sweep),
             DT_T(test_sweep_inline), DT_T(test_katib_metadata_kept), DT_T(test_template_shapes),
             DT_T(test_err_schema), DT_T(test_err_algorithms), DT_T(test_err_parameters),
             DT_T(test_err_template), DT_T(test_err_sweep), DT_T(test_truncations))
