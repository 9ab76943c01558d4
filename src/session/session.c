/* The session of a measuring command (include/lpo/session.h): one open composing settings, backend,
 * model, engine, environment and NVML sampler in order, one close undoing whatever was opened. */
#include "lpo/session.h"

#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"

void lpo_session_close(lpo_session *s) {
    if (!s) return;
    lpo_nvml_sampler_close(s->nvml);
    if (s->rundir) lpo_rundir_close(s->rundir);
    free(s->env);
    lpo_engine_close(s->engine);
    if (s->model) lpo_model_close(s->model);
    lpo_infer_config_free(&s->infer);
    lpo_node_free(s->cfg);
    free(s);
}

static lpo_status open_model(lpo_session *s) {
    const lpo_node *mcfg = lpo_node_at(s->cfg, "model");
    if (!mcfg) return lpo_errorf(LPO_E_CONFIG, "no model in the config (give model=NAME)");
    lpo_status st = lpo_model_open(mcfg, &s->model);
    if (st == LPO_OK) s->spec = lpo_model_get_spec(s->model);
    return st;
}

/* The engine's options before the command sizes them: the settings', batch and context by their rules. */
static void default_engine_opts(const lpo_session *s, lpo_engine_opts *eo) {
    lpo_infer_engine_opts(&s->infer, (int)s->infer.batch_size, eo);
    eo->max_context = lpo_engine_context_for(s->spec, s->infer.engine.max_context);
    eo->device = s->device;
}

static lpo_status open_parts(lpo_session *s, const lpo_session_opts *o) {
    unsigned parts = o->parts;
    if (parts & LPO_SESSION_ENGINE) parts |= LPO_SESSION_MODEL;
    if (parts & (LPO_SESSION_MODEL | LPO_SESSION_NVML)) parts |= LPO_SESSION_SETTINGS;
    lpo_status st = LPO_OK;
    if (parts & LPO_SESSION_SETTINGS) {
        if ((st = lpo_infer_config_read(s->cfg, &s->infer)) != LPO_OK) return st;
        int64_t dev = 0;
        if ((st = lpo_cfg_int_or(s->cfg, "hardware.device", 0, &dev)) != LPO_OK) return st;
        s->device = (int)dev;
        /* the backend before the model: backend=cuda in a CPU-only build fails before any weights are read */
        if ((st = lpo_backend_find(s->infer.engine.backend, &s->backend)) != LPO_OK) return st;
        s->on_device = (s->backend->features & LPO_BACKEND_F_DEVICE) != 0;
    }
    if (parts & LPO_SESSION_MODEL) {
        if ((st = open_model(s)) != LPO_OK) return st;
        default_engine_opts(s, &s->engine_opts);
        if (o->size_engine && (st = o->size_engine(o->ud, s, &s->engine_opts)) != LPO_OK) return st;
    }
    if (parts & LPO_SESSION_ENGINE) {
        const uint64_t t0 = lpo_now_ns();
        if ((st = lpo_engine_open(s->model, &s->engine_opts, &s->engine)) != LPO_OK) return st;
        s->engine_open_s = (double)(lpo_now_ns() - t0) / 1e9;
    }
    if (parts & LPO_SESSION_ENV) {
        s->env = calloc(1, sizeof *s->env);
        if (!s->env) return lpo_errorf(LPO_E_NOMEM, "session: out of memory");
        lpo_env_collect(s->env, 0);
    }
    if ((parts & LPO_SESSION_NVML) && s->on_device) {
        if (lpo_nvml_sampler_open(s->device, &s->nvml) == LPO_OK)
            lpo_nvml_sampler_start(s->nvml, o->nvml_period_ms > 0 ? o->nvml_period_ms : 100);
        lpo_error_clear(); /* no NVML: no clocks, no error */
    }
    return LPO_OK;
}

lpo_status lpo_session_open(lpo_node *cfg, const lpo_session_opts *o, lpo_session **out) {
    *out = NULL;
    lpo_session *s = calloc(1, sizeof *s);
    if (!s) {
        lpo_node_free(cfg);
        return lpo_errorf(LPO_E_NOMEM, "session: out of memory");
    }
    s->cfg = cfg;
    const lpo_session_opts none = {0};
    s->command_line = o ? o->command_line : NULL;
    lpo_status st = open_parts(s, o ? o : &none);
    if (st != LPO_OK) {
        lpo_session_close(s);
        return st;
    }
    *out = s;
    return LPO_OK;
}

lpo_status lpo_session_rundir(lpo_session *s, lpo_rundir **out) {
    lpo_status st = s->rundir ? LPO_OK : lpo_rundir_create(s->cfg, s->command_line, &s->rundir);
    *out = s->rundir;
    return st;
}

int lpo_session_peaks_device(const lpo_session *s) {
    return s->on_device ? s->device : -1;
}
