/* The tracer's clock: CLOCK_MONOTONIC nanoseconds, read through the CPU's time-stamp counter when that is
 * cheaper and the kernel trusts it. CUPTI asks for a timestamp many times per kernel launch (through
 * cuptiActivityRegisterTimestampCallback) and the tracer stamps every NVTX push/pop and launch call, so on
 * machines where clock_gettime is slow (a virtual machine without a vDSO fast path: ~200 ns on the H100
 * machine) the clock is a large part of the tracing overhead (docs/perf-notes.md). Shared by
 * liblpo_probe.so and lpo_core (for tests). */
#pragma once
#include <stdint.h>

typedef enum {
    LPO_CLOCK_MONOTONIC = 0, /* clock_gettime(CLOCK_MONOTONIC) */
    LPO_CLOCK_TSC = 1,       /* the time-stamp counter, scaled and offset to CLOCK_MONOTONIC at init */
} lpo_clock_mode;

typedef struct {
    lpo_clock_mode mode;
    double ns_per_tick;       /* LPO_CLOCK_TSC: the calibrated rate */
    double read_ns_monotonic; /* measured cost of one clock_gettime(CLOCK_MONOTONIC) */
    double read_ns_tsc;       /* measured cost of one TSC read (0 where there is none) */
} lpo_clock_info;

/* Chooses and calibrates the clock once (later calls return the first choice). want: "auto" or NULL (the
 * TSC when the kernel's clocksource is "tsc" and reading it costs less than half of clock_gettime),
 * "tsc" (whenever the CPU has one), "monotonic". Calibration sleeps ~10 ms. Thread-safe. */
lpo_clock_mode lpo_clock_init(const char *want);
/* Nanoseconds on the chosen clock (CLOCK_MONOTONIC before lpo_clock_init). */
uint64_t lpo_clock_now(void);
void lpo_clock_get_info(lpo_clock_info *info);
