/* lpo deep's SVG pictures, hand-written: the kernels on the roofline (log-log: FLOP per DRAM byte against
 * TFLOP/s; one roof per precision the kernels use, the DRAM and L2 slopes, points coloured by bound class)
 * and histograms of a metric across kernels. Kept apart until lpo's shared plotting module lands (then
 * the roofline goes through it). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "deep/deep_internal.h"

static const char *class_color(lpo_deep_bound b) {
    switch (b) {
    case LPO_DEEP_MEMORY: return "#1f77b4";
    case LPO_DEEP_COMPUTE: return "#d62728";
    case LPO_DEEP_LATENCY: return "#ff7f0e";
    default: return "#7f7f7f";
    }
}

static void esc(lpo_strbuf *o, const char *s) {
    for (; s && *s; s++) { /* XML specials, control characters dropped */
        switch (*s) {
        case '&': lpo_sb_puts(o, "&amp;"); break;
        case '<': lpo_sb_puts(o, "&lt;"); break;
        case '>': lpo_sb_puts(o, "&gt;"); break;
        case '"': lpo_sb_puts(o, "&quot;"); break;
        default:
            if ((unsigned char)*s >= 0x20) lpo_sb_append(o, s, 1);
        }
    }
}

static void text(lpo_strbuf *o, double x, double y, double size, const char *anchor, const char *color,
                 const char *s) {
    lpo_sb_printf(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.1f\" text-anchor=\"%s\" fill=\"%s\">", x, y, size,
                  anchor, color);
    esc(o, s);
    lpo_sb_puts(o, "</text>\n");
}

static void line(lpo_strbuf *o, double x1, double y1, double x2, double y2, const char *color, double w,
                 const char *dash) {
    lpo_sb_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"%s%s%s/>\n",
                  x1, y1, x2, y2, color, w, dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
}

static void begin(lpo_strbuf *o, int w, int h) {
    lpo_sb_printf(o,
                  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                  "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
                  "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
                  w, h, w, h, w, h);
}

/* ---- roofline --------------------------------------------------------------------------------------------- */
enum { RW = 960, RH = 600, ML = 80, MR = 200, MT = 60, MB = 60 };

typedef struct {
    double x0, x1, y0, y1; /* log10 ranges */
} axes;

static double px(const axes *a, double v) {
    return ML + (log10(v) - a->x0) / (a->x1 - a->x0) * (RW - ML - MR);
}
static double py(const axes *a, double v) {
    return RH - MB - (log10(v) - a->y0) / (a->y1 - a->y0) * (RH - MT - MB);
}

void deep_roofline_svg(const lpo_deep_analysis *an, const char *title, lpo_strbuf *o) {
    /* roofs of the precisions the kernels use */
    double roofs[LPO_DEEP_N_PREC] = {0};
    double lo_i = INFINITY, hi_i = 0, lo_p = INFINITY, hi_p = 0;
    double dram = 0, l2 = 0;
    for (size_t i = 0; i < an->n; i++) { /* ranges over roofs and points */
        const lpo_deep_kernel *k = &an->k[i];
        if (k->dram_peak > dram) dram = k->dram_peak;
        if (k->l2_peak > l2) l2 = k->l2_peak;
        if (k->prec >= 0 && k->roof_flops > 0) roofs[k->prec] = k->roof_flops;
        if (k->ai_dram > 0 && k->flops_per_s > 0) {
            lo_i = fmin(lo_i, k->ai_dram);
            hi_i = fmax(hi_i, k->ai_dram);
            lo_p = fmin(lo_p, k->flops_per_s);
            hi_p = fmax(hi_p, k->flops_per_s);
        }
    }
    for (int p = 0; p < LPO_DEEP_N_PREC; p++) { /* ridges and roofs inside the axes */
        if (roofs[p] <= 0) continue;
        hi_p = fmax(hi_p, roofs[p]);
        lo_p = fmin(lo_p, roofs[p] / 1e3);
        if (dram > 0) {
            hi_i = fmax(hi_i, roofs[p] / dram * 4);
            lo_i = fmin(lo_i, roofs[p] / dram / 1e3);
        }
    }
    if (!(lo_i < INFINITY) || hi_i <= 0) {
        lo_i = 0.01;
        hi_i = 1000;
    }
    if (!(lo_p < INFINITY) || hi_p <= 0) {
        lo_p = 1e9;
        hi_p = 1e15;
    }
    axes a = {floor(log10(lo_i)) - 0.0, ceil(log10(hi_i)), floor(log10(lo_p)), ceil(log10(hi_p)) + 0.2};
    if (a.x1 - a.x0 < 2) a.x1 = a.x0 + 2;
    if (a.y1 - a.y0 < 2) a.y0 = a.y1 - 2;
    begin(o, RW, RH);
    text(o, RW / 2.0, 26, 16, "middle", "black", title ? title : "kernels on the roofline");
    char sub[400];
    snprintf(sub, sizeof sub, "ceilings: %.200s", an->peaks.label[0] ? an->peaks.label : "ncu's peaks");
    text(o, RW / 2.0, 44, 10, "middle", "#555", sub);
    // decade grid and labels
    for (int e = (int)a.x0; e <= (int)a.x1; e++) {
        double x = px(&a, pow(10, e));
        line(o, x, MT, x, RH - MB, "#e5e5e5", 1, NULL);
        char b[32];
        snprintf(b, sizeof b, "%g", pow(10, e));
        text(o, x, RH - MB + 16, 10, "middle", "#333", b);
    }
    for (int e = (int)a.y0; e <= (int)floor(a.y1); e++) {
        double y = py(&a, pow(10, e));
        line(o, ML, y, RW - MR, y, "#e5e5e5", 1, NULL);
        char b[32];
        snprintf(b, sizeof b, "%g", pow(10, e) / 1e12);
        text(o, ML - 6, y + 4, 10, "end", "#333", b);
    }
    text(o, (ML + RW - MR) / 2.0, RH - 18, 12, "middle", "black", "arithmetic intensity (FLOP per DRAM byte)");
    lpo_sb_printf(o, "<text x=\"20\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 20 %d)\">"
                     "achieved TFLOP/s</text>\n",
                  RH / 2, RH / 2);
    // roofs with their slopes: DRAM solid, L2 dashed
    int row = 0;
    for (int p = 0; p < LPO_DEEP_N_PREC; p++) {
        if (roofs[p] <= 0) continue;
        char b[96];
        const double xl = pow(10, a.x0), xr = pow(10, a.x1);
        const double bw[2] = {dram, l2};
        for (int s = 0; s < 2; s++) { /* DRAM, then L2 */
            if (bw[s] <= 0) continue;
            double ridge = roofs[p] / bw[s];
            double xs = fmax(xl, pow(10, a.y0) / bw[s]);
            line(o, px(&a, xs), py(&a, xs * bw[s]), px(&a, fmin(ridge, xr)), py(&a, fmin(ridge, xr) * bw[s]),
                 s ? "#2ca02c" : "#1f77b4", 1.6, s ? "6,4" : NULL);
        }
        double ridge = dram > 0 ? roofs[p] / dram : xl;
        line(o, px(&a, fmax(ridge, xl)), py(&a, roofs[p]), px(&a, xr), py(&a, roofs[p]), "#444", 1.6, NULL);
        snprintf(b, sizeof b, "%s %.0f TFLOP/s", lpo_deep_prec_name((lpo_deep_prec)p), roofs[p] / 1e12);
        text(o, px(&a, xr) - 4, py(&a, roofs[p]) - 4 - 0 * row, 10, "end", "#444", b);
        row++;
    }
    // the points, each kernel with a hover title
    for (size_t i = 0; i < an->n; i++) {
        const lpo_deep_kernel *k = &an->k[i];
        if (!(k->ai_dram > 0 && k->flops_per_s > 0)) continue;
        lpo_sb_printf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"%s\" stroke=\"black\" stroke-width=\"0.6\"><title>",
                      px(&a, k->ai_dram), py(&a, k->flops_per_s), class_color(k->bound));
        char b[128];
        snprintf(b, sizeof b, "#%zu %s-bound: %.3g TFLOP/s at %.3g FLOP/B: ", i + 1, lpo_deep_bound_name(k->bound),
                 k->flops_per_s / 1e12, k->ai_dram);
        esc(o, b);
        esc(o, k->name);
        lpo_sb_puts(o, "</title></circle>\n");
        snprintf(b, sizeof b, "%zu", i + 1);
        text(o, px(&a, k->ai_dram) + 8, py(&a, k->flops_per_s) + 4, 10, "start", "black", b);
    }
    // legend
    const double lx = RW - MR + 16;
    double ly = MT + 10;
    static const lpo_deep_bound cls[] = {LPO_DEEP_MEMORY, LPO_DEEP_COMPUTE, LPO_DEEP_LATENCY, LPO_DEEP_UNKNOWN};
    for (size_t c = 0; c < 4; c++, ly += 18) {
        lpo_sb_printf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"/>\n", lx, ly - 4, class_color(cls[c]));
        char b[48];
        snprintf(b, sizeof b, "%s-bound", lpo_deep_bound_name(cls[c]));
        text(o, lx + 10, ly, 11, "start", "black", b);
    }
    line(o, lx - 6, ly + 4, lx + 6, ly + 4, "#1f77b4", 1.6, NULL);
    char b[96];
    snprintf(b, sizeof b, "DRAM %.0f GB/s", dram / 1e9);
    text(o, lx + 10, ly + 8, 11, "start", "black", dram > 0 ? b : "DRAM: unknown");
    ly += 18;
    line(o, lx - 6, ly + 4, lx + 6, ly + 4, "#2ca02c", 1.6, "6,4");
    snprintf(b, sizeof b, "L2 %.0f GB/s", l2 / 1e9);
    text(o, lx + 10, ly + 8, 11, "start", "black", l2 > 0 ? b : "L2: unknown");
    ly += 26;
    for (size_t i = 0; i < an->n && i < 20; i++, ly += 14) { /* numbered kernels */
        snprintf(b, sizeof b, "%zu: %.26s", i + 1, an->k[i].top && an->k[i].top->base ? an->k[i].top->base : an->k[i].name);
        text(o, lx - 6, ly, 9, "start", "#333", b);
    }
    lpo_sb_puts(o, "</svg>\n");
}

/* ---- histogram ---------------------------------------------------------------------------------------------- */
void deep_histogram_svg(const char *metric, const char *unit, const double *v, size_t n, lpo_strbuf *o) {
    enum { W = 640, H = 400, L = 60, R = 20, T = 50, B = 60, BINS = 10 };
    double lo = INFINITY, hi = -INFINITY;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) { /* range of the finite values */
        if (!isfinite(v[i])) continue;
        lo = fmin(lo, v[i]);
        hi = fmax(hi, v[i]);
        m++;
    }
    const int pct = unit && !strcmp(unit, "%");
    if (pct) {
        lo = 0;
        hi = fmax(100, hi);
    } else if (!m) {
        lo = 0;
        hi = 1;
    } else if (hi <= lo) {
        hi = lo + (lo != 0 ? fabs(lo) * 0.1 : 1);
    }
    size_t count[BINS] = {0}, top = 1;
    for (size_t i = 0; i < n; i++) { /* bin of each value (the last bin is closed) */
        if (!isfinite(v[i])) continue;
        int b = (int)((v[i] - lo) / (hi - lo) * BINS);
        if (b >= BINS) b = BINS - 1;
        if (b < 0) b = 0;
        if (++count[b] > top) top = count[b];
    }
    begin(o, W, H);
    char b[256];
    snprintf(b, sizeof b, "%s across %zu kernels", metric, m);
    text(o, W / 2.0, 26, 14, "middle", "black", b);
    const double bw = (double)(W - L - R) / BINS, ph = H - T - B;
    for (int i = 0; i < BINS; i++) { /* bars, with counts on top */
        double h = ph * (double)count[i] / (double)top;
        lpo_sb_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#1f77b4\" stroke=\"white\"/>\n",
                      L + i * bw, T + ph - h, bw, h);
        if (count[i]) {
            snprintf(b, sizeof b, "%zu", count[i]);
            text(o, L + (i + 0.5) * bw, T + ph - h - 4, 10, "middle", "black", b);
        }
        snprintf(b, sizeof b, "%.3g", lo + (hi - lo) * i / BINS);
        text(o, L + i * bw, H - B + 16, 9, "middle", "#333", b);
    }
    snprintf(b, sizeof b, "%.3g", hi);
    text(o, (double)(W - R), H - B + 16, 9, "middle", "#333", b);
    line(o, L, T + ph, W - R, T + ph, "black", 1, NULL);
    snprintf(b, sizeof b, "%s%s%s%s", metric, unit && *unit ? " (" : "", unit ? unit : "", unit && *unit ? ")" : "");
    text(o, (L + W - R) / 2.0, H - 20, 12, "middle", "black", b);
    lpo_sb_printf(o, "<text x=\"18\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 18 %d)\">"
                     "kernels</text>\n",
                  H / 2, H / 2);
    lpo_sb_puts(o, "</svg>\n");
}
