/* DeepSeek-OCR-2's vision encoder on the CUDA backend (label gpu; SKIP without a GPU or without the backend):
 *   - the op checker, CUDA vs the CPU reference on random data, on every op of the vision lists (the first of
 *     each kind and role) of four specs: the published sizes (bf16; the 768 view: its CPU reference takes
 *     seconds), a middle one with heads of 64 on grids the windows do not divide (the tensor-core attention
 *     with padded odd windows), the same with heads of 128 and even windows (bf16 / f16: the tensor-core
 *     kernel's other instance) and the unit tests' tiny odd one (heads of 8 and 4: the warp kernels), f32 /
 *     bf16 (f16 too where small);
 *   - the encoder on the tiny random DeepSeek-OCR-2 (tests/golden/vision/tiny-ocr2) with its weights held on
 *     the GPU: the landscape page's embeddings vs HF's and vs the CPU reference, f32 within 1e-4 of the
 *     largest value, bf16 within 5e-2, as a page runs (linear + residual add fused) and op by op with the
 *     per-op callback (device times, every output on the host);
 *   - the encoder at the published sizes with synthetic bf16 weights: time per 1024 view and 768 tile, a page
 *     of 6 tiles, TFLOP/s, and the device time by op kind (the ops unfused and back to back, events between
 *     them: launch gaps included; docs/perf-notes.md). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lpo/core.h"
#include "lpo/image.h"
#include "lpo/model.h"
#include "lpo/opcheck.h"
#include "lpo/vision.h"
#include "lpo/vision_encode.h"
#include "test_engine_support.h"
#include "test_ocr2_fixture.h"
#include "test_support.h"

static int failures;

/* heads of 64 on grids that the windows do not divide: 32 x 32 (1024) and 24 x 24 (768) patches, windows of 7
 * (5 and 4 windows per side, padded), global attention in block 1; encoder heads of 64 (2 query, 1 KV) */
static lpo_vision_spec mid_spec(void) {
    lpo_vision_spec v;
    lpo_vision_spec_default(&v);
    v.sam_hidden = 128, v.sam_layers = 2, v.sam_heads = 2, v.sam_mlp = 200;
    v.image_size = 1024, v.patch_size = 32, v.window = 7, v.global_layers = 1u << 1;
    v.neck_channels = 64, v.down_channels[0] = 96, v.down_channels[1] = 128;
    v.enc_hidden = 128, v.enc_layers = 2, v.enc_heads = 2, v.enc_kv_heads = 1, v.enc_head_dim = 64;
    v.enc_intermediate = 160, v.queries_768 = 36, v.queries_1024 = 64, v.text_hidden = 96;
    v.dtype = LPO_DT_F32;
    return v;
}

/* the tensor-core attentions at heads of 128: one SAM head of 128 with even windows of 6 (6 per side at
 * 1024, padded; 4 at 768), one encoder head of 128 */
static lpo_vision_spec hd128_spec(void) {
    lpo_vision_spec v = mid_spec();
    v.sam_heads = 1, v.window = 6;
    v.enc_heads = 1, v.enc_kv_heads = 1, v.enc_head_dim = 128;
    return v;
}

static void check_list(const char *name, const lpo_vision_spec *vs, int64_t size, lpo_dtype dt) {
    const lpo_backend_iface *be = lpo_backend_cuda();
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = dt};
    if (be->init(&in, &ctx) != LPO_OK) fail_msg("cuda op-only context: %s", lpo_last_error());
    lpo_oplist l = {0};
    assert_int_equal(lpo_vision_oplist_build(vs, size, NULL, &l), LPO_OK);
    static int done[LPO_OP_KIND_COUNT][LPO_ROLE_COUNT][2];
    memset(done, 0, sizeof done);
    for (size_t i = 0; i < l.n_ops; i++) {
        const lpo_op *op = &l.ops[i];
        /* the first op of each kind and role; both attentions of SAM (windowed and global) */
        const int global = op->kind == LPO_OP_ATTN_RELPOS && op->window == 0;
        if (done[op->kind][op->role][global]++) continue;
        lpo_opcheck_result r;
        const lpo_status st = lpo_opcheck_run(be, ctx, dt, op, 101 + i, &r);
        printf("%-9s %4lld %-5s %-24s %-12s %-58s max|err| %-9.3g nmse %-9.3g %s%s\n", name, (long long)size,
               lpo_dtype_name(dt), op->name, r.kind, r.shape, r.max_abs_err, r.nmse,
               st         ? "ERROR "
               : r.passed ? "ok"
                          : "FAIL ",
               st ? lpo_last_error() : r.msg);
        if (st || !r.passed) failures++;
    }
    lpo_oplist_free(&l);
    be->free(ctx);
}

static void test_opcheck(void **state) {
    (void)state;
    lpo_vision_spec pub, mid = mid_spec(), wide = hd128_spec(), tiny = test_vision_spec();
    lpo_vision_spec_default(&pub);
    if (!getenv("LPO_TEST_QUICK"))
        check_list("published", &pub, 768, LPO_DT_BF16); /* not under a sanitizer */
    const lpo_dtype dts[] = {LPO_DT_F32, LPO_DT_BF16, LPO_DT_F16};
    for (int d = 0; d < 3; d++)
        for (int64_t size = 768; size <= 1024; size += 256) {
            check_list("mid", &mid, size, dts[d]);
            if (dts[d] != LPO_DT_F32) check_list("hd128", &wide, size, dts[d]);
            check_list("tiny", &tiny, size, dts[d]);
        }
    /* refusals: a conv weight without its HF shape, a window table of no rows */
    const lpo_backend_iface *be = lpo_backend_cuda();
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = LPO_DT_BF16};
    assert_int_equal(be->init(&in, &ctx), LPO_OK);
    lpo_oplist l = {0};
    assert_int_equal(lpo_vision_oplist_build(&tiny, 768, NULL, &l), LPO_OK);
    for (size_t i = 0; i < l.n_ops; i++) {
        lpo_op op = l.ops[i];
        assert_true(be->supports_op(ctx, &op));
        if (op.kind == LPO_OP_CONV2D) {
            op.m += 1; /* not the grid's output pixels */
            assert_false(be->supports_op(ctx, &op));
        }
        if (op.kind == LPO_OP_ATTN_PREFIX) {
            op.prefix = op.m + 1;
            assert_false(be->supports_op(ctx, &op));
        }
    }
    lpo_oplist_free(&l);
    be->free(ctx);
    assert_int_equal(failures, 0);
}

/* ---- the tiny DeepSeek-OCR-2 fixture ---- */
typedef struct {
    int n_ops, n_bad;
    double ms;
} counted;
static void count_op(void *ud, const lpo_op *op, const float *out, double ms) {
    counted *c = ud;
    const int64_t n = op->out[0].shape[0] * (op->out[0].ndim > 1 ? op->out[0].shape[1] : 1);
    for (int64_t i = 0; i < n; i++) c->n_bad += !isfinite(out[i]);
    c->n_ops++;
    c->ms += ms;
}

static void test_tiny_ocr2(void **state) {
    (void)state;
    lpo_vision_spec vs;
    ocr2_vision_spec(&vs);
    lpo_model *m;
    assert_int_equal(lpo_model_open_tensors(OCR2_DIR "tiny-ocr2", &m), LPO_OK);
    const lpo_weight_source ws = lpo_model_weight_source(m);
    lpo_image im;
    lpo_ocr_views v;
    ocr2_page(&im, &v);
    ocr2_fixture f;
    ocr2_fixture_load(&f);
    int64_t rows, cols;
    const float *hf = ocr2_ref(&f, "features", &rows, &cols);
    assert_int_equal(rows, v.n_image_tokens);
    assert_int_equal(cols, vs.text_hidden);
    const int64_t n = rows * cols;
    float *cpu = ocr2_encode_page(&vs, &ws, &v, lpo_backend_cpu(), LPO_DT_F32, NULL, NULL);
    /* f32 and bf16 as a page runs (linear + residual add fused), then f32 op by op with the callback */
    const lpo_dtype dts[] = {LPO_DT_F32, LPO_DT_BF16, LPO_DT_F32};
    for (int d = 0; d < 3; d++) {
        counted cnt = {0, 0, 0};
        float *gpu =
            ocr2_encode_page(&vs, &ws, &v, lpo_backend_cuda(), dts[d], d == 2 ? count_op : NULL, &cnt);
        const double e_hf = ocr2_rel_err(gpu, hf, n), e_cpu = ocr2_rel_err(gpu, cpu, n);
        const double bound = dts[d] == LPO_DT_F32 ? 1e-4 : 5e-2;
        printf("tiny-ocr2 cuda %-4s%s: %lld x %lld embeddings, max|diff| / max|ref| vs HF %.3g, vs CPU %.3g "
               "(bound %.0e)\n",
               lpo_dtype_name(dts[d]), d == 2 ? " op by op" : "", (long long)rows, (long long)cols, e_hf,
               e_cpu, bound);
        if (e_hf > bound || e_cpu > bound) fail_msg("%s embeddings out of bounds", lpo_dtype_name(dts[d]));
        if (d == 2) { /* 3 views, each its list's ops, every output on the host and finite */
            const lpo_vision_spec *s = &vs;
            lpo_oplist a = {0}, b = {0};
            assert_int_equal(lpo_vision_oplist_build(s, 768, NULL, &a), LPO_OK);
            assert_int_equal(lpo_vision_oplist_build(s, 1024, NULL, &b), LPO_OK);
            printf("callback: %d ops, %.3f ms of device time\n", cnt.n_ops, cnt.ms);
            assert_int_equal(cnt.n_ops, (int)(2 * a.n_ops + b.n_ops));
            assert_int_equal(cnt.n_bad, 0);
            assert_true(cnt.ms > 0);
            lpo_oplist_free(&a);
            lpo_oplist_free(&b);
        }
        free(gpu);
    }
    free(cpu);
    ocr2_fixture_free(&f);
    lpo_ocr_views_free(&v);
    lpo_image_free(&im);
    lpo_model_close(m);
}

/* ---- published sizes, synthetic weights ---- */
typedef struct {
    const lpo_oplist *lists;
    int n;
    const lpo_vision_spec *vs;
} synth_src;

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* a synthetic bf16 view of any weight the lists name: matrices of scale 1/sqrt(fan in), norm scales around
 * 1, vectors and tables small */
static lpo_status synth_view(void *ud, const char *name, lpo_weight_view *out) {
    const synth_src *s = ud;
    if (!strcmp(name, LPO_VISION_SEP)) {
        memset(out, 0, sizeof *out);
        out->name = name;
        out->dtype = LPO_DT_BF16;
        out->n_dims = 1;
        out->shape[0] = s->vs->text_hidden;
        out->numel = (uint64_t)s->vs->text_hidden;
        out->nbytes = 2 * out->numel;
        out->synth_key = fnv1a(name);
        out->synth_amp = 0.1;
        return LPO_OK;
    }
    for (int l = 0; l < s->n; l++)
        for (size_t i = 0; i < s->lists[l].n_weights; i++) {
            const lpo_op_tensor *t = &s->lists[l].weights[i];
            if (strcmp(t->name, name)) continue;
            memset(out, 0, sizeof *out);
            out->name = name;
            out->dtype = LPO_DT_BF16;
            out->n_dims = t->ndim;
            out->numel = 1;
            for (int d = 0; d < t->ndim; d++)
                out->shape[d] = t->shape[d], out->numel *= (uint64_t)t->shape[d];
            out->nbytes = 2 * out->numel;
            out->synth_key = fnv1a(name);
            const int norm = strstr(name, "norm") || strstr(name, "neck.1") || strstr(name, "neck.3");
            const int vec = t->ndim == 1 || strstr(name, "rel_pos") || strstr(name, "pos_embed");
            out->synth_center = norm && t->ndim == 1 && !strstr(name, "bias") ? 1.0 : 0.0;
            out->synth_amp = norm                     ? 0.1
                             : strstr(name, "query_") ? 1.0
                             : vec                    ? 0.02
                                   : sqrt(3.0 / (double)(out->numel / (uint64_t)t->shape[0]));
            return LPO_OK;
        }
    return lpo_errorf(LPO_E_NOT_FOUND, "no synthetic tensor '%s'", name);
}

typedef struct {
    double ms[LPO_OP_KIND_COUNT], flops[LPO_OP_KIND_COUNT];
    double glob_ms, glob_flops; /* SAM's global attention (of attn_relpos) */
} by_kind;
static void kind_time(void *ud, const lpo_op *op, const float *out, double ms) {
    by_kind *k = ud;
    (void)out;
    k->ms[op->kind] += ms;
    k->flops[op->kind] += lpo_op_flops(op);
    if (op->kind == LPO_OP_ATTN_RELPOS && op->window == 0)
        k->glob_ms += ms, k->glob_flops += lpo_op_flops(op);
}

static void test_published_timing(void **state) {
    (void)state;
    lpo_vision_spec vs;
    lpo_vision_spec_default(&vs);
    vs.dtype = LPO_DT_BF16;
    lpo_oplist lists[2] = {{0}, {0}};
    assert_int_equal(lpo_vision_oplist_build(&vs, 1024, NULL, &lists[0]), LPO_OK);
    assert_int_equal(lpo_vision_oplist_build(&vs, 768, NULL, &lists[1]), LPO_OK);
    const synth_src src = {lists, 2, &vs};
    const lpo_weight_source ws = {(void *)&src, synth_view};
    const lpo_backend_iface *be = lpo_backend_cuda();
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = LPO_DT_BF16};
    assert_int_equal(be->init(&in, &ctx), LPO_OK);
    lpo_vision_encoder *e;
    if (lpo_vision_encoder_open(&vs, &ws, be, ctx, 0, &e) != LPO_OK) fail_msg("open: %s", lpo_last_error());
    const int64_t sizes[2] = {1024, 768};
    double view_ms[2], view_flops[2], dev_ms[2];
    for (int s = 0; s < 2; s++) {
        const int64_t S = sizes[s], q = lpo_vision_queries(&vs, S);
        float *pix = malloc((size_t)(3 * S * S) * sizeof(float)),
              *emb = malloc((size_t)(q * vs.text_hidden) * 4);
        assert_non_null(pix);
        assert_non_null(emb);
        for (int64_t i = 0; i < 3 * S * S; i++) pix[i] = (float)((i * 7919 % 2001) - 1000) / 1000.0f;
        const lpo_oplist *l = lpo_vision_encoder_list(e, S);
        double fl = 0;
        for (size_t i = 0; i < l->n_ops; i++) fl += lpo_op_flops(&l->ops[i]);
        assert_int_equal(lpo_vision_encode_view(e, pix, S, emb), LPO_OK); /* warm-up (GEMM heuristics) */
        const int reps = 5;
        double best = INFINITY;
        for (int r = 0; r < reps; r++) {
            const uint64_t t0 = lpo_now_ns();
            assert_int_equal(lpo_vision_encode_view(e, pix, S, emb), LPO_OK);
            const double ms = (double)(lpo_now_ns() - t0) / 1e6;
            if (ms < best) best = ms;
        }
        for (int64_t i = 0; i < q * vs.text_hidden; i++)
            if (!isfinite(emb[i]))
                fail_msg("view %lld: embedding %lld is not finite", (long long)S, (long long)i);
        view_ms[s] = best;
        view_flops[s] = fl;
        printf("published bf16 view %4lld: %8.3f ms (host to host, best of %d), %.3f TFLOP, %.1f TFLOP/s\n",
               (long long)S, best, reps, fl / 1e12, fl / (best * 1e-3) / 1e12);
        by_kind k;
        lpo_vision_encoder_set_callback(e, kind_time, &k);
        for (int r = 0; r < 2; r++) { /* the first: the unfused GEMM shapes' heuristics, not timed */
            memset(&k, 0, sizeof k);
            assert_int_equal(lpo_vision_encode_view(e, pix, S, emb), LPO_OK);
        }
        lpo_vision_encoder_set_callback(e, NULL, NULL);
        double tot = 0;
        for (int kk = 0; kk < LPO_OP_KIND_COUNT; kk++) tot += k.ms[kk];
        for (int kk = 0; kk < LPO_OP_KIND_COUNT; kk++) {
            if (k.ms[kk] <= 0) continue;
            printf("  %-12s %8.3f ms device (%4.1f%%), %9.2f GFLOP, %6.1f TFLOP/s\n",
                   lpo_op_kind_name((lpo_op_kind)kk), k.ms[kk], 100 * k.ms[kk] / tot, k.flops[kk] / 1e9,
                   k.flops[kk] / (k.ms[kk] * 1e-3) / 1e12);
            if (kk == LPO_OP_ATTN_RELPOS && k.glob_ms > 0) /* global and windowed layers apart */
                for (int g = 1; g >= 0; g--) {
                    const double part_ms = g ? k.glob_ms : k.ms[kk] - k.glob_ms,
                                 part_fl = g ? k.glob_flops : k.flops[kk] - k.glob_flops;
                    printf("    %-10s %8.3f ms device, %9.2f GFLOP, %6.1f TFLOP/s\n",
                           g ? "global" : "windowed", part_ms, part_fl / 1e9,
                           part_ms > 0 ? part_fl / (part_ms * 1e-3) / 1e12 : 0.0);
                }
        }
        /* the rest of host to host: the pixels' upload (f32, pageable), their conversion, the embeddings'
         * download, less what the linear + add fusion saves */
        printf("  sum of op device times %.3f ms (unfused); host to host %+.3f ms beside it\n", tot,
               best - tot);
        dev_ms[s] = tot;
        free(pix);
        free(emb);
    }
    const double page_ms = view_ms[0] + 6 * view_ms[1], page_fl = view_flops[0] + 6 * view_flops[1];
    printf("published bf16 page (1024 view + 6 tiles): %.3f ms, %.3f TFLOP, %.1f TFLOP/s\n", page_ms,
           page_fl / 1e12, page_fl / (page_ms * 1e-3) / 1e12);
    const double page_dev = dev_ms[0] + 6 * dev_ms[1];
    printf("published bf16 page, op device times only: %.3f ms, %.1f TFLOP/s\n", page_dev,
           page_fl / (page_dev * 1e-3) / 1e12);
    lpo_vision_encoder_close(e);
    be->free(ctx);
    lpo_oplist_free(&lists[0]);
    lpo_oplist_free(&lists[1]);
}

int main(void) {
    lpo_test_require_gpu();
    if (!lpo_backend_cuda()) {
        printf("SKIP: this build has no CUDA backend\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_opcheck), cmocka_unit_test(test_tiny_ocr2),
                                       cmocka_unit_test(test_published_timing)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
