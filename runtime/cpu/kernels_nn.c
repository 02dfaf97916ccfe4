/*
 * kernels_nn.c: the CPU backend's operators, part two (part one, dispatch included, is
 * kernels.c): convolution, pooling, batch norm, attention, embeddings and dropout, forward and
 * backward. Compiled twice like kernels.c (float, and double through kernels_nn_f64.c); the
 * kernels are exported to kernels.c's dispatch table under cpu.h's CPU_KERNEL names.
 *
 * Layouts and conventions (the model format's, schemas/README.md):
 *   - conv2d: x [n,c,h,w], w [o,c,kh,kw], bias [o] -> [n,o,ho,wo], ho = (h + 2 pad - kh) / stride + 1
 *     (attrs win: kernel[2] (pools only), stride[2], pad[2]); zero padding. Computed per image
 *     as im2col and one GEMM: y [o, ho wo] = w [o, c kh kw] cols [c kh kw, ho wo]; grad_x is
 *     w^T dy then col2im, grad_w sums dy cols^T over the images.
 *   - maxpool ignores padded positions (as if -inf); its gradient goes to the first maximum of
 *     each window. avgpool divides by the whole window kh kw, padding included (PyTorch's
 *     count_include_pad).
 *   - batchnorm uses the batch statistics of each channel over n, h, w (biased variance), as
 *     in training; it keeps no running statistics. With attrs ghost G > 0 (ghost batch norm)
 *     the statistics are per channel over each run of G consecutive samples (n a multiple of
 *     G), so a batch split in whole groups gives the same result on any number of devices.
 *   - attention: q, k, v [b,s,n,d] (n heads of size d) -> softmax(scale q k^T) v per (batch,
 *     head), scale = attrs scale or, when that is 0 (the compiler never sets it), 1/sqrt(d);
 *     causal (attrs causal) masks keys after the query. The backward recomputes the
 *     probabilities; scratch is two s x s matrices per call.
 *   - embedding: ids [*b] (int32), table [v,h] -> [*b,h]; embedding_bag: ids [b,l], table
 *     [r,e] -> [b,e], the sum of the l rows. A table piece that holds rows [start, start +
 *     shape) of the logical table looks up only the ids in that range (the others give zero
 *     rows: the output is a partial sum over the pieces); the gradients write only the rows
 *     they hold. An id outside the logical table [0, full) is an error.
 *   - dropout keeps an element with probability 1 - p and scales it by 1 / (1 - p). Whether
 *     element i (its flat index in the LOGICAL tensor, from the view's start and full) is kept
 *     is rt_uniform(rt_key(K, i)) >= p with
 *         K = rt_key(rt_key(rt_key(rt_key(seed, attrs seed), step), micro-batch), block copy)
 *     so any split, a recompute and dropout_grad (the same kernel on dy) draw the same mask.
 */
#include "cpu.h"

#include <stdlib.h>

// Scratch of n reals, or NULL after failing with a message.
static real *scratch(kctx *c, int64_t n) {
    real *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(real));
    if (!p) cpu_fail(c, "out of memory (%lld bytes of scratch)", (long long)(n * (int64_t)sizeof(real)));
    return p;
}

static int rank_is(kctx *c, const char *what, const rt_view *v, int rank, const char *layout) {
    if (v->rank == rank) return 0;
    return cpu_fail(c, "%s is %s; it must be %s", what, CPU_SHAPE(v), layout);
}

/* ---- windows: conv2d and the pools ---- */

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
    if (rank_is(c, xname, x, 4, "[n,c,h,w]") || rank_is(c, wname, w, 4, "[o,c,kh,kw]")) return -1;
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
    real *cols = scratch(c, ckk * howo);
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
    real *cols = scratch(c, ckk * howo);
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
    real *cols = scratch(c, ckk * howo);
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
    if (rank_is(c, "input 0", dy, 4, "[n,o,ho,wo]")) return -1;
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
    if (rank_is(c, xname, x, 4, "[n,c,h,w]")) return -1;
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

/* ---- batch norm: per channel over n, h, w (per group of samples with ghost) ---- */

// x [n,c,h,w] (input xin) and the per-channel inputs from `first` on; *group is the samples per
// statistics group: attrs ghost, which must divide n, or all n.
static int bn_check(kctx *c, uint32_t xin, uint32_t first, int64_t *group) {
    char what[32];
    snprintf(what, sizeof what, "input %u", xin);
    if (rank_is(c, what, &c->in[xin], 4, "[n,c,h,w]")) return -1;
    for (uint32_t i = first; i < c->nin; i++) {
        snprintf(what, sizeof what, "input %u", i);
        if (cpu_expect(c, what, &c->in[i], (kshape){.rank = 1, .d = {c->in[xin].shape[1]}})) return -1;
    }
    int64_t n = c->in[xin].shape[0], ghost = c->a->i[PLAN_AI_GHOST];
    if (ghost < 0 || (ghost > 0 && n % ghost != 0))
        return cpu_fail(c, "input %u has %lld samples, not whole ghost batch groups of %lld", xin, (long long)n, (long long)ghost);
    *group = ghost > 0 ? ghost : n;
    return 0;
}

// The mean and 1/sqrt(var + eps) of channel ch of x [n,c,hw].
static void bn_stats(const real *x, int64_t n, int64_t nc, int64_t hw, int64_t ch, double eps, double *mean, double *rstd) {
    double s = 0, v = 0, cnt = (double)(n * hw);
    for (int64_t i = 0; i < n; i++)
        for (int64_t p = 0; p < hw; p++) s += x[(i * nc + ch) * hw + p];
    double m = cnt > 0 ? s / cnt : 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t p = 0; p < hw; p++) {
            double d = x[(i * nc + ch) * hw + p] - m;
            v += d * d;
        }
    *mean = m;
    *rstd = 1 / sqrt((cnt > 0 ? v / cnt : 0) + eps);
}

// One group of n samples: y = (x - mean) rstd gamma + beta per channel.
static void bn_fwd_group(kctx *c, const real *X, const real *G, const real *B, real *Y, int64_t n, int64_t nc, int64_t hw) {
    for (int64_t ch = 0; ch < nc; ch++) {
        double mean, rstd;
        bn_stats(X, n, nc, hw, ch, c->a->f[PLAN_AF_EPS], &mean, &rstd);
        for (int64_t i = 0; i < n; i++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t at = (i * nc + ch) * hw + p;
                cpu_put(&Y[at], (real)(((double)X[at] - mean) * rstd) * G[ch] + B[ch], c->acc);
            }
    }
}

int CPU_KERNEL(batchnorm)(kctx *c) {
    const rt_view *x = &c->in[0];
    int64_t grp;
    if (bn_check(c, 0, 1, &grp) || cpu_expect(c, "output 0", &c->out[0], cpu_shape_of(x))) return -1;
    int64_t n = x->shape[0], nc = x->shape[1], hw = x->shape[2] * x->shape[3];
    for (int64_t i0 = 0; i0 < n; i0 += grp) {
        int64_t at = i0 * nc * hw;
        bn_fwd_group(c, cpu_r(x) + at, cpu_r(&c->in[1]), cpu_r(&c->in[2]), cpu_r(&c->out[0]) + at, grp, nc, hw);
    }
    return 0;
}

// One group of n samples: dx = gamma rstd (dy - mean(dy) - xhat mean(dy xhat)) per channel.
static void bn_grad_x_group(kctx *c, const real *DY, const real *X, const real *G, real *DX, int64_t n, int64_t nc, int64_t hw) {
    for (int64_t ch = 0; ch < nc; ch++) {
        double mean, rstd, s1 = 0, s2 = 0, cnt = (double)(n * hw);
        bn_stats(X, n, nc, hw, ch, c->a->f[PLAN_AF_EPS], &mean, &rstd);
        for (int64_t i = 0; i < n; i++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t at = (i * nc + ch) * hw + p;
                s1 += DY[at];
                s2 += DY[at] * ((double)X[at] - mean) * rstd;
            }
        for (int64_t i = 0; i < n; i++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t at = (i * nc + ch) * hw + p;
                double xh = ((double)X[at] - mean) * rstd;
                cpu_put(&DX[at], (real)(G[ch] * rstd * (DY[at] - s1 / cnt - xh * s2 / cnt)), c->acc);
            }
    }
}

// (dy, x, gamma) -> dx, each group on its own statistics.
int CPU_KERNEL(batchnorm_grad_x)(kctx *c) {
    const rt_view *x = &c->in[1];
    int64_t grp;
    if (bn_check(c, 1, 2, &grp) || cpu_expect(c, "input 0", &c->in[0], cpu_shape_of(x)) ||
        cpu_expect(c, "output 0", &c->out[0], cpu_shape_of(x)))
        return -1;
    int64_t n = x->shape[0], nc = x->shape[1], hw = x->shape[2] * x->shape[3];
    for (int64_t i0 = 0; i0 < n; i0 += grp) {
        int64_t at = i0 * nc * hw;
        bn_grad_x_group(c, cpu_r(&c->in[0]) + at, cpu_r(x) + at, cpu_r(&c->in[2]), cpu_r(&c->out[0]) + at, grp, nc, hw);
    }
    return 0;
}

// (dy, x) -> dgamma = sum(dy xhat), dbeta = sum(dy) per channel, xhat on each group's statistics.
int CPU_KERNEL(batchnorm_grad_w)(kctx *c) {
    const rt_view *x = &c->in[1];
    int64_t grp;
    if (bn_check(c, 1, 2, &grp) || cpu_expect(c, "input 0", &c->in[0], cpu_shape_of(x))) return -1;
    int64_t n = x->shape[0], nc = x->shape[1], hw = x->shape[2] * x->shape[3];
    kshape per_channel = {.rank = 1, .d = {nc}};
    if (cpu_expect(c, "output 0", &c->out[0], per_channel) || cpu_expect(c, "output 1", &c->out[1], per_channel)) return -1;
    cpu_clear(c, 0);
    cpu_clear(c, 1);
    real *DG = cpu_r(&c->out[0]), *DB = cpu_r(&c->out[1]);
    for (int64_t ch = 0; ch < nc; ch++) {
        double sg = 0, sb = 0;
        for (int64_t i0 = 0; i0 < n; i0 += grp) {
            const real *DY = cpu_r(&c->in[0]) + i0 * nc * hw, *X = cpu_r(x) + i0 * nc * hw;
            double mean, rstd;
            bn_stats(X, grp, nc, hw, ch, c->a->f[PLAN_AF_EPS], &mean, &rstd);
            for (int64_t i = 0; i < grp; i++)
                for (int64_t p = 0; p < hw; p++) {
                    int64_t at = (i * nc + ch) * hw + p;
                    sg += DY[at] * ((double)X[at] - mean) * rstd;
                    sb += DY[at];
                }
        }
        DG[ch] += (real)sg;
        DB[ch] += (real)sb;
    }
    return 0;
}

/* ---- attention: per (batch, head), [s,d] matrices with row stride n d ---- */

typedef struct attn_geom {
    int64_t b, s, n, d, ld;
    real scale;
    bool causal;
} attn_geom;

// Every operand is [b,s,n,d] like input `ref`.
static int attn_check(kctx *c, uint32_t ref, attn_geom *g) {
    const rt_view *q = &c->in[ref];
    if (rank_is(c, ref ? "input 1" : "input 0", q, 4, "[b,s,n,d]")) return -1;
    for (uint32_t i = 0; i < c->nin + c->nout; i++) {
        const rt_view *v = i < c->nin ? &c->in[i] : &c->out[i - c->nin];
        char what[32];
        snprintf(what, sizeof what, "%s %u", i < c->nin ? "input" : "output", i < c->nin ? i : i - c->nin);
        if (cpu_expect(c, what, v, cpu_shape_of(q))) return -1;
    }
    double sc = c->a->f[PLAN_AF_SCALE];
    *g = (attn_geom){.b = q->shape[0], .s = q->shape[1], .n = q->shape[2], .d = q->shape[3], .ld = q->shape[2] * q->shape[3],
                     .scale = (real)(sc != 0 ? sc : 1 / sqrt((double)(q->shape[3] > 0 ? q->shape[3] : 1))),
                     .causal = c->a->i[PLAN_AI_CAUSAL] != 0};
    return 0;
}

// p [s,s] = softmax(scale q k^T) of one head, keys after the query masked out when causal.
static void attn_probs(const attn_geom *g, const real *q, const real *k, real *p) {
    int64_t s = g->s;
    cpu_gemm(false, true, s, s, g->d, g->scale, q, g->ld, k, g->ld, 0, p, s);
    for (int64_t i = 0; i < s; i++) {
        real *row = p + i * s;
        int64_t len = g->causal ? i + 1 : s;
        real m = row[0];
        for (int64_t j = 1; j < len; j++) m = row[j] > m ? row[j] : m;
        double sum = 0;
        for (int64_t j = 0; j < len; j++) sum += row[j] = R_EXP(row[j] - m);
        real inv = (real)(1 / sum);
        for (int64_t j = 0; j < len; j++) row[j] *= inv;
        for (int64_t j = len; j < s; j++) row[j] = 0;
    }
}

// (q, k, v) -> softmax(scale q k^T) v.
int CPU_KERNEL(attention)(kctx *c) {
    attn_geom g;
    if (attn_check(c, 0, &g)) return -1;
    real *p = scratch(c, g.s * g.s);
    if (!p) return -1;
    const real *Q = cpu_r(&c->in[0]), *K = cpu_r(&c->in[1]), *V = cpu_r(&c->in[2]);
    real *Y = cpu_r(&c->out[0]);
    for (int64_t bi = 0; bi < g.b; bi++)
        for (int64_t h = 0; h < g.n; h++) {
            int64_t off = bi * g.s * g.ld + h * g.d;
            attn_probs(&g, Q + off, K + off, p);
            cpu_gemm(false, false, g.s, g.d, g.s, 1, p, g.s, V + off, g.ld, cpu_beta(c), Y + off, g.ld);
        }
    free(p);
    return 0;
}

// dS = P (dP - rowsum(dP P)), in place over dp.
static void attn_dscores(const attn_geom *g, const real *p, real *dp) {
    for (int64_t i = 0; i < g->s; i++) {
        const real *pr = p + i * g->s;
        real *dr = dp + i * g->s;
        double dot = 0;
        for (int64_t j = 0; j < g->s; j++) dot += (double)dr[j] * pr[j];
        for (int64_t j = 0; j < g->s; j++) dr[j] = pr[j] * (dr[j] - (real)dot);
    }
}

// (dy, q, k, v) -> (dq, dk, dv): dv = P^T dy, dP = dy v^T, dq = scale dS k, dk = scale dS^T q.
int CPU_KERNEL(attention_grad)(kctx *c) {
    attn_geom g;
    if (attn_check(c, 1, &g)) return -1;
    real *p = scratch(c, 2 * g.s * g.s);
    if (!p) return -1;
    real *dp = p + g.s * g.s, beta = cpu_beta(c);
    const real *DY = cpu_r(&c->in[0]), *Q = cpu_r(&c->in[1]), *K = cpu_r(&c->in[2]), *V = cpu_r(&c->in[3]);
    real *DQ = cpu_r(&c->out[0]), *DK = cpu_r(&c->out[1]), *DV = cpu_r(&c->out[2]);
    int64_t s = g.s, d = g.d, ld = g.ld;
    for (int64_t bi = 0; bi < g.b; bi++)
        for (int64_t h = 0; h < g.n; h++) {
            int64_t off = bi * s * ld + h * d;
            attn_probs(&g, Q + off, K + off, p);
            cpu_gemm(true, false, s, d, s, 1, p, s, DY + off, ld, beta, DV + off, ld);
            cpu_gemm(false, true, s, s, d, 1, DY + off, ld, V + off, ld, 0, dp, s);
            attn_dscores(&g, p, dp);
            cpu_gemm(false, false, s, d, s, g.scale, dp, s, K + off, ld, beta, DQ + off, ld);
            cpu_gemm(true, false, s, d, s, g.scale, dp, s, Q + off, ld, beta, DK + off, ld);
        }
    free(p);
    return 0;
}

/* ---- embeddings: a table piece holds rows [lo, hi) of the logical table ---- */

// Every id in [0, rows): an id outside the logical table is an error, not a zero row.
static int ids_check(kctx *c, const rt_view *ids, const char *what, int64_t rows) {
    const int32_t *id = cpu_i(ids);
    int64_t n = cpu_numel(ids);
    for (int64_t i = 0; i < n; i++)
        if (id[i] < 0 || id[i] >= rows)
            return cpu_fail(c, "%s holds id %d at element %lld, outside the table's %lld rows", what, id[i], (long long)i,
                            (long long)rows);
    return 0;
}

// ids [*b] (input 0 or 1), table [v,h] (named tname), rows [*b,h] (named rname).
static int emb_check(kctx *c, const rt_view *ids, const char *iname, const rt_view *table, const char *tname, const rt_view *rows,
                     const char *rname) {
    if (rank_is(c, tname, table, 2, "[v,h]")) return -1;
    if (ids->rank >= PLAN_MAX_RANK) return cpu_fail(c, "%s has rank %d; at most %d", iname, ids->rank, PLAN_MAX_RANK - 1);
    kshape want = cpu_shape_of(ids);
    want.d[want.rank++] = table->shape[1];
    if (cpu_expect(c, rname, rows, want)) return -1;
    return ids_check(c, ids, iname, table->full[0]);
}

// Adds (or copies) row `id` of the piece [lo, lo + n) into out; nothing when it is elsewhere.
static void emb_row(const real *table, int64_t lo, int64_t n, int64_t h, int32_t id, real *out, bool add) {
    bool here = id >= lo && id < lo + n;
    for (int64_t j = 0; j < h; j++) {
        real v = here ? table[(id - lo) * h + j] : 0;
        out[j] = add ? out[j] + v : v;
    }
}

// (ids [*b], table [v,h]) -> [*b,h].
int CPU_KERNEL(embedding)(kctx *c) {
    const rt_view *ids = &c->in[0], *t = &c->in[1], *y = &c->out[0];
    if (emb_check(c, ids, "input 0", t, "input 1", y, "output 0")) return -1;
    int64_t n = cpu_numel(ids), h = t->shape[1];
    const int32_t *id = cpu_i(ids);
    for (int64_t i = 0; i < n; i++) emb_row(cpu_r(t), t->start[0], t->shape[0], h, id[i], cpu_r(y) + i * h, c->acc);
    return 0;
}

// (dy [*b,h], ids [*b]) -> dtable [v,h]: dy's rows summed into the rows this piece holds.
int CPU_KERNEL(embedding_grad)(kctx *c) {
    const rt_view *dy = &c->in[0], *ids = &c->in[1], *dt = &c->out[0];
    if (emb_check(c, ids, "input 1", dt, "output 0", dy, "input 0")) return -1;
    int64_t n = cpu_numel(ids), h = dt->shape[1], lo = dt->start[0];
    const int32_t *id = cpu_i(ids);
    const real *DY = cpu_r(dy);
    real *DT = cpu_r(dt);
    cpu_clear(c, 0);
    for (int64_t i = 0; i < n; i++)
        if (id[i] >= lo && id[i] < lo + dt->shape[0])
            for (int64_t j = 0; j < h; j++) DT[(id[i] - lo) * h + j] += DY[i * h + j];
    return 0;
}

// ids [b,l], table [r,e], rows [b,e].
static int bag_check(kctx *c, const rt_view *ids, const char *iname, const rt_view *table, const char *tname, const rt_view *rows,
                     const char *rname) {
    if (rank_is(c, iname, ids, 2, "[b,l]") || rank_is(c, tname, table, 2, "[r,e]")) return -1;
    if (cpu_expect(c, rname, rows, (kshape){.rank = 2, .d = {ids->shape[0], table->shape[1]}})) return -1;
    return ids_check(c, ids, iname, table->full[0]);
}

// (ids [b,l], table [r,e]) -> [b,e]: the sum of each bag's rows.
int CPU_KERNEL(embedding_bag)(kctx *c) {
    const rt_view *ids = &c->in[0], *t = &c->in[1], *y = &c->out[0];
    if (bag_check(c, ids, "input 0", t, "input 1", y, "output 0")) return -1;
    int64_t b = ids->shape[0], l = ids->shape[1], e = t->shape[1];
    const int32_t *id = cpu_i(ids);
    cpu_clear(c, 0);
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < l; j++) emb_row(cpu_r(t), t->start[0], t->shape[0], e, id[i * l + j], cpu_r(y) + i * e, true);
    return 0;
}

// (dy [b,e], ids [b,l]) -> dtable [r,e]: each bag's dy into each of its rows this piece holds.
int CPU_KERNEL(embedding_bag_grad)(kctx *c) {
    const rt_view *dy = &c->in[0], *ids = &c->in[1], *dt = &c->out[0];
    if (bag_check(c, ids, "input 1", dt, "output 0", dy, "input 0")) return -1;
    int64_t b = ids->shape[0], l = ids->shape[1], e = dt->shape[1], lo = dt->start[0];
    const int32_t *id = cpu_i(ids);
    const real *DY = cpu_r(dy);
    real *DT = cpu_r(dt);
    cpu_clear(c, 0);
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < l; j++) {
            int32_t r = id[i * l + j];
            if (r < lo || r >= lo + dt->shape[0]) continue;
            for (int64_t k = 0; k < e; k++) DT[(r - lo) * e + k] += DY[i * e + k];
        }
    return 0;
}

/* ---- dropout (and dropout_grad, the same mask on dy) ---- */

// x -> x kept with probability 1 - p and scaled by 1 / (1 - p), per logical element index.
int CPU_KERNEL(dropout)(kctx *c) {
    const rt_view *x = &c->in[0];
    double p = c->a->f[PLAN_AF_P];
    if (!(p >= 0 && p < 1)) return cpu_fail(c, "p = %g; the drop probability must be in [0, 1)", p);
    if (cpu_expect(c, "output 0", &c->out[0], cpu_shape_of(x))) return -1;
    const rt_kernel *k = c->k;
    uint64_t key = rt_key(rt_key(rt_key(rt_key(k->seed, (uint64_t)c->a->i[PLAN_AI_SEED]), k->step), k->mb), k->layer);
    int r = x->rank;
    int64_t fs[PLAN_MAX_RANK], idx[PLAN_MAX_RANK] = {0};
    for (int i = r - 1; i >= 0; i--) fs[i] = i == r - 1 ? 1 : fs[i + 1] * x->full[i + 1];
    int64_t n = cpu_numel(x), run = r ? x->shape[r - 1] : 1, lo = r ? x->start[r - 1] : 0;
    const real *X = cpu_r(x);
    real *Y = cpu_r(&c->out[0]), keep = (real)(1 / (1 - p));
    // One run along the last dimension at a time; idx counts the others.
    for (int64_t done = 0; run > 0 && done < n; done += run) {
        uint64_t g = (uint64_t)lo;
        for (int i = 0; i < r - 1; i++) g += (uint64_t)((x->start[i] + idx[i]) * fs[i]);
        for (int64_t j = 0; j < run; j++) {
            bool kept = rt_uniform(rt_key(key, g + (uint64_t)j)) >= p;
            cpu_put(&Y[done + j], kept ? X[done + j] * keep : 0, c->acc);
        }
        for (int i = r - 2; i >= 0 && ++idx[i] == x->shape[i]; i--) idx[i] = 0;
    }
    return 0;
}
