/* kbench cases: for each operator, its shapes and tensors from the kbench parameters, its FLOPs and
 * fewest DRAM bytes, its CPU version (the engine's reference kernels where they exist, else a plain C one
 * here) and its CUDA version (cuBLASLt for GEMMs, cuDNN for Conv2d/LSTM, kbench's own kernels for the
 * row and element-wise ops until the engine's can be run alone). Counting conventions (docs/metrics.md):
 * one FMA = 2 FLOPs; exp, tanh, rsqrt = 1 FLOP each; bytes = each input read once + each output written
 * once, in the storage dtype. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/kbench_internal.h"
#include "engine/cpu/cpu_kernels.h"
#include "hw/ceilings_internal.h"
#include "lpo/core.h"

#ifndef LPO_HAVE_CUDA
/* a CPU-only build registers no GPU runner (GPU() below): their definitions stay compiled, unused */
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

#define T_(c, i) ((c)->t[(i)].h)

static double esz(lpo_dtype el) {
    return lpo_dtype_info_of(el)->bytes;
}

static lpo_status need_pos(const char *key, int64_t v) {
    if (v > 0 && v <= ((int64_t)1 << 31)) return LPO_OK;
    return lpo_errorf(LPO_E_CONFIG, "kbench.%s must be in 1..2^31 (got %lld)", key, (long long)v);
}

/* f32 / f16 / bf16 only (the row and element-wise kernels) */
static lpo_status float_dtype(const kb_case *c) {
    if (c->el == LPO_DT_F32 || c->el == LPO_DT_F16 || c->el == LPO_DT_BF16) return LPO_OK;
    return lpo_errorf(LPO_E_UNSUPPORTED, "kbench.case=%s runs in f32, f16 or bf16 (kbench.dtype=%s)",
                      c->p.case_name, c->p.dtype);
}

/* ---- gemm: y (m, n) = x (m, k) @ W^T, W (n, k) ------------------------------------------------------------
 */
static lpo_status gemm_plan(kb_case *c) {
    lpo_status st;
    if ((st = need_pos("m", c->p.m)) || (st = need_pos("n", c->p.n)) || (st = need_pos("k", c->p.k)))
        return st;
    int64_t m = c->p.m, n = c->p.n, k = c->p.k;
    lpo_dtype out = c->el == LPO_DT_FP8 ? LPO_DT_BF16 : c->el == LPO_DT_INT8 ? LPO_DT_I32 : c->el;
    c->flops = 2.0 * (double)m * (double)n * (double)k;
    c->bytes = ((double)m * k + (double)n * k) * esz(c->el) + (double)m * n * esz(out);
    snprintf(c->shape, sizeof c->shape, "m=%lld n=%lld k=%lld", (long long)m, (long long)n, (long long)k);
    if (c->cuda) {
        snprintf(c->variant, sizeof c->variant, "cuBLASLt");
        return LPO_OK; /* the cuBLASLt bench owns and validates its data */
    }
    if (c->el != LPO_DT_F32)
        return lpo_errorf(LPO_E_UNSUPPORTED, "gemm on backend=cpu runs in f32 (kbench.dtype=%s)", c->p.dtype);
    snprintf(c->variant, sizeof c->variant, "C reference (lpo_cpu_matmul)");
    kb_add_tensor(c, "x", LPO_DT_F32, m * k, 0, -1, 1);
    kb_add_tensor(c, "W", LPO_DT_F32, n * k, 0, -1, 1);
    kb_add_tensor(c, "y", LPO_DT_F32, m * n, 1, 0, 0);
    c->atol = 1e-4 * sqrt((double)k); /* sums of k products of magnitude <= 1 */
    return LPO_OK;
}

static void gemm_cpu(kb_case *c) {
    lpo_cpu_matmul(T_(c, 2), T_(c, 0), T_(c, 1), NULL, c->p.m, c->p.n, c->p.k, c->nt);
}

static lpo_status gemm_gpu_init(kb_case *c) {
#ifdef LPO_HAVE_CUDA
    /* y (m, n) row-major = D (n x m) column-major of the TN bench with its m = our n, its n = our m */
    lpo__gemm_bench *b;
    lpo_status st =
        lpo__gemm_bench_open(c->device, kb_case_roof(c), (int)c->p.n, (int)c->p.m, (int)c->p.k, 0, &b);
    if (st) return st;
    c->priv = b;
    c->self_validated = 1;
    snprintf(c->variant, sizeof c->variant, "cuBLASLt (%s)", lpo__gemm_bench_detail(b));
    return LPO_OK;
#else
    (void)c;
    return lpo_errorf(LPO_E_NO_DEVICE, "built without CUDA");
#endif
}

static lpo_status gemm_gpu_run(kb_case *c) {
#ifdef LPO_HAVE_CUDA
    return lpo__gemm_bench_run(c->priv, c->stream);
#else
    (void)c;
    return LPO_E_NO_DEVICE;
#endif
}

static void gemm_gpu_fini(kb_case *c) {
#ifdef LPO_HAVE_CUDA
    lpo__gemm_bench_close(c->priv);
#endif
    c->priv = NULL;
}

/* ---- rmsnorm: y (m, n) = x / rms(x) * w
 * -------------------------------------------------------------------- */
static lpo_status rows_plan(kb_case *c, const char *what) {
    lpo_status st;
    if ((st = need_pos("m", c->p.m)) || (st = need_pos("n", c->p.n)) || (st = float_dtype(c))) return st;
    snprintf(c->shape, sizeof c->shape, "m=%lld n=%lld", (long long)c->p.m, (long long)c->p.n);
    snprintf(c->variant, sizeof c->variant, "%s", c->cuda ? "lpo kbench kernel" : what);
    return LPO_OK;
}

static lpo_status rmsnorm_plan(kb_case *c) {
    lpo_status st = rows_plan(c, "C reference (lpo_cpu_rmsnorm)");
    if (st) return st;
    double mn = (double)c->p.m * (double)c->p.n;
    kb_add_tensor(c, "x", c->el, c->p.m * c->p.n, 0, -1, 1);
    kb_add_tensor(c, "w", c->el, c->p.n, 0, 0.5f, 1.5f);
    kb_add_tensor(c, "y", c->el, c->p.m * c->p.n, 1, 0, 0);
    c->flops = 4.0 * mn; /* x^2 + sum, x * r, * w */
    c->bytes = (2.0 * mn + (double)c->p.n) * esz(c->el);
    return LPO_OK;
}
static void rmsnorm_cpu(kb_case *c) {
    lpo_cpu_rmsnorm(T_(c, 2), T_(c, 0), T_(c, 1), c->p.m, c->p.n, (float)c->p.eps, c->nt);
}
static lpo_status rmsnorm_gpu(kb_case *c) {
    return lpo__kb_rmsnorm(c->el, c->t[2].d, c->t[0].d, c->t[1].d, c->p.m, c->p.n, (float)c->p.eps,
                           c->stream);
}

/* ---- layernorm + gelu: y = gelu_tanh(layernorm(x) * w + b) -----------------------------------------------
 */
static lpo_status lngelu_plan(kb_case *c) {
    lpo_status st = rows_plan(c, "C reference (kbench)");
    if (st) return st;
    double mn = (double)c->p.m * (double)c->p.n;
    kb_add_tensor(c, "x", c->el, c->p.m * c->p.n, 0, -1, 1);
    kb_add_tensor(c, "w", c->el, c->p.n, 0, 0.5f, 1.5f);
    kb_add_tensor(c, "b", c->el, c->p.n, 0, -0.5f, 0.5f);
    kb_add_tensor(c, "y", c->el, c->p.m * c->p.n, 1, 0, 0);
    c->flops = 16.0 * mn; /* mean 1, variance 3, normalise + affine 4, gelu_tanh 8 */
    c->bytes = (2.0 * mn + 2.0 * (double)c->p.n) * esz(c->el);
    return LPO_OK;
}
static void lngelu_cpu(kb_case *c) {
    const float *x = T_(c, 0), *w = T_(c, 1), *b = T_(c, 2);
    float *y = T_(c, 3);
    int64_t n = c->p.n;
#pragma omp parallel for schedule(static) num_threads(c->nt)
    for (int64_t t = 0; t < c->p.m; t++) { // row t (n,): mean, variance (double), normalise, gelu
        const float *xr = x + t * n;
        double s = 0, ss = 0;
        for (int64_t i = 0; i < n; i++) s += xr[i];
        double mean = s / (double)n;
        for (int64_t i = 0; i < n; i++) ss += (xr[i] - mean) * (xr[i] - mean);
        double r = 1.0 / sqrt(ss / (double)n + c->p.eps);
        for (int64_t i = 0; i < n; i++) {
            double g = (xr[i] - mean) * r * w[i] + b[i];
            y[t * n + i] = (float)(0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))));
        }
    }
}
static lpo_status lngelu_gpu(kb_case *c) {
    return lpo__kb_layernorm_gelu(c->el, c->t[3].d, c->t[0].d, c->t[1].d, c->t[2].d, c->p.m, c->p.n,
                                  (float)c->p.eps, c->stream);
}

/* ---- silu_mul: act (m, I) = silu(gate) * up over gu (m, 2I)
 * -------------------------------------------------- */
static lpo_status silu_plan(kb_case *c) {
    lpo_status st = rows_plan(c, "C reference (lpo_cpu_swiglu)");
    if (st) return st;
    double mn = (double)c->p.m * (double)c->p.n;
    kb_add_tensor(c, "gu", c->el, c->p.m * 2 * c->p.n, 0, -4, 4);
    kb_add_tensor(c, "act", c->el, c->p.m * c->p.n, 1, 0, 0);
    c->flops = 5.0 * mn; /* exp, add, divide, multiply (x2) */
    c->bytes = 3.0 * mn * esz(c->el);
    snprintf(c->shape, sizeof c->shape, "m=%lld I=%lld", (long long)c->p.m, (long long)c->p.n);
    return LPO_OK;
}
static void silu_cpu(kb_case *c) {
    lpo_cpu_swiglu(T_(c, 1), T_(c, 0), c->p.m, c->p.n, c->nt);
}
static lpo_status silu_gpu(kb_case *c) {
    return lpo__kb_silu_mul(c->el, c->t[1].d, c->t[0].d, c->p.m, c->p.n, c->stream);
}

/* ---- softmax over rows
 * --------------------------------------------------------------------------------------- */
static lpo_status softmax_plan(kb_case *c) {
    lpo_status st = rows_plan(c, "C reference (kbench)");
    if (st) return st;
    double mn = (double)c->p.m * (double)c->p.n;
    kb_add_tensor(c, "x", c->el, c->p.m * c->p.n, 0, -8, 8);
    kb_add_tensor(c, "y", c->el, c->p.m * c->p.n, 1, 0, 0);
    c->flops = 5.0 * mn; /* max, subtract, exp, sum, scale */
    c->bytes = 2.0 * mn * esz(c->el);
    return LPO_OK;
}
static void softmax_cpu(kb_case *c) {
    const float *x = T_(c, 0);
    float *y = T_(c, 1);
    int64_t n = c->p.n;
#pragma omp parallel for schedule(static) num_threads(c->nt)
    for (int64_t t = 0; t < c->p.m; t++) { // row t (n,): max, sum of exp (double), scale
        const float *xr = x + t * n;
        float mx = -INFINITY;
        for (int64_t i = 0; i < n; i++) mx = fmaxf(mx, xr[i]);
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += exp((double)xr[i] - mx);
        for (int64_t i = 0; i < n; i++) y[t * n + i] = (float)(exp((double)xr[i] - mx) / s);
    }
}
static lpo_status softmax_gpu(kb_case *c) {
    return lpo__kb_softmax(c->el, c->t[1].d, c->t[0].d, c->p.m, c->p.n, c->stream);
}

/* ---- rope: rotate the q and k heads of qkv rows (m tokens) in place
 * ---------------------------------------- */
static lpo_status rope_plan(kb_case *c) {
    lpo_status st;
    if ((st = need_pos("m", c->p.m)) || (st = need_pos("heads", c->p.heads)) ||
        (st = need_pos("kv_heads", c->p.kv_heads)) || (st = need_pos("head_dim", c->p.head_dim)) ||
        (st = float_dtype(c)))
        return st;
    if (c->p.head_dim % 2)
        return lpo_errorf(LPO_E_CONFIG, "kbench.head_dim must be even (got %lld)", (long long)c->p.head_dim);
    int64_t m = c->p.m, nh = c->p.heads, nkv = c->p.kv_heads, hd = c->p.head_dim, half = hd / 2;
    int q = kb_add_tensor(c, "qkv", c->el, m * (nh + 2 * nkv) * hd, 1, -1, 1);
    c->t[q].in_place = 1;
    kb_add_tensor(c, "cos", LPO_DT_F32, m * half, 0, -1, 1);
    kb_add_tensor(c, "sin", LPO_DT_F32, m * half, 0, -1, 1);
    kb_add_tensor(c, "pos", LPO_DT_I32, m, 0, 0, (float)m); /* positions < m: rows of the tables */
    double pairs = (double)m * (double)(nh + nkv) * (double)half;
    c->flops = 6.0 * pairs;
    c->bytes = 2.0 * 2.0 * pairs * esz(c->el) + 2.0 * pairs / (double)(nh + nkv) * 4.0 + 4.0 * (double)m;
    snprintf(c->shape, sizeof c->shape, "m=%lld heads=%lld kv_heads=%lld head_dim=%lld", (long long)m,
             (long long)nh, (long long)nkv, (long long)hd);
    snprintf(c->variant, sizeof c->variant, "%s",
             c->cuda ? "lpo kbench kernel" : "C reference (lpo_cpu_rope)");
    c->scratch = malloc((size_t)m * sizeof(int64_t));
    return c->scratch ? LPO_OK : lpo_errorf(LPO_E_NOMEM, "out of memory");
}
static void rope_cpu(kb_case *c) {
    int64_t *pos = c->scratch;
    for (int64_t t = 0; t < c->p.m; t++) pos[t] = (int64_t)T_(c, 3)[t]; // positions as int64
    lpo_cpu_rope(T_(c, 0), T_(c, 1), T_(c, 2), pos, c->p.m, c->p.heads, c->p.kv_heads, c->p.head_dim, c->nt);
}
static lpo_status rope_gpu(kb_case *c) {
    return lpo__kb_rope(c->el, c->t[0].d, c->t[1].d, c->t[2].d, c->t[3].d, c->p.m, c->p.heads, c->p.kv_heads,
                        c->p.head_dim, c->stream);
}
/* ---- embedding: x (m, n) = E[tokens]
 * ------------------------------------------------------------------------ */
static lpo_status embed_plan(kb_case *c) {
    lpo_status st;
    if ((st = need_pos("m", c->p.m)) || (st = need_pos("n", c->p.n)) ||
        (st = need_pos("vocab", c->p.vocab)) || (st = float_dtype(c)))
        return st;
    kb_add_tensor(c, "tokens", LPO_DT_I32, c->p.m, 0, 0, (float)c->p.vocab);
    kb_add_tensor(c, "E", c->el, c->p.vocab * c->p.n, 0, -1, 1);
    kb_add_tensor(c, "x", c->el, c->p.m * c->p.n, 1, 0, 0);
    c->flops = 0;
    c->bytes = 2.0 * (double)c->p.m * (double)c->p.n * esz(c->el) + 4.0 * (double)c->p.m;
    snprintf(c->shape, sizeof c->shape, "m=%lld n=%lld vocab=%lld", (long long)c->p.m, (long long)c->p.n,
             (long long)c->p.vocab);
    snprintf(c->variant, sizeof c->variant, "%s",
             c->cuda ? "lpo kbench kernel" : "C reference (lpo_cpu_embed)");
    c->scratch = malloc((size_t)c->p.m * sizeof(int32_t));
    return c->scratch ? LPO_OK : lpo_errorf(LPO_E_NOMEM, "out of memory");
}
static void embed_cpu(kb_case *c) {
    int32_t *tok = c->scratch;
    for (int64_t t = 0; t < c->p.m; t++) tok[t] = (int32_t)T_(c, 0)[t]; // token ids as int32
    lpo_cpu_embed(T_(c, 2), T_(c, 1), tok, c->p.m, c->p.n);
}
static lpo_status embed_gpu(kb_case *c) {
    return lpo__kb_embed(c->el, c->t[2].d, c->t[1].d, c->t[0].d, c->p.m, c->p.n, c->stream);
}

/* ---- registry
 * ------------------------------------------------------------------------------------------------ */
#ifdef LPO_HAVE_CUDA
#define GPU(fn) fn
#else
#define GPU(fn) NULL
#endif

static const kb_ops case_gemm = {"gemm",
                                 "y (m, n) = x (m, k) @ W^T, W (n, k); cuBLASLt on the GPU",
                                 1,
                                 gemm_plan,
                                 gemm_cpu,
                                 GPU(gemm_gpu_init),
                                 GPU(gemm_gpu_run),
                                 GPU(gemm_gpu_fini)};
static const kb_ops case_rmsnorm = {"rmsnorm",
                                    "y (m, n) = x * rsqrt(mean(x^2) + eps) * w",
                                    0,
                                    rmsnorm_plan,
                                    rmsnorm_cpu,
                                    NULL,
                                    GPU(rmsnorm_gpu),
                                    NULL};
static const kb_ops case_lngelu = {"layernorm_gelu",
                                   "y (m, n) = gelu_tanh(layernorm(x) * w + b)",
                                   0,
                                   lngelu_plan,
                                   lngelu_cpu,
                                   NULL,
                                   GPU(lngelu_gpu),
                                   NULL};
static const kb_ops case_silu = {
    "silu_mul", "act (m, I) = silu(gate) * up, gu (m, 2I)", 0, silu_plan, silu_cpu, NULL, GPU(silu_gpu),
    NULL};
static const kb_ops case_softmax = {
    "softmax", "y (m, n) = softmax(x) per row", 0, softmax_plan, softmax_cpu, NULL, GPU(softmax_gpu), NULL};
static const kb_ops case_rope = {"rope",
                                 "q and k heads of qkv rows rotated in place (NeoX pairs)",
                                 0,
                                 rope_plan,
                                 rope_cpu,
                                 NULL,
                                 GPU(rope_gpu),
                                 NULL};
static const kb_ops case_embed = {
    "embedding", "x (m, n) = E[tokens] rows of E (vocab, n)", 0, embed_plan, embed_cpu, NULL, GPU(embed_gpu),
    NULL};

extern const kb_ops lpo__kb_case_conv2d, lpo__kb_case_lstm;

static const kb_ops *const registry[] = {&case_gemm,  &case_rmsnorm,        &case_lngelu,
                                         &case_silu,  &case_softmax,        &case_rope,
                                         &case_embed, &lpo__kb_case_conv2d, &lpo__kb_case_lstm};

const kb_ops *const *kb_cases(size_t *n) {
    *n = sizeof registry / sizeof registry[0];
    return registry;
}

const kb_ops *kb_find_case(const char *name) {
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (!strcmp(registry[i]->name, name)) return registry[i];
    return NULL;
}

int kb_add_tensor(kb_case *c, const char *name, lpo_dtype el, int64_t n, int output, float lo, float hi) {
    if (c->n_t >= KB_MAX_T) return -1;
    kb_tensor *t = &c->t[c->n_t];
    memset(t, 0, sizeof *t);
    t->name = name, t->el = el, t->n = n, t->output = output, t->lo = lo, t->hi = hi;
    return c->n_t++;
}
