/*
 * check_attrs.c: the verifier's shape attributes against the buffers they describe (layer 2,
 * after plan_validate: indices in range). An operator whose attrs give a shape, a window or an
 * axis must agree with the local shapes of its buffers (each tensor buffer's piece: its
 * tensor's shape divided by its shard, plan_shard_local_shape), as the CPU kernels check at run
 * time (runtime/cpu/conv.c, movement.c); before this check a plan whose attrs disagreed passed
 * plan_check and failed only in its first step.
 *   - conv2d, conv2d_grad_x, conv2d_grad_w, maxpool, avgpool and their gradients: the window
 *     (attrs win: kernel of the pools, stride, padding; a convolution's kernel is its weight's
 *     [o,c,kh,kw]) takes the input's [h,w] to the output's [ho,wo]: ho = (h + 2 pad - k) /
 *     stride + 1, with stride >= 1, pad >= 0, and the window inside the padded input;
 *   - slice and slice_grad: 0 <= start < end <= the whole's size along axis, the part that size
 *     end - start there and the whole's elsewhere;
 *   - transpose: perm a permutation of the input's rank, the output the input permuted;
 *   - concat and split: the axis inside the rank, and the parts tiling the whole on every rank
 *     (each its local shape but along the axis, their sizes there adding up to its, no buffer
 *     twice): co-shard's pieces (compiler/coshard.c) one missing, overlapping, or split over the
 *     mesh otherwise than the rest (join-tiles);
 *   - an element-wise operator (ops.def's ELEMENTWISE rows with one output): every input that
 *     has dimensions splits each of them over the same mesh axes as the output's dimension it
 *     lines up with (attrs perm's axis map where the input is the smaller operand, else the
 *     suffix rule of broadcasting; a dimension of size 1 broadcasts), since
 *     its kernel runs index by index on the pieces (elementwise-shard). A reduce-scatter that
 *     cut a residual along the hidden instead of the sequence (Megatron's sequence parallelism)
 *     has its pieces of the right size but the wrong elements, and is caught here.
 *   - attention and attention_grad: the operands shaped like the queries (q, the output, its
 *     gradient dy, dq) split their batch and heads (axes 0 and 2) over the same mesh axes as q,
 *     the keys and values (k, v, dk, dv) their batch as q does and their heads as q does (or
 *     not at all, where grouped-query attention's kv heads are fewer), and no operand splits
 *     its sequence or head size (axes 1 and 3): every query reads every key of its head
 *     (attention-shard). An all-to-all of context parallelism onto the wrong dimension, or one
 *     left out, gives pieces of the right size but the wrong heads, and is caught here.
 *   - attention and its gradients: the form (attrs i[7], PLAN_ATTN_*) unfused or flash.
 * A scratch buffer has no shape to compare: an operator with one is not checked.
 */
#include "checker.h"

#include <stdio.h>
#include <string.h>

// The local shape of argument j of instruction in (false for a scratch buffer).
static bool arg_shape(const checker *c, const plan_program *pg, const plan_insn *in, uint32_t j, int64_t sh[PLAN_MAX_RANK],
                      int *rank) {
    if (j >= in->nargs) return false;
    const plan_buffer *b = &pg->buffers[pg->args[in->args + j]];
    if (b->tensor == PLAN_NONE) return false;
    const plan_tensor *t = &c->p->tensors[b->tensor];
    *rank = t->rank;
    return plan_shard_local_shape(c->p, t, b->shard, sh);
}

static int64_t window_out(int64_t in, int64_t k, int64_t stride, int64_t pad) {
    if (stride < 1 || pad < 0 || k < 1 || in + 2 * pad < k) return -1;
    return (in + 2 * pad - k) / stride + 1;
}

// The window from x [n,c,h,w] to y [n,*,ho,wo] with kernel kh x kw and attrs win's stride and
// padding.
static plan_status check_window(checker *c, uint32_t k, uint32_t i, const int64_t *x, const int64_t *y, int64_t kh, int64_t kw) {
    const plan_program *pg = &c->p->programs[k];
    const int32_t *w = pg->attrs[pg->insns[i].attrs].win;
    int64_t ho = window_out(x[2], kh, w[2], w[4]), wo = window_out(x[3], kw, w[3], w[5]);
    if (ho == y[2] && wo == y[3]) return PLAN_OK;
    return check_ifail(c, k, i, "attrs %u: a %lldx%lld window with stride %dx%d and padding %dx%d takes the input's %lldx%lld to "
                       "%lldx%lld, but the buffers say %lldx%lld", pg->insns[i].attrs, (long long)kh, (long long)kw, w[2], w[3],
                       w[4], w[5], (long long)x[2], (long long)x[3], (long long)ho, (long long)wo, (long long)y[2],
                       (long long)y[3]);
}

// Convolutions and pools: which arguments are x (the image), w (the weights) and y (the window's
// output), by operator; false when op has no window.
static bool window_roles(const char *op, int *x, int *w, int *y) {
    static const struct { const char *op; int x, w, y; } roles[] = {
        {"conv2d", 0, 1, -1},        {"conv2d_grad_x", -1, 1, 0}, {"conv2d_grad_w", 1, -1, 0},
        {"maxpool", 0, -1, -1},      {"avgpool", 0, -1, -1},      {"maxpool_grad", 1, -1, 0},
        {"avgpool_grad", -1, -1, 0},
    };
    for (size_t r = 0; r < sizeof roles / sizeof *roles; r++)
        if (!strcmp(op, roles[r].op)) return *x = roles[r].x, *w = roles[r].w, *y = roles[r].y, true;
    return false;
}

static plan_status check_windowed(checker *c, uint32_t k, uint32_t i, const char *op) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    int xr, wr, yr, r;
    if (!window_roles(op, &xr, &wr, &yr) || in->attrs == PLAN_NONE) return PLAN_OK;
    uint32_t nin = in->nargs - 1; // one output
    // -1: the output (x for a gradient w.r.t. the input, y for the forward)
    uint32_t xj = xr < 0 ? nin : (uint32_t)xr, yj = yr < 0 ? nin : (uint32_t)yr;
    int64_t x[PLAN_MAX_RANK], y[PLAN_MAX_RANK], w[PLAN_MAX_RANK] = {0};
    bool conv = !strncmp(op, "conv2d", 6);
    if (!arg_shape(c, pg, in, xj, x, &r) || r != 4 || !arg_shape(c, pg, in, yj, y, &r) || r != 4) return PLAN_OK;
    if (conv && (wr < 0 ? !arg_shape(c, pg, in, nin, w, &r) : !arg_shape(c, pg, in, (uint32_t)wr, w, &r))) return PLAN_OK;
    const int32_t *win = pg->attrs[in->attrs].win;
    return check_window(c, k, i, x, y, conv ? w[2] : win[0], conv ? w[3] : win[1]);
}

// slice: part = whole[start:end] along axis; slice_grad the other way.
static plan_status check_slice(checker *c, uint32_t k, uint32_t i, bool grad) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    int64_t whole[PLAN_MAX_RANK], part[PLAN_MAX_RANK];
    int rw, rp;
    if (in->attrs == PLAN_NONE || in->nargs != 2 || !arg_shape(c, pg, in, grad ? 1 : 0, whole, &rw) ||
        !arg_shape(c, pg, in, grad ? 0 : 1, part, &rp))
        return PLAN_OK;
    const int64_t *a = pg->attrs[in->attrs].i;
    int64_t axis = a[PLAN_AI_AXIS], s = a[PLAN_AI_START], e = a[PLAN_AI_END];
    if (axis < 0 || axis >= rw || rp != rw)
        return check_ifail(c, k, i, "attrs %u: axis %lld of a rank-%d whole and a rank-%d part", in->attrs, (long long)axis, rw, rp);
    bool ok = s >= 0 && s < e && e <= whole[axis];
    for (int d = 0; d < rw && ok; d++) ok = part[d] == (d == axis ? e - s : whole[d]);
    if (ok) return PLAN_OK;
    char ws[128], ps[128];
    check_shape_text(whole, rw, ws, sizeof ws);
    check_shape_text(part, rp, ps, sizeof ps);
    return check_ifail(c, k, i, "attrs %u: slice [%lld, %lld) along axis %lld of the whole %s, but the part is %s", in->attrs,
                       (long long)s, (long long)e, (long long)axis, ws, ps);
}

static plan_status check_transpose(checker *c, uint32_t k, uint32_t i) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    int64_t x[PLAN_MAX_RANK], y[PLAN_MAX_RANK];
    int rx, ry;
    if (in->attrs == PLAN_NONE || in->nargs != 2 || !arg_shape(c, pg, in, 0, x, &rx) || !arg_shape(c, pg, in, 1, y, &ry))
        return PLAN_OK;
    const int32_t *perm = pg->attrs[in->attrs].perm;
    bool seen[PLAN_MAX_RANK] = {false}, ok = rx == ry;
    for (int d = 0; d < rx && ok; d++) {
        ok = perm[d] >= 0 && perm[d] < rx && !seen[perm[d]] && y[d] == x[perm[d]];
        if (ok) seen[perm[d]] = true;
    }
    if (ok) return PLAN_OK;
    char xs[128], ys[128];
    check_shape_text(x, rx, xs, sizeof xs);
    check_shape_text(y, ry, ys, sizeof ys);
    return check_ifail(c, k, i, "attrs %u: perm %d,%d,%d,%d... does not take the input %s to the output %s (output dimension d is "
                       "input dimension perm[d])", in->attrs, perm[0], perm[1], perm[2], perm[3], xs, ys);
}

// Whether part j of a join is a co-shard piece of its whole: the whole's tensor is "T", the part's
// "T.csN" (compiler/coshard.c names them so).
static bool coshard_piece(const checker *c, const plan_program *pg, const plan_insn *in, uint32_t whole, uint32_t j) {
    const plan_buffer *w = &pg->buffers[pg->args[in->args + whole]], *b = &pg->buffers[pg->args[in->args + j]];
    if (w->tensor == PLAN_NONE || b->tensor == PLAN_NONE) return false;
    const char *wn = c->p->tensors[w->tensor].name, *bn = c->p->tensors[b->tensor].name;
    size_t n = strlen(wn);
    return strncmp(bn, wn, n) == 0 && strncmp(bn + n, ".cs", 3) == 0;
}

// concat and split: the axis lies inside the rank of the whole.
static plan_status check_join_axis(checker *c, uint32_t k, uint32_t i, bool split) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    int64_t sh[PLAN_MAX_RANK];
    int r;
    uint32_t whole = split ? 0 : in->nargs - 1;
    if (in->attrs == PLAN_NONE || !in->nargs || !arg_shape(c, pg, in, whole, sh, &r)) return PLAN_OK;
    int64_t axis = pg->attrs[in->attrs].i[PLAN_AI_AXIS];
    if (axis < 0 || axis >= r)
        return check_ifail(c, k, i, "attrs %u: axis %lld is out of range for the rank-%d %s", in->attrs, (long long)axis, r,
                           split ? "input" : "output");
    // The parts tile the whole on this rank: each its shape but along the axis, their sizes there
    // adding up to its (co-shard's pieces: one missing, two overlapping, or one split over the mesh
    // otherwise than the rest are caught here). A split writes each part once; a concat may read a
    // buffer twice (cat([x, x])), but not a co-shard piece in another piece's place.
    int64_t sum = 0, part[PLAN_MAX_RANK];
    int rp;
    for (uint32_t j = 0; j < in->nargs; j++) {
        if (j == whole) continue;
        if (!arg_shape(c, pg, in, j, part, &rp)) return PLAN_OK;
        for (uint32_t q = split ? 1 : 0; q < j; q++)
            if (pg->args[in->args + q] == pg->args[in->args + j] && (split || coshard_piece(c, pg, in, whole, q)))
                return check_ifail(c, k, i, "%s: part %u is buffer %u again: the parts overlap", split ? "split" : "concat", j,
                                   pg->args[in->args + j]);
        for (int d = 0; d < r; d++)
            if (rp != r || (d != axis && part[d] != sh[d]))
                return check_ifail(c, k, i, "%s: part %u (buffer %u) has another shape than the whole's but along axis %lld",
                                   split ? "split" : "concat", j, pg->args[in->args + j], (long long)axis);
        sum += part[axis];
    }
    if (sum == sh[axis]) return PLAN_OK;
    return check_ifail(c, k, i, "%s: the parts hold %lld along axis %lld, the whole %lld: a part is missing or extra",
                       split ? "split" : "concat", (long long)sum, (long long)axis, (long long)sh[axis]);
}

// ops.def's flags, as this file needs them: element-wise with one output.
enum { USER = 0, INTERNAL = 0, MATMUL = 0, RNG = 0, LOSS = 0, INPLACE = 0, BCAST = 0, ELEMENTWISE = 1 };
static const bool elementwise_one_out[] = {
#define OP(E, name, imin, imax, nout, ann, flags) ((flags) & ELEMENTWISE) && (nout) == 1,
#include "../ops.def"
#undef OP
};

// An element-wise operator's inputs split as its output does, dimension by dimension.
static plan_status check_elementwise(checker *c, uint32_t k, uint32_t i) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    if (in->code >= sizeof elementwise_one_out / sizeof *elementwise_one_out || !elementwise_one_out[in->code] || !in->nargs)
        return PLAN_OK;
    const plan_buffer *y = &pg->buffers[pg->args[in->args + in->nargs - 1]];
    if (y->tensor == PLAN_NONE) return PLAN_OK;
    const plan_tensor *ty = &p->tensors[y->tensor];
    for (uint32_t j = 0; j + 1 < in->nargs; j++) {
        const plan_buffer *x = &pg->buffers[pg->args[in->args + j]];
        if (x->tensor == PLAN_NONE) continue;
        const plan_tensor *tx = &p->tensors[x->tensor];
        if (tx->rank > ty->rank) continue; // arity and shapes are other checks' business
        const int32_t *perm = in->attrs != PLAN_NONE && tx->rank < ty->rank ? pg->attrs[in->attrs].perm : NULL;
        bool mapped = false;
        for (int d = 0; perm && d < tx->rank; d++) mapped |= perm[d] != 0;
        for (int d = 0; d < tx->rank; d++) {
            int e = mapped ? perm[d] - 1 : ty->rank - tx->rank + d;
            if (e < 0 || e >= ty->rank) continue; // a bad map is check_struct's business
            uint32_t mx = check_split_axes(p, x->shard, d), my = check_split_axes(p, y->shard, e);
            if (mx == my || tx->shape[d] == 1) continue;
            char sx[80], sy[80];
            check_shard_desc(p, x->shard, sx, sizeof sx);
            check_shard_desc(p, y->shard, sy, sizeof sy);
            return check_ifail(c, k, i, "element-wise %s: input %u (tensor \"%s\", %s) and the output (tensor \"%s\", %s) split "
                               "dimension %d (output dimension %d) differently: the kernel would combine elements of different "
                               "places", plan_op_name(in->code), j, tx->name, sx, ty->name, sy, d, e);
        }
    }
    return PLAN_OK;
}

// dropout's and attention's drop probability (f[PLAN_AF_P], attention's dropout of its
// probabilities) in [0, 1): the kernels refuse another in the middle of a step.
static plan_status check_drop_p(checker *c, uint32_t k, uint32_t i, const char *op) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    if (in->attrs == PLAN_NONE || (strncmp(op, "dropout", 7) && strncmp(op, "attention", 9))) return PLAN_OK;
    double p = pg->attrs[in->attrs].f[PLAN_AF_P];
    if (p >= 0 && p < 1) return PLAN_OK;
    return check_ifail(c, k, i, "attrs %u: %s's drop probability %g is outside [0, 1)", in->attrs, op, p);
}

// attention's, attention_grad's and attention_grad_bias's form (i[PLAN_AI_MODE]): PLAN_ATTN_UNFUSED
// or PLAN_ATTN_FLASH; the backends know no other.
static plan_status check_attn_form(checker *c, uint32_t k, uint32_t i, const char *op) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    if (in->attrs == PLAN_NONE || strncmp(op, "attention", 9)) return PLAN_OK;
    int64_t m = pg->attrs[in->attrs].i[PLAN_AI_MODE];
    if (m == PLAN_ATTN_UNFUSED || m == PLAN_ATTN_FLASH) return PLAN_OK;
    return check_ifail(c, k, i, "attrs %u: %s's form (i[7]) is %lld; it must be 0 (unfused) or 1 (flash)", in->attrs, op, (long long)m);
}

// Attention's operands split alike: the queries' batch and heads, no sequence, no head size.
static plan_status check_attention(checker *c, uint32_t k, uint32_t i, bool grad) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    // operand indices (inputs, then outputs) of q-like and kv-like operands; -1 past the end
    int nin = in->nargs - (grad ? 3 : 1), qi = grad ? 1 : 0;
    if (nin < 3 || nin > 5) return PLAN_OK; // arity is another check's business
    int ql[3] = {grad ? 0 : nin, grad ? nin : -1, -1}, kv[4] = {qi + 1, qi + 2, grad ? nin + 1 : -1, grad ? nin + 2 : -1};
    const plan_buffer *q = &pg->buffers[pg->args[in->args + qi]];
    if (q->tensor == PLAN_NONE || p->tensors[q->tensor].rank != 4) return PLAN_OK;
    const plan_tensor *tq = &p->tensors[q->tensor];
    for (int j = -1; j < 7; j++) {
        int o = j < 0 ? qi : j < 3 ? ql[j] : kv[j - 3];
        if (o < 0) continue;
        const plan_buffer *x = &pg->buffers[pg->args[in->args + (uint32_t)o]];
        if (x->tensor == PLAN_NONE || p->tensors[x->tensor].rank != 4) continue;
        const plan_tensor *tx = &p->tensors[x->tensor];
        for (int d = 0; d < 4; d++) {
            uint32_t mx = check_split_axes(p, x->shard, d), mq = check_split_axes(p, q->shard, d);
            bool ok = d == 1 || d == 3 ? mx == 0 : mx == mq || (j >= 3 && d == 2 && mx == 0 && tx->shape[2] != tq->shape[2]);
            if (ok) continue;
            char sx[80], sq[80];
            check_shard_desc(p, x->shard, sx, sizeof sx);
            check_shard_desc(p, q->shard, sq, sizeof sq);
            if (d == 1 || d == 3)
                return check_ifail(c, k, i, "%s: operand %d (tensor \"%s\", %s) splits its %s, which attention cannot split: "
                                   "every query reads every key of its head", plan_op_name(in->code), o, tx->name, sx,
                                   d == 1 ? "sequence" : "head size");
            return check_ifail(c, k, i, "%s: operand %d (tensor \"%s\", %s) splits its %s otherwise than q (tensor \"%s\", %s)",
                               plan_op_name(in->code), o, tx->name, sx, d == 0 ? "batch" : "heads", tq->name, sq);
        }
    }
    return PLAN_OK;
}

plan_status check_attrs_shapes(checker *c, uint32_t k, uint32_t i) {
    const plan_insn *in = &c->p->programs[k].insns[i];
    const char *op = in->kind == PLAN_I_COMPUTE ? plan_op_name(in->code) : NULL;
    if (!op) return PLAN_OK;
    plan_status st = check_elementwise(c, k, i);
    if (!st) st = check_drop_p(c, k, i, op);
    if (!st) st = check_attn_form(c, k, i, op);
    if (!st && (!strcmp(op, "attention") || !strcmp(op, "attention_grad"))) st = check_attention(c, k, i, op[9] != 0);
    if (st) return st;
    if (!strcmp(op, "slice") || !strcmp(op, "slice_grad")) return check_slice(c, k, i, op[5] != 0);
    if (!strcmp(op, "transpose")) return check_transpose(c, k, i);
    if (!strcmp(op, "concat") || !strcmp(op, "split")) return check_join_axis(c, k, i, op[0] == 's');
    return check_windowed(c, k, i, op);
}
