/*
 * cpu/conv.c: the CPU backend's windows: conv2d and the pools, forward and backward.
 *   - conv2d: x [n,c,h,w], w [o,c,kh,kw], bias [o] -> [n,o,ho,wo], ho = (h + 2 pad - kh) / stride + 1
 *     (attrs win: kernel[2] (pools only), stride[2], pad[2]); zero padding. Computed per image
 *     as im2col and one GEMM: y [o, ho wo] = w [o, c kh kw] cols [c kh kw, ho wo]; grad_x is
 *     w^T dy then col2im, grad_w sums dy cols^T over the images.
 *   - maxpool ignores padded positions (as if -inf); its gradient goes to the first maximum of
 *     each window. avgpool divides by the whole window kh kw, padding included (PyTorch's
 *     count_include_pad).
 * Layouts are the model format's (schemas/README.md). im2col's columns are scratch, malloc'd
 * per call.
 */
#include "cpu.h"

#include <stdlib.h>

typedef struct win_geom {
    int64_t n, c, h, w;     // input
    int64_t o;              // conv2d's output channels (pools: c)
    int64_t kh, kw, sh, sw, ph, pw;
    int64_t ho, wo;         // output
} win_geom;

// (in + 2 pad - k) / stride + 1, or -1 when the window does not fit.
static int64_t window_out(int64_t in, int64_t k, int64_t stride, int64_t pad) {
    if (in + 2 * pad < k || stride < 1) return -1;
    return (in + 2 * pad - k) / stride + 1;
}

// Strides and pads from attrs win; then ho and wo, checked against y's (named yname).
static int window_check(kctx *c, win_geom *g, const rt_view *y, const char *yname) {
    const int32_t *win = c->a->win;
    g->sh = win[2];
    g->sw = win[3];
    g->ph = win[4];
    g->pw = win[5];
    if (g->sh < 1 || g->sw < 1 || g->ph < 0 || g->pw < 0 || g->kh < 1 || g->kw < 1)
        return cpu_fail(
            c, "kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld: kernel and stride must be at least 1, padding at least 0",
            (long long)g->kh, (long long)g->kw, (long long)g->sh, (long long)g->sw, (long long)g->ph, (long long)g->pw);
    g->ho = window_out(g->h, g->kh, g->sh, g->ph);
    g->wo = window_out(g->w, g->kw, g->sw, g->pw);
    if (g->ho < 0 || g->wo < 0)
        return cpu_fail(c, "a %lldx%lld kernel with padding %lldx%lld does not fit the input's %lldx%lld", (long long)g->kh,
                        (long long)g->kw, (long long)g->ph, (long long)g->pw, (long long)g->h, (long long)g->w);
    kshape want = {.rank = 4, .d = {g->n, g->o, g->ho, g->wo}};
    return cpu_expect(c, yname, y, want);
}

// x [n,c,h,w] (named xname), w [o,c,kh,kw], y [n,o,ho,wo]: each operand by its role, whichever
// of them are the kernel's inputs or outputs.
static int conv_check(kctx *c, const rt_view *x, const char *xname, const rt_view *w, const char *wname, const rt_view *y,
                      const char *yname, win_geom *g) {
    if (cpu_rank_is(c, xname, x, 4, "[n,c,h,w]") || cpu_rank_is(c, wname, w, 4, "[o,c,kh,kw]")) return -1;
    if (w->shape[1] != x->shape[1])
        return cpu_fail(c, "%s is %s but %s is %s: their channels c differ", wname, CPU_SHAPE(w), xname, CPU_SHAPE(x));
    *g = (win_geom){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3], .o = w->shape[0],
                    .kh = w->shape[2], .kw = w->shape[3]};
    return window_check(c, g, y, yname);
}

// cols [c kh kw, ho wo] of one image x [c,h,w]; zeros where the window reaches into the padding.
static void im2col(const real *x, const win_geom *g, real *cols) {
    int64_t howo = g->ho * g->wo;
    for (int64_t ci = 0; ci < g->c; ci++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++) {
                real *row = cols + ((ci * g->kh + ki) * g->kw + kj) * howo;
                for (int64_t oi = 0; oi < g->ho; oi++) {
                    int64_t ii = oi * g->sh - g->ph + ki;
                    for (int64_t oj = 0; oj < g->wo; oj++) {
                        int64_t jj = oj * g->sw - g->pw + kj;
                        bool in = ii >= 0 && ii < g->h && jj >= 0 && jj < g->w;
                        row[oi * g->wo + oj] = in ? x[(ci * g->h + ii) * g->w + jj] : 0;
                    }
                }
            }
}

// The adjoint of im2col: adds cols back into the image dx [c,h,w].
static void col2im(const real *cols, const win_geom *g, real *dx) {
    int64_t howo = g->ho * g->wo;
    for (int64_t ci = 0; ci < g->c; ci++)
        for (int64_t ki = 0; ki < g->kh; ki++)
            for (int64_t kj = 0; kj < g->kw; kj++) {
                const real *row = cols + ((ci * g->kh + ki) * g->kw + kj) * howo;
                for (int64_t oi = 0; oi < g->ho; oi++) {
                    int64_t ii = oi * g->sh - g->ph + ki;
                    if (ii < 0 || ii >= g->h) continue;
                    for (int64_t oj = 0; oj < g->wo; oj++) {
                        int64_t jj = oj * g->sw - g->pw + kj;
                        if (jj >= 0 && jj < g->w) dx[(ci * g->h + ii) * g->w + jj] += row[oi * g->wo + oj];
                    }
                }
            }
}

// x [n,c,h,w], w [o,c,kh,kw], bias [o] -> [n,o,ho,wo]. The bias counts only where `once`.
int CPU_KERNEL(conv2d)(kctx *c) {
    win_geom g;
    const rt_view *b = c->nin > 2 ? &c->in[2] : NULL;
    if (conv_check(c, &c->in[0], "input 0", &c->in[1], "input 1", &c->out[0], "output 0", &g)) return -1;
    if (b && cpu_expect(c, "input 2 (the bias)", b, (kshape){.rank = 1, .d = {g.o}})) return -1;
    int64_t ckk = g.c * g.kh * g.kw, howo = g.ho * g.wo;
    real *cols = cpu_scratch(c, ckk * howo);
    if (!cols) return -1;
    const real *X = cpu_r(&c->in[0]), *W = cpu_r(&c->in[1]), *B = b && b->once ? cpu_r(b) : NULL;
    real *Y = cpu_r(&c->out[0]);
    for (int64_t i = 0; i < g.n; i++) {
        real *y = Y + i * g.o * howo;
        for (int64_t oc = 0; oc < g.o; oc++)
            for (int64_t p = 0; p < howo; p++) cpu_put(&y[oc * howo + p], B ? B[oc] : 0, c->acc);
        im2col(X + i * g.c * g.h * g.w, &g, cols);
        cpu_gemm(false, false, g.o, howo, ckk, 1, W, ckk, cols, howo, 1, y, howo);
    }
    free(cols);
    return 0;
}

// (dy [n,o,ho,wo], w [o,c,kh,kw]) -> dx [n,c,h,w]: per image, col2im(w^T dy).
int CPU_KERNEL(conv2d_grad_x)(kctx *c) {
    win_geom g;
    if (conv_check(c, &c->out[0], "output 0", &c->in[1], "input 1", &c->in[0], "input 0", &g)) return -1;
    int64_t ckk = g.c * g.kh * g.kw, howo = g.ho * g.wo;
    real *cols = cpu_scratch(c, ckk * howo);
    if (!cols) return -1;
    const real *DY = cpu_r(&c->in[0]), *W = cpu_r(&c->in[1]);
    real *DX = cpu_r(&c->out[0]);
    cpu_clear(c, 0);
    for (int64_t i = 0; i < g.n; i++) {
        cpu_gemm(true, false, ckk, howo, g.o, 1, W, ckk, DY + i * g.o * howo, howo, 0, cols, howo);
        col2im(cols, &g, DX + i * g.c * g.h * g.w);
    }
    free(cols);
    return 0;
}

// (dy [n,o,ho,wo], x [n,c,h,w]) -> dw [o,c,kh,kw] = sum over images of dy cols(x)^T.
int CPU_KERNEL(conv2d_grad_w)(kctx *c) {
    win_geom g;
    if (conv_check(c, &c->in[1], "input 1", &c->out[0], "output 0", &c->in[0], "input 0", &g)) return -1;
    int64_t ckk = g.c * g.kh * g.kw, howo = g.ho * g.wo;
    real *cols = cpu_scratch(c, ckk * howo);
    if (!cols) return -1;
    const real *DY = cpu_r(&c->in[0]), *X = cpu_r(&c->in[1]);
    real *DW = cpu_r(&c->out[0]);
    cpu_clear(c, 0);
    for (int64_t i = 0; i < g.n; i++) {
        im2col(X + i * g.c * g.h * g.w, &g, cols);
        cpu_gemm(false, true, g.o, ckk, howo, 1, DY + i * g.o * howo, howo, cols, howo, 1, DW, ckk);
    }
    free(cols);
    return 0;
}

// dy [n,o,ho,wo] -> dbias [o], the sum over n, ho, wo.
int CPU_KERNEL(conv2d_grad_b)(kctx *c) {
    const rt_view *dy = &c->in[0];
    if (cpu_rank_is(c, "input 0", dy, 4, "[n,o,ho,wo]")) return -1;
    if (cpu_expect(c, "output 0", &c->out[0], (kshape){.rank = 1, .d = {dy->shape[1]}})) return -1;
    int64_t n = dy->shape[0], o = dy->shape[1], howo = dy->shape[2] * dy->shape[3];
    const real *DY = cpu_r(dy);
    real *DB = cpu_r(&c->out[0]);
    cpu_clear(c, 0);
    for (int64_t i = 0; i < n; i++)
        for (int64_t oc = 0; oc < o; oc++) {
            double s = 0;
            for (int64_t p = 0; p < howo; p++) s += DY[(i * o + oc) * howo + p];
            DB[oc] += (real)s;
        }
    return 0;
}

// x [n,c,h,w] -> y [n,c,ho,wo] with attrs win's kernel, stride and padding.
static int pool_check(kctx *c, const rt_view *x, const char *xname, const rt_view *y, const char *yname, win_geom *g) {
    if (cpu_rank_is(c, xname, x, 4, "[n,c,h,w]")) return -1;
    *g = (win_geom){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3], .o = x->shape[1],
                    .kh = c->a->win[0], .kw = c->a->win[1]};
    return window_check(c, g, y, yname);
}

// The window of output (oi, oj) clipped to the image: rows [*i0, *i1), columns [*j0, *j1).
static void window_at(const win_geom *g, int64_t oi, int64_t oj, int64_t *i0, int64_t *i1, int64_t *j0, int64_t *j1) {
    int64_t ti = oi * g->sh - g->ph, tj = oj * g->sw - g->pw;
    *i0 = ti < 0 ? 0 : ti;
    *j0 = tj < 0 ? 0 : tj;
    *i1 = ti + g->kh < g->h ? ti + g->kh : g->h;
    *j1 = tj + g->kw < g->w ? tj + g->kw : g->w;
}

// The flat index (in the plane) of the first maximum of a window; -1 if it holds no element.
static int64_t window_argmax(const real *x, const win_geom *g, int64_t oi, int64_t oj) {
    int64_t i0, i1, j0, j1, best = -1;
    window_at(g, oi, oj, &i0, &i1, &j0, &j1);
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++)
            if (best < 0 || x[i * g->w + j] > x[best]) best = i * g->w + j;
    return best;
}

int CPU_KERNEL(maxpool)(kctx *c) {
    win_geom g;
    if (pool_check(c, &c->in[0], "input 0", &c->out[0], "output 0", &g)) return -1;
    const real *X = cpu_r(&c->in[0]);
    real *Y = cpu_r(&c->out[0]);
    for (int64_t pl = 0; pl < g.n * g.c; pl++) {
        const real *x = X + pl * g.h * g.w;
        for (int64_t oi = 0; oi < g.ho; oi++)
            for (int64_t oj = 0; oj < g.wo; oj++) {
                int64_t at = window_argmax(x, &g, oi, oj);
                cpu_put(&Y[(pl * g.ho + oi) * g.wo + oj], at < 0 ? 0 : x[at], c->acc);
            }
    }
    return 0;
}

// (dy [n,c,ho,wo], x [n,c,h,w]) -> dx: each dy to its window's first maximum.
int CPU_KERNEL(maxpool_grad)(kctx *c) {
    win_geom g;
    if (pool_check(c, &c->in[1], "input 1", &c->in[0], "input 0", &g)) return -1;
    if (cpu_expect(c, "output 0", &c->out[0], cpu_shape_of(&c->in[1]))) return -1;
    const real *DY = cpu_r(&c->in[0]), *X = cpu_r(&c->in[1]);
    real *DX = cpu_r(&c->out[0]);
    cpu_clear(c, 0);
    for (int64_t pl = 0; pl < g.n * g.c; pl++)
        for (int64_t oi = 0; oi < g.ho; oi++)
            for (int64_t oj = 0; oj < g.wo; oj++) {
                int64_t at = window_argmax(X + pl * g.h * g.w, &g, oi, oj);
                if (at >= 0) DX[pl * g.h * g.w + at] += DY[(pl * g.ho + oi) * g.wo + oj];
            }
    return 0;
}

int CPU_KERNEL(avgpool)(kctx *c) {
    win_geom g;
    if (pool_check(c, &c->in[0], "input 0", &c->out[0], "output 0", &g)) return -1;
    const real *X = cpu_r(&c->in[0]);
    real *Y = cpu_r(&c->out[0]), inv = (real)(1.0 / (double)(g.kh * g.kw));
    for (int64_t pl = 0; pl < g.n * g.c; pl++)
        for (int64_t oi = 0; oi < g.ho; oi++)
            for (int64_t oj = 0; oj < g.wo; oj++) {
                int64_t i0, i1, j0, j1;
                window_at(&g, oi, oj, &i0, &i1, &j0, &j1);
                double s = 0;
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t j = j0; j < j1; j++) s += X[(pl * g.h + i) * g.w + j];
                cpu_put(&Y[(pl * g.ho + oi) * g.wo + oj], (real)s * inv, c->acc);
            }
    return 0;
}

// dy [n,c,ho,wo] -> dx [n,c,h,w] (output 0's shape gives h and w): dy / (kh kw) over each window.
int CPU_KERNEL(avgpool_grad)(kctx *c) {
    win_geom g;
    if (pool_check(c, &c->out[0], "output 0", &c->in[0], "input 0", &g)) return -1;
    const real *DY = cpu_r(&c->in[0]);
    real *DX = cpu_r(&c->out[0]), inv = (real)(1.0 / (double)(g.kh * g.kw));
    cpu_clear(c, 0);
    for (int64_t pl = 0; pl < g.n * g.c; pl++)
        for (int64_t oi = 0; oi < g.ho; oi++)
            for (int64_t oj = 0; oj < g.wo; oj++) {
                int64_t i0, i1, j0, j1;
                window_at(&g, oi, oj, &i0, &i1, &j0, &j1);
                real d = DY[(pl * g.ho + oi) * g.wo + oj] * inv;
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t j = j0; j < j1; j++) DX[(pl * g.h + i) * g.w + j] += d;
            }
    return 0;
}
