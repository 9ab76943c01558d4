/* lpo synthetic weights (model): a counter-based function of (seed, tensor, element index), written once for
 * the CPU and the CUDA backend (this header compiles as C and as CUDA: LPO_HD marks host+device functions),
 * so every backend generates values in place, in parallel, bit-identical to the CPU's.
 *
 *   key    = splitmix64(seed ^ fnv1a64(hf_name))
 *   r      = splitmix64(key + i * 0x9e3779b97f4a7c15)         (wrapping 64-bit arithmetic)
 *   u      = (r >> 40) * 2^-23 - 1                             (24 bits -> [-1, 1), exact in double)
 *   value  = (float)(center + amp * u)                         (double arithmetic, one rounding to f32)
 *            then rounded to the stored dtype (bf16/f16: round to nearest even) and back to f32
 * center/amp by tensor role: docs/models.md "Synthetic weights" (lpo_synth_params in model.c). */
#pragma once
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define LPO_HD __host__ __device__ __forceinline__
#else
#define LPO_HD static inline
#endif

LPO_HD uint64_t lpo_synth_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element i of a tensor whose key, center and amplitude are given, as float32 before dtype rounding. */
LPO_HD float lpo_synth_value(uint64_t key, double center, double amp, uint64_t i) {
    const uint64_t r = lpo_synth_mix(key + i * 0x9e3779b97f4a7c15ull);
    const double u = (double)(r >> 40) * (1.0 / 8388608.0) - 1.0;
#ifdef __CUDA_ARCH__
    return __double2float_rn(
        __dadd_rn(center, __dmul_rn(amp, u))); /* nvcc would fuse a * u + c: not the CPU's */
#else
    return (float)(center + amp * u);
#endif
}

/* Round-to-nearest-even f32 -> bf16 -> f32 and f32 -> f16 -> f32 for finite values (synthetic values are
 * small and finite, so no NaN/overflow handling is needed here; src/core/dtype.c has the general ones). */
LPO_HD float lpo_synth_round_bf16(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    b += 0x7fffu + ((b >> 16) & 1u);
    b &= 0xffff0000u;
    memcpy(&v, &b, 4);
    return v;
}
