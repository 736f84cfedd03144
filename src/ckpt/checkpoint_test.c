/* checkpoint_test.c - training checkpoints and checkpoint directories (needs dt_model). */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/checkpoint.h"
#include "testing/dt_test.h"

/* input 4 -> hidden (units h) -> out (units 2), or with a third layer */
static dt_model *model_new(int64_t hidden, int extra_layer, uint64_t seed) {
    dt_layer_conf layers[3] = {
        {.kind = DT_LAYER_DENSE, .name = "hidden", .units = hidden, .activation = DT_ACT_RELU},
        {.kind = DT_LAYER_DENSE, .name = "out", .units = 2},
        {.kind = DT_LAYER_DENSE, .name = "extra", .units = 2},
    };
    dt_shape in = dt_shape_make(1, (int64_t[]){4});
    dt_model *m = NULL;
    if (dt_model_init(&m, &in, layers, extra_layer ? 3 : 2, DT_LOSS_MSE, 4, NULL) != DT_OK) {
        fprintf(stderr, "model_new: %s\n", dt_errmsg());
        abort();
    }
    dt_model_init_params(m, seed);
    return m;
}

static dt_optim *optim_new(dt_model *m, dt_optim_kind kind) {
    dt_optim_conf c = {.kind = kind};
    dt_optim_conf_defaults(&c);
    dt_param *ps[16];
    int n = dt_model_num_params(m);
    if (n > 16) abort();
    for (int i = 0; i < n; i++) ps[i] = dt_model_param(m, i);
    dt_optim *o = NULL;
    if (dt_optim_init(&o, &c, ps, n) != DT_OK) abort();
    return o;
}

/* Fake gradients (a function of the step) and one optimizer step. */
static void train_step(dt_model *m, dt_optim *o, int step) {
    for (int i = 0; i < dt_model_num_params(m); i++) {
        dt_param *p = dt_model_param(m, i);
        for (int64_t j = 0; j < dt_tensor_numel(&p->grad); j++)
            p->grad.data[j] = (float)sin(0.7 * (double)j + 1.3 * step + i);
    }
    dt_optim_step(o, NULL);
}

static int tensors_equal(const dt_tensor *a, const dt_tensor *b) {
    return dt_shape_eq(&a->shape, &b->shape) &&
           !memcmp(a->data, b->data, (size_t)dt_tensor_numel(a) * sizeof(float));
}

static int models_equal(dt_model *a, dt_model *b) {
    if (dt_model_num_params(a) != dt_model_num_params(b)) return 0;
    for (int i = 0; i < dt_model_num_params(a); i++)
        if (!tensors_equal(&dt_model_param(a, i)->value, &dt_model_param(b, i)->value)) return 0;
    return 1;
}

static const char *tmp_path(const char *name) {
    static char paths[4][512];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, 512, "%s/%s", dt_test_tmpdir(), name);
    return p;
}

static dt_train_state state_example(void) {
    dt_train_state s = {.step = 2, .epoch = 1, .epoch_batch = 5, .seed = 18446744073709551615ULL};
    dt_rng_seed(&s.rng, 99);
    (void)dt_rng_u64(&s.rng);
    return s;
}

static void test_save_load_roundtrip(void) {
    dt_model *a = model_new(3, 0, 1), *b = model_new(3, 0, 2);
    dt_optim *oa = optim_new(a, DT_OPTIM_ADAM), *ob = optim_new(b, DT_OPTIM_ADAM);
    train_step(a, oa, 0);
    train_step(a, oa, 1);
    dt_train_state s = state_example();
    const char *path = tmp_path("rt.safetensors");
    DT_CHECK_OK(dt_checkpoint_save(path, a, oa, &s));

    /* the file is a plain safetensors file with the documented names and metadata */
    dt_safetensors *st = NULL;
    DT_CHECK_OK(dt_safetensors_read(&st, path));
    DT_CHECK(dt_safetensors_count(st) == 4 + 8);
    DT_CHECK(!strcmp(dt_safetensors_name(st, 0), "hidden/kernel"));
    DT_CHECK(!strcmp(dt_safetensors_name(st, 4), "optimizer/hidden/kernel/m"));
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "format"), "dtrain-checkpoint"));
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "version"), "1"));
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "step"), "2"));
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "epoch"), "1"));
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "epoch_batch"), "5"));
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "seed"), "18446744073709551615"));
    DT_CHECK(!strcmp(dt_safetensors_meta(st, "optimizer_steps"), "2"));
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)s.rng.s[0]);
    DT_CHECK(strlen(dt_safetensors_meta(st, "rng")) == 64);
    DT_CHECK(!strncmp(dt_safetensors_meta(st, "rng"), hex, 16));
    dt_safetensors_free(st);

    dt_train_state got = {0};
    DT_CHECK_OK(dt_checkpoint_load(path, b, ob, &got));
    DT_CHECK(models_equal(a, b));
    for (int i = 0; i < dt_optim_num_slots(oa); i++)
        DT_CHECK(tensors_equal(dt_optim_slot(oa, i), dt_optim_slot(ob, i)));
    DT_CHECK(dt_optim_steps(ob) == 2);
    DT_CHECK(got.step == 2 && got.epoch == 1 && got.epoch_batch == 5 && got.seed == s.seed);
    DT_CHECK(!memcmp(&got.rng, &s.rng, sizeof s.rng));

    /* training on from the checkpoint matches training on without one */
    for (int k = 2; k < 5; k++) {
        train_step(a, oa, k);
        train_step(b, ob, k);
    }
    DT_CHECK(models_equal(a, b));

    /* weights only: no optimizer, no state (the optimizer tensors are skipped) */
    dt_model *c = model_new(3, 0, 3);
    DT_CHECK_OK(dt_checkpoint_load(path, c, NULL, NULL));
    dt_model *a0 = model_new(3, 0, 4);
    DT_CHECK_OK(dt_checkpoint_load(path, a0, NULL, NULL));
    DT_CHECK(models_equal(c, a0));
    dt_model_free(c);
    dt_model_free(a0);
    dt_optim_free(oa);
    dt_optim_free(ob);
    dt_model_free(a);
    dt_model_free(b);
}

/* A failed load changes nothing: model, optimizer and state stay as they were. */
#define CHECK_UNTOUCHED(m, ref, o, state)                                                      \
    do {                                                                                       \
        DT_CHECK(models_equal(m, ref));                                                        \
        if (o) DT_CHECK(dt_optim_steps(o) == 0);                                               \
        DT_CHECK((state).step == -7);                                                          \
    } while (0)

static void test_mismatch_is_refused_and_changes_nothing(void) {
    dt_model *a = model_new(3, 0, 1);
    dt_optim *oa = optim_new(a, DT_OPTIM_ADAM);
    train_step(a, oa, 0);
    dt_train_state s = state_example();
    const char *path = tmp_path("mismatch.safetensors");
    DT_CHECK_OK(dt_checkpoint_save(path, a, oa, &s));
    dt_train_state st = {.step = -7};

    /* "out/kernel" has another shape; the hidden layer matches and must not be copied either */
    dt_model *b = model_new(3, 0, 2), *ref = model_new(3, 0, 2);
    dt_layer_conf wide[2] = {
        {.kind = DT_LAYER_DENSE, .name = "hidden", .units = 3, .activation = DT_ACT_RELU},
        {.kind = DT_LAYER_DENSE, .name = "out", .units = 5},
    };
    dt_model *w = NULL, *wref = NULL;
    dt_shape in = dt_shape_make(1, (int64_t[]){4});
    DT_CHECK_OK(dt_model_init(&w, &in, wide, 2, DT_LOSS_MSE, 4, NULL));
    DT_CHECK_OK(dt_model_init(&wref, &in, wide, 2, DT_LOSS_MSE, 4, NULL));
    dt_model_init_params(w, 5);
    dt_model_init_params(wref, 5);
    DT_CHECK_ERR(dt_checkpoint_load(path, w, NULL, &st), DT_ERR_FORMAT,
                 "mismatch.safetensors: tensor out/kernel: shape [3, 2] in the file, [3, 5] in "
                 "the model");
    CHECK_UNTOUCHED(w, wref, (dt_optim *)NULL, st);

    /* a model with a layer the file lacks */
    dt_model *x = model_new(3, 1, 2), *xref = model_new(3, 1, 2);
    DT_CHECK_ERR(dt_checkpoint_load(path, x, NULL, &st), DT_ERR_FORMAT,
                 "tensor extra/kernel is missing (the model has it)");
    CHECK_UNTOUCHED(x, xref, (dt_optim *)NULL, st);

    /* a model without a layer the file has */
    dt_layer_conf one[1] = {{.kind = DT_LAYER_DENSE, .name = "hidden", .units = 3}};
    dt_model *y = NULL;
    DT_CHECK_OK(dt_model_init(&y, &in, one, 1, DT_LOSS_MSE, 4, NULL));
    DT_CHECK_ERR(dt_checkpoint_load(path, y, NULL, &st), DT_ERR_FORMAT,
                 "tensor out/kernel is not a parameter of the model");
    dt_model_free(y);

    /* another optimizer type */
    dt_optim *om = optim_new(b, DT_OPTIM_MOMENTUM);
    DT_CHECK_ERR(dt_checkpoint_load(path, b, om, &st), DT_ERR_FORMAT,
                 "tensor optimizer/hidden/kernel/m is not a slot of this optimizer");
    CHECK_UNTOUCHED(b, ref, om, st);
    for (int i = 0; i < dt_optim_num_slots(om); i++)
        for (int64_t j = 0; j < dt_tensor_numel(dt_optim_slot(om, i)); j++)
            DT_CHECK(dt_optim_slot(om, i)->data[j] == 0);
    dt_optim *og = optim_new(b, DT_OPTIM_ADAGRAD);
    DT_CHECK_ERR(dt_checkpoint_load(path, b, og, &st), DT_ERR_FORMAT,
                 "tensor optimizer/hidden/kernel/accumulator is missing (the optimizer has it)");
    CHECK_UNTOUCHED(b, ref, og, st);

    /* a file saved without an optimizer cannot restore one */
    const char *bare = tmp_path("bare.safetensors");
    DT_CHECK_OK(dt_checkpoint_save(bare, a, NULL, &s));
    dt_optim *os = optim_new(b, DT_OPTIM_SGD);
    DT_CHECK_ERR(dt_checkpoint_load(bare, b, os, &st), DT_ERR_FORMAT,
                 "bare.safetensors: metadata optimizer_steps is missing");
    CHECK_UNTOUCHED(b, ref, os, st);
    /* ... nor, saved without a state, restore the state */
    DT_CHECK_OK(dt_checkpoint_save(bare, a, NULL, NULL));
    DT_CHECK_ERR(dt_checkpoint_load(bare, b, NULL, &st), DT_ERR_FORMAT,
                 "bare.safetensors: metadata step is missing");
    CHECK_UNTOUCHED(b, ref, (dt_optim *)NULL, st);
    DT_CHECK_OK(dt_checkpoint_load(bare, b, NULL, NULL));
    DT_CHECK(models_equal(a, b));

    /* a nonexistent file */
    DT_CHECK_ERR(dt_checkpoint_load(tmp_path("nope.safetensors"), w, NULL, &st), DT_ERR_IO,
                 "nope.safetensors");
    CHECK_UNTOUCHED(w, wref, (dt_optim *)NULL, st);

    dt_optim_free(om);
    dt_optim_free(og);
    dt_optim_free(os);
    dt_optim_free(oa);
    dt_model_free(a);
    dt_model_free(b);
    dt_model_free(ref);
    dt_model_free(w);
    dt_model_free(wref);
    dt_model_free(x);
    dt_model_free(xref);
}

/* A checkpoint's own tensors with edited metadata. */
static const char *with_meta(const char *name, dt_model *m, const dt_st_meta *meta, int n) {
    const char *path = tmp_path(name);
    dt_st_tensor t[16];
    for (int i = 0; i < dt_model_num_params(m); i++)
        t[i] = (dt_st_tensor){dt_model_param(m, i)->name, &dt_model_param(m, i)->value};
    if (dt_safetensors_write(path, t, dt_model_num_params(m), meta, n) != DT_OK) abort();
    return path;
}

static void test_bad_metadata(void) {
    dt_model *a = model_new(3, 0, 1), *b = model_new(3, 0, 2), *ref = model_new(3, 0, 2);
    dt_train_state st = {.step = -7};
#define GOOD_STATE                                                                             \
    {"step", "3"}, {"epoch", "0"}, {"epoch_batch", "3"}, {"seed", "1"}, {                      \
        "rng", "0123456789abcdef0123456789ABCDEF0000000000000000ffffffffffffffff"              \
    }
    const char *p = with_meta("m0.safetensors", a, NULL, 0);
    DT_CHECK_ERR(dt_checkpoint_load(p, b, NULL, NULL), DT_ERR_FORMAT,
                 "m0.safetensors: not a dtrain checkpoint (metadata format is missing)");
    p = with_meta("m1.safetensors", a, (dt_st_meta[]){{"format", "pt"}}, 1);
    DT_CHECK_ERR(dt_checkpoint_load(p, b, NULL, NULL), DT_ERR_FORMAT,
                 "m1.safetensors: not a dtrain checkpoint (metadata format is \"pt\")");
    p = with_meta("m2.safetensors", a,
                  (dt_st_meta[]){{"format", "dtrain-checkpoint"}, {"version", "2"}}, 2);
    DT_CHECK_ERR(dt_checkpoint_load(p, b, NULL, NULL), DT_ERR_FORMAT,
                 "m2.safetensors: metadata version: checkpoint version 2 is not supported");
    p = with_meta("m3.safetensors", a,
                  (dt_st_meta[]){{"format", "dtrain-checkpoint"}, {"version", "1"}, GOOD_STATE},
                  7);
    DT_CHECK_OK(dt_checkpoint_load(p, b, NULL, &st));
    DT_CHECK(st.step == 3 && st.epoch_batch == 3 && st.rng.s[0] == 0x0123456789abcdefULL &&
             st.rng.s[2] == 0 && st.rng.s[3] == ~0ULL);
    dt_model_init_params(b, 2);
    st.step = -7;

    const struct {
        const char *key, *value, *msg;
    } bad[] = {
        {"step", "-1", "metadata step: expected a non-negative integer, got \"-1\""},
        {"step", "12a", "metadata step"},
        {"step", "", "metadata step"},
        {"step", "9223372036854775808", "metadata step"},
        {"epoch", " 1", "metadata epoch"},
        {"epoch_batch", "+1", "metadata epoch_batch"},
        {"seed", "18446744073709551616", "metadata seed"},
        {"rng", "0123", "metadata rng: expected 64 hex digits"},
        {"rng", "g123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
         "metadata rng: expected 64 hex digits"},
        {"rng", "0000000000000000000000000000000000000000000000000000000000000000",
         "metadata rng: the all-zero state is invalid"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_st_meta meta[7] = {{"format", "dtrain-checkpoint"}, {"version", "1"}, GOOD_STATE};
        for (int k = 2; k < 7; k++)
            if (!strcmp(meta[k].key, bad[i].key)) meta[k].value = bad[i].value;
        p = with_meta("mbad.safetensors", a, meta, 7);
        dt_err_clear();
        dt_err err = dt_checkpoint_load(p, b, NULL, &st);
        if (err != DT_ERR_FORMAT || !strstr(dt_errmsg(), bad[i].msg) ||
            !strstr(dt_errmsg(), "mbad.safetensors"))
            DT_FAIL("%s=\"%s\": %s: %s", bad[i].key, bad[i].value, dt_strerror(err),
                    dt_errmsg());
        CHECK_UNTOUCHED(b, ref, (dt_optim *)NULL, st);
    }
#undef GOOD_STATE
    dt_model_free(a);
    dt_model_free(b);
    dt_model_free(ref);
}

static int dir_has(const char *dir, const char *name) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat sb;
    return stat(p, &sb) == 0;
}

static int dir_count(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void test_checkpoint_dir(void) {
    char dir[512], latest[700];
    snprintf(dir, sizeof dir, "%s/job/checkpoints", dt_test_tmpdir());
    DT_CHECK_ERR(dt_checkpoint_dir_latest(dir, latest, sizeof latest), DT_ERR_NOTFOUND, dir);
    char job[512];
    snprintf(job, sizeof job, "%s/job", dt_test_tmpdir());
    DT_CHECK(mkdir(job, 0755) == 0);

    dt_model *m = model_new(3, 0, 1);
    dt_optim *o = optim_new(m, DT_OPTIM_MOMENTUM);
    dt_train_state s = state_example();
    /* the directory is created; other files are left alone */
    s.step = 5;
    DT_CHECK_OK(dt_checkpoint_dir_save(dir, 2, m, o, &s));
    DT_CHECK(dir_has(dir, "ckpt-0000000005.safetensors"));
    DT_CHECK_OK(dt_checkpoint_dir_latest(dir, latest, sizeof latest));
    DT_CHECK(strstr(latest, "/job/checkpoints/ckpt-0000000005.safetensors"));
    char other[700];
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    FILE *f = fopen(other, "w");
    DT_CHECK(f && fclose(f) == 0);
    /* a crashed save's temporary file (untouched for an hour) gets cleaned up */
    snprintf(other, sizeof other, "%s/.ckpt-0000000007.safetensors.tmp-AbC123", dir);
    f = fopen(other, "w");
    DT_CHECK(f && fclose(f) == 0);
    struct timespec hour_ago[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    DT_CHECK(utimensat(AT_FDCWD, other, hour_ago, 0) == 0);
    /* ... not one just written to: another process's save of an earlier step in flight */
    char fresh[700];
    snprintf(fresh, sizeof fresh, "%s/.ckpt-0000000008.safetensors.tmp-Fresh1", dir);
    f = fopen(fresh, "w");
    DT_CHECK(f && fclose(f) == 0);
    /* ... but not one of a later step than the save's: another trainer may be writing it */
    char live[700];
    snprintf(live, sizeof live, "%s/.ckpt-99999999999.safetensors.tmp-Live01", dir);
    f = fopen(live, "w");
    DT_CHECK(f && fclose(f) == 0);

    /* retention keeps the newest 2 by step (not by name length or time) */
    const int64_t steps[] = {10, 100, 9, 12345678901LL};
    for (int i = 0; i < 4; i++) {
        s.step = steps[i];
        train_step(m, o, i);
        DT_CHECK_OK(dt_checkpoint_dir_save(dir, 2, m, o, &s));
    }
    DT_CHECK(!dir_has(dir, "ckpt-0000000005.safetensors"));
    DT_CHECK(!dir_has(dir, "ckpt-0000000009.safetensors"));
    DT_CHECK(!dir_has(dir, "ckpt-0000000010.safetensors"));
    DT_CHECK(dir_has(dir, "ckpt-0000000100.safetensors"));
    DT_CHECK(dir_has(dir, "ckpt-12345678901.safetensors"));
    DT_CHECK(dir_has(dir, "notes.txt"));
    DT_CHECK(dir_has(dir, ".ckpt-99999999999.safetensors.tmp-Live01"));
    DT_CHECK(unlink(live) == 0);
    DT_CHECK(!dir_has(dir, ".ckpt-0000000007.safetensors.tmp-AbC123"));
    DT_CHECK(dir_has(dir, ".ckpt-0000000008.safetensors.tmp-Fresh1"));
    DT_CHECK(unlink(fresh) == 0);
    DT_CHECK(dir_count(dir) == 3); /* and no other temporary files */
    DT_CHECK_OK(dt_checkpoint_dir_latest(dir, latest, sizeof latest));
    DT_CHECK(strstr(latest, "ckpt-12345678901.safetensors"));
    dt_train_state got = {0};
    dt_model *b = model_new(3, 0, 2);
    dt_optim *ob = optim_new(b, DT_OPTIM_MOMENTUM);
    DT_CHECK_OK(dt_checkpoint_load(latest, b, ob, &got));
    DT_CHECK(got.step == 12345678901LL && models_equal(m, b));
    DT_CHECK_ERR(dt_checkpoint_dir_latest(dir, latest, 20), DT_ERR_ARG, dir);

    /* keep <= 0 keeps everything */
    s.step = 200;
    DT_CHECK_OK(dt_checkpoint_dir_save(dir, 0, m, o, &s));
    DT_CHECK(dir_count(dir) == 4);

    /* an empty directory has no latest */
    snprintf(other, sizeof other, "%s/empty", dt_test_tmpdir());
    DT_CHECK(mkdir(other, 0755) == 0);
    DT_CHECK_ERR(dt_checkpoint_dir_latest(other, latest, sizeof latest), DT_ERR_NOTFOUND,
                 "no checkpoint files");
    /* a directory that cannot be created */
    snprintf(other, sizeof other, "%s/missing/parent", dt_test_tmpdir());
    DT_CHECK_ERR(dt_checkpoint_dir_save(other, 2, m, o, &s), DT_ERR_IO, other);

    dt_optim_free(o);
    dt_optim_free(ob);
    dt_model_free(m);
    dt_model_free(b);
}

DT_TEST_MAIN(DT_T(test_save_load_roundtrip), DT_T(test_mismatch_is_refused_and_changes_nothing),
             DT_T(test_bad_metadata), DT_T(test_checkpoint_dir))
