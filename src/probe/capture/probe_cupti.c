/* The tracer's CUPTI side (liblpo_probe.so): the CUDA injection entry point, activity buffers from a
 * bounded pool, conversion of CUPTI records to the raw format on CUPTI's thread, dropped-record
 * accounting, callbacks on the launch functions (kernel -> innermost NVTX range attribution) and on
 * graph node creation/cloning (graph node -> label), the delay/duration window, and the capture gate.
 * CUPTI calls are checked; a failure is reported once on stderr and tracing goes on without that part
 * (a library inside someone else's process must never abort it). */
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe/capture/probe.h"

#define CUPTI_CHECK(call)                                                                                    \
    do {                                                                                                     \
        CUptiResult r_ = (call);                                                                             \
        if (r_ != CUPTI_SUCCESS) cupti_warn(#call, r_, __FILE__, __LINE__);                                  \
    } while (0)

static void cupti_warn(const char *what, CUptiResult r, const char *file, int line) {
    const char *msg = NULL;
    cuptiGetResultString(r, &msg);
    fprintf(stderr, "lpo probe: %s failed: %s (%s:%d)\n", what, msg ? msg : "?", file, line);
}

static struct {
    pthread_mutex_t pool_mu, en_mu;
    uint8_t **free_bufs; /* zeroed (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER) */
    size_t n_free, n_alloc, max_bufs, buf_size;
    int started, enabled, subscribed, unusable; /* unusable: CUPTI refused the activity callbacks */
    int want_cb, cb_rt, cb_drv, cb_on;          /* launch callbacks: wanted, runtime/driver domains, now on */
    int launch_by_cupti; /* LPO_TRACE_LAUNCH_SRC=cupti: launch calls recorded by CUPTI, not our callbacks */
    CUpti_SubscriberHandle sub;
    /* kernel names: CUPTI's name pointer -> (name, mangled) ids, under G.mu */
    struct {
        const char *p;
        char *copy;
        uint32_t id, mangled;
    } * kn;
    size_t kn_cap, kn_n;
    uint32_t api_name[2][1024]; /* (runtime|driver, cbid) -> string id */
    char *(*demangle)(const char *, char *, size_t *, int *);
    int demangle_looked;
} C = {.pool_mu = PTHREAD_MUTEX_INITIALIZER, .en_mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- buffers ---- */
static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    uint8_t *b = NULL;
    pthread_mutex_lock(&C.pool_mu);
    if (C.n_free) {
        b = C.free_bufs[--C.n_free];
    } else if (C.n_alloc < C.max_bufs) { /* a new one, zeroed here (rare: the pool is recycled) */
        b = aligned_alloc(64, C.buf_size);
        if (b) {
            memset(b, 0, C.buf_size);
            C.n_alloc++;
        }
    }
    pthread_mutex_unlock(&C.pool_mu);
    if (!b) atomic_fetch_add(&G.dropped_probe, 1); /* CUPTI drops (and counts) the records */
    *buffer = b;
    *size = b ? C.buf_size : 0;
    *max_records = 0;
}

static uint32_t kernel_name(const char *p, uint32_t *mangled) {
    if (!p) p = "(unknown kernel)";
    size_t h = ((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull;
    if (C.kn_cap) {
        for (size_t i = h & (C.kn_cap - 1); C.kn[i].p; i = (i + 1) & (C.kn_cap - 1))
            if (C.kn[i].p == p && !strcmp(C.kn[i].copy, p)) {
                *mangled = C.kn[i].mangled;
                return C.kn[i].id;
            }
    }
    if ((C.kn_n + 1) * 2 > C.kn_cap) { /* grow */
        size_t nc = C.kn_cap ? C.kn_cap * 2 : 512;
        __typeof__(C.kn) nk = calloc(nc, sizeof *nk);
        if (!nk) return 0;
        for (size_t i = 0; i < C.kn_cap; i++) { /* each old slot */
            if (!C.kn[i].p) continue;
            size_t j = (((uintptr_t)C.kn[i].p >> 4) * 0x9e3779b97f4a7c15ull) & (nc - 1);
            while (nk[j].p) j = (j + 1) & (nc - 1);
            nk[j] = C.kn[i];
        }
        free(C.kn);
        C.kn = nk;
        C.kn_cap = nc;
    }
    if (!C.demangle_looked) { /* __cxa_demangle from the C++ runtime the program has loaded */
        C.demangle_looked = 1;
        void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
        if (!f) {
            void *lib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
            if (!lib) lib = dlopen("libstdc++.so.6", RTLD_LAZY);
            if (lib) f = dlsym(lib, "__cxa_demangle");
        }
        memcpy(&C.demangle, &f, sizeof f);
    }
    int status = -1;
    char *dem = C.demangle && p[0] == '_' && p[1] == 'Z' ? C.demangle(p, NULL, NULL, &status) : NULL;
    const char *shown = dem && status == 0 ? dem : p;
    uint32_t id = probe_intern_locked(shown, strlen(shown));
    uint32_t mid = shown != p ? probe_intern_locked(p, strlen(p)) : 0;
    free(dem);
    size_t i = h & (C.kn_cap - 1);
    while (C.kn[i].p) i = (i + 1) & (C.kn_cap - 1);
    C.kn[i].p = p;
    C.kn[i].copy = strdup(p);
    C.kn[i].id = id;
    C.kn[i].mangled = mid;
    C.kn_n++;
    *mangled = mid;
    return id;
}

static uint32_t api_name(int driver, uint32_t cbid) {
    if (cbid >= 1024) return 0;
    uint32_t *slot = &C.api_name[driver][cbid];
    if (!*slot) {
        const char *name = NULL;
        if (cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, cbid,
                                 &name) != CUPTI_SUCCESS ||
            !name)
            name = driver ? "(driver call)" : "(runtime call)";
        *slot = probe_intern_locked(name, probe_api_name_len(name));
    }
    return *slot;
}

static inline int in_window(uint64_t t) {
    return t >= G.win_begin && t < G.win_end;
}

/* A GPU record force-flushed before the work finished has no end: counted, left out. */
static inline int complete(uint64_t start, uint64_t end) {
    if (start && end >= start) return 1;
    atomic_fetch_add(&G.incomplete, 1);
    return 0;
}

/* The fields memcpy and memset records share (CUPTI's and ours have the same names for them). */
#define MEMOP_FIELDS(m)                                                                                      \
    .start = (m)->start + off, .end = (m)->end + off, .bytes = (m)->bytes,                                   \
    .graph_node_id = (m)->graphNodeId, .corr = (m)->correlationId, .stream = (m)->streamId,                  \
    .device = (m)->deviceId, .context = (m)->contextId

/* One CUPTI record -> the raw format (G.mu held). */
static void convert(const CUpti_Activity *rec) {
    const int64_t off = G.clock_offset_ns;
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        lpo_raw_kernel r = {.start = k->start + off,
                            .end = k->end + off,
                            .graph_node_id = k->graphNodeId,
                            .corr = k->correlationId,
                            .stream = k->streamId,
                            .device = k->deviceId,
                            .context = k->contextId,
                            .graph_id = k->graphId,
                            .grid = {k->gridX, k->gridY, k->gridZ},
                            .block = {k->blockX, k->blockY, k->blockZ},
                            .static_smem = (uint32_t)k->staticSharedMemory,
                            .dynamic_smem = (uint32_t)k->dynamicSharedMemory,
                            .regs = k->registersPerThread,
                            .launch_type = k->launchType};
        if (!complete(k->start, k->end) || !in_window(r.start)) break;
        r.name = kernel_name(k->name, &r.mangled);
        lpo_raw_put(&G.w, LPO_REC_KERNEL, 0, &r, sizeof r);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
        lpo_raw_memcpy r = {MEMOP_FIELDS(m), .copy_kind = m->copyKind, .src_kind = m->srcKind,
                            .dst_kind = m->dstKind};
        if (complete(m->start, m->end) && in_window(r.start))
            lpo_raw_put(&G.w, LPO_REC_MEMCPY, 0, &r, sizeof r);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
        lpo_raw_memset r = {MEMOP_FIELDS(m), .value = m->value, .memory_kind = m->memoryKind};
        if (complete(m->start, m->end) && in_window(r.start))
            lpo_raw_put(&G.w, LPO_REC_MEMSET, 0, &r, sizeof r);
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
        const int drv = rec->kind == CUPTI_ACTIVITY_KIND_DRIVER;
        lpo_raw_api r = {.start = a->start + off,
                         .end = a->end + off,
                         .corr = a->correlationId,
                         .tid = a->threadId,
                         .cbid = a->cbid,
                         .domain = (uint16_t)drv};
        if (!in_window(r.start)) break;
        r.name = api_name(drv, a->cbid);
        lpo_raw_put(&G.w, LPO_REC_API, 0, &r, sizeof r);
        break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const CUpti_ActivitySynchronization2 *s = (const CUpti_ActivitySynchronization2 *)rec;
        lpo_raw_sync r = {s->start + off, s->end + off, s->correlationId,
                          s->streamId,    s->contextId, (uint32_t)s->type};
        if (in_window(r.start)) lpo_raw_put(&G.w, LPO_REC_SYNC, 0, &r, sizeof r);
        break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const CUpti_ActivityExternalCorrelation *e = (const CUpti_ActivityExternalCorrelation *)rec;
        lpo_raw_launch r = {e->correlationId, 0, e->externalId};
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
            lpo_raw_put(&G.w, LPO_REC_LAUNCH, 0, &r, sizeof r);
        break;
    }
    default: break;
    }
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                   size_t valid) {
    (void)size;
    pthread_mutex_lock(&G.mu);
    CUpti_Activity *rec = NULL;
    if (atomic_load(&G.active))
        while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) convert(rec);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        atomic_fetch_add(&G.dropped_cupti, dropped);
    pthread_mutex_unlock(&G.mu);
    /* zeroed on CUPTI's thread, so that CUPTI need not zero it on the application's when it takes it */
    memset(buffer, 0, C.buf_size);
    pthread_mutex_lock(&C.pool_mu);
    if (C.n_free < C.max_bufs)
        C.free_bufs[C.n_free++] = buffer;
    else
        free(buffer);
    pthread_mutex_unlock(&C.pool_mu);
}

/* ---- callbacks ---- */
/* LPO_ACT_LAUNCH: the launch call itself as an API record (enter/exit times from our clock), unless CUPTI
 * records that domain's calls already (runtime/driver activities); a driver launch made by a runtime
 * launch is the same call and is left out. */
static void launch_call(probe_tls *t, const CUpti_CallbackData *cb, int driver) {
    if (!(G.activities & LPO_ACT_LAUNCH)) return;
    const int recorded_by_cupti =
        C.launch_by_cupti || (G.activities & (driver ? LPO_ACT_DRIVER : LPO_ACT_RUNTIME)) != 0;
    if (cb->callbackSite == CUPTI_API_ENTER) {
        if (!driver) t->in_runtime++;
        if (!recorded_by_cupti) t->enter_ts[driver] = probe_now();
        return;
    }
    if (!driver && t->in_runtime) t->in_runtime--;
    const uint64_t begin = t->enter_ts[driver];
    t->enter_ts[driver] = 0;
    if (recorded_by_cupti || (driver && t->in_runtime) || !begin) return; /* !begin: callbacks just enabled */
    const uint64_t now = probe_now();
    if (now < G.win_begin || now >= G.win_end) return;
    const char *fn = cb->functionName ? cb->functionName : "(launch)";
    lpo_raw_api r = {.start = begin,
                     .end = now,
                     .corr = cb->correlationId,
                     .tid = t->tid,
                     .cbid = 0,
                     .domain = (uint16_t)driver,
                     .name = probe_intern(fn, probe_api_name_len(fn))};
    probe_stage(t, LPO_REC_API, 0, &r, sizeof r);
}

static void on_launch(const CUpti_CallbackData *cb, int driver) {
    probe_tls *t = probe_tls_get();
    if (!t) return;
    launch_call(t, cb, driver);
    if (cb->callbackSite != CUPTI_API_ENTER) return;
    const int gated = G.gate_id && atomic_load_explicit(&G.gate_depth, memory_order_relaxed) > 0;
    const uint32_t d = t->depth < PROBE_MAX_DEPTH ? t->depth : PROBE_MAX_DEPTH;
    uint64_t range = 0;
    for (uint32_t k = d; k > 0 && !range; k--) range = t->stack[k - 1].id; /* innermost recorded range */
    if ((!range && !gated) || cb->correlationId == t->last_corr) return;
    t->last_corr = cb->correlationId;
    lpo_raw_launch l = {cb->correlationId, gated ? LPO_LAUNCH_GATE_OPEN : 0u, range};
    probe_stage(t, LPO_REC_LAUNCH, 0, &l, sizeof l);
}

static void on_graph(CUpti_CallbackId cbid, const CUpti_ResourceData *rd) {
    const CUpti_GraphData *g = rd ? (const CUpti_GraphData *)rd->resourceDescriptor : NULL;
    probe_tls *t = probe_tls_get();
    if (!g || !t) return;
    uint64_t node = 0, orig = 0;
    if (cuptiGetGraphNodeId(g->node, &node) != CUPTI_SUCCESS) return;
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) { /* captured or added inside a range: its label */
        const uint32_t d = t->depth < PROBE_MAX_DEPTH ? t->depth : PROBE_MAX_DEPTH;
        for (uint32_t k = d; k > 0; k--) {
            if (!t->stack[k - 1].id) continue;
            lpo_raw_node_label nl = {node, t->stack[k - 1].name, 0};
            probe_stage(t, LPO_REC_NODE_LABEL, 0, &nl, sizeof nl);
            break;
        }
    } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED && g->originalNode &&
               cuptiGetGraphNodeId(g->originalNode, &orig) == CUPTI_SUCCESS) {
        lpo_raw_node_clone nc = {node, orig};
        probe_stage(t, LPO_REC_NODE_CLONE, 0, &nc, sizeof nc);
    }
}

static void CUPTIAPI on_callback(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid,
                                 const void *data) {
    (void)ud;
    if (!atomic_load_explicit(&G.active, memory_order_relaxed)) return;
    if (dom == CUPTI_CB_DOMAIN_RUNTIME_API || dom == CUPTI_CB_DOMAIN_DRIVER_API)
        on_launch((const CUpti_CallbackData *)data, dom == CUPTI_CB_DOMAIN_DRIVER_API);
    else if (dom == CUPTI_CB_DOMAIN_RESOURCE)
        on_graph(cbid, (const CUpti_ResourceData *)data);
}

static const CUpti_CallbackId runtime_launch_cbids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
    /* memory operations launch GPU work too */
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020,
};

static const CUpti_CallbackId driver_launch_cbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    /* memory operations (the runtime's are made through them; LPO_TRACE_LAUNCH_CB=driver needs them) */
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz,
};

/* LPO_TRACE_LAUNCH_SRC=cupti (experiment, docs/perf-notes.md): the launch calls as CUPTI's own API records
 * (runtime and driver launch functions only) instead of our callbacks. */
static void enable_launch_records(int on, uint32_t acts) {
    for (size_t i = 0;
         !(acts & LPO_ACT_RUNTIME) && i < sizeof runtime_launch_cbids / sizeof runtime_launch_cbids[0]; i++)
        CUPTI_CHECK(cuptiActivityEnableRuntimeApi(runtime_launch_cbids[i], (uint8_t)on));
    for (size_t i = 0;
         !(acts & LPO_ACT_DRIVER) && i < sizeof driver_launch_cbids / sizeof driver_launch_cbids[0]; i++)
        CUPTI_CHECK(cuptiActivityEnableDriverApi(driver_launch_cbids[i], (uint8_t)on));
}

/* ---- activities ---- */
static const struct {
    uint32_t bit;
    CUpti_ActivityKind kind;
} kinds[] = {
    {LPO_ACT_KERNEL, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL},
    {LPO_ACT_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY},
    {LPO_ACT_MEMSET, CUPTI_ACTIVITY_KIND_MEMSET},
    {LPO_ACT_SYNC, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION},
    {LPO_ACT_RUNTIME, CUPTI_ACTIVITY_KIND_RUNTIME},
    {LPO_ACT_DRIVER, CUPTI_ACTIVITY_KIND_DRIVER},
};

static void set_launch_callbacks(int on);

/* Activities (and the launch callbacks) on or off; C.en_mu held. */
static void enable_locked(int on) {
    if (!C.started || C.enabled == on) return;
    uint32_t acts = G.activities;
    if (G.attribution == LPO_ATTR_EXTCORR)
        acts |= LPO_ACT_RUNTIME | LPO_ACT_DRIVER;               /* needed for its records */
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) /* each requested kind */
        if (acts & kinds[i].bit)
            CUPTI_CHECK(on ? cuptiActivityEnable(kinds[i].kind) : cuptiActivityDisable(kinds[i].kind));
    if (G.attribution == LPO_ATTR_EXTCORR)
        CUPTI_CHECK(on ? cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)
                       : cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION));
    if (C.launch_by_cupti) /* CUPTI's API records for the launch functions only */
        enable_launch_records(on, acts);
    set_launch_callbacks(on);
    C.enabled = on;
}

void probe_cupti_enable(int on) {
    pthread_mutex_lock(&C.en_mu);
    enable_locked(on);
    pthread_mutex_unlock(&C.en_mu);
}

void probe_cupti_flush(int forced) {
    if (C.started) cuptiActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
}

/* The gate opened or closed: tracing on while an instance is open inside the window, off otherwise, so a
 * gated program runs untraced outside its ranges (no activity, no launch callback). Read under the lock:
 * of two threads opening and closing at once, the last to take it sees the final depth. */
void probe_gate_sync(void) {
    pthread_mutex_lock(&C.en_mu);
    const uint64_t now = probe_now();
    enable_locked(atomic_load(&G.gate_depth) > 0 && now >= G.win_begin && now < G.win_end);
    pthread_mutex_unlock(&C.en_mu);
}

void probe_cupti_ext_push(uint64_t id) {
    if (C.started) cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
}

void probe_cupti_ext_pop(void) {
    uint64_t id;
    if (C.started) cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
}

uint64_t probe_cupti_node_id(void *node) {
    uint64_t id = 0;
    if (!node || cuptiGetGraphNodeId((CUgraphNode)node, &id) != CUPTI_SUCCESS) return 0;
    return id;
}

static uint64_t CUPTIAPI monotonic_ts(void) {
    return probe_now();
}

/* LPO_TRACE_LAUNCH_CB (experiment, docs/perf-notes.md): which launch callbacks to subscribe: "both"
 * (default), "runtime" (programs that launch through the driver, e.g. Triton, lose attribution) or
 * "driver" (runtime launches are seen through their driver call; memcpy/memset calls are not). They are
 * on while the activities are (C.en_mu held). */
static void set_launch_callbacks(int on) {
    if (!C.want_cb || C.cb_on == on) return;
    for (size_t i = 0; C.cb_rt && i < sizeof runtime_launch_cbids / sizeof runtime_launch_cbids[0]; i++)
        CUPTI_CHECK(
            cuptiEnableCallback((uint32_t)on, C.sub, CUPTI_CB_DOMAIN_RUNTIME_API, runtime_launch_cbids[i]));
    for (size_t i = 0; C.cb_drv && i < sizeof driver_launch_cbids / sizeof driver_launch_cbids[0]; i++)
        CUPTI_CHECK(
            cuptiEnableCallback((uint32_t)on, C.sub, CUPTI_CB_DOMAIN_DRIVER_API, driver_launch_cbids[i]));
    C.cb_on = on;
}

/* The delay/duration window: enable at its start, disable (and flush) at its end. */
static void *window_thread(void *arg) {
    (void)arg;
    struct timespec ts;
    ts.tv_sec = (time_t)(G.win_begin / 1000000000ull);
    ts.tv_nsec = (long)(G.win_begin % 1000000000ull);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
    if (!G.gate_id || atomic_load(&G.gate_depth) > 0) probe_cupti_enable(1);
    if (G.win_end != UINT64_MAX) {
        ts.tv_sec = (time_t)(G.win_end / 1000000000ull);
        ts.tv_nsec = (long)(G.win_end % 1000000000ull);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
        }
        probe_cupti_enable(0);
        probe_cupti_flush(0);
    }
    return NULL;
}

static size_t env_size(const char *name, size_t def, size_t lo, size_t hi) {
    const char *v = getenv(name);
    size_t x = v && *v ? (size_t)strtoull(v, NULL, 10) : def;
    return x < lo ? lo : x > hi ? hi : x;
}

int probe_cupti_start(void) {
    pthread_mutex_lock(&C.en_mu);
    if (C.unusable) {
        pthread_mutex_unlock(&C.en_mu);
        return PROBE_CUPTI_UNUSABLE;
    }
    const int first = !C.started;
    if (first) {
        C.buf_size = env_size("LPO_TRACE_BUFFER_MB", 8, 1, 256) << 20;
        C.max_bufs = env_size("LPO_TRACE_BUFFERS", 64, 2, 4096);
        C.free_bufs = calloc(C.max_bufs, sizeof *C.free_bufs);
        CUPTI_CHECK(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
        /* LPO_TRACE_CLOCK=cupti (experiment): CUPTI keeps its own clock, shifted to CLOCK_MONOTONIC */
        const char *clk = getenv("LPO_TRACE_CLOCK"), *src = getenv("LPO_TRACE_LAUNCH_SRC");
        C.launch_by_cupti = (G.activities & LPO_ACT_LAUNCH) && src && !strcmp(src, "cupti");
        if ((clk && !strcmp(clk, "cupti")) ||
            cuptiActivityRegisterTimestampCallback(monotonic_ts) != CUPTI_SUCCESS) {
            uint64_t ts = 0;
            const uint64_t before = probe_now();
            if (cuptiGetTimestamp(&ts) == CUPTI_SUCCESS && ts)
                G.clock_offset_ns = (int64_t)((before + probe_now()) / 2) - (int64_t)ts;
        }
        /* LPO_TRACE_DEVICE_BUFFER_MB (experiment, docs/perf-notes.md): CUPTI's device buffer for kernel
         * timestamps per context (default ~3 MB = 100,000 kernels; a full one is flushed in the launching
         * thread) */
        const size_t dev_mb = env_size("LPO_TRACE_DEVICE_BUFFER_MB", 0, 0, 1024);
        if (dev_mb) {
            size_t dev_bytes = dev_mb << 20, dev_size = sizeof dev_bytes;
            CUPTI_CHECK(
                cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &dev_size, &dev_bytes));
        }
        uint8_t zeroed = 1;
        size_t attr_size = sizeof zeroed;
        CUPTI_CHECK(
            cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &attr_size, &zeroed));
        CUptiResult r = cuptiActivityRegisterCallbacks(buf_requested, buf_completed);
        if (r != CUPTI_SUCCESS) { /* no activity record can reach us: nothing to trace but NVTX */
            cupti_warn(
                "cuptiActivityRegisterCallbacks (another CUPTI tool in this process, such as "
                "compute-sanitizer, Nsight Systems or Nsight Compute?): no GPU activity can be recorded",
                r, __FILE__, __LINE__);
            C.unusable = 1;
            C.started = 1;
            pthread_mutex_unlock(&C.en_mu);
            return PROBE_CUPTI_UNUSABLE;
        }
        r = cuptiSubscribe(&C.sub, on_callback, NULL);
        if (r == CUPTI_SUCCESS) {
            C.subscribed = 1;
            const char *v = getenv("LPO_TRACE_LAUNCH_CB");
            C.cb_rt = !v || strcmp(v, "driver") != 0, C.cb_drv = !v || strcmp(v, "runtime") != 0;
            C.want_cb = G.attribution == LPO_ATTR_CALLBACK || G.gate_name[0] ||
                        ((G.activities & LPO_ACT_LAUNCH) && !C.launch_by_cupti);
            CUPTI_CHECK(cuptiEnableCallback(1, C.sub, CUPTI_CB_DOMAIN_RESOURCE,
                                            CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED));
            CUPTI_CHECK(cuptiEnableCallback(1, C.sub, CUPTI_CB_DOMAIN_RESOURCE,
                                            CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED));
        } else {
            cupti_warn("cuptiSubscribe (another CUPTI tool in this process?): kernels are traced but not "
                       "attributed to NVTX ranges",
                       r, __FILE__, __LINE__);
        }
        C.started = 1;
    }
    pthread_mutex_unlock(&C.en_mu);
    const int deferred = G.gate_name[0] || G.win_begin > probe_now();
    if (!deferred) probe_cupti_enable(1);
    if (first && (G.win_begin || G.win_end != UINT64_MAX)) {
        pthread_t th;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &a, window_thread, NULL) != 0) probe_cupti_enable(1);
        pthread_attr_destroy(&a);
    }
    return 0;
}

/* ---- the CUDA injection entry point (CUDA_INJECTION64_PATH) ---- */
PROBE_EXPORT int InitializeInjection(void) {
    if (probe_init_from_env() != 0) return 1; /* not configured: stay out of the way */
    probe_cupti_start();
    return 1;
}
