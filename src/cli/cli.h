/* Shared command-line handling for lpo subcommands:
 *   lpo <command> [group=option] [a.b.c=value] [+a.b=value] [~a.b] [param=value] [--flag[=value]] [-- prog
 * args] A command declares its flags and its own parameters (key=value words that are not config overrides,
 * e.g. `text=` for tokenize); every other key=value word is a config override. Unknown flags give an
 * error naming them with the closest valid one (exit 2). */
#pragma once
#include <stddef.h>

#include "lpo/chat.h"
#include "lpo/config.h"
#include "lpo/image.h"
#include "lpo/infer.h"
#include "lpo/model.h"
#include "lpo/status.h"
#include "lpo/tokenizer.h"
#include "lpo/vision_encode.h"

typedef struct {
    const char *name; /* without the leading "--" */
    int takes_value; /* --name=value or --name value; 2: a value, and the flag may repeat (each one kept, none
                        empty: --import=A --import=B) */
    const char *help;
} lpo_cli_flag;

typedef struct {
    const char *name; /* key of a key=value word owned by the command */
    const char *help;
} lpo_cli_param;

typedef struct {
    const char *command;
    const char *summary;       /* one line, shown by --help */
    const lpo_cli_flag *flags; /* command-specific flags; --help and --config-dir are always accepted */
    size_t n_flags;
    const lpo_cli_param *params;
    size_t n_params;
    int config;      /* accepts config overrides */
    int passthrough; /* accepts "-- program args..." */
} lpo_cli_spec;

typedef struct {
    const char *name, *value; /* value "" for a flag given without one */
} lpo_cli_kv;

typedef struct {
    const char **overrides; /* config overrides in command-line order */
    size_t n_overrides;
    lpo_cli_kv *flags;
    size_t n_flags;
    lpo_cli_kv *params;
    size_t n_params;
    const char **config_dirs;
    size_t n_config_dirs;
    int help;
    char **passthrough; /* after "--" */
    int n_passthrough;
    char **owned; /* override strings lpo_cli_parse wrote (model=PATH -> model.path=PATH) */
    size_t n_owned;
} lpo_cli_args;

/* Parses argv (the words after the command name). LPO_E_USAGE with a message on bad input.
 * `model=PATH` (a folder, a .gguf file or hf:Org/Name; a word with '/', an hf: prefix, a .gguf suffix, or
 * an existing path that no config dir has a model preset of) becomes `model=hf model.path=PATH`. */
lpo_status lpo_cli_parse(const lpo_cli_spec *spec, int argc, char **argv, lpo_cli_args *out);
void lpo_cli_args_free(lpo_cli_args *a);
/* Value of a flag ("" when given without a value) or NULL when absent. */
const char *lpo_cli_flag_value(const lpo_cli_args *a, const char *name);
/* Value of a command parameter or NULL when absent. */
const char *lpo_cli_param_value(const lpo_cli_args *a, const char *name);
/* Prints the command's usage (flags, params) to f. */
void lpo_cli_print_usage(const lpo_cli_spec *spec, FILE *f);
/* Prints "lpo <command>: error: <last error>" to stderr and returns the exit code for st. */
int lpo_cli_fail(const char *command, lpo_status st);
/* The prologue of every command: parses argv into *args; on a parse error prints it (lpo_cli_fail) and
 * returns its exit code; on --help prints the usage to stdout, frees *args and returns LPO_EXIT_OK.
 * Returns -1 when the command should go on (then the caller frees *args with lpo_cli_args_free). */
int lpo_cli_begin(const lpo_cli_spec *spec, int argc, char **argv, lpo_cli_args *args);
/* The CLI's out-of-memory handler (lpo_set_oom_handler): prints lpo_oom_print's "lpo: error: out of
 * memory allocating N bytes for <what>" and exits 1. */
void lpo_cli_out_of_memory(const char *what, size_t bytes);
/* The end of every lpo process: flushes and closes stdout and checks stderr; when output was lost (disk
 * full, a closed pipe: `lpo tokenize ... > /dev/full`) says so on stderr and turns exit code 0 into 1.
 * Returns the exit code. */
int lpo_cli_exit(int rc);
/* The full command line as one shell-quoted string (for cmd.txt); set once by main(). */
void lpo_cli_set_command_line(int argc, char **argv);
const char *lpo_cli_command_line(void);
/* Composes the configuration for `command` from the args' --config-dir dirs and overrides (see
 * lpo_cfg_compose); runtime.command = command and runtime.cwd = the working directory, so templates can
 * use ${runtime.command}. Errors: as lpo_cfg_compose (print with lpo_cli_fail; exit 2 for config errors). */
lpo_status lpo_cli_compose(const lpo_cli_args *a, const char *command, lpo_node **cfg);
/* The overrides of a, plus "output.dir=runs/<time>-<command>-<name>" (name: the file-name-safe base name
 * of prog) unless a sets output.dir or prog is NULL: for commands that run a program. Returns a malloc'd
 * array of *n_out overrides (free it; the strings are a's and buf's, n bytes). */
const char **lpo_cli_with_run_dir(const lpo_cli_args *a, const char *command, const char *prog, char *buf,
                                  size_t n, size_t *n_out);

/* Text prompts of a command (generate, profile): the inference settings, the model, its tokenizer and the
 * chat family when infer.chat is set. */
typedef struct {
    const lpo_infer_config *ic;
    const lpo_model_spec *spec;
    lpo_tokenizer *tok;
    lpo_chat_family chat;
} lpo_cli_prompts;
/* Text -> ids (malloc'd), through the chat template when infer.chat is set. LPO_E_USAGE for a model
 * without a tokenizer, an empty prompt, or one that encodes to no tokens. */
lpo_status lpo_cli_encode_prompt(const lpo_cli_prompts *g, const char *text, int32_t **ids, size_t *n);

/* ---- page images (cli_image.c): DeepSeek-OCR-2's image= of generate and logits ---- */
#define LPO_CLI_IMAGE_PLACEHOLDER "<image>"
#define LPO_CLI_SYNTHETIC         "synthetic"
/* The pages image= names: a PNG / JPEG file; a folder (its .png / .jpg / .jpeg files, sorted by name); a
 * .jsonl file (a line per page: a JSON string or an object with "image" or "path", and "id"; relative paths
 * from the file's folder); synthetic[:N[:WxH]] (lpo_image_synthetic_page, seeds 0..N-1). ids[i] names page i
 * in predictions (file name, or the record's id). */
typedef struct {
    char **paths, **ids;
    size_t n, cap;
} lpo_cli_images;
lpo_status lpo_cli_images_list(const char *arg, lpo_cli_images *out);
void lpo_cli_images_free(lpo_cli_images *l);
/* LPO_E_USAGE naming the model when it has no vision encoder (a text-only model given image=). */
lpo_status lpo_cli_vision_check(const lpo_model *m);
/* The model's vision encoder on the backend of engine options eo (backend, engine.dtype, device, threads):
 * a backend that holds op lists (CUDA) runs it on its device in the engine's compute dtype (auto: bf16),
 * any other is the CPU reference in f32. */
typedef struct {
    const lpo_vision_spec *vs;
    lpo_weight_source ws;
    lpo_ocr_prep_opts prep;
    lpo_vision_encoder *enc;
    const lpo_backend_iface *be; /* the backend the encoder runs on */
    void *ctx;                   /* its context (a device backend's, owned), or NULL */
} lpo_cli_vision;
lpo_status lpo_cli_vision_open(const lpo_model *m, const lpo_engine_opts *eo, lpo_cli_vision *out);
void lpo_cli_vision_close(lpo_cli_vision *v);
/* One page: decoded, preprocessed, encoded (emb [n_rows][text_hidden]), with the time of each part. */
typedef struct {
    lpo_image image;
    lpo_ocr_views views;
    float *emb;
    int64_t n_rows;
    double decode_ms, prep_ms, encode_ms;
} lpo_cli_page;
lpo_status lpo_cli_page_encode(lpo_cli_vision *v, const char *path, lpo_cli_page *p);
/* The same without the encoding: decoded, preprocessed, emb allocated (lpo profile encodes each run). */
lpo_status lpo_cli_page_prepare(const lpo_cli_vision *v, const char *path, lpo_cli_page *p);
void lpo_cli_page_free(lpo_cli_page *p);
/* LPO_E_USAGE unless the prompt holds LPO_CLI_IMAGE_PLACEHOLDER exactly once (one page per prompt). */
lpo_status lpo_cli_image_prompt_check(const char *text);
/* The prompt text with its placeholder expanded to n_img copies (HF's processor), encoded (lpo_cli_encode_
 * prompt); LPO_E_FORMAT when the tokenizer does not give n_img image_token ids for them. */
lpo_status lpo_cli_image_prompt_text(const lpo_cli_prompts *g, const char *text, int32_t image_token,
                                     int64_t n_img, int32_t **ids, size_t *n);
/* Prompt ids holding image_token once (expanded to n_img) or n_img times (as given). */
lpo_status lpo_cli_image_prompt_ids(const int32_t *ids, size_t n, int32_t image_token, int64_t n_img,
                                    int32_t **out, size_t *n_out);
