/*
 * schedule.c: phase 3's order of a stage's program (handoff.c asks for each): what preserve.c
 * makes first (p3_begin), the units of the pipeline's schedule (pipeline.c) as preserve.c builds
 * each pass (p3_pass), with the interlaced operators' phases among them, then the epilogue
 * (p3_epilogue: the gradient synchronization's wait, the optimizer, shared parameters).
 *
 * Interlaced operators (a policy's "stage": "all"; layout.c's interlace decides where their
 * values live and in which phase each runs): every program holds their three phases at the same
 * place: before the first forward unit (the token embedding), before the first backward unit
 * (the LM head and its loss, forward and backward; with GPipe once after every forward pass, with
 * 1F1B per micro-batch in the steady state, pipeline.c's mid) and after the last
 * backward unit (the embedding's backward). A stage value they read is sent by its stage to every
 * other (the last stage's hidden states, stage 0's gradient of the embedding's output); what they
 * make for a stage goes into that reader's layout in one chain of collectives of all stages (the
 * embedding's partial sums all-reduced over pp, the hidden states' gradient likewise), kept per
 * micro-batch until the stage's pass reads it.
 */
#include "pipeline.h"
#include "preserve.h"

// Whether interlaced phase ph has operators.
static bool il_any(const builder *E, int ph) {
    for (int o = 0; E->v->ilphase && o < E->g->n_ops; o++)
        if (E->v->ilphase[o] == ph) return true;
    return false;
}

// One micro-batch of interlaced phase ph on this stage: the stage values its operators read,
// sent by the stage that holds them to every other (in tensor order, each stage's in turn);
// the operators; and each value they make that a stage reads, made in that reader's layout by
// every stage at once (the collective over pp that sums or gathers it) into its xbuf, which the
// stage's passes then read (its home where a stage reads it: P->home swaps between the two).
static void il_unit(builder *E, prog *P, int ph, int delta, bool last_mb) {
    const pcc_graph *g = E->g;
    const pcc_values *v = E->v;
    int *xbuf = P->il_xbuf[ph], *ihome = P->il_home[ph];
    E->delta = delta;
    P->n_cache = 0;
    E->phase = PLAN_PHASE_FWD;
    for (int t = 0; t < g->n_tensors; t++) {
        int s = v->tstage[t];
        if (s < 0 || !v->xil[t]) continue;
        bool read = false;
        for (int o = 0; o < g->n_ops && !read; o++)
            if (v->ilphase[o] == ph)
                for (int i = 0; i < g->ops[o].nin; i++) read |= g->ops[o].in[i] == t;
        if (!read) continue;
        E->phase = g->tensors[t].kind == PCC_T_GRAD ? PLAN_PHASE_BWD : PLAN_PHASE_FWD;
        if (P->stage != s && P->home[t] < 0) P->home[t] = p3_buf(E, P, t, v->home_sh[t], (uint32_t)E->M, 1, 0);
        int buf = p3_home(E, P, t);
        for (int d = 0; d < E->pp; d++) {
            if (d == s || (P->stage != s && P->stage != d)) continue;
            plan_insn *in = p3_insn(E, P, P->stage == s ? PLAN_I_SEND : PLAN_I_RECV, STREAM_MAIN, &buf, 1);
            in->a = PCC_AX_PP;
            in->b = P->stage == s ? d - s : s - d;
            in->t_s = p3_transfer_s(E, P, buf, in->b);
            if (P->stage != s) p3_forget(P, buf);
        }
    }
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (v->ilphase[o] != ph) continue;
        E->phase = op->phase == PCC_PHASE_BWD ? PLAN_PHASE_BWD : PLAN_PHASE_FWD;
        for (int i = 0; i < op->nout; i++)
            if (xbuf[op->out[i]] >= 0) P->home[op->out[i]] = ihome[op->out[i]];
        p3_emit_op(E, P, o, last_mb);
        for (int i = 0; i < op->nout; i++) {
            int t = op->out[i];
            if (xbuf[t] < 0) continue;
            ihome[t] = p3_home(E, P, t);
            p3_reshard_to(E, P, ihome[t], v->xsh[t], xbuf[t]);
            if (P->buf[xbuf[t]].mb_slots == (uint32_t)E->M) P->home[t] = xbuf[t]; // where a stage reads it
        }
    }
    p3_bucket_flush(E, P);
    P->n_cache = 0;
    E->phase = PLAN_PHASE_NONE;
}

// Whether an operator or a block copy of this stage reads tensor t.
static bool stage_reads(const builder *E, const prog *P, int t) {
    const pcc_graph *g = E->g;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->block >= 0 || op->phase == PCC_PHASE_OPT || E->v->ostage[o] != P->stage) continue;
        for (int i = 0; i < op->nin; i++)
            if (op->in[i] == t) return true;
    }
    for (int b = 0; b < g->n_blocks; b++) {
        const pcc_block *bl = &g->blocks[b];
        int fb = graph_block_family(g, b), lo = E->v->copy_lo[fb][P->stage], hi = E->v->copy_hi[fb][P->stage];
        if (hi <= lo) continue;
        for (int i = 0; i < bl->n_in; i++) // a carried input only where the first copy runs (block_range)
            if (bl->in[i].outer == t && (graph_carry_of(bl, bl->in[i].inner, true) < 0 || (bl->fwd >= 0 ? hi == (int)bl->repeat : lo == 0)))
                return true;
    }
    return false;
}

// Before interlaced phase ph's first micro-batch: the buffers its values for a stage go into
// (one slot per micro-batch where a stage reads them, else one).
static void il_begin(builder *E, prog *P, int ph) {
    const pcc_graph *g = E->g;
    const pcc_values *v = E->v;
    P->il_xbuf[ph] = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    P->il_home[ph] = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    for (int t = 0; t < g->n_tensors; t++) P->il_xbuf[ph][t] = P->il_home[ph][t] = -1;
    for (int o = 0; o < g->n_ops; o++)
        for (int i = 0; v->ilphase[o] == ph && i < g->ops[o].nout; i++) {
            int t = g->ops[o].out[i];
            if (v->has_xsh[t]) P->il_xbuf[ph][t] = p3_buf(E, P, t, v->xsh[t], stage_reads(E, P, t) ? (uint32_t)E->M : 1, 1, 0);
        }
}

// Interlaced phase ph (PCC_IL_PRE, _MID, _POST) on this stage, as every stage runs it: a loop over
// the micro-batches, the last one apart (its parameter gradients are final: synchronized as they
// are made). With 1F1B the middle phase goes per micro-batch instead (PCC_UNIT_MID, schedule).
static void interlaced(builder *E, prog *P, int ph) {
    if (!il_any(E, ph)) return;
    il_begin(E, P, ph);
    if (E->M > 1) {
        p3_loop(E, P, E->M - 1);
        il_unit(E, P, ph, 0, false);
        p3_loop_end(E, P);
    }
    il_unit(E, P, ph, E->M - 1, true);
    E->delta = 0;
}

// The device's units in the schedule's order (pipeline.c), each a pass of one micro-batch on one
// chunk, the plain schedules' in loops over micro-batches; interlaced operators before the first
// forward unit, before the first backward unit (GPipe's: after every forward) and after the last.
static void schedule(builder *E, prog *P, int d) {
    bool per_mb = E->s->schedule != PCC_PIPE_GPIPE && il_any(E, PCC_IL_MID); // 1F1B: PCC_UNIT_MID
    pcc_pipeline pl = {.pp = E->pp, .V = E->V, .M = E->M, .schedule = E->s->schedule, .mid = per_mb};
    pcc_unit *u;
    int n = pipeline_units(E->g->arena, &pl, d, &u);
    bool mid = per_mb;
    interlaced(E, P, PCC_IL_PRE);
    if (per_mb) il_begin(E, P, PCC_IL_MID);
    for (int i = 0; i < n; i++) {
        if (!mid && (u[i].kind == PCC_UNIT_BWD || (u[i].kind == PCC_UNIT_LOOP && i + 1 < n && u[i + 1].kind == PCC_UNIT_BWD))) {
            interlaced(E, P, PCC_IL_MID);
            mid = true;
        }
        switch (u[i].kind) {
        case PCC_UNIT_MID:
            il_unit(E, P, PCC_IL_MID, u[i].mb, u[i].last);
            break;
        case PCC_UNIT_LOOP: p3_loop(E, P, u[i].count); break;
        case PCC_UNIT_END: p3_loop_end(E, P); break;
        case PCC_UNIT_DEFERRED: p3_deferred_sends(E, P, u[i].chunk); break;
        case PCC_UNIT_FWD:
        case PCC_UNIT_BWD:
            if (E->V > 1) p3_chunk_enter(E, P, u[i].chunk);
            p3_pass(E, P, u[i].mb, u[i].kind == PCC_UNIT_BWD, u[i].last, u[i].part);
            break;
        }
    }
    interlaced(E, P, PCC_IL_POST);
}

void p3_program(builder *E, prog *P) {
    int d = P->stage; // the device (p3_begin enters each of its model chunks in turn)
    p3_begin(E, P);
    schedule(E, P, d);
    p3_epilogue(E, P);
}
