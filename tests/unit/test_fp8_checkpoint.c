/* FP8 checkpoints (tests/golden/fp8, made by make_fp8_fixtures.py with torch float8_e4m3fn tensors):
 * per-tensor and per-channel scales (compressed-tensors) and 128x128 tiles (weight_scale_inv) load with their
 * scales; the CPU reference matches HF on the dequantized weights (logits within 1e-4 of max |logit|, 64
 * greedy tokens equal); bytes as stored include the scales; a zero, negative, NaN or infinite scale, an
 * unsupported quantization method and e5m2 tensors are refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lpo/model.h"
#include "model/safetensors.h"
#include "test_fp8_fixture.h"
#include "test_support.h"

static const char *const LAYOUTS[] = {"tensor", "channel", "block"};

static void test_cpu_matches_hf(void **state) {
    (void)state;
    for (int i = 0; i < 3; i++) {
        fp8_fixture_result r;
        fp8_fixture_run(LAYOUTS[i], "cpu", "f32", NULL, &r);
        assert_true(r.max_err_rel <= 1e-4);
        assert_int_equal(r.greedy_same, r.n_greedy);
    }
}

static void test_layouts_and_bytes(void **state) {
    (void)state;
    const lpo_dtype want[] = {LPO_DT_FP8, LPO_DT_FP8, LPO_DT_FP8_B128};
    const uint64_t n_scale[] = {1, 64, 1}; /* k_proj [64, 128]: per tensor, per row, one tile */
    for (int i = 0; i < 3; i++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/tests/golden/fp8/%s", LPO_SOURCE_DIR, LAYOUTS[i]);
        lpo_model *m = NULL;
        assert_int_equal(lpo_model_open_path(dir, &m), LPO_OK);
        const lpo_tensor *k = lpo_model_tensor(m, "model.layers.0.self_attn.k_proj.weight");
        assert_non_null(k);
        assert_int_equal(k->dtype, want[i]);
        assert_int_equal(k->n_scale, n_scale[i]);
        const lpo_tensor *d = lpo_model_tensor(m, "model.layers.1.mlp.down_proj.weight"); /* [128, 320] */
        assert_int_equal(d->n_scale, i == 2 ? 3 : i == 1 ? 128 : 1);
        /* the companions are not tensors of the model */
        assert_null(lpo_model_tensor(m, "model.layers.0.self_attn.k_proj.weight_scale"));
        assert_null(lpo_model_tensor(m, "model.layers.0.self_attn.k_proj.input_scale"));
        lpo_param_summary p;
        assert_int_equal(lpo_model_param_summary(m, &p), LPO_OK);
        uint64_t fp8 = 0, scales = 0;
        for (size_t t = 0; t < lpo_model_n_tensors(m); t++) {
            const lpo_tensor *x = lpo_model_tensor_at(m, t);
            if (x->dtype == want[i]) fp8 += lpo_tensor_numel(x), scales += x->n_scale * 4;
        }
        assert_int_equal(p.bytes_by_dtype[want[i]], fp8 + scales);
        /* the dequantized values: fp8 x scale */
        float *v = malloc(lpo_tensor_numel(d) * sizeof(float));
        assert_int_equal(lpo_model_tensor_f32(m, d, v), LPO_OK);
        const float s0 = d->scale[0];
        assert_true(v[0] == lpo_fp8_e4m3_to_f32(((const uint8_t *)d->data)[0]) * s0);
        free(v);
        lpo_model_close(m);
    }
}

/* A copy of the channel fixture in a temporary folder, with its config and one scale edited. */
static char *copy_fixture(const char *config_edit_from, const char *config_edit_to, float scale,
                          int set_scale) {
    char *dir = lpo_test_tmpdir(), src[1024], dst[1200];
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors"};
    for (int f = 0; f < 3; f++) {
        snprintf(src, sizeof src, "%s/tests/golden/fp8/channel/%s", LPO_SOURCE_DIR, files[f]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[f]);
        char *text;
        size_t len;
        assert_int_equal(lpo_read_file(src, &text, &len), LPO_OK);
        if (f == 0 && config_edit_from) {
            char *at = NULL; /* the last occurrence (the weights' group follows input_activations) */
            for (char *q = strstr(text, config_edit_from); q; q = strstr(q + 1, config_edit_from)) at = q;
            assert_non_null(at);
            const size_t a = (size_t)(at - text), fl = strlen(config_edit_from), tl = strlen(config_edit_to);
            char *t2 = malloc(len - fl + tl + 1);
            memcpy(t2, text, a);
            memcpy(t2 + a, config_edit_to, tl);
            memcpy(t2 + a + tl, text + a + fl, len - a - fl);
            len = len - fl + tl;
            free(text);
            text = t2;
        }
        if (f == 2 && set_scale) { /* scale 5 of the layer-1 down projection */
            lpo_st_header h;
            assert_int_equal(lpo_safetensors_parse((const uint8_t *)text, len, src, &h), LPO_OK);
            for (size_t i = 0; i < h.n_tensors; i++)
                if (!strcmp(h.tensors[i].name, "model.layers.1.mlp.down_proj.weight_scale"))
                    memcpy(text + h.data_offset + h.tensors[i].begin + 5 * 4, &scale, 4);
            lpo_st_header_free(&h);
        }
        FILE *fp = fopen(dst, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(text, 1, len, fp), len);
        fclose(fp);
        free(text);
    }
    return dir;
}

static void test_refusals(void **state) {
    (void)state;
    const float bad[] = {0.0f, -0.5f, NAN, INFINITY};
    const char *words[] = {"zero", "negative", "NaN", "infinite"};
    for (int i = 0; i < 4; i++) {
        char *dir = copy_fixture(NULL, NULL, bad[i], 1);
        lpo_model *m = NULL;
        assert_int_equal(lpo_model_open_path(dir, &m), LPO_E_FORMAT);
        assert_non_null(strstr(lpo_last_error(), "model.layers.1.mlp.down_proj.weight"));
        assert_non_null(strstr(lpo_last_error(), words[i]));
        printf("refused: %s\n", lpo_last_error());
        free(dir);
    }
    char *dir = copy_fixture("\"compressed-tensors\"", "\"awq\"", 0, 0);
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_path(dir, &m), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "'awq'"));
    printf("refused: %s\n", lpo_last_error());
    free(dir);
    dir = copy_fixture("\"num_bits\": 8", "\"num_bits\": 4", 0, 0);
    assert_int_equal(lpo_model_open_path(dir, &m), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "4-bit"));
    printf("refused: %s\n", lpo_last_error());
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_matches_hf),
        cmocka_unit_test(test_layouts_and_bytes),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
