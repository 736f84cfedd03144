/*
 * client-impl.h - what other control-plane clients built on dt_shard_client use of it
 * (rendezvous_client.c): its request call and the job's name as it goes into paths.
 */
#ifndef DTRAIN_SHARD_CLIENT_IMPL_H
#define DTRAIN_SHARD_CLIENT_IMPL_H

#include <jansson.h>

#include "dtrain/shard.h"

/* One request of the caller (client.c's call): body (may be NULL; a reference is stolen)
 * is sent as JSON; transport failures are retried for the client's retry_ms; a 200 answer
 * is parsed into *answer (a JSON object the caller decrefs); any other answer is an error
 * carrying the master's message, prefixed with `what`: 400 DT_ERR_ARG, 404 DT_ERR_NOTFOUND,
 * 409 DT_ERR_STATE, others DT_ERR_IO. */
dt_err dt__shard_client_call(dt_shard_client *c, const char *what, const char *method,
                             const char *path, json_t *body, json_t **answer);

/* The job's name percent-encoded, for request paths. */
const char *dt__shard_client_job_q(const dt_shard_client *c);

#endif
