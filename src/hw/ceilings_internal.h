/* Internal interface between `lpo ceilings`' orchestration (ceilings_run.c, C) and its measuring code:
 * the GPU benches (ceil_gemm.cu, ceil_membw.cu, ceil_launch.cu: extern "C", each validated before it is
 * timed) and the CPU benches (ceil_cpu.c). Each bench is opened once (allocation, random data,
 * validation), then sampled: one sample = `reps` repetitions timed with CUDA events (host clock for the
 * CPU), returned as seconds per repetition. The protocol (warm-up, stopping rule, NVML) lives in C. */
#pragma once
#include <stddef.h>

#include "lpo/ceilings.h"
#include "lpo/stats.h"
#include "lpo/status.h"

/* ---- GPU: dense GEMM through cuBLASLt ------------------------------------------------------------------ */
typedef struct lpo__gemm_bench lpo__gemm_bench;
/* The GEMM of a GEMM roof (tf32: f32 data on the tensor cores; VECTOR is refused, LPO_E_INVALID).
 * D (m,n) = op(A) (m,k) @ B (k,n), TN layout, random data in [-1, 1) (int8: [-127, 127]); fp8 e4m3 in, bf16
 * out; int8 in, int32 out; others out in their own type. Picks the fastest of cuBLASLt's first heuristic
 * candidates, validates 16 random output elements against a float64 dot product of the stored inputs.
 * LPO_E_UNSUPPORTED when the GPU or cuBLASLt lacks the dtype (fp8 before sm_89); LPO_E_RANGE when the
 * result is wrong; LPO_E_CUDA on CUDA/cuBLASLt errors; LPO_E_NO_DEVICE without CUDA. */
enum { LPO__GEMM_FAST_ACCUM = 1 }; /* fp8: CUBLASLT_MATMUL_DESC_FAST_ACCUM (less precise accumulation) */
lpo_status lpo__gemm_bench_open(int dev, lpo_roof roof, int m, int n, int k, int flags,
                                lpo__gemm_bench **out);
/* One sample: reps back-to-back GEMMs between two events -> seconds per GEMM. */
lpo_status lpo__gemm_bench_sample(lpo__gemm_bench *b, int reps, double *seconds);
/* One GEMM on `stream` (a cudaStream_t; kbench's timing stream), asynchronous. */
lpo_status lpo__gemm_bench_run(lpo__gemm_bench *b, void *stream);
/* What is used: "cuBLASLt candidate 7 of 8, 8192x8192x8192 TN" */
const char *lpo__gemm_bench_detail(const lpo__gemm_bench *b);
/* The validated candidates kept (1 or 2: the pick, then the runner-up of the short ranking) and which one
 * the bench uses (0, the pick, after open): near-equal candidates can swap places at the sustained clock. */
int lpo__gemm_bench_algos(const lpo__gemm_bench *b);
void lpo__gemm_bench_use(lpo__gemm_bench *b, int i);
void lpo__gemm_bench_close(lpo__gemm_bench *b);

/* ---- GPU: memory bandwidth ---- */
typedef enum {
    LPO__BW_READ,       /* read kernel over `bytes` (16-byte loads): bytes per rep */
    LPO__BW_WRITE,      /* write kernel: bytes */
    LPO__BW_COPY,       /* copy kernel: 2 x bytes (read + written) */
    LPO__BW_MEMCPY_D2D, /* cudaMemcpyAsync D2D: 2 x bytes */
    LPO__BW_L2_READ,    /* read kernel over l2_bytes, `passes` passes per launch: l2_bytes x passes */
    LPO__BW_H2D,        /* pinned host -> device: host_bytes */
    LPO__BW_D2H,        /* device -> pinned host: host_bytes */
    LPO__BW_COUNT
} lpo__bw_kind;

typedef struct lpo__membw_bench lpo__membw_bench;
/* Allocates two device buffers of `bytes` (multiple of 16), an L2-resident buffer of about a quarter of
 * the L2, `host_bytes` of pinned host memory; fills them with random data; validates every kernel
 * (read checksum vs a plain scalar kernel, written pattern, copied checksum). */
lpo_status lpo__membw_bench_open(int dev, size_t bytes, size_t host_bytes, lpo__membw_bench **out);
/* Bytes one repetition of kind moves (the figure bandwidth is computed from). */
double lpo__membw_bytes(const lpo__membw_bench *b, lpo__bw_kind kind);
/* One sample: reps repetitions between two events -> seconds per repetition. */
lpo_status lpo__membw_bench_sample(lpo__membw_bench *b, lpo__bw_kind kind, int reps, double *seconds);
/* "1024 MiB, 1056 blocks x 512 threads" style description of kind */
void lpo__membw_detail(const lpo__membw_bench *b, lpo__bw_kind kind, char *buf, size_t n);
void lpo__membw_bench_close(lpo__membw_bench *b);

/* ---- GPU: launch latency ---- */
typedef struct lpo__launch_bench lpo__launch_bench;
/* Prepares a stream, a counter kernel (1 thread, counter += 1) and a CUDA graph of `nodes` such kernels in
 * sequence; validates that every launch and every node ran (the counter). */
lpo_status lpo__launch_bench_open(int dev, int nodes, lpo__launch_bench **out);
/* graph == 0: `nodes` stream launches back to back; graph == 1: one replay of the graph. Seconds per
 * kernel. */
lpo_status lpo__launch_bench_sample(lpo__launch_bench *b, int graph, double *seconds);
void lpo__launch_bench_close(lpo__launch_bench *b);

/* ---- GPUs together: the NCCL all-reduce (ceil_comm.c) ---- */
typedef struct lpo__ar_bench lpo__ar_bench;
/* NCCL communicators over GPUs 0 .. gpus-1 (ncclCommInitAll from this thread, lpo_nccl_env first), a
 * non-blocking stream, two events and a buffer of max_bytes on each. LPO_E_UNSUPPORTED built without NCCL;
 * LPO_E_NO_DEVICE with fewer GPUs; LPO_E_CUDA. */
lpo_status lpo__ar_bench_open(int gpus, size_t max_bytes, lpo__ar_bench **out);
/* Sets the message (count elements of dt: bf16 or f32) and validates it: GPU g's element i holds the small
 * integer ((7 i + 3 g) mod 13) - 6, one all-reduce, every GPU's result (all of it up to 1 MiB, its first and
 * last MiB above) must equal the exact sum; then the buffers are zeroed (repeated sums stay 0). Then `reps`
 * collectives are captured into one graph per GPU (eager launches when capture fails: mode says which).
 * reps 0: calibrated so that a replay lasts about 2 ms (1 .. 200). LPO_E_RANGE naming the GPU, element and
 * values on a wrong sum. */
lpo_status lpo__ar_bench_set(lpo__ar_bench *b, lpo_dtype dt, size_t count, int reps);
/* One sample: the reps collectives on every GPU between events; seconds per collective (the smallest of
 * the GPUs' times). */
lpo_status lpo__ar_bench_sample(lpo__ar_bench *b, double *seconds);
int lpo__ar_bench_reps(const lpo__ar_bench *b);
const char *lpo__ar_bench_mode(const lpo__ar_bench *b); /* "graph" | "eager" */
void lpo__ar_bench_close(lpo__ar_bench *b);

/* ---- choices and statistics (ceilings_run.c; host code, unit-tested) ----------------------------------- */
/* Index of the best of n candidates timed in `rounds` interleaved rounds: t (rounds x n, row-major) holds
 * seconds, work (n,) the work each timing did (NULL: all equal); a candidate's score is the median over
 * rounds of t / work (lower is better); a candidate with a non-finite or non-positive time in any round is
 * out. The EARLIEST candidate whose score is within rel_tol of the best is returned, so candidates that
 * close give the same choice from run to run (the order is the preference: cuBLASLt's heuristic rank, the
 * variant list) and the choice never favours one over a truly faster one by more than rel_tol. -1 when no
 * candidate is left. rounds <= 64. score (n,), when not NULL, receives each candidate's score (INFINITY:
 * out). */
int lpo__ceil_pick_rounds(const double *t, int rounds, int n, const double *work, double rel_tol,
                          double *score);
/* Fills e's value and spread from the statistics of seconds per repetition: rate figures (per_second 1)
 * value = work / median, p10 = work / p90 time, p90 = work / p10 time; latency figures (per_second 0)
 * value = work x median (work = 1e6: microseconds), p10/p90 likewise; samples = s->n. */
void lpo__ceil_entry_from_stats(lpo_ceil_entry *e, const lpo_stats *s, double work, int per_second);

/* ---- CPU ---- */
/* f32 FMA peak over all OpenMP threads: `iters` rounds of independent FMA chains in the widest vector
 * code this CPU runs (AVX-512, AVX2+FMA or the compiler's generic vectors). Returns seconds and the flops
 * done; isa gets "avx512f" / "avx2+fma" / "generic". */
lpo_status lpo__cpu_fma_sample(long iters, double *seconds, double *flops, const char **isa);
/* STREAM-style triad a[i] = b[i] + s * c[i] and read (sum of a) over n doubles per array, OpenMP threads;
 * open allocates and first-touches in parallel, and validates both against a serial reference. */
typedef struct lpo__cpu_stream lpo__cpu_stream;
lpo_status lpo__cpu_stream_open(size_t n, lpo__cpu_stream **out);
/* triad == 1: triad (bytes 3 x 8 x n); 0: read (8 x n). Seconds per pass. */
lpo_status lpo__cpu_stream_sample(lpo__cpu_stream *s, int triad, double *seconds);
void lpo__cpu_stream_close(lpo__cpu_stream *s);
