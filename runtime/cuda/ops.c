/*
 * cuda/ops.c: the CUDA backend's operators: every row of runtime/ops.def, forward, backward and
 * optimizer steps, with the CPU backend's semantics (rt.h, "cpu/dispatch.c": local pieces,
 * `once`, accumulate, losses over the global count, row-split embeddings, dropout keyed by the
 * global index), and the backend's local copies.
 *
 * Who computes what:
 *   - cuBLAS (cublasGemmStridedBatchedEx) for every matrix product: matmul, bmm, linear and their
 *     gradients, and attention's four products. f32 in f32 (TF32 only with --tf32), f16 and bf16
 *     operands with f32 accumulation (CUBLAS_COMPUTE_32F). Row-major operands are passed as the
 *     column-major transposes: C = op(A) op(B) is C^T = op(B)^T op(A)^T;
 *   - cuDNN's convolution (forward, backward data, backward filter) in f32, with FMA math (strict
 *     fp32) unless --tf32, and deterministic algorithms for the backward passes where cuDNN has
 *     one; the choice is cached per shape;
 *   - kernels.cu and kernels_nn.cu for everything else (element-wise, norms, softmax, losses,
 *     data movement, embeddings, dropout, pooling, batch norm, the optimizers).
 * Attention, convolution and the embedding gradients compute in f32: for f16/bf16 operands they
 * run on f32 copies in scratch (staged), converted back at the end; attention's products then run
 * in TF32 (f16 and bf16 values are exact in its 10-bit mantissa, the softmax's probabilities
 * keep more bits than the 16-bit output they feed, and the sums stay f32). Everything else
 * reads and writes f16/bf16 directly with f32 arithmetic.
 *
 * Checks. Before anything is enqueued: the arity is ops.def's, every view has rank <= 8, sizes
 * >= 0, a piece inside its logical tensor and data, ids and labels are int32, float operands are
 * f32/f16/bf16 (data movement: every operand has input 0's dtype, moved as bits); then each
 * operator checks how its views relate, with the CPU kernels' rules, and fails with a message
 * naming the operands. Values (an id outside its table) are checked on the GPU (kernels.h's
 * flag), reported at the end of the step.
 */
#include "internal.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

enum {
#define OP(E, name, imin, imax, nout, ann, flags) OP_##E,
#include "../ops.def"
#undef OP
    OP_COUNT
};

static const struct op_row {
    const char *name;
    int in_min, in_max, out;
} op_rows[OP_COUNT] = {
#define OP(E, name, imin, imax, nout, ann, flags) [OP_##E] = {#name, imin, imax, nout},
#include "../ops.def"
#undef OP
};

// One operator's call.
typedef struct oc {
    cu_state *cu;
    const rt_kernel *k;
    const plan_attrs *a;
    const rt_view *in, *out;
    uint32_t nin, nout;
    const char *name;
    bool acc;
    bool staged16; // f16/bf16 operands staged to f32 (staged()): products may run in TF32
    cudaStream_t st;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
} oc;

typedef int op_fn(oc *c, char *err, size_t err_n);

static int fail(oc *c, char *err, size_t err_n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(oc *c, char *err, size_t err_n, const char *fmt, ...) {
    if (!err || !err_n) return -1;
    int k = snprintf(err, err_n, "%s: ", c->name);
    if (k >= 0 && (size_t)k < err_n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + k, err_n - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- shapes ---- */

typedef struct shape_text {
    char s[8 * 21 + 3];
} shape_text;

static shape_text shape_str(const int64_t *d, int rank) {
    shape_text t;
    size_t k = 0;
    t.s[k++] = '[';
    for (int i = 0; i < rank && i < PLAN_MAX_RANK; i++) k += (size_t)snprintf(t.s + k, sizeof t.s - k, "%s%lld", i ? "," : "", (long long)d[i]);
    snprintf(t.s + k, sizeof t.s - k, "]");
    return t;
}
#define SHAPE(v) (shape_str((v)->shape, (v)->rank).s)

typedef struct kshape {
    int rank;
    int64_t d[PLAN_MAX_RANK];
} kshape;

static kshape shape_of(const rt_view *v) {
    kshape s = {.rank = v->rank};
    for (int i = 0; i < v->rank; i++) s.d[i] = v->shape[i];
    return s;
}

static bool shape_is(const rt_view *v, kshape s) {
    if (v->rank != s.rank) return false;
    for (int i = 0; i < s.rank; i++)
        if (v->shape[i] != s.d[i]) return false;
    return true;
}

static int expect(oc *c, char *err, size_t err_n, const char *what, const rt_view *v, kshape want) {
    if (shape_is(v, want)) return 0;
    return fail(c, err, err_n, "%s is %s but should be %s", what, SHAPE(v), shape_str(want.d, want.rank).s);
}

static int like(oc *c, char *err, size_t err_n, const char *what, const rt_view *v, const rt_view *ref) {
    return expect(c, err, err_n, what, v, shape_of(ref));
}

static int64_t numel(const rt_view *v) {
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= v->shape[i];
    return n;
}

static int64_t full_numel(const rt_view *v) {
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= v->full[i];
    return n;
}

static int64_t lead(const rt_view *v, int trail) {
    int64_t n = 1;
    for (int i = 0; i < v->rank - trail; i++) n *= v->shape[i];
    return n;
}

static int64_t dim(const rt_view *v, int i) { return v->rank + i >= 0 ? v->shape[v->rank + i] : 1; }

static bool lead_same(const rt_view *a, const rt_view *b, int trail) {
    if (a->rank != b->rank || a->rank < trail) return false;
    for (int i = 0; i < a->rank - trail; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

static kshape with_last(const rt_view *v, int64_t last) {
    kshape s = shape_of(v);
    s.d[s.rank - 1] = last;
    return s;
}

static kshape shape1(int64_t n) { return (kshape){.rank = 1, .d = {n}}; }
static kshape shape2(int64_t m, int64_t n) { return (kshape){.rank = 2, .d = {m, n}}; }

static int rank_is(oc *c, char *err, size_t err_n, const char *what, const rt_view *v, int rank, const char *layout) {
    if (v->rank == rank) return 0;
    return fail(c, err, err_n, "%s is %s; it must be %s", what, SHAPE(v), layout);
}

static int scalar(oc *c, char *err, size_t err_n, const char *what, const rt_view *v) {
    if (numel(v) == 1) return 0;
    return fail(c, err, err_n, "%s is %s; it must be a scalar", what, SHAPE(v));
}

static size_t esize(const rt_view *v) { return cu_dtype_bytes(v->dtype); }

/* ---- small helpers over the kernels ---- */

static int zero(oc *c, const rt_view *v, char *err, size_t err_n) {
    if (numel(v)) CUDA_CHECK(cudaMemsetAsync(v->data, 0, (size_t)numel(v) * esize(v), c->st));
    return 0;
}

static int ew(oc *c, ck_ew_args *a, char *err, size_t err_n) {
    CUDA_CHECK(ck_ew(c->st, a));
    return 0;
}

static int scratch(oc *c, size_t bytes, void **p, char *err, size_t err_n) {
    CU_TRY(cu_scratch(c->st, bytes, p, err, err_n));
    return 0;
}

/* ---- GEMM through cuBLAS ---- */

static cudaDataType_t cuda_type(int dt) { return dt == CK_F16 ? CUDA_R_16F : dt == CK_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// C = alpha op(A) op(B) + beta C, row-major, batch times with strides sA, sB, sC (elements).
// An empty product (k = 0) scales C by beta, as CBLAS does.
static int gemm(oc *c, char *err, size_t err_n, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void *A,
                int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, float beta, void *C, int64_t ldc, int64_t sC,
                int64_t batch, int dt) {
    if (m == 0 || n == 0 || batch == 0) return 0;
    if (k == 0) {
        if (beta != 0) return 0; // beta is 0 or 1 here
        for (int64_t i = 0; i < batch; i++)
            CUDA_CHECK(ck_copy2d(c->st, (char *)C + (size_t)(i * sC) * cu_dtype_bytes(dt), ldc, NULL, 0, m, n, dt, false));
        return 0;
    }
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX || batch > INT_MAX)
        return fail(c, err, err_n, "a product of %lld x %lld x %lld (batch %lld) is beyond cuBLAS's int sizes", (long long)m,
                    (long long)n, (long long)k, (long long)batch);
    cudaDataType_t t = cuda_type(dt);
    cublasComputeType_t ct = dt == CK_F32 && (c->cu->tf32 || c->staged16) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m,
                                            (int)k, &alpha, B, t, (int)ldb, sB, A, t, (int)lda, sA, &beta, C, t, (int)ldc, sC,
                                            (int)batch, ct, CUBLAS_GEMM_DEFAULT));
    return 0;
}

// The operands of one product share a dtype.
static int same_dtype(oc *c, char *err, size_t err_n) {
    for (uint32_t i = 0; i < c->nin + c->nout; i++) {
        const rt_view *v = i < c->nin ? &c->in[i] : &c->out[i - c->nin];
        if (v->dtype != c->in[0].dtype)
            return fail(c, err, err_n, "%s %u is %s but input 0 is %s; a product takes one dtype", i < c->nin ? "input" : "output",
                        i < c->nin ? i : i - c->nin, plan_dtype_name(v->dtype), plan_dtype_name(c->in[0].dtype));
    }
    return 0;
}

static float beta_of(const oc *c) { return c->acc ? 1.0f : 0.0f; }

/* ---- dense products ---- */

static int op_matmul(oc *c, char *err, size_t err_n) {
    const rt_view *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
    if (a->rank < 2) return fail(c, err, err_n, "input 0 is %s; it needs [*b,m,k]", SHAPE(a));
    if (b->rank != 2 || b->shape[0] != dim(a, -1))
        return fail(c, err, err_n, "input 1 is %s but input 0's last dimension is %lld", SHAPE(b), (long long)dim(a, -1));
    if (expect(c, err, err_n, "output 0", y, with_last(a, b->shape[1])) || same_dtype(c, err, err_n)) return -1;
    int64_t k = b->shape[0], n = b->shape[1];
    return gemm(c, err, err_n, false, false, lead(a, 1), n, k, 1, a->data, k, 0, b->data, n, 0, beta_of(c), y->data, n, 0, 1, a->dtype);
}

static int op_matmul_grad_a(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *b = &c->in[1], *da = &c->out[0];
    if (dy->rank < 2) return fail(c, err, err_n, "input 0 is %s; it needs [*b,m,n]", SHAPE(dy));
    if (b->rank != 2 || b->shape[1] != dim(dy, -1))
        return fail(c, err, err_n, "input 1 is %s but input 0's last dimension is %lld", SHAPE(b), (long long)dim(dy, -1));
    if (expect(c, err, err_n, "output 0", da, with_last(dy, b->shape[0])) || same_dtype(c, err, err_n)) return -1;
    int64_t k = b->shape[0], n = b->shape[1];
    return gemm(c, err, err_n, false, true, lead(dy, 1), k, n, 1, dy->data, n, 0, b->data, n, 0, beta_of(c), da->data, k, 0, 1, dy->dtype);
}

static int op_matmul_grad_b(oc *c, char *err, size_t err_n) {
    const rt_view *a = &c->in[0], *dy = &c->in[1], *db = &c->out[0];
    if (a->rank < 2 || !lead_same(a, dy, 1))
        return fail(c, err, err_n, "input 1 is %s but input 0 is %s; they must agree in all but the last dimension", SHAPE(dy), SHAPE(a));
    int64_t k = dim(a, -1), n = dim(dy, -1);
    if (expect(c, err, err_n, "output 0", db, shape2(k, n)) || same_dtype(c, err, err_n)) return -1;
    return gemm(c, err, err_n, true, false, k, n, lead(a, 1), 1, a->data, k, 0, dy->data, n, 0, beta_of(c), db->data, n, 0, 1, a->dtype);
}

static int bmm_pair(oc *c, char *err, size_t err_n, const rt_view *a, const rt_view *b) {
    if (a->rank < 2) return fail(c, err, err_n, "input 0 is %s; it needs [*b,m,k]", SHAPE(a));
    if (!lead_same(a, b, 2)) return fail(c, err, err_n, "input 1 is %s but input 0 is %s; their leading dimensions must agree", SHAPE(b), SHAPE(a));
    return same_dtype(c, err, err_n);
}

// y_i = op(a_i) op(b_i) over the leading dimensions, [m,k] x [k,n].
static int batched(oc *c, char *err, size_t err_n, int64_t batch, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const rt_view *a,
                   const rt_view *b, const rt_view *y) {
    return gemm(c, err, err_n, ta, tb, m, n, k, 1, a->data, ta ? m : k, m * k, b->data, tb ? k : n, k * n, beta_of(c), y->data, n,
                m * n, batch, a->dtype);
}

static int op_bmm(oc *c, char *err, size_t err_n) {
    const rt_view *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
    if (bmm_pair(c, err, err_n, a, b)) return -1;
    int64_t m = dim(a, -2), k = dim(a, -1), n = dim(b, -1);
    if (dim(b, -2) != k) return fail(c, err, err_n, "input 1 is %s but input 0's last dimension is %lld", SHAPE(b), (long long)k);
    if (expect(c, err, err_n, "output 0", y, with_last(a, n))) return -1;
    return batched(c, err, err_n, lead(a, 2), false, false, m, n, k, a, b, y);
}

static int op_bmm_grad_a(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *b = &c->in[1], *da = &c->out[0];
    if (bmm_pair(c, err, err_n, dy, b)) return -1;
    int64_t m = dim(dy, -2), n = dim(dy, -1), k = dim(b, -2);
    if (dim(b, -1) != n) return fail(c, err, err_n, "input 1 is %s but input 0's last dimension is %lld", SHAPE(b), (long long)n);
    if (expect(c, err, err_n, "output 0", da, with_last(dy, k))) return -1;
    return batched(c, err, err_n, lead(dy, 2), false, true, m, k, n, dy, b, da);
}

static int op_bmm_grad_b(oc *c, char *err, size_t err_n) {
    const rt_view *a = &c->in[0], *dy = &c->in[1], *db = &c->out[0];
    if (bmm_pair(c, err, err_n, a, dy)) return -1;
    int64_t m = dim(a, -2), k = dim(a, -1), n = dim(dy, -1);
    if (dim(dy, -2) != m) return fail(c, err, err_n, "input 1 is %s but input 0 is %s; both need the same m", SHAPE(dy), SHAPE(a));
    kshape want = shape_of(a);
    want.d[a->rank - 2] = k, want.d[a->rank - 1] = n;
    if (expect(c, err, err_n, "output 0", db, want)) return -1;
    return batched(c, err, err_n, lead(a, 2), true, false, k, n, m, a, dy, db);
}

// y [rows, n] set to (or, accumulating, increased by) the bias (NULL: zero).
static int rows_bias(oc *c, char *err, size_t err_n, const rt_view *y, int64_t n, const rt_view *bias, int64_t inner) {
    if (!bias) return c->acc ? 0 : zero(c, y, err, err_n);
    ck_ew_args a = {.op = CK_EW_ADD, .n = numel(y), .y = y->data, .ydt = y->dtype, .b = bias->data, .bdt = bias->dtype, .ub = true,
                    .b_n = n, .b_inner = inner, .acc = c->acc};
    return ew(c, &a, err, err_n);
}

static int op_linear(oc *c, char *err, size_t err_n) {
    const rt_view *x = &c->in[0], *w = &c->in[1], *y = &c->out[0], *b = c->nin > 2 ? &c->in[2] : NULL;
    if (x->rank < 1) return fail(c, err, err_n, "input 0 is a scalar; it needs [*b,k]");
    int64_t k = dim(x, -1);
    if (w->rank != 2 || w->shape[1] != k) return fail(c, err, err_n, "input 1 is %s but input 0's last dimension is %lld", SHAPE(w), (long long)k);
    int64_t n = w->shape[0];
    if ((b && expect(c, err, err_n, "input 2 (the bias)", b, shape1(n))) || expect(c, err, err_n, "output 0", y, with_last(x, n)))
        return -1;
    if (x->dtype != w->dtype || y->dtype != x->dtype) return fail(c, err, err_n, "input 0, input 1 and output 0 must share a dtype");
    if (rows_bias(c, err, err_n, y, n, b && b->once ? b : NULL, 1)) return -1;
    return gemm(c, err, err_n, false, true, lead(x, 1), n, k, 1, x->data, k, 0, w->data, k, 0, 1, y->data, n, 0, 1, x->dtype);
}

static int op_linear_grad_x(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *w = &c->in[1], *dx = &c->out[0];
    if (dy->rank < 1) return fail(c, err, err_n, "input 0 is a scalar; it needs [*b,n]");
    int64_t n = dim(dy, -1);
    if (w->rank != 2 || w->shape[0] != n) return fail(c, err, err_n, "input 1 is %s but input 0's last dimension is %lld", SHAPE(w), (long long)n);
    int64_t k = w->shape[1];
    if (expect(c, err, err_n, "output 0", dx, with_last(dy, k)) || same_dtype(c, err, err_n)) return -1;
    return gemm(c, err, err_n, false, false, lead(dy, 1), k, n, 1, dy->data, n, 0, w->data, k, 0, beta_of(c), dx->data, k, 0, 1, dy->dtype);
}

static int op_linear_grad_w(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *x = &c->in[1], *dw = &c->out[0];
    if (dy->rank < 1 || !lead_same(dy, x, 1))
        return fail(c, err, err_n, "input 1 is %s but input 0 is %s; they must agree in all but the last dimension", SHAPE(x), SHAPE(dy));
    int64_t n = dim(dy, -1), k = dim(x, -1);
    if (expect(c, err, err_n, "output 0", dw, shape2(n, k)) || same_dtype(c, err, err_n)) return -1;
    return gemm(c, err, err_n, true, false, n, k, lead(dy, 1), 1, dy->data, n, 0, x->data, k, 0, beta_of(c), dw->data, k, 0, 1, dy->dtype);
}

/* ---- element-wise ---- */

static int binary_shapes(oc *c, char *err, size_t err_n) {
    const rt_view *a = &c->in[0], *b = &c->in[1];
    bool ok = b->rank <= a->rank;
    for (int i = 0; ok && i < b->rank; i++) ok = b->shape[i] == a->shape[a->rank - b->rank + i];
    if (!ok) return fail(c, err, err_n, "input 1 is %s; it must equal input 0's shape %s or a suffix of it", SHAPE(b), SHAPE(a));
    return expect(c, err, err_n, "output 0", &c->out[0], shape_of(a));
}

static int op_ext(oc *c, char *err, size_t err_n) { return cu_ext_op(c->cu, c->st, c->k, c->name, err, err_n); }

static bool map_given(const oc *c) {
    for (int i = 0; i < PLAN_MAX_RANK; i++)
        if (c->a->perm[i]) return true;
    return false;
}

static int op_add_mul(oc *c, char *err, size_t err_n) {
    if (map_given(c)) return op_ext(c, err, err_n); // an axis map (ops.def's last section)
    if (binary_shapes(c, err, err_n)) return -1;
    const rt_view *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
    bool add = c->k->op == OP_ADD;
    ck_ew_args e = {.op = add ? CK_EW_ADD : CK_EW_MUL, .n = numel(a), .y = y->data, .ydt = y->dtype, .a = a->data, .adt = a->dtype,
                    .ua = add ? a->once : true, .b = b->data, .bdt = b->dtype, .ub = add ? b->once : true, .b_n = numel(b),
                    .b_inner = 1, .acc = c->acc};
    if (e.b_n == 0) return 0;
    return ew(c, &e, err, err_n);
}

static int same_shapes(oc *c, char *err, size_t err_n) {
    for (uint32_t i = 1; i < c->nin; i++)
        if (!shape_is(&c->in[i], shape_of(&c->in[0])))
            return fail(c, err, err_n, "input %u is %s but input 0 is %s; they must be the same shape", i, SHAPE(&c->in[i]), SHAPE(&c->in[0]));
    for (uint32_t i = 0; i < c->nout; i++)
        if (!shape_is(&c->out[i], shape_of(&c->in[0])))
            return fail(c, err, err_n, "output %u is %s but input 0 is %s; they must be the same shape", i, SHAPE(&c->out[i]), SHAPE(&c->in[0]));
    return 0;
}

static int op_unary(oc *c, char *err, size_t err_n) {
    if (same_shapes(c, err, err_n)) return -1;
    ck_ew_op op;
    switch (c->k->op) {
    case OP_SCALE: op = CK_EW_SCALE; break;
    case OP_RELU: op = CK_EW_RELU; break;
    case OP_GELU: op = CK_EW_GELU; break;
    case OP_SILU: op = CK_EW_SILU; break;
    case OP_RELU_GRAD: op = CK_EW_RELU_GRAD; break;
    case OP_GELU_GRAD: op = CK_EW_GELU_GRAD; break;
    default: op = CK_EW_SILU_GRAD; break;
    }
    const rt_view *x = &c->in[0], *y = &c->out[0], *b = c->nin > 1 ? &c->in[1] : NULL;
    ck_ew_args e = {.op = op, .n = numel(x), .y = y->data, .ydt = y->dtype, .a = x->data, .adt = x->dtype, .ua = true,
                    .b = b ? b->data : NULL, .bdt = b ? b->dtype : 0, .b_n = b ? numel(b) : 1, .b_inner = 1,
                    .s = (float)c->a->f[PLAN_AF_SCALE], .acc = c->acc};
    return ew(c, &e, err, err_n);
}

static int op_fill(oc *c, char *err, size_t err_n) {
    const rt_view *y = &c->out[0];
    ck_ew_args e = {.op = CK_EW_FILL, .n = numel(y), .y = y->data, .ydt = y->dtype, .s = (float)c->a->f[PLAN_AF_SCALE], .acc = c->acc};
    return ew(c, &e, err, err_n);
}

static int op_reduce_sum(oc *c, char *err, size_t err_n) {
    if (map_given(c)) return op_ext(c, err, err_n);
    const rt_view *x = &c->in[0], *y = &c->out[0];
    bool ok = y->rank <= x->rank;
    for (int i = 0; ok && i < y->rank; i++) ok = y->shape[i] == x->shape[x->rank - y->rank + i];
    if (!ok) return fail(c, err, err_n, "output 0 is %s; it must be a suffix of input 0's shape %s", SHAPE(y), SHAPE(x));
    int64_t inner = numel(y), outer = inner ? numel(x) / inner : 0;
    if (!inner) return 0;
    double *part = NULL;
    CU_TRY(scratch(c, (size_t)(ck_col_chunks(outer, inner) * inner) * sizeof(double), (void **)&part, err, err_n));
    cudaError_t e = ck_sum_leading(c->st, outer, inner, x->data, x->dtype, part, y->data, y->dtype, c->acc);
    cu_scratch_free(c->st, part);
    CUDA_CHECK(e);
    return 0;
}

static int op_dropout(oc *c, char *err, size_t err_n) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    double p = c->a->f[PLAN_AF_P];
    if (!(p >= 0 && p < 1)) return fail(c, err, err_n, "p = %g; the drop probability must be in [0, 1)", p);
    if (expect(c, err, err_n, "output 0", y, shape_of(x))) return -1;
    const rt_kernel *k = c->k;
    uint64_t key = rt_key(rt_key(rt_key(rt_key(k->seed, (uint64_t)c->a->i[PLAN_AI_SEED]), k->step), k->mb), k->layer);
    ck_box b = {.rank = x->rank};
    for (int d = 0; d < x->rank; d++) b.start[d] = x->start[d], b.shape[d] = x->shape[d], b.full[d] = x->full[d];
    int64_t z = c->a->i[PLAN_AI_END], zd = c->a->i[PLAN_AI_AXIS]; // zigzag: the mask by logical positions (cpu/elementwise.c)
    if (z && (zd < 0 || zd >= x->rank || z < 2 || z % 2 || z > UINT16_MAX || x->full[zd] % z))
        return fail(c, err, err_n, "zigzag of %lld chunks along dimension %lld does not cut input 0", (long long)z, (long long)zd);
    CUDA_CHECK(ck_dropout(c->st, y->data, y->dtype, x->data, x->dtype, &b, (int)zd, (uint32_t)z, key, p, (float)(1 / (1 - p)), c->acc));
    return 0;
}

/* ---- norms and softmax ---- */

static int row_params(oc *c, char *err, size_t err_n, uint32_t xin, uint32_t first) {
    const rt_view *x = &c->in[xin];
    if (x->rank < 1) return fail(c, err, err_n, "input %u is a scalar; it needs [*b,h]", xin);
    for (uint32_t i = first; i < c->nin; i++) {
        char what[32];
        snprintf(what, sizeof what, "input %u", i);
        if (expect(c, err, err_n, what, &c->in[i], shape1(dim(x, -1)))) return -1;
    }
    return 0;
}

static int op_norm(oc *c, char *err, size_t err_n) {
    bool ln = c->k->op == OP_LAYERNORM;
    const rt_view *x = &c->in[0], *g = &c->in[1], *b = ln ? &c->in[2] : NULL, *y = &c->out[0];
    if (row_params(c, err, err_n, 0, 1) || expect(c, err, err_n, "output 0", y, shape_of(x))) return -1;
    int64_t h = dim(x, -1), rows = h ? lead(x, 1) : 0;
    CUDA_CHECK(ck_norm(c->st, rows, h, x->data, x->dtype, g->data, g->dtype, b ? b->data : NULL, b ? b->dtype : 0, y->data, y->dtype,
                       c->a->f[PLAN_AF_EPS], ln, c->acc));
    return 0;
}

static int op_norm_grad_x(oc *c, char *err, size_t err_n) {
    bool ln = c->k->op == OP_LAYERNORM_GRAD_X;
    const rt_view *dy = &c->in[0], *x = &c->in[1], *g = &c->in[2], *dx = &c->out[0];
    if (row_params(c, err, err_n, 1, 2) || like(c, err, err_n, "input 0", dy, x) || like(c, err, err_n, "output 0", dx, x)) return -1;
    int64_t h = dim(x, -1), rows = h ? lead(x, 1) : 0;
    CUDA_CHECK(ck_norm_grad_x(c->st, rows, h, dy->data, dy->dtype, x->data, x->dtype, g->data, g->dtype, dx->data, dx->dtype,
                              c->a->f[PLAN_AF_EPS], ln, c->acc));
    return 0;
}

static int op_norm_grad_w(oc *c, char *err, size_t err_n) {
    bool ln = c->k->op == OP_LAYERNORM_GRAD_W;
    const rt_view *dy = &c->in[0], *x = &c->in[1];
    if (x->rank < 1) return fail(c, err, err_n, "input 1 is a scalar; it needs [*b,h]");
    if (like(c, err, err_n, "input 0", dy, x)) return -1;
    int64_t h = dim(x, -1), rows = h ? lead(x, 1) : 0;
    for (uint32_t o = 0; o < c->nout; o++) {
        char what[32];
        snprintf(what, sizeof what, "output %u", o);
        if (expect(c, err, err_n, what, &c->out[o], shape1(h))) return -1;
    }
    if (!h) return 0;
    double *stats = NULL;
    size_t nstats = (size_t)(2 * (rows ? rows : 1)), npart = (size_t)(2 * ck_col_chunks(rows, h) * h);
    CU_TRY(scratch(c, (nstats + npart) * sizeof(double), (void **)&stats, err, err_n));
    cudaError_t e = ck_row_stats(c->st, rows, h, x->data, x->dtype, c->a->f[PLAN_AF_EPS], ln, stats, stats + rows);
    if (e == cudaSuccess)
        e = ck_norm_grad_w(c->st, rows, h, dy->data, dy->dtype, x->data, x->dtype, stats, stats + rows, stats + nstats, c->out[0].data,
                           c->out[0].dtype, ln ? c->out[1].data : NULL, ln ? c->out[1].dtype : 0, c->acc);
    cu_scratch_free(c->st, stats);
    CUDA_CHECK(e);
    return 0;
}

static int op_softmax(oc *c, char *err, size_t err_n) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    if (x->rank < 1) return fail(c, err, err_n, "input 0 is a scalar; it needs [*b,n]");
    if (same_shapes(c, err, err_n)) return -1;
    int64_t n = dim(x, -1), rows = n ? lead(x, 1) : 0;
    CUDA_CHECK(ck_softmax(c->st, rows, n, x->data, x->dtype, y->data, y->dtype, c->acc));
    return 0;
}

static int op_softmax_grad(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *y = &c->in[1], *dx = &c->out[0];
    if (dy->rank < 1) return fail(c, err, err_n, "input 0 is a scalar; it needs [*b,n]");
    if (same_shapes(c, err, err_n)) return -1;
    int64_t n = dim(dy, -1), rows = n ? lead(dy, 1) : 0;
    CUDA_CHECK(ck_softmax_grad(c->st, rows, n, dy->data, dy->dtype, y->data, y->dtype, dx->data, dx->dtype, c->acc));
    return 0;
}

/* ---- losses ---- */

static int ce_check(oc *c, char *err, size_t err_n, const rt_view *logits, const char *lname, const rt_view *labels, const char *yname) {
    if (logits->rank < 1) return fail(c, err, err_n, "%s is a scalar; it needs [*b,v]", lname);
    kshape want = shape_of(logits);
    want.rank--;
    return expect(c, err, err_n, yname, labels, want);
}

// cross_entropy's attrs mode (plan.h's PLAN_AI_MODE): bit 1 ignores rows labelled f[SCALE]; bit 2
// sums instead of averaging over the logical count.
static int64_t ce_ignore(const oc *c) {
    return (c->a->i[PLAN_AI_MODE] & 1) ? (int64_t)c->a->f[PLAN_AF_SCALE] : CK_NO_IGNORE;
}
static double ce_count(const oc *c, const rt_view *lab) { return (c->a->i[PLAN_AI_MODE] & 2) ? 1 : (double)full_numel(lab); }

static int op_cross_entropy(oc *c, char *err, size_t err_n) {
    const rt_view *x = &c->in[0], *lab = &c->in[1], *y = &c->out[0];
    if (ce_check(c, err, err_n, x, "input 0", lab, "input 1") || scalar(c, err, err_n, "output 0", y)) return -1;
    int64_t v = dim(x, -1), rows = v ? numel(lab) : 0;
    double *terms = NULL;
    CU_TRY(scratch(c, (size_t)(rows ? rows : 1) * sizeof(double), (void **)&terms, err, err_n));
    cudaError_t e = ck_ce_rows(c->st, rows, v, x->data, x->dtype, lab->data, ce_ignore(c), terms, c->cu->flag);
    if (e == cudaSuccess) e = ck_sum_into(c->st, rows, terms, ce_count(c, lab), y->data, y->dtype, c->acc);
    cu_scratch_free(c->st, terms);
    CUDA_CHECK(e);
    return 0;
}

static int op_cross_entropy_grad(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *x = &c->in[1], *lab = &c->in[2], *dx = &c->out[0];
    if (scalar(c, err, err_n, "input 0", dy) || ce_check(c, err, err_n, x, "input 1", lab, "input 2") || like(c, err, err_n, "output 0", dx, x))
        return -1;
    int64_t v = dim(x, -1), rows = v ? numel(lab) : 0;
    CUDA_CHECK(ck_ce_grad(c->st, rows, v, dy->data, dy->dtype, ce_count(c, lab), x->data, x->dtype, lab->data, ce_ignore(c), dx->data,
                          dx->dtype, c->acc, c->cu->flag));
    return 0;
}

// Vocabulary-parallel cross_entropy (runtime/ops.def's vocab_ce rows): the piece's classes start
// at its view's start; the stats of k pieces lie rank-major, 3 per row.
static int vce_pieces(oc *c, char *err, size_t err_n, const char *what, const rt_view *st, int64_t rows, int64_t *k) {
    int64_t n = numel(st);
    *k = rows > 0 ? n / (3 * rows) : 0;
    if (rows == 0 || (n > 0 && n % (3 * rows) == 0)) return 0;
    return fail(c, err, err_n, "%s holds %lld elements: not 3 per row (%lld rows) for each piece of the classes", what, (long long)n,
                (long long)rows);
}

static int op_vocab_ce_stats(oc *c, char *err, size_t err_n) {
    const rt_view *x = &c->in[0], *lab = &c->in[1], *st = &c->out[0];
    if (ce_check(c, err, err_n, x, "input 0", lab, "input 1")) return -1;
    int64_t v = dim(x, -1), rows = numel(lab);
    if (numel(st) != 3 * rows)
        return fail(c, err, err_n, "output 0 holds %lld elements; it needs 3 per row (%lld rows)", (long long)numel(st), (long long)rows);
    CUDA_CHECK(ck_vce_stats(c->st, rows, v, x->start[x->rank - 1], x->full[x->rank - 1], x->data, x->dtype, lab->data, ce_ignore(c),
                            st->data, st->dtype, c->cu->flag));
    return 0;
}

static int op_vocab_ce(oc *c, char *err, size_t err_n) {
    const rt_view *st = &c->in[0], *lab = &c->in[1], *y = &c->out[0];
    int64_t rows = numel(lab), k;
    if (scalar(c, err, err_n, "output 0", y) || vce_pieces(c, err, err_n, "input 0 (the pieces' statistics)", st, rows, &k)) return -1;
    double *terms = NULL;
    CU_TRY(scratch(c, (size_t)(rows ? rows : 1) * sizeof(double), (void **)&terms, err, err_n));
    cudaError_t e = ck_vce_rows(c->st, rows, k, st->data, st->dtype, lab->data, ce_ignore(c), terms);
    if (e == cudaSuccess) e = ck_sum_into(c->st, rows, terms, ce_count(c, lab), y->data, y->dtype, c->acc);
    cu_scratch_free(c->st, terms);
    CUDA_CHECK(e);
    return 0;
}

static int op_vocab_ce_grad(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *x = &c->in[1], *lab = &c->in[2], *st = &c->in[3], *dx = &c->out[0];
    int64_t rows = numel(lab), k;
    if (scalar(c, err, err_n, "input 0", dy) || ce_check(c, err, err_n, x, "input 1", lab, "input 2") ||
        like(c, err, err_n, "output 0", dx, x) || vce_pieces(c, err, err_n, "input 3 (the pieces' statistics)", st, rows, &k))
        return -1;
    CUDA_CHECK(ck_vce_grad(c->st, rows, dim(x, -1), x->start[x->rank - 1], k, dy->data, dy->dtype, ce_count(c, lab), x->data,
                           x->dtype, lab->data, ce_ignore(c), st->data, st->dtype, dx->data, dx->dtype, c->acc));
    return 0;
}

static int op_pointwise_loss(oc *c, char *err, size_t err_n) {
    const rt_view *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
    if (like(c, err, err_n, "input 1", b, a) || scalar(c, err, err_n, "output 0", y)) return -1;
    double *partial = NULL;
    CU_TRY(scratch(c, CK_LOSS_BLOCKS * sizeof(double), (void **)&partial, err, err_n));
    cudaError_t e = ck_loss_terms(c->st, c->k->op == OP_BCE_LOGITS, numel(a), a->data, a->dtype, b->data, b->dtype, partial);
    if (e == cudaSuccess) e = ck_sum_into(c->st, CK_LOSS_BLOCKS, partial, (double)full_numel(a), y->data, y->dtype, c->acc);
    cu_scratch_free(c->st, partial);
    CUDA_CHECK(e);
    return 0;
}

static int op_pointwise_loss_grad(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *a = &c->in[1], *b = &c->in[2], *d = &c->out[0];
    if (scalar(c, err, err_n, "input 0", dy) || like(c, err, err_n, "input 2", b, a) || like(c, err, err_n, "output 0", d, a)) return -1;
    ck_ew_args e = {.op = c->k->op == OP_MSE_LOSS_GRAD ? CK_EW_MSE_GRAD : CK_EW_BCE_GRAD, .n = numel(a), .y = d->data, .ydt = d->dtype,
                    .a = a->data, .adt = a->dtype, .b = b->data, .bdt = b->dtype, .b_n = numel(a), .b_inner = 1, .kptr = dy->data,
                    .kdt = dy->dtype, .count = (double)full_numel(a), .acc = c->acc};
    return ew(c, &e, err, err_n);
}

/* ---- data movement: every operand in input 0's dtype, moved as bits (added when accumulating) ---- */

static int axis_of(oc *c, char *err, size_t err_n, int rank, int *axis) {
    int64_t a = c->a->i[PLAN_AI_AXIS];
    if (a < 0 || a >= rank) return fail(c, err, err_n, "axis %lld is out of range for rank %d", (long long)a, rank);
    *axis = (int)a;
    return 0;
}

static int64_t prod(const int64_t *d, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= d[i];
    return n;
}

static int join_check(oc *c, char *err, size_t err_n, const rt_view *whole, const char *wname, const rt_view *parts, uint32_t n,
                      const char *pside, int *axis) {
    if (axis_of(c, err, err_n, whole->rank, axis)) return -1;
    int64_t sum = 0;
    for (uint32_t p = 0; p < n; p++) {
        kshape want = shape_of(whole);
        want.d[*axis] = parts[p].shape[*axis];
        if (!shape_is(&parts[p], want))
            return fail(c, err, err_n, "%s %u is %s; it must equal %s %s in every dimension but axis %d", pside, p, SHAPE(&parts[p]), wname,
                        SHAPE(whole), *axis);
        sum += parts[p].shape[*axis];
    }
    if (sum != whole->shape[*axis])
        return fail(c, err, err_n, "the %ss add up to %lld along axis %d, but %s is %s", pside, (long long)sum, *axis, wname, SHAPE(whole));
    return 0;
}

static int join_move(oc *c, char *err, size_t err_n, const rt_view *whole, const rt_view *parts, uint32_t n, int axis, bool gather) {
    size_t es = esize(whole);
    int64_t inner = prod(whole->shape, axis + 1, whole->rank), outer = prod(whole->shape, 0, axis), row = whole->shape[axis] * inner, off = 0;
    for (uint32_t p = 0; p < n; p++) {
        int64_t len = parts[p].shape[axis] * inner;
        char *w = (char *)whole->data + (size_t)off * es;
        if (gather) CUDA_CHECK(ck_copy2d(c->st, w, row, parts[p].data, len, outer, len, whole->dtype, c->acc));
        else CUDA_CHECK(ck_copy2d(c->st, parts[p].data, len, w, row, outer, len, whole->dtype, c->acc));
        off += len;
    }
    return 0;
}

static int op_concat(oc *c, char *err, size_t err_n) {
    int axis;
    if (join_check(c, err, err_n, &c->out[0], "output 0", c->in, c->nin, "input", &axis)) return -1;
    return join_move(c, err, err_n, &c->out[0], c->in, c->nin, axis, true);
}

static int op_split(oc *c, char *err, size_t err_n) {
    int axis;
    if (join_check(c, err, err_n, &c->in[0], "input 0", c->out, c->nout, "output", &axis)) return -1;
    return join_move(c, err, err_n, &c->in[0], c->out, c->nout, axis, false);
}

static int slice_check(oc *c, char *err, size_t err_n, const rt_view *whole, const char *wname, const rt_view *part, const char *pname,
                       int *axis) {
    if (axis_of(c, err, err_n, whole->rank, axis)) return -1;
    int64_t s = c->a->i[PLAN_AI_START], e = c->a->i[PLAN_AI_END];
    if (s < 0 || e > whole->shape[*axis] || s >= e)
        return fail(c, err, err_n, "slice [%lld, %lld) is not inside [0, %lld) (%s is %s, axis %d)", (long long)s, (long long)e,
                    (long long)whole->shape[*axis], wname, SHAPE(whole), *axis);
    kshape want = shape_of(whole);
    want.d[*axis] = e - s;
    return expect(c, err, err_n, pname, part, want);
}

static int slice_move(oc *c, char *err, size_t err_n, const rt_view *whole, const rt_view *part, int axis, bool into_whole) {
    size_t es = esize(whole);
    int64_t inner = prod(whole->shape, axis + 1, whole->rank), outer = prod(whole->shape, 0, axis);
    int64_t wrow = whole->shape[axis] * inner, prow = part->shape[axis] * inner, skip = c->a->i[PLAN_AI_START] * inner;
    char *w = (char *)whole->data + (size_t)skip * es;
    if (into_whole) CUDA_CHECK(ck_copy2d(c->st, w, wrow, part->data, prow, outer, prow, whole->dtype, c->acc));
    else CUDA_CHECK(ck_copy2d(c->st, part->data, prow, w, wrow, outer, prow, whole->dtype, c->acc));
    return 0;
}

static int op_slice(oc *c, char *err, size_t err_n) {
    int axis;
    if (slice_check(c, err, err_n, &c->in[0], "input 0", &c->out[0], "output 0", &axis)) return -1;
    return slice_move(c, err, err_n, &c->in[0], &c->out[0], axis, false);
}

static int op_slice_grad(oc *c, char *err, size_t err_n) {
    int axis;
    const rt_view *dx = &c->out[0];
    if (slice_check(c, err, err_n, dx, "output 0", &c->in[0], "input 0", &axis)) return -1;
    if (!c->acc && zero(c, dx, err, err_n)) return -1;
    return slice_move(c, err, err_n, dx, &c->in[0], axis, true);
}

static int op_reshape(oc *c, char *err, size_t err_n) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    if (numel(x) != numel(y))
        return fail(c, err, err_n, "output 0 is %s (%lld elements) but input 0 is %s (%lld)", SHAPE(y), (long long)numel(y), SHAPE(x),
                    (long long)numel(x));
    if (y->data == x->data && !c->acc) return 0;
    CUDA_CHECK(ck_copy2d(c->st, y->data, numel(x), x->data, numel(x), 1, numel(x), x->dtype, c->acc));
    return 0;
}

static int op_transpose(oc *c, char *err, size_t err_n) {
    const rt_view *x = &c->in[0], *y = &c->out[0];
    const int32_t *perm = c->a->perm;
    int r = x->rank;
    bool seen[PLAN_MAX_RANK] = {false};
    for (int i = 0; i < r; i++) {
        if (perm[i] < 0 || perm[i] >= r || seen[perm[i]]) return fail(c, err, err_n, "perm[%d] = %d: perm must be a permutation of 0..%d", i, perm[i], r - 1);
        seen[perm[i]] = true;
    }
    kshape want = {.rank = r};
    for (int i = 0; i < r; i++) want.d[i] = x->shape[perm[i]];
    if (expect(c, err, err_n, "output 0", y, want)) return -1;
    CUDA_CHECK(ck_permute(c->st, y->data, x->data, r, x->shape, perm, x->dtype, c->acc));
    return 0;
}

/* ---- embeddings ---- */

static int emb_check(oc *c, char *err, size_t err_n, const rt_view *ids, const char *iname, const rt_view *table, const char *tname,
                     const rt_view *rows, const char *rname) {
    if (rank_is(c, err, err_n, tname, table, 2, "[v,h]")) return -1;
    if (ids->rank >= PLAN_MAX_RANK) return fail(c, err, err_n, "%s has rank %d; at most %d", iname, ids->rank, PLAN_MAX_RANK - 1);
    kshape want = shape_of(ids);
    want.d[want.rank++] = table->shape[1];
    return expect(c, err, err_n, rname, rows, want);
}

static int op_embedding(oc *c, char *err, size_t err_n) {
    const rt_view *ids = &c->in[0], *t = &c->in[1], *y = &c->out[0];
    if (emb_check(c, err, err_n, ids, "input 0", t, "input 1", y, "output 0")) return -1;
    CUDA_CHECK(ck_embedding(c->st, numel(ids), t->shape[1], ids->data, t->data, t->dtype, t->start[0], t->shape[0], t->full[0], y->data,
                            y->dtype, c->acc, c->cu->flag));
    return 0;
}

// Runs in f32 (staged): dt is f32.
static int op_embedding_grad(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *ids = &c->in[1], *dt = &c->out[0];
    if (emb_check(c, err, err_n, ids, "input 1", dt, "output 0", dy, "input 0")) return -1;
    if (!c->acc && zero(c, dt, err, err_n)) return -1;
    CUDA_CHECK(ck_embedding_grad(c->st, numel(ids), dt->shape[1], dy->data, dy->dtype, ids->data, dt->start[0], dt->shape[0], dt->data));
    return 0;
}

static int bag_check(oc *c, char *err, size_t err_n, const rt_view *ids, const char *iname, const rt_view *table, const char *tname,
                     const rt_view *rows, const char *rname) {
    if (rank_is(c, err, err_n, iname, ids, 2, "[b,l]") || rank_is(c, err, err_n, tname, table, 2, "[r,e]")) return -1;
    return expect(c, err, err_n, rname, rows, shape2(ids->shape[0], table->shape[1]));
}

static int op_embedding_bag(oc *c, char *err, size_t err_n) {
    const rt_view *ids = &c->in[0], *t = &c->in[1], *y = &c->out[0];
    if (bag_check(c, err, err_n, ids, "input 0", t, "input 1", y, "output 0")) return -1;
    CUDA_CHECK(ck_bag(c->st, ids->shape[0], ids->shape[1], t->shape[1], ids->data, t->data, t->dtype, t->start[0], t->shape[0], t->full[0],
                      y->data, y->dtype, c->acc, c->cu->flag));
    return 0;
}

// Runs in f32 (staged).
static int op_embedding_bag_grad(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *ids = &c->in[1], *dt = &c->out[0];
    if (bag_check(c, err, err_n, ids, "input 1", dt, "output 0", dy, "input 0")) return -1;
    if (!c->acc && zero(c, dt, err, err_n)) return -1;
    CUDA_CHECK(ck_bag_grad(c->st, ids->shape[0], ids->shape[1], dt->shape[1], dy->data, dy->dtype, ids->data, dt->start[0], dt->shape[0],
                           dt->data));
    return 0;
}

/* ---- attention (staged to f32): per batch, cuBLAS over the heads ---- */

typedef struct attn_geom {
    int64_t b, s, n, d, ld;
    float scale;
    bool causal;
    ck_attn drop; // dropout of the probabilities (drop.p > 0): its key and the global geometry
} attn_geom;

static int attn_check(oc *c, char *err, size_t err_n, uint32_t ref, attn_geom *g) {
    const rt_view *q = &c->in[ref];
    if (rank_is(c, err, err_n, ref ? "input 1" : "input 0", q, 4, "[b,s,n,d]")) return -1;
    for (uint32_t i = 0; i < c->nin + c->nout; i++) {
        const rt_view *v = i < c->nin ? &c->in[i] : &c->out[i - c->nin];
        char what[32];
        snprintf(what, sizeof what, "%s %u", i < c->nin ? "input" : "output", i < c->nin ? i : i - c->nin);
        if (expect(c, err, err_n, what, v, shape_of(q))) return -1;
    }
    double sc = c->a->f[PLAN_AF_SCALE];
    *g = (attn_geom){.b = q->shape[0], .s = q->shape[1], .n = q->shape[2], .d = q->shape[3], .ld = q->shape[2] * q->shape[3],
                     .scale = (float)(sc != 0 ? sc : 1 / sqrt((double)(q->shape[3] > 0 ? q->shape[3] : 1))),
                     .causal = c->a->i[PLAN_AI_CAUSAL] != 0};
    g->drop = (ck_attn){.s = g->s, .t = g->s, .n = g->n, .q_head0 = q->start[2]};
    if (cu_attn_dropout(c->k, q, &c->in[ref + 1], &g->drop)) return fail(c, err, err_n, "dropout p = %g; the drop probability must be in [0, 1)", g->drop.p);
    return 0;
}

// p [n heads, s, s] = softmax(scale q k^T) of batch element bi.
static int attn_probs(oc *c, char *err, size_t err_n, const attn_geom *g, const float *q, const float *k, float *p) {
    CU_TRY(gemm(c, err, err_n, false, true, g->s, g->s, g->d, g->scale, q, g->ld, g->d, k, g->ld, g->d, 0, p, g->s, g->s * g->s, g->n, CK_F32));
    CUDA_CHECK(ck_attn_softmax(c->st, g->n, g->s, p, g->causal));
    return 0;
}

static int op_attention(oc *c, char *err, size_t err_n) {
    attn_geom g;
    if (attn_check(c, err, err_n, 0, &g)) return -1;
    if (!g.b || !g.s || !g.n || !g.d) return 0;
    float *p = NULL;
    CU_TRY(scratch(c, (size_t)(g.n * g.s * g.s) * sizeof(float), (void **)&p, err, err_n));
    const float *Q = c->in[0].data, *K = c->in[1].data, *V = c->in[2].data;
    float *Y = c->out[0].data;
    int rc = 0;
    for (int64_t bi = 0; bi < g.b && !rc; bi++) {
        int64_t off = bi * g.s * g.ld;
        rc = attn_probs(c, err, err_n, &g, Q + off, K + off, p);
        if (!rc && g.drop.p > 0 && ck_attn_drop(c->st, &g.drop, bi, p) != cudaSuccess)
            rc = cu_say(err, err_n, "attention: %s", cudaGetErrorString(cudaGetLastError()));
        if (!rc) rc = gemm(c, err, err_n, false, false, g.s, g.d, g.s, 1, p, g.s, g.s * g.s, V + off, g.ld, g.d, beta_of(c), Y + off, g.ld, g.d, g.n, CK_F32);
    }
    cu_scratch_free(c->st, p);
    return rc;
}

// dv = P^T dy, dP = dy v^T, dS = P (dP - rowsum(dP P)), dq = scale dS k, dk = scale dS^T q.
static int op_attention_grad(oc *c, char *err, size_t err_n) {
    attn_geom g;
    if (attn_check(c, err, err_n, 1, &g)) return -1;
    if (!g.b || !g.s || !g.n || !g.d) {
        for (uint32_t j = 0; j < 3 && !c->acc; j++) CU_TRY(zero(c, &c->out[j], err, err_n));
        return 0;
    }
    float *p = NULL;
    size_t ss = (size_t)(g.n * g.s * g.s);
    CU_TRY(scratch(c, 2 * ss * sizeof(float), (void **)&p, err, err_n));
    float *dp = p + ss, beta = beta_of(c);
    const float *DY = c->in[0].data, *Q = c->in[1].data, *K = c->in[2].data, *V = c->in[3].data;
    float *DQ = c->out[0].data, *DK = c->out[1].data, *DV = c->out[2].data;
    int64_t s = g.s, d = g.d, ld = g.ld, h = g.n, s2 = s * s;
    int rc = 0;
    for (int64_t bi = 0; bi < g.b && !rc; bi++) {
        int64_t off = bi * s * ld;
        rc = attn_probs(c, err, err_n, &g, Q + off, K + off, p);
        if (!rc) rc = gemm(c, err, err_n, false, true, s, s, d, 1, DY + off, ld, d, V + off, ld, d, 0, dp, s, s2, h, CK_F32);
        // dS; with dropout dp is first the dropped probabilities' gradient, and p becomes P . mask
        if (!rc && (g.drop.p > 0 ? ck_attn_dscores_drop(c->st, &g.drop, bi, p, dp) : ck_attn_dscores(c->st, h, s, p, dp)) != cudaSuccess)
            rc = cu_say(err, err_n, "attention_grad: %s", cudaGetErrorString(cudaGetLastError()));
        if (!rc) rc = gemm(c, err, err_n, true, false, s, d, s, 1, p, s, s2, DY + off, ld, d, beta, DV + off, ld, d, h, CK_F32);
        if (!rc) rc = gemm(c, err, err_n, false, false, s, d, s, g.scale, dp, s, s2, K + off, ld, d, beta, DQ + off, ld, d, h, CK_F32);
        if (!rc) rc = gemm(c, err, err_n, true, false, s, d, s, g.scale, dp, s, s2, Q + off, ld, d, beta, DK + off, ld, d, h, CK_F32);
    }
    cu_scratch_free(c->st, p);
    return rc;
}

/* ---- convolution (cuDNN, staged to f32) ---- */

typedef struct win_geom {
    int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, ho, wo;
} win_geom;

static int64_t window_out(int64_t in, int64_t k, int64_t stride, int64_t pad) {
    if (in + 2 * pad < k || stride < 1) return -1;
    return (in + 2 * pad - k) / stride + 1;
}

static int window_check(oc *c, char *err, size_t err_n, win_geom *g, const rt_view *y, const char *yname) {
    const int32_t *win = c->a->win;
    g->sh = win[2], g->sw = win[3], g->ph = win[4], g->pw = win[5];
    if (g->sh < 1 || g->sw < 1 || g->ph < 0 || g->pw < 0 || g->kh < 1 || g->kw < 1)
        return fail(c, err, err_n, "kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld: kernel and stride must be at least 1, padding at least 0",
                    (long long)g->kh, (long long)g->kw, (long long)g->sh, (long long)g->sw, (long long)g->ph, (long long)g->pw);
    g->ho = window_out(g->h, g->kh, g->sh, g->ph), g->wo = window_out(g->w, g->kw, g->sw, g->pw);
    if (g->ho < 0 || g->wo < 0)
        return fail(c, err, err_n, "a %lldx%lld kernel with padding %lldx%lld does not fit the input's %lldx%lld", (long long)g->kh,
                    (long long)g->kw, (long long)g->ph, (long long)g->pw, (long long)g->h, (long long)g->w);
    return expect(c, err, err_n, yname, y, (kshape){.rank = 4, .d = {g->n, g->o, g->ho, g->wo}});
}

static int conv_check(oc *c, char *err, size_t err_n, const rt_view *x, const char *xname, const rt_view *w, const char *wname, const rt_view *y,
                      const char *yname, win_geom *g) {
    if (rank_is(c, err, err_n, xname, x, 4, "[n,c,h,w]") || rank_is(c, err, err_n, wname, w, 4, "[o,c,kh,kw]")) return -1;
    if (w->shape[1] != x->shape[1]) return fail(c, err, err_n, "%s is %s but %s is %s: their channels c differ", wname, SHAPE(w), xname, SHAPE(x));
    *g = (win_geom){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3], .o = w->shape[0], .kh = w->shape[2], .kw = w->shape[3]};
    if (window_check(c, err, err_n, g, y, yname)) return -1;
    int64_t dims[] = {g->n, g->c, g->h, g->w, g->o, g->kh, g->kw, g->ho, g->wo, g->sh, g->sw, g->ph, g->pw};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++)
        if (dims[i] > INT_MAX) return fail(c, err, err_n, "a size beyond cuDNN's int sizes");
    return 0;
}

enum { CONV_FWD, CONV_BWD_DATA, CONV_BWD_FILTER };

struct cu_conv_algo {
    win_geom g;
    int kind;
    bool tf32;
    int algo;
    cudnnMathType_t math;
};

typedef struct conv_descs {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} conv_descs;

static void descs_free(conv_descs *d) {
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
}

// The descriptors, with the math the run allows: FMA only (strict fp32) unless TF32, so that
// cuDNN's heuristics offer only algorithms of that math.
static int descs_make(const win_geom *g, bool tf32, conv_descs *d, char *err, size_t err_n) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&d->w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d->conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g->n, (int)g->c, (int)g->h, (int)g->w));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g->n, (int)g->o, (int)g->ho, (int)g->wo));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)g->o, (int)g->c, (int)g->kh, (int)g->kw));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d->conv, (int)g->ph, (int)g->pw, (int)g->sh, (int)g->sw, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    return 0;
}

// Whether an algorithm result fits: it runs, and for the backward passes it is deterministic
// (unless need_det is false). The math was restricted on the descriptor before the query; an
// algorithm runs with FMA math unless TF32 is allowed (then with the math cuDNN reports).
static bool algo_ok(cudnnStatus_t st, cudnnMathType_t math, cudnnDeterminism_t det, bool tf32, bool need_det) {
    (void)math, (void)tf32;
    if (st != CUDNN_STATUS_SUCCESS) return false;
    return !need_det || det == CUDNN_DETERMINISTIC;
}

// Picks an algorithm with cuDNN's heuristics (the _v7 queries list them best first).
static int conv_pick(oc *c, const conv_descs *d, int kind, cu_conv_algo *a, char *err, size_t err_n) {
    bool tf32 = c->cu->tf32;
    a->algo = -1;
    for (int pass = 0; pass < 2 && a->algo < 0; pass++) { // pass 1: drop the determinism wish
        int got = 0;
        if (kind == CONV_FWD) {
            cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
            CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(c->dnn, d->x, d->w, d->conv, d->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, r));
            for (int i = 0; i < got && a->algo < 0; i++)
                if (algo_ok(r[i].status, r[i].mathType, r[i].determinism, tf32, false)) a->algo = (int)r[i].algo, a->math = r[i].mathType;
        } else if (kind == CONV_BWD_DATA) {
            cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
            CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(c->dnn, d->w, d->y, d->conv, d->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                                    &got, r));
            for (int i = 0; i < got && a->algo < 0; i++)
                if (algo_ok(r[i].status, r[i].mathType, r[i].determinism, tf32, pass == 0)) a->algo = (int)r[i].algo, a->math = r[i].mathType;
        } else {
            cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
            CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->dnn, d->x, d->y, d->conv, d->w,
                                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, r));
            for (int i = 0; i < got && a->algo < 0; i++)
                if (algo_ok(r[i].status, r[i].mathType, r[i].determinism, tf32, pass == 0)) a->algo = (int)r[i].algo, a->math = r[i].mathType;
        }
    }
    if (a->algo < 0) return fail(c, err, err_n, "cuDNN offers no algorithm for this convolution%s", tf32 ? "" : " in strict fp32 (try --tf32)");
    if (!tf32) a->math = CUDNN_FMA_MATH;
    return 0;
}

static bool same_geom(const win_geom *a, const win_geom *b) { return !memcmp(a, b, sizeof *a); }

// The cached algorithm for (geometry, kind), picking it the first time.
static int conv_algo(oc *c, const win_geom *g, const conv_descs *d, int kind, cu_conv_algo *out, char *err, size_t err_n) {
    cu_state *cu = c->cu;
    for (size_t i = 0; i < cu->n_convs; i++)
        if (cu->convs[i].kind == kind && cu->convs[i].tf32 == cu->tf32 && same_geom(&cu->convs[i].g, g)) return *out = cu->convs[i], 0;
    cu_conv_algo a = {.g = *g, .kind = kind, .tf32 = cu->tf32};
    CU_TRY(conv_pick(c, d, kind, &a, err, err_n));
    if (cu->n_convs == cu->cap_convs) {
        size_t cap = cu->cap_convs ? 2 * cu->cap_convs : 16;
        cu_conv_algo *p = realloc(cu->convs, cap * sizeof *p);
        if (!p) return cu_say(err, err_n, "out of memory");
        cu->convs = p, cu->cap_convs = cap;
    }
    cu->convs[cu->n_convs++] = a;
    *out = a;
    return 0;
}

// One convolution pass: fwd y = conv(x, w) + beta y; bwd data dx = conv^T(dy, w); bwd filter
// dw = corr(x, dy). Arguments by role: x, w, y (dy for the backward passes).
static int conv_run(oc *c, const win_geom *g, int kind, const void *x, const void *w, void *y, void *dx, void *dw, char *err, size_t err_n) {
    conv_descs d = {0};
    cu_conv_algo a = {.algo = -1};
    void *ws = NULL;
    size_t wsz = 0;
    float one = 1, beta = beta_of(c);
    int rc = descs_make(g, c->cu->tf32, &d, err, err_n);
    if (!rc) rc = conv_algo(c, g, &d, kind, &a, err, err_n);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (!rc) s = cudnnSetConvolutionMathType(d.conv, a.math);
    if (!rc && s == CUDNN_STATUS_SUCCESS) {
        if (kind == CONV_FWD) s = cudnnGetConvolutionForwardWorkspaceSize(c->dnn, d.x, d.w, d.conv, d.y, (cudnnConvolutionFwdAlgo_t)a.algo, &wsz);
        else if (kind == CONV_BWD_DATA)
            s = cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn, d.w, d.y, d.conv, d.x, (cudnnConvolutionBwdDataAlgo_t)a.algo, &wsz);
        else s = cudnnGetConvolutionBackwardFilterWorkspaceSize(c->dnn, d.x, d.y, d.conv, d.w, (cudnnConvolutionBwdFilterAlgo_t)a.algo, &wsz);
    }
    if (!rc && s == CUDNN_STATUS_SUCCESS) rc = scratch(c, wsz, &ws, err, err_n);
    if (!rc && s == CUDNN_STATUS_SUCCESS) {
        if (kind == CONV_FWD)
            s = cudnnConvolutionForward(c->dnn, &one, d.x, x, d.w, w, d.conv, (cudnnConvolutionFwdAlgo_t)a.algo, ws, wsz, &beta, d.y, y);
        else if (kind == CONV_BWD_DATA)
            s = cudnnConvolutionBackwardData(c->dnn, &one, d.w, w, d.y, y, d.conv, (cudnnConvolutionBwdDataAlgo_t)a.algo, ws, wsz, &beta, d.x, dx);
        else
            s = cudnnConvolutionBackwardFilter(c->dnn, &one, d.x, x, d.y, y, d.conv, (cudnnConvolutionBwdFilterAlgo_t)a.algo, ws, wsz, &beta, d.w, dw);
    }
    cu_scratch_free(c->st, ws);
    descs_free(&d);
    if (!rc && s != CUDNN_STATUS_SUCCESS)
        rc = cu_fail(err, err_n, "cuDNN", cudnnGetErrorString(s), kind == CONV_FWD ? "cudnnConvolutionForward()" : kind == CONV_BWD_DATA
                     ? "cudnnConvolutionBackwardData()" : "cudnnConvolutionBackwardFilter()", __func__, __FILE__, __LINE__);
    return rc;
}

static int op_conv2d(oc *c, char *err, size_t err_n) {
    win_geom g;
    const rt_view *x = &c->in[0], *w = &c->in[1], *y = &c->out[0], *b = c->nin > 2 ? &c->in[2] : NULL;
    if (conv_check(c, err, err_n, x, "input 0", w, "input 1", y, "output 0", &g)) return -1;
    if (b && expect(c, err, err_n, "input 2 (the bias)", b, shape1(g.o))) return -1;
    if (!numel(y)) return 0;
    if (g.c == 0) return rows_bias(c, err, err_n, y, g.o, b && b->once ? b : NULL, g.ho * g.wo);
    CU_TRY(conv_run(c, &g, CONV_FWD, x->data, w->data, y->data, NULL, NULL, err, err_n));
    if (b && b->once) {
        ck_ew_args e = {.op = CK_EW_ADD, .n = numel(y), .y = y->data, .ydt = y->dtype, .a = y->data, .adt = y->dtype, .ua = true,
                        .b = b->data, .bdt = b->dtype, .ub = true, .b_n = g.o, .b_inner = g.ho * g.wo, .acc = false};
        CU_TRY(ew(c, &e, err, err_n));
    }
    return 0;
}

static int op_conv2d_grad_x(oc *c, char *err, size_t err_n) {
    win_geom g;
    if (conv_check(c, err, err_n, &c->out[0], "output 0", &c->in[1], "input 1", &c->in[0], "input 0", &g)) return -1;
    if (!numel(&c->out[0])) return 0;
    if (!numel(&c->in[0])) return c->acc ? 0 : zero(c, &c->out[0], err, err_n);
    return conv_run(c, &g, CONV_BWD_DATA, NULL, c->in[1].data, c->in[0].data, c->out[0].data, NULL, err, err_n);
}

static int op_conv2d_grad_w(oc *c, char *err, size_t err_n) {
    win_geom g;
    if (conv_check(c, err, err_n, &c->in[1], "input 1", &c->out[0], "output 0", &c->in[0], "input 0", &g)) return -1;
    if (!numel(&c->out[0])) return 0;
    if (!numel(&c->in[0])) return c->acc ? 0 : zero(c, &c->out[0], err, err_n);
    return conv_run(c, &g, CONV_BWD_FILTER, c->in[1].data, NULL, c->in[0].data, NULL, c->out[0].data, err, err_n);
}

// Per channel of dy [n,c,h,w]: db = sum dy, dg = sum dy xhat (x given: xhat on the statistics of
// each group of `grp` samples, ghost batch norm; grp = n: the whole batch).
static int channel_sums(oc *c, char *err, size_t err_n, const rt_view *dy, const rt_view *x, const rt_view *dg, const rt_view *db, double eps,
                        int64_t grp) {
    int64_t n = dy->shape[0], ch = dy->shape[1], hw = dy->shape[2] * dy->shape[3], ng = grp > 0 ? n / grp : 1, rows = ng * ch;
    double *s = NULL;
    CU_TRY(scratch(c, (size_t)(4 * (rows ? rows : 1)) * sizeof(double), (void **)&s, err, err_n));
    double *mean = s, *rstd = s + rows, *s1 = s + 2 * rows, *s2 = s + 3 * rows;
    cudaError_t e = cudaSuccess;
    if (x) e = ck_bn_stats(c->st, ng, grp, ch, hw, x->data, x->dtype, eps, mean, rstd);
    if (e == cudaSuccess) e = ck_bn_sums(c->st, ng, grp, ch, hw, dy->data, dy->dtype, x ? x->data : NULL, x ? x->dtype : 0, mean, rstd, s1, s2);
    if (e == cudaSuccess && dg) e = ck_put_channels(c->st, ng, ch, s2, dg->data, dg->dtype, c->acc);
    if (e == cudaSuccess && db) e = ck_put_channels(c->st, ng, ch, s1, db->data, db->dtype, c->acc);
    cu_scratch_free(c->st, s);
    CUDA_CHECK(e);
    return 0;
}

static int op_conv2d_grad_b(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0];
    if (rank_is(c, err, err_n, "input 0", dy, 4, "[n,o,ho,wo]") || expect(c, err, err_n, "output 0", &c->out[0], shape1(dy->shape[1]))) return -1;
    return channel_sums(c, err, err_n, dy, NULL, NULL, &c->out[0], 0, dy->shape[0]);
}

/* ---- pooling and batch norm (kernels_nn.cu) ---- */

static int pool_check(oc *c, char *err, size_t err_n, const rt_view *x, const char *xname, const rt_view *y, const char *yname, win_geom *g) {
    if (rank_is(c, err, err_n, xname, x, 4, "[n,c,h,w]")) return -1;
    *g = (win_geom){.n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3], .o = x->shape[1], .kh = c->a->win[0], .kw = c->a->win[1]};
    return window_check(c, err, err_n, g, y, yname);
}

static ck_win to_win(const win_geom *g) {
    return (ck_win){.n = g->n, .c = g->c, .h = g->h, .w = g->w, .kh = g->kh, .kw = g->kw, .sh = g->sh, .sw = g->sw, .ph = g->ph,
                    .pw = g->pw, .ho = g->ho, .wo = g->wo};
}

static int op_pool(oc *c, char *err, size_t err_n) {
    win_geom g;
    if (pool_check(c, err, err_n, &c->in[0], "input 0", &c->out[0], "output 0", &g)) return -1;
    ck_win w = to_win(&g);
    CUDA_CHECK(ck_pool(c->st, c->k->op == OP_MAXPOOL, &w, c->in[0].data, c->in[0].dtype, c->out[0].data, c->out[0].dtype, c->acc));
    return 0;
}

static int op_maxpool_grad(oc *c, char *err, size_t err_n) {
    win_geom g;
    if (pool_check(c, err, err_n, &c->in[1], "input 1", &c->in[0], "input 0", &g) || like(c, err, err_n, "output 0", &c->out[0], &c->in[1])) return -1;
    ck_win w = to_win(&g);
    CUDA_CHECK(ck_pool_grad(c->st, true, &w, c->in[0].data, c->in[0].dtype, c->in[1].data, c->in[1].dtype, c->out[0].data, c->out[0].dtype, c->acc));
    return 0;
}

static int op_avgpool_grad(oc *c, char *err, size_t err_n) {
    win_geom g;
    if (pool_check(c, err, err_n, &c->out[0], "output 0", &c->in[0], "input 0", &g)) return -1;
    ck_win w = to_win(&g);
    CUDA_CHECK(ck_pool_grad(c->st, false, &w, c->in[0].data, c->in[0].dtype, NULL, 0, c->out[0].data, c->out[0].dtype, c->acc));
    return 0;
}

// x [n,c,h,w] (input xin) and the per-channel inputs from `first` on; *grp is the samples per
// statistics group: attrs ghost, which must divide n, or all n.
static int bn_check(oc *c, char *err, size_t err_n, uint32_t xin, uint32_t first, int64_t *grp) {
    char what[32];
    snprintf(what, sizeof what, "input %u", xin);
    if (rank_is(c, err, err_n, what, &c->in[xin], 4, "[n,c,h,w]")) return -1;
    for (uint32_t i = first; i < c->nin; i++) {
        snprintf(what, sizeof what, "input %u", i);
        if (expect(c, err, err_n, what, &c->in[i], shape1(c->in[xin].shape[1]))) return -1;
    }
    int64_t n = c->in[xin].shape[0], ghost = c->a->i[PLAN_AI_GHOST];
    if (ghost < 0 || (ghost > 0 && n % ghost != 0))
        return fail(c, err, err_n, "input %u has %lld samples, not whole ghost batch groups of %lld", xin, (long long)n, (long long)ghost);
    *grp = ghost > 0 ? ghost : n;
    return 0;
}

static int op_batchnorm(oc *c, char *err, size_t err_n) {
    const rt_view *x = &c->in[0], *g = &c->in[1], *b = &c->in[2], *y = &c->out[0];
    int64_t grp;
    if (bn_check(c, err, err_n, 0, 1, &grp) || expect(c, err, err_n, "output 0", y, shape_of(x))) return -1;
    int64_t n = x->shape[0], ch = x->shape[1], hw = x->shape[2] * x->shape[3], ng = grp > 0 ? n / grp : 1, rows = ng * ch;
    double *s = NULL;
    CU_TRY(scratch(c, (size_t)(2 * (rows ? rows : 1)) * sizeof(double), (void **)&s, err, err_n));
    cudaError_t e = ck_bn_stats(c->st, ng, grp, ch, hw, x->data, x->dtype, c->a->f[PLAN_AF_EPS], s, s + rows);
    if (e == cudaSuccess)
        e = ck_bn_fwd(c->st, ng, grp, ch, hw, x->data, x->dtype, s, s + rows, g->data, g->dtype, b->data, b->dtype, y->data, y->dtype, c->acc);
    cu_scratch_free(c->st, s);
    CUDA_CHECK(e);
    return 0;
}

static int op_batchnorm_grad_x(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *x = &c->in[1], *g = &c->in[2], *dx = &c->out[0];
    int64_t grp;
    if (bn_check(c, err, err_n, 1, 2, &grp) || like(c, err, err_n, "input 0", dy, x) || like(c, err, err_n, "output 0", dx, x)) return -1;
    int64_t n = x->shape[0], ch = x->shape[1], hw = x->shape[2] * x->shape[3], ng = grp > 0 ? n / grp : 1, rows = ng * ch;
    double *s = NULL;
    CU_TRY(scratch(c, (size_t)(4 * (rows ? rows : 1)) * sizeof(double), (void **)&s, err, err_n));
    cudaError_t e = ck_bn_stats(c->st, ng, grp, ch, hw, x->data, x->dtype, c->a->f[PLAN_AF_EPS], s, s + rows);
    if (e == cudaSuccess) e = ck_bn_sums(c->st, ng, grp, ch, hw, dy->data, dy->dtype, x->data, x->dtype, s, s + rows, s + 2 * rows, s + 3 * rows);
    if (e == cudaSuccess)
        e = ck_bn_grad_x(c->st, ng, grp, ch, hw, dy->data, dy->dtype, x->data, x->dtype, s, s + rows, s + 2 * rows, s + 3 * rows, g->data,
                         g->dtype, dx->data, dx->dtype, c->acc);
    cu_scratch_free(c->st, s);
    CUDA_CHECK(e);
    return 0;
}

static int op_batchnorm_grad_w(oc *c, char *err, size_t err_n) {
    const rt_view *dy = &c->in[0], *x = &c->in[1];
    int64_t grp;
    if (bn_check(c, err, err_n, 1, 2, &grp) || like(c, err, err_n, "input 0", dy, x)) return -1;
    kshape per_channel = shape1(x->shape[1]);
    if (expect(c, err, err_n, "output 0", &c->out[0], per_channel) || expect(c, err, err_n, "output 1", &c->out[1], per_channel)) return -1;
    return channel_sums(c, err, err_n, dy, x, &c->out[0], &c->out[1], c->a->f[PLAN_AF_EPS], grp);
}

/* ---- optimizers ---- */

static int inplace_shapes(oc *c, char *err, size_t err_n) {
    for (uint32_t i = 1; i < c->nin; i++) {
        char what[32];
        snprintf(what, sizeof what, "input %u", i);
        if (like(c, err, err_n, what, &c->in[i], &c->in[0])) return -1;
    }
    return 0;
}

// Optimizer state (momentum, m, v, master weights) is f32.
static int state_f32(oc *c, char *err, size_t err_n, uint32_t from) {
    for (uint32_t i = from; i < c->nin; i++)
        if (c->in[i].dtype != CK_F32) return fail(c, err, err_n, "input %u (optimizer state) is %s; it must be f32", i, plan_dtype_name(c->in[i].dtype));
    return 0;
}

static int op_sgd(oc *c, char *err, size_t err_n) {
    double mom = c->a->f[PLAN_AF_MOMENTUM];
    uint32_t want = 2 + (mom > 0);
    if (c->nin != want && c->nin != want + 1)
        return fail(c, err, err_n, "%u inputs; with momentum %g it takes %u (p, g%s) or %u with the master weights", c->nin, mom, want,
                    mom > 0 ? ", momentum" : "", want + 1);
    if (inplace_shapes(c, err, err_n) || state_f32(c, err, err_n, 2)) return -1;
    float *w = c->nin > want ? c->in[want].data : NULL;
    if (!w && c->in[0].dtype != CK_F32) return fail(c, err, err_n, "a %s parameter needs f32 master weights", plan_dtype_name(c->in[0].dtype));
    CUDA_CHECK(ck_sgd(c->st, numel(&c->in[0]), c->in[0].data, c->in[0].dtype, c->in[1].data, c->in[1].dtype, mom > 0 ? c->in[2].data : NULL, w,
                      (float)c->a->f[PLAN_AF_LR], (float)c->a->f[PLAN_AF_WEIGHT_DECAY], (float)mom));
    return 0;
}

static int op_adamw(oc *c, char *err, size_t err_n) {
    if (inplace_shapes(c, err, err_n) || state_f32(c, err, err_n, 2)) return -1;
    if (c->k->step < 1) return fail(c, err, err_n, "step %llu: the steps count from 1", (unsigned long long)c->k->step);
    float *w = c->nin > 4 ? c->in[4].data : NULL;
    if (!w && c->in[0].dtype != CK_F32) return fail(c, err, err_n, "a %s parameter needs f32 master weights", plan_dtype_name(c->in[0].dtype));
    const plan_attrs *a = c->a;
    double t = (double)c->k->step, b1 = a->f[PLAN_AF_BETA1], b2 = a->f[PLAN_AF_BETA2];
    ck_adamw_args k = {.decay = (float)(1 - a->f[PLAN_AF_LR] * a->f[PLAN_AF_WEIGHT_DECAY]), .step = (float)(a->f[PLAN_AF_LR] / (1 - pow(b1, t))),
                       .rc2 = (float)(1 / sqrt(1 - pow(b2, t))), .eps = (float)a->f[PLAN_AF_EPS], .b1 = (float)b1, .b2 = (float)b2,
                       .cb1 = (float)(1 - b1), .cb2 = (float)(1 - b2)};
    CUDA_CHECK(ck_adamw(c->st, numel(&c->in[0]), c->in[0].data, c->in[0].dtype, c->in[1].data, c->in[1].dtype, c->in[2].data, c->in[3].data, w, &k));
    return 0;
}

/* ---- staging 16-bit operands to f32 ---- */

// Runs fn on f32 copies of the f16/bf16 float operands (ids stay as they are): inputs
// converted, outputs converted in when accumulating, and every output converted back.
static int staged(oc *c, op_fn *fn, char *err, size_t err_n) {
    uint32_t n = c->nin + c->nout;
    bool any = false;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t dt = i < c->nin ? c->in[i].dtype : c->out[i - c->nin].dtype;
        any |= dt == CK_F16 || dt == CK_BF16;
    }
    if (!any) return fn(c, err, err_n);
    rt_view v[PLAN_MAX_RANK * 16];
    void *tmp[PLAN_MAX_RANK * 16] = {0};
    if (n > sizeof v / sizeof *v) return fail(c, err, err_n, "too many operands");
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        const rt_view *src = i < c->nin ? &c->in[i] : &c->out[i - c->nin];
        v[i] = *src;
        if (src->dtype != CK_F16 && src->dtype != CK_BF16) continue;
        rc = scratch(c, (size_t)(numel(src) ? numel(src) : 1) * sizeof(float), &tmp[i], err, err_n);
        v[i].data = tmp[i], v[i].dtype = CK_F32;
        if (!rc && (i < c->nin || c->acc)) {
            ck_ew_args e = {.op = CK_EW_CONVERT, .n = numel(src), .y = tmp[i], .ydt = CK_F32, .a = src->data, .adt = src->dtype};
            rc = ew(c, &e, err, err_n);
        }
    }
    oc c2 = *c;
    c2.in = v, c2.out = v + c->nin, c2.staged16 = true;
    if (!rc) rc = fn(&c2, err, err_n);
    for (uint32_t j = 0; j < c->nout && !rc; j++) {
        const rt_view *dst = &c->out[j];
        if (!tmp[c->nin + j]) continue;
        ck_ew_args e = {.op = CK_EW_CONVERT, .n = numel(dst), .y = dst->data, .ydt = dst->dtype, .a = tmp[c->nin + j], .adt = CK_F32};
        rc = ew(c, &e, err, err_n);
    }
    for (uint32_t i = 0; i < n; i++) cu_scratch_free(c->st, tmp[i]);
    return rc;
}

// The general forms (a bias, cross lengths, grouped-query heads, another value width) and the
// FlashAttention form (attrs mode PLAN_ATTN_FLASH) run in ops_ext.c; q, k, v of one shape keep
// cuBLAS's path.
static bool attention_general(const oc *c) {
    uint32_t qi = c->k->op == OP_ATTENTION ? 0 : 1;
    return c->a->i[PLAN_AI_MODE] == PLAN_ATTN_FLASH || c->nin > qi + 3 || !shape_is(&c->in[qi + 1], shape_of(&c->in[qi])) || !shape_is(&c->in[qi + 2], shape_of(&c->in[qi]));
}
static int op_attention_any(oc *c, char *err, size_t err_n) {
    return attention_general(c) ? op_ext(c, err, err_n) : staged(c, op_attention, err, err_n);
}
static int op_attention_grad_any(oc *c, char *err, size_t err_n) {
    return attention_general(c) ? op_ext(c, err, err_n) : staged(c, op_attention_grad, err, err_n);
}
static int op_conv2d_any(oc *c, char *err, size_t err_n) { return staged(c, op_conv2d, err, err_n); }
static int op_conv2d_grad_x_any(oc *c, char *err, size_t err_n) { return staged(c, op_conv2d_grad_x, err, err_n); }
static int op_conv2d_grad_w_any(oc *c, char *err, size_t err_n) { return staged(c, op_conv2d_grad_w, err, err_n); }
static int op_embedding_grad_any(oc *c, char *err, size_t err_n) { return staged(c, op_embedding_grad, err, err_n); }
static int op_embedding_bag_grad_any(oc *c, char *err, size_t err_n) { return staged(c, op_embedding_bag_grad, err, err_n); }

/* ---- dispatch ---- */

static op_fn *const ops[OP_COUNT] = {
    [OP_MATMUL] = op_matmul,
    [OP_BMM] = op_bmm,
    [OP_LINEAR] = op_linear,
    [OP_ADD] = op_add_mul,
    [OP_MUL] = op_add_mul,
    [OP_SCALE] = op_unary,
    [OP_RELU] = op_unary,
    [OP_GELU] = op_unary,
    [OP_SILU] = op_unary,
    [OP_LAYERNORM] = op_norm,
    [OP_RMSNORM] = op_norm,
    [OP_SOFTMAX] = op_softmax,
    [OP_ATTENTION] = op_attention_any,
    [OP_EMBEDDING] = op_embedding,
    [OP_EMBEDDING_BAG] = op_embedding_bag,
    [OP_CONCAT] = op_concat,
    [OP_SPLIT] = op_split,
    [OP_SLICE] = op_slice,
    [OP_RESHAPE] = op_reshape,
    [OP_TRANSPOSE] = op_transpose,
    [OP_CONV2D] = op_conv2d_any,
    [OP_MAXPOOL] = op_pool,
    [OP_AVGPOOL] = op_pool,
    [OP_BATCHNORM] = op_batchnorm,
    [OP_DROPOUT] = op_dropout,
    [OP_CROSS_ENTROPY] = op_cross_entropy,
    [OP_MSE_LOSS] = op_pointwise_loss,
    [OP_BCE_LOGITS] = op_pointwise_loss,
    [OP_FILL] = op_fill,
    [OP_REDUCE_SUM] = op_reduce_sum,
    [OP_MATMUL_GRAD_A] = op_matmul_grad_a,
    [OP_MATMUL_GRAD_B] = op_matmul_grad_b,
    [OP_BMM_GRAD_A] = op_bmm_grad_a,
    [OP_BMM_GRAD_B] = op_bmm_grad_b,
    [OP_LINEAR_GRAD_X] = op_linear_grad_x,
    [OP_LINEAR_GRAD_W] = op_linear_grad_w,
    [OP_RELU_GRAD] = op_unary,
    [OP_GELU_GRAD] = op_unary,
    [OP_SILU_GRAD] = op_unary,
    [OP_LAYERNORM_GRAD_X] = op_norm_grad_x,
    [OP_LAYERNORM_GRAD_W] = op_norm_grad_w,
    [OP_RMSNORM_GRAD_X] = op_norm_grad_x,
    [OP_RMSNORM_GRAD_W] = op_norm_grad_w,
    [OP_SOFTMAX_GRAD] = op_softmax_grad,
    [OP_ATTENTION_GRAD] = op_attention_grad_any,
    [OP_EMBEDDING_GRAD] = op_embedding_grad_any,
    [OP_EMBEDDING_BAG_GRAD] = op_embedding_bag_grad_any,
    [OP_SLICE_GRAD] = op_slice_grad,
    [OP_CONV2D_GRAD_X] = op_conv2d_grad_x_any,
    [OP_CONV2D_GRAD_W] = op_conv2d_grad_w_any,
    [OP_CONV2D_GRAD_B] = op_conv2d_grad_b,
    [OP_MAXPOOL_GRAD] = op_maxpool_grad,
    [OP_AVGPOOL_GRAD] = op_avgpool_grad,
    [OP_BATCHNORM_GRAD_X] = op_batchnorm_grad_x,
    [OP_BATCHNORM_GRAD_W] = op_batchnorm_grad_w,
    [OP_DROPOUT_GRAD] = op_dropout,
    [OP_CROSS_ENTROPY_GRAD] = op_cross_entropy_grad,
    [OP_MSE_LOSS_GRAD] = op_pointwise_loss_grad,
    [OP_BCE_LOGITS_GRAD] = op_pointwise_loss_grad,
    [OP_SGD] = op_sgd,
    [OP_ADAMW] = op_adamw,
    [OP_SUB] = op_ext, [OP_DIV] = op_ext, [OP_MASKED_FILL] = op_ext, [OP_SIGMOID] = op_ext, [OP_TANH] = op_ext,
    [OP_EXP] = op_ext, [OP_LOG] = op_ext, [OP_GELU_ERF] = op_ext, [OP_RSQRT] = op_ext, [OP_SQRT] = op_ext, [OP_SIN] = op_ext,
    [OP_COS] = op_ext, [OP_POW] = op_ext, [OP_NE] = op_ext, [OP_SUM] = op_ext, [OP_MEAN] = op_ext, [OP_MAX] = op_ext,
    [OP_EXPAND] = op_ext, [OP_ONE_HOT] = op_ext, [OP_SIGMOID_GRAD] = op_ext, [OP_TANH_GRAD] = op_ext, [OP_EXP_GRAD] = op_ext,
    [OP_LOG_GRAD] = op_ext, [OP_GELU_ERF_GRAD] = op_ext, [OP_RSQRT_GRAD] = op_ext, [OP_SQRT_GRAD] = op_ext,
    [OP_SIN_GRAD] = op_ext, [OP_COS_GRAD] = op_ext, [OP_POW_GRAD] = op_ext, [OP_MAX_GRAD] = op_ext, [OP_TOPK] = op_ext,
    [OP_TOPK_GRAD] = op_ext, [OP_ATTENTION_GRAD_BIAS] = op_ext, [OP_ERF] = op_ext, [OP_ERF_GRAD] = op_ext,
    [OP_GATHER] = op_ext, [OP_INDEX_SELECT] = op_ext, [OP_GATHER_GRAD] = op_ext, [OP_INDEX_SELECT_GRAD] = op_ext,
    [OP_VOCAB_CE_STATS] = op_vocab_ce_stats, [OP_VOCAB_CE] = op_vocab_ce, [OP_VOCAB_CE_GRAD] = op_vocab_ce_grad,
};

// Operand j (inputs, then outputs) holds int32 ids or labels (the CPU kernels' int_operand).
static bool int_operand(uint32_t op, uint32_t j) {
    switch (op) {
    case OP_EMBEDDING: case OP_EMBEDDING_BAG: return j == 0;
    case OP_CROSS_ENTROPY: case OP_EMBEDDING_GRAD: case OP_EMBEDDING_BAG_GRAD: return j == 1;
    case OP_CROSS_ENTROPY_GRAD: case OP_VOCAB_CE_GRAD: return j == 2;
    case OP_VOCAB_CE_STATS: case OP_VOCAB_CE: return j == 1;
    case OP_NE: case OP_ONE_HOT: return j == 0;
    case OP_TOPK: return j == 2;
    case OP_TOPK_GRAD: return j == 1;
    case OP_GATHER: case OP_INDEX_SELECT: case OP_GATHER_GRAD: case OP_INDEX_SELECT_GRAD: return j == 1;
    default: return false;
    }
}

static bool moves_data(uint32_t op) {
    return op == OP_CONCAT || op == OP_SPLIT || op == OP_SLICE || op == OP_SLICE_GRAD || op == OP_RESHAPE || op == OP_TRANSPOSE;
}

static bool is_float(uint8_t dt) { return dt == CK_F32 || dt == CK_F16 || dt == CK_BF16; }

static int check_view(oc *c, char *err, size_t err_n, const rt_view *v, const char *side, uint32_t j, uint32_t operand) {
    if (v->rank > PLAN_MAX_RANK) return fail(c, err, err_n, "%s %u has rank %d; at most %d", side, j, v->rank, PLAN_MAX_RANK);
    for (int i = 0; i < v->rank; i++)
        if (v->shape[i] < 0 || v->start[i] < 0 || v->start[i] + v->shape[i] > v->full[i])
            return fail(c, err, err_n, "%s %u: dimension %d holds [%lld, %lld) of a logical size %lld", side, j, i, (long long)v->start[i],
                        (long long)(v->start[i] + v->shape[i]), (long long)v->full[i]);
    if (numel(v) > 0 && !v->data) return fail(c, err, err_n, "%s %u is %s but has no data", side, j, SHAPE(v));
    bool ok = moves_data(c->k->op) ? v->dtype == c->in[0].dtype && cu_dtype_bytes(v->dtype)
              : int_operand(c->k->op, operand) ? v->dtype == CK_I32 : is_float(v->dtype);
    if (!ok)
        return fail(c, err, err_n, "%s %u is %s; the cuda backend wants %s here", side, j, plan_dtype_name(v->dtype),
                    moves_data(c->k->op) ? "input 0's dtype" : int_operand(c->k->op, operand) ? "i32" : "f32, f16 or bf16");
    return 0;
}

static int check_arity(oc *c, char *err, size_t err_n) {
    const struct op_row *r = &op_rows[c->k->op];
    bool out_ok = r->out < 0 ? c->nout >= 1 : c->nout == (uint32_t)r->out;
    if (c->nin < (uint32_t)r->in_min || c->nin > (uint32_t)r->in_max || !out_ok)
        return fail(c, err, err_n, "%u inputs and %u outputs, but it takes %d to %d inputs and %s%d outputs", c->nin, c->nout, r->in_min,
                    r->in_max, r->out < 0 ? "at least " : "", r->out < 0 ? 1 : r->out);
    if ((c->nin && !c->in) || (c->nout && !c->out)) return fail(c, err, err_n, "its operand views are missing");
    return 0;
}

int cu_op_kernel(rt_backend *b, const rt_exec *x, const rt_kernel *k, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    if (err && err_n) err[0] = 0;
    if (!k) return cu_say(err, err_n, "no kernel given");
    if (k->op >= OP_COUNT || !ops[k->op]) return cu_say(err, err_n, "operator %u is not one the cuda backend runs", k->op);
    cudaStream_t st;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    oc c = {.cu = cu, .k = k, .a = &k->attrs, .in = k->in, .out = k->out, .nin = k->nin, .nout = k->nout, .name = op_rows[k->op].name,
            .acc = k->accumulate, .st = st, .blas = cu->blas[x->stream], .dnn = cu->dnn[x->stream]};
    if (check_arity(&c, err, err_n)) return -1;
    for (uint32_t j = 0; j < c.nin; j++)
        if (check_view(&c, err, err_n, &c.in[j], "input", j, j)) return -1;
    for (uint32_t j = 0; j < c.nout; j++)
        if (check_view(&c, err, err_n, &c.out[j], "output", j, c.nin + j)) return -1;
    if (!cu->prof) return ops[k->op](&c, err, err_n);
    CU_TRY(cu_prof_begin(cu, st, k, c.name, err, err_n));
    if (ops[k->op](&c, err, err_n)) return -1;
    CU_TRY(cu_prof_end(cu, st, err, err_n));
    return 0;
}

int cu_op_copy(rt_backend *b, const rt_exec *x, void *dst, const rt_box *db, const void *src, const rt_box *sb, uint64_t bytes,
               uint32_t dtype, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    if (!bytes) return 0;
    if (!db || !sb || !src) {
        if (src) CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice, st));
        else CUDA_CHECK(cudaMemsetAsync(dst, 0, (size_t)bytes, st));
        return 0;
    }
    int64_t n = 1;
    for (int d = 0; d < db->rank; d++) n *= db->shape[d];
    size_t es = cu_dtype_bytes((int)dtype);
    if (!es || (uint64_t)n * es != bytes)
        return cu_say(err, err_n, "copy: %llu bytes for a piece of %lld elements of dtype %u", (unsigned long long)bytes, (long long)n, dtype);
    if (n <= 0) return 0;
    ck_box d = cu_box(db), s = cu_box(sb);
    CUDA_CHECK(ck_box_move(st, dst, &d, src, &s, (int)dtype, CK_BOX_SET));
    return 0;
}

void cu_ops_free(cu_state *cu) {
    free(cu->convs);
    cu->convs = NULL, cu->n_convs = cu->cap_convs = 0;
}
