/* assert-impl.h - DT_ASSERT: abort with file and line, for programmer errors only.
 * Bad input, I/O and network failures return a dt_err instead. */
#ifndef DTRAIN_ASSERT_IMPL_H
#define DTRAIN_ASSERT_IMPL_H

_Noreturn void dt__abort(const char *file, int line, const char *expr);

#define DT_ASSERT(x)                                                                               \
    do {                                                                                           \
        if (!(x)) dt__abort(__FILE__, __LINE__, #x);                                               \
    } while (0)

#endif
