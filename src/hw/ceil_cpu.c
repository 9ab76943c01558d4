/* CPU ceilings for `lpo ceilings` without a GPU (and `--cpu`): the f32 FMA peak of all OpenMP threads in
 * the widest vector code this CPU runs, and STREAM-style bandwidth (triad a = b + s*c counting 3 arrays'
 * bytes as STREAM does, and a read-only sum). The FMA chains are 12 independent vector accumulators
 * (enough to cover 4-cycle FMA latency on 2 ports plus margin) that converge to a fixed point, so no value
 * overflows or turns denormal. This file is compiled with -ffp-contract=fast so a*x + y becomes one FMA. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hw/ceilings_internal.h"
#include "lpo/core.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define FMA_CHAINS 12

#define FMA_STEP(c) a##c = a##c * x + y
/* one FMA kernel per ISA: VT is the vector type, LANES its float count */
#define FMA_KERNEL(name, ATTR, VT, LANES)                                                                    \
    ATTR static double name(long iters) {                                                                    \
        const VT z = {0};                                                                                    \
        VT x = z + 0.9999f, y = z + 1e-4f, a0 = z + 1.0f, a1 = z + 1.01f, a2 = z + 1.02f, a3 = z + 1.03f,    \
           a4 = z + 1.04f, a5 = z + 1.05f, a6 = z + 0.5f, a7 = z + 0.51f, a8 = z + 0.52f, a9 = z + 0.53f,    \
           a10 = z + 0.54f, a11 = z + 0.55f;                                                                 \
        for (long it = 0; it < iters; it++) {                                                                \
            FMA_STEP(0), FMA_STEP(1), FMA_STEP(2), FMA_STEP(3), FMA_STEP(4), FMA_STEP(5);                    \
            FMA_STEP(6), FMA_STEP(7), FMA_STEP(8), FMA_STEP(9), FMA_STEP(10), FMA_STEP(11);                  \
        }                                                                                                    \
        VT s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;                                  \
        double r = 0;                                                                                        \
        for (int l = 0; l < LANES; l++) r += s[l];                                                           \
        return r;                                                                                            \
    }

typedef float lpo__v4f __attribute__((vector_size(16)));
FMA_KERNEL(fma_generic, , lpo__v4f, 4)
#if defined(__x86_64__) && defined(__GNUC__)
typedef float lpo__v8f __attribute__((vector_size(32)));
typedef float lpo__v16f __attribute__((vector_size(64)));
FMA_KERNEL(fma_avx2, __attribute__((target("avx2,fma"))), lpo__v8f, 8)
FMA_KERNEL(fma_avx512, __attribute__((target("avx512f"))), lpo__v16f, 16)
#endif

lpo_status lpo__cpu_fma_sample(long iters, double *seconds, double *flops, const char **isa) {
    double (*fn)(long) = fma_generic;
    int lanes = 4;
    *isa = "generic (128-bit vectors)";
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        fn = fma_avx512, lanes = 16, *isa = "avx512f";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        fn = fma_avx2, lanes = 8, *isa = "avx2+fma";
    }
#endif
    int threads = 1;
    double sink = 0;
    uint64_t t0 = lpo_now_ns();
#ifdef _OPENMP
#pragma omp parallel reduction(+ : sink)
    {
#pragma omp single
        threads = omp_get_num_threads();
        sink += fn(iters);
    }
#else
    sink = fn(iters);
#endif
    *seconds = (double)(lpo_now_ns() - t0) * 1e-9;
    *flops = 2.0 * FMA_CHAINS * lanes * (double)iters * threads;
    if (!isfinite(sink)) return lpo_errorf(LPO_E_INTERNAL, "FMA peak kernel produced %g", sink);
    return LPO_OK;
}

/* ---- STREAM-style bandwidth ---- */
struct lpo__cpu_stream {
    size_t n;
    double *a, *b, *c;
    double scalar;
    volatile double sink;
};

lpo_status lpo__cpu_stream_open(size_t n, lpo__cpu_stream **out) {
    *out = NULL;
    lpo_status st = lpo_mem_check(3.0 * 8.0 * (double)n, "CPU bandwidth arrays");
    if (st) return st;
    lpo__cpu_stream *s = calloc(1, sizeof *s);
    if (!s) return lpo_errorf(LPO_E_NOMEM, "CPU bandwidth: out of memory");
    size_t bytes = (n * sizeof(double) + 63) / 64 * 64;
    s->n = n;
    s->scalar = 3.0;
    s->a = aligned_alloc(64, bytes), s->b = aligned_alloc(64, bytes), s->c = aligned_alloc(64, bytes);
    if (!s->a || !s->b || !s->c) {
        lpo__cpu_stream_close(s);
        return lpo_errorf(LPO_E_NOMEM, "CPU bandwidth: cannot allocate 3 x %zu bytes", bytes);
    }
    double *a = s->a, *b = s->b, *c = s->c;
    // first touch by the threads that will use each page
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        a[i] = 0;
        b[i] = 1.0 + (double)(i % 1000) * 1e-3;
        c[i] = 2.0 - (double)(i % 997) * 1e-3;
    }
    double t;
    if ((st = lpo__cpu_stream_sample(s, 1, &t))) {
        lpo__cpu_stream_close(s);
        return st;
    }
    // validate the triad element by element, and the read sum against a serial sum
    double ref_sum = 0;
    for (size_t i = 0; i < n; i++) {
        double want = b[i] + s->scalar * c[i];
        if (fabs(a[i] - want) > 1e-12 * fabs(want)) {
            lpo__cpu_stream_close(s);
            return lpo_errorf(LPO_E_RANGE, "CPU triad: a[%zu] = %.17g, expected %.17g", i, a[i], want);
        }
        ref_sum += want;
    }
    if ((st = lpo__cpu_stream_sample(s, 0, &t))) {
        lpo__cpu_stream_close(s);
        return st;
    }
    double got = s->sink;
    if (fabs(got - ref_sum) > 1e-9 * fabs(ref_sum)) {
        lpo__cpu_stream_close(s);
        return lpo_errorf(LPO_E_RANGE, "CPU read: sum %.17g, expected %.17g", got, ref_sum);
    }
    *out = s;
    return LPO_OK;
}

lpo_status lpo__cpu_stream_sample(lpo__cpu_stream *s, int triad, double *seconds) {
    size_t n = s->n;
    double *a = s->a;
    const double *b = s->b, *c = s->c;
    double q = s->scalar, sum = 0;
    uint64_t t0 = lpo_now_ns();
    if (triad) {
        // a (n,) = b (n,) + q * c (n,)
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + q * c[i];
    } else {
        // sum over a (n,)
#pragma omp parallel for schedule(static) reduction(+ : sum)
        for (size_t i = 0; i < n; i++) sum += a[i];
        s->sink = sum;
    }
    *seconds = (double)(lpo_now_ns() - t0) * 1e-9;
    return LPO_OK;
}

void lpo__cpu_stream_close(lpo__cpu_stream *s) {
    if (!s) return;
    free(s->a);
    free(s->b);
    free(s->c);
    free(s);
}
