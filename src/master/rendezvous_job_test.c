/* rendezvous_job_test.c - the rendezvous end to end: a real master (dt_master_run in a child
 * process) runs an allreduce TrainJob whose replicas are real processes (a shell script
 * standing in for `dtrain role`: it stays up and notes its pid), and the test joins rings
 * through the HTTP API with the C client (dt_rdzv_join, dt_rdzv_status) and raw requests:
 * two replicas form a ring ranked by step; a third, scaled up, makes the members leave and
 * all three form the next generation; a replica killed breaks its ring and rejoins when
 * restarted; a resumed master keeps the generations; bad bodies are refused naming the
 * field; an unreachable report leaves its replica out; a stopping job answers 409. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "dtrain/master.h"
#include "dtrain/rendezvous.h"
#include "net/http-impl.h"
#include "testing/dt_test.h"

#define JOIN_TIMEOUT_MS 60000
#define WAIT_POLLS 3000 /* of 20 ms: a minute at most for what must happen */

#define SPEC(NAME, REPLICAS)                                                                    \
    "apiVersion: dtrain/v1\nkind: TrainJob\nmetadata: {name: " NAME "}\nspec:\n"                \
    "  data: {train: {format: synthetic, samples: 8, shape: [2], classes: 2}}\n"               \
    "  model: {layers: [{type: dense, units: 2}]}\n  optimizer: {type: sgd}\n"                 \
    "  replicas: " REPLICAS "\n"                                                               \
    "  allreduce: {rendezvousTimeoutSeconds: 60}\n"

/* Stands in for `dtrain role SPEC --job-dir DIR`: SIGTERM does not end it (so a stopping
 * job stays up for its grace period), SIGKILL does; its pid goes to DIR/run/NAME.stand-in. */
static const char STAND_IN[] = "#!/bin/sh\n"
                               "trap '' TERM\n"
                               "echo $$ > \"$4/run/$DTRAIN_REPLICA.stand-in\"\n"
                               "while :; do sleep 0.1; done\n";

typedef struct master {
    pid_t pid;
    char dir[512], spec[512], exe[512], log[512];
    char url[128], token[128];
} master;

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Run the master of job `name` (spec: its text) in a child process (a fresh one, or with
 * spec NULL, resume the job in m->dir); returns once it has launched the replicas and
 * written master.json. */
static int master_start(master *m, const char *name, const char *spec) {
    int resume = spec == NULL;
    if (!resume) {
        char file[64];
        snprintf(file, sizeof file, "%s.yaml", name);
        snprintf(m->dir, sizeof m->dir, "%s/%s", dt_test_tmpdir(), name);
        snprintf(m->spec, sizeof m->spec, "%s", dt_test_write_file(file, spec, strlen(spec)));
        snprintf(m->exe, sizeof m->exe, "%s",
                 dt_test_write_file("stand-in.sh", STAND_IN, strlen(STAND_IN)));
        chmod(m->exe, 0755);
        snprintf(m->log, sizeof m->log, "%s/%s.out", dt_test_tmpdir(), name);
    }
    int fds[2];
    if (pipe(fds)) return -1;
    fflush(NULL);
    m->pid = fork();
    if (m->pid < 0) return -1;
    if (m->pid == 0) {
        close(fds[0]);
        dt_job_spec *job = NULL;
        dt_err e = resume ? dt_master_load_job(m->dir, &job) : dt_job_spec_load(&job, m->spec);
        FILE *out = fopen(m->log, "a");
        dt_master_opts o = {.job_dir = m->dir,
                            .spec_path = resume ? NULL : m->spec,
                            .self_exe = m->exe,
                            .resume = resume,
                            .stop_grace_ms = 1500,
                            .out = out,
                            .ready_fd = fds[1]};
        dt_job_outcome outcome = DT_JOB_OUTCOME_FAILED;
        if (!e && out) e = dt_master_run(job, &o, &outcome);
        if (e) fprintf(stderr, "master: %s\n", dt_errmsg());
        dt_job_spec_free(job);
        if (out) fclose(out);
        exit(e ? 2 : 0);
    }
    close(fds[1]);
    char c = 0;
    ssize_t n = read(fds[0], &c, 1);
    close(fds[0]);
    if (n != 1 || c != 'R') return -1;
    char path[600];
    snprintf(path, sizeof path, "%s/master.json", m->dir);
    json_t *j = json_load_file(path, 0, NULL);
    const char *url = json_string_value(json_object_get(j, "url"));
    const char *token = json_string_value(json_object_get(j, "token"));
    if (url) snprintf(m->url, sizeof m->url, "%s", url);
    if (token) snprintf(m->token, sizeof m->token, "%s", token);
    json_decref(j);
    return url && token ? 0 : -1;
}

/* The master's exit status (0: it ran the job to its end). */
static int master_wait(master *m) {
    int st = 0;
    if (waitpid(m->pid, &st, 0) != m->pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int log_has(const master *m, const char *text) {
    FILE *in = fopen(m->log, "r");
    static char buf[1 << 16];
    size_t n = in ? fread(buf, 1, sizeof buf - 1, in) : 0;
    if (in) fclose(in);
    buf[n] = 0;
    if (!strstr(buf, text)) fprintf(stderr, "the master's log lacks \"%s\":\n%s", text, buf);
    return strstr(buf, text) != NULL;
}

static dt_shard_client *client(const master *m, const char *replica) {
    dt_shard_client_opts o = {
        .url = m->url, .token = m->token, .replica = replica, .heartbeat_ms = -1};
    dt_shard_client *c = NULL;
    if (dt_shard_client_open(&c, &o)) fprintf(stderr, "client %s: %s\n", replica, dt_errmsg());
    return c;
}

/* A raw request: the status, the answer's body in *body (caller frees). */
static long request(const master *m, const char *method, const char *path, const char *body,
                    char **answer) {
    dt__http_client *h = NULL;
    long status = -1;
    *answer = NULL;
    if (dt__http_client_init(&h, m->url, m->token, 10000) ||
        dt__http_client_request(h, method, path, body, body ? strlen(body) : 0, &status, answer,
                                NULL))
        fprintf(stderr, "%s %s: %s\n", method, path, dt_errmsg());
    dt__http_client_free(h);
    return status;
}

/* The request gets `want` and an answer holding text. */
static int answers(const master *m, const char *method, const char *path, const char *body,
                   long want, const char *text) {
    char *ans = NULL;
    long st = request(m, method, path, body, &ans);
    int ok = st == want && ans && strstr(ans, text);
    if (!ok)
        fprintf(stderr, "%s %s %s: HTTP %ld, want %ld with \"%s\": %s\n", method, path,
                body ? body : "", st, want, text, ans ? ans : "");
    free(ans);
    return ok;
}

#define CHECK_ANSWER(method, path, body, want, text)                                            \
    DT_CHECK(answers(&m, method, path, body, want, text))
#define POST_RDZV(body, want, text) CHECK_ANSWER("POST", "/v1/jobs/rj/rendezvous", body, want, text)

/* GET .../replicas: the named replica's attempt when it is Running; 0 otherwise. */
static int running_attempt(const master *m, const char *name) {
    char *ans = NULL;
    int attempt = 0;
    if (request(m, "GET", "/v1/jobs/rj/replicas", NULL, &ans) == 200) {
        json_t *j = json_loads(ans, 0, NULL);
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(j, "replicas"), i, r) {
            const char *n = json_string_value(json_object_get(r, "name"));
            const char *s = json_string_value(json_object_get(r, "state"));
            if (n && s && !strcmp(n, name) && !strcmp(s, "Running"))
                attempt = (int)json_integer_value(json_object_get(r, "attempt"));
        }
        json_decref(j);
    }
    free(ans);
    return attempt;
}

/* ---- joins in threads: a ring forms only when its members wait together ---- */

typedef struct joiner {
    dt_shard_client *c;
    char address[64];
    int64_t generation, step;
    const char *unreachable;
    int timeout_ms;
    dt_err err;
    char msg[512];
    dt_rdzv_ring ring;
    pthread_t t;
} joiner;

static void *join_main(void *arg) {
    joiner *j = arg;
    dt_rdzv_join_req req = {.address = j->address,
                            .generation = j->generation,
                            .step = j->step,
                            .unreachable = j->unreachable};
    j->err = dt_rdzv_join(j->c, &req, j->timeout_ms ? j->timeout_ms : JOIN_TIMEOUT_MS, &j->ring);
    if (j->err) snprintf(j->msg, sizeof j->msg, "%s", dt_errmsg());
    return NULL;
}

static void join_start(joiner *j, dt_shard_client *c, int port, int64_t gen, int64_t step,
                       const char *unreachable) {
    dt_rdzv_ring_free(&j->ring);
    j->c = c;
    snprintf(j->address, sizeof j->address, "127.0.0.1:%d", port);
    j->generation = gen;
    j->step = step;
    j->unreachable = unreachable;
    j->err = DT_OK;
    j->msg[0] = 0;
    pthread_create(&j->t, NULL, join_main, j);
}

static int join_end(joiner *j) {
    pthread_join(j->t, NULL);
    if (j->err) fprintf(stderr, "join %s: %s\n", dt_shard_client_replica(j->c), j->msg);
    return j->err == DT_OK;
}

/* Every joiner got ring gen of size n, the same members and peers; ranks[k] is joiner k's. */
static int same_ring(joiner *js, int n, int64_t gen, const int *ranks) {
    for (int k = 0; k < n; k++) {
        const dt_rdzv_ring *r = &js[k].ring;
        if (r->generation != gen || r->size != n || r->rank != ranks[k]) {
            fprintf(stderr, "joiner %d: generation %lld size %d rank %d, want %lld %d %d\n", k,
                    (long long)r->generation, r->size, r->rank, (long long)gen, n, ranks[k]);
            return 0;
        }
        for (int i = 0; i < n; i++)
            if (strcmp(r->members[i], js[0].ring.members[i]) ||
                strcmp(r->peers[i], js[0].ring.peers[i]))
                return 0;
        if (strcmp(r->peers[r->rank], js[k].address)) return 0;
    }
    return 1;
}

/* Poll the status of ring gen until it must be left. */
static int wait_leave(dt_shard_client *c, int64_t gen) {
    for (int i = 0; i < WAIT_POLLS; i++) {
        int64_t newest = -1;
        int leave = 0;
        if (dt_rdzv_status(c, gen, &newest, &leave)) {
            fprintf(stderr, "status: %s\n", dt_errmsg());
            return 0;
        }
        if (leave) return 1;
        sleep_ms(20);
    }
    return 0;
}

static void test_rings(void) {
    master m = {0};
    DT_CHECK(master_start(&m, "rj", SPEC("rj", "{worker: 2}")) == 0);
    dt_shard_client *c[3] = {client(&m, "worker-0"), client(&m, "worker-1"), NULL};
    joiner js[3];
    memset(js, 0, sizeof js);
    DT_CHECK(c[0] && c[1]);

    /* two replicas: one ring, the higher step first */
    join_start(&js[0], c[0], 41000, 0, 3, NULL);
    join_start(&js[1], c[1], 41001, 0, 8, NULL);
    DT_CHECK(join_end(&js[0]) & join_end(&js[1]));
    DT_CHECK(same_ring(js, 2, 1, (int[]){1, 0}));
    DT_CHECK(!strcmp(js[0].ring.members[0], "worker-1") &&
             !strcmp(js[0].ring.peers[0], "127.0.0.1:41001"));
    int64_t newest = 0;
    int leave = 1;
    DT_CHECK_OK(dt_rdzv_status(c[0], 1, &newest, &leave));
    DT_CHECK(newest == 1 && leave == 0);
    DT_CHECK(log_has(&m, "rendezvous: ring generation 1 formed, 2 members by rank: 0 worker-1 "
                         "(step 8), 1 worker-0 (step 3)"));

    /* a third worker (dtrain scale): the members must leave; all three form generation 2 */
    CHECK_ANSWER("POST", "/v1/jobs/rj/scale", "{\"workers\": 3}", 200, "\"added\":[\"worker-2\"]");
    DT_CHECK((c[2] = client(&m, "worker-2")) != NULL);
    join_start(&js[2], c[2], 41002, 0, 0, NULL);
    DT_CHECK(wait_leave(c[0], 1));
    CHECK_ANSWER("GET", "/v1/jobs/rj/rendezvous?generation=1", NULL, 200,
                 "\"waiting\":[\"worker-2\"]");
    /* the status says why worker-2 waits */
    CHECK_ANSWER("GET", "/v1/jobs/rj", NULL, 200, "ring generation 2 forming: 1 of ");
    join_start(&js[0], c[0], 41000, 1, 12, NULL);
    join_start(&js[1], c[1], 41001, 1, 12, NULL);
    DT_CHECK(join_end(&js[0]) & join_end(&js[1]) & join_end(&js[2]));
    DT_CHECK(same_ring(js, 3, 2, (int[]){0, 1, 2}));
    DT_CHECK_OK(dt_rdzv_status(c[2], 2, &newest, &leave));
    DT_CHECK(newest == 2 && leave == 0);
    /* a late poll is answered the ring it is in */
    POST_RDZV("{\"replica\":\"worker-1\",\"address\":\"127.0.0.1:41001\",\"generation\":1,"
              "\"step\":12}",
              200, "\"formed\":true,\"generation\":2,\"rank\":1,\"size\":3");

    /* worker-1's process is killed: its ring is broken; restarted, it joins again */
    char path[600], pid[32] = "";
    snprintf(path, sizeof path, "%s/run/worker-1.stand-in", m.dir);
    FILE *f = fopen(path, "r");
    DT_CHECK(f && fgets(pid, sizeof pid, f));
    fclose(f);
    DT_CHECK(atoi(pid) > 1 && kill(atoi(pid), SIGKILL) == 0);
    DT_CHECK(wait_leave(c[0], 2));
    DT_CHECK(log_has(&m, "ring generation 2 is broken: worker-1 exited with code 137"));
    int polls = 0;
    while (running_attempt(&m, "worker-1") != 2 && polls++ < WAIT_POLLS) sleep_ms(20);
    DT_CHECK(running_attempt(&m, "worker-1") == 2);
    join_start(&js[0], c[0], 41000, 2, 20, NULL);
    join_start(&js[1], c[1], 41011, 0, 0, NULL);
    join_start(&js[2], c[2], 41002, 2, 20, NULL);
    DT_CHECK(join_end(&js[0]) & join_end(&js[1]) & join_end(&js[2]));
    DT_CHECK(same_ring(js, 3, 3, (int[]){0, 2, 1}));

    /* the master is killed and resumed: the ring and its generation are kept */
    kill(m.pid, SIGKILL);
    DT_CHECK(master_wait(&m) == 128 + SIGKILL);
    DT_CHECK(master_start(&m, "rj", NULL) == 0);
    DT_CHECK_OK(dt_rdzv_status(c[1], 3, &newest, &leave));
    DT_CHECK(newest == 3 && leave == 0);

    /* bad bodies: 400 naming the field */
    POST_RDZV("{}", 400, "replica: required");
    POST_RDZV("[1]", 400, "JSON object");
    POST_RDZV("{\"replica\":\"worker-0\"}", 400, "address: required");
    POST_RDZV("{\"replica\":\"worker-0\",\"address\":\"localhost\",\"generation\":0,\"step\":0}",
              400, "address: required, the replica's data-plane \\\"host:port\\\"");
    POST_RDZV("{\"replica\":\"worker-0\",\"address\":\"h:70000\",\"generation\":0,\"step\":0}",
              400, "address:");
    POST_RDZV("{\"replica\":\"worker-0\",\"address\":\"h:1\",\"step\":0}", 400,
              "generation: expected an integer");
    POST_RDZV("{\"replica\":\"worker-0\",\"address\":\"h:1\",\"generation\":-1,\"step\":0}", 400,
              "generation: expected an integer in 0..");
    POST_RDZV("{\"replica\":\"worker-0\",\"address\":\"h:1\",\"generation\":0,\"step\":\"x\"}",
              400, "step: expected an integer");
    POST_RDZV("{\"replica\":\"worker-0\",\"address\":\"h:1\",\"generation\":0,\"step\":0,"
              "\"rank\":1}",
              400, "rank: unknown field");
    POST_RDZV("{\"replica\":\"worker-9\",\"address\":\"h:1\",\"generation\":0,\"step\":0}", 400,
              "replica: job 'rj' has no replica 'worker-9'");
    POST_RDZV("{\"replica\":\"worker-0\",\"address\":\"h:1\",\"generation\":0,\"step\":0,"
              "\"unreachable\":5}",
              400, "unreachable: expected a replica name");
    POST_RDZV("{\"replica\":\"worker-0\",\"address\":\"h:1\",\"generation\":0,\"step\":0,"
              "\"unreachable\":\"worker-0\"}",
              400, "unreachable: worker-0 cannot report itself");
    POST_RDZV("{\"replica\":\"worker-0\",\"address\":\"h:1\",\"generation\":99,\"step\":0}", 400,
              "generation: 99 is not a ring this master formed (the newest is 3)");
    CHECK_ANSWER("GET", "/v1/jobs/rj/rendezvous?generation=x", NULL, 400,
                 "generation: expected an integer >= 0, got 'x'");
    CHECK_ANSWER("GET", "/v1/jobs/other/rendezvous", NULL, 404, "no job 'other' here");
    dt_rdzv_join_req bad = {.address = NULL};
    dt_rdzv_ring ring = {0};
    DT_CHECK_ERR(dt_rdzv_join(c[0], &bad, 100, &ring), DT_ERR_ARG,
                 "rendezvous of worker-0: address: required");
    bad = (dt_rdzv_join_req){.address = "127.0.0.1:41000", .generation = 99};
    DT_CHECK_ERR(dt_rdzv_join(c[0], &bad, 100, &ring), DT_ERR_ARG,
                 "generation: 99 is not a ring this master formed (the newest is 3) (HTTP 400)");
    DT_CHECK_ERR(dt_rdzv_status(c[0], 99, &newest, &leave), DT_ERR_ARG, "generation: 99");
    /* nothing changed */
    DT_CHECK_OK(dt_rdzv_status(c[1], 3, &newest, &leave));
    DT_CHECK(newest == 3 && leave == 0);

    /* worker-0 lost worker-2: the others form a ring without it, and it waits. worker-0's
     * report must reach the master first: once worker-1 has left the ring on its own, a lost
     * peer is no sign of a bad link and brings no penalty. */
    join_start(&js[0], c[0], 41000, 3, 30, "worker-2");
    polls = 0;
    while (!log_has(&m, "worker-0 reports worker-2 unreachable") && polls++ < WAIT_POLLS)
        sleep_ms(20);
    join_start(&js[1], c[1], 41011, 3, 30, NULL);
    DT_CHECK(join_end(&js[0]) & join_end(&js[1]));
    DT_CHECK(same_ring(js, 2, 4, (int[]){0, 1}));
    DT_CHECK(log_has(&m, "rendezvous: worker-0 reports worker-2 unreachable: worker-2 is left out "
                         "of rings for 60.0 s"));
    CHECK_ANSWER("GET", "/v1/jobs/rj/rendezvous?generation=4", NULL, 200,
                 "\"waiting\":[],\"broken\":false,\"leave\":false");
    dt_rdzv_join_req w2 = {.address = "127.0.0.1:41002", .generation = 3, .step = 30};
    DT_CHECK_ERR(dt_rdzv_join(c[2], &w2, 300, &ring), DT_ERR_STATE,
                 "rendezvous of worker-2: no ring was formed within 300 ms (the master's newest "
                 "generation is 4");

    /* a stopped job still takes joins: its members that got SIGTERM with a shard half
     * trained re-form to finish it before they go (allreduce.c) */
    CHECK_ANSWER("POST", "/v1/jobs/rj/stop", NULL, 202, "\"stopping\":true");
    POST_RDZV("{\"replica\":\"worker-0\",\"address\":\"h:1\",\"generation\":4,\"step\":0}", 200,
              "\"formed\":");
    DT_CHECK(master_wait(&m) == 0);

    for (int k = 0; k < 3; k++) {
        dt_rdzv_ring_free(&js[k].ring);
        dt_shard_client_close(c[k]);
    }
}

/* A TrainJob started with one replica runs `dtrain train` alone: it cannot be scaled into a
 * ring. */
static void test_one_replica(void) {
    master m = {0};
    DT_CHECK(master_start(&m, "one", SPEC("one", "{worker: 1}")) == 0);
    CHECK_ANSWER("POST", "/v1/jobs/one/scale", "{\"workers\": 2}", 400,
                 "TrainJob 'one' was started with one replica, which trains alone (dtrain "
                 "train) and takes no part in all-reduce rings: it cannot be scaled");
    CHECK_ANSWER("POST", "/v1/jobs/one/stop", NULL, 202, "\"stopping\":true");
    DT_CHECK(master_wait(&m) == 0);
}

DT_TEST_MAIN(DT_T(test_rings), DT_T(test_one_replica))
