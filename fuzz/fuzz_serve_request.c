/*
 * fuzz_serve_request.c - libFuzzer harness: TF Serving request bodies (:predict and
 * :classify) through dt__sv_parse_predict / dt__sv_parse_classify, as the model server's
 * REST routes call them (the body NUL-terminated, as rest.c keeps it). The first byte picks
 * the method and the model's input shape.
 */
#include "fuzz-impl.h"
#include "serve/serve-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const dt_shape shapes[] = {
        {.ndim = 1, .dim = {4}}, {.ndim = 2, .dim = {2, 3}}, {.ndim = 3, .dim = {2, 2, 1}},
        {.ndim = 1, .dim = {1}}};
    const dt_shape *sample = &shapes[(data[0] >> 1) & 3];
    char *body = malloc(size);
    if (!body) return 0;
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0;
    dt__sv_input in = {0};
    char err[512];
    if (data[0] & 1) dt__sv_parse_classify(body, size - 1, "x", sample, &in, err, sizeof err);
    else dt__sv_parse_predict(body, size - 1, "x", sample, &in, err, sizeof err);
    free(in.x);
    free(body);
    dt_err_clear();
    return 0;
}
