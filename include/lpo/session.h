/* lpo session: what a measuring command works with, opened by one call and closed by one. The parts: the
 * composed config, the inference settings read from it, the backend and device, the model, the engine, the
 * environment, the NVML sampler and the run directory. A command says in lpo_session_opts.parts which it
 * needs (no engine for deep, no run directory for logits) and keeps its argument handling and printing.
 *   lpo_session *s;
 *   lpo_session_opts o = {.parts = LPO_SESSION_ENGINE, .size_engine = size, .ud = &mine};
 *   if ((st = lpo_session_open(cfg, &o, &s)) == LPO_OK) ... s->engine ...;
 *   lpo_session_close(s);
 * Layer rule: above engine, analysis, hw and report; below cli, which includes it. See docs/commands.md. */
#pragma once
#include <stdint.h>

#include "lpo/config.h"
#include "lpo/engine.h"
#include "lpo/hw.h"
#include "lpo/infer.h"
#include "lpo/model.h"
#include "lpo/nvml_sampler.h"
#include "lpo/report.h"

/* The parts a session opens (lpo_session_opts.parts); the config and the run directory are always there. */
typedef enum {
    LPO_SESSION_SETTINGS = 1u << 0, /* infer.*, engine.*, backend, hardware.device (lpo_infer_config_read) and
                                       the backend they name */
    LPO_SESSION_MODEL = 1u << 1,    /* the config's `model`, after the backend check, so backend=cuda in a
                                       CPU-only build fails before any weights are read (implies SETTINGS) */
    LPO_SESSION_ENGINE = 1u << 2,   /* an engine over the model (implies MODEL) */
    LPO_SESSION_ENV = 1u << 3,      /* lpo_env_collect (after the engine, which may start the GPU) */
    LPO_SESSION_NVML = 1u << 4,     /* an NVML sampler started on the device with a device backend; a GPU NVML
                                       cannot read is no error: s->nvml stays NULL (implies SETTINGS) */
} lpo_session_part;

typedef struct lpo_session lpo_session;

/* Called once the model is open and before the engine: the command reads what it needs from the model
 * (tokenizer, dataset, prompts) and sizes the engine in *eo, which holds the settings' options (infer.*,
 * engine.*, backend), max_seqs = infer.batch_size, max_context by lpo_engine_context_for and device =
 * hardware.device. An error fails the open. */
typedef lpo_status (*lpo_session_size_fn)(void *ud, lpo_session *s, lpo_engine_opts *eo);

typedef struct {
    unsigned parts;                  /* LPO_SESSION_* */
    lpo_session_size_fn size_engine; /* optional (needs MODEL) */
    void *ud;                        /* for size_engine */
    int nvml_period_ms;              /* NVML: sampling period; 0 = 100 */
    const char *command_line;        /* the command that made the run (the run directory's cmd.txt); borrowed
                                        for the session's life */
} lpo_session_opts;

/* Every field is the session's; a command reads them and may adjust infer.gen (EOS ids of a tokenizer). */
struct lpo_session {
    lpo_node *cfg;                    /* the composed configuration */
    lpo_infer_config infer;           /* SETTINGS: infer.*, engine.*, backend */
    const lpo_backend_iface *backend; /* SETTINGS: the configured backend, else NULL */
    int device;                       /* hardware.device: the GPU ordinal */
    int on_device;                    /* the backend runs on the GPU (LPO_BACKEND_F_DEVICE) */
    lpo_model *model;                 /* MODEL, else NULL */
    const lpo_model_spec *spec;       /* the model's spec (MODEL), else NULL */
    lpo_engine_opts engine_opts;      /* MODEL: the engine's options as sized (what ENGINE opened with, or
                                         what a command that opens its own engines uses) */
    lpo_engine *engine;               /* ENGINE, else NULL */
    double engine_open_s;             /* seconds lpo_engine_open took */
    lpo_env_info *env;                /* ENV, else NULL */
    lpo_nvml_sampler *nvml;           /* NVML on a device backend when NVML answers, else NULL */
    lpo_rundir *rundir;               /* created by lpo_session_rundir, else NULL */
    const char *command_line;         /* lpo_session_opts.command_line */
};

/* Opens the parts o->parts names (o NULL: none), in order: settings, model, size_engine, engine, env,
 * NVML. cfg becomes the session's: lpo_session_close frees it, and a failed
 * open frees it and everything opened before the failure (*out = NULL). Errors: those of each part. */
lpo_status lpo_session_open(lpo_node *cfg, const lpo_session_opts *o, lpo_session **out);
/* The run directory (lpo_rundir_create of the config and the command line), created by the first call: a
 * command asks for it once it has something to write, so a run that fails before leaves none. */
lpo_status lpo_session_rundir(lpo_session *s, lpo_rundir **out);
/* The device to resolve peaks for: hardware.device with a device backend, -1 (the CPU) otherwise. */
int lpo_session_peaks_device(const lpo_session *s);
/* Stops and closes what is open, in reverse order; NULL and a partly opened session are fine. */
void lpo_session_close(lpo_session *s);
