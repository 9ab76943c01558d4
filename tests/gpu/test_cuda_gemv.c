/* GPU test (label "gpu"): the decode GEMV kernels of src/engine/cuda/gemv.cu, validated then timed.
 * Validation: lpo_cuda_gemv_cfg_run with the automatic choice (with and without PDL) and every configuration
 * the timing can run, in f32, f16 and bf16, m = 1..8 tokens, plain / + bias / residual (beta 1) / f32 output,
 * and the fused gate/up + SwiGLU, against the CPU reference (lpo_cpu_matmul, lpo_cpu_swiglu) on fresh random
 * data (seed printed; LPO_TEST_SEED=<n> repeats it). Outputs are poisoned with NaN bytes first; rows past m
 * must stay poisoned; sizes include n smaller than a block's rows, k not a multiple of a chunk, and k whose
 * rows are not 16-byte aligned (the scalar kernel). Per element |got - ref| <= atol * rms(ref) + rtol * |ref|
 * and the normalized MSE under a bound, per dtype; NaN/Inf fail; every failing case is printed, the test
 * fails at the end. Invalid arguments must give LPO_E_UNSUPPORTED. With PDL, a GEMV reading the previous
 * GEMV's output must wait for it (chains on a stream and in a CUDA graph, outputs poisoned before each), and
 * so must every kernel of a decode layer with PDL on for the stream (rmsnorm -> gemv, attention -> gemv:
 * test_pdl_step_chain, bitwise equal to the plain chain).
 * LPO_TEST_QUICK=1 checks m = 1, 5, 8 only (compute-sanitizer runs).
 * Timing (LPO_TEST_BENCH=0 skips it): Llama-3.1-8B and Llama-3.2-1B linear shapes, bf16, m = 1, 2, 4, 8;
 * weights rotated through > 256 MB of copies so none is served from the L2; each sample is one replay of a
 * CUDA graph of max(10, copies) launches timed by CUDA events, 3 warm-up replays then 60, median and
 * p10 / p90 per launch; achieved GB/s of weight bytes against the device-to-device copy bandwidth measured
 * in the same run, next to cuBLASLt (lpo_cuda_gemm_run), the automatic choice with and without PDL
 * (LPO_TEST_GEMV_ALL=1: every configuration), the fused epilogues, and RMSNorm -> linear chains. Prints SKIP
 * and exits 77 without a GPU. */
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
#include "lpo/model.h"
#include "test_support.h"

static void cuda_ok(cudaError_t e, const char *what, int line) {
    if (e != cudaSuccess) fail_msg("line %d: %s: %s", line, what, cudaGetErrorString(e));
}
static void status_ok(lpo_status s, const char *what, int line) {
    if (s != LPO_OK) fail_msg("line %d: %s: %s", line, what, lpo_last_error());
}
#define CUDA_OK(call) cuda_ok((call), #call, __LINE__)
#define ST_OK(call)   status_ok((call), #call, __LINE__)

#define MAXM LPO_CUDA_GEMV_MAX_M

/* the configurations validated and timed (AUTO first) */
static const lpo_cuda_gemv_cfg CFGS[] = {
    {LPO_CUDA_GEMV_AUTO, 0, 0, 0}, {LPO_CUDA_GEMV_AUTO, 0, 0, 1}, {LPO_CUDA_GEMV_FMA, 2, 4, 0},
    {LPO_CUDA_GEMV_FMA, 4, 4, 0},  {LPO_CUDA_GEMV_FMA, 8, 4, 0},  {LPO_CUDA_GEMV_FMA, 2, 8, 0},
    {LPO_CUDA_GEMV_FMA, 4, 8, 0},  {LPO_CUDA_GEMV_MMA, 16, 4, 0}, {LPO_CUDA_GEMV_MMA, 16, 8, 0},
    {LPO_CUDA_GEMV_MMA, 32, 4, 0}, {LPO_CUDA_GEMV_MMA, 32, 8, 0},
};
#define NCFG ((int)(sizeof CFGS / sizeof CFGS[0]))

static const char *cfg_name(const lpo_cuda_gemv_cfg *c, char *buf, size_t len) {
    if (c->kind == LPO_CUDA_GEMV_AUTO)
        snprintf(buf, len, "auto%s", c->pdl ? " pdl" : "");
    else
        snprintf(buf, len, "%s r%d w%d%s", c->kind == LPO_CUDA_GEMV_MMA ? "mma" : "fma", c->rows, c->warps,
                 c->pdl ? " pdl" : "");
    return buf;
}

/* ---- buffers of one case (host and device), released together --------------------------------------- */
#define MAXBUF 32
static void *g_host[MAXBUF], *g_dev[MAXBUF];
static int g_nhost, g_ndev;
static void *host_buf(size_t bytes) {
    assert_true(g_nhost < MAXBUF);
    void *p = malloc(bytes + 1);
    assert_non_null(p);
    return g_host[g_nhost++] = p;
}
static void *dev_buf(size_t bytes) {
    assert_true(g_ndev < MAXBUF);
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, bytes + 16));
    return g_dev[g_ndev++] = p;
}
static void release_all(void) {
    while (g_nhost) free(g_host[--g_nhost]);
    while (g_ndev) CUDA_OK(cudaFree(g_dev[--g_ndev]));
}

/* ---- random data, dtypes --------------------------------------------------------------------------- */
static uint64_t g_state;
static float uniform(float lo, float hi) { // xorshift64*
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    const uint64_t r = g_state * 0x2545f4914f6cdd1dull;
    return lo + (hi - lo) * (float)((double)(r >> 40) / 16777216.0);
}
static size_t esize(lpo_dtype dt) {
    return dt == LPO_DT_F32 ? 4 : 2;
}
static float to_dt(float v, lpo_dtype dt) {
    return dt == LPO_DT_BF16  ? lpo_bf16_to_f32(lpo_f32_to_bf16(v))
           : dt == LPO_DT_F16 ? lpo_f16_to_f32(lpo_f32_to_f16(v))
                              : v;
}
/* n values in [lo, hi) as dt stores them */
static float *random_dt(size_t n, float lo, float hi, lpo_dtype dt) {
    float *v = host_buf(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = to_dt(uniform(lo, hi), dt);
    return v;
}
/* host floats -> a new device buffer of dt elements (cap elements allocated, cap >= n) */
static void *upload(const float *h, size_t n, size_t cap, lpo_dtype dt) {
    unsigned char *tmp = malloc(n * esize(dt) + 1);
    void *d = NULL;
    assert_non_null(tmp);
    for (size_t i = 0; i < n; i++) {
        if (dt == LPO_DT_F32)
            memcpy(tmp + 4 * i, &h[i], 4);
        else {
            const uint16_t b = dt == LPO_DT_BF16 ? lpo_f32_to_bf16(h[i]) : lpo_f32_to_f16(h[i]);
            memcpy(tmp + 2 * i, &b, 2);
        }
    }
    d = dev_buf(cap * esize(dt));
    CUDA_OK(cudaMemcpy(d, tmp, n * esize(dt), cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}

/* ---- comparison ------------------------------------------------------------------------------------ */
/* element i of raw bytes holding dt elements, as f32 */
static float raw_at(const unsigned char *raw, size_t i, lpo_dtype dt) {
    float v;
    if (dt == LPO_DT_F32) {
        memcpy(&v, raw + 4 * i, 4);
        return v;
    }
    uint16_t b;
    memcpy(&b, raw + 2 * i, 2);
    return dt == LPO_DT_BF16 ? lpo_bf16_to_f32(b) : lpo_f16_to_f32(b);
}

static int g_fail;            /* failing checks of the current test */
static cudaStream_t g_stream; /* a blocking stream (ordered with the legacy stream's memsets and copies) */
typedef struct {
    double worst;     /* max over elements of |err| / tolerance */
    double nmse;      /* worst normalized MSE */
    int cases, fails; /* checks, failing checks */
} agg_t;

/* y (rows, n) of ydt downloaded from d against ref (m, n); rows m.. must still hold the poison bytes */
static void compare(agg_t *a, const char *what, const void *d, lpo_dtype ydt, const float *ref, int64_t m,
                    int64_t n, int64_t rows, lpo_dtype dt) {
    const double atol = dt == LPO_DT_F32 ? 2e-5 : dt == LPO_DT_F16 ? 3e-3 : 2e-2;
    const double rtol = dt == LPO_DT_F32 ? 1e-4 : dt == LPO_DT_F16 ? 3e-3 : 2e-2;
    const double nmse_max = dt == LPO_DT_F32 ? 1e-9 : dt == LPO_DT_F16 ? 2e-6 : 1e-4;
    const size_t es = esize(ydt), total = (size_t)(rows * n), used = (size_t)(m * n);
    unsigned char *raw = malloc(total * es + 1);
    assert_non_null(raw);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(raw, d, total * es, cudaMemcpyDeviceToHost));
    double ss = 0, se = 0, worst = 0;
    size_t bad = 0, first = 0, overrun = 0;
    for (size_t i = 0; i < used; i++) ss += (double)ref[i] * ref[i];
    const double rms = sqrt(ss / (double)used);
    for (size_t i = 0; i < used; i++) { // y (m, n): got vs ref
        const float got = raw_at(raw, i, ydt);
        const double e = isfinite(got) ? fabs((double)got - ref[i]) : INFINITY,
                     tol = atol * rms + rtol * fabs(ref[i]);
        if (isfinite(e)) se += e * e;
        if (!(e <= tol) && !bad++) first = i;
        if (e / tol > worst) worst = e / tol;
    }
    for (size_t i = used * es; i < total * es; i++) overrun += raw[i] != 0xff;
    const double nmse = ss > 0 ? se / ss : se;
    a->cases++;
    if (worst > a->worst) a->worst = worst;
    if (nmse > a->nmse) a->nmse = nmse;
    if (bad || overrun || nmse > nmse_max) {
        a->fails++;
        g_fail++;
        printf("    FAIL %s m %lld: %zu of %zu out of tolerance (first at %zu, ref %g), nmse %.2e, %zu bytes "
               "written "
               "past row m\n",
               what, (long long)m, bad, used, first, (double)ref[first], nmse, overrun);
    }
    free(raw);
}

static void report(const agg_t *a, const char *what) {
    printf("  %-50s %4d cases  worst err/tol %.3f  worst nmse %.2e%s\n", what, a->cases, a->worst, a->nmse,
           a->fails ? "  FAIL" : "");
}

/* one launcher call (st: its status) writing dy (m of MAXM + 1 poisoned rows of n) checked against ref */
static void check_call(const char *what, lpo_status st, const void *dy, const float *ref, int64_t m,
                       int64_t n, lpo_dtype dt) {
    agg_t a = {0};
    status_ok(st, what, __LINE__);
    compare(&a, what, dy, dt, ref, m, n, MAXM + 1, dt);
    report(&a, what);
}

/* the next m to check after m (quick: 1, 5, 8) */
static int64_t next_m(int64_t m) {
    const char *q = getenv("LPO_TEST_QUICK");
    return q && !strcmp(q, "1") ? (m == 1 ? 5 : m == 5 ? MAXM : MAXM + 1) : m + 1;
}

static void seed_from_env(void) {
    const char *s = getenv("LPO_TEST_SEED");
    g_state = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    if (!g_state) g_state = 1;
}

/* Is cfg expected to refuse (dt, k)? MMA needs f16/bf16 and 16-byte aligned rows. */
static int refuses(const lpo_cuda_gemv_cfg *c, lpo_dtype dt, int64_t k) {
    return c->kind == LPO_CUDA_GEMV_MMA && (dt == LPO_DT_F32 || (k * (int64_t)esize(dt)) % 16 != 0);
}

/* ---- validation: y = x W^T (+ bias | + y | -> f32) --------------------------------------------------- */
static void test_gemv(void **state) {
    (void)state;
    g_fail = 0;
    static const int64_t shapes[][2] = {{1000, 4096}, {37, 72},    {300, 1000},
                                        {77, 515},    {2053, 264}, {130, 1028}};
    static const lpo_dtype dts[3] = {LPO_DT_F32, LPO_DT_F16, LPO_DT_BF16};
    static const char *vname[4] = {"", " + bias", " (y += x W^T)", " -> f32"};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const lpo_dtype dt = dts[d];
            const int64_t n = shapes[s][0], k = shapes[s][1];
            float *x = random_dt((size_t)(MAXM * k), -1.f, 1.f, dt),
                  *W = random_dt((size_t)(n * k), -1.f, 1.f, dt);
            float *b = random_dt((size_t)n, -2.f, 2.f, dt),
                  *y0 = random_dt((size_t)(MAXM * n), -8.f, 8.f, dt);
            float *ref = host_buf((size_t)(4 * MAXM * n) * sizeof *ref); /* [variant][MAXM rows][n] */
            float *r0 = ref, *r1 = ref + MAXM * n, *r2 = ref + 2 * MAXM * n, *r3 = ref + 3 * MAXM * n;
            /* rows are independent: row t of the 8-row product serves every m > t */
            lpo_cpu_matmul(r0, x, W, NULL, MAXM, n, k, 1);
            for (int64_t i = 0; i < MAXM * n; i++) {
                r1[i] = r0[i] + b[i % n];
                r2[i] = r0[i] + y0[i];
                r3[i] = r0[i];
            }
            void *dx = upload(x, (size_t)(MAXM * k), (size_t)(MAXM * k), dt);
            void *dW = upload(W, (size_t)(n * k), (size_t)(n * k), dt),
                 *db = upload(b, (size_t)n, (size_t)n, dt);
            void *dy0 = upload(y0, (size_t)(MAXM * n), (size_t)(MAXM * n), dt);
            void *dy = dev_buf((size_t)((MAXM + 1) * n) * 4);
            for (int c = 0; c < NCFG; c++) {
                char cn[32], what[96];
                agg_t a = {0};
                snprintf(what, sizeof what, "%s gemv n %lld k %lld %s", lpo_dtype_name(dt), (long long)n,
                         (long long)k, cfg_name(&CFGS[c], cn, sizeof cn));
                if (refuses(&CFGS[c], dt, k)) { // must refuse, cleanly
                    const lpo_status st =
                        lpo_cuda_gemv_cfg_run(&CFGS[c], dy, dt, dx, dW, NULL, 1, n, k, 0.f, 0, dt, g_stream);
                    if (st != LPO_E_UNSUPPORTED) {
                        g_fail++;
                        printf("    FAIL %s: status %d, want LPO_E_UNSUPPORTED\n", what, (int)st);
                    }
                    continue;
                }
                for (int64_t m = 1; m <= MAXM; m = next_m(m))
                    for (int v = 0; v < 4; v++) { // plain | bias | residual | f32 out
                        const lpo_dtype ydt = v == 3 ? LPO_DT_F32 : dt;
                        CUDA_OK(cudaMemset(dy, 0xff, (size_t)((MAXM + 1) * n) * esize(ydt)));
                        if (v == 2)
                            CUDA_OK(
                                cudaMemcpy(dy, dy0, (size_t)(m * n) * esize(dt), cudaMemcpyDeviceToDevice));
                        ST_OK(lpo_cuda_gemv_cfg_run(&CFGS[c], dy, ydt, dx, dW, v == 1 ? db : NULL, m, n, k,
                                                    v == 2 ? 1.f : 0.f, 0, dt, g_stream));
                        char w2[128];
                        snprintf(w2, sizeof w2, "%s%s", what, vname[v]);
                        compare(&a, w2, dy, ydt, ref + v * MAXM * n, m, n, MAXM + 1, dt);
                    }
                report(&a, what);
            }
            if (dt == LPO_DT_BF16 && s == 0) { // the public launcher: AUTO, here with the bias
                CUDA_OK(cudaMemset(dy, 0xff, (size_t)((MAXM + 1) * n) * esize(dt)));
                check_call("lpo_cuda_gemv bf16 m 2 + bias",
                           lpo_cuda_gemv(dy, dt, dx, dW, db, 2, n, k, 0.f, dt, 0), dy, r1, 2, n, dt);
            }
            release_all();
        }
    if (g_fail) fail_msg("gemv: %d failing checks (FAIL lines above)", g_fail);
}

/* ---- validation: act = silu(x Wg^T) * (x Wu^T) -------------------------------------------------------- */
static void test_gemv_swiglu(void **state) {
    (void)state;
    g_fail = 0;
    static const int64_t shapes[][2] = {{1000, 4096}, {37, 72}, {300, 1000}, {77, 515}};
    static const lpo_dtype dts[3] = {LPO_DT_F32, LPO_DT_F16, LPO_DT_BF16};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const lpo_dtype dt = dts[d];
            const int64_t I = shapes[s][0], k = shapes[s][1];
            float *x = random_dt((size_t)(MAXM * k), -1.f, 1.f, dt);
            float *W = random_dt((size_t)(2 * I * k), -0.1f, 0.1f, dt);
            float *gu = host_buf((size_t)(MAXM * 2 * I) * sizeof *gu);
            float *ref = host_buf((size_t)(MAXM * I) * sizeof *ref);
            lpo_cpu_matmul(gu, x, W, NULL, MAXM, 2 * I, k, 1);
            for (int64_t i = 0; i < MAXM * 2 * I; i++)
                gu[i] = to_dt(gu[i], dt); /* as the unfused gemm stores gu */
            lpo_cpu_swiglu(ref, gu, MAXM, I, 1);
            void *dx = upload(x, (size_t)(MAXM * k), (size_t)(MAXM * k), dt);
            void *dW = upload(W, (size_t)(2 * I * k), (size_t)(2 * I * k), dt);
            void *dy = dev_buf((size_t)((MAXM + 1) * I) * esize(dt));
            for (int c = 0; c < NCFG; c++) {
                char cn[32], what[96];
                agg_t a = {0};
                snprintf(what, sizeof what, "%s gemv_swiglu I %lld k %lld %s", lpo_dtype_name(dt),
                         (long long)I, (long long)k, cfg_name(&CFGS[c], cn, sizeof cn));
                if (refuses(&CFGS[c], dt, k)) continue; /* test_gemv checks the refusal */
                for (int64_t m = 1; m <= MAXM; m = next_m(m)) {
                    CUDA_OK(cudaMemset(dy, 0xff, (size_t)((MAXM + 1) * I) * esize(dt)));
                    ST_OK(
                        lpo_cuda_gemv_cfg_run(&CFGS[c], dy, dt, dx, dW, NULL, m, I, k, 0.f, 1, dt, g_stream));
                    compare(&a, what, dy, dt, ref, m, I, MAXM + 1, dt);
                }
                report(&a, what);
            }
            if (dt == LPO_DT_BF16 && s == 0) { // the public launcher is the AUTO configuration
                CUDA_OK(cudaMemset(dy, 0xff, (size_t)((MAXM + 1) * I) * esize(dt)));
                check_call("lpo_cuda_gemv_swiglu bf16 m 3", lpo_cuda_gemv_swiglu(dy, dx, dW, 3, I, k, dt, 0),
                           dy, ref, 3, I, dt);
            }
            release_all();
        }
    if (g_fail) fail_msg("gemv_swiglu: %d failing checks (FAIL lines above)", g_fail);
}

/* the PDL chains' cases: both GEMV kernels (FMA at m <= 4, MMA at 8), every dtype */
static const struct {
    lpo_dtype dt;
    int64_t m;
} PDL_CASES[] = {{LPO_DT_BF16, 1}, {LPO_DT_BF16, 8}, {LPO_DT_F16, 3}, {LPO_DT_F32, 2}};
#define N_PDL_CASES (sizeof PDL_CASES / sizeof PDL_CASES[0])

/* ---- PDL: a GEMV reading the output of the GEMV before it, both launched with PDL ------------------------
 * y1 (m, n1) = x W1^T, then y2 (m, n2) = y1 W2^T with the second kernel started while the first still runs
 * (the first lets dependents launch as soon as all its blocks have begun): the second must not read y1
 * before griddepcontrol.wait. y1 and y2 are poisoned before every pair (NaN); 20 pairs on a stream, then 20
 * replays of a CUDA graph of the pair. */
static void test_gemv_pdl_chain(void **state) {
    (void)state;
    g_fail = 0;
    const int64_t n1 = 4096, k1 = 4096,
                  n2 = 1000; /* the first GEMV streams 32-64 MB: a wide overlap window */
    const lpo_cuda_gemv_cfg pdl = {LPO_CUDA_GEMV_AUTO, 0, 0, 1};
    cudaStream_t cs = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    for (size_t i = 0; i < N_PDL_CASES; i++) {
        const lpo_dtype dt = PDL_CASES[i].dt;
        const int64_t m = PDL_CASES[i].m;
        float *x = random_dt((size_t)(m * k1), -1.f, 1.f, dt),
              *W1 = random_dt((size_t)(n1 * k1), -0.05f, 0.05f, dt);
        float *W2 = random_dt((size_t)(n2 * n1), -0.05f, 0.05f, dt);
        float *y1 = host_buf((size_t)(m * n1) * sizeof *y1), *ref = host_buf((size_t)(m * n2) * sizeof *ref);
        lpo_cpu_matmul(y1, x, W1, NULL, m, n1, k1, 1);
        for (int64_t j = 0; j < m * n1; j++) y1[j] = to_dt(y1[j], dt); /* stored in dt between the two */
        lpo_cpu_matmul(ref, y1, W2, NULL, m, n2, n1, 1);
        void *dx = upload(x, (size_t)(m * k1), (size_t)(m * k1), dt),
             *dW1 = upload(W1, (size_t)(n1 * k1), (size_t)(n1 * k1), dt);
        void *dW2 = upload(W2, (size_t)(n2 * n1), (size_t)(n2 * n1), dt);
        void *dy1 = dev_buf((size_t)(m * n1) * esize(dt)), *dy2 = dev_buf((size_t)((m + 1) * n2) * esize(dt));
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
        ST_OK(lpo_cuda_gemv_cfg_run(&pdl, dy1, dt, dx, dW1, NULL, m, n1, k1, 0.f, 0, dt, cs));
        ST_OK(lpo_cuda_gemv_cfg_run(&pdl, dy2, dt, dy1, dW2, NULL, m, n2, n1, 0.f, 0, dt, cs));
        CUDA_OK(cudaStreamEndCapture(cs, &graph));
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        agg_t a = {0};
        char what[64];
        snprintf(what, sizeof what, "%s pdl chain m %lld (stream, graph)", lpo_dtype_name(dt), (long long)m);
        for (int r = 0; r < 40; r++) { // pairs 0..19 launched on the stream, 20..39 graph replays
            CUDA_OK(cudaMemsetAsync(dy1, 0xff, (size_t)(m * n1) * esize(dt), cs));
            CUDA_OK(cudaMemsetAsync(dy2, 0xff, (size_t)((m + 1) * n2) * esize(dt), cs));
            if (r < 20) {
                ST_OK(lpo_cuda_gemv_cfg_run(&pdl, dy1, dt, dx, dW1, NULL, m, n1, k1, 0.f, 0, dt, cs));
                ST_OK(lpo_cuda_gemv_cfg_run(&pdl, dy2, dt, dy1, dW2, NULL, m, n2, n1, 0.f, 0, dt, cs));
            } else
                CUDA_OK(cudaGraphLaunch(exec, cs));
            CUDA_OK(cudaStreamSynchronize(cs));
            compare(&a, what, dy2, dt, ref, m, n2, m + 1, dt);
        }
        report(&a, what);
        CUDA_OK(cudaGraphExecDestroy(exec));
        CUDA_OK(cudaGraphDestroy(graph));
        release_all();
    }
    CUDA_OK(cudaStreamDestroy(cs));
    if (g_fail) fail_msg("pdl chain: %d failing checks (FAIL lines above)", g_fail);
}

/* ---- PDL through a decode step's kernels (lpo_cuda_pdl_begin) ----------------------------------------
 * The kernels of a layer chained as the engine launches them, with PDL on for the stream: a long GEMV
 * (h = x0 W1^T, 32-64 MB of weights: a wide window), the residual add + RMSNorm (res += h, xn = norm(res)),
 * a GEMV reading xn (rmsnorm -> gemv), the QKV GEMV, RoPE + KV append, the flash-decoding attention (and its
 * combine) and a GEMV reading its output (attention -> gemv). Every intermediate and this step's cache rows
 * are poisoned (NaN bytes) before each run and res restored: a kernel that read its input before
 * griddepcontrol.wait would read NaN or a stale row. 10 runs on the stream and 10 replays of the captured
 * graph (programmatic edges) must give the plain run's y1, y2 and res bit for bit (the same kernels, the same
 * order of sums), and the plain run must be finite. */
typedef struct {
    lpo_dtype dt;
    int64_t m, H, nh, nkv, hd, ctx, n1;
    int ns;
    void *x0, *W1, *h, *res0, *res, *nw, *xn, *W2, *y1, *W3, *qkv, *kc, *vc, *att, *W4, *y2, *ws;
    float *cos_t, *sin_t;
    int32_t *slot;
    int64_t *pos;
    size_t ws_bytes;
    int64_t hpos[MAXM];
    int32_t hslot[MAXM];
} chain_t;

static void chain_poison(const chain_t *c, cudaStream_t s) {
    const size_t es = esize(c->dt), qkvw = (size_t)((c->nh + 2 * c->nkv) * c->hd),
                 kvd = (size_t)(c->nkv * c->hd);
    const size_t m = (size_t)c->m;
    CUDA_OK(cudaMemsetAsync(c->h, 0xff, m * (size_t)c->H * es, s));
    CUDA_OK(cudaMemsetAsync(c->xn, 0xff, m * (size_t)c->H * es, s));
    CUDA_OK(cudaMemsetAsync(c->y1, 0xff, m * (size_t)c->n1 * es, s));
    CUDA_OK(cudaMemsetAsync(c->qkv, 0xff, m * qkvw * es, s));
    CUDA_OK(cudaMemsetAsync(c->att, 0xff, m * (size_t)(c->nh * c->hd) * es, s));
    CUDA_OK(cudaMemsetAsync(c->y2, 0xff, m * (size_t)c->n1 * es, s));
    CUDA_OK(cudaMemcpyAsync(c->res, c->res0, m * (size_t)c->H * es, cudaMemcpyDeviceToDevice, s));
    for (int64_t t = 0; t < c->m; t++) { // this step's cache row of token t
        const size_t at = ((size_t)c->hslot[t] * (size_t)c->ctx + (size_t)c->hpos[t]) * kvd * es;
        CUDA_OK(cudaMemsetAsync((char *)c->kc + at, 0xff, kvd * es, s));
        CUDA_OK(cudaMemsetAsync((char *)c->vc + at, 0xff, kvd * es, s));
    }
}

static void chain_run(const chain_t *c, cudaStream_t s) {
    const lpo_dtype dt = c->dt;
    const int64_t m = c->m, H = c->H, qkvw = (c->nh + 2 * c->nkv) * c->hd;
    ST_OK(lpo_cuda_gemv(c->h, dt, c->x0, c->W1, NULL, m, H, H, 0.f, dt, s));
    ST_OK(lpo_cuda_add_rmsnorm(c->res, c->h, c->xn, c->nw, m, H, 1e-5f, dt, s));
    ST_OK(lpo_cuda_gemv(c->y1, dt, c->xn, c->W2, NULL, m, c->n1, H, 0.f, dt, s));
    ST_OK(lpo_cuda_gemv(c->qkv, dt, c->xn, c->W3, NULL, m, qkvw, H, 0.f, dt, s));
    ST_OK(lpo_cuda_qkv_post(c->qkv, NULL, NULL, 0.f, c->cos_t, c->sin_t, c->kc, c->vc, NULL, NULL, c->slot,
                            c->pos, m, c->nh, c->nkv, c->hd, c->ctx, dt, s));
    ST_OK(lpo_cuda_attention_decode(c->att, c->qkv, c->kc, c->vc, NULL, NULL, c->slot, c->pos, m, c->nh,
                                    c->nkv, c->hd, c->ctx, 0, c->ns, c->ws, c->ws_bytes, dt, s));
    ST_OK(lpo_cuda_gemv(c->y2, dt, c->att, c->W4, NULL, m, c->n1, c->nh * c->hd, 0.f, dt, s));
}

/* the chain's outputs y1 | y2 | res as raw bytes into out */
static void chain_read(const chain_t *c, unsigned char *out) {
    const size_t es = esize(c->dt), a = (size_t)(c->m * c->n1) * es, b = (size_t)(c->m * c->H) * es;
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(out, c->y1, a, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(out + a, c->y2, a, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(out + 2 * a, c->res, b, cudaMemcpyDeviceToHost));
}

/* elements of n (dt) at raw that are not finite */
static size_t count_nonfinite(const unsigned char *raw, size_t n, lpo_dtype dt) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(raw_at(raw, i, dt));
    return bad;
}

static void test_pdl_step_chain(void **state) {
    (void)state;
    g_fail = 0;
    int dev = 0, n_sm = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    cudaStream_t cs = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    for (size_t i = 0; i < N_PDL_CASES; i++) {
        chain_t c;
        memset(&c, 0, sizeof c);
        c.dt = PDL_CASES[i].dt, c.m = PDL_CASES[i].m, c.H = 4096, c.nh = 32, c.nkv = 8, c.hd = 64,
        c.ctx = 512;
        c.n1 = 1000;
        const lpo_dtype dt = c.dt;
        const int64_t m = c.m, H = c.H, qkvw = (c.nh + 2 * c.nkv) * c.hd, kvd = c.nkv * c.hd;
        const int64_t cache = m * c.ctx * kvd, tab = c.ctx * (c.hd / 2);
        for (int64_t t = 0; t < m; t++) c.hslot[t] = (int32_t)(m - 1 - t), c.hpos[t] = 200 + 37 * t;
        c.ns = lpo_cuda_attention_decode_splits(m, c.nh, c.nkv, c.ctx, n_sm);
        c.ws_bytes = lpo_cuda_attention_decode_workspace(m, c.nh, c.hd, c.ns);
        c.x0 = upload(random_dt((size_t)(m * H), -1.f, 1.f, dt), (size_t)(m * H), (size_t)(m * H), dt);
        c.W1 = upload(random_dt((size_t)(H * H), -0.03f, 0.03f, dt), (size_t)(H * H), (size_t)(H * H), dt);
        c.res0 = upload(random_dt((size_t)(m * H), -1.f, 1.f, dt), (size_t)(m * H), (size_t)(m * H), dt);
        c.nw = upload(random_dt((size_t)H, 0.5f, 1.5f, dt), (size_t)H, (size_t)H, dt);
        c.W2 = upload(random_dt((size_t)(c.n1 * H), -0.03f, 0.03f, dt), (size_t)(c.n1 * H),
                      (size_t)(c.n1 * H), dt);
        c.W3 = upload(random_dt((size_t)(qkvw * H), -0.03f, 0.03f, dt), (size_t)(qkvw * H),
                      (size_t)(qkvw * H), dt);
        c.W4 = upload(random_dt((size_t)(c.n1 * c.nh * c.hd), -0.03f, 0.03f, dt),
                      (size_t)(c.n1 * c.nh * c.hd), (size_t)(c.n1 * c.nh * c.hd), dt);
        c.kc = upload(random_dt((size_t)cache, -1.f, 1.f, dt), (size_t)cache, (size_t)cache, dt);
        c.vc = upload(random_dt((size_t)cache, -1.f, 1.f, dt), (size_t)cache, (size_t)cache, dt);
        c.cos_t = upload(random_dt((size_t)tab, -1.f, 1.f, LPO_DT_F32), (size_t)tab, (size_t)tab, LPO_DT_F32);
        c.sin_t = upload(random_dt((size_t)tab, -1.f, 1.f, LPO_DT_F32), (size_t)tab, (size_t)tab, LPO_DT_F32);
        c.h = dev_buf((size_t)(m * H) * esize(dt));
        c.res = dev_buf((size_t)(m * H) * esize(dt));
        c.xn = dev_buf((size_t)(m * H) * esize(dt));
        c.y1 = dev_buf((size_t)(m * c.n1) * esize(dt));
        c.qkv = dev_buf((size_t)(m * qkvw) * esize(dt));
        c.att = dev_buf((size_t)(m * c.nh * c.hd) * esize(dt));
        c.y2 = dev_buf((size_t)(m * c.n1) * esize(dt));
        c.ws = dev_buf(c.ws_bytes);
        c.slot = dev_buf((size_t)m * sizeof(int32_t));
        c.pos = dev_buf((size_t)m * sizeof(int64_t));
        CUDA_OK(cudaMemcpy(c.slot, c.hslot, (size_t)m * sizeof(int32_t), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(c.pos, c.hpos, (size_t)m * sizeof(int64_t), cudaMemcpyHostToDevice));
        const size_t out_bytes = (size_t)(2 * m * c.n1 + m * H) * esize(dt);
        unsigned char *ref = host_buf(out_bytes), *got = host_buf(out_bytes);
        chain_poison(&c, cs); /* the plain chain: the reference */
        chain_run(&c, cs);
        chain_read(&c, ref);
        const size_t ref_bad = count_nonfinite(ref, out_bytes / esize(dt), dt);
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        lpo_cuda_pdl_begin(cs);
        CUDA_OK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
        chain_run(&c, cs);
        CUDA_OK(cudaStreamEndCapture(cs, &graph));
        lpo_cuda_pdl_end();
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        int differ = 0;
        for (int r = 0; r < 20; r++) { // runs 0..9 launched on the stream with PDL, 10..19 graph replays
            chain_poison(&c, cs);
            if (r < 10) {
                lpo_cuda_pdl_begin(cs); /* after the poisoning: the chain's first launch is plain */
                chain_run(&c, cs);
                lpo_cuda_pdl_end();
            } else
                CUDA_OK(cudaGraphLaunch(exec, cs));
            chain_read(&c, got);
            differ += memcmp(got, ref, out_bytes) != 0;
        }
        printf("  %s m %lld (attention splits %d): plain run %zu non-finite; PDL runs (10 stream, 10 graph) "
               "differing from it bitwise: %d\n",
               lpo_dtype_name(dt), (long long)m, c.ns, ref_bad, differ);
        if (ref_bad || differ) {
            g_fail++;
            printf("    FAIL %s m %lld pdl step chain\n", lpo_dtype_name(dt), (long long)m);
        }
        CUDA_OK(cudaGraphExecDestroy(exec));
        CUDA_OK(cudaGraphDestroy(graph));
        release_all();
    }
    CUDA_OK(cudaStreamDestroy(cs));
    if (g_fail) fail_msg("pdl step chain: %d failing cases (FAIL lines above)", g_fail);
}

/* ---- refusals -------------------------------------------------------------------------------------- */
static void test_gemv_refuses(void **state) {
    (void)state;
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, 1 << 20));
    const lpo_dtype bf = LPO_DT_BF16;
    const lpo_cuda_gemv_cfg rows3 = {LPO_CUDA_GEMV_FMA, 3, 4, 0}, warps9 = {LPO_CUDA_GEMV_FMA, 4, 9, 0},
                            mma8 = {LPO_CUDA_GEMV_MMA, 8, 4, 0};
    const struct {
        const char *what;
        lpo_status st;
    } cases[] = {
        {"m 0", lpo_cuda_gemv(p, bf, p, p, NULL, 0, 64, 64, 0.f, bf, 0)},
        {"m 9", lpo_cuda_gemv(p, bf, p, p, NULL, MAXM + 1, 64, 64, 0.f, bf, 0)},
        {"n 0", lpo_cuda_gemv(p, bf, p, p, NULL, 1, 0, 64, 0.f, bf, 0)},
        {"k 0", lpo_cuda_gemv(p, bf, p, p, NULL, 1, 64, 0, 0.f, bf, 0)},
        {"y f16 from bf16", lpo_cuda_gemv(p, LPO_DT_F16, p, p, NULL, 1, 64, 64, 0.f, bf, 0)},
        {"q8_0 weights", lpo_cuda_gemv(p, LPO_DT_Q8_0, p, p, NULL, 1, 64, 64, 0.f, LPO_DT_Q8_0, 0)},
        {"swiglu + bias", lpo_cuda_gemv_cfg_run(NULL, p, bf, p, p, p, 1, 64, 64, 0.f, 1, bf, 0)},
        {"swiglu -> f32", lpo_cuda_gemv_cfg_run(NULL, p, LPO_DT_F32, p, p, NULL, 1, 64, 64, 0.f, 1, bf, 0)},
        {"fma rows 3", lpo_cuda_gemv_cfg_run(&rows3, p, bf, p, p, NULL, 1, 64, 64, 0.f, 0, bf, 0)},
        {"warps 9", lpo_cuda_gemv_cfg_run(&warps9, p, bf, p, p, NULL, 1, 64, 64, 0.f, 0, bf, 0)},
        {"mma rows 8", lpo_cuda_gemv_cfg_run(&mma8, p, bf, p, p, NULL, 1, 64, 64, 0.f, 0, bf, 0)},
    };
    int bad = 0;
    for (size_t i = 0; i < N_PDL_CASES; i++) {
        printf("  %-20s -> %s\n", cases[i].what, lpo_status_name(cases[i].st));
        bad += cases[i].st != LPO_E_UNSUPPORTED;
    }
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFree(p));
    assert_int_equal(bad, 0);
}

/* ---- timing ------------------------------------------------------------------------------------------ */
enum { T_CUBLAS, T_GEMV, T_GEMV_SWIGLU, T_CUBLAS_SWIGLU, T_SWIGLU, T_NORM_CUBLAS, T_NORM_GEMV };
typedef struct {
    int kind;
    lpo_cuda_gemv_cfg cfg;
    const char *W; /* ncopies rotated copies of (rows, k) */
    size_t copy_bytes;
    int ncopies, next;
    void *x, *y, *tmp, *norm_w; /* norm_w (k,): the RMSNorm weight of the chains (norm x into tmp) */
    lpo_dtype ydt;
    int64_t m, n, k; /* n: output width (swiglu: I) */
    float beta;
    lpo_cuda_gemm *g;
    cudaStream_t s;
} timed_t;

static lpo_status timed_launch(timed_t *t) {
    const lpo_dtype bf = LPO_DT_BF16;
    const char *W = t->W + (size_t)(t->next++ % t->ncopies) * t->copy_bytes;
    switch (t->kind) {
    case T_CUBLAS:
        return lpo_cuda_gemm_run(t->g, t->y, t->ydt, t->x, W, NULL, t->m, t->n, t->k, t->beta, bf, t->s);
    case T_GEMV:
        return lpo_cuda_gemv_cfg_run(&t->cfg, t->y, t->ydt, t->x, W, NULL, t->m, t->n, t->k, t->beta, 0, bf,
                                     t->s);
    case T_GEMV_SWIGLU:
        return lpo_cuda_gemv_cfg_run(&t->cfg, t->y, bf, t->x, W, NULL, t->m, t->n, t->k, 0.f, 1, bf, t->s);
    case T_SWIGLU: return lpo_cuda_swiglu(t->y, t->tmp, t->m, t->n, bf, t->s); /* act from gu in tmp */
    case T_NORM_CUBLAS:
    case T_NORM_GEMV: { // tmp = rmsnorm(x), then y = tmp W^T: a layer's norm and the linear after it
        lpo_status st = lpo_cuda_rmsnorm(t->tmp, t->x, t->norm_w, t->m, t->k, 1e-5f, bf, t->s);
        if (st != LPO_OK) return st;
        if (t->kind == T_NORM_CUBLAS)
            return lpo_cuda_gemm_run(t->g, t->y, t->ydt, t->tmp, W, NULL, t->m, t->n, t->k, 0.f, bf, t->s);
        return lpo_cuda_gemv_cfg_run(&t->cfg, t->y, t->ydt, t->tmp, W, NULL, t->m, t->n, t->k, 0.f, 0, bf,
                                     t->s);
    }
    default: { // gu = x [Wg; Wu]^T by cuBLASLt, then act = swiglu(gu)
        lpo_status st =
            lpo_cuda_gemm_run(t->g, t->tmp, bf, t->x, W, NULL, t->m, 2 * t->n, t->k, 0.f, bf, t->s);
        return st != LPO_OK ? st : lpo_cuda_swiglu(t->y, t->tmp, t->m, t->n, bf, t->s);
    }
    }
}

/* a case on base's buffers, stream and cuBLASLt context (cfg AUTO) */
static timed_t timed_case(const timed_t *base, int kind, const char *W, size_t copy_bytes, int ncopies,
                          lpo_dtype ydt, int64_t m, int64_t n, int64_t k, float beta) {
    timed_t t = *base;
    t.kind = kind;
    t.W = W;
    t.copy_bytes = copy_bytes;
    t.ncopies = ncopies;
    t.ydt = ydt;
    t.m = m;
    t.n = n;
    t.k = k;
    t.beta = beta;
    return t;
}

static int by_value(const void *a, const void *b) {
    const float u = *(const float *)a, v = *(const float *)b;
    return u < v ? -1 : u > v;
}

#define SAMPLES    60
#define PER_SAMPLE 10
typedef struct {
    double med, p10, p90; /* us per launch */
} tstat;

/* One CUDA graph of max(PER_SAMPLE, ncopies) launches (every weight copy once per replay, so none is in the
 * L2; graph replay, as the engine's decode step runs), after 3 eager launches (cuBLASLt picks its algorithm
 * outside the capture); 3 warm-up replays, then SAMPLES timed replays: us per launch. */
static tstat time_it(timed_t *t) {
    const int per = t->ncopies > PER_SAMPLE ? t->ncopies : PER_SAMPLE;
    float us[SAMPLES] = {0};
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaEvent_t e0, e1;
    for (int i = 0; i < 3; i++) ST_OK(timed_launch(t));
    CUDA_OK(cudaStreamBeginCapture(t->s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per; i++) ST_OK(timed_launch(t));
    CUDA_OK(cudaStreamEndCapture(t->s, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    for (int r = -3; r < SAMPLES; r++) {
        float ms = 0.f;
        CUDA_OK(cudaEventRecord(e0, t->s));
        CUDA_OK(cudaGraphLaunch(exec, t->s));
        CUDA_OK(cudaEventRecord(e1, t->s));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 0) us[r] = ms * 1000.f / (float)per;
    }
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    qsort(us, SAMPLES, sizeof us[0], by_value);
    return (tstat){us[SAMPLES / 2], us[SAMPLES / 10], us[SAMPLES - 1 - SAMPLES / 10]};
}

/* bytes/s of a device-to-device copy of 1 GiB (read + write bytes), median of 20 */
static double copy_bandwidth(void) {
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    CUDA_OK(cudaMalloc(&a, bytes));
    CUDA_OK(cudaMalloc(&b, bytes));
    CUDA_OK(cudaMemset(a, 0x5a, bytes));
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    float ms[23];
    for (int s = 0; s < 23; s++) {
        CUDA_OK(cudaEventRecord(e0, 0));
        CUDA_OK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        CUDA_OK(cudaEventRecord(e1, 0));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms[s], e0, e1));
    }
    qsort(ms + 3, 20, sizeof ms[0], by_value);
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
    return 2.0 * (double)bytes / (ms[3 + 10] * 1e-3);
}

typedef struct {
    const char *model, *name;
    int64_t n, k;
} linear_t;
static const linear_t LINEARS[] = {
    {"8B", "qkv", 6144, 4096},       {"8B", "o", 4096, 4096},         {"8B", "gate_up", 28672, 4096},
    {"8B", "down", 4096, 14336},     {"8B", "lm_head", 128256, 4096}, {"1B", "qkv", 3072, 2048},
    {"1B", "o", 2048, 2048},         {"1B", "gate_up", 16384, 2048},  {"1B", "down", 2048, 8192},
    {"1B", "lm_head", 128256, 2048},
};
#define NLIN ((int)(sizeof LINEARS / sizeof LINEARS[0]))

/* random bf16 copies of L's weight, enough (> 256 MB) that a rotation through them never hits the L2 */
static char *rotating_weights(const linear_t *L, uint64_t seed, int *ncopies) {
    const size_t wbytes = (size_t)(L->n * L->k) * 2;
    char *W = NULL;
    *ncopies = (int)((256u << 20) / wbytes) + 1;
    CUDA_OK(cudaMalloc((void **)&W, wbytes * (size_t)*ncopies));
    ST_OK(lpo_cuda_synth_fill(W, LPO_DT_BF16, L->n * L->k * *ncopies, seed, 0.0, 0.03, LPO_DT_BF16, 0));
    return W;
}

/* LPO_TEST_BENCH=0 turns the timing off (sanitizer runs) */
static int timing_wanted(void) {
    const char *b = getenv("LPO_TEST_BENCH");
    return !(b && !strcmp(b, "0"));
}

static void test_gemv_timing(void **state) {
    (void)state;
    if (!timing_wanted()) {
        printf("timing skipped (LPO_TEST_BENCH=0)\n");
        return;
    }
    struct cudaDeviceProp prop;
    int drv = 0;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CUDA_OK(cudaDriverGetVersion(&drv));
    const double bw = copy_bandwidth();
    printf(
        "\ntiming on %s (%d SMs, driver API %d), bf16; copy bandwidth (D2D 1 GiB, read + write) %.0f GB/s\n",
        prop.name, prop.multiProcessorCount, drv, bw / 1e9);
    printf("us per launch: CUDA graphs of max(%d, copies) launches, median of %d replays (p10-p90 for auto); "
           "GB/s = weight bytes / median\n",
           PER_SAMPLE, SAMPLES);
    const size_t wsb = 32u << 20;
    void *ws = dev_buf(wsb), *x = dev_buf((size_t)MAXM * 14336 * 2), *y = dev_buf((size_t)MAXM * 128256 * 4),
         *tmp = dev_buf((size_t)MAXM * 28672 * 2);
    lpo_cuda_gemm *g = NULL;
    cudaStream_t st = NULL;
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    ST_OK(lpo_cuda_gemm_create(ws, wsb, &g));
    void *norm_w = dev_buf((size_t)14336 * 2); /* RMSNorm weight of the chains */
    const timed_t base = {
        .cfg = CFGS[0], .ncopies = 1, .x = x, .y = y, .tmp = tmp, .norm_w = norm_w, .g = g, .s = st};
    ST_OK(lpo_cuda_synth_fill(x, LPO_DT_BF16, (int64_t)MAXM * 14336, 7, 0.0, 1.0, LPO_DT_BF16, 0));
    ST_OK(lpo_cuda_synth_fill(y, LPO_DT_BF16, (int64_t)MAXM * 128256 * 2, 8, 0.0, 1.0, LPO_DT_BF16, 0));
    printf("\n| linear (n x k) | m | MB | cuBLASLt us | GB/s | gemv us | p10-p90 | GB/s | %% copy | x cuBLAS "
           "| auto cfg |");
    char cn[32];
    const char *all_env = getenv("LPO_TEST_GEMV_ALL"); /* 1: time every configuration, not only auto / pdl */
    const int ncols = all_env && !strcmp(all_env, "1") ? NCFG : 2;
    for (int c = 1; c < ncols; c++) printf(" %s |", cfg_name(&CFGS[c], cn, sizeof cn));
    printf("\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|");
    for (int c = 1; c < ncols; c++) printf("--:|");
    printf("\n");
    static const int64_t ms[4] = {1, 2, 4, 8};
    double step[3][2][4] = {{{0}}}; /* cuBLASLt, gemv, gemv pdl; per model, per m: one step's linears */
    for (int l = 0; l < NLIN; l++) {
        const linear_t *L = &LINEARS[l];
        const size_t wbytes = (size_t)(L->n * L->k) * 2;
        int ncopies;
        char *W = rotating_weights(L, 100 + (uint64_t)l, &ncopies);
        const lpo_dtype ydt = strcmp(L->name, "lm_head") ? LPO_DT_BF16 : LPO_DT_F32;
        const int is8b = L->model[0] == '8', layers = is8b ? 32 : 16,
                  mult = strcmp(L->name, "lm_head") ? layers : 1;
        for (int mi = 0; mi < 4; mi++) {
            timed_t t = timed_case(&base, T_CUBLAS, W, wbytes, ncopies, ydt, ms[mi], L->n, L->k, 0.f);
            const tstat cb = time_it(&t);
            t.kind = T_GEMV;
            const tstat au = time_it(&t);
            const lpo_cuda_gemv_cfg pick = lpo_cuda_gemv_pick(ms[mi], L->n, L->k, LPO_DT_BF16, 0);
            step[0][!is8b][mi] += mult * cb.med;
            step[1][!is8b][mi] += mult * au.med;
            printf("| %s %s (%lldx%lld) | %lld | %.1f | %.2f | %.0f | %.2f | %.2f-%.2f | %.0f | %.1f%% | "
                   "%.2f | %s |",
                   L->model, L->name, (long long)L->n, (long long)L->k, (long long)ms[mi], wbytes / 1e6,
                   cb.med, wbytes / cb.med / 1e3, au.med, au.p10, au.p90, wbytes / au.med / 1e3,
                   100.0 * wbytes / (au.med * 1e-6) / bw, cb.med / au.med, cfg_name(&pick, cn, sizeof cn));
            for (int c = 1; c < ncols; c++) {
                t.cfg = CFGS[c];
                const double us = time_it(&t).med;
                if (c == 1) step[2][!is8b][mi] += mult * us; /* auto pdl */
                printf(" %.2f |", us);
            }
            printf("\n");
            fflush(stdout);
        }
        CUDA_OK(cudaFree(W));
    }
    printf("\nall linears of one decode step (32 / 16 layers + lm_head), us: cuBLASLt / gemv auto / gemv "
           "auto pdl\n");
    for (int md = 0; md < 2; md++)
        for (int mi = 0; mi < 4; mi++)
            printf("  %s m %lld: %.0f / %.0f / %.0f (%.2fx / %.2fx)\n", md ? "1B" : "8B", (long long)ms[mi],
                   step[0][md][mi], step[1][md][mi], step[2][md][mi], step[0][md][mi] / step[1][md][mi],
                   step[0][md][mi] / step[2][md][mi]);

    // fused epilogues: gate_up + SwiGLU, and o / down adding into the residual stream (beta 1)
    printf("\n| fused op | m | cuBLASLt (+ swiglu) us | gemv unfused us | gemv fused us | fused GB/s |\n"
           "|---|--:|--:|--:|--:|--:|\n");
    static const int fused[] = {2, 7, 1, 3, 6, 8}; /* gate_up 8B / 1B, o 8B, down 8B, o 1B, down 1B */
    for (size_t f = 0; f < sizeof fused / sizeof fused[0]; f++) {
        const linear_t *L = &LINEARS[fused[f]];
        const int glu = !strcmp(L->name, "gate_up");
        const size_t wbytes = (size_t)(L->n * L->k) * 2;
        int ncopies;
        char *W = rotating_weights(L, 200 + (uint64_t)f, &ncopies);
        for (int mi = 0; mi < 4; mi += 3) { // m = 1, 8
            const int64_t m = ms[mi], nout = glu ? L->n / 2 : L->n;
            const float beta = glu ? 0.f : 1.f;
            timed_t t = timed_case(&base, glu ? T_CUBLAS_SWIGLU : T_CUBLAS, W, wbytes, ncopies, LPO_DT_BF16,
                                   m, nout, L->k, beta);
            const tstat cb = time_it(&t);
            t.kind = T_GEMV;
            if (glu) { // unfused: gemv into gu, then swiglu
                t.n = L->n;
                t.y = tmp;
            }
            double unf = time_it(&t).med;
            if (glu) {
                t.kind = T_SWIGLU;
                t.n = nout;
                t.y = y;
                unf += time_it(&t).med;
                t.kind = T_GEMV_SWIGLU;
            }
            const tstat fu = time_it(&t);
            printf("| %s %s%s | %lld | %.2f | %.2f | %.2f | %.0f |\n", L->model, L->name,
                   glu ? " + swiglu" : " (y += x W^T)", (long long)m, cb.med, unf, fu.med,
                   wbytes / fu.med / 1e3);
        }
        CUDA_OK(cudaFree(W));
    }

    // chains: the RMSNorm before a linear, then the linear (PDL lets the GEMV stream weights during the norm)
    printf("\n| rmsnorm -> linear | m | cuBLASLt us | gemv us | gemv pdl us | pdl saves us "
           "|\n|---|--:|--:|--:|--:|--:|\n");
    static const int chained[] = {0, 2, 5, 7}; /* qkv, gate_up of 8B and 1B */
    ST_OK(lpo_cuda_synth_fill(norm_w, LPO_DT_BF16, 14336, 9, 1.0, 0.1, LPO_DT_BF16, 0));
    for (size_t f = 0; f < sizeof chained / sizeof chained[0]; f++) {
        const linear_t *L = &LINEARS[chained[f]];
        int ncopies;
        char *W = rotating_weights(L, 300 + (uint64_t)f, &ncopies);
        for (int mi = 0; mi < 4; mi += 3) { // m = 1, 8
            timed_t t = timed_case(&base, T_NORM_CUBLAS, W, (size_t)(L->n * L->k) * 2, ncopies, LPO_DT_BF16,
                                   ms[mi], L->n, L->k, 0.f);
            const double cb = time_it(&t).med;
            t.kind = T_NORM_GEMV;
            const double gv = time_it(&t).med;
            t.cfg = CFGS[1]; /* auto pdl */
            const double pd = time_it(&t).med;
            printf("| %s %s | %lld | %.2f | %.2f | %.2f | %.2f |\n", L->model, L->name, (long long)ms[mi], cb,
                   gv, pd, gv - pd);
        }
        CUDA_OK(cudaFree(W));
    }
    lpo_cuda_gemm_destroy(g);
    CUDA_OK(cudaStreamDestroy(st));
    release_all();
}

int main(void) {
    lpo_test_require_gpu();
    seed_from_env();
    if (cudaStreamCreate(&g_stream) != cudaSuccess) return 1;
    printf("test_cuda_gemv: LPO_TEST_SEED=%llu\n", (unsigned long long)g_state);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemv_refuses),   cmocka_unit_test(test_gemv),
        cmocka_unit_test(test_gemv_swiglu),    cmocka_unit_test(test_gemv_pdl_chain),
        cmocka_unit_test(test_pdl_step_chain), cmocka_unit_test(test_gemv_timing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
