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
 *
 * A write that fails (ENOSPC, EIO) or is short leaves nothing behind: the file is cut back
 * to where the line began, so that no torn line ever sits in the middle of the journal.
 * The line is kept in memory instead (the backlog, in order, up to BACKLOG_MAX bytes) and
 * written before any later one, as soon as a write succeeds again. While anything is in
 * the backlog the journal is not ok (dt__journal_ok): the master then acknowledges nothing
 * that changes its state (the API answers 503 and clients retry), so nothing it has said
 * yes to can be missing from the journal if it dies. Past BACKLOG_MAX, lines are lost and
 * the journal stays not ok for good (dt__journal_lost).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "master/master-impl.h"

#define BACKLOG_MAX (64u << 20)


struct dt__journal {
    int fd;
    char path[DT__PATH_MAX];
    char *backlog; /* whole lines not yet written, in order */
    size_t nbacklog, cap;
    int lost;              /* a line was dropped: the backlog overflowed */
    int held;              /* dt__journal_hold: lines wait in the backlog until release */
    char why[256];         /* the last write's failure */
};

static int flush_backlog(dt__journal *j);

dt_err dt__journal_open(dt__journal **out, const char *path) {
    dt__journal *j = calloc(1, sizeof *j);
    if (!j) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    dt_err e = dt__path(j->path, sizeof j->path, "%s", path);
    if (e) {
        free(j);
        return e;
    }
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
    flush_backlog(j);
    close(j->fd);
    free(j->backlog);
    free(j);
}

/* Write len bytes as one append, or nothing: a failed or short write is cut back. */
static int write_all_or_nothing(dt__journal *j, const char *p, size_t len) {
    off_t start = lseek(j->fd, 0, SEEK_END);
    size_t left = len;
    while (left) {
        ssize_t w = write(j->fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(j->why, sizeof j->why, "%s", w < 0 ? strerror(errno) : "short write");
            if (start >= 0 && ftruncate(j->fd, start) != 0) {
                /* cannot even cut it: the torn tail is what replay skips, if it is last */
            }
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    return 0;
}

static int flush_backlog(dt__journal *j) {
    if (!j->nbacklog) return 0;
    if (write_all_or_nothing(j, j->backlog, j->nbacklog)) return -1;
    j->nbacklog = 0;
    return 0;
}

static void keep(dt__journal *j, const char *line, size_t n) {
    if (j->lost) return; /* nothing after a lost line: the journal must have no hole */
    if (j->nbacklog + n > BACKLOG_MAX) {
        j->lost = 1;
        return;
    }
    if (j->nbacklog + n > j->cap) {
        size_t cap = j->cap ? j->cap : 65536;
        while (cap < j->nbacklog + n) cap *= 2;
        char *b = realloc(j->backlog, cap);
        if (!b) {
            j->lost = 1;
            return;
        }
        j->backlog = b;
        j->cap = cap;
    }
    memcpy(j->backlog + j->nbacklog, line, n);
    j->nbacklog += n;
}

dt_err dt__journal_append(dt__journal *j, json_t *event) {
    char *line = json_dumps(event, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(event);
    if (!line) {
        j->lost = 1;
        return dt_err_set(DT_ERR_NOMEM, "%s: an event was lost: out of memory", j->path);
    }
    size_t n = strlen(line);
    line[n] = '\n'; /* json_dumps's NUL becomes the newline: one write per line */
    if (j->held && !j->lost) {
        keep(j, line, n + 1);
        free(line);
        if (!j->lost) return DT_OK;
        return dt_err_set(DT_ERR_NOMEM, "%s: an event was lost: out of memory", j->path);
    }
    if (!j->lost && flush_backlog(j) == 0 && write_all_or_nothing(j, line, n + 1) == 0) {
        free(line);
        return DT_OK;
    }
    keep(j, line, n + 1);
    free(line);
    return dt_err_set(DT_ERR_IO, "%s: cannot append to the journal: %s (%zu bytes waiting%s)",
                      j->path, j->why, j->nbacklog, j->lost ? "; events were lost" : "");
}

void dt__journal_hold(dt__journal *j) {
    if (j) j->held = 1;
}

void dt__journal_release(dt__journal *j) {
    if (!j) return;
    j->held = 0;
    flush_backlog(j); /* a failure stays in the backlog: dt__journal_ok says so */
}

int dt__journal_ok(dt__journal *j) {
    if (!j) return 1;
    return flush_backlog(j) == 0 && !j->lost;
}

int dt__journal_lost(const dt__journal *j) { return j && j->lost; }

const char *dt__journal_why(const dt__journal *j) { return j && j->why[0] ? j->why : "unknown"; }

dt_err dt__journal_sync(dt__journal *j) {
    if (fdatasync(j->fd) != 0)
        return dt_err_set(DT_ERR_IO, "%s: cannot sync the journal: %s", j->path, strerror(errno));
    return DT_OK;
}

dt_err dt__journal_replay(const char *path, dt_err (*fn)(void *ctx, json_t *event), void *ctx) {
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
            e = fn(ctx, ev);
            json_decref(ev);
            if (e) {
                free(data);
                return dt_err_wrap(e, "%s:%d", path, lineno);
            }
        }
        p = nl + 1;
    }
    free(data);
    return DT_OK;
}
