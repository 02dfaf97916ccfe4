/*
 * cpu/matmul.c: the CPU backend's dense products: matmul, bmm and linear, forward and backward.
 * Each is one GEMM through CBLAS (cpu_gemm: sgemm, or dgemm in the f64 build) over the rows of
 * its operands, or a batch of GEMMs over the leading dimensions (bmm); the gradients are the
 * transposed products (matmul_grad_a = dy b^T, matmul_grad_b = a^T dy summed over all rows).
 * linear's weight is [n,k] (PyTorch's layout) and its bias, counted only where its view's
 * `once` is set, is added per row. Accumulating, GEMM's beta is 1 (cpu_beta).
 */
#include "cpu.h"

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

static kshape shape2(int64_t m, int64_t n) { return (kshape){.rank = 2, .d = {m, n}}; }

// a [*b,m,k] @ b [k,n] -> [*b,m,n]: one GEMM over a's rows.
int CPU_KERNEL(matmul)(kctx *c) {
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
int CPU_KERNEL(matmul_grad_a)(kctx *c) {
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
int CPU_KERNEL(matmul_grad_b)(kctx *c) {
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
int CPU_KERNEL(bmm)(kctx *c) {
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
int CPU_KERNEL(bmm_grad_a)(kctx *c) {
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
int CPU_KERNEL(bmm_grad_b)(kctx *c) {
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
int CPU_KERNEL(linear)(kctx *c) {
    const rt_view *x = &c->in[0], *w = &c->in[1], *y = &c->out[0];
    const rt_view *b = c->nin > 2 ? &c->in[2] : NULL;
    if (x->rank < 1) return cpu_fail(c, "input 0 is a scalar; it needs [*b,k]");
    int64_t k = cpu_dim(x, -1);
    if (w->rank != 2 || w->shape[1] != k)
        return cpu_fail(c, "input 1 is %s but input 0's last dimension is %lld", CPU_SHAPE(w), (long long)k);
    int64_t n = w->shape[0];
    if (b && cpu_expect(c, "input 2 (the bias)", b, cpu_shape1(n))) return -1;
    if (cpu_expect(c, "output 0", y, with_last(x, n))) return -1;
    int64_t rows = cpu_lead(x, 1);
    rows_bias(cpu_r(y), rows, n, b && b->once ? cpu_r(b) : NULL, c->acc);
    cpu_gemm(false, true, rows, n, k, 1, cpu_r(x), k, cpu_r(w), k, 1, cpu_r(y), n);
    return 0;
}

// (dy [*b,n], w [n,k]) -> dx = dy w [*b,k].
int CPU_KERNEL(linear_grad_x)(kctx *c) {
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
int CPU_KERNEL(linear_grad_w)(kctx *c) {
    const rt_view *dy = &c->in[0], *x = &c->in[1], *dw = &c->out[0];
    if (dy->rank < 1 || !lead_same(dy, x, 1))
        return cpu_fail(c, "input 1 is %s but input 0 is %s; they must agree in all but the last dimension", CPU_SHAPE(x),
                        CPU_SHAPE(dy));
    int64_t n = cpu_dim(dy, -1), k = cpu_dim(x, -1);
    if (cpu_expect(c, "output 0", dw, shape2(n, k))) return -1;
    cpu_gemm(true, false, n, k, cpu_lead(dy, 1), 1, cpu_r(dy), n, cpu_r(x), k, cpu_beta(c), cpu_r(dw), k);
    return 0;
}
