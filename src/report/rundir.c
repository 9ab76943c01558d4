/* Run directories: output.dir of the composed config, created fresh (a non-empty directory is never
 * reused: "-2", "-3"... are appended), holding config.yaml, cmd.txt and env.json, then the command's own
 * artifacts. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lpo/core.h"
#include "lpo/hw.h"
#include "lpo/report.h"

struct lpo_rundir {
    char path[PATH_MAX];
};

static int dir_is_empty(const char *path) {
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
    closedir(d);
    return empty;
}

/* Makes dir or, when it exists and is not empty, dir-2, dir-3, ...; the name used goes into out. */
static lpo_status make_fresh_dir(const char *dir, char *out, size_t n) {
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        lpo_status st = lpo_mkdirs(parent);
        if (st) return st;
    }
    // try dir, dir-2, dir-3, ...
    for (int k = 1; k <= 1000; k++) {
        int w = k == 1 ? snprintf(out, n, "%s", dir) : snprintf(out, n, "%s-%d", dir, k);
        if (w < 0 || (size_t)w >= n)
            return lpo_errorf(LPO_E_CONFIG, "run directory name '%s' is too long", dir);
        if (mkdir(out, 0755) == 0) return LPO_OK;
        if (errno != EEXIST)
            return lpo_errorf(LPO_E_IO, "cannot create run directory '%s': %s", out, strerror(errno));
        if (k == 1 && !lpo_is_dir(out)) /* a file (or /dev/null) is not a run directory to suffix */
            return lpo_errorf(LPO_E_IO, "cannot create run directory '%s': it exists and is not a directory",
                              out);
        if (lpo_is_dir(out) && dir_is_empty(out)) return LPO_OK;
    }
    return lpo_errorf(LPO_E_IO, "cannot create run directory '%s': 1000 directories of that name exist", dir);
}

/* A run directory named "...-null" (output.dir's ${model.name} of a model=hf without model.name): the
 * model's file or folder stem instead ("hf:Org/SmolLM2-135M" -> "SmolLM2-135M", "x/m.Q4.gguf" -> "m.Q4"),
 * file-name safe; dir unchanged when it does not end so or there is no model.path. */
static void name_null_model(const lpo_node *cfg, char *dir, size_t n) {
    const size_t dl = strlen(dir);
    const char *path = NULL;
    if (dl < 5 || strcmp(dir + dl - 5, "-null") || lpo_cfg_str(cfg, "model.path", &path) || !path || !*path) {
        lpo_error_clear();
        return;
    }
    char stem[128];
    size_t pl = strlen(path);
    while (pl > 1 && path[pl - 1] == '/') pl--;
    const char *b = path + pl;
    while (b > path && b[-1] != '/' && b[-1] != ':') b--;
    size_t k = 0;
    for (; b + k < path + pl && k < sizeof stem - 1; k++)
        stem[k] = (isalnum((unsigned char)b[k]) || b[k] == '.' || b[k] == '-' || b[k] == '_') ? b[k] : '_';
    stem[k] = 0;
    static const char *const exts[] = {".gguf", ".safetensors"};
    for (size_t i = 0; i < 2; i++) {
        const size_t el = strlen(exts[i]);
        if (k > el && !strcmp(stem + k - el, exts[i])) stem[k - el] = 0;
    }
    if (*stem && dl - 4 + strlen(stem) < n) snprintf(dir + dl - 4, n - (dl - 4), "%s", stem);
}

lpo_status lpo_rundir_create(const lpo_node *cfg, const char *command_line, lpo_rundir **out) {
    *out = NULL;
    if (!command_line) command_line = "";
    const char *dir;
    lpo_status st = lpo_cfg_str(cfg, "output.dir", &dir);
    if (st) return lpo_error_context(st, "run directory");
    if (!*dir) return lpo_errorf(LPO_E_CONFIG, "run directory: output.dir is empty");
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    /* "/", ".", ".." (or a path ending in them) name a directory that exists and is not lpo's to fill:
     * a suffix would give "/-2", ".-2" */
    const char *last = dir + dl;
    while (last > dir && last[-1] != '/') last--;
    if ((dl == 1 && dir[0] == '/') || (dir + dl - last == 1 && last[0] == '.') ||
        (dir + dl - last == 2 && !strncmp(last, "..", 2)))
        return lpo_errorf(LPO_E_CONFIG,
                          "run directory: output.dir='%s' names the root, the current or the parent folder; "
                          "give a new folder name (e.g. output.dir=runs/my-run)",
                          dir);
    if (dl >= PATH_MAX - 16) return lpo_errorf(LPO_E_CONFIG, "run directory: output.dir is too long");
    char clean[PATH_MAX];
    snprintf(clean, sizeof clean, "%.*s", (int)dl, dir);
    name_null_model(cfg, clean, sizeof clean);
    lpo_rundir *rd = lpo_xcalloc(1, sizeof *rd, "a run directory");
    st = make_fresh_dir(clean, rd->path, sizeof rd->path);
    if (st) {
        free(rd);
        return st;
    }
    /* config.yaml: the resolved configuration */
    lpo_strbuf sb = {0};
    /* a header comment: every line of the command line commented (a value may hold newlines) */
    lpo_sb_puts(&sb, "# lpo resolved configuration of:\n");
    lpo_cfg_yaml_comment(&sb, command_line);
    lpo_cfg_dump_yaml_resolved(cfg, &sb);
    st = lpo_rundir_write(rd, "config.yaml", sb.buf, sb.len);
    lpo_sb_free(&sb);
    /* cmd.txt: the exact command line */
    if (!st) {
        lpo_sb_puts(&sb, command_line);
        lpo_sb_puts(&sb, "\n");
        st = lpo_rundir_write(rd, "cmd.txt", sb.buf, sb.len);
        lpo_sb_free(&sb);
    }
    /* env.json: as `lpo env --json` */
    if (!st) {
        lpo_env_info *env = lpo_xmalloc(sizeof *env, "environment information");
        lpo_env_collect(env, 0);
        lpo_json j;
        lpo_json_init_buf(&j, &sb, 1);
        lpo_env_write_json(env, &j);
        free(env);
        st = lpo_json_finish(&j);
        if (!st) st = lpo_rundir_write(rd, "env.json", sb.buf, sb.len);
        lpo_sb_free(&sb);
    }
    if (st) {
        free(rd);
        return st;
    }
    *out = rd;
    return LPO_OK;
}

lpo_status lpo_rundir_reopen(const char *dir, lpo_rundir **out, lpo_node **cfg) {
    *out = NULL;
    *cfg = NULL;
    char p[PATH_MAX + 32];
    if (!lpo_is_dir(dir)) return lpo_errorf(LPO_E_NOT_FOUND, "%s: no such directory", dir);
    if (strlen(dir) >= PATH_MAX - 16) return lpo_errorf(LPO_E_INVALID, "%s: the path is too long", dir);
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    if (!lpo_path_exists(p))
        return lpo_errorf(LPO_E_NOT_FOUND,
                          "%s holds no config.yaml: not a run directory lpo made (nothing was written)", dir);
    lpo_status st = lpo_yaml_load_file(p, cfg);
    if (st) return lpo_error_context(st, "%s: not a run directory lpo can re-render", dir);
    lpo_rundir *rd = lpo_xcalloc(1, sizeof *rd, "a run directory");
    snprintf(rd->path, sizeof rd->path, "%s", dir);
    *out = rd;
    return LPO_OK;
}

const char *lpo_rundir_path(const lpo_rundir *rd) {
    return rd->path;
}

const char *lpo_rundir_file(const lpo_rundir *rd, const char *name, char *buf, size_t n) {
    return lpo_path_join(buf, n, rd->path, name);
}

lpo_status lpo_rundir_open(const lpo_rundir *rd, const char *name, const char *mode, FILE **f) {
    char p[PATH_MAX + 256];
    lpo_rundir_file(rd, name, p, sizeof p);
    *f = NULL;
    int flags = mode[0] == 'a' ? O_APPEND : mode[0] == 'w' ? O_TRUNC : -1;
    if (flags < 0 || strchr(mode, '+'))
        return lpo_errorf(LPO_E_INVALID, "run directory file '%s': mode '%s' (use \"w\" or \"a\")", p, mode);
    /* O_NOFOLLOW: a link planted in the run directory is not followed */
    int fd = open(p, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | flags, 0666);
    if (fd >= 0) *f = fdopen(fd, mode[0] == 'a' ? "a" : "w");
    if (!*f) {
        int err = errno;
        if (fd >= 0) close(fd);
        return lpo_errorf(LPO_E_IO, "cannot open '%s': %s", p, strerror(err));
    }
    return LPO_OK;
}

lpo_status lpo_rundir_write(const lpo_rundir *rd, const char *name, const void *data, size_t len) {
    char p[PATH_MAX + 256];
    return lpo_write_file(lpo_rundir_file(rd, name, p, sizeof p), data, len);
}

lpo_status lpo_rundir_write_table(const lpo_rundir *rd, const char *base, const lpo_table *t) {
    static const char *const ext[] = {".md", ".csv", ".json"};
    // one file per format
    for (int i = 0; i < 3; i++) {
        char name[512], p[PATH_MAX + 600];
        snprintf(name, sizeof name, "%s%s", base, ext[i]);
        lpo_status st = lpo_table_save(t, lpo_rundir_file(rd, name, p, sizeof p));
        if (st) return st;
    }
    return LPO_OK;
}

void lpo_rundir_announce(const lpo_rundir *rd, FILE *f) {
    fprintf(f, "run directory: %s\n", rd->path);
}

void lpo_rundir_close(lpo_rundir *rd) {
    free(rd);
}
