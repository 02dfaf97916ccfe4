/*
 * unit_kernels.c: the CPU backend's kernels (runtime/cpu/), checked against themselves in
 * double precision and against what the operators mean.
 *
 *  - Gradients: for every forward operator with a gradient rule, random inputs and a random
 *    upstream gradient dy; the analytic gradient of each differentiable input, computed by the
 *    backward operators exactly as compiler/autodiff.c wires them (linear's bias through
 *    reduce_sum, mul's broadcast operand through mul then reduce_sum, concat's through split,
 *    split's through concat with fill's zeros for an output no gradient reaches, transpose's
 *    through the inverse permutation, ...), must match central differences (h = 1e-6) of
 *    sum(dy * forward(x)) within 1e-6 relative, all in rt_cpu_kernel_f64.
 *  - f32 against f64: every kernel call these tests make (forward, backward and optimizer
 *    steps alike) also runs in rt_cpu_kernel on the same values rounded to float; the results
 *    agree within 1e-4 of the output's largest magnitude. At the end every row of
 *    runtime/ops.def must have run this way at least once.
 *  - Splits (rt.h): linear's input split over k and conv2d's over its input channels, into two
 *    pieces with the bias counted `once`, sum to the whole; add leaves out an addend whose
 *    `once` is false; a row-split embedding (and embedding_bag) table sums to the whole lookup
 *    and its gradient pieces are the whole gradient's rows; losses split over their batch sum
 *    to the whole loss and their gradient pieces are the whole gradient's; dropout's mask on
 *    pieces (rows, columns, a middle dimension) is the whole mask's, dropout_grad draws the
 *    same mask, another step or micro-batch another. Ghost batch norm (attrs ghost) matches a
 *    by-hand reference of per-group statistics, and pieces of whole groups give the whole's
 *    output and dx, their dgamma and dbeta summing to the whole's.
 *  - Accumulate: outputs z + y instead of y, for kernels of every kind (GEMM, element-wise,
 *    scatter, multi-output, losses, data movement).
 *  - Optimizer steps against hand-computed SGD (with and without momentum, master weights) and
 *    AdamW updates over two steps; rt_normal's moments.
 *  - Errors: shapes that do not fit the operator, unknown operators, wrong arity and dtypes,
 *    pieces outside their tensor, ids and labels out of range, bad attributes: -1 and a message
 *    naming the operator, never a crash.
 */
#include "rt.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

enum {
#define OP(E, name, imin, imax, nout, ann, flags) OP_##E,
#include "ops.def"
#undef OP
    OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
#define OP(E, name, imin, imax, nout, ann, flags) #name,
#include "ops.def"
#undef OP
};

/* ---- tensors: doubles (or int32 ids), with a float copy for the f32 runs ---- */

typedef struct tensor {
    int rank;
    int64_t shape[PLAN_MAX_RANK], start[PLAN_MAX_RANK], full[PLAN_MAX_RANK];
    int64_t n;
    bool ints, once;
    int dtype;      // -1: the natural one (0, or 3 for ids); else forced (error tests)
    bool no_data;   // error tests: a view without data
    double *d;
    int32_t *i;
    float *f;
} tensor;

#define MAX_TENSORS 4096
static tensor *pool[MAX_TENSORS];
static int npool;
static uint64_t rng;

static double urand(void) { return rt_uniform(rt_key(0x5eed, rng++)) * 2 - 1; }

static tensor *tnew(bool ints, int rank, const int64_t *shape) {
    tensor *t = calloc(1, sizeof *t);
    t->rank = rank, t->ints = ints, t->once = true, t->dtype = -1, t->n = 1;
    for (int i = 0; i < rank; i++) t->shape[i] = t->full[i] = shape[i], t->n *= shape[i];
    t->d = calloc((size_t)t->n + 1, sizeof(double));
    t->i = calloc((size_t)t->n + 1, sizeof(int32_t));
    t->f = calloc((size_t)t->n + 1, sizeof(float));
    if (npool < MAX_TENSORS) pool[npool++] = t;
    return t;
}

static tensor *vtensor(bool ints, int rank, va_list ap) {
    int64_t s[PLAN_MAX_RANK];
    for (int i = 0; i < rank; i++) s[i] = va_arg(ap, int);
    return tnew(ints, rank, s);
}

static tensor *zeros(int rank, ...) {
    va_list ap;
    va_start(ap, rank);
    tensor *t = vtensor(false, rank, ap);
    va_end(ap);
    return t;
}

// Uniform in (-1, 1).
static tensor *randu(int rank, ...) {
    va_list ap;
    va_start(ap, rank);
    tensor *t = vtensor(false, rank, ap);
    va_end(ap);
    for (int64_t e = 0; e < t->n; e++) t->d[e] = urand();
    return t;
}

// int32 ids in [0, high).
static tensor *ids(int high, int rank, ...) {
    va_list ap;
    va_start(ap, rank);
    tensor *t = vtensor(true, rank, ap);
    va_end(ap);
    for (int64_t e = 0; e < t->n; e++) t->i[e] = (int32_t)((urand() + 1) / 2 * high) % high;
    return t;
}

static tensor *zeros_like(const tensor *t) { return tnew(t->ints, t->rank, t->shape); }

static tensor *randu_like(const tensor *t) {
    tensor *r = zeros_like(t);
    for (int64_t e = 0; e < r->n; e++) r->d[e] = urand();
    return r;
}

static tensor *copy_of(const tensor *t) {
    tensor *r = zeros_like(t);
    memcpy(r->d, t->d, sizeof(double) * (size_t)t->n);
    memcpy(r->i, t->i, sizeof(int32_t) * (size_t)t->n);
    memcpy(r->start, t->start, sizeof t->start);
    memcpy(r->full, t->full, sizeof t->full);
    return r;
}

// Elements [lo, hi) of dimension dim of t, as a piece of t (start and full set).
static tensor *piece(const tensor *t, int dim, int64_t lo, int64_t hi) {
    int64_t s[PLAN_MAX_RANK];
    memcpy(s, t->shape, sizeof s);
    s[dim] = hi - lo;
    tensor *p = tnew(t->ints, t->rank, s);
    memcpy(p->full, t->shape, sizeof p->full);
    p->start[dim] = lo;
    int64_t inner = 1, outer = 1;
    for (int i = dim + 1; i < t->rank; i++) inner *= t->shape[i];
    for (int i = 0; i < dim; i++) outer *= t->shape[i];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < (hi - lo) * inner; k++) {
            int64_t from = (o * t->shape[dim] + lo) * inner + k, to = o * (hi - lo) * inner + k;
            p->d[to] = t->d[from], p->i[to] = t->i[from];
        }
    return p;
}

static double max_abs_diff(const tensor *a, const tensor *b) {
    double w = a->n == b->n ? 0 : INFINITY;
    for (int64_t e = 0; e < a->n && e < b->n; e++) w = fmax(w, fabs(a->d[e] - b->d[e]));
    return w;
}
static bool close_to(const tensor *a, const tensor *b, double tol) { return max_abs_diff(a, b) <= tol; }

static void free_all(void) {
    for (int k = 0; k < npool; k++) free(pool[k]->d), free(pool[k]->i), free(pool[k]->f), free(pool[k]);
}

/* ---- running kernels ---- */

typedef struct call {
    uint32_t op;
    plan_attrs a;
    int nin, nout;
    tensor *in[12], *out[8];
    bool acc;
    uint64_t step;  // 0: 3
    bool step0;     // error tests: step 0 after all
    uint32_t mb;
} call;

static char err[1024];
static int covered[OP_COUNT];

static rt_view view_of(const tensor *t, bool f32) {
    rt_view v = {.rank = (uint8_t)t->rank, .once = t->once};
    v.dtype = (uint8_t)(t->dtype >= 0 ? t->dtype : t->ints ? 3 : 0);
    v.data = t->no_data ? NULL : t->ints ? (void *)t->i : f32 ? (void *)t->f : (void *)t->d;
    for (int i = 0; i < PLAN_MAX_RANK; i++) {
        v.shape[i] = i < t->rank ? t->shape[i] : 1;
        v.start[i] = i < t->rank ? t->start[i] : 0;
        v.full[i] = i < t->rank ? t->full[i] : 1;
    }
    return v;
}

static int exec(const call *c, bool f32) {
    rt_view in[12], out[8];
    for (int i = 0; i < c->nin; i++) in[i] = view_of(c->in[i], f32);
    for (int i = 0; i < c->nout; i++) out[i] = view_of(c->out[i], f32);
    rt_kernel k = {.op = c->op, .attrs = c->a, .nin = (uint32_t)c->nin, .nout = (uint32_t)c->nout, .in = in, .out = out,
                   .accumulate = c->acc, .seed = 42, .step = c->step0 ? 0 : c->step ? c->step : 3, .mb = c->mb, .layer = 2};
    err[0] = 0;
    return f32 ? rt_cpu_kernel(&k, err, sizeof err) : rt_cpu_kernel_f64(&k, err, sizeof err);
}

static void to_float(tensor *t) {
    for (int64_t e = 0; e < t->n; e++) t->f[e] = (float)t->d[e];
}

// f32 against f64 on one tensor: within 1e-4 of its largest magnitude.
static bool agree(const call *c, const char *side, int j, const tensor *t) {
    double scale = 1, worst = 0;
    int64_t at = 0;
    for (int64_t e = 0; e < t->n; e++) scale = fmax(scale, fabs(t->d[e]));
    for (int64_t e = 0; e < t->n; e++)
        if (fabs(t->f[e] - t->d[e]) > worst) worst = fabs(t->f[e] - t->d[e]), at = e;
    if (worst <= 1e-4 * scale) return true;
    fprintf(stderr, "%s: %s %d: f32 %.9g but f64 %.9g at element %lld\n", op_names[c->op], side, j, t->f[at], t->d[at],
            (long long)at);
    return false;
}

// Runs c in f64 and in f32 (from the same values) and compares every output (and, for the
// in-place optimizer steps, every input). Failures count.
static void run(const call *c) {
    for (int i = 0; i < c->nin; i++) to_float(c->in[i]);
    for (int i = 0; i < c->nout; i++) to_float(c->out[i]);
    int rc64 = exec(c, false);
    if (rc64) fprintf(stderr, "%s (f64): %s\n", op_names[c->op], err);
    EXPECT(rc64 == 0);
    int rc32 = exec(c, true);
    if (rc32) fprintf(stderr, "%s (f32): %s\n", op_names[c->op], err);
    EXPECT(rc32 == 0);
    if (rc64 || rc32) return;
    bool ok = true;
    for (int i = 0; i < c->nout; i++) ok &= agree(c, "output", i, c->out[i]);
    if (c->op == OP_SGD || c->op == OP_ADAMW)
        for (int i = 0; i < c->nin; i++) ok &= agree(c, "input", i, c->in[i]);
    EXPECT(ok);
    covered[c->op]++;
}

// Calls of one, two or three inputs and one output.
static call c1(uint32_t op, plan_attrs a, tensor *x, tensor *y) {
    return (call){.op = op, .a = a, .nin = 1, .in = {x}, .nout = 1, .out = {y}};
}
static call c2(uint32_t op, plan_attrs a, tensor *x0, tensor *x1, tensor *y) {
    return (call){.op = op, .a = a, .nin = 2, .in = {x0, x1}, .nout = 1, .out = {y}};
}
static call c3(uint32_t op, plan_attrs a, tensor *x0, tensor *x1, tensor *x2, tensor *y) {
    return (call){.op = op, .a = a, .nin = 3, .in = {x0, x1, x2}, .nout = 1, .out = {y}};
}

/* ---- gradient checks ---- */

// sum over the forward's outputs of dy . y, by the f64 kernels.
static double objective(const call *fwd, tensor *const *dy) {
    if (exec(fwd, false)) fprintf(stderr, "%s: %s\n", op_names[fwd->op], err);
    double s = 0;
    for (int o = 0; o < fwd->nout; o++)
        for (int64_t e = 0; e < dy[o]->n; e++) s += dy[o]->d[e] * fwd->out[o]->d[e];
    return s;
}

// The analytic gradient `grad` of forward input `input` against central differences.
static void gradcheck(const char *what, const call *fwd, tensor *const *dy, int input, const tensor *grad) {
    tensor *x = fwd->in[input];
    const double h = 1e-6;
    double worst = 0, num_at = 0, ana_at = 0;
    int64_t at = -1;
    bool shape_ok = grad->n == x->n;
    for (int64_t e = 0; shape_ok && e < x->n; e++) {
        double keep = x->d[e];
        x->d[e] = keep + h;
        double fp = objective(fwd, dy);
        x->d[e] = keep - h;
        double fm = objective(fwd, dy);
        x->d[e] = keep;
        double num = (fp - fm) / (2 * h), rel = fabs(num - grad->d[e]) / fmax(1, fabs(num));
        if (rel > worst) worst = rel, at = e, num_at = num, ana_at = grad->d[e];
    }
    bool ok = shape_ok && worst <= 1e-6;
    if (!ok)
        fprintf(stderr, "gradient of %s input %d: element %lld: analytic %.12g, numeric %.12g (%lld elements, grad %lld)\n", what,
                input, (long long)at, ana_at, num_at, (long long)x->n, (long long)grad->n);
    EXPECT(ok);
}

// The upstream gradients of a forward call's outputs, random.
static void upstream(const call *fwd, tensor **dy) {
    for (int o = 0; o < fwd->nout; o++) dy[o] = randu_like(fwd->out[o]);
}

static void grad_matmul(bool bmm) {
    tensor *a = randu(3, 2, 3, 4), *b = bmm ? randu(3, 2, 4, 5) : randu(2, 4, 5);
    call f = {.op = bmm ? OP_BMM : OP_MATMUL, .nin = 2, .in = {a, b}, .nout = 1, .out = {zeros(3, 2, 3, 5)}};
    tensor *dy[1], *da = zeros_like(a), *db = zeros_like(b);
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = bmm ? OP_BMM_GRAD_A : OP_MATMUL_GRAD_A, .nin = 2, .in = {dy[0], b}, .nout = 1, .out = {da}});
    run(&(call){.op = bmm ? OP_BMM_GRAD_B : OP_MATMUL_GRAD_B, .nin = 2, .in = {a, dy[0]}, .nout = 1, .out = {db}});
    gradcheck(op_names[f.op], &f, dy, 0, da);
    gradcheck(op_names[f.op], &f, dy, 1, db);
}

static void grad_linear(void) {
    tensor *x = randu(3, 2, 3, 4), *w = randu(2, 5, 4), *b = randu(1, 5);
    call f = {.op = OP_LINEAR, .nin = 3, .in = {x, w, b}, .nout = 1, .out = {zeros(3, 2, 3, 5)}};
    tensor *dy[1], *dx = zeros_like(x), *dw = zeros_like(w), *dbias = zeros_like(b);
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = OP_LINEAR_GRAD_X, .nin = 2, .in = {dy[0], w}, .nout = 1, .out = {dx}});
    run(&(call){.op = OP_LINEAR_GRAD_W, .nin = 2, .in = {dy[0], x}, .nout = 1, .out = {dw}});
    run(&(call){.op = OP_REDUCE_SUM, .nin = 1, .in = {dy[0]}, .nout = 1, .out = {dbias}});
    gradcheck("linear", &f, dy, 0, dx);
    gradcheck("linear", &f, dy, 1, dw);
    gradcheck("linear", &f, dy, 2, dbias);
}

// add: da = dy, db = reduce_sum(dy); mul: da = mul(dy, b), db = reduce_sum(mul(dy, a)).
static void grad_binary(uint32_t op, bool bcast) {
    tensor *a = randu(3, 2, 3, 4), *b = bcast ? randu(2, 3, 4) : randu(3, 2, 3, 4);
    call f = {.op = op, .nin = 2, .in = {a, b}, .nout = 1, .out = {zeros(3, 2, 3, 4)}};
    tensor *dy[1], *da = zeros_like(a), *db = zeros_like(b), *t = zeros_like(a);
    run(&f);
    upstream(&f, dy);
    if (op == OP_ADD) {
        memcpy(da->d, dy[0]->d, sizeof(double) * (size_t)da->n);
        t = dy[0];
    } else {
        run(&(call){.op = OP_MUL, .nin = 2, .in = {dy[0], b}, .nout = 1, .out = {da}});
        run(&(call){.op = OP_MUL, .nin = 2, .in = {dy[0], a}, .nout = 1, .out = {t}});
    }
    if (bcast) run(&(call){.op = OP_REDUCE_SUM, .nin = 1, .in = {t}, .nout = 1, .out = {db}});
    else memcpy(db->d, t->d, sizeof(double) * (size_t)db->n);
    gradcheck(op_names[op], &f, dy, 0, da);
    gradcheck(op_names[op], &f, dy, 1, db);
}

// scale, relu, gelu, silu, dropout: one input, one output of its shape.
static void grad_unary(uint32_t op, uint32_t grad_op, plan_attrs a) {
    tensor *x = randu(2, 4, 5);
    call f = {.op = op, .a = a, .nin = 1, .in = {x}, .nout = 1, .out = {zeros(2, 4, 5)}};
    tensor *dy[1], *dx = zeros_like(x);
    run(&f);
    upstream(&f, dy);
    bool with_x = op == OP_RELU || op == OP_GELU || op == OP_SILU;
    run(&(call){.op = grad_op, .a = a, .nin = with_x ? 2 : 1, .in = {dy[0], x}, .nout = 1, .out = {dx}});
    gradcheck(op_names[op], &f, dy, 0, dx);
}

static void grad_norm(uint32_t op) {
    bool ln = op == OP_LAYERNORM;
    tensor *x = randu(3, 2, 3, 6), *g = randu(1, 6), *b = randu(1, 6);
    plan_attrs a = {.f[PLAN_AF_EPS] = 1e-5};
    call f = {.op = op, .a = a, .nin = ln ? 3 : 2, .in = {x, g, b}, .nout = 1, .out = {zeros(3, 2, 3, 6)}};
    tensor *dy[1], *dx = zeros_like(x), *dg = zeros_like(g), *db = zeros_like(b);
    run(&f);
    upstream(&f, dy);
    run(&(call){
        .op = ln ? OP_LAYERNORM_GRAD_X : OP_RMSNORM_GRAD_X, .a = a, .nin = 3, .in = {dy[0], x, g}, .nout = 1, .out = {dx}});
    run(&(call){.op = ln ? OP_LAYERNORM_GRAD_W : OP_RMSNORM_GRAD_W, .a = a, .nin = 2, .in = {dy[0], x}, .nout = ln ? 2 : 1,
                .out = {dg, db}});
    gradcheck(op_names[op], &f, dy, 0, dx);
    gradcheck(op_names[op], &f, dy, 1, dg);
    if (ln) gradcheck(op_names[op], &f, dy, 2, db);
}

static void grad_softmax(void) {
    tensor *x = randu(3, 2, 3, 5), *y = zeros(3, 2, 3, 5);
    for (int64_t e = 0; e < x->n; e++) x->d[e] *= 3;
    call f = {.op = OP_SOFTMAX, .nin = 1, .in = {x}, .nout = 1, .out = {y}};
    tensor *dy[1], *dx = zeros_like(x), *ysaved;
    run(&f);
    ysaved = copy_of(y);
    upstream(&f, dy);
    run(&(call){.op = OP_SOFTMAX_GRAD, .nin = 2, .in = {dy[0], ysaved}, .nout = 1, .out = {dx}});
    gradcheck("softmax", &f, dy, 0, dx);
}

// p > 0: dropout of the probabilities; the mask is a function of the step, so the central
// differences see the same one as the backward regenerates.
static int attn_mode; // PLAN_ATTN_*: the form the attention checks run in (both, in turn)

static void grad_attention(bool causal, double scale, double p) {
    tensor *q = randu(4, 2, 4, 2, 3), *k = randu(4, 2, 4, 2, 3), *v = randu(4, 2, 4, 2, 3);
    plan_attrs a = {.f[PLAN_AF_SCALE] = scale, .f[PLAN_AF_P] = p, .i[PLAN_AI_SEED] = 9, .i[PLAN_AI_CAUSAL] = causal, .i[PLAN_AI_MODE] = attn_mode};
    call f = {.op = OP_ATTENTION, .a = a, .nin = 3, .in = {q, k, v}, .nout = 1, .out = {zeros(4, 2, 4, 2, 3)}};
    tensor *dy[1], *dq = zeros_like(q), *dk = zeros_like(k), *dv = zeros_like(v);
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = OP_ATTENTION_GRAD, .a = a, .nin = 4, .in = {dy[0], q, k, v}, .nout = 3, .out = {dq, dk, dv}});
    const char *what = p > 0 ? (causal ? "attention (causal, dropout)" : "attention (dropout)") : causal ? "attention (causal)" : "attention";
    for (int i = 0; i < 3; i++) gradcheck(what, &f, dy, i, (tensor *[]){dq, dk, dv}[i]);
}

// Attention's dropout mask, read out: q = k = 0 make the probabilities 1/t, and v [b,t,n,t] with
// v[.., j, .., j] = t makes output element (b, i, h, j) the mask's factor at (b, h, i, j): 0 or
// 1/(1-p), kept at a rate near 1 - p. Pieces of the batch, the queries, the heads and the keys
// (v's rows and columns alike, so a piece of t keys still reads its factors) draw the same
// factors as the whole: the mask is keyed on the global index.
static tensor *attn_ident(int64_t b, int64_t t, int64_t n, int64_t t0, int64_t tf) {
    tensor *v = zeros(4, (int)b, (int)t, (int)n, (int)t);
    for (int64_t e = 0; e < v->n; e++) {
        int64_t col = e % t, row = e / (t * n) % t;
        v->d[e] = col == row ? (double)t : 0;
    }
    v->start[1] = t0, v->full[1] = tf; // a piece of the keys (its columns are local)
    return v;
}

// t with its dimension 1 in zigzag order of z chunks (stored row i is logical row
// plan_zigzag_pos(i)), a tensor of its own.
static tensor *zigzag_rows(const tensor *t, int z) {
    tensor *p = tnew(t->ints, t->rank, t->shape);
    int64_t n = t->shape[1], inner = t->n / t->shape[0] / n;
    for (int64_t o = 0; o < t->shape[0]; o++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t x = 0; x < inner; x++) {
                int64_t to = (o * n + i) * inner + x, from = (o * n + plan_zigzag_pos(i, n, (uint32_t)z)) * inner + x;
                p->d[to] = t->d[from], p->i[to] = t->i[from];
            }
    return p;
}

// Ring attention's steps (attention_block, attention_block_grad; runtime/cpu/attention_ring.c) on
// cp ranks simulated in turn, the k/v blocks passed by hand as the shift collective would: each
// rank's output and gradients equal its rows of one-device attention (causal, dropout, grouped
// kv heads), and both precisions agree (run). zigzag: the sequence in zigzag order of 2 cp
// chunks (attrs i[END]; rank c holds logical chunks c and 2 cp - 1 - c), every tensor's rows
// permuted so (the one-device results too), the steps masking and dropping by logical positions.
static void ring_attention_steps(int cp, bool zigzag) {
    enum { B = 2, S = 8, N = 4, M = 2, D = 3, E = 2 };
    plan_attrs a = {.f[PLAN_AF_P] = 0.2, .i[PLAN_AI_SEED] = 5, .i[PLAN_AI_CAUSAL] = 1};
    tensor *q = randu(4, B, S, N, D), *k = randu(4, B, S, M, D), *v = randu(4, B, S, M, E), *y = zeros(4, B, S, N, E);
    run(&(call){.op = OP_ATTENTION, .a = a, .nin = 3, .in = {q, k, v}, .nout = 1, .out = {y}});
    tensor *dy = randu_like(y), *dq = zeros_like(q), *dk = zeros_like(k), *dv = zeros_like(v);
    run(&(call){.op = OP_ATTENTION_GRAD, .a = a, .nin = 4, .in = {dy, q, k, v}, .nout = 3, .out = {dq, dk, dv}});
    if (zigzag) {
        tensor **all[] = {&q, &k, &v, &y, &dy, &dq, &dk, &dv};
        for (size_t x = 0; x < sizeof all / sizeof *all; x++) *all[x] = zigzag_rows(*all[x], 2 * cp);
        a.i[PLAN_AI_END] = 2 * cp;
    }
    const int L = S / cp;
    tensor *qc[4], *kc[4], *vc[4], *yc[4], *lc[4], *hk[4], *hv[4], *hdk[4], *hdv[4], *gq[4];
    for (int c = 0; c < cp; c++) qc[c] = piece(q, 1, c * L, c * L + L), kc[c] = piece(k, 1, c * L, c * L + L), vc[c] = piece(v, 1, c * L, c * L + L);
    for (int j = 0; j < cp; j++)
        for (int c = 0; c < cp; c++) {
            int from = ((c - j) % cp + cp) % cp;
            tensor *o = zeros(4, B, L, N, E), *l = zeros(3, B, N, L);
            call st = {.op = OP_ATTENTION_BLOCK, .a = a, .nin = 5, .in = {qc[c], kc[c], vc[c], kc[from], vc[from]}, .nout = 2, .out = {o, l}};
            st.a.i[PLAN_AI_START] = j;
            if (j) st.nin = 7, st.in[5] = yc[c], st.in[6] = lc[c];
            run(&st);
            yc[c] = o, lc[c] = l;
        }
    for (int c = 0; c < cp; c++) EXPECT(close_to(yc[c], piece(y, 1, c * L, c * L + L), 1e-12));
    tensor *dyc[4];
    for (int c = 0; c < cp; c++) dyc[c] = piece(dy, 1, c * L, c * L + L), hk[c] = kc[c], hv[c] = vc[c];
    for (int j = 0; j < cp; j++) {
        tensor *nk[4], *nv[4], *ndk[4], *ndv[4];
        for (int c = 0; c < cp; c++) { // the pass before step j: rank c now holds rank c-1's block and sums
            int prev = (c + cp - 1) % cp;
            nk[c] = j ? hk[prev] : hk[c], nv[c] = j ? hv[prev] : hv[c], ndk[c] = j ? hdk[prev] : NULL, ndv[c] = j ? hdv[prev] : NULL;
        }
        for (int c = 0; c < cp; c++) {
            call st = {.op = OP_ATTENTION_BLOCK_GRAD, .a = a, .nin = 8, .in = {dyc[c], qc[c], kc[c], vc[c], yc[c], lc[c], nk[c], nv[c]},
                       .nout = 3, .out = {zeros_like(qc[c]), zeros_like(kc[c]), zeros_like(vc[c])}};
            st.a.i[PLAN_AI_START] = j;
            if (j) st.nin = 11, st.in[8] = gq[c], st.in[9] = ndk[c], st.in[10] = ndv[c];
            run(&st);
            hk[c] = nk[c], hv[c] = nv[c], gq[c] = st.out[0], hdk[c] = st.out[1], hdv[c] = st.out[2];
        }
    }
    for (int c = 0; c < cp; c++) { // the last pass brings each block's sums home
        int prev = (c + cp - 1) % cp; // holds block c after the last step
        EXPECT(close_to(gq[c], piece(dq, 1, c * L, c * L + L), 1e-12));
        EXPECT(close_to(hdk[prev], piece(dk, 1, c * L, c * L + L), 1e-12));
        EXPECT(close_to(hdv[prev], piece(dv, 1, c * L, c * L + L), 1e-12));
    }
}

// Vocabulary-parallel cross_entropy (vocab_ce_stats, vocab_ce, vocab_ce_grad; compiler/vocab.c)
// on k ranks simulated in turn, each holding classes [c V/k, (c+1) V/k) of the logits: the
// pieces' statistics laid rank-major as the all_gather leaves them give cross_entropy's loss, and
// each rank's gradient is its columns of cross_entropy_grad's (ignore_index and the sum too).
static void vocab_ce_pieces(int k, int64_t mode) {
    enum { B = 2, S = 3, V = 12 };
    plan_attrs a = {.f[PLAN_AF_SCALE] = -100, .i[PLAN_AI_MODE] = mode};
    tensor *logits = randu(3, B, S, V), *lab = ids(V, 2, B, S), *loss = zeros(0), *dy = randu(0), *dl = zeros_like(logits);
    for (int64_t e = 0; e < logits->n; e++) logits->d[e] *= 8; // rows whose max is far from the others'
    if (mode & 1) lab->i[2] = -100;
    run(&(call){.op = OP_CROSS_ENTROPY, .a = a, .nin = 2, .in = {logits, lab}, .nout = 1, .out = {loss}});
    run(&(call){.op = OP_CROSS_ENTROPY_GRAD, .a = a, .nin = 3, .in = {dy, logits, lab}, .nout = 1, .out = {dl}});
    const int64_t w = V / k, rows = B * S;
    tensor *all = zeros(1, (int)(3 * rows * k));
    for (int c = 0; c < k; c++) {
        tensor *st = zeros(1, (int)(3 * rows));
        run(&(call){.op = OP_VOCAB_CE_STATS, .a = a, .nin = 2, .in = {piece(logits, 2, c * w, c * w + w), lab}, .nout = 1, .out = {st}});
        memcpy(all->d + c * 3 * rows, st->d, sizeof(double) * (size_t)(3 * rows));
    }
    tensor *vl = zeros(0);
    run(&(call){.op = OP_VOCAB_CE, .a = a, .nin = 2, .in = {all, lab}, .nout = 1, .out = {vl}});
    EXPECT(close_to(vl, loss, 1e-12));
    for (int c = 0; c < k; c++) {
        tensor *x = piece(logits, 2, c * w, c * w + w), *g = zeros_like(x);
        memcpy(g->start, x->start, sizeof g->start), memcpy(g->full, x->full, sizeof g->full);
        run(&(call){.op = OP_VOCAB_CE_GRAD, .a = a, .nin = 4, .in = {dy, x, lab, all}, .nout = 1, .out = {g}});
        EXPECT(close_to(g, piece(dl, 2, c * w, c * w + w), 1e-12));
    }
}

static void attention_dropout_mask(void) {
    const double p = 0.25;
    plan_attrs a = {.f[PLAN_AF_P] = p, .i[PLAN_AI_SEED] = 3};
    tensor *q = zeros(4, 2, 6, 3, 2), *k = zeros(4, 2, 16, 3, 2), *y = zeros(4, 2, 6, 3, 16);
    run(&(call){.op = OP_ATTENTION, .a = a, .nin = 3, .in = {q, k, attn_ident(2, 16, 3, 0, 16)}, .nout = 1, .out = {y}});
    int64_t kept = 0, bad = 0;
    for (int64_t e = 0; e < y->n; e++) kept += y->d[e] != 0, bad += y->d[e] != 0 && fabs(y->d[e] - 1 / (1 - p)) > 1e-12;
    EXPECT(bad == 0 && kept > 0.68 * (double)y->n && kept < 0.82 * (double)y->n); // 432 of 576 expected, sd 10
    for (int dim = 0; dim < 3; dim++) { // batch, queries, heads: q's and the output's pieces
        tensor *qp = piece(q, dim, 1, 2), *kp = dim == 2 ? piece(k, 2, 1, 2) : dim == 0 ? piece(k, 0, 1, 2) : k;
        tensor *vp = attn_ident(dim == 0 ? 1 : 2, 16, dim == 2 ? 1 : 3, 0, 16), *yp = zeros_like(piece(y, dim, 1, 2));
        if (dim != 1) vp->start[dim] = 1, vp->full[dim] = dim == 0 ? 2 : 3;
        run(&(call){.op = OP_ATTENTION, .a = a, .nin = 3, .in = {qp, kp, vp}, .nout = 1, .out = {yp}});
        EXPECT(close_to(yp, piece(y, dim, 1, 2), 1e-12));
    }
    tensor *kp = piece(k, 1, 8, 16), *yp = zeros(4, 2, 6, 3, 8); // keys 8..15: the output's columns 8..15
    run(&(call){.op = OP_ATTENTION, .a = a, .nin = 3, .in = {q, kp, attn_ident(2, 8, 3, 8, 16)}, .nout = 1, .out = {yp}});
    EXPECT(close_to(yp, piece(y, 3, 8, 16), 1e-12));
    a.f[PLAN_AF_P] = 0; // no dropout: the plain average
    run(&(call){.op = OP_ATTENTION, .a = a, .nin = 3, .in = {q, k, attn_ident(2, 16, 3, 0, 16)}, .nout = 1, .out = {y}});
    for (int64_t e = 0; e < y->n; e++) bad += fabs(y->d[e] - 1) > 1e-12;
    EXPECT(bad == 0);
}

static void grad_embedding(bool bag) {
    tensor *id = bag ? ids(6, 2, 3, 2) : ids(7, 2, 2, 3), *t = bag ? randu(2, 6, 4) : randu(2, 7, 4);
    call f = {.op = bag ? OP_EMBEDDING_BAG : OP_EMBEDDING, .nin = 2, .in = {id, t}, .nout = 1,
              .out = {bag ? zeros(2, 3, 4) : zeros(3, 2, 3, 4)}};
    tensor *dy[1], *dt = zeros_like(t);
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = bag ? OP_EMBEDDING_BAG_GRAD : OP_EMBEDDING_GRAD, .nin = 2, .in = {dy[0], id}, .nout = 1, .out = {dt}});
    gradcheck(op_names[f.op], &f, dy, 1, dt);
}

// concat's gradient is split (the same axis), split's is concat.
static void grad_concat_split(void) {
    plan_attrs ax1 = {.i[PLAN_AI_AXIS] = 1}, ax0 = {.i[PLAN_AI_AXIS] = 0};
    tensor *a = randu(2, 2, 3), *b = randu(2, 2, 2);
    call f = {.op = OP_CONCAT, .a = ax1, .nin = 2, .in = {a, b}, .nout = 1, .out = {zeros(2, 2, 5)}};
    tensor *dy[3], *da = zeros_like(a), *db = zeros_like(b);
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = OP_SPLIT, .a = ax1, .nin = 1, .in = {dy[0]}, .nout = 2, .out = {da, db}});
    gradcheck("concat", &f, dy, 0, da);
    gradcheck("concat", &f, dy, 1, db);

    tensor *x = randu(3, 4, 3, 2), *dx = zeros_like(x);
    call s = c1(OP_SPLIT, ax0, x, zeros(3, 1, 3, 2));
    s.nout = 3, s.out[1] = zeros(3, 2, 3, 2), s.out[2] = zeros(3, 1, 3, 2);
    run(&s);
    upstream(&s, dy);
    // No gradient flows into the middle output: autodiff fills zeros for it.
    run(&(call){.op = OP_FILL, .nout = 1, .out = {dy[1]}});
    run(&(call){.op = OP_CONCAT, .a = ax0, .nin = 3, .in = {dy[0], dy[1], dy[2]}, .nout = 1, .out = {dx}});
    gradcheck("split", &s, dy, 0, dx);
}

static void grad_slice(void) {
    plan_attrs a = {.i[PLAN_AI_AXIS] = 1, .i[PLAN_AI_START] = 1, .i[PLAN_AI_END] = 4};
    tensor *x = randu(3, 3, 6, 2);
    call f = {.op = OP_SLICE, .a = a, .nin = 1, .in = {x}, .nout = 1, .out = {zeros(3, 3, 3, 2)}};
    tensor *dy[1], *dx = zeros_like(x);
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = OP_SLICE_GRAD, .a = a, .nin = 1, .in = {dy[0]}, .nout = 1, .out = {dx}});
    gradcheck("slice", &f, dy, 0, dx);
}

static void grad_reshape_transpose(void) {
    tensor *x = randu(3, 2, 3, 4), *dy[1], *dx = zeros_like(x);
    call r = {.op = OP_RESHAPE, .nin = 1, .in = {x}, .nout = 1, .out = {zeros(2, 6, 4)}};
    run(&r);
    upstream(&r, dy);
    run(&(call){.op = OP_RESHAPE, .nin = 1, .in = {dy[0]}, .nout = 1, .out = {dx}});
    gradcheck("reshape", &r, dy, 0, dx);

    plan_attrs p = {.perm = {2, 0, 1}}, inv = {.perm = {1, 2, 0}};
    call t = {.op = OP_TRANSPOSE, .a = p, .nin = 1, .in = {x}, .nout = 1, .out = {zeros(3, 4, 2, 3)}};
    tensor *dx2 = zeros_like(x);
    run(&t);
    upstream(&t, dy);
    run(&(call){.op = OP_TRANSPOSE, .a = inv, .nin = 1, .in = {dy[0]}, .nout = 1, .out = {dx2}});
    gradcheck("transpose", &t, dy, 0, dx2);
    // A transpose moves what it should: y[i][j][k] = x[j][k][i].
    EXPECT(t.out[0]->d[(1 * 2 + 1) * 3 + 2] == x->d[(1 * 3 + 2) * 4 + 1]);
}

static void grad_conv2d(int stride, int pad, bool bias) {
    tensor *x = randu(4, 2, 3, 5, 6), *w = randu(4, 4, 3, 3, 2), *b = randu(1, 4);
    int ho = (5 + 2 * pad - 3) / stride + 1, wo = (6 + 2 * pad - 2) / stride + 1;
    plan_attrs a = {.win = {0, 0, stride, stride, pad, pad}};
    call f = {.op = OP_CONV2D, .a = a, .nin = bias ? 3 : 2, .in = {x, w, b}, .nout = 1, .out = {zeros(4, 2, 4, ho, wo)}};
    tensor *dy[1], *dx = zeros_like(x), *dw = zeros_like(w), *db = zeros_like(b);
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = OP_CONV2D_GRAD_X, .a = a, .nin = 2, .in = {dy[0], w}, .nout = 1, .out = {dx}});
    run(&(call){.op = OP_CONV2D_GRAD_W, .a = a, .nin = 2, .in = {dy[0], x}, .nout = 1, .out = {dw}});
    run(&(call){.op = OP_CONV2D_GRAD_B, .a = a, .nin = 1, .in = {dy[0]}, .nout = 1, .out = {db}});
    gradcheck("conv2d", &f, dy, 0, dx);
    gradcheck("conv2d", &f, dy, 1, dw);
    if (bias) gradcheck("conv2d", &f, dy, 2, db);
}

static void grad_pool(uint32_t op, int k, int stride, int pad) {
    tensor *x = randu(4, 2, 2, 5, 5);
    int ho = (5 + 2 * pad - k) / stride + 1;
    plan_attrs a = {.win = {k, k, stride, stride, pad, pad}};
    call f = {.op = op, .a = a, .nin = 1, .in = {x}, .nout = 1, .out = {zeros(4, 2, 2, ho, ho)}};
    tensor *dy[1], *dx = zeros_like(x);
    run(&f);
    upstream(&f, dy);
    if (op == OP_MAXPOOL) run(&(call){.op = OP_MAXPOOL_GRAD, .a = a, .nin = 2, .in = {dy[0], x}, .nout = 1, .out = {dx}});
    else run(&(call){.op = OP_AVGPOOL_GRAD, .a = a, .nin = 1, .in = {dy[0]}, .nout = 1, .out = {dx}});
    gradcheck(op_names[op], &f, dy, 0, dx);
}

// ghost > 0: ghost batch norm, statistics per run of `ghost` samples of the n.
static void grad_batchnorm(int n, int64_t ghost) {
    tensor *x = randu(4, n, 2, 2, 3), *g = randu(1, 2), *b = randu(1, 2);
    plan_attrs a = {.f[PLAN_AF_EPS] = 1e-5, .i[PLAN_AI_GHOST] = ghost};
    call f = {.op = OP_BATCHNORM, .a = a, .nin = 3, .in = {x, g, b}, .nout = 1, .out = {zeros(4, n, 2, 2, 3)}};
    tensor *dy[1], *dx = zeros_like(x), *dg = zeros_like(g), *db = zeros_like(b);
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = OP_BATCHNORM_GRAD_X, .a = a, .nin = 3, .in = {dy[0], x, g}, .nout = 1, .out = {dx}});
    run(&(call){.op = OP_BATCHNORM_GRAD_W, .a = a, .nin = 2, .in = {dy[0], x}, .nout = 2, .out = {dg, db}});
    gradcheck("batchnorm", &f, dy, 0, dx);
    gradcheck("batchnorm", &f, dy, 1, dg);
    gradcheck("batchnorm", &f, dy, 2, db);
}

// The losses: the seed dy is a scalar.
static void grad_losses(void) {
    tensor *logits = randu(3, 2, 3, 5), *lab = ids(5, 2, 2, 3), *dy[1];
    call ce = {.op = OP_CROSS_ENTROPY, .nin = 2, .in = {logits, lab}, .nout = 1, .out = {zeros(0)}};
    tensor *dl = zeros_like(logits);
    run(&ce);
    upstream(&ce, dy);
    run(&(call){.op = OP_CROSS_ENTROPY_GRAD, .nin = 3, .in = {dy[0], logits, lab}, .nout = 1, .out = {dl}});
    gradcheck("cross_entropy", &ce, dy, 0, dl);

    tensor *a = randu(2, 3, 4), *b = randu(2, 3, 4), *da = zeros_like(a), *db = zeros_like(b);
    call mse = {.op = OP_MSE_LOSS, .nin = 2, .in = {a, b}, .nout = 1, .out = {zeros(0)}};
    run(&mse);
    upstream(&mse, dy);
    run(&(call){.op = OP_MSE_LOSS_GRAD, .nin = 3, .in = {dy[0], a, b}, .nout = 1, .out = {da}});
    run(&(call){.op = OP_MSE_LOSS_GRAD, .nin = 3, .in = {dy[0], b, a}, .nout = 1, .out = {db}});
    gradcheck("mse_loss", &mse, dy, 0, da);
    gradcheck("mse_loss", &mse, dy, 1, db);

    tensor *x = randu(2, 3, 4), *y = randu(2, 3, 4), *dx = zeros_like(x);
    for (int64_t e = 0; e < x->n; e++) x->d[e] *= 4, y->d[e] = (y->d[e] + 1) / 2;
    call bce = {.op = OP_BCE_LOGITS, .nin = 2, .in = {x, y}, .nout = 1, .out = {zeros(0)}};
    run(&bce);
    upstream(&bce, dy);
    run(&(call){.op = OP_BCE_LOGITS_GRAD, .nin = 3, .in = {dy[0], x, y}, .nout = 1, .out = {dx}});
    gradcheck("bce_logits", &bce, dy, 0, dx);
}

static void gradients(void) {
    grad_matmul(false);
    grad_matmul(true);
    grad_linear();
    grad_binary(OP_ADD, true);
    grad_binary(OP_ADD, false);
    grad_binary(OP_MUL, true);
    grad_binary(OP_MUL, false);
    grad_unary(OP_SCALE, OP_SCALE, (plan_attrs){.f[PLAN_AF_SCALE] = 1.7});
    grad_unary(OP_RELU, OP_RELU_GRAD, (plan_attrs){0});
    grad_unary(OP_GELU, OP_GELU_GRAD, (plan_attrs){0});
    grad_unary(OP_SILU, OP_SILU_GRAD, (plan_attrs){0});
    grad_unary(OP_DROPOUT, OP_DROPOUT_GRAD, (plan_attrs){.f[PLAN_AF_P] = 0.3, .i[PLAN_AI_SEED] = 7});
    grad_norm(OP_LAYERNORM);
    grad_norm(OP_RMSNORM);
    grad_softmax();
    for (attn_mode = PLAN_ATTN_UNFUSED; attn_mode <= PLAN_ATTN_FLASH; attn_mode++) {
        grad_attention(true, 0, 0);
        grad_attention(false, 0, 0);
        grad_attention(true, 0.7, 0);
        grad_attention(true, 0, 0.3);
        grad_attention(false, 0.7, 0.5);
    }
    attn_mode = PLAN_ATTN_UNFUSED;
    attention_dropout_mask();
    ring_attention_steps(2, false);
    ring_attention_steps(4, false);
    ring_attention_steps(2, true);
    ring_attention_steps(4, true);
    vocab_ce_pieces(2, 0);
    vocab_ce_pieces(3, 1);
    vocab_ce_pieces(4, 3);
    grad_embedding(false);
    grad_embedding(true);
    grad_concat_split();
    grad_slice();
    grad_reshape_transpose();
    grad_conv2d(1, 0, true);
    grad_conv2d(2, 1, true);
    grad_conv2d(2, 2, false);
    grad_pool(OP_MAXPOOL, 2, 2, 0);
    grad_pool(OP_MAXPOOL, 3, 2, 1);
    grad_pool(OP_AVGPOOL, 2, 2, 1);
    grad_pool(OP_AVGPOOL, 3, 1, 1);
    grad_batchnorm(3, 0);
    grad_batchnorm(6, 2);
    grad_batchnorm(6, 3);
    grad_losses();
}

/* ---- splits: pieces against the whole ---- */


// a + b of two tensors of one shape.
static tensor *sum2(const tensor *a, const tensor *b) {
    tensor *s = zeros_like(a);
    for (int64_t e = 0; e < s->n; e++) s->d[e] = a->d[e] + b->d[e];
    return s;
}

// linear with x split over k: each piece holds partial sums; the bias counts on one only.
static void split_linear(void) {
    tensor *x = randu(2, 3, 8), *w = randu(2, 5, 8), *b = randu(1, 5), *y = zeros(2, 3, 5);
    run(&(call){.op = OP_LINEAR, .nin = 3, .in = {x, w, b}, .nout = 1, .out = {y}});
    tensor *x0 = piece(x, 1, 0, 4), *x1 = piece(x, 1, 4, 8), *w0 = piece(w, 1, 0, 4), *w1 = piece(w, 1, 4, 8);
    tensor *b1 = copy_of(b), *y0 = zeros(2, 3, 5), *y1 = zeros(2, 3, 5);
    b1->once = false;
    run(&(call){.op = OP_LINEAR, .nin = 3, .in = {x0, w0, b}, .nout = 1, .out = {y0}});
    run(&(call){.op = OP_LINEAR, .nin = 3, .in = {x1, w1, b1}, .nout = 1, .out = {y1}});
    EXPECT(close_to(sum2(y0, y1), y, 1e-12));
    // conv2d with its input channels split: the same, with conv2d's bias.
    tensor *cx = randu(4, 2, 4, 5, 5), *cw = randu(4, 3, 4, 3, 3), *cb = randu(1, 3), *cb1 = copy_of(cb);
    tensor *cy = zeros(4, 2, 3, 3, 3), *cy0 = zeros_like(cy), *cy1 = zeros_like(cy);
    plan_attrs win = {.win = {0, 0, 1, 1, 0, 0}};
    cb1->once = false;
    call whole = c3(OP_CONV2D, win, cx, cw, cb, cy);
    call first = c3(OP_CONV2D, win, piece(cx, 1, 0, 1), piece(cw, 1, 0, 1), cb, cy0);
    call rest = c3(OP_CONV2D, win, piece(cx, 1, 1, 4), piece(cw, 1, 1, 4), cb1, cy1);
    run(&whole), run(&first), run(&rest);
    EXPECT(close_to(sum2(cy0, cy1), cy, 1e-12));
    // add: an addend whose `once` is false is left out.
    tensor *a = randu(2, 3, 5), *ya = zeros(2, 3, 5);
    run(&(call){.op = OP_ADD, .nin = 2, .in = {a, b1}, .nout = 1, .out = {ya}});
    EXPECT(close_to(ya, a, 0));
}

// A table split by rows: the pieces' lookups sum to the whole; their gradients are its rows.
static void split_embedding(bool bag) {
    tensor *id = bag ? ids(8, 2, 3, 4) : ids(8, 2, 2, 5), *t = randu(2, 8, 4);
    tensor *y = bag ? zeros(2, 3, 4) : zeros(3, 2, 5, 4), *dt = zeros_like(t);
    uint32_t op = bag ? OP_EMBEDDING_BAG : OP_EMBEDDING, gop = bag ? OP_EMBEDDING_BAG_GRAD : OP_EMBEDDING_GRAD;
    run(&(call){.op = op, .nin = 2, .in = {id, t}, .nout = 1, .out = {y}});
    tensor *dy = randu_like(y);
    run(&(call){.op = gop, .nin = 2, .in = {dy, id}, .nout = 1, .out = {dt}});
    tensor *t0 = piece(t, 0, 0, 3), *t1 = piece(t, 0, 3, 8), *y0 = zeros_like(y), *y1 = zeros_like(y);
    run(&(call){.op = op, .nin = 2, .in = {id, t0}, .nout = 1, .out = {y0}});
    run(&(call){.op = op, .nin = 2, .in = {id, t1}, .nout = 1, .out = {y1}});
    EXPECT(close_to(sum2(y0, y1), y, 1e-12));
    tensor *d0 = piece(dt, 0, 0, 3), *d1 = piece(dt, 0, 3, 8), *g0 = copy_of(d0), *g1 = copy_of(d1);
    run(&(call){.op = gop, .nin = 2, .in = {dy, id}, .nout = 1, .out = {g0}});
    run(&(call){.op = gop, .nin = 2, .in = {dy, id}, .nout = 1, .out = {g1}});
    EXPECT(close_to(g0, d0, 1e-12) && close_to(g1, d1, 1e-12));
}

// A loss split over its batch: the pieces sum to the whole loss, their gradients are its pieces.
static void split_loss(uint32_t op, uint32_t gop, int dim) {
    bool ce = op == OP_CROSS_ENTROPY;
    tensor *a = randu(2, 4, 6), *b = ce ? ids(6, 1, 4) : randu(2, 4, 6), *l = zeros(0), *seed = randu(0), *da = zeros_like(a);
    if (op == OP_BCE_LOGITS)
        for (int64_t e = 0; e < b->n; e++) b->d[e] = (b->d[e] + 1) / 2;
    run(&(call){.op = op, .nin = 2, .in = {a, b}, .nout = 1, .out = {l}});
    run(&(call){.op = gop, .nin = 3, .in = {seed, a, b}, .nout = 1, .out = {da}});
    tensor *lsum = zeros(0);
    for (int k = 0; k < 2; k++) {
        int64_t lo = k ? 1 : 0, hi = k ? a->shape[dim] : 1; // uneven pieces
        tensor *ap = piece(a, dim, lo, hi), *bp = piece(b, dim, lo, hi), *lp = zeros(0), *gp = zeros_like(ap);
        run(&(call){.op = op, .nin = 2, .in = {ap, bp}, .nout = 1, .out = {lp}});
        run(&(call){.op = gop, .nin = 3, .in = {seed, ap, bp}, .nout = 1, .out = {gp}});
        lsum->d[0] += lp->d[0];
        EXPECT(close_to(gp, piece(da, dim, lo, hi), 1e-12));
    }
    EXPECT(fabs(lsum->d[0] - l->d[0]) <= 1e-12);
}

// Dropout's output on a piece of x is the same piece of its output on the whole of x.
static void split_dropout_on(tensor *x, int dim, int64_t lo, int64_t hi, const tensor *whole_y, plan_attrs a) {
    tensor *xp = piece(x, dim, lo, hi), *yp = zeros_like(xp);
    run(&(call){.op = OP_DROPOUT, .a = a, .nin = 1, .in = {xp}, .nout = 1, .out = {yp}});
    EXPECT(close_to(yp, piece(whole_y, dim, lo, hi), 0));
}

static void split_dropout(void) {
    plan_attrs a = {.f[PLAN_AF_P] = 0.4, .i[PLAN_AI_SEED] = 11};
    tensor *x = randu(3, 3, 4, 5), *y = zeros(3, 3, 4, 5);
    run(&(call){.op = OP_DROPOUT, .a = a, .nin = 1, .in = {x}, .nout = 1, .out = {y}});
    for (int dim = 0; dim < 3; dim++) {
        split_dropout_on(x, dim, 0, 1, y, a);
        split_dropout_on(x, dim, 1, 3, y, a);
    }
    // dropout_grad draws the same mask; the kept elements are scaled by 1 / (1 - p).
    tensor *ones = zeros(2, 100, 100), *mask = zeros(2, 100, 100), *gmask = zeros(2, 100, 100);
    for (int64_t e = 0; e < ones->n; e++) ones->d[e] = 1;
    run(&(call){.op = OP_DROPOUT, .a = a, .nin = 1, .in = {ones}, .nout = 1, .out = {mask}});
    run(&(call){.op = OP_DROPOUT_GRAD, .a = a, .nin = 1, .in = {ones}, .nout = 1, .out = {gmask}});
    EXPECT(close_to(mask, gmask, 0));
    int64_t dropped = 0, bad = 0;
    for (int64_t e = 0; e < mask->n; e++) {
        dropped += mask->d[e] == 0;
        bad += mask->d[e] != 0 && fabs(mask->d[e] - 1 / 0.6) > 1e-12;
    }
    EXPECT(bad == 0 && dropped > 3800 && dropped < 4200);
    // Another step, micro-batch or seed gives another mask.
    tensor *other = zeros(2, 100, 100);
    run(&(call){.op = OP_DROPOUT, .a = a, .nin = 1, .in = {ones}, .nout = 1, .out = {other}, .step = 4});
    EXPECT(!close_to(mask, other, 0));
    run(&(call){.op = OP_DROPOUT, .a = a, .nin = 1, .in = {ones}, .nout = 1, .out = {other}, .mb = 1});
    EXPECT(!close_to(mask, other, 0));
}

// t with dimension dim in zigzag order of z chunks (stored index i holds logical index
// plan_zigzag_pos(i)), a tensor of its own.
static tensor *zigzag_along(const tensor *t, int dim, int z) {
    tensor *p = zeros_like(t);
    int64_t n = t->shape[dim], inner = 1, outer = t->n / n;
    for (int i = dim + 1; i < t->rank; i++) inner *= t->shape[i];
    outer /= inner;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t x = 0; x < inner; x++)
                p->d[(o * n + i) * inner + x] = t->d[(o * n + plan_zigzag_pos(i, n, (uint32_t)z)) * inner + x];
    return p;
}

// Dropout along a dimension in zigzag order (attrs i[AXIS] the dimension, i[END] the chunks;
// --cp-form zigzag), a middle one and the last (the kernel's runs): on the stored tensor, whole
// or in pieces (cp 4's pairs of chunks, cp 4 x tp 2's single chunks under sequence parallelism,
// a piece along another dimension), it keeps the elements that one device keeps at the logical
// positions, and so does dropout_grad; without the attrs it draws another mask.
static void zigzag_dropout(void) {
    plan_attrs a = {.f[PLAN_AF_P] = 0.4, .i[PLAN_AI_SEED] = 11};
    for (int dim = 1; dim < 3; dim++) {
        tensor *x = randu(3, 2, 16, 16), *y = zeros_like(x), *got = zeros_like(x);
        run(&(call){.op = OP_DROPOUT, .a = a, .nin = 1, .in = {x}, .nout = 1, .out = {y}});
        plan_attrs za = a;
        za.i[PLAN_AI_AXIS] = dim, za.i[PLAN_AI_END] = 8;
        tensor *xs = zigzag_along(x, dim, 8), *ys = zigzag_along(y, dim, 8);
        run(&(call){.op = OP_DROPOUT, .a = za, .nin = 1, .in = {xs}, .nout = 1, .out = {got}});
        EXPECT(close_to(got, ys, 0));
        run(&(call){.op = OP_DROPOUT_GRAD, .a = za, .nin = 1, .in = {xs}, .nout = 1, .out = {got}});
        EXPECT(close_to(got, ys, 0));
        run(&(call){.op = OP_DROPOUT, .a = a, .nin = 1, .in = {xs}, .nout = 1, .out = {got}});
        EXPECT(!close_to(got, ys, 0));
        for (int64_t lo = 0; lo < 16; lo += 4) split_dropout_on(xs, dim, lo, lo + 4, ys, za);
        for (int64_t lo = 0; lo < 16; lo += 2) split_dropout_on(xs, dim, lo, lo + 2, ys, za);
        split_dropout_on(xs, 3 - dim, 4, 12, ys, za);
    }
}

// Ghost batch norm against a direct reference: output element (i, ch, p) is (x - mean) /
// sqrt(var + eps) gamma + beta over the group of sample i (biased variance, by hand here); and
// pieces of whole groups (two devices' shares) give the whole's output and dx, and dgamma,
// dbeta sum to the whole's.
static void split_ghost_batchnorm(void) {
    const int n = 6, G = 2, C = 3, HW = 4;
    tensor *x = randu(4, n, C, 2, 2), *g = randu(1, C), *b = randu(1, C), *y = zeros_like(x), *dy = randu_like(x);
    plan_attrs a = {.f[PLAN_AF_EPS] = 1e-5, .i[PLAN_AI_GHOST] = G};
    run(&(call){.op = OP_BATCHNORM, .a = a, .nin = 3, .in = {x, g, b}, .nout = 1, .out = {y}});
    double worst = 0;
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < C; ch++) {
            double m = 0, v = 0;
            for (int k = i / G * G; k < i / G * G + G; k++)
                for (int p = 0; p < HW; p++) m += x->d[(k * C + ch) * HW + p] / (G * HW);
            for (int k = i / G * G; k < i / G * G + G; k++)
                for (int p = 0; p < HW; p++) v += pow(x->d[(k * C + ch) * HW + p] - m, 2) / (G * HW);
            for (int p = 0; p < HW; p++) {
                int64_t at = (i * C + ch) * HW + p;
                worst = fmax(worst, fabs((x->d[at] - m) / sqrt(v + 1e-5) * g->d[ch] + b->d[ch] - y->d[at]));
            }
        }
    EXPECT(worst < 1e-12);
    // Without ghost the same x gives other values (the statistics are over all 6 samples).
    tensor *y_all = zeros_like(x);
    run(&(call){.op = OP_BATCHNORM, .a.f[PLAN_AF_EPS] = 1e-5, .nin = 3, .in = {x, g, b}, .nout = 1, .out = {y_all}});
    EXPECT(!close_to(y_all, y, 1e-3));
    tensor *dx = zeros_like(x), *dg = zeros_like(g), *db = zeros_like(b);
    run(&(call){.op = OP_BATCHNORM_GRAD_X, .a = a, .nin = 3, .in = {dy, x, g}, .nout = 1, .out = {dx}});
    run(&(call){.op = OP_BATCHNORM_GRAD_W, .a = a, .nin = 2, .in = {dy, x}, .nout = 2, .out = {dg, db}});
    tensor *sg = zeros_like(g), *sb = zeros_like(b);
    for (int lo = 0; lo < n; lo += 2 * G) { // pieces of 4 and 2 samples
        int hi = lo + 2 * G < n ? lo + 2 * G : n;
        tensor *xp = piece(x, 0, lo, hi), *dyp = piece(dy, 0, lo, hi), *yp = zeros_like(xp), *dxp = zeros_like(xp);
        tensor *dgp = zeros_like(g), *dbp = zeros_like(b);
        run(&(call){.op = OP_BATCHNORM, .a = a, .nin = 3, .in = {xp, g, b}, .nout = 1, .out = {yp}});
        run(&(call){.op = OP_BATCHNORM_GRAD_X, .a = a, .nin = 3, .in = {dyp, xp, g}, .nout = 1, .out = {dxp}});
        run(&(call){.op = OP_BATCHNORM_GRAD_W, .a = a, .nin = 2, .in = {dyp, xp}, .nout = 2, .out = {dgp, dbp}});
        EXPECT(close_to(yp, piece(y, 0, lo, hi), 1e-12));
        EXPECT(close_to(dxp, piece(dx, 0, lo, hi), 1e-12));
        sg = sum2(sg, dgp), sb = sum2(sb, dbp);
    }
    EXPECT(close_to(sg, dg, 1e-12) && close_to(sb, db, 1e-12));
}

static void splits(void) {
    split_ghost_batchnorm();
    split_linear();
    split_embedding(false);
    split_embedding(true);
    split_loss(OP_CROSS_ENTROPY, OP_CROSS_ENTROPY_GRAD, 0);
    split_loss(OP_MSE_LOSS, OP_MSE_LOSS_GRAD, 0);
    split_loss(OP_MSE_LOSS, OP_MSE_LOSS_GRAD, 1);
    split_loss(OP_BCE_LOGITS, OP_BCE_LOGITS_GRAD, 1);
    split_dropout();
    zigzag_dropout();
}

/* ---- accumulate ---- */

// With accumulate, every output becomes z + y where z is what it held and y the plain result.
static void accumulates(call c) {
    tensor *y[8], *z[8];
    run(&c);
    for (int o = 0; o < c.nout; o++) {
        y[o] = copy_of(c.out[o]);
        z[o] = randu_like(c.out[o]);
        memcpy(c.out[o]->d, z[o]->d, sizeof(double) * (size_t)z[o]->n);
    }
    c.acc = true;
    run(&c);
    bool ok = true;
    for (int o = 0; o < c.nout; o++) ok &= close_to(c.out[o], sum2(z[o], y[o]), 1e-12);
    if (!ok) fprintf(stderr, "accumulate: %s\n", op_names[c.op]);
    EXPECT(ok);
}

static void accumulate(void) {
    const plan_attrs none = {0}, eps = {.f[PLAN_AF_EPS] = 1e-5}, pad = {.win = {0, 0, 1, 1, 1, 1}};
    tensor *x = randu(2, 3, 4), *w = randu(2, 5, 4), *b = randu(1, 5), *dy = randu(2, 3, 5), *q = randu(4, 1, 3, 2, 2);
    accumulates(c3(OP_LINEAR, none, x, w, b, zeros(2, 3, 5)));
    accumulates(c2(OP_LINEAR_GRAD_W, none, dy, x, zeros(2, 5, 4)));
    accumulates(c2(OP_MATMUL_GRAD_B, none, x, dy, zeros(2, 4, 5)));
    accumulates(c2(OP_ADD, none, dy, b, zeros(2, 3, 5)));
    accumulates(c1(OP_REDUCE_SUM, none, dy, zeros(1, 5)));
    accumulates((call){.op = OP_FILL, .a.f[PLAN_AF_SCALE] = 0.25, .nout = 1, .out = {zeros(2, 2, 3)}});
    call lnw = c2(OP_LAYERNORM_GRAD_W, eps, dy, randu(2, 3, 5), zeros(1, 5));
    lnw.nout = 2, lnw.out[1] = zeros(1, 5);
    accumulates(lnw);
    accumulates(c2(OP_EMBEDDING_GRAD, none, randu(2, 6, 3), ids(4, 1, 6), zeros(2, 4, 3)));
    accumulates(c2(OP_CONV2D_GRAD_W, pad, randu(4, 2, 3, 4, 4), randu(4, 2, 2, 4, 4), zeros(4, 3, 2, 3, 3)));
    call ag = c3(OP_ATTENTION_GRAD, (plan_attrs){.i[PLAN_AI_CAUSAL] = 1}, randu(4, 1, 3, 2, 2), q, q, zeros(4, 1, 3, 2, 2));
    ag.nin = 4, ag.in[3] = q, ag.nout = 3, ag.out[1] = zeros(4, 1, 3, 2, 2), ag.out[2] = zeros(4, 1, 3, 2, 2);
    accumulates(ag);
    accumulates(c2(OP_CROSS_ENTROPY, none, randu(2, 3, 4), ids(4, 1, 3), zeros(0)));
    accumulates(c2(OP_CONCAT, none, x, x, zeros(2, 6, 4)));
    plan_attrs sl = {.i = {[PLAN_AI_AXIS] = 1, [PLAN_AI_START] = 1, [PLAN_AI_END] = 6}};
    accumulates(c1(OP_SLICE_GRAD, sl, dy, zeros(2, 3, 7)));
    accumulates(c1(OP_TRANSPOSE, (plan_attrs){.perm = {1, 0}}, x, zeros(2, 4, 3)));
    accumulates(c1(OP_DROPOUT, (plan_attrs){.f[PLAN_AF_P] = 0.5}, x, zeros(2, 3, 4)));
}

/* ---- fill, and the optimizer steps against hand-computed updates ---- */

static void fill_and_reduce(void) {
    tensor *y = zeros(2, 2, 3);
    run(&(call){.op = OP_FILL, .a.f[PLAN_AF_SCALE] = 0.125, .nout = 1, .out = {y}});
    bool ok = true;
    for (int64_t e = 0; e < y->n; e++) ok &= y->d[e] == 0.125;
    EXPECT(ok);
    tensor *x = randu(3, 2, 3, 4), *s = zeros(2, 3, 4);
    run(&(call){.op = OP_REDUCE_SUM, .nin = 1, .in = {x}, .nout = 1, .out = {s}});
    EXPECT(fabs(s->d[5] - (x->d[5] + x->d[17])) <= 1e-15);
}

static void optim_sgd(void) {
    double lr = 0.1, wd = 0.01, mom = 0.9;
    tensor *p = randu(1, 6), *g = randu(1, 6), *p0 = copy_of(p);
    run(&(call){.op = OP_SGD, .a.f = {[PLAN_AF_LR] = lr, [PLAN_AF_WEIGHT_DECAY] = wd}, .nin = 2, .in = {p, g}});
    bool ok = true;
    for (int e = 0; e < 6; e++) ok &= fabs(p->d[e] - (p0->d[e] - lr * (g->d[e] + wd * p0->d[e]))) <= 1e-15;
    EXPECT(ok);
    // Momentum over two steps.
    tensor *q = copy_of(p0), *buf = zeros(1, 6), *g2 = randu(1, 6);
    plan_attrs a = {.f = {[PLAN_AF_LR] = lr, [PLAN_AF_WEIGHT_DECAY] = wd, [PLAN_AF_MOMENTUM] = mom}};
    run(&(call){.op = OP_SGD, .a = a, .nin = 3, .in = {q, g, buf}});
    run(&(call){.op = OP_SGD, .a = a, .nin = 3, .in = {q, g2, buf}});
    ok = true;
    for (int e = 0; e < 6; e++) {
        double b1 = g->d[e] + wd * p0->d[e], p1 = p0->d[e] - lr * b1;
        double b2 = mom * b1 + g2->d[e] + wd * p1, p2 = p1 - lr * b2;
        ok &= fabs(q->d[e] - p2) <= 1e-14 && fabs(buf->d[e] - b2) <= 1e-14;
    }
    EXPECT(ok);
    // Master weights: the update lands in the master, and the parameter takes its value.
    tensor *pm = zeros(1, 6), *master = copy_of(p0);
    run(&(call){.op = OP_SGD, .a.f = {[PLAN_AF_LR] = lr}, .nin = 3, .in = {pm, g, master}});
    ok = true;
    for (int e = 0; e < 6; e++) ok &= fabs(master->d[e] - (p0->d[e] - lr * g->d[e])) <= 1e-15 && pm->d[e] == master->d[e];
    EXPECT(ok);
}

static void optim_adamw(void) {
    double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    plan_attrs a = {
        .f = {[PLAN_AF_LR] = lr, [PLAN_AF_BETA1] = b1, [PLAN_AF_BETA2] = b2, [PLAN_AF_EPS] = eps, [PLAN_AF_WEIGHT_DECAY] = wd}};
    tensor *p = randu(1, 7), *m = zeros(1, 7), *v = zeros(1, 7), *g[2] = {randu(1, 7), randu(1, 7)};
    double hp[7], hm[7] = {0}, hv[7] = {0};
    for (int e = 0; e < 7; e++) hp[e] = p->d[e];
    for (int t = 1; t <= 2; t++) {
        run(&(call){.op = OP_ADAMW, .a = a, .nin = 4, .in = {p, g[t - 1], m, v}, .step = (uint64_t)t});
        for (int e = 0; e < 7; e++) { // PyTorch's AdamW, written out
            double gr = g[t - 1]->d[e];
            hp[e] -= lr * wd * hp[e];
            hm[e] = b1 * hm[e] + (1 - b1) * gr;
            hv[e] = b2 * hv[e] + (1 - b2) * gr * gr;
            double mhat = hm[e] / (1 - pow(b1, t)), vhat = hv[e] / (1 - pow(b2, t));
            hp[e] -= lr * mhat / (sqrt(vhat) + eps);
        }
    }
    bool ok = true;
    for (int e = 0; e < 7; e++)
        ok &= fabs(p->d[e] - hp[e]) <= 1e-14 && fabs(m->d[e] - hm[e]) <= 1e-15 && fabs(v->d[e] - hv[e]) <= 1e-15;
    EXPECT(ok);
}

static void normals(void) {
    double s = 0, s2 = 0;
    const int n = 20000;
    for (int i = 0; i < n; i++) {
        double z = rt_normal(rt_key(99, (uint64_t)i));
        s += z, s2 += z * z;
    }
    EXPECT(fabs(s / n) < 0.03 && fabs(s2 / n - 1) < 0.05);
    EXPECT(rt_normal(12345) == rt_normal(12345));
}

/* ---- errors ---- */

// c fails in both precisions with a message that contains `want`.
static void refused(call c, const char *want) {
    for (int f32 = 0; f32 < 2; f32++) {
        int rc = exec(&c, f32);
        bool ok = rc == -1 && strstr(err, want) != NULL;
        if (!ok) fprintf(stderr, "expected an error with \"%s\", got rc %d: \"%s\"\n", want, rc, err);
        EXPECT(ok);
    }
}

// The operator, its arity, dtypes and views on their own.
static void errors_views(void) {
    const plan_attrs none = {0};
    refused(c2(OP_LINEAR, none, zeros(2, 4, 48), zeros(2, 64, 32), zeros(2, 4, 64)),
            "linear: input 1 is [64,32] but input 0's last dimension is 48");
    refused(c2(OP_LINEAR, none, zeros(2, 4, 32), zeros(2, 64, 32), zeros(2, 4, 63)),
            "linear: output 0 is [4,63] but should be [4,64]");
    refused(c1(OP_LINEAR, none, zeros(2, 4, 48), zeros(2, 4, 64)),
            "linear: 1 input and 1 output, but it takes 2 to 3 inputs and 1 output");
    refused(c1(999, none, zeros(1, 2), zeros(1, 2)), "operator 999");
    tensor *half = zeros(2, 2, 2), *nodata = zeros(1, 3), *outside = zeros(1, 3);
    half->dtype = 1;
    nodata->no_data = true;
    outside->start[0] = 2;
    refused(c2(OP_MATMUL, none, half, zeros(2, 2, 2), zeros(2, 2, 2)), "matmul: input 0 is f16");
    refused(c2(OP_EMBEDDING, none, zeros(1, 3), zeros(2, 4, 2), zeros(2, 3, 2)), "input 0 is f32; the CPU backend wants i32");
    refused(c1(OP_RELU, none, nodata, zeros(1, 3)), "has no data");
    refused(c1(OP_RELU, none, outside, zeros(1, 3)), "holds [2, 5) of a logical size 3");
    rt_view v = {.rank = 3, .shape = {2, 3, 4}};
    EXPECT(rt_view_numel(&v) == 24);
}

// Shapes or attributes that do not fit the operator.
static void errors_shapes(void) {
    const plan_attrs none = {0};
    tensor *lab = ids(3, 1, 2);
    lab->i[1] = 7;
    refused(c2(OP_MATMUL, none, zeros(3, 2, 3, 4), zeros(2, 5, 6), zeros(3, 2, 3, 6)), "matmul: input 1 is [5,6]");
    refused(c2(OP_BMM, none, zeros(3, 2, 3, 4), zeros(3, 3, 4, 5), zeros(3, 2, 3, 5)), "leading dimensions");
    refused(c2(OP_ADD, none, zeros(2, 3, 4), zeros(1, 3), zeros(2, 3, 4)), "suffix");
    plan_attrs stride0 = {.win = {0, 0, 0, 1, 0, 0}}, stride1 = {.win = {0, 0, 1, 1, 0, 0}};
    plan_attrs kernel0 = {.win = {0, 2, 1, 1, 0, 0}};
    refused(c2(OP_CONV2D, stride0, zeros(4, 1, 2, 5, 5), zeros(4, 3, 2, 3, 3), zeros(4, 1, 3, 3, 3)), "stride");
    refused(c2(OP_CONV2D, stride1, zeros(4, 1, 2, 5, 5), zeros(4, 3, 3, 3, 3), zeros(4, 1, 3, 3, 3)), "channels");
    refused(c2(OP_CONV2D, stride1, zeros(4, 1, 2, 2, 2), zeros(4, 3, 2, 3, 3), zeros(4, 1, 3, 1, 1)), "does not fit");
    refused(c1(OP_MAXPOOL, kernel0, zeros(4, 1, 1, 4, 4), zeros(4, 1, 1, 4, 3)), "kernel 0x2");
    refused(c1(OP_TRANSPOSE, (plan_attrs){.perm = {0, 0}}, zeros(2, 2, 3), zeros(2, 3, 2)), "permutation");
    refused(c2(OP_EMBEDDING, none, ids(9, 1, 5), zeros(2, 4, 2), zeros(2, 5, 2)), "outside the table");
    refused(c2(OP_CROSS_ENTROPY, none, zeros(2, 2, 3), lab, zeros(0)), "label 7");
    refused(c2(OP_CROSS_ENTROPY, none, zeros(2, 2, 3), ids(3, 1, 2), zeros(1, 2)), "scalar");
    plan_attrs ax1 = {.i[PLAN_AI_AXIS] = 1}, ax2 = {.i[PLAN_AI_AXIS] = 2};
    refused(c2(OP_CONCAT, ax1, zeros(2, 2, 3), zeros(2, 2, 3), zeros(2, 2, 7)), "add up to 6");
    refused(c1(OP_CONCAT, ax2, zeros(2, 2, 3), zeros(2, 2, 3)), "axis 2");
    plan_attrs past_end = {.i = {[PLAN_AI_START] = 1, [PLAN_AI_END] = 5}};
    refused(c1(OP_SLICE, past_end, zeros(1, 4), zeros(1, 4)), "slice [1, 5)");
    refused(c1(OP_RESHAPE, none, zeros(2, 2, 3), zeros(1, 7)), "7 elements");
    call adamw0 = {.op = OP_ADAMW, .nin = 4, .in = {zeros(1, 2), zeros(1, 2), zeros(1, 2), zeros(1, 2)}, .step0 = true};
    refused(adamw0, "step 0");
    refused((call){.op = OP_SGD, .a.f[PLAN_AF_MOMENTUM] = 0.9, .nin = 2, .in = {zeros(1, 2), zeros(1, 2)}}, "momentum");
    refused(c3(OP_ATTENTION, none, zeros(4, 1, 2, 1, 2), zeros(4, 1, 3, 1, 2), zeros(4, 1, 2, 1, 2), zeros(4, 1, 2, 1, 2)),
            "the values is [1,2,1,2] but should be [1,3,1,2]");
    refused(c1(OP_DROPOUT, (plan_attrs){.f[PLAN_AF_P] = 1}, zeros(1, 2), zeros(1, 2)), "p = 1");
    // a zigzag order whose chunks do not cut the dimension, or of a dimension it lacks
    refused(c1(OP_DROPOUT, (plan_attrs){.f[PLAN_AF_P] = 0.1, .i[PLAN_AI_AXIS] = 1, .i[PLAN_AI_END] = 6}, zeros(2, 2, 16), zeros(2, 2, 16)),
            "zigzag of 6 chunks along dimension 1 does not cut input 0");
    refused(c1(OP_DROPOUT_GRAD, (plan_attrs){.f[PLAN_AF_P] = 0.1, .i[PLAN_AI_AXIS] = 2, .i[PLAN_AI_END] = 4}, zeros(2, 2, 16), zeros(2, 2, 16)),
            "zigzag of 4 chunks along dimension 2 does not cut input 0");
    refused(c3(OP_LAYERNORM, none, zeros(2, 2, 4), zeros(1, 4), zeros(1, 3), zeros(2, 2, 4)), "input 2 is [3] but should be [4]");
    plan_attrs ghost4 = {.f[PLAN_AF_EPS] = 1e-5, .i[PLAN_AI_GHOST] = 4};
    refused(c3(OP_BATCHNORM, ghost4, zeros(4, 6, 2, 1, 1), zeros(1, 2), zeros(1, 2), zeros(4, 6, 2, 1, 1)),
            "batchnorm: input 0 has 6 samples, not whole ghost batch groups of 4");
    refused((call){.op = OP_BATCHNORM_GRAD_W, .a = ghost4, .nin = 2, .in = {zeros(4, 2, 2, 1, 1), zeros(4, 2, 2, 1, 1)}, .nout = 2,
                   .out = {zeros(1, 2), zeros(1, 2)}},
            "input 1 has 2 samples, not whole ghost batch groups of 4");
}

/* ---- the operators of imported models (runtime/ops.def's last section) ---- */

static void runc(call c) { run(&c); }

// Unary math: (dy, x) -> dy f'(x) against central differences, on x in a domain where f is
// smooth (positive for log, sqrt, rsqrt and pow).
static void grad_unary_math(uint32_t op, uint32_t grad_op, double exponent) {
    tensor *x = randu(2, 4, 5);
    bool positive = op == OP_LOG || op == OP_SQRT || op == OP_RSQRT || op == OP_POW;
    for (int64_t e = 0; e < x->n; e++) x->d[e] = positive ? 1 + 0.5 * x->d[e] : 2 * x->d[e];
    plan_attrs a = {.f[PLAN_AF_SCALE] = exponent};
    call f = {.op = op, .a = a, .nin = 1, .in = {x}, .nout = 1, .out = {zeros(2, 4, 5)}};
    tensor *dy[1], *dx = zeros_like(x);
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = grad_op, .a = a, .nin = 2, .in = {dy[0], x}, .nout = 1, .out = {dx}});
    gradcheck(op_names[op], &f, dy, 0, dx);
}

// The forward values of the unary math against libm, one element each.
static void unary_values(void) {
    static const struct { uint32_t op; double x, e, want; } v[] = {
        {OP_SIGMOID, 0.3, 0, 0.574442516811659}, {OP_TANH, 0.3, 0, 0.291312612451591}, {OP_EXP, 0.3, 0, 1.349858807576003},
        {OP_LOG, 0.3, 0, -1.203972804325936}, {OP_GELU_ERF, 0.3, 0, 0.185373426656686}, {OP_RSQRT, 0.25, 0, 2},
        {OP_SQRT, 0.25, 0, 0.5}, {OP_ERF, 0.3, 0, 0.328626759459127}, {OP_SIN, 0.3, 0, 0.295520206661340}, {OP_COS, 0.3, 0, 0.955336489125606}, {OP_POW, 3, 2, 9}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        tensor *x = zeros(1, 1), *y = zeros(1, 1);
        x->d[0] = v[i].x;
        runc(c1(v[i].op, (plan_attrs){.f[PLAN_AF_SCALE] = v[i].e}, x, y));
        if (fabs(y->d[0] - v[i].want) > 1e-12) fprintf(stderr, "%s(%g) = %.15g, want %.15g\n", op_names[v[i].op], v[i].x, y->d[0], v[i].want);
        EXPECT(fabs(y->d[0] - v[i].want) <= 1e-12);
    }
}

// a [2,3,4] and b [2,4] mapped to a's axes 0 and 2 (attrs perm 1,3): the gradients exactly as
// autodiff wires them (add: dy and reduce_sum(dy); mul: mul(dy, b) and reduce_sum(mul(dy, a));
// sub: dy and -reduce_sum(dy); div: div(dy, b) and -reduce_sum(div(mul(dy, y), b))).
static void grad_mapped(uint32_t op) {
    plan_attrs m = {.perm = {1, 3}}, none = {0};
    tensor *a = randu(3, 2, 3, 4), *b = randu(2, 2, 4), *y = zeros(3, 2, 3, 4);
    if (op == OP_DIV)
        for (int64_t e = 0; e < b->n; e++) b->d[e] = 1.5 + 0.5 * b->d[e];
    call f = c2(op, m, a, b, y);
    tensor *dy[1], *da = zeros_like(a), *db = zeros_like(b), *t = zeros_like(a), *u = zeros_like(a);
    run(&f);
    upstream(&f, dy);
    tensor *ysaved = copy_of(y);
    switch (op) {
    case OP_ADD: case OP_SUB:
        memcpy(da->d, dy[0]->d, sizeof(double) * (size_t)da->n);
        runc(c1(OP_REDUCE_SUM, m, dy[0], db));
        break;
    case OP_MUL:
        runc(c2(OP_MUL, m, dy[0], b, da));
        runc(c2(OP_MUL, none, dy[0], a, t));
        runc(c1(OP_REDUCE_SUM, m, t, db));
        break;
    default:
        runc(c2(OP_DIV, m, dy[0], b, da));
        runc(c2(OP_MUL, none, dy[0], ysaved, t));
        runc(c2(OP_DIV, m, t, b, u));
        runc(c1(OP_REDUCE_SUM, m, u, db));
        break;
    }
    if (op == OP_SUB || op == OP_DIV)
        for (int64_t e = 0; e < db->n; e++) db->d[e] = -db->d[e];
    gradcheck(op_names[op], &f, dy, 0, da);
    gradcheck(op_names[op], &f, dy, 1, db);
}

// masked_fill: a mask [3] over x [2,3,4]'s axis 1 (perm 2); the gradient is masked_fill of dy with 0.
static void grad_masked_fill(void) {
    plan_attrs m = {.perm = {2}, .f[PLAN_AF_SCALE] = -7}, m0 = {.perm = {2}};
    tensor *x = randu(3, 2, 3, 4), *mask = zeros(1, 3), *y = zeros(3, 2, 3, 4), *dy[1], *dx = zeros_like(x);
    mask->d[1] = 1;
    call f = c2(OP_MASKED_FILL, m, x, mask, y);
    run(&f);
    EXPECT(y->d[4] == -7 && y->d[0] == x->d[0] && y->d[8] == x->d[8]);
    upstream(&f, dy);
    runc(c2(OP_MASKED_FILL, m0, dy[0], mask, dx));
    gradcheck("masked_fill", &f, dy, 0, dx);
}

// sum, mean, max over axes 0 and 2 of [2,3,4] (output [3], perm 2); expand back. Gradients:
// sum -> expand; mean -> expand then scale 1/8; max -> max_grad; expand -> reduce_sum.
static void grad_reduce(uint32_t op) {
    plan_attrs m = {.perm = {2}};
    tensor *x = randu(3, 2, 3, 4), *y = zeros(1, 3), *dy[1], *dx = zeros_like(x);
    call f = c1(op, m, x, y);
    run(&f);
    upstream(&f, dy);
    if (op == OP_MAX) {
        runc(c2(OP_MAX_GRAD, m, dy[0], x, dx));
    } else {
        runc(c1(OP_EXPAND, m, dy[0], dx));
        if (op == OP_MEAN) runc(c1(OP_SCALE, (plan_attrs){.f[PLAN_AF_SCALE] = 1.0 / 8}, copy_of(dx), dx));
    }
    gradcheck(op_names[op], &f, dy, 0, dx);
    tensor *xs = randu(1, 3), *ys = zeros(3, 2, 3, 4), *dxs = zeros_like(xs);
    call e = c1(OP_EXPAND, m, xs, ys);
    run(&e);
    upstream(&e, dy);
    runc(c1(OP_REDUCE_SUM, m, dy[0], dxs));
    gradcheck("expand", &e, dy, 0, dxs);
}

// A mean over a split reduced axis: the pieces' outputs add up to the whole's (the count is the
// logical one); one_hot's class axis in pieces is the whole's columns.
static void split_reduce(void) {
    plan_attrs m = {.perm = {2}};
    tensor *x = randu(3, 4, 3, 2), *y = zeros(1, 3), *sum = zeros(1, 3);
    runc(c1(OP_MEAN, m, x, y));
    for (int k = 0; k < 2; k++) {
        tensor *xp = piece(x, 0, k ? 1 : 0, k ? 4 : 1), *yp = zeros(1, 3);
        runc(c1(OP_MEAN, m, xp, yp));
        for (int j = 0; j < 3; j++) sum->d[j] += yp->d[j];
    }
    EXPECT(close_to(sum, y, 1e-12));
    tensor *id = ids(5, 1, 6), *oh = zeros(2, 6, 5), *ohp = zeros(2, 6, 3);
    runc(c1(OP_ONE_HOT, (plan_attrs){0}, id, oh));
    ohp->full[1] = 5, ohp->start[1] = 2;
    runc(c1(OP_ONE_HOT, (plan_attrs){0}, id, ohp));
    for (int i = 0; i < 6; i++) {
        EXPECT(oh->d[i * 5 + id->i[i]] == 1);
        for (int j = 0; j < 3; j++) EXPECT(ohp->d[i * 3 + j] == oh->d[i * 5 + 2 + j]);
    }
    tensor *ne = zeros(1, 6);
    runc(c1(OP_NE, (plan_attrs){.f[PLAN_AF_SCALE] = id->i[0]}, id, ne));
    for (int i = 0; i < 6; i++) EXPECT(ne->d[i] == (id->i[i] != id->i[0]));
}

// cross_entropy with ignore_index (mode bit 1; -100 here) and as a sum (bit 2): ignored rows count
// nothing and get no gradient.
static void grad_ce_modes(int64_t mode) {
    plan_attrs a = {.f[PLAN_AF_SCALE] = -100, .i[PLAN_AI_MODE] = mode};
    tensor *logits = randu(3, 2, 3, 5), *lab = ids(5, 2, 2, 3), *dy[1], *dl = zeros_like(logits);
    lab->i[1] = lab->i[4] = -100;
    call ce = {.op = OP_CROSS_ENTROPY, .a = a, .nin = 2, .in = {logits, lab}, .nout = 1, .out = {zeros(0)}};
    run(&ce);
    upstream(&ce, dy);
    run(&(call){.op = OP_CROSS_ENTROPY_GRAD, .a = a, .nin = 3, .in = {dy[0], logits, lab}, .nout = 1, .out = {dl}});
    gradcheck("cross_entropy (ignore_index)", &ce, dy, 0, dl);
    for (int j = 0; j < 5; j++) EXPECT(dl->d[5 + j] == 0 && dl->d[20 + j] == 0);
}

// topk over rows of 6, k = 2: the two largest, largest first, their indices; the gradient through
// the values scatters dy back to those indices.
static void grad_topk(void) {
    tensor *x = randu(2, 3, 6), *v = zeros(2, 3, 2), *ix = ids(6, 2, 3, 2), *dy[2], *dx = zeros_like(x);
    call f = {.op = OP_TOPK, .nin = 1, .in = {x}, .nout = 2, .out = {v, ix}};
    run(&f);
    for (int r = 0; r < 3; r++) {
        int best = 0;
        for (int e = 1; e < 6; e++) best = x->d[r * 6 + e] > x->d[r * 6 + best] ? e : best;
        EXPECT(ix->i[r * 2] == best && v->d[r * 2] == x->d[r * 6 + best] && v->d[r * 2 + 1] <= v->d[r * 2]);
    }
    upstream(&f, dy);
    dy[1] = zeros(2, 3, 2); // the indices get no gradient
    runc(c2(OP_TOPK_GRAD, (plan_attrs){0}, dy[0], ix, dx));
    gradcheck("topk", &f, dy, 0, dx);
}

// The general attention: cross (s 3, t 4), grouped-query (4 query heads over 2 kv heads), value
// width 5 unlike d 3, a bias [n,s,t] (attrs perm 2,3,4 of the scores' [b,n,s,t]), causal or not,
// a scale: dq, dk, dv, dbias against central differences; and a split of the query heads (the
// second pair, reading kv head 1 of the whole keys) computes the same rows.
static void grad_attention_general(bool causal, double p) {
    plan_attrs a = {.f[PLAN_AF_SCALE] = 0.6, .f[PLAN_AF_P] = p, .i[PLAN_AI_SEED] = 4, .i[PLAN_AI_CAUSAL] = causal, .i[PLAN_AI_MODE] = attn_mode,
                    .perm = {2, 3, 4}};
    tensor *q = randu(4, 2, 3, 4, 3), *k = randu(4, 2, 4, 2, 3), *v = randu(4, 2, 4, 2, 5), *bias = randu(3, 4, 3, 4);
    call f = {.op = OP_ATTENTION, .a = a, .nin = 4, .in = {q, k, v, bias}, .nout = 1, .out = {zeros(4, 2, 3, 4, 5)}};
    tensor *dy[1], *dq = zeros_like(q), *dk = zeros_like(k), *dv = zeros_like(v), *db = zeros_like(bias);
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = OP_ATTENTION_GRAD, .a = a, .nin = 5, .in = {dy[0], q, k, v, bias}, .nout = 3, .out = {dq, dk, dv}});
    run(&(call){.op = OP_ATTENTION_GRAD_BIAS, .a = a, .nin = 5, .in = {dy[0], q, k, v, bias}, .nout = 1, .out = {db}});
    const char *what = p > 0 ? "attention (cross, GQA, bias, dropout)" : causal ? "attention (cross, GQA, bias, causal)" : "attention (cross, GQA, bias)";
    for (int i = 0; i < 4; i++) gradcheck(what, &f, dy, i, (tensor *[]){dq, dk, dv, db}[i]);
    tensor *qp = piece(q, 2, 2, 4), *bp = piece(bias, 0, 2, 4), *yp = zeros(4, 2, 3, 2, 5);
    call part = {.op = OP_ATTENTION, .a = a, .nin = 4, .in = {qp, k, v, bp}, .nout = 1, .out = {yp}};
    run(&part);
    f.out[0] = zeros(4, 2, 3, 4, 5); // gradcheck left the last perturbed forward in the old one
    run(&f);
    EXPECT(close_to(yp, piece(f.out[0], 2, 2, 4), 1e-12));
}

// gather along axis 1 of x [2,5,3] with idx [2,4,3], and index_select of rows [3,0,3,1] of x's
// axis 1: the gradients (scatter-adds, a row picked twice gets both) against central
// differences, and the values against x read by hand.
static void grad_gather(bool sel) {
    plan_attrs a = {.i[PLAN_AI_AXIS] = 1};
    tensor *x = randu(3, 2, 5, 3), *idx = sel ? ids(5, 1, 4) : ids(5, 3, 2, 4, 3), *y = zeros(3, 2, 4, 3), *dy[1], *dx = zeros_like(x);
    if (sel) idx->i[0] = 3, idx->i[1] = 0, idx->i[2] = 3, idx->i[3] = 1;
    call f = c2(sel ? OP_INDEX_SELECT : OP_GATHER, a, x, idx, y);
    run(&f);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 4; i++)
            for (int k = 0; k < 3; k++) {
                int r = sel ? idx->i[i] : idx->i[(b * 4 + i) * 3 + k];
                EXPECT(y->d[(b * 4 + i) * 3 + k] == x->d[(b * 5 + r) * 3 + k]);
            }
    upstream(&f, dy);
    runc(c2(sel ? OP_INDEX_SELECT_GRAD : OP_GATHER_GRAD, a, dy[0], idx, dx));
    gradcheck(sel ? "index_select" : "gather", &f, dy, 0, dx);
}

// Flash against unfused (attrs mode PLAN_ATTN_FLASH against 0) on shapes of several tiles (70
// queries, ATTN_BR 32; 150 keys, ATTN_BC 64): cross lengths, grouped-query heads (4 over 2), value
// width 5, a bias [b,s,t], scale, causal on pieces whose queries start at global 40 and keys at
// 10 (the mask from the global offsets), dropout, accumulation: the output and dq, dk, dv, dbias
// agree within 1e-12 (f64; run() checks f32 against f64 too). A piece of the queries of a whole
// causal attention computes the whole's rows. Then central differences of the flash form on 40
// queries and 70 keys (two tiles each way).
static void flash_case(bool causal, double p, bool offsets, bool bias_on, bool acc) {
    plan_attrs a = {.f[PLAN_AF_SCALE] = 0.45, .f[PLAN_AF_P] = p, .i[PLAN_AI_SEED] = 5, .i[PLAN_AI_CAUSAL] = causal, .perm = {1, 3, 4}};
    tensor *q = randu(4, 2, 70, 4, 3), *k = randu(4, 2, 150, 2, 3), *v = randu(4, 2, 150, 2, 5), *bias = randu(3, 2, 70, 150);
    if (offsets) q->start[1] = 40, q->full[1] = 200, k->start[1] = v->start[1] = 10, k->full[1] = v->full[1] = 200;
    tensor *dy = randu(4, 2, 70, 4, 5), *out[2][5];
    for (int m = 0; m < 2; m++) {
        a.i[PLAN_AI_MODE] = m;
        tensor *y = randu(4, 2, 70, 4, 5), *dq = randu_like(q), *dk = randu_like(k), *dv = randu_like(v), *db = randu_like(bias);
        if (!acc) y = zeros_like(y), dq = zeros_like(q), dk = zeros_like(k), dv = zeros_like(v), db = zeros_like(bias);
        else if (m) // the same starting values as the unfused run
            y = copy_of(out[0][0]), dq = copy_of(out[0][1]), dk = copy_of(out[0][2]), dv = copy_of(out[0][3]), db = copy_of(out[0][4]);
        out[m][0] = y, out[m][1] = dq, out[m][2] = dk, out[m][3] = dv, out[m][4] = db;
    }
    for (int m = 0; m < 2; m++) {
        a.i[PLAN_AI_MODE] = m;
        int n = bias_on ? 4 : 3;
        run(&(call){.op = OP_ATTENTION, .a = a, .nin = n, .in = {q, k, v, bias}, .nout = 1, .out = {out[m][0]}, .acc = acc});
        run(&(call){.op = OP_ATTENTION_GRAD, .a = a, .nin = n + 1, .in = {dy, q, k, v, bias}, .nout = 3, .out = {out[m][1], out[m][2], out[m][3]},
                    .acc = acc});
        if (bias_on) run(&(call){.op = OP_ATTENTION_GRAD_BIAS, .a = a, .nin = 5, .in = {dy, q, k, v, bias}, .nout = 1, .out = {out[m][4]}, .acc = acc});
    }
    for (int j = 0; j < (bias_on ? 5 : 4); j++) {
        double w = max_abs_diff(out[0][j], out[1][j]);
        if (w > 1e-12) fprintf(stderr, "flash against unfused (causal %d, p %g, offsets %d, bias %d, acc %d): output %d differs by %g\n",
                               causal, p, offsets, bias_on, acc, j, w);
        EXPECT(w <= 1e-12);
    }
}

static void flash_vs_unfused(void) {
    flash_case(false, 0, false, false, false);
    flash_case(true, 0, false, true, false);
    flash_case(true, 0, true, true, false);
    flash_case(true, 0.2, true, true, false);
    flash_case(false, 0.3, false, true, true);
    flash_case(true, 0, true, false, true);
    // a piece of the queries (40..69 of 70) against all the keys: the whole's rows
    plan_attrs a = {.i[PLAN_AI_CAUSAL] = 1, .i[PLAN_AI_MODE] = PLAN_ATTN_FLASH, .f[PLAN_AF_P] = 0.1, .i[PLAN_AI_SEED] = 2};
    tensor *q = randu(4, 1, 70, 2, 4), *k = randu(4, 1, 70, 2, 4), *v = randu(4, 1, 70, 2, 4), *y = zeros(4, 1, 70, 2, 4);
    run(&(call){.op = OP_ATTENTION, .a = a, .nin = 3, .in = {q, k, v}, .nout = 1, .out = {y}});
    tensor *yp = zeros(4, 1, 30, 2, 4);
    run(&(call){.op = OP_ATTENTION, .a = a, .nin = 3, .in = {piece(q, 1, 40, 70), k, v}, .nout = 1, .out = {yp}});
    EXPECT(close_to(yp, piece(y, 1, 40, 70), 1e-12));
    // central differences over two tiles each way
    a = (plan_attrs){.f[PLAN_AF_SCALE] = 0.8, .f[PLAN_AF_P] = 0.2, .i[PLAN_AI_SEED] = 7, .i[PLAN_AI_CAUSAL] = 1, .i[PLAN_AI_MODE] = PLAN_ATTN_FLASH,
                     .perm = {3, 4}};
    q = randu(4, 1, 40, 2, 2), k = randu(4, 1, 70, 1, 2), v = randu(4, 1, 70, 1, 3);
    tensor *bias = randu(2, 40, 70), *dy[1], *dq = zeros_like(q), *dk = zeros_like(k), *dv = zeros_like(v), *db = zeros_like(bias);
    k->start[1] = v->start[1] = 0, q->start[1] = 30, q->full[1] = k->full[1] = v->full[1] = 70;
    call f = {.op = OP_ATTENTION, .a = a, .nin = 4, .in = {q, k, v, bias}, .nout = 1, .out = {zeros(4, 1, 40, 2, 3)}};
    run(&f);
    upstream(&f, dy);
    run(&(call){.op = OP_ATTENTION_GRAD, .a = a, .nin = 5, .in = {dy[0], q, k, v, bias}, .nout = 3, .out = {dq, dk, dv}});
    run(&(call){.op = OP_ATTENTION_GRAD_BIAS, .a = a, .nin = 5, .in = {dy[0], q, k, v, bias}, .nout = 1, .out = {db}});
    for (int i = 0; i < 4; i++) gradcheck("flash attention (tiles, causal offsets, GQA, bias, dropout)", &f, dy, i, (tensor *[]){dq, dk, dv, db}[i]);
}

static void gradients_ext(void) {
    static const uint32_t un[][2] = {{OP_SIGMOID, OP_SIGMOID_GRAD}, {OP_TANH, OP_TANH_GRAD}, {OP_EXP, OP_EXP_GRAD},
                                     {OP_LOG, OP_LOG_GRAD}, {OP_GELU_ERF, OP_GELU_ERF_GRAD}, {OP_RSQRT, OP_RSQRT_GRAD},
                                     {OP_SQRT, OP_SQRT_GRAD}, {OP_SIN, OP_SIN_GRAD}, {OP_COS, OP_COS_GRAD},
                                     {OP_ERF, OP_ERF_GRAD}};
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) grad_unary_math(un[i][0], un[i][1], 0);
    grad_unary_math(OP_POW, OP_POW_GRAD, 2);
    grad_unary_math(OP_POW, OP_POW_GRAD, -0.5);
    unary_values();
    grad_mapped(OP_ADD);
    grad_mapped(OP_MUL);
    grad_mapped(OP_SUB);
    grad_mapped(OP_DIV);
    grad_masked_fill();
    grad_reduce(OP_SUM);
    grad_reduce(OP_MEAN);
    grad_reduce(OP_MAX);
    split_reduce();
    grad_ce_modes(1);
    grad_ce_modes(3);
    grad_topk();
    grad_gather(false);
    grad_gather(true);
    refused(c2(OP_INDEX_SELECT, (plan_attrs){.i[PLAN_AI_AXIS] = 0}, zeros(1, 3), ids(9, 1, 2), zeros(1, 2)), "outside [0, 3)");
    for (attn_mode = PLAN_ATTN_UNFUSED; attn_mode <= PLAN_ATTN_FLASH; attn_mode++) {
        grad_attention_general(false, 0);
        grad_attention_general(true, 0);
        grad_attention_general(true, 0.3);
    }
    attn_mode = PLAN_ATTN_UNFUSED;
    flash_vs_unfused();
    plan_attrs m = {.perm = {1, 3}};
    refused(c2(OP_SUB, m, zeros(3, 2, 3, 4), zeros(2, 3, 4), zeros(3, 2, 3, 4)), "not input 0 [2,3,4] with axes left out");
    refused(c1(OP_SUM, (plan_attrs){.perm = {2}}, zeros(3, 2, 3, 4), zeros(1, 4)), "output 0 is [4]");
    refused(c1(OP_ONE_HOT, (plan_attrs){0}, ids(9, 1, 2), zeros(2, 2, 3)), "outside [0, 3)");
    tensor *bad = ids(5, 2, 2, 3);
    bad->i[0] = -100;
    refused(c2(OP_CROSS_ENTROPY, (plan_attrs){.f[PLAN_AF_SCALE] = -1, .i[PLAN_AI_MODE] = 1}, zeros(3, 2, 3, 5), bad, zeros(0)),
            "label -100");
}

int main(void) {
    gradients();
    splits();
    accumulate();
    fill_and_reduce();
    optim_sgd();
    optim_adamw();
    normals();
    errors_views();
    errors_shapes();
    gradients_ext();
    // Every operator ran in both precisions and agreed.
    for (int op = 0; op < OP_COUNT; op++) {
        if (!covered[op]) fprintf(stderr, "operator %s never ran in the f32 against f64 check\n", op_names[op]);
        EXPECT(covered[op] > 0);
    }
    free_all();
    return test_summary();
}
