/*
 * server.c - the job server's event loop: its HTTP API, the `dtrain run` processes it
 * starts, and the masters it watches (docs/SERVER.md).
 *
 * One thread: epoll over the HTTP server (libmicrohttpd in external-epoll mode) and a
 * signalfd (SIGTERM, SIGINT: leave; SIGCHLD: a `dtrain run` ended). Every WATCH_MS while a
 * job runs, each running job is looked at: a master holds DIR/master.lock while it runs
 * (flock), and writes DIR/result.json when the job ends. So a job is:
 *   - starting: its `dtrain run --detach` (the launcher) still runs;
 *   - running: the launcher is done and the master holds its lock;
 *   - ended: neither; result.json (written since this start) says how. A master that died
 *     without one (killed) is resumed (`dtrain run --resume DIR --detach`), unless a user
 *     stopped the job.
 * Jobs are started by exec'ing this same binary, so their masters are their own sessions:
 * they keep running when the server exits (SIGTERM, or kill -9), and a restarted server
 * replays its journal (journal.c) and watches them again.
 *
 * The server dir (default $DTRAIN_HOME/server) holds server.lock (one server per dir),
 * server.json ({"url", "token", "pid"}, 0600, written once listening), journal.jsonl,
 * specs/<name>.yaml (what was submitted), jobs/<name>/ (the job dirs) and
 * experiments/<name>.json.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "master/registry-impl.h"
#include "net/http-impl.h"
#include "server/server-impl.h"

#define WATCH_MS 250
#define MAX_RELAUNCH 3

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s dtrain server: ", when);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void dt__utf8_repair(char *s) {
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 && *p >= 0xc2 ? 2 : (*p & 0xf0) == 0xe0 ? 3
                : (*p & 0xf8) == 0xf0 && *p <= 0xf4 ? 4 : 0;
        for (int k = 1; k < n; k++)
            if ((p[k] & 0xc0) != 0x80) n = 0; /* stops at the NUL too */
        /* no overlong 3-byte forms, no surrogates, nothing past U+10FFFF */
        if (n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))) n = 0;
        if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) n = 0;
        if (n == 0) {
            *p++ = '?';
            continue;
        }
        if (n == 1 && *p < 0x20) *p = ' ';
        p += n;
    }
}

void dt__sjob_free(dt__sjob *j) {
    if (!j) return;
    json_decref(j->labels);
    free(j);
}

dt__sjob *dt__server_find(dt__server *s, const char *name) {
    for (int i = 0; name && i < s->njobs; i++)
        if (!s->jobs[i]->deleted && !strcmp(s->jobs[i]->name, name)) return s->jobs[i];
    return NULL;
}

dt_err dt__server_add(dt__server *s, dt__sjob *j) {
    if (s->njobs == s->capjobs) {
        int cap = s->capjobs ? 2 * s->capjobs : 64;
        dt__sjob **n = realloc(s->jobs, sizeof *n * (size_t)cap);
        if (!n) return dt_err_set(DT_ERR_NOMEM, "out of memory");
        s->jobs = n;
        s->capjobs = cap;
    }
    dt_err e;
    if ((e = dt__path(j->dir, sizeof j->dir, "%s/jobs/%s", s->dir, j->name)) ||
        (e = dt__path(j->spec, sizeof j->spec, "%s/specs/%s.yaml", s->dir, j->name)))
        return dt_err_wrap(e, "job %s", j->name);
    s->jobs[s->njobs++] = j;
    s->dirty = 1;
    return DT_OK;
}

int dt__server_master(const dt__sjob *j, char *url, size_t ucap, char *token, size_t tcap) {
    char path[DT__PATH_MAX];
    if (!dt__master_live(j->dir, NULL, 0) || dt__path(path, sizeof path, "%s/master.json", j->dir))
        return 0;
    json_t *mj = json_load_file(path, 0, NULL);
    const char *u = json_string_value(json_object_get(mj, "url"));
    const char *t = json_string_value(json_object_get(mj, "token"));
    int ok = u && t;
    if (ok) {
        snprintf(url, ucap, "%s", u);
        snprintf(token, tcap, "%s", t);
    }
    json_decref(mj);
    return ok;
}

/* ---- starting jobs ---- */

/* Do files a (the submitter's: any path it named) and b hold the same text? Only regular
 * files of one size are read: a path such as /dev/zero or a FIFO would never end. */
static int same_text(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0 || !S_ISREG(sa.st_mode) || !S_ISREG(sb.st_mode) ||
        sa.st_size != sb.st_size)
        return 0;
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    int same = dt__read_file(a, &x, &nx) == DT_OK && dt__read_file(b, &y, &ny) == DT_OK &&
               nx == ny && !memcmp(x, y, nx);
    dt_err_clear();
    free(x);
    free(y);
    return same;
}

static void set_finished(dt__server *s, dt__sjob *j, dt__sjob_state st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_finished(dt__server *s, dt__sjob *j, dt__sjob_state st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->message, sizeof j->message, fmt, ap);
    va_end(ap);
    dt__utf8_repair(j->message);
    j->state = st;
    j->finish_t = now_s();
    j->launcher = 0;
    j->want = 0;
    snprintf(j->reason, sizeof j->reason, "%s", dt__sjob_state_name(st));
    if (dt__sjournal(s, "finish", j, json_pack("{s:s, s:s}", "state", dt__sjob_state_name(st),
                                                "message", j->message)))
        say("%s", dt_errmsg());
    say("job %s %s%s%s", j->name, dt__sjob_state_name(st), j->message[0] ? ": " : "", j->message);
    s->dirty = 1;
}

static void launch(dt__server *s, dt__sjob *j) {
    char jpath[DT__PATH_MAX], log[DT__PATH_MAX];
    if (dt__path(jpath, sizeof jpath, "%s/journal.jsonl", j->dir) ||
        dt__path(log, sizeof log, "%s/launch.log", j->dir)) {
        set_finished(s, j, DT__SJOB_FAILED, "%s", dt_errmsg());
        dt_err_clear();
        return;
    }
    struct stat sb;
    int resume = stat(jpath, &sb) == 0 && sb.st_size > 0;
    if (dt__mkdirs(j->dir)) {
        set_finished(s, j, DT__SJOB_FAILED, "cannot make its job dir: %s", dt_errmsg());
        dt_err_clear();
        return;
    }
    /* The submitter's own file when it still says what was submitted: its relative data
     * paths resolve next to it, as with `dtrain run`. */
    const char *spec = j->origin[0] && same_text(j->origin, j->spec) ? j->origin : j->spec;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        say("fork: %s", strerror(errno));
        return; /* stays queued; tried again at the next admission */
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int in = open("/dev/null", O_RDONLY), out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (in >= 0) dup2(in, 0);
        if (out >= 0) {
            dup2(out, 1);
            dup2(out, 2);
        }
        if (resume)
            execl(s->self_exe, s->self_exe, "run", "--resume", j->dir, "--detach", (char *)NULL);
        else
            execl(s->self_exe, s->self_exe, "run", spec, "--job-dir", j->dir, "--detach", (char *)NULL);
        fprintf(stderr, "dtrain server: exec %s: %s\n", s->self_exe, strerror(errno));
        _exit(127);
    }
    j->launcher = pid;
    j->launcher_child = 1;
    j->launch_failed = 0;
    j->state = DT__SJOB_RUNNING;
    j->start_t = now_s();
    if (!j->started_once) j->started_once = 1; /* a relaunch counted it already */
    j->reason[0] = j->message[0] = 0;
    if (dt__sjournal(s, "start", j, json_pack("{s:b, s:i}", "resume", resume, "pid", (int)pid)))
        say("%s", dt_errmsg());
    say("job %s admitted (%g cpus): %s (pid %d)", j->name, j->demand.cpus,
        resume ? "dtrain run --resume" : "dtrain run", (int)pid);
}

void dt__server_admit(dt__server *s) {
    s->dirty = 0;
    dt__sjob **start = malloc(sizeof *start * (size_t)(s->njobs ? s->njobs : 1));
    if (!start) return;
    int n = dt__queue_plan(s, start, s->njobs);
    for (int i = 0; i < n; i++) launch(s, start[i]);
    free(start);
    if (n) dt__queue_plan(s, NULL, 0); /* positions and reasons after the starts */
}

/* ---- asking masters ---- */

static int master_post(const dt__sjob *j, const char *what, char *msg, size_t cap) {
    char url[1200], tok[128], route[200];
    if (!dt__server_master(j, url, sizeof url, tok, sizeof tok)) return -1;
    snprintf(route, sizeof route, "/v1/jobs/%s/%s", j->name, what);
    dt__http_client *c = NULL;
    long status = 0;
    char *body = NULL;
    dt_err e = dt__http_client_init(&c, url, tok, DT__MASTER_TIMEOUT_MS);
    if (!e) e = dt__http_client_request(c, "POST", route, "", 0, &status, &body, NULL);
    dt__http_client_free(c);
    if (e) {
        status = e == DT_ERR_TIMEOUT ? 504 : 502;
        if (status == 504)
            snprintf(msg, cap, "job %s: its master (%s) did not answer within %d s", j->name, url,
                     DT__MASTER_TIMEOUT_MS / 1000);
        else
            snprintf(msg, cap, "job %s: its master (%s) did not answer: %s", j->name, url, dt_errmsg());
        dt_err_clear();
    } else if (status != 202 && status != 200) {
        snprintf(msg, cap, "its master answered %ld: %s", status, body ? body : "");
    }
    free(body);
    return (int)status;
}

/* Send what was asked of a job whose master was not up yet. A master that does not take it
 * is asked again WANT_RETRY_S later, not at every look (each try may wait for it). */
#define WANT_RETRY_S 5.0
static void send_wanted(dt__server *s, dt__sjob *j) {
    char msg[512] = "";
    if (now_s() < j->want_retry_t) return;
    int rc = master_post(j, j->want == DT__WANT_STOP_NOW ? "stop?now=true" : "stop", msg, sizeof msg);
    if (rc == 202 || rc == 200) {
        j->want = 0;
        j->message[0] = 0;
    } else if (rc != -1) {
        say("job %s: stop: %s (asked again in %g s)", j->name, msg, WANT_RETRY_S);
        j->want_retry_t = now_s() + WANT_RETRY_S;
    }
    (void)s;
}

int dt__server_request(dt__server *s, dt__sjob *j, int kind, char *msg, size_t cap) {
    int suspend = kind == DT__WANT_SUSPEND;
    msg[0] = 0;
    if (dt__sjob_finished(j->state)) {
        snprintf(msg, cap, "job %s has finished (%s)", j->name, dt__sjob_state_name(j->state));
        return 409;
    }
    if (j->state == DT__SJOB_QUEUED || j->state == DT__SJOB_SUSPENDED) {
        if (suspend) {
            if (j->state == DT__SJOB_SUSPENDED) {
                snprintf(msg, cap, "job %s is suspended already", j->name);
                return 409;
            }
            j->state = DT__SJOB_SUSPENDED;
            j->resume = j->started_once;
            dt__sjournal(s, "suspended", j, NULL);
        } else {
            j->stop_asked = 1;
            dt__sjournal(s, "stop", j, json_pack("{s:b}", "now", kind == DT__WANT_STOP_NOW));
            set_finished(s, j, DT__SJOB_STOPPED, "stopped while %s",
                         j->state == DT__SJOB_QUEUED ? "queued" : "suspended");
        }
        s->dirty = 1;
        return 202;
    }
    /* Running or suspending: the master's stop (its roles save). */
    if (suspend && j->state == DT__SJOB_SUSPENDING) {
        snprintf(msg, cap, "job %s is being suspended already", j->name);
        return 409;
    }
    if (!suspend) {
        j->stop_asked = 1;
        dt__sjournal(s, "stop", j, json_pack("{s:b}", "now", kind == DT__WANT_STOP_NOW));
    }
    int rc = master_post(j, kind == DT__WANT_STOP_NOW ? "stop?now=true" : "stop", msg, cap);
    if (rc == -1) {
        /* Its master is not up yet (the job is starting, or being resumed): asked once it is. */
        j->want = kind;
        rc = 202;
    } else if (rc == 502 || rc == 504) {
        /* Its master runs but did not answer: asked again later, as one not up yet is (the
         * job's message says so). */
        say("%s; asked again every %g s", msg, WANT_RETRY_S);
        snprintf(j->message, sizeof j->message, "%.400s; asked again every %g s", msg, WANT_RETRY_S);
        dt__utf8_repair(j->message);
        j->want = kind;
        j->want_retry_t = now_s() + WANT_RETRY_S;
        rc = 202;
    } else if (rc != 202 && rc != 200) {
        return rc;
    }
    if (suspend) {
        j->state = DT__SJOB_SUSPENDING;
        dt__sjournal(s, "suspending", j, NULL);
        say("job %s suspending", j->name);
    }
    s->dirty = 1;
    return 202;
}

void dt__server_resume(dt__server *s, dt__sjob *j) {
    j->state = DT__SJOB_QUEUED;
    j->resume = j->started_once;
    if (j->started_once) j->started_once = 1; /* relaunches counted anew */
    j->reason[0] = j->message[0] = 0;
    dt__sjournal(s, "requeue", j, NULL);
    s->dirty = 1;
}

void dt__server_forget(dt__server *s, dt__sjob *j) {
    dt__sjournal(s, "delete", j, NULL);
    dt__remove_tree(j->dir);
    unlink(j->spec);
    int k = 0;
    for (int i = 0; i < s->njobs; i++)
        if (s->jobs[i] != j) s->jobs[k++] = s->jobs[i];
    s->njobs = k;
    dt__sjob_free(j);
    s->dirty = 1;
}

/* ---- watching running jobs ---- */

/* DIR/result.json's status when it was written since this start (NULL otherwise), and
 * its message (with the eval accuracy when there is one) into msg. */
static const char *fresh_result(const dt__sjob *j, char *buf, size_t cap, char *msg, size_t mcap) {
    char path[DT__PATH_MAX];
    struct stat sb;
    if (dt__path(path, sizeof path, "%s/result.json", j->dir)) return NULL; /* fits: see launch */
    /* to the nanosecond (a result of the last start may be under a second old when a
     * suspended job is resumed); 50 ms for the file system's coarser clock */
    if (stat(path, &sb) != 0 ||
        (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec / 1e9 + 0.05 < j->start_t)
        return NULL;
    json_t *r = json_load_file(path, 0, NULL);
    const char *st = json_string_value(json_object_get(r, "status"));
    if (st) snprintf(buf, cap, "%s", st);
    if (msg) {
        const char *m = json_string_value(json_object_get(r, "message"));
        json_t *acc = json_object_get(json_object_get(r, "eval"), "accuracy");
        if (json_is_number(acc))
            snprintf(msg, mcap, "%s (eval accuracy %.4f)", m ? m : "", json_number_value(acc));
        else
            snprintf(msg, mcap, "%s", m ? m : "");
    }
    json_decref(r);
    return st ? buf : NULL;
}

/* The last line of the launcher's output: why `dtrain run` failed. */
static void launch_why(const dt__sjob *j, char *out, size_t cap) {
    char path[DT__PATH_MAX];
    char *text = NULL;
    size_t len = 0;
    out[0] = 0;
    if (dt__path(path, sizeof path, "%s/launch.log", j->dir) || dt__read_file(path, &text, &len)) {
        dt_err_clear();
        return;
    }
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = 0;
    char *last = memrchr(text, '\n', len);
    snprintf(out, cap, "%s", last ? last + 1 : text);
    free(text);
}

/* Is pid (a launcher from before a restart) still the `dtrain run` of this job? Its command
 * line names the job dir (a pid reused by another process does not). */
static int launcher_alive(const dt__sjob *j) {
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)j->launcher);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    for (ssize_t i = 0; i < n; i++)
        if (!buf[i]) buf[i] = '\n';
    buf[n] = 0;
    return strstr(buf, j->dir) != NULL;
}

static void watch(dt__server *s, dt__sjob *j) {
    if (j->launcher && !j->launcher_child && !launcher_alive(j)) j->launcher = 0;
    char url[1200], tok[128];
    int live = dt__server_master(j, url, sizeof url, tok, sizeof tok);
    if (live && j->want) send_wanted(s, j);
    if (j->launcher || live) return;
    char st[32], why[512] = "";
    const char *res = fresh_result(j, st, sizeof st, why, sizeof why);
    if (res) {
        int state = dt__sjob_state_parse(res);
        if (state == DT__SJOB_STOPPED && !j->stop_asked &&
            (j->state == DT__SJOB_SUSPENDING || j->want == DT__WANT_SUSPEND)) {
            j->state = DT__SJOB_SUSPENDED;
            j->resume = 1;
            j->want = 0;
            snprintf(j->reason, sizeof j->reason, "Suspended");
            snprintf(j->message, sizeof j->message, "suspended; 'dtrain resume' continues it");
            dt__sjournal(s, "suspended", j, NULL);
            say("job %s suspended", j->name);
            s->dirty = 1;
            return;
        }
        set_finished(s, j, state >= 0 ? (dt__sjob_state)state : DT__SJOB_FAILED, "%s", why);
        return;
    }
    /* No master and no result of this start. */
    char path[DT__PATH_MAX];
    dt__path(path, sizeof path, "%s/journal.jsonl", j->dir); /* fits: launch made it */
    if (j->stop_asked) {
        set_finished(s, j, DT__SJOB_STOPPED, "stopped before its master ran");
        return;
    }
    if (j->state == DT__SJOB_SUSPENDING) {
        j->state = DT__SJOB_SUSPENDED;
        j->resume = access(path, F_OK) == 0; /* a master that never ran saved nothing */
        j->want = 0;
        dt__sjournal(s, "suspended", j, NULL);
        s->dirty = 1;
        return;
    }
    launch_why(j, why, sizeof why);
    if (access(path, F_OK) != 0) {
        set_finished(s, j, DT__SJOB_FAILED, "dtrain run failed: %s", why[0] ? why : "no output");
        return;
    }
    if (j->started_once > MAX_RELAUNCH) {
        set_finished(s, j, DT__SJOB_FAILED,
                     "its master ended without a result %d times (killed?); not started again "
                     "(its master.log says why)", j->started_once);
        return;
    }
    /* Its master ran (its journal is there) and died without a result (killed): resumed by
     * a new one, at most MAX_RELAUNCH times. So is one killed while it started, before its
     * replicas ran: its `dtrain run` failed then too, for that reason only (a master that
     * fails the job writes result.json, looked at above). */
    j->started_once++;
    say("job %s: its master is gone without a result%s; resuming it", j->name,
        j->launch_failed ? " (while it started)" : "");
    launch(s, j);
}

static void reap(dt__server *s) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < s->njobs; i++) {
            dt__sjob *j = s->jobs[i];
            if (j->launcher != pid || !j->launcher_child) continue;
            j->launcher = 0;
            j->launch_failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        }
    }
}

/* ---- the server dir and the loop ---- */

static dt_err take_lock(dt__server *s) {
    char path[DT__PATH_MAX];
    dt_err e = dt__path(path, sizeof path, "%s/server.lock", s->dir);
    if (e) return e;
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0) return dt_err_set(DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char buf[32] = "";
        ssize_t n = pread(s->lock_fd, buf, sizeof buf - 1, 0);
        buf[n > 0 ? n : 0] = 0;
        buf[strcspn(buf, "\n")] = 0;
        return dt_err_set(DT_ERR_STATE, "%s: a server (pid %s) already runs in this dir", s->dir,
                          buf[0] ? buf : "?");
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(s->lock_fd, 0) != 0 || pwrite(s->lock_fd, pid, (size_t)n, 0) != n)
        return dt_err_set(DT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return DT_OK;
}

/* The token: given, else the one this dir's server had (clients keep working across a
 * restart), else a new random one. */
static dt_err choose_token(dt__server *s) {
    if (s->opts.token) {
        if (strlen(s->opts.token) >= sizeof s->token || !*s->opts.token)
            return dt_err_set(DT_ERR_ARG, "--token: expected 1..%zu characters", sizeof s->token - 1);
        snprintf(s->token, sizeof s->token, "%s", s->opts.token);
        return DT_OK;
    }
    char path[DT__PATH_MAX];
    dt_err e = dt__path(path, sizeof path, "%s/server.json", s->dir);
    if (e) return e;
    json_t *sj = json_load_file(path, 0, NULL);
    const char *t = json_string_value(json_object_get(sj, "token"));
    if (t && *t && strlen(t) < sizeof s->token) snprintf(s->token, sizeof s->token, "%s", t);
    json_decref(sj);
    if (s->token[0]) return DT_OK;
    unsigned char rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
        return dt_err_set(DT_ERR_IO, "getrandom: %s", strerror(errno));
    for (int i = 0; i < 16; i++) snprintf(s->token + 2 * i, 3, "%02x", rnd[i]);
    return DT_OK;
}

static dt_err write_server_json(dt__server *s) {
    char path[DT__PATH_MAX];
    dt_err e = dt__path(path, sizeof path, "%s/server.json", s->dir);
    if (e) return e;
    json_t *o = json_pack("{s:s, s:s, s:i}", "url", s->url, "token", s->token, "pid", (int)getpid());
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!text) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    /* 0600: the token is a secret (dt__write_file_atomic keeps the umask's mode otherwise) */
    mode_t old = umask(077);
    e = dt__write_file_atomic(path, text, strlen(text));
    umask(old);
    chmod(path, 0600);
    free(text);
    return e;
}

static dt_err prepare(dt__server *s, const dt__server_opts *opts) {
    memset(s, 0, sizeof *s);
    s->opts = *opts;
    s->lock_fd = -1;
    const char *home = getenv("DTRAIN_HOME");
    dt_err e = opts->dir            ? dt__path(s->dir, sizeof s->dir, "%s", opts->dir)
               : home && *home ? dt__path(s->dir, sizeof s->dir, "%s/server", home)
                               : dt__path(s->dir, sizeof s->dir, "%s/.dtrain/server",
                                          getenv("HOME") ?: ".");
    /* Every path the server builds in its dir fits once it leaves DT__SERVER_DIR_ROOM. */
    if (e || (e = dt__path_room(s->dir, DT__SERVER_DIR_ROOM, "server dir")) ||
        (e = dt__mkdirs(s->dir)))
        return e;
    char abs[PATH_MAX];
    if (realpath(s->dir, abs) && (e = dt__path(s->dir, sizeof s->dir, "%s", abs))) return e;
    static const char *const subs[] = {"jobs", "specs", "experiments"};
    for (int i = 0; i < 3; i++) {
        char p[DT__PATH_MAX];
        if ((e = dt__path(p, sizeof p, "%s/%s", s->dir, subs[i])) || (e = dt__mkdirs(p))) return e;
    }
    if ((e = take_lock(s)) || (e = choose_token(s))) return e;
    ssize_t n = readlink("/proc/self/exe", s->self_exe, sizeof s->self_exe - 1);
    if (n <= 0) return dt_err_set(DT_ERR_IO, "/proc/self/exe: %s", strerror(errno));
    s->self_exe[n] = 0;
    dt__demand m = dt__queue_machine();
    s->cap.cpus = opts->cpus > 0 ? opts->cpus : m.cpus;
    s->cap.mem = opts->mem > 0 ? opts->mem : m.mem;
    if ((e = dt__sjournal_replay(s)) || (e = dt__sjournal_open(s))) return e;
    int running = 0, queued = 0;
    for (int i = 0; i < s->njobs; i++) {
        running += s->jobs[i]->state == DT__SJOB_RUNNING || s->jobs[i]->state == DT__SJOB_SUSPENDING;
        queued += s->jobs[i]->state == DT__SJOB_QUEUED;
    }
    if (s->njobs)
        say("replayed %s/journal.jsonl: %d jobs, %d running (watched again), %d queued", s->dir,
            s->njobs, running, queued);
    s->dirty = 1;
    return DT_OK;
}

static void cleanup(dt__server *s) {
    dt__http_server_free(s->http);
    dt__sjournal_close(s);
    for (int i = 0; i < s->njobs; i++) dt__sjob_free(s->jobs[i]);
    free(s->jobs);
    if (s->lock_fd >= 0) close(s->lock_fd);
}

dt_err dt__server_run(const dt__server_opts *opts) {
    dt__server *s = calloc(1, sizeof *s);
    if (!s) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    int epfd = -1, sigfd = -1;
    dt_err e = prepare(s, opts);
    if (e) goto out;
    dt__http_server_opts ho = {.bind_addr = opts->bind_addr,
                               .port = opts->port,
                               .token = opts->no_auth ? NULL : s->token,
                               .routes = dt__server_routes,
                               .nroutes = dt__server_nroutes,
                               .ctx = s};
    if ((e = dt__http_server_start(&s->http, &ho))) goto out;
    const char *host = opts->bind_addr && strcmp(opts->bind_addr, "0.0.0.0") ? opts->bind_addr : "127.0.0.1";
    snprintf(s->url, sizeof s->url, "http://%s:%d", host, dt__http_server_port(s->http));
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (sigfd < 0 || epfd < 0) {
        e = dt_err_set(DT_ERR_IO, "signalfd/epoll: %s", strerror(errno));
        goto out;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = sigfd};
    epoll_ctl(epfd, EPOLL_CTL_ADD, sigfd, &ev);
    ev.data.fd = dt__http_server_fd(s->http);
    epoll_ctl(epfd, EPOLL_CTL_ADD, ev.data.fd, &ev);
    if ((e = write_server_json(s))) goto out;
    say("listening on %s (dir %s; capacity %g cpus, %.1f GiB%s)", s->url, s->dir, s->cap.cpus,
        (double)s->cap.mem / (1 << 30), opts->no_auth ? "; no token needed" : "");
    say("dashboard %s/#token=%s", s->url, s->token);
    for (int quit = 0; !quit;) {
        int busy = 0;
        for (int i = 0; i < s->njobs; i++)
            busy |= s->jobs[i]->state == DT__SJOB_RUNNING || s->jobs[i]->state == DT__SJOB_SUSPENDING;
        int timeout = dt__http_server_timeout_ms(s->http);
        if (busy && (timeout < 0 || timeout > WATCH_MS)) timeout = WATCH_MS;
        if (s->dirty) timeout = 0;
        struct epoll_event evs[8];
        int n = epoll_wait(epfd, evs, 8, timeout);
        if (n < 0 && errno != EINTR) {
            e = dt_err_set(DT_ERR_IO, "epoll_wait: %s", strerror(errno));
            break;
        }
        for (int k = 0; k < n; k++) {
            if (evs[k].data.fd != sigfd) continue;
            struct signalfd_siginfo si;
            while (read(sigfd, &si, sizeof si) == sizeof si) {
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) quit = 1;
            }
        }
        dt__http_server_run(s->http);
        reap(s);
        for (int i = 0; i < s->njobs; i++) {
            dt__sjob *j = s->jobs[i];
            if (j->state == DT__SJOB_RUNNING || j->state == DT__SJOB_SUSPENDING) watch(s, j);
        }
        if (s->dirty) dt__server_admit(s);
    }
    if (!e) say("leaving; the jobs it started keep running");
out:
    if (sigfd >= 0) close(sigfd);
    if (epfd >= 0) close(epfd);
    cleanup(s);
    free(s);
    return e;
}
