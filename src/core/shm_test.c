/* shm_test.c - shared-memory segments: a real second process attaches, writes, and the
 * creator sees it; the checks that send the caller back to its socket. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "core/shm-impl.h"
#include "testing/dt_test.h"

static void test_child_process_attaches_and_writes(void) {
    dt__shm m;
    DT_CHECK_OK(dt__shm_create(&m, "shm_test", DT__SHM_HDR + 4096));
    float *f = dt__shm_data(&m);
    DT_CHECK(f[0] == 0 && f[1023] == 0);
    f[0] = 1.5f;
    uint8_t offer[DT__SHM_OFFER]; /* what the creator sends its peer */
    dt__shm_offer_encode(&m, offer);
    DT_CHECK(dt__shm_offer_size(offer) == m.size);
    pid_t pid = fork();
    if (pid == 0) {
        /* the child drops the inherited mapping and fd's view: it attaches by the offer's pid
         * and fd as another process would */
        dt__shm a;
        if (dt__shm_attach_offer(&a, offer) != DT_OK) _exit(3);
        float *g = dt__shm_data(&a);
        if (g[0] != 1.5f) _exit(4);
        g[1023] = 42.0f;
        dt__shm_free(&a);
        _exit(0);
    }
    DT_CHECK(pid > 0);
    int status = 0;
    DT_CHECK(waitpid(pid, &status, 0) == pid);
    DT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    DT_CHECK(f[1023] == 42.0f);
    dt__shm_free(&m);
    dt__shm_free(&m); /* a freed segment is a no-op */
}

static void test_sealed_against_resizing(void) {
    dt__shm m;
    DT_CHECK_OK(dt__shm_create(&m, "shm_test", DT__SHM_HDR + 128));
    /* the peer's mapping can never lose pages under it */
    DT_CHECK(ftruncate(m.fd, 0) != 0);
    DT_CHECK(ftruncate(m.fd, (off_t)(m.size * 2)) != 0);
    dt__shm_free(&m);
}

static void test_attach_refusals_name_the_cause(void) {
    dt__shm m, a;
    DT_CHECK_OK(dt__shm_create(&m, "shm_test", DT__SHM_HDR + 256));
    uint8_t bad[DT__SHM_NONCE];
    memcpy(bad, m.nonce, sizeof bad);
    bad[3] ^= 1;
    DT_CHECK_ERR(dt__shm_attach(&a, getpid(), m.fd, m.size, bad), DT_ERR_NOTFOUND,
                 "not the segment announced");
    uint8_t offer[DT__SHM_OFFER];
    dt__shm_offer_encode(&m, offer);
    offer[7] = 0x80; /* a pid beyond int64 */
    DT_CHECK_ERR(dt__shm_attach_offer(&a, offer), DT_ERR_NOTFOUND, "pid or fd out of range");
    DT_CHECK_ERR(dt__shm_attach(&a, getpid(), m.fd, m.size + 64, m.nonce), DT_ERR_NOTFOUND,
                 "bytes, ");
    DT_CHECK_ERR(dt__shm_attach(&a, getpid(), 9999, m.size, m.nonce), DT_ERR_NOTFOUND,
                 "cannot open /proc/");
    DT_CHECK_ERR(dt__shm_attach(&a, 0, m.fd, m.size, m.nonce), DT_ERR_NOTFOUND,
                 "do not describe a segment");
    /* an ordinary file, a pipe: not memory files, never opened */
    const char *path = dt_test_write_file("plain", "x", 1);
    int fd = open(path, O_RDONLY);
    DT_CHECK(fd >= 0);
    DT_CHECK_ERR(dt__shm_attach(&a, getpid(), fd, 1 + DT__SHM_HDR, m.nonce), DT_ERR_NOTFOUND,
                 "is not a memory file");
    close(fd);
    int pp[2];
    DT_CHECK(pipe(pp) == 0);
    DT_CHECK_ERR(dt__shm_attach(&a, getpid(), pp[0], m.size, m.nonce), DT_ERR_NOTFOUND,
                 "is not a memory file");
    close(pp[0]);
    close(pp[1]);
    /* a memfd its maker did not seal (or sealed only partly) */
    int u = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    DT_CHECK(u >= 0 && ftruncate(u, (off_t)m.size) == 0);
    DT_CHECK_ERR(dt__shm_attach(&a, getpid(), u, m.size, m.nonce), DT_ERR_NOTFOUND,
                 "not sealed against resizing");
    DT_CHECK(fcntl(u, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
    DT_CHECK_ERR(dt__shm_attach(&a, getpid(), u, m.size, m.nonce), DT_ERR_NOTFOUND,
                 "not sealed against resizing");
    close(u);
    DT_CHECK(a.base == NULL);
    dt__shm_free(&a);
    dt__shm_free(&m);
}

DT_TEST_MAIN(DT_T(test_child_process_attaches_and_writes), DT_T(test_sealed_against_resizing),
             DT_T(test_attach_refusals_name_the_cause))
