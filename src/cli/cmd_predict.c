/*
 * cmd_predict.c - `dtrain predict --server URL --model NAME --image FILE.png`: classify an
 * image with a model behind a TensorFlow-Serving-compatible REST API (`dtrain serve`, TF
 * Serving itself) and print the top classes.
 *
 * Design
 *
 * The image is read first (a bad file fails before the network is touched) as 8-bit gray
 * (data/png-impl.h: any PNG, alpha composited on black; --invert for dark items on light
 * paper). The model's input shape comes from GET /v1/models/NAME[/versions/N]/metadata:
 * the first signature, among the one used, serving_default, predict and then any other,
 * whose one input is an image: [-1, H, W, C] with C 1 or 3, [-1, H, W], or [-1, S*S] with
 * S >= 8 (a flat image taken as S x S, like the [-1, 784] of TF Serving's MNIST example).
 * The image is resized to H x W (png-impl.h: area averaging when shrinking, bilinear when
 * enlarging) and for C = 3 the gray value is repeated in each channel. The values sent are
 * the raw pixel values 0..255 as floats: the served model normalizes them itself (the
 * export's input contract).
 *
 * Which call: --signature_name S uses S, by its method_name (classify or predict; regress
 * is refused). Without it, the `classify` signature when the model lists one (labels from
 * the server), else serving_default by :predict, whose classes are labelled 0, 1, ...:
 *   POST ...:classify {"signature_name": S, "examples": [{INPUT: [H*W*C values]}]}
 *        -> {"results": [[[label, score], ...]]}
 *   POST ...:predict  {"signature_name": S, "instances": [H x W x C nested lists]}
 *        -> {"predictions": [[p0, p1, ...]]}  (or [{OUTPUT: [...], ...}]: "probabilities",
 *           else the signature's first output)
 * The top K are printed best first (ties by class order), "LABEL  0.9731", labels padded to
 * one width. python/dtrain_serving_client.py does all of this the same way and prints the
 * same lines.
 *
 * Errors: the file's (png-impl.h), the server's {"error": ...} with the URL and HTTP code,
 * a transport failure (refused, timed out) with libcurl's reason; all exit 1. A bad command
 * line exits 2.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli-impl.h"
#include "data/png-impl.h"
#include "net/http-impl.h"

static const char usage[] =
    "Usage: dtrain predict --server URL --model NAME --image FILE.png [options]\n"
    "\n"
    "Classify an image with a model served over TensorFlow Serving's REST API ('dtrain\n"
    "serve', or TF Serving): read the PNG as grayscale, resize it to the model's input (from\n"
    "its metadata), send it and print the top classes with their scores, best first.\n"
    "\n"
    "Options:\n"
    "  --server URL           the server, http://HOST:PORT (http:// may be left out)\n"
    "  --model NAME           the model's name on the server\n"
    "  --image FILE.png       any PNG: gray, RGB, palette, with alpha (composited on black,\n"
    "                         so transparent is background), 1-16 bits, interlaced\n"
    "  --version N            that version of the model (default: the server's latest)\n"
    "  --signature_name S     the signature to call (default: 'classify' when the model\n"
    "                         has one, else 'serving_default' by :predict)\n"
    "  --top K                print the K best classes (default 3)\n"
    "  --invert               the image is dark on light: composite on white, then invert\n"
    "                         (Fashion-MNIST's items are light on a black background)\n"
    "  --timeout SECS         give up on a request after SECS seconds (default 30)\n"
    "  -h, --help             show this help\n"
    "\n"
    "Exit status: 0 done, 1 the image cannot be read or the server failed (its message\n"
    "and HTTP code are printed), 2 bad arguments.\n";

#define CMD (&dt__cmd_predict)

/* The model's image input, as the metadata describes it. */
typedef struct image_input {
    const char *name; /* the input's (and classify's feature's) name; borrowed */
    int rank;         /* with the batch dim: 2 (flat S*S), 3 ([-1, H, W]) or 4 */
    int h, w, c;
} image_input;

/* One score per class. */
typedef struct class_score {
    char *label; /* owned */
    double score;
    int index;
} class_score;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "dtrain predict: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return DT_EXIT_FAILED;
}

/* Percent-encode a model name for a path segment (anything but unreserved characters). */
static void escape_segment(const char *s, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (; *s && n + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~') {
            out[n++] = (char)ch;
        } else {
            out[n++] = '%';
            out[n++] = hex[ch >> 4];
            out[n++] = hex[ch & 15];
        }
    }
    out[n] = '\0';
}

/* A dim's size: proto3 JSON prints int64 as a string ("-1"); a number is taken too. */
static int dim_size(json_t *dim, long long *out) {
    json_t *s = json_object_get(dim, "size");
    if (json_is_integer(s)) {
        *out = json_integer_value(s);
        return 0;
    }
    const char *t = json_string_value(s);
    int64_t v;
    if (!t || dt__cli_parse_i64(t, -1, INT32_MAX, &v)) return -1;
    *out = v;
    return 0;
}

/* Is the signature's single input an image? Fills *in. */
static int image_of(json_t *sig, image_input *in) {
    json_t *inputs = json_object_get(sig, "inputs");
    if (!json_is_object(inputs) || json_object_size(inputs) != 1) return 0;
    const char *name;
    json_t *t;
    json_object_foreach(inputs, name, t) {
        json_t *dims = json_object_get(json_object_get(t, "tensor_shape"), "dim");
        size_t rank = json_array_size(dims);
        long long d[4];
        if (rank < 2 || rank > 4) return 0;
        for (size_t i = 0; i < rank; i++)
            if (dim_size(json_array_get(dims, i), &d[i])) return 0;
        if (d[0] != -1 && d[0] != 1) return 0;
        for (size_t i = 1; i < rank; i++)
            if (d[i] < 1 || d[i] > DT__PNG_MAX_SIDE) return 0;
        in->name = name;
        in->rank = (int)rank;
        if (rank == 2) { /* a flat S*S image (MNIST's 784), at least 8 x 8 */
            long long s = 1;
            while (s * s < d[1])
                s++;
            if (s * s != d[1] || s < 8) return 0;
            in->h = in->w = (int)s, in->c = 1;
        } else {
            in->h = (int)d[1], in->w = (int)d[2], in->c = rank == 4 ? (int)d[3] : 1;
            if (in->c != 1 && in->c != 3) return 0;
        }
        return 1;
    }
    return 0;
}

/* Describe a signature's inputs for an error message: "input [-1, 4]". */
static void describe_inputs(json_t *sig, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    const char *name;
    json_t *t;
    json_object_foreach(json_object_get(sig, "inputs"), name, t) {
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s [", n ? ", " : "", name);
        size_t i;
        json_t *dim;
        json_array_foreach(json_object_get(json_object_get(t, "tensor_shape"), "dim"), i, dim) {
            long long v = 0;
            dim_size(dim, &v);
            n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%lld", i ? ", " : "", v);
        }
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "]");
    }
    if (!buf[0]) snprintf(buf, cap, "none");
}

/* The signature names, comma-separated, for an error message. */
static void list_signatures(json_t *sigs, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    const char *name;
    json_t *s;
    json_object_foreach(sigs, name, s) {
        (void)s;
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? ", " : "", name);
    }
    if (!buf[0]) snprintf(buf, cap, "none");
}

/* Is method_name that of a classify (1) or predict (0) signature? -1: neither. */
static int method_kind(json_t *sig) {
    const char *m = json_string_value(json_object_get(sig, "method_name"));
    if (!m) return 0; /* no method: predict, TF Serving's default */
    size_t n = strlen(m);
    if (n >= 9 && !strcmp(m + n - 9, "/classify")) return 1;
    if (n >= 8 && !strcmp(m + n - 8, "/predict")) return 0;
    return -1;
}

/* The server's answer to a failed request: its {"error": ...} message, else the body's start. */
static int server_error(const char *method, const char *url, long status, const char *body) {
    json_t *j = json_loads(body ? body : "", 0, NULL);
    const char *msg = json_string_value(json_object_get(j, "error"));
    int rc;
    if (msg) {
        rc = fail("%s %s: HTTP %ld: %s", method, url, status, msg);
    } else {
        char head[201];
        snprintf(head, sizeof head, "%s", body ? body : "");
        for (char *p = head; *p; p++)
            if ((unsigned char)*p < 0x20) *p = ' ';
        rc = fail("%s %s: HTTP %ld%s%s", method, url, status, head[0] ? ": " : "", head);
    }
    json_decref(j);
    return rc;
}

/* One request whose answer must be 200 and a JSON object: *out (caller decrefs). */
static int call(dt__http_client *c, const char *base, const char *method, const char *path,
                const char *body, json_t **out) {
    *out = NULL;
    long status = 0;
    char *resp = NULL;
    size_t len = 0;
    char url[2048];
    snprintf(url, sizeof url, "%s%s", base, path);
    if (dt__http_client_request(c, method, path, body, body ? strlen(body) : 0, &status, &resp,
                                &len))
        return fail("%s", dt_errmsg());
    if (status != 200) {
        int rc = server_error(method, url, status, resp);
        free(resp);
        return rc;
    }
    json_error_t je;
    *out = json_loadb(resp, len, 0, &je);
    free(resp);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return fail("%s %s: the answer is not a JSON object%s%s", method, url,
                    je.text[0] ? ": " : "", je.text);
    }
    return DT_EXIT_OK;
}

/* The request body: classify's examples or predict's instances, one image. */
static char *request_body(int classify, const char *sig_name, const image_input *in,
                          const uint8_t *px) {
    json_t *root = json_object();
    json_object_set_new(root, "signature_name", json_string(sig_name));
    json_t *sample;
    if (classify || in->rank == 2) { /* flat */
        sample = json_array();
        for (int i = 0; i < in->h * in->w; i++)
            for (int k = 0; k < in->c; k++)
                json_array_append_new(sample, json_real(px[i]));
    } else {
        sample = json_array();
        for (int y = 0; y < in->h; y++) {
            json_t *row = json_array();
            for (int x = 0; x < in->w; x++) {
                double v = px[y * in->w + x];
                if (in->rank == 3) {
                    json_array_append_new(row, json_real(v));
                    continue;
                }
                json_t *ch = json_array();
                for (int k = 0; k < in->c; k++)
                    json_array_append_new(ch, json_real(v));
                json_array_append_new(row, ch);
            }
            json_array_append_new(sample, row);
        }
    }
    if (classify) {
        json_t *ex = json_object();
        json_object_set_new(ex, in->name, sample);
        json_object_set_new(root, "examples", json_pack("[o]", ex));
    } else {
        json_object_set_new(root, "instances", json_pack("[o]", sample));
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return s;
}

/* The scores of the first (only) example: from classify's results or predict's predictions.
 * 0, or -1 with *why set. */
static int parse_scores(json_t *ans, int classify, json_t *sig, class_score **out, int *n,
                        const char **why) {
    *out = NULL;
    *n = 0;
    json_t *list;
    if (classify) {
        list = json_array_get(json_object_get(ans, "results"), 0);
        if (!json_is_array(list)) return *why = "no \"results\" list in the answer", -1;
    } else {
        list = json_array_get(json_object_get(ans, "predictions"), 0);
        if (json_is_object(list)) { /* several outputs: "probabilities", else the first */
            json_t *p = json_object_get(list, "probabilities");
            if (!p) {
                const char *first = NULL;
                json_t *v;
                json_object_foreach(json_object_get(sig, "outputs"), first, v) break;
                p = first ? json_object_get(list, first) : NULL;
            }
            list = p;
        }
        if (!json_is_array(list)) return *why = "no \"predictions\" list in the answer", -1;
    }
    size_t count = json_array_size(list);
    if (count == 0) return *why = "the answer has no classes", -1;
    class_score *cs = calloc(count, sizeof *cs);
    if (!cs) return *why = "out of memory", -1;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        json_t *score = e;
        const char *label = idx;
        if (classify) { /* ["label", score] */
            if (json_array_size(e) != 2 || !json_is_string(json_array_get(e, 0))) {
                *why = "a result is not a [label, score] pair";
                goto bad;
            }
            label = json_string_value(json_array_get(e, 0));
            score = json_array_get(e, 1);
        }
        if (!json_is_number(score)) {
            *why = classify ? "a score is not a number" : "a prediction is not a list of numbers";
            goto bad;
        }
        cs[i].label = strdup(label);
        cs[i].score = json_number_value(score);
        cs[i].index = (int)i;
        *n = (int)i + 1;
        if (!cs[i].label) {
            *why = "out of memory";
            goto bad;
        }
    }
    *out = cs;
    return 0;
bad:
    for (int k = 0; k < *n; k++)
        free(cs[k].label);
    free(cs);
    *n = 0;
    return -1;
}

static int by_score(const void *a, const void *b) {
    const class_score *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->index - y->index;
}

/* Characters (UTF-8 code points) in s, for padding labels. */
static int text_width(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static void print_top(class_score *cs, int n, int top) {
    qsort(cs, (size_t)n, sizeof *cs, by_score);
    if (top > n) top = n;
    int width = 0;
    for (int i = 0; i < top; i++)
        if (text_width(cs[i].label) > width) width = text_width(cs[i].label);
    for (int i = 0; i < top; i++)
        printf("%s%*s  %.4f\n", cs[i].label, width - text_width(cs[i].label), "", cs[i].score);
}

/* --name VALUE or --name=VALUE: 1 taken (*val set, *i moved), 0 not this option, -1 error. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **val) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n)) return 0;
    if (argv[*i][n] == '=') {
        *val = argv[*i] + n + 1;
        return 1;
    }
    if (argv[*i][n]) return 0;
    if (*i + 1 >= argc) {
        dt__cli_usage_error(CMD, "%s needs a value", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

static int run(int argc, char **argv) {
    const char *server = NULL, *model = NULL, *image = NULL, *version = NULL, *signature = NULL,
               *top_s = NULL, *timeout_s = NULL;
    int invert = 0;
    for (int i = 1; i < argc; i++) {
        static const char *const names[] = {"--server",         "--model", "--image",  "--version",
                                            "--signature_name", "--top",   "--timeout"};
        const char **slots[] = {&server, &model, &image, &version, &signature, &top_s, &timeout_s};
        int k = 0;
        for (size_t j = 0; j < sizeof names / sizeof names[0] && !k; j++)
            if ((k = opt_value(argc, argv, &i, names[j], slots[j])) < 0) return DT_EXIT_USAGE;
        if (k) continue;
        if (!strcmp(argv[i], "--invert"))
            invert = 1;
        else if (argv[i][0] == '-')
            return dt__cli_usage_error(CMD, "unknown option '%s'", argv[i]);
        else
            return dt__cli_usage_error(CMD, "unexpected argument '%s'", argv[i]);
    }
    if (!server) return dt__cli_usage_error(CMD, "missing --server URL");
    if (!model || !model[0]) return dt__cli_usage_error(CMD, "missing --model NAME");
    if (!image) return dt__cli_usage_error(CMD, "missing --image FILE.png");
    int64_t top = 3, ver = -1, timeout = 30;
    if (top_s && dt__cli_parse_i64(top_s, 1, 1000000, &top))
        return dt__cli_usage_error(CMD, "--top: expected an integer >= 1, got '%s'", top_s);
    if (version && dt__cli_parse_i64(version, 0, INT64_MAX, &ver))
        return dt__cli_usage_error(CMD, "--version: expected a non-negative integer, got '%s'",
                                   version);
    if (timeout_s && dt__cli_parse_i64(timeout_s, 1, 86400, &timeout))
        return dt__cli_usage_error(CMD, "--timeout: expected seconds in 1..86400, got '%s'",
                                   timeout_s);
    if (signature && !signature[0]) return dt__cli_usage_error(CMD, "--signature_name is empty");

    char base[1024];
    if (strstr(server, "://"))
        snprintf(base, sizeof base, "%s", server);
    else
        snprintf(base, sizeof base, "http://%s", server);
    for (size_t n = strlen(base); n > 0 && base[n - 1] == '/'; n--)
        base[n - 1] = '\0';

    int rc = DT_EXIT_FAILED;
    dt__gray_image img = {0};
    dt__http_client *c = NULL;
    json_t *meta = NULL, *ans = NULL;
    uint8_t *px = NULL;
    char *body = NULL;
    class_score *cs = NULL;
    int ncs = 0;

    if (dt__png_read_gray(image, invert ? DT__PNG_FLAG_INVERT : 0, &img)) {
        fail("%s", dt_errmsg());
        goto end;
    }
    dt_err e = dt__http_client_init(&c, base, NULL, (long)timeout * 1000);
    if (e) {
        fail("--server: %s", dt_errmsg());
        if (e == DT_ERR_ARG) rc = DT_EXIT_USAGE; /* a URL that is not http(s) */
        goto end;
    }
    char esc[800], prefix[1024], path[1100];
    escape_segment(model, esc, sizeof esc);
    if (ver >= 0)
        snprintf(prefix, sizeof prefix, "/v1/models/%s/versions/%lld", esc, (long long)ver);
    else
        snprintf(prefix, sizeof prefix, "/v1/models/%s", esc);

    snprintf(path, sizeof path, "%s/metadata", prefix);
    if (call(c, base, "GET", path, NULL, &meta)) goto end;
    json_t *sigs = json_object_get(
        json_object_get(json_object_get(meta, "metadata"), "signature_def"), "signature_def");
    if (!json_is_object(sigs)) {
        fail("GET %s%s: no metadata.signature_def.signature_def in the answer", base, path);
        goto end;
    }
    char names[512];
    list_signatures(sigs, names, sizeof names);

    /* The signature to call and how. */
    const char *sig_name = signature;
    if (!sig_name) {
        json_t *cl = json_object_get(sigs, "classify");
        sig_name = cl && method_kind(cl) == 1 ? "classify" : "serving_default";
    }
    json_t *sig = json_object_get(sigs, sig_name);
    if (!sig) {
        fail("model %s has no signature '%s' (it has: %s)", model, sig_name, names);
        goto end;
    }
    int classify = method_kind(sig);
    if (classify < 0) {
        fail("signature '%s' of model %s is a %s signature: only classify and predict are "
             "supported",
             sig_name, model, json_string_value(json_object_get(sig, "method_name")));
        goto end;
    }

    /* The image input: the called signature's, else the first other one's that is an image. */
    image_input in = {0};
    const char *order[] = {sig_name, "serving_default", "predict"};
    int found = 0;
    for (size_t k = 0; k < 3 && !found; k++)
        found = image_of(json_object_get(sigs, order[k]), &in);
    const char *sname;
    json_t *s;
    json_object_foreach(sigs, sname, s) {
        if (found) break;
        found = image_of(s, &in);
    }
    if (!found) {
        char inputs[512];
        describe_inputs(sig, inputs, sizeof inputs);
        fail("model %s takes no image (signature '%s' inputs: %s; expected [-1, H, W, C] with "
             "C 1 or 3, [-1, H, W] or [-1, S*S] with S >= 8)",
             model, sig_name, inputs);
        goto end;
    }

    if (!(px = malloc((size_t)in.h * (size_t)in.w))) {
        fail("out of memory");
        goto end;
    }
    if (dt__gray_resize(img.px, img.w, img.h, px, in.w, in.h)) {
        fail("%s: %s", image, dt_errmsg());
        goto end;
    }
    if (!(body = request_body(classify, sig_name, &in, px))) {
        fail("out of memory");
        goto end;
    }
    snprintf(path, sizeof path, "%s:%s", prefix, classify ? "classify" : "predict");
    if (call(c, base, "POST", path, body, &ans)) goto end;
    const char *why = NULL;
    if (parse_scores(ans, classify, sig, &cs, &ncs, &why)) {
        fail("POST %s%s: %s", base, path, why);
        goto end;
    }
    print_top(cs, ncs, (int)top);
    rc = DT_EXIT_OK;
end:
    for (int k = 0; k < ncs; k++)
        free(cs[k].label);
    free(cs);
    free(body);
    free(px);
    json_decref(ans);
    json_decref(meta);
    dt__http_client_free(c);
    dt__gray_image_free(&img);
    return rc;
}

const dt__cli_cmd dt__cmd_predict = {
    .name = "predict",
    .summary = "Classify an image with a model served over TF Serving's REST API",
    .usage = usage,
    .run = run,
};
