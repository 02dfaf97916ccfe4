/*
 * ilp.c: phase 2, space-time scheduling: the intra-operator ILP, as plancc formulates it.
 *
 * Given each forward operator's candidates on a group of n devices (transform.c), pick one per
 * operator. Alpa's formulation, as an integer program that glpk.c solves with GLPK:
 *
 *   x[o][k] in {0,1}, sum_k x[o][k] = 1                 one candidate per operator
 *   y[e][k][l] in [0,1] for each edge e = (p -> c):      the pair chosen at both ends
 *     sum_l y[e][k][l] = x[p][k],  sum_k y[e][k][l] = x[c][l]
 *   r[v][a->b] in [0,1] for each value v and pair of layouts:  r >= sum of v's reader e's pairs
 *     y[e][k][l] whose resharding goes from a to b (one row per reader e)
 *   minimize  sum w_o * (compute + gradient sync)(o, k) * x[o][k]
 *           + sum w_v * reshard(a -> b) * r[v][a->b]
 *   subject to sum w_o * memory(o, k) * x[o][k] <= memory per device
 *
 * Compute is the cost model's roofline of the candidate's per-device FLOPs; gradient sync an
 * all-reduce of every parameter the candidate replicates over the group; resharding the
 * cheapest chain of collectives (reshard.c) from the producer's output layout to the consumer's
 * input layout, and back for the gradient (a replicated input's gradient comes back as partial
 * sums; a partial-sum output needs its gradient replicated). A value read by several
 * consumers pays each resharding once, as phase 3 makes it (r, below: "resharding shared by a
 * value's readers"); a value with one reader pays it on its pairs, without r. Memory is
 * parameters times (weights + gradients + optimizer state) plus kept activations.
 *
 * Repeated blocks are solved once: a block op's costs weigh `repeat`, an edge inside the block
 * weighs `repeat`, and a carried state is one more edge, from the op that makes it to the ops
 * that read it in the next copy, weighing repeat - 1. Pairs with no resharding chain (a split
 * that does not divide) get no y variable, which forbids them.
 *
 * Element-wise operators (relu, add, dropout, ...) can follow their first input's producer, as
 * Alpa's "follow" does: they get no variables; for each candidate of the producer (the leader)
 * the follower takes the candidate that is cheapest locally (its own cost plus resharding the
 * producer's output into it, with the leader's recompute choice where it can), and that cost
 * is folded into the leader's. Chains follow transitively. This shrinks the program, but the
 * follower's choice is blind to memory and to its own readers: on a GPT block it cost 18% of
 * the objective on 8 devices, and a program that fits without followers did not fit with them.
 * Since a repeated block is solved once, programs stay small (a GPT block, about 600 columns;
 * the Swin-like model, the largest here, about 7,600), so followers are used only when the full
 * program would have more than FOLLOW_ABOVE_COLS columns (pcc_intra_opts can lower it).
 *
 * Memory per device: the candidates count parameters and kept activations for the group's
 * whole batch and one micro-batch. The caller says what a byte of each costs on a device
 * (pcc_intra_opts: data parallelism and ZeRO shard them, a pipeline keeps several micro-batches'
 * activations); by default weights + gradients + optimizer state per parameter byte, and one
 * byte per activation byte.
 *
 * The device mesh and the pipeline stages around this are search.c's; the order in time is
 * pipeline.c's, which phase 3 (preserve.c) follows.
 */
#include "plancc.h"

#include <math.h>
#include <string.h>

typedef struct edge {
    int p, po;      // producer forward op and the index of the tensor among its outputs (param: its inputs)
    int c, ci;      // consumer forward op and input index
    double w;       // how many times per step the edge is crossed
    double mw;      // how many copies of its tensor there are (w, but 1 for a block input every copy reads)
    bool again;     // the consumer's backward pass reads the input too (a weight's gradient reads x): phase 3
                    // reshards it again there from where its producer keeps it
    int param;      // > 0: a parameter's later reader, p its first (shared_param), of `param` later readers
} edge;

typedef struct builder {
    pcc_arena *a;      // the builder's own arrays, freed as it returns (what it returns is g's)
    const pcc_graph *g;
    const pcc_cluster *c;
    const pcc_transform *t;
    const pcc_intra_opts *o;
    edge *edges;
    int n_edges, cap_edges;
    double mem_factor; // device bytes per byte of parameter (weights + grads + optimizer state)
    double act_scale;  // device bytes per byte of kept activation the candidates count
    int *leader;       // per forward op
    int **follow;      // per forward op: candidate for each leader candidate
    pcc_symtab memo;   // resharding times already searched, by shape and layouts
    double *memo_s;
    int n_memo, cap_memo;
    double *pool;      // per bucket segment (graph_bucket_segment): its synchronized parameters' bytes
    int *head;         // per edge: the first edge of its value (below, resharding shared by readers)
    int *first;        // per head edge: its value's first charge, or -1
    int *readers;      // per head edge: the edges of its value
    struct charge *ch;
    int n_ch, cap_ch;
    int **ycol;        // per edge between two leaders: its pair columns, producer-major (-1: none)
    bool again;        // charge the second resharding where a consumer's backward reads its input
                       // (ilp_op_comm, for the estimate); the program leaves it out (below)
} builder;

/* ---- per-candidate costs ---- */

// Vocabulary-parallel cross-entropy (compiler/vocab.c) where candidate c splits a cross_entropy's
// classes: each pass gathers three f32 numbers a row over the group, and the backward pass reads
// its piece of the logits once more to make them again (estimate.c's est_vocab, over tp).
static double cand_vocab_s(const builder *B, const pcc_op *op, const pcc_cand *c) {
    const pcc_graph *g = B->g;
    if (op->kind != PCC_OP_CROSS_ENTROPY || c->dim < 0) return 0;
    const pcc_tensor *x = &g->tensors[op->in[0]];
    if (c->dim != x->dims[x->rank - 1] || c->ways * c->ways2 < 2) return 0;
    double rows = (double)tensor_numel(g, x) / (double)g->dims[c->dim].size;
    double gather = cost_launch_s(B->c) + cost_vocab_stats_s(B->c, rows, c->ways, (pcc_group_shape){c->ways, B->o->group.stride});
    return 2 * gather + cost_compute_s(B->c, 0, tensor_bytes(g, x) / c->ways, x->dtype, false);
}

// The candidate's own work: its kernels, and the collectives inside its form (cand_vocab_s).
static double cand_compute_s(const builder *B, const pcc_op *op, const pcc_cand *c) {
    double bytes = 3 * op_bytes(B->g, op) / c->ways / c->ways2; // forward once, backward about twice
    pcc_dtype dt = B->g->tensors[op->out[0]].dtype;
    double t = cost_compute_s(B->c, c->flops_matmul, 0, dt, true);
    // A recomputed forward runs its kernels again: one more launch.
    return t + cost_compute_s(B->c, c->flops - c->flops_matmul, bytes, dt, false) + (c->recompute ? cost_launch_s(B->c) : 0) +
           cand_vocab_s(B, op, c);
}

// Whether op's input i is a parameter whose gradient the step synchronizes where it is replicated.
static bool step_synced(const builder *B, const pcc_op *op, int i) {
    return B->g->tensors[op->in[i]].kind == PCC_T_PARAM && graph_step_synced(B->g, op->in[i], B->o->bg_dense);
}

// The bytes of the gradients that may share phase 3's buckets, per segment: every
// step-synchronized parameter whole (as data parallelism over the group leaves them).
static void collect_pools(builder *B) {
    const pcc_graph *g = B->g;
    B->pool = arena_alloc(B->a, sizeof(double) * (size_t)(2 * g->n_blocks + 2));
    bool *seen = arena_alloc(B->a, sizeof(bool) * (size_t)(g->n_tensors + 1));
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        for (int i = 0; i < op->nin; i++) {
            if (!step_synced(B, op, i) || seen[op->in[i]]) continue;
            seen[op->in[i]] = true;
            B->pool[graph_bucket_segment(g, o)] += tensor_bytes(g, &g->tensors[op->in[i]]);
        }
    }
}

// A parameter's gradient needs an all-reduce when the op is split along a letter the parameter
// does not carry (each device saw part of the work: data parallelism is the common case). A
// replicated op computes the same full gradient everywhere and needs none. The gradients of a
// segment share all-reduces of up to --bucket-mb (cost_bucketed_s), as phase 3 issues them.
static double cand_sync_s(const builder *B, const pcc_op *op, const pcc_cand *c) {
    double s = 0;
    if (c->dim < 0) return 0;
    double pool = B->pool[graph_bucket_segment(B->g, (int)(op - B->g->ops))];
    for (int i = 0; i < op->nin; i++) {
        const pcc_tensor *t = &B->g->tensors[op->in[i]];
        if (!step_synced(B, op, i) || c->in[i].r <= 1) continue;
        double piece = tensor_bytes(B->g, t);
        for (int d = 0; d < t->rank; d++) piece /= c->in[i].d[d];
        s += cost_bucketed_s(B->c, PCC_COLL_ALL_REDUCE, piece, pool, B->o->bucket_bytes,
                             (pcc_group_shape){c->in[i].r, B->o->group.stride});
    }
    return s;
}

static double cand_memory(const builder *B, const pcc_cand *c) {
    return c->param_bytes * B->mem_factor + c->act_bytes * B->act_scale;
}

/* ---- edges ---- */

static int out_index(const pcc_op *op, int t) {
    for (int i = 0; i < op->nout; i++)
        if (op->out[i] == t) return i;
    return -1;
}

// The forward op that makes the value of t seen from a reader (following a block's "out" to
// the op of the last copy); -1 for inputs, params and values bound from outside.
static int maker(const pcc_graph *g, int t) {
    if (g->tensors[t].producer >= 0) return t;
    if (g->tensors[t].producer != PCC_PROD_BLOCK) return -1;
    for (int b = 0; b < g->n_blocks; b++)
        for (int i = 0; i < g->blocks[b].n_out; i++)
            if (g->blocks[b].out[i].outer == t && g->blocks[b].fwd < 0) return maker(g, g->blocks[b].out[i].inner);
    return -1;
}

static void add_edge(builder *B, int src_tensor, int c, int ci, double w, double mw, bool again) {
    int t = maker(B->g, src_tensor);
    if (t < 0 || w <= 0) return;
    int p = B->g->tensors[t].producer;
    *VEC_PUSH(B->a, B->edges, B->n_edges, B->cap_edges) = (edge){p, out_index(&B->g->ops[p], t), c, ci, w, mw, again, 0};
}

// A parameter read by later forward ops than its first (a tied embedding's weight at the LM
// head; the LM head's co-shard pieces) stays in its first reader's layout: phase 3 reshards it
// before a later reader's forward pass, and again before its backward where that reads it, and
// its gradient goes back to the first reader's layout, where they are summed. Readers that want
// one layout share that: the objective charges each reader its share (estimate.c counts exact
// layouts after the choice). Not under ZeRO-3, which gathers it whole for every reader anyway.
static void shared_params(builder *B) {
    const pcc_graph *g = B->g;
    if (B->o->zero3) return;
    const uint64_t *rd = NULL;
    size_t bytes = sizeof(int) * (size_t)(g->n_tensors + 1);
    int *first = arena_alloc(B->a, bytes), *later = arena_alloc(B->a, bytes);
    for (int t = 0; t < g->n_tensors; t++) first[t] = -1, later[t] = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < g->n_fwd_ops; c++)
            for (int i = 0; i < g->ops[c].nin; i++) {
                int t = g->ops[c].in[i], f = first[t], fi = 0;
                if (g->tensors[t].kind != PCC_T_PARAM) continue;
                if (f < 0) f = first[t] = c;
                if (f == c) continue;
                if (pass == 0) {
                    later[t]++;
                    continue;
                }
                while (g->ops[f].in[fi] != t) fi++;
                if (!rd) rd = graph_backward_reads(g);
                bool again = i < 64 && (rd[c] >> i & 1);
                double w = (double)op_copies(g, &g->ops[c]);
                *VEC_PUSH(B->a, B->edges, B->n_edges, B->cap_edges) = (edge){f, fi, c, i, w, 0, again, later[t]};
            }
}

static void collect_edges(builder *B) {
    const pcc_graph *g = B->g;
    const uint64_t *rd = graph_backward_reads(g);
    for (int c = 0; c < g->n_fwd_ops; c++) {
        const pcc_op *op = &g->ops[c];
        double w = (double)op_copies(g, op);
        for (int i = 0; i < op->nin; i++) {
            int t = op->in[i];
            bool again = i < 64 && (rd[c] >> i & 1);
            if (g->tensors[t].producer != PCC_PROD_BOUND) {
                add_edge(B, t, c, i, w, w, again);
                continue;
            }
            const pcc_block *bl = &g->blocks[op->block];
            int carried = -1;
            for (int k = 0; k < bl->n_carry; k++)
                if (bl->carry[k].inner == t) carried = bl->carry[k].outer;
            for (int k = 0; k < bl->n_in; k++)
                if (bl->in[k].inner == t) add_edge(B, bl->in[k].outer, c, i, carried >= 0 ? 1 : w, 1, again);
            if (carried >= 0) add_edge(B, carried, c, i, w - 1, w - 1, again);
        }
    }
    shared_params(B);
}

// The layout a producer needs its output's gradient in.
static pcc_layout grad_out_layout(const pcc_cand *c, int po) {
    const pcc_layout *out = &c->out[po];
    if (out->v == 1) return *out;
    pcc_layout l = *out;                       // partial sums forward: the gradient is replicated
    l.r *= l.v, l.v = 1;
    for (int a = 0; a < 2; a++) l.ax[a] = l.ax[a] == PLAN_SHARD_V ? PLAN_SHARD_R : l.ax[a];
    return l;
}

// reshard_rvd, remembered: edges between tensors of one shape ask the same question often, and
// the program asks each edge's several times. Keyed by the tensor's shape and the two layouts
// (their axes on a 2-D group), written out in decimal here (snprintf's formatting was a tenth of
// GPT-3's compile).
static char *put_int(char *p, long long v, char sep) {
    char digits[24];
    int n = 0;
    if (v < 0) *p++ = '-', v = -v;
    do digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) > 0);
    while (n > 0) *p++ = digits[--n];
    *p++ = sep;
    return p;
}

static double reshard(builder *B, const pcc_tensor *t, const pcc_layout *from, const pcc_layout *to) {
    char key[21 * (2 + PCC_MAX_RANK + 2 * (4 + PCC_MAX_RANK))], *k = put_int(key, t->dtype, ','); // <= 20 digits and a separator each
    for (int i = 0; i < t->rank; i++) k = put_int(k, B->g->dims[t->dims[i]].size, ',');
    for (const pcc_layout *l = from; l; l = l == from ? to : NULL) {
        k = put_int(put_int(k, l->r, ','), l->v, '|');
        for (int i = 0; i < t->rank; i++) k = put_int(k, l->d[i], ',');
        if (B->o->group_minor > 1) k = put_int(put_int(k, l->ax[0], ','), l->ax[1], '|');
    }
    *k = 0;
    int hit = symtab_get(&B->memo, key);
    if (hit >= 0) return B->memo_s[hit];
    double sec = reshard_rvd_2d(B->c, B->g, t, from, to, B->o->group, B->o->group_minor, NULL);
    int id = B->n_memo;
    *VEC_PUSH(B->a, B->memo_s, B->n_memo, B->cap_memo) = sec;
    symtab_put(&B->memo, B->a, arena_strdup(B->a, key), id);
    return sec;
}

// Seconds to cross edge e with candidates k (producer) and l (consumer), as if it were its
// value's only reader (the followers' local choice); -1 if impossible. The program charges a
// value's resharding once for the readers that share it (below).
static double edge_cost(builder *B, const edge *e, const pcc_cand *pk, const pcc_cand *cl) {
    const pcc_graph *g = B->g;
    const pcc_op *c = &g->ops[e->c];
    const pcc_tensor *t = &g->tensors[c->in[e->ci]];
    double fwd = reshard(B, t, e->param ? &pk->in[e->po] : &pk->out[e->po], &cl->in[e->ci]);
    if (fwd < 0) return -1;
    if (e->param) {
        pcc_layout gi = transform_grad_in(cl, e->ci), gh = transform_grad_in(pk, e->po);
        double home = reshard(B, t, &gi, &gh);
        return home < 0 ? -1 : ((e->again ? 2 * fwd : fwd) + home) / e->param;
    }
    if (t->grad < 0 && g->tensors[g->ops[e->p].out[e->po]].grad < 0) return fwd;
    pcc_layout gi = transform_grad_in(cl, e->ci), go = grad_out_layout(pk, e->po);
    double bwd = reshard(B, t, &gi, &go);
    return bwd < 0 ? -1 : fwd + bwd;
}

// Bytes per device that edge e keeps with candidates k (producer) and l (consumer): where the
// consumer is recomputed in the backward pass and its producer is not, the tensor between them
// is the recompute's starting point and stays alive from the forward to the backward pass (phase
// 3 keeps it: preserve.c, keep). A tensor the backward pass keeps anyway is already in
// the producer's activations. (Two recomputed readers of one tensor count it twice.)
static double edge_memory(const builder *B, const edge *e, const pcc_cand *pk, const pcc_cand *cl) {
    const pcc_graph *g = B->g;
    const pcc_tensor *t = &g->tensors[g->ops[e->p].out[e->po]];
    if (e->param || !cl->recompute || pk->recompute || t->saved) return 0;
    double bytes = tensor_bytes(g, t);
    for (int i = 0; i < t->rank; i++) bytes /= pk->out[e->po].d[i];
    return e->mw * bytes * B->act_scale;
}

/* ---- resharding shared by a value's readers ---- */

// Phase 3 reshards a value once for all its readers that want one layout, once more in the
// backward pass for those whose backward reads it again (not recomputed), and sums the
// gradients that come back in one layout before resharding them to the producer's (preserve.c).
// So each of an edge's three reshardings is charged once per value (a group: the edges from one
// output of one producer, of one weight) and pair of layouts: in the program, a column per pair
// that every choice of an edge making that resharding forces up; in ilp_eval and ilp_op_comm,
// at the first edge that makes it. A parameter's later readers (shared_params) share by 1/k.
// The program leaves the second resharding out: charged (as the estimate does), it made
// near-ties of plans the estimate tells far apart (Megatron's layout on GPT-3 175B, pp 8 x dp 2
// x tp 8: its norms recomputed, 16.28 -> 21.19 s), a disagreement about recompute not yet found.
enum { RS_FWD, RS_AGAIN, RS_BWD };

typedef struct charge {
    int kind, next;     // next: the group's next charge, or -1
    pcc_layout from, to;
    int col;            // its program column, or -1
} charge;

static bool layout_eq(const pcc_layout *a, const pcc_layout *b) {
    if (a->r != b->r || a->v != b->v) return false;
    for (int i = 0; i < PCC_MAX_RANK; i++)
        if (a->d[i] != b->d[i]) return false;
    return true;
}

static bool same_layout(const builder *B, const pcc_layout *a, const pcc_layout *b) {
    return layout_eq(a, b) && (B->o->group_minor <= 1 || (a->ax[0] == b->ax[0] && a->ax[1] == b->ax[1]));
}

static void collect_groups(builder *B) {
    size_t bytes = sizeof(int) * (size_t)(B->n_edges + 1);
    B->head = arena_alloc(B->a, bytes), B->first = arena_alloc(B->a, bytes);
    B->readers = arena_alloc(B->a, bytes);
    for (int e = 0; e < B->n_edges; e++) {
        const edge *ed = &B->edges[e];
        B->head[e] = e, B->first[e] = -1, B->readers[e] = 0;
        for (int k = 0; k < e && !ed->param; k++) {
            const edge *ek = &B->edges[k];
            if (!ek->param && ek->p == ed->p && ek->po == ed->po && ek->w == ed->w) {
                B->head[e] = B->head[k];
                break;
            }
        }
        B->readers[B->head[e]]++;
    }
}

// Whether edge e shares its value's resharding with other edges (add_shared), rather than
// paying it on its own pairs.
static bool rs_shared(const builder *B, int e) { return !B->edges[e].param && B->readers[B->head[e]] > 1; }

// The layouts resharding `kind` of edge e goes between with candidates pk and cl; false where
// there is none (a backward pass that does not read the input, a value without a gradient).
static bool rs_layouts(const builder *B, const edge *e, int kind, const pcc_cand *pk, const pcc_cand *cl, pcc_layout *from,
                       pcc_layout *to) {
    const pcc_graph *g = B->g;
    if (kind == RS_AGAIN && !(B->again && e->again && !cl->recompute)) return false;
    if (kind == RS_BWD) {
        if (g->tensors[g->ops[e->c].in[e->ci]].grad < 0 && g->tensors[g->ops[e->p].out[e->po]].grad < 0) return false;
        *from = transform_grad_in(cl, e->ci), *to = grad_out_layout(pk, e->po);
        return true;
    }
    *from = pk->out[e->po], *to = cl->in[e->ci];
    return true;
}

// Edge e's group's charge for resharding `kind` between the two layouts: its index, made
// (*made) when the group had none.
static int rs_charge(builder *B, int e, int kind, const pcc_layout *from, const pcc_layout *to, bool *made) {
    int h = B->head[e];
    for (int i = B->first[h]; i >= 0; i = B->ch[i].next)
        if (B->ch[i].kind == kind && same_layout(B, &B->ch[i].from, from) && same_layout(B, &B->ch[i].to, to)) {
            *made = false;
            return i;
        }
    *made = true;
    *VEC_PUSH(B->a, B->ch, B->n_ch, B->cap_ch) = (charge){kind, B->first[h], *from, *to, -1};
    return B->first[h] = B->n_ch - 1;
}

// The seconds of edge e's reshardings with candidates pk and cl, as its value's only reader;
// a parameter's later reader its share (edge_cost).
static double rs_edge_s(builder *B, int e, const pcc_cand *pk, const pcc_cand *cl) {
    const edge *ed = &B->edges[e];
    if (ed->param) return edge_cost(B, ed, pk, cl);
    double sum = 0;
    for (int kind = RS_FWD; kind <= RS_BWD; kind++) {
        pcc_layout from, to;
        if (rs_layouts(B, ed, kind, pk, cl, &from, &to)) sum += fmax(0, reshard(B, &B->g->tensors[B->g->ops[ed->c].in[ed->ci]], &from, &to));
    }
    return sum;
}

// What a choice's resharding costs each consumer op, forward and backward, each charge once.
static void rs_comm(builder *B, const int *choice, double *fwd_s, double *bwd_s) {
    const pcc_graph *g = B->g;
    for (int e = 0; e < B->n_edges; e++) {
        const edge *ed = &B->edges[e];
        if (ed->param) continue;
        const pcc_cand *pk = &B->t->ops[ed->p].c[choice[ed->p]], *cl = &B->t->ops[ed->c].c[choice[ed->c]];
        const pcc_tensor *x = &g->tensors[g->ops[ed->c].in[ed->ci]];
        for (int kind = RS_FWD; kind <= RS_BWD; kind++) {
            pcc_layout from, to;
            bool made;
            if (!rs_layouts(B, ed, kind, pk, cl, &from, &to)) continue;
            rs_charge(B, e, kind, &from, &to, &made);
            double sec = made ? reshard(B, x, &from, &to) : 0;
            if (sec > 0) (kind == RS_FWD ? fwd_s : bwd_s)[ed->c] += ed->w * sec;
        }
    }
}

/* ---- element-wise followers ---- */

// The edge that feeds op o's first input from inside its own block, or -1.
static int feeding_edge(builder *B, int o) {
    for (int e = 0; e < B->n_edges; e++)
        if (B->edges[e].c == o && B->edges[e].ci == 0 && !B->edges[e].param && B->g->ops[B->edges[e].p].block == B->g->ops[o].block &&
            B->edges[e].w == (double)op_copies(B->g, &B->g->ops[o]))
            return e;
    return -1;
}

static double cand_local_s(const builder *B, int o, int k) {
    const pcc_op *op = &B->g->ops[o];
    const pcc_cand *c = &B->t->ops[o].c[k];
    return cand_compute_s(B, op, c) + cand_sync_s(B, op, c);
}

// Above this many columns the program has element-wise ops follow their producers (unless
// pcc_intra_opts says otherwise).
#define FOLLOW_ABOVE_COLS 50000

// Columns of the program with no followers: a choice per candidate and a pair per edge.
static double full_program_cols(const builder *B) {
    double n = 0;
    for (int o = 0; o < B->t->n_ops; o++) n += B->t->ops[o].n;
    for (int e = 0; e < B->n_edges; e++) n += (double)B->t->ops[B->edges[e].p].n * B->t->ops[B->edges[e].c].n;
    return n;
}

// The follower's candidate when its producer takes pk: the cheapest locally, among those with
// pk's recompute choice if there are any (a follower's kept activations are the leader's kind
// of memory: keeping them when the leader drops its own defeats the leader's choice).
static int follower_pick(builder *B, int e, int o, const pcc_cand *pk) {
    double best = INFINITY;
    int arg = -1;
    for (int pass = 0; pass < 2 && arg < 0; pass++)
        for (int f = 0; f < B->t->ops[o].n; f++) {
            const pcc_cand *cf = &B->t->ops[o].c[f];
            if (pass == 0 && cf->recompute != pk->recompute) continue;
            double r = edge_cost(B, &B->edges[e], pk, cf);
            if (r >= 0 && r + cand_local_s(B, o, f) < best) best = r + cand_local_s(B, o, f), arg = f;
        }
    return arg < 0 ? 0 : arg;
}

// Decides leaders and follow maps, in op order (a producer is settled before its readers).
// Without followers every op leads itself.
static void plan_followers(builder *B, bool followers) {
    const pcc_graph *g = B->g;
    int n = B->t->n_ops;
    B->leader = arena_alloc(g->arena, sizeof(int) * (size_t)(n + 1));
    B->follow = arena_alloc(g->arena, sizeof(int *) * (size_t)(n + 1));
    for (int o = 0; o < n; o++) {
        int e = followers && (pcc_ops[g->ops[o].kind].flags & PCC_OPF_ELEMENTWISE) ? feeding_edge(B, o) : -1;
        int lead = e >= 0 ? B->leader[B->edges[e].p] : o;
        int nl = B->t->ops[lead].n;
        B->leader[o] = lead;
        B->follow[o] = arena_alloc(g->arena, sizeof(int) * (size_t)nl);
        for (int k = 0; k < nl; k++) {
            if (e < 0) {
                B->follow[o][k] = k;
                continue;
            }
            B->follow[o][k] = follower_pick(B, e, o, &B->t->ops[B->edges[e].p].c[B->follow[B->edges[e].p][k]]);
        }
    }
}

// The candidate op o takes when its leader takes k.
static const pcc_cand *cand_at(const builder *B, int o, int k) { return &B->t->ops[o].c[B->follow[o][k]]; }

/* ---- the program ---- */

// A row's or column's name, only where the program is written out (--dump-ilp): a large
// program's names would cost more memory than its coefficients.
#define NAME(B, ...) ((B)->o->ilp.dump_lp ? arena_printf((B)->a, __VA_ARGS__) : NULL)

typedef struct cols {
    int *x_first; // per forward op: the column of its first candidate
} cols;

// What leader l costs (time, memory) with candidate k: its own and every follower's candidate,
// and every edge between two ops it decides.
static void leader_cost(builder *B, int l, int k, double *time, double *mem) {
    const pcc_graph *g = B->g;
    *time = *mem = 0;
    for (int o = 0; o < B->t->n_ops; o++) {
        if (B->leader[o] != l) continue;
        const pcc_cand *c = cand_at(B, o, k);
        double w = (double)op_copies(g, &g->ops[o]);
        *time += w * (cand_compute_s(B, &g->ops[o], c) + cand_sync_s(B, &g->ops[o], c));
        *mem += w * cand_memory(B, c);
    }
    for (int e = 0; e < B->n_edges; e++) {
        const edge *ed = &B->edges[e];
        if (B->leader[ed->p] != l || B->leader[ed->c] != l) continue;
        double r = edge_cost(B, ed, cand_at(B, ed->p, k), cand_at(B, ed->c, k));
        if (r >= 0) r = rs_shared(B, e) ? 0 : rs_edge_s(B, e, cand_at(B, ed->p, k), cand_at(B, ed->c, k)); // (add_shared's)
        *time += r < 0 ? 1e30 : ed->w * r; // (a follower always has a feasible candidate; guard anyway)
        *mem += edge_memory(B, ed, cand_at(B, ed->p, k), cand_at(B, ed->c, k));
    }
}

static void add_choices(builder *B, pcc_mip *P, cols *C, int mem_row) {
    C->x_first = arena_alloc(B->a, sizeof(int) * (size_t)(B->t->n_ops + 1));
    for (int i = 0; i < B->t->n_ops; i++) {
        C->x_first[i] = -1;
        if (B->leader[i] != i) continue;
        const pcc_op_cands *oc = &B->t->ops[i];
        int row = mip_add_row(P, NAME(B, "one_op%d", oc->op), PCC_MIP_EQ, 1);
        for (int k = 0; k < oc->n; k++) {
            double time, mem;
            leader_cost(B, i, k, &time, &mem);
            int col = mip_add_col(P, NAME(B, "x_op%d_%d", oc->op, k), true, 0, 1, time);
            if (k == 0) C->x_first[i] = col;
            mip_set(P, row, col, 1);
            mip_set(P, mem_row, col, mem / (1 << 30));
        }
    }
}

// An edge between two leaders: its pairs (y) and their resharding, a parameter's here, a
// value's in add_shared.
static void add_edges(builder *B, pcc_mip *P, const cols *C, int mem_row) {
    B->ycol = arena_alloc(B->a, sizeof(int *) * (size_t)(B->n_edges + 1));
    for (int e = 0; e < B->n_edges; e++) {
        const edge *ed = &B->edges[e];
        int lp = B->leader[ed->p], lc = B->leader[ed->c];
        B->ycol[e] = NULL;
        if (lp == lc) continue; // inside one leader's group: in leader_cost
        int np = B->t->ops[lp].n, nc = B->t->ops[lc].n;
        int *row_k = arena_alloc(B->a, sizeof(int) * (size_t)np), *row_l = arena_alloc(B->a, sizeof(int) * (size_t)nc);
        B->ycol[e] = arena_alloc(B->a, sizeof(int) * (size_t)np * (size_t)nc);
        for (int k = 0; k < np; k++) {
            row_k[k] = mip_add_row(P, NAME(B, "e%d_out%d", e, k), PCC_MIP_EQ, 0);
            mip_set(P, row_k[k], C->x_first[lp] + k, -1);
        }
        for (int l = 0; l < nc; l++) {
            row_l[l] = mip_add_row(P, NAME(B, "e%d_in%d", e, l), PCC_MIP_EQ, 0);
            mip_set(P, row_l[l], C->x_first[lc] + l, -1);
        }
        for (int k = 0; k < np; k++)
            for (int l = 0; l < nc; l++) {
                double s = edge_cost(B, ed, cand_at(B, ed->p, k), cand_at(B, ed->c, l));
                B->ycol[e][k * nc + l] = -1;
                if (s < 0) continue;
                double own = rs_shared(B, e) ? 0 : ed->w * rs_edge_s(B, e, cand_at(B, ed->p, k), cand_at(B, ed->c, l));
                int col = B->ycol[e][k * nc + l] = mip_add_col(P, NAME(B, "y_e%d_%d_%d", e, k, l), false, 0, 1, own);
                mip_set(P, row_k[k], col, 1);
                mip_set(P, row_l[l], col, 1);
                double m = edge_memory(B, ed, cand_at(B, ed->p, k), cand_at(B, ed->c, l));
                if (m > 0) mip_set(P, mem_row, col, m / (1 << 30));
            }
    }
}

// A value's resharding (above, shared by readers): a column per charge, costing its seconds
// times the edge's weight, and per edge and kind a row  charge >= the edge's choices that make
// it (an edge inside one leader's group: the leader's candidates).
typedef struct share_row { int id, row; } share_row;

static void add_shared_kind(builder *B, pcc_mip *P, const cols *C, int e, int kind, share_row **rr, int *cap) {
    const edge *ed = &B->edges[e];
    const pcc_tensor *x = &B->g->tensors[B->g->ops[ed->c].in[ed->ci]];
    int lp = B->leader[ed->p], lc = B->leader[ed->c], np = B->t->ops[lp].n, nc = lp == lc ? 1 : B->t->ops[lc].n, n = 0;
    for (int k = 0; k < np; k++)
        for (int l = 0; l < nc; l++) {
            int col = lp == lc ? C->x_first[lp] + k : B->ycol[e][k * nc + l], i = 0;
            pcc_layout from, to;
            bool made;
            if (col < 0 || !rs_layouts(B, ed, kind, cand_at(B, ed->p, k), cand_at(B, ed->c, lp == lc ? k : l), &from, &to))
                continue;
            double sec = reshard(B, x, &from, &to);
            if (sec <= 0) continue;
            int id = rs_charge(B, e, kind, &from, &to, &made);
            if (made) B->ch[id].col = mip_add_col(P, NAME(B, "r%d_e%d_%d", kind, B->head[e], id), false, 0, 1, ed->w * sec);
            while (i < n && (*rr)[i].id != id) i++;
            if (i == n) {
                *VEC_PUSH(B->a, *rr, n, *cap) = (share_row){id, mip_add_row(P, NAME(B, "s%d_e%d_%d", kind, e, id), PCC_MIP_GE, 0)};
                mip_set(P, (*rr)[i].row, B->ch[id].col, 1);
            }
            mip_set(P, (*rr)[i].row, col, -1);
        }
}

static void add_shared(builder *B, pcc_mip *P, const cols *C) {
    share_row *rr = NULL;
    int cap = 0;
    for (int e = 0; e < B->n_edges; e++)
        for (int kind = RS_FWD; kind <= RS_BWD && rs_shared(B, e); kind++) add_shared_kind(B, P, C, e, kind, &rr, &cap);
}

static double mem_factor(const pcc_graph *g, const pcc_intra_opts *o) {
    if (o->param_scale > 0) return o->param_scale;
    pcc_totals t;
    graph_totals(g, &t);
    return t.bytes_weights > 0 ? 1 + t.bytes_grads / t.bytes_weights + t.bytes_optim / t.bytes_weights : 1;
}

// The least memory any choice needs (each leader at its most frugal candidate).
static double min_memory(builder *B) {
    double m = 0;
    for (int l = 0; l < B->t->n_ops; l++) {
        if (B->leader[l] != l) continue;
        double best = INFINITY;
        for (int k = 0; k < B->t->ops[l].n; k++) {
            double time, mem;
            leader_cost(B, l, k, &time, &mem);
            best = fmin(best, mem);
        }
        m += best;
    }
    return m;
}

static pcc_status infeasible(builder *B) {
    if (B->o->quiet) return PCC_ERR_INFEASIBLE;
    char need[32], have[32];
    fmt_bytes(need, sizeof need, min_memory(B));
    fmt_bytes(have, sizeof have, B->o->memory_bytes);
    fprintf(stderr, "%s: %s: does not fit: on %d devices the most memory-frugal choice of splits and recompute needs "
                    "%s per device, which has %s; use more devices (or more of them per operator), ZeRO, or a smaller "
                    "micro-batch\n", pcc_progname, B->g->file, B->o->group.size, need, have);
    return PCC_ERR_INFEASIBLE;
}

static void read_choice(builder *B, const cols *C, pcc_intra *s) {
    const pcc_graph *g = B->g;
    for (int i = 0; i < B->t->n_ops; i++) {
        int l = B->leader[i], k = 0;
        while (s->ilp.x[C->x_first[l] + k] < 0.5) k++;
        s->choice[i] = B->follow[i][k];
        s->cause[i] = l == i ? "ilp" : arena_printf(g->arena, "follow:%s", g->ops[l].ptr);
        const pcc_op *op = &g->ops[i];
        const pcc_cand *c = &B->t->ops[i].c[s->choice[i]];
        double w = (double)op_copies(g, op);
        s->compute_s += w * cand_compute_s(B, op, c);
        s->sync_s += w * cand_sync_s(B, op, c);
        s->memory_bytes += w * cand_memory(B, c);
    }
    for (int e = 0; e < B->n_edges; e++) {
        const edge *ed = &B->edges[e];
        s->memory_bytes += edge_memory(B, ed, &B->t->ops[ed->p].c[s->choice[ed->p]], &B->t->ops[ed->c].c[s->choice[ed->c]]);
    }
    s->reshard_s = s->ilp.objective - s->compute_s - s->sync_s;
    s->leader = B->leader;
    s->follow = B->follow;
}

// The ILPs of this process that ended without a solution (the time limit, a solver error).
static int unsolved;

static pcc_status solve(builder *B, pcc_intra **out) {
    const pcc_graph *g = B->g;
    const pcc_transform *t = B->t;
    const pcc_intra_opts *o = B->o;
    collect_pools(B);
    collect_edges(B);
    collect_groups(B);
    plan_followers(B, full_program_cols(B) > (o->follow_above_cols > 0 ? o->follow_above_cols : FOLLOW_ABOVE_COLS));
    pcc_mip *P = mip_init(g->arena);
    int mem_row = mip_add_row(P, "memory_gib", PCC_MIP_LE, o->memory_bytes / (1 << 30));
    mip_relax_row(P, mem_row);
    cols C;
    add_choices(B, P, &C, mem_row);
    add_edges(B, P, &C, mem_row);
    add_shared(B, P, &C);
    pcc_intra *s = arena_alloc(g->arena, sizeof *s);
    s->t = t;
    s->choice = arena_alloc(g->arena, sizeof(int) * (size_t)(t->n_ops + 1));
    s->cause = arena_alloc(g->arena, sizeof(char *) * (size_t)(t->n_ops + 1));
    pcc_status st = mip_solve(P, &o->ilp, &s->ilp);
    mip_free(P);
    if (st) return st;
    if (s->ilp.status == PCC_MIP_INFEASIBLE) return infeasible(B);
    if (s->ilp.status == PCC_MIP_NO_SOLUTION || s->ilp.status == PCC_MIP_ERROR) {
        if (unsolved++ == 0) // a search meets many: the first is said, the rest counted (ilp_unsolved)
            fprintf(stderr, "%s: %s: the scheduler's ILP: %s after %.1f s (%d rows, %d columns); raise --time-limit\n",
                    pcc_progname, g->file, mip_status_name(s->ilp.status), s->ilp.seconds, s->ilp.rows, s->ilp.cols);
        return PCC_ERR_INFEASIBLE;
    }
    if (s->ilp.status == PCC_MIP_TIME_LIMIT)
        warn("%s: the scheduler stopped at its time limit with a gap of %.2f%%", g->file, 100 * s->ilp.gap);
    read_choice(B, &C, s);
    *out = s;
    return PCC_OK;
}

pcc_status ilp_intra(const pcc_graph *g, const pcc_cluster *c, const pcc_transform *t, const pcc_intra_opts *o,
                       pcc_intra **out) {
    *out = NULL;
    PCC_ASSERT(t->devices == o->group.size);
    builder B = {.a = arena_init(), .g = g, .c = c, .t = t, .o = o, .mem_factor = mem_factor(g, o),
                 .act_scale = o->act_scale > 0 ? o->act_scale : 1};
    symtab_init(&B.memo, B.a, 256);
    pcc_status st = solve(&B, out);
    arena_free(B.a);
    return st;
}

int ilp_unsolved(void) { return unsolved; }

double ilp_eval(const pcc_graph *g, const pcc_cluster *c, const pcc_transform *t, const pcc_intra_opts *o,
                  const int *choice, double *memory) {
    builder B = {.a = arena_init(), .g = g, .c = c, .t = t, .o = o, .mem_factor = mem_factor(g, o),
                 .act_scale = o->act_scale > 0 ? o->act_scale : 1};
    symtab_init(&B.memo, B.a, 256);
    collect_pools(&B);
    collect_edges(&B);
    collect_groups(&B);
    double cost = 0, mem = 0;
    for (int i = 0; i < t->n_ops; i++) {
        const pcc_op *op = &g->ops[t->ops[i].op];
        const pcc_cand *k = &t->ops[i].c[choice[i]];
        double w = (double)op_copies(g, op);
        cost += w * (cand_compute_s(&B, op, k) + cand_sync_s(&B, op, k));
        mem += w * cand_memory(&B, k);
    }
    for (int e = 0; e < B.n_edges; e++) {
        const edge *ed = &B.edges[e];
        const pcc_cand *pk = &t->ops[ed->p].c[choice[ed->p]], *cl = &t->ops[ed->c].c[choice[ed->c]];
        double s = edge_cost(&B, ed, pk, cl);
        if (s < 0) {
            arena_free(B.a);
            return -1;
        }
        cost += ed->param ? ed->w * s : 0;
        mem += edge_memory(&B, ed, pk, cl);
    }
    double *fwd = arena_alloc(B.a, sizeof(double) * (size_t)(2 * t->n_ops + 1)), *bwd = fwd + t->n_ops; // zeroed
    rs_comm(&B, choice, fwd, bwd);
    for (int i = 0; i < t->n_ops; i++) cost += fwd[i] + bwd[i];
    arena_free(B.a);
    if (memory) *memory = mem;
    return cost;
}

void ilp_op_comm(const pcc_graph *g, const pcc_cluster *c, const pcc_transform *t, const pcc_intra_opts *o,
                   const int *choice, double *fwd_s, double *bwd_s, double *sync_s) {
    builder B = {.a = arena_init(), .g = g, .c = c, .t = t, .o = o, .again = true};
    symtab_init(&B.memo, B.a, 256);
    collect_pools(&B);
    collect_edges(&B);
    for (int i = 0; i < t->n_ops; i++) {
        fwd_s[i] = bwd_s[i] = 0;
        sync_s[i] = cand_sync_s(&B, &g->ops[t->ops[i].op], &t->ops[i].c[choice[i]]) * (double)op_copies(g, &g->ops[t->ops[i].op]);
    }
    collect_groups(&B);
    rs_comm(&B, choice, fwd_s, bwd_s); // estimate.c's est_shared_params does a parameter's readers exactly
    arena_free(B.a);
}

void ilp_dump(FILE *f, const pcc_graph *g, const pcc_intra *s) {
    char mem[32];
    fprintf(f, "schedule: %d devices; ILP %d rows, %d columns, %d nonzeros: %s in %.3f s\n", s->t->devices, s->ilp.rows,
            s->ilp.cols, s->ilp.nonzeros, mip_status_name(s->ilp.status), s->ilp.seconds);
    fprintf(f, "  objective %.6g s per step (compute %.6g + gradient sync %.6g + resharding %.6g), bound %.6g, gap %.2f%%\n",
            s->ilp.objective, s->compute_s, s->sync_s, s->reshard_s, s->ilp.bound, 100 * s->ilp.gap);
    fprintf(f, "  memory per device %s\n", fmt_bytes(mem, sizeof mem, s->memory_bytes));
    for (int i = 0; i < s->t->n_ops; i++) {
        const pcc_op_cands *oc = &s->t->ops[i];
        const pcc_op *op = &g->ops[oc->op];
        const pcc_cand *c = &oc->c[s->choice[i]];
        fprintf(f, "  %-18s %-14s %-16s ", op->ptr, pcc_ops[op->kind].name, g->tensors[op->out[0]].name);
        if (c->dim >= 0) fprintf(f, "split %s=%s/%d", c->letter, g->dims[c->dim].name, c->ways);
        else fprintf(f, "replicate");
        if (c->dim2 >= 0) fprintf(f, " x %s=%s/%d", c->letter2, g->dims[c->dim2].name, c->ways2);
        fprintf(f, "%s  (%s)\n", c->recompute ? " recompute" : "", s->cause[i]);
    }
}
