/*
 * fuzz-impl.h - what the libFuzzer harnesses in fuzz/ share: the entry point's declaration,
 * and a scratch file for parsers that only read a path (the input's bytes are written to a
 * file of this process's own, rewritten for each input).
 *
 * Design: one harness per parser (fuzz/fuzz_<parser>.c), each calling the parser's real
 * entry point and freeing everything, so a leak is a finding too. The same harness is
 * linked with libFuzzer (-DDT_FUZZ=ON, clang) and with fuzz/replay_main.c (every build),
 * which runs each file of fuzz/corpus/<harness>/ through it as a ctest.
 */
#ifndef DTRAIN_FUZZ_IMPL_H
#define DTRAIN_FUZZ_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A scratch file (slot 0..3) holding data; returns its path, or aborts when the file cannot
 * be written (a broken harness, not a finding). The files live in one directory per process
 * under $TMPDIR, removed at exit. dt__fuzz_file_named gives the file a name of its own (for
 * parsers that read a fixed name in a directory: dt__fuzz_dir is that directory). */
static inline const char *dt__fuzz_file(int slot, const uint8_t *data, size_t size);
static inline const char *dt__fuzz_file_named(int slot, const char *name, const uint8_t *data,
                                              size_t size);

static char dt__fuzz_dir[256];
static char dt__fuzz_paths[4][300];

static inline void dt__fuzz_cleanup(void) {
    for (int i = 0; i < 4; i++)
        if (dt__fuzz_paths[i][0]) unlink(dt__fuzz_paths[i]);
    if (dt__fuzz_dir[0]) rmdir(dt__fuzz_dir);
}

static inline const char *dt__fuzz_file(int slot, const uint8_t *data, size_t size) {
    char name[16];
    snprintf(name, sizeof name, "in%d", slot);
    return dt__fuzz_file_named(slot, name, data, size);
}

static inline const char *dt__fuzz_file_named(int slot, const char *name, const uint8_t *data,
                                              size_t size) {
    if (!dt__fuzz_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dt__fuzz_dir, sizeof dt__fuzz_dir, "%.200s/dt-fuzz-XXXXXX",
                 tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dt__fuzz_dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(dt__fuzz_cleanup);
    }
    snprintf(dt__fuzz_paths[slot], sizeof dt__fuzz_paths[slot], "%s/%.32s", dt__fuzz_dir, name);
    FILE *f = fopen(dt__fuzz_paths[slot], "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror("fuzz: writing the scratch file");
        abort();
    }
    return dt__fuzz_paths[slot];
}

#endif
