/* lpo tokenizers: byte-level BPE (GPT-2 / Llama-3 / Qwen2 / SmolLM2) and SentencePiece-style BPE
 * (Llama-2 / Mistral), loaded from HF tokenizer.json or GGUF metadata, plus a documented byte-level
 * fallback for synthetic models. Token ids match HF tokenizers exactly. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/core.h"
#include "lpo/gguf.h"
#include "lpo/status.h"

typedef struct lpo_tokenizer lpo_tokenizer;

/* path: a tokenizer.json, a .gguf file, or a model folder holding tokenizer.json. */
lpo_status lpo_tokenizer_open(const char *path, lpo_tokenizer **out);
lpo_status lpo_tokenizer_from_json(const char *json, size_t len, const char *origin, lpo_tokenizer **out);
lpo_status lpo_tokenizer_from_gguf(const lpo_gguf *g, lpo_tokenizer **out);
/* The tokenizer of a model: its tokenizer.json / GGUF metadata, else the byte-level fallback sized to the
 * model's vocabulary (a warning is logged). Declared here so that model.h stays tokenizer-free. */
struct lpo_model;
lpo_status lpo_tokenizer_for_model(const struct lpo_model *m, lpo_tokenizer **out);
/* Fallback for models without a tokenizer: ids 0..255 are the raw bytes, then specials (see docs). */
lpo_status lpo_tokenizer_byte_fallback(int64_t vocab_size, lpo_tokenizer **out);
void lpo_tokenizer_free(lpo_tokenizer *t);

/* Encodes len bytes of UTF-8 text; *ids is malloc'd (caller frees). add_bos prepends BOS when the
 * tokenizer has one. Special/added tokens in the text are matched before pre-tokenization. */
lpo_status lpo_tokenizer_encode(const lpo_tokenizer *t, const char *text, size_t len, int add_bos,
                                int32_t **ids, size_t *n_ids);
/* Appends the text of ids to out; ids out of range are an LPO_E_RANGE error. */
lpo_status lpo_tokenizer_decode(const lpo_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                                lpo_strbuf *out);

/* Streaming decode: push ids one at a time, get only complete UTF-8 characters back. */
typedef struct {
    char pending[16];
    size_t n_pending;
    int32_t prev_id;  /* -1 at start (SentencePiece drops the leading space of the first piece) */
    int skip_special; /* special tokens (BOS, EOS, chat markers) print nothing; 1 after init */
} lpo_detok_stream;
/* Resets s: nothing pending, prev_id -1, skip_special 1 (set it to 0 after init to print specials). */
void lpo_detok_stream_init(lpo_detok_stream *s);
lpo_status lpo_detok_stream_push(const lpo_tokenizer *t, lpo_detok_stream *s, int32_t id, lpo_strbuf *out);
/* Flushes bytes held back (an incomplete character at the end is emitted as U+FFFD). */
void lpo_detok_stream_flush(const lpo_tokenizer *t, lpo_detok_stream *s, lpo_strbuf *out);

int64_t lpo_tokenizer_vocab_size(const lpo_tokenizer *t);
int32_t lpo_tokenizer_bos(const lpo_tokenizer *t); /* -1 when none */
int32_t lpo_tokenizer_eos(const lpo_tokenizer *t); /* -1 when none */
/* Id of an exact token string (special tokens included), or -1. */
int32_t lpo_tokenizer_token_id(const lpo_tokenizer *t, const char *token);
/* The stored string of a token (byte-level: GPT-2 unicode alphabet form), or NULL when out of range. */
const char *lpo_tokenizer_token_str(const lpo_tokenizer *t, int32_t id);
int lpo_tokenizer_is_special(const lpo_tokenizer *t, int32_t id);
/* "byte-level-bpe", "sentencepiece-bpe" or "byte-fallback". */
const char *lpo_tokenizer_kind(const lpo_tokenizer *t);
/* The model's Jinja chat template text as shipped (never rendered: lpo's templates are C, src/engine/chat.c),
 * or NULL when absent. From chat_template.jinja beside tokenizer.json, else tokenizer_config.json's
 * "chat_template" (a string, or the entry named "default" of a list), else the GGUF key
 * tokenizer.chat_template. */
const char *lpo_tokenizer_chat_template(const lpo_tokenizer *t);
