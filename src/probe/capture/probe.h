/* Internals of liblpo_probe.so, the tracer that runs inside the traced process (CUDA injection library,
 * NVTX injection library, and the in-process tracer of lpo's engine). Not part of lpo_core: it links
 * CUPTI and is built only with a CUDA toolkit (cmake/probe.cmake).
 *
 * Threads and the hot path
 * - Application threads pay only for what they must: an NVTX push/pop appends a 40-byte record to a
 *   per-thread staging block (no lock) and keeps a per-thread range stack; a launch inside a range
 *   appends a 24-byte LAUNCH record from a CUPTI callback. A staging block is handed to the file
 *   writer (one mutex) when full, every 16 KiB.
 * - CUPTI activity buffers come from a pool (LPO_TRACE_BUFFERS x LPO_TRACE_BUFFER_MB); CUPTI fills
 *   them and hands them back on its own thread, where they are converted to the raw format and the
 *   buffer returns to the pool. When the pool is exhausted CUPTI drops records: counted, never silent.
 * - Everything is flushed at exit (atexit), on fatal signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT,
 *   and SIGTERM when the program left it at its default) and at lpo_probe_impl_stop; a program that
 *   crashes leaves a readable partial trace.
 * - State lives in the library, not per initialisation: CUDA and every NVTX instance in the process
 *   (torch loads several) initialise the same library. */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "probe/trace_format.h"

#define PROBE_EXPORT      __attribute__((visibility("default")))
#define PROBE_MAX_DEPTH   128
#define PROBE_STAGE_BYTES 16384

typedef struct probe_tls {
    uint32_t tid; /* gettid() */
    uint32_t depth;
    struct {
        uint64_t id;
        uint32_t name;
    } stack[PROBE_MAX_DEPTH];
    uint32_t last_corr;   /* the runtime and driver callbacks of one launch share it: record once */
    uint32_t in_runtime;  /* inside a runtime launch call (its nested driver call is not recorded again) */
    uint64_t enter_ts[2]; /* LPO_ACT_LAUNCH: entry time of the runtime / driver launch call */
    size_t stage_len;
    uint8_t stage[PROBE_STAGE_BYTES];
    struct {
        uint32_t hash, id;
        const char *s; /* the interned copy */
        size_t len;
    } cache[64]; /* recent strings -> ids, without the lock */
    struct probe_tls *next;
    int dead; /* the thread exited: its block was flushed */
} probe_tls;

typedef struct {
    pthread_mutex_t mu; /* the writer, the string table, conversions */
    lpo_raw_writer w;
    atomic_int active; /* recording (writer open) */
    int inited;        /* probe_init ran */
    char dir[3072];
    int session; /* in-process sessions: trace-<pid>-<session>.lpot */
    uint32_t activities, attribution;
    char gate_name[256];
    uint32_t gate_id;
    atomic_int gate_depth; /* gate ranges open now (any thread) */
    uint64_t gate_start_ids[16];
    uint64_t win_begin, win_end; /* LPO_REC_WINDOW; 0 / UINT64_MAX when none */
    uint64_t delay_ns, duration_ns;
    int64_t clock_offset_ns;
    /* strings */
    struct {
        uint32_t hash, id;
        char *s;
        size_t len;
    } * strs;
    size_t n_strs, cap_strs; /* hash table (open addressing) */
    uint32_t next_str;
    /* threads */
    probe_tls *threads;
    pthread_key_t key;
    atomic_ullong next_range;
    atomic_ullong dropped_cupti, dropped_probe, dropped_staged, incomplete;
    atomic_int flushing; /* a flush is in progress (signal or exit) */
} probe_state;

extern probe_state G;

/* ---- probe_core.c -------------------------------------------------------------------------------------- */
uint64_t probe_now(void); /* CLOCK_MONOTONIC ns (trace_clock.h: via the TSC where cheaper): every record */
/* Reads the LPO_TRACE_* environment once; 0 when tracing is configured (LPO_TRACE_DIR set). */
int probe_init_from_env(void);
/* Opens this process's raw file in dir with the current settings; 0 or -1. */
int probe_open(const char *dir);
probe_tls *probe_tls_get(void);
/* Appends a record to the thread's staging block (hands the block to the writer when full). */
void probe_stage(probe_tls *t, uint16_t type, uint32_t aux, const void *body, size_t len);
/* Length of a CUDA API name without its "_vNNNN" suffix ("cudaLaunchKernel_v7000" -> 16). */
size_t probe_api_name_len(const char *name);
/* Id of a string (interned; the first use writes a STRING record). */
uint32_t probe_intern(const char *s, size_t len);
uint32_t probe_intern_locked(const char *s, size_t len); /* with G.mu held */
/* NVTX-level operations (also the in-process API) */
int probe_push(uint32_t name, uint32_t domain);
int probe_pop(void);
uint64_t probe_range_start(uint32_t name, uint32_t domain);
void probe_range_end(uint64_t id);
void probe_mark(uint32_t name, uint32_t domain);
void probe_thread_name(uint32_t tid, uint32_t name);
/* Writes everything out: CUPTI buffers (forced), staging blocks, counters, an END record. */
void probe_flush_all(uint32_t reason, uint32_t sig);

/* ---- probe_cupti.c ------------------------------------------------------------------------------------ */
/* Subscribes to CUPTI and enables the activities (unless a gate or a delay defers them); 0, or
 * PROBE_CUPTI_UNUSABLE when another CUPTI tool holds the activity API in this process. */
#define PROBE_CUPTI_UNUSABLE LPO_PROBE_START_NO_CUPTI
int probe_cupti_start(void);
void probe_cupti_enable(int on);        /* activities and launch callbacks on/off */
void probe_cupti_flush(int forced);     /* cuptiActivityFlushAll */
void probe_cupti_ext_push(uint64_t id); /* external correlation (LPO_ATTR_EXTCORR) */
void probe_cupti_ext_pop(void);
uint64_t probe_cupti_node_id(void *node); /* cuptiGetGraphNodeId; 0 on failure */
void probe_gate_sync(void); /* a gate opened or closed: tracing on while one is open (in the window) */

/* ---- exported entry points ---- */
PROBE_EXPORT int InitializeInjection(void); /* CUDA_INJECTION64_PATH */
/* InitializeInjectionNvtx2 (NVTX_INJECTION64_PATH) is declared in probe_nvtx.c with NVTX's types. */
/* In-process API (include/lpo/probe.h binds these with dlsym): 0 on success. attribution: LPO_ATTR_*. */
PROBE_EXPORT int lpo_probe_impl_start(const char *dir, uint32_t activities, int attribution,
                                      const char *capture_range);
PROBE_EXPORT int lpo_probe_impl_stop(void);
PROBE_EXPORT int lpo_probe_impl_active(void);
PROBE_EXPORT void lpo_probe_impl_push(const char *label);
PROBE_EXPORT void lpo_probe_impl_pop(void);
PROBE_EXPORT void lpo_probe_impl_graph_node_label(uint64_t node_id, const char *label);
PROBE_EXPORT uint64_t lpo_probe_impl_graph_node_id(void *cu_graph_node);
