/* Histogram plot (see include/lpo/plot.h): values of one metric across items (kernels) in ten equal bins,
 * 0-100 for percentages, else from the smallest to the largest value; each bar's count on top. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lpo/plot.h"

#define HW   640
#define HH   400
#define HX0  60.0 /* plot area */
#define HX1  620.0
#define HY0  50.0
#define HY1  340.0
#define BINS 10

void lpo_histogram_svg(const lpo_histogram *h, lpo_strbuf *o) {
    double lo = INFINITY, hi = -INFINITY;
    size_t m = 0;
    for (size_t i = 0; i < h->n; i++) { // range of the finite values
        if (!isfinite(h->values[i])) continue;
        lo = fmin(lo, h->values[i]);
        hi = fmax(hi, h->values[i]);
        m++;
    }
    const int pct = h->unit && !strcmp(h->unit, "%");
    if (pct) {
        lo = fmin(0, lo);
        hi = fmax(100, hi);
    } else if (!m) {
        lo = 0;
        hi = 1;
    } else if (hi <= lo) {
        hi = lo + (lo != 0 ? fabs(lo) * 0.1 : 1);
    }
    size_t count[BINS] = {0}, top = 1;
    for (size_t i = 0; i < h->n; i++) { // bin of each value (the last bin is closed)
        if (!isfinite(h->values[i])) continue;
        int b = (int)((h->values[i] - lo) / (hi - lo) * BINS);
        b = b < 0 ? 0 : b >= BINS ? BINS - 1 : b;
        if (++count[b] > top) top = count[b];
    }
    char buf[300];
    lpo_svg_begin(o, HW, HH);
    snprintf(buf, sizeof buf, "%.200s across %zu %s", h->metric, m, h->items ? h->items : "items");
    lpo_svg_text(o, HW / 2.0, 26, buf, 14, "middle", "#222", 0);
    const double bw = (HX1 - HX0) / BINS, ph = HY1 - HY0;
    for (int i = 0; i < BINS; i++) { // bars with their counts on top, bin edges below
        const double bh = ph * (double)count[i] / (double)top;
        lpo_svg_rect(o, HX0 + i * bw, HY1 - bh, bw, bh, "#1f77b4", "white");
        if (count[i]) {
            snprintf(buf, sizeof buf, "%zu", count[i]);
            lpo_svg_text(o, HX0 + (i + 0.5) * bw, HY1 - bh - 4, buf, 10, "middle", "#222", 0);
        }
        snprintf(buf, sizeof buf, "%.3g", lo + (hi - lo) * i / BINS);
        lpo_svg_text(o, HX0 + i * bw, HY1 + 16, buf, 9, "middle", "#333", 0);
    }
    snprintf(buf, sizeof buf, "%.3g", hi);
    lpo_svg_text(o, HX1, HY1 + 16, buf, 9, "middle", "#333", 0);
    lpo_svg_line(o, HX0, HY1, HX1, HY1, "#222", 1, NULL);
    snprintf(buf, sizeof buf, "%.200s%s%.40s%s", h->metric, h->unit && *h->unit ? " (" : "",
             h->unit ? h->unit : "", h->unit && *h->unit ? ")" : "");
    lpo_svg_text(o, (HX0 + HX1) / 2.0, HH - 20, buf, 12, "middle", "#222", 0);
    lpo_svg_text(o, 18, (HY0 + HY1) / 2.0, h->items ? h->items : "items", 12, "middle", "#222", -90);
    lpo_svg_end(o);
}
