/* Shared by the GPU tests (tests/gpu/): checks that fail the cmocka test with the statement, the CUDA or lpo
 * message and where, and the seeded random stream every GPU test draws its data from. Include after
 * <cmocka.h> and <cuda_runtime_api.h>. */
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "lpo/status.h"

/* A CUDA runtime call that must succeed. */
#define CK(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess)                                                                               \
            fail_msg("%s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__);                   \
    } while (0)
/* An lpo call that must return LPO_OK. */
#define OK(call)                                                                                             \
    do {                                                                                                     \
        lpo_status s_ = (call);                                                                              \
        if (s_ != LPO_OK) fail_msg("%s (line %d): %s", #call, __LINE__, lpo_last_error());                   \
    } while (0)

/* The next 64 random bits of the stream *state (splitmix64). */
static inline uint64_t lpo_test_rand(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The run's seed: $LPO_TEST_SEED, else from the clock and pid; printed as "<test>: LPO_TEST_SEED=<n>" so a
 * failing run can be repeated. */
static inline uint64_t lpo_test_seed(const char *test) {
    const char *s = getenv("LPO_TEST_SEED");
    const uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("%s: LPO_TEST_SEED=%llu\n", test, (unsigned long long)seed);
    return seed;
}
