/* GGUF blocks on the CUDA backend (engine.weights=native; label gpu; SKIP without a GPU or the backend):
 * - the op checker on the linears (and an LM head) with q8_0, q4_0, q4_1, q4_k, q5_k and q6_k weights, bf16
 *   and f16: decode rows (1, 2, 3, 8: the block GEMV, 16-byte and 2-byte copy paths, one tile and two) and
 *   prefill rows (37: dequantized + cuBLASLt) at Llama-3.2-1B shapes and odd ones, against the CPU reference
 *   on the same blocks (include/lpo/qblock.h);
 * - the engine on synthetic weights of each format: CUDA (bf16 activations) vs the CPU reference (f32) on
 *   the same blocks: prefill logits and 16 greedy tokens; eager and debug give the graph's tokens; gemv off
 *   (every linear dequantized into cuBLASLt) counted;
 * - tests/golden/gguf/tiny-kquant.gguf (mixed q4_k / q6_k / q8_0 blocks, permuted Q / K rows moved whole on
 *   upload): CUDA native vs the CPU and vs CUDA auto (dequantized on upload);
 * - the device's block quantizer (synthetic weights held in blocks) byte-identical to the host's;
 * - the real SmolLM2-135M-Instruct Q4_1 GGUF (models/, when fetched): greedy tokens of the 5 prompts of
 *   tests/golden/engine/smollm2 with its q4_1 matrices in blocks on the GPU, against the CPU reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_kernels.h"
#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/generate.h"
#include "lpo/gguf.h"
#include "lpo/synth.h"
#include "lpo/opcheck.h"
#include "test_engine_support.h"
#include "test_support.h"
#include "test_gpu.h"
#include "test_preset.h"

static int failures;

static const lpo_dtype formats[] = {LPO_DT_Q8_0, LPO_DT_Q4_0, LPO_DT_Q4_1,
                                    LPO_DT_Q4_K, LPO_DT_Q5_K, LPO_DT_Q6_K};

/* op with its matrices (not biases) in wdt, at m rows */
static void check_op(const lpo_backend_iface *be, void *ctx, lpo_dtype dt, const lpo_op *src, lpo_dtype wdt,
                     int64_t m, const char *spec) {
    lpo_op op = *src;
    lpo_op_tensor w[8];
    for (int j = 0; j < op.n_w && j < 8; j++) {
        w[j] = src->w[j];
        if (j < op.n_w - op.n_bias) w[j].dtype = wdt;
    }
    op.w = w;
    op.m = m;
    op.in[0].shape[0] = m;
    op.out[0].shape[0] = m;
    lpo_opcheck_result r;
    const lpo_status st = lpo_opcheck_run(be, ctx, dt, &op, 11 + (uint64_t)m, &r);
    printf("%-12s %-5s %-5s %-14s %-40s max|err| %-9.3g nmse %-9.3g %s%s\n", spec, lpo_dtype_name(dt),
           lpo_dtype_name(wdt), lpo_op_role_name(op.role), r.shape, r.max_abs_err, r.nmse,
           st         ? "ERROR "
           : r.passed ? "ok"
                      : "FAIL ",
           st ? lpo_last_error() : r.msg);
    if (st || !r.passed) failures++;
}

static void check_spec(const lpo_model_spec *s, lpo_dtype dt, int lm_head) {
    const lpo_backend_iface *be = lpo_backend_cuda();
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = dt, .gemv = 1}; /* the engine's default */
    if (be->init(&in, &ctx) != LPO_OK) fail_msg("cuda op-only context: %s", lpo_last_error());
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(s, 0, 1, 37, NULL, &l), LPO_OK);
    const int64_t rows[] = {1, 2, 3, 8, 37};
    for (size_t i = 0; i < l.n_ops; i++) {
        const lpo_op *op = &l.ops[i];
        if (!(op->kind == LPO_OP_LINEAR && op->layer == 0) && !(op->kind == LPO_OP_LM_HEAD && lm_head))
            continue;
        for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++)
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
                check_op(be, ctx, dt, op, formats[f], rows[r], s->name);
    }
    lpo_oplist_free(&l);
    be->free(ctx);
}

static void test_opcheck_gguf(void **state) {
    (void)state;
    lpo_model_spec l1b = preset("llama3.2-1b"); /* k 2048 / 8192: every format on 16-byte copies */
    lpo_model_spec odd = test_spec(); /* k 768: q6_k rows of 630 bytes (2-byte copies), q4_0 432, q5_k 528 */
    strcpy(odd.name, "odd");
    odd.hidden_size = 768;
    odd.n_heads = 3;
    odd.n_kv_heads = 1;
    odd.head_dim = 64;
    odd.intermediate_size = 1280;
    odd.vocab_size = 1001;
    odd.qkv_bias = 1;
    lpo_model_spec q8 = odd; /* k 288: q8_0 / q4_0 / q4_1 rows of 306 / 162 / 180 bytes (2-byte copies);
                                K-quants held unquantized */
    strcpy(q8.name, "k288");
    q8.hidden_size = 288;
    q8.intermediate_size = 352;
    lpo_model_spec lng = odd; /* down k 10496: two tiles of 128 units (8192 columns), the second partial;
                                 q6_k rows of 8610 bytes (2-byte copies) */
    strcpy(lng.name, "k10496");
    lng.intermediate_size = 10496;
    const lpo_dtype dts[] = {LPO_DT_BF16, LPO_DT_F16};
    for (int d = 0; d < 2; d++) {
        check_spec(&l1b, dts[d], 0);
        check_spec(&odd, dts[d], 1);
        check_spec(&q8, dts[d], 1);
        check_spec(&lng, dts[d], 0);
    }
    assert_int_equal(failures, 0);
}

/* ---- the engine -------------------------------------------------------------------------------------- */
static void run(const lpo_model *m, const char *backend, const char *dtype, const char *weights,
                lpo_exec_mode exec, int gemv, float *logits, int32_t *tokens, int n_gen) {
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = backend, .max_seqs = 1,      .max_context = 64,
                         .dtype = dtype,      .exec = exec,       .weights = weights, .weights_keep = "none"};
    o.gemv = gemv;
    lpo_engine *e = NULL;
    if (lpo_engine_open(m, &o, &e) != LPO_OK) fail_msg("%s: %s", backend, lpo_last_error());
    if (test_engine_prompt_greedy(e, logits, tokens, n_gen) != LPO_OK) fail_msg("%s", lpo_last_error());
    lpo_engine_close(e);
}

/* CUDA bf16 native vs the CPU f32 reference (and the other modes) on model m */
static void compare(const lpo_model *m, const char *what) {
    const int64_t V = lpo_model_get_spec(m)->vocab_size;
    enum { G = 16 };
    float *ref = malloc((size_t)V * sizeof(float)), *gpu = malloc((size_t)V * sizeof(float));
    int32_t tref[G], tgpu[G], other[G];
    run(m, "cpu", "f32", "native", LPO_EXEC_GRAPH, 1, ref, tref, G);
    run(m, "cuda", "bf16", "native", LPO_EXEC_GRAPH, 1, gpu, tgpu, G);
    double amax = 0, emax = 0;
    for (int64_t i = 0; i < V; i++) {
        amax = fmax(amax, fabs(ref[i]));
        emax = fmax(emax, fabs(gpu[i] - ref[i]));
    }
    int same = 0;
    for (int g = 0; g < G; g++) same += tref[g] == tgpu[g];
    printf("%s: engine.weights=native CUDA bf16 vs CPU f32 logits max|err| %.4g (%.3g of max|logit|), greedy "
           "tokens equal %d of %d\n",
           what, emax, emax / amax, same, G);
    assert_true(emax <= 2e-2 * amax);
    const lpo_exec_mode modes[] = {LPO_EXEC_EAGER, LPO_EXEC_DEBUG};
    for (int k = 0; k < 2; k++) {
        run(m, "cuda", "bf16", "native", modes[k], 1, gpu, other, G);
        assert_memory_equal(other, tgpu, sizeof other);
    }
    run(m, "cuda", "bf16", "native", LPO_EXEC_GRAPH, 0, gpu, other, G); /* gemv off: dequantized GEMMs */
    same = 0;
    for (int g = 0; g < G; g++) same += other[g] == tgpu[g];
    printf("%s: gemv off (dequantized + cuBLASLt) greedy tokens equal to the block GEMV's: %d of %d\n", what,
           same, G);
    run(m, "cuda", "bf16", "auto", LPO_EXEC_GRAPH, 1, gpu, other, G); /* dequantized on upload */
    same = 0;
    for (int g = 0; g < G; g++) same += other[g] == tgpu[g];
    printf("%s: engine.weights=auto (bf16 on upload) greedy tokens equal to native's: %d of %d\n", what, same,
           G);
    free(ref);
    free(gpu);
}

static void test_engine_synthetic(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    s.hidden_size = 256, s.head_dim = 64, s.n_heads = 4, s.n_kv_heads = 2, s.intermediate_size = 512;
    s.vocab_size = 512, s.tied_embeddings = 0;
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        s.dtype = formats[f];
        snprintf(s.name, sizeof s.name, "synthetic-%s", lpo_dtype_name(formats[f]));
        lpo_model *m = NULL;
        assert_int_equal(lpo_model_open_synthetic(&s, 3, &m), LPO_OK);
        compare(m, s.name);
        lpo_model_close(m);
    }
}

static void test_kquant_file(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/golden/gguf/tiny-kquant.gguf", LPO_SOURCE_DIR);
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_path(path, &m), LPO_OK);
    compare(m, "tiny-kquant.gguf");
    lpo_model_close(m);
}

/* ---- the device's quantizer ------------------------------------------------------------------------ */
/* n synthetic values (key, center, amp) generated and quantized into dt blocks on the device vs the host's
 * lpo_synth_value + lpo_quantize_blocks: the same bytes (what engine.weights=native holds for synthetic
 * weights, and what the CPU reference computes with) */
static void check_device_quantize(lpo_dtype dt, int64_t n, uint64_t key, double center, double amp) {
    const size_t bytes = (size_t)lpo_dtype_bytes(dt, (uint64_t)n), bb = (size_t)lpo_dtype_block_bytes(dt);
    float *hx = malloc((size_t)n * sizeof *hx), *dx = NULL;
    uint8_t *hq = malloc(bytes), *gq = malloc(bytes), *dq = NULL;
    assert_non_null(hx), assert_non_null(hq), assert_non_null(gq);
    for (int64_t i = 0; i < n; i++) hx[i] = lpo_synth_value(key, center, amp, (uint64_t)i);
    OK(lpo_quantize_blocks(dt, hx, hq, (uint64_t)n));
    CK(cudaMalloc((void **)&dx, (size_t)n * sizeof *dx));
    CK(cudaMalloc((void **)&dq, bytes));
    OK(lpo_cuda_synth_fill(dx, LPO_DT_F32, n, key, center, amp, dt, 0));
    float *gx = malloc((size_t)n * sizeof *gx);
    assert_non_null(gx);
    CK(cudaMemcpy(gx, dx, (size_t)n * sizeof *gx, cudaMemcpyDeviceToHost));
    int64_t bad_x = 0;
    for (int64_t i = 0; i < n; i++) bad_x += memcmp(&gx[i], &hx[i], sizeof *gx) != 0;
    OK(lpo_cuda_quantize_blocks(dq, dt, dx, n, 0));
    CK(cudaMemcpy(gq, dq, bytes, cudaMemcpyDeviceToHost));
    int64_t bad = 0, first = -1;
    for (size_t b = 0; b < bytes / bb; b++)
        if (memcmp(gq + b * bb, hq + b * bb, bb)) bad++, first = first < 0 ? (int64_t)b : first;
    printf("device quantizer %-5s %lld values: %lld of %lld generated values and %lld of %lld blocks differ "
           "from "
           "the host's",
           lpo_dtype_name(dt), (long long)n, (long long)bad_x, (long long)n, (long long)bad,
           (long long)(bytes / bb));
    if (first >= 0) {
        printf(" (block %lld: byte", (long long)first);
        for (size_t k = 0; k < bb; k++)
            if (gq[first * bb + k] != hq[first * bb + k])
                printf(" %zu: %02x vs %02x", k, gq[first * bb + k], hq[first * bb + k]);
        printf(")");
    }
    printf("\n");
    CK(cudaFree(dx));
    CK(cudaFree(dq));
    free(hx), free(hq), free(gq), free(gx);
    assert_int_equal(bad_x, 0);
    assert_int_equal(bad, 0);
}

static void test_device_quantize(void **state) {
    (void)state;
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        check_device_quantize(formats[f], 256 * 512, 0x1234567ull, 0.0, 0.108); /* a matrix's values */
        check_device_quantize(formats[f], 256 * 3, 77, 1.0, 0.1);               /* a norm's (all positive) */
    }
}

/* The real SmolLM2-135M-Instruct Q4_1 GGUF: every matrix q4_1 (k 576: rows of 360 bytes, 2-byte copies),
 * the tied embedding q8_0 (held in the compute dtype). Greedy continuations of the fixture's 5 prompts, CUDA
 * bf16 with the blocks on the GPU vs the CPU reference (f32 on the same exact values). */
static void test_smollm2_native(void **state) {
    (void)state;
    char gguf[1024], path[1024];
    snprintf(gguf, sizeof gguf, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", LPO_SOURCE_DIR);
    if (!lpo_path_exists(gguf)) {
        printf("SKIP smollm2 native: %s not fetched (make models)\n", gguf);
        return;
    }
    snprintf(path, sizeof path, "%s/tests/golden/engine/smollm2/fixture.json", LPO_SOURCE_DIR);
    char *text;
    size_t len;
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_path(gguf, &m), LPO_OK);
    enum { G = 32, MUST = 8 };
    lpo_engine *eng[2] = {NULL, NULL};
    const char *be[2] = {"cpu", "cuda"}, *dt[2] = {"f32", "bf16"};
    for (int k = 0; k < 2; k++) {
        lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = be[k], .max_seqs = 1,
                             .max_context = 256,  .dtype = dt[k],   .weights = "native"};
        if (lpo_engine_open(m, &o, &eng[k]) != LPO_OK) fail_msg("%s: %s", be[k], lpo_last_error());
    }
    /* the q4_1 matrices are held in blocks on the GPU */
    const lpo_dtype_lookup *held = lpo_engine_held_dtypes(eng[1]);
    lpo_dtype q = LPO_DT_COUNT;
    assert_true(held->stored_dtype(held->ud, "model.layers.0.mlp.down_proj.weight", &q));
    assert_int_equal(q, LPO_DT_Q4_1);
    const cJSON *s;
    int all = 1;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "samples")) {
        int32_t ids[256], out[2][G];
        size_t n = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(s, "prompt_ids")) ids[n++] = (int32_t)it->valueint;
        for (int k = 0; k < 2; k++) {
            lpo_engine_reset(eng[k], 0);
            lpo_gen_params p = {.max_new_tokens = G, .ignore_eos = 1, .sampling = {0, 0, 1, 1, 0}};
            lpo_gen_seq g = {.prompt = ids, .n_prompt = n};
            assert_int_equal(lpo_generate(eng[k], NULL, &p, &g, 1, NULL, NULL), LPO_OK);
            assert_true(g.n_ids >= (size_t)G);
            memcpy(out[k], g.ids, sizeof out[k]);
            lpo_gen_seq_free(&g);
        }
        int same = 0;
        while (same < G && out[0][same] == out[1][same]) same++;
        printf("smollm2 native q4_1 (cuda bf16 vs cpu f32) '%s': first %d/%d greedy tokens equal\n",
               cJSON_GetObjectItem(s, "prompt")->valuestring, same, G);
        all &= same >= MUST;
    }
    for (int k = 0; k < 2; k++) lpo_engine_close(eng[k]);
    lpo_model_close(m);
    cJSON_Delete(j);
    assert_true(all);
}

int main(void) {
    lpo_test_require_gpu();
    if (!lpo_backend_cuda()) {
        printf("SKIP: this build has no CUDA backend\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_quantize), cmocka_unit_test(test_opcheck_gguf),
        cmocka_unit_test(test_engine_synthetic), cmocka_unit_test(test_kquant_file),
        cmocka_unit_test(test_smollm2_native)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
