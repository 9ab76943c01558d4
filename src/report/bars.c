/* Stacked horizontal bars (see include/lpo/plot.h): one bar per row normalised to 100% of its total, parts
 * coloured as the legend, shares written inside wide parts, totals at the right. `lpo profile` draws its
 * time by op category and phase with it (breakdown.svg). */
#include <stdio.h>

#include "lpo/plot.h"

#define W       960
#define BX0     120.0 /* bar area */
#define BX1     790.0
#define BY0     80.0
#define BAR_H   38.0
#define BAR_GAP 26.0

/* a qualitative palette; parts beyond it repeat it */
static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                                     "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78"};

void lpo_stacked_bars_svg(const lpo_stacked_bars *b, lpo_strbuf *o) {
    const size_t nb = b->n_bars < LPO_BARS_MAX ? b->n_bars : LPO_BARS_MAX;
    const size_t np = b->n_parts < LPO_BARS_MAX_PARTS ? b->n_parts : LPO_BARS_MAX_PARTS;
    const double legend_y = BY0 + (double)nb * (BAR_H + BAR_GAP) + 10;
    const int height = (int)(legend_y + 30.0 * (double)((np + 3) / 4) + 30);
    const char *unit = b->unit ? b->unit : "";
    char buf[160];
    lpo_svg_begin(o, W, height);
    lpo_svg_text(o, W / 2.0, 30, b->title, 18, "middle", "#222", 0);
    lpo_svg_text(o, W / 2.0, 52, b->subtitle, 12, "middle", "#555", 0);
    for (size_t i = 0; i < nb; i++) { // bar i: parts left to right, each its share of the bar's total
        const double y = BY0 + (double)i * (BAR_H + BAR_GAP);
        double total = 0;
        for (size_t k = 0; k < np; k++) total += b->value[i][k] > 0 ? b->value[i][k] : 0;
        lpo_svg_text(o, BX0 - 10, y + BAR_H / 2 + 5, b->bar_names[i] ? b->bar_names[i] : "", 14, "end",
                     "#222", 0);
        if (total <= 0) {
            lpo_svg_rect(o, BX0, y, BX1 - BX0, BAR_H, "#f2f2f2", "#999");
            lpo_svg_text(o, (BX0 + BX1) / 2, y + BAR_H / 2 + 5, "no data", 12, "middle", "#777", 0);
            continue;
        }
        double x = BX0;
        for (size_t k = 0; k < np; k++) {
            const double v = b->value[i][k] > 0 ? b->value[i][k] : 0, w = v / total * (BX1 - BX0);
            if (w <= 0) continue;
            snprintf(buf, sizeof buf, "%s: %.4g %s (%.1f%%)", b->part_names[k] ? b->part_names[k] : "", v,
                     unit, 100 * v / total);
            lpo_sb_printf(
                o,
                "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" stroke=\"white\">"
                "<title>",
                x, y, w, BAR_H, colors[k % (sizeof colors / sizeof colors[0])]);
            lpo_svg_escape(o, buf); /* the part's value as a hover title */
            lpo_sb_puts(o, "</title></rect>\n");
            if (w >= 42) {
                snprintf(buf, sizeof buf, "%.0f%%", 100 * v / total);
                lpo_svg_text(o, x + w / 2, y + BAR_H / 2 + 5, buf, 12, "middle", "white", 0);
            }
            x += w;
        }
        snprintf(buf, sizeof buf, "%.4g %s", total, unit);
        lpo_svg_text(o, BX1 + 10, y + BAR_H / 2 + 5, buf, 13, "start", "#222", 0);
    }
    for (size_t k = 0; k < np; k++) { // legend, four entries per line
        const double lx = BX0 + (double)(k % 4) * 170, ly = legend_y + 30.0 * (double)(k / 4);
        lpo_svg_rect(o, lx, ly, 14, 14, colors[k % (sizeof colors / sizeof colors[0])], "none");
        lpo_svg_text(o, lx + 20, ly + 12, b->part_names[k] ? b->part_names[k] : "", 13, "start", "#222", 0);
    }
    lpo_svg_end(o);
}
