/* GEMM for the linear ops and the LM head through cuBLASLt: y (m, n) = x (m, k) @ W^T (+ bias) (+ beta y),
 * W (n, k) row-major (HF Linear). In cuBLAS's column-major terms D (n x m, ld n) = op(A) B with A = W
 * (k x n, ld k, transposed) and B = x (k x m, ld k). Compute type CUBLAS_COMPUTE_32F (f32 accumulation; in
 * f32 mode it is true FP32: TF32 only comes with COMPUTE_32F_FAST_TF32, never used), scale type f32. The
 * bias rides the epilogue (CUBLASLT_EPILOGUE_BIAS, bias in y's dtype); beta = 1 accumulates into y (C = D in
 * place), which fuses a residual add.
 * Descriptors and the heuristic's first algorithm are cached per (m, n, k, dtypes, bias, beta, pointer
 * alignment), so only the first call at a shape talks to the heuristic.
 * W8A8 (lpo_cuda_gemm_fp8_run): A = W and B = x in e4m3, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on both
 * (one f32 scale per output channel, one per token: D[o][t] = scale_w[o] scale_x[t] sum_k W x), bias in the
 * compute dtype; the scale pointers are set per call (they change with every weight and step). Floor for a
 * 2048-token Llama-3.1-8B prefill: 31 TFLOP at the H100's ~1500 TFLOP/s dense fp8 (spec 1979 sparse/2 ~ 990
 * dense SXM figure times the measured/spec ratio of lpo ceilings) -> ~21-31 ms (docs/perf-notes.md).
 * Floor: max(2 m n k / peak, (n k + m k + m n) bytes / bandwidth). Llama-3.1-8B bf16 decode (m = 1): pure
 * weight streaming, 15 GB per token (all linears + LM head) -> 5.1 ms at 2.97 TB/s; REFERENCE.md's cuBLAS
 * figures (torch, H100): 6.32 ms. Prefill 2048: 2 * 2048 * 7.5e9 = 31 TFLOP -> 42 ms at 742 TFLOP/s.
 * Measurements: docs/perf-notes.md. */
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda_common.cuh"
#include "lpo/core.h"

#define GEMM_CACHE 128
#define TRY_ST(x)                                                                                            \
    do {                                                                                                     \
        lpo_status s_ = (x);                                                                                 \
        if (s_ != LPO_OK) return s_;                                                                         \
    } while (0)

typedef struct {
    int64_t m, n, k;
    int dt, y_dt, bias, beta, align;
    int fp8;     /* W8A8: A and B e4m3 with outer-vector scales (dt: the compute dtype of y and bias) */
    int refused; /* cuBLASLt has no algorithm for this shape (or refused it at launch): LPO_E_UNSUPPORTED at
                  * once on every later call, not a heuristic query per call (the caller falls back) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} gemm_entry;

struct lpo_cuda_gemm {
    cublasLtHandle_t lt;
    void *ws;
    size_t ws_bytes;
    gemm_entry e[GEMM_CACHE];
    int n, next; /* entries in use; next slot to evict when full (round robin) */
};

#define LT_CHECK(call, op)                                                                                   \
    do {                                                                                                     \
        cublasStatus_t s_ = (call);                                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                     \
            return lpo_errorf(LPO_E_CUDA, "%s: %s failed: %s (%s:%d)", op, #call,                            \
                              cublasLtGetStatusString(s_), __FILE__, __LINE__);                              \
    } while (0)

static cudaDataType_t cuda_type(lpo_dtype dt) {
    return dt == LPO_DT_F16 ? CUDA_R_16F : dt == LPO_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static void entry_free(gemm_entry *e) {
    if (e->op) cublasLtMatmulDescDestroy(e->op);
    if (e->a) cublasLtMatrixLayoutDestroy(e->a);
    if (e->b) cublasLtMatrixLayoutDestroy(e->b);
    if (e->d) cublasLtMatrixLayoutDestroy(e->d);
    memset(e, 0, sizeof *e);
}

extern "C" lpo_status lpo_cuda_gemm_create(void *workspace, size_t ws_bytes, lpo_cuda_gemm **out) {
    *out = NULL;
    lpo_cuda_gemm *g = (lpo_cuda_gemm *)calloc(1, sizeof *g);
    if (!g) return lpo_errorf(LPO_E_NOMEM, "gemm: out of host memory");
    cublasStatus_t s = cublasLtCreate(&g->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return lpo_errorf(LPO_E_CUDA, "gemm: cublasLtCreate failed: %s", cublasLtGetStatusString(s));
    }
    g->ws = workspace;
    g->ws_bytes = workspace ? ws_bytes : 0;
    *out = g;
    return LPO_OK;
}

extern "C" void lpo_cuda_gemm_destroy(lpo_cuda_gemm *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) entry_free(&g->e[i]);
    cublasLtDestroy(g->lt);
    free(g);
}

/* Largest power of two <= 256 dividing every pointer (what the heuristic may assume). */
static int ptr_align(const void *const *p, int np) {
    uintptr_t bits = 256;
    for (int i = 0; i < np; i++)
        if (p[i]) bits |= (uintptr_t)p[i];
    return (int)(bits & (~bits + 1));
}

/* Builds the descriptors of one shape and asks the heuristic for its best algorithm. W8A8 (scales: the two
 * scale vectors): the scale pointers are set before the query, cuBLASLt's heuristic answers "unsupported
 * value" for outer-vector scales without them (measured on an H200: every W8A8 GEMM then fell back to the
 * dequantized weight, 4.5x slower at 512 tokens). */
static lpo_status entry_make(lpo_cuda_gemm *g, gemm_entry *e, const void *bias, const void *const *scales) {
    const char *op = e->fp8 ? "gemm_fp8" : "gemm";
    const cudaDataType_t t = e->fp8 ? CUDA_R_8F_E4M3 : cuda_type((lpo_dtype)e->dt),
                         ty = cuda_type((lpo_dtype)e->y_dt);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), op);
    LT_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), op);
    LT_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), op);
    if (e->fp8) { /* per-channel x per-token scales; bias in the compute dtype (a cuBLASLt without the
                   * scale mode: LPO_E_UNSUPPORTED, the caller's fallback) */
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        const cudaDataType_t bt = cuda_type((lpo_dtype)e->dt);
        cublasStatus_t s =
            cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scales[0],
                                               sizeof scales[0]);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scales[1],
                                               sizeof scales[1]);
        if (s == CUBLAS_STATUS_SUCCESS && e->bias)
            s = cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        if (s != CUBLAS_STATUS_SUCCESS)
            return lpo_errorf(LPO_E_UNSUPPORTED, "%s: outer-vector fp8 scales: %s", op,
                              cublasLtGetStatusString(s));
    }
    if (e->bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        LT_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), op);
        LT_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                 op);
    }
    LT_CHECK(cublasLtMatrixLayoutCreate(&e->a, t, (uint64_t)e->k, (uint64_t)e->n, e->k), op);
    LT_CHECK(cublasLtMatrixLayoutCreate(&e->b, t, (uint64_t)e->k, (uint64_t)e->m, e->k), op);
    LT_CHECK(cublasLtMatrixLayoutCreate(&e->d, ty, (uint64_t)e->n, (uint64_t)e->m, e->n), op);
    /* A W8A8 GEMM whose C (beta y) is in the compute dtype reads the same layout as D */
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref), op);
    const uint32_t al = (uint32_t)e->align;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g->ws_bytes,
                                         sizeof g->ws_bytes);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(g->lt, e->op, e->a, e->b, e->d, e->d, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found < 1)
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "%s: cuBLASLt has no algorithm for m %lld n %lld k %lld (%s -> %s, bias %d, align %d): %s", op,
            (long long)e->m, (long long)e->n, (long long)e->k, lpo_dtype_name((lpo_dtype)e->dt),
            lpo_dtype_name((lpo_dtype)e->y_dt), e->bias, e->align, cublasLtGetStatusString(s));
    e->algo = res.algo;
    return LPO_OK;
}

/* The cached entry of a shape (made on first use), its bias pointer set. */
static lpo_status entry_for(lpo_cuda_gemm *g, int fp8, lpo_dtype dt, lpo_dtype y_dt, int64_t m, int64_t n,
                            int64_t k, const void *bias, const void *const *scales, float beta, int align,
                            gemm_entry **out) {
    const char *op = fp8 ? "gemm_fp8" : "gemm";
    gemm_entry *e = NULL;
    for (int i = 0; i < g->n && !e; i++) {
        gemm_entry *c = &g->e[i];
        if (c->m == m && c->n == n && c->k == k && c->dt == dt && c->y_dt == y_dt &&
            c->bias == (bias != NULL) && c->beta == (beta != 0.f) && c->align == align && c->fp8 == fp8)
            e = c;
    }
    if (e && e->refused)
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: cuBLASLt has no algorithm for m %lld n %lld k %lld", op,
                          (long long)m, (long long)n, (long long)k);
    if (!e) {
        const int slot = g->n < GEMM_CACHE ? g->n++ : (g->next++ % GEMM_CACHE);
        e = &g->e[slot];
        entry_free(e);
        e->m = m, e->n = n, e->k = k, e->dt = dt, e->y_dt = y_dt, e->bias = bias != NULL,
        e->beta = beta != 0.f;
        e->align = align;
        e->fp8 = fp8;
        lpo_status st = entry_make(g, e, bias, scales);
        if (st == LPO_E_UNSUPPORTED) { /* remembered: the shape's key kept, its descriptors freed */
            if (fp8) /* once per shape: the caller's fallback dequantizes the weight on every call */
                LPO_WARN("%s (the weight is dequantized for this shape instead: slower)", lpo_last_error());
            gemm_entry key = *e;
            memset(e, 0, sizeof *e);
            entry_free(&key);
            e->m = m, e->n = n, e->k = k, e->dt = dt, e->y_dt = y_dt, e->bias = bias != NULL,
            e->beta = beta != 0.f, e->align = align, e->fp8 = fp8, e->refused = 1;
            return st;
        }
        if (st != LPO_OK) {
            entry_free(e); // an entry that never matches (m 0)
            return st;
        }
    } else if (bias) {
        LT_CHECK(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                 op);
    }
    *out = e;
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_gemm_run(lpo_cuda_gemm *g, void *y, lpo_dtype y_dt, const void *x,
                                        const void *W, const void *bias, int64_t m, int64_t n, int64_t k,
                                        float beta, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "gemm";
    if (dt != LPO_DT_F32 && dt != LPO_DT_F16 && dt != LPO_DT_BF16)
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: dtype %s is not a compute dtype", op, lpo_dtype_name(dt));
    if (y_dt != dt && y_dt != LPO_DT_F32)
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: output dtype %s with inputs %s", op, lpo_dtype_name(y_dt),
                          lpo_dtype_name(dt));
    if (m < 0 || n <= 0 || k <= 0 || (beta != 0.f && beta != 1.f))
        return lpo_errorf(LPO_E_INVALID, "%s: m %lld n %lld k %lld beta %g", op, (long long)m, (long long)n,
                          (long long)k, (double)beta);
    if (m == 0) return LPO_OK;
    const void *ptrs[4] = {y, x, W, bias};
    gemm_entry *e;
    TRY_ST(entry_for(g, 0, dt, y_dt, m, n, k, bias, NULL, beta, ptr_align(ptrs, 4), &e));
    const float alpha = 1.f;
    if (lpo__cuda_pdl_on(stream)) lpo_cuda_pdl_break(); /* no programmatic edge leaves cuBLASLt's kernel */
    LT_CHECK(cublasLtMatmul(g->lt, e->op, &alpha, W, e->a, x, e->b, &beta, y, e->d, y, e->d, &e->algo, g->ws,
                            g->ws_bytes, stream),
             op);
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_gemm_fp8_run(lpo_cuda_gemm *g, void *y, lpo_dtype y_dt, const void *xq,
                                            const float *xscale, const void *Wq, const float *wscale,
                                            const void *bias, int64_t m, int64_t n, int64_t k, float beta,
                                            lpo_dtype dt, cudaStream_t stream) {
    const char *op = "gemm_fp8";
    if ((dt != LPO_DT_F16 && dt != LPO_DT_BF16) || (y_dt != dt && y_dt != LPO_DT_F32))
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: output %s with compute dtype %s (f16 / bf16)", op,
                          lpo_dtype_name(y_dt), lpo_dtype_name(dt));
    if (m < 0 || n <= 0 || k <= 0 || k % 16 || (beta != 0.f && beta != 1.f))
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: m %lld n %lld k %lld beta %g (k a multiple of 16)", op,
                          (long long)m, (long long)n, (long long)k, (double)beta);
    if (m == 0) return LPO_OK;
    const void *ptrs[6] = {y, xq, Wq, bias, xscale, wscale};
    const int align = ptr_align(ptrs, 6);
    if (align < 16)
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: pointers aligned to %d bytes (16 needed)", op, align);
    gemm_entry *e;
    const void *scales[2] = {wscale, xscale}; /* A: the weight's per-channel scales, B: the tokens' */
    TRY_ST(entry_for(g, 1, dt, y_dt, m, n, k, bias, scales, beta, align, &e));
    LT_CHECK(
        cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &wscale, sizeof wscale),
        op);
    LT_CHECK(
        cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xscale, sizeof xscale),
        op);
    const float alpha = 1.f;
    if (lpo__cuda_pdl_on(stream)) lpo_cuda_pdl_break();
    const cublasStatus_t s = cublasLtMatmul(g->lt, e->op, &alpha, Wq, e->a, xq, e->b, &beta, y, e->d, y, e->d,
                                            &e->algo, g->ws, g->ws_bytes, stream);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) { /* refused at launch: nothing ran, the caller falls back */
        e->refused = 1;
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: cublasLtMatmul: %s", op, cublasLtGetStatusString(s));
    }
    if (s != CUBLAS_STATUS_SUCCESS)
        return lpo_errorf(LPO_E_CUDA, "%s: cublasLtMatmul failed: %s (%s:%d)", op, cublasLtGetStatusString(s),
                          __FILE__, __LINE__);
    return LPO_OK;
}
