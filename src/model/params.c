/* Parameter and byte accounting of a model, by part and by stored dtype (used by `lpo analyze` and the
 * static analysis). Counts what the model's tensor table holds, so real files count what they store. */
#include <string.h>

#include "model/model_internal.h"

lpo_status lpo_model_param_summary(const lpo_model *m, lpo_param_summary *out) {
    memset(out, 0, sizeof *out);
    out->tied = m->spec.tied_embeddings;
    for (size_t i = 0; i < m->n_tensors; i++) { /* every tensor once */
        const lpo_tensor *t = &m->tensors[i];
        const int64_t n = (int64_t)lpo_tensor_numel(t);
        out->params[lpo_tensor_part(t->name)] += n;
        out->total += n;
        const uint64_t b = t->nbytes + t->n_scale * 4; /* an fp8 tensor's scales with it */
        if ((unsigned)t->dtype < LPO_DT_COUNT) out->bytes_by_dtype[t->dtype] += b;
        out->weight_bytes += b;
    }
    return LPO_OK;
}
