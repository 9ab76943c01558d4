/* Roofline plot (see include/lpo/plot.h): log-log axes spanning every roof, ridge and point; the DRAM
 * and L2 slopes (attainable TFLOP/s = GB/s x FLOP/byte / 1000) bending into one horizontal roof per dtype
 * at its ridge point; points coloured by bound class; a legend on the right. Also roofline.csv. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lpo/plot.h"

#define W   960
#define H   600
#define PX0 90.0 /* plot area */
#define PX1 730.0
#define PY0 70.0
#define PY1 520.0

typedef struct {
    double lx0, lx1, ly0, ly1; /* log10 ranges */
} axes;

static double sx(const axes *a, double x) {
    return PX0 + (log10(x) - a->lx0) / (a->lx1 - a->lx0) * (PX1 - PX0);
}
static double sy(const axes *a, double y) {
    return PY1 - (log10(y) - a->ly0) / (a->ly1 - a->ly0) * (PY1 - PY0);
}

static const char *class_color(const char *cls) {
    if (!strcmp(cls, "memory")) return "#1f77b4";
    if (!strcmp(cls, "compute")) return "#d62728";
    if (!strcmp(cls, "latency")) return "#ff7f0e";
    return "#7f7f7f";
}

static void grow(double v, double *lo, double *hi) {
    if (!(v > 0) || !isfinite(v)) return;
    if (v < *lo) *lo = v;
    if (v > *hi) *hi = v;
}

/* decade-aligned ranges covering every roof, ridge and point */
static axes compute_axes(const lpo_roofline *r) {
    double xlo = 1e30, xhi = 0, ylo = 1e30, yhi = 0;
    for (int d = 0; d < LPO_ROOF_N_GEMM; d++) {
        double roof = r->roof_tflops[d];
        if (!(roof > 0)) continue;
        grow(roof, &ylo, &yhi);
        if (r->dram_gbs > 0) grow(roof / r->dram_gbs * 1e3, &xlo, &xhi);
        if (r->l2_gbs > 0) grow(roof / r->l2_gbs * 1e3, &xlo, &xhi);
    }
    // each point
    for (size_t i = 0; i < r->n_points; i++) {
        if (!(r->points[i].intensity > 0) || !(r->points[i].tflops > 0)) continue;
        grow(r->points[i].intensity, &xlo, &xhi);
        grow(r->points[i].tflops, &ylo, &yhi);
    }
    if (xhi == 0) xlo = 0.1, xhi = 1000;
    if (yhi == 0) ylo = 0.01, yhi = 100;
    axes a;
    a.lx0 = floor(log10(xlo) - 0.3), a.lx1 = ceil(log10(xhi) + 0.3);
    a.ly0 = floor(log10(ylo) - 0.3), a.ly1 = ceil(log10(yhi) + 0.3);
    if (r->dram_gbs > 0) { /* the DRAM slope's foot at the left edge stays in view */
        double foot = pow(10, a.lx0) * r->dram_gbs * 1e-3;
        if (foot > 0 && log10(foot) < a.ly0) a.ly0 = fmax(floor(log10(foot)), a.ly1 - 8);
    }
    return a;
}

static void tick_label(char *buf, size_t n, double v) {
    if (v >= 1e4 || v < 1e-2)
        snprintf(buf, n, "1e%d", (int)lround(log10(v)));
    else
        snprintf(buf, n, "%g", v);
}

static void draw_axes(lpo_strbuf *o, const axes *a) {
    char buf[32];
    lpo_svg_rect(o, PX0, PY0, PX1 - PX0, PY1 - PY0, "white", "#444");
    // x decades with 2 and 5 minor lines
    for (int e = (int)a->lx0; e <= (int)a->lx1; e++) {
        for (int m = 1; m <= 5; m += (m == 1 ? 1 : 3)) {
            double v = m * pow(10, e), x = sx(a, v);
            if (x < PX0 - 0.1 || x > PX1 + 0.1) continue;
            lpo_svg_line(o, x, PY0, x, PY1, m == 1 ? "#ccc" : "#eee", 1, NULL);
            if (m == 1) {
                tick_label(buf, sizeof buf, v);
                lpo_svg_text(o, x, PY1 + 18, buf, 12, "middle", "#222", 0);
            }
        }
    }
    // y decades
    for (int e = (int)a->ly0; e <= (int)a->ly1; e++) {
        for (int m = 1; m <= 5; m += (m == 1 ? 1 : 3)) {
            double v = m * pow(10, e), y = sy(a, v);
            if (y < PY0 - 0.1 || y > PY1 + 0.1) continue;
            lpo_svg_line(o, PX0, y, PX1, y, m == 1 ? "#ccc" : "#eee", 1, NULL);
            if (m == 1) {
                tick_label(buf, sizeof buf, v);
                lpo_svg_text(o, PX0 - 8, y + 4, buf, 12, "end", "#222", 0);
            }
        }
    }
    lpo_svg_text(o, (PX0 + PX1) / 2, PY1 + 45, "arithmetic intensity (FLOP / DRAM byte)", 14, "middle",
                 "#000", 0);
    lpo_svg_text(o, 30, (PY0 + PY1) / 2, "attainable TFLOP/s", 14, "middle", "#000", -90);
}

/* the slope y = gbs * x / 1000 from the left edge to the highest roof's ridge, labelled along it */
static void draw_slope(lpo_strbuf *o, const axes *a, double gbs, double top, const char *label,
                       const char *dash) {
    double x0 = pow(10, a->lx0), y0 = x0 * gbs * 1e-3;
    if (y0 < pow(10, a->ly0)) y0 = pow(10, a->ly0), x0 = y0 / (gbs * 1e-3);
    double x1 = top / (gbs * 1e-3);
    double X0 = sx(a, x0), Y0 = sy(a, y0), X1 = sx(a, x1), Y1 = sy(a, top);
    lpo_svg_line(o, X0, Y0, X1, Y1, "#333", 2, dash);
    double ang = atan2(Y1 - Y0, X1 - X0) * 180 / M_PI;
    double t = 0.35; /* a third of the way up, just above the line */
    lpo_svg_text(o, X0 + t * (X1 - X0), Y0 + t * (Y1 - Y0) - 6, label, 12, "middle", "#333", ang);
}

void lpo_roofline_svg(const lpo_roofline *r, lpo_strbuf *o) {
    axes a = compute_axes(r);
    lpo_svg_begin(o, W, H);
    lpo_svg_text(o, PX0, 28, r->title[0] ? r->title : "roofline", 18, "start", "#000", 0);
    if (r->subtitle[0]) lpo_svg_text(o, PX0, 50, r->subtitle, 11, "start", "#555", 0);
    draw_axes(o, &a);
    double top = 0;
    for (int d = 0; d < LPO_ROOF_N_GEMM; d++) top = fmax(top, r->roof_tflops[d]);
    char buf[160];
    if (top > 0 && r->dram_gbs > 0) {
        snprintf(buf, sizeof buf, "DRAM %.0f GB/s%s%s%s", r->dram_gbs, r->dram_name[0] ? " (" : "",
                 r->dram_name, r->dram_name[0] ? ")" : "");
        draw_slope(o, &a, r->dram_gbs, top, buf, NULL);
    }
    if (top > 0 && r->l2_gbs > 0) {
        snprintf(buf, sizeof buf, "L2 %.0f GB/s", r->l2_gbs);
        draw_slope(o, &a, r->l2_gbs, top, buf, "6,4");
    }
    // each distinct compute roof (dtypes of equal peak share one line and label): from its ridge on the
    // DRAM slope to the right edge, labelled at the right
    double last_label_y = -1e9, last_ridge_x = -1e9, last_ridge_y = -1e9;
    for (int d = LPO_ROOF_N_GEMM - 1; d >= 0; d--) {
        double roof = r->roof_tflops[d];
        int dup = 0;
        for (int e = d + 1; e < LPO_ROOF_N_GEMM; e++) dup |= r->roof_tflops[e] == roof;
        if (!(roof > 0) || dup) continue;
        double ridge = r->dram_gbs > 0 ? roof / r->dram_gbs * 1e3 : pow(10, a.lx0);
        double y = sy(&a, roof), xr = sx(&a, fmax(ridge, pow(10, a.lx0)));
        lpo_svg_line(o, xr, y, PX1, y, "#333", 2, NULL);
        if (r->dram_gbs > 0) {
            lpo_svg_circle(o, xr, y, 3.5, "#333", NULL);
            snprintf(buf, sizeof buf, "%.3g", ridge);
            /* a ridge label too close to the previous one (roofs a few % apart) is left out */
            if (fabs(xr - last_ridge_x) > 24 || fabs(y - last_ridge_y) > 12) {
                lpo_svg_text(o, xr, y + 14, buf, 10, "middle", "#555", 0);
                last_ridge_x = xr, last_ridge_y = y;
            }
        }
        double ly = y + 4;
        if (fabs(ly - last_label_y) < 13) ly = last_label_y + 13; /* labels of close roofs do not overlap */
        last_label_y = ly;
        size_t len = 0;
        buf[0] = 0;
        // names of every dtype at this peak, lowest first
        for (int e = 0; e <= d; e++)
            if (r->roof_tflops[e] == roof)
                len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", len ? "/" : "",
                                        lpo_roof_name((lpo_roof)e));
        int only_int = d == LPO_ROOF_INT8 && len == strlen("int8");
        snprintf(buf + len, sizeof buf - len, " %.4g %s", roof,
                 only_int             ? "TOP/s"
                 : d == LPO_ROOF_INT8 ? "T(FL)OP/s"
                                      : "TFLOP/s");
        lpo_svg_text(o, PX1 + 6, ly, buf, 12, "start", "#222", 0);
    }
    // points, coloured by class; those without FLOPs cannot sit on a log axis
    size_t skipped = 0;
    for (size_t i = 0; i < r->n_points; i++) {
        const lpo_roof_point *p = &r->points[i];
        if (!(p->intensity > 0) || !(p->tflops > 0)) {
            skipped++;
            continue;
        }
        char title[200];
        snprintf(title, sizeof title, "%s: %.3g FLOP/B, %.3g TFLOP/s, %s-bound", p->label, p->intensity,
                 p->tflops, p->cls);
        lpo_svg_circle(o, sx(&a, p->intensity), sy(&a, p->tflops), 5.5, class_color(p->cls), title);
    }
    /* legend */
    double lx = PX1 + 20, ly = PY1 - 100;
    static const char *const classes[] = {"memory", "compute", "latency", "unknown"};
    lpo_svg_text(o, lx, ly - 10, "bound class", 12, "start", "#000", 0);
    for (int i = 0; i < 4; i++) {
        lpo_svg_circle(o, lx + 6, ly + 8 + 18 * i, 5.5, class_color(classes[i]), NULL);
        lpo_svg_text(o, lx + 18, ly + 12 + 18 * i, classes[i], 12, "start", "#222", 0);
    }
    if (skipped) {
        snprintf(buf, sizeof buf, "%zu point%s without FLOPs not drawn", skipped, skipped > 1 ? "s" : "");
        lpo_svg_text(o, PX0, PY1 + 62, buf, 11, "start", "#555", 0);
    }
    if (!(top > 0))
        lpo_svg_text(o, (PX0 + PX1) / 2, PY0 + 30, "no ceilings known: run lpo ceilings", 14, "middle",
                     "#a00", 0);
    lpo_svg_end(o);
}

void lpo_roofline_csv(const lpo_roofline *r, lpo_strbuf *o) {
    lpo_sb_puts(o, "kind,label,intensity,tflops,class\n");
    if (r->dram_gbs > 0) lpo_sb_printf(o, "slope,DRAM %s,,%.6g,\n", r->dram_name, r->dram_gbs);
    if (r->l2_gbs > 0) lpo_sb_printf(o, "slope,L2,,%.6g,\n", r->l2_gbs);
    // roofs and their ridges
    for (int d = 0; d < LPO_ROOF_N_GEMM; d++) {
        double roof = r->roof_tflops[d];
        if (!(roof > 0)) continue;
        lpo_sb_printf(o, "roof,%s,,%.6g,\n", lpo_roof_name((lpo_roof)d), roof);
        if (r->dram_gbs > 0)
            lpo_sb_printf(o, "ridge,%s,%.6g,%.6g,\n", lpo_roof_name((lpo_roof)d), roof / r->dram_gbs * 1e3,
                          roof);
    }
    for (size_t i = 0; i < r->n_points; i++) {
        const lpo_roof_point *p = &r->points[i];
        lpo_sb_puts(o, "point,\"");
        for (const char *c = p->label; *c; c++) lpo_sb_append(o, *c == '"' ? "\"\"" : c, *c == '"' ? 2 : 1);
        lpo_sb_printf(o, "\",%.6g,%.6g,%s\n", p->intensity, p->tflops, p->cls);
    }
}

void lpo_roofline_from_peaks(lpo_roofline *r, const lpo_peaks *p) {
    for (int d = 0; d < LPO_ROOF_N_GEMM; d++) r->roof_tflops[d] = p->tflops[d];
    r->dram_gbs = p->dram_gbs;
    snprintf(r->dram_name, sizeof r->dram_name, "%s", p->dram_name);
    r->l2_gbs = p->l2_gbs;
    lpo_roofline_set_subtitle(r, p);
}

void lpo_roofline_set_subtitle(lpo_roofline *r, const lpo_peaks *p) {
    snprintf(r->subtitle, sizeof r->subtitle, "ceilings: %.380s", p->label[0] ? p->label : "none");
    char *path = strstr(r->subtitle, ", /"); /* the cache path makes the line too long for the plot */
    if (path) *path = 0;
}
