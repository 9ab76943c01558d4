/* The raw trace file ("trace-<pid>.lpot"): what the tracer (src/probe/capture/, inside the traced
 * process) writes and what `lpo trace` / `lpo report trace` read back (src/probe/trace_load.c).
 *
 * Designed for fast post-processing (1 million kernels summarised in well under 2 s) and for crash
 * safety: a 64-byte file header, then a stream of records, each an 8-byte header {type, size, aux}
 * followed by a fixed-size body (strings: their bytes, NUL-padded to a multiple of 8). Every record
 * is a multiple of 8 bytes, so the reader walks the file with one pointer and no parsing; a file cut
 * short by a crash ends at the last complete record (the reader stops at a record that runs past the
 * end and reports the file as truncated). Unknown record types are skipped by size (newer writers).
 * Host byte order (the file is read on the machine that wrote it). Strings (kernel names, NVTX
 * messages, API names) are written once as STRING records and referred to by id (1-based; 0 = none).
 *
 * Timestamps are nanoseconds of CLOCK_MONOTONIC (the tracer gives CUPTI that clock through
 * cuptiActivityRegisterTimestampCallback) plus the header's clock_offset_ns, which is non-zero only
 * when CUPTI kept its own clock (CLOCK_REALTIME): the reader adds the offset to every timestamp. The
 * NVML sampler of `lpo trace` samples CLOCK_MONOTONIC too, so counter tracks line up with kernels. */
#pragma once
#include <stdint.h>

#include "lpo/trace.h" /* LPO_ACT_*: the activities a trace records */

#define LPO_TRACE_MAGIC   "LPOTRC1\n" /* 8 bytes, no NUL */
#define LPO_TRACE_VERSION 1u

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t header_size; /* sizeof this struct; records start here */
    uint32_t pid;
    uint32_t flags;          /* LPO_TRACE_F_* */
    uint64_t t_start_ns;     /* when the tracer started in this process */
    int64_t clock_offset_ns; /* add to every timestamp to get CLOCK_MONOTONIC */
    uint32_t activities;     /* LPO_ACT_* mask that was requested */
    uint32_t attribution;    /* LPO_ATTR_* */
    uint64_t reserved[2];
} lpo_raw_header;

enum {
    LPO_TRACE_F_GATED = 1u,    /* an NVTX capture range was set: see LPO_REC_GATE */
    LPO_TRACE_F_WINDOWED = 2u, /* a delay/duration window was set: see LPO_REC_WINDOW */
    LPO_TRACE_F_TSC = 4u, /* timestamps read through the TSC, mapped onto CLOCK_MONOTONIC (trace_clock.h) */
};

/* lpo_probe_impl_start's result when another CUPTI tool (compute-sanitizer, Nsight Systems or Compute) holds
 * CUPTI's activity API in the process: nothing but NVTX could be recorded, so no session is started. */
#define LPO_PROBE_START_NO_CUPTI (-2)

/* How kernels are linked to the NVTX range open at their launch. */
enum {
    LPO_ATTR_NONE = 0,
    LPO_ATTR_CALLBACK = 1, /* CUPTI callbacks on the launch functions record (correlation id, range) */
    LPO_ATTR_EXTCORR = 2,  /* a CUPTI external correlation id pushed per range */
};

typedef enum {
    LPO_REC_STRING = 1,       /* aux = string id; body = bytes, NUL-padded */
    LPO_REC_KERNEL = 2,       /* lpo_raw_kernel */
    LPO_REC_MEMCPY = 3,       /* lpo_raw_memcpy */
    LPO_REC_MEMSET = 4,       /* lpo_raw_memset */
    LPO_REC_API = 5,          /* lpo_raw_api: a CUDA runtime or driver call */
    LPO_REC_SYNC = 6,         /* lpo_raw_sync */
    LPO_REC_RANGE_BEGIN = 7,  /* lpo_raw_range_begin */
    LPO_REC_RANGE_END = 8,    /* lpo_raw_range_end */
    LPO_REC_MARK = 9,         /* lpo_raw_mark: an NVTX marker */
    LPO_REC_LAUNCH = 10,      /* lpo_raw_launch: correlation id -> innermost open range */
    LPO_REC_NODE_LABEL = 11,  /* lpo_raw_node_label: graph node id -> label */
    LPO_REC_NODE_CLONE = 12,  /* lpo_raw_node_clone: graph node id -> the node it was cloned from */
    LPO_REC_DROPPED = 13,     /* lpo_raw_dropped: records lost (cumulative counts; the last one wins) */
    LPO_REC_THREAD_NAME = 14, /* lpo_raw_thread_name */
    LPO_REC_END = 15,         /* lpo_raw_end: the tracer flushed (exit, signal, stop) */
    LPO_REC_WINDOW = 16,      /* lpo_raw_window: the delay/duration window in trace time */
    LPO_REC_GATE = 17,        /* aux = string id of the NVTX capture range's name */
} lpo_raw_type;

typedef struct {
    uint16_t type; /* lpo_raw_type */
    uint16_t size; /* whole record in bytes, header included; a multiple of 8 */
    uint32_t aux;
} lpo_raw_rec;

/* The largest record (size is 16 bits and a multiple of 8) and the longest body it holds: a STRING of
 * LPO_RAW_BODY_MAX bytes fills its record without a NUL (the reader copies it), a longer one is cut there
 * (demangled C++ kernel names reach 10 KB and more). */
#define LPO_RAW_REC_MAX  65528u
#define LPO_RAW_BODY_MAX (LPO_RAW_REC_MAX - 8u)

typedef struct {
    uint64_t start, end;    /* ns */
    uint64_t graph_node_id; /* 0 unless replayed from a CUDA graph */
    uint32_t corr;          /* CUPTI correlation id (of the launching API call) */
    uint32_t name;          /* string id: demangled name */
    uint32_t mangled;       /* string id: mangled name (0 when the same) */
    uint32_t stream, device, context, graph_id;
    int32_t grid[3], block[3];
    uint32_t static_smem, dynamic_smem;
    uint16_t regs;
    uint8_t launch_type, pad8;
} lpo_raw_kernel;

typedef struct {
    uint64_t start, end, bytes, graph_node_id;
    uint32_t corr, stream, device, context;
    uint8_t copy_kind, src_kind, dst_kind, pad8; /* CUpti_ActivityMemcpyKind / CUpti_ActivityMemoryKind */
    uint32_t pad32;
} lpo_raw_memcpy;

typedef struct {
    uint64_t start, end, bytes, graph_node_id;
    uint32_t corr, stream, device, context, value, memory_kind;
} lpo_raw_memset;

typedef struct {
    uint64_t start, end;
    uint32_t corr, tid, cbid;
    uint16_t domain, pad16; /* 0 runtime, 1 driver */
    uint32_t name;          /* string id of the function name */
    uint32_t pad32;
} lpo_raw_api;

typedef struct {
    uint64_t start, end;
    uint32_t corr, stream, context, type; /* CUpti_ActivitySynchronizationType */
} lpo_raw_sync;

typedef struct {
    uint64_t ts;
    uint64_t id;     /* unique in the process, > 0 */
    uint64_t parent; /* innermost enclosing push/pop range on the thread, 0 = none */
    uint32_t tid, name, domain;
    uint32_t kind; /* 0 push/pop, 1 start/end */
} lpo_raw_range_begin;

typedef struct {
    uint64_t ts, id;
    uint32_t tid, pad32;
} lpo_raw_range_end;

typedef struct {
    uint64_t ts;
    uint32_t tid, name, domain, pad32;
} lpo_raw_mark;

enum { LPO_LAUNCH_GATE_OPEN = 1u };
typedef struct {
    uint32_t corr, flags; /* LPO_LAUNCH_* */
    uint64_t range;       /* range id, 0 = none open (then only written when gated) */
} lpo_raw_launch;

typedef struct {
    uint64_t node;
    uint32_t label, graph_id; /* label: string id */
} lpo_raw_node_label;

typedef struct {
    uint64_t node, original;
} lpo_raw_node_clone;

typedef struct {
    uint64_t cupti;      /* records CUPTI dropped (cuptiActivityGetNumDroppedRecords) */
    uint64_t probe;      /* buffer requests refused because the pool was exhausted */
    uint64_t staged;     /* tracer-side records lost (staging overflow) */
    uint64_t incomplete; /* GPU records without an end time (force-flushed while running): left out */
} lpo_raw_dropped;

typedef struct {
    uint32_t tid, name;
} lpo_raw_thread_name;

enum { LPO_END_EXIT = 0, LPO_END_SIGNAL = 1, LPO_END_STOP = 2 };
typedef struct {
    uint64_t ts;
    uint32_t reason, signal; /* LPO_END_*; the signal number for LPO_END_SIGNAL */
} lpo_raw_end;

typedef struct {
    uint64_t begin, end; /* records outside [begin, end) are dropped; end = UINT64_MAX: open */
} lpo_raw_window;

_Static_assert(sizeof(lpo_raw_header) == 64, "raw header is 64 bytes");
_Static_assert(sizeof(lpo_raw_rec) == 8, "record header is 8 bytes");
_Static_assert(sizeof(lpo_raw_kernel) == 88, "kernel record body has no hidden padding");
_Static_assert(sizeof(lpo_raw_kernel) % 8 == 0 && sizeof(lpo_raw_memcpy) % 8 == 0 &&
                   sizeof(lpo_raw_memset) % 8 == 0 && sizeof(lpo_raw_api) % 8 == 0 &&
                   sizeof(lpo_raw_sync) % 8 == 0 && sizeof(lpo_raw_range_begin) % 8 == 0 &&
                   sizeof(lpo_raw_range_end) % 8 == 0 && sizeof(lpo_raw_mark) % 8 == 0 &&
                   sizeof(lpo_raw_launch) % 8 == 0 && sizeof(lpo_raw_node_label) % 8 == 0 &&
                   sizeof(lpo_raw_dropped) % 8 == 0 && sizeof(lpo_raw_thread_name) % 8 == 0 &&
                   sizeof(lpo_raw_end) % 8 == 0 && sizeof(lpo_raw_window) % 8 == 0,
               "record bodies are multiples of 8 bytes");

/* ---- writer: used by the tracer and by tests that synthesise traces ------------------------------------ */
#include <stddef.h>

typedef struct {
    int fd;           /* -1: closed */
    uint8_t *buf;     /* staging buffer */
    size_t len, cap;  /* bytes staged, capacity */
    uint64_t written; /* bytes written to fd so far */
    int failed;       /* a write(2) failed: later records are counted as lost */
} lpo_raw_writer;

/* Opens path (O_CREAT|O_TRUNC) and writes the header; cap is the staging size in bytes. 0 or -1. */
int lpo_raw_open(lpo_raw_writer *w, const char *path, const lpo_raw_header *h, size_t cap);
/* Appends one record (header + body of body_len bytes, padded to 8). Writes the staging buffer out
 * when full. Async-signal-safe apart from the first allocation (done by lpo_raw_open). */
void lpo_raw_put(lpo_raw_writer *w, uint16_t type, uint32_t aux, const void *body, size_t body_len);
/* Appends n bytes of complete records (a thread's staging block). */
void lpo_raw_append(lpo_raw_writer *w, const void *records, size_t n);
/* Writes the staged bytes with write(2); 0 or -1. */
int lpo_raw_flush(lpo_raw_writer *w);
/* Flushes, closes and frees. */
int lpo_raw_close(lpo_raw_writer *w);
/* Fills a header with the magic, version, size and pid. */
void lpo_raw_header_init(lpo_raw_header *h, uint32_t pid);
