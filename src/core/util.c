/* Core utilities: logging, file reading/mapping, directories, arena, string buffer, suggestions, clock. */
#include "lpo/core.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- logging ---------------------------------------------------------------------------------------- */
static lpo_log_level log_level = LPO_LOG_INFO;

void lpo_log_set_level(lpo_log_level lvl) {
    log_level = lvl;
}
lpo_log_level lpo_log_get_level(void) {
    return log_level;
}

void lpo_log(lpo_log_level lvl, const char *fmt, ...) {
    static const char *const tags[] = {"debug", "info", "warning", "error"};
    if (lvl < log_level || lvl >= LPO_LOG_QUIET) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "lpo: %s: ", tags[lvl]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- files -------------------------------------------------------------------------------------------- */
static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "directory" : S_ISFIFO(m) ? "FIFO (named pipe)" : S_ISSOCK(m) ? "socket" : "device";
}

lpo_status lpo_open_regular(const char *path, int *fd) {
    *fd = -1;
    /* O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer, so the type
     * check below runs before anything can block */
    int d = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (d < 0) return lpo_errorf(LPO_E_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(d, &st) != 0) {
        int err = errno;
        close(d);
        return lpo_errorf(LPO_E_IO, "cannot open '%s': %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(d);
        return lpo_errorf(LPO_E_IO, "'%s' is a %s, not a regular file", path, file_kind(st.st_mode));
    }
    int fl = fcntl(d, F_GETFL);
    if (fl >= 0) fcntl(d, F_SETFL, fl & ~O_NONBLOCK);
    *fd = d;
    return LPO_OK;
}

lpo_status lpo_read_file(const char *path, char **data, size_t *len) {
    *data = NULL;
    if (len) *len = 0;
    int fd;
    lpo_status st = lpo_open_regular(path, &fd);
    if (st) return st;
    lpo_strbuf sb = {0};
    char chunk[65536];
    int err = 0;
    // read until EOF (the size from fstat may change; /proc files report 0)
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) err = errno;
        if (n <= 0) break;
        lpo_sb_append(&sb, chunk, (size_t)n);
    }
    close(fd);
    if (err) {
        lpo_sb_free(&sb);
        return lpo_errorf(LPO_E_IO, "error reading '%s': %s", path, strerror(err));
    }
    lpo_sb_puts(&sb, "");
    *data = sb.buf;
    if (len) *len = sb.len;
    return LPO_OK;
}

lpo_status lpo_read_text_file(const char *path, char **data, size_t *len) {
    size_t n;
    lpo_status st = lpo_read_file(path, data, &n);
    if (st) return st;
    const char *nul = memchr(*data, 0, n);
    if (nul) {
        size_t line = 1, off = (size_t)(nul - *data);
        for (const char *q = *data; q < nul; q++) line += *q == '\n';
        free(*data);
        *data = NULL;
        return lpo_errorf(LPO_E_FORMAT, "%s:%zu: NUL byte at offset %zu: not a text file", path, line, off);
    }
    if (len) *len = n;
    return LPO_OK;
}

/* The permissions a new file gets: 0666 less the umask (read without changing it for good). */
static mode_t new_file_mode(void) {
    mode_t u = umask(022);
    umask(u);
    return 0666 & ~u;
}

lpo_status lpo_outfile_open(lpo_outfile *o, const char *path) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    size_t pl = strlen(path);
    if (pl == 0) return lpo_errorf(LPO_E_IO, "cannot write '': empty file name");
    if (path[pl - 1] == '/' || lpo_is_dir(path))
        return lpo_errorf(LPO_E_IO, "cannot write '%s': it is a directory (give a file name)", path);
    struct stat lst;
    int exists = lstat(path, &lst) == 0;
    o->path = lpo_strdup(path);
    if (exists && !S_ISREG(lst.st_mode)) {
        /* a symlink, device or FIFO (out=/dev/stdout, /dev/null, a pipe, a link the user made) is written in
         * place: renaming a file over it would replace the link or the device node itself */
        o->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0666);
        struct stat st;
        int err = o->fd < 0 ? errno : fstat(o->fd, &st) != 0 ? errno : 0;
        if (!err && (S_ISBLK(st.st_mode) || S_ISDIR(st.st_mode) || S_ISSOCK(st.st_mode))) {
            lpo_status e = lpo_errorf(LPO_E_IO,
                                      "cannot write '%s': it is a %s (lpo writes files, FIFOs and "
                                      "character devices only)",
                                      path, file_kind(st.st_mode));
            lpo_outfile_discard(o);
            return e;
        }
        if (err) {
            lpo_outfile_discard(o);
            return lpo_errorf(LPO_E_IO, "cannot write '%s': %s", path, strerror(err));
        }
        return LPO_OK;
    }
    /* a regular file or a new name: a fresh temp file in the same folder (mkstemp: O_EXCL, so nothing
     * planted there is followed), renamed over path at commit */
    lpo_strbuf t = {0};
    const char *slash = strrchr(path, '/');
    if (slash)
        lpo_sb_printf(&t, "%.*s.%s.XXXXXX", (int)(slash + 1 - path), path, slash + 1);
    else
        lpo_sb_printf(&t, ".%s.XXXXXX", path);
    o->tmp = t.buf;
    o->fd = mkostemp(o->tmp, O_CLOEXEC);
    if (o->fd < 0) {
        int err = errno;
        free(o->tmp);
        o->tmp = NULL;
        lpo_outfile_discard(o);
        return lpo_errorf(LPO_E_IO, "cannot create '%s': %s", path, strerror(err));
    }
    if (fchmod(o->fd, exists ? (lst.st_mode & 07777) : new_file_mode()) != 0) o->err = errno;
    return LPO_OK;
}

lpo_status lpo_outfile_write(lpo_outfile *o, const void *data, size_t len) {
    const char *p = data;
    // until every byte is written (short writes happen on pipes and when interrupted)
    while (len > 0 && !o->err) {
        ssize_t w = write(o->fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            o->err = w < 0 ? errno : EIO;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    return o->err ? lpo_errorf(LPO_E_IO, "cannot write '%s': %s", o->path, strerror(o->err)) : LPO_OK;
}

lpo_status lpo_outfile_commit(lpo_outfile *o) {
    int err = o->err;
    if (close(o->fd) != 0 && !err) err = errno;
    o->fd = -1;
    if (!err && o->tmp && rename(o->tmp, o->path) != 0) err = errno;
    if (err) {
        lpo_status st = lpo_errorf(LPO_E_IO, "cannot write '%s': %s", o->path, strerror(err));
        lpo_outfile_discard(o);
        return st;
    }
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
    o->fd = -1;
    return LPO_OK;
}

void lpo_outfile_discard(lpo_outfile *o) {
    if (o->fd >= 0) close(o->fd);
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
    o->fd = -1;
}

lpo_status lpo_write_file(const char *path, const void *data, size_t len) {
    lpo_outfile o;
    lpo_status st = lpo_outfile_open(&o, path);
    if (st) return st;
    if ((st = lpo_outfile_write(&o, data, len)) != LPO_OK) {
        lpo_outfile_discard(&o);
        return st;
    }
    return lpo_outfile_commit(&o);
}

lpo_status lpo_write_record(FILE *f, const char *data, size_t len, const char *name) {
    struct iovec v[2] = {{(void *)data, len}, {"\n", 1}};
    int err = fflush(f) != 0 ? errno : 0;
    // one writev per record; loop only when the kernel took part of it (disk full, a signal)
    while (!err && v[1].iov_len) {
        int first = v[0].iov_len ? 0 : 1;
        ssize_t w = writev(fileno(f), v + first, 2 - first);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            err = w < 0 ? errno : EIO;
            break;
        }
        for (int i = first; i < 2 && w > 0; i++) {
            size_t k = (size_t)w < v[i].iov_len ? (size_t)w : v[i].iov_len;
            v[i].iov_base = (char *)v[i].iov_base + k;
            v[i].iov_len -= k;
            w -= (ssize_t)k;
        }
    }
    return err ? lpo_errorf(LPO_E_IO, "cannot write '%s': %s", name, strerror(err)) : LPO_OK;
}

lpo_status lpo_file_map(const char *path, lpo_mapped_file *out) {
    memset(out, 0, sizeof *out);
    int fd;
    lpo_status st = lpo_open_regular(path, &fd);
    if (st) return st;
    struct stat sst;
    if (fstat(fd, &sst) != 0) {
        int err = errno;
        close(fd);
        return lpo_errorf(LPO_E_IO, "cannot open '%s': %s", path, strerror(err));
    }
    out->size = (size_t)sst.st_size;
    out->path = lpo_strdup(path);
    if (out->size > 0) {
        void *p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            free(out->path);
            memset(out, 0, sizeof *out);
            return lpo_errorf(LPO_E_IO, "cannot mmap '%s': %s", path, strerror(err));
        }
        out->data = p;
    }
    close(fd);
    return LPO_OK;
}

void lpo_file_unmap(lpo_mapped_file *f) {
    if (f->data) munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

int lpo_path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int lpo_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

lpo_status lpo_mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return lpo_errorf(LPO_E_INVALID, "bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return lpo_errorf(LPO_E_IO, "cannot create directory '%s': %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
    if (!lpo_is_dir(path)) return lpo_errorf(LPO_E_IO, "'%s' exists and is not a directory", path);
    return LPO_OK;
}

char *lpo_path_join(char *out, size_t n, const char *a, const char *b) {
    size_t la = strlen(a);
    if (b[0] == '/' || la == 0)
        snprintf(out, n, "%s", b);
    else
        snprintf(out, n, "%s%s%s", a, a[la - 1] == '/' ? "" : "/", b);
    return out;
}

/* ---- memory ---- */
/* MemAvailable from /proc/meminfo, else the physical memory; 0 when neither is known. */
static double host_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        int found = 0;
        // one line per iteration until MemAvailable
        while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
        fclose(f);
        if (found) return (double)kb * 1024.0;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}

lpo_status lpo_mem_check(double bytes, const char *what) {
    double avail = host_mem_available();
    if (!(bytes >= 0)) return lpo_errorf(LPO_E_RANGE, "%s: the size overflows", what);
    if (avail <= 0 || bytes <= avail) return LPO_OK;
    return lpo_errorf(LPO_E_NOMEM, "%s: needs %.4g GiB but this machine has %.4g GiB of memory available",
                      what, bytes / 1073741824.0, avail / 1073741824.0);
}

void lpo_oom_print(const char *what, size_t bytes) {
    if (bytes)
        fprintf(stderr, "lpo: error: out of memory allocating %zu bytes for %s\n", bytes, what);
    else
        fprintf(stderr, "lpo: error: out of memory allocating %s\n", what);
    fflush(stderr);
}

static void default_oom(const char *what, size_t bytes) {
    lpo_oom_print(what, bytes);
    abort(); /* a library does not exit the process: the CLI installs a handler that exits 1 */
}

static lpo_oom_handler oom_handler = default_oom;

void lpo_out_of_memory(const char *what, size_t bytes) {
    oom_handler(what ? what : "(unnamed)", bytes);
    abort(); /* the handler must not return */
}

/* cJSON's allocator once a handler is installed: never NULL (cJSON reports a NULL as a parse error). */
static void *json_alloc(size_t n) {
    return lpo_xmalloc(n, "JSON data");
}

void lpo_set_oom_handler(lpo_oom_handler h) {
    oom_handler = h ? h : default_oom;
    cJSON_Hooks hooks = {json_alloc, free};
    cJSON_InitHooks(h ? &hooks : NULL);
}

void *lpo_xmalloc(size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) lpo_out_of_memory(what, n ? n : 1);
    return p;
}

void *lpo_xcalloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) lpo_out_of_memory(what, n && size > SIZE_MAX / n ? SIZE_MAX : n * size);
    return p;
}

void *lpo_xrealloc_array(void *p, size_t n, size_t size, const char *what) {
    if (size && n > SIZE_MAX / size) lpo_out_of_memory(what, SIZE_MAX);
    size_t bytes = n * size;
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) lpo_out_of_memory(what, bytes ? bytes : 1);
    return q;
}

void *lpo_xgrow(void *arr, size_t *cap, size_t need, size_t elem, const char *what) {
    if (need <= *cap && arr) return arr;
    size_t c = *cap ? *cap : 8;
    // double until it fits (overflow goes to the handler through lpo_xrealloc_array)
    while (c < need) c = c > SIZE_MAX / 2 ? need : c * 2;
    arr = lpo_xrealloc_array(arr, c, elem, what);
    *cap = c;
    return arr;
}

/* ---- numbers ---- */
int lpo_double_to_i64(double v, int64_t lo, int64_t hi, int64_t *out) {
    /* [-2^63, 2^63): every double there converts; 2^63 itself (== (double)INT64_MAX) does not */
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0) || v != floor(v)) return 0;
    int64_t i = (int64_t)v;
    if (i < lo || i > hi) return 0;
    *out = i;
    return 1;
}

/* ---- arena -------------------------------------------------------------------------------------------- */
lpo_status lpo_arena_init(lpo_arena *a, size_t size) {
    memset(a, 0, sizeof *a);
    if (size == 0) return LPO_OK;
    void *p = NULL;
    if (posix_memalign(&p, 64, size) != 0)
        return lpo_errorf(LPO_E_NOMEM, "cannot allocate an arena of %zu bytes", size);
    a->base = p;
    a->size = size;
    return LPO_OK;
}

void *lpo_arena_alloc(lpo_arena *a, size_t size, size_t align) {
    size_t off = (a->used + align - 1) & ~(align - 1);
    if (off > a->size || size > a->size - off) return NULL;
    a->used = off + size;
    return a->base + off;
}

void lpo_arena_free(lpo_arena *a) {
    free(a->base);
    memset(a, 0, sizeof *a);
}

/* ---- string buffer ---- */
static void sb_reserve(lpo_strbuf *sb, size_t extra) {
    if (sb->len + extra + 1 <= sb->cap) return;
    if (extra > SIZE_MAX / 2 - sb->len) lpo_out_of_memory("a string buffer", SIZE_MAX);
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + extra + 1) cap *= 2;
    sb->buf = lpo_xrealloc_array(sb->buf, cap, 1, "a string buffer");
    sb->cap = cap;
}

void lpo_sb_append(lpo_strbuf *sb, const char *s, size_t n) {
    sb_reserve(sb, n);
    if (n) memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = 0;
}

void lpo_sb_puts(lpo_strbuf *sb, const char *s) {
    lpo_sb_append(sb, s, strlen(s));
}

void lpo_sb_printf(lpo_strbuf *sb, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n >= 0) {
        sb_reserve(sb, (size_t)n);
        vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap2);
        sb->len += (size_t)n;
    }
    va_end(ap2);
}

void lpo_sb_free(lpo_strbuf *sb) {
    free(sb->buf);
    memset(sb, 0, sizeof *sb);
}

/* ---- suggestions ---- */
size_t lpo_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    size_t *row = malloc((lb + 1) * sizeof *row);
    if (!row) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    size_t d = row[lb];
    free(row);
    return d;
}

static size_t common_prefix(const char *a, const char *b) {
    size_t n = 0;
    while (a[n] && a[n] == b[n]) n++;
    return n;
}

const char *lpo_suggest(const char *word, const char *const *candidates, size_t n) {
    /* Closest by edit distance; ties go to the longer common prefix (llama3-8b -> llama3.1-8b, not
     * llama2-7b), then to the earlier candidate. */
    const char *best = NULL;
    size_t best_d = (size_t)-1, best_p = 0;
    for (size_t i = 0; i < n; i++) {
        size_t d = lpo_edit_distance(word, candidates[i]), p = common_prefix(word, candidates[i]);
        if (d < best_d || (d == best_d && p > best_p)) best_d = d, best_p = p, best = candidates[i];
    }
    size_t len = strlen(word);
    size_t limit = len <= 3 ? 1 : len <= 6 ? 2 : 3 + len / 8;
    return best && best_d <= limit ? best : NULL;
}

/* ---- misc ---- */
uint64_t lpo_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int lpo_threads_pick(lpo_threads_auto *a, int max, int ncpus) {
    if (max <= 1) return 1;
    double load[1];
    if (getloadavg(load, 1) != 1) return max;
    const uint64_t now = lpo_now_ns();
    if (a->t_ns) { // own: the threads run since, averaged as the kernel averages the load (60 s)
        const double w = exp(-(double)(now - a->t_ns) / 60e9);
        a->own = a->own * w + (double)a->last * (1 - w);
    }
    a->t_ns = now;
    const double others = load[0] - a->own;
    const int free_cores = (int)((double)ncpus - (others > 0 ? others : 0) + 0.5);
    return free_cores < 1 ? 1 : free_cores < max ? free_cores : max;
}

static int threads_lo, threads_hi; /* what lpo_threads_ran saw (the steps run on one host thread) */

void lpo_threads_ran(lpo_threads_auto *a, int n) {
    a->last = n;
    if (!threads_lo || n < threads_lo) threads_lo = n;
    if (n > threads_hi) threads_hi = n;
}

void lpo_threads_used(int *lo, int *hi) {
    *lo = threads_lo;
    *hi = threads_hi;
}

void lpo_threads_used_reset(void) {
    threads_lo = threads_hi = 0;
}

char *lpo_strdup(const char *s) {
    return s ? lpo_strndup(s, strlen(s)) : NULL;
}

char *lpo_strndup(const char *s, size_t n) {
    char *p = lpo_xmalloc(n + 1, "a string");
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- work categories ---- */
const char *lpo_cat_name(lpo_cat c) {
    static const char *const names[] = {
#define LPO__CAT_NAME(name, str) str,
        LPO_CAT_MAP(LPO__CAT_NAME)
#undef LPO__CAT_NAME
    };
    return (unsigned)c < LPO_CAT_COUNT ? names[c] : "other";
}
