/*
 * vocab.c: phase 3's vocabulary-parallel cross_entropy (Megatron-LM's vocab-parallel cross entropy;
 * nnScaler's interlaced LM head needs it to pay).
 *
 * Where the plan splits cross_entropy's classes (its letter v: the LM head's output split along the
 * vocabulary over tp, or over pp x tp for an interlaced head), no rank holds a whole row of logits,
 * and the loss is not a sum of per-piece losses. The operator runs in three steps instead
 * (runtime/ops.def's vocab_ce rows):
 *
 *   vocab_ce_stats   each rank's piece: per row its max m_p, its sum of exp(x - m_p), and the
 *                    label's logit where the piece holds the label (else 0): 3 numbers a row;
 *   all_gather       over the axes that split the classes: every piece's numbers on every rank
 *                    (3 x rows x pieces; Megatron-LM's three all-reduces of a number a row, as one);
 *   vocab_ce         the loss from them: lse = M + log sum_p s_p exp(m_p - M), M = max_p m_p,
 *                    minus the label's logit, as cross_entropy computes it from the whole row.
 *
 * The gradient runs vocab_ce_stats and the all_gather again on the logits it reads (the backward
 * keeps nothing of the forward's), then vocab_ce_grad: the piece's softmax minus its part of the
 * one-hot, from the gathered numbers. Both are exact: the same sums in another order. The loss
 * is whole on every rank of the group (R on its axes), as a replicated cross_entropy leaves it.
 *
 * The statistics are f32 even where the logits are f16 or bf16 (a sum of exp over 250k classes
 * does not fit a bf16 mantissa). plan_check's vocab-ce rule checks the three steps' wiring.
 */
#include "preserve.h"

#include <string.h>

// The logits' operand of op o (cross_entropy: input 0; its gradient: input 1), or -1.
static int logits_operand(const pcc_op *op) {
    return op->kind == PCC_OP_CROSS_ENTROPY ? 0 : op->kind == PCC_OP_CROSS_ENTROPY_GRAD ? 1 : -1;
}

unsigned p3_vocab_axes(const builder *E, int o) {
    const pcc_op *op = &E->g->ops[o];
    int li = logits_operand(op);
    if (li < 0) return 0;
    int last = E->g->tensors[op->in[li]].rank - 1;
    unsigned axes = 0;
    for (int a = 0; a < PCC_AXES; a++)
        if (E->v->sh[o][li].map[a] == PLAN_SHARD_D(last)) axes |= 1u << a;
    return axes;
}

// Every piece's statistics of the logits in buffer x (labels in buffer lab) on every rank of
// the group over `axes`: vocab_ce_stats into a scratch buffer, then its all_gather.
static int gathered_stats(builder *E, prog *P, int x, int lab, unsigned axes, uint32_t attrs) {
    const pcc_dtype dt = PCC_F32;
    uint64_t rows = P->buf[lab].bytes / pcc_dtype_bytes(PCC_I32), k = (uint64_t)p3_axes_group(E, axes).size;
    int st = p3_scratch(E, P, dt, 3 * rows * pcc_dtype_bytes(dt)), all = p3_scratch(E, P, dt, k * P->buf[st].bytes);
    plan_attrs pa;
    if (attrs == PLAN_NONE) memset(&pa, 0, sizeof pa);
    else pa = P->attrs[attrs];
    pa.i[PLAN_AI_ACCUMULATE] = 0; // a scratch buffer, written whole
    plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, (int[]){x, lab, st}, 3);
    in->code = PCC_OP_VOCAB_CE_STATS;
    in->attrs = p3_intern_attrs(E, P, &pa);
    in->t_s = p3_memory_s(E, P, (double)P->buf[x].bytes, x);
    p3_coll(E, P, PCC_COLL_ALL_GATHER, axes, STREAM_MAIN, st, all);
    return all;
}

void p3_vocab_ce(builder *E, prog *P, int o, unsigned axes, const int *args, uint32_t attrs) {
    const pcc_op *op = &E->g->ops[o];
    PCC_ASSERT(axes);
    if (op->kind == PCC_OP_CROSS_ENTROPY) {
        int all = gathered_stats(E, P, args[0], args[1], axes, attrs);
        plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, (int[]){all, args[1], args[2]}, 3);
        in->code = PCC_OP_VOCAB_CE;
        in->attrs = attrs;
        in->t_s = p3_memory_s(E, P, (double)P->buf[all].bytes, all);
        return;
    }
    int all = gathered_stats(E, P, args[1], args[2], axes, attrs);
    plan_insn *in = p3_insn(E, P, PLAN_I_COMPUTE, STREAM_MAIN, (int[]){args[0], args[1], args[2], all, args[3]}, 5);
    in->code = PCC_OP_VOCAB_CE_GRAD;
    in->attrs = attrs;
    in->t_s = p3_op_time_s(E, o);
}
