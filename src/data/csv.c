/*
 * csv.c - the CSV reader: one label column, every other column a float feature.
 *
 * Design: one pass over the file with getline (lines of any length), splitting each line in
 * place at the delimiter (no quoting: a field is the text between two delimiters, with
 * surrounding whitespace trimmed). The first data row fixes the field count; every later
 * row must match it. Features go straight into a growing float array. Class labels are not
 * known to be integers or names until the last row, so their text is kept in one growing
 * buffer (one NUL-terminated string per row) and resolved at the end: all non-negative
 * integers keep their values, otherwise the distinct names are sorted (strcmp, i.e. byte
 * order) and numbered 0..k-1. Line numbers in messages are 1-based and count every line of
 * the file (blank lines and the header too), field numbers are 1-based, as an editor shows
 * them: "iris.csv:17: field 2: 'abc' is not a number".
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file-impl.h"
#include "data/data-impl.h"

/* More fields than this in one row is not a CSV dtrain can use. */
#define DT_CSV_MAX_FIELDS (1 << 24)

typedef struct csv_reader {
    const char *path;
    char delim;
    char trim[8]; /* whitespace trimmed around fields: " \t\r\v\f" minus the delimiter */
    int regression;
    int label_opt; /* label column as given (-1 = last) */
    int label_col; /* resolved once the first data row is seen */
    int nfields;   /* 0 until the first data row */
    long long line;

    char **fields; /* the current row's fields, pointing into the line */
    int fields_cap;

    int64_t n, cap; /* rows read, rows allocated */
    float *x;       /* n * (nfields - 1) features */
    float *targets; /* n targets (regression) */
    char *text;     /* class labels: n NUL-terminated strings (classification) */
    size_t text_len, text_cap;
    size_t *text_off; /* n offsets into text */

    int all_int;        /* every class label so far is a non-negative integer */
    long long big_line; /* first line whose integer label is >= DT_DATA_MAX_CLASSES, or 0 */
    int big_field;      /* its field number (1-based) */
    long big_value;     /* and its value */
} csv_reader;

static dt_err csv_nomem(const csv_reader *r) {
    return dt_err_set(DT_ERR_NOMEM, "%s:%lld: out of memory after %lld rows", r->path, r->line,
                      (long long)r->n);
}

/* A float that takes the whole (trimmed) field. 1: ok, 0: not a number, -1: not finite. */
static int csv_parse_float(const char *s, float *out) {
    if (!*s) return 0;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (end == s || *end) return 0;
    if (!isfinite(v)) return -1;
    *out = v;
    return 1;
}

/* A non-negative decimal integer label: 1 with *out set, 0 when s is something else. */
static int csv_parse_class_int(const char *s, long *out) {
    size_t len = strlen(s);
    if (len == 0 || len > 9) return 0; /* 9 digits: no overflow */
    for (size_t i = 0; i < len; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    *out = strtol(s, NULL, 10);
    return 1;
}

static dt_err csv_bad_number(const csv_reader *r, int field, const char *s, int how) {
    return dt_err_set(DT_ERR_FORMAT, "%s:%lld: field %d: '%.64s%s' is not a %snumber", r->path,
                      r->line, field + 1, s, strlen(s) > 64 ? "..." : "", how < 0 ? "finite " : "");
}

/* Split line (already stripped of its line ending) into r->fields; returns the count or -1
 * (out of memory / too many fields, with the error set). */
static int csv_split(csv_reader *r, char *line, dt_err *err) {
    int count = 0;
    char *p = line;
    for (;;) {
        char *end = strchr(p, r->delim);
        if (end) *end = '\0';
        /* trim */
        while (*p && strchr(r->trim, *p))
            p++;
        size_t len = strlen(p);
        while (len > 0 && strchr(r->trim, p[len - 1]))
            p[--len] = '\0';
        if (count == r->fields_cap) {
            if (r->fields_cap >= DT_CSV_MAX_FIELDS) {
                *err = dt_err_set(DT_ERR_FORMAT, "%s:%lld: more than %d fields", r->path, r->line,
                                  DT_CSV_MAX_FIELDS);
                return -1;
            }
            int cap = r->fields_cap ? r->fields_cap * 2 : 16;
            char **f = realloc(r->fields, (size_t)cap * sizeof *f);
            if (!f) {
                *err = csv_nomem(r);
                return -1;
            }
            r->fields = f;
            r->fields_cap = cap;
        }
        r->fields[count++] = p;
        if (!end) break;
        p = end + 1;
    }
    return count;
}

/* Make room for one more row. */
static dt_err csv_grow(csv_reader *r) {
    if (r->n < r->cap) return DT_OK;
    int64_t cap = r->cap ? r->cap * 2 : 256;
    size_t row = (size_t)r->nfields - 1;
    if ((uint64_t)cap > SIZE_MAX / sizeof(float) / row) return csv_nomem(r);
    float *x = realloc(r->x, (size_t)cap * row * sizeof(float));
    if (!x) return csv_nomem(r);
    r->x = x;
    if (r->regression) {
        float *t = realloc(r->targets, (size_t)cap * sizeof(float));
        if (!t) return csv_nomem(r);
        r->targets = t;
    } else {
        size_t *o = realloc(r->text_off, (size_t)cap * sizeof(size_t));
        if (!o) return csv_nomem(r);
        r->text_off = o;
    }
    r->cap = cap;
    return DT_OK;
}

static dt_err csv_add_label_text(csv_reader *r, const char *s) {
    size_t len = strlen(s) + 1;
    if (r->text_len + len > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 4096;
        while (cap < r->text_len + len)
            cap *= 2;
        char *t = realloc(r->text, cap);
        if (!t) return csv_nomem(r);
        r->text = t;
        r->text_cap = cap;
    }
    r->text_off[r->n] = r->text_len;
    memcpy(r->text + r->text_len, s, len);
    r->text_len += len;
    return DT_OK;
}

/* One data row (a line that is neither blank nor the header). */
static dt_err csv_row(csv_reader *r, char *line) {
    dt_err err = DT_OK;
    int count = csv_split(r, line, &err);
    if (count < 0) return err;
    if (r->nfields == 0) {
        if (count < 2)
            return dt_err_set(DT_ERR_FORMAT,
                              "%s:%lld: a row needs a label and at least one feature, got %d "
                              "field%s (is the delimiter '%c'?)",
                              r->path, r->line, count, count == 1 ? "" : "s", r->delim);
        r->label_col = r->label_opt < 0 ? count - 1 : r->label_opt;
        if (r->label_col >= count)
            return dt_err_set(DT_ERR_ARG,
                              "%s:%lld: label column %d does not exist: the row has "
                              "%d fields (columns 0 to %d)",
                              r->path, r->line, r->label_col, count, count - 1);
        r->nfields = count;
    } else if (count != r->nfields) {
        return dt_err_set(DT_ERR_FORMAT, "%s:%lld: expected %d fields, got %d", r->path, r->line,
                          r->nfields, count);
    }
    if ((err = csv_grow(r))) return err;

    float *x = r->x + r->n * (r->nfields - 1);
    for (int j = 0; j < count; j++) {
        if (j == r->label_col) continue;
        int ok = csv_parse_float(r->fields[j], x++);
        if (ok != 1) return csv_bad_number(r, j, r->fields[j], ok);
    }
    const char *label = r->fields[r->label_col];
    if (r->regression) {
        int ok = csv_parse_float(label, &r->targets[r->n]);
        if (ok != 1) return csv_bad_number(r, r->label_col, label, ok);
    } else {
        if (!*label)
            return dt_err_set(DT_ERR_FORMAT, "%s:%lld: field %d: the class label is empty", r->path,
                              r->line, r->label_col + 1);
        long v;
        if (!csv_parse_class_int(label, &v)) {
            r->all_int = 0;
        } else if (v >= DT_DATA_MAX_CLASSES && !r->big_line) {
            r->big_line = r->line;
            r->big_field = r->label_col + 1;
            r->big_value = v;
        }
        if ((err = csv_add_label_text(r, label))) return err;
    }
    r->n++;
    return DT_OK;
}

static int csv_strcmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Turn the label texts into d->labels (and d->class_names when they are names). */
static dt_err csv_resolve_classes(csv_reader *r, dt_dataset *d) {
    d->labels = malloc((size_t)r->n * sizeof(int32_t));
    if (!d->labels) return csv_nomem(r);
    if (r->all_int) {
        if (r->big_line)
            return dt_err_set(DT_ERR_FORMAT,
                              "%s:%lld: field %d: integer class label %ld is too large (integer "
                              "labels must be below %d)",
                              r->path, r->big_line, r->big_field, r->big_value,
                              DT_DATA_MAX_CLASSES);
        long max = 0;
        for (int64_t i = 0; i < r->n; i++) {
            long v = strtol(r->text + r->text_off[i], NULL, 10);
            d->labels[i] = (int32_t)v;
            if (v > max) max = v;
        }
        d->num_classes = (int)max + 1;
        return DT_OK;
    }
    /* names: sort the distinct strings, number them, look each row up */
    dt_err err = DT_OK;
    const char **sorted = malloc((size_t)r->n * sizeof *sorted);
    if (!sorted) return csv_nomem(r);
    for (int64_t i = 0; i < r->n; i++)
        sorted[i] = r->text + r->text_off[i];
    qsort(sorted, (size_t)r->n, sizeof *sorted, csv_strcmp);
    int64_t k = 0;
    for (int64_t i = 0; i < r->n; i++)
        if (k == 0 || strcmp(sorted[k - 1], sorted[i])) sorted[k++] = sorted[i];
    if (k > DT_DATA_MAX_CLASSES) {
        err = dt_err_set(DT_ERR_FORMAT, "%s: %lld distinct class names, at most %d are allowed",
                         r->path, (long long)k, DT_DATA_MAX_CLASSES);
        goto end;
    }
    d->class_names = calloc((size_t)k, sizeof(char *));
    if (!d->class_names) {
        err = csv_nomem(r);
        goto end;
    }
    d->num_classes = (int)k;
    for (int64_t j = 0; j < k; j++)
        if (!(d->class_names[j] = strdup(sorted[j]))) {
            err = csv_nomem(r);
            goto end;
        }
    for (int64_t i = 0; i < r->n; i++) {
        const char *key = r->text + r->text_off[i];
        const char **hit = bsearch(&key, sorted, (size_t)k, sizeof *sorted, csv_strcmp);
        d->labels[i] = (int32_t)(hit - sorted);
    }
end:
    free(sorted);
    return err;
}

dt_err dt_dataset_load_csv(dt_dataset **out, const char *path, const dt_csv_opts *opts) {
    static const dt_csv_opts defaults = {.label_column = -1};
    if (!opts) opts = &defaults;
    csv_reader r = {
        .path = path,
        .delim = opts->delimiter ? opts->delimiter : ',',
        .regression = opts->regression,
        .label_opt = opts->label_column,
        .all_int = 1,
    };
    if (r.delim == '\n' || r.delim == '\r')
        return dt_err_set(DT_ERR_ARG, "%s: a line break cannot be the CSV delimiter", path);
    if (opts->label_column < -1)
        return dt_err_set(DT_ERR_ARG, "%s: label column %d is invalid (-1 means the last one)",
                          path, opts->label_column);
    for (const char *w = " \t\r\v\f"; *w; w++)
        if (*w != r.delim) r.trim[strlen(r.trim)] = *w;

    dt_err cerr = dt__check_regular(path);
    if (cerr) return cerr;
    FILE *f = fopen(path, "rb");
    if (!f) return dt_err_set(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    dt_err err = DT_OK;
    dt_dataset *d = NULL;
    char *line = NULL;
    size_t line_cap = 0;
    int header_pending = opts->header;
    ssize_t len;
    while ((len = getline(&line, &line_cap, f)) >= 0) {
        r.line++;
        if (strlen(line) != (size_t)len) {
            err = dt_err_set(DT_ERR_FORMAT,
                             "%s:%lld: the line contains a NUL byte (not a text "
                             "file?)",
                             path, r.line);
            goto end;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        const char *p = line;
        while (*p && isspace((unsigned char)*p))
            p++;
        if (!*p) continue; /* blank */
        if (header_pending) {
            header_pending = 0;
            continue;
        }
        if ((err = csv_row(&r, line))) goto end;
    }
    if (ferror(f)) {
        err = dt_err_set(DT_ERR_IO, "%s:%lld: read error: %s", path, r.line, strerror(errno));
        goto end;
    }
    if (r.n == 0) {
        err = dt_err_set(DT_ERR_FORMAT, "%s: no data rows%s", path,
                         opts->header ? " (after the header)" : "");
        goto end;
    }

    d = calloc(1, sizeof *d);
    if (!d) {
        err = csv_nomem(&r);
        goto end;
    }
    d->n = r.n;
    d->sample = dt_shape_make(1, (int64_t[]){r.nfields - 1});
    d->x = r.x;
    r.x = NULL;
    if (r.regression) {
        d->targets = r.targets;
        r.targets = NULL;
        d->target_dim = 1;
    } else if ((err = csv_resolve_classes(&r, d))) {
        goto end;
    }
    *out = d;
    d = NULL;
end:
    dt_dataset_free(d);
    free(line);
    fclose(f);
    free(r.fields);
    free(r.x);
    free(r.targets);
    free(r.text);
    free(r.text_off);
    return err;
}
