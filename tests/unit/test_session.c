/* The session of measuring commands: open and close on model=tiny on the CPU (run directory in a private
 * temporary folder), the parts it opens and leaves closed, the engine sizing hook, and failures at each
 * stage (nothing opened is left behind: ASan builds check the leaks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lpo/core.h"
#include "lpo/session.h"
#include "test_support.h"

static char *tmp; /* the private output folder of every run directory here */

static lpo_node *compose(const char *const *extra, size_t n_extra) {
    char out[1024];
    snprintf(out, sizeof out, "output.dir=%s/run", tmp);
    const char *base[] = {"model=tiny", "backend=cpu", "infer.threads=1", out};
    lpo_node *cfg = NULL;
    lpo_status st = lpo_test_compose("generate", base, sizeof base / sizeof *base, extra, n_extra, &cfg);
    if (st != LPO_OK) fail_msg("compose: %s", lpo_last_error());
    return cfg;
}

typedef struct {
    int calls;
    lpo_engine_opts seen;
    int max_seqs;         /* what the hook asks for (0: leave) */
    lpo_status fail_with; /* the hook's answer */
} hook;

static lpo_status size_engine(void *ud, lpo_session *s, lpo_engine_opts *eo) {
    hook *h = ud;
    h->calls++;
    h->seen = *eo;
    assert_non_null(s->model);
    assert_non_null(s->spec);
    assert_null(s->engine);
    if (h->max_seqs) eo->max_seqs = h->max_seqs;
    return h->fail_with ? lpo_errorf(h->fail_with, "hook says no") : LPO_OK;
}

static void test_open_close(void **state) {
    (void)state;
    const char *ov[] = {"infer.batch_size=3", "hardware.device=0"};
    hook h = {.max_seqs = 2};
    const lpo_session_opts o = {.parts = LPO_SESSION_ENGINE | LPO_SESSION_ENV | LPO_SESSION_NVML,
                                .size_engine = size_engine,
                                .ud = &h};
    lpo_session *s = NULL;
    assert_int_equal(lpo_session_open(compose(ov, 2), &o, &s), LPO_OK);
    assert_non_null(s);
    /* the hook saw the settings' options with the rules applied, and sized the engine */
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.seen.max_seqs, 3);
    assert_int_equal(h.seen.max_context, 512); /* tiny's positions, under the default cap */
    assert_int_equal(h.seen.n_threads, 1);
    assert_int_equal(h.seen.fusion, 1);
    assert_int_equal(lpo_engine_max_seqs(s->engine), 2);
    assert_int_equal(s->engine_opts.max_seqs, 2);
    assert_string_equal(s->spec->name, "tiny");
    assert_string_equal(lpo_engine_backend_name(s->engine), "cpu");
    assert_int_equal(s->on_device, 0);
    assert_int_equal(lpo_session_peaks_device(s), -1);
    assert_non_null(s->env);
    assert_null(s->nvml); /* the CPU backend: no sampler */
    assert_true(s->engine_open_s >= 0);
    /* the run directory comes when asked for, once */
    char path[1024];
    snprintf(path, sizeof path, "%s/run", tmp);
    assert_null(s->rundir);
    assert_false(lpo_path_exists(path));
    lpo_rundir *rd = NULL, *again = NULL;
    assert_int_equal(lpo_session_rundir(s, &rd), LPO_OK);
    assert_int_equal(lpo_session_rundir(s, &again), LPO_OK);
    assert_ptr_equal(rd, again);
    assert_string_equal(lpo_rundir_path(rd), path);
    char file[1100];
    snprintf(file, sizeof file, "%s/config.yaml", path);
    assert_true(lpo_path_exists(file));
    lpo_session_close(s);
}

/* Parts not asked for stay closed; a model without an engine still gets its engine options sized. */
static void test_parts(void **state) {
    (void)state;
    lpo_session *s = NULL;
    assert_int_equal(lpo_session_open(compose(NULL, 0), NULL, &s), LPO_OK);
    assert_non_null(s->cfg);
    assert_null(s->backend);
    assert_null(s->model);
    assert_null(s->engine);
    assert_null(s->env);
    lpo_session_close(s);

    hook h = {0};
    const lpo_session_opts o = {.parts = LPO_SESSION_MODEL, .size_engine = size_engine, .ud = &h};
    assert_int_equal(lpo_session_open(compose(NULL, 0), &o, &s), LPO_OK);
    assert_non_null(s->backend);
    assert_non_null(s->model);
    assert_null(s->engine);
    assert_int_equal(h.calls, 1);
    assert_int_equal(s->engine_opts.max_seqs, 1);
    assert_int_equal(s->engine_opts.max_context, 512);
    lpo_session_close(s);
    lpo_session_close(NULL);
}

/* A failure at each stage: the error of that stage, *out NULL, the config freed with the rest. */
static void test_failures(void **state) {
    (void)state;
    lpo_session *s = (lpo_session *)&s;
    const lpo_session_opts eng = {.parts = LPO_SESSION_ENGINE};
    /* settings */
    const char *bad_infer[] = {"infer.batch_size=0"};
    assert_int_equal(lpo_session_open(compose(bad_infer, 1), &eng, &s), LPO_E_CONFIG);
    assert_null(s);
    assert_non_null(strstr(lpo_last_error(), "infer.batch_size"));
    /* the backend, before the model is read */
    const char *bad_backend[] = {"backend=nonesuch", "+model.arch.act=nonesuch"};
    assert_int_not_equal(lpo_session_open(compose(bad_backend, 2), &eng, &s), LPO_OK);
    assert_null(s);
    assert_non_null(strstr(lpo_last_error(), "nonesuch"));
    assert_null(strstr(lpo_last_error(), "model.arch.act"));
    /* the model */
    const char *bad_model[] = {"+model.arch.act=nonesuch"};
    assert_int_equal(lpo_session_open(compose(bad_model, 1), &eng, &s), LPO_E_CONFIG);
    assert_null(s);
    assert_non_null(strstr(lpo_last_error(), "model.arch.act"));
    /* the command's hook, with the model open */
    hook h = {.fail_with = LPO_E_RANGE};
    const lpo_session_opts hooked = {.parts = LPO_SESSION_ENGINE, .size_engine = size_engine, .ud = &h};
    assert_int_equal(lpo_session_open(compose(NULL, 0), &hooked, &s), LPO_E_RANGE);
    assert_null(s);
    assert_int_equal(h.calls, 1);
    assert_string_equal(lpo_last_error(), "hook says no");
    /* the engine, with the model open */
    const char *too_long[] = {"infer.max_context=100000"};
    assert_int_equal(lpo_session_open(compose(too_long, 1), &eng, &s), LPO_E_RANGE);
    assert_null(s);
    assert_non_null(strstr(lpo_last_error(), "exceeds the model's 512 positions"));
    /* no run directory was made by any of them */
    char path[1024];
    snprintf(path, sizeof path, "%s/run", tmp);
    assert_false(lpo_path_exists(path));
}

int main(void) {
    tmp = lpo_test_tmpdir();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_open_close),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) rc = 1;
    free(tmp);
    return rc;
}
