/*
 * kernels_nn.cu: the CUDA backend's own kernels, part two (kernels.h has the contracts):
 * pooling, batch norm and the pieces of attention that are not GEMMs. Ports of
 * runtime/cpu/conv.c, norm.c and attention.c.
 *
 * Why our own kernels here and not cuDNN's (convolution does use cuDNN, ops.c):
 *   - pooling: the CPU's maxpool sends the gradient to the FIRST maximum of a window and skips
 *     padding; a gather per input element reproduces that exactly and deterministically, where
 *     cuDNN's tie-breaking and padding rules would have to be matched blind;
 *   - batch norm: the plan splits its backward into batchnorm_grad_x and batchnorm_grad_w,
 *     while cuDNN's backward computes both at once, and cuDNN refuses eps below
 *     CUDNN_BN_MIN_EPSILON; one block per channel with double sums is simple and exact. Ghost
 *     batch norm (statistics per group of G samples) is one block per (group, channel): the
 *     kernels see ng groups of n samples, ng = 1 without ghost.
 */
#include "common.cuh"

#include <math.h>

/* ---- pooling ---- */

// The window of output (oi, oj) clipped to the image.
static __device__ void window_at(const ck_win &g, int64_t oi, int64_t oj, int64_t *i0, int64_t *i1, int64_t *j0, int64_t *j1) {
    int64_t ti = oi * g.sh - g.ph, tj = oj * g.sw - g.pw;
    *i0 = ti < 0 ? 0 : ti;
    *j0 = tj < 0 ? 0 : tj;
    *i1 = ti + g.kh < g.h ? ti + g.kh : g.h;
    *j1 = tj + g.kw < g.w ? tj + g.kw : g.w;
}

// The flat index (in the plane) of the first maximum of a window; -1 if it holds no element.
static __device__ int64_t window_argmax(const void *x, int xdt, int64_t plane, const ck_win &g, int64_t oi, int64_t oj) {
    int64_t i0, i1, j0, j1, best = -1;
    float bv = 0;
    window_at(g, oi, oj, &i0, &i1, &j0, &j1);
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) {
            float v = ld(x, plane + i * g.w + j, xdt);
            if (best < 0 || v > bv) best = i * g.w + j, bv = v;
        }
    return best;
}

__global__ void k_pool(bool max, ck_win g, const void *x, int xdt, void *y, int ydt, bool acc) {
    float inv = (float)(1.0 / (double)(g.kh * g.kw));
    CK_FOR_EACH(idx, g.n * g.c * g.ho * g.wo) {
        int64_t oj = idx % g.wo, oi = (idx / g.wo) % g.ho, pl = idx / (g.wo * g.ho), plane = pl * g.h * g.w;
        if (max) {
            int64_t at = window_argmax(x, xdt, plane, g, oi, oj);
            put(y, idx, ydt, at < 0 ? 0 : ld(x, plane + at, xdt), acc);
        } else {
            int64_t i0, i1, j0, j1;
            window_at(g, oi, oj, &i0, &i1, &j0, &j1);
            double s = 0;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++) s += ld(x, plane + i * g.w + j, xdt);
            put(y, idx, ydt, (float)s * inv, acc);
        }
    }
}

extern "C" cudaError_t ck_pool(cudaStream_t st, bool max, const ck_win *g, const void *x, int xdt, void *y, int ydt, bool acc) {
    int64_t n = g->n * g->c * g->ho * g->wo;
    if (n <= 0) return cudaSuccess;
    k_pool<<<ck_grid(n), CK_THREADS, 0, st>>>(max, *g, x, xdt, y, ydt, acc);
    return cudaGetLastError();
}

// The outputs whose windows contain input row i: [*lo, *hi).
static __device__ void covering(int64_t i, int64_t k, int64_t s, int64_t p, int64_t nout, int64_t *lo, int64_t *hi) {
    // o s - p <= i < o s - p + k  <=>  (i + p - k) / s < o <= (i + p) / s
    int64_t a = i + p - k + 1; // o >= ceil(a / s)
    int64_t l = a <= 0 ? 0 : (a + s - 1) / s, h = (i + p) / s + 1;
    *lo = l < 0 ? 0 : l;
    *hi = h > nout ? nout : h;
}

__global__ void k_pool_grad(bool max, ck_win g, const void *dy, int dydt, const void *x, int xdt, void *dx, int dxdt, bool acc) {
    float inv = (float)(1.0 / (double)(g.kh * g.kw));
    CK_FOR_EACH(idx, g.n * g.c * g.h * g.w) {
        int64_t j = idx % g.w, i = (idx / g.w) % g.h, pl = idx / (g.w * g.h), plane = pl * g.h * g.w;
        int64_t oi0, oi1, oj0, oj1;
        covering(i, g.kh, g.sh, g.ph, g.ho, &oi0, &oi1);
        covering(j, g.kw, g.sw, g.pw, g.wo, &oj0, &oj1);
        float s = acc ? ld(dx, idx, dxdt) : 0;
        for (int64_t oi = oi0; oi < oi1; oi++)
            for (int64_t oj = oj0; oj < oj1; oj++) {
                float d = ld(dy, (pl * g.ho + oi) * g.wo + oj, dydt);
                if (!max) s += d * inv;
                else if (window_argmax(x, xdt, plane, g, oi, oj) == i * g.w + j) s += d;
            }
        st(dx, idx, dxdt, s);
    }
}

extern "C" cudaError_t ck_pool_grad(cudaStream_t st, bool max, const ck_win *g, const void *dy, int dydt, const void *x, int xdt,
                                    void *dx, int dxdt, bool acc) {
    int64_t n = g->n * g->c * g->h * g->w;
    if (n <= 0) return cudaSuccess;
    k_pool_grad<<<ck_grid(n), CK_THREADS, 0, st>>>(max, *g, dy, dydt, x, xdt, dx, dxdt, acc);
    return cudaGetLastError();
}

/* ---- batch norm: one block per (group, channel) ---- */

// x holds ng groups of n samples [ng n, c, hw]; row r = gi c + ch is channel ch of group gi.
static __device__ int64_t bn_at(int64_t n, int64_t c, int64_t hw, int64_t r, int64_t k) {
    return (((r / c) * n + k / hw) * c + r % c) * hw + k % hw;
}

__global__ void k_bn_stats(int64_t ng, int64_t n, int64_t c, int64_t hw, const void *x, int xdt, double eps, double *mean, double *rstd) {
    __shared__ double sh[CK_THREADS];
    CK_FOR_EACH_ROW(r, ng * c) {
        double cnt = (double)(n * hw), s = 0, v = 0;
        for (int64_t k = threadIdx.x; k < n * hw; k += CK_THREADS) s += ld(x, bn_at(n, c, hw, r, k), xdt);
        s = block_sum(s, sh);
        double m = cnt > 0 ? s / cnt : 0;
        for (int64_t k = threadIdx.x; k < n * hw; k += CK_THREADS) {
            double d = ld(x, bn_at(n, c, hw, r, k), xdt) - m;
            v += d * d;
        }
        v = block_sum(v, sh);
        if (threadIdx.x == 0) mean[r] = m, rstd[r] = 1 / sqrt((cnt > 0 ? v / cnt : 0) + eps);
    }
}

extern "C" cudaError_t ck_bn_stats(cudaStream_t st, int64_t ng, int64_t n, int64_t c, int64_t hw, const void *x, int xdt, double eps,
                                   double *mean, double *rstd) {
    if (ng * c <= 0) return cudaSuccess;
    k_bn_stats<<<ck_row_grid(ng * c), CK_THREADS, 0, st>>>(ng, n, c, hw, x, xdt, eps, mean, rstd);
    return cudaGetLastError();
}

__global__ void k_bn_sums(int64_t ng, int64_t n, int64_t c, int64_t hw, const void *dy, int dydt, const void *x, int xdt,
                          const double *mean, const double *rstd, double *s1, double *s2) {
    __shared__ double sh[CK_THREADS];
    CK_FOR_EACH_ROW(r, ng * c) {
        double a = 0, b = 0;
        for (int64_t k = threadIdx.x; k < n * hw; k += CK_THREADS) {
            int64_t at = bn_at(n, c, hw, r, k);
            double d = ld(dy, at, dydt);
            a += d;
            if (x) b += d * ((double)ld(x, at, xdt) - mean[r]) * rstd[r];
        }
        a = block_sum(a, sh);
        if (x) b = block_sum(b, sh);
        if (threadIdx.x == 0) {
            s1[r] = a;
            if (s2) s2[r] = b;
        }
    }
}

extern "C" cudaError_t ck_bn_sums(cudaStream_t st, int64_t ng, int64_t n, int64_t c, int64_t hw, const void *dy, int dydt, const void *x,
                                  int xdt, const double *mean, const double *rstd, double *s1, double *s2) {
    if (ng * c <= 0) return cudaSuccess;
    k_bn_sums<<<ck_row_grid(ng * c), CK_THREADS, 0, st>>>(ng, n, c, hw, dy, dydt, x, xdt, mean, rstd, s1, x ? s2 : NULL);
    return cudaGetLastError();
}

// The (group, channel) row of flat element `at` of [ng n, c, hw].
static __device__ int64_t bn_row(int64_t n, int64_t c, int64_t hw, int64_t at) { return (at / (n * c * hw)) * c + (at / hw) % c; }

__global__ void k_bn_fwd(int64_t ng, int64_t n, int64_t c, int64_t hw, const void *x, int xdt, const double *mean, const double *rstd,
                         const void *g, int gdt, const void *b, int bdt, void *y, int ydt, bool acc) {
    CK_FOR_EACH(at, ng * n * c * hw) {
        int64_t ch = (at / hw) % c, r = bn_row(n, c, hw, at);
        float v = (float)(((double)ld(x, at, xdt) - mean[r]) * rstd[r]) * ld(g, ch, gdt) + ld(b, ch, bdt);
        put(y, at, ydt, v, acc);
    }
}

extern "C" cudaError_t ck_bn_fwd(cudaStream_t st, int64_t ng, int64_t n, int64_t c, int64_t hw, const void *x, int xdt,
                                 const double *mean, const double *rstd, const void *g, int gdt, const void *b, int bdt, void *y,
                                 int ydt, bool acc) {
    if (ng * n * c * hw <= 0) return cudaSuccess;
    k_bn_fwd<<<ck_grid(ng * n * c * hw), CK_THREADS, 0, st>>>(ng, n, c, hw, x, xdt, mean, rstd, g, gdt, b, bdt, y, ydt, acc);
    return cudaGetLastError();
}

__global__ void k_bn_grad_x(int64_t ng, int64_t n, int64_t c, int64_t hw, const void *dy, int dydt, const void *x, int xdt,
                            const double *mean, const double *rstd, const double *s1, const double *s2, const void *g, int gdt,
                            void *dx, int dxdt, bool acc) {
    double cnt = (double)(n * hw);
    CK_FOR_EACH(at, ng * n * c * hw) {
        int64_t ch = (at / hw) % c, r = bn_row(n, c, hw, at);
        double xh = ((double)ld(x, at, xdt) - mean[r]) * rstd[r];
        double v = (double)ld(g, ch, gdt) * rstd[r] * ((double)ld(dy, at, dydt) - s1[r] / cnt - xh * s2[r] / cnt);
        put(dx, at, dxdt, (float)v, acc);
    }
}

extern "C" cudaError_t ck_bn_grad_x(cudaStream_t st, int64_t ng, int64_t n, int64_t c, int64_t hw, const void *dy, int dydt,
                                    const void *x, int xdt, const double *mean, const double *rstd, const double *s1,
                                    const double *s2, const void *g, int gdt, void *dx, int dxdt, bool acc) {
    if (ng * n * c * hw <= 0) return cudaSuccess;
    k_bn_grad_x<<<ck_grid(ng * n * c * hw), CK_THREADS, 0, st>>>(ng, n, c, hw, dy, dydt, x, xdt, mean, rstd, s1, s2, g, gdt, dx, dxdt, acc);
    return cudaGetLastError();
}

__global__ void k_put_channels(int64_t ng, int64_t c, const double *v, void *out, int odt, bool acc) {
    CK_FOR_EACH(ch, c) {
        double sum = 0;
        for (int64_t gi = 0; gi < ng; gi++) sum += v[gi * c + ch];
        put(out, ch, odt, (float)sum, acc);
    }
}

extern "C" cudaError_t ck_put_channels(cudaStream_t st, int64_t ng, int64_t c, const double *v, void *out, int odt, bool acc) {
    if (c <= 0) return cudaSuccess;
    k_put_channels<<<ck_grid(c), CK_THREADS, 0, st>>>(ng, c, v, out, odt, acc);
    return cudaGetLastError();
}

/* ---- attention: the row operations between the GEMMs (ops.c) ---- */

__global__ void k_attn_softmax(int64_t heads, int64_t s, float *p, bool causal) {
    __shared__ double sh[CK_THREADS];
    __shared__ float shf[CK_THREADS];
    CK_FOR_EACH_ROW(r, heads * s) {
        float *row = p + r * s;
        int64_t len = causal ? r % s + 1 : s;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < len; j += CK_THREADS) m = fmaxf(m, row[j]);
        m = block_max(m, shf);
        double sum = 0;
        for (int64_t j = threadIdx.x; j < len; j += CK_THREADS) sum += row[j] = expf(row[j] - m);
        sum = block_sum(sum, sh);
        float inv = (float)(1 / sum);
        for (int64_t j = threadIdx.x; j < s; j += CK_THREADS) row[j] = j < len ? row[j] * inv : 0;
    }
}

// The same softmax with the row in registers, R elements a thread (s <= R CK_THREADS): one read
// and one write of p instead of three and two, the same sums in the same order, so the same bits.
template <int R>
__global__ void k_attn_softmax_reg(int64_t heads, int64_t s, float *p, bool causal) {
    __shared__ double sh[CK_THREADS];
    __shared__ float shf[CK_THREADS];
    CK_FOR_EACH_ROW(r, heads * s) {
        float *row = p + r * s, v[R];
        int64_t len = causal ? r % s + 1 : s;
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < R; k++) {
            int64_t j = threadIdx.x + (int64_t)k * CK_THREADS;
            v[k] = j < len ? row[j] : -INFINITY;
            m = fmaxf(m, v[k]);
        }
        m = block_max(m, shf);
        double sum = 0;
#pragma unroll
        for (int k = 0; k < R; k++) {
            int64_t j = threadIdx.x + (int64_t)k * CK_THREADS;
            if (j < len) sum += v[k] = expf(v[k] - m);
        }
        sum = block_sum(sum, sh);
        float inv = (float)(1 / sum);
#pragma unroll
        for (int k = 0; k < R; k++) {
            int64_t j = threadIdx.x + (int64_t)k * CK_THREADS;
            if (j < s) row[j] = j < len ? v[k] * inv : 0;
        }
    }
}

extern "C" cudaError_t ck_attn_softmax(cudaStream_t st, int64_t heads, int64_t s, float *p, bool causal) {
    if (heads * s <= 0) return cudaSuccess;
    unsigned g = ck_row_grid(heads * s);
    if (s <= CK_THREADS) k_attn_softmax_reg<1><<<g, CK_THREADS, 0, st>>>(heads, s, p, causal);
    else if (s <= 2 * CK_THREADS) k_attn_softmax_reg<2><<<g, CK_THREADS, 0, st>>>(heads, s, p, causal);
    else if (s <= 4 * CK_THREADS) k_attn_softmax_reg<4><<<g, CK_THREADS, 0, st>>>(heads, s, p, causal);
    else if (s <= 8 * CK_THREADS) k_attn_softmax_reg<8><<<g, CK_THREADS, 0, st>>>(heads, s, p, causal);
    else k_attn_softmax<<<g, CK_THREADS, 0, st>>>(heads, s, p, causal);
    return cudaGetLastError();
}

__global__ void k_attn_dscores(int64_t heads, int64_t s, const float *p, float *dp) {
    __shared__ double sh[CK_THREADS];
    CK_FOR_EACH_ROW(r, heads * s) {
        const float *pr = p + r * s;
        float *dr = dp + r * s;
        double dot = 0;
        for (int64_t j = threadIdx.x; j < s; j += CK_THREADS) dot += (double)dr[j] * pr[j];
        dot = block_sum(dot, sh);
        for (int64_t j = threadIdx.x; j < s; j += CK_THREADS) dr[j] = pr[j] * (dr[j] - (float)dot);
    }
}

// The same with both rows in registers: p and dp read once, dp written once; the same bits.
template <int R>
__global__ void k_attn_dscores_reg(int64_t heads, int64_t s, const float *p, float *dp) {
    __shared__ double sh[CK_THREADS];
    CK_FOR_EACH_ROW(r, heads * s) {
        const float *pr = p + r * s;
        float *dr = dp + r * s, a[R], b[R];
        double dot = 0;
#pragma unroll
        for (int k = 0; k < R; k++) {
            int64_t j = threadIdx.x + (int64_t)k * CK_THREADS;
            a[k] = j < s ? pr[j] : 0, b[k] = j < s ? dr[j] : 0;
            if (j < s) dot += (double)b[k] * a[k];
        }
        dot = block_sum(dot, sh);
#pragma unroll
        for (int k = 0; k < R; k++) {
            int64_t j = threadIdx.x + (int64_t)k * CK_THREADS;
            if (j < s) dr[j] = a[k] * (b[k] - (float)dot);
        }
    }
}

__global__ void k_attn_drop(ck_attn a, int64_t bi, float *p) {
    CK_FOR_EACH(e, a.n * a.s * a.t) {
        int64_t j = e % a.t, i = (e / a.t) % a.s, h = e / (a.t * a.s);
        p[e] *= ck_attn_keep(&a, bi, h, i, j);
    }
}

extern "C" cudaError_t ck_attn_drop(cudaStream_t st, const ck_attn *a, int64_t bi, float *p) {
    if (a->n * a->s * a->t <= 0) return cudaSuccess;
    k_attn_drop<<<ck_grid(a->n * a->s * a->t), CK_THREADS, 0, st>>>(*a, bi, p);
    return cudaGetLastError();
}

// cpu/attention.c's attn_dscores with dropout: dP = dp . mask, dS = P (dP - rowsum(dP P)), p *= mask.
__global__ void k_attn_dscores_drop(ck_attn a, int64_t bi, float *p, float *dp) {
    __shared__ double sh[CK_THREADS];
    CK_FOR_EACH_ROW(r, a.n * a.s) {
        int64_t i = r % a.s, h = r / a.s;
        float *pr = p + r * a.t, *dr = dp + r * a.t;
        double dot = 0;
        for (int64_t j = threadIdx.x; j < a.t; j += CK_THREADS) {
            dr[j] *= ck_attn_keep(&a, bi, h, i, j);
            dot += (double)dr[j] * pr[j];
        }
        dot = block_sum(dot, sh);
        for (int64_t j = threadIdx.x; j < a.t; j += CK_THREADS) {
            dr[j] = pr[j] * (dr[j] - (float)dot);
            pr[j] *= ck_attn_keep(&a, bi, h, i, j);
        }
    }
}

extern "C" cudaError_t ck_attn_dscores_drop(cudaStream_t st, const ck_attn *a, int64_t bi, float *p, float *dp) {
    if (a->n * a->s <= 0) return cudaSuccess;
    k_attn_dscores_drop<<<ck_row_grid(a->n * a->s), CK_THREADS, 0, st>>>(*a, bi, p, dp);
    return cudaGetLastError();
}

extern "C" cudaError_t ck_attn_dscores(cudaStream_t st, int64_t heads, int64_t s, const float *p, float *dp) {
    if (heads * s <= 0) return cudaSuccess;
    unsigned g = ck_row_grid(heads * s);
    if (s <= CK_THREADS) k_attn_dscores_reg<1><<<g, CK_THREADS, 0, st>>>(heads, s, p, dp);
    else if (s <= 2 * CK_THREADS) k_attn_dscores_reg<2><<<g, CK_THREADS, 0, st>>>(heads, s, p, dp);
    else if (s <= 4 * CK_THREADS) k_attn_dscores_reg<4><<<g, CK_THREADS, 0, st>>>(heads, s, p, dp);
    else if (s <= 8 * CK_THREADS) k_attn_dscores_reg<8><<<g, CK_THREADS, 0, st>>>(heads, s, p, dp);
    else k_attn_dscores<<<g, CK_THREADS, 0, st>>>(heads, s, p, dp);
    return cudaGetLastError();
}
