/*
 * rendezvous.c - how the trainers of an all-reduce TrainJob form a ring through their
 * master (include/dtrain/rendezvous.h, docs/API.md "Rendezvous").
 *
 * Design
 *
 * The master's event loop owns this state, like the rest of dt__master: no locks.
 *
 *   - the ring: the newest generation formed (0: none yet), its members and their data-plane
 *     addresses by rank, and whether it is broken. Only the newest ring matters: an older
 *     one is superseded, whatever became of it.
 *   - the waiting set: replicas that asked to join (POST .../rendezvous) and are not in a
 *     ring yet, with the address and step they gave and when they first asked. A waiting
 *     replica polls (about every 20 ms); each poll refreshes its entry.
 *   - penalties: a replica reported unreachable by another is left out of rings for one
 *     rendezvous timeout (a cut link would otherwise break every ring that holds both ends).
 *
 * A ring is formed, at a request, when every trainer the master runs (chief, master or
 * worker; running, not being stopped or scaled away, not penalized) is waiting, or when
 * the longest-waiting of them has waited the job's rendezvousTimeoutSeconds: then with those
 * waiting. A penalized replica's wait counts from the end of its penalty, so that once it
 * may join again the members have a full timeout to leave their ring and join with it.
 * Ranks: the highest step first (rank 0 holds the newest state and broadcasts it), then
 * the chief or master, then workers by index.
 *
 * A ring breaks when one of its members joins again with the ring's own generation (it
 * left, or its ring failed), exits, restarts, is stopped or scaled away (the master calls
 * dt__rdzv_replica_gone), or is found not running at a request (a master resumed after a
 * replica ended). A member polling with an older generation is answered the ring it is in
 * (it has not heard the answer yet): polls are idempotent.
 *
 * Each formed ring and each break are journaled ("rdzv.ring", "rdzv.broken") and replayed
 * by a resumed master, so generations only grow. The waiting set and the penalties are not:
 * waiting replicas poll again within milliseconds, and a penalty only smooths churn.
 *
 * Time is the caller's `now` (wall-clock seconds, as everywhere in the master), so the
 * rules can be tested without sleeping.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/master-impl.h"

#define NAME_MAX_LEN 32 /* dt__replica.name */

typedef struct waiter {
    char name[NAME_MAX_LEN];
    char address[DT__RDZV_MAX_ADDR + 1];
    int64_t step;
    double joined; /* its first request of this wait */
} waiter;

typedef struct penalty {
    char name[NAME_MAX_LEN]; /* left out */
    char by[NAME_MAX_LEN];   /* the replica that reported it */
    double until;            /* kept a while after it has passed (the end of a wait) */
} penalty;

struct dt__rdzv {
    int64_t generation; /* the newest ring formed; 0: none */
    int broken;
    int broken_by_loss; /* broken by a member that lost a peer (not by the master's news) */
    int size;
    char (*members)[NAME_MAX_LEN]; /* size, by rank */
    char **peers;                  /* size, by rank; owned */
    int64_t *steps;                /* size, by rank: the steps they joined with */
    waiter *w;
    int nw, capw;
    penalty *p;
    int np, capp;
};

dt_err dt__rdzv_init(dt__rdzv **out) {
    *out = calloc(1, sizeof **out);
    return *out ? DT_OK : dt_err_set(DT_ERR_NOMEM, "out of memory");
}

static void clear_ring(dt__rdzv *z) {
    for (int i = 0; i < z->size; i++) free(z->peers[i]);
    free(z->peers);
    free(z->members);
    free(z->steps);
    z->peers = NULL;
    z->members = NULL;
    z->steps = NULL;
    z->size = 0;
}

void dt__rdzv_free(dt__rdzv *z) {
    if (!z) return;
    clear_ring(z);
    free(z->w);
    free(z->p);
    free(z);
}

int64_t dt__rdzv_generation(const dt__rdzv *z) { return z->generation; }

/* ---- helpers ---- */

static int is_trainer(dt_replica_type t) {
    return t == DT_REPLICA_TYPE_CHIEF || t == DT_REPLICA_TYPE_MASTER ||
           t == DT_REPLICA_TYPE_WORKER;
}

/* A trainer the master runs now: it can take part in a ring (one being stopped too: it
 * drains its ring before it goes, allreduce.c). */
static int eligible(const dt__replica *r) {
    return is_trainer(r->type) && r->state == DT__REPLICA_RUNNING && !r->removing;
}

static void journal(dt__master *m, json_t *ev) { dt__master_journal(m, ev); }

static int find_waiter(const dt__rdzv *z, const char *name) {
    for (int i = 0; i < z->nw; i++)
        if (!strcmp(z->w[i].name, name)) return i;
    return -1;
}

static void drop_waiter(dt__rdzv *z, int i) {
    memmove(&z->w[i], &z->w[i + 1], (size_t)(z->nw - i - 1) * sizeof *z->w);
    z->nw--;
}

static penalty *find_penalty(dt__rdzv *z, const char *name) {
    for (int i = 0; i < z->np; i++)
        if (!strcmp(z->p[i].name, name)) return &z->p[i];
    return NULL;
}

static int penalized(dt__rdzv *z, const char *name, double now) {
    const penalty *p = find_penalty(z, name);
    return p && p->until > now;
}

/* When w's wait started, for the timeout: its first request, or the end of its penalty. */
static double wait_start(dt__rdzv *z, const waiter *w) {
    const penalty *p = find_penalty(z, w->name);
    return p && p->until > w->joined ? p->until : w->joined;
}

static int member_rank(const dt__rdzv *z, const char *name) {
    for (int i = 0; i < z->size; i++)
        if (!strcmp(z->members[i], name)) return i;
    return -1;
}

static void break_ring(dt__master *m, const char *why) {
    dt__rdzv *z = m->rdzv;
    if (!z->generation || z->broken) return;
    z->broken = 1;
    journal(m, json_pack("{s:s, s:I, s:s}", "ev", "rdzv.broken", "generation",
                         (json_int_t)z->generation, "reason", why));
    dt__master_say(m, "rendezvous: ring generation %lld is broken: %s", (long long)z->generation,
                   why);
    dt__master_touch(m);
}

/* The state as it must be before any decision: a ring holding a replica that no longer
 * runs is broken; such replicas leave the waiting set; long-passed penalties are dropped. */
static void refresh(dt__master *m, double now) {
    dt__rdzv *z = m->rdzv;
    double timeout = (double)m->job->allreduce.rendezvous_timeout_ms / 1000.0;
    if (z->generation && !z->broken) {
        for (int i = 0; i < z->size; i++) {
            const dt__replica *r = dt__job_state_find(&m->st, z->members[i]);
            if (!r || !eligible(r)) {
                char why[128];
                snprintf(why, sizeof why, "%s is %s", z->members[i],
                         !r            ? "gone"
                         : r->removing ? "being removed"
                                       : "not running");
                break_ring(m, why);
                break;
            }
        }
    }
    for (int i = z->nw - 1; i >= 0; i--) {
        const dt__replica *r = dt__job_state_find(&m->st, z->w[i].name);
        if (!r || !eligible(r)) drop_waiter(z, i);
    }
    for (int i = z->np - 1; i >= 0; i--) {
        if (z->p[i].until + timeout >= now || find_waiter(z, z->p[i].name) >= 0) continue;
        memmove(&z->p[i], &z->p[i + 1], (size_t)(z->np - i - 1) * sizeof *z->p);
        z->np--;
    }
}

/* Rank order: the highest step first, then the chief or master, then workers by index. */
typedef struct cand {
    const waiter *w;
    dt_replica_type type;
    int index;
} cand;

static int rank_cmp(int64_t step_a, dt_replica_type ta, int ia, int64_t step_b, dt_replica_type tb,
                    int ib) {
    if (step_a != step_b) return step_a > step_b ? -1 : 1;
    if (ta != tb) return ta < tb ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return rank_cmp(x->w->step, x->type, x->index, y->w->step, y->type, y->index);
}

/* Are rings over? A job that succeeded or failed forms no more; a stopped one still does,
 * for members that got SIGTERM out of a ring with a shard half-trained: they re-form to
 * finish it (they drain) before they go. */
static int rings_over(const dt__master *m) {
    return m->st.finished && m->st.outcome != DT_JOB_OUTCOME_STOPPED;
}

/* Form a ring when its time has come (see the top of the file). */
static void maybe_form(dt__master *m, double now) {
    dt__rdzv *z = m->rdzv;
    if (rings_over(m) || z->nw <= 0) return;
    double timeout = (double)m->job->allreduce.rendezvous_timeout_ms / 1000.0;
    int all = 1;
    for (int i = 0; i < m->st.nreplicas && all; i++) {
        const dt__replica *r = &m->st.replicas[i];
        if (eligible(r) && !penalized(z, r->name, now) && find_waiter(z, r->name) < 0) all = 0;
    }
    cand *c = calloc((size_t)z->nw, sizeof *c);
    if (!c) {
        dt__master_say(m, "rendezvous: out of memory forming a ring");
        return;
    }
    int n = 0;
    double oldest = now;
    for (int i = 0; i < z->nw; i++) {
        const waiter *w = &z->w[i];
        const dt__replica *r = dt__job_state_find(&m->st, w->name);
        if (!r || penalized(z, w->name, now)) continue;
        c[n++] = (cand){.w = w, .type = r->type, .index = r->index};
        double t = wait_start(z, w);
        if (t < oldest) oldest = t;
    }
    if (!n || (!all && now - oldest < timeout)) {
        free(c);
        return;
    }
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
    char(*members)[NAME_MAX_LEN] = calloc((size_t)n, sizeof *members);
    char **peers = calloc((size_t)n, sizeof *peers);
    int64_t *steps = calloc((size_t)n, sizeof *steps);
    int ok = members && peers && steps;
    for (int i = 0; ok && i < n; i++) {
        snprintf(members[i], NAME_MAX_LEN, "%s", c[i].w->name);
        steps[i] = c[i].w->step;
        ok = (peers[i] = strdup(c[i].w->address)) != NULL;
    }
    if (!ok) {
        for (int i = 0; peers && i < n; i++) free(peers[i]);
        free(peers);
        free(members);
        free(steps);
        free(c);
        dt__master_say(m, "rendezvous: out of memory forming a ring");
        return;
    }
    clear_ring(z);
    z->generation++;
    z->broken = 0;
    z->broken_by_loss = 0;
    z->size = n;
    z->members = members;
    z->peers = peers;
    z->steps = steps;
    json_t *jm = json_array(), *jp = json_array(), *js = json_array();
    char line[1024];
    size_t len = 0;
    line[0] = 0;
    for (int i = 0; i < n; i++) {
        json_array_append_new(jm, json_string(members[i]));
        json_array_append_new(jp, json_string(peers[i]));
        json_array_append_new(js, json_integer(c[i].w->step));
        if (len < sizeof line)
            len += (size_t)snprintf(line + len, sizeof line - len, "%s%d %s (step %lld)",
                                    i ? ", " : "", i, members[i], (long long)c[i].w->step);
    }
    if (len >= sizeof line) snprintf(line + sizeof line - 5, 5, "...");
    journal(m, json_pack("{s:s, s:I, s:o, s:o, s:o}", "ev", "rdzv.ring", "generation",
                         (json_int_t)z->generation, "members", jm, "peers", jp, "steps", js));
    dt__master_say(m, "rendezvous: ring generation %lld formed, %d member%s by rank: %s%s",
                   (long long)z->generation, n, n == 1 ? "" : "s", line,
                   all ? "" : " (after the rendezvous timeout, without those not waiting)");
    free(c);
    /* Members leave the waiting set (backwards: indices stay valid). */
    for (int i = z->nw - 1; i >= 0; i--)
        if (member_rank(z, z->w[i].name) >= 0) drop_waiter(z, i);
    dt__master_touch(m);
}

static json_t *ring_answer(const dt__rdzv *z, int rank) {
    json_t *peers = json_array(), *members = json_array();
    for (int i = 0; i < z->size; i++) {
        json_array_append_new(peers, json_string(z->peers[i]));
        json_array_append_new(members, json_string(z->members[i]));
    }
    return json_pack("{s:b, s:I, s:i, s:i, s:o, s:o}", "formed", 1, "generation",
                     (json_int_t)z->generation, "rank", rank, "size", z->size, "peers", peers,
                     "members", members);
}

/* `by` lost `lost`: leave `lost` out for a rendezvous timeout; when the two reported each
 * other, leave out only the one later in rank order. by_step: the reporter's step. */
static dt_err report_unreachable(dt__master *m, const dt__replica *by, int64_t by_step,
                                 const dt__replica *lost, double now) {
    dt__rdzv *z = m->rdzv;
    double timeout = (double)m->job->allreduce.rendezvous_timeout_ms / 1000.0;
    penalty *mine = find_penalty(z, by->name);
    if (mine && mine->until > now && !strcmp(mine->by, lost->name)) {
        /* Mutual: only the one later in rank order stays out. Its step: the one it waits
         * with, else the one it joined its ring with. */
        int wl = find_waiter(z, lost->name), rl = member_rank(z, lost->name);
        int64_t lost_step = wl >= 0 ? z->w[wl].step : rl >= 0 ? z->steps[rl] : -1;
        if (rank_cmp(by_step, by->type, by->index, lost_step, lost->type, lost->index) > 0) {
            dt__master_say(m,
                           "rendezvous: %s and %s report each other unreachable: %s (later in "
                           "rank order) stays left out",
                           by->name, lost->name, by->name);
            return DT_OK;
        }
        mine->until = 0; /* lifted */
        dt__master_say(m,
                       "rendezvous: %s and %s report each other unreachable: %s (later in rank "
                       "order) is left out instead of %s",
                       by->name, lost->name, lost->name, by->name);
    }
    penalty *p = find_penalty(z, lost->name);
    if (!p) {
        if (z->np == z->capp) {
            int cap = z->capp ? 2 * z->capp : 8;
            penalty *np = realloc(z->p, (size_t)cap * sizeof *np);
            if (!np) return dt_err_set(DT_ERR_NOMEM, "out of memory");
            z->p = np;
            z->capp = cap;
        }
        p = &z->p[z->np++];
        snprintf(p->name, sizeof p->name, "%s", lost->name);
    }
    snprintf(p->by, sizeof p->by, "%s", by->name);
    p->until = now + timeout;
    dt__master_say(m, "rendezvous: %s reports %s unreachable: %s is left out of rings for %.1f s",
                   by->name, lost->name, lost->name, timeout);
    return DT_OK;
}

/* ---- the API's operations ---- */

int dt__rdzv_job(const dt__master *m) {
    return m->job->kind == DT_JOB_KIND_TRAINJOB && m->job->strategy == DT_STRATEGY_ALLREDUCE;
}

dt_err dt__rdzv_check_job(const dt__master *m, int forming) {
    const dt_job_spec *job = m->job;
    if (!dt__rdzv_job(m))
        return dt_err_set(DT_ERR_STATE,
                          "job '%s' is a %s%s%s: only the trainers of a TrainJob with strategy "
                          "allreduce form rings",
                          job->name, dt_job_kind_name(job->kind),
                          job->kind == DT_JOB_KIND_TRAINJOB ? " with strategy " : "",
                          job->kind == DT_JOB_KIND_TRAINJOB ? dt_strategy_name(job->strategy)
                                                            : "");
    if (forming && rings_over(m))
        return dt_err_set(DT_ERR_STATE, "job '%s' is finished: it forms no more rings",
                          job->name);
    return DT_OK;
}

dt_err dt__rdzv_join(dt__master *m, const dt__rdzv_reg *reg, double now, json_t **answer) {
    dt__rdzv *z = m->rdzv;
    dt_err e;
    *answer = NULL;
    if ((e = dt__rdzv_check_job(m, 1))) return e;
    const dt__replica *r = dt__job_state_find(&m->st, reg->replica);
    if (!r)
        return dt_err_set(DT_ERR_ARG, "replica: job '%s' has no replica '%s'", m->job->name,
                          reg->replica);
    if (!is_trainer(r->type))
        return dt_err_set(DT_ERR_ARG,
                          "replica: %s is not a trainer (a chief, master or worker): it joins no "
                          "ring",
                          r->name);
    if (r->removing)
        return dt_err_set(DT_ERR_STATE, "replica: %s is being removed (scaled down): it joins no "
                                        "more rings", r->name);
    if (r->state != DT__REPLICA_RUNNING)
        return dt_err_set(DT_ERR_STATE, "replica: %s is not running (it is %s): it joins no ring",
                          r->name, dt__replica_state_name(r->state));
    if (reg->generation > z->generation)
        return dt_err_set(DT_ERR_ARG,
                          "generation: %lld is not a ring this master formed (the newest is %lld)",
                          (long long)reg->generation, (long long)z->generation);
    const dt__replica *lost = NULL;
    if (reg->unreachable) {
        lost = dt__job_state_find(&m->st, reg->unreachable);
        /* A peer no longer in the table was scaled away while its ring ran: the reporter
         * saw it leave. Nothing to leave out, and no reason to refuse the reporter (it would
         * exit and lose its place in training). A name that is in neither the table nor the
         * ring being left is refused; a report about an older ring is moot, whatever it names. */
        if (!lost && (reg->generation < z->generation ||
                      (reg->generation == z->generation && member_rank(z, reg->unreachable) >= 0)))
            dt__master_say(m, "rendezvous: %s lost %s, which is no longer in the job: no penalty",
                           reg->replica, reg->unreachable);
        else if (!lost)
            return dt_err_set(DT_ERR_ARG, "unreachable: job '%s' has no replica '%s'",
                              m->job->name, reg->unreachable);
        else if (!is_trainer(lost->type))
            return dt_err_set(DT_ERR_ARG,
                              "unreachable: %s is not a trainer: it is in no ring", lost->name);
        else if (lost == r)
            return dt_err_set(DT_ERR_ARG, "unreachable: %s cannot report itself", r->name);
    }
    refresh(m, now);
    int rank = member_rank(z, r->name);
    /* A lost peer counts only when the ring failed on its own: after the master asked the
     * members to leave (a broken ring, a replica waiting) they abort one by one, and a
     * neighbour's closed connection is no sign of a bad link. */
    int asked_to_leave = z->broken && !z->broken_by_loss;
    for (int i = 0; i < z->nw && !asked_to_leave; i++) /* a newcomer waits */
        if (!penalized(z, z->w[i].name, now) && member_rank(z, z->w[i].name) < 0)
            asked_to_leave = 1;
    if (lost && asked_to_leave) {
        dt__master_say(m, "rendezvous: %s lost %s while the ring was being left: no penalty",
                       r->name, lost->name);
        lost = NULL;
    }
    if (rank >= 0 && !z->broken && reg->generation < z->generation) {
        /* A poll that has not heard of its ring yet. */
        *answer = ring_answer(z, rank);
        return *answer ? DT_OK : dt_err_set(DT_ERR_NOMEM, "out of memory");
    }
    if (rank >= 0 && !z->broken) {
        char why[128];
        snprintf(why, sizeof why, "%s joins again%s%s", r->name, lost ? ", having lost " : "",
                 lost ? lost->name : "");
        break_ring(m, why);
        z->broken_by_loss = lost != NULL;
    }
    /* lost and r point into the table, which nothing below changes. */
    if (lost && (e = report_unreachable(m, r, reg->step, lost, now))) return e;
    int i = find_waiter(z, r->name);
    if (i < 0) {
        if (z->nw == z->capw) {
            int cap = z->capw ? 2 * z->capw : 8;
            waiter *nw = realloc(z->w, (size_t)cap * sizeof *nw);
            if (!nw) return dt_err_set(DT_ERR_NOMEM, "out of memory");
            z->w = nw;
            z->capw = cap;
        }
        i = z->nw++;
        z->w[i] = (waiter){.joined = now};
        snprintf(z->w[i].name, sizeof z->w[i].name, "%s", r->name);
        dt__master_touch(m);
    }
    snprintf(z->w[i].address, sizeof z->w[i].address, "%s", reg->address);
    z->w[i].step = reg->step;
    maybe_form(m, now);
    rank = member_rank(z, r->name);
    if (rank >= 0 && !z->broken && find_waiter(z, r->name) < 0)
        *answer = ring_answer(z, rank);
    else
        *answer = json_pack("{s:b, s:I}", "formed", 0, "generation", (json_int_t)z->generation);
    return *answer ? DT_OK : dt_err_set(DT_ERR_NOMEM, "out of memory");
}

dt_err dt__rdzv_status(dt__master *m, int64_t generation, double now, json_t **answer) {
    dt__rdzv *z = m->rdzv;
    dt_err e;
    *answer = NULL;
    if ((e = dt__rdzv_check_job(m, 0))) return e;
    if (generation > z->generation)
        return dt_err_set(DT_ERR_ARG,
                          "generation: %lld is not a ring this master formed (the newest is %lld)",
                          (long long)generation, (long long)z->generation);
    refresh(m, now);
    maybe_form(m, now);
    json_t *members = json_array(), *waiting = json_array();
    for (int i = 0; i < z->size; i++) json_array_append_new(members, json_string(z->members[i]));
    int nwaiting = 0;
    for (int i = 0; i < z->nw; i++) {
        if (penalized(z, z->w[i].name, now)) continue;
        json_array_append_new(waiting, json_string(z->w[i].name));
        nwaiting++;
    }
    /* A stopped job's members are not told to leave: they got SIGTERM and drain their ring
     * to a step where no shard is half-trained (allreduce.c) before they go. */
    int leave = rings_over(m) || generation != z->generation || z->broken || nwaiting > 0;
    *answer = json_pack("{s:I, s:o, s:o, s:b, s:b}", "generation", (json_int_t)z->generation,
                        "members", members, "waiting", waiting, "broken", z->broken, "leave",
                        leave);
    return *answer ? DT_OK : dt_err_set(DT_ERR_NOMEM, "out of memory");
}

void dt__rdzv_annotate(const dt__master *m, json_t *replica) {
    const dt__rdzv *z = m->rdzv;
    const char *name = json_string_value(json_object_get(replica, "name"));
    if (!z || !name || find_waiter(z, name) < 0) return;
    int n = 0;
    for (int i = 0; i < m->st.nreplicas; i++)
        n += eligible(&m->st.replicas[i]);
    char msg[200];
    snprintf(msg, sizeof msg, "ring generation %lld forming: %d of %d trainers have joined",
             (long long)z->generation + 1, z->nw, n);
    json_object_set_new(replica, "reason", json_string("Waiting"));
    json_object_set_new(replica, "message", json_string(msg));
}

void dt__rdzv_replica_gone(dt__master *m, const char *name, const char *why) {
    dt__rdzv *z = m->rdzv;
    if (!z) return;
    int i = find_waiter(z, name);
    if (i >= 0) drop_waiter(z, i);
    /* A peer that reported it lost this replica saw it die, not a bad link (the report can
     * reach us before the exit does): its restarted process starts without a penalty. */
    penalty *p = find_penalty(z, name);
    if (p && p->until > 0) {
        p->until = 0;
        dt__master_say(m, "rendezvous: %s %s: its penalty is lifted", name, why);
    }
    if (z->generation && !z->broken && member_rank(z, name) >= 0) {
        char text[160];
        snprintf(text, sizeof text, "%s %s", name, why);
        break_ring(m, text);
    }
}

void dt__rdzv_replay(dt__rdzv *z, const json_t *ev) {
    const char *kind = json_string_value(json_object_get(ev, "ev"));
    json_int_t g = json_integer_value(json_object_get(ev, "generation"));
    if (!kind || g <= 0) return;
    if (!strcmp(kind, "rdzv.broken")) {
        if (g == z->generation) z->broken = 1;
        return;
    }
    if (strcmp(kind, "rdzv.ring") || g < z->generation) return;
    const json_t *jm = json_object_get(ev, "members"), *jp = json_object_get(ev, "peers"),
                 *js = json_object_get(ev, "steps");
    size_t n = json_array_size(jm);
    z->generation = g; /* generations only grow, whatever the rest of the line holds */
    z->broken = 1;     /* unless the line is whole */
    clear_ring(z);
    if (!n || n != json_array_size(jp) || n > DT__MAX_REPLICAS) return;
    z->members = calloc(n, sizeof *z->members);
    z->peers = calloc(n, sizeof *z->peers);
    z->steps = calloc(n, sizeof *z->steps);
    if (!z->members || !z->peers || !z->steps) {
        clear_ring(z);
        return;
    }
    z->size = (int)n;
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_array_get(jm, i));
        const char *peer = json_string_value(json_array_get(jp, i));
        snprintf(z->members[i], NAME_MAX_LEN, "%s", name ? name : "");
        z->steps[i] = json_integer_value(json_array_get(js, i)); /* 0 when absent */
        if (!name || !peer || !(z->peers[i] = strdup(peer))) {
            clear_ring(z);
            return;
        }
    }
    z->broken = 0;
}
