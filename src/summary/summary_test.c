/* summary_test.c - TensorBoard event files: CRC32C and its mask against TensorFlow's golden
 * values (FORMATS.md 1.2), the bytes of an Event (1.6), and a file read back record by record
 * with every checksum checked. */
#include <stdint.h>
#include <sys/stat.h>

#include "core/path-impl.h"
#include "dtrain/summary.h"
#include "testing/dt_test.h"

static void test_crc32c(void) {
    DT_CHECK(dt_crc32c("123456789", 9) == 0xE3069283u);
    uint8_t len24[8] = {24, 0, 0, 0, 0, 0, 0, 0};
    DT_CHECK(dt_crc32c_mask(dt_crc32c(len24, 8)) == 0x224B7FA3u);
    uint8_t ev[] = {0x09, 0x00, 0x00, 0x80, 0x38, 0x99, 0xd6, 0xd7, 0x41, 0x1a, 0x0d,
                    'b',  'r',  'a',  'i',  'n',  '.',  'E',  'v',  'e',  'n',  't',  ':', '2'};
    DT_CHECK(dt_crc32c_mask(dt_crc32c(ev, sizeof ev)) == 0xAB364B12u);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Read the records of path into recs (payload offsets and lengths), checking both CRCs. */
static int read_records(const char *path, uint8_t **data, size_t *off, size_t *len, int max) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    *data = buf;
    size_t p = 0;
    int k = 0;
    while (p + 12 <= n && k < max) {
        uint64_t l = 0;
        for (int i = 0; i < 8; i++)
            l |= (uint64_t)buf[p + i] << (8 * i);
        if (dt_crc32c_mask(dt_crc32c(buf + p, 8)) != le32(buf + p + 8)) return -2;
        if (p + 12 + l + 4 > n) return -3;
        if (dt_crc32c_mask(dt_crc32c(buf + p + 12, l)) != le32(buf + p + 12 + l)) return -4;
        off[k] = p + 12;
        len[k] = l;
        k++;
        p += 12 + l + 4;
    }
    return p == n ? k : -5;
}

static int has(const uint8_t *p, size_t n, const void *want, size_t wn) {
    for (size_t i = 0; i + wn <= n; i++)
        if (!memcmp(p + i, want, wn)) return 1;
    return 0;
}

static void test_file(void) {
    char dir[] = "/tmp/dtrain-summary-XXXXXX";
    DT_CHECK(mkdtemp(dir));
    char run[128];
    snprintf(run, sizeof run, "%s/train", dir);
    dt_summary *w = NULL;
    DT_CHECK_OK(dt_summary_open(&w, run, 0));
    DT_CHECK(strstr(dt_summary_path(w), "/train/events.out.tfevents.") != NULL);
    DT_CHECK_OK(dt_summary_scalar(w, 10, "loss", 0.5f));
    const char *tags[] = {"loss", "learning_rate"};
    float vals[] = {0.25f, 0.001f};
    DT_CHECK_OK(dt_summary_scalars(w, 20, 2, tags, vals));
    DT_CHECK_ERR(dt_summary_scalar(w, 19, "loss", 1.0f), DT_ERR_ARG, "before step 20");
    char path[DT__PATH_MAX];
    DT_CHECK_OK(dt__path(path, sizeof path, "%s", dt_summary_path(w)));
    DT_CHECK_OK(dt_summary_close(w));

    uint8_t *d;
    size_t off[8], len[8];
    int k = read_records(path, &d, off, len, 8);
    DT_CHECK(k == 3);
    /* 1: wall_time (field 1, fixed64), file_version (field 3) */
    DT_CHECK(d[off[0]] == 0x09 && d[off[0] + 9] == 0x1a && d[off[0] + 10] == 13);
    DT_CHECK(!memcmp(d + off[0] + 11, "brain.Event:2", 13));
    /* 2: FORMATS.md 1.6's example bytes after the wall time: step 10, summary{value{tag
     * "loss", simple_value 0.5}} */
    const uint8_t golden[] = {0x10, 0x0a, 0x2a, 0x0d, 0x0a, 0x0b, 0x0a, 0x04, 'l', 'o',
                              's',  's',  0x15, 0x00, 0x00, 0x00, 0x3f};
    DT_CHECK(len[1] == 9 + sizeof golden && !memcmp(d + off[1] + 9, golden, sizeof golden));
    DT_CHECK(has(d + off[2], len[2], "learning_rate", 13));

    /* a resumed run: START at its step, and steps before it refused */
    DT_CHECK_OK(dt_summary_open(&w, run, 20));
    DT_CHECK_ERR(dt_summary_scalar(w, 5, "loss", 1.0f), DT_ERR_ARG, "before step 20");
    DT_CHECK_OK(dt_summary_scalar(w, 30, "loss", 0.1f));
    snprintf(path, sizeof path, "%s", dt_summary_path(w));
    DT_CHECK_OK(dt_summary_close(w));
    k = read_records(path, &d, off, len, 8);
    DT_CHECK(k == 3);
    /* record 2: step 20 (field 2), session_log (field 7) { status START (1) } */
    const uint8_t start[] = {0x10, 20, 0x3a, 0x02, 0x08, 0x01};
    DT_CHECK(len[1] == 9 + sizeof start && !memcmp(d + off[1] + 9, start, sizeof start));

    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    DT_CHECK(system(cmd) == 0);
}

DT_TEST_MAIN(DT_T(test_crc32c), DT_T(test_file))
