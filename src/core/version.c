/* Build provenance (version, git commit, build type, CUDA architectures) recorded at configure time. */
#include <string.h>

#include "lpo/core.h"
#include "lpo_build_info.h"

#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#define LPO__CUDART_VERSION CUDART_VERSION
#else
#define LPO__CUDART_VERSION 0
#endif

static const lpo_build_info info = {
    LPO_VERSION_STRING,
    LPO_GIT_COMMIT,
    LPO_BUILD_TYPE,
    LPO_CUDA_ARCHS_STRING,
    LPO_C_COMPILER,
#ifdef LPO_HAVE_CUDA
    1,
#else
    0,
#endif
    LPO__CUDART_VERSION,
};

const lpo_build_info *lpo_build(void) {
    return &info;
}

int lpo_build_is_debug(void) {
    return strcmp(info.build_type, "Release") != 0 && strcmp(info.build_type, "RelWithDebInfo") != 0;
}
