/* lpo hardware: what this machine offers (CPU, memory, OS, glibc; GPUs through the CUDA runtime when lpo
 * is built with CUDA; NVML loaded with dlopen("libnvidia-ml.so.1") and our own prototypes), printed by
 * `lpo env` and saved as env.json in every run directory. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lpo/json.h"
#include "lpo/status.h"

#define LPO_MAX_GPUS 16

typedef struct {
    int index; /* CUDA device ordinal (NVML index when found through NVML only) */
    char name[256];
    int cc_major, cc_minor; /* compute capability; 0 when unknown (NVML only) */
    int sm_count;
    uint64_t mem_total;   /* bytes */
    int sm_clock_max_mhz; /* peak SM clock (CUDA attribute, else NVML max); 0 unknown */
    int mem_clock_max_mhz;
    int mem_bus_width; /* bits; 0 unknown */
    uint64_t l2_bytes;
    char pci_bus_id[32]; /* "0000:1b:00.0" */
    /* NVML (zero when unavailable) */
    int nvml;         /* this GPU was matched with an NVML device */
    int sm_clock_mhz; /* current SM clock */
    int temperature_c;
    double power_limit_w;
    /* device check (lpo env with CUDA): a kernel run and validated against a C reference */
    int kernel_check; /* 1 passed, -1 failed, 0 not run */
    char kernel_check_msg[160];
} lpo_gpu_info;

typedef struct {
    char hostname[256];
    char cpu_model[256];
    int cpu_logical;                   /* online logical CPUs */
    uint64_t mem_total, mem_available; /* bytes */
    char os[256];                      /* PRETTY_NAME of /etc/os-release */
    char kernel[256];                  /* "Linux 6.1.0-... x86_64" */
    char glibc[32];
    /* CUDA runtime (builds with CUDA) */
    int cuda_built;
    int cuda_runtime_version; /* 13000 = 13.0; 0 unknown */
    int cuda_driver_version;  /* newest CUDA the driver supports */
    char cuda_error[256];     /* why no GPU is listed through CUDA ("" when fine) */
    int n_gpus;
    lpo_gpu_info gpus[LPO_MAX_GPUS];
    /* NVML */
    int nvml_available;
    char nvml_driver_version[96];
    char nvml_version[96];
    char nvml_error[256]; /* why NVML is unavailable */
} lpo_env_info;

/* Fills e. Never fails for a missing GPU, driver or NVML: those are reported in the *_error fields.
 * With check_kernels, each CUDA GPU runs a small validated kernel (lpo_gpu_info.kernel_check). */
lpo_status lpo_env_collect(lpo_env_info *e, int check_kernels);
/* Human-readable report (lpo env). */
void lpo_env_print(const lpo_env_info *e, FILE *f);
/* One JSON object: {"lpo": {version, git_commit, build_type, ...}, "host": {...}, "cuda": {...},
 * "nvml": {...}, "gpus": [...]} (lpo env --json, env.json in run directories). */
void lpo_env_write_json(const lpo_env_info *e, lpo_json *j);
/* lpo's build provenance as one JSON object {version, git_commit, build_type, debug_build, c_compiler,
 * cuda, cuda_archs, cuda_build_version}: env.json's "lpo", and every result file's. */
void lpo_build_write_json(lpo_json *j);

/* Why no GPU can be used, in words, from what the CUDA runtime answered: err_name and err_text are
 * cudaGetDeviceCount's error (cudaGetErrorName, cudaGetErrorString; NULL when it succeeded with 0 devices),
 * driver_version and runtime_version cudaDriverGetVersion's and cudaRuntimeGetVersion's (0: none, 13000 =
 * 13.0), driver_installed lpo_hw_driver_installed's bits. The runtime says "driver version is insufficient"
 * also when there is no driver at all: the driver's presence tells the two apart. Writes out (n > 0). */
void lpo_hw_no_gpu_reason(const char *err_name, const char *err_text, int driver_version, int runtime_version,
                          unsigned driver_installed, char *out, size_t n);
#define LPO_HW_DRIVER_MODULE  1u /* /proc/driver/nvidia exists: the kernel module is loaded */
#define LPO_HW_DRIVER_LIBCUDA 2u /* libcuda.so.1 (the user-space driver) loads */
/* Which parts of an NVIDIA driver this machine has (LPO_HW_DRIVER_* bits; 0: none). */
unsigned lpo_hw_driver_installed(void);
/* How many CUDA GPUs this process can use; when none, why in why[0..n) (lpo_hw_no_gpu_reason's words, or
 * "lpo was built without CUDA"). */
int lpo_hw_gpu_count(char *why, size_t n);

/* Runs the device check kernel on CUDA device `dev`: y = a*x + b over n random floats, compared with the
 * C reference. LPO_E_NO_DEVICE without CUDA; LPO_E_CUDA with the CUDA error; LPO_E_RANGE on a mismatch
 * (message names the first bad element). Implemented in src/hw/device_check.cu. */
lpo_status lpo_hw_device_check(int dev, char *msg, size_t msg_len);
