/* The block GEMV's per-thread arithmetic (src/engine/cuda/gguf_unit.cuh) on the CPU, no GPU needed (built
 * with the CUDA toolkit, label "unit"): for each GGUF format, rows of random blocks (every byte random but
 * the f16 scales) and random bf16-valued x, the unit walk of gemv_gguf.cu (units of 64 columns, scale groups,
 * F = 0.5 + q / 256 and the D / Mn correction) against the dot product of src/model/dequant.c's weights; the
 * same rows quantized by include/lpo/qblock.h too. Relative error over sum |w x| must stay below 1e-5. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "engine/cuda/gguf_unit.cuh"
#include "lpo/qblock.h"
extern "C" {
#include "lpo/gguf.h"
}

static uint32_t rng = 12345;
static uint32_t rnd() {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}
static float frand() { /* [-1, 1) */
    return (float)(rnd() & 0xffffff) / 16777216.0f * 2 - 1;
}
static float bf16_value(float v) { /* v truncated to bf16 */
    uint32_t u;
    memcpy(&u, &v, 4);
    u &= 0xffff0000u;
    memcpy(&v, &u, 4);
    return v;
}
static void put_f16(uint8_t *p, float v) {
    (void)lpo_qb_f16(v, p);
}

template <lpo_dtype Q> static int check(const char *name, int nb, bool quantized) {
    typedef gq_fmt<Q> F;
    const int k = nb * F::BLK;
    std::vector<uint8_t> row((size_t)nb * F::BB + 16);
    std::vector<float> w(k), x(k), src(k);
    if (quantized) { /* the rules of qblock.h on smooth random values */
        for (int i = 0; i < k; i++) src[i] = frand() * (1.0f + (float)(i % 7));
        if (lpo_quantize_blocks(Q, src.data(), row.data(), (uint64_t)k) != LPO_OK) return 1;
    } else {
        for (auto &b : row) b = (uint8_t)rnd();
        for (int bi = 0; bi < nb; bi++) { /* finite f16 scales (any quants, 6-bit and int8 scales) */
            uint8_t *b = &row[(size_t)bi * F::BB];
            const float d = (0.001f + 0.01f * fabsf(frand())) * (rnd() & 1 ? -1.f : 1.f);
            if (Q == LPO_DT_Q6_K)
                put_f16(b + 208, d);
            else
                put_f16(b, Q == LPO_DT_Q4_K || Q == LPO_DT_Q5_K ? fabsf(d) : d);
            if (Q == LPO_DT_Q4_1 || Q == LPO_DT_Q4_K || Q == LPO_DT_Q5_K)
                put_f16(b + 2, 0.001f + 0.01f * fabsf(frand()));
        }
    }
    if (lpo_dequantize(Q, row.data(), w.data(), (uint64_t)k) != LPO_OK) return 1;
    for (auto &v : x) v = bf16_value(frand() * 3);
    double ref = 0, mag = 0;
    for (int i = 0; i < k; i++) ref += (double)w[i] * x[i], mag += fabs((double)w[i] * x[i]);
    /* gemv_gguf.cu's walk of one row (one tile holding the whole row) */
    const int units = F::BLK == 32 ? (nb + 1) / 2 : nb * 4;
    float acc = 0;
    for (int u = 0; u < units; u++) {
        const int bi = gq_unit_block<Q>(u), p = gq_unit_part<Q>(u);
        const uint8_t *b = &row[(size_t)bi * F::BB];
        const int cu = bi * F::BLK + gq_unit_col<Q>(p);
        float D[F::SG], Mn[F::SG];
        uint32_t raw[F::NW];
        gq_scales<Q>(b, p, D, Mn);
        gq_load<Q>(b, p, raw);
        for (int s = 0; s < F::SG; s++) {
            if (F::BLK == 32 && bi + s >= nb) break;
            float S = 0, X = 0;
            for (int i = 0; i < F::GPS; i++) {
                const int c = cu + gq_col(s, i);
                float f[8];
                gq_group<Q>(raw, b, p, s, i, f);
                for (int e = 0; e < 8; e++) {
                    S = fmaf(f[e], x[c + e], S);
                    if (F::OFS) X += x[c + e];
                }
            }
            acc = fmaf(D[s], S, F::OFS ? fmaf(-Mn[s], X, acc) : acc);
        }
    }
    const double err = fabs(acc - ref) / mag;
    const int bad = !(err < 1e-5);
    printf("%-5s %-9s %3d blocks: reference %14.6f, unit walk %14.6f, |err| / sum |w x| %.2g %s\n", name,
           quantized ? "quantized" : "random", nb, ref, (double)acc, err, bad ? "FAIL" : "ok");
    return bad;
}

int main(void) {
    int fails = 0;
    for (int q = 0; q < 2; q++)
        for (int t = 0; t < 3; t++) { /* odd block counts: a 32-weight unit with one block */
            fails += check<LPO_DT_Q8_0>("q8_0", 9 + 64 * t, q);
            fails += check<LPO_DT_Q4_0>("q4_0", 9 + 64 * t, q);
            fails += check<LPO_DT_Q4_1>("q4_1", 10 + 63 * t, q);
            fails += check<LPO_DT_Q4_K>("q4_k", 3 + 16 * t, q);
            fails += check<LPO_DT_Q5_K>("q5_k", 3 + 16 * t, q);
            fails += check<LPO_DT_Q6_K>("q6_k", 3 + 16 * t, q);
        }
    printf("%d failures\n", fails);
    return fails != 0;
}
