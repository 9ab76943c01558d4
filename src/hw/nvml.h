/* NVML loaded at run time with dlopen("libnvidia-ml.so.1"): our own prototypes of the few functions lpo
 * uses (no nvml.h on the build machines). Internal to src/hw. */
#pragma once
#include <stddef.h>

typedef struct lpo__nvml_device *lpo_nvml_device; /* nvmlDevice_t */

typedef struct {
    void *lib;
    int (*init)(void);     /* nvmlInit_v2 */
    int (*shutdown)(void); /* nvmlShutdown */
    const char *(*error_string)(int);
    int (*driver_version)(char *, unsigned);
    int (*nvml_version)(char *, unsigned);
    int (*device_count)(unsigned *);
    int (*device_by_index)(unsigned, lpo_nvml_device *);
    int (*device_by_pci)(const char *, lpo_nvml_device *);
    int (*device_name)(lpo_nvml_device, char *, unsigned);
    int (*clock)(lpo_nvml_device, int, unsigned *);     /* nvmlDeviceGetClockInfo */
    int (*max_clock)(lpo_nvml_device, int, unsigned *); /* nvmlDeviceGetMaxClockInfo */
    int (*temperature)(lpo_nvml_device, int, unsigned *);
    int (*power_limit)(lpo_nvml_device, unsigned *); /* milliwatts */
    int (*memory_info)(lpo_nvml_device, void *);     /* nvmlMemory_t: 3 x unsigned long long */
    /* optional (NULL when the driver lacks them): used by the sampler (include/lpo/nvml_sampler.h) */
    int (*power_usage)(lpo_nvml_device, unsigned *);            /* nvmlDeviceGetPowerUsage, milliwatts */
    int (*total_energy)(lpo_nvml_device, unsigned long long *); /* ..GetTotalEnergyConsumption, mJ */
    int (*utilization)(lpo_nvml_device, unsigned *);            /* ..GetUtilizationRates: {gpu, memory} % */
    int (*throttle_reasons)(lpo_nvml_device, unsigned long long *); /* ..GetCurrentClocksEventReasons */
    int (*uuid)(lpo_nvml_device, char *, unsigned);                 /* nvmlDeviceGetUUID */
} lpo_nvml;

enum { LPO_NVML_CLOCK_GRAPHICS = 0, LPO_NVML_CLOCK_SM = 1, LPO_NVML_CLOCK_MEM = 2, LPO_NVML_TEMP_GPU = 0 };

/* Loads and initialises NVML; 0 with why[] filled when unavailable. */
int lpo_nvml_open(lpo_nvml *n, char *why, size_t why_len);
void lpo_nvml_close(lpo_nvml *n);

/* ---- sampler internals (tests drive the sampler with a fake source) ------------------------------------ */
#include "lpo/nvml_sampler.h"
/* Fills one reading (t_s is set by the sampler; energy_j is the absolute counter in joules). */
typedef lpo_status (*lpo__nvml_read_fn)(void *ctx, lpo_nvml_sample *out);
/* A sampler over any source; name/uuid are copied. */
lpo_status lpo__nvml_sampler_open_source(lpo__nvml_read_fn fn, void *ctx, const char *name, const char *uuid,
                                         lpo_nvml_sampler **out);
