/* server_parts_test.c - the job server's pure pieces: the UTF-8 repair of the messages it
 * puts in JSON (a result's message cut to its buffer, a log's stray byte: jansson refuses
 * invalid UTF-8, and a job summary that cannot be made drops the job from every answer),
 * and Kubernetes quantities. The server itself, with real masters: tests/server_test.sh. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "server/server-impl.h"
#include "testing/dt_test.h"

static int repaired(const char *in, const char *want) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", in);
    dt__utf8_repair(buf);
    json_t *j = json_string(buf);
    int ok = j != NULL && !strcmp(buf, want);
    if (!ok) fprintf(stderr, "repair of \"%s\": got \"%s\" (%s JSON), want \"%s\"\n", in, buf,
                     j ? "valid" : "invalid", want);
    json_decref(j);
    return ok;
}

static void test_utf8_repair(void) {
    DT_CHECK(repaired("plain text", "plain text"));
    DT_CHECK(repaired("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
    DT_CHECK(repaired("cut \xe2\x82", "cut ??"));          /* a character cut at the end */
    DT_CHECK(repaired("cut \xf0\x9f\x98", "cut ???"));
    DT_CHECK(repaired("stray \xff byte", "stray ? byte"));
    DT_CHECK(repaired("lone \x80 continuation", "lone ? continuation"));
    DT_CHECK(repaired("overlong \xc0\xaf", "overlong ??"));
    DT_CHECK(repaired("overlong \xe0\x80\xaf", "overlong ???"));
    DT_CHECK(repaired("surrogate \xed\xa0\x80", "surrogate ???"));
    DT_CHECK(repaired("too big \xf4\x90\x80\x80", "too big ????"));
    DT_CHECK(repaired("tab\tand\nnewline", "tab and newline"));
    /* a message cut in the middle of a character (as snprintf cuts one to its buffer):
     * valid JSON once repaired */
    char msg[9];
    memcpy(msg, "abcde\xc3\xa9\xc3", 8);
    msg[8] = 0;
    DT_CHECK(json_string(msg) == NULL);
    dt__utf8_repair(msg);
    json_t *j = json_string(msg);
    DT_CHECK(j != NULL && !strcmp(msg, "abcde\xc3\xa9?"));
    json_decref(j);
}

static void test_quantity(void) {
    DT_CHECK_NEAR(dt__quantity("500m"), 0.5, 1e-12);
    DT_CHECK_NEAR(dt__quantity("2"), 2, 0);
    DT_CHECK_NEAR(dt__quantity("1Gi"), 1073741824.0, 0);
    DT_CHECK_NEAR(dt__quantity("64Mi"), 67108864.0, 0);
    DT_CHECK_NEAR(dt__quantity("1e3"), 1000, 0);
    DT_CHECK(dt__quantity("") < 0);
    DT_CHECK(dt__quantity("-1") < 0);
    DT_CHECK(dt__quantity("2 cpus") < 0);
    DT_CHECK(dt__quantity("nan") < 0);
    DT_CHECK(dt__quantity("1Qi") < 0);
}

DT_TEST_MAIN(DT_T(test_utf8_repair), DT_T(test_quantity))
