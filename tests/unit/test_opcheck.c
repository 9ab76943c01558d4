/* The op checker on the CPU backend: every op kind of several architectures, at model shapes and odd shapes,
 * against the reference (identical code: zero error expected); the checker itself catches unwritten and
 * wrong outputs (a deliberately broken backend); its random data laid out like a real step, timed hot and
 * cold; and the CPU kernels against naive double-precision loops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu_kernels.h"
#include "lpo/opcheck.h"
#include "test_engine_support.h"

static void *cpu_ctx(void) {
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = LPO_DT_F32, .n_threads = 1};
    assert_int_equal(lpo_backend_cpu()->init(&in, &ctx), LPO_OK);
    return ctx;
}

/* Every kind of the spec's prefill (T tokens) and decode (batch B at context L) lists passes, bit-exact. */
static int check_spec(const lpo_model_spec *s, int64_t T, int64_t L, int B,
                      int kinds_seen[LPO_OP_KIND_COUNT]) {
    lpo_opcheck_cases c;
    assert_int_equal(lpo_opcheck_cases_build(s, T, L, B, &c), LPO_OK);
    const lpo_backend_iface *cpu = lpo_backend_cpu();
    void *ctx = cpu_ctx();
    for (size_t i = 0; i < c.n; i++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            lpo_opcheck_result r;
            lpo_status st = lpo_opcheck_run(cpu, ctx, LPO_DT_F32, c.ops[i], seed, &r);
            if (st != LPO_OK || !r.passed || r.max_abs_err != 0)
                fail_msg("%s %s (%s): %s %s", s->name, c.ops[i]->name, r.shape, st ? lpo_last_error() : "",
                         r.msg);
            assert_true(r.n_checked > 0);
        }
        kinds_seen[c.ops[i]->kind]++;
    }
    const int n = (int)c.n;
    cpu->free(ctx);
    lpo_opcheck_cases_free(&c);
    return n;
}

static void test_every_kind(void **state) {
    (void)state;
    int seen[LPO_OP_KIND_COUNT] = {0};
    lpo_model_spec s = test_spec();
    check_spec(&s, 9, 20, 3, seen);
    /* qwen3/qwen2-like features, gelu (geglu), sliding window, untied head */
    s.qk_norm = 1;
    s.qkv_bias = 1;
    s.o_bias = 1;
    s.mlp_bias = 1;
    s.act = LPO_ACT_GELU_TANH;
    s.sliding_window = 5;
    s.tied_embeddings = 0;
    check_spec(&s, 11, 33, 2, seen);
    /* odd shapes: 3 heads sharing one KV head, head_dim 10, widths that are no multiple of 16 */
    lpo_model_spec o = test_spec();
    o.hidden_size = 37;
    o.n_heads = 3;
    o.n_kv_heads = 1;
    o.head_dim = 10;
    o.intermediate_size = 53;
    o.vocab_size = 101;
    check_spec(&o, 1, 0, 1, seen);
    check_spec(&o, 13, 70, 5, seen);
    /* mixture of experts: router and routed experts, at a model shape and at odd widths with k = 1 and with
     * every expert chosen (k = E) */
    lpo_model_spec e = test_spec_moe();
    check_spec(&e, 9, 20, 3, seen);
    e.hidden_size = 37;
    e.moe.intermediate_size = 13;
    e.moe.n_experts = 7;
    e.moe.n_experts_used = 1;
    e.moe.norm_topk_prob = 0;
    check_spec(&e, 13, 5, 4, seen);
    e.moe.n_experts_used = 7;
    check_spec(&e, 1, 3, 1, seen);
    /* tensor parallel: the collectives of a two-rank list as one rank runs them (one participant) */
    lpo_model_spec t = test_spec();
    t.vocab_size = 96;
    lpo_oplist l = {0};
    const lpo_oplist_opts two = {LPO_DT_F32, LPO_DT_F32, NULL, NULL, 2};
    assert_int_equal(lpo_oplist_build_phase(&t, 1, 3, 7, &two, &l), LPO_OK);
    void *ctx = cpu_ctx();
    for (size_t i = 0; i < l.n_ops; i++) {
        if (lpo_op_kind_cat(l.ops[i].kind) != LPO_CAT_COMM) continue;
        lpo_op op = l.ops[i];
        assert_false(lpo_backend_cpu()->supports_op(ctx, &op)); /* two ranks: not on one CPU */
        lpo_op_single_rank(&op);
        lpo_opcheck_result r;
        assert_int_equal(lpo_opcheck_run(lpo_backend_cpu(), ctx, LPO_DT_F32, &op, 5, &r), LPO_OK);
        if (!r.passed || r.max_abs_err != 0) fail_msg("%s: %s", op.name, r.msg);
        seen[op.kind]++;
    }
    lpo_backend_cpu()->free(ctx);
    lpo_oplist_free(&l);
    /* the vision kinds: every op of the vision lists of both view sizes (the first of each kind and role) */
    const lpo_vision_spec vs = test_vision_spec();
    for (int64_t size = 768; size <= 1024; size += 256) {
        lpo_oplist vl = {0};
        assert_int_equal(lpo_vision_oplist_build(&vs, size, NULL, &vl), LPO_OK);
        const lpo_backend_iface *cpu = lpo_backend_cpu();
        void *vctx = cpu_ctx();
        int done[LPO_OP_KIND_COUNT][LPO_ROLE_COUNT] = {{0}};
        for (size_t i = 0; i < vl.n_ops; i++) {
            const lpo_op *op = &vl.ops[i];
            if (done[op->kind][op->role]++) continue;
            lpo_opcheck_result r;
            lpo_status st = lpo_opcheck_run(cpu, vctx, LPO_DT_F32, op, 7, &r);
            if (st != LPO_OK || !r.passed || r.max_abs_err != 0)
                fail_msg("vision %s (%s): %s %s", op->name, r.shape, st ? lpo_last_error() : "", r.msg);
            assert_true(r.n_checked > 0);
            seen[op->kind]++;
        }
        cpu->free(vctx);
        lpo_oplist_free(&vl);
    }
    /* DeepSeek routing (group-limited softmax, scaled; sigmoid + score bias, noaux_tc) and shared experts */
    lpo_model_spec d = test_spec_deepseek();
    check_spec(&d, 9, 20, 3, seen);
    d.moe.scoring = LPO_SCORE_SIGMOID;
    d.moe.topk_method = LPO_TOPK_NOAUX_TC;
    d.moe.norm_topk_prob = 1;
    check_spec(&d, 5, 7, 2, seen);
    /* multi-head latent attention: with q_lora (q_a, its norm, q_b) and without, interleaved rope or not */
    lpo_model_spec a = test_spec_mla();
    check_spec(&a, 9, 20, 3, seen);
    a.mla.q_lora_rank = 0;
    a.mla.rope_interleave = 0;
    check_spec(&a, 4, 11, 2, seen);
    for (int k = 0; k < LPO_OP_KIND_COUNT; k++)
        if (!seen[k]) fail_msg("op kind '%s' was not checked", lpo_op_kind_name((lpo_op_kind)k));
}

/* The checker's random data laid out like a real step (kbench's model mode): slots and positions of the
 * step's sequences, a cache holding their context; a step of the wrong size refused; timed repeats, hot and
 * cold, fill ms. */
static void test_op_data_layout(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 2, 30, NULL, &l), LPO_OK);
    const long ia = lpo_oplist_find(&l, LPO_ROLE_ATTN, 0), ir = lpo_oplist_find(&l, LPO_ROLE_ROPE, 0);
    assert_true(ia >= 0 && ir >= 0);
    const int64_t past[2] = {30, 17}, nn[2] = {1, 1}, n3[2] = {2, 1};
    const lpo_step step = {2, past, nn, 0, 1}, wrong = {2, past, n3, 0, 1};
    lpo_op_data *d;
    assert_int_equal(lpo_op_data_new(&l.ops[ia], 7, &step, &d), LPO_OK);
    lpo_op_io *io = lpo_op_data_io(d);
    assert_int_equal(io->n_slots, 2);
    assert_int_equal(io->max_context, 31);
    assert_int_equal(io->tok_slot[0], 0);
    assert_int_equal(io->tok_slot[1], 1);
    assert_int_equal(io->tok_pos[0], 30);
    assert_int_equal(io->tok_pos[1], 17);
    assert_non_null(strstr(lpo_op_data_shape(d), "ctx=31"));
    void *ctx = cpu_ctx();
    double ms[3] = {-1, -1, -1};
    for (int cold = 0; cold < 2; cold++) { // hot, then cold (caches flushed before each timed run)
        io->repeat = 3;
        io->ms = ms;
        io->cold = cold;
        assert_int_equal(lpo_backend_cpu()->run_op(ctx, &l.ops[ia], io), LPO_OK);
        for (int i = 0; i < 3; i++) assert_true(ms[i] > 0);
        for (int64_t i = 0; i < l.ops[ia].m * l.ops[ia].n_heads * l.ops[ia].head_dim; i++)
            assert_true(isfinite(io->out[i]));
    }
    lpo_op_data_free(d);
    assert_int_equal(lpo_op_data_new(&l.ops[ir], 7, &wrong, &d), LPO_E_INVALID);
    assert_null(d);
    assert_int_equal(lpo_op_data_new(&l.ops[ir], 7, NULL, &d), LPO_OK); /* the checker's own layout */
    assert_true(lpo_op_data_io(d)->tok_pos[0] <= 40);
    lpo_op_data_free(d);
    lpo_backend_cpu()->free(ctx);
    lpo_oplist_free(&l);
}

/* ---- a broken backend: the CPU's run_op, then one output element unwritten or nudged ------------------- */
static int broken_mode;
static lpo_status broken_run_op(void *ctx, const lpo_op *op, lpo_op_io *io) {
    lpo_status st = lpo_backend_cpu()->run_op(ctx, op, io);
    const int64_t n = op->out[0].shape[0] * op->out[0].shape[1];
    if (broken_mode == 1) io->out[n - 1] = NAN;
    if (broken_mode == 2) io->out[n / 2] += 0.02f;
    if (broken_mode == 3 && op->kind == LPO_OP_ROUTER) { /* token 0's last expert: the first one not chosen */
        const int64_t k = op->top_k;
        for (int32_t e = 0; e < (int32_t)op->n_experts; e++) {
            int chosen = 0;
            for (int64_t j = 0; j < k; j++) chosen |= io->expert_ids[j] == e;
            if (!chosen) {
                io->expert_ids[k - 1] = e;
                io->out[k - 1] *= 0.5f; /* its own weight */
                break;
            }
        }
    }
    if (broken_mode == 4 && op->kind == LPO_OP_ROUTER) { /* token 0's first two ranks swapped, weights too */
        const int32_t e = io->expert_ids[0];
        const float w = io->out[0];
        io->expert_ids[0] = io->expert_ids[1], io->out[0] = io->out[1];
        io->expert_ids[1] = e, io->out[1] = w;
    }
    return st;
}

static void test_checker_catches(void **state) {
    (void)state;
    lpo_backend_iface broken = *lpo_backend_cpu();
    broken.run_op = broken_run_op;
    lpo_model_spec s = test_spec();
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(&s, 0, 1, 6, NULL, &l), LPO_OK);
    const lpo_op *down = &l.ops[lpo_oplist_find(&l, LPO_ROLE_DOWN, 0)];
    void *ctx = cpu_ctx();
    lpo_opcheck_result r;
    broken_mode = 1;
    assert_int_equal(lpo_opcheck_run(&broken, ctx, LPO_DT_F32, down, 7, &r), LPO_OK);
    assert_false(r.passed);
    assert_int_equal(r.n_unwritten, 1);
    assert_non_null(strstr(r.msg, "not written"));
    broken_mode = 2; /* 0.02 off: fails f32's tolerance, within bf16's */
    assert_int_equal(lpo_opcheck_run(&broken, ctx, LPO_DT_F32, down, 7, &r), LPO_OK);
    assert_false(r.passed);
    assert_int_equal(lpo_opcheck_run(&broken, ctx, LPO_DT_BF16, down, 7, &r), LPO_OK);
    assert_true(r.passed);
    /* a router that chooses other experts, or orders them otherwise, than the reference (no near tie at this
     * seed): a mismatch, for softmax group-limited and for sigmoid + bias noaux_tc routing */
    lpo_oplist_free(&l);
    for (int sig = 0; sig < 2; sig++) {
        lpo_model_spec d = test_spec_deepseek();
        if (sig) d.moe.scoring = LPO_SCORE_SIGMOID, d.moe.topk_method = LPO_TOPK_NOAUX_TC;
        assert_int_equal(lpo_oplist_build_phase(&d, 0, 1, 6, NULL, &l), LPO_OK);
        const lpo_op *router = &l.ops[lpo_oplist_find(&l, LPO_ROLE_ROUTER, 0)];
        broken_mode = 0;
        assert_int_equal(lpo_opcheck_run(&broken, ctx, LPO_DT_F32, router, 7, &r), LPO_OK);
        assert_true(r.passed);
        for (broken_mode = 3; broken_mode <= 4; broken_mode++) {
            assert_int_equal(lpo_opcheck_run(&broken, ctx, LPO_DT_F32, router, 7, &r), LPO_OK);
            assert_false(r.passed);
            assert_non_null(strstr(r.msg, "token 0 rank"));
        }
        lpo_oplist_free(&l);
    }
    broken_mode = 0;
    lpo_backend_cpu()->free(ctx);
}

/* ---- the CPU kernels against naive double loops ---- */
static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2 - 1);
}

/* lpo_cpu_mla_attention: the absorbed form (decode) equals the expanded form (prefill) on the same cache and
 * queries, both interleaved and half-split rope, tokens of two slots at several positions; the latent cache
 * rows they append are identical. */
static void check_mla_forms(uint64_t *seed) {
    enum { M = 4, NH = 3, DN = 6, DR = 4, DV = 5, R = 7, CTX = 9 };
    float q[M * NH * (DN + DR)], kva[M * (R + DR)], wn[R], W[NH * (DN + DV) * R], cos_t[CTX * DR / 2],
        sin_t[CTX * DR / 2];
    float cache[2][2 * CTX * (R + DR)], att[2][M * NH * DV];
    const int32_t slot[M] = {0, 1, 0, 1};
    const int64_t pos[M] = {3, 8, 4, 0};
    for (int i = 0; i < M * NH * (DN + DR); i++) q[i] = frand(seed);
    for (int i = 0; i < M * (R + DR); i++) kva[i] = frand(seed);
    for (int i = 0; i < R; i++) wn[i] = 1 + 0.3f * frand(seed);
    for (int i = 0; i < NH * (DN + DV) * R; i++) W[i] = frand(seed);
    for (int p = 0; p < CTX; p++)
        for (int i = 0; i < DR / 2; i++) {
            cos_t[p * DR / 2 + i] = cosf((float)p / (float)(1 + i));
            sin_t[p * DR / 2 + i] = sinf((float)p / (float)(1 + i));
        }
    float init[2 * CTX * (R + DR)];
    for (int i = 0; i < 2 * CTX * (R + DR); i++) init[i] = frand(seed);
    float scratch[4096];
    assert_true(lpo_cpu_mla_scratch_floats(M, NH, DN, DR, DV, R, CTX, 1) <= 4096);
    for (int il = 0; il < 2; il++) {
        for (int form = 0; form < 2; form++) {
            memcpy(cache[form], init, sizeof init);
            lpo_cpu_mla_attention(att[form], q, kva, cache[form], wn, W, cos_t, sin_t, slot, pos, M, NH, DN,
                                  DR, DV, R, CTX, 1e-6f, il, 0.3f, form, scratch, 1);
        }
        assert_memory_equal(cache[0], cache[1], sizeof init);
        for (int i = 0; i < M * NH * DV; i++)
            assert_true(fabs(att[0][i] - att[1][i]) <= 1e-5 * (1 + fabs(att[0][i])));
    }
}

/* lpo_cpu_route's group-limited softmax (deepseek v2) and sigmoid noaux_tc (deepseek v3) routing, scaled and
 * renormalised, against a double-precision reference that sorts: groups by their best (or two best) choice
 * values, then the experts of the kept groups. */
static void check_routing(uint64_t *seed) {
    enum { T = 5, H = 16, E = 12, K = 3 };
    float x[T * H], G[E * H + E], w[T * K], logits[T * E];
    int32_t ids[T * K];
    for (int i = 0; i < T * H; i++) x[i] = frand(seed);
    for (int i = 0; i < E * H; i++) G[i] = frand(seed);
    for (int i = 0; i < E; i++) G[E * H + i] = 0.3f * frand(seed); /* the score-correction bias */
    for (int variant = 0; variant < 4; variant++) {
        const int sig = variant >= 2, ng = variant % 2 ? 4 : 3, tg = variant % 2 ? 2 : 1;
        const lpo_cpu_routing r = {sig ? LPO_SCORE_SIGMOID : LPO_SCORE_SOFTMAX,
                                   sig ? LPO_TOPK_NOAUX_TC : LPO_TOPK_GROUP_LIMITED,
                                   ng,
                                   tg,
                                   sig,
                                   2.5f,
                                   sig ? G + E * H : NULL};
        lpo_cpu_route(w, ids, x, G, logits, T, E, H, K, &r, 1);
        for (int t = 0; t < T; t++) {
            double l[E], c[E], mx = -1e300, sum = 0;
            for (int e = 0; e < E; e++) {
                l[e] = 0;
                for (int i = 0; i < H; i++) l[e] += (double)x[t * H + i] * G[e * H + i];
                mx = l[e] > mx ? l[e] : mx;
                c[e] = sig ? 1 / (1 + exp(-l[e])) + G[E * H + e] : l[e];
            }
            for (int e = 0; e < E; e++) sum += exp(l[e] - mx);
            const int per = E / ng;
            double gv[E];
            int keep[E] = {0};
            for (int g = 0; g < ng; g++) { // group value: best, or the sum of the two best
                double a = -1e300, b = -1e300;
                for (int e = g * per; e < (g + 1) * per; e++) {
                    if (c[e] > a) {
                        b = a;
                        a = c[e];
                    } else if (c[e] > b) {
                        b = c[e];
                    }
                }
                gv[g] = sig ? a + b : a;
            }
            for (int j = 0; j < tg; j++) { // keep the tg best groups
                int best = -1;
                for (int g = 0; g < ng; g++)
                    if (!keep[g] && (best < 0 || gv[g] > gv[best])) best = g;
                assert_true(best >= 0);
                if (best >= 0) keep[best] = 1;
            }
            int want[K] = {0};
            double ww[K], tot = 0;
            for (int j = 0; j < K; j++) { // the K best experts of the kept groups
                int best = -1;
                for (int e = 0; e < E; e++) {
                    int taken = 0;
                    for (int i = 0; i < j; i++) taken |= want[i] == e;
                    if (!taken && keep[e / per] && (best < 0 || c[e] > c[best])) best = e;
                }
                want[j] = best;
                ww[j] = sig ? 1 / (1 + exp(-l[best])) : exp(l[best] - mx) / sum;
                tot += ww[j];
            }
            for (int j = 0; j < K; j++) {
                assert_int_equal(ids[t * K + j], want[j]);
                const double v = (sig ? ww[j] / tot : ww[j]) * 2.5;
                assert_true(fabs(w[t * K + j] - v) <= 1e-5 * (1 + fabs(v)));
            }
        }
    }
}

static void test_kernels_vs_double(void **state) {
    (void)state;
    uint64_t seed = 42;
    /* matmul at shapes that exercise the 4x2 blocks, the tails and the row tiles */
    const int64_t shapes[][3] = {{1, 7, 33}, {3, 17, 100}, {37, 21, 5}, {64, 19, 129}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        const int64_t m = shapes[c][0], n = shapes[c][1], k = shapes[c][2];
        float *x = malloc((size_t)(m * k) * 4), *W = malloc((size_t)(n * k) * 4), *b = malloc((size_t)n * 4);
        float *y = malloc((size_t)(m * n) * 4);
        for (int64_t i = 0; i < m * k; i++) x[i] = frand(&seed);
        for (int64_t i = 0; i < n * k; i++) W[i] = frand(&seed);
        for (int64_t i = 0; i < n; i++) b[i] = frand(&seed);
        lpo_cpu_matmul(y, x, W, b, m, n, k, 2);
        for (int64_t t = 0; t < m; t++)
            for (int64_t j = 0; j < n; j++) { // x row t . W row j + b j
                double acc = b[j];
                for (int64_t i = 0; i < k; i++) acc += (double)x[t * k + i] * W[j * k + i];
                assert_true(fabs(y[t * n + j] - acc) <= 1e-5 * (1 + fabs(acc)));
            }
        free(x), free(W), free(b), free(y);
    }
    /* attention: 5 tokens of two slots, GQA 4/2, head_dim 6, window 3 */
    const int64_t m = 5, nh = 4, nkv = 2, hd = 6, ctx = 9, win = 3, row = (nh + 2 * nkv) * hd, kvd = nkv * hd;
    float qkv[5 * 48], att[5 * 24], kc[2 * 9 * 12], vc[2 * 9 * 12], scores[2 * 9];
    int32_t slot[5] = {0, 0, 0, 1, 1};
    int64_t pos[5] = {2, 3, 4, 7, 8};
    for (int i = 0; i < 5 * 48; i++) qkv[i] = frand(&seed);
    for (int i = 0; i < 2 * 9 * 12; i++) kc[i] = frand(&seed), vc[i] = frand(&seed);
    lpo_cpu_kv_append(kc, vc, qkv, slot, pos, m, nh, nkv, hd, ctx, 0);
    lpo_cpu_attention(att, qkv, kc, vc, slot, pos, m, nh, nkv, hd, ctx, win, scores, 1);
    for (int64_t t = 0; t < m; t++)
        for (int64_t h = 0; h < nh; h++) { // token t, head h: softmax over positions pos-2..pos
            const int64_t kh = h / (nh / nkv), lo = pos[t] + 1 > win ? pos[t] + 1 - win : 0;
            double sc[9], mx = -1e300, sum = 0;
            for (int64_t j = lo; j <= pos[t]; j++) {
                double d = 0;
                for (int64_t i = 0; i < hd; i++)
                    d += (double)qkv[t * row + h * hd + i] * kc[(slot[t] * ctx + j) * kvd + kh * hd + i];
                sc[j] = d / sqrt((double)hd);
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int64_t j = lo; j <= pos[t]; j++) sum += sc[j] = exp(sc[j] - mx);
            for (int64_t i = 0; i < hd; i++) {
                double o = 0;
                for (int64_t j = lo; j <= pos[t]; j++)
                    o += sc[j] / sum * vc[(slot[t] * ctx + j) * kvd + kh * hd + i];
                assert_true(fabs(att[t * nh * hd + h * hd + i] - o) <= 1e-5);
            }
        }
    /* router: logits, softmax, top-k (equal logits: the lower index first), renormalised or not, against
     * double; then the routed experts against a naive double loop over each token's chosen experts */
    {
        enum { T = 3, H = 20, E = 6, K = 3, I = 7 };
        float x[T * H], G[E * H], w[T * K], logits[T * E], y[T * H], Wx[E * 3 * I * H];
        int32_t ids[T * K], rows[T];
        for (int i = 0; i < T * H; i++) x[i] = frand(&seed);
        for (int i = 0; i < E * H; i++) G[i] = frand(&seed);
        for (int i = 0; i < H; i++) G[4 * H + i] = G[1 * H + i]; /* experts 1 and 4 tie for every token */
        for (int norm = 0; norm < 2; norm++) {
            lpo_cpu_router(w, ids, x, G, logits, T, E, H, K, norm, 1);
            for (int t = 0; t < T; t++) {
                double l[E], mx = -1e300, sum = 0, chosen = 0;
                for (int e = 0; e < E; e++) {
                    l[e] = 0;
                    for (int i = 0; i < H; i++) l[e] += (double)x[t * H + i] * G[e * H + i];
                    mx = l[e] > mx ? l[e] : mx;
                }
                for (int e = 0; e < E; e++) sum += exp(l[e] - mx);
                int64_t prev = -1;
                for (int j = 0; j < K; j++) { // descending logits; the tie 1 == 4 kept in index order
                    const int32_t e = ids[t * K + j];
                    assert_true(e >= 0 && e < E);
                    if (j) assert_true(logits[t * E + prev] > logits[t * E + e] || (prev == 1 && e == 4));
                    if (e == 4) { /* 4 is chosen only right after 1 (its twin) */
                        assert_int_equal(j > 0 ? ids[t * K + j - 1] : -1, 1);
                    }
                    prev = e;
                    chosen += exp(l[e] - mx) / sum;
                }
                for (int j = 0; j < K; j++) {
                    const double p = exp(l[ids[t * K + j]] - mx) / sum, want = norm ? p / chosen : p;
                    assert_true(fabs(w[t * K + j] - want) <= 1e-6);
                }
            }
        }
        check_routing(&seed);
        check_mla_forms(&seed);
        for (int i = 0; i < E * 3 * I * H; i++) Wx[i] = frand(&seed);
        float scratch[T * (2 * H + 3 * I)];
        assert_true(lpo_cpu_experts_scratch_floats(T, H, I) <= (int64_t)(sizeof scratch / sizeof *scratch));
        lpo_cpu_experts(y, x, w, ids, Wx, T, H, I, E, K, scratch, rows, 1);
        for (int t = 0; t < T; t++)
            for (int c = 0; c < H; c++) { // y[t, c] = sum_j w_j down_e(silu(gate_e x) * up_e x)[c]
                double acc = 0;
                for (int j = 0; j < K; j++) {
                    const float *We = Wx + ids[t * K + j] * 3 * I * H;
                    double o = 0;
                    for (int r = 0; r < I; r++) {
                        double g = 0, u = 0;
                        for (int i = 0; i < H; i++) {
                            g += (double)x[t * H + i] * We[r * H + i];
                            u += (double)x[t * H + i] * We[(I + r) * H + i];
                        }
                        o += g / (1 + exp(-g)) * u * We[2 * I * H + c * I + r];
                    }
                    acc += w[t * K + j] * o;
                }
                assert_true(fabs(y[t * H + c] - acc) <= 1e-5 * (1 + fabs(acc)));
            }
    }
    /* geglu against the formula in double */
    float gu[2 * 8], act[8];
    for (int i = 0; i < 16; i++) gu[i] = 3 * frand(&seed);
    lpo_cpu_geglu(act, gu, 1, 8, 1);
    for (int i = 0; i < 8; i++) {
        const double g = gu[i],
                     want = 0.5 * g * (1 + tanh(sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) * gu[8 + i];
        assert_true(fabs(act[i] - want) <= 1e-5 * (1 + fabs(want)));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kind),
        cmocka_unit_test(test_op_data_layout),
        cmocka_unit_test(test_checker_catches),
        cmocka_unit_test(test_kernels_vs_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
