/*
 * checkpoint.c - training checkpoints on top of safetensors (docs/CHECKPOINTS.md).
 *
 * Design: a checkpoint is one safetensors file:
 *   tensors   every model parameter under its own name ("dense_1/kernel"), then every
 *             optimizer slot as "optimizer/<slot name>" ("optimizer/dense_1/kernel/m")
 *   metadata  format = "dtrain-checkpoint", version = "1", and the training state as
 *             decimal strings: step, epoch, epoch_batch, seed; rng = the four xoshiro state
 *             words as 64 lowercase hex digits (s[0] first); optimizer_steps; samples
 *             (the samples in all the steps done, when kept: optional).
 * Saving goes through dt_safetensors_write, so it is atomic.
 *
 * Loading is all-or-nothing: the file is read and validated as a whole (metadata parsed,
 * every model parameter and optimizer slot present with the right shape, no tensor the
 * model or optimizer does not know) before a single value is copied, so a failed load
 * leaves the model, the optimizer and the state untouched. When no optimizer is given, the
 * file's "optimizer/" tensors are skipped (loading weights for evaluation); any other
 * unknown tensor is an error.
 *
 * Checkpoint directories hold dir/ckpt-<step, 10 digits>.safetensors; the newest is the one
 * with the largest step. dt_checkpoint_dir_save writes one, then deletes all but the newest
 * `keep` and any temporary files a crashed save left behind.
 */
#include "dtrain/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/assert-impl.h"

#define FORMAT_NAME "dtrain-checkpoint"
#define FORMAT_VERSION "1"
#define OPT_PREFIX "optimizer/"
#define NAME_MAX_LEN 128
#define STALE_TEMP_S 600.0 /* seconds a crashed save's temporary file is left alone */

/* ---- metadata values ---- */

/* A decimal integer of digits only, no sign, no spaces, fitting in max. */
static int parse_u64(const char *str, uint64_t max, uint64_t *out) {
    if (!str || !*str) return 0;
    uint64_t v = 0;
    for (const char *p = str; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        unsigned d = (unsigned)(*p - '0');
        if (v > (max - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

static dt_err meta_u64(const dt_safetensors *st, const char *path, const char *key, uint64_t max,
                       uint64_t *out) {
    const char *v = dt_safetensors_meta(st, key);
    if (!v) return dt_err_set(DT_ERR_FORMAT, "%s: metadata %s is missing", path, key);
    if (!parse_u64(v, max, out))
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: metadata %s: expected a non-negative integer, got \"%s\"", path,
                          key, v);
    return DT_OK;
}

static dt_err meta_i64(const dt_safetensors *st, const char *path, const char *key,
                       int64_t *out) {
    uint64_t v;
    dt_err err = meta_u64(st, path, key, INT64_MAX, &v);
    if (!err) *out = (int64_t)v;
    return err;
}

static void rng_hex(const dt_rng *r, char out[65]) {
    for (int i = 0; i < 4; i++) snprintf(out + 16 * i, 17, "%016" PRIx64, r->s[i]);
}

static dt_err meta_rng(const dt_safetensors *st, const char *path, dt_rng *r) {
    const char *v = dt_safetensors_meta(st, "rng");
    if (!v) return dt_err_set(DT_ERR_FORMAT, "%s: metadata rng is missing", path);
    int ok = strlen(v) == 64;
    uint64_t any = 0;
    for (int i = 0; ok && i < 4; i++) {
        uint64_t w = 0;
        for (int j = 0; ok && j < 16; j++) {
            char c = v[16 * i + j];
            unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                         : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                         : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                                : 16u;
            ok = d < 16;
            w = w << 4 | d;
        }
        r->s[i] = w;
        any |= w;
    }
    if (!ok)
        return dt_err_set(DT_ERR_FORMAT, "%s: metadata rng: expected 64 hex digits, got \"%s\"",
                          path, v);
    if (!any) /* xoshiro's one forbidden state */
        return dt_err_set(DT_ERR_FORMAT, "%s: metadata rng: the all-zero state is invalid",
                          path);
    return DT_OK;
}

/* ---- save ---- */

dt_err dt_checkpoint_save(const char *path, dt_model *m, dt_optim *o, const dt_train_state *s) {
    DT_ASSERT(path && m);
    int np = dt_model_num_params(m);
    int ns = o ? dt_optim_num_slots(o) : 0;
    dt_st_tensor *t = malloc((size_t)(np + ns + 1) * sizeof *t);
    char(*names)[NAME_MAX_LEN] = malloc((size_t)(ns + 1) * sizeof *names);
    if (!t || !names) {
        free(t);
        free(names);
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
    }
    for (int i = 0; i < np; i++) {
        const dt_param *p = dt_model_param(m, i);
        t[i] = (dt_st_tensor){p->name, &p->value};
    }
    for (int i = 0; i < ns; i++) {
        int len = snprintf(names[i], NAME_MAX_LEN, OPT_PREFIX "%s", dt_optim_slot_name(o, i));
        DT_ASSERT(len > 0 && len < NAME_MAX_LEN);
        t[np + i] = (dt_st_tensor){names[i], dt_optim_slot(o, i)};
    }

    char step[24], epoch[24], batch[24], seed[24], rng[65], osteps[24], samples[24];
    dt_st_meta meta[9] = {{"format", FORMAT_NAME}, {"version", FORMAT_VERSION}};
    int nmeta = 2;
    if (s) {
        DT_ASSERT(s->step >= 0 && s->epoch >= 0 && s->epoch_batch >= 0);
        snprintf(step, sizeof step, "%" PRId64, s->step);
        snprintf(epoch, sizeof epoch, "%" PRId64, s->epoch);
        snprintf(batch, sizeof batch, "%" PRId64, s->epoch_batch);
        snprintf(seed, sizeof seed, "%" PRIu64, s->seed);
        rng_hex(&s->rng, rng);
        meta[nmeta++] = (dt_st_meta){"step", step};
        meta[nmeta++] = (dt_st_meta){"epoch", epoch};
        meta[nmeta++] = (dt_st_meta){"epoch_batch", batch};
        meta[nmeta++] = (dt_st_meta){"seed", seed};
        meta[nmeta++] = (dt_st_meta){"rng", rng};
        if (s->samples > 0) {
            snprintf(samples, sizeof samples, "%" PRId64, s->samples);
            meta[nmeta++] = (dt_st_meta){"samples", samples};
        }
    }
    if (o) {
        snprintf(osteps, sizeof osteps, "%" PRId64, dt_optim_steps(o));
        meta[nmeta++] = (dt_st_meta){"optimizer_steps", osteps};
    }
    dt_err err = dt_safetensors_write(path, t, np + ns, meta, nmeta);
    free(names);
    free(t);
    return err;
}

/* ---- load ---- */

static int find_slot(dt_optim *o, const char *name) {
    int ns = dt_optim_num_slots(o);
    for (int i = 0; i < ns; i++)
        if (!strcmp(dt_optim_slot_name(o, i), name)) return i;
    return -1;
}

/* The file's tensor `name` must exist with the shape of `want`; *src gets it. */
static dt_err expect_tensor(const dt_safetensors *st, const char *path, const char *name,
                            const dt_tensor *want, const char *owner, dt_tensor *src) {
    if (dt_safetensors_find(st, name, src) != DT_OK)
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor %s is missing (the %s has it)", path, name,
                          owner);
    if (!dt_shape_eq(&src->shape, &want->shape)) {
        char a[96], b[96];
        return dt_err_set(DT_ERR_FORMAT, "%s: tensor %s: shape %s in the file, %s in the %s",
                          path, name, dt_shape_str(&src->shape, a, sizeof a),
                          dt_shape_str(&want->shape, b, sizeof b), owner);
    }
    return DT_OK;
}

dt_err dt_checkpoint_load(const char *path, dt_model *m, dt_optim *o, dt_train_state *s) {
    DT_ASSERT(path && m);
    dt_safetensors *st = NULL;
    dt_err err = dt_safetensors_read(&st, path);
    if (err) return err;
    int np = dt_model_num_params(m);
    int ns = o ? dt_optim_num_slots(o) : 0;
    dt_tensor *src = malloc((size_t)(np + ns + 1) * sizeof *src);
    if (!src) {
        err = dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }

    /* metadata */
    const char *fmt = dt_safetensors_meta(st, "format");
    if (!fmt || strcmp(fmt, FORMAT_NAME)) {
        err = dt_err_set(DT_ERR_FORMAT, "%s: not a dtrain checkpoint (metadata format is %s%s%s)",
                         path, fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "");
        goto out;
    }
    const char *ver = dt_safetensors_meta(st, "version");
    if (!ver || strcmp(ver, FORMAT_VERSION)) {
        err = dt_err_set(DT_ERR_FORMAT,
                         "%s: metadata version: checkpoint version %s is not supported (want "
                         "%s)",
                         path, ver ? ver : "(missing)", FORMAT_VERSION);
        goto out;
    }
    dt_train_state state = {0};
    if (s) {
        uint64_t seed;
        if ((err = meta_i64(st, path, "step", &state.step)) ||
            (err = meta_i64(st, path, "epoch", &state.epoch)) ||
            (err = meta_i64(st, path, "epoch_batch", &state.epoch_batch)) ||
            (err = meta_u64(st, path, "seed", UINT64_MAX, &seed)) ||
            (err = meta_rng(st, path, &state.rng)) ||
            (dt_safetensors_meta(st, "samples") &&
             (err = meta_i64(st, path, "samples", &state.samples))))
            goto out;
        state.seed = seed;
    }
    int64_t osteps = 0;
    if (o && (err = meta_i64(st, path, "optimizer_steps", &osteps))) goto out;

    /* every parameter and slot present with its shape */
    for (int i = 0; i < np; i++) {
        const dt_param *p = dt_model_param(m, i);
        if ((err = expect_tensor(st, path, p->name, &p->value, "model", &src[i]))) goto out;
    }
    for (int i = 0; i < ns; i++) {
        char name[NAME_MAX_LEN];
        snprintf(name, sizeof name, OPT_PREFIX "%s", dt_optim_slot_name(o, i));
        if ((err = expect_tensor(st, path, name, dt_optim_slot(o, i), "optimizer", &src[np + i])))
            goto out;
    }
    /* and nothing else */
    for (int i = 0; i < dt_safetensors_count(st); i++) {
        const char *name = dt_safetensors_name(st, i);
        const size_t plen = sizeof OPT_PREFIX - 1;
        if (!strncmp(name, OPT_PREFIX, plen)) {
            if (!o) continue; /* weights only */
            if (find_slot(o, name + plen) < 0) {
                err = dt_err_set(DT_ERR_FORMAT,
                                 "%s: tensor %s is not a slot of this optimizer (saved by a "
                                 "different optimizer type?)",
                                 path, name);
                goto out;
            }
        } else if (!dt_model_find_param(m, name)) {
            err = dt_err_set(DT_ERR_FORMAT, "%s: tensor %s is not a parameter of the model", path,
                             name);
            goto out;
        }
    }

    /* all checked: copy */
    for (int i = 0; i < np; i++) {
        dt_param *p = dt_model_param(m, i);
        memcpy(p->value.data, src[i].data, (size_t)dt_tensor_numel(&p->value) * sizeof(float));
    }
    for (int i = 0; i < ns; i++) {
        dt_tensor *t = dt_optim_slot(o, i);
        memcpy(t->data, src[np + i].data, (size_t)dt_tensor_numel(t) * sizeof(float));
    }
    if (o) dt_optim_set_steps(o, osteps);
    if (s) *s = state;
out:
    free(src);
    dt_safetensors_free(st);
    return err;
}

/* ---- checkpoint directories ---- */

#define CKPT_PREFIX "ckpt-"
#define CKPT_SUFFIX ".safetensors"

/* The step of a "ckpt-<at least 10 digits>.safetensors" name, or -1. */
static int64_t ckpt_step(const char *name) {
    size_t n = strlen(name), lp = sizeof CKPT_PREFIX - 1, ls = sizeof CKPT_SUFFIX - 1;
    if (n < lp + 10 + ls || strncmp(name, CKPT_PREFIX, lp) || strcmp(name + n - ls, CKPT_SUFFIX))
        return -1;
    char digits[32];
    size_t nd = n - lp - ls;
    if (nd >= sizeof digits) return -1;
    memcpy(digits, name + lp, nd);
    digits[nd] = '\0';
    uint64_t v;
    return parse_u64(digits, INT64_MAX, &v) ? (int64_t)v : -1;
}

/* A crashed save's temporary file: "." + a checkpoint name + ".tmp-XXXXXX", of a step
 * before `saved` (one of this step or a later one may be another trainer's save in progress:
 * the chief and rank 0 of an all-reduce ring, or several members stopped at once, write the
 * same step) and untouched for STALE_TEMP_S (rank 0 of a ring writes its checkpoints from a
 * thread while the ring goes on, so another member's later save can meet an earlier step's
 * write in flight: its file's time moves with every write). */
static int is_stale_temp(const char *name, int64_t saved) {
    const char *tmp = strstr(name, ".tmp-");
    if (name[0] != '.' || !tmp) return 0;
    char base[64];
    size_t n = (size_t)(tmp - (name + 1));
    if (n >= sizeof base) return 0;
    memcpy(base, name + 1, n);
    base[n] = '\0';
    int64_t step = ckpt_step(base);
    return step >= 0 && step < saved;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The steps of every checkpoint in dir, ascending (caller frees *steps). */
static dt_err list_ckpts(const char *dir, int64_t **steps, int *n) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return dt_err_set(DT_ERR_NOTFOUND, "%s: no checkpoints (no such directory)", dir);
        return dt_err_set(DT_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    }
    dt_err err = DT_OK;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step = ckpt_step(e->d_name);
        if (step < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *grown = realloc(*steps, (size_t)cap * sizeof *grown);
            if (!grown) {
                err = dt_err_set(DT_ERR_NOMEM, "%s: out of memory", dir);
                break;
            }
            *steps = grown;
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    if (err) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return err;
    }
    if (*n > 0) qsort(*steps, (size_t)*n, sizeof **steps, cmp_i64);
    return DT_OK;
}

static int ckpt_path(char *buf, size_t len, const char *dir, int64_t step) {
    int n = snprintf(buf, len, "%s/" CKPT_PREFIX "%010" PRId64 CKPT_SUFFIX, dir, step);
    return n > 0 && (size_t)n < len;
}

dt_err dt_checkpoint_dir_save(const char *dir, int keep, dt_model *m, dt_optim *o,
                              const dt_train_state *s) {
    DT_ASSERT(dir && m && s && s->step >= 0);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dt_err_set(DT_ERR_IO, "%s: cannot create the checkpoint directory: %s", dir,
                          strerror(errno));
    size_t len = strlen(dir) + 64;
    char *path = malloc(len);
    if (!path) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", dir);
    int64_t *steps = NULL;
    int n = 0;
    dt_err err;
    ckpt_path(path, len, dir, s->step);
    if ((err = dt_checkpoint_save(path, m, o, s))) goto out;

    /* retention: all but the newest `keep` go */
    if ((err = list_ckpts(dir, &steps, &n))) goto out;
    for (int i = 0; keep > 0 && i < n - keep; i++) {
        ckpt_path(path, len, dir, steps[i]);
        if (unlink(path) != 0 && errno != ENOENT) {
            err = dt_err_set(DT_ERR_IO, "%s: cannot delete an old checkpoint: %s", path,
                             strerror(errno));
            goto out;
        }
    }
    /* temporaries of saves that crashed */
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!is_stale_temp(e->d_name, s->step)) continue;
            char *tmp = malloc(strlen(dir) + strlen(e->d_name) + 2);
            if (!tmp) break;
            sprintf(tmp, "%s/%s", dir, e->d_name);
            struct stat st;
            if (stat(tmp, &st) == 0 && difftime(time(NULL), st.st_mtime) > STALE_TEMP_S)
                unlink(tmp); /* best effort */
            free(tmp);
        }
        closedir(d);
    }
out:
    free(steps);
    free(path);
    return err;
}

dt_err dt_checkpoint_dir_latest(const char *dir, char *path, size_t len) {
    DT_ASSERT(dir && path);
    int64_t *steps = NULL;
    int n = 0;
    dt_err err = list_ckpts(dir, &steps, &n);
    if (err) return err;
    if (n == 0)
        err = dt_err_set(DT_ERR_NOTFOUND, "%s: no checkpoint files (ckpt-*.safetensors)", dir);
    else if (!ckpt_path(path, len, dir, steps[n - 1]))
        err = dt_err_set(DT_ERR_ARG, "%s: the checkpoint path does not fit in %zu bytes", dir,
                         len);
    free(steps);
    return err;
}
