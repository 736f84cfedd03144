/*
 * cmd_status.c - `dtrain status [JOB|DIR] [--json]`: a job's state and its replicas.
 *
 * From the live master when one runs (GET /v1/jobs/NAME), else from DIR/status.json.
 * Without a job it lists every registered job, as `dtrain list` does.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cli/cli-impl.h"

static const char usage[] =
    "Usage: dtrain status [JOB|DIR] [--json]\n"
    "\n"
    "Show a job's state (its conditions, as Kubeflow's training operator reports them) and\n"
    "its replicas. JOB is a job name (see 'dtrain list') or a job directory. Without JOB,\n"
    "list every job.\n"
    "\n"
    "Options:\n"
    "  --json       print the status object (docs/API.md) instead of a table\n"
    "  --server URL through a job server (docs/SERVER.md; default $DTRAIN_SERVER);\n"
    "               --token T its token (else $DTRAIN_SERVER_TOKEN or its server.json)\n"
    "  -h, --help   show this help\n";

static const char *str(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "-";
}

static long long num(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

/* The shard service's progress: per dataset, the latest opened epoch and each replica's share. */
static void print_data(json_t *data) {
    const char *name;
    json_t *d;
    json_object_foreach(json_object_get(data, "datasets"), name, d) {
        json_t *epochs = json_object_get(d, "epochs");
        size_t n = json_array_size(epochs);
        json_t *ep = n ? json_array_get(epochs, n - 1) : NULL;
        printf("dataset %s: %s, epoch %lld of %lld: shards %lld/%lld, samples %lld/%lld"
               "  (re-queued %lld, failed %lld, late reports refused %lld)\n",
               name, str(d, "state"), ep ? num(ep, "epoch") + 1 : 0, num(d, "num_epochs"),
               ep ? num(ep, "shards_done") : 0, num(d, "shards_per_epoch"),
               ep ? num(ep, "samples_done") : 0, num(d, "dataset_size"), num(d, "requeued"),
               num(d, "failures"), num(d, "late_reports_refused"));
        if (json_is_string(json_object_get(d, "reason"))) printf("  %s\n", str(d, "reason"));
        /* An earlier epoch still open (a shard of it in flight or re-queued) is shown too:
         * the latest may be done while an old one waits for one shard. */
        for (size_t k = 0; k + 1 < n; k++) {
            json_t *e = json_array_get(epochs, k);
            if (num(e, "shards_done") < num(d, "shards_per_epoch"))
                printf("  epoch %lld still open: shards %lld/%lld\n", num(e, "epoch") + 1,
                       num(e, "shards_done"), num(d, "shards_per_epoch"));
        }
        json_t *fly = json_object_get(d, "in_flight_shards");
        if (num(d, "in_flight") > 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double now = (double)ts.tv_sec + ts.tv_nsec / 1e9, oldest = now;
            json_t *o = NULL, *f;
            size_t k;
            json_array_foreach(fly, k, f) {
                double since = json_number_value(json_object_get(f, "since"));
                if (since < oldest) oldest = since, o = f;
            }
            json_t *dl = json_object_get(d, "lease_deadline");
            char deadline[48] = "none";
            if (json_is_number(dl)) snprintf(deadline, sizeof deadline, "%.0f s", json_number_value(dl));
            printf("  in flight %lld", num(d, "in_flight"));
            if (o)
                printf(", oldest shard %lld of epoch %lld held %.1f s by %s", num(o, "id"),
                       num(o, "epoch") + 1, now - oldest, str(o, "replica"));
            printf(" (lease deadline %s, expired %lld)\n", deadline, num(d, "leases_expired"));
        }
        const char *rname;
        json_t *r;
        json_object_foreach(json_object_get(d, "replicas"), rname, r) {
            printf("  %-16s shards %lld, samples %lld\n", rname, num(r, "shards_done"),
                   num(r, "samples_done"));
        }
    }
}

static void print_status(json_t *st) {
    printf("job %s (%s)  phase %s  restarts %lld", str(st, "name"), str(st, "kind"),
           str(st, "phase"), (long long)json_integer_value(json_object_get(st, "restarts")));
    /* the current worker count (it changes with `dtrain scale`) */
    if (json_is_integer(json_object_get(st, "workers"))) printf("  workers %lld", num(st, "workers"));
    printf("\n");
    printf("dir %s  master %s\n", str(st, "jobDir"),
           json_is_string(json_object_get(st, "master")) ? str(st, "master") : "(not running)");
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(st, "conditions"), i, c) {
        printf("  %-10s %-5s %-24s %s\n", str(c, "type"), str(c, "status"), str(c, "reason"),
               str(c, "message"));
    }
    json_t *pg = json_object_get(st, "progress");
    if (json_is_object(pg)) {
        printf("progress %.1f%%  epoch %lld/%lld  samples %.0f of %.0f",
               100 * json_number_value(json_object_get(pg, "fraction")), num(pg, "epoch"),
               num(pg, "epochs"), json_number_value(json_object_get(pg, "samplesDone")),
               json_number_value(json_object_get(pg, "samplesTotal")));
        if (json_object_get(pg, "samplesPerSec"))
            printf("  %.0f samples/s", json_number_value(json_object_get(pg, "samplesPerSec")));
        if (json_object_get(pg, "etaSeconds"))
            printf("  ETA %.0fs", json_number_value(json_object_get(pg, "etaSeconds")));
        printf("\n");
    }
    printf("%-16s %-11s %8s %8s %5s %8s %8s %8s %9s\n", "REPLICA", "STATE", "PID", "RESTARTS",
           "EXIT", "AGE", "STEP", "LOSS", "SAMPLES/S");
    json_t *r;
    json_array_foreach(json_object_get(st, "replicas"), i, r) {
        char pid[24] = "-", code[24] = "-", age[16] = "-";
        json_t *p = json_object_get(r, "pid"), *x = json_object_get(r, "exitCode");
        if (json_is_integer(p)) snprintf(pid, sizeof pid, "%lld", (long long)json_integer_value(p));
        if (json_is_integer(x)) snprintf(code, sizeof code, "%lld", (long long)json_integer_value(x));
        const char *started = json_string_value(json_object_get(r, "startTime"));
        if (started) snprintf(age, sizeof age, "%.0fs", dt__cli_age(started));
        char step[24] = "", loss[24] = "", rate[24] = "";
        json_t *pr = json_object_get(r, "progress");
        if (json_is_object(pr) && !strcmp(str(r, "state"), "Running")) {
            snprintf(step, sizeof step, "%.0f", json_number_value(json_object_get(pr, "step")));
            snprintf(loss, sizeof loss, "%.4f", json_number_value(json_object_get(pr, "loss")));
            snprintf(rate, sizeof rate, "%.0f",
                     json_number_value(json_object_get(pr, "samples_per_sec")));
        }
        printf("%-16s %-11s %8s %8lld %5s %8s %8s %8s %9s\n", str(r, "name"), str(r, "state"), pid,
               (long long)json_integer_value(json_object_get(r, "restarts")), code, age, step, loss,
               rate);
        const char *state = str(r, "state");
        if (strcmp(state, "Running") && strcmp(state, "Pending") && json_object_get(r, "message"))
            printf("    %s: %s\n", state, str(r, "message"));
    }
    print_data(json_object_get(st, "data"));
}

static int run(int argc, char **argv) {
    const dt__cli_cmd *cmd = &dt__cmd_status;
    int as_json = 0;
    dt__cli_kube ko = {0};
    const char *arg = NULL;
    for (int i = 1; i < argc; i++) {
        int k = dt__cli_kube_opt(cmd, argc, argv, &i, &ko);
        if (k < 0) return DT_EXIT_USAGE;
        if (k) continue;
        if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (argv[i][0] == '-') return dt__cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        else if (arg) return dt__cli_usage_error(cmd, "expected one JOB or DIR");
        else arg = argv[i];
    }
    if (!arg) {
        const char *url = dt__cli_server_url(&ko);
        char *args[] = {"list", "--server", (char *)(url ? url : ""), "--token",
                        (char *)(ko.server_token ? ko.server_token : ""),
                        as_json ? "--json" : NULL, NULL};
        if (!url) return dt__cmd_list.run(as_json ? 2 : 1, (char *[]){"list", as_json ? "--json" : NULL, NULL});
        return dt__cmd_list.run(as_json ? 6 : 5, args);
    }
    dt__jobref ref;
    if (dt__jobref_find(cmd, arg, &ko, &ref)) return DT_EXIT_FAILED;
    json_t *st = dt__jobref_status(cmd, &ref);
    if (!st) return DT_EXIT_FAILED;
    if (as_json) {
        char *text = json_dumps(st, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) puts(text);
        free(text);
    } else {
        print_status(st);
        /* a local job's live master: its dashboard (the token is the user's own, 0600) */
        if (ref.live && ref.dir[0] && ref.url[0] && ref.token[0] && !ref.kube.on)
            printf("dashboard %s/#token=%s\n", ref.url, ref.token);
    }
    json_decref(st);
    return DT_EXIT_OK;
}

const dt__cli_cmd dt__cmd_status = {
    .name = "status",
    .summary = "Show a job's state and its replicas",
    .usage = usage,
    .run = run,
};
