/* Core utilities: logging, file reading/mapping, directories, arena, string buffer, suggestions, clock. */
#include "lpo/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
lpo_status lpo_read_file(const char *path, char **data, size_t *len) {
    *data = NULL;
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return lpo_errorf(LPO_E_IO, "cannot open '%s': %s", path, strerror(errno));
    /* a directory or a device (/dev/zero never ends) is not a file to read whole; pipes are fine */
    struct stat stt;
    if (fstat(fileno(f), &stt) == 0 &&
        (S_ISDIR(stt.st_mode) || S_ISCHR(stt.st_mode) || S_ISBLK(stt.st_mode))) {
        fclose(f);
        return lpo_errorf(LPO_E_IO, "'%s' is a %s, not a file", path,
                          S_ISDIR(stt.st_mode) ? "directory" : "device");
    }
    lpo_strbuf sb = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) lpo_sb_append(&sb, chunk, n);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) {
        lpo_sb_free(&sb);
        return lpo_errorf(LPO_E_IO, "error reading '%s': %s", path, strerror(err));
    }
    if (!sb.buf) lpo_sb_append(&sb, "", 0);
    if (!sb.buf) return lpo_errorf(LPO_E_NOMEM, "out of memory reading '%s'", path);
    *data = sb.buf;
    if (len) *len = sb.len;
    return LPO_OK;
}

lpo_status lpo_write_file(const char *path, const void *data, size_t len) {
    size_t pl = strlen(path);
    if (pl == 0 || path[pl - 1] == '/' || lpo_is_dir(path))
        return lpo_errorf(LPO_E_IO, "cannot write '%s': it is a directory (give a file name)", path);
    struct stat stt;
    if (stat(path, &stt) == 0 && !S_ISREG(stt.st_mode)) {
        /* a device or FIFO (out=/dev/null, /dev/stdout, a pipe) is written in place: renaming a file over it
         * would replace /dev/null itself when run as root */
        FILE *f = fopen(path, "wb");
        if (!f) return lpo_errorf(LPO_E_IO, "cannot open '%s': %s", path, strerror(errno));
        size_t w = len ? fwrite(data, 1, len, f) : 0;
        int err = w != len ? errno : 0;
        if (fclose(f) != 0 && !err) err = errno ? errno : EIO;
        return err ? lpo_errorf(LPO_E_IO, "cannot write '%s': %s", path, strerror(err)) : LPO_OK;
    }
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return lpo_errorf(LPO_E_IO, "cannot write '%.64s...': the path is too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return lpo_errorf(LPO_E_IO, "cannot create '%s': %s", tmp, strerror(errno));
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    int bad = (w != len) | (fclose(f) != 0);
    if (bad || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return lpo_errorf(LPO_E_IO, "cannot write '%s': %s", path, strerror(err));
    }
    return LPO_OK;
}

lpo_status lpo_file_map(const char *path, lpo_mapped_file *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return lpo_errorf(LPO_E_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return lpo_errorf(LPO_E_IO, "'%s' is not a regular file", path);
    }
    out->size = (size_t)st.st_size;
    out->path = lpo_strdup(path);
    if (out->size > 0) {
        void *p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            free(out->path);
            memset(out, 0, sizeof *out);
            return lpo_errorf(LPO_E_IO, "cannot mmap '%s': %s", path, strerror(errno));
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

/* ---- memory ---------------------------------------------------------------------------------------------
 */
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

/* ---- string buffer --------------------------------------------------------------------------------------
 */
static void sb_reserve(lpo_strbuf *sb, size_t extra) {
    if (sb->len + extra + 1 <= sb->cap) return;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + extra + 1) cap *= 2;
    char *p = realloc(sb->buf, cap);
    if (!p) abort(); /* out of memory in a string buffer: nothing sensible to do */
    sb->buf = p;
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

/* ---- suggestions ------------------------------------------------------------------------------------------
 */
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

/* ---- misc
 * ---------------------------------------------------------------------------------------------------- */
uint64_t lpo_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

char *lpo_strdup(const char *s) {
    return s ? lpo_strndup(s, strlen(s)) : NULL;
}

char *lpo_strndup(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}
