/* Unit tests for architecture specs: names, HF config.json parsing (rope_scaling / rope_parameters, eos
 * lists, head_dim, biases), validation, the expected tensor list, KV bytes, and the synthetic presets of
 * conf/model/ (exact published parameter counts, shapes, deterministic bounded synthetic weights). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/config.h"
#include "lpo/model.h"
#include "test_support.h"

static void test_arch_names(void **state) {
    (void)state;
    const char *ok[][2] = {{"LlamaForCausalLM", "llama"},
                           {"llama", "llama"},
                           {"MistralForCausalLM", "mistral"},
                           {"mistral", "mistral"},
                           {"Qwen2ForCausalLM", "qwen2"},
                           {"qwen2", "qwen2"},
                           {"Qwen3ForCausalLM", "qwen3"},
                           {"qwen3", "qwen3"},
                           {"MixtralForCausalLM", "mixtral"},
                           {"mixtral", "mixtral"},
                           {"Qwen3MoeForCausalLM", "qwen3_moe"},
                           {"qwen3_moe", "qwen3_moe"},
                           {"deepseek_ocr2_text", "deepseek_ocr2_text"},
                           {"DeepseekV2ForCausalLM", "deepseek_v2"},
                           {"deepseek_v2", "deepseek_v2"},
                           {"DeepseekV3ForCausalLM", "deepseek_v3"},
                           {"deepseek_v3", "deepseek_v3"}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        lpo_arch a;
        assert_int_equal(lpo_arch_from_name(ok[i][0], &a), LPO_OK);
        assert_string_equal(lpo_arch_name(a), ok[i][1]);
    }
    for (int k = 0; k < LPO_ARCH_COUNT; k++) { /* every architecture has a name that maps back to it */
        lpo_arch b;
        assert_non_null(lpo_arch_name((lpo_arch)k));
        assert_int_equal(lpo_arch_from_name(lpo_arch_name((lpo_arch)k), &b), LPO_OK);
        assert_int_equal((int)b, k);
    }
    lpo_arch a;
    assert_int_equal(lpo_arch_from_name("GPT2LMHeadModel", &a), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "'GPT2LMHeadModel'"));
    assert_non_null(strstr(lpo_last_error(), "Qwen3ForCausalLM"));
    assert_int_equal(lpo_arch_from_name(NULL, &a), LPO_E_UNSUPPORTED);
}

static lpo_status parse(const char *json, lpo_model_spec *s) {
    return lpo_spec_from_hf_config(json, strlen(json), "/m/Org-Model/config.json", s);
}

static void test_hf_config_llama31(void **state) {
    (void)state;
    lpo_model_spec s;
    const char *j =
        "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":128256,"
        "\"hidden_size\":4096,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
        "\"num_key_value_heads\":8,\"intermediate_size\":14336,\"rms_norm_eps\":1e-05,"
        "\"rope_theta\":500000.0,\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,"
        "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
        "\"max_position_embeddings\":131072,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","
        "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"hidden_act\":\"silu\"}";
    assert_int_equal(parse(j, &s), LPO_OK);
    assert_string_equal(s.name, "Org-Model");
    assert_int_equal(s.arch, LPO_ARCH_LLAMA);
    assert_int_equal(s.head_dim, 128);
    assert_int_equal(s.n_kv_heads, 8);
    assert_int_equal(s.rope.scaling, LPO_ROPE_LLAMA3);
    assert_true(s.rope.factor == 8.0 && s.rope.high_freq_factor == 4.0);
    assert_int_equal(s.rope.original_max_positions, 8192);
    assert_true(s.rope.theta == 500000.0);
    assert_true(fabsf(s.norm_eps - 1e-5f) < 1e-12f);
    assert_int_equal(s.dtype, LPO_DT_BF16);
    assert_int_equal(s.bos_id, 128000);
    assert_int_equal(s.n_eos, 3);
    assert_int_equal(s.eos_ids[2], 128009);
    assert_false(s.qkv_bias || s.qk_norm || s.tied_embeddings);
}

static void test_hf_config_variants(void **state) {
    (void)state;
    lpo_model_spec s;
    /* qwen3: explicit head_dim (heads * head_dim != hidden), qk norm; transformers 5 rope_parameters */
    const char *q3 =
        "{\"architectures\":[\"Qwen3ForCausalLM\"],\"vocab_size\":151936,\"hidden_size\":2048,"
        "\"num_hidden_layers\":28,\"num_attention_heads\":16,\"num_key_value_heads\":8,\"head_dim\":128,"
        "\"intermediate_size\":6144,\"rope_parameters\":{\"rope_theta\":1000000,\"rope_type\":"
        "\"default\"},\"tie_word_embeddings\":true,\"dtype\":\"bfloat16\",\"sliding_window\":4096,"
        "\"use_sliding_window\":false,\"eos_token_id\":151645}";
    assert_int_equal(parse(q3, &s), LPO_OK);
    assert_int_equal(s.arch, LPO_ARCH_QWEN3);
    assert_int_equal(s.head_dim, 128);
    assert_true(s.qk_norm && s.tied_embeddings && !s.qkv_bias);
    assert_true(s.rope.theta == 1e6 && s.rope.scaling == LPO_ROPE_NONE);
    assert_int_equal(s.sliding_window, 0);
    assert_int_equal(s.bos_id, -1);
    /* qwen2: q/k/v bias always; model_type alone is enough */
    const char *q2 =
        "{\"model_type\":\"qwen2\",\"vocab_size\":1000,\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128}";
    assert_int_equal(parse(q2, &s), LPO_OK);
    assert_true(s.qkv_bias && !s.o_bias);
    /* qwen2 / qwen3 with use_sliding_window: HF slides from layer max_window_layers (default 28) on, or as
     * layer_types says; all sliding or none is one window, a mix is refused (the window was on every layer)
     */
    const char *qw =
        "{\"model_type\":\"qwen2\",\"vocab_size\":100,\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"intermediate_size\":128,\"max_position_embeddings\":256,"
        "\"use_sliding_window\":true,\"sliding_window\":16";
    static const struct {
        const char *tail;  /* the rest of the config after qw */
        lpo_status st;     /* what the parse gives */
        int64_t window;    /* the model's window when LPO_OK */
        const char *error; /* part of the message otherwise */
    } cases[] = {
        {"}", LPO_OK, 0, NULL}, /* max_window_layers 28 >= 2 layers: none slides */
        {",\"max_window_layers\":0}", LPO_OK, 16, NULL},
        {",\"layer_types\":[\"sliding_attention\",\"sliding_attention\"]}", LPO_OK, 16, NULL},
        {",\"max_window_layers\":1}", LPO_E_UNSUPPORTED, 0,
         "layer 1 has a sliding window of 16, layer 0 full attention (use_sliding_window with "
         "max_window_layers)"},
        {",\"layer_types\":[\"sliding_attention\",\"full_attention\"]}", LPO_E_UNSUPPORTED, 0,
         "layer 0 has a sliding window of 16, layer 1 full attention"},
        {",\"layer_types\":[\"sliding_attention\"]}", LPO_E_FORMAT, 0, "for each of the 2 layers"},
        {",\"layer_types\":[\"sliding_attention\",\"chunked_attention\"]}", LPO_E_FORMAT, 0,
         "'layer_types'[1] is not"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) { // case i: qw + its tail
        char js[512];
        snprintf(js, sizeof js, "%s%s", qw, cases[i].tail);
        assert_int_equal(parse(js, &s), cases[i].st);
        if (cases[i].st == LPO_OK) assert_int_equal(s.sliding_window, cases[i].window);
        if (cases[i].error && !strstr(lpo_last_error(), cases[i].error))
            fail_msg("case %zu: '%s' not in '%s'", i, cases[i].error, lpo_last_error());
    }
    /* without use_sliding_window no layer slides, whatever layer_types lists (HF drops the window) */
    const char *q3t =
        "{\"model_type\":\"qwen3\",\"vocab_size\":100,\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"intermediate_size\":128,\"sliding_window\":16,"
        "\"layer_types\":[\"full_attention\",\"sliding_attention\"]}";
    assert_int_equal(parse(q3t, &s), LPO_OK);
    assert_int_equal(s.sliding_window, 0);
    /* mistral v0.1: sliding window applies */
    const char *mi = "{\"architectures\":[\"MistralForCausalLM\"],\"vocab_size\":32000,\"hidden_size\":64,"
                     "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":1,"
                     "\"intermediate_size\":128,\"max_position_embeddings\":32768,\"sliding_window\":4096,"
                     "\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}}";
    assert_int_equal(parse(mi, &s), LPO_OK);
    assert_int_equal(s.sliding_window, 4096);
    assert_int_equal(s.rope.scaling, LPO_ROPE_LINEAR);
    assert_true(s.rope.factor == 2.0);
    /* yarn */
    const char *ya =
        "{\"model_type\":\"qwen2\",\"vocab_size\":100,\"hidden_size\":64,\"num_hidden_layers\":1,"
        "\"num_attention_heads\":4,\"intermediate_size\":128,\"max_position_embeddings\":32768,"
        "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0,\"original_max_position_embeddings\":"
        "32768,\"beta_fast\":16,\"attention_factor\":1.2}}";
    assert_int_equal(parse(ya, &s), LPO_OK);
    assert_int_equal(s.rope.scaling, LPO_ROPE_YARN);
    assert_true(s.rope.beta_fast == 16 && s.rope.beta_slow == 1 && s.rope.attn_factor == 1.2);
}

/* Mixture-of-experts configs: transformers 5 keys and defaults, the sparse-layer rule, and the routing
 * options lpo does not implement refused by name. */
static void test_hf_config_moe(void **state) {
    (void)state;
    lpo_model_spec s;
    /* Mixtral-8x7B's published config: 8 experts of 14336, 2 per token, renormalised, every layer sparse */
    const char *mx =
        "{\"architectures\":[\"MixtralForCausalLM\"],\"model_type\":\"mixtral\",\"vocab_size\":32000,"
        "\"hidden_size\":4096,\"num_hidden_layers\":32,\"num_attention_heads\":32,\"num_key_value_heads\":8,"
        "\"intermediate_size\":14336,\"num_local_experts\":8,\"num_experts_per_tok\":2,"
        "\"router_aux_loss_coef\":0.02,\"router_jitter_noise\":0.0,\"output_router_logits\":false,"
        "\"rope_theta\":1e6,\"sliding_window\":null,\"max_position_embeddings\":32768}";
    assert_int_equal(parse(mx, &s), LPO_OK);
    assert_int_equal(s.arch, LPO_ARCH_MIXTRAL);
    assert_true(s.moe.n_experts == 8 && s.moe.n_experts_used == 2 && s.moe.intermediate_size == 14336);
    assert_true(s.moe.norm_topk_prob && s.moe.sparse_step == 1 && !s.qk_norm && s.sliding_window == 0);
    for (int l = 0; l < 32; l++) assert_true(lpo_spec_layer_is_moe(&s, l));
    assert_string_equal(lpo_spec_moe_names(&s)->block, "block_sparse_moe");
    assert_string_equal(lpo_spec_moe_names(&s)->down, "w2");
    /* Qwen3-30B-A3B's: 128 experts of 768, 8 per token, q/k norm; HF's default norm_topk_prob is false */
    const char *q =
        "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"vocab_size\":151936,\"hidden_size\":2048,"
        "\"num_hidden_layers\":48,\"num_attention_heads\":32,\"num_key_value_heads\":4,\"head_dim\":128,"
        "\"intermediate_size\":6144,\"moe_intermediate_size\":768,\"num_experts\":128,"
        "\"num_experts_per_tok\":8,\"norm_topk_prob\":true,\"decoder_sparse_step\":1,\"mlp_only_layers\":[],"
        "\"sliding_window\":null,\"use_sliding_window\":false,\"rope_theta\":1000000.0}";
    assert_int_equal(parse(q, &s), LPO_OK);
    assert_int_equal(s.arch, LPO_ARCH_QWEN3_MOE);
    assert_true(s.moe.n_experts == 128 && s.moe.n_experts_used == 8 && s.moe.intermediate_size == 768);
    assert_true(s.moe.norm_topk_prob && s.qk_norm && lpo_spec_has_moe(&s));
    assert_string_equal(lpo_spec_moe_names(&s)->gate, "gate_proj");
    /* defaults, dense layers by mlp_only_layers and decoder_sparse_step; num_local_experts (what
     * transformers 5 writes) for num_experts */
    const char *base = "{\"model_type\":\"qwen3_moe\",\"vocab_size\":100,\"hidden_size\":64,"
                       "\"num_hidden_layers\":6,\"num_attention_heads\":4,\"intermediate_size\":128,";
    char j[1024];
    snprintf(j, sizeof j,
             "%s\"num_local_experts\":4,\"num_experts_per_tok\":2,\"decoder_sparse_step\":2,"
             "\"mlp_only_layers\":[3,1,5]}",
             base);
    assert_int_equal(parse(j, &s), LPO_OK);
    assert_true(s.moe.n_experts == 4 && s.moe.intermediate_size == 768 && !s.moe.norm_topk_prob);
    for (int l = 0; l < 6; l++) assert_false(lpo_spec_layer_is_moe(&s, l)); /* 1, 3, 5 sparse but listed */
    snprintf(j, sizeof j,
             "%s\"num_experts\":4,\"num_experts_per_tok\":2,\"decoder_sparse_step\":2,"
             "\"mlp_only_layers\":[3]}",
             base);
    assert_int_equal(parse(j, &s), LPO_OK);
    for (int l = 0; l < 6; l++) assert_int_equal(lpo_spec_layer_is_moe(&s, l), l == 1 || l == 5);
    snprintf(j, sizeof j, "%s\"num_experts\":0}", base); /* HF: dense throughout */
    assert_int_equal(parse(j, &s), LPO_OK);
    assert_false(lpo_spec_has_moe(&s));
    /* refused by name: options of other MoE families, values out of range, contradictions */
    static const struct {
        const char *keys, *needle;
        lpo_status st;
    } bad[] = {
        {"\"n_shared_experts\":2", "'n_shared_experts' asks for shared experts", LPO_E_UNSUPPORTED},
        {"\"shared_expert_intermediate_size\":512", "shared experts", LPO_E_UNSUPPORTED},
        {"\"routed_scaling_factor\":2.5", "'routed_scaling_factor'", LPO_E_UNSUPPORTED},
        {"\"n_group\":8,\"topk_group\":3", "group-limited top-k", LPO_E_UNSUPPORTED},
        {"\"first_k_dense_replace\":1", "'first_k_dense_replace'", LPO_E_UNSUPPORTED},
        {"\"scoring_func\":\"sigmoid\"", "'scoring_func' 'sigmoid'", LPO_E_UNSUPPORTED},
        {"\"topk_method\":\"noaux_tc\"", "'topk_method' 'noaux_tc'", LPO_E_UNSUPPORTED},
        {"\"mlp_only_layers\":[6]", "'mlp_only_layers' holds 6", LPO_E_FORMAT},
        {"\"mlp_only_layers\":3", "list of layer indices", LPO_E_FORMAT},
        {"\"num_experts\":4,\"num_local_experts\":8", "disagree", LPO_E_FORMAT},
        {"\"num_experts\":4,\"num_experts_per_tok\":5", "experts per token 5 must be in 1..4", LPO_E_FORMAT},
        {"\"decoder_sparse_step\":0", "decoder_sparse_step 0", LPO_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(j, sizeof j, "%s%s}", base, bad[i].keys);
        assert_int_equal(parse(j, &s), bad[i].st);
        if (!strstr(lpo_last_error(), bad[i].needle)) fail_msg("%s: '%s'", bad[i].keys, lpo_last_error());
    }
    /* the values that mean "none" pass */
    snprintf(j, sizeof j, "%s\"n_shared_experts\":0,\"routed_scaling_factor\":1.0,\"n_group\":null}", base);
    assert_int_equal(parse(j, &s), LPO_OK);
    /* mixtral always renormalises: a config saying otherwise is not guessed at */
    const char *mb = "{\"model_type\":\"mixtral\",\"vocab_size\":100,\"hidden_size\":64,"
                     "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":128,";
    snprintf(j, sizeof j, "%s\"norm_topk_prob\":false}", mb);
    assert_int_equal(parse(j, &s), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "'norm_topk_prob'"));
    snprintf(j, sizeof j, "%s\"num_local_experts\":0}", mb);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
}

/* DeepSeek-OCR-2's text config (deepseek_ocr2_text): mlp_layer_types, shared experts, the routing options
 * and scale; head_dim is hidden / heads whatever the file says; what HF's router would not do is refused by
 * name; the tensor list holds the shared experts. */
static void test_hf_config_deepseek(void **state) {
    (void)state;
    lpo_model_spec s;
    const char *base = "{\"model_type\":\"deepseek_ocr2_text\",\"architectures\":null,\"vocab_size\":100,"
                       "\"hidden_size\":64,\"num_hidden_layers\":3,\"num_attention_heads\":4,\"head_dim\":8,"
                       "\"intermediate_size\":128,\"moe_intermediate_size\":32,\"n_routed_experts\":8,"
                       "\"num_experts_per_tok\":3,\"mlp_layer_types\":[\"dense\",\"sparse\",\"sparse\"],";
    char j[1024];
    snprintf(j, sizeof j, "%s\"routed_scaling_factor\":1.5,\"mlp_bias\":true,\"attention_bias\":true}", base);
    assert_int_equal(parse(j, &s), LPO_OK);
    assert_int_equal(s.arch, LPO_ARCH_DEEPSEEK_OCR2_TEXT);
    assert_true(s.head_dim == 16 && s.n_kv_heads == 4 && s.qkv_bias && s.o_bias && s.mlp_bias && !s.qk_norm);
    assert_true(s.moe.n_experts == 8 && s.moe.n_experts_used == 3 && s.moe.intermediate_size == 32);
    assert_true(s.moe.n_shared_experts == 2 && lpo_spec_shared_intermediate(&s) == 64); /* HF's default 2 */
    assert_true(s.moe.topk_method == LPO_TOPK_GREEDY && s.moe.scoring == LPO_SCORE_SOFTMAX);
    assert_true(lpo_spec_route_scale(&s) == 1.5 && !s.moe.norm_topk_prob);
    for (int l = 0; l < 3; l++) assert_int_equal(lpo_spec_layer_is_moe(&s, l), l > 0);
    lpo_tensor_desc *d;
    size_t n;
    assert_int_equal(lpo_spec_tensors(&s, &d, &n), LPO_OK);
    int shared = 0;
    for (size_t i = 0; i < n; i++)
        if (strstr(d[i].name, "layers.1.mlp.shared_experts.")) {
            shared++;
            if (strstr(d[i].name, "down_proj.weight"))
                assert_true(d[i].shape[0] == 64 && d[i].shape[1] == 64);
        }
    assert_int_equal(shared, 6); /* gate, up, down and their biases */
    free(d);
    snprintf(j, sizeof j,
             "%s\"topk_method\":\"group_limited_greedy\",\"n_group\":4,\"topk_group\":2,"
             "\"n_shared_experts\":1,\"first_k_dense_replace\":1,\"scoring_func\":\"softmax\","
             "\"norm_topk_prob\":false,\"moe_layer_freq\":1}",
             base);
    assert_int_equal(parse(j, &s), LPO_OK);
    assert_true(s.moe.topk_method == LPO_TOPK_GROUP_LIMITED && s.moe.n_group == 4 && s.moe.topk_group == 2);
    static const struct {
        const char *keys, *needle;
        lpo_status st;
    } bad[] = {
        {"\"scoring_func\":\"sigmoid\"", "'scoring_func' 'sigmoid'", LPO_E_UNSUPPORTED},
        {"\"topk_method\":\"noaux_tc\"", "'topk_method' 'noaux_tc' is not supported", LPO_E_UNSUPPORTED},
        {"\"norm_topk_prob\":true", "never renormalises", LPO_E_UNSUPPORTED},
        {"\"moe_layer_freq\":2", "'moe_layer_freq' 2", LPO_E_UNSUPPORTED},
        {"\"first_k_dense_replace\":2", "layer 1 is dense, 'mlp_layer_types' says sparse", LPO_E_FORMAT},
        {"\"topk_method\":\"group_limited_greedy\"", "needs 'n_group' and 'topk_group'", LPO_E_FORMAT},
        {"\"topk_method\":\"group_limited_greedy\",\"n_group\":3,\"topk_group\":2", "dividing the 8 experts",
         LPO_E_FORMAT},
        {"\"topk_method\":\"group_limited_greedy\",\"n_group\":8,\"topk_group\":2",
         "the 2 groups kept hold 2 experts", LPO_E_FORMAT},
        {"\"routed_scaling_factor\":0", "'routed_scaling_factor' 0 must be positive", LPO_E_FORMAT},
        {"\"n_shared_experts\":-1", "-1 shared experts", LPO_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(j, sizeof j, "%s%s}", base, bad[i].keys);
        assert_int_equal(parse(j, &s), bad[i].st);
        if (!strstr(lpo_last_error(), bad[i].needle)) fail_msg("%s: '%s'", bad[i].keys, lpo_last_error());
    }
    static const char *const layer_types[] = {"\"mlp_layer_types\":[\"dense\",\"sparse\"]",
                                              "\"mlp_layer_types\":[\"dense\",\"moe\",\"sparse\"]"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(j, sizeof j,
                 "{\"model_type\":\"deepseek_ocr2_text\",\"vocab_size\":100,\"hidden_size\":64,"
                 "\"num_hidden_layers\":3,\"num_attention_heads\":4,\"intermediate_size\":128,"
                 "\"num_experts_per_tok\":2,%s}",
                 layer_types[i]);
        assert_int_equal(parse(j, &s), LPO_E_FORMAT);
        assert_non_null(strstr(lpo_last_error(), "mlp_layer_types"));
    }
}

/* DeepSeek-V2 / V3 configs: MLA sizes (q_lora_rank null = q_proj), head_dim = qk_rope, first_k_dense_replace,
 * V3's routing (sigmoid, noaux_tc, its defaults), the latent KV bytes; refusals by name. */
static void test_hf_config_mla(void **state) {
    (void)state;
    lpo_model_spec s;
    const char *v3 =
        "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"vocab_size\":100,\"hidden_size\":64,"
        "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"intermediate_size\":128,"
        "\"moe_intermediate_size\":16,\"n_routed_experts\":16,\"num_experts_per_tok\":4,"
        "\"q_lora_rank\":null,\"kv_lora_rank\":32,\"qk_nope_head_dim\":16,\"qk_rope_head_dim\":8,"
        "\"v_head_dim\":16,\"first_k_dense_replace\":1,";
    char j[1024];
    snprintf(j, sizeof j, "%s\"scoring_func\":\"sigmoid\",\"topk_method\":\"noaux_tc\"}", v3);
    assert_int_equal(parse(j, &s), LPO_OK);
    assert_int_equal(s.arch, LPO_ARCH_DEEPSEEK_V3);
    assert_true(lpo_spec_is_mla(&s) && s.mla.q_lora_rank == 0 && s.mla.kv_lora_rank == 32 && s.head_dim == 8);
    assert_true(s.mla.rope_interleave && s.n_kv_heads == 4);
    assert_true(s.moe.scoring == LPO_SCORE_SIGMOID && s.moe.topk_method == LPO_TOPK_NOAUX_TC);
    assert_true(s.moe.n_group == 8 && s.moe.topk_group == 4 && s.moe.norm_topk_prob);
    assert_true(lpo_spec_route_scale(&s) == 2.5 && s.moe.n_shared_experts == 1);
    for (int l = 0; l < 4; l++) assert_int_equal(lpo_spec_layer_is_moe(&s, l), l >= 1);
    assert_int_equal(lpo_spec_kv_bytes_per_token(&s, LPO_DT_BF16), 4u * (32 + 8) * 2);
    assert_true(fabs(lpo_spec_attn_scale(&s) - 1 / sqrt(24.0)) < 1e-12);
    lpo_tensor_desc *d;
    size_t n;
    assert_int_equal(lpo_spec_tensors(&s, &d, &n), LPO_OK);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        found += !strcmp(d[i].name, "model.layers.1.mlp.gate.e_score_correction_bias");
        found += !strcmp(d[i].name, "model.layers.0.self_attn.q_proj.weight") && d[i].shape[0] == 4 * 24;
        found += !strcmp(d[i].name, "model.layers.0.self_attn.kv_b_proj.weight") && d[i].shape[0] == 4 * 32 &&
                 d[i].shape[1] == 32;
    }
    assert_int_equal(found, 3);
    free(d);
    /* V2: q_lora, yarn with mscale_all_dim (the softmax scale times mscale^2) */
    const char *v2 = "{\"model_type\":\"deepseek_v2\",\"vocab_size\":100,\"hidden_size\":64,"
                     "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":128,"
                     "\"moe_intermediate_size\":16,\"n_routed_experts\":8,\"num_experts_per_tok\":2,"
                     "\"q_lora_rank\":24,\"kv_lora_rank\":16,\"qk_nope_head_dim\":8,\"qk_rope_head_dim\":4,"
                     "\"v_head_dim\":8,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":40,\"mscale\":0.707,"
                     "\"mscale_all_dim\":0.707,\"original_max_position_embeddings\":4096},";
    snprintf(j, sizeof j, "%s\"first_k_dense_replace\":1}", v2);
    assert_int_equal(parse(j, &s), LPO_OK);
    assert_true(s.arch == LPO_ARCH_DEEPSEEK_V2 && s.mla.q_lora_rank == 24 && s.mla.rope_interleave);
    const double ms = 0.1 * 0.707 * log(40.0) + 1;
    assert_true(fabs(lpo_spec_attn_scale(&s) - ms * ms / sqrt(12.0)) < 1e-12);
    assert_true(s.moe.scoring == LPO_SCORE_SOFTMAX && lpo_spec_route_scale(&s) == 1.0);
    static const struct {
        const char *base, *keys, *needle;
        lpo_status st;
    } bad[] = {
        {NULL, "\"scoring_func\":\"softmax\"", "computes sigmoid scores", LPO_E_UNSUPPORTED},
        {NULL, "\"topk_method\":\"greedy\"", "always routes noaux_tc", LPO_E_UNSUPPORTED},
        {NULL, "\"use_mla\":false", "'use_mla' false", LPO_E_UNSUPPORTED},
        {NULL, "\"num_key_value_heads\":2", "as many KV heads as heads", LPO_E_FORMAT},
        {NULL, "\"n_group\":3", "dividing the 16 experts", LPO_E_FORMAT},
        {"v2", "\"first_k_dense_replace\":3", "'first_k_dense_replace' 3 is not in 0..2", LPO_E_FORMAT},
        {"v2", "\"norm_topk_prob\":true", "never renormalises", LPO_E_UNSUPPORTED},
        {"v2", "\"topk_method\":\"noaux_tc\"", "'topk_method' 'noaux_tc'", LPO_E_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(j, sizeof j, "%s%s}", bad[i].base ? v2 : v3, bad[i].keys);
        assert_int_equal(parse(j, &s), bad[i].st);
        if (!strstr(lpo_last_error(), bad[i].needle)) fail_msg("%s: '%s'", bad[i].keys, lpo_last_error());
    }
}

static void test_hf_config_errors(void **state) {
    (void)state;
    lpo_model_spec s;
    assert_int_equal(parse("{", &s), LPO_E_PARSE);
    assert_non_null(strstr(lpo_last_error(), "/m/Org-Model/config.json"));
    assert_int_equal(parse("{\"architectures\":[\"BertModel\"]}", &s), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "BertModel"));
    const char *base =
        "{\"model_type\":\"llama\",\"vocab_size\":100,\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"intermediate_size\":128,";
    char j[1024];
    snprintf(j, sizeof j, "%s\"num_key_value_heads\":3}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT); /* a bad file: exit 1, not a config error */
    assert_non_null(strstr(lpo_last_error(), "not a multiple of n_kv_heads"));
    snprintf(j, sizeof j, "%s\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2}}", base);
    assert_int_equal(parse(j, &s), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "'dynamic'"));
    snprintf(j, sizeof j, "%s\"hidden_act\":\"relu\"}", base);
    assert_int_equal(parse(j, &s), LPO_E_UNSUPPORTED);
    snprintf(j, sizeof j, "%s\"eos_token_id\":100}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "eos id 100 outside"));
    snprintf(j, sizeof j, "%s\"rms_norm_eps\":\"small\"}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
    snprintf(j, sizeof j, "%s\"num_local_experts\":8}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "mixture-of-experts"));
    /* ids past int32 are refused before narrowing (4294967297 would have become 1) */
    snprintf(j, sizeof j, "%s\"bos_token_id\":4294967297}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "'bos_token_id' holds 4294967297, not a token id"));
    snprintf(j, sizeof j, "%s\"eos_token_id\":1e20}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
    snprintf(j, sizeof j, "%s\"eos_token_id\":[2,\"x\"]}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "'eos_token_id' holds \"x\", not a token id"));
    /* A string or a fraction is refused, not dropped or truncated */
    snprintf(j, sizeof j, "%s\"eos_token_id\":\"2\"}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "'eos_token_id' must be a token id or a list of token ids"));
    snprintf(j, sizeof j, "%s\"eos_token_id\":2.9}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "holds 2.9, not a token id"));
    snprintf(j, sizeof j, "%s\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "lists more than 8 ids"));
    /* rope parameters that would give NaN rotations */
    snprintf(j, sizeof j, "%s\"rope_theta\":1e-300}", base);
    assert_int_equal(parse(j, &s), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "rope theta 1e-300 must be in [1,"));
}

static void test_tensor_list(void **state) {
    (void)state;
    lpo_model_spec s;
    const char *j = "{\"model_type\":\"qwen2\",\"vocab_size\":100,\"hidden_size\":64,\"num_hidden_layers\":2,"
                    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":96}";
    assert_int_equal(parse(j, &s), LPO_OK);
    lpo_tensor_desc *d;
    size_t n;
    assert_int_equal(lpo_spec_tensors(&s, &d, &n), LPO_OK);
    assert_int_equal(n, 1 + 2 * 12 + 2); /* embed, 12 per layer (9 + 3 biases), norm, lm_head */
    assert_string_equal(d[0].name, "model.embed_tokens.weight");
    assert_int_equal(d[0].shape[0], 100);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(d[i].name, "model.layers.1.self_attn.k_proj.weight")) {
            assert_int_equal(d[i].shape[0], 32);
            assert_int_equal(d[i].shape[1], 64);
            assert_int_equal(d[i].part, LPO_PART_ATTN);
            assert_int_equal(d[i].layer, 1);
            found++;
        }
        if (!strcmp(d[i].name, "model.layers.0.mlp.down_proj.weight")) {
            assert_int_equal(d[i].shape[0], 64);
            assert_int_equal(d[i].shape[1], 96);
            found++;
        }
        assert_int_equal(lpo_tensor_part(d[i].name), d[i].part);
    }
    assert_int_equal(found, 2);
    assert_string_equal(d[n - 1].name, "lm_head.weight");
    free(d);
    assert_int_equal(lpo_spec_kv_bytes_per_token(&s, LPO_DT_F16), 2 * 2 * 2 * 16 * 2);
    assert_int_equal(lpo_spec_kv_bytes_per_token(&s, LPO_DT_Q8_0), 0);
}

/* ---- presets ---- */
typedef struct {
    const char *name;
    int64_t params; /* published totals (HF model cards / config arithmetic) */
    int64_t lm_head;
    int tied;
} preset;

static const preset presets[] = {
    {"llama3.1-8b", 8030261248LL, 525336576LL, 0},
    {"llama3.2-1b", 1235814400LL, 0, 1},
    {"llama3.2-3b", 3212749824LL, 0, 1},
    {"llama2-7b", 6738415616LL, 131072000LL, 0},
    {"mistral-7b", 7248023552LL, 134217728LL, 0},
    {"qwen2.5-7b", 7615616512LL, 544997376LL, 0},
    {"qwen3-8b", 8190735360LL, 622329856LL, 0},
    {"qwen3-30b-a3b", 30532122624LL, 311164928LL, 0}, /* transformers' count of the config (every expert) */
    {"mixtral-8x7b", 46702792704LL, 131072000LL, 0},
    /* transformers' count of DeepseekV2Config (V2-Lite's keys) and of DeepseekV3Config() on the meta device;
     * V3's includes the 58 routers' e_score_correction_bias buffers (stored in the checkpoint) */
    {"deepseek-v2-lite", 15706484224LL, 209715200LL, 0},
    {"deepseek-v3", 671026419200LL, 926679040LL, 0},
    {"tiny-moe", 208160LL, 17408LL, 0},
    {"smollm2-135m", 134515008LL, 0, 1},
    {"tiny", 108864LL, 17408LL, 0},
};

static lpo_model *open_preset(const char *name, lpo_node **cfg) {
    char p[512];
    snprintf(p, sizeof p, "%s/conf/model/%s.yaml", LPO_SOURCE_DIR, name);
    if (lpo_yaml_load_file(p, cfg) != LPO_OK) fail_msg("%s: %s", p, lpo_last_error());
    lpo_model *m = NULL;
    if (lpo_model_open(*cfg, &m) != LPO_OK) fail_msg("%s: %s", name, lpo_last_error());
    return m;
}

static void test_preset_param_counts(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        lpo_node *cfg;
        lpo_model *m = open_preset(presets[i].name, &cfg);
        lpo_param_summary p;
        assert_int_equal(lpo_model_param_summary(m, &p), LPO_OK);
        if (p.total != presets[i].params)
            fail_msg("%s: %lld parameters, expected %lld", presets[i].name, (long long)p.total,
                     (long long)presets[i].params);
        assert_int_equal(p.params[LPO_PART_LM_HEAD], presets[i].lm_head);
        assert_int_equal(p.tied, presets[i].tied);
        assert_int_equal(p.params[LPO_PART_OTHER], 0);
        const lpo_model_spec *s = lpo_model_get_spec(m);
        assert_string_equal(s->name, presets[i].name);
        assert_string_equal(lpo_model_source(m), "synthetic");
        assert_null(lpo_model_path(m));
        assert_int_equal(p.weight_bytes, (uint64_t)p.total * (uint64_t)lpo_dtype_block_bytes(s->dtype));
        printf("%-14s %14lld parameters, %s\n", presets[i].name, (long long)p.total,
               lpo_dtype_name(s->dtype));
        lpo_model_close(m);
        lpo_node_free(cfg);
    }
}

static void test_preset_details(void **state) {
    (void)state;
    lpo_node *cfg;
    lpo_model *m = open_preset("llama3.1-8b", &cfg);
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->rope.scaling, LPO_ROPE_LLAMA3);
    assert_true(s->rope.factor == 8.0 && s->rope.theta == 500000.0);
    assert_int_equal(s->rope.original_max_positions, 8192);
    assert_int_equal(s->vocab_size, 128256);
    assert_int_equal(lpo_spec_kv_bytes_per_token(s, LPO_DT_BF16), 131072);
    lpo_model_close(m);
    lpo_node_free(cfg);
    m = open_preset("qwen3-8b", &cfg);
    s = lpo_model_get_spec(m);
    assert_true(s->qk_norm && s->head_dim == 128 && !s->qkv_bias);
    assert_non_null(lpo_model_tensor(m, "model.layers.35.self_attn.k_norm.weight"));
    lpo_model_close(m);
    lpo_node_free(cfg);
    m = open_preset("qwen2.5-7b", &cfg);
    const lpo_tensor *t = lpo_model_tensor(m, "model.layers.0.self_attn.k_proj.bias");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 512);
    assert_null(t->data);
    assert_int_equal(t->nbytes, 1024);
    lpo_model_close(m);
    lpo_node_free(cfg);
}

/* Synthetic values: deterministic per (seed, name), bounded, bf16-representable for bf16 models. */
static void test_synthetic_values(void **state) {
    (void)state;
    lpo_node *cfg;
    lpo_model *m = open_preset("smollm2-135m", &cfg);
    const lpo_tensor *q = lpo_model_tensor(m, "model.layers.3.self_attn.q_proj.weight");
    const lpo_tensor *n = lpo_model_tensor(m, "model.layers.3.input_layernorm.weight");
    const lpo_tensor *o = lpo_model_tensor(m, "model.layers.3.self_attn.o_proj.weight");
    uint64_t nq = lpo_tensor_numel(q);
    float *a = malloc(nq * 4), *b = malloc(nq * 4), *c = malloc(nq * 4);
    assert_int_equal(lpo_model_tensor_f32(m, q, a), LPO_OK);
    assert_int_equal(lpo_model_tensor_f32(m, q, b), LPO_OK);
    assert_memory_equal(a, b, nq * 4);
    double ss = 0;
    for (uint64_t i = 0; i < nq; i++) {
        assert_true(isfinite(a[i]) && fabsf(a[i]) <= sqrtf(3.0f / 576) * 1.01f);
        assert_int_equal(lpo_f32_to_bf16(a[i]), (uint16_t)(lpo_f32_to_bf16(a[i]))); /* representable */
        assert_true(lpo_bf16_to_f32(lpo_f32_to_bf16(a[i])) == a[i]);
        ss += (double)a[i] * a[i];
    }
    double std = sqrt(ss / (double)nq);
    assert_true(fabs(std - 1.0 / sqrt(576.0)) < 0.05 / sqrt(576.0)); /* std 1/sqrt(fan_in) */
    assert_int_equal(lpo_model_tensor_f32(m, o, c), LPO_OK);         /* residual branch: / sqrt(2 L) */
    ss = 0;
    for (uint64_t i = 0; i < nq; i++) ss += (double)c[i] * c[i];
    assert_true(fabs(sqrt(ss / (double)nq) - 1.0 / sqrt(576.0) / sqrt(60.0)) <
                0.05 / sqrt(576.0) / sqrt(60.0));
    float nw[576];
    assert_int_equal(lpo_model_tensor_f32(m, n, nw), LPO_OK);
    for (int i = 0; i < 576; i++) assert_true(nw[i] >= 0.89f && nw[i] <= 1.11f); /* 1 + 0.1 u, bf16-rounded */
    char qname[96];
    snprintf(qname, sizeof qname, "%s", q->name);
    lpo_model_close(m);
    /* another seed gives other values */
    lpo_node *seed = lpo_node_child(cfg, "seed");
    free(seed->value);
    seed->value = lpo_strdup("7");
    assert_int_equal(lpo_model_open(cfg, &m), LPO_OK);
    assert_int_equal(lpo_model_tensor_f32(m, lpo_model_tensor(m, qname), b), LPO_OK);
    assert_memory_not_equal(a, b, nq * 4);
    lpo_model_close(m);
    lpo_node_free(cfg);
    free(a);
    free(b);
    free(c);
}

static void test_config_errors(void **state) {
    (void)state;
    const struct {
        const char *yaml, *needle;
        lpo_status st;
    } cases[] = {
        {"source: synthetic\narch: {type: llama, vocab_size: 10, hidden_sise: 8}\n",
         "did you mean 'model.arch.hidden_size'", LPO_E_CONFIG},
        {"source: synthetic\nsede: 1\n", "did you mean 'model.seed'", LPO_E_CONFIG},
        {"source: hf\npath: null\n", "model.path is required", LPO_E_CONFIG},
        {"source: gpu\n", "'gpu' is not one of", LPO_E_CONFIG},
        {"source: synthetic\n", "model.arch is missing", LPO_E_CONFIG},
        {"source: synthetic\narch: [1, 2]\n", "model.arch must be a mapping of keys", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 1, n_heads: 2, "
         "intermediate_size: 8, rope: 5}\n",
         "model.arch.rope must be a mapping of keys", LPO_E_CONFIG}, /* was silently ignored */
        {"source: auto\npath: /nonexistent/model\n", "does not exist", LPO_E_NOT_FOUND},
        {"source: synthetic\narch: {type: qwen3_moe, vocab_size: 10, hidden_size: 8, n_layers: 2, n_heads: "
         "2, "
         "intermediate_size: 8, moe: {experts: 4, experts_per_tok: 2, intermediate_size: 4, dense_layer: "
         "[1]}}\n",
         "did you mean 'model.arch.moe.dense_layers'", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: qwen3_moe, vocab_size: 10, hidden_size: 8, n_layers: 2, n_heads: "
         "2, "
         "intermediate_size: 8, moe: {experts: 4, experts_per_tok: 2, intermediate_size: 4, dense_layers: "
         "[2]}}\n",
         "model.arch.moe.dense_layers: a list of layer indices", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: qwen3_moe, vocab_size: 10, hidden_size: 8, n_layers: 2, n_heads: "
         "2, "
         "intermediate_size: 8, moe: {experts: 4, experts_per_tok: 5, intermediate_size: 4}}\n",
         "experts per token 5 must be in 1..4", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: mixtral, vocab_size: 10, hidden_size: 8, n_layers: 2, n_heads: 2, "
         "intermediate_size: 8}\n",
         "mixtral needs at least one routed expert", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 2, n_heads: 2, "
         "intermediate_size: 8, moe: {experts: 4, experts_per_tok: 2, intermediate_size: 4}}\n",
         "mixture-of-experts layers are read for the mixtral, qwen3_moe", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: qwen3_moe, vocab_size: 10, hidden_size: 8, n_layers: 2, n_heads: "
         "2, "
         "intermediate_size: 8, moe: 3}\n",
         "model.arch.moe must be a mapping of keys", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: gpt2, vocab_size: 10, hidden_size: 8, n_layers: 1, n_heads: 2, "
         "intermediate_size: 8}\n",
         "model.arch.type: unsupported architecture 'gpt2'", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: lama, vocab_size: 10, hidden_size: 8, n_layers: 1, n_heads: 2, "
         "intermediate_size: 8}\n",
         "(did you mean 'llama'?)", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 1, n_heads: 2, "
         "intermediate_size: 8, bos_id: 4294967297}\n",
         "model.arch.bos_id: 4294967297 is not a token id", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 1, n_heads: 2, "
         "intermediate_size: 8, eos_ids: 4294967298}\n",
         "model.arch.eos_ids: 4294967298 is not a token id", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 1, n_heads: 2, "
         "intermediate_size: 8, eos_ids: [1, 4294967298]}\n",
         "model.arch.eos_ids: item 1 is not a token id", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 1, n_heads: 2, "
         "intermediate_size: 8, rope: {scaling: yarn, original_max_positions: 64, beta_fast: .nan}}\n",
         "yarn beta_fast (nan) and beta_slow (1) must be positive", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 1, n_heads: 2, "
         "intermediate_size: 8, rope: {scaling: yarn, original_max_positions: 64, attn_factor: .inf}}\n",
         "yarn attn_factor inf must be >= 0", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 1, n_heads: 16, "
         "intermediate_size: 8}\n",
         "head_dim", LPO_E_CONFIG},
        {"source: synthetic\ndtype: q4_k\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 1, "
         "n_heads: 2, "
         "intermediate_size: 8}\n",
         "not a multiple of the q4_k block", LPO_E_CONFIG},
        {"source: synthetic\ndtype: f8\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 1, "
         "n_heads: 2, "
         "intermediate_size: 8}\n",
         "unknown dtype 'f8'", LPO_E_CONFIG},
        {"source: synthetic\narch: {type: llama, vocab_size: 10, hidden_size: 8, n_layers: 1, n_heads: 2, "
         "intermediate_size: 8, rope: {scaling: ntk}}\n",
         "'ntk' is not one of", LPO_E_CONFIG},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        lpo_node *cfg;
        assert_int_equal(lpo_yaml_parse(cases[i].yaml, strlen(cases[i].yaml), "case.yaml", &cfg), LPO_OK);
        lpo_model *m = NULL;
        lpo_status st = lpo_model_open(cfg, &m);
        if (st != cases[i].st || !strstr(lpo_last_error(), cases[i].needle))
            fail_msg("case %zu: %s '%s' (wanted %s with '%s')", i, lpo_status_name(st), lpo_last_error(),
                     lpo_status_name(cases[i].st), cases[i].needle);
        assert_null(m);
        lpo_node_free(cfg);
    }
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open(NULL, &m), LPO_E_CONFIG);
    /* name and tokenizer keys; a path on a hf/gguf source is checked against what the file is */
    const char *ok =
        "name: mine\ntokenizer: /x/tokenizer.json\nsource: auto\narch: {type: qwen3, vocab_size: 300, "
        "hidden_size: 32, n_layers: 1, n_heads: 4, n_kv_heads: 2, head_dim: 16, intermediate_size: 64, "
        "eos_ids: 7}\n";
    lpo_node *cfg;
    assert_int_equal(lpo_yaml_parse(ok, strlen(ok), "ok.yaml", &cfg), LPO_OK);
    assert_int_equal(lpo_model_open(cfg, &m), LPO_OK);
    assert_string_equal(lpo_model_get_spec(m)->name, "mine");
    assert_string_equal(lpo_model_tokenizer_path(m), "/x/tokenizer.json");
    assert_int_equal(lpo_model_get_spec(m)->n_eos, 1);
    assert_int_equal(lpo_model_get_spec(m)->eos_ids[0], 7);
    assert_true(lpo_model_get_spec(m)->qk_norm); /* qwen3 default */
    assert_int_equal(lpo_model_tensor(m, "model.layers.0.self_attn.q_proj.weight")->shape[0], 64);
    lpo_model_close(m);
    lpo_node_free(cfg);
    const char *gg = "source: gguf\npath: " LPO_SOURCE_DIR "/tests/golden/models/tiny-llama\n";
    assert_int_equal(lpo_yaml_parse(gg, strlen(gg), "gg.yaml", &cfg), LPO_OK);
    assert_int_equal(lpo_model_open(cfg, &m), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "is a hf model"));
    lpo_node_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arch_names),         cmocka_unit_test(test_hf_config_llama31),
        cmocka_unit_test(test_hf_config_variants), cmocka_unit_test(test_hf_config_errors),
        cmocka_unit_test(test_hf_config_moe),      cmocka_unit_test(test_hf_config_deepseek),
        cmocka_unit_test(test_tensor_list),        cmocka_unit_test(test_preset_param_counts),
        cmocka_unit_test(test_preset_details),     cmocka_unit_test(test_synthetic_values),
        cmocka_unit_test(test_config_errors),      cmocka_unit_test(test_hf_config_mla),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
