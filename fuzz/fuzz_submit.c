/*
 * fuzz_submit.c - libFuzzer harness: the job server's submissions (POST /v1/jobs bodies:
 * a manifest, JSON with a manifest, or the quick form) through dt__submit_parse_body,
 * given a NUL-terminated copy as the HTTP server hands it over (net/http-impl.h).
 */
#include "fuzz-impl.h"
#include "server/server-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static dt__server s; /* the parser reads only the server's directory */
    if (!s.dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(s.dir, sizeof s.dir, "%s", tmp && *tmp ? tmp : "/tmp");
    }
    char *body = malloc(size + 1);
    if (!body) return 0;
    memcpy(body, data, size);
    body[size] = 0;
    dt__submission sub;
    char err[1024];
    dt__submit_parse_body(&s, body, size, NULL, &sub, err, sizeof err);
    dt__submission_free(&sub);
    free(body);
    dt_err_clear();
    return 0;
}
