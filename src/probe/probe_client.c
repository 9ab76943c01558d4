/* The in-process API of the tracer (include/lpo/probe.h): liblpo_probe.so loaded with dlopen on demand and
 * its lpo_probe_impl_* entry points bound once; every call is a no-op while nothing is bound. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/core.h"
#include "lpo/probe.h"
#include "probe/trace_format.h"

static struct {
    void *lib;
    int (*start)(const char *, uint32_t, int, const char *);
    int (*stop)(void);
    int (*active)(void);
    void (*push)(const char *);
    void (*pop)(void);
    void (*label)(uint64_t, const char *);
    uint64_t (*node_id)(void *);
} P;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* dlsym into a function pointer without the object->function pointer cast ISO C forbids */
static int sym(void *lib, const char *name, void *fp, size_t size) {
    void *p = dlsym(lib, name);
    if (!p) return 0;
    memcpy(fp, &p, size);
    return 1;
}

static int found(const char *path, int want_dir) {
    return want_dir ? lpo_is_dir(path) : lpo_path_exists(path);
}

/* Finds `name` for lpo: the value of the environment variable env when set, else next to the running
 * executable, one level up (a build's tests/ folder) and, when installed is given, at <exe dir>/<installed>/
 * (a `make install` layout). A directory when want_dir, else any file. 1 when found; else 0 with buf
 * holding the path next to the executable (or env's value), for messages. */
static int find_beside_exe(const char *env, const char *name, const char *installed, int want_dir, char *buf,
                           size_t n) {
    const char *v = getenv(env);
    if (v && *v) {
        snprintf(buf, n, "%s", v);
        return found(buf, want_dir);
    }
    char dir[PATH_MAX], up[PATH_MAX];
    const ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (len > 0) dir[len] = 0;
    char *slash = len > 0 ? strrchr(dir, '/') : NULL;
    if (!slash) {
        snprintf(buf, n, "%s", name);
        return 0;
    }
    *slash = 0; /* the executable's folder */
    snprintf(up, sizeof up, "%s", dir);
    slash = strrchr(up, '/');
    if (slash) *slash = 0; /* its parent */
    snprintf(buf, n, "%s/%s", dir, name);
    if (found(buf, want_dir)) return 1;
    snprintf(buf, n, "%s/%s", up, name);
    if (slash && found(buf, want_dir)) return 1;
    if (installed) {
        snprintf(buf, n, "%s/%s/%s", dir, installed, name);
        if (found(buf, want_dir)) return 1;
    }
    snprintf(buf, n, "%s/%s", dir, name);
    return 0;
}

int lpo_probe_library_path(char *buf, size_t n) {
    /* installed: <prefix>/bin/lpo, <prefix>/lib/lpo/liblpo_probe.so */
    return find_beside_exe("LPO_PROBE_LIB", "liblpo_probe.so", "../lib/lpo", 0, buf, n);
}

int lpo_probe_torch_shim_dir(char *buf, size_t n) {
    return find_beside_exe("LPO_TORCH_SHIM", "lpo_torch", NULL, 1, buf, n);
}

/* Loads path and binds every entry point; LPO_OK or LPO_E_UNSUPPORTED. Called with mu held. */
static lpo_status bind(const char *path) {
    if (P.lib) return LPO_OK;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return lpo_errorf(LPO_E_UNSUPPORTED, "cannot load the tracer %s: %s", path, dlerror());
    int ok = sym(lib, "lpo_probe_impl_start", &P.start, sizeof P.start) &&
             sym(lib, "lpo_probe_impl_stop", &P.stop, sizeof P.stop) &&
             sym(lib, "lpo_probe_impl_active", &P.active, sizeof P.active) &&
             sym(lib, "lpo_probe_impl_push", &P.push, sizeof P.push) &&
             sym(lib, "lpo_probe_impl_pop", &P.pop, sizeof P.pop) &&
             sym(lib, "lpo_probe_impl_graph_node_label", &P.label, sizeof P.label) &&
             sym(lib, "lpo_probe_impl_graph_node_id", &P.node_id, sizeof P.node_id);
    if (!ok) {
        memset(&P, 0, sizeof P);
        dlclose(lib);
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s is not lpo's tracer (missing entry points)", path);
    }
    P.lib = lib;
    return LPO_OK;
}

lpo_status lpo_probe_start(const lpo_probe_options *o) {
    uint32_t acts = LPO_ACT_DEFAULT;
    char bad[32];
    if (o->activities && lpo_trace_parse_activities(o->activities, &acts, bad) != 0)
        return lpo_errorf(LPO_E_INVALID,
                          "probe: unknown activity '%s' (kernel, memcpy, memset, sync, launch, runtime, "
                          "driver, nvtx, default, all)",
                          bad);
    int attr = LPO_ATTR_CALLBACK;
    if (o->attribution && !strcmp(o->attribution, "extcorr"))
        attr = LPO_ATTR_EXTCORR;
    else if (o->attribution && !strcmp(o->attribution, "none"))
        attr = LPO_ATTR_NONE;
    else if (o->attribution && strcmp(o->attribution, "callback"))
        return lpo_errorf(LPO_E_INVALID, "probe: attribution '%s' (callback, extcorr or none)",
                          o->attribution);
    char path[PATH_MAX];
    if (!lpo_probe_library_path(path, sizeof path))
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "no tracer library at %s (lpo was built without CUPTI; set LPO_PROBE_LIB to its path)", path);
    pthread_mutex_lock(&mu);
    lpo_status st = bind(path);
    pthread_mutex_unlock(&mu);
    if (st) return st;
    const int rc = P.start(o->dir, acts, attr, o->capture_range);
    if (rc == LPO_PROBE_START_NO_CUPTI)
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "probe: another CUPTI tool in this process (compute-sanitizer, Nsight Systems or Nsight "
            "Compute?) holds CUPTI's activity API: no GPU activity can be traced");
    if (rc != 0) return lpo_errorf(LPO_E_IO, "probe: cannot start tracing into %s", o->dir);
    return LPO_OK;
}

lpo_status lpo_probe_stop(void) {
    if (P.stop && P.stop() != 0)
        return lpo_errorf(LPO_E_IO, "probe: the raw trace could not be written completely");
    return LPO_OK;
}

int lpo_probe_attach(void) {
    const char *dir = getenv("LPO_TRACE_DIR"), *lib = getenv("CUDA_INJECTION64_PATH");
    if (P.lib) return 1;
    if (!dir || !*dir || !lib || !*lib) return 0;
    pthread_mutex_lock(&mu);
    lpo_status st = bind(lib);
    pthread_mutex_unlock(&mu);
    if (st) lpo_error_clear();
    return st == LPO_OK;
}

int lpo_probe_active(void) {
    return P.active ? P.active() : 0;
}

void lpo_probe_push(const char *label) {
    if (P.push) P.push(label);
}

void lpo_probe_pop(void) {
    if (P.pop) P.pop();
}

void lpo_probe_graph_node_label(uint64_t graph_node_id, const char *label) {
    if (P.label) P.label(graph_node_id, label);
}

uint64_t lpo_probe_graph_node_id(void *cu_graph_node) {
    return P.node_id ? P.node_id(cu_graph_node) : 0;
}
