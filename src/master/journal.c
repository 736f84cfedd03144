/*
 * journal.c - the master's journal: one JSON object per line, appended.
 *
 * Every decision the master takes (job started, replica launched with pid P, replica
 * exited with code C, condition changed, job finished) is appended before it is acted on
 * where possible, so that a master killed at any point can be restarted (`dtrain run
 * --resume DIR`) and rebuild the job's state by replaying the lines in order.
 *
 * Each event is one write(2) of one whole line on an O_APPEND descriptor: the page cache
 * keeps it when the master process dies. dt__journal_sync (fdatasync) is called at the
 * points that must survive a machine crash too (the job's start and end). A master killed
 * in the middle of a write leaves at most one torn last line, which replay skips.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file-impl.h"
#include "master/master-impl.h"

struct dt__journal {
    int fd;
    char path[4096];
};

dt_err dt__journal_open(dt__journal **out, const char *path) {
    dt__journal *j = calloc(1, sizeof *j);
    if (!j) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    snprintf(j->path, sizeof j->path, "%s", path);
    j->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (j->fd < 0) {
        int err = errno;
        free(j);
        return dt_err_set(DT_ERR_IO, "%s: cannot open the journal: %s", path, strerror(err));
    }
    /* A torn last line (a master killed mid-write) is cut off, so that the next event
     * starts a line of its own instead of completing the torn one into garbage. */
    off_t size = lseek(j->fd, 0, SEEK_END), keep = size;
    char c;
    while (keep > 0 && pread(j->fd, &c, 1, keep - 1) == 1 && c != '\n') keep--;
    if (keep != size && ftruncate(j->fd, keep) != 0) {
        int err = errno;
        close(j->fd);
        free(j);
        return dt_err_set(DT_ERR_IO, "%s: cannot cut its torn last line: %s", path,
                          strerror(err));
    }
    *out = j;
    return DT_OK;
}

void dt__journal_close(dt__journal *j) {
    if (!j) return;
    close(j->fd);
    free(j);
}

dt_err dt__journal_append(dt__journal *j, json_t *event) {
    char *line = json_dumps(event, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(event);
    if (!line) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    size_t n = strlen(line);
    line[n] = '\n'; /* json_dumps's NUL becomes the newline: one write per line */
    const char *p = line;
    size_t left = n + 1;
    while (left) {
        ssize_t w = write(j->fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = errno;
            free(line);
            return dt_err_set(DT_ERR_IO, "%s: cannot append to the journal: %s", j->path,
                              strerror(err));
        }
        p += w;
        left -= (size_t)w;
    }
    free(line);
    return DT_OK;
}

dt_err dt__journal_sync(dt__journal *j) {
    if (fdatasync(j->fd) != 0)
        return dt_err_set(DT_ERR_IO, "%s: cannot sync the journal: %s", j->path, strerror(errno));
    return DT_OK;
}

dt_err dt__journal_replay(const char *path, void (*fn)(void *ctx, json_t *event), void *ctx) {
    char *data;
    size_t len;
    dt_err e = dt__read_file(path, &data, &len);
    if (e) return e;
    int lineno = 0;
    char *p = data, *end = data + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        lineno++;
        if (!nl) break; /* a torn last line: the master died while writing it */
        *nl = 0;
        if (nl > p) {
            json_error_t jerr;
            json_t *ev = json_loads(p, 0, &jerr);
            if (!ev || !json_is_object(ev)) {
                json_decref(ev);
                free(data);
                return dt_err_set(DT_ERR_FORMAT, "%s:%d: malformed journal line: %s", path,
                                  lineno, ev ? "not an object" : jerr.text);
            }
            fn(ctx, ev);
            json_decref(ev);
        }
        p = nl + 1;
    }
    free(data);
    return DT_OK;
}
