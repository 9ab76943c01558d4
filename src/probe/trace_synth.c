/* Synthetic raw traces (lpo_trace_synthesize): the shape of an LLM decode traced by lpo, with known
 * answers, for the unit tests and the post-processing benchmark (`lpo trace --synthetic=N`).
 *
 * Layout: steps of 64 kernels. Each step is an NVTX push/pop range "decode_step" holding 4 ranges
 * "layers.<l>" (16 kernels each), and each kernel has its own innermost range "op.<kind>". Every
 * kernel has a launch API call (cudaLaunchKernel), a LAUNCH record linking its correlation id to the
 * innermost range, and runs on one of 3 streams for 2..49 us after a 5 us launch latency. Every 8th
 * step is replayed from a CUDA graph instead: one cudaGraphLaunch call, kernels with graph node ids
 * labelled "graph.layers.<l>" (NODE_LABEL records, through NODE_CLONE for half of them). Each step also
 * does one 4 KiB HtoD memcpy. 300 distinct kernel names. */
#include <stdio.h>
#include <string.h>

#include "lpo/trace.h"
#include "probe/trace_format.h"

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void put_str(lpo_raw_writer *w, uint32_t id, const char *s) {
    lpo_raw_put(w, LPO_REC_STRING, id, s, strlen(s) + 1);
}

enum { N_NAMES = 300, KERNELS_PER_STEP = 64, LAYERS_PER_STEP = 4 };
/* string ids */
enum {
    S_API = 1,
    S_GRAPH_API,
    S_STEP,
    S_LAYER0,
    S_OP0 = S_LAYER0 + LAYERS_PER_STEP,
    S_GLABEL0 = S_OP0 + 8,
    S_KERNEL0 = S_GLABEL0 + LAYERS_PER_STEP,
    S_THREAD = S_KERNEL0 + N_NAMES
};

lpo_status lpo_trace_synthesize(const char *path, size_t n_kernels, uint64_t seed) {
    lpo_raw_writer w;
    lpo_raw_header h;
    lpo_raw_header_init(&h, 4242);
    h.activities = LPO_ACT_DEFAULT;
    h.attribution = LPO_ATTR_CALLBACK;
    h.t_start_ns = 1000000000ull;
    if (lpo_raw_open(&w, path, &h, 8u << 20) != 0) return lpo_errorf(LPO_E_IO, "%s: cannot write", path);
    static const char *const kinds[8] = {"gemm", "attention", "rmsnorm", "rope",
                                         "silu", "add",       "reduce",  "copy"};
    static const char *const kname[8] = {"sm90_xmma_gemm_bf16_%d",    "flash_fwd_kernel_%d",
                                         "rms_norm_kernel<float>_%d", "rotary_embedding_kernel_%d",
                                         "silu_and_mul_kernel_%d",    "elementwise_add_kernel_%d",
                                         "reduce_kernel<512>_%d",     "copy_kernel_%d"};
    char b[128];
    put_str(&w, S_API, "cudaLaunchKernel");
    put_str(&w, S_GRAPH_API, "cudaGraphLaunch");
    put_str(&w, S_STEP, "decode_step");
    for (int l = 0; l < LAYERS_PER_STEP; l++) {
        snprintf(b, sizeof b, "layers.%d", l);
        put_str(&w, S_LAYER0 + (uint32_t)l, b);
        snprintf(b, sizeof b, "graph.layers.%d", l);
        put_str(&w, S_GLABEL0 + (uint32_t)l, b);
    }
    for (int k = 0; k < 8; k++) {
        snprintf(b, sizeof b, "op.%s", kinds[k]);
        put_str(&w, S_OP0 + (uint32_t)k, b);
    }
    for (int i = 0; i < N_NAMES; i++) {
        snprintf(b, sizeof b, kname[i % 8], i);
        put_str(&w, S_KERNEL0 + (uint32_t)i, b);
    }
    put_str(&w, S_THREAD, "main");
    lpo_raw_thread_name tn = {100, S_THREAD};
    lpo_raw_put(&w, LPO_REC_THREAD_NAME, 0, &tn, sizeof tn);

    uint64_t s = seed, t = h.t_start_ns, gpu_free[3] = {0, 0, 0}, range_id = 0, node = 1000;
    uint32_t corr = 1;
    const uint32_t tid = 100;
    for (size_t k0 = 0, step = 0; k0 < n_kernels; step++) { /* one decode step */
        const int graph = step % 8 == 7;
        const uint64_t step_id = ++range_id;
        lpo_raw_range_begin rb = {t, step_id, 0, tid, S_STEP, 0, 0};
        lpo_raw_put(&w, LPO_REC_RANGE_BEGIN, 0, &rb, sizeof rb);
        t += 2000;
        const uint32_t mc_corr = corr++;
        lpo_raw_memcpy mc = {.start = t + 3000,
                             .end = t + 5000,
                             .bytes = 4096,
                             .corr = mc_corr,
                             .stream = 7,
                             .copy_kind = 1,
                             .src_kind = 1,
                             .dst_kind = 3};
        lpo_raw_put(&w, LPO_REC_MEMCPY, 0, &mc, sizeof mc);
        uint32_t graph_corr = 0;
        if (graph) { /* one graph launch for the whole step */
            graph_corr = corr++;
            lpo_raw_api a = {.start = t,
                             .end = t + 4000,
                             .corr = graph_corr,
                             .tid = tid,
                             .cbid = 311,
                             .name = S_GRAPH_API};
            lpo_raw_put(&w, LPO_REC_API, 0, &a, sizeof a);
            lpo_raw_launch l = {graph_corr, 0, step_id};
            lpo_raw_put(&w, LPO_REC_LAUNCH, 0, &l, sizeof l);
            t += 4000;
        }
        for (int l = 0; l < LAYERS_PER_STEP && k0 < n_kernels; l++) { /* layers of the step */
            const uint64_t layer_id = ++range_id;
            if (!graph) {
                lpo_raw_range_begin lb = {t, layer_id, step_id, tid, S_LAYER0 + (uint32_t)l, 0, 0};
                lpo_raw_put(&w, LPO_REC_RANGE_BEGIN, 0, &lb, sizeof lb);
            }
            for (int j = 0; j < KERNELS_PER_STEP / LAYERS_PER_STEP && k0 < n_kernels;
                 j++, k0++) { /* kernels */
                const uint64_t r = rng_next(&s);
                const int kind = (int)(r % 8);
                const uint32_t name = S_KERNEL0 + (uint32_t)((r >> 8) % (N_NAMES / 8) * 8 + (uint64_t)kind);
                const unsigned stream = (unsigned)((r >> 20) % 3);
                const uint64_t dur = 2000 + (r >> 32) % 48000;
                uint32_t c = graph_corr;
                if (!graph) { /* op range, launch call, LAUNCH record */
                    const uint64_t op_id = ++range_id;
                    lpo_raw_range_begin ob = {t, op_id, layer_id, tid, S_OP0 + (uint32_t)kind, 0, 0};
                    lpo_raw_put(&w, LPO_REC_RANGE_BEGIN, 0, &ob, sizeof ob);
                    c = corr++;
                    lpo_raw_api a = {
                        .start = t + 200, .end = t + 2700, .corr = c, .tid = tid, .cbid = 211, .name = S_API};
                    lpo_raw_put(&w, LPO_REC_API, 0, &a, sizeof a);
                    lpo_raw_launch ln = {c, 0, op_id};
                    lpo_raw_put(&w, LPO_REC_LAUNCH, 0, &ln, sizeof ln);
                    lpo_raw_range_end oe = {t + 3000, op_id, tid, 0};
                    lpo_raw_put(&w, LPO_REC_RANGE_END, 0, &oe, sizeof oe);
                    t += 3000;
                }
                uint64_t start = t + 5000 > gpu_free[stream] ? t + 5000 : gpu_free[stream];
                lpo_raw_kernel kr = {.start = start,
                                     .end = start + dur,
                                     .corr = c,
                                     .name = name,
                                     .stream = stream,
                                     .grid = {128, 1, 1},
                                     .block = {256, 1, 1},
                                     .regs = 64};
                if (graph) {
                    kr.graph_node_id = ++node;
                    kr.graph_id = 1;
                    if (node % 2) { /* labelled directly */
                        lpo_raw_node_label nl = {node, S_GLABEL0 + (uint32_t)l, 1};
                        lpo_raw_put(&w, LPO_REC_NODE_LABEL, 1, &nl, sizeof nl);
                    } else { /* labelled at capture, then cloned into the executable graph, where the
                              * clone's creation is labelled with the range open at instantiation */
                        lpo_raw_node_label nl = {node + 1000000000ull, S_GLABEL0 + (uint32_t)l, 1};
                        lpo_raw_put(&w, LPO_REC_NODE_LABEL, 0, &nl, sizeof nl);
                        lpo_raw_node_label inst = {node, S_STEP, 1};
                        lpo_raw_put(&w, LPO_REC_NODE_LABEL, 0, &inst, sizeof inst);
                        lpo_raw_node_clone cl = {node, node + 1000000000ull};
                        lpo_raw_put(&w, LPO_REC_NODE_CLONE, 0, &cl, sizeof cl);
                    }
                    t += 100;
                }
                gpu_free[stream] = start + dur;
                lpo_raw_put(&w, LPO_REC_KERNEL, 0, &kr, sizeof kr);
            }
            if (!graph) {
                lpo_raw_range_end le = {t, layer_id, tid, 0};
                lpo_raw_put(&w, LPO_REC_RANGE_END, 0, &le, sizeof le);
            }
        }
        lpo_raw_range_end se = {t + 1000, step_id, tid, 0};
        lpo_raw_put(&w, LPO_REC_RANGE_END, 0, &se, sizeof se);
        t += 1000;
        uint64_t gmax = gpu_free[0];
        for (int q = 1; q < 3; q++) gmax = gpu_free[q] > gmax ? gpu_free[q] : gmax;
        if (gmax > t) t = gmax; /* the step synchronises */
    }
    lpo_raw_end e = {t, LPO_END_EXIT, 0};
    lpo_raw_put(&w, LPO_REC_END, 0, &e, sizeof e);
    if (lpo_raw_close(&w) != 0) return lpo_errorf(LPO_E_IO, "%s: cannot write (disk full?)", path);
    return LPO_OK;
}
