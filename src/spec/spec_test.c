/* spec_test.c - the YAML training spec loader and the yaml_doc layer under it.
 *
 * Error tests edit one line of a known-good fixture (BASE) and expect DT_ERR_SPEC with a
 * message that starts with "t.yaml:LINE: FIELD.PATH: ...", where LINE is computed from the
 * edited text by looking up the line that holds a marker string. */
#include <stdint.h>

#include "dtrain/spec.h"
#include "spec/yaml_doc-impl.h"
#include "testing/dt_test.h"
#include "testing/yaml_fixture.h"

#define MAX_LAYERS_FOR_TEST 4096 /* MAX_LAYERS in spec.c */

static const char BASE[] = "# a training spec for tests\n"
                           "apiVersion: dtrain/v1\n"
                           "kind: TrainJob\n"
                           "metadata:\n"
                           "  name: test-job\n"
                           "spec:\n"
                           "  seed: 7\n"
                           "  data:\n"
                           "    train: {format: synthetic, samples: 100, shape: [4], classes: 3}\n"
                           "    eval_fraction: 0.25\n"
                           "    normalize: {scale: 2, shift: -1}\n"
                           "  model:\n"
                           "    input: [4]\n"
                           "    layers:\n"
                           "      - {type: dense, name: fc1, units: 8, activation: relu}\n"
                           "      - type: dropout\n"
                           "        rate: 0.5\n"
                           "      - {type: dense, units: 3}\n"
                           "  optimizer:\n"
                           "    type: adam\n"
                           "    learning_rate: 0.01\n"
                           "  training:\n"
                           "    batch_size: 16\n"
                           "    epochs: 2\n";

/* Parse text as "t.yaml" and expect DT_ERR_SPEC, no spec, and a message that starts with
 * "t.yaml:LINE: " + want, LINE being the line of `at` in text. */
static int spec_fails(const char *text, const char *at, const char *want) {
    char prefix[600];
    snprintf(prefix, sizeof prefix, "t.yaml:%d: %s", line_of(text, at), want);
    dt_spec *sp = (dt_spec *)&prefix; /* must be reset to NULL */
    dt_err_clear();
    dt_err e = dt_spec_parse(&sp, text, strlen(text), "t.yaml");
    if (e != DT_ERR_SPEC || sp || strncmp(dt_errmsg(), prefix, strlen(prefix))) {
        fprintf(stderr, "got %s: \"%s\"\nwant DT_ERR_SPEC: \"%s...\"\n", dt_strerror(e),
                dt_errmsg(), prefix);
        if (e == DT_OK) dt_spec_free(sp);
        return 0;
    }
    return 1;
}

/* The edit of BASE must fail at the line of `at` (in the edited text) with want. */
#define CHECK_EDIT_FAILS(from, to, at, want) DT_CHECK(spec_fails(edit(BASE, from, to), at, want))

static dt_spec *parse_ok(const char *text) {
    dt_spec *sp = NULL;
    dt_err e = dt_spec_parse(&sp, text, strlen(text), "t.yaml");
    if (e) fprintf(stderr, "unexpected error %s: %s\n", dt_strerror(e), dt_errmsg());
    return sp;
}

/* ---- valid specs ---- */

static void test_base_fixture(void) {
    dt_spec *sp = parse_ok(BASE);
    DT_CHECK(sp);
    DT_CHECK(!strcmp(sp->path, "t.yaml"));
    DT_CHECK(!strcmp(sp->name, "test-job"));
    DT_CHECK(sp->seed == 7);
    DT_CHECK(sp->train.format == DT_DATA_SYNTHETIC);
    DT_CHECK(sp->train.samples == 100 && sp->train.num_classes == 3);
    DT_CHECK(sp->train.shape.ndim == 1 && sp->train.shape.dim[0] == 4);
    DT_CHECK(sp->train.line == line_of(BASE, "train:"));
    DT_CHECK(!sp->has_eval);
    DT_CHECK_NEAR(sp->eval_fraction, 0.25, 0);
    DT_CHECK(sp->norm == DT_NORM_SCALE);
    DT_CHECK(sp->scale == 2.0f && sp->shift == -1.0f);
    DT_CHECK(sp->shuffle == 1);
    DT_CHECK(sp->input.ndim == 1 && sp->input.dim[0] == 4);
    DT_CHECK(sp->nlayers == 3);
    DT_CHECK(sp->layers[0].kind == DT_LAYER_DENSE && sp->layers[0].units == 8);
    DT_CHECK(!strcmp(sp->layers[0].name, "fc1") && sp->layers[0].activation == DT_ACT_RELU);
    DT_CHECK(sp->layers[0].line == line_of(BASE, "name: fc1"));
    DT_CHECK(sp->layers[1].kind == DT_LAYER_DROPOUT && sp->layers[1].rate == 0.5f);
    DT_CHECK(sp->layers[1].line == line_of(BASE, "type: dropout"));
    DT_CHECK(sp->layers[1].name[0] == '\0');
    DT_CHECK(sp->layers[2].kind == DT_LAYER_DENSE && sp->layers[2].units == 3);
    DT_CHECK(sp->layers[2].activation == DT_ACT_NONE && !sp->layers[2].no_bias);
    DT_CHECK(sp->layers[2].line == line_of(BASE, "units: 3"));
    DT_CHECK(sp->loss == DT_LOSS_SOFTMAX_CROSS_ENTROPY);
    DT_CHECK(sp->optimizer.kind == DT_OPTIM_ADAM);
    DT_CHECK(sp->optimizer.learning_rate == 0.01f);
    DT_CHECK(sp->optimizer.beta1 == 0.9f && sp->optimizer.beta2 == 0.999f);
    DT_CHECK(sp->optimizer.epsilon == 1e-7f);
    DT_CHECK(sp->optimizer.schedule.kind == DT_SCHED_CONSTANT);
    DT_CHECK(sp->batch_size == 16 && sp->epochs == 2);
    DT_CHECK(sp->threads == 0 && sp->checkpoint_every_steps == 0 && sp->checkpoint_keep == 3);
    dt_spec_free(sp);
    dt_spec_free(NULL);
}

static void test_defaults(void) {
    static const char text[] = "apiVersion: dtrain/v1\nkind: TrainJob\nmetadata: {name: a}\n"
                               "spec:\n"
                               "  data: {train: {format: csv, path: x.csv}}\n"
                               "  model: {layers: [{type: dense, units: 2}]}\n"
                               "  optimizer: {type: sgd}\n";
    dt_spec *sp = parse_ok(text);
    DT_CHECK(sp);
    DT_CHECK(!strcmp(sp->name, "a") && sp->seed == 0);
    DT_CHECK(sp->train.format == DT_DATA_CSV && !strcmp(sp->train.path, "x.csv"));
    DT_CHECK(sp->train.label_column == -1 && sp->train.header == 0);
    DT_CHECK(!sp->has_eval);
    DT_CHECK_NEAR(sp->eval_fraction, 0.2, 0);
    DT_CHECK(sp->norm == DT_NORM_NONE && sp->scale == 1.0f && sp->shift == 0.0f);
    DT_CHECK(sp->shuffle == 1);
    DT_CHECK(sp->input.ndim == 0);
    DT_CHECK(sp->nlayers == 1);
    const dt_layer_conf *l = &sp->layers[0];
    DT_CHECK(l->activation == DT_ACT_NONE && !l->no_bias && l->name[0] == '\0');
    DT_CHECK(l->kernel_init == DT_INIT_DEFAULT && l->bias_init == DT_INIT_DEFAULT);
    DT_CHECK(l->line == 6);
    DT_CHECK(sp->loss == DT_LOSS_SOFTMAX_CROSS_ENTROPY);
    DT_CHECK(sp->optimizer.kind == DT_OPTIM_SGD && sp->optimizer.learning_rate == 0.01f);
    DT_CHECK(sp->optimizer.weight_decay == 0.0f);
    DT_CHECK(sp->batch_size == 32 && sp->epochs == 1 && sp->threads == 0);
    DT_CHECK(sp->checkpoint_every_steps == 0 && sp->checkpoint_keep == 3);
    dt_spec_free(sp);
}

static void test_every_field(void) {
    static const char text[] =
        "apiVersion: dtrain/v1\n"
        "kind: TrainJob\n"
        "metadata: {name: every-field-1}\n"
        "spec:\n"
        "  seed: 18446744073709551615\n"
        "  data:\n"
        "    train: {format: csv, path: /abs/train.csv, label_column: 0, header: true}\n"
        "    eval: {format: idx, images: i.gz, labels: l.gz}\n"
        "    normalize: {mean: 0.5, std: 0.25, scale: 0.1}\n"
        "    shuffle: false\n"
        "  model:\n"
        "    input: [28, 28, 1]\n"
        "    layers:\n"
        "      - {type: conv2d, name: c1, filters: 8, kernel_size: [3, 5], strides: 2,\n"
        "         padding: same, activation: tanh, use_bias: false,\n"
        "         kernel_initializer: he_normal, bias_initializer: zeros}\n"
        "      - {type: maxpool2d, pool_size: [3, 2], padding: same}\n"
        "      - {type: maxpool2d, pool_size: 2, strides: [1, 1]}\n"
        "      - {type: maxpool2d}\n"
        "      - {type: flatten, name: Flat_2}\n"
        "      - {type: dense, units: 10, activation: sigmoid, kernel_initializer: glorot_normal,\n"
        "         bias_initializer: he_uniform}\n"
        "      - {type: activation, activation: softmax}\n"
        "      - {type: activation, activation: linear}\n"
        "  loss: mse\n"
        "  optimizer:\n"
        "    type: momentum\n"
        "    learning_rate: 0.5\n"
        "    momentum: 0.95\n"
        "    nesterov: true\n"
        "    weight_decay: 0.0001\n"
        "    schedule: {type: step, step_size: 100, gamma: 0.5}\n"
        "  training:\n"
        "    batch_size: 128\n"
        "    epochs: 3\n"
        "    threads: 2\n"
        "    checkpoint: {every_steps: 50, keep: 1}\n";
    dt_spec *sp = parse_ok(text);
    DT_CHECK(sp);
    DT_CHECK(sp->seed == UINT64_MAX);
    DT_CHECK(sp->train.format == DT_DATA_CSV && !strcmp(sp->train.path, "/abs/train.csv"));
    DT_CHECK(sp->train.label_column == 0 && sp->train.header == 1);
    DT_CHECK(sp->has_eval && sp->eval.format == DT_DATA_IDX);
    DT_CHECK(!strcmp(sp->eval.images, "i.gz") && !strcmp(sp->eval.labels, "l.gz"));
    DT_CHECK(sp->eval.line == 8);
    DT_CHECK(sp->norm == DT_NORM_MEAN_STD);
    DT_CHECK(sp->mean == 0.5f && sp->std == 0.25f && sp->scale == 0.1f);
    DT_CHECK(sp->shuffle == 0);
    DT_CHECK(sp->input.ndim == 3 && sp->input.dim[0] == 28 && sp->input.dim[2] == 1);
    DT_CHECK(sp->nlayers == 8);
    const dt_layer_conf *l = sp->layers;
    DT_CHECK(l[0].kind == DT_LAYER_CONV2D && l[0].filters == 8 && l[0].line == 14);
    DT_CHECK(l[0].kernel[0] == 3 && l[0].kernel[1] == 5);
    DT_CHECK(l[0].stride[0] == 2 && l[0].stride[1] == 2);
    DT_CHECK(l[0].padding == DT_PADDING_SAME && l[0].activation == DT_ACT_TANH);
    DT_CHECK(l[0].no_bias == 1 && l[0].kernel_init == DT_INIT_HE_NORMAL);
    DT_CHECK(l[0].bias_init == DT_INIT_ZEROS);
    DT_CHECK(l[1].kind == DT_LAYER_MAXPOOL2D && l[1].kernel[0] == 3 && l[1].kernel[1] == 2);
    DT_CHECK(l[1].stride[0] == 3 && l[1].stride[1] == 2 && l[1].padding == DT_PADDING_SAME);
    DT_CHECK(l[2].kernel[0] == 2 && l[2].stride[0] == 1 && l[2].stride[1] == 1);
    DT_CHECK(l[2].padding == DT_PADDING_VALID);
    DT_CHECK(l[3].kernel[0] == 2 && l[3].kernel[1] == 2 && l[3].stride[1] == 2);
    DT_CHECK(l[4].kind == DT_LAYER_FLATTEN && !strcmp(l[4].name, "Flat_2"));
    DT_CHECK(l[5].kind == DT_LAYER_DENSE && l[5].activation == DT_ACT_SIGMOID);
    DT_CHECK(l[5].kernel_init == DT_INIT_GLOROT_NORMAL && l[5].bias_init == DT_INIT_HE_UNIFORM);
    DT_CHECK(l[6].kind == DT_LAYER_ACTIVATION && l[6].activation == DT_ACT_SOFTMAX);
    DT_CHECK(l[7].kind == DT_LAYER_ACTIVATION && l[7].activation == DT_ACT_NONE);
    DT_CHECK(sp->loss == DT_LOSS_MSE);
    const dt_optim_conf *o = &sp->optimizer;
    DT_CHECK(o->kind == DT_OPTIM_MOMENTUM && o->learning_rate == 0.5f);
    DT_CHECK(o->momentum == 0.95f && o->nesterov == 1 && o->weight_decay == 0.0001f);
    DT_CHECK(o->schedule.kind == DT_SCHED_STEP && o->schedule.step_size == 100);
    DT_CHECK(o->schedule.gamma == 0.5f);
    DT_CHECK(sp->batch_size == 128 && sp->epochs == 3 && sp->threads == 2);
    DT_CHECK(sp->checkpoint_every_steps == 50 && sp->checkpoint_keep == 1);
    dt_spec_free(sp);
}

static void test_optimizer_variants(void) {
    dt_spec *sp = parse_ok(edit(BASE, "    type: adam\n    learning_rate: 0.01\n",
                                "    type: adagrad\n    initial_accumulator: 0.5\n"
                                "    epsilon: 1e-8\n    schedule:\n      type: cosine\n"
                                "      total_steps: 1000\n      min_lr: 0.0001\n"));
    DT_CHECK(sp);
    const dt_optim_conf *o = &sp->optimizer;
    DT_CHECK(o->kind == DT_OPTIM_ADAGRAD && o->learning_rate == 0.001f);
    DT_CHECK(o->initial_accumulator == 0.5f && o->epsilon == 1e-8f);
    DT_CHECK(o->schedule.kind == DT_SCHED_COSINE && o->schedule.total_steps == 1000);
    DT_CHECK(o->schedule.min_lr == 0.0001f);
    dt_spec_free(sp);

    sp = parse_ok(edit(BASE, "    learning_rate: 0.01\n",
                       "    beta1: 0.8\n    beta2: 0.99\n    schedule: {type: constant}\n"));
    DT_CHECK(sp);
    DT_CHECK(sp->optimizer.learning_rate == 0.001f && sp->optimizer.beta1 == 0.8f);
    DT_CHECK(sp->optimizer.beta2 == 0.99f && sp->optimizer.weight_decay == 0.0f);
    dt_spec_free(sp);

    sp = parse_ok(edit(BASE, "type: adam", "type: momentum"));
    DT_CHECK(sp);
    DT_CHECK(sp->optimizer.momentum == 0.9f && sp->optimizer.nesterov == 0);
    dt_spec_free(sp);

    sp = parse_ok(edit(BASE, "normalize: {scale: 2, shift: -1}", "normalize: standard"));
    DT_CHECK(sp && sp->norm == DT_NORM_STANDARD);
    dt_spec_free(sp);

    sp = parse_ok(edit(BASE, "normalize: {scale: 2, shift: -1}", "normalize: {mean: 1, std: 2}"));
    DT_CHECK(sp && sp->norm == DT_NORM_MEAN_STD && sp->scale == 1.0f && sp->std == 2.0f);
    dt_spec_free(sp);

    sp = parse_ok(edit(BASE, "normalize: {scale: 2, shift: -1}", "normalize: {scale: 0.5}"));
    DT_CHECK(sp && sp->norm == DT_NORM_SCALE && sp->scale == 0.5f && sp->shift == 0.0f);
    dt_spec_free(sp);
}

/* The three example specs load with the layers, optimizer and batch they document. */
static void test_examples_load(void) {
    dt_spec *sp = NULL;
    DT_CHECK_OK(dt_spec_load(&sp, DT_SOURCE_DIR "/examples/iris.yaml"));
    DT_CHECK(!strcmp(sp->name, "iris"));
    DT_CHECK(sp->train.format == DT_DATA_CSV && sp->train.label_column == -1);
    DT_CHECK(!strcmp(sp->train.path, DT_SOURCE_DIR "/examples/data/iris.data"));
    DT_CHECK(!sp->has_eval);
    DT_CHECK_NEAR(sp->eval_fraction, 0.2, 0);
    DT_CHECK(sp->norm == DT_NORM_STANDARD);
    DT_CHECK(sp->nlayers == 3 && sp->layers[0].units == 16 && sp->layers[1].units == 16);
    DT_CHECK(sp->layers[2].units == 3 && sp->layers[2].activation == DT_ACT_NONE);
    DT_CHECK(sp->optimizer.kind == DT_OPTIM_ADAM && sp->optimizer.learning_rate == 0.01f);
    DT_CHECK(sp->batch_size >= 8 && sp->batch_size <= 16 && sp->epochs == 100);
    dt_spec_free(sp);

    sp = NULL;
    DT_CHECK_OK(dt_spec_load(&sp, DT_SOURCE_DIR "/examples/fashion_mnist_mlp.yaml"));
    DT_CHECK(!strcmp(sp->name, "fashion-mnist-mlp"));
    DT_CHECK(sp->train.format == DT_DATA_IDX && sp->has_eval);
    DT_CHECK(
        !strcmp(sp->train.images, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"));
    DT_CHECK(
        !strcmp(sp->eval.labels, "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"));
    DT_CHECK(sp->norm == DT_NORM_SCALE);
    DT_CHECK_NEAR(sp->scale, 1.0 / 255, 1e-9);
    DT_CHECK(sp->input.ndim == 3 && sp->input.dim[0] == 28);
    DT_CHECK(sp->nlayers == 4 && sp->layers[0].kind == DT_LAYER_FLATTEN);
    DT_CHECK(sp->layers[1].units == 256 && sp->layers[1].activation == DT_ACT_RELU);
    DT_CHECK(sp->layers[2].units == 128 && sp->layers[3].units == 10);
    DT_CHECK(sp->optimizer.kind == DT_OPTIM_ADAM && sp->optimizer.learning_rate == 0.001f);
    DT_CHECK(sp->optimizer.schedule.kind == DT_SCHED_COSINE);
    DT_CHECK(sp->optimizer.schedule.total_steps == 0 && sp->optimizer.schedule.min_lr == 0.0f);
    DT_CHECK(sp->batch_size == 64 && sp->epochs == 10);
    dt_spec_free(sp);

    sp = NULL;
    DT_CHECK_OK(dt_spec_load(&sp, DT_SOURCE_DIR "/examples/fashion_mnist_cnn.yaml"));
    DT_CHECK(!strcmp(sp->name, "fashion-mnist-cnn"));
    static const dt_layer_kind kinds[] = {DT_LAYER_CONV2D,    DT_LAYER_MAXPOOL2D, DT_LAYER_CONV2D,
                                          DT_LAYER_MAXPOOL2D, DT_LAYER_FLATTEN,   DT_LAYER_DENSE,
                                          DT_LAYER_DROPOUT,   DT_LAYER_DENSE};
    DT_CHECK(sp->nlayers == 8);
    for (int i = 0; i < 8; i++)
        DT_CHECK(sp->layers[i].kind == kinds[i]);
    DT_CHECK(sp->layers[0].filters == 32 && sp->layers[0].kernel[0] == 5);
    DT_CHECK(sp->layers[0].kernel[1] == 5 && sp->layers[0].padding == DT_PADDING_SAME);
    DT_CHECK(sp->layers[0].stride[0] == 1 && sp->layers[0].activation == DT_ACT_RELU);
    DT_CHECK(sp->layers[1].kernel[0] == 2 && sp->layers[1].stride[0] == 2);
    DT_CHECK(sp->layers[2].filters == 64 && sp->layers[5].units == 128);
    DT_CHECK(sp->layers[7].units == 10);
    DT_CHECK(sp->optimizer.kind == DT_OPTIM_ADAM && sp->optimizer.learning_rate == 0.001f);
    DT_CHECK(sp->batch_size == 64 && sp->epochs >= 1 && sp->epochs <= 10);
    dt_spec_free(sp);
}

/* The example in docs/SPEC.md is a valid spec. */
static void test_doc_example_loads(void) {
    static char doc[65536];
    FILE *f = fopen(DT_SOURCE_DIR "/docs/SPEC.md", "rb");
    DT_CHECK(f != NULL);
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = '\0';
    char *start = strstr(doc, "```yaml\n");
    DT_CHECK(start != NULL);
    start += strlen("```yaml\n");
    char *end = strstr(start, "```");
    DT_CHECK(end != NULL);
    dt_spec *sp = NULL;
    DT_CHECK_OK(dt_spec_parse(&sp, start, (size_t)(end - start), "SPEC.md"));
    DT_CHECK(!strcmp(sp->name, "fashion-mnist-mlp") && sp->nlayers == 4);
    dt_spec_free(sp);
}

/* dt_spec_load resolves relative paths against the spec's directory, keeps absolute ones;
 * dt_spec_parse keeps both as written. */
static void test_relative_paths(void) {
    static const char text[] =
        "apiVersion: dtrain/v1\nkind: TrainJob\nmetadata: {name: paths}\n"
        "spec:\n"
        "  data:\n"
        "    train: {format: idx, images: data/train-img.gz, labels: ../up/lab.gz}\n"
        "    eval: {format: csv, path: /abs/eval.csv}\n"
        "  model: {layers: [{type: flatten}]}\n"
        "  optimizer: {type: sgd}\n";
    const char *path = dt_test_write_file("paths.yaml", text, strlen(text));
    char want[600];
    dt_spec *sp = NULL;
    DT_CHECK_OK(dt_spec_load(&sp, path));
    DT_CHECK(!strcmp(sp->path, path));
    snprintf(want, sizeof want, "%s/data/train-img.gz", dt_test_tmpdir());
    DT_CHECK(!strcmp(sp->train.images, want));
    snprintf(want, sizeof want, "%s/../up/lab.gz", dt_test_tmpdir());
    DT_CHECK(!strcmp(sp->train.labels, want));
    DT_CHECK(!strcmp(sp->eval.path, "/abs/eval.csv"));
    dt_spec_free(sp);

    sp = parse_ok(text);
    DT_CHECK(sp && !strcmp(sp->train.images, "data/train-img.gz"));
    dt_spec_free(sp);
}

/* Comments, no final newline, CRLF, anchors, and several documents (the first is used). */
static void test_yaml_forms(void) {
    dt_spec *sp = NULL;
    size_t n = strlen(BASE);
    DT_CHECK(n > 0 && BASE[n - 1] == '\n');
    /* no final newline */
    DT_CHECK_OK(dt_spec_parse(&sp, BASE, n - 1, "t.yaml"));
    DT_CHECK(sp->epochs == 2);
    dt_spec_free(sp);

    /* comments everywhere */
    sp = parse_ok(edit(BASE, "  seed: 7\n",
                       "  # the seed\n  seed: 7   # trailing\n\n    # indented comment\n"));
    DT_CHECK(sp && sp->seed == 7);
    DT_CHECK(sp && sp->layers[0].line == line_of(BASE, "name: fc1") + 3);
    dt_spec_free(sp);

    /* several documents: the first one counts; a broken later one is never parsed */
    char multi[8192];
    snprintf(multi, sizeof multi, "---\n%s---\n%s\n---\nkind: [unclosed\n", BASE,
             edit(BASE, "name: test-job", "name: second"));
    sp = parse_ok(multi);
    DT_CHECK(sp && !strcmp(sp->name, "test-job"));
    DT_CHECK(sp && sp->layers[0].line == line_of(BASE, "name: fc1") + 1);
    dt_spec_free(sp);

    /* CRLF line endings */
    char crlf[8192];
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (BASE[i] == '\n') crlf[o++] = '\r';
        crlf[o++] = BASE[i];
    }
    crlf[o] = '\0';
    sp = parse_ok(crlf);
    DT_CHECK(sp && sp->layers[2].line == line_of(BASE, "units: 3"));
    dt_spec_free(sp);

    /* anchors and aliases */
    sp = parse_ok(
        edit(BASE, "      - {type: dense, units: 3}\n", "      - &last {type: dense, units: 3}\n"));
    DT_CHECK(sp && sp->nlayers == 3);
    dt_spec_free(sp);

    /* the same through a file */
    const char *path = dt_test_write_file("multi.yaml", multi, strlen(multi));
    sp = NULL;
    DT_CHECK_OK(dt_spec_load(&sp, path));
    DT_CHECK(!strcmp(sp->name, "test-job"));
    dt_spec_free(sp);
}

/* ---- errors ---- */

static void test_err_unknown_keys(void) {
    CHECK_EDIT_FAILS("kind: TrainJob\n", "kind: TrainJob\nstatus: {}\n", "status",
                     "status: unknown key 'status' (allowed: apiVersion, kind, metadata, spec)");
    CHECK_EDIT_FAILS(
        "  seed: 7\n", "  seed: 7\n  replica: 2\n", "replica",
        "spec.replica: unknown key 'replica' (allowed: seed, data, model, loss, optimizer, "
        "training, replicas, strategy, runPolicy, successPolicy, elasticPolicy, pytorchEnv, "
                       "parameterServer, allreduce)");
    CHECK_EDIT_FAILS(
        "units: 8", "unit: 8", "unit:",
        "spec.model.layers[0].unit: unknown key 'unit' for dense (allowed: type, name, "
        "units, activation, use_bias, kernel_initializer, bias_initializer)");
    CHECK_EDIT_FAILS(
        "        rate: 0.5\n", "        rate: 0.5\n        units: 4\n", "units: 4",
        "spec.model.layers[1].units: unknown key 'units' for dropout (allowed: type, name, "
        "rate)");
    CHECK_EDIT_FAILS("  name: test-job\n", "  name: test-job\n  uid: x\n", "uid",
                     "metadata.uid: unknown key 'uid' (allowed: name, namespace, labels, "
                     "annotations)");
    CHECK_EDIT_FAILS("eval_fraction: 0.25", "eval_fractoin: 0.25", "eval_fractoin",
                     "spec.data.eval_fractoin: unknown key 'eval_fractoin'");
    CHECK_EDIT_FAILS("classes: 3}", "classes: 3, path: x}", "train:",
                     "spec.data.train.path: unknown key 'path' for synthetic (allowed: format, "
                     "samples, shape, classes)");
    CHECK_EDIT_FAILS(
        "    epochs: 2\n", "    epochs: 2\n    checkpoint: {every: 1}\n", "every",
        "spec.training.checkpoint.every: unknown key 'every' (allowed: every_steps, keep)");
    CHECK_EDIT_FAILS("learning_rate: 0.01", "lr: 0.01", "lr:",
                     "spec.optimizer.lr: unknown key 'lr' for adam (allowed: type, learning_rate, "
                     "beta1, beta2, epsilon, weight_decay, schedule)");
    CHECK_EDIT_FAILS("  seed: 7\n", "  seed: 7\n  seed: 8\n", "seed: 8",
                     "spec.seed: duplicate key 'seed' (first at line 7)");
    CHECK_EDIT_FAILS("    epochs: 2\n", "    epochs: 2\n    [a]: 1\n", "[a]",
                     "spec.training: a key must be a plain string, got a list");
}

static void test_err_wrong_types(void) {
    CHECK_EDIT_FAILS("units: 8", "units: ten", "units: ten",
                     "spec.model.layers[0].units: expected a positive integer, got 'ten'");
    CHECK_EDIT_FAILS("batch_size: 16", "batch_size: [16]", "batch_size",
                     "spec.training.batch_size: expected a positive integer, got a list");
    CHECK_EDIT_FAILS("batch_size: 16", "batch_size: -16", "batch_size",
                     "spec.training.batch_size: expected a positive integer, got '-16'");
    CHECK_EDIT_FAILS("batch_size: 16", "batch_size: 0", "batch_size",
                     "spec.training.batch_size: expected a positive integer, got '0'");
    CHECK_EDIT_FAILS("epochs: 2", "epochs: 2.5", "epochs",
                     "spec.training.epochs: expected a positive integer, got '2.5'");
    CHECK_EDIT_FAILS("epochs: 2", "epochs: \"2\"", "epochs",
                     "spec.training.epochs: expected a positive integer, got '2'");
    CHECK_EDIT_FAILS("epochs: 2", "epochs:", "epochs",
                     "spec.training.epochs: expected a positive integer, got nothing");
    CHECK_EDIT_FAILS("batch_size: 16", "batch_size: 99999999999999999999", "batch_size",
                     "spec.training.batch_size: expected a positive integer at most 16777216, "
                     "got '99999999999999999999'");
    CHECK_EDIT_FAILS("    epochs: 2\n", "    epochs: 2\n    threads: -1\n", "threads",
                     "spec.training.threads: expected a non-negative integer, got '-1'");
    CHECK_EDIT_FAILS("seed: 7", "seed: -7", "seed",
                     "spec.seed: expected a non-negative integer, got '-7'");
    CHECK_EDIT_FAILS("eval_fraction: 0.25", "eval_fraction: 1.5", "eval_fraction",
                     "spec.data.eval_fraction: expected a number in (0, 1), got '1.5'");
    CHECK_EDIT_FAILS("learning_rate: 0.01", "learning_rate: fast", "learning_rate",
                     "spec.optimizer.learning_rate: expected a positive number, got 'fast'");
    CHECK_EDIT_FAILS("learning_rate: 0.01", "learning_rate: 1e39", "learning_rate",
                     "spec.optimizer.learning_rate: 1e+39 is too large for a 32-bit float");
    CHECK_EDIT_FAILS("rate: 0.5", "rate: 1",
                     "rate:", "spec.model.layers[1].rate: expected a number in [0, 1), got '1'");
    CHECK_EDIT_FAILS("    normalize:", "    shuffle: yes\n    normalize:", "shuffle",
                     "spec.data.shuffle: expected true or false, got 'yes'");
    CHECK_EDIT_FAILS("name: test-job", "name: {first: a}",
                     "name:", "metadata.name: expected a string, got a mapping");
    CHECK_EDIT_FAILS(
        "  data:\n    train: {format: synthetic, samples: 100, shape: [4], classes: 3}\n"
        "    eval_fraction: 0.25\n    normalize: {scale: 2, shift: -1}\n",
        "  data: [1]\n", "  data:", "spec.data: expected a mapping, got a list");
    CHECK_EDIT_FAILS("      - type: dropout\n        rate: 0.5\n", "      - dropout\n", "- dropout",
                     "spec.model.layers[1]: expected a mapping, got 'dropout'");
    CHECK_EDIT_FAILS("    input: [4]", "    input: [4, 0]", "input",
                     "spec.model.input[1]: expected a positive integer, got '0'");
    CHECK_EDIT_FAILS("    input: [4]", "    input: [1, 2, 3, 4, 5]", "input",
                     "spec.model.input: expected a list of 1 to 4 positive integers, got a list "
                     "of 5");
    CHECK_EDIT_FAILS("    input: [4]", "    input: 4", "input",
                     "spec.model.input: expected a list of 1 to 4 positive integers, got '4'");
    CHECK_EDIT_FAILS("{type: dense, units: 3}", "{type: conv2d, filters: 3, kernel_size: {h: 3}}",
                     "conv2d",
                     "spec.model.layers[2].kernel_size: expected a positive integer or a list of "
                     "2 positive integers, got a mapping");
    CHECK_EDIT_FAILS("{type: dense, units: 3}", "{type: maxpool2d, pool_size: [2, 2, 2]}",
                     "maxpool2d",
                     "spec.model.layers[2].pool_size: expected a list of 2 positive integers, "
                     "got a list of 3");
    CHECK_EDIT_FAILS("{type: dense, units: 3}", "{type: dense, units: 3, use_bias: 1}", "use_bias",
                     "spec.model.layers[2].use_bias: expected true or false, got '1'");
    CHECK_EDIT_FAILS("shape: [4]", "shape: 4", "shape",
                     "spec.data.train.shape: expected a list of 1 to 4 positive integers, got '4'");
}

static void test_err_missing_fields(void) {
    CHECK_EDIT_FAILS("apiVersion: dtrain/v1\n", "", "kind: TrainJob",
                     "apiVersion: required field missing");
    CHECK_EDIT_FAILS("kind: TrainJob\n", "", "apiVersion", "kind: required field missing");
    CHECK_EDIT_FAILS("metadata:\n  name: test-job\n", "metadata: {}\n", "metadata",
                     "metadata.name: required field missing");
    CHECK_EDIT_FAILS("metadata:\n  name: test-job\n", "", "apiVersion",
                     "metadata: required field missing");
    CHECK_EDIT_FAILS("    layers:\n", "    layerz:\n", "layerz",
                     "spec.model.layerz: unknown key 'layerz'");
    CHECK_EDIT_FAILS("    input: [4]\n    layers:\n"
                     "      - {type: dense, name: fc1, units: 8, activation: relu}\n"
                     "      - type: dropout\n        rate: 0.5\n      - {type: dense, units: 3}\n",
                     "    input: [4]\n", "  model:", "spec.model.layers: required field missing");
    CHECK_EDIT_FAILS("    type: adam\n", "",
                     "  optimizer:", "spec.optimizer.type: required field missing");
    CHECK_EDIT_FAILS("  optimizer:\n    type: adam\n    learning_rate: 0.01\n", "",
                     "spec:", "spec.optimizer: required field missing");
    CHECK_EDIT_FAILS("{type: dense, units: 3}", "{units: 3}", "units: 3",
                     "spec.model.layers[2].type: required field missing");
    CHECK_EDIT_FAILS("{type: dense, units: 3}", "{type: dense}", "type: dense}",
                     "spec.model.layers[2].units: required field missing");
    CHECK_EDIT_FAILS("        rate: 0.5\n", "", "type: dropout",
                     "spec.model.layers[1].rate: required field missing");
    CHECK_EDIT_FAILS("{format: synthetic, samples: 100,", "{format: synthetic,",
                     "train:", "spec.data.train.samples: required field missing");
    CHECK_EDIT_FAILS("{format: synthetic, samples: 100, shape: [4], classes: 3}",
                     "{format: idx, images: a.gz}",
                     "train:", "spec.data.train.labels: required field missing");
    CHECK_EDIT_FAILS("train: {format: synthetic, samples: 100, shape: [4], classes: 3}",
                     "train: {path: a.csv}",
                     "train:", "spec.data.train.format: required field missing");
    CHECK_EDIT_FAILS("    train: {format: synthetic, samples: 100, shape: [4], classes: 3}\n", "",
                     "  data:", "spec.data.train: required field missing");
    CHECK_EDIT_FAILS("    learning_rate: 0.01\n", "    schedule: {type: step}\n", "schedule",
                     "spec.optimizer.schedule.step_size: required field missing");
    CHECK_EDIT_FAILS("normalize: {scale: 2, shift: -1}", "normalize: {mean: 0.5}", "normalize",
                     "spec.data.normalize.std: required field missing (mean is given)");
}

static void test_err_bad_values(void) {
    CHECK_EDIT_FAILS("activation: relu}", "activation: relux}", "relux",
                     "spec.model.layers[0].activation: expected one of relu, tanh, sigmoid, "
                     "softmax, linear, none, got 'relux'");
    CHECK_EDIT_FAILS("{type: dense, units: 3}",
                     "{type: conv2d, filters: 4, kernel_size: 3, padding: full}", "full",
                     "spec.model.layers[2].padding: expected one of valid, same, got 'full'");
    CHECK_EDIT_FAILS("type: adam", "type: rmsprop", "rmsprop",
                     "spec.optimizer.type: expected one of sgd, momentum, adam, adagrad, got "
                     "'rmsprop'");
    CHECK_EDIT_FAILS("{type: dense, units: 3}", "{type: lstm, units: 3}", "lstm",
                     "spec.model.layers[2].type: expected one of dense, conv2d, maxpool2d, "
                     "flatten, dropout, activation, got 'lstm'");
    CHECK_EDIT_FAILS("{type: dense, units: 3}", "{type: dense, units: 3, kernel_initializer: ones}",
                     "ones",
                     "spec.model.layers[2].kernel_initializer: expected one of glorot_uniform, "
                     "glorot_normal, he_uniform, he_normal, zeros, got 'ones'");
    CHECK_EDIT_FAILS("format: synthetic", "format: parquet", "parquet",
                     "spec.data.train.format: expected one of idx, csv, synthetic, got 'parquet'");
    CHECK_EDIT_FAILS("  optimizer:\n", "  loss: hinge\n  optimizer:\n", "hinge",
                     "spec.loss: expected one of softmax_cross_entropy, mse, got 'hinge'");
    CHECK_EDIT_FAILS("    learning_rate: 0.01\n", "    schedule: {type: linear}\n", "linear",
                     "spec.optimizer.schedule.type: expected one of constant, step, cosine, got "
                     "'linear'");
    CHECK_EDIT_FAILS("apiVersion: dtrain/v1", "apiVersion: dtrain/v2", "apiVersion",
                     "apiVersion: expected 'dtrain/v1', got 'dtrain/v2'");
    CHECK_EDIT_FAILS("kind: TrainJob", "kind: TFJob", "kind",
                     "kind: expected 'TrainJob', got 'TFJob'");
    CHECK_EDIT_FAILS("normalize: {scale: 2, shift: -1}", "normalize: minmax", "normalize",
                     "spec.data.normalize: expected 'standard' or a mapping {scale, shift} or "
                     "{mean, std, scale}, got 'minmax'");
    CHECK_EDIT_FAILS("normalize: {scale: 2, shift: -1}", "normalize: {}", "normalize",
                     "spec.data.normalize: expected {scale, shift} or {mean, std, scale}, got an "
                     "empty mapping");
    CHECK_EDIT_FAILS("normalize: {scale: 2, shift: -1}", "normalize: {mean: 1, std: 0}",
                     "normalize", "spec.data.normalize.std: expected a positive number, got '0'");
    CHECK_EDIT_FAILS("normalize: {scale: 2, shift: -1}", "normalize: {mean: 1, std: 2, shift: 1}",
                     "normalize", "spec.data.normalize.shift: not used with mean and std");
    CHECK_EDIT_FAILS("normalize: {scale: 2, shift: -1}", "normalize: {scale: 0}", "normalize",
                     "spec.data.normalize.scale: expected a non-zero number, got 0");
    CHECK_EDIT_FAILS("    learning_rate: 0.01\n",
                     "    learning_rate: 0.01\n    schedule: {type: cosine, min_lr: 0.1}\n",
                     "min_lr", "spec.optimizer.schedule.min_lr: must not exceed the learning rate");
    CHECK_EDIT_FAILS("classes: 3", "classes: 1", "classes",
                     "spec.data.train.classes: expected an integer >= 2, got '1'");
    CHECK_EDIT_FAILS("{format: synthetic, samples: 100, shape: [4], classes: 3}",
                     "{format: csv, path: ''}",
                     "train:", "spec.data.train.path: expected a path, got an empty string");
    CHECK_EDIT_FAILS("{format: synthetic, samples: 100, shape: [4], classes: 3}",
                     "{format: csv, path: x.csv, label_column: -2}",
                     "train:", "spec.data.train.label_column: expected an integer >= -1, got '-2'");
    CHECK_EDIT_FAILS("    epochs: 2\n", "    epochs: 2\n    checkpoint: {keep: 0}\n", "keep",
                     "spec.training.checkpoint.keep: expected a positive integer, got '0'");
}

static void test_err_names(void) {
    CHECK_EDIT_FAILS("name: test-job", "name: Test_Job", "Test_Job",
                     "metadata.name: 'Test_Job' is not a valid name");
    CHECK_EDIT_FAILS("name: test-job", "name: 1job", "1job",
                     "metadata.name: '1job' is not a valid name");
    CHECK_EDIT_FAILS("name: test-job", "name: job-", "job-",
                     "metadata.name: 'job-' is not a valid name");
    CHECK_EDIT_FAILS("name: test-job", "name: ''", "name: ''",
                     "metadata.name: '' is not a valid name");
    char longname[80] = "name: ";
    memset(longname + 6, 'a', 64);
    longname[70] = '\0';
    CHECK_EDIT_FAILS("name: test-job", longname, "name: aaa", "metadata.name: 'aaaa");
    longname[69] = '\0'; /* 63 characters are fine */
    dt_spec *sp = parse_ok(edit(BASE, "name: test-job", longname));
    DT_CHECK(sp && strlen(sp->name) == 63);
    dt_spec_free(sp);

    CHECK_EDIT_FAILS("{type: dense, units: 3}", "{type: dense, units: 3, name: fc1}", "units: 3",
                     "spec.model.layers[2].name: duplicate layer name 'fc1' (also used by "
                     "layers[0] at line 15)");
    CHECK_EDIT_FAILS("name: fc1", "name: fc-1", "fc-1",
                     "spec.model.layers[0].name: 'fc-1' is not a valid layer name");
    CHECK_EDIT_FAILS("name: fc1", "name: a23456789012345678901234567890123", "name: a2",
                     "spec.model.layers[0].name: 'a23456789012345678901234567890123' is not a "
                     "valid layer name");
}

static void test_err_structure(void) {
    CHECK_EDIT_FAILS("    layers:\n      - {type: dense, name: fc1, units: 8, activation: relu}\n"
                     "      - type: dropout\n        rate: 0.5\n      - {type: dense, units: 3}\n",
                     "    layers: []\n", "layers",
                     "spec.model.layers: expected a non-empty list of layers, got an empty list");
    CHECK_EDIT_FAILS("    layers:\n      - {type: dense, name: fc1, units: 8, activation: relu}\n"
                     "      - type: dropout\n        rate: 0.5\n      - {type: dense, units: 3}\n",
                     "    layers:\n", "layers",
                     "spec.model.layers: expected a non-empty list of layers, got nothing");
    /* YAML syntax errors: libyaml's problem at its line */
    CHECK_EDIT_FAILS("kind: TrainJob", "kind: Train: Job", "kind",
                     "YAML syntax error: mapping values are not allowed in this context");
    CHECK_EDIT_FAILS("    input: [4]", "    input: [4", "layers:",
                     "YAML syntax error: did not find expected ',' or ']' (while parsing a flow "
                     "sequence at line 13)");
    CHECK_EDIT_FAILS("  seed: 7\n", "  seed: 7\n bad: 1\n", "bad",
                     "YAML syntax error: did not find expected key");
    CHECK_EDIT_FAILS("  seed: 7\n", "  seed: *nowhere\n", "seed",
                     "YAML syntax error: found undefined alias");
    CHECK_EDIT_FAILS("  seed: 7\n", "  seed: \"\xff\"\n", "seed",
                     "YAML syntax error: invalid leading UTF-8 octet");
    CHECK_EDIT_FAILS("  seed: 7\n", "  seed: 7\n\tepochs: 1\n", "\t",
                     "YAML syntax error: found a tab character that violates indentation");
    /* empty and non-mapping documents */
    DT_CHECK(spec_fails("", "", "the spec is empty"));
    DT_CHECK(spec_fails("# nothing but a comment\n\n", "#", "the spec is empty"));
    DT_CHECK(spec_fails("- a\n- b\n", "- a",
                        "expected a mapping with apiVersion, kind, metadata and spec, got a list"));
    DT_CHECK(spec_fails("---\n~\n", "~",
                        "expected a mapping with apiVersion, kind, metadata and "
                        "spec, got nothing"));
    DT_CHECK(spec_fails("# c\njust text\n", "just",
                        "expected a mapping with apiVersion, kind, metadata and spec, got 'just "
                        "text'"));
    /* NUL inside a quoted string */
    CHECK_EDIT_FAILS("name: test-job", "name: \"te\\0st\"",
                     "name:", "metadata.name: a string must not contain a NUL character");
    /* a cyclic alias is walked no further than the schema asks */
    CHECK_EDIT_FAILS("    layers:\n      - {type: dense, name: fc1, units: 8, activation: relu}\n"
                     "      - type: dropout\n        rate: 0.5\n      - {type: dense, units: 3}\n",
                     "    layers: &l [*l]\n", "layers",
                     "spec.model.layers[0]: expected a mapping, got a list");
}

static void test_err_optimizer_rules(void) {
    CHECK_EDIT_FAILS("    learning_rate: 0.01\n", "    learning_rate: 0.01\n    momentum: 0.9\n",
                     "momentum",
                     "spec.optimizer.momentum: not used by optimizer type adam (only "
                     "by momentum)");
    CHECK_EDIT_FAILS("    type: adam\n", "    type: sgd\n    nesterov: true\n", "nesterov",
                     "spec.optimizer.nesterov: not used by optimizer type sgd (only by momentum)");
    CHECK_EDIT_FAILS("    type: adam\n", "    type: momentum\n    beta1: 0.5\n", "beta1",
                     "spec.optimizer.beta1: not used by optimizer type momentum (only by adam)");
    CHECK_EDIT_FAILS("    type: adam\n", "    type: sgd\n    epsilon: 1e-8\n", "epsilon",
                     "spec.optimizer.epsilon: not used by optimizer type sgd (only by adam and "
                     "adagrad)");
    CHECK_EDIT_FAILS("    type: adam\n", "    type: adam\n    initial_accumulator: 0.1\n",
                     "initial_accumulator",
                     "spec.optimizer.initial_accumulator: not used by optimizer type adam (only "
                     "by adagrad)");
    CHECK_EDIT_FAILS("    type: adam\n", "    type: momentum\n    momentum: 1\n", "momentum: 1",
                     "spec.optimizer.momentum: expected a number in (0, 1), got '1'");
    CHECK_EDIT_FAILS("    learning_rate: 0.01\n", "    learning_rate: 0.01\n    beta2: 0\n",
                     "beta2", "spec.optimizer.beta2: expected a number in (0, 1), got '0'");
    CHECK_EDIT_FAILS(
        "    learning_rate: 0.01\n",
        "    learning_rate: 0.01\n    schedule: {type: step, step_size: 10, "
        "min_lr: 0}\n",
        "schedule",
        "spec.optimizer.schedule.min_lr: unknown key 'min_lr' for step schedule (allowed: "
        "type, step_size, gamma)");
}

static void test_err_eval_rules(void) {
    CHECK_EDIT_FAILS("    eval_fraction: 0.25\n",
                     "    eval: {format: csv, path: e.csv}\n    eval_fraction: 0.25\n",
                     "eval_fraction",
                     "spec.data.eval_fraction: not allowed together with spec.data.eval (at line "
                     "10)");
    CHECK_EDIT_FAILS("    eval_fraction: 0.25\n",
                     "    eval_fraction: 0.25\n    eval: {format: csv, path: e.csv}\n",
                     "eval_fraction", "spec.data.eval_fraction: not allowed together");
    CHECK_EDIT_FAILS("    eval_fraction: 0.25\n", "    eval: {format: csv}\n",
                     "eval:", "spec.data.eval.path: required field missing");
}

static void test_err_files(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/does-not-exist.yaml", dt_test_tmpdir());
    dt_spec *sp = (dt_spec *)path;
    DT_CHECK_ERR(dt_spec_load(&sp, path), DT_ERR_IO, path);
    DT_CHECK(sp == NULL);
    DT_CHECK(strstr(dt_errmsg(), "No such file"));

    /* a directory is not a spec */
    DT_CHECK_ERR(dt_spec_load(&sp, dt_test_tmpdir()), DT_ERR_IO, dt_test_tmpdir());

    /* errors from a file name the file */
    const char *bad = edit(BASE, "units: 8", "units: ten");
    const char *file = dt_test_write_file("bad.yaml", bad, strlen(bad));
    char want[700];
    snprintf(want, sizeof want, "%s:%d: spec.model.layers[0].units: expected a positive integer",
             file, line_of(bad, "units: ten"));
    DT_CHECK_ERR(dt_spec_load(&sp, file), DT_ERR_SPEC, want);
    DT_CHECK(!strncmp(dt_errmsg(), want, strlen(want)));

    const char *empty = dt_test_write_file("empty.yaml", "", 0);
    snprintf(want, sizeof want, "%s:1: the spec is empty", empty);
    DT_CHECK_ERR(dt_spec_load(&sp, empty), DT_ERR_SPEC, want);

    static const char list[] = "- apiVersion: dtrain/v1\n- kind: TrainJob\n";
    const char *lf = dt_test_write_file("list.yaml", list, strlen(list));
    snprintf(want, sizeof want, "%s:1: expected a mapping", lf);
    DT_CHECK_ERR(dt_spec_load(&sp, lf), DT_ERR_SPEC, want);

    static const char syntax[] = "apiVersion: dtrain/v1\nkind: TrainJob\nmetadata:\n"
                                 "  name: x\nspec:\n  data: {\n  model: 1\n";
    const char *sf = dt_test_write_file("syntax.yaml", syntax, strlen(syntax));
    snprintf(want, sizeof want, "%s:8: YAML syntax error: ", sf);
    DT_CHECK_ERR(dt_spec_load(&sp, sf), DT_ERR_SPEC, want);
    DT_CHECK(sp == NULL);

    char longpath[DT_PATH_MAX + 10];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    DT_CHECK_ERR(dt_spec_load(&sp, longpath), DT_ERR_ARG, "path too long");
}

/* Every prefix of BASE, and many random one-byte mutations of it, either load or fail with
 * one DT_ERR_SPEC message that starts with "t.yaml:" (and, under ASan, never misbehave). */
static int parse_or_clean_error(const char *text, size_t len) {
    dt_spec *sp = NULL;
    dt_err_clear();
    dt_err e = dt_spec_parse(&sp, text, len, "t.yaml");
    if (e == DT_OK) {
        int ok = sp != NULL && sp->nlayers > 0 && sp->layers != NULL;
        dt_spec_free(sp);
        return ok;
    }
    if (e != DT_ERR_SPEC || sp != NULL || strncmp(dt_errmsg(), "t.yaml:", 7)) {
        fprintf(stderr, "%.*s\n-> %s: %s\n", (int)len, text, dt_strerror(e), dt_errmsg());
        return 0;
    }
    return 1;
}

static void test_fuzz_prefixes_and_mutations(void) {
    size_t n = strlen(BASE);
    for (size_t len = 0; len <= n; len++)
        DT_CHECK(parse_or_clean_error(BASE, len));
    static const char alphabet[] = " :-[]{},#&*!|>'\"%@`\t\n\r0aZ.?~\\\0\xff";
    char buf[sizeof BASE + 1];
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int it = 0; it < 5000; it++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        size_t pos = (size_t)(r % n), len = n;
        char c = alphabet[(r >> 32) % (sizeof alphabet - 1)];
        memcpy(buf, BASE, n);
        switch ((r >> 48) % 3) {
        case 0:
            buf[pos] = c;
            break; /* replace */
        case 1:
            memmove(buf + pos, buf + pos + 1, n - pos - 1), len--;
            break; /* delete */
        default:
            memmove(buf + pos + 1, buf + pos, n - pos), buf[pos] = c, len++; /* insert */
        }
        DT_CHECK(parse_or_clean_error(buf, len));
    }
}

/* Deep nesting and large lists are errors, not crashes. */
static void test_deep_and_large(void) {
    enum { DEPTH = 20000 };
    static char deep[2 * DEPTH + 256];
    int o = snprintf(deep, sizeof deep,
                     "apiVersion: dtrain/v1\nkind: TrainJob\nmetadata: "
                     "{name: a}\nspec: {seed: ");
    for (int i = 0; i < DEPTH; i++)
        deep[o++] = '[';
    for (int i = 0; i < DEPTH; i++)
        deep[o++] = ']';
    deep[o++] = '}';
    deep[o] = '\0';
    DT_CHECK(spec_fails(deep, "spec:", "YAML nesting deeper than 256 levels"));
    /* as deep as allowed (the root and spec maps are 2 levels): parsed, refused by the spec */
    o = snprintf(deep, sizeof deep, "apiVersion: dtrain/v1\nkind: TrainJob\nmetadata: {name: a}\n"
                                    "spec: {seed: ");
    for (int i = 0; i < DT__YDEPTH_MAX - 2; i++) deep[o++] = '[';
    for (int i = 0; i < DT__YDEPTH_MAX - 2; i++) deep[o++] = ']';
    deep[o++] = '}';
    deep[o] = '\0';
    DT_CHECK(spec_fails(deep, "spec:", "spec.seed: expected a non-negative integer, got a list"));
    /* the limit holds for the document read: a deep later one is only refused when read */
    o = snprintf(deep, sizeof deep, "a: 1\n---\n");
    for (int i = 0; i < DEPTH; i++) deep[o++] = '[';
    for (int i = 0; i < DEPTH; i++) deep[o++] = ']';
    deep[o] = '\0';
    dt__ystream *ys = NULL;
    dt__ydoc *d = NULL;
    DT_CHECK_OK(dt__ystream_open_mem(&ys, deep, (size_t)o, "m.yaml"));
    DT_CHECK_OK(dt__ystream_next(ys, &d));
    DT_CHECK(d != NULL);
    dt__ydoc_free(d);
    DT_CHECK_ERR(dt__ystream_next(ys, &d), DT_ERR_SPEC, "m.yaml:3: YAML nesting deeper than 256 levels");
    DT_CHECK(d == NULL);
    dt__ystream_free(ys);

    enum { N = MAX_LAYERS_FOR_TEST + 1 };
    static char many[N * 24 + 512];
    o = snprintf(many, sizeof many,
                 "apiVersion: dtrain/v1\nkind: TrainJob\nmetadata: {name: "
                 "a}\nspec:\n  data: {train: {format: csv, path: x}}\n"
                 "  model:\n    layers:\n");
    for (int i = 0; i < N; i++)
        o += snprintf(many + o, sizeof many - (size_t)o, "    - {type: flatten}\n");
    DT_CHECK(spec_fails(many, "    - {", "spec.model.layers: expected at most 4096 layers"));
}

/* ---- the yaml_doc layer on its own ---- */

static void test_yaml_doc_stream(void) {
    static const char text[] = "# three documents\n"
                               "a: 1\n"
                               "---\n"
                               "b: [1, 2]\n"
                               "--- # third\n"
                               "c: {d: x}\n"
                               "...\n"
                               "---\n"
                               "e: [unclosed\n";
    dt__ystream *s = NULL;
    dt__ydoc *d = NULL;
    dt__yval root, v;
    int64_t x = 0;
    DT_CHECK_OK(dt__ystream_open_mem(&s, text, strlen(text), "m.yaml"));
    DT_CHECK(!strcmp(dt__ystream_name(s), "m.yaml"));

    DT_CHECK_OK(dt__ystream_next(s, &d));
    DT_CHECK(d && dt__ydoc_index(d) == 0);
    dt__ydoc_root(d, NULL, &root);
    DT_CHECK(dt__yval_is_map(&root) && root.line == 2 && dt__ymap_size(&root) == 1);
    DT_CHECK(dt__ymap_get(&root, "a", &v) && !strcmp(v.path, "a") && v.line == 2);
    DT_CHECK_OK(dt__yget_i64(&v, 0, 10, &x));
    DT_CHECK(x == 1);
    DT_CHECK(!dt__ymap_get(&root, "zz", &v) && !dt__yval_present(&v) && v.line == 2);
    dt__ydoc_free(d);

    DT_CHECK_OK(dt__ystream_next(s, &d));
    DT_CHECK(d && dt__ydoc_index(d) == 1);
    dt__ydoc_root(d, "doc", &root);
    DT_CHECK(dt__ymap_get(&root, "b", &v) && dt__yseq_size(&v) == 2);
    dt__yval item;
    dt__yseq_item(&v, 1, &item);
    DT_CHECK(!strcmp(item.path, "doc.b[1]") && item.line == 4);
    DT_CHECK_ERR(dt__yget_i64(&item, 5, 10, &x), DT_ERR_SPEC,
                 "m.yaml:4: doc.b[1]: expected an integer >= 5, got '2'");
    dt__ydoc_free(d);

    DT_CHECK_OK(dt__ystream_next(s, &d));
    DT_CHECK(d && dt__ydoc_index(d) == 2);
    dt__ydoc_root(d, "", &root);
    const char *key = NULL;
    int key_line = 0;
    dt__ymap_entry(&root, 0, &key, &key_line, &v);
    DT_CHECK(!strcmp(key, "c") && key_line == 6 && dt__yval_is_map(&v));
    dt__yval dv;
    DT_CHECK(dt__ymap_get(&v, "d", &dv));
    const char *str = NULL;
    DT_CHECK_OK(dt__yget_str(&dv, &str));
    DT_CHECK(!strcmp(str, "x") && !strcmp(dv.path, "c.d"));
    char small[1];
    DT_CHECK_ERR(dt__yget_strbuf(&dv, small, sizeof small), DT_ERR_SPEC, "c.d: too long");
    dt__ydoc_free(d);

    /* the fourth is broken: the error repeats on every later call */
    DT_CHECK_ERR(dt__ystream_next(s, &d), DT_ERR_SPEC, "m.yaml:10: YAML syntax error:");
    DT_CHECK(d == NULL);
    DT_CHECK_ERR(dt__ystream_next(s, &d), DT_ERR_SPEC, "m.yaml:10: YAML syntax error:");
    dt__ystream_free(s);
    dt__ystream_free(NULL);
    dt__ydoc_free(NULL);

    /* end of stream: NULL document, then NULL again */
    DT_CHECK_OK(dt__ystream_open_mem(&s, "x: 1", 4, "n.yaml"));
    DT_CHECK_OK(dt__ystream_next(s, &d));
    DT_CHECK(d != NULL);
    dt__ydoc_free(d);
    DT_CHECK_OK(dt__ystream_next(s, &d));
    DT_CHECK(d == NULL);
    DT_CHECK_OK(dt__ystream_next(s, &d));
    DT_CHECK(d == NULL);
    dt__ystream_free(s);
}

static void test_yaml_doc_scalars(void) {
    static const char text[] =
        "big: 18446744073709551616\n"
        "f: -1.5e-3\n"
        "g: .5\n"
        "h: 1e\n"
        "inf: .inf\n"
        "b: False\n"
        "long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"
        "ctl: \"a\\tb\"\n";
    dt__ystream *s = NULL;
    dt__ydoc *d = NULL;
    dt__yval root, v;
    uint64_t u;
    double f;
    int b;
    DT_CHECK_OK(dt__ystream_open_mem(&s, text, strlen(text), "s.yaml"));
    DT_CHECK_OK(dt__ystream_next(s, &d));
    dt__ydoc_root(d, "", &root);
    dt__ymap_get(&root, "big", &v);
    DT_CHECK_ERR(dt__yget_u64(&v, &u), DT_ERR_SPEC, "s.yaml:1: big: expected a non-negative");
    dt__ymap_get(&root, "f", &v);
    DT_CHECK_OK(dt__yget_f64(&v, (dt__yrange){-HUGE_VAL, HUGE_VAL, 0, 0}, &f));
    DT_CHECK(f == -1.5e-3);
    dt__ymap_get(&root, "g", &v);
    DT_CHECK_OK(dt__yget_f64(&v, (dt__yrange){0, 1, 0, 0}, &f));
    DT_CHECK(f == 0.5);
    dt__ymap_get(&root, "h", &v);
    DT_CHECK_ERR(dt__yget_f64(&v, (dt__yrange){-HUGE_VAL, HUGE_VAL, 0, 0}, &f), DT_ERR_SPEC,
                 "s.yaml:4: h: expected a number, got '1e'");
    dt__ymap_get(&root, "inf", &v);
    DT_CHECK_ERR(dt__yget_f64(&v, (dt__yrange){-HUGE_VAL, HUGE_VAL, 0, 0}, &f), DT_ERR_SPEC,
                 "inf: expected a number, got '.inf'");
    dt__ymap_get(&root, "f", &v);
    DT_CHECK_ERR(dt__yget_f64(&v, (dt__yrange){0, HUGE_VAL, 0, 0}, &f), DT_ERR_SPEC,
                 "f: expected a non-negative number, got '-1.5e-3'");
    DT_CHECK_ERR(dt__yget_f64(&v, (dt__yrange){1, HUGE_VAL, 1, 0}, &f), DT_ERR_SPEC,
                 "f: expected a number > 1, got '-1.5e-3'");
    dt__ymap_get(&root, "b", &v);
    DT_CHECK_OK(dt__yget_bool(&v, &b));
    DT_CHECK(b == 0);
    dt__ymap_get(&root, "long", &v);
    DT_CHECK_ERR(dt__yget_bool(&v, &b), DT_ERR_SPEC,
                 "long: expected true or false, got 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'");
    dt__ymap_get(&root, "ctl", &v);
    DT_CHECK_ERR(dt__yget_bool(&v, &b), DT_ERR_SPEC, "ctl: expected true or false, got 'a?b'");
    dt__ydoc_free(d);
    dt__ystream_free(s);
}

DT_TEST_MAIN(DT_T(test_base_fixture), DT_T(test_defaults), DT_T(test_every_field),
             DT_T(test_optimizer_variants), DT_T(test_examples_load), DT_T(test_doc_example_loads),
             DT_T(test_relative_paths), DT_T(test_yaml_forms), DT_T(test_err_unknown_keys),
             DT_T(test_err_wrong_types), DT_T(test_err_missing_fields), DT_T(test_err_bad_values),
             DT_T(test_err_names), DT_T(test_err_structure), DT_T(test_err_optimizer_rules),
             DT_T(test_err_eval_rules), DT_T(test_err_files),
             DT_T(test_fuzz_prefixes_and_mutations), DT_T(test_deep_and_large),
             DT_T(test_yaml_doc_stream), DT_T(test_yaml_doc_scalars))
