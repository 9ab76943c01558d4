/* The tracer's clock (trace_clock.h): CLOCK_MONOTONIC, or the time-stamp counter mapped onto it.
 * The TSC mapping is ns = ns_b + (tsc - tsc_b) * ns_per_tick, fitted at init from two (tsc, ns) pairs
 * ~10 ms apart, each the tightest of several reads (a pair's error is half the TSC ticks around its
 * clock_gettime: ~0.1 us, so the rate is good to ~1e-5: it drifts from CLOCK_MONOTONIC by ~10 us per
 * second, which only shifts the NVML counters against the trace; every record of a trace uses this clock).
 * The TSC is used only where the kernel's clocksource is the TSC (it then keeps it constant-rate and
 * synchronised across CPUs). */
#include "probe/trace_clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define LPO_HAVE_TSC 1
#endif

static struct {
    lpo_clock_info info;
    uint64_t tsc_b, ns_b;
} K;
static atomic_int k_mode; /* K.info.mode, published (release) after the TSC fit is in place */
static pthread_once_t k_once = PTHREAD_ONCE_INIT;
static const char *k_want;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#ifdef LPO_HAVE_TSC
static inline uint64_t ticks(void) {
    return __rdtsc();
}

/* One (tsc, ns) pair: the tightest of 8 (least time between the TSC reads around clock_gettime). */
static void pair(uint64_t *tsc, uint64_t *ns) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 8; i++) { /* each try */
        const uint64_t a = ticks(), n = mono_ns(), b = ticks();
        if (b - a < best) {
            best = b - a;
            *tsc = a + (b - a) / 2;
            *ns = n;
        }
    }
}

static int clocksource_is_tsc(void) {
    char s[64] = {0};
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (!f) return 0;
    const int ok = fgets(s, sizeof s, f) != NULL;
    fclose(f);
    return ok && !strncmp(s, "tsc", 3) && (s[3] == '\n' || s[3] == 0);
}
#endif

static void init_once(void) {
    const char *want = k_want ? k_want : "auto";
    enum { N = 256 };
    volatile uint64_t sink = 0;
    uint64_t t0 = mono_ns();
    for (int i = 0; i < N; i++) sink += mono_ns(); /* N reads */
    K.info.read_ns_monotonic = (double)(mono_ns() - t0) / N;
    K.info.mode = LPO_CLOCK_MONOTONIC;
#ifdef LPO_HAVE_TSC
    t0 = mono_ns();
    for (int i = 0; i < N; i++) sink += ticks(); /* N reads */
    K.info.read_ns_tsc = (double)(mono_ns() - t0) / N;
    const int use = !strcmp(want, "tsc") || (!strcmp(want, "auto") && clocksource_is_tsc() &&
                                             K.info.read_ns_tsc * 2 < K.info.read_ns_monotonic);
    if (use) {
        uint64_t tsc_a = 0, ns_a = 0, tsc_b = 0, ns_b = 0;
        pair(&tsc_a, &ns_a);
        struct timespec d = {0, 10000000};
        while (nanosleep(&d, &d) != 0) {
        }
        pair(&tsc_b, &ns_b);
        if (tsc_b > tsc_a && ns_b > ns_a) {
            K.info.ns_per_tick = (double)(ns_b - ns_a) / (double)(tsc_b - tsc_a);
            K.tsc_b = tsc_b;
            K.ns_b = ns_b;
            K.info.mode = LPO_CLOCK_TSC;
            atomic_store_explicit(&k_mode, LPO_CLOCK_TSC, memory_order_release);
        }
    }
#endif
    (void)sink;
}

lpo_clock_mode lpo_clock_init(const char *want) {
    k_want = want;
    pthread_once(&k_once, init_once);
    return K.info.mode;
}

uint64_t lpo_clock_now(void) {
#ifdef LPO_HAVE_TSC
    if (atomic_load_explicit(&k_mode, memory_order_acquire) == LPO_CLOCK_TSC) {
        const int64_t d = (int64_t)(ticks() - K.tsc_b); /* reads before tsc_b (other CPUs) are negative */
        return K.ns_b + (uint64_t)(int64_t)((double)d * K.info.ns_per_tick);
    }
#endif
    return mono_ns();
}

void lpo_clock_get_info(lpo_clock_info *info) {
    *info = K.info;
}
