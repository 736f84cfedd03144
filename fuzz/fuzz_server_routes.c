/*
 * fuzz_server_routes.c - libFuzzer harness: the job server's HTTP routes (src/server/routes.c:
 * submissions, the queue, a job's status and result, suspend, resume, stop, delete,
 * experiments, and the routes passed on to a job's master) through the real request path:
 * one real HTTP server with the job server's route table (token "tok") serves on 127.0.0.1
 * for the whole run; the requests of an input are sent as fuzz-http-impl.h says.
 *
 * The server behind the routes is a dt__server set up as `dtrain server` sets one up, but
 * without its loop: a scratch server dir (jobs/, specs/, experiments/, a real journal),
 * capacity 2 CPUs and 4 GiB, with an image `mnist` for the quick form, emptied after each
 * input. A job the queue admits is launched as
 * the server launches one, a process of its own, but the program is /bin/true instead of
 * dtrain (no master runs: the routes passed on to a master answer as for a job whose master
 * is not up); the harness reaps those that have ended after each input. Input: the
 * requests, nothing else.
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include "fuzz-http-impl.h"
#include "core/file-impl.h"
#include "server/server-impl.h"

static dt__server s;

/* Empty the server's dir (its three subdirectories made again, empty; no journal). */
static void empty_dir(void) {
    static const char *const subs[] = {"jobs", "specs", "experiments"};
    for (int i = 0; i < 3; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", s.dir, subs[i]);
        dt__remove_tree(p);
        mkdir(p, 0700);
    }
    char j[4200];
    snprintf(j, sizeof j, "%s/journal.jsonl", s.dir);
    unlink(j);
}

static void cleanup(void) {
    dt__http_server_free(s.http);
    dt__sjournal_close(&s);
    empty_dir();
    dt__remove_tree(s.dir);
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

static void setup(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(s.dir, sizeof s.dir, "%.200s/dt-fuzz-server-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(s.dir)) abort();
    atexit(cleanup);
    /* an image for the quick form (docs/SERVER.md): a directory holding exec.py */
    char img[4200];
    snprintf(img, sizeof img, "%s/images", s.dir);
    mkdir(img, 0700);
    snprintf(img, sizeof img, "%s/images/mnist", s.dir);
    mkdir(img, 0700);
    snprintf(img, sizeof img, "%s/images/mnist/exec.py", s.dir);
    FILE *f = fopen(img, "w");
    if (!f || fputs("print('train')\n", f) < 0 || fclose(f) != 0) abort();
    snprintf(s.token, sizeof s.token, "tok");
    snprintf(s.self_exe, sizeof s.self_exe, "/bin/true");
    s.cap.cpus = 2;
    s.cap.mem = (int64_t)4 << 30;
    s.lock_fd = -1;
    dt__http_server_opts o = {.bind_addr = "127.0.0.1", .token = s.token,
                              .routes = dt__server_routes, .nroutes = dt__server_nroutes,
                              .ctx = &s};
    if (dt__http_server_start(&s.http, &o)) {
        fprintf(stderr, "fuzz_server_routes: %s\n", dt_errmsg());
        abort();
    }
    snprintf(s.url, sizeof s.url, "http://127.0.0.1:%d", dt__http_server_port(s.http));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!s.http) setup();
    empty_dir();
    if (dt__sjournal_open(&s)) abort();
    dt__fuzz_http_requests(s.http, s.token, data, size);
    for (int i = 0; i < s.njobs; i++) dt__sjob_free(s.jobs[i]);
    free(s.jobs);
    s.jobs = NULL;
    s.njobs = s.capjobs = 0;
    s.next_seq = 0;
    s.dirty = 0;
    dt__sjournal_close(&s);
    /* The launched jobs' processes (/bin/true) that have ended (the others at a later input).
     * Never a blocking wait for any child: the sanitizers' llvm-symbolizer is one too. */
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    dt_err_clear();
    return 0;
}
