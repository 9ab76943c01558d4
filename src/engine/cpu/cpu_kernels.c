/* The CPU reference kernels (see cpu_kernels.h): plain C, float32, OpenMP across rows. Each loop carries
 * its shape; every reduction has a fixed order independent of blocking, batch and thread count. */
#include "engine/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

#include "lpo/dtype.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* Dot products keep 16 independent partial sums (lane j sums elements j, j+16, j+32, ...; the tail goes to
 * lanes 0..), then add the lanes in order. Every kernel below sums exactly this way, so the result of one
 * output never depends on blocking, batch size or which ISA version runs: they are compiled for AVX-512,
 * AVX2 and baseline x86-64 and picked at load time (ISO C mode: no FMA contraction, identical sums). */
typedef float v16f __attribute__((vector_size(64)));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LPO_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LPO_CPU_CLONES
#endif

#define LOAD16(v, p) memcpy(&(v), (p), sizeof(v16f))

static inline float finish16(const v16f *acc, const float *a, const float *b, int64_t i, int64_t n) {
    float lane[16];
    memcpy(lane, acc, sizeof lane);
    for (int j = 0; i < n; i++, j++) lane[j] += a[i] * b[i]; // tail elements -> lanes 0..
    float s = 0;
    for (int j = 0; j < 16; j++) s += lane[j];
    return s;
}

/* a (n,) . b (n,) -> scalar */
LPO_CPU_CLONES static float dot(const float *a, const float *b, int64_t n) {
    v16f acc = {0}, va, vb;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        LOAD16(va, a + i);
        LOAD16(vb, b + i);
        acc += va * vb;
    }
    return finish16(&acc, a, b, i, n);
}

/* The 4 x 2 dot products of W rows w[0..3] (stride k) with x rows x[0..1] (stride k) -> out[r][c], each
 * summed exactly as dot() sums it; every loaded W and x vector serves several outputs. */
LPO_CPU_CLONES static void dot4x2(const float *w, const float *x, int64_t k, float out[4][2]) {
    v16f a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) { // W rows (4, 16) x rows (2, 16) -> 8 lane-wise products
        v16f x0, x1, w0;
        LOAD16(x0, x + i);
        LOAD16(x1, x + k + i);
        LOAD16(w0, w + i);
        a00 += w0 * x0;
        a01 += w0 * x1;
        LOAD16(w0, w + k + i);
        a10 += w0 * x0;
        a11 += w0 * x1;
        LOAD16(w0, w + 2 * k + i);
        a20 += w0 * x0;
        a21 += w0 * x1;
        LOAD16(w0, w + 3 * k + i);
        a30 += w0 * x0;
        a31 += w0 * x1;
    }
    out[0][0] = finish16(&a00, w, x, i, k);
    out[0][1] = finish16(&a01, w, x + k, i, k);
    out[1][0] = finish16(&a10, w + k, x, i, k);
    out[1][1] = finish16(&a11, w + k, x + k, i, k);
    out[2][0] = finish16(&a20, w + 2 * k, x, i, k);
    out[2][1] = finish16(&a21, w + 2 * k, x + k, i, k);
    out[3][0] = finish16(&a30, w + 3 * k, x, i, k);
    out[3][1] = finish16(&a31, w + 3 * k, x + k, i, k);
}

/* y (m, n) = x (m, k) @ W^T, W (n, k) row-major (HF Linear layout), + bias (n,) when given.
 * Parallel over blocks of W rows; x rows in tiles so the tile stays in cache while W rows stream;
 * inside, 4 W rows x 2 x rows at a time (dot4x2), dot() for the edges. */
void lpo_cpu_matmul(float *y, const float *x, const float *W, const float *bias, int64_t m, int64_t n,
                    int64_t k, int nt) {
    const int64_t JB = 16, TB = 32;
    const int64_t nblk = (n + JB - 1) / JB;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t jb = 0; jb < nblk; jb++) {
        const int64_t j0 = jb * JB, j1 = j0 + JB < n ? j0 + JB : n;
        for (int64_t t0 = 0; t0 < m; t0 += TB) {
            const int64_t t1 = t0 + TB < m ? t0 + TB : m;
            int64_t j = j0;
            for (; j + 4 <= j1; j += 4) { // W rows j..j+3 (4, k)
                int64_t t = t0;
                for (; t + 2 <= t1; t += 2) { // x rows t, t+1 (2, k) -> y[t..t+1, j..j+3]
                    float o[4][2];
                    dot4x2(W + j * k, x + t * k, k, o);
                    for (int r = 0; r < 4; r++)
                        for (int c = 0; c < 2; c++)
                            y[(t + c) * n + j + r] = bias ? o[r][c] + bias[j + r] : o[r][c];
                }
                for (; t < t1; t++) // x row t (k,) -> y[t, j..j+3]
                    for (int r = 0; r < 4; r++) {
                        float v = dot(W + (j + r) * k, x + t * k, k);
                        y[t * n + j + r] = bias ? v + bias[j + r] : v;
                    }
            }
            for (; j < j1; j++) {                   // W row j (k,)
                for (int64_t t = t0; t < t1; t++) { // x row t (k,) -> y[t, j]
                    float v = dot(W + j * k, x + t * k, k);
                    y[t * n + j] = bias ? v + bias[j] : v;
                }
            }
        }
    }
}

/* y (n,) = x (n,) / sqrt(mean(x^2) + eps) * w (n,) (HF LlamaRMSNorm in f32; the sum in double). */
static void rms_row(float *y, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) y[i] = w[i] * (x[i] * r);
}

void lpo_cpu_rmsnorm(float *y, const float *x, const float *w, int64_t m, int64_t n, float eps, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt) if (m > 1)
    for (int64_t t = 0; t < m; t++) rms_row(y + t * n, x + t * n, w, n, eps); // row t (n,)
}

void lpo_cpu_embed(float *x, const float *E, const int32_t *tokens, int64_t m, int64_t h) {
    for (int64_t t = 0; t < m; t++) // E row tokens[t] (h,) -> x[t] (h,)
        memcpy(x + t * h, E + (int64_t)tokens[t] * h, (size_t)h * sizeof(float));
}

void lpo_cpu_qk_norm(float *qkv, const float *wq, const float *wk, int64_t m, int64_t nh, int64_t nkv,
                     int64_t hd, float eps, int nt) {
    const int64_t row = (nh + 2 * nkv) * hd;
#pragma omp parallel for schedule(static) num_threads(nt) if (m > 1)
    for (int64_t t = 0; t < m; t++) { // token t: q heads (nh, hd) then k heads (nkv, hd)
        float *r = qkv + t * row;
        for (int64_t h = 0; h < nh; h++) rms_row(r + h * hd, r + h * hd, wq, hd, eps);
        for (int64_t h = nh; h < nh + nkv; h++) rms_row(r + h * hd, r + h * hd, wk, hd, eps);
    }
}

void lpo_cpu_rope_tables(float *cos_t, float *sin_t, const float *inv_freq, float scale, int64_t n_pos,
                         int64_t half) {
    for (int64_t p = 0; p < n_pos; p++) {
        for (int64_t i = 0; i < half; i++) { // position p, frequency i
            const float a = (float)p * inv_freq[i];
            cos_t[p * half + i] = cosf(a) * scale;
            sin_t[p * half + i] = sinf(a) * scale;
        }
    }
}

void lpo_cpu_rope(float *qkv, const float *cos_t, const float *sin_t, const int64_t *pos, int64_t m,
                  int64_t nh, int64_t nkv, int64_t hd, int nt) {
    const int64_t half = hd / 2, row = (nh + 2 * nkv) * hd;
#pragma omp parallel for schedule(static) num_threads(nt) if (m > 1)
    for (int64_t t = 0; t < m; t++) { // token t: (nh + nkv) heads of hd
        const float *cs = cos_t + pos[t] * half, *sn = sin_t + pos[t] * half;
        for (int64_t h = 0; h < nh + nkv; h++) {
            float *v = qkv + t * row + h * hd;
            for (int64_t i = 0; i < half; i++) { // (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
                const float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * cs[i] - x2 * sn[i];
                v[i + half] = x2 * cs[i] + x1 * sn[i];
            }
        }
    }
}

void lpo_cpu_kv_append(float *kc, float *vc, const float *qkv, const int32_t *slot, const int64_t *pos,
                       int64_t m, int64_t nh, int64_t nkv, int64_t hd, int64_t max_context, int fp8) {
    const int64_t row = (nh + 2 * nkv) * hd, kvd = nkv * hd;
    for (int64_t t = 0; t < m; t++) { // token t: k (kvd,), v (kvd,) -> cache[slot][pos]
        const size_t at = ((size_t)slot[t] * (size_t)max_context + (size_t)pos[t]) * (size_t)kvd;
        memcpy(kc + at, qkv + t * row + nh * hd, (size_t)kvd * sizeof(float));
        memcpy(vc + at, qkv + t * row + nh * hd + kvd, (size_t)kvd * sizeof(float));
        for (int64_t h = 0; fp8 && h < nkv; h++) { // KV head h (hd,): its values through fp8 and its scale
            lpo_fp8_roundtrip_row(kc + at + h * hd, hd);
            lpo_fp8_roundtrip_row(vc + at + h * hd, hd);
        }
    }
}

void lpo_cpu_attention(float *att, const float *qkv, const float *kc, const float *vc, const int32_t *slot,
                       const int64_t *pos, int64_t m, int64_t nh, int64_t nkv, int64_t hd,
                       int64_t max_context, int64_t window, float *scores, int nt) {
    const int64_t group = nh / nkv, row = (nh + 2 * nkv) * hd, kvd = nkv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) collapse(2)
    for (int64_t t = 0; t < m; t++) {
        for (int64_t h = 0; h < nh; h++) { // query head h of token t attends to kv head h / group
#ifdef _OPENMP
            float *sc = scores + (size_t)omp_get_thread_num() * (size_t)max_context;
#else
            float *sc = scores;
#endif
            const int64_t p = pos[t], kh = h / group;
            const int64_t lo = window > 0 && p + 1 > window ? p + 1 - window : 0;
            const size_t base = (size_t)slot[t] * (size_t)max_context * (size_t)kvd + (size_t)kh * hd;
            const float *q = qkv + t * row + h * hd;
            float mx = -INFINITY;
            for (int64_t j = lo; j <= p; j++) { // q (hd,) . k_j (hd,) -> score j
                sc[j] = dot(q, kc + base + (size_t)j * kvd, hd) * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            float sum = 0;
            for (int64_t j = lo; j <= p; j++) {
                sc[j] = expf(sc[j] - mx);
                sum += sc[j];
            }
            const float inv = 1.0f / sum;
            float *o = att + t * nh * hd + h * hd;
            for (int64_t d = 0; d < hd; d++) o[d] = 0;
            for (int64_t j = lo; j <= p; j++) { // o (hd,) += p_j * v_j (hd,)
                const float pj = sc[j] * inv;
                const float *v = vc + base + (size_t)j * kvd;
                for (int64_t d = 0; d < hd; d++) o[d] += pj * v[d];
            }
        }
    }
}

void lpo_cpu_swiglu(float *act, const float *gu, int64_t m, int64_t I, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt) if (m > 1)
    for (int64_t t = 0; t < m; t++) {
        for (int64_t i = 0; i < I; i++) { // g, u -> g * sigmoid(g) * u
            const float g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
            act[t * I + i] = g / (1.0f + expf(-g)) * u;
        }
    }
}

void lpo_cpu_geglu(float *act, const float *gu, int64_t m, int64_t I, int nt) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f; /* sqrt(2/pi), as torch's tanh GELU */
#pragma omp parallel for schedule(static) num_threads(nt) if (m > 1)
    for (int64_t t = 0; t < m; t++) {
        for (int64_t i = 0; i < I; i++) { // g, u -> 0.5 g (1 + tanh(k0 (g + k1 g^3))) * u
            const float g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
            act[t * I + i] = 0.5f * g * (1.0f + tanhf(k0 * (g + k1 * g * g * g))) * u;
        }
    }
}

void lpo_cpu_add(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i]; // x (n,) += y (n,)
}

void lpo_cpu_add_rmsnorm(float *x, const float *y, float *xn, const float *w, int64_t m, int64_t n, float eps,
                         int nt) {
#pragma omp parallel for schedule(static) num_threads(nt) if (m > 1)
    for (int64_t t = 0; t < m; t++) { // row t: x (n,) += y (n,); xn (n,) = rmsnorm(x)
        float *xr = x + t * n;
        const float *yr = y + t * n;
        for (int64_t i = 0; i < n; i++) xr[i] += yr[i];
        rms_row(xn + t * n, xr, w, n, eps);
    }
}

void lpo_cpu_router(float *w, int32_t *ids, const float *x, const float *G, float *logits, int64_t m,
                    int64_t E, int64_t h, int64_t k, int norm_topk, int nt) {
    const lpo_cpu_routing r = {LPO_SCORE_SOFTMAX, LPO_TOPK_GREEDY, 1, 1, norm_topk, 1.0f, NULL};
    lpo_cpu_route(w, ids, x, G, logits, m, E, h, k, &r, nt);
}

static float sigmoidf(float v) {
    return 1.0f / (1.0f + expf(-v));
}

/* The value expert e is chosen by: its logit (softmax scores: the same order as the probabilities), or its
 * sigmoid score plus the correction bias (f32, as HF). */
static float choice_value(const float *l, const lpo_cpu_routing *r, int64_t e) {
    if (r->scoring != LPO_SCORE_SIGMOID) return l[e];
    const float sc = sigmoidf(l[e]);
    return r->bias ? sc + r->bias[e] : sc;
}

/* A group's score over its experts e0 .. e0 + n - 1: the best choice value (GROUP_LIMITED), or the sum of the
 * two best (NOAUX_TC: a tie counts twice). */
static float group_value(const float *l, const lpo_cpu_routing *r, int64_t e0, int64_t n) {
    float a = -INFINITY, b = -INFINITY;
    for (int64_t e = e0; e < e0 + n; e++) { // expert e of the group -> the two best values a >= b
        const float v = choice_value(l, r, e);
        if (v > a) {
            b = a;
            a = v;
        } else if (v > b) {
            b = v;
        }
    }
    return r->method == LPO_TOPK_NOAUX_TC ? a + b : a;
}

void lpo_cpu_route(float *w, int32_t *ids, const float *x, const float *G, float *logits, int64_t m,
                   int64_t E, int64_t h, int64_t k, const lpo_cpu_routing *r, int nt) {
    lpo_cpu_matmul(logits, x, G, NULL, m, E, h, nt);
    const int grouped = r->method != LPO_TOPK_GREEDY && r->n_group > 1;
    const int64_t ng = grouped ? r->n_group : 1, per = E / ng, tg = grouped ? r->topk_group : 1;
    unsigned char keep[LPO_CPU_MAX_GROUPS];
    for (int64_t t = 0; t < m; t++) { // token t: logits (E,) -> ids (k,), w (k,)
        const float *l = logits + t * E;
        int32_t *id = ids + t * k;
        memset(keep, !grouped, (size_t)ng);
        for (int64_t j = 0; grouped && j < tg;
             j++) { // rank j: the best group not kept yet (lower index wins)
            int64_t best = -1;
            float bv = 0;
            for (int64_t g = 0; g < ng; g++) {
                if (keep[g]) continue;
                const float v = group_value(l, r, g * per, per);
                if (best < 0 || v > bv) best = g, bv = v;
            }
            if (best >= 0) keep[best] = 1;
        }
        for (int64_t j = 0; j < k; j++) { // rank j: the best expert of a kept group not chosen yet (strict >:
                                          // lower index wins)
            int64_t best = -1;
            float bv = 0;
            for (int64_t e = 0; e < E; e++) {
                if (!keep[e / per]) continue;
                int taken = 0;
                for (int64_t i = 0; i < j; i++) taken |= id[i] == (int32_t)e;
                if (taken) continue;
                const float v = choice_value(l, r, e);
                if (best < 0 || v > bv) best = e, bv = v;
            }
            id[j] = (int32_t)best;
        }
        float *wt = w + t * k;
        double chosen = 0;
        if (r->scoring == LPO_SCORE_SIGMOID) {
            for (int64_t j = 0; j < k; j++) { // the rank-j expert's sigmoid score
                wt[j] = sigmoidf(l[id[j]]);
                chosen += (double)wt[j];
            }
            if (r->norm_topk) /* HF: w / (sum + 1e-20) */
                for (int64_t j = 0; j < k; j++) wt[j] = (float)((double)wt[j] / (chosen + 1e-20));
        } else {
            float mx = l[0];
            for (int64_t e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
            double sum = 0;
            for (int64_t e = 0; e < E; e++) sum += (double)expf(l[e] - mx);
            for (int64_t j = 0; j < k; j++) { // probability of the rank-j expert
                wt[j] = (float)((double)expf(l[id[j]] - mx) / sum);
                chosen += (double)wt[j];
            }
            if (r->norm_topk)
                for (int64_t j = 0; j < k; j++) wt[j] = (float)((double)wt[j] / chosen);
        }
        if (r->scale != 1.0f)
            for (int64_t j = 0; j < k; j++) wt[j] *= r->scale;
    }
}

int64_t lpo_cpu_experts_scratch_floats(int64_t m, int64_t h, int64_t I) {
    return m * (2 * h + 3 * I); /* gathered x, gate|up, act, expert output */
}

void lpo_cpu_experts(float *y, const float *x, const float *w, const int32_t *ids, const float *W, int64_t m,
                     int64_t h, int64_t I, int64_t E, int64_t k, float *scratch, int32_t *rows, int nt) {
    float *xg = scratch, *gu = xg + m * h, *act = gu + m * 2 * I, *o = act + m * I;
    memset(y, 0, (size_t)(m * h) * sizeof(float));
    for (int64_t e = 0; e < E; e++) {
        int64_t n = 0;
        for (int64_t r = 0; r < m * k; r++) // (token, rank) pairs that chose e -> rows[0..n)
            if (ids[r] == (int32_t)e) rows[n++] = (int32_t)r;
        if (!n) continue;
        for (int64_t i = 0; i < n; i++) // token of pair i (h,) -> xg[i]
            memcpy(xg + i * h, x + (rows[i] / k) * h, (size_t)h * sizeof(float));
        const float *We = W + e * 3 * I * h;
        lpo_cpu_matmul(gu, xg, We, NULL, n, 2 * I, h, nt);         // xg (n, h) @ gate_up^T (2I, h) -> (n, 2I)
        lpo_cpu_swiglu(act, gu, n, I, nt);                         // (n, 2I) -> (n, I)
        lpo_cpu_matmul(o, act, We + 2 * I * h, NULL, n, h, I, nt); // act (n, I) @ down^T (h, I) -> (n, h)
        for (int64_t i = 0; i < n; i++) {                          // y[token] (h,) += w[pair] * o[i]
            float *yt = y + (rows[i] / k) * h;
            const float wt = w[rows[i]];
            for (int64_t c = 0; c < h; c++) yt[c] += wt * o[i * h + c];
        }
    }
}

/* ---- vision -----------------------------------------------------------------------------------------------
 */

#define CONV_BLOCK 64 /* output pixels gathered per im2col block */

int64_t lpo_cpu_conv2d_scratch_floats(int64_t cin, int64_t ks) {
    return CONV_BLOCK * cin * ks * ks;
}

void lpo_cpu_conv2d(float *y, const float *x, const float *W, const float *bias, int64_t H, int64_t Wd,
                    int64_t cin, int64_t cout, int64_t ks, int64_t stride, int64_t pad, float *scratch,
                    int nt) {
    const int64_t Ho = (H + 2 * pad - ks) / stride + 1, Wo = (Wd + 2 * pad - ks) / stride + 1;
    const int64_t k = cin * ks * ks, n_out = Ho * Wo;
    for (int64_t p0 = 0; p0 < n_out; p0 += CONV_BLOCK) { // block of output pixels p0..p1
        const int64_t p1 = p0 + CONV_BLOCK < n_out ? p0 + CONV_BLOCK : n_out;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t p = p0; p < p1; p++) { // output pixel p -> its patch (cin, ks, ks) as one row of k
            const int64_t oy = p / Wo, ox = p % Wo;
            float *row = scratch + (p - p0) * k;
            for (int64_t c = 0; c < cin; c++)
                for (int64_t ky = 0; ky < ks; ky++)
                    for (int64_t kx = 0; kx < ks; kx++) { // tap (c, ky, kx)
                        const int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                        row[(c * ks + ky) * ks + kx] =
                            iy >= 0 && iy < H && ix >= 0 && ix < Wd ? x[(iy * Wd + ix) * cin + c] : 0.0f;
                    }
        }
        lpo_cpu_matmul(y + p0 * cout, scratch, W, bias, p1 - p0, cout, k, nt);
    }
}

void lpo_cpu_layernorm(float *y, const float *x, const float *w, const float *b, int64_t m, int64_t n,
                       float eps, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t t = 0; t < m; t++) { // row t (n,)
        const float *xr = x + t * n;
        double s = 0, ss = 0;
        for (int64_t i = 0; i < n; i++) s += xr[i];
        const double mean = s / (double)n;
        for (int64_t i = 0; i < n; i++) ss += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        const double inv = 1.0 / sqrt(ss / (double)n + (double)eps);
        for (int64_t i = 0; i < n; i++)
            y[t * n + i] = (float)(((double)xr[i] - mean) * inv) * w[i] + (b ? b[i] : 0.0f);
    }
}

void lpo_cpu_gelu(float *x, int64_t n, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < n; i++) // element i
        x[i] = (float)(0.5 * (double)x[i] * (1.0 + erf((double)x[i] * 0.70710678118654752440)));
}

/* Rows [0, out) of a table T (L, hd) resized by torch's linear interpolation (align_corners false). */
static void resize_table(float *dst, const float *T, int64_t L, int64_t out, int64_t hd) {
    if (L == out) {
        memcpy(dst, T, (size_t)(L * hd) * sizeof(float));
        return;
    }
    const float scale = (float)L / (float)out;
    for (int64_t i = 0; i < out; i++) { // output row i <- rows i0, i1 of T
        float src = scale * ((float)i + 0.5f) - 0.5f;
        if (src < 0) src = 0;
        int64_t i0 = (int64_t)src;
        if (i0 > L - 1) i0 = L - 1;
        float l1 = src - (float)i0;
        l1 = l1 < 0 ? 0 : l1 > 1 ? 1 : l1;
        const int64_t i1 = i0 + (i0 < L - 1);
        for (int64_t d = 0; d < hd; d++) dst[i * hd + d] = (1.0f - l1) * T[i0 * hd + d] + l1 * T[i1 * hd + d];
    }
}

int64_t lpo_cpu_attn_relpos_scratch_floats(int64_t grid, int64_t window, int64_t hd, int nt) {
    const int64_t span = window > 0 ? window : grid;
    return 2 * (2 * span - 1) * hd + (int64_t)nt * (span * span + 2 * span);
}

void lpo_cpu_attn_relpos(float *att, const float *qkv, const float *Rh, const float *Rw, int64_t L,
                         const float *bias, int64_t g, int64_t nh, int64_t hd, int64_t window, float *scratch,
                         int nt) {
    const int64_t C = nh * hd, span = window > 0 ? window : g, nwin = (g + span - 1) / span;
    const int64_t R = 2 * span - 1, keys = span * span;
    float *rh = scratch, *rw = scratch + R * hd;
    resize_table(rh, Rh, L, R, hd);
    resize_table(rw, Rw, L, R, hd);
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic) num_threads(nt)
    for (int64_t job = 0; job < nwin * nwin * nh; job++) { // (window wy, wx; head h)
#ifdef _OPENMP
        const int tid = omp_get_thread_num();
#else
        const int tid = 0;
#endif
        float *sc = scratch + 2 * R * hd + (int64_t)tid * (keys + 2 * span), *th = sc + keys, *tw = th + span;
        const int64_t h = job % nh, win = job / nh, wy = win / nwin, wx = win % nwin;
        for (int64_t qi = 0; qi < keys; qi++) { // query qi of the window (qy, qx)
            const int64_t qy = qi / span, qx = qi % span, gy = wy * span + qy, gx = wx * span + qx;
            if (gy >= g || gx >= g) continue; /* a padded query: its output is dropped */
            const float *q = qkv + (gy * g + gx) * 3 * C + h * hd;
            for (int64_t j = 0; j < span; j++) { // rel terms of key row j / key column j
                const float *a = rh + (qy - j + span - 1) * hd, *b2 = rw + (qx - j + span - 1) * hd;
                float sh = 0, sw = 0;
                for (int64_t d = 0; d < hd; d++) sh += q[d] * a[d], sw += q[d] * b2[d];
                th[j] = sh;
                tw[j] = sw;
            }
            float mx = -INFINITY;
            for (int64_t ki = 0; ki < keys; ki++) { // key ki (ky, kx): padded keys are the k bias
                const int64_t ky = ki / span, kx = ki % span, hy = wy * span + ky, hx = wx * span + kx;
                const float *k =
                    hy < g && hx < g ? qkv + (hy * g + hx) * 3 * C + C + h * hd : bias + C + h * hd;
                float s = 0;
                for (int64_t d = 0; d < hd; d++) s += q[d] * scale * k[d];
                s += th[ky] + tw[kx];
                sc[ki] = s;
                if (s > mx) mx = s;
            }
            double sum = 0;
            for (int64_t ki = 0; ki < keys; ki++) sum += sc[ki] = expf(sc[ki] - mx);
            const float inv = (float)(1.0 / sum);
            float *o = att + (gy * g + gx) * C + h * hd;
            for (int64_t d = 0; d < hd; d++) o[d] = 0;
            for (int64_t ki = 0; ki < keys; ki++) { // p v
                const int64_t ky = ki / span, kx = ki % span, hy = wy * span + ky, hx = wx * span + kx;
                const float *v =
                    hy < g && hx < g ? qkv + (hy * g + hx) * 3 * C + 2 * C + h * hd : bias + 2 * C + h * hd;
                const float p = sc[ki] * inv;
                for (int64_t d = 0; d < hd; d++) o[d] += p * v[d];
            }
        }
    }
}

int64_t lpo_cpu_attn_prefix_scratch_floats(int64_t m, int64_t nh, int64_t nkv, int64_t hd, int nt) {
    return m * (nh + nkv) * hd + (int64_t)nt * m;
}

void lpo_cpu_attn_prefix(float *att, const float *qkv, const float *cos_t, const float *sin_t, int64_t m,
                         int64_t nh, int64_t nkv, int64_t hd, int64_t prefix, float *scratch, int nt) {
    const int64_t w = (nh + 2 * nkv) * hd, qk = (nh + nkv) * hd, half = hd / 2, grp = nh / nkv;
    float *rot = scratch; /* rotated q | k rows (m, (nh + nkv) hd) */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t t = 0; t < m; t++) // row t: every q and k head rotated by position t
        for (int64_t hh = 0; hh < nh + nkv; hh++) {
            const float *x = qkv + t * w + hh * hd;
            float *r = rot + t * qk + hh * hd;
            for (int64_t i = 0; i < half; i++) {
                const float c = cos_t[t * half + i], s = sin_t[t * half + i];
                r[i] = x[i] * c - x[i + half] * s;
                r[i + half] = x[i + half] * c + x[i] * s;
            }
        }
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic) num_threads(nt)
    for (int64_t job = 0; job < m * nh; job++) { // (row t, head h)
#ifdef _OPENMP
        const int tid = omp_get_thread_num();
#else
        const int tid = 0;
#endif
        float *sc = scratch + m * qk + (int64_t)tid * m;
        const int64_t t = job / nh, h = job % nh, kvh = h / grp, n_keys = t < prefix ? prefix : t + 1;
        const float *q = rot + t * qk + h * hd;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n_keys; j++) { // key j
            const float *k = rot + j * qk + (nh + kvh) * hd;
            float s = 0;
            for (int64_t d = 0; d < hd; d++) s += q[d] * k[d];
            sc[j] = s * scale;
            if (sc[j] > mx) mx = sc[j];
        }
        double sum = 0;
        for (int64_t j = 0; j < n_keys; j++) sum += sc[j] = expf(sc[j] - mx);
        const float inv = (float)(1.0 / sum);
        float *o = att + t * nh * hd + h * hd;
        for (int64_t d = 0; d < hd; d++) o[d] = 0;
        for (int64_t j = 0; j < n_keys; j++) { // p v
            const float *v = qkv + j * w + (nh + nkv + kvh) * hd, p = sc[j] * inv;
            for (int64_t d = 0; d < hd; d++) o[d] += p * v[d];
        }
    }
}

int64_t lpo_cpu_pos_embed_scratch_floats(int64_t G, int64_t g, int64_t C) {
    return G == g ? 0 : g * G * C + g * g * C;
}

/* torch's antialiased bicubic weights of output i over an axis of `in` samples resized to `out`: taps from
 * *first, *n of them, into w (normalised). */
static void aa_weights(int64_t in, int64_t out, int64_t i, int64_t *first, int64_t *n, float *w) {
    const float scale = (float)in / (float)out;
    const float support = scale >= 1.0f ? 2.0f * scale : 2.0f, inv = scale >= 1.0f ? 1.0f / scale : 1.0f;
    const float center = scale * ((float)i + 0.5f);
    int64_t x0 = (int64_t)(center - support + 0.5f);
    if (x0 < 0) x0 = 0;
    int64_t x1 = (int64_t)(center + support + 0.5f);
    if (x1 > in) x1 = in;
    float total = 0;
    for (int64_t j = 0; j < x1 - x0; j++) { // tap j
        float x = fabsf(((float)(j + x0) - center + 0.5f) * inv);
        const float a = -0.5f;
        w[j] = x < 1.0f   ? ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f
               : x < 2.0f ? (((x - 5.0f) * x + 8.0f) * x - 4.0f) * a
                          : 0.0f;
        total += w[j];
    }
    for (int64_t j = 0; j < x1 - x0; j++) w[j] = total != 0.0f ? w[j] / total : w[j];
    *first = x0;
    *n = x1 - x0;
}

void lpo_cpu_pos_embed(float *x, const float *P, int64_t G, int64_t g, int64_t C, float *scratch, int nt) {
    const float *tab = P;
    if (G != g) {
        float *tmp = scratch, *res = scratch + g * G * C; /* (G rows, g cols, C), then (g, g, C) */
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t ox = 0; ox < g; ox++) { // output column ox over every source row (width pass)
            float w[64];
            int64_t f, n;
            aa_weights(G, g, ox, &f, &n, w);
            for (int64_t r = 0; r < G; r++)
                for (int64_t c = 0; c < C; c++) {
                    float s = 0;
                    for (int64_t j = 0; j < n; j++) s += w[j] * P[(r * G + f + j) * C + c];
                    tmp[(r * g + ox) * C + c] = s;
                }
        }
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t oy = 0; oy < g; oy++) { // output row oy (height pass)
            float w[64];
            int64_t f, n;
            aa_weights(G, g, oy, &f, &n, w);
            for (int64_t ox = 0; ox < g; ox++)
                for (int64_t c = 0; c < C; c++) {
                    float s = 0;
                    for (int64_t j = 0; j < n; j++) s += w[j] * tmp[((f + j) * g + ox) * C + c];
                    res[(oy * g + ox) * C + c] = s;
                }
        }
        tab = res;
    }
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < g * g * C; i++) x[i] += tab[i]; // element i
}

/* ---- multi-head latent attention ------------------------------------------------------------------------
 */
int64_t lpo_cpu_mla_scratch_floats(int64_t m, int64_t nh, int64_t dn, int64_t dr, int64_t dv, int64_t r,
                                   int64_t max_context, int nt) {
    return m * nh * dr + (int64_t)nt * (max_context + 2 * r) + max_context * (r + nh * (dn + dv));
}

/* Rotates v (dr,) by position p: pairs (2i, 2i+1) when interleaved (deepseek's layout), else (i, i + dr/2).
 */
static void rope_vec(float *v, const float *cs, const float *sn, int64_t dr, int interleave) {
    const int64_t half = dr / 2;
    for (int64_t i = 0; i < half; i++) { // pair i: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
        const int64_t a = interleave ? 2 * i : i, b = interleave ? 2 * i + 1 : i + half;
        const float x1 = v[a], x2 = v[b];
        v[a] = x1 * cs[i] - x2 * sn[i];
        v[b] = x2 * cs[i] + x1 * sn[i];
    }
}

void lpo_cpu_mla_attention(float *att, const float *q, const float *kva, float *cache, const float *wn,
                           const float *Wkvb, const float *cos_t, const float *sin_t, const int32_t *slot,
                           const int64_t *pos, int64_t m, int64_t nh, int64_t dn, int64_t dr, int64_t dv,
                           int64_t r, int64_t max_context, float eps, int interleave, float scale,
                           int absorbed, float *scratch, int nt) {
    const int64_t row = r + dr, qw = dn + dr, half = dr / 2, kvw = dn + dv;
    for (int64_t t = 0; t < m; t++) { // token t: rmsnorm(latent) (r,), rope(k_pe) (dr,) -> cache[slot][pos]
        float *c = cache + ((size_t)slot[t] * (size_t)max_context + (size_t)pos[t]) * (size_t)row;
        rms_row(c, kva + t * row, wn, r, eps);
        memcpy(c + r, kva + t * row + r, (size_t)dr * sizeof(float));
        rope_vec(c + r, cos_t + pos[t] * half, sin_t + pos[t] * half, dr, interleave);
    }
    float *qp = scratch, *thr = qp + m * nh * dr, *exp_kv = thr + (int64_t)nt * (max_context + 2 * r);
    for (int64_t t = 0; t < m; t++) // token t, head h: q's rope part (dr,) rotated -> qp[t][h]
        for (int64_t h = 0; h < nh; h++) {
            float *v = qp + (t * nh + h) * dr;
            memcpy(v, q + t * nh * qw + h * qw + dn, (size_t)dr * sizeof(float));
            rope_vec(v, cos_t + pos[t] * half, sin_t + pos[t] * half, dr, interleave);
        }
    if (absorbed) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) collapse(2)
        for (int64_t t = 0; t < m; t++) {
            for (int64_t h = 0; h < nh; h++) { // head h of token t over its slot's latent cache
#ifdef _OPENMP
                float *sc = thr + (size_t)omp_get_thread_num() * (size_t)(max_context + 2 * r);
#else
                float *sc = thr;
#endif
                float *ql = sc + max_context, *ol = ql + r;
                const float *qn = q + t * nh * qw + h * qw, *qr = qp + (t * nh + h) * dr;
                const float *Wk = Wkvb + h * kvw * r, *Wv = Wk + dn * r;
                for (int64_t c = 0; c < r; c++) ql[c] = 0;
                for (int64_t i = 0; i < dn; i++) // ql (r,) += q_nope[i] * W_UK row i (r,)
                    for (int64_t c = 0; c < r; c++) ql[c] += qn[i] * Wk[i * r + c];
                const float *base = cache + (size_t)slot[t] * (size_t)max_context * (size_t)row;
                float mx = -INFINITY;
                for (int64_t j = 0; j <= pos[t]; j++) { // (ql . c_j + q_rope . k_rope_j) * scale -> score j
                    const float *cj = base + (size_t)j * (size_t)row;
                    sc[j] = (dot(ql, cj, r) + dot(qr, cj + r, dr)) * scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                float sum = 0;
                for (int64_t j = 0; j <= pos[t]; j++) {
                    sc[j] = expf(sc[j] - mx);
                    sum += sc[j];
                }
                const float inv = 1.0f / sum;
                for (int64_t c = 0; c < r; c++) ol[c] = 0;
                for (int64_t j = 0; j <= pos[t]; j++) { // ol (r,) += p_j c_j
                    const float pj = sc[j] * inv, *cj = base + (size_t)j * (size_t)row;
                    for (int64_t c = 0; c < r; c++) ol[c] += pj * cj[c];
                }
                float *o = att + t * nh * dv + h * dv;
                for (int64_t d = 0; d < dv; d++) o[d] = dot(Wv + d * r, ol, r); // W_UV row d (r,) . ol
            }
        }
        return;
    }
    /* expanded: per slot, kv_b over its cached rows 0..the last position of its tokens, then attention */
    float *lat = exp_kv, *kv = lat + max_context * r;
    for (int64_t t0 = 0; t0 < m; t0++) {
        int seen = 0;
        for (int64_t u = 0; u < t0; u++) seen |= slot[u] == slot[t0];
        if (seen) continue;
        int64_t n = 0;
        for (int64_t u = t0; u < m; u++)
            if (slot[u] == slot[t0] && pos[u] + 1 > n) n = pos[u] + 1;
        const float *base = cache + (size_t)slot[t0] * (size_t)max_context * (size_t)row;
        for (int64_t j = 0; j < n; j++) // latent of row j (r,) -> lat[j]
            memcpy(lat + j * r, base + (size_t)j * (size_t)row, (size_t)r * sizeof(float));
        lpo_cpu_matmul(kv, lat, Wkvb, NULL, n, nh * kvw, r, nt); // lat (n, r) @ kv_b^T -> (n, nh (dn + dv))
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) collapse(2)
        for (int64_t t = t0; t < m; t++) {
            for (int64_t h = 0; h < nh; h++) { // head h of token t (of this slot) over the expanded rows
                if (slot[t] != slot[t0]) continue;
#ifdef _OPENMP
                float *sc = thr + (size_t)omp_get_thread_num() * (size_t)(max_context + 2 * r);
#else
                float *sc = thr;
#endif
                const float *qn = q + t * nh * qw + h * qw, *qr = qp + (t * nh + h) * dr;
                float mx = -INFINITY;
                for (int64_t j = 0; j <= pos[t]; j++) { // (q_nope . k_nope_j + q_rope . k_rope_j) * scale
                    const float *kj = kv + j * nh * kvw + h * kvw;
                    sc[j] = (dot(qn, kj, dn) + dot(qr, base + (size_t)j * (size_t)row + r, dr)) * scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                float sum = 0;
                for (int64_t j = 0; j <= pos[t]; j++) {
                    sc[j] = expf(sc[j] - mx);
                    sum += sc[j];
                }
                const float inv = 1.0f / sum;
                float *o = att + t * nh * dv + h * dv;
                for (int64_t d = 0; d < dv; d++) o[d] = 0;
                for (int64_t j = 0; j <= pos[t]; j++) { // o (dv,) += p_j v_j
                    const float pj = sc[j] * inv, *vj = kv + j * nh * kvw + h * kvw + dn;
                    for (int64_t d = 0; d < dv; d++) o[d] += pj * vj[d];
                }
            }
        }
    }
}
