#!/usr/bin/env python3
"""Golden fixtures for lpo's engine, made with HF transformers + torch (CPU, float32).

Writes, under tests/golden/engine/:
  <name>/model.safetensors, config.json, generation_config.json   tiny random-weight models (dense, and
                        mixture-of-experts in the hub layout: per-expert tensors; DeepSeek-OCR-2's text
                        model as DeepseekOcr2TextModel + lm_head, no generation_config.json)
  <name>/fixture.json   input ids, greedy continuation ids (EOS ignored), logits file name, max |logit|
  <name>/logits.bin     float32 little-endian logits [T, vocab] of one forward pass over the input ids
  chat.json             chat prompts rendered by transformers' apply_chat_template (one user turn, for the
                        Llama-3.x families also with a system message and a date)
  smollm2/fixture.json  SmolLM2-135M-Instruct Q4_1 GGUF: 5 prompts, their ids, 32 greedy tokens each
                        (only when the GGUF is found: --gguf PATH, $LPO_SMOLLM2_GGUF or models/)

The tiny models store bf16 weights (exercising lpo's conversion) except one in f32; HF runs them in
float32 with the same (bf16-rounded) values. Weights are drawn with a larger spread than HF's init so
that logits are well separated and greedy choices are not near ties.

Needs torch, transformers (5.x), safetensors, and for the GGUF part gguf + accelerate (transformers
requires accelerate to load GGUF files). The greedy references are plain argmax decoding through EOS
(what lpo does with infer.ignore_eos=true); generate()'s min_new_tokens would mask EOS instead.

Usage: python3 tests/golden/engine/make_fixtures.py [--gguf path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
                                                    [--only name,name]   (names: the tiny and MoE models,
                                                    smollm2, chat = chat.json alone)
"""
import argparse
import datetime
import json
import os
import struct
import sys
from types import SimpleNamespace

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
N_NEW = 16

# name -> (config class, kwargs, stored dtype)
TINY = {
    "llama_gqa_tied": ("LlamaConfig", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                           tie_word_embeddings=True, max_position_embeddings=256,
                                           rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1,
                                           eos_token_id=2), torch.bfloat16),
    "llama3_rope": ("LlamaConfig", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=4, vocab_size=128,
                                        tie_word_embeddings=False, max_position_embeddings=512,
                                        rms_norm_eps=1e-5, rope_theta=500000.0, bos_token_id=1, eos_token_id=2,
                                        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                          high_freq_factor=4.0,
                                                          original_max_position_embeddings=16)),
                    torch.bfloat16),
    "qwen2_bias": ("Qwen2Config", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=192,
                                       tie_word_embeddings=False, max_position_embeddings=256,
                                       rms_norm_eps=1e-6, rope_theta=1000000.0, bos_token_id=1,
                                       eos_token_id=2, use_sliding_window=False), torch.bfloat16),
    "qwen3_qknorm": ("Qwen3Config", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                         vocab_size=160, tie_word_embeddings=True, max_position_embeddings=256,
                                         rms_norm_eps=1e-6, rope_theta=1000000.0, bos_token_id=1,
                                         eos_token_id=2, use_sliding_window=False), torch.bfloat16),
    "mistral_swa": ("MistralConfig", dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=1, vocab_size=128,
                                          tie_word_embeddings=False, max_position_embeddings=256,
                                          rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=8,
                                          bos_token_id=1, eos_token_id=2), torch.float32),
    "llama_linear_rope": ("LlamaConfig", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                              num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                              tie_word_embeddings=True, max_position_embeddings=256,
                                              rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1,
                                              eos_token_id=2, rope_scaling=dict(rope_type="linear", factor=2.0)),
                          torch.bfloat16),
    "qwen2_yarn_rope": ("Qwen2Config", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                            tie_word_embeddings=True, max_position_embeddings=256,
                                            rms_norm_eps=1e-6, rope_theta=10000.0, bos_token_id=1, eos_token_id=2,
                                            use_sliding_window=False,
                                            rope_scaling=dict(rope_type="yarn", factor=4.0,
                                                              original_max_position_embeddings=64)),
                        torch.bfloat16),
    # GeGLU MLP: gelu_pytorch_tanh(gate) * up (the engine's geglu op)
    "llama_geglu": ("LlamaConfig", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                        tie_word_embeddings=False, max_position_embeddings=256,
                                        rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=2,
                                        hidden_act="gelu_pytorch_tanh"), torch.bfloat16),
}

# Mixture-of-experts models: name -> (config class, kwargs, stored dtype). Routers and experts get the same
# spread as the other matrices; the script checks that no token's k-th and (k+1)-th router logits are near a
# tie (in the forward pass and along the greedy continuation) and that no greedy step is a near tie, trying
# further seeds otherwise, so that a last-bit difference cannot change the experts or tokens chosen.
MOE = {
    # Mixtral: every layer sparse, the top-k weights always renormalised; sliding window 8 < the 27 positions
    "mixtral_moe": ("MixtralConfig", dict(hidden_size=64, intermediate_size=48, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                          num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False,
                                          max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
                                          sliding_window=8, bos_token_id=1, eos_token_id=2), torch.float32),
    # Qwen3-MoE: q/k norm, head_dim 32 != 64 / 4, layer 1 dense (mlp_only_layers), norm_topk_prob true, tied
    "qwen3_moe_norm": ("Qwen3MoeConfig", dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                              num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                              head_dim=32, vocab_size=160, num_experts=8, num_experts_per_tok=2,
                                              norm_topk_prob=True, mlp_only_layers=[1], decoder_sparse_step=1,
                                              tie_word_embeddings=True, max_position_embeddings=256,
                                              rms_norm_eps=1e-6, rope_theta=1000000.0, bos_token_id=1,
                                              eos_token_id=2, use_sliding_window=False), torch.bfloat16),
    # Qwen3-MoE: decoder_sparse_step 2 (layers 1 and 3 sparse, 0 and 2 dense), norm_topk_prob false, k = 3 of 6
    # experts, q/k/v/o biases (attention_bias), untied head
    "qwen3_moe_step": ("Qwen3MoeConfig", dict(hidden_size=64, intermediate_size=80, moe_intermediate_size=40,
                                              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                              head_dim=16, vocab_size=128, num_experts=6, num_experts_per_tok=3,
                                              norm_topk_prob=False, decoder_sparse_step=2, attention_bias=True,
                                              tie_word_embeddings=False, max_position_embeddings=256,
                                              rms_norm_eps=1e-6, rope_theta=1000000.0, bos_token_id=1,
                                              eos_token_id=2, use_sliding_window=False), torch.bfloat16),
    # Sources of the MoE GGUF files (tests/golden/gguf/make_tiny_gguf.py), shaped as llama.cpp reads them:
    # Qwen3-MoE with every layer sparse and head_dim 16 != 32 / 4; Mixtral without a sliding window. Expert
    # rows are 32 wide so that the Q8_0 copy holds whole blocks.
    "qwen3_moe_gguf": ("Qwen3MoeConfig", dict(hidden_size=32, intermediate_size=64, moe_intermediate_size=32,
                                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                              head_dim=16, vocab_size=64, num_experts=4, num_experts_per_tok=2,
                                              norm_topk_prob=True, decoder_sparse_step=1,
                                              tie_word_embeddings=True, max_position_embeddings=256,
                                              rms_norm_eps=1e-6, rope_theta=1000000.0, bos_token_id=1,
                                              eos_token_id=2, use_sliding_window=False), torch.float32),
    "mixtral_gguf": ("MixtralConfig", dict(hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                                           num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False,
                                           max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
                                           sliding_window=None, bos_token_id=1, eos_token_id=2), torch.float32),
}

# DeepSeek-family MoE text models: name -> (config class, kwargs, stored dtype). transformers has no causal-LM
# class for DeepSeek-OCR-2's text model alone: the reference is DeepseekOcr2TextModel plus an lm_head Linear
# (what DeepseekOcr2ForConditionalGeneration runs on text), saved in the hub layout (model.layers.N.mlp.
# experts.E.{gate,up,down}_proj, mlp.gate, mlp.shared_experts) with a config.json of model_type
# deepseek_ocr2_text. Norms, biases and the routers are perturbed like the other models; the router margins
# are checked on the quantity each routing stage selects by (see routing_gaps).
DEEPSEEK = {
    # OCR-2 text: dense layers 0 and 2 among sparse 1 and 3 (mlp_layer_types), 2 shared experts (shared MLP of
    # 2 x 32), k = 3 of 8 experts by softmax, scaled by 1.5, q/k/v/o and MLP biases, untied head
    "deepseek_ocr2_greedy": ("DeepseekOcr2TextConfig", dict(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=128, n_routed_experts=8, num_experts_per_tok=3,
        n_shared_experts=2, routed_scaling_factor=1.5, topk_method="greedy",
        mlp_layer_types=["dense", "sparse", "dense", "sparse"], attention_bias=True, mlp_bias=True,
        tie_word_embeddings=False, max_position_embeddings=256, rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0), bos_token_id=1, eos_token_id=2),
        torch.bfloat16),
    # OCR-2 text: group-limited greedy (the best 2 of 4 groups by their best expert, then k = 2 of those
    # groups' experts), one shared expert, layer 0 dense, no biases
    "deepseek_ocr2_group": ("DeepseekOcr2TextConfig", dict(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=24, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=128, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=1, routed_scaling_factor=1.0, topk_method="group_limited_greedy", n_group=4,
        topk_group=2, mlp_layer_types=["dense", "sparse", "sparse"], attention_bias=False, mlp_bias=False,
        tie_word_embeddings=False, max_position_embeddings=256, rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0), bos_token_id=1, eos_token_id=2),
        torch.bfloat16),
}

# DeepSeek-V2 / V3 (multi-head latent attention), through make_moe (DeepseekV2/V3ForCausalLM, saved in the hub
# layout by save_pretrained); the V3 router's e_score_correction_bias buffer is perturbed too.
MLA = {
    # V2: q_lora (q_a, q_a_layernorm, q_b), kv_lora 24, nope 12 + rope 8 (interleaved pairs), value 10; YaRN
    # with mscale / mscale_all_dim (attention factor and softmax scale); layer 0 dense (first_k_dense_replace),
    # group-limited greedy (2 of 4 groups), k = 3 of 8, 2 shared experts, scale 1.3, attention biases
    "deepseek_v2_mla": ("DeepseekV2Config", dict(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=24, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=128, q_lora_rank=32, kv_lora_rank=24,
        qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=10, n_routed_experts=8, num_experts_per_tok=3,
        n_shared_experts=2, first_k_dense_replace=1, topk_method="group_limited_greedy", n_group=4, topk_group=2,
        routed_scaling_factor=1.3, attention_bias=True, tie_word_embeddings=False, max_position_embeddings=256,
        rms_norm_eps=1e-6, rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                                original_max_position_embeddings=64, beta_fast=32, beta_slow=1,
                                                mscale=0.707, mscale_all_dim=0.707),
        bos_token_id=1, eos_token_id=2), torch.bfloat16),
    # V3: no q_lora (q_proj), rope_interleave false (half-split pairs), sigmoid scores + correction bias,
    # noaux_tc over 4 groups keeping 2, k = 2 of 8, renormalised, scale 2.5, one shared expert, layer 0 dense
    "deepseek_v3_mla": ("DeepseekV3Config", dict(
        hidden_size=64, intermediate_size=80, moe_intermediate_size=24, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=128, q_lora_rank=None, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12, n_routed_experts=8, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, n_group=4, topk_group=2, norm_topk_prob=True,
        routed_scaling_factor=2.5, rope_interleave=False, attention_bias=False, tie_word_embeddings=False,
        max_position_embeddings=256, rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0), bos_token_id=1, eos_token_id=2),
        torch.float32),
}

# Published chat templates (as in each model's tokenizer_config.json), rendered by transformers below.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

# Llama-3.1-8B-Instruct's template (also Llama-3.3-70B-Instruct's), as in meta-llama's tokenizer_config.json.
# The Hub could not be reached and no installed package ships it: the text is reproduced from a public
# verbatim copy of that chat_template (equal character for character; the partial copies seen agree).
LLAMA31_TEMPLATE = (
    "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n"
    "{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n{%- endif %}\n"
    "{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n"
    "{#- This block extracts the system message, so we can slot it into the right place. #}\n"
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n\n"
    "{#- System message + builtin tools #}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{%- if builtin_tools is defined or tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n"
    "{%- if builtin_tools is defined %}\n"
    "    {{- \"Tools: \" + builtin_tools | reject('equalto', 'code_interpreter') | join(\", \") + \"\\n\\n\"}}\n"
    "{%- endif %}\n{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{%- if tools is not none and not tools_in_user_message %}\n"
    "    {{- \"You have access to the following functions. To call a function, please respond with JSON for a "
    "function call.\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
    "value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n    {%- endfor %}\n{%- endif %}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n\n"
    "{#- Custom tools are passed in a user message with some extra guidance #}\n"
    "{%- if tools_in_user_message and not tools is none %}\n"
    "    {#- Extract the first user message so we can plug it in here #}\n    {%- if messages | length != 0 %}\n"
    "        {%- set first_user_message = messages[0]['content']|trim %}\n        {%- set messages = messages[1:] %}\n"
    "    {%- else %}\n"
    "        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user message!\") }}\n"
    "{%- endif %}\n    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
    "    {{- \"Given the following functions, please respond with a JSON for a function call \" }}\n"
    "    {{- \"with its proper arguments that best answers the given prompt.\\n\\n\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
    "value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n    {%- endfor %}\n    {{- first_user_message + \"<|eot_id|>\"}}\n{%- endif %}\n\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' }}\n"
    "    {%- elif 'tool_calls' in message %}\n        {%- if not message.tool_calls|length == 1 %}\n"
    "            {{- raise_exception(\"This model only supports single tool-calls at once!\") }}\n        {%- endif %}\n"
    "        {%- set tool_call = message.tool_calls[0].function %}\n"
    "        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}\n"
    "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "            {{- \"<|python_tag|>\" + tool_call.name + \".call(\" }}\n"
    "            {%- for arg_name, arg_val in tool_call.arguments | items %}\n"
    "                {{- arg_name + '=\"' + arg_val + '\"' }}\n                {%- if not loop.last %}\n"
    "                    {{- \", \" }}\n                {%- endif %}\n                {%- endfor %}\n"
    "            {{- \")\" }}\n        {%- else  %}\n"
    "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "            {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n            {{- '\"parameters\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n            {{- \"}\" }}\n        {%- endif %}\n"
    "        {%- if builtin_tools is defined %}\n            {#- This means we're in ipython mode #}\n"
    "            {{- \"<|eom_id|>\" }}\n        {%- else %}\n            {{- \"<|eot_id|>\" }}\n        {%- endif %}\n"
    "    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n"
    "        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n"
    "        {%- if message.content is mapping or message.content is iterable %}\n"
    "            {{- message.content | tojson }}\n        {%- else %}\n            {{- message.content }}\n"
    "        {%- endif %}\n        {{- \"<|eot_id|>\" }}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n")
# Llama-3.2-1B/3B-Instruct's template (the same text as unsloth/Llama-3.2-3B-Instruct at revision
# 006f5dcd1393c3add266de40994ba96225e9689d, a copy of meta-llama's): the date defaults to today through
# strftime_now when the renderer defines it (transformers does), no builtin_tools, no <|eom_id|>.
LLAMA32_TEMPLATE = (
    "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n"
    "{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n"
    "        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n"
    "        {%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n"
    "{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n"
    "{#- This block extracts the system message, so we can slot it into the right place. #}\n"
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n\n"
    "{#- System message #}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{%- if tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{%- if tools is not none and not tools_in_user_message %}\n"
    "    {{- \"You have access to the following functions. To call a function, please respond with JSON for a "
    "function call.\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
    "value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n    {%- endfor %}\n{%- endif %}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n\n"
    "{#- Custom tools are passed in a user message with some extra guidance #}\n"
    "{%- if tools_in_user_message and not tools is none %}\n"
    "    {#- Extract the first user message so we can plug it in here #}\n    {%- if messages | length != 0 %}\n"
    "        {%- set first_user_message = messages[0]['content']|trim %}\n        {%- set messages = messages[1:] %}\n"
    "    {%- else %}\n"
    "        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user message!\") }}\n"
    "{%- endif %}\n    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
    "    {{- \"Given the following functions, please respond with a JSON for a function call \" }}\n"
    "    {{- \"with its proper arguments that best answers the given prompt.\\n\\n\" }}\n"
    "    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
    "value}.' }}\n"
    "    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n"
    "        {{- \"\\n\\n\" }}\n    {%- endfor %}\n    {{- first_user_message + \"<|eot_id|>\"}}\n{%- endif %}\n\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' }}\n"
    "    {%- elif 'tool_calls' in message %}\n        {%- if not message.tool_calls|length == 1 %}\n"
    "            {{- raise_exception(\"This model only supports single tool-calls at once!\") }}\n        {%- endif %}\n"
    "        {%- set tool_call = message.tool_calls[0].function %}\n"
    "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n"
    "        {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n        {{- '\"parameters\": ' }}\n"
    "        {{- tool_call.arguments | tojson }}\n        {{- \"}\" }}\n        {{- \"<|eot_id|>\" }}\n"
    "    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n"
    "        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n"
    "        {%- if message.content is mapping or message.content is iterable %}\n"
    "            {{- message.content | tojson }}\n        {%- else %}\n            {{- message.content }}\n"
    "        {%- endif %}\n        {{- \"<|eot_id|>\" }}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n")

SMOL_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "Water boils at a temperature of",
]


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def greedy(model, ids, n):
    seq = list(ids)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq])).logits[0, -1]
            seq.append(int(torch.argmax(logits)))
    return seq[len(ids):]


def greedy_cached(model, ids, n):
    """Plain argmax decoding with HF's KV cache, through EOS (no logits processors: generate()'s
    min_new_tokens would mask EOS instead of generating through it as lpo's ignore_eos does)."""
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        gen = []
        for _ in range(n):
            tok = int(torch.argmax(out.logits[0, -1]))
            gen.append(tok)
            out = model(torch.tensor([[tok]]), past_key_values=out.past_key_values, use_cache=True)
    return gen


def make_tiny(name, cls_name, kw, dtype, seed):
    out = os.path.join(HERE, name)
    os.makedirs(out, exist_ok=True)
    cfg = getattr(transformers, cls_name)(**kw)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    randomize(model, seed)
    if dtype != torch.float32:  # round the weights to the stored dtype, run in f32 with those values
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(dtype).to(torch.float32))
    model.to(dtype).save_pretrained(out, safe_serialization=True)
    # reference = HF loading the saved files in float32 (casting the model back and forth would also round
    # its non-persistent buffers such as rotary inv_freq to the stored dtype)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    for extra in ("pytorch_model.bin",):
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(3, kw["vocab_size"], (11,), generator=g).tolist()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].to(torch.float32).contiguous()
    with open(os.path.join(out, "logits.bin"), "wb") as f:
        f.write(struct.pack("<%df" % logits.numel(), *logits.flatten().tolist()))
    cont = greedy(model, ids, N_NEW)
    fx = {"input_ids": ids, "greedy": cont, "n_new": N_NEW, "logits_file": "logits.bin",
          "shape": list(logits.shape), "max_abs_logit": float(logits.abs().max()),
          "dtype": str(dtype).replace("torch.", ""), "transformers": transformers.__version__}
    with open(os.path.join(out, "fixture.json"), "w") as f:
        json.dump(fx, f, indent=1)
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    print(f"{name}: {size / 1024:.0f} KiB, max|logit| {fx['max_abs_logit']:.3f}, greedy {cont}")


class RouterMargins:
    """Smallest gap between the k-th and (k+1)-th router logits of any token, over the forward passes run while
    installed (forward hooks on every router: the module that returns router_logits first)."""

    def __init__(self, model, k):
        self.k, self.min_gap, self.hooks = k, float("inf"), []
        for name, mod in model.named_modules():
            if name.endswith(".gate") and hasattr(mod, "top_k"):
                self.hooks.append(mod.register_forward_hook(self.hook))
        assert self.hooks, "no router found"

    def hook(self, mod, args, out):
        top = torch.sort(out[0].float(), dim=-1, descending=True).values
        self.min_gap = min(self.min_gap, float((top[:, self.k - 1] - top[:, self.k]).min()))

    def remove(self):
        for h in self.hooks:
            h.remove()


def greedy_margin(model, ids, n):
    """greedy() and the smallest gap between the best and second-best logit of its steps."""
    seq, gap = list(ids), float("inf")
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(logits, 2).values
            gap = min(gap, float(top[0] - top[1]))
            seq.append(int(torch.argmax(logits)))
    return seq[len(ids):], gap


def randomize_buffers(model, seed):
    """The router score-correction biases (persistent buffers, saved with the weights) drawn like biases."""
    g = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def make_moe(name, cls_name, kw, dtype, seed):
    """A tiny MoE fixture (files as make_tiny's), saved in the hub layout (per-expert tensors: save_pretrained
    reverts transformers 5's fused experts) and checked to be so; the reference runs HF's eager experts loop.
    Seeds seed, seed + 100, ... until the router and greedy margins are clear."""
    out = os.path.join(HERE, name)
    os.makedirs(out, exist_ok=True)
    cfg = getattr(transformers, cls_name)(**kw)
    k = kw["num_experts_per_tok"]
    for attempt in range(20):
        s = seed + 100 * attempt
        torch.manual_seed(s)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
        randomize(model, s)
        randomize_buffers(model, s)
        if dtype != torch.float32:
            with torch.no_grad():
                for p in list(model.parameters()) + list(model.buffers()):
                    if p.is_floating_point() and p.dim() > 0:
                        p.copy_(p.to(dtype).to(torch.float32))
        for f in os.listdir(out):
            os.remove(os.path.join(out, f))
        model.to(dtype).save_pretrained(out, safe_serialization=True)
        model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, experts_implementation="eager",
                                                     attn_implementation="eager").eval()
        g = torch.Generator().manual_seed(s + 1)
        ids = torch.randint(3, kw["vocab_size"], (11,), generator=g).tolist()
        deepseek = hasattr(cfg, "n_routed_experts")
        margins = RoutingMargins(model, model.config) if deepseek else RouterMargins(model, k)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].to(torch.float32).contiguous()
        cont, token_gap = greedy_margin(model, ids, N_NEW)
        margins.remove()
        max_abs = float(logits.abs().max())
        if margins.min_gap > 1e-3 and token_gap > 1e-3 * max_abs:
            break
        print(f"{name}: seed {s}: router margin {margins.min_gap:.2g}, greedy margin {token_gap:.2g}: next seed")
    else:
        raise SystemExit(f"{name}: no seed with clear router and greedy margins")
    from safetensors import safe_open
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        names = list(f.keys())
    assert any(".experts.0." in n for n in names) and not any("gate_up_proj" in n for n in names), \
        f"{name}: not saved in the hub layout: {names[:8]}"
    with open(os.path.join(out, "logits.bin"), "wb") as f:
        f.write(struct.pack("<%df" % logits.numel(), *logits.flatten().tolist()))
    fx = {"input_ids": ids, "greedy": cont, "n_new": N_NEW, "logits_file": "logits.bin",
          "shape": list(logits.shape), "max_abs_logit": max_abs,
          "dtype": str(dtype).replace("torch.", ""), "transformers": transformers.__version__, "seed": s,
          "min_router_logit_gap": margins.min_gap, "min_greedy_logit_gap": token_gap}
    with open(os.path.join(out, "fixture.json"), "w") as f:
        json.dump(fx, f, indent=1)
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    print(f"{name}: {size / 1024:.0f} KiB, max|logit| {max_abs:.3f}, router margin {margins.min_gap:.3g}, "
          f"greedy {cont}")


def routing_gaps(logits, cfg, bias=None):
    """The smallest gap, over the tokens of router logits [T, E], between the last chosen and the first
    refused candidate of each selection stage of cfg's routing, on the value that stage selects by: softmax
    greedy: the logits (softmax is monotonic); group_limited_greedy: each group's best logit for the groups,
    then the logits of the kept groups' experts; sigmoid scores (noaux_tc): sigmoid(logits) + bias, groups by
    the sum of their best two, then the kept experts."""
    k, E = cfg.num_experts_per_tok, logits.shape[-1]
    method = getattr(cfg, "topk_method", None) or "greedy"
    sig = getattr(cfg, "scoring_func", None) == "sigmoid" or bias is not None
    v = logits.float()
    if sig:
        v = v.sigmoid() + (bias if bias is not None else 0)
    gap = float("inf")
    if method == "greedy" and not sig:
        top = torch.sort(v, dim=-1, descending=True).values
        return float((top[:, k - 1] - top[:, k]).min())
    g = cfg.n_group
    grouped = v.view(-1, g, E // g)
    gs = grouped.topk(2, dim=-1)[0].sum(-1) if sig else grouped.max(-1).values
    if cfg.topk_group < g:
        top = torch.sort(gs, dim=-1, descending=True).values
        gap = min(gap, float((top[:, cfg.topk_group - 1] - top[:, cfg.topk_group]).min()))
    keep = torch.zeros_like(gs).scatter_(1, gs.topk(cfg.topk_group, dim=-1)[1], 1).bool()
    masked = v.masked_fill(~keep.unsqueeze(-1).expand(-1, g, E // g).reshape(-1, E), float("-inf"))
    top = torch.sort(masked, dim=-1, descending=True).values
    if k < top.shape[-1] and bool(torch.isfinite(top[:, k]).all()):
        gap = min(gap, float((top[:, k - 1] - top[:, k]).min()))
    return gap


class RoutingMargins:
    """RouterMargins for the DeepSeek routers (routing_gaps on each router's logits)."""

    def __init__(self, model, cfg):
        self.cfg, self.min_gap, self.hooks = cfg, float("inf"), []
        for name, mod in model.named_modules():
            if name.endswith(".gate") and hasattr(mod, "top_k"):
                self.hooks.append(mod.register_forward_hook(self.hook))
        assert self.hooks, "no router found"

    def hook(self, mod, args, out):
        bias = getattr(mod, "e_score_correction_bias", None)
        self.min_gap = min(self.min_gap, routing_gaps(out[0], self.cfg, bias))

    def remove(self):
        for h in self.hooks:
            h.remove()


class TextLM(torch.nn.Module):
    """A decoder-only text model (transformers' *TextModel) with an lm_head, as a causal LM: logits of ids."""

    def __init__(self, body, hidden, vocab):
        super().__init__()
        self.model = body
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids):
        return SimpleNamespace(logits=self.lm_head(self.model(ids).last_hidden_state))


def to_hub_layout(state):
    """transformers 5's fused experts (experts.gate_up_proj [E, 2I, h], experts.down_proj [E, h, I]) back to
    the hub's per-expert tensors (experts.<e>.gate_proj / up_proj / down_proj.weight)."""
    out = {}
    for name, t in state.items():
        if name.endswith("experts.gate_up_proj"):
            pre, half = name[: -len("gate_up_proj")], t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{pre}{e}.gate_proj.weight"] = t[e, :half].contiguous()
                out[f"{pre}{e}.up_proj.weight"] = t[e, half:].contiguous()
        elif name.endswith("experts.down_proj"):
            pre = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = t[e].contiguous()
        else:
            out[name] = t.contiguous()
    return out


def from_hub_layout(tensors, state):
    """The inverse of to_hub_layout onto the names of state (a module's state_dict)."""
    out = {}
    for name, ref in state.items():
        if name.endswith("experts.gate_up_proj"):
            pre = name[: -len("gate_up_proj")]
            out[name] = torch.stack([torch.cat([tensors[f"{pre}{e}.gate_proj.weight"],
                                                tensors[f"{pre}{e}.up_proj.weight"]]) for e in range(ref.shape[0])])
        elif name.endswith("experts.down_proj"):
            pre = name[: -len("down_proj")]
            out[name] = torch.stack([tensors[f"{pre}{e}.down_proj.weight"] for e in range(ref.shape[0])])
        else:
            out[name] = tensors[name]
    return out


def make_deepseek_text(name, cls_name, kw, dtype, seed):
    """A tiny DeepSeek-OCR-2 text model (TextLM over DeepseekOcr2TextModel, eager experts and attention) saved
    in the hub layout with safetensors; the reference reloads those files (bf16 values, run in f32) into a
    fresh model. Seeds seed, seed + 100, ... until the routing and greedy margins are clear."""
    from safetensors.torch import load_file, save_file
    out = os.path.join(HERE, name)
    os.makedirs(out, exist_ok=True)
    cfg = getattr(transformers, cls_name)(**kw)
    cfg._experts_implementation = "eager"
    cfg._attn_implementation = "eager"
    body_cls = transformers.DeepseekOcr2TextModel

    def build():
        return TextLM(body_cls(cfg), cfg.hidden_size, cfg.vocab_size).to(torch.float32).eval()

    for attempt in range(20):
        s = seed + 100 * attempt
        torch.manual_seed(s)
        model = build()
        randomize(model, s)
        for f in os.listdir(out):
            os.remove(os.path.join(out, f))
        hub = {n: t.to(dtype) for n, t in to_hub_layout(model.state_dict()).items()}
        save_file(hub, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        model = build()
        loaded = {n: t.to(torch.float32) for n, t in load_file(os.path.join(out, "model.safetensors")).items()}
        model.load_state_dict(from_hub_layout(loaded, model.state_dict()), strict=True)
        g = torch.Generator().manual_seed(s + 1)
        ids = torch.randint(3, kw["vocab_size"], (11,), generator=g).tolist()
        margins = RoutingMargins(model, cfg)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].to(torch.float32).contiguous()
        cont, token_gap = greedy_margin(model, ids, N_NEW)
        margins.remove()
        max_abs = float(logits.abs().max())
        if margins.min_gap > 1e-3 and token_gap > 1e-3 * max_abs:
            break
        print(f"{name}: seed {s}: router margin {margins.min_gap:.2g}, greedy margin {token_gap:.2g}: next seed")
    else:
        raise SystemExit(f"{name}: no seed with clear router and greedy margins")
    conf = cfg.to_dict()
    for key in [k for k in conf if k.startswith("_")]:
        del conf[key]
    conf["dtype"] = str(dtype).replace("torch.", "")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "logits.bin"), "wb") as f:
        f.write(struct.pack("<%df" % logits.numel(), *logits.flatten().tolist()))
    fx = {"input_ids": ids, "greedy": cont, "n_new": N_NEW, "logits_file": "logits.bin",
          "shape": list(logits.shape), "max_abs_logit": max_abs,
          "dtype": str(dtype).replace("torch.", ""), "transformers": transformers.__version__, "seed": s,
          "min_router_gap": margins.min_gap, "min_greedy_logit_gap": token_gap}
    with open(os.path.join(out, "fixture.json"), "w") as f:
        json.dump(fx, f, indent=1)
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    print(f"{name}: {size / 1024:.0f} KiB, max|logit| {max_abs:.3f}, router margin {margins.min_gap:.3g}, "
          f"greedy {cont}")


def find_gguf(arg):
    for p in (arg, os.environ.get("LPO_SMOLLM2_GGUF"),
              os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"),
              os.path.join(ROOT, "models", "smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf")):
        if p and os.path.isfile(p):
            return p
    return None


def make_chat(tok):
    """One user turn (+ an optional system message) with the generation prompt, as apply_chat_template renders
    it. Llama-3.1/3.2 cases name their date: "date" null = the template's own default (3.1: 26 Jul 2024); 3.2's
    default is today (strftime_now), which cannot be stored, so its cases pass date_string and the script
    checks that leaving it out gives today's date in "%d %b %Y"."""
    users = ["Hello!", "  What is 2+2?\n", "Write a haiku about the sea.",
             "\u00a0\u3000Unicode spaces\u2009\x1f\x85"]  # Jinja's trim is Python's str.strip()
    cases = []

    def render(template, user, system=None, **kw):
        msgs = ([{"role": "system", "content": system}] if system is not None else [])
        msgs.append({"role": "user", "content": user})
        if template:
            kw["chat_template"] = template
        return tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False,
                                       bos_token="<|begin_of_text|>", **kw)

    for family, template in (("llama3", LLAMA3_TEMPLATE), ("qwen2", QWEN2_TEMPLATE), ("smollm2", None)):
        for u in users[:3]:
            cases.append({"family": family, "user": u, "text": render(template, u)})
    cases.append({"family": "llama3", "user": users[3], "text": render(LLAMA3_TEMPLATE, users[3])})
    dated = [(None, None), ("You are a pirate.", None), ("  Be brief.\n", "01 Jan 2025"), ("", None),
             (None, "09 Mar 2026")]
    for family, template in (("llama3.1", LLAMA31_TEMPLATE), ("llama3.2", LLAMA32_TEMPLATE)):
        for u in users:
            for system, date in dated:
                if family == "llama3.2" and date is None:
                    date = "26 Jul 2024"  # fixed: the template's default would be today
                kw = {"date_string": date} if date else {}
                case = {"family": family, "user": u, "system": system, "date": date,
                        "text": render(template, u, system, **kw)}
                cases.append(case)
        # the 3.2 default: strftime_now("%d %b %Y"), today's date where transformers renders it
        today = datetime.datetime.now().strftime("%d %b %Y")
        if family == "llama3.2":
            assert render(template, "Hi") == render(template, "Hi", date_string=today), "3.2 default date"
        else:
            assert render(template, "Hi") == render(template, "Hi", date_string="26 Jul 2024"), "3.1 default"
    with open(os.path.join(HERE, "chat.json"), "w") as f:
        json.dump(cases, f, indent=1)
    print(f"chat.json: {len(cases)} cases")


def make_smollm2(path):
    d, fname = os.path.split(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=fname)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=fname, dtype=torch.float32).eval()
    samples = []
    for p in SMOL_PROMPTS:
        ids = tok(p, add_special_tokens=False)["input_ids"]
        gen = greedy_cached(model, ids, 32)
        samples.append({"prompt": p, "prompt_ids": ids, "greedy": gen, "text": tok.decode(gen)})
        print(f"smollm2: {p!r} -> {tok.decode(gen)!r}")
    os.makedirs(os.path.join(HERE, "smollm2"), exist_ok=True)
    with open(os.path.join(HERE, "smollm2", "fixture.json"), "w") as f:
        json.dump({"gguf": fname, "n_new": 32, "samples": samples, "transformers": transformers.__version__},
                  f, indent=1)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--only", help="comma-separated fixture names")
    a = ap.parse_args()
    torch.set_num_threads(1)
    only = set(a.only.split(",")) if a.only else None
    for i, (name, (cls_name, kw, dtype)) in enumerate(TINY.items()):
        if only is None or name in only:
            make_tiny(name, cls_name, kw, dtype, 1000 + i)
    for i, (name, (cls_name, kw, dtype)) in enumerate(MOE.items()):
        if only is None or name in only:
            make_moe(name, cls_name, kw, dtype, 2000 + i)
    for i, (name, (cls_name, kw, dtype)) in enumerate(MLA.items()):
        if only is None or name in only:
            make_moe(name, cls_name, kw, dtype, 4000 + i)
    for i, (name, (cls_name, kw, dtype)) in enumerate(DEEPSEEK.items()):
        if only is None or name in only:
            make_deepseek_text(name, cls_name, kw, dtype, 3000 + i)
    gguf = find_gguf(a.gguf)
    if gguf and (only is None or "smollm2" in only):
        tok = make_smollm2(gguf)
        make_chat(tok)
    elif gguf and "chat" in only:  # chat.json alone: only the GGUF's tokenizer is needed
        d, fname = os.path.split(gguf)
        make_chat(AutoTokenizer.from_pretrained(d, gguf_file=fname))
    elif not gguf:
        print("SmolLM2 GGUF not found: smollm2/ and chat.json not regenerated (pass --gguf)", file=sys.stderr)


if __name__ == "__main__":
    main()
