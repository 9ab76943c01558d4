/* trace.json: the Chrome Trace Event Format (opens in ui.perfetto.dev and chrome://tracing).
 *   - one process per traced OS process: a thread track per CPU thread with its CUDA API calls
 *     (cat "cuda_api") and NVTX push/pop ranges (cat "nvtx") as complete ("X") events, NVTX start/end
 *     ranges as async ("b"/"e") events, markers as instant events;
 *   - one process per (traced process, GPU): a track per CUDA stream with kernels (cat "kernel", and
 *     "kernel,communication" for NCCL and lpo's one-shot all-reduce), memcpys and memsets;
 *   - flow arrows ("s"/"f", cat "launch") from each launch call to the operations it launched;
 *   - counter tracks ("C") from the sampler's CSV (NVML: power, clocks, utilisation ...).
 * Timestamps are microseconds from the first event (3 decimals = ns). Written by hand into a large
 * buffer (no printf per event) so a million kernels take well under a second. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe/trace_internal.h"

/* pids of the pseudo-processes (above Linux's largest pid, 2^22) */
#define GPU_PID_BASE     8388608u  /* + proc * 64 + device */
#define COUNTER_PID_BASE 16777216u /* + device */

typedef struct {
    lpo_outfile out; /* temp file renamed into place at the end (core.h: links and devices in place) */
    char *buf;
    size_t len, cap;
    int err, first;
    uint64_t t0;
} jw;

static void jw_flush(jw *w) {
    if (w->len && lpo_outfile_write(&w->out, w->buf, w->len) != LPO_OK) w->err = 1;
    w->len = 0;
}

static inline void jw_put(jw *w, const char *s, size_t n) {
    if (w->len + n > w->cap) {
        jw_flush(w);
        if (n > w->cap) {
            if (lpo_outfile_write(&w->out, s, n) != LPO_OK) w->err = 1;
            return;
        }
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}
#define JW_LIT(w, lit) jw_put((w), (lit), sizeof(lit) - 1)

static inline void jw_u64(jw *w, uint64_t v) {
    char tmp[24];
    int n = 0;
    do {
        tmp[sizeof tmp - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    jw_put(w, tmp + sizeof tmp - n, (size_t)n);
}

static inline void jw_i64(jw *w, int64_t v) {
    if (v < 0) {
        JW_LIT(w, "-");
        jw_u64(w, (uint64_t)(-(v + 1)) + 1);
    } else {
        jw_u64(w, (uint64_t)v);
    }
}

/* ns (a magnitude, its sign written before) -> microseconds with 3 decimals */
static inline void jw_us(jw *w, uint64_t ns) {
    jw_u64(w, ns / 1000);
    char d[4] = {'.', (char)('0' + (ns / 100) % 10), (char)('0' + (ns / 10) % 10), (char)('0' + ns % 10)};
    jw_put(w, d, 4);
}

/* t - t0 in microseconds, in unsigned arithmetic (no negation of INT64_MIN, whatever the times) */
static inline void jw_ts(jw *w, uint64_t t) {
    if (t < w->t0) {
        JW_LIT(w, "-");
        jw_us(w, w->t0 - t);
    } else {
        jw_us(w, t - w->t0);
    }
}

static void jw_double(jw *w, double v) {
    char b[40];
    if (!isfinite(v)) {
        JW_LIT(w, "null");
        return;
    }
    int n = snprintf(b, sizeof b, "%.6g", v);
    jw_put(w, b, (size_t)n);
}

static void jw_raw_str(jw *w, const char *s) {
    lpo_strbuf sb = {0};
    if (!s) s = "";
    lpo_json_escape(&sb, s, strlen(s));
    jw_put(w, sb.buf, sb.len);
    lpo_sb_free(&sb);
}

/* The quoted, escaped JSON of a string id (built once). */
static void jw_str(jw *w, tr_strtab *t, uint32_t id) {
    if (!id || id >= t->n) {
        JW_LIT(w, "\"\"");
        return;
    }
    tr_str *e = &t->v[id];
    if (!e->json) {
        lpo_strbuf sb = {0};
        lpo_json_escape(&sb, e->s, e->len);
        e->json = sb.buf ? sb.buf : lpo_strdup("\"\"");
        if (!e->json) {
            w->err = 1;
            return;
        }
    }
    jw_put(w, e->json, strlen(e->json));
}

/* ,"pid":P,"tid":T,"ts":TS */
static void jw_where(jw *w, uint64_t pid, int64_t tid, uint64_t ts) {
    JW_LIT(w, ",\"pid\":");
    jw_u64(w, pid);
    JW_LIT(w, ",\"tid\":");
    jw_i64(w, tid);
    JW_LIT(w, ",\"ts\":");
    jw_ts(w, ts);
}

static void jw_event_begin(jw *w) {
    if (!w->first) JW_LIT(w, ",\n");
    w->first = 0;
}

static void meta(jw *w, const char *what, uint32_t pid, int64_t tid, const char *name, int sort) {
    jw_event_begin(w);
    JW_LIT(w, "{\"ph\":\"M\",\"name\":\"");
    jw_put(w, what, strlen(what));
    JW_LIT(w, "\",\"pid\":");
    jw_u64(w, pid);
    if (tid >= 0) {
        JW_LIT(w, ",\"tid\":");
        jw_i64(w, tid);
    }
    JW_LIT(w, ",\"args\":{");
    if (sort >= 0) {
        JW_LIT(w, "\"sort_index\":");
        jw_i64(w, sort);
    } else {
        JW_LIT(w, "\"name\":");
        jw_raw_str(w, name);
    }
    JW_LIT(w, "}}");
}

static void x_event(jw *w, const char *cat, tr_strtab *st, uint32_t name, uint32_t pid, int64_t tid,
                    uint64_t s, uint64_t e) {
    jw_event_begin(w);
    JW_LIT(w, "{\"ph\":\"X\",\"cat\":\"");
    jw_put(w, cat, strlen(cat));
    JW_LIT(w, "\",\"name\":");
    jw_str(w, st, name);
    jw_where(w, pid, tid, s);
    JW_LIT(w, ",\"dur\":");
    jw_us(w, e >= s ? e - s : 0);
}

static void dims(jw *w, const int32_t d[3]) {
    JW_LIT(w, "\"");
    jw_i64(w, d[0]);
    JW_LIT(w, "x");
    jw_i64(w, d[1]);
    JW_LIT(w, "x");
    jw_i64(w, d[2]);
    JW_LIT(w, "\"");
}

static uint32_t gpu_pid(const tr_op *o) {
    return GPU_PID_BASE + o->proc * 64u + (o->device & 63u);
}

static void write_ops(jw *w, lpo_trace *t) {
    static const char *const cats[] = {"kernel", "memcpy", "memset"};
    for (size_t k = 0; k < t->ops.n; k++) { /* each op, in start order */
        const uint32_t i = t->op_order ? t->op_order[k] : (uint32_t)k;
        const tr_op *o = &t->ops.v[i];
        const uint32_t pid = gpu_pid(o);
        /* communication kernels (NCCL, lpo's one-shot all-reduce) carry a second category to filter on */
        const int comm = o->kind == TR_OP_KERNEL && tr_category(&t->str, o->name, o->kind) == LPO_CAT_COMM;
        x_event(w, comm ? "kernel,communication" : cats[o->kind], &t->str, o->name, pid, o->stream, o->start,
                o->end);
        JW_LIT(w, ",\"args\":{\"corr\":");
        jw_u64(w, o->corr);
        if (o->kind == TR_OP_KERNEL) {
            JW_LIT(w, ",\"grid\":");
            dims(w, o->grid);
            JW_LIT(w, ",\"block\":");
            dims(w, o->block);
            JW_LIT(w, ",\"regs\":");
            jw_u64(w, o->regs);
            JW_LIT(w, ",\"smem\":");
            jw_u64(w, (uint64_t)o->smem_static + o->smem_dynamic);
        } else {
            JW_LIT(w, ",\"bytes\":");
            jw_u64(w, o->bytes);
        }
        if (o->range >= 0) {
            JW_LIT(w, ",\"range\":");
            jw_str(w, &t->str, t->ranges.v[o->range].name);
        }
        if (o->node) {
            JW_LIT(w, ",\"graph_node\":");
            jw_u64(w, o->node);
        }
        if (o->label) {
            JW_LIT(w, ",\"label\":");
            jw_str(w, &t->str, o->label);
        }
        JW_LIT(w, "}}");
        if (o->api >= 0) { /* flow arrow: launch call -> op */
            const tr_api *a = &t->apis.v[o->api];
            jw_event_begin(w);
            JW_LIT(w, "{\"ph\":\"s\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":");
            jw_u64(w, i);
            jw_where(w, t->procs.v[a->proc].pid, a->tid, a->start);
            JW_LIT(w, "},\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":");
            jw_u64(w, i);
            jw_where(w, pid, o->stream, o->start);
            JW_LIT(w, "}");
        }
    }
}

static void write_cpu(jw *w, lpo_trace *t) {
    for (size_t i = 0; i < t->apis.n; i++) { /* CUDA API calls */
        const tr_api *a = &t->apis.v[i];
        x_event(w, "cuda_api", &t->str, a->name, t->procs.v[a->proc].pid, a->tid, a->start, a->end);
        JW_LIT(w, ",\"args\":{\"corr\":");
        jw_u64(w, a->corr);
        JW_LIT(w, "}}");
    }
    for (size_t i = 0; i < t->ranges.n; i++) { /* NVTX ranges */
        const tr_range *r = &t->ranges.v[i];
        const uint32_t pid = t->procs.v[r->proc].pid;
        if (r->kind == 0) {
            x_event(w, "nvtx", &t->str, r->name, pid, r->tid, r->start, r->end);
            if (!r->closed) JW_LIT(w, ",\"args\":{\"unterminated\":true}");
            JW_LIT(w, "}");
            continue;
        }
        for (int half = 0; half < 2; half++) { /* start/end ranges: async begin + end */
            jw_event_begin(w);
            JW_LIT(w, "{\"ph\":\"");
            jw_put(w, half ? "e" : "b", 1);
            JW_LIT(w, "\",\"cat\":\"nvtx\",\"name\":");
            jw_str(w, &t->str, r->name);
            JW_LIT(w, ",\"id\":");
            jw_u64(w, r->id);
            jw_where(w, pid, r->tid, half ? r->end : r->start);
            JW_LIT(w, "}");
        }
    }
    for (size_t i = 0; i < t->marks.n; i++) { /* NVTX markers */
        const tr_mark *m = &t->marks.v[i];
        jw_event_begin(w);
        JW_LIT(w, "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"nvtx\",\"name\":");
        jw_str(w, &t->str, m->name);
        jw_where(w, t->procs.v[m->proc].pid, m->tid, m->ts);
        JW_LIT(w, "}");
    }
    static const char *const sync_names[] = {"sync (unknown)", "cudaEventSynchronize", "cudaStreamWaitEvent",
                                             "cudaStreamSynchronize", "cudaDeviceSynchronize"};
    for (size_t i = 0; i < t->syncs.n; i++) { /* synchronisation, on a track of its own per process */
        const tr_sync *s = &t->syncs.v[i];
        const char *nm = s->type < 5 ? sync_names[s->type] : sync_names[0];
        x_event(w, "sync", &t->str, tr_str_intern(&t->str, nm, strlen(nm), 0), t->procs.v[s->proc].pid, 0,
                s->start, s->end);
        JW_LIT(w, ",\"args\":{\"corr\":");
        jw_u64(w, s->corr);
        JW_LIT(w, ",\"stream\":");
        jw_u64(w, s->stream);
        JW_LIT(w, "}}");
    }
}

static void write_meta(jw *w, lpo_trace *t) {
    char name[128];
    tr_map seen = {0};                        /* (pid, tid) pairs already named */
    for (size_t p = 0; p < t->procs.n; p++) { /* CPU processes */
        snprintf(name, sizeof name, "process %u", t->procs.v[p].pid);
        meta(w, "process_name", t->procs.v[p].pid, -1, name, -1);
        meta(w, "process_sort_index", t->procs.v[p].pid, -1, NULL, (int)p);
        if (t->syncs.n) meta(w, "thread_name", t->procs.v[p].pid, 0, "synchronization", -1);
    }
    for (size_t i = 0; i < t->threads.n; i++) { /* named threads */
        const tr_thread_name *tn = &t->threads.v[i];
        meta(w, "thread_name", t->procs.v[tn->proc].pid, tn->tid, tr_str_get(&t->str, tn->name), -1);
    }
    for (size_t i = 0; i < t->ops.n; i++) { /* GPU pseudo-processes and stream tracks */
        const tr_op *o = &t->ops.v[i];
        const uint32_t pid = gpu_pid(o);
        const uint64_t key = ((uint64_t)pid << 32) | o->stream;
        if (tr_map_get(&seen, key)) continue;
        tr_map_put(&seen, key, 1);
        if (!tr_map_get(&seen, (uint64_t)pid << 32 | 0xffffffffu)) {
            tr_map_put(&seen, (uint64_t)pid << 32 | 0xffffffffu, 1);
            snprintf(name, sizeof name, "GPU %u (process %u)", o->device, t->procs.v[o->proc].pid);
            meta(w, "process_name", pid, -1, name, -1);
            meta(w, "process_sort_index", pid, -1, NULL, 1000 + (int)(pid - GPU_PID_BASE));
        }
        snprintf(name, sizeof name, "stream %u", o->stream);
        meta(w, "thread_name", pid, o->stream, name, -1);
    }
    tr_map_free(&seen);
}

static void write_counters(jw *w, const lpo_trace_counters *c) {
    char name[64];
    int named[64] = {0};
    for (size_t i = 0; i < c->n_samples; i++) { /* each sample: one "C" event per series */
        const int dev = c->device ? c->device[i] : 0;
        const uint32_t pid = COUNTER_PID_BASE + (uint32_t)(dev & 63);
        if (!named[dev & 63]) {
            named[dev & 63] = 1;
            snprintf(name, sizeof name, "GPU %d counters (NVML)", dev);
            meta(w, "process_name", pid, -1, name, -1);
            meta(w, "process_sort_index", pid, -1, NULL, 2000 + dev);
        }
        for (size_t s = 0; s < c->n_series; s++) {
            const double v = c->values[i * c->n_series + s];
            if (!isfinite(v)) continue;
            jw_event_begin(w);
            JW_LIT(w, "{\"ph\":\"C\",\"name\":");
            jw_raw_str(w, c->names[s]);
            JW_LIT(w, ",\"pid\":");
            jw_u64(w, pid);
            JW_LIT(w, ",\"ts\":");
            jw_ts(w, c->t_ns[i]);
            JW_LIT(w, ",\"args\":{\"value\":");
            jw_double(w, v);
            JW_LIT(w, "}}");
        }
    }
}

lpo_status lpo_trace_write_chrome(lpo_trace *t, const lpo_trace_counters *counters, const char *path) {
    lpo_status st = tr_analyze(t);
    if (st) return st;
    /* not "<path>.tmp" + fopen: a link planted there was followed, and a link at path was replaced */
    jw w = {.cap = 4u << 20, .first = 1, .t0 = t->stats.t_begin};
    if ((st = lpo_outfile_open(&w.out, path)) != LPO_OK) return st;
    w.buf = malloc(w.cap);
    if (!w.buf) {
        lpo_outfile_discard(&w.out);
        return lpo_errorf(LPO_E_NOMEM, "trace: out of memory");
    }
    if (counters)
        for (size_t i = 0; i < counters->n_samples; i++) /* counters may start before the first CUDA event */
            if (counters->t_ns[i] < w.t0 || !w.t0) w.t0 = counters->t_ns[i];
    JW_LIT(&w, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"lpo trace\",\"t0_monotonic_ns\":");
    jw_u64(&w, w.t0);
    JW_LIT(&w, "},\n\"traceEvents\":[\n");
    write_meta(&w, t);
    write_cpu(&w, t);
    write_ops(&w, t);
    if (counters) write_counters(&w, counters);
    JW_LIT(&w, "\n]}\n");
    jw_flush(&w);
    free(w.buf);
    if (w.err) {
        st = lpo_errorf(LPO_E_IO, "%s: cannot write the trace: %s", path, strerror(w.out.err));
        lpo_outfile_discard(&w.out);
        return st;
    }
    return lpo_outfile_commit(&w.out);
}
