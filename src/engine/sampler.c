/* The sampler: logits -> next token, the CPU reference of docs/sampling.md (the SAMPLE op's specification).
 *
 * Steps (numbered as in the document): 1 repetition penalty, NaN -> -inf; 2 max and greedy; 3 order keys and
 * scaled differences x = (l - max) * (1/T); 4 integer weights q = W(x) (a fixed exp from + - * only); 5 top-k
 * and 6 top-p as a cutoff in the order (logit descending, lower id first on ties); 7 the draw: 64 bits from
 * (seed, stream, step), r = floor(h * Q / 2^64), walk the kept tokens in ascending id order.
 *
 * Speed: no sort. Two passes over the row (NaN + order keys, then weights) vectorize (8-wide with AVX2 where
 * the CPU has it). The cutoff of steps 5/6 is a radix select over the 32-bit order keys: a histogram of
 * counts and weights over 12 bits of the key (those below the highest bit where the remaining keys differ),
 * then the same over the members of the bin holding the cutoff only, until they share one key; members stay
 * in ascending id order, which is the tie order, and tied members share one weight, so the cutoff among them
 * is computed. Every arithmetic step that the document fixes is written one IEEE operation per statement,
 * and this file is compiled with -ffp-contract=off (CMakeLists.txt), so no multiply-add is fused (and
 * -fno-trapping-math, which changes no value but lets the compiler vectorize the selects). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/sampling.h"

/* ---- parameters ---------------------------------------------------------------------------------------- */
lpo_status lpo_sampling_validate(const lpo_sampling *p, const char *prefix) {
    const double t = p->temperature, tp = p->top_p, rp = p->repetition_penalty;
    const struct {
        int bad;
        const char *key, *rule;
        double value;
    } checks[] = {
        {!(t >= 0 && isfinite(t)), "temperature", "finite and >= 0", t},
        {p->top_k < 0, "top_k", ">= 0", (double)p->top_k},
        {!(tp > 0 && tp <= 1), "top_p", "in (0, 1]", tp},
        {!(rp >= FLT_MIN && rp <= FLT_MAX), "repetition_penalty", "finite and > 0 (within float's range)",
         rp},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (checks[i].bad)
            return lpo_errorf(LPO_E_CONFIG, "%s%s = %g is out of range: it must be %s", prefix ? prefix : "",
                              checks[i].key, checks[i].value, checks[i].rule);
    return LPO_OK;
}

int lpo_sampling_is_greedy(const lpo_sampling *p) {
    return !(p->temperature > 0) || 1.0 / p->temperature > (double)FLT_MAX;
}

/* ---- the counter-based generator ----------------------------------------------------------------------- */
#define GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t mix64(uint64_t z) { /* the splitmix64 finalizer (a bijection of 64-bit words) */
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t lpo_sample_hash(uint64_t seed, uint64_t stream, uint64_t step) {
    uint64_t h = mix64(seed + GOLDEN);
    h = mix64(h + stream + GOLDEN);
    return mix64(h + step + GOLDEN);
}

double lpo_sample_uniform(uint64_t seed, uint64_t stream, uint64_t step) {
    return (double)(lpo_sample_hash(seed, stream, step) >> 11) * 0x1p-53;
}

/* floor(a * b / 2^64), exactly, from 32-bit halves (CUDA: __umul64hi) */
static uint64_t mulhi64(uint64_t a, uint64_t b) {
    const uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    const uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    const uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}

/* The two passes over the whole vocabulary run in 8-wide AVX2 where the CPU has it (same IEEE operations,
 * same results; -ffp-contract=off keeps FMA out), else in the baseline ISA. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define LPO_WIDE_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define LPO_WIDE_LOOP
#endif

/* ---- weights and order keys ---------------------------------------------------------------------------- */
#define W_ONE 0x1p40f /* weight of the most likely token */
#define X_MIN (-30.0f)

/* 2^40 exp(x) as a float for x in [X_MIN, 0] (docs/sampling.md step 4), one rounding per operation; the
 * constants are written as the exact float values the document lists (bits in the comments). */
static inline float weight_f(float x) {
    const float t = x * 0x1.715476p+0f;   /* log2(e)                0x3fb8aa3b */
    const float tm = t + 0x1.8p+23f;      /* 1.5 * 2^23: rounds t to an integer, ties to even */
    const float n = tm - 0x1.8p+23f;      /* n in [-44, 0] */
    const float a = n * 0x1.63p-1f;       /* ln2, high part (9 bits, so exact) 0x3f318000 */
    const float b = x - a;                /* */
    const float c = n * -0x1.bd0106p-13f; /* ln2, low part          0xb95e8083 */
    const float r = b - c;                /* |r| <= 0.35 */
    float y = 0x1.a01a02p-13f;            /* Horner, Taylor degree 7: 1/7!  0x39500d01 */
    y = y * r;
    y = y + 0x1.6c16c2p-10f; /* 1/6!  0x3ab60b61 */
    y = y * r;
    y = y + 0x1.111112p-7f; /* 1/5!  0x3c088889 */
    y = y * r;
    y = y + 0x1.555556p-5f; /* 1/4!  0x3d2aaaab */
    y = y * r;
    y = y + 0x1.555556p-3f; /* 1/3!  0x3e2aaaab */
    y = y * r;
    y = y + 0.5f;
    y = y * r;
    y = y + 1.0f;
    y = y * r;
    y = y + 1.0f;
    union {
        uint32_t u;
        float f;
    } s = {.u = (uint32_t)((int32_t)n + 127 + 40) << 23}; /* 2^(n + 40), exact */
    return y * s.f;
}

uint64_t lpo_sample_weight(float x) {
    return x >= X_MIN ? (uint64_t)weight_f(x > 0 ? 0 : x) : 0;
}

/* Order key: larger logit <=> larger key (a bijection on floats once -0 is read as +0: -0 + 0 = +0). */
static inline uint32_t order_key(float l) {
    const float z = l + 0.0f;
    uint32_t u;
    memcpy(&u, &z, sizeof u);
    return u ^ ((0u - (u >> 31)) | 0x80000000u); /* negative: every bit flipped; else the sign bit set */
}

/* ---- scratch ------------------------------------------------------------------------------------------- */
#define DIGIT_BITS 12 /* radix digits of the order key */

struct lpo_sample_scratch {
    int64_t vocab;
    float *w;         /* [vocab] weights as floats (exact integers in [0, 2^40]) */
    uint32_t *key;    /* [vocab] order keys */
    int32_t *cand;    /* [vocab] ids of the candidates: at or above the cutoff's first-level bin, ascending */
    int32_t *members; /* [vocab] ids of the radix select's current bin, ascending */
    uint64_t mass[1 << DIGIT_BITS];
    uint32_t count[1 << DIGIT_BITS];
};

lpo_status lpo_sample_scratch_init(lpo_sample_scratch **out, int64_t vocab) {
    *out = NULL;
    if (vocab < 1 || vocab > LPO_SAMPLE_MAX_VOCAB)
        return lpo_errorf(LPO_E_INVALID, "sampler: vocabulary size %lld is outside [1, %d]", (long long)vocab,
                          LPO_SAMPLE_MAX_VOCAB);
    lpo_sample_scratch *s = calloc(1, sizeof *s);
    if (!s) return lpo_errorf(LPO_E_NOMEM, "sampler: out of memory");
    s->vocab = vocab;
    s->w = malloc((size_t)vocab * sizeof *s->w);
    s->key = malloc((size_t)vocab * sizeof *s->key);
    s->cand = malloc((size_t)vocab * sizeof *s->cand);
    s->members = malloc((size_t)vocab * sizeof *s->members);
    if (!s->w || !s->key || !s->cand || !s->members) {
        lpo_sample_scratch_free(s);
        return lpo_errorf(LPO_E_NOMEM, "sampler: out of memory for %lld-token work buffers",
                          (long long)vocab);
    }
    *out = s;
    return LPO_OK;
}

void lpo_sample_scratch_free(lpo_sample_scratch *s) {
    if (!s) return;
    free(s->w);
    free(s->key);
    free(s->cand);
    free(s->members);
    free(s);
}

/* ---- the cutoff: radix select in the order (key descending, id ascending) --------------------------- */
/* The kept set is every id whose (key, -id) is >= the cutoff's. */
typedef struct {
    uint32_t key;
    int64_t id;
    uint64_t count, mass; /* totals of the kept set (up to and including the cutoff) */
} cutoff;

static inline int kept_by(const cutoff *c, uint32_t key, int64_t id) {
    return key > c->key || (key == c->key && id <= c->id);
}

static inline uint64_t q_of(const lpo_sample_scratch *s, int64_t i) {
    return (uint64_t)(int64_t)s->w[i]; /* via int64: one instruction, no range test (w <= 2^40) */
}

/* A set of ids in ascending order: ids[0, n), or every id in [0, n) when ids is NULL. */
typedef struct {
    const int32_t *ids;
    int64_t n;
} idset;
#define ID_AT(set, j) ((set).ids ? (int64_t)(set).ids[j] : (int64_t)(j))

/* The top-p target: ceil(top_p * total) in double, within [1, total]. */
static uint64_t top_p_target(double top_p, uint64_t total) {
    const double t = ceil((double)total * top_p);
    const uint64_t r = t >= (double)total ? total : (uint64_t)t;
    return r < 1 ? 1 : r;
}

/* Walks the order over the universe and stops at the first token where the running total reaches the
 * target: counts (by_mass 0: target = k) or weights (by_mass 1: target = top_p_target(top_p, the universe's
 * weight)). lo, hi: the smallest and largest key in the universe. Each level histograms the 12 bits below
 * the highest bit where the members' keys still differ, and keeps the members of the bin where the target
 * is reached; when every member has the same key, they are tied and ascending ids is their order.
 * On return *cand holds every universe member at or above the first level's cutoff bin (a superset of the
 * kept set, ascending ids; it may alias the universe). */
static cutoff select_cut(lpo_sample_scratch *s, idset uni, uint32_t lo, uint32_t hi, int by_mass, uint64_t k,
                         double top_p, idset *cand) {
    uint64_t acc_count = 0, acc_mass = 0, target = k;
    idset mem = uni; /* the members of the current bin */
    *cand = uni;
    if (by_mass && lo == hi) { /* no histogram to read the total from */
        uint64_t total = 0;
        for (int64_t j = 0; j < uni.n; j++) total += q_of(s, ID_AT(uni, j)); // universe weights -> sum
        target = top_p_target(top_p, total);
    }
    for (int lvl = 0; lo != hi; lvl++) {
        const int top = 31 - __builtin_clz(lo ^ hi), sh = top >= DIGIT_BITS - 1 ? top - (DIGIT_BITS - 1) : 0;
        const uint32_t mask = (1u << DIGIT_BITS) - 1;
        memset(s->count, 0, sizeof s->count);
        memset(s->mass, 0, sizeof s->mass);
        for (int64_t j = 0; j < mem.n; j++) { // histogram of the digit over the members: counts and weights
            const int64_t i = ID_AT(mem, j);
            const uint32_t d = (s->key[i] >> sh) & mask;
            s->count[d]++;
            s->mass[d] += q_of(s, i);
        }
        if (lvl == 0 && by_mass) {
            uint64_t total = 0;
            for (uint32_t d = 0; d <= mask; d++) total += s->mass[d];
            target = top_p_target(top_p, total);
        }
        /* from the top down: the bin where the running total reaches the target */
        int b = (int)((hi >> sh) & mask);
        for (; b > 0; b--) {
            if ((by_mass ? acc_mass + s->mass[b] : acc_count + s->count[b]) >= target) break;
            acc_count += s->count[b];
            acc_mass += s->mass[b];
        }
        /* On the first level the candidates (digit >= b) unless that is every member: gathered first when
         * they are few (the members are then read from them), else along with the members. */
        const uint64_t n_cand = acc_count + s->count[b];
        int need_cand = lvl == 0 && (uint64_t)mem.n != n_cand;
        if (need_cand && n_cand * 4 < (uint64_t)mem.n) {
            int64_t nc = 0;
            for (int64_t j = 0; j < mem.n; j++) { // branch-free, in place when mem is s->cand
                const int64_t i = ID_AT(mem, j);
                s->cand[nc] = (int32_t)i;
                nc += ((s->key[i] >> sh) & mask) >= (uint32_t)b;
            }
            *cand = mem = (idset){s->cand, nc};
            need_cand = 0;
        }
        /* bin b's members (ascending ids) and their key range */
        int64_t n = 0, nc = 0;
        lo = UINT32_MAX;
        hi = 0;
        for (int64_t j = 0; j < mem.n; j++) { // branch-free; in place when mem is s->cand or s->members
            const int64_t i = ID_AT(mem, j);
            const uint32_t key = s->key[i], d = (key >> sh) & mask;
            if (need_cand) {
                s->cand[nc] = (int32_t)i;
                nc += d >= (uint32_t)b;
            }
            const int in = d == (uint32_t)b;
            s->members[n] = (int32_t)i;
            n += in;
            lo = in && key < lo ? key : lo;
            hi = in && key > hi ? key : hi;
        }
        if (need_cand) *cand = (idset){s->cand, nc};
        mem = (idset){s->members, n};
    }
    /* The members now share one key: they are tied, so ascending ids is their order, and they share one
     * weight, so the cutoff is the need-th of them (the running total was below the target before them). */
    cutoff c = {0, 0, acc_count, acc_mass};
    const uint64_t q = q_of(s, ID_AT(mem, 0)); /* > 0 when by mass: the bin holds weight */
    const uint64_t need = by_mass ? (target - acc_mass + q - 1) / q : target - acc_count;
    c.id = ID_AT(mem, (int64_t)need - 1);
    c.key = s->key[c.id];
    c.count += need;
    c.mass += need * q;
    return c;
}

/* ---- one row ------------------------------------------------------------------------------------------- */
/* Step 1's NaN -> -inf and step 3's order keys (stored, with their minimum in *lo, when key is not NULL);
 * returns the largest key. Integer min/max: vectorizable without assumptions about NaN or signed zeros. */
LPO_WIDE_LOOP static uint32_t sanitize_keys(float *logits, uint32_t *restrict key, int64_t V, uint32_t *lo) {
    uint32_t mk = 0, mn = UINT32_MAX;
    if (key) {
        for (int64_t i = 0; i < V; i++) { // logits [V] -> logits [V], key [V]
            const float v = logits[i];
            const float c = v == v ? v : -INFINITY;
            logits[i] = c;
            const uint32_t k = order_key(c);
            key[i] = k;
            mk = k > mk ? k : mk;
            mn = k < mn ? k : mn;
        }
        *lo = mn;
    } else {
        for (int64_t i = 0; i < V; i++) { // logits [V] -> logits [V]
            const float v = logits[i];
            const float c = v == v ? v : -INFINITY;
            logits[i] = c;
            const uint32_t k = order_key(c);
            mk = k > mk ? k : mk;
        }
    }
    return mk;
}

static float key_value(uint32_t k) { /* the inverse of order_key */
    const uint32_t u = (k & 0x80000000u) ? k ^ 0x80000000u : ~k;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Step 4 for every token (branch-free: vectorizable). */
LPO_WIDE_LOOP static void weights(float *restrict w, const float *logits, int64_t V, float m, float invt) {
    for (int64_t i = 0; i < V; i++) { // logits [V] -> w [V]
        const float l = logits[i];
        const float d = l - m;
        const float dx = d * invt;
        const float x = l == m ? 0.0f : dx;
        const int in = x >= X_MIN;
        const float wx = weight_f(in ? x : X_MIN); /* computed for every x */
        w[i] = in ? wx : 0.0f;
    }
}

int32_t lpo_sample_row(const lpo_sampling *p, uint64_t stream, uint64_t step, const uint32_t *seen_bits,
                       float *logits, int64_t V, lpo_sample_scratch *s) {
    if (V < 1 || V > LPO_SAMPLE_MAX_VOCAB) return -1;
    /* 1. repetition penalty over the seen tokens, then NaN -> -inf */
    if (seen_bits && p->repetition_penalty != 1.0) {
        const float rp = (float)p->repetition_penalty;
        for (int64_t w = 0; w < (V + 31) / 32; w++) { // bitmap words (32 ids each)
            for (uint32_t bits = seen_bits[w]; bits; bits &= bits - 1) {
                const int64_t i = w * 32 + __builtin_ctz(bits);
                if (i < V) logits[i] = logits[i] > 0 ? logits[i] / rp : logits[i] * rp;
            }
        }
    }
    /* 2. greedy: the lowest id holding the maximum (also top-k 1: the first token of the order) */
    const int64_t k = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    const int greedy = lpo_sampling_is_greedy(p) || k == 1;
    if (!greedy && (!s || s->vocab < V)) return -1;
    uint32_t lo = 0;
    const uint32_t hi = sanitize_keys(logits, greedy ? NULL : s->key, V, &lo); /* and 3: order keys */
    const float m = key_value(hi);
    if (greedy) {
        int64_t i = 0;
        while (logits[i] != m) i++;
        return (int32_t)i;
    }
    /* 4. weights */
    weights(s->w, logits, V, m, (float)(1.0 / p->temperature));
    /* 5. + 6. the cutoff and the candidates (a superset of the kept tokens, ascending ids) */
    const int use_k = k < V, use_p = p->top_p < 1;
    idset cand = {NULL, V};
    cutoff cut = {0};
    if (use_k) {
        cut = select_cut(s, cand, lo, hi, 0, (uint64_t)k, 0, &cand);
        int64_t n = 0; /* top-p, and the draw, read the k kept tokens only */
        lo = UINT32_MAX;
        for (int64_t j = 0; j < cand.n; j++) { // candidates -> the kept ones, ascending ids, and their range
            const int64_t i = ID_AT(cand, j);
            const uint32_t key = s->key[i];
            const int in = kept_by(&cut, key, i);
            s->cand[n] = (int32_t)i;
            n += in;
            lo = in && key < lo ? key : lo;
        }
        cand = (idset){s->cand, n};
    }
    if (use_p) cut = select_cut(s, cand, lo, hi, 1, 0, p->top_p, &cand);
    uint64_t total = cut.mass;
    if (!use_k && !use_p)
        for (int64_t i = 0; i < V; i++) total += q_of(s, i); // w [V] -> their sum
    /* 7. the draw: r in [0, total), a walk over the kept tokens in ascending id order */
    const uint64_t r = mulhi64(lpo_sample_hash(p->seed, stream, step), total);
    uint64_t acc = 0;
    for (int64_t j = 0; j < cand.n; j++) { // candidates (ascending ids)
        const int64_t i = ID_AT(cand, j);
        if ((use_k || use_p) && !kept_by(&cut, s->key[i], i)) continue;
        acc += q_of(s, i);
        if (r < acc) return (int32_t)i;
    }
    return -1; /* not reached: acc ends at total > r */
}

/* ---- per-sequence state -------------------------------------------------------------------------------- */
lpo_status lpo_sampler_init(lpo_sampler *s, const lpo_sampling *p, int64_t vocab, uint64_t stream) {
    memset(s, 0, sizeof *s);
    if (vocab < 1 || vocab > LPO_SAMPLE_MAX_VOCAB)
        return lpo_errorf(LPO_E_INVALID, "sampler: vocabulary size %lld is outside [1, %d]", (long long)vocab,
                          LPO_SAMPLE_MAX_VOCAB);
    lpo_status st = lpo_sampling_validate(p, "sampler: ");
    if (st != LPO_OK) return st;
    s->p = *p;
    s->stream = stream;
    s->vocab = vocab;
    s->seen = calloc((size_t)(vocab + 31) / 32, sizeof *s->seen);
    if (!s->seen) return lpo_errorf(LPO_E_NOMEM, "sampler: out of memory");
    return LPO_OK;
}

void lpo_sampler_free(lpo_sampler *s) {
    free(s->seen);
    memset(s, 0, sizeof *s);
}

void lpo_sampler_accept(lpo_sampler *s, int32_t id) {
    if (id >= 0 && id < s->vocab) s->seen[id / 32] |= 1u << (id % 32);
}

int32_t lpo_sampler_sample(lpo_sampler *s, float *logits, lpo_sample_scratch *scratch) {
    const int32_t id = lpo_sample_row(&s->p, s->stream, s->step, s->seen, logits, s->vocab, scratch);
    s->step++;
    return id;
}
