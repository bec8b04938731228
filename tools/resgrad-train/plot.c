/*
 * plot.c - the training and held-out loss curves as a self-contained SVG: axes with tick
 * labels, axis titles, a legend, a log scale when the loss spans more than a factor of 20.
 */
#include "train.h"

#include <math.h>
#include <string.h>

#define PLOT_POINTS 800 /* the training curve is averaged down to this many */

typedef struct axis { double lo, hi; int log; } axis; /* log: lo, hi are log10 */
enum { SVG_W = 820, SVG_H = 500, PL = 80, PR = 24, PT = 44, PB = 56 };

static double ax_pos(const axis *a, double v, double p0, double p1) {
  if (a->log) v = log10(v > 0 ? v : 1e-30);
  return p0 + (v - a->lo) / (a->hi - a->lo) * (p1 - p0);
}
static double nice_step(double range, int target) {
  double raw = range / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

static void svg_text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else fputc(*s, f);
  }
}

static void svg_xtick(FILE *f, const axis *ax, double v) {
  double x = ax_pos(ax, v, PL, SVG_W - PR);
  fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>\n", x, PT,
          x, SVG_H - PB);
  fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>\n", x,
          SVG_H - PB, x, SVG_H - PB + 5);
  fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, SVG_H - PB + 19, v);
}

static void svg_ytick(FILE *f, const axis *ay, double v) {
  double y = ax_pos(ay, v, SVG_H - PB, PT);
  fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", PL, y,
          SVG_W - PR, y);
  fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#333\"/>\n", PL - 5, y,
          PL, y);
  fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", PL - 8, y + 4, v);
}

static void svg_ticks(FILE *f, const axis *ax, const axis *ay) {
  double st = nice_step(ax->hi - ax->lo, 8);
  for (double k = ceil(ax->lo / st); k * st <= ax->hi + 1e-9 * st; k++) svg_xtick(f, ax, k * st);
  if (!ay->log) {
    st = nice_step(ay->hi - ay->lo, 6);
    for (double k = ceil(ay->lo / st); k * st <= ay->hi + 1e-9 * st; k++) svg_ytick(f, ay, k * st);
    return;
  }
  static const double mant[] = {1, 2, 5};
  int subs = ay->hi - ay->lo <= 2 ? 3 : 1;
  for (double e = ay->lo; e <= ay->hi; e++)
    for (int m = 0; m < subs; m++) {
      double v = mant[m] * pow(10, e);
      if (log10(v) <= ay->hi + 1e-9) svg_ytick(f, ay, v);
    }
}

/* The training curve, averaged over buckets so the file stays small. */
static void svg_train(FILE *f, const run *r, const axis *ax, const axis *ay) {
  int64_t n = r->step - r->step0, k = (n + PLOT_POINTS - 1) / PLOT_POINTS;
  fputs("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"", f);
  for (int64_t i = 0; i < n; i += k) {
    double sum = 0;
    int64_t m = 0;
    for (; m < k && i + m < n; m++) sum += r->loss[i + m];
    double x = (double)(r->step0 + i + m); /* steps completed at the bucket's end */
    fprintf(f, "%.1f,%.1f ", ax_pos(ax, x, PL, SVG_W - PR), ax_pos(ay, sum / (double)m, SVG_H - PB, PT));
  }
  fputs("\"/>\n", f);
}

static void svg_heldout(FILE *f, const run *r, const axis *ax, const axis *ay) {
  fputs("<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" points=\"", f);
  for (int64_t i = 0; i < r->nho; i++)
    fprintf(f, "%.1f,%.1f ", ax_pos(ax, (double)r->ho_x[i], PL, SVG_W - PR),
            ax_pos(ay, r->ho_y[i], SVG_H - PB, PT));
  fputs("\"/>\n", f);
  for (int64_t i = 0; i < r->nho; i++)
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#d62728\"/>\n",
            ax_pos(ax, (double)r->ho_x[i], PL, SVG_W - PR), ax_pos(ay, r->ho_y[i], SVG_H - PB, PT));
}

static void svg_legend(FILE *f) {
  int x = SVG_W - PR - 170, y = PT + 10;
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"160\" height=\"48\" fill=\"white\" "
             "stroke=\"#999\"/>\n", x, y);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#1f77b4\" "
             "stroke-width=\"2\"/>\n<text x=\"%d\" y=\"%d\">training loss</text>\n",
          x + 10, y + 16, x + 40, y + 16, x + 48, y + 20);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d62728\" "
             "stroke-width=\"2\"/>\n<circle cx=\"%d\" cy=\"%d\" r=\"2.5\" fill=\"#d62728\"/>\n"
             "<text x=\"%d\" y=\"%d\">held-out loss</text>\n",
          x + 10, y + 34, x + 40, y + 34, x + 25, y + 34, x + 48, y + 38);
}

/* Range of both curves; 0 when there is nothing to plot. */
static int plot_axes(const run *r, axis *ax, axis *ay) {
  double lo = INFINITY, hi = 0;
  for (int64_t i = 0; i < r->step - r->step0; i++) {
    if (r->loss[i] > 0 && r->loss[i] < lo) lo = r->loss[i];
    if (r->loss[i] > hi) hi = r->loss[i];
  }
  for (int64_t i = 0; i < r->nho; i++) {
    if (r->ho_y[i] > 0 && r->ho_y[i] < lo) lo = r->ho_y[i];
    if (r->ho_y[i] > hi) hi = r->ho_y[i];
  }
  if (!(hi > 0) || r->step == r->step0) return 0;
  ax->log = 0;
  ax->lo = (double)r->step0;
  ax->hi = (double)r->step;
  ay->log = hi / lo > 20;
  if (ay->log) {
    ay->lo = floor(log10(lo));
    ay->hi = ceil(log10(hi));
  } else {
    double st = nice_step(hi, 6);
    ay->lo = 0;
    ay->hi = ceil(hi * 1.02 / st) * st;
  }
  return 1;
}

typedef struct plot_job { const run *r; axis ax, ay; } plot_job;

static void svg(FILE *f, const void *user) {
  const plot_job *p = user;
  const run *r = p->r;
  const axis *ax = &p->ax, *ay = &p->ay;
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
             "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
             "font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
          SVG_W, SVG_H, SVG_W, SVG_H, SVG_W, SVG_H);
  fprintf(f, "<text x=\"%d\" y=\"26\" text-anchor=\"middle\" font-size=\"15\">" PROG ": ", SVG_W / 2);
  svg_text(f, r->taskname);
  fputs(", ", f);
  svg_text(f, r->config);
  fputs("</text>\n", f);
  svg_ticks(f, ax, ay);
  svg_train(f, r, ax, ay);
  svg_heldout(f, r, ax, ay);
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n",
          PL, PT, SVG_W - PL - PR, SVG_H - PT - PB);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n",
          (PL + SVG_W - PR) / 2, SVG_H - 14);
  fprintf(f, "<text transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">"
             "cross-entropy loss%s</text>\n", (PT + SVG_H - PB) / 2,
          ay->log ? " (log scale)" : "");
  svg_legend(f);
  fputs("</svg>\n", f);
}

int write_plot(const run *r) {
  plot_job p = {.r = r};
  if (!plot_axes(r, &p.ax, &p.ay)) {
    errorf("--plot: no training steps ran, so '%s' was not written", r->o->plot);
    return 0;
  }
  return write_atomic(r->p.plot, "--plot", svg, &p);
}
