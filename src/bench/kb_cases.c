/* kbench operator cases: one case per engine op kind, named after the kind. A case is built as the engine
 * builds that op: a one-layer model spec from the kbench keys, its op list for a step of kbench.m tokens
 * (lpo_oplist_build, the compute dtype everywhere), the op of the case's role taken from it. The op checker
 * validates it against the CPU reference on random data, then the backend's run_op times it (kb_op.c):
 * the engine's own kernels (CUDA: its .cu files, cuBLASLt or its GEMV kernels as the engine picks; CPU:
 * the reference C). FLOPs and bytes are the op list's (lpo_op_flops / lpo_op_bytes). `linears` times the
 * linear layers of model=<preset> the same way. docs/kbench.md, "Cases". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/kb_op.h"
#include "lpo/core.h"
#include "lpo/infer.h"
#include "lpo/model.h"

/* ---- the cases: which op of the one-layer list each kind is, and what it computes ---- */
typedef struct {
    lpo_op_kind kind;
    lpo_op_role role;
    const char *summary;
} op_case;

static const op_case op_cases[] = {
    {LPO_OP_EMBED, LPO_ROLE_EMBED, "x (m, n) = rows tokens of E (vocab, n)"},
    {LPO_OP_RMSNORM, LPO_ROLE_ATTN_NORM, "y (m, n) = x * rsqrt(mean(x^2) + eps) * w"},
    {LPO_OP_LINEAR, LPO_ROLE_DOWN,
     "y (m, n) = x (m, k) @ W^T, W (n, k); CUDA: GEMV kernel (m <= 8, engine.gemv) or cuBLASLt"},
    {LPO_OP_QK_NORM, LPO_ROLE_QK_NORM, "per-head RMSNorm of the q and k heads of qkv rows (m tokens)"},
    {LPO_OP_ROPE, LPO_ROLE_ROPE, "q and k heads of qkv rows (m tokens) rotated (NeoX pairs)"},
    {LPO_OP_ATTENTION, LPO_ROLE_ATTN,
     "causal GQA attention of m tokens in kbench.batch sequences after kbench.context cached positions"},
    {LPO_OP_SWIGLU, LPO_ROLE_MLP_ACT, "act (m, n) = silu(gate) * up over gu (m, 2n)"},
    {LPO_OP_GEGLU, LPO_ROLE_MLP_ACT, "act (m, n) = gelu_tanh(gate) * up over gu (m, 2n)"},
    {LPO_OP_ADD, LPO_ROLE_ATTN_RESIDUAL, "x (m, n) += y (the residual add)"},
    {LPO_OP_LM_HEAD, LPO_ROLE_LM_HEAD, "logits (m, n) f32 = x (m, k) @ E^T, E (n, k)"},
    {LPO_OP_SAMPLE, LPO_ROLE_SAMPLE, "next token of each of m rows of n logits (infer.* sampling: greedy)"},
    {LPO_OP_ROUTER, LPO_ROLE_ROUTER,
     "MoE router: f32 logits x (m, k) @ G^T (kbench.experts, k), softmax, the kbench.top_k experts per "
     "token"},
    {LPO_OP_EXPERTS, LPO_ROLE_EXPERTS,
     "MoE routed experts: per token, kbench.top_k SwiGLU experts (n -> k -> n) of kbench.experts, weighted "
     "sum"},
    {LPO_OP_ALL_REDUCE, LPO_ROLE_MLP_ALL_REDUCE,
     "tensor parallel: sum of (m, n) over the ranks, in place; one rank here (the multi-GPU sweep: lpo "
     "ceilings)"},
    {LPO_OP_ALL_GATHER, LPO_ROLE_LOGITS_GATHER,
     "tensor parallel: (m, n / ranks) logits parts -> (m, n); one rank here (the multi-GPU sweep: lpo "
     "ceilings)"},
    {LPO_OP_CONV2D, LPO_ROLE_NECK_CONV2,
     "vision: conv of a kbench.h x kbench.w grid of kbench.c_in channels (rows) -> kbench.c_out, "
     "kbench.kernel, "
     "kbench.stride, kbench.pad"},
    {LPO_OP_LAYERNORM, LPO_ROLE_ATTN_NORM, "vision: y (m, n) = (x - mean) / sqrt(var + eps) * w + b"},
    {LPO_OP_GELU, LPO_ROLE_MLP_ACT, "vision: x (m, n) = gelu(x), erf form"},
    {LPO_OP_ATTN_RELPOS, LPO_ROLE_ATTN,
     "vision: SAM attention over a kbench.h x kbench.h grid in windows of kbench.w (0: global), kbench.heads "
     "of "
     "kbench.head_dim, relative-position terms"},
    {LPO_OP_ATTN_PREFIX, LPO_ROLE_ATTN,
     "vision: encoder attention of m rows (rotary; the first m / 2 both ways, then causal), kbench.heads / "
     "kbench.kv_heads of kbench.head_dim"},
    {LPO_OP_POS_EMBED, LPO_ROLE_POS_EMBED,
     "vision: x (kbench.h^2, n) += a kbench.w x kbench.w position table resized to kbench.h x kbench.h"},
    {LPO_OP_MLA_ATTENTION, LPO_ROLE_ATTN,
     "multi-head latent attention of m tokens (kbench.heads, DeepSeek-V2's latent 512, nope 128, rope 64, v "
     "128) in kbench.batch sequences after kbench.context cached positions; decode: the absorbed form"},
};
_Static_assert(sizeof op_cases / sizeof op_cases[0] == LPO_OP_KIND_COUNT,
               "every engine op kind is a kbench case: add its row");

static const op_case *case_of(lpo_op_kind kind) {
    for (size_t i = 0; i < sizeof op_cases / sizeof op_cases[0]; i++)
        if (op_cases[i].kind == kind) return &op_cases[i];
    return NULL;
}

int lpo__kb_op_case_find(const char *name, lpo_op_kind *kind) {
    for (int k = 0; k < LPO_OP_KIND_COUNT; k++)
        if (!strcmp(name, lpo_op_kind_name((lpo_op_kind)k))) return *kind = (lpo_op_kind)k, 1;
    return 0;
}

const char *lpo__kb_op_case_summary(lpo_op_kind kind) {
    const op_case *c = case_of(kind);
    return c ? c->summary : "";
}

/* ---- parameters -> spec and step ---- */
static lpo_status need_pos(const char *key, int64_t v) {
    if (v > 0 && v <= ((int64_t)1 << 31)) return LPO_OK;
    return lpo_errorf(LPO_E_CONFIG, "kbench.%s must be in 1..2^31 (got %lld)", key, (long long)v);
}

/* kbench.dtype as the engine's compute dtype: f32, f16 or bf16 (the CPU backend: f32) */
static lpo_status op_dtype(const kb_params *p, int cuda, lpo_dtype *dt) {
    if (!lpo_dtype_parse(p->dtype, dt))
        return lpo_errorf(LPO_E_CONFIG,
                          "kbench.dtype=%s: unknown dtype (the engine computes in f32, f16 or bf16)",
                          p->dtype);
    if (*dt != LPO_DT_F32 && *dt != LPO_DT_F16 && *dt != LPO_DT_BF16)
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "kbench.dtype=%s: the engine's ops compute in f32, f16 or bf16 (cuBLASLt's fp8 and int8 "
            "peaks: lpo ceilings)",
            p->dtype);
    if (!cuda && *dt != LPO_DT_F32)
        return lpo_errorf(LPO_E_UNSUPPORTED, "kbench.case=%s on backend=cpu runs in f32 (kbench.dtype=%s)",
                          p->case_name, p->dtype);
    return LPO_OK;
}

/* The one-layer spec whose list holds the case's op at the keys' sizes (sizes the op does not use: 1, or 2
 * for head_dim), and the step: kbench.batch sequences of m / batch tokens after kbench.context cached
 * positions for ROPE and ATTENTION, else one sequence of m tokens; every row's logits. */
/* The sequences of an attention case: kbench.m tokens split into kbench.batch sequences of equal length, each
 * after kbench.context cached positions (the spec's max_positions). */
static lpo_status attention_seqs(const kb_params *p, lpo_model_spec *s, int *seqs) {
    *seqs = p->seqs > 0 ? (int)p->seqs : 1;
    if (p->seqs < 0 || p->seqs > 4096 || p->m % *seqs)
        return lpo_errorf(LPO_E_CONFIG,
                          "kbench.batch=%lld: the %lld tokens (kbench.m) are split into that many "
                          "sequences of equal length (1..4096, dividing m)",
                          (long long)p->seqs, (long long)p->m);
    if (p->context < 0 || p->context > ((int64_t)1 << 24))
        return lpo_errorf(LPO_E_CONFIG, "kbench.context=%lld: cached positions must be in 0..2^24",
                          (long long)p->context);
    s->max_positions = p->context + p->m / *seqs;
    return LPO_OK;
}

static lpo_status case_spec(lpo_op_kind kind, const kb_params *p, lpo_dtype dt, lpo_model_spec *s,
                            int *seqs) {
    lpo_status st = need_pos("m", p->m);
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "kbench %s", lpo_op_kind_name(kind));
    s->n_layers = 1;
    s->hidden_size = s->intermediate_size = s->vocab_size = s->n_heads = s->n_kv_heads = 1;
    s->head_dim = 2;
    s->norm = LPO_NORM_RMS;
    s->norm_eps = (float)p->eps;
    s->act = kind == LPO_OP_GEGLU ? LPO_ACT_GELU_TANH : LPO_ACT_SILU;
    s->qk_norm = kind == LPO_OP_QK_NORM;
    s->rope.theta = 10000;
    s->dtype = dt;
    s->bos_id = -1;
    *seqs = 1;
    switch (kind) {
    case LPO_OP_EMBED:
        if (!st && !(st = need_pos("n", p->n)) && !(st = need_pos("vocab", p->vocab)))
            s->hidden_size = p->n, s->vocab_size = p->vocab;
        break;
    case LPO_OP_RMSNORM:
    case LPO_OP_ADD:
        if (!st && !(st = need_pos("n", p->n))) s->hidden_size = p->n;
        break;
    case LPO_OP_SWIGLU:
    case LPO_OP_GEGLU:
        if (!st && !(st = need_pos("n", p->n))) s->intermediate_size = p->n;
        break;
    case LPO_OP_LINEAR: /* the down projection: x (m, intermediate) -> (m, hidden) */
        if (!st && !(st = need_pos("n", p->n)) && !(st = need_pos("k", p->k)))
            s->hidden_size = p->n, s->intermediate_size = p->k;
        break;
    case LPO_OP_LM_HEAD:
        if (!st && !(st = need_pos("n", p->n)) && !(st = need_pos("k", p->k)))
            s->vocab_size = p->n, s->hidden_size = p->k;
        break;
    case LPO_OP_SAMPLE:
        if (!st && !(st = need_pos("n", p->n))) s->vocab_size = p->n;
        break;
    case LPO_OP_ROUTER:
    case LPO_OP_EXPERTS: /* a one-layer qwen3_moe: router (m, k = hidden) -> experts; experts n = hidden, k =
                            I */
        if (st || (st = need_pos("k", p->k)) || (st = need_pos("experts", p->experts)) ||
            (st = need_pos("top_k", p->top_k)) || (kind == LPO_OP_EXPERTS && (st = need_pos("n", p->n))))
            break;
        if (p->experts > 4096 || p->top_k > p->experts)
            return lpo_errorf(LPO_E_CONFIG,
                              "kbench.top_k=%lld must be in 1..kbench.experts=%lld (at most 4096)",
                              (long long)p->top_k, (long long)p->experts);
        s->arch = LPO_ARCH_QWEN3_MOE;
        s->hidden_size = kind == LPO_OP_ROUTER ? p->k : p->n;
        s->moe.intermediate_size = kind == LPO_OP_ROUTER ? 1 : p->k;
        s->moe.n_experts = p->experts;
        s->moe.n_experts_used = p->top_k;
        s->moe.norm_topk_prob = 1;
        s->moe.sparse_step = 1;
        break;
    case LPO_OP_ALL_REDUCE: /* a two-rank list's collective (taken as one rank's below): n = hidden */
    case LPO_OP_ALL_GATHER: /* n = vocab, even */
        if (st || (st = need_pos("n", p->n))) break;
        if (kind == LPO_OP_ALL_GATHER && p->n % 2)
            return lpo_errorf(LPO_E_CONFIG, "kbench.n=%lld: the gathered logits split in two parts (even n)",
                              (long long)p->n);
        s->n_heads = s->n_kv_heads = s->intermediate_size = s->vocab_size = 2;
        if (kind == LPO_OP_ALL_REDUCE) s->hidden_size = p->n;
        if (kind == LPO_OP_ALL_GATHER) s->vocab_size = p->n;
        break;
    case LPO_OP_MLA_ATTENTION: /* a one-layer deepseek_v2 at V2's MLA sizes, kbench.heads heads */
        if (st || (st = need_pos("heads", p->heads))) break;
        s->arch = LPO_ARCH_DEEPSEEK_V2;
        s->n_heads = s->n_kv_heads = p->heads;
        s->mla.kv_lora_rank = 512;
        s->mla.qk_nope_head_dim = 128;
        s->mla.qk_rope_head_dim = s->head_dim = 64;
        s->mla.v_head_dim = 128;
        s->mla.rope_interleave = 1;
        s->hidden_size = 2048;
        return attention_seqs(p, s, seqs);
    case LPO_OP_QK_NORM:
    case LPO_OP_ROPE:
    case LPO_OP_ATTENTION:
        if (st || (st = need_pos("heads", p->heads)) || (st = need_pos("kv_heads", p->kv_heads)) ||
            (st = need_pos("head_dim", p->head_dim)))
            break;
        if (p->heads % p->kv_heads)
            return lpo_errorf(LPO_E_CONFIG, "kbench.heads=%lld must be a multiple of kbench.kv_heads=%lld",
                              (long long)p->heads, (long long)p->kv_heads);
        if (p->head_dim % 2)
            return lpo_errorf(LPO_E_CONFIG, "kbench.head_dim must be even (RoPE pairs; got %lld)",
                              (long long)p->head_dim);
        s->n_heads = p->heads, s->n_kv_heads = p->kv_heads, s->head_dim = p->head_dim;
        s->hidden_size = p->heads * p->head_dim;
        if (kind == LPO_OP_QK_NORM) break;
        return attention_seqs(p, s, seqs);
    default: return lpo_errorf(LPO_E_INTERNAL, "kbench: no case for op kind %d", (int)kind);
    }
    return st;
}

/* ---- one op: checked, then timed by run_op ----------------------------------------------------------- */
static void variant_of(const lpo_op *op, const run_opts *ro, int gemv, char *b, size_t n) {
    if (!ro->cuda) {
        snprintf(b, n, "run_op cpu (reference C)");
    } else if ((op->kind == LPO_OP_LINEAR || op->kind == LPO_OP_LM_HEAD) && op->n_w > 0 &&
               (op->w[0].dtype == LPO_DT_FP8 || op->w[0].dtype == LPO_DT_FP8_B128)) {
        const int gv = gemv && op->m <= KB_GEMV_MAX_M && op->k % 16 == 0;
        snprintf(b, n, "run_op cuda, engine.gemv=%s, %s weights: %s", gemv ? "true" : "false",
                 lpo_dtype_name(op->w[0].dtype),
                 gv                                  ? "fp8 GEMV kernel (W8A16)"
                 : op->w[0].dtype == LPO_DT_FP8_B128 ? "dequantized + cuBLASLt"
                                                     : "cuBLASLt W8A8 (per-token activation scales)");
    } else if ((op->kind == LPO_OP_LINEAR || op->kind == LPO_OP_LM_HEAD) && op->n_w > 0 &&
               lpo_weight_native_block(op->w[0].dtype)) {
        snprintf(b, n, "run_op cuda, engine.gemv=%s, %s weights: %s", gemv ? "true" : "false",
                 lpo_dtype_name(op->w[0].dtype),
                 gemv && op->m <= KB_GEMV_MAX_M ? "block GEMV kernel" : "dequantized + cuBLASLt");
    } else if (op->kind == LPO_OP_LINEAR || op->kind == LPO_OP_LM_HEAD) {
        snprintf(b, n, "run_op cuda, engine.gemv=%s: %s", gemv ? "true" : "false",
                 gemv && op->m <= KB_GEMV_MAX_M ? "GEMV kernel" : "cuBLASLt");
    } else {
        snprintf(b, n, "run_op cuda");
    }
}

/* Checks and times op (name: its row's case; label: prefix of its shape, "" for none) on a fresh context
 * of the run's backend, then appends its row. */
static lpo_status run_op_case(lpo_kbench *kb, const lpo_node *cfg, const run_opts *ro, const kb_params *p,
                              const lpo_op *op, lpo_dtype dt, const lpo_step *layout, const char *name,
                              const char *label) {
    if (ro->graph)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "kbench.graph=true: kbench.case=%s is timed launch by launch by the backend's "
                          "run_op; graph mode applies to the cuDNN cases",
                          name);
    lpo_infer_config ic;
    lpo_status st = lpo_infer_config_read(cfg, &ic); /* engine.gemv, the sampling parameters */
    const lpo_backend_iface *be = NULL;
    if (st == LPO_OK) st = lpo_backend_find(ro->cuda ? "cuda" : "cpu", &be);
    kb_op_env env = {.be = be,
                     .dt = dt,
                     .device = ro->cuda,
                     .seed = p->seed,
                     .layout = layout,
                     .sampling = &ic.gen.sampling,
                     .mo = ro->mo};
    if (st == LPO_OK) {
        const lpo_backend_init bi = {.max_seqs = 1,
                                     .n_threads = ro->threads,
                                     .dtype = dt,
                                     .device = ro->device,
                                     .gemv = ic.engine.gemv};
        st = be->init(&bi, &env.ctx);
    }
    char variant[96], validated[48], shape[200], sh[160];
    double max_abs = 0;
    lpo_measure *m = NULL;
    int reps = 0;
    lpo_nvml_summary nvs;
    lpo_nvml_summarize(NULL, 0, &nvs);
    if (st == LPO_OK) {
        variant_of(op, ro, ic.engine.gemv, variant, sizeof variant);
        st = lpo__kb_op_check(&env, op, variant, validated, sizeof validated, &max_abs);
    }
    if (st == LPO_OK) {
        env.nv = ro->cuda ? lpo__kb_nvml_begin(ro->device, ro) : NULL;
        st = lpo__kb_op_time(&env, op, &m, &reps);
        lpo__kb_nvml_end(kb, env.nv, &nvs);
    }
    if (st == LPO_OK) {
        lpo_op_shape(op, sh, sizeof sh);
        snprintf(shape, sizeof shape, "%s%s%s", label, *label ? ": " : "", sh);
        /* fp8 weights beyond the GEMV's rows: W8A8 on the fp8 roof (bytes: lpo_op_bytes, scales included) */
        const int w8a8 = op->n_w > 0 && op->m > KB_GEMV_MAX_M &&
                         (op->w[0].dtype == LPO_DT_FP8 || op->w[0].dtype == LPO_DT_FP8_B128);
        const kb_row row = {name,
                            lpo_dtype_name(dt),
                            shape,
                            variant,
                            ro->cuda,
                            0,
                            lpo_op_flops(op),
                            lpo_op_bytes(op),
                            lpo__kb_op_roof(op->kind, w8a8 ? op->w[0].dtype : dt),
                            reps,
                            max_abs};
        st = lpo__kb_case_row(kb, &row, ro, m, &nvs);
    }
    lpo_measure_free(m);
    if (env.ctx) be->free(env.ctx);
    lpo_infer_config_free(&ic);
    return st;
}

/* ---- vision kinds: one op built from the keys (no text model's list holds them) -------------------------
 */
static int is_vision(lpo_op_kind k) {
    return k == LPO_OP_CONV2D || k == LPO_OP_LAYERNORM || k == LPO_OP_GELU || k == LPO_OP_ATTN_RELPOS ||
           k == LPO_OP_ATTN_PREFIX || k == LPO_OP_POS_EMBED;
}

static lpo_op_tensor kb_t(lpo_buf b, int64_t d0, int64_t d1, lpo_dtype dt) {
    lpo_op_tensor t = {b, "", d1 ? 2 : 1, {d0, d1, 0, 0}, dt, LPO_SHARD_NONE, 0};
    return t;
}

/* The vision op of the case at the keys' sizes, with its weights in w[0..2]. */
static lpo_status vision_op(lpo_op_kind kind, const kb_params *p, lpo_dtype dt, lpo_op *op,
                            lpo_op_tensor *w) {
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->role = case_of(kind)->role;
    op->layer = -1;
    op->name = lpo_op_kind_name(kind);
    op->n_in = op->n_out = 1;
    op->w = w;
    lpo_status st = LPO_OK;
    switch (kind) {
    case LPO_OP_CONV2D: {
        if ((st = need_pos("h", p->h)) || (st = need_pos("w", p->w)) || (st = need_pos("c_in", p->c_in)) ||
            (st = need_pos("c_out", p->c_out)) || (st = need_pos("kernel", p->kernel)) ||
            (st = need_pos("stride", p->stride)))
            return st;
        if (p->pad < 0 || p->h + 2 * p->pad < p->kernel || p->w + 2 * p->pad < p->kernel)
            return lpo_errorf(LPO_E_CONFIG,
                              "kbench.case=conv: kbench.kernel=%lld does not fit the %lld x %lld grid "
                              "padded by kbench.pad=%lld",
                              (long long)p->kernel, (long long)p->h, (long long)p->w, (long long)p->pad);
        const int64_t ho = (p->h + 2 * p->pad - p->kernel) / p->stride + 1,
                      wo = (p->w + 2 * p->pad - p->kernel) / p->stride + 1;
        op->m = ho * wo, op->n = p->c_out, op->k = p->c_in * p->kernel * p->kernel;
        op->grid_h = p->h, op->grid_w = p->w, op->ksize = p->kernel, op->stride = p->stride, op->pad = p->pad;
        op->in[0] = kb_t(LPO_BUF_XN, p->h * p->w, p->c_in, dt),
        op->out[0] = kb_t(LPO_BUF_X, op->m, op->n, dt);
        w[0] = (lpo_op_tensor){LPO_BUF_WEIGHT,
                               "conv.weight",
                               4,
                               {p->c_out, p->c_in, p->kernel, p->kernel},
                               dt,
                               LPO_SHARD_NONE,
                               0};
        op->n_w = 1;
        return LPO_OK;
    }
    case LPO_OP_LAYERNORM:
    case LPO_OP_GELU:
        if ((st = need_pos("m", p->m)) || (st = need_pos("n", p->n))) return st;
        op->m = p->m, op->n = p->n, op->eps = (float)p->eps;
        op->in[0] = kb_t(LPO_BUF_X, p->m, p->n, dt);
        op->out[0] = kb_t(kind == LPO_OP_GELU ? LPO_BUF_X : LPO_BUF_XN, p->m, p->n, dt);
        if (kind == LPO_OP_LAYERNORM) {
            w[0] = (lpo_op_tensor){LPO_BUF_WEIGHT, "norm.weight", 1, {p->n}, dt, LPO_SHARD_NONE, 0};
            w[1] = (lpo_op_tensor){LPO_BUF_WEIGHT, "norm.bias", 1, {p->n}, dt, LPO_SHARD_NONE, 0};
            op->n_w = 2, op->n_bias = 1;
        }
        return LPO_OK;
    case LPO_OP_ATTN_RELPOS: {
        if ((st = need_pos("h", p->h)) || (st = need_pos("heads", p->heads)) ||
            (st = need_pos("head_dim", p->head_dim)))
            return st;
        const int64_t g = p->h, win = p->w > 0 && p->w < g ? p->w : 0, span = win ? win : g,
                      nwin = (g + span - 1) / span;
        const int64_t C = p->heads * p->head_dim;
        op->m = g * g, op->n = C, op->grid_h = op->grid_w = g, op->window = win;
        op->n_heads = op->n_kv_heads = p->heads, op->head_dim = p->head_dim;
        op->attn_pairs = nwin * nwin * span * span * span * span;
        op->in[0] = kb_t(LPO_BUF_QKV, g * g, 3 * C, dt), op->out[0] = kb_t(LPO_BUF_ATT, g * g, C, dt);
        w[0] = (lpo_op_tensor){
            LPO_BUF_WEIGHT, "attn.rel_pos_h", 2, {2 * span - 1, p->head_dim}, dt, LPO_SHARD_NONE, 0};
        w[1] = (lpo_op_tensor){
            LPO_BUF_WEIGHT, "attn.rel_pos_w", 2, {2 * span - 1, p->head_dim}, dt, LPO_SHARD_NONE, 0};
        w[2] = (lpo_op_tensor){LPO_BUF_WEIGHT, "attn.qkv.bias", 1, {3 * C}, dt, LPO_SHARD_NONE, 0};
        op->n_w = 3;
        return LPO_OK;
    }
    case LPO_OP_ATTN_PREFIX: {
        if ((st = need_pos("m", p->m)) || (st = need_pos("heads", p->heads)) ||
            (st = need_pos("kv_heads", p->kv_heads)) || (st = need_pos("head_dim", p->head_dim)))
            return st;
        if (p->heads % p->kv_heads || p->head_dim % 2)
            return lpo_errorf(LPO_E_CONFIG,
                              "kbench.case=attn_prefix: kbench.heads=%lld must be a multiple of "
                              "kbench.kv_heads=%lld and kbench.head_dim=%lld even",
                              (long long)p->heads, (long long)p->kv_heads, (long long)p->head_dim);
        const int64_t P = p->m / 2, Q = p->m - P;
        op->m = p->m, op->n_heads = p->heads, op->n_kv_heads = p->kv_heads, op->head_dim = p->head_dim;
        op->prefix = P, op->rope_theta = 10000.0, op->attn_pairs = P * P + Q * P + Q * (Q + 1) / 2;
        op->in[0] = kb_t(LPO_BUF_QKV, p->m, (p->heads + 2 * p->kv_heads) * p->head_dim, dt);
        op->out[0] = kb_t(LPO_BUF_ATT, p->m, p->heads * p->head_dim, dt);
        return LPO_OK;
    }
    default: /* POS_EMBED */
        if ((st = need_pos("h", p->h)) || (st = need_pos("w", p->w)) || (st = need_pos("n", p->n))) return st;
        if (p->w > 15 * p->h)
            return lpo_errorf(LPO_E_CONFIG,
                              "kbench.case=pos_embed: a %lld-wide table shrinks to %lld at most 15x",
                              (long long)p->w, (long long)p->h);
        op->m = p->h * p->h, op->n = p->n, op->grid_h = op->grid_w = p->h;
        op->in[0] = op->out[0] = kb_t(LPO_BUF_X, op->m, p->n, dt);
        w[0] = (lpo_op_tensor){LPO_BUF_WEIGHT, "pos_embed", 4, {1, p->w, p->w, p->n}, dt, LPO_SHARD_NONE, 0};
        op->n_w = 1;
        return LPO_OK;
    }
}

/* kbench.weights: the dtype the matrices of a linear / lm_head case are held in (auto: the compute dtype dt;
 * fp8: per-channel scales; fp8_b128: 128x128 tiles; q8_0, q4_0, q4_1, q4_k, q5_k, q6_k: GGUF blocks, as
 * engine.weights=native
 * holds them), refused for the other cases */
static lpo_status weights_dtype(const kb_params *p, lpo_op_kind kind, lpo_dtype dt, lpo_dtype *out) {
    *out = dt;
    if (!p->weights[0] || !strcmp(p->weights, "auto")) return LPO_OK;
    if (!lpo_dtype_parse(p->weights, out) ||
        (*out != LPO_DT_FP8 && *out != LPO_DT_FP8_B128 && !lpo_weight_native_block(*out)))
        return lpo_errorf(LPO_E_CONFIG,
                          "kbench.weights=%s: auto, fp8, fp8_b128, q8_0, q4_0, q4_1, q4_k, q5_k or q6_k",
                          p->weights);
    if (kind != LPO_OP_LINEAR && kind != LPO_OP_LM_HEAD)
        return lpo_errorf(LPO_E_CONFIG, "kbench.weights=%s applies to kbench.case=linear, lm_head or linears",
                          p->weights);
    return LPO_OK;
}

lpo_status lpo__kb_op_case_run(lpo_kbench *kb, const lpo_node *cfg, const kb_params *p, const run_opts *ro,
                               lpo_op_kind kind) {
    const op_case *oc = case_of(kind);
    if (is_vision(kind)) {
        lpo_dtype dt, wdt;
        lpo_op op;
        lpo_op_tensor w[3];
        memset(&op, 0, sizeof op);
        lpo_status st = op_dtype(p, ro->cuda, &dt);
        if (st == LPO_OK) st = weights_dtype(p, kind, dt, &wdt); /* refuses kbench.weights here */
        if (st == LPO_OK) st = vision_op(kind, p, dt, &op, w);
        int64_t past = 0, nn = op.m > 0 ? op.m : 1;
        const lpo_step step = {1, &past, &nn, 1, 0};
        if (st == LPO_OK) st = run_op_case(kb, cfg, ro, p, &op, dt, &step, lpo_op_kind_name(kind), "");
        return st;
    }
    lpo_model_spec spec;
    lpo_dtype dt;
    int seqs = 1;
    lpo_dtype wdt;
    lpo_status st = op_dtype(p, ro->cuda, &dt);
    if (st == LPO_OK) st = weights_dtype(p, kind, dt, &wdt);
    if (st == LPO_OK) st = case_spec(kind, p, dt, &spec, &seqs);
    if (st != LPO_OK) return st;
    int64_t *past = calloc(2 * (size_t)seqs, sizeof *past);
    if (!past) return lpo_errorf(LPO_E_NOMEM, "kbench: out of memory");
    int64_t *nn = past + seqs;
    const int positioned = kind == LPO_OP_ROPE || kind == LPO_OP_ATTENTION || kind == LPO_OP_MLA_ATTENTION;
    for (int i = 0; i < seqs; i++) past[i] = positioned ? p->context : 0, nn[i] = p->m / seqs;
    const lpo_step step = {seqs, past, nn, 1, kind == LPO_OP_SAMPLE};
    const lpo_dtype_lookup held = {(void *)&wdt, lpo_dtype_lookup_uniform},
                           vec = {(void *)&dt, lpo_dtype_lookup_uniform};
    const int comm = lpo_op_kind_cat(kind) == LPO_CAT_COMM;
    const lpo_oplist_opts o = {dt, dt, &held, &vec, comm ? 2 : 1};
    lpo_oplist l = {0};
    st = lpo_oplist_build(&spec, &step, &o, &l);
    long at = -1;
    for (size_t i = 0; st == LPO_OK && at < 0 && i < l.n_ops; i++)
        if (l.ops[i].role == oc->role && l.ops[i].kind == kind) at = (long)i;
    if (st == LPO_OK && at < 0)
        st = lpo_errorf(LPO_E_INTERNAL, "kbench: the op list has no %s op", lpo_op_kind_name(kind));
    if (st == LPO_OK) {
        l.ops[at].name = lpo_op_kind_name(kind); /* errors name the case, not "layers.0.mlp.down" */
        if (comm) lpo_op_single_rank(&l.ops[at]);
        st = run_op_case(kb, cfg, ro, p, &l.ops[at], dt, &step, lpo_op_kind_name(kind), "");
    }
    lpo_oplist_free(&l);
    free(past);
    return st;
}

/* ---- linears: the linear layers of a model ---- */
lpo_status lpo__kb_linears_run(lpo_kbench *kb, const lpo_node *cfg, const kb_params *p, const run_opts *ro) {
    const lpo_node *mcfg = lpo_node_at(cfg, "model");
    if (!mcfg) return lpo_errorf(LPO_E_CONFIG, "kbench.case=linears needs a model (e.g. model=llama3.1-8b)");
    lpo_dtype dt, wdt;
    lpo_status st = op_dtype(p, ro->cuda, &dt);
    if (st == LPO_OK) st = weights_dtype(p, LPO_OP_LINEAR, dt, &wdt);
    if (st == LPO_OK) st = need_pos("m", p->m);
    if (st != LPO_OK) return st;
    lpo_model *model = NULL;
    if ((st = lpo_model_open(mcfg, &model)) != LPO_OK)
        return lpo_error_context(st, "kbench.case=linears needs a model preset (e.g. model=llama3.1-8b)");
    const lpo_model_spec spec = *lpo_model_get_spec(model);
    lpo_model_close(model);
    int64_t past = 0, nn = p->m;
    const lpo_step step = {1, &past, &nn, 1, 0};
    const lpo_dtype_lookup held = {(void *)&wdt, lpo_dtype_lookup_uniform},
                           vec = {(void *)&dt, lpo_dtype_lookup_uniform};
    const lpo_oplist_opts o = {dt, dt, &held, &vec, 0};
    lpo_oplist l = {0};
    st = lpo_oplist_build(&spec, &step, &o, &l);
    // each linear of layer 0, then lm_head: a row named "linear" / "lm_head", its role before its shape
    for (size_t i = 0; st == LPO_OK && i < l.n_ops; i++) {
        const lpo_op *op = &l.ops[i];
        if (!((op->kind == LPO_OP_LINEAR && op->layer == 0) || op->kind == LPO_OP_LM_HEAD)) continue;
        st = run_op_case(kb, cfg, ro, p, op, dt, &step, lpo_op_kind_name(op->kind),
                         lpo_op_role_name(op->role));
        if (st != LPO_OK) st = lpo_error_context(st, "linear %s", lpo_op_role_name(op->role));
    }
    lpo_oplist_free(&l);
    return st;
}
