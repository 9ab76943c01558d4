/* lpo bench: end-to-end timing of the engine at fixed shapes (batch B, prompt P, generated G), as
 * llama-bench does for llama.cpp. One point = B sequences of P random prompt tokens, prefilled together
 * with the first token sampled (greedy), then G - 1 chained decode steps (EOS ignored, ids never read
 * back). Timed with the engine's marks (device events on a GPU), repeated under the measurement protocol
 * (stats.h) until TTFT and decode time are both stable or the timeout passes.
 *
 * Metrics per point (docs/bench.md): TTFT = prefill + first sample; TPOT = decode time / (G - 1);
 * prefill tok/s = B P / TTFT; decode tok/s = B (G - 1) / decode time; e2e = TTFT + decode time;
 * MFU = FLOPs of the step (op list) / time / dense peak; MBU = bytes a decode step must move (op list:
 * weights as held, KV read at the step's context, activations; a MoE layer's experts as the timed steps'
 * routing read them) / TPOT / DRAM bandwidth. With engine.tp > 1 the costs are one GPU's and a pass of timed
 * collectives gives each GPU's communication share and wait. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/ceilings.h"
#include "lpo/engine.h"
#include "lpo/measure.h"
#include "lpo/status.h"

typedef struct {
    int batch;
    int64_t prompt, gen;
} lpo_bench_point;

typedef struct {
    lpo_bench_point pt;
    lpo_stats ttft_ms, decode_ms, e2e_ms; /* per repeat */
    int converged;
    double tpot_ms;                              /* median decode time / (G - 1); 0 when G <= 1 */
    double prefill_tok_s, decode_tok_s;          /* from the medians */
    double prefill_flops, decode_flops_per_step; /* op-list FLOPs (decode at the mean context) */
    double decode_bytes_per_step;                /* op-list bytes a decode step must move (mean context) */
    double mfu_prefill, mfu_decode, mbu_decode;  /* fractions (0 when the peak is unknown) */
    double weight_bytes, kv_bytes, memory_bytes; /* held by the engine */
    /* MoE models (0 otherwise): the distinct experts a timed decode step read per sparse layer (its real
     * routing, which decode_bytes_per_step and mbu_decode count), the uniform expectation E (1 - (1 - k /
     * E)^B), and the load imbalance of the decode steps (pairs of the busiest expert over the mean, worst
     * layer; 1 = even) */
    double moe_experts_per_layer, moe_experts_uniform, moe_imbalance;
    /* tensor parallel (engine.tp > 1, gen > 1): communication per GPU over min(gen - 1, 16) chained decode
     * steps after the timed repeats (lpo_engine_comm_measure); comm.tp 0 when not measured (comm_note why) */
    lpo_tp_comm comm;
    char comm_note[200];
} lpo_bench_result;

/* Progress of a point (repeat = samples so far) for a progress line; may be NULL. */
typedef void (*lpo_bench_progress)(void *ud, const lpo_bench_point *pt, int repeat, int warmup);

/* Runs one point on an open engine (max_seqs >= batch, max_context >= prompt + gen). peaks may have
 * source NONE (MFU/MBU then 0). seed draws the prompt tokens. */
lpo_status lpo_bench_run(lpo_engine *e, const lpo_bench_point *pt, const lpo_measure_opts *mo,
                         const lpo_peaks *peaks, uint64_t seed, lpo_bench_progress progress, void *ud,
                         lpo_bench_result *out);
