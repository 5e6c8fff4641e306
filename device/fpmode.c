/*
 * fpmode.c: the floating-point environment computations run in.
 *
 * XLA's CPU runtime computes with subnormals flushed to zero: its client
 * and every thread of its pools hold tsl::port::ScopedFlushDenormal, which
 * sets MXCSR's FTZ (a subnormal result becomes a zero of its sign) and DAZ
 * (a subnormal operand reads as zero) on x86-64, and FPCR.FZ (both) on
 * AArch64. A JAX program sees that: `x != 0` is false and `sign(x)` is 0 for
 * x = 1e-40f, `1e-30f * 1e-10f` is 0. Only arithmetic flushes: conversions
 * and bit operations that XLA writes with integer code (f32 -> bf16,
 * reduce-precision, abs, negate, bitcast-convert) keep subnormal bits, and
 * tessel's are integer code too.
 *
 * tessel sets the same mode around each dev_execute and on the threads of
 * its own that compute (the asynchronous collectives'), and gives the
 * caller's flush bits back afterwards (the rest of the control register,
 * exception flags raised meanwhile included, as the run left it), so a
 * library user's thread computes as it did. On other targets both calls
 * do nothing.
 */
#include "device.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FLUSH_BITS 0x8040u /* FTZ (bit 15) | DAZ (bit 6) */

DevFpMode dev_fp_flush_enter(void)
{
    DevFpMode saved = {_mm_getcsr()};
    if ((saved.bits & FLUSH_BITS) != FLUSH_BITS)
        _mm_setcsr(saved.bits | FLUSH_BITS);
    return saved;
}

void dev_fp_restore(DevFpMode saved)
{
    unsigned cur = _mm_getcsr(), want = (cur & ~FLUSH_BITS) | ((unsigned)saved.bits & FLUSH_BITS);
    if (cur != want)
        _mm_setcsr(want);
}

#elif defined(__aarch64__)
#define FLUSH_BITS (1ull << 24) /* FPCR.FZ */

static uint64_t get_fpcr(void)
{
    uint64_t v;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(v));
    return v;
}

static void set_fpcr(uint64_t v)
{
    __asm__ __volatile__("msr fpcr, %0" : : "r"(v));
}

DevFpMode dev_fp_flush_enter(void)
{
    DevFpMode saved = {get_fpcr()};
    if (!(saved.bits & FLUSH_BITS))
        set_fpcr(saved.bits | FLUSH_BITS);
    return saved;
}

void dev_fp_restore(DevFpMode saved)
{
    uint64_t cur = get_fpcr(), want = (cur & ~FLUSH_BITS) | (saved.bits & FLUSH_BITS);
    if (cur != want)
        set_fpcr(want);
}

#else
DevFpMode dev_fp_flush_enter(void)
{
    return (DevFpMode){0};
}

void dev_fp_restore(DevFpMode saved)
{
    (void)saved;
}
#endif
