/* The backend registry: a backend by name ("cpu", "cuda", "auto"). Part of the engine proper, above the
 * backends it names (the backend ABI, plan.c, knows none of them). */
#include <string.h>

#include "lpo/backend.h"
#include "lpo/core.h"
#include "lpo/engine.h"

#ifndef LPO_HAVE_CUDA_BACKEND
const lpo_backend_iface *lpo_backend_cuda(void) {
    return NULL;
}
#endif

lpo_status lpo_backend_find(const char *name, const lpo_backend_iface **out) {
    *out = NULL;
    const lpo_backend_iface *cuda = lpo_backend_cuda();
    if (!name || !strcmp(name, "cpu")) {
        *out = lpo_backend_cpu();
        return LPO_OK;
    }
    if (!strcmp(name, "auto")) { /* the CUDA backend when built and a GPU answers, else the CPU */
        *out = cuda && (!cuda->usable || cuda->usable() == LPO_OK) ? cuda : lpo_backend_cpu();
        lpo_error_clear();
        return LPO_OK;
    }
    if (!strcmp(name, "cuda")) {
        if (!cuda)
            return lpo_errorf(LPO_E_NOT_AVAILABLE,
                              "the CUDA backend is not available in this build of lpo "
                              "(built without CUDA, or not yet implemented; use backend=cpu)");
        *out = cuda;
        return LPO_OK;
    }
    const char *names[] = {"cpu", "cuda", "auto"};
    const char *s = lpo_suggest(name, names, 3);
    return lpo_errorf(LPO_E_CONFIG, "unknown backend '%s'%s%s%s (choose cpu, cuda or auto)", name,
                      s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
}
