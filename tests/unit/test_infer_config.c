/* Inference settings: the C fallbacks of lpo_infer_config_read equal what the built-in conf/ states (one
 * source of truth for a default: conf/), and the engine options come out with positive flags. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lpo/infer.h"
#include "test_support.h"

static void assert_same_engine(const lpo_engine_opts *a, const lpo_engine_opts *b) {
    assert_string_equal(a->backend, b->backend);
    assert_string_equal(a->dtype, b->dtype);
    assert_int_equal(a->max_seqs, b->max_seqs);
    assert_int_equal(a->max_context, b->max_context);
    assert_int_equal(a->max_step_tokens, b->max_step_tokens);
    assert_int_equal(a->n_threads, b->n_threads);
    assert_int_equal(a->exec, b->exec);
    assert_int_equal(a->fusion, b->fusion);
    assert_int_equal(a->gemv, b->gemv);
    assert_int_equal(a->pdl, b->pdl);
    assert_int_equal(a->pad_batches, b->pad_batches);
    assert_int_equal(a->device, b->device);
}

/* A config without the infer and engine keys reads as the built-in conf/ does. */
static void test_fallbacks_match_conf(void **state) {
    (void)state;
    lpo_node *conf = NULL, *empty = NULL;
    assert_int_equal(lpo_test_compose("generate", NULL, 0, NULL, 0, &conf), LPO_OK);
    assert_int_equal(lpo_yaml_parse("{}\n", 3, "test", &empty), LPO_OK);
    lpo_infer_config a, b;
    assert_int_equal(lpo_infer_config_read(conf, &a), LPO_OK);
    assert_int_equal(lpo_infer_config_read(empty, &b), LPO_OK);
    assert_int_equal(a.gen.max_new_tokens, b.gen.max_new_tokens);
    assert_int_equal(a.gen.ignore_eos, b.gen.ignore_eos);
    assert_int_equal(a.gen.n_stop, b.gen.n_stop);
    assert_true(a.gen.sampling.temperature == b.gen.sampling.temperature);
    assert_int_equal(a.gen.sampling.top_k, b.gen.sampling.top_k);
    assert_true(a.gen.sampling.top_p == b.gen.sampling.top_p);
    assert_true(a.gen.sampling.repetition_penalty == b.gen.sampling.repetition_penalty);
    assert_int_equal(a.gen.sampling.seed, b.gen.sampling.seed);
    assert_int_equal(a.chat, b.chat);
    assert_string_equal(a.chat_template, b.chat_template);
    assert_null(a.chat_date);
    assert_null(b.chat_date);
    assert_int_equal(a.system_set, b.system_set);
    assert_int_equal(a.batch_size, b.batch_size);
    assert_same_engine(&a.engine, &b.engine);
    /* and both are the engine's own defaults */
    const lpo_engine_opts d = {LPO_ENGINE_DEFAULTS};
    assert_int_equal(b.engine.fusion, d.fusion);
    assert_int_equal(b.engine.gemv, d.gemv);
    assert_int_equal(b.engine.pdl, d.pdl);
    assert_int_equal(b.engine.exec, LPO_EXEC_GRAPH);
    assert_int_equal(b.engine.max_step_tokens, LPO_ENGINE_DEFAULT_STEP_TOKENS);
    lpo_infer_config_free(&a);
    lpo_infer_config_free(&b);
    lpo_node_free(conf);
    lpo_node_free(empty);
}

/* engine.* flags keep their polarity from the config to the engine options. */
static void test_engine_flags(void **state) {
    (void)state;
    const char *ov[] = {"engine.pdl=false",  "engine.gemv=false",    "engine.fusion=false",
                        "engine.exec=eager", "infer.max_context=96", "infer.prefill_chunk=32",
                        "infer.threads=3",   "backend=cpu"};
    lpo_node *cfg = NULL;
    assert_int_equal(lpo_test_compose("generate", ov, sizeof ov / sizeof *ov, NULL, 0, &cfg), LPO_OK);
    lpo_infer_config ic;
    assert_int_equal(lpo_infer_config_read(cfg, &ic), LPO_OK);
    lpo_engine_opts o;
    lpo_infer_engine_opts(&ic, 4, &o);
    assert_int_equal(o.pdl, 0);
    assert_int_equal(o.gemv, 0);
    assert_int_equal(o.fusion, 0);
    assert_int_equal(o.exec, LPO_EXEC_EAGER);
    assert_int_equal(o.max_context, 96);
    assert_int_equal(o.max_step_tokens, 32);
    assert_int_equal(o.n_threads, 3);
    assert_int_equal(o.max_seqs, 4);
    assert_string_equal(o.backend, "cpu");
    lpo_infer_config_free(&ic);
    lpo_node_free(cfg);
}

/* The max_context rule: asked when > 0, else the model's positions capped. */
static void test_context_rule(void **state) {
    (void)state;
    lpo_model_spec s;
    memset(&s, 0, sizeof s);
    s.max_positions = 128;
    assert_int_equal(lpo_engine_context_for(&s, 0), 128);
    assert_int_equal(lpo_engine_context_for(&s, 64), 64);
    s.max_positions = 1 << 20;
    assert_int_equal(lpo_engine_context_for(&s, 0), LPO_ENGINE_DEFAULT_MAX_CONTEXT);
    s.max_positions = 0;
    assert_int_equal(lpo_engine_model_positions(&s), LPO_ENGINE_DEFAULT_MAX_CONTEXT);
    assert_int_equal(lpo_engine_context_for(&s, 0), LPO_ENGINE_DEFAULT_MAX_CONTEXT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fallbacks_match_conf),
        cmocka_unit_test(test_engine_flags),
        cmocka_unit_test(test_context_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
