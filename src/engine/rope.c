/* RoPE inverse frequencies, computed as HF transformers' rope init functions do (default, linear, llama3,
 * yarn), so every backend rotates q and k by the same angles as the reference implementation. */
#include <math.h>

#include "lpo/ops.h"

static double yarn_mscale(double scale) {
    return scale <= 1 ? 1.0 : 0.1 * log(scale) + 1.0;
}

static double yarn_mscale_m(double scale, double m) {
    return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* dimension index at which a frequency completes num_rot rotations over max_pos positions (HF yarn) */
static double yarn_correction_dim(double num_rot, double dim, double base, double max_pos) {
    return dim * log(max_pos / (num_rot * 2 * M_PI)) / (2 * log(base));
}

lpo_status lpo_rope_inv_freq(const lpo_model_spec *s, float *inv_freq, float *attn_scale) {
    const int64_t dim = s->head_dim, half = dim / 2;
    const double base = s->rope.theta > 0 ? s->rope.theta : 10000.0;
    if (dim <= 0 || dim % 2)
        return lpo_errorf(LPO_E_INVALID, "RoPE: head_dim %lld must be even and positive", (long long)dim);
    *attn_scale = 1.0f;
    /* HF: inv_freq = 1 / base ** (arange(0, dim, 2).float() / dim), all in float32 */
    for (int64_t i = 0; i < half; i++) {
        float expo = (float)(2 * i) / (float)dim;
        inv_freq[i] = (float)(1.0 / (double)powf((float)base, expo));
    }
    const double factor = s->rope.factor > 0 ? s->rope.factor : 1.0;
    /* a GGUF's llama3 table (llama.cpp's per-frequency divisors) stands for the formula */
    const int table = s->rope.scaling == LPO_ROPE_LLAMA3 && s->rope.n_freq_factors > 0;
    if (table) {
        if (s->rope.n_freq_factors != half)
            return lpo_errorf(LPO_E_INVALID, "RoPE: %d frequency factors for head_dim %lld (need %lld)",
                              s->rope.n_freq_factors, (long long)dim, (long long)half);
        for (int64_t i = 0; i < half; i++) inv_freq[i] = inv_freq[i] / s->rope.freq_factors[i];
    }
    switch (table ? LPO_ROPE_NONE : s->rope.scaling) {
    case LPO_ROPE_NONE: break;
    case LPO_ROPE_LINEAR:
        for (int64_t i = 0; i < half; i++) inv_freq[i] = inv_freq[i] / (float)factor;
        break;
    case LPO_ROPE_LLAMA3: {
        const double old_ctx = (double)s->rope.original_max_positions;
        const double lo = s->rope.low_freq_factor, hi = s->rope.high_freq_factor;
        if (old_ctx <= 0 || hi <= lo)
            return lpo_errorf(LPO_E_INVALID,
                              "RoPE llama3 scaling needs original_max_position_embeddings > 0 and "
                              "high_freq_factor > low_freq_factor (got %g, %g, %g)",
                              old_ctx, lo, hi);
        const double low_wavelen = old_ctx / lo, high_wavelen = old_ctx / hi;
        for (int64_t i = 0; i < half; i++) {
            const float f = inv_freq[i];
            const double wavelen = 2 * M_PI / (double)f;
            float v = wavelen > low_wavelen ? f / (float)factor : f; /* low frequencies: interpolate */
            if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
                /* medium frequencies: smooth blend of the two */
                const float smooth = (float)((old_ctx / wavelen - lo) / (hi - lo));
                v = (1 - smooth) * v / (float)factor + smooth * v;
            }
            inv_freq[i] = v;
        }
        break;
    }
    case LPO_ROPE_YARN: {
        const double orig = s->rope.original_max_positions > 0 ? (double)s->rope.original_max_positions
                                                               : (double)s->max_positions;
        const double beta_fast = s->rope.beta_fast > 0 ? s->rope.beta_fast : 32;
        const double beta_slow = s->rope.beta_slow > 0 ? s->rope.beta_slow : 1;
        double low = yarn_correction_dim(beta_fast, (double)dim, base, orig);
        double high = yarn_correction_dim(beta_slow, (double)dim, base, orig);
        if (!s->rope.no_truncate) low = floor(low), high = ceil(high);
        if (low < 0) low = 0;
        if (high > (double)(dim - 1)) high = (double)(dim - 1);
        if (low == high) high += 0.001;
        for (int64_t i = 0; i < half; i++) {
            const float pos_freq =
                powf((float)base, (float)(2 * i) / (float)dim); /* base ** (2i / dim), f32 */
            const float extrap = 1.0f / pos_freq, interp = 1.0f / ((float)factor * pos_freq);
            float ramp = (float)(((double)i - low) / (high - low));
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            const float extrap_factor = 1 - ramp;
            inv_freq[i] = interp * (1 - extrap_factor) + extrap * extrap_factor;
        }
        /* HF: attention_factor, else mscale(f, mscale) / mscale(f, mscale_all_dim) when both are set
         * (deepseek), else mscale(f) */
        const double ms = s->rope.mscale, msa = s->rope.mscale_all_dim;
        const double deep = ms != 0 && msa != 0 ? yarn_mscale_m(factor, ms) / yarn_mscale_m(factor, msa) : 0;
        *attn_scale = (float)(s->rope.attn_factor > 0 ? s->rope.attn_factor
                              : deep > 0              ? deep
                                                      : yarn_mscale(factor));
        break;
    }
    default: return lpo_errorf(LPO_E_UNSUPPORTED, "RoPE: unknown scaling type %d", (int)s->rope.scaling);
    }
    /* extreme parameters (a tiny scaling factor, ...) overflow float32: refuse rather than rotate by NaN */
    for (int64_t i = 0; i < half; i++)
        if (!isfinite(inv_freq[i]) || !(inv_freq[i] > 0))
            return lpo_errorf(
                LPO_E_RANGE,
                "RoPE: theta %g with scaling factor %g gives inverse frequency %g at index %lld (not "
                "a positive float32): check the model's rope parameters",
                base, factor, (double)inv_freq[i], (long long)i);
    if (!isfinite(*attn_scale) || !(*attn_scale > 0))
        return lpo_errorf(LPO_E_RANGE,
                          "RoPE: attention scaling %g is not a positive float32 (rope attn_factor)",
                          (double)*attn_scale);
    return LPO_OK;
}
