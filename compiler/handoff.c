/*
 * handoff.c: phase 3's entry (preserve): layout.c's decisions, a program per pipeline stage
 * (preserve.c builds each), and what phase 3 hands on from the finished builder: the plan's
 * META (the mesh, the schedule, the estimate, the FLOPs of a step as Megatron-LM counts them,
 * the notes), the stage programs and each rank's, the groups, and with --sync background the
 * parameters each stage's background program averages. A mesh axis of size 1 (cp without
 * context parallelism, tp2 without a 2-D tp group) leaves the plan's mesh here.
 */
#include "preserve.h"

#include <stdio.h>
#include <string.h>

static char *notes(builder *E) {
    const pcc_graph *g = E->g;
    size_t cap = 256, n = 0;
    char *s = arena_alloc(g->arena, cap);
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        pcc_letter l[PCC_MAX_LETTERS];
        int nl = op_letters(g, op, l);
        char line[512];
        int k = snprintf(line, sizeof line, "%s %s %s:", op->ptr, pcc_ops[op->kind].name, op->nout ? g->tensors[op->out[0]].name : "");
        static const char *const axn[PCC_AXES] = {"pp", "dp", "cp", "tp", "tp2"};
        for (int a = PCC_AX_DP; a < PCC_AXES; a++) {
            int li = E->s->letter[a][o];
            if (E->s->mesh[a] == 1) continue;
            if (li >= 0 && li < nl) k += snprintf(line + k, sizeof line - (size_t)k, " %s=%s(%s)", axn[a], l[li].name, g->dims[l[li].dim].name);
            else k += snprintf(line + k, sizeof line - (size_t)k, " %s=replicate", axn[a]);
        }
        int st = op->block >= 0 ? -1 : E->s->op_stage[o];
        if (st >= 0 && E->s->interlaced && E->s->interlaced[o]) k += snprintf(line + k, sizeof line - (size_t)k, " every stage (interlaced), pp=%s",
                                                                             E->s->letter[PCC_AX_PP][o] >= 0 && E->s->letter[PCC_AX_PP][o] < nl ? l[E->s->letter[PCC_AX_PP][o]].name : "replicate");
        else if (st >= 0 && E->V > 1) k += snprintf(line + k, sizeof line - (size_t)k, " chunk %d (stage %d)", st, st % E->pp);
        else if (st >= 0 && E->pp > 1) k += snprintf(line + k, sizeof line - (size_t)k, " stage %d", st);
        else if (op->block >= 0 && E->pp > 1) k += snprintf(line + k, sizeof line - (size_t)k, " block %s", g->blocks[op->block].name);
        if (E->s->recompute[o]) k += snprintf(line + k, sizeof line - (size_t)k, " recompute");
        snprintf(line + k, sizeof line - (size_t)k, " (%s)\n", E->s->cause[o] ? E->s->cause[o] : "template");
        s = arena_append(g->arena, s, &n, &cap, line);
    }
    if (E->s->config.late) // --auto's choice, not the options' (they record --prefetch none when asked)
        s = arena_append(g->arena, s, &n, &cap, "zero 3: --prefetch none, each layer's parameters gathered at its start (--auto: "
                                                "the prefetch's second gathered layer does not fit)\n");
    if (n > 0) s[n - 1] = 0; // no trailing newline
    return s;
}

// One step's FLOPs as Megatron-LM counts them (the formula of ../shared/data/
// megatron_sc21_a100.csv): the matrix products of the forward and backward passes and of the
// forward operators recomputed in the backward pass, over every micro-batch, summed over ranks.
static double model_flops(const builder *E) {
    const pcc_graph *g = E->g;
    double f = 0;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->phase == PCC_PHASE_OPT) continue;
        double mm = op_flops_matmul(g, op) * (double)op_copies(g, op);
        f += op->phase == PCC_PHASE_FWD && E->v->recomp[o] ? 2 * mm : mm;
    }
    return f * E->M;
}

// The background program's groups, made before phase 3 hands its groups on: one per set of
// replica axes in use, and their union (the continuous rounds' stop flag, which every rank of a
// stage's rounds must agree on). Returns the union's group.
static uint32_t background_groups(builder *E) {
    unsigned all = 0;
    for (int t = 0; t < E->g->n_tensors; t++)
        if (E->v->local[t]) all |= E->v->local[t], p3_group(E, E->v->local[t], STREAM_BG);
    if (all) p3_group(E, (int)all, STREAM_BG);
    return (uint32_t)p3_group(E, (int)all, STREAM_BG);
}

// The dense parameters a stage's background program averages (bgsync.c appends it when the plan
// is written): each one's home buffer there, its group of replicas and its costs.
static pcc_bg_param *background_params_of(builder *E, prog *P, int *n_out) {
    const pcc_graph *g = E->g;
    pcc_bg_param *ps = arena_alloc(g->arena, sizeof(pcc_bg_param) * (size_t)(g->n_tensors + 1));
    int n = 0;
    for (int t = 0; t < g->n_tensors; t++) {
        const pcc_tensor *T = &g->tensors[t];
        if (T->kind != PCC_T_PARAM || T->grad < 0 || !E->v->local[T->grad] || P->home[t] < 0) continue;
        int b = P->home[t];
        double bytes = (double)P->buf[b].bytes;
        pcc_group_shape sh = p3_axes_group(E, E->v->local[T->grad]);
        ps[n++] = (pcc_bg_param){(uint32_t)t, (uint32_t)b, (uint32_t)p3_group(E, E->v->local[T->grad], STREAM_BG), sh,
                                 (float)cost_collective_s(E->c, PCC_COLL_ALL_REDUCE, bytes, sh),
                                 p3_memory_s(E, P, 3.0 * bytes, b)};
    }
    *n_out = n;
    return ps;
}

// What the plan's META says of the strategy: the mesh, the schedule, the estimate, the FLOPs
// of a step and the notes (the builder adds the rest).
static void meta(builder *E, plan_meta *m) {
    const pcc_strategy *s = E->s;
    m->world = (uint32_t)(E->pp * E->dp * E->cp * E->tp);
    m->n_axes = PCC_AXES;
    static const char *const axn[PCC_AXES] = {"pp", "dp", "cp", "tp", "tp2"};
    for (int a = 0; a < PCC_AXES; a++) {
        m->mesh[a] = (uint32_t)s->mesh[a];
        snprintf(m->axis_names[a], sizeof m->axis_names[a], "%s", axn[a]);
    }
    m->micro_batches = (uint32_t)E->M;
    m->schedule = E->pp == 1 ? PLAN_SCHED_NONE : E->V > 1 ? PLAN_SCHED_1F1B_INTERLEAVED
                : s->schedule == PCC_PIPE_GPIPE ? PLAN_SCHED_GPIPE : PLAN_SCHED_1F1B;
    m->zero_stage = (uint32_t)s->zero;
    m->est_step_s = s->est_step_s;
    m->model_flops = model_flops(E);
    m->notes = notes(E);
}

// An axis of size 1 taken out of the plan's mesh: every shard and group of the axes after it
// moves down one (a plan without context parallelism is pp x dp x tp, as before cp existed).
static plan_shard shard_drop(plan_shard s, int axis) {
    for (int a = axis; a + 1 < PLAN_MAX_AXES; a++) s.map[a] = s.map[a + 1];
    s.map[PLAN_MAX_AXES - 1] = PLAN_SHARD_R;
    return s;
}

static void drop_axis(pcc_programs *out, int axis) {
    plan_meta *m = &out->meta;
    PCC_ASSERT(m->mesh[axis] == 1);
    for (uint32_t a = (uint32_t)axis; a + 1 < m->n_axes; a++) {
        m->mesh[a] = m->mesh[a + 1];
        memcpy(m->axis_names[a], m->axis_names[a + 1], sizeof m->axis_names[a]);
    }
    m->n_axes--;
    m->mesh[m->n_axes] = 0;
    memset(m->axis_names[m->n_axes], 0, sizeof m->axis_names[m->n_axes]);
    uint32_t low = (1u << axis) - 1;
    for (int i = 0; i < out->n_groups; i++) {
        uint32_t x = out->group_axes[i];
        PCC_ASSERT(!(x >> axis & 1u));
        out->group_axes[i] = (x & low) | (x >> (axis + 1)) << axis;
    }
    for (int p = 0; p < out->n; p++)
        for (int b = 0; b < out->prog[p].n_buf; b++) {
            PCC_ASSERT(out->prog[p].buf[b].shard.map[axis] == PLAN_SHARD_R);
            out->prog[p].buf[b].shard = shard_drop(out->prog[p].buf[b].shard, axis);
        }
}

// Phase 3's output: the stage programs, each rank's (its pp coordinate), the groups, and with
// --sync background the parameters each stage's background program averages.
static pcc_programs *hand_off(builder *E, prog *P) {
    const pcc_graph *g = E->g;
    pcc_programs *out = arena_alloc(g->arena, sizeof *out);
    meta(E, &out->meta);
    out->n = E->pp;
    out->prog = arena_alloc(g->arena, sizeof(pcc_program) * (size_t)E->pp);
    for (int st = 0; st < E->pp; st++) {
        pcc_program *q = &out->prog[st];
        const prog *Q = &P[st];
        *q = (pcc_program){.name = arena_printf(g->arena, "stage%d", st), .buf = Q->buf, .n_buf = Q->n_buf, .insn = Q->insn,
                           .n_insn = Q->n_insn, .args = Q->args, .n_args = Q->n_args, .attrs = Q->attrs, .n_attrs = Q->n_attrs,
                           .streams = Q->used_ring ? 3 : Q->used_sync ? 2 : 1};
    }
    if (E->v->bg) {
        out->bg = E->v->bg;
        out->bg_stop_group = background_groups(E);
        for (int st = 0; st < E->pp; st++) out->prog[st].bg = background_params_of(E, &P[st], &out->prog[st].n_bg);
    }
    out->n_groups = E->n_groups;
    out->group_axes = arena_alloc(g->arena, sizeof(uint32_t) * (size_t)(E->n_groups + 1));
    for (int i = 0; i < E->n_groups; i++) out->group_axes[i] = (uint32_t)E->groups[i][0];
    out->rank_program = arena_alloc(g->arena, sizeof(uint32_t) * (size_t)out->meta.world);
    for (uint32_t r = 0; r < out->meta.world; r++) out->rank_program[r] = r / (uint32_t)(E->dp * E->cp * E->tp); // pp varies slowest
    if (E->s->mesh[PCC_AX_TQ] == 1) drop_axis(out, PCC_AX_TQ);
    if (E->cp == 1) drop_axis(out, PCC_AX_CP);
    if (E->cp > 1 && E->s->config.cp_zigzag) out->zigzag = 2 * E->cp, out->zigzag_dim = E->s->seq_dim;
    return out;
}

/* ---- phase 3 ---- */

pcc_status preserve(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s, const pcc_preserve_opts *o,
                    pcc_programs **out) {
    *out = NULL;
    pcc_values *v = arena_alloc(g->arena, sizeof *v);
    pcc_status st = layout_values(g, c, s, o, v);
    if (st) return st;
    builder E = {.v = v, .g = g, .c = c, .all = c, .s = s, .pp = v->pp, .dp = v->dp, .cp = v->cp, .tp = v->tp, .M = v->M, .V = v->V, .ns = v->ns,
                 .bucket_cap = o->bucket_bytes};
    for (int k = 0; k < 2; k++) E.run_credit[k] = arena_alloc(g->arena, sizeof(double) * (size_t)(g->n_fwd_ops + 1));
    prog *P = arena_alloc(g->arena, sizeof(prog) * (size_t)E.pp);
    for (int d = 0; d < E.pp; d++) {
        P[d].stage = d;
        const pcc_cluster *view = cluster_stage_view(c, E.pp, d);
        E.c = view ? view : c; // stage d's instruction times on its group's devices and links
        p3_program(&E, &P[d]);
    }
    E.c = c;
    *out = hand_off(&E, P);
    (*out)->run_credit[0] = E.run_credit[0], (*out)->run_credit[1] = E.run_credit[1];
    return PCC_OK;
}
