/* The sampler: logits -> next token, the CPU reference of docs/sampling.md (the SAMPLE op's specification).
 *
 * Steps (numbered as in the document): 1 repetition penalty, NaN -> -inf; 2 max and greedy; 3 order keys and
 * scaled differences x = (l - max) * (1/T); 4 integer weights q = W(x) (a fixed exp from + - * only); 5 top-k
 * and 6 top-p as a cutoff in the order (logit descending, lower id first on ties); 7 the draw: 64 bits from
 * (seed, stream, step), r = floor(h * Q / 2^64), walk the kept tokens in ascending id order.
 *
 * Speed: no sort. The cutoff of step 5/6 is found by a 3-level radix select over the 32-bit order keys
 * (histograms of counts and weights per 11/11/10-bit digit; only the members of the cutoff bin go on to the
 * next level; members stay in ascending id order, which is the tie order). Every arithmetic step that the
 * document fixes is written one IEEE operation per statement, and this file is compiled with
 * -ffp-contract=off (CMakeLists.txt), so no multiply-add is fused. */
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

/* ---- weights and order keys ---------------------------------------------------------------------------- */
#define W_ONE 0x1p40f /* weight of the most likely token */
#define X_MIN (-30.0f)

/* 2^40 exp(x) as a float for x in [X_MIN, 0] (docs/sampling.md step 4), one rounding per operation. */
static inline float weight_f(float x) {
    const float t = x * 1.44269504f;     /* log2(e) */
    const float tm = t + 12582912.0f;    /* 1.5 * 2^23: rounds t to an integer (ties to even) */
    const float n = tm - 12582912.0f;    /* n in [-44, 0] */
    const float a = n * 0.693359375f;    /* ln2 high part (9 bits: exact) */
    const float b = x - a;               /* */
    const float c = n * -2.12194440e-4f; /* ln2 low part */
    const float r = b - c;               /* |r| <= 0.35 */
    float y = 1.98412698e-4f;            /* Horner, degree 7 Taylor: 1/7!, 1/6!, ..., 1/1!, 1 */
    y = y * r;
    y = y + 1.38888889e-3f;
    y = y * r;
    y = y + 8.33333333e-3f;
    y = y * r;
    y = y + 4.16666667e-2f;
    y = y * r;
    y = y + 1.66666667e-1f;
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

/* Order key: larger logit <=> larger key (a bijection on floats once -0 is read as +0). */
static inline uint32_t order_key(float l) {
    union {
        float f;
        uint32_t u;
    } v = {.f = l == 0 ? 0.0f : l};
    return (v.u & 0x80000000u) ? ~v.u : (v.u | 0x80000000u);
}

/* ---- scratch ------------------------------------------------------------------------------------------- */
#define DIGIT_BINS 2048 /* 11-bit digits: 21..31, 10..20, then 0..9 (1024 bins) */

struct lpo_sample_scratch {
    int64_t vocab;
    float *w;         /* [vocab] weights as floats (exact integers in [0, 2^40]) */
    uint32_t *key;    /* [vocab] order keys */
    int32_t *members; /* [vocab] ids of the radix select's current bin, ascending */
    uint64_t mass[DIGIT_BINS];
    uint32_t count[DIGIT_BINS];
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
    s->members = malloc((size_t)vocab * sizeof *s->members);
    if (!s->w || !s->key || !s->members) {
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
    return (uint64_t)s->w[i];
}

/* Walks the order over the tokens kept by `within` (NULL = all V) and stops at the first token where the
 * running total reaches the target: counts (by_mass 0: target = k) or weights (by_mass 1: target =
 * top_p_target of the total when top_p > 0). */
static cutoff select_cut(lpo_sample_scratch *s, int64_t V, const cutoff *within, int by_mass, uint64_t k,
                         double top_p) {
    static const int shift[3] = {21, 10, 0}, bins[3] = {2048, 2048, 1024};
    uint64_t acc_count = 0, acc_mass = 0, target = k;
    int64_t n = -1; /* members: -1 = every id in [0, V) kept by `within`, else s->members[0, n) */
    for (int lvl = 0; lvl < 3; lvl++) {
        const int sh = shift[lvl];
        const uint32_t mask = (uint32_t)bins[lvl] - 1;
        memset(s->count, 0, sizeof s->count);
        memset(s->mass, 0, sizeof s->mass);
        if (n < 0) {
            for (int64_t i = 0; i < V; i++) { // histogram of digit(key) over all V: counts and weights
                const uint32_t key = s->key[i];
                if (within && !kept_by(within, key, i)) continue;
                const uint32_t d = (key >> sh) & mask;
                s->count[d]++;
                s->mass[d] += q_of(s, i);
            }
        } else {
            for (int64_t j = 0; j < n; j++) { // the same over the current members
                const int32_t i = s->members[j];
                const uint32_t d = (s->key[i] >> sh) & mask;
                s->count[d]++;
                s->mass[d] += q_of(s, i);
            }
        }
        if (lvl == 0 && by_mass) { /* the universe's total weight -> the top-p target */
            uint64_t total = 0;
            for (int b = 0; b < bins[0]; b++) total += s->mass[b];
            const double t = ceil((double)total * top_p);
            target = t >= (double)total ? total : (uint64_t)t;
            if (target < 1) target = 1;
        }
        int b = bins[lvl] - 1; /* highest bin whose running total reaches the target */
        for (;; b--) {
            const uint64_t tot = by_mass ? s->mass[b] : s->count[b];
            if ((by_mass ? acc_mass : acc_count) + tot >= target || b == 0) break;
            acc_count += s->count[b];
            acc_mass += s->mass[b];
        }
        const uint64_t members_before = n >= 0 ? (uint64_t)n : within ? within->count : (uint64_t)V;
        if (s->count[b] == members_before) continue; /* every member is in bin b: the list stands */
        int64_t m = 0;
        if (n < 0) {
            for (int64_t i = 0; i < V; i++) { // gather bin b's members, ascending ids
                const uint32_t key = s->key[i];
                if (((key >> sh) & mask) == (uint32_t)b && (!within || kept_by(within, key, i)))
                    s->members[m++] = (int32_t)i;
            }
        } else {
            for (int64_t j = 0; j < n; j++) { // in place: writes never pass reads
                const int32_t i = s->members[j];
                if (((s->key[i] >> sh) & mask) == (uint32_t)b) s->members[m++] = i;
            }
        }
        n = m;
    }
    /* the members now share one key: they are tied, so ascending ids is their order */
    cutoff c = {0, 0, acc_count, acc_mass};
    for (int64_t j = 0; j < (n < 0 ? V : n); j++) {
        const int64_t i = n < 0 ? j : s->members[j];
        if (n < 0 && within && !kept_by(within, s->key[i], i)) continue;
        c.key = s->key[i];
        c.id = i;
        c.count++;
        c.mass += q_of(s, i);
        if ((by_mass ? c.mass : c.count) >= target) break;
    }
    return c;
}

/* ---- one row ------------------------------------------------------------------------------------------- */
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
    for (int64_t i = 0; i < V; i++) // logits [V]
        if (logits[i] != logits[i]) logits[i] = -INFINITY;
    /* 2. the maximum; greedy = its lowest id */
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    const int64_t k = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    if (lpo_sampling_is_greedy(p) || k == 1) return (int32_t)best;
    if (!s || s->vocab < V) return -1;
    /* 3. + 4. order keys and weights */
    const float m = logits[best];
    const float invt = (float)(1.0 / p->temperature);
    for (int64_t i = 0; i < V; i++) { // logits [V] -> key [V], w [V]
        const float l = logits[i];
        const float d = l - m;
        const float x = l == m ? 0.0f : d * invt;
        const float w = weight_f(x >= X_MIN ? x : X_MIN); /* computed for every x: no branch */
        s->w[i] = x >= X_MIN ? w : 0.0f;
        s->key[i] = order_key(l);
    }
    /* 5. + 6. the cutoff */
    const int use_k = k < V, use_p = p->top_p < 1;
    cutoff cut_k = {0}, cut = {0};
    if (use_k) cut = cut_k = select_cut(s, V, NULL, 0, (uint64_t)k, 0);
    if (use_p) cut = select_cut(s, V, use_k ? &cut_k : NULL, 1, 0, p->top_p);
    uint64_t total = cut.mass;
    if (!use_k && !use_p)
        for (int64_t i = 0; i < V; i++) total += q_of(s, i); // w [V] -> sum of weights
    /* 7. the draw: r in [0, total), walk the kept tokens in ascending id order */
    const uint64_t r = mulhi64(lpo_sample_hash(p->seed, stream, step), total);
    uint64_t acc = 0;
    const int any_cut = use_k || use_p;
    for (int64_t i = 0; i < V; i++) { // w [V], key [V]
        if (any_cut && !kept_by(&cut, s->key[i], i)) continue;
        acc += q_of(s, i);
        if (r < acc) return (int32_t)i;
    }
    return (int32_t)best; /* not reached: acc ends at total > r */
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
