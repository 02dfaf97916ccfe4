/*
 * check_loops.c: the verifier's loops. A loop is an instruction whose body is the next b
 * instructions, run count times with its variable (mb, layer, reverse_layer) set, or, for a
 * background loop, one round of a background program.
 *
 * Nesting (part of plan_validate): each body lies inside the program and inside the loop around
 * it, at most PLAN_MAX_LOOP_DEPTH deep.
 *
 * Expansion. The data-flow walk (check_flow.c) and the communication walk (check_comm.c) run
 * the program with its loops expanded, which would cost count iterations per loop. A loop over
 * micro-batches (or layers) touches buffer slots (var + delta) mod slots, so the pattern of
 * writes and reads repeats with period P, the least common multiple of the slot counts its body
 * uses through that variable (check_loop_period). After P iterations every slot the loop
 * touches has been written inside it, and the relative order of all last writes is the same
 * after iteration j as after j + P; every check of the data flow depends on that order only. So
 * a loop of count > 3P is checked by its first 2P iterations and its last ones, from the first
 * multiple of P at or after count - P (check_next_iteration): the same faults are found, and
 * the state after the loop is the one the full loop leaves.
 *
 * Background loops: see the section below.
 */
#include "checker.h"

#include <stdlib.h>
#include <string.h>

/* ---- nesting (plan_validate) ---- */

// Each loop's body lies inside the program and inside the loop around it; depth is bounded.
plan_status check_loop_nesting(const plan *p, uint32_t k, char *err, size_t err_n) {
    const plan_program *pg = &p->programs[k];
    uint32_t end[PLAN_MAX_LOOP_DEPTH];
    int depth = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        while (depth && i >= end[depth - 1]) depth--;
        const plan_insn *in = &pg->insns[i];
        if (in->kind != PLAN_I_LOOP) continue;
        uint64_t e = (uint64_t)i + 1 + (uint64_t)in->b;
        if (depth && e > end[depth - 1])
            return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "program %u: insn %u (loop): its body of %d runs past the end "
                               "of the enclosing loop's body (insn %u)", k, i, in->b, end[depth - 1]);
        if (e > pg->n_insns)
            return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "program %u: insn %u (loop): its body of %d runs past the end "
                               "of the program (%u insns)", k, i, in->b, pg->n_insns);
        if (depth == PLAN_MAX_LOOP_DEPTH)
            return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "program %u: insn %u (loop): loops nested deeper than %d", k, i,
                               PLAN_MAX_LOOP_DEPTH);
        end[depth++] = (uint32_t)e;
    }
    return PLAN_OK;
}

/* ---- expanding loops: the data-flow walk's periods ---- */

static uint64_t gcd64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// The period of loop i: the lcm of the slot counts its body touches through its variable (not
// through an inner loop of the same variable), capped at its count.
uint32_t check_loop_period(const plan_program *pg, uint32_t i) {
    const plan_insn *L = &pg->insns[i];
    bool mb = L->code == PLAN_LOOP_MB;
    uint64_t p = 1, count = plan_loop_trips(L);
    if (plan_loop_is_background(L->code)) return 1;
    for (uint32_t j = i + 1; j < i + 1 + (uint32_t)L->b;) {
        const plan_insn *in = &pg->insns[j];
        if (in->kind == PLAN_I_LOOP) {
            j += (in->code == PLAN_LOOP_MB) == mb ? 1 + (uint32_t)in->b : 1;
            continue;
        }
        for (uint32_t a = 0; a < in->nargs; a++) {
            const plan_buffer *bf = &pg->buffers[pg->args[in->args + a]];
            uint64_t s = mb ? bf->mb_slots : bf->layer_slots;
            p = p / gcd64(p, s) * s;
            if (p >= count) return (uint32_t)count;
        }
        j++;
    }
    return (uint32_t)p;
}

// The iteration after j of a loop of `count` with period p: all of them when count <= 3p; else
// 0..2p-1, then from the first multiple of p at or after count - p to the end.
uint64_t check_next_iteration(uint64_t j, uint64_t count, uint64_t p) {
    if (count <= 3 * p || j + 1 != 2 * p) return j + 1;
    return (count - p + p - 1) / p * p;
}

/* ---- background loops ----
 *
 * A background loop (PLAN_LOOP_BACKGROUND*) is a program that runs beside the steps, on its
 * own thread or stream, at times the runtime picks; so it must touch nothing the foreground
 * relies on except the params it synchronizes: it is at the top level and holds no loop; all
 * its instructions are on one stream that nothing else uses; it neither sends, receives,
 * records nor waits; its collectives are on groups that only background bodies use; the
 * buffers it uses other than persistent params overlap no buffer used outside it; and a
 * continuous one (count 0) ends with its stop flag: an in-place all_reduce of a 4-byte f32
 * scratch buffer, which the runtime fills with "this rank's foreground is done". */

// bg[i]: the background loop instruction i is in (PLAN_NONE: none); -1 on a fault.
static plan_status background_map(checker *c, uint32_t k, uint32_t *bg) {
    const plan_program *pg = &c->p->programs[k];
    uint32_t end = 0, cur = PLAN_NONE, seen = PLAN_NONE, depth_end[PLAN_MAX_LOOP_DEPTH];
    int depth = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        while (depth && i >= depth_end[depth - 1]) depth--;
        if (cur != PLAN_NONE && i >= end) cur = PLAN_NONE;
        const plan_insn *in = &pg->insns[i];
        bg[i] = cur;
        if (in->kind != PLAN_I_LOOP) continue;
        if (plan_loop_is_background(in->code) && depth)
            return check_ifail(c, k, i, "a background loop inside another loop: a background round runs outside the step's loops");
        if (cur != PLAN_NONE) return check_ifail(c, k, i, "a loop inside background loop %u: a round's body holds no loop", cur);
        if (plan_loop_is_background(in->code) && seen != PLAN_NONE)
            return check_ifail(c, k, i, "a second background loop (the first is insn %u): a program has one background round", seen);
        if (plan_loop_is_background(in->code)) cur = seen = i, end = i + 1 + (uint32_t)in->b;
        depth_end[depth++] = i + 1 + (uint32_t)in->b;
    }
    return PLAN_OK;
}

static plan_status check_background_insn(checker *c, uint32_t k, uint32_t i, const uint32_t *bg, const bool *fg_group) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i], *L = &pg->insns[bg[i]];
    if (in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV || in->kind == PLAN_I_RECORD || in->kind == PLAN_I_WAIT)
        return check_ifail(c, k, i, "in background loop %u: a background round neither sends, receives, records nor waits", bg[i]);
    if (in->stream != pg->insns[bg[i] + 1].stream)
        return check_ifail(c, k, i, "in background loop %u: on stream %u, but the round runs on stream %u", bg[i], in->stream,
                           pg->insns[bg[i] + 1].stream);
    if (in->kind == PLAN_I_COLL && fg_group[in->a])
        return check_ifail(c, k, i, "in background loop %u: group %d is also used by the foreground: a background round needs a communicator of its own",
                           bg[i], in->a);
    if (L->a == 0 && i == bg[i] + (uint32_t)L->b) {
        uint32_t b = in->nargs ? pg->args[in->args] : PLAN_NONE;
        const plan_insn *fill = &pg->insns[i - 1];
        if (in->kind != PLAN_I_COLL || in->code != PLAN_COLL_ALL_REDUCE || in->nargs != 2 || pg->args[in->args + 1] != b ||
            pg->buffers[b].tensor != PLAN_NONE || pg->buffers[b].dtype != 0 || pg->buffers[b].bytes != 4 || L->b < 2 ||
            fill->kind != PLAN_I_COMPUTE || strcmp(plan_op_name(fill->code), "fill") || fill->nargs != 1 || pg->args[fill->args] != b)
            return check_ifail(c, k, i, "continuous background loop %u must end with its stop flag: a fill of a 4-byte f32 scratch buffer, then an in-place all_reduce of it",
                               bg[i]);
    }
    return PLAN_OK;
}

// Buffer b's arena bytes [lo, hi) over all its slots.
static void buffer_extent(const plan_buffer *bf, uint64_t *lo, uint64_t *hi) {
    *lo = bf->offset;
    *hi = bf->offset + bf->bytes + (uint64_t)(bf->mb_slots - 1) * bf->mb_stride + (uint64_t)(bf->layer_slots - 1) * bf->layer_stride;
}

static bool is_param_home(const plan *p, const plan_buffer *bf) {
    return (bf->flags & PLAN_BUF_PERSIST) && bf->tensor != PLAN_NONE && p->tensors[bf->tensor].kind == PLAN_T_PARAM;
}

static plan_status check_background_memory(checker *c, uint32_t k, const uint32_t *bg) {
    const plan_program *pg = &c->p->programs[k];
    uint8_t *use = calloc((size_t)pg->n_buffers + 1, 1); // bit 0: foreground, bit 1: background
    if (!use) return check_pfail(c, k, "out of memory");
    for (uint32_t i = 0; i < pg->n_insns; i++)
        for (uint32_t a = 0; pg->insns[i].kind != PLAN_I_LOOP && a < pg->insns[i].nargs; a++)
            use[pg->args[pg->insns[i].args + a]] |= bg[i] == PLAN_NONE ? 1 : 2;
    plan_status st = PLAN_OK;
    for (uint32_t b = 0; b < pg->n_buffers && !st; b++) {
        if (!(use[b] & 2) || is_param_home(c->p, &pg->buffers[b])) continue;
        uint64_t lo, hi, lo2, hi2;
        buffer_extent(&pg->buffers[b], &lo, &hi);
        for (uint32_t o = 0; o < pg->n_buffers && !st; o++) {
            if (o == b || !(use[o] & 1)) continue;
            buffer_extent(&pg->buffers[o], &lo2, &hi2);
            if (lo < hi2 && lo2 < hi)
                st = check_bfail(c, k, b, "used by a background round, overlaps buffer %u, which the foreground uses (arena bytes %llu..%llu): the two run at the same time",
                                 o, (unsigned long long)(lo > lo2 ? lo : lo2), (unsigned long long)((hi < hi2 ? hi : hi2) - 1));
        }
    }
    free(use);
    return st;
}

plan_status check_background(checker *c, uint32_t k) {
    const plan_program *pg = &c->p->programs[k];
    uint32_t *bg = malloc(((size_t)pg->n_insns + 1) * sizeof *bg);
    bool *fg_group = calloc((size_t)c->p->n_groups + 1, sizeof *fg_group);
    bool *fg_stream = calloc(256, sizeof *fg_stream), any = false;
    plan_status st = !bg || !fg_group || !fg_stream ? check_pfail(c, k, "out of memory") : background_map(c, k, bg);
    for (uint32_t i = 0; !st && i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        any |= bg[i] != PLAN_NONE;
        if (bg[i] != PLAN_NONE || in->kind == PLAN_I_LOOP) continue;
        fg_stream[in->stream] = true;
        if (in->kind == PLAN_I_COLL) fg_group[in->a] = true;
    }
    for (uint32_t i = 0; !st && any && i < pg->n_insns; i++) {
        if (bg[i] == PLAN_NONE) continue;
        if (i == bg[i] + 1 && fg_stream[pg->insns[i].stream])
            st = check_ifail(c, k, i, "background loop %u runs on stream %u, which the foreground uses too: a round needs a stream of its own",
                             bg[i], pg->insns[i].stream);
        if (!st) st = check_background_insn(c, k, i, bg, fg_group);
    }
    if (!st && any) st = check_background_memory(c, k, bg);
    free(bg), free(fg_group), free(fg_stream);
    return st;
}
