/* sock_test.c - the socket helpers' parsing: "host:port" split for every caller that takes
 * one (the PS client, the ring, TF_CONFIG, the rendezvous). */
#include <string.h>

#include "net/sock-impl.h"
#include "testing/dt_test.h"

static void test_hostport_split(void) {
    char host[16];
    int port = -1;
    DT_CHECK(dt__hostport_split("127.0.0.1:2222", host, sizeof host, &port) == DT__HOSTPORT_OK);
    DT_CHECK(!strcmp(host, "127.0.0.1") && port == 2222);
    DT_CHECK(dt__hostport_split("[::1]:1", host, sizeof host, &port) == DT__HOSTPORT_OK);
    DT_CHECK(!strcmp(host, "::1") && port == 1);
    DT_CHECK(dt__hostport_split("::1:65535", host, sizeof host, &port) == DT__HOSTPORT_OK);
    DT_CHECK(!strcmp(host, "::1") && port == 65535); /* the last colon splits */
    DT_CHECK(dt__hostport_split("ps-0.job:80", host, sizeof host, &port) == DT__HOSTPORT_OK);
    DT_CHECK(!strcmp(host, "ps-0.job") && port == 80);
    /* what is refused leaves host and port alone */
    strcpy(host, "unchanged");
    port = 7;
    const char *form[] = {"localhost", ":80", "host:", "[]:80", "", "a-host-name-too-long:80"};
    for (size_t i = 0; i < sizeof form / sizeof *form; i++)
        if (dt__hostport_split(form[i], host, sizeof host, &port) != DT__HOSTPORT_FORM)
            DT_FAIL("\"%s\" not refused as not host:port", form[i]);
    DT_CHECK(dt__hostport_split(NULL, host, sizeof host, &port) == DT__HOSTPORT_FORM);
    DT_CHECK(dt__hostport_split("h:8o", host, sizeof host, &port) == DT__HOSTPORT_PORT_NAN);
    DT_CHECK(dt__hostport_split("h:-1", host, sizeof host, &port) == DT__HOSTPORT_PORT_NAN);
    DT_CHECK(dt__hostport_split("h:0", host, sizeof host, &port) == DT__HOSTPORT_PORT_RANGE);
    DT_CHECK(dt__hostport_split("h:65536", host, sizeof host, &port) == DT__HOSTPORT_PORT_RANGE);
    DT_CHECK(dt__hostport_split("h:99999999999999999999", host, sizeof host, &port) ==
             DT__HOSTPORT_PORT_RANGE);
    DT_CHECK(!strcmp(host, "unchanged") && port == 7);
}

DT_TEST_MAIN(DT_T(test_hostport_split))
