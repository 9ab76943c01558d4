/* What a workload runs from a dataset: a subset by id list (dataset.subset), and the run order over epochs
 * (dataset.sampling: num_samples per epoch, num_epochs, randomize with a seed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/data.h"

/* ---- subset ---- */
lpo_status lpo_dataset_subset(lpo_dataset *d, const char *path) {
    char *text;
    size_t len;
    lpo_status st = lpo_read_text_file(path, &text, &len); /* lines are C strings: no NUL */
    if (st != LPO_OK) return lpo_error_context(st, "dataset.subset");
    lpo_sample *kept = calloc(d->n ? d->n : 1, sizeof *kept);
    unsigned char *used = calloc(d->n ? d->n : 1, 1);
    size_t n_kept = 0, lineno = 0;
    if (!kept || !used) st = lpo_errorf(LPO_E_NOMEM, "dataset.subset: out of memory");
    for (char *line = text; st == LPO_OK && line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        lineno++;
        char *b = line, *e = line + strlen(line);
        while (*b == ' ' || *b == '\t') b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
        *e = 0;
        if (*b && *b != '#') {
            size_t i = 0;
            while (i < d->n && strcmp(d->samples[i].id, b)) i++;
            if (i == d->n)
                st = lpo_errorf(LPO_E_FORMAT, "%s:%zu: dataset '%s' has no sample with id '%s'", path, lineno,
                                d->name, b);
            else if (used[i])
                st = lpo_errorf(LPO_E_FORMAT, "%s:%zu: id '%s' listed twice", path, lineno, b);
            else {
                used[i] = 1;
                kept[n_kept++] = d->samples[i];
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    if (st == LPO_OK && n_kept == 0) st = lpo_errorf(LPO_E_FORMAT, "%s: the subset lists no sample id", path);
    if (st != LPO_OK) {
        free(kept);
        free(used);
        return st;
    }
    for (size_t i = 0; i < d->n; i++) { /* the samples left out are released */
        if (used[i]) continue;
        free(d->samples[i].id);
        free(d->samples[i].prompt);
        free(d->samples[i].tokens);
    }
    free(d->samples);
    free(used);
    d->samples = kept;
    d->n = n_kept;
    return LPO_OK;
}

/* ---- sampling ---- */
lpo_status lpo_dataset_sampling_read(const lpo_node *cfg, lpo_dataset_sampling *o) {
    memset(o, 0, sizeof *o);
    int64_t seed = 0;
    lpo_status st;
    if ((st = lpo_cfg_int_or(cfg, "sampling.num_samples", 0, &o->num_samples)) != LPO_OK) return st;
    if ((st = lpo_cfg_int_or(cfg, "sampling.num_epochs", 1, &o->num_epochs)) != LPO_OK) return st;
    if ((st = lpo_cfg_bool_or(cfg, "sampling.randomize", 0, &o->randomize)) != LPO_OK) return st;
    if ((st = lpo_cfg_int_or(cfg, "sampling.seed", 0, &seed)) != LPO_OK) return st;
    if (o->num_samples < 0 || o->num_samples > (1 << 24))
        return lpo_errorf(LPO_E_CONFIG, "dataset.sampling.num_samples = %lld: expected 0 (all) to %d",
                          (long long)o->num_samples, 1 << 24);
    if (o->num_epochs < 1 || o->num_epochs > (1 << 20))
        return lpo_errorf(LPO_E_CONFIG, "dataset.sampling.num_epochs = %lld: expected 1 to %d",
                          (long long)o->num_epochs, 1 << 20);
    o->seed = (uint64_t)seed;
    return LPO_OK;
}

static uint64_t next_rand(uint64_t *x) { /* splitmix64 */
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

lpo_status lpo_dataset_order(const lpo_dataset *d, const lpo_dataset_sampling *s, size_t **order, size_t *n) {
    *order = NULL;
    *n = 0;
    if (!d || d->n == 0) return lpo_errorf(LPO_E_INVALID, "dataset: no samples to run");
    const size_t per = s->num_samples > 0 ? (size_t)s->num_samples : d->n;
    const size_t epochs = s->num_epochs > 0 ? (size_t)s->num_epochs : 1;
    lpo_status st = lpo_mem_check(
        (double)per * (double)epochs * sizeof(size_t) + (double)d->n * sizeof(size_t), "dataset: run order");
    if (st != LPO_OK) return st;
    size_t *o = malloc(per * epochs * sizeof *o), *perm = malloc(d->n * sizeof *perm);
    if (!o || !perm) {
        free(o);
        free(perm);
        return lpo_errorf(LPO_E_NOMEM, "dataset: out of memory");
    }
    for (size_t e = 0; e < epochs; e++) {
        for (size_t i = 0; i < d->n; i++) perm[i] = i;
        if (s->randomize) { // Fisher-Yates over perm[0..n) from (seed, epoch)
            uint64_t x = s->seed * 0xA24BAED4963EE407ull + e * 0x9FB21C651E98DF25ull + 1;
            for (size_t i = d->n - 1; i > 0; i--) {
                size_t j = (size_t)(next_rand(&x) % (uint64_t)(i + 1)), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
        }
        for (size_t k = 0; k < per; k++) o[e * per + k] = perm[k % d->n];
    }
    free(perm);
    *order = o;
    *n = per * epochs;
    return LPO_OK;
}
