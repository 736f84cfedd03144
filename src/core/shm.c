/*
 * shm.c - shared-memory segments between processes of one host (design in shm-impl.h).
 *
 * Why memfd + seals and not a named file in /dev/shm: a named file can be truncated by
 * whoever has it open, and a process touching a mapping past the new end gets SIGBUS - bad
 * input would crash the PS. A memfd sealed with F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL
 * can never change size, and the attacher checks those seals before mapping. There is also
 * no name to clean up after a crash: the segment lives as long as a mapping or fd does.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/le-impl.h"
#include "core/shm-impl.h"

static const char MAGIC[8] = {'D', 'T', 'S', 'H', 'M', 'S', 'E', 'G'};
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static void put_size(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_size(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

dt_err dt__shm_create(dt__shm *m, const char *name, size_t size) {
    memset(m, 0, sizeof *m);
    m->fd = -1;
    if (size < DT__SHM_HDR)
        return dt_err_set(DT_ERR_ARG, "shared memory %s: %zu bytes is less than its header", name,
                          size);
    if (getrandom(m->nonce, sizeof m->nonce, 0) != (ssize_t)sizeof m->nonce)
        return dt_err_set(DT_ERR_IO, "shared memory %s: getrandom: %s", name, strerror(errno));
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return dt_err_set(DT_ERR_IO, "shared memory %s: memfd_create: %s", name, strerror(errno));
    if (ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, SEALS) != 0) {
        dt_err e =
            dt_err_set(DT_ERR_IO, "shared memory %s (%zu bytes): %s", name, size, strerror(errno));
        close(fd);
        return e;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        dt_err e = dt_err_set(DT_ERR_IO, "shared memory %s: mmap of %zu bytes: %s", name, size,
                              strerror(errno));
        close(fd);
        return e;
    }
    m->base = p;
    m->size = size;
    m->fd = fd;
    memcpy(m->base, MAGIC, sizeof MAGIC);
    memcpy(m->base + 8, m->nonce, DT__SHM_NONCE);
    put_size(m->base + 8 + DT__SHM_NONCE, size);
    return DT_OK;
}

dt_err dt__shm_attach(dt__shm *m, int64_t pid, int64_t fd, size_t size,
                      const uint8_t nonce[DT__SHM_NONCE]) {
    memset(m, 0, sizeof *m);
    m->fd = -1;
    char path[64];
    if (pid <= 0 || fd < 0 || fd > INT32_MAX || size < DT__SHM_HDR)
        return dt_err_set(DT_ERR_NOTFOUND,
                          "shared memory: pid %" PRId64 ", fd %" PRId64
                          ", %zu bytes do not describe a segment",
                          pid, fd, size);
    snprintf(path, sizeof path, "/proc/%" PRId64 "/fd/%" PRId64, pid, fd);
    /* Read the link before opening anything: the pid and fd come from a peer, and opening a
     * FIFO, a device or a hung FUSE file of some other process must not even be tried. */
    char target[64];
    ssize_t tl = readlink(path, target, sizeof target - 1);
    if (tl < 0)
        return dt_err_set(DT_ERR_NOTFOUND, "shared memory: cannot open %s: %s (another host?)",
                          path, strerror(errno));
    target[tl] = '\0';
    if (strncmp(target, "/memfd:", 7) != 0)
        return dt_err_set(DT_ERR_NOTFOUND, "shared memory: %s is not a memory file", path);
    int f = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (f < 0)
        return dt_err_set(DT_ERR_NOTFOUND, "shared memory: cannot open %s: %s (another host?)",
                          path, strerror(errno));
    dt_err e = DT_OK;
    struct stat st;
    int seals = fcntl(f, F_GET_SEALS);
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        e = dt_err_set(DT_ERR_NOTFOUND, "shared memory: %s is not a memory file", path);
        goto fail;
    }
    if (seals < 0 || (seals & SEALS) != SEALS) {
        e = dt_err_set(DT_ERR_NOTFOUND, "shared memory: %s is not sealed against resizing", path);
        goto fail;
    }
    if ((uint64_t)st.st_size != (uint64_t)size) {
        e = dt_err_set(DT_ERR_NOTFOUND, "shared memory: %s has %lld bytes, %zu announced", path,
                       (long long)st.st_size, size);
        goto fail;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (p == MAP_FAILED) {
        e = dt_err_set(DT_ERR_NOTFOUND, "shared memory: mmap of %s: %s", path, strerror(errno));
        goto fail;
    }
    const uint8_t *h = p;
    if (memcmp(h, MAGIC, sizeof MAGIC) || memcmp(h + 8, nonce, DT__SHM_NONCE) ||
        get_size(h + 8 + DT__SHM_NONCE) != size) {
        munmap(p, size);
        e = dt_err_set(DT_ERR_NOTFOUND,
                       "shared memory: %s is not the segment announced (its "
                       "header differs)",
                       path);
        goto fail;
    }
    close(f);
    m->base = p;
    m->size = size;
    memcpy(m->nonce, nonce, DT__SHM_NONCE);
    return DT_OK;
fail:
    close(f);
    return e;
}

void dt__shm_free(dt__shm *m) {
    if (!m || !m->base) return; /* the fd is only ever valid with a mapping */
    munmap(m->base, m->size);
    if (m->fd >= 0) close(m->fd);
    m->base = NULL;
    m->size = 0;
    m->fd = -1;
}

/* ---- the offer ---- */

void dt__shm_offer_encode(const dt__shm *m, uint8_t out[DT__SHM_OFFER]) {
    dt__put64(out, (uint64_t)getpid());
    dt__put64(out + 8, (uint64_t)m->fd);
    dt__put64(out + 16, (uint64_t)m->size);
    memcpy(out + 24, m->nonce, DT__SHM_NONCE);
}

uint64_t dt__shm_offer_size(const uint8_t in[DT__SHM_OFFER]) {
    return dt__get64(in + 16);
}

dt_err dt__shm_attach_offer(dt__shm *m, const uint8_t in[DT__SHM_OFFER]) {
    uint64_t pid = dt__get64(in), fd = dt__get64(in + 8), size = dt__get64(in + 16);
    if (pid > INT64_MAX || fd > INT64_MAX || (uint64_t)(size_t)size != size) {
        memset(m, 0, sizeof *m);
        m->fd = -1;
        return dt_err_set(DT_ERR_NOTFOUND, "shared memory: pid or fd out of range");
    }
    return dt__shm_attach(m, (int64_t)pid, (int64_t)fd, (size_t)size, in + 24);
}
