/*
 * check_vocab.c: the verifier's vocab-ce rule: cross_entropy sees whole rows of classes, and the
 * vocabulary-parallel form (runtime/ops.def's vocab_ce rows; compiler/vocab.c emits them) is
 * wired as one computation.
 *
 *   - cross_entropy and cross_entropy_grad never read logits whose buffer splits the classes
 *     (their last dimension) over a mesh axis: each rank would take the softmax of its piece
 *     alone, a loss and a gradient of another function (ops.def marks the classes "^");
 *   - vocab_ce and vocab_ce_grad read statistics that an all_gather brought (their last writer),
 *     gathered from the statistics a vocab_ce_stats made (its last writer) of the same labels
 *     (the gradient: and of the logits it differentiates);
 *   - that all_gather's group is exactly the mesh axes that split the classes in the logits'
 *     buffer the statistics were made from: a smaller group leaves out pieces (the softmax of
 *     part of the vocabulary), a larger one counts pieces twice.
 *
 * The statistics' sizes (3 numbers a row and piece) are the kernels' to check, and the gather's
 * in and out sizes check_insn's. What the rule does not see: statistics whose logits lie in a
 * scratch buffer (no shard to read the split from; phase 3 never makes one).
 */
#include "checker.h"

#include <string.h>

static bool is_op(const plan_insn *in, const char *name) {
    const char *op = in->kind == PLAN_I_COMPUTE ? plan_op_name(in->code) : NULL;
    return op && strcmp(op, name) == 0;
}

// The mesh axes (bits) that split the last dimension of buffer b's tensor; 0 for scratch.
static uint32_t class_axes(const plan *p, const plan_program *pg, uint32_t b) {
    const plan_buffer *bf = &pg->buffers[b];
    if (bf->tensor == PLAN_NONE) return 0;
    int last = p->tensors[bf->tensor].rank - 1;
    return last >= 0 ? check_split_axes(p, bf->shard, last) : 0;
}

// vocab_ce (grad false: stats a[0], labels a[1]) or vocab_ce_grad (stats a[3], logits a[1],
// labels a[2]) at instruction i.
static plan_status check_combine(checker *c, uint32_t k, uint32_t i, bool grad) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    const uint32_t *a = &pg->args[in->args];
    uint32_t st = grad ? a[3] : a[0], lab = grad ? a[2] : a[1];
    const char *op = grad ? "vocab_ce_grad" : "vocab_ce";
    uint32_t g = check_last_writer(pg, i, st);
    const plan_insn *gi = g == UINT32_MAX ? NULL : &pg->insns[g];
    if (!gi || gi->kind != PLAN_I_COLL || gi->code != PLAN_COLL_ALL_GATHER || gi->nargs != 2)
        return check_ifail(c, k, i, "vocab-ce: %s reads statistics (buffer %u) that no all_gather brought: it would combine one "
                           "piece of the vocabulary's, not every piece's", op, st);
    uint32_t piece = pg->args[gi->args], w = check_last_writer(pg, g, piece);
    const plan_insn *wi = w == UINT32_MAX ? NULL : &pg->insns[w];
    if (!wi || !is_op(wi, "vocab_ce_stats") || wi->nargs != 3)
        return check_ifail(c, k, i, "vocab-ce: the all_gather (insn %u) that brings %s's statistics gathers buffer %u, which no "
                           "vocab_ce_stats made", g, op, piece);
    const uint32_t *wa = &pg->args[wi->args];
    if (wa[1] != lab || (grad && wa[0] != a[1]))
        return check_ifail(c, k, i, "vocab-ce: %s's statistics were made (insn %u) from %s than it reads (buffers %u, %u; it reads "
                           "%u, %u)", op, w, wa[1] != lab ? "other labels" : "other logits", wa[0], wa[1], grad ? a[1] : wa[0], lab);
    uint32_t want = class_axes(p, pg, wa[0]), have = p->groups[gi->a].axes;
    if (want && have != want) {
        char hs[48], ws[48];
        check_axes_text(p, have, hs, sizeof hs), check_axes_text(p, want, ws, sizeof ws);
        const char *why = (have & want) == have   ? "pieces of the vocabulary are left out"
                          : (have & want) == want ? "pieces are counted more than once"
                                                  : "it combines other ranks' rows, not the pieces of its own";
        return check_ifail(c, k, i, "vocab-ce: %s's statistics are gathered over %s (insn %u), but the logits' classes are split over "
                           "%s: %s", op, hs, g, ws, why);
    }
    return PLAN_OK;
}

plan_status check_vocab(checker *c, uint32_t k) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        if (in->kind != PLAN_I_COMPUTE) continue;
        const uint32_t *a = &pg->args[in->args];
        bool ce = is_op(in, "cross_entropy") && in->nargs == 3, ceg = is_op(in, "cross_entropy_grad") && in->nargs == 4;
        if (ce || ceg) {
            uint32_t x = a[ce ? 0 : 1], axes = class_axes(p, pg, x);
            if (!axes) continue;
            char who[160], as[48];
            check_buffer_desc(p, pg, x, who, sizeof who), check_axes_text(p, axes, as, sizeof as);
            return check_ifail(c, k, i, "vocab-ce: %s reads %s split along its classes over %s: each rank would take the softmax "
                               "of its piece of the vocabulary alone (the vocabulary-parallel form is vocab_ce_stats, all_gather, "
                               "vocab_ce)", ce ? "cross_entropy" : "cross_entropy_grad", who, as);
        }
        plan_status st = PLAN_OK;
        if (is_op(in, "vocab_ce") && in->nargs == 3) st = check_combine(c, k, i, false);
        else if (is_op(in, "vocab_ce_grad") && in->nargs == 5) st = check_combine(c, k, i, true);
        if (st) return st;
    }
    return PLAN_OK;
}
