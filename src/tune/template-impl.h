/*
 * template-impl.h - the trial template's text (template.c), for the experiment loader
 * (experiment.c). dt__experiment_render (tune-impl.h) is template.c's too.
 */
#ifndef DTRAIN_TUNE_TEMPLATE_IMPL_H
#define DTRAIN_TUNE_TEMPLATE_IMPL_H

#include <stddef.h>

#include "spec/yaml_doc-impl.h"
#include "tune/tune-impl.h"

/* Byte offset of (0-based line, 0-based column in characters) in text[0..len). */
size_t dt__tpl_offset(const char *text, size_t len, size_t line, size_t col);
/* text[0..len) with everything outside [from, to) blanked (newlines kept, each other
 * character one space), ending with to's line: the template's lines stay the file's. NULL
 * when out of memory. Caller frees. */
char *dt__tpl_slice(const char *text, size_t len, size_t from, size_t to);
/* Make the job's metadata.name (root: the job's node, its marks positions in *text) the
 * trial-name placeholder ph; *text is replaced. A job without metadata.name gets a last line
 * `metadata: {...}` (its other metadata kept as JSON when allow_json, else refused). */
dt_err dt__tpl_name(char **text, const dt__yval *root, const char *ph, int allow_json);
/* Every placeholder of e's template names a (trial) parameter: else DT_ERR_SPEC
 * "TEMPLATE_PATH:LINE: field: placeholder ... names no ...". */
dt_err dt__tpl_check(const dt__experiment *e, const char *field);
/* A copy of text with each Sweep placeholder replaced by as many '_' (a raw template may be
 * YAML only once rendered: replicas: %WORKERS%). NULL when out of memory. */
char *dt__tpl_neutralize(const dt__experiment *e, const char *text);

#endif
