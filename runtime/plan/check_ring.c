/*
 * check_ring.c: the verifier's attention-ring rule: ring attention's steps (attention_block and
 * attention_block_grad, runtime/ops.def; compiler/preserve.c emits them for --cp-form ring) and
 * the shift collectives between them make whole rings; and the dropout-zigzag rule (below).
 *
 * A ring over n ranks is n steps of one operator over one rank's queries (the same q, k, v and,
 * for the gradient, dy buffers), steps 0, 1, ..., n-1 (attrs i[START]) in program order:
 *   - step 0 attends the rank's own block: its k and v block buffers are its own k and v, and it
 *     has no sums of steps before;
 *   - step j > 0 attends the block step j-1 attended, passed on by a shift collective (the block
 *     buffer's last writer is a shift whose input is step j-1's block), and reads step j-1's sums
 *     (the forward: its o and lse; the gradient: its dq, and its dk and dv shifted with the block);
 *   - the last step is n-1, n the shift's group size: every rank's block was attended once.
 * A shift writes a scratch buffer: the block it brings is another rank's piece, which no shard
 * of the mesh describes. What the rule does not see: that the shifts' group is the axis that
 * splits the sequence, and that the gradient's dk and dv are shifted home after the last step
 * (the data flow then reads them as the sums they are).
 *
 * The zigzag order (inputs with a zigzag, plan_zigzag_pos; --cp-form zigzag): the inputs that
 * have one agree on its chunks z; every step then masks by the logical positions of those
 * chunks (attrs i[END] = z, where 0 would mask by the stored positions: wrong keys for every
 * rank but the first) on a ring of z / 2 ranks (the pieces it passes are the pairs of chunks),
 * and no attention runs on the whole sequence (its mask knows no zigzag). Without zigzag inputs
 * a step's i[END] is 0. The inputs in zigzag order agree on its chunks and on the sequence's
 * length. What it does not see: an input along the sequence left in the natural order beside
 * zigzag ones (the plan does not say which dimension is the sequence).
 *
 * The dropout-zigzag rule: dropout and dropout_grad draw their mask by logical positions where
 * they run along a sequence in zigzag order (attrs i[AXIS] its dimension, i[END] the chunks;
 * cpu/elementwise.c). The plan names no sequence, so the rule finds it as the dimension of the
 * inputs' length that the operand's shard splits over an axis that splits a zigzag input's
 * sequence (cp; with sequence parallelism also tp). Such a dropout must carry the inputs' chunks
 * and that dimension; a dropout with chunks must match the inputs' and name a dimension of their
 * length; without zigzag inputs no dropout has chunks. What it does not see: a dropout along the
 * sequence that no axis splits (plancc splits every one over cp), and one on a scratch buffer.
 */
#include "checker.h"

#include <string.h>

typedef struct ring_step {
    uint32_t i;                 // the instruction
    bool grad;
    int64_t j;                  // its step
    int64_t z;                  // its zigzag chunks (attrs i[END]; 0: natural order)
    uint32_t q, k, v, dy;       // the rank's own operands (dy: the gradient's; else PLAN_NONE)
    uint32_t kb, vb;            // the block in hand
    uint32_t nsums, sums[3];    // the sums of the steps before (fwd: o, lse; grad: dq, dkb, dvb)
    uint32_t out[3];            // its outputs (2 or 3)
} ring_step;

// Instruction i of program pg as a ring step; false when it is none (or its arity is wrong:
// check_insn's business).
static bool ring_step_of(const plan_program *pg, uint32_t i, ring_step *s) {
    const plan_insn *in = &pg->insns[i];
    if (in->kind != PLAN_I_COMPUTE) return false;
    const char *op = plan_op_name(in->code);
    bool grad = op && strcmp(op, "attention_block_grad") == 0;
    if (!op || (!grad && strcmp(op, "attention_block") != 0)) return false;
    const uint32_t *a = &pg->args[in->args];
    uint32_t nout = grad ? 3 : 2, nin = in->nargs - nout, base = grad ? 8 : 5, q0 = grad ? 1 : 0;
    if (in->nargs < nout || nin < base || nin > base + nout) return false;
    *s = (ring_step){.i = i, .grad = grad, .q = a[q0], .k = a[q0 + 1], .v = a[q0 + 2], .dy = grad ? a[0] : PLAN_NONE,
                     .kb = a[base - 2], .vb = a[base - 1], .nsums = nin - base};
    s->j = in->attrs != PLAN_NONE ? pg->attrs[in->attrs].i[PLAN_AI_START] : 0;
    s->z = in->attrs != PLAN_NONE ? pg->attrs[in->attrs].i[PLAN_AI_END] : 0;
    for (uint32_t x = 0; x < s->nsums; x++) s->sums[x] = a[base + x];
    for (uint32_t x = 0; x < nout; x++) s->out[x] = a[nin + x];
    return true;
}

// Whether buffer b (read at instruction i) is buffer from passed on by a shift; *n its group's size.
static bool shifted(const checker *c, const plan_program *pg, uint32_t i, uint32_t b, uint32_t from, uint64_t *n) {
    uint32_t w = check_last_writer(pg, i, b);
    if (w == UINT32_MAX) return false;
    const plan_insn *in = &pg->insns[w];
    if (in->kind != PLAN_I_COLL || in->code != PLAN_COLL_SHIFT || in->nargs != 2 || pg->args[in->args] != from) return false;
    *n = plan_group_size(c->p, (uint32_t)in->a);
    return true;
}

static bool same_queries(const ring_step *a, const ring_step *b) {
    return a->grad == b->grad && a->q == b->q && a->k == b->k && a->v == b->v && a->dy == b->dy;
}

// Step s against the step before it (p: step s.j - 1 of the same queries, or NULL when none).
static plan_status check_step(checker *c, uint32_t k, const ring_step *s, const ring_step *p, uint64_t *n) {
    const plan_program *pg = &c->p->programs[k];
    if (s->j == 0) {
        if (s->kb != s->k || s->vb != s->v)
            return check_ifail(c, k, s->i, "attention-ring: step 0 attends buffers %u and %u, not the rank's own k and v (buffers %u "
                               "and %u)", s->kb, s->vb, s->k, s->v);
        if (s->nsums) return check_ifail(c, k, s->i, "attention-ring: step 0 reads sums of steps before it");
        return PLAN_OK;
    }
    if (!p) return check_ifail(c, k, s->i, "attention-ring: step %lld follows no step %lld of the same queries", (long long)s->j, (long long)(s->j - 1));
    if (!shifted(c, pg, s->i, s->kb, p->kb, n) || !shifted(c, pg, s->i, s->vb, p->vb, n))
        return check_ifail(c, k, s->i, "attention-ring: step %lld's k/v block (buffers %u, %u) is not the block of step %lld (insn %u: "
                           "buffers %u, %u) passed on by a shift: the rank would attend a block twice and another never",
                           (long long)s->j, s->kb, s->vb, (long long)p->j, p->i, p->kb, p->vb);
    bool ok = s->nsums == (s->grad ? 3u : 2u);
    uint64_t m = 0;
    if (ok && !s->grad) ok = s->sums[0] == p->out[0] && s->sums[1] == p->out[1];
    if (ok && s->grad) ok = s->sums[0] == p->out[0] && shifted(c, pg, s->i, s->sums[1], p->out[1], &m) && shifted(c, pg, s->i, s->sums[2], p->out[2], &m);
    if (!ok)
        return check_ifail(c, k, s->i, "attention-ring: step %lld does not read the sums of step %lld (insn %u)%s", (long long)s->j,
                           (long long)p->j, p->i, s->grad ? " (dq as it left them; dk and dv shifted with the block)" : " (its o and lse)");
    if ((uint64_t)s->j >= *n)
        return check_ifail(c, k, s->i, "attention-ring: step %lld on a ring of %llu ranks", (long long)s->j, (unsigned long long)*n);
    return PLAN_OK;
}

// The sequence in zigzag order, as the plan's inputs hold it.
typedef struct zigzag_order {
    int64_t z;                  // chunks (0: no input in zigzag order)
    int64_t n;                  // positions (the zigzag dimension's length)
    uint32_t axes;              // the mesh axes that split that dimension in some input's buffer
} zigzag_order;

// The zigzag order the plan's inputs agree on into *zo; fails where two disagree on the chunks or
// on the sequence's length.
static plan_status plan_zigzag(checker *c, uint32_t k, zigzag_order *zo) {
    const plan *p = c->p;
    *zo = (zigzag_order){0};
    uint32_t first = PLAN_NONE;
    for (uint32_t t = 0; t < p->n_tensors; t++) {
        const plan_tensor *x = &p->tensors[t];
        if (!x->zigzag) continue;
        if (first != PLAN_NONE && (x->zigzag != zo->z || x->shape[x->zigzag_dim] != zo->n))
            return check_pfail(c, k, "attention-ring: inputs %u and %u hold the sequence in zigzag orders of %lld and %u chunks "
                               "over %lld and %lld positions: their positions would not line up", first, t, (long long)zo->z,
                               x->zigzag, (long long)zo->n, (long long)x->shape[x->zigzag_dim]);
        first = t, zo->z = x->zigzag, zo->n = x->shape[x->zigzag_dim];
    }
    for (uint32_t q = 0; zo->z && q < p->n_programs; q++)
        for (uint32_t b = 0; p->programs[q].name && b < p->programs[q].n_buffers; b++) {
            const plan_buffer *pb = &p->programs[q].buffers[b];
            if (pb->tensor != PLAN_NONE && p->tensors[pb->tensor].zigzag)
                zo->axes |= check_split_axes(p, pb->shard, p->tensors[pb->tensor].zigzag_dim);
        }
    return PLAN_OK;
}

// The dropout-zigzag rule on dropout or dropout_grad instruction i: its mask is drawn by logical
// positions exactly where it runs along the sequence in zigzag order (attrs i[END] = the inputs'
// chunks, i[AXIS] = the dimension of the sequence's length that the inputs' split axes split).
static plan_status check_dropout_zigzag(checker *c, uint32_t k, uint32_t i, const zigzag_order *zo) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    int64_t z = in->attrs != PLAN_NONE ? pg->attrs[in->attrs].i[PLAN_AI_END] : 0;
    int64_t d = in->attrs != PLAN_NONE ? pg->attrs[in->attrs].i[PLAN_AI_AXIS] : 0;
    if (z && z != zo->z)
        return check_ifail(c, k, i, "dropout-zigzag: attrs %u draw the mask by a zigzag order of %lld chunks (i[3]), but %s",
                           in->attrs, (long long)z, zo->z ? "the inputs hold the sequence in another" : "no input is in zigzag order");
    const plan_buffer *x = &pg->buffers[pg->args[in->args]];
    if (x->tensor == PLAN_NONE || !zo->z) return PLAN_OK;
    const plan_tensor *t = &p->tensors[x->tensor];
    if (z && (d < 0 || d >= t->rank || t->shape[d] != zo->n))
        return check_ifail(c, k, i, "dropout-zigzag: attrs %u name dimension %lld (i[1]) of tensor \"%s\" for the zigzag order, which "
                           "is no dimension of %lld positions, the sequence's", in->attrs, (long long)d, t->name, (long long)zo->n);
    for (int e = 0; e < t->rank; e++) {
        uint32_t m = check_split_axes(p, x->shard, e) & zo->axes;
        if (t->shape[e] != zo->n || !m || (z && d == e)) continue;
        char ax[64], why[96];
        check_axes_text(p, m, ax, sizeof ax);
        if (z) snprintf(why, sizeof why, "attrs %u name dimension %lld (i[1]) for the zigzag order", in->attrs, (long long)d);
        else snprintf(why, sizeof why, "its attrs give no zigzag order (i[3] 0)");
        return check_ifail(c, k, i, "dropout-zigzag: tensor \"%s\" runs along the sequence (dimension %d, split over %s as the zigzag "
                           "inputs' is), but %s: its mask would not be one device's", t->name, e, ax, why);
    }
    return PLAN_OK;
}

plan_status check_ring(checker *c, uint32_t k) {
    const plan_program *pg = &c->p->programs[k];
    zigzag_order zo;
    plan_status zs = pg->n_insns ? plan_zigzag(c, k, &zo) : PLAN_OK;
    if (zs || !pg->n_insns) return zs;
    int64_t z = zo.z;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        const char *opn = in->kind == PLAN_I_COMPUTE ? plan_op_name(in->code) : NULL;
        if (opn && (strcmp(opn, "dropout") == 0 || strcmp(opn, "dropout_grad") == 0)) {
            plan_status st = check_dropout_zigzag(c, k, i, &zo);
            if (st) return st;
            continue;
        }
        if (z && opn && (strcmp(opn, "attention") == 0 || strcmp(opn, "attention_grad") == 0))
            return check_ifail(c, k, i, "attention-ring: %s over the whole sequence, but the inputs hold it in zigzag order of %lld "
                               "chunks: its causal mask would read stored positions as logical ones", opn, (long long)z);
        if (in->kind == PLAN_I_COLL && in->code == PLAN_COLL_SHIFT)
            for (uint32_t x = in->nargs / 2u; x < in->nargs; x++)
                if (pg->buffers[pg->args[in->args + x]].tensor != PLAN_NONE)
                    return check_ifail(c, k, i, "attention-ring: shift writes buffer %u, which holds a tensor's shard; the block it "
                                       "brings is another rank's piece, so it must be scratch", pg->args[in->args + x]);
        ring_step s, p, nx;
        if (!ring_step_of(pg, i, &s)) continue;
        if (s.z != z)
            return check_ifail(c, k, i, "attention-ring: step %lld masks %s, but the inputs hold the sequence %s", (long long)s.j,
                               s.z ? "by a zigzag order" : "by the stored (natural) positions",
                               z ? "in zigzag order" : "in natural order (no zigzag)");
        bool have_p = false;
        for (uint32_t b = i; b-- > 0 && !have_p;)
            if (ring_step_of(pg, b, &p) && same_queries(&p, &s)) have_p = true;
        uint64_t n = 0;
        plan_status st = check_step(c, k, &s, have_p && p.j == s.j - 1 ? &p : NULL, &n);
        if (st) return st;
        // the ring's last step: no later step of the same queries continues it
        bool next = false;
        for (uint32_t a = i + 1; a < pg->n_insns; a++)
            if (ring_step_of(pg, a, &nx) && same_queries(&nx, &s)) {
                next = nx.j == s.j + 1;
                break;
            }
        if (next) continue;
        if (s.j == 0 || (uint64_t)s.j + 1 != n)
            return check_ifail(c, k, i, "attention-ring: the ring ends at step %lld, but %s", (long long)s.j,
                               s.j == 0 ? "a ring has a shift and two steps at least" : "its shifts go around more ranks: a block is never attended");
        if (z && (uint64_t)z != 2 * n)
            return check_ifail(c, k, i, "attention-ring: a ring of %llu ranks over a zigzag order of %lld chunks: each rank must hold "
                               "two of them", (unsigned long long)n, (long long)z);
    }
    return PLAN_OK;
}
