/*
 * autodiff.c: derives the backward graph and the optimizer step from the forward graph.
 *
 * Reverse mode over program order. Each forward tensor collects gradient contributions from the
 * ops that read it; when the sweep reaches its producer, the contributions are summed (an `add`
 * chain) into its gradient and the producer's gradient rule emits backward ops (the *_GRAD rows
 * of runtime/ops.def). Only tensors that depend on a parameter get gradients.
 *
 * A repeated block is differentiated once: its backward is one backward block with the same
 * repeat, run in reverse copy order. Its bindings mirror the forward block's:
 *   forward  in x <- h0, carry x <- y, out h <- y        (a carried state)
 *   backward in D <- dh (the last copy's gradient), carry D <- dx, out dh0 <- dx
 *   forward  in c <- c0 (read by every copy)  ->  backward acc dc0 <- dc (summed over copies)
 * The optimizer ops of block parameters go in an optimizer block of the same repeat. So the
 * graph after autodiff still holds each block once, and nothing grows with the repeat count.
 *
 * Gradient accumulation: with g->micro_batches > 1, the op that writes a parameter's gradient is
 * marked `accumulate` (it adds into the gradient buffer, which the runtime zeroes once per step)
 * and the loss seed is 1/micro_batches.
 */
#include "plancc.h"

#include <string.h>

typedef struct ad {
    pcc_graph *g;
    int nfwd;            // tensors [0, nfwd) are the forward graph's
    bool *needs;         // needs[t]: t depends on a parameter
    int **contrib;       // gradient contributions per forward tensor
    int *ncontrib, *capcontrib;
    int scope;           // block of the ops being emitted (-1 top level)
} ad;

/* ---- building blocks ---- */

static int new_grad(ad *A, int of, const char *suffix) {
    pcc_tensor t = A->g->tensors[of];
    t.name = arena_printf(A->g->arena, "d:%s%s", A->g->tensors[of].name, suffix);
    t.kind = PCC_T_GRAD;
    t.of = of;
    t.grad = -1;
    t.block = A->scope;
    t.producer = PCC_PROD_NONE;
    t.saved = false;
    return graph_add_tensor(A->g, &t);
}

static int emit(ad *A, pcc_op_kind k, int fwd, const int *in, int nin, const int *out, int nout) {
    const char *ptr = fwd >= 0 ? A->g->ops[fwd].ptr : "";
    int id = graph_add_op(A->g, k, A->scope, in, nin, out, nout, ptr);
    pcc_op *op = &A->g->ops[id];
    op->phase = PCC_PHASE_BWD;
    op->fwd = fwd;
    if (fwd >= 0) op->attrs = A->g->ops[fwd].attrs;
    return id;
}

static int emit(ad *A, pcc_op_kind k, int fwd, const int *in, int nin, const int *out, int nout);
static int new_grad(ad *A, int of, const char *suffix);

// The forward op whose backward made gradient tensor t, or NULL.
static const pcc_op *grad_source(const pcc_graph *g, int t) {
    int p = g->tensors[t].producer;
    return p >= 0 && g->ops[p].fwd >= 0 ? &g->ops[g->ops[p].fwd] : NULL;
}

// Whether a parameter's contribution is summed as it comes (the same left fold as grad_sum's,
// one partial sum live instead of all): co-shard's pieces (coshard.c) each make a whole one.
// Inside a block always (a block's parameter read twice is co-shard's); at the top level when
// both come from pieces of one operator (the same label), so that other plans keep their sums.
static bool sum_now(ad *A, int t, int prev, int grad) {
    const pcc_graph *g = A->g;
    if (g->tensors[t].kind != PCC_T_PARAM || g->tensors[prev].block != A->scope || g->tensors[grad].block != A->scope) return false;
    if (A->scope >= 0) return true;
    const pcc_op *a = grad_source(g, prev), *b = grad_source(g, grad);
    return a && b && a->label && b->label && !strcmp(a->label, b->label);
}

static void contribute(ad *A, int t, int grad) {
    if (t >= A->nfwd || !A->needs[t]) return;
    pcc_graph *g = A->g;
    if (A->ncontrib[t] == 1 && sum_now(A, t, A->contrib[t][0], grad)) {
        int out = new_grad(A, t, arena_printf(g->arena, "#s%d", grad));
        int in[2] = {A->contrib[t][0], grad};
        int id = emit(A, PCC_OP_ADD, -1, in, 2, &out, 1);
        g->ops[id].ptr = g->tensors[t].ptr;
        A->contrib[t][0] = out;
        return;
    }
    *VEC_PUSH(g->arena, A->contrib[t], A->ncontrib[t], A->capcontrib[t]) = grad;
}

// Sums the contributions to t into its gradient; -1 if nothing flows into t.
static int grad_sum(ad *A, int t) {
    if (A->g->tensors[t].grad >= 0) return A->g->tensors[t].grad;
    int n = A->ncontrib[t];
    if (n == 0) return -1;
    int acc = A->contrib[t][0];
    for (int i = 1; i < n; i++) {
        int out = new_grad(A, t, i + 1 < n ? arena_printf(A->g->arena, "#%d", i) : "");
        int in[2] = {acc, A->contrib[t][i]};
        int id = emit(A, PCC_OP_ADD, -1, in, 2, &out, 1);
        A->g->ops[id].ptr = A->g->tensors[t].ptr;
        acc = out;
    }
    A->g->tensors[t].grad = acc;
    return acc;
}

static int emit_fill(ad *A, int like, double value) {
    int out = new_grad(A, like, ":zero");
    int id = emit(A, PCC_OP_FILL, -1, NULL, 0, &out, 1);
    A->g->ops[id].attrs.scale = value;
    A->g->ops[id].ptr = A->g->tensors[like].ptr;
    return out;
}

/* ---- gradient rules ---- */

// Emits op k(in...) -> a new gradient of `of`, and contributes it to `of`.
static void grad_into(ad *A, int of, pcc_op_kind k, int fwd, const int *in, int nin) {
    if (!A->needs[of]) return;
    int out = new_grad(A, of, arena_printf(A->g->arena, "@%d", A->g->n_ops));
    emit(A, k, fwd, in, nin, &out, 1);
    contribute(A, of, out);
}

// dy has a's shape; b (an input of the op) is a's shape or a suffix of it: reduce dy-shaped g to b.
static int reduce_to(ad *A, int g, int b, int fwd) {
    const pcc_tensor *tg = &A->g->tensors[g], *tb = &A->g->tensors[b];
    if (tg->rank == tb->rank) return g;
    int out = new_grad(A, b, arena_printf(A->g->arena, "@%d", A->g->n_ops));
    emit(A, PCC_OP_REDUCE_SUM, fwd, &g, 1, &out, 1);
    return out;
}

// Emits op k(in...) into a new gradient-shaped temporary like tensor `like` (not contributed);
// clear_map: the op's operands are all one shape, so the forward op's axis map does not apply.
static int emit_tmp(ad *A, int like, pcc_op_kind k, int fwd, const int *in, int nin, bool clear_map) {
    int out = new_grad(A, like, arena_printf(A->g->arena, "~@%d", A->g->n_ops));
    int id = emit(A, k, fwd, in, nin, &out, 1);
    if (clear_map) memset(A->g->ops[id].attrs.perm, 0, sizeof A->g->ops[id].attrs.perm);
    return out;
}

static int emit_scale(ad *A, int x, int fwd, double factor) {
    int out = emit_tmp(A, x, PCC_OP_SCALE, fwd, &x, 1, true);
    A->g->ops[A->g->n_ops - 1].attrs.scale = factor;
    return out;
}

// sub: da = dy, db = -reduce(dy); div: da = dy / b, db = -reduce(dy y / b) (y = a / b, saved).
static void rule_sub_div(ad *A, int o, int dy) {
    pcc_op op = A->g->ops[o];
    int a = op.in[0], b = op.in[1];
    if (op.kind == PCC_OP_SUB) {
        contribute(A, a, dy);
        if (A->needs[b]) contribute(A, b, emit_scale(A, reduce_to(A, dy, b, o), o, -1));
        return;
    }
    int in_a[2] = {dy, b};
    grad_into(A, a, PCC_OP_DIV, o, in_a, 2);
    if (!A->needs[b]) return;
    int in_t[2] = {dy, op.out[0]};
    int t = emit_tmp(A, a, PCC_OP_MUL, o, in_t, 2, true);
    int in_u[2] = {t, b};
    int u = emit_tmp(A, a, PCC_OP_DIV, o, in_u, 2, false);
    contribute(A, b, emit_scale(A, reduce_to(A, u, b, o), o, -1));
}

// The operators of imported models (runtime/ops.def's last section).
static bool rule_ext(ad *A, int o, int dy) {
    pcc_op op = A->g->ops[o];
    const int *x = op.in;
    switch (op.kind) {
    case PCC_OP_SUB: case PCC_OP_DIV: rule_sub_div(A, o, dy); return true;
    case PCC_OP_MASKED_FILL: {
        int in[2] = {dy, x[1]};
        grad_into(A, x[0], PCC_OP_MASKED_FILL, o, in, 2);
        if (A->needs[x[0]]) A->g->ops[A->g->n_ops - 1].attrs.scale = 0;
        return true;
    }
    case PCC_OP_SUM: grad_into(A, x[0], PCC_OP_EXPAND, o, &dy, 1); return true;
    case PCC_OP_MEAN: {
        if (!A->needs[x[0]]) return true;
        const pcc_graph *g = A->g;
        double count = (double)tensor_numel(g, &g->tensors[x[0]]) / (double)tensor_numel(g, &g->tensors[op.out[0]]);
        int e = emit_tmp(A, x[0], PCC_OP_EXPAND, o, &dy, 1, false);
        contribute(A, x[0], emit_scale(A, e, o, 1 / count));
        return true;
    }
    case PCC_OP_MAX: {
        int in[2] = {dy, x[0]};
        grad_into(A, x[0], PCC_OP_MAX_GRAD, o, in, 2);
        return true;
    }
    case PCC_OP_EXPAND: grad_into(A, x[0], PCC_OP_REDUCE_SUM, o, &dy, 1); return true;
    case PCC_OP_NE: case PCC_OP_ONE_HOT: return true; // integer inputs: no gradient
    case PCC_OP_GATHER: case PCC_OP_INDEX_SELECT: { // dy scattered back to the rows it came from
        int in[2] = {dy, x[1]};
        grad_into(A, x[0], op.kind == PCC_OP_GATHER ? PCC_OP_GATHER_GRAD : PCC_OP_INDEX_SELECT_GRAD, o, in, 2);
        return true;
    }
    default: break;
    }
    static const pcc_op_kind unary[][2] = {
        {PCC_OP_SIGMOID, PCC_OP_SIGMOID_GRAD}, {PCC_OP_TANH, PCC_OP_TANH_GRAD}, {PCC_OP_EXP, PCC_OP_EXP_GRAD},
        {PCC_OP_LOG, PCC_OP_LOG_GRAD}, {PCC_OP_GELU_ERF, PCC_OP_GELU_ERF_GRAD}, {PCC_OP_RSQRT, PCC_OP_RSQRT_GRAD},
        {PCC_OP_SQRT, PCC_OP_SQRT_GRAD}, {PCC_OP_SIN, PCC_OP_SIN_GRAD}, {PCC_OP_COS, PCC_OP_COS_GRAD}, {PCC_OP_POW, PCC_OP_POW_GRAD},
        {PCC_OP_ERF, PCC_OP_ERF_GRAD}};
    for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++)
        if (unary[i][0] == op.kind) {
            int in[2] = {dy, x[0]};
            grad_into(A, x[0], unary[i][1], o, in, 2);
            return true;
        }
    return false;
}

static void rule_binary(ad *A, int o, int dy) {
    const pcc_op *op = &A->g->ops[o];
    int a = op->in[0], b = op->in[1];
    if (op->kind == PCC_OP_ADD) {
        contribute(A, a, dy);
        if (A->needs[b]) contribute(A, b, reduce_to(A, dy, b, o));
        return;
    }
    // mul: da = dy * b (b broadcasts), db = reduce(dy * a)
    int in_a[2] = {dy, b};
    grad_into(A, a, PCC_OP_MUL, o, in_a, 2);
    if (A->needs[b]) {
        int t = new_grad(A, a, arena_printf(A->g->arena, "*@%d", A->g->n_ops));
        int in_b[2] = {dy, a};
        int id = emit(A, PCC_OP_MUL, o, in_b, 2, &t, 1);
        memset(A->g->ops[id].attrs.perm, 0, sizeof A->g->ops[id].attrs.perm); // dy and a: one shape
        contribute(A, b, reduce_to(A, t, b, o));
    }
}

// The name suffix of output i of the backward op about to be emitted, whose outputs are the
// gradients of of[0..]: "@op", or "@op.i" where an earlier output is of the same tensor
// (concat(a, a)), so that no two tensors have one name.
static const char *out_suffix(ad *A, const int *of, int i) {
    for (int j = 0; j < i; j++)
        if (of[j] == of[i]) return arena_printf(A->g->arena, "@%d.%d", A->g->n_ops, i);
    return arena_printf(A->g->arena, "@%d", A->g->n_ops);
}

// Ops with several gradient outputs produced by one backward op (attention, norms' weights).
static void grad_multi(ad *A, int o, pcc_op_kind k, const int *in, int nin, const int *of, int nof) {
    int out[3];
    bool any = false;
    for (int i = 0; i < nof; i++) {
        out[i] = new_grad(A, of[i], out_suffix(A, of, i));
        any |= A->needs[of[i]];
    }
    if (!any) return;
    emit(A, k, o, in, nin, out, nof);
    for (int i = 0; i < nof; i++) contribute(A, of[i], out[i]);
}

static void rule_split(ad *A, int o) {
    // split's gradient: concat of the outputs' gradients, zeros where none flows.
    const pcc_op *op = &A->g->ops[o];
    int x = op->in[0], nout = op->nout;
    if (!A->needs[x]) return;
    int *dys = arena_alloc(A->g->arena, sizeof(int) * (size_t)nout);
    for (int i = 0; i < nout; i++) {
        int y = A->g->ops[o].out[i];
        dys[i] = grad_sum(A, y);
        if (dys[i] < 0) dys[i] = emit_fill(A, y, 0);
    }
    grad_into(A, x, PCC_OP_CONCAT, o, dys, nout);
}

static void rule_concat(ad *A, int o, int dy) {
    const pcc_op *op = &A->g->ops[o];
    int n = op->nin;
    int *dx = arena_alloc(A->g->arena, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) dx[i] = new_grad(A, A->g->ops[o].in[i], out_suffix(A, A->g->ops[o].in, i));
    emit(A, PCC_OP_SPLIT, o, &dy, 1, dx, n);
    for (int i = 0; i < n; i++) contribute(A, A->g->ops[o].in[i], dx[i]);
}

static void rule(ad *A, int o, int dy) {
    pcc_op op = A->g->ops[o]; // a copy: emitting ops may move the array
    const int *x = op.in;
    switch (op.kind) {
    case PCC_OP_MATMUL: case PCC_OP_BMM: {
        bool bmm = op.kind == PCC_OP_BMM;
        int ia[2] = {dy, x[1]}, ib[2] = {x[0], dy};
        grad_into(A, x[0], bmm ? PCC_OP_BMM_GRAD_A : PCC_OP_MATMUL_GRAD_A, o, ia, 2);
        grad_into(A, x[1], bmm ? PCC_OP_BMM_GRAD_B : PCC_OP_MATMUL_GRAD_B, o, ib, 2);
        return;
    }
    case PCC_OP_LINEAR: {
        int ix[2] = {dy, x[1]}, iw[2] = {dy, x[0]};
        grad_into(A, x[0], PCC_OP_LINEAR_GRAD_X, o, ix, 2);
        grad_into(A, x[1], PCC_OP_LINEAR_GRAD_W, o, iw, 2);
        if (op.nin > 2) grad_into(A, x[2], PCC_OP_REDUCE_SUM, o, &dy, 1);
        return;
    }
    case PCC_OP_ADD: case PCC_OP_MUL: rule_binary(A, o, dy); return;
    case PCC_OP_SCALE: grad_into(A, x[0], PCC_OP_SCALE, o, &dy, 1); return;
    case PCC_OP_RELU: case PCC_OP_GELU: case PCC_OP_SILU: {
        pcc_op_kind k = op.kind == PCC_OP_RELU ? PCC_OP_RELU_GRAD : op.kind == PCC_OP_GELU ? PCC_OP_GELU_GRAD : PCC_OP_SILU_GRAD;
        int in[2] = {dy, x[0]};
        grad_into(A, x[0], k, o, in, 2);
        return;
    }
    case PCC_OP_LAYERNORM: case PCC_OP_RMSNORM: case PCC_OP_BATCHNORM: {
        bool ln = op.kind == PCC_OP_LAYERNORM, bn = op.kind == PCC_OP_BATCHNORM;
        int ix[3] = {dy, x[0], x[1]}, iw[2] = {dy, x[0]};
        grad_into(A, x[0], ln ? PCC_OP_LAYERNORM_GRAD_X : bn ? PCC_OP_BATCHNORM_GRAD_X : PCC_OP_RMSNORM_GRAD_X, o, ix, 3);
        if (op.kind == PCC_OP_RMSNORM) grad_into(A, x[1], PCC_OP_RMSNORM_GRAD_W, o, iw, 2);
        else grad_multi(A, o, ln ? PCC_OP_LAYERNORM_GRAD_W : PCC_OP_BATCHNORM_GRAD_W, iw, 2, x + 1, 2);
        return;
    }
    case PCC_OP_SOFTMAX: {
        int in[2] = {dy, op.out[0]};
        grad_into(A, x[0], PCC_OP_SOFTMAX_GRAD, o, in, 2);
        return;
    }
    case PCC_OP_ATTENTION: { // with a bias: its gradient (the scores') by attention_grad_bias
        int in[5] = {dy, x[0], x[1], x[2], op.nin > 3 ? x[3] : -1};
        grad_multi(A, o, PCC_OP_ATTENTION_GRAD, in, op.nin + 1, x, 3);
        if (op.nin > 3) grad_into(A, x[3], PCC_OP_ATTENTION_GRAD_BIAS, o, in, 5);
        return;
    }
    case PCC_OP_EMBEDDING: case PCC_OP_EMBEDDING_BAG: {
        int in[2] = {dy, x[0]};
        grad_into(A, x[1], op.kind == PCC_OP_EMBEDDING ? PCC_OP_EMBEDDING_GRAD : PCC_OP_EMBEDDING_BAG_GRAD, o, in, 2);
        return;
    }
    case PCC_OP_CONCAT: rule_concat(A, o, dy); return;
    case PCC_OP_SLICE: grad_into(A, x[0], PCC_OP_SLICE_GRAD, o, &dy, 1); return;
    case PCC_OP_RESHAPE: grad_into(A, x[0], PCC_OP_RESHAPE, o, &dy, 1); return;
    case PCC_OP_TRANSPOSE: {
        int before = A->g->n_ops;
        grad_into(A, x[0], PCC_OP_TRANSPOSE, o, &dy, 1);
        if (A->g->n_ops > before) { // inverse permutation
            pcc_attrs *a = &A->g->ops[A->g->n_ops - 1].attrs;
            int rank = A->g->tensors[x[0]].rank;
            for (int i = 0; i < rank; i++) a->perm[op.attrs.perm[i]] = i;
        }
        return;
    }
    case PCC_OP_CONV2D: {
        int ix[2] = {dy, x[1]}, iw[2] = {dy, x[0]};
        grad_into(A, x[0], PCC_OP_CONV2D_GRAD_X, o, ix, 2);
        grad_into(A, x[1], PCC_OP_CONV2D_GRAD_W, o, iw, 2);
        if (op.nin > 2) grad_into(A, x[2], PCC_OP_CONV2D_GRAD_B, o, &dy, 1);
        return;
    }
    case PCC_OP_MAXPOOL: {
        int in[2] = {dy, x[0]};
        grad_into(A, x[0], PCC_OP_MAXPOOL_GRAD, o, in, 2);
        return;
    }
    case PCC_OP_AVGPOOL: grad_into(A, x[0], PCC_OP_AVGPOOL_GRAD, o, &dy, 1); return;
    case PCC_OP_DROPOUT: grad_into(A, x[0], PCC_OP_DROPOUT_GRAD, o, &dy, 1); return;
    case PCC_OP_CROSS_ENTROPY: {
        int in[3] = {dy, x[0], x[1]};
        grad_into(A, x[0], PCC_OP_CROSS_ENTROPY_GRAD, o, in, 3);
        return;
    }
    case PCC_OP_MSE_LOSS: {
        int in[3] = {dy, x[0], x[1]};
        grad_into(A, x[0], PCC_OP_MSE_LOSS_GRAD, o, in, 3);
        if (A->needs[x[1]]) { // d/db = -d/da
            int in_b[3] = {dy, x[1], x[0]};
            grad_into(A, x[1], PCC_OP_MSE_LOSS_GRAD, o, in_b, 3);
        }
        return;
    }
    case PCC_OP_BCE_LOGITS: { // labels are data: no gradient flows into them
        int in[3] = {dy, x[0], x[1]};
        grad_into(A, x[0], PCC_OP_BCE_LOGITS_GRAD, o, in, 3);
        return;
    }
    default:
        if (!rule_ext(A, o, dy)) PCC_ASSERT(!"operator without a gradient rule");
    }
}

static void backward_op(ad *A, int o) {
    int nout = A->g->ops[o].nout;
    if (A->g->ops[o].kind == PCC_OP_SPLIT) {
        rule_split(A, o);
        return;
    }
    if (A->g->ops[o].kind == PCC_OP_TOPK) { // the gradient flows through the values (output 0) only
        int dy = grad_sum(A, A->g->ops[o].out[0]);
        int in[2] = {dy, A->g->ops[o].out[1]};
        if (dy >= 0) grad_into(A, A->g->ops[o].in[0], PCC_OP_TOPK_GRAD, o, in, 2);
        return;
    }
    PCC_ASSERT(nout == 1);
    int dy = grad_sum(A, A->g->ops[o].out[0]);
    if (dy >= 0) rule(A, o, dy);
}

/* ---- which tensors need gradients ---- */

static bool differentiable(pcc_op_kind k, int input) {
    switch (k) {
    case PCC_OP_EMBEDDING: case PCC_OP_EMBEDDING_BAG: return input == 1;
    case PCC_OP_CROSS_ENTROPY: case PCC_OP_BCE_LOGITS: case PCC_OP_MASKED_FILL: return input == 0;
    case PCC_OP_NE: case PCC_OP_ONE_HOT: return false;
    case PCC_OP_TOPK_GRAD: return input == 0;
    case PCC_OP_GATHER: case PCC_OP_INDEX_SELECT: return input == 0;
    default: return true;
    }
}

static void sweep_needs(ad *A, int first, int n) {
    for (int o = first; o < first + n; o++) {
        const pcc_op *op = &A->g->ops[o];
        bool any = false;
        for (int i = 0; i < op->nin; i++) any |= A->needs[op->in[i]] && differentiable(op->kind, i);
        for (int i = 0; i < op->nout; i++) A->needs[op->out[i]] = any;
    }
}

static void compute_needs(ad *A) {
    pcc_graph *g = A->g;
    for (int t = 0; t < A->nfwd; t++) A->needs[t] = g->tensors[t].kind == PCC_T_PARAM && !g->tensors[t].frozen;
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->block < 0) {
            sweep_needs(A, o, 1);
            continue;
        }
        const pcc_block *bl = &g->blocks[op->block];
        if (o != bl->first_op) continue;
        for (int i = 0; i < bl->n_in; i++) A->needs[bl->in[i].inner] = A->needs[bl->in[i].outer];
        // A carried input needs a gradient if the state it carries does; two sweeps settle it
        // (the second sees the first's carry sources).
        for (int pass = 0; pass < 2; pass++) {
            sweep_needs(A, bl->first_op, bl->n_ops);
            for (int i = 0; i < bl->n_carry; i++) A->needs[bl->carry[i].inner] |= A->needs[bl->carry[i].outer];
        }
        for (int i = 0; i < bl->n_out; i++) A->needs[bl->out[i].outer] = A->needs[bl->out[i].inner];
    }
}

/* ---- blocks ---- */

static void backward_block(ad *A, int b) {
    pcc_graph *g = A->g;
    pcc_block fb = g->blocks[b]; // a copy: pushing a block may move the array
    // Step 1: the outer gradients flowing into the block's outputs; zeros where none flows.
    int *gout = arena_alloc(g->arena, sizeof(int) * (size_t)fb.n_out);
    bool any = false;
    for (int i = 0; i < fb.n_out; i++) any |= (gout[i] = grad_sum(A, fb.out[i].outer)) >= 0;
    if (!any) return;
    for (int i = 0; i < fb.n_out; i++)
        if (gout[i] < 0) gout[i] = emit_fill(A, fb.out[i].outer, 0);
    // Step 2: the backward block and its incoming gradients (one bound tensor per output).
    int bb = g->n_blocks;
    pcc_block *nb = VEC_PUSH(g->arena, g->blocks, g->n_blocks, g->cap_blocks);
    *nb = (pcc_block){.name = arena_printf(g->arena, "%s.bwd", fb.name), .ptr = fb.ptr, .repeat = fb.repeat, .fwd = b};
    nb->in = arena_alloc(g->arena, sizeof(pcc_bind) * (size_t)(fb.n_out + 1));
    nb->carry = arena_alloc(g->arena, sizeof(pcc_bind) * (size_t)(fb.n_carry + 1));
    nb->out = arena_alloc(g->arena, sizeof(pcc_bind) * (size_t)(fb.n_in + 1));
    nb->acc = arena_alloc(g->arena, sizeof(pcc_bind) * (size_t)(fb.n_in + 1));
    int outer_scope = A->scope;
    A->scope = bb;
    int *dstate = arena_alloc(g->arena, sizeof(int) * (size_t)fb.n_out);
    for (int i = 0; i < fb.n_out; i++) {
        int src = fb.out[i].inner;
        dstate[i] = new_grad(A, src, ":in");
        g->tensors[dstate[i]].producer = PCC_PROD_BOUND;
        g->blocks[bb].in[g->blocks[bb].n_in++] = (pcc_bind){dstate[i], gout[i]};
        contribute(A, src, dstate[i]);
    }
    // Step 3: the block's ops in reverse.
    g->blocks[bb].first_op = g->n_ops;
    for (int o = fb.first_op + fb.n_ops - 1; o >= fb.first_op; o--) backward_op(A, o);
    // A parameter of the block that several of its ops read (co-shard's pieces) sums its
    // contributions here, inside the copy, like any other gradient.
    for (int t = 0; t < A->nfwd; t++)
        if (g->tensors[t].kind == PCC_T_PARAM && g->tensors[t].block == b && A->ncontrib[t] > 1) grad_sum(A, t);
    // Step 4: gradients of the block's inputs: carried to the next backward copy and out of the
    // last one, or summed over copies.
    for (int i = 0; i < fb.n_in; i++) {
        int inner = fb.in[i].inner, outer = fb.in[i].outer;
        if (!A->needs[inner]) continue;
        int dx = grad_sum(A, inner);
        bool carried = false;
        for (int c = 0; c < fb.n_carry; c++) {
            if (fb.carry[c].inner != inner) continue;
            carried = true;
            if (dx < 0) dx = emit_fill(A, inner, 0);
            for (int j = 0; j < fb.n_out; j++)
                if (fb.out[j].inner == fb.carry[c].outer) g->blocks[bb].carry[g->blocks[bb].n_carry++] = (pcc_bind){dstate[j], dx};
        }
        if (dx < 0) continue;
        A->scope = outer_scope;
        int G = new_grad(A, outer, arena_printf(g->arena, "@%s", g->blocks[bb].name));
        A->scope = bb;
        g->tensors[G].producer = PCC_PROD_BLOCK;
        if (carried) g->blocks[bb].out[g->blocks[bb].n_out++] = (pcc_bind){dx, G};
        else g->blocks[bb].acc[g->blocks[bb].n_acc++] = (pcc_bind){dx, G};
        contribute(A, outer, G);
    }
    g->blocks[bb].n_ops = g->n_ops - g->blocks[bb].first_op;
    A->scope = outer_scope;
}

/* ---- optimizer ---- */

static void optimizer_op(ad *A, int p) {
    pcc_graph *g = A->g;
    int gp = g->tensors[p].grad;
    if (gp < 0) return;
    bool adam = g->optim.kind == PCC_OPTIM_ADAMW;
    bool master = g->tensors[p].dtype != PCC_F32;
    int in[5] = {p, gp}, n = 2;
    static const char *const adam_names[] = {"m", "v"};
    int nstate = adam ? 2 : g->optim.momentum > 0 ? 1 : 0;
    for (int s = 0; s < nstate + master; s++) {
        pcc_tensor t = g->tensors[p];
        t.name = arena_printf(g->arena, "%s:%s", g->tensors[p].name, s < nstate ? (adam ? adam_names[s] : "momentum") : "master");
        t.kind = PCC_T_STATE;
        t.dtype = PCC_F32;
        t.of = p;
        t.grad = -1;
        t.block = A->scope;
        t.producer = PCC_PROD_NONE;
        in[n++] = graph_add_tensor(g, &t);
    }
    int id = graph_add_op(g, adam ? PCC_OP_ADAMW : PCC_OP_SGD, A->scope, in, n, NULL, 0, g->tensors[p].ptr);
    pcc_op *op = &g->ops[id];
    op->phase = PCC_PHASE_OPT;
    op->attrs.lr = g->optim.lr;
    op->attrs.beta1 = g->optim.beta1;
    op->attrs.beta2 = g->optim.beta2;
    op->attrs.eps = g->optim.eps;
    op->attrs.weight_decay = g->optim.weight_decay;
    op->attrs.momentum = g->optim.momentum;
    // The op that finished the gradient adds into it across micro-batches.
    if (g->micro_batches > 1 && g->tensors[gp].producer >= 0) g->ops[g->tensors[gp].producer].accumulate = true;
}

static void optimizer(ad *A) {
    pcc_graph *g = A->g;
    A->scope = -1;
    for (int t = 0; t < A->nfwd; t++)
        if (g->tensors[t].kind == PCC_T_PARAM && g->tensors[t].block < 0) optimizer_op(A, t);
    int nfb = 0;
    for (int b = 0; b < g->n_blocks; b++) nfb += g->blocks[b].fwd < 0;
    for (int b = 0; b < nfb; b++) {
        if (g->blocks[b].fwd >= 0) continue;
        int ob = g->n_blocks;
        pcc_block *nb = VEC_PUSH(g->arena, g->blocks, g->n_blocks, g->cap_blocks);
        *nb = (pcc_block){.name = arena_printf(g->arena, "%s.opt", g->blocks[b].name), .ptr = g->blocks[b].ptr,
                          .repeat = g->blocks[b].repeat, .fwd = b, .first_op = g->n_ops};
        A->scope = ob;
        for (int t = 0; t < A->nfwd; t++)
            if (g->tensors[t].kind == PCC_T_PARAM && g->tensors[t].block == b) optimizer_op(A, t);
        g->blocks[ob].n_ops = g->n_ops - g->blocks[ob].first_op;
        if (g->blocks[ob].n_ops == 0) g->n_blocks--; // no trained params in this block
    }
    A->scope = -1;
}

pcc_status autodiff(pcc_graph *g) {
    PCC_ASSERT(g->n_ops == g->n_fwd_ops);
    ad A = {.g = g, .nfwd = g->n_tensors, .scope = -1};
    A.needs = arena_alloc(g->arena, sizeof(bool) * (size_t)A.nfwd);
    A.contrib = arena_alloc(g->arena, sizeof(int *) * (size_t)A.nfwd);
    A.ncontrib = arena_alloc(g->arena, sizeof(int) * (size_t)A.nfwd);
    A.capcontrib = arena_alloc(g->arena, sizeof(int) * (size_t)A.nfwd);
    compute_needs(&A);
    if (!A.needs[g->loss])
        return diag(g->file, "/loss", "the loss \"%s\" does not depend on any parameter; there is nothing to train",
                    g->tensors[g->loss].name);
    // The seed: d loss / d loss = 1 (1/micro_batches when accumulating).
    int seed = new_grad(&A, g->loss, "");
    int id = emit(&A, PCC_OP_FILL, -1, NULL, 0, &seed, 1);
    g->ops[id].attrs.scale = 1.0 / g->micro_batches;
    g->ops[id].ptr = "/loss";
    contribute(&A, g->loss, seed);
    for (int o = g->n_fwd_ops - 1; o >= 0; o--) {
        int b = g->ops[o].block;
        if (b < 0) {
            backward_op(&A, o);
            continue;
        }
        backward_block(&A, b);
        o = g->blocks[b].first_op;
    }
    for (int t = 0; t < A.nfwd; t++)
        if (g->tensors[t].kind == PCC_T_PARAM) grad_sum(&A, t);
    optimizer(&A);
    // Forward tensors the backward pass reads are the activations to keep.
    for (int o = g->n_fwd_ops; o < g->n_ops; o++)
        for (int i = 0; i < g->ops[o].nin; i++) {
            pcc_tensor *t = &g->tensors[g->ops[o].in[i]];
            if (g->ops[o].in[i] < A.nfwd && (t->kind == PCC_T_ACT || t->kind == PCC_T_INPUT) && g->ops[o].phase == PCC_PHASE_BWD)
                t->saved = true;
        }
    return PCC_OK;
}
