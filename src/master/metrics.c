/*
 * metrics.c - the job master's Prometheus metrics (GET /metrics, docs/METRICS.md): the
 * job's phase, each replica's state, restarts and last exit code, what the replicas reported
 * (training progress, the evaluator's figures), the shard service's progress per dataset,
 * the ring's generation, the PS members up, and the HTTP API's own requests and latencies.
 * Built on the master's thread from its state at the time of the scrape.
 */
#include <stdio.h>
#include <string.h>

#include "dtrain/metrics.h"
#include "master/master-impl.h"
#include "net/http-impl.h"
#include "shard/ledger-impl.h"

static const char *const phases[] = {"Pending", "Created", "Running", "Restarting",
                                     "Succeeded", "Failed", NULL};


static void replica_metrics(dt__master *m, dt_prom *b) {
    const char *job = m->job->name;
    dt_prom_family(b, "dtrain_replica_state", "gauge",
                   "1 for the state each replica is in, 0 for the others.");
    for (int i = 0; i < m->st.nreplicas; i++) {
        const dt__replica *r = &m->st.replicas[i];
        for (int s = DT__REPLICA_PENDING; s <= DT__REPLICA_STOPPED; s++) {
            const char *l[] = {"job",   job, "replica", r->name, "type", dt_replica_type_name(r->type),
                               "state", dt__replica_state_name((dt__replica_state)s), NULL};
            dt_prom_sample(b, "dtrain_replica_state", l, r->state == (dt__replica_state)s);
        }
    }
    dt_prom_family(b, "dtrain_replica_restarts_total", "counter",
                   "Times each replica was launched again after it ended.");
    for (int i = 0; i < m->st.nreplicas; i++) {
        const dt__replica *r = &m->st.replicas[i];
        const char *l[] = {"job", job, "replica", r->name, "type", dt_replica_type_name(r->type), NULL};
        dt_prom_sample(b, "dtrain_replica_restarts_total", l, r->restarts);
    }
    dt_prom_family(b, "dtrain_replica_last_exit_code", "gauge",
                   "The exit code of each replica's last ended attempt (128 + signal when "
                   "killed); absent before one ended.");
    for (int i = 0; i < m->st.nreplicas; i++) {
        const dt__replica *r = &m->st.replicas[i];
        if (r->exit_code < 0) continue;
        const char *l[] = {"job", job, "replica", r->name, "type", dt_replica_type_name(r->type), NULL};
        dt_prom_sample(b, "dtrain_replica_last_exit_code", l, r->exit_code);
    }
    dt_prom_family(b, "dtrain_replica_start_time_seconds", "gauge",
                   "Unix time each replica's current attempt started.");
    for (int i = 0; i < m->st.nreplicas; i++) {
        const dt__replica *r = &m->st.replicas[i];
        if (r->start_time <= 0) continue;
        const char *l[] = {"job", job, "replica", r->name, "type", dt_replica_type_name(r->type), NULL};
        dt_prom_sample(b, "dtrain_replica_start_time_seconds", l, r->start_time);
    }
    int ps_up = 0, have_ps = 0;
    for (int i = 0; i < m->st.nreplicas; i++)
        if (m->st.replicas[i].type == DT_REPLICA_TYPE_PS) {
            have_ps = 1;
            ps_up += m->st.replicas[i].state == DT__REPLICA_RUNNING;
        }
    if (have_ps) {
        dt_prom_family(b, "dtrain_ps_members", "gauge",
                       "Parameter servers running now (the PS membership).");
        const char *l[] = {"job", job, NULL};
        dt_prom_sample(b, "dtrain_ps_members", l, ps_up);
    }
}

/* The figures replicas reported: an evaluator's accuracy and loss (its report route). */
static void report_metrics(dt__master *m, dt_prom *b) {
    static const struct {
        const char *key, *name, *help;
    } facts[] = {
        {"accuracy", "dtrain_eval_accuracy", "The evaluator's latest accuracy on the eval set."},
        {"loss", "dtrain_eval_loss", "The evaluator's latest loss on the eval set."},
        {"step", "dtrain_eval_step", "The step of the checkpoint the evaluator evaluated last."},
    };
    for (size_t f = 0; f < sizeof facts / sizeof facts[0]; f++) {
        int header = 0;
        for (int i = 0; i < m->st.nreplicas; i++) {
            const dt__replica *r = &m->st.replicas[i];
            if (r->type != DT_REPLICA_TYPE_EVALUATOR || !r->report) continue;
            double v = dt__json_num(r->report, facts[f].key, -1);
            if (v < 0) continue;
            if (!header++) dt_prom_family(b, facts[f].name, "gauge", facts[f].help);
            const char *l[] = {"job", m->job->name, "replica", r->name, NULL};
            dt_prom_sample(b, facts[f].name, l, v);
        }
    }
}

/* What trainers post as they train (running replicas), and the job's progress and ETA. */
static void progress_metrics(dt__master *m, dt_prom *b, const json_t *data) {
    static const struct {
        const char *key, *name, *help;
    } facts[] = {
        {"step", "dtrain_train_step", "The optimizer step a trainer is at (the global step in a PS job)."},
        {"epoch", "dtrain_train_epoch", "The epoch a trainer is in (1-based)."},
        {"loss", "dtrain_train_loss", "A trainer's mean training loss over its last ~2 s."},
        {"samples_per_sec", "dtrain_train_samples_per_second",
         "A trainer's own samples per second over its last ~2 s."},
    };
    for (size_t f = 0; f < sizeof facts / sizeof facts[0]; f++) {
        int header = 0;
        for (int i = 0; i < m->st.nreplicas; i++) {
            const dt__replica *r = &m->st.replicas[i];
            if (!r->progress || r->state != DT__REPLICA_RUNNING) continue;
            double v = dt__json_num(r->progress, facts[f].key, -1);
            if (v < 0) continue;
            if (!header++) dt_prom_family(b, facts[f].name, "gauge", facts[f].help);
            const char *l[] = {"job", m->job->name, "replica", r->name, NULL};
            dt_prom_sample(b, facts[f].name, l, v);
        }
    }
    json_t *p = dt__master_progress(m, data);
    if (!p) return;
    const char *l[] = {"job", m->job->name, NULL};
    dt_prom_family(b, "dtrain_job_progress_ratio", "gauge",
                   "Samples of the training dataset done, of all its epochs (0 to 1).");
    dt_prom_sample(b, "dtrain_job_progress_ratio", l, dt__json_num(p, "fraction", -1));
    if (json_object_get(p, "samplesPerSec")) {
        dt_prom_family(b, "dtrain_job_samples_per_second", "gauge",
                       "The trainers' samples per second together, as they report them.");
        dt_prom_sample(b, "dtrain_job_samples_per_second", l, dt__json_num(p, "samplesPerSec", -1));
    }
    if (json_object_get(p, "etaSeconds")) {
        dt_prom_family(b, "dtrain_job_eta_seconds", "gauge",
                       "Seconds until the training data is done at the current rate.");
        dt_prom_sample(b, "dtrain_job_eta_seconds", l, dt__json_num(p, "etaSeconds", -1));
    }
    json_decref(p);
}

/* The shard service, from the ledger's progress (the status API's "data"). */
static void data_metrics(dt__master *m, dt_prom *b, const json_t *data) {
    json_t *sets = json_object_get(data, "datasets");
    if (!json_object_size(sets)) return;
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"dtrain_dataset_samples", "gauge", "Samples the dataset hands out in all (size x epochs)."},
        {"dtrain_dataset_samples_done_total", "counter", "Samples in shards reported done."},
        {"dtrain_dataset_shards", "gauge", "Shards in all epochs."},
        {"dtrain_dataset_shards_done_total", "counter", "Shards reported done."},
        {"dtrain_dataset_shards_in_flight", "gauge", "Shards handed out and not reported yet."},
        {"dtrain_dataset_shards_requeued_total", "counter",
         "Shards handed out again (their holder failed, left or its lease expired)."},
        {"dtrain_dataset_shard_failures_total", "counter", "Shards reported failed."},
        {"dtrain_dataset_leases_expired_total", "counter", "Shard leases that ran out."},
        {"dtrain_dataset_epoch", "gauge", "The oldest epoch with shards not done (0-based)."},
    };
    enum { NFAM = sizeof fam / sizeof fam[0] };
    for (int f = 0; f < NFAM; f++) {
        dt_prom_family(b, fam[f].name, fam[f].type, fam[f].help);
        const char *key;
        json_t *d;
        json_object_foreach(sets, key, d) {
            double v = 0, done = 0, samples_done = 0;
            int64_t epoch = -1;
            size_t i;
            json_t *e;
            json_array_foreach(json_object_get(d, "epochs"), i, e) {
                done += dt__json_num(e, "shards_done", -1);
                samples_done += dt__json_num(e, "samples_done", -1);
                if (epoch < 0 && dt__json_num(e, "shards_done", -1) < dt__json_num(e, "shards_total", -1)) epoch = (int64_t)i;
            }
            double size = dt__json_num(d, "dataset_size", -1), epochs = dt__json_num(d, "num_epochs", -1);
            switch (f) {
            case 0: v = size * epochs; break;
            case 1: v = samples_done; break;
            case 2: v = dt__json_num(d, "shards_per_epoch", -1) * epochs; break;
            case 3: v = done; break;
            case 4: v = dt__json_num(d, "in_flight", -1); break;
            case 5: v = dt__json_num(d, "requeued", -1); break;
            case 6: v = dt__json_num(d, "failures", -1); break;
            case 7: v = dt__json_num(d, "leases_expired", -1); break;
            case 8: v = epoch >= 0 ? (double)epoch : epochs; break;
            }
            const char *l[] = {"job", m->job->name, "dataset", key, NULL};
            dt_prom_sample(b, fam[f].name, l, v < 0 ? 0 : v);
        }
    }
    dt_prom_family(b, "dtrain_dataset_replica_samples_done_total", "counter",
                   "Samples each replica reported done.");
    const char *key;
    json_t *d;
    json_object_foreach(sets, key, d) {
        const char *rep;
        json_t *rv;
        json_object_foreach(json_object_get(d, "replicas"), rep, rv) {
            const char *l[] = {"job", m->job->name, "dataset", key, "replica", rep, NULL};
            double v = dt__json_num(rv, "samples_done", -1);
            dt_prom_sample(b, "dtrain_dataset_replica_samples_done_total", l, v < 0 ? 0 : v);
        }
    }
}

void dt__master_metrics(dt__master *m, dt_prom *b) {
    const char *job = m->job->name;
    const char *phase = dt__job_state_phase(&m->st);
    dt_prom_family(b, "dtrain_job_info", "gauge", "The job, its kind and namespace: always 1.");
    const char *li[] = {"job", job, "kind", dt_job_kind_name(m->job->kind), "namespace",
                        m->job->namespace, NULL};
    dt_prom_sample(b, "dtrain_job_info", li, 1);
    dt_prom_family(b, "dtrain_job_phase", "gauge", "1 for the job's phase, 0 for the others.");
    for (int i = 0; phases[i]; i++) {
        const char *l[] = {"job", job, "phase", phases[i], NULL};
        dt_prom_sample(b, "dtrain_job_phase", l, !strcmp(phase, phases[i]));
    }
    const char *lj[] = {"job", job, NULL};
    if (m->st.start_time > 0) {
        dt_prom_family(b, "dtrain_job_start_time_seconds", "gauge", "Unix time the job started.");
        dt_prom_sample(b, "dtrain_job_start_time_seconds", lj, m->st.start_time);
    }
    dt_prom_family(b, "dtrain_job_restarts_total", "counter",
                   "Replica restarts in the job, all replicas together.");
    dt_prom_sample(b, "dtrain_job_restarts_total", lj, m->st.total_restarts);
    replica_metrics(m, b);
    json_t *data = dt__ledger_progress(m->ledger); /* the shard service's, built once */
    report_metrics(m, b);
    progress_metrics(m, b, data);
    data_metrics(m, b, data);
    json_decref(data);
    if (m->rdzv && dt__rdzv_job(m)) {
        dt_prom_family(b, "dtrain_ring_generation", "gauge",
                       "The newest all-reduce ring formed (0: none yet).");
        dt_prom_sample(b, "dtrain_ring_generation", lj, (double)dt__rdzv_generation(m->rdzv));
    }
    dt__http_server_metrics(m->http, b, lj);
}
