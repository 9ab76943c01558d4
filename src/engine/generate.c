/* The generation loop: batched prefill of several prompts (different lengths, no padding), then batched
 * decode steps chained on the backend (each step's tokens are the ids its SAMPLE op drew, per slot, by
 * docs/sampling.md); EOS / stop-string / max-token / context stops, and streamed text (a stop string is held
 * back until it is ruled out, and never printed). The host reads the sampled ids of every step to check the
 * stop rules; the tokens themselves never travel back to the backend. */
#include <stdlib.h>
#include <string.h>

#include "lpo/generate.h"

const char *lpo_stop_reason_name(lpo_stop_reason r) {
    switch (r) {
    case LPO_STOP_EOS: return "eos";
    case LPO_STOP_STRING: return "stop";
    case LPO_STOP_MAX_TOKENS: return "length";
    case LPO_STOP_CONTEXT: return "context";
    default: return "none";
    }
}

void lpo_gen_seq_free(lpo_gen_seq *s) {
    free(s->ids);
    s->ids = NULL;
    s->n_ids = 0;
    lpo_sb_free(&s->text);
}

typedef struct {
    lpo_detok_stream detok;
    size_t cap_ids;
    size_t emitted; /* bytes of text handed to on_text */
    int active;
    uint64_t t_stop;
} gen_state;

static void emit(lpo_gen_seq *q, gen_state *g, size_t upto, size_t i, lpo_gen_text_fn on_text, void *ud) {
    if (upto > g->emitted && on_text) on_text(ud, i, q->text.buf + g->emitted, upto - g->emitted);
    if (upto > g->emitted) g->emitted = upto;
}

/* After new text was appended: cut at the first stop string (returns 1), else emit what is safe. */
static int check_stop(const lpo_gen_params *p, lpo_gen_seq *q, gen_state *g, size_t before, size_t i,
                      lpo_gen_text_fn on_text, void *ud) {
    size_t maxlen = 0;
    for (size_t k = 0; k < p->n_stop; k++) {
        size_t l = strlen(p->stop[k]);
        if (l > maxlen) maxlen = l;
    }
    if (maxlen == 0) {
        emit(q, g, q->text.len, i, on_text, ud);
        return 0;
    }
    size_t from = before >= maxlen ? before - maxlen + 1 : 0, cut = (size_t)-1;
    for (size_t k = 0; k < p->n_stop; k++) {
        if (!p->stop[k][0] || !q->text.buf) continue;
        const char *hit = strstr(q->text.buf + from, p->stop[k]);
        if (hit && (size_t)(hit - q->text.buf) < cut) cut = (size_t)(hit - q->text.buf);
    }
    if (cut != (size_t)-1) {
        q->text.len = cut;
        q->text.buf[cut] = 0;
        emit(q, g, cut, i, on_text, ud);
        return 1;
    }
    size_t safe = q->text.len >= maxlen - 1 ? q->text.len - (maxlen - 1) : 0;
    emit(q, g, safe, i, on_text, ud);
    return 0;
}

static int is_eos(const lpo_gen_params *p, const lpo_model_spec *spec, int32_t id) {
    const int32_t *ids = p->eos_ids ? p->eos_ids : spec->eos_ids;
    int n = p->eos_ids ? p->n_eos : spec->n_eos;
    for (int k = 0; k < n; k++)
        if (ids[k] == id) return 1;
    return 0;
}

lpo_status lpo_generate(lpo_engine *e, const lpo_tokenizer *tok, const lpo_gen_params *p, lpo_gen_seq *seqs,
                        size_t n, lpo_gen_text_fn on_text, void *ud) {
    const lpo_model_spec *spec = lpo_engine_spec(e);
    const int64_t V = spec->vocab_size, ctx = lpo_engine_max_context(e);
    if (n == 0 || n > (size_t)lpo_engine_max_seqs(e))
        return lpo_errorf(LPO_E_RANGE, "generate: %zu sequences but the engine holds %d (infer.batch_size)",
                          n, lpo_engine_max_seqs(e));
    if (p->n_stop && !tok)
        return lpo_errorf(LPO_E_CONFIG, "generate: stop strings need a tokenizer (this model has none)");
    for (size_t i = 0; i < n; i++) {
        if (seqs[i].n_prompt == 0) return lpo_errorf(LPO_E_INVALID, "generate: prompt %zu is empty", i);
        if ((int64_t)seqs[i].n_prompt > ctx)
            return lpo_errorf(LPO_E_RANGE,
                              "generate: prompt %zu has %zu tokens, longer than max_context %lld (raise "
                              "infer.max_context or shorten the prompt)",
                              i, seqs[i].n_prompt, (long long)ctx);
        seqs[i].ids = NULL;
        seqs[i].n_ids = 0;
        memset(&seqs[i].text, 0, sizeof seqs[i].text);
        seqs[i].reason = LPO_STOP_NONE;
        seqs[i].prefill_ms = seqs[i].decode_ms = 0;
        seqs[i].decode_steps = 0;
    }
    gen_state *g = calloc(n, sizeof *g);
    int *slots = malloc(n * sizeof *slots);
    const int32_t **toks = malloc(n * sizeof *toks);
    int64_t *lens = malloc(n * sizeof *lens);
    int32_t *next = malloc(n * sizeof *next);
    int *map = malloc(n * sizeof *map);
    lpo_status st = LPO_OK;
    if (!g || !slots || !toks || !lens || !next || !map) {
        st = lpo_errorf(LPO_E_NOMEM, "generate: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n && st == LPO_OK; i++) {
        lpo_engine_reset(e, (int)i);
        st = lpo_engine_set_sampling(e, (int)i, &p->sampling, seqs[i].stream);
        lpo_detok_stream_init(&g[i].detok);
        g[i].active = 1;
        slots[i] = (int)i;
        toks[i] = seqs[i].prompt;
        lens[i] = (int64_t)seqs[i].n_prompt;
    }
    if (st != LPO_OK) goto done;

    /* prefill: every prompt at once, each sequence's first token sampled by the backend */
    uint64_t t0 = lpo_now_ns();
    lpo_engine_batch b = {(int)n, slots, toks, lens, 0, NULL, p->max_new_tokens > 0, next, NULL};
    lpo_engine_embeds *emb = NULL; /* image rows of the prompts that bring them */
    int any_emb = 0;
    for (size_t i = 0; i < n; i++) any_emb |= seqs[i].embeds != NULL;
    if (any_emb && !(emb = calloc(n, sizeof *emb))) {
        st = lpo_errorf(LPO_E_NOMEM, "generate: out of memory");
        goto done;
    }
    for (size_t i = 0; emb && i < n; i++)
        if (seqs[i].embeds) emb[i] = *seqs[i].embeds;
    b.embeds = emb;
    st = lpo_engine_run(e, &b);
    free(emb);
    if (st != LPO_OK) goto done;
    uint64_t t_prefill = lpo_now_ns();
    for (size_t i = 0; i < n; i++) seqs[i].prefill_ms = (double)(t_prefill - t0) / 1e6;
    /* ids row r belongs to sequence map[r] */
    int n_rows = (int)n;
    for (size_t i = 0; i < n; i++) map[i] = (int)i;

    for (;;) {
        int n_next = 0;
        for (int r = 0; r < n_rows; r++) {
            const size_t i = (size_t)map[r];
            lpo_gen_seq *q = &seqs[i];
            gen_state *gi = &g[i];
            if (p->max_new_tokens <= 0) {
                q->reason = LPO_STOP_MAX_TOKENS;
                gi->active = 0;
                continue;
            }
            const int32_t id = next[r];
            if (id < 0 || id >= V) {
                st = lpo_errorf(LPO_E_INTERNAL, "generate: the backend sampled id %d outside [0, %lld)",
                                (int)id, (long long)V);
                goto done;
            }
            if (q->n_ids == gi->cap_ids) {
                size_t cap = gi->cap_ids ? gi->cap_ids * 2 : 64;
                int32_t *ids = realloc(q->ids, cap * sizeof *ids);
                if (!ids) {
                    st = lpo_errorf(LPO_E_NOMEM, "generate: out of memory");
                    goto done;
                }
                q->ids = ids;
                gi->cap_ids = cap;
            }
            q->ids[q->n_ids++] = id;
            int stop = 0;
            if (!p->ignore_eos && is_eos(p, spec, id)) {
                q->reason = LPO_STOP_EOS;
                stop = 1;
            } else if (tok) {
                size_t before = q->text.len;
                st = lpo_detok_stream_push(tok, &gi->detok, id, &q->text);
                if (st != LPO_OK) goto done;
                if (check_stop(p, q, gi, before, i, on_text, ud)) {
                    q->reason = LPO_STOP_STRING;
                    stop = 1;
                }
            }
            if (!stop && (int64_t)q->n_ids >= p->max_new_tokens) {
                q->reason = LPO_STOP_MAX_TOKENS;
                stop = 1;
            }
            if (!stop && lpo_engine_n_past(e, (int)i) + 1 > ctx) {
                q->reason = LPO_STOP_CONTEXT;
                stop = 1;
            }
            if (stop) {
                gi->active = 0;
                if (tok && q->reason != LPO_STOP_STRING) {
                    lpo_detok_stream_flush(tok, &gi->detok, &q->text);
                    emit(q, gi, q->text.len, i, on_text, ud);
                }
                q->decode_ms = (double)(lpo_now_ns() - t_prefill) / 1e6;
                continue;
            }
            map[n_next] = (int)i;
            slots[n_next] = (int)i;
            n_next++;
        }
        if (n_next == 0) break;
        /* chained decode: each slot's token is the id it just sampled; the new ids come back in next */
        lpo_engine_batch d = {n_next, slots, NULL, NULL, 0, NULL, 1, next, NULL};
        st = lpo_engine_run(e, &d);
        if (st != LPO_OK) goto done;
        for (int k = 0; k < n_next; k++) seqs[map[k]].decode_steps++;
        n_rows = n_next;
    }
done:
    free(g);
    free(slots);
    free(toks);
    free(lens);
    free(next);
    free(map);
    return st;
}
