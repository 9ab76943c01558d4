/* Chat templates for one user turn, written out in C (no Jinja): Llama-3, Llama-3.1/3.3 and Llama-3.2
 * (dated system block) and ChatML (Qwen2, Qwen2.5, Qwen3, SmolLM2). Each renders what HF
 * apply_chat_template(messages=[{"role": "system", ...}, {"role": "user", ...}], add_generation_prompt=True,
 * tokenize=False) renders for the model's own template; the golden script tests/golden/engine/
 * make_fixtures.py checks the strings against transformers. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lpo/chat.h"

static const struct {
    const char *name;
    lpo_chat_family family;
} chat_names[] = {{"auto", LPO_CHAT_NONE},
                  {"llama3", LPO_CHAT_LLAMA3},
                  {"llama3.1", LPO_CHAT_LLAMA31},
                  {"llama3.2", LPO_CHAT_LLAMA32},
                  {"chatml", LPO_CHAT_CHATML}};
enum { N_CHAT_NAMES = sizeof chat_names / sizeof chat_names[0] };

lpo_status lpo_chat_family_pick(const char *name, const lpo_tokenizer *tok, lpo_chat_family *out) {
    *out = LPO_CHAT_NONE;
    if (!name) name = "auto";
    const char *names[N_CHAT_NAMES];
    for (size_t i = 0; i < N_CHAT_NAMES; i++) {
        names[i] = chat_names[i].name;
        if (!strcmp(name, chat_names[i].name) && chat_names[i].family != LPO_CHAT_NONE) {
            *out = chat_names[i].family;
            return LPO_OK;
        }
    }
    if (strcmp(name, "auto") != 0) {
        const char *s = lpo_suggest(name, names, N_CHAT_NAMES);
        return lpo_errorf(
            LPO_E_CONFIG,
            "unknown chat template '%s'%s%s%s (choose auto, llama3, llama3.1, llama3.2 or chatml)", name,
            s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
    }
    if (tok && lpo_tokenizer_token_id(tok, "<|start_header_id|>") >= 0 &&
        lpo_tokenizer_token_id(tok, "<|eot_id|>") >= 0) {
        /* Llama-3.1 / 3.2 / 3.3 templates always write the dated system block; 3.2's takes today's date */
        const char *tmpl = lpo_tokenizer_chat_template(tok);
        *out = !tmpl || !strstr(tmpl, "Cutting Knowledge Date") ? LPO_CHAT_LLAMA3
               : strstr(tmpl, "strftime_now")                   ? LPO_CHAT_LLAMA32
                                                                : LPO_CHAT_LLAMA31;
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
        "(<|im_start|>) special tokens; set infer.chat_template=llama3|llama3.1|llama3.2|chatml or "
        "infer.chat=false");
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
    case LPO_ARCH_QWEN3:
    case LPO_ARCH_QWEN3_MOE: return NULL;
    default: /* llama-architecture models with ChatML tokens: the SmolLM2 family */
        return "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
    }
}

/* Python's str.isspace() (what Jinja's | trim strips): ASCII \t\n\v\f\r, the separators 0x1C-0x1F, space,
 * U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. */
static int py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* Jinja's | trim (Python str.strip()): leading and trailing Unicode whitespace removed. */
static void append_trimmed(lpo_strbuf *out, const char *s) {
    size_t n = strlen(s), a = n, b = 0;
    for (size_t i = 0; i < n;) { /* a: start of the first non-space character, b: end of the last one */
        uint32_t cp;
        size_t k = lpo_utf8_decode(s + i, n - i, &cp);
        if (!k) { /* an invalid byte is not whitespace */
            k = 1;
            cp = 0xFFFD;
        }
        if (!py_space(cp)) {
            if (a == n) a = i;
            b = i + k;
        }
        i += k;
    }
    if (a < b) lpo_sb_append(out, s + a, b - a);
}

/* The default "Today Date" of Llama-3.2's template: strftime_now("%d %b %Y") in local time with English
 * month names (Python's default C locale for LC_TIME; the process locale plays no part here). */
static void today(char *buf, size_t size) {
    static const char *const months[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t t = time(NULL);
    struct tm tm;
    if (t == (time_t)-1 || !localtime_r(&t, &tm) || tm.tm_mon < 0 || tm.tm_mon > 11) {
        snprintf(buf, size, "26 Jul 2024"); /* no clock: the template's own fallback */
        return;
    }
    snprintf(buf, size, "%02d %s %04d", tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900);
}

void lpo_chat_render(lpo_chat_family f, const char *system, const char *user, const char *date,
                     lpo_strbuf *out) {
    char day[32];
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
    case LPO_CHAT_LLAMA31:
    case LPO_CHAT_LLAMA32: /* the system block is always written: cutoff, date, then the trimmed system text
                            */
        if (!date) {
            if (f == LPO_CHAT_LLAMA32)
                today(day, sizeof day);
            else
                snprintf(day, sizeof day, "26 Jul 2024");
            date = day;
        }
        lpo_sb_puts(out, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                         "Cutting Knowledge Date: December 2023\nToday Date: ");
        lpo_sb_puts(out, date);
        lpo_sb_puts(out, "\n\n");
        if (system) append_trimmed(out, system);
        lpo_sb_puts(out, "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n");
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
