/*
 * job_dir.c - may a new job start in this directory (`dtrain run JOB.yaml --job-dir DIR`)?
 *
 * A master writes its journal, logs, exit files, spec.yaml, status.json and result.json into
 * its job dir, so a dir that holds anything else must not become one: `--job-dir /` or a
 * project directory with its own spec.yaml would be written over. A new job starts in
 *   - a dir that does not exist yet, or an empty one (a volume's lost+found and empty
 *     subdirectories, such as a mount point made ready for checkpoints/, aside), or
 *   - a job dir: one that holds what only dtrain run or the job server makes (master.lock,
 *     master.log, launch.log, journal.jsonl), and, when it holds a spec.yaml, the spec of a
 *     job of the same name (an earlier start of this job that failed, or a job dir the server
 *     made for it). Whether such a dir holds a started job (its journal: resume it, not start
 *     it again) is decided by the master once it holds the dir's lock.
 * Anything else is refused, naming the dir and what is in it; so is a dir whose path leaves
 * no room for the paths a job makes in it (DT__JOB_DIR_ROOM). Nothing is created or changed
 * here.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/job.h"
#include "dtrain/master.h"

/* What only dtrain run (the master, its detaching parent) or the job server writes. */
static const char *const markers[] = {"master.lock", "master.log", "launch.log", "journal.jsonl",
                                      NULL};

static int is_marker(const char *name) {
    for (const char *const *m = markers; *m; m++)
        if (!strcmp(*m, name)) return 1;
    return 0;
}

/* An empty directory (not a link to one): a mount point made ready for the job, say its
 * checkpoints/ on another disk. Holding nothing, it cannot be written over. */
static int empty_subdir(const char *dir, const char *name) {
    char path[DT__PATH_MAX];
    struct stat sb;
    if (dt__path(path, sizeof path, "%s/%s", dir, name) || lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return 0;
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *de;
    int empty = 1;
    while (empty && (de = readdir(d)))
        empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
    closedir(d);
    return empty;
}

/* The spec in a job dir names the job `name`; else why not. */
static dt_err same_job(const char *dir, const char *name) {
    char path[DT__PATH_MAX];
    dt_err e = dt__path(path, sizeof path, "%s/spec.yaml", dir);
    if (e) return e;
    char *text = NULL;
    size_t len = 0;
    if (dt__read_file(path, &text, &len) != DT_OK) {
        dt_err_clear();
        return DT_OK; /* no spec copied yet: a start that failed before it */
    }
    dt_job_spec *job = NULL;
    e = dt_job_spec_parse(&job, text, len, path);
    free(text);
    if (e) {
        char why[300];
        snprintf(why, sizeof why, "%s", dt_errmsg());
        return dt_err_set(DT_ERR_STATE,
                          "%s is not a job dir of job %s: its spec.yaml is not a job spec (%s): "
                          "choose a new or empty --job-dir",
                          dir, name, why);
    }
    if (strcmp(job->name, name)) {
        e = dt_err_set(DT_ERR_STATE,
                       "%s is the job dir of another job (%s), not of %s: choose a new or empty "
                       "--job-dir",
                       dir, job->name, name);
    }
    dt_job_spec_free(job);
    return e;
}

dt_err dt_master_check_job_dir(const char *dir, const char *name) {
    dt_err e = dt__path_room(dir, DT__JOB_DIR_ROOM, "job dir");
    if (e) return e;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return DT_OK; /* made by the master */
        return dt_err_set(errno == ENOTDIR ? DT_ERR_STATE : DT_ERR_IO,
                          "%s cannot be a job dir: %s", dir, strerror(errno));
    }
    /* The first few names in sorted order, for the message; how many there are. */
    char first[3][64];
    int nfirst = 0, n = 0, marked = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *s = de->d_name;
        if (!strcmp(s, ".") || !strcmp(s, "..") || !strcmp(s, "lost+found") ||
            empty_subdir(dir, s))
            continue;
        n++;
        marked |= is_marker(s);
        char cut[64];
        snprintf(cut, sizeof cut, "%.63s", s);
        int at = nfirst;
        while (at > 0 && strcmp(cut, first[at - 1]) < 0) at--;
        if (at >= 3) continue;
        if (nfirst < 3) nfirst++;
        memmove(first[at + 1], first[at], (size_t)(nfirst - 1 - at) * sizeof first[0]);
        memcpy(first[at], cut, sizeof cut);
    }
    closedir(d);
    if (n == 0) return DT_OK;
    if (marked) return same_job(dir, name);
    char list[256];
    size_t o = 0;
    list[0] = '\0';
    for (int i = 0; i < nfirst; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", first[i]);
    if (n > nfirst) snprintf(list + o, sizeof list - o, " and %d more", n - nfirst);
    return dt_err_set(DT_ERR_STATE,
                      "%s is not empty and not a job dir (it holds %s): a job's journal, logs, "
                      "spec.yaml, status.json and result.json would be written among them; "
                      "choose a new or empty --job-dir",
                      dir, list);
}
