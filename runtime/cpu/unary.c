/*
 * cpu/unary.c: the CPU backend's element-wise math of imported models: sigmoid, tanh, exp, log,
 * erf, gelu_erf (GELU as PyTorch's default: x Phi(x) with the normal CDF from erf), rsqrt, sqrt, sin,
 * cos and pow (x^e, e = attrs scale), and their gradients, each (dy, x) -> dy f'(x) as
 * compiler/autodiff.c wires them. Every value is computed in double and stored through cpu_put
 * (overwrite, or add when accumulating), so the f32 and f64 builds differ only by the final
 * rounding. Outside a function's domain (log of a negative number, pow of a negative base to a
 * fractional exponent) the result is NaN or an infinity, as in PyTorch; planrun reports a
 * non-finite loss.
 */
#include "cpu.h"

#define SQRT1_2 0.70710678118654752440  // 1/sqrt(2)
#define INV_SQRT_2PI 0.39894228040143267794 // 1/sqrt(2 pi)
#define SQRT2 1.41421356237309504880

static double f_of(uint32_t op, double x, double e) {
    switch (op) {
    case CPU_OP_SIGMOID: return 1 / (1 + exp(-x));
    case CPU_OP_TANH: return tanh(x);
    case CPU_OP_EXP: return exp(x);
    case CPU_OP_LOG: return log(x);
    case CPU_OP_GELU_ERF: return 0.5 * x * (1 + erf(x * SQRT1_2));
    case CPU_OP_RSQRT: return 1 / sqrt(x);
    case CPU_OP_SQRT: return sqrt(x);
    case CPU_OP_SIN: return sin(x);
    case CPU_OP_COS: return cos(x);
    case CPU_OP_ERF: return erf(x);
    default: return pow(x, e); // pow
    }
}

// f'(x) of the forward operator whose gradient `op` is.
static double df_of(uint32_t op, double x, double e) {
    switch (op) {
    case CPU_OP_SIGMOID_GRAD: {
        double s = 1 / (1 + exp(-x));
        return s * (1 - s);
    }
    case CPU_OP_TANH_GRAD: {
        double t = tanh(x);
        return 1 - t * t;
    }
    case CPU_OP_EXP_GRAD: return exp(x);
    case CPU_OP_LOG_GRAD: return 1 / x;
    case CPU_OP_GELU_ERF_GRAD: return 0.5 * (1 + erf(x * SQRT1_2)) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
    case CPU_OP_RSQRT_GRAD: return -0.5 / (x * sqrt(x));
    case CPU_OP_SQRT_GRAD: return 0.5 / sqrt(x);
    case CPU_OP_SIN_GRAD: return cos(x);
    case CPU_OP_COS_GRAD: return -sin(x);
    case CPU_OP_ERF_GRAD: return 2 * INV_SQRT_2PI * SQRT2 * exp(-x * x); // 2/sqrt(pi) exp(-x^2)
    default: return e == 0 ? 0 : e * pow(x, e - 1); // pow_grad
    }
}

// x -> f(x).
int CPU_KERNEL(unary)(kctx *c) {
    if (cpu_same_shapes(c)) return -1;
    const real *x = cpu_r(&c->in[0]);
    real *y = cpu_r(&c->out[0]);
    double e = c->a->f[PLAN_AF_SCALE];
    int64_t n = cpu_numel(&c->in[0]);
    for (int64_t i = 0; i < n; i++) cpu_put(&y[i], (real)f_of(c->k->op, (double)x[i], e), c->acc);
    return 0;
}

// (dy, x) -> dy f'(x).
int CPU_KERNEL(unary_grad)(kctx *c) {
    if (cpu_same_shapes(c)) return -1;
    const real *dy = cpu_r(&c->in[0]), *x = cpu_r(&c->in[1]);
    real *dx = cpu_r(&c->out[0]);
    double e = c->a->f[PLAN_AF_SCALE];
    int64_t n = cpu_numel(&c->in[0]);
    for (int64_t i = 0; i < n; i++) cpu_put(&dx[i], (real)((double)dy[i] * df_of(c->k->op, (double)x[i], e)), c->acc);
    return 0;
}
