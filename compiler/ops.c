/*
 * ops.c: the operator table's compiler side: shape rules and costs of every operator.
 *
 * Most operators are checked by their annotation alone (runtime/ops.def): each letter binds one
 * of the model's named dimensions, each "*x" group a run of leading dimensions, and every
 * occurrence must agree. Letters that occur only in outputs (a convolution's output height, the
 * vocabulary of an embedding's gradient) bind from the declared output and are then checked by
 * the operator's own rule. Operators whose annotation is "" (concat, reshape, ...) have only
 * their own rule. A failing check names the operand (FILE:/ops/3/in/1) and says what it wanted.
 *
 * FLOPs follow the usual convention (a multiply-add is 2); attention counts the full s x s score
 * matrix as Megatron-LM does, causal or not. graph_totals sums them, and the parameters' and
 * kept activations' bytes, over the whole graph (the --check report, and the memory that phase
 * 2 counts per device).
 */
#include "plancc.h"

#include <stdarg.h>
#include <string.h>

#define USER PCC_OPF_USER
#define INTERNAL PCC_OPF_INTERNAL
#define ELEMENTWISE PCC_OPF_ELEMENTWISE
#define MATMUL PCC_OPF_MATMUL
#define LOSS PCC_OPF_LOSS
#define INPLACE PCC_OPF_INPLACE
#define BCAST PCC_OPF_BCAST
#define RNG PCC_OPF_RNG
const pcc_op_info pcc_ops[PCC_OP_COUNT] = {
#define OP(E, name, imin, imax, nout, ann, flags) [PCC_OP_##E] = {#name, imin, imax, nout, ann, flags},
#include "../runtime/ops.def"
#undef OP
};
#undef USER
#undef INTERNAL
#undef ELEMENTWISE
#undef MATMUL
#undef LOSS
#undef INPLACE
#undef BCAST
#undef RNG
_Static_assert(PCC_OP_COUNT == 105, "operator count changed: update the tests' operator list");

int op_lookup(const char *name) {
    for (int i = 0; i < PCC_OP_COUNT; i++)
        if (strcmp(pcc_ops[i].name, name) == 0) return i;
    return -1;
}

/* ---- annotations ---- */

typedef struct ann_dim {
    char name[8];
    bool variadic, reduce, nosplit;
} ann_dim;
typedef struct ann_tensor {
    int n;
    ann_dim d[PCC_MAX_RANK];
} ann_tensor;
typedef struct ann {
    bool parsed, custom;
    int nin, nout;
    ann_tensor in[6], out[3];
} ann;

static ann anns[PCC_OP_COUNT];

static const char *parse_tensor(const char *s, ann_tensor *t) {
    t->n = 0;
    for (;;) {
        while (*s == ' ') s++;
        if (!*s || *s == ',' || *s == '-') return s;
        ann_dim *d = &t->d[t->n++];
        PCC_ASSERT(t->n <= PCC_MAX_RANK);
        memset(d, 0, sizeof *d);
        if (*s == '*') {
            d->variadic = true;
            s++;
        }
        int k = 0;
        while ((*s >= 'a' && *s <= 'z')) {
            PCC_ASSERT(k < 7);
            d->name[k++] = *s++;
        }
        PCC_ASSERT(k > 0);
        if (*s == '+') d->reduce = true, s++;
        if (*s == '^') d->nosplit = true, s++;
    }
}

static const ann *ann_get(pcc_op_kind k) {
    ann *a = &anns[k];
    if (a->parsed) return a;
    a->parsed = true;
    const char *s = pcc_ops[k].annotation;
    if (!*s) {
        a->custom = true;
        return a;
    }
    ann_tensor *side = a->in;
    int *count = &a->nin;
    for (;;) {
        s = parse_tensor(s, &side[*count]);
        (*count)++;
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s == '-') {
            PCC_ASSERT(s[1] == '>');
            s += 2;
            side = a->out;
            count = &a->nout;
            while (*s == ' ') s++;
            if (!*s) {
                // " -> ": scalar output(s)
                a->nout = pcc_ops[k].nout > 0 ? pcc_ops[k].nout : 0;
                for (int i = 0; i < a->nout; i++) a->out[i].n = 0;
                return a;
            }
            continue;
        }
        PCC_ASSERT(*s == 0);
        return a;
    }
}

/* ---- checking ---- */

typedef struct checker {
    const pcc_graph *g;
    const pcc_op *op;
    const char *src; // file for diagnostics; NULL: stay silent (verifier)
    struct {
        char name[8];
        int first, n;   // variadic: dims[first..first+n) of `owner`; letter: n = 1
        int dims[PCC_MAX_RANK];
        int operand;    // where it was bound: input i, or -(1 + output i)
    } bind[24];
    int nbind;
} checker;

static const char *operand_ptr(const checker *c, int operand) {
    if (operand >= 0) return arena_printf(c->g->arena, "%s/in/%d", c->op->ptr, operand);
    return arena_printf(c->g->arena, "%s/out/%d", c->op->ptr, -1 - operand);
}

static const pcc_tensor *operand(const checker *c, int operand) {
    return &c->g->tensors[operand >= 0 ? c->op->in[operand] : c->op->out[-1 - operand]];
}

static const char *operand_desc(const checker *c, int o) {
    const pcc_tensor *t = operand(c, o);
    char sh[256];
    return arena_printf(c->g->arena, "%s %d \"%s\" %s", o >= 0 ? "input" : "output",
                        o >= 0 ? o : -1 - o, t->name, shape_str(c->g, t, sh, sizeof sh));
}

static pcc_status fail(const checker *c, int o, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static pcc_status fail(const checker *c, int o, const char *fmt, ...) {
    if (!c->src) return PCC_ERR_INPUT;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return diag(c->src, operand_ptr(c, o), "%s: %s %s", pcc_ops[c->op->kind].name, operand_desc(c, o), msg);
}

static char *dims_str(const pcc_graph *g, const int *dims, int n, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? "," : "", g->dims[dims[i]].name);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

// Binds or checks letter `d` against dims[0..n) of operand o.
static pcc_status bind_dim(checker *c, const ann_dim *d, const int *dims, int n, int o) {
    for (int i = 0; i < c->nbind; i++) {
        if (strcmp(c->bind[i].name, d->name) != 0) continue;
        if (c->bind[i].n == n && memcmp(c->bind[i].dims, dims, sizeof(int) * (size_t)n) == 0)
            return PCC_OK;
        char want[256], got[256];
        if (d->variadic) {
            dims_str(c->g, c->bind[i].dims, c->bind[i].n, want, sizeof want);
            dims_str(c->g, dims, n, got, sizeof got);
        } else {
            snprintf(want, sizeof want, "%s", c->g->dims[c->bind[i].dims[0]].name);
            snprintf(got, sizeof got, "%s", c->g->dims[dims[0]].name);
        }
        const char *what = d->variadic ? "leading dimensions" : "dimension";
        return fail(c, o, "has %s %s%s = %s, but %s has %s%s = %s (annotation \"%s\")", what, d->variadic ? "*" : "",
                    d->name, got, operand_desc(c, c->bind[i].operand), d->variadic ? "*" : "", d->name, want,
                    pcc_ops[c->op->kind].annotation);
    }
    PCC_ASSERT(c->nbind < 24);
    strcpy(c->bind[c->nbind].name, d->name);
    c->bind[c->nbind].n = n;
    memcpy(c->bind[c->nbind].dims, dims, sizeof(int) * (size_t)n);
    c->bind[c->nbind].operand = o;
    c->nbind++;
    return PCC_OK;
}

static pcc_status bind_tensor(checker *c, const ann_tensor *a, int o) {
    const pcc_tensor *t = operand(c, o);
    bool var = a->n > 0 && a->d[0].variadic;
    int fixed = var ? a->n - 1 : a->n;
    if (t->rank < fixed || (!var && t->rank != fixed)) {
        char want[128] = "";
        size_t k = 0;
        for (int i = 0; i < a->n; i++)
            k += (size_t)snprintf(want + k, sizeof want - k, "%s%s%s", i ? " " : "", a->d[i].variadic ? "*" : "", a->d[i].name);
        return fail(c, o, "has rank %d; the annotation wants [%s]%s", t->rank, want,
                    var ? " (any number of leading dimensions)" : "");
    }
    int lead = t->rank - fixed;
    int pos = 0;
    for (int i = 0; i < a->n; i++) {
        int n = a->d[i].variadic ? lead : 1;
        pcc_status st = bind_dim(c, &a->d[i], t->dims + pos, n, o);
        if (st) return st;
        pos += n;
    }
    return PCC_OK;
}

static int64_t dsize(const pcc_graph *g, const pcc_tensor *t, int i) { return g->dims[t->dims[i]].size; }

static bool same_shape(const pcc_tensor *a, const pcc_tensor *b) {
    return a->rank == b->rank && memcmp(a->dims, b->dims, sizeof(int) * (size_t)a->rank) == 0;
}

static bool is_float(pcc_dtype t) { return t != PCC_I32; }

static int operand_tensor(const pcc_op *op, int o);

// Which operands hold integer ids (everything else is float); data-movement ops take any dtype
// and keep it.
static bool int_operand(pcc_op_kind k, int o) {
    switch (k) {
    case PCC_OP_EMBEDDING: case PCC_OP_EMBEDDING_BAG: return o == 0;
    case PCC_OP_CROSS_ENTROPY: return o == 1;
    case PCC_OP_EMBEDDING_GRAD: case PCC_OP_EMBEDDING_BAG_GRAD: return o == 1;
    case PCC_OP_CROSS_ENTROPY_GRAD: return o == 2;
    case PCC_OP_NE: case PCC_OP_ONE_HOT: return o == 0;
    case PCC_OP_TOPK_GRAD: return o == 1;
    case PCC_OP_GATHER: case PCC_OP_INDEX_SELECT: case PCC_OP_GATHER_GRAD: case PCC_OP_INDEX_SELECT_GRAD: return o == 1;
    default: return false;
    }
}

// Which outputs hold integer ids: topk's indices.
static bool int_output(pcc_op_kind k, int o) { return k == PCC_OP_TOPK && o == 1; }

// Float operands exempt from the one-dtype rule: a loss's scalar (its output, and the seed its
// gradient reads) may be wider than the logits; optimizer state and master weights are f32
// whatever the parameter's dtype.
static bool own_dtype(pcc_op_kind k, int o) {
    switch (k) {
    case PCC_OP_CROSS_ENTROPY: case PCC_OP_MSE_LOSS: case PCC_OP_BCE_LOGITS: return o < 0;
    case PCC_OP_CROSS_ENTROPY_GRAD: case PCC_OP_MSE_LOSS_GRAD: case PCC_OP_BCE_LOGITS_GRAD: return o == 0;
    case PCC_OP_SGD: case PCC_OP_ADAMW: return o >= 2;
    default: return false;
    }
}

static bool moves_data(pcc_op_kind k) {
    return k == PCC_OP_CONCAT || k == PCC_OP_SPLIT || k == PCC_OP_SLICE || k == PCC_OP_RESHAPE ||
           k == PCC_OP_TRANSPOSE || k == PCC_OP_SLICE_GRAD;
}

static pcc_status check_dtypes(checker *c) {
    const pcc_op *op = c->op;
    const pcc_graph *g = c->g;
    if (moves_data(op->kind)) {
        pcc_dtype t = g->tensors[op->in[0]].dtype;
        for (int i = 1; i < op->nin; i++)
            if (g->tensors[op->in[i]].dtype != t)
                return fail(c, i, "is %s; input 0 is %s and all inputs must agree",
                            pcc_dtype_names[g->tensors[op->in[i]].dtype], pcc_dtype_names[t]);
        for (int i = 0; i < op->nout; i++)
            if (g->tensors[op->out[i]].dtype != t)
                return fail(c, -1 - i, "is %s; the input is %s", pcc_dtype_names[g->tensors[op->out[i]].dtype], pcc_dtype_names[t]);
        return PCC_OK;
    }
    int ref = -1; // the first float operand whose dtype the others must share
    for (int o = 0; o < op->nin + op->nout; o++) {
        int oo = o < op->nin ? o : -1 - (o - op->nin);
        const pcc_tensor *t = operand(c, oo);
        bool want_int = o < op->nin ? int_operand(op->kind, o) : int_output(op->kind, o - op->nin);
        if (want_int && t->dtype != PCC_I32) return fail(c, oo, "is %s; this operand holds integer ids and must be i32", pcc_dtype_names[t->dtype]);
        if (want_int) continue;
        if (!is_float(t->dtype)) return fail(c, oo, "is %s; this operand must be a float tensor", pcc_dtype_names[t->dtype]);
        if (own_dtype(op->kind, oo)) continue;
        if (ref == -1) ref = oo;
        else if (t->dtype != operand(c, ref)->dtype)
            return fail(c, oo, "is %s while %s is %s; an operator's float operands share one dtype",
                        pcc_dtype_names[t->dtype], operand_desc(c, ref), pcc_dtype_names[operand(c, ref)->dtype]);
    }
    return PCC_OK;
}

/* ---- axis maps: broadcasting and reductions (attrs perm; runtime/ops.def's last section) ---- */

static bool map_given(const pcc_attrs *a) {
    for (int i = 0; i < PCC_MAX_RANK; i++)
        if (a->perm[i]) return true;
    return false;
}

int op_map_axis(const pcc_attrs *a, int big_rank, int small_rank, int j) {
    return map_given(a) ? a->perm[j] - 1 : big_rank - small_rank + j;
}

bool op_map_find(const pcc_graph *g, const pcc_tensor *big, const pcc_tensor *small, pcc_attrs *a) {
    memset(a->perm, 0, sizeof a->perm);
    if (small->rank > big->rank) return false;
    if (memcmp(small->dims, big->dims + (big->rank - small->rank), sizeof(int) * (size_t)small->rank) == 0) return true;
    // Right-aligned, greedy: the small operand's last axis is the big one's last of that dimension.
    int at = big->rank - 1;
    for (int j = small->rank - 1; j >= 0; j--) {
        while (at >= 0 && big->dims[at] != small->dims[j]) at--;
        if (at < 0) {
            memset(a->perm, 0, sizeof a->perm); // no map: the shape rule reports the suffix rule's failure
            return false;
        }
        a->perm[j] = at-- + 1;
    }
    (void)g;
    return true;
}

void op_map_canon(pcc_attrs *a, int big_rank, int small_rank) {
    bool suffix = true;
    for (int j = 0; j < small_rank; j++) suffix &= a->perm[j] == big_rank - small_rank + j + 1;
    if (suffix) memset(a->perm, 0, sizeof a->perm);
}

// The smaller operand's axes are distinct, increasing axes of the larger one, each the same
// dimension (`so` is the smaller operand, reported when they are not).
static pcc_status check_mapped(checker *c, const pcc_tensor *big, const pcc_tensor *small, int so) {
    const pcc_graph *g = c->g;
    char sh[256];
    if (small->rank > big->rank)
        return fail(c, so, "has more dimensions than %s; it must be that shape with some axes left out", shape_str(g, big, sh, sizeof sh));
    int last = -1;
    for (int j = 0; j < small->rank; j++) {
        int ax = op_map_axis(&c->op->attrs, big->rank, small->rank, j);
        if (ax <= last || ax >= big->rank)
            return fail(c, so, "axis %d maps to axis %d of %s, out of order or out of range", j, ax, shape_str(g, big, sh, sizeof sh));
        if (big->dims[ax] != small->dims[j])
            return fail(c, so, "axis %d is %s, but the axis it stands for in %s is %s", j, g->dims[small->dims[j]].name,
                        shape_str(g, big, sh, sizeof sh), g->dims[big->dims[ax]].name);
        last = ax;
    }
    return PCC_OK;
}

// sum, mean, max, reduce_sum (input big, output small), expand (input small, output big),
// max_grad (dy small, x and dx big).
static pcc_status check_reduce(checker *c) {
    const pcc_graph *g = c->g;
    const pcc_op *op = c->op;
    const pcc_tensor *x = &g->tensors[op->in[0]], *y = &g->tensors[op->out[0]];
    char sh[256];
    switch (op->kind) {
    case PCC_OP_EXPAND: return check_mapped(c, y, x, 0);
    case PCC_OP_MAX_GRAD: {
        const pcc_tensor *xx = &g->tensors[op->in[1]];
        if (!same_shape(xx, y)) return fail(c, -1, "must have input 1's shape %s", shape_str(g, xx, sh, sizeof sh));
        return check_mapped(c, xx, x, 0);
    }
    default: return check_mapped(c, x, y, -1);
    }
}

/* ---- attention: q [b,s,n,d], k [b,t,m,d], v [b,t,m,e] (n a multiple of m: grouped-query heads),
 * an optional additive bias whose axes are some of the scores' [b,n,s,t] (attrs perm maps them;
 * zeros: its last axes), out [b,s,n,e]. attention_grad takes dy first and makes dq, dk, dv;
 * attention_grad_bias the bias's gradient. ---- */

typedef struct attn_ops {
    int q, k, v, y, bias;   // operand indices (y: the output, or dy for the gradients); bias -1: none
} attn_ops;

static attn_ops attn_operands(const pcc_op *op) {
    if (op->kind == PCC_OP_ATTENTION) return (attn_ops){0, 1, 2, op->nin, op->nin > 3 ? 3 : -1};
    return (attn_ops){1, 2, 3, 0, op->nin > 4 ? 4 : -1};
}

// The logical [b,n,s,t] dims of the scores.
static void attn_score_dims(const pcc_graph *g, const pcc_op *op, int *dims) {
    attn_ops a = attn_operands(op);
    const pcc_tensor *q = &g->tensors[operand_tensor(op, a.q)], *k = &g->tensors[operand_tensor(op, a.k)];
    dims[0] = q->dims[0], dims[1] = q->dims[2], dims[2] = q->dims[1], dims[3] = k->dims[1];
}

static pcc_status attn_same(checker *c, int o, int axis, int ref, int ref_axis, const char *what) {
    const pcc_tensor *t = operand(c, o), *r = operand(c, ref);
    if (t->dims[axis] == r->dims[ref_axis]) return PCC_OK;
    return fail(c, o, "axis %d (%s) is %s, but %s's is %s", axis, what, c->g->dims[t->dims[axis]].name, operand_desc(c, ref),
                c->g->dims[r->dims[ref_axis]].name);
}

static pcc_status check_attention(checker *c) {
    const pcc_graph *g = c->g;
    const pcc_op *op = c->op;
    attn_ops a = attn_operands(op);
    int n = op->nin + op->nout;
    for (int o = 0; o < n; o++) {
        int oo = o < op->nin ? o : -1 - (o - op->nin);
        if (o != a.bias && !(op->kind == PCC_OP_ATTENTION_GRAD_BIAS && o == op->nin) && operand(c, oo)->rank != 4)
            return fail(c, oo, "has rank %d; attention's operands are [b,s,n,d], [b,t,m,d], [b,t,m,e] and [b,s,n,e]", operand(c, oo)->rank);
    }
    pcc_status st;
    int y = a.y < op->nin ? a.y : -1 - (a.y - op->nin);
    if ((st = attn_same(c, a.k, 0, a.q, 0, "b")) || (st = attn_same(c, a.v, 0, a.q, 0, "b")) || (st = attn_same(c, a.k, 3, a.q, 3, "d")) ||
        (st = attn_same(c, a.v, 1, a.k, 1, "t")) || (st = attn_same(c, a.v, 2, a.k, 2, "m")) || (st = attn_same(c, y, 0, a.q, 0, "b")) ||
        (st = attn_same(c, y, 1, a.q, 1, "s")) || (st = attn_same(c, y, 2, a.q, 2, "n")) || (st = attn_same(c, y, 3, a.v, 3, "e")))
        return st;
    int64_t heads = dsize(g, operand(c, a.q), 2), kv = dsize(g, operand(c, a.k), 2);
    if (heads % kv != 0)
        return fail(c, a.k, "has %lld heads; the query's %lld must be a multiple of them (grouped-query attention)", (long long)kv, (long long)heads);
    if (op->kind == PCC_OP_ATTENTION_GRAD) // dq, dk, dv like q, k, v
        for (int i = 0; i < 3; i++)
            if (!same_shape(operand(c, -1 - i), operand(c, a.q + i)))
                return fail(c, -1 - i, "must have %s's shape", operand_desc(c, a.q + i));
    if (a.bias < 0) return PCC_OK;
    if (op->kind == PCC_OP_ATTENTION_GRAD_BIAS && !same_shape(operand(c, -1), operand(c, a.bias)))
        return fail(c, -1, "must have the bias's shape");
    pcc_tensor scores = {.rank = 4};
    attn_score_dims(g, op, scores.dims);
    return check_mapped(c, &scores, operand(c, a.bias), a.bias);
}

/* ---- gather (torch.gather: out[.., i, ..] = x[.., idx[.., i, ..], ..] along axis; idx like out,
 * every other axis x's) and index_select (out = x with its axis replaced by idx's rows: x[.., idx,
 * ..]); their gradients scatter dy back into x's shape ---- */

static pcc_status check_gather(checker *c) {
    const pcc_graph *g = c->g;
    const pcc_op *op = c->op;
    bool grad = op->kind == PCC_OP_GATHER_GRAD || op->kind == PCC_OP_INDEX_SELECT_GRAD;
    bool sel = op->kind == PCC_OP_INDEX_SELECT || op->kind == PCC_OP_INDEX_SELECT_GRAD;
    const pcc_tensor *x = &g->tensors[grad ? op->out[0] : op->in[0]], *idx = &g->tensors[op->in[1]];
    const pcc_tensor *y = &g->tensors[grad ? op->in[0] : op->out[0]];
    int xo = grad ? -1 : 0, yo = grad ? 0 : -1, axis = op->attrs.axis;
    char sh[256];
    if (axis < 0 || axis >= x->rank) return fail(c, xo, "has rank %d; axis %d is out of range", x->rank, axis);
    if (y->rank != x->rank) return fail(c, yo, "must have the rank of %s", shape_str(g, x, sh, sizeof sh));
    if (sel && idx->rank != 1) return fail(c, 1, "must be a list of row numbers (rank 1)");
    if (!sel && idx->rank != x->rank) return fail(c, 1, "must have the rank of %s (the gathered shape)", shape_str(g, x, sh, sizeof sh));
    for (int i = 0; i < x->rank; i++) {
        int want = i != axis ? x->dims[i] : sel ? idx->dims[0] : idx->dims[i];
        if (y->dims[i] != want)
            return fail(c, yo, "axis %d is %s; it must be %s", i, g->dims[y->dims[i]].name, g->dims[want].name);
    }
    if (!sel && !same_shape(idx, y)) return fail(c, 1, "must have the gathered shape %s", shape_str(g, y, sh, sizeof sh));
    return PCC_OK;
}

// Everything but `axis` equal between a and b.
static bool same_but_axis(const pcc_tensor *a, const pcc_tensor *b, int axis) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (i != axis && a->dims[i] != b->dims[i]) return false;
    return true;
}

static pcc_status check_join(checker *c, const int *parts, int nparts, int whole, bool parts_are_inputs) {
    const pcc_graph *g = c->g;
    const pcc_tensor *w = &g->tensors[whole];
    int axis = c->op->attrs.axis;
    if (axis < 0 || axis >= w->rank)
        return fail(c, parts_are_inputs ? -1 : 0, "has rank %d; axis %d is out of range", w->rank, axis);
    int64_t sum = 0;
    for (int i = 0; i < nparts; i++) {
        const pcc_tensor *p = &g->tensors[parts[i]];
        int o = parts_are_inputs ? i : -1 - i;
        if (!same_but_axis(p, w, axis)) {
            char sh[256];
            return fail(c, o, "must equal %s in every dimension but axis %d", shape_str(g, w, sh, sizeof sh), axis);
        }
        sum += dsize(g, p, axis);
    }
    if (sum != dsize(g, w, axis))
        return fail(c, parts_are_inputs ? -1 : 0, "has size %lld along axis %d, but the parts add up to %lld",
                    (long long)dsize(g, w, axis), axis, (long long)sum);
    return PCC_OK;
}

// Reshape's shapes walked in groups whose products agree: from axes *i of x and *j of y, advances
// both past the next group (one input axis split into several, several merged into one, or one
// to one) and says whether the products met. Used by the shape rule and by the letters.
static bool reshape_group(const pcc_graph *g, const pcc_tensor *x, const pcc_tensor *y, int *i, int *j) {
    int64_t pi = *i < x->rank ? dsize(g, x, (*i)++) : 1, pj = *j < y->rank ? dsize(g, y, (*j)++) : 1;
    while (pi != pj) {
        if (pi < pj && *i < x->rank) pi *= dsize(g, x, (*i)++);
        else if (pj < pi && *j < y->rank) pj *= dsize(g, y, (*j)++);
        else break;
    }
    return pi == pj;
}

static pcc_status check_reshape(checker *c) {
    const pcc_graph *g = c->g;
    const pcc_tensor *x = &g->tensors[c->op->in[0]], *y = &g->tensors[c->op->out[0]];
    if (tensor_numel(g, x) != tensor_numel(g, y))
        return fail(c, -1, "has %lld elements; the input has %lld", (long long)tensor_numel(g, y), (long long)tensor_numel(g, x));
    // Walk both shapes in groups whose products agree: a group is one input dim split into
    // several, several merged into one, or one to one. A 2-to-2 regrouping ([6,4] -> [4,6]) has
    // no dimension-wise meaning and is refused.
    int i = 0, j = 0;
    while (i < x->rank || j < y->rank) {
        int i0 = i, j0 = j;
        bool met = reshape_group(g, x, y, &i, &j);
        if (!met || (i - i0 > 1 && j - j0 > 1))
            return fail(c, -1, "regroups input dimensions %d..%d into output dimensions %d..%d in a way that is "
                        "neither a split of one dimension nor a merge of adjacent ones", i0, i - 1, j0, j - 1);
    }
    return PCC_OK;
}

static pcc_status check_transpose(checker *c) {
    const pcc_graph *g = c->g;
    const pcc_tensor *x = &g->tensors[c->op->in[0]], *y = &g->tensors[c->op->out[0]];
    if (x->rank != y->rank) return fail(c, -1, "has rank %d; the input has rank %d", y->rank, x->rank);
    for (int i = 0; i < y->rank; i++)
        if (y->dims[i] != x->dims[c->op->attrs.perm[i]])
            return fail(c, -1, "dimension %d is %s; perm[%d] = %d selects the input's %s", i,
                        g->dims[y->dims[i]].name, i, c->op->attrs.perm[i], g->dims[x->dims[c->op->attrs.perm[i]]].name);
    return PCC_OK;
}

static pcc_status check_slice(checker *c, const pcc_tensor *whole, const pcc_tensor *part, int part_operand) {
    const pcc_graph *g = c->g;
    const pcc_attrs *a = &c->op->attrs;
    if (a->axis < 0 || a->axis >= whole->rank) return fail(c, part_operand, "axis %d is out of range", a->axis);
    if (a->start < 0 || a->end > dsize(g, whole, a->axis) || a->start >= a->end)
        return fail(c, part_operand, "slice [%lld, %lld) is not inside [0, %lld)", (long long)a->start,
                    (long long)a->end, (long long)dsize(g, whole, a->axis));
    if (!same_but_axis(whole, part, a->axis) || dsize(g, part, a->axis) != a->end - a->start)
        return fail(c, part_operand, "must have size %lld along axis %d and agree elsewhere", (long long)(a->end - a->start), a->axis);
    return PCC_OK;
}

// Output size of a sliding window: (in + 2 pad - k) / stride + 1, or -1 if the window does not fit.
static int64_t window_out(int64_t in, int k, int stride, int pad) {
    if (in + 2 * pad < k || stride < 1) return -1;
    return (in + 2 * pad - k) / stride + 1;
}

// x is the input side, y the output side; yo the operand reported for a wrong output size, ko the
// operand that holds the kernel (the weight for conv2d; for pooling the kernel is an attr).
static pcc_status check_window(checker *c, const pcc_tensor *x, const pcc_tensor *y, int yo, int ko, int kh, int kw) {
    const pcc_graph *g = c->g;
    const pcc_attrs *a = &c->op->attrs;
    int k[2] = {kh, kw};
    for (int i = 0; i < 2; i++) {
        int64_t want = window_out(dsize(g, x, 2 + i), k[i], a->stride[i], a->pad[i]);
        if (want < 0)
            return fail(c, ko, "kernel %d with padding %d does not fit the input's %s = %lld", k[i], a->pad[i],
                        g->dims[x->dims[2 + i]].name, (long long)dsize(g, x, 2 + i));
        if (dsize(g, y, 2 + i) != want)
            return fail(c, yo, "%s should be %lld = (%lld + 2*%d - %d) / %d + 1, but %s = %lld", i ? "width" : "height",
                        (long long)want, (long long)dsize(g, x, 2 + i), a->pad[i], k[i], a->stride[i],
                        g->dims[y->dims[2 + i]].name, (long long)dsize(g, y, 2 + i));
    }
    return PCC_OK;
}

// Rules beyond the annotation.
static pcc_status check_extra(checker *c) {
    const pcc_graph *g = c->g;
    const pcc_op *op = c->op;
    const pcc_tensor *in0 = &g->tensors[op->in[0]];
    switch (op->kind) {
    case PCC_OP_CONV2D: {
        const pcc_tensor *w = &g->tensors[op->in[1]];
        return check_window(c, in0, &g->tensors[op->out[0]], -1, 1, (int)dsize(g, w, 2), (int)dsize(g, w, 3));
    }
    case PCC_OP_CONV2D_GRAD_X: {
        const pcc_tensor *w = &g->tensors[op->in[1]];
        return check_window(c, &g->tensors[op->out[0]], in0, 0, 1, (int)dsize(g, w, 2), (int)dsize(g, w, 3));
    }
    case PCC_OP_CONV2D_GRAD_W: {
        const pcc_tensor *w = &g->tensors[op->out[0]];
        return check_window(c, &g->tensors[op->in[1]], in0, 0, -1, (int)dsize(g, w, 2), (int)dsize(g, w, 3));
    }
    case PCC_OP_MAXPOOL: case PCC_OP_AVGPOOL: // padding was checked against the kernel on load
        return check_window(c, in0, &g->tensors[op->out[0]], -1, 0, op->attrs.kernel[0], op->attrs.kernel[1]);
    case PCC_OP_MAXPOOL_GRAD:
        return check_window(c, &g->tensors[op->in[1]], in0, 0, 1, op->attrs.kernel[0], op->attrs.kernel[1]);
    case PCC_OP_AVGPOOL_GRAD:
        return check_window(c, &g->tensors[op->out[0]], in0, 0, -1, op->attrs.kernel[0], op->attrs.kernel[1]);
    default: return PCC_OK;
    }
}

static pcc_status check_custom(checker *c) {
    const pcc_graph *g = c->g;
    const pcc_op *op = c->op;
    const pcc_tensor *x = &g->tensors[op->in[0]];
    switch (op->kind) {
    case PCC_OP_CONCAT: return check_join(c, op->in, op->nin, op->out[0], true);
    case PCC_OP_SPLIT: return check_join(c, op->out, op->nout, op->in[0], false);
    case PCC_OP_SLICE: return check_slice(c, x, &g->tensors[op->out[0]], -1);
    case PCC_OP_SLICE_GRAD: return check_slice(c, &g->tensors[op->out[0]], x, 0);
    case PCC_OP_RESHAPE: return check_reshape(c);
    case PCC_OP_FILL: return PCC_OK; // any shape
    case PCC_OP_TRANSPOSE: return check_transpose(c);
    case PCC_OP_REDUCE_SUM: case PCC_OP_SUM: case PCC_OP_MEAN: case PCC_OP_MAX: case PCC_OP_EXPAND: case PCC_OP_MAX_GRAD:
        return check_reduce(c);
    case PCC_OP_ATTENTION: case PCC_OP_ATTENTION_GRAD: case PCC_OP_ATTENTION_GRAD_BIAS: return check_attention(c);
    case PCC_OP_GATHER: case PCC_OP_INDEX_SELECT: case PCC_OP_GATHER_GRAD: case PCC_OP_INDEX_SELECT_GRAD: return check_gather(c);
    default: PCC_ASSERT(!"operator without a shape rule");
    }
}

pcc_status op_check_shapes(const pcc_graph *g, const pcc_op *op, const char *src) {
    checker c = {.g = g, .op = op, .src = src};
    const pcc_op_info *info = &pcc_ops[op->kind];
    pcc_status st = check_dtypes(&c);
    if (st) return st;
    if (info->flags & PCC_OPF_BCAST) {
        // b equals a or a suffix of it (broadcast over a's leading dimensions), or a's shape with
        // axes left out (attrs perm maps b's axes to a's); out equals a.
        const pcc_tensor *a = &g->tensors[op->in[0]], *b = &g->tensors[op->in[1]], *y = &g->tensors[op->out[0]];
        char sh[256];
        if (!map_given(&op->attrs) &&
            (b->rank > a->rank || memcmp(b->dims, a->dims + (a->rank - b->rank), sizeof(int) * (size_t)b->rank) != 0))
            return fail(&c, 1, "must equal input 0's shape %s, a suffix of it, or that shape with axes left out", shape_str(g, a, sh, sizeof sh));
        if ((st = check_mapped(&c, a, b, 1))) return st;
        if (!same_shape(a, y)) return fail(&c, -1, "must have input 0's shape %s", shape_str(g, a, sh, sizeof sh));
        return PCC_OK;
    }
    const ann *a = ann_get(op->kind);
    if (a->custom) return check_custom(&c);
    for (int i = 0; i < op->nin && i < a->nin; i++)
        if ((st = bind_tensor(&c, &a->in[i], i))) return st;
    for (int i = 0; i < op->nout && i < a->nout; i++)
        if ((st = bind_tensor(&c, &a->out[i], -1 - i))) return st;
    return check_extra(&c);
}

/* ---- letters: which axis of each operand a dimension letter is ---- */

static pcc_letter *letter_get(const pcc_graph *g, pcc_letter *out, int *n, const char *name, int dim, bool reduce, bool nosplit) {
    for (int i = 0; i < *n; i++)
        if (strcmp(out[i].name, name) == 0) return &out[i];
    PCC_ASSERT(*n < PCC_MAX_LETTERS);
    pcc_letter *l = &out[(*n)++];
    memset(l, 0, sizeof *l);
    memcpy(l->name, name, strnlen(name, sizeof l->name - 1)); // what snprintf("%s") kept, without its cost
    memset(l->axis, -1, sizeof l->axis);
    l->dim = dim, l->reduce = reduce, l->nosplit = nosplit, l->grain = 1;
    (void)g;
    return l;
}

static int operand_tensor(const pcc_op *op, int o) { return o < op->nin ? op->in[o] : op->out[o - op->nin]; }

static int letters_annotated(const pcc_graph *g, const pcc_op *op, const ann *a, pcc_letter *out) {
    int n = 0;
    for (int o = 0; o < op->nin + op->nout; o++) {
        const ann_tensor *at = o < op->nin ? (o < a->nin ? &a->in[o] : NULL) : (o - op->nin < a->nout ? &a->out[o - op->nin] : NULL);
        if (!at) continue;
        const pcc_tensor *t = &g->tensors[operand_tensor(op, o)];
        bool var = at->n > 0 && at->d[0].variadic;
        int lead = t->rank - (var ? at->n - 1 : at->n), pos = 0;
        for (int k = 0; k < at->n; k++) {
            const ann_dim *d = &at->d[k];
            int cnt = d->variadic ? lead : 1;
            for (int j = 0; j < cnt; j++, pos++) {
                // The name, "NAME" or "NAME.J" for a variadic one's J-th axis, made by hand:
                // op_letters runs for every operator of every estimate, and snprintf here was a
                // fifth of the 1T GPT's search.
                char name[16] = {0};
                size_t len = strnlen(d->name, 7);
                memcpy(name, d->name, len);
                if (d->variadic) name[len] = '.', name[len + 1] = (char)('0' + (j & 7));
                pcc_letter *l = letter_get(g, out, &n, name, t->dims[pos], d->reduce, d->nosplit);
                l->axis[o] = (signed char)pos;
            }
        }
    }
    return n;
}

// Positional letters "x0", "x1", ... shared by operands whose axes line up (concat, split,
// slice, add/mul with b aligned to a's trailing axes).
static int letters_positional(const pcc_graph *g, const pcc_op *op, int fixed_axis, pcc_letter *out) {
    int n = 0, rank = g->tensors[op->in[0]].rank;
    for (int i = 0; i < rank; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i & 7);
        pcc_letter *l = letter_get(g, out, &n, name, g->tensors[op->in[0]].dims[i], false, i == fixed_axis);
        for (int o = 0; o < op->nin + op->nout; o++) {
            int r = g->tensors[operand_tensor(op, o)].rank;
            int ax = i - (rank - r); // a shorter operand (a broadcast b) holds the trailing axes
            if (ax >= 0) l->axis[o] = (signed char)ax;
        }
    }
    return n;
}

static int letters_transpose(const pcc_graph *g, const pcc_op *op, pcc_letter *out) {
    int n = 0;
    const pcc_tensor *x = &g->tensors[op->in[0]];
    for (int i = 0; i < x->rank; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i & 7);
        pcc_letter *l = letter_get(g, out, &n, name, x->dims[i], false, false);
        l->axis[0] = (signed char)i;
        for (int j = 0; j < x->rank; j++)
            if (op->attrs.perm[j] == i) l->axis[1] = (signed char)j;
    }
    return n;
}

// Reshape: in each group of axes whose products agree, the major input axis and the major
// output axis are one letter (splitting it cuts both into the same contiguous pieces); the
// minor axes of a split or merged group cannot be split on their own.
static int letters_reshape(const pcc_graph *g, const pcc_op *op, pcc_letter *out) {
    const pcc_tensor *x = &g->tensors[op->in[0]], *y = &g->tensors[op->out[0]];
    int n = 0, i = 0, j = 0;
    while (i < x->rank || j < y->rank) {
        int i0 = i, j0 = j;
        reshape_group(g, x, y, &i, &j);
        for (int k = i0; k < i; k++) {
            char name[16];
            snprintf(name, sizeof name, "g%d.%d", i0 & 7, (k - i0) & 7);
            pcc_letter *l = letter_get(g, out, &n, name, x->dims[k], false, k > i0);
            l->axis[0] = (signed char)k;
            if (k == i0 && j0 < y->rank) l->axis[1] = (signed char)j0;
        }
        for (int k = j0 + 1; k < j; k++) {
            char name[16];
            snprintf(name, sizeof name, "h%d.%d", j0 & 7, (k - j0) & 7);
            letter_get(g, out, &n, name, y->dims[k], false, true)->axis[1] = (signed char)k;
        }
    }
    return n;
}

// reduce_sum: the input's leading axes are summed (reduction letters), its trailing ones are the
// output's.
static int letters_reduce_sum(const pcc_graph *g, const pcc_op *op, pcc_letter *out) {
    const pcc_tensor *in = &g->tensors[op->in[0]], *o = &g->tensors[op->out[0]];
    int n = 0, lead = in->rank - o->rank;
    for (int i = 0; i < in->rank; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i & 7);
        pcc_letter *l = letter_get(g, out, &n, name, in->dims[i], i < lead, false);
        l->axis[0] = (signed char)i;
        if (i >= lead) l->axis[1] = (signed char)(i - lead);
    }
    return n;
}

// Ops with an axis map: one letter per axis of the big operand, shared by the small one's axis
// that maps to it. Axes a reduction drops are reduction letters (sum, mean, reduce_sum: partial
// sums), or cannot be split (max, max_grad: a maximum of pieces is not a sum).
static int letters_mapped(const pcc_graph *g, const pcc_op *op, pcc_letter *out) {
    bool small_in = op->kind == PCC_OP_EXPAND || op->kind == PCC_OP_MAX_GRAD || (pcc_ops[op->kind].flags & PCC_OPF_BCAST);
    int big = op->kind == PCC_OP_EXPAND ? op->nin : op->kind == PCC_OP_MAX_GRAD ? 1 : 0;
    int small = op->kind == PCC_OP_EXPAND || op->kind == PCC_OP_MAX_GRAD ? 0 : small_in ? 1 : op->nin;
    const pcc_tensor *B = &g->tensors[operand_tensor(op, big)], *S = &g->tensors[operand_tensor(op, small)];
    bool is_max = op->kind == PCC_OP_MAX || op->kind == PCC_OP_MAX_GRAD;
    bool dropped_reduces = op->kind == PCC_OP_SUM || op->kind == PCC_OP_MEAN || op->kind == PCC_OP_REDUCE_SUM;
    int n = 0;
    for (int i = 0; i < B->rank; i++) {
        int j = -1;
        for (int k = 0; k < S->rank; k++)
            if (op_map_axis(&op->attrs, B->rank, S->rank, k) == i) j = k;
        char name[16];
        snprintf(name, sizeof name, "x%d", i & 7);
        pcc_letter *l = letter_get(g, out, &n, name, B->dims[i], j < 0 && dropped_reduces, j < 0 && is_max);
        for (int o = 0; o < op->nin + op->nout; o++) {
            const pcc_tensor *t = &g->tensors[operand_tensor(op, o)];
            if (o == small) l->axis[o] = (signed char)j;
            else if (t->rank == B->rank) l->axis[o] = (signed char)i;
        }
    }
    return n;
}

// index_select: every axis but the selected one is a letter of x and y (idx has no such axis);
// the selected axis never splits (x's rows and y's are other sizes).
static int letters_select(const pcc_graph *g, const pcc_op *op, pcc_letter *out) {
    bool grad = op->kind == PCC_OP_INDEX_SELECT_GRAD;
    int xo = grad ? 2 : 0, yo = grad ? 0 : 2; // operand indices (inputs, then the output)
    const pcc_tensor *x = &g->tensors[operand_tensor(op, xo)];
    int n = 0;
    for (int i = 0; i < x->rank; i++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", i & 7);
        pcc_letter *l = letter_get(g, out, &n, name, x->dims[i], false, i == op->attrs.axis);
        l->axis[xo] = (signed char)i, l->axis[yo] = (signed char)i;
        if (i == op->attrs.axis) l->axis[1] = 0;
    }
    return n;
}

// Attention's letters, in the order the old annotation "b s^ n d^, ... -> b s^ n d^" gave them
// (b, s, n, d), then t, m, e where they are other dimensions than s, n, d. The key length t and
// the kv heads m of grouped-query attention cannot split (q's heads split alone: each rank keeps
// every kv head, and the gradients' dk and dv are then partial sums, so n is a reduction letter
// there). The bias joins the letters of the score axes it has.
static int letters_attention(const pcc_graph *g, const pcc_op *op, pcc_letter *out) {
    attn_ops a = attn_operands(op);
    const pcc_tensor *q = &g->tensors[operand_tensor(op, a.q)], *k = &g->tensors[operand_tensor(op, a.k)];
    const pcc_tensor *v = &g->tensors[operand_tensor(op, a.v)];
    bool gqa = k->dims[2] != q->dims[2], cross = k->dims[1] != q->dims[1], ev = v->dims[3] != q->dims[3];
    bool gradop = op->kind != PCC_OP_ATTENTION;
    int n = 0;
    // (operand, axis) lists per letter: q-like (q, y, dq), k-like (k, dk), v-like (v, dv)
    int qs[3] = {a.q, a.y, op->kind == PCC_OP_ATTENTION_GRAD ? op->nin : -1};
    int ks[2] = {a.k, op->kind == PCC_OP_ATTENTION_GRAD ? op->nin + 1 : -1}, vs[2] = {a.v, op->kind == PCC_OP_ATTENTION_GRAD ? op->nin + 2 : -1};
    int bias_ops[2] = {a.bias, op->kind == PCC_OP_ATTENTION_GRAD_BIAS ? op->nin : -1};
    const pcc_tensor *bias = a.bias >= 0 ? &g->tensors[operand_tensor(op, a.bias)] : NULL;
    int bax[4] = {-1, -1, -1, -1}; // the bias's axis of each score axis [b,n,s,t]
    for (int j = 0; bias && j < bias->rank; j++) bax[op_map_axis(&op->attrs, 4, bias->rank, j)] = j;
    bool dbias = op->kind == PCC_OP_ATTENTION_GRAD_BIAS;
    struct { const char *name; int dim; bool reduce, nosplit; int qax, kax, vax, score; } L[7] = {
        {"b", q->dims[0], dbias && bax[0] < 0, false, 0, 0, 0, 0},
        {"s", q->dims[1], false, true, 1, cross ? -1 : 1, cross ? -1 : 1, 2},
        {"n", q->dims[2], (gradop && gqa) || (dbias && bax[1] < 0), false, 2, gqa ? -1 : 2, gqa ? -1 : 2, 1},
        {"d", q->dims[3], false, true, 3, 3, ev ? -1 : 3, -1},
        {"t", k->dims[1], false, true, -1, cross ? 1 : -1, cross ? 1 : -1, 3},
        {"m", k->dims[2], false, true, -1, gqa ? 2 : -1, gqa ? 2 : -1, -1},
        {"e", v->dims[3], false, true, -1, -1, ev ? 3 : -1, -1}};
    for (int i = 0; i < 7; i++) {
        bool used = i < 4 || (i == 4 && (cross || (bias && bax[3] >= 0))) || (i == 5 && gqa) || (i == 6 && ev);
        if (!used) continue;
        pcc_letter *l = letter_get(g, out, &n, L[i].name, L[i].dim, L[i].reduce, L[i].nosplit);
        if (i == 4 && !cross) l->dim = k->dims[1]; // a self-attention bias's key axis: a letter of its own
        for (int j = 0; j < 3; j++)
            if (qs[j] >= 0 && L[i].qax >= 0 && !(i == 3 && j > 0 && ev)) l->axis[qs[j]] = (signed char)L[i].qax;
        if (i == 6) // e: the output (or dy) and dv, not q
            for (int j = 1; j < 3; j++)
                if (qs[j] >= 0) l->axis[qs[j]] = 3;
        for (int j = 0; j < 2; j++) {
            if (ks[j] >= 0 && L[i].kax >= 0) l->axis[ks[j]] = (signed char)L[i].kax;
            if (vs[j] >= 0 && L[i].vax >= 0) l->axis[vs[j]] = (signed char)L[i].vax;
        }
        for (int j = 0; j < 2; j++)
            if (bias_ops[j] >= 0 && L[i].score >= 0 && bax[L[i].score] >= 0) l->axis[bias_ops[j]] = (signed char)bax[L[i].score];
    }
    return n;
}

// Ghost batch norm (attrs.ghost_batch G > 0): statistics over each run of G samples, so the
// batch letter n splits in whole groups and the result is the same on any number of devices.
static int letters_ghost(const pcc_op *op, pcc_letter *out, int n) {
    bool bn = op->kind == PCC_OP_BATCHNORM || op->kind == PCC_OP_BATCHNORM_GRAD_X || op->kind == PCC_OP_BATCHNORM_GRAD_W;
    if (!bn || op->attrs.ghost_batch <= 0) return n;
    for (int i = 0; i < n; i++)
        if (strcmp(out[i].name, "n") == 0) out[i].nosplit = false, out[i].grain = op->attrs.ghost_batch;
    return n;
}

// cross_entropy's classes v: split only by phase 3's vocabulary-parallel form (compiler/vocab.c:
// each piece's statistics, gathered), never as the operator itself, which needs the whole row
// (ops.def marks it "^" for plan_check, whose vocab-ce rule says so).
bool op_vocab_letter(const pcc_op *op, const pcc_letter *l) {
    return (op->kind == PCC_OP_CROSS_ENTROPY || op->kind == PCC_OP_CROSS_ENTROPY_GRAD) && strcmp(l->name, "v") == 0;
}

static int letters_vocab(const pcc_op *op, pcc_letter *out, int n) {
    for (int i = 0; i < n; i++)
        if (op_vocab_letter(op, &out[i])) out[i].nosplit = false;
    return n;
}

int op_letters(const pcc_graph *g, const pcc_op *op, pcc_letter *out) {
    PCC_ASSERT(op->nin + op->nout <= PCC_MAX_OPERANDS);
    switch (op->kind) {
    case PCC_OP_FILL: return 0;
    case PCC_OP_REDUCE_SUM: return map_given(&op->attrs) ? letters_mapped(g, op, out) : letters_reduce_sum(g, op, out);
    case PCC_OP_CONCAT: case PCC_OP_SPLIT: case PCC_OP_SLICE: case PCC_OP_SLICE_GRAD:
        return letters_positional(g, op, op->attrs.axis, out);
    case PCC_OP_ADD: case PCC_OP_MUL: case PCC_OP_SUB: case PCC_OP_DIV: case PCC_OP_MASKED_FILL:
        return map_given(&op->attrs) ? letters_mapped(g, op, out) : letters_positional(g, op, -1, out);
    case PCC_OP_SUM: case PCC_OP_MEAN: case PCC_OP_MAX: case PCC_OP_EXPAND: case PCC_OP_MAX_GRAD:
        return letters_mapped(g, op, out);
    case PCC_OP_ATTENTION: case PCC_OP_ATTENTION_GRAD: case PCC_OP_ATTENTION_GRAD_BIAS: return letters_attention(g, op, out);
    case PCC_OP_GATHER: case PCC_OP_GATHER_GRAD: return letters_positional(g, op, op->attrs.axis, out);
    case PCC_OP_INDEX_SELECT: case PCC_OP_INDEX_SELECT_GRAD: return letters_select(g, op, out);
    case PCC_OP_TRANSPOSE: return letters_transpose(g, op, out);
    case PCC_OP_RESHAPE: return letters_reshape(g, op, out);
    default: break;
    }
    const ann *a = ann_get(op->kind);
    PCC_ASSERT(!a->custom);
    return letters_vocab(op, out, letters_ghost(op, out, letters_annotated(g, op, a, out)));
}

/* ---- costs ---- */

static double numel(const pcc_graph *g, int t) { return (double)tensor_numel(g, &g->tensors[t]); }

// FLOPs per output element of simple ops (forward or backward), by rough operation counts.
static double per_elem(pcc_op_kind k) {
    switch (k) {
    case PCC_OP_ADD: case PCC_OP_MUL: case PCC_OP_SCALE: case PCC_OP_RELU: case PCC_OP_RELU_GRAD: return 1;
    case PCC_OP_SUB: case PCC_OP_DIV: case PCC_OP_MASKED_FILL: case PCC_OP_NE: case PCC_OP_ONE_HOT: return 1;
    case PCC_OP_SQRT: case PCC_OP_RSQRT: case PCC_OP_LOG: case PCC_OP_EXP: return 2;
    case PCC_OP_SQRT_GRAD: case PCC_OP_RSQRT_GRAD: case PCC_OP_LOG_GRAD: case PCC_OP_EXP_GRAD: return 4;
    case PCC_OP_SIGMOID: case PCC_OP_TANH: case PCC_OP_SIN: case PCC_OP_COS: case PCC_OP_POW: return 4;
    case PCC_OP_SIGMOID_GRAD: case PCC_OP_TANH_GRAD: case PCC_OP_SIN_GRAD: case PCC_OP_COS_GRAD: case PCC_OP_POW_GRAD: return 6;
    case PCC_OP_GELU_ERF: return 8;
    case PCC_OP_ERF: return 6;
    case PCC_OP_ERF_GRAD: return 6;
    case PCC_OP_GELU_ERF_GRAD: return 12;
    case PCC_OP_DROPOUT: case PCC_OP_DROPOUT_GRAD: return 2;
    case PCC_OP_SILU: return 4;
    case PCC_OP_SILU_GRAD: return 6;
    case PCC_OP_GELU: return 8;
    case PCC_OP_GELU_GRAD: return 12;
    case PCC_OP_LAYERNORM: case PCC_OP_BATCHNORM: return 8;
    case PCC_OP_RMSNORM: return 5;
    case PCC_OP_SOFTMAX: return 5;
    case PCC_OP_SOFTMAX_GRAD: return 4;
    case PCC_OP_LAYERNORM_GRAD_X: case PCC_OP_BATCHNORM_GRAD_X: return 10;
    case PCC_OP_RMSNORM_GRAD_X: return 8;
    case PCC_OP_MSE_LOSS_GRAD: return 3;
    case PCC_OP_BCE_LOGITS_GRAD: return 5;
    case PCC_OP_CROSS_ENTROPY_GRAD: return 3;
    default: return 0;
    }
}

double op_flops(const pcc_graph *g, const pcc_op *op) {
    const pcc_tensor *in0 = op->nin ? &g->tensors[op->in[0]] : NULL;
    double out0 = op->nout ? numel(g, op->out[0]) : 0;
    switch (op->kind) {
    case PCC_OP_MATMUL: case PCC_OP_BMM:
        return 2 * out0 * (double)dsize(g, in0, in0->rank - 1);
    case PCC_OP_LINEAR:
        return 2 * out0 * (double)dsize(g, in0, in0->rank - 1) + (op->nin > 2 ? out0 : 0);
    case PCC_OP_MATMUL_GRAD_A: case PCC_OP_BMM_GRAD_A: case PCC_OP_LINEAR_GRAD_X:
        return 2 * out0 * (double)dsize(g, in0, in0->rank - 1);
    case PCC_OP_MATMUL_GRAD_B: // A [*b, m, k] -> [k, n]: contraction over *b and m
        return 2 * out0 * numel(g, op->in[0]) / (double)dsize(g, in0, in0->rank - 1);
    case PCC_OP_BMM_GRAD_B: // A [*b, m, k] -> [*b, k, n]: contraction over m
        return 2 * out0 * (double)dsize(g, in0, in0->rank - 2);
    case PCC_OP_LINEAR_GRAD_W: // dY [*b, n], X [*b, k] -> [n, k]
        return 2 * out0 * numel(g, op->in[0]) / (double)dsize(g, in0, in0->rank - 1);
    case PCC_OP_ATTENTION: case PCC_OP_ATTENTION_GRAD: case PCC_OP_ATTENTION_GRAD_BIAS: {
        // scores 2 b n s t d and the weighted sum 2 b n s t e; the backward twice that (the
        // bias's gradient recomputes the probabilities: one more forward)
        attn_ops a = attn_operands(op);
        const pcc_tensor *q = &g->tensors[op->in[a.q]], *k = &g->tensors[op->in[a.k]], *v = &g->tensors[op->in[a.v]];
        double f = 2 * (double)tensor_numel(g, q) * (double)dsize(g, k, 1) * (double)(dsize(g, q, 3) + dsize(g, v, 3)) / (double)dsize(g, q, 3);
        return op->kind == PCC_OP_ATTENTION ? f : op->kind == PCC_OP_ATTENTION_GRAD ? 2 * f : f;
    }
    case PCC_OP_CONV2D: case PCC_OP_CONV2D_GRAD_X: case PCC_OP_CONV2D_GRAD_W: {
        // all three: 2 * (n o ho wo) * (c kh kw)
        const pcc_tensor *w = &g->tensors[op->kind == PCC_OP_CONV2D ? op->in[1] : op->kind == PCC_OP_CONV2D_GRAD_X ? op->in[1] : op->out[0]];
        const pcc_tensor *dy = &g->tensors[op->kind == PCC_OP_CONV2D ? op->out[0] : op->in[0]];
        double f = 2 * (double)tensor_numel(g, dy) * (double)(dsize(g, w, 1) * dsize(g, w, 2) * dsize(g, w, 3));
        return f + (op->kind == PCC_OP_CONV2D && op->nin > 2 ? out0 : 0);
    }
    case PCC_OP_CONV2D_GRAD_B: case PCC_OP_REDUCE_SUM: case PCC_OP_EMBEDDING_GRAD: case PCC_OP_SUM: case PCC_OP_MEAN:
    case PCC_OP_MAX: case PCC_OP_EXPAND:
        return numel(g, op->in[0]) + (op->kind == PCC_OP_EXPAND ? out0 : 0);
    case PCC_OP_MAX_GRAD: return 2 * out0;
    case PCC_OP_GATHER: case PCC_OP_INDEX_SELECT: case PCC_OP_GATHER_GRAD: case PCC_OP_INDEX_SELECT_GRAD: return out0;
    case PCC_OP_TOPK: case PCC_OP_TOPK_GRAD: // a selection of k per row: k passes over the row
        return numel(g, op->in[0]) * (double)dsize(g, &g->tensors[op->out[0]], g->tensors[op->out[0]].rank - 1);
    case PCC_OP_EMBEDDING_BAG: case PCC_OP_EMBEDDING_BAG_GRAD: { // b x l rows of width e
        double l = (double)dsize(g, &g->tensors[op->in[op->kind == PCC_OP_EMBEDDING_BAG ? 0 : 1]], 1);
        double e = op->kind == PCC_OP_EMBEDDING_BAG ? (double)dsize(g, &g->tensors[op->out[0]], 1) : (double)dsize(g, in0, 1);
        double b = (double)dsize(g, in0, 0);
        return b * l * e;
    }
    case PCC_OP_MAXPOOL: case PCC_OP_AVGPOOL:
        return out0 * op->attrs.kernel[0] * op->attrs.kernel[1];
    case PCC_OP_MAXPOOL_GRAD: case PCC_OP_AVGPOOL_GRAD:
        return numel(g, op->in[0]) * op->attrs.kernel[0] * op->attrs.kernel[1];
    case PCC_OP_CROSS_ENTROPY: case PCC_OP_LAYERNORM_GRAD_W: case PCC_OP_RMSNORM_GRAD_W:
    case PCC_OP_BATCHNORM_GRAD_W:
        return 5 * numel(g, op->in[0]);
    case PCC_OP_MSE_LOSS: case PCC_OP_BCE_LOGITS:
        return 4 * numel(g, op->in[0]);
    case PCC_OP_SGD: return 4 * numel(g, op->in[0]);
    case PCC_OP_ADAMW: return 12 * numel(g, op->in[0]);
    default: return per_elem(op->kind) * out0;
    }
}

double op_flops_matmul(const pcc_graph *g, const pcc_op *op) {
    if (!(pcc_ops[op->kind].flags & PCC_OPF_MATMUL)) return 0;
    double f = op_flops(g, op);
    bool bias = (op->kind == PCC_OP_LINEAR || op->kind == PCC_OP_CONV2D) && op->nin > 2;
    return bias ? f - numel(g, op->out[0]) : f; // a bias add is element-wise work
}

double op_bytes(const pcc_graph *g, const pcc_op *op) {
    double b = 0;
    for (int i = 0; i < op->nin; i++) b += tensor_bytes(g, &g->tensors[op->in[i]]);
    for (int i = 0; i < op->nout; i++) b += tensor_bytes(g, &g->tensors[op->out[i]]);
    if (pcc_ops[op->kind].flags & PCC_OPF_INPLACE) // read and written back: all but the gradient
        b += b - tensor_bytes(g, &g->tensors[op->in[1]]);
    return b;
}

/* ---- totals over the graph ---- */

void graph_totals(const pcc_graph *g, pcc_totals *t) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < g->n_tensors; i++) {
        const pcc_tensor *x = &g->tensors[i];
        double n = (double)tensor_numel(g, x) * (double)tensor_copies(g, x), b = tensor_bytes(g, x) * (double)tensor_copies(g, x);
        if (x->kind == PCC_T_PARAM) {
            if (!x->frozen) t->params += n; // constants (buffers) are not parameters

            t->bytes_weights += b;
            if (x->grad >= 0) t->bytes_grads += b;
        }
        if (x->kind == PCC_T_STATE) t->bytes_optim += b;
        if (x->saved) t->bytes_acts += b;
    }
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        double f = op_flops(g, op) * (double)op_copies(g, op), mm = op_flops_matmul(g, op) * (double)op_copies(g, op);
        switch (op->phase) {
        case PCC_PHASE_FWD: t->flops_fwd += f; t->flops_fwd_matmul += mm; break;
        case PCC_PHASE_BWD: t->flops_bwd += f; t->flops_bwd_matmul += mm; break;
        case PCC_PHASE_OPT: t->flops_opt += f; break;
        }
    }
}
