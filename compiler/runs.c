/*
 * runs.c: phase 3's buckets for the collectives of several top-level operators: which operators
 * wait for their run (p3_run_plan), and what the buckets save, for the estimate (p3_run_credit);
 * preserve.c's pass_part holds the runs and its run_release emits them.
 *
 * Top-level operators that each read their inputs through one collective (of one kind, over
 * one set of tp axes, in one dtype) and do not read each other's outputs wait for the last of
 * their run: the inputs' collectives go as one instruction (a bucket, which the cost model times
 * as one collective over the pairs' bytes: one launch and the group's latency once), then the
 * operators in their order. DLRM's layout: every table's lookup, then one all-to-all of all the
 * tables' pieces (TorchRec's fused all-to-all), then their readers; backward, the same for the
 * tables' gradients. Only runs of two or more wait (p3_run_plan), so a lone operator stays where
 * it was. Not over dp or cp (the estimate charges those collectives elsewhere), and not with
 * --sync background, whose rounds take the gate between the foreground's collectives one by one.
 * The estimate learns what the buckets save from phase 3 (estimate_runs); the CUDA backend issues
 * a bucket's pairs in one ncclGroupStart/End (runtime/cuda/nccl.c).
 */
#include "preserve.h"

#include <string.h>

// Whether op o is attention (or its gradient) that runs as ring attention (preserve.c emits it so).
bool p3_ring_op(const builder *E, int o) {
    const pcc_op *op = &E->g->ops[o];
    if (!E->s->config.cp_ring || E->cp < 2 || (op->kind != PCC_OP_ATTENTION && op->kind != PCC_OP_ATTENTION_GRAD)) return false;
    return E->s->letter[PCC_AX_CP][op->phase == PCC_PHASE_FWD ? o : op->fwd] >= 0;
}

// Whether op o may wait for the rest of its run: it updates nothing in place, sums into no
// output, is not ring attention, and no output of it goes another way than to its readers (a
// contribution summed once per step, a ZeRO-2 shard).
bool p3_may_wait(const builder *E, int o) {
    const pcc_op *op = &E->g->ops[o];
    if ((pcc_ops[op->kind].flags & PCC_OPF_INPLACE) || op->accumulate || p3_ring_op(E, o)) return false;
    for (int i = 0; i < op->nout; i++)
        if (E->v->deferred[op->out[i]] || E->v->zero2[op->out[i]]) return false;
    return true;
}

// Op o's signature where every input that it reads in another layout than the value's home is
// one collective, all of one kind, axes and dtype, and there is one at least.
static bool sig_of(const builder *E, int o, p3_sig *sig) {
    const pcc_op *op = &E->g->ops[o];
    int n = 0;
    for (int i = 0; i < op->nin; i++) {
        int t = op->in[i];
        if (!memcmp(E->v->home_sh[t].map, E->v->sh[o][i].map, sizeof E->v->sh[o][i].map)) continue;
        pcc_reshard_step st[PCC_AXES + 1];
        if (reshard_steps(E->v->home_sh[t], E->v->sh[o][i], E->g->tensors[t].rank, st) != 1 || st[0].kind < 0) return false;
        p3_sig x = {st[0].kind, (int)E->g->tensors[t].dtype, st[0].axes};
        if (x.axes & ~(1u << PCC_AX_TP | 1u << PCC_AX_TQ)) return false; // the estimate's (ILP's) resharding only
        if (n++ && (x.kind != sig->kind || x.axes != sig->axes || x.dtype != sig->dtype)) return false;
        *sig = x;
    }
    return n > 0;
}

bool p3_reads_held(const builder *E, const p3_held *h, int o) {
    const pcc_op *op = &E->g->ops[o];
    for (int i = 0; h->n && i < op->nin; i++)
        if (h->out[op->in[i]]) return true;
    return false;
}

void p3_hold(const builder *E, p3_held *h, int o, p3_sig sig) {
    h->sig[h->n] = sig, h->op[h->n++] = o;
    for (int i = 0; i < E->g->ops[o].nout; i++) h->out[E->g->ops[o].out[i]] = true;
}

void p3_release(const builder *E, p3_held *h) {
    for (int j = 0; j < h->n; j++)
        for (int i = 0; i < E->g->ops[h->op[j]].nout; i++) h->out[E->g->ops[h->op[j]].out[i]] = false;
    h->n = 0;
}

p3_held p3_held_new(const builder *E) {
    const pcc_graph *g = E->g;
    return (p3_held){.op = arena_alloc(g->arena, sizeof(int) * (size_t)g->n_ops),
                     .sig = arena_alloc(g->arena, sizeof(p3_sig) * (size_t)g->n_ops),
                     .out = arena_alloc(g->arena, (size_t)g->n_tensors)};
}

// The run ends: its operators whose signature two or more share are marked to wait.
static void mark_run(const builder *E, p3_held *h, bool *waits) {
    for (int j = 0; j < h->n; j++) {
        int same = 0;
        for (int k = 0; k < h->n; k++)
            same += h->sig[k].kind == h->sig[j].kind && h->sig[k].axes == h->sig[j].axes && h->sig[k].dtype == h->sig[j].dtype;
        waits[h->op[j]] = same > 1;
    }
    p3_release(E, h);
}

// Which top-level operators of this stage's forward (bwd false) or backward pass wait for
// their run: a run is held from an operator with a signature until an operator reads one of its
// outputs, or may not wait itself, or a block or the pass's end comes (the passes of the same
// stage and direction all alike, so this is made once per stage and direction).
const bool *p3_run_plan(builder *E, prog *P, bool bwd) {
    const pcc_graph *g = E->g;
    if (!P->waits[bwd]) P->waits[bwd] = arena_alloc(g->arena, sizeof(bool *) * (size_t)E->ns);
    if (P->waits[bwd][P->stage]) return P->waits[bwd][P->stage];
    bool *waits = arena_alloc(g->arena, (size_t)g->n_ops);
    P->waits[bwd][P->stage] = waits;
    if (E->v->bg) return waits; // --sync background: the rounds race the foreground's collectives at the gate, one by one
    p3_held h = p3_held_new(E);
    for (int o = bwd ? g->n_fwd_ops : 0; o < (bwd ? g->n_ops : g->n_fwd_ops); o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase != (bwd ? PCC_PHASE_BWD : PCC_PHASE_FWD)) continue;
        if (op->block >= 0) {
            mark_run(E, &h, waits);
            o = g->blocks[op->block].first_op + g->blocks[op->block].n_ops - 1;
            continue;
        }
        if (E->v->ostage[o] != P->stage) continue;
        p3_sig sig;
        bool may = p3_may_wait(E, o);
        if (!may || p3_reads_held(E, &h, o)) mark_run(E, &h, waits);
        if (may && sig_of(E, o, &sig)) p3_hold(E, &h, o, sig);
    }
    mark_run(E, &h, waits);
    return waits;
}

// The forward op whose resharding the estimate charges input i of op o (ilp.c's rs_comm: an
// edge's forward and backward moves on its reader): o itself forward; backward, the forward
// reader of the value whose gradient the input is (the gradient comes back from its layout), or
// the forward op of o (an input it reads again); -1 where none is.
int p3_charged_to(const pcc_graph *g, int o, int i) {
    const pcc_op *op = &g->ops[o];
    if (op->phase != PCC_PHASE_BWD) return o;
    const pcc_tensor *x = &g->tensors[op->in[i]];
    if (x->kind != PCC_T_GRAD || x->of < 0) return op->fwd;
    for (int f = 0; f < g->n_fwd_ops; f++)
        for (int k = 0; k < g->ops[f].nin; k++)
            if (g->ops[f].in[k] == x->of) return f;
    return op->fwd;
}

// What the run's buckets save against a collective per pair, as coll and coll_bucket time them
// (each pair's launch and latency, but one bucket's), for the estimate (estimate_runs): each
// pair's saving (its own time less its share of the bucket's, by bytes) on the forward op the
// estimate charges its collective (to[k], charged_to), every micro-batch's pass the same.
void p3_run_credit(builder *E, prog *P, const pcc_reshard_step *step, const int *in, const int *out, const pcc_group_shape *grp,
                   const int *to, int n) {
    const pcc_graph *g = E->g;
    bool bwd = E->phase == PLAN_PHASE_BWD, *seen = arena_alloc(g->arena, (size_t)(n ? n : 1));
    for (int k = 0; k < n; k++)
        if (to[k] >= 0) E->run_credit[bwd][to[k]] = 0;
    for (int k = 0; k < n; k++) {
        if (seen[k]) continue;
        pcc_coll kind = (pcc_coll)step[k].kind;
        double sum = 0;
        for (int j = k; j < n; j++)
            if (step[j].kind == step[k].kind && step[j].axes == step[k].axes && P->buf[out[j]].dtype == P->buf[out[k]].dtype)
                sum += cost_coll_bytes(kind, (double)P->buf[in[j]].bytes, (double)P->buf[out[j]].bytes);
        double whole = cost_collective_s(E->c, kind, sum, grp[k]) + cost_launch_s(E->c);
        for (int j = k; j < n; j++) {
            if (seen[j] || step[j].kind != step[k].kind || step[j].axes != step[k].axes || P->buf[out[j]].dtype != P->buf[out[k]].dtype)
                continue;
            double b = cost_coll_bytes(kind, (double)P->buf[in[j]].bytes, (double)P->buf[out[j]].bytes);
            if (to[j] >= 0)
                E->run_credit[bwd][to[j]] += cost_collective_s(E->c, kind, b, grp[k]) + cost_launch_s(E->c) - (sum > 0 ? whole * b / sum : 0);
            seen[j] = true;
        }
    }
}

