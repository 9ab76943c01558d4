/* Prompt text -> token ids for the commands that run prompts (generate, profile): the model's tokenizer,
 * through the chat template when infer.chat is set (system prompt: infer.system, else the template's). */
#include <string.h>

#include "cli/cli.h"

lpo_status lpo_cli_encode_prompt(const lpo_cli_prompts *g, const char *text, int32_t **ids, size_t *n) {
    if (!g->tok) return lpo_errorf(LPO_E_USAGE, "this model has no tokenizer: give tokens=1,2,3");
    if (!text[0]) return lpo_errorf(LPO_E_USAGE, "the prompt is empty");
    lpo_status st;
    if (g->ic->chat) {
        lpo_strbuf sb = {0};
        const char *sys = g->ic->system_set ? (g->ic->system[0] ? g->ic->system : NULL)
                                            : lpo_chat_default_system(g->chat, g->spec);
        lpo_chat_render(g->chat, sys, text, g->ic->chat_date, &sb);
        st = lpo_tokenizer_encode(g->tok, sb.buf, sb.len, 0, ids, n);
        lpo_sb_free(&sb);
    } else {
        st = lpo_tokenizer_encode(g->tok, text, strlen(text), 1, ids, n);
    }
    if (st == LPO_OK && *n == 0) st = lpo_errorf(LPO_E_USAGE, "the prompt encodes to no tokens");
    return st;
}
