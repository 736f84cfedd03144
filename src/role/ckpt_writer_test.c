/* ckpt_writer_test.c - checkpoints written by a thread of their own from a snapshot
 * (role/ckpt_writer.c): the file holds the state of the put, whatever the trainer does
 * meanwhile; a failure comes back with its cause; the write in flight is finished at the end. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain/checkpoint.h"
#include "role/role-impl.h"
#include "testing/dt_test.h"

static const char SPEC[] = "apiVersion: dtrain/v1\n"
                           "kind: TrainJob\n"
                           "metadata: {name: writer}\n"
                           "spec:\n"
                           "  seed: 3\n"
                           "  data:\n"
                           "    train: {format: csv, path: none.csv, label_column: -1}\n"
                           "  model:\n"
                           "    input: [40]\n"
                           "    layers:\n"
                           "      - {type: dense, name: fc1, units: 64, activation: relu}\n"
                           "      - {type: dense, name: logits, units: 3}\n"
                           "  loss: softmax_cross_entropy\n"
                           "  optimizer: {type: adam}\n"
                           "  training: {batch_size: 8, epochs: 1, checkpoint: {keep: 2}}\n";

typedef struct fixture {
    dt_spec *spec;
    dt__role r;
    dt_shape input;
    dt_optim_conf oc;
    dt_model *m;
    dt_optim *o;
} fixture;

static dt_optim *optim_for(dt_model *m, const dt_optim_conf *oc) {
    dt_param *ps[8];
    int n = dt_model_num_params(m);
    if (n > 8) abort();
    for (int i = 0; i < n; i++) ps[i] = dt_model_param(m, i);
    dt_optim *o = NULL;
    if (dt_optim_init(&o, oc, ps, n) != DT_OK) abort();
    return o;
}

static dt_model *model_for(const fixture *f) {
    dt_model *m = NULL;
    if (dt__train_build_model(f->spec, &f->input, 8, NULL, &m) != DT_OK) {
        fprintf(stderr, "model: %s\n", dt_errmsg());
        abort();
    }
    return m;
}

static void setup(fixture *f, const char *ckpt_dir) {
    memset(f, 0, sizeof *f);
    if (dt_spec_parse(&f->spec, SPEC, sizeof SPEC - 1, "writer.yaml") != DT_OK) {
        fprintf(stderr, "spec: %s\n", dt_errmsg());
        abort();
    }
    f->r = (dt__role){.spec = f->spec, .log = stderr, .name = "worker-0"};
    snprintf(f->r.ckpt_dir, sizeof f->r.ckpt_dir, "%s", ckpt_dir);
    f->input = dt_shape_make(1, (int64_t[]){40});
    f->oc = f->spec->optimizer;
    dt_optim_conf_defaults(&f->oc);
    f->m = model_for(f);
    dt_model_init_params(f->m, 5);
    f->o = optim_for(f->m, &f->oc);
}

static void teardown(fixture *f) {
    dt_optim_free(f->o);
    dt_model_free(f->m);
    dt_spec_free(f->spec);
}

/* Fake gradients (a function of the step) and one optimizer step. */
static void train_step(fixture *f, int step) {
    for (int i = 0; i < dt_model_num_params(f->m); i++) {
        dt_param *p = dt_model_param(f->m, i);
        for (int64_t j = 0; j < dt_tensor_numel(&p->grad); j++)
            p->grad.data[j] = (float)sin(0.3 * (double)j + 1.7 * step + i);
    }
    dt_optim_step(f->o, NULL);
}

/* Every value and slot of a model and optimizer, in order. */
static float *flatten(dt_model *m, dt_optim *o, size_t *n) {
    size_t total = 0;
    for (int i = 0; i < dt_model_num_params(m); i++)
        total += (size_t)dt_tensor_numel(&dt_model_param(m, i)->value);
    for (int i = 0; i < dt_optim_num_slots(o); i++)
        total += (size_t)dt_tensor_numel(dt_optim_slot(o, i));
    float *v = malloc(total * sizeof *v), *p = v;
    if (!v) abort();
    for (int i = 0; i < dt_model_num_params(m); i++) {
        const dt_tensor *t = &dt_model_param(m, i)->value;
        memcpy(p, t->data, (size_t)dt_tensor_numel(t) * sizeof *p);
        p += dt_tensor_numel(t);
    }
    for (int i = 0; i < dt_optim_num_slots(o); i++) {
        const dt_tensor *t = dt_optim_slot(o, i);
        memcpy(p, t->data, (size_t)dt_tensor_numel(t) * sizeof *p);
        p += dt_tensor_numel(t);
    }
    *n = total;
    return v;
}

static dt_train_state state_at(int64_t step) {
    dt_train_state s = {.step = step, .epoch = 0, .seed = 3, .samples = 8 * step};
    dt_rng_seed(&s.rng, 40 + (uint64_t)step);
    return s;
}

static void test_the_file_holds_the_put(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/held", dt_test_tmpdir());
    fixture f;
    setup(&f, dir);
    dt__ckpt_writer *w = NULL;
    DT_CHECK_OK(dt__ckpt_writer_start(&w, &f.r, &f.input, &f.oc));
    for (int s = 0; s < 5; s++) train_step(&f, s);
    size_t n;
    float *want = flatten(f.m, f.o, &n);
    dt_train_state st = state_at(5);
    dt__ckpt_writer_put(w, f.m, f.o, &st);
    for (int s = 5; s < 8; s++) train_step(&f, s); /* the trainer goes on at once */
    int64_t step;
    DT_CHECK_OK(dt__ckpt_writer_take(w, 1, &step));
    DT_CHECK(step == 5);
    DT_CHECK_OK(dt__ckpt_writer_take(w, 0, &step)); /* taken: nothing more */
    DT_CHECK(step == -1);

    char path[700];
    snprintf(path, sizeof path, "%s/ckpt-0000000005.safetensors", dir);
    dt_model *m2 = model_for(&f);
    dt_optim *o2 = optim_for(m2, &f.oc);
    dt_train_state got;
    DT_CHECK_OK(dt_checkpoint_load(path, m2, o2, &got));
    size_t n2;
    float *have = flatten(m2, o2, &n2);
    DT_CHECK(n2 == n && !memcmp(have, want, n * sizeof *want));
    DT_CHECK(dt_optim_steps(o2) == 5 && got.step == 5 && got.samples == 40);
    DT_CHECK(got.rng.s[0] == st.rng.s[0] && got.rng.s[3] == st.rng.s[3]);

    /* a write in flight at the end is finished, not dropped */
    st = state_at(8);
    dt__ckpt_writer_put(w, f.m, f.o, &st);
    dt__ckpt_writer_end(w);
    snprintf(path, sizeof path, "%s/ckpt-0000000008.safetensors", dir);
    struct stat sb;
    DT_CHECK(stat(path, &sb) == 0 && sb.st_size > 0);
    free(have);
    free(want);
    dt_optim_free(o2);
    dt_model_free(m2);
    teardown(&f);
}

static void test_a_failure_comes_back_with_its_cause(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/not-a-dir", dt_test_tmpdir());
    FILE *blocker = fopen(dir, "w"); /* a file where the directory should be */
    DT_CHECK(blocker != NULL);
    if (blocker) fclose(blocker);
    fixture f;
    setup(&f, dir);
    dt__ckpt_writer *w = NULL;
    DT_CHECK_OK(dt__ckpt_writer_start(&w, &f.r, &f.input, &f.oc));
    dt_train_state st = state_at(3);
    dt__ckpt_writer_put(w, f.m, f.o, &st);
    int64_t step;
    DT_CHECK_ERR(dt__ckpt_writer_take(w, 1, &step), DT_ERR_IO, "not-a-dir");
    DT_CHECK(step == 3);
    /* the writer goes on: once the way is clear, the next put is written */
    unlink(dir);
    st = state_at(4);
    dt__ckpt_writer_put(w, f.m, f.o, &st);
    DT_CHECK_OK(dt__ckpt_writer_take(w, 1, &step));
    DT_CHECK(step == 4);
    dt__ckpt_writer_end(w);
    dt__ckpt_writer_end(NULL);
    teardown(&f);
}

DT_TEST_MAIN(DT_T(test_the_file_holds_the_put), DT_T(test_a_failure_comes_back_with_its_cause))
