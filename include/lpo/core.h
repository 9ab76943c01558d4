/* lpo core utilities shared by every module: logging, files (read whole / mmap), a bump arena,
 * a growable string buffer, "did you mean" suggestions and a monotonic host clock. */
#pragma once
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lpo/status.h"

/* ---- logging (stderr) ---------------------------------------------------------------------------- */
typedef enum { LPO_LOG_DEBUG, LPO_LOG_INFO, LPO_LOG_WARN, LPO_LOG_ERROR, LPO_LOG_QUIET } lpo_log_level;
void lpo_log_set_level(lpo_log_level lvl);
lpo_log_level lpo_log_get_level(void);
void lpo_log(lpo_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define LPO_DEBUG(...) lpo_log(LPO_LOG_DEBUG, __VA_ARGS__)
#define LPO_INFO(...)  lpo_log(LPO_LOG_INFO, __VA_ARGS__)
#define LPO_WARN(...)  lpo_log(LPO_LOG_WARN, __VA_ARGS__)

/* ---- files ------------------------------------------------------------------------------------------ */
/* Opens path read-only after checking that it is a regular file, without blocking first: a FIFO, a device
 * or a directory gives LPO_E_IO "'<path>' is a FIFO (named pipe), not a regular file" (every input file
 * goes through here, so a FIFO in place of a model or config file never hangs). *fd: close it. */
lpo_status lpo_open_regular(const char *path, int *fd);
/* Reads a whole regular file (lpo_open_regular) into a malloc'd, NUL-terminated buffer (*len excludes
 * the NUL). */
lpo_status lpo_read_file(const char *path, char **data, size_t *len);
/* lpo_read_file for text read as C strings (lists of ids, JSONL): a NUL byte, which would silently cut
 * the text, is LPO_E_FORMAT "<path>:<line>: NUL byte at offset N: not a text file". */
lpo_status lpo_read_text_file(const char *path, char **data, size_t *len);

/* An output file written safely, the one way every writer creates files:
 * - a new name or an existing regular file: the bytes go to a fresh temp file in the same folder
 *   (mkstemp: created with O_EXCL, so a link planted there is never followed), renamed over path at
 *   commit; until then path is untouched, and a failed write leaves it as it was;
 * - an existing symlink, FIFO or character device (out=/dev/stdout, /dev/null, a pipe, a link) is
 *   written in place, through the link: the link or device node is never replaced;
 * - a directory, block device or socket is refused (LPO_E_IO naming it).
 * Write errors (disk full, closed pipe) are reported by lpo_outfile_write or lpo_outfile_commit. */
typedef struct {
    int fd;
    char *path; /* owned copy */
    char *tmp;  /* temp file renamed over path at commit; NULL when written in place */
    int err;    /* first errno */
} lpo_outfile;
lpo_status lpo_outfile_open(lpo_outfile *o, const char *path);
lpo_status lpo_outfile_write(lpo_outfile *o, const void *data, size_t len);
/* Closes, then renames the temp file over path; LPO_E_IO on any error so far (the temp file removed). */
lpo_status lpo_outfile_commit(lpo_outfile *o);
/* Closes and removes the temp file: path keeps its old content. Safe on a closed or failed outfile. */
void lpo_outfile_discard(lpo_outfile *o);
/* Writes len bytes to path as one lpo_outfile (truncating). */
lpo_status lpo_write_file(const char *path, const void *data, size_t len);
/* Appends one record (data, len bytes, then "\n") to f as ONE writev after flushing what f buffered,
 * so a run killed at any moment leaves only whole lines (JSONL). LPO_E_IO naming `name` on failure. */
lpo_status lpo_write_record(FILE *f, const char *data, size_t len, const char *name);

/* A read-only memory map of a whole file. Zero-length files map to data == NULL, size == 0. */
typedef struct {
    const uint8_t *data;
    size_t size;
    char *path; /* owned copy, for error messages */
} lpo_mapped_file;
lpo_status lpo_file_map(const char *path, lpo_mapped_file *out);
void lpo_file_unmap(lpo_mapped_file *f);

int lpo_path_exists(const char *path);
int lpo_is_dir(const char *path);
/* mkdir -p; returns LPO_E_IO with the path on failure. */
lpo_status lpo_mkdirs(const char *path);
/* Joins a and b with one '/' into out (size n); returns out. */
char *lpo_path_join(char *out, size_t n, const char *a, const char *b);

/* ---- memory ------------------------------------------------------------------------------------------- */
/* Call before a large allocation: LPO_OK when `bytes` (a double, so that an overflowing product stays
 * comparable) fits in the memory this host has available now (MemAvailable, else physical memory; no
 * limit when unknown); else LPO_E_NOMEM "<what>: needs X GiB but this machine has Y GiB ...". */
lpo_status lpo_mem_check(double bytes, const char *what);

/* Checked allocation for bookkeeping no caller could recover from losing (tree nodes, string buffers,
 * table cells, small arrays): never returns NULL. On failure the out-of-memory handler runs with `what`
 * was being allocated and its size; it does not return. The default prints "lpo: error: out of memory
 * allocating N bytes for <what>" and aborts (a library does not exit); the CLI installs one that exits 1.
 * Large buffers (weights, KV cache, logits) are checked with lpo_mem_check and malloc'd with an lpo_status
 * error instead. */
typedef void (*lpo_oom_handler)(const char *what, size_t bytes);
/* NULL restores the default. Installing a handler also routes cJSON's allocations through lpo_xmalloc, so
 * a JSON file that cannot be held in memory is reported as out of memory, not as invalid JSON. */
void lpo_set_oom_handler(lpo_oom_handler h);
/* Runs the handler (does not return): for allocations made inside other libraries (libyaml, PCRE2,
 * utf8proc), which report a failure without its size: bytes 0 means the size is unknown. */
void lpo_out_of_memory(const char *what, size_t bytes) __attribute__((noreturn));
/* The message every handler prints: "lpo: error: out of memory allocating N bytes for <what>" (without
 * "N bytes" when bytes is 0), to stderr, flushed. */
void lpo_oom_print(const char *what, size_t bytes);
void *lpo_xmalloc(size_t n, const char *what);
void *lpo_xcalloc(size_t n, size_t size, const char *what);
/* realloc of n elements of `size` bytes, the product checked for overflow. */
void *lpo_xrealloc_array(void *p, size_t n, size_t size, const char *what);
/* Room for at least `need` elements of `elem` bytes in arr, whose capacity is *cap elements, grown
 * geometrically (doubling, from 8): n appends copy O(n) elements in all, never one realloc per element.
 * Returns arr (possibly moved); *cap updated. Idiom: a = lpo_xgrow(a, &cap, n + 1, sizeof *a, "what"). */
void *lpo_xgrow(void *arr, size_t *cap, size_t need, size_t elem, const char *what);

/* ---- numbers ------------------------------------------------------------------------------------------ */
/* The one checked double -> integer conversion (a cast of a double outside the integer's range is
 * undefined behaviour): 1 and *out = v when v is an integer in [lo, hi]; 0 for NaN, infinities, fractions
 * and values out of range (*out untouched). */
int lpo_double_to_i64(double v, int64_t lo, int64_t hi, int64_t *out);

/* ---- arena: one block, bump allocation, freed at once ----------------------------------------------- */
typedef struct {
    uint8_t *base;
    size_t size, used;
} lpo_arena;
lpo_status lpo_arena_init(lpo_arena *a, size_t size);
/* Aligned (align = power of two) allocation; NULL when the arena is full. */
void *lpo_arena_alloc(lpo_arena *a, size_t size, size_t align);
void lpo_arena_free(lpo_arena *a);

/* ---- string buffer ------------------------------------------------------------------------------------ */
typedef struct {
    char *buf; /* always NUL-terminated once anything was appended */
    size_t len, cap;
} lpo_strbuf;
void lpo_sb_append(lpo_strbuf *sb, const char *s, size_t n);
void lpo_sb_puts(lpo_strbuf *sb, const char *s);
void lpo_sb_printf(lpo_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lpo_sb_free(lpo_strbuf *sb);

/* ---- UTF-8 ---- */
/* Byte length of the character at s (n bytes left) when it is valid UTF-8: shortest form, not a
 * surrogate, at most U+10FFFF, not cut off by n; 0 when invalid (or n == 0). *cp (may be NULL) gets the
 * code point on success. */
size_t lpo_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Offset of the first invalid byte in s, or n when all n bytes are valid UTF-8. */
size_t lpo_utf8_valid_prefix(const char *s, size_t n);
/* 1 when the n bytes at s are valid UTF-8 (as lpo_utf8_decode defines it), else 0. */
int lpo_utf8_valid(const char *s, size_t n);

/* ---- suggestions ---- */
/* Levenshtein distance between a and b. */
size_t lpo_edit_distance(const char *a, const char *b);
/* The candidate closest to word when close enough to be a plausible typo (else NULL). */
const char *lpo_suggest(const char *word, const char *const *candidates, size_t n);

/* ---- misc ---- */
/* Monotonic host clock in nanoseconds (CPU timing only; GPU work is timed with events or CUPTI). */
uint64_t lpo_now_ns(void);
/* Threads a parallel section should use now, when the user left the count to lpo (threads=0): at most max
 * and at most the cores other work leaves free = cores - (1-minute load average - the caller's own share of
 * it, tracked in *a as the same 60 s moving average of the threads it ran; zero-initialise *a). Why: every
 * OpenMP region ends in a barrier, and a barrier one of whose threads the OS preempted waits a scheduler
 * time slice (milliseconds): 2 threads on 2 busy vCPUs timed a 95 us GEMM at 8 ms. Call lpo_threads_ran
 * after the section with the count it used. */
typedef struct {
    double own;    /* this caller's share of the load average */
    uint64_t t_ns; /* when own was last updated (0: never) */
    int last;      /* threads of the last section */
} lpo_threads_auto;
int lpo_threads_pick(lpo_threads_auto *a, int max, int ncpus);
void lpo_threads_ran(lpo_threads_auto *a, int n);
/* The fewest and most threads lpo_threads_ran saw in this process since lpo_threads_used_reset (0, 0: none),
 * so a report can say what ran rather than the setting. */
void lpo_threads_used(int *lo, int *hi);
void lpo_threads_used_reset(void);
/* strdup through the checked allocation above (never NULL, except lpo_strdup(NULL) == NULL). */
char *lpo_strdup(const char *s);
char *lpo_strndup(const char *s, size_t n);

/* ---- work categories --------------------------------------------------------------------------------------
 * ONE scheme for what a piece of work is: every op kind has one (ops.h: lpo_op_kind_cat), the tracer sorts
 * kernel names into them (trace.h: lpo_trace_category, also for programs other than lpo), profile sums time
 * by them and deep reads the tracer's. X(ENUM, name). */
#define LPO_CAT_MAP(X)                                                                                       \
    X(GEMM, "gemm")               /* matrix products: linear layers, lm_head, GEMV */                        \
    X(ATTENTION, "attention")     /* scores, softmax, P V, the KV append fused into it */                    \
    X(NORM, "norm")               /* RMSNorm, layer norm, q/k norm */                                        \
    X(ELEMENTWISE, "elementwise") /* activations, residual adds, RoPE, casts, copies inside kernels */       \
    X(EMBED, "embed")             /* embedding lookups */                                                    \
    X(SAMPLING, "sampling")       /* logits -> token ids */                                                  \
    X(REDUCTION, "reduction")     /* reductions, sorts, scans outside the above */                           \
    X(MEMCPY, "memcpy")           /* copies and memsets */                                                   \
    X(COMM, "communication")      /* collectives between devices */                                          \
    X(OTHER, "other")

typedef enum {
#define LPO__CAT_ENUM(name, str) LPO_CAT_##name,
    LPO_CAT_MAP(LPO__CAT_ENUM)
#undef LPO__CAT_ENUM
        LPO_CAT_COUNT
} lpo_cat;
const char *lpo_cat_name(lpo_cat c); /* "gemm", ...; "other" out of range */

/* ---- build provenance ---- */
typedef struct {
    const char *version;    /* "0.1.0" */
    const char *git_commit; /* short hash, "-dirty" suffix when built from a modified tree */
    const char *build_type; /* Release, Debug, Asan, ... */
    const char *cuda_archs; /* "90" or "80;90;120"; meaningful when cuda is set */
    const char *c_compiler;
    int cuda;         /* built with the CUDA backend */
    int cuda_version; /* CUDART_VERSION at build time (e.g. 13000), 0 without CUDA */
} lpo_build_info;
const lpo_build_info *lpo_build(void);
/* Nonzero for builds whose timings must not be trusted (Debug, sanitizers). */
int lpo_build_is_debug(void);
