/* lpo random device data (hw) for benchmarks and kernel checks: a counter-based hash of (seed, index) mapped
 * to uniform values in [lo, hi), rounded to the element type. Never zeros or constants (they run faster and
 * hide unwritten outputs). The launchers live in src/hw/gpu_fill.cu (they take a stream, never synchronise);
 * the host function that CPU-only builds need too (the hash) in src/hw/gpu_fill_host.c. Element types are
 * lpo_dtype rows (their sizes: lpo_dtype_bytes). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "lpo/dtype.h"
#include "lpo/status.h"
#ifdef __cplusplus
}
#endif
#include "lpo/synth.h" /* LPO_HD, lpo_synth_mix (splitmix64) */

/* The fill's value of element i: uniform in [lo, hi) from 24 bits of splitmix64(seed * K + i); the same
 * float on host and device (the device rounds each step: no FMA contraction). */
LPO_HD float lpo__fill_hash(uint64_t seed, size_t i, float lo, float hi) {
    float u = (float)(lpo_synth_mix(seed * 0x2545f4914f6cdd1dull + (uint64_t)i) >> 40) * (1.0f / 16777216.0f);
#ifdef __CUDA_ARCH__
    return __fadd_rn(lo, __fmul_rn(hi - lo, u));
#else
    return lo + (hi - lo) * u;
#endif
}

#ifdef __cplusplus
extern "C" {
#endif
/* p[0..n) = round_t(lo + (hi - lo) * u(seed, i)) for t one of f32, f16, bf16, fp8, int8, i32 (LPO_E_INVALID
 * otherwise); integer types truncate toward zero. LPO_E_CUDA on a launch error. stream is a cudaStream_t
 * (void * so C callers need no CUDA header). */
lpo_status lpo__gpu_fill_random(void *p, size_t n, lpo_dtype t, uint64_t seed, float lo, float hi,
                                void *stream);
/* Host copy of the same hash: the float value before rounding, for CPU references that must not copy the
 * data back. */
float lpo__fill_value(uint64_t seed, size_t i, float lo, float hi);
/* Host decode of one stored element (of the types the fill writes) to double; NaN for another type. */
double lpo__elem_to_double(const void *p, size_t i, lpo_dtype t);
#ifdef __cplusplus
}
#endif
