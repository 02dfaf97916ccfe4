/*
 * cpu/loss.c: the CPU backend's losses and their gradients: cross_entropy (logits [*b,v],
 * int32 labels [*b]), mse_loss and bce_logits (element-wise, on equal shapes). A loss is a
 * scalar: the local sum divided by the GLOBAL count (the views' full sizes), so the pieces of
 * a split batch add up to the whole batch's mean; the gradients take dy (a scalar) first.
 * cross_entropy's attrs mode (PLAN_AI_MODE): bit 1, rows whose label is f[PLAN_AF_SCALE]
 * (PyTorch's ignore_index) count 0 and get no gradient; bit 2, the sum instead of the mean
 * (PyTorch's mean over the rows not ignored is this sum divided by their count: a model computes
 * the count with ne and sum, and divides).
 */
#include "cpu.h"

static int scalar_check(kctx *c, const char *what, const rt_view *v) {
    if (cpu_numel(v) == 1) return 0;
    return cpu_fail(c, "%s is %s; it must be a scalar", what, CPU_SHAPE(v));
}

// cross_entropy's attrs: rows labelled `ignore` count 0 (when `ignoring`); the sum or the mean.
typedef struct ce_mode {
    bool ignoring, sum;
    int64_t ignore;
} ce_mode;

static ce_mode ce_mode_of(const kctx *c) {
    int64_t m = c->a->i[PLAN_AI_MODE];
    return (ce_mode){.ignoring = m & 1, .sum = (m & 2) != 0, .ignore = (int64_t)c->a->f[PLAN_AF_SCALE]};
}

static bool ce_skip(const ce_mode *m, int32_t label) { return m->ignoring && label == m->ignore; }

// logits [*b,v] and labels [*b] (int32, each in [0, classes) or the ignore_index): classes is
// v for cross_entropy, the whole vocabulary (the view's full size) for a piece of it.
static int ce_check(kctx *c, const rt_view *logits, const char *lname, const rt_view *labels, const char *yname, int64_t classes) {
    if (logits->rank < 1) return cpu_fail(c, "%s is a scalar; it needs [*b,v]", lname);
    kshape want = cpu_shape_of(logits);
    want.rank--;
    if (cpu_expect(c, yname, labels, want)) return -1;
    int64_t v = classes, n = cpu_numel(labels);
    const int32_t *y = cpu_i(labels);
    ce_mode m = ce_mode_of(c);
    for (int64_t i = 0; i < n; i++)
        if ((y[i] < 0 || y[i] >= v) && !ce_skip(&m, y[i]))
            return cpu_fail(c, "%s holds label %d at element %lld, outside [0, %lld)", yname, y[i], (long long)i, (long long)v);
    return 0;
}

// log(sum(exp(x))) of one row.
static double logsumexp(const real *x, int64_t v) {
    real m;
    double s = cpu_sum_exp(x, v, &m);
    return (double)m + log(s);
}

// One row's gradient, k (softmax - onehot(label)), over its classes lo .. lo + v (x and dx the
// row's piece) from the row's lse; 0 on an ignored row.
static void ce_grad_row(const real *x, real *dx, int64_t v, int64_t lo, int32_t label, bool skip, real k, real lse, bool acc) {
    for (int64_t j = 0; j < v; j++) cpu_put(&dx[j], skip ? 0 : k * (R_EXP(x[j] - lse) - (real)(lo + j == label)), acc);
}

// (logits [*b,v], labels [*b]) -> the mean over *b of -log softmax(logits)[label].
int CPU_KERNEL(cross_entropy)(kctx *c) {
    const rt_view *x = &c->in[0], *lab = &c->in[1];
    if (ce_check(c, x, "input 0", lab, "input 1", cpu_dim(x, -1)) || scalar_check(c, "output 0", &c->out[0])) return -1;
    int64_t v = cpu_dim(x, -1), rows = v ? cpu_numel(lab) : 0;
    const real *X = cpu_r(x);
    const int32_t *y = cpu_i(lab);
    double sum = 0;
    ce_mode md = ce_mode_of(c);
    for (int64_t r = 0; r < rows; r++)
        if (!ce_skip(&md, y[r])) sum += logsumexp(X + r * v, v) - X[r * v + y[r]];
    cpu_put(cpu_r(&c->out[0]), (real)(md.sum ? sum : sum / (double)cpu_full_numel(lab)), c->acc);
    return 0;
}

// (dy, logits, labels) -> dy (softmax(logits) - onehot(label)) / count.
int CPU_KERNEL(cross_entropy_grad)(kctx *c) {
    const rt_view *x = &c->in[1], *lab = &c->in[2];
    if (scalar_check(c, "input 0", &c->in[0]) || ce_check(c, x, "input 1", lab, "input 2", cpu_dim(x, -1)) ||
        cpu_like(c, "output 0", &c->out[0], x))
        return -1;
    int64_t v = cpu_dim(x, -1), rows = v ? cpu_numel(lab) : 0;
    ce_mode md = ce_mode_of(c);
    double k = (double)*cpu_r(&c->in[0]) / (md.sum ? 1 : (double)cpu_full_numel(lab));
    const real *X = cpu_r(x);
    const int32_t *y = cpu_i(lab);
    real *DX = cpu_r(&c->out[0]);
    for (int64_t r = 0; r < rows; r++) {
        bool skip = ce_skip(&md, y[r]);
        ce_grad_row(X + r * v, DX + r * v, v, 0, y[r], skip, (real)k, skip ? 0 : (real)logsumexp(X + r * v, v), c->acc);
    }
    return 0;
}

/* ---- vocabulary-parallel cross_entropy (runtime/ops.def's last rows; compiler/vocab.c) ----
 * Each rank holds a piece of the classes, [*b, v/k] at view start `lo` of the last dimension.
 * vocab_ce_stats writes three numbers a row (its max over the piece, the sum of exp(x - max),
 * the label's logit where the piece holds the label, else 0); an all_gather brings every
 * piece's, rank-major; vocab_ce combines them into cross_entropy's loss, and vocab_ce_grad
 * into the piece's gradient. The rows and labels are the same on every rank of the group. */

// Logits [*b, v piece] and labels [*b], as cross_entropy's but over the whole classes.
static int vce_check(kctx *c, const rt_view *x, const char *xname, const rt_view *lab, const char *lname) {
    return ce_check(c, x, xname, lab, lname, x->rank ? x->full[x->rank - 1] : 0);
}

// The pieces' statistics of every row (stats, rows x 3 reals each) gathered: k pieces.
static int vce_pieces(kctx *c, const rt_view *st, const char *what, int64_t rows, int64_t *k) {
    int64_t n = cpu_numel(st);
    if (rows > 0 && n > 0 && n % (3 * rows) == 0) {
        *k = n / (3 * rows);
        return 0;
    }
    return cpu_fail(c, "%s holds %lld elements: not 3 per row (%lld rows) for each piece of the classes", what, (long long)n, (long long)rows);
}

// Row r's max and log of its sum of exponentials over the whole classes, from the k pieces'
// statistics (piece p's row r at st[(p * rows + r) * 3]); *label its label's logit.
static double vce_row(const real *st, int64_t rows, int64_t k, int64_t r, double *label) {
    double m = -INFINITY, s = 0, t = 0;
    for (int64_t p = 0; p < k; p++) m = fmax(m, (double)st[(p * rows + r) * 3]);
    for (int64_t p = 0; p < k; p++) {
        const real *q = &st[(p * rows + r) * 3];
        s += (double)q[1] * exp((double)q[0] - m), t += (double)q[2];
    }
    *label = t;
    return m + log(s);
}

// (logits piece [*b,v/k], labels [*b]) -> stats [*b, 3] (scratch).
int CPU_KERNEL(vocab_ce_stats)(kctx *c) {
    const rt_view *x = &c->in[0], *lab = &c->in[1];
    if (vce_check(c, x, "input 0", lab, "input 1")) return -1;
    int64_t v = cpu_dim(x, -1), lo = x->start[x->rank - 1], rows = cpu_numel(lab);
    if (cpu_numel(&c->out[0]) != 3 * rows)
        return cpu_fail(c, "output 0 holds %lld elements; it needs 3 per row (%lld rows)", (long long)cpu_numel(&c->out[0]), (long long)rows);
    const real *X = cpu_r(x);
    const int32_t *y = cpu_i(lab);
    real *S = cpu_r(&c->out[0]);
    for (int64_t r = 0; r < rows; r++) {
        const real *row = X + r * v;
        real m;
        S[3 * r + 1] = (real)cpu_sum_exp(row, v, &m), S[3 * r] = m;
        S[3 * r + 2] = y[r] >= lo && y[r] < lo + v ? row[y[r] - lo] : 0;
    }
    return 0;
}

// (every piece's stats [k, *b, 3], labels [*b]) -> cross_entropy's loss.
int CPU_KERNEL(vocab_ce)(kctx *c) {
    const rt_view *st = &c->in[0], *lab = &c->in[1];
    if (scalar_check(c, "output 0", &c->out[0])) return -1;
    int64_t rows = cpu_numel(lab), k = 0;
    if (rows && vce_pieces(c, st, "input 0 (the pieces' statistics)", rows, &k)) return -1;
    const int32_t *y = cpu_i(lab);
    ce_mode md = ce_mode_of(c);
    double sum = 0, t;
    for (int64_t r = 0; r < rows; r++)
        if (!ce_skip(&md, y[r])) sum += vce_row(cpu_r(st), rows, k, r, &t) - t;
    cpu_put(cpu_r(&c->out[0]), (real)(md.sum ? sum : sum / (double)cpu_full_numel(lab)), c->acc);
    return 0;
}

// (dy, logits piece [*b,v/k], labels [*b], every piece's stats [k, *b, 3]) -> the piece's
// dy (softmax(logits) - onehot(label)) / count.
int CPU_KERNEL(vocab_ce_grad)(kctx *c) {
    const rt_view *x = &c->in[1], *lab = &c->in[2], *st = &c->in[3];
    if (scalar_check(c, "input 0", &c->in[0]) || vce_check(c, x, "input 1", lab, "input 2") || cpu_like(c, "output 0", &c->out[0], x))
        return -1;
    int64_t v = cpu_dim(x, -1), lo = x->start[x->rank - 1], rows = cpu_numel(lab), k = 0;
    if (rows && vce_pieces(c, st, "input 3 (the pieces' statistics)", rows, &k)) return -1;
    ce_mode md = ce_mode_of(c);
    double dk = (double)*cpu_r(&c->in[0]) / (md.sum ? 1 : (double)cpu_full_numel(lab)), t;
    const real *X = cpu_r(x);
    const int32_t *y = cpu_i(lab);
    real *DX = cpu_r(&c->out[0]);
    for (int64_t r = 0; r < rows; r++) {
        bool skip = ce_skip(&md, y[r]);
        ce_grad_row(X + r * v, DX + r * v, v, lo, y[r], skip, (real)dk, skip ? 0 : (real)vce_row(cpu_r(st), rows, k, r, &t), c->acc);
    }
    return 0;
}

// (a, b) -> mean((a - b)^2), or (x, labels) -> the mean of BCE with logits:
//   max(x, 0) - x y + log(1 + exp(-|x|)).
int CPU_KERNEL(pointwise_loss)(kctx *c) {
    const rt_view *a = &c->in[0], *b = &c->in[1];
    if (cpu_like(c, "input 1", b, a) || scalar_check(c, "output 0", &c->out[0])) return -1;
    const real *A = cpu_r(a), *B = cpu_r(b);
    int64_t n = cpu_numel(a);
    double sum = 0;
    if (c->k->op == CPU_OP_MSE_LOSS) {
        for (int64_t i = 0; i < n; i++) sum += ((double)A[i] - B[i]) * ((double)A[i] - B[i]);
    } else {
        for (int64_t i = 0; i < n; i++) {
            double x = A[i];
            sum += (x > 0 ? x : 0) - x * B[i] + log1p(exp(-fabs(x)));
        }
    }
    cpu_put(cpu_r(&c->out[0]), (real)(sum / (double)cpu_full_numel(a)), c->acc);
    return 0;
}

// (dy, a, b) -> 2 dy (a - b) / count, or (dy, x, labels) -> dy (cpu_sigmoid(x) - labels) / count.
int CPU_KERNEL(pointwise_loss_grad)(kctx *c) {
    const rt_view *a = &c->in[1], *b = &c->in[2];
    if (scalar_check(c, "input 0", &c->in[0]) || cpu_like(c, "input 2", b, a) || cpu_like(c, "output 0", &c->out[0], a)) return -1;
    const real *A = cpu_r(a), *B = cpu_r(b);
    real *D = cpu_r(&c->out[0]);
    int64_t n = cpu_numel(a);
    real k = (real)((double)*cpu_r(&c->in[0]) / (double)cpu_full_numel(a));
    if (c->k->op == CPU_OP_MSE_LOSS_GRAD) {
        for (int64_t i = 0; i < n; i++) cpu_put(&D[i], 2 * k * (A[i] - B[i]), c->acc);
    } else {
        for (int64_t i = 0; i < n; i++) cpu_put(&D[i], k * (cpu_sigmoid(A[i]) - B[i]), c->acc);
    }
    return 0;
}
