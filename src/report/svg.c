/* Hand-written SVG primitives (see include/lpo/plot.h): a document, lines, rectangles, circles with hover
 * titles, and text, all appended to a string buffer; numbers with two decimals, text XML-escaped. */
#include <stdio.h>

#include "lpo/plot.h"

void lpo_svg_escape(lpo_strbuf *out, const char *s) {
    // each character: the five XML specials escaped, control characters dropped
    for (; s && *s; s++) {
        switch (*s) {
        case '&': lpo_sb_puts(out, "&amp;"); break;
        case '<': lpo_sb_puts(out, "&lt;"); break;
        case '>': lpo_sb_puts(out, "&gt;"); break;
        case '"': lpo_sb_puts(out, "&quot;"); break;
        case '\'': lpo_sb_puts(out, "&apos;"); break;
        default:
            if ((unsigned char)*s >= 0x20) lpo_sb_append(out, s, 1);
        }
    }
}

void lpo_svg_begin(lpo_strbuf *out, int width, int height) {
    lpo_sb_printf(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
        "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
        "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
        width, height, width, height, width, height);
}

void lpo_svg_end(lpo_strbuf *out) {
    lpo_sb_puts(out, "</svg>\n");
}

void lpo_svg_line(lpo_strbuf *out, double x1, double y1, double x2, double y2, const char *color,
                  double width, const char *dash) {
    lpo_sb_printf(out,
                  "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"%.2f\"",
                  x1, y1, x2, y2, color, width);
    if (dash) lpo_sb_printf(out, " stroke-dasharray=\"%s\"", dash);
    lpo_sb_puts(out, "/>\n");
}

void lpo_svg_rect(lpo_strbuf *out, double x, double y, double w, double h, const char *fill,
                  const char *stroke) {
    lpo_sb_printf(out,
                  "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" stroke=\"%s\"/>\n",
                  x, y, w, h, fill, stroke ? stroke : "none");
}

void lpo_svg_circle(lpo_strbuf *out, double x, double y, double r, const char *fill, const char *title) {
    lpo_sb_printf(
        out, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\" fill=\"%s\" stroke=\"black\" stroke-width=\"0.6\">",
        x, y, r, fill);
    if (title) {
        lpo_sb_puts(out, "<title>");
        lpo_svg_escape(out, title);
        lpo_sb_puts(out, "</title>");
    }
    lpo_sb_puts(out, "</circle>\n");
}

void lpo_svg_text(lpo_strbuf *out, double x, double y, const char *text, double size, const char *anchor,
                  const char *color, double rotate) {
    lpo_sb_printf(out, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"%.1f\" text-anchor=\"%s\" fill=\"%s\"", x, y,
                  size, anchor, color);
    if (rotate != 0) lpo_sb_printf(out, " transform=\"rotate(%.1f %.2f %.2f)\"", rotate, x, y);
    lpo_sb_puts(out, ">");
    lpo_svg_escape(out, text);
    lpo_sb_puts(out, "</text>\n");
}
