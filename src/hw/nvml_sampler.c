/* NVML sampler: a pthread that reads clocks, power, energy, temperature, utilisation and throttle reasons
 * of one GPU every period_ms into a growable array; summaries and nvml.csv. The reading itself goes
 * through a source function, NVML's in real use and a fake one in the unit tests. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hw/nvml.h"
#include "lpo/core.h"
#include "lpo/nvml_sampler.h"

#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

struct lpo_nvml_sampler {
    lpo__nvml_read_fn read;
    void *ctx;
    char name[96], uuid[96];
    /* NVML source */
    lpo_nvml nv;
    lpo_nvml_device dev;
    /* thread */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, stop, period_ms;
    uint64_t t0_ns;
    double energy0; /* counter at start (J), < 0 unknown */
    lpo_nvml_sample *x;
    size_t n, cap;
};

/* ---- throttle reasons ---- */
static const struct {
    int64_t bit;
    const char *name;
} throttle_bits[] = {
    {LPO_THROTTLE_GPU_IDLE, "idle"},
    {LPO_THROTTLE_APP_CLOCKS, "app_clocks"},
    {LPO_THROTTLE_SW_POWER_CAP, "sw_power_cap"},
    {LPO_THROTTLE_HW_SLOWDOWN, "hw_slowdown"},
    {LPO_THROTTLE_SYNC_BOOST, "sync_boost"},
    {LPO_THROTTLE_SW_THERMAL, "sw_thermal"},
    {LPO_THROTTLE_HW_THERMAL, "hw_thermal"},
    {LPO_THROTTLE_HW_POWER_BRAKE, "hw_power_brake"},
    {LPO_THROTTLE_DISPLAY_CLOCK, "display_clock"},
};

const char *lpo_throttle_names(int64_t mask, char *buf, size_t n) {
    if (!n) return buf;
    buf[0] = 0;
    if (mask < 0) {
        snprintf(buf, n, "unknown");
        return buf;
    }
    if (mask == 0) {
        snprintf(buf, n, "none");
        return buf;
    }
    size_t len = 0;
    // each known bit set in mask, joined with '|'
    for (size_t i = 0; i < sizeof throttle_bits / sizeof throttle_bits[0]; i++) {
        if (!(mask & throttle_bits[i].bit)) continue;
        int w = snprintf(buf + len, n - len, "%s%s", len ? "|" : "", throttle_bits[i].name);
        if (w < 0 || (size_t)w >= n - len) break;
        len += (size_t)w;
        mask &= ~throttle_bits[i].bit;
    }
    if (mask && len + 1 < n)
        snprintf(buf + len, n - len, "%s0x%llx", len ? "|" : "", (unsigned long long)mask);
    return buf;
}

int lpo_throttle_is_slowdown(int64_t mask) {
    if (mask <= 0) return 0;
    return (mask & (LPO_THROTTLE_SW_POWER_CAP | LPO_THROTTLE_HW_SLOWDOWN | LPO_THROTTLE_SW_THERMAL |
                    LPO_THROTTLE_HW_THERMAL | LPO_THROTTLE_HW_POWER_BRAKE)) != 0;
}

/* ---- NVML source ---- */
static lpo_status nvml_read(void *ctx, lpo_nvml_sample *o) {
    lpo_nvml_sampler *s = ctx;
    lpo_nvml *nv = &s->nv;
    unsigned u, uu[2];
    unsigned long long ull;
    o->sm_mhz = nv->clock(s->dev, LPO_NVML_CLOCK_SM, &u) == 0 ? (double)u : -1;
    o->mem_mhz = nv->clock(s->dev, LPO_NVML_CLOCK_MEM, &u) == 0 ? (double)u : -1;
    o->temp_c = nv->temperature(s->dev, LPO_NVML_TEMP_GPU, &u) == 0 ? (double)u : -1;
    o->power_w = nv->power_usage && nv->power_usage(s->dev, &u) == 0 ? u * 1e-3 : -1;
    o->energy_j = nv->total_energy && nv->total_energy(s->dev, &ull) == 0 ? (double)ull * 1e-3 : -1;
    if (nv->utilization && nv->utilization(s->dev, uu) == 0) {
        o->util_gpu = uu[0];
        o->util_mem = uu[1];
    } else {
        o->util_gpu = o->util_mem = -1;
    }
    o->throttle = nv->throttle_reasons && nv->throttle_reasons(s->dev, &ull) == 0 ? (int64_t)ull : -1;
    return LPO_OK;
}

static lpo_nvml_sampler *sampler_alloc(void) {
    lpo_nvml_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->energy0 = -1;
    return s;
}

lpo_status lpo__nvml_sampler_open_source(lpo__nvml_read_fn fn, void *ctx, const char *name, const char *uuid,
                                         lpo_nvml_sampler **out) {
    lpo_nvml_sampler *s = sampler_alloc();
    if (!s) return lpo_errorf(LPO_E_NOMEM, "nvml sampler: out of memory");
    s->read = fn;
    s->ctx = ctx;
    snprintf(s->name, sizeof s->name, "%s", name ? name : "");
    snprintf(s->uuid, sizeof s->uuid, "%s", uuid ? uuid : "");
    *out = s;
    return LPO_OK;
}

lpo_status lpo_nvml_sampler_open(int device, lpo_nvml_sampler **out) {
    *out = NULL;
    lpo_nvml_sampler *s = sampler_alloc();
    if (!s) return lpo_errorf(LPO_E_NOMEM, "nvml sampler: out of memory");
    char why[256];
    if (!lpo_nvml_open(&s->nv, why, sizeof why)) {
        lpo_nvml_sampler_close(s);
        return lpo_errorf(LPO_E_NOT_AVAILABLE, "NVML unavailable: %s", why);
    }
    int found = 0;
#ifdef LPO_HAVE_CUDA
    char bus[32];
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) == cudaSuccess)
        found = s->nv.device_by_pci(bus, &s->dev) == 0;
#endif
    if (!found) found = device >= 0 && s->nv.device_by_index((unsigned)device, &s->dev) == 0;
    if (!found) {
        lpo_nvml_sampler_close(s);
        return lpo_errorf(LPO_E_NOT_AVAILABLE, "NVML has no device %d", device);
    }
    if (s->nv.device_name(s->dev, s->name, sizeof s->name) != 0) s->name[0] = 0;
    if (!s->nv.uuid || s->nv.uuid(s->dev, s->uuid, sizeof s->uuid) != 0) s->uuid[0] = 0;
    s->read = nvml_read;
    s->ctx = s;
    *out = s;
    return LPO_OK;
}

void lpo_nvml_sampler_close(lpo_nvml_sampler *s) {
    if (!s) return;
    lpo_nvml_sampler_stop(s);
    lpo_nvml_close(&s->nv);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->x);
    free(s);
}

const char *lpo_nvml_sampler_name(const lpo_nvml_sampler *s) {
    return s->name;
}
const char *lpo_nvml_sampler_uuid(const lpo_nvml_sampler *s) {
    return s->uuid;
}

/* ---- sampling ---- */
/* One reading with t_s and energy relative to the start. */
static lpo_status take(lpo_nvml_sampler *s, lpo_nvml_sample *o) {
    memset(o, 0, sizeof *o);
    lpo_status st = s->read(s->ctx, o);
    if (st) return st;
    o->t_s = (double)(lpo_now_ns() - s->t0_ns) * 1e-9;
    if (o->energy_j >= 0 && s->energy0 < 0) s->energy0 = o->energy_j;
    o->energy_j = o->energy_j >= 0 && s->energy0 >= 0 ? o->energy_j - s->energy0 : -1;
    return LPO_OK;
}

lpo_status lpo_nvml_sampler_read(lpo_nvml_sampler *s, lpo_nvml_sample *out) {
    pthread_mutex_lock(&s->mu);
    lpo_status st = take(s, out);
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* appends under the lock; drops the reading when out of memory */
static void push(lpo_nvml_sampler *s, const lpo_nvml_sample *x) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        lpo_nvml_sample *p = realloc(s->x, cap * sizeof *p);
        if (!p) return;
        s->x = p;
        s->cap = cap;
    }
    s->x[s->n++] = *x;
}

static void *sampler_main(void *arg) {
    lpo_nvml_sampler *s = arg;
    pthread_mutex_lock(&s->mu);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    // one reading per period until stop is set
    while (!s->stop) {
        lpo_nvml_sample x;
        if (take(s, &x) == LPO_OK) push(s, &x);
        next.tv_nsec += (long)s->period_ms * 1000000L;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        while (!s->stop && pthread_cond_timedwait(&s->cv, &s->mu, &next) == 0) {
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

lpo_status lpo_nvml_sampler_start(lpo_nvml_sampler *s, int period_ms) {
    if (s->running) return lpo_errorf(LPO_E_INVALID, "nvml sampler: already running");
    if (period_ms < 1) return lpo_errorf(LPO_E_INVALID, "nvml sampler: period %d ms must be >= 1", period_ms);
    s->n = 0;
    s->stop = 0;
    s->period_ms = period_ms;
    s->t0_ns = lpo_now_ns();
    s->energy0 = -1;
    if (pthread_create(&s->thread, NULL, sampler_main, s) != 0)
        return lpo_errorf(LPO_E_INTERNAL, "nvml sampler: cannot start a thread");
    s->running = 1;
    return LPO_OK;
}

lpo_status lpo_nvml_sampler_stop(lpo_nvml_sampler *s) {
    if (!s->running) return LPO_OK;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->running = 0;
    lpo_nvml_sample x;
    if (take(s, &x) == LPO_OK) push(s, &x);
    return LPO_OK;
}

const lpo_nvml_sample *lpo_nvml_sampler_samples(const lpo_nvml_sampler *s, size_t *n) {
    *n = s->n;
    return s->x;
}

/* ---- summaries and writers ---- */
void lpo_nvml_summarize(const lpo_nvml_sample *x, size_t n, lpo_nvml_summary *o) {
    memset(o, 0, sizeof *o);
    o->sm_mhz_min = o->sm_mhz_avg = o->sm_mhz_max = o->mem_mhz_avg = -1;
    o->power_w_avg = o->power_w_max = o->energy_j = o->temp_c_max = o->util_gpu_avg = -1;
    o->throttle_any = -1;
    if (n == 0) return;
    o->n = n;
    o->seconds = x[n - 1].t_s;
    double sm = 0, mem = 0, pw = 0, ut = 0;
    size_t nsm = 0, nmem = 0, npw = 0, nut = 0;
    double integ = 0; /* power integrated with the trapezoid rule, when no energy counter */
    // x (n,) readings -> averages, extremes, OR of reasons
    for (size_t i = 0; i < n; i++) {
        const lpo_nvml_sample *s = &x[i];
        if (s->sm_mhz >= 0) {
            sm += s->sm_mhz, nsm++;
            if (o->sm_mhz_min < 0 || s->sm_mhz < o->sm_mhz_min) o->sm_mhz_min = s->sm_mhz;
            if (s->sm_mhz > o->sm_mhz_max) o->sm_mhz_max = s->sm_mhz;
        }
        if (s->mem_mhz >= 0) mem += s->mem_mhz, nmem++;
        if (s->power_w >= 0) {
            pw += s->power_w, npw++;
            if (s->power_w > o->power_w_max) o->power_w_max = s->power_w;
            if (i > 0 && x[i - 1].power_w >= 0)
                integ += 0.5 * (s->power_w + x[i - 1].power_w) * (s->t_s - x[i - 1].t_s);
        }
        if (s->util_gpu >= 0) ut += s->util_gpu, nut++;
        if (s->temp_c > o->temp_c_max) o->temp_c_max = s->temp_c;
        if (s->throttle >= 0) o->throttle_any = (o->throttle_any < 0 ? 0 : o->throttle_any) | s->throttle;
    }
    if (nsm) o->sm_mhz_avg = sm / (double)nsm;
    if (nmem) o->mem_mhz_avg = mem / (double)nmem;
    if (npw) o->power_w_avg = pw / (double)npw;
    if (nut) o->util_gpu_avg = ut / (double)nut;
    if (x[n - 1].energy_j >= 0)
        o->energy_j = x[n - 1].energy_j;
    else if (npw > 1)
        o->energy_j = integ;
}

void lpo_nvml_sampler_summary(const lpo_nvml_sampler *s, lpo_nvml_summary *out) {
    lpo_nvml_summarize(s->x, s->n, out);
}

static void csv_num(lpo_strbuf *out, double v, const char *fmt) {
    if (v >= 0) lpo_sb_printf(out, fmt, v);
}

void lpo_nvml_samples_write_csv(const lpo_nvml_sample *x, size_t n, lpo_strbuf *out) {
    lpo_sb_puts(out,
                "t_s,sm_mhz,mem_mhz,power_w,energy_j,temp_c,util_gpu,util_mem,throttle,throttle_names\n");
    // one line per reading; unknown values empty
    for (size_t i = 0; i < n; i++) {
        const lpo_nvml_sample *s = &x[i];
        char names[160];
        const double v[7] = {s->sm_mhz, s->mem_mhz,  s->power_w, s->energy_j,
                             s->temp_c, s->util_gpu, s->util_mem};
        static const char *const fmt[7] = {"%.0f", "%.0f", "%.3f", "%.3f", "%.0f", "%.0f", "%.0f"};
        lpo_sb_printf(out, "%.4f,", s->t_s);
        // the seven measured columns, each followed by its comma
        for (int k = 0; k < 7; k++) {
            csv_num(out, v[k], fmt[k]);
            lpo_sb_puts(out, ",");
        }
        if (s->throttle >= 0) lpo_sb_printf(out, "0x%llx", (unsigned long long)s->throttle);
        lpo_sb_printf(out, ",%s\n",
                      s->throttle >= 0 ? lpo_throttle_names(s->throttle, names, sizeof names) : "");
    }
}

lpo_status lpo_nvml_sampler_write_csv(const lpo_nvml_sampler *s, const char *path) {
    lpo_strbuf sb = {0};
    lpo_nvml_samples_write_csv(s->x, s->n, &sb);
    lpo_status st = lpo_write_file(path, sb.buf, sb.len);
    lpo_sb_free(&sb);
    return st;
}

static void kv_known(lpo_json *j, const char *key, double v) {
    lpo_json_key(j, key);
    if (v >= 0)
        lpo_json_double(j, v);
    else
        lpo_json_null(j);
}

void lpo_nvml_summary_write_json(const lpo_nvml_summary *sum, lpo_json *j) {
    lpo_json_object_begin(j);
    lpo_json_kv_int(j, "n", (int64_t)sum->n);
    lpo_json_kv_double(j, "seconds", sum->seconds);
    kv_known(j, "sm_mhz_avg", sum->sm_mhz_avg);
    kv_known(j, "sm_mhz_min", sum->sm_mhz_min);
    kv_known(j, "sm_mhz_max", sum->sm_mhz_max);
    kv_known(j, "mem_mhz_avg", sum->mem_mhz_avg);
    kv_known(j, "power_w_avg", sum->power_w_avg);
    kv_known(j, "power_w_max", sum->power_w_max);
    kv_known(j, "energy_j", sum->energy_j);
    kv_known(j, "temp_c_max", sum->temp_c_max);
    kv_known(j, "util_gpu_avg", sum->util_gpu_avg);
    lpo_json_key(j, "throttle");
    if (sum->throttle_any >= 0) {
        char names[160];
        lpo_json_str(j, lpo_throttle_names(sum->throttle_any, names, sizeof names));
    } else {
        lpo_json_null(j);
    }
    lpo_json_object_end(j);
}
