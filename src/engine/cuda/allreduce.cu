/* One-shot all-reduce of a small message across the GPUs of one node over CUDA peer access (the ALL_REDUCE
 * op kind's small-message path beside NCCL; engine.tp_allreduce). No NVLink multicast: plain loads and
 * stores through peer pointers (cudaDeviceEnablePeerAccess).
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
