/* fpenv-impl.h - the engine's arithmetic flushes denormal floats to zero.
 *
 * Why: Adam's moments of a weight whose gradient stays zero (the first layer's weights of an
 * image border pixel that is always 0, a ReLU unit that never fires) decay by beta1 each
 * step and pass below FLT_MIN after some hundreds of steps. On x86 every operation on such a
 * denormal takes a microcode assist of about a hundred cycles: measured on the Fashion-MNIST
 * MLP, the optimizer's share of a step grew from a third to most of it after ~1000 steps, and
 * 2000 steps ran at 0.62x the speed with denormals kept. TensorFlow runs its kernels the same
 * way (flush-to-zero and denormals-are-zero on its compute threads); a denormal's contribution
 * to a weight is below a float's resolution of it anyway.
 *
 * The pool's threads set the mode once for good; the caller's thread is set for the span of
 * each model and optimizer call and given back its own mode after, so a program linking the
 * library keeps its floating-point environment. Every thread computing a step's arithmetic
 * runs in the same mode, so results still do not depend on the thread count.
 */
#ifndef DTRAIN_CORE_FPENV_IMPL_H
#define DTRAIN_CORE_FPENV_IMPL_H

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define DT__MXCSR_FTZ_DAZ 0x8040u /* flush-to-zero (bit 15), denormals-are-zero (bit 6) */

/* Turn denormal flushing on for this thread; returns the mode to give back. */
static inline unsigned dt__fp_flush_denormals(void) {
    unsigned old = _mm_getcsr();
    if ((old & DT__MXCSR_FTZ_DAZ) != DT__MXCSR_FTZ_DAZ) _mm_setcsr(old | DT__MXCSR_FTZ_DAZ);
    return old;
}
static inline void dt__fp_restore(unsigned old) {
    if (_mm_getcsr() != old) _mm_setcsr(old);
}
/* 1 when this thread flushes denormals (tests). */
static inline int dt__fp_flushing(void) {
    return (_mm_getcsr() & DT__MXCSR_FTZ_DAZ) == DT__MXCSR_FTZ_DAZ;
}
#elif defined(__aarch64__)
#define DT__FPCR_FZ (1ull << 24)
static inline unsigned dt__fp_flush_denormals(void) {
    unsigned long long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    if (!(fpcr & DT__FPCR_FZ)) __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | DT__FPCR_FZ));
    return (unsigned)(fpcr & DT__FPCR_FZ ? 1 : 0);
}
static inline void dt__fp_restore(unsigned old) {
    unsigned long long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    unsigned long long want = old ? fpcr | DT__FPCR_FZ : fpcr & ~DT__FPCR_FZ;
    if (want != fpcr) __asm__ volatile("msr fpcr, %0" : : "r"(want));
}
static inline int dt__fp_flushing(void) {
    unsigned long long fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    return (fpcr & DT__FPCR_FZ) != 0;
}
#else
static inline unsigned dt__fp_flush_denormals(void) {
    return 0;
}
static inline void dt__fp_restore(unsigned old) {
    (void)old;
}
static inline int dt__fp_flushing(void) {
    return 0;
}
#endif

#endif
