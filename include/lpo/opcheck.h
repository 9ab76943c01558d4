/* lpo op checker: every op kind of a backend against the CPU reference, one op at a time, on fresh random
 * data, in the spirit of ggml's test-backend-ops. The same op structs the engine executes are used (taken
 * from a model's op lists, or built at odd shapes), so nothing describes an op twice.
 *
 * For each case: inputs drawn at random from a seed (never zeros or constants), outputs poisoned with NaN
 * before the run and checked for unwritten elements, then compared with the reference element by element
 * (|out - ref| <= atol + rtol |ref|, tolerances per compute dtype) and by normalized MSE; sampled ids must
 * be identical; attention's appended K/V cache rows are compared too. Layer rule: knows backend.h. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/backend.h"
#include "lpo/model.h"
#include "lpo/ops.h"

typedef struct {
    const char *kind;    /* op kind name */
    char shape[96];      /* lpo_op_shape (+ " ctx=" of the data: ROPE, ATTENTION): "m=7 n=48 k=80" */
    double max_abs_err;  /* max |out - ref| */
    double max_rel_viol; /* max of |out - ref| / (atol + rtol |ref|): <= 1 passes */
    double nmse;         /* sum (out - ref)^2 / sum ref^2 */
    int64_t n_checked;   /* elements compared */
    int64_t n_unwritten; /* outputs still NaN-poisoned after the run */
    int64_t n_nonfinite; /* NaN/Inf where the reference is finite */
    int64_t ids_mismatch;
    int passed;
    char msg[256]; /* first failure, "" when passed */
} lpo_opcheck_result;

/* Tolerances of a compute dtype: rtol, atol and the largest NMSE accepted. */
void lpo_opcheck_tolerance(lpo_dtype dt, double *rtol, double *atol, double *max_nmse);

/* Runs `op` on backend `be` (ctx: an op-only or model context of it) and on the CPU reference with the
 * same random data (seed), compares, fills r. Returns LPO_OK when the comparison could be made (r->passed
 * says whether it passed), an error when either side failed to run or the op is not supported. */
lpo_status lpo_opcheck_run(const lpo_backend_iface *be, void *ctx, lpo_dtype dt, const lpo_op *op,
                           uint64_t seed, lpo_opcheck_result *r);

/* ---- random data of one op (the checker's generator; kbench's model mode times ops on it) ------------- */
typedef struct lpo_op_data lpo_op_data;
/* Host data to run `op` alone (lpo_op_io): inputs and weights drawn at random from seed (matrices scaled by
 * 1/sqrt(fan_in), norm scales around 1, never zeros or constants), outputs NaN-poisoned, RoPE tables, token
 * ids, sampling state and, for ATTENTION, a random KV cache. Tokens (ROPE, ATTENTION) are laid out like
 * `step` when given: sequence i in KV slot i, its n_new[i] tokens at positions n_past[i].., packed in order
 * (the context of a model's real step); NULL: the checker's layout (up to 8 tokens: separate sequences at
 * random contexts <= 40; more: two sequences). LPO_E_INVALID when the step's tokens are not op->m,
 * LPO_E_NOMEM. The op must outlive the data. */
lpo_status lpo_op_data_new(const lpo_op *op, uint64_t seed, const lpo_step *step, lpo_op_data **out);
/* The lpo_op_io for backend->run_op (set repeat / ms / cold for timing). */
lpo_op_io *lpo_op_data_io(lpo_op_data *d);
/* lpo_op_shape, + " ctx=N" (the context the data holds) for ROPE and ATTENTION */
const char *lpo_op_data_shape(const lpo_op_data *d);
void lpo_op_data_free(lpo_op_data *d);

/* The check cases of a spec: one op of every kind in its prefill list of T tokens and its decode list at
 * context L, batch B (op pointers into the two lists, which the caller frees). */
typedef struct {
    lpo_oplist prefill, decode;
    const lpo_op **ops;
    size_t n;
} lpo_opcheck_cases;
lpo_status lpo_opcheck_cases_build(const lpo_model_spec *spec, int64_t T, int64_t L, int B,
                                   lpo_opcheck_cases *c);
void lpo_opcheck_cases_free(lpo_opcheck_cases *c);
