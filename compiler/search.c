/*
 * search.c: phase 2, the search: the device mesh (pp x dp x tp), the pipeline stages, and the
 * split of every forward operator along the dp and tp axes.
 *
 * Input: the graph, the cluster, and phase 1's candidates per operator for every tensor-parallel
 * group size the search will try (search_group_sizes says which; the driver runs phase 1 for
 * them first). Output: the candidate strategies, best first by the step-time estimate
 * (estimate.c). Two ways to get them:
 *   - a template (--dp --tp --pp): Megatron-LM's plan. The batch dimension is split over dp;
 *     the tp split of each operator comes from the intra-operator ILP (ilp.c) on the tp group
 *     with the batch dimension taken out of the candidates, which gives Megatron's column- then
 *     row-parallel linears; with --tp-batch (or --sync background) the ILP may split the batch
 *     over tp too.
 *   - --auto: every factorization of the devices (tp inside a node, dp dividing the batch, pp at
 *     most the number of layers), each ZeRO stage from the one asked for up, with and without
 *     the batch over tp, each with the ILP for its tp group; the driver then takes the best that
 *     the memory planner fits exactly.
 * The split along dp is the batch dimension wherever an operator has it. Stages cut the
 * sequence of layers (graph_layers: top-level operators and the copies of repeated blocks)
 * into pp contiguous runs that balance their FLOPs (the smallest largest run, by bisection over
 * the answer with a greedy fill). Interleaving (--virtual-stages V): the layers are cut into
 * pp * V chunks, chunk c on device c mod pp (op_stage and copy_stage hold the chunk); pipeline.c
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

// Stages of the layers: pp contiguous non-empty runs with the smallest largest FLOP sum.
static void partition(const double *flops, int n, int pp, int *stage) {
    double lo = 0, hi = 0, eps = 1; // a layer of 0 FLOPs still counts a little
    for (int i = 0; i < n; i++) {
        hi += flops[i] + eps;
        if (flops[i] + eps > lo) lo = flops[i] + eps;
    }
    for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; it++) {
        double mid = 0.5 * (lo + hi), run = 0;
        int parts = 1;
        for (int i = 0; i < n; i++) {
            double w = flops[i] + eps;
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
        double w = flops[i] + eps;
        bool must = n - i <= pp - 1 - s;      // one layer per remaining stage
        if (s < pp - 1 && run > 0 && (run + w > hi * (1 + 1e-12) || must)) s++, run = 0;
        stage[i] = s;
        run += w;
    }
}

/* ---- one mesh ---- */

// What a byte the ILP counts costs one device of the mesh (pcc_intra_opts): the ILP sees the
// whole model on the tp group, for the whole batch and one micro-batch, against pp devices'
// memory. Parameters: weights + gradients + optimizer state, ZeRO sharding the optimizer state
// (1), gradients (2) and weights (3) over dp. Activations: 1/dp of the batch, times the
// micro-batches a stage keeps in flight (1F1B: up to pp; GPipe: all; no pipeline: one at a time).
static void memory_scales(const pcc_graph *g, int pp, int dp, int zero, pcc_pipe_sched sch, pcc_intra_opts *so) {
    pcc_totals t;
    graph_totals(g, &t);
    if (t.bytes_weights <= 0) return;
    so->param_scale = (t.bytes_weights / (zero >= 3 ? dp : 1) + t.bytes_grads / (zero >= 2 ? dp : 1) +
                       t.bytes_optim / (zero >= 1 ? dp : 1)) / t.bytes_weights;
    int m = g->micro_batches, fly = pp == 1 ? 1 : sch == PCC_PIPE_GPIPE ? m : (pp < m ? pp : m);
    so->act_scale = (double)fly / dp;
}

// Phase 1's candidates for the tp group of a mesh, as that mesh may use them: the batch is dp's
// unless batch_tp (then its pieces over dp x tp must hold whole ghost batch norm groups), and
// --recompute none or full drops the candidates that disagree.
static pcc_transform *tp_candidates(const pcc_graph *g, const pcc_transform *all, const pcc_search_opts *o, int bdim,
                                    int dp, bool batch_tp) {
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
        int n = 0;
        for (int k = 0; k < from->n; k++) {
            const pcc_cand *cd = &from->c[k];
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
    return t;
}

// The intra-operator ILP of one mesh's tp group.
static pcc_status tp_schedule(const pcc_graph *g, const pcc_cluster *c, const pcc_transform *all, const pcc_search_opts *o,
                              int bdim, int pp, int dp, int zero, bool batch_tp, pcc_intra **out) {
    int tp = all->devices;
    pcc_transform *t = tp_candidates(g, all, o, bdim, dp, batch_tp);
    pcc_intra_opts so = {.group = {tp, 1}, .memory_bytes = c->memory_bytes * pp, .ilp = o->ilp, .quiet = true,
                         .bg_dense = o->bg_dense, .bucket_bytes = o->bucket_bytes};
    memory_scales(g, pp, dp, dp > 1 ? zero : 0, o->schedule ? o->schedule : PCC_PIPE_1F1B, &so);
    so.ilp.progress = false;
    return ilp_intra(g, c, t, &so, out);
}

static pcc_strategy *make(const pcc_graph *g, const pcc_cluster *c, const pcc_search_opts *o, const pcc_intra *sc,
                          int bdim, int pp, int dp, int tp, int zero, const pcc_layer *L, const double *flops, int nl) {
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
        // Phase 3 recomputes inside blocks. --recompute full is Megatron-LM's activation
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
    partition(flops, nl, pp * v, chunk);
    for (int i = 0; i < nl; i++) {
        if (L[i].op >= 0) s->op_stage[L[i].op] = chunk[i];
        else s->copy_stage[L[i].block][L[i].copy] = chunk[i];
    }
    estimate_step(g, c, sc, s);
    s->est_step_s = s->est.step_s;
    s->est_memory_bytes = sc->memory_bytes / pp;
    s->intra = sc;
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

/* ---- the search ---- */

typedef struct search_ctx {
    const pcc_graph *g;
    const pcc_cluster *c;
    const pcc_transforms *t;
    const pcc_search_opts *o;
    int N, bdim, nl;            // devices; the batch dimension; layers
    int64_t bsize;              // the batch dimension's size (1 when none)
    const pcc_layer *L;
    const double *flops;        // per layer
    pcc_strategy **v;           // the candidates so far
    int n, cap;
} search_ctx;

static void search_init(search_ctx *S, const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t,
                        const pcc_search_opts *o) {
    *S = (search_ctx){.g = g, .c = c, .t = t, .o = o, .N = c->n_devices, .bdim = graph_batch_dim(g)};
    S->bsize = S->bdim >= 0 ? g->dims[S->bdim].size : 1;
    S->L = graph_layers(g, &S->nl);
    S->flops = layer_flops(g, S->L, S->nl);
}

static void add(search_ctx *S, const pcc_search_opts *o, const pcc_intra *sc, int pp, int dp, int tp, int zero) {
    *VEC_PUSH(S->g->arena, S->v, S->n, S->cap) = make(S->g, S->c, o, sc, S->bdim, pp, dp, tp, zero, S->L, S->flops, S->nl);
}

// --auto's meshes: tp inside a node (with --sync background also the whole cluster: ShadowSync's
// layout, the tables sharded over every device, the dense layers' replicas beside them), pp at
// most the layers (and --pp's where given), dp dividing the batch.
static bool auto_mesh_ok(const search_ctx *S, int tp, int pp) {
    const pcc_cluster *c = S->c;
    int N = S->N;
    if (N % tp || (tp > c->devices_per_node && !c->cpu && !(S->o->bg_dense && tp == N))) return false;
    if ((N / tp) % pp || pp > S->nl) return false;
    int dp = N / tp / pp;
    if (dp > 1 && (S->bdim < 0 || S->bsize % dp != 0)) return false;
    return !S->o->pp || pp == S->o->pp;
}

// The template's numbers against the cluster and the model.
static pcc_status template_check(const search_ctx *S, int dp, int tp, int pp) {
    const pcc_graph *g = S->g;
    const pcc_search_opts *o = S->o;
    int N = S->N, bdim = S->bdim, nl = S->nl;
    int64_t bsize = S->bsize;
    if ((int64_t)dp * tp * pp != N)
        return diag(S->c->file, "", "--dp %d x --tp %d x --pp %d is %lld devices, but the cluster has %d (set --devices or --nodes)",
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
    return PCC_OK;
}

// The template: one strategy (Megatron-LM's).
static pcc_status search_template(search_ctx *S) {
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
    pcc_intra *sc;
    st = tp_schedule(g, c, all, o, bdim, pp, dp, o->zero, btp, &sc);
    if (st == PCC_ERR_INFEASIBLE) {
        // Keep going with all memory allowed: the memory planner says exactly what does not fit.
        pcc_search_opts o2 = *o;
        o2.recompute = o->recompute == PCC_RECOMPUTE_NONE ? PCC_RECOMPUTE_NONE : PCC_RECOMPUTE_FULL;
        pcc_cluster c2 = *c;
        c2.memory_bytes = 1e30;
        st = tp_schedule(g, &c2, all, &o2, bdim, pp, dp, o->zero, btp, &sc);
    }
    if (st) return st;
    add(S, o, sc, pp, dp, tp, o->zero);
    return PCC_OK;
}

// --auto on one mesh: ZeRO from the stage asked for up (1 and 3; 2 only when asked), and where
// each replica's batch divides by tp, the ILP also free to split the batch over tp (data
// parallelism over dp x tp for the operators that gain from it, Alpa's mixed plans): every
// variant the ILP fits is a candidate, ranked by the estimate. *last: the last failure.
static pcc_status search_mesh(search_ctx *S, int tp, int pp, pcc_status *last) {
    const pcc_search_opts *o = S->o;
    int dp = S->N / tp / pp;
    bool btp_ok = tp > 1 && S->bdim >= 0 && S->bsize % ((int64_t)dp * tp) == 0;
    const pcc_transform *all = transform_find(S->t, tp);
    PCC_ASSERT(all);
    for (int zero = o->zero; zero <= 3; zero++)
        for (int btp = 0; btp <= (int)btp_ok; btp++) {
            if ((zero == 2 && o->zero != 2) || (zero > o->zero && dp == 1)) continue;
            pcc_intra *sc = NULL;
            pcc_status st = tp_schedule(S->g, S->c, all, o, S->bdim, pp, dp, zero, btp, &sc);
            if (st) {
                *last = st;
                if (st != PCC_ERR_INFEASIBLE) return st;
                continue;
            }
            // Interleaving is one more candidate beside the plain 1F1B (where the pipeline can
            // run it: pp 2): --auto keeps it only where the estimate says it pays.
            pcc_search_opts plain = *o;
            plain.virtual_stages = 1;
            add(S, &plain, sc, pp, dp, tp, zero);
            if (o->virtual_stages > 1 && pp == 2 && pp * o->virtual_stages <= S->nl && S->g->micro_batches % pp == 0)
                add(S, o, sc, pp, dp, tp, zero);
        }
    return PCC_OK;
}

// --auto: nothing fits; say why (unless asked quietly, as the driver's tighter rounds do).
static pcc_status no_fit(const search_ctx *S, pcc_status last) {
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

// --auto: every mesh, ranked.
static pcc_status search_auto(search_ctx *S) {
    pcc_status last = PCC_OK;
    for (int tp = 1; tp <= S->N; tp++)
        for (int pp = 1; pp <= S->N / tp; pp++) {
            if (!auto_mesh_ok(S, tp, pp)) continue;
            pcc_status st = search_mesh(S, tp, pp, &last);
            if (st) return st;
        }
    if (S->n == 0) return no_fit(S, last);
    qsort(S->v, (size_t)S->n, sizeof *S->v, by_time);
    return PCC_OK;
}

// --check -d s: the ILP alone, on all the devices as one group.
static pcc_status search_whole(search_ctx *S) {
    const pcc_cluster *c = S->c;
    pcc_intra_opts so = {.group = {S->N, 1}, .memory_bytes = c->memory_bytes, .ilp = S->o->ilp};
    pcc_intra *sc;
    pcc_status st = ilp_intra(S->g, c, transform_find(S->t, S->N), &so, &sc);
    if (st) return st;
    pcc_strategy *s = arena_alloc(S->g->arena, sizeof *s);
    s->mesh[PCC_AX_PP] = s->mesh[PCC_AX_DP] = 1, s->mesh[PCC_AX_TP] = S->N;
    s->micro_batches = S->g->micro_batches;
    s->intra = sc;
    *VEC_PUSH(S->g->arena, S->v, S->n, S->cap) = s;
    return PCC_OK;
}

int *search_group_sizes(const pcc_graph *g, const pcc_cluster *c, const pcc_search_opts *o, int *n_out) {
    search_ctx S;
    search_init(&S, g, c, NULL, o);
    int *v = NULL, n = 0, cap = 0;
    if (o->whole) {
        *VEC_PUSH(g->arena, v, n, cap) = S.N;
    } else if (!o->auto_mesh) {
        int dp = o->dp ? o->dp : 1, tp = o->tp ? o->tp : 1, pp = o->pp ? o->pp : 1;
        if ((int64_t)dp * tp * pp == S.N) *VEC_PUSH(g->arena, v, n, cap) = tp; // else the search refuses the template
    } else {
        for (int tp = 1; tp <= S.N; tp++)
            for (int pp = 1; pp <= S.N / tp; pp++)
                if (auto_mesh_ok(&S, tp, pp)) {
                    *VEC_PUSH(g->arena, v, n, cap) = tp;
                    break;
                }
    }
    *n_out = n;
    return v;
}

pcc_status search(const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, const pcc_search_opts *o,
                  pcc_strategy ***out, int *n_out) {
    *out = NULL, *n_out = 0;
    if (!o->quiet && !o->whole) progress_phase("phase 2: the device mesh and the splits (%s)", o->auto_mesh ? "--auto" : "template");
    search_ctx S;
    search_init(&S, g, c, t, o);
    pcc_status st = o->whole ? search_whole(&S) : o->auto_mesh ? search_auto(&S) : search_template(&S);
    if (st) return st;
    *out = S.v, *n_out = S.n;
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
