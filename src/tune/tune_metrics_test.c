/* tune_metrics_test.c - a trial's metrics from a job dir laid out as dtrain's jobs lay theirs:
 * TensorBoard runs of a TrainJob worker (names eval/accuracy, accuracy, train/loss) and of a
 * spec's training.logdir, the final value from result.json, Katib's StdOut lines (default
 * format, epoch on the line, a custom metricsFormat, a line still being written), Katib's File
 * collector (TEXT and JSON lines) and the final-value strategies. */
#include <sys/stat.h>

#include "core/file-impl.h"
#include "dtrain/summary.h"
#include "testing/dt_test.h"
#include "tune/metrics-impl.h"

static char dir[64];

static void put(const char *rel, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    char d[256];
    snprintf(d, sizeof d, "%s", p);
    *strrchr(d, '/') = 0;
    if (dt__mkdirs(d) || dt__write_file_atomic(p, text, strlen(text))) {
        fprintf(stderr, "cannot write %s: %s\n", p, dt_errmsg());
        exit(1);
    }
}

static void rm_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

static void test_tensorboard_and_result(void) {
    snprintf(dir, sizeof dir, "/tmp/dtrain-metrics-XXXXXX");
    DT_CHECK(mkdtemp(dir));
    dt__metric m = {0};
    double v;
    /* nothing yet: no error, nothing found */
    DT_CHECK_OK(dt__metric_collect(&m, dir, "accuracy", &(dt__metric_src){DT__COLLECT_AUTO, NULL, 0, NULL, 0}, 0));
    DT_CHECK(m.n == 0 && !m.has_result && !dt__metric_final(&m, "", &v));

    char run[256];
    snprintf(run, sizeof run, "%s/replicas/worker-0/tensorboard/eval", dir);
    dt_summary *w;
    DT_CHECK_OK(dt_summary_open(&w, run, 0));
    const char *tags[] = {"accuracy", "loss"};
    for (int ep = 1; ep <= 3; ep++) {
        float vals[] = {0.25f * (float)ep, 1.0f / (float)ep};
        DT_CHECK_OK(dt_summary_scalars(w, 10 * ep, 2, tags, vals));
    }
    DT_CHECK_OK(dt_summary_close(w));
    snprintf(run, sizeof run, "%s/replicas/worker-0/tensorboard/train", dir);
    DT_CHECK_OK(dt_summary_open(&w, run, 0));
    DT_CHECK_OK(dt_summary_scalar(w, 10, "loss", 2.0f));
    DT_CHECK_OK(dt_summary_scalar(w, 20, "loss", 1.5f));
    DT_CHECK_OK(dt_summary_close(w));

    DT_CHECK_OK(dt__metric_collect(&m, dir, "eval/accuracy", &(dt__metric_src){DT__COLLECT_TFEVENT, NULL, 0, NULL, 0}, 0));
    DT_CHECK(m.n == 3 && !strcmp(m.source, "tensorboard"));
    DT_CHECK(m.obs[1].step == 20 && m.obs[1].resource == 2 && m.obs[1].value == 0.5);
    DT_CHECK(dt__metric_resource(&m) == 3);
    DT_CHECK(dt__metric_at(&m, 2, &v) && v == 0.5);
    DT_CHECK(!dt__metric_at(&m, 0, &v));
    DT_CHECK(dt__metric_final(&m, "latest", &v) && v == 0.75);
    DT_CHECK(dt__metric_final(&m, "min", &v) && v == 0.25);
    /* a plain name is the eval run's; train/loss is the train run's */
    DT_CHECK_OK(dt__metric_collect(&m, dir, "loss", &(dt__metric_src){DT__COLLECT_AUTO, NULL, 0, NULL, 0}, 0));
    DT_CHECK(m.n == 3 && m.obs[0].value == 1.0);
    DT_CHECK_OK(dt__metric_collect(&m, dir, "train/loss", &(dt__metric_src){DT__COLLECT_AUTO, NULL, 0, NULL, 0}, 0));
    DT_CHECK(m.n == 2 && m.obs[1].value == 1.5);
    /* Katib's default StdOut collector, for a TrainJob that prints no name=value: falls back */
    DT_CHECK_OK(dt__metric_collect(&m, dir, "accuracy", &(dt__metric_src){DT__COLLECT_STDOUT, NULL, 0, NULL, 0}, 1));
    DT_CHECK(m.n == 3 && !strcmp(m.source, "tensorboard"));

    /* result.json: the final value, eval.accuracy and a replica's train.loss */
    put("result.json", "{\"status\": \"Succeeded\", \"eval\": {\"accuracy\": 0.7667, \"loss\": 0.3},"
                       " \"replicas\": {\"worker-0\": {\"result\": {\"train\": {\"loss\": 0.9}}}}}");
    DT_CHECK_OK(dt__metric_collect(&m, dir, "accuracy", &(dt__metric_src){DT__COLLECT_AUTO, NULL, 0, NULL, 0}, 1));
    DT_CHECK(m.has_result && m.result == 0.7667 && m.n == 3);
    DT_CHECK(dt__metric_final(&m, "", &v) && v == 0.7667);
    DT_CHECK(dt__metric_final(&m, "max", &v) && v == 0.7667);
    DT_CHECK(dt__metric_final(&m, "min", &v) && v == 0.25);
    DT_CHECK_OK(dt__metric_collect(&m, dir, "eval/accuracy", &(dt__metric_src){DT__COLLECT_AUTO, NULL, 0, NULL, 0}, 1));
    DT_CHECK(m.has_result && m.result == 0.7667);
    DT_CHECK_OK(dt__metric_collect(&m, dir, "train/loss", &(dt__metric_src){DT__COLLECT_AUTO, NULL, 0, NULL, 0}, 1));
    DT_CHECK(m.has_result && m.result == 0.9);
    DT_CHECK_OK(dt__metric_collect(&m, dir, "f1", &(dt__metric_src){DT__COLLECT_AUTO, NULL, 0, NULL, 0}, 1));
    DT_CHECK(m.n == 0 && !m.has_result && !*m.source);
    dt__metric_free(&m);
    rm_dir();
}

/* A TrainJob whose spec puts its TensorBoard runs elsewhere (training.logdir) */
static void test_spec_logdir(void) {
    snprintf(dir, sizeof dir, "/tmp/dtrain-metrics-XXXXXX");
    DT_CHECK(mkdtemp(dir));
    char spec[2048];
    snprintf(spec, sizeof spec,
             "apiVersion: dtrain/v1\nkind: TrainJob\nmetadata: {name: x}\nspec:\n"
             "  data:\n    train: {format: synthetic, samples: 10, shape: [2], classes: 2}\n"
             "  model:\n    input: [2]\n    layers: [{type: dense, units: 2}]\n"
             "  loss: softmax_cross_entropy\n  optimizer: {type: sgd}\n"
             "  training: {logdir: %s/elsewhere}\n", dir);
    put("spec.yaml", spec);
    char run[256];
    snprintf(run, sizeof run, "%s/elsewhere/eval", dir);
    dt_summary *w;
    DT_CHECK_OK(dt_summary_open(&w, run, 0));
    DT_CHECK_OK(dt_summary_scalar(w, 5, "accuracy", 0.5f));
    DT_CHECK_OK(dt_summary_close(w));
    dt__metric m = {0};
    DT_CHECK_OK(dt__metric_collect(&m, dir, "eval/accuracy", &(dt__metric_src){DT__COLLECT_TFEVENT, NULL, 0, NULL, 0}, 0));
    DT_CHECK(m.n == 1 && m.obs[0].value == 0.5 && m.obs[0].step == 5);
    /* a spec that does not parse is no error: the other places are looked at */
    put("spec.yaml", "logdir: [unclosed\n");
    DT_CHECK_OK(dt__metric_collect(&m, dir, "eval/accuracy", &(dt__metric_src){DT__COLLECT_TFEVENT, NULL, 0, NULL, 0}, 0));
    DT_CHECK(m.n == 0);
    dt__metric_free(&m);
    rm_dir();
}

static void test_stdout(void) {
    snprintf(dir, sizeof dir, "/tmp/dtrain-metrics-XXXXXX");
    DT_CHECK(mkdtemp(dir));
    put("logs/worker-1.log", "accuracy=0.1\n");
    put("logs/worker-0.log", "starting\n"
                             "epoch 1: accuracy=0.5 loss = 1.25\n"
                             "Epoch=2 accuracy = +0.625 val-accuracy=0.9\n"
                             "accuracy=.75e0 my_accuracy=0.1 step=300\n"
                             "accuracy=abc\n"
                             "accuracy=0.8"); /* no newline yet: still being written */
    dt__metric m = {0};
    double v;
    DT_CHECK_OK(dt__metric_collect(&m, dir, "accuracy", &(dt__metric_src){DT__COLLECT_STDOUT, NULL, 0, NULL, 0}, 0));
    DT_CHECK(!strcmp(m.source, "stdout"));
    DT_CHECK(m.n == 3);
    DT_CHECK(m.obs[0].value == 0.5 && m.obs[0].resource == 1);
    DT_CHECK(m.obs[1].value == 0.625 && m.obs[1].resource == 2); /* Epoch= is not epoch= */
    DT_CHECK(m.obs[2].value == 0.75 && m.obs[2].step == 300 && m.obs[2].resource == 3);
    DT_CHECK(dt__metric_final(&m, "", &v) && v == 0.75);
    /* finished: the last line counts */
    DT_CHECK_OK(dt__metric_collect(&m, dir, "accuracy", &(dt__metric_src){DT__COLLECT_STDOUT, NULL, 0, NULL, 0}, 1));
    DT_CHECK(m.n == 4 && dt__metric_final(&m, "latest", &v) && v == 0.8);
    DT_CHECK(dt__metric_final(&m, "max", &v) && v == 0.8);
    DT_CHECK_OK(dt__metric_collect(&m, dir, "val-accuracy", &(dt__metric_src){DT__COLLECT_STDOUT, NULL, 0, NULL, 0}, 1));
    DT_CHECK(m.n == 1 && m.obs[0].value == 0.9);
    DT_CHECK_OK(dt__metric_collect(&m, dir, "loss", &(dt__metric_src){DT__COLLECT_AUTO, NULL, 0, NULL, 0}, 1));
    DT_CHECK(m.n == 1 && m.obs[0].value == 1.25 && !strcmp(m.source, "stdout"));

    /* a metricsFormat of the experiment's: only lines in that form */
    const char *fmt[] = {"\\{metricName: ([\\w|-]+), metricValue: ([+-]?\\d*(\\.\\d+)?)\\}"};
    put("logs/worker-0.log", "accuracy=0.1\n{metricName: accuracy, metricValue: 0.55}\n");
    DT_CHECK_OK(dt__metric_collect(&m, dir, "accuracy", &(dt__metric_src){DT__COLLECT_STDOUT, fmt, 1, NULL, 0}, 1));
    DT_CHECK(m.n == 1 && m.obs[0].value == 0.55);
    const char *bad[] = {"(unclosed"};
    DT_CHECK_ERR(dt__metric_collect(&m, dir, "accuracy", &(dt__metric_src){DT__COLLECT_STDOUT, bad, 1, NULL, 0}, 1),
                 DT_ERR_SPEC, "metricsFormat '(unclosed'");
    /* the chief's log is the primary one */
    put("logs/chief-0.log", "accuracy=0.3\n");
    DT_CHECK_OK(dt__metric_collect(&m, dir, "accuracy", &(dt__metric_src){DT__COLLECT_STDOUT, NULL, 0, NULL, 0}, 1));
    DT_CHECK(m.n == 1 && m.obs[0].value == 0.3);

    /* Katib's File collector: a file of the job's, TEXT (as StdOut) or JSON lines */
    put("out/metrics.txt", "accuracy=0.4\naccuracy=0.6\n");
    dt__metric_src text = {DT__COLLECT_FILE, NULL, 0, "out/metrics.txt", 0};
    DT_CHECK_OK(dt__metric_collect(&m, dir, "accuracy", &text, 1));
    DT_CHECK(m.n == 2 && m.obs[1].value == 0.6 && !strcmp(m.source, "file"));
    put("out/metrics.json", "{\"accuracy\": \"0.7\", \"epoch\": 1}\n{\"loss\": 1}\n"
                            "{\"accuracy\": 0.8, \"epoch\": 2, \"step\": 50}\nnot json\n");
    dt__metric_src js = {DT__COLLECT_FILE, NULL, 0, "out/metrics.json", 1};
    DT_CHECK_OK(dt__metric_collect(&m, dir, "accuracy", &js, 1));
    DT_CHECK(m.n == 2 && m.obs[0].value == 0.7 && m.obs[0].resource == 1);
    DT_CHECK(m.obs[1].value == 0.8 && m.obs[1].resource == 2 && m.obs[1].step == 50);
    /* no file yet: the log, as AUTO */
    js.file = "out/none.json";
    DT_CHECK_OK(dt__metric_collect(&m, dir, "accuracy", &js, 1));
    DT_CHECK(m.n == 1 && !strcmp(m.source, "stdout"));

    dt__collector k;
    DT_CHECK_OK(dt__collector_parse("File", &k));
    DT_CHECK(k == DT__COLLECT_FILE);
    DT_CHECK_OK(dt__collector_parse("TensorFlowEvent", &k));
    DT_CHECK(k == DT__COLLECT_TFEVENT);
    DT_CHECK_ERR(dt__collector_parse("Prometheus", &k), DT_ERR_SPEC, "'Prometheus'");
    dt__metric_free(&m);
    rm_dir();
}

DT_TEST_MAIN(DT_T(test_tensorboard_and_result), DT_T(test_spec_logdir), DT_T(test_stdout))
