/*
 * journal.c - the server's journal (SERVER_DIR/journal.jsonl): one JSON object a line,
 * appended as the job master's is (src/master/journal.c does the writing: one write a
 * line, a torn last line cut off, a backlog when the disk is full).
 *
 * Events ("ev"), each with "name" and "time":
 *   submit     {seq, priority, kind, labels, demand: {cpus, memoryBytes}, workerDemand: {...},
 *              origin}
 *   start      {resume: bool, pid}     the job's `dtrain run` was started
 *   suspending {}                      its master was asked to stop for a suspension
 *   suspended  {}                      its master ended: capacity freed
 *   requeue    {}                      a suspended job back in the queue
 *   stop       {now: bool}             a user stopped it
 *   demand     {demand}                a scale through the server changed its workers
 *   finish     {state, message}        Succeeded, Failed or Stopped
 *   delete     {}                      forgotten
 * Replay rebuilds every job's state in order. What replay cannot know (is a running job's
 * master still there?) server.c works out from the job dirs once the loop starts; a stop or
 * suspension asked before the restart is asked of its master again (a master's stop is
 * idempotent), as the server may have died before it was sent. Replay trusts no field: an
 * event whose name is not a job name (a DNS-1035 label: the job's dirs are named by it) is
 * skipped, and a demand that is not a finite number of at least 0 counts as 0.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/path-impl.h"
#include "master/master-impl.h"
#include "server/server-impl.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

dt_err dt__sjournal_open(dt__server *s) {
    char path[DT__PATH_MAX];
    dt_err e = dt__path(path, sizeof path, "%s/journal.jsonl", s->dir);
    return e ? e : dt__journal_open(&s->journal, path);
}

void dt__sjournal_close(dt__server *s) {
    dt__journal_close(s->journal);
    s->journal = NULL;
}

dt_err dt__sjournal(dt__server *s, const char *ev, const dt__sjob *j, json_t *extra) {
    json_t *o = json_pack("{s:s, s:s, s:f}", "ev", ev, "name", j->name, "time", now_s());
    if (extra) {
        json_object_update(o, extra);
        json_decref(extra);
    }
    dt_err e = dt__journal_append(s->journal, o);
    if (!e && (!strcmp(ev, "submit") || !strcmp(ev, "finish"))) e = dt__journal_sync(s->journal);
    return e;
}

static int job_name(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 63 || !islower((unsigned char)s[0]) || s[n - 1] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '-') return 0;
    return 1;
}

/* A demand's member: a finite number >= 0, else 0. */
static double amount(json_t *d, const char *key) {
    double v = json_number_value(json_object_get(d, key));
    return isfinite(v) && v > 0 && v < 1e18 ? v : 0;
}

typedef struct replay_ctx {
    dt__server *s;
    dt_err err;
} replay_ctx;

static void replay_event(void *vctx, json_t *ev) {
    replay_ctx *rc = vctx;
    dt__server *s = rc->s;
    const char *what = json_string_value(json_object_get(ev, "ev"));
    const char *name = json_string_value(json_object_get(ev, "name"));
    double t = json_number_value(json_object_get(ev, "time"));
    if (!what || !name || rc->err) return;
    if (!job_name(name)) {
        fprintf(stderr, "dtrain server: journal: an event for '%.80s' skipped (not a job name)\n", name);
        return;
    }
    dt__sjob *j = dt__server_find(s, name);
    if (!strcmp(what, "submit")) {
        if (j) return; /* cannot happen: a name is held until deleted */
        j = calloc(1, sizeof *j);
        if (!j) {
            rc->err = dt_err_set(DT_ERR_NOMEM, "out of memory");
            return;
        }
        snprintf(j->name, sizeof j->name, "%s", name);
        snprintf(j->kind, sizeof j->kind, "%s", json_string_value(json_object_get(ev, "kind")) ?: "?");
        if (dt__path(j->origin, sizeof j->origin, "%s",
                     json_string_value(json_object_get(ev, "origin")) ?: "")) {
            rc->err = dt_err_wrap(DT_ERR_FORMAT, "job %s: origin", name);
            free(j);
            return;
        }
        j->seq = json_integer_value(json_object_get(ev, "seq"));
        j->priority = (int)json_integer_value(json_object_get(ev, "priority"));
        json_t *l = json_object_get(ev, "labels");
        j->labels = json_is_object(l) ? json_deep_copy(l) : json_object();
        json_t *d = json_object_get(ev, "demand");
        j->demand.cpus = amount(d, "cpus");
        j->demand.mem = (int64_t)amount(d, "memoryBytes");
        d = json_object_get(ev, "workerDemand");
        j->worker.cpus = amount(d, "cpus");
        j->worker.mem = (int64_t)amount(d, "memoryBytes");
        j->submit_t = t;
        j->state = DT__SJOB_QUEUED;
        if (j->seq >= s->next_seq) s->next_seq = j->seq + 1;
        rc->err = dt__server_add(s, j);
        return;
    }
    if (!j) return;
    if (!strcmp(what, "start")) {
        j->state = DT__SJOB_RUNNING;
        j->start_t = t;
        j->launcher = (pid_t)json_integer_value(json_object_get(ev, "pid"));
        j->launcher_child = 0;
        j->started_once = 1;
        j->want = 0;
    } else if (!strcmp(what, "suspending")) {
        j->state = DT__SJOB_SUSPENDING;
        if (!j->stop_asked) j->want = DT__WANT_SUSPEND;
    } else if (!strcmp(what, "suspended")) {
        j->state = DT__SJOB_SUSPENDED;
        j->resume = 1;
        j->launcher = 0;
        j->want = 0;
    } else if (!strcmp(what, "requeue")) {
        j->state = DT__SJOB_QUEUED;
        j->resume = j->started_once;
        j->want = 0;
    } else if (!strcmp(what, "stop")) {
        j->stop_asked = 1;
        j->want = json_is_true(json_object_get(ev, "now")) ? DT__WANT_STOP_NOW : DT__WANT_STOP;
    } else if (!strcmp(what, "finish")) {
        j->want = 0;
        int st = dt__sjob_state_parse(json_string_value(json_object_get(ev, "state")));
        j->state = st >= 0 ? (dt__sjob_state)st : DT__SJOB_FAILED;
        j->finish_t = t;
        j->launcher = 0;
        snprintf(j->message, sizeof j->message, "%s",
                 json_string_value(json_object_get(ev, "message")) ?: "");
        dt__utf8_repair(j->message); /* cut to its size */
    } else if (!strcmp(what, "demand")) {
        json_t *d = json_object_get(ev, "demand");
        j->demand.cpus = amount(d, "cpus");
        j->demand.mem = (int64_t)amount(d, "memoryBytes");
    } else if (!strcmp(what, "delete")) {
        j->deleted = 1;
    }
}

/* (the server's replay keeps going past an event it cannot use: rc.err says why it stopped) */
static dt_err replay_line(void *vctx, json_t *ev) {
    replay_event(vctx, ev);
    return DT_OK;
}

dt_err dt__sjournal_replay(dt__server *s) {
    char path[DT__PATH_MAX];
    dt_err e = dt__path(path, sizeof path, "%s/journal.jsonl", s->dir);
    if (e) return e;
    if (access(path, F_OK) != 0) return DT_OK;
    replay_ctx rc = {.s = s};
    if ((e = dt__journal_replay(path, replay_line, &rc))) return e;
    if (rc.err) return rc.err;
    /* Forgotten jobs leave the table. */
    int k = 0;
    for (int i = 0; i < s->njobs; i++) {
        if (s->jobs[i]->deleted) dt__sjob_free(s->jobs[i]);
        else s->jobs[k++] = s->jobs[i];
    }
    s->njobs = k;
    return DT_OK;
}
