/* Machine description for `lpo env` and env.json: host (CPU, memory, OS, kernel, glibc), the CUDA runtime
 * and its GPUs (when built with CUDA), NVML (dlopen) for driver version, clocks, temperature, power. */
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "hw/nvml.h"
#include "lpo/core.h"
#include "lpo/hw.h"

#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- host ---- */
/* Value after "key" and ':' or '=' on the first line of file that starts with key (quotes stripped). */
static int file_value(const char *path, const char *key, char *out, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int found = 0;
    size_t kl = strlen(key);
    // one line per iteration until the key is found
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl)) continue;
        char *p = line + kl;
        while (*p == ' ' || *p == '\t') p++;
        if (*p != ':' && *p != '=') continue;
        p++;
        while (*p == ' ' || *p == '\t' || *p == '"') p++;
        size_t l = strcspn(p, "\"\n");
        snprintf(out, n, "%.*s", (int)l, p);
        found = 1;
    }
    fclose(f);
    return found;
}

static void collect_host(lpo_env_info *e) {
    if (gethostname(e->hostname, sizeof e->hostname) != 0)
        snprintf(e->hostname, sizeof e->hostname, "unknown");
    if (!file_value("/proc/cpuinfo", "model name", e->cpu_model, sizeof e->cpu_model))
        snprintf(e->cpu_model, sizeof e->cpu_model, "unknown");
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    e->cpu_logical = n > 0 ? (int)n : 0;
    char v[64];
    if (file_value("/proc/meminfo", "MemTotal", v, sizeof v)) e->mem_total = strtoull(v, NULL, 10) * 1024;
    if (file_value("/proc/meminfo", "MemAvailable", v, sizeof v))
        e->mem_available = strtoull(v, NULL, 10) * 1024;
    if (!file_value("/etc/os-release", "PRETTY_NAME", e->os, sizeof e->os))
        snprintf(e->os, sizeof e->os, "unknown");
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(e->kernel, sizeof e->kernel, "%s %s %s", u.sysname, u.release, u.machine);
    else
        snprintf(e->kernel, sizeof e->kernel, "unknown");
    snprintf(e->glibc, sizeof e->glibc, "%s", gnu_get_libc_version());
}

/* ---- CUDA ---- */
unsigned lpo_hw_driver_installed(void) {
    unsigned bits = access("/proc/driver/nvidia", F_OK) == 0 ? LPO_HW_DRIVER_MODULE : 0;
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib) {
        bits |= LPO_HW_DRIVER_LIBCUDA;
        dlclose(lib);
    }
    return bits;
}

void lpo_hw_no_gpu_reason(const char *err_name, const char *err_text, int driver_version, int runtime_version,
                          unsigned driver_installed, char *out, size_t n) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!driver_version && !driver_installed)
        snprintf(out, n, "no NVIDIA driver on this machine (no /proc/driver/nvidia, libcuda.so.1 not found)");
    else if (!driver_version && !(driver_installed & LPO_HW_DRIVER_LIBCUDA))
        snprintf(out, n,
                 "the NVIDIA kernel module is loaded but its CUDA library libcuda.so.1 is not found (install "
                 "the driver's user-space part, or add its folder to LD_LIBRARY_PATH)");
    else if (!(driver_installed & LPO_HW_DRIVER_MODULE) && (driver_installed & LPO_HW_DRIVER_LIBCUDA))
        snprintf(out, n,
                 "no NVIDIA kernel driver is loaded (no /proc/driver/nvidia; libcuda.so.1 is installed): no "
                 "GPU is reachable from here (a container started without GPUs?)");
    else if (err_name && !strcmp(err_name, "cudaErrorInsufficientDriver") && driver_version &&
             runtime_version > driver_version)
        snprintf(out, n, "the NVIDIA driver supports CUDA %d.%d, this lpo needs %d.%d (update the driver)",
                 driver_version / 1000, driver_version % 1000 / 10, runtime_version / 1000,
                 runtime_version % 1000 / 10);
    else if (!err_name || !strcmp(err_name, "cudaErrorNoDevice"))
        snprintf(out, n, "the NVIDIA driver sees no CUDA device%s%s%s", vis ? " (CUDA_VISIBLE_DEVICES=" : "",
                 vis ? vis : "", vis ? ")" : "");
    else
        snprintf(out, n, "%s (%s)", err_text ? err_text : "unknown CUDA error", err_name);
}

int lpo_hw_gpu_count(char *why, size_t n) {
#ifdef LPO_HAVE_CUDA
    int count = 0, drv = 0, rt = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaSuccess && count > 0) return count;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    (void)cudaGetLastError(); /* nothing of this is left for a later launch check */
    lpo_hw_no_gpu_reason(err == cudaSuccess ? NULL : cudaGetErrorName(err), cudaGetErrorString(err), drv, rt,
                         lpo_hw_driver_installed(), why, n);
#else
    snprintf(why, n, "lpo was built without CUDA (CPU-only build)");
#endif
    return 0;
}

static void collect_cuda(lpo_env_info *e, int check_kernels) {
#ifdef LPO_HAVE_CUDA
    e->cuda_built = 1;
    int v = 0;
    if (cudaRuntimeGetVersion(&v) == cudaSuccess) e->cuda_runtime_version = v;
    if (cudaDriverGetVersion(&v) == cudaSuccess) e->cuda_driver_version = v;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        lpo_hw_no_gpu_reason(err == cudaSuccess ? NULL : cudaGetErrorName(err), cudaGetErrorString(err),
                             e->cuda_driver_version, e->cuda_runtime_version, lpo_hw_driver_installed(),
                             e->cuda_error, sizeof e->cuda_error);
        return;
    }
    // each CUDA device
    for (int d = 0; d < count && e->n_gpus < LPO_MAX_GPUS; d++) {
        lpo_gpu_info *g = &e->gpus[e->n_gpus++];
        struct cudaDeviceProp p;
        g->index = d;
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
            snprintf(g->name, sizeof g->name, "(properties unavailable)");
            continue;
        }
        snprintf(g->name, sizeof g->name, "%s", p.name);
        g->cc_major = p.major;
        g->cc_minor = p.minor;
        g->sm_count = p.multiProcessorCount;
        g->mem_total = p.totalGlobalMem;
        g->l2_bytes = (uint64_t)p.l2CacheSize;
        int a;
        if (cudaDeviceGetAttribute(&a, cudaDevAttrClockRate, d) == cudaSuccess)
            g->sm_clock_max_mhz = a / 1000;
        if (cudaDeviceGetAttribute(&a, cudaDevAttrMemoryClockRate, d) == cudaSuccess)
            g->mem_clock_max_mhz = a / 1000;
        if (cudaDeviceGetAttribute(&a, cudaDevAttrGlobalMemoryBusWidth, d) == cudaSuccess)
            g->mem_bus_width = a;
        cudaDeviceGetPCIBusId(g->pci_bus_id, (int)sizeof g->pci_bus_id, d);
        if (check_kernels) {
            lpo_status st = lpo_hw_device_check(d, g->kernel_check_msg, sizeof g->kernel_check_msg);
            g->kernel_check = st == LPO_OK ? 1 : -1;
        }
    }
#else
    (void)check_kernels;
    e->cuda_built = 0;
    snprintf(e->cuda_error, sizeof e->cuda_error, "lpo was built without CUDA (CPU-only build)");
#endif
}

/* ---- NVML ---- */
static void fill_from_nvml(lpo_nvml *nv, lpo_nvml_device dev, lpo_gpu_info *g) {
    unsigned u;
    g->nvml = 1;
    if (nv->clock(dev, LPO_NVML_CLOCK_SM, &u) == 0) g->sm_clock_mhz = (int)u;
    if (!g->sm_clock_max_mhz && nv->max_clock(dev, LPO_NVML_CLOCK_SM, &u) == 0) g->sm_clock_max_mhz = (int)u;
    if (!g->mem_clock_max_mhz && nv->max_clock(dev, LPO_NVML_CLOCK_MEM, &u) == 0)
        g->mem_clock_max_mhz = (int)u;
    if (nv->temperature(dev, LPO_NVML_TEMP_GPU, &u) == 0) g->temperature_c = (int)u;
    if (nv->power_limit(dev, &u) == 0) g->power_limit_w = u / 1000.0;
    if (!g->mem_total) {
        unsigned long long m[3];
        if (nv->memory_info(dev, m) == 0) g->mem_total = m[0];
    }
}

static void collect_nvml(lpo_env_info *e) {
    lpo_nvml nv;
    if (!lpo_nvml_open(&nv, e->nvml_error, sizeof e->nvml_error)) return;
    e->nvml_available = 1;
    nv.driver_version(e->nvml_driver_version, sizeof e->nvml_driver_version);
    nv.nvml_version(e->nvml_version, sizeof e->nvml_version);
    if (e->n_gpus) {
        // CUDA devices: match by PCI bus id
        for (int i = 0; i < e->n_gpus; i++) {
            lpo_nvml_device dev;
            if (e->gpus[i].pci_bus_id[0] && nv.device_by_pci(e->gpus[i].pci_bus_id, &dev) == 0)
                fill_from_nvml(&nv, dev, &e->gpus[i]);
        }
    } else {
        /* no CUDA devices (CPU-only build or no runtime): list what NVML sees */
        unsigned count = 0;
        if (nv.device_count(&count) == 0) {
            for (unsigned i = 0; i < count && e->n_gpus < LPO_MAX_GPUS; i++) {
                lpo_nvml_device dev;
                if (nv.device_by_index(i, &dev) != 0) continue;
                lpo_gpu_info *g = &e->gpus[e->n_gpus++];
                g->index = (int)i;
                nv.device_name(dev, g->name, sizeof g->name);
                fill_from_nvml(&nv, dev, g);
            }
        }
    }
    lpo_nvml_close(&nv);
}

lpo_status lpo_env_collect(lpo_env_info *e, int check_kernels) {
    memset(e, 0, sizeof *e);
    collect_host(e);
    collect_cuda(e, check_kernels);
    collect_nvml(e);
    return LPO_OK;
}

/* ---- output ---- */
static void version_text(int v, char *buf, size_t n) {
    if (v)
        snprintf(buf, n, "%d.%d", v / 1000, v % 1000 / 10);
    else
        snprintf(buf, n, "unknown");
}

void lpo_env_print(const lpo_env_info *e, FILE *f) {
    const lpo_build_info *b = lpo_build();
    char rt[32], drv[32];
    version_text(e->cuda_runtime_version, rt, sizeof rt);
    version_text(e->cuda_driver_version, drv, sizeof drv);
    fprintf(f, "lpo:       %s (%s, %s%s)\n", b->version, b->git_commit, b->build_type,
            b->cuda ? ", CUDA" : ", CPU-only");
    fprintf(f, "host:      %s\n", e->hostname);
    fprintf(f, "cpu:       %s (%d logical CPUs)\n", e->cpu_model, e->cpu_logical);
    fprintf(f, "memory:    %.1f GiB total, %.1f GiB available\n", e->mem_total / 1073741824.0,
            e->mem_available / 1073741824.0);
    fprintf(f, "os:        %s\n", e->os);
    fprintf(f, "kernel:    %s\n", e->kernel);
    fprintf(f, "glibc:     %s\n", e->glibc);
    if (e->cuda_built && !e->cuda_driver_version)
        fprintf(f, "cuda:      runtime %s, no NVIDIA driver found\n", rt);
    else if (e->cuda_built)
        fprintf(f, "cuda:      runtime %s, driver supports CUDA %s\n", rt, drv);
    else
        fprintf(f, "cuda:      not built in (CPU-only lpo)\n");
    if (e->nvml_available)
        fprintf(f, "nvml:      available (driver %s, NVML %s)\n", e->nvml_driver_version, e->nvml_version);
    else
        fprintf(f, "nvml:      unavailable: %s\n", e->nvml_error);
    if (!e->n_gpus) {
        fprintf(f, "gpus:      none: %s\n", e->cuda_error[0] ? e->cuda_error : "no NVIDIA GPU found");
        return;
    }
    fprintf(f, "gpus:      %d\n", e->n_gpus);
    // one block per GPU
    for (int i = 0; i < e->n_gpus; i++) {
        const lpo_gpu_info *g = &e->gpus[i];
        fprintf(f, "  [%d] %s\n", g->index, g->name);
        if (g->cc_major)
            fprintf(f, "      compute capability %d.%d (sm_%d%d), %d SMs\n", g->cc_major, g->cc_minor,
                    g->cc_major, g->cc_minor, g->sm_count);
        fprintf(f, "      memory %.1f GiB", g->mem_total / 1073741824.0);
        if (g->mem_bus_width) fprintf(f, ", %d-bit bus", g->mem_bus_width);
        if (g->l2_bytes) fprintf(f, ", L2 %.0f MiB", g->l2_bytes / 1048576.0);
        fprintf(f, "\n");
        fprintf(f, "      clocks: SM max %d MHz, memory max %d MHz", g->sm_clock_max_mhz,
                g->mem_clock_max_mhz);
        if (g->nvml) fprintf(f, ", SM now %d MHz", g->sm_clock_mhz);
        fprintf(f, "\n");
        if (g->nvml) fprintf(f, "      %d C, power limit %.0f W\n", g->temperature_c, g->power_limit_w);
        if (g->pci_bus_id[0]) fprintf(f, "      PCI %s\n", g->pci_bus_id);
        if (g->kernel_check)
            fprintf(f, "      kernel check: %s%s%s\n", g->kernel_check > 0 ? "passed" : "FAILED",
                    g->kernel_check_msg[0] ? ": " : "", g->kernel_check_msg);
    }
}

void lpo_build_write_json(lpo_json *j) {
    const lpo_build_info *b = lpo_build();
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "version", b->version);
    lpo_json_kv_str(j, "git_commit", b->git_commit);
    lpo_json_kv_str(j, "build_type", b->build_type);
    lpo_json_kv_bool(j, "debug_build", lpo_build_is_debug());
    lpo_json_kv_str(j, "c_compiler", b->c_compiler);
    lpo_json_kv_bool(j, "cuda", b->cuda);
    lpo_json_kv_str(j, "cuda_archs", b->cuda ? b->cuda_archs : NULL);
    lpo_json_kv_int(j, "cuda_build_version", b->cuda_version);
    lpo_json_object_end(j);
}

void lpo_env_write_json(const lpo_env_info *e, lpo_json *j) {
    lpo_json_object_begin(j);
    lpo_json_key(j, "lpo");
    lpo_build_write_json(j);
    lpo_json_key(j, "host");
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "hostname", e->hostname);
    lpo_json_kv_str(j, "cpu_model", e->cpu_model);
    lpo_json_kv_int(j, "cpu_logical", e->cpu_logical);
    lpo_json_kv_int(j, "mem_total_bytes", (int64_t)e->mem_total);
    lpo_json_kv_int(j, "mem_available_bytes", (int64_t)e->mem_available);
    lpo_json_kv_str(j, "os", e->os);
    lpo_json_kv_str(j, "kernel", e->kernel);
    lpo_json_kv_str(j, "glibc", e->glibc);
    lpo_json_object_end(j);
    lpo_json_key(j, "cuda");
    lpo_json_object_begin(j);
    lpo_json_kv_bool(j, "built", e->cuda_built);
    lpo_json_kv_int(j, "runtime_version", e->cuda_runtime_version);
    lpo_json_kv_int(j, "driver_version", e->cuda_driver_version);
    lpo_json_kv_str(j, "error", e->cuda_error[0] ? e->cuda_error : NULL);
    lpo_json_object_end(j);
    lpo_json_key(j, "nvml");
    lpo_json_object_begin(j);
    lpo_json_kv_bool(j, "available", e->nvml_available);
    lpo_json_kv_str(j, "driver_version", e->nvml_available ? e->nvml_driver_version : NULL);
    lpo_json_kv_str(j, "nvml_version", e->nvml_available ? e->nvml_version : NULL);
    lpo_json_kv_str(j, "error", e->nvml_available ? NULL : e->nvml_error);
    lpo_json_object_end(j);
    lpo_json_key(j, "gpus");
    lpo_json_array_begin(j);
    // one object per GPU
    for (int i = 0; i < e->n_gpus; i++) {
        const lpo_gpu_info *g = &e->gpus[i];
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
        lpo_json_object_begin(j);
        lpo_json_kv_int(j, "index", g->index);
        lpo_json_kv_str(j, "name", g->name);
        lpo_json_kv_str(j, "compute_capability", g->cc_major ? cc : NULL);
        lpo_json_kv_int(j, "sm_count", g->sm_count);
        lpo_json_kv_int(j, "mem_total_bytes", (int64_t)g->mem_total);
        lpo_json_kv_int(j, "mem_bus_width_bits", g->mem_bus_width);
        lpo_json_kv_int(j, "l2_bytes", (int64_t)g->l2_bytes);
        lpo_json_kv_int(j, "sm_clock_max_mhz", g->sm_clock_max_mhz);
        lpo_json_kv_int(j, "mem_clock_max_mhz", g->mem_clock_max_mhz);
        lpo_json_kv_str(j, "pci_bus_id", g->pci_bus_id[0] ? g->pci_bus_id : NULL);
        lpo_json_kv_bool(j, "nvml", g->nvml);
        if (g->nvml) {
            lpo_json_kv_int(j, "sm_clock_mhz", g->sm_clock_mhz);
            lpo_json_kv_int(j, "temperature_c", g->temperature_c);
            lpo_json_kv_double(j, "power_limit_w", g->power_limit_w);
        }
        lpo_json_key(j, "kernel_check");
        if (g->kernel_check)
            lpo_json_str(j, g->kernel_check > 0 ? "passed" : "failed");
        else
            lpo_json_null(j);
        lpo_json_object_end(j);
    }
    lpo_json_array_end(j);
    lpo_json_object_end(j);
}

#ifndef LPO_HAVE_CUDA
lpo_status lpo_hw_device_check(int dev, char *msg, size_t msg_len) {
    (void)dev;
    if (msg_len) snprintf(msg, msg_len, "lpo was built without CUDA");
    return lpo_errorf(LPO_E_NO_DEVICE, "lpo was built without CUDA: no device check");
}
#endif
