/*
 * cpu/optim.c: the CPU backend's optimizer steps, in place on their inputs (no outputs): sgd
 * (PyTorch's, with coupled weight decay and optional momentum) and adamw (decoupled weight
 * decay, bias correction by the 1-based step). With an extra input, the f32 master weights,
 * the update runs on the master and the parameter takes its value.
 */
#include "cpu.h"

// Inputs 1.. have input 0's shape.
static int inplace_shapes(kctx *c) {
    for (uint32_t i = 1; i < c->nin; i++) {
        char what[32];
        snprintf(what, sizeof what, "input %u", i);
        if (cpu_like(c, what, &c->in[i], &c->in[0])) return -1;
    }
    return 0;
}

// After an update of the f32 master weights w, the parameter takes their value.
static void master_to_param(const rt_view *p, const real *w, int64_t n) {
    if (w != cpu_r(p)) memcpy(p->data, w, (size_t)n * sizeof(real));
}

// (p, g, [momentum buffer when momentum > 0], [master]) -> PyTorch's SGD with coupled weight
// decay: d = g + wd w; buf = momentum buf + d; w -= lr (momentum ? buf : d).
int CPU_KERNEL(sgd)(kctx *c) {
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
int CPU_KERNEL(adamw)(kctx *c) {
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
