/*
 * strategy.c: phase 2's outer part: the device mesh (pp x dp x tp), the pipeline stages, and
 * the split of every forward operator along the dp and tp axes (plancc.h, "strategy.c").
 *
 * The split along tp comes from the intra-operator ILP of sched.c, solved on the tp group with
 * the batch dimension taken out of the candidates (the batch is dp's); the split along dp is
 * the batch dimension wherever an operator has it. Stages cut the sequence of "layers" (top-level
 * operators and the copies of repeated blocks) into pp contiguous runs that balance their FLOPs
 * (the smallest largest run, by bisection over the answer with a greedy fill).
 *
 * The step-time estimate (the template's, which also ranks the factorizations for --auto) walks
 * the plan as one device of each pipeline stage runs it, on the cost model (cost.c):
 *   - every operator at its per-device shape (the batch dimension split dp ways where the
 *     operator is split over dp, its tp letter's dimension tp ways), forward, backward and the
 *     recomputed forward of recomputed operators, each on its layer's stage;
 *   - the tensor-parallel resharding of every producer->consumer edge, forward and backward
 *     (sched_op_comm on the graph with one replica's batch), again when recomputed;
 *   - the pipeline sends between stages (one per micro-batch and boundary each way);
 *   - the gradients of parameters shared between stages (tied embeddings): summed over the
 *     micro-batches and sent to the owner's stage once per step, after its last backward pass
 *     (emit.c's share_params), so the owner waits for them before its optimizer;
 *   - the micro-batch schedule (cost_pipeline_s): m times the busiest stage plus the fill and
 *     drain, (pp-1)/v of a stage for v virtual stages (Megatron-LM's interleaved 1F1B);
 *   - per stage, the gradient synchronization (all-reduce over dp, reduce-scatter with ZeRO,
 *     the tp group's all-reduce of parameters it replicates) on the second stream behind the
 *     last micro-batch's backward pass (what is not hidden counts), then the optimizer and,
 *     with ZeRO, the all-gather of the updated parameters. A stage that finishes its last
 *     backward early (1F1B drains toward stage 0) has that much more time to hide its sync.
 * Interleaving (--virtual-stages V): the layers are cut into pp * V chunks, chunk c on device
 * c mod pp (op_stage and copy_stage hold the chunk); emit.c emits Megatron-LM's interleaved
 * schedule over them.
 */
#include "plancc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Op's letter of model dimension dim that can be cut `ways` ways (whole grains per piece), or -1.
static int letter_of_dim(const pcc_graph *g, const pcc_op *op, int dim, int ways) {
    pcc_letter l[PCC_MAX_LETTERS];
    int n = op_letters(g, op, l);
    for (int i = 0; i < n; i++)
        if (l[i].dim == dim && !l[i].nosplit && g->dims[dim].size % (ways * l[i].grain) == 0) return i;
    return -1;
}

// Whether op's letter `name` cut `ways` ways leaves whole grains (ghost batch norm's groups).
static bool whole_grains(const pcc_graph *g, const pcc_op *op, const char *name, int64_t ways) {
    pcc_letter l[PCC_MAX_LETTERS];
    int n = op_letters(g, op, l);
    for (int i = 0; i < n; i++)
        if (strcmp(l[i].name, name) == 0) return l[i].dim < 0 || g->dims[l[i].dim].size % (ways * l[i].grain) == 0;
    return true;
}

static int letter_by_name(const pcc_graph *g, const pcc_op *op, const char *name) {
    pcc_letter l[PCC_MAX_LETTERS];
    int n = op_letters(g, op, l);
    for (int i = 0; i < n; i++)
        if (strcmp(l[i].name, name) == 0) return i;
    return -1;
}

/* ---- layers and stages ---- */

typedef struct layer {
    int op;         // a top-level forward op, or -1
    int block, copy;
    double flops;
} layer;

static layer *layers(const pcc_graph *g, int *n_out) {
    double *bwd = arena_alloc(g->arena, sizeof(double) * (size_t)(g->n_fwd_ops + 1));
    for (int o = g->n_fwd_ops; o < g->n_ops; o++)
        if (g->ops[o].fwd >= 0) bwd[g->ops[o].fwd] += op_flops(g, &g->ops[o]);
    layer *v = NULL;
    int n = 0, cap = 0;
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->block < 0) {
            *VEC_PUSH(g->arena, v, n, cap) = (layer){o, -1, 0, op_flops(g, op) + bwd[o]};
            continue;
        }
        const pcc_block *bl = &g->blocks[op->block];
        if (o != bl->first_op) continue;
        double f = 0;
        for (int k = bl->first_op; k < bl->first_op + bl->n_ops; k++) f += op_flops(g, &g->ops[k]) + bwd[k];
        for (int64_t c = 0; c < bl->repeat; c++) *VEC_PUSH(g->arena, v, n, cap) = (layer){-1, op->block, (int)c, f};
        o = bl->first_op + bl->n_ops - 1;
    }
    *n_out = n;
    return v;
}

// Stages of the layers: pp contiguous non-empty runs with the smallest largest FLOP sum.
static void partition(const layer *L, int n, int pp, int *stage) {
    double lo = 0, hi = 0, eps = 1; // a layer of 0 FLOPs still counts a little
    for (int i = 0; i < n; i++) {
        hi += L[i].flops + eps;
        if (L[i].flops + eps > lo) lo = L[i].flops + eps;
    }
    for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; it++) {
        double mid = 0.5 * (lo + hi), run = 0;
        int parts = 1;
        for (int i = 0; i < n; i++) {
            double w = L[i].flops + eps;
            if (run + w > mid) parts++, run = 0;
            run += w;
        }
        if (parts <= pp) hi = mid;
        else lo = mid;
    }
    // Fill greedily under hi, keeping enough layers for the stages still to come.
    int s = 0;
    double run = 0;
    for (int i = 0; i < n; i++) {
        double w = L[i].flops + eps;
        bool must = n - i <= pp - 1 - s;      // one layer per remaining stage
        if (s < pp - 1 && run > 0 && (run + w > hi * (1 + 1e-12) || must)) s++, run = 0;
        stage[i] = s;
        run += w;
    }
}

/* ---- the estimate ---- */

static int tensor_of_op(const pcc_op *op, int k) { return k < op->nin ? op->in[k] : op->out[k - op->nin]; }

typedef struct est {
    const pcc_graph *g;
    const pcc_cluster *c;
    const pcc_sched *sc;
    pcc_strategy *s;
    int dp, tp, pp, v, m, nf; // nf: forward ops
    pcc_graph gv;             // g with one data-parallel replica's batch
    int ***ways;              // per forward op, per operand, per axis: the ways it is split on a device
    int *owner;               // per tensor: the forward op that first reads it (params), -1
    double *f, *b;            // per forward op, one copy: forward, backward operator seconds
    double *fc, *bc, *sy;     // per forward op, one copy: tp resharding forward, backward; tp sync
    double *orphan;           // per block, one copy: backward ops of no forward op
    double orphan_top;
    // Per device: per micro-batch compute, tp communication, p2p (forward, backward); per step
    // sync, optimizer, post-optimizer all-gather, tied parameters' gradients received; layers.
    double *Fc, *Fm, *Fp, *Bc, *Bm, *Bp, *sync, *opt, *post, *tied;
    double *pool;       // per device and bucket segment: the bytes that share gradient buckets (est_pool)
    double *last;       // per device: its last bucket's collective (est_last_bucket)
    int *layers;
} est;

static double *zeros(const pcc_graph *g, int n) { return arena_alloc(g->arena, sizeof(double) * (size_t)(n + 1)); }

static int *ones(const pcc_graph *g) {
    int *w = arena_alloc(g->arena, sizeof(int) * PCC_MAX_RANK);
    for (int a = 0; a < PCC_MAX_RANK; a++) w[a] = 1;
    return w;
}

// Tensor t split only over dp, along the batch dimension.
static const int *dp_ways(const est *E, int t) {
    int *w = ones(E->g);
    const pcc_tensor *x = &E->g->tensors[t];
    for (int a = 0; a < x->rank; a++)
        if (x->dims[a] == E->s->batch_dim) w[a] = E->dp;
    return w;
}

// Forward op i's operands as its chosen candidate splits them over tp, and over dp along its dp letter.
static void est_op_ways(est *E, int i) {
    const pcc_graph *g = E->g;
    const pcc_op *op = &g->ops[i];
    const pcc_cand *cd = &E->sc->t->ops[i].c[E->sc->choice[i]];
    int n = op->nin + op->nout, dl = E->s->letter[PCC_AX_DP][i];
    pcc_letter l[PCC_MAX_LETTERS];
    if (dl >= 0) op_letters(g, op, l);
    E->ways[i] = arena_alloc(g->arena, sizeof(int *) * (size_t)(n + 1));
    for (int k = 0; k < n; k++) {
        int *w = E->ways[i][k] = ones(g);
        const pcc_layout *lay = k < op->nin ? &cd->in[k] : &cd->out[k - op->nin];
        for (int a = 0; a < PCC_MAX_RANK; a++) w[a] = lay->d[a] > 1 ? lay->d[a] : 1;
        if (dl >= 0 && l[dl].axis[k] >= 0) w[l[dl].axis[k]] *= E->dp;
    }
}

// How forward op i lays tensor t out: as its operand, or (a gradient) as the operand it is the
// gradient of; any other tensor split over dp only.
static const int *est_ways_of(const est *E, int i, int t) {
    const pcc_op *op = &E->g->ops[i];
    int u = E->g->tensors[t].kind == PCC_T_GRAD || E->g->tensors[t].kind == PCC_T_STATE ? E->g->tensors[t].of : t;
    for (int k = 0; k < op->nin + op->nout; k++)
        if (tensor_of_op(op, k) == t || tensor_of_op(op, k) == u) return E->ways[i][k];
    return dp_ways(E, t);
}

// Operand splits of any op o as forward op i lays its tensors out (i < 0: dp only).
static const int *const *est_ways(const est *E, const pcc_op *o, int i) {
    int n = o->nin + o->nout;
    const int **w = arena_alloc(E->g->arena, sizeof(int *) * (size_t)(n + 1));
    for (int k = 0; k < n; k++) w[k] = i >= 0 ? est_ways_of(E, i, tensor_of_op(o, k)) : dp_ways(E, tensor_of_op(o, k));
    return w;
}

// Per forward op, how its operands split on one device; the graph with one replica's batch;
// which forward op reads each parameter first.
static void est_layout(est *E) {
    const pcc_graph *g = E->g;
    E->ways = arena_alloc(g->arena, sizeof(int **) * (size_t)(E->nf + 1));
    for (int i = 0; i < E->nf; i++) est_op_ways(E, i);
    E->gv = *g;
    E->gv.dims = arena_alloc(g->arena, sizeof(pcc_dim) * (size_t)(g->n_dims + 1));
    for (int k = 0; k < g->n_dims; k++) {
        E->gv.dims[k] = g->dims[k];
        if (k == E->s->batch_dim) E->gv.dims[k].size = (g->dims[k].size + E->dp - 1) / E->dp;
    }
    E->owner = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    for (int t = 0; t < g->n_tensors; t++) E->owner[t] = -1;
    for (int i = 0; i < E->nf; i++)
        for (int k = 0; k < g->ops[i].nin; k++)
            if (E->owner[g->ops[i].in[k]] < 0) E->owner[g->ops[i].in[k]] = i;
}

// Operator seconds per forward op (its forward, its backward ops) and tp communication.
static void est_ops(est *E) {
    const pcc_graph *g = E->g;
    E->f = zeros(g, E->nf), E->b = zeros(g, E->nf), E->orphan = zeros(g, g->n_blocks);
    for (int i = 0; i < E->nf; i++) E->f[i] = cost_op_s(E->c, g, &g->ops[i], (const int *const *)E->ways[i]);
    for (int o = E->nf; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase != PCC_PHASE_BWD) continue;
        double t = cost_op_s(E->c, g, op, est_ways(E, op, op->fwd));
        if (op->fwd >= 0) E->b[op->fwd] += t;
        else if (op->block >= 0) E->orphan[g->blocks[op->block].fwd] += t;
        else E->orphan_top += t;
    }
    E->fc = zeros(g, E->nf), E->bc = zeros(g, E->nf), E->sy = zeros(g, E->nf);
    pcc_sched_opts so = {.group = {E->tp, 1}, .memory_bytes = E->c->memory_bytes, .quiet = true, .bg_dense = E->s->bg_dense,
                         .bucket_bytes = E->s->bucket_bytes};
    sched_op_comm(&E->gv, E->c, E->sc->t, &so, E->sc->choice, E->fc, E->bc, E->sy);
    for (int i = 0; i < E->nf; i++) {
        double n = (double)op_copies(g, &g->ops[i]);
        E->fc[i] /= n, E->bc[i] /= n, E->sy[i] /= n;
    }
}

// The device of forward op i in copy k of its block (k ignored at the top level).
static int est_device(const est *E, int i, int k) {
    const pcc_op *op = &E->g->ops[i];
    return (op->block < 0 ? E->s->op_stage[i] : E->s->copy_stage[op->block][k]) % E->pp;
}

// One forward op's copy on device d: its forward, backward and recomputed forward.
static void est_add_op(est *E, int i, int d) {
    bool rc = E->s->recompute[i];
    E->Fc[d] += E->f[i], E->Fm[d] += E->fc[i];
    E->Bc[d] += E->b[i] + (rc ? E->f[i] : 0), E->Bm[d] += E->bc[i] + (rc ? E->fc[i] : 0);
    E->sync[d] += E->sy[i];
}

// Bytes on one device of tensor t as its producer's chosen layout holds it (one replica's batch).
static double est_held_bytes(const est *E, int t) {
    double bytes = tensor_bytes(&E->gv, &E->g->tensors[t]);
    int p = E->g->tensors[t].producer;
    if (p < 0 || p >= E->nf) return bytes;
    const pcc_op *op = &E->g->ops[p];
    const pcc_cand *cd = &E->sc->t->ops[p].c[E->sc->choice[p]];
    for (int k = 0; k < op->nout; k++)
        if (op->out[k] == t)
            for (int r = 0; r < E->g->tensors[t].rank; r++) bytes /= cd->out[k].d[r];
    return bytes;
}

// What layer l hands to the next one: a block's carried values, or a top-level op's outputs.
static double est_boundary_bytes(const est *E, const layer *l) {
    double bytes = 0;
    if (l->op >= 0)
        for (int k = 0; k < E->g->ops[l->op].nout; k++) bytes += est_held_bytes(E, E->g->ops[l->op].out[k]);
    else
        for (int k = 0; k < E->g->blocks[l->block].n_carry; k++) bytes += est_held_bytes(E, E->g->blocks[l->block].carry[k].outer);
    return bytes;
}

static double est_send_s(const est *E, double bytes) {
    pcc_group_shape pair = {2, E->dp * E->tp};
    return cost_collective_s(E->c, PCC_COLL_SEND_RECV, bytes, pair) + cost_launch_s(E->c);
}

// The layers on their devices, and the sends between chunks (both ways, per micro-batch).
static void est_layers(est *E, const layer *L, int nl, const int *chunk) {
    const pcc_graph *g = E->g;
    for (int l = 0; l < nl; l++) {
        int d = chunk[l] % E->pp;
        E->layers[d]++;
        if (L[l].op >= 0) {
            est_add_op(E, L[l].op, d);
        } else {
            const pcc_block *bl = &g->blocks[L[l].block];
            for (int i = bl->first_op; i < bl->first_op + bl->n_ops; i++) est_add_op(E, i, d);
            E->Bc[d] += E->orphan[L[l].block];
        }
        if (l + 1 < nl && chunk[l + 1] != chunk[l]) {
            double t = est_send_s(E, est_boundary_bytes(E, &L[l]));
            E->Fp[d] += t, E->Bp[chunk[l + 1] % E->pp] += t;
        }
    }
    E->Bc[chunk[nl - 1] % E->pp] += E->orphan_top;
}

// Bytes on one device of parameter p (owner op i), and whether the step synchronizes its
// gradient over dp in the emitter's buckets (an all-reduce, or ZeRO's reduce-scatter, unless
// ZeRO-2 reduce-scatters each micro-batch's by itself; --sync background: tables only).
static double est_param_bytes(const est *E, int p, int i, bool *bucketed) {
    const pcc_tensor *t = &E->g->tensors[p];
    const int *w = est_ways_of(E, i, p);
    double bytes = tensor_bytes(E->g, t);
    for (int r = 0; r < t->rank; r++) bytes /= w[r];
    int zero = E->s->zero;
    *bucketed = E->dp > 1 && (zero == 0 ? graph_step_synced(E->g, p, E->s->bg_dense) : !(zero == 2 && E->m > 1));
    return bytes;
}

// The bucket pool of a parameter of op i, its copy on device d: what its segment's gradients on
// d add up to (a block's: one copy's, the same for every copy; a top-level stretch's: per device).
static double *est_pool(const est *E, int i, int d) {
    int seg = graph_bucket_segment(E->g, i);
    return &E->pool[(E->g->ops[i].block >= 0 ? 0 : d) * (2 * E->g->n_blocks + 2) + seg];
}

// Gradient synchronization and the optimizer of parameter p's instance on device d (owner op i).
static void est_param(est *E, int p, int i, int d, const pcc_op *opt) {
    const pcc_graph *g = E->g;
    bool bucketed;
    double bytes = est_param_bytes(E, p, i, &bucketed), pool = *est_pool(E, i, d), cap = E->s->bucket_bytes;
    pcc_group_shape dpg = {E->dp, E->tp};
    double launch = cost_launch_s(E->c);
    int zero = E->s->zero;
    if (bucketed) E->sync[d] += cost_bucketed_s(E->c, zero ? PCC_COLL_REDUCE_SCATTER : PCC_COLL_ALL_REDUCE, bytes, pool, cap, dpg);
    if (E->dp > 1 && zero > 0) {
        double ag = cost_collective_s(E->c, PCC_COLL_ALL_GATHER, bytes, dpg) + launch;
        if (!bucketed) E->sync[d] += cost_collective_s(E->c, PCC_COLL_REDUCE_SCATTER, bytes, dpg) + launch;
        E->post[d] += ag;
        if (zero == 3) E->Fm[d] += ag, E->Bm[d] += ag; // gathered again for each micro-batch's use
    }
    if (opt) E->opt[d] += cost_op_s(E->c, g, opt, est_ways(E, opt, i)) / (E->dp > 1 && zero > 0 ? E->dp : 1);
}

// Every parameter: sync and optimizer on its owner's device(s); tied parameters' gradients sent
// to the owner once per step from each other stage that uses them. First the bytes that share
// buckets, per device and segment.
static void est_params(est *E) {
    const pcc_graph *g = E->g;
    const pcc_op **opt = arena_alloc(g->arena, sizeof(pcc_op *) * (size_t)(g->n_tensors + 1));
    for (int o = E->nf; o < g->n_ops; o++)
        if (g->ops[o].phase == PCC_PHASE_OPT) opt[g->ops[o].in[0]] = &g->ops[o];
    E->pool = zeros(g, E->pp * (2 * g->n_blocks + 2));
    for (int p = 0; p < g->n_tensors; p++) {
        int i = E->owner[p];
        bool bucketed;
        if (g->tensors[p].kind != PCC_T_PARAM || i < 0) continue;
        double bytes = est_param_bytes(E, p, i, &bucketed);
        if (bucketed) *est_pool(E, i, est_device(E, i, 0)) += bytes;
    }
    for (int p = 0; p < g->n_tensors; p++) {
        const pcc_tensor *t = &g->tensors[p];
        int i = E->owner[p];
        if (t->kind != PCC_T_PARAM || i < 0) continue;
        int64_t n = g->ops[i].block >= 0 ? g->blocks[g->ops[i].block].repeat : 1;
        for (int64_t k = 0; k < n; k++) est_param(E, p, i, est_device(E, i, (int)k), opt[p]);
        if (g->ops[i].block >= 0) continue;
        int home = est_device(E, i, 0);
        for (int j = i + 1; j < E->nf; j++) {
            bool reads = false;
            for (int k = 0; k < g->ops[j].nin; k++) reads |= g->ops[j].in[k] == p;
            if (!reads || g->ops[j].block >= 0 || est_device(E, j, 0) == home) continue;
            const int *w = est_ways_of(E, j, p);
            double bytes = tensor_bytes(g, t);
            for (int r = 0; r < t->rank; r++) bytes /= w[r];
            E->tied[home] += est_send_s(E, bytes);
        }
    }
}

// Whether op i is the owner of its input k, a parameter (counted once when it reads it twice).
static bool est_owns(const est *E, int i, int k) {
    const pcc_op *op = &E->g->ops[i];
    int p = op->in[k];
    if (E->g->tensors[p].kind != PCC_T_PARAM || E->owner[p] != i) return false;
    for (int j = 0; j < k; j++)
        if (op->in[j] == p) return false;
    return true;
}

// The replicas over the tp group whose gradients op i's input k (a parameter) sums in the step
// (the ILP's choice splits the op along a letter it does not carry: sched.c's cand_sync_s), 1: none.
static int est_tp_replicas(const est *E, int i, int k) {
    const pcc_cand *cd = &E->sc->t->ops[i].c[E->sc->choice[i]];
    int p = E->g->ops[i].in[k];
    if (cd->dim < 0 || !graph_step_synced(E->g, p, E->s->bg_dense)) return 1;
    return cd->in[k].r;
}

// The last bucket each device issues: the gradients of its earliest segment that the backward
// pass finishes after the previous bucket closed (filled as emit.c fills them, in the backward
// pass's order), all-reduced over tp (the ILP's replicas) and dp. It starts when the backward
// pass is over: nothing hides it.
static void est_last_bucket(est *E) {
    const pcc_graph *g = E->g;
    int *first = arena_alloc(g->arena, sizeof(int) * (size_t)E->pp);
    for (int d = 0; d < E->pp; d++) first[d] = -1;
    for (int i = 0; i < E->nf; i++)
        for (int k = 0; k < g->ops[i].nin; k++) {
            bool bucketed;
            if (!est_owns(E, i, k)) continue;
            est_param_bytes(E, g->ops[i].in[k], i, &bucketed);
            bucketed |= est_tp_replicas(E, i, k) > 1;
            for (int64_t c = 0; bucketed && c < op_copies(g, &g->ops[i]); c++)
                if (first[est_device(E, i, (int)c)] < 0) first[est_device(E, i, (int)c)] = i;
        }
    E->last = zeros(g, E->pp);
    pcc_group_shape dpg = {E->dp, E->tp};
    for (int d = 0; d < E->pp; d++) {
        if (first[d] < 0) continue;
        int seg = graph_bucket_segment(g, first[d]);
        bool top = g->ops[first[d]].block < 0;
        double open = 0, last = 0;
        int r = 1, last_r = 1; // the tp replicas of the open bucket's gradients
        for (int i = E->nf - 1; i >= 0; i--) {
            if (graph_bucket_segment(g, i) != seg || (top && est_device(E, i, 0) != d)) continue;
            for (int k = 0; k < g->ops[i].nin; k++) {
                bool bucketed;
                if (!est_owns(E, i, k)) continue;
                double bytes = est_param_bytes(E, g->ops[i].in[k], i, &bucketed);
                int rk = est_tp_replicas(E, i, k);
                if (!bucketed && rk <= 1) continue;
                open += bytes;
                if (rk > r) r = rk;
                if (open >= E->s->bucket_bytes) last = open, last_r = r, open = 0, r = 1;
            }
        }
        if (open > 0) last = open, last_r = r;
        double launch = cost_launch_s(E->c);
        if (E->dp > 1)
            E->last[d] += cost_collective_s(E->c, E->s->zero ? PCC_COLL_REDUCE_SCATTER : PCC_COLL_ALL_REDUCE, last, dpg) + launch;
        if (last_r > 1) E->last[d] += cost_collective_s(E->c, PCC_COLL_ALL_REDUCE, last, (pcc_group_shape){last_r, 1}) + launch;
    }
}

// The step: the pipeline, then per device what the last backward pass does not hide of its sync,
// its optimizer and ZeRO's all-gather; a device that drains early has that much more slack.
static void est_step(est *E) {
    int pp = E->pp;
    const pcc_graph *g = E->g;
    double *F = zeros(g, pp), *B = zeros(g, pp), bubble;
    int busy = 0;
    for (int d = 0; d < pp; d++) {
        F[d] = E->Fc[d] + E->Fm[d] + E->Fp[d], B[d] = E->Bc[d] + E->Bm[d] + E->Bp[d];
        if (F[d] + B[d] > F[busy] + B[busy]) busy = d;
    }
    pcc_estimate *x = &E->s->est;
    x->pipeline_s = cost_pipeline_s(F, B, pp, E->v, E->m, &bubble);
    x->bubble_s = bubble;
    x->compute_s = E->m * (E->Fc[busy] + E->Bc[busy]);
    x->tp_comm_s = E->m * (E->Fm[busy] + E->Bm[busy]);
    x->p2p_s = E->m * (E->Fp[busy] + E->Bp[busy]);
    double lead = 0;
    x->step_s = 0;
    for (int d = 0; d < pp; d++) {
        double per_layer = E->layers[d] > 0 ? (double)E->v / E->layers[d] : 1;
        double window = B[d] / E->v * (per_layer < 1 ? 1 - per_layer : 0);
        double exposed = cost_exposed_s(E->sync[d], window);
        double tail = E->last[d] < E->sync[d] ? E->last[d] : E->sync[d];
        if (tail > exposed) exposed = tail;
        double end = x->pipeline_s - lead + E->tied[d] + exposed + E->opt[d] + E->post[d];
        if (end > x->step_s || d == 0)
            x->step_s = end, x->sync_s = E->sync[d], x->sync_exposed_s = exposed, x->optimizer_s = E->opt[d] + E->post[d];
        lead += B[d] / E->v;
    }
}

static void estimate(const pcc_graph *g, const pcc_cluster *c, const pcc_sched *sc, pcc_strategy *s, const layer *L,
                     int nl, const int *chunk) {
    est E = {.g = g, .c = c, .sc = sc, .s = s, .dp = s->mesh[PCC_AX_DP], .tp = s->mesh[PCC_AX_TP],
             .pp = s->mesh[PCC_AX_PP], .v = s->virtual_stages, .m = s->micro_batches, .nf = g->n_fwd_ops};
    int pp = E.pp;
    E.Fc = zeros(g, pp), E.Fm = zeros(g, pp), E.Fp = zeros(g, pp), E.Bc = zeros(g, pp), E.Bm = zeros(g, pp);
    E.Bp = zeros(g, pp), E.sync = zeros(g, pp), E.opt = zeros(g, pp), E.post = zeros(g, pp), E.tied = zeros(g, pp);
    E.layers = arena_alloc(g->arena, sizeof(int) * (size_t)(pp + 1));
    est_layout(&E);
    est_ops(&E);
    est_layers(&E, L, nl, chunk);
    est_params(&E);
    est_last_bucket(&E);
    est_step(&E);
}

/* ---- one mesh ---- */

// What a byte the ILP counts costs one device of the mesh (pcc_sched_opts): the ILP sees the
// whole model on the tp group, for the whole batch and one micro-batch, against pp devices'
// memory. Parameters: weights + gradients + optimizer state, ZeRO sharding the optimizer state
// (1), gradients (2) and weights (3) over dp. Activations: 1/dp of the batch, times the
// micro-batches a stage keeps in flight (1F1B: up to pp; GPipe: all; no pipeline: one at a time).
static void memory_scales(const pcc_graph *g, int pp, int dp, int zero, pcc_pipe_sched sch, pcc_sched_opts *so) {
    pcc_totals t;
    graph_totals(g, &t);
    if (t.bytes_weights <= 0) return;
    so->param_scale = (t.bytes_weights / (zero >= 3 ? dp : 1) + t.bytes_grads / (zero >= 2 ? dp : 1) +
                       t.bytes_optim / (zero >= 1 ? dp : 1)) / t.bytes_weights;
    int m = g->micro_batches, fly = pp == 1 ? 1 : sch == PCC_PIPE_GPIPE ? m : (pp < m ? pp : m);
    so->act_scale = (double)fly / dp;
}

static pcc_status tp_schedule(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy_opts *o, int bdim, int tp,
                              int pp, int dp, int zero, bool batch_tp, pcc_sched **out) {
    pcc_transform *t = transform(g, tp);
    for (int i = 0; i < t->n_ops; i++) {
        pcc_op_cands *oc = &t->ops[i];
        bool has_rc = false;
        for (int k = 0; k < oc->n; k++) has_rc |= oc->c[k].recompute;
        int n = 0;
        for (int k = 0; k < oc->n; k++) {
            const pcc_cand *cd = &oc->c[k];
            if (cd->dim >= 0 && cd->dim == bdim && !batch_tp) continue; // the batch is dp's (unless asked)
            // over dp x tp, a ghost batch norm's pieces must still hold whole groups
            if (cd->dim >= 0 && cd->dim == bdim && !whole_grains(g, &g->ops[oc->op], cd->letter, (int64_t)dp * tp)) continue;
            if (o->recompute == PCC_RECOMPUTE_NONE && cd->recompute) continue;
            if (o->recompute == PCC_RECOMPUTE_FULL && has_rc && !cd->recompute) continue;
            oc->c[n++] = *cd;
        }
        PCC_ASSERT(n > 0);
        oc->n = n;
    }
    pcc_sched_opts so = {.group = {tp, 1}, .memory_bytes = c->memory_bytes * pp, .ilp = o->ilp, .quiet = true,
                         .bg_dense = o->bg_dense, .bucket_bytes = o->bucket_bytes};
    memory_scales(g, pp, dp, dp > 1 ? zero : 0, o->schedule ? o->schedule : PCC_PIPE_1F1B, &so);
    so.ilp.progress = false;
    return sched_intra(g, c, t, &so, out);
}

static pcc_strategy *make(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy_opts *o, const pcc_sched *sc,
                          int bdim, int pp, int dp, int tp, int zero, const layer *L, int nl) {
    pcc_strategy *s = arena_alloc(g->arena, sizeof *s);
    s->mesh[PCC_AX_PP] = pp, s->mesh[PCC_AX_DP] = dp, s->mesh[PCC_AX_TP] = tp;
    s->micro_batches = g->micro_batches;
    s->schedule = pp == 1 ? PCC_PIPE_GPIPE : o->schedule ? o->schedule : PCC_PIPE_1F1B;
    s->zero = dp > 1 ? zero : 0;
    s->batch_dim = bdim;
    s->bg_dense = o->bg_dense;
    s->bucket_bytes = o->bucket_bytes;
    int n = g->n_fwd_ops;
    for (int a = 0; a < PCC_AXES; a++) {
        s->letter[a] = arena_alloc(g->arena, sizeof(int) * (size_t)(n + 1));
        for (int i = 0; i < n; i++) s->letter[a][i] = -1;
    }
    s->recompute = arena_alloc(g->arena, sizeof(bool) * (size_t)(n + 1));
    s->cause = arena_alloc(g->arena, sizeof(char *) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        const pcc_op *op = &g->ops[i];
        const pcc_cand *cd = &sc->t->ops[i].c[sc->choice[i]];
        if (dp > 1 && bdim >= 0) s->letter[PCC_AX_DP][i] = letter_of_dim(g, op, bdim, dp);
        if (cd->dim >= 0) s->letter[PCC_AX_TP][i] = letter_by_name(g, op, cd->letter);
        PCC_ASSERT(cd->dim < 0 || s->letter[PCC_AX_TP][i] >= 0);
        // The emitter recomputes inside blocks. --recompute full is Megatron-LM's activation
        // checkpointing: every block operator runs again in the backward pass and only the
        // block's inputs are kept, matrix products included (their outputs are kept by no
        // backward operator, so phase 1 offers them no recompute candidate of their own).
        s->recompute[i] = op->block >= 0 && (cd->recompute || o->recompute == PCC_RECOMPUTE_FULL);
        s->cause[i] = sc->cause[i];
    }
    s->op_stage = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_ops + 1));
    s->copy_stage = arena_alloc(g->arena, sizeof(int *) * (size_t)(g->n_blocks + 1));
    for (int i = 0; i < g->n_ops; i++) s->op_stage[i] = -1;
    for (int b = 0; b < g->n_blocks; b++)
        if (g->blocks[b].fwd < 0) s->copy_stage[b] = arena_alloc(g->arena, sizeof(int) * (size_t)g->blocks[b].repeat);
    int v = s->virtual_stages = pp > 1 && o->virtual_stages > 1 ? o->virtual_stages : 1;
    int *chunk = arena_alloc(g->arena, sizeof(int) * (size_t)(nl + 1));
    partition(L, nl, pp * v, chunk);
    for (int i = 0; i < nl; i++) {
        if (L[i].op >= 0) s->op_stage[L[i].op] = chunk[i];
        else s->copy_stage[L[i].block][L[i].copy] = chunk[i];
    }
    estimate(g, c, sc, s, L, nl, chunk);
    s->est_step_s = s->est.step_s;
    s->est_memory_bytes = sc->memory_bytes / pp;
    s->ilp = sc->ilp;
    return s;
}

static int by_time(const void *a, const void *b) {
    const pcc_strategy *x = *(pcc_strategy *const *)a, *y = *(pcc_strategy *const *)b;
    if (x->est_step_s != y->est_step_s) return x->est_step_s < y->est_step_s ? -1 : 1;
    for (int i = 0; i < PCC_AXES; i++) // ties: fewer pipeline stages, then less tp
        if (x->mesh[i] != y->mesh[i]) return x->mesh[i] < y->mesh[i] ? -1 : 1;
    if (x->zero != y->zero) return x->zero - y->zero; // then the least sharding
    return x->virtual_stages - y->virtual_stages; // then no interleaving
}

pcc_status strategy_plan(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy_opts *o, pcc_strategy ***out,
                         int *n_out) {
    *out = NULL, *n_out = 0;
    int N = c->n_devices, bdim = graph_batch_dim(g), nl;
    int64_t bsize = bdim >= 0 ? g->dims[bdim].size : 1;
    layer *L = layers(g, &nl);
    pcc_strategy **v = NULL;
    int n = 0, cap = 0;
    pcc_status last = PCC_OK;
    if (!o->auto_mesh) {
        int dp = o->dp ? o->dp : 1, tp = o->tp ? o->tp : 1, pp = o->pp ? o->pp : 1;
        if ((int64_t)dp * tp * pp != N)
            return diag(c->file, "", "--dp %d x --tp %d x --pp %d is %lld devices, but the cluster has %d (set --devices or --nodes)",
                        dp, tp, pp, (long long)dp * tp * pp, N);
        if (dp > 1 && (bdim < 0 || bsize % dp != 0))
            return diag(g->file, bdim >= 0 ? g->dims[bdim].ptr : "",
                        bdim >= 0 ? "--dp %d does not divide the batch dimension %s = %lld" : "--dp %d: the model has no input with a batch dimension%s%lld",
                        dp, bdim >= 0 ? g->dims[bdim].name : "", (long long)(bdim >= 0 ? bsize : 0));
        if (pp > nl)
            return diag(g->file, "", "--pp %d: the model has only %d layers (top-level operators and block copies) to put in stages", pp, nl);
        int nv = o->virtual_stages > 1 ? o->virtual_stages : 1;
        if (nv > 1 && pp == 1)
            return diag(g->file, "", "--virtual-stages %d interleaves pipeline stages, but there is no pipeline (--pp 1)", nv);
        if (nv > 1 && pp * nv > nl)
            return diag(g->file, "", "--pp %d x --virtual-stages %d is %d model chunks, but the model has only %d layers (top-level "
                        "operators and block copies)", pp, nv, pp * nv, nl);
        if (nv > 1 && g->micro_batches % pp != 0)
            return diag(g->file, "", "--virtual-stages %d: interleaved 1F1B runs the micro-batches in groups of --pp %d, but there "
                        "are %d micro-batches", nv, pp, g->micro_batches);
        if (tp > c->devices_per_node && !c->cpu)
            warn("--tp %d spans nodes (%d devices per node): tensor-parallel collectives cross the network", tp, c->devices_per_node);
        // The batch over tp too where asked (--tp-batch), or where the dense layers' replicas are
        // averaged in the background (ShadowSync's layout needs data-parallel operators in the group).
        bool btp_ok = tp > 1 && bdim >= 0 && bsize % ((int64_t)dp * tp) == 0, btp = o->tp_batch || (o->bg_dense && btp_ok);
        if (o->tp_batch && !btp_ok)
            return diag(g->file, bdim >= 0 ? g->dims[bdim].ptr : "",
                        bdim >= 0 ? "--tp-batch: --dp x --tp = %d does not divide the batch dimension %s = %lld"
                                  : "--tp-batch: the model has no input with a batch dimension%.0d%s%.0lld",
                        dp * tp, bdim >= 0 ? g->dims[bdim].name : "", (long long)bsize);
        pcc_sched *sc;
        pcc_status st = tp_schedule(g, c, o, bdim, tp, pp, dp, o->zero, btp, &sc);
        if (st == PCC_ERR_INFEASIBLE) {
            // Keep going with all memory allowed: the memory planner says exactly what does not fit.
            pcc_strategy_opts o2 = *o;
            o2.recompute = o->recompute == PCC_RECOMPUTE_NONE ? PCC_RECOMPUTE_NONE : PCC_RECOMPUTE_FULL;
            pcc_cluster c2 = *c;
            c2.memory_bytes = 1e30;
            st = tp_schedule(g, &c2, &o2, bdim, tp, pp, dp, o->zero, btp, &sc);
        }
        if (st) return st;
        *VEC_PUSH(g->arena, v, n, cap) = make(g, c, o, sc, bdim, pp, dp, tp, o->zero, L, nl);
    } else {
        for (int tp = 1; tp <= N; tp++) {
            // tp inside a node; with --sync background also the whole cluster (ShadowSync's
            // layout: the tables sharded over every device, the dense layers' replicas beside them)
            if (N % tp || (tp > c->devices_per_node && !c->cpu && !(o->bg_dense && tp == N))) continue;
            for (int pp = 1; pp <= N / tp; pp++) {
                if ((N / tp) % pp || pp > nl) continue;

                int dp = N / tp / pp;
                if (dp > 1 && (bdim < 0 || bsize % dp != 0)) continue;
                if (o->pp && pp != o->pp) continue;
                // ZeRO from the stage asked for up (1 and 3; 2 only when asked), and where each
                // replica's batch divides by tp, the ILP also free to split the batch over tp
                // (data parallelism over dp x tp for the operators that gain from it, Alpa's
                // mixed plans): every variant the ILP fits is a candidate, ranked by the
                // estimate; the emitter keeps the fastest that fits exactly.
                bool btp_ok = tp > 1 && bdim >= 0 && bsize % ((int64_t)dp * tp) == 0;
                for (int zero = o->zero; zero <= 3; zero++)
                    for (int btp = 0; btp <= (int)btp_ok; btp++) {
                        if ((zero == 2 && o->zero != 2) || (zero > o->zero && dp == 1)) continue;
                        pcc_sched *sc = NULL;
                        pcc_status st = tp_schedule(g, c, o, bdim, tp, pp, dp, zero, btp, &sc);
                        if (st) {
                            last = st;
                            if (st != PCC_ERR_INFEASIBLE) return st;
                            continue;
                        }
                        // Interleaving is one more candidate beside the plain 1F1B (where
                        // emit.c can emit it: pp 2): --auto keeps it only where the estimate
                        // says it pays.
                        pcc_strategy_opts plain = *o;
                        plain.virtual_stages = 1;
                        *VEC_PUSH(g->arena, v, n, cap) = make(g, c, &plain, sc, bdim, pp, dp, tp, zero, L, nl);
                        if (o->virtual_stages > 1 && pp == 2 && pp * o->virtual_stages <= nl && g->micro_batches % pp == 0)
                            *VEC_PUSH(g->arena, v, n, cap) = make(g, c, o, sc, bdim, pp, dp, tp, zero, L, nl);
                    }
            }
        }
        if (n == 0 && o->quiet) return PCC_ERR_INFEASIBLE; // (main.c's tighter rounds ask quietly)
        if (n == 0) {
            if (last == PCC_ERR_INFEASIBLE)
                fprintf(stderr, "%s: %s: does not fit on %d devices of %s in any factorization pp x dp x tp, even with "
                                "recompute; use more devices, ZeRO (--zero 3), or a smaller micro-batch\n",
                        pcc_progname, g->file, N, c->device_name);
            else
                fprintf(stderr, "%s: %s: no factorization of %d devices fits the model (dp must divide the batch "
                                "dimension%s%s = %lld, tp stay inside a node of %d, pp at most %d layers)\n",
                        pcc_progname, g->file, N, bdim >= 0 ? " " : "", bdim >= 0 ? g->dims[bdim].name : "",
                        (long long)bsize, c->devices_per_node, nl);
            return PCC_ERR_INFEASIBLE;
        }
        qsort(v, (size_t)n, sizeof *v, by_time);
    }
    *out = v, *n_out = n;
    return PCC_OK;
}

char *strategy_str(const pcc_strategy *s, char *buf, size_t n) {
    char v[48] = "";
    if (s->virtual_stages > 1) snprintf(v, sizeof v, " interleaved, %d virtual stages", s->virtual_stages);
    snprintf(buf, n, "pp %d x dp %d x tp %d, %s%s, %d micro-batch%s%s", s->mesh[PCC_AX_PP], s->mesh[PCC_AX_DP],
             s->mesh[PCC_AX_TP], s->mesh[PCC_AX_PP] == 1 ? "no pipeline" : s->schedule == PCC_PIPE_GPIPE ? "gpipe" : "1f1b", v,
             s->micro_batches, s->micro_batches == 1 ? "" : "es",
             s->zero == 3 ? ", zero 3" : s->zero == 2 ? ", zero 2" : s->zero == 1 ? ", zero 1" : "");
    return buf;
}
