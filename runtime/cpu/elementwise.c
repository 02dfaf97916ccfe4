/*
 * cpu/elementwise.c: the CPU backend's element-wise operators: add and mul (input 1 equal to
 * input 0 or a suffix of its shape, repeated over its leading dimensions, or with an axis map in
 * attrs perm (runtime/ops.def's last section) input 0's shape with axes left out; add counts
 * each addend only where its view's `once` is set), scale, relu, gelu (the tanh approximation) and
 * silu with their gradients, fill (a constant: a gradient seed, or zeros), reduce_sum (the sum
 * over leading dimensions, or over the axes an axis map leaves out, that undoes a broadcast),
 * and dropout. They store through cpu_put, so
 * they overwrite or, accumulating, add (reduce_sum zeroes its output first unless
 * accumulating, then adds).
 *
 * dropout keeps an element with probability 1 - p and scales it by 1 / (1 - p). Whether
 * element i (its flat index in the LOGICAL tensor, from the view's start and full) is kept is
 * rt_uniform(rt_key(K, i)) >= p with
 *     K = rt_key(rt_key(rt_key(rt_key(seed, attrs seed), step), micro-batch), block copy)
 * so any split, a recompute and dropout_grad (the same kernel on dy) draw the same mask. With a
 * sequence in zigzag order (attrs i[END] = z chunks, i[AXIS] = its dimension; --cp-form zigzag)
 * the index along that dimension is the logical position the stored one holds
 * (plan_zigzag_pos of the view's start plus the local index, over the full length), so the mask
 * is the one device's, as attention's dropout is.
 */
#include "cpu.h"

static bool map_given(const plan_attrs *a) {
    for (int i = 0; i < PLAN_MAX_RANK; i++)
        if (a->perm[i]) return true;
    return false;
}

// add and mul with an axis map (attrs perm): b is a's shape with axes left out.
static int binary_mapped(kctx *c) {
    const rt_view *a = &c->in[0], *b = &c->in[1];
    int64_t st[PLAN_MAX_RANK];
    if (cpu_like(c, "output 0", &c->out[0], a) || cpu_map(c, a, "input 0", b, "input 1", st)) return -1;
    const real *A = cpu_r(a), *B = cpu_r(b);
    real *Y = cpu_r(&c->out[0]);
    bool ua = a->once, ub = b->once;
    if (c->k->op == CPU_OP_MUL) CPU_FOR_MAPPED(a, st, i, k, cpu_put(&Y[i], A[i] * B[k], c->acc));
    else CPU_FOR_MAPPED(a, st, i, k, cpu_put(&Y[i], (ua ? A[i] : 0) + (ub ? B[k] : 0), c->acc));
    return 0;
}

// add and mul: b equals a's shape or a suffix of it (it repeats over a's leading dimensions).
static int binary_shapes(kctx *c) {
    const rt_view *a = &c->in[0], *b = &c->in[1];
    bool ok = b->rank <= a->rank;
    for (int i = 0; ok && i < b->rank; i++) ok = b->shape[i] == a->shape[a->rank - b->rank + i];
    if (!ok) return cpu_fail(c, "input 1 is %s; it must equal input 0's shape %s or a suffix of it", CPU_SHAPE(b), CPU_SHAPE(a));
    return cpu_expect(c, "output 0", &c->out[0], cpu_shape_of(a));
}

// a + b, each addend counted only where its `once` is set.
int CPU_KERNEL(add)(kctx *c) {
    if (map_given(c->a)) return binary_mapped(c);
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

int CPU_KERNEL(mul)(kctx *c) {
    if (map_given(c->a)) return binary_mapped(c);
    if (binary_shapes(c)) return -1;
    const real *A = cpu_r(&c->in[0]), *B = cpu_r(&c->in[1]);
    real *Y = cpu_r(&c->out[0]);
    int64_t nb = cpu_numel(&c->in[1]), outer = nb ? cpu_numel(&c->in[0]) / nb : 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < nb; j++) cpu_put(&Y[o * nb + j], A[o * nb + j] * B[j], c->acc);
    return 0;
}

int CPU_KERNEL(scale)(kctx *c) {
    if (cpu_same_shapes(c)) return -1;
    const real *x = cpu_r(&c->in[0]);
    real *y = cpu_r(&c->out[0]), s = (real)c->a->f[PLAN_AF_SCALE];
    int64_t n = cpu_numel(&c->in[0]);
    for (int64_t i = 0; i < n; i++) cpu_put(&y[i], x[i] * s, c->acc);
    return 0;
}

#define GELU_C 0.7978845608028654 // sqrt(2 / pi)
#define GELU_A 0.044715

// relu, gelu (tanh approximation), silu.
int CPU_KERNEL(activation)(kctx *c) {
    if (cpu_same_shapes(c)) return -1;
    const real *x = cpu_r(&c->in[0]);
    real *y = cpu_r(&c->out[0]);
    int64_t n = cpu_numel(&c->in[0]);
    switch (c->k->op) {
    case CPU_OP_RELU:
        for (int64_t i = 0; i < n; i++) cpu_put(&y[i], x[i] > 0 ? x[i] : 0, c->acc);
        break;
    case CPU_OP_GELU: // 0.5 (1 + tanh(u)) is cpu_sigmoid(2 u), and expf is much faster than tanhf
        for (int64_t i = 0; i < n; i++) {
            real s = cpu_sigmoid(2 * (real)GELU_C * (x[i] + (real)GELU_A * x[i] * x[i] * x[i]));
            cpu_put(&y[i], x[i] * s, c->acc);
        }
        break;
    default: // silu
        for (int64_t i = 0; i < n; i++) cpu_put(&y[i], x[i] * cpu_sigmoid(x[i]), c->acc);
        break;
    }
    return 0;
}

// (dy, x) -> dy * f'(x) for relu, gelu, silu.
int CPU_KERNEL(activation_grad)(kctx *c) {
    if (cpu_same_shapes(c)) return -1;
    const real *dy = cpu_r(&c->in[0]), *x = cpu_r(&c->in[1]);
    real *dx = cpu_r(&c->out[0]);
    int64_t n = cpu_numel(&c->in[0]);
    switch (c->k->op) {
    case CPU_OP_RELU_GRAD:
        for (int64_t i = 0; i < n; i++) cpu_put(&dx[i], x[i] > 0 ? dy[i] : 0, c->acc);
        break;
    case CPU_OP_GELU_GRAD: // with s = cpu_sigmoid(2 u): d/dx x s = s + 2 x s (1 - s) du/dx
        for (int64_t i = 0; i < n; i++) {
            real x2 = x[i] * x[i], s = cpu_sigmoid(2 * (real)GELU_C * (x[i] + (real)GELU_A * x2 * x[i]));
            real d = s + 2 * x[i] * s * (1 - s) * (real)GELU_C * (1 + 3 * (real)GELU_A * x2);
            cpu_put(&dx[i], dy[i] * d, c->acc);
        }
        break;
    default: // silu
        for (int64_t i = 0; i < n; i++) {
            real s = cpu_sigmoid(x[i]);
            cpu_put(&dx[i], dy[i] * s * (1 + x[i] * (1 - s)), c->acc);
        }
        break;
    }
    return 0;
}

// () -> every element attrs scale (a gradient seed, or zeros where no gradient flows).
int CPU_KERNEL(fill)(kctx *c) {
    real *y = cpu_r(&c->out[0]), v = (real)c->a->f[PLAN_AF_SCALE];
    int64_t n = cpu_numel(&c->out[0]);
    for (int64_t i = 0; i < n; i++) cpu_put(&y[i], v, c->acc);
    return 0;
}

// x -> y, y's shape a suffix of x's: the sum over x's leading dimensions.
int CPU_KERNEL(reduce_sum)(kctx *c) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    if (map_given(c->a)) { // y is x with axes left out (attrs perm): the gradient of a broadcast
        int64_t st[PLAN_MAX_RANK];
        if (cpu_map(c, x, "input 0", y, "output 0", st)) return -1;
        const real *X = cpu_r(x);
        real *Y = cpu_r(y);
        cpu_clear(c, 0);
        CPU_FOR_MAPPED(x, st, i, k, Y[k] += X[i]);
        return 0;
    }
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

/* ---- dropout (and dropout_grad, the same mask on dy) ---- */

// The zigzag order of dropout's input x (attrs i[END] chunks along dimension i[AXIS]) into *z,
// *zd; *z = 0 in the natural order. -1 (with a message) where the chunks do not cut it.
static int dropout_zigzag(kctx *c, const rt_view *x, uint32_t *z, int *zd) {
    int64_t n = c->a->i[PLAN_AI_END], d = c->a->i[PLAN_AI_AXIS];
    *z = 0, *zd = 0;
    if (n == 0) return 0;
    if (d < 0 || d >= x->rank || n < 2 || n % 2 || n > UINT16_MAX || x->full[d] % n)
        return cpu_fail(c, "zigzag of %lld chunks along dimension %lld does not cut input 0 (%s of %s)", (long long)n,
                        (long long)d, CPU_SHAPE(x), cpu_shape_str(x->full, x->rank).s);
    *z = (uint32_t)n, *zd = (int)d;
    return 0;
}

// x -> x kept with probability 1 - p and scaled by 1 / (1 - p), per logical element index.
int CPU_KERNEL(dropout)(kctx *c) {
    const rt_view *x = &c->in[0];
    double p = c->a->f[PLAN_AF_P];
    if (!(p >= 0 && p < 1)) return cpu_fail(c, "p = %g; the drop probability must be in [0, 1)", p);
    if (cpu_expect(c, "output 0", &c->out[0], cpu_shape_of(x))) return -1;
    uint32_t z;
    int zd;
    if (dropout_zigzag(c, x, &z, &zd)) return -1;
    const rt_kernel *k = c->k;
    uint64_t key = rt_key(rt_key(rt_key(rt_key(k->seed, (uint64_t)c->a->i[PLAN_AI_SEED]), k->step), k->mb), k->layer);
    int r = x->rank;
    int64_t fs[PLAN_MAX_RANK], idx[PLAN_MAX_RANK] = {0};
    for (int i = r - 1; i >= 0; i--) fs[i] = i == r - 1 ? 1 : fs[i + 1] * x->full[i + 1];
    int64_t n = cpu_numel(x), run = r ? x->shape[r - 1] : 1, lo = r ? x->start[r - 1] : 0;
    bool zlast = z && zd == r - 1; // the zigzag along the run: each element's own position
    const real *X = cpu_r(x);
    real *Y = cpu_r(&c->out[0]), keep = (real)(1 / (1 - p));
    // One run along the last dimension at a time; idx counts the others.
    for (int64_t done = 0; run > 0 && done < n; done += run) {
        uint64_t g = zlast ? 0 : (uint64_t)lo;
        for (int i = 0; i < r - 1; i++) {
            int64_t at = x->start[i] + idx[i];
            g += (uint64_t)((z && zd == i ? plan_zigzag_pos(at, x->full[i], z) : at) * fs[i]);
        }
        for (int64_t j = 0; j < run; j++) {
            uint64_t e = g + (uint64_t)(zlast ? plan_zigzag_pos(lo + j, x->full[r - 1], z) : j);
            bool kept = rt_uniform(rt_key(key, e)) >= p;
            cpu_put(&Y[done + j], kept ? X[done + j] * keep : 0, c->acc);
        }
        for (int i = r - 2; i >= 0 && ++idx[i] == x->shape[i]; i--) idx[i] = 0;
    }
    return 0;
}
