/*
 * p3base.c: phase 3's builder primitives, beneath preserve.c and its neighbours (schedule.c,
 * vocab.c, runs.c, handoff.c): a program's buffers (a tensor's piece in a layout, or scratch),
 * its instructions (an operator, a collective over mesh axes, a copy, an event), the attrs an
 * operator carries, and each instruction's time by the cost model (plan_insn.t_s; preserve.c's
 * essay says how each is timed). Nothing here decides what a program does; preserve.c does.
 */
#include "preserve.h"

#include <string.h>

/* ---- layouts and buffers ---- */

// Layouts: equal; all R; the bytes of tensor t's piece.
bool p3_shard_eq(plan_shard a, plan_shard b) { return memcmp(a.map, b.map, sizeof a.map) == 0; }

plan_shard p3_shard_r(void) {
    plan_shard s;
    memset(&s, 0, sizeof s);
    return s;
}

uint64_t p3_shard_bytes(const builder *E, int t, plan_shard s) {
    const pcc_tensor *T = &E->g->tensors[t];
    int ways[PCC_MAX_RANK] = {0};
    for (int i = 0; i < T->rank; i++) ways[i] = 1;
    for (int a = 0; a < PCC_AXES; a++)
        if (s.map[a] >= 2) ways[s.map[a] - 2] *= E->s->mesh[a];
    uint64_t n = (uint64_t)pcc_dtype_bytes(T->dtype);
    for (int i = 0; i < T->rank; i++) {
        int64_t d = E->g->dims[T->dims[i]].size;
        PCC_ASSERT(d % ways[i] == 0);
        n *= (uint64_t)(d / ways[i]);
    }
    return n;
}

// The plan group over the mesh axes in `axes` for collectives on `stream` (made on first use).
int p3_group(builder *E, int axes, int stream) {
    for (int i = 0; i < E->n_groups; i++)
        if (E->groups[i][0] == axes && E->groups[i][1] == stream) return i;
    int *g = *VEC_PUSH(E->g->arena, E->groups, E->n_groups, E->cap_groups);
    g[0] = axes, g[1] = stream;
    return E->n_groups - 1;
}

// A buffer of tensor t (-1: scratch) in layout s, with its slots.
int p3_buf(builder *E, prog *P, int t, plan_shard s, uint32_t mb_slots, uint32_t layer_slots, uint32_t base) {
    ebuf *b = VEC_PUSH(E->g->arena, P->buf, P->n_buf, P->cap_buf);
    b->tensor = t >= 0 ? (uint32_t)t : PLAN_NONE;
    b->dtype = (uint8_t)(t >= 0 ? E->g->tensors[t].dtype : PCC_F32);
    b->shard = s;
    b->bytes = t >= 0 ? p3_shard_bytes(E, t, s) : 0;
    // A block tensor's buffer of one layer slot (an activation not kept, a resharding step) is
    // reused by each copy the stage runs: its layer_base is still the stage's first copy, so that
    // layer_base + the layer loop's variable names the copy at work (the runtime keys dropout's
    // masks on it; the verifier matches collectives by it).
    const pcc_tensor *T = t >= 0 ? &E->g->tensors[t] : NULL;
    if (T && T->block >= 0 && layer_slots == 1 && base == 0) {
        int fb = graph_block_family(E->g, T->block);
        if (E->v->copy_hi[fb][P->stage] > E->v->copy_lo[fb][P->stage]) base = (uint32_t)E->v->copy_lo[fb][P->stage];
    }
    b->mb_slots = mb_slots, b->layer_slots = layer_slots, b->layer_base = base;
    b->first = b->last = -1;
    b->bucket_next = -1;
    return P->n_buf - 1;
}

/* ---- instructions ---- */

// Buffer buf no longer holds what the resharding cache says it holds.
void p3_forget(prog *P, int buf) {
    for (int i = 0; i < P->n_cache; i++)
        if (P->cache[i].src == buf || P->cache[i].buf == buf) P->cache[i--] = P->cache[--P->n_cache];
}

// An instruction on `stream`, at the builder's phase and micro-batch offset.
plan_insn *p3_insn(builder *E, prog *P, plan_insn_kind k, int stream, const int *args, int nargs) {
    plan_insn *in = emit_insn(E->g->arena, &P->insn, &P->n_insn, &P->cap_insn, &P->args, &P->n_args, &P->cap_args, k, stream,
                              E->phase, args, nargs);
    in->mb_delta = (int16_t)E->delta;
    return in;
}

// A record or wait of event ev on `stream` (no micro-batch offset).
void p3_event(builder *E, prog *P, plan_insn_kind k, int stream, int ev) {
    int saved = E->delta;
    E->delta = 0;
    p3_insn(E, P, k, stream, NULL, 0)->a = ev;
    E->delta = saved;
}

// One collective over the mesh axes in `axes` (bits).
void p3_coll(builder *E, prog *P, pcc_coll kind, unsigned axes, int stream, int in, int out) {
    int args[2] = {in, out};
    plan_insn *i = p3_insn(E, P, PLAN_I_COLL, stream, args, 2);
    i->code = (uint16_t)kind;
    i->a = p3_group(E, (int)axes, stream);
    // A collective is a kernel too: its launch, as the estimate's resharding charges it (reshard.c).
    i->t_s = (float)(cost_collective_s(E->c, kind, cost_coll_bytes(kind, (double)P->buf[in].bytes, (double)P->buf[out].bytes), p3_axes_group(E, axes)) + cost_launch_s(E->c));
    p3_forget(P, out);
}

// A local copy of buffer src into dst on `stream`.
void p3_copy_on(builder *E, prog *P, int src, int dst, int stream) {
    int args[2] = {src, dst};
    plan_insn *in = p3_insn(E, P, PLAN_I_COPY, stream, args, 2);
    in->t_s = p3_memory_s(E, P, 2 * (double)P->buf[dst].bytes, dst);
    p3_forget(P, dst);
}

void p3_copy(builder *E, prog *P, int src, int dst) { p3_copy_on(E, P, src, dst, STREAM_MAIN); }

// The attrs of op; accumulate: it adds into its outputs; sharded: it does not, though it makes a
// gradient summed over micro-batches (ZeRO-2 sums the gradient's shard instead). Dropout along
// a sequence in zigzag order carries its dimension and chunks (emit_zigzag_dropout).
uint32_t p3_attrs_of(builder *E, prog *P, const pcc_op *op, bool accumulate, bool sharded) {
    pcc_op o = *op;
    if (sharded) o.accumulate = false;
    if (E->cp > 1 && E->s->config.cp_zigzag) emit_zigzag_dropout(E->g, &o, E->s->seq_dim, 2 * E->cp); // mask by logical positions
    return emit_attrs(E->g->arena, &P->attrs, &P->n_attrs, &P->cap_attrs, &o, accumulate);
}

// The index of attrs a in P's table (added if new), or PLAN_NONE when all zero.
uint32_t p3_intern_attrs(builder *E, prog *P, const plan_attrs *pa) {
    return emit_attrs_add(E->g->arena, &P->attrs, &P->n_attrs, &P->cap_attrs, pa);
}

/* ---- times (plan_insn.t_s): the cost model's, per execution ---- */

// As the cost model takes a group: the ranks along mesh axis `axis` (dist 0), or two ranks
// `dist` apart along it (a transfer). Neighbours on an axis are the product of the later axes'
// sizes apart (tp varies fastest).
static pcc_group_shape axis_group(const builder *E, int axis, int dist) {
    int stride = 1;
    for (int a = axis + 1; a < PCC_AXES; a++) stride *= E->s->mesh[a];
    if (dist > 0) return (pcc_group_shape){2, dist * stride};
    return (pcc_group_shape){E->s->mesh[axis], stride};
}

// The ranks of one group over the mesh axes in `axes` (bits), as the cost model sees them: how
// many, and the rank stride of the fastest of them (dp and tp together are contiguous).
pcc_group_shape p3_axes_group(const builder *E, unsigned axes) {
    pcc_group_shape sh = {1, 1};
    for (int a = 0; a < PCC_AXES; a++) {
        if (!(axes >> a & 1u)) continue;
        pcc_group_shape one = axis_group(E, a, 0);
        sh.size *= one.size, sh.stride = one.stride;
    }
    return sh;
}

// A send or receive of buffer b to or from the stage `offset` away.
float p3_transfer_s(const builder *E, const prog *P, int b, int offset) {
    double bytes = (double)P->buf[b].bytes;
    int peer = ((P->stage + offset) % E->pp + E->pp) % E->pp;
    const pcc_cluster *c = cluster_stage_view(E->all, E->pp, peer) == E->c ? E->c : E->all; // between groups: the slower
    int w = axis_group(E, PCC_AX_PP, 1).stride; // the ranks of a stage
    return (float)(cost_collective_s(c, PCC_COLL_SEND_RECV, bytes, cost_pair_shape(c, (int64_t)(P->stage % E->pp) * w, (int64_t)peer * w, w)) +
                   cost_launch_s(c));
}

// A memory-bound kernel moving `bytes` in the dtype of buffer b.
float p3_memory_s(const builder *E, const prog *P, double bytes, int b) {
    return (float)cost_compute_s(E->c, 0, bytes, (pcc_dtype)P->buf[b].dtype, false);
}

// One execution of op o on a rank: the cost model's time for the op at the per-device shape of
// its operands' layouts (the scheduler's estimate costs ops the same way).
float p3_op_time_s(const builder *E, int o) {
    const pcc_op *op = &E->g->ops[o];
    int ways[PCC_MAX_OPERANDS + 1][PCC_MAX_RANK];
    const int *per_operand[PCC_MAX_OPERANDS + 1];
    for (int k = 0; k < op->nin + op->nout; k++) {
        const pcc_tensor *T = &E->g->tensors[k < op->nin ? op->in[k] : op->out[k - op->nin]];
        for (int d = 0; d < T->rank; d++) {
            ways[k][d] = 1;
            for (int a = 0; a < PCC_AXES; a++)
                if (E->v->sh[o][k].map[a] == PLAN_SHARD_D(d)) ways[k][d] *= E->s->mesh[a];
        }
        per_operand[k] = ways[k];
    }
    return (float)cost_op_s(E->c, E->g, op, per_operand);
}

// A scratch buffer of `bytes` in dtype dt (no tensor: all R, one slot).
int p3_scratch(builder *E, prog *P, pcc_dtype dt, uint64_t bytes) {
    int b = p3_buf(E, P, -1, p3_shard_r(), 1, 1, 0);
    P->buf[b].dtype = (uint8_t)dt, P->buf[b].bytes = bytes;
    return b;
}
