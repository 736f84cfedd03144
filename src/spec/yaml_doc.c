/*
 * yaml_doc.c - typed, line-aware access to YAML documents (see yaml_doc-impl.h).
 *
 * Design: libyaml does the parsing (yaml_parser_load builds one document's node graph at a
 * time); this file only walks the graph. A stream owns a private copy of the input, so the
 * parser never reads memory the caller might free, and reader errors (bad UTF-8), which
 * libyaml reports as a byte offset, can be turned into a line by counting newlines. A
 * document owns its own copy of the file name so that it outlives its stream.
 *
 * Aliases are resolved by libyaml into shared nodes (never copied), so an "exponential"
 * alias bomb costs nothing here; accessors only descend where the caller asks, so a cyclic
 * alias cannot make them loop. Before a document is loaded, a pass over its events refuses
 * nesting deeper than DT__YDEPTH_MAX: libyaml's scanner looks at every open flow level for
 * each token, so deep nesting costs time quadratic in its depth (and the pass stops at the
 * limit, after a few hundred tokens).
 *
 * Every failing accessor records exactly one message via dt_err_set and returns
 * DT_ERR_SPEC; no accessor allocates, so there is nothing to release on an error path.
 */
#include "spec/yaml_doc-impl.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRMSG_MAX 1024

struct dt__ystream {
    yaml_parser_t parser;
    unsigned char *buf; /* the whole input (owned) */
    size_t len;
    char *name; /* for messages (owned) */
    int ndocs;  /* documents handed out so far */
    int done;   /* end of stream reached */
    dt_err err; /* sticky error after a failed load */
    char errmsg[ERRMSG_MAX];
};

struct dt__ydoc {
    yaml_document_t doc;
    char *name; /* owned copy of the stream's name */
    int index;
};

/* ---- small helpers ---- */

static int node_line(const yaml_node_t *n) {
    size_t l = n->start_mark.line + 1;
    return l > INT_MAX ? INT_MAX : (int)l;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* dst = parent + sep + key (or key alone when parent is empty), truncated to fit. */
static void path_join(char *dst, const char *parent, const char *sep, const char *key,
                      size_t keylen) {
    size_t cap = DT__YPATH_MAX - 1, n = 0;
    size_t pl = strlen(parent);
    if (pl > cap) pl = cap;
    memmove(dst, parent, pl); /* dst may be parent */
    n = pl;
    if (pl > 0) {
        size_t sl = strlen(sep);
        if (sl > cap - n) sl = cap - n;
        memcpy(dst + n, sep, sl);
        n += sl;
    }
    if (keylen > cap - n) keylen = cap - n;
    for (size_t i = 0; i < keylen; i++) { /* keep messages on one printable line */
        unsigned char c = (unsigned char)key[i];
        dst[n + i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    n += keylen;
    dst[n] = '\0';
}

static int scalar_is_plain(const yaml_node_t *n) {
    return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static int scalar_is_null(const yaml_node_t *n) {
    if (!scalar_is_plain(n)) return 0;
    const char *s = (const char *)n->data.scalar.value;
    return !strcmp(s, "") || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

/* 'text' with control characters replaced and long text shortened at a UTF-8 boundary. */
static const char *quote_text(const unsigned char *s, size_t len, char *buf, size_t cap) {
    enum { SHOW = 40 };
    size_t show = len, o = 0;
    int cut = 0;
    if (show > SHOW) {
        show = SHOW;
        while (show > 0 && (s[show] & 0xC0) == 0x80)
            show--;
        cut = 1;
    }
    if (cap < SHOW + 8) { /* callers pass >= 64; be safe anyway */
        snprintf(buf, cap, "a string");
        return buf;
    }
    buf[o++] = '\'';
    for (size_t i = 0; i < show; i++)
        buf[o++] = (s[i] < 0x20 || s[i] == 0x7f) ? '?' : (char)s[i];
    if (cut) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o++] = '\'';
    buf[o] = '\0';
    return buf;
}

/* ---- streams ---- */

static dt_err stream_init(dt__ystream **out, unsigned char *buf, size_t len, const char *name) {
    dt__ystream *s = calloc(1, sizeof *s);
    if (!s) {
        free(buf);
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", name);
    }
    s->buf = buf;
    s->len = len;
    s->name = dup_str(name);
    if (!s->name || !yaml_parser_initialize(&s->parser)) {
        free(s->name);
        free(s->buf);
        free(s);
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", name);
    }
    yaml_parser_set_input_string(&s->parser, s->buf, s->len);
    *out = s;
    return DT_OK;
}

dt_err dt__ystream_open_mem(dt__ystream **out, const char *text, size_t len, const char *name) {
    *out = NULL;
    if (!name) name = "<string>";
    unsigned char *buf = malloc(len ? len : 1);
    if (!buf) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", name);
    if (len) memcpy(buf, text, len);
    return stream_init(out, buf, len, name);
}

dt_err dt__ystream_open_file(dt__ystream **out, const char *path) {
    *out = NULL;
    dt_err e = DT_OK;
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return dt_err_set(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    for (;;) {
        if (len == cap) {
            if (cap >= DT__YFILE_MAX) {
                e = dt_err_set(DT_ERR_IO, "%s: file is larger than %d bytes", path, DT__YFILE_MAX);
                goto fail;
            }
            size_t ncap = cap ? cap * 2 : 4096;
            if (ncap > DT__YFILE_MAX) ncap = DT__YFILE_MAX;
            unsigned char *nb = realloc(buf, ncap + 1); /* +1: room to detect oversize */
            if (!nb) {
                e = dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        e = dt_err_set(DT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    if (!buf && !(buf = malloc(1))) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", path);
    return stream_init(out, buf, len, path);
fail:
    fclose(f);
    free(buf);
    return e;
}

void dt__ystream_free(dt__ystream *s) {
    if (!s) return;
    yaml_parser_delete(&s->parser);
    free(s->buf);
    free(s->name);
    free(s);
}

const char *dt__ystream_name(const dt__ystream *s) {
    return s->name;
}

/* Record the parser's error as the stream's sticky error. */
static dt_err stream_fail(dt__ystream *s) {
    const yaml_parser_t *p = &s->parser;
    if (p->error == YAML_MEMORY_ERROR) {
        s->err = dt_err_set(DT_ERR_NOMEM, "%s: out of memory while parsing YAML", s->name);
    } else {
        size_t line;
        if (p->error == YAML_READER_ERROR) { /* only a byte offset is known */
            size_t off = p->problem_offset < s->len ? p->problem_offset : s->len;
            line = 1;
            for (size_t i = 0; i < off; i++)
                line += s->buf[i] == '\n';
        } else {
            line = p->problem_mark.line + 1;
        }
        const char *problem = p->problem ? p->problem : "unknown error";
        if (p->context)
            s->err = dt_err_set(DT_ERR_SPEC, "%s:%zu: YAML syntax error: %s (%s at line %zu)",
                                s->name, line, problem, p->context, p->context_mark.line + 1);
        else
            s->err =
                dt_err_set(DT_ERR_SPEC, "%s:%zu: YAML syntax error: %s", s->name, line, problem);
    }
    snprintf(s->errmsg, sizeof s->errmsg, "%s", dt_errmsg());
    return s->err;
}

/* Refuse nesting deeper than DT__YDEPTH_MAX in the document the next load reads, from the
 * stream's events (a syntax error stops the pass: the load reports it as usual; documents
 * after it are not looked at). */
static dt_err check_depth(dt__ystream *s) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", s->name);
    yaml_parser_set_input_string(&p, s->buf, s->len);
    int depth = 0, doc = 0;
    dt_err e = DT_OK;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) break;
        yaml_event_type_t t = ev.type;
        size_t line = ev.start_mark.line + 1;
        yaml_event_delete(&ev);
        if (t == YAML_STREAM_END_EVENT || (t == YAML_DOCUMENT_END_EVENT && ++doc > s->ndocs))
            break;
        if (doc < s->ndocs) continue; /* an earlier document, loaded already */
        if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
            if (++depth > DT__YDEPTH_MAX) {
                e = dt_err_set(DT_ERR_SPEC, "%s:%zu: YAML nesting deeper than %d levels", s->name,
                               line, DT__YDEPTH_MAX);
                break;
            }
        } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
            depth--;
        }
    }
    yaml_parser_delete(&p);
    return e;
}

dt_err dt__ystream_next(dt__ystream *s, dt__ydoc **out) {
    *out = NULL;
    if (s->err) return dt_err_set(s->err, "%s", s->errmsg);
    if (s->done) return DT_OK;
    {
        dt_err e = check_depth(s);
        if (e) {
            s->err = e;
            snprintf(s->errmsg, sizeof s->errmsg, "%s", dt_errmsg());
            return e;
        }
    }
    dt__ydoc *d = calloc(1, sizeof *d);
    if (!d || !(d->name = dup_str(s->name))) {
        free(d);
        return dt_err_set(DT_ERR_NOMEM, "%s: out of memory", s->name);
    }
    if (!yaml_parser_load(&s->parser, &d->doc)) {
        free(d->name);
        free(d);
        return stream_fail(s);
    }
    if (!yaml_document_get_root_node(&d->doc)) { /* end of stream */
        yaml_document_delete(&d->doc);
        free(d->name);
        free(d);
        s->done = 1;
        return DT_OK;
    }
    d->index = s->ndocs++;
    *out = d;
    return DT_OK;
}

void dt__ydoc_free(dt__ydoc *d) {
    if (!d) return;
    yaml_document_delete(&d->doc);
    free(d->name);
    free(d);
}

int dt__ydoc_index(const dt__ydoc *d) {
    return d->index;
}

void dt__ydoc_root(dt__ydoc *d, const char *path, dt__yval *out) {
    memset(out, 0, sizeof *out);
    out->doc = d;
    out->node = yaml_document_get_root_node(&d->doc);
    out->line = out->node ? node_line(out->node) : 1;
    out->decl_line = out->line;
    path_join(out->path, "", "", path ? path : "", path ? strlen(path) : 0);
}

/* ---- errors ---- */

static dt_err yerr_v(const dt__yval *v, int line, const char *fmt, va_list ap) {
    char msg[ERRMSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (v->path[0])
        return dt_err_set(DT_ERR_SPEC, "%s:%d: %s: %s", v->doc->name, line, v->path, msg);
    return dt_err_set(DT_ERR_SPEC, "%s:%d: %s", v->doc->name, line, msg);
}

dt_err dt__yerr(const dt__yval *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dt_err e = yerr_v(v, v->line, fmt, ap);
    va_end(ap);
    return e;
}

dt_err dt__yerr_line(const dt__yval *v, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dt_err e = yerr_v(v, line, fmt, ap);
    va_end(ap);
    return e;
}

const char *dt__yval_describe(const dt__yval *v, char *buf, size_t len) {
    const yaml_node_t *n = v->node;
    if (!n || scalar_is_null(n))
        snprintf(buf, len, "nothing");
    else if (n->type == YAML_SEQUENCE_NODE)
        snprintf(buf, len, "a list");
    else if (n->type == YAML_MAPPING_NODE)
        snprintf(buf, len, "a mapping");
    else
        quote_text(n->data.scalar.value, n->data.scalar.length, buf, len);
    return buf;
}

/* "expected WHAT, got DESCRIPTION" at v. */
static dt_err expected(const dt__yval *v, const char *what) {
    char got[80];
    return dt__yerr(v, "expected %s, got %s", what, dt__yval_describe(v, got, sizeof got));
}

/* ---- node types ---- */

int dt__yval_present(const dt__yval *v) {
    return v->node != NULL;
}

int dt__yval_is_null(const dt__yval *v) {
    return !v->node || scalar_is_null(v->node);
}

int dt__yval_is_map(const dt__yval *v) {
    return v->node && v->node->type == YAML_MAPPING_NODE;
}

int dt__yval_is_seq(const dt__yval *v) {
    return v->node && v->node->type == YAML_SEQUENCE_NODE;
}

int dt__yval_is_scalar(const dt__yval *v) {
    return v->node && v->node->type == YAML_SCALAR_NODE && !scalar_is_null(v->node);
}

dt_err dt__yexpect_map(const dt__yval *v) {
    return dt__yval_is_map(v) ? DT_OK : expected(v, "a mapping");
}

dt_err dt__yexpect_seq(const dt__yval *v) {
    return dt__yval_is_seq(v) ? DT_OK : expected(v, "a list");
}

/* ---- mappings ---- */

static void child(const dt__yval *parent, yaml_node_t *node, int decl_line, dt__yval *out) {
    out->doc = parent->doc;
    out->node = node;
    out->line = node ? node_line(node) : parent->decl_line;
    out->decl_line = node ? decl_line : parent->decl_line;
}

int dt__ymap_size(const dt__yval *m) {
    if (!dt__yval_is_map(m)) return 0;
    return (int)(m->node->data.mapping.pairs.top - m->node->data.mapping.pairs.start);
}

void dt__ymap_entry(const dt__yval *m, int i, const char **key, int *key_line, dt__yval *val) {
    yaml_node_pair_t *p = &m->node->data.mapping.pairs.start[i];
    yaml_node_t *k = yaml_document_get_node(&m->doc->doc, p->key);
    yaml_node_t *v = yaml_document_get_node(&m->doc->doc, p->value);
    int kl = node_line(k);
    const char *ks = k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : NULL;
    if (key) *key = ks;
    if (key_line) *key_line = kl;
    child(m, v, kl, val);
    if (ks)
        path_join(val->path, m->path, ".", ks, strlen(ks));
    else
        path_join(val->path, m->path, ".", "?", 1);
}

int dt__ymap_get(const dt__yval *m, const char *key, dt__yval *out) {
    size_t kl = strlen(key);
    int n = dt__ymap_size(m);
    for (int i = 0; i < n; i++) {
        yaml_node_pair_t *p = &m->node->data.mapping.pairs.start[i];
        yaml_node_t *k = yaml_document_get_node(&m->doc->doc, p->key);
        if (k->type == YAML_SCALAR_NODE && k->data.scalar.length == kl &&
            !memcmp(k->data.scalar.value, key, kl)) {
            dt__ymap_entry(m, i, NULL, NULL, out);
            return 1;
        }
    }
    child(m, NULL, 0, out);
    path_join(out->path, m->path, ".", key, kl);
    return 0;
}

dt_err dt__ymap_require(const dt__yval *m, const char *key, dt__yval *out) {
    if (dt__ymap_get(m, key, out)) return DT_OK;
    return dt__yerr(out, "required field missing");
}

dt_err dt__ymap_check_keys(const dt__yval *m, const char *const *allowed, const char *what) {
    int n = dt__ymap_size(m);
    for (int i = 0; i < n; i++) {
        yaml_node_pair_t *p = &m->node->data.mapping.pairs.start[i];
        yaml_node_t *k = yaml_document_get_node(&m->doc->doc, p->key);
        char q[80];
        if (k->type != YAML_SCALAR_NODE)
            return dt__yerr_line(m, node_line(k), "a key must be a plain string, got %s",
                                 k->type == YAML_MAPPING_NODE ? "a mapping" : "a list");
        const char *ks = (const char *)k->data.scalar.value;
        size_t kl = k->data.scalar.length;
        dt__yval kv = {.doc = m->doc, .line = node_line(k), .decl_line = node_line(k)};
        path_join(kv.path, m->path, ".", ks, kl); /* errors name the key's own path */
        quote_text(k->data.scalar.value, kl, q, sizeof q);
        for (int j = 0; j < i; j++) {
            yaml_node_t *o =
                yaml_document_get_node(&m->doc->doc, m->node->data.mapping.pairs.start[j].key);
            if (o->type == YAML_SCALAR_NODE && o->data.scalar.length == kl &&
                !memcmp(o->data.scalar.value, ks, kl))
                return dt__yerr(&kv, "duplicate key %s (first at line %d)", q, node_line(o));
        }
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = strlen(*a) == kl && !memcmp(*a, ks, kl);
        if (ok) continue;
        char list[512];
        size_t o = 0;
        list[0] = '\0';
        for (const char *const *a = allowed; *a; a++) {
            int w = snprintf(list + o, sizeof list - o, "%s%s", a == allowed ? "" : ", ", *a);
            if (w < 0 || (size_t)w >= sizeof list - o) break;
            o += (size_t)w;
        }
        return dt__yerr(&kv, "unknown key %s%s%s (allowed: %s)", q, what ? " for " : "",
                        what ? what : "", list);
    }
    return DT_OK;
}

/* ---- sequences ---- */

int dt__yseq_size(const dt__yval *s) {
    if (!dt__yval_is_seq(s)) return 0;
    return (int)(s->node->data.sequence.items.top - s->node->data.sequence.items.start);
}

void dt__yseq_item(const dt__yval *s, int i, dt__yval *out) {
    yaml_node_t *n = yaml_document_get_node(&s->doc->doc, s->node->data.sequence.items.start[i]);
    child(s, n, node_line(n), out);
    char idx[24];
    int w = snprintf(idx, sizeof idx, "[%d]", i);
    path_join(out->path, s->path, "", idx, (size_t)w);
}

/* ---- scalars ---- */

dt_err dt__yget_str(const dt__yval *v, const char **out) {
    if (!dt__yval_is_scalar(v)) return expected(v, "a string");
    const yaml_node_t *n = v->node;
    if (memchr(n->data.scalar.value, '\0', n->data.scalar.length))
        return dt__yerr(v, "a string must not contain a NUL character");
    *out = (const char *)n->data.scalar.value;
    return DT_OK;
}

dt_err dt__yget_strbuf(const dt__yval *v, char *dst, size_t cap) {
    const char *s = NULL;
    dt_err e = dt__yget_str(v, &s);
    if (e) return e;
    size_t n = strlen(s);
    if (n >= cap) return dt__yerr(v, "too long (%zu bytes, at most %zu)", n, cap - 1);
    memcpy(dst, s, n + 1);
    return DT_OK;
}

/* The plain scalar text of v, or NULL when v is not a plain non-null scalar. */
static const char *plain_text(const dt__yval *v) {
    if (!dt__yval_is_scalar(v) || !scalar_is_plain(v->node)) return NULL;
    return (const char *)v->node->data.scalar.value;
}

static int is_decimal_int(const char *s) {
    if (*s == '+' || *s == '-') s++;
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

static void describe_int(char *buf, size_t len, int64_t lo) {
    if (lo == 1)
        snprintf(buf, len, "a positive integer");
    else if (lo == 0)
        snprintf(buf, len, "a non-negative integer");
    else if (lo == INT64_MIN)
        snprintf(buf, len, "an integer");
    else
        snprintf(buf, len, "an integer >= %lld", (long long)lo);
}

dt_err dt__yget_i64(const dt__yval *v, int64_t lo, int64_t hi, int64_t *out) {
    char what[96];
    describe_int(what, sizeof what, lo);
    const char *s = plain_text(v);
    if (!s || !is_decimal_int(s)) return expected(v, what);
    errno = 0;
    long long x = strtoll(s, NULL, 10);
    int over = errno == ERANGE && x > 0, under = errno == ERANGE && x < 0;
    if (under || x < lo) return expected(v, what);
    if (over || x > hi) {
        size_t n = strlen(what);
        snprintf(what + n, sizeof what - n, " at most %lld", (long long)hi);
        return expected(v, what);
    }
    *out = x;
    return DT_OK;
}

dt_err dt__yget_int(const dt__yval *v, int lo, int hi, int *out) {
    int64_t x;
    dt_err e = dt__yget_i64(v, lo, hi, &x);
    if (!e) *out = (int)x;
    return e;
}

dt_err dt__yget_u64(const dt__yval *v, uint64_t *out) {
    const char *s = plain_text(v);
    if (!s || !is_decimal_int(s) || *s == '-') return expected(v, "a non-negative integer");
    errno = 0;
    unsigned long long x = strtoull(s, NULL, 10);
    if (errno == ERANGE) return expected(v, "a non-negative integer at most 18446744073709551615");
    *out = x;
    return DT_OK;
}

static int is_decimal_number(const char *s) {
    int digits = 0;
    if (*s == '+' || *s == '-') s++;
    for (; *s >= '0' && *s <= '9'; s++)
        digits++;
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++)
            digits++;
    if (!digits) return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!(*s >= '0' && *s <= '9')) return 0;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    return *s == '\0';
}

static void describe_range(char *buf, size_t len, dt__yrange r) {
    int has_lo = isfinite(r.lo), has_hi = isfinite(r.hi);
    if (!has_lo && !has_hi)
        snprintf(buf, len, "a number");
    else if (has_lo && has_hi)
        snprintf(buf, len, "a number in %c%g, %g%c", r.lo_open ? '(' : '[', r.lo, r.hi,
                 r.hi_open ? ')' : ']');
    else if (has_lo && r.lo == 0)
        snprintf(buf, len, r.lo_open ? "a positive number" : "a non-negative number");
    else if (has_lo)
        snprintf(buf, len, "a number %s %g", r.lo_open ? ">" : ">=", r.lo);
    else
        snprintf(buf, len, "a number %s %g", r.hi_open ? "<" : "<=", r.hi);
}

dt_err dt__yget_f64(const dt__yval *v, dt__yrange r, double *out) {
    char what[96];
    describe_range(what, sizeof what, r);
    const char *s = plain_text(v);
    if (!s || !is_decimal_number(s)) return expected(v, what);
    double x = strtod(s, NULL);
    if (!isfinite(x) || x < r.lo || x > r.hi || (r.lo_open && x == r.lo) ||
        (r.hi_open && x == r.hi))
        return expected(v, what);
    *out = x;
    return DT_OK;
}

dt_err dt__yget_bool(const dt__yval *v, int *out) {
    static const char *const yes[] = {"true", "True", "TRUE"};
    static const char *const no[] = {"false", "False", "FALSE"};
    const char *s = plain_text(v);
    for (int i = 0; s && i < 3; i++) {
        if (!strcmp(s, yes[i])) return *out = 1, DT_OK;
        if (!strcmp(s, no[i])) return *out = 0, DT_OK;
    }
    return expected(v, "true or false");
}

dt_err dt__yget_enum(const dt__yval *v, const dt__yenum *table, int *out) {
    if (dt__yval_is_scalar(v)) {
        const yaml_node_t *n = v->node;
        for (const dt__yenum *t = table; t->name; t++)
            if (strlen(t->name) == n->data.scalar.length &&
                !memcmp(t->name, n->data.scalar.value, n->data.scalar.length))
                return *out = t->value, DT_OK;
    }
    char list[512] = "one of ";
    size_t o = strlen(list);
    for (const dt__yenum *t = table; t->name; t++) {
        int w = snprintf(list + o, sizeof list - o, "%s%s", t == table ? "" : ", ", t->name);
        if (w < 0 || (size_t)w >= sizeof list - o) break;
        o += (size_t)w;
    }
    return expected(v, list);
}

dt_err dt__yget_i64_list(const dt__yval *v, int min_n, int max_n, int64_t lo, int64_t hi,
                         int64_t *out, int *n) {
    char items[64], what[160];
    if (lo == 1)
        snprintf(items, sizeof items, "positive integers");
    else if (lo == 0)
        snprintf(items, sizeof items, "non-negative integers");
    else if (lo == INT64_MIN)
        snprintf(items, sizeof items, "integers");
    else
        snprintf(items, sizeof items, "integers >= %lld", (long long)lo);
    if (min_n == max_n)
        snprintf(what, sizeof what, "a list of %d %s", min_n, items);
    else
        snprintf(what, sizeof what, "a list of %d to %d %s", min_n, max_n, items);
    if (!dt__yval_is_seq(v)) return expected(v, what);
    int count = dt__yseq_size(v);
    if (count < min_n || count > max_n)
        return dt__yerr(v, "expected %s, got a list of %d", what, count);
    for (int i = 0; i < count; i++) {
        dt__yval it;
        dt__yseq_item(v, i, &it);
        dt_err e = dt__yget_i64(&it, lo, hi, &out[i]);
        if (e) return e;
    }
    *n = count;
    return DT_OK;
}

/* ---- YAML to JSON (Kubernetes objects, kubeconfig files) ---- */

/* A plain scalar's JSON type as sigs.k8s.io/yaml gives it for YAML 1.2's core schema: null,
 * booleans, decimal integers, floats; anything else (and every quoted scalar) a string. */
static json_t *scalar_json(const yaml_node_t *n) {
    const char *s = (const char *)n->data.scalar.value;
    if (!scalar_is_plain(n)) return json_stringn(s, n->data.scalar.length);
    if (scalar_is_null(n)) return json_null();
    /* YAML 1.1's booleans, as go-yaml v2 (under sigs.k8s.io/yaml) reads them */
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On",
                                      "ON", "y", "Y", NULL};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off",
                                     "OFF", "n", "N", NULL};
    for (int i = 0; yes[i]; i++)
        if (!strcmp(s, yes[i])) return json_true();
    for (int i = 0; no[i]; i++)
        if (!strcmp(s, no[i])) return json_false();
    char *end;
    errno = 0;
    /* YAML 1.1's other integer forms: 0644 is octal (420), 0x1F hex, 0o17 octal */
    const char *digits = s + (s[0] == '-' || s[0] == '+');
    int base = 10;
    if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X') && digits[2]) base = 16;
    else if (digits[0] == '0' && digits[1] == 'o' && digits[2]) base = 8;
    else if (digits[0] == '0' && digits[1] >= '0' && digits[1] <= '7') base = 8;
    if (base != 10) {
        unsigned long long u =
            strtoull(digits + (base == 8 && digits[1] != 'o' ? 1 : 2), &end, base);
        if (!*end && errno == 0 && u <= (unsigned long long)INT64_MAX)
            return json_integer(s[0] == '-' ? -(long long)u : (long long)u);
        errno = 0;
    }
    long long v = strtoll(s, &end, 10);
    if (*s && !*end && errno == 0 && (isdigit((unsigned char)s[0]) || s[0] == '-' || s[0] == '+'))
        return json_integer(v);
    double d = strtod(s, &end);
    if (*s && !*end && (isdigit((unsigned char)s[0]) || s[0] == '-' || s[0] == '+' || s[0] == '.') &&
        isfinite(d))
        return json_real(d);
    return json_stringn(s, n->data.scalar.length);
}

static json_t *node_json(yaml_document_t *doc, yaml_node_t *n, int depth) {
    if (!n || depth > 64) return NULL;
    if (n->type == YAML_SCALAR_NODE) return scalar_json(n);
    if (n->type == YAML_SEQUENCE_NODE) {
        json_t *a = json_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             a && it < n->data.sequence.items.top; it++) {
            json_t *v = node_json(doc, yaml_document_get_node(doc, *it), depth + 1);
            if (!v || json_array_append_new(a, v)) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    if (n->type != YAML_MAPPING_NODE) return NULL;
    json_t *o = json_object();
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; o && p < n->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        json_t *v = node_json(doc, yaml_document_get_node(doc, p->value), depth + 1);
        if (!k || k->type != YAML_SCALAR_NODE || !v) {
            json_decref(v);
            json_decref(o);
            return NULL;
        }
        if (json_object_set_new(o, (const char *)k->data.scalar.value, v)) { /* v is taken */
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

dt_err dt__yval_to_json(const dt__yval *v, json_t **out) {
    *out = v->node ? node_json(&v->doc->doc, v->node, 0) : json_null();
    if (!*out) return dt__yerr(v, "cannot be read as JSON (a key that is not a string, or nested too deep)");
    return DT_OK;
}
