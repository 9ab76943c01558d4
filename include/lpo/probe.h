/* lpo probe: the in-process API of the CUPTI tracer, for lpo's own engine and commands.
 *
 * The tracer lives in liblpo_probe.so (built next to the lpo binary when CUPTI is available); this API
 * loads it with dlopen only when tracing is asked for, so an untraced lpo never loads CUPTI (and can run
 * under Nsight Compute). Two ways in:
 *   - lpo_probe_start/stop: trace this process into dir (raw files; lpo_trace_load_dir reads them).
 *   - under `lpo trace -- lpo ...` the library is already injected (CUDA_INJECTION64_PATH): then
 *     lpo_probe_attach() binds to it and push/pop/labels reach the running trace.
 * Every call is cheap when not tracing (a test of a function pointer), so the engine may call
 * lpo_probe_push/pop around every op group and lpo_probe_graph_node_label at capture unconditionally.
 *
 * Attribution contract for the CUDA engine:
 *   - eager: lpo_probe_push("layers.7.attn") before launching a group's kernels, lpo_probe_pop() after;
 *     kernels launched in between carry that label (innermost open range on the launching thread).
 *   - graphs: at capture, for each node of a group, lpo_probe_graph_node_label(node_id, "layers.7.attn")
 *     with node_id = lpo_probe_graph_node_id(cuGraphNode) (CUPTI's id of that node); replayed kernels
 *     get the label of their node (labels follow the clones cudaGraphInstantiate makes). Ranges pushed
 *     while capturing label the nodes created inside them automatically, so pushing the group's range
 *     during capture is enough when the engine does not label nodes itself.
 *   - steps: a range named "decode_step" (or any name given to --step-range) around each step gives
 *     steps.csv (launch latency, GPU busy, idle share per step). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/status.h"

typedef struct {
    const char *dir;           /* where trace-<pid>-<n>.lpot is written (must exist) */
    const char *activities;    /* "kernel,memcpy,..." as `lpo trace --activities`; NULL: the default */
    const char *attribution;   /* "callback" (default) | "extcorr" | "none" */
    const char *capture_range; /* record only inside NVTX ranges of this name; NULL: always */
} lpo_probe_options;

/* Starts tracing this process. Errors: LPO_E_UNSUPPORTED (no liblpo_probe.so: built without CUPTI, or
 * LPO_PROBE_LIB points nowhere), LPO_E_INVALID (bad activity list), LPO_E_IO (cannot write in dir). */
lpo_status lpo_probe_start(const lpo_probe_options *o);
/* Flushes and closes the raw file; tracing can start again later (a new file). */
lpo_status lpo_probe_stop(void);
/* Binds to a tracer injected by `lpo trace` (LPO_TRACE_DIR set); 1 when bound. Idempotent. */
int lpo_probe_attach(void);
/* 1 while recording. */
int lpo_probe_active(void);
/* NVTX-like ranges on the calling thread (no-ops when not tracing). */
void lpo_probe_push(const char *label);
void lpo_probe_pop(void);
/* Labels a CUDA graph node (CUPTI's node id) for kernels replayed from it. No-op when not tracing. */
void lpo_probe_graph_node_label(uint64_t graph_node_id, const char *label);
/* CUPTI's id of a CUgraphNode; 0 when not tracing. */
uint64_t lpo_probe_graph_node_id(void *cu_graph_node);
/* Path of liblpo_probe.so that lpo would use (LPO_PROBE_LIB, else next to the lpo executable or one level
 * up, else <prefix>/lib/lpo of an installed lpo), into buf; 1 when the file exists, else 0 (buf: the path
 * next to the executable, or LPO_PROBE_LIB's value). */
int lpo_probe_library_path(char *buf, size_t n);
/* The directory holding the PyTorch shim of `lpo trace --torch-ops` (sitecustomize.py): LPO_TORCH_SHIM
 * when set, else lpo_torch/ next to the executable (or one level up). 1 when it exists, else 0 (buf: the
 * path next to the executable, or LPO_TORCH_SHIM's value). */
int lpo_probe_torch_shim_dir(char *buf, size_t n);
