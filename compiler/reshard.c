/*
 * reshard.c: the collectives that turn a tensor's layout into another. Two questions, one file:
 *
 * 1. What does a layout change cost (phase 2, the ILP's edges): reshard_rvd, nnScaler's
 *    intra-RVD search over the layouts of a tensor on one group of devices.
 * 2. Which collectives make it (phase 3, preserve): reshard_steps, the chain over the mesh axes
 *    that phase 3 emits between a producer's buffer and a consumer's.
 *
 * reshard_rvd. A layout of a tensor on a group of n devices is <r, v, d0..dk-1> with
 * r * v * prod(d) = n (pcc_layout). The states are every such vector whose splits divide the
 * tensor's dimensions; the edges are the six primitive steps (D->R all-gather, V->R all-reduce,
 * V->D reduce-scatter, D->D all-to-all, R->D local slice, R->V local scale), each moving the
 * group's whole factor n between two slots; an edge costs what the cost model says its
 * collective takes on the group, plus a launch for a collective and STEP_CHARGE for every step.
 * Dijkstra from `from` finds the cheapest chain to `to`.
 *
 * Why n and not every factor k of it: phase 3 (reshard_steps) turns a layout change on the
 * group into collectives over the group's mesh axis, all n of its members; a chain of smaller
 * factors (a 64-way all-to-all as 8 ways, then 8 ways again) would need sub-groups of the axis,
 * which it cannot make. Costed here, such chains also put both factors on the group's own
 * links, though the second's members are 8 apart (across nodes): DLRM's tables on 64 GPUs were
 * estimated at 0.31 ms of resharding a step for 3.2 ms simulated. A 2-D group (--tp2: two mesh
 * axes, n/minor x minor) is not searched so: its layouts also say which axis holds what
 * (pcc_layout.ax), and reshard_rvd_2d costs phase 3's own chain between them (reshard_axes).
 *
 * State count: the ways to spread n's prime factors over rank + 2 slots; for n = 64 and rank 4
 * that is C(6 + 5, 5) = 462, so a search is a few thousand edge relaxations. The scheduler asks
 * once per (producer layout, consumer layout) pair and may cache.
 *
 * reshard_steps. On the mesh pp x dp x tp a buffer's layout is a plan_shard: per axis,
 * replicated, partial sums, or a split dimension (several axes may split one dimension, the
 * earlier axis the more significant). The chain undoes, from the least significant axis up, the
 * partial sums the reader does not want and every split past the longest common prefix of the
 * two layouts' splits of a dimension: a reduce-scatter or an all-to-all where that lands
 * directly on the wanted layout, else an all-reduce or an all-gather; then one local slice to
 * what is left.
 *
 * Limits: the members of each collective are taken to be on the group's own links (the group's
 * stride); uniform splits only; a layout change between different device groups (pipeline
 * stages) is send/recv, which phase 3 makes itself.
 */
#include "plancc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const pcc_step_names[PCC_STEP_KIND_COUNT] = {"all_gather", "all_reduce", "reduce_scatter",
                                                         "all_to_all", "slice", "scale"};

// Ties go to the chain with fewer steps: a nanosecond per local step is below any real work;
// a collective step also pays a launch (cost_launch_s).
#define STEP_CHARGE 1e-9
#define MAX_STATES 4096

typedef struct rvd_space {
    const pcc_graph *g;
    const pcc_tensor *t;
    int n, rank;
    pcc_layout *states;
    int count;
} rvd_space;

static bool layout_eq(const pcc_layout *a, const pcc_layout *b, int rank) {
    if (a->r != b->r || a->v != b->v) return false;
    for (int i = 0; i < rank; i++)
        if (a->d[i] != b->d[i]) return false;
    return true;
}

static int state_find(const rvd_space *s, const pcc_layout *l) {
    for (int i = 0; i < s->count; i++)
        if (layout_eq(&s->states[i], l, s->rank)) return i;
    return -1;
}

// All layouts: distribute n over r, v, d[0..rank) (each d[i] dividing its dimension). With
// s->states NULL it only counts them.
static void enumerate(rvd_space *s, pcc_layout *cur, int slot, int left) {
    if (s->count >= MAX_STATES) return;
    if (slot == s->rank + 1) { // the last slot, r, takes what is left
        cur->r = left;
        if (s->states) s->states[s->count] = *cur;
        s->count++;
        return;
    }
    for (int f = 1; f <= left; f++) {
        if (left % f) continue;
        if (slot < s->rank) {
            if (s->g->dims[s->t->dims[slot]].size % f) continue;
            cur->d[slot] = f;
        } else {
            cur->v = f;
        }
        enumerate(s, cur, slot + 1, left / f);
    }
}

static double piece_bytes(const rvd_space *s, const pcc_layout *l) {
    double b = tensor_bytes(s->g, s->t);
    for (int i = 0; i < s->rank; i++) b /= l->d[i];
    return b;
}

typedef struct edge {
    pcc_step_kind kind;
    int dim, dim_to, k;
    pcc_layout to;
} edge;

// The most steps edges_from finds out of one layout of a tensor of this rank: per dimension an
// all-gather, a reduce-scatter, a slice and an all-to-all to every other dimension; then an
// all-reduce and a scale.
static int edges_most(int rank) {
    return rank * (rank + 2) + 2;
}

// The steps out of layout l that move the group's factor n (the essay: what phase 3 emits).
static int edges_from(const rvd_space *s, const pcc_layout *l, edge *out, int cap) {
    int n = 0, k = s->n;
    if (k < 2) return 0;
    for (int i = 0; i < s->rank; i++) {
        int64_t size = s->g->dims[s->t->dims[i]].size;
        bool can_split = size % (l->d[i] * k) == 0;
        edge e = {.dim = i, .dim_to = i, .k = k, .to = *l};
#define ADD(kind_) do { e.kind = kind_; if (n < cap) out[n++] = e; e.to = *l; } while (0)
        if (l->d[i] % k == 0) { e.to.d[i] /= k; e.to.r *= k; ADD(PCC_STEP_ALL_GATHER); }
        if (l->v % k == 0 && can_split) { e.to.v /= k; e.to.d[i] *= k; ADD(PCC_STEP_REDUCE_SCATTER); }
        if (l->r % k == 0 && can_split) { e.to.r /= k; e.to.d[i] *= k; ADD(PCC_STEP_SLICE); }
        for (int j = 0; j < s->rank; j++) {
            if (j == i || l->d[i] % k || s->g->dims[s->t->dims[j]].size % (l->d[j] * k)) continue;
            e.dim_to = j;
            e.to.d[i] /= k;
            e.to.d[j] *= k;
            ADD(PCC_STEP_ALL_TO_ALL);
            e.dim_to = i;
        }
    }
    edge e = {.dim = -1, .dim_to = -1, .k = k, .to = *l};
    if (l->v % k == 0) { e.to.v /= k; e.to.r *= k; ADD(PCC_STEP_ALL_REDUCE); }
    if (l->r % k == 0) { e.to.r /= k; e.to.v *= k; ADD(PCC_STEP_SCALE); }
#undef ADD
    return n;
}

static double edge_cost(const pcc_cluster *c, const rvd_space *s, const pcc_layout *from, const edge *e,
                        pcc_group_shape grp, double *bytes) {
    pcc_group_shape sub = {e->k, grp.stride};
    double piece = piece_bytes(s, from);
    switch (e->kind) {
    case PCC_STEP_ALL_GATHER: *bytes = piece * e->k; return cost_collective_s(c, PCC_COLL_ALL_GATHER, *bytes, sub);
    case PCC_STEP_ALL_REDUCE: *bytes = piece; return cost_collective_s(c, PCC_COLL_ALL_REDUCE, *bytes, sub);
    case PCC_STEP_REDUCE_SCATTER: *bytes = piece; return cost_collective_s(c, PCC_COLL_REDUCE_SCATTER, *bytes, sub);
    case PCC_STEP_ALL_TO_ALL: *bytes = piece; return cost_collective_s(c, PCC_COLL_ALL_TO_ALL, *bytes, sub);
    default: *bytes = 0; return 0;
    }
}

// Dijkstra over the states; prev[] and via[] give the chain back.
static void shortest(const pcc_cluster *c, const rvd_space *s, int src, pcc_group_shape grp, double *dist, int *prev, edge *via,
                     bool *done, edge *es) {
    for (int i = 0; i < s->count; i++) dist[i] = INFINITY, prev[i] = -1;
    dist[src] = 0;
    for (;;) {
        int u = -1;
        for (int i = 0; i < s->count; i++)
            if (!done[i] && dist[i] < INFINITY && (u < 0 || dist[i] < dist[u])) u = i;
        if (u < 0) return;
        done[u] = true;
        int ne = edges_from(s, &s->states[u], es, edges_most(s->rank));
        for (int k = 0; k < ne; k++) {
            int w = state_find(s, &es[k].to);
            if (w < 0 || done[w]) continue;
            double bytes, d = dist[u] + edge_cost(c, s, &s->states[u], &es[k], grp, &bytes) + STEP_CHARGE;
            if (bytes > 0) d += cost_launch_s(c);
            if (d < dist[w]) dist[w] = d, prev[w] = u, via[w] = es[k];
        }
    }
}

static void chain_fill(const pcc_cluster *c, const rvd_space *s, int dst, const int *prev, const edge *via,
                       pcc_group_shape grp, pcc_reshard *path) {
    int order[PCC_MAX_STEPS * 4], n = 0;
    for (int v = dst; prev[v] >= 0 && n < PCC_MAX_STEPS * 4; v = prev[v]) order[n++] = v;
    path->n_steps = 0;
    path->seconds = 0;
    for (int i = n - 1; i >= 0 && path->n_steps < PCC_MAX_STEPS; i--) {
        int v = order[i];
        const edge *e = &via[v];
        double bytes, sec = edge_cost(c, s, &s->states[prev[v]], e, grp, &bytes);
        if (bytes > 0) sec += cost_launch_s(c);
        path->step[path->n_steps].kind = e->kind;
        path->step[path->n_steps].dim = e->dim;
        path->step[path->n_steps].dim_to = e->dim_to;
        path->step[path->n_steps].k = e->k;
        path->step[path->n_steps].bytes = bytes;
        path->step[path->n_steps].seconds = sec;
        path->n_steps++;
        path->seconds += sec;
    }
}

double reshard_rvd(const pcc_cluster *c, const pcc_graph *g, const pcc_tensor *t, const pcc_layout *from,
                   const pcc_layout *to, pcc_group_shape grp, pcc_reshard *path) {
    return reshard_rvd_2d(c, g, t, from, to, grp, 1, path);
}

static plan_shard axes_shard(const pcc_layout *l) {
    plan_shard s = {{0}};
    s.map[PCC_AX_TP] = l->ax[0], s.map[PCC_AX_TQ] = l->ax[1];
    return s;
}

static const pcc_step_kind step_of_coll[] = {
    [PCC_COLL_ALL_GATHER] = PCC_STEP_ALL_GATHER, [PCC_COLL_ALL_REDUCE] = PCC_STEP_ALL_REDUCE,
    [PCC_COLL_REDUCE_SCATTER] = PCC_STEP_REDUCE_SCATTER, [PCC_COLL_ALL_TO_ALL] = PCC_STEP_ALL_TO_ALL};

// A 2-D group's change of layout as phase 3 makes it: reshard_steps' chain over its two axes (the
// layouts' ax), each collective costed on the axes it spans.
static double reshard_axes(const pcc_cluster *c, const pcc_graph *g, const pcc_tensor *t, const pcc_layout *from,
                           const pcc_layout *to, pcc_group_shape grp, int minor, pcc_reshard *path) {
    pcc_reshard_step st[PCC_AXES + 1];
    plan_shard cur = axes_shard(from);
    int n = reshard_steps(cur, axes_shard(to), t->rank, st), size[PCC_AXES] = {0};
    size[PCC_AX_TP] = grp.size / minor, size[PCC_AX_TQ] = minor;
    pcc_reshard local;
    if (!path) path = &local;
    memset(path, 0, sizeof *path);
    for (int k = 0; k < n && path->n_steps < PCC_MAX_STEPS; k++) {
        double piece = tensor_bytes(g, t);
        int ways = 1;
        for (int a = PCC_AX_TP; a <= PCC_AX_TQ; a++) {
            if (cur.map[a] >= 2) piece /= size[a];
            if (st[k].axes >> a & 1u) ways *= size[a];
        }
        cur = st[k].after;
        if (st[k].kind < 0) continue; // the local slice
        pcc_group_shape sub = {ways, st[k].axes == 1u << PCC_AX_TP ? grp.stride * minor : grp.stride};
        double bytes = st[k].kind == PCC_COLL_ALL_GATHER ? piece * ways : piece;
        double sec = cost_collective_s(c, (pcc_coll)st[k].kind, bytes, sub) + cost_launch_s(c) + STEP_CHARGE;
        int i = path->n_steps++;
        path->step[i].kind = step_of_coll[st[k].kind], path->step[i].dim = path->step[i].dim_to = -1;
        path->step[i].k = ways, path->step[i].bytes = bytes, path->step[i].seconds = sec;
        path->seconds += sec;
    }
    return path->seconds;
}

double reshard_rvd_2d(const pcc_cluster *c, const pcc_graph *g, const pcc_tensor *t, const pcc_layout *from,
                      const pcc_layout *to, pcc_group_shape grp, int minor, pcc_reshard *path) {
    if (minor > 1) return reshard_axes(c, g, t, from, to, grp, minor, path);
    if (path) memset(path, 0, sizeof *path);
    if (layout_eq(from, to, t->rank)) return 0;
    // Scratch for one search, freed before returning (the scheduler asks thousands of times),
    // sized by the states counted first, not by the most there may be (MAX_STATES): a few
    // dozen, where the largest size took 0.5 MB a call.
    rvd_space s = {.g = g, .t = t, .n = grp.size, .rank = t->rank};
    pcc_layout cur = {0};
    for (int i = 0; i < PCC_MAX_RANK; i++) cur.d[i] = 1;
    enumerate(&s, &cur, 0, grp.size);
    size_t n = (size_t)s.count;
    s.count = 0;
    s.states = malloc(sizeof(pcc_layout) * n);
    double *dist = malloc(sizeof(double) * n);
    int *prev = malloc(sizeof(int) * n);
    edge *via = malloc(sizeof(edge) * n), *es = malloc(sizeof(edge) * (size_t)edges_most(s.rank));
    bool *done = calloc(n, sizeof(bool));
    if (!s.states || !dist || !prev || !via || !es || !done) {
        fprintf(stderr, "%s: out of memory\n", pcc_progname);
        exit(PCC_ERR_INTERNAL);
    }
    enumerate(&s, &cur, 0, grp.size);
    int src = state_find(&s, from), dst = state_find(&s, to);
    double seconds = -1;
    if (src >= 0 && dst >= 0) {
        shortest(c, &s, src, grp, dist, prev, via, done, es);
        if (dist[dst] < INFINITY) {
            pcc_reshard local;
            if (!path) path = &local;
            chain_fill(c, &s, dst, prev, via, grp, path);
            seconds = path->seconds;
        }
    }
    free(s.states), free(dist), free(prev), free(via), free(es), free(done);
    return seconds;
}

char *layout_str(const pcc_layout *l, int rank, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "R%dV%dD(", l->r, l->v);
    for (int i = 0; i < rank && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "," : "", l->d[i]);
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

/* ---- phase 3's chain over the mesh axes ---- */

static bool shard_eq(plan_shard a, plan_shard b) { return memcmp(a.map, b.map, sizeof a.map) == 0; }

// The axes that split dimension i, in mesh order.
static int split_axes(plan_shard s, int i, int *ax) {
    int n = 0;
    for (int a = 0; a < PCC_AXES; a++)
        if (s.map[a] == PLAN_SHARD_D(i)) ax[n++] = a;
    return n;
}

// Is (cur's axes on dim i) + [a] a prefix of want's axes on dim i?
static bool extends_prefix(plan_shard cur, plan_shard want, int i, int a) {
    int c[PCC_AXES], w[PCC_AXES];
    int nc = split_axes(cur, i, c), nw = split_axes(want, i, w);
    if (nc + 1 > nw) return false;
    for (int k = 0; k < nc; k++)
        if (c[k] != w[k]) return false;
    return w[nc] == a;
}

// The chain that undoes the axes in undo[] one at a time, each the innermost split of its
// dimension when it goes, in descending mesh order or, with `up`, ascending.
static int chain(plan_shard cur, plan_shard want, const bool *undo_in, bool up, pcc_reshard_step *step) {
    bool undo[PCC_AXES];
    memcpy(undo, undo_in, sizeof undo);
    int n = 0;
    for (;;) {
        int a = -1;
        for (int k = 0; k < PCC_AXES && a < 0; k++) {
            int x = up ? k : PCC_AXES - 1 - k;
            if (!undo[x]) continue;
            if (cur.map[x] >= 2) {
                int c[PCC_AXES], nc = split_axes(cur, cur.map[x] - 2, c);
                if (c[nc - 1] != x) continue; // an inner split of its dimension goes first
            }
            a = x;
        }
        if (a < 0) break;
        undo[a] = false;
        plan_shard next = cur;
        pcc_coll kind;
        int w = want.map[a];
        if (cur.map[a] == PLAN_SHARD_V) {
            if (w >= 2 && extends_prefix(cur, want, w - 2, a)) kind = PCC_COLL_REDUCE_SCATTER, next.map[a] = (uint8_t)w;
            else kind = PCC_COLL_ALL_REDUCE, next.map[a] = PLAN_SHARD_R;
        } else {
            int i = cur.map[a] - 2;
            if (w >= 2 && w - 2 != i && extends_prefix(cur, want, w - 2, a)) kind = PCC_COLL_ALL_TO_ALL, next.map[a] = (uint8_t)w;
            else kind = PCC_COLL_ALL_GATHER, next.map[a] = PLAN_SHARD_R;
        }
        step[n++] = (pcc_reshard_step){(int)kind, 1u << a, next};
        cur = next;
    }
    if (!shard_eq(cur, want)) step[n++] = (pcc_reshard_step){-1, 0, want}; // the local slice
    return n;
}

// The dimension step k gathers (from the layout before it, `before`), -1 if it is not a gather.
static int gathered_dim(plan_shard before, const pcc_reshard_step *s) {
    if (s->kind != PCC_COLL_ALL_GATHER) return -1;
    for (int a = 0; a < PCC_AXES; a++)
        if (s->axes >> a & 1u) return before.map[a] - 2;
    return -1;
}

// Gathers of one dimension that follow one another become one gather over their axes: each undid
// the innermost split of the dimension, so the group over both axes (the earlier axis the more
// significant digit of a member's place, as in the mesh's rank order) holds the pieces in the
// dimension's order (ZeRO's shard of a parameter over dp x cp, gathered whole).
static int merge_gathers(plan_shard cur, pcc_reshard_step *step, int n) {
    int m = 0;
    plan_shard before = cur, last = cur;
    for (int k = 0; k < n; k++) {
        int d = gathered_dim(before, &step[k]);
        if (m > 0 && d >= 0 && gathered_dim(last, &step[m - 1]) == d) {
            step[m - 1].axes |= step[k].axes;
            step[m - 1].after = step[k].after;
        } else {
            last = before;
            step[m++] = step[k];
        }
        before = step[k].after;
    }
    return m;
}

// All-reduces that follow one another become one over their axes (the sum over both at once: a
// 2-D tp group's partial sums over both of its axes).
static int merge_reduces(pcc_reshard_step *step, int n) {
    int m = 0;
    for (int k = 0; k < n; k++)
        if (m > 0 && step[k].kind == PCC_COLL_ALL_REDUCE && step[m - 1].kind == PCC_COLL_ALL_REDUCE)
            step[m - 1].axes |= step[k].axes, step[m - 1].after = step[k].after;
        else
            step[m++] = step[k];
    return m;
}

// Partial sums over several axes that the reader wants split along one dimension over exactly
// those axes, in mesh order, where the writer does not split it: one reduce-scatter over them all
// (its members in mesh order hold the pieces in the dimension's order). Applied to *cur; the count.
static int joint_scatter(plan_shard *cur, plan_shard want, int rank, pcc_reshard_step *step) {
    int n = 0;
    for (int i = 0; i < rank; i++) {
        int c[PCC_AXES], w[PCC_AXES];
        int nc = split_axes(*cur, i, c), nw = split_axes(want, i, w);
        bool all_v = nc == 0 && nw > 1;
        for (int k = 0; all_v && k < nw; k++) all_v = cur->map[w[k]] == PLAN_SHARD_V;
        if (!all_v) continue;
        unsigned axes = 0;
        for (int k = 0; k < nw; k++) axes |= 1u << w[k], cur->map[w[k]] = (uint8_t)PLAN_SHARD_D(i);
        step[n++] = (pcc_reshard_step){PCC_COLL_REDUCE_SCATTER, axes, *cur};
    }
    return n;
}

// A dimension split over several axes that the reader wants split along another dimension over
// the same axes, in the same order, where neither splits the other dimension: one all-to-all
// over them (a 2-D tp group's one-letter split moving to another letter). Applied to *cur.
static int joint_all_to_all(plan_shard *cur, plan_shard want, int rank, pcc_reshard_step *step) {
    for (int i = 0; i < rank; i++) {
        int c[PCC_AXES], nc = split_axes(*cur, i, c);
        if (nc < 2) continue;
        for (int j = 0; j < rank; j++) {
            int w[PCC_AXES], x[PCC_AXES], nw = split_axes(want, j, w);
            if (j == i || nw != nc || split_axes(*cur, j, x) || split_axes(want, i, x)) continue;
            bool same = true;
            for (int k = 0; k < nc; k++) same &= c[k] == w[k];
            if (!same) continue;
            unsigned axes = 0;
            for (int k = 0; k < nc; k++) axes |= 1u << c[k], cur->map[c[k]] = (uint8_t)PLAN_SHARD_D(j);
            step[0] = (pcc_reshard_step){PCC_COLL_ALL_TO_ALL, axes, *cur};
            return 1;
        }
    }
    return 0;
}

static int gathers(const pcc_reshard_step *step, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k += step[i].kind == PCC_COLL_ALL_GATHER;
    return k;
}

int reshard_steps(plan_shard cur, plan_shard want, int rank, pcc_reshard_step *step) {
    if (shard_eq(cur, want)) return 0;
    int j = joint_scatter(&cur, want, rank, step);
    if (!j) j = joint_all_to_all(&cur, want, rank, step);
    if (j > 0) return j + reshard_steps(cur, want, rank, step + j);
    // Axes to undo: partial sums the reader does not want, and every split past the longest
    // common prefix of the splits of a dimension (pieces are undone least significant first).
    bool undo[PCC_AXES] = {false}, sums = false;
    for (int a = 0; a < PCC_AXES; a++)
        if (cur.map[a] == PLAN_SHARD_V && want.map[a] != PLAN_SHARD_V) undo[a] = sums = true;
    for (int i = 0; i < rank; i++) {
        int c[PCC_AXES], w[PCC_AXES];
        int nc = split_axes(cur, i, c), nw = split_axes(want, i, w), p = 0;
        while (p < nc && p < nw && c[p] == w[p]) p++;
        for (int k = p; k < nc; k++) undo[c[k]] = true;
    }
    int n = chain(cur, want, undo, false, step);
    // Undone in the other order, an axis that moves a split to another dimension may find the
    // way clear for an all-to-all where the first order gathers it whole and slices it after
    // (ZeRO-3's shard of a tied embedding over dp x tp, read by the LM head split along the
    // vocabulary: the whole matrix over dp, or a tp piece over dp and an all-to-all over tp).
    pcc_reshard_step alt[PCC_AXES + 1];
    int m = sums ? 0 : chain(cur, want, undo, true, alt);
    if (!sums && gathers(alt, m) < gathers(step, n)) {
        memcpy(step, alt, sizeof *step * (size_t)m);
        n = m;
    }
    return merge_reduces(step, merge_gathers(cur, step, n));
}
