/* Loading raw trace files (trace-<pid>.lpot, src/probe/trace_format.h) into one in-memory trace:
 * strings merged by content across files, NVTX ranges paired (begin/end) and nested, GPU operations
 * attributed to the innermost range open at their launch (correlation id -> LAUNCH record -> range) and
 * to their graph node's label, the capture gate and time window applied. A file cut short by a crash
 * is read up to its last complete record and counted as truncated. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "probe/trace_format.h"
#include "probe/trace_internal.h"

/* ---- per-file state ---- */
typedef struct {
    uint32_t *gid; /* local string id -> global id */
    size_t n_gid;
    tr_idx launch;       /* corr -> range id | gate flag << 63 */
    tr_map node;         /* graph node id -> label id | explicit << 32 */
    tr_map clone;        /* graph node id -> original node id */
    tr_idx range;        /* range id -> index */
    tr_idx api;          /* corr -> api index (launch calls) */
    uint64_t *parent_id; /* [ranges of this file] writer's parent id */
    size_t n_parent, cap_parent;
    TR_VEC(lpo_raw_range_end) ends;
    lpo_raw_dropped dropped;
    uint32_t memcpy_name[16]; /* string id per copy kind, 0 = not yet interned */
} file_ctx;

static void file_ctx_free(file_ctx *c) {
    free(c->gid);
    tr_idx_free(&c->launch);
    tr_map_free(&c->node);
    tr_map_free(&c->clone);
    tr_idx_free(&c->range);
    tr_idx_free(&c->api);
    free(c->parent_id);
    free(c->ends.v);
    memset(c, 0, sizeof *c);
}

static inline uint32_t gstr(const file_ctx *c, uint32_t local) {
    return local < c->n_gid ? c->gid[local] : 0;
}

#define NOMEM() lpo_errorf(LPO_E_NOMEM, "trace: out of memory while loading")

/* First pass: the strings (so records may refer to strings written after them). The writer numbers them
 * 1, 2, ...: an id past the records the file can hold is refused (one 16-byte record claiming id 2^32
 * asked for a 16 GiB table). */
static lpo_status load_strings(lpo_trace *t, file_ctx *c, const char *path, const uint8_t *p,
                               const uint8_t *end) {
    const size_t max_id = (size_t)(end - p) / 8;
    while (p + 8 <= end) {
        const lpo_raw_rec *r = (const lpo_raw_rec *)p;
        if (r->size < 8 || (r->size & 7) || p + r->size > end) break;
        if (r->type == LPO_REC_STRING && r->aux > max_id)
            return lpo_errorf(LPO_E_FORMAT, "%s: string id %u in a file of %zu records at most: corrupt",
                              path, (unsigned)r->aux, max_id);
        if (r->type == LPO_REC_STRING) {
            const char *s = (const char *)(p + 8);
            size_t len = strnlen(s, r->size - 8u);
            if (r->aux >= c->n_gid) {
                size_t n = c->n_gid ? c->n_gid : 256;
                while (n <= r->aux) n *= 2;
                uint32_t *g = realloc(c->gid, n * sizeof *g);
                if (!g) return NOMEM();
                memset(g + c->n_gid, 0, (n - c->n_gid) * sizeof *g);
                c->gid = g;
                c->n_gid = n;
            }
            /* a string that fills its record to the last byte has no NUL: copy it */
            int copy = len == r->size - 8u;
            uint32_t id = tr_str_intern(&t->str, s, len, copy);
            if (!id) return NOMEM();
            c->gid[r->aux] = id;
        }
        p += r->size;
    }
    return LPO_OK;
}

static int push_op(lpo_trace *t, const tr_op *op) {
    tr_op o = *op;
    if (o.end < o.start) o.end = o.start; /* never a negative duration */
    return TR_PUSH(t->ops, o);
}

/* A memcpy or memset as an operation; 0 or -1 (no memory). */
static int push_memop(lpo_trace *t, uint32_t proc, uint8_t kind, uint32_t name, uint64_t start, uint64_t end,
                      uint64_t bytes, uint64_t node, uint32_t corr, uint32_t stream, uint32_t device,
                      uint8_t mem) {
    tr_op op = {.start = start,
                .end = end,
                .node = node,
                .bytes = bytes,
                .range = -1,
                .corr = corr,
                .name = name,
                .stream = stream,
                .device = device,
                .proc = proc,
                .kind = kind,
                .mem = mem,
                .api = -1};
    if (!name || push_op(t, &op)) return -1;
    if (kind == TR_OP_MEMCPY)
        t->stats.memcpys++;
    else
        t->stats.memsets++;
    tr_proc *pr = &t->procs.v[proc];
    if (end > pr->t_last) pr->t_last = end;
    return 0;
}

/* memcpy kind names as nsys prints them */
static const char *memcpy_kind(uint8_t k) {
    static const char *const names[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                        "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
    return k < sizeof names / sizeof names[0] ? names[k] : "Unknown";
}

/* Second pass: every other record. */
static lpo_status load_records(lpo_trace *t, file_ctx *c, uint32_t proc, const uint8_t *p, const uint8_t *end,
                               int *truncated) {
    tr_proc *pr = &t->procs.v[proc];
    char nb[64];
    while (p + 8 <= end) {
        const lpo_raw_rec *r = (const lpo_raw_rec *)p;
        if (r->size < 8 || (r->size & 7) || p + r->size > end) break;
        const void *b = p + 8;
        const size_t blen = r->size - 8u;
        p += r->size;
#define BODY(T) (blen >= sizeof(T) ? (const T *)b : NULL)
        switch (r->type) {
        case LPO_REC_KERNEL: {
            const lpo_raw_kernel *k = BODY(lpo_raw_kernel);
            if (!k) break;
            tr_op op = {.start = k->start,
                        .end = k->end,
                        .node = k->graph_node_id,
                        .range = -1,
                        .corr = k->corr,
                        .name = gstr(c, k->name),
                        .stream = k->stream,
                        .device = k->device,
                        .proc = proc,
                        .graph_id = k->graph_id,
                        .smem_static = k->static_smem,
                        .smem_dynamic = k->dynamic_smem,
                        .regs = k->regs,
                        .kind = TR_OP_KERNEL,
                        .api = -1};
            memcpy(op.grid, k->grid, sizeof op.grid);
            memcpy(op.block, k->block, sizeof op.block);
            if (push_op(t, &op)) return NOMEM();
            t->stats.kernels++;
            if (k->end > pr->t_last) pr->t_last = k->end;
            break;
        }
        case LPO_REC_MEMCPY: {
            const lpo_raw_memcpy *m = BODY(lpo_raw_memcpy);
            if (!m) break;
            const unsigned ck = m->copy_kind < 16 ? m->copy_kind : 0;
            if (!c->memcpy_name[ck]) {
                snprintf(nb, sizeof nb, "[CUDA memcpy %s]", memcpy_kind(m->copy_kind));
                c->memcpy_name[ck] = tr_str_intern(&t->str, nb, strlen(nb), 1);
            }
            if (push_memop(t, proc, TR_OP_MEMCPY, c->memcpy_name[ck], m->start, m->end, m->bytes,
                           m->graph_node_id, m->corr, m->stream, m->device,
                           (uint8_t)((m->src_kind & 15u) | (m->dst_kind & 15u) << 4)))
                return NOMEM();
            break;
        }
        case LPO_REC_MEMSET: {
            const lpo_raw_memset *m = BODY(lpo_raw_memset);
            if (!m) break;
            if (push_memop(t, proc, TR_OP_MEMSET, tr_str_intern(&t->str, "[CUDA memset]", 13, 0), m->start,
                           m->end, m->bytes, m->graph_node_id, m->corr, m->stream, m->device,
                           (uint8_t)(m->memory_kind & 15u)))
                return NOMEM();
            break;
        }
        case LPO_REC_API: {
            const lpo_raw_api *a = BODY(lpo_raw_api);
            if (!a) break;
            tr_api x = {.start = a->start,
                        .end = a->end,
                        .range = -1,
                        .name = gstr(c, a->name),
                        .tid = a->tid,
                        .proc = proc,
                        .corr = a->corr,
                        .cbid = a->cbid,
                        .domain = a->domain};
            if (TR_PUSH(t->apis, x)) return NOMEM();
            if (a->end > pr->t_last) pr->t_last = a->end;
            break;
        }
        case LPO_REC_SYNC: {
            const lpo_raw_sync *s = BODY(lpo_raw_sync);
            if (!s) break;
            tr_sync x = {s->start, s->end, s->corr, s->stream, proc, s->type};
            if (TR_PUSH(t->syncs, x)) return NOMEM();
            break;
        }
        case LPO_REC_RANGE_BEGIN: {
            const lpo_raw_range_begin *rb = BODY(lpo_raw_range_begin);
            if (!rb) break;
            tr_range x = {.start = rb->ts,
                          .end = rb->ts,
                          .id = rb->id,
                          .parent = -1,
                          .name = gstr(c, rb->name),
                          .tid = rb->tid,
                          .proc = proc,
                          .domain = gstr(c, rb->domain),
                          .kind = (uint8_t)rb->kind};
            if (TR_PUSH(t->ranges, x)) return NOMEM();
            if (tr_vec_grow((void **)&c->parent_id, &c->cap_parent, c->n_parent, sizeof *c->parent_id))
                return NOMEM();
            c->parent_id[c->n_parent++] = rb->parent;
            if (rb->ts > pr->t_last) pr->t_last = rb->ts;
            break;
        }
        case LPO_REC_RANGE_END: {
            const lpo_raw_range_end *re = BODY(lpo_raw_range_end);
            if (!re || TR_PUSH(c->ends, *re)) return re ? NOMEM() : LPO_OK;
            if (re->ts > pr->t_last) pr->t_last = re->ts;
            break;
        }
        case LPO_REC_MARK: {
            const lpo_raw_mark *m = BODY(lpo_raw_mark);
            if (!m) break;
            tr_mark x = {m->ts, m->tid, gstr(c, m->name), proc};
            if (TR_PUSH(t->marks, x)) return NOMEM();
            break;
        }
        case LPO_REC_LAUNCH: {
            const lpo_raw_launch *l = BODY(lpo_raw_launch);
            if (!l) break;
            uint64_t v = l->range | ((uint64_t)(l->flags & LPO_LAUNCH_GATE_OPEN) << 63);
            uint64_t old;
            if (!tr_idx_get(&c->launch, l->corr, &old) && tr_idx_put(&c->launch, l->corr, v)) return NOMEM();
            t->stats.launches++;
            break;
        }
        case LPO_REC_NODE_LABEL: {
            const lpo_raw_node_label *nl = BODY(lpo_raw_node_label);
            if (!nl) break;
            uint64_t *old = tr_map_get(&c->node, nl->node);
            int expl = r->aux != 0; /* explicit labels (lpo_probe_graph_node_label) win over automatic ones */
            if (!old || expl || !(*old >> 32))
                if (tr_map_put(&c->node, nl->node, gstr(c, nl->label) | ((uint64_t)expl << 32)))
                    return NOMEM();
            break;
        }
        case LPO_REC_NODE_CLONE: {
            const lpo_raw_node_clone *nc = BODY(lpo_raw_node_clone);
            if (nc && nc->node != nc->original && tr_map_put(&c->clone, nc->node, nc->original))
                return NOMEM();
            break;
        }
        case LPO_REC_DROPPED: {
            const lpo_raw_dropped *d = BODY(lpo_raw_dropped);
            if (d) c->dropped = *d;
            break;
        }
        case LPO_REC_THREAD_NAME: {
            const lpo_raw_thread_name *tn = BODY(lpo_raw_thread_name);
            if (!tn) break;
            tr_thread_name x = {proc, tn->tid, gstr(c, tn->name)};
            if (TR_PUSH(t->threads, x)) return NOMEM();
            break;
        }
        case LPO_REC_END: {
            const lpo_raw_end *e = BODY(lpo_raw_end);
            if (!e) break;
            pr->ended = 1;
            pr->end_reason = e->reason;
            if (e->reason == LPO_END_SIGNAL) pr->end_signal = e->signal;
            if (e->ts > pr->t_last) pr->t_last = e->ts;
            break;
        }
        case LPO_REC_WINDOW: {
            const lpo_raw_window *w = BODY(lpo_raw_window);
            if (w) {
                pr->window_begin = w->begin;
                pr->window_end = w->end;
            }
            break;
        }
        case LPO_REC_GATE:
            pr->gated = 1;
            pr->gate_name = gstr(c, r->aux);
            break;
        default: break; /* strings (first pass) and unknown types */
        }
#undef BODY
    }
    if (p != end) *truncated = 1;
    return LPO_OK;
}

/* ---- the capture gate's instances as a sorted union of intervals ---- */
/* The gate's instances [start, end] (closed), sorted by start and merged where they overlap: disjoint and
 * increasing. Built in O(G log G); each query is a binary search, O(log G), so the filter over R ranges,
 * A API calls and M memory operations is O((G + R + A + M) log G) (it was O(G * (R + A + M))). */
typedef struct {
    uint64_t s, e;
} gate_iv;

static int cmp_gate(const void *a, const void *b) {
    const gate_iv *x = a, *y = b;
    return x->s < y->s ? -1 : x->s > y->s;
}

/* Sorts iv[0..n) and merges overlapping intervals in place; returns the count left. */
static size_t gate_union(gate_iv *iv, size_t n) {
    if (!n) return 0;
    qsort(iv, n, sizeof *iv, cmp_gate);
    size_t k = 0;
    for (size_t i = 1; i < n; i++) { /* extend the last kept interval, or start a new one */
        if (iv[i].s <= iv[k].e) {
            if (iv[i].e > iv[k].e) iv[k].e = iv[i].e;
        } else {
            iv[++k] = iv[i];
        }
    }
    return k + 1;
}

/* 1 when [s, e] meets an interval of the union: the last interval starting at or before e is the only
 * candidate (every earlier one ends before it starts). */
static int gate_hit(const gate_iv *iv, size_t n, uint64_t s, uint64_t e) {
    size_t lo = 0, hi = n; /* first interval with start > e */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (iv[mid].s <= e)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && iv[lo - 1].e >= s;
}

/* Pairs ranges, applies the gate and the window, attributes the file's operations. */
static lpo_status finish_file(lpo_trace *t, file_ctx *c, uint32_t proc, size_t r0, size_t o0, size_t a0) {
    tr_proc *pr = &t->procs.v[proc];
    /* range ends: id -> index of the begin */
    uint64_t ix;
    tr_idx_clear(&c->range);
    for (size_t i = r0; i < t->ranges.n; i++) /* the file's ranges */
        if (tr_idx_put(&c->range, t->ranges.v[i].id, i)) return NOMEM();
    for (size_t i = 0; i < c->ends.n; i++) { /* each end */
        if (!tr_idx_get(&c->range, c->ends.v[i].id, &ix)) continue;
        tr_range *r = &t->ranges.v[ix];
        r->end = c->ends.v[i].ts > r->start ? c->ends.v[i].ts : r->start;
        r->closed = 1;
    }
    for (size_t i = r0; i < t->ranges.n; i++) { /* open at the end of the process: closed at its last event */
        tr_range *r = &t->ranges.v[i];
        if (!r->closed) {
            r->end = pr->t_last > r->start ? pr->t_last : r->start;
            t->stats.unterminated_ranges++;
        }
    }
    /* the capture gate and the window: which ranges stay */
    const uint64_t wb = pr->window_begin, we = pr->window_end ? pr->window_end : UINT64_MAX;
    size_t gate_r1 = t->ranges.n;
    size_t keep = r0;
    if (pr->gated || wb || we != UINT64_MAX) {
        gate_iv *gates = NULL; /* the gate instances survive compaction: copy them first */
        size_t n_gates = 0;
        if (pr->gated) {
            gates = malloc((t->ranges.n - r0 + 1) * sizeof *gates);
            if (!gates) return NOMEM();
            for (size_t i = r0; i < gate_r1; i++)
                if (t->ranges.v[i].name == pr->gate_name)
                    gates[n_gates++] = (gate_iv){t->ranges.v[i].start, t->ranges.v[i].end};
            n_gates = gate_union(gates, n_gates);
        }
        for (size_t i = r0; i < t->ranges.n; i++) { /* each range of the file */
            const tr_range *r = &t->ranges.v[i];
            int ok = r->end >= wb && r->start < we;
            if (ok && pr->gated) ok = gate_hit(gates, n_gates, r->start, r->end);
            if (ok) {
                t->ranges.v[keep] = *r;
                c->parent_id[keep - r0] = c->parent_id[i - r0];
                keep++;
            }
        }
        t->ranges.n = keep;
        /* APIs and memory operations: kept inside the window (and a gate instance) */
        size_t ka = a0;
        for (size_t i = a0; i < t->apis.n; i++) {
            const tr_api *a = &t->apis.v[i];
            int ok = a->start >= wb && a->start < we;
            if (ok && pr->gated) ok = gate_hit(gates, n_gates, a->start, a->end);
            if (ok) t->apis.v[ka++] = *a;
        }
        t->apis.n = ka;
        size_t ko = o0;
        for (size_t i = o0; i < t->ops.n; i++) {
            const tr_op *o = &t->ops.v[i];
            int ok = o->start >= wb && o->start < we;
            if (ok && pr->gated) {
                if (o->kind == TR_OP_KERNEL) { /* launched while the gate was open */
                    uint64_t l;
                    ok = tr_idx_get(&c->launch, o->corr, &l) && (l >> 63);
                } else {
                    ok = gate_hit(gates, n_gates, o->start, o->end);
                }
            }
            if (ok)
                t->ops.v[ko++] = *o;
            else if (o->kind == TR_OP_KERNEL)
                t->stats.kernels--;
            else if (o->kind == TR_OP_MEMCPY)
                t->stats.memcpys--;
            else
                t->stats.memsets--;
        }
        t->ops.n = ko;
        free(gates);
        tr_idx_clear(&c->range);
        for (size_t i = r0; i < t->ranges.n; i++)
            if (tr_idx_put(&c->range, t->ranges.v[i].id, i)) return NOMEM();
    }
    /* nesting: parent index and depth */
    for (size_t i = r0; i < t->ranges.n; i++) {
        tr_range *r = &t->ranges.v[i];
        uint64_t pid = c->parent_id[i - r0];
        const int has = pid && tr_idx_get(&c->range, pid, &ix);
        r->parent = has ? (int32_t)ix : -1;
        r->depth = has && ix < i ? (uint16_t)(t->ranges.v[ix].depth + 1) : 0;
    }
    /* API calls: corr -> api (an operation's launch call), and the range open at a launch call */
    tr_idx_clear(&c->api);
    for (size_t i = a0; i < t->apis.n; i++) {
        tr_api *a = &t->apis.v[i];
        uint64_t l;
        if (a->corr && tr_idx_put(&c->api, a->corr, i)) return NOMEM();
        if (!tr_idx_get(&c->launch, a->corr, &l)) continue;
        a->range = tr_idx_get(&c->range, l & ~(1ull << 63), &ix) ? (int32_t)ix : -1;
    }
    /* operations: range, graph node label, launch call */
    for (size_t i = o0; i < t->ops.n; i++) {
        tr_op *o = &t->ops.v[i];
        uint64_t l;
        if (tr_idx_get(&c->launch, o->corr, &l) && tr_idx_get(&c->range, l & ~(1ull << 63), &ix))
            o->range = (int32_t)ix;
        if (tr_idx_get(&c->api, o->corr, &ix)) o->api = (int32_t)ix;
        if (o->node) {
            t->stats.graph_ops++;
            /* Follow the clones back to the node that was captured or added. The nearest explicit label
             * wins; otherwise the automatic label of the most original node: CUDA also reports the nodes
             * cudaGraphInstantiate clones as created, so a clone carries the range open at instantiation
             * (e.g. the whole program's), not the one open at capture. */
            uint64_t node = o->node;
            for (int hop = 0; hop < 8 && node; hop++) { /* each node of the clone chain */
                const uint64_t *lab = tr_map_get(&c->node, node);
                if (lab && (*lab >> 32)) {
                    o->label = (uint32_t)*lab;
                    break;
                }
                if (lab) o->label = (uint32_t)*lab;
                const uint64_t *orig = tr_map_get(&c->clone, node);
                node = orig ? *orig : 0;
            }
            if (o->label) t->stats.labelled_graph_ops++;
        }
        if (o->range >= 0 || o->label) t->stats.attributed_ops++;
    }
    t->stats.dropped_cupti += c->dropped.cupti;
    t->stats.dropped_probe += c->dropped.probe;
    t->stats.dropped_staged += c->dropped.staged;
    t->stats.incomplete += c->dropped.incomplete;
    return LPO_OK;
}

static lpo_status load_one(lpo_trace *t, const char *path, file_ctx *c) {
    lpo_mapped_file *mf = &t->files[t->n_files];
    lpo_status st = lpo_file_map(path, mf);
    if (st) return st;
    t->n_files++;
    const lpo_raw_header *h = (const lpo_raw_header *)mf->data;
    if (mf->size < sizeof *h) { /* the process died before its header reached the disk */
        t->stats.truncated_files++;
        return LPO_OK;
    }
    if (memcmp(h->magic, LPO_TRACE_MAGIC, 8) != 0)
        return lpo_errorf(LPO_E_FORMAT, "%s: not an lpo raw trace (bad magic)", path);
    if (h->version != LPO_TRACE_VERSION)
        return lpo_errorf(LPO_E_FORMAT, "%s: raw trace version %u (this lpo reads version %u)", path,
                          h->version, LPO_TRACE_VERSION);
    /* records are read in place: they must start 8-byte aligned (found by fuzz_trace) */
    if (h->header_size < sizeof *h || h->header_size > mf->size || (h->header_size & 7))
        return lpo_errorf(LPO_E_FORMAT, "%s: header size %u: not a raw trace the tracer wrote", path,
                          h->header_size);
    tr_proc pr = {.pid = h->pid};
    if (TR_PUSH(t->procs, pr)) return NOMEM();
    const uint32_t proc = (uint32_t)(t->procs.n - 1);
    const uint8_t *p = mf->data + h->header_size, *end = mf->data + mf->size;
    const size_t r0 = t->ranges.n, o0 = t->ops.n, a0 = t->apis.n, s0 = t->syncs.n, m0 = t->marks.n;
    int truncated = 0;
    /* ids index dense arrays up to a bound proportional to the file (8 bytes per slot: at most 2x its
     * size each); ids beyond go to hash maps */
    c->launch.dense_max = c->range.dense_max = c->api.dense_max = (uint64_t)(end - p) / 4 + 4096;
    if ((st = load_strings(t, c, path, p, end)) || (st = load_records(t, c, proc, p, end, &truncated)))
        return st;
    if (truncated) t->stats.truncated_files++;
    if ((st = finish_file(t, c, proc, r0, o0, a0))) return st;
    /* CUPTI's own clock: shifted to CLOCK_MONOTONIC; every time then checked (see TR_MAX_NS) */
    const int64_t off = h->clock_offset_ns;
    const uint64_t uoff = (uint64_t)off;
    if (off <= -(int64_t)TR_MAX_NS || off >= (int64_t)TR_MAX_NS)
        return lpo_errorf(LPO_E_FORMAT, "%s: clock offset %lld ns: not a trace the tracer wrote", path,
                          (long long)off);
    int bad = 0;
#define SHIFT(x) (bad |= (x) >= (1ull << 63), (x) += uoff, bad |= (x) >= TR_MAX_NS)
    for (size_t i = o0; i < t->ops.n; i++) SHIFT(t->ops.v[i].start), SHIFT(t->ops.v[i].end);
    for (size_t i = a0; i < t->apis.n; i++) SHIFT(t->apis.v[i].start), SHIFT(t->apis.v[i].end);
    for (size_t i = r0; i < t->ranges.n; i++) SHIFT(t->ranges.v[i].start), SHIFT(t->ranges.v[i].end);
    for (size_t i = s0; i < t->syncs.n; i++) SHIFT(t->syncs.v[i].start), SHIFT(t->syncs.v[i].end);
    for (size_t i = m0; i < t->marks.n; i++) SHIFT(t->marks.v[i].ts);
#undef SHIFT
    if (bad)
        return lpo_errorf(LPO_E_FORMAT,
                          "%s: a timestamp at or past 2^62 ns (146 years of CLOCK_MONOTONIC): corrupt, not a "
                          "trace the tracer wrote",
                          path);
    /* never a negative duration (operations are fixed when pushed) */
    for (size_t i = a0; i < t->apis.n; i++)
        if (t->apis.v[i].end < t->apis.v[i].start) t->apis.v[i].end = t->apis.v[i].start;
    for (size_t i = s0; i < t->syncs.n; i++)
        if (t->syncs.v[i].end < t->syncs.v[i].start) t->syncs.v[i].end = t->syncs.v[i].start;
    return LPO_OK;
}

static int is_raw_name(const char *n) {
    size_t l = strlen(n);
    return !strncmp(n, "trace-", 6) && l > 11 && !strcmp(n + l - 5, ".lpot");
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

lpo_status lpo_trace_load_files(const char *const *paths, size_t n, lpo_trace **out) {
    *out = NULL;
    lpo_trace *t = calloc(1, sizeof *t);
    if (!t) return NOMEM();
    t->files = calloc(n ? n : 1, sizeof *t->files);
    if (!t->files) {
        free(t);
        return NOMEM();
    }
    lpo_status st = LPO_OK;
    for (size_t i = 0; i < n && st == LPO_OK; i++) { /* each raw file */
        file_ctx c = {0};
        st = load_one(t, paths[i], &c);
        file_ctx_free(&c);
    }
    if (st) {
        lpo_trace_free(t);
        return st;
    }
    t->stats.files = n;
    t->stats.apis = t->apis.n;
    t->stats.syncs = t->syncs.n;
    t->stats.ranges = t->ranges.n;
    t->stats.marks = t->marks.n;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < t->ops.n; i++) { /* time extent and GPU time */
        const tr_op *o = &t->ops.v[i];
        if (o->start < lo) lo = o->start;
        if (o->end > hi) hi = o->end;
        double d = (double)(o->end - o->start) / 1e6;
        if (o->kind == TR_OP_KERNEL)
            t->stats.kernel_time_ms += d;
        else
            t->stats.memop_time_ms += d;
    }
    for (size_t i = 0; i < t->apis.n; i++) {
        if (t->apis.v[i].start < lo) lo = t->apis.v[i].start;
        if (t->apis.v[i].end > hi) hi = t->apis.v[i].end;
    }
    for (size_t i = 0; i < t->ranges.n; i++) {
        if (t->ranges.v[i].start < lo) lo = t->ranges.v[i].start;
        if (t->ranges.v[i].end > hi) hi = t->ranges.v[i].end;
    }
    t->stats.t_begin = lo == UINT64_MAX ? 0 : lo;
    t->stats.t_end = hi;
    /* every sum a report makes (per name, per range, over at most 256 nested ranges) is a sum of these
     * durations: below 2^54 ns in all, none reaches 2^62 (a kernels.csv total_ns of -1 or 0) */
    double sum = 0, bytes = 0;
    for (size_t i = 0; i < t->ops.n; i++)
        sum += (double)(t->ops.v[i].end - t->ops.v[i].start), bytes += (double)t->ops.v[i].bytes;
    for (size_t i = 0; i < t->apis.n; i++) sum += (double)(t->apis.v[i].end - t->apis.v[i].start);
    for (size_t i = 0; i < t->ranges.n; i++) sum += (double)(t->ranges.v[i].end - t->ranges.v[i].start);
    if (sum >= TR_MAX_SUM_NS || bytes >= 0x1p62) {
        lpo_trace_free(t);
        return lpo_errorf(
            LPO_E_FORMAT,
            "trace: the records' durations sum to %.3g ns and their bytes to %.3g (at most 2^54 ns, "
            "208 days, and 2^62 bytes): corrupt raw files",
            sum, bytes);
    }
    for (size_t i = 0; i < t->procs.n; i++) {
        if (!t->procs.v[i].ended) t->stats.processes_without_end++;
        if (t->procs.v[i].end_signal && !t->stats.end_signal)
            t->stats.end_signal = (int)t->procs.v[i].end_signal;
    }
    *out = t;
    return LPO_OK;
}

lpo_status lpo_trace_load_dir(const char *dir, lpo_trace **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return lpo_errorf(LPO_E_IO, "%s: cannot open the trace directory", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    lpo_status st = LPO_OK;
    for (struct dirent *e; (e = readdir(d));) { /* raw files, sorted by name below */
        if (!is_raw_name(e->d_name)) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (tr_vec_grow((void **)&names, &cap, n, sizeof *names) || !(names[n] = lpo_strdup(path))) {
            st = NOMEM();
            break;
        }
        n++;
    }
    closedir(d);
    if (st == LPO_OK) {
        if (n) qsort(names, n, sizeof *names, cmp_str);
        st = lpo_trace_load_files((const char *const *)names, n, out);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

void lpo_trace_free(lpo_trace *t) {
    if (!t) return;
    tr_strtab_free(&t->str);
    free(t->ops.v);
    free(t->apis.v);
    free(t->ranges.v);
    free(t->syncs.v);
    free(t->marks.v);
    free(t->procs.v);
    free(t->threads.v);
    for (size_t i = 0; i < t->n_files; i++) lpo_file_unmap(&t->files[i]);
    free(t->files);
    free(t->op_order);
    free(t->acc);
    free(t);
}

void lpo_trace_get_stats(const lpo_trace *t, lpo_trace_stats *s) {
    *s = t->stats;
}
