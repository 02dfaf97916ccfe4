/*
 * cuda/ops_ext.c: the CUDA backend's operators for imported models (runtime/ops.def's last
 * section), with the CPU kernels' semantics (runtime/cpu/unary.c, runtime/cpu/reduce.c): the
 * unary math and its gradients, broadcasts and reductions through the axis map in attrs perm
 * (sub, div, masked_fill, expand, sum, mean, max, max_grad, and add, mul and reduce_sum when
 * they carry a map), ne and one_hot. ops.c's dispatch table sends these operators here after its
 * common checks (arity, views, dtypes); this file checks how the views relate, with the CPU
 * kernels' messages, and launches kernels_ext.cu.
 *
 * Known limits: written without a GPU at hand; tests/gpu_kernels.c has a case for each against
 * the CPU kernels (the gpu suite), which has not yet run on a GPU.
 */
#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

enum {
#define OP(E, name, imin, imax, nout, ann, flags) XOP_##E,
#include "../ops.def"
#undef OP
    XOP_COUNT
};

static int xfail(char *err, size_t err_n, const char *name, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int xfail(char *err, size_t err_n, const char *name, const char *fmt, ...) {
    if (!err || !err_n) return -1;
    int k = snprintf(err, err_n, "%s: ", name);
    if (k >= 0 && (size_t)k < err_n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + k, err_n - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int64_t vnumel(const rt_view *v) {
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= v->shape[i];
    return n;
}

static bool same_shape(const rt_view *a, const rt_view *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

// The map of small into big (cpu_map_strides' rule): 0, or -1 with a message.
static int build_map(const rt_kernel *k, const rt_view *big, const rt_view *small, ck_map *m, const char *name, const char *what,
                     char *err, size_t err_n) {
    bool given = false;
    for (int i = 0; i < PLAN_MAX_RANK; i++) given |= k->attrs.perm[i] != 0;
    m->rank = big->rank;
    for (int i = 0; i < big->rank; i++) m->shape[i] = big->shape[i], m->sst[i] = 0;
    int64_t s = 1;
    int last = big->rank;
    bool ok = small->rank <= big->rank;
    for (int j = small->rank - 1; ok && j >= 0; j--) {
        int ax = given ? k->attrs.perm[j] - 1 : big->rank - small->rank + j;
        ok = ax >= 0 && ax < last && big->shape[ax] == small->shape[j];
        if (ok) m->sst[ax] = s, s *= small->shape[j], last = ax;
    }
    if (!ok) return xfail(err, err_n, name, "%s does not fit the larger operand with axes left out (as attrs perm maps them)", what);
    return 0;
}

static int unary(cudaStream_t st, const rt_kernel *k, const char *name, int op, bool grad, char *err, size_t err_n) {
    const rt_view *x = &k->in[grad ? 1 : 0], *y = &k->out[0], *dy = grad ? &k->in[0] : NULL;
    if (!same_shape(x, y) || (dy && !same_shape(dy, y))) return xfail(err, err_n, name, "its operands must be the same shape");
    CUDA_CHECK(ck_unary(st, op, grad, vnumel(y), y->data, y->dtype, x->data, x->dtype, dy ? dy->data : NULL, dy ? dy->dtype : 0,
                        k->attrs.f[PLAN_AF_SCALE], k->accumulate));
    return 0;
}

// add, mul, sub, div, masked_fill: (a big, b small) -> y like a; expand: (x small) -> y big.
static int mapped(cudaStream_t st, const rt_kernel *k, const char *name, int op, char *err, size_t err_n) {
    bool expand = op == CK_MAP_EXPAND;
    const rt_view *y = &k->out[0], *a = expand ? NULL : &k->in[0], *b = &k->in[expand ? 0 : 1];
    if (a && !same_shape(a, y)) return xfail(err, err_n, name, "output 0 must have input 0's shape");
    ck_map m;
    if (build_map(k, y, b, &m, name, expand ? "input 0" : "input 1", err, err_n)) return -1;
    CUDA_CHECK(ck_mapped(st, op, &m, y->data, y->dtype, a ? a->data : NULL, a ? a->dtype : 0, a ? a->once : true, b->data, b->dtype,
                         b->once, (float)k->attrs.f[PLAN_AF_SCALE], k->accumulate));
    return 0;
}

// sum, mean, max, reduce_sum with a map: x big -> y small; mean over the logical count.
static int reduce(cudaStream_t st, const rt_kernel *k, const char *name, bool is_max, bool mean, char *err, size_t err_n) {
    const rt_view *x = &k->in[0], *y = &k->out[0];
    ck_map m;
    if (build_map(k, x, y, &m, name, "output 0", err, err_n)) return -1;
    double count = 1;
    for (int i = 0; mean && i < x->rank; i++)
        if (m.sst[i] == 0) count *= (double)x->full[i];
    CUDA_CHECK(ck_reduce_map(st, is_max, &m, vnumel(y), x->data, x->dtype, y->data, y->dtype, count, k->accumulate));
    return 0;
}

static int max_grad(cudaStream_t st, const rt_kernel *k, const char *name, char *err, size_t err_n) {
    const rt_view *dy = &k->in[0], *x = &k->in[1], *dx = &k->out[0];
    if (!same_shape(x, dx)) return xfail(err, err_n, name, "output 0 must have input 1's shape");
    ck_map m;
    if (build_map(k, x, dy, &m, name, "input 0", err, err_n)) return -1;
    CUDA_CHECK(ck_max_grad(st, &m, vnumel(dy), dy->data, dy->dtype, x->data, x->dtype, dx->data, dx->dtype, k->accumulate));
    return 0;
}

static int ids_ops(cu_state *cu, cudaStream_t st, const rt_kernel *k, const char *name, char *err, size_t err_n) {
    const rt_view *x = &k->in[0], *y = &k->out[0];
    if (k->op == XOP_NE) {
        if (!same_shape(x, y)) return xfail(err, err_n, name, "output 0 must have input 0's shape");
        CUDA_CHECK(ck_ne(st, vnumel(x), x->data, k->attrs.f[PLAN_AF_SCALE], y->data, y->dtype, k->accumulate));
        return 0;
    }
    bool ok = y->rank == x->rank + 1;
    for (int i = 0; ok && i < x->rank; i++) ok = y->shape[i] == x->shape[i];
    if (!ok) return xfail(err, err_n, name, "output 0 must be input 0's shape and a class axis");
    int last = y->rank - 1;
    CUDA_CHECK(ck_one_hot(st, vnumel(x), y->shape[last], y->start[last], y->full[last], x->data, y->data, y->dtype, k->accumulate, cu->flag));
    return 0;
}

// topk: x [*b, n] -> values, indices [*b, k]; topk_grad: (dy, indices) -> dx [*b, n].
static int topk(cu_state *cu, cudaStream_t st, const rt_kernel *k, const char *name, char *err, size_t err_n) {
    bool grad = k->op == XOP_TOPK_GRAD;
    const rt_view *big = grad ? &k->out[0] : &k->in[0], *small = grad ? &k->in[0] : &k->out[0];
    const rt_view *idx = grad ? &k->in[1] : &k->out[1];
    bool ok = big->rank >= 1 && small->rank == big->rank && same_shape(small, idx);
    for (int i = 0; ok && i + 1 < big->rank; i++) ok = big->shape[i] == small->shape[i];
    if (!ok) return xfail(err, err_n, name, "its operands do not fit [*b,n] and [*b,k]");
    int64_t n = big->shape[big->rank - 1], kk = small->shape[small->rank - 1], rows = n ? vnumel(big) / n : 0;
    if (kk > n) return xfail(err, err_n, name, "k = %lld is more than the row's %lld elements", (long long)kk, (long long)n);
    if (grad)
        CUDA_CHECK(ck_topk_grad(st, rows, n, kk, small->data, small->dtype, idx->data, big->data, big->dtype, k->accumulate, cu->flag));
    else
        CUDA_CHECK(ck_topk(st, rows, n, kk, big->data, big->dtype, small->data, small->dtype, idx->data, k->accumulate));
    return 0;
}

int cu_attn_dropout(const rt_kernel *k, const rt_view *q, const rt_view *kk, ck_attn *a) {
    a->p = k->attrs.f[PLAN_AF_P];
    if (!(a->p >= 0 && a->p < 1)) return -1;
    a->key = rt_key(rt_key(rt_key(rt_key(k->seed, (uint64_t)k->attrs.i[PLAN_AI_SEED]), k->step), k->mb), k->layer);
    a->b0 = q->start[0], a->s0 = q->start[1], a->t0 = kk->start[1];
    a->heads = q->full[2], a->queries = q->full[1], a->keys = kk->full[1];
    return 0;
}

// The FlashAttention form (attention_flash.cu) of the operator k, geometry a.
static int flash(cudaStream_t st, const rt_kernel *k, const ck_attn *a, uint32_t qi, char *err, size_t err_n) {
    if (!qi) {
        CUDA_CHECK(ck_flash_attention(st, a, k->out[0].data, k->out[0].dtype, k->accumulate));
        return 0;
    }
    bool bias_grad = k->op == XOP_ATTENTION_GRAD_BIAS;
    int64_t nb = bias_grad ? vnumel(&k->out[0]) : 0;
    void *scratch = NULL;
    CU_TRY(cu_scratch(st, ck_flash_scratch_bytes(a, nb), &scratch, err, err_n));
    cudaError_t e = bias_grad ? ck_flash_attention_grad(st, a, scratch, k->in[0].data, NULL, NULL, NULL, 0, k->out[0].data, nb, k->accumulate)
                              : ck_flash_attention_grad(st, a, scratch, k->in[0].data, k->out[0].data, k->out[1].data, k->out[2].data,
                                                        k->out[0].dtype, NULL, 0, k->accumulate);
    cu_scratch_free(st, scratch);
    CUDA_CHECK(e);
    return 0;
}

// attention, attention_grad and attention_grad_bias in their general form (cpu/attention.c).
static int attention(cudaStream_t st, const rt_kernel *k, const char *name, char *err, size_t err_n) {
    uint32_t qi = k->op == XOP_ATTENTION ? 0 : 1;
    const rt_view *q = &k->in[qi], *kk = &k->in[qi + 1], *v = &k->in[qi + 2], *bias = qi + 3 < k->nin ? &k->in[qi + 3] : NULL;
    if (q->rank != 4 || kk->rank != 4 || v->rank != 4) return xfail(err, err_n, name, "q, k and v must be [b,s,n,d], [b,t,m,d], [b,t,m,e]");
    ck_attn a = {.b = q->shape[0], .s = q->shape[1], .n = q->shape[2], .d = q->shape[3], .t = kk->shape[1], .m = kk->shape[2],
                 .e = v->shape[3], .q_head0 = q->start[2], .k_head0 = kk->start[2], .q = q->data, .k = kk->data, .v = v->data,
                 .dt = q->dtype, .causal = k->attrs.i[PLAN_AI_CAUSAL] != 0};
    if (kk->full[2] <= 0 || q->full[2] % kk->full[2] || kk->shape[0] != a.b || v->shape[0] != a.b || v->shape[1] != a.t ||
        v->shape[2] != a.m || kk->shape[3] != a.d || kk->dtype != q->dtype || v->dtype != q->dtype)
        return xfail(err, err_n, name, "q, k and v do not fit [b,s,n,d], [b,t,m,d], [b,t,m,e] with n a multiple of m, of one dtype");
    a.group = q->full[2] / kk->full[2];
    if (cu_attn_dropout(k, q, kk, &a)) return xfail(err, err_n, name, "the dropout probability must be in [0, 1)");
    double sc = k->attrs.f[PLAN_AF_SCALE];
    a.scale = (float)(sc != 0 ? sc : 1 / sqrt((double)(a.d > 0 ? a.d : 1)));
    if (bias) {
        rt_view scores = {.rank = 4, .shape = {a.b, a.n, a.s, a.t}};
        ck_map m;
        if (build_map(k, &scores, bias, &m, name, "the bias", err, err_n)) return -1;
        for (int i = 0; i < 4; i++) a.bst[i] = m.sst[i];
        a.bias = bias->data, a.bdt = bias->dtype;
    }
    if (k->attrs.i[PLAN_AI_MODE] == PLAN_ATTN_FLASH) return flash(st, k, &a, qi, err, err_n);
    size_t rows = (size_t)(a.b * a.n * a.s * a.t);
    float *scratch = NULL;
    CU_TRY(cu_scratch(st, (rows ? rows : 1) * sizeof(float) * (qi ? 2 : 1), (void **)&scratch, err, err_n));
    cudaError_t e;
    if (!qi) e = ck_attention(st, &a, scratch, k->out[0].data, k->out[0].dtype, k->accumulate);
    else if (k->op == XOP_ATTENTION_GRAD)
        e = ck_attention_grad(st, &a, scratch, k->in[0].data, k->out[0].data, k->out[1].data, k->out[2].data, k->out[0].dtype, NULL, 0,
                              k->accumulate);
    else e = ck_attention_grad(st, &a, scratch, k->in[0].data, NULL, NULL, NULL, 0, k->out[0].data, vnumel(&k->out[0]), k->accumulate);
    cu_scratch_free(st, scratch);
    CUDA_CHECK(e);
    return 0;
}

// gather, index_select and their gradients (cpu/reduce.c's gather_walk).
static int gather(cu_state *cu, cudaStream_t st, const rt_kernel *k, const char *name, char *err, size_t err_n) {
    bool grad = k->op == XOP_GATHER_GRAD || k->op == XOP_INDEX_SELECT_GRAD, sel = k->op == XOP_INDEX_SELECT || k->op == XOP_INDEX_SELECT_GRAD;
    const rt_view *x = grad ? &k->out[0] : &k->in[0], *idx = &k->in[1], *y = grad ? &k->in[0] : &k->out[0];
    ck_gather_args g = {.rank = x->rank, .axis = (int)k->attrs.i[PLAN_AI_AXIS], .sel = sel, .n = vnumel(y), .idx = idx->data};
    bool ok = g.axis >= 0 && g.axis < x->rank && y->rank == x->rank;
    for (int i = 0; ok && i < x->rank; i++) ok = i == g.axis || y->shape[i] == x->shape[i];
    ok = ok && (sel ? idx->rank == 1 && idx->shape[0] == y->shape[g.axis] : same_shape(idx, y));
    if (!ok) return xfail(err, err_n, name, "its operands do not fit x, idx and the gathered shape along axis %d", g.axis);
    g.rows = x->shape[g.axis];
    int64_t sx = 1, sy = 1;
    for (int i = x->rank - 1; i >= 0; i--) g.xs[i] = sx, g.ys[i] = sy, sx *= x->shape[i], sy *= y->shape[i];
    if (!grad) {
        CUDA_CHECK(ck_gather(st, &g, x->data, x->dtype, y->data, y->dtype, k->accumulate, cu->flag));
        return 0;
    }
    if (x->dtype != 0) return xfail(err, err_n, name, "the gradient adds with f32 atomics; output 0 is not f32");
    CUDA_CHECK(ck_gather_grad(st, &g, y->data, y->dtype, x->data, vnumel(x), k->accumulate, cu->flag));
    return 0;
}

int cu_ext_op(cu_state *cu, cudaStream_t st, const rt_kernel *k, const char *name, char *err, size_t err_n) {
    static const int un[][2] = {{XOP_SIGMOID, CK_UN_SIGMOID}, {XOP_TANH, CK_UN_TANH}, {XOP_EXP, CK_UN_EXP}, {XOP_LOG, CK_UN_LOG},
                                {XOP_GELU_ERF, CK_UN_GELU_ERF}, {XOP_RSQRT, CK_UN_RSQRT}, {XOP_SQRT, CK_UN_SQRT}, {XOP_SIN, CK_UN_SIN},
                                {XOP_COS, CK_UN_COS}, {XOP_POW, CK_UN_POW}, {XOP_ERF, CK_UN_ERF}};
    static const int ungrad[] = {XOP_SIGMOID_GRAD, XOP_TANH_GRAD, XOP_EXP_GRAD, XOP_LOG_GRAD, XOP_GELU_ERF_GRAD,
                                 XOP_RSQRT_GRAD, XOP_SQRT_GRAD, XOP_SIN_GRAD, XOP_COS_GRAD, XOP_POW_GRAD, XOP_ERF_GRAD};
    for (int i = 0; i < 11; i++) {
        if ((int)k->op == un[i][0]) return unary(st, k, name, un[i][1], false, err, err_n);
        if ((int)k->op == ungrad[i]) return unary(st, k, name, un[i][1], true, err, err_n);
    }
    switch (k->op) {
    case XOP_ADD: return mapped(st, k, name, CK_MAP_ADD, err, err_n);
    case XOP_MUL: return mapped(st, k, name, CK_MAP_MUL, err, err_n);
    case XOP_SUB: return mapped(st, k, name, CK_MAP_SUB, err, err_n);
    case XOP_DIV: return mapped(st, k, name, CK_MAP_DIV, err, err_n);
    case XOP_MASKED_FILL: return mapped(st, k, name, CK_MAP_FILL, err, err_n);
    case XOP_EXPAND: return mapped(st, k, name, CK_MAP_EXPAND, err, err_n);
    case XOP_SUM: case XOP_REDUCE_SUM: return reduce(st, k, name, false, false, err, err_n);
    case XOP_MEAN: return reduce(st, k, name, false, true, err, err_n);
    case XOP_MAX: return reduce(st, k, name, true, false, err, err_n);
    case XOP_MAX_GRAD: return max_grad(st, k, name, err, err_n);
    case XOP_NE: case XOP_ONE_HOT: return ids_ops(cu, st, k, name, err, err_n);
    case XOP_TOPK: case XOP_TOPK_GRAD: return topk(cu, st, k, name, err, err_n);
    case XOP_ATTENTION: case XOP_ATTENTION_GRAD: case XOP_ATTENTION_GRAD_BIAS: return attention(st, k, name, err, err_n);
    case XOP_GATHER: case XOP_INDEX_SELECT: case XOP_GATHER_GRAD: case XOP_INDEX_SELECT_GRAD: return gather(cu, st, k, name, err, err_n);
    default: return xfail(err, err_n, name, "not an operator of cuda/ops_ext.c");
    }
}
