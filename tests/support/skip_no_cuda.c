/* Stands in for every GPU test in a CPU-only build (tests/CMakeLists.txt): prints a visible SKIP and exits
 * 77, which ctest reports as skipped. */
#include "test_support.h"

int main(void) {
    lpo_test_require_gpu(); /* without CUDA: "SKIP: built without CUDA", exit 77 */
    return 77;
}
