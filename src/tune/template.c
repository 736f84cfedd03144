/*
 * template.c - the trial template as text: cut out of its file with the file's lines kept,
 * its job's metadata.name made the trial's name, its placeholders checked and replaced
 * (docs/TUNE.md "The experiment spec").
 *
 * Design: a template is never a tree. A Katib trialSpec is the experiment file's text with
 * everything outside the trialSpec node blanked (newlines kept, every other character a
 * space), so its line N is the file's line N and a rendered trial the job parser refuses
 * names the experiment's FILE:LINE; a Sweep's template file is kept whole. Node positions
 * come from libyaml's marks (0-based line, column in characters); dt__tpl_offset turns them
 * into byte offsets. The job's metadata.name becomes a placeholder for the trial's name:
 * replaced in place when the template has one, else a `metadata:` line is appended after the
 * last line, where it moves no other line. Rendering is textual substitution, as Katib's and
 * seed 003's `sed` are: Katib's ${trialParameters.NAME} (and ${trialSpec.Name} for the name);
 * a Sweep's %NAME% and ${NAME} (%ID% and ${ID}: the trial's name; $${ is a literal ${).
 */
#include "tune/template-impl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* The 1-based line of text[off]. */
static int line_at(const char *text, size_t off) {
    int line = 1;
    for (size_t i = 0; i < off; i++)
        if (text[i] == '\n') line++;
    return line;
}

/* Byte offset of (0-based line, 0-based column counted in characters) in text[0..len). */
size_t dt__tpl_offset(const char *text, size_t len, size_t line, size_t col) {
    size_t i = 0;
    for (size_t l = 0; l < line && i < len; i++)
        if (text[i] == '\n') l++;
    for (size_t c = 0; c < col && i < len && text[i] != '\n';) {
        i++;
        while (i < len && ((unsigned char)text[i] & 0xC0) == 0x80)
            i++;
        c++;
    }
    return i;
}

/* text[0..len) with everything outside [from, to) blanked: newlines kept, each other
 * character one space (so columns, counted in characters, stay). Ends after `to`'s line. */
char *dt__tpl_slice(const char *text, size_t len, size_t from, size_t to) {
    char *out = malloc(len + 2);
    if (!out) return NULL;
    size_t o = 0, line_start = from;
    while (line_start > 0 && text[line_start - 1] != '\n')
        line_start--;
    for (size_t i = 0; i < len && i < to; i++) {
        if (i >= from) {
            out[o++] = text[i];
        } else if (text[i] == '\n') {
            out[o++] = '\n';
        } else if (i >= line_start && ((unsigned char)text[i] & 0xC0) != 0x80) {
            out[o++] = ' '; /* the first line's prefix: its column stays */
        }
    }
    while (o > 0 && (out[o - 1] == ' ' || out[o - 1] == '\n' || out[o - 1] == '\t'))
        o--;
    out[o++] = '\n';
    out[o] = '\0';
    return out;
}

/* Replace text[from, to) (on one line) by rep; returns the new string (text is freed). */
static char *splice(char *text, size_t from, size_t to, const char *rep) {
    size_t n = strlen(text), r = strlen(rep);
    char *out = malloc(n - (to - from) + r + 1);
    if (out) {
        memcpy(out, text, from);
        memcpy(out + from, rep, r);
        memcpy(out + from + r, text + to, n - to + 1);
    }
    free(text);
    return out;
}

/* Make the root's metadata.name the trial-name placeholder `ph`. root's marks are positions
 * in *text (which has the file's lines and columns); *text is replaced. A template without
 * metadata.name gets `metadata: {...}` as a last line, its other metadata kept as JSON
 * (allow_json; otherwise metadata without a name is refused). */
dt_err dt__tpl_name(char **text, const dt__yval *root, const char *ph, int allow_json) {
    dt__yval m, n;
    size_t len = strlen(*text);
    if (dt__ymap_get(root, "metadata", &m) && !dt__yval_is_null(&m)) {
        if (!dt__yval_is_map(&m)) return dt__yexpect_map(&m);
        if (dt__ymap_get(&m, "name", &n)) {
            if (!dt__yval_is_scalar(&n) || n.node->start_mark.line != n.node->end_mark.line)
                return dt__yerr(&n, "expected a name on one line");
            size_t a =
                dt__tpl_offset(*text, len, n.node->start_mark.line, n.node->start_mark.column);
            size_t b = dt__tpl_offset(*text, len, n.node->end_mark.line, n.node->end_mark.column);
            char rep[64];
            snprintf(rep, sizeof rep, "\"%s\"", ph);
            if (!(*text = splice(*text, a, b, rep)))
                return dt_err_set(DT_ERR_NOMEM, "out of memory");
            return DT_OK;
        }
        if (!allow_json)
            return dt__yerr(&m, "give metadata.name in the template (e.g. name: job-%%ID%%): "
                                "the trial's name replaces it");
    }
    if (root->node->type != YAML_MAPPING_NODE ||
        root->node->data.mapping.style == YAML_FLOW_MAPPING_STYLE)
        return dt__yerr(root, "the trial's job must be a block mapping");
    json_t *meta = NULL;
    if (dt__yval_present(&m) && !dt__yval_is_null(&m)) {
        dt_err err = dt__yval_to_json(&m, &meta);
        if (err) return err;
        /* blank the metadata entry: its key's line (at the mapping's column) to its end */
        int key_line = m.decl_line - 1;
        size_t a = dt__tpl_offset(*text, len, (size_t)key_line, root->node->start_mark.column);
        size_t b = dt__tpl_offset(*text, len, m.node->end_mark.line, m.node->end_mark.column);
        for (size_t i = a; i < b; i++)
            if ((*text)[i] != '\n') (*text)[i] = ' ';
    } else {
        meta = json_object();
    }
    if (!meta || json_object_set_new(meta, "name", json_string(ph))) {
        json_decref(meta);
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    char *js = json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(meta);
    size_t col = root->node->start_mark.column;
    char *out = js ? malloc(len + col + strlen(js) + 16) : NULL;
    if (!out) {
        free(js);
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    size_t o = len;
    memcpy(out, *text, len);
    if (o > 0 && out[o - 1] != '\n') out[o++] = '\n';
    memset(out + o, ' ', col);
    o += col;
    o += (size_t)sprintf(out + o, "metadata: %s\n", js);
    free(js);
    free(*text);
    *text = out;
    return DT_OK;
}

/* Placeholders: a scan over the template text. Katib: ${trialParameters.NAME} and (ours, for
 * the name) ${trialSpec.Name}. Sweep: %NAME%, ${NAME}, $${ (a literal ${). For each one
 * found at text[i], *len gets its length and *name its inner name. Returns 0 when text[i]
 * starts none. */
static int placeholder_at(const dt__experiment *e, const char *t, size_t i, size_t *len, char *name,
                          size_t cap, int *literal) {
    *literal = 0;
    if (t[i] == '$' && t[i + 1] == '{') {
        if (e->sweep && i > 0 && t[i - 1] == '$') return 0; /* handled with the first '$' */
        const char *close = strchr(t + i + 2, '}');
        const char *nl = strchr(t + i + 2, '\n');
        if (!close || (nl && nl < close)) return 0;
        size_t n = (size_t)(close - (t + i + 2));
        const char *inner = t + i + 2;
        if (!e->sweep) {
            static const char pre[] = "trialParameters.";
            if (n > sizeof pre - 1 && !strncmp(inner, pre, sizeof pre - 1)) {
                inner += sizeof pre - 1;
                n -= sizeof pre - 1;
            } else if (!(n == 14 && !strncmp(inner, "trialSpec.Name", 14))) {
                return 0; /* not Katib's: left as it is (a shell's ${HOME}) */
            }
        }
        if (n + 1 > cap) n = cap - 1;
        memcpy(name, inner, n);
        name[n] = '\0';
        *len = (size_t)(close - (t + i)) + 1;
        return 1;
    }
    if (e->sweep && t[i] == '$' && t[i + 1] == '$' && t[i + 2] == '{') {
        *literal = 1;
        *len = 2;
        return 1;
    }
    if (e->sweep && t[i] == '%' && (isalpha((unsigned char)t[i + 1]) || t[i + 1] == '_')) {
        size_t j = i + 1;
        while (isalnum((unsigned char)t[j]) || t[j] == '_')
            j++;
        if (t[j] != '%') return 0;
        size_t n = j - i - 1;
        if (n + 1 > cap) n = cap - 1;
        memcpy(name, t + i + 1, n);
        name[n] = '\0';
        *len = j - i + 1;
        return 1;
    }
    return 0;
}

/* What a placeholder's name stands for: -2 the trial's name, -3.. a ${trialSpec.X}
 * reference (by trial parameter), >= 0 a parameter; -1 nothing. *tp the trial parameter. */
static int resolve(const dt__experiment *e, const char *name, int *tp) {
    *tp = -1;
    if (e->sweep) {
        if (!strcmp(name, "ID")) return -2;
        return dt__experiment_param(e, name);
    }
    if (!strcmp(name, "trialSpec.Name")) return -2;
    for (int i = 0; i < e->ntp; i++)
        if (!strcmp(e->trial_params[i].name, name)) {
            *tp = i;
            return e->trial_params[i].param >= 0 ? e->trial_params[i].param : -3;
        }
    return -1;
}

dt_err dt__tpl_check(const dt__experiment *e, const char *field) {
    const char *t = e->template_text;
    for (size_t i = 0; t[i]; i++) {
        size_t len = 0;
        char name[128];
        int literal = 0, tp = 0;
        if (!placeholder_at(e, t, i, &len, name, sizeof name, &literal)) continue;
        if (!literal && resolve(e, name, &tp) == -1) {
            char have[512];
            size_t o = 0;
            have[0] = '\0';
            int n = e->sweep ? e->nparams : e->ntp;
            for (int k = 0; k < n && o < sizeof have - 70; k++)
                o += (size_t)snprintf(have + o, sizeof have - o, "%s%s", k ? ", " : "",
                                      e->sweep ? e->params[k].name : e->trial_params[k].name);
            return dt_err_set(DT_ERR_SPEC, "%s:%d: %s: placeholder %.*s names no %s (%s: %s)",
                              e->template_path, line_at(t, i), field, (int)len, t + i,
                              e->sweep ? "parameter" : "trialParameter",
                              e->sweep ? "parameters" : "trialParameters", n ? have : "none");
        }
        i += len - 1;
    }
    return DT_OK;
}

dt_err dt__experiment_render(const dt__experiment *e, const char *trial_name, char *const *values,
                             char **out_yaml) {
    const char *t = e->template_text;
    size_t cap = strlen(t) + 256, o = 0;
    char *out = malloc(cap);
    *out_yaml = NULL;
    if (!out) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    for (size_t i = 0; t[i];) {
        size_t len = 0;
        char name[128];
        int literal = 0, tp = -1;
        const char *rep = NULL;
        if (placeholder_at(e, t, i, &len, name, sizeof name, &literal)) {
            int r = literal ? -4 : resolve(e, name, &tp);
            if (r >= 0) {
                rep = values[r];
                if (strpbrk(rep, "\n\r")) {
                    free(out);
                    return dt_err_set(DT_ERR_ARG, "%s: parameter %s: a value must be one line",
                                      e->path, e->params[r].name);
                }
            } else if (r == -2) {
                rep = trial_name;
            } else if (r == -3) {
                const char *ref = e->trial_params[tp].reference;
                rep = !strcmp(ref, "${trialSpec.Name}")        ? trial_name
                      : !strcmp(ref, "${trialSpec.Namespace}") ? e->namespace_name
                      : !strcmp(ref, "${trialSpec.Kind}")      ? e->template_kind
                                                               : e->template_api;
            } else if (r == -4) {
                rep = "$";
            }
        }
        if (!rep) {
            rep = t + i;
            len = 1;
            if (o + 1 >= cap) {
                char *n = realloc(out, cap *= 2);
                if (!n) {
                    free(out);
                    return dt_err_set(DT_ERR_NOMEM, "out of memory");
                }
                out = n;
            }
            out[o++] = t[i++];
            continue;
        }
        size_t r = strlen(rep);
        while (o + r + 1 >= cap) {
            char *n = realloc(out, cap *= 2);
            if (!n) {
                free(out);
                return dt_err_set(DT_ERR_NOMEM, "out of memory");
            }
            out = n;
        }
        memcpy(out + o, rep, r);
        o += r;
        i += len;
    }
    out[o] = '\0';
    *out_yaml = out;
    return DT_OK;
}

/* A copy of text with each Sweep placeholder replaced by as many '_': the raw template may
 * not be YAML until rendered (replicas: %WORKERS%), but its structure is. */
char *dt__tpl_neutralize(const dt__experiment *e, const char *text) {
    char *c = strdup(text);
    if (!c) return NULL;
    for (size_t i = 0; c[i]; i++) {
        size_t len = 0;
        char name[128];
        int literal = 0;
        if (placeholder_at(e, text, i, &len, name, sizeof name, &literal)) {
            memset(c + i, '_', len);
            i += len - 1;
        }
    }
    return c;
}
