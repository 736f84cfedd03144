/* job_test.c - job specs (every manifest layout in tests/data/jobs/), replica environments,
 * TF_CONFIG byte for byte, and every malformed case with the file, line and field it names.
 *
 * Error tests edit one line of a known-good TFJob (BASE) and expect DT_ERR_SPEC with a
 * message that starts with "j.yaml:LINE: FIELD.PATH: ...", LINE being that of a marker
 * string in the edited text. */
#include <stdint.h>

#include "dtrain/job.h"
#include "dtrain/ps.h"
#include "dtrain/ring.h"
#include "testing/dt_test.h"
#include "testing/yaml_fixture.h"

#define DATA DT_SOURCE_DIR "/tests/data/jobs/"

static const char BASE[] = "apiVersion: kubeflow.org/v1\n"
                           "kind: TFJob\n"
                           "metadata:\n"
                           "  name: base-job\n"
                           "spec:\n"
                           "  runPolicy:\n"
                           "    cleanPodPolicy: All\n"
                           "  tfReplicaSpecs:\n"
                           "    Chief:\n"
                           "      replicas: 1\n"
                           "      template:\n"
                           "        spec:\n"
                           "          containers:\n"
                           "            - name: tensorflow\n"
                           "              image: x:1\n"
                           "              command: [python, a.py]\n"
                           "              env:\n"
                           "                - {name: A, value: b}\n"
                           "              ports:\n"
                           "                - {name: tfjob-port, containerPort: 2222}\n"
                           "    Worker:\n"
                           "      replicas: 2\n"
                           "      restartPolicy: OnFailure\n"
                           "      template:\n"
                           "        spec:\n"
                           "          containers:\n"
                           "            - name: tensorflow\n"
                           "              args: [python, b.py]\n";

/* Parse text as "j.yaml": DT_ERR_SPEC, no job, and a message that starts with
 * "j.yaml:LINE: " + want, LINE being the line of `at`. */
static int job_fails(const char *text, const char *at, const char *want) {
    char prefix[700];
    snprintf(prefix, sizeof prefix, "j.yaml:%d: %s", line_of(text, at), want);
    dt_job_spec *job = (dt_job_spec *)&prefix; /* must be reset to NULL */
    dt_err_clear();
    dt_err e = dt_job_spec_parse(&job, text, strlen(text), "j.yaml");
    if (e != DT_ERR_SPEC || job || strncmp(dt_errmsg(), prefix, strlen(prefix))) {
        fprintf(stderr, "got %s: \"%s\"\nwant DT_ERR_SPEC: \"%s...\"\n", dt_strerror(e),
                dt_errmsg(), prefix);
        if (e == DT_OK) dt_job_spec_free(job);
        return 0;
    }
    return 1;
}

#define CHECK_FAILS(text, at, want) DT_CHECK(job_fails((text), (at), (want)))
#define CHECK_EDIT_FAILS(from, to, at, want) CHECK_FAILS(edit(BASE, from, to), at, want)

static dt_job_spec *parse_ok(const char *text) {
    dt_job_spec *job = NULL;
    dt_err e = dt_job_spec_parse(&job, text, strlen(text), "j.yaml");
    if (e) fprintf(stderr, "unexpected: %s: %s\n", dt_strerror(e), dt_errmsg());
    return e ? NULL : job;
}

static const char *env_get(const dt_env_var *env, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(env[i].name, name)) return env[i].value;
    return NULL;
}

/* The TF_CONFIG in the env of (t, i), "" when there is none; NULL on error. */
static char *tf_config_of(const dt_job_spec *job, dt_replica_type t, int i,
                          const dt_job_env_opts *o) {
    dt_env_var *env = NULL;
    int n = 0;
    if (dt_job_env(job, t, i, o, &env, &n)) return NULL;
    const char *v = env_get(env, n, "TF_CONFIG");
    char *r = strdup(v ? v : "");
    dt_job_env_free(env, n);
    return r;
}

/* ---- names ---- */

static void test_names(void) {
    DT_CHECK(!strcmp(dt_replica_type_name(DT_REPLICA_TYPE_CHIEF), "chief"));
    DT_CHECK(!strcmp(dt_replica_type_name(DT_REPLICA_TYPE_EVALUATOR), "evaluator"));
    DT_CHECK(dt_replica_type_parse("Worker") == DT_REPLICA_TYPE_WORKER);
    DT_CHECK(dt_replica_type_parse("WORKER") == DT_REPLICA_TYPE_WORKER);
    DT_CHECK(dt_replica_type_parse("pS") == DT_REPLICA_TYPE_PS);
    DT_CHECK(dt_replica_type_parse("MASTER") == DT_REPLICA_TYPE_MASTER);
    DT_CHECK(dt_replica_type_parse("Wrker") == -1);
    DT_CHECK(dt_replica_type_parse("") == -1);
    DT_CHECK(!strcmp(dt_restart_policy_name(DT_RESTART_POLICY_ON_FAILURE), "OnFailure"));
    DT_CHECK(!strcmp(dt_restart_policy_name(DT_RESTART_POLICY_EXIT_CODE), "ExitCode"));
    DT_CHECK(!strcmp(dt_clean_pod_policy_name(DT_CLEAN_POD_POLICY_NONE), "None"));
    DT_CHECK(!strcmp(dt_job_kind_name(DT_JOB_KIND_PYTORCHJOB), "PyTorchJob"));
    DT_CHECK(!strcmp(dt_strategy_name(DT_STRATEGY_PARAMETER_SERVER), "parameter_server"));
    dt_job_spec_free(NULL);
    dt_job_env_free(NULL, 0);
}

/* ---- layouts ---- */

static void test_tfjob_v1(void) {
    dt_job_spec *job = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "tfjob_v1.yaml"));
    DT_CHECK(job->kind == DT_JOB_KIND_TFJOB);
    DT_CHECK(!strcmp(job->api_version, "kubeflow.org/v1"));
    DT_CHECK(!strcmp(job->name, "dist-mnist"));
    DT_CHECK(!strcmp(job->namespace, "kubeflow"));
    DT_CHECK(!strcmp(job->path, DATA "tfjob_v1.yaml"));
    DT_CHECK(job->clean_pod_policy == DT_CLEAN_POD_POLICY_ALL);
    DT_CHECK(job->backoff_limit == 3);
    DT_CHECK(job->active_deadline_seconds == 3600);
    DT_CHECK(job->ttl_seconds_after_finished == 600);
    DT_CHECK(job->success_policy == DT_SUCCESS_POLICY_ALL_WORKERS);
    DT_CHECK(job->strategy == DT_STRATEGY_NONE);
    DT_CHECK(!job->pytorch_env && !job->train);
    DT_CHECK(dt_job_spec_total_replicas(job) == 6);

    const dt_replica_spec *c = &job->replicas[DT_REPLICA_TYPE_CHIEF];
    DT_CHECK(c->present && c->replicas == 1 && c->restart == DT_RESTART_POLICY_EXIT_CODE);
    DT_CHECK(c->line == 22);
    DT_CHECK(c->argc == 5 && c->argv[5] == NULL);
    DT_CHECK(!strcmp(c->argv[0], "python") &&
             !strcmp(c->argv[1], "/var/tf_dist_mnist/dist_mnist.py"));
    DT_CHECK(!strcmp(c->argv[2], "--train_steps") && !strcmp(c->argv[3], "1000"));
    DT_CHECK(!strcmp(c->argv[4], "--sync_replicas=true"));
    DT_CHECK(c->working_dir && !strcmp(c->working_dir, "/var/tf_dist_mnist"));
    DT_CHECK(c->nenv == 2); /* POD_NAME (valueFrom) is skipped */
    DT_CHECK(!strcmp(c->env[0].name, "LOG_LEVEL") && !strcmp(c->env[0].value, "info"));
    DT_CHECK(!strcmp(c->env[1].name, "EMPTY") && !strcmp(c->env[1].value, ""));
    DT_CHECK(c->port == 2222);
    DT_CHECK(!strcmp(c->container, "tensorflow"));
    DT_CHECK(!strcmp(c->image, "kubeflow/tf-dist-mnist-test:1.0"));
    DT_CHECK(!strcmp(c->container_path, "spec.tfReplicaSpecs.Chief.template.spec.containers[0]"));
    DT_CHECK(c->container_line == 32);

    const dt_replica_spec *ps = &job->replicas[DT_REPLICA_TYPE_PS];
    DT_CHECK(ps->present && ps->replicas == 2 && ps->restart == DT_RESTART_POLICY_ALWAYS);
    DT_CHECK(ps->argc == 2 && ps->port == 0 && ps->nenv == 0 && !ps->working_dir);

    /* the container named tensorflow is run, not the first (a sidecar) */
    const dt_replica_spec *w = &job->replicas[DT_REPLICA_TYPE_WORKER];
    DT_CHECK(w->present && w->replicas == 2 && w->restart == DT_RESTART_POLICY_ON_FAILURE);
    DT_CHECK(!strcmp(w->container, "tensorflow"));
    DT_CHECK(!strcmp(w->container_path, "spec.tfReplicaSpecs.Worker.template.spec.containers[1]"));
    DT_CHECK(w->argc == 4 && !strcmp(w->argv[3], "1000"));
    DT_CHECK(w->port == 2223);
    DT_CHECK(w->nenv == 2 && !strcmp(w->env[1].name, "TF_CONFIG"));

    const dt_replica_spec *ev = &job->replicas[DT_REPLICA_TYPE_EVALUATOR];
    DT_CHECK(ev->present && ev->replicas == 1 && ev->restart == DT_RESTART_POLICY_NEVER);
    DT_CHECK(!job->replicas[DT_REPLICA_TYPE_MASTER].present);
    DT_CHECK_OK(dt_job_spec_check_local(job));
    dt_job_spec_free(job);
}

static void test_tfjob_v1_lowercase(void) {
    dt_job_spec *job = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "tfjob_v1_lowercase.yaml"));
    DT_CHECK(!strcmp(job->namespace, "default"));
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].replicas == 3);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_PS].replicas == 1); /* default */
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_EVALUATOR].present);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_EVALUATOR].replicas == 0);
    /* no container named tensorflow: the first; args alone are the command line */
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_EVALUATOR].argc == 2);
    DT_CHECK(job->backoff_limit == -1 && job->active_deadline_seconds == -1 &&
             job->ttl_seconds_after_finished == -1);
    DT_CHECK(job->clean_pod_policy == DT_CLEAN_POD_POLICY_RUNNING);
    DT_CHECK(job->success_policy == DT_SUCCESS_POLICY_DEFAULT);
    DT_CHECK(!strcmp(job->replicas[DT_REPLICA_TYPE_WORKER].argv[2], "print('hi')"));
    /* a type with replicas 0 is an empty list in the cluster map */
    char *tf = tf_config_of(job, DT_REPLICA_TYPE_PS, 0, NULL);
    DT_CHECK(tf && !strcmp(tf, "{\"cluster\":{\"evaluator\":[],\"ps\":[\"127.0.0.1:2222\"],"
                               "\"worker\":[\"127.0.0.1:2223\",\"127.0.0.1:2224\","
                               "\"127.0.0.1:2225\"]},\"task\":{\"type\":\"ps\",\"index\":0},"
                               "\"environment\":\"cloud\"}"));
    free(tf);
    DT_CHECK_OK(dt_job_spec_check_local(job)); /* the evaluator without command has 0 replicas */
    dt_job_spec_free(job);
}

static void test_tfjob_v1alpha2(void) {
    dt_job_spec *job = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "tfjob_v1alpha2.yaml"));
    DT_CHECK(!strcmp(job->api_version, "kubeflow.org/v1alpha2"));
    DT_CHECK(!strcmp(job->name, "mnist-v1alpha2"));
    DT_CHECK(job->clean_pod_policy == DT_CLEAN_POD_POLICY_NONE);
    DT_CHECK(job->backoff_limit == 5 && job->ttl_seconds_after_finished == 100);
    DT_CHECK(job->active_deadline_seconds == -1);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_PS].replicas == 1);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].replicas == 2);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].restart == DT_RESTART_POLICY_NEVER);
    DT_CHECK(!strcmp(job->replicas[DT_REPLICA_TYPE_WORKER].argv[2], "--tf-train-steps=200"));
    dt_job_spec_free(job);
}

static void test_tfjob_v1_early(void) {
    dt_job_spec *job = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "tfjob_v1_early.yaml"));
    DT_CHECK(!strcmp(job->namespace, "ml"));
    DT_CHECK(job->clean_pod_policy == DT_CLEAN_POD_POLICY_RUNNING);
    DT_CHECK(job->backoff_limit == 0 && job->active_deadline_seconds == 7200 &&
             job->ttl_seconds_after_finished == 0);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_MASTER].present);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].replicas == 1);
    char *tf = tf_config_of(job, DT_REPLICA_TYPE_MASTER, 0, &(dt_job_env_opts){.kubernetes = 1});
    DT_CHECK(tf && !strcmp(tf, "{\"cluster\":{\"master\":[\"early-v1-master-0.ml.svc:2222\"],"
                               "\"worker\":[\"early-v1-worker-0.ml.svc:2222\"]},"
                               "\"task\":{\"type\":\"master\",\"index\":0},"
                               "\"environment\":\"cloud\"}"));
    free(tf);
    dt_job_spec_free(job);
}

static void test_tfjob_v1alpha1(void) {
    dt_job_spec *job = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "tfjob_v1alpha1.yaml"));
    DT_CHECK(!strcmp(job->api_version, "kubeflow.org/v1alpha1"));
    DT_CHECK(!strcmp(job->name, "legacy-tf"));
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_MASTER].replicas == 1);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].replicas == 2);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_PS].replicas == 1);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].port == 2300);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_PS].port == 0);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_MASTER].restart == DT_RESTART_POLICY_NEVER);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].line == 25); /* its tfReplicaType */
    DT_CHECK(!strcmp(job->replicas[DT_REPLICA_TYPE_WORKER].container_path,
                     "spec.replicaSpecs[1].template.spec.containers[0]"));
    char *tf = tf_config_of(job, DT_REPLICA_TYPE_WORKER, 1,
                            &(dt_job_env_opts){.kubernetes = 1, .cluster_domain = "cluster.local"});
    DT_CHECK(tf && !strcmp(tf, "{\"cluster\":{"
                               "\"master\":[\"legacy-tf-master-0.default.svc.cluster.local:2222\"],"
                               "\"ps\":[\"legacy-tf-ps-0.default.svc.cluster.local:2222\"],"
                               "\"worker\":[\"legacy-tf-worker-0.default.svc.cluster.local:2300\","
                               "\"legacy-tf-worker-1.default.svc.cluster.local:2300\"]},"
                               "\"task\":{\"type\":\"worker\",\"index\":1},"
                               "\"environment\":\"cloud\"}"));
    free(tf);
    dt_job_spec_free(job);
}

static void test_pytorchjob(void) {
    dt_job_spec *job = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "pytorchjob.yaml"));
    DT_CHECK(job->kind == DT_JOB_KIND_PYTORCHJOB && job->pytorch_env);
    DT_CHECK(job->clean_pod_policy == DT_CLEAN_POD_POLICY_NONE);
    const dt_replica_spec *m = &job->replicas[DT_REPLICA_TYPE_MASTER];
    const dt_replica_spec *w = &job->replicas[DT_REPLICA_TYPE_WORKER];
    DT_CHECK(m->replicas == 1 && w->replicas == 3);
    DT_CHECK(m->port == 29500 && w->port == 0);
    DT_CHECK(w->restart == DT_RESTART_POLICY_ON_FAILURE); /* the PyTorchJob default */
    DT_CHECK(!strcmp(m->container, "pytorch") && m->argc == 6);

    /* Kubernetes form: exactly this list, in this order; the container's RANK is replaced,
     * no TF_CONFIG for a PyTorchJob */
    dt_env_var *env = NULL;
    int n = 0;
    DT_CHECK_OK(dt_job_env(
        job, DT_REPLICA_TYPE_WORKER, 2,
        &(dt_job_env_opts){.kubernetes = 1, .master_url = "http://m:7070", .job_token = "tok"},
        &env, &n));
    static const char *const want[][2] = {{"NCCL_DEBUG", "INFO"},
                                          {"PYTHONUNBUFFERED", "0"},
                                          {"MASTER_PORT", "29500"},
                                          {"MASTER_ADDR", "pytorch-dist-mnist-master-0"},
                                          {"WORLD_SIZE", "4"},
                                          {"RANK", "3"},
                                          {"DTRAIN_MASTER", "http://m:7070"},
                                          {"DTRAIN_JOB_TOKEN", "tok"},
                                          {"DTRAIN_REPLICA", "worker-2"}};
    DT_CHECK(n == 9);
    for (int i = 0; i < n && i < 9; i++)
        if (strcmp(env[i].name, want[i][0]) || strcmp(env[i].value, want[i][1]))
            DT_FAIL("env[%d] = %s=%s, want %s=%s", i, env[i].name, env[i].value, want[i][0],
                    want[i][1]);
    dt_job_env_free(env, n);

    /* master: rank 0; local form with ports */
    static const int mp[] = {41000}, wp[] = {41001, 41002, 41003};
    const int *ports[DT_REPLICA_TYPE__COUNT] = {
        [DT_REPLICA_TYPE_MASTER] = mp, [DT_REPLICA_TYPE_WORKER] = wp};
    DT_CHECK_OK(dt_job_env(job, DT_REPLICA_TYPE_MASTER, 0,
                           &(dt_job_env_opts){.ports = ports, .bind_host = "10.1.2.3"}, &env, &n));
    DT_CHECK(n == 6);
    DT_CHECK(!strcmp(env_get(env, n, "RANK"), "0"));
    DT_CHECK(!strcmp(env_get(env, n, "MASTER_ADDR"), "10.1.2.3"));
    DT_CHECK(!strcmp(env_get(env, n, "MASTER_PORT"), "41000"));
    DT_CHECK(!strcmp(env_get(env, n, "WORLD_SIZE"), "4"));
    DT_CHECK(!env_get(env, n, "TF_CONFIG") && !env_get(env, n, "DTRAIN_MASTER"));
    dt_job_env_free(env, n);
    /* placeholders: the master is first in the start order */
    DT_CHECK_OK(dt_job_env(job, DT_REPLICA_TYPE_WORKER, 0, NULL, &env, &n));
    DT_CHECK(!strcmp(env_get(env, n, "MASTER_ADDR"), "127.0.0.1"));
    DT_CHECK(!strcmp(env_get(env, n, "MASTER_PORT"), "2222"));
    DT_CHECK(!strcmp(env_get(env, n, "RANK"), "1"));
    dt_job_env_free(env, n);
    dt_job_spec_free(job);
}

static void test_trainjob(void) {
    dt_job_spec *job = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "trainjob.yaml"));
    DT_CHECK(job->kind == DT_JOB_KIND_TRAINJOB && !strcmp(job->api_version, "dtrain/v1"));
    DT_CHECK(!strcmp(job->name, "synthetic-ps") && !strcmp(job->namespace, "research"));
    DT_CHECK(job->train && job->train->seed == 3 && job->train->nlayers == 2);
    DT_CHECK(job->train->train.format == DT_DATA_SYNTHETIC && job->train->batch_size == 32);
    DT_CHECK(!strcmp(job->train->name, "synthetic-ps"));
    DT_CHECK(job->strategy == DT_STRATEGY_PARAMETER_SERVER);
    DT_CHECK(job->backoff_limit == 2 && !job->pytorch_env);
    const dt_replica_spec *c = &job->replicas[DT_REPLICA_TYPE_CHIEF];
    const dt_replica_spec *w = &job->replicas[DT_REPLICA_TYPE_WORKER];
    DT_CHECK(c->present && c->replicas == 1 && c->restart == DT_RESTART_POLICY_EXIT_CODE);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_PS].replicas == 1);
    DT_CHECK(w->replicas == 2 && w->restart == DT_RESTART_POLICY_ON_FAILURE);
    DT_CHECK(w->nenv == 1 && !strcmp(w->env[0].value, "1"));
    DT_CHECK(!c->argv && !w->argv && c->argc == 0);
    DT_CHECK_OK(dt_job_spec_check_local(job));
    char *tf = tf_config_of(job, DT_REPLICA_TYPE_WORKER, 1, NULL);
    DT_CHECK(tf && !strcmp(tf, "{\"cluster\":{\"chief\":[\"127.0.0.1:2222\"],"
                               "\"ps\":[\"127.0.0.1:2223\"],\"worker\":[\"127.0.0.1:2224\","
                               "\"127.0.0.1:2225\"]},\"task\":{\"type\":\"worker\",\"index\":1},"
                               "\"environment\":\"cloud\"}"));
    free(tf);
    dt_job_spec_free(job);

    /* `dtrain train` reads the same file: the job keys are allowed there and ignored */
    dt_spec *sp = NULL;
    DT_CHECK_OK(dt_spec_load(&sp, DATA "trainjob.yaml"));
    DT_CHECK(sp->seed == 3 && sp->nlayers == 2);
    dt_spec_free(sp);
}

static const char TRAIN[] = "apiVersion: dtrain/v1\n"
                            "kind: TrainJob\n"
                            "metadata: {name: tj}\n"
                            "spec:\n"
                            "  data: {train: {format: synthetic, samples: 8, shape: [2], "
                            "classes: 2}}\n"
                            "  model: {layers: [{type: dense, units: 2}]}\n"
                            "  optimizer: {type: sgd}\n";

static void test_trainjob_defaults(void) {
    /* no replicas: one worker, allreduce, no TF_CONFIG */
    dt_job_spec *job = parse_ok(TRAIN);
    DT_CHECK(job);
    DT_CHECK(dt_job_spec_total_replicas(job) == 1);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].present);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].restart == DT_RESTART_POLICY_ON_FAILURE); /* dtrain train: OnFailure */
    DT_CHECK(job->strategy == DT_STRATEGY_ALLREDUCE);
    DT_CHECK(!strcmp(job->namespace, "default"));
    char *tf = tf_config_of(job, DT_REPLICA_TYPE_WORKER, 0, NULL);
    DT_CHECK(tf && !strcmp(tf, ""));
    free(tf);
    dt_job_spec_free(job);

    /* pytorchEnv without a master: rank 0 is the chief; WORLD_SIZE counts every replica */
    char text[2048];
    snprintf(text, sizeof text, "%s  replicas: {worker: 2, chief: 1}\n  pytorchEnv: true\n", TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK(job->pytorch_env && job->strategy == DT_STRATEGY_ALLREDUCE);
    dt_env_var *env = NULL;
    int n = 0;
    DT_CHECK_OK(
        dt_job_env(job, DT_REPLICA_TYPE_WORKER, 1, &(dt_job_env_opts){.kubernetes = 1}, &env, &n));
    DT_CHECK(!strcmp(env_get(env, n, "MASTER_ADDR"), "tj-chief-0"));
    DT_CHECK(!strcmp(env_get(env, n, "MASTER_PORT"), "23456"));
    DT_CHECK(!strcmp(env_get(env, n, "RANK"), "2"));
    DT_CHECK(!strcmp(env_get(env, n, "WORLD_SIZE"), "3"));
    DT_CHECK(env_get(env, n, "TF_CONFIG") != NULL); /* a TrainJob gets both */
    dt_job_env_free(env, n);
    dt_job_spec_free(job);

    /* only workers: rank 0 is worker-0 */
    snprintf(text, sizeof text, "%s  replicas: {Worker: 2}\n  pytorchEnv: true\n", TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK_OK(
        dt_job_env(job, DT_REPLICA_TYPE_WORKER, 1, &(dt_job_env_opts){.kubernetes = 1}, &env, &n));
    DT_CHECK(!strcmp(env_get(env, n, "MASTER_ADDR"), "tj-worker-0"));
    DT_CHECK(!strcmp(env_get(env, n, "RANK"), "1"));
    dt_job_env_free(env, n);
    dt_job_spec_free(job);
}

static void test_multidoc(void) {
    dt_job_spec *job = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "multidoc.yaml"));
    DT_CHECK(!strcmp(job->name, "multi-doc"));
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].replicas == 2);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].line == 21);
    DT_CHECK(dt_job_spec_total_replicas(job) == 2);
    dt_job_spec_free(job);
}

static void test_single_replica(void) {
    dt_job_spec *job = NULL;
    dt_env_var *env = NULL;
    int n = 0;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "single.yaml"));
    DT_CHECK(dt_job_spec_total_replicas(job) == 1);
    DT_CHECK(job->replicas[DT_REPLICA_TYPE_WORKER].nenv == 3);
    DT_CHECK_OK(dt_job_env(job, DT_REPLICA_TYPE_WORKER, 0,
                           &(dt_job_env_opts){.master_url = "http://127.0.0.1:9000"}, &env, &n));
    /* no TF_CONFIG but the replica's own address (the placeholder port without ports); the
     * repeated A keeps its place with the last value */
    DT_CHECK(n == 5);
    DT_CHECK(!strcmp(env[0].name, "A") && !strcmp(env[0].value, "3"));
    DT_CHECK(!strcmp(env[1].name, "B") && !strcmp(env[1].value, "2"));
    DT_CHECK(!strcmp(env[2].name, "DTRAIN_ADDRESS") && !strcmp(env[2].value, "127.0.0.1:2222"));
    DT_CHECK(!strcmp(env[3].name, "DTRAIN_MASTER") &&
             !strcmp(env[3].value, "http://127.0.0.1:9000"));
    DT_CHECK(!strcmp(env[4].name, "DTRAIN_REPLICA") && !strcmp(env[4].value, "worker-0"));
    dt_job_env_free(env, n);
    /* on Kubernetes: its service's name */
    DT_CHECK_OK(dt_job_env(job, DT_REPLICA_TYPE_WORKER, 0, &(dt_job_env_opts){.kubernetes = 1},
                           &env, &n));
    int found = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(env[i].name, "DTRAIN_ADDRESS")) {
            found = 1;
            DT_CHECK(strstr(env[i].value, "-worker-0.") && strstr(env[i].value, ".svc:2222"));
        }
    DT_CHECK(found);
    dt_job_env_free(env, n);
    dt_job_spec_free(job);
}

/* ---- TF_CONFIG ---- */

#define DIST_MNIST_CLUSTER_K8S                                                                     \
    "{\"cluster\":{\"chief\":[\"dist-mnist-chief-0.kubeflow.svc:2222\"],"                          \
    "\"evaluator\":[\"dist-mnist-evaluator-0.kubeflow.svc:2222\"],"                                \
    "\"ps\":[\"dist-mnist-ps-0.kubeflow.svc:2222\",\"dist-mnist-ps-1.kubeflow.svc:2222\"],"        \
    "\"worker\":[\"dist-mnist-worker-0.kubeflow.svc:2223\","                                       \
    "\"dist-mnist-worker-1.kubeflow.svc:2223\"]},"

static void test_tf_config_kubernetes(void) {
    dt_job_spec *job = NULL;
    char *tf = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "tfjob_v1.yaml"));
    dt_job_env_opts o = {.kubernetes = 1};
    DT_CHECK_OK(dt_job_tf_config(job, DT_REPLICA_TYPE_WORKER, 1, &o, &tf));
    DT_CHECK(!strcmp(tf, DIST_MNIST_CLUSTER_K8S
                     "\"task\":{\"type\":\"worker\",\"index\":1},\"environment\":\"cloud\"}"));
    free(tf);
    DT_CHECK_OK(dt_job_tf_config(job, DT_REPLICA_TYPE_EVALUATOR, 0, &o, &tf));
    DT_CHECK(!strcmp(tf, DIST_MNIST_CLUSTER_K8S
                     "\"task\":{\"type\":\"evaluator\",\"index\":0},\"environment\":\"cloud\"}"));
    free(tf);
    /* the same in the env, which the container's own TF_CONFIG does not override */
    tf = tf_config_of(job, DT_REPLICA_TYPE_WORKER, 1, &o);
    DT_CHECK(tf && !strcmp(tf, DIST_MNIST_CLUSTER_K8S "\"task\":{\"type\":\"worker\","
                                                      "\"index\":1},\"environment\":\"cloud\"}"));
    free(tf);
    /* namespace override and cluster domain */
    o.namespace = "team-a";
    o.cluster_domain = "cluster.local";
    DT_CHECK_OK(dt_job_tf_config(job, DT_REPLICA_TYPE_CHIEF, 0, &o, &tf));
    DT_CHECK(!strcmp(tf, "{\"cluster\":{\"chief\":[\"dist-mnist-chief-0.team-a.svc.cluster.local:"
                         "2222\"],\"evaluator\":[\"dist-mnist-evaluator-0.team-a.svc.cluster."
                         "local:2222\"],\"ps\":[\"dist-mnist-ps-0.team-a.svc.cluster.local:2222\","
                         "\"dist-mnist-ps-1.team-a.svc.cluster.local:2222\"],\"worker\":["
                         "\"dist-mnist-worker-0.team-a.svc.cluster.local:2223\",\"dist-mnist-"
                         "worker-1.team-a.svc.cluster.local:2223\"]},\"task\":{\"type\":\"chief\","
                         "\"index\":0},\"environment\":\"cloud\"}"));
    free(tf);
    dt_job_spec_free(job);
}

static void test_tf_config_local(void) {
    dt_job_spec *job = NULL;
    char *tf = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "tfjob_v1.yaml"));
    /* placeholders: 2222 + position in start order (chief, master, ps, worker, evaluator) */
    DT_CHECK_OK(dt_job_tf_config(job, DT_REPLICA_TYPE_PS, 1, NULL, &tf));
    DT_CHECK(!strcmp(tf, "{\"cluster\":{\"chief\":[\"127.0.0.1:2222\"],\"evaluator\":["
                         "\"127.0.0.1:2227\"],\"ps\":[\"127.0.0.1:2223\",\"127.0.0.1:2224\"],"
                         "\"worker\":[\"127.0.0.1:2225\",\"127.0.0.1:2226\"]},\"task\":{\"type\":"
                         "\"ps\",\"index\":1},\"environment\":\"cloud\"}"));
    free(tf);
    /* ports the master allocated, and a bind host */
    static const int cp[] = {40001}, pp[] = {40002, 40003}, wp[] = {40004, 40005}, ep[] = {40006};
    const int *ports[DT_REPLICA_TYPE__COUNT] = {[DT_REPLICA_TYPE_CHIEF] = cp,
                                                [DT_REPLICA_TYPE_PS] = pp,
                                                [DT_REPLICA_TYPE_WORKER] = wp,
                                                [DT_REPLICA_TYPE_EVALUATOR] = ep};
    dt_job_env_opts o = {.ports = ports, .bind_host = "192.168.1.20"};
    DT_CHECK_OK(dt_job_tf_config(job, DT_REPLICA_TYPE_WORKER, 0, &o, &tf));
    DT_CHECK(!strcmp(tf, "{\"cluster\":{\"chief\":[\"192.168.1.20:40001\"],\"evaluator\":["
                         "\"192.168.1.20:40006\"],\"ps\":[\"192.168.1.20:40002\","
                         "\"192.168.1.20:40003\"],\"worker\":[\"192.168.1.20:40004\","
                         "\"192.168.1.20:40005\"]},\"task\":{\"type\":\"worker\",\"index\":0},"
                         "\"environment\":\"cloud\"}"));
    free(tf);

    /* the whole env of worker-0: container env (minus TF_CONFIG), then dtrain's */
    dt_env_var *env = NULL;
    int n = 0;
    o.master_url = "http://127.0.0.1:7070";
    o.job_token = "s3cret";
    DT_CHECK_OK(dt_job_env(job, DT_REPLICA_TYPE_WORKER, 0, &o, &env, &n));
    DT_CHECK(n == 5);
    DT_CHECK(!strcmp(env[0].name, "LOG_LEVEL") && !strcmp(env[0].value, "debug"));
    DT_CHECK(!strcmp(env[1].name, "TF_CONFIG") && !strncmp(env[1].value, "{\"cluster\"", 10));
    DT_CHECK(!strcmp(env[2].name, "DTRAIN_MASTER") && !strcmp(env[2].value, o.master_url));
    DT_CHECK(!strcmp(env[3].name, "DTRAIN_JOB_TOKEN") && !strcmp(env[3].value, "s3cret"));
    DT_CHECK(!strcmp(env[4].name, "DTRAIN_REPLICA") && !strcmp(env[4].value, "worker-0"));
    dt_job_env_free(env, n);
    dt_job_spec_free(job);
}

static void test_env_bad_args(void) {
    dt_job_spec *job = NULL;
    dt_env_var *env = NULL;
    int n = 0;
    char *tf = NULL;
    DT_CHECK_OK(dt_job_spec_load(&job, DATA "tfjob_v1.yaml"));
    DT_CHECK_ERR(dt_job_env(job, DT_REPLICA_TYPE_WORKER, 2, NULL, &env, &n), DT_ERR_ARG,
                 "no replica worker-2 (it has 2 worker replicas)");
    DT_CHECK(!env && n == 0);
    DT_CHECK_ERR(dt_job_env(job, DT_REPLICA_TYPE_MASTER, 0, NULL, &env, &n), DT_ERR_ARG,
                 "no replica master-0");
    DT_CHECK_ERR(dt_job_tf_config(job, DT_REPLICA_TYPE__COUNT, 0, NULL, &tf), DT_ERR_ARG,
                 "out of range");
    DT_CHECK_ERR(dt_job_tf_config(job, DT_REPLICA_TYPE_PS, 0,
                                  &(dt_job_env_opts){.kubernetes = 1, .namespace = "Bad_NS"}, &tf),
                 DT_ERR_ARG, "namespace 'Bad_NS'");
    DT_CHECK_ERR(
        dt_job_tf_config(job, DT_REPLICA_TYPE_PS, 0, &(dt_job_env_opts){.bind_host = "a\"b"}, &tf),
        DT_ERR_ARG, "bind host");
    static const int zero[] = {0, 0};
    const int *ports[DT_REPLICA_TYPE__COUNT] = {[DT_REPLICA_TYPE_PS] = zero};
    DT_CHECK_ERR(
        dt_job_env(job, DT_REPLICA_TYPE_PS, 0, &(dt_job_env_opts){.ports = ports}, &env, &n),
        DT_ERR_ARG, "no valid port for replica chief-0");
    DT_CHECK(!tf && !env);
    dt_job_spec_free(job);
}

/* ---- local runs ---- */

static void test_check_local(void) {
    const char *text =
        edit(BASE, "              args: [python, b.py]\n", "              image: x:2\n");
    dt_job_spec *job = parse_ok(text);
    DT_CHECK(job);
    char want[200];
    snprintf(want, sizeof want,
             "j.yaml:%d: spec.tfReplicaSpecs.Worker.template.spec.containers[0].command: required "
             "to run locally: without Kubernetes the image's entrypoint is not available",
             line_of(text, "            - name: tensorflow\n              image: x:2"));
    DT_CHECK_ERR(dt_job_spec_check_local(job), DT_ERR_SPEC, want);
    dt_job_spec_free(job);
    /* fine with replicas 0 */
    DT_CHECK((job = parse_ok(edit(text, "replicas: 2", "replicas: 0"))));
    DT_CHECK_OK(dt_job_spec_check_local(job));
    dt_job_spec_free(job);
}

/* ---- tolerance ---- */

static void test_kubernetes_fields_tolerated(void) {
    const char *text = edit(BASE, "              image: x:1\n",
                            "              image: x:1\n"
                            "              imagePullPolicy: Always\n"
                            "              resources: {limits: {nvidia.com/gpu: 1}}\n"
                            "              volumeMounts: [{name: d, mountPath: /d}]\n"
                            "              securityContext: {runAsUser: 1000}\n"
                            "              envFrom: [{configMapRef: {name: cfg}}]\n");
    text = edit(text, "        spec:\n          containers:\n",
                "        spec:\n          volumes: [{name: d, emptyDir: {}}]\n"
                "          nodeSelector: {a: b}\n          hostNetwork: true\n"
                "          someFutureField: {x: [1, 2]}\n          containers:\n");
    dt_job_spec *job = parse_ok(text);
    DT_CHECK(job);
    dt_job_spec_free(job);
    /* metadata extras, status, a sidecar with anything */
    text = edit(BASE, "  name: base-job\n",
                "  name: base-job\n  uid: 1234\n  labels: {a: b}\n  generation: 3\n");
    text = edit(text, "spec:\n", "status: {conditions: []}\nspec:\n");
    DT_CHECK((job = parse_ok(text)));
    dt_job_spec_free(job);
}

/* ---- errors ---- */

static void test_err_replica_types(void) {
    CHECK_EDIT_FAILS("    Worker:\n", "    Wrker:\n", "Wrker",
                     "spec.tfReplicaSpecs.Wrker: unknown replica type 'Wrker' (allowed: Chief, "
                     "Master, Worker, PS, Evaluator)");
    char text[8192];
    snprintf(text, sizeof text, "%s    worker: {}\n", BASE);
    CHECK_FAILS(text, "    worker: {}",
                "spec.tfReplicaSpecs.worker: replica type worker given twice (also at line 21)");
    snprintf(text, sizeof text, "%s    Master: {replicas: 1}\n", BASE);
    CHECK_FAILS(text, "    Master:",
                "spec.tfReplicaSpecs.Master: a job has a Chief or a Master, not both (Chief at "
                "line 9)");
    snprintf(text, sizeof text, "%s    [a, b]: {}\n", BASE);
    CHECK_FAILS(text, "[a, b]", "spec.tfReplicaSpecs.?: a replica type must be a plain string");
    CHECK_FAILS("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: a}\n"
                "spec: {tfReplicaSpecs: []}\n",
                "spec", "spec.tfReplicaSpecs: expected a mapping, got a list");
    CHECK_FAILS("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: a}\n"
                "spec: {tfReplicaSpecs: {}}\n",
                "spec", "spec.tfReplicaSpecs: the job has no replicas");
    CHECK_FAILS("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {}\n", "spec",
                "spec.tfReplicaSpecs: required field missing");
}

static void test_err_replicas(void) {
    CHECK_EDIT_FAILS("replicas: 2", "replicas: -1", "replicas: -1",
                     "spec.tfReplicaSpecs.Worker.replicas: expected a non-negative integer, got "
                     "'-1'");
    CHECK_EDIT_FAILS("replicas: 2", "replicas: two", "replicas: two",
                     "spec.tfReplicaSpecs.Worker.replicas: expected a non-negative integer, got "
                     "'two'");
    CHECK_EDIT_FAILS("replicas: 2", "replicas: 1.5", "replicas: 1.5",
                     "spec.tfReplicaSpecs.Worker.replicas: expected a non-negative integer");
    CHECK_EDIT_FAILS("replicas: 2", "replicas: \"2\"", "replicas: \"2\"",
                     "spec.tfReplicaSpecs.Worker.replicas: expected a non-negative integer");
    CHECK_EDIT_FAILS("replicas: 2", "replicas: 5000", "replicas: 5000",
                     "spec.tfReplicaSpecs.Worker.replicas: expected a non-negative integer at "
                     "most 1024, got '5000'");
    CHECK_EDIT_FAILS("replicas: 1", "replicas: 2", "replicas: 2",
                     "spec.tfReplicaSpecs.Chief.replicas: a job runs at most one chief, got 2");
    const char *zero = edit(edit(BASE, "replicas: 1", "replicas: 0"), "replicas: 2", "replicas: 0");
    CHECK_FAILS(zero, "tfReplicaSpecs",
                "spec.tfReplicaSpecs: the job has no replicas (every replica type has replicas: "
                "0)");
    CHECK_EDIT_FAILS("restartPolicy: OnFailure", "restartPolicy: Sometimes", "Sometimes",
                     "spec.tfReplicaSpecs.Worker.restartPolicy: expected one of Never, Always, "
                     "OnFailure, ExitCode, got 'Sometimes'");
    CHECK_EDIT_FAILS("      replicas: 2\n", "      replicas: 2\n      replcas: 3\n", "replcas",
                     "spec.tfReplicaSpecs.Worker.replcas: unknown key 'replcas' for a replica "
                     "spec (allowed: replicas, template, restartPolicy)");
    char text[8192];
    snprintf(text, sizeof text, "%s    Evaluator: 2\n", BASE);
    CHECK_FAILS(text, "Evaluator", "spec.tfReplicaSpecs.Evaluator: expected a mapping, got '2'");
}

static void test_err_templates(void) {
    /* the worker's template, cut off or emptied */
    static const char wt[] = "      template:\n        spec:\n          containers:\n"
                             "            - name: tensorflow\n              args: [python, b.py]\n";
    CHECK_EDIT_FAILS(wt, "",
                     "    Worker:", "spec.tfReplicaSpecs.Worker.template: required field missing");
    CHECK_EDIT_FAILS(wt, "      template: {metadata: {}}\n", "template: {metadata",
                     "spec.tfReplicaSpecs.Worker.template.spec: required field missing");
    CHECK_EDIT_FAILS(wt, "      template:\n        spec: {hostNetwork: true}\n", "spec: {host",
                     "spec.tfReplicaSpecs.Worker.template.spec.containers: required field missing");
    CHECK_EDIT_FAILS(wt, "      template:\n        spec:\n          containers: []\n",
                     "containers: []",
                     "spec.tfReplicaSpecs.Worker.template.spec.containers: expected a non-empty "
                     "list of containers, got an empty list");
    CHECK_EDIT_FAILS(wt, "      template:\n        spec:\n          containers: {name: a}\n",
                     "containers: {",
                     "spec.tfReplicaSpecs.Worker.template.spec.containers: expected a non-empty "
                     "list of containers, got a mapping");
    CHECK_EDIT_FAILS(wt, "      template:\n        spec:\n          containers: [x]\n",
                     "containers: [x]",
                     "spec.tfReplicaSpecs.Worker.template.spec.containers[0]: expected a mapping, "
                     "got 'x'");
    CHECK_EDIT_FAILS(wt, "      template:\n        sepc: {}\n", "sepc",
                     "spec.tfReplicaSpecs.Worker.template.sepc: unknown key 'sepc' for a pod "
                     "template (allowed: metadata, spec)");
}

static void test_err_containers(void) {
    CHECK_EDIT_FAILS("image: x:1", "imag: x:1", "imag:",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].imag: unknown key "
                     "'imag' for a container (allowed: name, image, command, args, env, "
                     "workingDir, ports, imagePullPolicy");
    CHECK_EDIT_FAILS("command: [python, a.py]", "command: python a.py", "command:",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].command: expected a "
                     "list of strings (e.g. [python, train.py]), got 'python a.py'");
    CHECK_EDIT_FAILS("command: [python, a.py]", "command: [python, [a]]", "command:",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].command[1]: expected a "
                     "string, got a list");
    CHECK_EDIT_FAILS("args: [python, b.py]", "args: [python, ~]", "args:",
                     "spec.tfReplicaSpecs.Worker.template.spec.containers[0].args[1]: expected a "
                     "string, got nothing");
    CHECK_EDIT_FAILS("{name: A, value: b}", "{value: b}", "{value: b}",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].env[0].name: required "
                     "field missing");
    CHECK_EDIT_FAILS("{name: A, value: b}", "{name: A=B, value: b}", "A=B",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].env[0].name: 'A=B' is "
                     "not a valid variable name");
    CHECK_EDIT_FAILS("{name: A, value: b}", "{name: A, value: b, valueFrom: {}}", "valueFrom",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].env[0].valueFrom: give "
                     "value or valueFrom, not both");
    CHECK_EDIT_FAILS("{name: A, value: b}", "{name: A, valu: b}", "valu:",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].env[0].valu: unknown "
                     "key 'valu' for an environment variable (allowed: name, value, valueFrom)");
    CHECK_EDIT_FAILS("              env:\n                - {name: A, value: b}\n",
                     "              env: {A: b}\n", "env:",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].env: expected a list, "
                     "got a mapping");
    CHECK_EDIT_FAILS("containerPort: 2222", "containerPort: 70000", "70000",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].ports[0]."
                     "containerPort: expected a positive integer at most 65535, got '70000'");
    CHECK_EDIT_FAILS("{name: tfjob-port, containerPort: 2222}", "{name: tfjob-port}", "tfjob-port",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].ports[0]."
                     "containerPort: required field missing");
    CHECK_EDIT_FAILS("              image: x:1\n",
                     "              image: x:1\n              workingDir: [a]\n", "workingDir",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers[0].workingDir: expected "
                     "a string, got a list");
}

static void test_err_policies(void) {
    CHECK_EDIT_FAILS("cleanPodPolicy: All", "cleanPodPolicy: Some", "Some",
                     "spec.runPolicy.cleanPodPolicy: expected one of Running, All, None, got "
                     "'Some'");
    CHECK_EDIT_FAILS("    cleanPodPolicy: All\n", "    cleanPodPolicy: All\n    backofLimit: 3\n",
                     "backofLimit",
                     "spec.runPolicy.backofLimit: unknown key 'backofLimit' (allowed: "
                     "cleanPodPolicy, backoffLimit, activeDeadlineSeconds, "
                     "ttlSecondsAfterFinished, schedulingPolicy, suspend, managedBy)");
    CHECK_EDIT_FAILS("    cleanPodPolicy: All\n", "    backoffLimit: -1\n", "backoffLimit",
                     "spec.runPolicy.backoffLimit: expected a non-negative integer, got '-1'");
    CHECK_EDIT_FAILS("    cleanPodPolicy: All\n", "    activeDeadlineSeconds: 0\n", "active",
                     "spec.runPolicy.activeDeadlineSeconds: expected a positive integer, got '0'");
    CHECK_EDIT_FAILS("    cleanPodPolicy: All\n", "    ttlSecondsAfterFinished: soon\n", "ttl",
                     "spec.runPolicy.ttlSecondsAfterFinished: expected a non-negative integer");
    CHECK_EDIT_FAILS("  runPolicy:\n", "  cleanPodPolicy: None\n  runPolicy:\n",
                     "cleanPodPolicy: None",
                     "spec.cleanPodPolicy: also given as spec.runPolicy.cleanPodPolicy at line 8: "
                     "give it in one place");
    CHECK_EDIT_FAILS("  runPolicy:\n", "  successPolicy: AllChiefs\n  runPolicy:\n", "AllChiefs",
                     "spec.successPolicy: expected \"\" or AllWorkers, got 'AllChiefs'");
    CHECK_EDIT_FAILS("  runPolicy:\n", "  enableDynamicWorker: maybe\n  runPolicy:\n", "maybe",
                     "spec.enableDynamicWorker: expected true or false, got 'maybe'");
    CHECK_EDIT_FAILS("  runPolicy:\n", "  tfReplicaSpec: {}\n  runPolicy:\n", "tfReplicaSpec:",
                     "spec.tfReplicaSpec: unknown key 'tfReplicaSpec' (allowed: tfReplicaSpecs, "
                     "runPolicy, successPolicy, enableDynamicWorker, cleanPodPolicy");
    CHECK_EDIT_FAILS("  runPolicy:\n    cleanPodPolicy: All\n", "  runPolicy: All\n", "runPolicy",
                     "spec.runPolicy: expected a mapping, got 'All'");
    /* successPolicy "" and empty are the default */
    dt_job_spec *job =
        parse_ok(edit(BASE, "  runPolicy:\n", "  successPolicy: \"\"\n  runPolicy:\n"));
    DT_CHECK(job && job->success_policy == DT_SUCCESS_POLICY_DEFAULT);
    dt_job_spec_free(job);
    /* v1alpha2 has no runPolicy */
    CHECK_EDIT_FAILS("kubeflow.org/v1\n", "kubeflow.org/v1alpha2\n", "runPolicy",
                     "spec.runPolicy: unknown key 'runPolicy' (allowed: tfReplicaSpecs, "
                     "cleanPodPolicy");
}

static void test_err_metadata(void) {
    CHECK_EDIT_FAILS("name: base-job", "name: Base_Job", "Base_Job",
                     "metadata.name: 'Base_Job' is not a valid name: use at most 63 lowercase "
                     "letters, digits and '-', starting with a letter and not ending with '-'");
    CHECK_EDIT_FAILS("name: base-job", "name: 1job", "1job",
                     "metadata.name: '1job' is not a valid");
    CHECK_EDIT_FAILS("name: base-job",
                     "name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                     "name: aaa", "metadata.name: 'aaaaaaaa");
    CHECK_EDIT_FAILS("  name: base-job\n", "  labels: {a: b}\n", "metadata",
                     "metadata.name: required field missing");
    CHECK_EDIT_FAILS("metadata:\n  name: base-job\n", "", "apiVersion",
                     "metadata: required field missing");
    CHECK_EDIT_FAILS("  name: base-job\n", "  name: base-job\n  namespace: Team_A\n", "Team_A",
                     "metadata.namespace: 'Team_A' is not a valid namespace");
    CHECK_EDIT_FAILS("kind: TFJob\n", "kind: TFJob\nextra: 1\n", "extra",
                     "extra: unknown key 'extra' (allowed: apiVersion, kind, metadata, spec, "
                     "status)");
}

/* A key given twice is refused in every mapping, those only Kubernetes reads included; a
 * shared or cyclic alias is walked once. */
static void test_err_duplicate_keys(void) {
    CHECK_EDIT_FAILS("metadata:\n  name: base-job\n", "metadata: {name: base-job, name: b}\n",
                     "name: b}", "metadata.name: duplicate key 'name' (first at line 3)");
    CHECK_EDIT_FAILS("  name: base-job\n",
                     "  name: base-job\n  namespace: a\n  namespace: b\n", "namespace: b",
                     "metadata.namespace: duplicate key 'namespace' (first at line 5)");
    CHECK_EDIT_FAILS("  name: base-job\n",
                     "  name: base-job\n  labels: {a: b}\n  labels: {c: d}\n", "labels: {c",
                     "metadata.labels: duplicate key 'labels' (first at line 5)");
    CHECK_EDIT_FAILS("  name: base-job\n", "  name: base-job\n  labels: {x: b, y: c, x: d}\n",
                     "labels:", "metadata.labels.x: duplicate key 'x' (first at line 5)");
    CHECK_EDIT_FAILS("            - name: tensorflow\n              image: x:1\n",
                     "            - name: tensorflow\n              image: x:1\n"
                     "          containers:\n            - name: other\n",
                     "containers:\n            - name: other",
                     "spec.tfReplicaSpecs.Chief.template.spec.containers: duplicate key "
                     "'containers' (first at line 13)");
    CHECK_EDIT_FAILS("spec:\n", "status: {a: 1, b: [{c: 1, c: 2}]}\nspec:\n", "status",
                     "status.b[0].c: duplicate key 'c' (first at line 5)");
    CHECK_EDIT_FAILS("kind: TFJob\n", "kind: TFJob\nkind: PyTorchJob\n", "PyTorchJob",
                     "kind: duplicate key 'kind' (first at line 2)");
    /* an alias shared many times, and one that contains itself: parsed, each node once */
    const char *text = edit(BASE, "spec:\n",
                            "status:\n  a: &a {x: 1, y: [1, 2]}\n  b: &b [*a, *a, *a, *a]\n"
                            "  c: [*b, *b, *b, *b]\n  d: &d [*d, 1]\nspec:\n");
    dt_job_spec *job = parse_ok(text);
    DT_CHECK(job);
    dt_job_spec_free(job);
    CHECK_FAILS(edit(text, "  d: &d [*d, 1]\n", "  d: &d {e: *d, e: 1}\n"), "e: *d",
                "status.d.e: duplicate key 'e' (first at line");
}

/* KubeDL's TFJob: Kubeflow's schema, its run policy inline. */
static void test_kubedl(void) {
    static const char text[] = "apiVersion: training.kubedl.io/v1alpha1\n"
                               "kind: TFJob\n"
                               "metadata: {name: kdl}\n"
                               "spec:\n"
                               "  cleanPodPolicy: None\n"
                               "  backoffLimit: 3\n"
                               "  tfReplicaSpecs:\n"
                               "    Worker:\n"
                               "      replicas: 2\n"
                               "      template:\n"
                               "        spec:\n"
                               "          containers:\n"
                               "            - {name: tensorflow, image: kubedl/tf-mnist:1.0, "
                               "command: [python, m.py]}\n";
    dt_job_spec *job = NULL;
    DT_CHECK_OK(dt_job_spec_parse(&job, text, sizeof text - 1, "kdl.yaml"));
    DT_CHECK(job->kind == DT_JOB_KIND_TFJOB && job->replicas[DT_REPLICA_TYPE_WORKER].replicas == 2);
    DT_CHECK(job->clean_pod_policy == DT_CLEAN_POD_POLICY_NONE && job->backoff_limit == 3);
    DT_CHECK(!strcmp(job->api_version, "training.kubedl.io/v1alpha1"));
    dt_job_spec_free(job);
}

static void test_err_api_versions(void) {
    CHECK_EDIT_FAILS("kubeflow.org/v1\n", "kubeflow.org/v2\n", "apiVersion",
                     "apiVersion: kind TFJob needs apiVersion kubeflow.org/v1 or "
                     "kubeflow.org/v1alpha2 or kubeflow.org/v1alpha1 or "
                     "training.kubedl.io/v1alpha1, got 'kubeflow.org/v2'");
    CHECK_EDIT_FAILS("apiVersion: kubeflow.org/v1\n", "", "kind",
                     "apiVersion: required field missing");
    CHECK_FAILS("apiVersion: kubeflow.org/v1beta2\nkind: PyTorchJob\nmetadata: {name: a}\n",
                "apiVersion",
                "apiVersion: kind PyTorchJob needs apiVersion kubeflow.org/v1 or "
                "training.kubedl.io/v1alpha1, got 'kubeflow.org/v1beta2'");
    CHECK_FAILS("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n", "apiVersion",
                "apiVersion: kind TrainJob needs apiVersion dtrain/v1 or dtrain.io/v1, got "
                "'trainer.kubeflow.org/v1alpha1' (Kubeflow Trainer's TrainJob is not "
                "supported)");
}

static void test_err_documents(void) {
    char text[8192];
    /* a second job */
    snprintf(text, sizeof text, "%s---\n# another\n%s", BASE, BASE);
    dt_job_spec *job = NULL;
    DT_CHECK(line_of(text, "# another") == 30);
    DT_CHECK_ERR(dt_job_spec_parse(&job, text, strlen(text), "j.yaml"), DT_ERR_SPEC,
                 "j.yaml:32: kind: a second job (TFJob) in one file; the first starts at line 1: "
                 "give each job its own file");
    DT_CHECK(!job);
    /* no job at all */
    static const char pvc[] = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: a}\n"
                              "---\nkind: Job\n---\n- a list\n---\njust text\n";
    CHECK_FAILS(pvc, "apiVersion",
                "no job in this file: expected a document of kind TFJob, PyTorchJob or TrainJob");
    CHECK_FAILS("", "", "no job in this file");
    CHECK_FAILS("# only a comment\n", "#", "no job in this file");
    /* a YAML error after the job is still an error */
    snprintf(text, sizeof text, "%s---\nkind: [unclosed\n", BASE);
    DT_CHECK_ERR(dt_job_spec_parse(&job, text, strlen(text), "j.yaml"), DT_ERR_SPEC,
                 "YAML syntax error");
    DT_CHECK(!job);
    /* a broken job after other documents: its own line */
    snprintf(text, sizeof text, "kind: ConfigMap\n---\n%s",
             edit(BASE, "replicas: 2", "replicas: -2"));
    CHECK_FAILS(text, "replicas: -2", "spec.tfReplicaSpecs.Worker.replicas:");
    /* unreadable file */
    DT_CHECK_ERR(dt_job_spec_load(&job, DATA "does-not-exist.yaml"), DT_ERR_IO,
                 "does-not-exist.yaml: cannot open");
    DT_CHECK(!job);
}

static const char PYTORCH[] = "apiVersion: kubeflow.org/v1\n"
                              "kind: PyTorchJob\n"
                              "metadata: {name: pt}\n"
                              "spec:\n"
                              "  pytorchReplicaSpecs:\n"
                              "    Master:\n"
                              "      replicas: 1\n"
                              "      template: {spec: {containers: [{name: pytorch, "
                              "command: [python, m.py]}]}}\n"
                              "    Worker:\n"
                              "      replicas: 2\n"
                              "      template: {spec: {containers: [{name: pytorch, "
                              "command: [python, m.py]}]}}\n";

static void test_err_pytorch(void) {
    dt_job_spec *job = parse_ok(PYTORCH);
    DT_CHECK(job && job->pytorch_env && job->replicas[DT_REPLICA_TYPE_MASTER].port == 0);
    dt_job_spec_free(job);
    CHECK_FAILS(edit(PYTORCH, "    Worker:", "    PS:"), "PS:",
                "spec.pytorchReplicaSpecs.PS: unknown replica type 'PS' (allowed: Master, "
                "Worker)");
    CHECK_FAILS(edit(PYTORCH, "replicas: 1", "replicas: 2"), "replicas: 2",
                "spec.pytorchReplicaSpecs.Master.replicas: a job runs at most one master, got 2");
    CHECK_FAILS(edit(PYTORCH, "spec:\n", "spec:\n  elasticPolicy: {minReplicas: 1}\n"),
                "elasticPolicy", "spec.elasticPolicy: elastic PyTorch jobs are not supported");
    CHECK_FAILS(edit(PYTORCH, "spec:\n", "spec:\n  successPolicy: AllWorkers\n"), "successPolicy",
                "spec.successPolicy: unknown key 'successPolicy' (allowed: pytorchReplicaSpecs");
}

static const char ALPHA1[] = "apiVersion: kubeflow.org/v1alpha1\n"
                             "kind: TFJob\n"
                             "metadata: {name: a1}\n"
                             "spec:\n"
                             "  replicaSpecs:\n"
                             "    - replicas: 1\n"
                             "      tfReplicaType: MASTER\n"
                             "      template: {spec: {containers: [{name: tensorflow}]}}\n"
                             "    - replicas: 2\n"
                             "      tfReplicaType: WORKER\n"
                             "      tfPort: 2300\n"
                             "      template: {spec: {containers: [{name: tensorflow}]}}\n";

static void test_err_v1alpha1(void) {
    dt_job_spec *job = parse_ok(ALPHA1);
    DT_CHECK(job && job->replicas[DT_REPLICA_TYPE_WORKER].port == 2300);
    dt_job_spec_free(job);
    CHECK_FAILS(edit(ALPHA1, "tfReplicaType: MASTER", "tfReplicaType: CHIEF"), "CHIEF",
                "spec.replicaSpecs[0].tfReplicaType: unknown replica type 'CHIEF' (allowed: "
                "MASTER, WORKER, PS)");
    CHECK_FAILS(edit(ALPHA1, "tfReplicaType: MASTER", "tfReplicaType: WORKER"),
                "WORKER\n      tfPort",
                "spec.replicaSpecs[1].tfReplicaType: replica type WORKER given twice (also at "
                "line 7)");
    CHECK_FAILS(edit(ALPHA1, "tfPort: 2300", "tfPort: 0"), "tfPort",
                "spec.replicaSpecs[1].tfPort: expected a positive integer, got '0'");
    CHECK_FAILS(edit(ALPHA1, "tfPort: 2300", "tfPort: 65536"), "tfPort",
                "spec.replicaSpecs[1].tfPort: expected a positive integer at most 65535, got "
                "'65536'");
    CHECK_FAILS(edit(ALPHA1, "      tfReplicaType: WORKER\n", ""), "- replicas: 2",
                "spec.replicaSpecs[1].tfReplicaType: required field missing");
    CHECK_FAILS("apiVersion: kubeflow.org/v1alpha1\nkind: TFJob\nmetadata: {name: a}\n"
                "spec: {replicaSpecs: {}}\n",
                "spec",
                "spec.replicaSpecs: expected a non-empty list of replica specs, got a mapping");
    CHECK_FAILS("apiVersion: kubeflow.org/v1alpha1\nkind: TFJob\nmetadata: {name: a}\n"
                "spec: {replicaSpecs: []}\n",
                "spec",
                "spec.replicaSpecs: expected a non-empty list of replica specs, got an empty list");
    CHECK_FAILS(
        edit(ALPHA1, "      tfPort: 2300\n", "      tfPort: 2300\n      restartPolicy: Never\n"),
        "restartPolicy",
        "spec.replicaSpecs[1].restartPolicy: unknown key 'restartPolicy' for a replica spec");
    char text[4096];
    snprintf(text, sizeof text,
             "%s  terminationPolicy: {chief: {replicaName: WORKER, replicaIndex: 1}}\n", ALPHA1);
    CHECK_FAILS(
        text, "terminationPolicy",
        "spec.terminationPolicy.chief: dtrain ends the job when master-0 finishes (master-0, "
        "or worker-0 without a master); a chief of WORKER 1 is not supported");
    snprintf(text, sizeof text, "%s  terminationPolicy: {chief: {replicaName: BOSS}}\n", ALPHA1);
    CHECK_FAILS(text, "terminationPolicy",
                "spec.terminationPolicy.chief.replicaName: unknown replica type 'BOSS'");
    snprintf(text, sizeof text, "%s  terminationPolicy: {chief: {replicaName: master}}\n", ALPHA1);
    DT_CHECK((job = parse_ok(text)));
    dt_job_spec_free(job);
}

static void test_err_trainjob(void) {
    char text[4096];
#define TJ(extra) (snprintf(text, sizeof text, "%s%s", TRAIN, extra), text)
    CHECK_FAILS(TJ("  replicas: {workers: 2}\n"), "workers",
                "spec.replicas.workers: unknown replica type 'workers' (allowed: chief, master, "
                "worker, ps, evaluator)");
    CHECK_FAILS(TJ("  replicas: {worker: [2]}\n"), "worker:",
                "spec.replicas.worker: expected a replica count or a mapping {replicas, "
                "restartPolicy, env}, got a list");
    CHECK_FAILS(TJ("  replicas: {worker: {replicas: 2, restart: Never}}\n"), "restart:",
                "spec.replicas.worker.restart: unknown key 'restart' for a replica spec "
                "(allowed: replicas, restartPolicy, env)");
    CHECK_FAILS(TJ("  replicas: {worker: 0}\n"),
                "replicas:", "spec.replicas: the job has no replicas");
    CHECK_FAILS(TJ("  replicas: {chief: 1, Master: 1}\n"), "replicas:",
                "spec.replicas.Master: a job has a Chief or a Master, not both (Chief at line 8)");
    CHECK_FAILS(TJ("  replicas: {worker: 2, ps: 1}\n  strategy: allreduce\n"), "strategy",
                "spec.strategy: allreduce runs no parameter servers: remove spec.replicas.ps "
                "(line 8) or use parameter_server");
    CHECK_FAILS(TJ("  strategy: parameter_server\n"), "strategy",
                "spec.strategy: parameter_server needs at least one ps replica");
    CHECK_FAILS(TJ("  strategy: ring\n"), "strategy",
                "spec.strategy: expected one of parameter_server, allreduce, got 'ring'");
    CHECK_FAILS(TJ("  pytorchEnv: yes\n"), "pytorchEnv",
                "spec.pytorchEnv: expected true or false, got 'yes'");
    CHECK_FAILS(TJ("  runPolicy: {cleanPodPolicy: Sometimes}\n"), "runPolicy",
                "spec.runPolicy.cleanPodPolicy: expected one of Running, All, None");
    CHECK_FAILS(TJ("  successPolicy: Chief\n"), "successPolicy",
                "spec.successPolicy: expected \"\" or AllWorkers, got 'Chief'");
    CHECK_FAILS(TJ("  backoffLimit: 3\n"), "backoffLimit",
                "spec.backoffLimit: unknown key 'backoffLimit' (allowed: seed, data, model, loss, "
                "optimizer, training, replicas, strategy, runPolicy, successPolicy, elasticPolicy, "
                "pytorchEnv, parameterServer, allreduce)");
    CHECK_FAILS(TJ("  replicas: {worker: {env: [{name: '', value: x}]}}\n"), "replicas",
                "spec.replicas.worker.env[0].name: '' is not a valid variable name");
    /* the training part is checked as by dtrain train */
    CHECK_FAILS(edit(TRAIN, "units: 2", "units: two"), "units",
                "spec.model.layers[0].units: expected a positive integer, got 'two'");
    CHECK_FAILS(edit(TRAIN, "metadata: {name: tj}", "metadata: {name: tj, uid: x}"),
                "metadata", "metadata.uid: unknown key 'uid' (allowed: name, namespace, labels, annotations)");
    CHECK_FAILS(edit(TRAIN, "metadata: {name: tj}", "metadata: {name: tj, namespace: -x}"),
                "metadata", "metadata.namespace: '-x' is not a valid namespace");
    CHECK_FAILS(edit(TRAIN, "kind: TrainJob\n", "kind: TrainJob\nstatus: {}\n"), "status",
                "status: unknown key 'status' (allowed: apiVersion, kind, metadata, spec)");
#undef TJ
}

/* ---- spec.allreduce ---- */

static void test_allreduce(void) {
    char text[4096];
    /* absent: the defaults, whatever the strategy */
    dt_job_spec *job = parse_ok(TRAIN);
    DT_CHECK(job && job->strategy == DT_STRATEGY_ALLREDUCE);
    DT_CHECK(job && job->allreduce.global_batch == DT_GLOBAL_BATCH_SCALE &&
             job->allreduce.bucket_bytes == (int64_t)4 << 20 &&
             job->allreduce.chunk_bytes == (int64_t)256 << 10 &&
             job->allreduce.timeout_ms == 10000 && job->allreduce.rendezvous_timeout_ms == 10000 &&
             job->allreduce.checkpoint_secs == 0 && job->allreduce.minibatches_per_shard == 4 &&
             job->allreduce.shared_memory == 1 && job->allreduce.wire_dtype == DT_RING_WIRE_F32);
    dt_job_spec_free(job);
    snprintf(text, sizeof text, "%s  replicas: {worker: 2, ps: 1}\n", TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK(job && job->strategy == DT_STRATEGY_PARAMETER_SERVER &&
             job->allreduce.rendezvous_timeout_ms == 10000 &&
             job->allreduce.minibatches_per_shard == 4);
    dt_job_spec_free(job);
    /* every field */
    snprintf(text, sizeof text,
             "%s  replicas: {chief: 1, worker: 3}\n  strategy: allreduce\n  allreduce:\n"
             "    globalBatch: fixed\n    bucketMB: 0.5\n    chunkKB: 64\n"
             "    timeoutSeconds: 2.5\n    rendezvousTimeoutSeconds: 0.25\n"
             "    checkpointSeconds: 30\n    minibatchesPerShard: 8\n    sharedMemory: false\n"
             "    wireDtype: bfloat16\n",
             TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK(job && job->allreduce.shared_memory == 0 &&
             job->allreduce.wire_dtype == DT_RING_WIRE_BF16);
    DT_CHECK(job && job->allreduce.global_batch == DT_GLOBAL_BATCH_FIXED &&
             job->allreduce.bucket_bytes == (int64_t)1 << 19 &&
             job->allreduce.chunk_bytes == (int64_t)64 << 10 && job->allreduce.timeout_ms == 2500 &&
             job->allreduce.rendezvous_timeout_ms == 250 && job->allreduce.checkpoint_secs == 30 &&
             job->allreduce.minibatches_per_shard == 8);
    dt_job_spec_free(job);
    /* an empty mapping: the defaults; `dtrain train` allows and ignores the key */
    snprintf(text, sizeof text, "%s  replicas: {worker: 2}\n  allreduce: {}\n", TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK(job && job->allreduce.bucket_bytes == (int64_t)4 << 20 &&
             job->allreduce.timeout_ms == 10000);
    dt_job_spec_free(job);
    /* float32 said outright */
    snprintf(text, sizeof text, "%s  replicas: {worker: 2}\n  allreduce: {wireDtype: float32}\n",
             TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK(job && job->allreduce.wire_dtype == DT_RING_WIRE_F32);
    dt_job_spec_free(job);
    dt_spec *sp = NULL;
    DT_CHECK_OK(dt_spec_parse(&sp, text, strlen(text), "t.yaml"));
    dt_spec_free(sp);
}

static void test_err_allreduce(void) {
    char text[4096];
#define AR(x)                                                                                      \
    (snprintf(text, sizeof text, "%s  replicas: {worker: 2}\n  allreduce: %s\n", TRAIN, x), text)
    CHECK_FAILS(AR("{bucket: 4}"), "allreduce",
                "spec.allreduce.bucket: unknown key 'bucket' (allowed: globalBatch, bucketMB, "
                "chunkKB, timeoutSeconds, rendezvousTimeoutSeconds, checkpointSeconds, "
                "minibatchesPerShard, sharedMemory, wireDtype)");
    CHECK_FAILS(AR("{wireDtype: float16}"), "allreduce",
                "spec.allreduce.wireDtype: expected one of float32, bfloat16, got 'float16'");
    CHECK_FAILS(AR("{wireDtype: [bfloat16]}"), "allreduce",
                "spec.allreduce.wireDtype: expected one of float32, bfloat16");
    CHECK_FAILS(AR("{globalBatch: grow}"), "allreduce",
                "spec.allreduce.globalBatch: expected one of scale, fixed, got 'grow'");
    CHECK_FAILS(AR("{bucketMB: 0}"), "allreduce", "spec.allreduce.bucketMB: expected a");
    CHECK_FAILS(AR("{bucketMB: -1}"), "allreduce", "spec.allreduce.bucketMB: expected a");
    CHECK_FAILS(AR("{bucketMB: 5000}"), "allreduce", "spec.allreduce.bucketMB: expected a");
    CHECK_FAILS(AR("{bucketMB: big}"), "allreduce", "spec.allreduce.bucketMB: expected a");
    CHECK_FAILS(AR("{chunkKB: 0}"), "allreduce",
                "spec.allreduce.chunkKB: expected a positive integer, got '0'");
    CHECK_FAILS(AR("{chunkKB: 1.5}"), "allreduce",
                "spec.allreduce.chunkKB: expected a positive integer");
    CHECK_FAILS(AR("{chunkKB: 99999999}"), "allreduce", "spec.allreduce.chunkKB: expected");
    CHECK_FAILS(AR("{timeoutSeconds: 0}"), "allreduce",
                "spec.allreduce.timeoutSeconds: expected a");
    CHECK_FAILS(AR("{timeoutSeconds: soon}"), "allreduce",
                "spec.allreduce.timeoutSeconds: expected a");
    CHECK_FAILS(AR("{rendezvousTimeoutSeconds: -2}"), "allreduce",
                "spec.allreduce.rendezvousTimeoutSeconds: expected a");
    CHECK_FAILS(AR("{rendezvousTimeoutSeconds: 100000}"), "allreduce",
                "spec.allreduce.rendezvousTimeoutSeconds: expected a");
    CHECK_FAILS(AR("{checkpointSeconds: -5}"), "allreduce",
                "spec.allreduce.checkpointSeconds: expected a");
    CHECK_FAILS(AR("{minibatchesPerShard: 0}"), "allreduce",
                "spec.allreduce.minibatchesPerShard: expected a positive integer, got '0'");
    CHECK_FAILS(AR("{sharedMemory: yes please}"), "allreduce",
                "spec.allreduce.sharedMemory: expected true or false, got 'yes please'");
    CHECK_FAILS(AR("[fixed]"), "allreduce", "spec.allreduce: expected a mapping, got a list");
    /* the field's own line in a block mapping */
    snprintf(text, sizeof text,
             "%s  replicas: {worker: 2}\n  allreduce:\n    globalBatch: scale\n"
             "    chunkKB: many\n",
             TRAIN);
    CHECK_FAILS(text, "chunkKB", "spec.allreduce.chunkKB: expected a positive integer, got 'many'");
    /* only with strategy allreduce, and parameterServer only with parameter_server */
    snprintf(text, sizeof text, "%s  replicas: {worker: 2, ps: 1}\n  allreduce: {chunkKB: 64}\n",
             TRAIN);
    CHECK_FAILS(text, "allreduce",
                "spec.allreduce: only for strategy allreduce (this job's strategy is "
                "parameter_server)");
    snprintf(text, sizeof text,
             "%s  replicas: {worker: 2}\n  strategy: allreduce\n  parameterServer: {sync: true}\n",
             TRAIN);
    CHECK_FAILS(text, "parameterServer",
                "spec.parameterServer: only for strategy parameter_server (this job's strategy "
                "is allreduce)");
#undef AR
}

/* ---- spec.parameterServer ---- */

static void test_parameter_server(void) {
    char text[4096];
    /* absent: the defaults, whatever the strategy */
    dt_job_spec *job = parse_ok(TRAIN);
    DT_CHECK(job && job->strategy == DT_STRATEGY_ALLREDUCE);
    DT_CHECK(job && !job->ps.sync && job->ps.sync_timeout_ms == 5000 &&
             job->ps.max_frame == (int64_t)64 << 20 && job->ps.checkpoint_secs == 0 &&
             job->ps.minibatches_per_shard == 16);
    dt_job_spec_free(job);
    snprintf(text, sizeof text, "%s  replicas: {worker: 2, ps: 1}\n", TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK(job && job->strategy == DT_STRATEGY_PARAMETER_SERVER && !job->ps.sync &&
             job->ps.sync_timeout_ms == 5000 && job->ps.max_frame == (int64_t)64 << 20 &&
             job->ps.minibatches_per_shard == 16 && job->ps.shared_memory == 1 &&
             job->ps.wire_dtype == DT_PS_WIRE_F32);
    dt_job_spec_free(job);
    /* every field */
    snprintf(text, sizeof text,
             "%s  replicas: {chief: 1, ps: 2}\n  parameterServer:\n    sync: true\n"
             "    syncTimeoutSeconds: 0.25\n    maxFrameMB: 8\n    checkpointSeconds: 30\n"
             "    minibatchesPerShard: 4\n    sharedMemory: false\n    wireDtype: bfloat16\n",
             TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK(job && job->ps.sync && job->ps.sync_timeout_ms == 250 &&
             job->ps.max_frame == (int64_t)8 << 20 && job->ps.checkpoint_secs == 30 &&
             job->ps.minibatches_per_shard == 4 && job->ps.shared_memory == 0 &&
             job->ps.wire_dtype == DT_PS_WIRE_BF16);
    dt_job_spec_free(job);
    snprintf(text, sizeof text,
             "%s  replicas: {worker: 1, ps: 1}\n  parameterServer: {wireDtype: float32}\n", TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK(job && job->ps.wire_dtype == DT_PS_WIRE_F32);
    dt_job_spec_free(job);
    /* an empty mapping: the defaults; `dtrain train` allows and ignores the key */
    snprintf(text, sizeof text, "%s  replicas: {worker: 1, ps: 1}\n  parameterServer: {}\n", TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK(job && job->ps.sync_timeout_ms == 5000 && job->ps.checkpoint_secs == 0);
    dt_job_spec_free(job);
    dt_spec *sp = NULL;
    DT_CHECK_OK(dt_spec_parse(&sp, text, strlen(text), "t.yaml"));
    dt_spec_free(sp);
}

static void test_err_parameter_server(void) {
    char text[4096];
#define PS(x)                                                                                      \
    (snprintf(text, sizeof text, "%s  replicas: {worker: 2, ps: 1}\n  parameterServer: %s\n",     \
              TRAIN, x),                                                                           \
     text)
    CHECK_FAILS(PS("{syncs: true}"), "parameterServer",
                "spec.parameterServer.syncs: unknown key 'syncs' (allowed: sync, "
                "syncTimeoutSeconds, maxFrameMB, checkpointSeconds, minibatchesPerShard, "
                "sharedMemory, wireDtype)");
    CHECK_FAILS(PS("{wireDtype: float16}"), "parameterServer",
                "spec.parameterServer.wireDtype: expected one of float32, bfloat16, got "
                "'float16'");
    CHECK_FAILS(PS("{wireDtype: [bfloat16]}"), "parameterServer",
                "spec.parameterServer.wireDtype: expected one of float32, bfloat16");
    CHECK_FAILS(PS("{sync: yes}"), "parameterServer",
                "spec.parameterServer.sync: expected true or false, got 'yes'");
    CHECK_FAILS(PS("{sharedMemory: 1}"), "parameterServer",
                "spec.parameterServer.sharedMemory: expected true or false, got '1'");
    CHECK_FAILS(PS("{syncTimeoutSeconds: 0}"), "parameterServer",
                "spec.parameterServer.syncTimeoutSeconds: expected a");
    CHECK_FAILS(PS("{syncTimeoutSeconds: -1}"), "parameterServer",
                "spec.parameterServer.syncTimeoutSeconds: expected a");
    CHECK_FAILS(PS("{syncTimeoutSeconds: soon}"), "parameterServer",
                "spec.parameterServer.syncTimeoutSeconds: expected a");
    CHECK_FAILS(PS("{maxFrameMB: 0}"), "parameterServer",
                "spec.parameterServer.maxFrameMB: expected a positive integer, got '0'");
    CHECK_FAILS(PS("{maxFrameMB: 1.5}"), "parameterServer",
                "spec.parameterServer.maxFrameMB: expected a positive integer");
    CHECK_FAILS(PS("{maxFrameMB: 99999999}"), "parameterServer",
                "spec.parameterServer.maxFrameMB: expected");
    CHECK_FAILS(PS("{checkpointSeconds: -5}"), "parameterServer",
                "spec.parameterServer.checkpointSeconds: expected a");
    CHECK_FAILS(PS("{minibatchesPerShard: 0}"), "parameterServer",
                "spec.parameterServer.minibatchesPerShard: expected a positive integer, got '0'");
    CHECK_FAILS(PS("[sync]"), "parameterServer",
                "spec.parameterServer: expected a mapping, got a list");
    /* the field's own line in a block mapping */
    snprintf(text, sizeof text,
             "%s  replicas: {worker: 2, ps: 1}\n  parameterServer:\n    sync: false\n"
             "    minibatchesPerShard: many\n",
             TRAIN);
    CHECK_FAILS(text, "minibatchesPerShard",
                "spec.parameterServer.minibatchesPerShard: expected a positive integer, got "
                "'many'");
    /* only with strategy parameter_server */
    snprintf(text, sizeof text, "%s  replicas: {worker: 2}\n  parameterServer: {sync: true}\n",
             TRAIN);
    CHECK_FAILS(text, "parameterServer",
                "spec.parameterServer: only for strategy parameter_server (this job's strategy "
                "is allreduce)");
    /* at most DT_JOB_MAX_PS parameter servers */
    snprintf(text, sizeof text, "%s  replicas: {worker: 1, ps: 65}\n", TRAIN);
    CHECK_FAILS(text, "ps: 65", "spec.replicas.ps: 65 parameter servers (at most 64)");
    /* a parameter_server job needs someone to train */
    snprintf(text, sizeof text, "%s  replicas: {ps: 2}\n", TRAIN);
    CHECK_FAILS(text, "replicas",
                "spec.replicas: the parameter_server strategy needs a chief or at least one "
                "worker to train");
    snprintf(text, sizeof text, "%s  replicas: {ps: 1, worker: 0, evaluator: 1}\n", TRAIN);
    CHECK_FAILS(text, "replicas", "spec.replicas: the parameter_server strategy needs a chief");
#undef PS
}

/* ---- elasticPolicy (dtrain's extension) ---- */

static void test_elastic(void) {
    /* absent: 0 */
    dt_job_spec *job = parse_ok(BASE);
    DT_CHECK(job && job->elastic_min_replicas == 0);
    dt_job_spec_free(job);
    /* TFJob v1: 1..the workers */
    job =
        parse_ok(edit(BASE, "  runPolicy:\n", "  elasticPolicy: {minReplicas: 2}\n  runPolicy:\n"));
    DT_CHECK(job && job->elastic_min_replicas == 2);
    dt_job_spec_free(job);
    job = parse_ok(
        edit(BASE, "  runPolicy:\n", "  elasticPolicy:\n    minReplicas: 1\n  runPolicy:\n"));
    DT_CHECK(job && job->elastic_min_replicas == 1);
    dt_job_spec_free(job);
    /* given before tfReplicaSpecs, and with lowercase replica types: still the workers' count */
    job = parse_ok(edit(edit(BASE, "spec:\n", "spec:\n  elasticPolicy: {minReplicas: 2}\n"),
                        "    Worker:\n", "    worker:\n"));
    DT_CHECK(job && job->elastic_min_replicas == 2);
    dt_job_spec_free(job);
    /* v1alpha2 (policies on spec) */
    job = parse_ok(edit(edit(BASE, "kubeflow.org/v1\n", "kubeflow.org/v1alpha2\n"),
                        "  runPolicy:\n    cleanPodPolicy: All\n",
                        "  cleanPodPolicy: All\n  elasticPolicy: {minReplicas: 2}\n"));
    DT_CHECK(job && job->elastic_min_replicas == 2 &&
             job->clean_pod_policy == DT_CLEAN_POD_POLICY_ALL);
    dt_job_spec_free(job);
    /* TrainJob */
    char text[4096];
    snprintf(text, sizeof text,
             "%s  replicas: {worker: 3, ps: 1}\n  elasticPolicy: {minReplicas: 2}\n", TRAIN);
    DT_CHECK((job = parse_ok(text)));
    DT_CHECK(job && job->elastic_min_replicas == 2);
    dt_job_spec_free(job);
    /* `dtrain train` reads a TrainJob's elasticPolicy as a job key: allowed, ignored */
    dt_spec *sp = NULL;
    DT_CHECK_OK(dt_spec_parse(&sp, text, strlen(text), "t.yaml"));
    dt_spec_free(sp);
}

static void test_err_elastic(void) {
#define EP(x) edit(BASE, "  runPolicy:\n", "  elasticPolicy: " x "\n  runPolicy:\n")
    CHECK_FAILS(EP("{minReplicas: 0}"), "elasticPolicy",
                "spec.elasticPolicy.minReplicas: expected a positive integer, got '0'");
    CHECK_FAILS(EP("{minReplicas: -1}"), "elasticPolicy",
                "spec.elasticPolicy.minReplicas: expected a positive integer, got '-1'");
    CHECK_FAILS(EP("{minReplicas: two}"), "elasticPolicy",
                "spec.elasticPolicy.minReplicas: expected a positive integer, got 'two'");
    CHECK_FAILS(EP("{minReplicas: 1.5}"), "elasticPolicy",
                "spec.elasticPolicy.minReplicas: expected a positive integer");
    CHECK_FAILS(EP("{minReplicas: 3}"), "elasticPolicy",
                "spec.elasticPolicy.minReplicas: 3 is more than the job's 2 Worker replicas");
    CHECK_FAILS(EP("{}"), "elasticPolicy",
                "spec.elasticPolicy.minReplicas: required field missing");
    CHECK_FAILS(EP("{minReplicas: 1, maxReplicas: 2}"), "elasticPolicy",
                "spec.elasticPolicy.maxReplicas: unknown key 'maxReplicas' (allowed: "
                "minReplicas)");
    CHECK_FAILS(EP("2"), "elasticPolicy", "spec.elasticPolicy: expected a mapping, got '2'");
    CHECK_FAILS(EP("[minReplicas]"), "elasticPolicy",
                "spec.elasticPolicy: expected a mapping, got a list");
    /* the field's own line when given as a block */
    CHECK_FAILS(
        edit(BASE, "  runPolicy:\n", "  elasticPolicy:\n    minReplicas: 5\n  runPolicy:\n"),
        "minReplicas: 5",
        "spec.elasticPolicy.minReplicas: 5 is more than the job's 2 Worker replicas");
    /* no workers to lose */
    CHECK_FAILS(edit(EP("{minReplicas: 1}"), "replicas: 2", "replicas: 0"), "elasticPolicy",
                "spec.elasticPolicy.minReplicas: the job has no Worker replicas: elasticPolicy "
                "is about workers");
    CHECK_FAILS(edit(EP("{minReplicas: 1}"), "    Worker:\n      replicas: 2\n",
                     "    PS:\n      replicas: 2\n"),
                "elasticPolicy", "spec.elasticPolicy.minReplicas: the job has no Worker replicas");
    /* v1alpha1 does not take it */
    char text[4096];
    snprintf(text, sizeof text, "%s  elasticPolicy: {minReplicas: 1}\n", ALPHA1);
    CHECK_FAILS(text, "elasticPolicy",
                "spec.elasticPolicy: unknown key 'elasticPolicy' (allowed: replicaSpecs, "
                "terminationPolicy");
    /* v1alpha2: the same checks */
    CHECK_FAILS(edit(edit(BASE, "kubeflow.org/v1\n", "kubeflow.org/v1alpha2\n"),
                     "  runPolicy:\n    cleanPodPolicy: All\n",
                     "  elasticPolicy: {minReplicas: 9}\n"),
                "elasticPolicy",
                "spec.elasticPolicy.minReplicas: 9 is more than the job's 2 Worker replicas");
    /* TrainJob: its worker count (here the default one worker) */
    snprintf(text, sizeof text, "%s  elasticPolicy: {minReplicas: 2}\n", TRAIN);
    CHECK_FAILS(text, "elasticPolicy",
                "spec.elasticPolicy.minReplicas: 2 is more than the job's 1 worker replica");
    snprintf(text, sizeof text, "%s  elasticPolicy: {minReplicas: 1, min: 1}\n", TRAIN);
    CHECK_FAILS(text, "elasticPolicy",
                "spec.elasticPolicy.min: unknown key 'min' (allowed: minReplicas)");
    snprintf(text, sizeof text, "%s  replicas: {chief: 1}\n  elasticPolicy: {minReplicas: 1}\n",
             TRAIN);
    CHECK_FAILS(text, "elasticPolicy",
                "spec.elasticPolicy.minReplicas: the job has no worker replicas");
#undef EP
}

/* Every prefix of a valid manifest either loads or fails cleanly (no crash, no leak). */
static void test_truncations(void) {
    static const char *const files[] = {"tfjob_v1.yaml", "trainjob.yaml", "tfjob_v1alpha1.yaml",
                                        "multidoc.yaml"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[512], buf[8192];
        snprintf(path, sizeof path, DATA "%s", files[f]);
        FILE *fp = fopen(path, "rb");
        DT_CHECK(fp);
        size_t n = fread(buf, 1, sizeof buf, fp);
        fclose(fp);
        for (size_t len = 0; len <= n; len += 7) {
            dt_job_spec *job = NULL;
            dt_err e = dt_job_spec_parse(&job, buf, len, "t.yaml");
            DT_CHECK(e == DT_OK || e == DT_ERR_SPEC);
            DT_CHECK((e == DT_OK) == (job != NULL));
            if (e) DT_CHECK(!strncmp(dt_errmsg(), "t.yaml:", 7));
            dt_job_spec_free(job);
        }
    }
}

DT_TEST_MAIN(DT_T(test_names), DT_T(test_err_duplicate_keys), DT_T(test_tfjob_v1), DT_T(test_tfjob_v1_lowercase),
             DT_T(test_tfjob_v1alpha2), DT_T(test_tfjob_v1_early), DT_T(test_tfjob_v1alpha1),
             DT_T(test_pytorchjob), DT_T(test_trainjob), DT_T(test_trainjob_defaults),
             DT_T(test_multidoc), DT_T(test_single_replica), DT_T(test_tf_config_kubernetes),
             DT_T(test_tf_config_local), DT_T(test_env_bad_args), DT_T(test_check_local),
             DT_T(test_kubernetes_fields_tolerated), DT_T(test_err_replica_types),
             DT_T(test_err_replicas), DT_T(test_err_templates), DT_T(test_err_containers),
             DT_T(test_err_policies), DT_T(test_err_metadata), DT_T(test_kubedl), DT_T(test_err_api_versions),
             DT_T(test_err_documents), DT_T(test_err_pytorch), DT_T(test_err_v1alpha1),
             DT_T(test_err_trainjob), DT_T(test_parameter_server),
             DT_T(test_err_parameter_server), DT_T(test_allreduce), DT_T(test_err_allreduce),
             DT_T(test_elastic), DT_T(test_err_elastic),
             DT_T(test_truncations))
