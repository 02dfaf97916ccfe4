/*
 * cpu/movement.c: the CPU backend's data movement: concat, split, slice, slice_grad (the
 * slice added back into a zeroed whole), reshape and transpose. These keep their input's dtype
 * (real or int32) and move elements; accumulating, they add.
 */
#include "cpu.h"

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

int CPU_KERNEL(concat)(kctx *c) {
    int axis;
    if (join_check(c, &c->out[0], "output 0", c->in, c->nin, "input", &axis)) return -1;
    join_move(c, &c->out[0], c->in, c->nin, axis, true);
    return 0;
}

int CPU_KERNEL(split)(kctx *c) {
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

int CPU_KERNEL(slice)(kctx *c) {
    int axis;
    if (slice_check(c, &c->in[0], "input 0", &c->out[0], "output 0", &axis)) return -1;
    slice_move(c, &c->in[0], &c->out[0], axis, false);
    return 0;
}

// dy (the slice's gradient) -> dx: dy at [start, end) along axis, zeros elsewhere.
int CPU_KERNEL(slice_grad)(kctx *c) {
    int axis;
    const rt_view *dx = &c->out[0];
    if (slice_check(c, dx, "output 0", &c->in[0], "input 0", &axis)) return -1;
    if (!c->acc) memset(dx->data, 0, (size_t)cpu_numel(dx) * elem_bytes(dx->dtype));
    slice_move(c, dx, &c->in[0], axis, true);
    return 0;
}

// The same elements in the same order: a local piece of a reshape is the reshape of the local
// piece (the compiler splits only each group's major axis), so this is a copy.
int CPU_KERNEL(reshape)(kctx *c) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    if (cpu_numel(x) != cpu_numel(y))
        return cpu_fail(c, "output 0 is %s (%lld elements) but input 0 is %s (%lld)", CPU_SHAPE(y), (long long)cpu_numel(y),
                        CPU_SHAPE(x), (long long)cpu_numel(x));
    move(y->data, x->data, cpu_numel(x), 1, x->dtype, c->acc);
    return 0;
}

// Output dimension i is input dimension perm[i].
int CPU_KERNEL(transpose)(kctx *c) {
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
