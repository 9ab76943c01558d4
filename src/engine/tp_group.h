/* The engine's tensor-parallel ranks (internal to the engine): one host thread per rank, each owning its
 * backend context (init, forward, set_sampling and free run on it, so a GPU backend's thread keeps its
 * device and captures its own graphs), the backend's shared part (tp_open: communicators), and a step
 * handed to every rank and waited for with a timeout that names the ranks that did not finish and the
 * collective each queued last. docs/engine.md "Tensor parallelism". */
#pragma once
#include "lpo/backend.h"

typedef struct lpo__tp_group lpo__tp_group;

/* Opens tp ranks of backend be: tp_open on devices in->device.., then every rank's init (rank r on device
 * in->device + r) on its thread. timeout_s bounds every later call (a step); init waits at least 600 s. */
lpo_status lpo__tp_group_open(const lpo_backend_iface *be, const lpo_backend_init *in, int tp,
                              double timeout_s, lpo__tp_group **out);
/* Frees every rank's context (on its thread), the shared part, the threads. NULL is fine. */
void lpo__tp_group_close(lpo__tp_group *g);
/* Rank r's context (rank 0's answers the engine's queries: plan, marks, activations, group events). */
void *lpo__tp_group_ctx(const lpo__tp_group *g, int rank);
/* One step on every rank; rank 0 returns out (the others run the same list with no host outputs: their
 * SAMPLE leaves the same ids on their devices). An error names the rank; a rank that does not finish
 * within the timeout aborts the communicator: LPO_E_TIMEOUT naming the rank(s) and their last collective,
 * and the group refuses every later call. */
lpo_status lpo__tp_group_forward(lpo__tp_group *g, const lpo_oplist *l, const lpo_plan *p,
                                 const lpo_step_data *d, lpo_step_out *out);
/* A slot's sampling parameters on every rank. */
lpo_status lpo__tp_group_set_sampling(lpo__tp_group *g, int slot, const lpo_sampling *s, uint64_t stream);
/* Sum over the ranks of memory_bytes or weight_bytes (which: 0 memory, 1 weights). */
size_t lpo__tp_group_bytes(const lpo__tp_group *g, int which);
/* fn(ctx, rank, ud) on every rank's thread (with the step timeout); the first error names its rank. */
lpo_status lpo__tp_group_each(lpo__tp_group *g, lpo_status (*fn)(void *ctx, int rank, void *ud), void *ud);
/* Test hook: rank `rank` returns from every later step without running it (a rank that stopped). */
void lpo__tp_group_fault(lpo__tp_group *g, int rank);
