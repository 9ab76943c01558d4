/* lpo CUDA CHECK macros (core; .cu files of hw and bench): each wraps one CUDA runtime or
 * cuBLASLt call, and on failure records an lpo_errorf message with the statement, the error text, file and
 * line, sets the local `st` and jumps to the local label `fail`. After every kernel launch:
 * LPO_CUDA_CHECK(cudaGetLastError()). Functions using them declare `lpo_status st = LPO_OK;` and a `fail:`
 * label that releases what was acquired. */
#pragma once
#include <cuda_runtime.h>

extern "C" {
#include "lpo/status.h"
}

#define LPO_CUDA_CHECK(call)                                                                                 \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            st =                                                                                             \
                lpo_errorf(LPO_E_CUDA, "%s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

#define LPO_CUBLAS_CHECK(call)                                                                               \
    do {                                                                                                     \
        cublasStatus_t s_ = (call);                                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                   \
            st = lpo_errorf(s_ == CUBLAS_STATUS_NOT_SUPPORTED ? LPO_E_UNSUPPORTED : LPO_E_CUDA,              \
                            "%s: %s (%s:%d)", #call, cublasLtGetStatusString(s_), __FILE__, __LINE__);       \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

/* Seconds between two recorded events (after synchronising on the second). */
#define LPO_CUDA_ELAPSED(e0, e1, seconds)                                                                    \
    do {                                                                                                     \
        float ms_ = 0;                                                                                       \
        LPO_CUDA_CHECK(cudaEventSynchronize(e1));                                                            \
        LPO_CUDA_CHECK(cudaEventElapsedTime(&ms_, e0, e1));                                                  \
        *(seconds) = (double)ms_ * 1e-3;                                                                     \
    } while (0)
