/* lpo measurement options from a composed config: the `profiling` group read into the protocol's options
 * (the protocol and the statistics themselves are core's, lpo/stats.h). */
#pragma once
#include "lpo/config.h"
#include "lpo/stats.h"
#include "lpo/status.h"

/* Reads the `profiling` group of a composed config (profiling.warmup, .min_samples, .max_samples,
 * .min_time_s, .max_rel_stdev, .timeout_s, .cold, .drop_throttled, .throttle_threshold,
 * .nvml_sample_ms); missing keys keep the defaults. LPO_E_CONFIG naming the key for a value out of range
 * (negative counts, min_samples < 1, max_rel_stdev <= 0, threshold outside [0, 1]). */
lpo_status lpo_measure_opts_from_config(const lpo_node *cfg, lpo_measure_opts *o);
