/*
 * fuzz_server_journal.c - libFuzzer harness: the job server's journal (journal.jsonl in its
 * directory, replayed when `dtrain server` starts) through dt__sjournal_replay, into a
 * server of no jobs; the jobs it rebuilt are freed after each input.
 */
#include "fuzz-impl.h"
#include "server/server-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static dt__server s;
    dt__fuzz_file_named(0, "journal.jsonl", data, size);
    snprintf(s.dir, sizeof s.dir, "%s", dt__fuzz_dir);
    dt__sjournal_replay(&s);
    for (int i = 0; i < s.njobs; i++)
        dt__sjob_free(s.jobs[i]);
    free(s.jobs);
    s.jobs = NULL;
    s.njobs = s.capjobs = 0;
    s.next_seq = 0;
    dt_err_clear();
    return 0;
}
