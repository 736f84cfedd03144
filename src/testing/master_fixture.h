/* master_fixture.h - a real master for tests that act as a job's replicas (client_test.c,
 * prefetch_test.c): job_start runs `$DTRAIN_BIN run --detach` on a TFJob whose two workers
 * only sleep, and the test talks to its master as worker-0 (and worker-1). Header-only:
 * every function is static. */
#ifndef DTRAIN_MASTER_FIXTURE_H
#define DTRAIN_MASTER_FIXTURE_H

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <jansson.h>

#include "dtrain/shard.h"
#include "testing/dt_test.h"

extern char **environ;

typedef struct job {
    char name[64];
    char dir[600];
    char url[256];
    char token[256];
    int master_pid;
} job;

static inline void nap_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Run argv (stdout to /dev/null) and return its exit code, -1 when it could not run. */
static inline int run(char *const argv[]) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline const char *dtrain_bin(void) {
    const char *b = getenv("DTRAIN_BIN");
    if (!b) {
        fprintf(stderr, "DTRAIN_BIN must point at the dtrain binary\n");
        exit(2);
    }
    return b;
}

/* Read url, token and pid from the job dir's master.json. */
static inline int read_master_json(job *j) {
    char path[700];
    snprintf(path, sizeof path, "%s/master.json", j->dir);
    json_t *m = json_load_file(path, 0, NULL);
    const char *url = json_string_value(json_object_get(m, "url"));
    const char *token = json_string_value(json_object_get(m, "token"));
    json_t *pid = json_object_get(m, "pid");
    int ok = url && token && json_is_integer(pid);
    if (ok) {
        snprintf(j->url, sizeof j->url, "%s", url);
        snprintf(j->token, sizeof j->token, "%s", token);
        j->master_pid = (int)json_integer_value(pid);
    }
    json_decref(m);
    return ok ? 0 : -1;
}

/* Start job `name` (two workers that sleep; OnFailure) detached; 0 on success. */
static inline int job_start(job *j, const char *name) {
    memset(j, 0, sizeof *j);
    snprintf(j->name, sizeof j->name, "%s", name);
    snprintf(j->dir, sizeof j->dir, "%s/%s", dt_test_tmpdir(), name);
    char home[600];
    snprintf(home, sizeof home, "%s/home", dt_test_tmpdir());
    setenv("DTRAIN_HOME", home, 1);
    char spec[4096], file[128];
    snprintf(spec, sizeof spec,
             "apiVersion: kubeflow.org/v1\n"
             "kind: TFJob\n"
             "metadata: {name: %s}\n"
             "spec:\n"
             "  tfReplicaSpecs:\n"
             "    Worker:\n"
             "      replicas: 2\n"
             "      restartPolicy: OnFailure\n"
             "      template:\n"
             "        spec:\n"
             "          containers:\n"
             "            - name: tensorflow\n"
             "              command: [sleep, \"300\"]\n",
             name);
    snprintf(file, sizeof file, "%s.yaml", name);
    const char *path = dt_test_write_file(file, spec, strlen(spec));
    char *argv[] = {(char *)dtrain_bin(), "run", "--detach", "--stop-grace", "1", "--job-dir",
                    j->dir, (char *)path, NULL};
    int rc = run(argv);
    if (rc != 0) {
        fprintf(stderr, "dtrain run --detach %s: exit %d\n", path, rc);
        return -1;
    }
    return read_master_json(j);
}

static inline void job_stop(job *j) {
    char *argv[] = {(char *)dtrain_bin(), "stop", j->dir, NULL};
    if (run(argv) != 0) fprintf(stderr, "dtrain stop %s failed\n", j->dir);
}

/* Point DTRAIN_MASTER, DTRAIN_JOB_TOKEN and DTRAIN_REPLICA at job j. */
static inline void job_env(const job *j, const char *replica) {
    setenv("DTRAIN_MASTER", j->url, 1);
    setenv("DTRAIN_JOB_TOKEN", j->token, 1);
    setenv("DTRAIN_REPLICA", replica, 1);
}

static inline dt_err open_as(dt_shard_client **c, const job *j, const char *replica) {
    dt_shard_client_opts o = {.url = j->url, .token = j->token, .replica = replica};
    return dt_shard_client_open(c, &o);
}

static inline dt_dataset_spec spec_of(const char *name, int64_t size, int64_t batch, int64_t epochs,
                                      int64_t mb) {
    dt_dataset_spec d;
    dt_dataset_spec_init(&d);
    d.name = name;
    d.dataset_size = size;
    d.batch_size = batch;
    d.num_epochs = epochs;
    d.num_minibatches_per_shard = mb;
    return d;
}

#endif
