/* Tensor parallelism on GPUs (label gpu): SKIP, visibly, with fewer than 2 GPUs, without the CUDA backend or
 * without NCCL. NCCL_NVLS_ENABLE=0 is set before anything (no NVLink multicast on shared machines).
 * - an engine of 2 (and 4, when present) ranks against one rank on the same synthetic-style weights: every
 *   step's logits within 1e-5 x max|logit| in f32 (TF32 off) and within 3e-2 in bf16, the greedy and the
 *   seeded sampled tokens identical (f32; bf16: greedy), in graph and eager modes;
 * - a tied head and q/k norm, qkv biases (their splits);
 * - fp8 weights (engine.weights=fp8) and GGUF q4_k blocks (engine.weights=native) split, against one rank
 *   with the same quantized weights (test_fp8);
 * - MoE and multi-head latent attention split (qwen3-moe, DeepSeek-OCR-2 text, DeepSeek-V2 / V3) against
 *   one rank (test_moe_mla);
 * - more ranks than GPUs: refused with the count; a stopped rank: LPO_E_TIMEOUT naming the rank, no hang;
 * - the logits with the one-shot all-reduce, fused with the residual add and RMSNorm (engine.tp_fuse) and
 * not;
 * - lpo ceilings' NCCL all-reduce bench: exact sums at odd sizes, the sweep's rows (busbw = algbw 2(n-1)/n);
 * - the one-shot kernel against the host's sums and NCCL's, in graphs, at mixed sizes, timed;
 * - the fused all-reduce + add + RMSNorm kernel against the host, the one-shot + add_rmsnorm (bit for bit),
 *   NCCL + add_rmsnorm (bit for bit at 2 GPUs), over calls of 1-8 rows back to back and in graphs, timed
 *   against both;
 * - `lpo trace -- lpo bench model=llama3.2-1b engine.tp=2` (NCCL, then the one-shot all-reduce): a timeline
 *   per GPU in trace.json, kernels per device, the collectives as communication on both GPUs in equal
 *   numbers, communication / overlap / exposed per rank, the skew per collective and per decode step
 *   (comm.md is printed for the report).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hw/ceilings_internal.h"
#include "lpo/ceilings.h"
#include "lpo/engine.h"
#include "lpo/table.h"
#include "lpo/trace.h"
#include "test_engine_support.h"
#include "test_support.h"
#include "test_trace_support.h"

#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_kernels.h"
#endif
#ifdef LPO_HAVE_NCCL
#include <nccl.h>
#endif

static int n_gpus(void) {
    int n = 0;
#ifdef LPO_HAVE_CUDA
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
#endif
    return n;
}

static lpo_model_spec tp_spec(int tied) {
    lpo_model_spec s = test_spec();
    s.vocab_size = 512;
    s.hidden_size = 256;
    s.n_heads = 8;
    s.n_kv_heads = 4;
    s.head_dim = 32;
    s.intermediate_size = 512;
    s.qkv_bias = !tied;
    s.qk_norm = tied;
    s.tied_embeddings = tied;
    return s;
}

static void check_fuse(int tp, const char *dtype, int tied, int sampled, double rel, const char *ar,
                       int fuse) {
    lpo_model_spec s = tp_spec(tied);
    test_weights tw;
    assert_int_equal(test_weights_open(&s, &tw), LPO_OK);
    const lpo_weight_source ws = {&tw, test_view};
    char why[512];
    double worst = 0;
    const int ok =
        test_tp_agrees_fuse(&s, &ws, "cuda", dtype, tp, 8, sampled, rel, why, sizeof why, &worst, ar, fuse);
    print_message("tp=%d %s tied=%d %s all-reduce %s%s: max |logit diff| %.2e of max|logit| (allowed %.0e)\n",
                  tp, dtype, tied, sampled ? "sampled" : "greedy", ar ? ar : "nccl",
                  ar && !fuse ? " (unfused)" : "", worst, rel);
    test_weights_free(&tw);
    if (ok != 1)
        fail_msg("tp=%d %s tied=%d sampled=%d %s fuse=%d: %s", tp, dtype, tied, sampled, ar ? ar : "", fuse,
                 why);
}
static void check_ar(int tp, const char *dtype, int tied, int sampled, double rel, const char *ar) {
    check_fuse(tp, dtype, tied, sampled, rel, ar, 1);
}
static void check(int tp, const char *dtype, lpo_exec_mode exec, int tied, int sampled, double rel) {
    (void)exec;
    check_ar(tp, dtype, tied, sampled, rel, NULL);
}

static void test_logits_and_tokens(void **state) {
    (void)state;
    const int n = n_gpus();
    for (int tp = 2; tp <= 4 && tp <= n; tp *= 2) {
        for (int tied = 0; tied < 2; tied++) {
            check(tp, "f32", LPO_EXEC_GRAPH, tied, 0, 1e-5);
            check(tp, "f32", LPO_EXEC_GRAPH, tied, 1, 1e-5);
            check(tp, "bf16", LPO_EXEC_GRAPH, tied, 0, 3e-2);
            /* the one-shot all-reduce over peer access (every all-reduce of these steps is small), fused with
             * the residual add and RMSNorm after it (engine.tp_fuse, the default), then alone */
            check_ar(tp, "f32", tied, 0, 1e-5, "oneshot");
            check_ar(tp, "f32", tied, 1, 1e-5, "oneshot");
            check_ar(tp, "bf16", tied, 0, 3e-2, "oneshot");
            check_fuse(tp, "f32", tied, 0, 1e-5, "oneshot", 0);
            check_fuse(tp, "bf16", tied, 0, 3e-2, "oneshot", 0);
        }
    }
}

/* Mixture of experts and multi-head latent attention split over the ranks: qwen3-moe (experts split like a
 * dense MLP), DeepSeek-OCR-2's text model (shared experts, group-limited routing), DeepSeek-V2 (MLA with
 * q_lora, shared experts) and DeepSeek-V3 (MLA without q_lora, sigmoid noaux_tc routing), each against one
 * rank: f32 within 1e-5 (NCCL and the fused one-shot all-reduce); bf16 within 0.15, the MoE fixtures'
 * bound (a bf16 router may pick another expert at a near tie when the partial sums' order changes). The CPU
 * engine checks the same splits at tp 2 and 4 (tests/unit/test_tp.c). */
static lpo_model_spec moe_tp_spec(int which) {
    lpo_model_spec s = which == 0 ? test_spec_moe() : which == 1 ? test_spec_deepseek() : test_spec_mla();
    s.vocab_size = 512;
    s.hidden_size = 128;
    s.mlp_bias = 0;
    s.intermediate_size = 256;
    s.moe.intermediate_size = 64;
    if (which < 2) s.n_heads = 8, s.n_kv_heads = 4, s.head_dim = 16;
    if (which >= 2) s.n_heads = s.n_kv_heads = 8;
    if (which == 3) {
        s.arch = LPO_ARCH_DEEPSEEK_V3;
        s.mla.q_lora_rank = 0;
        s.moe.scoring = LPO_SCORE_SIGMOID;
        s.moe.topk_method = LPO_TOPK_NOAUX_TC;
        s.moe.norm_topk_prob = 1;
    }
    return s;
}

static void test_moe_mla(void **state) {
    (void)state;
    const int n = n_gpus();
    static const char *names[4] = {"qwen3-moe", "deepseek-ocr2-text", "deepseek-v2 (MLA)",
                                   "deepseek-v3 (MLA)"};
    for (int which = 0; which < 4; which++) {
        lpo_model_spec s = moe_tp_spec(which);
        test_weights tw;
        assert_int_equal(test_weights_open(&s, &tw), LPO_OK);
        const lpo_weight_source ws = {&tw, test_view};
        for (int tp = 2; tp <= 4 && tp <= n; tp *= 2) {
            const struct {
                const char *dtype, *ar;
                double rel;
            } runs[3] = {{"f32", NULL, 1e-5}, {"f32", "oneshot", 1e-5}, {"bf16", NULL, 0.15}};
            for (int k = 0; k < 3; k++) {
                char why[512];
                double worst = 0;
                const int ok = test_tp_agrees_fuse(&s, &ws, "cuda", runs[k].dtype, tp, 8, 0, runs[k].rel, why,
                                                   sizeof why, &worst, runs[k].ar, 1);
                print_message(
                    "%s tp=%d %s all-reduce %s: max |logit diff| %.2e of max|logit| (allowed %.0e)\n",
                    names[which], tp, runs[k].dtype, runs[k].ar ? runs[k].ar : "nccl", worst, runs[k].rel);
                if (ok != 1) fail_msg("%s tp=%d %s: %s", names[which], tp, runs[k].dtype, why);
            }
        }
        test_weights_free(&tw);
    }
}

/* engine.weights=fp8 split over the ranks (each rank's rows, or its columns with the whole rows' scales):
 * bf16 logits within 3e-2 of one rank's with the same fp8 weights, greedy tokens identical, NCCL and the
 * fused one-shot all-reduce. */
static void test_fp8(void **state) {
    (void)state;
    const int n = n_gpus();
    lpo_model_spec s = tp_spec(0);
    test_weights tw;
    assert_int_equal(test_weights_open(&s, &tw), LPO_OK);
    const lpo_weight_source ws = {&tw, test_view};
    for (int tp = 2; tp <= 4 && tp <= n; tp *= 2)
        for (int k = 0; k < 2; k++) {
            const char *ar = k ? "oneshot" : NULL;
            char why[512];
            double worst = 0;
            const int ok = test_tp_agrees_w(&s, &ws, "cuda", "bf16", tp, 8, 0, 3e-2, why, sizeof why, &worst,
                                            ar, 1, "fp8");
            print_message("fp8 weights tp=%d bf16 all-reduce %s: max |logit diff| %.2e of max|logit|\n", tp,
                          ar ? ar : "nccl", worst);
            if (ok != 1) fail_msg("fp8 tp=%d %s: %s", tp, ar ? ar : "nccl", why);
        }
    test_weights_free(&tw);
    /* GGUF q4_k blocks kept (engine.weights=native): each rank's part cut from the whole matrix's blocks */
    s.dtype = LPO_DT_Q4_K;
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_synthetic(&s, 7, &m), LPO_OK);
    const lpo_weight_source mws = lpo_model_weight_source(m);
    for (int tp = 2; tp <= 4 && tp <= n; tp *= 2) {
        char why[512];
        double worst = 0;
        const int ok = test_tp_agrees_w(&s, &mws, "cuda", "bf16", tp, 8, 0, 3e-2, why, sizeof why, &worst,
                                        NULL, 1, "native");
        print_message("q4_k blocks tp=%d bf16: max |logit diff| %.2e of max|logit|\n", tp, worst);
        if (ok != 1) fail_msg("native tp=%d: %s", tp, why);
    }
    lpo_model_close(m);
}

static void test_refusals(void **state) {
    (void)state;
    const int n = n_gpus();
    lpo_model_spec s = tp_spec(0);
    s.n_heads = 16;
    s.n_kv_heads = 16;
    s.intermediate_size = 1024;
    test_weights tw;
    assert_int_equal(test_weights_open(&s, &tw), LPO_OK);
    const lpo_weight_source ws = {&tw, test_view};
    lpo_engine *e = NULL;
    if (n < 16) { /* more ranks than GPUs */
        lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cuda", .max_seqs = 1, .max_context = 32,
                             .tp = 16};
        assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_E_CONFIG); /* 16 > LPO_TP_MAX */
        o.tp = 8;
        if (n < 8) {
            assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_E_NO_DEVICE);
            assert_non_null(strstr(lpo_last_error(), "engine.tp=8 needs GPUs 0..7"));
        }
    }
    /* a stopped rank: the step times out naming it, the engine refuses the next one */
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS,   .backend = "cuda", .max_seqs = 1,
                         .max_context = 32,     .tp = 2,           .tp_timeout_s = 5,
                         .exec = LPO_EXEC_EAGER};
    assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_OK);
    assert_int_equal(lpo_engine_tp_fault(e, 1), LPO_OK);
    int slot = 0;
    const int32_t t[2] = {5, 6}, *tok = t;
    int64_t nt = 2;
    int32_t id = -1;
    lpo_engine_batch b = {1, &slot, &tok, &nt, 0, NULL, 1, &id, NULL};
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_TIMEOUT);
    print_message("stopped rank: %s\n", lpo_last_error());
    assert_non_null(strstr(lpo_last_error(), "rank 0"));
    lpo_engine_close(e);
    /* the same with the one-shot all-reduce (fused with the add and norm: rank 0's kernel polls for rank 1's
     * data until the abort word) */
    o.tp_allreduce = "oneshot";
    assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_OK);
    assert_int_equal(lpo_engine_tp_fault(e, 1), LPO_OK);
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_TIMEOUT);
    print_message("stopped rank, one-shot fused: %s\n", lpo_last_error());
    lpo_engine_close(e);
    o.tp_fuse = 0; /* the one-shot alone: rank 0's kernel waits for rank 1's flag */
    assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_OK);
    assert_int_equal(lpo_engine_tp_fault(e, 1), LPO_OK);
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_TIMEOUT);
    print_message("stopped rank, one-shot: %s\n", lpo_last_error());
    lpo_engine_close(e);
    o.tp_fuse = 1;
    /* a bad mode is refused by name */
    o.tp_allreduce = "ring";
    assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "engine.tp_allreduce"));
    test_weights_free(&tw);
}

static void test_allreduce_sweep(void **state) {
    (void)state;
    const int n = n_gpus();
    /* the bench validates exact sums at odd sizes (one element, across the 1 MiB windows) */
    lpo__ar_bench *b = NULL;
    assert_int_equal(lpo__ar_bench_open(2, (size_t)8 << 20, &b), LPO_OK);
    const size_t counts[] = {1, 3, 4097, (1u << 20) + 3, (3u << 20) / 2 + 1};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        for (int d = 0; d < 2; d++) {
            const lpo_dtype dt = d ? LPO_DT_F32 : LPO_DT_BF16;
            if (lpo__ar_bench_set(b, dt, counts[i], 3) != LPO_OK)
                fail_msg("%zu x %s: %s", counts[i], lpo_dtype_name(dt), lpo_last_error());
            double t = 0;
            assert_int_equal(lpo__ar_bench_sample(b, &t), LPO_OK);
            assert_true(t > 0 && t < 0.1);
        }
    lpo__ar_bench_close(b);
    /* the sweep (short protocol): bf16 and f32 for every group, 26 sizes each */
    lpo_ceilings *c = malloc(sizeof *c);
    assert_non_null(c);
    lpo_ceilings_init(c);
    lpo_ceilings_opts o = {.device = 0, .quick = 1};
    if (lpo_ceilings_measure_allreduce(&o, c) != LPO_OK) fail_msg("sweep: %s", lpo_last_error());
    assert_true(c->n_ar >= 2);
    for (int i = 0; i < c->n_ar; i++) {
        const lpo_ceil_ar_sweep *sw = &c->ar[i];
        assert_int_equal(sw->n, 26);
        assert_true(sw->gpus >= 2 && sw->gpus <= n);
        for (int k = 0; k < sw->n; k++) {
            const lpo_ceil_ar_row *r = &sw->row[k];
            assert_true(r->us > 0 && r->p10 <= r->us && r->us <= r->p90 && r->samples >= 1);
            assert_true(fabs(r->busbw - r->algbw * 2.0 * (sw->gpus - 1) / sw->gpus) <= 1e-9 * r->busbw);
            if (r->bytes == 16384 || r->bytes == 8 || r->bytes == 268435456.0)
                print_message("all-reduce %d GPUs %s %s: %.0f B %.2f us, busbw %.2f GB/s\n", sw->gpus,
                              lpo_dtype_name(sw->dtype), sw->mode, r->bytes, r->us, r->busbw);
        }
    }
    assert_true(c->m[LPO_CEIL_M_ALLREDUCE_ALPHA].value > 0 && c->m[LPO_CEIL_M_ALLREDUCE_BUSBW].value > 0);
    assert_true(lpo_ceilings_allreduce_s(c, 2, LPO_DT_BF16, 16384) > 0);
    free(c);
}

#if defined(LPO_HAVE_CUDA) && defined(LPO_HAVE_NCCL)
#define OS_MAX (1u << 20) /* bytes of the largest message */
typedef struct {
    int n;
    ncclComm_t comm[8];
    cudaStream_t s[8];
    cudaEvent_t e0[8], e1[8];
    void *mem[8], *buf[8], *ref[8];
    lpo_cuda_oneshot os[8];
    int *abort_h;
} os_group;

#define CUOK(x) assert_int_equal((int)(x), (int)cudaSuccess)

/* Ends the capture of every GPU's stream, then instantiates each graph: a thread that still captures one
 * stream may not instantiate (it allocates: "operation not permitted when stream is capturing") */
static void end_captures(int n, cudaStream_t *s, cudaGraphExec_t *ex) {
    cudaGraph_t gr[8];
    for (int g = 0; g < n; g++) {
        CUOK(cudaSetDevice(g));
        CUOK(cudaStreamEndCapture(s[g], &gr[g]));
    }
    for (int g = 0; g < n; g++) {
        CUOK(cudaSetDevice(g));
        CUOK(cudaGraphInstantiate(&ex[g], gr[g], 0));
        cudaGraphDestroy(gr[g]);
    }
}

static void os_open(os_group *G, int n) {
    memset(G, 0, sizeof *G);
    G->n = n;
    int devs[8];
    for (int g = 0; g < n; g++) devs[g] = g;
    assert_int_equal(ncclCommInitAll(G->comm, n, devs), ncclSuccess);
    void *abort_d = NULL;
    CUOK(cudaSetDevice(0));
    CUOK(cudaHostAlloc((void **)&G->abort_h, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    *G->abort_h = 0;
    CUOK(cudaHostGetDevicePointer(&abort_d, G->abort_h, 0));
    const size_t flags = sizeof(unsigned) * LPO_ONESHOT_MAX_RANKS * LPO_ONESHOT_MAX_BLOCKS,
                 counters = sizeof(unsigned) * LPO_ONESHOT_MAX_BLOCKS, total = 2 * OS_MAX + flags + counters;
    for (int g = 0; g < n; g++) { // peer access, one-shot buffers, message buffers, stream, events
        CUOK(cudaSetDevice(g));
        for (int q = 0; q < n; q++)
            if (q != g) {
                const cudaError_t e = cudaDeviceEnablePeerAccess(q, 0);
                if (e != cudaErrorPeerAccessAlreadyEnabled) CUOK(e);
                (void)cudaGetLastError();
            }
        CUOK(cudaMalloc(&G->mem[g], total));
        CUOK(cudaMemset(G->mem[g], 0, total));
        CUOK(cudaMalloc(&G->buf[g], OS_MAX));
        CUOK(cudaMalloc(&G->ref[g], OS_MAX));
        CUOK(cudaStreamCreateWithFlags(&G->s[g], cudaStreamNonBlocking));
        CUOK(cudaEventCreate(&G->e0[g]));
        CUOK(cudaEventCreate(&G->e1[g]));
        CUOK(cudaDeviceSynchronize());
    }
    for (int g = 0; g < n; g++) {
        lpo_cuda_oneshot *o = &G->os[g];
        for (int q = 0; q < n; q++) {
            o->stage[q] = G->mem[q];
            o->flags[q] = (unsigned *)((char *)G->mem[q] + 2 * OS_MAX);
        }
        o->counter = (unsigned *)((char *)G->mem[g] + 2 * OS_MAX + flags);
        o->abort = (const volatile int *)abort_d;
        o->stage_bytes = 2 * OS_MAX;
        o->rank = g, o->n = n;
    }
}

static void os_close(os_group *G) {
    for (int g = 0; g < G->n; g++) {
        cudaSetDevice(g);
        cudaStreamSynchronize(G->s[g]);
        ncclCommDestroy(G->comm[g]);
        cudaFree(G->mem[g]), cudaFree(G->buf[g]), cudaFree(G->ref[g]);
        cudaEventDestroy(G->e0[g]), cudaEventDestroy(G->e1[g]);
        cudaStreamDestroy(G->s[g]);
    }
    cudaFreeHost(G->abort_h);
}

static void os_sync(os_group *G) {
    for (int g = 0; g < G->n; g++) CUOK(cudaStreamSynchronize(G->s[g]));
}

/* calls one-shot all-reduces of count elements on every GPU, NCCL's on ref (nccl != 0) */
static void os_run(os_group *G, lpo_dtype dt, int64_t count, int calls, int nccl) {
    for (int c = 0; c < calls; c++) {
        for (int g = 0; g < G->n; g++) {
            CUOK(cudaSetDevice(g));
            assert_int_equal(lpo_cuda_oneshot_all_reduce(&G->os[g], G->buf[g], count, dt, G->s[g]), LPO_OK);
        }
        if (!nccl) continue;
        assert_int_equal(ncclGroupStart(), ncclSuccess);
        for (int g = 0; g < G->n; g++)
            assert_int_equal(ncclAllReduce(G->ref[g], G->ref[g], (size_t)count,
                                           dt == LPO_DT_F32 ? ncclFloat32 : ncclBfloat16, ncclSum, G->comm[g],
                                           G->s[g]),
                             ncclSuccess);
        assert_int_equal(ncclGroupEnd(), ncclSuccess);
    }
}

static float os_get(const void *h, lpo_dtype dt, int64_t i) {
    return dt == LPO_DT_F32 ? ((const float *)h)[i] : lpo_bf16_to_f32(((const uint16_t *)h)[i]);
}
static void os_put(void *h, lpo_dtype dt, int64_t i, float v) {
    if (dt == LPO_DT_F32)
        ((float *)h)[i] = v;
    else
        ((uint16_t *)h)[i] = lpo_f32_to_bf16(v);
}

/* Random data of count elements on every GPU (buf and ref alike); x[g] keeps it as rounded to dt. */
static void os_fill(os_group *G, lpo_dtype dt, int64_t count, float **x, void *h, uint64_t seed) {
    const size_t es = dt == LPO_DT_F32 ? 4 : 2;
    for (int g = 0; g < G->n; g++) {
        uint64_t r = seed * 0x9e3779b97f4a7c15ull + (uint64_t)g + 1;
        for (int64_t i = 0; i < count; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            os_put(h, dt, i, (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1));
            x[g][i] = os_get(h, dt, i);
        }
        CUOK(cudaSetDevice(g));
        CUOK(cudaMemcpy(G->buf[g], h, (size_t)count * es, cudaMemcpyHostToDevice));
        CUOK(cudaMemcpy(G->ref[g], h, (size_t)count * es, cudaMemcpyHostToDevice));
        /* a copy from pageable memory may return before its DMA lands, and the non-blocking streams do not
         * wait for the legacy stream */
        CUOK(cudaDeviceSynchronize());
    }
}

/* The host's rank-order f32 sum of x over the GPUs, rounded to dt, `calls` times (each call sums the previous
 * result of every GPU: all equal after the first), into x[0]. */
static void os_expect(int n, lpo_dtype dt, int64_t count, float **x, int calls) {
    for (int c = 0; c < calls; c++)
        for (int64_t i = 0; i < count; i++) {
            float acc = 0.f;
            for (int q = 0; q < n; q++) acc += x[c ? 0 : q][i];
            x[0][i] = dt == LPO_DT_F32 ? acc : lpo_bf16_to_f32(lpo_f32_to_bf16(acc));
        }
}

static void oneshot_group(int n) {
    os_group G;
    os_open(&G, n);
    float *x[8];
    for (int g = 0; g < n; g++) x[g] = malloc(OS_MAX);
    void *h = malloc(OS_MAX), *hr = malloc(OS_MAX);
    const int64_t counts[] = {1, 3, 4096, 8192, 8197, 32768, 65536 + 7};
    // each dtype and size: one call, then three (epochs, both halves), against the host and NCCL
    for (int d = 0; d < 2; d++) {
        const lpo_dtype dt = d ? LPO_DT_F32 : LPO_DT_BF16;
        const size_t es = d ? 4 : 2;
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            const int64_t count = counts[ci];
            if ((size_t)count * es > OS_MAX) continue;
            for (int calls = 1; calls <= 3; calls += 2) {
                os_fill(&G, dt, count, x, h, (uint64_t)(ci * 7 + (size_t)calls));
                os_run(&G, dt, count, calls, calls == 1);
                os_sync(&G);
                os_expect(n, dt, count, x, calls);
                for (int g = 0; g < n; g++) {
                    CUOK(cudaMemcpy(h, G.buf[g], (size_t)count * es, cudaMemcpyDeviceToHost));
                    if (calls == 1)
                        CUOK(cudaMemcpy(hr, G.ref[g], (size_t)count * es, cudaMemcpyDeviceToHost));
                    for (int64_t i = 0; i < count; i++) {
                        const float got = os_get(h, dt, i);
                        if (got != x[0][i])
                            fail_msg("one-shot %d GPUs %s count %lld calls %d: GPU %d element %lld = %.9g, "
                                     "host sum "
                                     "%.9g",
                                     n, lpo_dtype_name(dt), (long long)count, calls, g, (long long)i,
                                     (double)got, (double)x[0][i]);
                        if (calls != 1) continue;
                        const float nc = os_get(hr, dt, i);
                        const double tol = n == 2 ? 0 : (d ? 1e-6 : 2e-2) * n; /* |x| < 1 each */
                        if (fabs((double)nc - (double)got) > tol)
                            fail_msg(
                                "one-shot vs NCCL %d GPUs %s count %lld: GPU %d element %lld: %.9g vs %.9g",
                                n, lpo_dtype_name(dt), (long long)count, g, (long long)i, (double)got,
                                (double)nc);
                    }
                }
            }
        }
    }
    /* graphs: 8 calls captured per GPU (one thread capturing every GPU's stream), replayed twice */
    for (int d = 0; d < 2; d++) {
        const lpo_dtype dt = d ? LPO_DT_F32 : LPO_DT_BF16;
        const int64_t count = 4096;
        cudaGraphExec_t ex[8];
        os_fill(&G, dt, count, x, h, 99);
        for (int g = 0; g < n; g++) {
            CUOK(cudaSetDevice(g));
            CUOK(cudaStreamBeginCapture(G.s[g], cudaStreamCaptureModeThreadLocal));
        }
        os_run(&G, dt, count, 8, 0);
        end_captures(n, G.s, ex);
        for (int rep = 0; rep < 2; rep++)
            for (int g = 0; g < n; g++) {
                CUOK(cudaSetDevice(g));
                CUOK(cudaGraphLaunch(ex[g], G.s[g]));
            }
        os_sync(&G);
        os_expect(n, dt, count, x, 16);
        for (int g = 0; g < n; g++) {
            CUOK(cudaMemcpy(h, G.buf[g], (size_t)count * (d ? 4 : 2), cudaMemcpyDeviceToHost));
            for (int64_t i = 0; i < count; i++)
                if (os_get(h, dt, i) != x[0][i])
                    fail_msg("one-shot in graphs %d GPUs %s: GPU %d element %lld = %.9g, host %.9g", n,
                             lpo_dtype_name(dt), g, (long long)i, (double)os_get(h, dt, i), (double)x[0][i]);
            cudaGraphExecDestroy(ex[g]);
        }
    }
    /* messages of other sizes back to back, no synchronisation between them (a prefill's then a decode
     * step's): each in its own region of buf, each equal to the host's rank-order sum */
    static const struct {
        int64_t count, off; /* elements, byte offset in buf */
        int f32;
    } mix[] = {
        {65543, 0, 1}, {4096, 300 << 10, 0}, {20000, 320 << 10, 0}, {5, 400 << 10, 1}, {8197, 401 << 10, 0}};
    const int nm = (int)(sizeof mix / sizeof mix[0]);
    for (int round = 0; round < 3; round++) {
        float *want[5];
        for (int k = 0; k < nm; k++) { // fresh data in every region, the expected sums
            const lpo_dtype dt = mix[k].f32 ? LPO_DT_F32 : LPO_DT_BF16;
            const size_t es = mix[k].f32 ? 4 : 2;
            want[k] = malloc((size_t)mix[k].count * sizeof(float));
            for (int g = 0; g < n; g++) {
                uint64_t r = (uint64_t)(round * 131 + k * 17 + g) * 0x9e3779b97f4a7c15ull + 1;
                for (int64_t i = 0; i < mix[k].count; i++) {
                    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                    os_put(h, dt, i, (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1));
                    const float xv = os_get(h, dt, i);
                    want[k][i] = g ? want[k][i] + xv : 0.f + xv;
                }
                CUOK(cudaSetDevice(g));
                CUOK(cudaMemcpy((char *)G.buf[g] + mix[k].off, h, (size_t)mix[k].count * es,
                                cudaMemcpyHostToDevice));
                CUOK(cudaDeviceSynchronize());
            }
            for (int64_t i = 0; i < mix[k].count; i++)
                want[k][i] = mix[k].f32 ? want[k][i] : lpo_bf16_to_f32(lpo_f32_to_bf16(want[k][i]));
        }
        for (int k = 0; k < nm; k++)
            for (int g = 0; g < n; g++) {
                CUOK(cudaSetDevice(g));
                assert_int_equal(lpo_cuda_oneshot_all_reduce(&G.os[g], (char *)G.buf[g] + mix[k].off,
                                                             mix[k].count,
                                                             mix[k].f32 ? LPO_DT_F32 : LPO_DT_BF16, G.s[g]),
                                 LPO_OK);
            }
        os_sync(&G);
        for (int k = 0; k < nm; k++) {
            const lpo_dtype dt = mix[k].f32 ? LPO_DT_F32 : LPO_DT_BF16;
            for (int g = 0; g < n; g++) {
                CUOK(cudaMemcpy(h, (char *)G.buf[g] + mix[k].off, (size_t)mix[k].count * (mix[k].f32 ? 4 : 2),
                                cudaMemcpyDeviceToHost));
                for (int64_t i = 0; i < mix[k].count; i++)
                    if (os_get(h, dt, i) != want[k][i])
                        fail_msg("one-shot, mixed sizes, %d GPUs, round %d message %d: GPU %d element %lld = "
                                 "%.9g, "
                                 "host %.9g",
                                 n, round, k, g, (long long)i, (double)os_get(h, dt, i), (double)want[k][i]);
            }
            free(want[k]);
        }
    }
    /* timing: 100 calls in one graph per GPU, one-shot vs NCCL, bf16; the smallest GPU time per call */
    const int64_t tbytes[] = {8192, 16384, 65536, 262144};
    for (size_t ti = 0; ti < sizeof tbytes / sizeof tbytes[0]; ti++) {
        double us[2];
        for (int way = 0; way < 2; way++) {
            cudaGraphExec_t ex[8];
            for (int g = 0; g < n; g++) {
                CUOK(cudaSetDevice(g));
                CUOK(cudaMemset(G.buf[g], 0, OS_MAX));
                CUOK(cudaMemset(G.ref[g], 0, OS_MAX));
                CUOK(cudaDeviceSynchronize());
                CUOK(cudaStreamBeginCapture(G.s[g], cudaStreamCaptureModeThreadLocal));
            }
            if (way == 0) {
                os_run(&G, LPO_DT_BF16, tbytes[ti] / 2, 100, 0);
            } else {
                for (int c = 0; c < 100; c++) {
                    assert_int_equal(ncclGroupStart(), ncclSuccess);
                    for (int g = 0; g < n; g++)
                        assert_int_equal(ncclAllReduce(G.ref[g], G.ref[g], (size_t)tbytes[ti] / 2,
                                                       ncclBfloat16, ncclSum, G.comm[g], G.s[g]),
                                         ncclSuccess);
                    assert_int_equal(ncclGroupEnd(), ncclSuccess);
                }
            }
            end_captures(n, G.s, ex);
            double best = 1e30;
            for (int rep = 0; rep < 5; rep++) { // the best of 5 replays (the first warms up)
                for (int g = 0; g < n; g++) {
                    CUOK(cudaSetDevice(g));
                    CUOK(cudaEventRecord(G.e0[g], G.s[g]));
                    CUOK(cudaGraphLaunch(ex[g], G.s[g]));
                    CUOK(cudaEventRecord(G.e1[g], G.s[g]));
                }
                double lo = 1e30;
                for (int g = 0; g < n; g++) {
                    float ms = 0;
                    CUOK(cudaEventSynchronize(G.e1[g]));
                    CUOK(cudaEventElapsedTime(&ms, G.e0[g], G.e1[g]));
                    lo = ms < lo ? ms : lo;
                }
                if (rep > 0 && lo < best) best = lo;
            }
            us[way] = best * 1e3 / 100;
            for (int g = 0; g < n; g++) cudaGraphExecDestroy(ex[g]);
        }
        print_message(
            "all-reduce %lld B bf16 over %d GPUs in a graph: one-shot %.2f us, NCCL %.2f us (%.2fx)\n",
            (long long)tbytes[ti], n, us[0], us[1], us[1] / us[0]);
    }
    for (int g = 0; g < n; g++) free(x[g]);
    free(h);
    free(hr);
    os_close(&G);
}

/* ---- the all-reduce fused with the residual add and RMSNorm ---- */
#define AN_H    4096 /* row width (elements) */
#define AN_SLOT ((size_t)256 << 10)
typedef struct {
    os_group G;
    lpo_cuda_arnorm an[8];
    void *mem[8], *x[8], *x2[8], *y[8], *y2[8], *w[8];
} an_group;

static void an_open(an_group *A, int n) {
    memset(A, 0, sizeof *A);
    os_open(&A->G, n);
    void *abort_d = NULL;
    CUOK(cudaHostGetDevicePointer(&abort_d, A->G.abort_h, 0));
    const size_t bytes = lpo_cuda_arnorm_bytes(n, AN_SLOT);
    for (int g = 0; g < n; g++) {
        CUOK(cudaSetDevice(g));
        CUOK(cudaMalloc(&A->mem[g], bytes));
        assert_int_equal(lpo_cuda_arnorm_reset(A->mem[g], n, AN_SLOT, A->G.s[g]), LPO_OK);
        void **bufs[] = {&A->x[g], &A->x2[g], &A->y[g], &A->y2[g], &A->w[g]};
        for (int k = 0; k < 5; k++) CUOK(cudaMalloc(bufs[k], OS_MAX));
        CUOK(cudaDeviceSynchronize());
    }
    for (int g = 0; g < n; g++) {
        for (int q = 0; q < n; q++) A->an[g].recv[q] = A->mem[q];
        A->an[g].abort = (const volatile int *)abort_d;
        A->an[g].slot_bytes = AN_SLOT;
        A->an[g].rank = g, A->an[g].n = n;
    }
}

static void an_close(an_group *A) {
    for (int g = 0; g < A->G.n; g++) {
        cudaSetDevice(g);
        cudaStreamSynchronize(A->G.s[g]);
        cudaFree(A->mem[g]), cudaFree(A->x[g]), cudaFree(A->x2[g]), cudaFree(A->y[g]), cudaFree(A->y2[g]);
        cudaFree(A->w[g]);
    }
    os_close(&A->G);
}

/* random values in (-1, 1) rounded to dt: count of them into h (device layout) and f (floats) */
static void an_random(lpo_dtype dt, int64_t count, void *h, float *f, uint64_t seed) {
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < count; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        os_put(h, dt, i, (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1));
        f[i] = os_get(h, dt, i);
    }
}

static float an_round(lpo_dtype dt, float v) {
    return dt == LPO_DT_F32 ? v : lpo_bf16_to_f32(lpo_f32_to_bf16(v));
}

/* The host: x (rows m, AN_H) += the rank-order sum of the partials p[q] (rounded), y = rmsnorm(x) * w. */
static void an_expect(int n, lpo_dtype dt, int64_t m, float **p, float *x, const float *w, float *y) {
    for (int64_t r = 0; r < m; r++) {
        double ss = 0;
        for (int64_t i = 0; i < AN_H; i++) {
            float acc = 0.f;
            for (int q = 0; q < n; q++) acc += p[q][r * AN_H + i];
            x[r * AN_H + i] = an_round(dt, x[r * AN_H + i] + an_round(dt, acc));
            ss += (double)x[r * AN_H + i] * x[r * AN_H + i];
        }
        const double inv = 1.0 / sqrt(ss / AN_H + 1e-5);
        for (int64_t i = 0; i < AN_H; i++) y[r * AN_H + i] = (float)(w[i] * (x[r * AN_H + i] * inv));
    }
}

/* GPU g's buffer d (count elements of dt) against want: bitwise (tol 0) or within tol * (1 + |want|); returns
 * how many elements are not bit for bit equal. */
static int64_t an_compare(const char *what, int g, const void *d, lpo_dtype dt, int64_t count,
                          const float *want, double tol, void *h) {
    CUOK(cudaMemcpy(h, d, (size_t)count * (dt == LPO_DT_F32 ? 4 : 2), cudaMemcpyDeviceToHost));
    int64_t differ = 0;
    for (int64_t i = 0; i < count; i++) {
        const float got = os_get(h, dt, i);
        differ += got != want[i];
        const int ok = tol == 0 ? got == want[i] : fabs((double)got - want[i]) <= tol * (1 + fabs(want[i]));
        if (!ok)
            fail_msg("%s: GPU %d element %lld = %.9g, expected %.9g", what, g, (long long)i, (double)got,
                     (double)want[i]);
    }
    return differ;
}

static void arnorm_group(int n) {
    an_group A;
    an_open(&A, n);
    os_group *G = &A.G;
    const int64_t cap = OS_MAX / 4;
    float *p[8], *x = malloc(cap * sizeof(float)), *y = malloc(cap * sizeof(float)),
                 *w = malloc(AN_H * sizeof(float)), *f = malloc(cap * sizeof(float));
    void *h = malloc(OS_MAX);
    for (int g = 0; g < n; g++) p[g] = malloc(cap * sizeof(float));
    static const int64_t rows[] = {1, 3, 8, 1, 1, 2, 8, 1};
    const int nr = (int)(sizeof rows / sizeof rows[0]);
    for (int d = 0; d < 2; d++) {
        const lpo_dtype dt = d ? LPO_DT_F32 : LPO_DT_BF16;
        const size_t es = d ? 4 : 2;
        const int64_t count = 8 * AN_H;
        /* a region serves one row width (bytes): reset when it changes (here: the dtype) */
        for (int g = 0; g < n; g++) {
            CUOK(cudaSetDevice(g));
            assert_int_equal(lpo_cuda_arnorm_reset(A.mem[g], n, AN_SLOT, G->s[g]), LPO_OK);
        }
        os_sync(G);
        /* partials per GPU (buf), the same residual and weights on every GPU */
        an_random(dt, count, h, x, 5 + (uint64_t)d);
        for (int g = 0; g < n; g++) {
            CUOK(cudaSetDevice(g));
            CUOK(cudaMemcpy(A.x[g], h, (size_t)count * es, cudaMemcpyHostToDevice));
            CUOK(cudaMemcpy(A.x2[g], h, (size_t)count * es, cudaMemcpyHostToDevice));
        }
        an_random(dt, AN_H, h, w, 77);
        for (int g = 0; g < n; g++) {
            CUOK(cudaSetDevice(g));
            CUOK(cudaMemcpy(A.w[g], h, AN_H * es, cudaMemcpyHostToDevice));
        }
        for (int g = 0; g < n; g++) {
            an_random(dt, count, h, p[g], 100 + (uint64_t)(g + 10 * d));
            CUOK(cudaSetDevice(g));
            CUOK(cudaMemcpy(G->buf[g], h, (size_t)count * es, cudaMemcpyHostToDevice));
            CUOK(cudaDeviceSynchronize());
        }
        /* calls of 1-8 rows back to back, no synchronisation: the fused kernel on (buf, x, y), the one-shot +
         * add_rmsnorm on a copy of the partials (ref, x2, y2) */
        int64_t ydiff = 0;
        for (int k = 0; k < nr; k++) {
            for (int g = 0; g < n; g++) {
                CUOK(cudaSetDevice(g));
                assert_int_equal(lpo_cuda_allreduce_add_rmsnorm(&A.an[g], G->buf[g], A.x[g], A.y[g], A.w[g],
                                                                rows[k], AN_H, 1e-5f, dt, G->s[g]),
                                 LPO_OK);
                CUOK(cudaMemcpyAsync(G->ref[g], G->buf[g], (size_t)(rows[k] * AN_H) * es,
                                     cudaMemcpyDeviceToDevice, G->s[g]));
                assert_int_equal(
                    lpo_cuda_oneshot_all_reduce(&G->os[g], G->ref[g], rows[k] * AN_H, dt, G->s[g]), LPO_OK);
            }
            for (int g = 0; g < n; g++) {
                CUOK(cudaSetDevice(g));
                assert_int_equal(lpo_cuda_add_rmsnorm(A.x2[g], G->ref[g], A.y2[g], A.w[g], rows[k], AN_H,
                                                      1e-5f, dt, G->s[g]),
                                 LPO_OK);
            }
            an_expect(n, dt, rows[k], p, x, w, y);
            os_sync(G);
            char what[160];
            for (int g = 0; g < n; g++) { /* x bit for bit, y within rounding; the unfused path bit for bit */
                snprintf(what, sizeof what, "fused %d GPUs %s call %d (%lld rows): x vs host", n,
                         lpo_dtype_name(dt), k, (long long)rows[k]);
                an_compare(what, g, A.x[g], dt, 8 * AN_H, x, 0, h);
                snprintf(what, sizeof what, "fused %d GPUs %s call %d: y vs host", n, lpo_dtype_name(dt), k);
                an_compare(what, g, A.y[g], dt, rows[k] * AN_H, y, d ? 1e-5 : 1.0 / 128, h);
                CUOK(cudaMemcpy(h, A.y[g], (size_t)(rows[k] * AN_H) * es, cudaMemcpyDeviceToHost));
                for (int64_t i = 0; i < rows[k] * AN_H; i++) f[i] = os_get(h, dt, i);
                snprintf(what, sizeof what, "fused vs one-shot + add_rmsnorm %d GPUs %s call %d: y", n,
                         lpo_dtype_name(dt), k);
                /* the same arithmetic (add_rmsnorm's threads and tree): bit for bit expected, one rounding
                 * allowed (a contraction the compiler makes in one kernel and not the other) */
                ydiff += an_compare(what, g, A.y2[g], dt, rows[k] * AN_H, f, d ? 1e-6 : 1.0 / 128, h);
                snprintf(what, sizeof what, "fused vs one-shot + add_rmsnorm %d GPUs %s call %d: x", n,
                         lpo_dtype_name(dt), k);
                an_compare(what, g, A.x2[g], dt, 8 * AN_H, x, 0, h);
            }
        }
        /* against NCCL + add_rmsnorm, one call of 8 rows: bit for bit at 2 GPUs */
        for (int g = 0; g < n; g++) {
            CUOK(cudaSetDevice(g));
            assert_int_equal(lpo_cuda_allreduce_add_rmsnorm(&A.an[g], G->buf[g], A.x[g], A.y[g], A.w[g], 8,
                                                            AN_H, 1e-5f, dt, G->s[g]),
                             LPO_OK);
            CUOK(
                cudaMemcpyAsync(G->ref[g], G->buf[g], (size_t)count * es, cudaMemcpyDeviceToDevice, G->s[g]));
        }
        assert_int_equal(ncclGroupStart(), ncclSuccess);
        for (int g = 0; g < n; g++)
            assert_int_equal(ncclAllReduce(G->ref[g], G->ref[g], (size_t)count,
                                           dt == LPO_DT_F32 ? ncclFloat32 : ncclBfloat16, ncclSum, G->comm[g],
                                           G->s[g]),
                             ncclSuccess);
        assert_int_equal(ncclGroupEnd(), ncclSuccess);
        for (int g = 0; g < n; g++) {
            CUOK(cudaSetDevice(g));
            assert_int_equal(
                lpo_cuda_add_rmsnorm(A.x2[g], G->ref[g], A.y2[g], A.w[g], 8, AN_H, 1e-5f, dt, G->s[g]),
                LPO_OK);
        }
        an_expect(n, dt, 8, p, x, w, y);
        os_sync(G);
        int64_t ncdiff = 0;
        for (int g = 0; g < n; g++) {
            char what[160];
            CUOK(cudaMemcpy(h, A.y[g], (size_t)count * es, cudaMemcpyDeviceToHost));
            for (int64_t i = 0; i < count; i++) f[i] = os_get(h, dt, i);
            snprintf(what, sizeof what, "fused vs NCCL + add_rmsnorm %d GPUs %s: y", n, lpo_dtype_name(dt));
            ncdiff += an_compare(what, g, A.y2[g], dt, count, f,
                                 n == 2 ? (d ? 1e-6 : 1.0 / 128) : (d ? 1e-5 : 1.0 / 64), h);
        }
        print_message(
            "fused all-reduce + add + rmsnorm %d GPUs %s: y elements not bit for bit equal to one-shot + "
            "add_rmsnorm: %lld, to NCCL + add_rmsnorm: %lld\n",
            n, lpo_dtype_name(dt), (long long)ydiff, (long long)ncdiff);
        /* graphs: 8 calls of one row captured per GPU, replayed twice */
        cudaGraphExec_t ex[8];
        for (int g = 0; g < n; g++) {
            CUOK(cudaSetDevice(g));
            CUOK(cudaStreamBeginCapture(G->s[g], cudaStreamCaptureModeThreadLocal));
            for (int k = 0; k < 8; k++)
                assert_int_equal(lpo_cuda_allreduce_add_rmsnorm(&A.an[g], G->buf[g], A.x[g], A.y[g], A.w[g],
                                                                1, AN_H, 1e-5f, dt, G->s[g]),
                                 LPO_OK);
            cudaGraph_t gr;
            CUOK(cudaStreamEndCapture(G->s[g], &gr));
            CUOK(cudaGraphInstantiate(&ex[g], gr, 0));
            cudaGraphDestroy(gr);
        }
        for (int rep = 0; rep < 2; rep++)
            for (int g = 0; g < n; g++) {
                CUOK(cudaSetDevice(g));
                CUOK(cudaGraphLaunch(ex[g], G->s[g]));
            }
        for (int k = 0; k < 16; k++) an_expect(n, dt, 1, p, x, w, y);
        os_sync(G);
        for (int g = 0; g < n; g++) {
            char what[160];
            snprintf(what, sizeof what, "fused in graphs %d GPUs %s: x", n, lpo_dtype_name(dt));
            an_compare(what, g, A.x[g], dt, AN_H, x, 0, h);
            snprintf(what, sizeof what, "fused in graphs %d GPUs %s: y", n, lpo_dtype_name(dt));
            an_compare(what, g, A.y[g], dt, AN_H, y, d ? 1e-5 : 1.0 / 128, h);
            cudaGraphExecDestroy(ex[g]);
        }
    }
    /* timing: 100 calls of one row (bf16) in one graph per GPU: fused, one-shot + add_rmsnorm, NCCL +
     * add_rmsnorm; the smallest GPU time per call */
    static const int64_t widths[] = {4096, 8192};
    for (int wi = 0; wi < 2; wi++) {
        const int64_t H = widths[wi];
        double us[3];
        for (int way = 0; way < 3; way++) {
            cudaGraphExec_t ex[8];
            for (int g = 0; g < n; g++) {
                CUOK(cudaSetDevice(g));
                CUOK(cudaMemset(G->buf[g], 0, OS_MAX));
                CUOK(cudaMemset(G->ref[g], 0, OS_MAX));
                CUOK(cudaMemset(A.x[g], 0, OS_MAX));
                CUOK(cudaMemset(A.w[g], 0, OS_MAX));
                assert_int_equal(lpo_cuda_arnorm_reset(A.mem[g], n, AN_SLOT, G->s[g]), LPO_OK);
                CUOK(cudaDeviceSynchronize());
                CUOK(cudaStreamBeginCapture(G->s[g], cudaStreamCaptureModeThreadLocal));
            }
            for (int c = 0; c < 100; c++) {
                if (way == 2) {
                    assert_int_equal(ncclGroupStart(), ncclSuccess);
                    for (int g = 0; g < n; g++)
                        assert_int_equal(ncclAllReduce(G->ref[g], G->ref[g], (size_t)H, ncclBfloat16, ncclSum,
                                                       G->comm[g], G->s[g]),
                                         ncclSuccess);
                    assert_int_equal(ncclGroupEnd(), ncclSuccess);
                }
                for (int g = 0; g < n; g++) {
                    CUOK(cudaSetDevice(g));
                    if (way == 0)
                        assert_int_equal(lpo_cuda_allreduce_add_rmsnorm(&A.an[g], G->buf[g], A.x[g], A.y[g],
                                                                        A.w[g], 1, H, 1e-5f, LPO_DT_BF16,
                                                                        G->s[g]),
                                         LPO_OK);
                    if (way == 1)
                        assert_int_equal(
                            lpo_cuda_oneshot_all_reduce(&G->os[g], G->ref[g], H, LPO_DT_BF16, G->s[g]),
                            LPO_OK);
                    if (way >= 1)
                        assert_int_equal(lpo_cuda_add_rmsnorm(A.x[g], G->ref[g], A.y[g], A.w[g], 1, H, 1e-5f,
                                                              LPO_DT_BF16, G->s[g]),
                                         LPO_OK);
                }
            }
            end_captures(n, G->s, ex);
            double best = 1e30;
            for (int rep = 0; rep < 5; rep++) { // the best of 5 replays (the first warms up)
                for (int g = 0; g < n; g++) {
                    CUOK(cudaSetDevice(g));
                    CUOK(cudaEventRecord(G->e0[g], G->s[g]));
                    CUOK(cudaGraphLaunch(ex[g], G->s[g]));
                    CUOK(cudaEventRecord(G->e1[g], G->s[g]));
                }
                double lo = 1e30;
                for (int g = 0; g < n; g++) {
                    float ms = 0;
                    CUOK(cudaEventSynchronize(G->e1[g]));
                    CUOK(cudaEventElapsedTime(&ms, G->e0[g], G->e1[g]));
                    lo = ms < lo ? ms : lo;
                }
                if (rep > 0 && lo < best) best = lo;
            }
            us[way] = best * 1e3 / 100;
            for (int g = 0; g < n; g++) cudaGraphExecDestroy(ex[g]);
        }
        print_message(
            "all-reduce + add + rmsnorm %lld B bf16 over %d GPUs in a graph: fused %.2f us, one-shot + "
            "add_rmsnorm %.2f us, NCCL + add_rmsnorm %.2f us\n",
            (long long)(H * 2), n, us[0], us[1], us[2]);
    }
    for (int g = 0; g < n; g++) free(p[g]);
    free(x), free(y), free(w), free(f), free(h);
    an_close(&A);
}

static void test_arnorm(void **state) {
    (void)state;
    int can = 0;
    cudaDeviceCanAccessPeer(&can, 0, 1);
    if (!can) {
        print_message("SKIP: GPUs 0 and 1 have no peer access (the fused all-reduce needs it)\n");
        return;
    }
    for (int n = 2; n <= 4 && n <= n_gpus(); n *= 2) arnorm_group(n);
}

static void test_oneshot(void **state) {
    (void)state;
    int can = 0;
    cudaDeviceCanAccessPeer(&can, 0, 1);
    if (!can) {
        print_message("SKIP: GPUs 0 and 1 have no peer access (the one-shot all-reduce needs it)\n");
        return;
    }
    for (int n = 2; n <= 4 && n <= n_gpus(); n *= 2) oneshot_group(n);
}
#else
static void test_oneshot(void **state) {
    (void)state;
}
static void test_arnorm(void **state) {
    (void)state;
}
#endif

#ifdef LPO_TRACE_PROBE
static double jnum(const cJSON *row, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(row, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

/* lpo trace of lpo bench with engine.tp=2 and the all-reduce `ar`; checks the multi-GPU outputs. */
static void trace_tp(const char *tmp, const char *ar, const char *kernel_part) {
    char args[8192], sub[4300];
    snprintf(sub, sizeof sub, "%s/tp-%s", tmp, ar);
    snprintf(
        args, sizeof args,
        "trace output.dir=%s -- %s bench model=llama3.2-1b backend=cuda engine.tp=2 engine.tp_allreduce=%s "
        "bench.batch=[1] bench.prompt=[32] bench.gen=[16] profiling.warmup=1 profiling.min_samples=3 "
        "profiling.timeout_s=10 --no-save",
        sub, LPO_BINARY, ar);
    char *out = NULL, *err = NULL;
    const int rc = lpo_test_run_lpo(args, &out, &err);
    printf("lpo %s -> %d\n%s%s", args, rc, out ? out : "", err ? err : "");
    free(out);
    free(err);
    assert_int_equal(rc, 0);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(sub, &t)) fail_msg("%s", lpo_last_error());
    lpo_table *ct = NULL, *sk = NULL, *kd = NULL;
    assert_int_equal(lpo_trace_comm_tables(t, "decode_step", &ct, &sk, NULL), LPO_OK);
    assert_int_equal(lpo_trace_device_kernel_table(t, &kd), LPO_OK);
    cJSON *rows = test_table_rows(ct);
    assert_int_equal(cJSON_GetArraySize(rows), 2); /* one rank per GPU */
    const cJSON *r0 = cJSON_GetArrayItem(rows, 0), *r1 = cJSON_GetArrayItem(rows, 1);
    const double n0 = jnum(r0, "comm_kernels"), n1 = jnum(r1, "comm_kernels");
    printf("tp trace (%s): GPU %.0f: %.0f communication kernels, %.3f ms, overlap %.1f%%, exposed %.3f ms, "
           "wait %.3f ms; GPU %.0f: %.0f, %.3f ms, overlap %.1f%%, exposed %.3f ms, wait %.3f ms\n",
           ar, jnum(r0, "device"), n0, jnum(r0, "comm_ms"), jnum(r0, "overlap_pct"), jnum(r0, "exposed_ms"),
           jnum(r0, "wait_ms"), jnum(r1, "device"), n1, jnum(r1, "comm_ms"), jnum(r1, "overlap_pct"),
           jnum(r1, "exposed_ms"), jnum(r1, "wait_ms"));
    /* 16 layers: 2 all-reduces a layer and the logits' gather a decode step, the same on both ranks */
    assert_true(n0 >= 33 * 16 && n0 == n1);
    assert_true(jnum(r0, "comm_ms") > 0 && jnum(r1, "comm_ms") > 0);
    assert_true(jnum(r0, "overlap_ms") >= 0 && jnum(r0, "overlap_ms") <= jnum(r0, "comm_ms"));
    assert_true(jnum(r0, "steps") >= 15 && jnum(r0, "steps") == jnum(r1, "steps"));
    cJSON_Delete(rows);
    rows = test_table_rows(sk);
    int coll = 0, steps = 0;
    cJSON *r;
    cJSON_ArrayForEach(r, rows) {
        const char *src = cJSON_GetObjectItem(r, "source")->valuestring;
        coll += !strcmp(src, "collective");
        steps += !strcmp(src, "step");
        assert_true(jnum(r, "ranks") == 2 && jnum(r, "start_spread_us") >= 0);
    }
    assert_int_equal(coll, (int)n0);
    assert_true(steps >= 15);
    cJSON_Delete(rows);
    rows = test_table_rows(kd);
    int comm_rows[2] = {0, 0}, part[2] = {0, 0};
    cJSON_ArrayForEach(r, rows) {
        const char *cat = cJSON_GetObjectItem(r, "category")->valuestring;
        const char *name = cJSON_GetObjectItem(r, "name")->valuestring;
        const int dev = (int)jnum(r, "device");
        if (!strcmp(cat, "communication") && dev >= 0 && dev < 2) comm_rows[dev]++;
        if (strstr(name, kernel_part) && dev >= 0 && dev < 2) {
            part[dev]++;
            assert_string_equal(cat, "communication");
        }
    }
    assert_true(comm_rows[0] >= 1 && comm_rows[1] >= 1);
    assert_true(part[0] >= 1 && part[1] >= 1); /* on both GPUs */
    cJSON_Delete(rows);
    lpo_trace_free(t);
    char p[4400], *text = NULL;
    snprintf(p, sizeof p, "%s/trace.json", sub);
    assert_int_equal(lpo_read_file(p, &text, NULL), LPO_OK);
    assert_non_null(strstr(text, "\"GPU 0 (process ")); /* a timeline per GPU */
    assert_non_null(strstr(text, "\"GPU 1 (process "));
    assert_non_null(strstr(text, "\"kernel,communication\""));
    free(text);
    snprintf(p, sizeof p, "%s/comm.md", sub);
    assert_int_equal(lpo_read_file(p, &text, NULL), LPO_OK);
    printf("---- %s\n%s\n", p, text);
    free(text);
}

static void test_trace_tp(void **state) {
    (void)state;
    char *tmp = lpo_test_tmpdir();
    trace_tp(tmp, "nccl", "nccl");
    trace_tp(tmp, "oneshot",
             "allreduce_add_rmsnorm_kernel"); /* fused with the add and norm (engine.tp_fuse) */
    free(tmp);
}
#else
static void test_trace_tp(void **state) {
    (void)state;
    printf("SKIP: lpo trace of engine.tp=2: built without CUPTI (no liblpo_probe.so)\n");
}
#endif

int main(void) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    lpo_test_require_gpu();
    if (n_gpus() < 2) {
        printf("SKIP: tensor parallelism needs 2 GPUs or more; this machine has %d\n", n_gpus());
        return 77;
    }
    if (!(lpo_backend_cuda()->features & LPO_BACKEND_F_TP)) {
        printf("SKIP: this lpo was built without NCCL (engine.tp runs on the CPU backend only)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_and_tokens),
        cmocka_unit_test(test_moe_mla),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_allreduce_sweep),
        cmocka_unit_test(test_oneshot),
        cmocka_unit_test(test_arnorm),
        cmocka_unit_test(test_trace_tp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
