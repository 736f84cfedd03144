/*
 * local_backend.c - run replicas as processes on this machine.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "master/master-impl.h"

#define LEFTOVER_GRACE_MS 2000

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

_Noreturn static void supervise(const dt__launch *l, int log_fd, const char *exit_tmp, int go_r,
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

dt_err dt__local_launch(const dt__launch *l, pid_t *pid, int *go_fd) {
    char exit_tmp[4200];
    int n = snprintf(exit_tmp, sizeof exit_tmp, "%s.tmp", l->exit_path);
    if (n < 0 || (size_t)n >= sizeof exit_tmp)
        return dt_err_set(DT_ERR_ARG, "%s: exit file path too long", l->name);
    unlink(l->exit_path);
    int log_fd = open(l->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0)
        return dt_err_set(DT_ERR_IO, "%s: cannot open its log %s: %s", l->name, l->log_path,
                          strerror(errno));
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) {
        int err = errno;
        close(log_fd);
        return dt_err_set(DT_ERR_IO, "%s: cannot make a pipe: %s", l->name, strerror(err));
    }
    pid_t p = fork();
    if (p < 0) {
        int err = errno;
        close(log_fd);
        close(go[0]);
        close(go[1]);
        return dt_err_set(DT_ERR_IO, "%s: cannot fork: %s", l->name, strerror(err));
    }
    if (p == 0) supervise(l, log_fd, exit_tmp, go[0], go[1]);
    setpgid(p, p); /* also done by the child; whichever runs first wins the race */
    close(log_fd);
    close(go[0]);
    *pid = p;
    *go_fd = go[1];
    return DT_OK;
}

void dt__local_go(int go_fd, int run) {
    if (run) {
        ssize_t w;
        while ((w = write(go_fd, "g", 1)) < 0 && errno == EINTR) {
        }
    }
    close(go_fd); /* without the byte: the supervisor exits, having started nothing */
}

void dt__local_signal(pid_t pid, int sig) {
    if (pid > 0) kill(-pid, sig);
}

uint64_t dt__local_proc_start(pid_t pid) {
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

int dt__local_adopt(pid_t pid, uint64_t proc_start) {
    if (pid <= 0 || !proc_start) return -1;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0) return -1;
    /* The pid may have been reused since the journal named it: check it after opening the
     * pidfd, which pins the process that has it now. */
    if (dt__local_proc_start(pid) != proc_start) {
        close(fd);
        return -1;
    }
    return fd;
}

int dt__local_read_exit(const char *exit_path) {
    FILE *f = fopen(exit_path, "r");
    if (!f) return -1;
    int code = -1;
    if (fscanf(f, "%d", &code) != 1 || code < 0 || code > 255) code = -1;
    fclose(f);
    return code;
}
