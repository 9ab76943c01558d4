/* Internals of trace processing (src/probe/trace_*.c): the in-memory trace, a u64 hash map and the
 * string table. Not part of the public API. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/core.h"
#include "lpo/trace.h"

/* Every time of a loaded trace (ns of CLOCK_MONOTONIC, after the file's clock offset) is below TR_MAX_NS
 * (146 years), and all durations together below TR_MAX_SUM_NS (208 days): the loader refuses files past
 * them, so no difference, sum or conversion to int64 in the reports can wrap. */
#define TR_MAX_NS     (1ull << 62)
#define TR_MAX_SUM_NS 0x1p54

/* ---- u64 -> u64 open-addressing hash map (key UINT64_MAX is reserved) ---------------------------------- */
typedef struct {
    uint64_t *keys, *vals;
    size_t cap, n; /* cap: power of two */
} tr_map;

int tr_map_init(tr_map *m, size_t expected); /* 0 or -1 (no memory) */
void tr_map_free(tr_map *m);
void tr_map_clear(tr_map *m);
int tr_map_put(tr_map *m, uint64_t key, uint64_t val); /* overwrites; 0 or -1 */
/* Pointer to the value of key, or NULL. */
uint64_t *tr_map_get(const tr_map *m, uint64_t key);

/* A map for keys that are mostly small, dense integers (correlation ids, range ids): a direct array
 * for keys below 2^26, the hash map above. Values must not be UINT64_MAX. */
typedef struct {
    uint64_t *dense; /* value + 1, 0 = absent */
    size_t n_dense;
    tr_map sparse;
    uint64_t dense_max; /* keys from here on go to the sparse map (0: TR_DENSE_MAX); the loader sets it
                         * from the file's size, so a small file cannot ask for a huge dense array */
} tr_idx;

int tr_idx_put(tr_idx *m, uint64_t key, uint64_t val); /* 0 or -1 */
/* 1 and *val when present, else 0. */
static inline int tr_idx_get(const tr_idx *m, uint64_t key, uint64_t *val) {
    if (key < m->n_dense) {
        if (!m->dense[key]) return 0;
        *val = m->dense[key] - 1;
        return 1;
    }
    const uint64_t *v = tr_map_get(&m->sparse, key);
    if (v) *val = *v;
    return v != NULL;
}
void tr_idx_clear(tr_idx *m);
void tr_idx_free(tr_idx *m);

/* ---- strings: interned by content, id 0 = none ---- */
typedef struct {
    const char *s; /* NUL-terminated; points into a mapped file or into owned memory */
    uint32_t len, hash;
    char *json;      /* lazily built: the quoted, escaped JSON text */
    int8_t category; /* -1 not yet computed */
} tr_str;

typedef struct {
    tr_str *v; /* [n], v[0] unused */
    size_t n, cap;
    uint32_t *index; /* hash slots -> id, 0 empty */
    size_t index_cap;
    char **owned; /* strings the table allocated */
    size_t n_owned, cap_owned;
} tr_strtab;

/* Id of s (len bytes); adds a copy when copy != 0, else keeps the pointer (which must stay valid and
 * be NUL-terminated). 0 on out of memory. */
uint32_t tr_str_intern(tr_strtab *t, const char *s, size_t len, int copy);
void tr_strtab_free(tr_strtab *t);
static inline const char *tr_str_get(const tr_strtab *t, uint32_t id) {
    return id && id < t->n ? t->v[id].s : "";
}

/* ---- the trace ---------------------------------------------------------------------------------------- */
enum { TR_OP_KERNEL = 0, TR_OP_MEMCPY = 1, TR_OP_MEMSET = 2 };

typedef struct {
    uint64_t start, end;
    uint64_t node;  /* graph node id, 0 none */
    uint64_t bytes; /* memcpy/memset */
    int32_t range;  /* index into ranges, -1 none */
    uint32_t label; /* graph node label (string id), 0 none */
    uint32_t corr, name, stream, device, proc, graph_id;
    int32_t grid[3], block[3];
    uint32_t smem_static, smem_dynamic;
    uint16_t regs;
    uint8_t kind;
    uint8_t mem;   /* memory kinds (CUpti_ActivityMemoryKind): memcpy src | dst << 4; memset the memory's */
    int32_t api;   /* index into apis of the launch call, -1 none */
    uint64_t busy; /* exclusive time on its stream (tr_analyze): the part of [start, end) that no operation
                    * started earlier on the same (process, device, stream) covers */
} tr_op;

typedef struct {
    uint64_t start, end;
    int32_t range; /* innermost range open at the call (launch calls only), -1 none */
    uint32_t name, tid, proc, corr, cbid, domain;
} tr_api;

typedef struct {
    uint64_t start, end; /* end = start when unterminated (fixed to the process end after loading) */
    uint64_t id;         /* the writer's id (unique within proc) */
    int32_t parent;      /* index, -1 none */
    uint32_t name, tid, proc, domain;
    uint8_t kind;   /* 0 push/pop, 1 start/end */
    uint8_t closed; /* an end record was seen */
    uint16_t depth;
} tr_range;

typedef struct {
    uint64_t start, end;
    uint32_t corr, stream, proc, type;
} tr_sync;

typedef struct {
    uint64_t ts;
    uint32_t tid, name, proc;
} tr_mark;

typedef struct {
    uint32_t pid;
    int ended; /* an end record was seen */
    uint32_t end_reason, end_signal;
    uint64_t t_last;                   /* last timestamp seen in this file */
    uint64_t window_begin, window_end; /* 0, UINT64_MAX when none */
    int gated;
    uint32_t gate_name; /* string id */
} tr_proc;

typedef struct {
    uint32_t proc, tid, name;
} tr_thread_name;

/* Per range instance, inclusive of nested ranges: the union of its GPU operations' intervals. */
typedef struct {
    uint64_t first, last_end; /* first op start, last op end */
    uint64_t cur_s, cur_e;    /* the interval being merged */
    uint64_t busy;            /* union length so far (ns) */
    uint64_t op_time;         /* sum of op durations (ns) */
    uint64_t api_ns;          /* launch calls made inside the range (ns) */
    uint32_t n_ops;
} tr_acc;

#define TR_VEC(T)                                                                                            \
    struct {                                                                                                 \
        T *v;                                                                                                \
        size_t n, cap;                                                                                       \
    }

struct lpo_trace {
    tr_strtab str;
    TR_VEC(tr_op) ops;
    TR_VEC(tr_api) apis;
    TR_VEC(tr_range) ranges;
    TR_VEC(tr_sync) syncs;
    TR_VEC(tr_mark) marks;
    TR_VEC(tr_proc) procs;
    TR_VEC(tr_thread_name) threads;
    lpo_mapped_file *files;
    size_t n_files;
    lpo_trace_stats stats;
    uint32_t *op_order; /* ops sorted by start (built by tr_analyze) */
    tr_acc *acc;        /* [ranges.n] (built by tr_analyze) */
    uint64_t op_ns;     /* sum of the ops' durations (tr_analyze) */
    uint64_t busy_ns;   /* sum of their exclusive times = the streams' busy time (tr_analyze) */
    int analyzed;
};

/* Grows a TR_VEC to hold one more element; 0 or -1. */
int tr_vec_grow(void **v, size_t *cap, size_t n, size_t elem);
#define TR_PUSH(vec, item)                                                                                   \
    ((vec).n < (vec).cap || tr_vec_grow((void **)&(vec).v, &(vec).cap, (vec).n, sizeof *(vec).v) == 0        \
         ? ((vec).v[(vec).n++] = (item), 0)                                                                  \
         : -1)

/* Sorts ops by start into t->op_order, fills the range accumulators and each op's exclusive time on its
 * stream (idempotent). */
lpo_status tr_analyze(lpo_trace *t);
/* Appends one line when operations overlap on their stream (t->busy_ns < t->op_ns: programmatic dependent
 * launch), saying both totals and how busy_ns counts them; nothing otherwise. After tr_analyze. */
void tr_overlap_note(const lpo_trace *t, lpo_strbuf *sb);
/* Sorts n (key, value) pairs by key (LSD radix); tmp has room for n pairs. */
void tr_radix_sort_u64(uint64_t *keys, uint32_t *vals, uint64_t *tmp_keys, uint32_t *tmp_vals, size_t n);
/* Category index of a string (cached in the table). */
int tr_category(tr_strtab *t, uint32_t id, int op_kind);
const char *tr_category_name(int c);
/* Writes the analyses of src/probe/trace_analyses.c into dir (timeline, idle, gaps, launch, memops,
 * cuda_api; .csv and .md) and appends their section to summary (may be NULL). */
lpo_status tr_write_analyses(lpo_trace *t, const char *dir, lpo_strbuf *summary);
/* The (process << 32 | device) pairs that ran GPU operations, ascending (*out malloc'ed, may be NULL when
 * *n_out is 0). */
lpo_status tr_devices(const lpo_trace *t, uint64_t **out, size_t *n_out);
/* 1 when the trace has GPU operations on more than one device (of one or several processes) or any
 * communication kernel: the multi-GPU files are then written. */
int tr_multi_gpu(lpo_trace *t);
/* Writes comm.{csv,md}, skew.csv and kernels_device.{csv,md} (src/probe/trace_comm.c) into dir and appends
 * their section to summary (may be NULL); step_range names the steps matched across ranks (NULL: none). */
lpo_status tr_write_comm(lpo_trace *t, const char *dir, const char *step_range, lpo_strbuf *summary);
/* Writes operators.{csv,md} and modules.{csv,md} (src/probe/trace_torch.c) into dir and appends their
 * section to summary (may be NULL). */
lpo_status tr_write_torch(lpo_trace *t, const char *dir, const lpo_trace_peaks *peaks, lpo_strbuf *summary);
