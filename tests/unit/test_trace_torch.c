/* Unit tests for the PyTorch operator table (src/probe/trace_torch.c) on recorded NVTX ranges carrying the
 * strings PyTorch's NVTX emission pushes with record_shapes ("aten::mm, seq = 5, op_id = 12, sizes = [[8,
 * 4096], [4096, 11008]]", torch/csrc/profiler/util.cpp getNvtxStr), the shim's module ranges and the
 * program's phase ranges, no GPU needed: attribution to the innermost operator, phases, calls, FLOPs from
 * the shapes (matmul 2mnk exactly, attention, convolution with its output from the next operator, norms,
 * elementwise), data types from kernel names, MFU/MBU/bound against given peaks, modules, the files and the
 * summary section, and a trace without operators (no operator files). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/report.h"
#include "lpo/trace.h"
#include "probe/trace_format.h"
#include "test_support.h"
#include "test_trace_support.h"

/* ---- a small writer of ranges and kernels ---- */
typedef struct {
    lpo_raw_writer w;
    uint32_t next_str, corr;
    uint64_t next_id;
} tw;

static uint32_t s_(tw *t, const char *s) {
    lpo_raw_put(&t->w, LPO_REC_STRING, ++t->next_str, s, strlen(s) + 1);
    return t->next_str;
}

/* Opens a range at us (parent: range id, 0 none); returns its id. */
static uint64_t push(tw *t, const char *name, uint64_t parent, uint64_t us) {
    lpo_raw_range_begin b = {
        .ts = us * 1000, .id = ++t->next_id, .parent = parent, .tid = 5, .name = s_(t, name)};
    lpo_raw_put(&t->w, LPO_REC_RANGE_BEGIN, 0, &b, sizeof b);
    return b.id;
}

static void pop(tw *t, uint64_t id, uint64_t us) {
    lpo_raw_range_end e = {.ts = us * 1000, .id = id, .tid = 5};
    lpo_raw_put(&t->w, LPO_REC_RANGE_END, 0, &e, sizeof e);
}

/* A kernel launched inside range `in` (0: none) running [s_us, e_us). */
static void kern(tw *t, const char *name, uint64_t in, uint64_t s_us, uint64_t e_us) {
    const uint32_t c = ++t->corr;
    if (in) {
        lpo_raw_launch l = {c, 0, in};
        lpo_raw_put(&t->w, LPO_REC_LAUNCH, 0, &l, sizeof l);
    }
    lpo_raw_kernel k = {
        .start = s_us * 1000, .end = e_us * 1000, .corr = c, .name = s_(t, name), .stream = 7};
    lpo_raw_put(&t->w, LPO_REC_KERNEL, 0, &k, sizeof k);
}

static const char *const GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64";

/* Phase decode: module mlp { linear -> mm (gemm 100 us), silu (10 us) }, add in fp32 (10 us), attention
 * sdpa -> flash -> _flash_attention_forward (40 us). Phase prefill: mm twice (200 us + 100 us) and a kernel
 * outside any operator (10 us). Phase vision: conv2d -> cudnn_convolution (30 us), then its bias add_ (5 us)
 * whose first input is the convolution's output [2, 16, 16, 16]. */
static void write_trace(const char *dir) {
    tw t = {0};
    lpo_raw_header h;
    lpo_raw_header_init(&h, 55);
    assert_int_equal(lpo_raw_open(&t.w, test_path_in(dir, "trace-55.lpot"), &h, 1 << 16), 0);
    uint64_t ph = push(&t, "decode", 0, 0);
    uint64_t mod = push(&t, "module:model.layers.0.mlp|LlamaMLP", ph, 10);
    uint64_t lin = push(&t,
                        "aten::linear, op_id = 10, sizes = [[1, 8, 4096], [11008, 4096], []], input_op_ids = "
                        "[(9,0), (3,0)]",
                        mod, 20);
    uint64_t mm = push(&t, "aten::mm, seq = 5, op_id = 12, sizes = [[8, 4096], [4096, 11008]]", lin, 30);
    kern(&t, GEMM, mm, 40, 140);
    pop(&t, mm, 100);
    pop(&t, lin, 200);
    uint64_t si = push(&t, "aten::silu, op_id = 13, sizes = [[1, 8, 11008]]", mod, 205);
    kern(&t, "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel<c10::BFloat16>>", si,
         210, 220);
    pop(&t, si, 215);
    pop(&t, mod, 500);
    uint64_t ad =
        push(&t, "aten::add, seq = 7, op_id = 14, sizes = [[1, 8, 4096], [1, 8, 4096], []]", ph, 510);
    kern(&t, "void at::native::elementwise_kernel<128, 2, at::native::CUDAFunctor_add<float>>", ad, 520, 530);
    pop(&t, ad, 515);
    uint64_t sd =
        push(&t,
             "aten::scaled_dot_product_attention, op_id = 15, sizes = [[1, 32, 8, 128], [1, 8, 40, 128], "
             "[1, 8, 40, 128], [], [], []]",
             ph, 600);
    uint64_t fl =
        push(&t,
             "aten::_scaled_dot_product_flash_attention, op_id = 16, sizes = [[1, 32, 8, 128], [1, 8, "
             "40, 128], [1, 8, 40, 128], [], [], [], []]",
             sd, 601);
    uint64_t ff =
        push(&t,
             "aten::_flash_attention_forward, op_id = 17, sizes = [[1, 8, 32, 128], [1, 40, 8, 128], [1, "
             "40, 8, 128], [], [], [], [], [], [], [], []]",
             fl, 602);
    kern(&t, "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 32, 4, cutlass::bfloat16_t>>", ff, 610,
         650);
    pop(&t, ff, 605);
    pop(&t, fl, 606);
    pop(&t, sd, 607);
    pop(&t, ph, 1000);
    ph = push(&t, "prefill", 0, 1000);
    mm = push(&t, "aten::mm, op_id = 20, sizes = [[64, 4096], [4096, 4096]]", ph, 1010);
    kern(&t, GEMM, mm, 1020, 1220);
    pop(&t, mm, 1015);
    mm = push(&t, "aten::mm, op_id = 21, sizes = [[64, 4096], [4096, 4096]]", ph, 1300);
    kern(&t, GEMM, mm, 1310, 1410);
    pop(&t, mm, 1305);
    kern(&t, "my_kernel", ph, 1500, 1510);
    pop(&t, ph, 2000);
    ph = push(&t, "vision", 0, 2000);
    uint64_t cv =
        push(&t, "aten::conv2d, op_id = 30, sizes = [[2, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], []]",
             ph, 2010);
    uint64_t cu =
        push(&t,
             "aten::cudnn_convolution, op_id = 31, sizes = [[2, 3, 32, 32], [16, 3, 3, 3], [], [], [], "
             "[], [], [], []]",
             cv, 2011);
    kern(&t, "cudnn_infer_ampere_scudnn_128x32_relu_small_nn_v1", cu, 2020, 2050);
    pop(&t, cu, 2015);
    uint64_t ba = push(&t, "aten::add_, op_id = 32, sizes = [[2, 16, 16, 16], [1, 16, 1, 1], []]", cv, 2016);
    kern(&t, "void at::native::elementwise_kernel<128, 2, at::native::CUDAFunctor_add<float>>", ba, 2050,
         2055);
    pop(&t, ba, 2017);
    pop(&t, cv, 2018);
    pop(&t, ph, 3000);
    assert_int_equal(lpo_raw_close(&t.w), 0);
}

static void test_operators(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    write_trace(dir);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    assert_int_equal(lpo_trace_has_torch_ops(t), 1);
    lpo_trace_peaks pk = {.bf16_tflops = 1000,
                          .fp16_tflops = 1000,
                          .fp32_tflops = 60,
                          .fp8_tflops = 2000,
                          .vector_tflops = 60,
                          .dram_gbs = 3350};
    snprintf(pk.label, sizeof pk.label, "Peaks: test.");
    lpo_table *ot = NULL, *mt = NULL;
    assert_int_equal(lpo_trace_torch_tables(t, &pk, &ot, &mt), LPO_OK);
    cJSON *rows = test_table_rows(ot);

    cJSON *mm = test_row_where(rows, "phase", "decode", "op", "aten::mm");
    assert_int_equal((int)test_num(mm, "calls"), 1);
    assert_true(test_num(mm, "flops") == 2.0 * 8 * 4096 * 11008); /* 2mnk exactly */
    assert_true(test_num(mm, "bytes") == (8.0 * 4096 + 4096.0 * 11008 + 8.0 * 11008) * 2);
    assert_string_equal(test_str(mm, "family"), "matmul");
    assert_string_equal(test_str(mm, "dtype"), "bf16");
    assert_string_equal(test_str(mm, "bound"), "memory");
    assert_true(fabs(test_num(mm, "gpu_ms") - 0.1) < 1e-12);
    assert_true(fabs(test_num(mm, "mfu_pct") - 100.0 * 2.0 * 8 * 4096 * 11008 / 1e-4 / 1e15) < 1e-9);
    assert_true(fabs(test_num(mm, "mbu_pct") -
                     100.0 * (8.0 * 4096 + 4096.0 * 11008 + 8.0 * 11008) * 2 / 1e-4 / 3350e9) < 1e-9);
    assert_true(fabs(test_num(mm, "share_pct") - 100.0 * 100 / 160) < 1e-9); /* of decode's 160 us */
    assert_string_equal(test_str(mm, "shapes"), "[[8, 4096], [4096, 11008]]");

    cJSON *si = test_row_where(rows, "phase", "decode", "op", "aten::silu");
    assert_true(test_num(si, "flops") == 8.0 * 11008);
    assert_true(test_num(si, "bytes") == 2.0 * 8 * 11008 * 2);
    assert_string_equal(test_str(si, "family"), "elementwise");
    cJSON *ad = test_row_where(rows, "phase", "decode", "op", "aten::add");
    assert_string_equal(test_str(ad, "dtype"), "fp32"); /* from CUDAFunctor_add<float>: 4-byte elements */
    assert_true(test_num(ad, "bytes") == 3.0 * 8 * 4096 * 4);
    cJSON *fa = test_row_where(rows, "phase", "decode", "op", "aten::_flash_attention_forward");
    assert_string_equal(test_str(fa, "family"), "attention");
    assert_true(test_num(fa, "flops") == 2.0 * 1 * 32 * 8 * 40 * (128 + 128)); /* (B, L, H, E) layout */
    assert_true(fabs(test_num(fa, "gpu_ms") - 0.04) < 1e-12);

    cJSON *pm = test_row_where(rows, "phase", "prefill", "op", "aten::mm");
    assert_int_equal((int)test_num(pm, "calls"), 2);
    assert_true(test_num(pm, "flops") == 2 * 2.0 * 64 * 4096 * 4096);
    assert_true(fabs(test_num(pm, "mean_us") - 150.0) < 1e-9);
    cJSON *no = test_row_where(rows, "phase", "prefill", "op", "(no operator)");
    assert_true(fabs(test_num(no, "gpu_ms") - 0.01) < 1e-12);
    assert_false(cJSON_IsNumber(cJSON_GetObjectItem(no, "flops")));

    cJSON *cv = test_row_where(rows, "phase", "vision", "op", "aten::cudnn_convolution");
    assert_string_equal(test_str(cv, "family"), "conv");
    assert_true(test_num(cv, "flops") == 2.0 * 2 * 16 * 16 * 16 * 3 * 3 * 3); /* 2 N O H'W' C/g kh kw */
    assert_string_equal(test_str(cv, "dtype"), "fp32");                       /* scudnn: single precision */
    cJSON *ba = test_row_where(rows, "phase", "vision", "op", "aten::add_");
    assert_true(test_num(ba, "flops") == 2.0 * 16 * 16 * 16);
    /* rows: phases in order of appearance, then by GPU time */
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 0), "op"), "aten::mm");
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 0), "phase"), "decode");
    cJSON_Delete(rows);

    rows = test_table_rows(mt);
    assert_int_equal(cJSON_GetArraySize(rows), 1);
    cJSON *m = cJSON_GetArrayItem(rows, 0);
    assert_string_equal(test_str(m, "module"), "model.layers.0.mlp");
    assert_string_equal(test_str(m, "class"), "LlamaMLP");
    assert_int_equal((int)test_num(m, "calls"), 1);
    assert_true(fabs(test_num(m, "gpu_ms") - 0.11) < 1e-12);
    assert_true(test_num(m, "flops") == 2.0 * 8 * 4096 * 11008 + 8.0 * 11008);
    cJSON_Delete(rows);

    /* the files and the summary's section */
    lpo_trace_report_opts o = {.json = 0, .peaks = &pk};
    assert_int_equal(lpo_trace_write_reports(t, dir, &o, NULL), LPO_OK);
    static const char *const files[] = {"operators.csv", "operators.md", "modules.csv", "modules.md"};
    for (size_t i = 0; i < 4; i++)
        if (!lpo_path_exists(test_path_in(dir, files[i]))) fail_msg("%s was not written", files[i]);
    char *sum = NULL;
    assert_int_equal(lpo_read_file(test_path_in(dir, "summary.md"), &sum, NULL), LPO_OK);
    if (!strstr(sum, "## PyTorch operators") || !strstr(sum, "Phase decode") ||
        !strstr(sum, "aten::mm 62.5% (memory-bound)") || !strstr(sum, "Peaks: test."))
        fail_msg("summary.md:\n%s", sum);
    free(sum);
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

/* Shapes that do not parse, operators without rules and traces without operators. */
static void test_no_operators(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    tw t = {0};
    lpo_raw_header h;
    lpo_raw_header_init(&h, 56);
    assert_int_equal(lpo_raw_open(&t.w, test_path_in(dir, "trace-56.lpot"), &h, 1 << 16), 0);
    uint64_t r = push(&t, "decode_step", 0, 0);
    kern(&t, "gemv", r, 10, 20);
    pop(&t, r, 30);
    assert_int_equal(lpo_raw_close(&t.w), 0);
    lpo_trace *tr = NULL;
    if (lpo_trace_load_dir(dir, &tr)) fail_msg("%s", lpo_last_error());
    assert_int_equal(lpo_trace_has_torch_ops(tr), 0);
    lpo_trace_report_opts o = {.json = 0};
    assert_int_equal(lpo_trace_write_reports(tr, dir, &o, NULL), LPO_OK);
    assert_false(lpo_path_exists(test_path_in(dir, "operators.csv")));
    lpo_trace_free(tr);
    test_remove_tree(dir);

    /* an operator with broken sizes and one without a cost rule: rows, no FLOPs */
    char *dir2 = lpo_test_tmpdir();
    tw u = {0};
    lpo_raw_header_init(&h, 57);
    assert_int_equal(lpo_raw_open(&u.w, test_path_in(dir2, "trace-57.lpot"), &h, 1 << 16), 0);
    r = push(&u, "aten::mm, sizes = [[8, x], [", 0, 0);
    kern(&u, "gemm", r, 10, 20);
    pop(&u, r, 30);
    r = push(&u, "aten::nonzero, op_id = 3, sizes = [[100]]", 0, 40);
    kern(&u, "nonzero_kernel", r, 50, 60);
    pop(&u, r, 70);
    r = push(&u, "not an op: aten::mm", 0, 80);
    kern(&u, "k", r, 90, 95);
    pop(&u, r, 96);
    assert_int_equal(lpo_raw_close(&u.w), 0);
    if (lpo_trace_load_dir(dir2, &tr)) fail_msg("%s", lpo_last_error());
    lpo_table *ot = NULL;
    assert_int_equal(lpo_trace_torch_tables(tr, NULL, &ot, NULL), LPO_OK);
    cJSON *rows = test_table_rows(ot);
    assert_int_equal(cJSON_GetArraySize(rows), 3);
    assert_false(
        cJSON_IsNumber(cJSON_GetObjectItem(test_row_where(rows, "phase", "all", "op", "aten::mm"), "flops")));
    assert_false(cJSON_IsNumber(
        cJSON_GetObjectItem(test_row_where(rows, "phase", "all", "op", "aten::nonzero"), "flops")));
    cJSON *x = test_row_where(rows, "phase", "not an op: aten::mm", "op", "(no operator)");
    assert_string_equal(test_str(x, "bound"), "unknown");
    cJSON_Delete(rows);
    lpo_trace_free(tr);
    test_remove_tree(dir2);

    /* --capture-range=measure around "decode": the gate is not a phase */
    free(dir2);
    dir2 = lpo_test_tmpdir();
    tw g = {0};
    lpo_raw_header_init(&h, 58);
    assert_int_equal(lpo_raw_open(&g.w, test_path_in(dir2, "trace-58.lpot"), &h, 1 << 16), 0);
    const uint32_t gate = s_(&g, "measure");
    lpo_raw_put(&g.w, LPO_REC_GATE, gate, NULL, 0);
    const uint64_t me = push(&g, "measure", 0, 0), de = push(&g, "decode", me, 1);
    r = push(&g, "aten::mm, sizes = [[2, 3], [3, 4]]", de, 2);
    lpo_raw_launch la = {1, LPO_LAUNCH_GATE_OPEN, r};
    lpo_raw_put(&g.w, LPO_REC_LAUNCH, 0, &la, sizeof la);
    lpo_raw_kernel k = {.start = 3000, .end = 4000, .corr = 1, .name = s_(&g, "gemm_bf16")};
    lpo_raw_put(&g.w, LPO_REC_KERNEL, 0, &k, sizeof k);
    pop(&g, r, 5);
    pop(&g, de, 6);
    pop(&g, me, 7);
    assert_int_equal(lpo_raw_close(&g.w), 0);
    if (lpo_trace_load_dir(dir2, &tr)) fail_msg("%s", lpo_last_error());
    assert_int_equal(lpo_trace_torch_tables(tr, NULL, &ot, NULL), LPO_OK);
    rows = test_table_rows(ot);
    assert_int_equal(cJSON_GetArraySize(rows), 1);
    assert_true(test_num(test_row_where(rows, "phase", "decode", "op", "aten::mm"), "flops") ==
                2.0 * 2 * 3 * 4);
    cJSON_Delete(rows);
    lpo_trace_free(tr);
    test_remove_tree(dir2);
    free(dir);
    free(dir2);
}

/* The shim (src/probe/torch/sitecustomize.py) with a stand-in torch package: nothing before `import torch`,
 * then PyTorch's NVTX emission on with shapes, module ranges named by path, and the sitecustomize it
 * shadows still run; nothing at all without LPO_TORCH_OPS=1. */
static const char fake_torch[] = "calls = []\n"
                                 "class _P:\n"
                                 "    class ProfilerState:\n"
                                 "        NVTX = 'NVTX'\n"
                                 "    class _ExperimentalConfig:\n"
                                 "        pass\n"
                                 "    @staticmethod\n"
                                 "    def ProfilerConfig(*a):\n"
                                 "        return a\n"
                                 "    @staticmethod\n"
                                 "    def _enable_profiler(cfg, acts):\n"
                                 "        calls.append('enable %s shapes=%s' % (cfg[0], cfg[1]))\n"
                                 "    @staticmethod\n"
                                 "    def _run_on_profiler_start():\n"
                                 "        calls.append('start')\n"
                                 "class autograd:\n"
                                 "    profiler = _P\n"
                                 "class _Nvtx:\n"
                                 "    @staticmethod\n"
                                 "    def range_push(s):\n"
                                 "        calls.append('push ' + s)\n"
                                 "    @staticmethod\n"
                                 "    def range_pop():\n"
                                 "        calls.append('pop')\n"
                                 "class cuda:\n"
                                 "    nvtx = _Nvtx\n"
                                 "class _Reg:\n"
                                 "    pre = []\n"
                                 "    post = []\n"
                                 "    @staticmethod\n"
                                 "    def register_module_forward_pre_hook(h):\n"
                                 "        _Reg.pre.append(h)\n"
                                 "    @staticmethod\n"
                                 "    def register_module_forward_hook(h, always_call=False):\n"
                                 "        _Reg.post.append(h)\n"
                                 "class _Modules:\n"
                                 "    module = _Reg\n"
                                 "class nn:\n"
                                 "    modules = _Modules\n";

static const char program[] = "import sys\n"
                              "print('before', 'torch' in sys.modules)\n"
                              "import torch\n"
                              "class Child:\n"
                              "    pass\n"
                              "class Model:\n"
                              "    def __init__(self):\n"
                              "        self.c = Child()\n"
                              "    def named_modules(self):\n"
                              "        return [('', self), ('layers.0', self.c)]\n"
                              "m = Model()\n"
                              "reg = torch.nn.modules.module\n"
                              "for mod in (m, m.c):\n"
                              "    for h in reg.pre:\n"
                              "        h(mod, ())\n"
                              "for mod in (m.c, m):\n"
                              "    for h in reg.post:\n"
                              "        h(mod, (), None)\n"
                              "print('|'.join(torch.calls))\n";

static void test_shim(void **state) {
    (void)state;
    if (system("python3 -c pass >/dev/null 2>&1") != 0) skip();
    char *dir = lpo_test_tmpdir();
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/fake/torch' '%s/other'", dir, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(
        lpo_write_file(test_path_in(dir, "fake/torch/__init__.py"), fake_torch, strlen(fake_torch)), LPO_OK);
    static const char other[] = "print('shadowed sitecustomize ran')\n";
    assert_int_equal(lpo_write_file(test_path_in(dir, "other/sitecustomize.py"), other, strlen(other)),
                     LPO_OK);
    assert_int_equal(lpo_write_file(test_path_in(dir, "prog.py"), program, strlen(program)), LPO_OK);
    for (int on = 0; on < 2; on++) { /* without LPO_TORCH_OPS, then with it */
        snprintf(
            cmd, sizeof cmd,
            "cd '%s' && %s PYTHONPATH='%s/src/probe/torch:%s/other:%s/fake' python3 prog.py > out.txt 2>&1",
            dir, on ? "LPO_TORCH_OPS=1" : "", LPO_SOURCE_DIR, dir, dir);
        assert_int_equal(system(cmd), 0);
        char *out = NULL;
        assert_int_equal(lpo_read_file(test_path_in(dir, "out.txt"), &out, NULL), LPO_OK);
        if (!strstr(out, "shadowed sitecustomize ran") || !strstr(out, "before False"))
            fail_msg("shim output:\n%s", out);
        if (on &&
            !strstr(
                out,
                "start|enable NVTX shapes=True|push module:Model|Model|push module:layers.0|Child|pop|pop"))
            fail_msg("shim output:\n%s", out);
        if (!on && strstr(out, "enable")) fail_msg("shim output without LPO_TORCH_OPS:\n%s", out);
        free(out);
    }
    test_remove_tree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_operators),
        cmocka_unit_test(test_no_operators),
        cmocka_unit_test(test_shim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
