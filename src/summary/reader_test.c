/* reader_test.c - reading TensorBoard event files back: what dtrain's writer writes (with a
 * resumed writer's START), a file cut short mid-record (read up to it, no error), a corrupt
 * record (an error naming file and offset), and a file TensorFlow 2's way written by python3's
 * protobuf library (tests/tools/tfevents_write.py; skipped, said so, without python3-protobuf). */
#include <stdint.h>
#include <sys/stat.h>

#include "core/file-impl.h"
#include "core/path-impl.h"
#include "dtrain/summary.h"
#include "testing/dt_test.h"

static char dir[64];

static void rm_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

static long file_size(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

static int count_cb(void *ctx, const dt_summary_event *ev) {
    (void)ev;
    ++*(int *)ctx;
    return 0;
}

static void test_writer_roundtrip(void) {
    snprintf(dir, sizeof dir, "/tmp/dtrain-reader-XXXXXX");
    DT_CHECK(mkdtemp(dir));
    char run[128];
    snprintf(run, sizeof run, "%s/eval", dir);
    dt_summary *w = NULL;
    DT_CHECK_OK(dt_summary_open(&w, run, 0));
    const char *tags[] = {"accuracy", "loss"};
    for (int s = 1; s <= 5; s++) {
        float v[] = {0.1f * (float)s, 1.0f / (float)s};
        DT_CHECK_OK(dt_summary_scalars(w, 100 * s, 2, tags, v));
    }
    char first[DT__PATH_MAX];
    DT_CHECK_OK(dt__path(first, sizeof first, "%s", dt_summary_path(w)));
    DT_CHECK_OK(dt_summary_close(w));

    /* a second file of the run (a resumed writer) with a later name: START at 300 drops
     * 300..500 of the first file */
    sleep(1); /* the file name's seconds: name order is write order */
    DT_CHECK_OK(dt_summary_open(&w, run, 300));
    float v[] = {0.9f, 0.05f};
    DT_CHECK_OK(dt_summary_scalars(w, 400, 2, tags, v));
    DT_CHECK_OK(dt_summary_close(w));

    dt_summary_run *r = NULL;
    DT_CHECK_OK(dt_summary_read_run(run, &r));
    DT_CHECK(r->files == 2 && r->nseries == 2);
    const dt_summary_series *acc = dt_summary_run_tag(r, "accuracy");
    DT_CHECK(acc && acc->n == 3);
    DT_CHECK(acc->pts[0].step == 100 && acc->pts[1].step == 200 && acc->pts[2].step == 400);
    DT_CHECK(acc->pts[1].value == (double)0.2f && acc->pts[2].value == (double)0.9f);
    DT_CHECK(acc->pts[0].wall_time > 1.6e9);
    DT_CHECK(dt_summary_run_tag(r, "nothing") == NULL);
    dt_summary_run_free(r);

    /* polling from an offset: nothing new after the end */
    int n = 0;
    size_t end = 0;
    DT_CHECK_OK(dt_summary_read_file(first, 0, count_cb, &n, &end));
    DT_CHECK(n == 5 && (long)end == file_size(first));
    n = 0;
    DT_CHECK_OK(dt_summary_read_file(first, end, count_cb, &n, &end));
    DT_CHECK(n == 0);

    /* an empty run dir, a missing one */
    char empty[128];
    snprintf(empty, sizeof empty, "%s/none", dir);
    DT_CHECK(mkdir(empty, 0755) == 0);
    DT_CHECK_OK(dt_summary_read_run(empty, &r));
    DT_CHECK(r->files == 0 && r->nseries == 0);
    dt_summary_run_free(r);
    snprintf(empty, sizeof empty, "%s/missing", dir);
    DT_CHECK_ERR(dt_summary_read_run(empty, &r), DT_ERR_NOTFOUND, "missing");
    rm_dir();
}

static void test_torn_and_corrupt(void) {
    snprintf(dir, sizeof dir, "/tmp/dtrain-reader-XXXXXX");
    DT_CHECK(mkdtemp(dir));
    dt_summary *w = NULL;
    DT_CHECK_OK(dt_summary_open(&w, dir, 0));
    for (int s = 1; s <= 3; s++)
        DT_CHECK_OK(dt_summary_scalar(w, s, "loss", (float)s));
    char path[DT__PATH_MAX];
    DT_CHECK_OK(dt__path(path, sizeof path, "%s", dt_summary_path(w)));
    DT_CHECK_OK(dt_summary_close(w));
    long size = file_size(path);
    char *data;
    size_t len;
    DT_CHECK_OK(dt__read_file(path, &data, &len));

    /* every cut inside the last record reads the first two points, without an error */
    int n = 0;
    size_t end;
    DT_CHECK_OK(dt_summary_read_file(path, 0, count_cb, &n, &end));
    DT_CHECK(n == 3);
    size_t last = end, rec = 0;
    DT_CHECK((long)last == size);
    /* a loss record is 42 bytes (12 + 26 + 4): cuts of 1..41 bytes all fall inside it */
    for (size_t cut = 1; cut < 42; cut++) {
        FILE *f = fopen(path, "wb");
        DT_CHECK(f && fwrite(data, 1, (size_t)size - cut, f) == (size_t)size - cut);
        fclose(f);
        n = 0;
        DT_CHECK_OK(dt_summary_read_file(path, 0, count_cb, &n, &end));
        if (!rec) rec = end;
        DT_CHECK(end == rec && end == last - 42 && n == 2);
    }

    /* a flipped byte in the second record's payload: an error at its offset */
    size_t second = 0;
    {
        /* the first record (file_version) ends where the length field says */
        uint64_t l = 0;
        for (int i = 0; i < 8; i++)
            l |= (uint64_t)(uint8_t)data[i] << (8 * i);
        second = 12 + (size_t)l + 4;
    }
    data[second + 14] ^= 0x40;
    DT_CHECK_OK(dt__write_file_atomic(path, data, len));
    char want[64];
    snprintf(want, sizeof want, "offset %zu: the record's checksum is wrong", second);
    DT_CHECK_ERR(dt_summary_read_file(path, 0, count_cb, &n, &end), DT_ERR_FORMAT, want);
    DT_CHECK(strstr(dt_errmsg(), path) != NULL);
    dt_summary_run *r = NULL;
    DT_CHECK_ERR(dt_summary_read_run(dir, &r), DT_ERR_FORMAT, want);
    /* a flipped length byte: the length's checksum */
    data[second + 14] ^= 0x40;
    data[second] ^= 0x01;
    DT_CHECK_OK(dt__write_file_atomic(path, data, len));
    snprintf(want, sizeof want, "offset %zu: the record length's checksum", second);
    DT_CHECK_ERR(dt_summary_read_file(path, 0, count_cb, &n, &end), DT_ERR_FORMAT, want);
    /* a payload whose checksums hold but is no protobuf */
    data[second] ^= 0x01;
    size_t plen = 0;
    for (int i = 0; i < 8; i++)
        plen |= (size_t)(uint8_t)data[second + i] << (8 * i);
    memset(data + second + 12, 0xFF, plen);
    uint32_t c = dt_crc32c_mask(dt_crc32c(data + second + 12, plen));
    for (int i = 0; i < 4; i++)
        data[second + 12 + plen + i] = (char)(c >> (8 * i));
    DT_CHECK_OK(dt__write_file_atomic(path, data, len));
    snprintf(want, sizeof want, "offset %zu: not a tensorflow.Event", second);
    DT_CHECK_ERR(dt_summary_read_file(path, 0, count_cb, &n, &end), DT_ERR_FORMAT, want);
    free(data);
    rm_dir();
}

static void test_python_tf2(void) {
    if (system("/usr/bin/python3 -c 'import google.protobuf' 2>/dev/null") != 0) {
        printf("  (skipped: python3-protobuf is not installed)\n");
        return;
    }
    snprintf(dir, sizeof dir, "/tmp/dtrain-reader-XXXXXX");
    DT_CHECK(mkdtemp(dir));
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/tools/tfevents_write.py "
             "%s/events.out.tfevents.1700000000.host.1.0",
             DT_SOURCE_DIR, dir);
    DT_CHECK(system(cmd) == 0);
    dt_summary_run *r = NULL;
    DT_CHECK_OK(dt_summary_read_run(dir, &r));
    const dt_summary_series *loss = dt_summary_run_tag(r, "loss");
    const dt_summary_series *acc = dt_summary_run_tag(r, "eval/accuracy");
    const dt_summary_series *lr = dt_summary_run_tag(r, "lr");
    DT_CHECK(loss && loss->n == 2 && loss->pts[0].step == 1 && loss->pts[0].value == 0.5);
    DT_CHECK(loss->pts[1].step == 4 && loss->pts[1].value == 0.25);
    DT_CHECK(acc && acc->n == 1 && acc->pts[0].step == 4 && acc->pts[0].value == 0.875);
    DT_CHECK(acc->pts[0].wall_time == 1.7e9 + 5);
    DT_CHECK(lr && lr->n == 0); /* seen at step 3, purged by the START at 2 */
    DT_CHECK(dt_summary_run_tag(r, "note") == NULL);
    dt_summary_run_free(r);
    rm_dir();
}

DT_TEST_MAIN(DT_T(test_writer_roundtrip), DT_T(test_torn_and_corrupt), DT_T(test_python_tf2))
