/* GPU test (label "gpu"): the CUDA backend (src/engine/cuda/cuda_backend.c) against the CPU reference.
 *   1. the op checker (lpo_opcheck_run) on every op kind the backend supports, in f32, bf16 and f16 (linears
 * of
 *      <= 8 rows by the GEMV kernels, then by cuBLASLt), at the
 *      op shapes of two small architectures (GQA, q/k norm, biases, sliding window, GeGLU, untied head;
 *      head_dim 64 and 128) and of their decode lists;
 *   2. whole steps of a synthetic model: a packed prefill of two sequences then a chained decode step, the
 *      CPU backend (f32) vs the CUDA backend in f32 (logits within 1e-4 of the largest logit, the same
 *      greedy and sampled ids) and in bf16 (within 3e-2; ids reported);
 *   3. engine.pdl (programmatic dependent launch in decode steps) on vs off: bitwise equal logits, same ids;
 *   4. the attention variant: a prefill step and a batched decode step launch the same attention kernel as
 *      run_op of their attention op (traced with lpo's tracer);
 *   5. run_op's staging is ordered before its launch: the lm_head of a 64 MB head (f32), m = 1 and 3, eight
 *      seeds each (staged by a plain cudaMemcpy, the last rows of W could still be in flight when the kernel
 *      read them: outputs of 0 in the last rows, seen on an H100 and an H200).
 * Prints SKIP and exits 77 without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "lpo/backend.h"
#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/opcheck.h"
#include "lpo/probe.h"
#include "lpo/trace.h"
#include "test_support.h"

static const lpo_backend_iface *cuda_iface(void) {
    const lpo_backend_iface *be = lpo_backend_cuda();
    if (!be) fail_msg("this build has no CUDA backend");
    return be;
}

static lpo_model_spec small_spec(int variant) {
    lpo_model_spec s;
    memset(&s, 0, sizeof s);
    s.arch = variant ? LPO_ARCH_QWEN3 : LPO_ARCH_LLAMA;
    snprintf(s.name, sizeof s.name, "cuda-test-%d", variant);
    s.vocab_size = variant ? 1003 : 512;
    s.hidden_size = 256;
    s.n_layers = 2;
    s.n_heads = variant ? 8 : 4;
    s.n_kv_heads = variant ? 1 : 2;
    s.head_dim = variant ? 128 : 64;
    s.intermediate_size = variant ? 200 : 384;
    s.max_positions = 256;
    s.norm_eps = 1e-6f;
    s.rope.theta = 10000.0;
    s.tied_embeddings = !variant;
    s.qk_norm = variant;
    s.qkv_bias = variant;
    s.act = variant ? LPO_ACT_GELU_TANH : LPO_ACT_SILU;
    s.sliding_window = variant ? 7 : 0;
    s.dtype = LPO_DT_BF16;
    s.bos_id = -1;
    return s;
}

/* ---- 1. the op checker ---- */
static void test_opcheck(void **state) {
    (void)state;
    const lpo_backend_iface *be = cuda_iface();
    void *ctx = NULL;
    const lpo_backend_init op_only = {.max_seqs = 1, .dtype = LPO_DT_F32};
    int failures = 0, checked = 0, skipped = 0;
    for (int variant = 0; variant < 2; variant++) {
        const lpo_model_spec s = small_spec(variant);
        lpo_opcheck_cases c;
        assert_int_equal(lpo_opcheck_cases_build(&s, 9 + variant * 4, 20, 3, &c), LPO_OK);
        const lpo_dtype dts[3] = {LPO_DT_F32, LPO_DT_BF16, LPO_DT_F16};
        for (int d = 0; d < 6; d++) { /* each dtype with the GEMV kernels for <= 8 rows, then cuBLASLt only */
            lpo_backend_init in = op_only;
            in.dtype = dts[d % 3];
            in.gemv = d < 3;
            if (be->init(&in, &ctx) != LPO_OK) fail_msg("cuda init: %s", lpo_last_error());
            for (size_t i = 0; i < c.n; i++) {
                if (!be->supports_op(ctx, c.ops[i])) {
                    printf("  %-5s %-28s unsupported\n", lpo_dtype_name(dts[d % 3]), c.ops[i]->name);
                    skipped++;
                    continue;
                }
                lpo_opcheck_result r;
                lpo_status st = lpo_opcheck_run(be, ctx, dts[d % 3], c.ops[i], 7 + i, &r);
                checked++;
                const int bad = st != LPO_OK || !r.passed;
                failures += bad;
                printf("  %-5s %-4s %-28s %-8s %-34s max err %.2e viol %.2f nmse %.2e%s%s%s\n",
                       lpo_dtype_name(dts[d % 3]), in.gemv ? "gemv" : "blas", c.ops[i]->name,
                       r.kind ? r.kind : "", r.shape, r.max_abs_err, r.max_rel_viol, r.nmse,
                       bad ? "  FAIL " : "", bad ? (st ? lpo_last_error() : r.msg) : "", "");
            }
            be->free(ctx);
        }
        lpo_opcheck_cases_free(&c);
    }
    printf("op checker: %d checks, %d failed, %d unsupported\n", checked, failures, skipped);
    assert_int_equal(failures, 0);
}

/* ---- 5. staging order -------------------------------------------------------------------------------- */
static void test_run_op_staging(void **state) {
    (void)state;
    const lpo_backend_iface *be = cuda_iface();
    lpo_model_spec s = small_spec(1);
    s.vocab_size = 16411; /* 16411 x 1024 f32: a 64 MB weight, uploaded in many staging chunks */
    s.hidden_size = 1024;
    s.n_layers = 1;
    lpo_opcheck_cases c;
    assert_int_equal(lpo_opcheck_cases_build(&s, 5, 20, 3, &c), LPO_OK);
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = LPO_DT_F32, .gemv = 1};
    if (be->init(&in, &ctx) != LPO_OK) fail_msg("cuda init: %s", lpo_last_error());
    int checked = 0, failures = 0;
    for (size_t i = 0; i < c.n; i++) {
        if (c.ops[i]->kind != LPO_OP_LM_HEAD) continue;
        for (int seed = 0; seed < 8; seed++) {
            lpo_opcheck_result r;
            const lpo_status st = lpo_opcheck_run(be, ctx, LPO_DT_F32, c.ops[i], 101 + seed, &r);
            checked++;
            if (st != LPO_OK || !r.passed) {
                failures++;
                printf("  lm_head %s seed %d: %s\n", r.shape, seed, st ? lpo_last_error() : r.msg);
            }
        }
    }
    printf("run_op staging: %d lm_head checks of a 64 MB head, %d failed\n", checked, failures);
    be->free(ctx);
    lpo_opcheck_cases_free(&c);
    assert_true(checked >= 16);
    assert_int_equal(failures, 0);
}

/* ---- 2. whole steps ---- */

typedef struct {
    const lpo_backend_iface *be;
    void *ctx;
    lpo_oplist list;
    lpo_plan plan;
} runner;

static void runner_open_exec(runner *r, const lpo_backend_iface *be, const lpo_model *m, lpo_dtype dt,
                             int fusion, lpo_exec_mode exec, int pdl) {
    memset(r, 0, sizeof *r);
    r->be = be;
    const lpo_weight_source ws = lpo_model_weight_source(m);
    const lpo_backend_init in = {
        .spec = lpo_model_get_spec(m),
        .weights = &ws,
        .max_seqs = 4,
        .max_context = 64,
        .max_step_tokens = 32,
        .n_threads = 2,
        .dtype = dt,
        .exec = exec,
        .fusion = fusion,
        .gemv = fusion, /* fused: the GEMV kernels (and gate_up + SwiGLU) as by default */
        .pdl = pdl};
    if (be->init(&in, &r->ctx) != LPO_OK) fail_msg("%s init: %s", be->name, lpo_last_error());
}

static void runner_open_opts(runner *r, const lpo_backend_iface *be, const lpo_model *m, lpo_dtype dt,
                             int fusion) {
    runner_open_exec(r, be, m, dt, fusion, LPO_EXEC_EAGER, 0);
}

static void runner_open(runner *r, const lpo_backend_iface *be, const lpo_model *m, lpo_dtype dt) {
    runner_open_opts(r, be, m, dt, 1);
}

/* One step of n sequences (slots 0..n-1, n_past, n_new, host tokens or chained): logits [n, V] and ids. */
static void runner_step(runner *r, const lpo_model_spec *s, int n, const int64_t *past, const int64_t *nnew,
                        const int32_t *tokens, float *logits, int32_t *ids) {
    const lpo_step step = {n, past, nnew, 0, 1};
    lpo_oplist_opts o = {LPO_DT_F32, LPO_DT_F32, NULL, NULL, 0};
    if (lpo_oplist_build(s, &step, &o, &r->list) != LPO_OK) fail_msg("oplist: %s", lpo_last_error());
    if (r->be->plan) {
        if (r->be->plan(r->ctx, &r->list, &r->plan) != LPO_OK) fail_msg("plan: %s", lpo_last_error());
    } else {
        assert_int_equal(lpo_plan_unfused(&r->list, &r->plan), LPO_OK);
    }
    int slots[4], tok_slot[64];
    int64_t tok_pos[64], T = 0;
    for (int i = 0; i < n; i++) {
        slots[i] = i;
        for (int64_t j = 0; j < nnew[i]; j++, T++) tok_slot[T] = i, tok_pos[T] = past[i] + j;
    }
    int32_t ts[64];
    for (int64_t t = 0; t < T; t++) ts[t] = tok_slot[t];
    const lpo_step_data d = {n, slots, past, nnew, tokens, ts, tok_pos, NULL, 0, NULL, NULL};
    lpo_step_out out = {logits, ids};
    if (r->be->forward(r->ctx, &r->list, &r->plan, &d, &out) != LPO_OK)
        fail_msg("%s forward: %s", r->be->name, lpo_last_error());
}

static void runner_close(runner *r) {
    r->be->free(r->ctx);
    lpo_oplist_free(&r->list);
    lpo_plan_free(&r->plan);
}

/* max |a - b| over the rows, relative to the largest |b| */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double md = 0, mb = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = d; /* NaN propagates as a failure */
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
    }
    return mb > 0 ? md / mb : md;
}

/* ---- 2a. op by op: both backends unfused, every op's output buffer compared ---- */
typedef struct {
    const lpo_backend_iface *be;
    void *ctx;
    const lpo_model_spec *spec;
    int compare;       /* 0: record (CPU), 1: compare (CUDA) */
    float *saved[128]; /* per op: its first output rows, as the CPU wrote them */
    double worst;
    const char *worst_op;
    int n_bad;
} op_trace;

static void on_op(void *ud, const lpo_oplist *l, const lpo_plan *p, size_t g, int end) {
    op_trace *t = ud;
    const size_t i = p->groups[g].first + p->groups[g].count - 1; /* the group's last op */
    const lpo_op *op = &l->ops[i];
    const lpo_buf b = op->out[0].buf;
    const int64_t w = lpo_buf_width(t->spec, b), rows = op->out[0].shape[0];
    if (!end || i >= 128 || w == 0 || b == LPO_BUF_LOGITS) return;
    float *x = malloc((size_t)(rows * w) * sizeof(float));
    if (!x || t->be->read_activation(t->ctx, b, 0, rows, x) != LPO_OK) {
        free(x);
        return;
    }
    if (!t->compare) {
        free(t->saved[i]);
        t->saved[i] = x;
        return;
    }
    const double e = t->saved[i] ? rel_diff(x, t->saved[i], rows * w) : 0;
    if (!(e <= 1e-4)) {
        if (t->n_bad++ < 6)
            printf("    op %zu %-28s (group '%s', %s, %lld rows) differs: %.2e of the max\n", i, op->name,
                   p->groups[g].name, lpo_buf_name(b), (long long)rows, e);
    }
    if (!(e <= t->worst)) t->worst = e, t->worst_op = op->name;
    free(x);
}

/* f32: the CPU unfused, the CUDA backend unfused then fused; after every group of the CUDA plan its last
 * op's output is compared with the CPU's, and the logits of every step: the first op that leaves 1e-4 names
 * the kernel, fusion or wiring at fault (a whole-step mismatch alone says only that something is wrong). */
static void test_steps_by_op(void **state) {
    (void)state;
    int bad = 0;
    for (int variant = 0; variant < 2; variant++)
        for (int fusion = 0; fusion < 2; fusion++) {
            const lpo_model_spec s = small_spec(variant);
            const int64_t V = s.vocab_size;
            lpo_model *m = NULL;
            if (lpo_model_open_synthetic(&s, 1234 + variant, &m) != LPO_OK)
                fail_msg("model: %s", lpo_last_error());
            int32_t prompt[14];
            for (int i = 0; i < 14; i++) prompt[i] = (int32_t)((i * 37 + 11) % V);
            const int64_t past0[2] = {0, 0}, new0[2] = {5, 9}, past1[2] = {5, 9}, new1[2] = {1, 1};
            float *lg[2] = {malloc((size_t)(2 * V) * sizeof(float)), malloc((size_t)(2 * V) * sizeof(float))};
            int32_t ids[2];
            op_trace t;
            memset(&t, 0, sizeof t);
            t.spec = &s;
            runner r[2];
            for (int k = 0; k < 2; k++) {
                runner_open_opts(&r[k], k ? cuda_iface() : lpo_backend_cpu(), m, LPO_DT_F32, k ? fusion : 0);
                r[k].be->set_group_callback(r[k].ctx, on_op, &t);
            }
            for (int step = 0; step < 2; step++) {
                for (int k = 0; k < 2; k++) {
                    t.be = r[k].be;
                    t.ctx = r[k].ctx;
                    t.compare = k;
                    t.worst = 0;
                    t.n_bad = 0;
                    runner_step(&r[k], &s, 2, step ? past1 : past0, step ? new1 : new0, prompt, lg[k], ids);
                }
                const double el = rel_diff(lg[1], lg[0], 2 * V);
                printf(
                    "  %s fusion %d step %d: worst op %.2e of the max (%s), %d ops over 1e-4; logits %.2e\n",
                    s.name, fusion, step, t.worst, t.worst_op ? t.worst_op : "-", t.n_bad, el);
                bad += t.n_bad + !(el <= 1e-4);
            }
            for (int k = 0; k < 2; k++) runner_close(&r[k]), free(lg[k]);
            for (int i = 0; i < 128; i++) free(t.saved[i]);
            lpo_model_close(m);
        }
    assert_int_equal(bad, 0);
}

static void test_steps(void **state) {
    (void)state;
    for (int variant = 0; variant < 2; variant++) {
        const lpo_model_spec s = small_spec(variant);
        lpo_model *m = NULL;
        if (lpo_model_open_synthetic(&s, 1234 + variant, &m) != LPO_OK)
            fail_msg("model: %s", lpo_last_error());
        const int64_t V = s.vocab_size;
        const lpo_dtype dts[2] = {LPO_DT_F32, LPO_DT_BF16};
        runner cpu;
        runner_open(&cpu, lpo_backend_cpu(), m, LPO_DT_F32);
        float *ref = malloc((size_t)(2 * V) * sizeof(float)), *got = malloc((size_t)(2 * V) * sizeof(float));
        float *ref2 = malloc((size_t)(2 * V) * sizeof(float));
        int32_t ref_ids[2], ref_ids2[2], ids[2];
        int32_t prompt[14];
        for (int i = 0; i < 14; i++) prompt[i] = (int32_t)((i * 37 + 11) % V);
        const int64_t past0[2] = {0, 0}, new0[2] = {5, 9}, past1[2] = {5, 9}, new1[2] = {1, 1};
        const lpo_sampling samp = {0.8, 20, 0.9, 1.2, 99};
        cpu.be->set_sampling(cpu.ctx, 1, &samp, 5); /* slot 0 greedy, slot 1 sampled */
        runner_step(&cpu, &s, 2, past0, new0, prompt, ref, ref_ids);
        runner_step(&cpu, &s, 2, past1, new1, NULL, ref2, ref_ids2);
        for (int d = 0; d < 2; d++) {
            runner gpu;
            runner_open(&gpu, cuda_iface(), m, dts[d]);
            gpu.be->set_sampling(gpu.ctx, 1, &samp, 5);
            runner_step(&gpu, &s, 2, past0, new0, prompt, got, ids);
            const double e1 = rel_diff(got, ref, 2 * V);
            const int same1 = ids[0] == ref_ids[0] && ids[1] == ref_ids[1];
            runner_step(&gpu, &s, 2, past1, new1, NULL, got, ids); /* chained: tokens from the last draw */
            const double e2 = rel_diff(got, ref2, 2 * V);
            const int same2 = ids[0] == ref_ids2[0] && ids[1] == ref_ids2[1];
            const double tol = dts[d] == LPO_DT_F32 ? 1e-4 : 3e-2;
            printf("  %s %s: prefill logits max diff %.2e of the max, ids %s; chained decode %.2e, ids %s\n",
                   s.name, lpo_dtype_name(dts[d % 3]), e1, same1 ? "same" : "DIFFER", e2,
                   same2 ? "same" : "DIFFER");
            assert_true(e1 <= tol && e2 <= tol);
            if (dts[d] == LPO_DT_F32) assert_true(same1 && same2);
            runner_close(&gpu);
        }
        runner_close(&cpu);
        free(ref);
        free(ref2);
        free(got);
        lpo_model_close(m);
    }
}

/* ---- 3. PDL on and off: the same kernels, so the same bits ---------------------------------------------
 * engine.pdl launches the decode step's kernels with programmatic stream serialization (captured as
 * programmatic edges in the graph): a kernel starts while the one before finishes and must wait before it
 * reads that kernel's output. A prefill then 6 chained decode steps of 2 sequences (slot 1 sampled: the
 * sampler's state too), every other step returning only ids (SAMPLE inside the graph) or logits and ids
 * (SAMPLE after the replay); pdl=1 must give the pdl=0 logits bit for bit and the same ids (exec=graph:
 * graphs captured with programmatic edges, then replayed), f32 and bf16, both architectures. */
static void test_steps_pdl(void **state) {
    (void)state;
    int bad = 0;
    for (int variant = 0; variant < 2; variant++) {
        const lpo_model_spec s = small_spec(variant);
        lpo_model *m = NULL;
        if (lpo_model_open_synthetic(&s, 4321 + variant, &m) != LPO_OK)
            fail_msg("model: %s", lpo_last_error());
        const int64_t V = s.vocab_size;
        int32_t prompt[14];
        for (int i = 0; i < 14; i++) prompt[i] = (int32_t)((i * 41 + 3) % V);
        const lpo_sampling samp = {0.8, 20, 0.9, 1.2, 7};
        for (int d = 0; d < 2; d++) {
            const lpo_dtype dt = d ? LPO_DT_BF16 : LPO_DT_F32;
            const lpo_exec_mode exec = LPO_EXEC_GRAPH;
            runner r[2]; /* pdl off, on */
            float *lg[2] = {malloc((size_t)(2 * V) * sizeof(float)), malloc((size_t)(2 * V) * sizeof(float))};
            int32_t ids[2][2];
            int same_bits = 1, same_ids = 1;
            for (int k = 0; k < 2; k++) {
                runner_open_exec(&r[k], cuda_iface(), m, dt, 1, exec, k);
                r[k].be->set_sampling(r[k].ctx, 1, &samp, 11);
            }
            for (int step = 0; step < 7; step++) {
                const int64_t past[2] = {step ? 4 + step : 0, step ? 8 + step : 0},
                              nnew[2] = {step ? 1 : 5, step ? 1 : 9};
                const int logits = step % 2 == 0; /* odd steps: ids only */
                for (int k = 0; k < 2; k++) {
                    memset(lg[k], 0, (size_t)(2 * V) * sizeof(float));
                    runner_step(&r[k], &s, 2, past, nnew, step ? NULL : prompt, logits ? lg[k] : NULL,
                                ids[k]);
                }
                same_bits &= !memcmp(lg[0], lg[1], (size_t)(2 * V) * sizeof(float));
                same_ids &= ids[0][0] == ids[1][0] && ids[0][1] == ids[1][1];
            }
            printf("  %s %s exec=%s: pdl on vs off over 7 steps: logits %s, ids %s\n", s.name,
                   lpo_dtype_name(dt), lpo_exec_mode_name(exec), same_bits ? "bitwise equal" : "DIFFER",
                   same_ids ? "equal" : "DIFFER");
            bad += !same_bits + !same_ids;
            for (int k = 0; k < 2; k++) runner_close(&r[k]), free(lg[k]);
        }
        lpo_model_close(m);
    }
    assert_int_equal(bad, 0);
}

/* ---- 4. the attention variant: a step and run_op launch the same kernel --------------------------------
 * A step of 4 packed prompts, then a batched decode step (4 sequences, one token each), bf16, eager and
 * unfused, traced with lpo's tracer; after each step, run_op on that step's attention op with data laid out
 * like the step (as the op checker and kbench's model mode run it). The step's attention group and the
 * run_op range must launch the same attention kernel: prefill_kernel for the prompts, decode_kernel (never
 * prefill_kernel) for the batched decode step. */
static char *trace_ranges(const char *dir) {
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_table *rt = NULL;
    assert_int_equal(lpo_trace_range_table(t, &rt), LPO_OK);
    lpo_strbuf csv = {0};
    lpo_table_write_csv(rt, &csv);
    lpo_table_free(rt);
    lpo_trace_free(t);
    return csv.buf;
}

/* 1 when the ranges.csv row of range `name` mentions kernel `kernel` among its top kernels */
static int range_runs(const char *csv, const char *name, const char *kernel) {
    const size_t n = strlen(name);
    for (const char *line = csv; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, name, n) || line[n] != ',') continue;
        const char *nl = strchr(line, '\n'), *hit = strstr(line, kernel);
        return hit && (!nl || hit < nl);
    }
    fail_msg("no range '%s' in the trace", name);
    return 0;
}

static void test_attention_variant(void **state) {
    (void)state;
    const lpo_model_spec s = small_spec(0);
    lpo_model *m = NULL;
    if (lpo_model_open_synthetic(&s, 77, &m) != LPO_OK) fail_msg("model: %s", lpo_last_error());
    runner r;
    runner_open_exec(&r, cuda_iface(), m, LPO_DT_BF16, 0, LPO_EXEC_EAGER, 0);
    const char *tmp = lpo_test_tmpdir();
    int32_t prompt[24];
    for (int i = 0; i < 24; i++) prompt[i] = (int32_t)((i * 29 + 5) % s.vocab_size);
    const int64_t past0[4] = {0, 0, 0, 0}, new0[4] = {5, 9, 3, 7}, past1[4] = {5, 9, 3, 7},
                  new1[4] = {1, 1, 1, 1};
    float *logits = malloc((size_t)(4 * s.vocab_size) * sizeof(float));
    int32_t ids[4];
    for (int decode = 0; decode < 2; decode++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/variant-%d", tmp, decode);
        assert_int_equal(lpo_mkdirs(dir), LPO_OK);
        const lpo_probe_options o = {.dir = dir};
        if (lpo_probe_start(&o) != LPO_OK) {
            printf("SKIP: attention variant: no tracer (%s)\n", lpo_last_error());
            break;
        }
        const int64_t *past = decode ? past1 : past0, *nn = decode ? new1 : new0;
        runner_step(&r, &s, 4, past, nn, decode ? NULL : prompt, logits, ids);
        const lpo_op *att = &r.list.ops[lpo_oplist_find(&r.list, LPO_ROLE_ATTN, 0)];
        assert_int_equal(att->attn_variant, decode ? LPO_ATTN_DECODE : LPO_ATTN_PREFILL);
        const lpo_step step = {4, past, nn, 0, 1};
        lpo_op_data *data = NULL;
        if (lpo_op_data_new(att, 5, &step, &data) != LPO_OK) fail_msg("op data: %s", lpo_last_error());
        lpo_op_io *io = lpo_op_data_io(data);
        double ms[20];
        io->repeat = 20; /* timed as kbench times it: the kernels outweigh the staging copies in the range */
        io->ms = ms;
        lpo_probe_push("run_op.attention");
        if (r.be->run_op(r.ctx, att, io) != LPO_OK) fail_msg("run_op: %s", lpo_last_error());
        lpo_probe_pop();
        lpo_op_data_free(data);
        assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
        assert_int_equal(lpo_probe_stop(), LPO_OK);
        char *csv = trace_ranges(dir);
        const char *want = decode ? "decode_kernel" : "prefill_kernel";
        const int step_ok = range_runs(csv, "layers.0.attn.sdpa", want),
                  op_ok = range_runs(csv, "run_op.attention", want);
        const int step_prefill = range_runs(csv, "layers.0.attn.sdpa", "prefill_kernel"),
                  op_prefill = range_runs(csv, "run_op.attention", "prefill_kernel");
        printf("  %s step (%s): the step runs %s: %s; run_op: %s\n", decode ? "batched decode" : "prefill",
               lpo_attn_variant_name(att->attn_variant), want, step_ok ? "yes" : "NO", op_ok ? "yes" : "NO");
        assert_true(step_ok && op_ok);
        assert_int_equal(step_prefill, op_prefill);
        free(csv);
    }
    free(logits);
    runner_close(&r);
    lpo_model_close(m);
}

int main(void) {
    lpo_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opcheck),
        cmocka_unit_test(test_steps_by_op),
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_steps_pdl),
        cmocka_unit_test(test_attention_variant),
        cmocka_unit_test(test_run_op_staging),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
