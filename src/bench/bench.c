/* lpo bench's measuring core (bench.h): one (batch, prompt, gen) point on an open engine, timed with the
 * engine's marks, repeated until TTFT and decode time are stable, with op-list FLOPs and bytes for
 * MFU / MBU, and with engine.tp > 1 a pass of timed collectives (communication per GPU). */
#include "lpo/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"

/* FLOPs and bytes of one op list: decode (batch B at context ctx) or prefill (B sequences of T tokens), with
 * every weight as the engine holds it (fp8 matrices with their scales, the rest in the compute dtype), and
 * t_peak: its FLOPs at the peak of the precision each op runs in (GEMMs on their weights' roof, e.g. fp8;
 * every other op on the compute dtype's), 0 without peaks. Tensor parallel: one rank's list (its parts, its
 * collectives), so MFU and MBU are per GPU. hit: per layer, the distinct experts a step of a real routing
 * read (NULL: the uniform expectation). */
static lpo_status list_costs(const lpo_engine *e, int decode, int B, int64_t t_or_ctx, const double *hit,
                             const lpo_peaks *peaks, double *flops, double *bytes, double *t_peak) {
    const lpo_dtype dt = lpo_engine_dtype(e);
    const lpo_dtype_lookup vec = {(void *)&dt, lpo_dtype_lookup_uniform};
    const lpo_oplist_opts o = {dt, lpo_engine_kv_dtype(e), lpo_engine_held_dtypes(e), &vec, lpo_engine_tp(e)};
    lpo_oplist l = {0};
    lpo_status st = lpo_oplist_build_phase(lpo_engine_spec(e), decode, B, t_or_ctx, &o, &l);
    *flops = *bytes = *t_peak = 0;
    const double dpeak = peaks ? peaks->tflops[lpo_dtype_roof(dt)] * 1e12 : 0;
    for (size_t i = 0; st == LPO_OK && i < l.n_ops; i++) {
        if (hit && l.ops[i].kind == LPO_OP_EXPERTS && l.ops[i].layer >= 0 && hit[l.ops[i].layer] > 0)
            l.ops[i].experts_hit = hit[l.ops[i].layer];
        const lpo_op *op = &l.ops[i];
        *flops += lpo_op_flops(op);
        *bytes += lpo_op_bytes(op);
        double pk = dpeak;
        if (peaks && lpo_op_kind_cat(op->kind) == LPO_CAT_GEMM && op->n_w > 0 &&
            lpo_dtype_roof(op->w[0].dtype) < LPO_ROOF_N_GEMM &&
            peaks->tflops[lpo_dtype_roof(op->w[0].dtype)] > 0)
            pk = peaks->tflops[lpo_dtype_roof(op->w[0].dtype)] * 1e12;
        if (pk > 0) *t_peak += lpo_op_flops(op) / pk;
    }
    lpo_oplist_free(&l);
    return st;
}

typedef struct {
    lpo_engine *e;
    const lpo_bench_point *pt;
    int *slots;
    int32_t **prompts;
    const int32_t **toks;
    int64_t *lens;
} point_ctx;

/* One repeat: reset, prefill + first sample, G - 1 chained decode steps; times from the engine's marks. */
static lpo_status one_repeat(point_ctx *c, double *ttft_ms, double *decode_ms) {
    const int B = c->pt->batch;
    const lpo_sampling greedy = {0, 0, 1, 1, 0};
    lpo_status st = LPO_OK;
    for (int i = 0; i < B && st == LPO_OK; i++) {
        lpo_engine_reset(c->e, i);
        st = lpo_engine_set_sampling(c->e, i, &greedy, (uint64_t)i);
    }
    lpo_engine_batch pre = {B, c->slots, c->toks, c->lens, 0, NULL, 1, NULL, NULL};
    lpo_engine_batch dec = {B, c->slots, NULL, NULL, 0, NULL, 1, NULL, NULL};
    if (st == LPO_OK) st = lpo_engine_mark(c->e, 0);
    if (st == LPO_OK) st = lpo_engine_run(c->e, &pre);
    if (st == LPO_OK) st = lpo_engine_mark(c->e, 1);
    for (int64_t s = 1; s < c->pt->gen && st == LPO_OK; s++) st = lpo_engine_run(c->e, &dec);
    if (st == LPO_OK) st = lpo_engine_mark(c->e, 2);
    if (st == LPO_OK) st = lpo_engine_elapsed_ms(c->e, 0, 1, ttft_ms);
    if (st == LPO_OK) st = lpo_engine_elapsed_ms(c->e, 1, 2, decode_ms);
    return st;
}

/* MoE: the routing of the timed decode steps (statistics since the reset after the warm-up): per layer the
 * distinct experts a step read on average (hit, 0 for dense layers), their mean over the sparse layers, the
 * uniform expectation, and the load imbalance (the busiest expert's pairs over the mean, worst layer). */
static lpo_status moe_routing(lpo_engine *e, int B, double *hit, lpo_bench_result *out) {
    const lpo_model_spec *s = lpo_engine_spec(e);
    const size_t L = (size_t)s->n_layers, E = (size_t)s->moe.n_experts;
    lpo_moe_stats ms = {0, 0, calloc(2 * L, 8), calloc(2 * L, 8), calloc(2 * L * E, 8)};
    lpo_status st = ms.steps && ms.distinct && ms.pairs ? lpo_engine_moe_stats(e, &ms, 0)
                                                        : lpo_errorf(LPO_E_NOMEM, "bench: out of memory");
    int n = 0;
    for (size_t l = 0; st == LPO_OK && l < L; l++) {
        const uint64_t steps = ms.steps[L + l], *pr = ms.pairs + (L + l) * E;
        if (!steps) continue;
        hit[l] = (double)ms.distinct[L + l] / (double)steps;
        out->moe_experts_per_layer += hit[l];
        uint64_t sum = 0, mx = 0;
        for (size_t x = 0; x < E; x++) sum += pr[x], mx = pr[x] > mx ? pr[x] : mx;
        const double imb = sum ? (double)mx * (double)E / (double)sum : 0;
        if (imb > out->moe_imbalance) out->moe_imbalance = imb;
        n++;
    }
    if (n) {
        const double k = (double)s->moe.n_experts_used, En = (double)E;
        out->moe_experts_per_layer /= n;
        out->moe_experts_uniform = En * (1.0 - pow(1.0 - k / En, (double)B));
    }
    free(ms.steps);
    free(ms.distinct);
    free(ms.pairs);
    return st;
}

/* The stopping rule over both series: enough samples and time, both relative stdevs small. */
static int stable(const double *a, const double *b, size_t n, double total_s, const lpo_measure_opts *o,
                  int has_decode) {
    if (n < (size_t)o->min_samples || total_s < o->min_time_s) return 0;
    lpo_stats sa, sb;
    if (lpo_stats_compute(a, n, &sa) != LPO_OK) return 0;
    if (sa.rel_stdev > o->max_rel_stdev || sa.max > LPO_MEASURE_MAX_SPREAD * sa.min) return 0;
    if (!has_decode) return 1;
    return lpo_stats_compute(b, n, &sb) == LPO_OK && sb.rel_stdev <= o->max_rel_stdev &&
           !(sb.max > LPO_MEASURE_MAX_SPREAD * sb.min);
}

lpo_status lpo_bench_run(lpo_engine *e, const lpo_bench_point *pt, const lpo_measure_opts *mo,
                         const lpo_peaks *peaks, uint64_t seed, lpo_bench_progress progress, void *ud,
                         lpo_bench_result *out) {
    memset(out, 0, sizeof *out);
    out->pt = *pt;
    const lpo_model_spec *s = lpo_engine_spec(e);
    if (pt->batch < 1 || pt->batch > lpo_engine_max_seqs(e) || pt->prompt < 1 || pt->gen < 1 ||
        pt->prompt + pt->gen > lpo_engine_max_context(e))
        return lpo_errorf(
            LPO_E_RANGE,
            "bench: point batch %d, prompt %lld, gen %lld does not fit the engine (batch <= %d, "
            "prompt + gen <= %lld)",
            pt->batch, (long long)pt->prompt, (long long)pt->gen, lpo_engine_max_seqs(e),
            (long long)lpo_engine_max_context(e));
    const int B = pt->batch;
    point_ctx c = {e, pt, NULL, NULL, NULL, NULL};
    c.slots = calloc((size_t)B, sizeof *c.slots);
    c.prompts = calloc((size_t)B, sizeof *c.prompts);
    c.toks = calloc((size_t)B, sizeof *c.toks);
    c.lens = calloc((size_t)B, sizeof *c.lens);
    size_t cap = (size_t)(mo->max_samples > 0 ? mo->max_samples : 1);
    if (cap > 100000) cap = 100000;
    double *ttft = malloc(cap * sizeof *ttft), *dec = malloc(cap * sizeof *dec),
           *e2e = malloc(cap * sizeof *e2e);
    lpo_status st = LPO_OK;
    if (!c.slots || !c.prompts || !c.toks || !c.lens || !ttft || !dec || !e2e)
        st = lpo_errorf(LPO_E_NOMEM, "bench: out of memory");
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < B && st == LPO_OK; i++) { /* random prompt ids, a different prompt per sequence */
        c.prompts[i] = malloc((size_t)pt->prompt * sizeof **c.prompts);
        if (!c.prompts[i]) {
            st = lpo_errorf(LPO_E_NOMEM, "bench: out of memory for prompts");
            break;
        }
        for (int64_t j = 0; j < pt->prompt; j++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            c.prompts[i][j] = (int32_t)(r % (uint64_t)s->vocab_size);
        }
        c.slots[i] = i;
        c.toks[i] = c.prompts[i];
        c.lens[i] = pt->prompt;
    }
    for (int w = 0; w < mo->warmup && st == LPO_OK; w++) {
        double a, b;
        if (progress) progress(ud, pt, w, 1);
        st = one_repeat(&c, &a, &b);
    }
    /* MoE: the routing statistics of the timed repeats only */
    const int moe = st == LPO_OK && lpo_spec_has_moe(s) && lpo_engine_moe_stats(e, NULL, 1) == LPO_OK;
    if (!moe && st == LPO_OK) lpo_error_clear();
    double *hit = moe ? calloc((size_t)s->n_layers, sizeof *hit) : NULL;
    size_t n = 0;
    double total_s = 0;
    const uint64_t t0 = lpo_now_ns();
    while (st == LPO_OK) {
        if (progress) progress(ud, pt, (int)n, 0);
        st = one_repeat(&c, &ttft[n], &dec[n]);
        if (st != LPO_OK) break;
        e2e[n] = ttft[n] + dec[n];
        total_s += e2e[n] / 1e3;
        n++;
        out->converged = stable(ttft, dec, n, total_s, mo, pt->gen > 1);
        if (out->converged || n >= cap || (double)(lpo_now_ns() - t0) * 1e-9 >= mo->timeout_s) break;
    }
    if (st == LPO_OK) st = lpo_stats_compute(ttft, n, &out->ttft_ms);
    if (st == LPO_OK) st = lpo_stats_compute(dec, n, &out->decode_ms);
    if (st == LPO_OK) st = lpo_stats_compute(e2e, n, &out->e2e_ms);
    if (st == LPO_OK) {
        out->ttft_ms.converged = out->decode_ms.converged = out->e2e_ms.converged = out->converged;
        const double steps = (double)(pt->gen - 1);
        out->tpot_ms = steps > 0 ? out->decode_ms.median / steps : 0;
        out->prefill_tok_s = (double)B * (double)pt->prompt / (out->ttft_ms.median / 1e3);
        out->decode_tok_s = steps > 0 ? (double)B * steps / (out->decode_ms.median / 1e3) : 0;
        double pb, tp_prefill = 0, tp_decode = 0;
        if (hit && steps > 0) st = moe_routing(e, B, hit, out);
        if (st == LPO_OK)
            st = list_costs(e, 0, B, pt->prompt, NULL, peaks, &out->prefill_flops, &pb, &tp_prefill);
        /* decode steps run at contexts P .. P + G - 2: costs are linear in the context, so the step at
         * the mean context has the mean cost (rounded to a whole position) */
        const int64_t mean_ctx = pt->prompt + (pt->gen - 2) / 2;
        if (st == LPO_OK && steps > 0)
            st = list_costs(e, 1, B, mean_ctx, hit && out->moe_experts_per_layer > 0 ? hit : NULL, peaks,
                            &out->decode_flops_per_step, &out->decode_bytes_per_step, &tp_decode);
        const double bw = peaks ? peaks->dram_gbs * 1e9 : 0;
        /* MFU against the peak of the precision each op runs in (one dtype: flops / peak / time) */
        if (tp_prefill > 0) {
            out->mfu_prefill = tp_prefill / (out->ttft_ms.median / 1e3);
            if (out->tpot_ms > 0) out->mfu_decode = tp_decode / (out->tpot_ms / 1e3);
        }
        if (bw > 0 && out->tpot_ms > 0)
            out->mbu_decode = out->decode_bytes_per_step / (out->tpot_ms / 1e3) / bw;
        out->weight_bytes = (double)lpo_engine_weight_bytes(e);
        out->memory_bytes = (double)lpo_engine_memory_bytes(e);
        out->kv_bytes = (double)lpo_spec_kv_bytes_per_token(s, lpo_engine_kv_dtype(e)) *
                        (double)lpo_engine_max_seqs(e) * (double)lpo_engine_max_context(e);
    }
    if (st == LPO_OK && lpo_engine_tp(e) > 1 && pt->gen > 1) { /* where a step's time goes between the GPUs */
        const int steps = pt->gen - 1 < 16 ? (int)(pt->gen - 1) : 16;
        if (lpo_engine_comm_measure(e, B, pt->prompt, steps, &out->comm) != LPO_OK) {
            snprintf(out->comm_note, sizeof out->comm_note, "communication per GPU not measured: %s",
                     lpo_last_error());
            LPO_WARN("bench: %s", out->comm_note);
            memset(&out->comm, 0, sizeof out->comm);
        }
        lpo_error_clear();
    }
    for (int i = 0; c.prompts && i < B; i++) free(c.prompts[i]);
    free(c.prompts);
    free(c.slots);
    free(c.toks);
    free(c.lens);
    free(ttft);
    free(dec);
    free(e2e);
    free(hit);
    return st;
}
