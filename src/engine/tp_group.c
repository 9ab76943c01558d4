/* The engine's tensor-parallel ranks: a host thread per rank running that rank's backend calls, a job handed
 * to all ranks at once and waited for with a deadline. A rank's error (its thread-local message) comes back
 * to the caller with the rank named; a rank that misses the deadline gets the backend's communicator
 * aborted (tp_abort: every rank blocked in a collective returns) and the group refuses later calls: a hang
 * becomes an error naming the rank and the collective it queued last, never a silent wait. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/tp_group.h"
#include "lpo/ops.h"

typedef enum { JOB_NONE, JOB_INIT, JOB_FORWARD, JOB_SAMPLING, JOB_FREE, JOB_CALL, JOB_EXIT } job_kind;

typedef struct {
    job_kind kind;
    /* forward */
    const lpo_oplist *l;
    const lpo_plan *p;
    const lpo_step_data *d;
    lpo_step_out *out0; /* rank 0's outputs */
    /* set_sampling */
    int slot;
    const lpo_sampling *s;
    uint64_t stream;
    /* call */
    lpo_status (*fn)(void *ctx, int rank, void *ud);
    void *ud;
} job;

typedef struct rank_state {
    struct lpo__tp_group *g;
    int rank;
    pthread_t thread;
    int started;
    void *ctx;
    lpo_backend_init init;
    lpo_status st;     /* of the last job */
    char msg[1024];    /* its message (the thread's lpo_last_error) */
    uint64_t done_gen; /* the last job generation it finished */
    int stopped;       /* test hook: skips its steps */
    int exited;        /* left rank_main */
} rank_state;

struct lpo__tp_group {
    const lpo_backend_iface *be;
    int tp;
    double timeout_s;
    void *shared;
    int broken; /* a rank missed a deadline: every later call is refused */
    pthread_mutex_t mu;
    pthread_cond_t job_cv, done_cv;
    uint64_t gen; /* job generation */
    job cur;
    rank_state r[LPO_TP_MAX];
    const char *volatile progress[LPO_TP_MAX];
};

static lpo_status run_job(rank_state *rs, const job *j) {
    const lpo_backend_iface *be = rs->g->be;
    switch (j->kind) {
    case JOB_INIT: return be->init(&rs->init, &rs->ctx);
    case JOB_FORWARD: {
        lpo_step_out none = {NULL, NULL};
        if (rs->stopped) return LPO_OK;
        return be->forward(rs->ctx, j->l, j->p, j->d, rs->rank == 0 && j->out0 ? j->out0 : &none);
    }
    case JOB_SAMPLING: return be->set_sampling(rs->ctx, j->slot, j->s, j->stream);
    case JOB_CALL: return j->fn(rs->ctx, rs->rank, j->ud);
    case JOB_FREE:
        if (rs->ctx) be->free(rs->ctx);
        rs->ctx = NULL;
        return LPO_OK;
    default: return LPO_OK;
    }
}

static void *rank_main(void *arg) {
    rank_state *rs = arg;
    lpo__tp_group *g = rs->g;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        while (g->gen == seen) pthread_cond_wait(&g->job_cv, &g->mu);
        seen = g->gen;
        const job j = g->cur;
        pthread_mutex_unlock(&g->mu);
        if (j.kind == JOB_EXIT) { /* a broken group's contexts were never freed: each rank frees its own */
            if (rs->ctx) g->be->free(rs->ctx);
            rs->ctx = NULL;
            pthread_mutex_lock(&g->mu);
            rs->exited = 1;
            pthread_cond_broadcast(&g->done_cv);
            pthread_mutex_unlock(&g->mu);
            return NULL;
        }
        lpo_error_clear();
        const lpo_status st = run_job(rs, &j);
        pthread_mutex_lock(&g->mu);
        rs->st = st;
        snprintf(rs->msg, sizeof rs->msg, "%s", st != LPO_OK ? lpo_last_error() : "");
        rs->done_gen = seen;
        pthread_cond_broadcast(&g->done_cv);
        pthread_mutex_unlock(&g->mu);
    }
}

static const char *job_name(job_kind k) {
    switch (k) {
    case JOB_INIT: return "loading its weights";
    case JOB_FORWARD: return "a step";
    case JOB_SAMPLING: return "setting a slot's sampling";
    case JOB_FREE: return "freeing its context";
    case JOB_CALL: return "a call";
    default: return "a call";
    }
}

/* Hands j to every started rank and waits for all of them (at most timeout_s). The first error is returned
 * with its rank; a missed deadline aborts the communicator and breaks the group. */
static lpo_status run_all(lpo__tp_group *g, const job *j, double timeout_s) {
    if (g->broken)
        return lpo_errorf(LPO_E_TIMEOUT,
                          "tensor parallel: a rank stopped answering earlier; this engine cannot run more "
                          "steps (close it and open a new one)");
    pthread_mutex_lock(&g->mu);
    g->cur = *j;
    const uint64_t gen = ++g->gen;
    pthread_cond_broadcast(&g->job_cv);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)timeout_s;
    int timed_out = 0;
    int late[LPO_TP_MAX] = {0}; /* the ranks still in the step when the deadline passed */
    for (;;) {
        int all = 1;
        for (int r = 0; r < g->tp; r++) all &= !g->r[r].started || g->r[r].done_gen == gen;
        if (all) break;
        if (timed_out) {
            /* after the abort: give the ranks a moment to come back from their collectives */
            struct timespec grace;
            clock_gettime(CLOCK_REALTIME, &grace);
            grace.tv_sec += 10;
            if (pthread_cond_timedwait(&g->done_cv, &g->mu, &grace) == ETIMEDOUT) break;
            continue;
        }
        if (pthread_cond_timedwait(&g->done_cv, &g->mu, &dl) == ETIMEDOUT) {
            timed_out = 1;
            /* named now: after the abort, a rank whose collectives were only queued comes back "done" */
            for (int r = 0; r < g->tp; r++) late[r] = g->r[r].started && g->r[r].done_gen != gen;
            g->broken = 1;
            pthread_mutex_unlock(&g->mu);
            if (g->be->tp_abort && g->shared) g->be->tp_abort(g->shared);
            pthread_mutex_lock(&g->mu);
        }
    }
    lpo_status st = LPO_OK;
    if (timed_out) {
        char who[512] = "";
        size_t n = 0;
        for (int r = 0; r < g->tp && n < sizeof who; r++) {
            if (!late[r] && g->r[r].started && g->r[r].done_gen == gen && g->r[r].st == LPO_OK) continue;
            const char *at = g->progress[r];
            n += (size_t)snprintf(who + n, sizeof who - n, "%srank %d (last collective queued: %s)",
                                  n ? ", " : "", r, at ? at : "none yet");
        }
        st = lpo_errorf(LPO_E_TIMEOUT,
                        "tensor parallel: %s did not finish %s within %.0f s; the communicator was aborted "
                        "(a rank stopped, or its GPU or link hangs)",
                        n ? who : "a rank", job_name(j->kind), timeout_s);
    } else {
        for (int r = 0; r < g->tp; r++)
            if (g->r[r].started && g->r[r].st != LPO_OK) {
                st = lpo_errorf(g->r[r].st, "tensor parallel rank %d: %s", r, g->r[r].msg);
                break;
            }
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}

lpo_status lpo__tp_group_open(const lpo_backend_iface *be, const lpo_backend_init *in, int tp,
                              double timeout_s, lpo__tp_group **out) {
    *out = NULL;
    if (tp < 2 || tp > LPO_TP_MAX || !be->tp_open)
        return lpo_errorf(LPO_E_INVALID, "tensor parallel: %d ranks on backend '%s'", tp, be->name);
    lpo__tp_group *g = calloc(1, sizeof *g);
    if (!g) return lpo_errorf(LPO_E_NOMEM, "tensor parallel: out of memory");
    g->be = be;
    g->tp = tp;
    g->timeout_s = timeout_s > 0 ? timeout_s : 120;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->job_cv, NULL);
    pthread_cond_init(&g->done_cv, NULL);
    lpo_status st = be->tp_open(tp, in->device, &g->shared);
    for (int r = 0; st == LPO_OK && r < tp; r++) {
        rank_state *rs = &g->r[r];
        rs->g = g;
        rs->rank = r;
        rs->init = *in;
        rs->init.tp = tp;
        rs->init.rank = r;
        rs->init.device = in->device + r;
        rs->init.tp_shared = g->shared;
        rs->init.tp_progress = g->progress;
        if (pthread_create(&rs->thread, NULL, rank_main, rs) != 0)
            st = lpo_errorf(LPO_E_INTERNAL, "tensor parallel: cannot start the thread of rank %d", r);
        else
            rs->started = 1;
    }
    if (st == LPO_OK) {
        const job init = {.kind = JOB_INIT};
        st = run_all(g, &init, g->timeout_s > 600 ? g->timeout_s : 600);
    }
    if (st != LPO_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", lpo_last_error());
        lpo__tp_group_close(g);
        return lpo_errorf(st, "%s", msg);
    }
    *out = g;
    return LPO_OK;
}

void lpo__tp_group_close(lpo__tp_group *g) {
    if (!g) return;
    if (!g->broken) {
        const job fr = {.kind = JOB_FREE};
        (void)run_all(g, &fr, g->timeout_s);
    }
    /* the threads leave (a rank still stuck after an abort is left to the process's exit) */
    pthread_mutex_lock(&g->mu);
    g->cur.kind = JOB_EXIT;
    g->gen++;
    pthread_cond_broadcast(&g->job_cv);
    int stuck = 0;
    if (g->broken) { /* after an abort the ranks come back from their collectives: wait for them, bounded */
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 10;
        for (;;) {
            int all = 1;
            for (int r = 0; r < g->tp; r++) all &= !g->r[r].started || g->r[r].exited;
            if (all || pthread_cond_timedwait(&g->done_cv, &g->mu, &dl) == ETIMEDOUT) break;
        }
        for (int r = 0; r < g->tp; r++) stuck |= g->r[r].started && !g->r[r].exited;
    }
    pthread_mutex_unlock(&g->mu);
    for (int r = 0; r < g->tp; r++)
        if (g->r[r].started) {
            if (stuck)
                pthread_detach(g->r[r].thread);
            else
                pthread_join(g->r[r].thread, NULL);
        }
    if (stuck) return; /* a rank still in a collective may read the group: leave it to the process's exit */
    if (g->shared && g->be->tp_close) g->be->tp_close(g->shared);
    pthread_cond_destroy(&g->job_cv);
    pthread_cond_destroy(&g->done_cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void *lpo__tp_group_ctx(const lpo__tp_group *g, int rank) {
    return g && rank >= 0 && rank < g->tp ? g->r[rank].ctx : NULL;
}

lpo_status lpo__tp_group_forward(lpo__tp_group *g, const lpo_oplist *l, const lpo_plan *p,
                                 const lpo_step_data *d, lpo_step_out *out) {
    const job j = {.kind = JOB_FORWARD, .l = l, .p = p, .d = d, .out0 = out};
    return run_all(g, &j, g->timeout_s);
}

lpo_status lpo__tp_group_set_sampling(lpo__tp_group *g, int slot, const lpo_sampling *s, uint64_t stream) {
    const job j = {.kind = JOB_SAMPLING, .slot = slot, .s = s, .stream = stream};
    return run_all(g, &j, g->timeout_s);
}

lpo_status lpo__tp_group_each(lpo__tp_group *g, lpo_status (*fn)(void *ctx, int rank, void *ud), void *ud) {
    const job j = {.kind = JOB_CALL, .fn = fn, .ud = ud};
    return run_all(g, &j, g->timeout_s);
}

size_t lpo__tp_group_bytes(const lpo__tp_group *g, int which) {
    size_t b = 0;
    for (int r = 0; r < g->tp; r++) {
        size_t (*f)(void *) = which ? g->be->weight_bytes : g->be->memory_bytes;
        if (f && g->r[r].ctx) b += f(g->r[r].ctx);
    }
    return b;
}

void lpo__tp_group_fault(lpo__tp_group *g, int rank) {
    if (g && rank >= 0 && rank < g->tp) g->r[rank].stopped = 1;
}
