/* Helpers shared by the cmocka tests: temp dirs, running the lpo binary, GPU skip. */
#pragma once
#include <stddef.h>

/* 1 in a sanitizer build (make asan, make asan-clang: everything runs 5-50x slower), else 0 */
#if defined(__SANITIZE_ADDRESS__)
#define LPO_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LPO_TEST_SANITIZED 1
#endif
#endif
#ifndef LPO_TEST_SANITIZED
#define LPO_TEST_SANITIZED 0
#endif

/* Creates a fresh temporary directory (mkdtemp under $TMPDIR or /tmp); returns its name, malloc'd: keep it
 * for the whole run or free it (either way ASan reports no leak). */
char *lpo_test_tmpdir(void);
/* Runs the built lpo binary with a shell command tail ("config show model=tiny"); captures stdout and
 * stderr (malloc'd, may be NULL pointers to skip) and returns the exit code (-1 when it did not exit). */
int lpo_test_run_lpo(const char *args, char **out, char **err);
/* CPU seconds used so far by this process (all its threads) and by its children that were waited for: a
 * test that bounds the time of some work bounds these, which a loaded machine does not stretch as it
 * stretches wall time (several-fold for make asan on a shared 2-core machine). */
double lpo_test_cpu_s(void);
double lpo_test_children_cpu_s(void);
/* Prints "SKIP: <why>" and exits 77 (ctest: skipped) when no CUDA device can be used. */
void lpo_test_require_gpu(void);
/* Composes the built-in config for `command` with base[0..n_base) then the non-NULL extra[0..n_extra)
 * overrides (tests that sweep a few keys over a fixed base). */
#include "lpo/config.h"
lpo_status lpo_test_compose(const char *command, const char *const *base, size_t n_base,
                            const char *const *extra, size_t n_extra, lpo_node **cfg);
/* lpo_kbench_run of the kbench config composed as lpo_test_compose does. */
typedef struct lpo_kbench lpo_kbench;
lpo_status lpo_test_kbench_run(lpo_kbench *kb, const char *const *base, size_t n_base,
                               const char *const *extra, size_t n_extra);
/* Caches ceilings of a made-up CPU (f32 FMA tflops, DRAM triad gbs) for this host, in this test's own
 * cache (see test_support.c: every test process has a private XDG_CACHE_HOME), so runs on the CPU backend
 * classify bounds the same way on any machine. */
lpo_status lpo_test_cpu_ceilings(double tflops, double gbs);
