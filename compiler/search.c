/*
 * search.c: phase 2, the search: the device mesh (pp x dp x cp x tp), the pipeline stages, and
 * the split of every forward operator along the dp, cp and tp axes.
 *
 * Input: the graph, the cluster, and phase 1's candidates per operator for every tensor-parallel
 * group size the search will try (search_group_sizes says which; the driver runs phase 1 for
 * them first). Output: the candidate strategies, best first by the step-time estimate
 * (estimate.c). Two ways to get them:
 *   - a template (--dp --tp --pp): Megatron-LM's plan. The batch dimension is split over dp;
 *     the tp split of each operator comes from the intra-operator ILP (ilp.c) on the tp group
 *     with the batch dimension taken out of the candidates, which gives Megatron's column- then
 *     row-parallel linears; with --tp-batch (or --sync background) the ILP may split the batch
 *     over tp too; with --sequence-parallel, norms, residual adds and dropout must split the
 *     sequence and nothing else may (seq_keeps). Where the ILP's memory model finds nothing
 *     that fits, --recompute none and full take their choice with all memory allowed (the
 *     memory planner has the last word), and auto recomputes every block operator. With --cp N
 *     (context parallelism, DeepSpeed-Ulysses' form; cp_letter), every operator splits the
 *     sequence over the cp axis and attention its heads, and the tp candidates leave the
 *     sequence to cp as they leave the batch to dp.
 *   - --auto: the configurations (pcc_config) of this graph - every factorization of the devices
 *     (tp inside a node, dp dividing the batch, pp at most the number of layers), each ZeRO stage
 *     from the one asked for up, with and without the batch over tp, recompute auto, none and full
 *     (so every template is one), interleaved where it can run, and context parallelism where dp
 *     cannot take more of the batch or a sample's activations outgrow a node (long_seq), or cp 2
 *     in zigzag order over causal attention (auto_cp_ok)
 *     - each with two lower bounds on its step (space_bound, space_floor) and its strategy on
 *     demand (space_build). bestfirst.c searches them (its search() is phase 2's entry, and
 *     comes here through space_one for everything but that search); the driver's search over
 *     micro-batch counts hands the compile the one it chose (o->pick), which is built alone.
 * The split along dp is the batch dimension wherever an operator has it, else a dimension a
 * reshape made of it (batch_dims: Swin's windows, the Evoformer's MSA rows). Stages cut the
 * sequence of layers (graph_layers: top-level operators and the copies of repeated blocks)
 * into pp contiguous runs that balance the seconds the estimate charges each on a device, as the
 * ILP split its operators (the smallest largest run, by bisection over the answer with a greedy
 * fill); the search's floor of a pipeline balances its own per-layer floors. Interleaving
 * (--virtual-stages V): the layers are cut into pp * V chunks, chunk c on device c mod pp (op_stage and copy_stage hold the chunk); pipeline.c
 * orders Megatron-LM's interleaved schedule over them.
 *
 * Phase 1's candidates are the same for every mesh with one tp group size; what a mesh changes
 * (the batch is dp's, --recompute, ghost batch norm's whole groups) is a filter over a copy of
 * them, and what a byte of memory costs a device (memory_scales) is the ILP's options.
 *
 * --check -d s asks for phase 2 without a mesh (o->whole): the ILP alone, over all the devices
 * as one group, with the whole device's memory and no options; its one strategy holds only that
 * choice (intra) and the mesh tp = all.
 */
#include "plancc.h"
#include "policy.h"

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

// Whether letter l of op cut `ways` ways leaves whole grains of every operand axis it runs along
// (a reshape's letter runs along an input and an output dimension of different sizes).
static bool letter_cuts(const pcc_graph *g, const pcc_op *op, const pcc_letter *l, int64_t ways) {
    if (l->nosplit) return false;
    for (int k = 0; k < op->nin + op->nout; k++) {
        const pcc_tensor *t = &g->tensors[k < op->nin ? op->in[k] : op->out[k - op->nin]];
        if (l->axis[k] >= 0 && g->dims[t->dims[(int)l->axis[k]]].size % (ways * l->grain) != 0) return false;
    }
    return g->dims[l->dim].size % (ways * l->grain) == 0;
}

// Op's letter that dp cuts: the batch's, else the first of a dimension made of it (batch_dims)
// that dp cuts into whole grains; -1: the op runs whole on every replica.
static int dp_letter(const pcc_graph *g, const pcc_op *op, int bdim, const bool *bm, int dp) {
    int li = letter_of_dim(g, op, bdim, dp);
    pcc_letter l[PCC_MAX_LETTERS];
    int n = li < 0 ? op_letters(g, op, l) : 0;
    for (int i = 0; i < n; i++)
        if (bm[l[i].dim] && letter_cuts(g, op, &l[i], dp)) return i;
    return li;
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

// The FLOPs of every layer: its forward operators' and the backward operators derived from them.
static double *layer_flops(const pcc_graph *g, const pcc_layer *L, int n) {
    double *bwd = arena_alloc(g->arena, sizeof(double) * (size_t)(g->n_fwd_ops + 1));
    for (int o = g->n_fwd_ops; o < g->n_ops; o++)
        if (g->ops[o].fwd >= 0) bwd[g->ops[o].fwd] += op_flops(g, &g->ops[o]);
    double *f = arena_alloc(g->arena, sizeof(double) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        if (L[i].op >= 0) {
            f[i] = op_flops(g, &g->ops[L[i].op]) + bwd[L[i].op];
        } else if (i > 0 && L[i - 1].block == L[i].block) {
            f[i] = f[i - 1]; // every copy of a block alike
        } else {
            const pcc_block *bl = &g->blocks[L[i].block];
            for (int k = bl->first_op; k < bl->first_op + bl->n_ops; k++) f[i] += op_flops(g, &g->ops[k]) + bwd[k];
        }
    }
    return f;
}

// Stages of the layers: pp contiguous non-empty runs with the smallest largest sum of their
// weights (FLOPs or seconds; a layer of none still counts eps).
static void partition(const double *w, int n, int pp, double eps, int *stage) {
    double lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        hi += w[i] + eps;
        if (w[i] + eps > lo) lo = w[i] + eps;
    }
    for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; it++) {
        double mid = 0.5 * (lo + hi), run = 0;
        int parts = 1;
        for (int i = 0; i < n; i++) {
            double wi = w[i] + eps;
            if (run + wi > mid) parts++, run = 0;
            run += wi;
        }
        if (parts <= pp) hi = mid;
        else lo = mid;
    }
    // Fill greedily under hi, keeping enough layers for the stages still to come.
    int s = 0;
    double run = 0;
    for (int i = 0; i < n; i++) {
        double wi = w[i] + eps;
        bool must = n - i <= pp - 1 - s;      // one layer per remaining stage
        if (s < pp - 1 && run > 0 && (run + wi > hi * (1 + 1e-12) || must)) s++, run = 0;
        stage[i] = s;
        run += wi;
    }
}

// The stages: the policy's where it gives or pins them (policy.c), else the balanced cut.
// The chunk of each of the n layers: the policy's stages where it gives them, else balanced by
// each node group's seconds (c, group_s: a cluster with groups; pp devices of v chunks), else by
// the seconds `sec` the estimate charges each layer on a device (its operators as the ILP split
// them, their resharding; estimate_layer_seconds), else by FLOPs. Seconds weigh what FLOPs
// miss: memory-bound operators (DLRM's embedding lookups), a layer the ILP left unsplit.
static void stages(const pcc_policy *pol, const pcc_layer *L, const double *flops, const double *sec, int n, int chunks,
                   int *stage, const pcc_cluster *c, const double *group_s, int pp, int v) {
    int st = policy_stages(pol, L, flops, n, chunks, stage);
    PCC_ASSERT(st >= 0); // the template's check and --auto's configurations keep the policy's stages feasible
    if (st > 0) return;
    if (group_s) {
        hetero_partition(c, group_s, n, pp, v, stage); // node groups: balance each group's seconds
        return;
    }
    // Interlaced layers (a policy's "stage": "all") run on every stage: the cut is over the others
    // (check_interlaced leaves every stage one), each interlaced layer taking the stage of the
    // layer before it (the first stage before any).
    const double *w = sec ? sec : flops;
    double *ws = calloc((size_t)n + 1, sizeof(double));
    int *at = malloc(sizeof(int) * (size_t)(n + 1)), m = 0;
    bool *own = malloc((size_t)n + 1);
    PCC_ASSERT(ws && at && own);
    for (int i = 0; i < n; i++)
        if ((own[i] = L[i].op < 0 || !policy_interlaced(pol, L[i].op))) ws[m++] = w[i];
    partition(ws, m, chunks, sec ? 1e-15 : 1, at);
    for (int i = 0, k = 0; i < n; i++) stage[i] = own[i] ? at[k++] : k ? at[k - 1] : 0;
    free(ws), free(at), free(own);
}

/* ---- one mesh ---- */

// Bytes of parameter state on each of zw devices that ZeRO stage `zero` shards over (dp x cp),
// before tp and pp split them: weights, gradients and optimizer state, each sharded from its stage.
static double state_bytes(const pcc_totals *t, double zw, int zero) {
    return t->bytes_weights / (zero >= 3 ? zw : 1) + t->bytes_grads / (zero >= 2 ? zw : 1) + t->bytes_optim / (zero >= 1 ? zw : 1);
}

// What a byte the ILP counts costs one device of the mesh (pcc_intra_opts): the ILP sees the
// whole model on the tp group, for the whole batch and one micro-batch, against pp devices'
// memory. Parameters: weights + gradients + optimizer state, ZeRO sharding the optimizer state
// (1), gradients (2) and weights (3) over dp x cp. Activations: 1/dp of the batch, times the
// micro-batches a stage keeps in flight (1F1B: up to pp; GPipe: all; no pipeline: one at a time).
static void memory_scales(const pcc_graph *g, int pp, int dp, int cp, int zero, pcc_pipe_sched sch, pcc_intra_opts *so) {
    pcc_totals t;
    graph_totals(g, &t);
    if (t.bytes_weights <= 0) return;
    so->param_scale = state_bytes(&t, (double)dp * cp, zero) / t.bytes_weights;
    int m = g->micro_batches, fly = pp == 1 ? 1 : sch == PCC_PIPE_GPIPE ? m : (pp < m ? pp : m);
    so->act_scale = (double)fly / dp / cp;
}

// Context parallelism (--cp N), DeepSpeed-Ulysses' form: every operator that has the sequence
// splits it over the cp axis, as dp splits the batch; attention, whose sequence cannot split
// (every query reads every key), splits its query heads there instead, on top of tp's split of
// them (heads / (tp x cp) each), and phase 3's resharding turns the sequence split of q, k and v
// into the head split with an all-to-all over cp, and back after attention (reshard.c); the
// backward pass mirrors them. An operator whose sequence letter is a reduction (the loss, a
// weight's gradient) leaves partial sums over cp, which the gradient synchronization all-reduces
// beside dp's. The letter: attention's heads "n"; else the sequence's first letter that is not a
// reduction, else a reduction; -1 when the op has no sequence (replicated over cp). In ring
// attention's form (ring), attention splits its sequence "s" too (queries, keys and values
// alike: the letter is unsplittable for one operator, and phase 3 makes it ring.c's steps).
static int cp_letter(const pcc_graph *g, const pcc_op *op, int sdim, int cp, bool ring) {
    pcc_letter l[PCC_MAX_LETTERS];
    int n = op_letters(g, op, l), red = -1;
    for (int i = 0; i < n; i++) {
        bool ok = !l[i].nosplit && g->dims[l[i].dim].size % ((int64_t)cp * l[i].grain) == 0;
        if (op->kind == PCC_OP_ATTENTION && ring) {
            if (strcmp(l[i].name, "s") == 0 && g->dims[l[i].dim].size % cp == 0) return i;
        } else if (op->kind == PCC_OP_ATTENTION) {
            if (ok && strcmp(l[i].name, "n") == 0) return i;
        } else if (ok && l[i].dim == sdim) {
            if (!l[i].reduce) return i;
            if (red < 0) red = i;
        }
    }
    return red;
}

// Megatron-LM's sequence parallelism (--sequence-parallel): the operators between a row-parallel
// and the next column-parallel matrix product - the norms, the residual adds, dropout - run split
// along the sequence over the tp group; no other operator splits the sequence. The sequence is
// the dimension attention reads its queries' positions from (axis 1 of q: [B, S, N, D]); -1 when
// the model has no attention.
static int seq_dim(const pcc_graph *g) {
    for (int i = 0; i < g->n_fwd_ops; i++)
        if (g->ops[i].kind == PCC_OP_ATTENTION) return g->tensors[g->ops[i].in[0]].dims[1];
    return -1;
}

static bool seq_region_op(const pcc_op *op) {
    return op->kind == PCC_OP_LAYERNORM || op->kind == PCC_OP_RMSNORM || op->kind == PCC_OP_ADD || op->kind == PCC_OP_DROPOUT;
}

// Whether candidate cd of op stays under sequence parallelism along sdim (-1: off): a norm, add
// or dropout that can split the sequence must, and nothing else may.
static bool seq_keeps(const pcc_op_cands *from, const pcc_op *op, const pcc_cand *cd, int sdim) {
    if (sdim < 0) return true;
    if (!seq_region_op(op)) return cd->dim != sdim;
    bool can = false;
    for (int k = 0; k < from->n; k++) can |= from->c[k].dim == sdim;
    return !can || cd->dim == sdim;
}

// Phase 1's candidates for the tp group of a mesh, as that mesh may use them: the batch is dp's
// unless batch_tp (then its pieces over dp x tp must hold whole ghost batch norm groups),
// --recompute none or full drops the candidates that disagree, sequence parallelism along
// sdim (-1: off) those seq_keeps refuses, context parallelism along cdim (-1: off) those that
// split the sequence over tp (it is cp's), but for sequence parallelism's norms, adds and dropout
// (their sequence split over tp nests inside cp's piece: cp is the slower axis); a policy's pins
// (policy.c) those it refuses, its recompute pin over rc's. NULL when the pins leave an operator
// none (*bare: which).
static pcc_transform *tp_candidates(const pcc_graph *g, const pcc_transform *all, pcc_recompute rc, int bdim,
                                    const bool *bm, int dp, bool batch_tp, int sdim, int cdim, const pcc_policy *pol, int *bare) {
    int tp = all->devices;
    pcc_transform *t = arena_alloc(g->arena, sizeof *t);
    *t = *all;
    t->ops = arena_alloc(g->arena, sizeof(pcc_op_cands) * (size_t)(all->n_ops + 1));
    for (int i = 0; i < t->n_ops; i++) {
        const pcc_op_cands *from = &all->ops[i];
        pcc_op_cands *oc = &t->ops[i];
        *oc = *from;
        oc->c = arena_alloc(g->arena, sizeof(pcc_cand) * (size_t)(from->n + 1));
        bool has_rc = false;
        for (int k = 0; k < from->n; k++) has_rc |= from->c[k].recompute;
        int n = 0, pin = policy_recompute(pol, oc->op);
        // a letter dp cuts along a dimension made of the batch: tp's pieces nest in dp's
        pcc_letter dl[PCC_MAX_LETTERS];
        int dli = dp > 1 && bdim >= 0 ? dp_letter(g, &g->ops[oc->op], bdim, bm, dp) : -1;
        if (dli >= 0) op_letters(g, &g->ops[oc->op], dl);
        bool nest = dli >= 0 && dl[dli].dim != bdim;
        if (pin == 1 && !has_rc && rc != PCC_RECOMPUTE_FULL) return *bare = oc->op, NULL; // phase 1 offers no recompute of it
        if (pin == 0 && rc == PCC_RECOMPUTE_FULL) return *bare = oc->op, NULL; // full recomputes the block from its inputs
        for (int k = 0; k < from->n; k++) {
            const pcc_cand *cd = &from->c[k];
            if (cd->dim >= 0 && cd->dim == bdim && !batch_tp && !policy_splits(pol, oc->op, cd->letter)) continue; // dp's (unless asked)
            if (cd->dim2 >= 0 && cd->dim2 == bdim && ((!batch_tp && !policy_splits(pol, oc->op, cd->letter2)) ||
                                                      !whole_grains(g, &g->ops[oc->op], cd->letter2, (int64_t)dp * all->minor)))
                continue; // the batch over tp's minor axis: as over tp
            if (nest && cd->dim2 >= 0 && strcmp(cd->letter2, dl[dli].name) == 0) continue;
            // over dp x tp, a ghost batch norm's pieces must still hold whole groups
            if (cd->dim >= 0 && cd->dim == bdim && !whole_grains(g, &g->ops[oc->op], cd->letter, (int64_t)dp * tp)) continue;
            if (nest && cd->dim >= 0 && strcmp(cd->letter, dl[dli].name) == 0 &&
                !letter_cuts(g, &g->ops[oc->op], &dl[dli], (int64_t)dp * tp))
                continue;
            if (pin < 0 && rc == PCC_RECOMPUTE_NONE && cd->recompute) continue;
            if (pin < 0 && rc == PCC_RECOMPUTE_FULL && has_rc && !cd->recompute) continue;
            if (pin >= 0 && has_rc && cd->recompute != (pin == 1)) continue;
            if (!seq_keeps(from, &g->ops[oc->op], cd, sdim) || !policy_keeps(pol, oc->op, cd, tp)) continue;
            if (cdim >= 0 && cd->dim == cdim && !(sdim == cdim && seq_region_op(&g->ops[oc->op]))) continue;
            oc->c[n++] = *cd;
        }
        if (n == 0 && pol) return *bare = oc->op, NULL;
        PCC_ASSERT(n > 0);
        oc->n = n;
    }
    return t;
}

// The intra-operator ILP of configuration k's tp group: against the memory the mesh leaves it
// (mode SOLVE), with all memory allowed (RELAXED), or the ILP without its memory row only, its
// answer flagged when it breaks the row (PROBE: no hard solve).
typedef enum solve_mode { SOLVE, RELAXED, PROBE } solve_mode;

static pcc_status tp_schedule(const pcc_graph *g, const pcc_cluster *c, const pcc_transform *all, const pcc_search_opts *o,
                              int bdim, const bool *bm, const pcc_config *k, solve_mode mode, pcc_intra **out) {
    int tp = all->devices;
    // Without its memory row the ILP never recomputes (that only costs time): a probe of recompute
    // auto is recompute none's program, which the memo then holds for both.
    pcc_recompute rc = mode == PROBE && k->rc == PCC_RECOMPUTE_AUTO ? PCC_RECOMPUTE_NONE : k->rc;
    int bare = -1, cp = k->cp > 1 ? k->cp : 1;
    pcc_transform *t = tp_candidates(g, all, rc, bdim, bm, k->dp, k->btp, k->sp && tp > 1 ? seq_dim(g) : -1, cp > 1 ? seq_dim(g) : -1,
                                     o->policy, &bare);
    // A template's own mesh: the policy contradicts itself (exit 2); --auto's configurations and the
    // template's last resort (full recompute where nothing fits) are left out quietly (exit 3).
    if (!t) return policy_bare(o->policy, g, &all->ops[bare], rc == PCC_RECOMPUTE_FULL, o->auto_mesh || k->rc != o->recompute);
    double share = k->budget > 0 ? k->budget : 1;
    pcc_intra_opts so = {.group = {tp, 1}, .group_minor = all->minor, .memory_bytes = mode == RELAXED ? 1e30 : c->memory_bytes * k->pp * share, .ilp = o->ilp,
                         .quiet = true, .bg_dense = o->bg_dense, .zero3 = k->dp * cp > 1 && k->zero >= 3, .bucket_bytes = o->bucket_bytes};
    memory_scales(g, k->pp, k->dp, cp, k->dp * cp > 1 ? k->zero : 0, o->schedule ? o->schedule : PCC_PIPE_1F1B, &so);
    so.ilp.progress = false;
    so.ilp.relax_only = mode == PROBE;
    // One solve may take a twelfth of the budget (5 s of the default 60): GLPK can spend tens of
    // seconds closing the last percent of one configuration's ILP under its memory row (Mixtral
    // 8x7B on 64 A100s: one of 2,358 rows took 20 s to reach 1.0%, its incumbent 2.4 times the
    // best estimate so far), which starved the search of the configuration that won (dp 32 x tp 2,
    // ZeRO-3: 23.68 s, where the search out of time settled for 25.04 s); past it the
    // ILP's incumbent stands for the configuration.
    if (o->auto_mesh && o->deadline_s > 0) so.ilp.time_limit_s = fmin(so.ilp.time_limit_s, o->ilp.time_limit_s / 12);
    if (o->deadline_s > 0) so.ilp.time_limit_s = fmin(so.ilp.time_limit_s, fmax(0.05, o->deadline_s - clock_cpu_s()));
    return ilp_intra(g, c, t, &so, out);
}

static pcc_strategy *make(const pcc_graph *g, const pcc_cluster *c, const pcc_search_opts *o, const pcc_intra *sc,
                          int bdim, const bool *bm, const pcc_config *k, const pcc_layer *L, const double *flops,
                          const double *group_s, int nl) {
    pcc_strategy *s = arena_alloc(g->arena, sizeof *s);
    int pp = k->pp, dp = k->dp, cp = k->cp > 1 ? k->cp : 1, tq = k->tq > 1 ? k->tq : 1;
    s->mesh[PCC_AX_PP] = pp, s->mesh[PCC_AX_DP] = dp, s->mesh[PCC_AX_CP] = cp, s->mesh[PCC_AX_TP] = k->tp / tq, s->mesh[PCC_AX_TQ] = tq;
    s->config = *k;
    s->micro_batches = g->micro_batches;
    s->schedule = pp == 1 ? PCC_PIPE_GPIPE : o->schedule ? o->schedule : PCC_PIPE_1F1B;
    s->zero = dp * cp > 1 ? k->zero : 0;
    s->batch_dim = bdim;
    s->seq_dim = cp > 1 ? seq_dim(g) : -1;
    s->bg_dense = o->bg_dense;
    s->bucket_bytes = o->bucket_bytes;
    s->zero3_late = o->zero3_late || k->late;
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
        if (dp > 1 && bdim >= 0) s->letter[PCC_AX_DP][i] = dp_letter(g, op, bdim, bm, dp);
        if (cp > 1) s->letter[PCC_AX_CP][i] = cp_letter(g, op, s->seq_dim, cp, k->cp_ring);
        if (cd->dim >= 0) s->letter[PCC_AX_TP][i] = letter_by_name(g, op, cd->letter);
        PCC_ASSERT(cd->dim < 0 || s->letter[PCC_AX_TP][i] >= 0);
        // a 2-D tp group: the second letter over its minor axis, or one letter over both
        if (tq > 1) s->letter[PCC_AX_TQ][i] = cd->dim2 >= 0 ? letter_by_name(g, op, cd->letter2) : s->letter[PCC_AX_TP][i];
        // Phase 3 recomputes inside blocks. --recompute full is Megatron-LM's activation
        // checkpointing: every block operator runs again in the backward pass and only the
        // block's inputs are kept, matrix products included (their outputs are kept by no
        // backward operator, so phase 1 offers them no recompute candidate of their own).
        int pin = policy_recompute(o->policy, i);
        s->recompute[i] = op->block >= 0 && (pin >= 0 ? pin == 1 : cd->recompute || k->rc == PCC_RECOMPUTE_FULL);
        s->cause[i] = policy_cause(o->policy, i, sc->cause[i]);
    }
    s->op_stage = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_ops + 1));
    for (int i = 0; i < n && pp > 1; i++)
        if (policy_interlaced(o->policy, i)) { // its pinned letter over pp (also where tp is 1), else its tp letter
            if (!s->interlaced) s->interlaced = arena_alloc(g->arena, sizeof(bool) * (size_t)(n + 1));
            s->interlaced[i] = true;
            const char *pin = policy_split_letter(o->policy, i);
            s->letter[PCC_AX_PP][i] = pin ? letter_by_name(g, &g->ops[i], pin) : s->letter[PCC_AX_TP][i];
        }
    s->copy_stage = arena_alloc(g->arena, sizeof(int *) * (size_t)(g->n_blocks + 1));
    for (int i = 0; i < g->n_ops; i++) s->op_stage[i] = -1;
    for (int b = 0; b < g->n_blocks; b++)
        if (g->blocks[b].fwd < 0) s->copy_stage[b] = arena_alloc(g->arena, sizeof(int) * (size_t)g->blocks[b].repeat);
    int v = s->virtual_stages = pp > 1 && k->v > 1 ? k->v : 1;
    int *chunk = arena_alloc(g->arena, sizeof(int) * (size_t)(nl + 1));
    const double *sec = pp * v > 1 && !group_s ? estimate_layer_seconds(g, c, sc, s, L, nl) : NULL;
    stages(o->policy, L, flops, sec, nl, pp * v, chunk, group_s ? c : NULL, group_s, pp, v);
    for (int i = 0; i < nl; i++) {
        if (L[i].op >= 0) s->op_stage[L[i].op] = chunk[i];
        else s->copy_stage[L[i].block][L[i].copy] = chunk[i];
    }
    estimate_step(g, c, sc, s);
    s->est_step_s = s->est.step_s;
    if (group_s) { // node groups: what the FLOP-balanced cut would have given, for the report
        partition(flops, nl, pp * v, 1, chunk);
        hetero_compare(g, c, sc, s, chunk);
    }
    s->est_memory_bytes = sc->memory_bytes / pp;
    s->intra = sc;
    return s;
}

/* ---- the search ---- */

struct pcc_space {
    const pcc_graph *g;
    const pcc_cluster *c;
    const pcc_transforms *t;
    const pcc_search_opts *o;
    int N, bdim, nl;            // devices; the batch dimension; layers
    const bool *bm;             // per model dimension: made of the batch (batch_dims)
    int64_t bsize;              // the batch dimension's size (1 when none)
    const pcc_layer *L;
    const double *flops;        // per layer
    const double *group_s;      // node groups: per group, per layer, its seconds (hetero.c); NULL: one group
    const pcc_cluster *fast;    // the group whose figures bound every group's times from below (the cluster with one)
    double *lb_s;               // per layer: a lower bound on its seconds, forward and backward, one micro-batch, one device
    double *lb_rc_s;            // per layer: the same for its recomputed forward (--recompute full)
    pcc_config *k;              // --auto's configurations
    int n, cap;
    struct floor_memo {         // per (dp, tp): estimate_floor per layer, plain and with recompute full,
        int dp, tp;             // and minus half its attention's (ring attention's floor: ring_floor)
        double *plain, *full, *ring, *ring_full;
    } *fl;
    int n_fl, cap_fl;
    bool whole_tp;              // --auto tries tp over every device with the batch over it too (whole_tp_worth)
    bool long_seq;              // --auto tries context parallelism where dp could take more of the batch (long_seq)
};

// Seconds op o cannot take less than on one device: its FLOPs at the best rate the cost model
// ever gives (the tensor-core peak of its dtype at the sustained GEMM efficiency, or the vector
// peak). No bound (0) with a profile table, whose times are measured, not modelled.
static double op_floor_s(const pcc_graph *g, const pcc_cluster *c, const pcc_op *op) {
    if (c->profile) return 0;
    pcc_dtype dt = g->tensors[op->nout ? op->out[0] : op->in[0]].dtype;
    double mm = cost_peak_flops(c, dt, true) * (c->gemm_efficiency > 0 ? c->gemm_efficiency : 1);
    double vec = cost_peak_flops(c, dt, false), best = mm > vec ? mm : vec;
    return 0.999 * op_flops(g, op) / best;
}

// Per layer: the floor of its forward and backward operators, and of its forward alone.
static void space_floors(pcc_space *S) {
    const pcc_graph *g = S->g;
    double *fw = arena_alloc(g->arena, sizeof(double) * (size_t)(g->n_fwd_ops + 1));
    double *all = arena_alloc(g->arena, sizeof(double) * (size_t)(g->n_fwd_ops + 1));
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase == PCC_PHASE_FWD) fw[o] = op_floor_s(g, S->fast, op), all[o] += fw[o];
        else if (op->phase == PCC_PHASE_BWD && op->fwd >= 0) all[op->fwd] += op_floor_s(g, S->fast, op);
    }
    S->lb_s = arena_alloc(g->arena, sizeof(double) * (size_t)(S->nl + 1));
    S->lb_rc_s = arena_alloc(g->arena, sizeof(double) * (size_t)(S->nl + 1));
    for (int i = 0; i < S->nl; i++) {
        const pcc_layer *l = &S->L[i];
        if (l->op >= 0) {
            S->lb_s[i] = all[l->op];
            continue;
        }
        const pcc_block *bl = &g->blocks[l->block];
        for (int k = bl->first_op; k < bl->first_op + bl->n_ops; k++) S->lb_s[i] += all[k], S->lb_rc_s[i] += fw[k];
    }
}

// Whether --auto tries tp over every device of a GPU cluster with the batch split over it too
// (DLRM's layout): where data parallelism's all-reduce of every gradient over all the devices
// would take longer than the step's FLOPs at the tensor-core peak on them, the parameters
// outweighing their work (embedding tables), so that sharding them can win. Elsewhere
// (transformers, whose compute outweighs their synchronization many times) the mesh would only
// cost the search an ILP over every device, minutes on a large model.
static bool whole_tp_worth(const pcc_space *S, const pcc_totals *tot) {
    const pcc_cluster *c = S->fast;
    double compute = (tot->flops_fwd + tot->flops_bwd) / ((double)S->N * cost_peak_flops(c, S->g->dtype, true));
    return cost_collective_s(c, PCC_COLL_ALL_REDUCE, tot->bytes_grads, (pcc_group_shape){S->N, 1}) > compute;
}

// Whether one sample's activations, split over a node's devices, outgrow a device: then data
// parallelism cannot hold a sample per device without recompute, however the batch divides, and
// --auto tries context parallelism (which splits the sequence) beside it, not only where dp
// cannot take more of the batch (Llama 3 8B at 128k tokens on 8 H100s: cp 8 with full
// recompute, where dp and tp alone do not fit and cp 2 was all --auto tried). Elsewhere dp
// takes the batch at no communication in the forward pass, and the search spares the cp meshes.
static bool long_seq(const pcc_space *S, const pcc_totals *tot) {
    const pcc_cluster *c = S->c;
    int node = c->cpu || c->devices_per_node < 1 ? S->N : c->devices_per_node;
    return S->bsize > 0 && tot->bytes_acts / (double)S->bsize / node > (double)c->memory_bytes;
}

static void search_init(pcc_space *S, const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t,
                        const pcc_search_opts *o) {
    *S = (pcc_space){.g = g, .c = c, .t = t, .o = o, .N = c->n_devices, .bdim = graph_batch_dim(g)};
    S->bsize = S->bdim >= 0 ? g->dims[S->bdim].size : 1;
    S->bm = batch_dims(g, S->bdim);
    S->L = graph_layers(g, &S->nl);
    S->flops = layer_flops(g, S->L, S->nl);
    S->group_s = hetero_layer_seconds(g, c, S->L, S->nl);
    S->fast = c;
    for (int i = 0; c->groups && i < c->n_groups; i++) // the best peak: the bounds hold on every stage
        if (i == 0 || cost_peak_flops(&c->groups[i], g->dtype, true) > cost_peak_flops(S->fast, g->dtype, true)) S->fast = &c->groups[i];
    pcc_totals tot;
    graph_totals(g, &tot);
    S->whole_tp = whole_tp_worth(S, &tot);
    S->long_seq = long_seq(S, &tot);
}

// Whether tp spans nodes (a GPU cluster's tp group larger than a node).
static bool tp_spans(const pcc_space *S, int tp) { return tp > S->c->devices_per_node && !S->c->cpu; }

// --auto's meshes: tp inside a node, or the whole cluster with the batch split over it too where
// that is worth trying (whole_tp_worth: DLRM's layout, the embedding tables sharded over every
// device with all-to-all exchanges, the dense layers data-parallel beside them; with --sync
// background always, ShadowSync's, their replicas averaged in the background), pp at most the
// layers (and --pp's where given), dp dividing the batch; cp x tp dividing the devices.
static bool auto_mesh_ok(const pcc_space *S, int tp, int pp, int cp) {
    int N = S->N;
    bool whole = tp == N && (S->o->bg_dense || (S->whole_tp && S->bdim >= 0 && S->bsize % N == 0));
    if (N % ((int64_t)tp * cp) || (tp_spans(S, tp) && !whole)) return false;
    if ((N / tp / cp) % pp || pp > S->nl || !cluster_stages_fit(S->c, pp)) return false; // node groups: a stage in one
    int dp = N / tp / cp / pp;
    if (dp > 1 && (S->bdim < 0 || S->bsize % dp != 0)) return false;
    return !S->o->pp || pp == S->o->pp;
}

// Ring attention over the sequence in zigzag order (--cp-form zigzag): the plan's inputs hold
// the sequence permuted (chunks c and 2 cp - 1 - c on cp rank c; emit.c marks them), every
// operator but attention runs per position or sums over positions, and attention's steps mask
// by the logical positions (preserve.c). That holds unless a trained parameter carries the
// sequence cp splits beside an activation's positions (a table of positions added element-wise
// would meet its rows permuted; an optimizer step on such a table is fine: rows against rows; an
// embedding looks its rows up by the position ids' values, which are inputs, and is fine; a
// constant, rotary embeddings' cos and sin, is held in zigzag order too, emit.c marking it and
// planrun filling and loading it by logical position, unless it carries the sequence twice), or
// a block reads such a tensor through its inputs (looked through to the model's), or an operator
// picks positions along it (slice, concat, split, gather, index_select along that axis), or
// dropout runs over a tensor that carries it twice ([S, S]: emit_zigzag_dropout names one
// dimension of zigzag order; dropout along one is fine: its attrs give the kernels the dimension
// and the chunks, and they draw the mask by logical positions, as attention's dropout does). The
// op in the way (its parameter, or its output, in *t), or -1.
// Whether tensor x carries dimension d more than once.
static bool seq_twice(const pcc_graph *g, int x, int d) {
    int n = 0;
    for (int i = 0; i < g->tensors[x].rank; i++) n += g->tensors[x].dims[i] == d;
    return n > 1;
}

// The model's tensor that x, a block's input, is bound to (graph_check: an in-binding reads a
// top-level tensor into its own block), or x.
static int bound_outer(const pcc_graph *g, int x) {
    int b = g->tensors[x].block;
    for (int i = 0; b >= 0 && i < g->blocks[b].n_in; i++)
        if (g->blocks[b].in[i].inner == x) return g->blocks[b].in[i].outer;
    return x;
}

static int zigzag_blocker(const pcc_graph *g, int sdim, int cp, int *t) {
    for (int i = 0; i < g->n_ops; i++) {
        const pcc_op *op = &g->ops[i];
        int li = cp_letter(g, op, sdim, cp, true);
        if (li < 0) continue;
        pcc_letter l[PCC_MAX_LETTERS];
        op_letters(g, op, l);
        pcc_op_kind k = op->kind;
        bool lookup = k == PCC_OP_EMBEDDING || k == PCC_OP_EMBEDDING_GRAD || k == PCC_OP_EMBEDDING_BAG || k == PCC_OP_EMBEDDING_BAG_GRAD;
        bool picks = k == PCC_OP_SLICE || k == PCC_OP_SLICE_GRAD || k == PCC_OP_CONCAT || k == PCC_OP_SPLIT || k == PCC_OP_GATHER ||
                     k == PCC_OP_GATHER_GRAD || k == PCC_OP_INDEX_SELECT || k == PCC_OP_INDEX_SELECT_GRAD;
        if (picks && l[li].axis[0] == op->attrs.axis) return *t = op->out[0], i;
        if ((k == PCC_OP_DROPOUT || k == PCC_OP_DROPOUT_GRAD) && seq_twice(g, op->in[0], sdim)) return *t = op->out[0], i;
        int param = -1;
        bool act = false;
        for (int j = 0; j < op->nin + op->nout && !lookup; j++) {
            int x = j < op->nin ? op->in[j] : op->out[j - op->nin], o = bound_outer(g, x);
            if (l[li].axis[j] < 0) continue;
            const pcc_tensor *T = &g->tensors[o];
            if (T->kind == PCC_T_PARAM && T->frozen && !seq_twice(g, o, sdim)) continue; // marked: in zigzag order too
            if (T->kind == PCC_T_PARAM || graph_is_param_grad(g, o) || T->kind == PCC_T_STATE) param = o;
            else act = true;
        }
        if (param >= 0 && act) return *t = param, i;
    }
    return -1;
}

// Whether some attention of the model is causal (where the zigzag order balances the ring).
static bool any_causal(const pcc_graph *g) {
    for (int i = 0; i < g->n_fwd_ops; i++)
        if (g->ops[i].kind == PCC_OP_ATTENTION && g->ops[i].attrs.causal) return true;
    return false;
}

// Whether --auto's ring form at cp is the zigzag one: causal attention, the sequence cut into 2 cp
// chunks, no parameter along it.
static bool auto_zigzag(const pcc_graph *g, int sdim, int cp) {
    int t;
    return any_causal(g) && g->dims[sdim].size % (2 * (int64_t)cp) == 0 && zigzag_blocker(g, sdim, cp, &t) < 0;
}

// --cp against the model: attention says which dimension is the sequence; cp divides it, and
// its query heads split over tp x cp (Ulysses' all-to-all gives each cp rank whole heads).
static pcc_status cp_check(const pcc_space *S, int cp, int tp) {
    const pcc_graph *g = S->g;
    int sdim = seq_dim(g);
    if (sdim < 0)
        return diag(g->file, "/ops", "--cp %d splits the sequence over devices, but the model has no attention operator to say "
                    "which dimension is the sequence", cp);
    if (g->dims[sdim].size % cp != 0)
        return diag(g->file, g->dims[sdim].ptr, "--cp %d does not divide the sequence dimension %s = %lld", cp, g->dims[sdim].name,
                    (long long)g->dims[sdim].size);
    if (S->o->sequence_parallel && g->dims[sdim].size % ((int64_t)cp * tp) != 0)
        return diag(g->file, g->dims[sdim].ptr, "--sequence-parallel with --cp %d: --cp x --tp = %d does not divide the sequence "
                    "dimension %s = %lld", cp, cp * tp, g->dims[sdim].name, (long long)g->dims[sdim].size);
    int zt, zo = S->o->cp_zigzag ? zigzag_blocker(g, sdim, cp, &zt) : -1;
    if (S->o->cp_zigzag && g->dims[sdim].size % (2 * (int64_t)cp) != 0)
        return diag(g->file, g->dims[sdim].ptr, "--cp %d --cp-form zigzag cuts the sequence into 2 x %d chunks, which do not divide "
                    "the sequence dimension %s = %lld", cp, cp, g->dims[sdim].name, (long long)g->dims[sdim].size);
    bool zparam = zo >= 0 && (g->tensors[zt].kind == PCC_T_PARAM || graph_is_param_grad(g, zt) || g->tensors[zt].kind == PCC_T_STATE);
    bool zdrop = zo >= 0 && (g->ops[zo].kind == PCC_OP_DROPOUT || g->ops[zo].kind == PCC_OP_DROPOUT_GRAD);
    if (zo >= 0)
        return diag(g->file, g->ops[zo].ptr, "--cp %d --cp-form zigzag stores the sequence in zigzag order, but %s \"%s\" %s; use "
                    "--cp-form ring", cp, zparam ? "parameter" : "the operator of", g->tensors[zt].name,
                    zparam ? "runs along it here (only inputs are fed permuted)"
                    : zdrop ? "is dropout over a tensor that carries it twice (its attrs name one dimension of zigzag order)"
                            : "picks positions along it");
    for (int i = 0; i < g->n_fwd_ops; i++) {
        const pcc_op *op = &g->ops[i];
        if (op->kind != PCC_OP_ATTENTION) continue;
        int n = g->tensors[op->in[0]].dims[2];
        if (S->o->cp_ring) {
            if (op->nin > 3 || g->tensors[op->in[1]].dims[1] != sdim)
                return diag(g->file, op->ptr, "--cp %d --cp-form ring: ring attention passes the keys of one sequence "
                            "around the cp ranks; this attention has %s", cp, op->nin > 3 ? "a bias" : "keys of another length");
            continue;
        }
        if (g->dims[n].size % ((int64_t)cp * tp) != 0)
            return diag(g->file, op->ptr, "--cp %d: attention splits its query heads over --tp x --cp = %d (DeepSpeed-Ulysses' "
                        "all-to-all), which does not divide the heads dimension %s = %lld", cp, cp * tp, g->dims[n].name,
                        (long long)g->dims[n].size);
    }
    return PCC_OK;
}

// --auto's context parallelism: cp (a power of two, > 1) on a mesh of dp x tp where the template
// would take it (cp_check: the sequence divides by cp, the heads by cp x tp; not with --sync
// background, nor under a policy, whose pins are on pp x dp x tp). Where dp could take more of
// the step's samples (2 dp divides the batch times the micro-batches), a cp split is the same
// split of the work as dp's with cp's traffic added - but for the ring in zigzag order over
// causal attention, whose blocks above the diagonal are skipped where unfused attention scores
// them all (estimate.c's est_ring), so there only cp 2 in zigzag order, the least traffic for
// that saving (GPT-39B on 512 A100s: dp 256 x cp 2 with ZeRO-3, 6.76 s, against dp 512's 7.00
// s). A pruning rule, not a bound: every other cp configuration there cost --auto's search time
// on models trained on many sequences (GPT 1T on 3072 GPUs: 2.8 -> 43.8 s with them all).
// In ring attention's form (ring), attention keeps its heads (tp's split of them alone) but must
// be self-attention without a bias (cp_check's rule).
static bool auto_cp_ok(const pcc_space *S, int cp, int tp, int dp, bool ring) {
    const pcc_graph *g = S->g;
    int sdim = seq_dim(g);
    if (S->o->bg_dense || S->o->policy || sdim < 0 || g->dims[sdim].size % cp != 0) return false;
    if (S->bdim >= 0 && S->bsize * g->micro_batches % (2 * (int64_t)dp) == 0 && !S->long_seq &&
        (cp != 2 || !ring || !auto_zigzag(g, sdim, cp)))
        return false;
    for (int i = 0; i < g->n_fwd_ops; i++) {
        const pcc_op *op = &g->ops[i];
        if (op->kind != PCC_OP_ATTENTION) continue;
        int64_t heads = g->dims[g->tensors[op->in[0]].dims[2]].size;
        if (ring ? op->nin > 3 || g->tensors[op->in[1]].dims[1] != sdim || heads % tp != 0 : heads % ((int64_t)cp * tp) != 0)
            return false;
    }
    return true;
}

// Whether configuration k's parameter state alone (weights, gradients, optimizer state, split
// over tp x pp at best, ZeRO's over dp x cp) fits a device: a cp
// configuration that does not is left out before its ILP (a bound, not a heuristic). t: the
// graph's totals.
static bool cp_state_fits(const pcc_space *S, const pcc_totals *t, const pcc_config *k) {
    double zw = (double)k->dp * (k->cp > 1 ? k->cp : 1);
    return state_bytes(t, zw, zw > 1 ? k->zero : 0) / ((double)k->tp * k->pp) <= S->c->memory_bytes;
}

// The template's numbers against the cluster and the model.
static pcc_status template_check(const pcc_space *S, int dp, int tp, int pp) {
    const pcc_graph *g = S->g;
    const pcc_search_opts *o = S->o;
    int N = S->N, bdim = S->bdim, nl = S->nl, cp = o->cp > 1 ? o->cp : 1;
    int64_t bsize = S->bsize;
    if (cp > 1 && (int64_t)dp * cp * tp * pp != N)
        return diag(S->c->file, "", "--dp %d x --cp %d x --tp %d x --pp %d is %lld devices, but the cluster has %d (set --devices "
                    "or --nodes)", dp, cp, tp, pp, (long long)dp * cp * tp * pp, N);
    if ((int64_t)dp * tp * pp != N && cp == 1)
        return diag(S->c->file, "", "--dp %d x --tp %d x --pp %d is %lld devices, but the cluster has %d (set --devices or --nodes)",
                    dp, tp, pp, (long long)dp * tp * pp, N);
    pcc_status st = cp > 1 ? cp_check(S, cp, tp) : PCC_OK;
    if (st) return st;
    if (dp > 1 && (bdim < 0 || bsize % dp != 0))
        return diag(g->file, bdim >= 0 ? g->dims[bdim].ptr : "",
                    bdim >= 0 ? "--dp %d does not divide the batch dimension %s = %lld" : "--dp %d: the model has no input with a batch dimension%s%lld",
                    dp, bdim >= 0 ? g->dims[bdim].name : "", (long long)(bdim >= 0 ? bsize : 0));
    int sdim = seq_dim(g);
    if (o->sequence_parallel && sdim < 0)
        return diag(g->file, "/ops", "--sequence-parallel splits the norms, residual adds and dropout along the sequence, but the "
                    "model has no attention operator to say which dimension is the sequence");
    if (o->sequence_parallel && g->dims[sdim].size % tp != 0)
        return diag(g->file, g->dims[sdim].ptr, "--sequence-parallel: --tp %d does not divide the sequence dimension %s = %lld", tp,
                    g->dims[sdim].name, (long long)g->dims[sdim].size);
    if (!cluster_stages_fit(S->c, pp))
        return diag(S->c->file, "/groups", "--pp %d puts a pipeline stage (%d devices) across two node groups of different "
                    "devices; each stage must lie inside one group: choose --pp so that every group's devices are a whole "
                    "number of stages", pp, N / pp);
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
    return PCC_OK;
}

// Configuration k's strategy: its ILP (mode PROBE: the ILP without its memory row, the strategy
// marked inexact when that answer breaks the row), the stages and the estimate. Where the ILP
// finds no choice that fits its memory model, --recompute none and full take their choice with
// all memory allowed, as a template does (the memory planner has the last word); auto has none.
static pcc_status build(const pcc_space *S, const pcc_transform *all, const pcc_config *k, solve_mode mode, pcc_strategy **out) {
    pcc_intra *sc = NULL;
    pcc_status st = tp_schedule(S->g, S->c, all, S->o, S->bdim, S->bm, k, mode, &sc);
    if (st == PCC_ERR_INFEASIBLE && mode == SOLVE && k->rc != PCC_RECOMPUTE_AUTO)
        st = tp_schedule(S->g, S->c, all, S->o, S->bdim, S->bm, k, RELAXED, &sc);
    if (st) return st;
    *out = make(S->g, S->c, S->o, sc, S->bdim, S->bm, k, S->L, S->flops, S->group_s, S->nl);
    (*out)->exact = !sc->ilp.row_violated;
    return PCC_OK;
}

// The template: one strategy (Megatron-LM's).
static pcc_status search_template(pcc_space *S, pcc_strategy ***out, int *n_out) {
    const pcc_graph *g = S->g;
    const pcc_cluster *c = S->c;
    const pcc_search_opts *o = S->o;
    int dp = o->dp ? o->dp : 1, tp = o->tp ? o->tp : 1, pp = o->pp ? o->pp : 1, bdim = S->bdim;
    pcc_status st = template_check(S, dp, tp, pp);
    if (st) return st;
    if (tp > c->devices_per_node && !c->cpu)
        warn("--tp %d spans nodes (%d devices per node): tensor-parallel collectives cross the network", tp, c->devices_per_node);
    // The batch over tp too where asked (--tp-batch), or where the dense layers' replicas are
    // averaged in the background (ShadowSync's layout needs data-parallel operators in the group).
    bool btp_ok = tp > 1 && bdim >= 0 && S->bsize % ((int64_t)dp * tp) == 0, btp = o->tp_batch || (o->bg_dense && btp_ok);
    if (o->tp_batch && !btp_ok)
        return diag(g->file, bdim >= 0 ? g->dims[bdim].ptr : "",
                    bdim >= 0 ? "--tp-batch: --dp x --tp = %d does not divide the batch dimension %s = %lld"
                              : "--tp-batch: the model has no input with a batch dimension%.0d%s%.0lld",
                    dp * tp, bdim >= 0 ? g->dims[bdim].name : "", (long long)S->bsize);
    const pcc_transform *all = transform_find(S->t, tp);
    PCC_ASSERT(all);
    pcc_config k = {.pp = pp, .dp = dp, .tp = tp, .v = o->virtual_stages > 1 ? o->virtual_stages : 1, .zero = o->zero,
                    .cp = o->cp > 1 ? o->cp : 1, .cp_ring = o->cp_ring,
                    .cp_zigzag = o->cp > 1 && o->cp_zigzag, .btp = btp, .sp = o->sequence_parallel, .rc = o->recompute,
                    .tq = all->minor};
    pcc_strategy *s;
    st = build(S, all, &k, SOLVE, &s);
    if (st == PCC_ERR_INFEASIBLE) { // --recompute auto: every block operator recomputed, all memory allowed
        k.rc = PCC_RECOMPUTE_FULL;
        st = build(S, all, &k, RELAXED, &s);
    }
    if (st) return st;
    *out = arena_alloc(g->arena, sizeof(pcc_strategy *));
    (*out)[0] = s, *n_out = 1;
    return PCC_OK;
}

// --auto's configurations on this graph: every mesh, ZeRO from the stage asked for up (1 and 3;
// 2 only when asked), where each replica's batch divides by tp the batch over tp too (Alpa's
// mixed plans), with and without Megatron-LM's sequence parallelism where tp (x cp) divides the
// sequence, recompute as asked (auto: also none and full, Megatron-LM's two, so that every
// template is among the candidates), interleaving where the pipeline can run it (pp 2), and
// context parallelism over every power of two auto_cp_ok allows, in both forms (Ulysses' and ring
// attention's; the ring in zigzag order where attention is causal, auto_zigzag). The co-shard
// round (o->beat_s, driver.c) leaves full recompute out: co-shard is there to spare it.
static void space_enumerate(pcc_space *S) {
    const pcc_search_opts *o = S->o;
    pcc_recompute rcs[3] = {o->recompute, PCC_RECOMPUTE_NONE, PCC_RECOMPUTE_FULL};
    int nrc = o->recompute == PCC_RECOMPUTE_AUTO ? 3 : 1, sdim = seq_dim(S->g);
    pcc_totals tot;
    graph_totals(S->g, &tot);
    for (int cp = 1; cp <= S->N; cp *= 2)
    for (int tp = 1; tp <= S->N / cp; tp++)
        for (int pp = 1; pp <= S->N / tp / cp; pp++) {
            if (!auto_mesh_ok(S, tp, pp, cp)) continue;
            int dp = S->N / tp / cp / pp;
            for (int ring = 0; ring <= (cp > 1); ring++) {
            if (cp > 1 && !auto_cp_ok(S, cp, tp, dp, ring)) continue;
            bool zz = ring && auto_zigzag(S->g, sdim, cp);
            bool btp_ok = tp > 1 && cp == 1 && S->bdim >= 0 && S->bsize % ((int64_t)dp * tp) == 0;
            bool sp_ok = tp > 1 && !tp_spans(S, tp) && sdim >= 0 && S->g->dims[sdim].size % ((int64_t)tp * cp) == 0;
            bool inter = o->virtual_stages > 1 && pp == 2 && pp * o->virtual_stages <= S->nl && S->g->micro_batches % pp == 0;
            for (int zero = o->zero; zero <= (o->bg_dense ? o->zero : 3); zero++) // background sync keeps whole replicas
                for (int btp = tp_spans(S, tp) && !o->bg_dense; btp <= (int)btp_ok; btp++) // across nodes only mixed
                    for (int sp = 0; sp <= (int)sp_ok; sp++)
                        for (int r = 0; r < nrc; r++)
                            for (int v = 0; v <= (int)inter; v++) {
                                if ((zero == 2 && o->zero != 2) || (zero > o->zero && dp * cp == 1)) continue;
                                if (o->beat_s > 0 && rcs[r] == PCC_RECOMPUTE_FULL) continue; // driver_coshard's round
                                pcc_config k = {.pp = pp, .dp = dp, .tp = tp, .v = v ? o->virtual_stages : 1, .zero = zero,
                                                .cp = cp, .cp_ring = ring, .cp_zigzag = zz, .btp = btp, .sp = sp, .rc = rcs[r]};
                                if (cp > 1 && !cp_state_fits(S, &tot, &k)) continue;
                                if (policy_config_ok(o->policy, S->g, &k, S->L, S->flops, S->nl)) *VEC_PUSH(S->g->arena, S->k, S->n, S->cap) = k;
                            }
            }
        }
}

pcc_space *space_init(const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, const pcc_search_opts *o) {
    pcc_space *S = arena_alloc(g->arena, sizeof *S);
    search_init(S, g, c, t, o);
    space_floors(S);
    space_enumerate(S);
    return S;
}

int space_count(const pcc_space *S) { return S->n; }
const pcc_config *space_config(const pcc_space *S, int i) { return &S->k[i]; }
const pcc_graph *space_graph(const pcc_space *S) { return S->g; }
const pcc_cluster *space_cluster(const pcc_space *S) { return S->c; }

// Whether the layers (seconds w, prefix sums P) cut into pp runs in order can keep every run's
// m * its seconds + the seconds before it (pipeline_floor) within T. Greedy: each run as long as
// T allows, since a later start only lowers what the runs after it need.
static bool floor_fits(const double *P, int nl, int pp, int m, double T) {
    int at = 0;
    for (int d = 0; d < pp && at < nl; d++) {
        int start = at;
        while (at < nl && m * (P[at + 1] - P[start]) + P[start] <= T) at++;
    }
    return at == nl;
}

// A lower bound on the estimate's pipeline (estimate.c, pipeline_makespan) from per-layer lower
// bounds on the seconds (forward and backward, one micro-batch): every device works m micro-
// batches through its layers, the first only once the forward passes of the stages before it
// have reached it, and the backward passes of those stages still follow its last one. The plan's
// cut balances its own seconds (stages), which the floor does not know, so the bound is the least
// over every cut into pp runs of layers (the greedy of floor_fits, bisected). With virtual stages
// the chunks before a device's first can be as short as the cut makes them: m times the average
// device's seconds, or the longest layer's.
static double pipeline_floor(const pcc_space *S, const pcc_config *k, const double *a, const double *b, double scale) {
    int pp = k->pp, m = S->g->micro_batches, nl = S->nl;
    double *P = arena_alloc(S->g->arena, sizeof(double) * (size_t)(nl + 1)), longest = 0;
    for (int l = 0; l < nl; l++) {
        double w = (a[l] + (b ? b[l] : 0)) * scale;
        P[l + 1] = P[l] + w, longest = fmax(longest, w);
    }
    double lo = m * fmax(P[nl] / pp, longest);
    if (k->v > 1 || pp == 1) return lo;
    double hi = m * P[nl];
    for (int it = 0; it < 50 && hi - lo > 1e-9 * hi; it++) {
        double mid = (lo + hi) / 2;
        if (floor_fits(P, nl, pp, m, mid)) hi = mid;
        else lo = mid;
    }
    return lo;
}

double space_bound(const pcc_space *S, int i) {
    const pcc_config *k = &S->k[i];
    return pipeline_floor(S, k, S->lb_s, k->rc == PCC_RECOMPUTE_FULL ? S->lb_rc_s : NULL, 1 / ((double)k->dp * (k->cp > 1 ? k->cp : 1) * k->tp));
}

// estimate_floor per layer for the mesh's dp and tp, computed once.
static const struct floor_memo *floors(pcc_space *S, int dp, int tp) {
    for (int i = 0; i < S->n_fl; i++)
        if (S->fl[i].dp == dp && S->fl[i].tp == tp) return &S->fl[i];
    const pcc_graph *g = S->g;
    int nf = g->n_fwd_ops;
    int *dl = arena_alloc(g->arena, sizeof(int) * (size_t)(nf + 1));
    double *fb = arena_alloc(g->arena, sizeof(double) * (size_t)(nf + 1)), *ffb = arena_alloc(g->arena, sizeof(double) * (size_t)(nf + 1));
    for (int o = 0; o < nf; o++) dl[o] = dp > 1 && S->bdim >= 0 ? dp_letter(g, &g->ops[o], S->bdim, S->bm, dp) : -1;
    const pcc_transform *all = transform_find(S->t, tp);
    PCC_ASSERT(all);
    estimate_floor(g, S->fast, all, dl, dp, S->bdim, fb, ffb);
    struct floor_memo *f = VEC_PUSH(g->arena, S->fl, S->n_fl, S->cap_fl);
    size_t bytes = sizeof(double) * (size_t)(S->nl + 1);
    *f = (struct floor_memo){dp, tp, arena_alloc(g->arena, bytes), arena_alloc(g->arena, bytes), arena_alloc(g->arena, bytes),
                             arena_alloc(g->arena, bytes)};
    for (int l = 0; l < S->nl; l++) {
        const pcc_layer *L = &S->L[l];
        int lo = L->op >= 0 ? L->op : g->blocks[L->block].first_op, hi = L->op >= 0 ? L->op + 1 : lo + g->blocks[L->block].n_ops;
        for (int o = lo; o < hi; o++) {
            bool attn = g->ops[o].kind == PCC_OP_ATTENTION;
            f->plain[l] += fb[o], f->full[l] += ffb[o];
            f->ring[l] -= attn ? fb[o] / 2 : 0, f->ring_full[l] -= attn ? ffb[o] / 2 : 0;
        }
    }
    return f;
}

// With context parallelism, the floor of the mesh without it over cp (every operator's work and
// tp traffic are the sequence's, which cp splits; its all-to-alls only add). In ring attention's
// form, attention's share counts half: a causal zigzag step computes half a block (estimate.c's
// est_ring), less than attention's whole work over cp.
double space_floor(pcc_space *S, const pcc_config *k) {
    const struct floor_memo *f = floors(S, k->dp, k->tp);
    bool full = k->rc == PCC_RECOMPUTE_FULL;
    const double *ring = !k->cp_ring ? NULL : full ? f->ring_full : f->ring;
    return 0.999 * pipeline_floor(S, k, full ? f->full : f->plain, ring, 1.0 / (k->cp > 1 ? k->cp : 1));
}

pcc_status space_build(const pcc_space *S, const pcc_config *k, bool probe, pcc_strategy **out) {
    const pcc_transform *all = transform_find(S->t, k->tp);
    PCC_ASSERT(all);
    return build(S, all, k, probe ? PROBE : SOLVE, out);
}

pcc_status space_no_fit(const pcc_space *S, pcc_status last) {
    const pcc_graph *g = S->g;
    const pcc_cluster *c = S->c;
    if (S->o->quiet) return PCC_ERR_INFEASIBLE;
    if (last == PCC_ERR_INFEASIBLE)
        fprintf(stderr, "%s: %s: does not fit on %d devices of %s in any factorization pp x dp x tp, even with "
                        "recompute; use more devices, ZeRO (--zero 3), or a smaller micro-batch\n",
                pcc_progname, g->file, S->N, c->device_name);
    else
        fprintf(stderr, "%s: %s: no factorization of %d devices fits the model (dp must divide the batch "
                        "dimension%s%s = %lld, tp stay inside a node of %d, pp at most %d layers)\n",
                pcc_progname, g->file, S->N, S->bdim >= 0 ? " " : "", S->bdim >= 0 ? g->dims[S->bdim].name : "",
                (long long)S->bsize, c->devices_per_node, S->nl);
    return PCC_ERR_INFEASIBLE;
}

// --auto: the configuration the driver's search over micro-batch counts picked (o->pick), alone.
static pcc_status search_pick(pcc_space *S, pcc_strategy ***out, int *n_out) {
    const pcc_transform *all = transform_find(S->t, S->o->pick->tp);
    pcc_strategy *s;
    PCC_ASSERT(all);
    pcc_status st = build(S, all, S->o->pick, SOLVE, &s);
    if (st) return st;
    *out = arena_alloc(S->g->arena, sizeof(pcc_strategy *));
    (*out)[0] = s, *n_out = 1;
    return PCC_OK;
}

// --check -d s: the ILP alone, on all the devices as one group.
static pcc_status search_whole(pcc_space *S, pcc_strategy ***out, int *n_out) {
    const pcc_cluster *c = S->c;
    pcc_intra_opts so = {.group = {S->N, 1}, .memory_bytes = c->memory_bytes, .ilp = S->o->ilp};
    pcc_intra *sc;
    pcc_status st = ilp_intra(S->g, c, transform_find(S->t, S->N), &so, &sc);
    if (st) return st;
    pcc_strategy *s = arena_alloc(S->g->arena, sizeof *s);
    s->mesh[PCC_AX_PP] = s->mesh[PCC_AX_DP] = s->mesh[PCC_AX_CP] = s->mesh[PCC_AX_TQ] = 1, s->mesh[PCC_AX_TP] = S->N;
    s->seq_dim = -1;
    s->micro_batches = S->g->micro_batches;
    s->intra = sc;
    *out = arena_alloc(S->g->arena, sizeof(pcc_strategy *));
    (*out)[0] = s, *n_out = 1;
    return PCC_OK;
}

int *search_group_sizes(const pcc_graph *g, const pcc_cluster *c, const pcc_search_opts *o, int *n_out) {
    pcc_space S;
    search_init(&S, g, c, NULL, o);
    int *v = NULL, n = 0, cap = 0;
    if (o->whole) {
        *VEC_PUSH(g->arena, v, n, cap) = S.N;
    } else if (o->auto_mesh && o->pick) {
        *VEC_PUSH(g->arena, v, n, cap) = o->pick->tp;
    } else if (!o->auto_mesh) {
        int dp = o->dp ? o->dp : 1, tp = o->tp ? o->tp : 1, pp = o->pp ? o->pp : 1, cp = o->cp > 1 ? o->cp : 1;
        if ((int64_t)dp * cp * tp * pp == S.N) *VEC_PUSH(g->arena, v, n, cap) = tp; // else the search refuses the template
    } else {
        for (int tp = 1; tp <= S.N; tp++) {
            bool used = false;
            for (int cp = 1; cp <= S.N / tp && !used; cp *= 2)
                for (int pp = 1; pp <= S.N / tp / cp && !used; pp++)
                    used = auto_mesh_ok(&S, tp, pp, cp) && (cp == 1 || auto_cp_ok(&S, cp, tp, S.N / tp / cp / pp, false) ||
                                                            auto_cp_ok(&S, cp, tp, S.N / tp / cp / pp, true));
            if (used) *VEC_PUSH(g->arena, v, n, cap) = tp;
        }
    }
    *n_out = n;
    return v;
}

pcc_status space_one(const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, const pcc_search_opts *o,
                     pcc_strategy ***out, int *n_out) {
    PCC_ASSERT(o->whole || !o->auto_mesh || o->pick);
    *out = NULL, *n_out = 0;
    pcc_space S;
    search_init(&S, g, c, t, o);
    return o->whole ? search_whole(&S, out, n_out) : o->auto_mesh ? search_pick(&S, out, n_out) : search_template(&S, out, n_out);
}

char *strategy_str(const pcc_strategy *s, char *buf, size_t n) {
    char v[48] = "", cp[32] = "", tq[24] = "";
    if (s->virtual_stages > 1) snprintf(v, sizeof v, " interleaved, %d virtual stages", s->virtual_stages);
    if (s->mesh[PCC_AX_CP] > 1) snprintf(cp, sizeof cp, " x cp %d%s", s->mesh[PCC_AX_CP], s->config.cp_zigzag ? " (zigzag ring)" : s->config.cp_ring ? " (ring)" : "");
    if (s->mesh[PCC_AX_TQ] > 1) snprintf(tq, sizeof tq, " (%d x %d)", s->mesh[PCC_AX_TP], s->mesh[PCC_AX_TQ]);
    snprintf(buf, n, "pp %d x dp %d%s x tp %d%s, %s%s, %d micro-batch%s%s", s->mesh[PCC_AX_PP], s->mesh[PCC_AX_DP], cp,
             strategy_tp(s), tq, s->mesh[PCC_AX_PP] == 1 ? "no pipeline" : s->schedule == PCC_PIPE_GPIPE ? "gpipe" : "1f1b", v,
             s->micro_batches, s->micro_batches == 1 ? "" : "es",
             s->zero == 3 ? ", zero 3" : s->zero == 2 ? ", zero 2" : s->zero == 1 ? ", zero 1" : "");
    if (s->zero == 3 && s->zero3_late) snprintf(buf + strlen(buf), n - strlen(buf), ", prefetch none");
    if (s->config.sp) snprintf(buf + strlen(buf), n - strlen(buf), ", sequence parallel");
    return buf;
}
