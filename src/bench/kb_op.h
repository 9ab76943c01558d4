/* kbench internals of the engine's ops (C only; kb_cudnn.cu includes kbench_internal.h, not this): one op
 * checked by the op checker and timed by the backend's run_op (kb_op.c), shared by the operator cases
 * (kb_cases.c) and model mode (kb_model.c); the case table's row writer and NVML bracket (kbench.c). */
#pragma once
#include "bench/kbench_internal.h"
#include "lpo/backend.h"
#include "lpo/nvml_sampler.h"
#include "lpo/opcheck.h"
#include "lpo/ops.h"

/* Linears of at most this many rows run on the CUDA backend's GEMV kernels when engine.gemv is on (its rule,
 * LPO_CUDA_GEMV_MAX_M); more rows, or engine.gemv=false: cuBLASLt. The GPU test checks the claim by trace. */
#define KB_GEMV_MAX_M 8

/* Where and how an op is checked and timed. */
typedef struct {
    const lpo_backend_iface *be;
    void *ctx;    /* a run_op context of be */
    lpo_dtype dt; /* its compute dtype (the checker's tolerances) */
    int device;   /* be runs on a GPU (hot samples of GPU length) */
    uint64_t seed;
    const lpo_step *layout;       /* token layout of the timed data (ROPE, ATTENTION); NULL: the checker's */
    const lpo_sampling *sampling; /* SAMPLE: every row's parameters; NULL: the checker's mix */
    lpo_measure_opts mo;
    lpo_nvml_sampler *nv; /* SM clocks for the throttled-sample rule; NULL: none */
} kb_op_env;

/* The op checker on op (past 2 GFLOP: on its first rows, at least 16): LPO_E_RANGE naming variant when it
 * fails (the op is then never timed). validated: "all 8 rows" / "16 of 4096 rows". */
lpo_status lpo__kb_op_check(const kb_op_env *env, const lpo_op *op, const char *variant, char *validated,
                            size_t vn, double *max_abs);
/* Times op by run_op under env->mo: *out holds the per-launch samples, *reps the launches per sample. */
lpo_status lpo__kb_op_time(const kb_op_env *env, const lpo_op *op, lpo_measure **out, int *reps);
/* GEMMs (linear, lm_head) against the compute dtype's roof (dtype table), everything else the vector roof. */
lpo_roof lpo__kb_op_roof(lpo_op_kind k, lpo_dtype dt);

/* One row of the case table. */
typedef struct {
    const char *name, *dtype, *shape, *variant;
    int cuda, graph;
    double flops, bytes; /* per execution */
    lpo_roof roof;
    int reps;
    double max_abs_err;
} kb_row;
/* Appends the row (statistics of m, ceilings, bound class, NVML averages), its samples to
 * kbench_samples.csv and its roofline point; warns when it did not converge or passed the DRAM ceiling in
 * hot mode. */
lpo_status lpo__kb_case_row(lpo_kbench *kb, const kb_row *r, const run_opts *ro, const lpo_measure *m,
                            const lpo_nvml_summary *nv);
/* NVML around a timed case (GPU): opens and starts a sampler (NULL when NVML is absent) ... */
lpo_nvml_sampler *lpo__kb_nvml_begin(int device, const run_opts *ro);
/* ... stops it, summarises it into *s (empty without a sampler) and appends its readings to nvml.csv under
 * the index of the next row; closes it. */
void lpo__kb_nvml_end(lpo_kbench *kb, lpo_nvml_sampler *nv, lpo_nvml_summary *s);

/* Operator cases of the engine's op kinds (kb_cases.c): the kind a case name stands for (0: none); one run
 * of kind at the kbench keys; `linears`: every linear layer of model=<preset> (layer 0 and lm_head). */
int lpo__kb_op_case_find(const char *name, lpo_op_kind *kind);
const char *lpo__kb_op_case_summary(lpo_op_kind kind);
lpo_status lpo__kb_op_case_run(lpo_kbench *kb, const lpo_node *cfg, const kb_params *p, const run_opts *ro,
                               lpo_op_kind kind);
lpo_status lpo__kb_linears_run(lpo_kbench *kb, const lpo_node *cfg, const kb_params *p, const run_opts *ro);
