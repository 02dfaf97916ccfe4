/*
 * kernels.c: the CPU backend's operators (rt.h, "cpu/kernels.c"), part one: dispatch, the dense
 * products, element-wise operators, norms and softmax, data movement, losses and the optimizer
 * steps. Convolution, pooling, batch norm, attention, embeddings and dropout are in
 * kernels_nn.c.
 *
 * What a kernel computes. Every operator of runtime/ops.def runs on the local pieces of its
 * operands as if they were whole tensors; the compiler guarantees that the pieces come from one
 * split of the operator's annotation letters, so a split letter shows only in the local sizes.
 * Where the split shows otherwise (rt.h lists the cases) the kernel reads the views' start and
 * full: losses divide by the global count, embeddings look up only the rows they hold, dropout
 * draws per global element. An input whose `once` is false is left out of an additive
 * contribution (add's addends, linear's and conv2d's bias). The backward operators take their
 * inputs in the order compiler/autodiff.c wires them (e.g. linear_grad_w is (dy, x), mse_loss_grad
 * (dy, a, b)) and their attributes are the forward operator's.
 *
 * Precision. The file is written over `real` (cpu.h) and compiled twice: as float for
 * rt_cpu_kernel and, through kernels_f64.c, as double for rt_cpu_kernel_f64 (the unit tests'
 * finite differences). Row reductions (norm statistics, softmax sums, loss sums) accumulate in
 * double in both. GEMMs go through CBLAS (sgemm or dgemm), everything else is plain loops.
 *
 * Dispatch checks before any kernel runs: the operator is known, the arity is ops.def's, every
 * view has a rank up to 8, sizes >= 0, a piece inside its logical tensor (start + shape <= full),
 * data when it is not empty and at most INT_MAX elements (CBLAS takes int sizes), and the dtypes
 * are the ones the CPU backend runs (0: real, 3: int32 ids and labels; data movement keeps its
 * input's dtype). Each kernel then checks how its views relate and returns -1 with a message
 * naming the operands ("linear: input 1 is [64,32] but input 0's last dimension is 48") rather
 * than computing on shapes that do not fit. Kernels keep no state: ranks call them from several
 * threads at once. Scratch (attention's scores, im2col's columns) is malloc'd per call.
 *
 * Known limits: f16 and bf16 operands are refused (the CPU backend runs f32 only); a kernel
 * whose output overlaps an input works only where it reads each element before writing it
 * (the element-wise operators).
 */
#include "cpu.h"

#include <limits.h>
#include <stdlib.h>

#ifdef RT_REAL_DOUBLE
#define CPU_ENTRY rt_cpu_kernel_f64
#else
#define CPU_ENTRY rt_cpu_kernel
#endif

typedef int kernel_fn(kctx *c);

static bool lead_same(const rt_view *a, const rt_view *b, int trail) {
    if (a->rank != b->rank || a->rank < trail) return false;
    for (int i = 0; i < a->rank - trail; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

static kshape with_last(const rt_view *v, int64_t last) {
    kshape s = cpu_shape_of(v);
    s.d[s.rank - 1] = last;
    return s;
}

// 0 if v has ref's shape; else fails naming `what` (and the shape it should have).
static int like(kctx *c, const char *what, const rt_view *v, const rt_view *ref) {
    return cpu_expect(c, what, v, cpu_shape_of(ref));
}

static kshape shape1(int64_t n) { return (kshape){.rank = 1, .d = {n}}; }
static kshape shape2(int64_t m, int64_t n) { return (kshape){.rank = 2, .d = {m, n}}; }

/* ---- dense products: matmul, bmm, linear and their gradients ---- */

// a [*b,m,k] @ b [k,n] -> [*b,m,n]: one GEMM over a's rows.
static int k_matmul(kctx *c) {
    const rt_view *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
    if (a->rank < 2) return cpu_fail(c, "input 0 is %s; it needs [*b,m,k]", CPU_SHAPE(a));
    if (b->rank != 2 || b->shape[0] != cpu_dim(a, -1))
        return cpu_fail(c, "input 1 is %s but input 0's last dimension is %lld; it must be [%lld,n]", CPU_SHAPE(b),
                        (long long)cpu_dim(a, -1), (long long)cpu_dim(a, -1));
    if (cpu_expect(c, "output 0", y, with_last(a, b->shape[1]))) return -1;
    int64_t k = b->shape[0], n = b->shape[1];
    cpu_gemm(false, false, cpu_lead(a, 1), n, k, 1, cpu_r(a), k, cpu_r(b), n, cpu_beta(c), cpu_r(y), n);
    return 0;
}

// (dy [*b,m,n], b [k,n]) -> da = dy b^T [*b,m,k].
static int k_matmul_grad_a(kctx *c) {
    const rt_view *dy = &c->in[0], *b = &c->in[1], *da = &c->out[0];
    if (dy->rank < 2) return cpu_fail(c, "input 0 is %s; it needs [*b,m,n]", CPU_SHAPE(dy));
    if (b->rank != 2 || b->shape[1] != cpu_dim(dy, -1))
        return cpu_fail(c, "input 1 is %s but input 0's last dimension is %lld; it must be [k,%lld]", CPU_SHAPE(b),
                        (long long)cpu_dim(dy, -1), (long long)cpu_dim(dy, -1));
    if (cpu_expect(c, "output 0", da, with_last(dy, b->shape[0]))) return -1;
    int64_t k = b->shape[0], n = b->shape[1];
    cpu_gemm(false, true, cpu_lead(dy, 1), k, n, 1, cpu_r(dy), n, cpu_r(b), n, cpu_beta(c), cpu_r(da), k);
    return 0;
}

// (a [*b,m,k], dy [*b,m,n]) -> db = a^T dy [k,n], summed over all of a's rows.
static int k_matmul_grad_b(kctx *c) {
    const rt_view *a = &c->in[0], *dy = &c->in[1], *db = &c->out[0];
    if (a->rank < 2) return cpu_fail(c, "input 0 is %s; it needs [*b,m,k]", CPU_SHAPE(a));
    if (!lead_same(a, dy, 1))
        return cpu_fail(c, "input 1 is %s but input 0 is %s; they must agree in all but the last dimension", CPU_SHAPE(dy),
                        CPU_SHAPE(a));
    int64_t k = cpu_dim(a, -1), n = cpu_dim(dy, -1);
    if (cpu_expect(c, "output 0", db, shape2(k, n))) return -1;
    cpu_gemm(true, false, k, n, cpu_lead(a, 1), 1, cpu_r(a), k, cpu_r(dy), n, cpu_beta(c), cpu_r(db), n);
    return 0;
}

// A batch of products over the leading dimensions: y_i = op(a_i) op(b_i), [m,k] x [k,n].
static void batched_gemm(kctx *c, int64_t batch, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const rt_view *a,
                         const rt_view *b, const rt_view *y) {
    const real *A = cpu_r(a), *B = cpu_r(b);
    real *Y = cpu_r(y);
    for (int64_t i = 0; i < batch; i++)
        cpu_gemm(ta, tb, m, n, k, 1, A + i * m * k, ta ? m : k, B + i * k * n, tb ? k : n, cpu_beta(c), Y + i * m * n, n);
}

static int bmm_pair(kctx *c, const rt_view *a, const rt_view *b) {
    if (a->rank < 2) return cpu_fail(c, "input 0 is %s; it needs [*b,m,k]", CPU_SHAPE(a));
    if (!lead_same(a, b, 2))
        return cpu_fail(c, "input 1 is %s but input 0 is %s; their leading dimensions *b must agree", CPU_SHAPE(b), CPU_SHAPE(a));
    return 0;
}

// a [*b,m,k] @ b [*b,k,n] -> [*b,m,n].
static int k_bmm(kctx *c) {
    const rt_view *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
    if (bmm_pair(c, a, b)) return -1;
    int64_t m = cpu_dim(a, -2), k = cpu_dim(a, -1), n = cpu_dim(b, -1);
    if (cpu_dim(b, -2) != k)
        return cpu_fail(c, "input 1 is %s but input 0's last dimension is %lld; it must be [*b,%lld,n]", CPU_SHAPE(b),
                        (long long)k, (long long)k);
    if (cpu_expect(c, "output 0", y, with_last(a, n))) return -1;
    batched_gemm(c, cpu_lead(a, 2), false, false, m, n, k, a, b, y);
    return 0;
}

// (dy [*b,m,n], b [*b,k,n]) -> da = dy b^T [*b,m,k].
static int k_bmm_grad_a(kctx *c) {
    const rt_view *dy = &c->in[0], *b = &c->in[1], *da = &c->out[0];
    if (bmm_pair(c, dy, b)) return -1;
    int64_t m = cpu_dim(dy, -2), n = cpu_dim(dy, -1), k = cpu_dim(b, -2);
    if (cpu_dim(b, -1) != n)
        return cpu_fail(c, "input 1 is %s but input 0's last dimension is %lld; it must be [*b,k,%lld]", CPU_SHAPE(b),
                        (long long)n, (long long)n);
    if (cpu_expect(c, "output 0", da, with_last(dy, k))) return -1;
    batched_gemm(c, cpu_lead(dy, 2), false, true, m, k, n, dy, b, da);
    return 0;
}

// (a [*b,m,k], dy [*b,m,n]) -> db = a^T dy [*b,k,n].
static int k_bmm_grad_b(kctx *c) {
    const rt_view *a = &c->in[0], *dy = &c->in[1], *db = &c->out[0];
    if (bmm_pair(c, a, dy)) return -1;
    int64_t m = cpu_dim(a, -2), k = cpu_dim(a, -1), n = cpu_dim(dy, -1);
    if (cpu_dim(dy, -2) != m)
        return cpu_fail(c, "input 1 is %s but input 0 is %s; both need the same m", CPU_SHAPE(dy), CPU_SHAPE(a));
    kshape want = cpu_shape_of(a);
    want.d[a->rank - 2] = k;
    want.d[a->rank - 1] = n;
    if (cpu_expect(c, "output 0", db, want)) return -1;
    batched_gemm(c, cpu_lead(a, 2), true, false, k, n, m, a, dy, db);
    return 0;
}

// y [rows,n]: its rows set to (or, accumulating, increased by) bias (NULL: zero).
static void rows_bias(real *y, int64_t rows, int64_t n, const real *bias, bool acc) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) cpu_put(&y[r * n + j], bias ? bias[j] : 0, acc);
}

// x [*b,k], w [n,k], bias [n] -> x w^T + bias [*b,n]. The bias counts only where `once`.
static int k_linear(kctx *c) {
    const rt_view *x = &c->in[0], *w = &c->in[1], *y = &c->out[0];
    const rt_view *b = c->nin > 2 ? &c->in[2] : NULL;
    if (x->rank < 1) return cpu_fail(c, "input 0 is a scalar; it needs [*b,k]");
    int64_t k = cpu_dim(x, -1);
    if (w->rank != 2 || w->shape[1] != k)
        return cpu_fail(c, "input 1 is %s but input 0's last dimension is %lld", CPU_SHAPE(w), (long long)k);
    int64_t n = w->shape[0];
    if (b && cpu_expect(c, "input 2 (the bias)", b, shape1(n))) return -1;
    if (cpu_expect(c, "output 0", y, with_last(x, n))) return -1;
    int64_t rows = cpu_lead(x, 1);
    rows_bias(cpu_r(y), rows, n, b && b->once ? cpu_r(b) : NULL, c->acc);
    cpu_gemm(false, true, rows, n, k, 1, cpu_r(x), k, cpu_r(w), k, 1, cpu_r(y), n);
    return 0;
}

// (dy [*b,n], w [n,k]) -> dx = dy w [*b,k].
static int k_linear_grad_x(kctx *c) {
    const rt_view *dy = &c->in[0], *w = &c->in[1], *dx = &c->out[0];
    if (dy->rank < 1) return cpu_fail(c, "input 0 is a scalar; it needs [*b,n]");
    int64_t n = cpu_dim(dy, -1);
    if (w->rank != 2 || w->shape[0] != n)
        return cpu_fail(c, "input 1 is %s but input 0's last dimension is %lld", CPU_SHAPE(w), (long long)n);
    int64_t k = w->shape[1];
    if (cpu_expect(c, "output 0", dx, with_last(dy, k))) return -1;
    cpu_gemm(false, false, cpu_lead(dy, 1), k, n, 1, cpu_r(dy), n, cpu_r(w), k, cpu_beta(c), cpu_r(dx), k);
    return 0;
}

// (dy [*b,n], x [*b,k]) -> dw = dy^T x [n,k].
static int k_linear_grad_w(kctx *c) {
    const rt_view *dy = &c->in[0], *x = &c->in[1], *dw = &c->out[0];
    if (dy->rank < 1 || !lead_same(dy, x, 1))
        return cpu_fail(c, "input 1 is %s but input 0 is %s; they must agree in all but the last dimension", CPU_SHAPE(x),
                        CPU_SHAPE(dy));
    int64_t n = cpu_dim(dy, -1), k = cpu_dim(x, -1);
    if (cpu_expect(c, "output 0", dw, shape2(n, k))) return -1;
    cpu_gemm(true, false, n, k, cpu_lead(dy, 1), 1, cpu_r(dy), n, cpu_r(x), k, cpu_beta(c), cpu_r(dw), k);
    return 0;
}

/* ---- element-wise operators ---- */

// add and mul: b equals a's shape or a suffix of it (it repeats over a's leading dimensions).
static int binary_shapes(kctx *c) {
    const rt_view *a = &c->in[0], *b = &c->in[1];
    bool ok = b->rank <= a->rank;
    for (int i = 0; ok && i < b->rank; i++) ok = b->shape[i] == a->shape[a->rank - b->rank + i];
    if (!ok) return cpu_fail(c, "input 1 is %s; it must equal input 0's shape %s or a suffix of it", CPU_SHAPE(b), CPU_SHAPE(a));
    return cpu_expect(c, "output 0", &c->out[0], cpu_shape_of(a));
}

// a + b, each addend counted only where its `once` is set.
static int k_add(kctx *c) {
    if (binary_shapes(c)) return -1;
    const rt_view *a = &c->in[0], *b = &c->in[1];
    const real *A = cpu_r(a), *B = cpu_r(b);
    real *Y = cpu_r(&c->out[0]);
    int64_t nb = cpu_numel(b), outer = nb ? cpu_numel(a) / nb : 0;
    bool ua = a->once, ub = b->once;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < nb; j++) {
            real v = 0;
            if (ua) v += A[o * nb + j];
            if (ub) v += B[j];
            cpu_put(&Y[o * nb + j], v, c->acc);
        }
    return 0;
}

static int k_mul(kctx *c) {
    if (binary_shapes(c)) return -1;
    const real *A = cpu_r(&c->in[0]), *B = cpu_r(&c->in[1]);
    real *Y = cpu_r(&c->out[0]);
    int64_t nb = cpu_numel(&c->in[1]), outer = nb ? cpu_numel(&c->in[0]) / nb : 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < nb; j++) cpu_put(&Y[o * nb + j], A[o * nb + j] * B[j], c->acc);
    return 0;
}

// Operators whose outputs and inputs all have input 0's shape.
static int same_shapes(kctx *c) {
    for (uint32_t i = 1; i < c->nin; i++)
        if (!cpu_same_shape(&c->in[i], &c->in[0]))
            return cpu_fail(c, "input %u is %s but input 0 is %s; they must be the same shape", i, CPU_SHAPE(&c->in[i]),
                            CPU_SHAPE(&c->in[0]));
    for (uint32_t i = 0; i < c->nout; i++)
        if (!cpu_same_shape(&c->out[i], &c->in[0]))
            return cpu_fail(c, "output %u is %s but input 0 is %s; they must be the same shape", i, CPU_SHAPE(&c->out[i]),
                            CPU_SHAPE(&c->in[0]));
    return 0;
}

static int k_scale(kctx *c) {
    if (same_shapes(c)) return -1;
    const real *x = cpu_r(&c->in[0]);
    real *y = cpu_r(&c->out[0]), s = (real)c->a->f[PLAN_AF_SCALE];
    int64_t n = cpu_numel(&c->in[0]);
    for (int64_t i = 0; i < n; i++) cpu_put(&y[i], x[i] * s, c->acc);
    return 0;
}

#define GELU_C 0.7978845608028654 // sqrt(2 / pi)
#define GELU_A 0.044715

static inline real sigmoid(real x) { return 1 / (1 + R_EXP(-x)); }

// relu, gelu (tanh approximation), silu.
static int k_activation(kctx *c) {
    if (same_shapes(c)) return -1;
    const real *x = cpu_r(&c->in[0]);
    real *y = cpu_r(&c->out[0]);
    int64_t n = cpu_numel(&c->in[0]);
    switch (c->k->op) {
    case CPU_OP_RELU:
        for (int64_t i = 0; i < n; i++) cpu_put(&y[i], x[i] > 0 ? x[i] : 0, c->acc);
        break;
    case CPU_OP_GELU: // 0.5 (1 + tanh(u)) is sigmoid(2 u), and expf is much faster than tanhf
        for (int64_t i = 0; i < n; i++) {
            real s = sigmoid(2 * (real)GELU_C * (x[i] + (real)GELU_A * x[i] * x[i] * x[i]));
            cpu_put(&y[i], x[i] * s, c->acc);
        }
        break;
    default: // silu
        for (int64_t i = 0; i < n; i++) cpu_put(&y[i], x[i] * sigmoid(x[i]), c->acc);
        break;
    }
    return 0;
}

// (dy, x) -> dy * f'(x) for relu, gelu, silu.
static int k_activation_grad(kctx *c) {
    if (same_shapes(c)) return -1;
    const real *dy = cpu_r(&c->in[0]), *x = cpu_r(&c->in[1]);
    real *dx = cpu_r(&c->out[0]);
    int64_t n = cpu_numel(&c->in[0]);
    switch (c->k->op) {
    case CPU_OP_RELU_GRAD:
        for (int64_t i = 0; i < n; i++) cpu_put(&dx[i], x[i] > 0 ? dy[i] : 0, c->acc);
        break;
    case CPU_OP_GELU_GRAD: // with s = sigmoid(2 u): d/dx x s = s + 2 x s (1 - s) du/dx
        for (int64_t i = 0; i < n; i++) {
            real x2 = x[i] * x[i], s = sigmoid(2 * (real)GELU_C * (x[i] + (real)GELU_A * x2 * x[i]));
            real d = s + 2 * x[i] * s * (1 - s) * (real)GELU_C * (1 + 3 * (real)GELU_A * x2);
            cpu_put(&dx[i], dy[i] * d, c->acc);
        }
        break;
    default: // silu
        for (int64_t i = 0; i < n; i++) {
            real s = sigmoid(x[i]);
            cpu_put(&dx[i], dy[i] * s * (1 + x[i] * (1 - s)), c->acc);
        }
        break;
    }
    return 0;
}

// () -> every element attrs scale (a gradient seed, or zeros where no gradient flows).
static int k_fill(kctx *c) {
    real *y = cpu_r(&c->out[0]), v = (real)c->a->f[PLAN_AF_SCALE];
    int64_t n = cpu_numel(&c->out[0]);
    for (int64_t i = 0; i < n; i++) cpu_put(&y[i], v, c->acc);
    return 0;
}

// x -> y, y's shape a suffix of x's: the sum over x's leading dimensions.
static int k_reduce_sum(kctx *c) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    bool ok = y->rank <= x->rank;
    for (int i = 0; ok && i < y->rank; i++) ok = y->shape[i] == x->shape[x->rank - y->rank + i];
    if (!ok) return cpu_fail(c, "output 0 is %s; it must be a suffix of input 0's shape %s", CPU_SHAPE(y), CPU_SHAPE(x));
    int64_t inner = cpu_numel(y), outer = inner ? cpu_numel(x) / inner : 0;
    const real *X = cpu_r(x);
    real *Y = cpu_r(y);
    cpu_clear(c, 0);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) Y[j] += X[o * inner + j];
    return 0;
}

/* ---- norms and softmax: rows of the last dimension ---- */

// x [*b,h] and the per-h parameters in[first..nin).
static int row_params(kctx *c, uint32_t xin, uint32_t first) {
    const rt_view *x = &c->in[xin];
    if (x->rank < 1) return cpu_fail(c, "input %u is a scalar; it needs [*b,h]", xin);
    for (uint32_t i = first; i < c->nin; i++) {
        char what[32];
        snprintf(what, sizeof what, "input %u", i);
        if (cpu_expect(c, what, &c->in[i], shape1(cpu_dim(x, -1)))) return -1;
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
static int k_norm(kctx *c) {
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
static int k_norm_grad_x(kctx *c) {
    bool ln = c->k->op == CPU_OP_LAYERNORM_GRAD_X;
    if (row_params(c, 1, 2) || like(c, "input 0", &c->in[0], &c->in[1]) || like(c, "output 0", &c->out[0], &c->in[1])) return -1;
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
static int k_norm_grad_w(kctx *c) {
    bool ln = c->k->op == CPU_OP_LAYERNORM_GRAD_W;
    const rt_view *dy = &c->in[0], *x = &c->in[1];
    if (x->rank < 1) return cpu_fail(c, "input 1 is a scalar; it needs [*b,h]");
    if (like(c, "input 0", dy, x)) return -1;
    int64_t h = cpu_dim(x, -1), rows = h ? cpu_lead(x, 1) : 0;
    for (uint32_t o = 0; o < c->nout; o++) {
        char what[32];
        snprintf(what, sizeof what, "output %u", o);
        if (cpu_expect(c, what, &c->out[o], shape1(h))) return -1;
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

// x [*b,n] -> softmax over the last dimension.
static int k_softmax(kctx *c) {
    const rt_view *x = &c->in[0];
    if (x->rank < 1) return cpu_fail(c, "input 0 is a scalar; it needs [*b,n]");
    if (same_shapes(c)) return -1;
    int64_t n = cpu_dim(x, -1), rows = n ? cpu_lead(x, 1) : 0;
    const real *X = cpu_r(x);
    real *Y = cpu_r(&c->out[0]);
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = X + r * n;
        real m = xr[0];
        for (int64_t j = 1; j < n; j++) m = xr[j] > m ? xr[j] : m;
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += R_EXP(xr[j] - m);
        real inv = (real)(1 / s);
        for (int64_t j = 0; j < n; j++) cpu_put(&Y[r * n + j], R_EXP(xr[j] - m) * inv, c->acc);
    }
    return 0;
}

// (dy, y) -> dx = y (dy - sum(dy y)) per row.
static int k_softmax_grad(kctx *c) {
    if (c->in[0].rank < 1) return cpu_fail(c, "input 0 is a scalar; it needs [*b,n]");
    if (same_shapes(c)) return -1;
    int64_t n = cpu_dim(&c->in[0], -1), rows = n ? cpu_lead(&c->in[0], 1) : 0;
    const real *DY = cpu_r(&c->in[0]), *Y = cpu_r(&c->in[1]);
    real *DX = cpu_r(&c->out[0]);
    for (int64_t r = 0; r < rows; r++) {
        const real *dy = DY + r * n, *y = Y + r * n;
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += (double)dy[j] * y[j];
        for (int64_t j = 0; j < n; j++) cpu_put(&DX[r * n + j], y[j] * (dy[j] - (real)s), c->acc);
    }
    return 0;
}

/* ---- data movement: concat, split, slice, slice_grad, reshape, transpose ----
 *
 * These keep their input's dtype (real or int32) and move elements; accumulating, they add. */

static size_t elem_bytes(uint8_t dtype) { return dtype == CPU_DT_I32 ? sizeof(int32_t) : sizeof(real); }

// n elements from src (every `stride` one) to dst (contiguous): copied, or added.
static void move(void *dst, const void *src, int64_t n, int64_t stride, uint8_t dtype, bool acc) {
    if (dst == src && stride == 1 && !acc) return; // in place
    if (dtype == CPU_DT_I32) {
        int32_t *d = dst;
        const int32_t *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = acc ? d[i] + s[i * stride] : s[i * stride];
    } else if (!acc && stride == 1) {
        memcpy(dst, src, (size_t)n * sizeof(real));
    } else {
        real *d = dst;
        const real *s = src;
        for (int64_t i = 0; i < n; i++) cpu_put(&d[i], s[i * stride], acc);
    }
}

// The axis attribute, checked against a rank.
static int axis_of(kctx *c, int rank, int *axis) {
    int64_t a = c->a->i[PLAN_AI_AXIS];
    if (a < 0 || a >= rank) return cpu_fail(c, "axis %lld is out of range for rank %d", (long long)a, rank);
    *axis = (int)a;
    return 0;
}

static int64_t prod(const int64_t *d, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= d[i];
    return n;
}

// whole = the parts joined along axis: each part equals whole in every other dimension, and
// their sizes along axis add up to whole's.
static int join_check(kctx *c, const rt_view *whole, const char *wname, const rt_view *parts, uint32_t n, const char *pside,
                      int *axis) {
    if (axis_of(c, whole->rank, axis)) return -1;
    int64_t sum = 0;
    for (uint32_t p = 0; p < n; p++) {
        kshape want = cpu_shape_of(whole);
        want.d[*axis] = parts[p].shape[*axis];
        if (!cpu_shape_is(&parts[p], want))
            return cpu_fail(c, "%s %u is %s; it must equal %s %s in every dimension but axis %d", pside, p, CPU_SHAPE(&parts[p]),
                            wname, CPU_SHAPE(whole), *axis);
        sum += parts[p].shape[*axis];
    }
    if (sum != whole->shape[*axis])
        return cpu_fail(c, "the %ss add up to %lld along axis %d, but %s is %s", pside, (long long)sum, *axis, wname,
                        CPU_SHAPE(whole));
    return 0;
}

// Copies between whole and its parts along axis: gather (concat) or scatter (split).
static void join_move(kctx *c, const rt_view *whole, const rt_view *parts, uint32_t n, int axis, bool gather) {
    size_t es = elem_bytes(whole->dtype);
    int64_t inner = prod(whole->shape, axis + 1, whole->rank), outer = prod(whole->shape, 0, axis);
    int64_t row = whole->shape[axis] * inner;
    char *w = whole->data;
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = o * row;
        for (uint32_t p = 0; p < n; p++) {
            int64_t len = parts[p].shape[axis] * inner;
            char *pd = (char *)parts[p].data + (size_t)(o * len) * es, *wd = w + (size_t)off * es;
            if (gather) move(wd, pd, len, 1, whole->dtype, c->acc);
            else move(pd, wd, len, 1, whole->dtype, c->acc);
            off += len;
        }
    }
}

static int k_concat(kctx *c) {
    int axis;
    if (join_check(c, &c->out[0], "output 0", c->in, c->nin, "input", &axis)) return -1;
    join_move(c, &c->out[0], c->in, c->nin, axis, true);
    return 0;
}

static int k_split(kctx *c) {
    int axis;
    if (join_check(c, &c->in[0], "input 0", c->out, c->nout, "output", &axis)) return -1;
    join_move(c, &c->in[0], c->out, c->nout, axis, false);
    return 0;
}

// part = whole[start:end] along axis.
static int slice_check(kctx *c, const rt_view *whole, const char *wname, const rt_view *part, const char *pname, int *axis) {
    if (axis_of(c, whole->rank, axis)) return -1;
    int64_t s = c->a->i[PLAN_AI_START], e = c->a->i[PLAN_AI_END];
    if (s < 0 || e > whole->shape[*axis] || s >= e)
        return cpu_fail(c, "slice [%lld, %lld) is not inside [0, %lld) (%s is %s, axis %d)", (long long)s, (long long)e,
                        (long long)whole->shape[*axis], wname, CPU_SHAPE(whole), *axis);
    kshape want = cpu_shape_of(whole);
    want.d[*axis] = e - s;
    return cpu_expect(c, pname, part, want);
}

// Copies part <-> whole[start:end]; to the whole only when `into_whole`.
static void slice_move(kctx *c, const rt_view *whole, const rt_view *part, int axis, bool into_whole) {
    size_t es = elem_bytes(whole->dtype);
    int64_t inner = prod(whole->shape, axis + 1, whole->rank), outer = prod(whole->shape, 0, axis);
    int64_t wrow = whole->shape[axis] * inner, prow = part->shape[axis] * inner, skip = c->a->i[PLAN_AI_START] * inner;
    for (int64_t o = 0; o < outer; o++) {
        char *wd = (char *)whole->data + (size_t)(o * wrow + skip) * es, *pd = (char *)part->data + (size_t)(o * prow) * es;
        if (into_whole) move(wd, pd, prow, 1, whole->dtype, c->acc);
        else move(pd, wd, prow, 1, whole->dtype, c->acc);
    }
}

static int k_slice(kctx *c) {
    int axis;
    if (slice_check(c, &c->in[0], "input 0", &c->out[0], "output 0", &axis)) return -1;
    slice_move(c, &c->in[0], &c->out[0], axis, false);
    return 0;
}

// dy (the slice's gradient) -> dx: dy at [start, end) along axis, zeros elsewhere.
static int k_slice_grad(kctx *c) {
    int axis;
    const rt_view *dx = &c->out[0];
    if (slice_check(c, dx, "output 0", &c->in[0], "input 0", &axis)) return -1;
    if (!c->acc) memset(dx->data, 0, (size_t)cpu_numel(dx) * elem_bytes(dx->dtype));
    slice_move(c, dx, &c->in[0], axis, true);
    return 0;
}

// The same elements in the same order: a local piece of a reshape is the reshape of the local
// piece (the compiler splits only each group's major axis), so this is a copy.
static int k_reshape(kctx *c) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    if (cpu_numel(x) != cpu_numel(y))
        return cpu_fail(c, "output 0 is %s (%lld elements) but input 0 is %s (%lld)", CPU_SHAPE(y), (long long)cpu_numel(y),
                        CPU_SHAPE(x), (long long)cpu_numel(x));
    move(y->data, x->data, cpu_numel(x), 1, x->dtype, c->acc);
    return 0;
}

// Output dimension i is input dimension perm[i].
static int k_transpose(kctx *c) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    const int32_t *perm = c->a->perm;
    int r = x->rank;
    bool seen[PLAN_MAX_RANK] = {false};
    for (int i = 0; i < r; i++) {
        if (perm[i] < 0 || perm[i] >= r || seen[perm[i]])
            return cpu_fail(c, "perm[%d] = %d: perm must be a permutation of 0..%d", i, perm[i], r - 1);
        seen[perm[i]] = true;
    }
    kshape want = {.rank = r};
    for (int i = 0; i < r; i++) want.d[i] = x->shape[perm[i]];
    if (cpu_expect(c, "output 0", y, want)) return -1;
    int64_t xs[PLAN_MAX_RANK], idx[PLAN_MAX_RANK] = {0};
    for (int i = r - 1; i >= 0; i--) xs[i] = i == r - 1 ? 1 : xs[i + 1] * x->shape[i + 1];
    int64_t n = cpu_numel(y), run = r ? y->shape[r - 1] : 1, step = r ? xs[perm[r - 1]] : 1;
    size_t es = elem_bytes(x->dtype);
    // One run along y's last dimension at a time; idx counts y's other dimensions.
    for (int64_t done = 0; run > 0 && done < n; done += run) {
        int64_t from = 0;
        for (int i = 0; i < r - 1; i++) from += idx[i] * xs[perm[i]];
        move((char *)y->data + (size_t)done * es, (const char *)x->data + (size_t)from * es, run, step, x->dtype, c->acc);
        for (int i = r - 2; i >= 0 && ++idx[i] == y->shape[i]; i--) idx[i] = 0;
    }
    return 0;
}

/* ---- losses: a scalar, the local sum over the global count ---- */

static int scalar_check(kctx *c, const char *what, const rt_view *v) {
    if (cpu_numel(v) == 1) return 0;
    return cpu_fail(c, "%s is %s; it must be a scalar", what, CPU_SHAPE(v));
}

// logits [*b,v] and labels [*b] (int32, each in [0, v)).
static int ce_check(kctx *c, const rt_view *logits, const char *lname, const rt_view *labels, const char *yname) {
    if (logits->rank < 1) return cpu_fail(c, "%s is a scalar; it needs [*b,v]", lname);
    kshape want = cpu_shape_of(logits);
    want.rank--;
    if (cpu_expect(c, yname, labels, want)) return -1;
    int64_t v = cpu_dim(logits, -1), n = cpu_numel(labels);
    const int32_t *y = cpu_i(labels);
    for (int64_t i = 0; i < n; i++)
        if (y[i] < 0 || y[i] >= v)
            return cpu_fail(c, "%s holds label %d at element %lld, outside [0, %lld)", yname, y[i], (long long)i, (long long)v);
    return 0;
}

// log(sum(exp(x))) of one row, and the row's maximum.
static double logsumexp(const real *x, int64_t v, real *max) {
    real m = x[0];
    for (int64_t j = 1; j < v; j++) m = x[j] > m ? x[j] : m;
    double s = 0;
    for (int64_t j = 0; j < v; j++) s += R_EXP(x[j] - m);
    *max = m;
    return (double)m + log(s);
}

// (logits [*b,v], labels [*b]) -> the mean over *b of -log softmax(logits)[label].
static int k_cross_entropy(kctx *c) {
    const rt_view *x = &c->in[0], *lab = &c->in[1];
    if (ce_check(c, x, "input 0", lab, "input 1") || scalar_check(c, "output 0", &c->out[0])) return -1;
    int64_t v = cpu_dim(x, -1), rows = v ? cpu_numel(lab) : 0;
    const real *X = cpu_r(x);
    const int32_t *y = cpu_i(lab);
    double sum = 0;
    for (int64_t r = 0; r < rows; r++) {
        real m;
        sum += logsumexp(X + r * v, v, &m) - X[r * v + y[r]];
    }
    cpu_put(cpu_r(&c->out[0]), (real)(sum / (double)cpu_full_numel(lab)), c->acc);
    return 0;
}

// (dy, logits, labels) -> dy (softmax(logits) - onehot(label)) / count.
static int k_cross_entropy_grad(kctx *c) {
    const rt_view *x = &c->in[1], *lab = &c->in[2];
    if (scalar_check(c, "input 0", &c->in[0]) || ce_check(c, x, "input 1", lab, "input 2") || like(c, "output 0", &c->out[0], x))
        return -1;
    int64_t v = cpu_dim(x, -1), rows = v ? cpu_numel(lab) : 0;
    double k = (double)*cpu_r(&c->in[0]) / (double)cpu_full_numel(lab);
    const real *X = cpu_r(x);
    const int32_t *y = cpu_i(lab);
    real *DX = cpu_r(&c->out[0]);
    for (int64_t r = 0; r < rows; r++) {
        real m, lse = (real)logsumexp(X + r * v, v, &m), kr = (real)k;
        for (int64_t j = 0; j < v; j++) cpu_put(&DX[r * v + j], kr * (R_EXP(X[r * v + j] - lse) - (real)(j == y[r])), c->acc);
    }
    return 0;
}

// (a, b) -> mean((a - b)^2), or (x, labels) -> the mean of BCE with logits:
//   max(x, 0) - x y + log(1 + exp(-|x|)).
static int k_pointwise_loss(kctx *c) {
    const rt_view *a = &c->in[0], *b = &c->in[1];
    if (like(c, "input 1", b, a) || scalar_check(c, "output 0", &c->out[0])) return -1;
    const real *A = cpu_r(a), *B = cpu_r(b);
    int64_t n = cpu_numel(a);
    double sum = 0;
    if (c->k->op == CPU_OP_MSE_LOSS) {
        for (int64_t i = 0; i < n; i++) sum += ((double)A[i] - B[i]) * ((double)A[i] - B[i]);
    } else {
        for (int64_t i = 0; i < n; i++) {
            double x = A[i];
            sum += (x > 0 ? x : 0) - x * B[i] + log1p(exp(-fabs(x)));
        }
    }
    cpu_put(cpu_r(&c->out[0]), (real)(sum / (double)cpu_full_numel(a)), c->acc);
    return 0;
}

// (dy, a, b) -> 2 dy (a - b) / count, or (dy, x, labels) -> dy (sigmoid(x) - labels) / count.
static int k_pointwise_loss_grad(kctx *c) {
    const rt_view *a = &c->in[1], *b = &c->in[2];
    if (scalar_check(c, "input 0", &c->in[0]) || like(c, "input 2", b, a) || like(c, "output 0", &c->out[0], a)) return -1;
    const real *A = cpu_r(a), *B = cpu_r(b);
    real *D = cpu_r(&c->out[0]);
    int64_t n = cpu_numel(a);
    real k = (real)((double)*cpu_r(&c->in[0]) / (double)cpu_full_numel(a));
    if (c->k->op == CPU_OP_MSE_LOSS_GRAD) {
        for (int64_t i = 0; i < n; i++) cpu_put(&D[i], 2 * k * (A[i] - B[i]), c->acc);
    } else {
        for (int64_t i = 0; i < n; i++) cpu_put(&D[i], k * (sigmoid(A[i]) - B[i]), c->acc);
    }
    return 0;
}

/* ---- optimizer steps: in place on their inputs ---- */

// Inputs 1.. have input 0's shape.
static int inplace_shapes(kctx *c) {
    for (uint32_t i = 1; i < c->nin; i++) {
        char what[32];
        snprintf(what, sizeof what, "input %u", i);
        if (like(c, what, &c->in[i], &c->in[0])) return -1;
    }
    return 0;
}

// After an update of the f32 master weights w, the parameter takes their value.
static void master_to_param(const rt_view *p, const real *w, int64_t n) {
    if (w != cpu_r(p)) memcpy(p->data, w, (size_t)n * sizeof(real));
}

// (p, g, [momentum buffer when momentum > 0], [master]) -> PyTorch's SGD with coupled weight
// decay: d = g + wd w; buf = momentum buf + d; w -= lr (momentum ? buf : d).
static int k_sgd(kctx *c) {
    double mom = c->a->f[PLAN_AF_MOMENTUM];
    uint32_t want = 2 + (mom > 0);
    if (c->nin != want && c->nin != want + 1)
        return cpu_fail(c, "%u inputs; with momentum %g it takes %u (p, g%s) or %u with the master weights", c->nin, mom, want,
                        mom > 0 ? ", momentum" : "", want + 1);
    if (inplace_shapes(c)) return -1;
    int64_t n = cpu_numel(&c->in[0]);
    const real *g = cpu_r(&c->in[1]);
    real *buf = mom > 0 ? cpu_r(&c->in[2]) : NULL, *w = c->nin > want ? cpu_r(&c->in[want]) : cpu_r(&c->in[0]);
    real lr = (real)c->a->f[PLAN_AF_LR], wd = (real)c->a->f[PLAN_AF_WEIGHT_DECAY], m = (real)mom;
    for (int64_t i = 0; i < n; i++) {
        real d = g[i] + wd * w[i];
        if (buf) d = buf[i] = m * buf[i] + d;
        w[i] -= lr * d;
    }
    master_to_param(&c->in[0], w, n);
    return 0;
}

// (p, g, m, v, [master]) -> AdamW (decoupled weight decay, bias correction by the 1-based step):
//   w -= lr wd w; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   w -= lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps).
static int k_adamw(kctx *c) {
    if (inplace_shapes(c)) return -1;
    if (c->k->step < 1) return cpu_fail(c, "step %llu: the steps count from 1", (unsigned long long)c->k->step);
    const plan_attrs *a = c->a;
    double t = (double)c->k->step, b1 = a->f[PLAN_AF_BETA1], b2 = a->f[PLAN_AF_BETA2];
    real decay = (real)(1 - a->f[PLAN_AF_LR] * a->f[PLAN_AF_WEIGHT_DECAY]);
    real step = (real)(a->f[PLAN_AF_LR] / (1 - pow(b1, t))), rc2 = (real)(1 / sqrt(1 - pow(b2, t)));
    // 1 - b formed in double, as PyTorch does (in float, 1 - 0.999f is 1.3e-5 short of 0.001).
    real eps = (real)a->f[PLAN_AF_EPS], rb1 = (real)b1, rb2 = (real)b2, cb1 = (real)(1 - b1), cb2 = (real)(1 - b2);
    int64_t n = cpu_numel(&c->in[0]);
    const real *g = cpu_r(&c->in[1]);
    real *m = cpu_r(&c->in[2]), *v = cpu_r(&c->in[3]), *w = c->nin > 4 ? cpu_r(&c->in[4]) : cpu_r(&c->in[0]);
    for (int64_t i = 0; i < n; i++) {
        m[i] = rb1 * m[i] + cb1 * g[i];
        v[i] = rb2 * v[i] + cb2 * g[i] * g[i];
        w[i] = w[i] * decay - step * m[i] / (R_SQRT(v[i]) * rc2 + eps);
    }
    master_to_param(&c->in[0], w, n);
    return 0;
}

/* ---- dispatch ---- */

static kernel_fn *const kernels[CPU_OP_COUNT] = {
    [CPU_OP_MATMUL] = k_matmul,
    [CPU_OP_BMM] = k_bmm,
    [CPU_OP_LINEAR] = k_linear,
    [CPU_OP_ADD] = k_add,
    [CPU_OP_MUL] = k_mul,
    [CPU_OP_SCALE] = k_scale,
    [CPU_OP_RELU] = k_activation,
    [CPU_OP_GELU] = k_activation,
    [CPU_OP_SILU] = k_activation,
    [CPU_OP_LAYERNORM] = k_norm,
    [CPU_OP_RMSNORM] = k_norm,
    [CPU_OP_SOFTMAX] = k_softmax,
    [CPU_OP_ATTENTION] = CPU_KERNEL(attention),
    [CPU_OP_EMBEDDING] = CPU_KERNEL(embedding),
    [CPU_OP_EMBEDDING_BAG] = CPU_KERNEL(embedding_bag),
    [CPU_OP_CONCAT] = k_concat,
    [CPU_OP_SPLIT] = k_split,
    [CPU_OP_SLICE] = k_slice,
    [CPU_OP_RESHAPE] = k_reshape,
    [CPU_OP_TRANSPOSE] = k_transpose,
    [CPU_OP_CONV2D] = CPU_KERNEL(conv2d),
    [CPU_OP_MAXPOOL] = CPU_KERNEL(maxpool),
    [CPU_OP_AVGPOOL] = CPU_KERNEL(avgpool),
    [CPU_OP_BATCHNORM] = CPU_KERNEL(batchnorm),
    [CPU_OP_DROPOUT] = CPU_KERNEL(dropout),
    [CPU_OP_CROSS_ENTROPY] = k_cross_entropy,
    [CPU_OP_MSE_LOSS] = k_pointwise_loss,
    [CPU_OP_BCE_LOGITS] = k_pointwise_loss,
    [CPU_OP_FILL] = k_fill,
    [CPU_OP_REDUCE_SUM] = k_reduce_sum,
    [CPU_OP_MATMUL_GRAD_A] = k_matmul_grad_a,
    [CPU_OP_MATMUL_GRAD_B] = k_matmul_grad_b,
    [CPU_OP_BMM_GRAD_A] = k_bmm_grad_a,
    [CPU_OP_BMM_GRAD_B] = k_bmm_grad_b,
    [CPU_OP_LINEAR_GRAD_X] = k_linear_grad_x,
    [CPU_OP_LINEAR_GRAD_W] = k_linear_grad_w,
    [CPU_OP_RELU_GRAD] = k_activation_grad,
    [CPU_OP_GELU_GRAD] = k_activation_grad,
    [CPU_OP_SILU_GRAD] = k_activation_grad,
    [CPU_OP_LAYERNORM_GRAD_X] = k_norm_grad_x,
    [CPU_OP_LAYERNORM_GRAD_W] = k_norm_grad_w,
    [CPU_OP_RMSNORM_GRAD_X] = k_norm_grad_x,
    [CPU_OP_RMSNORM_GRAD_W] = k_norm_grad_w,
    [CPU_OP_SOFTMAX_GRAD] = k_softmax_grad,
    [CPU_OP_ATTENTION_GRAD] = CPU_KERNEL(attention_grad),
    [CPU_OP_EMBEDDING_GRAD] = CPU_KERNEL(embedding_grad),
    [CPU_OP_EMBEDDING_BAG_GRAD] = CPU_KERNEL(embedding_bag_grad),
    [CPU_OP_SLICE_GRAD] = k_slice_grad,
    [CPU_OP_CONV2D_GRAD_X] = CPU_KERNEL(conv2d_grad_x),
    [CPU_OP_CONV2D_GRAD_W] = CPU_KERNEL(conv2d_grad_w),
    [CPU_OP_CONV2D_GRAD_B] = CPU_KERNEL(conv2d_grad_b),
    [CPU_OP_MAXPOOL_GRAD] = CPU_KERNEL(maxpool_grad),
    [CPU_OP_AVGPOOL_GRAD] = CPU_KERNEL(avgpool_grad),
    [CPU_OP_BATCHNORM_GRAD_X] = CPU_KERNEL(batchnorm_grad_x),
    [CPU_OP_BATCHNORM_GRAD_W] = CPU_KERNEL(batchnorm_grad_w),
    [CPU_OP_DROPOUT_GRAD] = CPU_KERNEL(dropout),
    [CPU_OP_CROSS_ENTROPY_GRAD] = k_cross_entropy_grad,
    [CPU_OP_MSE_LOSS_GRAD] = k_pointwise_loss_grad,
    [CPU_OP_BCE_LOGITS_GRAD] = k_pointwise_loss_grad,
    [CPU_OP_SGD] = k_sgd,
    [CPU_OP_ADAMW] = k_adamw,
};

static const struct op_row {
    const char *name;
    int in_min, in_max, out; // out -1: one or more
} op_rows[CPU_OP_COUNT] = {
#define OP(E, name, imin, imax, nout, ann, flags) [CPU_OP_##E] = {#name, imin, imax, nout},
#include "../ops.def"
#undef OP
};

// Operand j (inputs, then outputs) holds int32 ids or labels (compiler/ops.c's int_operand).
static bool int_operand(uint32_t op, uint32_t j) {
    switch (op) {
    case CPU_OP_EMBEDDING: case CPU_OP_EMBEDDING_BAG: return j == 0;
    case CPU_OP_CROSS_ENTROPY: case CPU_OP_EMBEDDING_GRAD: case CPU_OP_EMBEDDING_BAG_GRAD: return j == 1;
    case CPU_OP_CROSS_ENTROPY_GRAD: return j == 2;
    default: return false;
    }
}

static bool moves_data(uint32_t op) {
    return op == CPU_OP_CONCAT || op == CPU_OP_SPLIT || op == CPU_OP_SLICE || op == CPU_OP_SLICE_GRAD ||
           op == CPU_OP_RESHAPE || op == CPU_OP_TRANSPOSE;
}

static const char *dtype_name(uint8_t t) {
    static const char *const names[] = {"f32", "f16", "bf16", "i32"};
    return t < 4 ? names[t] : "an unknown dtype";
}

// One view on its own: rank, sizes, the piece inside its logical tensor, data, dtype.
static int check_view(kctx *c, const rt_view *v, const char *side, uint32_t j, uint32_t operand) {
    if (v->rank > PLAN_MAX_RANK) return cpu_fail(c, "%s %u has rank %d; at most %d", side, j, v->rank, PLAN_MAX_RANK);
    for (int i = 0; i < v->rank; i++)
        if (v->shape[i] < 0 || v->start[i] < 0 || v->start[i] + v->shape[i] > v->full[i])
            return cpu_fail(c, "%s %u: dimension %d holds [%lld, %lld) of a logical size %lld", side, j, i,
                            (long long)v->start[i], (long long)(v->start[i] + v->shape[i]), (long long)v->full[i]);
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++)
        if ((n *= v->shape[i]) > INT_MAX)
            return cpu_fail(c, "%s %u is %s: more than %d elements", side, j, CPU_SHAPE(v), INT_MAX);
    if (n > 0 && !v->data) return cpu_fail(c, "%s %u is %s but has no data", side, j, CPU_SHAPE(v));
    uint8_t want = int_operand(c->k->op, operand) ? CPU_DT_I32 : CPU_DT_REAL;
    if (moves_data(c->k->op)) want = c->in[0].dtype == CPU_DT_I32 ? CPU_DT_I32 : CPU_DT_REAL;
    if (v->dtype != want)
        return cpu_fail(c, "%s %u is %s; the CPU backend wants %s here", side, j, dtype_name(v->dtype), dtype_name(want));
    return 0;
}

static int check_arity(kctx *c) {
    const struct op_row *r = &op_rows[c->k->op];
    bool out_ok = r->out < 0 ? c->nout >= 1 : c->nout == (uint32_t)r->out;
    if (c->nin < (uint32_t)r->in_min || c->nin > (uint32_t)r->in_max || !out_ok)
        return cpu_fail(c, "%u input%s and %u output%s, but it takes %d to %d inputs and %s%d output%s", c->nin,
                        c->nin == 1 ? "" : "s", c->nout, c->nout == 1 ? "" : "s", r->in_min, r->in_max,
                        r->out < 0 ? "at least " : "", r->out < 0 ? 1 : r->out, r->out == 1 || r->out < 0 ? "" : "s");
    if ((c->nin && !c->in) || (c->nout && !c->out)) return cpu_fail(c, "its operand views are missing");
    return 0;
}

int CPU_ENTRY(const rt_kernel *k, char *err, size_t err_n) {
    kctx c = {.k = k, .name = "kernel", .err = err, .err_n = err_n};
    if (err && err_n) err[0] = 0;
    if (!k) return cpu_fail(&c, "no kernel given");
    if (k->op >= CPU_OP_COUNT || !kernels[k->op]) return cpu_fail(&c, "operator %u is not one the CPU backend runs", k->op);
    c = (kctx){.k = k, .a = &k->attrs, .in = k->in, .out = k->out, .nin = k->nin, .nout = k->nout, .name = op_rows[k->op].name,
               .acc = k->accumulate, .err = err, .err_n = err_n};
    if (check_arity(&c)) return -1;
    for (uint32_t j = 0; j < c.nin; j++)
        if (check_view(&c, &c.in[j], "input", j, j)) return -1;
    for (uint32_t j = 0; j < c.nout; j++)
        if (check_view(&c, &c.out[j], "output", j, c.nin + j)) return -1;
    return kernels[k->op](&c);
}

#ifndef RT_REAL_DOUBLE
int64_t rt_view_numel(const rt_view *v) { return cpu_numel(v); }
#endif
