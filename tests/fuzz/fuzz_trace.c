/* libFuzzer target: the raw trace loader (trace-<pid>.lpot, src/probe/trace_format.h) and what reads the
 * loaded trace: the kernel, range and step tables and the Chrome trace. Raw files come from run
 * directories that `lpo report trace DIR` reads again, so a file is untrusted input. The loader maps files:
 * each input is written to one file in a private temp folder first.
 * Build: make fuzz; seeds: python3 tests/fuzz/corpus/make_trace_seeds.py;
 * run: nice build-fuzz/tests/fuzz_trace tests/fuzz/corpus/fuzz_trace */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/core.h"
#include "lpo/report.h"
#include "lpo/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char file[512];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!file[0]) {
        char dir[] = "/tmp/lpo-fuzz-trace-XXXXXX";
        if (!mkdtemp(dir)) abort();
        snprintf(file, sizeof file, "%s/trace-1.lpot", dir);
    }
    if (lpo_write_file(file, data, size) != LPO_OK) abort();
    const char *paths[] = {file};
    lpo_trace *t = NULL;
    if (lpo_trace_load_files(paths, 1, &t) != LPO_OK) return 0;
    lpo_table *tab = NULL;
    if (lpo_trace_kernel_table(t, &tab) == LPO_OK) lpo_table_free(tab);
    tab = NULL;
    if (lpo_trace_range_table(t, &tab) == LPO_OK) lpo_table_free(tab);
    tab = NULL;
    if (lpo_trace_step_table(t, "step", &tab) == LPO_OK) lpo_table_free(tab);
    (void)lpo_trace_write_chrome(t, NULL, "/dev/null");
    lpo_trace_free(t);
    return 0;
}
