/* Host half of gpu_fill.h, compiled in every build (also CPU-only, where kbench's CPU cases size and fill
 * their inputs with it): the fill's value of one element (lpo__fill_hash, the same
 * function the kernels of gpu_fill.cu run). */
#include "lpo/gpu_fill.h"

float lpo__fill_value(uint64_t seed, size_t i, float lo, float hi) {
    return lpo__fill_hash(seed, i, lo, hi);
}
