/* Helpers shared by the cmocka tests (see test_support.h). */
#include "test_support.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lpo/ceilings.h"
#include "lpo/core.h"
#include "lpo/kbench.h"

/* ---- isolation: no test reads or writes user state ---------------------------------------------------
 * Before main, every test process gets a fresh root under $TMPDIR (or /tmp) and points HOME,
 * XDG_CACHE_HOME, the Hugging Face cache variables, TMPDIR and its working directory into it; the lpo
 * processes it starts inherit them. So ceilings cached by one test are that test's own, a run directory
 * written with the default output.dir (runs/...) lands in the root, and a result never depends on what an
 * earlier run left in ~/.cache or the checkout. The root is removed at exit (by the process that made it;
 * forked children leave with _exit). */
static char iso_root[4096];
static pid_t iso_pid;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    remove(path);
    return 0;
}

static void iso_cleanup(void) {
    if (iso_root[0] && getpid() == iso_pid && !getenv("LPO_TEST_KEEP")) {
        if (chdir("/") != 0) return;
        nftw(iso_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
}

__attribute__((constructor)) static void iso_setup(void) {
    const char *base = getenv("TMPDIR");
    snprintf(iso_root, sizeof iso_root, "%s/lpo-test-root-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(iso_root)) {
        fprintf(stderr, "test_support: cannot create a temporary root under %s\n", base ? base : "/tmp");
        exit(1);
    }
    iso_pid = getpid();
    static const char *const dirs[][2] = {{"HOME", "home"},
                                          {"XDG_CACHE_HOME", "cache"},
                                          {"HF_HOME", "hf"},
                                          {"TMPDIR", "tmp"},
                                          {"LPO_TEST_WORKDIR", "work"}};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char d[4200];
        snprintf(d, sizeof d, "%s/%s", iso_root, dirs[i][1]);
        if (mkdir(d, 0700) != 0 || setenv(dirs[i][0], d, 1) != 0) {
            fprintf(stderr, "test_support: cannot prepare %s\n", d);
            exit(1);
        }
    }
    unsetenv("HF_HUB_CACHE");
    unsetenv("LPO_CONF_DIR");
    /* LPO_TEST_ONLY / LPO_TEST_SKIP: cmocka name patterns (e.g. "test_opcheck_*") choosing which tests of
     * the group run, for every test executable (scripts/gpu-check.sh runs parts of one under a sanitizer) */
    const char *only = getenv("LPO_TEST_ONLY"), *skip = getenv("LPO_TEST_SKIP");
    if (only && *only) cmocka_set_test_filter(only);
    if (skip && *skip) cmocka_set_skip_filter(skip);
    atexit(iso_cleanup);
    if (chdir(getenv("LPO_TEST_WORKDIR")) != 0) {
        fprintf(stderr, "test_support: cannot enter %s\n", getenv("LPO_TEST_WORKDIR"));
        exit(1);
    }
}

/* Every name handed out stays referenced here, so a test that keeps its directory name for the whole run
 * (the header allows it) is not reported as a leak by make asan; tests that free the name may. */
static char **tmpdirs;
static size_t n_tmpdirs, cap_tmpdirs;

char *lpo_test_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/lpo-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpl)) return NULL;
    tmpdirs = lpo_xgrow(tmpdirs, &cap_tmpdirs, n_tmpdirs + 1, sizeof *tmpdirs, "test directory names");
    return tmpdirs[n_tmpdirs++] = lpo_strdup(tmpl);
}

int lpo_test_run_lpo(const char *args, char **out, char **err) {
    char *dir = lpo_test_tmpdir();
    if (!dir) return -1;
    char o[4200], e[4200];
    snprintf(o, sizeof o, "%s/out", dir);
    snprintf(e, sizeof e, "%s/err", dir);
    lpo_strbuf cmd = {0};
    lpo_sb_printf(&cmd, "%s %s >'%s' 2>'%s'", LPO_BINARY, args, o, e);
    int rc = system(cmd.buf);
    lpo_sb_free(&cmd);
    if (out) lpo_read_file(o, out, NULL);
    if (err) lpo_read_file(e, err, NULL);
    remove(o);
    remove(e);
    rmdir(dir);
    free(dir);
    if (rc == -1 || !WIFEXITED(rc)) return -1;
    return WEXITSTATUS(rc);
}

double lpo_test_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double lpo_test_children_cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_CHILDREN, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           1e-6 * (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

void lpo_test_require_gpu(void) {
#ifdef LPO_HAVE_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) return;
    printf("SKIP: no usable CUDA device (%s)\n", e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
#else
    printf("SKIP: built without CUDA\n");
#endif
    fflush(stdout);
    exit(77);
}

lpo_status lpo_test_compose(const char *command, const char *const *base, size_t n_base,
                            const char *const *extra, size_t n_extra, lpo_node **cfg) {
    const char **ov = malloc((n_base + n_extra) * sizeof *ov);
    if (!ov) return LPO_E_NOMEM;
    size_t n = 0;
    for (size_t i = 0; i < n_base; i++) ov[n++] = base[i];
    for (size_t i = 0; i < n_extra; i++)
        if (extra[i]) ov[n++] = extra[i];
    lpo_cfg_opts o = {.command = command};
    lpo_status st = lpo_cfg_compose(&o, n, ov, cfg);
    free(ov);
    return st;
}

lpo_status lpo_test_kbench_run(lpo_kbench *kb, const char *const *base, size_t n_base,
                               const char *const *extra, size_t n_extra) {
    lpo_node *cfg;
    lpo_status st = lpo_test_compose("kbench", base, n_base, extra, n_extra, &cfg);
    if (st) return st;
    st = lpo_kbench_run(kb, cfg);
    lpo_node_free(cfg);
    return st;
}

lpo_status lpo_test_cpu_ceilings(double tflops, double gbs) {
    lpo_ceilings c;
    lpo_ceilings_init(&c);
    snprintf(c.device_kind, sizeof c.device_kind, "cpu");
    snprintf(c.name, sizeof c.name, "test CPU");
    lpo_ceilings_cpu_key(c.uuid, sizeof c.uuid);
    c.m[LPO_CEIL_M_GEMM_FP32].value = tflops;
    c.m[LPO_CEIL_M_DRAM_TRIAD].value = gbs;
    char path[4096];
    return lpo_ceilings_save(&c, lpo_ceilings_cache_path(c.uuid, path, sizeof path));
}
