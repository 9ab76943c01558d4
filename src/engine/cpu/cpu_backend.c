/* The CPU reference backend: executes op lists in plain C, float32 throughout, OpenMP across rows, with the
 * kernels of cpu_kernels.h.
 *
 * Everything lives in one arena allocated at init: the weights of every op (converted to f32 once with
 * lpo_weight_convert, stacked weights such as q|k|v concatenated by rows, biases after them), the
 * activation buffers sized for the largest step, the logits and ids of a step, the KV cache
 * [layer][slot][position][n_kv_heads * head_dim] for K and for V (MLA: one cache of the latent and the
 * rotated key [layer][slot][position][kv_lora_rank + qk_rope]), the RoPE cos/sin tables, per-thread
 * attention scratch, and the sampling state of every slot (parameters, stream, draw counter, seen-token
 * bitmap, last sampled id). forward() allocates nothing.
 *
 * Plans: with fusion on, a residual add and the RMSNorm that follows it run as one group (one pass per
 * row, lpo_cpu_add_rmsnorm: the same arithmetic, bit-identical to the unfused plan).
 *
 * Every reduction (dot products, norms, softmax) runs in a fixed order that does not depend on how many
 * tokens or sequences share a step, so a batch gives bit-identical results to one sequence at a time.
 *
 * Tensor parallel (engine.tp > 1, for validation on the CPU): each rank is a context on its own engine
 * thread holding its parts of the split weights; the collectives meet in a host communicator (cpu_comm)
 * where every rank sums the ranks' buffers in rank order, so every rank holds the same result. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/cpu/cpu_kernels.h"
#include "lpo/backend.h"
#include "lpo/gguf.h"

typedef struct {
    lpo_sampling p;
    uint64_t stream, step; /* draws so far */
    int32_t last_id;       /* the last sampled id (the next chained decode token) */
    int set;
} slot_sampling;

/* The ranks' meeting place: a barrier that an abort opens, and each rank's buffer of the collective. */
typedef struct {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, aborted;
    uint64_t gen;
    const float *part[LPO_TP_MAX];
} cpu_comm;

typedef struct {
    lpo_backend_init cfg;
    lpo_model_spec spec;
    lpo_arena arena;
    int tp, rank;           /* tensor parallel: ranks and this one (tp 1: none) */
    cpu_comm *comm;         /* tp > 1 */
    float *tp_scratch;      /* [max_step_tokens * hidden] an all-reduce's sums */
    lpo_comm_times *ctimes; /* collective timing (comm_timing on): the last timed step's */
    int comm_on, comm_k, comm_timed;
    int n_threads;         /* the most threads a step may use (sizes the per-thread scratch) */
    int nt;                /* threads of the current step (<= n_threads) */
    int auto_threads;      /* infer.threads = 0: fewer threads while other work keeps the cores busy */
    lpo_threads_auto load; /* this engine's share of the load average (lpo_threads_pick) */
    int n_cpus;
    /* per op of the reference list (the op list of any step shape has the same ops in the same order, plus
     * SAMPLE at the end when it samples): role and layer to check, weights */
    size_t n_ops;
    lpo_op_role *op_role;
    int *op_layer;
    float **op_w;    /* [n_ops] weights of the op (stacked), NULL when the op has none */
    float **op_bias; /* [n_ops] biases (stacked) or NULL */
    size_t weight_bytes;
    /* activations, sized for max_step_tokens rows */
    float *buf[LPO_BUF_COUNT];
    int32_t *ids;               /* [max_step_tokens] sampled ids of a step */
    float *kcache, *vcache;     /* [n_layers][max_seqs][max_context][kvd] */
    float *rope_cos, *rope_sin; /* [max_context][head_dim / 2], attention scaling folded in */
    float *scores;              /* [n_threads][max_context] */
    float *mla_scratch;         /* MLA: lpo_cpu_mla_scratch_floats for a step */
    float *moe_scratch;         /* MoE: router logits [T][E], or the experts' scratch for T tokens */
    int32_t *moe_rows;          /* MoE: [T] the tokens of one expert */
    int32_t *route_ids;         /* MoE: the route_ids buffer [T][top_k] (int32; buf[] holds the f32 ones) */
    int32_t *tokens;            /* [max_step_tokens] the step's tokens (chained decode: gathered here) */
    /* sampling */
    slot_sampling *sampling; /* [max_seqs] */
    uint32_t *seen;          /* [max_seqs][seen_words] tokens each slot has processed */
    int64_t seen_words;
    float *sample_row; /* [vocab] a logits row being sampled (the step's logits stay intact) */
    lpo_sample_scratch *sample_scratch;
    /* [max_step_tokens] each logits row's sampling parameters, stream, counter, seen set of a step */
    lpo_sampling *row_samp;
    uint64_t *row_stream, *row_step;
    const uint32_t **row_seen;
    lpo_group_callback cb;
    void *cb_ud;
    /* MoE routing statistics (lpo_moe_stats): [2][n_layers], [2][n_layers], [2][n_layers][n_experts] */
    uint64_t *moe_steps, *moe_distinct, *moe_pairs;
    uint8_t *moe_hit; /* [n_experts] scratch of one tally */
} cpu_ctx;

/* Threads for the next step. With infer.threads = 0 the step uses the cores that other work leaves free
 * (lpo_threads_pick: a barrier whose thread was preempted costs a scheduler time slice; decode ran 20x
 * slower with 2 threads on 2 vCPUs when one was busy). Results never depend on the thread count. */
static void pick_threads(cpu_ctx *c) {
    c->nt = c->auto_threads ? lpo_threads_pick(&c->load, c->n_threads, c->n_cpus) : c->n_threads;
}

/* ---- op execution: one launch per op kind, two binders --------------------------------------------------
 * A step's forward and run_op run every op through the same launch function of its kind (launches[]); they
 * differ only in where the operands live: the step's buffers, weights, KV cache and slot state (bind_step)
 * or the caller's host data (cpu_run_op). Adding an op kind: its kernel (cpu_kernels.c) and one row here. */
typedef struct {
    const float *in[LPO_OP_MAX_IN]; /* activations read (in-place ops: in[0] == out) */
    float *out;                     /* out[0] (SAMPLE: unused) */
    const float *W, *B;             /* stacked weights, biases (NULL when none) */
    float *kc, *vc;                 /* ATTENTION: one layer's cache [slots][max_context][kvd] */
    int64_t max_context;
    float *scores; /* ATTENTION: [nt][max_context] scratch */
    const int32_t *tok_slot;
    const int64_t *tok_pos;
    const float *cos_t, *sin_t; /* ROPE: [max_context][head_dim / 2] */
    const int32_t *tokens;      /* EMBED: [m] */
    int32_t *expert_ids;        /* ROUTER: written [m][top_k]; EXPERTS: read */
    float *moe_scratch;         /* ROUTER: logits [m][E]; EXPERTS: lpo_cpu_experts_scratch_floats */
    int32_t *moe_rows;          /* EXPERTS: [m] */
    int nt;                     /* threads */
    /* SAMPLE: row r (mask[r] set, mask NULL = every row) draws with samp[r], stream[r], step[r], seen[r]
     * (NULL: no seen set) from a copy of its logits in row; rows holding NaN/Inf are refused */
    const lpo_sampling *samp;
    const uint64_t *stream, *step;
    const uint32_t *const *seen;
    const uint8_t *mask;
    float *row;
    lpo_sample_scratch *scratch;
    int32_t *ids;
    /* ALL_REDUCE, ALL_GATHER of a tensor-parallel step (NULL comm: one rank) */
    cpu_comm *comm;
    int rank;
    float *tp_scratch;
    const char *volatile *progress;
    lpo_comm_times
        *ctimes; /* collective timing on: each collective's time goes to ctimes->coll_ms[*comm_k] */
    int *comm_k;
    float *vscratch; /* vision kinds: lpo_cpu_*_scratch_floats of the op (vision_scratch_floats) */
} cpu_args;

typedef lpo_status (*cpu_launch_fn)(const lpo_op *op, const cpu_args *a);

static lpo_status launch_embed(const lpo_op *op, const cpu_args *a) {
    lpo_cpu_embed(a->out, a->W, a->tokens, op->m, op->n);
    return LPO_OK;
}
static lpo_status launch_rmsnorm(const lpo_op *op, const cpu_args *a) {
    lpo_cpu_rmsnorm(a->out, a->in[0], a->W, op->m, op->n, op->eps, a->nt);
    return LPO_OK;
}
static lpo_status launch_linear(const lpo_op *op, const cpu_args *a) { /* LINEAR and LM_HEAD */
    lpo_cpu_matmul(a->out, a->in[0], a->W, a->B, op->m, op->n, op->k, a->nt);
    return LPO_OK;
}
static lpo_status launch_qk_norm(const lpo_op *op, const cpu_args *a) {
    lpo_cpu_qk_norm(a->out, a->W, a->W + op->head_dim, op->m, op->n_heads, op->n_kv_heads, op->head_dim,
                    op->eps, a->nt);
    return LPO_OK;
}
static lpo_status launch_rope(const lpo_op *op, const cpu_args *a) {
    lpo_cpu_rope(a->out, a->cos_t, a->sin_t, a->tok_pos, op->m, op->n_heads, op->n_kv_heads, op->head_dim,
                 a->nt);
    return LPO_OK;
}
/* one form on the CPU for both variants: append k, v (through fp8 when the list's cache is fp8), then
 * attend */
static lpo_status launch_attention(const lpo_op *op, const cpu_args *a) {
    lpo_cpu_kv_append(a->kc, a->vc, a->in[0], a->tok_slot, a->tok_pos, op->m, op->n_heads, op->n_kv_heads,
                      op->head_dim, a->max_context, op->in[1].dtype == LPO_DT_FP8);
    lpo_cpu_attention(a->out, a->in[0], a->kc, a->vc, a->tok_slot, a->tok_pos, op->m, op->n_heads,
                      op->n_kv_heads, op->head_dim, a->max_context, op->window, a->scores, a->nt);
    return LPO_OK;
}
/* MLA: the latent cache (a->kc: [slots][max_context][r + dr]), weights kv_a_layernorm (r) then kv_b; the
 * scratch in a->scores (lpo_cpu_mla_scratch_floats); decode ops run the absorbed form, prefill the expanded.
 */
static lpo_status launch_mla_attention(const lpo_op *op, const cpu_args *a) {
    const int64_t r = op->kv_rank, dr = op->rope_dim, dn = op->head_dim - dr;
    lpo_cpu_mla_attention(a->out, a->in[0], a->in[2], a->kc, a->W, a->W + r, a->cos_t, a->sin_t, a->tok_slot,
                          a->tok_pos, op->m, op->n_heads, dn, dr, op->v_head_dim, r, a->max_context, op->eps,
                          op->rope_interleave, op->attn_scale, op->attn_variant == LPO_ATTN_DECODE, a->scores,
                          a->nt);
    return LPO_OK;
}
static lpo_status launch_swiglu(const lpo_op *op, const cpu_args *a) {
    lpo_cpu_swiglu(a->out, a->in[0], op->m, op->n, a->nt);
    return LPO_OK;
}
static lpo_status launch_geglu(const lpo_op *op, const cpu_args *a) {
    lpo_cpu_geglu(a->out, a->in[0], op->m, op->n, a->nt);
    return LPO_OK;
}
static lpo_status launch_add(const lpo_op *op, const cpu_args *a) { /* out (= in[0]) += in[1] */
    lpo_cpu_add(a->out, a->in[1], op->m * op->n);
    return LPO_OK;
}
/* The router's weights: G (E, h), then the score-correction bias (E,) when it has one (noaux_tc). */
static lpo_status launch_router(const lpo_op *op, const cpu_args *a) {
    const int grouped = op->topk_method != LPO_TOPK_GREEDY;
    const lpo_cpu_routing r = {op->scoring,
                               op->topk_method,
                               grouped ? op->n_group : 1,
                               grouped ? op->topk_group : 1,
                               op->norm_topk,
                               op->route_scale > 0 ? op->route_scale : 1.0f,
                               op->n_w > 1 ? a->W + op->n_experts * op->k : NULL};
    if (r.n_group < 1 || r.n_group > LPO_CPU_MAX_GROUPS || op->n_experts % r.n_group || r.topk_group < 1 ||
        r.topk_group > r.n_group || op->top_k > r.topk_group * (op->n_experts / r.n_group))
        return lpo_errorf(
            LPO_E_INVALID,
            "cpu backend: op '%s': %lld of %lld experts in %lld groups keeping %lld: not a routing", op->name,
            (long long)op->top_k, (long long)op->n_experts, (long long)r.n_group, (long long)r.topk_group);
    lpo_cpu_route(a->out, a->expert_ids, a->in[0], a->W, a->moe_scratch, op->m, op->n_experts, op->k,
                  op->top_k, &r, a->nt);
    return LPO_OK;
}
/* The chosen experts are checked (in range, distinct per token) before any weight is read by them. */
static lpo_status launch_experts(const lpo_op *op, const cpu_args *a) {
    const int64_t k = op->top_k;
    for (int64_t t = 0; t < op->m; t++) // token t's k experts
        for (int64_t j = 0; j < k; j++) {
            const int32_t e = a->expert_ids[t * k + j];
            int dup = 0;
            for (int64_t i = 0; i < j; i++) dup |= a->expert_ids[t * k + i] == e;
            if (e < 0 || e >= op->n_experts || dup)
                return lpo_errorf(LPO_E_INVALID,
                                  "cpu backend: op '%s': token %lld is routed to expert %d %s (%lld experts)",
                                  op->name, (long long)t, (int)e, dup ? "twice" : "out of range",
                                  (long long)op->n_experts);
        }
    lpo_cpu_experts(a->out, a->in[0], a->in[1], a->expert_ids, a->W, op->m, op->n, op->k, op->n_experts, k,
                    a->moe_scratch, a->moe_rows, a->nt);
    return LPO_OK;
}
/* The sampled id of each row whose mask is set (docs/sampling.md), from a copy of its logits; rows holding
 * NaN/Inf are refused (LPO_E_NUMERIC) rather than sampled. */
static lpo_status launch_sample(const lpo_op *op, const cpu_args *a) {
    const int64_t V = op->n;
    for (int64_t r = 0; r < op->m; r++) { // row r (V,) -> ids[r]
        a->ids[r] = -1;
        if (a->mask && !a->mask[r]) continue;
        const float *row = a->in[0] + r * V;
        for (int64_t v = 0; v < V; v++)
            if (!isfinite(row[v]))
                return lpo_errorf(LPO_E_NUMERIC, "cpu backend: logits row %lld holds %g at id %lld",
                                  (long long)r, (double)row[v], (long long)v);
        memcpy(a->row, row, (size_t)V * sizeof(float));
        a->ids[r] = lpo_sample_row(&a->samp[r], a->stream[r], a->step[r], a->seen[r], a->row, V, a->scratch);
    }
    return LPO_OK;
}

/* The ranks' barrier: every rank arrives, then all go on; an abort (the engine's timeout) opens it with an
 * error naming the op. */
static lpo_status comm_barrier(cpu_comm *m, int rank, const lpo_op *op) {
    pthread_mutex_lock(&m->mu);
    const uint64_t gen = m->gen;
    if (!m->aborted && ++m->arrived == m->n) {
        m->arrived = 0;
        m->gen++;
        pthread_cond_broadcast(&m->cv);
    } else {
        while (gen == m->gen && !m->aborted) pthread_cond_wait(&m->cv, &m->mu);
    }
    const int aborted = m->aborted;
    pthread_mutex_unlock(&m->mu);
    if (aborted)
        return lpo_errorf(LPO_E_TIMEOUT, "cpu backend rank %d: %s (%s): the communicator was aborted", rank,
                          op->name, lpo_op_kind_name(op->kind));
    return LPO_OK;
}

/* Collectives. One rank (run_op, engine.tp=1): an all-reduce leaves its buffer as it is (in place), an
 * all-gather of one part is a copy. Several ranks: through the communicator; every rank sums the ranks'
 * buffers in rank order (so all hold the same bits), or copies every rank's vocabulary part into its
 * columns of the logits. */
static lpo_status run_collective(const lpo_op *op, const cpu_args *a) {
    if (op->participants > 1 && !a->comm)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "cpu backend: op '%s' (%s) joins %d ranks; this context runs one (engine.tp=1)",
                          op->name, lpo_op_kind_name(op->kind), op->participants);
    if (op->participants <= 1) {
        if (op->kind == LPO_OP_ALL_GATHER && a->out != a->in[0]) // [m, n] part -> [m, n] whole
            memcpy(a->out, a->in[0], (size_t)op->m * (size_t)op->n * sizeof(float));
        return LPO_OK;
    }
    cpu_comm *m = a->comm;
    const int P = op->participants;
    if (a->progress) a->progress[a->rank] = op->name;
    m->part[a->rank] = op->kind == LPO_OP_ALL_REDUCE ? a->out : a->in[0];
    lpo_status st = comm_barrier(m, a->rank, op);
    if (st != LPO_OK) return st;
    if (op->kind == LPO_OP_ALL_REDUCE) {
        const int64_t n = op->m * op->n;
        for (int64_t i = 0; i < n; i++) { // element i: sum over ranks 0..P-1, in that order
            float sum = 0;
            for (int q = 0; q < P; q++) sum += m->part[q][i];
            a->tp_scratch[i] = sum;
        }
        st = comm_barrier(m, a->rank, op); /* every rank has read every buffer */
        if (st == LPO_OK) memcpy(a->out, a->tp_scratch, (size_t)n * sizeof(float));
        return st;
    }
    const int64_t V = op->n, Vr = op->in[0].shape[1];
    for (int q = 0; q < P; q++)
        for (int64_t r = 0; r < op->m; r++) // rank q's row r (Vr,) -> logits[r, q Vr .. (q+1) Vr)
            memcpy(a->out + r * V + q * Vr, m->part[q] + r * Vr, (size_t)Vr * sizeof(float));
    return comm_barrier(m, a->rank, op);
}

/* A collective, timed on the host clock when collective timing is on (its wait for the other ranks in it). */
static lpo_status launch_collective(const lpo_op *op, const cpu_args *a) {
    if (!a->ctimes || op->participants <= 1) return run_collective(op, a);
    const uint64_t t0 = lpo_now_ns();
    const lpo_status st = run_collective(op, a);
    if (*a->comm_k < LPO_COMM_MAX) a->ctimes->coll_ms[(*a->comm_k)++] = (double)(lpo_now_ns() - t0) / 1e6;
    return st;
}

static lpo_status cpu_comm_timing(void *vctx, int on) {
    cpu_ctx *c = vctx;
    if (on && !c->ctimes && !(c->ctimes = calloc(1, sizeof *c->ctimes)))
        return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    c->comm_on = on != 0;
    c->comm_timed = 0;
    return LPO_OK;
}

static lpo_status cpu_comm_read(void *vctx, lpo_comm_times *out) {
    cpu_ctx *c = vctx;
    if (!c->comm_timed || !c->ctimes)
        return lpo_errorf(LPO_E_INVALID, "cpu backend: no step was timed (collective timing is off)");
    *out = *c->ctimes;
    return LPO_OK;
}

static lpo_status cpu_tp_open(int tp, int first_device, void **shared) {
    (void)first_device;
    cpu_comm *m = calloc(1, sizeof *m);
    if (!m) return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    m->n = tp;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    *shared = m;
    return LPO_OK;
}

static void cpu_tp_abort(void *shared) {
    cpu_comm *m = shared;
    pthread_mutex_lock(&m->mu);
    m->aborted = 1;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static void cpu_tp_close(void *shared) {
    cpu_comm *m = shared;
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* ---- vision kinds (docs/vision.md) ---- */
/* Scratch floats a vision op needs on nt threads (0 for the other kinds). */
static int64_t vision_scratch_floats(const lpo_op *op, int nt) {
    switch (op->kind) {
    case LPO_OP_CONV2D:
        return lpo_cpu_conv2d_scratch_floats(op->ksize ? op->k / (op->ksize * op->ksize) : 0, op->ksize);
    case LPO_OP_ATTN_RELPOS:
        return lpo_cpu_attn_relpos_scratch_floats(op->grid_h, op->window, op->head_dim, nt);
    case LPO_OP_ATTN_PREFIX:
        return op->m * op->head_dim +
               lpo_cpu_attn_prefix_scratch_floats(op->m, op->n_heads, op->n_kv_heads, op->head_dim, nt);
    case LPO_OP_POS_EMBED:
        return op->n_w ? lpo_cpu_pos_embed_scratch_floats(op->w[0].shape[1], op->grid_h, op->n) : 0;
    default: return 0;
    }
}
static lpo_status need_scratch(const lpo_op *op, const cpu_args *a) {
    if (a->vscratch || vision_scratch_floats(op, a->nt) == 0) return LPO_OK;
    return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: op '%s' (%s) runs through run_op only", op->name,
                      lpo_op_kind_name(op->kind));
}
static lpo_status launch_conv2d(const lpo_op *op, const cpu_args *a) {
    lpo_status st = need_scratch(op, a);
    if (st != LPO_OK) return st;
    lpo_cpu_conv2d(a->out, a->in[0], a->W, a->B, op->grid_h, op->grid_w, op->k / (op->ksize * op->ksize),
                   op->n, op->ksize, op->stride, op->pad, a->vscratch, a->nt);
    return LPO_OK;
}
static lpo_status launch_layernorm(const lpo_op *op, const cpu_args *a) {
    lpo_cpu_layernorm(a->out, a->in[0], a->W, a->B, op->m, op->n, op->eps, a->nt);
    return LPO_OK;
}
static lpo_status launch_gelu(const lpo_op *op, const cpu_args *a) { /* in place: out holds the input */
    lpo_cpu_gelu(a->out, op->m * op->n, a->nt);
    return LPO_OK;
}
/* weights stacked: rel_pos_h (L, hd) | rel_pos_w (L, hd) | the qkv bias (3 C) */
static lpo_status launch_attn_relpos(const lpo_op *op, const cpu_args *a) {
    lpo_status st = need_scratch(op, a);
    if (st != LPO_OK) return st;
    const int64_t L = op->w[0].shape[0], hd = op->head_dim;
    lpo_cpu_attn_relpos(a->out, a->in[0], a->W, a->W + L * hd, L, a->W + 2 * L * hd, op->grid_h, op->n_heads,
                        hd, op->window, a->vscratch, a->nt);
    return LPO_OK;
}
/* cos / sin of positions 0..m-1 at the op's rotary base (lpo_rope_inv_freq's HF arithmetic), then attention
 */
static lpo_status launch_attn_prefix(const lpo_op *op, const cpu_args *a) {
    lpo_status st = need_scratch(op, a);
    if (st != LPO_OK) return st;
    const int64_t half = op->head_dim / 2;
    lpo_model_spec rs;
    memset(&rs, 0, sizeof rs);
    rs.head_dim = op->head_dim;
    rs.rope.theta = op->rope_theta;
    float inv[512], scale;
    if (half > 512)
        return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: op '%s': head_dim %lld", op->name,
                          (long long)op->head_dim);
    if ((st = lpo_rope_inv_freq(&rs, inv, &scale)) != LPO_OK) return st;
    float *cos_t = a->vscratch, *sin_t = cos_t + op->m * half;
    lpo_cpu_rope_tables(cos_t, sin_t, inv, scale, op->m, half);
    lpo_cpu_attn_prefix(a->out, a->in[0], cos_t, sin_t, op->m, op->n_heads, op->n_kv_heads, op->head_dim,
                        op->prefix, sin_t + op->m * half, a->nt);
    return LPO_OK;
}
static lpo_status launch_pos_embed(const lpo_op *op, const cpu_args *a) { /* in place */
    lpo_status st = need_scratch(op, a);
    if (st != LPO_OK) return st;
    lpo_cpu_pos_embed(a->out, a->W, op->w[0].shape[1], op->grid_h, op->n, a->vscratch, a->nt);
    return LPO_OK;
}

/* One row per op kind: the launch both paths call. */
static const cpu_launch_fn launches[LPO_OP_KIND_COUNT] = {
    [LPO_OP_EMBED] = launch_embed,
    [LPO_OP_RMSNORM] = launch_rmsnorm,
    [LPO_OP_LINEAR] = launch_linear,
    [LPO_OP_QK_NORM] = launch_qk_norm,
    [LPO_OP_ROPE] = launch_rope,
    [LPO_OP_ATTENTION] = launch_attention,
    [LPO_OP_SWIGLU] = launch_swiglu,
    [LPO_OP_GEGLU] = launch_geglu,
    [LPO_OP_ADD] = launch_add,
    [LPO_OP_LM_HEAD] = launch_linear,
    [LPO_OP_SAMPLE] = launch_sample,
    [LPO_OP_ROUTER] = launch_router,
    [LPO_OP_EXPERTS] = launch_experts,
    [LPO_OP_ALL_REDUCE] = launch_collective,
    [LPO_OP_ALL_GATHER] = launch_collective,
    [LPO_OP_CONV2D] = launch_conv2d,
    [LPO_OP_LAYERNORM] = launch_layernorm,
    [LPO_OP_GELU] = launch_gelu,
    [LPO_OP_ATTN_RELPOS] = launch_attn_relpos,
    [LPO_OP_ATTN_PREFIX] = launch_attn_prefix,
    [LPO_OP_POS_EMBED] = launch_pos_embed,
    [LPO_OP_MLA_ATTENTION] = launch_mla_attention,
};

static lpo_status launch(const lpo_op *op, const cpu_args *a) {
    if ((unsigned)op->kind >= LPO_OP_KIND_COUNT || !launches[op->kind])
        return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: op '%s' has kind '%s' it cannot run", op->name,
                          lpo_op_kind_name(op->kind));
    return launches[op->kind](op, a);
}

/* The step's tokens (chained: each sequence's last sampled id) and the seen-token bitmaps. */
static const int32_t *step_tokens(cpu_ctx *c, const lpo_step_data *d, int64_t T) {
    const int32_t *tok = d->tokens;
    if (!tok) {
        for (int i = 0; i < d->n_seqs; i++) c->tokens[i] = c->sampling[d->slots[i]].last_id;
        tok = c->tokens;
    }
    for (int64_t t = 0; t < T; t++) // token t of slot tok_slot[t] -> its seen bit
        c->seen[(size_t)d->tok_slot[t] * (size_t)c->seen_words + (size_t)tok[t] / 32] |= 1u << (tok[t] % 32);
    return tok;
}

/* The operands of op i of a step: the step's buffers, the op's weights, its layer's cache, the slots'
 * sampling state. LM_HEAD over fewer rows than tokens reads each sequence's last row, gathered into the
 * free tmp buffer first so that the blocked matmul applies. */
static void bind_step(cpu_ctx *c, const lpo_oplist *l, size_t i, const lpo_step_data *d,
                      const int32_t *tokens, cpu_args *a) {
    const lpo_op *op = &l->ops[i];
    memset(a, 0, sizeof *a);
    for (int j = 0; j < op->n_in; j++) a->in[j] = c->buf[op->in[j].buf];
    a->out = c->buf[op->out[0].buf];
    if (i < c->n_ops) a->W = c->op_w[i], a->B = c->op_bias[i];
    a->nt = c->nt;
    a->tok_slot = d->tok_slot;
    a->tok_pos = d->tok_pos;
    a->tokens = tokens;
    a->cos_t = c->rope_cos;
    a->sin_t = c->rope_sin;
    a->scores = c->scores;
    a->max_context = c->cfg.max_context;
    a->expert_ids = c->route_ids;
    a->moe_scratch = c->moe_scratch;
    a->moe_rows = c->moe_rows;
    a->comm = c->comm;
    a->rank = c->rank;
    a->tp_scratch = c->tp_scratch;
    a->progress = c->cfg.tp_progress;
    a->ctimes = c->comm_on ? c->ctimes : NULL;
    a->comm_k = &c->comm_k;
    if (op->kind == LPO_OP_ATTENTION || op->kind == LPO_OP_MLA_ATTENTION) {
        const size_t layer = (size_t)op->layer * (size_t)c->cfg.max_seqs * (size_t)c->cfg.max_context *
                             (size_t)lpo_buf_width_kv_tp(&c->spec, c->tp);
        a->kc = c->kcache + layer;
        a->vc = c->vcache ? c->vcache + layer : NULL;
        if (op->kind == LPO_OP_MLA_ATTENTION) a->scores = c->mla_scratch;
    }
    if (op->kind == LPO_OP_LM_HEAD && op->m != l->n_tokens) {
        const int64_t h = op->k;
        float *rows = c->buf[LPO_BUF_TMP];
        int64_t off = 0;
        for (int s = 0; s < d->n_seqs; s++) { // last token of sequence s (h,) -> rows[s]
            off += d->n_new[s];
            memcpy(rows + s * h, a->in[0] + (off - 1) * h, (size_t)h * sizeof(float));
        }
        a->in[0] = rows;
    }
    if (op->kind == LPO_OP_SAMPLE) {
        const lpo_sampling greedy = {0, 0, 1, 1, 0};
        for (int64_t r = 0; r < op->m; r++) { // row r: sequence r's slot
            if (r >= d->n_seqs) {             /* not a sequence's row: greedy, stateless */
                c->row_samp[r] = greedy;
                c->row_stream[r] = c->row_step[r] = 0;
                c->row_seen[r] = NULL;
                continue;
            }
            const int slot = d->slots[r];
            const slot_sampling *ss = &c->sampling[slot];
            c->row_samp[r] = ss->set ? ss->p : greedy;
            c->row_stream[r] = ss->stream;
            c->row_step[r] = ss->step;
            c->row_seen[r] = c->row_samp[r].repetition_penalty != 1
                                 ? c->seen + (size_t)slot * (size_t)c->seen_words
                                 : NULL;
        }
        a->samp = c->row_samp;
        a->stream = c->row_stream;
        a->step = c->row_step;
        a->seen = (const uint32_t *const *)c->row_seen;
        a->mask = d->sample_mask;
        a->row = c->sample_row;
        a->scratch = c->sample_scratch;
        a->ids = c->ids;
    }
}

/* Runs op i of a step through its launch; after SAMPLE, each drawing slot's counter and last id advance. */
static lpo_status run_op_at(cpu_ctx *c, const lpo_oplist *l, size_t i, const lpo_step_data *d,
                            const int32_t *tokens) {
    const lpo_op *op = &l->ops[i];
    cpu_args a;
    bind_step(c, l, i, d, tokens, &a);
    lpo_status st = launch(op, &a);
    if (st != LPO_OK || op->kind != LPO_OP_SAMPLE) return st;
    for (int64_t r = 0; r < op->m && r < d->n_seqs; r++) {
        if (d->sample_mask && !d->sample_mask[r]) continue;
        slot_sampling *ss = &c->sampling[d->slots[r]];
        ss->step++;
        ss->last_id = c->ids[r];
    }
    return LPO_OK;
}

/* Is ops [i, i+1] a residual add followed by the RMSNorm of its result (the one fusion of this backend)? */
static int add_then_norm(const lpo_oplist *l, size_t i) {
    return i + 1 < l->n_ops && l->ops[i].kind == LPO_OP_ADD && l->ops[i + 1].kind == LPO_OP_RMSNORM &&
           l->ops[i + 1].in[0].buf == l->ops[i].out[0].buf;
}

static lpo_status cpu_plan(void *vctx, const lpo_oplist *l, lpo_plan *out) {
    cpu_ctx *c = vctx;
    out->n_groups = 0;
    out->names_len = 0;
    for (size_t i = 0; i < l->n_ops;) {
        const uint32_t n = c->cfg.fusion && add_then_norm(l, i) ? 2 : 1;
        lpo_status st = lpo_plan_add(out, l, (uint32_t)i, n);
        if (st != LPO_OK) return st;
        i += n;
    }
    return LPO_OK;
}

/* The routing a router op just made (route_ids, m tokens x top_k) into the statistics of its layer and the
 * step's phase (1: a decode step). */
static void moe_tally(cpu_ctx *c, const lpo_op *op, int decode) {
    if (!c->moe_steps || op->layer < 0 || op->layer >= c->spec.n_layers) return;
    const int64_t E = c->spec.moe.n_experts, L = c->spec.n_layers, at = (int64_t)decode * L + op->layer;
    memset(c->moe_hit, 0, (size_t)E);
    uint64_t *pairs = c->moe_pairs + at * E, distinct = 0;
    for (int64_t i = 0; i < op->m * op->top_k; i++) { // pair i's expert
        const int32_t e = c->route_ids[i];
        if (e < 0 || e >= E) continue;
        pairs[e]++;
        distinct += !c->moe_hit[e];
        c->moe_hit[e] = 1;
    }
    c->moe_steps[at]++;
    c->moe_distinct[at] += distinct;
}

static lpo_status cpu_moe_stats(void *vctx, lpo_moe_stats *out, int reset) {
    cpu_ctx *c = vctx;
    if (!c->moe_steps) return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: the model has no MoE layer");
    const size_t nl = 2 * (size_t)c->spec.n_layers, np = nl * (size_t)c->spec.moe.n_experts;
    if (out) {
        memcpy(out->steps, c->moe_steps, nl * sizeof(uint64_t));
        memcpy(out->distinct, c->moe_distinct, nl * sizeof(uint64_t));
        memcpy(out->pairs, c->moe_pairs, np * sizeof(uint64_t));
    }
    if (reset) {
        memset(c->moe_steps, 0, nl * sizeof(uint64_t));
        memset(c->moe_distinct, 0, nl * sizeof(uint64_t));
        memset(c->moe_pairs, 0, np * sizeof(uint64_t));
    }
    return LPO_OK;
}

/* The step's given embedding rows over the EMBED op's output x [T][n] (row embed_row[i] = embeds[i]). */
static void put_embeds(float *x, int64_t n, int64_t T, const lpo_step_data *d) {
    for (int64_t i = 0; i < d->n_embeds; i++) // embeds[i] (n,) -> x[embed_row[i]] (n,)
        if (d->embed_row[i] >= 0 && d->embed_row[i] < T)
            memcpy(x + d->embed_row[i] * n, d->embeds + i * n, (size_t)n * sizeof *x);
}

static lpo_status run_step(cpu_ctx *c, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                           lpo_step_out *out) {
    const int64_t T = l->n_tokens;
    if (T > c->cfg.max_step_tokens || l->n_seqs > c->cfg.max_seqs)
        return lpo_errorf(
            LPO_E_RANGE,
            "cpu backend: step of %lld tokens / %d sequences exceeds the %lld / %d it was sized for",
            (long long)T, l->n_seqs, (long long)c->cfg.max_step_tokens, c->cfg.max_seqs);
    if (!d->tokens && T != d->n_seqs)
        return lpo_errorf(LPO_E_INVALID, "cpu backend: a chained step brings one token per sequence");
    for (int i = 0; i < d->n_seqs; i++)
        if (d->slots[i] < 0 || d->slots[i] >= c->cfg.max_seqs ||
            d->n_past[i] + d->n_new[i] > c->cfg.max_context)
            return lpo_errorf(LPO_E_RANGE,
                              "cpu backend: sequence %d (slot %d) would reach %lld positions "
                              "(max_context %lld)",
                              i, d->slots[i], (long long)(d->n_past[i] + d->n_new[i]),
                              (long long)c->cfg.max_context);
    const int32_t *tokens = step_tokens(c, d, T);
    const size_t n_ref = c->n_ops;
    int decode = T == d->n_seqs; /* every sequence brings one token */
    for (int i = 0; i < d->n_seqs; i++) decode &= d->n_new[i] == 1;
    for (size_t g = 0; g < p->n_groups; g++) {
        const lpo_plan_group *grp = &p->groups[g];
        if (c->cb) c->cb(c->cb_ud, l, p, g, 0);
        for (uint32_t k = 0; k < grp->count; k++) {
            const size_t i = grp->first + k;
            const lpo_op *op = &l->ops[i];
            if (op->kind != LPO_OP_SAMPLE &&
                (i >= n_ref || op->role != c->op_role[i] || op->layer != c->op_layer[i]))
                return lpo_errorf(LPO_E_INTERNAL,
                                  "cpu backend: op %zu '%s' does not match the model it was built for", i,
                                  op->name);
            if (grp->count == 2 && k == 0 && add_then_norm(l, i)) { /* fused: x += tmp; xn = rmsnorm(x) */
                const lpo_op *nrm = &l->ops[i + 1];
                lpo_cpu_add_rmsnorm(c->buf[op->out[0].buf], c->buf[op->in[1].buf], c->buf[nrm->out[0].buf],
                                    c->op_w[i + 1], op->m, op->n, nrm->eps, c->nt);
                break;
            }
            lpo_status st = run_op_at(c, l, i, d, tokens);
            if (st != LPO_OK) return st;
            if (op->kind == LPO_OP_ROUTER) moe_tally(c, op, decode);
            if (op->kind == LPO_OP_EMBED && d->n_embeds > 0) put_embeds(c->buf[op->out[0].buf], op->n, T, d);
        }
        if (c->cb) c->cb(c->cb_ud, l, p, g, 1);
    }
    if (out->logits)
        memcpy(out->logits, c->buf[LPO_BUF_LOGITS],
               (size_t)(l->n_logit_rows * c->spec.vocab_size) * sizeof(float));
    if (out->ids) memcpy(out->ids, c->ids, (size_t)l->n_logit_rows * sizeof *out->ids);
    return LPO_OK;
}

static lpo_status cpu_forward(void *vctx, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                              lpo_step_out *out) {
    cpu_ctx *c = vctx;
    if (!c->op_w)
        return lpo_errorf(LPO_E_INVALID, "cpu backend: an op-only context (no model) cannot run steps");
    pick_threads(c);
    const uint64_t t0 = lpo_now_ns();
    c->comm_k = 0;
    lpo_status r = run_step(c, l, p, d, out);
    if (c->comm_on && c->ctimes) {
        c->ctimes->step_ms = (double)(lpo_now_ns() - t0) / 1e6;
        c->ctimes->n = c->comm_k;
        c->comm_timed = r == LPO_OK;
    }
    lpo_threads_ran(&c->load, c->nt);
    return r;
}

static lpo_status cpu_set_sampling(void *vctx, int slot, const lpo_sampling *s, uint64_t stream) {
    cpu_ctx *c = vctx;
    if (slot < 0 || slot >= c->cfg.max_seqs)
        return lpo_errorf(LPO_E_RANGE, "cpu backend: slot %d out of range", slot);
    slot_sampling *ss = &c->sampling[slot];
    ss->p = *s;
    ss->stream = stream;
    ss->step = 0;
    ss->set = 1;
    memset(c->seen + (size_t)slot * (size_t)c->seen_words, 0, (size_t)c->seen_words * sizeof *c->seen);
    return LPO_OK;
}

/* ---- single ops --------------------------------------------------------------------------------------- */
static int cpu_supports_op(void *vctx, const lpo_op *op) {
    (void)vctx;
    if ((unsigned)op->kind >= LPO_OP_KIND_COUNT || !launches[op->kind] || op->m <= 0) return 0;
    if (op->kind == LPO_OP_SAMPLE) return op->n > 0 && op->n <= LPO_SAMPLE_MAX_VOCAB;
    if (op->kind == LPO_OP_ALL_REDUCE || op->kind == LPO_OP_ALL_GATHER) return op->participants <= 1;
    if (op->kind == LPO_OP_ROUTER || op->kind == LPO_OP_EXPERTS)
        return op->n_experts >= 1 && op->top_k >= 1 && op->top_k <= op->n_experts && op->n > 0 && op->k > 0;
    if (op->kind == LPO_OP_MLA_ATTENTION && op->n_in > 1 && op->in[1].dtype == LPO_DT_FP8)
        return 0;       /* the latent cache has no fp8 form (engine.kv_dtype=fp8 refuses MLA models) */
    switch (op->kind) { /* vision: the geometry the kernels assume */
    case LPO_OP_CONV2D:
        return op->ksize > 0 && op->stride > 0 && op->pad >= 0 && op->k % (op->ksize * op->ksize) == 0 &&
               op->grid_h + 2 * op->pad >= op->ksize && op->grid_w + 2 * op->pad >= op->ksize &&
               op->m == ((op->grid_h + 2 * op->pad - op->ksize) / op->stride + 1) *
                            ((op->grid_w + 2 * op->pad - op->ksize) / op->stride + 1) &&
               op->n_w >= 1;
    case LPO_OP_LAYERNORM: return op->n > 0 && op->n_w == 2;
    case LPO_OP_ATTN_RELPOS:
        return op->grid_h > 0 && op->grid_h == op->grid_w && op->m == op->grid_h * op->grid_w &&
               op->n_w == 3 && op->n_heads > 0 && op->head_dim > 0 && op->window >= 0 &&
               op->w[0].shape[0] > 0;
    case LPO_OP_ATTN_PREFIX:
        return op->n_heads > 0 && op->n_kv_heads > 0 && op->n_heads % op->n_kv_heads == 0 &&
               op->head_dim > 0 && op->head_dim % 2 == 0 && op->head_dim <= 1024 && op->prefix >= 0 &&
               op->prefix <= op->m && op->rope_theta > 0;
    case LPO_OP_POS_EMBED: /* the antialiased resize shrinks at most 15x (its taps fit 64) */
        return op->n_w == 1 && op->grid_h > 0 && op->grid_h == op->grid_w &&
               op->m == op->grid_h * op->grid_w && op->w[0].shape[1] > 0 &&
               op->w[0].shape[1] <= 15 * op->grid_h;
    default: return 1;
    }
}

static int64_t elems(const lpo_op_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* n floats at a 64-byte boundary, as the arena places weights (an unaligned matrix runs measurably slower:
 * kbench times ops alone on these copies) */
static float *alloc_aligned(int64_t n) {
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes);
}

/* Stacks an op's weights (rows) and biases into two fresh arrays, as the backend holds them. */
static lpo_status stack_weights(const lpo_op *op, const float *const *w, float **W, float **B) {
    int64_t nw = 0, nb = 0;
    for (int j = 0; j < op->n_w; j++) *(j < op->n_w - op->n_bias ? &nw : &nb) += elems(&op->w[j]);
    *W = alloc_aligned(nw);
    *B = op->n_bias ? alloc_aligned(nb) : NULL;
    if (!*W || (op->n_bias && !*B)) {
        free(*W);
        free(*B);
        return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory stacking the weights of '%s'", op->name);
    }
    float *dst = *W;
    for (int j = 0; j < op->n_w; j++) {
        if (j == op->n_w - op->n_bias) dst = *B;
        memcpy(dst, w[j], (size_t)elems(&op->w[j]) * sizeof(float));
        /* a weight held in fp8: the per-channel fp8 values of the data given, as the CUDA backend holds them
         * (the op checker compares both on the same quantized weights) */
        const lpo_dtype wd = op->w[j].dtype;
        if ((wd == LPO_DT_FP8 || wd == LPO_DT_FP8_B128) && op->w[j].ndim == 2 &&
            (wd == LPO_DT_FP8 ? lpo_fp8_roundtrip_rows : lpo_fp8_roundtrip_tiles)(dst, op->w[j].shape[0],
                                                                                  op->w[j].shape[1])) {
            free(*W);
            free(*B);
            return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory quantizing the weights of '%s'",
                              op->name);
        }
        /* a weight held in GGUF blocks (lpo_weight_native_block's types, rows of whole blocks): the values of
         * the data given quantized by the rules the CUDA backend quantizes them with (include/lpo/qblock.h)
         */
        const int64_t cols = op->w[j].ndim == 2 ? op->w[j].shape[1] : 0;
        lpo_status st = LPO_OK;
        if (lpo_weight_native_block(wd) && cols > 0 && cols % lpo_dtype_block(wd) == 0 &&
            (st = lpo_quantize_roundtrip(wd, dst, (uint64_t)elems(&op->w[j]))) != LPO_OK) {
            free(*W);
            free(*B);
            return lpo_error_context(st, "cpu backend: quantizing the weights of '%s'", op->name);
        }
        dst += elems(&op->w[j]);
    }
    return LPO_OK;
}

/* The operands of a single op on the caller's host data (lpo_op_io); an in-place op (out[0] is in[0]'s
 * buffer) first gets its input copied to the output. Scratch (attention scores, the sampled row, per-row
 * sampling state) is allocated here and freed by unbind_single. */
static lpo_status bind_single(cpu_ctx *c, const lpo_op *op, lpo_op_io *io, const float *W, const float *B,
                              cpu_args *a) {
    memset(a, 0, sizeof *a);
    for (int j = 0; j < op->n_in && j < LPO_OP_MAX_IN; j++) a->in[j] = io->in[j];
    a->out = io->out;
    a->W = W;
    a->B = B;
    a->nt = c->nt; /* pick_threads: at most n_threads, fewer on a busy machine when infer.threads = 0 */
    a->kc = io->k_cache;
    a->vc = io->v_cache;
    a->max_context = io->max_context;
    a->tok_slot = io->tok_slot;
    a->tok_pos = io->tok_pos;
    a->cos_t = io->rope_cos;
    a->sin_t = io->rope_sin;
    a->tokens = io->tokens;
    a->expert_ids = io->expert_ids;
    if (op->kind == LPO_OP_ROUTER || op->kind == LPO_OP_EXPERTS) {
        const int64_t f = op->kind == LPO_OP_ROUTER ? op->m * op->n_experts
                                                    : lpo_cpu_experts_scratch_floats(op->m, op->n, op->k);
        a->moe_scratch = malloc((size_t)f * sizeof(float));
        a->moe_rows = malloc((size_t)op->m * sizeof(int32_t));
        if (!a->moe_scratch || !a->moe_rows || !a->expert_ids)
            return a->expert_ids
                       ? lpo_errorf(LPO_E_NOMEM, "cpu backend: MoE scratch")
                       : lpo_errorf(LPO_E_INVALID, "cpu backend: op '%s' needs expert_ids", op->name);
    }
    const int64_t vs = vision_scratch_floats(op, a->nt);
    if (vs > 0 && !(a->vscratch = malloc((size_t)vs * sizeof(float))))
        return lpo_errorf(LPO_E_NOMEM, "cpu backend: scratch of '%s'", op->name);
    if (op->kind == LPO_OP_MLA_ATTENTION &&
        !(a->scores =
              malloc((size_t)lpo_cpu_mla_scratch_floats(op->m, op->n_heads, op->head_dim - op->rope_dim,
                                                        op->rope_dim, op->v_head_dim, op->kv_rank,
                                                        io->max_context > 0 ? io->max_context : 1, a->nt) *
                     sizeof(float))))
        return lpo_errorf(LPO_E_NOMEM, "cpu backend: MLA scratch");
    if (op->kind == LPO_OP_ATTENTION &&
        !(a->scores =
              malloc((size_t)a->nt * (size_t)(io->max_context > 0 ? io->max_context : 1) * sizeof(float))))
        return lpo_errorf(LPO_E_NOMEM, "cpu backend: attention scratch");
    if (op->kind == LPO_OP_SAMPLE) {
        const int64_t words = (op->n + 31) / 32;
        const uint32_t **seen = calloc((size_t)op->m, sizeof *seen);
        float *row = malloc((size_t)op->n * sizeof *row);
        lpo_sample_scratch *s = NULL;
        lpo_status st = seen && row ? lpo_sample_scratch_init(&s, op->n)
                                    : lpo_errorf(LPO_E_NOMEM, "cpu backend: sample row");
        for (int64_t r = 0; seen && r < op->m; r++)
            seen[r] = io->seen_bits ? io->seen_bits + r * words : NULL;
        a->samp = io->sampling;
        a->stream = io->stream;
        a->step = io->step;
        a->seen = seen;
        a->row = row;
        a->scratch = s;
        a->ids = io->ids;
        if (st != LPO_OK) return st;
    }
    return LPO_OK;
}

static void unbind_single(cpu_args *a) {
    free(a->vscratch);
    free(a->scores);
    free(a->moe_scratch);
    free(a->moe_rows);
    free((void *)a->seen);
    free(a->row);
    lpo_sample_scratch_free(a->scratch);
}

/* In-place ops (qk_norm, rope, add) work on the output: the input goes there first, before every run. */
static void single_prologue(const lpo_op *op, lpo_op_io *io, cpu_args *a) {
    if (op->kind == LPO_OP_SAMPLE || op->n_out < 1 || op->n_in < 1 || op->out[0].buf != op->in[0].buf) return;
    if (io->out != io->in[0]) memcpy(io->out, io->in[0], (size_t)elems(&op->out[0]) * sizeof(float));
    a->in[0] = io->out;
}

static lpo_status cpu_run_op(void *vctx, const lpo_op *op, lpo_op_io *io) {
    cpu_ctx *c = vctx;
    if (!cpu_supports_op(c, op))
        return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: cannot run op '%s' (%s, m=%lld, n=%lld)", op->name,
                          lpo_op_kind_name(op->kind), (long long)op->m, (long long)op->n);
    float *W = NULL, *B = NULL;
    unsigned char *flush = NULL;
    const size_t flush_bytes = (size_t)64 << 20; /* cold: more than the last-level caches of common CPUs */
    cpu_args a;
    memset(&a, 0, sizeof a);
    lpo_status st = op->n_w ? stack_weights(op, io->w, &W, &B) : LPO_OK;
    if (st == LPO_OK && io->repeat > 0 && io->cold && !(flush = malloc(flush_bytes)))
        st = lpo_errorf(LPO_E_NOMEM, "cpu backend: cache flush buffer");
    pick_threads(c);
    if (st == LPO_OK) st = bind_single(c, op, io, W, B, &a);
    if (st == LPO_OK) {
        single_prologue(op, io, &a);
        st = launch(op, &a);
    }
    for (int r = 0; st == LPO_OK && r < io->repeat; r++) { /* timing: the same work again */
        if (flush) memset(flush, r & 0xff, flush_bytes);
        single_prologue(op, io, &a);
        const uint64_t t0 = lpo_now_ns();
        st = launch(op, &a);
        if (io->ms) io->ms[r] = (double)(lpo_now_ns() - t0) / 1e6;
    }
    unbind_single(&a);
    lpo_threads_ran(&c->load, c->nt);
    free(flush);
    free(W);
    free(B);
    return st;
}

/* ---- init ---- */
/* The op that already loaded the same single weight (tied embeddings), or -1. */
static long shared_with(const lpo_oplist *l, size_t i) {
    const lpo_op *op = &l->ops[i];
    if (op->n_w != 1) return -1;
    for (size_t j = 0; j < i; j++)
        if (l->ops[j].n_w == 1 && !strcmp(l->ops[j].w[0].name, op->w[0].name)) return (long)j;
    return -1;
}

static void cpu_free(void *vctx) {
    cpu_ctx *c = vctx;
    if (!c) return;
    lpo_arena_free(&c->arena);
    lpo_sample_scratch_free(c->sample_scratch);
    free(c->ctimes);
    free(c->op_role);
    free(c->op_layer);
    free(c->op_w);
    free(c->op_bias);
    free(c->row_samp);
    free(c->row_stream);
    free(c->row_step);
    free((void *)c->row_seen);
    free(c->moe_steps);
    free(c->moe_distinct);
    free(c->moe_pairs);
    free(c->moe_hit);
    free(c);
}

static size_t cpu_memory_bytes(void *vctx) {
    return ((cpu_ctx *)vctx)->arena.used;
}

static size_t cpu_weight_bytes(void *vctx) {
    return ((cpu_ctx *)vctx)->weight_bytes;
}

static void cpu_set_group_callback(void *vctx, lpo_group_callback cb, void *ud) {
    cpu_ctx *c = vctx;
    c->cb = cb;
    c->cb_ud = ud;
}

static lpo_status cpu_read_activation(void *vctx, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst) {
    cpu_ctx *c = vctx;
    const int64_t w = lpo_buf_width(&c->spec, buf);
    if ((unsigned)buf >= LPO_BUF_COUNT || !c->buf[buf] || w == 0 || row0 < 0 ||
        row0 + n_rows > c->cfg.max_step_tokens)
        return lpo_errorf(LPO_E_INVALID, "cpu backend: no rows %lld..%lld of buffer '%s'", (long long)row0,
                          (long long)(row0 + n_rows), lpo_buf_name(buf));
    memcpy(dst, c->buf[buf] + row0 * w, (size_t)(n_rows * w) * sizeof(float));
    return LPO_OK;
}

#define ALLOC_F(c, n) ((float *)lpo_arena_alloc(&(c)->arena, (size_t)(n) * sizeof(float), 64))

static void pick_thread_count(cpu_ctx *c, int asked) {
#ifdef _OPENMP
    c->n_threads = asked > 0 ? asked : omp_get_max_threads();
    c->auto_threads = asked <= 0;
    c->n_cpus = omp_get_num_procs();
#else
    (void)asked;
    c->n_threads = 1;
    c->n_cpus = 1;
#endif
    c->nt = c->n_threads;
}

/* Loads op i's weights (stacked) into the arena through the weight views and THE conversion. */
static lpo_status load_op_weights(cpu_ctx *c, const lpo_oplist *ref, size_t i) {
    const lpo_op *op = &ref->ops[i];
    if (op->n_w == 0) return LPO_OK;
    const long sh = shared_with(ref, i);
    if (sh >= 0) { /* a tied head: the embedding table, or this rank's rows of it */
        c->op_w[i] = c->op_w[sh] + (op->w[0].shard == LPO_SHARD_ROWS ? c->rank * elems(&op->w[0]) : 0);
        return LPO_OK;
    }
    int64_t nw = 0, nb = 0;
    for (int j = 0; j < op->n_w; j++) *(j < op->n_w - op->n_bias ? &nw : &nb) += elems(&op->w[j]);
    float *w = ALLOC_F(c, nw), *bias = op->n_bias ? ALLOC_F(c, nb) : NULL;
    float *whole = NULL; /* tensor parallel: a split tensor converted whole, then this rank's part kept */
    if (!w || (op->n_bias && !bias))
        return lpo_errorf(LPO_E_INTERNAL, "cpu backend: arena sized too small for the weights of '%s'",
                          op->name);
    c->op_w[i] = w;
    c->op_bias[i] = bias;
    c->weight_bytes += (size_t)(nw + nb) * sizeof(float);
    float *dst = w;
    for (int j = 0; j < op->n_w; j++) {
        if (j == op->n_w - op->n_bias) dst = bias;
        lpo_weight_view v;
        const lpo_op_tensor *t = &op->w[j];
        const int split = t->shard != LPO_SHARD_NONE && c->tp > 1;
        const int64_t want = elems(t) * (split ? c->tp : 1);
        lpo_status st = c->cfg.weights->view(c->cfg.weights->ud, t->name, &v);
        if (st == LPO_OK && (int64_t)v.numel != want)
            st = lpo_errorf(LPO_E_FORMAT, "tensor '%s' has %llu elements where the spec implies %lld", v.name,
                            (unsigned long long)v.numel, (long long)want);
        /* the whole tensor in f32: into dst, or (split) into `whole` and then the rank's part into dst */
        float *all = dst;
        if (st == LPO_OK && split) {
            free(whole);
            all = whole = malloc((size_t)want * sizeof(float));
            if (!whole) st = lpo_errorf(LPO_E_NOMEM, "cpu backend: converting '%s' to split it", t->name);
        }
        if (st == LPO_OK) st = lpo_weight_convert(&v, LPO_DT_F32, all);
        /* held in fp8 (engine.weights=fp8): the values every backend holds, dequantized, each row's scale the
         * whole row's also on a rank that holds some of its columns; a tensor stored in fp8 already converted
         * to exactly those */
        if (st == LPO_OK && v.dtype != LPO_DT_FP8 && v.dtype != LPO_DT_FP8_B128 &&
            lpo_weight_held_dtype(&c->cfg.wq, v.name, v.n_dims, v.dtype, LPO_DT_F32) == LPO_DT_FP8 &&
            lpo_fp8_roundtrip_rows(all, v.shape[0], (int64_t)v.numel / v.shape[0]))
            st = lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory quantizing '%s' to fp8", v.name);
        /* held in GGUF blocks (engine.weights=native) but generated (synthetic, model.dtype=q4_k ...): the
         * values quantized as the CUDA backend quantizes them, the whole tensor (a rank's part is whole
         * blocks of it); stored blocks are already exactly their values */
        if (st == LPO_OK && !v.data && lpo_weight_native_block(v.dtype) &&
            ((int64_t)v.numel / v.shape[0]) % lpo_dtype_block(v.dtype) == 0 && /* rows of whole blocks */
            lpo_weight_held_dtype(&c->cfg.wq, v.name, v.n_dims, v.dtype, LPO_DT_F32) == v.dtype)
            st = lpo_quantize_roundtrip(v.dtype, all, v.numel);
        if (st == LPO_OK && split) {
            const int64_t rows = t->shape[0], cols = t->ndim > 1 ? t->shape[1] : 1;
            if (t->shard == LPO_SHARD_ROWS) // rows [rank rows, (rank + 1) rows)
                memcpy(dst, whole + c->rank * rows * cols, (size_t)(rows * cols) * sizeof(float));
            for (int64_t r = 0; t->shard == LPO_SHARD_COLS && r < rows; r++)
                // row r's columns [rank cols, (rank + 1) cols) of the tp cols-wide row
                memcpy(dst + r * cols, whole + r * cols * c->tp + c->rank * cols,
                       (size_t)cols * sizeof(float));
        }
        if (st != LPO_OK) {
            free(whole);
            return lpo_error_context(st, "cpu backend: loading weights of op '%s'", op->name);
        }
        dst += elems(t);
    }
    free(whole);
    return LPO_OK;
}

static lpo_status cpu_init_model(cpu_ctx *c) {
    const lpo_backend_init *in = &c->cfg;
    const lpo_model_spec *s = &c->spec;
    const int64_t T = in->max_step_tokens, ctx = in->max_context, S = in->max_seqs;
    const int tp = c->tp;
    const int64_t hd = s->head_dim, kvd = lpo_buf_width_kv_tp(s, tp), L = s->n_layers, V = s->vocab_size;
    const int mla = lpo_spec_is_mla(s);
    const int64_t mla_floats =
        mla ? lpo_cpu_mla_scratch_floats(T, s->n_heads, s->mla.qk_nope_head_dim, s->mla.qk_rope_head_dim,
                                         s->mla.v_head_dim, s->mla.kv_lora_rank, ctx, c->n_threads)
            : 0;

    /* the reference op list: the ops of every step shape, in order (the weights do not depend on it); a
     * rank's list under tensor parallelism */
    lpo_oplist ref = {0};
    const lpo_step_shape one = {1, 1, 0, 0};
    const lpo_oplist_opts ref_opts = {LPO_DT_F32, LPO_DT_F32, NULL, NULL, tp};
    lpo_status st = lpo_oplist_build_shape(s, &one, &ref_opts, &ref);
    if (st != LPO_OK) return st;
    c->n_ops = ref.n_ops;
    c->op_role = calloc(ref.n_ops, sizeof *c->op_role);
    c->op_layer = calloc(ref.n_ops, sizeof *c->op_layer);
    c->op_w = calloc(ref.n_ops, sizeof *c->op_w);
    c->op_bias = calloc(ref.n_ops, sizeof *c->op_bias);
    if (!c->op_role || !c->op_layer || !c->op_w || !c->op_bias) {
        lpo_oplist_free(&ref);
        return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    }
    /* size of the arena: weights, activations, logits, KV cache, rope tables, scratch, sampling state
     * (+ alignment slack), counted in double so that absurd sizes are refused below, not wrapped */
    double floats = 0;
    size_t slack = 64;
    for (size_t i = 0; i < ref.n_ops; i++) {
        c->op_role[i] = ref.ops[i].role;
        c->op_layer[i] = ref.ops[i].layer;
        if (shared_with(&ref, i) >= 0) continue;
        for (int j = 0; j < ref.ops[i].n_w; j++) floats += (double)elems(&ref.ops[i].w[j]);
        slack += 2;
    }
    for (int b = 0; b < LPO_BUF_COUNT; b++) floats += (double)T * (double)lpo_buf_width_tp(s, b, tp), slack++;
    if (tp > 1) floats += (double)T * (double)s->hidden_size, slack++; /* the all-reduce's sums */
    c->seen_words = (V + 31) / 32;
    floats += (mla ? 1.0 : 2.0) * (double)L * (double)S * (double)ctx * (double)kvd + (double)mla_floats +
              (double)ctx * (double)hd + (double)c->n_threads * (double)ctx + (double)V +
              (double)S * (double)c->seen_words;
    /* MoE scratch: the router's logits or the experts' gathered rows, whichever is larger */
    const int moe = lpo_spec_has_moe(s);
    const int64_t moe_floats =
        moe ? (int64_t)fmax((double)(T * s->moe.n_experts), (double)lpo_cpu_experts_scratch_floats(
                                                                T, s->hidden_size, s->moe.intermediate_size))
            : 0;
    floats += (double)moe_floats + (moe ? (double)T : 0);
    const double dbytes = floats * sizeof(float) + (double)T * 2 * sizeof(int32_t) +
                          (double)S * sizeof(slot_sampling) + (double)(slack + 16) * 64;
    char what[256];
    snprintf(what, sizeof what,
             "cpu backend: weights, activations and KV cache for %lld sequence(s) of max_context %lld, %lld "
             "tokens per step",
             (long long)S, (long long)ctx, (long long)T);
    st = lpo_mem_check(dbytes, what);
    if (st == LPO_OK) {
        st = lpo_arena_init(&c->arena, (size_t)dbytes);
        if (st != LPO_OK)
            st = lpo_error_context(st, "cpu backend: %.1f MiB for weights, activations and KV cache",
                                   dbytes / 1048576.0);
    }
    for (size_t i = 0; i < ref.n_ops && st == LPO_OK; i++) st = load_op_weights(c, &ref, i);
    lpo_oplist_free(&ref);
    if (st != LPO_OK) return st;
    const lpo_oplist_opts f32 = {LPO_DT_F32, LPO_DT_F32, NULL, NULL, 0};
    for (int b = 0; b < LPO_BUF_COUNT; b++)
        if (lpo_buf_width_tp(s, b, tp) && lpo_buf_dtype(b, &f32) == LPO_DT_F32)
            c->buf[b] = ALLOC_F(c, T * lpo_buf_width_tp(s, b, tp));
    if (tp > 1 && !(c->tp_scratch = ALLOC_F(c, T * s->hidden_size)))
        return lpo_errorf(LPO_E_INTERNAL, "cpu backend: arena sized too small (%zu bytes)", c->arena.size);
    c->kcache = ALLOC_F(c, L * S * ctx * kvd);
    c->vcache = mla ? NULL : ALLOC_F(c, L * S * ctx * kvd); /* MLA: one latent cache */
    c->mla_scratch = mla ? ALLOC_F(c, mla_floats) : NULL;
    if (mla && !c->mla_scratch)
        return lpo_errorf(LPO_E_INTERNAL, "cpu backend: arena sized too small (%zu bytes)", c->arena.size);
    c->rope_cos = ALLOC_F(c, ctx * (hd / 2));
    c->rope_sin = ALLOC_F(c, ctx * (hd / 2));
    c->scores = ALLOC_F(c, (int64_t)c->n_threads * ctx);
    if (moe) {
        c->moe_scratch = ALLOC_F(c, moe_floats);
        c->moe_rows = lpo_arena_alloc(&c->arena, (size_t)T * sizeof(int32_t), 64);
        c->route_ids = lpo_arena_alloc(&c->arena, (size_t)(T * s->moe.n_experts_used) * sizeof(int32_t), 64);
        if (!c->moe_scratch || !c->moe_rows || !c->route_ids)
            return lpo_errorf(LPO_E_INTERNAL, "cpu backend: arena sized too small (%zu bytes)",
                              c->arena.size);
    }
    c->sample_row = ALLOC_F(c, V);
    c->seen = lpo_arena_alloc(&c->arena, (size_t)(S * c->seen_words) * sizeof *c->seen, 64);
    c->ids = lpo_arena_alloc(&c->arena, (size_t)T * sizeof(int32_t), 64);
    c->tokens = lpo_arena_alloc(&c->arena, (size_t)T * sizeof(int32_t), 64);
    c->sampling = lpo_arena_alloc(&c->arena, (size_t)S * sizeof(slot_sampling), 64);
    if (!c->kcache || (!mla && !c->vcache) || !c->rope_cos || !c->rope_sin || !c->scores || !c->sample_row ||
        !c->seen || !c->ids || !c->tokens || !c->sampling)
        return lpo_errorf(LPO_E_INTERNAL, "cpu backend: arena sized too small (%zu bytes)", c->arena.size);
    memset(c->seen, 0, (size_t)(S * c->seen_words) * sizeof *c->seen);
    memset(c->sampling, 0, (size_t)S * sizeof(slot_sampling));
    if ((st = lpo_sample_scratch_init(&c->sample_scratch, V)) != LPO_OK) return st;
    c->row_samp = calloc((size_t)T, sizeof *c->row_samp);
    c->row_stream = calloc((size_t)T, sizeof *c->row_stream);
    c->row_step = calloc((size_t)T, sizeof *c->row_step);
    c->row_seen = calloc((size_t)T, sizeof *c->row_seen);
    if (!c->row_samp || !c->row_stream || !c->row_step || !c->row_seen)
        return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    if (moe) { /* routing statistics */
        const size_t nl = 2 * (size_t)L, E = (size_t)s->moe.n_experts;
        c->moe_steps = calloc(nl, sizeof(uint64_t));
        c->moe_distinct = calloc(nl, sizeof(uint64_t));
        c->moe_pairs = calloc(nl * E, sizeof(uint64_t));
        c->moe_hit = calloc(E, 1);
        if (!c->moe_steps || !c->moe_distinct || !c->moe_pairs || !c->moe_hit)
            return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    }
    /* RoPE tables: angle = float(pos) * inv_freq (f32, as HF), cos/sin times the attention scaling */
    float *inv = malloc((size_t)(hd / 2 + 1) * sizeof(float)), scale = 1;
    st = inv ? lpo_rope_inv_freq(s, inv, &scale) : lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    if (st == LPO_OK) lpo_cpu_rope_tables(c->rope_cos, c->rope_sin, inv, scale, ctx, hd / 2);
    free(inv);
    return st;
}

static lpo_status cpu_init(const lpo_backend_init *in, void **out) {
    *out = NULL;
    if (in->dtype != LPO_DT_F32)
        return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: computes in f32 only (asked %s)",
                          lpo_dtype_name(in->dtype));
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    c->cfg = *in;
    c->tp = in->tp > 1 ? in->tp : 1;
    c->rank = c->tp > 1 ? in->rank : 0;
    c->comm = c->tp > 1 ? in->tp_shared : NULL;
    if (c->tp > 1 && (!c->comm || c->rank < 0 || c->rank >= c->tp)) {
        free(c);
        return lpo_errorf(LPO_E_INVALID, "cpu backend: rank %d of %d without a communicator", in->rank,
                          in->tp);
    }
    pick_thread_count(c, in->n_threads);
    lpo_status st = LPO_OK;
    if (in->spec) { /* else an op-only context */
        c->spec = *in->spec;
        c->cfg.spec = &c->spec;
        st = cpu_init_model(c);
    }
    if (st != LPO_OK) {
        cpu_free(c);
        return st;
    }
    *out = c;
    return LPO_OK;
}

const lpo_backend_iface *lpo_backend_cpu(void) {
    static const lpo_backend_iface cpu = {
        .api_version = LPO_BACKEND_API_VERSION,
        .name = "cpu",
        .features = LPO_BACKEND_F_BATCH | LPO_BACKEND_F_GROUP_EVENTS | LPO_BACKEND_F_ALL_LOGITS |
                    LPO_BACKEND_F_TP | LPO_BACKEND_F_EMBEDS,
        .init = cpu_init,
        .free = cpu_free,
        .plan = cpu_plan,
        .forward = cpu_forward,
        .set_sampling = cpu_set_sampling,
        .memory_bytes = cpu_memory_bytes,
        .weight_bytes = cpu_weight_bytes,
        .set_group_callback = cpu_set_group_callback,
        .read_activation = cpu_read_activation,
        .supports_op = cpu_supports_op,
        .run_op = cpu_run_op,
        .tp_open = cpu_tp_open,
        .tp_abort = cpu_tp_abort,
        .tp_close = cpu_tp_close,
        .moe_stats = cpu_moe_stats,
        .comm_timing = cpu_comm_timing,
        .comm_read = cpu_comm_read,
    };
    return &cpu;
}
