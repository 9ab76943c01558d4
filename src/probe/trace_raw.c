/* Writer of the raw trace format (src/probe/trace_format.h): a staging buffer flushed with write(2).
 * Shared by the tracer library (built into liblpo_probe.so) and by tests that synthesise traces.
 * The caller serialises access (the tracer holds its writer lock). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

#include "probe/trace_format.h"

void lpo_raw_header_init(lpo_raw_header *h, uint32_t pid) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, LPO_TRACE_MAGIC, 8);
    h->version = LPO_TRACE_VERSION;
    h->header_size = (uint32_t)sizeof *h;
    h->pid = pid;
}

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int lpo_raw_open(lpo_raw_writer *w, const char *path, const lpo_raw_header *h, size_t cap) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    if (cap < 65536 + 8) cap = 65536 + 8; /* room for the largest record */
    w->buf = malloc(cap);
    if (!w->buf) return -1;
    w->cap = cap;
    /* O_NOFOLLOW: a link planted at the raw file's name (in the run directory) is not followed */
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (w->fd < 0 || write_all(w->fd, (const uint8_t *)h, sizeof *h) != 0) {
        if (w->fd >= 0) close(w->fd);
        free(w->buf);
        memset(w, 0, sizeof *w);
        w->fd = -1;
        return -1;
    }
    w->written = sizeof *h;
    return 0;
}

int lpo_raw_flush(lpo_raw_writer *w) {
    if (w->fd < 0 || !w->len) return w->fd < 0 ? -1 : 0;
    if (!w->failed && write_all(w->fd, w->buf, w->len) != 0) w->failed = 1;
    if (!w->failed) w->written += w->len;
    w->len = 0;
    return w->failed ? -1 : 0;
}

void lpo_raw_put(lpo_raw_writer *w, uint16_t type, uint32_t aux, const void *body, size_t body_len) {
    if (!w->buf || w->fd < 0) return;
    if (body_len > LPO_RAW_BODY_MAX)
        body_len = LPO_RAW_BODY_MAX; /* size is 16 bits: longer strings are cut */
    size_t size = (8 + body_len + 7) & ~(size_t)7;
    if (w->len + size > w->cap) lpo_raw_flush(w);
    uint8_t *p = w->buf + w->len;
    lpo_raw_rec r = {type, (uint16_t)size, aux};
    memcpy(p, &r, sizeof r);
    if (body_len) memcpy(p + 8, body, body_len);
    memset(p + 8 + body_len, 0, size - 8 - body_len);
    w->len += size;
}

void lpo_raw_append(lpo_raw_writer *w, const void *records, size_t n) {
    if (!w->buf || w->fd < 0) return;
    if (w->len + n > w->cap) lpo_raw_flush(w);
    if (n > w->cap) { /* larger than the staging buffer: straight to the file */
        if (!w->failed && write_all(w->fd, records, n) != 0) w->failed = 1;
        if (!w->failed) w->written += n;
        return;
    }
    memcpy(w->buf + w->len, records, n);
    w->len += n;
}

int lpo_raw_close(lpo_raw_writer *w) {
    int rc = lpo_raw_flush(w);
    if (w->fd >= 0 && close(w->fd) != 0) rc = -1;
    free(w->buf);
    memset(w, 0, sizeof *w);
    w->fd = -1;
    return rc;
}

const char *const lpo_trace_activity_names[LPO_ACT_N] = {"kernel",  "memcpy", "memset", "sync",
                                                         "runtime", "driver", "nvtx",   "launch"};

int lpo_trace_parse_activities(const char *s, uint32_t *mask, char bad[32]) {
    *mask = 0;
    bad[0] = 0;
    char *end = NULL;
    unsigned long v = strtoul(s, &end, 0);
    if (end != s && !*end) {
        *mask = (uint32_t)v & LPO_ACT_ALL;
        return 0;
    }
    while (*s) { /* comma-separated words */
        size_t n = strcspn(s, ",");
        uint32_t bit = 0;
        if (n == 7 && !strncmp(s, "default", 7))
            bit = LPO_ACT_DEFAULT;
        else if (n == 3 && !strncmp(s, "all", 3))
            bit = LPO_ACT_ALL;
        for (int i = 0; i < LPO_ACT_N && !bit; i++)
            if (strlen(lpo_trace_activity_names[i]) == n && !strncmp(s, lpo_trace_activity_names[i], n))
                bit = 1u << i;
        if (!bit && n) {
            snprintf(bad, 32, "%.*s", (int)(n < 31 ? n : 31), s);
            return -1;
        }
        *mask |= bit;
        s += n;
        if (*s == ',') s++;
    }
    return 0;
}
