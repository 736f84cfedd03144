/*
 * kube-impl.h - a Kubernetes API client: connection (kubeconfig or in-cluster), requests,
 * and watches, over libcurl.
 *
 * Connecting follows kubectl: --kubeconfig, else $KUBECONFIG (the first file of the list
 * that exists), else ~/.kube/config, else the in-cluster service account
 * (/var/run/secrets/kubernetes.io/serviceaccount and KUBERNETES_SERVICE_HOST/PORT). From a
 * kubeconfig: the context (current-context unless given), its cluster's server and CA
 * (certificate-authority file or -data, or insecure-skip-tls-verify), its user's bearer
 * token (token or tokenFile) or client certificate and key (file or -data), and its
 * namespace. Tokens are read again from their file for each request (service-account
 * tokens rotate) and never appear in a message or a log.
 *
 * A dt__kube is used by one thread at a time (one libcurl handle); a watch has its own.
 */
#ifndef DTRAIN_KUBE_IMPL_H
#define DTRAIN_KUBE_IMPL_H

#include <stddef.h>

#include <jansson.h>

#include "dtrain/err.h"

typedef struct dt__kube dt__kube;

typedef struct dt__kube_conn {
    const char *kubeconfig; /* NULL: $KUBECONFIG, ~/.kube/config, then in-cluster */
    const char *context;    /* NULL: the kubeconfig's current-context */
    int in_cluster;         /* 1: the pod's service account, whatever kubeconfig exists */
} dt__kube_conn;

dt_err dt__kube_connect(dt__kube **out, const dt__kube_conn *c);
/* A second connection with the same credentials (for another thread). */
dt_err dt__kube_clone(dt__kube **out, const dt__kube *k);
void dt__kube_free(dt__kube *k);
const char *dt__kube_namespace(const dt__kube *k); /* the context's, the pod's, "default" */
const char *dt__kube_server(const dt__kube *k);
const char *dt__kube_source(const dt__kube *k); /* "kubeconfig F, context C" / "in-cluster" */

/* One request to path ("/api/v1/namespaces/ns/pods"). body (may be NULL) is sent as JSON
 * with content type ctype (NULL: application/json). *status: the HTTP status; *resp: the
 * JSON answer (NULL when the answer is not JSON); a transport failure is DT_ERR_IO. */
dt_err dt__kube_call(dt__kube *k, const char *method, const char *path, const json_t *body,
                     const char *ctype, long *status, json_t **resp);
/* A GET whose answer is text (a pod's log): *text malloc'd, NUL-terminated. */
dt_err dt__kube_get_text(dt__kube *k, const char *path, long *status, char **text);
/* The message of an error answer (a Status object's message), else "HTTP N". */
const char *dt__kube_why(const json_t *resp, long status, char *buf, size_t len);
/* base64 (standard alphabet, padding optional; a Secret's data, a kubeconfig's -data)
 * decoded into a new NUL-terminated string (free()); NULL when it is not base64. */
char *dt__kube_b64_decode(const char *in);
/* s with every character outside [A-Za-z0-9-_.~] %-encoded, into buf. */
const char *dt__kube_escape(const char *s, char *buf, size_t len);

/* ---- watches: list, then watch from the list's resourceVersion, on a thread ---- */

typedef struct dt__kube_watch dt__kube_watch;

/* Watch the collection at path (e.g. "/api/v1/namespaces/NS/pods") for objects matching
 * label_selector (may be NULL). The thread lists, hands every object out as "ADDED" between
 * "RELIST" and "SYNCED" (objects the consumer knew and the list lacks are gone), then watches
 * from the list's resourceVersion; a dropped stream is resumed from the last version seen;
 * 410 Gone (or an expired version) lists again. Events wait in a queue. */
dt_err dt__kube_watch_start(dt__kube_watch **out, const dt__kube *k, const char *path,
                            const char *label_selector);
/* Readable while events wait. */
int dt__kube_watch_fd(const dt__kube_watch *w);
/* Make the fd readable now (the owner has something of its own to say). */
void dt__kube_watch_wake(dt__kube_watch *w);
/* The next event: its object (a new reference; NULL for RELIST and SYNCED), its type into
 * type: "RELIST" (a list follows: its objects as "ADDED", then "SYNCED"; the three are
 * queued together, so a reader sees a whole list), "ADDED", "MODIFIED", "DELETED",
 * "SYNCED"; 0 when the queue is empty. */
int dt__kube_watch_next(dt__kube_watch *w, char *type, size_t len, json_t **object);
/* Lists, watches, resumed streams and relists so far (for tests and the benchmark). */
void dt__kube_watch_counts(const dt__kube_watch *w, int *lists, int *watches);
void dt__kube_watch_stop(dt__kube_watch *w); /* NULL: no-op */
/* A watch that runs no thread and connects nowhere, for the parsers of the API server's
 * answers alone (fuzz/fuzz_kube_responses.c): dt__kube_watch_feed_list queues what the
 * thread queues from a list answer (RELIST, each item ADDED, SYNCED; 0: out of memory),
 * dt__kube_watch_feed what it queues from the bytes of a watch stream (one event a line;
 * returns len, or less when the stream would be cut: a line over 64 MiB). After an ERROR
 * event saying the version expired (410), dt__kube_watch_gone is 1 until the next list. */
dt_err dt__kube_watch_offline(dt__kube_watch **out);
int dt__kube_watch_feed_list(dt__kube_watch *w, const json_t *list);
size_t dt__kube_watch_feed(dt__kube_watch *w, const char *data, size_t len);
int dt__kube_watch_gone(const dt__kube_watch *w);
const char *dt__kube_watch_version(const dt__kube_watch *w); /* the last resourceVersion */

/* ---- a job in a cluster, from outside it (kube_submit.c) ---- */

typedef struct dt_job_spec dt_job_spec;
typedef struct dt__kube_submit_opts {
    const char *spec_path;       /* the manifest, put into the job's ConfigMap */
    const char *spec_text;       /* or its text (spec_path then only names the file) */
    const json_t *owner;         /* the master Job's owner (a custom resource); NULL: none */
    const char *namespace;       /* NULL: the connection's */
    const char *image;           /* dtrain's image (NULL: dtrain:latest) */
    const char *claim;           /* an existing PersistentVolumeClaim for the job dir; NULL:
                                    <job>-data is made (ReadWriteMany) */
    const char *claim_size;      /* of the claim made (NULL: 1Gi) */
    const char *service_account; /* the master pod's (NULL: the namespace's default) */
    int stop_grace_s;
} dt__kube_submit_opts;
/* Make the job's master (a batch/v1 Job), its Service, Secret, ConfigMap and claim. */
dt_err dt__kube_submit(dt__kube *k, const dt_job_spec *job, const dt__kube_submit_opts *o);
/* Watch the job's pods, saying each change on out, until its master has ended; *outcome:
 * 0 succeeded, 1 failed, 2 stopped, -1 unknown. */
dt_err dt__kube_follow(dt__kube *k, const dt_job_spec *job, const char *ns, FILE *out,
                       int *outcome);

/* How the job ended, from its master's last words in its pod's log: "Succeeded",
 * "Failed", "Stopped"; NULL when no master has said (it runs, or never ran). */
const char *dt__kube_job_outcome(dt__kube *k, const char *ns, const char *job);

typedef struct dt__http_client dt__http_client;
/* A client of the job's master API through the API server's service proxy
 * (/api/v1/namespaces/NS/services/<job>-master:http/proxy), with the job's token. */
dt_err dt__kube_master_client(dt__kube *k, const char *ns, const char *job, const char *job_token,
                              long timeout_ms, dt__http_client **out);
/* GET path and write the answer to out as it arrives (a pod's log with follow=true). */
dt_err dt__kube_stream(dt__kube *k, const char *path, FILE *out, long *status);

#endif
