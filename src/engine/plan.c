/* Execution plans (groups of consecutive ops of an op list, one launch each) and exec-mode names. A plan
 * never changes the op list: it only says which ops run as one launch, so timing, NVTX names, activation
 * reads and byte analysis can work per group. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/backend.h"

/* ---- exec modes ---- */
const char *lpo_exec_mode_name(lpo_exec_mode m) {
    return m == LPO_EXEC_EAGER ? "eager" : m == LPO_EXEC_DEBUG ? "debug" : "graph";
}

int lpo_exec_mode_parse(const char *s, lpo_exec_mode *out) {
    static const lpo_exec_mode modes[] = {LPO_EXEC_GRAPH, LPO_EXEC_EAGER, LPO_EXEC_DEBUG};
    for (size_t i = 0; s && i < sizeof modes / sizeof *modes; i++)
        if (!strcmp(s, lpo_exec_mode_name(modes[i]))) {
            *out = modes[i];
            return 1;
        }
    return 0;
}

/* ---- plans ---- */
static lpo_status plan_grow(lpo_plan *p, size_t groups, size_t names) {
    if (groups > p->cap_groups) {
        size_t c = p->cap_groups ? p->cap_groups * 2 : 64;
        while (c < groups) c *= 2;
        lpo_plan_group *g = realloc(p->groups, c * sizeof *g);
        if (!g) return lpo_errorf(LPO_E_NOMEM, "plan: cannot grow to %zu groups", c);
        p->groups = g;
        p->cap_groups = c;
    }
    if (names > p->cap_names) {
        size_t c = p->cap_names ? p->cap_names * 2 : 4096;
        while (c < names) c *= 2;
        char *n = realloc(p->names, c);
        if (!n) return lpo_errorf(LPO_E_NOMEM, "plan: cannot grow the name pool to %zu bytes", c);
        /* names are stored as offsets until the pool stops moving: re-point the groups */
        for (size_t i = 0; i < p->n_groups; i++) p->groups[i].name = n + (p->groups[i].name - p->names);
        p->names = n;
        p->cap_names = c;
    }
    return LPO_OK;
}

/* "layers.7." of a layer op's name (its length), 0 outside the blocks. */
static size_t layer_prefix(const lpo_op *op) {
    if (op->layer < 0) return 0;
    const char *dot = strchr(op->name + 7, '.'); /* "layers." then the number */
    return dot ? (size_t)(dot - op->name) + 1 : 0;
}

lpo_status lpo_plan_add(lpo_plan *p, const lpo_oplist *l, uint32_t first, uint32_t count) {
    if (count == 0 || (size_t)first + count > l->n_ops)
        return lpo_errorf(LPO_E_INTERNAL, "plan: group [%u, %u) outside the op list's %zu ops", first,
                          first + count, l->n_ops);
    /* name: the ops' names joined by '+', a shared "layers.N." prefix written once */
    size_t need = 1;
    const lpo_op *ops = l->ops + first;
    const size_t pre = layer_prefix(&ops[0]);
    int same_layer = 1;
    for (uint32_t i = 0; i < count; i++) {
        need += strlen(ops[i].name) + 1;
        same_layer &= ops[i].layer == ops[0].layer && ops[0].layer >= 0;
    }
    lpo_status st = plan_grow(p, p->n_groups + 1, p->names_len + need);
    if (st != LPO_OK) return st;
    char *dst = p->names + p->names_len;
    size_t n = 0;
    for (uint32_t i = 0; i < count; i++) {
        const char *nm = ops[i].name + (i > 0 && same_layer ? pre : 0);
        n += (size_t)snprintf(dst + n, need - n, "%s%s", i ? "+" : "", nm);
    }
    lpo_plan_group *g = &p->groups[p->n_groups++];
    g->first = first;
    g->count = count;
    g->name = dst;
    p->names_len += n + 1;
    return LPO_OK;
}

lpo_status lpo_plan_unfused(const lpo_oplist *l, lpo_plan *out) {
    out->n_groups = 0;
    out->names_len = 0;
    for (size_t i = 0; i < l->n_ops; i++) {
        lpo_status st = lpo_plan_add(out, l, (uint32_t)i, 1);
        if (st != LPO_OK) return st;
    }
    return LPO_OK;
}

lpo_status lpo_plan_check(const lpo_plan *p, const lpo_oplist *l) {
    size_t next = 0;
    for (size_t i = 0; i < p->n_groups; i++) {
        if (p->groups[i].first != next || p->groups[i].count == 0)
            return lpo_errorf(LPO_E_INTERNAL,
                              "plan: group %zu ('%s') starts at op %u where op %zu was expected", i,
                              p->groups[i].name, p->groups[i].first, next);
        next += p->groups[i].count;
    }
    if (next != l->n_ops)
        return lpo_errorf(LPO_E_INTERNAL, "plan: groups cover %zu of the op list's %zu ops", next, l->n_ops);
    return LPO_OK;
}

void lpo_plan_free(lpo_plan *p) {
    free(p->groups);
    free(p->names);
    memset(p, 0, sizeof *p);
}

/* ---- per-group costs ---- */
static int reads(const lpo_op *op, lpo_buf b) {
    for (int j = 0; j < op->n_in; j++)
        if (op->in[j].buf == b) return 1;
    return 0;
}

static int writes(const lpo_op *op, lpo_buf b) {
    for (int j = 0; j < op->n_out; j++)
        if (op->out[j].buf == b) return 1;
    return 0;
}

/* Is buffer b, as left after op index `after`, read by a later op before being overwritten? Persistent
 * results (KV cache, logits, ids) always are. */
static int live_after(const lpo_oplist *l, size_t after, lpo_buf b) {
    if (b == LPO_BUF_KV || b == LPO_BUF_LOGITS || b == LPO_BUF_IDS) return 1;
    for (size_t i = after + 1; i < l->n_ops; i++) {
        if (reads(&l->ops[i], b)) return 1;
        if (writes(&l->ops[i], b)) return 0;
    }
    return 0;
}

double lpo_plan_group_bytes(const lpo_oplist *l, const lpo_plan_group *g) {
    double bytes = 0;
    const size_t end = (size_t)g->first + g->count;
    for (size_t i = g->first; i < end; i++) {
        const lpo_op *op = &l->ops[i];
        bytes += lpo_op_bytes(op);
        if (g->count == 1) continue;
        for (int j = 0; j < op->n_in; j++) { /* produced earlier inside the group: never left the chip */
            int inside = 0;
            for (size_t k = g->first; k < i && !inside; k++) inside = writes(&l->ops[k], op->in[j].buf);
            if (inside) bytes -= lpo_op_act_bytes(op, 0, j);
        }
        for (int j = 0; j < op->n_out; j++) { /* overwritten inside the group or dead after it */
            const lpo_buf b = op->out[j].buf;
            int rewritten = 0;
            for (size_t k = i + 1; k < end && !rewritten; k++) rewritten = writes(&l->ops[k], b);
            if (rewritten || !live_after(l, end - 1, b)) bytes -= lpo_op_act_bytes(op, 1, j);
        }
    }
    return bytes;
}

double lpo_plan_group_flops(const lpo_oplist *l, const lpo_plan_group *g) {
    double f = 0;
    for (size_t i = g->first; i < (size_t)g->first + g->count; i++) f += lpo_op_flops(&l->ops[i]);
    return f;
}
