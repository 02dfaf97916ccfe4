/*
 * burst.c: DeepPool's burst parallelism (arXiv 2112.10065): under a fixed global batch, every
 * layer runs data-parallel on its own number of devices, 1, 2, 4, ... G, chosen to minimize the
 * step time under the cost model (cost.c), paying for the redistribution of activations at
 * every change of width (forward, and their gradients backward) and for each layer's gradient
 * all-reduce over exactly its own devices.
 *
 * Scheduling (burst_plan). The forward operators are cut into layers ("regions") where exactly
 * one value crosses from the ops before to the ops after (inputs and parameters aside), so a
 * branch (a skip connection) stays inside one region and runs at one width. A region whose
 * operator cannot split the batch (batch norm's statistics) runs on one device; a ghost batch
 * norm (statistics per group of G samples) lets its region split the batch in whole groups, so
 * on at most B/G devices. A dynamic program over the chain of regions (DeepPool's
 * searchLinear) picks each region's width: a region's time is its operators' forward and
 * backward at the per-device batch, its parameters' gradient all-reduce over its devices (one
 * bucket; NCCL's ring or tree over the group's real links, with latency), and the move of the
 * crossing value from the previous region's width to its own, forward and backward. DeepPool's
 * amplification limit (--amp-limit) is an option: a choice whose predecessor uses more than
 * that many times the GPU-seconds of running it on one
 * GPU is taken only if nothing within the limit is better (a soft filter, as DeepPool's).
 * The program adds each region's all-reduce to the step's path, where phase 3 runs it on stream 1
 * behind the backward pass in buckets: without --amp-limit or --burst-widths its choice is then
 * refined on the step as the plan runs it (step_time: the forward pass, the backward pass, the
 * buckets' all-reduces behind it, the optimizer), one region's width at a time from the
 * program's choice and from data parallelism's, keeping the faster; that step is the plan's
 * estimate.
 *
 * The programs (burst_programs: burst parallelism's own phase 3, in place of preserve.c's; the
 * memory planner and the emitter then place and write them as they do preserve.c's), with no
 * new semantics in the format. G = 2^n devices form a mesh of n axes of size 2. A layer of
 * width 2^j splits the batch over the first j axes (the piece a rank holds is its coordinates
 * on those axes, the first the most significant) and runs on the ranks whose coordinates on the
 * other axes are all 0. Narrowing from 2^(j+1) to 2^j is a move along axis j: coordinate 1
 * sends its piece to coordinate 0, which concatenates it after its own; widening splits the
 * piece in two and sends the second half along axis j. A layer's gradient all-reduce is a
 * collective over the group of axes 0..j-1 (the instance with the active ranks; the others
 * issue nothing); gradients go in buckets of --bucket-mb as the backward pass finishes them
 * (PyTorch DDP's), a bucket closed early where the next gradient has another width, in every
 * program alike so that a group's members cut the same buckets (the cost model charges one
 * all-reduce of a region's gradient bytes). Ranks with the same smallest active width run the
 * same program (n + 1 programs); a rank holds no buffer of a layer it does not run. The devices
 * of a narrow layer are spread over the mesh (rank 0, G/2, ...): DeepPool uses ranks 0..k-1
 * instead, and the cost model charges this layout's links (a narrow layer on a multi-node
 * cluster crosses nodes).
 *
 * Limits: flat models (no repeated blocks), one micro-batch, no ZeRO or recompute, G a power of
 * two up to 2^PLAN_MAX_AXES.
 */
#include "plancc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_MAIN 0
#define STREAM_SYNC 1
#define EV_GRAD 0
#define EV_SYNCED 1

/* ---- the batch letter of every operator ---- */

// The axis of tensor t that is the batch dimension, or -1.
static int batch_axis(const pcc_graph *g, int t, int bd) {
    for (int i = 0; i < g->tensors[t].rank; i++)
        if (g->tensors[t].dims[i] == bd) return i;
    return -1;
}

// Op's letter of the batch dimension (-1 none); *nosplit when the op cannot split it.
static int op_batch_letter(const pcc_graph *g, const pcc_op *op, int bd, pcc_letter *l, bool *nosplit) {
    int n = op_letters(g, op, l);
    *nosplit = false;
    for (int k = 0; k < n; k++)
        if (l[k].dim == bd) {
            *nosplit = l[k].nosplit;
            return k;
        }
    return -1;
}

// The shard of operand k of op on a layer of width 2^j: the batch split over axes 0..j-1
// (partial sums where the op reduces over the batch), replicated elsewhere.
static plan_shard operand_shard(const pcc_graph *g, const pcc_op *op, int k, int j, int bd) {
    plan_shard s;
    memset(&s, 0, sizeof s);
    pcc_letter l[PCC_MAX_LETTERS];
    bool nosplit;
    int li = op_batch_letter(g, op, bd, l, &nosplit);
    if (li < 0 || nosplit) return s;
    uint8_t v = 0;
    if (l[li].axis[k] >= 0) v = (uint8_t)PLAN_SHARD_D(l[li].axis[k]);
    else if (k >= op->nin && l[li].reduce) v = PLAN_SHARD_V;
    for (int a = 0; a < j; a++) s.map[a] = v;
    return s;
}

// The shard of tensor t's pieces on a layer of width 2^j: its batch axis split over axes 0..j-1.
static plan_shard piece_shard(const pcc_graph *g, int t, int j, int bd) {
    plan_shard s;
    memset(&s, 0, sizeof s);
    int ax = batch_axis(g, t, bd);
    for (int a = 0; ax >= 0 && a < j; a++) s.map[a] = (uint8_t)PLAN_SHARD_D(ax);
    return s;
}

static uint64_t shard_bytes(const pcc_graph *g, int t, plan_shard s, int n_axes) {
    const pcc_tensor *T = &g->tensors[t];
    int64_t ways[PCC_MAX_RANK];
    for (int i = 0; i < T->rank; i++) ways[i] = 1;
    for (int a = 0; a < n_axes; a++)
        if (s.map[a] >= PLAN_SHARD_D(0)) ways[s.map[a] - PLAN_SHARD_D(0)] *= 2;
    uint64_t n = (uint64_t)pcc_dtype_bytes(T->dtype);
    for (int i = 0; i < T->rank; i++) {
        int64_t d = g->dims[T->dims[i]].size;
        PCC_ASSERT(d % ways[i] == 0);
        n *= (uint64_t)(d / ways[i]);
    }
    return n;
}

/* ---- the cost model's view ---- */

// The ranks of a layer of width 2^j among G: 2^j of them, G / 2^j apart.
static pcc_group_shape width_group(int G, int j) { return (pcc_group_shape){1 << j, G >> j}; }

// One execution of op at width 2^j on one of its ranks.
static double op_time(const pcc_cluster *c, const pcc_graph *g, const pcc_op *op, int j, int bd, int n_axes) {
    int ways[PCC_MAX_OPERANDS + 1][PCC_MAX_RANK];
    const int *per[PCC_MAX_OPERANDS + 1];
    for (int k = 0; k < op->nin + op->nout; k++) {
        int t = k < op->nin ? op->in[k] : op->out[k - op->nin];
        plan_shard s = operand_shard(g, op, k, j, bd);
        for (int d = 0; d < g->tensors[t].rank; d++) ways[k][d] = 1;
        for (int a = 0; a < n_axes; a++)
            if (s.map[a] >= PLAN_SHARD_D(0)) ways[k][s.map[a] - PLAN_SHARD_D(0)] *= 2;
        per[k] = ways[k];
    }
    return cost_op_s(c, g, op, per);
}

// The move of tensor t's pieces between widths 2^a and 2^b, one way (forward or backward): per
// step of one axis, a message of the narrower... the wider width's piece, and a concatenation
// or split of the narrower one's.
static double move_time(const pcc_cluster *c, const pcc_graph *g, int t, int a, int b, int G, int bd) {
    double s = 0, whole = tensor_bytes(g, &g->tensors[t]);
    if (batch_axis(g, t, bd) < 0) return 0;
    for (int j = a < b ? a : b; j < (a < b ? b : a); j++) {
        double piece = whole / (double)(2 << j);
        s += cost_collective_s(c, PCC_COLL_SEND_RECV, piece, (pcc_group_shape){2, G >> (j + 1)});
        s += cost_compute_s(c, 0, 4 * piece, g->tensors[t].dtype, false);
    }
    return s;
}

/* ---- regions ---- */

// Cuts the forward ops into regions: a cut after op i where the values made at or before i and
// read after it are exactly one (inputs and parameters aside). *cross gets that value per region
// (the one it hands on; -1 for the last).
static int regions(const pcc_graph *g, int *region_of, int **cross_out) {
    int n = g->n_fwd_ops, nr = 0;
    int *last_read = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    int *cross = arena_alloc(g->arena, sizeof(int) * (size_t)(n + 1));
    for (int t = 0; t < g->n_tensors; t++) last_read[t] = -1;
    for (int o = 0; o < n; o++)
        for (int i = 0; i < g->ops[o].nin; i++) last_read[g->ops[o].in[i]] = o;
    for (int o = 0; o < n; o++) {
        region_of[o] = nr;
        int live = 0, which = -1;
        for (int p = 0; p <= o; p++)
            for (int i = 0; i < g->ops[p].nout; i++) {
                int t = g->ops[p].out[i];
                if (last_read[t] > o) live++, which = t;
            }
        if (o == n - 1) cross[nr++] = -1;
        else if (live == 1) cross[nr++] = which;
    }
    *cross_out = cross;
    return nr;
}

/* ---- the scheduler ---- */

// The forward op whose region runs backward op o: its forward op's, or for a sum of a value's
// gradient contributions (a residual connection's; the loss's seed) the value's producer's; -1.
static int bwd_owner(const pcc_graph *g, const pcc_op *op) {
    if (op->phase != PCC_PHASE_BWD) return -1;
    if (op->fwd >= 0) return op->fwd;
    const pcc_tensor *y = &g->tensors[op->out[0]];
    int p = y->kind == PCC_T_GRAD && y->of >= 0 ? g->tensors[y->of].producer : -1;
    return p >= 0 && p < g->n_fwd_ops ? p : -1;
}

static const pcc_op *region_head(const pcc_graph *g, const pcc_burst *b, int r);

// --burst-widths: one device count per layer, each a power of two the layer can take.
static pcc_status given_widths(const pcc_graph *g, pcc_burst *b, const char *list) {
    const char *p = list;
    for (int r = 0; r < b->n_regions; r++) {
        char *end;
        long v = strtol(p, &end, 10);
        int j = 0;
        while (j < 30 && (1L << j) < v) j++;
        if (end == p || v < 1 || (1L << j) != v || j > b->max_width[r] || (*end != ',' && r < b->n_regions - 1) ||
            (*end && r == b->n_regions - 1)) {
            fprintf(stderr, "%s: --burst-widths \"%s\": layer %d (%s) wants a power of two from 1 to %d (the model has %d "
                            "layers, comma-separated)\n", pcc_progname, list, r, region_head(g, b, r)->ptr, 1 << b->max_width[r], b->n_regions);
            return PCC_ERR_INPUT;
        }
        b->width[r] = j;
        p = end + (*end == ',');
    }
    return PCC_OK;
}

// What burst parallelism handles: flat models, one micro-batch, a batch dimension.
static pcc_status burst_limits(const pcc_graph *g) {
    if (g->n_blocks > 0) {
        fprintf(stderr, "%s: %s: --burst: the model has repeated blocks (\"%s\"); burst parallelism handles models "
                        "written without blocks\n", pcc_progname, g->file, g->blocks[0].name);
        return PCC_ERR_INPUT;
    }
    if (g->micro_batches != 1) {
        fprintf(stderr, "%s: --burst runs one micro-batch per step (got --micro-batches %d)\n", pcc_progname, g->micro_batches);
        return PCC_ERR_INPUT;
    }
    if (graph_batch_dim(g) < 0) {
        fprintf(stderr, "%s: %s: --burst: the model has no batch dimension (an input with a shape)\n", pcc_progname, g->file);
        return PCC_ERR_INPUT;
    }
    return PCC_OK;
}

// The widths each region may take: the batch divides evenly, and no operator of it refuses.
static void max_widths(const pcc_graph *g, pcc_burst *b) {
    int64_t B = g->dims[b->batch_dim].size;
    for (int r = 0; r < b->n_regions; r++) b->max_width[r] = b->n_axes;
    for (int r = 0; r < b->n_regions; r++)
        while (b->max_width[r] > 0 && B % (1 << b->max_width[r]) != 0) b->max_width[r]--;
    for (int op = 0; op < g->n_fwd_ops; op++) {
        pcc_letter l[PCC_MAX_LETTERS];
        bool nosplit;
        int li = op_batch_letter(g, &g->ops[op], b->batch_dim, l, &nosplit), *mw = &b->max_width[b->region_of[op]];
        if (li >= 0 && nosplit) *mw = 0;
        while (li >= 0 && *mw > 0 && B % ((1 << *mw) * l[li].grain) != 0) (*mw)--; // whole ghost groups
    }
}

// What no region holds, the same at every width: the optimizer, which a device runs on the whole
// parameters of every layer it holds (rank 0 holds them all), and backward ops of no region.
static double rest_time(const pcc_graph *g, const pcc_cluster *c, const pcc_burst *b) {
    double s = 0;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase == PCC_PHASE_OPT || (op->phase == PCC_PHASE_BWD && bwd_owner(g, op) < 0))
            s += op_time(c, g, op, 0, b->batch_dim, b->n_axes);
    }
    return s;
}

// Every region's times at every width, computed once for the dynamic program and step_time: its
// operators, forward and backward (bwd_owner) and forward alone (R x C), its parameters' bytes;
// per forward op, its backward operators (n_fwd_ops x C) and its parameters' bytes; one way's
// move of region r's inbound value from width p to j (R x C x C).
typedef struct burst_times {
    int C;
    double *ops, *fwd, *bytes, *obwd, *obytes, *mv, rest;
} burst_times;

static burst_times times_table(const pcc_graph *g, const pcc_cluster *c, const pcc_burst *b) {
    int R = b->n_regions, C = b->n_axes + 1, nf = g->n_fwd_ops;
    burst_times T = {.C = C, .rest = rest_time(g, c, b)};
    T.ops = arena_alloc(g->arena, sizeof(double) * (size_t)(R * C));
    T.fwd = arena_alloc(g->arena, sizeof(double) * (size_t)(R * C));
    T.bytes = arena_alloc(g->arena, sizeof(double) * (size_t)R);
    T.obwd = arena_alloc(g->arena, sizeof(double) * (size_t)(nf * C));
    T.obytes = arena_alloc(g->arena, sizeof(double) * (size_t)nf);
    T.mv = arena_alloc(g->arena, sizeof(double) * (size_t)(R * C * C));
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        int f = op->phase == PCC_PHASE_FWD ? o : bwd_owner(g, op);
        if (f < 0) continue;
        int r = b->region_of[f];
        for (int j = 0; j <= b->max_width[r]; j++) {
            double t = op_time(c, g, op, j, b->batch_dim, b->n_axes);
            T.ops[r * C + j] += t;
            *(f == o ? &T.fwd[r * C + j] : &T.obwd[f * C + j]) += t;
        }
        for (int i = 0; f == o && i < op->nin; i++)
            if (g->tensors[op->in[i]].kind == PCC_T_PARAM) {
                double bytes = tensor_bytes(g, &g->tensors[op->in[i]]);
                T.bytes[r] += bytes, T.obytes[o] += bytes;
            }
    }
    for (int r = 1; r < R; r++)
        for (int j = 0; b->cross[r - 1] >= 0 && j <= b->max_width[r]; j++)
            for (int p = 0; p <= b->max_width[r - 1]; p++)
                T.mv[(r * C + p) * C + j] = move_time(c, g, b->cross[r - 1], p, j, b->devices, b->batch_dim);
    return T;
}

// A region's time at width 2^j: its operators and its parameters' gradient all-reduce over its
// devices (*sync_s gets that part).
static double region_time(const pcc_cluster *c, const pcc_burst *b, const burst_times *T, int r, int j, double *sync_s) {
    // the region's gradients travel in one bucket: one all-reduce of their bytes
    double bytes = j > 0 ? T->bytes[r] : 0;
    double sync = bytes > 0 ? cost_collective_s(c, PCC_COLL_ALL_REDUCE, bytes, width_group(b->devices, j)) : 0;
    if (sync_s) *sync_s = sync;
    return T->ops[r * T->C + j] + sync;
}

// The dynamic program (DeepPool's searchLinear): T[r][j] the best time through region r at
// width 2^j, lt the time of region r itself (with its inbound move), back the predecessor's
// width; then every region's width, from the last region's best back.
static void choose_widths(const pcc_graph *g, const pcc_cluster *c, pcc_burst *b, const burst_times *bt) {
    int R = b->n_regions, C = b->n_axes + 1, G = b->devices, bd = b->batch_dim;
    double *T = arena_alloc(g->arena, sizeof(double) * (size_t)(R * C));
    double *lt = arena_alloc(g->arena, sizeof(double) * (size_t)(R * C));
    double *nopar = arena_alloc(g->arena, sizeof(double) * (size_t)R);
    int *back = arena_alloc(g->arena, sizeof(int) * (size_t)(R * C));
    for (int r = 0; r < R; r++) nopar[r] = region_time(c, b, bt, r, 0, NULL);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < C; j++) {
            T[r * C + j] = INFINITY, back[r * C + j] = -1;
            if (j > b->max_width[r]) continue;
            double own = region_time(c, b, bt, r, j, NULL);
            if (r == 0) {
                T[j] = lt[j] = own;
                continue;
            }
            double best = INFINITY, best_amp = INFINITY;
            for (int p = 0; p <= b->max_width[r - 1]; p++) {
                double prev = T[(r - 1) * C + p];
                if (!isfinite(prev)) continue;
                double move = b->cross[r - 1] >= 0 ? 2 * move_time(c, g, b->cross[r - 1], p, j, G, bd) : 0;
                double plt = lt[(r - 1) * C + p], amp = 1;
                if (plt > 0 && nopar[r - 1] > 300e-6) amp = plt * (double)(1 << p) / nopar[r - 1];
                double cand = prev + move + own;
                if (cand < best && (b->amp_limit <= 0 || amp < b->amp_limit || amp < best_amp)) {
                    best = cand, best_amp = amp, back[r * C + j] = p;
                    lt[r * C + j] = move + own;
                }
            }
            T[r * C + j] = best;
        }
    int j = 0;
    for (int k = 1; k <= b->max_width[R - 1]; k++)
        if (T[(R - 1) * C + k] < T[(R - 1) * C + j]) j = k;
    for (int r = R - 1; r >= 0; r--) {
        b->width[r] = j;
        j = back[r * C + j];
    }
}

// The step at the widths w on rank 0, which runs every layer: the forward pass, then the backward
// pass in reverse, and on stream 1 the gradients' all-reduces in phase 3's buckets (burst_programs'
// sync_grad: each gradient joins the open bucket once its op's backward is done; the bucket goes
// once it holds --bucket-mb, or when a gradient of another width is made, or after the last),
// each behind the one before; then rest_time. The dynamic program adds each region's all-reduce
// to the path instead (DeepPool's searchLinear).
static double step_time(const pcc_graph *g, const pcc_cluster *c, const pcc_burst *b, const burst_times *T, const int *w) {
    int R = b->n_regions, C = T->C, bw = -1;
    double t = 0, s1 = 0, open = 0;
    for (int r = 0; r < R; r++) t += T->fwd[r * C + w[r]] + (r > 0 ? T->mv[(r * C + w[r - 1]) * C + w[r]] : 0);
    for (int o = g->n_fwd_ops - 1; o >= 0; o--) {
        int r = b->region_of[o];
        t += T->obwd[o * C + w[r]];
        double bytes = w[r] > 0 ? T->obytes[o] : 0;
        if (bytes > 0 && open > 0 && w[r] != bw) { // this gradient closes the open bucket
            s1 = fmax(s1, t) + cost_collective_s(c, PCC_COLL_ALL_REDUCE, open, width_group(b->devices, bw));
            open = 0;
        }
        if (bytes > 0) open += bytes, bw = w[r];
        if (open > 0 && open >= b->bucket_bytes) {
            s1 = fmax(s1, t) + cost_collective_s(c, PCC_COLL_ALL_REDUCE, open, width_group(b->devices, bw));
            open = 0;
        }
        if (r > 0 && (o == 0 || b->region_of[o - 1] != r)) t += T->mv[(r * C + w[r - 1]) * C + w[r]]; // the region's first op
    }
    if (open > 0) s1 = fmax(s1, t) + cost_collective_s(c, PCC_COLL_ALL_REDUCE, open, width_group(b->devices, bw));
    return fmax(t, s1) + T->rest;
}

// Widths w improved on step_time, one region at a time (each takes the width that makes the step
// fastest), until a pass changes none. Returns the step.
static double descend(const pcc_graph *g, const pcc_cluster *c, const pcc_burst *b, const burst_times *T, int *w) {
    double best = step_time(g, c, b, T, w);
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < b->n_regions; r++) {
            int keep = w[r];
            for (int j = 0; j <= b->max_width[r]; j++) {
                w[r] = j;
                double s = step_time(g, c, b, T, w);
                if (s < best * (1 - 1e-12)) best = s, keep = j, changed = true;
            }
            w[r] = keep;
        }
    }
    return best;
}

// The dynamic program's widths refined on step_time, which overlaps the all-reduces with the
// backward pass as phase 3's buckets do where the program adds them to the path: descend from its
// choice and from data parallelism's (every region at its widest), and keep the faster. Not with
// --amp-limit (the program's filter) or --burst-widths.
static void refine_widths(const pcc_graph *g, const pcc_cluster *c, pcc_burst *b, const burst_times *T) {
    int R = b->n_regions;
    int *w = arena_alloc(g->arena, sizeof(int) * (size_t)(R + 1));
    memcpy(w, b->max_width, sizeof(int) * (size_t)R);
    double dp = descend(g, c, b, T, w), mine = descend(g, c, b, T, b->width);
    if (dp < mine) memcpy(b->width, w, sizeof(int) * (size_t)R);
}

// The choice's time per region (its operators, its all-reduce and its inbound moves), the step
// (step_time), and data parallelism's step on the same cost model, for comparison: every region
// as wide as it goes.
static void step_times(const pcc_graph *g, const pcc_cluster *c, pcc_burst *b, const burst_times *T) {
    int G = b->devices, bd = b->batch_dim;
    for (int r = 0; r < b->n_regions; r++) {
        b->region_s[r] = region_time(c, b, T, r, b->width[r], &b->sync_s[r]);
        if (r > 0 && b->cross[r - 1] >= 0) b->region_s[r] += 2 * move_time(c, g, b->cross[r - 1], b->width[r - 1], b->width[r], G, bd);
    }
    b->est_step_s = step_time(g, c, b, T, b->width);
    b->dp_step_s = step_time(g, c, b, T, b->max_width);
}

pcc_status burst_plan(const pcc_graph *g, const pcc_cluster *c, const pcc_burst_opts *o, pcc_burst **out) {
    *out = NULL;
    int G = o->devices, n_axes = 0;
    while ((1 << n_axes) < G) n_axes++;
    PCC_ASSERT(G >= 1 && (1 << n_axes) == G && n_axes <= PLAN_MAX_AXES);
    pcc_status st = burst_limits(g);
    if (st) return st;
    pcc_burst *b = arena_alloc(g->arena, sizeof *b);
    b->devices = G, b->n_axes = n_axes, b->batch_dim = graph_batch_dim(g), b->amp_limit = o->amp_limit;
    b->bucket_bytes = o->bucket_bytes;
    b->region_of = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_fwd_ops + 1));
    b->n_regions = regions(g, b->region_of, &b->cross);
    int R = b->n_regions;
    b->width = arena_alloc(g->arena, sizeof(int) * (size_t)(R + 1));
    b->max_width = arena_alloc(g->arena, sizeof(int) * (size_t)(R + 1));
    b->region_s = arena_alloc(g->arena, sizeof(double) * (size_t)(R + 1));
    b->sync_s = arena_alloc(g->arena, sizeof(double) * (size_t)(R + 1));
    max_widths(g, b);
    burst_times T = times_table(g, c, b);
    choose_widths(g, c, b, &T);
    if (o->widths && given_widths(g, b, o->widths)) return PCC_ERR_INPUT;
    if (!o->widths && b->amp_limit <= 0) refine_widths(g, c, b, &T);
    step_times(g, c, b, &T);
    *out = b;
    return PCC_OK;
}

// The operator that names region r (its first with a label, else its first).
static const pcc_op *region_head(const pcc_graph *g, const pcc_burst *b, int r) {
    const pcc_op *first = NULL;
    for (int o = 0; o < g->n_fwd_ops; o++) {
        if (b->region_of[o] != r) continue;
        if (!first) first = &g->ops[o];
        if (g->ops[o].label) return &g->ops[o];
    }
    return first;
}

static const char *region_name(const pcc_graph *g, const pcc_burst *b, int r) {
    const pcc_op *op = region_head(g, b, r);
    if (op->label) return op->label;
    return op->nout ? g->tensors[op->out[0]].name : pcc_ops[op->kind].name;
}

void burst_table(FILE *f, const pcc_graph *g, const pcc_burst *b) {
    int64_t B = g->dims[b->batch_dim].size;
    fprintf(f, "  %-3s %-24s %-14s %5s %9s %12s %12s\n", "#", "layer", "ops", "GPUs", "batch/GPU", "time_ms", "sync_ms");
    for (int r = 0; r < b->n_regions; r++) {
        char ops[64] = "";
        int k = 0;
        for (int o = 0; o < g->n_fwd_ops && k < (int)sizeof ops - 16; o++)
            if (b->region_of[o] == r) k += snprintf(ops + k, sizeof ops - (size_t)k, "%s%s", k ? "+" : "", pcc_ops[g->ops[o].kind].name);
        fprintf(f, "  %-3d %-24s %-14s %5d %9lld %12.4f %12.4f\n", r, region_name(g, b, r), ops, 1 << b->width[r],
                (long long)(B >> b->width[r]), 1e3 * b->region_s[r], 1e3 * b->sync_s[r]);
    }
}

/* ---- the plan ---- */

typedef struct bprog {
    int k;              // the smallest width (log2) its ranks run
    pcc_mbuf *buf;      int n_buf, cap_buf;
    plan_insn *insn;    int n_insn, cap_insn;
    uint32_t *args;     int n_args, cap_args;
    plan_attrs *attrs;  int n_attrs, cap_attrs;
    int **at;           // per tensor, per width: its buffer, -1
    int *sync_group;    // per width: the plan group of its all-reduce, -1
    int *bucket;        int n_bucket, cap_bucket; // final gradients waiting for their all-reduce
    int bucket_w;       // their width (log2)
    uint64_t bucket_bytes;
    bool used_sync;
} bprog;

typedef struct bbuild {
    const pcc_graph *g;
    const pcc_cluster *c;
    const pcc_burst *b;
    int *opw;           // per op: its width (log2)
    int *home_w;        // per tensor: the width its home buffer is made at (-1: none yet)
    int *groups;        int n_groups, cap_groups; // axes mask per plan group
    uint64_t bucket_cap;// gradient bytes per bucket (0: one all-reduce per gradient)
    plan_phase phase;
} bbuild;

static int bgroup(bbuild *E, int axes) {
    for (int i = 0; i < E->n_groups; i++)
        if (E->groups[i] == axes) return i;
    *VEC_PUSH(E->g->arena, E->groups, E->n_groups, E->cap_groups) = axes;
    return E->n_groups - 1;
}

static int bnew(bbuild *E, bprog *P, int t, plan_shard s) {
    pcc_mbuf *m = VEC_PUSH(E->g->arena, P->buf, P->n_buf, P->cap_buf);
    m->tensor = (uint32_t)t;
    m->dtype = (uint8_t)E->g->tensors[t].dtype;
    m->shard = s;
    m->bytes = shard_bytes(E->g, t, s, E->b->n_axes);
    m->mb_slots = m->layer_slots = 1;
    m->first = m->last = -1;
    m->in_bucket = false, m->bucket_next = -1;
    const pcc_tensor *T = &E->g->tensors[t];
    m->persist = T->kind == PCC_T_PARAM || T->kind == PCC_T_STATE || T->kind == PCC_T_INPUT;
    m->whole = m->persist || t == E->g->loss;
    return P->n_buf - 1;
}

static plan_insn *binsn(bbuild *E, bprog *P, plan_insn_kind k, int stream, const int *args, int nargs) {
    return emit_insn(E->g->arena, &P->insn, &P->n_insn, &P->cap_insn, &P->args, &P->n_args, &P->cap_args, k, stream, E->phase,
                     args, nargs);
}

static void bevent(bbuild *E, bprog *P, plan_insn_kind k, int stream, int ev) { binsn(E, P, k, stream, NULL, 0)->a = ev; }

// A concatenation (split) of two halves along the batch axis of t, as the operator concat (split).
static void join(bbuild *E, bprog *P, bool split, int t, int whole, int lo, int hi) {
    int args[3];
    if (split) args[0] = whole, args[1] = lo, args[2] = hi;
    else args[0] = lo, args[1] = hi, args[2] = whole;
    plan_insn *in = binsn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, args, 3);
    in->code = (uint16_t)(split ? PCC_OP_SPLIT : PCC_OP_CONCAT);
    plan_attrs a;
    memset(&a, 0, sizeof a);
    a.i[PLAN_AI_AXIS] = batch_axis(E->g, t, E->b->batch_dim);
    in->attrs = emit_attrs_add(E->g->arena, &P->attrs, &P->n_attrs, &P->cap_attrs, &a);
    in->t_s = (float)cost_compute_s(E->c, 0, 2 * (double)P->buf[whole].bytes, E->g->tensors[t].dtype, false);
}

// A message of buffer buf along axis a to (send) or from (recv) coordinate offset `off`.
static void message(bbuild *E, bprog *P, bool send, int buf, int axis, int off) {
    plan_insn *in = binsn(E, P, send ? PLAN_I_SEND : PLAN_I_RECV, STREAM_MAIN, &buf, 1);
    in->a = axis, in->b = off;
    in->t_s = (float)cost_collective_s(E->c, PCC_COLL_SEND_RECV, (double)P->buf[buf].bytes,
                                       (pcc_group_shape){2, E->b->devices >> (axis + 1)});
}

// Tensor t's pieces at width 2^j on this program, moved there one axis at a time from the width
// its home buffer is at; -1 when this program holds none there (it may still have taken part:
// the ranks of the narrowest width it runs send theirs on and are done, marked -2).
static int pieces_at(bbuild *E, bprog *P, int t, int j) {
    if (P->at[t][j] != -1) return P->at[t][j] < 0 ? -1 : P->at[t][j];
    int h = E->home_w[t];
    PCC_ASSERT(h >= 0);
    int bd = E->b->batch_dim;
    if (batch_axis(E->g, t, bd) < 0) { // whole on every rank of its width: the narrower hold it too
        PCC_ASSERT(j <= h);
        return P->at[t][j] = P->at[t][h];
    }
    if (P->k > (j > h ? j : h)) return -1; // runs neither width: no part in the move
    if (j < h) { // narrower: from width j + 1, along axis j
        if (P->k > j + 1) return pieces_at(E, P, t, P->k - 1);
        int wide = pieces_at(E, P, t, j + 1);
        if (P->k == j + 1) { // coordinate 1 on axis j: send, and leave
            message(E, P, true, wide, j, -1);
            P->at[t][j] = -2;
            return -1;
        }
        int got = bnew(E, P, t, piece_shard(E->g, t, j + 1, bd));
        message(E, P, false, got, j, +1);
        int whole = bnew(E, P, t, piece_shard(E->g, t, j, bd));
        join(E, P, false, t, whole, wide, got);
        return P->at[t][j] = whole;
    }
    // wider: from width j - 1, along axis j - 1
    if (P->k == j) { // coordinate 1 on axis j - 1: receive the second half
        int got = bnew(E, P, t, piece_shard(E->g, t, j, bd));
        message(E, P, false, got, j - 1, -1);
        return P->at[t][j] = got;
    }
    int narrow = pieces_at(E, P, t, j - 1);
    int lo = bnew(E, P, t, piece_shard(E->g, t, j, bd)), hi = bnew(E, P, t, piece_shard(E->g, t, j, bd));
    join(E, P, true, t, narrow, lo, hi);
    message(E, P, true, hi, j - 1, +1);
    return P->at[t][j] = lo;
}

// Issues the open bucket: stream 1 waits for its gradients, then one all-reduce over all of them
// (laid out back to back by the memory planner) across the ranks of their width.
static void bucket_flush(bbuild *E, bprog *P) {
    int n = P->n_bucket, j = P->bucket_w;
    if (n == 0) return;
    bevent(E, P, PLAN_I_RECORD, STREAM_MAIN, EV_GRAD);
    bevent(E, P, PLAN_I_WAIT, STREAM_SYNC, EV_GRAD);
    int *args = arena_alloc(E->g->arena, sizeof(int) * (size_t)(2 * n));
    for (int k = 0; k < n; k++) {
        args[k] = args[n + k] = P->bucket[k]; // in place
        P->buf[P->bucket[k]].in_bucket = n > 1;
        P->buf[P->bucket[k]].bucket_next = n > 1 && k + 1 < n ? P->bucket[k + 1] : -1;
    }
    plan_insn *in = binsn(E, P, PLAN_I_COLL, STREAM_SYNC, args, 2 * n);
    in->code = PCC_COLL_ALL_REDUCE;
    in->a = bgroup(E, (1 << j) - 1);
    in->t_s = (float)cost_collective_s(E->c, PCC_COLL_ALL_REDUCE, (double)P->bucket_bytes, width_group(E->b->devices, j));
    P->used_sync = true;
    P->n_bucket = 0, P->bucket_bytes = 0;
}

// A parameter's gradient is final: it joins the open bucket of its width (as the backward pass
// finishes them, PyTorch DDP's buckets), which is issued once it holds the bucket's bytes
// (--bucket-mb) or the next gradient has another width.
static void sync_grad(bbuild *E, bprog *P, int gp, int j) {
    if (P->n_bucket > 0 && P->bucket_w != j) bucket_flush(E, P);
    int buf = P->at[gp][j];
    *VEC_PUSH(E->g->arena, P->bucket, P->n_bucket, P->cap_bucket) = buf;
    P->bucket_w = j;
    P->bucket_bytes += P->buf[buf].bytes;
    if (P->bucket_bytes >= E->bucket_cap) bucket_flush(E, P);
}

static void bop(bbuild *E, bprog *P, int o) {
    const pcc_graph *g = E->g;
    const pcc_op *op = &g->ops[o];
    int j = E->opw[o], bd = E->b->batch_dim;
    if (j < P->k) { // not this program's: still take part in the moves of its inputs
        for (int i = 0; i < op->nin; i++) {
            if (E->home_w[op->in[i]] < 0) E->home_w[op->in[i]] = j;
            else if (batch_axis(g, op->in[i], bd) >= 0) pieces_at(E, P, op->in[i], j);
        }
        for (int i = 0; i < op->nout; i++) {
            if (E->home_w[op->out[i]] < 0) E->home_w[op->out[i]] = j;
            // a gradient of another width closes the open bucket in every program alike, so
            // that the members of a group cut their buckets at the same gradients
            if (j > 0 && graph_is_final_param_grad(g, op->out[i]) && P->n_bucket > 0 && P->bucket_w != j) bucket_flush(E, P);
        }
        return;
    }
    int args[PCC_MAX_OPERANDS + 1];
    for (int i = 0; i < op->nin; i++) {
        int t = op->in[i];
        if (E->home_w[t] < 0) E->home_w[t] = j; // an input or parameter: held at its first reader's width
        if (P->at[t][E->home_w[t]] < 0) P->at[t][E->home_w[t]] = bnew(E, P, t, operand_shard(g, op, i, j, bd));
        args[i] = pieces_at(E, P, t, j);
        PCC_ASSERT(args[i] >= 0);
    }
    for (int i = 0; i < op->nout; i++) {
        int t = op->out[i];
        if (E->home_w[t] < 0) E->home_w[t] = j;
        PCC_ASSERT(E->home_w[t] == j);
        if (P->at[t][j] < 0) {
            plan_shard s = operand_shard(g, op, op->nin + i, j, bd);
            if (graph_is_final_param_grad(g, t)) memset(&s, 0, sizeof s); // all-reduced in place: whole after it
            P->at[t][j] = bnew(E, P, t, s);
            if (graph_is_final_param_grad(g, t)) P->buf[P->at[t][j]].whole = true;
        }
        args[op->nin + i] = P->at[t][j];
    }
    plan_insn *in = binsn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, args, op->nin + op->nout);
    in->code = (uint16_t)op->kind;
    in->t_s = (float)op_time(E->c, g, op, j, bd, E->b->n_axes);
    in->attrs = emit_attrs(g->arena, &P->attrs, &P->n_attrs, &P->cap_attrs, op, false);
    for (int i = 0; i < op->nout; i++)
        if (j > 0 && graph_is_final_param_grad(g, op->out[i])) sync_grad(E, P, op->out[i], j);
}

// Every op's width: forward ops their region's; backward ops their forward op's; sums and fills
// that of the value they are the gradient of; the optimizer its parameter's.
static void op_widths(bbuild *E) {
    const pcc_graph *g = E->g;
    int *tw = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    for (int t = 0; t < g->n_tensors; t++) tw[t] = -1;
    E->opw = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_ops + 1));
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        E->opw[o] = E->b->width[E->b->region_of[o]];
        for (int i = 0; i < op->nout; i++) tw[op->out[i]] = E->opw[o];
        for (int i = 0; i < op->nin; i++)
            if (tw[op->in[i]] < 0) tw[op->in[i]] = E->opw[o];
    }
    for (int o = g->n_fwd_ops; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase == PCC_PHASE_OPT) E->opw[o] = tw[op->in[0]];
        else if (op->fwd >= 0) E->opw[o] = E->opw[op->fwd];
        else {
            int of = op->nout ? g->tensors[op->out[0]].of : -1;
            E->opw[o] = of >= 0 && tw[of] >= 0 ? tw[of] : 0;
        }
    }
}

static void bprogram(bbuild *E, bprog *P) {
    const pcc_graph *g = E->g;
    int C = E->b->n_axes + 1;
    P->at = arena_alloc(g->arena, sizeof(int *) * (size_t)(g->n_tensors + 1));
    for (int t = 0; t < g->n_tensors; t++) {
        P->at[t] = arena_alloc(g->arena, sizeof(int) * (size_t)C);
        for (int j = 0; j < C; j++) P->at[t][j] = -1;
    }
    for (int t = 0; t < g->n_tensors; t++) E->home_w[t] = -1;
    E->phase = PLAN_PHASE_FWD;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase == PCC_PHASE_OPT) continue;
        E->phase = op->phase == PCC_PHASE_FWD ? PLAN_PHASE_FWD : PLAN_PHASE_BWD;
        bop(E, P, o);
    }
    E->phase = PLAN_PHASE_BWD;
    bucket_flush(E, P);
    E->phase = PLAN_PHASE_NONE;
    if (P->used_sync) {
        bevent(E, P, PLAN_I_RECORD, STREAM_SYNC, EV_SYNCED);
        bevent(E, P, PLAN_I_WAIT, STREAM_MAIN, EV_SYNCED);
    }
    E->phase = PLAN_PHASE_OPT;
    for (int o = 0; o < g->n_ops; o++)
        if (g->ops[o].phase == PCC_PHASE_OPT) bop(E, P, o);
    E->phase = PLAN_PHASE_NONE;
}

static char *bnotes(const pcc_graph *g, const pcc_burst *b) {
    size_t cap = 4096, n = 0;
    char *s = arena_alloc(g->arena, cap);
    n += (size_t)snprintf(s, cap, "burst: %d devices, mesh of %d axes of 2; estimated step %.6g s (data parallelism %.6g s)",
                          b->devices, b->n_axes, b->est_step_s, b->dp_step_s);
    for (int r = 0; r < b->n_regions; r++) {
        char line[256];
        int64_t B = g->dims[b->batch_dim].size;
        snprintf(line, sizeof line, "\nlayer %d %s: %d GPUs, batch %lld per GPU, %.6g ms (sync %.6g ms)", r,
                 region_name(g, b, r), 1 << b->width[r], (long long)(B >> b->width[r]), 1e3 * b->region_s[r],
                 1e3 * b->sync_s[r]);
        s = arena_append(g->arena, s, &n, &cap, line);
    }
    return s;
}

// What META says of a choice: the mesh of n axes of 2, one micro-batch, no pipeline, the
// estimate, the FLOPs of a step, and the layers' widths as notes.
static void burst_meta(const pcc_graph *g, const pcc_burst *b, plan_meta *m) {
    m->world = (uint32_t)b->devices;
    m->n_axes = (uint32_t)b->n_axes;
    for (int a = 0; a < b->n_axes; a++) {
        m->mesh[a] = 2;
        snprintf(m->axis_names[a], sizeof m->axis_names[a], "b%d", a % 10);
    }
    m->micro_batches = 1;
    m->schedule = PLAN_SCHED_NONE;
    m->est_step_s = b->est_step_s;
    double flops = 0;
    for (int k = 0; k < g->n_ops; k++)
        if (g->ops[k].phase != PCC_PHASE_OPT) flops += op_flops_matmul(g, &g->ops[k]);
    m->model_flops = flops;
    m->notes = bnotes(g, b);
}

pcc_programs *burst_programs(const pcc_graph *g, const pcc_cluster *c, const pcc_burst *b, const pcc_preserve_opts *o) {
    bbuild E = {.g = g, .c = c, .b = b, .bucket_cap = o->bucket_bytes};
    E.home_w = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    op_widths(&E);
    int NP = b->n_axes + 1;
    pcc_programs *out = arena_alloc(g->arena, sizeof *out);
    out->n = NP;
    out->prog = arena_alloc(g->arena, sizeof(pcc_program) * (size_t)NP);
    for (int k = 0; k < NP; k++) {
        bprog P = {.k = k};
        bprogram(&E, &P);
        out->prog[k] = (pcc_program){.name = arena_printf(g->arena, "burst%d+", 1 << k), .buf = P.buf, .n_buf = P.n_buf,
                                     .insn = P.insn, .n_insn = P.n_insn, .args = P.args, .n_args = P.n_args,
                                     .attrs = P.attrs, .n_attrs = P.n_attrs, .streams = P.used_sync ? 2 : 1};
    }
    burst_meta(g, b, &out->meta);
    out->n_groups = E.n_groups;
    out->group_axes = arena_alloc(g->arena, sizeof(uint32_t) * (size_t)(E.n_groups + 1));
    for (int i = 0; i < E.n_groups; i++) out->group_axes[i] = (uint32_t)E.groups[i];
    // A rank runs the program of the smallest width it is active at: 1 + its last axis with
    // coordinate 1 (rank 0, on every axis 0, runs them all: program 0).
    out->rank_program = arena_alloc(g->arena, sizeof(uint32_t) * (size_t)b->devices);
    for (uint32_t r = 0; r < (uint32_t)b->devices; r++) {
        uint32_t x = r;
        int k = 0;
        for (int a = b->n_axes - 1; a >= 0; a--, x /= 2)
            if (x % 2 && k == 0) k = a + 1;
        out->rank_program[r] = (uint32_t)k;
    }
    return out;
}
