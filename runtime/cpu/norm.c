/*
 * cpu/norm.c: the CPU backend's normalizations, forward and backward.
 *   - layernorm and rmsnorm normalize each row of the last dimension h of x [*b,h] (layernorm
 *     centers it, rmsnorm does not) and scale by a per-h weight (layernorm adds a per-h bias);
 *     the statistics accumulate in double in both precisions.
 *   - batchnorm uses the batch statistics of each channel over n, h, w (biased variance), as
 *     in training; it keeps no running statistics. With attrs ghost G > 0 (ghost batch norm)
 *     the statistics are per channel over each run of G consecutive samples (n a multiple of
 *     G), so a batch split in whole groups gives the same result on any number of devices.
 */
#include "cpu.h"

/* ---- rows of the last dimension: layernorm, rmsnorm ---- */

// x [*b,h] and the per-h parameters in[first..nin).
static int row_params(kctx *c, uint32_t xin, uint32_t first) {
    const rt_view *x = &c->in[xin];
    if (x->rank < 1) return cpu_fail(c, "input %u is a scalar; it needs [*b,h]", xin);
    for (uint32_t i = first; i < c->nin; i++) {
        char what[32];
        snprintf(what, sizeof what, "input %u", i);
        if (cpu_expect(c, what, &c->in[i], cpu_shape1(cpu_dim(x, -1)))) return -1;
    }
    return 0;
}

// The mean (0 unless centered) and 1/sqrt(var + eps) of one row of h.
static void row_stats(const real *x, int64_t h, double eps, bool center, double *mean, double *rstd) {
    double m = 0, v = 0;
    if (center) {
        for (int64_t j = 0; j < h; j++) m += x[j];
        m /= (double)h;
    }
    for (int64_t j = 0; j < h; j++) v += ((double)x[j] - m) * ((double)x[j] - m);
    *mean = m;
    *rstd = 1 / sqrt(v / (double)h + eps);
}

// layernorm (x, gamma, beta) and rmsnorm (x, gamma) -> [*b,h].
int CPU_KERNEL(norm)(kctx *c) {
    bool ln = c->k->op == CPU_OP_LAYERNORM;
    if (row_params(c, 0, 1) || cpu_expect(c, "output 0", &c->out[0], cpu_shape_of(&c->in[0]))) return -1;
    int64_t h = cpu_dim(&c->in[0], -1), rows = h ? cpu_lead(&c->in[0], 1) : 0;
    const real *X = cpu_r(&c->in[0]), *g = cpu_r(&c->in[1]), *b = ln ? cpu_r(&c->in[2]) : NULL;
    real *Y = cpu_r(&c->out[0]);
    for (int64_t r = 0; r < rows; r++) {
        const real *x = X + r * h;
        double mean, rstd;
        row_stats(x, h, c->a->f[PLAN_AF_EPS], ln, &mean, &rstd);
        for (int64_t j = 0; j < h; j++) {
            real v = (real)(((double)x[j] - mean) * rstd) * g[j];
            cpu_put(&Y[r * h + j], ln ? v + b[j] : v, c->acc);
        }
    }
    return 0;
}

// (dy, x, gamma) -> dx of layernorm or rmsnorm:
//   dx = rstd (g dy - mean(g dy) - xhat mean(g dy xhat)), without the middle term for rmsnorm.
int CPU_KERNEL(norm_grad_x)(kctx *c) {
    bool ln = c->k->op == CPU_OP_LAYERNORM_GRAD_X;
    if (row_params(c, 1, 2) || cpu_like(c, "input 0", &c->in[0], &c->in[1]) || cpu_like(c, "output 0", &c->out[0], &c->in[1])) return -1;
    int64_t h = cpu_dim(&c->in[1], -1), rows = h ? cpu_lead(&c->in[1], 1) : 0;
    const real *DY = cpu_r(&c->in[0]), *X = cpu_r(&c->in[1]), *g = cpu_r(&c->in[2]);
    real *DX = cpu_r(&c->out[0]);
    for (int64_t r = 0; r < rows; r++) {
        const real *x = X + r * h, *dy = DY + r * h;
        double mean, rstd, s1 = 0, s2 = 0;
        row_stats(x, h, c->a->f[PLAN_AF_EPS], ln, &mean, &rstd);
        for (int64_t j = 0; j < h; j++) {
            double gd = (double)g[j] * dy[j];
            s1 += gd;
            s2 += gd * ((double)x[j] - mean) * rstd;
        }
        s1 = ln ? s1 / (double)h : 0; // rmsnorm does not center
        s2 /= (double)h;
        for (int64_t j = 0; j < h; j++) {
            double xh = ((double)x[j] - mean) * rstd;
            cpu_put(&DX[r * h + j], (real)(rstd * ((double)g[j] * dy[j] - s1 - xh * s2)), c->acc);
        }
    }
    return 0;
}

// (dy, x) -> dgamma (and dbeta for layernorm) [h], summed over the rows.
int CPU_KERNEL(norm_grad_w)(kctx *c) {
    bool ln = c->k->op == CPU_OP_LAYERNORM_GRAD_W;
    const rt_view *dy = &c->in[0], *x = &c->in[1];
    if (x->rank < 1) return cpu_fail(c, "input 1 is a scalar; it needs [*b,h]");
    if (cpu_like(c, "input 0", dy, x)) return -1;
    int64_t h = cpu_dim(x, -1), rows = h ? cpu_lead(x, 1) : 0;
    for (uint32_t o = 0; o < c->nout; o++) {
        char what[32];
        snprintf(what, sizeof what, "output %u", o);
        if (cpu_expect(c, what, &c->out[o], cpu_shape1(h))) return -1;
    }
    for (uint32_t o = 0; o < c->nout; o++) cpu_clear(c, o);
    const real *DY = cpu_r(dy), *X = cpu_r(x);
    real *dg = cpu_r(&c->out[0]), *db = ln ? cpu_r(&c->out[1]) : NULL;
    for (int64_t r = 0; r < rows; r++) {
        double mean, rstd;
        row_stats(X + r * h, h, c->a->f[PLAN_AF_EPS], ln, &mean, &rstd);
        for (int64_t j = 0; j < h; j++) {
            dg[j] += (real)((double)DY[r * h + j] * ((double)X[r * h + j] - mean) * rstd);
            if (db) db[j] += DY[r * h + j];
        }
    }
    return 0;
}

/* ---- batch norm: per channel over n, h, w (per group of samples with ghost) ---- */

// x [n,c,h,w] (input xin) and the per-channel inputs from `first` on; *group is the samples per
// statistics group: attrs ghost, which must divide n, or all n.
static int bn_check(kctx *c, uint32_t xin, uint32_t first, int64_t *group) {
    char what[32];
    snprintf(what, sizeof what, "input %u", xin);
    if (cpu_rank_is(c, what, &c->in[xin], 4, "[n,c,h,w]")) return -1;
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
