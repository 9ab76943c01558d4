/* Measurement protocol (nvbench-style): sample statistics (median, p10/p90, stdev, min/max), the stopping
 * rule (relative stdev after a minimum time, or a timeout), throttled-sample dropping, and a driver loop
 * over a sample callback. See include/lpo/stats.h for the contract. */
#include "lpo/stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/core.h"

/* ---- options ------------------------------------------------------------------------------------------ */
void lpo_measure_opts_default(lpo_measure_opts *o) {
    memset(o, 0, sizeof *o);
    o->warmup = 3;
    o->min_samples = 10;
    o->max_samples = 100000;
    o->min_time_s = 0.5;
    o->max_rel_stdev = 0.005;
    o->timeout_s = 30.0;
    o->cold = 0;
    o->drop_throttled = 1;
    o->throttle_threshold = 0.75;
    o->ref_clock_mhz = 0;
    o->nvml_sample_ms = 100;
}

lpo_status lpo_measure_opts_check(const lpo_measure_opts *o) {
    if (o->warmup < 0) return lpo_errorf(LPO_E_CONFIG, "profiling.warmup must be >= 0 (got %d)", o->warmup);
    if (o->min_samples < 1)
        return lpo_errorf(LPO_E_CONFIG, "profiling.min_samples must be >= 1 (got %d)", o->min_samples);
    if (o->max_samples < o->min_samples)
        return lpo_errorf(LPO_E_CONFIG, "profiling.max_samples (%d) must be >= profiling.min_samples (%d)",
                          o->max_samples, o->min_samples);
    if (!(o->min_time_s >= 0))
        return lpo_errorf(LPO_E_CONFIG, "profiling.min_time_s must be >= 0 (got %g)", o->min_time_s);
    if (!(o->max_rel_stdev > 0))
        return lpo_errorf(LPO_E_CONFIG, "profiling.max_rel_stdev must be > 0 (got %g)", o->max_rel_stdev);
    if (!(o->timeout_s > 0))
        return lpo_errorf(LPO_E_CONFIG, "profiling.timeout_s must be > 0 (got %g)", o->timeout_s);
    if (!(o->throttle_threshold >= 0 && o->throttle_threshold <= 1))
        return lpo_errorf(LPO_E_CONFIG, "profiling.throttle_threshold must be in [0, 1] (got %g)",
                          o->throttle_threshold);
    if (o->nvml_sample_ms < 0)
        return lpo_errorf(LPO_E_CONFIG, "profiling.nvml_sample_ms must be >= 0 (got %d)", o->nvml_sample_ms);
    return LPO_OK;
}

/* ---- statistics --------------------------------------------------------------------------------------- */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double lpo_quantile_sorted(const double *sorted, size_t n, double q) {
    if (n == 0) return NAN;
    if (!(q > 0)) return sorted[0]; /* NaN too: floor(NaN) cast to size_t is undefined */
    if (q >= 1) return sorted[n - 1];
    double h = q * (double)(n - 1);
    size_t lo = (size_t)floor(h);
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (h - (double)lo) * (sorted[hi] - sorted[lo]);
}

lpo_status lpo_stats_compute(const double *x, size_t n, lpo_stats *out) {
    memset(out, 0, sizeof *out);
    if (n == 0) return lpo_errorf(LPO_E_INVALID, "statistics of zero samples");
    double *s = malloc(n * sizeof *s);
    if (!s) return lpo_errorf(LPO_E_NOMEM, "statistics of %zu samples: out of memory", n);
    double sum = 0;
    // x (n,) -> s (n,) copy, checking each sample
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || x[i] < 0) {
            free(s);
            return lpo_errorf(LPO_E_INVALID, "sample %zu is %g (samples must be finite and >= 0)", i, x[i]);
        }
        s[i] = x[i];
        sum += x[i];
    }
    qsort(s, n, sizeof *s, cmp_double);
    out->n = n;
    out->total = sum;
    out->mean = sum / (double)n;
    double ss = 0;
    // squared deviations from the mean (two-pass: exact for tight samples)
    for (size_t i = 0; i < n; i++) ss += (s[i] - out->mean) * (s[i] - out->mean);
    out->stdev = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
    out->rel_stdev = out->mean > 0 ? out->stdev / out->mean : 0;
    out->min = s[0];
    out->max = s[n - 1];
    out->median = lpo_quantile_sorted(s, n, 0.5);
    out->p10 = lpo_quantile_sorted(s, n, 0.1);
    out->p90 = lpo_quantile_sorted(s, n, 0.9);
    out->converged = 1;
    free(s);
    return LPO_OK;
}

/* ---- the stopping rule -------------------------------------------------------------------------------- */
struct lpo_measure {
    lpo_measure_opts o;
    double *x; /* kept samples */
    size_t n, cap;
    size_t taken, dropped;
    double ref_clock;
    double sum, mean, m2; /* Welford running mean / sum of squared deviations of kept samples */
    double duration;      /* summed duration of the kept samples (seconds x repetitions) */
    double lo, hi;        /* smallest and largest kept sample */
    uint64_t t0_ns;       /* host time of the first sample */
    int done, converged;
};

lpo_status lpo_measure_new(const lpo_measure_opts *o, lpo_measure **out) {
    *out = NULL;
    lpo_status st = lpo_measure_opts_check(o);
    if (st) return st;
    lpo_measure *m = calloc(1, sizeof *m);
    if (!m) return lpo_errorf(LPO_E_NOMEM, "measurement: out of memory");
    m->o = *o;
    m->ref_clock = o->ref_clock_mhz;
    *out = m;
    return LPO_OK;
}

void lpo_measure_free(lpo_measure *m) {
    if (!m) return;
    free(m->x);
    free(m);
}

const char *lpo_stats_spread_note(const lpo_stats *s, const char *hint, char *buf, size_t n) {
    buf[0] = 0;
    if (s->n > 1 && s->max > LPO_MEASURE_MAX_SPREAD * s->min)
        snprintf(
            buf, n,
            "samples span %.0fx (min %.3g us, median %.3g us, max %.3g us): other work preempted it now and "
            "then (a busy machine, or more threads than free cores%s%s); not converged",
            s->min > 0 ? s->max / s->min : INFINITY, s->min * 1e6, s->median * 1e6, s->max * 1e6,
            hint && *hint ? ": try " : "", hint ? hint : "");
    return buf;
}

static int rule_holds(const lpo_measure *m) {
    if (m->n < (size_t)m->o.min_samples || m->duration < m->o.min_time_s) return 0;
    double sd = m->n > 1 ? sqrt(m->m2 / (double)(m->n - 1)) : 0;
    double rel = m->mean > 0 ? sd / m->mean : 0;
    return rel <= m->o.max_rel_stdev && !(m->hi > LPO_MEASURE_MAX_SPREAD * m->lo);
}

int lpo_measure_add(lpo_measure *m, double seconds, double sm_clock_mhz) {
    return lpo_measure_add_reps(m, seconds, 1, sm_clock_mhz);
}

int lpo_measure_add_reps(lpo_measure *m, double seconds, int reps, double sm_clock_mhz) {
    if (m->done) return 1;
    if (m->taken == 0) m->t0_ns = lpo_now_ns();
    m->taken++;
    if (sm_clock_mhz > 0 && m->ref_clock <= 0) m->ref_clock = sm_clock_mhz;
    int throttled = m->o.drop_throttled && sm_clock_mhz > 0 && m->ref_clock > 0 &&
                    sm_clock_mhz < m->o.throttle_threshold * m->ref_clock;
    if (throttled || !isfinite(seconds) || seconds < 0) {
        m->dropped++;
    } else {
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 64;
            double *p = realloc(m->x, cap * sizeof *p);
            if (!p) { /* out of memory: stop with what we have */
                m->done = 1;
                m->converged = rule_holds(m);
                return 1;
            }
            m->x = p;
            m->cap = cap;
        }
        if (m->n == 0 || seconds < m->lo) m->lo = seconds;
        if (m->n == 0 || seconds > m->hi) m->hi = seconds;
        m->x[m->n++] = seconds;
        m->sum += seconds;
        m->duration += seconds * (reps > 0 ? reps : 1);
        double d = seconds - m->mean;
        m->mean += d / (double)m->n;
        m->m2 += d * (seconds - m->mean);
    }
    if (rule_holds(m)) {
        m->done = m->converged = 1;
    } else if (m->taken >= (size_t)m->o.max_samples ||
               (double)(lpo_now_ns() - m->t0_ns) * 1e-9 >= m->o.timeout_s) {
        m->done = 1;
        m->converged = 0;
    }
    return m->done;
}

int lpo_measure_done(const lpo_measure *m) {
    return m->done;
}

const double *lpo_measure_samples(const lpo_measure *m, size_t *n) {
    *n = m->n;
    return m->x;
}

lpo_status lpo_measure_stats(const lpo_measure *m, lpo_stats *out) {
    if (m->n == 0) {
        memset(out, 0, sizeof *out);
        out->n_dropped = m->dropped;
        return lpo_errorf(LPO_E_INVALID, "no sample kept (%zu taken, %zu dropped as throttled)", m->taken,
                          m->dropped);
    }
    lpo_status st = lpo_stats_compute(m->x, m->n, out);
    if (st) return st;
    out->n_dropped = m->dropped;
    out->converged = m->converged;
    return LPO_OK;
}

lpo_status lpo_measure_run(const lpo_measure_opts *o, lpo_sample_fn fn, void *ctx, lpo_measure **out) {
    lpo_measure *m;
    lpo_status st = lpo_measure_new(o, &m);
    if (st) return st;
    double t, clk;
    int reps = 1;
    // warm-up iterations, untimed
    for (int i = 0; i < o->warmup; i++) {
        if (o->on_sample) o->on_sample(o->on_sample_ud, 1, (size_t)i);
        if ((st = fn(ctx, &t, &reps, &clk))) goto fail;
    }
    // timed samples until the stopping rule says stop
    size_t i = 0;
    do {
        if (o->on_sample) o->on_sample(o->on_sample_ud, 0, i++);
        reps = 1;
        if ((st = fn(ctx, &t, &reps, &clk))) goto fail;
    } while (!lpo_measure_add_reps(m, t, reps, clk));
    *out = m;
    return LPO_OK;
fail:
    lpo_measure_free(m);
    *out = NULL;
    return st;
}

/* ---- progress on a terminal ---- */
/* "42 s", "3:05", "1:02:09" */
static void clock_text(char *b, size_t n, double s) {
    const long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t < 60)
        snprintf(b, n, "%ld s", t);
    else if (t < 3600)
        snprintf(b, n, "%ld:%02ld", t / 60, t % 60);
    else
        snprintf(b, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

void lpo_progress_format(char *buf, size_t n, const char *tool, int index, int total, const char *point,
                         const char *phase, int repeat, double elapsed_s) {
    char el[32], left[48];
    clock_text(el, sizeof el, elapsed_s);
    if (index > 0 && total > index) {
        char t[32];
        clock_text(t, sizeof t, elapsed_s / index * (total - index));
        snprintf(left, sizeof left, "about %s left", t);
    } else {
        snprintf(left, sizeof left, "%s", total > 1 ? "estimating the time left" : "");
    }
    int w =
        snprintf(buf, n, "%s: point %d/%d%s%s", tool, index + 1, total, point ? " " : "", point ? point : "");
    size_t at = w > 0 ? (size_t)w : 0;
    if (phase && at < n) {
        w = repeat >= 0 ? snprintf(buf + at, n - at, ": %s %d", phase, repeat + 1)
                        : snprintf(buf + at, n - at, ": %s", phase);
        at += w > 0 ? (size_t)w : 0;
    }
    if (at < n) snprintf(buf + at, n - at, "; %s elapsed%s%s", el, left[0] ? ", " : "", left);
}

void lpo_progress_init(lpo_progress *p, const char *tool, int total) {
    memset(p, 0, sizeof *p);
    p->tool = tool;
    p->total = total;
    p->tty = isatty(2);
    p->t0_ns = lpo_now_ns();
}

void lpo_progress_show(lpo_progress *p, const char *point, const char *phase, int repeat) {
    if (!p || !p->tty) return;
    const unsigned long long now = lpo_now_ns();
    if (p->shown && now - p->last_ns < 100000000ull) return; /* a line every 0.1 s at most */
    char line[512], what[320];
    snprintf(what, sizeof what, "%s%s%s", p->label, p->label[0] && point ? " " : "", point ? point : "");
    lpo_progress_format(line, sizeof line, p->tool, p->index, p->total, what[0] ? what : NULL, phase, repeat,
                        (double)(now - p->t0_ns) * 1e-9);
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    p->last_ns = now;
    p->shown = 1;
}

void lpo_progress_end(lpo_progress *p) {
    if (!p || !p->tty || !p->shown) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    p->shown = 0;
}
