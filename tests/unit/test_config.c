/* Unit tests for src/config: YAML parsing (block/flow, errors with line numbers), node ops, typed
 * accessors, composition order, every override form, interpolation, sweeps, and every error path.
 * Fixture config trees: tests/unit/data/conf1 (defaults list with _self_ last) and conf2 (_self_ first). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/config.h"
#include "lpo/core.h"
#include "test_support.h"

#define CONF1 LPO_SOURCE_DIR "/tests/unit/data/conf1"
#define CONF2 LPO_SOURCE_DIR "/tests/unit/data/conf2"

static lpo_node *parse_ok(const char *text) {
    lpo_node *n = NULL;
    lpo_status st = lpo_yaml_parse(text, strlen(text), "t.yaml", &n);
    if (st) fail_msg("parse failed: %s", lpo_last_error());
    return n;
}

static lpo_status parse_err(const char *text) {
    lpo_node *n = NULL;
    lpo_status st = lpo_yaml_parse(text, strlen(text), "t.yaml", &n);
    assert_null(n);
    return st;
}

/* Composes from conf dir `dir` (no built-in dir involvement: LPO_CONF_DIR points at the same dir). */
static lpo_status compose(const char *dir, const char *const *ov, size_t n, lpo_node **out) {
    const char *dirs[] = {dir};
    lpo_cfg_opts o = {.config_dirs = dirs, .n_config_dirs = 1, .command = "test"};
    return lpo_cfg_compose(&o, n, ov, out);
}

static lpo_node *compose_ok(const char *dir, const char *const *ov, size_t n) {
    lpo_node *cfg = NULL;
    lpo_status st = compose(dir, ov, n, &cfg);
    if (st) fail_msg("compose failed: %s", lpo_last_error());
    return cfg;
}

static void expect_compose_error(const char *dir, const char *ov, lpo_status want, const char *needle) {
    lpo_node *cfg = NULL;
    const char *o[] = {ov};
    lpo_status st = compose(dir, o, 1, &cfg);
    assert_null(cfg);
    if (st != want)
        fail_msg("override '%s': status %s, want %s (%s)", ov, lpo_status_name(st), lpo_status_name(want),
                 lpo_last_error());
    if (!strstr(lpo_last_error(), needle)) fail_msg("error '%s' lacks '%s'", lpo_last_error(), needle);
}

static const char *str_at(const lpo_node *cfg, const char *path) {
    const char *s = NULL;
    if (lpo_cfg_str(cfg, path, &s)) fail_msg("%s: %s", path, lpo_last_error());
    return s;
}

static int64_t int_at(const lpo_node *cfg, const char *path) {
    int64_t v = 0;
    if (lpo_cfg_int(cfg, path, &v)) fail_msg("%s: %s", path, lpo_last_error());
    return v;
}

/* ---- parser ------------------------------------------------------------------------------------------ */
static void test_parse_block_and_flow(void **state) {
    (void)state;
    lpo_node *n =
        parse_ok("a: 1\nb:\n  c: hello world\n  d: [1, 2, {e: 3}]\nf: 'quoted'\ng: ~\nh:\n  - x\n  - "
                 "y: 2\n");
    assert_int_equal(n->kind, LPO_NODE_MAP);
    assert_string_equal(str_at(n, "b.c"), "hello world");
    assert_int_equal(int_at(n, "b.d.1"), 2);
    assert_int_equal(int_at(n, "b.d.2.e"), 3);
    assert_int_equal(lpo_node_at(n, "f")->quoted, 1);
    assert_true(lpo_scalar_is_null(lpo_node_at(n, "g")));
    assert_string_equal(str_at(n, "h.0"), "x");
    assert_int_equal(int_at(n, "h.1.y"), 2);
    assert_null(lpo_node_at(n, "h.2"));
    assert_null(lpo_node_at(n, "b.d.x"));
    assert_null(lpo_node_at(n, "a.b"));
    assert_string_equal(lpo_node_at(n, "b.c")->origin, "t.yaml:3");
    lpo_node_free(n);
    n = parse_ok("{a: 1, b: [x, y]}");
    assert_int_equal(int_at(n, "a"), 1);
    assert_string_equal(str_at(n, "b.1"), "y");
    lpo_node_free(n);
    n = parse_ok("# only a comment\n");
    assert_int_equal(n->kind, LPO_NODE_MAP);
    assert_int_equal(n->n_items, 0);
    lpo_node_free(n);
}

static void test_parse_errors(void **state) {
    (void)state;
    assert_int_equal(parse_err("a: 1\nb: 2\na: 3\n"), LPO_E_PARSE);
    assert_non_null(strstr(lpo_last_error(), "t.yaml:3: duplicate key 'a' (first defined at t.yaml:1)"));
    assert_int_equal(parse_err("a: &x 1\nb: *x\n"), LPO_E_PARSE);
    assert_non_null(strstr(lpo_last_error(), "t.yaml:1: anchor '&x'"));
    assert_int_equal(parse_err("a: [1, 2\nb: 3\n"), LPO_E_PARSE);
    assert_non_null(strstr(lpo_last_error(), "t.yaml:"));
    assert_int_equal(parse_err("a: 1\n  b: 2\n"), LPO_E_PARSE);
    assert_non_null(strstr(lpo_last_error(), "t.yaml:2"));
    assert_int_equal(parse_err("a: 1\n---\nb: 2\n"), LPO_E_PARSE);
    assert_non_null(strstr(lpo_last_error(), "more than one YAML document"));
    assert_int_equal(parse_err("a: !!python/object x\n"), LPO_E_PARSE);
    assert_int_equal(parse_err("a.b: 1\n"), LPO_E_PARSE);
    assert_int_equal(parse_err("[1, 2]: x\n"), LPO_E_PARSE);
    /* a file that does not exist */
    lpo_node *n;
    assert_int_equal(lpo_yaml_load_file("/nonexistent/x.yaml", &n), LPO_E_IO);
}

static void test_node_ops(void **state) {
    (void)state;
    lpo_node *root = lpo_node_new(LPO_NODE_MAP, NULL, NULL);
    lpo_node *m = lpo_node_new(LPO_NODE_MAP, "m", NULL);
    lpo_node_append(root, m);
    lpo_node_append(m, lpo_node_new(LPO_NODE_SCALAR, "k", "v"));
    lpo_node *l = lpo_node_new(LPO_NODE_LIST, "l", NULL);
    for (int i = 0; i < 12; i++) {
        char b[8];
        snprintf(b, sizeof b, "%d", i * 10);
        lpo_node_append(l, lpo_node_new(LPO_NODE_SCALAR, NULL, b));
    }
    lpo_node_append(m, l);
    lpo_node *c = lpo_node_clone(root);
    lpo_node_free(root);
    assert_string_equal(str_at(c, "m.k"), "v");
    assert_int_equal(int_at(c, "m.l.11"), 110);
    assert_ptr_equal(lpo_node_child(c, "m"), lpo_node_at(c, "m"));
    assert_null(lpo_node_child(c, "zz"));
    assert_ptr_equal(lpo_node_at(c, ""), c);
    assert_null(lpo_node_at(c, "m..k"));
    lpo_node_free(c);
}

/* ---- typing and accessors ------------------------------------------------------------------------------ */
static void test_scalar_typing(void **state) {
    (void)state;
    int64_t i;
    double d;
    int b;
    assert_true(lpo_scalar_parse_int("42", &i) && i == 42);
    assert_true(lpo_scalar_parse_int("-0x10", &i) && i == -16);
    assert_true(lpo_scalar_parse_int("1_000", &i) && i == 1000);
    assert_true(lpo_scalar_parse_int("-9223372036854775808", &i) && i == INT64_MIN);
    assert_false(lpo_scalar_parse_int("9223372036854775808", &i));
    assert_false(lpo_scalar_parse_int("1.5", &i));
    assert_false(lpo_scalar_parse_int("12abc", &i));
    assert_false(lpo_scalar_parse_int("", &i));
    assert_true(lpo_scalar_parse_double("1e-3", &d) && d == 1e-3);
    assert_true(lpo_scalar_parse_double("-.inf", &d) && isinf(d) && d < 0);
    assert_true(lpo_scalar_parse_double(".nan", &d) && isnan(d));
    assert_false(lpo_scalar_parse_double("nan", &d));
    assert_false(lpo_scalar_parse_double("inf", &d));
    assert_false(lpo_scalar_parse_double("0x1p3", &d));
    assert_false(lpo_scalar_parse_double("abc", &d));
    assert_true(lpo_scalar_parse_bool("True", &b) && b == 1);
    assert_true(lpo_scalar_parse_bool("false", &b) && b == 0);
    assert_false(lpo_scalar_parse_bool("yes", &b));
}

static void test_accessors(void **state) {
    (void)state;
    lpo_node *n = parse_ok("i: 7\nf: 2.5\nb: true\ns: text\nq: '7'\nz: null\nm: {a: 1}\n");
    int64_t i;
    double d;
    int b;
    const char *s;
    assert_int_equal(lpo_cfg_int(n, "i", &i), LPO_OK);
    assert_int_equal(i, 7);
    assert_int_equal(lpo_cfg_double(n, "i", &d), LPO_OK);
    assert_true(d == 7.0);
    assert_int_equal(lpo_cfg_double(n, "f", &d), LPO_OK);
    assert_true(d == 2.5);
    assert_int_equal(lpo_cfg_bool(n, "b", &b), LPO_OK);
    assert_int_equal(b, 1);
    assert_int_equal(lpo_cfg_str(n, "i", &s), LPO_OK);
    assert_string_equal(s, "7");
    /* a quoted "7" is a string, never an int */
    assert_int_equal(lpo_cfg_int(n, "q", &i), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "'q' (t.yaml:5) must be an integer, got '7'"));
    assert_int_equal(lpo_cfg_int(n, "f", &i), LPO_E_CONFIG);
    assert_int_equal(lpo_cfg_bool(n, "s", &b), LPO_E_CONFIG);
    assert_int_equal(lpo_cfg_str(n, "m", &s), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "got a mapping"));
    assert_int_equal(lpo_cfg_int(n, "ii", &i), LPO_E_NOT_FOUND);
    assert_non_null(strstr(lpo_last_error(), "did you mean i?"));
    assert_int_equal(lpo_cfg_str(n, "z", &s), LPO_E_CONFIG);
    /* _or: missing and null give the default, a wrong type is still an error */
    assert_int_equal(lpo_cfg_int_or(n, "nope", 5, &i), LPO_OK);
    assert_int_equal(i, 5);
    assert_int_equal(lpo_cfg_str_or(n, "z", "dflt", &s), LPO_OK);
    assert_string_equal(s, "dflt");
    assert_int_equal(lpo_cfg_double_or(n, "nope", 1.5, &d), LPO_OK);
    assert_true(d == 1.5);
    assert_int_equal(lpo_cfg_bool_or(n, "nope", 1, &b), LPO_OK);
    assert_int_equal(b, 1);
    assert_int_equal(lpo_cfg_int_or(n, "s", 5, &i), LPO_E_CONFIG);
    lpo_node_free(n);
}

static void test_dump_roundtrip(void **state) {
    (void)state;
    const char *src =
        "a: 1\ns: 'true'\nq: '007'\ne: ''\nn: null\nsp: 'a: b'\nhash: 'x #y'\nl: [1, 'two', [3]]\n"
        "lm:\n  - k: 1\n    j: [x]\n  - 2\nm: {}\nel: []\nnl: \"line\\nnext\"\n"
        "dash: -5\nword: -x\n\"k: y\": 1\n\"-k\": 2\n\"~\": 3\n";
    lpo_node *n = parse_ok(src);
    lpo_strbuf sb = {0};
    lpo_cfg_dump_yaml(n, &sb);
    lpo_node *back = parse_ok(sb.buf);
    lpo_strbuf sb2 = {0};
    lpo_cfg_dump_yaml(back, &sb2);
    assert_string_equal(sb.buf, sb2.buf);
    assert_int_equal(lpo_node_at(back, "s")->quoted, 1);
    assert_string_equal(str_at(back, "q"), "007");
    assert_int_equal(lpo_cfg_int(back, "q", &(int64_t){0}), LPO_E_CONFIG);
    assert_string_equal(str_at(back, "sp"), "a: b");
    assert_string_equal(str_at(back, "hash"), "x #y");
    assert_string_equal(str_at(back, "nl"), "line\nnext");
    assert_string_equal(str_at(back, "e"), "");
    assert_int_equal(int_at(back, "lm.0.k"), 1);
    assert_string_equal(str_at(back, "lm.0.j.0"), "x");
    assert_int_equal(int_at(back, "l.2.0"), 3);
    assert_int_equal(int_at(back, "dash"), -5);
    assert_string_equal(str_at(back, "word"), "-x");
    /* keys that need quoting keep their text */
    assert_int_equal(int_at(back, "k: y"), 1);
    assert_int_equal(int_at(back, "-k"), 2);
    assert_int_equal(int_at(back, "~"), 3);
    assert_int_equal(lpo_node_at(back, "m")->kind, LPO_NODE_MAP);
    assert_int_equal(lpo_node_at(back, "el")->kind, LPO_NODE_LIST);
    lpo_sb_free(&sb);
    lpo_sb_free(&sb2);
    lpo_node_free(n);
    lpo_node_free(back);
    /* Document markers as values (the fuzzer's ` ---` aborted: "---" was written
     * plain at the start of a line and read back as a new document) */
    const char *const docs[] = {"' ---'", "'---'", "'...'", "'--- x'", "'...\t'", "[---, '...']", "k: '---'"};
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        lpo_node *d = parse_ok(docs[i]), *d2;
        lpo_strbuf a = {0}, b = {0};
        lpo_cfg_dump_yaml(d, &a);
        assert_int_equal(lpo_yaml_parse(a.buf, a.len, "dump", &d2), LPO_OK);
        lpo_cfg_dump_yaml(d2, &b);
        assert_string_equal(a.buf, b.buf);
        lpo_sb_free(&a);
        lpo_sb_free(&b);
        lpo_node_free(d);
        lpo_node_free(d2);
    }
    n = parse_ok("'---'");
    lpo_cfg_dump_yaml(n, &sb);
    assert_string_equal(sb.buf, "\"---\"\n");
    lpo_sb_free(&sb);
    lpo_node_free(n);
}

/* ---- composition ---- */
static void test_compose_defaults(void **state) {
    (void)state;
    lpo_node *cfg = compose_ok(CONF1, NULL, 0);
    /* groups mounted under their key, in defaults order, then _self_ */
    assert_string_equal(cfg->items[0]->key, "model");
    assert_string_equal(cfg->items[1]->key, "infer");
    assert_string_equal(cfg->items[2]->key, "output");
    assert_string_equal(str_at(cfg, "model.name"), "tiny");
    assert_int_equal(int_at(cfg, "infer.max_new_tokens"), 32);
    /* _self_ last: the primary's infer.temperature wins over the group's 0.7 */
    assert_string_equal(str_at(cfg, "infer.temperature"), "0.0");
    assert_int_equal(int_at(cfg, "seed"), 42);
    assert_null(lpo_node_at(cfg, "defaults"));
    assert_string_equal(str_at(cfg, "runtime.command"), "test");
    assert_string_equal(str_at(cfg, "runtime.choices.model"), "tiny");
    assert_non_null(strstr(lpo_node_at(cfg, "model.hidden")->origin, "conf1/model/tiny.yaml:3"));
    lpo_node_free(cfg);
}

static void test_compose_self_first(void **state) {
    (void)state;
    lpo_node *cfg = compose_ok(CONF2, NULL, 0);
    /* _self_ first: the group option overrides the primary's model.name, keeps its other keys */
    assert_string_equal(str_at(cfg, "model.name"), "tiny");
    assert_int_equal(int_at(cfg, "model.only_in_self"), 1);
    assert_int_equal(int_at(cfg, "model.hidden"), 64);
    lpo_node_free(cfg);
}

static void test_compose_option_defaults(void **state) {
    (void)state;
    const char *ov[] = {"model=small"};
    lpo_node *cfg = compose_ok(CONF1, ov, 1);
    /* small.yaml: defaults [base, _self_]: base's keys, overridden by small's */
    assert_string_equal(str_at(cfg, "model.name"), "small");
    assert_int_equal(int_at(cfg, "model.layers"), 4);
    assert_int_equal(int_at(cfg, "model.vocab"), 1000);
    assert_int_equal(int_at(cfg, "model.hidden"), 128);
    assert_null(lpo_node_at(cfg, "model.rope"));
    assert_string_equal(str_at(cfg, "tag"), "small-h128");
    lpo_node_free(cfg);
}

static void test_override_forms(void **state) {
    (void)state;
    const char *ov[] = {"infer.max_new_tokens=128",
                        "+extra=global",
                        "model.dims=[8,16]",
                        "+new.nested.key={a: 1, b: [x]}",
                        "++seed=7",
                        "++brand.new=hello",
                        "~infer.top_k",
                        "model.rope.theta=5e5",
                        "model.name='007'",
                        "infer.temperature=null",
                        "+flag=true",
                        "+empty=",
                        "model.dims.0=9"};
    lpo_node *cfg = compose_ok(CONF1, ov, sizeof ov / sizeof *ov);
    assert_int_equal(int_at(cfg, "infer.max_new_tokens"), 128);
    assert_int_equal(int_at(cfg, "top_level"), 1); /* extra/global.yaml: @package _global_ */
    assert_null(lpo_node_at(cfg, "extra"));
    assert_int_equal(int_at(cfg, "model.dims.0"), 9);
    assert_int_equal(int_at(cfg, "model.dims.1"), 16);
    assert_int_equal(int_at(cfg, "new.nested.key.a"), 1);
    assert_string_equal(str_at(cfg, "new.nested.key.b.0"), "x");
    assert_int_equal(int_at(cfg, "seed"), 7);
    assert_string_equal(str_at(cfg, "brand.new"), "hello");
    assert_null(lpo_node_at(cfg, "infer.top_k"));
    double d;
    assert_int_equal(lpo_cfg_double(cfg, "model.rope.theta", &d), LPO_OK);
    assert_true(d == 5e5);
    /* quoted stays a string; the reference ${model.name} sees the override */
    assert_int_equal(lpo_cfg_int(cfg, "model.name", &(int64_t){0}), LPO_E_CONFIG);
    assert_string_equal(str_at(cfg, "tag"), "007-h64");
    assert_true(lpo_scalar_is_null(lpo_node_at(cfg, "infer.temperature")));
    int b;
    assert_int_equal(lpo_cfg_bool(cfg, "flag", &b), LPO_OK);
    assert_int_equal(b, 1);
    assert_string_equal(str_at(cfg, "empty"), "");
    assert_non_null(strstr(lpo_node_at(cfg, "seed")->origin, "override '++seed=7'"));
    assert_string_equal(str_at(cfg, "runtime.choices.extra"), "global");
    lpo_node_free(cfg);
}

static void test_override_order(void **state) {
    (void)state;
    /* later overrides win; a group selection applies before key overrides whatever its position */
    const char *ov[] = {"model.hidden=1", "model.hidden=2", "model=small", "model.hidden=3"};
    lpo_node *cfg = compose_ok(CONF1, ov, 4);
    assert_string_equal(str_at(cfg, "model.name"), "small");
    assert_int_equal(int_at(cfg, "model.hidden"), 3);
    lpo_node_free(cfg);
    /* a removed group leaves references to it unresolvable... */
    const char *ov3[] = {"~output", "model=null"};
    lpo_node *bad = NULL;
    assert_int_equal(compose(CONF1, ov3, 2, &bad), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "${model.name}"));
    /* ...unless they are deleted too (key overrides apply before interpolation) */
    const char *ov4[] = {"~output", "~tag", "~layers_copy", "~dims_copy", "~model"};
    cfg = compose_ok(CONF1, ov4, 5);
    assert_null(lpo_node_at(cfg, "model"));
    assert_true(lpo_scalar_is_null(lpo_node_at(cfg, "runtime.choices.model")));
    lpo_node_free(cfg);
}

static void test_override_errors(void **state) {
    (void)state;
    expect_compose_error(CONF1, "infer.max_new_tokns=3", LPO_E_CONFIG, "did you mean infer.max_new_tokens?");
    expect_compose_error(CONF1, "modle=tiny", LPO_E_CONFIG, "did you mean model?");
    expect_compose_error(CONF1, "model=tinny", LPO_E_CONFIG,
                         "unknown model option 'tinny' (did you mean 'tiny'?)");
    expect_compose_error(CONF1, "model=zzzzzz", LPO_E_CONFIG, "options: base, small, tiny");
    expect_compose_error(CONF1, "+seed=1", LPO_E_CONFIG, "key 'seed' already exists");
    expect_compose_error(CONF1, "~nope", LPO_E_CONFIG, "cannot delete 'nope': no such key");
    expect_compose_error(CONF1, "~seed=41", LPO_E_CONFIG, "'seed' is '42', not '41'");
    expect_compose_error(CONF1, "+model=tiny", LPO_E_CONFIG, "already in the defaults list");
    expect_compose_error(CONF1, "extra=global", LPO_E_CONFIG, "add it with +extra=global");
    expect_compose_error(CONF1, "seed", LPO_E_USAGE, "has no '='");
    expect_compose_error(CONF1, "a b=1", LPO_E_USAGE, "bad character ' '");
    expect_compose_error(CONF1, "=1", LPO_E_USAGE, "empty key");
    expect_compose_error(CONF1, "model.dims=[1,2", LPO_E_USAGE, "bad value");
    expect_compose_error(CONF1, "+seed.x=1", LPO_E_CONFIG, "is not a mapping");
    expect_compose_error(CONF1, "infer.top_k=sweep(1,2)", LPO_E_USAGE, "is a sweep");
    /* a sweep missing its ')' is a typo, not silently the string "sweep(1,2" */
    expect_compose_error(CONF1, "infer.top_k=sweep(1,2", LPO_E_USAGE, "unterminated sweep(...)");
    expect_compose_error(CONF1, "model=sweep(tiny", LPO_E_USAGE, "unterminated sweep(...)");
    const char *dirs[] = {"/nonexistent-dir"};
    lpo_cfg_opts o = {.config_dirs = dirs, .n_config_dirs = 1};
    lpo_node *cfg = NULL;
    assert_int_equal(lpo_cfg_compose(&o, 0, NULL, &cfg), LPO_E_USAGE);
    assert_non_null(strstr(lpo_last_error(), "'/nonexistent-dir' does not exist"));
    const char *file_dir[] = {CONF1 "/config.yaml"};
    lpo_cfg_opts of = {.config_dirs = file_dir, .n_config_dirs = 1};
    assert_int_equal(lpo_cfg_compose(&of, 0, NULL, &cfg), LPO_E_USAGE);
    assert_non_null(strstr(lpo_last_error(), "config.yaml' is not a directory"));
    const char *d2[] = {CONF1};
    lpo_cfg_opts o2 = {.config_dirs = d2, .n_config_dirs = 1, .config_name = "missing"};
    assert_int_equal(lpo_cfg_compose(&o2, 0, NULL, &cfg), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "'missing.yaml' not found"));
}

static void test_bad_yaml_in_tree(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    char p[4200];
    snprintf(p, sizeof p, "%s/model", dir);
    assert_int_equal(lpo_mkdirs(p), LPO_OK);
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    const char *primary = "defaults:\n  - model: broken\n  - _self_\n";
    assert_int_equal(lpo_write_file(p, primary, strlen(primary)), LPO_OK);
    snprintf(p, sizeof p, "%s/model/broken.yaml", dir);
    const char *bad = "name: x\nlayers: [1, 2\n";
    assert_int_equal(lpo_write_file(p, bad, strlen(bad)), LPO_OK);
    lpo_node *cfg = NULL;
    assert_int_equal(compose(dir, NULL, 0, &cfg), LPO_E_PARSE);
    assert_non_null(strstr(lpo_last_error(), "model/broken.yaml:"));
    /* a bad defaults entry */
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    const char *twice = "defaults:\n  - _self_\n  - _self_\n";
    assert_int_equal(lpo_write_file(p, twice, strlen(twice)), LPO_OK);
    assert_int_equal(compose(dir, NULL, 0, &cfg), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "config.yaml:3: _self_ appears twice"));
    const char *bad_defaults = "defaults:\n  - [1]\n";
    assert_int_equal(lpo_write_file(p, bad_defaults, strlen(bad_defaults)), LPO_OK);
    assert_int_equal(compose(dir, NULL, 0, &cfg), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "config.yaml:2: defaults entries"));
    lpo_strbuf rm = {0};
    lpo_sb_printf(&rm, "rm -rf '%s'", dir);
    assert_int_equal(system(rm.buf), 0);
    lpo_sb_free(&rm);
    free(dir);
}

/* ---- interpolation ---- */
static lpo_node *resolve_text(const char *yaml, const char *const *ov, size_t n, lpo_status *st) {
    char *dir = lpo_test_tmpdir();
    char p[4200];
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    assert_int_equal(lpo_write_file(p, yaml, strlen(yaml)), LPO_OK);
    lpo_node *cfg = NULL;
    *st = compose(dir, ov, n, &cfg);
    remove(p);
    rmdir(dir);
    free(dir);
    return cfg;
}

/* Expansion bombs stop with a clear error (they grew to 9 GB), a package
 * header that is not a package path is refused (it made keys with empty names). */
static void test_expansion_bombs_and_packages(void **state) {
    (void)state;
    lpo_strbuf y = {0};
    lpo_sb_puts(&y, "l0: 'xxxxxxxx'\n");
    // each level doubles the text of the one before: 2^40 bytes at the top
    for (int k = 1; k <= 40; k++) lpo_sb_printf(&y, "l%d: ${l%d}${l%d}\n", k, k - 1, k - 1);
    lpo_status st;
    const double c0 = lpo_test_cpu_s();
    lpo_node *cfg = resolve_text(y.buf, NULL, 0, &st);
    assert_null(cfg);
    assert_int_equal(st, LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "expands the configuration past 32 MiB"));
    lpo_sb_free(&y);
    /* maps copied twice per level */
    lpo_sb_puts(&y, "m0: {a: 'xxxxxxxx', b: 'yyyyyyyy'}\n");
    for (int k = 1; k <= 40; k++) lpo_sb_printf(&y, "m%d:\n  a: ${m%d}\n  b: ${m%d}\n", k, k - 1, k - 1);
    cfg = resolve_text(y.buf, NULL, 0, &st);
    assert_null(cfg);
    assert_int_equal(st, LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "expands the configuration past 32 MiB"));
    assert_true(lpo_test_cpu_s() - c0 < 30); /* CPU seconds, not minutes */
    lpo_sb_free(&y);
    /* a moderate expansion (a few KiB) still resolves */
    cfg = resolve_text("a: 'abcdefgh'\nb: ${a}${a}${a}${a}\nc: ${b}${b}${b}${b}\nd:\n  x: ${c}\n  y: ${c}\n",
                       NULL, 0, &st);
    if (st) fail_msg("%s", lpo_last_error());
    assert_int_equal(strlen(str_at(cfg, "d.y")), 128);
    lpo_node_free(cfg);
    /* # @package ../../etc */
    char *dir = lpo_test_tmpdir(), p[4200];
    snprintf(p, sizeof p, "%s/grp", dir);
    assert_int_equal(lpo_mkdirs(p), LPO_OK);
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    const char *primary = "defaults:\n  - grp: evil\n  - _self_\n";
    assert_int_equal(lpo_write_file(p, primary, strlen(primary)), LPO_OK);
    const char *bad[] = {"../../etc", "a..b", ".a", "a.", "a b", "a/b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(p, sizeof p, "%s/grp/evil.yaml", dir);
        lpo_strbuf opt = {0};
        lpo_sb_printf(&opt, "# @package %s\nk: 1\n", bad[i]);
        assert_int_equal(lpo_write_file(p, opt.buf, opt.len), LPO_OK);
        lpo_sb_free(&opt);
        cfg = NULL;
        st = compose(dir, NULL, 0, &cfg);
        assert_null(cfg);
        assert_int_equal(st, LPO_E_CONFIG);
        assert_non_null(strstr(lpo_last_error(), "is not a package"));
        assert_non_null(strstr(lpo_last_error(), bad[i]));
    }
    const char *good = "# @package a.b-c.d_e\nk: 1\n";
    assert_int_equal(lpo_write_file(p, good, strlen(good)), LPO_OK);
    cfg = compose_ok(dir, NULL, 0);
    assert_int_equal(int_at(cfg, "a.b-c.d_e.k"), 1);
    lpo_node_free(cfg);
    lpo_strbuf rm = {0};
    lpo_sb_printf(&rm, "rm -rf '%s'", dir);
    assert_int_equal(system(rm.buf), 0);
    lpo_sb_free(&rm);
    free(dir);
}

static void test_interpolation(void **state) {
    (void)state;
    setenv("LPO_TEST_VAR", "from-env", 1);
    unsetenv("LPO_TEST_UNSET");
    lpo_status st;
    lpo_node *cfg = resolve_text("a: {b: 5, l: [1, 2], m: {x: 1}}\n"
                                 "whole: ${a.b}\nlist: ${a.l}\nmap: ${a.m}\n"
                                 "text: n=${a.b}/${a.l.1}\n"
                                 "env: ${env:LPO_TEST_VAR}\nenvd: ${env:LPO_TEST_UNSET,12}\n"
                                 "envq: ${env:LPO_TEST_UNSET,'x y'}\n"
                                 "nested: ${env:LPO_TEST_UNSET,${a.b}}\n"
                                 "chain: ${whole}\n"
                                 "esc: \\${a.b} costs $5\n"
                                 "t1: ${now:%Y%m%d-%H%M%S}\nt2: ${now:%Y%m%d-%H%M%S}\n"
                                 "null_ref: v=${nothing}\nnothing: null\n",
                                 NULL, 0, &st);
    if (st) fail_msg("%s", lpo_last_error());
    assert_int_equal(int_at(cfg, "whole"), 5);
    assert_int_equal(lpo_node_at(cfg, "list")->kind, LPO_NODE_LIST);
    assert_int_equal(int_at(cfg, "map.x"), 1);
    assert_string_equal(str_at(cfg, "text"), "n=5/2");
    assert_string_equal(str_at(cfg, "env"), "from-env");
    assert_int_equal(int_at(cfg, "envd"), 12);
    assert_string_equal(str_at(cfg, "envq"), "x y");
    assert_int_equal(int_at(cfg, "nested"), 5);
    assert_int_equal(int_at(cfg, "chain"), 5);
    assert_string_equal(str_at(cfg, "esc"), "${a.b} costs $5");
    assert_string_equal(str_at(cfg, "t1"), str_at(cfg, "t2"));
    assert_int_equal(strlen(str_at(cfg, "t1")), 15);
    /* ${now:...} is text even though it looks like a number */
    assert_int_equal(lpo_cfg_int(cfg, "t1", &(int64_t){0}), LPO_E_CONFIG);
    assert_string_equal(str_at(cfg, "null_ref"), "v=null");
    lpo_node_free(cfg);

    /* the override applies before interpolation */
    const char *ov[] = {"a.b=9"};
    cfg = resolve_text("a: {b: 1}\nc: ${a.b}\n", ov, 1, &st);
    assert_int_equal(st, LPO_OK);
    assert_int_equal(int_at(cfg, "c"), 9);
    lpo_node_free(cfg);

    /* no_resolve keeps the text */
    char *dir = lpo_test_tmpdir();
    char p[4200];
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    assert_int_equal(lpo_write_file(p, "a: 1\nb: ${a}\n", 13), LPO_OK);
    const char *dirs[] = {dir};
    lpo_cfg_opts o = {.config_dirs = dirs, .n_config_dirs = 1, .no_resolve = 1};
    assert_int_equal(lpo_cfg_compose(&o, 0, NULL, &cfg), LPO_OK);
    assert_string_equal(str_at(cfg, "b"), "${a}");
    assert_string_equal(str_at(cfg, "runtime.command"), "none");
    lpo_node_free(cfg);
    remove(p);
    rmdir(dir);
    free(dir);
}

static void test_interpolation_errors(void **state) {
    (void)state;
    lpo_status st;
    assert_null(resolve_text("a: ${b}\nb: ${c}\nc: ${a}\n", NULL, 0, &st));
    assert_int_equal(st, LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "interpolation cycle"));
    assert_null(resolve_text("a:\n  b: ${a}\n", NULL, 0, &st));
    assert_non_null(strstr(lpo_last_error(), "interpolation cycle"));
    assert_null(resolve_text("a: ${a}\n", NULL, 0, &st));
    assert_non_null(strstr(lpo_last_error(), "interpolation cycle"));
    assert_null(resolve_text("value: 1\na: ${valeu}\n", NULL, 0, &st));
    assert_non_null(strstr(lpo_last_error(), "key 'valeu' not found (did you mean value?)"));
    assert_null(resolve_text("a: ${env:LPO_TEST_UNSET}\n", NULL, 0, &st));
    assert_non_null(strstr(lpo_last_error(), "LPO_TEST_UNSET is not set"));
    assert_null(resolve_text("a: ${foo:bar}\n", NULL, 0, &st));
    assert_non_null(strstr(lpo_last_error(), "unknown resolver 'foo'"));
    assert_null(resolve_text("a: x${b\n", NULL, 0, &st));
    assert_non_null(strstr(lpo_last_error(), "unterminated"));
    assert_null(resolve_text("m: {x: 1}\na: pre-${m}\n", NULL, 0, &st));
    assert_non_null(strstr(lpo_last_error(), "cannot be part of a string"));
    /* empty references say so (not "interpolation cycle" / "variable  is not set") */
    assert_null(resolve_text("a: ${}\n", NULL, 0, &st));
    assert_int_equal(st, LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "empty interpolation ${} in 'a'"));
    assert_null(resolve_text("a: '${env:}'\n", NULL, 0, &st));
    assert_non_null(strstr(lpo_last_error(), "names no environment variable"));
    char longnow[700] = "a: ${now:";
    for (int i = 0; i < 150; i++) strcat(longnow, "%Y");
    strcat(longnow, "}\n");
    assert_null(resolve_text(longnow, NULL, 0, &st));
    assert_non_null(strstr(lpo_last_error(), "formats to nothing or to more than 255 bytes"));
}

/* ---- sweeps and groups ---- */
static void test_sweep_expand(void **state) {
    (void)state;
    const char *ov[] = {"a=sweep(1,2,4)", "b=x", "+c=sweep('p,q', [1,2])", "d=[5,6]"};
    char ***sets;
    size_t n;
    assert_int_equal(lpo_cfg_sweep_expand(4, ov, 0, &sets, &n), LPO_OK);
    assert_int_equal(n, 6);
    assert_string_equal(sets[0][0], "a=1");
    assert_string_equal(sets[0][1], "b=x");
    assert_string_equal(sets[0][2], "+c='p,q'");
    assert_string_equal(sets[1][2], "+c=[1,2]"); /* the last sweep varies fastest */
    assert_string_equal(sets[2][0], "a=2");
    assert_string_equal(sets[5][0], "a=4");
    assert_string_equal(sets[5][3], "d=[5,6]");
    lpo_cfg_sweep_free(sets, n, 4);
    assert_int_equal(lpo_cfg_sweep_expand(4, ov, 1, &sets, &n), LPO_OK);
    assert_int_equal(n, 12);
    assert_string_equal(sets[1][3], "d=6");
    lpo_cfg_sweep_free(sets, n, 4);
    const char *bad[] = {"a=sweep(1,,2)"};
    assert_int_equal(lpo_cfg_sweep_expand(1, bad, 0, &sets, &n), LPO_E_USAGE);
    const char *bad2[] = {"a=sweep('1,2)"};
    assert_int_equal(lpo_cfg_sweep_expand(1, bad2, 0, &sets, &n), LPO_E_USAGE);
    /* each expanded set composes */
    const char *sw[] = {"infer.top_k=sweep(1,2)"};
    assert_int_equal(lpo_cfg_sweep_expand(1, sw, 0, &sets, &n), LPO_OK);
    for (size_t s = 0; s < n; s++) {
        lpo_node *cfg = compose_ok(CONF1, (const char *const *)sets[s], 1);
        assert_int_equal(int_at(cfg, "infer.top_k"), (int64_t)s + 1);
        lpo_node_free(cfg);
    }
    lpo_cfg_sweep_free(sets, n, 1);
}

static void count_options(const char *group, const char *option, const char *path, void *ud) {
    (void)path;
    if (!strcmp(group, "model")) {
        lpo_strbuf *sb = ud;
        lpo_sb_printf(sb, "%s,", option);
    }
}

static void test_list_groups(void **state) {
    (void)state;
    const char *dirs[] = {CONF1};
    lpo_cfg_opts o = {.config_dirs = dirs, .n_config_dirs = 1};
    lpo_strbuf sb = {0};
    assert_int_equal(lpo_cfg_list_groups(&o, count_options, &sb), LPO_OK);
    /* fixture options come first in sorted order (the built-in conf/ may add more) */
    assert_non_null(strstr(sb.buf, "base,"));
    assert_non_null(strstr(sb.buf, "small,"));
    assert_non_null(strstr(sb.buf, "tiny,"));
    lpo_sb_free(&sb);
}

int main(void) {
    /* the built-in conf dir is the fixture too, so other conf/ files never change these results */
    setenv("LPO_CONF_DIR", CONF1, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_block_and_flow),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_node_ops),
        cmocka_unit_test(test_scalar_typing),
        cmocka_unit_test(test_accessors),
        cmocka_unit_test(test_dump_roundtrip),
        cmocka_unit_test(test_compose_defaults),
        cmocka_unit_test(test_compose_self_first),
        cmocka_unit_test(test_compose_option_defaults),
        cmocka_unit_test(test_override_forms),
        cmocka_unit_test(test_override_order),
        cmocka_unit_test(test_override_errors),
        cmocka_unit_test(test_bad_yaml_in_tree),
        cmocka_unit_test(test_interpolation),
        cmocka_unit_test(test_interpolation_errors),
        cmocka_unit_test(test_expansion_bombs_and_packages),
        cmocka_unit_test(test_sweep_expand),
        cmocka_unit_test(test_list_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
