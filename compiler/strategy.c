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
 * The step-time estimate ranks the factorizations for --auto: per micro-batch and stage, the
 * ILP's compute and resharding time over dp and pp; (M + pp - 1) of those for a pipeline of M
 * micro-batches (the bubble); plus the data-parallel gradient all-reduce.
 */
#include "plancc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The model dimension data parallelism splits: axis 0 of the first input.
static int batch_dim(const pcc_graph *g) {
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].kind == PCC_T_INPUT && g->tensors[t].rank > 0) return g->tensors[t].dims[0];
    return -1;
}

static int letter_of_dim(const pcc_graph *g, const pcc_op *op, int dim) {
    pcc_letter l[PCC_MAX_LETTERS];
    int n = op_letters(g, op, l);
    for (int i = 0; i < n; i++)
        if (l[i].dim == dim && !l[i].nosplit) return i;
    return -1;
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

/* ---- one mesh ---- */

typedef struct tp_cache {
    int tp, pp;
    pcc_sched *s;
    pcc_status st;
} tp_cache;

static pcc_status tp_schedule(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy_opts *o, int bdim, int tp,
                              int pp, pcc_sched **out) {
    pcc_transform *t = transform(g, tp);
    for (int i = 0; i < t->n_ops; i++) {
        pcc_op_cands *oc = &t->ops[i];
        bool has_rc = false;
        for (int k = 0; k < oc->n; k++) has_rc |= oc->c[k].recompute;
        int n = 0;
        for (int k = 0; k < oc->n; k++) {
            const pcc_cand *cd = &oc->c[k];
            if (cd->dim >= 0 && cd->dim == bdim) continue;           // the batch is dp's
            if (o->recompute == PCC_RECOMPUTE_NONE && cd->recompute) continue;
            if (o->recompute == PCC_RECOMPUTE_FULL && has_rc && !cd->recompute) continue;
            oc->c[n++] = *cd;
        }
        PCC_ASSERT(n > 0);
        oc->n = n;
    }
    pcc_sched_opts so = {.group = {tp, 1}, .memory_bytes = c->memory_bytes * pp, .ilp = o->ilp, .quiet = true};
    so.ilp.progress = false;
    return sched_intra(g, c, t, &so, out);
}

static pcc_strategy *make(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy_opts *o, const pcc_sched *sc,
                          int bdim, int pp, int dp, int tp, const layer *L, int nl) {
    pcc_strategy *s = arena_alloc(g->arena, sizeof *s);
    s->mesh[PCC_AX_PP] = pp, s->mesh[PCC_AX_DP] = dp, s->mesh[PCC_AX_TP] = tp;
    s->micro_batches = g->micro_batches;
    s->schedule = pp == 1 ? PCC_PIPE_GPIPE : o->schedule ? o->schedule : PCC_PIPE_1F1B;
    s->zero = dp > 1 ? o->zero : 0;
    s->batch_dim = bdim;
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
        if (dp > 1 && bdim >= 0) s->letter[PCC_AX_DP][i] = letter_of_dim(g, op, bdim);
        if (cd->dim >= 0) s->letter[PCC_AX_TP][i] = letter_by_name(g, op, cd->letter);
        PCC_ASSERT(cd->dim < 0 || s->letter[PCC_AX_TP][i] >= 0);
        s->recompute[i] = cd->recompute && op->block >= 0; // the emitter recomputes inside blocks
        s->cause[i] = sc->cause[i];
    }
    s->op_stage = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_ops + 1));
    s->copy_stage = arena_alloc(g->arena, sizeof(int *) * (size_t)(g->n_blocks + 1));
    for (int i = 0; i < g->n_ops; i++) s->op_stage[i] = -1;
    for (int b = 0; b < g->n_blocks; b++)
        if (g->blocks[b].fwd < 0) s->copy_stage[b] = arena_alloc(g->arena, sizeof(int) * (size_t)g->blocks[b].repeat);
    int *st = arena_alloc(g->arena, sizeof(int) * (size_t)(nl + 1));
    partition(L, nl, pp, st);
    for (int i = 0; i < nl; i++) {
        if (L[i].op >= 0) s->op_stage[L[i].op] = st[i];
        else s->copy_stage[L[i].block][L[i].copy] = st[i];
    }
    // The estimate.
    double stage_s = (sc->compute_s + sc->reshard_s) / (dp * (double)pp);
    int M = s->micro_batches;
    s->est_step_s = (M + pp - 1) * stage_s;
    pcc_totals tot;
    graph_totals(g, &tot);
    if (dp > 1) {
        double grad_bytes = tot.bytes_grads / (tp * (double)pp);
        s->est_step_s += cost_collective_s(c, PCC_COLL_ALL_REDUCE, grad_bytes, (pcc_group_shape){dp, tp});
    }
    s->est_memory_bytes = sc->memory_bytes / pp;
    s->ilp = sc->ilp;
    return s;
}

static int by_time(const void *a, const void *b) {
    const pcc_strategy *x = *(pcc_strategy *const *)a, *y = *(pcc_strategy *const *)b;
    if (x->est_step_s != y->est_step_s) return x->est_step_s < y->est_step_s ? -1 : 1;
    for (int i = 0; i < PCC_AXES; i++) // ties: fewer pipeline stages, then less tp
        if (x->mesh[i] != y->mesh[i]) return x->mesh[i] < y->mesh[i] ? -1 : 1;
    return 0;
}

pcc_status strategy_plan(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy_opts *o, pcc_strategy ***out,
                         int *n_out) {
    *out = NULL, *n_out = 0;
    int N = c->n_devices, bdim = batch_dim(g), nl;
    int64_t bsize = bdim >= 0 ? g->dims[bdim].size : 1;
    layer *L = layers(g, &nl);
    pcc_strategy **v = NULL;
    int n = 0, cap = 0;
    tp_cache *cache = NULL;
    int nc = 0, capc = 0;
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
        if (tp > c->devices_per_node && !c->cpu)
            warn("--tp %d spans nodes (%d devices per node): tensor-parallel collectives cross the network", tp, c->devices_per_node);
        pcc_sched *sc;
        pcc_status st = tp_schedule(g, c, o, bdim, tp, pp, &sc);
        if (st == PCC_ERR_INFEASIBLE) {
            // Keep going with all memory allowed: the memory planner says exactly what does not fit.
            pcc_strategy_opts o2 = *o;
            o2.recompute = o->recompute == PCC_RECOMPUTE_NONE ? PCC_RECOMPUTE_NONE : PCC_RECOMPUTE_FULL;
            pcc_cluster c2 = *c;
            c2.memory_bytes = 1e30;
            st = tp_schedule(g, &c2, &o2, bdim, tp, pp, &sc);
        }
        if (st) return st;
        *VEC_PUSH(g->arena, v, n, cap) = make(g, c, o, sc, bdim, pp, dp, tp, L, nl);
    } else {
        for (int tp = 1; tp <= N; tp++) {
            if (N % tp || (tp > c->devices_per_node && !c->cpu)) continue;
            for (int pp = 1; pp <= N / tp; pp++) {
                if ((N / tp) % pp || pp > nl) continue;
                int dp = N / tp / pp;
                if (dp > 1 && (bdim < 0 || bsize % dp != 0)) continue;
                if (o->pp && pp != o->pp) continue;
                pcc_sched *sc = NULL;
                pcc_status st = PCC_OK;
                for (int k = 0; k < nc; k++)
                    if (cache[k].tp == tp && cache[k].pp == pp) sc = cache[k].s, st = cache[k].st;
                if (!sc && !st) {
                    st = tp_schedule(g, c, o, bdim, tp, pp, &sc);
                    *VEC_PUSH(g->arena, cache, nc, capc) = (tp_cache){tp, pp, sc, st};
                }
                if (st) {
                    last = st;
                    if (st != PCC_ERR_INFEASIBLE) return st;
                    continue;
                }
                *VEC_PUSH(g->arena, v, n, cap) = make(g, c, o, sc, bdim, pp, dp, tp, L, nl);
            }
        }
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
    snprintf(buf, n, "pp %d x dp %d x tp %d, %s, %d micro-batch%s%s", s->mesh[PCC_AX_PP], s->mesh[PCC_AX_DP],
             s->mesh[PCC_AX_TP], s->mesh[PCC_AX_PP] == 1 ? "no pipeline" : s->schedule == PCC_PIPE_GPIPE ? "gpipe" : "1f1b",
             s->micro_batches, s->micro_batches == 1 ? "" : "es",
             s->zero == 3 ? ", zero 3" : s->zero == 2 ? ", zero 2" : s->zero == 1 ? ", zero 1" : "");
    return buf;
}
