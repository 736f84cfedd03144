/* assert.c - the abort behind DT_ASSERT. */
#include "core/assert-impl.h"

#include <stdio.h>
#include <stdlib.h>

_Noreturn void dt__abort(const char *file, int line, const char *expr) {
    fflush(stdout);
    fprintf(stderr, "dtrain: internal error at %s:%d: assertion failed: %s\n", file, line, expr);
    abort();
}
