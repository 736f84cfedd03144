/*
 * cmd_run.c - `dtrain run JOB.yaml`: start a job's master and its replicas (local backend).
 *
 * Attached (the default) the master runs in this process: a live table of replicas on a
 * terminal, else one line per event on stderr; Ctrl-C stops the job cleanly. With
 * --detach the master is forked into its own session (its output in DIR/master.log) and
 * the command returns once every replica has been launched.
 *
 * Exit codes: 0 the job succeeded (or, detached, started), 1 it failed or was stopped,
 * 2 bad command line or malformed spec.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/kube-impl.h"
#include "cli/cli-impl.h"
#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/job.h"
#include "dtrain/master.h"

static const char usage[] =
    "Usage: dtrain run JOB.yaml [options]\n"
    "       dtrain run --resume DIR [options]\n"
    "\n"
    "Run a job: a Kubeflow TFJob or PyTorchJob manifest, or a dtrain TrainJob\n"
    "(docs/JOBS.md). A master starts every replica as a process on this machine, tells each\n"
    "who it is (TF_CONFIG, DTRAIN_*), restarts them by their restartPolicy and serves the\n"
    "job's HTTP API (docs/API.md). Logs, status and the outcome go to the job dir.\n"
    "\n"
    "Options:\n"
    "  --job-dir DIR       the job directory (default: runs/<metadata.name>/)\n"
    "  --resume DIR        pick up the job in DIR after its master died; replicas that\n"
    "                      still run are kept\n"
    "  --detach            run the master in the background; return once replicas started\n"
    "  --bind ADDR         address of the API and of the replicas (default 127.0.0.1)\n"
    "  --netns NS=IP,...   simulated hosts: replicas run in these network namespaces, in turn,\n"
    "                      each addressed at its IP (--bind must be reachable from them)\n"
    "  --port N            the API's port (default: any free port)\n"
    "  --stop-grace SECS   SIGTERM to SIGKILL delay when stopping replicas (default 5)\n"
    "  --heartbeat-timeout SECS\n"
    "                      a replica silent this long loses the data shards it holds\n"
    "                      (default 30; kept by --resume unless given again)\n"
    "  --lease-timeout SECS\n"
    "                      a data shard held this long without a report is handed out\n"
    "                      again, even from a replica that sends heartbeats (default 10 x\n"
    "                      the mean shard time, at least 300; kept by --resume)\n"
    "\n"
    "Kubernetes (docs/KUBERNETES.md):\n"
    "  --backend B         local (default) or kubernetes: start the job in a cluster (its\n"
    "                      master a pod there) and follow it until it ends\n"
    "  --kubeconfig F      the cluster (default: $KUBECONFIG, ~/.kube/config)\n"
    "  --context C         the kubeconfig's context (default: its current-context)\n"
    "  --namespace NS      where the job runs (default: the context's)\n"
    "  --image IMG         dtrain's image, for the master and built-in roles\n"
    "                      (default dtrain:latest)\n"
    "  --volume-claim PVC  the job dir's PersistentVolumeClaim (default: <job>-data, made)\n"
    "  --in-cluster        be the job's master in its pod (what the master pod runs)\n"
    "  -h, --help          show this help\n"
    "\n"
    "While attached, Ctrl-C stops the job: every replica gets SIGTERM, then SIGKILL.\n"
    "Exit status: 0 succeeded (detached: started), 1 failed or stopped, 2 bad arguments or\n"
    "malformed spec.\n";

static int exit_for(dt_err e) {
    return e == DT_ERR_SPEC || e == DT_ERR_ARG ? DT_EXIT_USAGE : DT_EXIT_FAILED;
}

/* The job's last words, from its result.json: the exported model's figures, or what failed it. */
static void summarize(const char *dir) {
    char path[DT__PATH_MAX];
    if (dt__path(path, sizeof path, "%s/result.json", dir)) return; /* the job ran: it fits */
    json_t *r = json_load_file(path, 0, NULL);
    json_t *ev = json_object_get(r, "eval"), *f = json_object_get(r, "failure");
    if (json_is_object(ev)) {
        printf("eval accuracy %.4f, loss %.4f", json_number_value(json_object_get(ev, "accuracy")),
               json_number_value(json_object_get(ev, "loss")));
        const char *ex = json_string_value(json_object_get(r, "export"));
        if (ex) printf("; exported %s", ex);
        json_t *sps = json_object_get(r, "samples_per_sec");
        if (json_is_number(sps)) printf("; %.0f samples/s", json_number_value(sps));
        printf("; %.1f s\n", json_number_value(json_object_get(r, "wall_seconds")));
    }
    if (json_is_object(f)) {
        json_t *code = json_object_get(f, "exitCode");
        printf("failed by %s", json_string_value(json_object_get(f, "replica")));
        if (json_is_integer(code)) printf(" (exit %lld)", (long long)json_integer_value(code));
        printf("; the last lines of its log:\n");
        json_t *tail = json_object_get(f, "logTail");
        size_t n = json_array_size(tail), i = n > 5 ? n - 5 : 0;
        for (; i < n; i++)
            printf("  | %s\n", json_string_value(json_array_get(tail, i)));
    }
    json_decref(r);
}

static int report(const dt_job_spec *job, const char *dir, dt_job_outcome outcome) {
    static const char *const names[] = {"Succeeded", "Failed", "Stopped"};
    summarize(dir);
    printf("job %s %s; result in %s/result.json\n", job->name, names[outcome], dir);
    return outcome == DT_JOB_OUTCOME_SUCCEEDED ? DT_EXIT_OK : DT_EXIT_FAILED;
}

/* Fork the master into the background; wait until it has launched every replica. */
static int run_detached(const dt_job_spec *job, dt_master_opts *mo) {
    /* Before master.log is made in it: a dir that cannot be this job's is left untouched. */
    dt_err room = dt__path_room(mo->job_dir, DT__JOB_DIR_ROOM, "job dir");
    if (room) {
        fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
        return exit_for(room);
    }
    char log_path[DT__PATH_MAX];
    if ((!mo->resume && dt_master_check_job_dir(mo->job_dir, job->name)) ||
        dt__mkdirs(mo->job_dir) || dt__path(log_path, sizeof log_path, "%s/master.log", mo->job_dir)) {
        fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
        return DT_EXIT_FAILED;
    }
    /* What this start adds to master.log is what to show if it fails. */
    struct stat sb;
    off_t log_start = stat(log_path, &sb) == 0 ? sb.st_size : 0;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        perror("dtrain run: pipe");
        return DT_EXIT_FAILED;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("dtrain run: fork");
        return DT_EXIT_FAILED;
    }
    if (pid == 0) {
        close(p[0]);
        /* A grandchild, so the master is not our child and has its own session. */
        pid_t g = fork();
        if (g < 0) {
            perror("dtrain run: fork");
            _exit(1);
        }
        if (g != 0) _exit(0);
        setsid();
        int null_fd = open("/dev/null", O_RDONLY);
        int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (null_fd >= 0) dup2(null_fd, 0);
        if (log_fd >= 0) {
            dup2(log_fd, 1);
            dup2(log_fd, 2);
        }
        FILE *out = fdopen(dup(2), "w");
        mo->out = out;
        mo->live_table = 0;
        mo->ready_fd = p[1]; /* the master closes it once it has said R or F */
        /* Why the master could not start, for the parent alone: master.log is shared by
         * every start on this dir (two at once: the loser's slice of it may hold the
         * winner's lines, or its own line may be missed). */
        int why_fd = fcntl(p[1], F_DUPFD_CLOEXEC, 3);
        dt_job_outcome outcome = DT_JOB_OUTCOME_FAILED;
        dt_err e = dt_master_run(job, mo, &outcome);
        if (e) {
            fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
            char msg[1200];
            snprintf(msg, sizeof msg, "E%s", dt_errmsg());
            signal(SIGPIPE, SIG_IGN); /* the parent is gone once the master said R */
            if (why_fd >= 0 && write(why_fd, msg, strlen(msg)) < 0) {
                /* nothing more to do: the reason is in master.log too */
            }
        }
        _exit(e ? exit_for(e) : outcome == DT_JOB_OUTCOME_SUCCEEDED ? 0 : 1);
    }
    close(p[1]);
    waitpid(pid, NULL, 0);
    char c;
    ssize_t n;
    while ((n = read(p[0], &c, 1)) < 0 && errno == EINTR) {
    }
    if (n == 1 && c == 'E') {
        /* The master could not start: its own reason, and nothing of another master's. */
        char why[1200];
        size_t len = 0;
        ssize_t k;
        while (len < sizeof why - 1 &&
               ((k = read(p[0], why + len, sizeof why - 1 - len)) > 0 || (k < 0 && errno == EINTR)))
            if (k > 0) len += (size_t)k;
        why[len] = '\0';
        close(p[0]);
        fprintf(stderr, "dtrain run: %s\n", why);
        return DT_EXIT_FAILED;
    }
    close(p[0]);
    if (n == 1 && c == 'R') {
        printf("job %s started in the background; job dir %s (see 'dtrain status %s')\n",
               job->name, mo->job_dir, job->name);
        char path[DT__PATH_MAX]; /* fits: checked at the top */
        json_t *mj = dt__path(path, sizeof path, "%s/master.json", mo->job_dir)
                         ? NULL : json_load_file(path, 0, NULL);
        const char *url = json_string_value(json_object_get(mj, "url"));
        const char *tok = json_string_value(json_object_get(mj, "token"));
        if (url && tok) printf("dashboard %s/#token=%s\n", url, tok);
        json_decref(mj);
        return DT_EXIT_OK;
    }
    /* The master could not start, or the job failed while launching: this start's part of
     * its log says why. */
    char *text = NULL;
    size_t len = 0;
    if (dt__read_file(log_path, &text, &len) == DT_OK) {
        if ((size_t)log_start < len) fputs(text + log_start, stderr);
        free(text);
    }
    return DT_EXIT_FAILED;
}

/* A custom resource (TrainJob, TFJob, PyTorchJob) that owns the master's Job: the master
 * writes its status. */
static dt_err resource_of_job(dt__kube *k, const char *ns, const char *job, dt_master_kube *ko) {
    static char res[700];
    static const char *const plurals[][2] = {
        {"TrainJob", "trainjobs"}, {"TFJob", "tfjobs"}, {"PyTorchJob", "pytorchjobs"}};
    char path[512];
    snprintf(path, sizeof path, "/apis/batch/v1/namespaces/%s/jobs/%s", ns, job);
    long status;
    json_t *resp = NULL;
    dt_err e = dt__kube_call(k, "GET", path, NULL, NULL, &status, &resp);
    json_t *o = json_array_get(json_object_get(json_object_get(resp, "metadata"), "ownerReferences"), 0);
    const char *api = json_string_value(json_object_get(o, "apiVersion"));
    const char *kind = json_string_value(json_object_get(o, "kind"));
    const char *name = json_string_value(json_object_get(o, "name"));
    for (size_t i = 0; !e && status == 200 && api && kind && name && i < 3; i++)
        if (!strcmp(kind, plurals[i][0])) {
            snprintf(res, sizeof res, "/apis/%s/namespaces/%s/%s/%s", api, ns, plurals[i][1], name);
            ko->status_resource = res;
        }
    json_decref(resp);
    return e;
}

/* The master pod's owner (its batch/v1 Job): every object the master makes is owned by it
 * too, so deleting the Job deletes the whole job. Read from the pod itself. */
static dt_err in_cluster_owner(dt_master_kube *ko) {
    static char api[64], kind[64], name[256], uid[64];
    const char *pod = getenv("DTRAIN_POD_NAME"), *ns = getenv("DTRAIN_NAMESPACE");
    if (!pod || !ns) return DT_OK; /* not in dtrain's master pod: no owner */
    dt__kube_conn c = {.in_cluster = 1};
    dt__kube *k;
    dt_err e = dt__kube_connect(&k, &c);
    if (e) return e;
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, pod);
    long status;
    json_t *resp = NULL;
    e = dt__kube_call(k, "GET", path, NULL, NULL, &status, &resp);
    if (!e && status == 200) {
        json_t *o = json_array_get(json_object_get(json_object_get(resp, "metadata"), "ownerReferences"), 0);
        const char *v[4] = {json_string_value(json_object_get(o, "apiVersion")),
                            json_string_value(json_object_get(o, "kind")),
                            json_string_value(json_object_get(o, "name")),
                            json_string_value(json_object_get(o, "uid"))};
        if (v[0] && v[1] && v[2] && v[3]) {
            snprintf(api, sizeof api, "%s", v[0]);
            snprintf(kind, sizeof kind, "%s", v[1]);
            snprintf(name, sizeof name, "%s", v[2]);
            snprintf(uid, sizeof uid, "%s", v[3]);
            ko->owner_api_version = api;
            ko->owner_kind = kind;
            ko->owner_name = name;
            ko->owner_uid = uid;
            if (!strcmp(kind, "Job")) e = resource_of_job(k, ns, name, ko);
        }
    } else if (!e) {
        char why[256];
        e = dt_err_set(DT_ERR_IO, "cannot read my own pod %s: %s", pod,
                       dt__kube_why(resp, status, why, sizeof why));
    }
    json_decref(resp);
    dt__kube_free(k);
    return e;
}

/* `dtrain run JOB.yaml --backend kubernetes`: start the job in the cluster, follow it. */
static int run_kubernetes(const dt__cli_cmd *cmd, int argc, char **argv, const dt_master_kube *ko,
                          const dt_master_opts *mo) {
    if (optind != argc - 1)
        return dt__cli_usage_error(cmd, optind >= argc ? "missing JOB.yaml"
                                                       : "expected one JOB.yaml, got %d",
                                   argc - optind);
    const char *spec = argv[optind];
    dt_job_spec *job = NULL;
    dt_err e = dt_job_spec_load(&job, spec);
    if (!e) e = dt_job_spec_check_kubernetes(job);
    if (e) {
        fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
        dt_job_spec_free(job);
        return exit_for(e);
    }
    dt__kube_conn c = {.kubeconfig = ko->kubeconfig, .context = ko->context};
    dt__kube *k = NULL;
    if ((e = dt__kube_connect(&k, &c))) {
        fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
        dt_job_spec_free(job);
        return exit_for(e);
    }
    const char *ns = ko->namespace ? ko->namespace : dt__kube_namespace(k);
    dt__kube_submit_opts so = {.spec_path = spec,
                               .namespace = ns,
                               .image = ko->image,
                               .claim = ko->claim,
                               .stop_grace_s = mo->stop_grace_ms > 0 ? (mo->stop_grace_ms + 999) / 1000 : 30};
    int rc = DT_EXIT_FAILED, outcome = -1;
    if ((e = dt__kube_submit(k, job, &so))) {
        fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
        rc = exit_for(e);
    } else {
        fprintf(stderr, "job %s created in namespace %s (%s); its master is Job %s-master\n",
                job->name, ns, dt__kube_server(k), job->name);
        if ((e = dt__kube_follow(k, job, ns, stderr, &outcome)))
            fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
        static const char *const names[] = {"Succeeded", "Failed", "Stopped"};
        printf("job %s %s\n", job->name, outcome >= 0 ? names[outcome] : "ended (outcome unknown)");
        rc = outcome == 0 ? DT_EXIT_OK : DT_EXIT_FAILED;
    }
    dt__kube_free(k);
    dt_job_spec_free(job);
    return rc;
}

static int run(int argc, char **argv) {
    enum { OPT_JOB_DIR = 256, OPT_RESUME, OPT_DETACH, OPT_BIND, OPT_PORT, OPT_GRACE, OPT_HEARTBEAT,
           OPT_LEASE, OPT_BACKEND, OPT_KUBECONFIG, OPT_CONTEXT, OPT_NAMESPACE, OPT_IMAGE,
           OPT_CLAIM, OPT_IN_CLUSTER, OPT_NETNS };
    static const struct option longopts[] = {
        {"job-dir", required_argument, NULL, OPT_JOB_DIR},
        {"resume", required_argument, NULL, OPT_RESUME},
        {"detach", no_argument, NULL, OPT_DETACH},
        {"bind", required_argument, NULL, OPT_BIND},
        {"port", required_argument, NULL, OPT_PORT},
        {"stop-grace", required_argument, NULL, OPT_GRACE},
        {"heartbeat-timeout", required_argument, NULL, OPT_HEARTBEAT},
        {"lease-timeout", required_argument, NULL, OPT_LEASE},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
        {"context", required_argument, NULL, OPT_CONTEXT},
        {"namespace", required_argument, NULL, OPT_NAMESPACE},
        {"image", required_argument, NULL, OPT_IMAGE},
        {"volume-claim", required_argument, NULL, OPT_CLAIM},
        {"in-cluster", no_argument, NULL, OPT_IN_CLUSTER},
        {"netns", required_argument, NULL, OPT_NETNS},
        {NULL, 0, NULL, 0},
    };
    const dt__cli_cmd *cmd = &dt__cmd_run;
    dt_master_opts mo = {.ready_fd = -1};
    const char *job_dir = NULL, *resume = NULL;
    int detach = 0, kubernetes = 0;
    dt_master_kube ko = {0};
    int64_t v;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_JOB_DIR:
            job_dir = optarg;
            break;
        case OPT_RESUME:
            resume = optarg;
            break;
        case OPT_DETACH:
            detach = 1;
            break;
        case OPT_BIND:
            mo.bind_addr = optarg;
            break;
        case OPT_PORT:
            if (dt__cli_parse_i64(optarg, 1, 65535, &v))
                return dt__cli_usage_error(cmd, "--port: expected 1..65535, got '%s'", optarg);
            mo.port = (int)v;
            break;
        case OPT_GRACE:
            if (dt__cli_parse_i64(optarg, 0, 3600, &v))
                return dt__cli_usage_error(cmd, "--stop-grace: expected 0..3600 seconds, got '%s'",
                                           optarg);
            mo.stop_grace_ms = v ? (int)v * 1000 : 1;
            break;
        case OPT_HEARTBEAT:
        case OPT_LEASE:
            if (dt__cli_parse_i64(optarg, 1, 86400, &v))
                return dt__cli_usage_error(cmd, "%s: expected 1..86400 seconds, got '%s'",
                                           c == OPT_HEARTBEAT ? "--heartbeat-timeout"
                                                              : "--lease-timeout",
                                           optarg);
            *(c == OPT_HEARTBEAT ? &mo.heartbeat_timeout_ms : &mo.lease_timeout_ms) = (int)v * 1000;
            break;
        case OPT_BACKEND:
            if (strcmp(optarg, "local") && strcmp(optarg, "kubernetes"))
                return dt__cli_usage_error(cmd, "--backend: expected local or kubernetes, got '%s'",
                                           optarg);
            kubernetes = !strcmp(optarg, "kubernetes");
            break;
        case OPT_KUBECONFIG:
            ko.kubeconfig = optarg;
            break;
        case OPT_CONTEXT:
            ko.context = optarg;
            break;
        case OPT_NAMESPACE:
            ko.namespace = optarg;
            break;
        case OPT_IMAGE:
            ko.image = optarg;
            break;
        case OPT_CLAIM:
            ko.claim = optarg;
            break;
        case OPT_IN_CLUSTER:
            ko.in_cluster = 1;
            kubernetes = 1;
            break;
        case OPT_NETNS: {
            /* NS=IP,NS=IP,...: cut in place (optarg is argv's); the master checks each */
            static const char *names[64], *hosts[64];
            int n = 0;
            for (char *save = NULL, *tok = strtok_r(optarg, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save)) {
                char *eq = strchr(tok, '=');
                if (!eq || eq == tok || !eq[1])
                    return dt__cli_usage_error(cmd, "--netns: expected NAME=IP, got '%s'", tok);
                if (n == 64) return dt__cli_usage_error(cmd, "--netns: at most 64 hosts");
                *eq = '\0';
                names[n] = tok;
                hosts[n++] = eq + 1;
            }
            if (!n) return dt__cli_usage_error(cmd, "--netns: expected NAME=IP[,NAME=IP...]");
            mo.netns_names = names;
            mo.netns_hosts = hosts;
            mo.nnetns = n;
            break;
        }
        case ':':
            return dt__cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
        default:
            return dt__cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (!kubernetes && (ko.kubeconfig || ko.context || ko.namespace || ko.image || ko.claim))
        return dt__cli_usage_error(cmd, "--kubeconfig, --context, --namespace, --image and "
                                        "--volume-claim need --backend kubernetes");
    if (kubernetes && !ko.in_cluster) return run_kubernetes(cmd, argc, argv, &ko, &mo);
    dt_job_spec *job = NULL;
    dt_err e;
    char default_dir[512];
    if (ko.in_cluster && !resume && job_dir && optind == argc - 1) {
        /* The master pod, made again (deleted, its node lost): its predecessor's journal
         * is on the job's volume, and the job goes on from it. */
        char jpath[DT__PATH_MAX];
        if (dt__path(jpath, sizeof jpath, "%s/journal.jsonl", job_dir) == DT_OK &&
            access(jpath, F_OK) == 0) {
            resume = job_dir;
            job_dir = NULL;
            optind++;
        }
    }
    if (resume) {
        if (optind != argc)
            return dt__cli_usage_error(cmd, "--resume DIR takes no JOB.yaml");
        if (job_dir) return dt__cli_usage_error(cmd, "--resume DIR and --job-dir exclude each other");
        job_dir = resume;
        if ((e = dt_master_load_job(resume, &job))) {
            fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
            return e == DT_ERR_NOTFOUND ? DT_EXIT_USAGE : exit_for(e);
        }
        mo.resume = 1;
    } else {
        if (optind != argc - 1)
            return dt__cli_usage_error(cmd, optind >= argc ? "missing JOB.yaml"
                                                           : "expected one JOB.yaml, got %d",
                                       argc - optind);
        mo.spec_path = argv[optind];
        if ((e = dt_job_spec_load(&job, mo.spec_path))) {
            fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
            return exit_for(e);
        }
        if (!job_dir) {
            snprintf(default_dir, sizeof default_dir, "runs/%s", job->name);
            job_dir = default_dir;
        }
    }
    mo.job_dir = job_dir;
    if (ko.in_cluster) {
        static char url[256], cm[128], secret[128];
        const char *ns = getenv("DTRAIN_NAMESPACE");
        snprintf(url, sizeof url, "http://%s-master.%s.svc:%d", job->name,
                 ns && *ns ? ns : job->namespace, mo.port ? mo.port : 8080);
        snprintf(cm, sizeof cm, "%s-spec", job->name);
        snprintf(secret, sizeof secret, "%s-token", job->name);
        ko.advertise_url = url;
        ko.spec_configmap = cm;
        ko.token_secret = secret;
        if (ns && *ns && !ko.namespace) ko.namespace = ns;
        if ((e = in_cluster_owner(&ko))) {
            fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
            dt_job_spec_free(job);
            return DT_EXIT_FAILED;
        }
        mo.kube = &ko;
        mo.leave_on_signal = 1;
    }
    int rc;
    if (detach) {
        rc = run_detached(job, &mo);
    } else {
        mo.out = stderr;
        mo.live_table = isatty(STDERR_FILENO);
        dt_job_outcome outcome;
        if ((e = dt_master_run(job, &mo, &outcome))) {
            fprintf(stderr, "dtrain run: %s\n", dt_errmsg());
            rc = exit_for(e);
        } else {
            if (outcome == DT_JOB_OUTCOME_LEFT) {
                /* Its pod deleted or evicted: not done, so not exit 0 (its Job would count
                 * the pod a success and make no next master). */
                fprintf(stderr, "job %s left running for the next master\n", job->name);
                rc = 128 + SIGTERM;
            } else {
                rc = report(job, job_dir, outcome);
                /* In its pod the master succeeded when the job ended, however it ended: a
                 * non-zero exit would have the Job make the master again. */
                if (ko.in_cluster) rc = DT_EXIT_OK;
            }
        }
    }
    dt_job_spec_free(job);
    return rc;
}

const dt__cli_cmd dt__cmd_run = {
    .name = "run",
    .summary = "Run a job (TFJob, PyTorchJob or TrainJob) on this machine",
    .usage = usage,
    .run = run,
};
