/*
 * hetero.c: pipeline stages on a cluster of node groups (cluster.c's "groups": e.g. A100 nodes
 * and H100 nodes in one job).
 *
 * pp is the mesh's outermost axis, so pipeline device d holds ranks d * N/pp .. (d+1) * N/pp - 1,
 * and the search only plans meshes whose every stage lies inside one group (cluster_stages_fit).
 * On one kind of device the search cuts the layers into stages that balance their FLOPs; here a
 * layer costs each group its own seconds, so the cut balances seconds instead: stage s's layers
 * are timed on the view of the group its device is on, and the cut is the smallest largest stage
 * time, by bisection over the answer with a greedy fill (a stage takes layers while they fit
 * under the answer; with capacities fixed in stage order the greedy fill is optimal). A faster
 * group's stage takes more layers.
 *
 * A layer's seconds on a group: every forward operator of it and the backward operators derived
 * from them, each whole (unsplit) on the cost model of that group's view (cost_op_s). The whole
 * operator rather than its share on a device: what matters is the ratio between groups, and
 * the cut is made before the split is known (the ILP's choice is the same on every stage).
 *
 * Limits: the split of every operator (the ILP) is chosen once, on the cluster's worst figures,
 * and every stage has the same dp x tp; per-stage widths are not searched.
 */
#include "plancc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The seconds of op on view c, whole.
static double op_whole_s(const pcc_graph *g, const pcc_cluster *c, const pcc_op *op) {
    int n = op->nin + op->nout;
    int **w = arena_alloc(g->arena, sizeof(int *) * (size_t)(n + 1));
    for (int k = 0; k < n; k++) {
        w[k] = arena_alloc(g->arena, sizeof(int) * PCC_MAX_RANK);
        for (int a = 0; a < PCC_MAX_RANK; a++) w[k][a] = 1;
    }
    return cost_op_s(c, g, op, (const int *const *)w);
}

double *hetero_layer_seconds(const pcc_graph *g, const pcc_cluster *c, const pcc_layer *L, int nl) {
    if (c->n_groups <= 1) return NULL;
    double *s = arena_alloc(g->arena, sizeof(double) * (size_t)(c->n_groups * nl + 1));
    double *op_s = arena_alloc(g->arena, sizeof(double) * (size_t)(g->n_fwd_ops + 1));
    for (int k = 0; k < c->n_groups; k++) {
        const pcc_cluster *v = &c->groups[k];
        for (int i = 0; i < g->n_fwd_ops; i++) op_s[i] = op_whole_s(g, v, &g->ops[i]);
        for (int o = g->n_fwd_ops; o < g->n_ops; o++)
            if (g->ops[o].fwd >= 0) op_s[g->ops[o].fwd] += op_whole_s(g, v, &g->ops[o]);
        double *row = s + (size_t)k * nl;
        for (int l = 0; l < nl; l++) {
            if (L[l].op >= 0) {
                row[l] = op_s[L[l].op];
            } else if (l > 0 && L[l - 1].block == L[l].block) {
                row[l] = row[l - 1]; // every copy of a block alike
            } else {
                const pcc_block *bl = &g->blocks[L[l].block];
                for (int i = bl->first_op; i < bl->first_op + bl->n_ops; i++) row[l] += op_s[i];
            }
        }
    }
    return s;
}

// The group of chunk `chunk`'s pipeline device (chunk c on device c mod pp).
static int chunk_group(const pcc_cluster *c, int pp, int chunk) {
    const pcc_cluster *v = cluster_stage_view(c, pp, chunk % pp);
    PCC_ASSERT(v && v >= c->groups && v < c->groups + c->n_groups);
    return (int)(v - c->groups);
}

// Layer l's seconds on chunk s's group (a layer of no time still counts a little).
static double w_of(const double *ls, const int *grp, int nl, int s, int l) { return ls[(size_t)grp[s] * nl + l] + 1e-15; }

// Whether the layers fit into at most n chunks of at most T seconds each, filled greedily.
static bool fits_under(const double *ls, const int *grp, int nl, int n, double T) {
    int s = 0;
    double run = 0;
    for (int l = 0; l < nl; l++) {
        double w = w_of(ls, grp, nl, s, l);
        if (run > 0 && run + w > T) {
            if (++s >= n) return false;
            run = 0, w = w_of(ls, grp, nl, s, l);
        }
        if (w > T) return false;
        run += w;
    }
    return true;
}

void hetero_partition(const pcc_cluster *c, const double *ls, int nl, int pp, int v, int *chunk) {
    int n = pp * v;
    int *grp = malloc(sizeof(int) * (size_t)(n + 1));
    PCC_ASSERT(grp);
    for (int s = 0; s < n; s++) grp[s] = chunk_group(c, pp, s);
    double lo = 0, hi = 0;
    for (int l = 0; l < nl; l++) {
        double most = 0;
        for (int s = 0; s < n; s++) most = fmax(most, w_of(ls, grp, nl, s, l));
        hi += most;
    }
    for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; it++) {
        double mid = 0.5 * (lo + hi);
        if (fits_under(ls, grp, nl, n, mid)) hi = mid;
        else lo = mid;
    }
    // Fill greedily under hi, keeping one layer for each chunk still to come.
    int s = 0;
    double run = 0;
    for (int l = 0; l < nl; l++) {
        bool must = nl - l <= n - 1 - s;
        if (s < n - 1 && run > 0 && (run + w_of(ls, grp, nl, s, l) > hi * (1 + 1e-12) || must)) s++, run = 0;
        chunk[l] = s;
        run += w_of(ls, grp, nl, s, l);
    }
    free(grp);
}

// The chunk of layer l of strategy s.
static int layer_chunk(const pcc_strategy *s, const pcc_layer *L) {
    return L->op >= 0 ? s->op_stage[L->op] : s->copy_stage[L->block][L->copy];
}

void hetero_compare(const pcc_graph *g, const pcc_cluster *c, const pcc_intra *sc, pcc_strategy *s, const int *even) {
    int nl;
    const pcc_layer *L = graph_layers(g, &nl);
    pcc_strategy e = *s;
    e.op_stage = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_ops + 1));
    e.copy_stage = arena_alloc(g->arena, sizeof(int *) * (size_t)(g->n_blocks + 1));
    memcpy(e.op_stage, s->op_stage, sizeof(int) * (size_t)g->n_ops);
    for (int b = 0; b < g->n_blocks; b++)
        if (g->blocks[b].fwd < 0) e.copy_stage[b] = arena_alloc(g->arena, sizeof(int) * (size_t)g->blocks[b].repeat);
    for (int l = 0; l < nl; l++) {
        if (L[l].op >= 0) e.op_stage[L[l].op] = even[l];
        else e.copy_stage[L[l].block][L[l].copy] = even[l];
    }
    estimate_step(g, c, sc, &e);
    s->est_even_s = e.est.step_s;
}

void hetero_report(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s) {
    if (!c->groups || !s->op_stage) return;
    int nl, pp = s->mesh[PCC_AX_PP];
    const pcc_layer *L = graph_layers(g, &nl);
    fprintf(f, "  node groups:");
    for (int d = 0; d < pp; d++) {
        const pcc_cluster *v = cluster_stage_view(c, pp, d);
        int layers = 0, k = (int)(v - c->groups);
        for (int l = 0; l < nl; l++) layers += layer_chunk(s, &L[l]) % pp == d;
        fprintf(f, "%s stage %d on group %d (%s, ranks %d-%d): %d layer%s", d ? ";" : "", d, k, v->device_name,
                d * (c->n_devices / pp), (d + 1) * (c->n_devices / pp) - 1, layers, layers == 1 ? "" : "s");
    }
    fprintf(f, "\n  stages cut by each group's speed: %.6g s per step; cut by FLOPs instead: %.6g s\n", s->est_step_s,
            s->est_even_s);
}
