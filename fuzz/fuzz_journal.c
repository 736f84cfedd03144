/*
 * fuzz_journal.c - libFuzzer harness: a master's journal (journal.jsonl, read when a
 * master resumes) through the master's own replay (dt__replay_journal, replay.c), into a
 * job state, a shard ledger and a rendezvous made as `dtrain run --resume` makes them, for
 * a job of two workers (the seeds' journals are of such jobs): every event type's checks
 * and its effect on the state, the ledger's replay of the shard.* events, the rendezvous's
 * of the rdzv.* ones. Then the replayed state is read as the resumed master reads it (its
 * status object), so a state the replay left inconsistent is a finding too.
 */
#include "fuzz-impl.h"
#include "master/replay-impl.h"
#include "shard/ledger-impl.h"

static const char spec[] =
    "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: fj}\nspec:\n"
    "  tfReplicaSpecs:\n    Worker:\n      replicas: 2\n"
    "      template: {spec: {containers: [{name: tensorflow, command: [\"true\"]}]}}\n";

static void no_journal(void *c, json_t *ev) {
    (void)c;
    json_decref(ev);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static dt_job_spec *job;
    if (!job && dt_job_spec_parse(&job, spec, sizeof spec - 1, "fj.yaml")) abort();
    dt__job_state st;
    dt__ledger *ledger = NULL;
    dt__rdzv *rdzv = NULL;
    if (dt__job_state_init(&st, job) || dt__ledger_init(&ledger, no_journal, NULL) ||
        dt__rdzv_init(&rdzv))
        abort();
    dt__replay r;
    dt__replay_init(&r, &st, ledger, rdzv);
    if (!dt__replay_journal(&r, dt__fuzz_file(0, data, size)) && r.started) {
        json_t *status = dt__job_state_json(&st, job, NULL), *progress = dt__ledger_progress(ledger);
        json_decref(status);
        json_decref(progress);
    }
    dt__rdzv_free(rdzv);
    dt__ledger_free(ledger);
    dt__job_state_free(&st);
    dt_err_clear();
    return 0;
}
