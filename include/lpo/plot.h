/* lpo plots: hand-written SVG (no library), readable at a glance. One plotting module for every command
 * that draws: the rooflines of kbench, profile and deep, breakdown bars, histograms (deep).
 *
 * Roofline: log-log axes (arithmetic intensity in FLOP/byte against TFLOP/s), one horizontal compute roof
 * per dtype given (labelled with its value), the DRAM slope (and the L2 slope when known) up to each roof,
 * the ridge point of each roof on the DRAM slope (marked, with its intensity), points coloured by bound
 * class (memory, compute, latency, unknown) with a legend, and the source of the ceilings in the subtitle.
 * The axes span every roof, ridge and point with a margin (decades, 1-2-5 ticks). */
#pragma once
#include <stddef.h>

#include "lpo/ceilings.h"
#include "lpo/core.h"

/* ---- SVG primitives ---- */
/* Appends to out; text is XML-escaped. Colours are CSS colours ("#1f77b4"). */
void lpo_svg_begin(lpo_strbuf *out, int width, int height);
void lpo_svg_end(lpo_strbuf *out);
void lpo_svg_line(lpo_strbuf *out, double x1, double y1, double x2, double y2, const char *color,
                  double width, const char *dash);
void lpo_svg_rect(lpo_strbuf *out, double x, double y, double w, double h, const char *fill,
                  const char *stroke);
void lpo_svg_circle(lpo_strbuf *out, double x, double y, double r, const char *fill, const char *title);
/* anchor: "start", "middle" or "end"; rotate in degrees (0: none) */
void lpo_svg_text(lpo_strbuf *out, double x, double y, const char *text, double size, const char *anchor,
                  const char *color, double rotate);
/* XML-escaped s appended to out */
void lpo_svg_escape(lpo_strbuf *out, const char *s);

/* ---- roofline ---- */
typedef struct {
    char label[128];  /* "rmsnorm m=4096 n=4096 bf16" (hover title) */
    double intensity; /* FLOP per DRAM byte; <= 0: not drawn (no FLOPs) */
    double tflops;    /* achieved */
    char cls[16];     /* "memory", "compute", "latency", "unknown" */
} lpo_roof_point;

typedef struct {
    char title[160];
    char subtitle[400];                  /* which ceilings: measured or spec */
    double roof_tflops[LPO_ROOF_N_GEMM]; /* GEMM roofs to draw, by lpo_roof (0: not drawn) */
    double dram_gbs;                     /* 0: no DRAM slope */
    char dram_name[48];
    double l2_gbs; /* 0: no L2 slope */
    const lpo_roof_point *points;
    size_t n_points;
} lpo_roofline;

/* The SVG document (960 x 600). */
void lpo_roofline_svg(const lpo_roofline *r, lpo_strbuf *out);
/* roofline.csv: kind,label,intensity,tflops,class (kind: roof, slope, ridge, point). */
void lpo_roofline_csv(const lpo_roofline *r, lpo_strbuf *out);
/* Fills the roofs and slopes of r from peaks (no points), and the subtitle (lpo_roofline_set_subtitle). */
void lpo_roofline_from_peaks(lpo_roofline *r, const lpo_peaks *p);
/* r->subtitle = "ceilings: " + which peaks (p->label without the cache file's path, too long for the plot;
 * the reports name the file). */
void lpo_roofline_set_subtitle(lpo_roofline *r, const lpo_peaks *p);

/* ---- stacked bars (breakdown.svg) ---------------------------------------------------------------------
 * One horizontal bar per row (a phase), normalised to its total so bars of different lengths compare by
 * share; each part a colour of the legend, its share written inside when wide enough, the total in
 * `unit` at the right, and each part's value as a hover title. */
#define LPO_BARS_MAX       8
#define LPO_BARS_MAX_PARTS 12
typedef struct {
    char title[160];
    char subtitle[400];
    size_t n_bars, n_parts;
    const char *bar_names[LPO_BARS_MAX];            /* "prefill", "decode" */
    const char *part_names[LPO_BARS_MAX_PARTS];     /* legend entries ("gemm", "attention", ...) */
    double value[LPO_BARS_MAX][LPO_BARS_MAX_PARTS]; /* >= 0, in `unit` */
    const char *unit;                               /* "ms" */
} lpo_stacked_bars;

/* The SVG document (960 wide). */
void lpo_stacked_bars_svg(const lpo_stacked_bars *b, lpo_strbuf *out);

/* ---- histogram (lpo deep: hist_<metric>.svg) --------------------------------------------------------------
 * Values of one metric across items in ten equal bins (0-100 when unit is "%", else min to max; NaN left
 * out), the count of each bin on its bar. */
typedef struct {
    const char *metric; /* axis label and title */
    const char *unit;   /* "%", "FLOP/byte", "" */
    const char *items;  /* what is counted: "kernels" */
    const double *values;
    size_t n;
} lpo_histogram;

/* The SVG document (640 x 400). */
void lpo_histogram_svg(const lpo_histogram *h, lpo_strbuf *out);
