/*
 * cmd_serve.c - `dtrain serve`: serve exported models over TensorFlow Serving's REST API,
 * with TF Serving's flags (docs/SERVING.md).
 *
 * Flags are TF Serving's (gflags style: --flag=value or --flag value; booleans also bare),
 * plus a few of dtrain's own for what TF Serving keeps in files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli-impl.h"
#include "serve/serve-impl.h"

static const char usage[] =
    "Usage: dtrain serve --model_name NAME --model_base_path DIR [options]\n"
    "       dtrain serve --model_config_file FILE [options]\n"
    "\n"
    "Serve exported models (dtrain export, or a job's JOB_DIR/export) over TensorFlow\n"
    "Serving's REST API: GET /v1/models/NAME[/versions/N|/labels/L][/metadata],\n"
    "POST /v1/models/NAME[/versions/N|/labels/L]:predict|:classify|:regress.\n"
    "The base path holds versions as integer-named directories; the newest is served, and\n"
    "a new one is picked up without a restart.\n"
    "\n"
    "Options (TF Serving's):\n"
    "  --rest_api_port=PORT                  the REST port (default 8501; 0 picks a free one)\n"
    "  --model_name=NAME                     the model's name in URLs (default 'default')\n"
    "  --model_base_path=DIR                 its versions\n"
    "  --model_config_file=FILE              several models (model_config_list text format)\n"
    "  --file_system_poll_wait_seconds=N     look for new versions every N s (default 1;\n"
    "                                        0 loads once)\n"
    "  --enable_batching[=true|false]        batch concurrent requests (default false)\n"
    "  --batching_parameters_file=FILE       max_batch_size, batch_timeout_micros,\n"
    "                                        num_batch_threads (BatchingParameters text format)\n"
    "  --rest_api_num_threads=N              HTTP threads (default: online CPUs)\n"
    "  --port=N                              accepted for compatibility: no gRPC API is served\n"
    "  --rest_api_timeout_in_ms=N            accepted for compatibility\n"
    "Options (dtrain's):\n"
    "  --rest_api_host=ADDR                  the IPv4 address to listen on (default 0.0.0.0)\n"
    "  --max_batch_size=N                    rows in a batch (default 64)\n"
    "  --batch_timeout_micros=N              how long a batch may wait to fill (default 0)\n"
    "  --num_batch_threads=N                 batch executors (default: online CPUs)\n"
    "  --max_body_bytes=N                    the largest request body (default 64 MiB)\n"
    "  --rest_api_max_connections=N          connections open at once (default 1024); at the\n"
    "                                        cap the one waiting longest on its client is closed\n"
    "  --rest_api_header_timeout_ms=N        a request's headers must arrive within N ms\n"
    "                                        (default 30000)\n"
    "  --rest_api_body_timeout_ms=N          its body within N ms of them (default 120000)\n"
    "  -h, --help                            show this help\n"
    "\n"
    "Stops on SIGTERM or SIGINT. Exit status: 0 stopped, 1 failed (port in use, unreadable\n"
    "config), 2 bad arguments.\n";

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* "--name=value", "--name value" or (booleans) "--name": the value, or NULL when absent. */
static int flag(int argc, char **argv, int *i, const char *name, int boolean, const char **val) {
    const char *a = argv[*i];
    if (a[0] == '-' && a[1] == '-') a += 2;
    else if (a[0] == '-') a += 1; /* gflags also takes one dash */
    else return 0;
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (boolean) {
        *val = "true";
        return 1;
    }
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
    return 1;
}

static int int_flag(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out) {
    if (dt__cli_parse_i64(v, lo, hi, out) == 0) return 0;
    dt__cli_usage_error(&dt__cmd_serve, "--%s: expected an integer in [%lld, %lld], got '%s'",
                        name, (long long)lo, (long long)hi, v);
    return -1;
}

static int run(int argc, char **argv) {
    dt__sv_opts o = {.port = 8501,
                     .poll_seconds = 1,
                     .max_batch_size = 64,
                     .batch_threads = online_cpus(),
                     .http_threads = online_cpus(),
                     .max_body = 64u << 20,
                     .log = stderr};
    const char *name = NULL, *base = NULL, *config = NULL, *batching_file = NULL;
    int rc = DT_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int64_t n;
        int r;
        if (dt__cli_is_help(argv[i])) {
            fputs(usage, stdout);
            rc = DT_EXIT_OK;
            goto out;
        }
#define INT_FLAG(fname, lo, hi, dst)                                                       \
    if ((r = flag(argc, argv, &i, fname, 0, &v))) {                                        \
        if (r < 0 || int_flag(fname, v ? v : "", lo, hi, &n)) goto missing;               \
        dst = n;                                                                           \
        continue;                                                                          \
    }
        INT_FLAG("rest_api_port", 0, 65535, o.port)
        INT_FLAG("file_system_poll_wait_seconds", 0, 86400, o.poll_seconds)
        INT_FLAG("rest_api_num_threads", 1, 256, o.http_threads)
        INT_FLAG("max_batch_size", 1, 1 << 20, o.max_batch_size)
        INT_FLAG("batch_timeout_micros", 0, 10000000, o.batch_timeout_us)
        INT_FLAG("num_batch_threads", 1, 256, o.batch_threads)
        INT_FLAG("max_body_bytes", 1024, INT64_C(1) << 32, o.max_body)
        INT_FLAG("rest_api_max_connections", 1, 1000000, o.max_connections)
        INT_FLAG("rest_api_header_timeout_ms", 1, 86400000, o.header_timeout_ms)
        INT_FLAG("rest_api_body_timeout_ms", 1, 86400000, o.body_timeout_ms)
        INT_FLAG("port", 0, 65535, n)
        INT_FLAG("rest_api_timeout_in_ms", 0, INT64_C(1) << 31, n)
#undef INT_FLAG
        if ((r = flag(argc, argv, &i, "enable_batching", 1, &v))) {
            if (!strcmp(v, "true") || !strcmp(v, "1")) o.batching = 1;
            else if (!strcmp(v, "false") || !strcmp(v, "0")) o.batching = 0;
            else {
                dt__cli_usage_error(&dt__cmd_serve, "--enable_batching: expected true or false, got '%s'", v);
                goto out;
            }
            continue;
        }
        const char **dst = NULL;
        if ((r = flag(argc, argv, &i, "model_name", 0, &v))) dst = &name;
        else if ((r = flag(argc, argv, &i, "model_base_path", 0, &v))) dst = &base;
        else if ((r = flag(argc, argv, &i, "model_config_file", 0, &v))) dst = &config;
        else if ((r = flag(argc, argv, &i, "batching_parameters_file", 0, &v))) dst = &batching_file;
        else if ((r = flag(argc, argv, &i, "rest_api_host", 0, &v))) dst = &o.host;
        if (dst) {
            if (r < 0) goto missing;
            *dst = v;
            continue;
        }
        dt__cli_usage_error(&dt__cmd_serve, "unknown flag '%s'", argv[i]);
        goto out;
    missing:
        if (r < 0) dt__cli_usage_error(&dt__cmd_serve, "%s: a value is required", argv[i]);
        goto out;
    }
    if (config && (name || base)) {
        dt__cli_usage_error(&dt__cmd_serve, "--model_config_file and --model_name/--model_base_path "
                                            "are alternatives");
        goto out;
    }
    dt_err e;
    if (batching_file && (e = dt__sv_batching_load(batching_file, &o))) {
        fprintf(stderr, "dtrain serve: %s\n", dt_errmsg());
        rc = e == DT_ERR_IO ? DT_EXIT_FAILED : DT_EXIT_USAGE;
        goto out;
    }
    if (config) {
        if ((e = dt__sv_config_load(config, &o))) {
            fprintf(stderr, "dtrain serve: %s\n", dt_errmsg());
            rc = e == DT_ERR_IO ? DT_EXIT_FAILED : DT_EXIT_USAGE;
            goto out;
        }
    } else {
        if (!base) {
            dt__cli_usage_error(&dt__cmd_serve, "--model_base_path (or --model_config_file) is required");
            goto out;
        }
        if (!(o.models = calloc(1, sizeof *o.models))) goto out;
        o.nmodels = 1;
        snprintf(o.models[0].name, sizeof o.models[0].name, "%s", name ? name : "default");
        if (dt__path(o.models[0].base_path, sizeof o.models[0].base_path, "%s", base)) {
            dt__cli_usage_error(&dt__cmd_serve, "--model_base_path: %s", dt_errmsg());
            goto out;
        }
        o.models[0].latest_n = 1;
        if (!o.models[0].name[0] || strpbrk(o.models[0].name, "/:")) {
            dt__cli_usage_error(&dt__cmd_serve, "--model_name: '%s' must not be empty or hold '/' or ':'",
                                o.models[0].name);
            goto out;
        }
    }
    if (dt__sv_run(&o)) {
        fprintf(stderr, "dtrain serve: %s\n", dt_errmsg());
        rc = DT_EXIT_FAILED;
        goto out;
    }
    rc = DT_EXIT_OK;
out:
    free(o.models);
    return rc;
}

const dt__cli_cmd dt__cmd_serve = {
    .name = "serve",
    .summary = "Serve exported models over TensorFlow Serving's REST API",
    .usage = usage,
    .run = run,
};
