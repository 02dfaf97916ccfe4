/*
 * cpu/softmax.c: the CPU backend's softmax over the last dimension of x [*b,n], row by row
 * (the row's maximum subtracted before exp, the sum in double), and its gradient
 * dx = y (dy - sum(dy y)) per row. Attention's own softmax is in attention.c.
 */
#include "cpu.h"

// x [*b,n] -> softmax over the last dimension.
int CPU_KERNEL(softmax)(kctx *c) {
    const rt_view *x = &c->in[0];
    if (x->rank < 1) return cpu_fail(c, "input 0 is a scalar; it needs [*b,n]");
    if (cpu_same_shapes(c)) return -1;
    int64_t n = cpu_dim(x, -1), rows = n ? cpu_lead(x, 1) : 0;
    const real *X = cpu_r(x);
    real *Y = cpu_r(&c->out[0]);
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = X + r * n;
        real m;
        real inv = (real)(1 / cpu_sum_exp(xr, n, &m));
        for (int64_t j = 0; j < n; j++) cpu_put(&Y[r * n + j], R_EXP(xr[j] - m) * inv, c->acc);
    }
    return 0;
}

// (dy, y) -> dx = y (dy - sum(dy y)) per row.
int CPU_KERNEL(softmax_grad)(kctx *c) {
    if (c->in[0].rank < 1) return cpu_fail(c, "input 0 is a scalar; it needs [*b,n]");
    if (cpu_same_shapes(c)) return -1;
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
