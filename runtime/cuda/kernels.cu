/*
 * kernels.cu: the CUDA backend's own kernels, part one (kernels.h has the contracts):
 * element-wise operators, dropout, norms, softmax, the losses, data movement, embeddings and
 * the optimizer steps. Each is a port of the CPU kernel of the same operator (runtime/cpu/, a
 * file per operator family) with the same float expressions in the same order, so that
 * results agree to rounding (and bit for bit where the CPU code has no library call).
 *
 * Dropout's mask must equal the CPU's bit for bit: ck_mix and ck_key below are rt.h's rt_mix
 * and rt_key, and the element's key is its row-major index in the logical tensor, computed as
 * the CPU computes it. The gpu test suite checks the mask against the CPU's.
 */
#include "common.cuh"

#include <math.h>
#include <string.h>

/* ---- element-wise ---- */

#define GELU_C 0.7978845608028654 // sqrt(2 / pi), as in cpu/elementwise.c
#define GELU_A 0.044715

__global__ void k_ew(ck_ew_args a) {
    CK_FOR_EACH(i, a.n) {
        float v = 0, x = 0, y = 0;
        if (a.a) x = ld(a.a, i, a.adt);
        // The common cases without a 64-bit division (tens of instructions): b as large as a, and
        // 32-bit arithmetic where a fits.
        int64_t bi = 0;
        if (a.b && a.b_inner == 1 && a.b_n >= a.n) bi = i;
        else if (a.b && a.n <= UINT32_MAX) bi = ((uint32_t)i / (uint32_t)a.b_inner) % (uint32_t)a.b_n;
        else if (a.b) bi = (i / a.b_inner) % a.b_n;
        switch (a.op) {
        case CK_EW_ADD:
            if (a.ua) v += x;
            if (a.ub && a.b) v += ld(a.b, bi, a.bdt);
            break;
        case CK_EW_MUL: v = x * ld(a.b, bi, a.bdt); break;
        case CK_EW_SCALE: v = x * a.s; break;
        case CK_EW_RELU: v = x > 0 ? x : 0; break;
        case CK_EW_GELU: v = x * sigmoidf_(2 * (float)GELU_C * (x + (float)GELU_A * x * x * x)); break;
        case CK_EW_SILU: v = x * sigmoidf_(x); break;
        case CK_EW_RELU_GRAD: y = ld(a.b, i, a.bdt); v = y > 0 ? x : 0; break;
        case CK_EW_GELU_GRAD: {
            y = ld(a.b, i, a.bdt);
            float x2 = y * y, s = sigmoidf_(2 * (float)GELU_C * (y + (float)GELU_A * x2 * y));
            float d = s + 2 * y * s * (1 - s) * (float)GELU_C * (1 + 3 * (float)GELU_A * x2);
            v = x * d;
            break;
        }
        case CK_EW_SILU_GRAD: {
            y = ld(a.b, i, a.bdt);
            float s = sigmoidf_(y);
            v = x * s * (1 + y * (1 - s));
            break;
        }
        case CK_EW_FILL: v = a.s; break;
        case CK_EW_MSE_GRAD: {
            float k = (float)((double)ld(a.kptr, 0, a.kdt) / a.count);
            v = 2 * k * (x - ld(a.b, i, a.bdt));
            break;
        }
        case CK_EW_BCE_GRAD: {
            float k = (float)((double)ld(a.kptr, 0, a.kdt) / a.count);
            v = k * (sigmoidf_(x) - ld(a.b, i, a.bdt));
            break;
        }
        case CK_EW_CONVERT: v = x; break;
        }
        put(a.y, i, a.ydt, v, a.acc);
    }
}

extern "C" cudaError_t ck_ew(cudaStream_t st, const ck_ew_args *a) {
    if (a->n <= 0) return cudaSuccess;
    ck_ew_args c = *a;
    if (c.b_n < 1) c.b_n = 1;
    if (c.b_inner < 1) c.b_inner = 1;
    k_ew<<<ck_grid(c.n), CK_THREADS, 0, st>>>(c);
    return cudaGetLastError();
}

/* ---- dropout: rt.h's counter-based generator ---- */

// ck_mix, ck_key and ck_uniform: common.cuh.

// plan_zigzag_pos: the logical position that stored position i of n holds in zigzag order of z
// chunks (i itself when z < 2).
static __device__ __forceinline__ int64_t ck_zigzag_pos(int64_t i, int64_t n, uint32_t z) {
    if (z < 2 || n % z) return i;
    int64_t h = n / z, k = i / h;
    return (k % 2 == 0 ? k / 2 : (int64_t)z - 1 - k / 2) * h + i % h;
}

__global__ void k_dropout(void *y, int ydt, const void *x, int xdt, ck_box b, int zdim, uint32_t z, int64_t n, uint64_t key,
                          double p, float keep, bool acc) {
    int64_t fs[CK_MAX_RANK];
    for (int d = b.rank - 1; d >= 0; d--) fs[d] = d == b.rank - 1 ? 1 : fs[d + 1] * b.full[d + 1];
    CK_FOR_EACH(i, n) {
        uint64_t g = 0;
        int64_t rest = i;
        for (int d = b.rank - 1; d >= 0; d--) {
            int64_t at = b.start[d] + rest % b.shape[d];
            rest /= b.shape[d];
            g += (uint64_t)((z && d == zdim ? ck_zigzag_pos(at, b.full[d], z) : at) * fs[d]);
        }
        bool kept = ck_uniform(ck_key(key, g)) >= p;
        put(y, i, ydt, kept ? ld(x, i, xdt) * keep : 0, acc);
    }
}

extern "C" cudaError_t ck_dropout(cudaStream_t st, void *y, int ydt, const void *x, int xdt, const ck_box *box, int zdim, uint32_t z,
                                  uint64_t key, double p, float keep, bool acc) {
    int64_t n = 1;
    for (int d = 0; d < box->rank; d++) n *= box->shape[d];
    if (n <= 0) return cudaSuccess;
    k_dropout<<<ck_grid(n), CK_THREADS, 0, st>>>(y, ydt, x, xdt, *box, zdim, z, n, key, p, keep, acc);
    return cudaGetLastError();
}

/* ---- norms: one block per row ---- */

// The mean (0 unless center) and rstd of row x[0..h), as the CPU's row_stats computes them.
static __device__ void row_stats(const void *x, int xdt, int64_t off, int64_t h, double eps, bool center, double *sh, double *mean,
                                 double *rstd) {
    double m = 0, v = 0;
    if (center) {
        for (int64_t j = threadIdx.x; j < h; j += CK_THREADS) m += ld(x, off + j, xdt);
        m = block_sum(m, sh) / (double)h;
    }
    for (int64_t j = threadIdx.x; j < h; j += CK_THREADS) {
        double d = (double)ld(x, off + j, xdt) - m;
        v += d * d;
    }
    v = block_sum(v, sh);
    *mean = m;
    *rstd = 1 / sqrt(v / (double)h + eps);
}

__global__ void k_norm(int64_t rows, int64_t h, const void *x, int xdt, const void *g, int gdt, const void *b, int bdt, void *y,
                       int ydt, double eps, bool center, bool acc) {
    __shared__ double sh[CK_THREADS];
    CK_FOR_EACH_ROW(r, rows) {
        double mean, rstd;
        int64_t off = r * h;
        row_stats(x, xdt, off, h, eps, center, sh, &mean, &rstd);
        for (int64_t j = threadIdx.x; j < h; j += CK_THREADS) {
            float v = (float)(((double)ld(x, off + j, xdt) - mean) * rstd) * ld(g, j, gdt);
            put(y, off + j, ydt, b ? v + ld(b, j, bdt) : v, acc);
        }
    }
}

extern "C" cudaError_t ck_norm(cudaStream_t st, int64_t rows, int64_t h, const void *x, int xdt, const void *g, int gdt,
                               const void *b, int bdt, void *y, int ydt, double eps, bool center, bool acc) {
    if (rows <= 0 || h <= 0) return cudaSuccess;
    k_norm<<<ck_row_grid(rows), CK_THREADS, 0, st>>>(rows, h, x, xdt, g, gdt, b, bdt, y, ydt, eps, center, acc);
    return cudaGetLastError();
}

__global__ void k_norm_grad_x(int64_t rows, int64_t h, const void *dy, int dydt, const void *x, int xdt, const void *g, int gdt,
                              void *dx, int dxdt, double eps, bool center, bool acc) {
    __shared__ double sh[CK_THREADS];
    CK_FOR_EACH_ROW(r, rows) {
        double mean, rstd, s1 = 0, s2 = 0;
        int64_t off = r * h;
        row_stats(x, xdt, off, h, eps, center, sh, &mean, &rstd);
        for (int64_t j = threadIdx.x; j < h; j += CK_THREADS) {
            double gd = (double)ld(g, j, gdt) * ld(dy, off + j, dydt);
            s1 += gd;
            s2 += gd * ((double)ld(x, off + j, xdt) - mean) * rstd;
        }
        s1 = block_sum(s1, sh);
        s2 = block_sum(s2, sh);
        s1 = center ? s1 / (double)h : 0;
        s2 /= (double)h;
        for (int64_t j = threadIdx.x; j < h; j += CK_THREADS) {
            double xh = ((double)ld(x, off + j, xdt) - mean) * rstd;
            put(dx, off + j, dxdt, (float)(rstd * ((double)ld(g, j, gdt) * ld(dy, off + j, dydt) - s1 - xh * s2)), acc);
        }
    }
}

extern "C" cudaError_t ck_norm_grad_x(cudaStream_t st, int64_t rows, int64_t h, const void *dy, int dydt, const void *x, int xdt,
                                      const void *g, int gdt, void *dx, int dxdt, double eps, bool center, bool acc) {
    if (rows <= 0 || h <= 0) return cudaSuccess;
    k_norm_grad_x<<<ck_row_grid(rows), CK_THREADS, 0, st>>>(rows, h, dy, dydt, x, xdt, g, gdt, dx, dxdt, eps, center, acc);
    return cudaGetLastError();
}

__global__ void k_row_stats(int64_t rows, int64_t h, const void *x, int xdt, double eps, bool center, double *mean, double *rstd) {
    __shared__ double sh[CK_THREADS];
    CK_FOR_EACH_ROW(r, rows) {
        double m, s;
        row_stats(x, xdt, r * h, h, eps, center, sh, &m, &s);
        if (threadIdx.x == 0) mean[r] = m, rstd[r] = s;
    }
}

extern "C" cudaError_t ck_row_stats(cudaStream_t st, int64_t rows, int64_t h, const void *x, int xdt, double eps, bool center,
                                    double *mean, double *rstd) {
    if (rows <= 0 || h <= 0) return cudaSuccess;
    k_row_stats<<<ck_row_grid(rows), CK_THREADS, 0, st>>>(rows, h, x, xdt, eps, center, mean, rstd);
    return cudaGetLastError();
}

/* ---- column sums: reduce_sum over leading dimensions, the norms' weight gradients ----
 *
 * Two passes, deterministic: pass one gives each block a tile of CR_COLS columns and one chunk
 * of rows (threads CR_COLS x CR_ROWS, the warp along the columns so that loads coalesce) and
 * writes the tile's sums in double to part[chunk][col]; pass two adds the chunks in order. The
 * chunk count depends on the shape alone (ck_col_chunks), never on the device. One thread per
 * column over all the rows, as the CPU sums, left a 768-wide gradient to 3 blocks: 6 ms for
 * layernorm_grad_w at [8192, 768] on an H100, against 50 MB to read. */

#define CR_COLS 32
#define CR_ROWS 8
#define CR_BLOCKS 1024 // pass one's target block count: enough to fill any GPU of this decade
#define CR_MIN_ROWS 64 // rows per chunk at least

extern "C" int64_t ck_col_chunks(int64_t rows, int64_t cols) {
    int64_t tiles = (cols + CR_COLS - 1) / CR_COLS, by_rows = (rows + CR_MIN_ROWS - 1) / CR_MIN_ROWS;
    int64_t n = CR_BLOCKS / (tiles < 1 ? 1 : tiles);
    n = n < by_rows ? n : by_rows;
    return n < 1 ? 1 : n > 65535 ? 65535 : n;
}

// norm: dy = x0, x = x1, the pair (sum dy xhat, sum dy) into part and part + chunks cols;
// otherwise the plain sum of x0 into part.
template <bool norm>
__global__ void k_col_part(int64_t rows, int64_t cols, int64_t chunk, const void *x0, int x0dt, const void *x1, int x1dt,
                           const double *mean, const double *rstd, double *part) {
    __shared__ double sh[2][CR_ROWS][CR_COLS + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t j = (int64_t)blockIdx.x * CR_COLS + tx, r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double a = 0, b = 0;
    if (j < cols) {
#pragma unroll 4
        for (int64_t r = r0 + ty; r < r1; r += CR_ROWS) {
            double d = ld(x0, r * cols + j, x0dt);
            if (norm) {
                a += d * ((double)ld(x1, r * cols + j, x1dt) - mean[r]) * rstd[r];
                b += d;
            } else {
                a += d;
            }
        }
    }
    sh[0][ty][tx] = a, sh[1][ty][tx] = b;
    __syncthreads();
    if (ty == 0 && j < cols) {
        for (int k = 1; k < CR_ROWS; k++) a += sh[0][k][tx], b += sh[1][k][tx];
        int64_t chunks = gridDim.y;
        part[blockIdx.y * cols + j] = a;
        if (norm) part[(chunks + blockIdx.y) * cols + j] = b;
    }
}

// y[j] (+)= sum over the chunks of part[c][j], in chunk order; y2 the same from the second half.
__global__ void k_col_final(int64_t chunks, int64_t cols, const double *part, void *y, int ydt, void *y2, int y2dt, bool acc) {
    CK_FOR_EACH(j, cols) {
        double a = 0, b = 0;
        for (int64_t c = 0; c < chunks; c++) {
            a += part[c * cols + j];
            if (y2) b += part[(chunks + c) * cols + j];
        }
        put(y, j, ydt, (float)a, acc);
        if (y2) put(y2, j, y2dt, (float)b, acc);
    }
}

static cudaError_t col_sums(cudaStream_t st, bool norm, int64_t rows, int64_t cols, const void *x0, int x0dt, const void *x1, int x1dt,
                            const double *mean, const double *rstd, double *part, void *y, int ydt, void *y2, int y2dt, bool acc) {
    if (cols <= 0) return cudaSuccess;
    int64_t chunks = ck_col_chunks(rows, cols), chunk = (rows + chunks - 1) / chunks;
    dim3 grid((unsigned)((cols + CR_COLS - 1) / CR_COLS), (unsigned)chunks), block(CR_COLS, CR_ROWS);
    if (norm)
        k_col_part<true><<<grid, block, 0, st>>>(rows, cols, chunk, x0, x0dt, x1, x1dt, mean, rstd, part);
    else
        k_col_part<false><<<grid, block, 0, st>>>(rows, cols, chunk, x0, x0dt, x1, x1dt, mean, rstd, part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    k_col_final<<<ck_grid(cols), CK_THREADS, 0, st>>>(chunks, cols, part, y, ydt, y2, y2dt, acc);
    return cudaGetLastError();
}

extern "C" cudaError_t ck_norm_grad_w(cudaStream_t st, int64_t rows, int64_t h, const void *dy, int dydt, const void *x, int xdt,
                                      const double *mean, const double *rstd, double *part, void *dg, int dgdt, void *db, int dbdt,
                                      bool acc) {
    return col_sums(st, true, rows, h, dy, dydt, x, xdt, mean, rstd, part, dg, dgdt, db, dbdt, acc);
}

extern "C" cudaError_t ck_sum_leading(cudaStream_t st, int64_t outer, int64_t inner, const void *x, int xdt, double *part, void *y,
                                      int ydt, bool acc) {
    return col_sums(st, false, outer, inner, x, xdt, NULL, 0, NULL, NULL, part, y, ydt, NULL, 0, acc);
}

/* ---- softmax ---- */

// The sum of exp(x - max) over a row (in double), its max into *max (in float), as the CPU's sum_exp.
static __device__ double row_sum_exp(const void *x, int xdt, int64_t off, int64_t v, double *sh, float *shf, float *max) {
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < v; j += CK_THREADS) m = fmaxf(m, ld(x, off + j, xdt));
    m = block_max(m, shf);
    double s = 0;
    for (int64_t j = threadIdx.x; j < v; j += CK_THREADS) s += expf(ld(x, off + j, xdt) - m);
    *max = m;
    return block_sum(s, sh);
}

__global__ void k_softmax(int64_t rows, int64_t n, const void *x, int xdt, void *y, int ydt, bool acc) {
    __shared__ double sh[CK_THREADS];
    __shared__ float shf[CK_THREADS];
    CK_FOR_EACH_ROW(r, rows) {
        int64_t off = r * n;
        float m;
        double s = row_sum_exp(x, xdt, off, n, sh, shf, &m);
        float inv = (float)(1 / s);
        for (int64_t j = threadIdx.x; j < n; j += CK_THREADS) put(y, off + j, ydt, expf(ld(x, off + j, xdt) - m) * inv, acc);
    }
}

extern "C" cudaError_t ck_softmax(cudaStream_t st, int64_t rows, int64_t n, const void *x, int xdt, void *y, int ydt, bool acc) {
    if (rows <= 0 || n <= 0) return cudaSuccess;
    k_softmax<<<ck_row_grid(rows), CK_THREADS, 0, st>>>(rows, n, x, xdt, y, ydt, acc);
    return cudaGetLastError();
}

__global__ void k_softmax_grad(int64_t rows, int64_t n, const void *dy, int dydt, const void *y, int ydt, void *dx, int dxdt,
                               bool acc) {
    __shared__ double sh[CK_THREADS];
    CK_FOR_EACH_ROW(r, rows) {
        int64_t off = r * n;
        double s = 0;
        for (int64_t j = threadIdx.x; j < n; j += CK_THREADS) s += (double)ld(dy, off + j, dydt) * ld(y, off + j, ydt);
        s = block_sum(s, sh);
        for (int64_t j = threadIdx.x; j < n; j += CK_THREADS)
            put(dx, off + j, dxdt, ld(y, off + j, ydt) * (ld(dy, off + j, dydt) - (float)s), acc);
    }
}

extern "C" cudaError_t ck_softmax_grad(cudaStream_t st, int64_t rows, int64_t n, const void *dy, int dydt, const void *y, int ydt,
                                       void *dx, int dxdt, bool acc) {
    if (rows <= 0 || n <= 0) return cudaSuccess;
    k_softmax_grad<<<ck_row_grid(rows), CK_THREADS, 0, st>>>(rows, n, dy, dydt, y, ydt, dx, dxdt, acc);
    return cudaGetLastError();
}

/* ---- losses ---- */

// log(sum(exp(x))) of a row, as the CPU's logsumexp.
static __device__ double row_lse(const void *x, int xdt, int64_t off, int64_t v, double *sh, float *shf) {
    float m;
    double s = row_sum_exp(x, xdt, off, v, sh, shf, &m);
    return (double)m + log(s);
}

__global__ void k_ce_rows(int64_t rows, int64_t v, const void *x, int xdt, const int32_t *labels, int64_t ignore, double *out,
                          int *flag) {
    __shared__ double sh[CK_THREADS];
    __shared__ float shf[CK_THREADS];
    CK_FOR_EACH_ROW(r, rows) {
        double lse = row_lse(x, xdt, r * v, v, sh, shf);
        if (threadIdx.x == 0) {
            int32_t y = labels[r];
            if (y == ignore) {
                out[r] = 0;
            } else if (y < 0 || y >= v) {
                raise_flag(flag, CK_FLAG_LABEL);
                out[r] = 0;
            } else {
                out[r] = lse - ld(x, r * v + y, xdt);
            }
        }
    }
}

extern "C" cudaError_t ck_ce_rows(cudaStream_t st, int64_t rows, int64_t v, const void *x, int xdt, const int32_t *labels,
                                  int64_t ignore, double *out, int *flag) {
    if (rows <= 0 || v <= 0) return cudaSuccess;
    k_ce_rows<<<ck_row_grid(rows), CK_THREADS, 0, st>>>(rows, v, x, xdt, labels, ignore, out, flag);
    return cudaGetLastError();
}

__global__ void k_ce_grad(int64_t rows, int64_t v, const void *dy, int dydt, double count, const void *x, int xdt,
                          const int32_t *labels, int64_t ignore, void *dx, int dxdt, bool acc, int *flag) {
    __shared__ double sh[CK_THREADS];
    __shared__ float shf[CK_THREADS];
    float kr = (float)((double)ld(dy, 0, dydt) / count);
    CK_FOR_EACH_ROW(r, rows) {
        float lse = (float)row_lse(x, xdt, r * v, v, sh, shf);
        int32_t y = labels[r];
        float k = y == ignore ? 0.0f : kr; // an ignored row gets no gradient
        if (y != ignore && (y < 0 || y >= v)) {
            if (threadIdx.x == 0) raise_flag(flag, CK_FLAG_LABEL);
            y = -1;
        }
        for (int64_t j = threadIdx.x; j < v; j += CK_THREADS)
            put(dx, r * v + j, dxdt, k == 0 ? 0.0f : k * (expf(ld(x, r * v + j, xdt) - lse) - (float)(j == y)), acc);
    }
}

extern "C" cudaError_t ck_ce_grad(cudaStream_t st, int64_t rows, int64_t v, const void *dy, int dydt, double count, const void *x,
                                  int xdt, const int32_t *labels, int64_t ignore, void *dx, int dxdt, bool acc, int *flag) {
    if (rows <= 0 || v <= 0) return cudaSuccess;
    k_ce_grad<<<ck_row_grid(rows), CK_THREADS, 0, st>>>(rows, v, dy, dydt, count, x, xdt, labels, ignore, dx, dxdt, acc, flag);
    return cudaGetLastError();
}

/* ---- vocabulary-parallel cross_entropy (runtime/cpu/loss.c says what each computes) ---- */

// Per row of the piece [rows, v] whose classes start at lo: its max, sum of exp(x - max) and the
// label's logit where the piece holds it (else 0) into st[3r..3r+2].
__global__ void k_vce_stats(int64_t rows, int64_t v, int64_t lo, int64_t vfull, const void *x, int xdt, const int32_t *labels,
                            int64_t ignore, void *st, int stdt, int *flag) {
    __shared__ double sh[CK_THREADS];
    __shared__ float shf[CK_THREADS];
    CK_FOR_EACH_ROW(r, rows) {
        int64_t off = r * v;
        float m;
        double s = row_sum_exp(x, xdt, off, v, sh, shf, &m);
        if (threadIdx.x == 0) {
            int32_t y = labels[r];
            if (y != ignore && (y < 0 || y >= vfull)) raise_flag(flag, CK_FLAG_LABEL);
            put(st, 3 * r, stdt, m, false);
            put(st, 3 * r + 1, stdt, (float)s, false);
            put(st, 3 * r + 2, stdt, y >= lo && y < lo + v ? ld(x, off + y - lo, xdt) : 0.0f, false);
        }
    }
}

extern "C" cudaError_t ck_vce_stats(cudaStream_t st, int64_t rows, int64_t v, int64_t lo, int64_t vfull, const void *x, int xdt,
                                    const int32_t *labels, int64_t ignore, void *stats, int stdt, int *flag) {
    if (rows <= 0 || v <= 0) return cudaSuccess;
    k_vce_stats<<<ck_row_grid(rows), CK_THREADS, 0, st>>>(rows, v, lo, vfull, x, xdt, labels, ignore, stats, stdt, flag);
    return cudaGetLastError();
}

// Row r's lse over the whole classes from the k pieces' stats (piece p's row r at 3 (p rows + r)),
// *t its label's logit.
static __device__ double vce_lse(const void *st, int stdt, int64_t rows, int64_t k, int64_t r, double *t) {
    double m = -INFINITY, s = 0;
    *t = 0;
    for (int64_t p = 0; p < k; p++) m = fmax(m, (double)ld(st, 3 * (p * rows + r), stdt));
    for (int64_t p = 0; p < k; p++) {
        int64_t q = 3 * (p * rows + r);
        s += (double)ld(st, q + 1, stdt) * exp((double)ld(st, q, stdt) - m), *t += ld(st, q + 2, stdt);
    }
    return m + log(s);
}

__global__ void k_vce_rows(int64_t rows, int64_t k, const void *st, int stdt, const int32_t *labels, int64_t ignore, double *out) {
    CK_FOR_EACH(r, rows) {
        double t, lse = vce_lse(st, stdt, rows, k, r, &t);
        out[r] = labels[r] == ignore ? 0 : lse - t;
    }
}

extern "C" cudaError_t ck_vce_rows(cudaStream_t st, int64_t rows, int64_t k, const void *stats, int stdt, const int32_t *labels,
                                   int64_t ignore, double *out) {
    if (rows <= 0 || k <= 0) return cudaSuccess;
    k_vce_rows<<<ck_grid(rows), CK_THREADS, 0, st>>>(rows, k, stats, stdt, labels, ignore, out);
    return cudaGetLastError();
}

__global__ void k_vce_grad(int64_t rows, int64_t v, int64_t lo, int64_t k, const void *dy, int dydt, double count, const void *x,
                           int xdt, const int32_t *labels, int64_t ignore, const void *st, int stdt, void *dx, int dxdt, bool acc) {
    __shared__ float lse_sh;
    float kr = (float)((double)ld(dy, 0, dydt) / count);
    CK_FOR_EACH_ROW(r, rows) {
        if (threadIdx.x == 0) {
            double t;
            lse_sh = (float)vce_lse(st, stdt, rows, k, r, &t);
        }
        __syncthreads();
        float lse = lse_sh;
        int32_t y = labels[r];
        float kk = y == ignore ? 0.0f : kr; // an ignored row gets no gradient
        for (int64_t j = threadIdx.x; j < v; j += CK_THREADS)
            put(dx, r * v + j, dxdt, kk == 0 ? 0.0f : kk * (expf(ld(x, r * v + j, xdt) - lse) - (float)(lo + j == y)), acc);
        __syncthreads();
    }
}

extern "C" cudaError_t ck_vce_grad(cudaStream_t st, int64_t rows, int64_t v, int64_t lo, int64_t k, const void *dy, int dydt,
                                   double count, const void *x, int xdt, const int32_t *labels, int64_t ignore, const void *stats,
                                   int stdt, void *dx, int dxdt, bool acc) {
    if (rows <= 0 || v <= 0) return cudaSuccess;
    k_vce_grad<<<ck_row_grid(rows), CK_THREADS, 0, st>>>(rows, v, lo, k, dy, dydt, count, x, xdt, labels, ignore, stats, stdt, dx,
                                                         dxdt, acc);
    return cudaGetLastError();
}

__global__ void k_loss_terms(bool bce, int64_t n, const void *a, int adt, const void *b, int bdt, double *partial) {
    __shared__ double sh[CK_THREADS];
    double s = 0;
    CK_FOR_EACH(i, n) {
        double x = ld(a, i, adt), y = ld(b, i, bdt);
        s += bce ? (x > 0 ? x : 0) - x * y + log1p(exp(-fabs(x))) : (x - y) * (x - y);
    }
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

extern "C" cudaError_t ck_loss_terms(cudaStream_t st, bool bce, int64_t n, const void *a, int adt, const void *b, int bdt,
                                     double *partial) {
    k_loss_terms<<<CK_LOSS_BLOCKS, CK_THREADS, 0, st>>>(bce, n < 0 ? 0 : n, a, adt, b, bdt, partial);
    return cudaGetLastError();
}

__global__ void k_sum_into(int64_t n, const double *v, double count, void *out, int odt, bool acc) {
    __shared__ double sh[CK_THREADS];
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += CK_THREADS) s += v[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) put(out, 0, odt, (float)(s / count), acc);
}

extern "C" cudaError_t ck_sum_into(cudaStream_t st, int64_t n, const double *v, double count, void *out, int odt, bool acc) {
    k_sum_into<<<1, CK_THREADS, 0, st>>>(n < 0 ? 0 : n, v, count, out, odt, acc);
    return cudaGetLastError();
}

/* ---- data movement ---- */

// Moves element si of src to di of dst (src NULL: zero): bits for a plain move, the dtype's
// addition when accumulating.
static __device__ __forceinline__ void move1(void *dst, int64_t di, const void *src, int64_t si, int dt, bool acc) {
    if (dt == CK_I32) {
        int32_t v = src ? ((const int32_t *)src)[si] : 0;
        ((int32_t *)dst)[di] = acc ? ((int32_t *)dst)[di] + v : v;
    } else if (acc) {
        put(dst, di, dt, src ? ld(src, si, dt) : 0, true);
    } else if (dt == CK_F16 || dt == CK_BF16) {
        ((uint16_t *)dst)[di] = src ? ((const uint16_t *)src)[si] : 0;
    } else {
        ((uint32_t *)dst)[di] = src ? ((const uint32_t *)src)[si] : 0;
    }
}

__global__ void k_copy2d(void *dst, int64_t ldd, const void *src, int64_t lds, int64_t rows, int64_t cols, int dt, bool acc) {
    CK_FOR_EACH(i, rows * cols) {
        int64_t r = i / cols, c = i % cols;
        move1(dst, r * ldd + c, src, r * lds + c, dt, acc);
    }
}

extern "C" cudaError_t ck_copy2d(cudaStream_t st, void *dst, int64_t ldd, const void *src, int64_t lds, int64_t rows, int64_t cols,
                                 int dt, bool acc) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    k_copy2d<<<ck_grid(rows * cols), CK_THREADS, 0, st>>>(dst, ldd, src, lds, rows, cols, dt, acc);
    return cudaGetLastError();
}

typedef struct perm_geom {
    int rank;
    int64_t yshape[CK_MAX_RANK], xstride[CK_MAX_RANK]; // xstride[i]: x's stride of y's dimension i
} perm_geom;

__global__ void k_permute(void *y, const void *x, perm_geom g, int64_t n, int dt, bool acc) {
    CK_FOR_EACH(i, n) {
        int64_t rest = i, off = 0;
        for (int d = g.rank - 1; d >= 0; d--) {
            off += (rest % g.yshape[d]) * g.xstride[d];
            rest /= g.yshape[d];
        }
        move1(y, i, x, off, dt, acc);
    }
}

extern "C" cudaError_t ck_permute(cudaStream_t st, void *y, const void *x, int rank, const int64_t *xshape, const int32_t *perm,
                                  int dt, bool acc) {
    perm_geom g;
    g.rank = rank;
    int64_t xs[CK_MAX_RANK], n = 1;
    for (int i = rank - 1; i >= 0; i--) xs[i] = i == rank - 1 ? 1 : xs[i + 1] * xshape[i + 1];
    for (int i = 0; i < rank; i++) {
        g.yshape[i] = xshape[perm[i]];
        g.xstride[i] = xs[perm[i]];
        n *= g.yshape[i];
    }
    if (n <= 0) return cudaSuccess;
    k_permute<<<ck_grid(n), CK_THREADS, 0, st>>>(y, x, g, n, dt, acc);
    return cudaGetLastError();
}

__global__ void k_box_move(void *dst, ck_box db, const void *src, ck_box sb, int64_t n, int dt, int mode) {
    CK_FOR_EACH(i, n) {
        int64_t rest = i, soff = 0, sstride = 1;
        bool inside = true;
        for (int d = db.rank - 1; d >= 0; d--) {
            int64_t g = db.start[d] + rest % db.shape[d];
            rest /= db.shape[d];
            int64_t k = g - sb.start[d];
            if (k < 0 || k >= sb.shape[d]) inside = false;
            soff += k * sstride;
            sstride *= sb.shape[d];
        }
        if (mode == CK_BOX_SET) move1(dst, i, inside ? src : NULL, soff, dt, false);
        else if (inside) move1(dst, i, src, soff, dt, mode == CK_BOX_ADD);
    }
}

extern "C" cudaError_t ck_box_move(cudaStream_t st, void *dst, const ck_box *db, const void *src, const ck_box *sb, int dt, int mode) {
    int64_t n = 1;
    for (int d = 0; d < db->rank; d++) n *= db->shape[d];
    if (n <= 0) return cudaSuccess;
    k_box_move<<<ck_grid(n), CK_THREADS, 0, st>>>(dst, *db, src, *sb, n, dt, mode);
    return cudaGetLastError();
}

typedef struct bytes_arg {
    unsigned char b[CK_PUT_MAX];
} bytes_arg;

__global__ void k_put_bytes(unsigned char *dst, bytes_arg a, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = a.b[i];
}

extern "C" cudaError_t ck_put_bytes(cudaStream_t st, void *dst, const void *src, int n) {
    if (n <= 0) return cudaSuccess;
    if (n > CK_PUT_MAX) return cudaErrorInvalidValue;
    bytes_arg a;
    memcpy(a.b, src, (size_t)n);
    k_put_bytes<<<1, CK_THREADS, 0, st>>>((unsigned char *)dst, a, n);
    return cudaGetLastError();
}

/* ---- embeddings ---- */

__global__ void k_embedding(int64_t n_ids, int64_t h, const int32_t *ids, const void *table, int tdt, int64_t lo, int64_t nrows,
                            int64_t vfull, void *y, int ydt, bool acc, int *flag) {
    CK_FOR_EACH(i, n_ids * h) {
        int64_t id = ids[i / h], j = i % h;
        if (id < 0 || id >= vfull) raise_flag(flag, CK_FLAG_EMBEDDING_ID);
        bool here = id >= lo && id < lo + nrows;
        put(y, i, ydt, here ? ld(table, (id - lo) * h + j, tdt) : 0, acc);
    }
}

extern "C" cudaError_t ck_embedding(cudaStream_t st, int64_t n_ids, int64_t h, const int32_t *ids, const void *table, int tdt,
                                    int64_t lo, int64_t nrows, int64_t vfull, void *y, int ydt, bool acc, int *flag) {
    if (n_ids <= 0 || h <= 0) return cudaSuccess;
    k_embedding<<<ck_grid(n_ids * h), CK_THREADS, 0, st>>>(n_ids, h, ids, table, tdt, lo, nrows, vfull, y, ydt, acc, flag);
    return cudaGetLastError();
}

__global__ void k_embedding_grad(int64_t n_ids, int64_t h, const void *dy, int dydt, const int32_t *ids, int64_t lo, int64_t nrows,
                                 float *dt) {
    CK_FOR_EACH(i, n_ids * h) {
        int64_t id = ids[i / h], j = i % h;
        if (id >= lo && id < lo + nrows) atomicAdd(&dt[(id - lo) * h + j], ld(dy, i, dydt));
    }
}

extern "C" cudaError_t ck_embedding_grad(cudaStream_t st, int64_t n_ids, int64_t h, const void *dy, int dydt, const int32_t *ids,
                                         int64_t lo, int64_t nrows, float *dt) {
    if (n_ids <= 0 || h <= 0) return cudaSuccess;
    k_embedding_grad<<<ck_grid(n_ids * h), CK_THREADS, 0, st>>>(n_ids, h, dy, dydt, ids, lo, nrows, dt);
    return cudaGetLastError();
}

__global__ void k_bag(int64_t bags, int64_t l, int64_t e, const int32_t *ids, const void *table, int tdt, int64_t lo, int64_t nrows,
                      int64_t vfull, void *y, int ydt, bool acc, int *flag) {
    CK_FOR_EACH(i, bags * e) {
        int64_t b = i / e, k = i % e;
        float s = acc ? ld(y, i, ydt) : 0;
        for (int64_t t = 0; t < l; t++) {
            int64_t id = ids[b * l + t];
            if (id < 0 || id >= vfull) raise_flag(flag, CK_FLAG_BAG_ID);
            s += id >= lo && id < lo + nrows ? ld(table, (id - lo) * e + k, tdt) : 0;
        }
        st(y, i, ydt, s);
    }
}

extern "C" cudaError_t ck_bag(cudaStream_t st, int64_t bags, int64_t l, int64_t e, const int32_t *ids, const void *table, int tdt,
                              int64_t lo, int64_t nrows, int64_t vfull, void *y, int ydt, bool acc, int *flag) {
    if (bags <= 0 || e <= 0) return cudaSuccess;
    k_bag<<<ck_grid(bags * e), CK_THREADS, 0, st>>>(bags, l, e, ids, table, tdt, lo, nrows, vfull, y, ydt, acc, flag);
    return cudaGetLastError();
}

__global__ void k_bag_grad(int64_t bags, int64_t l, int64_t e, const void *dy, int dydt, const int32_t *ids, int64_t lo,
                           int64_t nrows, float *dt) {
    CK_FOR_EACH(i, bags * l * e) {
        int64_t k = i % e, bt = i / e; // bt = b l + t
        int64_t id = ids[bt];
        if (id >= lo && id < lo + nrows) atomicAdd(&dt[(id - lo) * e + k], ld(dy, (bt / l) * e + k, dydt));
    }
}

extern "C" cudaError_t ck_bag_grad(cudaStream_t st, int64_t bags, int64_t l, int64_t e, const void *dy, int dydt, const int32_t *ids,
                                   int64_t lo, int64_t nrows, float *dt) {
    if (bags <= 0 || l <= 0 || e <= 0) return cudaSuccess;
    k_bag_grad<<<ck_grid(bags * l * e), CK_THREADS, 0, st>>>(bags, l, e, dy, dydt, ids, lo, nrows, dt);
    return cudaGetLastError();
}

/* ---- optimizers ---- */

__global__ void k_sgd(int64_t n, void *p, int pdt, const void *g, int gdt, float *buf, float *w, float lr, float wd, float mom) {
    CK_FOR_EACH(i, n) {
        float wi = w ? w[i] : ld(p, i, pdt);
        float d = ld(g, i, gdt) + wd * wi;
        if (buf) d = buf[i] = mom * buf[i] + d;
        wi -= lr * d;
        if (w) w[i] = wi;
        st(p, i, pdt, wi);
    }
}

extern "C" cudaError_t ck_sgd(cudaStream_t st, int64_t n, void *p, int pdt, const void *g, int gdt, float *buf, float *w, float lr,
                              float wd, float momentum) {
    if (n <= 0) return cudaSuccess;
    k_sgd<<<ck_grid(n), CK_THREADS, 0, st>>>(n, p, pdt, g, gdt, buf, w, lr, wd, momentum);
    return cudaGetLastError();
}

__global__ void k_adamw(int64_t n, void *p, int pdt, const void *g, int gdt, float *m, float *v, float *w, ck_adamw_args a) {
    CK_FOR_EACH(i, n) {
        float gi = ld(g, i, gdt), wi = w ? w[i] : ld(p, i, pdt);
        m[i] = a.b1 * m[i] + a.cb1 * gi;
        v[i] = a.b2 * v[i] + a.cb2 * gi * gi;
        wi = wi * a.decay - a.step * m[i] / (sqrtf(v[i]) * a.rc2 + a.eps);
        if (w) w[i] = wi;
        st(p, i, pdt, wi);
    }
}

extern "C" cudaError_t ck_adamw(cudaStream_t st, int64_t n, void *p, int pdt, const void *g, int gdt, float *m, float *v, float *w,
                                const ck_adamw_args *a) {
    if (n <= 0) return cudaSuccess;
    k_adamw<<<ck_grid(n), CK_THREADS, 0, st>>>(n, p, pdt, g, gdt, m, v, w, *a);
    return cudaGetLastError();
}
