/* NVML through dlopen: resolves the functions lpo uses and initialises the library. Unavailable NVML
 * (no driver, a container without it) is a normal outcome, reported in why[], never an error. */
#include "hw/nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* dlsym into a function pointer without the object->function pointer cast ISO C forbids */
static int sym(void *lib, const char *name, void *fp, size_t size) {
    void *p = dlsym(lib, name);
    if (!p) return 0;
    memcpy(fp, &p, size);
    return 1;
}

#define SYM(field, name) sym(n->lib, name, &n->field, sizeof n->field)

int lpo_nvml_open(lpo_nvml *n, char *why, size_t why_len) {
    memset(n, 0, sizeof *n);
    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        const char *e = dlerror();
        snprintf(why, why_len, "libnvidia-ml.so.1 not loadable (%s)", e ? e : "no NVIDIA driver?");
        return 0;
    }
    int ok =
        SYM(init, "nvmlInit_v2") && SYM(shutdown, "nvmlShutdown") && SYM(error_string, "nvmlErrorString") &&
        SYM(driver_version, "nvmlSystemGetDriverVersion") && SYM(nvml_version, "nvmlSystemGetNVMLVersion") &&
        SYM(device_count, "nvmlDeviceGetCount_v2") && SYM(device_by_index, "nvmlDeviceGetHandleByIndex_v2") &&
        SYM(device_by_pci, "nvmlDeviceGetHandleByPciBusId_v2") && SYM(device_name, "nvmlDeviceGetName") &&
        SYM(clock, "nvmlDeviceGetClockInfo") && SYM(max_clock, "nvmlDeviceGetMaxClockInfo") &&
        SYM(temperature, "nvmlDeviceGetTemperature") &&
        SYM(power_limit, "nvmlDeviceGetPowerManagementLimit") && SYM(memory_info, "nvmlDeviceGetMemoryInfo");
    /* optional: older drivers name the throttle reasons "ClocksThrottleReasons" */
    SYM(power_usage, "nvmlDeviceGetPowerUsage");
    SYM(total_energy, "nvmlDeviceGetTotalEnergyConsumption");
    SYM(utilization, "nvmlDeviceGetUtilizationRates");
    if (!SYM(throttle_reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
        SYM(throttle_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    SYM(uuid, "nvmlDeviceGetUUID");
    if (!ok) {
        snprintf(why, why_len, "libnvidia-ml.so.1 lacks a needed function (driver too old?)");
        dlclose(n->lib);
        memset(n, 0, sizeof *n);
        return 0;
    }
    int rc = n->init();
    if (rc != 0) {
        snprintf(why, why_len, "nvmlInit failed: %s (code %d)", n->error_string(rc), rc);
        dlclose(n->lib);
        memset(n, 0, sizeof *n);
        return 0;
    }
    return 1;
}

void lpo_nvml_close(lpo_nvml *n) {
    if (!n->lib) return;
    n->shutdown();
    dlclose(n->lib);
    memset(n, 0, sizeof *n);
}
