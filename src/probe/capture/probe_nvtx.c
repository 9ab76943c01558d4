/* The tracer's NVTX side (liblpo_probe.so as NVTX_INJECTION64_PATH): InitializeInjectionNvtx2 installs
 * our handlers in the NVTX function tables of the calling NVTX instance (CORE: the nvtxRangePush/Pop,
 * Start/End, Mark, NameOsThread functions; CORE2: their domain variants and registered strings).
 * Every instance (a process may hold several: torch, cuBLAS, the program) calls it; they all land in
 * the same library state. Message strings are interned (per-thread cache, then the global table). */
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>
#include <string.h>
#include <wchar.h>

#include "probe/capture/probe.h"

/* A wide string as UTF-8 (cut at n bytes). */
static size_t wide_to_utf8(const wchar_t *w, char *out, size_t n) {
    size_t o = 0;
    for (; w && *w && o + 4 < n; w++) { /* each code point */
        uint32_t c = (uint32_t)*w;
        if (c < 0x80) {
            out[o++] = (char)c;
        } else if (c < 0x800) {
            out[o++] = (char)(0xc0 | (c >> 6));
            out[o++] = (char)(0x80 | (c & 0x3f));
        } else if (c < 0x10000) {
            out[o++] = (char)(0xe0 | (c >> 12));
            out[o++] = (char)(0x80 | ((c >> 6) & 0x3f));
            out[o++] = (char)(0x80 | (c & 0x3f));
        } else {
            out[o++] = (char)(0xf0 | (c >> 18));
            out[o++] = (char)(0x80 | ((c >> 12) & 0x3f));
            out[o++] = (char)(0x80 | ((c >> 6) & 0x3f));
            out[o++] = (char)(0x80 | (c & 0x3f));
        }
    }
    out[o] = 0;
    return o;
}

static uint32_t ascii_id(const char *s) {
    if (!atomic_load_explicit(&G.active, memory_order_relaxed)) return 0;
    return s ? probe_intern(s, strlen(s)) : 0;
}

static uint32_t wide_id(const wchar_t *w) {
    if (!atomic_load_explicit(&G.active, memory_order_relaxed)) return 0;
    char buf[1024];
    size_t n = wide_to_utf8(w, buf, sizeof buf);
    return probe_intern(buf, n);
}

static uint32_t attr_id(const nvtxEventAttributes_t *a) {
    if (!a) return 0;
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return ascii_id(a->message.ascii);
    case NVTX_MESSAGE_TYPE_UNICODE: return wide_id(a->message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED: return (uint32_t)(uintptr_t)a->message.registered;
    default: return 0;
    }
}

static uint32_t domain_id(nvtxDomainHandle_t d) {
    return (uint32_t)(uintptr_t)d;
}

/* ---- CORE ---- */
static void mark_ex(const nvtxEventAttributes_t *a) {
    probe_mark(attr_id(a), 0);
}
static void mark_a(const char *m) {
    probe_mark(ascii_id(m), 0);
}
static void mark_w(const wchar_t *m) {
    probe_mark(wide_id(m), 0);
}
static nvtxRangeId_t start_ex(const nvtxEventAttributes_t *a) {
    return probe_range_start(attr_id(a), 0);
}
static nvtxRangeId_t start_a(const char *m) {
    return probe_range_start(ascii_id(m), 0);
}
static nvtxRangeId_t start_w(const wchar_t *m) {
    return probe_range_start(wide_id(m), 0);
}
static void range_end(nvtxRangeId_t id) {
    probe_range_end(id);
}
static int push_ex(const nvtxEventAttributes_t *a) {
    return probe_push(attr_id(a), 0);
}
static int push_a(const char *m) {
    return probe_push(ascii_id(m), 0);
}
static int push_w(const wchar_t *m) {
    return probe_push(wide_id(m), 0);
}
static int pop(void) {
    return probe_pop();
}
static void name_thread_a(uint32_t tid, const char *name) {
    probe_thread_name(tid, ascii_id(name));
}
static void name_thread_w(uint32_t tid, const wchar_t *name) {
    probe_thread_name(tid, wide_id(name));
}

/* ---- CORE2 (domains) ---- */
static void d_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    probe_mark(attr_id(a), domain_id(d));
}
static nvtxRangeId_t d_start_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    return probe_range_start(attr_id(a), domain_id(d));
}
static void d_end(nvtxDomainHandle_t d, nvtxRangeId_t id) {
    (void)d;
    probe_range_end(id);
}
static int d_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    return probe_push(attr_id(a), domain_id(d));
}
static int d_pop(nvtxDomainHandle_t d) {
    (void)d;
    return probe_pop();
}
static nvtxStringHandle_t d_register_a(nvtxDomainHandle_t d, const char *s) {
    (void)d;
    return (nvtxStringHandle_t)(uintptr_t)ascii_id(s);
}
static nvtxStringHandle_t d_register_w(nvtxDomainHandle_t d, const wchar_t *s) {
    (void)d;
    return (nvtxStringHandle_t)(uintptr_t)wide_id(s);
}
/* A domain handle is the id of its name (never NULL: NULL is the default domain). */
static nvtxDomainHandle_t d_create_a(const char *name) {
    uint32_t id = ascii_id(name);
    return (nvtxDomainHandle_t)(uintptr_t)(id ? id : 0xffffffffu);
}
static nvtxDomainHandle_t d_create_w(const wchar_t *name) {
    uint32_t id = wide_id(name);
    return (nvtxDomainHandle_t)(uintptr_t)(id ? id : 0xffffffffu);
}
static void d_destroy(nvtxDomainHandle_t d) {
    (void)d;
}

/* Replaces slot id of a table of `size` entries (the NVTX convention: size is the last valid id). */
static void set_slot(NvtxFunctionTable tbl, unsigned size, unsigned id, NvtxFunctionPointer fn) {
    if (tbl && id <= size && tbl[id]) *tbl[id] = fn;
}

/* Function pointers of other types as NVTX's generic one (the table casts them back). */
#define FN(f) ((NvtxFunctionPointer)(void (*)(void))(f))

/* NVTX looks up its entry points with dlsym on this library's handle, which also searches the libraries
 * it depends on: an entry point not defined here resolves to libcupti's (libcupti exports NVTX injection
 * entry points of its own, which expect CUPTI itself to be the injection; reached through us they crash:
 * NCCL 2.28's init, which registers NVTX extension modules, died with a segfault inside libcupti under the
 * tracer). So each one is defined here. Extension modules (payloads, counters, memory regions): the tracer
 * attaches to none of their functions, which NVTX then makes no-ops. The NVTX 1 entry point: declined (the
 * instance stays a no-op; NVTX 2 and 3 clients call InitializeInjectionNvtx2 below). */
PROBE_EXPORT int InitializeInjectionNvtxExtension(void *module_info);
PROBE_EXPORT int InitializeInjectionNvtxExtension(void *module_info) {
    (void)module_info;
    return 1;
}
PROBE_EXPORT int InitializeInjectionNvtx(void *get_table);
PROBE_EXPORT int InitializeInjectionNvtx(void *get_table) {
    (void)get_table;
    return 0;
}

PROBE_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table);
PROBE_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
    if (probe_init_from_env() != 0 || !get_table) return 0; /* not configured: NVTX stays a no-op */
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get_table(NVTX_ETID_CALLBACKS);
    if (!cb || !cb->GetModuleFunctionTable) return 0;
    NvtxFunctionTable t = NULL;
    unsigned n = 0;
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &n)) {
        set_slot(t, n, NVTX_CBID_CORE_MarkEx, FN(mark_ex));
        set_slot(t, n, NVTX_CBID_CORE_MarkA, FN(mark_a));
        set_slot(t, n, NVTX_CBID_CORE_MarkW, FN(mark_w));
        set_slot(t, n, NVTX_CBID_CORE_RangeStartEx, FN(start_ex));
        set_slot(t, n, NVTX_CBID_CORE_RangeStartA, FN(start_a));
        set_slot(t, n, NVTX_CBID_CORE_RangeStartW, FN(start_w));
        set_slot(t, n, NVTX_CBID_CORE_RangeEnd, FN(range_end));
        set_slot(t, n, NVTX_CBID_CORE_RangePushEx, FN(push_ex));
        set_slot(t, n, NVTX_CBID_CORE_RangePushA, FN(push_a));
        set_slot(t, n, NVTX_CBID_CORE_RangePushW, FN(push_w));
        set_slot(t, n, NVTX_CBID_CORE_RangePop, FN(pop));
        set_slot(t, n, NVTX_CBID_CORE_NameOsThreadA, FN(name_thread_a));
        set_slot(t, n, NVTX_CBID_CORE_NameOsThreadW, FN(name_thread_w));
    }
    t = NULL;
    n = 0;
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n)) {
        set_slot(t, n, NVTX_CBID_CORE2_DomainMarkEx, FN(d_mark_ex));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRangeStartEx, FN(d_start_ex));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRangeEnd, FN(d_end));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRangePushEx, FN(d_push_ex));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRangePop, FN(d_pop));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRegisterStringA, FN(d_register_a));
        set_slot(t, n, NVTX_CBID_CORE2_DomainRegisterStringW, FN(d_register_w));
        set_slot(t, n, NVTX_CBID_CORE2_DomainCreateA, FN(d_create_a));
        set_slot(t, n, NVTX_CBID_CORE2_DomainCreateW, FN(d_create_w));
        set_slot(t, n, NVTX_CBID_CORE2_DomainDestroy, FN(d_destroy));
    }
    return 1;
}
