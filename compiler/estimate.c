/*
 * estimate.c: the one step-time estimator of a strategy, on the cost model.
 *
 * The step-time estimate of a strategy (phase 2's: it ranks the candidates of the search, and
 * --estimate-only prints it) walks the plan as one device of each pipeline stage runs it, on the
 * cost model (cost.c):
 *   - every operator at its per-device shape (the batch dimension split dp ways where the
 *     operator is split over dp, its tp letter's dimension tp ways), forward, backward and the
 *     recomputed forward of recomputed operators, each on its layer's stage;
 *   - the tensor-parallel resharding of every producer->consumer edge, forward and backward
 *     (ilp_op_comm on the graph with one replica's batch and sequence), again when recomputed,
 *     and again in the backward pass where the consumer's backward reads the value (a weight's
 *     gradient reads the linear's input, which phase 3 keeps in its producer's layout);
 *   - with context parallelism, the all-to-alls over cp around attention (est_cp_comm), and the
 *     all-reduce of the gradients over cp beside dp's;
 *   - the pipeline's messages, per micro-batch each way: every value read on a stage other than
 *     the one that made it (skip connections across stages too; with 1F1B their gradients hop
 *     back between neighbours), and a block's carries between copies on two stages (backward,
 *     with the partial sums of the gradients it sums over its copies); each on the network
 *     where its ranks lie on two nodes, and a device's concurrent messages (a group of sends and
 *     receives, as the runtime issues them) costing the longest;
 *   - the gradients of parameters shared between stages (tied embeddings): summed over the
 *     micro-batches and sent to the owner's stage once per step, after its last backward pass
 *     (preserve.c's share_params), so the owner waits for them before its optimizer;
 *   - the micro-batch schedule (pipeline_makespan): the schedule's units in each device's order,
 *     each as soon as its device is free and its input is there, every chunk at its own layers'
 *     seconds, the messages above between the chunks that send them; with equal stages
 *     (m + (pp-1)/V) stage-times, and where one stage is the busiest the stages after it fill
 *     and drain while it works through its queue;
 *   - per stage, the gradient synchronization (all-reduce over dp, reduce-scatter with ZeRO,
 *     the tp group's all-reduce of gradients its replicas hold partial sums of) in phase 3's
 *     buckets on the second stream, each issued as the last micro-batch's backward pass makes
 *     its gradients and run behind the bucket before (est_bucket_walk; what outlasts the
 *     backward pass counts), then the optimizer and, with ZeRO, the all-gather of the updated
 *     parameters. A stage that finishes its last backward early (1F1B drains toward stage 0)
 *     has that much more time to hide its sync.
 * Interleaving (--virtual-stages V): the layers are cut into pp * V chunks, chunk c on device
 * c mod pp (the strategy's op_stage and copy_stage hold the chunk).
 *
 * It reads the strategy (mesh, splits, stages) and its tp group's ILP choice, never the plan:
 * the simulator (runtime/sim.c) times the emitted plan itself, and the compile summary prints the
 * two side by side.
 */
#include "pipeline.h"

#include <math.h>
#include <string.h>

static int tensor_of_op(const pcc_op *op, int k) { return k < op->nin ? op->in[k] : op->out[k - op->nin]; }

typedef struct est {
    const pcc_graph *g;
    const pcc_cluster *c;
    const pcc_intra *sc;
    pcc_strategy *s;
    int dp, tp, pp, v, m, nf; // nf: forward ops
    int cp;                   // context parallelism (1: none): the sequence split cp ways
    int zw;                   // ZeRO's shards: dp x cp with ZeRO (layout.c's zero_shard), else 1
    pcc_group_shape zg;       // the dp x cp group: ZeRO's collectives, and the all-reduce of sums over both
    pcc_graph gv;             // g with one data-parallel replica's batch
    bool *dpd;                // per model dimension: some op's dp letter cuts it (the batch, or one made of it)
    int ***ways;              // per forward op, per operand, per axis: the ways it is split on a device
    int *owner;               // per tensor: the forward op that first reads it (params), -1
    // What follows up to orphan_top is one group's (est_times): the op times of every group a
    // stage is on, T[vi[d]] for pipeline device d, whose view of the cluster is view[d].
    double *f, *b;            // per forward op, one copy: forward, backward operator seconds
    double *fc, *bc, *sy;     // per forward op, one copy: tp resharding forward, backward; tp sync
    double *xc, *xin;         // per forward op, one copy: cp's all-to-alls of its forward; of its inputs alone
    double *orphan;           // per block, one copy: backward ops of no forward op
    double orphan_top;
    double *after;            // per parameter: its owner's backward operator seconds after its gradient is made (est_bucket_walk)
    struct est_times {
        double *f, *b, *fc, *bc, *sy, *orphan, orphan_top, *after;
    } *T;
    const pcc_cluster **view; // per pipeline device: its group's view (the cluster itself with one group)
    int *vi;                  // per pipeline device: its T
    // Per device: per micro-batch compute, tp communication, p2p (forward, backward); per step
    // sync, optimizer, post-optimizer all-gather, tied parameters' gradients received.
    double *Fc, *Fm, *Fp, *Bc, *Bm, *Bp, *sync, *opt, *post, *tied;
    double *rs; // ZeRO-2/3: per micro-batch, the block copies' gradients' reduce-scatters on stream 1 (est_gathers_exposed_s)
    double *rsb;        // ZeRO-2/3: their bytes (all copies), per device
    double *rsbt, *rsr; // ... of which those summed over tp replicas first (an all-reduce), and the most replicas
    double *rsn;        // ZeRO-3 with --prefetch none: how many (each gradient's own, as it is made)
    double *rs_top;  // ZeRO-3: per top-level forward op before the blocks, its gradients' reduce-scatters (est_top_rs_exposed)
    double *rs_last; // ZeRO-3 with one micro-batch: what the step's end waits for of those
    double *agb, *copies; // ZeRO-3: the bytes of block parameters gathered on stream 1 each pass (all copies), and block copies, per device
    double *cf, *cb;      // ... and the compute of those copies, forward and backward, per micro-batch
    double *postb, *postt; // ZeRO-1/2: the bytes gathered after the optimizer, of block parameters (all copies) and top-level ones
    double *pool;       // per device and bucket segment: the bytes that share gradient buckets (est_pool)
    double *wait;       // per device: what its step waits for of its buckets after the backward pass (est_bucket_walk)
    pcc_pipe_link *links; // the messages between chunks per micro-batch (est_message)
    int n_links, cap_links;
    double *chf, *chb;  // per chunk and micro-batch: its layers' forward and backward seconds (compute and tp)
    double ilc, ilm, ilp; // interlaced operators, per micro-batch: compute, tp and pp collectives, messages (est_interlaced)
    double il_mid;        // ... of which the phase between the passes (the LM head's; 1F1B: per micro-batch, all devices together)
} est;

static bool est_il(const est *E, int i) { return E->s->interlaced && E->g->ops[i].block < 0 && E->s->interlaced[i]; }

static double *zeros(const pcc_graph *g, int n) { return arena_alloc(g->arena, sizeof(double) * (size_t)(n + 1)); }

static int *ones(const pcc_graph *g) {
    int *w = arena_alloc(g->arena, sizeof(int) * PCC_MAX_RANK);
    for (int a = 0; a < PCC_MAX_RANK; a++) w[a] = 1;
    return w;
}

// The dimensions dp cuts: those of the ops' dp letters (search.c's dp_letter: the batch, or
// dimensions made of it as Swin's windows are).
static void est_dp_dims(est *E) {
    const pcc_graph *g = E->g;
    E->dpd = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_dims + 1));
    if (E->s->batch_dim >= 0) E->dpd[E->s->batch_dim] = true;
    for (int i = 0; i < E->nf && E->dp > 1; i++) {
        pcc_letter l[PCC_MAX_LETTERS];
        int dl = E->s->letter[PCC_AX_DP][i];
        if (dl >= 0 && dl < op_letters(g, &g->ops[i], l)) E->dpd[l[dl].dim] = true;
    }
}

// Tensor t split only over dp, along its first dimension dp cuts, and over cp along the sequence.
static const int *dp_ways(const est *E, int t) {
    int *w = ones(E->g);
    const pcc_tensor *x = &E->g->tensors[t];
    bool cut = false;
    for (int a = 0; a < x->rank; a++)
        if (E->dpd[x->dims[a]] && !cut) w[a] = E->dp, cut = true;
        else if (E->cp > 1 && x->dims[a] == E->s->seq_dim) w[a] = E->cp;
    return w;
}

// Forward op i's operands as its chosen candidate splits them over tp, over dp along its dp
// letter, and over cp along its cp letter.
static void est_op_ways(est *E, int i) {
    const pcc_graph *g = E->g;
    const pcc_op *op = &g->ops[i];
    const pcc_cand *cd = &E->sc->t->ops[i].c[E->sc->choice[i]];
    int n = op->nin + op->nout, dl = E->s->letter[PCC_AX_DP][i], cl = E->cp > 1 ? E->s->letter[PCC_AX_CP][i] : -1;
    pcc_letter l[PCC_MAX_LETTERS];
    if (dl >= 0 || cl >= 0) op_letters(g, op, l);
    E->ways[i] = arena_alloc(g->arena, sizeof(int *) * (size_t)(n + 1));
    for (int k = 0; k < n; k++) {
        int *w = E->ways[i][k] = ones(g);
        const pcc_layout *lay = k < op->nin ? &cd->in[k] : &cd->out[k - op->nin];
        for (int a = 0; a < PCC_MAX_RANK; a++) w[a] = lay->d[a] > 1 ? lay->d[a] : 1;
        if (dl >= 0 && l[dl].axis[k] >= 0) w[l[dl].axis[k]] *= E->dp;
        if (cl >= 0 && l[cl].axis[k] >= 0) w[l[cl].axis[k]] *= E->cp;
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

// Per forward op, how its operands split on one device; the graph with one replica's batch (the
// dimensions dp cuts, each cut dp ways); which forward op reads each parameter first.
static void est_layout(est *E) {
    const pcc_graph *g = E->g;
    est_dp_dims(E);
    E->ways = arena_alloc(g->arena, sizeof(int **) * (size_t)(E->nf + 1));
    for (int i = 0; i < E->nf; i++) est_op_ways(E, i);
    E->gv = *g;
    E->gv.dims = arena_alloc(g->arena, sizeof(pcc_dim) * (size_t)(g->n_dims + 1));
    for (int k = 0; k < g->n_dims; k++) {
        E->gv.dims[k] = g->dims[k];
        if (E->dpd[k]) E->gv.dims[k].size = (g->dims[k].size + E->dp - 1) / E->dp;
        if (E->cp > 1 && k == E->s->seq_dim) E->gv.dims[k].size = (g->dims[k].size + E->cp - 1) / E->cp;
    }
    E->owner = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    for (int t = 0; t < g->n_tensors; t++) E->owner[t] = -1;
    for (int i = 0; i < E->nf; i++)
        for (int k = 0; k < g->ops[i].nin; k++)
            if (E->owner[g->ops[i].in[k]] < 0) E->owner[g->ops[i].in[k]] = i;
}

// A backward op of no forward op (the sum of a value's gradient contributions from its
// readers): every operand split as its output, the gradient of a forward value, is where that
// value is made (its producer's layout; a graph input's: its first reader's).
static const int *const *est_orphan_ways(const est *E, const pcc_op *o) {
    const pcc_graph *g = E->g;
    int y = o->out[0], x = g->tensors[y].kind == PCC_T_GRAD ? g->tensors[y].of : -1, p = -1;
    if (x >= 0) p = g->tensors[x].producer >= 0 && g->tensors[x].producer < E->nf ? g->tensors[x].producer : E->owner[x];
    if (p < 0) return est_ways(E, o, -1);
    const int *wy = est_ways_of(E, p, x);
    int n = o->nin + o->nout;
    const int **w = arena_alloc(g->arena, sizeof(int *) * (size_t)(n + 1));
    for (int k = 0; k < n; k++) {
        const pcc_tensor *t = &g->tensors[tensor_of_op(o, k)];
        bool same = t->rank == g->tensors[y].rank;
        for (int a = 0; same && a < t->rank; a++) same = t->dims[a] == g->tensors[y].dims[a];
        w[k] = same ? wy : dp_ways(E, tensor_of_op(o, k));
    }
    return w;
}

// Ring attention (--cp-form ring): attention op i's times above are one block's, q's piece
// against one k/v piece (its sequence letter split over cp on every operand; causal, the
// diagonal block: in the flash form that is half a whole block, unfused a whole one). The ring
// runs cp steps and passes the k/v block between two (the shift, two collectives), overlapped
// with the block in flight, so a step costs max(block, transfer): the forward sum C_j + sum
// over the cp - 1 shifts max(0, T - C_j) exposed; the backward recomputes that ring, then runs
// the gradient's, whose steps pass k and v (T) while the block's gradient G_j computes (the
// whole backward op's time: its kernel computes the block's scores again, as the plan's
// attention_block_grad instructions are timed), and dk and dv (T, the same bytes) after it, cp
// times (the last brings them home): preserve.c's ring_attention. In the natural order the longest rank (the last: causal, every
// block) computes the diagonal and cp - 1 whole blocks; in zigzag order (--cp-form zigzag)
// every rank computes half a whole block at every step, causal (a whole one otherwise).
static void est_ring(est *E) {
    const pcc_graph *g = E->g;
    if (E->cp < 2 || !E->s->config.cp_ring) return;
    for (int i = 0; i < E->nf; i++) {
        const pcc_op *op = &g->ops[i];
        if (op->kind != PCC_OP_ATTENTION || E->s->letter[PCC_AX_CP][i] < 0) continue;
        double kv = 0;
        for (int k = 1; k <= 2; k++) {
            double bytes = tensor_bytes(g, &g->tensors[op->in[k]]);
            for (int a = 0; a < g->tensors[op->in[k]].rank; a++) bytes /= E->ways[i][k][a];
            kv += cost_collective_s(E->c, PCC_COLL_SHIFT, bytes, (pcc_group_shape){E->cp, E->tp}) + cost_launch_s(E->c);
        }
        double C = E->f[i], G = E->b[i], cp = E->cp;
        double whole = op->attrs.causal && op->attrs.mode == PLAN_ATTN_FLASH ? 2 : 1; // a whole block, in C
        double step = E->s->config.cp_zigzag ? (op->attrs.causal ? whole / 2 : 1) : whole; // steps 1.. (zigzag: all)
        double C0 = E->s->config.cp_zigzag ? step * C : C, G0 = E->s->config.cp_zigzag ? step * G : G, Cs = step * C, Gs = step * G;
        E->f[i] = C0 + (cp - 1) * Cs, E->b[i] = C0 + (cp - 1) * Cs + G0 + (cp - 1) * Gs;
        E->fc[i] += (cp - 1) * fmax(0, kv - Cs);
        E->bc[i] += (cp - 1) * fmax(0, kv - Cs) + (cp - 1) * fmax(0, kv - Gs) + cp * kv;
    }
}

// How interlaced op i splits operand o over pp: its axis (dimension index), -1 whole, -2 partial sums.
static int est_pp_axis(const est *E, int i, int o) {
    int li = E->s->letter[PCC_AX_PP][i];
    if (li < 0) return -1;
    pcc_letter l[PCC_MAX_LETTERS];
    op_letters(E->g, &E->g->ops[i], l);
    if (l[li].axis[o] >= 0) return l[li].axis[o];
    return o >= E->g->ops[i].nin && l[li].reduce ? -2 : -1;
}

// Vocabulary-parallel cross_entropy (compiler/vocab.c): where op i's classes are split k ways
// (over tp; an interlaced loss over pp too), its forward and its gradient each gather every
// piece's statistics (3 f32 a row) over the axes that split them, and the gradient reads its
// piece of the logits once more to make them.
static void est_vocab(est *E) {
    const pcc_graph *g = E->g;
    for (int i = 0; i < E->nf; i++) {
        const pcc_op *op = &g->ops[i];
        if (op->kind != PCC_OP_CROSS_ENTROPY) continue;
        const pcc_tensor *x = &g->tensors[op->in[0]];
        int last = x->rank - 1;
        bool over_pp = E->s->interlaced && E->s->interlaced[i] && est_pp_axis(E, i, 0) == last;
        int kt = E->ways[i][0][last], kp = over_pp ? E->pp : 1; // the pieces over tp, and over pp
        double piece = tensor_bytes(g, x) / kt, rows = (double)tensor_numel(g, x);
        if (kt * kp < 2) continue;
        for (int a = 0; a < x->rank; a++) rows /= a == last ? (double)g->dims[x->dims[a]].size : E->ways[i][0][a];
        for (int a = 0; a < last; a++) piece /= E->ways[i][0][a];
        // one gather over the tp and pp axes together, charged as one over tp (a node's links),
        // then one of those over pp (across stages)
        double gather = cost_launch_s(E->c);
        if (kt > 1) gather += cost_vocab_stats_s(E->c, rows, kt, (pcc_group_shape){kt, 1});
        if (kp > 1) gather += cost_vocab_stats_s(E->c, kt * rows, kp, (pcc_group_shape){kp, E->dp * E->cp * E->tp});
        E->fc[i] += gather, E->bc[i] += gather;
        E->b[i] += cost_compute_s(E->c, 0, piece, x->dtype, false);
    }
}

// A parameter read by two forward ops (a tied embedding: the token embedding, then the LM head)
// lives in its first reader's layout (layout.c); a later reader that wants another one reshards
// it before its forward and again before a backward op that reads it (the LM head's gradient of
// its input), and its gradient back, each micro-batch. ZeRO-3 gathers every parameter in its
// reader's layout anyway (est_top_gathers), but the gradients are still summed in one layout.
static void est_shared_params(est *E, const pcc_intra_opts *so) {
    const pcc_graph *g = E->g;
    bool z3 = E->s->zero >= 3;
    const uint64_t *rd = NULL; // made on the first such parameter: most graphs have none
    for (int i = 0; i < E->nf; i++) {
        const pcc_op *op = &g->ops[i];
        const pcc_cand *ci = &E->sc->t->ops[i].c[E->sc->choice[i]];
        for (int k = 0; k < op->nin; k++) {
            int p = op->in[k], f = E->owner[p];
            if (g->tensors[p].kind != PCC_T_PARAM || f < 0 || f == i) continue;
            const pcc_op *fo = &g->ops[f];
            const pcc_cand *cf = &E->sc->t->ops[f].c[E->sc->choice[f]];
            int kf = 0;
            while (kf < fo->nin && fo->in[kf] != p) kf++;
            double t = reshard_rvd_2d(E->c, &E->gv, &g->tensors[p], &cf->in[kf], &ci->in[k], so->group, so->group_minor, NULL);
            if (t <= 0) continue;
            double n = (double)op_copies(g, op);
            if (!rd) rd = graph_backward_reads(g);
            if (!z3) E->fc[i] += n * t;
            if (!z3 && k < 64 && (rd[i] >> k & 1)) E->bc[i] += n * t;
            // Its gradient goes back to the first reader's layout, where the two are summed.
            pcc_layout gi = transform_grad_in(ci, k), gh = transform_grad_in(cf, kf);
            double h = reshard_rvd_2d(E->c, &E->gv, &g->tensors[p], &gi, &gh, so->group, so->group_minor, NULL);
            if (h > 0) E->bc[f] += n * h;
        }
    }
}

// Whether forward op i holds tensor t (its operand k) with fewer ways along a dimension dp cuts
// than op j lays it out (j < 0: t's producer; a graph input: never): phase 3 all-gathers it over
// dp to hand it from j to i. Bytes on one device in op i's layout in *bytes.
static bool est_dp_narrower(const est *E, int i, int k, int j, double *bytes) {
    const pcc_graph *g = E->g;
    int t = tensor_of_op(&g->ops[i], k);
    if (j < 0) j = g->tensors[t].producer;
    if (j < 0 || j >= E->nf) return false;
    const pcc_tensor *x = &g->tensors[t];
    const int *mine = E->ways[i][k], *theirs = est_ways_of(E, j, t);
    bool narrower = false;
    *bytes = tensor_bytes(g, x);
    for (int a = 0; a < x->rank; a++) {
        narrower |= E->dpd[x->dims[a]] && theirs[a] > mine[a];
        *bytes /= mine[a];
    }
    return narrower;
}

// An operator dp cannot cut (batch norm's statistics over a batch that leaves fewer samples than
// a ghost batch norm's group per replica) runs whole on every replica (search.c's dp_letter -1).
// Phase 3 hands it its batch-split inputs by an all-gather over dp and slices its outputs for
// batch-split readers; backward, it gathers the gradient of an output that a batch-split reader
// makes, and again each input its backward reads (kept in its producer's split), and slices the
// gradients of its inputs. On E->c, per copy, into fc and bc.
static void est_dp_reshard(est *E) {
    const pcc_graph *g = E->g;
    if (E->dp < 2) return;
    const uint64_t *rd = NULL;
    pcc_group_shape dpg = {E->dp, E->cp * E->tp};
    double launch = cost_launch_s(E->c), bytes;
    for (int i = 0; i < E->nf; i++) {
        const pcc_op *op = &g->ops[i];
        if (E->s->letter[PCC_AX_DP][i] >= 0) continue;
        for (int k = 0; k < op->nin; k++) {
            if (!est_dp_narrower(E, i, k, -1, &bytes)) continue;
            double ag = cost_collective_s(E->c, PCC_COLL_ALL_GATHER, bytes, dpg) + launch;
            if (!rd) rd = graph_backward_reads(g);
            E->fc[i] += ag;
            E->bc[i] += (k < 64 && (rd[i] >> k & 1) ? ag : 0) + cost_memory_s(E->c, 2 * bytes / E->dp) + launch;
        }
        for (int k = op->nin; k < op->nin + op->nout; k++) {
            const pcc_tensor *y = &g->tensors[op->out[k - op->nin]];
            bool split = false, cut = false;
            for (int a = 0; a < y->rank; a++) cut |= E->dpd[y->dims[a]];
            for (int j = i + 1; cut && j < E->nf && !split; j++)
                for (int r = 0; r < g->ops[j].nin && !split; r++)
                    split = g->ops[j].in[r] == op->out[k - op->nin] && est_dp_narrower(E, i, k, j, &bytes);
            if (!split) continue;
            E->fc[i] += cost_memory_s(E->c, 2 * bytes / E->dp) + launch;
            E->bc[i] += cost_collective_s(E->c, PCC_COLL_ALL_GATHER, bytes, dpg) + launch;
        }
    }
}

// Operator seconds per forward op (its forward, its backward ops) and tp communication, on
// E->c (est_groups sets it to each group's view in turn).
static void est_ops(est *E) {
    const pcc_graph *g = E->g;
    E->orphan_top = 0;
    E->f = zeros(g, E->nf), E->b = zeros(g, E->nf), E->orphan = zeros(g, g->n_blocks), E->after = zeros(g, g->n_tensors);
    for (int p = 0; p < g->n_tensors; p++) E->after[p] = -1;
    for (int i = 0; i < E->nf; i++) E->f[i] = cost_op_s(E->c, g, &g->ops[i], (const int *const *)E->ways[i]);
    for (int o = E->nf; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase != PCC_PHASE_BWD) continue;
        double t = cost_op_s(E->c, g, op, op->fwd >= 0 ? est_ways(E, op, op->fwd) : est_orphan_ways(E, op));
        if (op->fwd >= 0) E->b[op->fwd] += t;
        else if (op->block >= 0) E->orphan[g->blocks[op->block].fwd] += t;
        else E->orphan_top += t;
        for (int k = 0; op->fwd >= 0 && k < op->nout; k++) { // the owner's part of a parameter's gradient made
            int p = g->tensors[op->out[k]].of;
            if (graph_is_param_grad(g, op->out[k]) && E->owner[p] == op->fwd) E->after[p] = E->b[op->fwd];
        }
    }
    for (int p = 0; p < g->n_tensors; p++)
        E->after[p] = E->after[p] >= 0 ? E->b[E->owner[p]] - E->after[p] : 0;
    E->fc = zeros(g, E->nf), E->bc = zeros(g, E->nf), E->sy = zeros(g, E->nf);
    pcc_intra_opts so = {.group = {E->tp, 1}, .group_minor = E->s->mesh[PCC_AX_TQ], .memory_bytes = E->c->memory_bytes, .quiet = true, .bg_dense = E->s->bg_dense,
                         .bucket_bytes = E->s->bucket_bytes};
    ilp_op_comm(&E->gv, E->c, E->sc->t, &so, E->sc->choice, E->fc, E->bc, E->sy);
    est_shared_params(E, &so);
    for (int i = 0; i < E->nf; i++) {
        double n = (double)op_copies(g, &g->ops[i]);
        E->fc[i] /= n, E->bc[i] /= n, E->sy[i] /= n;
        if (E->s->run_credit[0]) E->fc[i] = fmax(0, E->fc[i] - E->s->run_credit[0][i]);
        if (E->s->run_credit[1]) E->bc[i] = fmax(0, E->bc[i] - E->s->run_credit[1][i]);
    }
    est_dp_reshard(E);
    est_ring(E);
    est_vocab(E);
}

// Context parallelism: op i's all-to-alls over cp in its forward pass, where its cp letter is
// not the sequence (attention's heads): every operand that has the sequence comes from, or goes
// to, operators that split the sequence over cp. Each moves the rank's piece. The backward pass
// mirrors them (dy in; dq, dk, dv out) and exchanges the kept inputs q, k, v again (phase 3
// keeps them in their producer's sequence split), so it costs the forward's plus its inputs'.
static void est_cp_comm(est *E) {
    const pcc_graph *g = E->g;
    E->xc = zeros(g, E->nf), E->xin = zeros(g, E->nf);
    if (E->cp < 2) return;
    pcc_group_shape cpg = {E->cp, E->tp};
    for (int i = 0; i < E->nf; i++) {
        const pcc_op *op = &g->ops[i];
        int cl = E->s->letter[PCC_AX_CP][i];
        pcc_letter l[PCC_MAX_LETTERS];
        if (cl < 0) continue;
        op_letters(g, op, l);
        if (l[cl].dim == E->s->seq_dim) continue;
        for (int k = 0; k < op->nin + op->nout; k++) {
            const pcc_tensor *t = &g->tensors[tensor_of_op(op, k)];
            bool has_seq = false;
            for (int a = 0; a < t->rank; a++) has_seq |= t->dims[a] == E->s->seq_dim;
            if (!has_seq) continue;
            double bytes = tensor_bytes(g, t);
            for (int a = 0; a < t->rank; a++) bytes /= E->ways[i][k][a];
            // Where tp splits the heads too, cp's pieces of them are the more significant (cp is
            // the slower mesh axis) and tp's pieces of the producer's do not nest in them:
            // phase 3 gathers the heads over tp, exchanges them whole over cp, and slices tp's
            // piece (reshard.c's chain). The same on the way back.
            int ax = l[cl].axis[k], tw = ax >= 0 ? E->ways[i][k][ax] / E->cp : 1;
            double s = cost_launch_s(E->c);
            if (tw > 1) {
                bytes *= tw;
                s += cost_collective_s(E->c, PCC_COLL_ALL_GATHER, bytes, (pcc_group_shape){E->tp, 1}) + cost_launch_s(E->c);
            }
            s += cost_collective_s(E->c, PCC_COLL_ALL_TO_ALL, bytes, cpg);
            E->xc[i] += s;
            if (k < op->nin) E->xin[i] += s;
        }
    }
}

// Each pipeline device's view of the cluster (its stage's group), and est_ops on every distinct one.
static void est_groups(est *E) {
    const pcc_graph *g = E->g;
    const pcc_cluster *all = E->c;
    E->view = arena_alloc(g->arena, sizeof(pcc_cluster *) * (size_t)E->pp);
    E->vi = arena_alloc(g->arena, sizeof(int) * (size_t)E->pp);
    E->T = arena_alloc(g->arena, sizeof(struct est_times) * (size_t)E->pp);
    int nv = 0;
    for (int d = 0; d < E->pp; d++) {
        const pcc_cluster *v = cluster_stage_view(all, E->pp, d);
        E->view[d] = v ? v : all; // a stage across groups (never planned): the worst group's figures
        E->vi[d] = nv;
        for (int k = 0; k < d; k++)
            if (E->view[k] == E->view[d]) E->vi[d] = E->vi[k];
        if (E->vi[d] < nv) continue;
        E->c = E->view[d];
        est_ops(E);
        E->T[nv++] = (struct est_times){E->f, E->b, E->fc, E->bc, E->sy, E->orphan, E->orphan_top, E->after};
    }
    E->c = all;
}

// Device d's group's op times into E->f .. E->orphan_top.
static void est_on(est *E, int d) {
    const struct est_times *t = &E->T[E->vi[d]];
    E->f = t->f, E->b = t->b, E->fc = t->fc, E->bc = t->bc, E->sy = t->sy, E->orphan = t->orphan, E->orphan_top = t->orphan_top;
    E->after = t->after;
}

// The device of forward op i in copy k of its block (k ignored at the top level).
static int est_device(const est *E, int i, int k) {
    const pcc_op *op = &E->g->ops[i];
    return (op->block < 0 ? E->s->op_stage[i] : E->s->copy_stage[op->block][k]) % E->pp;
}

// Forward op i's backward pass (its recomputed forward included), one copy, on the device est_on
// chose: operator seconds *c, tp and cp communication *m.
static void est_bwd(const est *E, int i, double *c, double *m) {
    bool rc = E->s->recompute[i];
    *c = E->b[i] + (rc ? E->f[i] : 0), *m = E->bc[i] + E->xc[i] + E->xin[i] + (rc ? E->fc[i] + E->xc[i] : 0);
}

// One forward op's copy on device d: its forward, backward and recomputed forward.
static void est_add_op(est *E, int i, int d) {
    est_on(E, d);
    double bc, bm;
    est_bwd(E, i, &bc, &bm);
    E->Fc[d] += E->f[i], E->Fm[d] += E->fc[i] + E->xc[i];
    E->Bc[d] += bc, E->Bm[d] += bm;
    E->sync[d] += E->sy[i];
}

// Bytes on one device of tensor t in layout l (one replica's batch; partial sums are whole).
static double est_layout_bytes(const est *E, int t, const pcc_layout *l) {
    double bytes = tensor_bytes(&E->gv, &E->g->tensors[t]);
    for (int r = 0; l && r < E->g->tensors[t].rank; r++) bytes /= l->d[r];
    return bytes;
}

// Bytes on one device of tensor t as its producer's chosen layout holds it.
static double est_held_bytes(const est *E, int t) {
    int p = E->g->tensors[t].producer;
    const pcc_layout *l = NULL;
    for (int k = 0; p >= 0 && p < E->nf && k < E->g->ops[p].nout; k++)
        if (E->g->ops[p].out[k] == t) l = &E->sc->t->ops[p].c[E->sc->choice[p]].out[k];
    return est_layout_bytes(E, t, l);
}

// One copy of block bl's carried value k, or of its gradient, on device d: a memory pass
// (preserve.c copies it to and from its carry register: block_body in every copy, block_range
// at the block's ends).
static double est_carry_copy_s(const est *E, const pcc_block *bl, int k, int d) {
    return cost_memory_s(E->view[d], 2 * est_held_bytes(E, bl->carry[k].outer));
}

// What copy l of a block hands to the next one: its carried values.
static double est_carry_bytes(const est *E, const pcc_layer *l) {
    double bytes = 0;
    for (int k = 0; k < E->g->blocks[l->block].n_carry; k++) bytes += est_held_bytes(E, E->g->blocks[l->block].carry[k].outer);
    return bytes;
}

// The gradients forward block b's backward sums over its copies (T5's relative position bias),
// each the size of the value it is the gradient of (t >= 0: input t's only): their bytes, and on
// device d (d >= 0) the seconds one copy takes to add its part into each sum (preserve.c's
// block_body, an add apiece: two reads and a write; 3.6 ms a micro-batch on each stage of
// mT5-Large's encoder).
static double est_summed(const est *E, int b, int t, int d) {
    const pcc_graph *g = E->g;
    double x = 0;
    for (int k = 0; k < g->n_blocks; k++)
        for (int i = 0; g->blocks[k].fwd == b && i < g->blocks[k].n_acc; i++) {
            int of = g->tensors[g->blocks[k].acc[i].outer].of;
            double bytes = t < 0 || of == t ? est_held_bytes(E, of) : 0;
            if (bytes > 0) x += d < 0 ? bytes : cost_memory_s(E->view[d], 3 * bytes);
        }
    return x;
}

// What the backward pass hands back from copy l+1 of a block to copy l on another stage besides
// the gradients of its carries: the partial sums of the gradients its backward sums over the
// copies (preserve.c's acc_reg), each the size of the value it is the gradient of.
static double est_partial_sum_bytes(const est *E, const pcc_layer *l, const pcc_layer *next) {
    return l->op >= 0 || next->op >= 0 || next->block != l->block ? 0 : est_summed(E, l->block, -1, -1);
}

// A send from pipeline device a to b: on their group's links, or between two groups on the
// slower of the two (the cluster's worst figures). Device a's ranks are a W .. a W + W - 1 (W the
// ranks of a stage), and rank a W + x sends to b W + x: over the network where any such pair
// lies on two nodes (with W = 4 on nodes of 8, every other neighbour does).
static double est_send_s(const est *E, double bytes, int a, int b) {
    int w = E->dp * E->cp * E->tp;
    const pcc_cluster *c = E->view[a] == E->view[b] ? E->view[a] : E->c;
    pcc_group_shape pair = cost_pair_shape(c, (int64_t)a * w, (int64_t)b * w, w);
    return cost_collective_s(c, PCC_COLL_SEND_RECV, bytes, pair) + cost_launch_s(c);
}

// A message per micro-batch from chunk a to chunk b; several values between one pair in one pass
// go in one group of sends and receives, one after another over the link they share (the
// pipeline's walk has the messages of a group to other chunks wait likewise: pipeline.c).
static void est_message(est *E, bool bwd, double bytes, int a, int b) {
    if (a % E->pp == b % E->pp) return; // two chunks of one device
    double t = est_send_s(E, bytes, a % E->pp, b % E->pp);
    for (int i = 0; i < E->n_links; i++) {
        pcc_pipe_link *k = &E->links[i];
        if (k->from == a && k->to == b && k->bwd == bwd) {
            k->s += t;
            return;
        }
    }
    *VEC_PUSH(E->g->arena, E->links, E->n_links, E->cap_links) = (pcc_pipe_link){a, b, bwd, t};
}

// A gradient of `bytes` per micro-batch from chunk c back to chunk a: straight, or with 1F1B
// between neighbours, each stage between passing it on (layout.c's relayed).
static void est_grad_back(est *E, double bytes, int c, int a) {
    if (E->v > 1 || E->s->schedule == PCC_PIPE_GPIPE || c - a < 2) {
        est_message(E, true, bytes, c, a);
        return;
    }
    for (int k = c; k > a; k--) est_message(E, true, bytes, k, k - 1);
}

// Value t (bytes on a device) made on chunk a and read on chunk c: sent forward, and its gradient
// (gbytes: in the reader's layout of it, which phase 3 sends) back (with 1F1B, between neighbours,
// each stage between passing it on: layout.c's relayed).
static void est_crossing(est *E, int t, double bytes, double gbytes, int a, int c) {
    est_message(E, false, bytes, a, c);
    if (E->g->tensors[t].grad >= 0) est_grad_back(E, gbytes, c, a);
}

// The bytes on a device of the gradient of op's input i as its backward pass makes it (a split
// of the input over the group leaves a piece of the gradient; partial sums leave it whole).
static double est_grad_in_bytes(const est *E, int o, int i) {
    pcc_layout l = transform_grad_in(&E->sc->t->ops[o].c[E->sc->choice[o]], i);
    return est_layout_bytes(E, E->g->ops[o].in[i], &l);
}

// The values layer l reads that another chunk made (tchunk, the chunk that made each; tbytes,
// their bytes on a device), each sent once to a chunk (sent: the last chunk it went to).
static void est_reads(est *E, const pcc_layer *L, int l, const int *chunk, const int *tchunk,
                      const double *tbytes, int *sent) {
    const pcc_graph *g = E->g;
    int n = L[l].op >= 0 ? g->ops[L[l].op].nin : g->blocks[L[l].block].n_in;
    for (int i = 0; i < n; i++) {
        int t;
        if (L[l].op >= 0) {
            t = g->ops[L[l].op].in[i];
        } else {
            const pcc_block *bl = &g->blocks[L[l].block];
            if (L[l].copy > 0 && graph_carry_of(bl, bl->in[i].inner, true) >= 0) continue; // from the copy before
            t = bl->in[i].outer;
        }
        if (tchunk[t] < 0 || tchunk[t] == chunk[l] || sent[t] == chunk[l]) continue;
        sent[t] = chunk[l];
        // A gradient the block sums over its copies travels back with the carries (the partial
        // sum, est_partial_sum_bytes): only copy 0's stage, which holds the sum, sends it on to
        // t's maker (layout.c).
        if (L[l].op < 0 && L[l].copy > 0 && est_summed(E, L[l].block, t, -1) > 0) {
            est_message(E, false, tbytes[t], tchunk[t], chunk[l]);
            continue;
        }
        est_crossing(E, t, tbytes[t], L[l].op >= 0 ? est_grad_in_bytes(E, L[l].op, i) : tbytes[t], tchunk[t], chunk[l]);
    }
}

// A layer's forward and backward seconds: what its device's sums grew by since `span` began.
struct est_span {
    double f, b;
    int d;
};

static void est_chunk_add(est *E, int c, const struct est_span *s) {
    E->chf[c] += E->Fc[s->d] + E->Fm[s->d] - s->f, E->chb[c] += E->Bc[s->d] + E->Bm[s->d] - s->b;
}

// The layers on their devices, and the messages between chunks (both ways, per micro-batch):
// every value read on a chunk other than the one that made it (skip connections across stages
// included), and a block's carries between its copies on two chunks.
static void est_layers(est *E, const pcc_layer *L, int nl, const int *chunk) {
    const pcc_graph *g = E->g;
    int pp = E->pp, *tchunk = arena_alloc(g->arena, sizeof(int) * (size_t)(2 * g->n_tensors + 1)), *sent = tchunk + g->n_tensors;
    struct est_span span = {0, 0, 0};
    double *tbytes = zeros(g, g->n_tensors);
    int nc = pp * E->v;
    for (int t = 0; t < 2 * g->n_tensors; t++) tchunk[t] = -1;
    E->chf = zeros(g, nc), E->chb = zeros(g, nc);
    int prev = -1; // the layer before, on a stage
    for (int l = 0; l < nl; l++) {
        int d = chunk[l] % pp;
        if (L[l].op >= 0 && est_il(E, L[l].op)) continue; // on every stage, apart from the pipeline (est_interlaced)
        if (prev >= 0) est_chunk_add(E, chunk[prev], &span);
        prev = l;
        span = (struct est_span){E->Fc[d] + E->Fm[d], E->Bc[d] + E->Bm[d], d};
        est_reads(E, L, l, chunk, tchunk, tbytes, sent);
        if (L[l].op >= 0) {
            est_add_op(E, L[l].op, d);
            const pcc_op *op = &g->ops[L[l].op];
            for (int k = 0; k < op->nout; k++) tchunk[op->out[k]] = chunk[l], tbytes[op->out[k]] = est_held_bytes(E, op->out[k]);
            continue;
        }
        const pcc_block *bl = &g->blocks[L[l].block];
        if (L[l].copy > 0 && chunk[l - 1] != chunk[l]) { // the carries from the copy before
            double bytes = est_carry_bytes(E, &L[l - 1]);
            est_message(E, false, bytes, chunk[l - 1], chunk[l]);
            est_message(E, true, bytes + est_partial_sum_bytes(E, &L[l - 1], &L[l]), chunk[l], chunk[l - 1]);
        }
        double f0 = E->Fc[d], b0 = E->Bc[d];
        for (int i = bl->first_op; i < bl->first_op + bl->n_ops; i++) est_add_op(E, i, d);
        // Each carried value is copied in from its carry register and out to it, forward, and its
        // gradient likewise backward (preserve.c's block_body): memory-bound copies.
        // And into its register before the first copy, out of it after the last (preserve.c's
        // block_range), forward and backward: once at each end of the block.
        int ends = (L[l].copy == 0) + (L[l].copy == bl->repeat - 1);
        for (int k = 0; k < bl->n_carry; k++) {
            double copy = (2 + ends) * est_carry_copy_s(E, bl, k, d);
            E->Fc[d] += copy, E->Bc[d] += copy;
        }
        E->Bc[d] += est_summed(E, L[l].block, -1, d);
        E->cf[d] += E->Fc[d] - f0, E->cb[d] += E->Bc[d] - b0;
        E->copies[d] += 1;
        est_on(E, d);
        E->Bc[d] += E->orphan[L[l].block];
        for (int k = 0; k < bl->n_out; k++)
            tchunk[bl->out[k].outer] = chunk[l], tbytes[bl->out[k].outer] = est_held_bytes(E, bl->out[k].inner);
    }
    if (prev < 0) prev = nl - 1;
    est_on(E, chunk[prev] % pp);
    E->Bc[chunk[prev] % pp] += E->orphan_top;
    est_chunk_add(E, chunk[prev], &span);
}

// The pipeline's messages per pass on each device (Fp, Bp). A chunk's sends after a forward pass
// go with the receives of the backward pass that follows in 1F1B's steady state, and its backward
// sends with the next forward pass's receives; a device's chunks run apart. A chunk's sends go
// one after another over its link, as do its receives (the pipeline's walk, sim.c's msg_post).
static void est_link_passes(est *E) {
    int pp = E->pp, nc = pp * E->v;
    const pcc_graph *g = E->g;
    double *fs = zeros(g, nc), *fr = zeros(g, nc), *bs = zeros(g, nc), *br = zeros(g, nc); // per chunk, the sum
    for (int i = 0; i < E->n_links; i++) {
        const pcc_pipe_link *k = &E->links[i];
        double *snd = k->bwd ? bs : fs, *rcv = k->bwd ? br : fr;
        snd[k->from] += k->s, rcv[k->to] += k->s;
    }
    for (int k = 0; k < nc; k++) E->Fp[k % pp] += fmax(fs[k], br[k]), E->Bp[k % pp] += fmax(bs[k], fr[k]);
}

// Whether the gradients of op i's parameters are partial sums over cp (its cp letter is the
// sequence, a reduction letter of every weight's gradient).
static bool est_cp_partial(const est *E, int i) {
    if (E->cp < 2 || E->s->letter[PCC_AX_CP][i] < 0) return false;
    pcc_letter l[PCC_MAX_LETTERS];
    op_letters(E->g, &E->g->ops[i], l);
    return l[E->s->letter[PCC_AX_CP][i]].dim == E->s->seq_dim;
}

// ZeRO's shards of parameter p (owner op i), as layout.c's zero_shard cuts it: dp x cp where a
// dimension that tp leaves whole divides by that, else dp alone where one divides by dp, else 1
// (the parameter stays whole: its gradient is all-reduced in the buckets, as without ZeRO: a
// column-parallel bias, a conv weight of 3 input channels, batch norm's scale split over tp).
// *grp: the group its collectives run over.
static int est_zero_ways(const est *E, int p, int i, pcc_group_shape *grp) {
    const int *w = est_ways_of(E, i, p);
    int ways[2] = {E->zw, E->cp > 1 ? E->dp : 1};
    pcc_group_shape gs[2] = {E->zg, {E->dp, E->cp * E->tp}};
    for (int k = 0; k < 2; k++)
        if (layout_zero_dim(E->g, p, w, ways[k]) >= 0) {
            if (grp) *grp = gs[k];
            return ways[k];
        }
    if (grp) *grp = E->zg;
    return 1;
}

// Bytes on one device of parameter p (owner op i), and whether the step synchronizes its
// gradient over dp in phase 3's buckets (an all-reduce, or ZeRO's reduce-scatter, unless ZeRO-2
// with micro-batches or ZeRO-3 reduce-scatters each micro-batch's by itself; --sync background:
// tables only).
static double est_param_bytes(const est *E, int p, int i, bool *bucketed) {
    const pcc_tensor *t = &E->g->tensors[p];
    const int *w = est_ways_of(E, i, p);
    double bytes = tensor_bytes(E->g, t);
    for (int r = 0; r < t->rank; r++) bytes /= w[r];
    if (est_il(E, i) && E->s->letter[PCC_AX_PP][i] >= 0) bytes /= E->pp; // interlaced: a slice on every stage (an upper bound where its letter is not the parameter's)
    bool sharded = E->zw > 1 && est_zero_ways(E, p, i, NULL) > 1;
    *bucketed = (E->dp > 1 || est_cp_partial(E, i)) &&
                (sharded ? !layout_zero_per_micro_batch(E->s) : graph_step_synced(E->g, p, E->s->bg_dense));
    return bytes;
}

// The bucket pool of a parameter of op i, its copy on device d: what its segment's gradients on
// d add up to (a block's: one copy's, the same for every copy; a top-level stretch's: per device).
static double *est_pool(const est *E, int i, int d) {
    int seg = graph_bucket_segment(E->g, i);
    return &E->pool[(E->g->ops[i].block >= 0 ? 0 : d) * (2 * E->g->n_blocks + 2) + seg];
}

// Whether the gradient the optimizer op opt reads is made after the last block's backward (the
// embedding's, at the end of the backward pass), not before the blocks (the head's).
static bool est_grad_after_blocks(const est *E, const pcc_op *opt) {
    if (!opt) return false;
    int prod = E->g->tensors[opt->in[1]].producer;
    for (int o = prod + 1; o < E->g->n_ops; o++)
        if (E->g->ops[o].block >= 0 && E->g->ops[o].phase == PCC_PHASE_BWD) return false;
    return true;
}

// ZeRO-3: a top-level parameter p (owner op i) is gathered just before each operator that reads
// it, in the layout that operator reads (a tied embedding: the lookup's and the LM head's), once
// per micro-batch and pass on the reader's device; a pass gathers one layout once (phase 3's
// cache). A reader that splits it otherwise than the owner gets the owner's piece over dp and
// then its own by an all-to-all over tp (reshard_steps).
static void est_top_gathers(est *E, int p, int i, pcc_group_shape zg) {
    const pcc_graph *g = E->g;
    const pcc_tensor *t = &g->tensors[p];
    const int *seen[2][8], *own = est_ways_of(E, i, p);
    int n_seen[2] = {0, 0};
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        int j = o < E->nf ? o : op->fwd, pass = o >= E->nf;
        bool reads = false;
        for (int k = 0; k < op->nin; k++) reads |= op->in[k] == p;
        if (!reads || j < 0 || op->block >= 0 || op->phase == PCC_PHASE_OPT) continue;
        const int *w = est_ways_of(E, j, p);
        bool again = false;
        for (int q = 0; q < n_seen[pass]; q++) again |= memcmp(seen[pass][q], w, sizeof(int) * (size_t)t->rank) == 0;
        if (again) continue;
        if (n_seen[pass] < 8) seen[pass][n_seen[pass]++] = w;
        double bytes = tensor_bytes(g, t), mine = bytes;
        bool same = true;
        for (int r = 0; r < t->rank; r++) bytes /= own[r], mine /= w[r], same &= w[r] == own[r];
        int d = est_device(E, j, 0);
        pcc_group_shape tpg = {E->tp, 1};
        double launch = cost_launch_s(E->view[d]), ag = cost_collective_s(E->view[d], PCC_COLL_ALL_GATHER, bytes, zg) + launch;
        if (!same && E->tp > 1) ag += cost_collective_s(E->view[d], PCC_COLL_ALL_TO_ALL, mine, tpg) + launch;
        *(pass ? &E->Bm[d] : &E->Fm[d]) += ag;
    }
}

// The replicas over the tp group whose gradients op i's input k (a parameter) sums in the step
// (the ILP's choice splits the op along a letter it does not carry: ilp.c's cand_sync_s), 1: none.
static int est_tp_replicas(const est *E, int i, int k) {
    const pcc_cand *cd = &E->sc->t->ops[i].c[E->sc->choice[i]];
    int p = E->g->ops[i].in[k];
    if (cd->dim < 0 || !graph_step_synced(E->g, p, E->s->bg_dense)) return 1;
    return cd->in[k].r;
}

// The replicas over the tp group that hold partial sums of op i's input k's gradient (a
// parameter), 1: none. The ILP's cand_sync_s charges every replica; phase 3 sums them only where
// the op's split cuts an output, so that each replica's gradient sees a piece of the output's
// gradient (an output of partial sums gets its gradient whole on every rank).
static int est_tp_partial(const est *E, int i, int k) {
    const pcc_cand *cd = &E->sc->t->ops[i].c[E->sc->choice[i]];
    int r = est_tp_replicas(E, i, k);
    for (int o = 0; r > 1 && o < E->g->ops[i].nout; o++)
        for (int a = 0; a < E->g->tensors[E->g->ops[i].out[o]].rank; a++)
            if (cd->out[o].d[a] > 1) return r;
    return 1;
}

// Whether op i's input k, a parameter, is trained per replica with --sync background (layout.c's
// background_params): a dense parameter (not an embedding table) whose gradient holds sums over
// dp or over tp replicas, synchronized by itself (preserve.c's sync_grad_local), in no bucket.
static bool est_bg_local(const est *E, int i, int k) {
    int p = E->g->ops[i].in[k];
    return E->s->bg_dense && !graph_is_table(E->g, p) && (E->dp > 1 || est_tp_partial(E, i, k) > 1);
}

// The collective that synchronizes parameter p's gradient (owner op i) in the buckets: ZeRO's
// reduce-scatter over its shards' group (dp x cp: its sums over cp included); else an all-reduce
// over dp x cp of sums over both, over the one axis of a sum over one (layout_sync_steps). False
// where it needs none.
static bool est_bucket_coll(const est *E, int p, int i, pcc_coll *kind, pcc_group_shape *grp) {
    pcc_group_shape zg;
    bool cps = est_cp_partial(E, i);
    if (est_zero_ways(E, p, i, &zg) > 1) {
        *kind = PCC_COLL_REDUCE_SCATTER, *grp = zg;
        return true;
    }
    *kind = PCC_COLL_ALL_REDUCE;
    *grp = cps && E->dp > 1 ? E->zg : cps ? (pcc_group_shape){E->cp, E->tp} : (pcc_group_shape){E->dp, E->cp * E->tp};
    return cps || E->dp > 1;
}

// Gradient synchronization and the optimizer of parameter p's instance on device d (owner op i).
static void est_param(est *E, int p, int i, int d, const pcc_op *opt) {
    const pcc_graph *g = E->g;
    bool bucketed;
    double bytes = est_param_bytes(E, p, i, &bucketed), pool = *est_pool(E, i, d), cap = E->s->bucket_bytes;
    const pcc_cluster *c = E->view[d];
    double launch = cost_launch_s(c);
    pcc_group_shape zg;
    int zw = est_zero_ways(E, p, i, &zg), zero = zw > 1 ? E->s->zero : 0;
    pcc_coll kind;
    pcc_group_shape grp;
    if (bucketed && est_bucket_coll(E, p, i, &kind, &grp)) E->sync[d] += cost_bucketed_s(c, kind, bytes, pool, cap, grp);
    int k = 0;
    while (g->ops[i].in[k] != p) k++;
    int rt = est_tp_partial(E, i, k); // the tp replicas whose partial sums an all-reduce adds first (layout_sync_steps)
    if (zw > 1) {
        // Reduce-scattered per micro-batch (preserve.c's zero2_grad), and summed into the shard. A
        // block copy's together on stream 1, behind the compute (est_step); the others (and a
        // copy's with --prefetch none, each by itself, waited for at the copy's end): ZeRO-2's on
        // the compute stream, ZeRO-3's on stream 1, waited for at the next loop, the blocks' (or
        // after the last: est_top_rs_exposed).
        bool behind = !bucketed && g->ops[i].block >= 0 && !(zero == 3 && E->s->zero3_late);
        if (behind) {
            E->rsb[d] += bytes;
            if (rt > 1) E->rsbt[d] += bytes, E->rsr[d] = fmax(E->rsr[d], rt);
            if (E->m > 1) E->rs[d] += cost_memory_s(c, 3 * bytes / zw);
        } else if (!bucketed) {
            double *to = zero < 3 ? &E->Bm[d] : g->ops[i].block >= 0 ? &E->rs[d] : est_grad_after_blocks(E, opt) ? &E->rs_top[i] : &E->Bm[d];
            if (zero == 3 && g->ops[i].block >= 0) E->rsn[d] += 1;
            // ... and each added into the shard's sum over the micro-batches, on the same stream
            // (with one, the reduce-scatter writes the shard itself).
            *to += cost_collective_s(c, PCC_COLL_REDUCE_SCATTER, bytes, zg) + launch + (E->m > 1 ? cost_memory_s(c, 3 * bytes / zw) : 0);
            if (rt > 1) *to += cost_collective_s(c, PCC_COLL_ALL_REDUCE, bytes, (pcc_group_shape){rt, 1}) + launch;
        }
        // With micro-batches the shard sums them, from zero (preserve.c's zero2_accumulators).
        if (!bucketed && E->m > 1) E->opt[d] += cost_memory_s(c, bytes / zw);
        // The updated shard all-gathered (ZeRO-3's parameter stays sharded): one collective per
        // block copy and one for the top-level parameters (preserve.c's post_flush; est_step).
        if (zero < 3) *(g->ops[i].block >= 0 ? &E->postb[d] : &E->postt[d]) += bytes;
        // ZeRO-1/2: the optimizer updates the shard, copied out of the whole parameter first.
        if (zero < 3) E->opt[d] += cost_memory_s(c, 2 * bytes / zw);
        // Gathered again for each micro-batch's use: a block copy's parameters on stream 1 in one
        // collective while the copy before computes (preserve.c's prefetch; est_step), the
        // others just before their reader.
        if (zero == 3 && g->ops[i].block >= 0) E->agb[d] += bytes;
        else if (zero == 3) est_top_gathers(E, p, i, zg);
    }
    // --sync background: a gradient trained per replica is scaled to the replica's mean once a
    // step (preserve.c's local_grad); on CPU ranks on the compute stream.
    if (c->cpu && est_bg_local(E, i, k)) E->opt[d] += cost_memory_s(c, 2 * bytes);
    if (!opt) return;
    double t = cost_op_s(c, g, opt, est_ways(E, opt, i));
    E->opt[d] += zw > 1 ? (t - launch) / zw + launch : t; // a shard's work, a whole launch
}

// The contribution to parameter p's gradient that forward op j's backward makes (-1: none).
static int est_contribution(const est *E, int p, int j) {
    for (int t = 0; t < E->g->n_tensors; t++) {
        int prod = E->g->tensors[t].producer;
        if (E->g->tensors[t].of == p && graph_is_param_grad(E->g, t) && prod >= 0 && E->g->ops[prod].fwd == j) return t;
    }
    return -1;
}

// Every parameter: sync and optimizer on its owner's device(s); tied parameters' gradients sent
// to the owner from each other stage that uses them: once per step where phase 3 defers the
// contribution (layout.c), else with every micro-batch's backward pass. First the bytes that
// share buckets, per device and segment.
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
        for (int d = 0; bucketed && d < E->pp; d++)
            if (d == est_device(E, i, 0) || est_il(E, i)) *est_pool(E, i, d) += bytes;
    }
    for (int p = 0; p < g->n_tensors; p++) {
        const pcc_tensor *t = &g->tensors[p];
        int i = E->owner[p];
        if (t->kind != PCC_T_PARAM || i < 0) continue;
        int64_t n = g->ops[i].block >= 0 ? g->blocks[g->ops[i].block].repeat : 1;
        for (int64_t k = 0; k < n; k++) est_param(E, p, i, est_device(E, i, (int)k), opt[p]);
        for (int d = 0; est_il(E, i) && d < E->pp; d++) // interlaced: every stage holds a slice
            if (d != est_device(E, i, 0)) est_param(E, p, i, d, opt[p]);
        if (g->ops[i].block >= 0 || est_il(E, i)) continue;
        int home = est_device(E, i, 0);
        for (int j = i + 1; j < E->nf; j++) {
            bool reads = false;
            for (int k = 0; k < g->ops[j].nin; k++) reads |= g->ops[j].in[k] == p;
            if (!reads || g->ops[j].block >= 0 || est_device(E, j, 0) == home) continue;
            const int *w = est_ways_of(E, j, p);
            double bytes = tensor_bytes(g, t);
            for (int r = 0; r < t->rank; r++) bytes /= w[r];
            int part = est_contribution(E, p, j);
            if (part >= 0 && !graph_grad_deferrable(g, part)) // summed with another part first: sent every micro-batch
                est_grad_back(E, bytes, E->s->op_stage[j], E->s->op_stage[i]);
            else
                E->tied[home] += est_send_s(E, bytes, est_device(E, j, 0), home);
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

// One bucket of gradients as the walk fills it (est_bucket_walk).
// Its gradients are synchronized alike (preserve.c closes a bucket at a gradient synchronized
// otherwise): over dp (and cp) by one collective where coll (est_bucket_coll), over r > 1
// replicas in the tp group where the ILP's split leaves partial sums (est_tp_partial).
struct est_bucket {
    double bytes;
    bool coll;
    pcc_coll kind;
    pcc_group_shape grp;
    int r;
};

// The seconds of bucket b's collectives on device d's view, and b emptied.
static double est_bucket_s(const est *E, int d, struct est_bucket *b) {
    const pcc_cluster *c = E->view[d];
    double x = 0;
    if (b->bytes > 0 && b->coll) x += cost_collective_s(c, b->kind, b->bytes, b->grp) + cost_launch_s(c);
    if (b->bytes > 0 && b->r > 1) x += cost_collective_s(c, PCC_COLL_ALL_REDUCE, b->bytes, (pcc_group_shape){b->r, 1}) + cost_launch_s(c);
    *b = (struct est_bucket){.r = 1};
    return x;
}

// Issues bucket b, its last gradient made at `at`, behind the queue that ends at *q; *all adds
// its seconds.
static void est_issue(const est *E, int d, struct est_bucket *b, double at, double *q, double *all) {
    double x = est_bucket_s(E, d, b);
    if (x > 0) *q = fmax(*q, at) + x, *all += x;
}

// What each device's step waits for of its gradient buckets after its backward pass (E->wait).
// As preserve.c fills them: in the order the backward pass makes the gradients final, a bucket
// issued on stream 1 once it holds --bucket-mb's bytes or its segment ends (a block copy, a
// stretch of top-level operators between blocks), and run once the bucket before is done. The
// walk times the last micro-batch's backward pass of the device's last chunk (chunk d: its other
// chunks finish theirs earlier), operator by operator; each bucket's collectives are over its own
// bytes, over dp (and cp) as est_bucket_coll says and over tp where the ILP's split leaves partial
// sums of a gradient on its replicas (est_tp_partial). What the device synchronizes of its other
// chunks and its interlaced operators (E->sync[d] beyond the walk's share) waits ahead of the first
// bucket.
static void est_bucket_walk(est *E, const pcc_layer *L, int nl, const int *chunk) {
    const pcc_graph *g = E->g;
    int most = 1;
    for (int i = 0; i < E->nf; i++) most = g->ops[i].nin > most ? g->ops[i].nin : most;
    int *order = arena_alloc(g->arena, sizeof(int) * (size_t)most);
    E->wait = zeros(g, E->pp);
    for (int d = 0; d < E->pp; d++) {
        if (E->sync[d] <= 0) continue;
        est_on(E, d);
        const pcc_cluster *c = E->view[d];
        struct est_bucket b = {.r = 1};
        // t: the backward pass so far; q: the queue's end with nothing ahead of it; all: its
        // buckets' seconds; share: their share of E->sync[d] (cost_bucketed_s's pro rata).
        double t = 0, q = 0, all = 0, share = 0;
        int seg = -1;
        for (int l = nl - 1; l >= 0; l--) {
            if (chunk[l] != d || (L[l].op >= 0 && est_il(E, L[l].op))) continue;
            const pcc_block *bl = L[l].op >= 0 ? NULL : &g->blocks[L[l].block];
            int first = bl ? bl->first_op : L[l].op, last = bl ? bl->first_op + bl->n_ops - 1 : L[l].op;
            if (bl || graph_bucket_segment(g, first) != seg) est_issue(E, d, &b, t, &q, &all); // a loop's boundary closes the bucket
            seg = graph_bucket_segment(g, first);
            if (bl) { // the copy's carries' gradients copied in, its summed values, its orphans
                for (int k = 0; k < bl->n_carry; k++) t += 2 * est_carry_copy_s(E, bl, k, d);
                t += est_summed(E, L[l].block, -1, d) + E->orphan[L[l].block];
            }
            for (int i = last; i >= first; i--) {
                const pcc_op *op = &g->ops[i];
                double bc, bm;
                est_bwd(E, i, &bc, &bm);
                t += bc + bm;
                share += E->sy[i];
                // Its inputs in the order their gradients are made (E->after: the backward
                // operators left after each).
                int n = 0;
                for (int k = 0; k < op->nin; k++) {
                    int j = n++;
                    for (; j > 0 && E->after[op->in[order[j - 1]]] < E->after[op->in[k]]; j--) order[j] = order[j - 1];
                    order[j] = k;
                }
                for (int j = 0; j < n; j++) {
                    bool bucketed;
                    int k = order[j];
                    if (!est_owns(E, i, k)) continue;
                    int p = op->in[k], rk = est_tp_partial(E, i, k);
                    double bytes = est_param_bytes(E, p, i, &bucketed);
                    pcc_coll kind = PCC_COLL_ALL_REDUCE;
                    pcc_group_shape grp = {1, 1};
                    bool coll = bucketed && est_bucket_coll(E, p, i, &kind, &grp);
                    if (est_bg_local(E, i, k)) { // synchronized by itself: the open bucket goes first
                        est_issue(E, d, &b, t - E->after[p], &q, &all);
                        continue;
                    }
                    if (!coll && (rk <= 1 || est_zero_ways(E, p, i, NULL) > 1)) continue; // ZeRO's: with its reduce-scatters
                    if (coll) share += cost_bucketed_s(c, kind, bytes, *est_pool(E, i, d), E->s->bucket_bytes, grp);
                    // A gradient synchronized otherwise closes the open bucket first.
                    if (b.bytes > 0 && (coll != b.coll || rk != b.r ||
                                        (coll && (kind != b.kind || grp.size != b.grp.size || grp.stride != b.grp.stride))))
                        est_issue(E, d, &b, t - E->after[p], &q, &all);
                    b.coll = coll, b.kind = kind, b.grp = grp, b.r = rk;
                    b.bytes += bytes;
                    if (b.bytes >= E->s->bucket_bytes) est_issue(E, d, &b, t - E->after[p], &q, &all);
                }
            }
        }
        est_issue(E, d, &b, t, &q, &all);
        // With s seconds queued ahead the queue ends at max(s + all, q).
        E->wait[d] = fmax(0, fmax(fmax(0, E->sync[d] - share) + all, q) - t);
    }
}

// The step: the pipeline, then per device what the last backward pass does not hide of its sync,
// its optimizer and ZeRO's all-gather; a device that drains early has that much more slack.
// What stream 0 waits for of stream 1's ZeRO-3 work in a pass over k block copies of compute c
// (in all): their gathers ag and reduce-scatters rs (in all; 0 forward). As preserve.c's prefetch
// and zero2_flush: the first copy's gathers are exposed; while copy v computes (C = c / k), stream
// 1 reduce-scatters the copy before's gradients (R = rs / k) and gathers the next copy's (G =
// ag / k); stream 0 waits for the one at the copy's end and the other at the next copy's start.
// The first copy has no reduce-scatter beside it, the last no gather; the last copy's
// reduce-scatter is exposed after the loop.
static double est_gathers_exposed_s(double ag, double rs, double c, double k) {
    if (k < 1) k = 1;
    double C = c / k, G = ag / k, R = rs / k;
    if (k < 2) return G + R;
    return G + fmax(0, G - C) + (k - 2) * fmax(0, G + R - C) + fmax(0, R - C) + R;
}

// ZeRO-3: what device d's step waits for of the reduce-scatters of gradients made after the last
// block's backward (every gradient of a model without blocks): stream 1 runs each as the backward
// of its op makes it, behind the backward of the ops before that op, and the micro-batch's loop
// waits for them at its end (preserve.c's loop_close; with one micro-batch, the step's end).
static double est_top_rs_exposed(est *E, int d) {
    const pcc_graph *g = E->g;
    int first = E->nf; // the first forward op of a block
    for (int i = 0; i < E->nf && first == E->nf; i++)
        if (g->ops[i].block >= 0) first = i;
    double t = 0, s1 = 0, bc, bm;
    est_on(E, d);
    for (int i = first - 1; i >= 0; i--) {
        if (est_device(E, i, 0) != d) continue;
        est_bwd(E, i, &bc, &bm);
        t += bc + bm;
        if (E->rs_top[i] > 0) s1 = fmax(s1, t) + E->rs_top[i];
    }
    return fmax(0, s1 - t);
}

// Interlaced operators (layout.c's interlace): on every stage, outside the pipeline, in phases
// that all stages run together (schedule.c), per micro-batch: each operator's forward and
// backward at its shape split over pp as well (compute), its tp resharding, and for each value
// that crosses between them and a stage, the collective over pp that makes what they make in a
// stage's layout (an all-reduce: the embedding's partial sums; the gradient of the hidden
// states), or the holder stage's sends to every other (the hidden states; the gradient of the
// embedding's output), one after another. The step adds the phases to the pipeline (est_step).
static void est_interlaced(est *E) {
    const pcc_graph *g = E->g;
    if (!E->s->interlaced) return;
    int pp = E->pp;
    pcc_group_shape ppg = {pp, E->dp * E->cp * E->tp};
    est_on(E, 0);
    const pcc_cluster *c = E->view[0];
    double launch = cost_launch_s(c);
    bool *done = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_tensors + 1)), *pre = arena_alloc(g->arena, (size_t)(E->nf + 1));
    for (int i = 0; i < E->nf; i++) {
        const pcc_op *op = &g->ops[i];
        if (!est_il(E, i)) continue;
        pre[i] = true; // before the forward passes: it reads no stage's value (layout.c's interlace)
        for (int k = 0; k < op->nin; k++) {
            int t = op->in[k], pr = g->tensors[t].producer;
            pre[i] &= g->tensors[t].kind != PCC_T_ACT || (pr >= 0 && est_il(E, pr) && pre[pr]);
        }
        double c0 = E->ilc, m0 = E->ilm, p0 = E->ilp, rest = 0; // rest: what goes before or after the passes
        E->ilc += (E->f[i] + E->b[i]) / (E->s->letter[PCC_AX_PP][i] >= 0 ? pp : 1);
        E->ilm += E->fc[i] + E->bc[i] + 2 * E->xc[i] + E->xin[i];
        for (int k = 0; k < op->nin + op->nout; k++) {
            int t = tensor_of_op(op, k), pr = g->tensors[t].producer;
            if (g->tensors[t].kind != PCC_T_ACT) continue;
            if (k < op->nin && pr >= 0 && est_il(E, pr)) { // between two interlaced operators: over pp, forward and back
                int po = 0;
                while (g->ops[pr].out[po] != t) po++;
                int a = est_pp_axis(E, pr, g->ops[pr].nin + po), b = est_pp_axis(E, i, k);
                double bytes = est_held_bytes(E, t);
                pcc_coll kind = a == b ? PCC_COLL_SEND_RECV : a == -2 ? PCC_COLL_ALL_REDUCE : a < 0 ? PCC_COLL_SEND_RECV
                              : b < 0 ? PCC_COLL_ALL_GATHER : PCC_COLL_ALL_TO_ALL;
                if (kind != PCC_COLL_SEND_RECV) // backward: the gradient of a whole value sliced locally; an all-to-all back
                    E->ilm += (kind == PCC_COLL_ALL_TO_ALL ? 2 : 1) *
                              (cost_collective_s(c, kind, kind == PCC_COLL_ALL_TO_ALL ? bytes / pp : bytes, ppg) + launch);
                continue;
            }
            if (done[t]) continue;
            bool made_here = k >= op->nin, crosses = false;
            if (made_here) { // read by an operator of a stage?
                for (int j = 0; j < E->nf && !crosses; j++)
                    for (int r = 0; r < g->ops[j].nin; r++) crosses |= g->ops[j].in[r] == t && !est_il(E, j);
                for (int b = 0; b < g->n_blocks && !crosses; b++)
                    for (int r = 0; r < g->blocks[b].n_in; r++) crosses |= g->blocks[b].in[r].outer == t;
            } else {
                crosses = !(pr >= 0 && est_il(E, pr));
            }
            if (!crosses) continue;
            done[t] = true;
            double bytes = est_held_bytes(E, t), sends = 0, reduce = cost_collective_s(c, PCC_COLL_ALL_REDUCE, bytes, ppg) + launch;
            int holder = pr >= 0 && g->ops[pr].block < 0 && !est_il(E, pr) ? est_device(E, pr, 0) : pp - 1;
            for (int d = 0; d < pp; d++)
                if (d != holder) sends += est_send_s(E, bytes, holder, d);
            // made here: reduced over pp forward (not where the operator runs whole on every stage),
            // its gradient sent back (both outside the passes); read here: sent forward, its
            // gradient reduced over pp
            bool whole = made_here && E->s->letter[PCC_AX_PP][i] < 0;
            double x = reduce * (!whole && (made_here || g->tensors[t].grad >= 0) ? 1 : 0);
            double y = sends * (!made_here || g->tensors[t].grad >= 0 ? 1 : 0);
            E->ilm += x, E->ilp += y;
            if (made_here) rest += x + y;
        }
        if (!pre[i]) E->il_mid += (E->ilc - c0) + (E->ilm - m0) + (E->ilp - p0) - rest;
    }
}

// k collectives of `kind`, one per block copy, over `bytes` in all (preserve.c's buckets).
static double est_per_copy_s(const est *E, int d, pcc_coll kind, double bytes, double k, pcc_group_shape grp) {
    return bytes > 0 && k > 0 ? k * (cost_collective_s(E->view[d], kind, bytes / k, grp) + cost_launch_s(E->view[d])) : 0;
}

static void est_step(est *E) {
    int pp = E->pp;
    const pcc_graph *g = E->g;
    double *F = zeros(g, pp), *B = zeros(g, pp);
    int busy = 0;
    for (int d = 0; d < pp; d++) {
        // ZeRO-2/3's reduce-scatters of a block copy's gradients run on stream 1 while the next
        // copy computes, ZeRO-3's gathers of the next copy's parameters while this one does
        // (est_gathers_exposed_s); stream 0 waits for what is left.
        double k = E->copies[d], top = est_top_rs_exposed(E, d);
        *(E->m > 1 ? &E->Bm[d] : &E->rs_last[d]) += top;
        double ag = est_per_copy_s(E, d, PCC_COLL_ALL_GATHER, E->agb[d], k, E->zg); // per micro-batch, each pass
        // A copy's gradients: one collective per step (preserve.c's zero2_flush).
        E->rs[d] += est_per_copy_s(E, d, PCC_COLL_REDUCE_SCATTER, E->rsb[d], k, E->zg);
        E->rs[d] += est_per_copy_s(E, d, PCC_COLL_ALL_REDUCE, E->rsbt[d], k, (pcc_group_shape){(int)E->rsr[d], 1});
        E->post[d] += est_per_copy_s(E, d, PCC_COLL_ALL_GATHER, E->postb[d], k, E->zg);
        if (E->postt[d] > 0) E->post[d] += cost_collective_s(E->view[d], PCC_COLL_ALL_GATHER, E->postt[d], E->zg) + cost_launch_s(E->view[d]);
        if (k < 1) {
            E->Bm[d] += cost_exposed_s(E->rs[d], E->Bc[d]);
        } else if (E->s->zero3_late) { // --prefetch none: every copy's gathers exposed; its last reduce-scatter
            double R = E->rs[d] / k, n = E->rsn[d] > k ? E->rsn[d] / k : 1;
            E->Fm[d] += ag;
            E->Bm[d] += ag + k * fmax(R / n, R - E->cb[d] / k);
        } else {
            E->Fm[d] += est_gathers_exposed_s(ag, 0, E->cf[d], k);
            E->Bm[d] += est_gathers_exposed_s(ag, E->rs[d], E->cb[d], k);
        }
        F[d] = E->Fc[d] + E->Fm[d] + E->Fp[d], B[d] = E->Bc[d] + E->Bm[d] + E->Bp[d];
        if (F[d] + B[d] > F[busy] + B[busy]) busy = d;
    }
    pcc_estimate *x = &E->s->est;
    int ns = pp * E->v;
    pcc_chunk_times *ct = arena_alloc(g->arena, sizeof *ct * (size_t)ns);
    double *done = zeros(g, pp);
    // Each chunk its own layers' seconds, and an equal share of what its device adds to them (ZeRO-3's
    // exposed gathers).
    double *restf = zeros(g, pp), *restb = zeros(g, pp);
    for (int d = 0; d < pp; d++) restf[d] = F[d] - E->Fp[d], restb[d] = B[d] - E->Bp[d];
    for (int c = 0; c < ns; c++) restf[c % pp] -= E->chf[c], restb[c % pp] -= E->chb[c];
    for (int c = 0; c < ns; c++) {
        int d = c % pp;
        ct[c] = (pcc_chunk_times){E->chf[c] + restf[d] / E->v, E->chb[c] + restb[d] / E->v};
    }
    // Interlaced phases: every stage at once, before, between and after the passes; with 1F1B the
    // one between them per micro-batch inside the schedule (pipeline.c's mid), which its walk times.
    bool per_mb = E->il_mid > 0 && E->s->schedule != PCC_PIPE_GPIPE && E->v == 1;
    x->pipeline_s = pipeline_makespan(&(pcc_pipeline){.pp = pp, .V = E->v, .M = E->m, .schedule = E->s->schedule, .mid = per_mb,
                                                      .mid_s = E->il_mid}, ct, E->links, E->n_links, done);
    double il = E->m * (E->ilc + E->ilm + E->ilp - (per_mb ? E->il_mid : 0));
    x->pipeline_s += il;
    for (int d = 0; d < pp; d++) done[d] += il;
    x->bubble_s = fmax(0, x->pipeline_s - il - E->m * (F[busy] + B[busy])); // (the walk overlaps messages the sum does not)
    x->compute_s = E->m * (E->Fc[busy] + E->Bc[busy] + E->ilc);
    x->tp_comm_s = E->m * (E->Fm[busy] + E->Bm[busy] + E->ilm);
    x->p2p_s = E->m * (E->Fp[busy] + E->Bp[busy] + E->ilp);
    x->step_s = 0;
    for (int d = 0; d < pp; d++) {
        double exposed = E->wait[d];
        double end = done[d] + E->tied[d] + exposed + E->rs_last[d] + E->opt[d] + E->post[d];
        if (end > x->step_s || d == 0)
            x->step_s = end, x->sync_s = E->sync[d], x->sync_exposed_s = exposed, x->optimizer_s = E->opt[d] + E->post[d];
    }
}

void estimate_step(const pcc_graph *g, const pcc_cluster *c, const pcc_intra *sc, pcc_strategy *s) {
    est E = {.g = g, .c = c, .sc = sc, .s = s, .dp = s->mesh[PCC_AX_DP], .tp = strategy_tp(s),
             .cp = s->mesh[PCC_AX_CP] > 1 ? s->mesh[PCC_AX_CP] : 1,
             .pp = s->mesh[PCC_AX_PP], .v = s->virtual_stages, .m = s->micro_batches, .nf = g->n_fwd_ops};
    int pp = E.pp, nl;
    E.Fc = zeros(g, pp), E.Fm = zeros(g, pp), E.Fp = zeros(g, pp), E.Bc = zeros(g, pp), E.Bm = zeros(g, pp);
    E.Bp = zeros(g, pp), E.sync = zeros(g, pp), E.opt = zeros(g, pp), E.post = zeros(g, pp), E.tied = zeros(g, pp);
    E.rs = zeros(g, pp), E.rs_last = zeros(g, pp), E.rs_top = zeros(g, g->n_fwd_ops), E.copies = zeros(g, pp);
    E.rsb = zeros(g, pp), E.rsn = zeros(g, pp), E.rsbt = zeros(g, pp), E.rsr = zeros(g, pp);
    E.zw = s->zero > 0 ? E.dp * E.cp : 1, E.zg = (pcc_group_shape){E.dp * E.cp, E.tp};
    E.cf = zeros(g, pp), E.cb = zeros(g, pp), E.agb = zeros(g, pp), E.postb = zeros(g, pp), E.postt = zeros(g, pp);
    const pcc_layer *L = graph_layers(g, &nl);
    int *chunk = arena_alloc(g->arena, sizeof(int) * (size_t)(nl + 1));
    for (int l = 0; l < nl; l++) chunk[l] = L[l].op >= 0 ? s->op_stage[L[l].op] : s->copy_stage[L[l].block][L[l].copy];
    est_layout(&E);
    est_groups(&E);
    est_cp_comm(&E);
    est_layers(&E, L, nl, chunk);
    est_interlaced(&E);
    est_params(&E);
    est_link_passes(&E);
    est_bucket_walk(&E, L, nl, chunk);
    est_step(&E);
}

void estimate_runs(const pcc_graph *g, const pcc_cluster *c, pcc_strategy *s, pcc_programs *pr) {
    bool any = false;
    for (int k = 0; k < 2; k++)
        for (int i = 0; pr->run_credit[k] && i < g->n_fwd_ops; i++) any |= pr->run_credit[k][i] > 0;
    if (!any) return;
    s->run_credit[0] = pr->run_credit[0], s->run_credit[1] = pr->run_credit[1];
    estimate_step(g, c, s->intra, s);
    s->est_step_s = s->est.step_s;
    pr->meta.est_step_s = s->est_step_s;
}

double *estimate_layer_seconds(const pcc_graph *g, const pcc_cluster *c, const pcc_intra *sc, pcc_strategy *s,
                               const pcc_layer *L, int nl) {
    est E = {.g = g, .c = c, .sc = sc, .s = s, .dp = s->mesh[PCC_AX_DP], .tp = strategy_tp(s),
             .cp = s->mesh[PCC_AX_CP] > 1 ? s->mesh[PCC_AX_CP] : 1, .pp = 1, .v = 1, .m = s->micro_batches, .nf = g->n_fwd_ops};
    E.Fc = zeros(g, 1), E.Fm = zeros(g, 1), E.Bc = zeros(g, 1), E.Bm = zeros(g, 1), E.sync = zeros(g, 1);
    E.zw = s->zero > 0 ? E.dp * E.cp : 1, E.zg = (pcc_group_shape){E.dp * E.cp, E.tp};
    est_layout(&E);
    est_groups(&E);
    est_cp_comm(&E);
    double *sec = zeros(g, nl);
    for (int l = 0; l < nl; l++) {
        if (l > 0 && L[l].op < 0 && L[l - 1].block == L[l].block) {
            sec[l] = sec[l - 1]; // every copy of a block alike
            continue;
        }
        double t0 = E.Fc[0] + E.Fm[0] + E.Bc[0] + E.Bm[0];
        if (L[l].op >= 0 && est_il(&E, L[l].op)) continue; // interlaced: on no stage (0 s to the cut)
        if (L[l].op >= 0) {
            est_add_op(&E, L[l].op, 0);
        } else {
            const pcc_block *bl = &g->blocks[L[l].block];
            for (int i = bl->first_op; i < bl->first_op + bl->n_ops; i++) est_add_op(&E, i, 0);
            E.Bc[0] += E.orphan[L[l].block] + est_summed(&E, L[l].block, -1, 0);
        }
        sec[l] = E.Fc[0] + E.Fm[0] + E.Bc[0] + E.Bm[0] - t0;
    }
    return sec;
}

void estimate_floor(const pcc_graph *g, const pcc_cluster *c, const pcc_transform *t, const int *dp_letter, int dp,
                    int batch_dim, double *fb, double *ffb) {
    int nf = g->n_fwd_ops;
    pcc_strategy s = {.batch_dim = batch_dim};
    s.letter[PCC_AX_DP] = (int *)dp_letter;
    pcc_intra sc = {.t = t, .choice = arena_alloc(g->arena, sizeof(int) * (size_t)(nf + 1))};
    est E = {.g = g, .c = c, .sc = &sc, .s = &s, .dp = dp, .cp = 1, .tp = t->devices, .nf = nf};
    E.ways = arena_alloc(g->arena, sizeof(int **) * (size_t)(nf + 1));
    est_dp_dims(&E);
    // Each forward op's backward ops, in one list per op.
    int *next = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_ops + 1)), *first = arena_alloc(g->arena, sizeof(int) * (size_t)(nf + 1));
    for (int i = 0; i < nf; i++) first[i] = -1;
    for (int o = g->n_ops - 1; o >= nf; o--)
        if (g->ops[o].phase == PCC_PHASE_BWD && g->ops[o].fwd >= 0) next[o] = first[g->ops[o].fwd], first[g->ops[o].fwd] = o;
    for (int i = 0; i < nf; i++) {
        fb[i] = ffb[i] = INFINITY;
        for (int k = 0; k < t->ops[i].n; k++) {
            sc.choice[i] = k;
            est_op_ways(&E, i);
            double f = cost_op_s(c, g, &g->ops[i], (const int *const *)E.ways[i]), b = 0;
            for (int o = first[i]; o >= 0; o = next[o]) b += cost_op_s(c, g, &g->ops[o], est_ways(&E, &g->ops[o], i));
            if (f + b < fb[i]) fb[i] = f + b;
            if (2 * f + b < ffb[i]) ffb[i] = 2 * f + b;
        }
    }
}
