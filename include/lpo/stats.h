/* lpo statistics and measurement protocol (after NVIDIA nvbench): statistics of timed samples and the rule
 * that decides when to stop sampling. Part of core: ceilings, traces, profile, bench and kbench use it (the
 * `profiling` config group is read by lpo_measure_opts_from_config, lpo/measure.h).
 *
 * The protocol: warm-up iterations (untimed), then timed samples until
 *   - at least min_samples samples were KEPT, and their summed duration (the timed work of each sample:
 *     repetitions x seconds per repetition) is >= min_time_s, and the relative
 *     standard deviation (stdev / mean of the kept samples) is <= max_rel_stdev, and the largest kept
 *     sample is at most LPO_MEASURE_MAX_SPREAD x the smallest  -> converged; or
 *   - timeout_s of wall time passed since the first sample, or max_samples samples were taken
 *     -> stopped, converged only if the stdev rule holds (reported as "not converged" otherwise).
 * A sample taken while the SM clock was throttled (clock < throttle_threshold x the reference clock, the
 * reference being the clock of the first sample or opts.ref_clock_mhz) is dropped and counted when
 * drop_throttled is set. Times are in seconds; the caller times GPU work with events or CUPTI. */
#pragma once
#include <stddef.h>

#include "lpo/status.h"

typedef struct {
    int warmup;                /* untimed iterations before the first sample */
    int min_samples;           /* at least this many kept samples (>= 1) */
    int max_samples;           /* hard cap on samples taken (kept + dropped) */
    double min_time_s;         /* ... and at least this much summed sample time */
    double max_rel_stdev;      /* converged when stdev/mean <= this */
    double timeout_s;          /* wall-time limit after which sampling stops (not converged) */
    int cold;                  /* 1: caller flushes L2 (or rotates buffers) before each sample */
    int drop_throttled;        /* drop samples taken at a throttled SM clock */
    double throttle_threshold; /* fraction of the reference clock under which a sample is throttled */
    double ref_clock_mhz;      /* reference SM clock; 0: the first sample's clock */
    int nvml_sample_ms;        /* NVML sampler period for the measurement (0: off) */
    /* optional (progress lines): called by lpo_measure_run before each warm-up call (warmup 1) and each
     * sample (warmup 0), i counting from 0 */
    void (*on_sample)(void *ud, int warmup, size_t i);
    void *on_sample_ud;
} lpo_measure_opts;

/* nvbench's defaults: warmup 3, min_samples 10, max_samples 100000, min_time 0.5 s, rel stdev 0.5%,
 * timeout 30 s, hot, drop throttled below 0.75 of the start clock, NVML every 100 ms. */
void lpo_measure_opts_default(lpo_measure_opts *o);
/* Validates o (the rules above). */
lpo_status lpo_measure_opts_check(const lpo_measure_opts *o);

/* ---- statistics of a sample set ---------------------------------------------------------------------- */
typedef struct {
    size_t n;                /* samples the statistics are over (kept samples) */
    size_t n_dropped;        /* throttled samples dropped (not in n) */
    double median, p10, p90; /* quantiles, linear interpolation between order statistics */
    double mean, stdev;      /* sample standard deviation (n - 1); 0 for n < 2 */
    double rel_stdev;        /* stdev / mean (0 when mean is 0) */
    double min, max;
    double total;  /* sum of the samples */
    int converged; /* the stopping rule's verdict (lpo_measure); 1 for lpo_stats_compute */
} lpo_stats;

/* Statistics of x[0..n) (not modified). LPO_E_INVALID for n == 0 or a non-finite or negative sample. */
lpo_status lpo_stats_compute(const double *x, size_t n, lpo_stats *out);
/* q-quantile (0..1) of an ascending array, linear interpolation (type 7, as numpy's default). */
double lpo_quantile_sorted(const double *sorted, size_t n, double q);

/* Samples whose largest is more than this many times the smallest span an order of magnitude: something
 * else (preemption of a thread, a busy machine) shaped them, and no median of them is converged (the
 * stopping rule requires it too). */
#define LPO_MEASURE_MAX_SPREAD 10.0
/* "" when s spans less than LPO_MEASURE_MAX_SPREAD; else a sentence that says so (samples in seconds),
 * ending with "try <hint>" when hint is given ("kbench.threads=1"). Returns buf. */
const char *lpo_stats_spread_note(const lpo_stats *s, const char *hint, char *buf, size_t n);

/* ---- progress of a measured sweep on a terminal --------------------------------------------------------
 * One line on stderr, rewritten in place ("\r" and erase), only when stderr is a terminal (a log or a pipe
 * gets none): "lpo bench: point 3/12 (batch 4, pp128, tg32): sample 5; 0:42 elapsed, about 1:24 left".
 * The time left is the elapsed time per finished point times the points left ("estimating" before the
 * first point is done). */
typedef struct {
    const char *tool; /* "lpo bench" */
    int tty;          /* stderr is a terminal: lines are shown */
    int index, total; /* the point measured now (from 0) of total */
    unsigned long long t0_ns, last_ns;
    int shown;       /* a line is on the terminal (lpo_progress_end erases it) */
    char label[160]; /* the point's swept values ("kbench.m=64"), shown before `point`; "" none */
} lpo_progress;

/* The line itself (no "\r"): tool, point index+1 of total, what the point is (may be NULL), the phase
 * ("sample", "warm-up") and its repeat+1 (repeat < 0: none), the elapsed and the estimated time left. */
void lpo_progress_format(char *buf, size_t n, const char *tool, int index, int total, const char *point,
                         const char *phase, int repeat, double elapsed_s);
/* Starts a sweep of total points (tty: isatty(2)). */
void lpo_progress_init(lpo_progress *p, const char *tool, int total);
/* Shows the line for the point now measured (p->index), at most every 0.1 s; nothing off a terminal. */
void lpo_progress_show(lpo_progress *p, const char *point, const char *phase, int repeat);
/* Erases the line (before the results are printed). */
void lpo_progress_end(lpo_progress *p);

/* ---- the stopping rule, one sample at a time --------------------------------------------------------- */
typedef struct lpo_measure lpo_measure;

lpo_status lpo_measure_new(const lpo_measure_opts *o, lpo_measure **out);
void lpo_measure_free(lpo_measure *m);
/* Adds one timed sample (seconds) taken at SM clock sm_clock_mhz (<= 0: unknown, never dropped).
 * Returns 1 when sampling should stop (see the header comment), 0 to take another. */
int lpo_measure_add(lpo_measure *m, double seconds, double sm_clock_mhz);
/* The same for a sample that timed `reps` repetitions: seconds is per repetition (what the statistics are
 * over), seconds * reps is the sample's duration (what min_time_s counts). */
int lpo_measure_add_reps(lpo_measure *m, double seconds, int reps, double sm_clock_mhz);
/* 1 once lpo_measure_add returned 1. */
int lpo_measure_done(const lpo_measure *m);
/* Kept raw samples in order taken (valid until the next add or free). */
const double *lpo_measure_samples(const lpo_measure *m, size_t *n);
/* Statistics of the kept samples with n_dropped and the converged flag. LPO_E_INVALID when no sample
 * was kept (every sample throttled). */
lpo_status lpo_measure_stats(const lpo_measure *m, lpo_stats *out);

/* One sample of a measured thing: run it (after whatever per-sample preparation, e.g. an L2 flush) and
 * return its time in seconds per repetition, the repetitions it timed (*reps is 1 on entry) and the SM
 * clock seen (<= 0 when unknown). */
typedef lpo_status (*lpo_sample_fn)(void *ctx, double *seconds, int *reps, double *sm_clock_mhz);
/* Runs the whole protocol: o->warmup calls of fn (results ignored), then samples until the stopping rule
 * says stop. *out (free with lpo_measure_free) holds the samples; errors of fn are returned as they are. */
lpo_status lpo_measure_run(const lpo_measure_opts *o, lpo_sample_fn fn, void *ctx, lpo_measure **out);
