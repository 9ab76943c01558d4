/* A built-in model preset's spec (conf/model/<name>.yaml) for tests, through the same loader as `model=`. */
#pragma once
#include <stdio.h>

#include "lpo/config.h"
#include "lpo/model.h"

static inline lpo_model_spec preset(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/conf/model/%s.yaml", LPO_SOURCE_DIR, name);
    lpo_node *cfg = NULL;
    assert_int_equal(lpo_yaml_load_file(path, &cfg), LPO_OK);
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open(cfg, &m), LPO_OK);
    lpo_model_spec s = *lpo_model_get_spec(m);
    lpo_model_close(m);
    lpo_node_free(cfg);
    return s;
}
