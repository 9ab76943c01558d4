/* Shared command-line parsing for lpo subcommands (see cli.h for the grammar). */
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"

static const lpo_cli_flag common_flags[] = {
    {"help", 0, "show this help"},
    {"config-dir", 1, "extra config directory, searched before the built-in conf/ (repeatable)"},
};

static const lpo_cli_flag *find_flag(const lpo_cli_spec *spec, const char *name) {
    for (size_t i = 0; i < sizeof common_flags / sizeof *common_flags; i++)
        if (!strcmp(common_flags[i].name, name)) return &common_flags[i];
    for (size_t i = 0; i < spec->n_flags; i++)
        if (!strcmp(spec->flags[i].name, name)) return &spec->flags[i];
    return NULL;
}

static lpo_status unknown_flag(const lpo_cli_spec *spec, const char *name) {
    const char *cands[64];
    size_t n = 0;
    for (size_t i = 0; i < sizeof common_flags / sizeof *common_flags && n < 64; i++)
        cands[n++] = common_flags[i].name;
    for (size_t i = 0; i < spec->n_flags && n < 64; i++) cands[n++] = spec->flags[i].name;
    const char *s = lpo_suggest(name, cands, n);
    if (s) return lpo_errorf(LPO_E_USAGE, "unknown flag '--%s' (did you mean '--%s'?)", name, s);
    return lpo_errorf(LPO_E_USAGE, "unknown flag '--%s' (see 'lpo %s --help')", name, spec->command);
}

static int is_param(const lpo_cli_spec *spec, const char *key, size_t klen) {
    for (size_t i = 0; i < spec->n_params; i++)
        if (strlen(spec->params[i].name) == klen && !strncmp(spec->params[i].name, key, klen)) return 1;
    return 0;
}

/* 1 when v of `model=v` names a model on disk rather than a preset (conf/model/<v>.yaml). */
static int model_is_path(const lpo_cli_args *a, const char *v) {
    size_t n = strlen(v);
    if (strchr(v, '/') || !strncmp(v, "hf:", 3) || (n > 5 && !strcmp(v + n - 5, ".gguf"))) return 1;
    if (!v[0] || !lpo_path_exists(v)) return 0;
    char path[4096];
    for (size_t i = 0; i <= a->n_config_dirs; i++) { /* a preset of that name wins */
        const char *dir = i < a->n_config_dirs ? a->config_dirs[i] : lpo_cfg_builtin_dir();
        snprintf(path, sizeof path, "%s/model/%s.yaml", dir, v);
        if (lpo_path_exists(path)) return 0;
    }
    return 1;
}

/* model=PATH -> model=hf model.path=PATH, in place in the override list. */
static lpo_status expand_model_paths(lpo_cli_args *a) {
    for (size_t i = 0; i < a->n_overrides; i++) {
        const char *o = a->overrides[i];
        if (strncmp(o, "model=", 6) || !model_is_path(a, o + 6)) continue;
        size_t len = strlen(o + 6) + sizeof "model.path=";
        char *path = malloc(len);
        const char **ov = realloc(a->overrides, (a->n_overrides + 1) * sizeof *ov);
        char **owned = realloc(a->owned, (a->n_owned + 1) * sizeof *owned);
        if (ov) a->overrides = ov;
        if (owned) a->owned = owned;
        if (!path || !ov || !owned) {
            free(path);
            lpo_cli_args_free(a);
            return lpo_errorf(LPO_E_NOMEM, "out of memory");
        }
        snprintf(path, len, "model.path=%s", o + 6);
        a->owned[a->n_owned++] = path;
        memmove(&a->overrides[i + 2], &a->overrides[i + 1], (a->n_overrides - i - 1) * sizeof *a->overrides);
        a->overrides[i] = "model=hf";
        a->overrides[i + 1] = path;
        a->n_overrides++;
        i++;
    }
    return LPO_OK;
}

static void *grow(void *p, size_t n, size_t elem) {
    return lpo_xrealloc_array(p, n + 1, elem, "command-line arguments");
}

lpo_status lpo_cli_parse(const lpo_cli_spec *spec, int argc, char **argv, lpo_cli_args *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < argc; i++) {
        const char *w = argv[i];
        if (!strcmp(w, "--")) {
            if (!spec->passthrough) {
                lpo_cli_args_free(out);
                return lpo_errorf(LPO_E_USAGE, "'lpo %s' does not run a program: unexpected '--'",
                                  spec->command);
            }
            out->passthrough = argv + i + 1;
            out->n_passthrough = argc - i - 1;
            break;
        }
        if (!strcmp(w, "-h")) w = "--help";
        if (w[0] == '-' && w[1] == '-') {
            char name[128];
            const char *eq = strchr(w + 2, '=');
            size_t nl = eq ? (size_t)(eq - (w + 2)) : strlen(w + 2);
            if (nl == 0 || nl >= sizeof name) {
                lpo_cli_args_free(out);
                return lpo_errorf(LPO_E_USAGE, "malformed flag '%s'", w);
            }
            memcpy(name, w + 2, nl);
            name[nl] = 0;
            const lpo_cli_flag *f = find_flag(spec, name);
            if (!f) {
                lpo_status st = unknown_flag(spec, name);
                lpo_cli_args_free(out);
                return st;
            }
            const char *val = "";
            if (f->takes_value) {
                if (eq)
                    val = eq + 1;
                else if (i + 1 < argc)
                    val = argv[++i];
                else {
                    lpo_cli_args_free(out);
                    return lpo_errorf(LPO_E_USAGE, "flag '--%s' needs a value", name);
                }
            } else if (eq) {
                lpo_cli_args_free(out);
                return lpo_errorf(LPO_E_USAGE, "flag '--%s' takes no value", name);
            }
            if (!strcmp(name, "help")) {
                out->help = 1;
            } else if (!strcmp(name, "config-dir")) {
                out->config_dirs = grow(out->config_dirs, out->n_config_dirs, sizeof *out->config_dirs);
                out->config_dirs[out->n_config_dirs++] = val;
            } else if (f->takes_value == 2 && !*val) { /* --import= would import nothing, silently */
                lpo_cli_args_free(out);
                return lpo_errorf(LPO_E_USAGE, "flag '--%s' needs a value (an empty one names nothing)",
                                  name);
            } else {
                const char *prev = f->takes_value == 1 ? lpo_cli_flag_value(out, f->name) : NULL;
                if (prev) { /* --out=a --out=b: which one was meant? */
                    lpo_status st =
                        lpo_errorf(LPO_E_USAGE, "flag '--%s' is given twice ('%s' and '%s'): give it once",
                                   name, prev, val);
                    lpo_cli_args_free(out);
                    return st;
                }
                out->flags = grow(out->flags, out->n_flags, sizeof *out->flags);
                out->flags[out->n_flags++] = (lpo_cli_kv){f->name, val};
            }
            continue;
        }
        const char *eq = strchr(w, '=');
        if (eq && is_param(spec, w, (size_t)(eq - w))) {
            // a parameter given twice (tokens=1 tokens=2) is refused: the last one silently won
            for (size_t k = 0; k < out->n_params; k++) {
                if (strlen(out->params[k].name) != (size_t)(eq - w) ||
                    strncmp(out->params[k].name, w, (size_t)(eq - w)))
                    continue;
                lpo_status st =
                    lpo_errorf(LPO_E_USAGE, "'%s=' is given twice ('%s=%s' and '%s'): give it once",
                               out->params[k].name, out->params[k].name, out->params[k].value, w);
                lpo_cli_args_free(out);
                return st;
            }
            out->params = grow(out->params, out->n_params, sizeof *out->params);
            out->params[out->n_params].name = lpo_strndup(w, (size_t)(eq - w));
            out->params[out->n_params++].value = eq + 1;
            continue;
        }
        if (spec->config && (eq || w[0] == '~')) {
            out->overrides = grow(out->overrides, out->n_overrides, sizeof *out->overrides);
            out->overrides[out->n_overrides++] = w;
            continue;
        }
        lpo_status st;
        if (eq) {
            const char *cands[64];
            size_t n = 0;
            char key[128];
            size_t kl = (size_t)(eq - w) < sizeof key ? (size_t)(eq - w) : sizeof key - 1;
            memcpy(key, w, kl);
            key[kl] = 0;
            for (size_t k = 0; k < spec->n_params && n < 64; k++) cands[n++] = spec->params[k].name;
            const char *s = lpo_suggest(key, cands, n);
            st = s ? lpo_errorf(LPO_E_USAGE, "unknown parameter '%s' (did you mean '%s'?)", key, s)
                   : lpo_errorf(LPO_E_USAGE, "unknown parameter '%s' (see 'lpo %s --help')", key,
                                spec->command);
        } else {
            st = lpo_errorf(LPO_E_USAGE, "unexpected argument '%s' (see 'lpo %s --help')", w, spec->command);
        }
        lpo_cli_args_free(out);
        return st;
    }
    return expand_model_paths(out);
}

void lpo_cli_args_free(lpo_cli_args *a) {
    for (size_t i = 0; i < a->n_owned; i++) free(a->owned[i]);
    free(a->owned);
    for (size_t i = 0; i < a->n_params; i++) free((char *)a->params[i].name);
    free(a->overrides);
    free(a->flags);
    free(a->params);
    free(a->config_dirs);
    memset(a, 0, sizeof *a);
}

const char *lpo_cli_flag_value(const lpo_cli_args *a, const char *name) {
    const char *v = NULL;
    for (size_t i = 0; i < a->n_flags; i++)
        if (!strcmp(a->flags[i].name, name)) v = a->flags[i].value; /* boolean flags may repeat */
    return v;
}

const char *lpo_cli_param_value(const lpo_cli_args *a, const char *name) {
    const char *v = NULL;
    for (size_t i = 0; i < a->n_params; i++)
        if (!strcmp(a->params[i].name, name)) v = a->params[i].value;
    return v;
}

void lpo_cli_print_usage(const lpo_cli_spec *spec, FILE *f) {
    fprintf(f, "usage: lpo %s%s%s%s%s\n\n%s\n", spec->command, spec->n_params ? " [param=value]" : "",
            spec->config ? " [group=option] [a.b=value] [+a.b=value] [~a.b]" : "", " [--flags]",
            spec->passthrough ? " [-- program args...]" : "", spec->summary);
    if (spec->n_params) {
        fprintf(f, "\nparameters:\n");
        for (size_t i = 0; i < spec->n_params; i++)
            fprintf(f, "  %-22s %s\n", spec->params[i].name, spec->params[i].help);
    }
    fprintf(f, "\nflags:\n");
    for (size_t i = 0; i < spec->n_flags; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "--%s%s", spec->flags[i].name, spec->flags[i].takes_value ? "=V" : "");
        fprintf(f, "  %-22s %s\n", buf, spec->flags[i].help);
    }
    for (size_t i = 0; i < sizeof common_flags / sizeof *common_flags; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "--%s%s", common_flags[i].name, common_flags[i].takes_value ? "=DIR" : "");
        fprintf(f, "  %-22s %s\n", buf, common_flags[i].help);
    }
    if (spec->config)
        fprintf(f, "\nconfig: `lpo config groups` lists groups and options; `lpo config show` the resolved "
                   "config.\n");
}

int lpo_cli_fail(const char *command, lpo_status st) {
    fprintf(stderr, "lpo %s: error: %s\n", command, lpo_last_error());
    return lpo_status_exit_code(st);
}

int lpo_cli_begin(const lpo_cli_spec *spec, int argc, char **argv, lpo_cli_args *args) {
    lpo_status st = lpo_cli_parse(spec, argc, argv, args);
    if (st != LPO_OK) return lpo_cli_fail(spec->command, st);
    if (args->help) {
        lpo_cli_print_usage(spec, stdout);
        lpo_cli_args_free(args);
        return LPO_EXIT_OK;
    }
    return -1;
}

void lpo_cli_out_of_memory(const char *what, size_t bytes) {
    lpo_oom_print(what, bytes);
    exit(LPO_EXIT_FAIL);
}

int lpo_cli_exit(int rc) {
    /* a failed write earlier (stdout is buffered) shows as ferror; the flush and close report the rest */
    errno = 0;
    int bad = fflush(stdout) != 0, err = bad ? errno : 0;
    bad |= ferror(stdout) != 0;
    errno = 0;
    if (fclose(stdout) != 0) {
        bad = 1;
        if (!err) err = errno;
    }
    if (bad) {
        /* a write that failed while streaming left ferror set and no errno to report */
        fprintf(stderr, "lpo: error: cannot write the output to stdout: %s\n",
                err ? strerror(err) : "a write failed (disk full or closed pipe?)");
        if (rc == LPO_EXIT_OK) rc = LPO_EXIT_FAIL;
    }
    if ((fflush(stderr) != 0 || ferror(stderr)) && rc == LPO_EXIT_OK) rc = LPO_EXIT_FAIL;
    return rc;
}

static char *command_line;

void lpo_cli_set_command_line(int argc, char **argv) {
    lpo_strbuf sb = {0};
    for (int i = 0; i < argc; i++) {
        const char *w = argv[i];
        if (i) lpo_sb_puts(&sb, " ");
        if (*w && strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%~") ==
                      strlen(w)) {
            lpo_sb_puts(&sb, w);
            continue;
        }
        lpo_sb_puts(&sb, "'");
        for (; *w; w++) {
            if (*w == '\'')
                lpo_sb_puts(&sb, "'\\''");
            else
                lpo_sb_append(&sb, w, 1);
        }
        lpo_sb_puts(&sb, "'");
    }
    free(command_line);
    command_line = sb.buf;
}

const char *lpo_cli_command_line(void) {
    return command_line ? command_line : "";
}

const char **lpo_cli_with_run_dir(const lpo_cli_args *a, const char *command, const char *prog, char *buf,
                                  size_t n, size_t *n_out) {
    const char **ov = lpo_xcalloc(a->n_overrides + 2, sizeof *ov, "overrides");
    int has = 0;
    for (size_t i = 0; i < a->n_overrides; i++) {
        ov[i] = a->overrides[i];
        has |= !strncmp(a->overrides[i], "output.dir=", 11);
    }
    *n_out = a->n_overrides;
    if (has || !prog) return ov;
    const char *base = strrchr(prog, '/');
    base = base ? base + 1 : prog;
    char clean[64];
    size_t k = 0;
    for (; k < sizeof clean - 1 && base[k]; k++) /* a file-name-safe program name */
        clean[k] =
            (base[k] == '.' || base[k] == '-' || base[k] == '_' || (base[k] >= '0' && base[k] <= '9') ||
             ((base[k] | 0x20) >= 'a' && (base[k] | 0x20) <= 'z'))
                ? base[k]
                : '_';
    clean[k] = 0;
    snprintf(buf, n, "output.dir=runs/${now:%%Y%%m%%d-%%H%%M%%S}-%s-%s", command, k ? clean : "program");
    ov[(*n_out)++] = buf;
    return ov;
}
