/* The CPU reference kernels (see cpu_kernels.h): plain C, float32, OpenMP across rows. Each loop carries
 * its shape; every reduction has a fixed order independent of blocking, batch and thread count. */
#include "engine/cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>
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
                       int64_t m, int64_t nh, int64_t nkv, int64_t hd, int64_t max_context) {
    const int64_t row = (nh + 2 * nkv) * hd, kvd = nkv * hd;
    for (int64_t t = 0; t < m; t++) { // token t: k (kvd,), v (kvd,) -> cache[slot][pos]
        const size_t at = ((size_t)slot[t] * (size_t)max_context + (size_t)pos[t]) * (size_t)kvd;
        memcpy(kc + at, qkv + t * row + nh * hd, (size_t)kvd * sizeof(float));
        memcpy(vc + at, qkv + t * row + nh * hd + kvd, (size_t)kvd * sizeof(float));
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
    lpo_cpu_matmul(logits, x, G, NULL, m, E, h, nt);
    for (int64_t t = 0; t < m; t++) { // token t: logits (E,) -> ids (k,), w (k,)
        const float *l = logits + t * E;
        int32_t *id = ids + t * k;
        float mx = l[0];
        for (int64_t e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        double sum = 0;
        for (int64_t e = 0; e < E; e++) sum += (double)expf(l[e] - mx);
        for (int64_t j = 0; j < k;
             j++) { // rank j: the best expert not chosen yet (strict >: lower index wins)
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                int taken = 0;
                for (int64_t i = 0; i < j; i++) taken |= id[i] == (int32_t)e;
                if (!taken && (best < 0 || l[e] > l[best])) best = e;
            }
            id[j] = (int32_t)best;
        }
        double chosen = 0;
        for (int64_t j = 0; j < k; j++) { // probability of the rank-j expert
            w[t * k + j] = (float)((double)expf(l[id[j]] - mx) / sum);
            chosen += (double)w[t * k + j];
        }
        if (norm_topk)
            for (int64_t j = 0; j < k; j++) w[t * k + j] = (float)((double)w[t * k + j] / chosen);
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
