/*
 * local.c - the local backend: run replicas as processes on this machine.
 *
 * Design: every replica runs under a small supervisor, a forked copy of the master that
 * does nothing but wait:
 *
 *     master ──fork──> supervisor (process-group leader, stdout/stderr → the replica's log)
 *                         └──fork+exec──> the replica's command
 *
 * The supervisor waits for the command and writes its exit code (128+signal when killed,
 * as Kubernetes reports a container's) to a file in the job dir before exiting with that
 * same code. That file is why the supervisor exists: the master itself may be killed and
 * restarted, and a restarted master cannot waitpid() a process that is not its child. It
 * adopts the surviving supervisors through pidfds instead and reads their exit codes from
 * the files. Signals for a replica go to its whole process group, so the supervisor, the
 * command and the command's own children are stopped together.
 *
 * Between fork and exec only async-signal-safe calls are made (the master may link
 * threaded libraries); every string the children need is prepared before the first fork.
 * The supervisor ignores SIGINT/SIGTERM/SIGHUP so that a stop request reaches the command
 * and the supervisor still records how the command ended; SIGKILL ends both.
 *
 * When the command ends, what it left behind in its process group ends too, as a
 * container's processes do when its main process exits: the supervisor is a child
 * subreaper (orphaned descendants become its children), sends the group SIGTERM, reaps
 * until no descendant is left, and after LEFTOVER_GRACE_MS sends SIGKILL to the group,
 * itself included. The exit file is written first, so the master takes the command's code
 * from it rather than the supervisor's own 137.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/path-impl.h"


#define LEFTOVER_GRACE_MS 2000

extern char **environ;

/* What the supervisor needs, prepared before the fork. */
typedef struct launch_args {
    char *const *argv;
    char *const *envp;
    const char *cwd;
    const char *exit_path;
    int netns_fd; /* >= 0: enter this network namespace before anything runs */
} launch_args;

/* Write all of s to fd (async-signal-safe). */
static void put(int fd, const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* Decimal text of v (async-signal-safe). */
static char *utoa(unsigned v, char *end) {
    *--end = 0;
    do *--end = (char)('0' + v % 10); while (v /= 10);
    return end;
}

/* The supervisor's exit-code file: written to a temporary name and renamed. */
static void write_exit_file(const char *path, const char *tmp, int code) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char buf[16];
    put(fd, utoa((unsigned)code, buf + sizeof buf - 1));
    put(fd, "\n");
    fsync(fd);
    close(fd);
    rename(tmp, path);
}

static void reset_signals(void) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
}

_Noreturn static void supervise(const launch_args *l, int log_fd, const char *exit_tmp, int go_r,
                                int go_w) {
    setpgid(0, 0);
    /* Nothing runs until the master has journaled this launch and says go; a master that
     * dies first leaves only the end of the pipe, and nothing is started (its successor
     * launches the replica, once). */
    close(go_w);
    char go = 0;
    ssize_t got;
    while ((got = read(go_r, &go, 1)) < 0 && errno == EINTR) {
    }
    if (got != 1) _exit(127);
    close(go_r);
    if (l->netns_fd >= 0 && setns(l->netns_fd, CLONE_NEWNET) != 0) {
        put(log_fd, "dtrain: cannot start the replica: cannot enter its network namespace\n");
        write_exit_file(l->exit_path, exit_tmp, 127);
        _exit(127);
    }
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    /* The master's sockets and files (its lock, its listening socket) stay with it. */
    if (close_range(3, ~0U, 0) != 0) {
        struct rlimit rl;
        int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (int)rl.rlim_cur
                                                                               : 65536;
        for (int fd = 3; fd < max; fd++) close(fd);
    }
    prctl(PR_SET_NAME, "dtrain-replica", 0, 0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

    pid_t child = fork();
    if (child < 0) {
        put(2, "dtrain: cannot start the replica: fork failed\n");
        write_exit_file(l->exit_path, exit_tmp, 127);
        _exit(127);
    }
    if (child == 0) {
        reset_signals();
        char num[16];
        if (l->cwd && chdir(l->cwd) != 0) {
            put(2, "dtrain: cannot change to the working directory ");
            put(2, l->cwd);
            put(2, ": errno ");
            put(2, utoa((unsigned)errno, num + sizeof num - 1));
            put(2, "\n");
            _exit(127);
        }
        execvpe(l->argv[0], l->argv, l->envp);
        int err = errno;
        put(2, "dtrain: cannot run '");
        put(2, l->argv[0]);
        put(2, err == ENOENT ? "': no such file or command on PATH\n"
               : err == EACCES ? "': permission denied\n"
                               : "': exec failed\n");
        _exit(err == ENOENT ? 127 : 126);
    }
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int status = 0;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) _exit(127);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    write_exit_file(l->exit_path, exit_tmp, code);
    /* Leftovers: SIGTERM, reap until none is left, then SIGKILL (ourselves too). */
    kill(0, SIGTERM);
    struct timespec tick = {0, 20 * 1000 * 1000};
    for (int waited = 0; waited < LEFTOVER_GRACE_MS; waited += 20) {
        pid_t p;
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
        }
        if (p < 0 && errno == ECHILD) _exit(code);
        nanosleep(&tick, NULL);
    }
    kill(0, SIGKILL);
    _exit(code);
}

/* ---- the backend: a table of the replicas it started or adopted ---- */

typedef struct proc {
    char name[32];
    pid_t pid;           /* the supervisor: its process-group leader */
    uint64_t proc_start; /* /proc/<pid>/stat starttime: the same process after a restart */
    int pidfd;           /* adopted from an earlier master (not our child); -1 otherwise */
    int running;
} proc;

typedef struct local {
    dt__backend base;
    char dir[DT__PATH_MAX]; /* the job dir: it leaves DT__JOB_DIR_ROOM (the master checks) */
    int epfd;  /* the event fd: the signalfd (SIGCHLD) and the adopted supervisors' pidfds */
    int sigfd;
    proc *procs;
    int nprocs, cap;
} local;

/* A launch prepared and not started yet. */
typedef struct ticket {
    char name[32];
    pid_t pid;
    int go_fd;
} ticket;

static proc *find(local *b, const char *name) {
    for (int i = 0; i < b->nprocs; i++)
        if (!strcmp(b->procs[i].name, name)) return &b->procs[i];
    return NULL;
}

static proc *add(local *b, const char *name) {
    proc *p = find(b, name);
    if (p) return p;
    if (b->nprocs == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        proc *n = realloc(b->procs, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        b->procs = n;
        b->cap = cap;
    }
    p = &b->procs[b->nprocs++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->pidfd = -1;
    return p;
}

static void drop_pidfd(local *b, proc *p) {
    if (p->pidfd < 0) return;
    epoll_ctl(b->epfd, EPOLL_CTL_DEL, p->pidfd, NULL);
    close(p->pidfd);
    p->pidfd = -1;
}

static dt_err path_of(const local *b, char *buf, size_t len, const char *fmt, const char *name)
    __attribute__((format(printf, 4, 0)));
static dt_err path_of(const local *b, char *buf, size_t len, const char *fmt, const char *name) {
    char rel[128];
    if (snprintf(rel, sizeof rel, fmt, name) >= (int)sizeof rel) {
        buf[0] = 0;
        return dt_err_set(DT_ERR_ARG, "%s: replica name too long", name);
    }
    return dt__path(buf, len, "%s/%s", b->dir, rel);
}

/* Is name=... one of the variables dtrain sets? Inherited copies are dropped so that a job
 * run from inside another job's replica does not leak its parent's identity. */
static int owned_var(const char *kv) {
    static const char *const names[] = {"TF_CONFIG", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                                        "RANK", NULL};
    if (!strncmp(kv, "DTRAIN_", 7)) return 1;
    for (int i = 0; names[i]; i++) {
        size_t n = strlen(names[i]);
        if (!strncmp(kv, names[i], n) && kv[n] == '=') return 1;
    }
    return 0;
}

static int env_has(const dt_env_var *env, int n, const char *kv) {
    const char *eq = strchr(kv, '=');
    size_t len = eq ? (size_t)(eq - kv) : strlen(kv);
    for (int i = 0; i < n; i++)
        if (strlen(env[i].name) == len && !strncmp(env[i].name, kv, len)) return 1;
    return 0;
}

/* The master's environment (less what dtrain sets) and then the replica's: a new array
 * whose entries from first_own on are owned. */
static char **make_envp(const dt__backend_launch *l, size_t *first_own) {
    size_t ninherit = 0;
    for (char **p = environ; *p; p++) ninherit++;
    char **envp = calloc(ninherit + (size_t)l->nenv + 1, sizeof *envp);
    if (!envp) return NULL;
    size_t k = 0;
    for (char **p = environ; *p; p++)
        if (!owned_var(*p) && !env_has(l->env, l->nenv, *p)) envp[k++] = *p; /* borrowed */
    *first_own = k;
    for (int i = 0; i < l->nenv; i++) {
        size_t len = strlen(l->env[i].name) + strlen(l->env[i].value) + 2;
        if (!(envp[k] = malloc(len))) {
            for (size_t j = *first_own; j < k; j++) free(envp[j]);
            free(envp);
            return NULL;
        }
        snprintf(envp[k], len, "%s=%s", l->env[i].name, l->env[i].value);
        k++;
    }
    return envp;
}

/* Fork the supervisor; it waits for the go byte on *go_fd. */
static dt_err start_supervisor(const char *name, const launch_args *a, const char *log_path,
                               pid_t *pid, int *go_fd) {
    char exit_tmp[DT__PATH_MAX];
    dt_err pe = dt__path(exit_tmp, sizeof exit_tmp, "%s.tmp", a->exit_path);
    if (pe) return dt_err_wrap(pe, "%s: its exit file", name);
    unlink(a->exit_path);
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0)
        return dt_err_set(DT_ERR_IO, "%s: cannot open its log %s: %s", name, log_path,
                          strerror(errno));
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) {
        int err = errno;
        close(log_fd);
        return dt_err_set(DT_ERR_IO, "%s: cannot make a pipe: %s", name, strerror(err));
    }
    pid_t p = fork();
    if (p < 0) {
        int err = errno;
        close(log_fd);
        close(go[0]);
        close(go[1]);
        return dt_err_set(DT_ERR_IO, "%s: cannot fork: %s", name, strerror(err));
    }
    if (p == 0) supervise(a, log_fd, exit_tmp, go[0], go[1]);
    setpgid(p, p); /* also done by the child; whichever runs first wins the race */
    close(log_fd);
    close(go[0]);
    *pid = p;
    *go_fd = go[1];
    return DT_OK;
}

/* /proc/<pid>/stat's start time (0 when the process does not exist). */
static uint64_t proc_start_of(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    /* Fields after the command name (which may hold spaces) start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    /* starttime is field 22; the text after ')' starts at field 3. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p) return 0;
    }
    return strtoull(p + 1, NULL, 10);
}

static dt_err local_launch(dt__backend *base, const dt__backend_launch *l, json_t **facts,
                           void **out) {
    local *b = (local *)base;
    if (!l->argv || !l->argv[0])
        return dt_err_set(DT_ERR_ARG, "%s: no command to run locally", l->name);
    char log_path[DT__PATH_MAX], exit_path[DT__PATH_MAX];
    dt_err pe;
    if ((pe = path_of(b, log_path, sizeof log_path, "logs/%s.log", l->name)) ||
        (pe = path_of(b, exit_path, sizeof exit_path, "run/%s.exit", l->name)))
        return pe;
    /* A line in the log between attempts, so restarts can be told apart. */
    FILE *lf = fopen(log_path, "a");
    if (lf) {
        char ts[64];
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        struct tm tm;
        gmtime_r(&now.tv_sec, &tm);
        snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 (int)(now.tv_nsec / 1000000));
        fprintf(lf, "--- dtrain: %s attempt %d started at %s\n", l->name, l->attempt, ts);
        fclose(lf);
    }
    size_t first_own = 0;
    char **envp = make_envp(l, &first_own);
    ticket *t = calloc(1, sizeof *t);
    if (!envp || !t) {
        free(t);
        if (envp)
            for (size_t i = first_own; envp[i]; i++) free(envp[i]);
        free(envp);
        return dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    launch_args a = {.argv = l->argv, .envp = envp, .cwd = l->cwd, .exit_path = exit_path,
                     .netns_fd = -1};
    dt_err e = DT_OK;
    if (l->netns) {
        char ns_path[DT__PATH_MAX];
        if ((e = dt__path(ns_path, sizeof ns_path, "/run/netns/%s", l->netns)))
            e = dt_err_wrap(e, "%s: network namespace", l->name);
        else if ((a.netns_fd = open(ns_path, O_RDONLY | O_CLOEXEC)) < 0)
            e = dt_err_set(DT_ERR_ARG, "%s: network namespace %s: %s (ip netns add %s makes it)",
                           l->name, l->netns, strerror(errno), l->netns);
    }
    if (!e) e = start_supervisor(l->name, &a, log_path, &t->pid, &t->go_fd);
    if (a.netns_fd >= 0) close(a.netns_fd);
    for (size_t i = first_own; envp[i]; i++) free(envp[i]);
    free(envp);
    if (e) {
        free(t);
        return e;
    }
    snprintf(t->name, sizeof t->name, "%s", l->name);
    char ps[24];
    snprintf(ps, sizeof ps, "%llu", (unsigned long long)proc_start_of(t->pid));
    *facts = json_pack("{s:i, s:s}", "pid", (int)t->pid, "procStart", ps);
    *out = t;
    return DT_OK;
}

static dt_err local_go(dt__backend *base, void *vt, int run) {
    local *b = (local *)base;
    ticket *t = vt;
    proc *p = run ? add(b, t->name) : NULL;
    if (run && p) {
        p->pid = t->pid;
        p->proc_start = proc_start_of(t->pid);
        p->running = 1;
        drop_pidfd(b, p);
        ssize_t w;
        while ((w = write(t->go_fd, "g", 1)) < 0 && errno == EINTR) {
        }
    }
    close(t->go_fd); /* without the byte: the supervisor exits, having started nothing */
    free(t);
    if (run && !p) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    return DT_OK;
}

static void local_signal(dt__backend *base, const char *name, int sig) {
    proc *p = find((local *)base, name);
    if (p && p->running && p->pid > 0) kill(-p->pid, sig); /* the whole process group */
}

/* The code a supervisor wrote to its exit file; -1 when there is none. */
static int read_exit(const local *b, const char *name) {
    char path[DT__PATH_MAX];
    if (path_of(b, path, sizeof path, "run/%s.exit", name)) return -1; /* launched: it fits */
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int code = -1;
    if (fscanf(f, "%d", &code) != 1 || code < 0 || code > 255) code = -1;
    fclose(f);
    return code;
}

/* p's supervisor has ended with status code `code` (its own): the command's code from its
 * file. No file: the supervisor itself was killed, and the replica's processes (its process
 * group) would live on unsupervised, holding their ports: they are killed. */
static int ended_code(local *b, proc *p, int code) {
    int file_code = read_exit(b, p->name);
    if (file_code < 0) kill(-p->pid, SIGKILL);
    p->running = 0;
    drop_pidfd(b, p);
    return file_code >= 0 ? file_code : code;
}

static int local_adopt(dt__backend *base, const char *name, const json_t *facts, int *code) {
    local *b = (local *)base;
    pid_t pid = (pid_t)json_integer_value(json_object_get(facts, "pid"));
    const char *ps = json_string_value(json_object_get(facts, "procStart"));
    uint64_t start = ps ? strtoull(ps, NULL, 10) : 0;
    int fd = -1;
    if (pid > 0 && start) {
        fd = (int)syscall(SYS_pidfd_open, pid, 0);
        /* The pid may have been reused since the journal named it: check it after opening
         * the pidfd, which pins the process that has it now. */
        if (fd >= 0 && proc_start_of(pid) != start) {
            close(fd);
            fd = -1;
        }
    }
    proc *p = add(b, name);
    if (!p) {
        if (fd >= 0) close(fd);
        *code = -1;
        return 0;
    }
    p->pid = pid;
    p->proc_start = start;
    p->running = 1;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (fd >= 0 && epoll_ctl(b->epfd, EPOLL_CTL_ADD, fd, &ev) == 0) {
        p->pidfd = fd;
        return 1;
    }
    if (fd >= 0) close(fd);
    /* Gone (or not watchable): ended while no master watched. */
    *code = ended_code(b, p, 128 + SIGKILL);
    return 0;
}

static int local_event_fd(dt__backend *base) { return ((local *)base)->epfd; }

static void local_events(dt__backend *base, dt__backend_ended_fn ended, void *ctx) {
    local *b = (local *)base;
    struct signalfd_siginfo si;
    while (read(b->sigfd, &si, sizeof si) == sizeof si) {
    }
    /* Our own children: the supervisors this master started. */
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) break;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        for (int i = 0; i < b->nprocs; i++) {
            proc *p = &b->procs[i];
            if (p->pid == pid && p->running && p->pidfd < 0) {
                code = ended_code(b, p, code);
                ended(ctx, p->name, code);
                break;
            }
        }
    }
    /* Adopted supervisors: their pidfds are readable once they have exited. */
    struct epoll_event evs[16];
    int n;
    while ((n = epoll_wait(b->epfd, evs, 16, 0)) > 0) {
        int any = 0;
        for (int k = 0; k < n; k++) {
            if (evs[k].data.fd == b->sigfd) continue;
            for (int i = 0; i < b->nprocs; i++) {
                proc *p = &b->procs[i];
                if (p->pidfd == evs[k].data.fd && p->running) {
                    int code = ended_code(b, p, 128 + SIGKILL);
                    ended(ctx, p->name, code);
                    any = 1;
                    break;
                }
            }
        }
        if (!any) break; /* only the signalfd (drained above) */
    }
}

static void local_last_line(dt__backend *base, const char *name, char *out, size_t size) {
    local *b = (local *)base;
    char path[DT__PATH_MAX], buf[2048];
    out[0] = 0;
    if (path_of(b, path, sizeof path, "logs/%s.log", name)) return; /* launched: it fits */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)sizeof buf - 1 ? end - (off_t)(sizeof buf - 1) : 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, from);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = 0;
    char *line = strrchr(buf, '\n');
    line = line ? line + 1 : buf;
    if (!strncmp(line, "--- dtrain: ", 12)) return; /* the attempt's header: it said nothing */
    size_t len = strlen(line);
    if (len >= size) len = size - 1;
    memcpy(out, line, len);
    out[len] = 0;
}

static void local_forget(dt__backend *base, const char *name) {
    local *b = (local *)base;
    proc *p = find(b, name);
    if (!p) return;
    drop_pidfd(b, p);
    *p = b->procs[--b->nprocs];
}

static void local_free(dt__backend *base) {
    local *b = (local *)base;
    for (int i = 0; i < b->nprocs; i++)
        if (b->procs[i].pidfd >= 0) close(b->procs[i].pidfd);
    free(b->procs);
    if (b->sigfd >= 0) close(b->sigfd);
    if (b->epfd >= 0) close(b->epfd);
    free(b);
}

static const dt__backend_ops local_ops = {
    .name = "local",
    .kubernetes_addresses = 0,
    .launch = local_launch,
    .go = local_go,
    .signal = local_signal,
    .adopt = local_adopt,
    .event_fd = local_event_fd,
    .events = local_events,
    .last_line = local_last_line,
    .forget = local_forget,
    .free = local_free,
};

dt_err dt__local_backend_new(dt__backend **out, const char *job_dir) {
    local *b = calloc(1, sizeof *b);
    if (!b) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    b->base.ops = &local_ops;
    b->epfd = b->sigfd = -1;
    dt_err pe = dt__path(b->dir, sizeof b->dir, "%s", job_dir);
    if (pe) {
        free(b);
        return pe;
    }
    /* Inherited SIG_IGN for SIGCHLD would make the kernel reap supervisors unseen. */
    signal(SIGCHLD, SIG_DFL);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    b->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    b->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = b->sigfd};
    if (b->sigfd < 0 || b->epfd < 0 || epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->sigfd, &ev) != 0) {
        int err = errno;
        local_free(&b->base);
        return dt_err_set(DT_ERR_IO, "the local backend's events: %s", strerror(err));
    }
    *out = &b->base;
    return DT_OK;
}
