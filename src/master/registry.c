/*
 * registry.c - the registry of jobs: symbolic links in $DTRAIN_HOME/jobs/.
 *
 * A link is replaced atomically (symlink to a temporary name, then rename) so a reader
 * never sees a half-made entry. Pruning (dt__registry_list) drops links whose job dir is
 * gone and links of jobs whose status.json says they finished more than
 * ttlSecondsAfterFinished ago (the job dir itself is kept: only the listing forgets it, as
 * deleting a TFJob object leaves its volumes).
 *
 * One name, one running job: a master registers its job only when no other master runs a
 * job of that name (the registered dir's master.lock is not held), checked and linked
 * under $DTRAIN_HOME/jobs/.lock; once that master has ended, a new job of the name takes
 * the link over.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "master/registry-impl.h"

/* Room jobs_dir leaves for a name in it: "/.NAME.PID" (a name is at most 63 bytes). */
#define NAME_ROOM 80

/* $DTRAIN_HOME/jobs, short enough that every path of a name in it fits (NAME_ROOM). */
static dt_err jobs_dir(char *buf) {
    const char *home = getenv("DTRAIN_HOME");
    dt_err e;
    if (home && *home) {
        e = dt__path(buf, DT__PATH_MAX - NAME_ROOM, "%s/jobs", home);
    } else {
        const char *h = getenv("HOME");
        e = dt__path(buf, DT__PATH_MAX - NAME_ROOM, "%s/.dtrain/jobs", h && *h ? h : "/tmp");
    }
    return e ? dt_err_wrap(e, "the registry of jobs (DTRAIN_HOME)") : DT_OK;
}

static int valid_name(const char *name) {
    if (!*name || strlen(name) > 63) return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')) return 0;
    return 1;
}

int dt__master_live(const char *job_dir, char *pid, size_t cap) {
    char path[DT__PATH_MAX];
    if (pid && cap) pid[0] = 0;
    /* a dir too long for its lock's path never had a master (dt__path_room at its start) */
    if (dt__path(path, sizeof path, "%s/master.lock", job_dir)) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    int live = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (pid && cap) {
        ssize_t n = pread(fd, pid, cap - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
    }
    close(fd); /* lets go of the shared lock, if it was taken */
    return live;
}

dt_err dt__registry_add(const char *name, const char *job_dir) {
    char dir[DT__PATH_MAX], link[DT__PATH_MAX], tmp[DT__PATH_MAX], lock[DT__PATH_MAX];
    dt_err e = jobs_dir(dir);
    if (e) return e;
    if (!valid_name(name)) return dt_err_set(DT_ERR_ARG, "'%s' is not a job name", name);
    /* each fits: jobs_dir leaves NAME_ROOM */
    if ((e = dt__path(lock, sizeof lock, "%s/.lock", dir)) ||
        (e = dt__path(link, sizeof link, "%s/%s", dir, name)) ||
        (e = dt__path(tmp, sizeof tmp, "%s/.%s.%d", dir, name, (int)getpid())) ||
        (e = dt__mkdirs(dir)))
        return e;
    /* The check of the registered job's master and the new link, one at a time: of two
     * masters of one name that start together, the second sees the first's. */
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd < 0 || flock(lfd, LOCK_EX) != 0) {
        int err = errno;
        if (lfd >= 0) close(lfd);
        return dt_err_set(DT_ERR_IO, "%s: cannot lock: %s", lock, strerror(err));
    }
    char other[PATH_MAX], pid[32];
    ssize_t n = readlink(link, other, sizeof other - 1);
    if (n > 0) {
        other[n] = 0;
        if (strcmp(other, job_dir) && dt__master_live(other, pid, sizeof pid)) {
            close(lfd);
            return dt_err_set(DT_ERR_STATE,
                              "a job named %s is running in %s (master pid %s): two jobs of "
                              "one name cannot run at once; stop it ('dtrain stop %s') or "
                              "give this one another metadata.name",
                              name, other, pid[0] ? pid : "?", name);
        }
    }
    unlink(tmp);
    if (symlink(job_dir, tmp) != 0 || rename(tmp, link) != 0) {
        int err = errno;
        unlink(tmp);
        close(lfd);
        return dt_err_set(DT_ERR_IO, "%s: cannot register the job: %s", link, strerror(err));
    }
    close(lfd);
    return DT_OK;
}

dt_err dt__registry_lookup(const char *name, char *out, size_t cap) {
    char dir[DT__PATH_MAX], link[DT__PATH_MAX];
    dt_err e = jobs_dir(dir);
    if (e) return e;
    if (!valid_name(name)) return dt_err_set(DT_ERR_NOTFOUND, "no job named '%s'", name);
    if ((e = dt__path(link, sizeof link, "%s/%s", dir, name))) return e;
    ssize_t n = readlink(link, out, cap - 1);
    if (n < 0)
        return dt_err_set(DT_ERR_NOTFOUND, "no job named '%s' (see 'dtrain list')", name);
    out[n] = 0;
    return DT_OK;
}

void dt__registry_remove(const char *name) {
    char dir[DT__PATH_MAX], link[DT__PATH_MAX];
    if (jobs_dir(dir) || !valid_name(name) || dt__path(link, sizeof link, "%s/%s", dir, name))
        return;
    unlink(link);
}

/* Has the job in job_dir outlived its ttlSecondsAfterFinished? */
static int expired(const char *job_dir) {
    char path[DT__PATH_MAX];
    if (dt__path(path, sizeof path, "%s/status.json", job_dir)) return 0;
    json_t *st = json_load_file(path, 0, NULL);
    int old = 0;
    json_t *ttl = json_object_get(st, "ttlSecondsAfterFinished");
    const char *done = json_string_value(json_object_get(st, "completionTime"));
    if (json_is_integer(ttl) && done) {
        struct stat sb;
        /* status.json is last written when the job finishes: its mtime is the end. */
        if (stat(path, &sb) == 0 &&
            (double)time(NULL) - (double)sb.st_mtime > (double)json_integer_value(ttl))
            old = 1;
    }
    json_decref(st);
    return old;
}

static int cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

dt_err dt__registry_list(void (*fn)(void *ctx, const char *name, const char *job_dir), void *ctx) {
    char dir[DT__PATH_MAX];
    dt_err e = jobs_dir(dir);
    if (e) return e;
    DIR *d = opendir(dir);
    if (!d) return DT_OK; /* no job registered yet */
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !valid_name(de->d_name)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name))) break;
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp);
    for (size_t i = 0; i < n; i++) {
        char target[PATH_MAX];
        struct stat sb;
        if (dt__registry_lookup(names[i], target, sizeof target) == DT_OK) {
            if (stat(target, &sb) != 0 || !S_ISDIR(sb.st_mode) || expired(target))
                dt__registry_remove(names[i]);
            else
                fn(ctx, names[i], target);
        }
        free(names[i]);
    }
    free(names);
    return DT_OK;
}
