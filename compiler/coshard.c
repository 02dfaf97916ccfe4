/*
 * coshard.c: co-shard (nnScaler's coshard), a model transformation of the forward graph.
 *
 * An operator co-sharded k ways along one of its letters becomes k ordinary operators, each on
 * a 1/k piece of the operands that carry the letter, which run one after another on whatever
 * devices phase 2 gives the operator: the pieces are operators of the same layer, next to each
 * other in program order, so every rank runs all k of them in sequence. What the pieces read
 * and write is joined by local operators (runtime/ops.def's split, concat, add and scale), so
 * that phases 1 to 3, autodiff, the memory planner, the estimate and plan_check treat a
 * co-sharded operator as what it is, with nothing special anywhere else:
 *   - an input that carries the letter is cut by one split operator, or, where it is the output
 *     of an operator co-sharded the same way, its pieces are read directly (a chain: an MLP's
 *     fc1, gelu and fc2 along the tokens never holds the whole 4h activation's gradient);
 *   - an output that carries the letter is joined by a concat, left out where every reader
 *     takes the pieces; an output without it holds partial sums (a reduction letter: fc2 along
 *     f, a loss along the batch), added up in order; a mean loss is scaled by 1/k.
 * The pieces' buffers are then ordinary buffers: the memory planner frees each as its last
 * reader runs, so a transient the whole operator makes at once (the gradient of an LM head's
 * logits, of an MLP's 4h activation) exists one piece at a time; the estimate counts k kernels
 * of the smaller shapes through the cost model (cost_op_s), launches included.
 *
 * It runs once on the forward graph, after batch_apply (sizes final) and before graph_check and
 * autodiff (which derives the pieces' backward, a concat's gradient being a split and so on).
 * Requests come from --coshard GLOB:K[:LETTER],... and from policy rules' "coshard" (the first
 * rule that selects an operator holds it, as for every pin); the letter, when not given, is the
 * one whose pieces an input already has (a chain), else a non-reduction letter no parameter
 * carries, else any, the largest first; never the batch (data parallelism's) or a letter the
 * annotation marks unsplittable, and only where k divides its size on every operand (a
 * reshape's letter joins dimensions of two sizes). A dimension a reshape made of the batch
 * (Swin's windows, batch_dims) comes last: dp cuts it as it cuts the batch, and pieces
 * along it would run whole on every replica (no dp letter of their own).
 *
 * Limits: operators that draw random numbers (dropout) would draw another stream per piece and
 * are refused; so is a cross-entropy with an ignore_index (its mean counts rows per piece).
 * Without recompute the pieces' kept activations add up to the whole operator's: co-shard bounds
 * the transients, recompute (or a smaller micro-batch) what the backward keeps. Co-sharded top-level
 * operators are layers of their own: a pipeline cut may fall between two pieces (they then run
 * on two stages, one after another, still correct).
 */
#include "plancc.h"
#include "coshard.h"
#include "policy.h"

#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CS_MAX_WAYS 1024

typedef struct want {
    int ways;               // 0: not co-sharded
    const char *letter;     // asked for, or NULL
    const char *src, *ptr;  // where the request is, for diagnostics
} want;

typedef struct cs {
    pcc_graph *g;
    int n_old;
    pcc_op *old;
    want *want;             // per old op
    pcc_letter *letter;     // per old op: the chosen letter (when want.ways)
    const bool *folded;     // per dimension: made of the batch (batch_dims), which dp cuts
    int **pieces;           // per tensor: its k pieces along piece_axis, or NULL
    int *piece_axis, *piece_ways;
    bool *joined;           // per tensor: some reader needs the whole (the concat stays)
    int (*newdim)[2];       int n_newdim, cap_newdim; // (dim, ways) -> the piece's dim, memo
    int *newdim_id;
} cs;

// A diagnostic at the request: the policy's pointer, or --coshard "ENTRY" (exit 2).
static pcc_status refuse_request(const want *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static pcc_status refuse_request(const want *w, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (w->src) return diag(w->src, w->ptr, "%s", msg);
    if (!pcc_trial) fprintf(stderr, "%s: --coshard \"%s\": %s\n", pcc_progname, w->ptr, msg);
    return PCC_ERR_INPUT;
}

static const char *base_name(const pcc_graph *g, const pcc_op *op) {
    return op->label ? op->label : g->tensors[op->out[0]].name;
}

static const char *full_name(pcc_arena *a, const pcc_graph *g, const pcc_op *op) {
    const char *b = base_name(g, op);
    return op->block >= 0 ? arena_printf(a, "%s.%s", g->blocks[op->block].name, b) : b;
}

/* ---- the requests ---- */

// --coshard GLOB:K[:LETTER] entries, comma-separated, onto want[] (the first that selects holds).
static pcc_status cli_requests(cs *C, const char *spec) {
    char *s = arena_printf(C->g->arena, "%s", spec), *save = NULL;
    for (char *e = strtok_r(s, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
        char *k = strchr(e, ':');
        char *l = k ? strchr(k + 1, ':') : NULL;
        char *end = NULL;
        long ways = k ? strtol(k + 1, &end, 10) : 0;
        want bad = {0, NULL, NULL, arena_printf(C->g->arena, "%s", e)};
        if (!k || k == e || end == k + 1 || (*end && *end != ':') || ways < 2 || ways > CS_MAX_WAYS || (l && !l[1]))
            return refuse_request(&bad, "not GLOB:K or GLOB:K:LETTER with 2 <= K <= %d", CS_MAX_WAYS);
        *k = 0;
        if (l) *l++ = 0;
        bool any = false;
        for (int o = 0; o < C->n_old; o++) {
            if (fnmatch(e, full_name(C->g->arena, C->g, &C->old[o]), 0) != 0) continue;
            any = true;
            if (!C->want[o].ways) C->want[o] = (want){(int)ways, l, NULL, bad.ptr};
        }
        if (!any) return refuse_request(&bad, "selects no operator of %s", C->g->file);
    }
    return PCC_OK;
}

static pcc_status policy_requests(cs *C, const pcc_policy *p) {
    for (int o = 0; p && o < C->n_old; o++) {
        const char *letter, *ptr;
        int k = policy_coshard(p, C->g, &C->old[o], &letter, &ptr);
        if (k && !C->want[o].ways) C->want[o] = (want){k, letter, p->file, ptr};
    }
    return PCC_OK;
}

/* ---- the letter ---- */

static bool carried_by_param(const pcc_graph *g, const pcc_op *op, const pcc_letter *l) {
    for (int i = 0; i < op->nin; i++)
        if (l->axis[i] >= 0 && g->tensors[op->in[i]].kind == PCC_T_PARAM) return true;
    return false;
}

// Whether an input of op already comes in k pieces along l's axis.
static bool chained(const cs *C, const pcc_op *op, const pcc_letter *l, int k) {
    for (int i = 0; i < op->nin; i++) {
        int t = op->in[i];
        if (l->axis[i] >= 0 && C->pieces[t] && C->piece_axis[t] == l->axis[i] && C->piece_ways[t] == k) return true;
    }
    return false;
}

// Why l cannot co-shard op k ways (NULL: it can).
static const char *refuse(const pcc_graph *g, const pcc_op *op, const pcc_letter *l, int k) {
    if (l->nosplit) return "the annotation marks it unsplittable";
    if (op_vocab_letter(op, l))
        return "each piece of the classes needs every piece's row statistics (only devices split it: vocabulary parallelism)";
    if (l->dim == graph_batch_dim(g)) return "it is the batch, data parallelism's";
    if (g->dims[l->dim].size % ((int64_t)k * l->grain) != 0) return "its size does not divide";
    // Along every operand the letter runs on: a reshape's letter joins an input dimension to an
    // output's of another size (Mixtral's experts, 8, major in a merged 8 x 14336).
    for (int i = 0; i < op->nin + op->nout; i++) {
        const pcc_tensor *t = &g->tensors[i < op->nin ? op->in[i] : op->out[i - op->nin]];
        if (l->axis[i] >= 0 && g->dims[t->dims[(int)l->axis[i]]].size % ((int64_t)k * l->grain) != 0)
            return "its size on an operand does not divide";
    }
    for (int j = 0; j < op->nout; j++)
        if (l->axis[op->nin + j] < 0 && !l->reduce) return "an output lacks it";
    if (l->reduce && !(pcc_ops[op->kind].flags & (PCC_OPF_MATMUL | PCC_OPF_LOSS)))
        return "a reduction of this operator needs each piece's offset in the whole (an embedding's rows)";
    if (l->reduce && (pcc_ops[op->kind].flags & PCC_OPF_LOSS) && op->kind == PCC_OP_CROSS_ENTROPY &&
        (op->attrs.mode & PCC_CE_IGNORE))
        return "the loss's ignore_index makes each piece's mean count its own rows";
    return NULL;
}

// How much a letter co-shard picks by itself is worth: a chain, then a non-reduction letter no
// parameter carries, then any non-reduction one; a dimension made of the batch below them all.
static int score(const cs *C, const pcc_op *op, const pcc_letter *l, int k) {
    int s = chained(C, op, l, k) ? 3 : !l->reduce && !carried_by_param(C->g, op, l) ? 2 : !l->reduce ? 1 : 0;
    return C->folded[l->dim] ? s - 4 : s;
}

static pcc_status choose(cs *C, int o) {
    const pcc_op *op = &C->old[o];
    const want *w = &C->want[o];
    pcc_letter L[PCC_MAX_LETTERS];
    int nl = op_letters(C->g, op, L), best = -1;
    const char *name = full_name(C->g->arena, C->g, op);
    if (pcc_ops[op->kind].flags & PCC_OPF_RNG)
        return refuse_request(w, "co-shards %s (%s), which draws random numbers: each piece would draw its own", name,
                    pcc_ops[op->kind].name);
    for (int i = 0; i < nl; i++) {
        const char *why = refuse(C->g, op, &L[i], w->ways);
        if (w->letter && !strcmp(L[i].name, w->letter)) {
            if (why) return refuse_request(w, "cannot co-shard %s along %s=%s %d ways: %s", name, L[i].name,
                                 C->g->dims[L[i].dim].name, w->ways, why);
            best = i;
            break;
        }
        if (w->letter || why) continue;
        int a = score(C, op, &L[i], w->ways), b = best < 0 ? 0 : score(C, op, &L[best], w->ways);
        if (best < 0 || a > b || (a == b && C->g->dims[L[i].dim].size > C->g->dims[L[best].dim].size)) best = i;
    }
    if (best < 0 && w->letter)
        return refuse_request(w, "%s (%s) has no letter \"%s\"", name, pcc_ops[op->kind].name, w->letter);
    if (best < 0)
        return refuse_request(w, "%s (%s) has no letter that splits %d ways (not the batch, not marked unsplittable, its size a multiple)",
                    name, pcc_ops[op->kind].name, w->ways);
    C->letter[o] = L[best];
    return PCC_OK;
}

/* ---- the rewrite ---- */

static int piece_dim(cs *C, int dim, int k) {
    for (int i = 0; i < C->n_newdim; i++)
        if (C->newdim[i][0] == dim && C->newdim[i][1] == k) return C->newdim_id[i];
    pcc_graph *g = C->g;
    int id = graph_add_dim(g, arena_printf(g->arena, "%s/%d", g->dims[dim].name, k), g->dims[dim].size / k, g->dims[dim].ptr);
    int n = C->n_newdim;
    int(*e)[2] = VEC_PUSH(g->arena, C->newdim, C->n_newdim, C->cap_newdim);
    (*e)[0] = dim, (*e)[1] = k;
    C->newdim_id = realloc(C->newdim_id, sizeof(int) * (size_t)(n + 1));
    C->newdim_id[n] = id;
    return id;
}

// A new activation like tensor t in block b, cut along axis (-1: whole shape).
static int new_tensor(cs *C, int t, int axis, int k, const char *name, int block) {
    pcc_tensor x = C->g->tensors[t];
    x.name = name, x.kind = PCC_T_ACT, x.block = block, x.of = -1, x.grad = -1, x.saved = false, x.frozen = false;
    x.producer = PCC_PROD_NONE;
    if (axis >= 0) x.dims[axis] = piece_dim(C, x.dims[axis], k);
    return graph_add_tensor(C->g, &x);
}

static void op_add(cs *C, pcc_op_kind kind, int block, const int *in, int nin, const int *out, int nout, const pcc_op *like,
                   const char *label) {
    int id = graph_add_op(C->g, kind, block, in, nin, out, nout, like->ptr);
    C->g->ops[id].label = label;
    C->g->ops[id].phase = PCC_PHASE_FWD;
}

// The k pieces of input i of op (along axis): the producer's, or a split's.
static int *input_pieces(cs *C, const pcc_op *op, int t, int axis, int k) {
    if (C->pieces[t] && C->piece_axis[t] == axis && C->piece_ways[t] == k) return C->pieces[t];
    int *p = arena_alloc(C->g->arena, sizeof(int) * (size_t)k);
    const char *tn = C->g->tensors[t].name;
    for (int j = 0; j < k; j++) p[j] = new_tensor(C, t, axis, k, arena_printf(C->g->arena, "%s.cs%d", tn, j), op->block);
    pcc_op like = *op;
    op_add(C, PCC_OP_SPLIT, op->block, &t, 1, p, k, &like, arena_printf(C->g->arena, "%s.split", tn));
    C->g->ops[C->g->n_ops - 1].attrs = (pcc_attrs){.axis = axis};
    if (!C->pieces[t]) C->pieces[t] = p, C->piece_axis[t] = axis, C->piece_ways[t] = k;
    return p;
}

// Joins output t of op from its pieces p: a concat along axis, or (axis -1) the sum, a mean
// loss scaled by 1/k.
static void join(cs *C, const pcc_op *op, int t, const int *p, int axis, int k) {
    pcc_graph *g = C->g;
    const char *label = arena_printf(g->arena, "%s.join", base_name(g, op));
    if (axis >= 0) {
        if (!C->joined[t]) return;
        op_add(C, PCC_OP_CONCAT, op->block, p, k, &t, 1, op, label);
        g->ops[g->n_ops - 1].attrs = (pcc_attrs){.axis = axis};
        return;
    }
    bool mean = (pcc_ops[op->kind].flags & PCC_OPF_LOSS) && !(op->kind == PCC_OP_CROSS_ENTROPY && (op->attrs.mode & PCC_CE_SUM));
    int acc = p[0];
    for (int j = 1; j < k; j++) {
        int out = j == k - 1 && !mean ? t : new_tensor(C, t, -1, k, arena_printf(g->arena, "%s.sum%d", g->tensors[t].name, j), op->block);
        int in[2] = {acc, p[j]};
        op_add(C, PCC_OP_ADD, op->block, in, 2, &out, 1, op, label);
        acc = out;
    }
    if (mean) {
        op_add(C, PCC_OP_SCALE, op->block, &acc, 1, &t, 1, op, label);
        g->ops[g->n_ops - 1].attrs = (pcc_attrs){.scale = 1.0 / k};
    }
}

static void rewrite_op(cs *C, int o) {
    const pcc_op *op = &C->old[o];
    const pcc_letter *l = &C->letter[o];
    int k = C->want[o].ways;
    pcc_graph *g = C->g;
    int **in = arena_alloc(g->arena, sizeof(int *) * (size_t)op->nin);
    int **out = arena_alloc(g->arena, sizeof(int *) * (size_t)op->nout);
    for (int i = 0; i < op->nin; i++) in[i] = l->axis[i] >= 0 ? input_pieces(C, op, op->in[i], l->axis[i], k) : NULL;
    for (int j = 0; j < op->nout; j++) {
        out[j] = arena_alloc(g->arena, sizeof(int) * (size_t)k);
        int t = op->out[j];
        for (int p = 0; p < k; p++)
            out[j][p] = new_tensor(C, t, l->axis[op->nin + j], k, arena_printf(g->arena, "%s.cs%d", g->tensors[t].name, p), op->block);
    }
    int pin[PCC_MAX_OPERANDS], pout[PCC_MAX_OPERANDS];
    for (int p = 0; p < k; p++) {
        for (int i = 0; i < op->nin; i++) pin[i] = in[i] ? in[i][p] : op->in[i];
        for (int j = 0; j < op->nout; j++) pout[j] = out[j][p];
        // Partial sums along a reduction letter: the bias (linear's, conv2d's third input) once.
        bool bias = l->reduce && (op->kind == PCC_OP_LINEAR || op->kind == PCC_OP_CONV2D) && op->nin == 3;
        int id = graph_add_op(g, op->kind, op->block, pin, bias && p > 0 ? 2 : op->nin, pout, op->nout, op->ptr);
        g->ops[id].attrs = op->attrs;
        g->ops[id].label = base_name(g, op);
        g->ops[id].phase = PCC_PHASE_FWD;
    }
    for (int j = 0; j < op->nout; j++) {
        int t = op->out[j], axis = l->axis[op->nin + j];
        if (axis >= 0) C->pieces[t] = out[j], C->piece_axis[t] = axis, C->piece_ways[t] = k;
        join(C, op, t, out[j], axis, k);
    }
}

/* ---- which outputs need their whole ---- */

static bool bound_outside(const pcc_graph *g, int t) {
    for (int b = 0; b < g->n_blocks; b++) {
        const pcc_block *bl = &g->blocks[b];
        for (int i = 0; i < bl->n_carry; i++)
            if (bl->carry[i].outer == t) return true;
        for (int i = 0; i < bl->n_out; i++)
            if (bl->out[i].inner == t) return true;
    }
    return false;
}

// Every output of a co-sharded op along its letter keeps its concat unless all its readers are
// co-sharded the same way along the same axis.
static void mark_joined(cs *C) {
    const pcc_graph *g = C->g;
    for (int o = 0; o < C->n_old; o++) {
        const pcc_op *op = &C->old[o];
        if (!C->want[o].ways) continue;
        for (int j = 0; j < op->nout; j++) {
            int t = op->out[j];
            C->joined[t] = t == g->loss || bound_outside(g, t);
        }
    }
    for (int o = 0; o < C->n_old; o++) {
        const pcc_op *op = &C->old[o];
        for (int i = 0; i < op->nin; i++) {
            int t = op->in[i], p = g->tensors[t].producer;
            if (p < 0 || !C->want[p].ways) continue;
            int axis = C->letter[p].axis[C->old[p].nin + 0];
            for (int j = 0; j < C->old[p].nout; j++)
                if (C->old[p].out[j] == t) axis = C->letter[p].axis[C->old[p].nin + j];
            bool takes = C->want[o].ways == C->want[p].ways && C->letter[o].axis[i] == axis && axis >= 0;
            if (!takes) C->joined[t] = true;
        }
    }
}

/* ---- the pass ---- */

static void note(pcc_options *o, const pcc_graph *g, const pcc_op *op, const pcc_letter *l, int k) {
    pcc_coshard_note *n = VEC_PUSH(g->arena, o->coshard_notes, o->n_coshard_notes, o->cap_coshard_notes);
    *n = (pcc_coshard_note){full_name(g->arena, g, op), arena_printf(g->arena, "%s", l->name), g->dims[l->dim].name, k};
}

static void rebuild(cs *C, pcc_options *o) {
    pcc_graph *g = C->g;
    int *start = arena_alloc(g->arena, sizeof(int) * (size_t)(C->n_old + 1));
    g->ops = NULL, g->n_ops = 0, g->cap_ops = 0;
    for (int i = 0; i < C->n_old; i++) {
        start[i] = g->n_ops;
        if (C->want[i].ways) {
            note(o, g, &C->old[i], &C->letter[i], C->want[i].ways);
            rewrite_op(C, i);
            continue;
        }
        *VEC_PUSH(g->arena, g->ops, g->n_ops, g->cap_ops) = C->old[i];
        for (int j = 0; j < C->old[i].nout; j++) g->tensors[C->old[i].out[j]].producer = g->n_ops - 1;
    }
    start[C->n_old] = g->n_ops;
    for (int b = 0; b < g->n_blocks; b++) {
        pcc_block *bl = &g->blocks[b];
        int first = bl->first_op, last = bl->first_op + bl->n_ops;
        bl->first_op = start[first], bl->n_ops = start[last] - start[first];
    }
    g->n_fwd_ops = g->n_ops;
}

static int chosen_mark; // pieces[t] while the letters are chosen: t will come in pieces

pcc_status coshard_apply(pcc_graph *g, pcc_options *o) {
    const pcc_policy *p = o->search.policy;
    o->coshard_notes = NULL, o->n_coshard_notes = o->cap_coshard_notes = 0;
    if (!o->coshard && !(p && p->coshards)) return PCC_OK;
    PCC_ASSERT(g->n_fwd_ops == g->n_ops);
    cs C = {.g = g, .n_old = g->n_ops, .old = g->ops};
    size_t nt = (size_t)g->n_tensors + 1;
    C.want = arena_alloc(g->arena, sizeof(want) * (size_t)(g->n_ops + 1));
    C.letter = arena_alloc(g->arena, sizeof(pcc_letter) * (size_t)(g->n_ops + 1));
    C.folded = batch_dims(g, graph_batch_dim(g));
    C.pieces = arena_alloc(g->arena, sizeof(int *) * nt);
    C.piece_axis = arena_alloc(g->arena, sizeof(int) * nt);
    C.piece_ways = arena_alloc(g->arena, sizeof(int) * nt);
    C.joined = arena_alloc(g->arena, sizeof(bool) * nt);
    pcc_status st = o->coshard ? cli_requests(&C, o->coshard) : PCC_OK;
    if (!st) st = policy_requests(&C, p);
    // The letters in program order: a chain sees its producer's pieces (pieces[] stands in for
    // them here; the rewrite fills it again).
    for (int i = 0; i < C.n_old && !st; i++) {
        if (!C.want[i].ways) continue;
        if (!(st = choose(&C, i)))
            for (int j = 0; j < C.old[i].nout; j++) {
                int t = C.old[i].out[j], ax = C.letter[i].axis[C.old[i].nin + j];
                if (ax >= 0) C.pieces[t] = &chosen_mark, C.piece_axis[t] = ax, C.piece_ways[t] = C.want[i].ways;
            }
    }
    if (st) {
        free(C.newdim_id);
        return st;
    }
    memset(C.pieces, 0, sizeof(int *) * nt);
    mark_joined(&C);
    rebuild(&C, o);
    free(C.newdim_id);
    return PCC_OK;
}

/* ---- --auto's fit step ---- */

// Whether op can be co-sharded k ways along some letter (the choice coshard_apply would make).
static bool can_coshard(const pcc_graph *g, const pcc_op *op, int k) {
    pcc_letter L[PCC_MAX_LETTERS];
    int nl = op_letters(g, op, L);
    if (pcc_ops[op->kind].flags & PCC_OPF_RNG) return false;
    for (int i = 0; i < nl; i++)
        if (!refuse(g, op, &L[i], k)) return true;
    return false;
}

// A name --coshard can take back as a glob that selects it alone.
static bool plain_name(const char *s) { return !strpbrk(s, "*?[]\\,:"); }

static double out_bytes(const pcc_graph *g, const pcc_op *op) {
    double b = 0;
    for (int j = 0; j < op->nout; j++) b = b > tensor_bytes(g, &g->tensors[op->out[j]]) ? b : tensor_bytes(g, &g->tensors[op->out[j]]);
    return b;
}

const char *coshard_suggest(pcc_arena *a, const pcc_graph *g, int k) {
    double top = 0;
    for (int o = 0; o < g->n_fwd_ops; o++) top = top > out_bytes(g, &g->ops[o]) ? top : out_bytes(g, &g->ops[o]);
    const char *s = NULL;
    for (int o = 0; o < g->n_fwd_ops && top > 0; o++) {
        const pcc_op *op = &g->ops[o];
        bool big = out_bytes(g, op) >= top / 2;
        // a loss reading a big operator's output goes with it (the LM head's logits)
        for (int i = 0; !big && (pcc_ops[op->kind].flags & PCC_OPF_LOSS) && i < op->nin; i++) {
            int p = g->tensors[op->in[i]].producer;
            big = p >= 0 && out_bytes(g, &g->ops[p]) >= top / 2;
        }
        const char *name = full_name(a, g, op);
        if (!big || !plain_name(name) || !can_coshard(g, op, k)) continue;
        s = s ? arena_printf(a, "%s,%s", s, name) : name;
    }
    return s;
}
