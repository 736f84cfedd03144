/*
 * fuzz_kube_responses.c - libFuzzer harness: the Kubernetes API server's answers as the
 * master reads them (kube_client.c, kube_backend.c): a pod list (the backend's first GET,
 * and each list of its watch) and the bytes of a watch stream (one {"type", "object"} event
 * a line: pods ADDED, MODIFIED, DELETED, BOOKMARK, ERROR with a Status object).
 *
 * The backend is the real kubernetes backend of a TFJob `fk` of two workers, made without a
 * cluster (dt__kube_backend_offline over dt__kube_watch_offline: the same code from the
 * answers on, no thread, no connection): it is seeded from the list, adopts worker-0 and
 * worker-1 as a resumed master does (those whose pods run become its live replicas), then
 * the list and the stream are queued as the watch thread queues them (listed again after an
 * ERROR 410, as the thread does), and the backend takes its events: the replicas whose pods
 * ended are said ended, with their exit code.
 *
 * Input: the list answer (one line of JSON), then the watch stream's bytes. An end said with
 * a code above 255 is a finding (the master journals it as a process's exit code). With
 * DT_FUZZ_TRACE set, the ends said are printed (to write seeds).
 */
#include "backend/backend.h"
#include "backend/kube-impl.h"
#include "fuzz-impl.h"

static const char spec[] =
    "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: fk}\nspec:\n"
    "  tfReplicaSpecs:\n    Worker:\n      replicas: 2\n"
    "      template: {spec: {containers: [{name: tensorflow, image: tf}]}}\n";

static void ended(void *ctx, const char *name, int code) {
    int *n = ctx;
    if (code > 255) {
        fprintf(stderr, "fuzz_kube_responses: %s ended with code %d\n", name, code);
        abort();
    }
    (*n)++;
    if (getenv("DT_FUZZ_TRACE")) fprintf(stderr, "%s ended with code %d\n", name, code);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static dt_job_spec *job;
    if (!job && dt_job_spec_parse(&job, spec, sizeof spec - 1, "fk.yaml")) abort();
    const uint8_t *nl = memchr(data, '\n', size);
    size_t list_len = nl ? (size_t)(nl - data) : size;
    json_t *list = json_loadb((const char *)data, list_len, 0, NULL);
    dt__kube_watch *w = NULL;
    dt__backend *b = NULL;
    if (dt__kube_watch_offline(&w) || dt__kube_backend_offline(&b, job, list, w)) abort();
    int ends = 0, code;
    static const char *const names[] = {"worker-0", "worker-1"};
    for (int i = 0; i < 2; i++) {
        char pod[64];
        snprintf(pod, sizeof pod, "fk-%s", names[i]);
        json_t *facts = json_pack("{s:s}", "pod", pod);
        b->ops->adopt(b, names[i], facts, &code);
        json_decref(facts);
    }
    dt__kube_watch_feed_list(w, list);
    b->ops->events(b, ended, &ends);
    if (nl) {
        const char *stream = (const char *)nl + 1;
        size_t len = size - list_len - 1;
        /* in pieces, as libcurl hands them over: a line may span two */
        for (size_t off = 0; off < len;) {
            size_t piece = len - off < 61 ? len - off : 61;
            if (dt__kube_watch_feed(w, stream + off, piece) != piece) break;
            off += piece;
            if (dt__kube_watch_gone(w)) dt__kube_watch_feed_list(w, list);
            b->ops->events(b, ended, &ends);
        }
    }
    char why[256];
    dt__kube_why(list, 403, why, sizeof why);
    b->ops->free(b);
    json_decref(list);
    dt_err_clear();
    return 0;
}
