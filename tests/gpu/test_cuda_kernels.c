/* GPU test (label "gpu"): every CUDA kernel launcher of src/engine/cuda/cuda_kernels.h against its CPU
 * reference (src/engine/cpu/cpu_kernels.h, lpo_dequantize, lpo_model_tensor_f32) in f32, f16 and bf16, on
 * fresh random data (the seed is printed; LPO_TEST_SEED=<n> repeats a run), outputs poisoned with NaN first
 * so unwritten elements fail, odd and edge sizes (1 token, widths that are not multiples of 16, head_dim 64
 * / 128 / 256, GQA groups 1 / 4 / 8 / 12, context 1 and longer than a tile, several sequences packed in one
 * step, sliding windows). Per dtype, every element must satisfy |got - ref| <= atol * rms(ref) + rtol *
 * |ref|, and the normalized MSE must stay under a bound; NaN/Inf fail. Conversions are bit-exact.
 * Every failing case is reported (the test goes on and fails at the end), so one GPU run shows them all.
 * Then test_timing measures the main kernels at Llama-3.1-8B shapes (bf16; CUDA events, warm-up, median of
 * 21 samples of 10 launches, weights and caches rotated past the L2) and prints achieved GB/s or TFLOP/s
 * against the floor; LPO_TEST_BENCH=0 skips it (sanitizer runs). Prints SKIP and exits 77 without a GPU.
 * Attention runs each case over an fp8 cache too (engine.kv_dtype=fp8; head_dim >= 32), against the CPU
 * reference on the cache's dequantized values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "engine/cpu/cpu_kernels.h"
#include "engine/cuda/cuda_kernels.h"
#include "lpo/gguf.h"
#include "lpo/model.h"
#include "lpo/sampling.h"
#include "test_gpu.h"
#include "test_support.h"

static const lpo_dtype DTS[3] = {LPO_DT_F32, LPO_DT_F16, LPO_DT_BF16};
static int g_failures; /* failing checks in the current test function */

/* ---- random data ---------------------------------------------------------------------------------- */
static uint64_t g_rng;
static uint64_t rng_u64(void) {
    return lpo_test_rand(&g_rng);
}
static float frand(float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_u64() >> 40) * (1.0 / 16777216.0));
}
static int64_t irand(int64_t n) {
    return (int64_t)(rng_u64() % (uint64_t)n);
}

static float round_dt(float v, lpo_dtype dt) {
    if (dt == LPO_DT_BF16) return lpo_bf16_to_f32(lpo_f32_to_bf16(v));
    if (dt == LPO_DT_F16) return lpo_f16_to_f32(lpo_f32_to_f16(v));
    return v;
}
static size_t dt_size(lpo_dtype dt) {
    return dt == LPO_DT_F32 ? 4 : 2;
}

/* n values uniform in [lo, hi), rounded to dt (so the CPU reference sees exactly what the GPU sees) */
static float *rand_vec(size_t n, float lo, float hi, lpo_dtype dt) {
    float *v = malloc((n ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) v[i] = round_dt(frand(lo, hi), dt);
    return v;
}

/* ---- device buffers (freed at the end of each test) ------------------------------------------------ */
static void *g_dev[512];
static int g_ndev;
static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 16));
    assert_true(g_ndev < 512);
    g_dev[g_ndev++] = p;
    return p;
}
static void dev_free_all(void) {
    for (int i = 0; i < g_ndev; i++) cudaFree(g_dev[i]);
    g_ndev = 0;
}
/* NaN in every dtype (0xffff / 0xffffffff) */
static void *dev_poison(size_t n, lpo_dtype dt) {
    void *p = dev_alloc(n * dt_size(dt));
    CK(cudaMemset(p, 0xff, n * dt_size(dt)));
    return p;
}
static void host_to_dt(void *dst, const float *h, size_t n, lpo_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        if (dt == LPO_DT_F32) ((float *)dst)[i] = h[i];
        if (dt == LPO_DT_F16) ((uint16_t *)dst)[i] = lpo_f32_to_f16(h[i]);
        if (dt == LPO_DT_BF16) ((uint16_t *)dst)[i] = lpo_f32_to_bf16(h[i]);
    }
}
static void *dev_upload(const float *h, size_t n, lpo_dtype dt) {
    void *d = dev_alloc(n * dt_size(dt)), *tmp = malloc(n * dt_size(dt) + 1);
    assert_non_null(tmp);
    host_to_dt(tmp, h, n, dt);
    CK(cudaMemcpy(d, tmp, n * dt_size(dt), cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}
static void *dev_copy(const void *h, size_t bytes) {
    void *d = dev_alloc(bytes);
    CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static float *dev_download(const void *d, size_t n, lpo_dtype dt) {
    CK(cudaDeviceSynchronize());
    void *tmp = malloc(n * dt_size(dt) + 1);
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_true(tmp && h);
    CK(cudaMemcpy(tmp, d, n * dt_size(dt), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        if (dt == LPO_DT_F32) h[i] = ((float *)tmp)[i];
        if (dt == LPO_DT_F16) h[i] = lpo_f16_to_f32(((uint16_t *)tmp)[i]);
        if (dt == LPO_DT_BF16) h[i] = lpo_bf16_to_f32(((uint16_t *)tmp)[i]);
    }
    free(tmp);
    return h;
}

/* ---- comparison ------------------------------------------------------------------------------------ */
typedef struct {
    double atol, rtol, nmse; /* atol is relative to rms(ref) */
} tol_t;
static tol_t tol_of(lpo_dtype dt) {
    if (dt == LPO_DT_F32) return (tol_t){2e-5, 1e-4, 1e-9};
    if (dt == LPO_DT_F16) return (tol_t){3e-3, 3e-3, 2e-6};
    return (tol_t){2e-2, 2e-2, 1e-4};
}

/* got vs ref (n): prints one line; counts a failure on NaN/Inf, an element out of tolerance or the NMSE */
static void check_close(const char *what, const float *got, const float *ref, size_t n, lpo_dtype dt) {
    const tol_t t = tol_of(dt);
    double ss = 0, se = 0, max_err = 0;
    size_t bad = 0, first_bad = n, nonfinite = 0, at = 0;
    for (size_t i = 0; i < n; i++) ss += (double)ref[i] * ref[i];
    const double rms = n ? sqrt(ss / (double)n) : 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) {
            if (!nonfinite++ && first_bad == n) first_bad = i;
            continue;
        }
        const double e = fabs((double)got[i] - ref[i]);
        se += e * e;
        if (e > max_err) max_err = e, at = i;
        if (e > t.atol * rms + t.rtol * fabs(ref[i])) {
            if (!bad++ && first_bad == n) first_bad = i;
        }
    }
    const double nmse = ss > 0 ? se / ss : se;
    const int fail = nonfinite || bad || nmse > t.nmse;
    printf("  %-4s %-58s n=%-8zu max_err %.2e (at %zu, ref rms %.2e) nmse %.2e%s\n", lpo_dtype_name(dt), what,
           n, max_err, at, rms, nmse, fail ? "  FAIL" : "");
    if (fail) {
        g_failures++;
        printf("       %zu non-finite, %zu out of tolerance; first at %zu: got %g, want %g\n", nonfinite, bad,
               first_bad, first_bad < n ? (double)got[first_bad] : 0.0,
               first_bad < n ? (double)ref[first_bad] : 0.0);
    }
}

/* bit-exact equality (conversions) */
static void check_exact(const char *what, const float *got, const float *ref, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], sizeof(float))) {
            if (!bad++) first = i;
        }
    printf("  %-63s n=%-8zu %s\n", what, n, bad ? "FAIL" : "bit-exact");
    if (bad) {
        g_failures++;
        printf("       %zu differ; first at %zu: got %.9g, want %.9g\n", bad, first, (double)got[first],
               (double)ref[first]);
    }
}

static void end_checks(const char *test) {
    dev_free_all();
    if (g_failures) fail_msg("%s: %d failing checks (see FAIL lines above)", test, g_failures);
}

/* ---- conversions --------------------------------------------------------------------------------- */
/* GGUF Q/K rows of a head -> HF order (as model.c's unpermute_rows), f32 rows of cols */
static void unpermute_ref(float *dst, const float *src, int64_t rows, int64_t cols, int heads) {
    const int64_t hd = rows / heads, half = hd / 2;
    for (int64_t r = 0; r < rows; r++) { // dst row r (cols,) <- src row of its GGUF position
        const int64_t h = r / hd, rr = r % hd, sr = h * hd + 2 * (rr % half) + rr / half;
        memcpy(dst + r * cols, src + sr * cols, (size_t)cols * sizeof(float));
    }
}

/* dsrc (rows, cols) stored as src_dt, whose exact f32 values are `vals`: lpo_cuda_convert to each compute
 * dtype (un-permuting `heads` when > 0) must give vals (un-permuted) rounded to that dtype, bit for bit */
static void check_convert_all(const void *dsrc, lpo_dtype src_dt, const float *vals, int64_t rows,
                              int64_t cols, int heads) {
    const int64_t n = rows * cols;
    float *want = malloc((size_t)n * sizeof *want), *ref = malloc((size_t)n * sizeof *ref);
    if (heads)
        unpermute_ref(want, vals, rows, cols, heads);
    else
        memcpy(want, vals, (size_t)n * sizeof *want);
    for (int b = 0; b < 3; b++) {
        void *dst = dev_poison((size_t)n, DTS[b]);
        OK(lpo_cuda_convert(dst, DTS[b], dsrc, src_dt, rows, cols, heads, 0));
        float *got = dev_download(dst, (size_t)n, DTS[b]);
        for (int64_t i = 0; i < n; i++) ref[i] = round_dt(want[i], DTS[b]);
        char what[96];
        snprintf(what, sizeof what, "convert %s -> %s (%lld x %lld, unpermute %d)", lpo_dtype_name(src_dt),
                 lpo_dtype_name(DTS[b]), (long long)rows, (long long)cols, heads);
        check_exact(what, got, ref, (size_t)n);
        free(got);
    }
    free(want);
    free(ref);
}

static void test_convert(void **state) {
    (void)state;
    g_failures = 0;
    const int64_t shapes[3][3] = {{37, 129, 0}, {1, 8, 0}, {64, 40, 4}}; // rows, cols, unpermute heads
    for (int s = 0; s < 3; s++) {
        const int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        const int heads = (int)shapes[s][2];
        for (int a = 0; a < 3; a++) {
            float *src = rand_vec((size_t)n, -4.f, 4.f, DTS[a]);
            check_convert_all(dev_upload(src, (size_t)n, DTS[a]), DTS[a], src, rows, cols, heads);
            free(src);
        }
    }
    end_checks("convert");
}

/* random blocks of a GGUF type with finite f16 scales */
static uint8_t *rand_blocks(lpo_dtype q, int64_t n) {
    const int64_t nb = n / lpo_dtype_block(q), bb = lpo_dtype_block_bytes(q);
    uint8_t *b = malloc((size_t)(nb * bb));
    assert_non_null(b);
    for (int64_t i = 0; i < nb * bb; i++) b[i] = (uint8_t)rng_u64();
    for (int64_t i = 0; i < nb; i++) { // overwrite the f16 scale fields with finite values
        uint8_t *blk = b + i * bb;
        const uint16_t d = lpo_f32_to_f16(frand(1e-3f, 0.1f)), d2 = lpo_f32_to_f16(frand(-0.1f, 0.1f));
        const int at = q == LPO_DT_Q6_K ? 208 : 0;
        memcpy(blk + at, &d, 2);
        if (q == LPO_DT_Q4_1 || q == LPO_DT_Q4_K) memcpy(blk + 2, &d2, 2);
    }
    return b;
}

static void test_dequant(void **state) {
    (void)state;
    g_failures = 0;
    const lpo_dtype qs[5] = {LPO_DT_Q8_0, LPO_DT_Q4_0, LPO_DT_Q4_1, LPO_DT_Q4_K, LPO_DT_Q6_K};
    for (int qi = 0; qi < 5; qi++) {
        const int64_t rows = 8, cols = 512, n = rows * cols;
        uint8_t *blocks = rand_blocks(qs[qi], n);
        void *dsrc = dev_copy(blocks, lpo_dtype_bytes(qs[qi], (uint64_t)n));
        float *deq = malloc((size_t)n * sizeof *deq);
        OK(lpo_dequantize(qs[qi], blocks, deq, (uint64_t)n));
        for (int heads = 0; heads <= 2; heads += 2) check_convert_all(dsrc, qs[qi], deq, rows, cols, heads);
        free(blocks);
        free(deq);
    }
    end_checks("dequant");
}

/* ---- synthetic weights: lpo_cuda_synth_fill from a weight view's (key, center, amp) == lpo_model_tensor_f32
 */
static void test_synth(void **state) {
    (void)state;
    g_failures = 0;
    for (int a = 0; a < 3; a++) { // stored dtype of the synthetic model
        lpo_model_spec s;
        memset(&s, 0, sizeof s);
        s.arch = LPO_ARCH_QWEN2;
        snprintf(s.name, sizeof s.name, "synth-test");
        s.vocab_size = 300, s.hidden_size = 96, s.n_layers = 2, s.n_heads = 6, s.n_kv_heads = 2,
        s.head_dim = 16;
        s.intermediate_size = 200, s.max_positions = 64, s.norm_eps = 1e-6f, s.rope.theta = 10000;
        s.qkv_bias = 1, s.dtype = DTS[a], s.bos_id = -1;
        const uint64_t seed = rng_u64();
        lpo_model *m = NULL;
        OK(lpo_model_open_synthetic(&s, seed, &m));
        for (size_t i = 0; i < lpo_model_n_tensors(m); i++) {
            const lpo_tensor *t = lpo_model_tensor_at(m, i);
            if (i % 3 && !strstr(t->name, "norm") && !strstr(t->name, "bias"))
                continue; // a sample of each role
            const int64_t n = (int64_t)lpo_tensor_numel(t);
            float *want = malloc((size_t)n * sizeof *want);
            OK(lpo_model_tensor_f32(m, t, want));
            lpo_weight_view v;
            OK(lpo_model_weight_view(m, t->name, &v));
            for (int b = 0; b < 3; b++) {
                void *dst = dev_poison((size_t)n, DTS[b]);
                OK(lpo_cuda_synth_fill(dst, DTS[b], n, v.synth_key, v.synth_center, v.synth_amp, v.dtype, 0));
                float *got = dev_download(dst, (size_t)n, DTS[b]), *ref = malloc((size_t)n * sizeof *ref);
                for (int64_t k = 0; k < n; k++) ref[k] = round_dt(want[k], DTS[b]);
                char what[120];
                snprintf(what, sizeof what, "synth %.40s %s -> %s", t->name, lpo_dtype_name(t->dtype),
                         lpo_dtype_name(DTS[b]));
                check_exact(what, got, ref, (size_t)n);
                free(got);
                free(ref);
            }
            free(want);
        }
        lpo_model_close(m);
    }
    end_checks("synth");
}

/* ---- embedding, norms, elementwise ----------------------------------------------------------------- */
static void test_embed(void **state) {
    (void)state;
    g_failures = 0;
    const int64_t cases[4][2] = {{1, 64}, {7, 100}, {3, 4096}, {5, 37}}; // m, h
    for (int d = 0; d < 3; d++) {
        for (int c = 0; c < 4; c++) {
            const int64_t m = cases[c][0], h = cases[c][1], vocab = 50;
            float *E = rand_vec((size_t)(vocab * h), -1.f, 1.f, DTS[d]);
            int32_t tok[8];
            for (int64_t t = 0; t < m; t++) tok[t] = (int32_t)irand(vocab);
            tok[m - 1] = (int32_t)(vocab - 1);
            void *dE = dev_upload(E, (size_t)(vocab * h), DTS[d]), *dx = dev_poison((size_t)(m * h), DTS[d]);
            int32_t *dtok = dev_copy(tok, sizeof tok);
            OK(lpo_cuda_embed(dx, dE, dtok, m, h, vocab, DTS[d], 0));
            float *got = dev_download(dx, (size_t)(m * h), DTS[d]),
                  *ref = malloc((size_t)(m * h) * sizeof *ref);
            lpo_cpu_embed(ref, E, tok, m, h);
            char what[64];
            snprintf(what, sizeof what, "embed m %lld h %lld", (long long)m, (long long)h);
            check_close(what, got, ref, (size_t)(m * h), DTS[d]);
            // an id out of range gives NaN, never a read out of bounds
            tok[0] = (int32_t)vocab;
            CK(cudaMemcpy(dtok, tok, sizeof tok, cudaMemcpyHostToDevice));
            OK(lpo_cuda_embed(dx, dE, dtok, m, h, vocab, DTS[d], 0));
            float *bad = dev_download(dx, (size_t)h, DTS[d]);
            int nan_row = 1;
            for (int64_t i = 0; i < h; i++) nan_row &= isnan(bad[i]) != 0;
            if (!nan_row) {
                printf("  embed: id %lld (out of range) did not give a NaN row  FAIL\n", (long long)vocab);
                g_failures++;
            }
            free(bad);
            free(E);
            free(got);
            free(ref);
        }
    }
    end_checks("embed");
}

static void test_rmsnorm(void **state) {
    (void)state;
    g_failures = 0;
    const int64_t cases[5][2] = {{1, 64}, {5, 4096}, {3, 100}, {2, 1000}, {4, 37}};
    for (int d = 0; d < 3; d++) {
        for (int c = 0; c < 5; c++) {
            const int64_t m = cases[c][0], n = cases[c][1];
            const size_t mn = (size_t)(m * n);
            const float eps = 1e-5f;
            float *x = rand_vec(mn, -2.f, 2.f, DTS[d]), *r = rand_vec(mn, -1.f, 1.f, DTS[d]);
            float *w = rand_vec((size_t)n, 0.5f, 1.5f, DTS[d]), *ref = malloc(mn * sizeof *ref);
            void *dx = dev_upload(x, mn, DTS[d]), *dr = dev_upload(r, mn, DTS[d]),
                 *dw = dev_upload(w, (size_t)n, DTS[d]);
            void *dy = dev_poison(mn, DTS[d]);
            char what[80];
            // y = rmsnorm(x)
            OK(lpo_cuda_rmsnorm(dy, dx, dw, m, n, eps, DTS[d], 0));
            float *got = dev_download(dy, mn, DTS[d]);
            lpo_cpu_rmsnorm(ref, x, w, m, n, eps, 1);
            snprintf(what, sizeof what, "rmsnorm m %lld n %lld", (long long)m, (long long)n);
            check_close(what, got, ref, mn, DTS[d]);
            free(got);
            // in place
            void *dxi = dev_upload(x, mn, DTS[d]);
            OK(lpo_cuda_rmsnorm(dxi, dxi, dw, m, n, eps, DTS[d], 0));
            got = dev_download(dxi, mn, DTS[d]);
            snprintf(what, sizeof what, "rmsnorm in place m %lld n %lld", (long long)m, (long long)n);
            check_close(what, got, ref, mn, DTS[d]);
            free(got);
            // x += r; y = rmsnorm(x)
            void *dy2 = dev_poison(mn, DTS[d]);
            OK(lpo_cuda_add_rmsnorm(dx, dr, dy2, dw, m, n, eps, DTS[d], 0));
            lpo_cpu_add(x, r, (int64_t)mn);
            float *gx = dev_download(dx, mn, DTS[d]);
            snprintf(what, sizeof what, "add_rmsnorm (x += r) m %lld n %lld", (long long)m, (long long)n);
            check_close(what, gx, x, mn, DTS[d]);
            for (size_t i = 0; i < mn; i++) x[i] = round_dt(x[i], DTS[d]); // the sum as stored
            lpo_cpu_rmsnorm(ref, x, w, m, n, eps, 1);
            got = dev_download(dy2, mn, DTS[d]);
            snprintf(what, sizeof what, "add_rmsnorm (y = norm(x)) m %lld n %lld", (long long)m,
                     (long long)n);
            check_close(what, got, ref, mn, DTS[d]);
            free(got);
            free(gx);
            free(x);
            free(r);
            free(w);
            free(ref);
        }
    }
    end_checks("rmsnorm");
}

static void test_elementwise(void **state) {
    (void)state;
    g_failures = 0;
    const int64_t cases[4][2] = {{1, 1000}, {7, 64}, {3, 37}, {2, 14336}}; // m, width
    for (int d = 0; d < 3; d++) {
        for (int c = 0; c < 4; c++) {
            const int64_t m = cases[c][0], I = cases[c][1];
            const size_t mi = (size_t)(m * I);
            char what[80];
            float *gu = rand_vec(2 * mi, -4.f, 4.f, DTS[d]), *ref = malloc(mi * sizeof *ref);
            void *dgu = dev_upload(gu, 2 * mi, DTS[d]);
            for (int act = 0; act < 2; act++) { // swiglu, geglu
                void *dact = dev_poison(mi, DTS[d]);
                OK(act ? lpo_cuda_geglu(dact, dgu, m, I, DTS[d], 0)
                       : lpo_cuda_swiglu(dact, dgu, m, I, DTS[d], 0));
                if (act)
                    lpo_cpu_geglu(ref, gu, m, I, 1);
                else
                    lpo_cpu_swiglu(ref, gu, m, I, 1);
                float *got = dev_download(dact, mi, DTS[d]);
                snprintf(what, sizeof what, "%s m %lld I %lld", act ? "geglu" : "swiglu", (long long)m,
                         (long long)I);
                check_close(what, got, ref, mi, DTS[d]);
                free(got);
            }
            // add over the flat m*I, bias_add over (m, I)
            float *x = rand_vec(mi, -1.f, 1.f, DTS[d]), *y = rand_vec(mi, -1.f, 1.f, DTS[d]);
            float *b = rand_vec((size_t)I, -1.f, 1.f, DTS[d]);
            void *dx = dev_upload(x, mi, DTS[d]), *dy = dev_upload(y, mi, DTS[d]),
                 *db = dev_upload(b, (size_t)I, DTS[d]);
            OK(lpo_cuda_add(dx, dy, (int64_t)mi, DTS[d], 0));
            lpo_cpu_add(x, y, (int64_t)mi);
            float *got = dev_download(dx, mi, DTS[d]);
            snprintf(what, sizeof what, "add n %zu", mi);
            check_close(what, got, x, mi, DTS[d]);
            free(got);
            OK(lpo_cuda_bias_add(dy, db, m, I, DTS[d], 0));
            for (int64_t t = 0; t < m; t++)
                for (int64_t i = 0; i < I; i++) y[t * I + i] += b[i]; // y (m, I) += b (I,)
            got = dev_download(dy, mi, DTS[d]);
            snprintf(what, sizeof what, "bias_add m %lld n %lld", (long long)m, (long long)I);
            check_close(what, got, y, mi, DTS[d]);
            free(got);
            free(x);
            free(y);
            free(b);
            free(gu);
            free(ref);
        }
    }
    // add at a size past one 2^20 row (rows + tail)
    const size_t n = (1u << 20) + 77;
    float *x = rand_vec(n, -1.f, 1.f, LPO_DT_BF16), *y = rand_vec(n, -1.f, 1.f, LPO_DT_BF16);
    void *dx = dev_upload(x, n, LPO_DT_BF16), *dy = dev_upload(y, n, LPO_DT_BF16);
    OK(lpo_cuda_add(dx, dy, (int64_t)n, LPO_DT_BF16, 0));
    lpo_cpu_add(x, y, (int64_t)n);
    float *got = dev_download(dx, n, LPO_DT_BF16);
    check_close("add n 2^20 + 77", got, x, n, LPO_DT_BF16);
    free(got);
    free(x);
    free(y);
    end_checks("elementwise");
}

/* ---- q/k norm, RoPE, KV append ------------------------------------------------------------------- */
static void make_rope_tables(float **cs, float **sn, int64_t n_pos, int64_t hd) {
    const int64_t half = hd / 2;
    float *inv = malloc((size_t)half * sizeof *inv);
    *cs = malloc((size_t)(n_pos * half) * sizeof **cs);
    *sn = malloc((size_t)(n_pos * half) * sizeof **sn);
    for (int64_t i = 0; i < half; i++) inv[i] = 1.0f / powf(10000.f, (float)(2 * i) / (float)hd);
    lpo_cpu_rope_tables(*cs, *sn, inv, 1.07f, n_pos, half); // a YaRN-like attention factor folded in
    free(inv);
}

/* m tokens of n_seq sequences: slot s holds positions n_past[s] .. in order; returns slots and positions */
static void make_tokens(int64_t m, int n_seq, int64_t max_context, int32_t *slot, int64_t *pos) {
    int64_t next[8];
    for (int s = 0; s < n_seq; s++) next[s] = irand(max_context - m);
    for (int64_t t = 0; t < m; t++) {
        const int s = (int)(t * n_seq / m);
        slot[t] = n_seq - 1 - s; // slots not in token order
        pos[t] = next[s]++;
    }
}

static void test_qkv_post(void **state) {
    (void)state;
    g_failures = 0;
    const int64_t cfgs[4][3] = {{4, 4, 64}, {8, 2, 128}, {6, 2, 32}, {2, 1, 256}}; // nh, nkv, hd
    const int64_t ms[2] = {1, 9};
    for (int d = 0; d < 3; d++) {
        for (int c = 0; c < 4; c++) {
            for (int mi = 0; mi < 2; mi++) {
                const int64_t nh = cfgs[c][0], nkv = cfgs[c][1], hd = cfgs[c][2], m = ms[mi], maxc = 40;
                const int nslots = 3;
                const int64_t row = (nh + 2 * nkv) * hd, kvd = nkv * hd, csize = nslots * maxc * kvd;
                float *cs, *sn;
                make_rope_tables(&cs, &sn, maxc, hd);
                void *dcs = dev_copy(cs, (size_t)(maxc * hd / 2) * sizeof(float));
                void *dsn = dev_copy(sn, (size_t)(maxc * hd / 2) * sizeof(float));
                int32_t slot[16];
                int64_t pos[16];
                make_tokens(m, m > 1 ? 3 : 1, maxc, slot, pos);
                int32_t *dslot = dev_copy(slot, sizeof slot);
                int64_t *dpos = dev_copy(pos, sizeof pos);
                float *wq = rand_vec((size_t)hd, 0.5f, 1.5f, DTS[d]),
                      *wk = rand_vec((size_t)hd, 0.5f, 1.5f, DTS[d]);
                void *dwq = dev_upload(wq, (size_t)hd, DTS[d]), *dwk = dev_upload(wk, (size_t)hd, DTS[d]);
                for (int mode = 0; mode < 5;
                     mode++) { // norm | rope | append | rope+append | norm+rope+append
                    static const char *names[5] = {"qk_norm", "rope", "kv_append", "rope+kv_append",
                                                   "qk_norm+rope+kv_append"};
                    const int norm = mode == 0 || mode == 4, rope = mode == 1 || mode >= 3, app = mode >= 2;
                    float *qkv = rand_vec((size_t)(m * row), -2.f, 2.f, DTS[d]);
                    float *kc = rand_vec((size_t)csize, -1.f, 1.f, DTS[d]),
                          *vc = rand_vec((size_t)csize, -1.f, 1.f, DTS[d]);
                    void *dqkv = dev_upload(qkv, (size_t)(m * row), DTS[d]);
                    void *dkc = dev_upload(kc, (size_t)csize, DTS[d]),
                         *dvc = dev_upload(vc, (size_t)csize, DTS[d]);
                    if (mode == 0)
                        OK(lpo_cuda_qk_norm(dqkv, dwq, dwk, m, nh, nkv, hd, 1e-6f, DTS[d], 0));
                    else if (mode == 1)
                        OK(lpo_cuda_rope(dqkv, dcs, dsn, dpos, m, nh, nkv, hd, DTS[d], 0));
                    else if (mode == 2)
                        OK(lpo_cuda_kv_append(dkc, dvc, NULL, NULL, dqkv, dslot, dpos, m, nh, nkv, hd, maxc,
                                              DTS[d], 0));
                    else
                        OK(lpo_cuda_qkv_post(dqkv, norm ? dwq : NULL, norm ? dwk : NULL, 1e-6f, dcs, dsn, dkc,
                                             dvc, NULL, NULL, dslot, dpos, m, nh, nkv, hd, maxc, DTS[d], 0));
                    if (norm) lpo_cpu_qk_norm(qkv, wq, wk, m, nh, nkv, hd, 1e-6f, 1);
                    if (rope) lpo_cpu_rope(qkv, cs, sn, pos, m, nh, nkv, hd, 1);
                    if (app) lpo_cpu_kv_append(kc, vc, qkv, slot, pos, m, nh, nkv, hd, maxc, 0);
                    char what[120];
                    snprintf(what, sizeof what, "%s m %lld heads %lld/%lld hd %lld: qkv", names[mode],
                             (long long)m, (long long)nh, (long long)nkv, (long long)hd);
                    float *got = dev_download(dqkv, (size_t)(m * row), DTS[d]);
                    check_close(what, got, qkv, (size_t)(m * row), DTS[d]);
                    free(got);
                    if (app) { // the whole caches: appended rows right, every other row untouched
                        snprintf(what, sizeof what, "%s m %lld heads %lld/%lld hd %lld: K, V cache",
                                 names[mode], (long long)m, (long long)nh, (long long)nkv, (long long)hd);
                        float *gk = dev_download(dkc, (size_t)csize, DTS[d]),
                              *gv = dev_download(dvc, (size_t)csize, DTS[d]);
                        float *both = malloc((size_t)(2 * csize) * sizeof *both),
                              *rb = malloc((size_t)(2 * csize) * sizeof *rb);
                        memcpy(both, gk, (size_t)csize * sizeof *both);
                        memcpy(both + csize, gv, (size_t)csize * sizeof *both);
                        memcpy(rb, kc, (size_t)csize * sizeof *rb);
                        memcpy(rb + csize, vc, (size_t)csize * sizeof *rb);
                        check_close(what, both, rb, (size_t)(2 * csize), DTS[d]);
                        free(gk);
                        free(gv);
                        free(both);
                        free(rb);
                    }
                    free(qkv);
                    free(kc);
                    free(vc);
                }
                free(cs);
                free(sn);
                free(wq);
                free(wk);
            }
        }
        dev_free_all();
    }
    end_checks("qkv_post");
}

/* ---- GEMM ----------------------------------------------------------------------------------------- */
static void test_gemm(void **state) {
    (void)state;
    g_failures = 0;
    lpo_cuda_gemm *g = NULL;
    void *ws = NULL;
    CK(cudaMalloc(&ws, 32u << 20));
    OK(lpo_cuda_gemm_create(ws, 32u << 20, &g));
    const int64_t shapes[6][3] = {{1, 64, 64},    {1, 1000, 4096}, {7, 136, 72},
                                  {33, 256, 520}, {64, 384, 1024}, {5, 1000, 256}};
    for (int d = 0; d < 3; d++) {
        for (int s = 0; s < 6; s++) {
            const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            float *x = rand_vec((size_t)(m * k), -1.f, 1.f, DTS[d]),
                  *W = rand_vec((size_t)(n * k), -1.f, 1.f, DTS[d]);
            float *b = rand_vec((size_t)n, -1.f, 1.f, DTS[d]),
                  *y0 = rand_vec((size_t)(m * n), -4.f, 4.f, DTS[d]);
            float *ref = malloc((size_t)(m * n) * sizeof *ref);
            void *dx = dev_upload(x, (size_t)(m * k), DTS[d]), *dW = dev_upload(W, (size_t)(n * k), DTS[d]);
            void *db = dev_upload(b, (size_t)n, DTS[d]);
            for (int v = 0; v < 4; v++) { // plain | bias | y += (residual) | f32 logits
                static const char *names[4] = {"", " + bias", " (y += x W^T)", " -> f32"};
                const lpo_dtype ydt = v == 3 ? LPO_DT_F32 : DTS[d];
                void *dy = v == 2 ? dev_upload(y0, (size_t)(m * n), ydt) : dev_poison((size_t)(m * n), ydt);
                OK(lpo_cuda_gemm_run(g, dy, ydt, dx, dW, v == 1 ? db : NULL, m, n, k, v == 2 ? 1.f : 0.f,
                                     DTS[d], 0));
                lpo_cpu_matmul(ref, x, W, v == 1 ? b : NULL, m, n, k, 1);
                if (v == 2)
                    for (int64_t i = 0; i < m * n; i++) ref[i] += y0[i];
                float *got = dev_download(dy, (size_t)(m * n), ydt);
                char what[96];
                snprintf(what, sizeof what, "gemm m %lld n %lld k %lld%s", (long long)m, (long long)n,
                         (long long)k, names[v]);
                check_close(what, got, ref, (size_t)(m * n), DTS[d]);
                free(got);
            }
            free(x);
            free(W);
            free(b);
            free(y0);
            free(ref);
        }
        dev_free_all();
    }
    lpo_cuda_gemm_destroy(g);
    cudaFree(ws);
    end_checks("gemm");
}

/* ---- the finite check: the first NaN/Inf index, none in a finite array ------------------------------- */
static void test_finite(void **state) {
    (void)state;
    g_failures = 0;
    const int64_t sizes[3] = {1, 1000, 3000001};
    for (int d = 0; d < 3; d++)
        for (int si = 0; si < 3; si++) {
            const int64_t n = sizes[si];
            float *h = rand_vec((size_t)n, -3.f, 3.f, DTS[d]);
            const int64_t bad[3] = {-1, n / 2, n - 1}; /* none, a NaN in the middle (and an Inf at the end) */
            for (int b = 0; b < 3; b++) {
                if (b == 1) h[bad[1]] = NAN;
                if (b == 2) h[bad[2]] = INFINITY;
                void *dx = dev_upload(h, (size_t)n, DTS[d]);
                unsigned long long *dfirst = dev_alloc(sizeof *dfirst), got = 0;
                CK(cudaMemset(dfirst, 0xff, sizeof *dfirst));
                OK(lpo_cuda_first_nonfinite(dx, DTS[d], n, dfirst, 0));
                CK(cudaMemcpy(&got, dfirst, sizeof got, cudaMemcpyDeviceToHost));
                /* case 2 keeps case 1's NaN: the first bad index is the middle one in both */
                const unsigned long long want = b == 0 ? ~0ull : (unsigned long long)bad[1];
                if (got != want) {
                    printf("FAIL finite %s n %lld case %d: first %llu, expected %llu\n",
                           lpo_dtype_name(DTS[d]), (long long)n, b, got, want);
                    g_failures++;
                }
            }
            free(h);
            dev_free_all();
        }
    end_checks("finite");
}

/* ---- attention ------------------------------------------------------------------------------------ */
typedef struct {
    int64_t nh, nkv, hd, m, maxc, window;
    int n_seq;   /* sequences packed in the step */
    int prefill; /* tokens of a sequence contiguous in positions (prefill-like) vs one token each */
} att_case;

static void run_attention_case(const att_case *c, lpo_dtype dt, int n_sm) {
    const int64_t row = (c->nh + 2 * c->nkv) * c->hd, kvd = c->nkv * c->hd;
    const int nslots = c->n_seq + 1;
    const int64_t csize = nslots * c->maxc * kvd;
    int32_t *slot = malloc((size_t)c->m * sizeof *slot);
    int64_t *pos = malloc((size_t)c->m * sizeof *pos);
    if (c->prefill) {
        make_tokens(c->m, c->n_seq, c->maxc, slot, pos);
    } else { // decode: one token per sequence at a random context length (1 and full included)
        for (int64_t t = 0; t < c->m; t++) {
            slot[t] = (int32_t)((t * 7 + 1) % nslots);
            pos[t] = t == 0 ? 0 : t == 1 ? c->maxc - 1 : irand(c->maxc);
        }
    }
    float *qkv = rand_vec((size_t)(c->m * row), -2.f, 2.f, dt);
    float *kc = rand_vec((size_t)csize, -1.f, 1.f, dt), *vc = rand_vec((size_t)csize, -1.f, 1.f, dt);
    float *ref = malloc((size_t)(c->m * c->nh * c->hd) * sizeof *ref),
          *scores = malloc((size_t)c->maxc * sizeof(float));
    lpo_cpu_attention(ref, qkv, kc, vc, slot, pos, c->m, c->nh, c->nkv, c->hd, c->maxc, c->window, scores, 1);
    void *dqkv = dev_upload(qkv, (size_t)(c->m * row), dt);
    void *dkc = dev_upload(kc, (size_t)csize, dt), *dvc = dev_upload(vc, (size_t)csize, dt);
    int32_t *dslot = dev_copy(slot, (size_t)c->m * sizeof *slot);
    int64_t *dpos = dev_copy(pos, (size_t)c->m * sizeof *pos);
    const size_t nout = (size_t)(c->m * c->nh * c->hd);
    char what[140];
    const int auto_ns = lpo_cuda_attention_decode_splits(c->m, c->nh, c->nkv, c->maxc, n_sm);
    const int splits[3] = {1, 7, auto_ns};
    for (int s = 0; s < 3; s++) { // the decode form (any dtype), 1, 7 and the heuristic's splits
        const size_t wsb = lpo_cuda_attention_decode_workspace(c->m, c->nh, c->hd, splits[s]);
        void *ws = wsb ? dev_poison(wsb / 4, LPO_DT_F32) : NULL; /* partials must all be written */
        void *datt = dev_poison(nout, dt);
        OK(lpo_cuda_attention_decode(datt, dqkv, dkc, dvc, NULL, NULL, dslot, dpos, c->m, c->nh, c->nkv,
                                     c->hd, c->maxc, c->window, splits[s], ws, wsb, dt, 0));
        float *got = dev_download(datt, nout, dt);
        snprintf(what, sizeof what,
                 "attn decode-form m %lld heads %lld/%lld hd %lld ctx %lld win %lld seqs %d splits %d",
                 (long long)c->m, (long long)c->nh, (long long)c->nkv, (long long)c->hd, (long long)c->maxc,
                 (long long)c->window, c->n_seq, splits[s]);
        check_close(what, got, ref, nout, dt);
        free(got);
    }
    for (int bm = 64; bm <= 128 && lpo_cuda_attention_prefill_supported(c->hd, dt); bm += 64) {
        void *datt = dev_poison(nout, dt);
        OK(lpo_cuda_attention_prefill_tile(datt, dqkv, dkc, dvc, NULL, NULL, dslot, dpos, c->m, c->nh, c->nkv,
                                           c->hd, c->maxc, c->window, bm, dt, 0));
        float *got = dev_download(datt, nout, dt);
        snprintf(what, sizeof what,
                 "attn prefill (mma, tile %d) m %lld heads %lld/%lld hd %lld ctx %lld win %lld seqs %d", bm,
                 (long long)c->m, (long long)c->nh, (long long)c->nkv, (long long)c->hd, (long long)c->maxc,
                 (long long)c->window, c->n_seq);
        check_close(what, got, ref, nout, dt);
        free(got);
    }
    if (lpo_cuda_attention_kv8_supported(c->hd)) { /* the same over an fp8 cache (engine.kv_dtype=fp8) */
        const int64_t rows = csize / c->hd;
        uint8_t *kq = malloc((size_t)csize), *vq = malloc((size_t)csize);
        float *ks = malloc((size_t)rows * sizeof *ks), *vs = malloc((size_t)rows * sizeof *vs);
        assert_true(kq && vq && ks && vs);
        lpo_fp8_quantize_rows(kc, rows, c->hd, kq, ks); /* the reference: the values the cache holds */
        lpo_fp8_quantize_rows(vc, rows, c->hd, vq, vs);
        lpo_fp8_dequantize_rows(kq, ks, rows, c->hd, kc);
        lpo_fp8_dequantize_rows(vq, vs, rows, c->hd, vc);
        lpo_cpu_attention(ref, qkv, kc, vc, slot, pos, c->m, c->nh, c->nkv, c->hd, c->maxc, c->window, scores,
                          1);
        void *dkq = dev_copy(kq, (size_t)csize), *dvq = dev_copy(vq, (size_t)csize);
        float *dks = dev_copy(ks, (size_t)rows * sizeof *ks), *dvs = dev_copy(vs, (size_t)rows * sizeof *vs);
        for (int s = 0; s < 3; s++) {
            const size_t wsb = lpo_cuda_attention_decode_workspace(c->m, c->nh, c->hd, splits[s]);
            void *ws = wsb ? dev_poison(wsb / 4, LPO_DT_F32) : NULL;
            void *datt = dev_poison(nout, dt);
            OK(lpo_cuda_attention_decode(datt, dqkv, dkq, dvq, dks, dvs, dslot, dpos, c->m, c->nh, c->nkv,
                                         c->hd, c->maxc, c->window, splits[s], ws, wsb, dt, 0));
            float *got = dev_download(datt, nout, dt);
            snprintf(
                what, sizeof what,
                "attn decode-form fp8 KV m %lld heads %lld/%lld hd %lld ctx %lld win %lld seqs %d splits "
                "%d",
                (long long)c->m, (long long)c->nh, (long long)c->nkv, (long long)c->hd, (long long)c->maxc,
                (long long)c->window, c->n_seq, splits[s]);
            check_close(what, got, ref, nout, dt);
            free(got);
        }
        for (int bm = 64; bm <= 128 && lpo_cuda_attention_prefill_supported(c->hd, dt); bm += 64) {
            void *datt = dev_poison(nout, dt);
            OK(lpo_cuda_attention_prefill_tile(datt, dqkv, dkq, dvq, dks, dvs, dslot, dpos, c->m, c->nh,
                                               c->nkv, c->hd, c->maxc, c->window, bm, dt, 0));
            float *got = dev_download(datt, nout, dt);
            snprintf(what, sizeof what,
                     "attn prefill fp8 KV (tile %d) m %lld heads %lld/%lld hd %lld ctx %lld win %lld seqs %d",
                     bm, (long long)c->m, (long long)c->nh, (long long)c->nkv, (long long)c->hd,
                     (long long)c->maxc, (long long)c->window, c->n_seq);
            check_close(what, got, ref, nout, dt);
            free(got);
        }
        free(kq);
        free(vq);
        free(ks);
        free(vs);
    }
    free(slot);
    free(pos);
    free(qkv);
    free(kc);
    free(vc);
    free(ref);
    free(scores);
}

/* Decode form alone at batch 1..8 with given context lengths (pos = len - 1; the slots are not 0), each
 * split count of `splits` (0: the heuristic's for the bucket max_len) against the CPU reference, the
 * workspace poisoned (NaN) before every launch: every split's partial must be written, empty splits (more
 * splits than positions) included. */
static void run_decode_lens(int64_t nh, int64_t nkv, int64_t hd, int m, const int64_t *lens, int64_t maxc,
                            int64_t window, const int *splits, int n_splits, lpo_dtype dt, int n_sm) {
    const int64_t row = (nh + 2 * nkv) * hd, kvd = nkv * hd, nslots = m + 1;
    const int64_t csize = nslots * maxc * kvd;
    int32_t slot[8];
    int64_t pos[8], max_len = 1;
    assert_true(m >= 1 && m <= 8);
    for (int t = 0; t < m; t++) {
        slot[t] = (int32_t)(m - t); // slots m .. 1 (slot 0 unused)
        pos[t] = lens[t] - 1;
        if (lens[t] > max_len) max_len = lens[t];
    }
    float *qkv = rand_vec((size_t)(m * row), -2.f, 2.f, dt);
    float *kc = rand_vec((size_t)csize, -1.f, 1.f, dt), *vc = rand_vec((size_t)csize, -1.f, 1.f, dt);
    const size_t nout = (size_t)(m * nh * hd);
    float *ref = malloc(nout * sizeof *ref), *scores = malloc((size_t)maxc * sizeof(float));
    assert_true(ref && scores);
    lpo_cpu_attention(ref, qkv, kc, vc, slot, pos, m, nh, nkv, hd, maxc, window, scores, 1);
    void *dqkv = dev_upload(qkv, (size_t)(m * row), dt);
    void *dkc = dev_upload(kc, (size_t)csize, dt), *dvc = dev_upload(vc, (size_t)csize, dt);
    int32_t *dslot = dev_copy(slot, (size_t)m * sizeof *slot);
    int64_t *dpos = dev_copy(pos, (size_t)m * sizeof *pos);
    for (int s = 0; s < n_splits; s++) {
        const int ns = splits[s] ? splits[s] : lpo_cuda_attention_decode_splits(m, nh, nkv, max_len, n_sm);
        const size_t wsb = lpo_cuda_attention_decode_workspace(m, nh, hd, ns);
        void *ws = wsb ? dev_poison(wsb / 4, LPO_DT_F32) : NULL;
        void *datt = dev_poison(nout, dt);
        OK(lpo_cuda_attention_decode(datt, dqkv, dkc, dvc, NULL, NULL, dslot, dpos, m, nh, nkv, hd, maxc,
                                     window, ns, ws, wsb, dt, 0));
        float *got = dev_download(datt, nout, dt);
        char what[140];
        snprintf(what, sizeof what,
                 "attn decode B=%d len %lld%s heads %lld/%lld hd %lld win %lld splits %d%s", m,
                 (long long)lens[0], m > 1 ? ".." : "", (long long)nh, (long long)nkv, (long long)hd,
                 (long long)window, ns, splits[s] ? "" : " (auto)");
        check_close(what, got, ref, nout, dt);
        free(got);
    }
    free(qkv);
    free(kc);
    free(vc);
    free(ref);
    free(scores);
    dev_free_all();
}

/* The decode form at the shapes of the engine's decode steps: batch 1 at contexts 1 .. 4096 (one chunk,
 * partial chunks, several chunks per split), head_dim 64 (Llama-3.2-1B: 32/8 heads) and 128 (8B: 32/8;
 * GQA 8: 64/8), sliding windows, split counts 1 .. more than the positions, batch 8 with mixed lengths. */
static void test_attention_decode(void **state) {
    (void)state;
    g_failures = 0;
    int n_sm = 0;
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
    static const int splits[] = {1, 2, 3, 7, 33, 100, 256, 0};
    const int nsp = (int)(sizeof splits / sizeof splits[0]);
    static const int64_t lens[] = {1, 17, 128, 1000, 4096};
    static const int64_t shapes[][3] = {{32, 8, 64}, {32, 8, 128}, {64, 8, 128}, {16, 2, 64}}; // nh, nkv, hd
    for (int d = 0; d < 3; d++) {
        for (int sh = 0; sh < 4; sh++)
            for (int li = 0; li < 5; li++) {
                const int64_t L = lens[li];
                // long contexts: every dtype for the 8B/1B shapes, f32 and bf16 for the others (time)
                if (L == 4096 && sh >= 2 && DTS[d] == LPO_DT_F16) continue;
                run_decode_lens(shapes[sh][0], shapes[sh][1], shapes[sh][2], 1, &L, L + 3, 0, splits, nsp,
                                DTS[d], n_sm);
            }
        const int64_t l1000 = 1000, l4096 = 4096, l17 = 17;
        const int wsp[] = {1, 5, 64, 0};
        run_decode_lens(32, 8, 128, 1, &l1000, 1000, 100, wsp, 4, DTS[d], n_sm); // window inside the context
        run_decode_lens(32, 8, 64, 1, &l4096, 4096, 4096, wsp, 4, DTS[d], n_sm); // window = the context
        run_decode_lens(32, 8, 64, 1, &l17, 64, 8, wsp, 4, DTS[d], n_sm);        // window 8 < one chunk
        const int64_t mixed[8] = {1, 2000, 33, 4096, 64, 65, 777, 3};
        run_decode_lens(32, 8, 128, 8, mixed, 4096, 0, splits, nsp, DTS[d], n_sm);
        run_decode_lens(32, 8, 64, 8, mixed, 4096, 300, splits, nsp, DTS[d], n_sm);
        run_decode_lens(8, 1, 256, 3, mixed + 1, 4096, 0, splits, nsp, DTS[d], n_sm); // MQA, hd 256, G 8
        run_decode_lens(12, 3, 16, 4, mixed + 4, 800, 0, splits, nsp, DTS[d], n_sm);  // hd 16, group 4
        run_decode_lens(6, 3, 32, 2, mixed + 5, 800, 50, splits, nsp, DTS[d], n_sm);  // hd 32, group 2
    }
    end_checks("attention decode");
}

static void test_attention(void **state) {
    (void)state;
    g_failures = 0;
    int n_sm = 0;
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
    static const att_case cases[] = {
        // decode: one token per sequence
        {8, 8, 64, 5, 200, 0, 5, 0},   // GQA group 1
        {32, 8, 128, 3, 700, 0, 3, 0}, // group 4 (Llama-3 8B heads), context past the tiles
        {16, 2, 64, 4, 300, 64, 4, 0}, // group 8, sliding window
        {24, 2, 128, 2, 129, 0, 2, 0}, // group 12 (two head chunks)
        {4, 4, 256, 3, 100, 0, 3, 0},  // head_dim 256
        {8, 8, 128, 1, 1, 0, 1, 0},    // context 1
        {4, 2, 16, 3, 90, 0, 3, 0},    // head_dim 16 (the golden fixtures' models)
        {4, 2, 32, 2, 70, 20, 2, 0},   // head_dim 32, sliding window
        // prefill-like: sequences packed in one step, positions contiguous
        {8, 8, 64, 70, 160, 0, 1, 1},     // one sequence, group 1
        {32, 8, 128, 200, 300, 0, 3, 1},  // three sequences in one step, group 4
        {16, 2, 128, 130, 260, 50, 2, 1}, // group 8, sliding window
        {12, 4, 64, 1, 64, 0, 1, 1},      // one token
        {8, 1, 128, 257, 400, 0, 5, 1},   // five sequences, MQA
        {4, 2, 16, 40, 80, 0, 2, 1},      // head_dim 16 (decode kernel on prefill rows)
        {4, 1, 32, 33, 66, 9, 3, 1},      // head_dim 32, MQA, sliding window
        // batch 64 decode at Llama-3 8B heads (the fp8 KV cache's bar point)
        {32, 8, 128, 64, 200, 0, 64, 0},
    };
    for (int d = 0; d < 3; d++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            run_attention_case(&cases[c], DTS[d], n_sm);
        dev_free_all();
    }
    end_checks("attention");
}

/* ---- sampling -------------------------------------------------------------------------------------- */
static void test_argmax(void **state) {
    (void)state;
    g_failures = 0;
    const int64_t cases[4][2] = {{1, 128256}, {3, 1000}, {2, 37}, {64, 32000}};
    for (int c = 0; c < 4; c++) {
        const int64_t m = cases[c][0], V = cases[c][1];
        float *lg = rand_vec((size_t)(m * V), -10.f, 10.f, LPO_DT_F32);
        for (int64_t r = 0; r < m; r++) { // a tie at the top between two ids: the lower must win; a NaN
            const int64_t a = irand(V), b = irand(V);
            lg[r * V + a] = lg[r * V + b] = 11.f;
            lg[r * V + irand(V)] = NAN;
        }
        if (m > 2) // a row of NaN and -inf only: id 0, as the CPU (NaN reads as -inf)
            for (int64_t i = 0; i < V; i++) lg[2 * V + i] = i % 2 ? -INFINITY : NAN;
        int32_t *ids = malloc((size_t)m * sizeof *ids), *dids = dev_alloc((size_t)m * sizeof *ids);
        CK(cudaMemset(dids, 0xff, (size_t)m * sizeof *ids));
        float *dl = dev_upload(lg, (size_t)(m * V), LPO_DT_F32);
        OK(lpo_cuda_argmax(dids, dl, m, V, 0));
        CK(cudaMemcpy(ids, dids, (size_t)m * sizeof *ids, cudaMemcpyDeviceToHost));
        int bad = 0;
        const lpo_sampling greedy = {0.0, 0, 1.0, 1.0, 0};
        for (int64_t r = 0; r < m; r++) { // the CPU sampler's greedy rule
            const int32_t want = lpo_sample_row(&greedy, 0, 0, NULL, lg + r * V, V, NULL);
            if (ids[r] != want) {
                if (!bad++) printf("       row %lld: got %d, want %d\n", (long long)r, ids[r], want);
            }
        }
        printf("  %-63s %s\n", "argmax", bad ? "FAIL" : "ok");
        printf("       m %lld vocab %lld\n", (long long)m, (long long)V);
        g_failures += bad != 0;
        free(lg);
        free(ids);
    }
    end_checks("argmax");
}

/* lpo_cuda_sample vs lpo_sample_row: same ids, same in-place logits, step advanced, id marked seen */
static void test_sample(void **state) {
    (void)state;
    g_failures = 0;
    static const lpo_sampling ps[] = {
        {0.0, 0, 1.0, 1.0, 1},   {0.8, 0, 1.0, 1.0, 2},    {0.8, 40, 1.0, 1.0, 3}, {1.0, 0, 0.9, 1.0, 4},
        {0.7, 50, 0.95, 1.3, 5}, {1.5, 1, 1.0, 1.0, 6},    {1e-3, 0, 0.5, 1.0, 7}, {2.0, 5000, 0.3, 0.8, 8},
        {1.0, 3, 1.0, 1.0, 9},   {0.6, 0, 0.999, 1.1, 10},
    };
    const int64_t Vs[3] = {128256, 1000, 37};
    const int64_t m = 8;
    lpo_sample_scratch *scr = NULL;
    OK(lpo_sample_scratch_init(&scr, 128256));
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
        for (int vi = 0; vi < 3; vi++) {
            for (int trial = 0; trial < 3; trial++) {
                const int64_t V = Vs[vi], words = (V + 31) / 32;
                lpo_sampling p = ps[pi];
                p.seed = rng_u64();
                float *lg = rand_vec((size_t)(m * V), -8.f, 8.f, LPO_DT_F32);
                for (int64_t r = 0; r < m; r++) { // ties, -inf, NaN, a sharp top
                    float *l = lg + r * V;
                    for (int j = 0; j < 4; j++) l[irand(V)] = l[irand(V)];
                    l[irand(V)] = -INFINITY;
                    if (r & 1) l[irand(V)] = NAN;
                    if (r == 2) l[irand(V)] = 30.f;
                }
                uint32_t *seen = calloc((size_t)(m * words), sizeof *seen);
                uint64_t streams[8], steps[8];
                for (int64_t r = 0; r < m; r++) {
                    streams[r] = rng_u64() % 1000, steps[r] = rng_u64() % 500;
                    for (int j = 0; j < 20; j++) {
                        const int64_t id = irand(V);
                        seen[r * words + id / 32] |= 1u << (id % 32);
                    }
                }
                float *dl = dev_upload(lg, (size_t)(m * V), LPO_DT_F32);
                uint64_t *dstr = dev_copy(streams, sizeof streams), *dstep = dev_copy(steps, sizeof steps);
                uint32_t *dseen = dev_copy(seen, (size_t)(m * words) * sizeof *seen);
                int32_t *dids = dev_alloc((size_t)m * sizeof(int32_t)), ids[8];
                OK(lpo_cuda_sample(dids, dl, m, V, &p, dstr, dstep, dseen, 1, 0));
                float *gl = dev_download(dl, (size_t)(m * V), LPO_DT_F32);
                uint64_t steps2[8];
                uint32_t *seen2 = malloc((size_t)(m * words) * sizeof *seen2);
                CK(cudaMemcpy(ids, dids, sizeof ids, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(steps2, dstep, sizeof steps2, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(seen2, dseen, (size_t)(m * words) * sizeof *seen2, cudaMemcpyDeviceToHost));
                int bad = 0;
                for (int64_t r = 0; r < m; r++) {
                    const int32_t want =
                        lpo_sample_row(&p, streams[r], steps[r], seen + r * words, lg + r * V, V, scr);
                    const int logits_same = !memcmp(gl + r * V, lg + r * V, (size_t)V * sizeof(float));
                    const int counters = steps2[r] == steps[r] + 1 && want >= 0 &&
                                         (seen2[r * words + want / 32] >> (want % 32) & 1u);
                    if (ids[r] != want || !logits_same || !counters) {
                        if (!bad++)
                            printf("       row %lld: got id %d, want %d; logits after %s; step/seen %s\n",
                                   (long long)r, ids[r], want, logits_same ? "equal" : "DIFFER",
                                   counters ? "advanced" : "WRONG");
                    }
                }
                char what[120];
                snprintf(what, sizeof what, "sample T %g top_k %lld top_p %g rp %g vocab %lld (%lld rows)",
                         p.temperature, (long long)p.top_k, p.top_p, p.repetition_penalty, (long long)V,
                         (long long)m);
                printf("  %-63s %s\n", what, bad ? "FAIL" : "same ids");
                g_failures += bad != 0;
                free(lg);
                free(gl);
                free(seen);
                free(seen2);
            }
        }
        dev_free_all();
    }
    lpo_sample_scratch_free(scr);
    end_checks("sample");
}

/* ---- timing at Llama-3.1-8B shapes ----------------------------------------------------------------- */
#define BW_FLOOR   2.97e12 /* B/s: device-to-device copy measured on the H100 (REFERENCE.md) */
#define BF16_FLOOR 742e12  /* FLOP/s: cuBLAS bf16 8192^3 measured there */

typedef struct {
    int kind, copy, ncopies;
    int64_t m, n, k;
    void *a, *b, *c, *d, *e;
    const void *pos;
    const void *slot;
    lpo_cuda_gemm *g;
} bench_arg;
/* attention rows: e NULL (the cache a, b in bf16) or the host array {K scales, V scales} of an fp8 cache */
static const float *att_scale(const bench_arg *a, int v) {
    return a->e ? ((const float *const *)a->e)[v] : NULL;
}

enum {
    B_GEMM,
    B_RMS,
    B_ADDRMS,
    B_ROPE_APP,
    B_SWIGLU,
    B_EMBED,
    B_ATT_DEC,
    B_ATT_PRE,
    B_ARGMAX,
    B_SAMPLE,
    B_SYNTH,
    B_CONV
};

static lpo_status bench_launch(bench_arg *a, void *ws, size_t wsb) {
    const lpo_dtype bf = LPO_DT_BF16;
    const int c = a->copy++ % a->ncopies;
    switch (a->kind) {
    case B_GEMM: { // a: weights (ncopies), b: x, c: y; k = in
        const char *W = (const char *)a->a + (size_t)c * (size_t)(a->n * a->k) * 2;
        return lpo_cuda_gemm_run(a->g, a->c, a->e ? LPO_DT_F32 : bf, a->b, W, NULL, a->m, a->n, a->k, 0.f, bf,
                                 0);
    }
    case B_RMS: return lpo_cuda_rmsnorm(a->c, a->b, a->a, a->m, a->n, 1e-5f, bf, 0);
    case B_ADDRMS: return lpo_cuda_add_rmsnorm(a->b, a->d, a->c, a->a, a->m, a->n, 1e-5f, bf, 0);
    case B_ROPE_APP:
        return lpo_cuda_qkv_post(a->b, NULL, NULL, 0.f, a->d, a->e, a->a, a->c, NULL, NULL, a->slot, a->pos,
                                 a->m, 32, 8, 128, a->k, bf, 0);
    case B_SWIGLU: return lpo_cuda_swiglu(a->c, a->b, a->m, a->n, bf, 0);
    case B_EMBED: return lpo_cuda_embed(a->c, a->a, a->slot, a->m, a->n, 128256, bf, 0);
    case B_ATT_DEC: { // one layer: a K, b V caches (64 slots), slots rotate for batch 1
        const int32_t *sl = (const int32_t *)a->slot + (a->m == 1 ? c : 0);
        return lpo_cuda_attention_decode(a->c, a->d, a->a, a->b, att_scale(a, 0), att_scale(a, 1), sl, a->pos,
                                         a->m, 32, 8, 128, a->k, 0, (int)a->n, ws, wsb, bf, 0);
    }
    case B_ATT_PRE:
        return lpo_cuda_attention_prefill(a->c, a->d, a->a, a->b, att_scale(a, 0), att_scale(a, 1), a->slot,
                                          a->pos, a->m, 32, 8, 128, a->k, 0, bf, 0);
    case B_ARGMAX: return lpo_cuda_argmax(a->c, a->a, a->m, a->n, 0);
    case B_SAMPLE: { // k: top-k 50 + top-p 0.9, or top-p 0.9 alone (logits rewritten in place: NaN only)
        const lpo_sampling p = {0.8, a->k ? 50 : 0, 0.9, 1.0, 42};
        return lpo_cuda_sample(a->c, a->a, a->m, a->n, &p, NULL, NULL, NULL, 0, 0);
    }
    case B_SYNTH: return lpo_cuda_synth_fill(a->c, bf, a->m * a->n, 0x1234 + (uint64_t)c, 0.0, 0.01, bf, 0);
    case B_CONV: return lpo_cuda_convert(a->c, bf, a->a, (lpo_dtype)a->k, a->m, a->n, 0, 0);
    }
    return LPO_E_INTERNAL;
}

static int cmp_f(const void *x, const void *y) {
    const float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* median (and min/max) time of one launch in us: 3 warm-up batches, then 21 batches of 10 launches */
static void bench_row(const char *name, bench_arg *a, double bytes, double flops, void *ws, size_t wsb) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[21];
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < 10; i++) OK(bench_launch(a, ws, wsb));
    for (int s = 0; s < 21; s++) {
        CK(cudaEventRecord(e0, 0));
        for (int i = 0; i < 10; i++) OK(bench_launch(a, ws, wsb));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[s], e0, e1));
        t[s] *= 100.f; // ms per 10 launches -> us per launch
    }
    qsort(t, 21, sizeof t[0], cmp_f);
    const double med = t[10], floor_us = fmax(bytes / BW_FLOOR, flops / BF16_FLOOR) * 1e6;
    char rate[48];
    if (flops > 0 && flops / BF16_FLOOR > bytes / BW_FLOOR)
        snprintf(rate, sizeof rate, "%7.1f TFLOP/s", flops / (med * 1e-6) / 1e12);
    else
        snprintf(rate, sizeof rate, "%7.0f GB/s", bytes / (med * 1e-6) / 1e9);
    printf("| %-44s | %9.2f | %9.2f | %9.2f | %s | %9.2f | %5.1f%% |\n", name, med, (double)t[0],
           (double)t[20], rate, floor_us, 100.0 * floor_us / med);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

static void test_timing(void **state) {
    (void)state;
    const char *b = getenv("LPO_TEST_BENCH");
    if (b && !strcmp(b, "0")) {
        printf("timing skipped (LPO_TEST_BENCH=0)\n");
        return;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int n_sm = prop.multiProcessorCount;
    printf("\ntiming on %s (%d SMs), bf16, Llama-3.1-8B shapes; floor = max(bytes / %.2f TB/s, FLOPs / %.0f "
           "TFLOP/s)\n",
           prop.name, n_sm, BW_FLOOR / 1e12, BF16_FLOOR / 1e12);
    printf("| %-44s | %9s | %9s | %9s | %15s | %9s | %6s |\n", "kernel (shape)", "median us", "min us",
           "max us", "achieved", "floor us", "floor%");
    printf("|----------------------------------------------|----------:|----------:|----------:|-------------"
           "---:|----------:|-------:|\n");
    void *ws = NULL;
    const size_t gws = 32u << 20, aws = 256u << 20;
    CK(cudaMalloc(&ws, gws + aws));
    lpo_cuda_gemm *g = NULL;
    OK(lpo_cuda_gemm_create(ws, gws, &g));
    void *aw = (char *)ws + gws;
    // activations: random bf16 (never zeros), big enough for every case
    const size_t act_n = (size_t)2048 * 28672;
    void *x = dev_alloc(act_n * 2), *y = dev_alloc(act_n * 2), *z = dev_alloc(act_n * 2);
    OK(lpo_cuda_synth_fill(x, LPO_DT_BF16, (int64_t)act_n, 11, 0.0, 1.0, LPO_DT_BF16, 0));
    OK(lpo_cuda_synth_fill(y, LPO_DT_BF16, (int64_t)act_n, 12, 0.0, 1.0, LPO_DT_BF16, 0));
    OK(lpo_cuda_synth_fill(z, LPO_DT_BF16, (int64_t)act_n, 13, 0.0, 1.0, LPO_DT_BF16, 0));
    // GEMMs: weights rotated through >= 256 MB so none stays in the L2
    static const struct {
        const char *name;
        int64_t n, k;
    } lin[5] = {{"qkv", 6144, 4096},
                {"o", 4096, 4096},
                {"gate_up", 28672, 4096},
                {"down", 4096, 14336},
                {"lm_head", 128256, 4096}};
    const int64_t Ms[3] = {1, 64, 2048};
    for (int l = 0; l < 5; l++) {
        const double wbytes = (double)lin[l].n * (double)lin[l].k * 2;
        const int ncopies = (int)fmax(1.0, ceil(256e6 / wbytes));
        void *W = dev_alloc((size_t)(wbytes * ncopies));
        OK(lpo_cuda_synth_fill(W, LPO_DT_BF16, (int64_t)(lin[l].n * lin[l].k * ncopies), 100 + l, 0.0, 0.03,
                               LPO_DT_BF16, 0));
        void *out = l == 4 ? dev_alloc((size_t)2048 * 128256 * 4) : z;
        for (int mi = 0; mi < 3; mi++) {
            const int64_t M = Ms[mi];
            bench_arg a = {B_GEMM, 0,    ncopies, M, lin[l].n, lin[l].k, W, x, out, NULL, l == 4 ? out : NULL,
                           NULL,   NULL, g};
            char name[64];
            snprintf(name, sizeof name, "gemm %s M=%lld (%lldx%lld)", lin[l].name, (long long)M,
                     (long long)lin[l].n, (long long)lin[l].k);
            const double bytes = wbytes + (double)M * lin[l].k * 2 + (double)M * lin[l].n * (l == 4 ? 4 : 2);
            bench_row(name, &a, bytes, 2.0 * M * lin[l].n * lin[l].k, ws, gws);
        }
    }
    // norms and elementwise ops
    void *w4096 = dev_alloc(4096 * 2);
    OK(lpo_cuda_synth_fill(w4096, LPO_DT_BF16, 4096, 7, 1.0, 0.1, LPO_DT_BF16, 0));
    for (int mi = 0; mi < 3; mi += 2) {
        const int64_t M = Ms[mi];
        char name[64];
        bench_arg a = {B_RMS, 0, 1, M, 4096, 0, w4096, x, y, NULL, NULL, NULL, NULL, g};
        snprintf(name, sizeof name, "rmsnorm M=%lld n=4096", (long long)M);
        bench_row(name, &a, 2.0 * M * 4096 * 2, 0, ws, gws);
        bench_arg a2 = {B_ADDRMS, 0, 1, M, 4096, 0, w4096, x, y, z, NULL, NULL, NULL, g};
        snprintf(name, sizeof name, "add_rmsnorm M=%lld n=4096", (long long)M);
        bench_row(name, &a2, 4.0 * M * 4096 * 2, 0, ws, gws);
        bench_arg a3 = {B_SWIGLU, 0, 1, M, 14336, 0, NULL, x, y, NULL, NULL, NULL, NULL, g};
        snprintf(name, sizeof name, "swiglu M=%lld I=14336", (long long)M);
        bench_row(name, &a3, 3.0 * M * 14336 * 2, 0, ws, gws);
    }
    // embedding gather of 2048 tokens from a 128256 x 4096 table
    void *E = dev_alloc((size_t)128256 * 4096 * 2);
    OK(lpo_cuda_synth_fill(E, LPO_DT_BF16, (int64_t)128256 * 4096, 5, 0.0, 0.02, LPO_DT_BF16, 0));
    int32_t *tok = malloc(2048 * sizeof *tok), *slot64 = malloc(2048 * sizeof *slot64);
    int64_t *pos = malloc(2048 * sizeof *pos);
    for (int i = 0; i < 2048; i++) tok[i] = (int32_t)irand(128256);
    int32_t *dtok = dev_copy(tok, 2048 * sizeof *tok);
    {
        bench_arg a = {B_EMBED, 0, 1, 2048, 4096, 0, E, NULL, y, NULL, NULL, NULL, dtok, g};
        bench_row("embed M=2048 h=4096", &a, 2.0 * 2048 * 4096 * 2, 0, ws, gws);
    }
    // KV cache of one layer: 64 slots x 2048 positions x 8 x 128 (537 MB for K and V)
    const int64_t maxc = 2048, kvd = 8 * 128;
    void *kc = dev_alloc((size_t)(64 * maxc * kvd * 2)), *vc = dev_alloc((size_t)(64 * maxc * kvd * 2));
    OK(lpo_cuda_synth_fill(kc, LPO_DT_BF16, 64 * maxc * kvd, 21, 0.0, 1.0, LPO_DT_BF16, 0));
    OK(lpo_cuda_synth_fill(vc, LPO_DT_BF16, 64 * maxc * kvd, 22, 0.0, 1.0, LPO_DT_BF16, 0));
    // the same cache in fp8 (engine.kv_dtype=fp8): bytes and a scale per (slot, position, KV head)
    void *kq = dev_alloc((size_t)(64 * maxc * kvd)), *vq = dev_alloc((size_t)(64 * maxc * kvd));
    float *kqs = dev_alloc((size_t)(64 * maxc * 8) * 4), *vqs = dev_alloc((size_t)(64 * maxc * 8) * 4);
    OK(lpo_cuda_fp8_quant_rows(kq, kqs, kc, 64 * maxc * 8, 128, LPO_DT_BF16, 0));
    OK(lpo_cuda_fp8_quant_rows(vq, vqs, vc, 64 * maxc * 8, 128, LPO_DT_BF16, 0));
    const float *kv8_scales[2] = {kqs, vqs};
    float *cs, *sn;
    make_rope_tables(&cs, &sn, maxc, 128);
    void *dcs = dev_copy(cs, (size_t)maxc * 64 * sizeof(float)),
         *dsn = dev_copy(sn, (size_t)maxc * 64 * sizeof(float));
    for (int i = 0; i < 2048; i++) slot64[i] = 0, pos[i] = i; // prefill: one sequence
    int32_t *dslot0 = dev_copy(slot64, 2048 * sizeof *slot64);
    int64_t *dpos_pre = dev_copy(pos, 2048 * sizeof *pos);
    {
        bench_arg a = {B_ROPE_APP, 0, 1, 2048, 0, maxc, kc, x, vc, dcs, dsn, dpos_pre, dslot0, g};
        bench_row("rope+kv_append M=2048 (32/8 heads x 128)", &a, 2048.0 * (6144 + 4096 + 2048) * 2, 0, ws,
                  gws);
        bench_arg a1 = {B_ROPE_APP, 0, 1, 1, 0, maxc, kc, x, vc, dcs, dsn, dpos_pre, dslot0, g};
        bench_row("rope+kv_append M=1", &a1, (6144 + 4096 + 2048) * 2.0, 0, ws, gws);
        const double pairs = 2048.0 * 2049 / 2;
        for (int bm = 64; bm <= 128; bm += 64) {
            bench_arg a2 = {B_ATT_PRE, 0, 1, 2048, bm, maxc, kc, vc, y, x, NULL, dpos_pre, dslot0, g};
            char name[64];
            snprintf(name, sizeof name, "attention prefill 2048 tok (mma, tile %d)", bm);
            bench_row(name, &a2, 2048.0 * 6144 * 2 + 2.0 * 2048 * kvd * 2, 32.0 * pairs * 4 * 128, ws, gws);
            bench_arg a8 = a2;
            a8.a = kq, a8.b = vq, a8.e = (void *)kv8_scales;
            snprintf(name, sizeof name, "attention prefill 2048 tok fp8 KV (tile %d)", bm);
            bench_row(name, &a8, 2048.0 * 6144 * 2 + 2.0 * 2048 * 8 * 132, 32.0 * pairs * 4 * 128, ws, gws);
        }
    }
    // decode: batch 1 (slot rotates over 64 caches, none in L2), 8 and 64, at context 128 and 2048
    for (int i = 0; i < 64; i++) slot64[i] = i;
    int32_t *dslot64 = dev_copy(slot64, 64 * sizeof *slot64);
    const int64_t ctxs[2] = {128, 2048}, bs[3] = {1, 8, 64};
    for (int ci = 0; ci < 2; ci++) {
        for (int bi = 0; bi < 3; bi++) {
            for (int i = 0; i < 64; i++) pos[i] = ctxs[ci] - 1;
            int64_t *dposd = dev_copy(pos, 64 * sizeof *pos);
            const int ns = lpo_cuda_attention_decode_splits(bs[bi], 32, 8, ctxs[ci], n_sm);
            bench_arg a = {B_ATT_DEC, 0, bi ? 1 : 64, bs[bi], ns,    maxc,    kc,
                           vc,        y, x,           NULL,   dposd, dslot64, g};
            char name[64];
            snprintf(name, sizeof name, "attention decode B=%lld ctx=%lld (%d splits)", (long long)bs[bi],
                     (long long)ctxs[ci], ns);
            if (lpo_cuda_attention_decode_workspace(bs[bi], 32, 128, 2 * ns) > aws) continue;
            bench_row(name, &a, (double)bs[bi] * (2.0 * ctxs[ci] * kvd * 2 + 2.0 * 4096 * 2), 0, aw, aws);
            bench_arg a8 = a; /* the fp8 cache: hd + 4 bytes per (position, KV head) */
            a8.a = kq, a8.b = vq, a8.e = (void *)kv8_scales;
            snprintf(name, sizeof name, "attention decode fp8 KV B=%lld ctx=%lld (%d splits)",
                     (long long)bs[bi], (long long)ctxs[ci], ns);
            bench_row(name, &a8, (double)bs[bi] * (2.0 * ctxs[ci] * 8 * 132 + 2.0 * 4096 * 2), 0, aw, aws);
            if (bi || ci == 0) continue;
            a.n = 2 * ns; // batch 1, long context: twice the heuristic's splits
            snprintf(name, sizeof name, "attention decode B=1 ctx=%lld (%d splits)", (long long)ctxs[ci],
                     2 * ns);
            bench_row(name, &a, 2.0 * ctxs[ci] * kvd * 2 + 2.0 * 4096 * 2, 0, aw, aws);
        }
    }
    // sampling, weight generation and conversion
    void *logits = dev_alloc((size_t)64 * 128256 * 4);
    OK(lpo_cuda_synth_fill(logits, LPO_DT_F32, 64 * 128256, 9, 0.0, 10.0, LPO_DT_F32, 0));
    for (int mi = 0; mi < 2; mi++) {
        const int64_t M = mi ? 64 : 1;
        bench_arg a = {B_ARGMAX, 0, 1, M, 128256, 0, logits, NULL, dtok, NULL, NULL, NULL, NULL, g};
        char name[64];
        snprintf(name, sizeof name, "argmax M=%lld vocab=128256", (long long)M);
        bench_row(name, &a, M * 128256.0 * 4, 0, ws, gws);
        for (int k = 1; k >= 0; k--) {
            bench_arg a2 = {B_SAMPLE, 0, 1, M, 128256, k, logits, NULL, dtok, NULL, NULL, NULL, NULL, g};
            snprintf(name, sizeof name, "sample T.8 %sp.9 M=%lld vocab=128256", k ? "k50 " : "",
                     (long long)M);
            bench_row(name, &a2, M * 128256.0 * 4, 0, ws, gws);
        }
    }
    {
        bench_arg a = {B_SYNTH, 0, 4, 28672, 4096, 0, NULL, NULL, E, NULL, NULL, NULL, NULL, g};
        bench_row("synth_fill bf16 28672x4096", &a, 28672.0 * 4096 * 2, 0, ws, gws);
        const int64_t n = 28672LL * 4096;
        void *q = dev_alloc((size_t)lpo_dtype_bytes(LPO_DT_Q4_K, (uint64_t)n));
        uint8_t *blocks = rand_blocks(LPO_DT_Q4_K, n);
        CK(cudaMemcpy(q, blocks, (size_t)lpo_dtype_bytes(LPO_DT_Q4_K, (uint64_t)n), cudaMemcpyHostToDevice));
        free(blocks);
        bench_arg a2 = {B_CONV, 0, 1, 28672, 4096, LPO_DT_Q4_K, q, NULL, E, NULL, NULL, NULL, NULL, g};
        bench_row("convert q4_k -> bf16 28672x4096", &a2, n * (144.0 / 256 + 2), 0, ws, gws);
        void *f = dev_alloc((size_t)14336 * 4096 * 4);
        OK(lpo_cuda_synth_fill(f, LPO_DT_F32, 14336LL * 4096, 3, 0.0, 1.0, LPO_DT_F32, 0));
        bench_arg a3 = {B_CONV, 0, 1, 14336, 4096, LPO_DT_F32, f, NULL, E, NULL, NULL, NULL, NULL, g};
        bench_row("convert f32 -> bf16 14336x4096", &a3, 14336.0 * 4096 * 6, 0, ws, gws);
    }
    free(tok);
    free(slot64);
    free(pos);
    free(cs);
    free(sn);
    lpo_cuda_gemm_destroy(g);
    dev_free_all();
    cudaFree(ws);
}

int main(void) {
    lpo_test_require_gpu();
    g_rng = lpo_test_seed("test_cuda_kernels");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convert),   cmocka_unit_test(test_dequant),
        cmocka_unit_test(test_synth),     cmocka_unit_test(test_embed),
        cmocka_unit_test(test_rmsnorm),   cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_qkv_post),  cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_attention), cmocka_unit_test(test_attention_decode),
        cmocka_unit_test(test_finite),    cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_sample),    cmocka_unit_test(test_timing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
