/*
 * cmd_plan.c - `dtrain plan JOB.yaml`: show what each replica of a job would be started
 * with (command line, environment with TF_CONFIG) without starting anything.
 *
 * Text mode prints one block per replica in start order; --json prints exactly one JSON
 * object (jansson, one line): {"job", "kind", "backend", "replicas": [{"name", "type",
 * "index", "command": [...] | null, "env": {NAME: VALUE, ...}}]}, env in the order the
 * replica gets it.
 *
 * Exit codes: 0 shown, 1 the file cannot be read (or out of memory), 2 bad command line or a
 * malformed job spec (also: a job the local backend cannot run, with --backend local).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli-impl.h"
#include "dtrain/job.h"

static const char usage[] =
    "Usage: dtrain plan JOB.yaml [options]\n"
    "\n"
    "Show each replica of the job in JOB.yaml (a TFJob, PyTorchJob or TrainJob; see\n"
    "docs/JOBS.md) with the command line and the environment it would be started with,\n"
    "TF_CONFIG included, without starting anything.\n"
    "\n"
    "Options:\n"
    "  --backend B           local (default) or kubernetes: the form of the addresses.\n"
    "                        Local ports are placeholders (2222 + the replica's position);\n"
    "                        the local backend allocates free ports when the job runs\n"
    "  --namespace NS        kubernetes: the namespace in host names (default: the job's)\n"
    "  --cluster-domain D    kubernetes: appended to host names after '.svc'\n"
    "  --json                one JSON object on stdout instead of text\n"
    "  -h, --help            show this help\n"
    "\n"
    "Exit status: 0 shown, 1 unreadable file, 2 bad arguments or malformed job spec.\n";

/* Write s so that a POSIX shell reads it back as one word. */
static void put_word(FILE *out, const char *s) {
    int plain = *s != '\0';
    for (const char *p = s; *p && plain; p++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%",
                       *p) != NULL;
    if (plain) {
        fputs(s, out);
        return;
    }
    fputc('\'', out);
    for (const char *p = s; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", out);
        else
            fputc(*p, out);
    }
    fputc('\'', out);
}

/* Is s a DNS-1123 label (a namespace)? */
static int is_label(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

static void print_header(const dt_job_spec *job, const dt_job_env_opts *o) {
    printf("job %s: %s (%s), namespace %s, %d replica%s", job->name, dt_job_kind_name(job->kind),
           job->api_version, o->namespace ? o->namespace : job->namespace,
           dt_job_spec_total_replicas(job), dt_job_spec_total_replicas(job) == 1 ? "" : "s");
    if (job->kind == DT_JOB_KIND_TRAINJOB) printf(", strategy %s", dt_strategy_name(job->strategy));
    printf("\nbackend: %s\n", o->kubernetes ? "kubernetes" : "local");
    if (!o->kubernetes)
        printf("note: local ports are placeholders (2222 + the replica's position); the local "
               "backend\n      allocates free ports when the job runs, and adds DTRAIN_MASTER "
               "and DTRAIN_JOB_TOKEN\n");
}

static void print_replica(const dt_job_spec *job, dt_replica_type t, int i, const dt_env_var *env,
                          int n) {
    const dt_replica_spec *rs = &job->replicas[t];
    printf("\n%s-%d\n", dt_replica_type_name(t), i);
    if (job->kind == DT_JOB_KIND_TRAINJOB) {
        printf("  command: (dtrain's built-in %s role)\n", dt_replica_type_name(t));
    } else if (rs->argc == 0) {
        printf("  command: (none: the image's entrypoint)\n");
    } else {
        printf("  command: ");
        for (int a = 0; a < rs->argc; a++) {
            if (a) putchar(' ');
            put_word(stdout, rs->argv[a]);
        }
        putchar('\n');
    }
    if (rs->working_dir) printf("  workingDir: %s\n", rs->working_dir);
    if (rs->image[0]) printf("  image: %s\n", rs->image);
    printf("  restartPolicy: %s\n  env:\n", dt_restart_policy_name(rs->restart));
    for (int k = 0; k < n; k++)
        printf("    %s=%s\n", env[k].name, env[k].value);
}

/* The replica as a JSON object; NULL when out of memory. */
static json_t *replica_json(const dt_job_spec *job, dt_replica_type t, int i, const dt_env_var *env,
                            int n) {
    const dt_replica_spec *rs = &job->replicas[t];
    char name[64];
    snprintf(name, sizeof name, "%s-%d", dt_replica_type_name(t), i);
    json_t *o = json_object(), *cmd = rs->argv ? json_array() : json_null(), *ev = json_object();
    int bad = !o || !cmd || !ev;
    for (int a = 0; !bad && rs->argv && a < rs->argc; a++)
        bad = json_array_append_new(cmd, json_string(rs->argv[a])) != 0;
    for (int k = 0; !bad && k < n; k++)
        bad = json_object_set_new(ev, env[k].name, json_string(env[k].value)) != 0;
    if (!bad)
        bad = json_object_set_new(o, "name", json_string(name)) ||
              json_object_set_new(o, "type", json_string(dt_replica_type_name(t))) ||
              json_object_set_new(o, "index", json_integer(i)) ||
              json_object_set(o, "command", cmd) || json_object_set(o, "env", ev);
    json_decref(cmd);
    json_decref(ev);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int run(int argc, char **argv) {
    enum { OPT_BACKEND = 256, OPT_NAMESPACE, OPT_CLUSTER_DOMAIN, OPT_JSON };
    static const struct option longopts[] = {
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"namespace", required_argument, NULL, OPT_NAMESPACE},
        {"cluster-domain", required_argument, NULL, OPT_CLUSTER_DOMAIN},
        {"json", no_argument, NULL, OPT_JSON},
        {NULL, 0, NULL, 0},
    };
    const dt__cli_cmd *cmd = &dt__cmd_plan;
    dt_job_env_opts opts = {0};
    int as_json = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_BACKEND:
            if (!strcmp(optarg, "local"))
                opts.kubernetes = 0;
            else if (!strcmp(optarg, "kubernetes"))
                opts.kubernetes = 1;
            else
                return dt__cli_usage_error(cmd, "--backend: expected local or kubernetes, got '%s'",
                                           optarg);
            break;
        case OPT_NAMESPACE:
            if (!is_label(optarg))
                return dt__cli_usage_error(cmd, "--namespace: '%s' is not a DNS label", optarg);
            opts.namespace = optarg;
            break;
        case OPT_CLUSTER_DOMAIN:
            opts.cluster_domain = optarg;
            break;
        case OPT_JSON:
            as_json = 1;
            break;
        case ':':
            return dt__cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
        default:
            return dt__cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if ((opts.namespace || opts.cluster_domain) && !opts.kubernetes)
        return dt__cli_usage_error(cmd, "--namespace and --cluster-domain need --backend "
                                        "kubernetes");
    if (optind != argc - 1)
        return dt__cli_usage_error(
            cmd, optind >= argc ? "missing JOB.yaml" : "expected one JOB.yaml, got %d arguments",
            argc - optind);

    dt_job_spec *job = NULL;
    dt_err e = dt_job_spec_load(&job, argv[optind]);
    if (!e && !opts.kubernetes) e = dt_job_spec_check_local(job);
    if (e) {
        fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
        dt_job_spec_free(job);
        return e == DT_ERR_IO || e == DT_ERR_NOMEM ? DT_EXIT_FAILED : DT_EXIT_USAGE;
    }

    json_t *root = NULL, *list = NULL;
    int rc = DT_EXIT_OK;
    if (as_json) {
        root = json_object();
        list = json_array();
        if (!root || !list || json_object_set_new(root, "job", json_string(job->name)) ||
            json_object_set_new(root, "kind", json_string(dt_job_kind_name(job->kind))) ||
            json_object_set_new(root, "backend",
                                json_string(opts.kubernetes ? "kubernetes" : "local")) ||
            json_object_set(root, "replicas", list)) {
            e = dt_err_set(DT_ERR_NOMEM, "out of memory");
            goto done;
        }
    } else {
        print_header(job, &opts);
    }
    for (int t = 0; t < DT_REPLICA_TYPE__COUNT; t++) {
        for (int i = 0; job->replicas[t].present && i < job->replicas[t].replicas; i++) {
            dt_env_var *env = NULL;
            int n = 0;
            if ((e = dt_job_env(job, (dt_replica_type)t, i, &opts, &env, &n))) goto done;
            if (as_json) {
                json_t *r = replica_json(job, (dt_replica_type)t, i, env, n);
                if (!r || json_array_append_new(list, r))
                    e = dt_err_set(DT_ERR_NOMEM, "out of memory");
            } else {
                print_replica(job, (dt_replica_type)t, i, env, n);
            }
            dt_job_env_free(env, n);
            if (e) goto done;
        }
    }
    if (as_json) {
        char *s = json_dumps(root, 0);
        if (!s) {
            e = dt_err_set(DT_ERR_NOMEM, "out of memory");
            goto done;
        }
        puts(s);
        free(s);
    }
done:
    if (e) {
        fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
        rc = e == DT_ERR_ARG ? DT_EXIT_USAGE : DT_EXIT_FAILED;
    }
    json_decref(list);
    json_decref(root);
    dt_job_spec_free(job);
    return rc;
}

const dt__cli_cmd dt__cmd_plan = {
    .name = "plan",
    .summary = "Show each replica's command and environment for a job spec",
    .usage = usage,
    .run = run,
};
