/*
 * replay.c - a master's journal replayed (replay-impl.h): one table row per event type a
 * master writes, naming its fields and their types; every field is checked against its row
 * before the event touches the state, so a missing field is refused by name, never read as
 * 0.
 *
 * The events (journal.c writes them, one JSON object a line; every one has "time", the
 * wall clock when it was written):
 *   start       token, cwd, spec, url?, httpPort, heartbeatTimeoutMs, leaseTimeoutMs, ports
 *   continue    reason, message, url?, httpPort, ports    (a stopped job continued)
 *   condition   type, reason, message
 *   finish      outcome, reason, message
 *   launch      replica, attempt, pid?, procStart?, pod?  (the backend's facts, to adopt it)
 *   exit        replica, attempt, code, state             (state Removed: scaled away)
 *   report      replica, report
 *   scale       workers, from?, added, removed, ports
 *   rdzv.ring   generation, members, peers, steps?        (rendezvous.c)
 *   rdzv.broken generation, reason?
 *   shard.register, shard.fetch, shard.report, shard.release, shard.expire   (ledger.c)
 * ("?": may be absent). Fields an event has beyond its row's are ignored. The shard.*
 * events are checked here by their fields, then by the ledger's replay, which re-executes
 * them and refuses one the replayed ledger would not have taken.
 *
 * A journal is refused, naming its file, line, event and field, for a line that is not a
 * JSON object, an event type no master writes, an event before the start or a second
 * start, a field that is missing or of the wrong type or range, a start whose ports lack
 * one of the job's replicas, or a scale that adds something other than worker-K or gives
 * it no port. An event that names a replica the table no longer holds (scaled away and
 * ended) is skipped, as the live master would have found none. A torn last line (the master
 * died while writing it; journal.c cuts it off when it opens the journal again) is skipped.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/replay-impl.h"

typedef enum ftype {
    F_STR,   /* a string of at most max bytes (max 0: any length); one of oneof when given */
    F_INT,   /* an integer in min..max */
    F_NUM,   /* a number */
    F_BOOL,  /* true or false */
    F_OBJ,   /* an object */
    F_STRS,  /* an array of strings */
    F_INTS,  /* an array of integers in min..max */
    F_PORTS, /* an object of replica name -> port 1..65535 */
} ftype;

typedef struct field {
    const char *name;
    ftype type;
    int optional;
    int64_t min, max;
    const char *const *oneof; /* NULL-terminated */
} field;

#define MAX_FIELDS 11

typedef struct event_row {
    const char *ev;
    field fields[MAX_FIELDS]; /* up to the first without a name */
    dt_err (*apply)(dt__replay *r, const json_t *ev, const char *kind);
} event_row;

static const char *const cond_types[] = {"Created", "Running", "Restarting", "Succeeded",
                                         "Failed", NULL};
static const char *const outcomes[] = {"Succeeded", "Failed", "Stopped", NULL};
static const char *const exit_states[] = {"Pending", "Running", "Restarting", "Succeeded",
                                          "Failed", "Stopped", "Removed", NULL};

static dt_err bad(const char *kind, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dt_err bad(const char *kind, const char *name, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return dt_err_set(DT_ERR_FORMAT, "event '%.64s': field '%s': %s", kind, name, what);
}

static void oneof_text(const char *const *oneof, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; oneof[i] && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", oneof[i]);
}

static dt_err check_int(const char *kind, const field *f, const json_t *v, const char *what) {
    if (!json_is_integer(v) || json_integer_value(v) < f->min || json_integer_value(v) > f->max)
        return bad(kind, f->name, "expected %s integer in %" PRId64 "..%" PRId64, what, f->min,
                   f->max);
    return DT_OK;
}

/* The field of ev that f declares, checked against its type. */
static dt_err check_field(const char *kind, const field *f, const json_t *ev) {
    const json_t *v = json_object_get(ev, f->name), *x;
    const char *key;
    size_t i;
    if (!v) return f->optional ? DT_OK : bad(kind, f->name, "missing");
    switch (f->type) {
    case F_STR:
        if (!json_is_string(v)) return bad(kind, f->name, "expected a string");
        if (f->max && json_string_length(v) > (size_t)f->max)
            return bad(kind, f->name, "expected at most %" PRId64 " bytes, got %zu", f->max,
                       json_string_length(v));
        if (f->oneof) {
            for (i = 0; f->oneof[i]; i++)
                if (!strcmp(f->oneof[i], json_string_value(v))) return DT_OK;
            char list[256];
            oneof_text(f->oneof, list, sizeof list);
            return bad(kind, f->name, "expected one of %s, got '%.64s'", list,
                       json_string_value(v));
        }
        return DT_OK;
    case F_INT:
        return check_int(kind, f, v, "an");
    case F_NUM:
        return json_is_number(v) ? DT_OK : bad(kind, f->name, "expected a number");
    case F_BOOL:
        return json_is_boolean(v) ? DT_OK : bad(kind, f->name, "expected true or false");
    case F_OBJ:
        return json_is_object(v) ? DT_OK : bad(kind, f->name, "expected an object");
    case F_STRS:
        if (!json_is_array(v)) return bad(kind, f->name, "expected an array of strings");
        json_array_foreach(v, i, x) {
            if (!json_is_string(x))
                return bad(kind, f->name, "item %zu: expected a string", i);
        }
        return DT_OK;
    case F_INTS:
        if (!json_is_array(v)) return bad(kind, f->name, "expected an array of integers");
        json_array_foreach(v, i, x) {
            if (!json_is_integer(x) || json_integer_value(x) < f->min ||
                json_integer_value(x) > f->max)
                return bad(kind, f->name, "item %zu: expected an integer in %" PRId64 "..%" PRId64,
                           i, f->min, f->max);
        }
        return DT_OK;
    case F_PORTS:
        if (!json_is_object(v)) return bad(kind, f->name, "expected an object of replica: port");
        json_object_foreach((json_t *)v, key, x) {
            if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > 65535)
                return bad(kind, f->name, "'%.64s': expected a port in 1..65535", key);
        }
        return DT_OK;
    }
    return DT_OK;
}

static const char *str(const json_t *ev, const char *name) {
    return json_string_value(json_object_get(ev, name));
}
static json_int_t num(const json_t *ev, const char *name) {
    return json_integer_value(json_object_get(ev, name));
}
static double when(const json_t *ev) { return json_number_value(json_object_get(ev, "time")); }

/* The replica an event names, or NULL when the table no longer holds it. */
static dt__replica *named(dt__replay *r, const json_t *ev) {
    return dt__job_state_find(r->st, str(ev, "replica"));
}

static dt_err apply_start(dt__replay *r, const json_t *ev, const char *kind) {
    const json_t *ports = json_object_get(ev, "ports");
    for (int i = 0; i < r->st->nreplicas; i++)
        if (!json_object_get(ports, r->st->replicas[i].name))
            return bad(kind, "ports", "no port for replica %s", r->st->replicas[i].name);
    r->started = 1;
    r->st->start_time = when(ev);
    snprintf(r->token, sizeof r->token, "%s", str(ev, "token"));
    snprintf(r->cwd, sizeof r->cwd, "%s", str(ev, "cwd"));
    snprintf(r->spec, sizeof r->spec, "%s", str(ev, "spec"));
    r->http_port = (int)num(ev, "httpPort");
    r->heartbeat_timeout_ms = (int)num(ev, "heartbeatTimeoutMs");
    r->lease_timeout_ms = (int)num(ev, "leaseTimeoutMs");
    for (int i = 0; i < r->st->nreplicas; i++)
        r->st->replicas[i].port = (int)num(ports, r->st->replicas[i].name);
    return DT_OK;
}

/* A stopped job continued, on new ports. */
static dt_err apply_continue(dt__replay *r, const json_t *ev, const char *kind) {
    (void)kind;
    dt__job_state_reopen(r->st, str(ev, "reason"), str(ev, "message"), when(ev));
    r->http_port = (int)num(ev, "httpPort");
    const json_t *ports = json_object_get(ev, "ports");
    for (int i = 0; i < r->st->nreplicas; i++) {
        const json_t *p = json_object_get(ports, r->st->replicas[i].name);
        if (p) r->st->replicas[i].port = (int)json_integer_value(p);
    }
    return DT_OK;
}

static dt_err apply_condition(dt__replay *r, const json_t *ev, const char *kind) {
    (void)kind;
    const char *type = str(ev, "type");
    for (int k = 0; k < DT__COND__COUNT; k++)
        if (!strcmp(type, dt__cond_type_name((dt__cond_type)k)))
            dt__job_state_condition(r->st, (dt__cond_type)k, str(ev, "reason"),
                                    str(ev, "message"), when(ev));
    return DT_OK;
}

static dt_err apply_finish(dt__replay *r, const json_t *ev, const char *kind) {
    (void)kind;
    const char *o = str(ev, "outcome");
    dt_job_outcome out = !strcmp(o, "Succeeded") ? DT_JOB_OUTCOME_SUCCEEDED
                         : !strcmp(o, "Stopped") ? DT_JOB_OUTCOME_STOPPED
                                                 : DT_JOB_OUTCOME_FAILED;
    r->st->finished = 1;
    r->st->outcome = out;
    r->st->completion_time = when(ev);
    dt__job_state_condition(r->st,
                            out == DT_JOB_OUTCOME_SUCCEEDED ? DT__COND_SUCCEEDED : DT__COND_FAILED,
                            str(ev, "reason"), str(ev, "message"), when(ev));
    return DT_OK;
}

static dt_err apply_launch(dt__replay *r, const json_t *ev, const char *kind) {
    (void)kind;
    dt__replica *rep = named(r, ev);
    if (!rep) return DT_OK;
    json_t *facts = json_deep_copy(ev); /* what the backend journaled, to adopt it */
    if (!facts) return dt_err_set(DT_ERR_NOMEM, "out of memory");
    rep->attempt = (int)num(ev, "attempt");
    rep->restarts = rep->attempt - 1;
    rep->pid = (pid_t)num(ev, "pid"); /* 0 when the backend has no pid (pods) */
    json_decref(rep->facts);
    rep->facts = facts;
    rep->state = DT__REPLICA_RUNNING;
    rep->start_time = when(ev);
    rep->end_time = 0;
    return DT_OK;
}

static dt_err apply_exit(dt__replay *r, const json_t *ev, const char *kind) {
    (void)kind;
    dt__replica *rep = named(r, ev);
    if (!rep) return DT_OK;
    const char *s = str(ev, "state");
    if (!strcmp(s, "Removed")) { /* scaled away, and ended */
        dt__job_state_remove(r->st, (int)(rep - r->st->replicas));
        return DT_OK;
    }
    rep->exit_code = (int)num(ev, "code");
    rep->end_time = when(ev);
    rep->pid = 0;
    for (int k = DT__REPLICA_PENDING; k <= DT__REPLICA_STOPPED; k++)
        if (!strcmp(s, dt__replica_state_name((dt__replica_state)k)))
            rep->state = (dt__replica_state)k;
    if (rep->state == DT__REPLICA_RESTARTING) rep->restart_at = 0; /* relaunched at once */
    return DT_OK;
}

static dt_err apply_report(dt__replay *r, const json_t *ev, const char *kind) {
    (void)kind;
    dt__replica *rep = named(r, ev);
    if (!rep) return DT_OK;
    json_decref(rep->report);
    rep->report = json_incref(json_object_get(ev, "report"));
    return DT_OK;
}

/* worker-K's K, or -1 for any other name. */
static int worker_index(const char *name) {
    if (strncmp(name, "worker-", 7) || name[7] < '0' || name[7] > '9') return -1;
    char *end;
    long v = strtol(name + 7, &end, 10);
    return *end || v < 0 || v >= DT__MAX_REPLICAS ? -1 : (int)v;
}

/* The same changes as the live scale (master.c), without acting on processes: a removed
 * worker that runs is marked removing (its exit, state Removed, takes it out), any other
 * leaves the table at once; added workers join it, Pending, on their journaled ports. */
static dt_err apply_scale(dt__replay *r, const json_t *ev, const char *kind) {
    const json_t *added = json_object_get(ev, "added"), *ports = json_object_get(ev, "ports"), *v;
    size_t k;
    json_array_foreach(added, k, v) {
        const char *name = json_string_value(v);
        if (worker_index(name) < 0)
            return bad(kind, "added", "'%.64s' is not a worker's name (worker-0 .. worker-%d)",
                       name, DT__MAX_REPLICAS - 1);
        if (!json_object_get(ports, name)) return bad(kind, "ports", "no port for %s", name);
    }
    json_array_foreach(json_object_get(ev, "removed"), k, v) {
        dt__replica *rep = dt__job_state_find(r->st, json_string_value(v));
        if (!rep) continue;
        if (rep->state == DT__REPLICA_RUNNING)
            rep->removing = 1;
        else
            dt__job_state_remove(r->st, (int)(rep - r->st->replicas));
    }
    json_array_foreach(added, k, v) {
        const char *name = json_string_value(v);
        dt__replica *rep = NULL;
        if (dt__job_state_find(r->st, name)) continue;
        dt_err e = dt__job_state_add(r->st, DT_REPLICA_TYPE_WORKER, worker_index(name), &rep);
        if (e) return e;
        rep->port = (int)num(ports, name);
    }
    r->workers = (int)num(ev, "workers");
    return DT_OK;
}

static dt_err apply_rdzv(dt__replay *r, const json_t *ev, const char *kind) {
    (void)kind;
    dt__rdzv_replay(r->rdzv, ev);
    return DT_OK;
}

static dt_err apply_shard(dt__replay *r, const json_t *ev, const char *kind) {
    (void)kind;
    return dt__ledger_replay(r->ledger, ev);
}

#define TIME {"time", F_NUM, 0, 0, 0, NULL}
#define STR(NAME) {NAME, F_STR, 0, 0, 0, NULL}
#define STR_MAX(NAME, MAX) {NAME, F_STR, 0, 0, MAX, NULL}
#define STR_OPT(NAME) {NAME, F_STR, 1, 0, 0, NULL}
#define ONEOF(NAME, LIST) {NAME, F_STR, 0, 0, 0, LIST}
#define INT(NAME, MIN, MAX) {NAME, F_INT, 0, MIN, MAX, NULL}
#define INT_OPT(NAME, MIN, MAX) {NAME, F_INT, 1, MIN, MAX, NULL}
#define NUM_OPT(NAME) {NAME, F_NUM, 1, 0, 0, NULL}
#define BOOL(NAME) {NAME, F_BOOL, 0, 0, 0, NULL}
#define OBJ(NAME) {NAME, F_OBJ, 0, 0, 0, NULL}
#define STRS(NAME) {NAME, F_STRS, 0, 0, 0, NULL}
#define INTS_OPT(NAME, MIN, MAX) {NAME, F_INTS, 1, MIN, MAX, NULL}
#define PORTS(NAME) {NAME, F_PORTS, 0, 0, 0, NULL}
#define PORT(NAME) INT(NAME, 1, 65535)
#define MS(NAME) INT(NAME, 0, 86400000) /* --heartbeat-timeout, --lease-timeout: a day at most */
#define REPLICA STR_MAX("replica", 31)
#define POS INT64_MAX
/* the shard ledger's fields (ledger.c checks them again, with its own rules) */
#define SHARD_AT STR("dataset"), STR("replica"), INT("epoch", 0, POS), INT("id", 0, POS), \
                 INT("lease", 1, POS)

static const event_row events[] = {
    {"start",
     {STR_MAX("token", 63), STR_MAX("cwd", 4095), STR_MAX("spec", 4095), STR_OPT("url"),
      PORT("httpPort"), MS("heartbeatTimeoutMs"), MS("leaseTimeoutMs"), PORTS("ports"), TIME},
     apply_start},
    {"continue",
     {STR("reason"), STR("message"), STR_OPT("url"), PORT("httpPort"), PORTS("ports"), TIME},
     apply_continue},
    {"condition", {ONEOF("type", cond_types), STR("reason"), STR("message"), TIME},
     apply_condition},
    {"finish", {ONEOF("outcome", outcomes), STR("reason"), STR("message"), TIME}, apply_finish},
    {"launch",
     {REPLICA, INT("attempt", 1, INT_MAX), INT_OPT("pid", 1, INT_MAX), STR_OPT("procStart"),
      STR_OPT("pod"), TIME},
     apply_launch},
    {"exit",
     {REPLICA, INT("attempt", 0, INT_MAX), INT("code", 0, 255), ONEOF("state", exit_states),
      TIME},
     apply_exit},
    {"report", {REPLICA, OBJ("report"), TIME}, apply_report},
    {"scale",
     {INT("workers", 0, DT__MAX_REPLICAS), INT_OPT("from", 0, DT__MAX_REPLICAS), STRS("added"),
      STRS("removed"), PORTS("ports"), TIME},
     apply_scale},
    {"rdzv.ring",
     {INT("generation", 1, POS), STRS("members"), STRS("peers"), INTS_OPT("steps", 0, POS),
      TIME},
     apply_rdzv},
    {"rdzv.broken", {INT("generation", 1, POS), STR_OPT("reason"), TIME}, apply_rdzv},
    {"shard.register",
     {STR("dataset"), INT("dataset_size", 1, POS), INT("batch_size", 1, POS),
      INT("num_epochs", 1, POS), INT("num_minibatches_per_shard", 1, POS), BOOL("shuffle"),
      BOOL("shuffle_shards"), STR("seed"), INT("max_failures", 0, INT32_MAX), TIME},
     apply_shard},
    {"shard.fetch",
     {SHARD_AT, INT_OPT("request", 0, POS), INT_OPT("part", 0, DT__LEDGER_MAX_BATCH - 1), TIME},
     apply_shard},
    {"shard.report", {SHARD_AT, BOOL("ok"), STR_OPT("message"), TIME}, apply_shard},
    {"shard.release",
     {STR("replica"), STR_OPT("why"), INT_OPT("shards", 0, POS), TIME},
     apply_shard},
    {"shard.expire", {SHARD_AT, NUM_OPT("held"), NUM_OPT("deadline"), TIME}, apply_shard},
};
#define NEVENTS (sizeof events / sizeof events[0])

void dt__replay_init(dt__replay *r, dt__job_state *st, dt__ledger *ledger, dt__rdzv *rdzv) {
    memset(r, 0, sizeof *r);
    r->st = st;
    r->ledger = ledger;
    r->rdzv = rdzv;
    r->workers = -1;
}

dt_err dt__replay_event(dt__replay *r, const json_t *ev) {
    const json_t *jkind = json_object_get(ev, "ev");
    if (!json_is_string(jkind))
        return dt_err_set(DT_ERR_FORMAT, "field 'ev': expected a string (the event's type)");
    const char *kind = json_string_value(jkind);
    const event_row *row = NULL;
    for (size_t i = 0; i < NEVENTS && !row; i++)
        if (!strcmp(events[i].ev, kind)) row = &events[i];
    if (!row) {
        char known[512];
        size_t n = 0;
        known[0] = 0;
        for (size_t i = 0; i < NEVENTS && n < sizeof known; i++)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "",
                                  events[i].ev);
        return dt_err_set(DT_ERR_FORMAT, "event '%.64s': not an event of a master's journal "
                          "(those are: %s)", kind, known);
    }
    if (!strcmp(kind, "start") ? r->started : !r->started)
        return dt_err_set(DT_ERR_FORMAT, "event '%s': %s", kind,
                          r->started ? "a second start: a journal has one, on its first line"
                                     : "before the job's start event (a journal's first line)");
    for (int i = 0; i < MAX_FIELDS && row->fields[i].name; i++) {
        dt_err e = check_field(kind, &row->fields[i], ev);
        if (e) return e;
    }
    return row->apply(r, ev, kind);
}

static dt_err replay_line(void *ctx, json_t *ev) { return dt__replay_event(ctx, ev); }

dt_err dt__replay_journal(dt__replay *r, const char *path) {
    return dt__journal_replay(path, replay_line, r);
}
