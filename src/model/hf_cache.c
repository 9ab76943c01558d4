/* HF hub cache lookup: "Org/Name" -> <cache>/models--Org--Name/snapshots/<revision>, never downloading.
 * The cache root is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
 * ~/.cache/huggingface/hub (the huggingface_hub order); the revision is refs/main when it names an existing
 * snapshot, else the most recently modified snapshot. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lpo/core.h"
#include "lpo/model.h"

/* snprintf that reports truncation (paths that do not fit are treated as absent). */
static int fmt(char *out, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));
static int fmt(char *out, size_t n, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int r = vsnprintf(out, n, f, ap);
    va_end(ap);
    return r >= 0 && (size_t)r < n;
}

static int valid_repo_id(const char *id) {
    const char *slash = strchr(id, '/');
    if (!slash || slash == id || !slash[1] || strchr(slash + 1, '/')) return 0;
    if (strstr(id, "..")) return 0;
    for (const char *p = id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_' || *p == '.' || *p == '/'))
            return 0;
    return 1;
}

/* The snapshot folder of one repo folder, or 0. */
static int find_snapshot(const char *repo_dir, char *out, size_t out_size) {
    char p[4096], ref[256] = "";
    if (!fmt(p, sizeof p, "%s/refs/main", repo_dir)) return 0;
    int fd;
    if (lpo_open_regular(p, &fd) == LPO_OK) { /* refs/main: a commit hash (a FIFO there never blocks) */
        FILE *f = fdopen(fd, "r");
        if (f && fgets(ref, sizeof ref, f)) ref[strcspn(ref, " \r\n")] = 0;
        if (f)
            fclose(f);
        else
            close(fd);
        if (ref[0] && !strchr(ref, '/') && strcmp(ref, ".") && strcmp(ref, "..")) {
            if (fmt(p, sizeof p, "%s/snapshots/%s", repo_dir, ref) && lpo_is_dir(p)) {
                return fmt(out, out_size, "%s", p);
            }
        }
    }
    if (!fmt(p, sizeof p, "%s/snapshots", repo_dir)) return 0;
    DIR *d = opendir(p);
    if (!d) return 0;
    struct dirent *e;
    char best[4096] = "";
    struct timespec best_t = {0, 0};
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char q[4096];
        if (!fmt(q, sizeof q, "%s/%s", p, e->d_name)) continue;
        struct stat st;
        if (stat(q, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (!best[0] || st.st_mtim.tv_sec > best_t.tv_sec ||
            (st.st_mtim.tv_sec == best_t.tv_sec && st.st_mtim.tv_nsec > best_t.tv_nsec)) {
            fmt(best, sizeof best, "%s", q);
            best_t = st.st_mtim;
        }
    }
    closedir(d);
    if (!best[0]) return 0;
    return fmt(out, out_size, "%s", best);
}

lpo_status lpo_hf_cache_resolve(const char *repo_id, char *out, size_t out_size) {
    if (!repo_id || !valid_repo_id(repo_id))
        return lpo_errorf(LPO_E_INVALID, "'%s' is not an HF repo id of the form Org/Name",
                          repo_id ? repo_id : "");
    char roots[4][2048];
    int n = 0;
    const char *v;
    if ((v = getenv("HF_HUB_CACHE")) && *v) snprintf(roots[n++], sizeof roots[0], "%s", v);
    if ((v = getenv("HF_HOME")) && *v) snprintf(roots[n++], sizeof roots[0], "%s/hub", v);
    if ((v = getenv("XDG_CACHE_HOME")) && *v) snprintf(roots[n++], sizeof roots[0], "%s/huggingface/hub", v);
    if ((v = getenv("HOME")) && *v) snprintf(roots[n++], sizeof roots[0], "%s/.cache/huggingface/hub", v);
    char folder[512];
    snprintf(folder, sizeof folder, "models--%s", repo_id);
    char *slash = strchr(folder, '/');
    if (slash) {
        memmove(slash + 2, slash + 1, strlen(slash + 1) + 1);
        slash[0] = slash[1] = '-';
    }
    lpo_strbuf looked = {0};
    for (int i = 0; i < n; i++) {
        char dir[4096];
        fmt(dir, sizeof dir, "%s/%s", roots[i], folder);
        if (find_snapshot(dir, out, out_size)) {
            lpo_sb_free(&looked);
            return LPO_OK;
        }
        lpo_sb_printf(&looked, "%s%s", i ? ", " : "", dir);
    }
    lpo_status st =
        lpo_errorf(LPO_E_NOT_FOUND,
                   "model '%s' is not in the local HF hub cache (looked in: %s); lpo never downloads: "
                   "fetch it first (e.g. `huggingface-cli download %s`) or give a folder path",
                   repo_id, looked.buf ? looked.buf : "no cache root: HOME is unset", repo_id);
    lpo_sb_free(&looked);
    return st;
}
