/* PyTorch operators from a trace: the NVTX ranges PyTorch pushes per aten op when its NVTX emission is on
 * with shapes (torch.autograd.profiler.emit_nvtx(record_shapes=True); `lpo trace --torch-ops` turns it on
 * through src/probe/torch/sitecustomize.py) carry "aten::mm, seq = 3, op_id = 57, sizes = [[8, 4096],
 * [4096, 4096]], input_op_ids = [(55,0)]" (seq, op_id and input_op_ids optional). Every GPU operation
 * belongs to the innermost operator range open at its launch; its phase is the outermost range that is
 * neither an operator, a module nor the capture gate (the program's own "prefill", "decode"); module ranges
 * ("module:<path>|<Class>", pushed by the shim) group operators per nn.Module. From the recorded shapes:
 * FLOPs and bytes of matmuls (2mnk), attention, convolutions, norms, softmax, elementwise and reductions;
 * MFU, MBU and the bound class against the peaks the caller passes. operators.{csv,md}, modules.{csv,md}
 * and a summary section; docs/trace.md (PyTorch operators) defines every column. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe/trace_internal.h"

#define NOMEM() lpo_errorf(LPO_E_NOMEM, "trace: out of memory for the operator table")

/* ---- range names ---- */
enum { RK_UNSEEN = 0, RK_OP, RK_MODULE, RK_OTHER };

/* Length of the operator name at the start of s ("ns::name" up to ',' or the end), 0 when s is not one. */
static size_t op_name_len(const char *s) {
    size_t i = 0;
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_')) return 0;
    int colons = 0;
    for (; s[i] && s[i] != ','; i++) {
        const char c = s[i];
        if (c == ':' && s[i + 1] == ':') {
            colons = 1;
            i++;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.'))
            return 0;
    }
    return colons ? i : 0;
}

static int range_kind(const char *s) {
    if (!strncmp(s, "module:", 7)) return RK_MODULE;
    return op_name_len(s) ? RK_OP : RK_OTHER;
}

/* ---- shapes: ", sizes = [[8, 4096], [], [4096]]" ----------------------------------------------------- */
enum { SH_T = 12, SH_D = 8 };
typedef struct {
    int n;          /* entries parsed (at most SH_T); [] (not a tensor, or a 0-d one) has rank 0 */
    int rank[SH_T]; /* -1: more dimensions than SH_D (treated as unknown) */
    int64_t d[SH_T][SH_D];
    double rest_numel; /* elements of the tensors past SH_T */
    int ok;            /* sizes were present and well formed */
} shapes;

static const char *skip_sp(const char *p) {
    while (*p == ' ') p++;
    return p;
}

static void parse_shapes(const char *s, shapes *sh) {
    memset(sh, 0, sizeof *sh);
    const char *p = strstr(s, ", sizes = [");
    if (!p) return;
    p += 11;
    for (int k = 0;; k++) { /* each entry */
        p = skip_sp(p);
        if (*p == ']') break;
        if (*p != '[') return;
        p++;
        int r = 0;
        double numel = 1;
        int64_t dims[SH_D];
        for (;;) { /* each dimension */
            p = skip_sp(p);
            if (*p == ']') break;
            char *end = NULL;
            long long v = strtoll(p, &end, 10);
            if (end == p || v < 0) return;
            if (r < SH_D) dims[r] = v;
            r++;
            numel *= (double)v;
            p = skip_sp(end);
            if (*p == ',') p++;
        }
        p++; /* ']' */
        if (k < SH_T) {
            sh->rank[k] = r <= SH_D ? r : -1;
            for (int i = 0; i < r && i < SH_D; i++) sh->d[k][i] = dims[i];
            sh->n = k + 1;
        } else if (r) {
            sh->rest_numel += numel;
        }
        p = skip_sp(p);
        if (*p == ',') p++;
    }
    sh->ok = 1;
}

static double numel(const shapes *sh, int k) {
    if (k >= sh->n || sh->rank[k] <= 0) return 0;
    double n = 1;
    for (int i = 0; i < sh->rank[k]; i++) n *= (double)sh->d[k][i];
    return n;
}

static double numel_all(const shapes *sh) {
    double n = sh->rest_numel;
    for (int k = 0; k < sh->n; k++) n += numel(sh, k);
    return n;
}

/* ---- operator families and their costs ---- */
enum { FAM_NONE, FAM_MATMUL, FAM_ATTN, FAM_CONV, FAM_NORM, FAM_SOFTMAX, FAM_ELEM, FAM_REDUCE, FAM_COPY };
static const char *const fam_names[] = {"other",   "matmul",      "attention", "conv", "norm",
                                        "softmax", "elementwise", "reduction", "copy"};

static int in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list)) return 1;
    return 0;
}

static const char *const l_matmul[] = {"mm",         "addmm", "bmm",   "baddbmm", "matmul", "linear",
                                       "_scaled_mm", "mv",    "addmv", "dot",     NULL};
static const char *const l_attn_bhle[] = {"scaled_dot_product_attention",
                                          "_scaled_dot_product_flash_attention",
                                          "_scaled_dot_product_efficient_attention",
                                          "_scaled_dot_product_cudnn_attention",
                                          "_scaled_dot_product_fused_attention_overrideable",
                                          NULL};
static const char *const l_attn_blhe[] = {"_flash_attention_forward", "_efficient_attention_forward", NULL};
static const char *const l_conv[] = {"convolution",
                                     "_convolution",
                                     "conv1d",
                                     "conv2d",
                                     "conv3d",
                                     "cudnn_convolution",
                                     "cudnn_convolution_relu",
                                     "cudnn_convolution_add_relu",
                                     "_conv_depthwise2d",
                                     NULL};
static const char *const l_norm[] = {"layer_norm",
                                     "native_layer_norm",
                                     "group_norm",
                                     "native_group_norm",
                                     "batch_norm",
                                     "native_batch_norm",
                                     "_native_batch_norm_legit",
                                     "_native_batch_norm_legit_no_training",
                                     "cudnn_batch_norm",
                                     "_batch_norm_impl_index",
                                     "instance_norm",
                                     "rms_norm",
                                     "_fused_rms_norm",
                                     NULL};
static const char *const l_softmax[] = {"softmax",      "_softmax",      "log_softmax",
                                        "_log_softmax", "_safe_softmax", NULL};
static const char *const l_elem[] = {"add",        "add_",        "sub",          "sub_",        "mul",
                                     "mul_",       "div",         "div_",         "neg",         "exp",
                                     "exp_",       "log",         "sqrt",         "rsqrt",       "pow",
                                     "tanh",       "tanh_",       "sigmoid",      "sigmoid_",    "silu",
                                     "silu_",      "gelu",        "gelu_",        "relu",        "relu_",
                                     "clamp",      "clamp_",      "where",        "maximum",     "minimum",
                                     "reciprocal", "abs",         "cos",          "sin",         "erf",
                                     "hardtanh",   "hardtanh_",   "leaky_relu",   "addcmul",     "addcdiv",
                                     "lerp",       "masked_fill", "masked_fill_", "threshold",   "rsub",
                                     "square",     "mish",        "hardswish",    "hardsigmoid", NULL};
static const char *const l_reduce[] = {"sum",    "mean",   "amax", "amin", "max",  "min",
                                       "argmax", "argmin", "var",  "std",  "norm", "linalg_vector_norm",
                                       "cumsum", "topk",   "sort", NULL};
static const char *const l_copy[] = {"copy_", "_to_copy",     "clone",     "contiguous", "cat",    "fill_",
                                     "zero_", "index_select", "embedding", "index",      "gather", NULL};

static int family(const char *base) {
    if (in_list(base, l_matmul)) return FAM_MATMUL;
    if (in_list(base, l_attn_bhle) || in_list(base, l_attn_blhe)) return FAM_ATTN;
    if (in_list(base, l_conv)) return FAM_CONV;
    if (in_list(base, l_norm)) return FAM_NORM;
    if (in_list(base, l_softmax)) return FAM_SOFTMAX;
    if (in_list(base, l_elem)) return FAM_ELEM;
    if (in_list(base, l_reduce)) return FAM_REDUCE;
    if (in_list(base, l_copy)) return FAM_COPY;
    return FAM_NONE;
}

typedef struct {
    double flops, bytes; /* < 0: unknown */
} cost;

/* (M, K, N, batch) of a matmul-family op from its shapes; 0 when they do not fit. */
static int matmul_dims(const char *base, const shapes *sh, double *m, double *k, double *n, double *b) {
    int a = 0, w = 1;
    if (!strcmp(base, "addmm") || !strcmp(base, "baddbmm") || !strcmp(base, "addmv")) a = 1, w = 2;
    if (sh->n <= w) return 0;
    const int ra = sh->rank[a], rw = sh->rank[w];
    if (ra <= 0 || rw <= 0) return 0;
    const int64_t *x = sh->d[a], *y = sh->d[w];
    *b = 1;
    if (!strcmp(base, "linear")) { /* x [..., K], w [N, K] */
        if (rw != 2 || x[ra - 1] != y[1]) return 0;
        *k = (double)y[1];
        *n = (double)y[0];
        *m = 1;
        for (int i = 0; i < ra - 1; i++) *m *= (double)x[i];
        return 1;
    }
    if (!strcmp(base, "dot")) {
        *m = *n = 1;
        *k = (double)x[0];
        return ra == 1;
    }
    /* matmul's rules: 1-d operands are a row / a column; leading dimensions broadcast */
    *m = ra >= 2 ? (double)x[ra - 2] : 1;
    *k = (double)x[ra - 1];
    const double k2 = rw >= 2 ? (double)y[rw - 2] : (double)y[0];
    *n = rw >= 2 ? (double)y[rw - 1] : 1;
    if (*k != k2) return 0;
    for (int i = 0; i < (ra > rw ? ra : rw) - 2; i++) { /* broadcast batch dimensions, from the right */
        const int ia = ra - 3 - i, iw = rw - 3 - i;
        const double da = ia >= 0 ? (double)x[ia] : 1, dw = iw >= 0 ? (double)y[iw] : 1;
        *b *= da > dw ? da : dw;
    }
    return 1;
}

/* Cost of one operator instance: shapes sh, element size es; out: the output shape of a convolution (the
 * first input of the operator that consumed it), NULL when unknown. */
static cost op_cost(const char *base, int fam, const shapes *sh, double es, const int64_t *conv_out,
                    int out_rank) {
    cost c = {-1, -1};
    if (!sh->ok) return c;
    switch (fam) {
    case FAM_MATMUL: {
        double m, k, n, b;
        if (!matmul_dims(base, sh, &m, &k, &n, &b)) break;
        c.flops = 2 * b * m * k * n;
        c.bytes = (numel_all(sh) + b * m * n) * es; /* operands (and bias) read, the product written */
        break;
    }
    case FAM_ATTN: {
        if (sh->n < 3 || sh->rank[0] != 4 || sh->rank[1] != 4 || sh->rank[2] != 4) break;
        const int blhe = in_list(base, l_attn_blhe);
        const int64_t *q = sh->d[0], *k = sh->d[1], *v = sh->d[2];
        const double B = (double)q[0], H = (double)(blhe ? q[2] : q[1]), L = (double)(blhe ? q[1] : q[2]);
        const double S = (double)(blhe ? k[1] : k[2]), E = (double)q[3], Ev = (double)v[3];
        c.flops = 2 * B * H * L * S * (E + Ev); /* q k^T and p v over every (query, key) pair */
        c.bytes = (numel(sh, 0) + numel(sh, 1) + numel(sh, 2) + B * H * L * Ev) * es;
        break;
    }
    case FAM_CONV: {
        if (sh->n < 2 || !conv_out) break;
        const int r = sh->rank[0];
        if (r < 3 || sh->rank[1] != r || out_rank != r) break;
        const int64_t *x = sh->d[0], *w = sh->d[1];
        double ksz = 1, osp = 1;
        for (int i = 2; i < r; i++) {
            ksz *= (double)w[i];
            osp *= (double)conv_out[i];
        }
        const double N = (double)x[0], O = (double)w[0], Cg = (double)w[1];
        c.flops = 2 * N * O * osp * Cg * ksz;
        c.bytes = (numel(sh, 0) + numel(sh, 1) + N * O * osp) * es;
        break;
    }
    case FAM_NORM: {
        const double x = numel(sh, 0);
        if (x <= 0) break;
        c.flops = (strstr(base, "rms") ? 4 : 5) * x;
        c.bytes = (2 * x + numel_all(sh) - x) * es; /* x read and written, the parameters read */
        break;
    }
    case FAM_SOFTMAX: {
        const double x = numel(sh, 0);
        if (x <= 0) break;
        c.flops = 5 * x;
        c.bytes = 2 * x * es;
        break;
    }
    case FAM_ELEM: {
        double out = 0;
        for (int k = 0; k < sh->n; k++)
            if (numel(sh, k) > out) out = numel(sh, k);
        if (out <= 0) break;
        c.flops = out;
        c.bytes = (numel_all(sh) + out) * es;
        break;
    }
    case FAM_REDUCE: {
        const double x = numel(sh, 0);
        if (x <= 0) break;
        c.flops = x;
        c.bytes = x * es;
        break;
    }
    case FAM_COPY: {
        const double all = numel_all(sh);
        if (all <= 0) break;
        c.flops = 0;
        if (!strcmp(base, "copy_"))
            c.bytes = all * es; /* dst written, src read */
        else if (!strcmp(base, "fill_") || !strcmp(base, "zero_"))
            c.bytes = numel(sh, 0) * es;
        else if (!strcmp(base, "cat") || !strcmp(base, "_to_copy") || !strcmp(base, "clone") ||
                 !strcmp(base, "contiguous"))
            c.bytes = 2 * all * es;
        else
            c.flops = -1; /* gathers: what they read depends on the indices */
        break;
    }
    default: break;
    }
    if (!isfinite(c.flops) || !isfinite(c.bytes)) c.flops = c.bytes = -1; /* absurd sizes: no cost */
    return c;
}

/* Element size and name of the data type a kernel's name mentions; 0 when none. */
static double kernel_dtype(const char *k, const char **name) {
    static const struct {
        const char *pat;
        double es;
        const char *name;
    } t[] = {{"e4m3", 1, "fp8"},      {"e5m2", 1, "fp8"},    {"float8", 1, "fp8"},  {"fp8", 1, "fp8"},
             {"bfloat16", 2, "bf16"}, {"bf16", 2, "bf16"},   {"half", 2, "fp16"},   {"fp16", 2, "fp16"},
             {"f16", 2, "fp16"},      {"double", 8, "fp64"}, {"float", 4, "fp32"},  {"sgemm", 4, "fp32"},
             {"tf32", 4, "fp32"},     {"s1688", 4, "fp32"},  {"scudnn", 4, "fp32"}, {"hcudnn", 2, "fp16"},
             {"f32", 4, "fp32"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) { /* first match, most specific first */
        const size_t m = strlen(t[i].pat);
        for (const char *s = k; *s; s++) {
            size_t j = 0;
            while (j < m && s[j] && (s[j] | 0x20) == t[i].pat[j]) j++;
            if (j == m) {
                *name = t[i].name;
                return t[i].es;
            }
        }
    }
    return 0;
}

/* ---- the tables ---- */
typedef struct {
    uint32_t phase, name; /* string ids: the phase ("" none), the operator ("aten::mm") or module range */
    int fam;
    size_t calls, ops;
    uint64_t gpu_ns, busy_ns;
    double flops, bytes; /* sums over the calls whose cost is known */
    size_t costed;       /* calls with a known cost */
    const char *dtype;   /* first data type seen in its kernels' names */
    int dtype_assumed;   /* no kernel named one: 2-byte elements assumed */
    uint32_t shapes_of;  /* range name of its first call (the shapes shown) */
    uint16_t depth;      /* modules: nesting depth */
    size_t first;        /* order of first appearance (phases keep their order) */
} orow;

typedef struct {
    orow *v;
    size_t n, cap;
    tr_map ix;
} orows;

static orow *orow_get(orows *R, uint32_t phase, uint32_t name) {
    const uint64_t key = (uint64_t)phase << 32 | name;
    uint64_t *v = tr_map_get(&R->ix, key);
    if (v) return &R->v[*v];
    if (tr_vec_grow((void **)&R->v, &R->cap, R->n, sizeof *R->v) || tr_map_put(&R->ix, key, R->n))
        return NULL;
    R->v[R->n] = (orow){.phase = phase, .name = name, .first = R->n};
    return &R->v[R->n++];
}

typedef struct {
    orows ops, mods;
    uint64_t phase_ns[64]; /* GPU time per phase index (first 64 phases) */
    uint32_t phase_ids[64];
    size_t n_phases;
    uint64_t total_ns;
    size_t n_op_ranges;
} torch_result;

static size_t phase_index(torch_result *r, uint32_t phase) {
    for (size_t i = 0; i < r->n_phases; i++)
        if (r->phase_ids[i] == phase) return i;
    if (r->n_phases == 64) return 64; /* phases past 64 are not summed (rows still are) */
    r->phase_ids[r->n_phases++] = phase;
    return r->n_phases - 1;
}

/* Output shape of the convolution instance ci: the first input of the next operator on its thread (started
 * after it ended) whose first input is [N, O, ...] (the consumer of the output: a bias add, a norm, an
 * activation). 0 when none is found within 400 ranges. */
static int conv_output(const lpo_trace *t, const uint8_t *rk, size_t ci, const shapes *sh, int64_t *out) {
    const tr_range *c = &t->ranges.v[ci];
    if (sh->n < 2 || sh->rank[0] < 3) return 0;
    for (size_t j = ci + 1; j < t->ranges.n && j < ci + 400; j++) {
        const tr_range *r = &t->ranges.v[j];
        if (r->proc != c->proc || r->tid != c->tid || r->start < c->end || rk[j] != RK_OP) continue;
        shapes s2;
        parse_shapes(tr_str_get(&t->str, r->name), &s2);
        if (!s2.ok || !s2.n || s2.rank[0] != sh->rank[0]) continue;
        if (s2.d[0][0] != sh->d[0][0] || s2.d[0][1] != sh->d[1][0]) continue;
        memcpy(out, s2.d[0], sizeof s2.d[0]);
        return s2.rank[0];
    }
    return 0;
}

/* The operator name (string id) of range name s: interned copy of its first op_name_len bytes. */
static uint32_t op_id_of(lpo_trace *t, uint32_t name) {
    const char *s = tr_str_get(&t->str, name);
    return tr_str_intern(&t->str, s, op_name_len(s), 1);
}

static void torch_result_free(torch_result *r) {
    free(r->ops.v);
    free(r->mods.v);
    tr_map_free(&r->ops.ix);
    tr_map_free(&r->mods.ix);
}

static lpo_status torch_analyze(lpo_trace *t, torch_result *r) {
    memset(r, 0, sizeof *r);
    lpo_status st = tr_analyze(t);
    if (st) return st;
    const size_t nr = t->ranges.n;
    uint8_t *rk = calloc(nr + 1, 1), *seen = calloc(nr + 1, 1);
    uint32_t *opname = calloc(nr + 1, sizeof *opname); /* op ranges: operator string id */
    if (!rk || !seen || !opname) st = NOMEM();
    for (size_t i = 0; i < nr && !st; i++) { /* kinds of the ranges */
        rk[i] = (uint8_t)range_kind(tr_str_get(&t->str, t->ranges.v[i].name));
        if (rk[i] == RK_OP) r->n_op_ranges++;
    }
    const uint32_t none = tr_str_intern(&t->str, "(no operator)", 13, 0);
    int32_t chain[256];
    for (size_t k = 0; k < t->ops.n && !st; k++) { /* GPU operations in start order */
        const tr_op *o = &t->ops.v[t->op_order[k]];
        int nc = 0;
        for (int32_t x = o->range; x >= 0 && nc < 256; x = t->ranges.v[x].parent) chain[nc++] = x;
        int32_t inner = -1;
        uint32_t phase = 0;
        for (int i = 0; i < nc;
             i++) { /* innermost operator; outermost other range, the capture gate's aside */
            const tr_range *g = &t->ranges.v[chain[i]];
            if (inner < 0 && rk[chain[i]] == RK_OP) inner = chain[i];
            const tr_proc *pr = &t->procs.v[g->proc];
            if (rk[chain[i]] == RK_OTHER && !(pr->gated && g->name == pr->gate_name)) phase = g->name;
        }
        const uint64_t d = o->end - o->start;
        const size_t pi = phase_index(r, phase);
        if (pi < 64) r->phase_ns[pi] += d;
        r->total_ns += d;
        if (inner >= 0 && !opname[inner]) opname[inner] = op_id_of(t, t->ranges.v[inner].name);
        orow *row = orow_get(&r->ops, phase, inner >= 0 ? opname[inner] : none);
        if (!row || (inner >= 0 && !opname[inner])) {
            st = NOMEM();
            break;
        }
        row->gpu_ns += d;
        row->busy_ns += o->busy;
        row->ops++;
        cost c = {-1, -1};
        const int first_call = inner >= 0 && !seen[inner];
        if (first_call) { /* a new call: its cost from its shapes */
            seen[inner] = 1;
            row->calls++;
            const char *full = tr_str_get(&t->str, t->ranges.v[inner].name);
            const char *opn = tr_str_get(&t->str, opname[inner]);
            const char *base = strrchr(opn, ':') ? strrchr(opn, ':') + 1 : opn;
            row->fam = family(base);
            const char *dt = NULL;
            double es = o->kind == TR_OP_KERNEL ? kernel_dtype(tr_str_get(&t->str, o->name), &dt) : 0;
            if (!row->dtype && dt) row->dtype = dt;
            if (!es) {
                es = 2;
                if (!row->dtype) row->dtype_assumed = 1;
            }
            shapes sh;
            parse_shapes(full, &sh);
            int64_t out[SH_D];
            const int out_rank = row->fam == FAM_CONV ? conv_output(t, rk, (size_t)inner, &sh, out) : 0;
            c = op_cost(base, row->fam, &sh, es, out_rank ? out : NULL, out_rank);
            if (c.flops >= 0 && c.bytes >= 0) {
                row->flops += c.flops;
                row->bytes += c.bytes;
                row->costed++;
            }
            if (!row->shapes_of) row->shapes_of = t->ranges.v[inner].name;
        } else if (inner < 0 && o->kind == TR_OP_KERNEL && !row->dtype) {
            const char *dt = NULL;
            if (kernel_dtype(tr_str_get(&t->str, o->name), &dt)) row->dtype = dt;
        }
        uint32_t last = 0;
        for (int i = 0; i < nc && !st; i++) { /* modules above it, inclusive */
            const int32_t x = chain[i];
            if (rk[x] != RK_MODULE || t->ranges.v[x].name == last) continue;
            last = t->ranges.v[x].name;
            orow *m = orow_get(&r->mods, phase, t->ranges.v[x].name);
            if (!m) {
                st = NOMEM();
                break;
            }
            m->gpu_ns += d;
            m->busy_ns += o->busy;
            m->ops++;
            if (seen[x] != 2) { /* its first GPU operation: one call */
                seen[x] = 2;
                m->calls++;
            }
            if (first_call && c.flops >= 0 && c.bytes >= 0) {
                m->flops += c.flops;
                m->bytes += c.bytes;
                m->costed++;
            }
            int depth = 0;
            for (int j = i + 1; j < nc; j++) depth += rk[chain[j]] == RK_MODULE;
            m->depth = (uint16_t)depth;
        }
    }
    free(rk);
    free(seen);
    free(opname);
    if (st) torch_result_free(r);
    return st;
}

int lpo_trace_has_torch_ops(const lpo_trace *t) {
    for (size_t i = 0; i < t->ranges.n; i++)
        if (!strncmp(tr_str_get(&t->str, t->ranges.v[i].name), "aten::", 6)) return 1;
    return 0;
}

static const lpo_field op_fields[] = {
    {"phase", LPO_FIELD_STR, NULL, 0},        {"op", LPO_FIELD_STR, NULL, 0},
    {"family", LPO_FIELD_STR, NULL, 0},       {"calls", LPO_FIELD_INT, NULL, 0},
    {"kernels", LPO_FIELD_INT, NULL, 1},      {"gpu_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"mean_us", LPO_FIELD_DOUBLE, "%.1f", 0}, {"share_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"busy_ms", LPO_FIELD_DOUBLE, "%.3f", 1}, {"flops", LPO_FIELD_DOUBLE, "%.3g", 1},
    {"bytes", LPO_FIELD_DOUBLE, "%.3g", 1},   {"tflops", LPO_FIELD_DOUBLE, "%.3g", 0},
    {"gbs", LPO_FIELD_DOUBLE, "%.3g", 0},     {"mfu_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"mbu_pct", LPO_FIELD_DOUBLE, "%.1f", 0}, {"bound", LPO_FIELD_STR, NULL, 0},
    {"dtype", LPO_FIELD_STR, NULL, 0},        {"costed_calls", LPO_FIELD_INT, NULL, 1},
    {"shapes", LPO_FIELD_STR, NULL, 1},
};

static const lpo_field mod_fields[] = {
    {"phase", LPO_FIELD_STR, NULL, 0},       {"module", LPO_FIELD_STR, NULL, 0},
    {"class", LPO_FIELD_STR, NULL, 0},       {"depth", LPO_FIELD_INT, NULL, 1},
    {"calls", LPO_FIELD_INT, NULL, 0},       {"kernels", LPO_FIELD_INT, NULL, 1},
    {"gpu_ms", LPO_FIELD_DOUBLE, "%.3f", 0}, {"share_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"flops", LPO_FIELD_DOUBLE, "%.3g", 1},  {"bytes", LPO_FIELD_DOUBLE, "%.3g", 1},
    {"tflops", LPO_FIELD_DOUBLE, "%.3g", 0}, {"gbs", LPO_FIELD_DOUBLE, "%.3g", 0},
};

/* The roof of an operator row in FLOP/s (0 unknown): matrix families by their data type, the rest on the
 * vector units. */
static double roof(const orow *o, const lpo_trace_peaks *pk) {
    if (!pk) return 0;
    if (o->fam == FAM_MATMUL || o->fam == FAM_ATTN || o->fam == FAM_CONV) {
        const char *d = o->dtype ? o->dtype : "bf16";
        const double tf = !strcmp(d, "fp8")    ? pk->fp8_tflops
                          : !strcmp(d, "fp16") ? pk->fp16_tflops
                          : !strcmp(d, "fp32") ? pk->fp32_tflops
                          : !strcmp(d, "fp64") ? 0
                                               : pk->bf16_tflops;
        return tf * 1e12;
    }
    return pk->vector_tflops * 1e12;
}

static const char *bound_of(const orow *o, const lpo_trace_peaks *pk) {
    const double rf = roof(o, pk), bw = pk ? pk->dram_gbs * 1e9 : 0;
    if (!o->costed || rf <= 0 || bw <= 0) return "unknown";
    return o->flops / rf > o->bytes / bw ? "compute" : "memory";
}

static int cmp_orow(const void *a, const void *b, void *ctx) {
    const orow *x = a, *y = b;
    const torch_result *r = ctx;
    if (x->phase != y->phase) {
        size_t px = 0, py = 0;
        for (size_t i = 0; i < r->n_phases; i++) {
            if (r->phase_ids[i] == x->phase) px = i;
            if (r->phase_ids[i] == y->phase) py = i;
        }
        return px < py ? -1 : 1;
    }
    if (x->gpu_ns != y->gpu_ns) return x->gpu_ns < y->gpu_ns ? 1 : -1;
    return x->first < y->first ? -1 : x->first > y->first;
}

static uint64_t phase_total(const torch_result *r, uint32_t phase) {
    for (size_t i = 0; i < r->n_phases; i++)
        if (r->phase_ids[i] == phase) return r->phase_ns[i];
    return 0;
}

static const char *phase_name(const lpo_trace *t, uint32_t phase) {
    return phase ? tr_str_get(&t->str, phase) : "all";
}

static lpo_table *op_table(const lpo_trace *t, torch_result *r, const lpo_trace_peaks *pk) {
    qsort_r(r->ops.v, r->ops.n, sizeof *r->ops.v, cmp_orow, r);
    lpo_table *tb = lpo_table_new(op_fields, sizeof op_fields / sizeof op_fields[0]);
    for (size_t i = 0; i < r->ops.n; i++) { /* one row per (phase, operator) */
        const orow *o = &r->ops.v[i];
        const double s = (double)o->gpu_ns / 1e9, total = (double)phase_total(r, o->phase);
        lpo_table_add_row(tb);
        lpo_table_set_str(tb, "phase", phase_name(t, o->phase));
        lpo_table_set_str(tb, "op", tr_str_get(&t->str, o->name));
        lpo_table_set_str(tb, "family", fam_names[o->fam]);
        lpo_table_set_int(tb, "calls", (int64_t)o->calls);
        lpo_table_set_int(tb, "kernels", (int64_t)o->ops);
        lpo_table_set_double(tb, "gpu_ms", (double)o->gpu_ns / 1e6);
        if (o->calls) lpo_table_set_double(tb, "mean_us", (double)o->gpu_ns / 1e3 / (double)o->calls);
        lpo_table_set_double(tb, "share_pct", total > 0 ? 100.0 * (double)o->gpu_ns / total : 0.0);
        lpo_table_set_double(tb, "busy_ms", (double)o->busy_ns / 1e6);
        if (o->costed) {
            lpo_table_set_double(tb, "flops", o->flops);
            lpo_table_set_double(tb, "bytes", o->bytes);
            lpo_table_set_int(tb, "costed_calls", (int64_t)o->costed);
            if (s > 0 && o->costed == o->calls) { /* rates only when every call is costed */
                lpo_table_set_double(tb, "tflops", o->flops / s / 1e12);
                lpo_table_set_double(tb, "gbs", o->bytes / s / 1e9);
                const double rf = roof(o, pk), bw = pk ? pk->dram_gbs * 1e9 : 0;
                if (rf > 0 && o->flops > 0) lpo_table_set_double(tb, "mfu_pct", 100.0 * o->flops / s / rf);
                if (bw > 0) lpo_table_set_double(tb, "mbu_pct", 100.0 * o->bytes / s / bw);
            }
        }
        lpo_table_set_str(tb, "bound", bound_of(o, pk));
        lpo_table_set_str(tb, "dtype", o->dtype ? o->dtype : o->dtype_assumed ? "2 B?" : "");
        if (o->shapes_of) {
            const char *full = tr_str_get(&t->str, o->shapes_of), *p = strstr(full, ", sizes = ");
            if (p) {
                const char *e = strstr(p, ", input_op_ids");
                char buf[512];
                snprintf(buf, sizeof buf, "%.*s", (int)(e ? (size_t)(e - p - 10) : strlen(p + 10)), p + 10);
                lpo_table_set_str(tb, "shapes", buf);
            }
        }
    }
    return tb;
}

static lpo_table *mod_table(const lpo_trace *t, torch_result *r) {
    qsort_r(r->mods.v, r->mods.n, sizeof *r->mods.v, cmp_orow, r);
    lpo_table *tb = lpo_table_new(mod_fields, sizeof mod_fields / sizeof mod_fields[0]);
    for (size_t i = 0; i < r->mods.n; i++) { /* one row per (phase, module path) */
        const orow *o = &r->mods.v[i];
        const double s = (double)o->gpu_ns / 1e9, total = (double)phase_total(r, o->phase);
        const char *nm = tr_str_get(&t->str, o->name);
        const char *full = strlen(nm) > 7 ? nm + 7 : nm, *bar = strrchr(full, '|');
        char path[512];
        snprintf(path, sizeof path, "%.*s", (int)(bar ? (size_t)(bar - full) : strlen(full)), full);
        lpo_table_add_row(tb);
        lpo_table_set_str(tb, "phase", phase_name(t, o->phase));
        lpo_table_set_str(tb, "module", path);
        lpo_table_set_str(tb, "class", bar ? bar + 1 : "");
        lpo_table_set_int(tb, "depth", o->depth);
        lpo_table_set_int(tb, "calls", (int64_t)o->calls);
        lpo_table_set_int(tb, "kernels", (int64_t)o->ops);
        lpo_table_set_double(tb, "gpu_ms", (double)o->gpu_ns / 1e6);
        lpo_table_set_double(tb, "share_pct", total > 0 ? 100.0 * (double)o->gpu_ns / total : 0.0);
        if (o->costed) {
            lpo_table_set_double(tb, "flops", o->flops);
            lpo_table_set_double(tb, "bytes", o->bytes);
            if (s > 0) {
                lpo_table_set_double(tb, "tflops", o->flops / s / 1e12);
                lpo_table_set_double(tb, "gbs", o->bytes / s / 1e9);
            }
        }
    }
    return tb;
}

lpo_status lpo_trace_torch_tables(lpo_trace *t, const lpo_trace_peaks *peaks, lpo_table **ops,
                                  lpo_table **modules) {
    torch_result r;
    lpo_status st = torch_analyze(t, &r);
    if (st) return st;
    if (ops) *ops = op_table(t, &r, peaks);
    if (modules) *modules = mod_table(t, &r);
    torch_result_free(&r);
    return LPO_OK;
}

/* summary.md's section, in plain words. */
static void torch_summary(const lpo_trace *t, const torch_result *r, const lpo_trace_peaks *pk,
                          lpo_strbuf *sb) {
    lpo_sb_puts(sb, "## PyTorch operators\n\n");
    for (size_t p = 0; p < r->n_phases; p++) { /* each phase: its time, its biggest operators */
        const uint32_t ph = r->phase_ids[p];
        const double total = (double)r->phase_ns[p];
        if (total <= 0) continue;
        double fam_ns[9] = {0}, fl = 0, by = 0, fl_s = 0, by_s = 0;
        const orow *top[3] = {NULL, NULL, NULL};
        for (size_t i = 0; i < r->ops.n; i++) { /* rows are sorted by phase, then time */
            const orow *o = &r->ops.v[i];
            if (o->phase != ph) continue;
            fam_ns[o->fam] += (double)o->gpu_ns;
            for (int k = 0; k < 3; k++)
                if (!top[k]) {
                    top[k] = o;
                    break;
                }
            if (o->costed == o->calls && o->costed) {
                if (o->fam == FAM_MATMUL || o->fam == FAM_ATTN || o->fam == FAM_CONV) {
                    fl += o->flops;
                    fl_s += (double)o->gpu_ns / 1e9;
                }
                by += o->bytes;
                by_s += (double)o->gpu_ns / 1e9;
            }
        }
        lpo_sb_printf(sb, "- **%s%s.** The GPU ran %.3f ms of operator work", ph ? "Phase " : "All work",
                      ph ? tr_str_get(&t->str, ph) : "", total / 1e6);
        int big = 0;
        for (int f = 1; f < 9; f++)
            if (fam_ns[f] > fam_ns[big]) big = f;
        lpo_sb_printf(sb, "; %s operators take the largest share (%.0f%%)", fam_names[big],
                      100 * fam_ns[big] / total);
        if (top[0]) {
            lpo_sb_puts(sb, ". The slowest operators:");
            for (int k = 0; k < 3 && top[k]; k++)
                lpo_sb_printf(sb, "%s %s %.1f%% (%s-bound)", k ? "," : "", tr_str_get(&t->str, top[k]->name),
                              100.0 * (double)top[k]->gpu_ns / total, bound_of(top[k], pk));
        }
        lpo_sb_puts(sb, ".");
        const lpo_trace_peaks *q = pk;
        const orow mm = {.fam = FAM_MATMUL, .dtype = top[0] ? top[0]->dtype : NULL};
        const double rf = roof(&mm, q);
        if (fl_s > 0 && rf > 0)
            lpo_sb_printf(sb,
                          " Matrix operators (matmuls, attention, convolutions) reach %.1f%% of the compute "
                          "peak (MFU).",
                          100 * fl / fl_s / rf);
        if (by_s > 0 && q && q->dram_gbs > 0)
            lpo_sb_printf(sb, " Costed operators move data at %.0f%% of the memory bandwidth (MBU).",
                          100 * by / by_s / (q->dram_gbs * 1e9));
        lpo_sb_puts(sb, "\n");
    }
    lpo_sb_printf(sb,
                  "\n%s Details: operators.md (per operator: calls, GPU time, FLOPs, bytes, MFU/MBU, bound), "
                  "modules.md (per nn.Module path).\n\n",
                  pk && pk->label[0] ? pk->label
                                     : "No peaks for this GPU: MFU, MBU and bound classes are unknown.");
}

lpo_status tr_write_torch(lpo_trace *t, const char *dir, const lpo_trace_peaks *pk, lpo_strbuf *summary) {
    torch_result r;
    lpo_status st = torch_analyze(t, &r);
    if (st) return st;
    lpo_table *ot = op_table(t, &r, pk), *mt = mod_table(t, &r);
    char path[4200];
    static const char *const ext[] = {".csv", ".md"};
    for (int e = 0; e < 2 && !st; e++) { /* operators and modules, .csv and .md */
        snprintf(path, sizeof path, "%s/operators%s", dir, ext[e]);
        st = lpo_table_save(ot, path);
        if (!st && lpo_table_rows(mt)) {
            snprintf(path, sizeof path, "%s/modules%s", dir, ext[e]);
            st = lpo_table_save(mt, path);
        }
    }
    if (!st && summary) torch_summary(t, &r, pk, summary);
    lpo_table_free(ot);
    lpo_table_free(mt);
    torch_result_free(&r);
    return st;
}
