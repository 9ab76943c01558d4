/* lpo chat templates rendered in C (Llama-3, Llama-3.1/3.2, ChatML), as HF apply_chat_template renders
 * them. Layer rule: knows model specs and tokenizers only. */
#pragma once
#include "lpo/core.h"
#include "lpo/model.h"
#include "lpo/tokenizer.h"

/* ---- chat templates ----------------------------------------------------------------------------------- */
typedef enum {
    LPO_CHAT_NONE,
    LPO_CHAT_LLAMA3,  /* Meta-Llama-3-Instruct */
    LPO_CHAT_CHATML,  /* Qwen2, Qwen2.5, Qwen3, SmolLM2 */
    LPO_CHAT_LLAMA31, /* Llama-3.1 / 3.3-Instruct: dated system block, date "26 Jul 2024" by default */
    LPO_CHAT_LLAMA32  /* Llama-3.2-Instruct: as 3.1, the date defaults to today ("%d %b %Y") */
} lpo_chat_family;
/* "auto" picks from the tokenizer: Llama-3 special tokens (<|start_header_id|>, <|eot_id|>) -> llama3,
 * refined by its chat template text (lpo_tokenizer_chat_template) holding "Cutting Knowledge Date" ->
 * llama3.1, or llama3.2 when it also calls strftime_now; ChatML tokens (<|im_start|>) -> chatml.
 * "llama3" / "llama3.1" / "llama3.2" / "chatml" force one. LPO_E_UNSUPPORTED when nothing fits. */
lpo_status lpo_chat_family_pick(const char *name, const lpo_tokenizer *tok, lpo_chat_family *out);
/* The default system prompt HF's template inserts for a single user turn (NULL when none): ChatML
 * families depend on the model (SmolLM2, Qwen2, Qwen2.5 differ); arch + model name decide. */
const char *lpo_chat_default_system(lpo_chat_family f, const lpo_model_spec *spec);
/* Appends the prompt text of one user turn with the generation prompt, as HF apply_chat_template(
 * [{"role":"system",...},{"role":"user",...}], add_generation_prompt=True, tokenize=False) renders it.
 * system NULL = no system message. date: the "Today Date" of llama3.1 / llama3.2 (HF's date_string);
 * NULL = the template's default (3.1: "26 Jul 2024"; 3.2: today, local time, "%d %b %Y" in English). */
void lpo_chat_render(lpo_chat_family f, const char *system, const char *user, const char *date,
                     lpo_strbuf *out);
