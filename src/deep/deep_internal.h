/* Internals shared by the src/deep/ files: a string -> index hash map, so that matching R ncu results
 * against K kernel or metric names costs O(R + K) lookups, never O(R K) comparisons. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* FNV-1a (64 bit): deep_hash of n bytes equals DEEP_HASH0 stepped through them, so the hashes of every
 * prefix of a string come in one pass (the plan's cut names, deep_analyze.c). */
#define DEEP_HASH0 14695981039346656037ull
static inline uint64_t deep_hash_step(uint64_t h, unsigned char c) {
    return (h ^ c) * 1099511628211ull;
}
uint64_t deep_hash(const char *s, size_t n);

/* Open addressing, load <= 1/2. Keys are borrowed (they must outlive the map); each key is stored once,
 * with the first value put. */
typedef struct deep_names {
    struct deep_name_slot {
        const char *key; /* NULL: empty */
        size_t len;
        uint64_t hash;
        size_t val;
    } * slot;
    size_t cap, n;
} deep_names;

void deep_names_free(deep_names *m);
/* key (n bytes) -> val unless the key is already there; returns the value the key has. */
size_t deep_names_put(deep_names *m, const char *key, size_t n, size_t val);
/* The value of key (n bytes, hash h = deep_hash(key, n)), or -1. */
long deep_names_find(const deep_names *m, const char *key, size_t n, uint64_t h);
static inline long deep_names_get(const deep_names *m, const char *key, size_t n) {
    return deep_names_find(m, key, n, deep_hash(key, n));
}
