/* The tracer's core (liblpo_probe.so): configuration, the raw file, per-thread staging blocks and range
 * stacks, string interning, NVTX-level operations, flushing at exit and on fatal signals, and the
 * in-process API that lpo's engine reaches through include/lpo/probe.h. See probe.h for the design. */
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "probe/capture/probe.h"
#include "probe/trace_clock.h"

probe_state G = {.mu = PTHREAD_MUTEX_INITIALIZER, .win_end = UINT64_MAX};

uint64_t probe_now(void) {
    return lpo_clock_now();
}

/* ---- per-thread state ---- */
static __thread probe_tls *tls_self;

static void stage_flush(probe_tls *t) {
    if (!t->stage_len) return;
    pthread_mutex_lock(&G.mu);
    if (atomic_load(&G.active)) lpo_raw_append(&G.w, t->stage, t->stage_len);
    pthread_mutex_unlock(&G.mu);
    t->stage_len = 0;
}

static void tls_destructor(void *p) { /* thread exit: its records go to the writer; the block stays listed */
    probe_tls *t = p;
    stage_flush(t);
    t->dead = 1;
}

probe_tls *probe_tls_get(void) {
    probe_tls *t = tls_self;
    if (t) return t;
    t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->tid = (uint32_t)syscall(SYS_gettid);
    pthread_mutex_lock(&G.mu);
    t->next = G.threads;
    G.threads = t;
    pthread_mutex_unlock(&G.mu);
    if (G.inited) pthread_setspecific(G.key, t);
    tls_self = t;
    return t;
}

void probe_stage(probe_tls *t, uint16_t type, uint32_t aux, const void *body, size_t len) {
    const size_t size = (8 + len + 7) & ~(size_t)7;
    if (size > sizeof t->stage) {
        atomic_fetch_add(&G.dropped_staged, 1);
        return;
    }
    if (t->stage_len + size > sizeof t->stage) stage_flush(t);
    uint8_t *p = t->stage + t->stage_len;
    lpo_raw_rec r = {type, (uint16_t)size, aux};
    memcpy(p, &r, sizeof r);
    memcpy(p + 8, body, len);
    memset(p + 8 + len, 0, size - 8 - len);
    __atomic_store_n(&t->stage_len, t->stage_len + size, __ATOMIC_RELEASE);
}

/* ---- strings ---- */
static uint32_t hash_str(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h ? h : 1;
}

size_t probe_api_name_len(const char *name) {
    size_t n = strlen(name), v = n;
    while (v > 0 && name[v - 1] >= '0' && name[v - 1] <= '9') v--;
    return v < n && v >= 2 && name[v - 1] == 'v' && name[v - 2] == '_' ? v - 2 : n;
}

uint32_t probe_intern_locked(const char *s, size_t len) {
    if (len > LPO_RAW_BODY_MAX) len = LPO_RAW_BODY_MAX; /* what one STRING record holds */
    const uint32_t h = hash_str(s, len);
    if ((G.n_strs + 1) * 2 > G.cap_strs) { /* grow the table */
        size_t nc = G.cap_strs ? G.cap_strs * 2 : 1024;
        __typeof__(G.strs) ns = calloc(nc, sizeof *ns);
        if (!ns) return 0;
        for (size_t i = 0; i < G.cap_strs; i++) { /* each old slot */
            if (!G.strs[i].id) continue;
            size_t j = G.strs[i].hash & (nc - 1);
            while (ns[j].id) j = (j + 1) & (nc - 1);
            ns[j] = G.strs[i];
        }
        free(G.strs);
        G.strs = ns;
        G.cap_strs = nc;
    }
    size_t i = h & (G.cap_strs - 1);
    for (; G.strs[i].id; i = (i + 1) & (G.cap_strs - 1))
        if (G.strs[i].hash == h && G.strs[i].len == len && !memcmp(G.strs[i].s, s, len)) return G.strs[i].id;
    char *c = malloc(len + 1);
    if (!c) return 0;
    memcpy(c, s, len);
    c[len] = 0;
    const uint32_t id = ++G.next_str;
    G.strs[i].hash = h;
    G.strs[i].id = id;
    G.strs[i].s = c;
    G.strs[i].len = len;
    G.n_strs++;
    lpo_raw_put(&G.w, LPO_REC_STRING, id, c, len + 1);
    return id;
}

uint32_t probe_intern(const char *s, size_t len) {
    if (len > LPO_RAW_BODY_MAX) len = LPO_RAW_BODY_MAX; /* as interned: the cache compares what was kept */
    probe_tls *t = probe_tls_get();
    const uint32_t h = hash_str(s, len);
    if (t) { /* the thread's recent strings, without the lock */
        __typeof__(t->cache[0]) *e = &t->cache[h & 63];
        if (e->id && e->hash == h && e->len == len && !memcmp(e->s, s, len)) return e->id;
    }
    pthread_mutex_lock(&G.mu);
    const uint32_t id = probe_intern_locked(s, len);
    const char *kept = NULL;
    if (id) { /* find the interned copy for the cache */
        for (size_t i = h & (G.cap_strs - 1); G.strs[i].id; i = (i + 1) & (G.cap_strs - 1))
            if (G.strs[i].id == id) {
                kept = G.strs[i].s;
                break;
            }
    }
    pthread_mutex_unlock(&G.mu);
    if (t && kept) {
        __typeof__(t->cache[0]) *e = &t->cache[h & 63];
        e->hash = h;
        e->id = id;
        e->s = kept;
        e->len = len;
    }
    return id;
}

/* ---- NVTX-level operations ---- */
static int is_gate(uint32_t name) {
    return G.gate_id && name == G.gate_id;
}

static void gate_open(void) {
    if (atomic_fetch_add(&G.gate_depth, 1) == 0) probe_gate_sync();
}

static void gate_close(void) {
    int d = atomic_load(&G.gate_depth);
    while (d > 0 && !atomic_compare_exchange_weak(&G.gate_depth, &d, d - 1)) {
    }
    if (d == 1) probe_gate_sync(); /* the last open instance closed */
}

int probe_push(uint32_t name, uint32_t domain) {
    probe_tls *t = probe_tls_get();
    if (!t) return -1;
    const uint32_t d = t->depth++;
    if (!atomic_load_explicit(&G.active, memory_order_relaxed) || d >= PROBE_MAX_DEPTH) {
        if (d < PROBE_MAX_DEPTH) t->stack[d].id = 0; /* not recorded: its pop writes nothing */
        return (int)d;
    }
    const uint64_t id = atomic_fetch_add(&G.next_range, 1) + 1;
    lpo_raw_range_begin rb = {probe_now(), id, 0, t->tid, name, domain, 0};
    for (uint32_t k = d; k > 0 && !rb.parent; k--) rb.parent = t->stack[k - 1].id; /* innermost recorded */
    t->stack[d].id = id;
    t->stack[d].name = name;
    probe_stage(t, LPO_REC_RANGE_BEGIN, 0, &rb, sizeof rb);
    if (is_gate(name)) gate_open();
    if (G.attribution == LPO_ATTR_EXTCORR) probe_cupti_ext_push(id);
    return (int)d;
}

int probe_pop(void) {
    probe_tls *t = probe_tls_get();
    if (!t || !t->depth) return -1;
    const uint32_t d = --t->depth;
    if (d >= PROBE_MAX_DEPTH || !t->stack[d].id) return (int)d;
    lpo_raw_range_end re = {probe_now(), t->stack[d].id, t->tid, 0};
    t->stack[d].id = 0;
    if (atomic_load_explicit(&G.active, memory_order_relaxed)) {
        probe_stage(t, LPO_REC_RANGE_END, 0, &re, sizeof re);
        if (G.attribution == LPO_ATTR_EXTCORR) probe_cupti_ext_pop();
    }
    if (is_gate(t->stack[d].name)) gate_close();
    return (int)d;
}

uint64_t probe_range_start(uint32_t name, uint32_t domain) {
    probe_tls *t = probe_tls_get();
    if (!t || !atomic_load_explicit(&G.active, memory_order_relaxed)) return 0;
    const uint64_t id = atomic_fetch_add(&G.next_range, 1) + 1;
    lpo_raw_range_begin rb = {probe_now(), id, 0, t->tid, name, domain, 1};
    probe_stage(t, LPO_REC_RANGE_BEGIN, 0, &rb, sizeof rb);
    if (is_gate(name)) { /* remember it, so that its end closes the gate */
        for (int i = 0; i < 16; i++) {
            uint64_t zero = 0;
            if (__atomic_compare_exchange_n(&G.gate_start_ids[i], &zero, id, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))
                break;
        }
        gate_open();
    }
    return id;
}

void probe_range_end(uint64_t id) {
    probe_tls *t = probe_tls_get();
    if (!t || !id) return;
    if (atomic_load_explicit(&G.active, memory_order_relaxed)) {
        lpo_raw_range_end re = {probe_now(), id, t->tid, 0};
        probe_stage(t, LPO_REC_RANGE_END, 0, &re, sizeof re);
    }
    for (int i = 0; i < 16; i++) { /* a gate instance? */
        uint64_t want = id;
        if (__atomic_compare_exchange_n(&G.gate_start_ids[i], &want, 0, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            gate_close();
            break;
        }
    }
}

void probe_mark(uint32_t name, uint32_t domain) {
    probe_tls *t = probe_tls_get();
    if (!t || !atomic_load_explicit(&G.active, memory_order_relaxed)) return;
    lpo_raw_mark m = {probe_now(), t->tid, name, domain, 0};
    probe_stage(t, LPO_REC_MARK, 0, &m, sizeof m);
}

void probe_thread_name(uint32_t tid, uint32_t name) {
    probe_tls *t = probe_tls_get();
    if (!t || !atomic_load_explicit(&G.active, memory_order_relaxed)) return;
    lpo_raw_thread_name tn = {tid ? tid : t->tid, name};
    probe_stage(t, LPO_REC_THREAD_NAME, 0, &tn, sizeof tn);
}

/* ---- flushing ------------------------------------------------------------------------------------------ */
static void write_counters_locked(void) {
    lpo_raw_dropped d = {atomic_load(&G.dropped_cupti), atomic_load(&G.dropped_probe),
                         atomic_load(&G.dropped_staged), atomic_load(&G.incomplete)};
    lpo_raw_put(&G.w, LPO_REC_DROPPED, 0, &d, sizeof d);
}

void probe_flush_all(uint32_t reason, uint32_t sig) {
    if (!atomic_load(&G.active)) return;
    atomic_store(&G.flushing, 1);
    probe_cupti_flush(1); /* CUPTI's buffers, converted under G.mu */
    /* the lock, unless the crashed thread holds it (then write anyway: best effort) */
    int locked = 0;
    for (int i = 0; i < 2000 && !locked; i++) {
        locked = pthread_mutex_trylock(&G.mu) == 0;
        if (!locked) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    for (probe_tls *t = G.threads; t; t = t->next) { /* every thread's staged records */
        size_t n = __atomic_load_n(&t->stage_len, __ATOMIC_ACQUIRE);
        if (n) lpo_raw_append(&G.w, t->stage, n);
        t->stage_len = 0;
    }
    write_counters_locked();
    lpo_raw_end e = {probe_now(), reason, sig};
    lpo_raw_put(&G.w, LPO_REC_END, 0, &e, sizeof e);
    lpo_raw_flush(&G.w);
    if (locked) pthread_mutex_unlock(&G.mu);
    atomic_store(&G.flushing, 0);
}

static void on_exit_flush(void) {
    probe_flush_all(LPO_END_EXIT, 0);
}

/* Records CUDA may still deliver while the process tears down reach the file too. */
__attribute__((destructor)) static void on_unload(void) {
    if (!atomic_load(&G.active)) return;
    pthread_mutex_lock(&G.mu);
    lpo_raw_flush(&G.w);
    pthread_mutex_unlock(&G.mu);
}

/* ---- fatal signals ---- */
static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM};
static struct sigaction old_actions[sizeof fatal_signals / sizeof fatal_signals[0]];
static atomic_int in_signal;

/* Where a fault happened, on stderr: the signal, the faulting address and the traced process's stack as
 * backtrace_symbols_fd writes it (object(+offset) for code without exported symbols: `addr2line -e OBJECT
 * OFFSET` on an unstripped copy gives the line), so a program that crashes under the tracer says where. */
static void report_fault(int sig, const siginfo_t *si) {
    char head[160];
    const int n = snprintf(head, sizeof head,
                           "lpo trace: the traced process %ld got signal %d (%s) at address %p; "
                           "its stack:\n",
                           (long)getpid(), sig, strsignal(sig), si ? si->si_addr : NULL);
    if (n > 0 && write(2, head, (size_t)n) < 0) return;
    void *frames[48];
    backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
}

static void on_signal(int sig, siginfo_t *si, void *uc) {
    if (!atomic_exchange(&in_signal, 1)) {
        if (sig != SIGTERM) report_fault(sig, si);
        alarm(10); /* a flush that deadlocks (the crash was inside CUPTI or the writer) ends in SIGALRM */
        probe_flush_all(LPO_END_SIGNAL, (uint32_t)sig);
        alarm(0);
    }
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++) { /* the previous action */
        if (fatal_signals[i] != sig) continue;
        sigaction(sig, &old_actions[i], NULL);
        const struct sigaction *o = &old_actions[i];
        if (o->sa_flags & SA_SIGINFO) {
            if (o->sa_sigaction) o->sa_sigaction(sig, si, uc);
            return;
        }
        if (o->sa_handler == SIG_IGN) return;
        if (o->sa_handler != SIG_DFL) {
            o->sa_handler(sig);
            return;
        }
        break;
    }
    /* default action: a fault re-executes the instruction and dies; a sent signal is raised again */
    if (sig == SIGABRT || sig == SIGTERM || !si || si->si_code <= 0) raise(sig);
}

static void install_signal_handlers(void) {
    void *warm[2]; /* backtrace loads libgcc's unwinder on first use: not inside a signal handler */
    (void)backtrace(warm, 2);
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++) { /* each fatal signal */
        struct sigaction sa, old;
        if (sigaction(fatal_signals[i], NULL, &old) != 0) continue;
        if (fatal_signals[i] == SIGTERM && (old.sa_flags & SA_SIGINFO || old.sa_handler != SIG_DFL))
            continue; /* the program handles SIGTERM itself (and exits through atexit) */
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (sigaction(fatal_signals[i], &sa, &old_actions[i]) != 0) old_actions[i] = old;
    }
}

/* ---- configuration and the raw file ------------------------------------------------------------------ */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_common(void) {
    lpo_clock_init(getenv("LPO_TRACE_CLOCK")); /* before any timestamp: the TSC when it is cheaper */
    pthread_key_create(&G.key, tls_destructor);
    atexit(on_exit_flush);
    install_signal_handlers();
    G.attribution = LPO_ATTR_CALLBACK;
    G.activities = LPO_ACT_DEFAULT;
    G.inited = 1;
}

int probe_open(const char *dir) {
    char path[3200];
    if (G.session)
        snprintf(path, sizeof path, "%s/trace-%d-%d.lpot", dir, (int)getpid(), G.session);
    else
        snprintf(path, sizeof path, "%s/trace-%d.lpot", dir, (int)getpid());
    lpo_raw_header h;
    lpo_raw_header_init(&h, (uint32_t)getpid());
    h.t_start_ns = probe_now();
    h.activities = G.activities;
    h.attribution = G.attribution;
    h.flags = (G.gate_name[0] ? LPO_TRACE_F_GATED : 0) |
              (G.win_begin || G.win_end != UINT64_MAX ? LPO_TRACE_F_WINDOWED : 0);
    lpo_clock_info ck;
    lpo_clock_get_info(&ck);
    if (ck.mode == LPO_CLOCK_TSC) h.flags |= LPO_TRACE_F_TSC;
    if (lpo_raw_open(&G.w, path, &h, 1u << 20) != 0) {
        fprintf(stderr, "lpo probe: cannot write %s (%s); not tracing\n", path, strerror(errno));
        return -1;
    }
    snprintf(G.dir, sizeof G.dir, "%s", dir);
    /* A string keeps its id for the life of the process: ids are held by the kernel-name and API-name
     * caches (probe_cupti.c), the threads' caches, and the program itself (registered NVTX strings and
     * domain handles). So a new file (another in-process session) starts with every string known so far. */
    for (size_t i = 0; i < G.cap_strs; i++)
        if (G.strs[i].id) lpo_raw_put(&G.w, LPO_REC_STRING, G.strs[i].id, G.strs[i].s, G.strs[i].len + 1);
    G.gate_id = G.gate_name[0] ? probe_intern_locked(G.gate_name, strlen(G.gate_name)) : 0;
    if (G.gate_id) lpo_raw_put(&G.w, LPO_REC_GATE, G.gate_id, NULL, 0);
    if (G.win_begin || G.win_end != UINT64_MAX) {
        lpo_raw_window win = {G.win_begin, G.win_end};
        lpo_raw_put(&G.w, LPO_REC_WINDOW, 0, &win, sizeof win);
    }
    atomic_store(&G.active, 1);
    return 0;
}

/* Milliseconds from the environment in ns; 0 when unset. A value that is not a number in [0, 1e12] is
 * ignored with a warning (a cast of -1 or 1e300 to an integer is undefined behaviour). */
static uint64_t env_ms_ns(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end = NULL;
    const double ms = strtod(v, &end);
    if (end == v || *end || !(ms >= 0 && ms <= 1e12)) {
        fprintf(stderr, "lpo probe: %s='%s' is not a number of milliseconds in [0, 1e12]; ignored\n", name,
                v);
        return 0;
    }
    return (uint64_t)(ms * 1e6);
}

int probe_init_from_env(void) {
    pthread_once(&once, init_common);
    pthread_mutex_lock(&G.mu);
    int rc = 0;
    if (!atomic_load(&G.active)) {
        const char *dir = getenv("LPO_TRACE_DIR");
        if (!dir || !*dir) {
            rc = -1;
        } else {
            const char *v = getenv("LPO_TRACE_ACTIVITIES");
            char bad[32];
            if (v && *v && lpo_trace_parse_activities(v, &G.activities, bad) != 0) {
                fprintf(stderr,
                        "lpo probe: unknown activity '%s' in LPO_TRACE_ACTIVITIES; using the default\n", bad);
                G.activities = LPO_ACT_DEFAULT;
            }
            v = getenv("LPO_TRACE_ATTRIBUTION");
            if (v && !strcmp(v, "extcorr"))
                G.attribution = LPO_ATTR_EXTCORR;
            else if (v && !strcmp(v, "none"))
                G.attribution = LPO_ATTR_NONE;
            v = getenv("LPO_TRACE_CAPTURE_RANGE");
            snprintf(G.gate_name, sizeof G.gate_name, "%s", v ? v : "");
            const uint64_t delay = env_ms_ns("LPO_TRACE_DELAY_MS"), dur = env_ms_ns("LPO_TRACE_DURATION_MS");
            v = getenv("LPO_TRACE_T0_NS");
            const uint64_t t0 = v && *v ? strtoull(v, NULL, 10) : probe_now();
            if (delay || dur) {
                G.win_begin = t0 + delay;
                G.win_end = dur ? G.win_begin + dur : UINT64_MAX;
            }
            rc = probe_open(dir);
        }
    }
    pthread_mutex_unlock(&G.mu);
    return rc;
}

/* ---- the in-process API (include/lpo/probe.h resolves these with dlsym) ---- */
PROBE_EXPORT int lpo_probe_impl_start(const char *dir, uint32_t activities, int attribution,
                                      const char *capture_range) {
    pthread_once(&once, init_common);
    pthread_mutex_lock(&G.mu);
    int rc = 0;
    if (!atomic_load(&G.active)) {
        G.activities = activities ? activities : LPO_ACT_DEFAULT;
        G.attribution = (uint32_t)attribution;
        snprintf(G.gate_name, sizeof G.gate_name, "%s", capture_range ? capture_range : "");
        G.win_begin = 0;
        G.win_end = UINT64_MAX;
        G.session++;
        rc = probe_open(dir);
    }
    pthread_mutex_unlock(&G.mu);
    if (rc == 0 && (rc = probe_cupti_start()) != 0) { /* the session records nothing: end it */
        pthread_mutex_lock(&G.mu);
        atomic_store(&G.active, 0);
        lpo_raw_close(&G.w);
        pthread_mutex_unlock(&G.mu);
    }
    return rc;
}

PROBE_EXPORT int lpo_probe_impl_stop(void) {
    if (!atomic_load(&G.active)) return 0;
    probe_cupti_flush(0);
    probe_cupti_enable(0);
    probe_flush_all(LPO_END_STOP, 0);
    pthread_mutex_lock(&G.mu);
    atomic_store(&G.active, 0);
    int rc = lpo_raw_close(&G.w);
    pthread_mutex_unlock(&G.mu);
    return rc;
}

PROBE_EXPORT int lpo_probe_impl_active(void) {
    return atomic_load(&G.active);
}

PROBE_EXPORT void lpo_probe_impl_push(const char *label) {
    if (!atomic_load_explicit(&G.active, memory_order_relaxed)) return;
    probe_push(probe_intern(label, strlen(label)), 0);
}

PROBE_EXPORT void lpo_probe_impl_pop(void) {
    probe_pop();
}

PROBE_EXPORT void lpo_probe_impl_graph_node_label(uint64_t node_id, const char *label) {
    probe_tls *t = probe_tls_get();
    if (!t || !node_id || !atomic_load_explicit(&G.active, memory_order_relaxed)) return;
    lpo_raw_node_label nl = {node_id, probe_intern(label, strlen(label)), 0};
    probe_stage(t, LPO_REC_NODE_LABEL, 1, &nl, sizeof nl);
}

PROBE_EXPORT uint64_t lpo_probe_impl_graph_node_id(void *cu_graph_node) {
    return probe_cupti_node_id(cu_graph_node);
}
