/* Programmatic dependent launch (PDL) of the decode step's kernels: the per-thread chain state that decides
 * which launch gets cudaLaunchAttributeProgrammaticStreamSerialization (cuda_kernels.h "programmatic
 * dependent launch"; the device side and the launch helper are in cuda_common.cuh).
 * A launch gets the attribute only when PDL is on for its stream and the launch just before it on that
 * stream was a PDL kernel (one that triggers its dependents and waits): after a copy, a memset or a
 * cuBLASLt kernel the caller breaks the chain (lpo_cuda_pdl_break) so no programmatic edge ever leaves a
 * node that is not one of ours. Thread-local: a stream is driven by one thread at a time (the engine's). */
#include "engine/cuda/cuda_common.cuh"

static thread_local cudaStream_t pdl_stream; /* the stream PDL is on for (when pdl_on) */
static thread_local int pdl_on;
static thread_local int pdl_prev; /* the previous launch on pdl_stream was a PDL kernel */

extern "C" void lpo_cuda_pdl_begin(cudaStream_t s) {
    pdl_stream = s;
    pdl_on = 1;
    pdl_prev = 0;
}

extern "C" void lpo_cuda_pdl_break(void) {
    pdl_prev = 0;
}

extern "C" void lpo_cuda_pdl_end(void) {
    pdl_on = 0;
    pdl_prev = 0;
}

extern "C" int lpo__cuda_pdl_on(cudaStream_t s) {
    return pdl_on && s == pdl_stream;
}

extern "C" int lpo__cuda_pdl_launch(cudaStream_t s, int pdl_kernel) {
    if (!lpo__cuda_pdl_on(s)) return 0;
    const int attr = pdl_prev && pdl_kernel;
    pdl_prev = pdl_kernel != 0;
    return attr;
}
