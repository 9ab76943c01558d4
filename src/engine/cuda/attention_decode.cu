/* Attention, decode form (flash-decoding): for each token t (slot[t], position pos[t]) and q head h,
 * att[t, h] = softmax over positions j in [max(0, pos - window + 1), pos] of (q . k_j / sqrt(hd)) applied to
 * v_j, K/V from one layer's cache [slot][max_context][nkv * hd]; q from the qkv rows (m, (nh + 2 nkv) hd).
 *
 * Grid (token, KV head x head group, split): the context of each token is cut into n_splits equal pieces
 * (sized on the device from its own length, so one launch shape serves a whole context bucket). A block of
 * 128 threads walks its piece in chunks of CH positions (8 KB of K and 8 KB of V, 8..64 positions): every
 * 16-byte K/V load of a chunk is issued at once (cp.async into shared memory, double-buffered: chunk c + 1
 * is in flight while c is computed), so a block of one or two chunks pays about one DRAM latency. Per chunk:
 * scores with a thread per (position, head) (q scaled in shared memory, K rows padded: no bank conflicts),
 * one max/sum per head for the chunk (the running max rescales the output once per chunk, not per key),
 * then P.V with a thread per (16-byte dims vector, position group) holding all <= 8 q heads of the KV head
 * (GQA: each K/V byte is read from DRAM once per block). With one split the block writes att directly; else
 * it writes (o, max, sum) partials to the workspace and combine_kernel merges them (a block per (token, q
 * head), all loads of a thread issued together).
 * An fp8 cache (engine.kv_dtype=fp8: e4m3 with one f32 scale per position and KV head) is read the same way:
 * a chunk is 8 KB of K and of V in fp8 (64 positions at hd 128), its scales copied beside it; 16 fp8 values
 * per 16-byte vector are converted exactly in registers (through f16), the K scale multiplies the score of
 * its position and the V scale the probability that weighs v_j (the softmax sum stays unweighted).
 * Floor: the cache bytes read, 2 * len * nkv * hd * sizeof(T) per token (+ q, out); fp8: 2 * len * nkv *
 * (hd + 4). Llama-3.1-8B bf16
 * (nkv 8, hd 128): 4 KB per cached position per layer; batch 1 at context 2048: 8.4 MB/layer -> 2.8 us at
 * 2.97 TB/s (latency-bound below ~1k positions: ~3-5 us for two launches); batch 64 x 2048: 537 MB ->
 * 181 us. Llama-3.2-1B (hd 64): 2 KB per position per layer.
 * Measurements: docs/perf-notes.md. */
#include <math.h>

#include "engine/cuda/cuda_common.cuh"

#define DEC_THREADS  128
#define GMAX         8  /* q heads per block at most; a KV head with more q heads gets several blocks */
#define MIN_SPLIT    32 /* positions per split at least (lpo_cuda_attention_decode_splits) */
#define COMB_THREADS 256

template <typename T, int HD, int G> struct dec_cfg {
    static constexpr int VEC = 16 / (int)sizeof(T);        // elements per 16-byte vector
    static constexpr int KV = HD / VEC;                    // vectors per K/V row (2..64)
    static constexpr int ROWB = HD * (int)sizeof(T);       // bytes per K/V row (32..1024)
    static constexpr int CH0 = 8192 / ROWB;                // positions per chunk: 8 KB of K ...
    static constexpr int CH = CH0 > 64 ? 64 : CH0;         // ... at most 64 (8..64)
    static constexpr int RS = HD + VEC;                    // shared row stride (elements): +16 bytes, so rows
                                                           // start in different bank groups (KV + 1 is odd)
    static constexpr int LPT = CH * KV / DEC_THREADS;      // 16-byte loads per thread per matrix per chunk
    static constexpr int NHG = DEC_THREADS / CH;           // scores: head groups (threads per position)
    static constexpr int HPT = (G + NHG - 1) / NHG;        // scores: heads per thread
    static constexpr int NA = KV < 4 ? KV : 4;             // scores: independent partial sums per head
    static constexpr int NKG = DEC_THREADS / KV;           // P.V: position groups
    static constexpr int KPT = CH / NKG;                   // P.V: positions per thread per chunk
    static constexpr int RW = KV > 32 ? KV : 32;           // P.V: threads per reduced partial (a warp or two)
    static constexpr int NR = DEC_THREADS / RW;            // P.V: partials left after the warp shuffles
    static constexpr int QS = HD + 4;                      // q row stride (floats): heads in different banks
    static constexpr int STAGE = CH * RS * (int)sizeof(T); // bytes of one K (or V) chunk in shared memory
    static_assert(LPT >= 1 && KPT >= 1 && CH * KV == LPT * DEC_THREADS && CH == KPT * NKG, "chunk shape");
    static_assert(NR * G * HD * 4 <= 4 * STAGE, "the P.V reduction reuses the K/V buffers");
};

/* 16 bytes global -> shared, asynchronous; src_bytes 0 fills zeros (and reads nothing). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until at most N of this thread's groups are pending. */
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* 4 bytes global -> shared, asynchronous; src_bytes 0 fills zeros. */
__device__ __forceinline__ void cp_async4(void *dst, const void *src, int src_bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
                 : "memory");
}

/* The chunk at position j0 (cnt valid positions; rows past them zero-filled) -> shared K, V buffers; an fp8
 * cache (ksb set: the scales of this slot and KV head, stride nkv per position) also its K and V scales ->
 * sks, svs (zero past cnt). */
template <typename KT, int HD, int G>
__device__ __forceinline__ void load_chunk(KT *sk, KT *sv, const KT *kb, const KT *vb, int64_t j0, int cnt,
                                           int64_t kvd, float *sks, float *svs, const float *ksb,
                                           const float *vsb, int nkv) {
    typedef dec_cfg<KT, HD, G> C;
#pragma unroll
    for (int r = 0; r < C::LPT; r++) { // vector i of the chunk: position i / KV, vector i % KV
        const int i = threadIdx.x + r * DEC_THREADS, j = i / C::KV, v = i % C::KV;
        const bool ok = j < cnt;
        const int64_t off = (ok ? (j0 + j) * kvd : j0 * kvd) + v * C::VEC;
        cp_async16(sk + j * C::RS + v * C::VEC, kb + off, ok ? 16 : 0);
        cp_async16(sv + j * C::RS + v * C::VEC, vb + off, ok ? 16 : 0);
    }
    if constexpr (sizeof(KT) == 1) {
        if (threadIdx.x < 2 * C::CH) { // thread j: K scale of position j, thread CH + j: its V scale
            const int j = threadIdx.x % C::CH;
            const bool ok = j < cnt;
            const int64_t at = (ok ? j0 + j : j0) * nkv;
            if (threadIdx.x < C::CH)
                cp_async4(sks + j, ksb + at, ok ? 4 : 0);
            else
                cp_async4(svs + j, vsb + at, ok ? 4 : 0);
        }
    }
}

// token blockIdx.x, (KV head, chunk of G q heads) blockIdx.y, split blockIdx.z. KT: the cache's element (T,
// or lpo_e4m3 with the scales ks, vs [slot][max_context][nkv]: a score is (q . k_j) ks_j, a probability
// weighs v_j by vs_j; the softmax sums stay those of the unweighted probabilities)
template <typename T, typename KT, int HD, int G>
__global__ void __launch_bounds__(DEC_THREADS)
    decode_kernel(T *att, float *part_o, float2 *part_ml, const T *qkv, const KT *kc, const KT *vc,
                  const float *ks, const float *vs, const int32_t *slot, const int64_t *pos, int nh, int nkv,
                  int64_t max_context, int64_t window, int ns, float scale) {
    typedef dec_cfg<KT, HD, G> C;
    constexpr bool KV8 = sizeof(KT) == 1;
    constexpr int NSC = KV8 ? C::CH : 1;
    __shared__ __align__(16) unsigned char kvbuf[4 * C::STAGE]; // K stage 0, 1, V stage 0, 1; then reduction
    __shared__ __align__(16) float sq[G][C::QS];                // q (scaled to log2 units)
    __shared__ float ss[G][C::CH];                              // scores of the chunk
    __shared__ __align__(16) float sp[C::CH][G];                // probabilities of the chunk
    __shared__ float sa[G], sm[G], sl[G];                       // rescale factor, running max, sum
    __shared__ float sks[2][NSC], svs[2][NSC];                  // fp8: the chunk's K and V scales per stage
    KT *const sk0 = (KT *)kvbuf, *const sv0 = (KT *)(kvbuf + 2 * C::STAGE);
    lpo_pdl_start(); /* pos, slot, qkv and this step's K/V row: written by the kernels before */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = nh / nkv, nchunk = (g + G - 1) / G;
    const int kh = blockIdx.y / nchunk, hc = blockIdx.y % nchunk;
    const int h0 = kh * g + hc * G, gc = min(G, g - hc * G);
    const int64_t t = blockIdx.x, sp_i = blockIdx.z;
    const int64_t p = pos[t], lo = window > 0 && p + 1 > window ? p + 1 - window : 0;
    const int64_t len = (p - lo + 1 + ns - 1) / ns;
    const int64_t start = lo + sp_i * len, end = min(p + 1, start + len);
    const int64_t kvd = (int64_t)nkv * HD;
    const size_t base = (size_t)slot[t] * (size_t)max_context * (size_t)kvd + (size_t)kh * HD;
    const KT *kb = kc + base, *vb = vc + base;
    const size_t sbase = (size_t)slot[t] * (size_t)max_context * (size_t)nkv + (size_t)kh;
    const float *ksb = KV8 ? ks + sbase : NULL, *vsb = KV8 ? vs + sbase : NULL;
    const int nch = end > start ? (int)((end - start + C::CH - 1) / C::CH) : 0;

    if (nch > 0)
        load_chunk<KT, HD, G>(sk0, sv0, kb, vb, start, (int)min((int64_t)C::CH, end - start), kvd, sks[0],
                              svs[0], ksb, vsb, nkv);
    cp_async_commit();
    // q heads h0 .. h0 + gc (hd,) -> sq, pre-scaled by scale * log2(e) (scores in log2 units: exp2f)
    const T *qrow = qkv + t * (int64_t)(nh + 2 * nkv) * HD + (int64_t)h0 * HD;
    constexpr int QV = 16 / (int)sizeof(T), QK = HD / QV; // q: elements per 16-byte vector, vectors per head
    for (int i = tid; i < G * QK; i += DEC_THREADS) {     // (head, vector)
        const int h = i / QK, v = i % QK;
        float f[QV];
        if (h < gc) {
            lpo_load<T, QV>(qrow + h * HD + v * QV, f);
        } else {
#pragma unroll
            for (int e = 0; e < QV; e++) f[e] = 0.f;
        }
#pragma unroll
        for (int e = 0; e < QV; e += 4)
            *(float4 *)&sq[h][v * QV + e] =
                make_float4(f[e] * scale, f[e + 1] * scale, f[e + 2] * scale, f[e + 3] * scale);
    }
    float mrun[(G + 3) / 4], lrun[(G + 3) / 4]; // softmax state of heads warp + 4 k (the warp's lanes agree)
#pragma unroll
    for (int k = 0; k < (G + 3) / 4; k++) mrun[k] = -INFINITY, lrun[k] = 0.f;
    // P.V: this thread's dims vector dv, positions kg, kg + NKG, ... of each chunk; all G heads
    const int dv = tid % C::KV, kg = tid / C::KV;
    float acc[G][C::VEC];
#pragma unroll
    for (int h = 0; h < G; h++)
#pragma unroll
        for (int e = 0; e < C::VEC; e++) acc[h][e] = 0.f;
    // scores: this thread's position jq, heads hq + NHG k
    const int jq = tid % C::CH, hq = tid / C::CH;

    for (int c = 0; c < nch; c++) {
        const int64_t j0 = start + (int64_t)c * C::CH;
        const int cnt = (int)min((int64_t)C::CH, end - j0);
        if (c + 1 < nch) {
            const int64_t j1 = j0 + C::CH;
            load_chunk<KT, HD, G>(sk0 + ((c + 1) & 1) * (C::STAGE / sizeof(KT)),
                                  sv0 + ((c + 1) & 1) * (C::STAGE / sizeof(KT)), kb, vb, j1,
                                  (int)min((int64_t)C::CH, end - j1), kvd, sks[(c + 1) & 1], svs[(c + 1) & 1],
                                  ksb, vsb, nkv);
        }
        cp_async_commit();
        cp_async_wait<1>(); // chunk c has landed (this thread's part)
        __syncthreads();    // ... everyone's part, and sq
        const KT *sk = sk0 + (c & 1) * (C::STAGE / sizeof(KT)), *sv = sv0 + (c & 1) * (C::STAGE / sizeof(KT));

        { // scores (CH, G): position jq, heads hq + NHG k; NA partial sums per head
            float s[C::HPT][C::NA];
#pragma unroll
            for (int k = 0; k < C::HPT; k++)
#pragma unroll
                for (int a = 0; a < C::NA; a++) s[k][a] = 0.f;
#pragma unroll
            for (int v0 = 0; v0 < C::KV; v0 += C::NA) {
#pragma unroll
                for (int a = 0; a < C::NA; a++) {
                    float kf[C::VEC];
                    lpo_load<KT, C::VEC>(sk + jq * C::RS + (v0 + a) * C::VEC, kf);
#pragma unroll
                    for (int k = 0; k < C::HPT; k++) {
                        const int h = hq + C::NHG * k;
                        if (C::NHG * k + C::NHG > G && h >= G) continue; // only when NHG does not divide G
#pragma unroll
                        for (int e = 0; e < C::VEC; e += 4) {
                            const float4 q4 = *(const float4 *)&sq[h][(v0 + a) * C::VEC + e];
                            s[k][a] += q4.x * kf[e] + q4.y * kf[e + 1] + q4.z * kf[e + 2] + q4.w * kf[e + 3];
                        }
                    }
                }
            }
#pragma unroll
            for (int k = 0; k < C::HPT; k++) {
                const int h = hq + C::NHG * k;
                if (h >= G) continue;
                float sum = 0.f;
#pragma unroll
                for (int a = 0; a < C::NA; a++) sum += s[k][a];
                if constexpr (KV8) sum *= sks[c & 1][jq];
                ss[h][jq] = jq < cnt ? sum : -INFINITY;
            }
        }
        __syncthreads();
        // softmax of the chunk: warp w takes heads w, w + 4; positions lane, lane + 32
#pragma unroll
        for (int k = 0; k < (G + 3) / 4; k++) {
            const int h = warp + 4 * k;
            if (h >= G) continue; // warp-uniform
            float x[(C::CH + 31) / 32], cm = -INFINITY;
#pragma unroll
            for (int u = 0; u < (C::CH + 31) / 32; u++) {
                const int j = lane + 32 * u;
                x[u] = j < C::CH ? ss[h][j] : -INFINITY;
                cm = fmaxf(cm, x[u]);
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
            const float mn = fmaxf(mrun[k], cm); // finite: the chunk holds >= 1 position
            const float alpha = exp2f(mrun[k] - mn);
            float ps = 0.f;
#pragma unroll
            for (int u = 0; u < (C::CH + 31) / 32; u++) {
                const int j = lane + 32 * u;
                const float e = exp2f(x[u] - mn);
                if (j < C::CH) sp[j][h] = e;
                ps += e;
            }
            ps = lpo_warp_sum(ps);
            lrun[k] = lrun[k] * alpha + ps;
            mrun[k] = mn;
            if (lane == 0) sa[h] = alpha;
        }
        __syncthreads();
        { // P.V: acc (G, VEC) = acc * alpha + sum over this thread's positions of p_j v_j[dims dv]
            float al[G];
#pragma unroll
            for (int h = 0; h < G; h++) al[h] = sa[h];
#pragma unroll
            for (int h = 0; h < G; h++)
#pragma unroll
                for (int e = 0; e < C::VEC; e++) acc[h][e] *= al[h];
#pragma unroll
            for (int u = 0; u < C::KPT; u++) { // positions past cnt: p = 0 and v zero-filled
                const int j = kg + C::NKG * u;
                float vf[C::VEC], pj[G];
                lpo_load<KT, C::VEC>(sv + j * C::RS + dv * C::VEC, vf);
                const float vsc = KV8 ? svs[c & 1][j] : 1.f; // fp8: v_j's scale (0 past cnt)
#pragma unroll
                for (int h = 0; h < G; h++) pj[h] = sp[j][h] * vsc;
#pragma unroll
                for (int h = 0; h < G; h++)
#pragma unroll
                    for (int e = 0; e < C::VEC; e++) acc[h][e] += pj[h] * vf[e];
            }
        }
        __syncthreads(); // the buffers of chunk c are free (chunk c + 2 goes there next)
    }
    cp_async_wait<0>();

    // reduce acc over the position groups: lanes of a warp with the same dv, then warps via shared memory
#pragma unroll
    for (int o = C::KV; o < 32; o <<= 1)
#pragma unroll
        for (int h = 0; h < G; h++)
#pragma unroll
            for (int e = 0; e < C::VEC; e++) acc[h][e] += __shfl_xor_sync(0xffffffffu, acc[h][e], o);
    float *red = (float *)kvbuf; // [NR][G][HD]
    __syncthreads();             // (nch == 0: nobody used the buffers; the sync is harmless)
    if (tid % C::RW < C::KV) {
        const int r = tid / C::RW;
#pragma unroll
        for (int h = 0; h < G; h++)
#pragma unroll
            for (int e = 0; e < C::VEC; e += 4)
                *(float4 *)&red[(r * G + h) * HD + dv * C::VEC + e] =
                    make_float4(acc[h][e], acc[h][e + 1], acc[h][e + 2], acc[h][e + 3]);
    }
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < (G + 3) / 4; k++)
            if (warp + 4 * k < G) sm[warp + 4 * k] = mrun[k], sl[warp + 4 * k] = lrun[k];
    }
    __syncthreads();
    // (token, first q head) of the output read from the block index again: no 64-bit index stays live across
    // the chunk loop (ptxas would park it on the stack)
    unsigned bx, by;
    asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(bx));
    asm volatile("mov.u32 %0, %%ctaid.y;\n" : "=r"(by));
    const int64_t th0 = (int64_t)bx * nh + (int64_t)(by / nchunk) * g + (by % nchunk) * G;
    for (int i = tid; i < gc * HD; i += DEC_THREADS) { // (head, dim)
        const int h = i / HD, d = i % HD;
        float o = 0.f;
#pragma unroll
        for (int r = 0; r < C::NR; r++) o += red[(r * G + h) * HD + d];
        const int64_t th = th0 + h; // (token, q head)
        if (ns == 1) {
            att[th * HD + d] = lpo_from_f<T>(o / sl[h]);
        } else {
            part_o[(th * ns + sp_i) * HD + d] = o;
            if (d == 0) part_ml[th * ns + sp_i] = make_float2(sm[h], sl[h]);
        }
    }
}

/* (token, q head) blockIdx.x: att = sum_s o_s 2^(m_s - M) / sum_s l_s 2^(m_s - M). Thread (split group sg,
 * dims d4 .. d4 + 4): splits sg, sg + NSG, ...; 4 splits' loads issued together, an online merge over them,
 * then the NSG groups merged in shared memory. An empty split (m = -inf) counts for nothing. */
template <typename T, int HD>
__global__ void __launch_bounds__(COMB_THREADS)
    combine_kernel(T *att, const float *part_o, const float2 *part_ml, int ns) {
    constexpr int RT = HD / 4, NSG = COMB_THREADS / RT; // threads per split row, split groups
    __shared__ float so[NSG][HD], sm[NSG], sl[NSG];
    const int64_t th = blockIdx.x;
    lpo_pdl_start();
    const int tid = threadIdx.x, d4 = tid % RT, sg = tid / RT;
    const float2 *ml = part_ml + th * ns;
    const float *po = part_o + th * ns * HD + d4 * 4;
    float M = -INFINITY, L = 0.f, o[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s0 = sg; s0 < ns; s0 += 4 * NSG) {
        float2 m4[4];
        float4 o4[4];
#pragma unroll
        for (int u = 0; u < 4; u++) { // loads first
            const int s = s0 + u * NSG;
            m4[u] = s < ns ? ml[s] : make_float2(-INFINITY, 0.f);
            o4[u] = s < ns ? *(const float4 *)(po + (int64_t)s * HD) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float mn = fmaxf(M, m4[u].x);
            if (mn == -INFINITY) continue; // nothing yet
            const float a = exp2f(M - mn), b = m4[u].x == -INFINITY ? 0.f : exp2f(m4[u].x - mn);
            L = L * a + m4[u].y * b;
            o[0] = o[0] * a + (b == 0.f ? 0.f : o4[u].x * b);
            o[1] = o[1] * a + (b == 0.f ? 0.f : o4[u].y * b);
            o[2] = o[2] * a + (b == 0.f ? 0.f : o4[u].z * b);
            o[3] = o[3] * a + (b == 0.f ? 0.f : o4[u].w * b);
            M = mn;
        }
    }
    *(float4 *)&so[sg][d4 * 4] = make_float4(o[0], o[1], o[2], o[3]);
    if (d4 == 0) sm[sg] = M, sl[sg] = L;
    __syncthreads();
    for (int d = tid; d < HD; d += COMB_THREADS) {
        float mx = -INFINITY;
#pragma unroll 8
        for (int g = 0; g < NSG; g++) mx = fmaxf(mx, sm[g]);
        float l = 0.f, acc = 0.f;
#pragma unroll 8
        for (int g = 0; g < NSG; g++) {
            const float w = sm[g] == -INFINITY ? 0.f : exp2f(sm[g] - mx);
            l += sl[g] * w;
            acc += so[g][d] * w;
        }
        att[th * HD + d] = lpo_from_f<T>(acc / l);
    }
}

/* Splits: about four blocks per SM (each then holds one or two chunks at small batch, all of them resident
 * at once), at least MIN_SPLIT positions each, at most 256; batch >= ~4 SMs' worth of blocks: one split. */
extern "C" int lpo_cuda_attention_decode_splits(int64_t m, int64_t nh, int64_t nkv, int64_t max_len,
                                                int n_sm) {
    if (m <= 0 || nkv <= 0 || nh < nkv) return 1;
    const int64_t g = nh / nkv,
                  blocks = m * nkv * ((g + GMAX - 1) / GMAX); // G <= GMAX: one chunk unless g > 8
    int64_t ns = 4 * (int64_t)n_sm / blocks;
    const int64_t by_len = (max_len + MIN_SPLIT - 1) / MIN_SPLIT;
    if (ns > by_len) ns = by_len;
    if (ns > 256) ns = 256;
    return ns < 1 ? 1 : (int)ns;
}

extern "C" size_t lpo_cuda_attention_decode_workspace(int64_t m, int64_t nh, int64_t hd, int n_splits) {
    if (n_splits <= 1) return 0;
    const size_t ml = ((size_t)m * nh * n_splits * sizeof(float2) + 255) / 256 * 256;
    return ml + (size_t)m * nh * n_splits * hd * sizeof(float);
}

template <typename T, typename KT, int HD, int G>
static void launch_decode_g(T *att, const T *qkv, const KT *kc, const KT *vc, const float *ks,
                            const float *vs, const int32_t *slot, const int64_t *pos, int64_t m, int64_t nh,
                            int64_t nkv, int64_t max_context, int64_t window, int ns, float2 *ml, float *po,
                            cudaStream_t s) {
    const int64_t g = nh / nkv;
    const dim3 grid((unsigned)m, (unsigned)(nkv * ((g + G - 1) / G)), (unsigned)ns);
    const float scale = 1.4426950408889634f / sqrtf((float)HD); // 1 / sqrt(hd), in log2 units
    lpo_launch(decode_kernel<T, KT, HD, G>, grid, dim3(DEC_THREADS), 0, s, att, po, ml, qkv, kc, vc, ks, vs,
               slot, pos, (int)nh, (int)nkv, max_context, window, ns, scale);
    if (ns > 1)
        lpo_launch(combine_kernel<T, HD>, dim3((unsigned)(m * nh)), dim3(COMB_THREADS), 0, s, att, po, ml,
                   ns);
}

/* G = q heads per block: the smallest of 1, 2, 4, 8 holding the group (registers scale with G) */
template <typename T, typename KT, int HD>
static void launch_decode(T *att, const T *qkv, const KT *kc, const KT *vc, const float *ks, const float *vs,
                          const int32_t *slot, const int64_t *pos, int64_t m, int64_t nh, int64_t nkv,
                          int64_t max_context, int64_t window, int ns, float2 *ml, float *po,
                          cudaStream_t s) {
    const int64_t g = nh / nkv;
#define LPO__DEC_G(G_)                                                                                       \
    launch_decode_g<T, KT, HD, G_>(att, qkv, kc, vc, ks, vs, slot, pos, m, nh, nkv, max_context, window, ns, \
                                   ml, po, s)
    if (g == 1)
        LPO__DEC_G(1);
    else if (g == 2)
        LPO__DEC_G(2);
    else if (g <= 4)
        LPO__DEC_G(4);
    else
        LPO__DEC_G(8);
#undef LPO__DEC_G
}

/* The cache's element: T, or fp8 (ks set) for the head sizes that have an fp8 instance */
template <typename T, int HD>
static void launch_decode_kv(T *att, const T *qkv, const void *kc, const void *vc, const float *ks,
                             const float *vs, const int32_t *slot, const int64_t *pos, int64_t m, int64_t nh,
                             int64_t nkv, int64_t max_context, int64_t window, int ns, float2 *ml, float *po,
                             cudaStream_t s) {
    if constexpr (HD >= 32) {
        if (ks) {
            launch_decode<T, lpo_e4m3, HD>(att, qkv, (const lpo_e4m3 *)kc, (const lpo_e4m3 *)vc, ks, vs, slot,
                                           pos, m, nh, nkv, max_context, window, ns, ml, po, s);
            return;
        }
    }
    launch_decode<T, T, HD>(att, qkv, (const T *)kc, (const T *)vc, NULL, NULL, slot, pos, m, nh, nkv,
                            max_context, window, ns, ml, po, s);
}

extern "C" int lpo_cuda_attention_decode_supported(int64_t hd) {
    return hd == 16 || hd == 32 || hd == 64 || hd == 128 || hd == 256;
}

extern "C" int lpo_cuda_attention_kv8_supported(int64_t hd) {
    return hd == 32 || hd == 64 || hd == 128 || hd == 256;
}

extern "C" lpo_status lpo_cuda_attention_decode(void *att, const void *qkv, const void *kc, const void *vc,
                                                const float *ks, const float *vs, const int32_t *slot,
                                                const int64_t *pos, int64_t m, int64_t nh, int64_t nkv,
                                                int64_t hd, int64_t max_context, int64_t window, int n_splits,
                                                void *workspace, size_t ws_bytes, lpo_dtype dt,
                                                cudaStream_t stream) {
    const char *op = "attention_decode";
    if (!ks != !vs || (ks && !lpo_cuda_attention_kv8_supported(hd)))
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: an fp8 cache needs both scale arrays and head_dim 32, 64, "
                          "128 or 256 (head_dim %lld)",
                          op, (long long)hd);
    if (m < 0 || m > INT32_MAX || nkv <= 0 || nh < nkv || nh % nkv ||
        nkv * ((nh / nkv + GMAX - 1) / GMAX) > 65535 || m * nh > INT32_MAX || n_splits < 1 ||
        n_splits > 65535 || max_context <= 0 || window < 0)
        return lpo_errorf(
            LPO_E_INVALID, "%s: m %lld, heads %lld/%lld, splits %d, max_context %lld, window %lld", op,
            (long long)m, (long long)nh, (long long)nkv, n_splits, (long long)max_context, (long long)window);
    if (!lpo_cuda_attention_decode_supported(hd))
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: head_dim %lld (16, 32, 64, 128 or 256)", op, (long long)hd);
    if (m == 0) return LPO_OK;
    const size_t need = lpo_cuda_attention_decode_workspace(m, nh, hd, n_splits);
    if (need > ws_bytes || (need && !workspace))
        return lpo_errorf(LPO_E_INVALID, "%s: workspace of %zu bytes, %zu needed for %d splits", op, ws_bytes,
                          need, n_splits);
    float2 *ml = (float2 *)workspace;
    float *po =
        need ? (float *)((char *)workspace + ((size_t)m * nh * n_splits * sizeof(float2) + 255) / 256 * 256)
             : NULL;
#define LPO__DEC(HD_)                                                                                        \
    LPO_CU_DISPATCH(dt, op,                                                                                  \
                    (launch_decode_kv<T, HD_>((T *)att, (const T *)qkv, kc, vc, ks, vs, slot, pos, m, nh,    \
                                              nkv, max_context, window, n_splits, ml, po, stream)))
    if (hd == 16) {
        LPO__DEC(16);
    } else if (hd == 32) {
        LPO__DEC(32);
    } else if (hd == 64) {
        LPO__DEC(64);
    } else if (hd == 128) {
        LPO__DEC(128);
    } else {
        LPO__DEC(256);
    }
#undef LPO__DEC
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
