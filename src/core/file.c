/*
 * file.c - mkdir -p, atomic whole-file writes, whole-file reads.
 *
 * Atomicity: the data goes to "<path>.tmp-XXXXXX" in the target's directory (so rename
 * stays within one file system), is fsync'ed, renamed over the target, and the directory is
 * fsync'ed so the rename itself survives a crash. Readers see the old file or the new one,
 * never a torn one.
 */
#include "core/file-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/path-impl.h"

dt_err dt__mkdirs(const char *path) {
    char buf[DT__PATH_MAX];
    if (!*path) return dt_err_set(DT_ERR_ARG, "an empty directory path");
    dt_err e = dt__path(buf, sizeof buf, "%s", path);
    if (e) return e;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return dt_err_set(DT_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return dt_err_set(DT_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return dt_err_set(DT_ERR_IO, "%s exists and is not a directory", buf);
    return DT_OK;
}

static void fsync_dir_of(const char *path) {
    char buf[DT__PATH_MAX];
    if (dt__path(buf, sizeof buf, "%s", path)) return; /* it was written, so it fits */
    int fd = open(dirname(buf), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse directory fsync */
        close(fd);
    }
}

dt_err dt__write_file_atomic(const char *path, const void *data, size_t len) {
    char tmp[DT__PATH_MAX];
    dt_err err = dt__path(tmp, sizeof tmp, "%s.tmp-XXXXXX", path);
    if (err) return err;
    int fd = mkstemp(tmp);
    if (fd < 0) return dt_err_set(DT_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    const unsigned char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) goto err_write;
        p += w;
        left -= (size_t)w;
    }
    if (fchmod(fd, 0644) != 0 || fsync(fd) != 0) goto err_write;
    if (close(fd) != 0) {
        fd = -1;
        goto err_write;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return dt_err_set(DT_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    fsync_dir_of(path);
    return DT_OK;
err_write : {
    int e = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    return dt_err_set(DT_ERR_IO, "cannot write %s: %s", path, strerror(e));
}
}

dt_err dt__check_regular(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return dt_err_set(DT_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return dt_err_set(DT_ERR_IO, "%s: %s, not a regular file", path,
                          S_ISDIR(sb.st_mode)    ? "a directory"
                          : S_ISCHR(sb.st_mode)  ? "a character device"
                          : S_ISBLK(sb.st_mode)  ? "a block device"
                          : S_ISFIFO(sb.st_mode) ? "a FIFO"
                          : S_ISSOCK(sb.st_mode) ? "a socket"
                                                 : "not a file");
    if (access(path, R_OK) != 0) return dt_err_set(DT_ERR_IO, "%s: %s", path, strerror(errno));
    return DT_OK;
}

dt_err dt__read_file(const char *path, char **data, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return dt_err_set(DT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(f);
                return dt_err_set(DT_ERR_NOMEM, "reading %s: out of memory", path);
            }
            buf = nb;
            cap = ncap;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return dt_err_set(DT_ERR_IO, "cannot read %s", path);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return DT_OK;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0; /* go on: what cannot be removed stays */
}

void dt__remove_tree(const char *path) {
    nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
