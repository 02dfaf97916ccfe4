/*
 * cpu.h: what the CPU backend's kernel files share; private to runtime/cpu/. The backend's
 * contract with the rest of the runtime is in rt.h. The kernels live in one file per operator
 * family (matmul.c, elementwise.c, unary.c, reduce.c, norm.c, softmax.c, movement.c, loss.c, optim.c,
 * conv.c, attention.c, embedding.c; the list at the end of this header), dispatch.c maps operators to
 * them, and backend.c is the backend around them.
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
 * Precision. The kernels are written once over a `real` type and every kernel file is compiled
 * twice (meson.build): as it is (real is float: rt_cpu_kernel) and with RT_REAL_DOUBLE defined
 * (real is double: rt_cpu_kernel_f64, for the gradient checks). This header is included once per
 * translation unit, after that choice, so everything here that touches `real` comes out in the
 * precision of the file that includes it; the kernels carry the precision in their names
 * (CPU_KERNEL(conv2d) is rt_cpu_f32_conv2d or rt_cpu_f64_conv2d), so the two builds link
 * together. Row reductions (norm statistics, softmax sums, loss sums) accumulate in double in
 * both. GEMMs go through CBLAS (sgemm or dgemm), everything else is plain loops.
 *
 * A kernel is `int kernel(kctx *c)`: it checks that the shapes of its views fit the operator,
 * computes, and returns 0, or returns cpu_fail's -1 with a message naming the operator and the
 * operands. Dispatch has already checked the arity, the dtypes and each view on its own (rank,
 * sizes, start and full, data), so a kernel checks only how the views relate.
 *
 * Accumulation (rt_kernel.accumulate): element-wise kernels store through cpu_put (overwrite or
 * add), GEMM-based ones pass cpu_beta(c) as GEMM's beta, and kernels that scatter or sum into
 * their output first call cpu_clear (which zeroes it unless accumulating) and then add.
 */
#ifndef RT_CPU_H
#define RT_CPU_H

#include "../rt.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RT_REAL_DOUBLE
typedef double real;
#define CPU_KERNEL(name) rt_cpu_f64_##name
#define CPU_GEMM cblas_dgemm
#define R_EXP exp
#define R_LOG log
#define R_SQRT sqrt
#define R_LOG1P log1p
#else
typedef float real;
#define CPU_KERNEL(name) rt_cpu_f32_##name
#define CPU_GEMM cblas_sgemm
#define R_EXP expf
#define R_LOG logf
#define R_SQRT sqrtf
#define R_LOG1P log1pf
#endif

// The operators, in runtime/ops.def's order (the same codes as the compiler's pcc_op_kind).
enum {
#define OP(E, name, imin, imax, nout, ann, flags) CPU_OP_##E,
#include "../ops.def"
#undef OP
    CPU_OP_COUNT
};

// Plan dtypes the CPU backend knows (plan.h): 0 is `real`, 3 is int32.
enum { CPU_DT_REAL = 0, CPU_DT_I32 = 3 };

typedef struct kctx {
    const rt_kernel *k;
    const plan_attrs *a;        // &k->attrs
    const rt_view *in, *out;
    uint32_t nin, nout;
    const char *name;           // the operator's name, for messages
    bool acc;                   // add into the outputs
    char *err;
    size_t err_n;
} kctx;

/* ---- messages ---- */

// Writes "NAME: message" into c->err and returns -1.
static inline int cpu_fail(kctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int cpu_fail(kctx *c, const char *fmt, ...) {
    if (!c->err || c->err_n == 0) return -1;
    int k = snprintf(c->err, c->err_n, "%s: ", c->name);
    if (k >= 0 && (size_t)k < c->err_n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + k, c->err_n - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// A view's local sizes as text, "[64,32]" ("[]" for a scalar). Use as CPU_SHAPE(v): the
// returned struct lives until the end of the full expression (a printf argument).
typedef struct cpu_shape_text {
    char s[8 * 21 + 3];
} cpu_shape_text;
static inline cpu_shape_text cpu_shape_str(const int64_t *d, int rank) {
    cpu_shape_text t;
    size_t k = 0;
    t.s[k++] = '[';
    for (int i = 0; i < rank && i < PLAN_MAX_RANK; i++)
        k += (size_t)snprintf(t.s + k, sizeof t.s - k, "%s%lld", i ? "," : "", (long long)d[i]);
    snprintf(t.s + k, sizeof t.s - k, "]");
    return t;
}
#define CPU_SHAPE(v) (cpu_shape_str((v)->shape, (v)->rank).s)

/* ---- shapes ---- */

typedef struct kshape {
    int rank;
    int64_t d[PLAN_MAX_RANK];
} kshape;

static inline kshape cpu_shape_of(const rt_view *v) {
    kshape s = {.rank = v->rank};
    for (int i = 0; i < v->rank; i++) s.d[i] = v->shape[i];
    return s;
}

static inline bool cpu_shape_is(const rt_view *v, kshape s) {
    if (v->rank != s.rank) return false;
    for (int i = 0; i < s.rank; i++)
        if (v->shape[i] != s.d[i]) return false;
    return true;
}

// 0 if v has shape `want`; else fails with "WHAT is [..] but should be [..]".
static inline int cpu_expect(kctx *c, const char *what, const rt_view *v, kshape want) {
    if (cpu_shape_is(v, want)) return 0;
    return cpu_fail(c, "%s is %s but should be %s", what, CPU_SHAPE(v), cpu_shape_str(want.d, want.rank).s);
}

static inline bool cpu_same_shape(const rt_view *a, const rt_view *b) { return cpu_shape_is(a, cpu_shape_of(b)); }

static inline int64_t cpu_numel(const rt_view *v) {
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= v->shape[i];
    return n;
}

// The product of the sizes before the last `trail` dimensions (the rows of a [*b, ...] operand).
static inline int64_t cpu_lead(const rt_view *v, int trail) {
    int64_t n = 1;
    for (int i = 0; i < v->rank - trail; i++) n *= v->shape[i];
    return n;
}

// The size of dimension i counted from the end (-1: the last); 1 past the rank.
static inline int64_t cpu_dim(const rt_view *v, int i) { return v->rank + i >= 0 ? v->shape[v->rank + i] : 1; }

// The product of the logical sizes of v (the global count a loss divides by).
static inline int64_t cpu_full_numel(const rt_view *v) {
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= v->full[i];
    return n;
}

/* ---- data ---- */

static inline real *cpu_r(const rt_view *v) { return (real *)v->data; }
static inline const int32_t *cpu_i(const rt_view *v) { return (const int32_t *)v->data; }

static inline real cpu_beta(const kctx *c) { return c->acc ? (real)1 : (real)0; }

static inline void cpu_put(real *o, real v, bool acc) { *o = acc ? *o + v : v; }

// Zeroes output j unless the kernel accumulates.
static inline void cpu_clear(const kctx *c, uint32_t j) {
    if (!c->acc && c->out[j].data) memset(c->out[j].data, 0, (size_t)cpu_numel(&c->out[j]) * sizeof(real));
}

// C = alpha op(A) op(B) + beta C, row-major, through CBLAS. Sizes fit an int: dispatch refuses
// views of more than INT_MAX elements. An empty product (k = 0) scales C by beta.
static inline void cpu_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, real alpha, const real *a, int64_t lda,
                            const real *b, int64_t ldb, real beta, real *cc, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) cc[i * ldc + j] = beta == 0 ? 0 : beta * cc[i * ldc + j];
        return;
    }
    CPU_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha,
             a, (int)lda, b, (int)ldb, beta, cc, (int)ldc);
}

/* ---- helpers the kernel files share ---- */

// 0 if v has ref's shape; else fails naming `what` (and the shape it should have).
static inline int cpu_like(kctx *c, const char *what, const rt_view *v, const rt_view *ref) {
    return cpu_expect(c, what, v, cpu_shape_of(ref));
}

static inline kshape cpu_shape1(int64_t n) { return (kshape){.rank = 1, .d = {n}}; }

// Operators whose outputs and inputs all have input 0's shape.
static inline int cpu_same_shapes(kctx *c) {
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

// 0 if v has the rank `layout` describes; else fails with "WHAT is [..]; it must be LAYOUT".
static inline int cpu_rank_is(kctx *c, const char *what, const rt_view *v, int rank, const char *layout) {
    if (v->rank == rank) return 0;
    return cpu_fail(c, "%s is %s; it must be %s", what, CPU_SHAPE(v), layout);
}

// Scratch of n reals (malloc'd; the caller frees it), or NULL after failing with a message.
static inline real *cpu_scratch(kctx *c, int64_t n) {
    real *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(real));
    if (!p) cpu_fail(c, "out of memory (%lld bytes of scratch)", (long long)(n * (int64_t)sizeof(real)));
    return p;
}

static inline real cpu_sigmoid(real x) { return 1 / (1 + R_EXP(-x)); }

// The sum of exp(x - max) over a row of v (v >= 1), its maximum into *max (softmax, the losses).
static inline double cpu_sum_exp(const real *x, int64_t v, real *max) {
    real m = x[0];
    for (int64_t j = 1; j < v; j++) m = x[j] > m ? x[j] : m;
    double s = 0;
    for (int64_t j = 0; j < v; j++) s += R_EXP(x[j] - m);
    *max = m;
    return s;
}

// The axis map of a broadcast or a reduction (attrs perm, runtime/ops.def's last section: perm[j]
// is 1 + the axis of `big` that axis j of `small` is; all zeros: small is big's last axes). Sets
// st[i] to the stride in `small` of big's axis i (0 where small lacks it) and returns 0, or -1
// when small's local shape does not fit big's at those axes.
static inline int cpu_map_strides(const plan_attrs *a, const rt_view *big, const rt_view *small, int64_t *st) {
    bool given = false;
    for (int i = 0; i < PLAN_MAX_RANK; i++) given |= a->perm[i] != 0;
    if (small->rank > big->rank) return -1;
    for (int i = 0; i < big->rank; i++) st[i] = 0;
    int64_t s = 1;
    int last = big->rank;
    for (int j = small->rank - 1; j >= 0; j--) {
        int ax = given ? a->perm[j] - 1 : big->rank - small->rank + j;
        if (ax < 0 || ax >= last || big->shape[ax] != small->shape[j]) return -1;
        st[ax] = s;
        s *= small->shape[j];
        last = ax;
    }
    return 0;
}

// The same, failing with a message naming the operands.
static inline int cpu_map(kctx *c, const rt_view *big, const char *bname, const rt_view *small, const char *sname, int64_t *st) {
    if (!cpu_map_strides(c->a, big, small, st)) return 0;
    return cpu_fail(c, "%s is %s, which is not %s %s with axes left out (as attrs perm maps them)", sname, CPU_SHAPE(small), bname,
                    CPU_SHAPE(big));
}

// Visits big's elements in order: i its flat index, k the flat index in `small` (strides st from
// cpu_map_strides).
#define CPU_FOR_MAPPED(big, st, i, k, body)                                                        \
    do {                                                                                           \
        int64_t idx_[PLAN_MAX_RANK] = {0}, k = 0, n_ = cpu_numel(big);                            \
        for (int64_t i = 0; i < n_; i++) {                                                         \
            body;                                                                                  \
            for (int d_ = (big)->rank - 1; d_ >= 0; d_--) {                                        \
                k += (st)[d_];                                                                     \
                if (++idx_[d_] < (big)->shape[d_]) break;                                          \
                k -= (st)[d_] * (big)->shape[d_];                                                  \
                idx_[d_] = 0;                                                                      \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* ---- the kernels, by file (dispatch.c maps operators to them) ---- */

// matmul.c: dense products
int CPU_KERNEL(matmul)(kctx *c);
int CPU_KERNEL(matmul_grad_a)(kctx *c);
int CPU_KERNEL(matmul_grad_b)(kctx *c);
int CPU_KERNEL(bmm)(kctx *c);
int CPU_KERNEL(bmm_grad_a)(kctx *c);
int CPU_KERNEL(bmm_grad_b)(kctx *c);
int CPU_KERNEL(linear)(kctx *c);
int CPU_KERNEL(linear_grad_x)(kctx *c);
int CPU_KERNEL(linear_grad_w)(kctx *c);

// elementwise.c: element-wise operators, dropout
int CPU_KERNEL(add)(kctx *c);
int CPU_KERNEL(mul)(kctx *c);
int CPU_KERNEL(scale)(kctx *c);
int CPU_KERNEL(activation)(kctx *c);
int CPU_KERNEL(activation_grad)(kctx *c);
int CPU_KERNEL(fill)(kctx *c);
int CPU_KERNEL(reduce_sum)(kctx *c);
int CPU_KERNEL(dropout)(kctx *c);

// norm.c: layernorm, rmsnorm, batchnorm
int CPU_KERNEL(norm)(kctx *c);
int CPU_KERNEL(norm_grad_x)(kctx *c);
int CPU_KERNEL(norm_grad_w)(kctx *c);
int CPU_KERNEL(batchnorm)(kctx *c);
int CPU_KERNEL(batchnorm_grad_x)(kctx *c);
int CPU_KERNEL(batchnorm_grad_w)(kctx *c);

// softmax.c: softmax
int CPU_KERNEL(softmax)(kctx *c);
int CPU_KERNEL(softmax_grad)(kctx *c);

// movement.c: concat, split, slice, reshape, transpose
int CPU_KERNEL(concat)(kctx *c);
int CPU_KERNEL(split)(kctx *c);
int CPU_KERNEL(slice)(kctx *c);
int CPU_KERNEL(slice_grad)(kctx *c);
int CPU_KERNEL(reshape)(kctx *c);
int CPU_KERNEL(transpose)(kctx *c);

// loss.c: losses
int CPU_KERNEL(cross_entropy)(kctx *c);
int CPU_KERNEL(cross_entropy_grad)(kctx *c);
int CPU_KERNEL(pointwise_loss)(kctx *c);
int CPU_KERNEL(pointwise_loss_grad)(kctx *c);

// optim.c: optimizer steps
int CPU_KERNEL(sgd)(kctx *c);
int CPU_KERNEL(adamw)(kctx *c);

// conv.c: conv2d and the pools
int CPU_KERNEL(conv2d)(kctx *c);
int CPU_KERNEL(conv2d_grad_x)(kctx *c);
int CPU_KERNEL(conv2d_grad_w)(kctx *c);
int CPU_KERNEL(conv2d_grad_b)(kctx *c);
int CPU_KERNEL(maxpool)(kctx *c);
int CPU_KERNEL(maxpool_grad)(kctx *c);
int CPU_KERNEL(avgpool)(kctx *c);
int CPU_KERNEL(avgpool_grad)(kctx *c);

// unary.c: sigmoid, tanh, exp, log, gelu_erf, rsqrt, sqrt, sin, cos, pow and their gradients
int CPU_KERNEL(unary)(kctx *c);
int CPU_KERNEL(unary_grad)(kctx *c);

// reduce.c: sum, mean, max, expand, max_grad, masked_fill, sub, div; ne, one_hot, topk, gather
int CPU_KERNEL(reduce)(kctx *c);
int CPU_KERNEL(expand)(kctx *c);
int CPU_KERNEL(max_grad)(kctx *c);
int CPU_KERNEL(masked_fill)(kctx *c);
int CPU_KERNEL(sub_div)(kctx *c);
int CPU_KERNEL(ne)(kctx *c);
int CPU_KERNEL(one_hot)(kctx *c);
int CPU_KERNEL(topk)(kctx *c);
int CPU_KERNEL(topk_grad)(kctx *c);
int CPU_KERNEL(gather)(kctx *c);
int CPU_KERNEL(gather_grad)(kctx *c);

// attention.c: attention
int CPU_KERNEL(attention)(kctx *c);
int CPU_KERNEL(attention_grad)(kctx *c);
int CPU_KERNEL(attention_grad_bias)(kctx *c);
// attention_ring.c: ring attention's steps
int CPU_KERNEL(attention_block)(kctx *c);
int CPU_KERNEL(attention_block_grad)(kctx *c);
int CPU_KERNEL(vocab_ce_stats)(kctx *c);
int CPU_KERNEL(vocab_ce)(kctx *c);
int CPU_KERNEL(vocab_ce_grad)(kctx *c);

// embedding.c: embeddings
int CPU_KERNEL(embedding)(kctx *c);
int CPU_KERNEL(embedding_grad)(kctx *c);
int CPU_KERNEL(embedding_bag)(kctx *c);
int CPU_KERNEL(embedding_bag_grad)(kctx *c);

#endif
