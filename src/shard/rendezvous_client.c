/*
 * rendezvous_client.c - the replica's side of the all-reduce rendezvous
 * (include/dtrain/rendezvous.h; the master's side is src/master/rendezvous.c, the protocol
 * docs/API.md "Rendezvous").
 *
 * Design: the calls ride on a dt_shard_client (the replica's control-plane client), through
 * its request call (client-impl.h): a transport failure is retried as for the shard
 * service, an HTTP refusal maps to a dt_err with the master's message (409, a job that
 * forms no more rings, is DT_ERR_STATE).
 *
 * dt_rdzv_join posts the same registration every POLL_MS until the answer is a formed ring
 * or the timeout passes; the master treats repeated posts as one wait (idempotent polling).
 * The unreachable peer goes with the first post only: the master starts its penalty then,
 * and later polls must not prolong it. Every answer is checked before it is trusted: a ring
 * whose arrays do not match its size, or that does not hold this replica at its rank, is
 * DT_ERR_FORMAT.
 */
#include "core/clock-impl.h"
#include "dtrain/rendezvous.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "shard/client-impl.h"

#define POLL_MS 20
#define MAX_ADDR 255         /* bytes of a "host:port" (the master's limit) */
#define MAX_RING (1 << 20)   /* members of a ring we accept from a master */

void dt_rdzv_ring_free(dt_rdzv_ring *r) {
    if (!r) return;
    for (int i = 0; i < r->size; i++) {
        if (r->peers) free(r->peers[i]);
        if (r->members) free(r->members[i]);
    }
    free(r->peers);
    free(r->members);
    *r = (dt_rdzv_ring){0};
}

/* size strings of the answer's array key into a new array *out. */
static dt_err get_strings(const char *what, const json_t *ans, const char *key, int size,
                          char ***out) {
    const json_t *a = json_object_get(ans, key);
    if (!json_is_array(a) || json_array_size(a) != (size_t)size)
        return dt_err_set(DT_ERR_FORMAT, "%s: the master's answer: %s: expected %d strings", what,
                          key, size);
    char **v = calloc((size_t)size, sizeof *v);
    if (!v) return dt_err_set(DT_ERR_NOMEM, "%s: out of memory for a ring of %d", what, size);
    *out = v; /* filled in place: the caller's ring frees what was made */
    for (int i = 0; i < size; i++) {
        const char *s = json_string_value(json_array_get(a, (size_t)i));
        if (!s || !s[0])
            return dt_err_set(DT_ERR_FORMAT, "%s: the master's answer: %s[%d]: expected a string",
                              what, key, i);
        if (!(v[i] = strdup(s)))
            return dt_err_set(DT_ERR_NOMEM, "%s: out of memory for a ring of %d", what, size);
    }
    return DT_OK;
}

/* Fill ring from a formed answer. */
static dt_err fill_ring(dt_shard_client *c, const char *what, const json_t *ans,
                        dt_rdzv_ring *ring) {
    const json_t *g = json_object_get(ans, "generation"), *rk = json_object_get(ans, "rank"),
                 *sz = json_object_get(ans, "size");
    if (!json_is_integer(g) || json_integer_value(g) < 1)
        return dt_err_set(DT_ERR_FORMAT, "%s: the master's answer: generation: expected an "
                                         "integer >= 1", what);
    if (!json_is_integer(sz) || json_integer_value(sz) < 1 || json_integer_value(sz) > MAX_RING)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: the master's answer: size: expected an integer in 1..%d", what,
                          MAX_RING);
    int size = (int)json_integer_value(sz);
    if (!json_is_integer(rk) || json_integer_value(rk) < 0 || json_integer_value(rk) >= size)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: the master's answer: rank: expected an integer in 0..%d", what,
                          size - 1);
    ring->generation = json_integer_value(g);
    ring->rank = (int)json_integer_value(rk);
    ring->size = size;
    dt_err e;
    if ((e = get_strings(what, ans, "peers", size, &ring->peers)) ||
        (e = get_strings(what, ans, "members", size, &ring->members)))
        return e;
    if (strcmp(ring->members[ring->rank], dt_shard_client_replica(c)))
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: the master's answer: members[%d] is %s, not this replica", what,
                          ring->rank, ring->members[ring->rank]);
    return DT_OK;
}

dt_err dt_rdzv_join(dt_shard_client *c, const dt_rdzv_join_req *req, int timeout_ms,
                    dt_rdzv_ring *ring) {
    *ring = (dt_rdzv_ring){0};
    char what[400], path[4096];
    snprintf(what, sizeof what, "rendezvous of %.255s", dt_shard_client_replica(c));
    if (!req || !req->address || !req->address[0] || strlen(req->address) > MAX_ADDR)
        return dt_err_set(DT_ERR_ARG,
                          "%s: address: required, this replica's data-plane \"host:port\" (at "
                          "most %d bytes)",
                          what, MAX_ADDR);
    if (req->generation < 0 || req->step < 0)
        return dt_err_set(DT_ERR_ARG, "%s: %s: expected an integer >= 0, got %lld", what,
                          req->generation < 0 ? "generation" : "step",
                          (long long)(req->generation < 0 ? req->generation : req->step));
    if (req->unreachable && !req->unreachable[0])
        return dt_err_set(DT_ERR_ARG, "%s: unreachable: expected a replica name or NULL", what);
    snprintf(path, sizeof path, "/v1/jobs/%s/rendezvous", dt__shard_client_job_q(c));
    double deadline = timeout_ms > 0 ? dt__mono_ms() + timeout_ms : 0;
    int first = 1;
    int64_t newest = 0;
    for (;;) {
        json_t *body = json_pack("{s:s, s:s, s:I, s:I}", "replica", dt_shard_client_replica(c),
                                 "address", req->address, "generation",
                                 (json_int_t)req->generation, "step", (json_int_t)req->step);
        if (body && first && req->unreachable &&
            json_object_set_new(body, "unreachable", json_string(req->unreachable))) {
            json_decref(body);
            body = NULL;
        }
        if (!body)
            return dt_err_set(DT_ERR_NOMEM, "%s: out of memory (or a name that is not UTF-8)",
                              what);
        first = 0;
        json_t *ans;
        dt_err e = dt__shard_client_call(c, what, "POST", path, body, &ans);
        if (e) return e;
        const json_t *formed = json_object_get(ans, "formed");
        if (!json_is_boolean(formed)) {
            json_decref(ans);
            return dt_err_set(DT_ERR_FORMAT, "%s: the master's answer: formed: expected true or "
                                             "false", what);
        }
        if (json_is_true(formed)) {
            e = fill_ring(c, what, ans, ring);
            json_decref(ans);
            if (e) dt_rdzv_ring_free(ring);
            return e;
        }
        newest = json_integer_value(json_object_get(ans, "generation"));
        json_decref(ans);
        double now = dt__mono_ms();
        if (req->cancel && req->cancel())
            return dt_err_set(DT_ERR_STATE, "%s: no longer waiting: asked to stop", what);
        if (deadline > 0 && now >= deadline)
            return dt_err_set(DT_ERR_STATE,
                              "%s: no ring was formed within %d ms (the master's newest "
                              "generation is %lld: a ring forms when every trainer has joined, "
                              "or spec.allreduce.rendezvousTimeoutSeconds after the first)",
                              what, timeout_ms, (long long)newest);
        dt__sleep_ms(deadline > 0 && deadline - now < POLL_MS ? deadline - now : POLL_MS);
    }
}

dt_err dt_rdzv_status(dt_shard_client *c, int64_t generation, int64_t *newest, int *leave) {
    char what[400], path[4096];
    snprintf(what, sizeof what, "rendezvous status of %.255s", dt_shard_client_replica(c));
    if (generation < 0)
        return dt_err_set(DT_ERR_ARG, "%s: generation: expected an integer >= 0, got %lld", what,
                          (long long)generation);
    snprintf(path, sizeof path, "/v1/jobs/%s/rendezvous?generation=%lld",
             dt__shard_client_job_q(c), (long long)generation);
    json_t *ans;
    dt_err e = dt__shard_client_call(c, what, "GET", path, NULL, &ans);
    if (e) return e;
    const json_t *g = json_object_get(ans, "generation"), *l = json_object_get(ans, "leave");
    if (!json_is_integer(g) || json_integer_value(g) < 0 || !json_is_boolean(l)) {
        json_decref(ans);
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: the master's answer: expected {generation: integer >= 0, leave: "
                          "true or false}",
                          what);
    }
    if (newest) *newest = json_integer_value(g);
    if (leave) *leave = json_is_true(l);
    json_decref(ans);
    return DT_OK;
}
