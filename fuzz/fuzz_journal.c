/*
 * fuzz_journal.c - libFuzzer harness: a master's journal (journal.jsonl, read when a
 * master resumes) through dt__journal_replay, each event handed on as the master does:
 * shard.* events to the shard ledger's replay, rdzv.* to the rendezvous's.
 */
#include "fuzz-impl.h"
#include "master/master-impl.h"
#include "shard/ledger-impl.h"

typedef struct ctx {
    dt__ledger *ledger;
    dt__rdzv *rdzv;
    dt_err err;
} ctx;

static void no_journal(void *c, json_t *ev) { json_decref(ev); }

static void replay(void *vc, json_t *ev) {
    ctx *c = vc;
    const char *kind = json_string_value(json_object_get(ev, "ev"));
    if (!kind) return;
    if (!strncmp(kind, "shard.", 6) && !c->err) c->err = dt__ledger_replay(c->ledger, ev);
    else if (!strncmp(kind, "rdzv.", 5)) dt__rdzv_replay(c->rdzv, ev);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ctx c = {0};
    if (dt__ledger_init(&c.ledger, no_journal, NULL) || dt__rdzv_init(&c.rdzv)) abort();
    dt__journal_replay(dt__fuzz_file(0, data, size), replay, &c);
    dt__rdzv_free(c.rdzv);
    dt__ledger_free(c.ledger);
    dt_err_clear();
    return 0;
}
