/*
 * export.c - write a model version in TF Serving's layout and read one back for inference
 * (include/dtrain/export.h has the layout).
 *
 * A version is built in a hidden directory beside its final place and renamed into place, so
 * a server polling the base directory sees a version whole or not at all. Loading checks
 * every file before anything is handed out.
 */
#include "dtrain/export.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "export/export-impl.h"
#include "dtrain/checkpoint.h"
#include "dtrain/job.h"
#include "train/train-impl.h"

#define INPUT_FORMAT "dtrain-input"

void dt_input_norm_free(dt_input_norm *n) {
    if (!n) return;
    free(n->scale);
    free(n->shift);
    n->scale = n->shift = NULL;
    n->n = 0;
}

/* input.safetensors: the normalization as two tensors shaped like one sample, and the class
 * names as a JSON list in the metadata. */
static dt_err write_input(const char *path, const dt_export_src *src) {
    const dt_shape *in = dt_model_input_shape(src->model);
    int64_t n = dt_shape_numel(in);
    float *ones = NULL;
    const float *scale = src->norm.n ? src->norm.scale : NULL;
    const float *shift = src->norm.n ? src->norm.shift : NULL;
    if (src->norm.n && src->norm.n != n)
        return dt_err_set(DT_ERR_ARG, "%s: the normalization has %lld features, the model's "
                          "input %lld", path, (long long)src->norm.n, (long long)n);
    if (!scale) {
        if (!(ones = calloc((size_t)(2 * n), sizeof *ones)))
            return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
        for (int64_t i = 0; i < n; i++)
            ones[i] = 1.0f;
        scale = ones;
        shift = ones + n;
    }
    dt_tensor ts = {.shape = *in, .data = (float *)scale};
    dt_tensor tb = {.shape = *in, .data = (float *)shift};
    dt_st_tensor t[2] = {{"scale", &ts}, {"shift", &tb}};
    dt_st_meta meta[3] = {{"format", INPUT_FORMAT}, {"version", "1"}, {"classes", NULL}};
    int nmeta = 2;
    char *classes = NULL;
    if (src->class_names && src->num_classes > 0) {
        json_t *list = json_array();
        for (int i = 0; list && i < src->num_classes; i++)
            json_array_append_new(list, json_string(src->class_names[i]));
        classes = list ? json_dumps(list, JSON_COMPACT) : NULL;
        json_decref(list);
        if (!classes) {
            free(ones);
            return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
        }
        meta[2].value = classes;
        nmeta = 3;
    }
    dt_err e = dt_safetensors_write(path, t, 2, meta, nmeta);
    free(classes);
    free(ones);
    return e;
}

/* Remove a version directory this module wrote (its files only; nothing else is touched). */
static void remove_version(const char *dir) {
    static const char *const files[] = {"model.safetensors", "spec.yaml", "input.safetensors",
                                        "model.onnx"};
    char f[DT__PATH_MAX];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        if (dt__path(f, sizeof f, "%s/%s", dir, files[i]) == DT_OK) unlink(f);
    rmdir(dir);
}

/* Remove the hidden directory an export is built in: everything in it is this export's own
 * (the version's files and the writers' temporary files beside them), so all of it goes. */
static void remove_tmp(const char *tmp) {
    DIR *d = opendir(tmp);
    if (d) {
        struct dirent *ent;
        char f[DT__PATH_MAX];
        while ((ent = readdir(d))) {
            if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
            if (dt__path(f, sizeof f, "%s/%s", tmp, ent->d_name) == DT_OK) unlink(f);
        }
        closedir(d);
    }
    rmdir(tmp);
}

static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

dt_err dt_export_write(const char *base, const dt_export_src *src, unsigned formats, char *dir,
                       size_t dirlen) {
    if (!(formats & (DT_EXPORT_FORMAT_DTRAIN | DT_EXPORT_FORMAT_ONNX)))
        return dt_err_set(DT_ERR_ARG, "export: no format chosen (dtrain, onnx)");
    char tmp[DT__PATH_MAX], old[DT__PATH_MAX], file[DT__PATH_MAX];
    long long step = (long long)src->step;
    int pid = (int)getpid();
    /* Every path is built before the hidden directory is made, so a path too long fails
     * here and leaves nothing behind; the longest is a writer's temporary file in it
     * (".input.safetensors.tmp-XXXXXX", core/file.c and ckpt/safetensors.c). */
    dt_err e;
    if ((e = dt__path(dir, dirlen, "%s/%lld", base, step)) ||
        (e = dt__path(tmp, sizeof tmp, "%s/.tmp-%lld-%d", base, step, pid)) ||
        (e = dt__path(old, sizeof old, "%s/.old-%lld-%d", base, step, pid)) ||
        (e = dt__path(file, sizeof file, "%s/.input.safetensors.tmp-XXXXXX", tmp)))
        return dt_err_wrap(e, "export of step %lld", step);
    if ((e = dt__mkdirs(tmp))) return e;
    if (formats & DT_EXPORT_FORMAT_DTRAIN) {
        dt_train_state st = {.step = src->step, .epoch = src->epoch, .seed = src->seed};
        st.rng.s[0] = 1; /* a state that loads (an all-zero generator is refused) */
        if ((e = dt__path(file, sizeof file, "%s/model.safetensors", tmp)) ||
            (e = dt_checkpoint_save(file, src->model, NULL, &st)))
            goto fail;
        if ((e = dt__path(file, sizeof file, "%s/spec.yaml", tmp)) ||
            (e = dt__write_file_atomic(file, src->spec_text, src->spec_len)))
            goto fail;
        if ((e = dt__path(file, sizeof file, "%s/input.safetensors", tmp)) ||
            (e = write_input(file, src)))
            goto fail;
    }
    if (formats & DT_EXPORT_FORMAT_ONNX) {
        char doc[200];
        snprintf(doc, sizeof doc, "dtrain export, step %lld", step);
        if ((e = dt__path(file, sizeof file, "%s/model.onnx", tmp)) ||
            (e = dt_onnx_write(file, src->model, src->norm.n ? &src->norm : NULL, doc)))
            goto fail;
    }
    int had = rename(dir, old) == 0; /* an export of the same step replaces it */
    if (rename(tmp, dir) != 0) {
        e = dt_err_set(DT_ERR_IO, "%s: cannot rename into place: %s", dir, strerror(errno));
        if (had) rename(old, dir);
        goto fail;
    }
    sync_dir(base);
    if (had) remove_version(old);
    return DT_OK;
fail:
    remove_tmp(tmp);
    return e;
}

/* ---- loading ---- */

void dt_exported_free(dt_exported *x) {
    if (!x) return;
    dt_model_free(x->model);
    dt_spec_free(x->spec);
    dt_input_norm_free(&x->norm);
    if (x->class_names)
        for (int i = 0; i < x->num_classes; i++)
            free(x->class_names[i]);
    free(x->class_names);
    free(x);
}

static dt_err load_classes(dt_exported *x, const char *json, const char *path) {
    json_error_t jerr;
    json_t *list = json_loads(json, 0, &jerr);
    dt_err e = DT_OK;
    if (!json_is_array(list) || (int)json_array_size(list) != x->num_classes) {
        e = dt_err_set(DT_ERR_FORMAT, "%s: metadata classes: expected a list of %d names",
                       path, x->num_classes);
        goto out;
    }
    if (!(x->class_names = calloc((size_t)x->num_classes, sizeof *x->class_names))) {
        e = dt_err_set(DT_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < x->num_classes; i++) {
        const char *s = json_string_value(json_array_get(list, (size_t)i));
        if (!s) {
            e = dt_err_set(DT_ERR_FORMAT, "%s: metadata classes[%d]: expected a string", path, i);
            goto out;
        }
        if (!(x->class_names[i] = strdup(s))) {
            e = dt_err_set(DT_ERR_NOMEM, "out of memory");
            goto out;
        }
    }
out:
    json_decref(list);
    return e;
}

/* input.safetensors: the input shape, the normalization and the class names (a JSON list,
 * checked once the model says how many classes there are; NULL when none). */
static dt_err load_input(dt_exported *x, const char *dir, dt_shape *shape, char **classes_json) {
    char path[DT__PATH_MAX];
    dt_err e = dt__path(path, sizeof path, "%s/input.safetensors", dir);
    if (e) return e;
    dt_safetensors *st = NULL;
    if ((e = dt_safetensors_read(&st, path))) return e;
    dt_tensor ts, tb;
    const char *fmt = dt_safetensors_meta(st, "format");
    if (!fmt || strcmp(fmt, INPUT_FORMAT) != 0) {
        e = dt_err_set(DT_ERR_FORMAT, "%s: metadata format: expected '%s'", path, INPUT_FORMAT);
        goto out;
    }
    if (dt_safetensors_find(st, "scale", &ts) || dt_safetensors_find(st, "shift", &tb)) {
        e = dt_err_set(DT_ERR_FORMAT, "%s: tensors 'scale' and 'shift' are required", path);
        goto out;
    }
    if (!dt_shape_eq(&ts.shape, &tb.shape) || ts.shape.ndim < 1 || dt_shape_numel(&ts.shape) < 1) {
        e = dt_err_set(DT_ERR_FORMAT, "%s: 'scale' and 'shift' must have one sample's shape",
                       path);
        goto out;
    }
    int64_t n = dt_shape_numel(&ts.shape);
    x->norm.scale = malloc((size_t)n * sizeof(float));
    x->norm.shift = malloc((size_t)n * sizeof(float));
    if (!x->norm.scale || !x->norm.shift) {
        e = dt_err_set(DT_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(x->norm.scale, ts.data, (size_t)n * sizeof(float));
    memcpy(x->norm.shift, tb.data, (size_t)n * sizeof(float));
    x->norm.n = n;
    *shape = ts.shape;
    const char *classes = dt_safetensors_meta(st, "classes");
    if (classes && !(*classes_json = strdup(classes))) e = dt_err_set(DT_ERR_NOMEM, "out of memory");
out:
    dt_safetensors_free(st);
    return e;
}

dt_err dt__export_parse_spec(dt_spec **out, const char *text, size_t len, const char *path) {
    dt_err e = dt_spec_parse(out, text, len, path);
    if (!e) return DT_OK;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dt_errmsg());
    dt_job_spec *job = NULL;
    if (dt_job_spec_parse(&job, text, len, path) == DT_OK && job->train) {
        *out = job->train;
        job->train = NULL;
        dt_job_spec_free(job);
        dt_err_clear();
        return DT_OK;
    }
    dt_job_spec_free(job);
    return dt_err_set(e, "%s", msg);
}

static int64_t version_of(const char *dir) {
    const char *slash = strrchr(dir, '/');
    const char *name = slash ? slash + 1 : dir;
    if (!*name) return -1;
    int64_t v = 0;
    for (const char *p = name; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

dt_err dt_export_load(const char *dir, int64_t max_batch, dt_pool *pool, dt_exported **out) {
    *out = NULL;
    /* the longest path read here: DIR/model.safetensors (input.safetensors is as long) */
    char path[DT__PATH_MAX];
    dt_err e = dt__path(path, sizeof path, "%s/model.safetensors", dir);
    if (e) return dt_err_wrap(e, "loading a model version");
    dt_exported *x = calloc(1, sizeof *x);
    if (!x) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    char *text = NULL, *classes = NULL;
    size_t len = 0;
    dt_shape input;
    x->version = version_of(dir);
    if (!(e = dt__path(path, sizeof path, "%s/spec.yaml", dir))) e = dt__read_file(path, &text, &len);
    if (!e) e = dt__export_parse_spec(&x->spec, text, len, path);
    free(text);
    if (e) goto fail;
    if ((e = load_input(x, dir, &input, &classes))) goto fail;
    if (x->spec->input.ndim > 0 && !dt_shape_eq(&x->spec->input, &input)) {
        char a[64], b[64];
        e = dt_err_set(DT_ERR_FORMAT, "%s/input.safetensors: input shape %s, but the spec says %s",
                       dir, dt_shape_str(&input, a, sizeof a),
                       dt_shape_str(&x->spec->input, b, sizeof b));
        goto fail;
    }
    if ((e = dt__train_build_model(x->spec, &input, max_batch, pool, &x->model))) goto fail;
    const dt_shape *o = dt_model_output_shape(x->model);
    x->num_classes = x->spec->loss == DT_LOSS_SOFTMAX_CROSS_ENTROPY ? (int)dt_shape_numel(o) : 0;
    if (classes) {
        dt__path(path, sizeof path, "%s/input.safetensors", dir); /* fits: checked above */
        e = x->num_classes > 0 ? load_classes(x, classes, path)
                               : dt_err_set(DT_ERR_FORMAT, "%s: class names for a model that "
                                            "is not a classifier", path);
        if (e) goto fail;
    }
    dt__path(path, sizeof path, "%s/model.safetensors", dir); /* fits: checked above */
    if ((e = dt_checkpoint_load(path, x->model, NULL, NULL))) goto fail;
    free(classes);
    *out = x;
    return DT_OK;
fail:
    free(classes);
    dt_exported_free(x);
    return e;
}
