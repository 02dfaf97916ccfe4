/*
 * emit.c: the emitter: the plan, written from phase 3's programs once the memory planner has
 * placed their buffers.
 *
 * emit_plan assembles the plan struct (runtime/plan/plan.h) that plan_write encodes: META (what phase
 * 3 says of the mesh, schedule, estimate, FLOPs and notes, plus the compiler, model, options and
 * their hashes, the peak and the device's FLOP/s), the tensor table (names, shapes, copies,
 * initializers and data sources), the communicator groups, every rank's coordinates and program,
 * and the programs (buffers at their offsets, instructions, arguments, attributes, streams and
 * events). With --sync background it has bgsync.c append each program's background round (its
 * buffers past the foreground's arena, state tensors, a stream) and takes the peak again.
 *
 * It writes both kinds of programs alike: preserve.c's (one per pipeline stage) and burst.c's
 * (one per set of ranks that burst parallelism runs alike). It decides nothing: whether the plan
 * is sound is plan_check's (main.c runs check_plan next), and whether it fits the device's
 * memory driver.c's (driver_fit_done).
 *
 * The two program builders also share its helpers for a program being built: an instruction
 * appended (emit_insn) and operator attributes interned (emit_attrs), as the plan holds them;
 * dropout along a sequence in zigzag order marked with its dimension and chunks
 * (emit_zigzag_dropout), so that the kernels draw the mask by logical positions.
 */
#include "plancc.h"

#include <stdlib.h>
#include <string.h>

/* ---- writing the plan ---- */

static const char *emit_strdup(plan *p, const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = plan_alloc(p, n);
    PCC_ASSERT(d);
    memcpy(d, s, n);
    return d;
}

static void *emit_memdup(plan *p, const void *src, size_t n) {
    void *d = plan_alloc(p, n ? n : 1);
    PCC_ASSERT(d);
    if (n) memcpy(d, src, n);
    return d;
}

// A param's initializer or an input's data source, as the plan carries it (other kinds: none).
// The pcc enums and the plan's differ by the plan's NONE; mapped by name, not by arithmetic.
static void fill_source(const pcc_tensor *T, plan_tensor *pt) {
    static const uint8_t init[] = {[PCC_INIT_ZEROS] = PLAN_INIT_ZEROS, [PCC_INIT_ONES] = PLAN_INIT_ONES,
                                   [PCC_INIT_NORMAL] = PLAN_INIT_NORMAL, [PCC_INIT_UNIFORM] = PLAN_INIT_UNIFORM};
    static const uint8_t data[PCC_DATA_KIND_COUNT] = {
        [PCC_DATA_NORMAL] = PLAN_DATA_NORMAL,   [PCC_DATA_BINARY] = PLAN_DATA_BINARY,
        [PCC_DATA_RANDINT] = PLAN_DATA_RANDINT, [PCC_DATA_TOKENS] = PLAN_DATA_TOKENS,
        [PCC_DATA_TARGETS] = PLAN_DATA_TARGETS, [PCC_DATA_ARANGE] = PLAN_DATA_ARANGE,
        [PCC_DATA_TEACHER] = PLAN_DATA_TEACHER};
    if (T->kind == PCC_T_PARAM) {
        PCC_ASSERT((unsigned)T->init.kind < sizeof init);
        pt->source = init[T->init.kind];
        if (pt->source == PLAN_INIT_NORMAL || pt->source == PLAN_INIT_UNIFORM) pt->a = T->init.a, pt->b = T->init.b;
    } else if (T->kind == PCC_T_INPUT) {
        PCC_ASSERT((unsigned)T->data.kind < PCC_DATA_KIND_COUNT);
        pt->source = data[T->data.kind];
        if (pt->source == PLAN_DATA_TEACHER) pt->a = T->data.scale, pt->b = T->data.bias;
        else if (plan_source_args(PLAN_T_INPUT, pt->source)) pt->a = (double)T->data.high;
    }
}

static const pcc_graph *name_order_g; // the graph by_name sorts the tensors of

static int by_name(const void *a, const void *b) {
    return strcmp(name_order_g->tensors[*(const int *)a].name, name_order_g->tensors[*(const int *)b].name);
}

// Per tensor: whether another tensor has its name (blocks are scopes: a Swin model's stages each
// have an "ln1_g", and so their gradients and optimizer state).
static bool *shared_names(const pcc_graph *g) {
    bool *dup = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_tensors + 1));
    int *ix = arena_alloc(g->arena, sizeof(int) * (size_t)(g->n_tensors + 1));
    for (int t = 0; t < g->n_tensors; t++) ix[t] = t;
    name_order_g = g;
    qsort(ix, (size_t)g->n_tensors, sizeof(int), by_name);
    for (int i = 1; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[ix[i - 1]].name, g->tensors[ix[i]].name)) dup[ix[i - 1]] = dup[ix[i]] = true;
    return dup;
}

// A block's tensor whose name another tensor has too is named in the plan with its block's
// ("stage1.ln1_g"), so that the parameters and optimizer state planrun's files hold (--save,
// --load, --compare) have a name each. Inputs along the sequence in zigzag order (pr->zigzag
// chunks) say so: planrun feeds them so; and so do constants along it (rotary embeddings' cos
// and sin tables), which planrun fills and loads by logical position (search.c's zigzag_blocker
// lets no other parameter carry the sequence, nor a constant carry it twice).
static void emit_tensors(plan *p, const pcc_graph *g, const pcc_programs *pr) {
    p->n_tensors = (uint32_t)g->n_tensors;
    p->tensors = plan_alloc(p, sizeof(plan_tensor) * (size_t)(g->n_tensors + 1));
    PCC_ASSERT(p->tensors);
    const bool *dup = shared_names(g);
    for (int t = 0; t < g->n_tensors; t++) {
        const pcc_tensor *T = &g->tensors[t];
        plan_tensor *pt = &p->tensors[t];
        bool qualify = dup[t] && T->block >= 0;
        pt->name = emit_strdup(p, qualify ? arena_printf(g->arena, "%s.%s", g->blocks[graph_block_family(g, T->block)].name, T->name)
                                          : T->name);
        pt->dtype = (uint8_t)T->dtype, pt->kind = (uint8_t)T->kind, pt->rank = (uint8_t)T->rank;
        pt->copies = (uint32_t)tensor_copies(g, T);
        for (int i = 0; i < T->rank; i++) pt->shape[i] = g->dims[T->dims[i]].size;
        fill_source(T, pt);
        bool along = T->kind == PCC_T_INPUT || (T->kind == PCC_T_PARAM && T->frozen);
        for (int i = 0; pr->zigzag && along && i < T->rank; i++)
            if (T->dims[i] == pr->zigzag_dim) pt->zigzag = (uint16_t)pr->zigzag, pt->zigzag_dim = (uint8_t)i;
    }
}

static plan_buffer *emit_buffers(plan *p, const pcc_mbuf *buf, int n_buf) {
    plan_buffer *out = plan_alloc(p, sizeof(plan_buffer) * (size_t)(n_buf + 1));
    PCC_ASSERT(out);
    for (int b = 0; b < n_buf; b++) {
        const pcc_mbuf *eb = &buf[b];
        plan_buffer *pb = &out[b];
        pb->tensor = eb->tensor, pb->dtype = eb->dtype, pb->shard = eb->shard;
        pb->offset = eb->offset, pb->bytes = eb->bytes;
        pb->mb_slots = eb->mb_slots, pb->layer_slots = eb->layer_slots, pb->layer_base = eb->layer_base;
        pb->flags = eb->persist ? PLAN_BUF_PERSIST : 0;
        pb->mb_stride = eb->mb_stride, pb->layer_stride = eb->layer_stride;
    }
    return out;
}

static void emit_program(plan *p, plan_program *pr, const char *name, uint64_t arena, int streams, const pcc_mbuf *buf, int n_buf,
                  const plan_insn *insn, int n_insn, const uint32_t *args, int n_args, const plan_attrs *attrs, int n_attrs) {
    pr->name = emit_strdup(p, name);
    pr->arena_bytes = arena;
    pr->n_streams = (uint32_t)streams;
    for (int s = 1; s < streams; s++) pr->priority[s] = -1; // communication ahead of compute
    uint32_t used = plan_insns_events(insn, (uint32_t)n_insn); // 3 where ZeRO-3 gathers ahead (preserve.c's EV_PREFETCH)
    pr->n_events = streams > 1 && used < 2 ? 2 : used;
    pr->n_buffers = (uint32_t)n_buf;
    pr->buffers = emit_buffers(p, buf, n_buf);
    pr->n_insns = (uint32_t)n_insn;
    pr->insns = emit_memdup(p, insn, sizeof(plan_insn) * (size_t)n_insn);
    pr->n_args = (uint32_t)n_args;
    pr->args = emit_memdup(p, args, sizeof(uint32_t) * (size_t)n_args);
    pr->n_attrs = (uint32_t)n_attrs;
    pr->attrs = emit_memdup(p, attrs, sizeof(plan_attrs) * (size_t)n_attrs);
}

// META: phase 3's part as it is, and what the emitter knows.
static void emit_meta(plan *p, const pcc_graph *g, const pcc_cluster *c, const pcc_programs *pr, const pcc_emit_opts *o,
                      double peak) {
    plan_meta *m = &p->meta;
    *m = pr->meta;
    snprintf(m->compiler, sizeof m->compiler, "plancc %s", PCC_VERSION);
    m->model_name = emit_strdup(p, g->name);
    m->options = emit_strdup(p, o->options);
    m->model_hash = o->model_hash, m->cluster_hash = o->cluster_hash;
    m->options_hash = plan_fnv1a64(o->options, strlen(o->options));
    m->est_peak_bytes = peak;
    m->device_peak_flops = cost_peak_flops(c, g->dtype, true); // as cost_compute_s runs matrix products
    m->loss = (uint32_t)g->loss;
    m->notes = emit_strdup(p, pr->meta.notes);
}

// The groups, and every rank's coordinates on the mesh (the last axis varying fastest) and program.
static void emit_ranks(plan *p, const pcc_programs *pr) {
    const plan_meta *m = &p->meta;
    p->n_groups = (uint32_t)pr->n_groups;
    p->groups = plan_alloc(p, sizeof(plan_group) * (size_t)(pr->n_groups + 1));
    for (int i = 0; i < pr->n_groups; i++) p->groups[i].axes = pr->group_axes[i];
    p->n_ranks = m->world;
    p->ranks = plan_alloc(p, sizeof(plan_rank) * m->world);
    for (uint32_t r = 0; r < m->world; r++) {
        uint32_t x = r;
        for (int a = (int)m->n_axes - 1; a >= 0; a--) p->ranks[r].coord[a] = x % m->mesh[a], x /= m->mesh[a];
        p->ranks[r].program = pr->rank_program[r];
    }
}

void emit_plan(const pcc_graph *g, const pcc_cluster *c, const pcc_programs *pr, const pcc_emit_opts *o, pcc_emitted *e) {
    memset(e, 0, sizeof *e);
    uint64_t peak = 0;
    for (int k = 0; k < pr->n; k++) {
        if (pr->prog[k].arena > peak) peak = pr->prog[k].arena, e->peak_stage = k;
        if ((double)pr->prog[k].live_bound > e->live_bound_bytes) e->live_bound_bytes = (double)pr->prog[k].live_bound;
    }
    e->peak_bytes = (double)peak;
    plan *p = calloc(1, sizeof *p);
    PCC_ASSERT(p);
    e->p = p;
    emit_meta(p, g, c, pr, o, (double)peak);
    emit_tensors(p, g, pr);
    emit_ranks(p, pr);
    p->n_programs = (uint32_t)pr->n;
    p->programs = plan_alloc(p, sizeof(plan_program) * (size_t)pr->n);
    for (int k = 0; k < pr->n; k++) {
        const pcc_program *q = &pr->prog[k];
        emit_program(p, &p->programs[k], q->name, q->arena, q->streams, q->buf, q->n_buf, q->insn, q->n_insn, q->args, q->n_args,
                     q->attrs, q->n_attrs);
    }
    if (!pr->bg) return;
    for (int k = 0; k < pr->n; k++)
        bgsync_emit(p, &p->programs[k], pr->bg, pr->prog[k].bg, pr->prog[k].n_bg, pr->bg_stop_group, c);
    for (int k = 0; k < pr->n; k++)
        if ((double)p->programs[k].arena_bytes > e->peak_bytes) e->peak_bytes = (double)p->programs[k].arena_bytes, e->peak_stage = k;
    p->meta.est_peak_bytes = e->peak_bytes;
}

/* ---- a program being built (preserve.c, burst.c) ---- */

plan_insn *emit_insn(pcc_arena *ar, plan_insn **insns, int *n_insn, int *cap_insn, uint32_t **argv, int *n_args,
                     int *cap_args, plan_insn_kind k, int stream, plan_phase phase, const int *args, int nargs) {
    plan_insn *in = VEC_PUSH(ar, *insns, *n_insn, *cap_insn);
    in->kind = (uint8_t)k;
    in->stream = (uint8_t)stream;
    in->phase = (uint8_t)(k <= PLAN_I_COPY ? phase : PLAN_PHASE_NONE);
    in->nargs = (uint16_t)nargs;
    in->args = (uint32_t)*n_args;
    in->attrs = PLAN_NONE;
    for (int i = 0; i < nargs; i++) *VEC_PUSH(ar, *argv, *n_args, *cap_args) = (uint32_t)args[i];
    return in;
}

uint32_t emit_attrs(pcc_arena *ar, plan_attrs **v, int *n, int *cap, const pcc_op *op, bool accumulate) {
    plan_attrs a;
    memset(&a, 0, sizeof a);
    const pcc_attrs *s = &op->attrs;
    a.f[PLAN_AF_SCALE] = s->scale, a.f[PLAN_AF_EPS] = s->eps, a.f[PLAN_AF_P] = s->p, a.f[PLAN_AF_LR] = s->lr;
    a.f[PLAN_AF_BETA1] = s->beta1, a.f[PLAN_AF_BETA2] = s->beta2, a.f[PLAN_AF_WEIGHT_DECAY] = s->weight_decay;
    a.f[PLAN_AF_MOMENTUM] = s->momentum;
    a.i[PLAN_AI_SEED] = s->seed, a.i[PLAN_AI_AXIS] = s->axis, a.i[PLAN_AI_START] = s->start, a.i[PLAN_AI_END] = s->end;
    a.i[PLAN_AI_CAUSAL] = s->causal, a.i[PLAN_AI_ACCUMULATE] = op->accumulate || accumulate;
    a.i[PLAN_AI_GHOST] = s->ghost_batch, a.i[PLAN_AI_MODE] = s->mode;
    for (int i = 0; i < PLAN_MAX_RANK; i++) a.perm[i] = s->perm[i];
    for (int i = 0; i < 2; i++) a.win[i] = s->kernel[i], a.win[2 + i] = s->stride[i], a.win[4 + i] = s->pad[i];
    return emit_attrs_add(ar, v, n, cap, &a);
}

// op is a copy about to go through emit_attrs; sdim indexes g->dims. The attrs are
// runtime/PLAN_FORMAT.md's i[1] and i[3] on dropout: the kernels then key the mask by logical
// positions, as one device does. Other ops, and dropout without sdim, are left as they are.
void emit_zigzag_dropout(const pcc_graph *g, pcc_op *op, int sdim, int chunks) {
    if (op->kind != PCC_OP_DROPOUT && op->kind != PCC_OP_DROPOUT_GRAD) return;
    const pcc_tensor *T = &g->tensors[op->in[0]];
    for (int i = 0; i < T->rank; i++)
        if (T->dims[i] == sdim) op->attrs.axis = i, op->attrs.end = chunks;
}

uint32_t emit_attrs_add(pcc_arena *ar, plan_attrs **v, int *n, int *cap, const plan_attrs *a) {
    plan_attrs zero;
    memset(&zero, 0, sizeof zero);
    if (memcmp(a, &zero, sizeof *a) == 0) return PLAN_NONE;
    for (int i = 0; i < *n; i++)
        if (memcmp(&(*v)[i], a, sizeof *a) == 0) return (uint32_t)i;
    *VEC_PUSH(ar, *v, *n, *cap) = *a;
    return (uint32_t)(*n - 1);
}
