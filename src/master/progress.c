/*
 * progress.c - how far a job has got and how long the rest will take (docs/API.md,
 * "progress"): the samples of the training dataset done of all (from the shard service),
 * the rate the trainers report (their progress posts: every replica's own samples/s, summed
 * over those that posted in the last PROGRESS_FRESH_S), and the ETA at that rate; and the
 * job's status object that carries it (the status route and status.json).
 */
#include <math.h>
#include <string.h>

#include "master/master-impl.h"
#include "shard/ledger-impl.h"

#define PROGRESS_FRESH_S 10.0


void dt__master_record_progress(dt__master *m, dt__replica *r, json_t *progress) {
    json_decref(r->progress);
    r->progress = progress;
    r->progress_time = dt__wall_now();
    dt__series_progress(m, r->name, progress);
    dt__master_touch(m);
}

json_t *dt__master_progress(dt__master *m, const json_t *data) {
    json_t *sets = json_object_get(data, "datasets");
    json_t *d = json_object_get(sets, "training");
    if (!d) { /* the first dataset registered, when none is called "training" */
        const char *k;
        json_t *v;
        json_object_foreach(sets, k, v) {
            d = v;
            break;
        }
    }
    if (!d) return NULL;
    double total = dt__json_num(d, "dataset_size", 0) * dt__json_num(d, "num_epochs", 0), done = 0;
    int64_t epoch = -1;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(d, "epochs"), i, e) {
        done += dt__json_num(e, "samples_done", 0);
        if (epoch < 0 && dt__json_num(e, "shards_done", 0) < dt__json_num(e, "shards_total", 0)) epoch = (int64_t)i;
    }
    int64_t epochs = (int64_t)dt__json_num(d, "num_epochs", 0);
    if (epoch < 0) epoch = done >= total ? epochs : (int64_t)json_array_size(json_object_get(d, "epochs"));
    double rate = 0, now = dt__wall_now();
    int reporting = 0;
    for (int k = 0; k < m->st.nreplicas; k++) {
        const dt__replica *r = &m->st.replicas[k];
        if (!r->progress || r->state != DT__REPLICA_RUNNING || now - r->progress_time > PROGRESS_FRESH_S)
            continue;
        rate += dt__json_num(r->progress, "samples_per_sec", 0);
        reporting++;
    }
    json_t *out = json_pack("{s:f, s:f, s:f, s:I, s:I}", "samplesDone", done, "samplesTotal", total,
                            "fraction", total > 0 ? done / total : 0.0, "epoch",
                            (json_int_t)(epoch < epochs ? epoch + 1 : epochs), "epochs",
                            (json_int_t)epochs);
    if (out && reporting) {
        json_object_set_new(out, "samplesPerSec", json_real(rate));
        if (rate > 0 && done < total)
            json_object_set_new(out, "etaSeconds", json_real(ceil((total - done) / rate)));
    }
    return out;
}

json_t *dt__master_status_json(dt__master *m, const char *url) {
    json_t *j = dt__job_state_json(&m->st, m->job, url);
    json_object_set_new(j, "jobDir", json_string(m->dir));
    json_t *reps = json_array();
    for (int i = 0; i < m->st.nreplicas; i++) {
        json_t *rj = dt__replica_json(&m->st.replicas[i], m->dir);
        dt__rdzv_annotate(m, rj);
        json_array_append_new(reps, rj);
    }
    json_object_set_new(j, "replicas", reps);
    json_t *data = dt__ledger_progress(m->ledger);
    json_t *p = dt__master_progress(m, data);
    json_object_set_new(j, "data", data);
    json_object_set_new(j, "progress", p ? p : json_null());
    if (dt__rdzv_job(m))
        json_object_set_new(j, "ring", json_pack("{s:I}", "generation",
                                                 (json_int_t)dt__rdzv_generation(m->rdzv)));
    return j;
}
