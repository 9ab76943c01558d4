/* The CUDA backend's steps: plans (the fusions), plan groups run eagerly or captured as CUDA graphs and
 * replayed (decode), the step data's upload, NVTX / tracer ranges, the finite check of sampled logits, and
 * the slots' sampling state. Each op that is not part of a fused pattern runs through the launch of its kind
 * (cuda_launch.c), the one run_op uses. */
#include "engine/cuda/cuda_backend.h"

#ifdef LPO_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/probe.h"

/* ---- operands of a step's ops -------------------------------------------------------------------------- */
/* The operands of op i of a step: the step's buffers, the op's weights, its layer's cache, the step data on
 * the device, the slots' sampling state. LM_HEAD over fewer rows than tokens reads each sequence's last row,
 * gathered into the free tmp buffer first. */
static lpo_status bind_step(cuda_ctx *c, const lpo_oplist *l, size_t i, const lpo_step_data *d,
                            cuda_args *a) {
    const lpo_op *op = &l->ops[i];
    memset(a, 0, sizeof *a);
    for (int j = 0; j < op->n_in && j < LPO_OP_MAX_IN; j++) a->in[j] = c->buf[op->in[j].buf];
    a->out = c->buf[op->out[0].buf];
    if (op->kind != LPO_OP_SAMPLE && i < c->n_ops) {
        a->W = c->op_w[i], a->B = c->op_bias[i];
        a->Wscale = c->op_wscale[i], a->Wdt = c->op_wdt[i];
    }
    a->q8 = c->q8, a->q8_scale = c->q8_scale, a->wdq = c->wdq, a->wdq_bytes = c->wdq_bytes;
    a->tok_slot = c->d_tok_slot;
    a->tok_pos = c->d_tok_pos;
    a->tokens = c->d_tokens;
    a->cos_t = c->rope_cos;
    a->sin_t = c->rope_sin;
    a->max_context = c->cfg.max_context;
    a->len_hint = c->len_hint;
    a->att_ws = c->att_ws;
    a->att_ws_bytes = c->att_ws_bytes;
    if (op->kind == LPO_OP_ATTENTION) {
        const size_t rows = (size_t)op->layer * (size_t)c->cfg.max_seqs * (size_t)c->cfg.max_context;
        const size_t layer = rows * (size_t)(op->n_kv_heads * op->head_dim) * c->kv_es;
        a->kc = (char *)c->kcache + layer;
        a->vc = (char *)c->vcache + layer;
        if (c->kscale) { /* fp8: one scale per (position, KV head) */
            a->ks = c->kscale + rows * (size_t)op->n_kv_heads;
            a->vs = c->vscale + rows * (size_t)op->n_kv_heads;
        }
    }
    if (op->kind == LPO_OP_MLA_ATTENTION) { /* one latent cache row of kv_rank + rope_dim per position */
        const size_t layer = (size_t)op->layer * (size_t)c->cfg.max_seqs * (size_t)c->cfg.max_context *
                             (size_t)(op->kv_rank + op->rope_dim) * c->es;
        a->kc = (char *)c->kcache + layer;
    }
    if (op->kind == LPO_OP_ROUTER || op->kind == LPO_OP_EXPERTS) { /* route_ids: int32 */
        a->eids = c->buf[LPO_BUF_ROUTE_IDS];
        a->route_logits = c->moe_logits;
        a->moe = c->moe_ws;
        if (op->kind == LPO_OP_ROUTER && c->d_moe_counts && op->layer >= 0)
            a->moe_counts = c->d_moe_counts + (int64_t)op->layer * c->spec.moe.n_experts;
    }
    if (op->kind == LPO_OP_LM_HEAD && op->m != l->n_tokens) {
        const int64_t h = op->k;
        char *rows = c->buf[LPO_BUF_TMP];
        int64_t off = 0;
        for (int s = 0; s < d->n_seqs; s++) { // last token of sequence s (h,) -> rows[s]
            off += d->n_new[s];
            CU(cudaMemcpyAsync(rows + (size_t)(s * h) * c->es,
                               (const char *)a->in[0] + (size_t)((off - 1) * h) * c->es, (size_t)h * c->es,
                               cudaMemcpyDeviceToDevice, c->stream),
               "lm_head row gather");
        }
        lpo_cuda_pdl_break(); /* no programmatic edge from a copy */
        a->in[0] = rows;
    }
    if (op->kind == LPO_OP_SAMPLE) {
        a->logits = c->buf[LPO_BUF_LOGITS];
        a->ids = c->d_ids;
        a->row_slot = c->d_row_slot;
        a->row_mask = c->d_row_mask;
        a->slots = c->d_slot_params;
        a->stream = c->d_stream;
        a->step = c->d_step;
        a->seen = c->d_seen;
        a->seen_words = c->seen_words;
        a->last = c->d_last;
        a->sample_ws = c->sample_ws;
        a->sample_ws_bytes = c->sample_ws_bytes;
    }
    return LPO_OK;
}

/* Runs op i of a step alone, through the launch run_op uses too. */
static lpo_status run_op_at(cuda_ctx *c, const lpo_oplist *l, size_t i, const lpo_step_data *d) {
    cuda_args a;
    TRY(bind_step(c, l, i, d, &a));
    return lpo__cuda_launch(c, &l->ops[i], &a);
}

/* ---- plans: the fusions ------------------------------------------------------------------------------- */
/* ops [i, i+1]: a residual add and the RMSNorm of its result */
static int add_then_norm(const lpo_oplist *l, size_t i) {
    return i + 1 < l->n_ops && l->ops[i].kind == LPO_OP_ADD && l->ops[i + 1].kind == LPO_OP_RMSNORM &&
           l->ops[i + 1].in[0].buf == l->ops[i].out[0].buf;
}
/* ops [i, i+2]: a tensor-parallel all-reduce of tmp, the residual add of its result and the RMSNorm after it,
 * as one kernel when the one-shot runs with engine.tp_fuse and the rows fit (lpo__cuda_arnorm_fusable) */
static int allreduce_add_norm(const cuda_ctx *c, const lpo_oplist *l, size_t i) {
    if (i + 2 >= l->n_ops || l->ops[i].kind != LPO_OP_ALL_REDUCE || !add_then_norm(l, i + 1)) return 0;
    const lpo_op *ar = &l->ops[i], *add = &l->ops[i + 1];
    return add->n_in == 2 && add->in[1].buf == ar->out[0].buf && add->out[0].buf != ar->out[0].buf &&
           add->m == ar->m && add->n == ar->n && lpo__cuda_arnorm_fusable(c, ar);
}
/* ops from i: [QK_NORM,] ROPE, ATTENTION of one layer -> how many (0: not this pattern) */
static uint32_t rope_attention(const lpo_oplist *l, size_t i) {
    size_t j = i;
    if (j < l->n_ops && l->ops[j].kind == LPO_OP_QK_NORM) j++;
    if (j + 1 < l->n_ops && l->ops[j].kind == LPO_OP_ROPE && l->ops[j + 1].kind == LPO_OP_ATTENTION &&
        l->ops[j].layer == l->ops[j + 1].layer && l->ops[i].layer == l->ops[j].layer)
        return (uint32_t)(j + 2 - i);
    return 0;
}

/* ops [i, i+1]: the gate/up projection (no bias) and the SwiGLU of its output at <= 8 rows with engine.gemv:
 * one GEMV launch writes the activation (lpo_cuda_gemv_swiglu) */
static int gateup_swiglu(const cuda_ctx *c, const lpo_oplist *l, size_t i) {
    if (i + 1 >= l->n_ops) return 0;
    const lpo_op *a = &l->ops[i], *b = &l->ops[i + 1];
    return a->kind == LPO_OP_LINEAR && a->n_bias == 0 && b->kind == LPO_OP_SWIGLU &&
           b->in[0].buf == a->out[0].buf && a->n == 2 * b->n &&
           !(i < c->n_ops && lpo_weight_native_block(c->op_wdt[i])) /* GGUF blocks: no fused kernel */ &&
           lpo__cuda_gemv_fusable(c, i < c->n_ops ? c->op_wscale[i] : NULL, a->m, a->k);
}

lpo_status lpo__cuda_plan(void *vctx, const lpo_oplist *l, lpo_plan *out) {
    cuda_ctx *c = vctx;
    out->n_groups = 0;
    out->names_len = 0;
    const int fuse = c->cfg.fusion && c->cfg.exec != LPO_EXEC_DEBUG;
    for (size_t i = 0; i < l->n_ops;) {
        uint32_t n = 1;
        if (fuse && allreduce_add_norm(c, l, i))
            n = 3;
        else if (fuse && add_then_norm(l, i))
            n = 2;
        else if (fuse && rope_attention(l, i))
            n = rope_attention(l, i);
        else if (fuse && gateup_swiglu(c, l, i))
            n = 2;
        TRY(lpo_plan_add(out, l, (uint32_t)i, n));
        i += n;
    }
    return LPO_OK;
}

/* Runs one plan group: a fused pattern as its kernels, anything else op by op. */
static lpo_status run_group(cuda_ctx *c, const lpo_oplist *l, const lpo_plan_group *g,
                            const lpo_step_data *d) {
    const size_t i = g->first;
    const lpo_op *op = &l->ops[i];
    if (g->count == 3 && allreduce_add_norm(c, l, i)) { /* x += sum over ranks of tmp; xn = rmsnorm(x) */
        const lpo_op *add = &l->ops[i + 1], *nrm = &l->ops[i + 2];
        return lpo__cuda_all_reduce_add_rmsnorm(c, op, c->buf[op->out[0].buf], c->buf[add->out[0].buf],
                                                c->buf[nrm->out[0].buf], c->op_w[i + 2], nrm->eps);
    }
    if (g->count == 2 && add_then_norm(l, i)) { /* x += tmp; xn = rmsnorm(x) */
        const lpo_op *nrm = &l->ops[i + 1];
        return lpo_cuda_add_rmsnorm(c->buf[op->out[0].buf], c->buf[op->in[1].buf], c->buf[nrm->out[0].buf],
                                    c->op_w[i + 1], op->m, op->n, nrm->eps, c->dt, c->stream);
    }
    if (g->count == 2 && gateup_swiglu(c, l, i)) { /* act = silu(x Wg^T) * (x Wu^T) */
        const lpo_op *act = &l->ops[i + 1];
        if (c->op_wscale[i]) /* fp8 weights: dequantized in registers */
            return lpo_cuda_gemv_fp8(c->buf[act->out[0].buf], c->dt, c->buf[op->in[0].buf], c->op_w[i],
                                     c->op_wscale[i], c->op_wdt[i], NULL, op->m, act->n, op->k, 0.f, 1, c->dt,
                                     c->stream);
        return lpo_cuda_gemv_swiglu(c->buf[act->out[0].buf], c->buf[op->in[0].buf], c->op_w[i], op->m, act->n,
                                    op->k, c->dt, c->stream);
    }
    if (g->count >= 2 && rope_attention(l, i) == g->count) { /* [q/k norm +] RoPE + append, attention */
        const lpo_op *qkn = op->kind == LPO_OP_QK_NORM ? op : NULL;
        cuda_args a;
        TRY(bind_step(c, l, i + g->count - 1, d, &a));
        return lpo__cuda_attention(c, &l->ops[i + g->count - 1], &a, qkn, qkn ? c->op_w[i] : NULL, 1);
    }
    for (uint32_t k = 0; k < g->count; k++) {
        TRY(run_op_at(c, l, i + k, d));
        if (c->cfg.exec == LPO_EXEC_DEBUG) CU(cudaStreamSynchronize(c->stream), l->ops[i + k].name);
    }
    return LPO_OK;
}

static lpo_status check_step(const cuda_ctx *c, const lpo_oplist *l, const lpo_step_data *d) {
    const int64_t T = l->n_tokens;
    if (!c->has_model)
        return lpo_errorf(LPO_E_INVALID, "cuda backend: an op-only context (no model) cannot run steps");
    if (T > c->cfg.max_step_tokens || l->n_seqs > c->cfg.max_seqs)
        return lpo_errorf(
            LPO_E_RANGE,
            "cuda backend: step of %lld tokens / %d sequences exceeds the %lld / %d it was sized for",
            (long long)T, l->n_seqs, (long long)c->cfg.max_step_tokens, c->cfg.max_seqs);
    if (!d->tokens && T != d->n_seqs)
        return lpo_errorf(LPO_E_INVALID, "cuda backend: a chained step brings one token per sequence");
    for (int i = 0; i < d->n_seqs; i++)
        if (d->slots[i] < 0 || d->slots[i] >= c->cfg.max_seqs ||
            d->n_past[i] + d->n_new[i] > c->cfg.max_context)
            return lpo_errorf(
                LPO_E_RANGE,
                "cuda backend: sequence %d (slot %d) would reach %lld positions (max_context %lld)", i,
                d->slots[i], (long long)(d->n_past[i] + d->n_new[i]), (long long)c->cfg.max_context);
    for (size_t i = 0; i < l->n_ops; i++) {
        const lpo_op *op = &l->ops[i];
        if (op->kind != LPO_OP_SAMPLE &&
            (i >= c->n_ops || op->role != c->op_role[i] || op->layer != c->op_layer[i]))
            return lpo_errorf(LPO_E_INTERNAL,
                              "cuda backend: op %zu '%s' does not match the model it was built for", i,
                              op->name);
    }
    return LPO_OK;
}

/* NVTX (free when no tool listens) and lpo's own tracer (free when not tracing): the same names. Ranges
 * open while a graph is captured label the nodes created inside them (the tracer maps replayed kernels to
 * plan groups that way). */
static void range_push(const char *name) {
    nvtxRangePushA(name);
    lpo_probe_push(name);
}
static void range_pop(void) {
    lpo_probe_pop();
    nvtxRangePop();
}

/* The verdict of the last logits check (wait: for its copy, else only when it has already landed). A row
 * holding NaN/Inf is refused as the CPU backend refuses it (LPO_E_NUMERIC; the engine then names the first
 * op whose output is not finite), never sampled. */
static lpo_status take_bad(cuda_ctx *c, int wait) {
    if (!c->bad_pending) return LPO_OK;
    if (wait) {
        CU(cudaEventSynchronize(c->bad_copied), "finite check");
    } else {
        const cudaError_t q = cudaEventQuery(c->bad_copied);
        if (q == cudaErrorNotReady)
            (void)cudaGetLastError(); /* not an error: never left for a launch check */
        if (q != cudaSuccess) return LPO_OK;
    }
    c->bad_pending = 0;
    const unsigned long long at = *c->h_bad;
    if (at == ~0ull) return LPO_OK;
    const long long V = (long long)c->spec.vocab_size;
    return lpo_errorf(LPO_E_NUMERIC, "cuda backend: logits row %lld holds NaN/Inf (at id %lld)",
                      (long long)at / V, (long long)at % V);
}

/* Queues the check of the logits rows about to be sampled (before SAMPLE: it reads NaN as -inf); nothing
 * when no row draws (the engine's diagnostic re-run of a step). */
static lpo_status check_logits(cuda_ctx *c, const lpo_oplist *l, const lpo_step_data *d) {
    int draws = !d->sample_mask || c->capturing; /* a graph checks at every replay */
    for (int i = 0; !draws && i < d->n_seqs; i++) draws = d->sample_mask[i] != 0;
    if (!draws) return LPO_OK;
    CU(cudaMemsetAsync(c->d_bad, 0xff, sizeof *c->d_bad, c->stream), "finite check");
    lpo_cuda_pdl_break(); /* no programmatic edge from a memset or a copy */
    TRY(lpo_cuda_first_nonfinite(c->buf[LPO_BUF_LOGITS], LPO_DT_F32, l->n_logit_rows * c->spec.vocab_size,
                                 c->d_bad, c->stream));
    CU(cudaMemcpyAsync(c->h_bad, c->d_bad, sizeof *c->d_bad, cudaMemcpyDeviceToHost, c->stream),
       "finite check");
    lpo_cuda_pdl_break();
    if (c->capturing)
        return LPO_OK; /* an event recorded during capture cannot be queried: forward records it
                          after each replay */
    CU(cudaEventRecord(c->bad_copied, c->stream), "finite check");
    c->bad_pending = 1;
    return LPO_OK;
}

static int group_samples(const lpo_oplist *l, const lpo_plan_group *g) {
    return l->ops[g->first + g->count - 1].kind == LPO_OP_SAMPLE;
}

/* The EMBED op of a group, or NULL. */
static const lpo_op *group_embed_op(const lpo_oplist *l, const lpo_plan_group *g) {
    for (uint32_t k = 0; k < g->count; k++)
        if (l->ops[g->first + k].kind == LPO_OP_EMBED) return &l->ops[g->first + k];
    return NULL;
}

/* The step's given embedding rows (lpo_step_data.embeds: image embeddings) over the EMBED op's output: rows
 * converted to the compute dtype on the host, each run of consecutive rows one copy on the stream (from
 * pageable memory, which the copy has read when it returns, so the converted rows are freed right after). */
static lpo_status put_embeds(cuda_ctx *c, const lpo_op *op, const lpo_step_data *d) {
    const int64_t n = op->n, T = op->m;
    const size_t row_bytes = (size_t)n * c->es;
    void *conv = NULL;
    const char *src = (const char *)d->embeds;
    if (c->dt != LPO_DT_F32) {
        conv = malloc((size_t)d->n_embeds * row_bytes);
        if (!conv) return lpo_errorf(LPO_E_NOMEM, "cuda backend: out of memory (embedding rows)");
        uint16_t *h = conv;
        for (int64_t i = 0; i < d->n_embeds * n; i++) // f32 rows -> bf16 / f16 rows
            h[i] = c->dt == LPO_DT_BF16 ? lpo_f32_to_bf16(d->embeds[i]) : lpo_f32_to_f16(d->embeds[i]);
        src = conv;
    }
    lpo_status st = LPO_OK;
    for (int64_t i = 0; i < d->n_embeds && st == LPO_OK;) {
        int64_t j = i + 1; /* rows i..j-1 land on consecutive rows */
        while (j < d->n_embeds && d->embed_row[j] == d->embed_row[j - 1] + 1) j++;
        if (d->embed_row[i] < 0 || d->embed_row[j - 1] >= T) {
            st = lpo_errorf(LPO_E_RANGE, "cuda backend: embedding row %lld outside the step's %lld tokens",
                            (long long)d->embed_row[i], (long long)T);
            break;
        }
        const cudaError_t e = cudaMemcpyAsync(
            (char *)c->buf[op->out[0].buf] + (size_t)d->embed_row[i] * row_bytes, src + (size_t)i * row_bytes,
            (size_t)(j - i) * row_bytes, cudaMemcpyHostToDevice, c->stream);
        if (e != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: embedding rows to the device: %s",
                            cudaGetErrorString(e));
        i = j;
    }
    free(conv);
    lpo_cuda_pdl_break();
    return st;
}

/* Groups [g0, g1) of the plan, in a range per layer and per group, with the group callbacks. The logits go
 * to the host before the SAMPLE group when asked (the sampler rewrites its rows in place). */
static lpo_status run_groups(cuda_ctx *c, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                             size_t g0, size_t g1, const lpo_step_out *out) {
    int layer = -1;
    lpo_status st = LPO_OK;
    for (size_t g = g0; g < g1 && st == LPO_OK; g++) {
        const lpo_plan_group *G = &p->groups[g];
        const int gl = l->ops[G->first].layer;
        if (gl != layer) {
            if (layer >= 0) range_pop();
            if (gl >= 0) range_push(c->layer_names[gl]);
            layer = gl;
        }
        if (group_samples(l, G) && (st = check_logits(c, l, d)) != LPO_OK) break;
        if (out->logits && group_samples(l, G)) {
            const cudaError_t e =
                cudaMemcpyAsync(out->logits, c->buf[LPO_BUF_LOGITS],
                                (size_t)(l->n_logit_rows * c->spec.vocab_size) * sizeof(float),
                                cudaMemcpyDeviceToHost, c->stream);
            if (e != cudaSuccess) {
                st = lpo_errorf(LPO_E_CUDA, "cuda backend: logits to the host: %s", cudaGetErrorString(e));
                break;
            }
            lpo_cuda_pdl_break();
        }
        range_push(G->name);
        if (c->cb) c->cb(c->cb_ud, l, p, g, 0);
        st = run_group(c, l, G, d);
        const lpo_op *emb = d->n_embeds > 0 ? group_embed_op(l, G) : NULL;
        if (st == LPO_OK && emb) st = put_embeds(c, emb, d);
        if (st == LPO_OK && c->cb) c->cb(c->cb_ud, l, p, g, 1);
        range_pop();
        if (st != LPO_OK) st = lpo_error_context(st, "cuda backend: group '%s'", G->name);
    }
    if (layer >= 0) range_pop();
    return st;
}

/* The step's routing into the statistics (phase 1: a decode step), after its last router. */
static lpo_status moe_tally(cuda_ctx *c, int phase) {
    if (!c->d_moe_counts) return LPO_OK;
    return lpo_cuda_moe_tally(c->d_moe_counts, c->d_moe_sparse, c->d_moe_steps, c->d_moe_distinct,
                              c->d_moe_pairs, c->spec.n_layers, c->spec.moe.n_experts, phase, c->stream);
}

lpo_status lpo__cuda_moe_stats(void *vctx, lpo_moe_stats *out, int reset) {
    cuda_ctx *c = vctx;
    if (!c->d_moe_counts) return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: the model has no MoE layer");
    const size_t nl = 2 * (size_t)c->spec.n_layers, np = nl * (size_t)c->spec.moe.n_experts;
    CU(cudaStreamSynchronize(c->stream), "moe statistics");
    if (out) {
        CU(cudaMemcpy(out->steps, c->d_moe_steps, nl * 8, cudaMemcpyDeviceToHost), "moe statistics");
        CU(cudaMemcpy(out->distinct, c->d_moe_distinct, nl * 8, cudaMemcpyDeviceToHost), "moe statistics");
        CU(cudaMemcpy(out->pairs, c->d_moe_pairs, np * 8, cudaMemcpyDeviceToHost), "moe statistics");
    }
    if (reset) {
        CU(cudaMemsetAsync(c->d_moe_steps, 0, nl * 8, c->stream), "moe statistics");
        CU(cudaMemsetAsync(c->d_moe_distinct, 0, nl * 8, c->stream), "moe statistics");
        CU(cudaMemsetAsync(c->d_moe_pairs, 0, np * 8, c->stream), "moe statistics");
        CU(cudaStreamSynchronize(c->stream), "moe statistics");
    }
    return LPO_OK;
}

/* Every sequence brings one token: the step shape that is captured as a graph and replayed. */
static int is_decode(const lpo_oplist *l, const lpo_step_data *d) {
    if (l->n_tokens != d->n_seqs) return 0;
    for (int i = 0; i < d->n_seqs; i++)
        if (d->n_new[i] != 1) return 0;
    return 1;
}

/* The pinned staging region: [pos 8 T][slot 4 T][tokens 4 T][finite check 64][row slot 4 S][row mask S]
 * with T = max_step_tokens, S = max_seqs. */
size_t lpo__cuda_stage_bytes(const cuda_ctx *c) {
    return (size_t)c->cfg.max_step_tokens * 16 + 64 + (size_t)c->cfg.max_seqs * 5;
}

/* Step data to the device: positions, slots and host tokens, and for a sampled step each row's slot and
 * mask, through the pinned staging region (waiting, if ever, only for the previous step's copies to have
 * left it). */
static lpo_status upload_step(cuda_ctx *c, const lpo_oplist *l, const lpo_step_data *d, int64_t T) {
    const int64_t Tmax = c->cfg.max_step_tokens;
    int64_t *h_pos = (int64_t *)c->h_stage;
    int32_t *h_slot = (int32_t *)(c->h_stage + Tmax * 8), *h_tok = (int32_t *)(c->h_stage + Tmax * 12);
    int32_t *h_row_slot = (int32_t *)(c->h_stage + Tmax * 16 + 64);
    uint8_t *h_row_mask = (uint8_t *)(h_row_slot + c->cfg.max_seqs);
    CU(cudaEventSynchronize(c->staged), "step data staging");
    if (l->sample) {
        for (int i = 0; i < d->n_seqs; i++) { // row i of the logits: sequence i
            h_row_slot[i] = d->slots[i];
            h_row_mask[i] = d->sample_mask ? d->sample_mask[i] != 0 : 1;
        }
        CU(cudaMemcpyAsync(c->d_row_slot, h_row_slot, (size_t)d->n_seqs * 4, cudaMemcpyHostToDevice,
                           c->stream),
           "sampled rows");
        CU(cudaMemcpyAsync(c->d_row_mask, h_row_mask, (size_t)d->n_seqs, cudaMemcpyHostToDevice, c->stream),
           "sampled rows");
    }
    memcpy(h_pos, d->tok_pos, (size_t)T * sizeof(int64_t));
    memcpy(h_slot, d->tok_slot, (size_t)T * sizeof(int32_t));
    if (d->tokens) memcpy(h_tok, d->tokens, (size_t)T * sizeof(int32_t));
    CU(cudaMemcpyAsync(c->d_tok_pos, h_pos, (size_t)T * 8, cudaMemcpyHostToDevice, c->stream),
       "step positions");
    CU(cudaMemcpyAsync(c->d_tok_slot, h_slot, (size_t)T * 4, cudaMemcpyHostToDevice, c->stream),
       "step slots");
    if (d->tokens)
        CU(cudaMemcpyAsync(c->d_tokens, h_tok, (size_t)T * 4, cudaMemcpyHostToDevice, c->stream),
           "step tokens");
    CU(cudaEventRecord(c->staged, c->stream), "step data staging");
    return LPO_OK;
}

/* The device work of a step before its groups: chained tokens (each sequence's slot's last sampled id; in
 * a chained step token i belongs to sequence i) and the seen-token marks of the repetition penalty. */
static lpo_status step_prologue(cuda_ctx *c, const lpo_step_data *d, int64_t T) {
    if (!d->tokens) TRY(lpo_cuda_gather_i32(c->d_tokens, c->d_last, c->d_tok_slot, T, c->stream));
    return lpo_cuda_mark_seen(c->d_seen, c->spec.vocab_size, c->d_tok_slot, c->d_tokens, T, c->stream);
}

/* The graph of a decode step's groups [0, ng) (all of them, or all but SAMPLE when the logits go to the
 * host: the sampler rewrites them), captured at first use. */
static lpo_status decode_graph(cuda_ctx *c, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                               size_t ng, cudaGraphExec_t *exec) {
    const graph_slot key = {.T = l->n_tokens,
                            .bucket = c->len_hint,
                            .n_seqs = d->n_seqs,
                            .all_logits = (int)(l->n_logit_rows != d->n_seqs),
                            .sample = l->sample,
                            .chained = !d->tokens,
                            .n_groups = ng,
                            .timed = c->comm_on && c->comm_ev};
    graph_slot *lru = &c->graphs[0];
    for (int i = 0; i < MAX_GRAPHS; i++) {
        graph_slot *g = &c->graphs[i];
        if (g->used && g->T == key.T && g->bucket == key.bucket && g->n_seqs == key.n_seqs &&
            g->all_logits == key.all_logits && g->sample == key.sample && g->chained == key.chained &&
            g->n_groups == key.n_groups && g->timed == key.timed) {
            g->used = ++c->tick;
            *exec = g->exec;
            return LPO_OK;
        }
        if (g->used < lru->used) lru = g;
    }
    if (lru->used) cudaGraphExecDestroy(lru->exec);
    lru->used = 0;
    const lpo_step_out none = {NULL, NULL};
    CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), "graph capture");
    c->capturing = 1;
    /* engine.pdl: each kernel that follows one of ours is captured with a programmatic edge (it starts while
     * the one before finishes); eager steps stay launch by launch, as their group events measure them */
    if (c->pdl) lpo_cuda_pdl_begin(c->stream);
    lpo_status st = step_prologue(c, d, l->n_tokens);
    if (st == LPO_OK) st = run_groups(c, l, p, d, 0, ng, &none);
    if (st == LPO_OK) st = moe_tally(c, 1);
    lpo_cuda_pdl_end();
    c->capturing = 0;
    cudaGraph_t graph = NULL;
    const cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (st == LPO_OK && e != cudaSuccess)
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: capturing a decode step of %lld tokens: %s",
                        (long long)l->n_tokens, cudaGetErrorString(e));
    cudaGraphExec_t ge = NULL;
    if (st == LPO_OK && cudaGraphInstantiate(&ge, graph, 0) != cudaSuccess)
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: instantiating a decode graph: %s",
                        cudaGetErrorString(cudaGetLastError()));
    if (graph) cudaGraphDestroy(graph);
    TRY(st);
    *lru = key;
    lru->exec = *exec = ge;
    lru->used = ++c->tick;
    return LPO_OK;
}

/* The collectives (of more than one rank) in groups [g0, g1) of the plan: what collective timing counts. */
static int collectives_in(const lpo_oplist *l, const lpo_plan *p, size_t g0, size_t g1) {
    int n = 0;
    for (size_t g = g0; g < g1; g++)
        for (uint32_t k = 0; k < p->groups[g].count; k++) {
            const lpo_op *op = &l->ops[p->groups[g].first + k];
            n += (op->kind == LPO_OP_ALL_REDUCE || op->kind == LPO_OP_ALL_GATHER) && op->participants > 1;
        }
    return n;
}

/* The longest context of the step rounded up to a power of two (at least MIN_BUCKET, at most max_context):
 * one decode graph serves every step whose contexts fit it. */
static int64_t context_bucket(const cuda_ctx *c, const lpo_step_data *d) {
    int64_t len = 1, b = MIN_BUCKET;
    for (int i = 0; i < d->n_seqs; i++)
        if (d->n_past[i] + d->n_new[i] > len) len = d->n_past[i] + d->n_new[i];
    while (b < len) b *= 2;
    return b < c->cfg.max_context ? b : c->cfg.max_context;
}

lpo_status lpo__cuda_forward(void *vctx, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                             lpo_step_out *out) {
    cuda_ctx *c = vctx;
    const int64_t T = l->n_tokens;
    TRY(check_step(c, l, d));
    TRY(take_bad(c, 0)); /* an earlier chained step's logits, if their check has landed */
    const int decode = is_decode(l, d);
    /* graphs: decode steps in exec=graph without group callbacks (those need a host call per group) nor given
     * embedding rows (host data copied in the step) */
    const int graph = decode && c->cfg.exec == LPO_EXEC_GRAPH && !c->cb && d->n_embeds == 0;
    range_push(decode ? "decode_step" : "prefill");
    c->len_hint = graph ? context_bucket(c, d) : 1;
    if (!graph)
        for (int i = 0; i < d->n_seqs; i++)
            if (d->n_past[i] + d->n_new[i] > c->len_hint) c->len_hint = d->n_past[i] + d->n_new[i];
    lpo_status st = upload_step(c, l, d, T);
    size_t ng = p->n_groups; /* groups replayed from the graph: all, or all but SAMPLE when logits go out */
    if (graph && ng && out->logits && group_samples(l, &p->groups[ng - 1])) ng--;
    const int timed =
        c->comm_on && c->comm_ev; /* collective timing: the step's start, then each collective */
    c->comm_k = 0;
    c->comm_timed = 0;
    if (timed) c->comm_n = collectives_in(l, p, 0, p->n_groups);
    if (st == LPO_OK && timed) st = lpo__cuda_comm_mark(c, 0);
    if (st == LPO_OK && graph) {
        cudaGraphExec_t exec = NULL;
        st = decode_graph(c, l, p, d, ng, &exec);
        if (st == LPO_OK && cudaGraphLaunch(exec, c->stream) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: replaying a decode graph: %s",
                            cudaGetErrorString(cudaGetLastError()));
        c->comm_k = timed ? collectives_in(l, p, 0, ng) : 0;  /* the graph's, captured once */
        if (st == LPO_OK && ng == p->n_groups && l->sample) { /* its logits check has been copied out */
            if (cudaEventRecord(c->bad_copied, c->stream) != cudaSuccess)
                st = lpo_errorf(LPO_E_CUDA, "cuda backend: finite check event");
            c->bad_pending = 1;
        }
        if (st == LPO_OK) st = run_groups(c, l, p, d, ng, p->n_groups, out);
    } else if (st == LPO_OK) {
        st = step_prologue(c, d, T);
        if (st == LPO_OK) st = run_groups(c, l, p, d, 0, p->n_groups, out);
        if (st == LPO_OK) st = moe_tally(c, decode);
    }
    if (st == LPO_OK && out->logits && !l->sample)
        if (cudaMemcpyAsync(out->logits, c->buf[LPO_BUF_LOGITS],
                            (size_t)(l->n_logit_rows * c->spec.vocab_size) * sizeof(float),
                            cudaMemcpyDeviceToHost, c->stream) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: logits to the host");
    if (st == LPO_OK && out->ids)
        if (cudaMemcpyAsync(out->ids, c->d_ids, (size_t)l->n_logit_rows * sizeof(int32_t),
                            cudaMemcpyDeviceToHost, c->stream) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: ids to the host");
    if (st == LPO_OK && timed && (st = lpo__cuda_comm_mark(c, 1)) == LPO_OK) c->comm_timed = 1;
    if (st == LPO_OK && (out->logits || out->ids) && cudaStreamSynchronize(c->stream) != cudaSuccess)
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: step: %s", cudaGetErrorString(cudaGetLastError()));
    if (st == LPO_OK && (out->logits || out->ids)) st = take_bad(c, 1);
    range_pop();
    return st;
}

lpo_status lpo__cuda_set_sampling(void *vctx, int slot, const lpo_sampling *s, uint64_t stream) {
    cuda_ctx *c = vctx;
    if (!c->has_model || slot < 0 || slot >= c->cfg.max_seqs)
        return lpo_errorf(LPO_E_RANGE, "cuda backend: slot %d out of range", slot);
    lpo_cuda_sample_slot sp;
    TRY(lpo_cuda_sample_slot_make(&sp, s));
    const uint64_t zero = 0;
    CU(cudaMemcpyAsync(c->d_slot_params + slot, &sp, sizeof sp, cudaMemcpyHostToDevice, c->stream),
       "slot sampling parameters");
    CU(cudaMemcpyAsync(c->d_stream + slot, &stream, sizeof stream, cudaMemcpyHostToDevice, c->stream),
       "slot stream");
    CU(cudaMemcpyAsync(c->d_step + slot, &zero, sizeof zero, cudaMemcpyHostToDevice, c->stream),
       "slot counter");
    CU(cudaMemsetAsync(c->d_seen + (size_t)slot * (size_t)c->seen_words, 0,
                       (size_t)c->seen_words * sizeof(uint32_t), c->stream),
       "slot seen tokens");
    CU(cudaStreamSynchronize(c->stream), "set_sampling"); /* the host values above are on the stack */
    return LPO_OK;
}
#endif /* LPO_HAVE_CUDA */
