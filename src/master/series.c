/*
 * series.c - the job's curves for the dashboard (GET /v1/jobs/:job/series, docs/API.md):
 * each trainer's progress posts (time, step, loss, samples/s) and the evaluator's reports
 * (time, step, accuracy, loss), kept in the master's memory. A series holds at most
 * SERIES_MAX points: when full, every other point is dropped, so a long job keeps its whole
 * curve at a coarser grain. A restarted master starts its curves again (they are not
 * journaled; the evaluator's history is in its result.json).
 */
#include <stdlib.h>
#include <string.h>

#include "master/master-impl.h"

#define SERIES_MAX 2000
#define SERIES_REPLICAS 256

typedef struct series {
    char name[32];
    int n;
    double (*pt)[4];
} series;

typedef struct dt__series {
    int ntrain;
    series train[SERIES_REPLICAS];
    series eval;
} dt__series;

static void add(series *s, double a, double b, double c, double d) {
    if (!s->pt && !(s->pt = malloc(SERIES_MAX * sizeof *s->pt))) return;
    if (s->n == SERIES_MAX) { /* keep every other point */
        for (int i = 0; i < SERIES_MAX / 2; i++)
            memcpy(s->pt[i], s->pt[2 * i + 1], sizeof s->pt[i]);
        s->n = SERIES_MAX / 2;
    }
    s->pt[s->n][0] = a;
    s->pt[s->n][1] = b;
    s->pt[s->n][2] = c;
    s->pt[s->n][3] = d;
    s->n++;
}

static dt__series *get(dt__master *m) {
    if (!m->series) m->series = calloc(1, sizeof *m->series);
    return m->series;
}


void dt__series_progress(dt__master *m, const char *replica, const json_t *p) {
    dt__series *z = get(m);
    if (!z) return;
    series *s = NULL;
    for (int i = 0; i < z->ntrain && !s; i++)
        if (!strcmp(z->train[i].name, replica)) s = &z->train[i];
    if (!s) {
        if (z->ntrain == SERIES_REPLICAS) return;
        s = &z->train[z->ntrain++];
        snprintf(s->name, sizeof s->name, "%s", replica);
    }
    add(s, dt__wall_now(), dt__json_num(p, "step", -1), dt__json_num(p, "loss", -1), dt__json_num(p, "samples_per_sec", -1));
}

void dt__series_report(dt__master *m, const dt__replica *r, const json_t *report) {
    if (r->type != DT_REPLICA_TYPE_EVALUATOR) return;
    double acc = dt__json_num(report, "accuracy", -1), step = dt__json_num(report, "step", -1);
    if (acc < 0 || step < 0) return;
    dt__series *z = get(m);
    if (z) add(&z->eval, dt__wall_now(), step, acc, dt__json_num(report, "loss", -1));
}

static json_t *points(const series *s) {
    json_t *a = json_array();
    for (int i = 0; i < s->n; i++)
        json_array_append_new(a, json_pack("[f, f, f, f]", s->pt[i][0], s->pt[i][1], s->pt[i][2],
                                           s->pt[i][3]));
    return a;
}

json_t *dt__series_json(dt__master *m) {
    json_t *train = json_object();
    dt__series *z = m->series;
    for (int i = 0; z && i < z->ntrain; i++)
        json_object_set_new(train, z->train[i].name, points(&z->train[i]));
    static const series empty;
    return json_pack("{s:[s,s,s,s], s:o, s:[s,s,s,s], s:o}", "trainColumns", "time", "step",
                     "loss", "samples_per_sec", "train", train, "evalColumns", "time", "step",
                     "accuracy", "loss", "eval", points(z ? &z->eval : &empty));
}

void dt__series_free(dt__master *m) {
    dt__series *z = m->series;
    if (!z) return;
    for (int i = 0; i < z->ntrain; i++)
        free(z->train[i].pt);
    free(z->eval.pt);
    free(z);
    m->series = NULL;
}
