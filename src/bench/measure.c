/* The measurement protocol's options read from the `profiling` group of a composed config. */
#include "lpo/measure.h"

#include "lpo/config.h"

static lpo_status cfg_int_field(const lpo_node *cfg, const char *key, int *v) {
    int64_t x;
    lpo_status st = lpo_cfg_int_or(cfg, key, *v, &x);
    if (st) return st;
    if (x < -1000000000 || x > 1000000000)
        return lpo_errorf(LPO_E_CONFIG, "%s: %lld is out of range", key, (long long)x);
    *v = (int)x;
    return LPO_OK;
}

lpo_status lpo_measure_opts_from_config(const lpo_node *cfg, lpo_measure_opts *o) {
    lpo_measure_opts_default(o);
    lpo_status st;
    if ((st = cfg_int_field(cfg, "profiling.warmup", &o->warmup)) ||
        (st = cfg_int_field(cfg, "profiling.min_samples", &o->min_samples)) ||
        (st = cfg_int_field(cfg, "profiling.max_samples", &o->max_samples)) ||
        (st = cfg_int_field(cfg, "profiling.nvml_sample_ms", &o->nvml_sample_ms)) ||
        (st = lpo_cfg_double_or(cfg, "profiling.min_time_s", o->min_time_s, &o->min_time_s)) ||
        (st = lpo_cfg_double_or(cfg, "profiling.max_rel_stdev", o->max_rel_stdev, &o->max_rel_stdev)) ||
        (st = lpo_cfg_double_or(cfg, "profiling.timeout_s", o->timeout_s, &o->timeout_s)) ||
        (st = lpo_cfg_double_or(cfg, "profiling.throttle_threshold", o->throttle_threshold,
                                &o->throttle_threshold)) ||
        (st = lpo_cfg_bool_or(cfg, "profiling.cold", o->cold, &o->cold)) ||
        (st = lpo_cfg_bool_or(cfg, "profiling.drop_throttled", o->drop_throttled, &o->drop_throttled)))
        return st;
    return lpo_measure_opts_check(o);
}
