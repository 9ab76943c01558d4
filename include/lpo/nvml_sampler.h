/* NVML sampler: a background thread that reads one GPU's SM and memory clocks, power, energy counter,
 * temperature, utilisation and throttle reasons every period_ms while something is measured, so every
 * result can say at which clocks and power it was taken. NVML is loaded with dlopen (no nvml.h); a
 * machine without it (no driver, CPU-only) gets LPO_E_NOT_AVAILABLE from open, a normal outcome that
 * callers report ("nvml: unavailable (why)") and go on without.
 *
 *   lpo_nvml_sampler *s;
 *   if (lpo_nvml_sampler_open(dev, &s) == LPO_OK) {
 *       lpo_nvml_sampler_start(s, 100);
 *       ... measured work ...
 *       lpo_nvml_sampler_stop(s);
 *       lpo_nvml_summary sum; lpo_nvml_sampler_summary(s, &sum);
 *       lpo_nvml_sampler_write_csv(s, "run/nvml.csv");
 *       lpo_nvml_sampler_close(s);
 *   }
 * start/stop may be repeated; each start clears the previous samples. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lpo/json.h"
#include "lpo/status.h"

/* One reading. Fields NVML could not provide are negative (-1). */
typedef struct {
    double t_s;                /* seconds since start (host monotonic clock) */
    double sm_mhz, mem_mhz;    /* current clocks */
    double power_w;            /* board power draw */
    double energy_j;           /* energy counter minus its value at start (joules) */
    double temp_c;             /* GPU temperature */
    double util_gpu, util_mem; /* utilisation, percent */
    int64_t throttle;          /* clock event ("throttle") reasons bitmask, LPO_THROTTLE_*; -1 unknown */
} lpo_nvml_sample;

/* NVML clocks event reasons (nvmlClocksEventReason*) */
enum {
    LPO_THROTTLE_GPU_IDLE = 0x1,
    LPO_THROTTLE_APP_CLOCKS = 0x2,
    LPO_THROTTLE_SW_POWER_CAP = 0x4,
    LPO_THROTTLE_HW_SLOWDOWN = 0x8,
    LPO_THROTTLE_SYNC_BOOST = 0x10,
    LPO_THROTTLE_SW_THERMAL = 0x20,
    LPO_THROTTLE_HW_THERMAL = 0x40,
    LPO_THROTTLE_HW_POWER_BRAKE = 0x80,
    LPO_THROTTLE_DISPLAY_CLOCK = 0x100,
};
/* "sw_power_cap|hw_thermal" style names of a mask into buf ("none" for 0, "unknown" for < 0). Idle and
 * application-clock bits are informational and named too. Returns buf. */
const char *lpo_throttle_names(int64_t mask, char *buf, size_t n);
/* 1 when mask holds a reason that lowers clocks under load (power cap, slowdowns, thermal, brake). */
int lpo_throttle_is_slowdown(int64_t mask);

/* Averages over a sampled interval. n == 0: nothing was sampled (every other field 0 / -1). */
typedef struct {
    size_t n;
    double seconds; /* time covered (last t_s) */
    double sm_mhz_avg, sm_mhz_min, sm_mhz_max;
    double mem_mhz_avg;
    double power_w_avg, power_w_max;
    double energy_j; /* energy counter difference (or power integrated when absent) */
    double temp_c_max;
    double util_gpu_avg;
    int64_t throttle_any; /* OR of every sample's reasons (-1 unknown) */
} lpo_nvml_summary;

typedef struct lpo_nvml_sampler lpo_nvml_sampler;

/* Opens NVML for CUDA device ordinal `device` (matched through its PCI bus id; NVML index `device` in a
 * build without CUDA). LPO_E_NOT_AVAILABLE with the reason when NVML or the device is unavailable. */
lpo_status lpo_nvml_sampler_open(int device, lpo_nvml_sampler **out);
void lpo_nvml_sampler_close(lpo_nvml_sampler *s);
/* GPU name and UUID ("GPU-xxxxxxxx-...") as NVML reports them ("" when unknown). */
const char *lpo_nvml_sampler_name(const lpo_nvml_sampler *s);
const char *lpo_nvml_sampler_uuid(const lpo_nvml_sampler *s);
/* One immediate reading (not stored); t_s relative to the last start. */
lpo_status lpo_nvml_sampler_read(lpo_nvml_sampler *s, lpo_nvml_sample *out);
/* Starts the background thread (period_ms >= 1): one reading at once, then one every period_ms. Clears
 * earlier samples. LPO_E_INVALID when already running. */
lpo_status lpo_nvml_sampler_start(lpo_nvml_sampler *s, int period_ms);
/* Takes a last reading and joins the thread. No-op when not running. */
lpo_status lpo_nvml_sampler_stop(lpo_nvml_sampler *s);
/* Samples of the last start..stop (valid until the next start or close). */
const lpo_nvml_sample *lpo_nvml_sampler_samples(const lpo_nvml_sampler *s, size_t *n);
void lpo_nvml_sampler_summary(const lpo_nvml_sampler *s, lpo_nvml_summary *out);
/* Summary of any sample array (the sampler's, or one read back). */
void lpo_nvml_summarize(const lpo_nvml_sample *x, size_t n, lpo_nvml_summary *out);
/* nvml.csv: t_s,sm_mhz,mem_mhz,power_w,energy_j,temp_c,util_gpu,util_mem,throttle,throttle_names
 * (unknown values empty). */
void lpo_nvml_samples_write_csv(const lpo_nvml_sample *x, size_t n, lpo_strbuf *out);
lpo_status lpo_nvml_sampler_write_csv(const lpo_nvml_sampler *s, const char *path);
/* The summary as a JSON object (keys as the struct's fields; unknown values null). */
void lpo_nvml_summary_write_json(const lpo_nvml_summary *sum, lpo_json *j);
