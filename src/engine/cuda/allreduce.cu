/* One-shot all-reduce of a small message across the GPUs of one node over CUDA peer access (the ALL_REDUCE
 * op kind's small-message path beside NCCL; engine.tp_allreduce), and the same all-reduce fused with the
 * residual add and RMSNorm after it (engine.tp_fuse; second half of this file, its own comment). No NVLink
 * multicast: plain loads and stores through peer pointers (cudaDeviceEnablePeerAccess).
 *   buf (count,) of dt on rank r  ->  buf = sum over ranks q = 0 .. n-1, in that order, in f32, rounded to dt
 * Every rank computes the same sum in the same order, so all ranks hold the same bits.
 * One kernel per call. Block b owns the 16-byte vectors [256 b, 256 (b + 1)) of every message (one per
 * thread; a last partial vector element by element): a fixed partition, so whatever a message's size, an
 * element is always handled by the same block. Block b of rank r:
 *   1. epoch e = ++counter[b] (this rank's, device memory: a replayed graph gets a new epoch every time);
 *   2. copies its chunk of buf into its own staging buffer e & 1 (double buffered);
 *   3. __syncthreads, then a system-scope fence and a release store of e into flag[r][b] of every peer;
 *   4. waits (acquire loads of its own flags) until every peer's flag[q][b] has reached e;
 *   5. reads chunk b of every rank's staging buffer e & 1 (its own included), sums in rank order, writes buf.
 * Why one barrier per call is enough: rank q's block b writes staging buffer e & 1 again at its epoch
 * e + 2, after it passed epoch e + 1, which needed every rank's block b to have signalled e + 1, which each
 * does only after it finished reading chunk b at epoch e; and chunk b is the same region of the staging
 * buffer in every call (the fixed partition), whatever the sizes of the calls in between. Blocks wait only
 * for the same block of the peers, so no block waits for another block of its own grid. A spinning block also
 * polls a host-mapped abort word (the engine's timeout sets it) so a rank that stopped cannot hang the
 * others. Floor: n x bytes read (n - 1 over the links) per rank; at 8-64 KiB it is the links' latency (~1-2
 * us per round trip) and a launch that matter, against NCCL's ~10-20 us per small all-reduce. Measurements:
 * docs/perf-notes.md. */
#include "engine/cuda/cuda_common.cuh"

#define OS_THREADS 256

__device__ __forceinline__ void os_store_release(unsigned *p, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned os_load_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* One element at p, fetched again from memory (not from a cache line an earlier step left). */
template <typename T> __device__ __forceinline__ T os_load_cv(const T *p) {
    union {
        typename lpo_raw<sizeof(T)>::type r;
        T e;
    } u;
    u.r = __ldcv(reinterpret_cast<const typename lpo_raw<sizeof(T)>::type *>(p));
    return u.e;
}

template <typename T>
__global__ void __launch_bounds__(OS_THREADS)
    oneshot_allreduce_kernel(lpo_cuda_oneshot o, T *buf, int64_t count) {
    constexpr int V = lpo_vec16<T>::n;
    __shared__ unsigned s_epoch;
    __shared__ int s_abort;
    const int b = blockIdx.x, n = o.n, me = o.rank;
    if (threadIdx.x == 0) {
        s_epoch = o.counter[b] + 1;
        o.counter[b] = s_epoch;
        s_abort = 0;
    }
    __syncthreads();
    const unsigned ep = s_epoch;
    const size_t half = o.stage_bytes / 2, par = (size_t)(ep & 1u);
    // this block's chunk: vector v = 256 b + thread (full vectors: nvec; a partial one at nvec, the tail)
    const int64_t nvec = count / V, v = (int64_t)b * OS_THREADS + threadIdx.x;
    T *mine = (T *)((char *)o.stage[me] + par * half);
    if (v < nvec) // buf chunk -> my staging
        reinterpret_cast<uint4 *>(mine)[v] = reinterpret_cast<const uint4 *>(buf)[v];
    else if (v == nvec)
        for (int64_t i = nvec * V; i < count; i++) mine[i] = buf[i];
    __syncthreads();
    // signal: my chunk b of epoch ep is in my staging (thread q tells peer q)
    if (threadIdx.x < n && (int)threadIdx.x != me) {
        __threadfence_system();
        os_store_release(o.flags[threadIdx.x] + me * LPO_ONESHOT_MAX_BLOCKS + b, ep);
    }
    // wait: every peer's chunk b of epoch ep (thread q waits for peer q)
    if (threadIdx.x < n && (int)threadIdx.x != me) {
        const unsigned *f = o.flags[me] + threadIdx.x * LPO_ONESHOT_MAX_BLOCKS + b;
        for (unsigned spin = 0; (int)(os_load_acquire(f) - ep) < 0; spin++)
            if ((spin & 1023u) == 1023u && *o.abort) {
                s_abort = 1;
                break;
            }
    }
    __syncthreads();
    if (s_abort) return;
    // sum chunk b over the ranks' staging buffers, rank order, f32 (every rank's load issued before the sums)
    if (v < nvec) {
        union {
            uint4 r;
            T e[V];
        } u[LPO_ONESHOT_MAX_RANKS];
#pragma unroll
        for (int q = 0; q < LPO_ONESHOT_MAX_RANKS; q++)
            if (q < n)
                u[q].r = __ldcv(reinterpret_cast<const uint4 *>((const char *)o.stage[q] + par * half) + v);
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; j++) acc[j] = 0.f;
#pragma unroll
        for (int q = 0; q < LPO_ONESHOT_MAX_RANKS; q++)
            if (q < n)
#pragma unroll
                for (int j = 0; j < V; j++) acc[j] += lpo_to_f(u[q].e[j]);
        lpo_store<T, V>(buf + v * V, acc);
    } else if (v == nvec) {
        for (int64_t i = nvec * V; i < count; i++) {
            float acc = 0.f;
            for (int q = 0; q < n; q++) {
                const T *src = (const T *)((const char *)o.stage[q] + par * half);
                acc += lpo_to_f(os_load_cv(src + i));
            }
            buf[i] = lpo_from_f<T>(acc);
        }
    }
}

/* Blocks for a message of count elements of es bytes: one per 256 vectors (a partial last vector counted),
 * so each thread's remote loads are one round trip (8 KiB of bf16: 2 blocks; 64 KiB: 16). */
static int64_t oneshot_blocks(int64_t count, size_t es) {
    const int64_t vecs = (count * (int64_t)es + 15) / 16;
    return (vecs + OS_THREADS - 1) / OS_THREADS;
}

extern "C" int lpo_cuda_oneshot_fits(const lpo_cuda_oneshot *o, int64_t count, lpo_dtype dt) {
    const size_t es = dt == LPO_DT_F32 ? 4 : 2;
    return o && o->n >= 2 && o->n <= LPO_ONESHOT_MAX_RANKS && count > 0 &&
           (size_t)count * es <= o->stage_bytes / 2 && oneshot_blocks(count, es) <= LPO_ONESHOT_MAX_BLOCKS &&
           (dt == LPO_DT_F32 || dt == LPO_DT_BF16 || dt == LPO_DT_F16);
}

extern "C" lpo_status lpo_cuda_oneshot_all_reduce(const lpo_cuda_oneshot *o, void *buf, int64_t count,
                                                  lpo_dtype dt, cudaStream_t stream) {
    const char *op = "oneshot all_reduce";
    if (!lpo_cuda_oneshot_fits(o, count, dt))
        return lpo_errorf(LPO_E_INVALID,
                          "%s: %lld elements of %s do not fit its staging (%zu bytes, %d ranks)", op,
                          (long long)count, lpo_dtype_name(dt), o ? o->stage_bytes / 2 : 0, o ? o->n : 0);
    if (((uintptr_t)buf % 16) != 0)
        return lpo_errorf(LPO_E_INVALID, "%s: the buffer is not 16-byte aligned", op);
    const int nb = (int)oneshot_blocks(count, dt == LPO_DT_F32 ? 4 : 2);
    /* a plain launch: it waits for the kernel before it (no programmatic edge), and the caller breaks the
     * chain after it */
    LPO_CU_DISPATCH(dt, op,
                    (oneshot_allreduce_kernel<T><<<nb, OS_THREADS, 0, stream>>>(*o, (T *)buf, count)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

/* ---- the all-reduce fused with the residual add and RMSNorm (push, Lamport-style) ------------------------
 * Block `row` of rank r, call epoch e = ++epoch[row] (this rank's, device memory):
 *   1. stores its partial row (16-byte vectors) into slot r of set e % 3 of every peer's region;
 *   2. per vector, in rank order, its own partial (read locally) or the peer's from its own region, polled
 *      until none of the vector's four 32-bit words is the sentinel; sums in f32 from 0, rounds to dt, adds
 *      the residual (rounded to dt, stored), accumulates x^2 exactly as rmsnorm_kernel<T, V, true> does;
 *   3. the block sum, then y = w * (x * inv) as rmsnorm_kernel's second pass;
 *   4. sets its row of set (e + 2) % 3 (the previous call's) back to the sentinel in every peer's slot.
 * Why the clear is safe: a peer writes set (e + 2) % 3 of this row again at its epoch e + 2, which it starts
 * only after it received this rank's epoch e + 1 data, sent by a kernel that starts after this one ended; and
 * every peer store of epoch e - 1 into that set landed before this rank's epoch e - 1 block read it. A data
 * word equal to the sentinel is sent as 0 (a -0.0 becomes +0.0), by every rank for its own data as well, so
 * every rank sums the same values in the same order: the same bits everywhere.
 * Floor (decode, bs1 8B tp2: a row of 8 KiB): one NVLink hop for the stores (~1 us) and a block reduction;
 * the prediction and the measurements are in docs/perf-notes.md ("The all-reduce fused with the residual add
 * and RMSNorm"). */
#define AR_SENTINEL 0x80000000u

__device__ __forceinline__ uint4 ar_clean(uint4 v) {
    v.x = v.x == AR_SENTINEL ? 0u : v.x;
    v.y = v.y == AR_SENTINEL ? 0u : v.y;
    v.z = v.z == AR_SENTINEL ? 0u : v.z;
    v.w = v.w == AR_SENTINEL ? 0u : v.w;
    return v;
}
__device__ __forceinline__ bool ar_landed(const uint4 &v) {
    return v.x != AR_SENTINEL && v.y != AR_SENTINEL && v.z != AR_SENTINEL && v.w != AR_SENTINEL;
}
/* loads that go to memory every time (the poll), stores that are not held back (to a peer) */
__device__ __forceinline__ uint4 ar_load_volatile(const void *p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}
__device__ __forceinline__ void ar_store_volatile(void *p, uint4 v) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}

template <typename T>
__global__ void allreduce_add_rmsnorm_kernel(lpo_cuda_arnorm o, const T *part, T *x, T *y, const T *w,
                                             int64_t n, float eps) {
    constexpr int V = lpo_vec16<T>::n;
    __shared__ float red[33];
    __shared__ unsigned s_epoch;
    lpo_pdl_start(); /* part: the previous kernel's output; x, y: read and written around this one */
    const int row = blockIdx.x, me = o.rank, nr = o.n;
    char *mine = NULL; /* my region (o.recv[me], found with constant indices) */
#pragma unroll
    for (int q = 0; q < LPO_ONESHOT_MAX_RANKS; q++)
        if (q == me) mine = (char *)o.recv[q];
    unsigned *epoch = (unsigned *)mine;
    if (threadIdx.x == 0) {
        s_epoch = epoch[row] + 1;
        epoch[row] = s_epoch;
    }
    __syncthreads();
    const unsigned ep = s_epoch;
    const size_t set_bytes = (size_t)nr * o.slot_bytes, row_off = (size_t)row * (size_t)n * sizeof(T);
    const size_t cur = LPO_ARNORM_HDR + (size_t)(ep % LPO_ARNORM_SETS) * set_bytes + row_off,
                 old = LPO_ARNORM_HDR + (size_t)((ep + LPO_ARNORM_SETS - 1) % LPO_ARNORM_SETS) * set_bytes +
                       row_off;
    const int64_t nv = n / V;
    const uint4 *pr = reinterpret_cast<const uint4 *>(part + (int64_t)row * n);
    // 1. push: my partial row (n,) -> slot me of set ep % 3 of every peer
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        const uint4 v = ar_clean(pr[i]);
#pragma unroll
        for (int q = 0; q < LPO_ONESHOT_MAX_RANKS; q++) /* constant indices: o.recv stays in registers */
            if (q < nr && q != me)
                ar_store_volatile((char *)o.recv[q] + cur + (size_t)me * o.slot_bytes + (size_t)i * 16, v);
    }
    // 2. receive and sum in rank order, x += s (stored), sum of squares (rmsnorm_kernel's order)
    T *xr = x + (int64_t)row * n;
    float ss = 0.f;
    int aborted = 0;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; j++) acc[j] = 0.f;
#pragma unroll
        for (int q = 0; q < LPO_ONESHOT_MAX_RANKS; q++) {
            if (q >= nr) break;
            union {
                uint4 r;
                T e[V];
            } u;
            if (q == me) {
                u.r = ar_clean(pr[i]);
            } else {
                const char *src = mine + cur + (size_t)q * o.slot_bytes + (size_t)i * 16;
                u.r = ar_load_volatile(src);
                for (unsigned spin = 1; !ar_landed(u.r); spin++) {
                    if (aborted || ((spin & 1023u) == 0 && *o.abort)) { /* a stopped rank: give up */
                        aborted = 1;
                        u.r = make_uint4(0, 0, 0, 0);
                        break;
                    }
                    u.r = ar_load_volatile(src);
                }
            }
#pragma unroll
            for (int j = 0; j < V; j++) acc[j] += lpo_to_f(u.e[j]);
        }
        float a[V];
        lpo_load<T, V>(xr + i * V, a);
#pragma unroll
        for (int j = 0; j < V; j++) a[j] = lpo_round<T>(a[j] + lpo_round<T>(acc[j]));
        lpo_store<T, V>(xr + i * V, a);
#pragma unroll
        for (int j = 0; j < V; j++) ss += a[j] * a[j];
    }
    // 3. the row's norm, then y = w * (x * inv) (the same thread re-reads what it stored)
    ss = lpo_block_sum(ss, red);
    const float inv = (float)(1.0 / sqrt((double)ss / (double)n + (double)eps));
    T *yr = y + (int64_t)row * n;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        float a[V], g[V];
        lpo_load<T, V>(xr + i * V, a);
        lpo_load<T, V>(w + i * V, g);
#pragma unroll
        for (int j = 0; j < V; j++) a[j] = g[j] * (a[j] * inv);
        lpo_store<T, V>(yr + i * V, a);
    }
    // 4. the previous call's set of this row back to the sentinel, in every peer's slot of my region
    const uint4 sent = make_uint4(AR_SENTINEL, AR_SENTINEL, AR_SENTINEL, AR_SENTINEL);
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
        for (int q = 0; q < nr; q++)
            if (q != me)
                *reinterpret_cast<uint4 *>(mine + old + (size_t)q * o.slot_bytes + (size_t)i * 16) = sent;
}

__global__ void arnorm_reset_kernel(uint32_t *mem, size_t words_hdr, size_t words) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words;
         i += (size_t)gridDim.x * blockDim.x)
        mem[i] = i < words_hdr ? 0u : AR_SENTINEL;
}

extern "C" size_t lpo_cuda_arnorm_bytes(int n, size_t slot_bytes) {
    return LPO_ARNORM_HDR + (size_t)LPO_ARNORM_SETS * (size_t)n * slot_bytes;
}

extern "C" lpo_status lpo_cuda_arnorm_reset(void *mem, int n, size_t slot_bytes, cudaStream_t stream) {
    const char *op = "all-reduce + add + rmsnorm: reset";
    if (!mem || n < 2 || n > LPO_ONESHOT_MAX_RANKS || slot_bytes % 16)
        return lpo_errorf(LPO_E_INVALID, "%s: %d ranks, slots of %zu bytes", op, n, slot_bytes);
    const size_t words = lpo_cuda_arnorm_bytes(n, slot_bytes) / 4;
    arnorm_reset_kernel<<<256, 256, 0, stream>>>((uint32_t *)mem, LPO_ARNORM_HDR / 4, words);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

extern "C" int lpo_cuda_arnorm_fits(const lpo_cuda_arnorm *o, int64_t m, int64_t n, lpo_dtype dt) {
    const size_t es = dt == LPO_DT_F32 ? 4 : 2;
    return o && o->n >= 2 && o->n <= LPO_ONESHOT_MAX_RANKS && o->slot_bytes % 16 == 0 && m > 0 &&
           m <= LPO_ONESHOT_MAX_BLOCKS && n > 0 && ((size_t)n * es) % 16 == 0 &&
           (size_t)m * (size_t)n * es <= o->slot_bytes &&
           (dt == LPO_DT_F32 || dt == LPO_DT_BF16 || dt == LPO_DT_F16);
}

extern "C" lpo_status lpo_cuda_allreduce_add_rmsnorm(const lpo_cuda_arnorm *o, const void *part, void *x,
                                                     void *y, const void *w, int64_t m, int64_t n, float eps,
                                                     lpo_dtype dt, cudaStream_t stream) {
    const char *op = "all-reduce + add + rmsnorm";
    if (!lpo_cuda_arnorm_fits(o, m, n, dt))
        return lpo_errorf(
            LPO_E_INVALID, "%s: %lld rows of %lld %s do not fit its slots (%zu bytes, %d ranks)", op,
            (long long)m, (long long)n, lpo_dtype_name(dt), o ? o->slot_bytes : 0, o ? o->n : 0);
    if (((uintptr_t)part | (uintptr_t)x | (uintptr_t)y | (uintptr_t)w) % 16 != 0)
        return lpo_errorf(LPO_E_INVALID, "%s: a buffer is not 16-byte aligned", op);
    if (y == x || y == part)
        return lpo_errorf(LPO_E_INVALID, "%s: y must not alias x or the partial sums", op);
    const size_t es = dt == LPO_DT_F32 ? 4 : 2;
    const int threads = lpo_row_threads(n * (int64_t)es / 16);
    LPO_CU_DISPATCH(
        dt, op,
        LPO_CU_CHECK(lpo_launch(allreduce_add_rmsnorm_kernel<T>, dim3((unsigned)m), dim3(threads), 0, stream,
                                *o, (const T *)part, (T *)x, (T *)y, (const T *)w, n, eps),
                     op));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
