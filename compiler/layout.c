/*
 * layout.c: phase 3's first half: where every value of the step lives and how it is laid out,
 * and what the step does with it. preserve.c builds the programs from these decisions.
 *
 * Stages (place). Forward tensors live on the stage that makes them; parameters on the stage of
 * their first use (which runs their optimizer; a parameter used on other stages too, a tied
 * embedding, is copied there after the optimizer); gradients where the tensor they belong to
 * is; optimizer state with its parameter; the tensors of a repeated block per copy, on that
 * copy's stage. With virtual stages the "stage" is a model chunk, chunk c on device c mod pp.
 *
 * Layouts (op_shards, layouts). Every operand of every operator gets a sharding spec over the
 * mesh (plan_shard: per axis replicated, partial sums, or a split dimension) from the strategy's
 * split letter per axis; backward operators find the letter of their forward operator's split
 * by matching the axes of the operands they share with it (the same tensor, or its gradient).
 * Each value's home (the buffer that holds it) takes its producer's layout; parameters and
 * inputs their first reader's; a block's bound tensors their other end's; sums and fills that
 * of what they stand for. A parameter's optimizer runs on its layout, or with ZeRO on a shard
 * of it over dp and cp (ZeRO-3: the parameter lives sharded too); its gradient needs
 * synchronizing where it holds partial sums or where the optimizer wants a shard (sync, and
 * layout_sync_steps the collectives: all-reduces, then one reduce-scatter onto the shard).
 *
 * What the step does with each value: kept for the backward pass (with recompute, what the
 * recomputed operators read instead of what they make); a gradient contribution made on one
 * stage and summed on another, sent once per step (deferred); a top-level tensor two chunks of
 * one device share (interleaved: it needs a slot per micro-batch); with --sync background, a
 * dense parameter trained per replica along the axes where its gradient would be all-reduced
 * (local); with ZeRO-2 and several micro-batches, or ZeRO-3 without interleaving, a gradient
 * reduce-scattered per micro-batch (zero2: FSDP's and DeepSpeed ZeRO-3's order, so that no
 * whole gradient outlives the layer after its own; preserve.c's zero2_flush). And which values cross stages, in which fixed order (layout_transfers), so that
 * both ends of every message agree.
 *
 * A backward block whose copies are on several stages and that sums a gradient over them (T5's
 * relative position bias, read by every copy) passes the partial sum over the copies already run
 * from stage to stage with the backward pass, like a carry (layout_block_regs); the stage of
 * copy 0 holds the sum (preserve.c's acc_reg).
 *
 * It refuses what phase 3 cannot make yet, with a message: ZeRO-2 with interleaving, a block
 * carrying more than 8 values (with the partial sums it passes between stages), a block summing
 * a gradient over copies on several model chunks of an interleaved pipeline, a block reading a
 * trainable parameter from outside in copies on several stages (preserve.c's share_params shares
 * only the parameters that top-level operators read; a constant, such as rotary embeddings'
 * tables, is each stage's own from the plan's initializer, never updated), an interleaved message that skips a chunk when
 * pp > 2, a background-synced parameter in a repeated block.
 */
#include "layout.h"
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

static bool shard_eq(plan_shard a, plan_shard b) { return memcmp(a.map, b.map, sizeof a.map) == 0; }

static plan_shard shard_r(void) {
    plan_shard s;
    memset(&s, 0, sizeof s);
    return s;
}

/* ---- layouts ---- */

// The shard of operand o of op under split letter l (or none) along axis a, into s.
static void shard_axis(const pcc_op *op, const pcc_letter *l, int o, int a, plan_shard *s) {
    if (!l) return;
    if (l->axis[o] >= 0) s->map[a] = (uint8_t)PLAN_SHARD_D(l->axis[o]);
    else if (o >= op->nin && l->reduce) s->map[a] = PLAN_SHARD_V;
}

// The tensor of the forward op's operands that operand tensor u of a backward op stands for:
// u itself or the tensor u is the gradient of. -1 if none.
static int fwd_operand(const pcc_graph *g, const pcc_op *f, int u) {
    for (int pass = 0; pass < 2; pass++) {
        int t = pass == 0 ? u : g->tensors[u].kind == PCC_T_GRAD ? g->tensors[u].of : -1;
        if (t < 0) continue;
        for (int o = 0; o < f->nin + f->nout; o++)
            if ((o < f->nin ? f->in[o] : f->out[o - f->nin]) == t) return o;
    }
    return -1;
}

// The backward op's letter that is its forward op's letter fl: the same axis in every operand
// the two share. NULL if none (the backward op then runs replicated along that mesh axis).
// Failing that, a letter of the same model dimension that no shared operand contradicts: an
// operand the backward op reads may stand for none of the forward op's (a bias gradient's
// reduce_sum reads the gradient that a residual add passed through unchanged), and running it
// replicated would gather that whole gradient on every rank.
static const pcc_letter *match_letter(const pcc_graph *g, const pcc_op *b, const pcc_letter *bl, int nbl,
                                      const pcc_op *f, const pcc_letter *fl) {
    const pcc_letter *same_dim = NULL;
    for (int k = 0; k < nbl; k++) {
        // an unsplittable letter only where the forward op's is one too, split by design (ring
        // attention's sequence, search.c's cp_letter)
        bool ok = !bl[k].nosplit || (fl->nosplit && strcmp(bl[k].name, fl->name) == 0), any = false;
        for (int o = 0; ok && o < b->nin + b->nout; o++) {
            int u = o < b->nin ? b->in[o] : b->out[o - b->nin];
            int fo = fwd_operand(g, f, u);
            if (fo < 0) continue;
            if (bl[k].axis[o] != fl->axis[fo]) ok = false;
            any |= fl->axis[fo] >= 0;
        }
        if (ok && any) return &bl[k];
        if (ok && !same_dim && bl[k].dim == fl->dim) same_dim = &bl[k];
    }
    return same_dim;
}

static void op_shards(pcc_values *E, int o) {
    const pcc_graph *g = E->g;
    const pcc_op *op = &g->ops[o];
    int n = op->nin + op->nout;
    E->sh[o] = arena_alloc(g->arena, sizeof(plan_shard) * (size_t)(n + 1));
    int f = op->phase == PCC_PHASE_FWD ? o : op->fwd;
    if (f < 0 || op->phase == PCC_PHASE_OPT) return; // decided later, from the tensors
    pcc_letter fl[PCC_MAX_LETTERS], bl[PCC_MAX_LETTERS];
    int nfl = op_letters(g, &g->ops[f], fl), nbl = f == o ? nfl : op_letters(g, op, bl);
    bool il = E->s->interlaced && op->block < 0 && E->s->interlaced[f]; // split over pp too
    for (int a = il ? PCC_AX_PP : PCC_AX_DP; a < PCC_AXES; a++) {
        int li = E->s->letter[a][f];
        if (li < 0) continue;
        PCC_ASSERT(li < nfl);
        const pcc_letter *l = f == o ? &fl[li] : match_letter(g, op, bl, nbl, &g->ops[f], &fl[li]);
        for (int k = 0; k < n; k++) shard_axis(op, l, k, a, &E->sh[o][k]);
    }
}

// The dimension of tensor t that ZeRO cuts `ways` ways: the first that no split uses (split[i]
// the ways dimension i is already cut, 1: whole) and `ways` divides; -1 if none. The estimate
// asks the same (estimate.c's est_zero_ways).
int layout_zero_dim(const pcc_graph *g, int t, const int *split, int64_t ways) {
    const pcc_tensor *T = &g->tensors[t];
    for (int i = 0; ways > 1 && i < T->rank; i++)
        if (split[i] == 1 && g->dims[T->dims[i]].size % ways == 0) return i;
    return -1;
}

// ZeRO's shard of parameter t, whose layout is s: the axes (bits) it is cut over, dp and cp where
// s is whole on them (Megatron-Core's distributed optimizer shards over dp x cp, whose ranks hold
// the same parameters), else dp alone; and the dimension they cut (layout_zero_dim). Returns the
// dimension, -1 (and *axes 0) if none.
static int zero_shard(const pcc_values *E, int t, plan_shard s, unsigned *axes) {
    int split[PCC_MAX_RANK];
    for (int i = 0; i < PCC_MAX_RANK; i++) split[i] = 1;
    for (int a = 0; a < PCC_AXES; a++)
        if (s.map[a] >= PLAN_SHARD_D(0) && s.map[a] < PLAN_SHARD_D(PCC_MAX_RANK)) split[s.map[a] - PLAN_SHARD_D(0)] = 2;
    unsigned dp = E->dp > 1 && s.map[PCC_AX_DP] == PLAN_SHARD_R ? 1u << PCC_AX_DP : 0;
    unsigned cp = E->cp > 1 && s.map[PCC_AX_CP] == PLAN_SHARD_R ? 1u << PCC_AX_CP : 0;
    unsigned opt[2] = {dp | cp, dp};
    for (int k = 0; k < 2; k++) {
        int64_t ways = (opt[k] & dp ? E->dp : 1) * (opt[k] & cp ? E->cp : 1);
        int i = layout_zero_dim(E->g, t, split, ways);
        if (i >= 0) return *axes = opt[k], i;
    }
    *axes = 0;
    return -1;
}

/* ---- stages ---- */

int layout_copy_stage(const pcc_values *E, int b, int copy) { return E->s->copy_stage[graph_block_family(E->g, b)][copy]; }

int layout_block_regs(const pcc_block *bl) { return bl->n_carry + (bl->fwd >= 0 ? bl->n_acc : 0); }

// The stage of an op that is not in a block.
static int top_stage(const pcc_values *E, int o) {
    const pcc_graph *g = E->g;
    const pcc_op *op = &g->ops[o];
    int f = op->phase == PCC_PHASE_FWD ? o : op->fwd;
    if (f >= 0) return E->s->interlaced && E->s->interlaced[f] ? PCC_STAGE_ALL : E->s->op_stage[f];
    int t = op->phase == PCC_PHASE_OPT ? op->in[0] : op->out[0];
    if (op->phase == PCC_PHASE_BWD && g->tensors[t].of >= 0) t = g->tensors[t].of;
    return E->tstage[t] >= 0 || E->tstage[t] == PCC_STAGE_ALL ? E->tstage[t] : 0;
}

// Stages: forward tensors where they are made; parameters where first used; gradients where
// the tensor they belong to is; optimizer state with its parameter.
static void place(pcc_values *E) {
    const pcc_graph *g = E->g;
    E->tstage = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    E->ostage = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_ops + 1));
    for (int t = 0; t < g->n_tensors; t++) E->tstage[t] = -1;
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        int st = op->block < 0 ? top_stage(E, o) : -2;
        for (int i = 0; i < op->nin; i++) {
            int t = op->in[i];
            if (g->tensors[t].kind == PCC_T_PARAM && E->tstage[t] == -1) E->tstage[t] = op->block < 0 ? st : -2;
        }
        for (int i = 0; i < op->nout; i++) E->tstage[op->out[i]] = st;
    }
    // Block tensors are per copy (-2); the outer ends of a block's bindings are where its
    // first or last copy runs.
    for (int b = 0; b < g->n_blocks; b++) {
        const pcc_block *bl = &g->blocks[b];
        int fb = graph_block_family(g, b), R = (int)bl->repeat;
        int last = bl->fwd < 0 ? E->s->copy_stage[fb][R - 1] : E->s->copy_stage[fb][0];
        for (int i = 0; i < bl->n_out; i++) E->tstage[bl->out[i].outer] = last;
        for (int i = 0; i < bl->n_acc; i++) E->tstage[bl->acc[i].outer] = last;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        const pcc_tensor *T = &g->tensors[t];
        if (T->block >= 0) E->tstage[t] = -2;
    }
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        E->ostage[o] = op->block >= 0 ? -2 : top_stage(E, o);
        if (op->block < 0 && op->phase != PCC_PHASE_FWD)
            for (int i = 0; i < op->nout; i++) E->tstage[op->out[i]] = E->ostage[o];
        if (op->phase == PCC_PHASE_OPT)
            for (int i = 2; i < op->nin; i++) E->tstage[op->in[i]] = E->tstage[op->in[0]];
    }
}

// Tensors the backward pass reads (with recompute: what the recomputed ops read instead of
// what they make).
static void keep(pcc_values *E) {
    const pcc_graph *g = E->g;
    E->kept = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_tensors + 1));
    E->recomp = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_ops + 1));
    for (int o = 0; o < g->n_fwd_ops; o++) E->recomp[o] = E->s->recompute[o];
    for (int o = g->n_fwd_ops; o < g->n_ops; o++)
        if (g->ops[o].phase == PCC_PHASE_BWD)
            for (int i = 0; i < g->ops[o].nin; i++) E->kept[g->ops[o].in[i]] = true;
    for (int o = g->n_fwd_ops - 1; o >= 0; o--) {
        const pcc_op *op = &g->ops[o];
        if (!E->recomp[o]) continue;
        bool needed = false;
        for (int i = 0; i < op->nout; i++) needed |= E->kept[op->out[i]];
        if (!needed) continue;
        for (int i = 0; i < op->nin; i++) E->kept[op->in[i]] = true;
    }
    for (int o = 0; o < g->n_fwd_ops; o++)
        if (E->recomp[o])
            for (int i = 0; i < g->ops[o].nout; i++) E->kept[g->ops[o].out[i]] = false;
    // A block's input that every copy reads (not carried) lives in its outer tensor's buffer:
    // when the backward reads it (an attention bias computed before the block), keep that one.
    for (int b = 0; b < g->n_blocks; b++)
        for (int i = 0; g->blocks[b].fwd < 0 && i < g->blocks[b].n_in; i++) {
            const pcc_bind *bi = &g->blocks[b].in[i];
            if (E->kept[bi->inner] && graph_carry_of(&g->blocks[b], bi->inner, true) < 0) E->kept[bi->outer] = true;
        }
    for (int t = 0; t < g->n_tensors; t++) {
        pcc_tensor_kind k = g->tensors[t].kind;
        if (k != PCC_T_ACT && k != PCC_T_INPUT) E->kept[t] = false;
    }
}

// Interleaved: the top-level tensors that one chunk of a device writes and another chunk of the
// same device reads (a skip connection over a chunk boundary: resnet's identity, forward, and
// its gradient contribution, backward). No message carries them, and between the two chunks'
// units of micro-batch m the device runs other micro-batches of the first chunk, so such a
// tensor keeps a slot per micro-batch (home() gives it M; kept activations already get theirs).
static void cross_chunk(pcc_values *E) {
    const pcc_graph *g = E->g;
    E->xchunk = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_tensors + 1));
    if (E->V == 1) return;
    int *writer = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    for (int t = 0; t < g->n_tensors; t++) writer[t] = -1;
    for (int o = 0; o < g->n_ops; o++)
        if (g->ops[o].block < 0 && g->ops[o].phase != PCC_PHASE_OPT)
            for (int i = 0; i < g->ops[o].nout; i++) writer[g->ops[o].out[i]] = E->ostage[o];
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->block >= 0 || op->phase == PCC_PHASE_OPT) continue;
        for (int i = 0; i < op->nin; i++) {
            int t = op->in[i], w = writer[t], r = E->ostage[o];
            if (w < 0 || r < 0 || g->tensors[t].block >= 0 || g->tensors[t].kind == PCC_T_PARAM) continue;
            if (w != r && w % E->pp == r % E->pp) E->xchunk[t] = true;
        }
    }
}

// Gradient contributions to a parameter made on one stage and summed on another, where that is
// safe to do once per step (graph_grad_deferrable): its sums on other stages add zeros until it
// arrives.
static void defer(pcc_values *E) {
    const pcc_graph *g = E->g;
    E->deferred = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_tensors + 1));
    for (int t = 0; t < g->n_tensors; t++) {
        if (E->tstage[t] < 0 || !graph_grad_deferrable(g, t)) continue;
        bool apart = true;
        for (int o = 0; o < g->n_ops; o++)
            for (int i = 0; i < g->ops[o].nin; i++) apart &= g->ops[o].in[i] != t || E->ostage[o] != E->tstage[t];
        E->deferred[t] = apart;
    }
}

/* ---- the layout of every value ---- */

// Values made by letter-split ops hold their producer's layout; params and inputs their first
// reader's. set[t]: an operator's split decided t's layout.
static void layouts_split(pcc_values *E, bool *set) {
    const pcc_graph *g = E->g;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase == PCC_PHASE_OPT || (op->phase == PCC_PHASE_BWD && op->fwd < 0)) continue;
        for (int i = 0; i < op->nout; i++) E->home_sh[op->out[i]] = E->sh[o][op->nin + i], set[op->out[i]] = true;
        for (int i = 0; i < op->nin; i++) {
            int t = op->in[i];
            pcc_tensor_kind k = g->tensors[t].kind;
            if (!set[t] && (k == PCC_T_PARAM || k == PCC_T_INPUT)) E->home_sh[t] = E->sh[o][i], set[t] = true;
        }
    }
}

// Block bindings: a carried input holds what its source does; an outer end what its inner does.
static void layouts_bound(pcc_values *E, const bool *set) {
    const pcc_graph *g = E->g;
    for (int b = 0; b < g->n_blocks; b++) {
        const pcc_block *bl = &g->blocks[b];
        for (int i = 0; i < bl->n_in; i++)
            if (!set[bl->in[i].inner]) E->home_sh[bl->in[i].inner] = E->home_sh[bl->in[i].outer];
        for (int i = 0; i < bl->n_carry; i++) E->home_sh[bl->carry[i].inner] = E->home_sh[bl->carry[i].outer];
        for (int i = 0; i < bl->n_out; i++) E->home_sh[bl->out[i].outer] = E->home_sh[bl->out[i].inner];
        for (int i = 0; i < bl->n_acc; i++) E->home_sh[bl->acc[i].outer] = E->home_sh[bl->acc[i].inner];
    }
}

// Ops without a forward op, in program order: fills take the layout of what they stand for (a
// scalar loss seed: replicated), sums that of their first input whose layout an operator's split
// decided (else their first input's). Not simply the first input's: in a backward block the sum
// that feeds the carry often has the carried gradient first, whose layout comes from that very
// sum, and "replicated" would be its own fixed point (the gradient of the residual stream
// gathered whole on every rank, layer after layer).
static void layouts_sums(pcc_values *E, const bool *set) {
    const pcc_graph *g = E->g;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase != PCC_PHASE_BWD || op->fwd >= 0) continue;
        plan_shard s = shard_r();
        if (op->kind == PCC_OP_FILL) {
            int of = g->tensors[op->out[0]].of;
            if (of >= 0 && g->tensors[op->out[0]].rank > 0) s = E->home_sh[of];
            for (int a = 0; a < PCC_AXES; a++) // a fill of partial sums would count its value per rank
                if (s.map[a] == PLAN_SHARD_V) s.map[a] = PLAN_SHARD_R;
        } else {
            int src = op->in[0];
            for (int i = op->nin - 1; i >= 0; i--)
                if (set[op->in[i]]) src = op->in[i];
            s = E->home_sh[src];
        }
        for (int i = 0; i < op->nin + op->nout; i++) E->sh[o][i] = s;
        for (int i = 0; i < op->nout; i++) E->home_sh[op->out[i]] = s;
    }
}

// The axes (bits) over which a gradient made in layout made (partial sums on some axes) is
// reduce-scattered onto the optimizer's layout want: for each dimension, the axes where made sums
// and want splits it, if made's splits of the dimension and then these axes, in mesh order, are
// the first of want's, so that each rank's piece of the sum is its piece of want's or holds it
// (the rest of the sums are all-reduced, and phase 3 slices what the optimizer wants). One
// reduce-scatter per dimension, over all of its axes at once (layout_sync_steps).
static unsigned sync_scatter_axes(plan_shard made, plan_shard want) {
    unsigned all = 0;
    for (int d = PLAN_SHARD_D(0); d < PLAN_SHARD_D(PCC_MAX_RANK); d++) {
        int w[PCC_AXES], nw = 0, k = 0;
        unsigned axes = 0;
        bool ok = true;
        for (int b = 0; b < PCC_AXES; b++)
            if (want.map[b] == d) w[nw++] = b;
        for (int b = 0; b < PCC_AXES && ok; b++)
            if (made.map[b] == d) ok = k < nw && w[k++] == b;
        for (int b = 0; b < PCC_AXES && ok; b++)
            if (made.map[b] == PLAN_SHARD_V && want.map[b] == d) ok = k < nw && w[k++] == b, axes |= 1u << b;
        if (ok) all |= axes;
    }
    return all;
}

// Parameters: their gradients are synchronized over the axes where they hold partial sums; the
// optimizer runs on the parameter's layout, or with ZeRO on a dp shard of it.
static void layouts_params(pcc_values *E) {
    const pcc_graph *g = E->g;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase != PCC_PHASE_OPT) continue;
        int p = op->in[0], gp = op->in[1];
        plan_shard ps = E->home_sh[p], os = ps;
        unsigned za = 0;
        int d = E->s->zero > 0 ? zero_shard(E, p, ps, &za) : -1;
        for (int a = 0; a < PCC_AXES; a++)
            if (za >> a & 1u) os.map[a] = (uint8_t)PLAN_SHARD_D(d);
        E->opt_sh[p] = os;
        if (E->s->zero == 3) E->home_sh[p] = os;
        plan_shard gs = E->home_sh[gp];
        for (int a = 0; a < PCC_AXES; a++)
            if (gs.map[a] == PLAN_SHARD_V) E->sync[gp] = true;
        if (!shard_eq(os, ps)) E->sync[gp] = true;
        // Synchronized in place (all-reduce) where the optimizer wants the whole sum: the
        // buffer's layout is the one after it. (Where it wants a shard: a reduce-scatter, and
        // the buffer keeps its partial sums on those axes.)
        unsigned rs = sync_scatter_axes(gs, os);
        for (int a = 0; a < PCC_AXES; a++)
            if (gs.map[a] == PLAN_SHARD_V && !(rs >> a & 1u)) gs.map[a] = PLAN_SHARD_R;
        E->home_sh[gp] = gs;
        for (int i = 0; i < op->nin; i++) E->sh[o][i] = os;
        for (int i = 2; i < op->nin; i++) E->home_sh[op->in[i]] = os;
    }
}

static void layouts(pcc_values *E) {
    const pcc_graph *g = E->g;
    E->sh = arena_alloc(g->arena, sizeof(plan_shard *) * (size_t)(g->n_ops + 1));
    E->home_sh = arena_alloc(g->arena, sizeof(plan_shard) * (size_t)(g->n_tensors + 1));
    E->opt_sh = arena_alloc(g->arena, sizeof(plan_shard) * (size_t)(g->n_tensors + 1));
    E->sync = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_tensors + 1));
    bool *set = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_tensors + 1));
    for (int o = 0; o < g->n_ops; o++) op_shards(E, o);
    layouts_split(E, set);
    for (int pass = 0; pass < 2; pass++) {
        layouts_bound(E, set);
        layouts_sums(E, set);
    }
    layouts_params(E);
}

/* ---- --sync background ---- */

// The axes a parameter's gradient gp holds partial sums on as its producer leaves it.
plan_shard layout_grad_made(const pcc_values *E, int gp) {
    const pcc_graph *g = E->g;
    const pcc_op *prod = &g->ops[g->tensors[gp].producer];
    int oi = 0;
    while (prod->out[oi] != gp) oi++;
    return E->sh[g->tensors[gp].producer][prod->nin + oi];
}

// Which parameter gradients stay local to their replica, and along which axes (E->local): with
// --sync background, a dense parameter (not an embedding table) is a replica along dp and tp
// where the optimizer holds it whole (R) and its gradient is summed there (V). With a single dp
// rank every other dense parameter counts as a replica along dp (one trainer: its replica is
// synchronized all the same, a round over one rank). Refuses such a parameter inside a repeated
// block (bgsync.c has no layer loops).
static pcc_status background_params(pcc_values *E) {
    const pcc_graph *g = E->g;
    E->local = arena_alloc(g->arena, sizeof(uint8_t) * (size_t)(g->n_tensors + 1));
    if (!E->bg) return PCC_OK;
    for (int t = 0; t < g->n_tensors; t++) {
        const pcc_tensor *T = &g->tensors[t];
        if (T->kind != PCC_T_PARAM || T->grad < 0 || graph_is_table(g, t)) continue;
        plan_shard made = layout_grad_made(E, T->grad);
        uint8_t axes = 0;
        for (int a = PCC_AX_DP; a <= PCC_AX_TP; a++)
            if (E->sync[T->grad] && made.map[a] == PLAN_SHARD_V && E->opt_sh[t].map[a] == PLAN_SHARD_R) axes |= (uint8_t)(1u << a);
        if (!axes && E->dp == 1) axes = 1u << PCC_AX_DP;
        if (!axes) continue;
        if (T->block >= 0) {
            if (!pcc_trial) fprintf(stderr, "%s: %s: --sync background: parameter \"%s\" is in repeated block; plancc synchronizes only "
                            "parameters outside repeated blocks in the background (use --sync allreduce)\n",
                    pcc_progname, g->file, T->name);
            return PCC_ERR_INPUT;
        }
        E->local[T->grad] = axes;
    }
    return PCC_OK;
}

// The collectives that synchronize gradient gp, from the layout its producer leaves to the one
// its optimizer wants, from the last axis down: where it sums and the optimizer wants the whole
// sum, an all-reduce in place over the axis (over dp and cp at once where both); where it keeps
// its partial sums (layouts_params: sync_scatter_axes), a reduce-scatter onto the optimizer's
// shard over all the axes that split the same dimension (ZeRO's dp x cp), at the last of them.
int layout_sync_steps(const pcc_values *E, int gp, pcc_reshard_step *step) {
    const pcc_graph *g = E->g;
    const pcc_op *prod = &g->ops[g->tensors[gp].producer];
    int oi = 0;
    while (prod->out[oi] != gp) oi++;
    plan_shard made = E->sh[g->tensors[gp].producer][prod->nin + oi], want = E->opt_sh[g->tensors[gp].of];
    plan_shard cur = E->home_sh[gp];
    int n = 0;
    // dp and cp both summed whole: one all-reduce over the two (Megatron-Core's data-parallel
    // group with context parallelism), at cp; so the two axes of a 2-D tp group, at tp2.
    unsigned joint = 0; // the slower axis of each such pair
    static const int pair[2][2] = {{PCC_AX_DP, PCC_AX_CP}, {PCC_AX_TP, PCC_AX_TQ}};
    for (int k = 0; k < 2; k++)
        if (made.map[pair[k][0]] == PLAN_SHARD_V && made.map[pair[k][1]] == PLAN_SHARD_V &&
            cur.map[pair[k][0]] == PLAN_SHARD_R && cur.map[pair[k][1]] == PLAN_SHARD_R)
            joint |= 1u << pair[k][0];
    for (int a = PCC_AXES - 1; a >= 0; a--) {
        if (made.map[a] != PLAN_SHARD_V || (joint >> a & 1u)) continue;
        if (cur.map[a] != PLAN_SHARD_V) {
            unsigned axes = 1u << a | (a == PCC_AX_CP || a == PCC_AX_TQ ? joint & 1u << (a - 1) : 0);
            if (cur.map[a] == PLAN_SHARD_R) step[n++] = (pcc_reshard_step){PCC_COLL_ALL_REDUCE, axes, cur};
            continue; // a reduce-scatter's axis, done with the dimension's last
        }
        unsigned axes = 0;
        for (int b = 0; b < PCC_AXES; b++)
            if (cur.map[b] == PLAN_SHARD_V && want.map[b] == want.map[a]) axes |= 1u << b;
        for (int b = 0; b < PCC_AXES; b++)
            if (axes >> b & 1u) cur.map[b] = want.map[b];
        step[n++] = (pcc_reshard_step){PCC_COLL_REDUCE_SCATTER, axes, cur};
    }
    return n;
}

/* ---- ZeRO-2 ---- */

bool layout_zero_per_micro_batch(const pcc_strategy *s) {
    int v = s->virtual_stages > 1 ? s->virtual_stages : 1, zw = s->mesh[PCC_AX_DP] * (s->mesh[PCC_AX_CP] > 1 ? s->mesh[PCC_AX_CP] : 1);
    return zw > 1 && ((s->zero == 2 && s->micro_batches > 1) || (s->zero == 3 && v == 1));
}

static bool reads_deferred(const pcc_values *E, const pcc_op *op) {
    for (int i = 0; i < op->nin; i++)
        if (E->deferred[op->in[i]]) return true;
    return false;
}

// Gradients that ZeRO-2 (with several micro-batches) and ZeRO-3 (without interleaving)
// reduce-scatter per micro-batch: final gradients of parameters whose optimizer runs on a dp
// shard, made by an operator (not a block's sum over its copies, not a sum with a contribution
// from another stage) every final parameter gradient of which qualifies too (the operator stops
// accumulating over micro-batches). ZeRO-3 does so even with one micro-batch: a block's whole
// gradients would otherwise take a slot per copy until the step's buckets, as much memory as
// the whole model's gradients, which ZeRO-3 exists to avoid.
static void zero2_grads(pcc_values *E) {
    const pcc_graph *g = E->g;
    E->zero2 = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_tensors + 1));
    if (!layout_zero_per_micro_batch(E->s)) return;
    for (int t = 0; t < g->n_tensors; t++) {
        if (!graph_is_final_param_grad(g, t) || !E->sync[t] || E->deferred[t] || g->tensors[t].producer < 0) continue;
        if (reads_deferred(E, &g->ops[g->tensors[t].producer])) continue;
        pcc_reshard_step step[PCC_AXES];
        int n = layout_sync_steps(E, t, step);
        for (int k = 0; k < n; k++) E->zero2[t] |= step[k].kind == PCC_COLL_REDUCE_SCATTER;
    }
    for (int b = 0; b < g->n_blocks; b++)
        for (int i = 0; i < g->blocks[b].n_acc; i++) E->zero2[g->blocks[b].acc[i].outer] = false;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        bool all = true;
        for (int i = 0; i < op->nout; i++)
            if (graph_is_final_param_grad(g, op->out[i]) && E->sync[op->out[i]] && !E->zero2[op->out[i]]) all = false;
        for (int i = 0; !all && i < op->nout; i++) E->zero2[op->out[i]] = false;
    }
}

/* ---- stage boundaries ---- */

static int xfer_cmp(const void *a, const void *b) {
    const pcc_xfer *x = a, *y = b;
    if (x->peer != y->peer) return x->peer - y->peer;
    return x->key - y->key;
}

// Adds a transfer once (a relay if any of its routes passes it on).
static void xfer_add(const pcc_graph *g, pcc_xfer **v, int *n, int *cap, pcc_xfer x) {
    for (int j = 0; j < *n; j++)
        if ((*v)[j].key == x.key && (*v)[j].peer == x.peer) {
            (*v)[j].relay |= x.relay;
            return;
        }
    *VEC_PUSH(g->arena, *v, *n, *cap) = x;
}

// Plain 1F1B: a backward message between stages that are not neighbours (a gradient of a value
// that a later stage read: T5's position bias, made on stage 0 and read by a decoder on stage 2;
// a tied embedding's contribution that is summed per micro-batch) goes from neighbour to
// neighbour, each stage between passing it on in its own backward pass of that micro-batch. Sent
// straight, it deadlocks with blocking sends: the receiver, still in its warm-up, sends forward
// passes that the sender takes only after its backward sends are taken. Hops between neighbours
// keep to the order of the pipeline's own messages. With interlaced operators between the passes
// (il_mid) forward messages go so too: the sender's warm-up is longer than the receiver's by more
// than one forward pass, and every stage meets the interlaced phase of each micro-batch between
// the same messages with its neighbours only (pipeline.c's mid).
static bool relayed(const pcc_values *E, int key, bool bwd, int from, int to) {
    bool dfr = key < E->g->n_tensors && E->deferred[key];
    return (bwd || E->il_mid) && E->V == 1 && E->s->schedule != PCC_PIPE_GPIPE && abs(from - to) > 1 && !dfr;
}

// Adds to `stage`'s sends (send) or receives the message of `key` from stage `from` to `to`, or
// its hops (relayed).
static void xfer_route(const pcc_values *E, pcc_xfer **v, int *n, int *cap, int stage, bool send, bool bwd, int key, int from,
                       int to) {
    if (!relayed(E, key, bwd, from, to)) {
        if (send ? from == stage : to == stage) xfer_add(E->g, v, n, cap, (pcc_xfer){key, send ? to : from, false});
        return;
    }
    int step = to > from ? 1 : -1;
    for (int a = from; a != to; a += step) {
        if (send && a == stage) xfer_add(E->g, v, n, cap, (pcc_xfer){key, a + step, a != from});
        if (!send && a + step == stage) xfer_add(E->g, v, n, cap, (pcc_xfer){key, a, a + step != to});
    }
}

// What stage `stage` sends (send) or receives in the forward (bwd false) or backward phase:
// values read on one stage and held on another, in a fixed order (by peer, then key); deferred
// gradient contributions in the last micro-batch's backward only; with 1F1B, backward messages
// between stages that are not neighbours relayed by the stages between (relayed).
int layout_transfers(const pcc_values *E, int stage, bool bwd, bool send, bool last_mb, pcc_xfer **out) {
    const pcc_graph *g = E->g;
    pcc_xfer *v = NULL;
    int n = 0, cap = 0;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->block >= 0 || op->phase == PCC_PHASE_OPT || (op->phase == PCC_PHASE_BWD) != bwd) continue;
        int rs = E->ostage[o];
        if (rs == PCC_STAGE_ALL) continue; // interlaced: the stage that holds what it reads sends it to every other (preserve.c)
        for (int i = 0; i < op->nin; i++) {
            int t = op->in[i], hs = E->tstage[t];
            pcc_tensor_kind k = g->tensors[t].kind;
            if (hs < 0 || hs == rs || k == PCC_T_INPUT || k == PCC_T_PARAM || k == PCC_T_STATE) continue;
            if (bwd && k == PCC_T_ACT) continue; // received in the forward phase, and kept
            if (E->deferred[t] && !last_mb) continue; // once, after the last micro-batch
            xfer_route(E, &v, &n, &cap, stage, send, bwd, t, hs, rs);
        }
    }
    // Blocks: outer inputs read by copies on other stages, and carries between stages.
    for (int b = 0; b < g->n_blocks; b++) {
        const pcc_block *bl = &g->blocks[b];
        if ((bl->fwd >= 0) != bwd || g->blocks[b].n_ops == 0) continue;
        if (bl->fwd >= 0 && g->ops[bl->first_op].phase == PCC_PHASE_OPT) continue;
        int fb = graph_block_family(g, b);
        for (int s = 0; s < E->ns; s++) {
            if (E->copy_hi[fb][s] <= E->copy_lo[fb][s]) continue;
            bool first = bwd ? E->copy_hi[fb][s] == (int)bl->repeat : E->copy_lo[fb][s] == 0;
            for (int i = 0; i < bl->n_in; i++) {
                int t = bl->in[i].outer, hs = E->tstage[t];
                if (graph_carry_of(bl, bl->in[i].inner, true) >= 0 && !first) continue;
                if (hs < 0 || hs == s || g->tensors[t].kind == PCC_T_PARAM || g->tensors[t].kind == PCC_T_INPUT) continue;
                if (bwd && g->tensors[t].kind == PCC_T_ACT) continue; // as above
                xfer_route(E, &v, &n, &cap, stage, send, bwd, t, hs, s);
            }
            // The carry from the copy before (forward) or after (backward), on another stage; and
            // backward, the partial sums over the copies after (layout_block_regs).
            int prev = bwd ? E->copy_hi[fb][s] : E->copy_lo[fb][s] - 1, nr = layout_block_regs(bl);
            if (nr > 0 && prev >= 0 && prev < (int)bl->repeat) {
                int ps = layout_copy_stage(E, b, prev);
                if (ps != s && (send ? ps == stage : s == stage))
                    for (int k = 0; k < nr; k++) xfer_add(g, &v, &n, &cap, (pcc_xfer){g->n_tensors + b * 8 + k, send ? s : ps, false});
            }
        }
    }
    if (n > 0) qsort(v, (size_t)n, sizeof *v, xfer_cmp);
    *out = v;
    return n;
}

// Interleaved with pp > 2: whether every message between devices goes from one chunk to the next
// (forward) or the one before (backward); else a message saying which does not, and false.
// The interleaved schedule (pipeline.c) pairs step k of device d with step k - 1 of device d + 1
// (the warm-ups differ by 2 units), and the wrap-around from device pp-1 to 0 with step
// k + pp - 1: every message between chunks c and c + 1 lies in groups that run at the same step
// of that wave front, so blocking sends cannot deadlock. A message that skips a chunk
// (gpt-tiny's token embedding on chunk 0 read by chunk 2) pairs groups of different steps and
// deadlocks; with pp 2 it happens to land on the same device or in matching groups, which the
// equivalence suite runs. Deferred gradient sums are exempt: each device sends them in a group
// of its own after its last step, when every message it owes the others has been taken.
static bool interleaved_adjacent(const pcc_values *E) {
    const pcc_graph *g = E->g;
    for (int s = 0; s < E->ns; s++)
        for (int bwd = 0; bwd < 2; bwd++) {
            pcc_xfer *x;
            int n = layout_transfers(E, s, bwd, false, true, &x);
            for (int i = 0; i < n; i++) {
                int from = x[i].peer;
                bool dfr = x[i].key < g->n_tensors && E->deferred[x[i].key];
                if (dfr || from % E->pp == s % E->pp || from == (bwd ? s + 1 : s - 1)) continue;
                const char *what = x[i].key < g->n_tensors ? g->tensors[x[i].key].name : "a block's carry";
                if (!pcc_trial) fprintf(stderr, "%s: %s: --virtual-stages with --pp %d: chunk %d receives \"%s\" from chunk %d; plancc's "
                                "interleaved 1F1B sends only between consecutive chunks when pp > 2 (use --pp 2, other "
                                "--virtual-stages, or no interleaving)\n", pcc_progname, g->file, E->pp, s, what, from);
                return false;
            }
        }
    return true;
}

/* ---- the decisions ---- */

// Per forward block and stage (model chunk): the copies it runs, [copy_lo, copy_hi).
static void copy_ranges(pcc_values *E) {
    const pcc_graph *g = E->g;
    E->copy_lo = arena_alloc(g->arena, sizeof(int *) * (size_t)(g->n_blocks + 1));
    E->copy_hi = arena_alloc(g->arena, sizeof(int *) * (size_t)(g->n_blocks + 1));
    for (int b = 0; b < g->n_blocks; b++) {
        if (g->blocks[b].fwd >= 0) continue;
        E->copy_lo[b] = arena_alloc(g->arena, sizeof(int) * (size_t)E->ns);
        E->copy_hi[b] = arena_alloc(g->arena, sizeof(int) * (size_t)E->ns);
        for (int st = 0; st < E->ns; st++) E->copy_lo[b][st] = E->copy_hi[b][st] = 0;
        for (int k = (int)g->blocks[b].repeat - 1; k >= 0; k--) E->copy_lo[b][E->s->copy_stage[b][k]] = k;
        for (int k = 0; k < (int)g->blocks[b].repeat; k++) E->copy_hi[b][E->s->copy_stage[b][k]] = k + 1;
    }
}

// The blocks this phase cannot make programs of (yet): refused with a message.
static pcc_status block_limits(const pcc_values *E) {
    const pcc_graph *g = E->g;
    for (int b = 0; b < g->n_blocks; b++) {
        const pcc_block *bl = &g->blocks[b];
        int fb = graph_block_family(g, b), spans = 0;
        for (int st = 0; st < E->ns; st++) spans += E->copy_hi[fb][st] > E->copy_lo[fb][st];
        int nr = spans > 1 ? layout_block_regs(bl) : bl->n_carry;
        if (nr > 8) {
            if (!pcc_trial) fprintf(stderr, "%s: %s: block \"%s\" carries %d values from copy to copy%s; plancc supports 8\n", pcc_progname,
                    g->file, bl->name, nr, nr > bl->n_carry ? " (with the gradients it sums over its copies, across stages)" : "");
            return PCC_ERR_INPUT;
        }
        for (int i = 0; bl->fwd < 0 && spans > 1 && i < bl->n_in; i++) {
            const pcc_tensor *T = &g->tensors[bl->in[i].outer];
            if (T->kind != PCC_T_PARAM || T->frozen || graph_carry_of(bl, bl->in[i].inner, true) >= 0) continue;
            if (!pcc_trial) fprintf(stderr, "%s: %s: block \"%s\" reads parameter \"%s\" in every copy, and its copies are on %d "
                            "pipeline stages; plancc shares a parameter between stages only where operators outside repeated "
                            "blocks read it (use fewer stages)\n", pcc_progname, g->file, bl->name, T->name, spans);
            return PCC_ERR_INPUT;
        }
        if (bl->n_acc > 0 && spans > 1 && E->V > 1) {
            if (!pcc_trial) fprintf(stderr, "%s: %s: --virtual-stages: block \"%s\" sums a gradient over its copies, and its copies are "
                            "on %d model chunks; plancc sums such a gradient across stages only in plain pipelines (use no "
                            "interleaving)\n",
                    pcc_progname, g->file, bl->name, spans);
            return PCC_ERR_INPUT;
        }
    }
    return PCC_OK;
}

/* ---- interlaced operators ---- */

// An interlaced operator (a policy's "stage": "all", nnScaler's interlaced pipeline for a large
// vocabulary's embedding and LM head) runs on every stage, split over pp x tp, in one of three
// phases around the pipeline's passes: before the forward passes (what reads only the step's inputs and
// parameters: the token embedding), between the forward and backward passes (what reads a
// stage's forward output: the LM head and its loss, forward and backward), after the backward
// passes (the embedding's backward). On the step's clock: 1 PRE, 2 the stages' forward passes,
// 3 MID, 4 the backward passes, 5 POST.
static int il_clock(int phase) { return 2 * phase - 1; }

static const char *op_label(const pcc_graph *g, const pcc_op *op) {
    return op->nout ? g->tensors[op->out[0]].name : op->ptr;
}

// Reader of t at clock r (a stage's op or block binding: want is its layout of t): t is made
// at clock tm[t]. Marks what crosses and refuses what the phases cannot order.
static pcc_status il_read(pcc_values *E, const int *tm, int t, int r, const plan_shard *want, const char *reader) {
    const pcc_graph *g = E->g;
    pcc_tensor_kind k = g->tensors[t].kind;
    if (k == PCC_T_INPUT || k == PCC_T_STATE) return PCC_OK;
    bool il_reader = r % 2 == 1, il_value = E->tstage[t] == PCC_STAGE_ALL;
    if (k == PCC_T_PARAM) {
        if (il_reader == il_value) return PCC_OK;
        if (!pcc_trial) fprintf(stderr, "%s: parameter \"%s\" is read by %s on %s and by an operator %s: an interlaced operator's parameter "
                        "is split over every stage, a stage's lives on that stage (interlace both readers, or neither)\n",
                pcc_progname, g->tensors[t].name, reader, il_reader ? "every stage (interlaced)" : "a stage",
                il_reader ? "of a stage" : "on every stage");
        return PCC_ERR_INPUT;
    }
    if (tm[t] > r) {
        if (!pcc_trial) fprintf(stderr, "%s: %s reads \"%s\", which %s makes later in the step: an interlaced operator runs before the "
                        "pipeline's forward passes (reading only inputs and parameters), between them and the backward passes, "
                        "or after those; interlace the reader too, or fewer operators\n",
                pcc_progname, reader, g->tensors[t].name, il_value ? "an interlaced operator" : "a stage");
        return PCC_ERR_INPUT;
    }
    if (tm[t] == r) return PCC_OK;
    E->xil[t] = true;
    if (il_value && !il_reader && !E->has_xsh[t]) E->has_xsh[t] = true, E->xsh[t] = *want;
    return PCC_OK;
}

// The phase of every interlaced operator and what crosses between them and the stages (E->ilphase,
// xil, has_xsh, xsh); refuses the meshes and orders phase 3 cannot make (preserve.c's list).
static pcc_status interlace(pcc_values *E) {
    const pcc_graph *g = E->g;
    const pcc_strategy *s = E->s;
    const char *why = s->virtual_stages > 1 ? "interleaved stages (--virtual-stages)" : E->cp > 1 ? "context parallelism (--cp)" : s->mesh[PCC_AX_TQ] > 1 ? "a 2-D tp group (--tp2)"
                    : E->bg ? "--sync background" : NULL;
    if (why) {
        if (!pcc_trial) fprintf(stderr, "%s: interlaced operators (a policy's \"stage\": \"all\") do not go with %s yet\n", pcc_progname, why);
        return PCC_ERR_INPUT;
    }
    // Every stage runs a layer of its own (the cut counts interlaced operators as layers too).
    for (int st = 0; st < E->pp; st++) {
        bool any = false;
        for (int o = 0; o < g->n_fwd_ops && !any; o++) any |= g->ops[o].block < 0 && E->ostage[o] == st;
        for (int b = 0; b < g->n_blocks && !any; b++) any |= g->blocks[b].fwd < 0 && E->copy_hi[b][st] > E->copy_lo[b][st];
        if (any) continue;
        if (!pcc_trial) fprintf(stderr, "%s: pipeline stage %d holds only interlaced operators, which run on every stage: the "
                                        "other layers make fewer than %d stages (fewer stages, or /stages in the policy)\n",
                                pcc_progname, st, E->pp);
        return PCC_ERR_INPUT;
    }
    E->ilphase = arena_alloc(g->arena, (size_t)(g->n_ops + 1));
    E->xil = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_tensors + 1));
    E->has_xsh = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_tensors + 1));
    E->xsh = arena_alloc(g->arena, sizeof(plan_shard) * (size_t)(g->n_tensors + 1));
    int *tm = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    pcc_status st = PCC_OK;
    for (int o = 0; o < g->n_ops && !st; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase == PCC_PHASE_OPT) continue;
        bool bwd = op->phase == PCC_PHASE_BWD;
        char reader[160];
        if (op->block >= 0) { // a block runs on its stages: its bindings are what it reads and makes
            const pcc_block *bl = &g->blocks[op->block];
            int r = bwd ? 4 : 2;
            snprintf(reader, sizeof reader, "repeated block \"%s\"", bl->name);
            for (int i = 0; i < bl->n_in && !st; i++) st = il_read(E, tm, bl->in[i].outer, r, &E->home_sh[bl->in[i].inner], reader);
            for (int i = 0; i < bl->n_out; i++) tm[bl->out[i].outer] = r;
            for (int i = 0; i < bl->n_acc; i++) tm[bl->acc[i].outer] = r;
            for (int k = bl->first_op; k < bl->first_op + bl->n_ops; k++)
                for (int i = 0; i < g->ops[k].nout; i++) tm[g->ops[k].out[i]] = r;
            o = bl->first_op + bl->n_ops - 1;
            continue;
        }
        int r;
        if (E->ostage[o] == PCC_STAGE_ALL) {
            int m = bwd ? 2 : 0;
            for (int i = 0; i < op->nin; i++) m = tm[op->in[i]] > m ? tm[op->in[i]] : m;
            E->ilphase[o] = (uint8_t)(m <= 1 ? PCC_IL_PRE : m <= 3 ? PCC_IL_MID : PCC_IL_POST);
            r = il_clock(E->ilphase[o]);
            snprintf(reader, sizeof reader, "interlaced operator %s (%s)", op_label(g, op), op->ptr);
        } else {
            r = bwd ? 4 : 2;
            snprintf(reader, sizeof reader, "operator %s (%s)%s", op_label(g, op), op->ptr, bwd ? "'s backward" : "");
        }
        for (int i = 0; i < op->nin && !st; i++) st = il_read(E, tm, op->in[i], r, &E->sh[o][i], reader);
        for (int i = 0; i < op->nout; i++) tm[op->out[i]] = r;
        E->il_mid |= E->ilphase[o] == PCC_IL_MID && s->schedule != PCC_PIPE_GPIPE;
    }
    return st;
}

// Every value's stage and layout, and what the step does with it (keep, defer, synchronize).
static pcc_status analyse(pcc_values *E, const pcc_preserve_opts *o) {
    place(E);
    keep(E);
    defer(E);
    cross_chunk(E);
    layouts(E);
    E->bg = o->sync.algo != PCC_SYNC_ALLREDUCE ? &o->sync : NULL;
    pcc_status st = background_params(E);
    if (st) return st;
    zero2_grads(E);
    if (E->s->interlaced && (st = interlace(E))) return st;
    if (E->V > 1 && E->pp > 2 && !interleaved_adjacent(E)) return PCC_ERR_INPUT;
    return PCC_OK;
}

pcc_status layout_values(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s, const pcc_preserve_opts *o,
                         pcc_values *E) {
    *E = (pcc_values){.g = g, .c = c, .s = s, .pp = s->mesh[PCC_AX_PP], .dp = s->mesh[PCC_AX_DP], .tp = strategy_tp(s),
                      .cp = s->mesh[PCC_AX_CP] > 1 ? s->mesh[PCC_AX_CP] : 1, .M = s->micro_batches, .V = s->virtual_stages > 1 ? s->virtual_stages : 1};
    E->ns = E->pp * E->V;
    if (E->V > 1 && s->zero == 2) {
        if (!pcc_trial) fprintf(stderr, "%s: --zero 2 with --virtual-stages: plancc reduce-scatters per micro-batch only in plain pipelines "
                        "(use --zero 1 or 3, or no interleaving)\n", pcc_progname);
        return PCC_ERR_INPUT;
    }
    pcc_pipeline pl = {.pp = E->pp, .V = E->V, .M = E->M, .schedule = s->schedule};
    E->inflight = pipeline_in_flight(g->arena, &pl);
    copy_ranges(E);
    pcc_status st = block_limits(E);
    if (!st) st = analyse(E, o);
    return st;
}
