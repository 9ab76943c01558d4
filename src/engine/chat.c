/* Chat templates for one user turn, written out in C (no Jinja): Llama-3 and ChatML (Qwen2, Qwen2.5,
 * Qwen3, SmolLM2). Each renders what HF apply_chat_template(messages=[{"role": "user", ...}],
 * add_generation_prompt=True, tokenize=False) renders for the model's own template; the golden script
 * tests/golden/engine/make_fixtures.py checks the strings against transformers. */
#include <ctype.h>
#include <string.h>

#include "lpo/engine.h"

lpo_status lpo_chat_family_pick(const char *name, const lpo_tokenizer *tok, lpo_chat_family *out) {
    *out = LPO_CHAT_NONE;
    if (name && !strcmp(name, "llama3")) {
        *out = LPO_CHAT_LLAMA3;
        return LPO_OK;
    }
    if (name && !strcmp(name, "chatml")) {
        *out = LPO_CHAT_CHATML;
        return LPO_OK;
    }
    if (name && strcmp(name, "auto") != 0) {
        const char *names[] = {"auto", "llama3", "chatml"};
        const char *s = lpo_suggest(name, names, 3);
        return lpo_errorf(LPO_E_CONFIG, "unknown chat template '%s'%s%s%s (choose auto, llama3 or chatml)",
                          name, s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
    }
    if (tok && lpo_tokenizer_token_id(tok, "<|start_header_id|>") >= 0 &&
        lpo_tokenizer_token_id(tok, "<|eot_id|>") >= 0) {
        *out = LPO_CHAT_LLAMA3;
        return LPO_OK;
    }
    if (tok && lpo_tokenizer_token_id(tok, "<|im_start|>") >= 0 &&
        lpo_tokenizer_token_id(tok, "<|im_end|>") >= 0) {
        *out = LPO_CHAT_CHATML;
        return LPO_OK;
    }
    return lpo_errorf(
        LPO_E_UNSUPPORTED,
        "infer.chat=true but the tokenizer has neither Llama-3 (<|start_header_id|>) nor ChatML "
        "(<|im_start|>) special tokens; set infer.chat_template=llama3|chatml or infer.chat=false");
}

static int contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return 1;
    }
    return 0;
}

const char *lpo_chat_default_system(lpo_chat_family f, const lpo_model_spec *spec) {
    if (f != LPO_CHAT_CHATML || !spec) return NULL;
    switch (spec->arch) {
    case LPO_ARCH_QWEN2:
        if (contains_ci(spec->name, "qwen2.5"))
            return "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
        return "You are a helpful assistant.";
    case LPO_ARCH_QWEN3: return NULL;
    default: /* llama-architecture models with ChatML tokens: the SmolLM2 family */
        return "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
    }
}

/* Jinja's | trim: strips leading and trailing whitespace. */
static void append_trimmed(lpo_strbuf *out, const char *s) {
    size_t a = 0, b = strlen(s);
    while (a < b && isspace((unsigned char)s[a])) a++;
    while (b > a && isspace((unsigned char)s[b - 1])) b--;
    lpo_sb_append(out, s + a, b - a);
}

void lpo_chat_render(lpo_chat_family f, const char *system, const char *user, lpo_strbuf *out) {
    switch (f) {
    case LPO_CHAT_LLAMA3: /* Meta-Llama-3-Instruct: contents are trimmed, BOS is part of the text */
        lpo_sb_puts(out, "<|begin_of_text|>");
        if (system) {
            lpo_sb_puts(out, "<|start_header_id|>system<|end_header_id|>\n\n");
            append_trimmed(out, system);
            lpo_sb_puts(out, "<|eot_id|>");
        }
        lpo_sb_puts(out, "<|start_header_id|>user<|end_header_id|>\n\n");
        append_trimmed(out, user);
        lpo_sb_puts(out, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case LPO_CHAT_CHATML:
        if (system) {
            lpo_sb_puts(out, "<|im_start|>system\n");
            lpo_sb_puts(out, system);
            lpo_sb_puts(out, "<|im_end|>\n");
        }
        lpo_sb_puts(out, "<|im_start|>user\n");
        lpo_sb_puts(out, user);
        lpo_sb_puts(out, "<|im_end|>\n<|im_start|>assistant\n");
        break;
    default: lpo_sb_puts(out, user); break;
    }
}
