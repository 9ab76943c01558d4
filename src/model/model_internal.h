/* The lpo_model object shared by the loaders in src/model (internal). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/core.h"
#include "lpo/gguf.h"
#include "lpo/model.h"
#include "lpo/vision.h"

struct lpo_model {
    lpo_model_spec spec;
    const char *source;   /* "hf", "gguf", "synthetic" (static strings) */
    char *path;           /* resolved folder or file; NULL for synthetic */
    char *tokenizer_path; /* tokenizer.json / .gguf; NULL = byte-level fallback */
    lpo_tensor *tensors;
    int *unpermute; /* per tensor: heads whose rows GGUF permuted for interleaved RoPE (0 = none) */
    size_t n_tensors, cap_tensors;
    lpo_mapped_file *files; /* safetensors shards */
    size_t n_files;
    lpo_gguf *gguf;
    float **scales; /* fp8 checkpoints: the f32 scale arrays the tensors point to (owned) */
    size_t n_scales;
    uint64_t seed;          /* synthetic values */
    int has_vision;         /* a vision encoder hangs off the text model (deepseek_ocr2) */
    lpo_vision_spec vision; /* its spec (valid when has_vision) */
};

lpo_status lpo__model_new(const char *source, lpo_model **out);
/* Appends a tensor (name copied); shape in HF order. */
lpo_status lpo__model_add_tensor(lpo_model *m, const char *name, lpo_dtype dt, int n_dims,
                                 const int64_t *shape, const void *data, uint64_t nbytes, int unpermute);
/* Checks that every tensor the spec expects is present with the expected shape (origin names the source)
 * and sets spec.dtype to the dtype holding the most parameters. */
lpo_status lpo__model_check_tensors(lpo_model *m, const char *origin);

lpo_status lpo__open_hf_dir(const char *dir, lpo_model **out);
/* dir's config.json (+ generation_config.json): the text model's spec and the vision encoder's, if any. */
lpo_status lpo__hf_config_read(const char *dir, lpo_model_spec *spec, lpo_vision_spec *vs, int *has_vision);
/* bos_token_id / eos_token_id of a JSON object (generation_config.json) into s, with config.json's checks:
 * present keys replace s's ids, absent keys leave them; LPO_E_FORMAT naming origin and key. */
lpo_status lpo__spec_ids_from_json(const char *json, size_t len, const char *origin, lpo_model_spec *s);
lpo_status lpo__open_gguf(const char *path, lpo_model **out);
/* A model over an already parsed GGUF (takes ownership of g, also on failure); path names it. */
lpo_status lpo__model_from_gguf(lpo_gguf *g, const char *path, lpo_model **out);
