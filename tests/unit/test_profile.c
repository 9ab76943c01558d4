/* Tests of lpo profile on the CPU backend: every artifact of the run directory is produced and parses;
 * metrics.json validates against docs/schemas/metrics-v1.schema.json (a JSON Schema subset checked here:
 * type, required, properties, items, enum, const, minimum); operator times add up to the engine runs
 * within 5%; MFU / MBU recomputed from the artifact's own numbers match; the timing pass's cost model of
 * packed prefill steps equals the FLOPs of the steps the engine really ran; settings errors; the
 * model=PATH shorthand. */
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

#include "lpo/profile.h"
#include "test_support.h"

/* ---- a JSON Schema subset ------------------------------------------------------------------------------ */
static int type_ok(const cJSON *v, const char *t) {
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    return 0;
}

/* Returns NULL when v satisfies schema s, else a message naming the path (static buffer). */
static const char *validate(const cJSON *v, const cJSON *s, const char *path) {
    static char msg[512];
    const cJSON *t = cJSON_GetObjectItem(s, "type");
    if (t) {
        int ok = 0;
        if (cJSON_IsString(t)) ok = type_ok(v, t->valuestring);
        const cJSON *e;
        if (cJSON_IsArray(t)) cJSON_ArrayForEach(e, t) ok |= type_ok(v, e->valuestring);
        if (!ok) {
            snprintf(msg, sizeof msg, "%s: wrong type", path);
            return msg;
        }
    }
    const cJSON *c = cJSON_GetObjectItem(s, "const");
    if (c && !cJSON_Compare(v, c, 1)) {
        snprintf(msg, sizeof msg, "%s: not the constant", path);
        return msg;
    }
    const cJSON *en = cJSON_GetObjectItem(s, "enum"), *e;
    if (en) {
        int ok = 0;
        cJSON_ArrayForEach(e, en) ok |= cJSON_Compare(v, e, 1);
        if (!ok) {
            snprintf(msg, sizeof msg, "%s: not one of the enum", path);
            return msg;
        }
    }
    const cJSON *mn = cJSON_GetObjectItem(s, "minimum");
    if (mn && cJSON_IsNumber(v) && v->valuedouble < mn->valuedouble) {
        snprintf(msg, sizeof msg, "%s: below the minimum", path);
        return msg;
    }
    if (cJSON_IsObject(v)) {
        const cJSON *req = cJSON_GetObjectItem(s, "required"), *k;
        cJSON_ArrayForEach(k, req) if (!cJSON_GetObjectItem(v, k->valuestring)) {
            snprintf(msg, sizeof msg, "%s: '%s' missing", path, k->valuestring);
            return msg;
        }
        const cJSON *props = cJSON_GetObjectItem(s, "properties"), *p;
        cJSON_ArrayForEach(p, props) {
            const cJSON *sub = cJSON_GetObjectItem(v, p->string);
            if (!sub) continue;
            char sp[256];
            snprintf(sp, sizeof sp, "%s.%s", path, p->string);
            const char *err = validate(sub, p, sp);
            if (err) return err;
        }
    }
    const cJSON *items = cJSON_GetObjectItem(s, "items");
    if (items && cJSON_IsArray(v)) {
        int i = 0;
        cJSON_ArrayForEach(e, v) {
            char sp[256];
            snprintf(sp, sizeof sp, "%s[%d]", path, i++);
            const char *err = validate(e, items, sp);
            if (err) return err;
        }
    }
    return NULL;
}

static cJSON *read_json(const char *dir, const char *name) {
    char path[1024], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lpo_read_file(path, &text, &len) != LPO_OK) fail_msg("cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    if (!j) fail_msg("%s is not JSON", path);
    free(text);
    return j;
}

static char *read_text(const char *dir, const char *name) {
    char path[1024], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lpo_read_file(path, &text, &len) != LPO_OK) fail_msg("cannot read %s", path);
    return text;
}

static double num(const cJSON *o, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = o;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save))
        v = cJSON_GetObjectItem(v, tok);
    if (!cJSON_IsNumber(v)) fail_msg("%s is not a number", path);
    return v->valuedouble;
}

/* The percentage in summary.md's "Biggest bottleneck" line ("In decode, gemm takes 68% of the time"). */
__attribute__((noinline)) static double bottleneck_pct(const char *summary) {
    double pct = -1;
    const char *big = strstr(summary, "Biggest bottleneck");
    if (big && sscanf(big, "Biggest bottleneck.** In %*s %*s takes %lf%%", &pct) != 1) pct = -1;
    return pct;
}

static void assert_rel(double got, double want, double rel) {
    if (!(fabs(got - want) <= rel * fabs(want) + 1e-300)) fail_msg("got %.17g want %.17g", got, want);
}

/* ---- the run directory --------------------------------------------------------------------------------- */
static void test_artifacts(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), cmd[1024], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "profile model=tiny dataset.n_samples=3 dataset.prompt_len=24 infer.max_new_tokens=6 "
             "infer.batch_size=2 "
             "infer.ignore_eos=true infer.threads=1 profiling.repeats=2 profiling.breakdown_decode_steps=4 "
             "'hardware.spec={fp32_tflops: 0.05, dram_tbs: 0.01}' output.dir=%s/run",
             dir);
    int rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc != 0) fail_msg("rc %d: %s", rc, err ? err : "");
    assert_non_null(strstr(out, "# Summary"));
    assert_non_null(strstr(out, "run directory:"));
    assert_null(strstr(err, "[#")); /* no progress bar when stderr is not a terminal */
    free(out);
    free(err);
    char run[600];
    snprintf(run, sizeof run, "%s/run", dir);

    /* every artifact exists and parses */
    const char *json_files[] = {"metrics.json", "static_compute.json", "operators.json", "env.json"};
    for (size_t i = 0; i < sizeof json_files / sizeof json_files[0]; i++)
        cJSON_Delete(read_json(run, json_files[i]));
    const char *md[][2] = {{"report.md", "## Operator breakdown"},
                           {"summary.md", "Biggest bottleneck"},
                           {"operators.md", "| phase"},
                           {"static_compute.md", "## What-if"},
                           {"assumptions.md", "## Formulas"},
                           {"cmd.txt", "profile model=tiny"},
                           {"operators.csv", "phase,name,kind"},
                           {"roofline.csv", "kind,label,intensity"},
                           {"roofline.svg", "arithmetic intensity"},
                           {"breakdown.svg", "other/gaps"}};
    for (size_t i = 0; i < sizeof md / sizeof md[0]; i++) {
        char *t = read_text(run, md[i][0]);
        if (!strstr(t, md[i][1])) fail_msg("%s lacks '%s'", md[i][0], md[i][1]);
        free(t);
    }
    { /* shares are shares: the bottleneck's share of its phase, and every category row, at most 100% */
        char *t = read_text(run, "summary.md");
        const double pct = bottleneck_pct(t);
        assert_true(pct > 0 && pct <= 100);
        free(t);
        cJSON *m = read_json(run, "metrics.json");
        const char *phases[] = {"prefill", "decode"};
        for (int p = 0; p < 2; p++) {
            const cJSON *bd = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "breakdown"), phases[p]);
            const double total = num(bd, "groups_s") + num(bd, "other_s");
            double sum = 0;
            const cJSON *cats = cJSON_GetObjectItem(bd, "by_category"), *c;
            assert_non_null(cats);
            cJSON_ArrayForEach(c, cats) sum += c->valuedouble;
            assert_true(fabs(sum - total) <= 1e-9 + 1e-6 * total); /* the categories tile the phase's time */
        }
        cJSON_Delete(m);
    }
    const char *svgs[] = {"roofline.svg", "breakdown.svg"};
    for (size_t i = 0; i < 2; i++) { /* whole documents */
        char *t = read_text(run, svgs[i]);
        assert_true(!strncmp(t, "<?xml", 5));
        assert_non_null(strstr(t, "</svg>"));
        free(t);
    }
    char path[800];
    snprintf(path, sizeof path, "%s/config.yaml", run);
    lpo_node *y = NULL;
    assert_int_equal(lpo_yaml_load_file(path, &y), LPO_OK);
    lpo_node_free(y);
    /* inputs.jsonl: one JSON line per sequence per timed run: 3 samples x 2 repeats */
    char *in = read_text(run, "inputs.jsonl");
    int lines = 0;
    char *save = NULL;
    for (char *l = strtok_r(in, "\n", &save); l; l = strtok_r(NULL, "\n", &save), lines++) {
        cJSON *j = cJSON_Parse(l);
        assert_non_null(j);
        assert_true(num(j, "prompt_tokens") == 24);
        assert_true(num(j, "generated_tokens") == 6);
        cJSON_Delete(j);
    }
    assert_int_equal(lines, 6);
    free(in);

    /* metrics.json validates against its schema */
    cJSON *m = read_json(run, "metrics.json");
    cJSON *schema = read_json(LPO_SOURCE_DIR "/docs/schemas", "metrics-v1.schema.json");
    const char *why = validate(m, schema, "metrics");
    if (why) fail_msg("metrics.json does not validate: %s", why);
    cJSON_Delete(schema);

    /* operator times add up to the engine runs: groups + other/gaps (+ the profiler's own accounting) */
    const char *phases[] = {"prefill", "decode"};
    for (int p = 0; p < 2; p++) {
        char k[64];
        snprintf(k, sizeof k, "breakdown.%s", phases[p]);
        const cJSON *bd = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "breakdown"), phases[p]);
        const double run_s = num(bd, "run_s"), groups = num(bd, "groups_s"), other = num(bd, "other_s"),
                     over = num(bd, "overhead_s");
        assert_rel(groups + other + over, run_s, 1e-9);
        /* what the breakdown times is every group of every run: each operator row was timed once per run
         * of its phase, so the untimed rest (other/gaps) is only the engine's glue between groups; how big
         * that glue is on a loaded machine is scheduling noise, not something a test can hold */
        assert_true(num(bd, "runs") >= 1);
        assert_true(other >= 0 && groups > 0);
        assert_true(groups <= run_s - over + 1e-6);
        const cJSON *row;
        int rows = 0;
        cJSON *opsj = read_json(run, "operators.json");
        cJSON_ArrayForEach(row, opsj) {
            if (strcmp(cJSON_GetObjectItem(row, "phase")->valuestring, phases[p])) continue;
            rows++;
            if (num(row, "calls") != num(bd, "runs"))
                fail_msg("%s: %s timed %g times in %g runs", k, cJSON_GetObjectItem(row, "name")->valuestring,
                         num(row, "calls"), num(bd, "runs"));
        }
        cJSON_Delete(opsj);
        assert_true(rows > 0);
        double cats = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(bd, "by_category")) cats += c->valuedouble;
        assert_rel(cats, groups + other, 1e-9);
    }
    /* operators.json rows of a phase sum to its group time */
    cJSON *ops = read_json(run, "operators.json");
    double sum[2] = {0, 0};
    const cJSON *op;
    cJSON_ArrayForEach(op, ops) {
        const int p = !strcmp(cJSON_GetObjectItem(op, "phase")->valuestring, "decode");
        sum[p] += num(op, "time_ms") / 1e3;
    }
    assert_rel(sum[0], num(m, "breakdown.prefill.groups_s"), 1e-6);
    assert_rel(sum[1], num(m, "breakdown.decode.groups_s"), 1e-6);
    cJSON_Delete(ops);

    /* MFU / MBU recomputed from the artifact's own numbers */
    const double peak = num(m, "peaks.compute_tflops") * 1e12, bw = num(m, "peaks.dram_gbs") * 1e9;
    for (int p = 0; p < 2; p++) {
        const cJSON *ph = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "phases"), phases[p]);
        const double t = num(ph, "time_s");
        assert_true(t > 0);
        assert_rel(num(ph, "mfu"), num(ph, "flops") / t / peak, 1e-9);
        assert_rel(num(ph, "mbu"), num(ph, "bytes") / t / bw, 1e-9);
        assert_rel(num(ph, "achieved_tflops"), num(ph, "flops") / t / 1e12, 1e-9);
    }
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(cJSON_GetObjectItem(m, "breakdown"), "top")) {
        assert_rel(num(g, "mbu_pct"), 100 * num(g, "bytes") / (num(g, "time_ms") / 1e3) / bw, 1e-9);
        assert_rel(num(g, "gbs"), num(g, "bytes") / (num(g, "time_ms") / 1e3) / 1e9, 1e-9);
    }
    /* the workload as asked: 3 samples, batches of 2 and 1, 2 repeats; 6 tokens each (5 decode steps) */
    assert_true(num(m, "run.records") == 6);
    assert_true(num(m, "throughput.generated_tokens") == 36);
    assert_true(num(m, "phases.decode.tokens") == 30);
    assert_true(num(m, "phases.prefill.tokens") == 6 * 24);
    assert_true(num(m, "latency.tpot_ms.n") == 6);
    cJSON_Delete(m);
}

/* ---- the cost model of the timing pass equals what the engine ran ---- */
static void test_batch_cost_matches_engine(void **state) {
    (void)state;
    const char *ov[] = {"model=tiny"};
    lpo_cfg_opts co = {.command = "test"};
    lpo_node *cfg = NULL;
    assert_int_equal(lpo_cfg_compose(&co, 1, ov, &cfg), LPO_OK);
    lpo_model *mdl = NULL;
    assert_int_equal(lpo_model_open(lpo_node_at(cfg, "model"), &mdl), LPO_OK);
    const lpo_model_spec *spec = lpo_model_get_spec(mdl);
    lpo_dataset *d = NULL;
    lpo_len_dist dist = {LPO_LEN_UNIFORM, 9, 6, 12, 0};
    assert_int_equal(lpo_dataset_synthetic_lengths(2, &dist, spec->vocab_size, 3, &d), LPO_OK);
    size_t order[] = {0, 1};
    /* prefill chunks of 8 tokens: the two prompts are packed across several steps */
    lpo_engine_opts eo = {LPO_ENGINE_DEFAULTS, .backend = "cpu",     .max_seqs = 2,
                          .max_context = 64,   .max_step_tokens = 8, .n_threads = 1};
    lpo_gen_params gp = {.max_new_tokens = 4, .ignore_eos = 1};
    gp.sampling.top_p = 1; /* greedy */
    gp.sampling.repetition_penalty = 1;
    lpo_pf_opts po = {
        .warmup_runs = 0, .repeats = 1, .op_breakdown = 1, .breakdown_decode_steps = 3, .top_k = 5};
    lpo_peaks pk;
    memset(&pk, 0, sizeof pk);
    const lpo_pf_request rq = {mdl, &eo, d, order, 2,    NULL, NULL, &gp, NULL,
                               &po, &pk, 1, NULL,  NULL, NULL, NULL, -1};
    lpo_pf_result r;
    assert_int_equal(lpo_pf_run(&rq, &r), LPO_OK);
    /* the breakdown pass ran the first batch's prefill (the same packed steps) and 3 decode steps */
    double flops[2] = {0, 0};
    for (size_t i = 0; i < r.n_groups; i++) flops[r.groups[i].phase] += r.groups[i].cost.flops;
    int64_t prompt[2] = {(int64_t)d->samples[0].n_tokens, (int64_t)d->samples[1].n_tokens}, steps[2] = {3, 3};
    lpo_an_cost pre, dec;
    int64_t n_pre;
    assert_int_equal(lpo_pf_batch_cost(spec, 2, prompt, steps, 8, &r.dt, &pk, NULL, &pre, &n_pre, &dec),
                     LPO_OK);
    assert_rel(flops[0], pre.flops, 1e-12);
    assert_rel(flops[1], dec.flops, 1e-12);
    assert_int_equal(r.bd[0].steps, n_pre);
    assert_int_equal(n_pre, (prompt[0] + prompt[1] + 7) / 8);
    /* the timing pass: the same batch, 4 tokens each (3 decode steps): its phase costs are the same */
    assert_rel(r.phase[0].cost.flops, pre.flops, 1e-12);
    assert_rel(r.phase[1].cost.flops, dec.flops, 1e-12);
    assert_int_equal(r.n_records, 2);
    assert_int_equal(r.records[0].gen_tokens, 4);
    /* no peaks: no MFU / MBU, no floors */
    assert_true(r.phase[0].mfu == 0 && r.phase[1].mbu == 0);
    lpo_pf_result_free(&r);
    lpo_dataset_free(d);
    lpo_model_close(mdl);
    lpo_node_free(cfg);
}

/* ---- settings and the command line ---- */
static void test_settings(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    int rc = lpo_test_run_lpo("profile model=tiny profiling.repeats=0", &out, &err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "profiling.repeats"));
    free(out);
    free(err);
    rc = lpo_test_run_lpo("profile model=tiny profiling.progress=sometimes", &out, &err);
    assert_int_equal(rc, 2);
    free(out);
    free(err);
    /* a prompt that leaves no room to generate */
    rc = lpo_test_run_lpo("profile model=tiny dataset.prompt_len=600 infer.max_context=512", &out, &err);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "no room to generate"));
    free(out);
    free(err);
    /* model=PATH is model=hf model.path=PATH; a preset name stays a preset */
    rc = lpo_test_run_lpo("config show model=tests/golden/models/tiny-llama", &out, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "path: tests/golden/models/tiny-llama"));
    assert_non_null(strstr(out, "source: auto"));
    free(out);
    free(err);
    rc = lpo_test_run_lpo("config show model=hf:Org/Name", &out, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "path: hf:Org/Name"));
    free(out);
    free(err);
    rc = lpo_test_run_lpo("config show model=tiny", &out, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "source: synthetic"));
    free(out);
    free(err);
}

static void must_have(const char *text, const char *what, const char *file) {
    if (!strstr(text, what)) fail_msg("%s lacks '%s'", file, what);
}

/* A first run on a fresh machine (no cached ceilings: this test's own empty cache) tells the truth: no
 * advice from unknown bounds, no GPU advice on the CPU, the threads that ran, what each tok/s counts, the
 * operators summed across layers above the per-layer rows; with ceilings too low for what ran, it says so. */
static void test_first_run(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), cmd[1024], *out = NULL, *err = NULL, run[600];
    for (int low = 0; low < 2; low++) {
        if (low) assert_int_equal(lpo_test_cpu_ceilings(1.0, 0.001), LPO_OK); /* 1 MB/s of DRAM */
        snprintf(run, sizeof run, "%s/run%d", dir, low);
        snprintf(cmd, sizeof cmd,
                 "profile model=tiny dataset.n_samples=2 dataset.prompt_len=16 infer.max_new_tokens=4 "
                 "infer.threads=1 output.dir=%s",
                 run);
        const int rc = lpo_test_run_lpo(cmd, &out, &err);
        if (rc != 0) fail_msg("rc %d: %s", rc, err ? err : "");
        free(out), free(err);
        char *sum = read_text(run, "summary.md"), *rep = read_text(run, "report.md");
        must_have(sum, "plain-C reference engine", "summary.md");
        must_have(sum, "prefill included", "summary.md");
        if (strstr(sum, "tensor-core") || strstr(sum, "fp8") || strstr(sum, "CUDA graphs"))
            fail_msg("GPU advice on a CPU run:\n%s", sum);
        if (!low) {
            must_have(sum, "Unknown: no peaks for this machine (run `lpo ceilings` once)", "summary.md");
            assert_null(strstr(sum, "Check the peaks"));
        } else {
            must_have(sum, "- **Check the peaks.**", "summary.md");
            must_have(sum, "`lpo ceilings --refresh`", "summary.md");
        }
        must_have(rep, "compute dtype f32, threads 1)", "report.md");
        must_have(rep, "excludes the prefill", "report.md");
        must_have(rep, "### Top 15 operators: decode (summed across layers)", "report.md");
        must_have(rep, "| decode | layers.*.mlp.gate_up (2 layers)", "report.md");
        must_have(rep, "### Per layer: the 15 slowest operators of decode", "report.md");
        must_have(rep, "| decode | layers.1.mlp.gate_up ", "report.md");
        free(sum), free(rep);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_artifacts),
        cmocka_unit_test(test_batch_cost_matches_engine),
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_first_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
