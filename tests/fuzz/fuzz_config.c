/* libFuzzer target: the YAML parser, composition, command-line overrides, interpolation, sweeps, the YAML
 * dump and the JSON writer. Input: a YAML document, then optionally a line "===" followed by one
 * override per line. The document becomes the primary config of a temporary config dir; whatever composes
 * must dump to YAML that parses back to the same dump, write balanced JSON, and its resolved dump (what a
 * run directory saves as config.yaml) must compose again to the same resolved tree.
 * Build: make fuzz; run: nice build-fuzz/tests/fuzz_config tests/fuzz/corpus/fuzz_config */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/config.h"
#include "lpo/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], redir[80];

/* The resolved dump of cfg, without runtime (it describes the process: choices come from a defaults list
 * the dump no longer has). */
static void resolved_text(const lpo_node *cfg, lpo_strbuf *out) {
    lpo_node *copy = lpo_node_clone(cfg);
    for (size_t i = 0; i < copy->n_items; i++) {
        if (copy->items[i]->key && !strcmp(copy->items[i]->key, "runtime")) {
            lpo_node_free(copy->items[i]);
            memmove(copy->items + i, copy->items + i + 1, (copy->n_items - i - 1) * sizeof *copy->items);
            copy->n_items--;
            break;
        }
    }
    lpo_cfg_dump_yaml_resolved(copy, out);
    lpo_node_free(copy);
}

/* config.yaml of a run directory composes again to the same values. */
static void check_recompose(const lpo_node *cfg) {
    lpo_strbuf a = {0}, b = {0};
    lpo_cfg_dump_yaml_resolved(cfg, &a);
    char path[128];
    snprintf(path, sizeof path, "%s/config.yaml", redir);
    if (lpo_write_file(path, a.buf, a.len) != LPO_OK) abort();
    lpo_sb_free(&a);
    const char *dirs[] = {redir};
    lpo_cfg_opts o = {.config_dirs = dirs, .n_config_dirs = 1, .command = "fuzz"};
    lpo_node *back;
    if (lpo_cfg_compose(&o, 0, NULL, &back) != LPO_OK) abort(); /* the saved config must compose */
    resolved_text(cfg, &a);
    resolved_text(back, &b);
    if (strcmp(a.buf, b.buf)) abort(); /* to the same values */
    lpo_node_free(back);
    lpo_sb_free(&a);
    lpo_sb_free(&b);
}

static void check_dump(const lpo_node *n) {
    lpo_strbuf a = {0}, b = {0};
    lpo_cfg_dump_yaml(n, &a);
    lpo_node *back;
    if (lpo_yaml_parse(a.buf, a.len, "dump", &back) != LPO_OK) abort(); /* the dump must parse */
    lpo_cfg_dump_yaml(back, &b);
    if (strcmp(a.buf, b.buf)) abort(); /* and be stable */
    lpo_json j;
    lpo_strbuf js = {0};
    lpo_json_init_buf(&j, &js, 0);
    lpo_json_node(&j, n);
    if (lpo_json_finish(&j) != LPO_OK) abort();
    lpo_sb_free(&js);
    lpo_node_free(back);
    lpo_sb_free(&a);
    lpo_sb_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/lpo-fuzz-config-%d", (int)getpid());
        snprintf(redir, sizeof redir, "%s/rerun", dir);
        lpo_mkdirs(redir);
        setenv("LPO_CONF_DIR", dir, 1);
    }
    char *text = lpo_strndup((const char *)data, size);
    if (!text) return 0;
    if (strlen(text) != size) { /* NULs: the parser takes text */
        free(text);
        return 0;
    }
    char *sep = strstr(text, "\n===\n");
    const char *ovs[16];
    size_t n_ov = 0;
    if (sep) {
        *sep = 0;
        // one override per line after the separator
        for (char *p = sep + 5; *p && n_ov < 16;) {
            char *nl = strchr(p, '\n');
            if (nl) *nl = 0;
            if (*p) ovs[n_ov++] = p;
            if (!nl) break;
            p = nl + 1;
        }
    }
    lpo_node *doc;
    if (lpo_yaml_parse(text, strlen(text), "fuzz.yaml", &doc) == LPO_OK) {
        check_dump(doc);
        lpo_node_free(doc);
        char path[128];
        snprintf(path, sizeof path, "%s/config.yaml", dir);
        if (lpo_write_file(path, text, strlen(text)) == LPO_OK) {
            char ***sets;
            size_t n_sets;
            if (lpo_cfg_sweep_expand(n_ov, ovs, 1, &sets, &n_sets) == LPO_OK) {
                lpo_cfg_opts o = {.command = "fuzz"};
                // compose at most a few sets of the sweep
                for (size_t s = 0; s < n_sets && s < 4; s++) {
                    lpo_node *cfg;
                    if (lpo_cfg_compose(&o, n_ov, (const char *const *)sets[s], &cfg) == LPO_OK) {
                        check_dump(cfg);
                        if (cfg->kind == LPO_NODE_MAP) check_recompose(cfg);
                        lpo_node_free(cfg);
                    }
                }
                lpo_cfg_sweep_free(sets, n_sets, n_ov);
            }
        }
    }
    free(text);
    return 0;
}
