/* Unit tests of the engine on generated weights: batching (a batch of prompts of different lengths gives
 * the same logits and tokens as one sequence at a time, with and without prefill chunking, with any number
 * of threads), incremental
 * decode vs one prefill, sampling determinism, EOS / max-token / context stops, and bad inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/config.h"
#include "lpo/chat.h"
#include "lpo/engine.h"
#include "lpo/generate.h"
#include "lpo/infer.h"
#include "lpo/model.h"
#include "test_engine_support.h"
#include "test_support.h"

static const int32_t P0[] = {5, 17, 33, 8, 90};
static const int32_t P1[] = {3, 44, 61, 12, 7, 7, 29, 80, 15};
static const int32_t P2[] = {71, 4};

static void gen_one(lpo_engine *e, const lpo_gen_params *p, const int32_t *prompt, size_t n, uint64_t stream,
                    lpo_gen_seq *out) {
    memset(out, 0, sizeof *out);
    out->prompt = prompt;
    out->n_prompt = n;
    out->stream = stream;
    assert_int_equal(lpo_generate(e, NULL, p, out, 1, NULL, NULL), LPO_OK);
}

static void test_batched_logits_equal_single(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    const int32_t *toks[3] = {P0, P1, P2};
    int64_t lens[3] = {5, 9, 2};
    int slots[3] = {0, 1, 2};
    const int64_t V = s.vocab_size;
    float *single = malloc(3 * (size_t)V * sizeof(float)), *batch = malloc(3 * (size_t)V * sizeof(float));
    lpo_engine *e1 = test_engine(&s, 1, 64, 0);
    assert_non_null(e1);
    for (int i = 0; i < 3; i++) {
        lpo_engine_reset(e1, 0);
        int slot = 0;
        assert_int_equal(lpo_engine_extend(e1, 1, &slot, &toks[i], &lens[i], 0, single + i * V), LPO_OK);
        assert_int_equal(lpo_engine_n_past(e1, 0), lens[i]);
    }
    /* step of 4 tokens: sequences are split across steps and share steps; 1, 2 or 3 threads */
    for (int64_t step = 4; step <= 16; step += 12) {
        for (int threads = 1; threads <= 3; threads++) {
            lpo_engine *e3 = test_engine_threads(&s, 3, 64, step, threads);
            assert_non_null(e3);
            assert_int_equal(lpo_engine_extend(e3, 3, slots, toks, lens, 0, batch), LPO_OK);
            assert_memory_equal(single, batch, 3 * (size_t)V * sizeof(float)); /* bit-identical */
            lpo_engine_close(e3);
        }
        lpo_engine *e3 = test_engine(&s, 3, 64, step);
        assert_non_null(e3);
        assert_int_equal(lpo_engine_extend(e3, 3, slots, toks, lens, 0, batch), LPO_OK);
        assert_memory_equal(single, batch, 3 * (size_t)V * sizeof(float)); /* bit-identical */
        lpo_engine_close(e3);
    }
    lpo_engine_close(e1);
    free(single);
    free(batch);
}

static void test_incremental_equals_prefill(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    const int64_t V = s.vocab_size, T = 9;
    float *all = malloc((size_t)(T * V) * sizeof(float)), *one = malloc((size_t)V * sizeof(float));
    lpo_engine *e = test_engine(&s, 1, 32, 0);
    int slot = 0;
    const int32_t *t = P1;
    int64_t n = T;
    assert_int_equal(lpo_engine_extend(e, 1, &slot, &t, &n, 1, all), LPO_OK);
    lpo_engine_reset(e, 0);
    for (int64_t i = 0; i < T; i++) {
        const int32_t *ti = P1 + i;
        int64_t n1 = 1;
        assert_int_equal(lpo_engine_extend(e, 1, &slot, &ti, &n1, 0, one), LPO_OK);
        for (int64_t v = 0; v < V; v++) assert_float_equal(one[v], all[i * V + v], 1e-5);
    }
    lpo_engine_close(e);
    free(all);
    free(one);
}

static void test_batched_generation_equals_single(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    const int32_t *prompts[3] = {P0, P1, P2};
    const size_t lens[3] = {5, 9, 2};
    /* greedy and sampled: per-sequence sampler streams make batching invisible */
    lpo_sampling modes[2] = {{0, 0, 1, 1, 0}, {0.9, 30, 0.95, 1.1, 1234}};
    for (int mode = 0; mode < 2; mode++) {
        lpo_gen_params p = {.max_new_tokens = 12, .ignore_eos = 1, .sampling = modes[mode]};
        lpo_gen_seq ref[3];
        lpo_engine *e1 = test_engine(&s, 1, 64, 0);
        for (int i = 0; i < 3; i++) gen_one(e1, &p, prompts[i], lens[i], (uint64_t)i, &ref[i]);
        lpo_engine *e3 = test_engine(&s, 3, 64, 6);
        lpo_gen_seq q[3];
        memset(q, 0, sizeof q);
        for (int i = 0; i < 3; i++) {
            q[i].prompt = prompts[i];
            q[i].n_prompt = lens[i];
            q[i].stream = (uint64_t)i;
        }
        assert_int_equal(lpo_generate(e3, NULL, &p, q, 3, NULL, NULL), LPO_OK);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(q[i].n_ids, 12);
            assert_int_equal(ref[i].n_ids, 12);
            assert_memory_equal(q[i].ids, ref[i].ids, 12 * sizeof(int32_t));
            lpo_gen_seq_free(&q[i]);
            lpo_gen_seq_free(&ref[i]);
        }
        lpo_engine_close(e1);
        lpo_engine_close(e3);
    }
}

static void test_sampling_determinism(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_engine *e = test_engine(&s, 1, 64, 0);
    lpo_gen_params p = {.max_new_tokens = 24, .ignore_eos = 1, .sampling = {1.0, 0, 1.0, 1.0, 42}};
    lpo_gen_seq a, b, c, d;
    gen_one(e, &p, P0, 5, 0, &a);
    gen_one(e, &p, P0, 5, 0, &b);
    assert_memory_equal(a.ids, b.ids, 24 * sizeof(int32_t)); /* same seed, same tokens */
    p.sampling.seed = 43;
    gen_one(e, &p, P0, 5, 0, &c);
    assert_memory_not_equal(a.ids, c.ids, 24 * sizeof(int32_t)); /* another seed, other tokens */
    p.sampling.seed = 42;
    gen_one(e, &p, P0, 5, 1, &d);
    assert_memory_not_equal(a.ids, d.ids, 24 * sizeof(int32_t)); /* another stream, other tokens */
    lpo_gen_seq_free(&a);
    lpo_gen_seq_free(&b);
    lpo_gen_seq_free(&c);
    lpo_gen_seq_free(&d);
    lpo_engine_close(e);
}

static void test_eos_and_limits(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_engine *e = test_engine(&s, 1, 64, 0);
    lpo_gen_params p = {.max_new_tokens = 16, .ignore_eos = 1, .sampling = {0, 0, 1, 1, 0}};
    lpo_gen_seq ref, q;
    gen_one(e, &p, P1, 9, 0, &ref);
    assert_int_equal(ref.reason, LPO_STOP_MAX_TOKENS);
    assert_int_equal(ref.n_ids, 16);
    /* make the 4th generated token an EOS id: generation stops there, EOS included in the ids */
    int32_t eos = ref.ids[3];
    size_t first = 0;
    while (ref.ids[first] != eos) first++;
    p.ignore_eos = 0;
    p.eos_ids = &eos;
    p.n_eos = 1;
    gen_one(e, &p, P1, 9, 0, &q);
    assert_int_equal(q.reason, LPO_STOP_EOS);
    assert_int_equal(q.n_ids, first + 1);
    assert_memory_equal(q.ids, ref.ids, (first + 1) * sizeof(int32_t));
    lpo_gen_seq_free(&q);
    /* ignore_eos runs through it */
    p.ignore_eos = 1;
    gen_one(e, &p, P1, 9, 0, &q);
    assert_int_equal(q.n_ids, 16);
    lpo_gen_seq_free(&q);
    /* max_new_tokens 0: nothing */
    p.max_new_tokens = 0;
    gen_one(e, &p, P1, 9, 0, &q);
    assert_int_equal(q.n_ids, 0);
    assert_int_equal(q.reason, LPO_STOP_MAX_TOKENS);
    lpo_gen_seq_free(&q);
    lpo_gen_seq_free(&ref);
    lpo_engine_close(e);

    /* context: 9 prompt tokens in a 12-position cache: 3 generated tokens are fed and fill it, a 4th is
     * sampled from the last logits, then there is no room left */
    e = test_engine(&s, 1, 12, 0);
    p.max_new_tokens = 100;
    gen_one(e, &p, P1, 9, 0, &q);
    assert_int_equal(q.reason, LPO_STOP_CONTEXT);
    assert_int_equal(q.n_ids, 4);
    assert_int_equal(lpo_engine_n_past(e, 0), 12);
    lpo_gen_seq_free(&q);
    lpo_engine_close(e);
}

static void test_bad_inputs(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_engine *e = test_engine(&s, 2, 8, 0);
    int slot = 0;
    int32_t bad[] = {1, 2, 97};
    const int32_t *t = bad;
    int64_t n = 3;
    float logits[97];
    assert_int_equal(lpo_engine_extend(e, 1, &slot, &t, &n, 0, logits), LPO_E_RANGE);
    assert_non_null(strstr(lpo_last_error(), "token id 97"));
    assert_non_null(strstr(lpo_last_error(), "vocabulary"));
    assert_int_equal(lpo_engine_n_past(e, 0), 0); /* nothing appended */
    int32_t neg[] = {-1};
    t = neg;
    n = 1;
    assert_int_equal(lpo_engine_extend(e, 1, &slot, &t, &n, 0, logits), LPO_E_RANGE);
    int32_t long_prompt[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    t = long_prompt;
    n = 9;
    assert_int_equal(lpo_engine_extend(e, 1, &slot, &t, &n, 0, logits), LPO_E_RANGE);
    assert_non_null(strstr(lpo_last_error(), "max_context"));
    n = 0;
    assert_int_equal(lpo_engine_extend(e, 1, &slot, &t, &n, 0, logits), LPO_E_INVALID);
    int slots2[2] = {0, 0};
    const int32_t *tt[2] = {long_prompt, long_prompt};
    int64_t nn[2] = {1, 1};
    assert_int_equal(lpo_engine_extend(e, 2, slots2, tt, nn, 0, logits), LPO_E_INVALID); /* slot twice */
    /* generate: too long prompt, empty prompt, too many sequences */
    lpo_gen_params p = {.max_new_tokens = 4, .sampling = {0, 0, 1, 1, 0}};
    lpo_gen_seq q = {.prompt = long_prompt, .n_prompt = 9};
    assert_int_equal(lpo_generate(e, NULL, &p, &q, 1, NULL, NULL), LPO_E_RANGE);
    assert_non_null(strstr(lpo_last_error(), "longer than max_context"));
    q.n_prompt = 0;
    assert_int_equal(lpo_generate(e, NULL, &p, &q, 1, NULL, NULL), LPO_E_INVALID);
    lpo_gen_seq three[3] = {{.prompt = long_prompt, .n_prompt = 1}};
    assert_int_equal(lpo_generate(e, NULL, &p, three, 3, NULL, NULL), LPO_E_RANGE);
    const char *stops[] = {"x"};
    p.stop = stops;
    p.n_stop = 1;
    q.n_prompt = 2;
    assert_int_equal(lpo_generate(e, NULL, &p, &q, 1, NULL, NULL), LPO_E_CONFIG); /* stop strings need text */
    lpo_engine_close(e);
    /* backends */
    const lpo_backend_iface *be;
    if (!lpo_backend_cuda()) {
        assert_int_equal(lpo_backend_find("cuda", &be), LPO_E_NOT_AVAILABLE);
        assert_non_null(strstr(lpo_last_error(), "CUDA backend is not available"));
    }
    /* a CUDA build without a usable GPU (this CI machine): auto falls back to the CPU, and backend=cuda says
     * in one line what is missing */
    const lpo_backend_iface *cuda = lpo_backend_cuda();
    if (cuda && cuda->usable && cuda->usable() != LPO_OK) {
        assert_int_equal(lpo_backend_find("auto", &be), LPO_OK);
        assert_ptr_equal(be, lpo_backend_cpu());
        lpo_engine_opts co = {LPO_ENGINE_DEFAULTS, .backend = "cuda", .max_seqs = 1, .max_context = 8};
        lpo_engine *ce = NULL;
        assert_int_equal(test_engine_open_opts(&s, &co, &ce), LPO_E_NO_DEVICE);
        printf("backend=cuda here: %s\n", lpo_last_error());
        assert_non_null(strstr(lpo_last_error(), "cuda backend: no usable GPU: "));
        assert_null(strchr(lpo_last_error(), '\n'));
        assert_null(ce);
    }
    assert_int_equal(lpo_backend_find("cpux", &be), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "did you mean 'cpu'"));
    assert_int_equal(lpo_backend_find("cpu", &be), LPO_OK);
    assert_int_equal(be->api_version, LPO_BACKEND_API_VERSION);
    assert_true(be->features & LPO_BACKEND_F_BATCH);
    /* a bad spec is refused */
    s.n_kv_heads = 3;
    assert_null(test_engine(&s, 1, 8, 0));
    s = test_spec();
    /* thread counts past what OpenMP runtimes take are refused (100000 overflowed libgomp's stack) */
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 1, .max_context = 8,
                         .n_threads = LPO_ENGINE_MAX_THREADS + 1};
    assert_int_equal(test_engine_open_opts(&s, &o, &e), LPO_E_RANGE);
    assert_non_null(strstr(lpo_last_error(), "the engine takes 0 (automatic) to 1024"));
    /* a huge prefill chunk is capped at the positions there are, not allocated */
    e = test_engine(&s, 2, 8, INT64_MAX / 4);
    assert_non_null(e);
    lpo_engine_close(e);
    /* a KV cache past the machine's memory is refused before allocating, with the size needed */
    s.max_positions = 1LL << 30;
    o = (lpo_engine_opts){LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 256, .max_context = 1LL << 30,
                          .n_threads = 1};
    assert_int_equal(test_engine_open_opts(&s, &o, &e), LPO_E_NOMEM);
    assert_non_null(strstr(lpo_last_error(), "256 sequence(s) of max_context 1073741824"));
    assert_non_null(strstr(lpo_last_error(), "GiB but this machine has"));
    assert_null(e);
}

/* Counts group callbacks and the ops they cover: every op of every step reported once. */
static void count_ops(void *ud, const lpo_oplist *l, const lpo_plan *p, size_t g, int end) {
    (void)l;
    ((int *)ud)[end ? 1 : 0] += (int)p->groups[g].count;
    ((int *)ud)[2] += !end;
}

static void test_op_events(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_engine *e = test_engine(&s, 1, 16, 0);
    int counts[3] = {0, 0, 0};
    assert_int_equal(lpo_engine_set_group_callback(e, count_ops, counts), LPO_OK);
    int slot = 0;
    const int32_t *t = P0;
    int64_t n = 5;
    assert_int_equal(lpo_engine_extend(e, 1, &slot, &t, &n, 0, NULL), LPO_OK);
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(&s, 0, 1, 5, NULL, &l), LPO_OK);
    assert_int_equal(counts[0], (int)l.n_ops);
    assert_int_equal(counts[1], (int)l.n_ops);
    /* fusion on (the default): each residual add runs with the norm after it, so fewer groups than ops */
    assert_int_equal(counts[2], (int)l.n_ops - 2 * (int)s.n_layers);
    lpo_oplist_free(&l);
    assert_true(lpo_engine_memory_bytes(e) > 0);
    lpo_engine_close(e);
}

/* Synthetic presets from conf/model/: after the last block the residual stream is finite with a sane RMS
 * (read back from the op callback), and the logits are finite, for a prefill and a few decode steps. */
typedef struct {
    lpo_engine *e;
    char last[48];
    double rms;
    int seen;
} rms_probe;

static void probe_last_layer(void *ud, const lpo_oplist *l, const lpo_plan *pl, size_t g, int end) {
    rms_probe *p = ud;
    const lpo_op *op = &l->ops[pl->groups[g].first];
    if (!end || strcmp(op->name, p->last) != 0) return;
    const int64_t h = lpo_buf_width(lpo_engine_spec(p->e), LPO_BUF_X);
    float *x = malloc((size_t)(op->m * h) * sizeof(float));
    assert_int_equal(lpo_engine_read_activation(p->e, LPO_BUF_X, 0, op->m, x), LPO_OK);
    double ss = 0;
    for (int64_t i = 0; i < op->m * h; i++) {
        assert_true(isfinite(x[i]));
        ss += (double)x[i] * x[i];
    }
    p->rms = sqrt(ss / (double)(op->m * h));
    p->seen++;
    free(x);
}

static void check_preset(const char *preset, int64_t prompt_len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/conf/model/%s.yaml", LPO_SOURCE_DIR, preset);
    lpo_node *cfg = NULL;
    assert_int_equal(lpo_yaml_load_file(path, &cfg), LPO_OK);
    lpo_model *m = NULL;
    lpo_status st = lpo_model_open(cfg, &m);
    if (st != LPO_OK) fprintf(stderr, "%s: %s\n", preset, lpo_last_error());
    assert_int_equal(st, LPO_OK);
    const lpo_model_spec *s = lpo_model_get_spec(m);
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 1, .max_context = 64};
    o.fusion = 0;
    lpo_engine *e = NULL;
    assert_int_equal(lpo_engine_open(m, &o, &e), LPO_OK);
    rms_probe probe = {e, "", 0, 0};
    snprintf(probe.last, sizeof probe.last, "layers.%d.mlp.residual", (int)s->n_layers - 1);
    assert_int_equal(lpo_engine_set_group_callback(e, probe_last_layer, &probe), LPO_OK);
    int32_t *prompt = malloc((size_t)prompt_len * sizeof *prompt);
    for (int64_t i = 0; i < prompt_len; i++) prompt[i] = (int32_t)((i * 7919 + 13) % s->vocab_size);
    float *logits = malloc((size_t)s->vocab_size * sizeof(float));
    int slot = 0;
    for (int step = 0; step < 4; step++) {
        const int32_t *t = step == 0 ? prompt : prompt + step;
        int64_t n = step == 0 ? prompt_len : 1;
        assert_int_equal(lpo_engine_extend(e, 1, &slot, &t, &n, 0, logits), LPO_OK);
        assert_int_equal(probe.seen, step + 1);
        double ss = 0;
        for (int64_t v = 0; v < s->vocab_size; v++) {
            assert_true(isfinite(logits[v]));
            ss += (double)logits[v] * logits[v];
        }
        double rms = sqrt(ss / (double)s->vocab_size);
        if (step == 0)
            printf("%s: last-layer residual rms %.4g, logits rms %.4g after a %lld-token prefill\n", preset,
                   probe.rms, rms, (long long)prompt_len);
        assert_true(probe.rms > 1e-3 && probe.rms < 1e2);
        assert_true(rms > 1e-4 && rms < 1e3);
    }
    free(prompt);
    free(logits);
    lpo_engine_close(e);
    lpo_model_close(m);
    lpo_node_free(cfg);
}

static void test_synthetic_presets(void **state) {
    (void)state;
    check_preset("tiny", 16);
    check_preset("smollm2-135m", 8);
    check_preset("tiny-moe", 16);      /* synthetic experts and router weights keep the stream bounded too */
    check_preset("tiny-deepseek", 16); /* MLA, noaux_tc routing, a shared expert */
}

/* MoE routing statistics (lpo_engine_moe_stats) on tiny-moe (6 experts, 2 per token; layers 0 and 2
 * sparse, 1 dense): a 5-token prefill of one sequence, then 3 decode steps of 2 sequences: per phase and
 * sparse layer, the steps, pairs = tokens x 2, distinct experts per step between 2 and min(6, 2 tokens),
 * nothing for the dense layer; reset zeroes; a dense model has none. */
static void test_moe_stats(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/conf/model/tiny-moe.yaml", LPO_SOURCE_DIR);
    lpo_node *cfg = NULL;
    assert_int_equal(lpo_yaml_load_file(path, &cfg), LPO_OK);
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open(cfg, &m), LPO_OK);
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 2, .max_context = 64};
    lpo_engine *e = NULL;
    assert_int_equal(lpo_engine_open(m, &o, &e), LPO_OK);
    const int32_t p0[] = {5, 9, 2, 77, 31}, p1[] = {8, 8};
    const int32_t *toks[2] = {p0, p1};
    int slots[2] = {0, 1};
    int64_t n[2] = {5, 2};
    float *lg = malloc(2 * 272 * sizeof(float));
    assert_int_equal(lpo_engine_extend(e, 1, slots, toks, n, 0, lg), LPO_OK);             /* prefill 5 */
    assert_int_equal(lpo_engine_extend(e, 1, slots + 1, toks + 1, n + 1, 0, lg), LPO_OK); /* prefill 2 */
    for (int step = 0; step < 3; step++) { /* decode: 2 sequences, one token each */
        const int32_t a[1] = {(int32_t)(step + 3)}, b[1] = {(int32_t)(step + 40)};
        const int32_t *t[2] = {a, b};
        int64_t one[2] = {1, 1};
        assert_int_equal(lpo_engine_extend(e, 2, slots, t, one, 0, lg), LPO_OK);
    }
    uint64_t steps[6], distinct[6], pairs[2 * 3 * 6];
    lpo_moe_stats ms = {0, 0, steps, distinct, pairs};
    assert_int_equal(lpo_engine_moe_stats(e, &ms, 1), LPO_OK);
    assert_int_equal(ms.n_layers, 3);
    assert_int_equal(ms.n_experts, 6);
    for (int ph = 0; ph < 2; ph++)
        for (int l = 0; l < 3; l++) {
            const uint64_t st = steps[ph * 3 + l], want_steps = l == 1 ? 0 : ph ? 3 : 2;
            uint64_t sum = 0;
            for (int x = 0; x < 6; x++) sum += pairs[(ph * 3 + l) * 6 + x];
            printf("moe stats %s layer %d: %llu steps, %llu distinct, %llu pairs\n",
                   ph ? "decode" : "prefill", l, (unsigned long long)st,
                   (unsigned long long)distinct[ph * 3 + l], (unsigned long long)sum);
            assert_int_equal(st, want_steps);
            assert_int_equal(sum, l == 1 ? 0 : 2 * (ph ? 6 : 7)); /* tokens x 2 */
            if (l != 1) {
                assert_true(distinct[ph * 3 + l] >= 2 * st);
                assert_true(distinct[ph * 3 + l] <= (ph ? 12 : 10)); /* 3 steps x <= 4; 6 + 4 */
            }
        }
    assert_int_equal(lpo_engine_moe_stats(e, &ms, 0), LPO_OK); /* after the reset: zero */
    for (int i = 0; i < 6; i++) assert_int_equal(steps[i] + distinct[i], 0);
    lpo_engine_close(e);
    lpo_model_close(m);
    lpo_node_free(cfg);
    free(lg);
    lpo_model_spec d = test_spec(); /* a dense model: none */
    test_weights w;
    assert_int_equal(test_weights_open(&d, &w), LPO_OK);
    lpo_weight_source ws = {&w, test_view};
    o.max_seqs = 1;
    assert_int_equal(lpo_engine_open_weights(&d, &ws, NULL, &o, &e), LPO_OK);
    assert_int_equal(lpo_engine_moe_stats(e, &ms, 0), LPO_E_UNSUPPORTED);
    lpo_engine_close(e);
    test_weights_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_logits_equal_single),
        cmocka_unit_test(test_incremental_equals_prefill),
        cmocka_unit_test(test_batched_generation_equals_single),
        cmocka_unit_test(test_sampling_determinism),
        cmocka_unit_test(test_eos_and_limits),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_op_events),
        cmocka_unit_test(test_synthetic_presets),
        cmocka_unit_test(test_moe_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
