/* lpo deep internals shared by its files (not a public API). */
#pragma once
#include "lpo/core.h"
#include "lpo/deep.h"

/* roofline_kernels.svg: the kernels of an analysis on the roofline. */
void deep_roofline_svg(const lpo_deep_analysis *an, const char *title, lpo_strbuf *o);
/* A histogram of n values (NaN skipped) into 10 bins (0-100 for unit "%"). */
void deep_histogram_svg(const char *metric, const char *unit, const double *v, size_t n, lpo_strbuf *o);
