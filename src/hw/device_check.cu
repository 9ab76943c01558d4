/* Device check for `lpo env`: proves the GPU really runs lpo's kernels. A saxpy-style kernel
 * (y = a*x + b) runs on fresh random data; the output buffer is poisoned with NaN first, and every element
 * is compared with the plain C reference (atol + rtol*|ref|), so unwritten or wrong elements fail. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "lpo/hw.h"
}

#define CHECK(call, what)                                                                                    \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            snprintf(msg, msg_len, "%s: %s (%s:%d)", what, cudaGetErrorString(e_), __FILE__, __LINE__);      \
            st = lpo_errorf(LPO_E_CUDA, "device %d: %s", dev, msg);                                          \
            goto done;                                                                                       \
        }                                                                                                    \
    } while (0)

// x (n,) -> y (n,): y[i] = a * x[i] + b, one thread per element
__global__ static void affine_kernel(const float *x, float *y, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaf(a, x[i], b);
}

extern "C" lpo_status lpo_hw_device_check(int dev, char *msg, size_t msg_len) {
    const int n = 1 << 20;
    const float a = 1.75f, b = -0.5f;
    lpo_status st = LPO_OK;
    float *hx = (float *)malloc(n * sizeof(float)), *hy = (float *)malloc(n * sizeof(float));
    float *dx = NULL, *dy = NULL;
    if (msg_len) msg[0] = 0;
    if (!hx || !hy) {
        snprintf(msg, msg_len, "out of host memory");
        st = lpo_errorf(LPO_E_NOMEM, "device check: out of host memory");
        goto done;
    }
    {
        // fresh random inputs in [-1, 1) (xorshift32 seeded from the device ordinal)
        unsigned s = 2463534242u + (unsigned)dev;
        for (int i = 0; i < n; i++) {
            s ^= s << 13, s ^= s >> 17, s ^= s << 5;
            hx[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
        }
    }
    CHECK(cudaSetDevice(dev), "cudaSetDevice");
    CHECK(cudaMalloc((void **)&dx, n * sizeof(float)), "cudaMalloc");
    CHECK(cudaMalloc((void **)&dy, n * sizeof(float)), "cudaMalloc");
    CHECK(cudaMemcpy(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    CHECK(cudaMemset(dy, 0xff, n * sizeof(float)), "cudaMemset (poison)"); /* 0xffffffff is a NaN */
    affine_kernel<<<(n + 255) / 256, 256>>>(dx, dy, a, b, n);
    CHECK(cudaGetLastError(), "kernel launch");
    CHECK(cudaDeviceSynchronize(), "kernel execution");
    CHECK(cudaMemcpy(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    {
        double max_err = 0;
        // compare every element with the C reference
        for (int i = 0; i < n; i++) {
            float ref = a * hx[i] + b;
            double err = fabs((double)hy[i] - (double)ref);
            if (!(err <= 1e-6 + 1e-6 * fabs((double)ref))) {
                snprintf(msg, msg_len, "element %d: got %g, want %g", i, (double)hy[i], (double)ref);
                st = lpo_errorf(LPO_E_RANGE, "device %d: kernel check failed: %s", dev, msg);
                goto done;
            }
            if (err > max_err) max_err = err;
        }
        snprintf(msg, msg_len, "%d elements match the C reference (max abs error %.2g)", n, max_err);
    }
done:
    if (dx) cudaFree(dx);
    if (dy) cudaFree(dy);
    free(hx);
    free(hy);
    return st;
}
