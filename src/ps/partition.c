/*
 * partition.c - which PS holds which variable (include/dtrain/ps.h).
 *
 * Design: greedy largest-first bin packing by bytes. Variables are visited in order of
 * decreasing numel (ties: lower index first); each goes to the PS holding the fewest
 * elements so far (ties: the lowest PS index). Only the inputs decide the result, so every
 * process of a job computes the same owners. n log n for the sort plus n * nps for the
 * choice, which is nothing next to building the model.
 */
#include <stdlib.h>

#include "core/assert-impl.h"
#include "dtrain/ps.h"

typedef struct item {
    int64_t numel;
    int index;
} item;

static int cmp_item(const void *a, const void *b) {
    const item *x = a, *y = b;
    if (x->numel != y->numel) return x->numel > y->numel ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The same rule without allocating (when malloc fails): owner[] doubles as the state (-1 =
 * not placed yet), the next variable is found by a scan, a PS's load by summing. */
static void partition_noalloc(const int64_t *numel, int n, int nps, int *owner) {
    for (int i = 0; i < n; i++)
        owner[i] = -1;
    for (int k = 0; k < n; k++) {
        int next = -1;
        for (int i = 0; i < n; i++)
            if (owner[i] < 0 && (next < 0 || numel[i] > numel[next])) next = i;
        int best = 0;
        int64_t best_load = INT64_MAX;
        for (int j = 0; j < nps; j++) {
            int64_t load = 0;
            for (int i = 0; i < n; i++)
                if (owner[i] == j) load += numel[i];
            if (load < best_load) best = j, best_load = load;
        }
        owner[next] = best;
    }
}

void dt_ps_partition(const int64_t *numel, int n, int nps, int *owner) {
    DT_ASSERT(n >= 0 && nps >= 1 && (n == 0 || (numel && owner)));
    if (n == 0) return;
    item *items = malloc((size_t)n * sizeof *items);
    int64_t *load = calloc((size_t)nps, sizeof *load);
    if (!items || !load) {
        free(items);
        free(load);
        partition_noalloc(numel, n, nps, owner);
        return;
    }
    for (int i = 0; i < n; i++)
        items[i] = (item){numel[i], i};
    qsort(items, (size_t)n, sizeof *items, cmp_item);
    for (int k = 0; k < n; k++) {
        int ps = 0;
        for (int j = 1; j < nps; j++)
            if (load[j] < load[ps]) ps = j;
        owner[items[k].index] = ps;
        load[ps] += items[k].numel;
    }
    free(items);
    free(load);
}
