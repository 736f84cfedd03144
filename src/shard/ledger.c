/*
 * ledger.c - the elastic data shard service's ledger (see ledger-impl.h for the contract).
 *
 * Design notes
 *
 * Memory. A dataset keeps one small summary per opened epoch (counters); only OPEN epochs
 * (opened, not yet done) own a shard table, the permutation of their samples (shuffle) and
 * the hand-out order of their shards (shuffle_shards). An epoch opens lazily, inside the
 * fetch that finds nothing todo in any open epoch; it is closed (its tables freed) when
 * its last shard is reported done. Shard ranges are not stored: shard id covers positions
 * [id * shard_size, min((id + 1) * shard_size, dataset_size)).
 *
 * Orders are pure functions of (seed, epoch): the sample order of epoch e is
 * dt_epoch_order(seed, e) (the same order the single-process trainer uses for epoch e);
 * the hand-out order of its shards is a Fisher-Yates permutation drawn from
 * dt_rng_seed2(seed ^ LD_SHARD_ORDER_SALT, e). Nothing random is carried as state.
 *
 * Queue. Each open epoch hands out todo shards from two places: a stack of re-queued shards
 * (`front`, the most recently re-queued is retried first) and then the never-handed-out
 * rest of its hand-out order (`order[next..]`). A fetch takes from the earliest open epoch
 * that has a todo shard, so a shard of an earlier epoch re-queued after a later epoch
 * opened is handed out before anything of the later epoch. A release re-queues a replica's
 * shards of one epoch in descending id order, so the lowest id ends on top of the stack.
 * The `front` stack is allocated with the epoch (nshards entries): a shard is todo at most
 * once, so it never overflows and re-queueing never allocates. Each replica keeps the time
 * and reason of each of its releases (one per release that re-queued something), so that
 * the refusal of a late report names the release that re-queued its shard.
 *
 * Leases. One counter per ledger, strictly increasing from 1 across datasets; each fetch
 * takes the next value. A report must name the holder, the shard and its lease.
 *
 * Retries. A client that lost the answer to a request sends it again; the first one may
 * have changed the ledger (and been journaled) before the master died. Each replica keeps,
 * per dataset, the shards of its last fetch request (up to DT__LEDGER_MAX_BATCH of them),
 * with the client's request id, and its last DT__LEDGER_MAX_BATCH accepted reports (so a
 * replica may use one client per dataset, each in its own thread): a fetch with the same
 * request id gets the same shards again (those the replica still holds), and a report
 * already accepted is answered OK without being counted again. Both are restored by
 * replay, since they are set by the replayed calls.
 *
 * Batches. A fetch may ask for up to DT__LEDGER_MAX_BATCH shards; each is taken as a
 * single fetch would take it and journaled as its own shard.fetch event, the second and
 * later with "part" (their place in the batch), so that replay appends them to the
 * replica's last fetch instead of taking them for a retry.
 *
 * Events (the journal callback gets one per state change; refused calls emit none):
 *   {"ev":"shard.register","dataset":s,"dataset_size":i,"batch_size":i,"num_epochs":i,
 *    "num_minibatches_per_shard":i,"shuffle":b,"shuffle_shards":b,"seed":"decimal u64",
 *    "max_failures":i}
 *   {"ev":"shard.fetch","dataset":s,"replica":s,"epoch":i,"id":i,"lease":i,"request":i,
 *    "time":f}                                   (+ "part":i, 1.., for a batch's later shards)
 *   {"ev":"shard.report","dataset":s,"replica":s,"epoch":i,"id":i,"lease":i,"ok":b,
 *    "message":s,"time":f}
 *   {"ev":"shard.release","replica":s,"why":s,"time":f,"shards":i}
 * The seed is a decimal string because a JSON integer (jansson: int64) cannot hold every
 * uint64. Replay re-executes each event with the same logic as the live call (everything
 * is a deterministic function of the ledger's state and the event) and checks that a
 * replayed fetch hands out the journaled (epoch, id, lease), that a replayed report is
 * accepted and that a replayed release re-queues "shards" shards; a mismatch is
 * DT_ERR_FORMAT. A release that re-queues nothing emits no event.
 *
 * Not journaled (and so not rebuilt by replay): heartbeats and the last-seen time of
 * replicas that only fetched WAIT/END (replayed replicas are last seen at the time of
 * their last journaled event: a resumed master should heartbeat the replicas it finds
 * alive before it calls dt__ledger_expire), and the late_reports_refused statistic.
 *
 * Progress counters: "failures" counts failed reports, "requeued" every return of a shard
 * to todo (failed reports and releases), "late_reports_refused" the reports refused with
 * DT_ERR_STATE because the replica did not hold the shard under that lease.
 *
 * Lease deadlines (progress, not liveness). A replica's heartbeat keeps every shard it
 * holds; a shard it fetched and then lost track of (a bug in a user's loop, a thread that
 * hangs while another beats) would hold its epoch open forever. So each lease also has a
 * deadline: a shard held longer than it is re-queued on its own (dt__ledger_expire_leases,
 * journaled as "shard.expire"), and a late report of it is refused as for a release. The
 * deadline is the one given, or 10 x the mean time from fetch to accepted report of the
 * dataset's shards so far (from 3 of them on), and never less than the floor given; it
 * doubles for a shard each time the shard's lease expires (so that shards slower than the
 * deadline still end: the first deadline may come before any shard could be timed).
 *   {"ev":"shard.expire","dataset":s,"replica":s,"epoch":i,"id":i,"lease":i,"held":f,
 *    "deadline":f,"time":f}
 *
 * Not thread-safe: owned by the master's event-loop thread.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert-impl.h"
#include "dtrain/data.h"
#include "dtrain/rng.h"
#include "shard/ledger-impl.h"

#define LD_SHARD_ORDER_SALT 0x7368617264736571ULL /* "shardseq" */

enum { LD_TODO = 0, LD_DOING, LD_DONE };
enum { LD_REQ_NONE = 0, LD_REQ_RELEASED, LD_REQ_FAILED, LD_REQ_EXPIRED };
enum { LD_RUNNING = 0, LD_DS_DONE, LD_FAILED };

typedef struct ld_shard {
    uint64_t lease;      /* of the last fetch */
    double since;        /* doing: handed out at */
    double requeued_at;  /* time of the last re-queue */
    int32_t holder;      /* doing: the holder; done: who did it; -1: never handed out */
    int32_t prev;        /* the holder at the last re-queue; -1: never re-queued */
    int32_t failures;    /* failed reports */
    uint8_t state;       /* LD_TODO, LD_DOING, LD_DONE */
    uint8_t requeue_why; /* LD_REQ_* of the last re-queue */
    uint8_t expiries;    /* times its lease passed its deadline: each doubles the next */
} ld_shard;

typedef struct ld_epoch {
    ld_shard *shards; /* open: nshards entries; NULL once done */
    int64_t *perm;    /* open with shuffle: the epoch's sample order; else NULL */
    int64_t *order;   /* open with shuffle_shards: hand-out order of ids; NULL: 0, 1, ... */
    int64_t *front;   /* open: stack of re-queued shard ids (top = front[nfront - 1]) */
    int64_t next;     /* order position of the next never-handed-out shard */
    int64_t nfront;
    int64_t shards_done, samples_done;
    int done;
} ld_epoch;

/* A shard a replica was handed or reported, remembered to answer a retry. */
typedef struct ld_last {
    int64_t epoch, id;
    uint64_t lease;
    int ok;
} ld_last;

typedef struct ld_rstat {
    int32_t replica;
    int64_t shards_done, samples_done;
    /* The shards of the replica's last fetch request (a batch of nfetch), with its id. */
    uint64_t fetch_request;
    int nfetch;
    ld_last fetch[DT__LEDGER_MAX_BATCH];
    /* Its last accepted reports (a ring: the newest at (report_next - 1) mod MAX_BATCH),
     * so that a retried request carrying a batch of reports counts none of them twice. */
    int nreport, report_next;
    ld_last report[DT__LEDGER_MAX_BATCH];
} ld_rstat;

typedef struct ld_dataset {
    dt__dataset_conf conf;
    int64_t shard_size, nshards;
    ld_epoch *epochs; /* nopened entries (capacity cap_epochs) */
    int64_t nopened, cap_epochs;
    int64_t first_open; /* every epoch below it is done */
    ld_rstat *rstats;   /* replicas that were handed a shard of this dataset */
    int nrstats, cap_rstats;
    int64_t failures, requeued, late_refused, expired;
    double done_secs;   /* sum over accepted shards of report time - fetch time */
    int64_t done_timed; /* how many shards done_secs sums */
    int state;
    char why[768];
} ld_dataset;

typedef struct ld_release {
    double at;
    char why[128];
} ld_release;

typedef struct ld_replica {
    char *name;
    double last_seen;
    int64_t ndoing;       /* doing shards over all datasets */
    ld_release *releases; /* every release that re-queued shards, oldest first */
    int nreleases, cap_releases;
} ld_replica;

struct dt__ledger {
    dt__ledger_event_fn journal;
    void *ctx;
    ld_dataset **datasets;
    int ndatasets, cap_datasets;
    ld_replica *replicas;
    int nreplicas, cap_replicas;
    uint64_t next_lease;
    double lease_fixed, lease_floor; /* dt__ledger_set_leases */
    double wall_offset; /* wall time - the `now` timeline, for what is shown (dt__ledger_set_clock) */
};

/* ---- small helpers ---- */

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t n = *cap ? *cap * 2 : 4;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, (size_t)n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int grow_int(void **p, int *cap, int need, size_t elem) {
    int64_t c = *cap;
    if (grow(p, &c, need, elem)) return -1;
    *cap = (int)c;
    return 0;
}

static void emit(dt__ledger *l, json_t *ev) {
    if (!ev) return;
    if (l->journal)
        l->journal(l->ctx, ev);
    else
        json_decref(ev);
}

/* A JSON string for arbitrary bytes: control characters become spaces; when the bytes
 * are not valid UTF-8, every non-ASCII byte becomes '?'. At most 511 bytes are kept. */
static json_t *json_text(const char *s) {
    char buf[512];
    size_t n = 0;
    for (; s && s[n] && n < sizeof buf - 1; n++)
        buf[n] = ((unsigned char)s[n] < 0x20 || s[n] == 0x7f) ? ' ' : s[n];
    buf[n] = 0;
    json_t *j = json_string(buf);
    if (j) return j;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] >= 0x80) buf[i] = '?';
    return json_string(buf);
}

static int replica_name_ok(const char *s) {
    if (!s || !s[0]) return 0;
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= 127 || (unsigned char)s[n] <= 0x20 || (unsigned char)s[n] >= 0x7f) return 0;
    return 1;
}

static int find_replica(const dt__ledger *l, const char *name) {
    for (int i = 0; i < l->nreplicas; i++)
        if (!strcmp(l->replicas[i].name, name)) return i;
    return -1;
}

/* The replica's index, added when new; -1 when out of memory. */
static int get_replica(dt__ledger *l, const char *name) {
    int r = find_replica(l, name);
    if (r >= 0) return r;
    if (grow_int((void **)&l->replicas, &l->cap_replicas, l->nreplicas + 1, sizeof *l->replicas))
        return -1;
    char *dup = strdup(name);
    if (!dup) return -1;
    ld_replica *rp = &l->replicas[l->nreplicas];
    memset(rp, 0, sizeof *rp);
    rp->name = dup;
    return l->nreplicas++;
}

static ld_dataset *find_dataset(const dt__ledger *l, const char *name) {
    for (int i = 0; i < l->ndatasets; i++)
        if (!strcmp(l->datasets[i]->conf.name, name)) return l->datasets[i];
    return NULL;
}

static dt_err get_dataset(const dt__ledger *l, const char *name, ld_dataset **out) {
    if (!name) return dt_err_set(DT_ERR_ARG, "dataset: missing name");
    *out = find_dataset(l, name);
    if (!*out) return dt_err_set(DT_ERR_NOTFOUND, "dataset %.64s is not registered", name);
    return DT_OK;
}

static ld_rstat *find_rstat(const ld_dataset *d, int replica) {
    for (int i = 0; i < d->nrstats; i++)
        if (d->rstats[i].replica == replica) return &d->rstats[i];
    return NULL;
}

static ld_rstat *get_rstat(ld_dataset *d, int replica) {
    ld_rstat *found = find_rstat(d, replica);
    if (found) return found;
    if (grow_int((void **)&d->rstats, &d->cap_rstats, d->nrstats + 1, sizeof *d->rstats))
        return NULL;
    ld_rstat *s = &d->rstats[d->nrstats++];
    *s = (ld_rstat){.replica = replica};
    return s;
}

static int64_t shard_start(const ld_dataset *d, int64_t id) {
    return id * d->shard_size;
}

static int64_t shard_end(const ld_dataset *d, int64_t id) {
    int64_t s = id * d->shard_size;
    return d->conf.dataset_size - s > d->shard_size ? s + d->shard_size : d->conf.dataset_size;
}

/* ---- epochs ---- */

static void epoch_close(ld_epoch *e) {
    free(e->shards);
    free(e->perm);
    free(e->order);
    free(e->front);
    e->shards = NULL;
    e->perm = e->order = e->front = NULL;
}

/* Open epoch d->nopened: build its shard table and orders. */
static dt_err epoch_open(ld_dataset *d) {
    int64_t e = d->nopened;
    DT_ASSERT(e < d->conf.num_epochs);
    if (grow((void **)&d->epochs, &d->cap_epochs, e + 1, sizeof *d->epochs))
        return dt_err_set(DT_ERR_NOMEM, "dataset %s: opening epoch %" PRId64, d->conf.name, e);
    ld_epoch *ep = &d->epochs[e];
    memset(ep, 0, sizeof *ep);
    int64_t n = d->nshards;
    ep->shards = malloc((size_t)n * sizeof *ep->shards);
    ep->front = malloc((size_t)n * sizeof *ep->front);
    if (d->conf.shuffle) ep->perm = malloc((size_t)d->conf.dataset_size * sizeof *ep->perm);
    if (d->conf.shuffle_shards) ep->order = malloc((size_t)n * sizeof *ep->order);
    if (!ep->shards || !ep->front || (d->conf.shuffle && !ep->perm) ||
        (d->conf.shuffle_shards && !ep->order)) {
        epoch_close(ep);
        return dt_err_set(DT_ERR_NOMEM,
                          "dataset %s: opening epoch %" PRId64 " (%" PRId64 " shards, %" PRId64
                          " samples)",
                          d->conf.name, e, n, d->conf.dataset_size);
    }
    for (int64_t i = 0; i < n; i++)
        ep->shards[i] = (ld_shard){.holder = -1, .prev = -1};
    if (ep->perm) dt_epoch_order(ep->perm, d->conf.dataset_size, d->conf.seed, e, 1);
    if (ep->order) {
        for (int64_t i = 0; i < n; i++)
            ep->order[i] = i;
        dt_rng r;
        dt_rng_seed2(&r, d->conf.seed ^ LD_SHARD_ORDER_SALT, (uint64_t)e);
        dt_rng_shuffle(&r, ep->order, n);
    }
    d->nopened = e + 1;
    return DT_OK;
}

static int epoch_has_todo(const ld_dataset *d, const ld_epoch *ep) {
    return !ep->done && (ep->nfront > 0 || ep->next < d->nshards);
}

/* The next shard to hand out (without taking it), opening the next epoch when nothing
 * is todo in any open epoch. *e = -1 when there is none. */
static dt_err pick(ld_dataset *d, int64_t *e, int64_t *id) {
    *e = *id = -1;
    int64_t k = d->first_open;
    for (; k < d->nopened; k++)
        if (epoch_has_todo(d, &d->epochs[k])) break;
    if (k == d->nopened) {
        if (d->nopened == d->conf.num_epochs) return DT_OK;
        dt_err err = epoch_open(d);
        if (err) return err;
    }
    ld_epoch *ep = &d->epochs[k];
    *e = k;
    if (ep->nfront > 0)
        *id = ep->front[ep->nfront - 1];
    else
        *id = ep->order ? ep->order[ep->next] : ep->next;
    return DT_OK;
}

static void requeue(ld_dataset *d, ld_epoch *ep, int64_t id, int why, double now) {
    ld_shard *s = &ep->shards[id];
    DT_ASSERT(s->state == LD_DOING);
    s->state = LD_TODO;
    s->prev = s->holder;
    s->requeued_at = now;
    s->requeue_why = (uint8_t)why;
    ep->front[ep->nfront++] = id;
    DT_ASSERT(ep->nfront <= d->nshards);
    d->requeued++;
}

/* ---- register ---- */

void dt__dataset_conf_init(dt__dataset_conf *c) {
    memset(c, 0, sizeof *c);
    c->dataset_size = 1;
    c->batch_size = 1;
    c->num_epochs = 1;
    c->num_minibatches_per_shard = 1;
    c->max_failures = 3;
}

static dt_err conf_check(const dt__dataset_conf *c, int64_t *shard_size, int64_t *nshards) {
    const char *nm = c->name;
    size_t len = strnlen(nm, sizeof c->name);
    if (len == 0 || len == sizeof c->name)
        return dt_err_set(DT_ERR_ARG, "name: expected 1 to %zu characters", sizeof c->name - 1);
    for (size_t i = 0; i < len; i++) {
        char ch = nm[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return dt_err_set(DT_ERR_ARG, "name: expected letters, digits, '_', '-' or '.'");
    }
    /* The name is a segment of the routes' paths, where "." and ".." mean something else. */
    if (!strcmp(nm, ".") || !strcmp(nm, ".."))
        return dt_err_set(DT_ERR_ARG, "name: '%s' is not a dataset name", nm);
    const struct {
        const char *field;
        int64_t v;
    } pos[] = {{"dataset_size", c->dataset_size},
               {"batch_size", c->batch_size},
               {"num_epochs", c->num_epochs},
               {"num_minibatches_per_shard", c->num_minibatches_per_shard}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v < 1)
            return dt_err_set(DT_ERR_ARG, "dataset %s: %s: expected >= 1, got %" PRId64, nm,
                              pos[i].field, pos[i].v);
    if (c->max_failures < 0)
        return dt_err_set(DT_ERR_ARG, "dataset %s: max_failures: expected >= 0, got %d", nm,
                          c->max_failures);
    /* A replica's samples_done sums over every epoch: it must fit in an int64. */
    if (c->dataset_size > INT64_MAX / c->num_epochs)
        return dt_err_set(DT_ERR_ARG,
                          "dataset %s: num_epochs: %" PRId64 " epochs of %" PRId64
                          " samples is more than %" PRId64 " samples in all",
                          nm, c->num_epochs, c->dataset_size, INT64_MAX);
    if (c->shuffle && c->dataset_size > DT__LEDGER_MAX_SHUFFLE)
        return dt_err_set(DT_ERR_ARG,
                          "dataset %s: dataset_size: %" PRId64 " is more than %" PRId64
                          " samples, the most that shuffle permutes",
                          nm, c->dataset_size, (int64_t)DT__LEDGER_MAX_SHUFFLE);
    int64_t s = c->batch_size > c->dataset_size / c->num_minibatches_per_shard
                    ? c->dataset_size
                    : c->batch_size * c->num_minibatches_per_shard;
    int64_t n = c->dataset_size / s + (c->dataset_size % s != 0);
    if (n > DT__LEDGER_MAX_SHARDS)
        return dt_err_set(DT_ERR_ARG,
                          "dataset %s: num_minibatches_per_shard: batch_size %" PRId64
                          " * num_minibatches_per_shard %" PRId64 " cuts %" PRId64
                          " samples into %" PRId64 " shards per epoch, more than %d",
                          nm, c->batch_size, c->num_minibatches_per_shard, c->dataset_size, n,
                          DT__LEDGER_MAX_SHARDS);
    *shard_size = s;
    *nshards = n;
    return DT_OK;
}

static dt_err conf_same(const dt__dataset_conf *a, const dt__dataset_conf *b) {
#define LD_SAME(f, fmt, cast)                                                                      \
    if (a->f != b->f)                                                                              \
        return dt_err_set(DT_ERR_STATE,                                                            \
                          "dataset %s is registered with " #f " %" fmt ", not %" fmt, a->name,     \
                          (cast)a->f, (cast)b->f);
    LD_SAME(dataset_size, PRId64, int64_t)
    LD_SAME(batch_size, PRId64, int64_t)
    LD_SAME(num_epochs, PRId64, int64_t)
    LD_SAME(num_minibatches_per_shard, PRId64, int64_t)
    LD_SAME(shuffle, "d", int)
    LD_SAME(shuffle_shards, "d", int)
    LD_SAME(seed, PRIu64, uint64_t)
    LD_SAME(max_failures, "d", int)
#undef LD_SAME
    return DT_OK;
}

static json_t *register_event(const dt__dataset_conf *c) {
    char seed[24];
    snprintf(seed, sizeof seed, "%" PRIu64, c->seed);
    return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:b, s:s, s:i}", "ev", "shard.register",
                     "dataset", c->name, "dataset_size", (json_int_t)c->dataset_size, "batch_size",
                     (json_int_t)c->batch_size, "num_epochs", (json_int_t)c->num_epochs,
                     "num_minibatches_per_shard", (json_int_t)c->num_minibatches_per_shard,
                     "shuffle", c->shuffle != 0, "shuffle_shards", c->shuffle_shards != 0, "seed",
                     seed, "max_failures", c->max_failures);
}

static dt_err do_register(dt__ledger *l, const dt__dataset_conf *conf, int journal) {
    if (!conf) return dt_err_set(DT_ERR_ARG, "dataset conf: missing");
    int64_t shard_size = 0, nshards = 0;
    dt_err err = conf_check(conf, &shard_size, &nshards);
    if (err) return err;
    dt__dataset_conf c = *conf;
    c.shuffle = c.shuffle != 0;
    c.shuffle_shards = c.shuffle_shards != 0;
    memset(c.name + strlen(c.name), 0, sizeof c.name - strlen(c.name));
    ld_dataset *old = find_dataset(l, c.name);
    if (old) return conf_same(&old->conf, &c);
    if (grow_int((void **)&l->datasets, &l->cap_datasets, l->ndatasets + 1, sizeof *l->datasets))
        return dt_err_set(DT_ERR_NOMEM, "registering dataset %s", c.name);
    ld_dataset *d = calloc(1, sizeof *d);
    json_t *ev = journal && l->journal ? register_event(&c) : NULL;
    if (!d || (journal && l->journal && !ev)) {
        free(d);
        json_decref(ev);
        return dt_err_set(DT_ERR_NOMEM, "registering dataset %s", c.name);
    }
    d->conf = c;
    d->shard_size = shard_size;
    d->nshards = nshards;
    l->datasets[l->ndatasets++] = d;
    emit(l, ev);
    return DT_OK;
}

dt_err dt__ledger_register(dt__ledger *l, const dt__dataset_conf *conf) {
    return do_register(l, conf, 1);
}

/* ---- fetch ---- */

/* Fill shard with shard id of epoch e of d. */
static void shard_out(const ld_dataset *d, int64_t e, int64_t id, uint64_t lease, dt__shard *shard) {
    shard->epoch = e;
    shard->id = id;
    shard->start = shard_start(d, id);
    shard->end = shard_end(d, id);
    shard->lease = lease;
    shard->indices = d->epochs[e].perm ? d->epochs[e].perm + shard->start : NULL;
}

/* A retried fetch (the request id of r's last) whose shards r still holds (some may have
 * been re-queued since): hand those again, in their order. Returns how many. */
static int fetch_again(const ld_dataset *d, const ld_rstat *rs, int r, uint64_t request,
                       dt__shard *shards) {
    if (!rs || !request || rs->fetch_request != request) return 0;
    int n = 0;
    for (int i = 0; i < rs->nfetch; i++) {
        const ld_last *f = &rs->fetch[i];
        if (f->epoch >= d->nopened || d->epochs[f->epoch].done) continue;
        const ld_shard *s = &d->epochs[f->epoch].shards[f->id];
        if (s->state != LD_DOING || s->holder != r || s->lease != f->lease) continue;
        shard_out(d, f->epoch, f->id, f->lease, &shards[n++]);
    }
    return n;
}

/* Hand the todo shard (e, id) of d to replica r as part `part` of the request: the ledger's
 * state, the replica's last fetch and the journal. DT_ERR_NOMEM only, before any change. */
static dt_err take(dt__ledger *l, ld_dataset *d, ld_rstat *rs, int r, int64_t e, int64_t id,
                   uint64_t request, int part, double now, dt__shard *shard, int journal) {
    uint64_t lease = l->next_lease;
    json_t *ev = NULL;
    if (journal && l->journal) {
        const char *replica = l->replicas[r].name;
        ev = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f}", "ev", "shard.fetch", "dataset",
                       d->conf.name, "replica", replica, "epoch", (json_int_t)e, "id",
                       (json_int_t)id, "lease", (json_int_t)lease, "request",
                       (json_int_t)request, "time", now);
        if (ev && part > 0 && json_object_set_new(ev, "part", json_integer(part))) {
            json_decref(ev);
            ev = NULL;
        }
        if (!ev) return dt_err_set(DT_ERR_NOMEM, "fetch from %s by %s", d->conf.name, replica);
    }
    ld_epoch *ep = &d->epochs[e];
    if (ep->nfront > 0)
        ep->nfront--;
    else
        ep->next++;
    ld_shard *s = &ep->shards[id];
    s->state = LD_DOING;
    s->holder = r;
    s->lease = lease;
    s->since = now;
    l->next_lease++;
    l->replicas[r].ndoing++;
    if (part == 0) {
        rs->fetch_request = request;
        rs->nfetch = 0;
    }
    if (rs->nfetch < DT__LEDGER_MAX_BATCH)
        rs->fetch[rs->nfetch++] = (ld_last){.epoch = e, .id = id, .lease = lease};
    shard_out(d, e, id, lease, shard);
    emit(l, ev);
    return DT_OK;
}

/* part < 0: a live fetch of up to max shards (a retry gets its shards again); part >= 0:
 * the replay of one shard.fetch event, the part-th shard of its request (max 1). */
static dt_err do_fetch(dt__ledger *l, const char *name, const char *replica, uint64_t request,
                       double now, int max, int part, dt__fetch_status *status,
                       dt__shard *shards, int *n, int journal) {
    *n = 0;
    if (!isfinite(now)) return dt_err_set(DT_ERR_ARG, "now: expected a finite time");
    if (max < 1 || max > DT__LEDGER_MAX_BATCH)
        return dt_err_set(DT_ERR_ARG, "count: expected 1..%d shards", DT__LEDGER_MAX_BATCH);
    ld_dataset *d;
    dt_err err = get_dataset(l, name, &d);
    if (err) return err;
    if (!replica_name_ok(replica))
        return dt_err_set(DT_ERR_ARG, "replica: expected 1 to 126 printable characters "
                                      "without spaces");
    int r = get_replica(l, replica);
    if (r < 0) return dt_err_set(DT_ERR_NOMEM, "fetch from %s: adding replica %s", name, replica);
    l->replicas[r].last_seen = now;
    if (d->state == LD_FAILED)
        return dt_err_set(DT_ERR_STATE, "dataset %s has failed: %s", name, d->why);
    memset(shards, 0, (size_t)max * sizeof *shards);
    request &= INT64_MAX; /* journaled as a JSON (signed) integer */
    if (part < 0 && (*n = fetch_again(d, find_rstat(d, r), r, request, shards)) > 0) {
        *status = DT__FETCH_SHARD;
        return DT_OK;
    }
    if (part > 0) {
        /* a batch's later shard: its request must be the replica's last */
        const ld_rstat *rs = find_rstat(d, r);
        if (!rs || rs->fetch_request != request || rs->nfetch != part)
            return dt_err_set(DT_ERR_STATE,
                              "part %d of fetch request %" PRIu64 " of %s: the replica's last "
                              "fetch is not that request's part %d",
                              part, request, replica, part - 1);
    }
    *status = d->state == LD_DS_DONE ? DT__FETCH_END : DT__FETCH_WAIT;
    if (d->state == LD_DS_DONE) return DT_OK;
    ld_rstat *rs = NULL; /* made at the first shard: a replica that waits is not listed */
    for (int i = 0; i < max; i++) {
        int64_t e, id;
        if ((err = pick(d, &e, &id))) break;
        if (e < 0) break;
        if (!rs && !(rs = get_rstat(d, r))) {
            err = dt_err_set(DT_ERR_NOMEM, "fetch from %s by %s", name, replica);
            break;
        }
        if ((err = take(l, d, rs, r, e, id, request, part < 0 ? i : part, now, &shards[i],
                        journal)))
            break;
        ++*n;
    }
    /* shards already taken stay taken (and journaled): the answer hands them out */
    if (*n > 0) *status = DT__FETCH_SHARD;
    return *n > 0 ? DT_OK : err;
}

dt_err dt__ledger_fetch(dt__ledger *l, const char *name, const char *replica, uint64_t request,
                        double now, dt__fetch_status *status, dt__shard *shard) {
    int n;
    return do_fetch(l, name, replica, request, now, 1, -1, status, shard, &n, 1);
}

dt_err dt__ledger_fetch_many(dt__ledger *l, const char *name, const char *replica,
                             uint64_t request, double now, int max, dt__fetch_status *status,
                             dt__shard *shards, int *n) {
    return do_fetch(l, name, replica, request, now, max, -1, status, shards, n, 1);
}

/* ---- report ---- */

/* Explain why replica r (maybe -1) does not hold shard s under lease. */
static dt_err refuse(const dt__ledger *l, ld_dataset *d, const char *replica, int64_t e, int64_t id,
                     uint64_t lease, const ld_shard *s, int r) {
    d->late_refused++;
    char hist[512] = "", cur[300] = "";
    const char *prev = s->prev >= 0 ? l->replicas[s->prev].name : "?";
    /* The release of prev that re-queued s (the same time); none when it was not recorded. */
    const ld_release *rel = NULL;
    if (s->requeue_why == LD_REQ_RELEASED && s->prev >= 0) {
        const ld_replica *pr = &l->replicas[s->prev];
        for (int i = pr->nreleases - 1; i >= 0 && !rel; i--)
            if (pr->releases[i].at == s->requeued_at) rel = &pr->releases[i];
    }
    if (s->requeue_why == LD_REQ_FAILED)
        snprintf(hist, sizeof hist, "it was re-queued at %.3f after a failed report by %s, ",
                 s->requeued_at + l->wall_offset, prev);
    else if (s->requeue_why == LD_REQ_EXPIRED)
        snprintf(hist, sizeof hist,
                 "it was re-queued at %.3f when its lease held by %s passed its deadline "
                 "without a report, ",
                 s->requeued_at + l->wall_offset, prev);
    else if (s->requeue_why == LD_REQ_RELEASED)
        snprintf(hist, sizeof hist, "it was re-queued at %.3f when %s was released%s%s%s, ",
                 s->requeued_at + l->wall_offset, prev, rel ? " (" : "", rel ? rel->why : "",
                 rel ? ")" : "");
    const char *holder = s->holder >= 0 ? l->replicas[s->holder].name : "?";
    if (s->state == LD_DONE)
        snprintf(cur, sizeof cur, "done by %s", holder);
    else if (s->state == LD_DOING && s->holder == r)
        snprintf(cur, sizeof cur, "held by %s under lease %" PRIu64, holder, s->lease);
    else if (s->state == LD_DOING)
        snprintf(cur, sizeof cur, "held by %s", holder);
    else
        snprintf(cur, sizeof cur, "%s",
                 s->holder >= 0 ? "waiting to be handed out again" : "not handed out yet");
    return dt_err_set(DT_ERR_STATE,
                      "%s does not hold shard %" PRId64 " of epoch %" PRId64 " of %s under lease "
                      "%" PRIu64 ": %s%s %s; late report refused",
                      replica, id, e, d->conf.name, lease, hist, hist[0] ? "now" : "it is", cur);
}

static dt_err do_report(dt__ledger *l, const char *name, const char *replica, int64_t e, int64_t id,
                        uint64_t lease, int ok, const char *message, double now, int journal) {
    if (!isfinite(now)) return dt_err_set(DT_ERR_ARG, "now: expected a finite time");
    ld_dataset *d;
    dt_err err = get_dataset(l, name, &d);
    if (err) return err;
    if (!replica_name_ok(replica))
        return dt_err_set(DT_ERR_ARG, "replica: expected 1 to 126 printable characters "
                                      "without spaces");
    if (d->state == LD_FAILED)
        return dt_err_set(DT_ERR_STATE,
                          "report of %s on shard %" PRId64 " of epoch %" PRId64
                          " refused: dataset %s has failed: %s",
                          replica, id, e, name, d->why);
    if (e < 0 || e >= d->conf.num_epochs)
        return dt_err_set(DT_ERR_ARG, "report of %s: epoch %" PRId64 " of %s: expected 0..%" PRId64,
                          replica, e, name, d->conf.num_epochs - 1);
    if (id < 0 || id >= d->nshards)
        return dt_err_set(DT_ERR_ARG,
                          "report of %s: shard id %" PRId64 " of %s: expected 0..%" PRId64, replica,
                          id, name, d->nshards - 1);
    int r = find_replica(l, replica);
    const ld_rstat *seen = r >= 0 ? find_rstat(d, r) : NULL;
    if (seen) {
        /* A report already accepted (a retry whose first answer was lost): counted once. */
        for (int i = 0; i < seen->nreport; i++) {
            const ld_last *last = &seen->report[i];
            if (last->epoch == e && last->id == id && last->lease == lease &&
                last->ok == (ok != 0)) {
                l->replicas[r].last_seen = now;
                return DT_OK;
            }
        }
    }
    if (e >= d->nopened || d->epochs[e].done) {
        d->late_refused++;
        return dt_err_set(DT_ERR_STATE,
                          "%s does not hold shard %" PRId64 " of epoch %" PRId64
                          " of %s under lease %" PRIu64 ": %s; late report refused",
                          replica, id, e, name, lease,
                          e >= d->nopened ? "that epoch has not begun"
                                          : "that epoch is done (every shard of it was reported)");
    }
    ld_epoch *ep = &d->epochs[e];
    ld_shard *s = &ep->shards[id];
    if (r < 0 || s->state != LD_DOING || s->holder != r || s->lease != lease)
        return refuse(l, d, replica, e, id, lease, s, r);
    ld_rstat *rs = get_rstat(d, r);
    if (!rs) return dt_err_set(DT_ERR_NOMEM, "report of %s on %s", replica, name);
    json_t *ev = NULL;
    if (journal && l->journal) {
        json_t *msg = json_text(message ? message : "");
        ev = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:o, s:f}", "ev", "shard.report",
                       "dataset", name, "replica", replica, "epoch", (json_int_t)e, "id",
                       (json_int_t)id, "lease", (json_int_t)lease, "ok", ok != 0, "message", msg,
                       "time", now);
        if (!ev) return dt_err_set(DT_ERR_NOMEM, "report of %s on %s", replica, name);
    }
    l->replicas[r].last_seen = now;
    l->replicas[r].ndoing--;
    rs->report[rs->report_next] = (ld_last){.epoch = e, .id = id, .lease = lease, .ok = ok != 0};
    rs->report_next = (rs->report_next + 1) % DT__LEDGER_MAX_BATCH;
    if (rs->nreport < DT__LEDGER_MAX_BATCH) rs->nreport++;
    int64_t len = shard_end(d, id) - shard_start(d, id);
    if (ok) {
        if (now >= s->since) {
            d->done_secs += now - s->since;
            d->done_timed++;
        }
        s->state = LD_DONE;
        ep->shards_done++;
        ep->samples_done += len;
        rs->shards_done++;
        rs->samples_done += len;
        if (ep->shards_done == d->nshards) {
            ep->done = 1;
            epoch_close(ep);
            while (d->first_open < d->nopened && d->epochs[d->first_open].done)
                d->first_open++;
            if (d->first_open == d->conf.num_epochs) d->state = LD_DS_DONE;
        }
    } else {
        s->failures++;
        d->failures++;
        requeue(d, ep, id, LD_REQ_FAILED, now);
        if (s->failures > d->conf.max_failures) {
            d->state = LD_FAILED;
            char m[384];
            snprintf(m, sizeof m, "%s", message ? message : "");
            snprintf(d->why, sizeof d->why,
                     "shard %" PRId64 " of epoch %" PRId64 " of dataset %s failed %d times "
                     "(max_failures %d); last by %s: %s",
                     id, e, name, s->failures, d->conf.max_failures, replica, m);
        }
    }
    emit(l, ev);
    return DT_OK;
}

dt_err dt__ledger_report(dt__ledger *l, const char *name, const char *replica, int64_t epoch,
                         int64_t id, uint64_t lease, int ok, const char *message, double now) {
    return do_report(l, name, replica, epoch, id, lease, ok, message, now, 1);
}

/* ---- replicas ---- */

void dt__ledger_heartbeat(dt__ledger *l, const char *replica, double now) {
    if (!replica_name_ok(replica)) return;
    int r = get_replica(l, replica);
    if (r >= 0) l->replicas[r].last_seen = now;
}

static int do_release(dt__ledger *l, int r, const char *why, double now, int journal) {
    ld_replica *rp = &l->replicas[r];
    if (rp->ndoing == 0) return 0;
    int count = 0;
    for (int i = 0; i < l->ndatasets; i++) {
        ld_dataset *d = l->datasets[i];
        for (int64_t e = d->first_open; e < d->nopened; e++) {
            ld_epoch *ep = &d->epochs[e];
            if (ep->done) continue;
            for (int64_t id = d->nshards - 1; id >= 0; id--) {
                ld_shard *s = &ep->shards[id];
                if (s->state != LD_DOING || s->holder != r) continue;
                requeue(d, ep, id, LD_REQ_RELEASED, now);
                count++;
            }
        }
    }
    DT_ASSERT(count == rp->ndoing);
    rp->ndoing = 0;
    /* Kept for the refusals of late reports; out of memory, they name no reason. */
    if (!grow_int((void **)&rp->releases, &rp->cap_releases, rp->nreleases + 1,
                  sizeof *rp->releases)) {
        ld_release *rel = &rp->releases[rp->nreleases++];
        rel->at = now;
        snprintf(rel->why, sizeof rel->why, "%s", why ? why : "");
    }
    if (journal && l->journal) {
        json_t *w = json_text(why ? why : "");
        /* Out of memory: the shards are re-queued all the same (the replica is gone), but
         * the journal lacks the event, and its replay then refuses the next fetch of one
         * of these shards (DT_ERR_FORMAT): a lost event, like a failed journal write, makes
         * the journal unreplayable. */
        emit(l, json_pack("{s:s, s:s, s:o, s:f, s:i}", "ev", "shard.release", "replica", rp->name,
                          "why", w, "time", now, "shards", count));
    }
    return count;
}

int dt__ledger_release(dt__ledger *l, const char *replica, const char *why, double now) {
    if (!replica) return 0;
    int r = find_replica(l, replica);
    return r < 0 ? 0 : do_release(l, r, why, now, 1);
}

int dt__ledger_expire(dt__ledger *l, double now, double timeout) {
    int count = 0;
    for (int r = 0; r < l->nreplicas; r++) {
        ld_replica *rp = &l->replicas[r];
        if (rp->ndoing == 0 || !(now - rp->last_seen > timeout)) continue;
        char why[128];
        snprintf(why, sizeof why, "no heartbeat for %.1f s (timeout %.1f s)", now - rp->last_seen,
                 timeout);
        count += do_release(l, r, why, now, 1);
    }
    return count;
}

/* The lease deadline of d's shards now (see the design notes). */
static double lease_deadline(const ld_dataset *d, double fixed, double floor_s) {
    if (fixed > 0) return fixed;
    if (floor_s <= 0) return INFINITY; /* no deadlines */
    double t = d->done_timed >= 3 ? 10.0 * d->done_secs / (double)d->done_timed : 0;
    return t > floor_s ? t : floor_s;
}

/* Re-queue shard (e, id) of d, held past its deadline. */
static void expire_one(dt__ledger *l, ld_dataset *d, int64_t e, int64_t id, double deadline,
                       double now, int journal) {
    ld_epoch *ep = &d->epochs[e];
    ld_shard *s = &ep->shards[id];
    int r = s->holder;
    uint64_t lease = s->lease;
    double held = now - s->since;
    requeue(d, ep, id, LD_REQ_EXPIRED, now);
    if (s->expiries < 255) s->expiries++;
    l->replicas[r].ndoing--;
    d->expired++;
    if (journal && l->journal)
        emit(l, json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:f, s:f, s:f}", "ev", "shard.expire",
                          "dataset", d->conf.name, "replica", l->replicas[r].name, "epoch",
                          (json_int_t)e, "id", (json_int_t)id, "lease", (json_int_t)lease, "held",
                          held, "deadline", deadline, "time", now));
}

void dt__ledger_set_clock(dt__ledger *l, double wall_offset) { l->wall_offset = wall_offset; }

void dt__ledger_resume(dt__ledger *l, double wall, double now) {
    double delta = now - wall;
    l->wall_offset = -delta;
    for (int r = 0; r < l->nreplicas; r++) {
        l->replicas[r].last_seen += delta;
        for (int k = 0; k < l->replicas[r].nreleases; k++) l->replicas[r].releases[k].at += delta;
    }
    for (int i = 0; i < l->ndatasets; i++) {
        ld_dataset *d = l->datasets[i];
        for (int64_t e = d->first_open; e < d->nopened; e++) {
            ld_epoch *ep = &d->epochs[e];
            if (ep->done) continue;
            for (int64_t id = 0; id < d->nshards; id++) {
                ld_shard *s = &ep->shards[id];
                s->requeued_at += delta;
                /* a lease in flight counts its deadline from now: its holder could not
                 * report while no master ran (replay does not decide deadlines) */
                if (s->state == LD_DOING) s->since = now;
            }
        }
    }
}

void dt__ledger_set_leases(dt__ledger *l, double fixed, double floor_s) {
    l->lease_fixed = fixed > 0 ? fixed : 0;
    l->lease_floor = floor_s > 0 ? floor_s : 0;
}

int dt__ledger_expire_leases(dt__ledger *l, double now) {
    int count = 0;
    for (int i = 0; i < l->ndatasets; i++) {
        ld_dataset *d = l->datasets[i];
        if (d->state != LD_RUNNING) continue;
        double deadline = lease_deadline(d, l->lease_fixed, l->lease_floor);
        for (int64_t e = d->first_open; e < d->nopened; e++) {
            ld_epoch *ep = &d->epochs[e];
            if (ep->done) continue;
            for (int64_t id = 0; id < d->nshards; id++) {
                const ld_shard *s = &ep->shards[id];
                double mine = deadline * (double)(1u << (s->expiries < 16 ? s->expiries : 16));
                if (s->state != LD_DOING || !(now - s->since > mine)) continue;
                expire_one(l, d, e, id, mine, now, 1);
                count++;
            }
        }
    }
    return count;
}

/* ---- state ---- */

int dt__ledger_failed(const dt__ledger *l, char *why, size_t len) {
    for (int i = 0; i < l->ndatasets; i++) {
        if (l->datasets[i]->state != LD_FAILED) continue;
        if (why && len) snprintf(why, len, "%s", l->datasets[i]->why);
        return 1;
    }
    return 0;
}

int dt__ledger_all_done(const dt__ledger *l) {
    for (int i = 0; i < l->ndatasets; i++)
        if (l->datasets[i]->state != LD_DS_DONE) return 0;
    return l->ndatasets > 0;
}

static json_t *dataset_progress(const dt__ledger *l, const ld_dataset *d) {
    static const char *const states[] = {"running", "done", "failed"};
    json_t *epochs = json_array(), *reps = json_object();
    json_t *j =
        json_pack("{s:I, s:I, s:I, s:I, s:s, s:o, s:o, s:I, s:I, s:I}", "dataset_size",
                  (json_int_t)d->conf.dataset_size, "batch_size", (json_int_t)d->conf.batch_size,
                  "num_epochs", (json_int_t)d->conf.num_epochs, "shards_per_epoch",
                  (json_int_t)d->nshards, "state", states[d->state], "epochs", epochs, "replicas",
                  reps, "failures", (json_int_t)d->failures, "requeued", (json_int_t)d->requeued,
                  "late_reports_refused", (json_int_t)d->late_refused);
    if (!j) return NULL;
    if (d->state == LD_FAILED) json_object_set_new(j, "reason", json_text(d->why));
    /* Shards in flight (the first 64 found, oldest epoch first) and the lease deadline. */
    json_t *flying = json_array();
    int64_t nflying = 0;
    for (int64_t e = d->first_open; e < d->nopened && flying; e++) {
        const ld_epoch *ep = &d->epochs[e];
        if (ep->done) continue;
        for (int64_t id = 0; id < d->nshards; id++) {
            const ld_shard *s = &ep->shards[id];
            if (s->state != LD_DOING) continue;
            if (nflying++ < 64)
                json_array_append_new(flying,
                                      json_pack("{s:s, s:I, s:I, s:I, s:f}", "replica",
                                                l->replicas[s->holder].name, "epoch", (json_int_t)e,
                                                "id", (json_int_t)id, "lease", (json_int_t)s->lease,
                                                "since", s->since + l->wall_offset));
        }
    }
    json_object_set_new(j, "in_flight", json_integer((json_int_t)nflying));
    json_object_set_new(j, "in_flight_shards", flying ? flying : json_array());
    double deadline = lease_deadline(d, l->lease_fixed, l->lease_floor);
    json_object_set_new(j, "lease_deadline", isfinite(deadline) ? json_real(deadline) : json_null());
    json_object_set_new(j, "leases_expired", json_integer((json_int_t)d->expired));
    for (int64_t e = 0; e < d->nopened; e++) {
        const ld_epoch *ep = &d->epochs[e];
        json_array_append_new(epochs, json_pack("{s:I, s:I, s:I, s:I, s:I}", "epoch", (json_int_t)e,
                                                "shards_done", (json_int_t)ep->shards_done,
                                                "shards_total", (json_int_t)d->nshards,
                                                "samples_done", (json_int_t)ep->samples_done,
                                                "samples_total", (json_int_t)d->conf.dataset_size));
    }
    for (int i = 0; i < d->nrstats; i++) {
        const ld_rstat *s = &d->rstats[i];
        json_object_set_new(reps, l->replicas[s->replica].name,
                            json_pack("{s:I, s:I}", "shards_done", (json_int_t)s->shards_done,
                                      "samples_done", (json_int_t)s->samples_done));
    }
    return j;
}

json_t *dt__ledger_progress(const dt__ledger *l) {
    json_t *ds = json_object();
    for (int i = 0; i < l->ndatasets; i++)
        json_object_set_new(ds, l->datasets[i]->conf.name, dataset_progress(l, l->datasets[i]));
    return json_pack("{s:o}", "datasets", ds);
}

/* ---- init / free ---- */

dt_err dt__ledger_init(dt__ledger **out, dt__ledger_event_fn journal, void *ctx) {
    *out = NULL;
    dt__ledger *l = calloc(1, sizeof *l);
    if (!l) return dt_err_set(DT_ERR_NOMEM, "allocating the shard ledger");
    l->journal = journal;
    l->ctx = ctx;
    l->next_lease = 1;
    *out = l;
    return DT_OK;
}

void dt__ledger_free(dt__ledger *l) {
    if (!l) return;
    for (int i = 0; i < l->ndatasets; i++) {
        ld_dataset *d = l->datasets[i];
        for (int64_t e = 0; e < d->nopened; e++)
            epoch_close(&d->epochs[e]);
        free(d->epochs);
        free(d->rstats);
        free(d);
    }
    free(l->datasets);
    for (int i = 0; i < l->nreplicas; i++) {
        free(l->replicas[i].name);
        free(l->replicas[i].releases);
    }
    free(l->replicas);
    free(l);
}

/* ---- replay ---- */

static dt_err ev_bad(const char *ev, const char *field, const char *want) {
    return dt_err_set(DT_ERR_FORMAT, "ledger event %s: field %s: expected %s", ev, field, want);
}

static dt_err ev_str(const json_t *j, const char *ev, const char *field, const char **out) {
    json_t *v = json_object_get(j, field);
    if (!json_is_string(v)) return ev_bad(ev, field, "a string");
    *out = json_string_value(v);
    return DT_OK;
}

static dt_err ev_int(const json_t *j, const char *ev, const char *field, int64_t min,
                     int64_t *out) {
    json_t *v = json_object_get(j, field);
    if (!json_is_integer(v) || json_integer_value(v) < min) {
        char want[64];
        snprintf(want, sizeof want, "an integer >= %" PRId64, min);
        return ev_bad(ev, field, want);
    }
    *out = json_integer_value(v);
    return DT_OK;
}

static dt_err ev_bool(const json_t *j, const char *ev, const char *field, int *out) {
    json_t *v = json_object_get(j, field);
    if (!json_is_boolean(v)) return ev_bad(ev, field, "true or false");
    *out = json_is_true(v);
    return DT_OK;
}

static dt_err ev_time(const json_t *j, const char *ev, double *out) {
    json_t *v = json_object_get(j, "time");
    if (!json_is_number(v)) return ev_bad(ev, "time", "a number");
    *out = json_number_value(v);
    return DT_OK;
}

static dt_err replay_register(dt__ledger *l, const json_t *j, const char *ev) {
    dt__dataset_conf c;
    dt__dataset_conf_init(&c);
    const char *name = "", *seed = "";
    int64_t mf = 0;
    dt_err err;
    if ((err = ev_str(j, ev, "dataset", &name)) ||
        (err = ev_int(j, ev, "dataset_size", 1, &c.dataset_size)) ||
        (err = ev_int(j, ev, "batch_size", 1, &c.batch_size)) ||
        (err = ev_int(j, ev, "num_epochs", 1, &c.num_epochs)) ||
        (err = ev_int(j, ev, "num_minibatches_per_shard", 1, &c.num_minibatches_per_shard)) ||
        (err = ev_bool(j, ev, "shuffle", &c.shuffle)) ||
        (err = ev_bool(j, ev, "shuffle_shards", &c.shuffle_shards)) ||
        (err = ev_str(j, ev, "seed", &seed)) || (err = ev_int(j, ev, "max_failures", 0, &mf)))
        return err;
    if (strlen(name) >= sizeof c.name) return ev_bad(ev, "dataset", "a name of at most 63 bytes");
    if (mf > INT32_MAX) return ev_bad(ev, "max_failures", "an int");
    c.max_failures = (int)mf;
    char *end;
    if (!seed[0] || seed[0] == '-' || (c.seed = strtoull(seed, &end, 10), *end))
        return ev_bad(ev, "seed", "a decimal unsigned integer");
    strcpy(c.name, name);
    err = do_register(l, &c, 0);
    return err ? dt_err_wrap(DT_ERR_FORMAT, "ledger event %s", ev) : DT_OK;
}

static dt_err replay_fetch(dt__ledger *l, const json_t *j, const char *ev) {
    const char *name = "", *replica = "";
    int64_t e = 0, id = 0, lease = 0;
    double now = 0;
    dt_err err;
    if ((err = ev_str(j, ev, "dataset", &name)) || (err = ev_str(j, ev, "replica", &replica)) ||
        (err = ev_int(j, ev, "epoch", 0, &e)) || (err = ev_int(j, ev, "id", 0, &id)) ||
        (err = ev_int(j, ev, "lease", 1, &lease)) || (err = ev_time(j, ev, &now)))
        return err;
    int64_t request = 0, part = 0;
    if (json_object_get(j, "request") && (err = ev_int(j, ev, "request", 0, &request))) return err;
    if (json_object_get(j, "part") && (err = ev_int(j, ev, "part", 0, &part))) return err;
    if (part >= DT__LEDGER_MAX_BATCH) return ev_bad(ev, "part", "an integer below the batch limit");
    dt__fetch_status st = DT__FETCH_WAIT;
    dt__shard sh;
    int n;
    /* part 0 may be a retry in the live call only when its shards were no longer held, so
     * it never is in replay: take the next shard as that fetch did */
    if ((err = do_fetch(l, name, replica, (uint64_t)request, now, 1, (int)part, &st, &sh, &n, 0)))
        return dt_err_wrap(DT_ERR_FORMAT, "ledger event %s", ev);
    if (st != DT__FETCH_SHARD || sh.epoch != e || sh.id != id || sh.lease != (uint64_t)lease)
        return dt_err_set(DT_ERR_FORMAT,
                          "ledger event %s: %s was handed shard %" PRId64 " of epoch %" PRId64
                          " of %s under lease %" PRId64 ", but the replayed ledger hands out %s",
                          ev, replica, id, e, name, lease,
                          st == DT__FETCH_SHARD ? "another shard" : "none");
    return DT_OK;
}

static dt_err replay_report(dt__ledger *l, const json_t *j, const char *ev) {
    const char *name = "", *replica = "", *message = "";
    int64_t e = 0, id = 0, lease = 0;
    int ok = 0;
    double now = 0;
    dt_err err;
    if ((err = ev_str(j, ev, "dataset", &name)) || (err = ev_str(j, ev, "replica", &replica)) ||
        (err = ev_int(j, ev, "epoch", 0, &e)) || (err = ev_int(j, ev, "id", 0, &id)) ||
        (err = ev_int(j, ev, "lease", 1, &lease)) || (err = ev_bool(j, ev, "ok", &ok)) ||
        (json_object_get(j, "message") && (err = ev_str(j, ev, "message", &message))) ||
        (err = ev_time(j, ev, &now)))
        return err;
    long long refused = 0;
    ld_dataset *d = find_dataset(l, name);
    if (d) refused = d->late_refused;
    err = do_report(l, name, replica, e, id, (uint64_t)lease, ok, message, now, 0);
    if (d) d->late_refused = refused; /* a refused replayed report is a bad journal */
    return err ? dt_err_wrap(DT_ERR_FORMAT, "ledger event %s", ev) : DT_OK;
}

static dt_err replay_release(dt__ledger *l, const json_t *j, const char *ev) {
    const char *replica = "", *why = "";
    double now = 0;
    dt_err err;
    if ((err = ev_str(j, ev, "replica", &replica)) ||
        (json_object_get(j, "why") && (err = ev_str(j, ev, "why", &why))) ||
        (err = ev_time(j, ev, &now)))
        return err;
    json_t *n = json_object_get(j, "shards");
    int r = find_replica(l, replica);
    int got = r >= 0 ? do_release(l, r, why, now, 0) : 0;
    if (json_is_integer(n) && json_integer_value(n) != got)
        return dt_err_set(DT_ERR_FORMAT,
                          "ledger event %s: %s released %" JSON_INTEGER_FORMAT
                          " shards, but the replayed ledger re-queues %d",
                          ev, replica, json_integer_value(n), got);
    return DT_OK;
}

static dt_err replay_expire(dt__ledger *l, const json_t *j, const char *ev) {
    const char *name = "", *replica = "";
    int64_t e = 0, id = 0, lease = 0;
    double now = 0, deadline = 0;
    dt_err err;
    if ((err = ev_str(j, ev, "dataset", &name)) || (err = ev_str(j, ev, "replica", &replica)) ||
        (err = ev_int(j, ev, "epoch", 0, &e)) || (err = ev_int(j, ev, "id", 0, &id)) ||
        (err = ev_int(j, ev, "lease", 1, &lease)) || (err = ev_time(j, ev, &now)))
        return err;
    ld_dataset *d = find_dataset(l, name);
    int r = find_replica(l, replica);
    const ld_shard *s = d && e >= d->first_open && e < d->nopened && !d->epochs[e].done &&
                                id < d->nshards
                            ? &d->epochs[e].shards[id]
                            : NULL;
    if (!s || r < 0 || s->state != LD_DOING || s->holder != r || s->lease != (uint64_t)lease)
        return dt_err_set(DT_ERR_FORMAT,
                          "ledger event %s: shard %" PRId64 " of epoch %" PRId64 " of %s under "
                          "lease %" PRId64 " is not held by %s in the replayed ledger",
                          ev, id, e, name, lease, replica);
    json_t *dl = json_object_get(j, "deadline");
    if (json_is_number(dl)) deadline = json_number_value(dl);
    expire_one(l, d, e, id, deadline, now, 0);
    return DT_OK;
}

dt_err dt__ledger_replay(dt__ledger *l, const json_t *event) {
    static const struct {
        const char *ev;
        dt_err (*fn)(dt__ledger *l, const json_t *j, const char *ev);
    } handlers[] = {
        {.ev = "shard.register", .fn = replay_register},
        {.ev = "shard.fetch", .fn = replay_fetch},
        {.ev = "shard.report", .fn = replay_report},
        {.ev = "shard.release", .fn = replay_release},
        {.ev = "shard.expire", .fn = replay_expire},
    };
    if (!json_is_object(event))
        return dt_err_set(DT_ERR_FORMAT, "ledger event: expected a JSON object");
    const char *ev = json_string_value(json_object_get(event, "ev"));
    if (!ev) return dt_err_set(DT_ERR_FORMAT, "ledger event: field ev: expected a string");
    for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++)
        if (!strcmp(handlers[i].ev, ev)) return handlers[i].fn(l, event, ev);
    return DT_OK;
}
