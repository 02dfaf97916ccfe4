/*
 * cpu/reduce.c: the CPU backend's broadcasting and reducing operators of imported models. Each
 * relates a larger operand to a smaller one through the axis map in attrs perm (runtime/ops.def's
 * last section; cpu_map_strides):
 *   sum, mean, max    x (big) -> y (small): over the axes y lacks. mean divides by the count
 *                     of the LOGICAL tensor (the views' full sizes), so pieces of a split reduced
 *                     axis are partial sums that add up to the whole mean; max's reduced axes are
 *                     never split (the compiler marks them).
 *   expand            x (small) -> y (big): x repeated over the axes it lacks.
 *   max_grad          (dy small, x big) -> dx: dy at the first maximum of each reduced group, 0
 *                     elsewhere (the maximum is recomputed).
 *   sub, div          (a big, b small) -> a - b, a / b with b broadcast.
 *   masked_fill       (x big, mask small) -> attrs scale where mask != 0, else x.
 *   ne                int32 x -> 1 where x != attrs scale, else 0 (float).
 *   one_hot           int32 ids [*b] -> [*b, c]: 1 where the class index equals the id; a piece
 *                     of the class axis (its view's start) holds the classes from its start on.
 *   topk              x [*b, n] -> the k largest of each row, largest first (ties: the lower
 *                     index first), and their int32 indices; topk_grad scatters dy back.
 *   gather            (x, idx) -> y: y[.., i, ..] = x[.., idx[.., i, ..], ..] along attrs axis
 *                     (torch.gather; idx like y, the other axes x's); index_select: y = x with
 *                     its axis's rows idx (rank 1). Their gradients add dy back at those rows.
 *                     The axis never splits; the others split alike in x, idx and y.
 * They store through cpu_put (or, summing, zero first with cpu_clear).
 */
#include "cpu.h"

// sum, mean, max: x -> y over the axes y lacks.
int CPU_KERNEL(reduce)(kctx *c) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    int64_t st[PLAN_MAX_RANK];
    if (cpu_map(c, x, "input 0", y, "output 0", st)) return -1;
    const real *X = cpu_r(x);
    real *Y = cpu_r(y);
    int64_t ny = cpu_numel(y);
    double *acc = malloc((size_t)(ny > 0 ? ny : 1) * sizeof(double));
    if (!acc) return cpu_fail(c, "out of memory");
    bool is_max = c->k->op == CPU_OP_MAX;
    for (int64_t k = 0; k < ny; k++) acc[k] = is_max ? -INFINITY : 0;
    if (is_max) CPU_FOR_MAPPED(x, st, i, k, if (X[i] > acc[k]) acc[k] = X[i]);
    else CPU_FOR_MAPPED(x, st, i, k, acc[k] += X[i]);
    double count = 1; // mean: the logical size of the reduced axes (a kept axis has a stride >= 1)
    for (int i = 0; c->k->op == CPU_OP_MEAN && i < x->rank; i++)
        if (st[i] == 0) count *= (double)x->full[i];
    for (int64_t k = 0; k < ny; k++) cpu_put(&Y[k], (real)(acc[k] / count), c->acc);
    free(acc);
    return 0;
}

// x (small) -> y (big): x repeated over the axes it lacks.
int CPU_KERNEL(expand)(kctx *c) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    int64_t st[PLAN_MAX_RANK];
    if (cpu_map(c, y, "output 0", x, "input 0", st)) return -1;
    const real *X = cpu_r(x);
    real *Y = cpu_r(y);
    CPU_FOR_MAPPED(y, st, i, k, cpu_put(&Y[i], X[k], c->acc));
    return 0;
}

// (dy small, x big) -> dx big: dy at the first maximum of x in each reduced group.
int CPU_KERNEL(max_grad)(kctx *c) {
    const rt_view *dy = &c->in[0], *x = &c->in[1], *dx = &c->out[0];
    int64_t st[PLAN_MAX_RANK];
    if (cpu_like(c, "output 0", dx, x) || cpu_map(c, x, "input 1", dy, "input 0", st)) return -1;
    int64_t ny = cpu_numel(dy);
    int64_t *arg = malloc((size_t)(ny > 0 ? ny : 1) * sizeof(int64_t));
    if (!arg) return cpu_fail(c, "out of memory");
    const real *X = cpu_r(x), *DY = cpu_r(dy);
    real *DX = cpu_r(dx);
    for (int64_t k = 0; k < ny; k++) arg[k] = -1;
    CPU_FOR_MAPPED(x, st, i, k, if (arg[k] < 0 || X[i] > X[arg[k]]) arg[k] = i);
    cpu_clear(c, 0);
    for (int64_t k = 0; k < ny; k++)
        if (arg[k] >= 0) DX[arg[k]] += DY[k];
    free(arg);
    return 0;
}

// (x big, mask small) -> attrs scale where mask != 0, else x.
int CPU_KERNEL(masked_fill)(kctx *c) {
    const rt_view *x = &c->in[0], *m = &c->in[1];
    int64_t st[PLAN_MAX_RANK];
    if (cpu_like(c, "output 0", &c->out[0], x) || cpu_map(c, x, "input 0", m, "input 1", st)) return -1;
    const real *X = cpu_r(x), *M = cpu_r(m);
    real *Y = cpu_r(&c->out[0]), v = (real)c->a->f[PLAN_AF_SCALE];
    CPU_FOR_MAPPED(x, st, i, k, cpu_put(&Y[i], M[k] != 0 ? v : X[i], c->acc));
    return 0;
}

// (a big, b small) -> a - b or a / b.
int CPU_KERNEL(sub_div)(kctx *c) {
    const rt_view *a = &c->in[0], *b = &c->in[1];
    int64_t st[PLAN_MAX_RANK];
    if (cpu_like(c, "output 0", &c->out[0], a) || cpu_map(c, a, "input 0", b, "input 1", st)) return -1;
    const real *A = cpu_r(a), *B = cpu_r(b);
    real *Y = cpu_r(&c->out[0]);
    if (c->k->op == CPU_OP_SUB) CPU_FOR_MAPPED(a, st, i, k, cpu_put(&Y[i], A[i] - B[k], c->acc));
    else CPU_FOR_MAPPED(a, st, i, k, cpu_put(&Y[i], A[i] / B[k], c->acc));
    return 0;
}

// int32 x -> 1 where x != attrs scale, else 0.
int CPU_KERNEL(ne)(kctx *c) {
    const rt_view *x = &c->in[0];
    if (cpu_like(c, "output 0", &c->out[0], x)) return -1;
    const int32_t *X = cpu_i(x);
    real *Y = cpu_r(&c->out[0]);
    double v = c->a->f[PLAN_AF_SCALE];
    int64_t n = cpu_numel(x);
    for (int64_t i = 0; i < n; i++) cpu_put(&Y[i], (double)X[i] != v ? 1 : 0, c->acc);
    return 0;
}

// int32 ids [*b] -> [*b, c]: 1 at the id's class.
int CPU_KERNEL(one_hot)(kctx *c) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    if (y->rank != x->rank + 1) return cpu_fail(c, "output 0 is %s; it must be input 0's shape %s and a class axis", CPU_SHAPE(y), CPU_SHAPE(x));
    kshape want = cpu_shape_of(x);
    want.d[want.rank++] = cpu_dim(y, -1);
    if (cpu_expect(c, "output 0", y, want)) return -1;
    int64_t n = cpu_numel(x), nc = cpu_dim(y, -1), lo = y->start[y->rank - 1], classes = y->full[y->rank - 1];
    const int32_t *X = cpu_i(x);
    real *Y = cpu_r(y);
    for (int64_t i = 0; i < n; i++) {
        if (X[i] < 0 || X[i] >= classes)
            return cpu_fail(c, "input 0 holds id %d at element %lld, outside [0, %lld)", X[i], (long long)i, (long long)classes);
        for (int64_t j = 0; j < nc; j++) cpu_put(&Y[i * nc + j], X[i] == lo + j ? 1 : 0, c->acc);
    }
    return 0;
}

// x [*b, n] -> values [*b, k] (largest first; ties: the lower index first) and int32 indices.
int CPU_KERNEL(topk)(kctx *c) {
    const rt_view *x = &c->in[0], *v = &c->out[0], *ix = &c->out[1];
    if (x->rank < 1 || v->rank != x->rank) return cpu_fail(c, "output 0 is %s; it must be input 0's shape %s with the last dimension k", CPU_SHAPE(v), CPU_SHAPE(x));
    kshape want = cpu_shape_of(x);
    want.d[want.rank - 1] = cpu_dim(v, -1);
    if (cpu_expect(c, "output 0", v, want) || cpu_expect(c, "output 1", ix, want)) return -1;
    int64_t n = cpu_dim(x, -1), k = cpu_dim(v, -1), rows = n ? cpu_numel(x) / n : 0;
    if (k > n) return cpu_fail(c, "k = %lld is more than the row's %lld elements", (long long)k, (long long)n);
    const real *X = cpu_r(x);
    real *V = cpu_r(v);
    int32_t *ID = (int32_t *)ix->data;
    for (int64_t r = 0; r < rows; r++) {
        const real *row = X + r * n;
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            for (int64_t e = 0; e < n; e++) {
                bool taken = false;
                for (int64_t q = 0; q < j && !taken; q++) taken = ID[r * k + q] == e;
                if (!taken && (best < 0 || row[e] > row[best])) best = e;
            }
            ID[r * k + j] = (int32_t)best;
            cpu_put(&V[r * k + j], row[best], c->acc);
        }
    }
    return 0;
}

// (dy [*b, k], indices [*b, k]) -> dx [*b, n]: dy scattered to the indices, 0 elsewhere.
int CPU_KERNEL(topk_grad)(kctx *c) {
    const rt_view *dy = &c->in[0], *ix = &c->in[1], *dx = &c->out[0];
    if (cpu_like(c, "input 1", ix, dy) || dx->rank != dy->rank) return cpu_fail(c, "its operands do not fit [*b,k], [*b,k] -> [*b,n]");
    int64_t n = cpu_dim(dx, -1), k = cpu_dim(dy, -1), rows = k ? cpu_numel(dy) / k : 0;
    const real *DY = cpu_r(dy);
    const int32_t *ID = cpu_i(ix);
    real *DX = cpu_r(dx);
    cpu_clear(c, 0);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) {
            int32_t e = ID[r * k + j];
            if (e < 0 || e >= n) return cpu_fail(c, "input 1 holds index %d, outside [0, %lld)", e, (long long)n);
            DX[r * n + e] += DY[r * k + j];
        }
    return 0;
}

/* ---- gather and index_select ---- */

// Row-major strides of v.
static void strides_of(const rt_view *v, int64_t *st) {
    int64_t s = 1;
    for (int i = v->rank - 1; i >= 0; i--) st[i] = s, s *= v->shape[i];
}

// Visits every element of `over` (y for the forward, dy for the gradient): fn(y index, x index),
// x's index that of the same coordinates with the axis coordinate read from idx (gather: idx
// like y; index_select: idx[coordinate]). Fails on an index outside x's axis.
static int gather_walk(kctx *c, const rt_view *x, const rt_view *idx, const rt_view *y, bool sel, real *X, real *Y, bool scatter) {
    int axis = (int)c->a->i[PLAN_AI_AXIS];
    if (axis < 0 || axis >= x->rank || y->rank != x->rank) return cpu_fail(c, "axis %d does not fit %s", axis, CPU_SHAPE(x));
    for (int i = 0; i < x->rank; i++)
        if (i != axis && y->shape[i] != x->shape[i]) return cpu_fail(c, "%s and %s differ off axis %d", CPU_SHAPE(y), CPU_SHAPE(x), axis);
    if (sel ? idx->rank != 1 || idx->shape[0] != y->shape[axis] : !cpu_same_shape(idx, y))
        return cpu_fail(c, "input 1 is %s; it does not fit %s", CPU_SHAPE(idx), CPU_SHAPE(y));
    int64_t xs[PLAN_MAX_RANK], ys[PLAN_MAX_RANK], n = cpu_numel(y), rows = x->shape[axis];
    strides_of(x, xs), strides_of(y, ys);
    const int32_t *ID = cpu_i(idx);
    for (int64_t e = 0; e < n; e++) {
        int64_t rest = e, xi = 0, a = 0;
        for (int i = 0; i < y->rank; i++) {
            int64_t coord = rest / ys[i];
            rest %= ys[i];
            if (i == axis) a = coord;
            else xi += coord * xs[i];
        }
        int64_t r = sel ? ID[a] : ID[e];
        if (r < 0 || r >= rows) return cpu_fail(c, "input 1 holds index %lld, outside [0, %lld)", (long long)r, (long long)rows);
        xi += r * xs[axis];
        if (scatter) X[xi] += Y[e];
        else cpu_put(&Y[e], X[xi], c->acc);
    }
    return 0;
}

// (x, idx) -> y: gather (idx like y) or index_select (idx a list of rows of x's axis).
int CPU_KERNEL(gather)(kctx *c) {
    bool sel = c->k->op == CPU_OP_INDEX_SELECT;
    return gather_walk(c, &c->in[0], &c->in[1], &c->out[0], sel, cpu_r(&c->in[0]), cpu_r(&c->out[0]), false);
}

// (dy, idx) -> dx: dy added back at the rows it was gathered from.
int CPU_KERNEL(gather_grad)(kctx *c) {
    bool sel = c->k->op == CPU_OP_INDEX_SELECT_GRAD;
    cpu_clear(c, 0);
    return gather_walk(c, &c->out[0], &c->in[1], &c->in[0], sel, cpu_r(&c->out[0]), cpu_r(&c->in[0]), true);
}
