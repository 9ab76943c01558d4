/* Memory bandwidth ceilings for `lpo ceilings`: our own read-only, write-only and copy kernels (16-byte
 * vectors, U = 4, 8 or 16 accesses in flight per thread, 10 access variants each, below: resident grids
 * striding over the buffer, one block per tile in buffer order, or a resident grid taking tiles from a
 * ticket counter), cudaMemcpy device-to-device, L2 (a read kernel looping over a buffer of a quarter of the
 * L2, loads with ld.global.cg so L1 is bypassed), and pinned host<->device copies.
 * Bytes counted: read = bytes read, write = bytes written, copy and D2D = read + written.
 * Floor: H100 SXM HBM3 3.35 TB/s spec; ~2.97-3.0 TB/s seen for a D2D copy (shared/REFERENCE.md), 3.1-3.17
 * TB/s for the GEMV's read-only stream (one block per 32 KiB of rows, in order, 16 loads in flight).
 * Every kernel is validated before it is timed: the read checksum against a plain scalar kernel, the
 * written pattern read back, the copied buffer's checksum against the source's. Each kind keeps the
 * fastest variant (interleaved rounds, the earliest within 0.5% of the fastest: the same from run to run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/cuda_check.h"
#include "lpo/gpu_fill.h"

extern "C" {
#include "hw/ceilings_internal.h"
}

#define BW_THREADS 256
#define N_VAR      10 /* access variants per kind (BW_VARIANTS below) */
#define L2_PASSES  64

struct lpo__membw_bench {
    size_t bytes, n;       /* each big buffer: bytes, n int4 */
    size_t l2_bytes, n_l2; /* the L2-resident buffer */
    size_t host_bytes;
    int4 *a, *b, *l2buf;
    unsigned char *host;
    int *sink;                                          /* 4 ints: XOR checksums */
    unsigned *ctr;                                      /* 2 unsigned: the QUEUE walk's ticket counter */
    int blocks;                                         /* the scalar reference kernel's grid */
    int rblocks[N_VAR], wblocks[N_VAR], cblocks[N_VAR]; /* resident blocks of each variant */
    int var[LPO__BW_COUNT];                             /* the variant kept for each kind */
    cudaStream_t s;
    cudaEvent_t e0, e1;
};

__device__ __forceinline__ static void xor4(int4 &acc, int4 v) {
    acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
}

/* Access variants (each kind keeps the fastest, all validated): U 16-byte accesses in flight per thread
 * (all U loads issued before the first use or store); walk W:
 *   GRID   grid-stride over a resident grid (a thread's U accesses are a whole grid apart);
 *   TILES  a resident grid, each block walking contiguous tiles of U x blockDim vectors, tile b, b + grid..;
 *   BLOCKS one tile per block and as many blocks as tiles: the block scheduler hands tiles out in order as
 *          blocks retire, so the chip's accesses stay in a narrow window moving through the buffer (DRAM
 *          row locality) and no block has more tiles left than another at the end (the GEMV's order);
 *   QUEUE  the same order with a resident grid: a block takes the next tile from an atomic ticket counter
 *          (fetched one tile ahead, so its latency hides behind the tile's loads); the last block to finish
 *          resets the counter for the next launch.
 * Hint H 0: volatile ld.global.cg + plain stores; 1: streaming ld.global.cs / st.global.cs (evict-first:
 * the two streams of a copy do not thrash L2); 2: ld.global.nc.L1::no_allocate.L2::256B (read-only path,
 * no L1 line, 256-byte L2 fetches) + st.global.cs. */
enum { W_GRID, W_TILES, W_BLOCKS, W_QUEUE };

/* 16-byte loads and stores as volatile asm with a memory clobber: the compiler neither removes, merges nor
 * moves them across each other (the L2 pass loop is not hoisted; a copy's stores stay after its loads in
 * the PTX). ptxas still reorders the SASS to save registers (a read's XORs between the loads, a copy's
 * stores between .nc loads: 2-4 loads in flight instead of U, seen with cuobjdump -sass); the kernels'
 * __launch_bounds__ (BW_MIN_BLOCKS) give it the registers of a whole batch, and the SASS shows U LDG.E.128
 * before the first use. */
template <int H> __device__ __forceinline__ static int4 load(const int4 *p) {
    int4 v;
    if (H == 0)
        asm volatile("ld.global.cg.v4.s32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p)
                     : "memory");
    else if (H == 1)
        asm volatile("ld.global.cs.v4.s32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p)
                     : "memory");
    else
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p)
                     : "memory");
    return v;
}
template <int H> __device__ __forceinline__ static void store(int4 *p, int4 v) {
    if (H == 0)
        asm volatile("st.global.v4.s32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");
    else
        asm volatile("st.global.cs.v4.s32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                     "r"(v.w)
                     : "memory");
}
/* Calls f(base, lane, full) for every tile this block owns: this thread's U vectors of the tile are
 * base + k lane (k < U); full says all U lie below n (else the caller checks each). ctr (2 unsigned: next
 * ticket, blocks done) is used by QUEUE. Blocks have BW_THREADS threads (a constant: the offsets of a tile
 * are immediates). */
template <int U, int W, class F> __device__ __forceinline__ static void walk(size_t n, unsigned *ctr, F f) {
    const size_t T = BW_THREADS, G = gridDim.x;
    if (W == W_QUEUE) {
        __shared__ unsigned ticket[2];
        const size_t tiles = (n + U * T - 1) / (U * T);
        if (threadIdx.x == 0) ticket[0] = atomicAdd(ctr, 1u);
        __syncthreads();
        // tile t = ticket[cur], the next one fetched meanwhile into ticket[cur ^ 1]
        for (int cur = 0;; cur ^= 1) {
            const size_t t = ticket[cur];
            if (t >= tiles) break;
            if (threadIdx.x == 0) ticket[cur ^ 1] = atomicAdd(ctr, 1u);
            f(t * U * T + threadIdx.x, T, (t + 1) * U * T <= n);
            __syncthreads();
        }
        // every block took its last ticket: the last block to get here resets the counter
        if (threadIdx.x == 0) {
            __threadfence();
            if (atomicAdd(ctr + 1, 1u) == gridDim.x - 1) ctr[0] = 0, ctr[1] = 0;
        }
        return;
    }
    const size_t first = W == W_GRID ? blockIdx.x * T + threadIdx.x : blockIdx.x * T * U + threadIdx.x;
    const size_t lane = W == W_GRID ? G * T : T, step = G * T * U;
    // BLOCKS: once (the grid covers n)
    for (size_t b = first; b < n; b += step) f(b, lane, b + (U - 1) * lane < n);
}

/* registers for a whole batch of U 16-byte values in flight (see load): blocks per SM ptxas must allow */
#define BW_MIN_BLOCKS(U) ((U) >= 16 ? 3 : (U) >= 8 ? 4 : 8)

/* U loads of this thread's vectors of a tile into v (zeros past n) */
template <int U, int H>
__device__ __forceinline__ static void load_tile(const int4 *p, size_t b, size_t lane, bool full, size_t n,
                                                 int4 (&v)[U]) {
    if (full) {
#pragma unroll
        for (int k = 0; k < U; k++) v[k] = load<H>(p + b + k * lane);
    } else {
#pragma unroll
        for (int k = 0; k < U; k++)
            v[k] = b + k * lane < n ? load<H>(p + b + k * lane) : make_int4(0, 0, 0, 0);
    }
}

// p (n,) int4 read `passes` times (QUEUE: passes must be 1); XOR of everything -> out[0..4) (per component)
template <int U, int W, int H>
__global__ static void __launch_bounds__(BW_THREADS, BW_MIN_BLOCKS(U))
    read_kernel(const int4 *p, size_t n, int passes, int *out, unsigned *ctr) {
    int4 acc = make_int4(0, 0, 0, 0);
    for (int pass = 0; pass < passes; pass++) {
        walk<U, W>(n, ctr, [&](size_t b, size_t lane, bool full) { // U loads in flight, then their XOR
            int4 v[U];
            load_tile<U, H>(p, b, lane, full, n, v);
#pragma unroll
            for (int k = 0; k < U; k++) xor4(acc, v[k]);
        });
    }
    // warp XOR-reduce, one atomic per warp and component
    for (int o = 16; o; o >>= 1) {
        acc.x ^= __shfl_xor_sync(0xffffffffu, acc.x, o), acc.y ^= __shfl_xor_sync(0xffffffffu, acc.y, o);
        acc.z ^= __shfl_xor_sync(0xffffffffu, acc.z, o), acc.w ^= __shfl_xor_sync(0xffffffffu, acc.w, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicXor(out + 0, acc.x), atomicXor(out + 1, acc.y);
        atomicXor(out + 2, acc.z), atomicXor(out + 3, acc.w);
    }
}

// reference checksum: words (4n,) one at a time; the stride is a multiple of 4, so word i of a thread
// always has the same component i % 4
__global__ static void xor_scalar_kernel(const int *w, size_t n_words, int *out) {
    size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    int acc = 0;
    for (size_t i = tid; i < n_words; i += stride) acc ^= w[i];
    atomicXor(out + (tid & 3), acc);
}

__device__ __forceinline__ static int4 pattern(size_t i, int seed) {
    return make_int4((int)i, (int)(i >> 32) ^ seed, seed, ~(int)i);
}

// p (n,) int4 <- pattern(i, seed), U stores per tile
template <int U, int W, int H>
__global__ static void __launch_bounds__(BW_THREADS, BW_MIN_BLOCKS(U))
    write_kernel(int4 *p, size_t n, int seed, unsigned *ctr) {
    walk<U, W>(n, ctr, [&](size_t b, size_t lane, bool full) {
#pragma unroll
        for (int k = 0; k < U; k++)
            if (full || b + k * lane < n) store<H>(p + b + k * lane, pattern(b + k * lane, seed));
    });
}

// q (n,) int4 <- p (n,), U loads in flight before the U stores
template <int U, int W, int H>
__global__ static void __launch_bounds__(BW_THREADS, BW_MIN_BLOCKS(U))
    copy_kernel(const int4 *__restrict__ p, int4 *__restrict__ q, size_t n, unsigned *ctr) {
    walk<U, W>(n, ctr, [&](size_t b, size_t lane, bool full) {
        int4 v[U];
        load_tile<U, H>(p, b, lane, full, n, v);
#pragma unroll
        for (int k = 0; k < U; k++)
            if (full || b + k * lane < n) store<H>(q + b + k * lane, v[k]);
    });
}

typedef void (*read_fn)(const int4 *, size_t, int, int *, unsigned *);
typedef void (*write_fn)(int4 *, size_t, int, unsigned *);
typedef void (*copy_fn)(const int4 *, int4 *, size_t, unsigned *);

/* the variants: name, walk, U (the same three per kind) */
#define BW_VARIANTS(X)                                                                                       \
    X(4, W_GRID, 0, "grid-stride x4, ld.cg")                                                                 \
    X(4, W_TILES, 0, "tiles x4, ld.cg")                                                                      \
    X(8, W_TILES, 0, "tiles x8, ld.cg")                                                                      \
    X(8, W_TILES, 1, "tiles x8, ld/st.cs")                                                                   \
    X(8, W_GRID, 1, "grid-stride x8, ld/st.cs")                                                              \
    X(8, W_BLOCKS, 1, "block per tile x8, ld/st.cs")                                                         \
    X(16, W_BLOCKS, 1, "block per tile x16, ld/st.cs")                                                       \
    X(16, W_BLOCKS, 2, "block per tile x16, ld.nc.L2::256B/st.cs")                                           \
    X(8, W_QUEUE, 1, "tile queue x8, ld/st.cs")                                                              \
    X(16, W_QUEUE, 2, "tile queue x16, ld.nc.L2::256B/st.cs")
#define BW_NAME(U, W, H, name)  name,
#define BW_WALK(U, W, H, name)  W,
#define BW_U(U, W, H, name)     U,
#define BW_READ(U, W, H, name)  read_kernel<U, W, H>,
#define BW_WRITE(U, W, H, name) write_kernel<U, W, H>,
#define BW_COPY(U, W, H, name)  copy_kernel<U, W, H>,
static const char *const var_names[] = {BW_VARIANTS(BW_NAME)};
static const int var_walk[] = {BW_VARIANTS(BW_WALK)};
static const int var_u[] = {BW_VARIANTS(BW_U)};
static const read_fn read_vars[] = {BW_VARIANTS(BW_READ)};
static const write_fn write_vars[] = {BW_VARIANTS(BW_WRITE)};
static const copy_fn copy_vars[] = {BW_VARIANTS(BW_COPY)};
#define N_L2_VAR 3 /* the volatile-load variants only: a pass loop must not be hoisted */

/* grid of variant v over n int4: one block per tile (BLOCKS) or the resident blocks of the kernel */
static int grid_of(const int *resident, int v, size_t n) {
    if (var_walk[v] != W_BLOCKS) return resident[v];
    size_t tile = (size_t)var_u[v] * BW_THREADS;
    return (int)((n + tile - 1) / tile);
}
static void run_read(lpo__membw_bench *b, int v, const int4 *p, size_t n, int passes) {
    read_vars[v]<<<grid_of(b->rblocks, v, n), BW_THREADS, 0, b->s>>>(p, n, passes, b->sink, b->ctr);
}
static void run_write(lpo__membw_bench *b, int v, int seed) {
    write_vars[v]<<<grid_of(b->wblocks, v, b->n), BW_THREADS, 0, b->s>>>(b->b, b->n, seed, b->ctr);
}
static void run_copy(lpo__membw_bench *b, int v) {
    copy_vars[v]<<<grid_of(b->cblocks, v, b->n), BW_THREADS, 0, b->s>>>(b->a, b->b, b->n, b->ctr);
}

/* checksum of p (n int4) with read variant v (passes = 1) or, v < 0, the scalar reference */
static lpo_status checksum(lpo__membw_bench *b, const int4 *p, size_t n, int v, int out[4]) {
    lpo_status st = LPO_OK;
    LPO_CUDA_CHECK(cudaMemsetAsync(b->sink, 0, 4 * sizeof(int), b->s));
    if (v < 0)
        xor_scalar_kernel<<<b->blocks, BW_THREADS, 0, b->s>>>((const int *)p, 4 * n, b->sink);
    else
        run_read(b, v, p, n, 1);
    LPO_CUDA_CHECK(cudaGetLastError());
    LPO_CUDA_CHECK(cudaMemcpyAsync(out, b->sink, 4 * sizeof(int), cudaMemcpyDeviceToHost, b->s));
    LPO_CUDA_CHECK(cudaStreamSynchronize(b->s));
fail:
    return st;
}

/* one repetition of kind with variant v */
static cudaError_t launch(lpo__membw_bench *b, lpo__bw_kind kind, int v, int r) {
    switch (kind) {
    case LPO__BW_READ: run_read(b, v, b->a, b->n, 1); break;
    case LPO__BW_WRITE: run_write(b, v, r); break;
    case LPO__BW_COPY: run_copy(b, v); break;
    case LPO__BW_MEMCPY_D2D: return cudaMemcpyAsync(b->b, b->a, b->bytes, cudaMemcpyDeviceToDevice, b->s);
    case LPO__BW_L2_READ: run_read(b, v, b->l2buf, b->n_l2, L2_PASSES); break;
    case LPO__BW_H2D: return cudaMemcpyAsync(b->a, b->host, b->host_bytes, cudaMemcpyHostToDevice, b->s);
    case LPO__BW_D2H: return cudaMemcpyAsync(b->host, b->a, b->host_bytes, cudaMemcpyDeviceToHost, b->s);
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

static lpo_status validate(lpo__membw_bench *b) {
    lpo_status st = LPO_OK;
    int ref[4], c[4];
    int4 *h = NULL;
    const size_t nh = 65536; /* int4 read back at each end of the written buffer */
    // every read variant vs the scalar reference, on the big buffer and the L2 buffer
    for (int which = 0; which < 2; which++) {
        const int4 *p = which ? b->l2buf : b->a;
        size_t n = which ? b->n_l2 : b->n;
        if ((st = checksum(b, p, n, -1, ref))) goto fail;
        for (int v = 0; v < N_VAR; v++) {
            if ((st = checksum(b, p, n, v, c))) goto fail;
            if (memcmp(c, ref, sizeof c))
                return lpo_errorf(
                    LPO_E_RANGE, "read kernel (%s): checksum %08x.. differs from the scalar reference %08x..",
                    var_names[v], (unsigned)c[0], (unsigned)ref[0]);
        }
    }
    // every write variant: the pattern at both ends of b
    h = (int4 *)malloc(nh * sizeof(int4));
    if (!h) return lpo_errorf(LPO_E_NOMEM, "out of host memory");
    for (int v = 0; v < N_VAR; v++) {
        LPO_CUDA_CHECK(cudaMemsetAsync(b->b, 0, b->bytes, b->s));
        run_write(b, v, 77);
        LPO_CUDA_CHECK(cudaGetLastError());
        for (int end = 0; end < 2; end++) {
            size_t off = end ? b->n - nh : 0;
            LPO_CUDA_CHECK(cudaMemcpyAsync(h, b->b + off, nh * sizeof(int4), cudaMemcpyDeviceToHost, b->s));
            LPO_CUDA_CHECK(cudaStreamSynchronize(b->s));
            // each read-back element against the pattern
            for (size_t i = 0; i < nh; i++) {
                size_t g = off + i;
                if (h[i].x != (int)g || h[i].y != ((int)(g >> 32) ^ 77) || h[i].z != 77 ||
                    h[i].w != ~(int)g) {
                    free(h);
                    return lpo_errorf(LPO_E_RANGE,
                                      "write kernel (%s): element %zu does not hold the written pattern",
                                      var_names[v], g);
                }
            }
        }
    }
    free(h);
    h = NULL;
    // every copy variant, then cudaMemcpy: b's checksum equals a's
    if ((st = checksum(b, b->a, b->n, 0, ref))) goto fail;
    for (int v = 0; v <= N_VAR; v++) {
        LPO_CUDA_CHECK(cudaMemsetAsync(b->b, 0xab, b->bytes, b->s));
        if (v < N_VAR)
            run_copy(b, v);
        else
            cudaMemcpyAsync(b->b, b->a, b->bytes, cudaMemcpyDeviceToDevice, b->s);
        LPO_CUDA_CHECK(cudaGetLastError());
        if ((st = checksum(b, b->b, b->n, 0, c))) goto fail;
        if (memcmp(c, ref, sizeof c))
            return lpo_errorf(LPO_E_RANGE, "%s: the copy's checksum differs from the source's",
                              v < N_VAR ? var_names[v] : "cudaMemcpy D2D");
    }
    // host round trip: H2D, poison the host buffer, D2H, compare the first and last words
    {
        size_t nw = b->host_bytes / 4;
        unsigned *hw = (unsigned *)b->host;
        for (size_t i = 0; i < nw; i += 4096) hw[i] = (unsigned)(i * 2654435761u);
        hw[nw - 1] = 0x5eed;
        LPO_CUDA_CHECK(cudaMemcpyAsync(b->a, b->host, b->host_bytes, cudaMemcpyHostToDevice, b->s));
        LPO_CUDA_CHECK(cudaStreamSynchronize(b->s));
        memset(b->host, 0, b->host_bytes);
        LPO_CUDA_CHECK(cudaMemcpyAsync(b->host, b->a, b->host_bytes, cudaMemcpyDeviceToHost, b->s));
        LPO_CUDA_CHECK(cudaStreamSynchronize(b->s));
        for (size_t i = 0; i < nw; i += 4096)
            if (hw[i] != (unsigned)(i * 2654435761u))
                return lpo_errorf(LPO_E_RANGE, "host round trip: word %zu differs", i);
        if (hw[nw - 1] != 0x5eed) return lpo_errorf(LPO_E_RANGE, "host round trip: last word differs");
    }
fail:
    free(h);
    return st;
}

/* For each kernel kind, the fastest validated variant: 5 rounds, each timing `reps` repetitions of every
 * variant in turn (after one untimed); a variant's score is the median of its rounds, and the earliest
 * variant within 0.5% of the fastest is kept (lpo__ceil_pick_rounds: the same choice from run to run). A
 * DRAM timing is 3 passes over 1 GiB (~1 ms); an L2 pass is ~0.1 ms, so L2 timings take 24 (with 3, two
 * H100 runs kept different L2 variants whose figures then differed by 7.6%). */
static lpo_status pick_variants(lpo__membw_bench *b) {
    lpo_status st = LPO_OK;
    const lpo__bw_kind kinds[] = {LPO__BW_READ, LPO__BW_WRITE, LPO__BW_COPY, LPO__BW_L2_READ};
    enum { ROUNDS = 5 };
    double t[ROUNDS * N_VAR];
    // each kind: rounds x variants
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const int nv = kinds[k] == LPO__BW_L2_READ ? N_L2_VAR : N_VAR,
                  reps = kinds[k] == LPO__BW_L2_READ ? 24 : 3;
        for (int r = 0; r < ROUNDS; r++) {
            for (int v = 0; v < nv; v++) {
                LPO_CUDA_CHECK(launch(b, kinds[k], v, 0));
                LPO_CUDA_CHECK(cudaEventRecord(b->e0, b->s));
                for (int i = 0; i < reps; i++) LPO_CUDA_CHECK(launch(b, kinds[k], v, i));
                LPO_CUDA_CHECK(cudaEventRecord(b->e1, b->s));
                LPO_CUDA_ELAPSED(b->e0, b->e1, &t[r * nv + v]);
            }
        }
        b->var[kinds[k]] = lpo__ceil_pick_rounds(t, ROUNDS, nv, NULL, 0.005, NULL);
    }
    /* the sample kernels may have written b: the L2 pass kernels never write */
fail:
    return st;
}

extern "C" lpo_status lpo__membw_bench_open(int dev, size_t bytes, size_t host_bytes,
                                            lpo__membw_bench **out) {
    lpo_status st = LPO_OK;
    cudaDeviceProp prop;
    int per_sm = 0;
    *out = NULL;
    lpo__membw_bench *b = (lpo__membw_bench *)calloc(1, sizeof *b);
    if (!b) return lpo_errorf(LPO_E_NOMEM, "bandwidth bench: out of memory");
    b->bytes = bytes - bytes % (1u << 20); /* whole MiB */
    b->n = b->bytes / 16;
    b->host_bytes = host_bytes - host_bytes % 4096;
    LPO_CUDA_CHECK(cudaSetDevice(dev));
    LPO_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    LPO_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, xor_scalar_kernel, BW_THREADS, 0));
    b->blocks = prop.multiProcessorCount * (per_sm > 0 ? per_sm : 1);
    // resident grid of every variant
    for (int v = 0; v < N_VAR; v++) {
        LPO_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, read_vars[v], BW_THREADS, 0));
        b->rblocks[v] = prop.multiProcessorCount * (per_sm > 0 ? per_sm : 1);
        LPO_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, write_vars[v], BW_THREADS, 0));
        b->wblocks[v] = prop.multiProcessorCount * (per_sm > 0 ? per_sm : 1);
        LPO_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, copy_vars[v], BW_THREADS, 0));
        b->cblocks[v] = prop.multiProcessorCount * (per_sm > 0 ? per_sm : 1);
    }
    b->l2_bytes = (size_t)prop.l2CacheSize / 4;
    b->l2_bytes -= b->l2_bytes % 4096;
    if (b->l2_bytes < 65536) b->l2_bytes = 65536;
    b->n_l2 = b->l2_bytes / 16;
    if (b->n < 2 * 65536 || b->host_bytes < 4096) {
        st = lpo_errorf(LPO_E_INVALID, "bandwidth bench: buffers too small (%zu device, %zu host bytes)",
                        bytes, host_bytes);
        goto fail;
    }
    LPO_CUDA_CHECK(cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking));
    LPO_CUDA_CHECK(cudaEventCreate(&b->e0));
    LPO_CUDA_CHECK(cudaEventCreate(&b->e1));
    LPO_CUDA_CHECK(cudaMalloc((void **)&b->a, b->bytes));
    LPO_CUDA_CHECK(cudaMalloc((void **)&b->b, b->bytes));
    LPO_CUDA_CHECK(cudaMalloc((void **)&b->l2buf, b->l2_bytes));
    LPO_CUDA_CHECK(cudaMalloc((void **)&b->sink, 4 * sizeof(int)));
    LPO_CUDA_CHECK(cudaMalloc((void **)&b->ctr, 2 * sizeof(unsigned)));
    LPO_CUDA_CHECK(cudaMemsetAsync(b->ctr, 0, 2 * sizeof(unsigned), b->s)); /* on b->s: before any kernel */
    LPO_CUDA_CHECK(cudaMallocHost((void **)&b->host, b->host_bytes));
    if ((st = lpo__gpu_fill_random(b->a, b->bytes / 4, LPO_DT_I32, 11, -2e9f, 2e9f, b->s)) ||
        (st = lpo__gpu_fill_random(b->l2buf, b->l2_bytes / 4, LPO_DT_I32, 12, -2e9f, 2e9f, b->s)) ||
        (st = validate(b)) || (st = pick_variants(b)))
        goto fail;
    *out = b;
    return LPO_OK;
fail:
    lpo__membw_bench_close(b);
    return st;
}

extern "C" double lpo__membw_bytes(const lpo__membw_bench *b, lpo__bw_kind kind) {
    switch (kind) {
    case LPO__BW_READ:
    case LPO__BW_WRITE: return (double)b->bytes;
    case LPO__BW_COPY:
    case LPO__BW_MEMCPY_D2D: return 2.0 * (double)b->bytes;
    case LPO__BW_L2_READ: return (double)b->l2_bytes * L2_PASSES;
    case LPO__BW_H2D:
    case LPO__BW_D2H: return (double)b->host_bytes;
    default: return 0;
    }
}

extern "C" void lpo__membw_detail(const lpo__membw_bench *b, lpo__bw_kind kind, char *buf, size_t n) {
    const double mib = 1.0 / (1 << 20);
    int v = b->var[kind];
    switch (kind) {
    case LPO__BW_MEMCPY_D2D: snprintf(buf, n, "cudaMemcpyAsync, %.0f MiB", (double)b->bytes * mib); break;
    case LPO__BW_H2D:
    case LPO__BW_D2H:
        snprintf(buf, n, "cudaMemcpyAsync, pinned, %.0f MiB", (double)b->host_bytes * mib);
        break;
    case LPO__BW_L2_READ:
        snprintf(buf, n, "%.1f MiB x %d passes, %s, %d blocks x %d", (double)b->l2_bytes * mib, L2_PASSES,
                 var_names[v], b->rblocks[v], BW_THREADS);
        break;
    default: {
        const int *bl = kind == LPO__BW_READ ? b->rblocks : kind == LPO__BW_WRITE ? b->wblocks : b->cblocks;
        snprintf(buf, n, "%.0f MiB, int4 %s, %d blocks x %d", (double)b->bytes * mib, var_names[v],
                 grid_of(bl, v, b->n), BW_THREADS);
        break;
    }
    }
}

extern "C" lpo_status lpo__membw_bench_sample(lpo__membw_bench *b, lpo__bw_kind kind, int reps,
                                              double *seconds) {
    lpo_status st = LPO_OK;
    if ((unsigned)kind >= LPO__BW_COUNT)
        return lpo_errorf(LPO_E_INVALID, "bandwidth bench: unknown kind %d", (int)kind);
    LPO_CUDA_CHECK(cudaEventRecord(b->e0, b->s));
    // reps repetitions of the measured transfer
    for (int r = 0; r < reps; r++) LPO_CUDA_CHECK(launch(b, kind, b->var[kind], r));
    LPO_CUDA_CHECK(cudaEventRecord(b->e1, b->s));
    LPO_CUDA_ELAPSED(b->e0, b->e1, seconds);
    *seconds /= reps;
fail:
    return st;
}

extern "C" void lpo__membw_bench_close(lpo__membw_bench *b) {
    if (!b) return;
    if (b->s) cudaStreamSynchronize(b->s);
    cudaFree(b->a);
    cudaFree(b->b);
    cudaFree(b->l2buf);
    cudaFree(b->sink);
    cudaFree(b->ctr);
    if (b->host) cudaFreeHost(b->host);
    if (b->e0) cudaEventDestroy(b->e0);
    if (b->e1) cudaEventDestroy(b->e1);
    if (b->s) cudaStreamDestroy(b->s);
    free(b);
}
