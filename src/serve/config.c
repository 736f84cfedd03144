/*
 * config.c - --model_config_file: TF Serving's ModelServerConfig in protobuf text format.
 *
 *   model_config_list {
 *     config {
 *       name: 'fashion'
 *       base_path: '/models/fashion'
 *       model_platform: 'tensorflow'
 *       model_version_policy { latest { num_versions: 2 } }   # or all {} / specific { versions: 3 }
 *       version_labels { key: 'stable' value: 3 }
 *     }
 *   }
 *
 * The reader knows the text format's tokens (names, strings in ' or " with C escapes,
 * integers, { } or < >, optional : after a name, optional , or ; after a field, # comments)
 * and these fields; anything else is an error naming the file and line.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/file-impl.h"
#include "serve/serve-impl.h"

typedef enum { T_END, T_NAME, T_STRING, T_NUMBER, T_OPEN, T_CLOSE, T_COLON, T_SEP } tok_kind;

typedef struct lexer {
    const char *path, *s, *end;
    int line;
    tok_kind kind;
    char text[4096];
    int tline;
} lexer;

static dt_err lex_err(const lexer *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static dt_err lex_err(const lexer *l, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return dt_err_set(DT_ERR_SPEC, "%s:%d: %s", l->path, l->tline, msg);
}

static dt_err next(lexer *l) {
    for (;;) {
        while (l->s < l->end && isspace((unsigned char)*l->s))
            if (*l->s++ == '\n') l->line++;
        if (l->s < l->end && *l->s == '#') {
            while (l->s < l->end && *l->s != '\n')
                l->s++;
            continue;
        }
        break;
    }
    l->tline = l->line;
    l->text[0] = 0;
    if (l->s >= l->end) return l->kind = T_END, DT_OK;
    char c = *l->s;
    if (c == '{' || c == '<') return l->s++, l->kind = T_OPEN, DT_OK;
    if (c == '}' || c == '>') return l->s++, l->kind = T_CLOSE, DT_OK;
    if (c == ':') return l->s++, l->kind = T_COLON, DT_OK;
    if (c == ',' || c == ';') return l->s++, l->kind = T_SEP, DT_OK;
    if (c == '\'' || c == '"') {
        char q = *l->s++;
        size_t n = 0;
        while (l->s < l->end && *l->s != q && *l->s != '\n') {
            char ch = *l->s++;
            if (ch == '\\' && l->s < l->end) {
                ch = *l->s++;
                if (ch == 'n') ch = '\n';
                else if (ch == 't') ch = '\t';
            }
            if (n + 1 >= sizeof l->text) return lex_err(l, "string too long");
            l->text[n++] = ch;
        }
        if (l->s >= l->end || *l->s != q) return lex_err(l, "string not closed");
        l->s++;
        l->text[n] = 0;
        return l->kind = T_STRING, DT_OK;
    }
    if (isalnum((unsigned char)c) || c == '_' || c == '-' || c == '+') {
        size_t n = 0;
        while (l->s < l->end && (isalnum((unsigned char)*l->s) || strchr("_-+.", *l->s))) {
            if (n + 1 >= sizeof l->text) return lex_err(l, "token too long");
            l->text[n++] = *l->s++;
        }
        l->text[n] = 0;
        l->kind = (isdigit((unsigned char)c) || c == '-' || c == '+') ? T_NUMBER : T_NAME;
        return DT_OK;
    }
    return lex_err(l, "unexpected character '%c'", c);
}

/* After a field name: ':' then a scalar; returns it in l->text (kind STRING/NUMBER/NAME). */
static dt_err scalar(lexer *l, const char *field) {
    dt_err e = next(l);
    if (e) return e;
    if (l->kind == T_COLON && (e = next(l))) return e;
    if (l->kind != T_STRING && l->kind != T_NUMBER && l->kind != T_NAME)
        return lex_err(l, "%s: expected a value", field);
    return DT_OK;
}

/* After a field name: optional ':' then '{'. */
static dt_err open_msg(lexer *l, const char *field) {
    dt_err e = next(l);
    if (e) return e;
    if (l->kind == T_COLON && (e = next(l))) return e;
    if (l->kind != T_OPEN) return lex_err(l, "%s: expected '{'", field);
    return DT_OK;
}

/* The next field name of a message, or 0 at its '}' (top: at the end). */
static dt_err field(lexer *l, int top, int *more) {
    dt_err e = next(l);
    if (e) return e;
    if (l->kind == T_SEP && (e = next(l))) return e;
    if (l->kind == (top ? T_END : T_CLOSE)) return *more = 0, DT_OK;
    if (l->kind == T_END) return lex_err(l, "missing '}'");
    if (l->kind != T_NAME) return lex_err(l, "expected a field name, got '%s'", l->text);
    *more = 1;
    return DT_OK;
}

static dt_err integer(lexer *l, const char *what, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(l->text, &end, 10);
    if (l->kind != T_NUMBER || *end || errno || v < lo || v > hi)
        return lex_err(l, "%s: expected an integer in [%lld, %lld], got '%s'", what,
                       (long long)lo, (long long)hi, l->text);
    *out = v;
    return DT_OK;
}

static dt_err skip_msg(lexer *l) {
    int depth = 1;
    while (depth > 0) {
        dt_err e = next(l);
        if (e) return e;
        if (l->kind == T_END) return lex_err(l, "missing '}'");
        depth += l->kind == T_OPEN ? 1 : l->kind == T_CLOSE ? -1 : 0;
    }
    return DT_OK;
}

static dt_err policy(lexer *l, dt__sv_model_conf *m) {
    int more = 0;
    dt_err e;
    while (!(e = field(l, 0, &more)) && more) {
        char name[64];
        snprintf(name, sizeof name, "%.63s", l->text);
        if ((e = open_msg(l, name))) return e;
        if (!strcmp(name, "latest")) {
            m->policy = DT__SV_POLICY_LATEST;
            while (!(e = field(l, 0, &more)) && more) {
                if (strcmp(l->text, "num_versions"))
                    return lex_err(l, "latest: unknown field '%s' (num_versions)", l->text);
                int64_t n = 0;
                if ((e = scalar(l, "num_versions")) ||
                    (e = integer(l, "num_versions", 1, 1000, &n)))
                    return e;
                m->latest_n = (int)n;
            }
        } else if (!strcmp(name, "all")) {
            m->policy = DT__SV_POLICY_ALL;
            if ((e = skip_msg(l))) return e;
        } else if (!strcmp(name, "specific")) {
            m->policy = DT__SV_POLICY_SPECIFIC;
            while (!(e = field(l, 0, &more)) && more) {
                if (strcmp(l->text, "versions"))
                    return lex_err(l, "specific: unknown field '%s' (versions)", l->text);
                if (m->nspecific == DT__SV_MAX_SPECIFIC)
                    return lex_err(l, "specific: at most %d versions", DT__SV_MAX_SPECIFIC);
                if ((e = scalar(l, "versions")) ||
                    (e = integer(l, "versions", 0, INT64_MAX, &m->specific[m->nspecific])))
                    return e;
                m->nspecific++;
            }
            if (!e && m->nspecific == 0) return lex_err(l, "specific: no versions");
        } else {
            return lex_err(l, "model_version_policy: unknown policy '%s' (latest, all, specific)",
                           name);
        }
        if (e) return e;
    }
    return e;
}

static dt_err label(lexer *l, dt__sv_model_conf *m) {
    if (m->nlabels == DT__SV_MAX_LABELS)
        return lex_err(l, "version_labels: at most %d labels", DT__SV_MAX_LABELS);
    int more = 0, has_key = 0, has_value = 0;
    dt_err e;
    while (!(e = field(l, 0, &more)) && more) {
        if (!strcmp(l->text, "key")) {
            if ((e = scalar(l, "key"))) return e;
            if (!l->text[0] || strlen(l->text) >= sizeof m->label_names[0] || strpbrk(l->text, "/:"))
                return lex_err(l, "version_labels: key '%s' must be 1-63 bytes without '/' or ':'",
                               l->text);
            snprintf(m->label_names[m->nlabels], sizeof m->label_names[0], "%.63s", l->text);
            has_key = 1;
        } else if (!strcmp(l->text, "value")) {
            if ((e = scalar(l, "value")) ||
                (e = integer(l, "value", 0, INT64_MAX, &m->label_versions[m->nlabels])))
                return e;
            has_value = 1;
        } else {
            return lex_err(l, "version_labels: unknown field '%s' (key, value)", l->text);
        }
    }
    if (e) return e;
    if (!has_key || !has_value) return lex_err(l, "version_labels: needs key and value");
    m->nlabels++;
    return DT_OK;
}

static dt_err config(lexer *l, dt__sv_model_conf *m, int line) {
    int more = 0;
    dt_err e;
    m->latest_n = 1;
    while (!(e = field(l, 0, &more)) && more) {
        char name[64];
        snprintf(name, sizeof name, "%.63s", l->text);
        if (!strcmp(name, "name") || !strcmp(name, "base_path") ||
            !strcmp(name, "model_platform")) {
            if ((e = scalar(l, name))) return e;
            if (!strcmp(name, "name")) {
                if (!l->text[0] || strlen(l->text) >= sizeof m->name || strpbrk(l->text, "/:"))
                    return lex_err(l, "name: '%s' must be 1-255 bytes without '/' or ':'",
                                   l->text);
                snprintf(m->name, sizeof m->name, "%.255s", l->text);
            } else if (!strcmp(name, "base_path")) {
                if (!l->text[0] || strlen(l->text) >= sizeof m->base_path)
                    return lex_err(l, "base_path: must be a path");
                snprintf(m->base_path, sizeof m->base_path, "%s", l->text);
            } /* model_platform: any ('tensorflow' in TF Serving's files) */
        } else if (!strcmp(name, "model_version_policy")) {
            if ((e = open_msg(l, name)) || (e = policy(l, m))) return e;
        } else if (!strcmp(name, "version_labels")) {
            if ((e = open_msg(l, name)) || (e = label(l, m))) return e;
        } else if (!strcmp(name, "logging_config")) {
            if ((e = open_msg(l, name)) || (e = skip_msg(l))) return e;
        } else {
            return lex_err(l, "config: unknown field '%s'", name);
        }
    }
    if (e) return e;
    if (!m->name[0] || !m->base_path[0])
        return dt_err_set(DT_ERR_SPEC, "%s:%d: config: name and base_path are required", l->path,
                          line);
    return DT_OK;
}

dt_err dt__sv_config_load(const char *path, dt__sv_opts *opts) {
    char *text = NULL;
    size_t len = 0;
    dt_err e = dt__read_file(path, &text, &len);
    if (e) return e;
    lexer l = {.path = path, .s = text, .end = text + len, .line = 1};
    int more = 0, seen_list = 0;
    while (!(e = field(&l, 1, &more)) && more) {
        if (strcmp(l.text, "model_config_list")) {
            e = lex_err(&l, "unknown field '%s' (expected model_config_list)", l.text);
            break;
        }
        seen_list = 1;
        if ((e = open_msg(&l, "model_config_list"))) break;
        while (!(e = field(&l, 0, &more)) && more) {
            if (strcmp(l.text, "config")) {
                e = lex_err(&l, "model_config_list: unknown field '%s' (config)", l.text);
                break;
            }
            int line = l.tline;
            if ((e = open_msg(&l, "config"))) break;
            dt__sv_model_conf *m = realloc(opts->models, (size_t)(opts->nmodels + 1) * sizeof *m);
            if (!m) {
                e = dt_err_set(DT_ERR_NOMEM, "out of memory");
                break;
            }
            opts->models = m;
            memset(&m[opts->nmodels], 0, sizeof *m);
            if ((e = config(&l, &m[opts->nmodels], line))) break;
            for (int i = 0; i < opts->nmodels; i++)
                if (!strcmp(m[i].name, m[opts->nmodels].name)) {
                    e = dt_err_set(DT_ERR_SPEC, "%s:%d: config: model '%s' named twice", path,
                                   line, m[i].name);
                    break;
                }
            if (e) break;
            opts->nmodels++;
        }
        if (e) break;
    }
    free(text);
    if (!e && (!seen_list || opts->nmodels == 0))
        e = dt_err_set(DT_ERR_SPEC, "%s: no model_config_list with a config in it", path);
    return e;
}

/* --batching_parameters_file: BatchingParameters in text format, e.g.
 *   max_batch_size { value: 128 }  batch_timeout_micros { value: 0 }  num_batch_threads { value: 2 }
 * Fields TF Serving has that do not apply here (max_enqueued_batches, allowed_batch_sizes,
 * pad_variable_length_inputs, ...) are accepted and ignored. */
dt_err dt__sv_batching_load(const char *path, dt__sv_opts *opts) {
    char *text = NULL;
    size_t len = 0;
    dt_err e = dt__read_file(path, &text, &len);
    if (e) return e;
    lexer l = {.path = path, .s = text, .end = text + len, .line = 1};
    int more = 0;
    while (!(e = field(&l, 1, &more)) && more) {
        char name[64];
        snprintf(name, sizeof name, "%.63s", l.text);
        int64_t *dst = NULL, lo = 0, hi = 0, v = 0;
        int64_t max_batch = opts->max_batch_size, threads = opts->batch_threads;
        if (!strcmp(name, "max_batch_size")) dst = &max_batch, lo = 1, hi = 1 << 20;
        else if (!strcmp(name, "batch_timeout_micros")) dst = &opts->batch_timeout_us, lo = 0, hi = 10000000;
        else if (!strcmp(name, "num_batch_threads")) dst = &threads, lo = 1, hi = 256;
        if ((e = open_msg(&l, name))) break;
        if (!dst) {
            if ((e = skip_msg(&l))) break;
            continue;
        }
        while (!(e = field(&l, 0, &more)) && more) {
            if (strcmp(l.text, "value")) {
                e = lex_err(&l, "%s: unknown field '%s' (value)", name, l.text);
                break;
            }
            if ((e = scalar(&l, "value")) || (e = integer(&l, name, lo, hi, &v))) break;
            *dst = v;
        }
        if (e) break;
        opts->max_batch_size = (int)max_batch;
        opts->batch_threads = (int)threads;
    }
    free(text);
    return e;
}
