/*
 * metrics.c: planrun's figures of each step, for people and for programs (rt.h, "metrics.c").
 *
 * One record per step: the step, its loss, its wall time, samples and tokens per second, the
 * arena per rank (the plan's exact peak) and the process's largest resident set. They become
 *   - JSON lines (planrun --json on stdout; --metrics F.jsonl), one object per step with
 *     "type": "step" (schemas/planrun.schema.json), so that jq or pandas.read_json(lines=True)
 *     read them;
 *   - CSV (--metrics F.csv), a header line and one row per step;
 *   - an SVG picture (--plot F.svg): the loss over the steps above the step time over the
 *     steps, each with its axes and a few round ticks, drawn once the run ends.
 * Numbers are printed with %.9g (losses that equal print equal); a loss that is not finite is
 * null in JSON and "nan" in CSV, and is left out of the picture.
 *
 * A file is written in place only when it is a regular file or does not exist (never over a
 * device or a directory); an error names the file.
 */
#include "rt.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// fopen(path, "w") for a regular file or a new one; NULL with a message otherwise.
static FILE *open_out(const char *path, char *err, size_t err_n) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return rt_say(err, err_n, "%s: not a regular file; planrun writes only those", path), NULL;
    FILE *f = fopen(path, "w");
    if (!f) rt_say(err, err_n, "%s: cannot open for writing: %s", path, strerror(errno));
    return f;
}

static void num_or_null(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, "%.9g", x);
    else fputs("null", f);
}

void rt_step_json(FILE *f, const rt_step_figures *s) {
    fprintf(f, "{\"type\": \"step\", \"step\": %llu, \"steps\": %llu, \"loss\": ", (unsigned long long)s->step,
            (unsigned long long)s->steps);
    num_or_null(f, s->loss);
    fprintf(f, ", \"time_s\": %.9g, \"samples_per_s\": ", s->time_s);
    num_or_null(f, s->samples_per_s);
    fprintf(f, ", \"tokens_per_s\": ");
    if (s->tokens_per_s >= 0) num_or_null(f, s->tokens_per_s);
    else fputs("null", f);
    fprintf(f, ", \"arena_bytes\": %llu, \"max_rss_bytes\": %llu}", (unsigned long long)s->arena_bytes,
            (unsigned long long)s->rss_bytes);
}

int rt_metrics_open(rt_metrics *m, const char *path, char *err, size_t err_n) {
    memset(m, 0, sizeof *m);
    if (!path) return 0;
    size_t n = strlen(path);
    m->csv = n > 4 && !strcmp(path + n - 4, ".csv");
    m->path = path;
    if (!(m->f = open_out(path, err, err_n))) return -1;
    if (m->csv) fprintf(m->f, "step,loss,time_s,samples_per_s,tokens_per_s,arena_bytes,max_rss_bytes\n");
    return 0;
}

int rt_metrics_add(rt_metrics *m, const rt_step_figures *s, char *err, size_t err_n) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        double *loss = realloc(m->loss, cap * sizeof *loss);
        if (loss) m->loss = loss;
        double *t = realloc(m->time_s, cap * sizeof *t);
        if (t) m->time_s = t;
        if (!loss || !t) return rt_say(err, err_n, "out of memory keeping the figures of %zu steps", m->n);
        m->cap = cap;
    }
    m->loss[m->n] = s->loss, m->time_s[m->n] = s->time_s, m->n++;
    if (!m->f) return 0;
    if (m->csv) {
        fprintf(m->f, "%llu,%.9g,%.9g,%.9g,", (unsigned long long)s->step, s->loss, s->time_s, s->samples_per_s);
        if (s->tokens_per_s >= 0) fprintf(m->f, "%.9g", s->tokens_per_s);
        fprintf(m->f, ",%llu,%llu\n", (unsigned long long)s->arena_bytes, (unsigned long long)s->rss_bytes);
    } else {
        rt_step_json(m->f, s);
        fputc('\n', m->f);
    }
    return ferror(m->f) ? rt_say(err, err_n, "%s: cannot write: %s", m->path, strerror(errno)) : 0;
}

int rt_metrics_close(rt_metrics *m, char *err, size_t err_n) {
    if (!m->f) return 0;
    bool bad = ferror(m->f) != 0;
    bad |= fclose(m->f) != 0;
    m->f = NULL;
    return bad ? rt_say(err, err_n, "%s: cannot write: %s", m->path, strerror(errno)) : 0;
}

void rt_metrics_free(rt_metrics *m) {
    if (m->f) fclose(m->f);
    free(m->loss), free(m->time_s);
    memset(m, 0, sizeof *m);
}

/* ---- the picture ---- */

// A round step for about n ticks over [lo, hi]: 1, 2 or 5 times a power of ten.
static double tick_step(double lo, double hi, int n) {
    double raw = (hi - lo) / n, p = pow(10, floor(log10(raw > 0 ? raw : 1)));
    double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

typedef struct panel {
    double x, y, w, h;              // the plot area in the picture
    double lo, hi;                  // the value axis
    const char *label, *colour;
} panel;

static void svg_panel(FILE *f, const panel *pn, const double *v, size_t n, double scale) {
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n", pn->x, pn->y, pn->w, pn->h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\">%s</text>\n", pn->x, pn->y - 6, pn->label);
    double step = tick_step(pn->lo, pn->hi, 4);
    for (double t = ceil(pn->lo / step) * step; t <= pn->hi + step * 1e-9; t += step) {
        double y = pn->y + pn->h - (t - pn->lo) / (pn->hi - pn->lo) * pn->h;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", pn->x, y, pn->x + pn->w, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.4g</text>\n", pn->x - 4, y + 4, t);
    }
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", pn->colour);
    for (size_t i = 0; i < n; i++) {
        double x = pn->x + (n > 1 ? (double)i / (double)(n - 1) : 0.5) * pn->w, val = v[i] * scale;
        if (!isfinite(val)) continue;
        fprintf(f, "%.1f,%.1f ", x, pn->y + pn->h - (val - pn->lo) / (pn->hi - pn->lo) * pn->h);
    }
    fprintf(f, "\"/>\n");
}

// The value axis of v (times scale): from its least to its largest finite value, or from 0.
static void axis_of(const double *v, size_t n, double scale, bool from_zero, double *lo, double *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i] * scale)) *lo = fmin(*lo, v[i] * scale), *hi = fmax(*hi, v[i] * scale);
    if (!isfinite(*lo)) *lo = 0, *hi = 1;
    if (from_zero && *lo > 0) *lo = 0;
    if (*hi - *lo < 1e-12 * (fabs(*hi) + 1)) *hi = *lo + (fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1);
}

int rt_metrics_svg(const rt_metrics *m, const char *path, const char *title, char *err, size_t err_n) {
    FILE *f = open_out(path, err, err_n);
    if (!f) return -1;
    const double W = 720, H = 480, L = 70, R = 20, T = 40;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"20\" font-size=\"14\">", L);
    for (const char *c = title; c && *c; c++) // the plan's name, escaped
        if (*c == '<') fputs("&lt;", f);
        else if (*c == '&') fputs("&amp;", f);
        else fputc(*c, f);
    fprintf(f, "</text>\n");
    panel loss = {L, T + 20, W - L - R, 170, 0, 1, "loss", "#1f77b4"}, time = {L, T + 250, W - L - R, 140, 0, 1, "step time (ms)", "#d62728"};
    axis_of(m->loss, m->n, 1, false, &loss.lo, &loss.hi);
    axis_of(m->time_s, m->n, 1e3, true, &time.lo, &time.hi);
    svg_panel(f, &loss, m->loss, m->n, 1);
    svg_panel(f, &time, m->time_s, m->n, 1e3);
    double y = time.y + time.h + 18;
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">1</text>\n", L, y);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%zu</text>\n", L + time.w, y, m->n);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">step</text>\n</svg>\n", L + time.w / 2, y);
    bool bad = ferror(f) != 0;
    bad |= fclose(f) != 0;
    return bad ? rt_say(err, err_n, "%s: cannot write: %s", path, strerror(errno)) : 0;
}
