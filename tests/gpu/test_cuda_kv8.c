/* The fp8 KV cache on the CUDA backend (engine.kv_dtype=fp8; label gpu; SKIP without a GPU or the backend):
 * - the op checker on the attention ops of Llama-3.2-1B (head_dim 64), Llama-3.1-8B (128) and odd shapes
 *   (head_dim 32 with a sliding window, 256), prefill and decode forms, bf16 / f16 / f32, against the CPU
 *   reference on the same fp8 cache (the appended rows through fp8 from the same values: bit-identical);
 * - the engine: CUDA (f32 and bf16) vs the CPU reference (f32), both with the fp8 cache: logits of a prefill
 * and 16 greedy tokens; eager and debug steps give the graph's tokens; batched decode steps (graphs, padded
 *   buckets) against eager; with fp8 weights too; a head_dim without fp8 kernels refused by name;
 * - the quantization error of the fp8 cache against the bf16 cache on synthetic Llama-3.2-1B, reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/config.h"
#include "lpo/opcheck.h"
#include "test_engine_support.h"
#include "test_fp8_fixture.h"
#include "test_preset.h"
#include "test_support.h"

static int failures;

static void check_spec(const lpo_model_spec *s, lpo_dtype dt) {
    const lpo_backend_iface *be = lpo_backend_cuda();
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = dt};
    if (be->init(&in, &ctx) != LPO_OK) fail_msg("cuda op-only context: %s", lpo_last_error());
    const lpo_oplist_opts o = {dt, LPO_DT_FP8, NULL, NULL, 1};
    /* prefill of 37 and 130 tokens (one op: two sequences with cached prefixes), decode of 1, 3 and 8 */
    const struct {
        int decode, batch;
        int64_t t;
    } shapes[] = {{0, 1, 37}, {0, 1, 130}, {1, 1, 50}, {1, 3, 50}, {1, 8, 50}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        lpo_oplist l = {0};
        assert_int_equal(lpo_oplist_build_phase(s, shapes[k].decode, shapes[k].batch, shapes[k].t, &o, &l),
                         LPO_OK);
        const long a = lpo_oplist_find(&l, LPO_ROLE_ATTN, 0);
        assert_true(a >= 0);
        const lpo_op *op = &l.ops[a];
        assert_int_equal(op->in[1].dtype, LPO_DT_FP8);
        lpo_opcheck_result r;
        const lpo_status st = lpo_opcheck_run(be, ctx, dt, op, 7 + (uint64_t)op->m, &r);
        printf("%-12s %-5s kv fp8 %-8s %-52s max|err| %-9.3g nmse %-9.3g %s%s\n", s->name, lpo_dtype_name(dt),
               op->attn_variant == LPO_ATTN_DECODE ? "decode" : "prefill", r.shape, r.max_abs_err, r.nmse,
               st         ? "ERROR "
               : r.passed ? "ok"
                          : "FAIL ",
               st ? lpo_last_error() : r.msg);
        if (st || !r.passed) failures++;
        lpo_oplist_free(&l);
    }
    be->free(ctx);
}

static void test_opcheck_kv8(void **state) {
    (void)state;
    lpo_model_spec l1b = preset("llama3.2-1b"), l8b = preset("llama3.1-8b");
    lpo_model_spec win = test_spec(); /* head_dim 32, MQA, a sliding window of 24 */
    strcpy(win.name, "hd32-win24");
    win.hidden_size = 128, win.n_heads = 4, win.n_kv_heads = 1, win.head_dim = 32, win.sliding_window = 24;
    lpo_model_spec big = test_spec(); /* head_dim 256, GQA 3 */
    strcpy(big.name, "hd256");
    big.hidden_size = 768, big.n_heads = 3, big.n_kv_heads = 1, big.head_dim = 256;
    const lpo_dtype dts[] = {LPO_DT_BF16, LPO_DT_F16, LPO_DT_F32};
    for (int d = 0; d < 3; d++) {
        check_spec(&l1b, dts[d]);
        check_spec(&l8b, dts[d]);
        check_spec(&win, dts[d]);
        check_spec(&big, dts[d]);
    }
    assert_int_equal(failures, 0);
}

/* ---- the engine -------------------------------------------------------------------------------------- */
typedef struct {
    const char *backend, *dtype, *weights;
    lpo_exec_mode exec;
} run_opts;

/* A 40-token prefill's last logits, then n_gen greedy tokens; one sequence. */
static void run(const lpo_model_spec *s, const run_opts *r, float *logits, int32_t *tokens, int n_gen) {
    test_weights w;
    assert_int_equal(test_weights_open(s, &w), LPO_OK);
    lpo_weight_source ws = {&w, test_view};
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS,   .backend = r->backend, .max_seqs = 1,
                         .max_context = 96,     .dtype = r->dtype,     .exec = r->exec,
                         .weights = r->weights, .kv_dtype = "fp8"};
    lpo_engine *e = NULL;
    if (lpo_engine_open_weights(s, &ws, NULL, &o, &e) != LPO_OK)
        fail_msg("%s: %s", r->backend, lpo_last_error());
    assert_int_equal(lpo_engine_kv_dtype(e), LPO_DT_FP8);
    if (test_engine_prompt_greedy(e, logits, tokens, n_gen) != LPO_OK) fail_msg("%s", lpo_last_error());
    lpo_engine_close(e);
    test_weights_free(&w);
}

static lpo_model_spec engine_spec(void) {
    lpo_model_spec s = test_spec();
    s.hidden_size = 128;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.head_dim = 32;
    s.intermediate_size = 160;
    s.tied_embeddings = 0;
    return s;
}

/* max |a - ref| / max |ref| over n values */
static double rel_max_err(const float *a, const float *ref, int64_t n) {
    double amax = 0, emax = 0;
    for (int64_t i = 0; i < n; i++) {
        amax = fmax(amax, fabs(ref[i]));
        emax = fmax(emax, fabs(a[i] - ref[i]));
    }
    return amax > 0 ? emax / amax : emax;
}

/* Bounds of the CUDA logits vs the CPU f32 reference, both with the fp8 cache, in units of max |logit|.
 * f32: both sides quantize the same f32 values (a value whose f32 summation order moves it across an fp8
 * rounding boundary is rare): 5e-3. bf16: the bf16-computed k and v cross fp8 rounding boundaries that the
 * f32 ones do not, each such value one fp8 step (6-12%) away, which amplifies bf16's rounding through the
 * cache (the op checker compares attention from the same values instead): measured 0.092 on an H200 for this
 * 128-wide model, bound 0.15; with fp8 weights the prefill's W8A8 activation quantization adds its own
 * (test_cuda_fp8.c: 0.14 alone), bound 0.3. What the bounds catch is a wrong scale or layout (errors of the
 * order of max |logit|). */
static void compare_cpu(const lpo_model_spec *s, const char *weights, double bf16_bound) {
    const int64_t V = s->vocab_size;
    enum { G = 16 };
    float *ref = malloc((size_t)V * sizeof(float)), *gpu = malloc((size_t)V * sizeof(float));
    int32_t tref[G], tgpu[G], other[G];
    const run_opts cpu = {"cpu", "f32", weights, LPO_EXEC_GRAPH},
                   cuda = {"cuda", "bf16", weights, LPO_EXEC_GRAPH};
    run(s, &cpu, ref, tref, G);
    if (!weights) { /* f32 on the GPU (fp8 weights would be held in f32 there: engine.md) */
        const run_opts f32 = {"cuda", "f32", weights, LPO_EXEC_GRAPH};
        run(s, &f32, gpu, tgpu, G);
        const double e = rel_max_err(gpu, ref, V);
        int same = 0;
        for (int g = 0; g < G; g++) same += tref[g] == tgpu[g];
        printf(
            "engine.kv_dtype=fp8 weights=auto: CUDA f32 vs CPU f32 logits %.3g of max|logit|; greedy tokens "
            "equal: %d of %d\n",
            e, same, G);
        assert_true(e <= 5e-3);
    }
    run(s, &cuda, gpu, tgpu, G);
    const double e = rel_max_err(gpu, ref, V);
    int same = 0;
    for (int g = 0; g < G; g++) same += tref[g] == tgpu[g];
    printf("engine.kv_dtype=fp8 weights=%s: CUDA bf16 vs CPU f32 logits %.3g of max|logit| (bound %.2g); "
           "greedy tokens equal: %d of %d\n",
           weights ? weights : "auto", e, bf16_bound, same, G);
    assert_true(e <= bf16_bound);
    /* every exec mode: the graph's tokens. With fp8 weights as well, the first 8 (measured on an H200:
     * eager's greedy tokens left the graph's at token 12 of 16 there, and stayed equal with either fp8 part
     * alone; this random model's logits are nearly flat, greedy 0 of 16 against the CPU's, so a near tie can
     * flip) */
    const lpo_exec_mode modes[] = {LPO_EXEC_EAGER, LPO_EXEC_DEBUG};
    for (int m = 0; m < 2; m++) {
        const run_opts o = {"cuda", "bf16", weights, modes[m]};
        run(s, &o, gpu, other, G);
        int prefix = 0;
        while (prefix < G && other[prefix] == tgpu[prefix]) prefix++;
        printf("  %s steps: greedy tokens equal to the graph's for the first %d of %d\n",
               modes[m] == LPO_EXEC_EAGER ? "eager" : "debug", prefix, G);
        assert_true(prefix >= (weights ? 8 : G));
    }
    free(ref);
    free(gpu);
}

static void test_engine_kv8(void **state) {
    (void)state;
    const lpo_model_spec s = engine_spec();
    compare_cpu(&s, NULL, 0.15);
    compare_cpu(&s, "fp8", 0.3);
}

/* Three sequences of different prompt lengths, then 12 chained decode steps: graph (padded to bucket 4) and
 * eager give the same ids; the CPU's ids are counted. */
static void batch_ids(const lpo_model_spec *s, const char *backend, const char *dtype, lpo_exec_mode exec,
                      int32_t (*ids)[3]) {
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = backend, .max_seqs = 3,    .max_context = 96,
                         .dtype = dtype,      .exec = exec,       .kv_dtype = "fp8"};
    lpo_engine *e = NULL;
    if (test_engine_open_opts(s, &o, &e) != LPO_OK) fail_msg("%s: %s", backend, lpo_last_error());
    const lpo_sampling greedy = {0, 0, 1, 1, 0};
    int slots[3] = {0, 1, 2};
    for (int i = 0; i < 3; i++) assert_int_equal(lpo_engine_set_sampling(e, i, &greedy, (uint64_t)i), LPO_OK);
    int32_t p[3][30];
    const int64_t n[3] = {30, 9, 17};
    const int32_t *tp[3] = {p[0], p[1], p[2]};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 30; j++) p[i][j] = (int32_t)(3 + (j * 11 + i * 5) % 90);
    lpo_engine_batch b = {3, slots, tp, n, 0, NULL, 1, ids[0], NULL};
    assert_int_equal(lpo_engine_run(e, &b), LPO_OK);
    for (int k = 1; k < 13; k++) {
        lpo_engine_batch d = {3, slots, NULL, NULL, 0, NULL, 1, ids[k], NULL};
        assert_int_equal(lpo_engine_run(e, &d), LPO_OK);
    }
    lpo_engine_close(e);
}

static void test_batch_kv8(void **state) {
    (void)state;
    const lpo_model_spec s = engine_spec();
    int32_t g[13][3], ea[13][3], c[13][3];
    batch_ids(&s, "cuda", "bf16", LPO_EXEC_GRAPH, g);
    batch_ids(&s, "cuda", "bf16", LPO_EXEC_EAGER, ea);
    assert_memory_equal(g, ea, sizeof g);
    batch_ids(&s, "cpu", "f32", LPO_EXEC_GRAPH, c);
    int same = 0;
    for (int k = 0; k < 13; k++)
        for (int i = 0; i < 3; i++) same += g[k][i] == c[k][i];
    printf("engine.kv_dtype=fp8, 3 sequences x 13 tokens: CUDA graph ids equal to eager; to the CPU's: %d of "
           "39\n",
           same);
}

static void test_refused(void **state) {
    (void)state;
    lpo_model_spec s = engine_spec();
    s.head_dim = 16, s.hidden_size = 64; /* no fp8 attention instance */
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cuda", .max_seqs = 1, .max_context = 32,
                         .kv_dtype = "fp8"};
    lpo_engine *e = NULL;
    assert_int_equal(test_engine_open_opts(&s, &o, &e), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "engine.kv_dtype=fp8 with head_dim 16"));
    s = test_spec_mla();
    assert_int_equal(test_engine_open_opts(&s, &o, &e), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "latent"));
    lpo_error_clear();
}

/* the quantization error of the fp8 cache on synthetic Llama-3.2-1B weights (bf16 on the GPU) */
static void test_quant_error_1b(void **state) {
    (void)state;
    lpo_model_spec s = preset("llama3.2-1b");
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_synthetic(&s, 1, &m), LPO_OK);
    kv8_quant_error_of(m, "cuda", "bf16");
    lpo_model_close(m);
}

int main(void) {
    lpo_test_require_gpu();
    if (!lpo_backend_cuda()) {
        printf("SKIP: this build has no CUDA backend\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_opcheck_kv8), cmocka_unit_test(test_engine_kv8),
                                       cmocka_unit_test(test_batch_kv8), cmocka_unit_test(test_refused),
                                       cmocka_unit_test(test_quant_error_1b)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
