/*
 * yaml_doc-impl.h - a small typed accessor layer over libyaml's document API.
 *
 * A dt__ystream reads a YAML stream (a file or a string) and hands out its documents one
 * at a time (yaml_parser_load), so a multi-document file (`---`) can be iterated and a
 * syntax error in a later document does not spoil an earlier one. A dt__yval is a cursor on
 * one node of a document: the node (NULL when a looked-up key is absent), its line, and the
 * field path that led to it ("spec.model.layers[2].units"). Every accessor checks the
 * node's type and range itself and fails with DT_ERR_SPEC and one message of the form
 *
 *     FILE:LINE: FIELD.PATH: what is wrong
 *
 * recorded with dt_err_set, so a schema written on top of it never formats an error by
 * hand unless the rule is its own (dt__yerr).
 *
 * Typing rules: numbers and booleans must be plain (unquoted) scalars; `~`, `null` and an
 * empty value are "nothing" and are accepted by no reader; a string may be plain or quoted.
 * Booleans are true/false (YAML 1.2 core: also True/TRUE/False/FALSE). Integers are decimal.
 * Mappings may not repeat a key (dt__ymap_check_keys reports it).
 *
 * Usage:
 *     dt__ystream *s; dt__ydoc *d; dt__yval root, v;
 *     dt__ystream_open_file(&s, path);
 *     while (!(e = dt__ystream_next(s, &d)) && d) {
 *         dt__ydoc_root(d, &root);
 *         if (dt__ymap_get(&root, "units", &v)) e = dt__yget_i64(&v, 1, INT64_MAX, &units);
 *         dt__ydoc_free(d);
 *     }
 *     dt__ystream_free(s);
 *
 * A dt__yval points into its document: it is valid until dt__ydoc_free. Not thread-safe per
 * object; separate streams are independent.
 */
#ifndef DTRAIN_YAML_DOC_IMPL_H
#define DTRAIN_YAML_DOC_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <yaml.h>

#include "dtrain/err.h"

/* Longest field path kept for messages (longer ones are truncated). */
#define DT__YPATH_MAX 256
/* Largest input accepted by dt__ystream_open_file. */
#define DT__YFILE_MAX (16 << 20)
/* Deepest nesting of sequences and maps accepted: libyaml's scanner costs time quadratic in
 * the flow depth (a 1 MiB body of '[' would hold a server's thread for minutes). */
#define DT__YDEPTH_MAX 256

typedef struct dt__ystream dt__ystream;
typedef struct dt__ydoc dt__ydoc;

typedef struct dt__yval {
    dt__ydoc *doc;
    yaml_node_t *node; /* NULL: the key was absent */
    int line;          /* 1-based line of the node; for an absent key, decl_line of the map */
    int decl_line;     /* line that introduces the value: its key's line, or its own */
    char path[DT__YPATH_MAX];
} dt__yval;

/* ---- streams and documents ---- */

/* Read a whole file (at most DT__YFILE_MAX bytes). DT_ERR_IO "PATH: cannot open: ..." when
 * it cannot be read. Caller frees with dt__ystream_free. */
dt_err dt__ystream_open_file(dt__ystream **out, const char *path);
/* A stream over a copy of text[0..len); name is used in messages. */
dt_err dt__ystream_open_mem(dt__ystream **out, const char *text, size_t len, const char *name);
void dt__ystream_free(dt__ystream *s);
/* The file name given when opening (for messages). */
const char *dt__ystream_name(const dt__ystream *s);

/* Load the next document into *out (caller frees with dt__ydoc_free), or set *out = NULL at
 * the end of the stream. A syntax error gives DT_ERR_SPEC "FILE:LINE: YAML syntax error:
 * PROBLEM (CONTEXT at line N)", and every later call repeats it; so does nesting deeper than
 * DT__YDEPTH_MAX ("FILE:LINE: YAML nesting deeper than 256 levels"). */
dt_err dt__ystream_next(dt__ystream *s, dt__ydoc **out);
void dt__ydoc_free(dt__ydoc *d);
/* 0-based position of the document in its stream. */
int dt__ydoc_index(const dt__ydoc *d);
/* A cursor on the document's root node, with field path prefix (may be "" or NULL). */
void dt__ydoc_root(dt__ydoc *d, const char *path, dt__yval *out);

/* ---- errors ---- */

/* Record DT_ERR_SPEC "FILE:LINE: PATH: message" at v's line (PATH and its colon are left
 * out when the path is empty) and return DT_ERR_SPEC. */
dt_err dt__yerr(const dt__yval *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same at an explicit line. */
dt_err dt__yerr_line(const dt__yval *v, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* What v is, for "got ..." in messages: "'ten'" (shortened, control characters replaced),
 * "nothing", "a list", "a mapping". Writes into buf and returns it. */
const char *dt__yval_describe(const dt__yval *v, char *buf, size_t len);

/* ---- node types ---- */

int dt__yval_present(const dt__yval *v);
int dt__yval_is_null(const dt__yval *v); /* absent, or ~ / null / empty */
int dt__yval_is_map(const dt__yval *v);
int dt__yval_is_seq(const dt__yval *v);
int dt__yval_is_scalar(const dt__yval *v);
/* "expected a mapping, got a list" unless v is a mapping. */
dt_err dt__yexpect_map(const dt__yval *v);
dt_err dt__yexpect_seq(const dt__yval *v);

/* ---- mappings ---- */

int dt__ymap_size(const dt__yval *m);
/* Entry i: *key gets the key text (NULL when the key is not a scalar), key_line its line,
 * val the value with path "M.KEY". */
void dt__ymap_entry(const dt__yval *m, int i, const char **key, int *key_line, dt__yval *val);
/* The value of key: returns 1 and fills out when present; returns 0 and leaves out->node
 * NULL (path "M.KEY", line = m's decl_line) when absent. m must be a mapping. */
int dt__ymap_get(const dt__yval *m, const char *key, dt__yval *out);
/* The same, but an absent key is an error "M.KEY: required field missing" at the line of
 * the mapping's declaration. */
dt_err dt__ymap_require(const dt__yval *m, const char *key, dt__yval *out);
/* Every key must be a scalar, appear once and be in allowed (NULL-terminated). Otherwise,
 * at the key's line, "M.k: unknown key 'k' for WHAT (allowed: a, b, c)" (" for WHAT" left
 * out when what is NULL), "M.k: duplicate key 'k' (first at line N)", or "M: a key must be
 * a plain string, got a list". */
dt_err dt__ymap_check_keys(const dt__yval *m, const char *const *allowed, const char *what);

/* ---- sequences ---- */

int dt__yseq_size(const dt__yval *s);
/* Item i with path "S[i]"; its decl_line is its own line. */
void dt__yseq_item(const dt__yval *s, int i, dt__yval *out);

/* ---- scalars ---- */

/* A scalar as a NUL-terminated string (plain or quoted; not "nothing"; no NUL inside). The
 * text lives in the document. */
dt_err dt__yget_str(const dt__yval *v, const char **out);
/* A string of at most cap-1 bytes copied into dst. */
dt_err dt__yget_strbuf(const dt__yval *v, char *dst, size_t cap);
/* A decimal integer in [lo, hi]. Messages name the expectation: "expected a positive
 * integer, got 'ten'" (lo 1), "a non-negative integer" (lo 0), "an integer >= LO",
 * "an integer", with " at most HI" when HI < INT64_MAX and the value is above it. */
dt_err dt__yget_i64(const dt__yval *v, int64_t lo, int64_t hi, int64_t *out);
dt_err dt__yget_int(const dt__yval *v, int lo, int hi, int *out);
/* A non-negative decimal integer up to UINT64_MAX. */
dt_err dt__yget_u64(const dt__yval *v, uint64_t *out);

/* A finite number (integer or decimal float notation) in a range: lo/hi may be -HUGE_VAL /
 * HUGE_VAL; *_open excludes the bound. Messages: "expected a positive number, got 'x'",
 * "a non-negative number", "a number in (0, 1)", "a number". */
typedef struct dt__yrange {
    double lo, hi;
    int lo_open, hi_open;
} dt__yrange;
dt_err dt__yget_f64(const dt__yval *v, dt__yrange range, double *out);

dt_err dt__yget_bool(const dt__yval *v, int *out);

/* One of a NULL-name-terminated table of names: "expected one of relu, tanh, got 'relux'". */
typedef struct dt__yenum {
    const char *name;
    int value;
} dt__yenum;
dt_err dt__yget_enum(const dt__yval *v, const dt__yenum *table, int *out);

/* A list of min_n..max_n integers, each in [lo, hi]: "expected a list of 1 to 4 positive
 * integers, got ..." for the list itself; an item's error names the item ("X[1]"). */
dt_err dt__yget_i64_list(const dt__yval *v, int min_n, int max_n, int64_t lo, int64_t hi,
                         int64_t *out, int *n);

/* ---- JSON ---- */
/* v as JSON (*out a new reference): plain scalars typed as Kubernetes reads YAML (null,
 * true/false, decimal integers, floats), quoted ones strings. An absent v is JSON null. */
dt_err dt__yval_to_json(const dt__yval *v, json_t **out);

#endif
