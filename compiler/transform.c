/*
 * transform.c: phase 1, model transformation (nnScaler's op-trans).
 *
 * For every forward operator and a group of n devices it lists the ways to run the operator
 * there, read off the operator's dimension annotation (ops.c, op_letters):
 *   - split: one splittable letter cut n ways (its size divisible by n times its grain: a ghost
 *     batch norm's batch splits in whole groups). Operands that carry the letter are split
 *     along it (D); inputs without it are replicated (R); outputs without
 *     it hold partial sums (V) when the letter is a reduction ("+"), which is how a split of the
 *     contraction dimension of a matmul or the rows of an embedding table works;
 *   - replicate: every device computes the whole operator (R everywhere);
 *   - and, for an operator inside a repeated block, each of those again with recompute: the
 *     operator's kept activations are dropped and its forward runs again in the backward pass.
 * The backward operators autodiff derived from an operator follow its choice, so a candidate's
 * cost is its forward plus its backward. The scheduler (phase 2) picks one per operator.
 *
 * The driver runs this phase once per group size the search (phase 2) will try (search_group_sizes:
 * every tensor-parallel group of the meshes it factors the devices into) and hands the result to
 * the search, which filters the candidates per mesh (the batch is data parallelism's, recompute
 * as the options say) but never calls back here.
 *
 * On a 2-D group (--tp2: devices/minor x minor, the minor axis the faster), each operator also gets
 * every pair of letters of different dimensions, the first cut over the major axis, the second
 * over the minor one (nnScaler's multi-axis split: a linear's rows and columns, attention's batch
 * and heads); a single letter then splits over the whole group, both axes along it.
 *
 * Limits: at most two letters per candidate; uniform splits only.
 */
#include "plancc.h"

#include <string.h>

typedef struct op_cost {
    double fwd, bwd, fwd_mm, bwd_mm; // one instance
} op_cost;

static op_cost *op_costs(const pcc_graph *g) {
    op_cost *c = arena_alloc(g->arena, sizeof(op_cost) * (size_t)(g->n_fwd_ops + 1));
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase == PCC_PHASE_FWD) {
            c[o].fwd = op_flops(g, op);
            c[o].fwd_mm = op_flops_matmul(g, op);
        } else if (op->phase == PCC_PHASE_BWD && op->fwd >= 0) {
            c[op->fwd].bwd += op_flops(g, op);
            c[op->fwd].bwd_mm += op_flops_matmul(g, op);
        }
    }
    return c;
}

// Operand o's layout factor when `l` (NULL: replicate) is cut n ways: pieces, partial sums or replicas.
static void cut(pcc_layout *lay, const pcc_letter *l, int o, bool is_out, int n) {
    if (!l) lay->r *= n;
    else if (l->axis[o] >= 0) lay->d[(int)l->axis[o]] *= n;
    else if (is_out && l->reduce) lay->v *= n;
    else lay->r *= n;
}

// What operand o is along an axis over which l (NULL: nothing) is cut, as plan_shard's map says it.
static uint8_t axis_part(const pcc_letter *l, int o, bool is_out) {
    if (!l) return PLAN_SHARD_R;
    if (l->axis[o] >= 0) return (uint8_t)PLAN_SHARD_D(l->axis[o]);
    return is_out && l->reduce ? PLAN_SHARD_V : PLAN_SHARD_R;
}

// Layouts of all operands when `l` (NULL: replicate) is cut n ways, and then l2 (NULL: none) n2
// ways; on a 2-D group each axis's part too (l alone: over both axes).
static void layouts(const pcc_graph *g, const pcc_op *op, const pcc_letter *l, int n, const pcc_letter *l2, int n2, pcc_cand *c) {
    c->in = arena_alloc(g->arena, sizeof(pcc_layout) * (size_t)(op->nin + 1));
    c->out = arena_alloc(g->arena, sizeof(pcc_layout) * (size_t)(op->nout + 1));
    for (int o = 0; o < op->nin + op->nout; o++) {
        bool is_out = o >= op->nin;
        pcc_layout *lay = is_out ? &c->out[o - op->nin] : &c->in[o];
        lay->r = lay->v = 1;
        for (int i = 0; i < PCC_MAX_RANK; i++) lay->d[i] = 1;
        cut(lay, l, o, is_out, n);
        if (l2) cut(lay, l2, o, is_out, n2);
        lay->ax[0] = axis_part(l, o, is_out), lay->ax[1] = axis_part(l2 ? l2 : l, o, is_out);
    }
}

// Per-device bytes of the operands selected by `want` (params or kept outputs) under the layouts.
static double operand_bytes(const pcc_graph *g, const pcc_op *op, const pcc_cand *c, bool params) {
    double b = 0;
    int first = params ? 0 : op->nin, last = params ? op->nin : op->nin + op->nout;
    for (int o = first; o < last; o++) {
        const pcc_tensor *t = &g->tensors[o < op->nin ? op->in[o] : op->out[o - op->nin]];
        if (params ? t->kind != PCC_T_PARAM : !t->saved) continue;
        const pcc_layout *lay = o < op->nin ? &c->in[o] : &c->out[o - op->nin];
        double pieces = 1;
        for (int i = 0; i < t->rank; i++) pieces *= lay->d[i];
        b += tensor_bytes(g, t) / pieces;
    }
    return b;
}

// Candidate c: l (NULL: replicate) cut n ways, and l2 (NULL: none) n2 ways over a second axis.
static void cand_fill(const pcc_graph *g, const pcc_op *op, const op_cost *cost, const pcc_letter *l, int n,
                      const pcc_letter *l2, int n2, bool recompute, pcc_cand *c) {
    memset(c, 0, sizeof *c);
    c->dim = l ? l->dim : -1;
    snprintf(c->letter, sizeof c->letter, "%s", l ? l->name : "");
    c->ways = l ? n : 1;
    c->dim2 = l2 ? l2->dim : -1;
    snprintf(c->letter2, sizeof c->letter2, "%s", l2 ? l2->name : "");
    c->ways2 = l2 ? n2 : 1;
    c->recompute = recompute;
    double share = (l ? 1.0 / n : 1.0) / c->ways2;
    c->flops = (cost->fwd * (recompute ? 2 : 1) + cost->bwd) * share;
    c->flops_matmul = (cost->fwd_mm * (recompute ? 2 : 1) + cost->bwd_mm) * share;
    layouts(g, op, l, n, l2, n2, c);
    c->param_bytes = operand_bytes(g, op, c, true);
    c->act_bytes = recompute ? 0 : operand_bytes(g, op, c, false);
}

static bool has_kept_outputs(const pcc_graph *g, const pcc_op *op) {
    for (int i = 0; i < op->nout; i++)
        if (g->tensors[op->out[i]].saved) return true;
    return false;
}

// Whether an output of op leaves its block's copy (to the next copy or out of the block).
static bool leaves_block(const pcc_graph *g, const pcc_op *op) {
    const pcc_block *bl = &g->blocks[op->block];
    for (int i = 0; i < op->nout; i++) {
        for (int k = 0; k < bl->n_carry; k++)
            if (bl->carry[k].outer == op->out[i]) return true;
        for (int k = 0; k < bl->n_out; k++)
            if (bl->out[k].inner == op->out[i]) return true;
    }
    return false;
}

// Whether op gets recompute twins. Phase 3 recomputes operators inside repeated blocks
// only, so only those. Inside a block, also an operator that keeps nothing itself: what its
// recomputed readers need is then recomputed too, rather than kept from the forward pass
// (a chain of recomputed operators keeps only its start; ilp.c counts what a chain keeps).
// Not an operator whose output leaves the copy: that is where the next copy's chain starts.
static bool can_recompute(const pcc_graph *g, const pcc_op *op) {
    if (op->block < 0) return false;
    return has_kept_outputs(g, op) || !leaves_block(g, op);
}

static bool cuts(const pcc_graph *g, const pcc_letter *l, int n) {
    return !l->nosplit && g->dims[l->dim].size % (n * l->grain) == 0;
}

// minor > 1: the pairs too, letter i over the major axis (n / minor ways) and j over the minor.
static void op_candidates(const pcc_graph *g, int o, const op_cost *cost, int n, int minor, pcc_op_cands *out) {
    const pcc_op *op = &g->ops[o];
    pcc_letter letters[PCC_MAX_LETTERS];
    int nl = op_letters(g, op, letters), major = minor > 1 ? n / minor : n;
    bool rc = can_recompute(g, op);
    int cap = 2 * (nl + 1) * (minor > 1 ? nl + 1 : 1);
    out->op = o;
    out->c = arena_alloc(g->arena, sizeof(pcc_cand) * (size_t)cap);
    out->n = 0;
    for (int pass = 0; pass < (rc ? 2 : 1); pass++) {
        cand_fill(g, op, &cost[o], NULL, n, NULL, 1, pass == 1, &out->c[out->n++]);
        if (n == 1) continue;
        for (int i = 0; i < nl; i++)
            if (cuts(g, &letters[i], n)) cand_fill(g, op, &cost[o], &letters[i], n, NULL, 1, pass == 1, &out->c[out->n++]);
        for (int i = 0; minor > 1 && i < nl; i++)
            for (int j = 0; j < nl; j++) {
                const pcc_letter *a = &letters[i], *b = &letters[j];
                if (a->dim == b->dim || !cuts(g, a, major) || !cuts(g, b, minor)) continue;
                cand_fill(g, op, &cost[o], a, major, b, minor, pass == 1, &out->c[out->n++]);
            }
    }
}

pcc_transform *transform(const pcc_graph *g, int devices, int minor) {
    PCC_ASSERT(devices >= 1 && (minor <= 1 || devices % minor == 0));
    pcc_transform *t = arena_alloc(g->arena, sizeof *t);
    t->devices = devices;
    t->minor = minor > 1 && devices > minor ? minor : 1;
    t->n_ops = g->n_fwd_ops;
    t->ops = arena_alloc(g->arena, sizeof(pcc_op_cands) * (size_t)(g->n_fwd_ops + 1));
    op_cost *cost = op_costs(g);
    for (int o = 0; o < g->n_fwd_ops; o++) op_candidates(g, o, cost, devices, t->minor, &t->ops[o]);
    return t;
}

pcc_transforms *transform_all(const pcc_graph *g, const int *sizes, int n, int minor) {
    pcc_transforms *ts = arena_alloc(g->arena, sizeof *ts);
    ts->n = n;
    ts->t = arena_alloc(g->arena, sizeof(pcc_transform *) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) ts->t[i] = transform(g, sizes[i], minor > 1 && sizes[i] % minor == 0 ? minor : 1);
    return ts;
}

const pcc_transform *transform_find(const pcc_transforms *ts, int devices) {
    for (int i = 0; ts && i < ts->n; i++)
        if (ts->t[i]->devices == devices) return ts->t[i];
    return NULL;
}

pcc_layout transform_grad_in(const pcc_cand *c, int k) {
    pcc_layout l = c->in[k];
    if (c->dim < 0 || l.r == 1) return l; // replicated op: full gradient; split input: split gradient
    l.v = l.r, l.r = 1;                   // each device holds a partial gradient (a 2-D group's axes alike)
    for (int a = 0; a < 2; a++) l.ax[a] = l.ax[a] == PLAN_SHARD_R ? PLAN_SHARD_V : l.ax[a];
    return l;
}

/* ---- dump ---- */

static void layout_print(FILE *f, const pcc_layout *l, int rank) {
    fprintf(f, "R%dV%dD(", l->r, l->v);
    for (int i = 0; i < rank; i++) fprintf(f, "%s%d", i ? "," : "", l->d[i]);
    fputc(')', f);
}

static void transform_dump_one(FILE *f, const pcc_graph *g, const pcc_transform *t) {
    if (t->minor > 1) fprintf(f, "transform: %d devices (%d x %d), %d forward ops\n", t->devices, t->devices / t->minor, t->minor, t->n_ops);
    else fprintf(f, "transform: %d devices, %d forward ops\n", t->devices, t->n_ops);
    for (int i = 0; i < t->n_ops; i++) {
        const pcc_op_cands *oc = &t->ops[i];
        const pcc_op *op = &g->ops[oc->op];
        fprintf(f, "op %s %s -> %s: %d candidates\n", op->ptr, pcc_ops[op->kind].name, g->tensors[op->out[0]].name, oc->n);
        for (int k = 0; k < oc->n; k++) {
            const pcc_cand *c = &oc->c[k];
            if (c->dim >= 0) fprintf(f, "  split %s=%s/%d", c->letter, g->dims[c->dim].name, c->ways);
            else fprintf(f, "  replicate");
            if (c->dim2 >= 0) fprintf(f, " x %s=%s/%d", c->letter2, g->dims[c->dim2].name, c->ways2);
            fprintf(f, "%s flops %.6g params %.6g acts %.6g in", c->recompute ? " recompute" : "", c->flops, c->param_bytes,
                    c->act_bytes);
            for (int o = 0; o < op->nin; o++) {
                fputc(' ', f);
                layout_print(f, &c->in[o], g->tensors[op->in[o]].rank);
            }
            fprintf(f, " out");
            for (int o = 0; o < op->nout; o++) {
                fputc(' ', f);
                layout_print(f, &c->out[o], g->tensors[op->out[o]].rank);
            }
            fputc('\n', f);
        }
    }
}

void transform_dump(FILE *f, const pcc_graph *g, const pcc_transforms *ts) {
    for (int i = 0; i < ts->n; i++) transform_dump_one(f, g, ts->t[i]);
}
