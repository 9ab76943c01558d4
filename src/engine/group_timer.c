/* Exclusive times of an engine's plan groups as its steps run (engine.h, "timing plan groups"): the group
 * callback brackets every group with a pair of marks (device events on a GPU, the monotonic clock on a
 * synchronous backend) taken from a ring of LPO_BACKEND_MARKS / 2 pairs. A pair is read back, which waits
 * for its end mark, only when the ring needs its slot or at lpo_group_timer_flush, so a GPU running an
 * eager step is not synchronised after each group. The caller's tag function runs on the host after each
 * group's end mark (while a device runs the next launches). The timer's overhead (what it adds to the runs)
 * is its host time on a synchronous backend; on a device it is none: the host works while the device runs
 * the launches queued before, and a read waits for the device's own work (counting that wait as overhead
 * took most of a CUDA step out of the profile's denominator: shares of 225% on an H100). Users: the
 * profiler's operator breakdown (src/analysis/profile_ops.c) and kbench's model mode (src/bench/kb_model.c).
 */
#include <stdlib.h>

#include "lpo/core.h"

#include "lpo/engine.h"

#define RING (LPO_BACKEND_MARKS / 2)

struct lpo_group_timer {
    lpo_engine *e;
    lpo_group_tag_fn tag;
    lpo_group_time_fn done;
    void *ud;
    int ring[RING]; /* tags of the groups whose mark pair 2 i, 2 i + 1 is not read yet */
    int head, count, cur;
    double overhead_s;
    int device;    /* the marks are device events: the host's time is not added to the runs */
    lpo_status st; /* the first error of a mark */
};

/* Reads the oldest pending mark pair: the exclusive time of its group. */
static void flush_one(lpo_group_timer *t) {
    const int i = t->head;
    double ms = 0;
    const lpo_status st = lpo_engine_elapsed_ms(t->e, 2 * i, 2 * i + 1, &ms);
    if (st != LPO_OK && t->st == LPO_OK) t->st = st;
    if (ms < 0) ms = 0; /* clock granularity */
    if (t->ring[i] >= 0 && st == LPO_OK) t->done(t->ud, t->ring[i], ms);
    t->head = (t->head + 1) % RING;
    t->count--;
}

static void on_group(void *ud, const lpo_oplist *l, const lpo_plan *p, size_t g, int end) {
    lpo_group_timer *t = ud;
    lpo_status st;
    if (!end) { /* a free mark pair (reading the oldest when the ring is full), then the begin mark */
        const uint64_t t0 = lpo_now_ns();
        if (t->count == RING) flush_one(t);
        t->cur = (t->head + t->count) % RING;
        if (!t->device) t->overhead_s += (double)(lpo_now_ns() - t0) / 1e9;
        if ((st = lpo_engine_mark(t->e, 2 * t->cur)) != LPO_OK && t->st == LPO_OK) t->st = st;
        return;
    }
    if ((st = lpo_engine_mark(t->e, 2 * t->cur + 1)) != LPO_OK && t->st == LPO_OK) t->st = st;
    const uint64_t t0 = lpo_now_ns();
    t->ring[t->cur] = t->tag(t->ud, l, p, g);
    t->count++;
    if (!t->device) t->overhead_s += (double)(lpo_now_ns() - t0) / 1e9;
}

lpo_status lpo_group_timer_start(lpo_engine *e, lpo_group_tag_fn tag, lpo_group_time_fn done, void *ud,
                                 lpo_group_timer **out) {
    *out = NULL;
    lpo_group_timer *t = calloc(1, sizeof *t);
    if (!t) return lpo_errorf(LPO_E_NOMEM, "group timer: out of memory");
    *t = (lpo_group_timer){
        .e = e, .tag = tag, .done = done, .ud = ud, .device = lpo_engine_marks_on_device(e)};
    const lpo_status st = lpo_engine_set_group_callback(e, on_group, t);
    if (st != LPO_OK) {
        free(t);
        return st;
    }
    *out = t;
    return LPO_OK;
}

lpo_status lpo_group_timer_flush(lpo_group_timer *t) {
    while (t->count > 0) flush_one(t);
    return t->st;
}

double lpo_group_timer_overhead_s(const lpo_group_timer *t) {
    return t->overhead_s;
}

void lpo_group_timer_stop(lpo_group_timer *t) {
    if (!t) return;
    lpo_engine_set_group_callback(t->e, NULL, NULL);
    lpo_error_clear();
    free(t);
}
