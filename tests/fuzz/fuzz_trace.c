/* libFuzzer target: the raw trace loader (trace-<pid>.lpot, src/probe/trace_format.h) and what reads the
 * loaded trace: the kernel, range and step tables and the Chrome trace. Raw files come from run
 * directories that `lpo report trace DIR` reads again, so a file is untrusted input. The loader maps files:
 * each input is written to one file in a private temp folder first.
 * Build: make fuzz; seeds: python3 tests/fuzz/corpus/make_trace_seeds.py;
 * run: nice build-fuzz/tests/fuzz_trace tests/fuzz/corpus/fuzz_trace
 *
 * Structure-aware: LLVMFuzzerCustomMutator below walks the input as the format's header and records
 * (8-byte record headers, bodies of 8-byte words) and mutates one of them as the format sees it: a word of a
 * body or the header's clock offset set to a boundary value (0, 1, 2^31 - 1, 2^32 - 1, 2^62 - 1, 2^62,
 * 2^63 - 1, 2^63, 2^64 - 1, a neighbour's value +- 1: the times 2^63 ns apart and the end at 2^64 - 1 that
 * byte-level mutation never found), a record duplicated, dropped or moved, a fresh record of any type, or
 * libFuzzer's own mutation of one body. Record sizes stay consistent, so mutations reach the loader's
 * record logic instead of its framing checks; one in eight mutations is libFuzzer's on the whole input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/core.h"
#include "lpo/report.h"
#include "lpo/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

/* ---- the structure-aware mutator --------------------------------------------------------------------- */
#define HEADER  64u /* sizeof(lpo_raw_header) */
#define MAX_REC 4096

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Offsets of the records after the header (those whose sizes frame them); returns their count. */
static size_t records(const uint8_t *d, size_t size, size_t *off) {
    size_t n = 0;
    for (size_t p = HEADER; p + 8 <= size && n < MAX_REC;) {
        uint16_t rs;
        memcpy(&rs, d + p + 2, 2);
        if (rs < 8 || (rs & 7) || p + rs > size) break;
        off[n++] = p;
        p += rs;
    }
    return n;
}

static uint64_t boundary(uint64_t *s, uint64_t near) {
    static const uint64_t v[] = {0,
                                 1,
                                 2,
                                 0x7FFFFFFFull,
                                 0xFFFFFFFFull,
                                 0x100000000ull,
                                 (1ull << 62) - 1,
                                 1ull << 62,
                                 (1ull << 63) - 1,
                                 1ull << 63,
                                 (1ull << 63) + 1,
                                 UINT64_MAX,
                                 UINT64_MAX - 1,
                                 1000000000ull};
    const uint64_t r = rng_next(s);
    switch (r % 4) {
    case 0: return near + (r & 16 ? 1 : 0) - (r & 32 ? 1 : 0); /* a neighbour's value */
    case 1: return near + (1ull << 63);                        /* 2^63 apart */
    default: return v[(r >> 8) % (sizeof v / sizeof *v)];
    }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    uint64_t s = seed;
    static size_t off[MAX_REC];
    const size_t n = size >= HEADER ? records(data, size, off) : 0;
    const uint64_t r = rng_next(&s);
    if (!n || r % 8 == 0) return LLVMFuzzerMutate(data, size, max_size);
    const size_t i = (size_t)(rng_next(&s) % n), p = off[i];
    uint16_t rs;
    memcpy(&rs, data + p + 2, 2);
    switch ((r >> 3) % 6) {
    case 0:
    case 1: { /* a body word (or the header's clock offset) to a boundary value */
        uint64_t near = 0, v;
        const size_t words = rs >= 8 ? (rs - 8u) / 8u : 0;
        size_t at = words ? p + 8 + 8 * (size_t)(rng_next(&s) % words) : 32;
        if (r & (1u << 20)) at = 32;                 /* lpo_raw_header.clock_offset_ns */
        const size_t j = (size_t)(rng_next(&s) % n); /* a value from another record nearby */
        if (off[j] + 16 <= size) memcpy(&near, data + off[j] + 8, 8);
        v = boundary(&s, near);
        if (r & (1u << 21) && at != 32) { /* the 32-bit half (ids, counts) */
            uint32_t h = (uint32_t)v;
            memcpy(data + at + (r & (1u << 22) ? 4 : 0), &h, 4);
        } else {
            memcpy(data + at, &v, 8);
        }
        return size;
    }
    case 2: /* duplicate record i at the end */
        if (size + rs > max_size) return size;
        memmove(data + size, data + p, rs);
        return size + rs;
    case 3: /* drop record i */ memmove(data + p, data + p + rs, size - p - rs); return size - rs;
    case 4: { /* a fresh record of any type (1..17, or unknown), its body boundary words */
        const size_t words = 1 + (size_t)(rng_next(&s) % 12), len = 8 + 8 * words;
        if (size + len > max_size) return size;
        uint8_t rec[8 + 8 * 12];
        const uint16_t type = (uint16_t)(1 + rng_next(&s) % 18), sz = (uint16_t)len;
        const uint32_t aux = (uint32_t)(rng_next(&s) % 8);
        memcpy(rec, &type, 2);
        memcpy(rec + 2, &sz, 2);
        memcpy(rec + 4, &aux, 4);
        uint64_t near = 0;
        if (p + 16 <= size) memcpy(&near, data + p + 8, 8);
        for (size_t w = 0; w < words; w++) {
            uint64_t v = rng_next(&s) % 3 ? boundary(&s, near) : rng_next(&s) % 64;
            memcpy(rec + 8 + 8 * w, &v, 8);
        }
        memmove(data + p + len, data + p, size - p);
        memcpy(data + p, rec, len);
        return size + len;
    }
    default: { /* libFuzzer's mutation inside one body, its size kept */
        if (rs <= 8) return size;
        uint8_t body[65536];
        memcpy(body, data + p + 8, rs - 8u);
        size_t got = LLVMFuzzerMutate(body, rs - 8u, rs - 8u);
        memcpy(data + p + 8, body, got);
        return size;
    }
    }
}

static char file[512];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!file[0]) {
        char dir[] = "/tmp/lpo-fuzz-trace-XXXXXX";
        if (!mkdtemp(dir)) abort();
        snprintf(file, sizeof file, "%s/trace-1.lpot", dir);
    }
    if (lpo_write_file(file, data, size) != LPO_OK) abort();
    const char *paths[] = {file};
    lpo_trace *t = NULL;
    if (lpo_trace_load_files(paths, 1, &t) != LPO_OK) return 0;
    lpo_table *tab = NULL;
    if (lpo_trace_kernel_table(t, &tab) == LPO_OK) lpo_table_free(tab);
    tab = NULL;
    if (lpo_trace_range_table(t, &tab) == LPO_OK) lpo_table_free(tab);
    tab = NULL;
    if (lpo_trace_step_table(t, "step", &tab) == LPO_OK) lpo_table_free(tab);
    (void)lpo_trace_write_chrome(t, NULL, "/dev/null");
    lpo_trace_free(t);
    return 0;
}
