/*
 * tensor_json.c - predict and classify request bodies to float tensors, and floats to JSON
 * as TF Serving writes them (FORMATS.md 2.2).
 *
 * Why not jansson: a request body is thousands of numbers that go straight into one float
 * buffer, and TF Serving accepts the NaN, Infinity and -Infinity tokens that strict JSON
 * parsers refuse. This reader parses a body in one pass into the buffer, infers the shape of
 * nested lists as it goes (a ragged list is an error), reads plain decimals exactly by the
 * fast path of Clinger's algorithm (strtod only when that cannot be exact), and reports
 * malformed JSON with the offset, as TF Serving (rapidjson) does.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve-impl.h"

#define MAX_DEPTH 16 /* nesting of a request body */

typedef struct reader {
    const char *s, *end, *start;
    char *err;
    size_t errlen;
    dt__sv_code code;
    /* the floats of the tensor being read */
    float *x;
    int64_t n, cap;
    int int_token; /* the last number read had no fraction or exponent */
} reader;

static dt__sv_code fail(reader *r, dt__sv_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dt__sv_code fail(reader *r, dt__sv_code code, const char *fmt, ...) {
    if (r->code) return r->code; /* the first error stands */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, r->errlen, fmt, ap);
    va_end(ap);
    r->code = code;
    return code;
}

static dt__sv_code syntax(reader *r, const char *what) {
    return fail(r, DT__SV_INVALID_ARGUMENT, "JSON Parse error: %s at offset: %lld", what,
                (long long)(r->s - r->start));
}

static void ws(reader *r) {
    while (r->s < r->end && (*r->s == ' ' || *r->s == '\n' || *r->s == '\r' || *r->s == '\t'))
        r->s++;
}

static int peek(reader *r) {
    ws(r);
    return r->s < r->end ? (unsigned char)*r->s : -1;
}

static int push(reader *r, float v) {
    if (r->n == r->cap) {
        int64_t cap = r->cap ? r->cap * 2 : 1024;
        float *x = realloc(r->x, (size_t)cap * sizeof *x);
        if (!x) return fail(r, DT__SV_RESOURCE_EXHAUSTED, "out of memory reading the request");
        r->x = x;
        r->cap = cap;
    }
    r->x[r->n++] = v;
    return 0;
}

/* ---- numbers ---- */

static const double pow10_exact[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int match_word(reader *r, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(r->end - r->s) >= n && !memcmp(r->s, w, n)) {
        r->s += n;
        return 1;
    }
    return 0;
}

/* A JSON number (or NaN / Infinity / -Infinity) at r->s; 0 and *out on success. */
static int read_number(reader *r, double *out) {
    const char *p = r->s, *e = r->end;
    int neg = 0;
    r->int_token = 0;
    if (p < e && *p == '-') neg = 1, p++;
    if (p < e && *p == 'I') {
        r->s = p;
        if (match_word(r, "Infinity")) {
            *out = neg ? -INFINITY : INFINITY;
            return 0;
        }
        return syntax(r, "Invalid value.");
    }
    if (!neg && p < e && *p == 'N') {
        if (match_word(r, "NaN")) {
            *out = NAN;
            return 0;
        }
        return syntax(r, "Invalid value.");
    }
    const char *digits = p;
    int int_token = 1;
    uint64_t mant = 0;
    int nd = 0, exp10 = 0, exact = 1;
    if (p < e && *p == '0') {
        p++;
    } else if (p < e && *p >= '1' && *p <= '9') {
        while (p < e && *p >= '0' && *p <= '9') {
            if (nd < 19) mant = mant * 10 + (uint64_t)(*p - '0'), nd++;
            else exp10++, exact = 0;
            p++;
        }
    } else {
        r->s = p;
        return syntax(r, "Invalid value.");
    }
    if (p < e && *p == '.') {
        int_token = 0;
        p++;
        if (p >= e || *p < '0' || *p > '9') {
            r->s = p;
            return syntax(r, "Missing fraction part in number.");
        }
        while (p < e && *p >= '0' && *p <= '9') {
            if (nd < 19) mant = mant * 10 + (uint64_t)(*p - '0'), nd++, exp10--;
            else if (*p != '0') exact = 0;
            p++;
        }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        int_token = 0;
        p++;
        int eneg = 0, ev = 0;
        if (p < e && (*p == '+' || *p == '-')) eneg = *p == '-', p++;
        if (p >= e || *p < '0' || *p > '9') {
            r->s = p;
            return syntax(r, "Missing exponent in number.");
        }
        while (p < e && *p >= '0' && *p <= '9') {
            if (ev < 100000) ev = ev * 10 + (*p - '0');
            p++;
        }
        exp10 += eneg ? -ev : ev;
    }
    (void)digits;
    r->int_token = int_token;
    if (exact && mant < (UINT64_C(1) << 53) && exp10 >= -22 && exp10 <= 22) {
        /* both operands exact: one correctly rounded operation (Clinger's fast path) */
        double v = (double)mant;
        v = exp10 < 0 ? v / pow10_exact[-exp10] : v * pow10_exact[exp10];
        *out = neg ? -v : v;
    } else {
        char buf[128];
        size_t n = (size_t)(p - r->s);
        if (n < sizeof buf) {
            memcpy(buf, r->s, n);
            buf[n] = 0;
            *out = strtod(buf, NULL);
        } else {
            char *tmp = strndup(r->s, n);
            if (!tmp) return fail(r, DT__SV_RESOURCE_EXHAUSTED, "out of memory");
            *out = strtod(tmp, NULL);
            free(tmp);
        }
        /* rapidjson refuses what does not fit a double (r->s: the number's start) */
        if (isinf(*out)) return syntax(r, "Number too big to be stored in double.");
    }
    r->s = p;
    return 0;
}

/* ---- skipping and strings ---- */

/* After an item of an array (close ']') or an object (close '}'): 1 when a ',' says another
 * follows, 0 when the close ends it (both taken), -1 on anything else (a syntax error, as
 * rapidjson words it). */
static int after_item(reader *r, int close) {
    int c = peek(r);
    if (c == ',' || c == close) {
        r->s++;
        return c == ',';
    }
    syntax(r, close == '}' ? "Missing a comma or '}' after an object member."
                           : "Missing a comma or ']' after an array element.");
    return -1;
}

static int skip_value(reader *r, int depth);

/* A string at r->s (after ws). dst (may be NULL) gets it unescaped, cut to cap-1 bytes. */
static int read_string(reader *r, char *dst, size_t cap) {
    if (r->s >= r->end || *r->s != '"') return syntax(r, "Invalid value.");
    r->s++;
    size_t n = 0;
    while (r->s < r->end && *r->s != '"') {
        char c = *r->s++;
        if ((unsigned char)c < 0x20) return syntax(r, "Invalid encoding in string.");
        if (c == '\\') {
            if (r->s >= r->end) break;
            char esc = *r->s++;
            switch (esc) {
            case '"': case '\\': case '/': c = esc; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u':
                for (int i = 0; i < 4; i++, r->s++)
                    if (r->s >= r->end || !strchr("0123456789abcdefABCDEF", *r->s) || !*r->s)
                        return syntax(r, "Incorrect hex digit after \\u escape in string.");
                c = '?'; /* names here are ASCII; anything else does not match one */
                break;
            default:
                r->s--;
                return syntax(r, "Invalid escape character in string.");
            }
        }
        if (dst && n + 1 < cap) dst[n] = c;
        n++;
    }
    if (r->s >= r->end) return syntax(r, "Missing a closing quotation mark in string.");
    r->s++;
    if (dst && cap) dst[n < cap ? n : cap - 1] = 0;
    return 0;
}

static int skip_value(reader *r, int depth) {
    if (depth > MAX_DEPTH) return fail(r, DT__SV_INVALID_ARGUMENT, "JSON nested too deep");
    int c = peek(r);
    if (c == '"') return read_string(r, NULL, 0);
    if (c == '{' || c == '[') {
        int close = c == '{' ? '}' : ']';
        r->s++;
        if (peek(r) == close) {
            r->s++;
            return 0;
        }
        for (;;) {
            if (close == '}') {
                if (peek(r) != '"') return syntax(r, "Missing a name for object member.");
                if (read_string(r, NULL, 0)) return r->code;
                if (peek(r) != ':') return syntax(r, "Missing a colon after a name of object member.");
                r->s++;
            }
            if (skip_value(r, depth + 1)) return r->code;
            int more = after_item(r, close);
            if (more < 0) return r->code;
            if (!more) return 0;
        }
    }
    if (match_word(r, "true") || match_word(r, "false") || match_word(r, "null")) return 0;
    double d;
    return read_number(r, &d);
}

/* What a JSON value that is not a number is, for the type error. */
static int not_a_float(reader *r) {
    const char *at = r->s;
    const char *type = *at == '"' ? "String" : *at == '{' ? "Object"
                       : (*at == 't' || *at == 'f') ? "Bool" : *at == 'n' ? "Null" : NULL;
    if (!type) return syntax(r, "Invalid value.");
    if (skip_value(r, 0)) return r->code;
    int len = (int)(r->s - at);
    return fail(r, DT__SV_INVALID_ARGUMENT,
                "JSON Value: %.*s%s Type: %s is not of expected type: float", len > 60 ? 60 : len,
                at, len > 60 ? "..." : "", type);
}

/* ---- tensors ---- */

/* A nested list of numbers (or one number) appended to r->x; its shape in *shape. */
typedef struct inferred {
    int ndim;
    int64_t dim[MAX_DEPTH];
    int seen[MAX_DEPTH]; /* a list at this depth was seen: its length is dim[depth] */
    int leaf_depth;      /* the depth numbers sit at; -1 until the first number */
} inferred;

static int read_tensor_at(reader *r, inferred *t, int depth) {
    if (depth >= MAX_DEPTH) return fail(r, DT__SV_INVALID_ARGUMENT, "tensor nested too deep");
    int c = peek(r);
    if (c == '[') {
        if (t->leaf_depth >= 0 && depth >= t->leaf_depth)
            return fail(r, DT__SV_INVALID_ARGUMENT,
                        "a list where a number was expected (at offset %lld): lists must be "
                        "nested the same everywhere", (long long)(r->s - r->start));
        r->s++;
        int64_t count = 0;
        if (peek(r) == ']') {
            r->s++;
        } else {
            for (;;) {
                if (read_tensor_at(r, t, depth + 1)) return r->code;
                count++;
                int more = after_item(r, ']');
                if (more < 0) return r->code;
                if (!more) break;
            }
        }
        if (!t->seen[depth]) {
            t->seen[depth] = 1;
            t->dim[depth] = count;
            if (depth + 1 > t->ndim) t->ndim = depth + 1;
        } else if (t->dim[depth] != count) {
            return fail(r, DT__SV_INVALID_ARGUMENT,
                        "lists of different lengths (%lld and %lld) at the same depth: the "
                        "tensor must be rectangular",
                        (long long)t->dim[depth], (long long)count);
        }
        if (count == 0 && t->leaf_depth < 0) t->leaf_depth = depth + 1;
        return 0;
    }
    if (c == '-' || c == 'N' || c == 'I' || (c >= '0' && c <= '9')) {
        if (t->leaf_depth < 0) t->leaf_depth = depth;
        if (depth != t->leaf_depth || (depth < MAX_DEPTH && t->seen[depth]))
            return fail(r, DT__SV_INVALID_ARGUMENT,
                        "a number where a list was expected (at offset %lld): lists must be "
                        "nested the same everywhere", (long long)(r->s - r->start));
        double d;
        const char *at = r->s;
        if (read_number(r, &d)) return r->code;
        /* TF Serving's IsLosslessDecimal<float>: an integer token (one that fits 64 bits)
         * beyond 2^24-1, or a finite number beyond the float range, is refused */
        int fits64 = d <= 18446744073709551615.0 && d >= -9223372036854775808.0;
        if (isfinite(d) && ((r->int_token && fits64) ? fabs(d) > 16777215.0
                                                      : fabs(d) > (double)FLT_MAX)) {
            int len = (int)(r->s - at);
            return fail(r, DT__SV_INVALID_ARGUMENT,
                        "Cannot convert JSON value: %.*s%s to float without loss of precision.",
                        len > 60 ? 60 : len, at, len > 60 ? "..." : "");
        }
        return push(r, (float)d);
    }
    if (c < 0) return syntax(r, "Invalid value.");
    return not_a_float(r);
}

static int read_tensor(reader *r, dt_shape *shape) {
    inferred t;
    memset(&t, 0, sizeof t);
    t.leaf_depth = -1;
    if (read_tensor_at(r, &t, 0)) return r->code;
    if (t.ndim > DT_MAX_DIMS)
        return fail(r, DT__SV_INVALID_ARGUMENT, "a tensor of %d dimensions (at most %d)", t.ndim,
                    DT_MAX_DIMS);
    shape->ndim = t.ndim;
    for (int i = 0; i < t.ndim; i++)
        shape->dim[i] = t.dim[i];
    return 0;
}

static void shape_text(const dt_shape *s, int batch, char *buf, size_t len) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    if (batch) o += (size_t)snprintf(buf + o, len - o, "-1%s", s->ndim ? "," : "");
    for (int i = 0; i < s->ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "," : "", (long long)s->dim[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

/* A sample-shaped value (one instance, one example's feature). flat: a flat list of the
 * right size is also taken (tf.Example features are flat). */
static int read_sample(reader *r, const char *name, const dt_shape *sample, const char *where,
                       int flat) {
    int64_t before = r->n;
    dt_shape got = {0};
    if (read_tensor(r, &got)) return r->code;
    int64_t numel = dt_shape_numel(sample);
    if (dt_shape_eq(&got, sample)) return 0;
    if (flat && got.ndim == 1 && got.dim[0] == numel) return 0;
    if (got.ndim == 0 && r->n - before == 1 && numel == 1) return 0;
    char want[128], g[128];
    shape_text(sample, 1, want, sizeof want);
    shape_text(&got, 0, g, sizeof g);
    return fail(r, DT__SV_INVALID_ARGUMENT,
                "%s: input '%s' expects shape %s (one sample: %lld values), got a value of "
                "shape %s",
                where, name, want, (long long)numel, g);
}

/* {"<name>": value, ...} where only name matters; for instances, no other key is allowed. */
static int read_named(reader *r, const char *name, const dt_shape *sample, const char *where,
                      int flat, int strict, int *found) {
    r->s++; /* '{' */
    if (peek(r) == '}') {
        r->s++;
        return 0;
    }
    for (;;) {
        char key[128];
        if (peek(r) != '"') return syntax(r, "Missing a name for object member.");
        if (read_string(r, key, sizeof key)) return r->code;
        if (peek(r) != ':') return syntax(r, "Missing a colon after a name of object member.");
        r->s++;
        ws(r);
        if (!strcmp(key, name)) {
            if (*found)
                return fail(r, DT__SV_INVALID_ARGUMENT, "%s: input '%s' given twice", where, name);
            *found = 1;
            if (read_sample(r, name, sample, where, flat)) return r->code;
        } else if (strict) {
            return fail(r, DT__SV_INVALID_ARGUMENT,
                        "%s: '%s' is not an input of the signature (its one input is '%s')",
                        where, key, name);
        } else if (skip_value(r, 1)) {
            return r->code;
        }
        int more = after_item(r, '}');
        if (more < 0) return r->code;
        if (!more) return 0;
    }
}

static int read_instances(reader *r, const char *name, const dt_shape *sample, int64_t *rows) {
    if (peek(r) != '[')
        return fail(r, DT__SV_INVALID_ARGUMENT, "Expecting 'instances' to be an list/array");
    r->s++;
    *rows = 0;
    if (peek(r) == ']')
        return fail(r, DT__SV_INVALID_ARGUMENT, "'instances' is empty: it needs at least one");
    for (;;) {
        char where[64];
        snprintf(where, sizeof where, "instances[%lld]", (long long)*rows);
        if (peek(r) == '{') {
            int found = 0;
            if (read_named(r, name, sample, where, 0, 1, &found)) return r->code;
            if (!found)
                return fail(r, DT__SV_INVALID_ARGUMENT, "%s: input '%s' is missing", where, name);
        } else if (read_sample(r, name, sample, where, 0)) {
            return r->code;
        }
        (*rows)++;
        int more = after_item(r, ']');
        if (more < 0) return r->code;
        if (!more) return 0;
    }
}

/* "inputs": the whole batch [rows, sample...] as one value, or {"<name>": that}. */
static int read_batch_value(reader *r, const char *name, const dt_shape *sample, int64_t *rows) {
    dt_shape got = {0};
    if (read_tensor(r, &got)) return r->code;
    int ok = got.ndim == sample->ndim + 1;
    for (int i = 0; ok && i < sample->ndim; i++)
        ok = got.dim[i + 1] == sample->dim[i];
    if (!ok || got.dim[0] < 1) {
        char want[128], g[128];
        shape_text(sample, 1, want, sizeof want);
        shape_text(&got, 0, g, sizeof g);
        return fail(r, DT__SV_INVALID_ARGUMENT, "inputs: input '%s' expects shape %s, got %s",
                    name, want, g);
    }
    *rows = got.dim[0];
    return 0;
}

static int read_inputs(reader *r, const char *name, const dt_shape *sample, int64_t *rows) {
    if (peek(r) != '{') return read_batch_value(r, name, sample, rows);
    r->s++;
    int found = 0;
    if (peek(r) == '}') {
        r->s++;
    } else {
        for (;;) {
            char key[128];
            if (peek(r) != '"') return syntax(r, "Missing a name for object member.");
            if (read_string(r, key, sizeof key)) return r->code;
            if (peek(r) != ':') return syntax(r, "Missing a colon after a name of object member.");
            r->s++;
            if (strcmp(key, name) != 0)
                return fail(r, DT__SV_INVALID_ARGUMENT,
                            "inputs: '%s' is not an input of the signature (its one input is "
                            "'%s')", key, name);
            if (found) return fail(r, DT__SV_INVALID_ARGUMENT, "inputs: '%s' given twice", name);
            found = 1;
            if (read_batch_value(r, name, sample, rows)) return r->code;
            int more = after_item(r, '}');
            if (more < 0) return r->code;
            if (!more) break;
        }
    }
    if (!found) return fail(r, DT__SV_INVALID_ARGUMENT, "inputs: input '%s' is missing", name);
    return 0;
}

static void reader_init(reader *r, const char *body, size_t len, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->s = r->start = body;
    r->end = body + len;
    r->err = err;
    r->errlen = errlen;
    err[0] = 0;
}

/* The top-level object: calls on_key for each key with r->s at its value. */
typedef int (*key_fn)(reader *r, const char *key, void *ctx);

static int read_top(reader *r, key_fn on_key, void *ctx) {
    int c = peek(r);
    if (c < 0) return syntax(r, "The document is empty.");
    if (c != '{') {
        if (c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' ||
            c == 'n')
            return fail(r, DT__SV_INVALID_ARGUMENT, "JSON Value not an object");
        return syntax(r, "Invalid value.");
    }
    r->s++;
    if (peek(r) == '}') {
        r->s++;
    } else {
        for (;;) {
            char key[128];
            if (peek(r) != '"') return syntax(r, "Missing a name for object member.");
            if (read_string(r, key, sizeof key)) return r->code;
            if (peek(r) != ':') return syntax(r, "Missing a colon after a name of object member.");
            r->s++;
            if (on_key(r, key, ctx)) return r->code;
            int more = after_item(r, '}');
            if (more < 0) return r->code;
            if (!more) break;
        }
    }
    if (peek(r) >= 0) return syntax(r, "The document root must not be followed by other values.");
    return 0;
}

static int read_signature(reader *r, dt__sv_input *in) {
    if (peek(r) != '"')
        return fail(r, DT__SV_INVALID_ARGUMENT, "'signature_name' must be a string");
    return read_string(r, in->signature, sizeof in->signature);
}

/* A body that failed for what it says may also be malformed further on: TF Serving parses
 * the whole document before it reads it, so a syntax error anywhere is what it reports. */
static void prefer_syntax_error(reader *r, const char *body, size_t len) {
    if (r->code == DT__SV_RESOURCE_EXHAUSTED || !strncmp(r->err, "JSON Parse error", 16)) return;
    char err[256];
    reader s;
    reader_init(&s, body, len, err, sizeof err);
    if (!skip_value(&s, 0) && peek(&s) >= 0)
        syntax(&s, "The document root must not be followed by other values.");
    if (s.code && !strncmp(err, "JSON Parse error", 16)) snprintf(r->err, r->errlen, "%s", err);
}

struct predict_ctx {
    const char *name;
    const dt_shape *sample;
    dt__sv_input *in;
    int has_instances, has_inputs;
};

static int predict_key(reader *r, const char *key, void *vctx) {
    struct predict_ctx *c = vctx;
    if (!strcmp(key, "signature_name")) return read_signature(r, c->in);
    if (!strcmp(key, "instances") || !strcmp(key, "inputs")) {
        if (c->has_instances || c->has_inputs)
            return fail(r, DT__SV_INVALID_ARGUMENT,
                        c->has_instances == (key[2] == 's')
                            ? "'%s' given twice"
                            : "Not allowed to specify both 'instances' and 'inputs' (got '%s' "
                              "too)",
                        key);
        if (key[2] == 's') { /* instances */
            c->has_instances = 1;
            return read_instances(r, c->name, c->sample, &c->in->rows);
        }
        c->has_inputs = 1;
        c->in->columnar = 1;
        return read_inputs(r, c->name, c->sample, &c->in->rows);
    }
    return skip_value(r, 1); /* other keys are not ours to judge */
}

dt__sv_code dt__sv_parse_predict(const char *body, size_t len, const char *name,
                                 const dt_shape *sample, dt__sv_input *in, char *err,
                                 size_t errlen) {
    reader r;
    reader_init(&r, body, len, err, errlen);
    memset(in, 0, sizeof *in);
    int64_t numel = dt_shape_numel(sample);
    r.cap = (int64_t)(len / 2) + 16; /* a number takes at least two bytes with its comma */
    if (r.cap > 1 << 20) r.cap = 1 << 20;
    if (!(r.x = malloc((size_t)r.cap * sizeof *r.x))) {
        snprintf(err, errlen, "out of memory");
        return DT__SV_RESOURCE_EXHAUSTED;
    }
    struct predict_ctx c = {.name = name, .sample = sample, .in = in};
    if (!read_top(&r, predict_key, &c) && !c.has_instances && !c.has_inputs)
        fail(&r, DT__SV_INVALID_ARGUMENT, "Missing 'inputs' or 'instances' key");
    if (!r.code && r.n != in->rows * numel)
        fail(&r, DT__SV_INTERNAL, "read %lld values for %lld rows", (long long)r.n,
             (long long)in->rows);
    if (r.code) {
        prefer_syntax_error(&r, body, len);
        free(r.x);
        in->x = NULL;
        in->rows = 0;
        return r.code;
    }
    in->x = r.x;
    return DT__SV_OK;
}

/* ---- classify ---- */

struct classify_ctx {
    const char *name;
    const dt_shape *sample;
    dt__sv_input *in;
    int has_examples;
    float *context; /* the feature from "context", when given there */
    int64_t nexamples;
    int64_t *missing; /* indices of examples without the feature (filled from context) */
    int64_t nmissing;
};

static int read_examples(reader *r, struct classify_ctx *c) {
    if (peek(r) != '[')
        return fail(r, DT__SV_INVALID_ARGUMENT, "'examples' must be a list of objects");
    r->s++;
    if (peek(r) == ']')
        return fail(r, DT__SV_INVALID_ARGUMENT, "'examples' is empty: it needs at least one");
    int64_t numel = dt_shape_numel(c->sample);
    for (;;) {
        char where[64];
        snprintf(where, sizeof where, "examples[%lld]", (long long)c->nexamples);
        if (peek(r) != '{')
            return fail(r, DT__SV_INVALID_ARGUMENT, "%s: an example must be an object of features",
                        where);
        int found = 0;
        if (read_named(r, c->name, c->sample, where, 1, 0, &found)) return r->code;
        if (!found) {
            /* the feature may come from "context": a placeholder, filled in at the end */
            int64_t *m = realloc(c->missing, (size_t)(c->nmissing + 1) * sizeof *m);
            if (!m) return fail(r, DT__SV_RESOURCE_EXHAUSTED, "out of memory");
            c->missing = m;
            c->missing[c->nmissing++] = c->nexamples;
            for (int64_t i = 0; i < numel; i++)
                if (push(r, 0)) return r->code;
        }
        c->nexamples++;
        int more = after_item(r, ']');
        if (more < 0) return r->code;
        if (!more) return 0;
    }
}

static int classify_key(reader *r, const char *key, void *vctx) {
    struct classify_ctx *c = vctx;
    if (!strcmp(key, "signature_name")) return read_signature(r, c->in);
    if (!strcmp(key, "examples")) {
        if (c->has_examples) return fail(r, DT__SV_INVALID_ARGUMENT, "'examples' given twice");
        c->has_examples = 1;
        return read_examples(r, c);
    }
    if (!strcmp(key, "context")) {
        if (peek(r) != '{')
            return fail(r, DT__SV_INVALID_ARGUMENT, "'context' must be an object of features");
        /* read into the shared buffer, then move it aside */
        int64_t before = r->n;
        int found = 0;
        if (read_named(r, c->name, c->sample, "context", 1, 0, &found)) return r->code;
        if (found) {
            int64_t numel = dt_shape_numel(c->sample);
            free(c->context);
            if (!(c->context = malloc((size_t)numel * sizeof(float))))
                return fail(r, DT__SV_RESOURCE_EXHAUSTED, "out of memory");
            memcpy(c->context, r->x + before, (size_t)numel * sizeof(float));
            r->n = before;
        }
        return 0;
    }
    return skip_value(r, 1);
}

dt__sv_code dt__sv_parse_classify(const char *body, size_t len, const char *name,
                                  const dt_shape *sample, dt__sv_input *in, char *err,
                                  size_t errlen) {
    reader r;
    reader_init(&r, body, len, err, errlen);
    memset(in, 0, sizeof *in);
    int64_t numel = dt_shape_numel(sample);
    struct classify_ctx c = {.name = name, .sample = sample, .in = in};
    if (!read_top(&r, classify_key, &c) && !c.has_examples)
        fail(&r, DT__SV_INVALID_ARGUMENT, "Missing 'examples' key");
    if (!r.code && c.nmissing) {
        if (!c.context)
            fail(&r, DT__SV_INVALID_ARGUMENT, "examples[%lld]: feature '%s' is missing",
                 (long long)c.missing[0], name);
        else
            for (int64_t i = 0; i < c.nmissing; i++)
                memcpy(r.x + c.missing[i] * numel, c.context, (size_t)numel * sizeof(float));
    }
    free(c.context);
    free(c.missing);
    if (r.code) {
        prefer_syntax_error(&r, body, len);
        free(r.x);
        return r.code;
    }
    in->x = r.x;
    in->rows = c.nexamples;
    return DT__SV_OK;
}

/* ---- output ---- */



void dt__sv_buf_float(dt__sv_buf *b, float v) {
    if (isnan(v)) return dt__sv_buf_puts(b, "NaN");
    if (isinf(v)) return dt__sv_buf_puts(b, v < 0 ? "-Infinity" : "Infinity");
    char buf[48];
    int n = snprintf(buf, sizeof buf, "%.6g", (double)v);
    if (strtof(buf, NULL) != v) n = snprintf(buf, sizeof buf, "%.9g", (double)v);
    if (!strpbrk(buf, ".eEn")) buf[n++] = '.', buf[n++] = '0', buf[n] = 0;
    dt__sv_buf_put(b, buf, (size_t)n);
}

void dt__sv_buf_str(dt__sv_buf *b, const char *s) {
    dt__sv_buf_put(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            dt__sv_buf_put(b, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            dt__sv_buf_put(b, e, 6);
        } else {
            dt__sv_buf_put(b, (const char *)p, 1);
        }
    }
    dt__sv_buf_put(b, "\"", 1);
}
