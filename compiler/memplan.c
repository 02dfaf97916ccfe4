/*
 * memplan.c: the memory planner, and the parts of a plan that every emitter writes alike.
 *
 * The planner takes a program's buffers and instructions and gives every buffer a static offset
 * in the program's arena. Every buffer gets an interval of instruction indices in which it is
 * live (the whole program for those marked `whole`; a loop's whole span for a buffer that
 * carries data from one iteration to the next; for a buffer sent or received, the whole group of
 * sends and receives it is issued in, whose receives may land before its sends have read);
 * buffers are placed at the lowest offset free
 * over their interval, largest first. The arena is the exact peak of the plan; plan_check proves
 * that no two live buffers overlap.
 *
 * Both emitters use it: emit.c (one program per pipeline stage) and burst.c (one program per
 * set of ranks that burst parallelism runs alike).
 */
#include "plancc.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 256u

typedef struct mprog {
    pcc_mbuf *buf;
    int n_buf;
    const plan_insn *insn;
    int n_insn;
    const uint32_t *args;
    const plan_attrs *attrs;
} mprog;

static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }


// Send/recv groups. A maximal run of sends and receives on one stream, in execution order, is
// issued as one group (PLAN_FORMAT.md): a loop boundary does not end it, only another instruction
// of that stream does, and its receives may land before its sends have read their buffers. So
// every buffer of a group is live over the whole group: its [first, last] takes in the run; and
// a run that a loop boundary may join to another iteration's (or to the code before or after the
// loop) makes its buffers not tight, so that they live over the whole loop.
static void p2p_groups(const mprog *P, const int *end, bool *one_loop) {
    int n = P->n_insn;
    bool *boundary = calloc((size_t)n + 1, 1); // a loop instruction, or the last of a loop body
    for (int i = 0; i < n; i++)
        if (P->insn[i].kind == PLAN_I_LOOP) boundary[i] = boundary[end[i]] = true;
    for (int s = 0; s < PLAN_MAX_STREAMS; s++) {
        int rs = -1, re = -1, prev = -1; // the open run, and the stream's last other instruction
        for (int i = 0; i <= n; i++) {
            const plan_insn *in = i < n ? &P->insn[i] : NULL;
            if (in && (in->stream != s || in->kind == PLAN_I_LOOP)) continue;
            if (in && (in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV)) {
                if (rs < 0) rs = i;
                re = i;
                continue;
            }
            bool crossing = false;
            for (int j = prev + 1; rs >= 0 && j < i; j++) crossing |= boundary[j];
            for (int j = rs; rs >= 0 && j <= re; j++) {
                const plan_insn *x = &P->insn[j];
                if (x->stream != s || (x->kind != PLAN_I_SEND && x->kind != PLAN_I_RECV)) continue;
                int b = (int)P->args[x->args];
                if (P->buf[b].first > rs) P->buf[b].first = rs;
                if (P->buf[b].last < re) P->buf[b].last = re;
                if (crossing) one_loop[b] = false;
            }
            rs = re = -1, prev = i;
        }
    }
    free(boundary);
}

// Liveness: [first, last] use, widened to the whole span of the outermost loop around any use
// unless the buffer lives and dies within one iteration (one slot, written before it is read
// in the innermost loop that holds all its uses).
static void liveness(mprog *P) {
    int n = P->n_insn;
    int *outer = malloc(sizeof(int) * (size_t)(n + 1)), *inner = malloc(sizeof(int) * (size_t)(n + 1));
    int *end = malloc(sizeof(int) * (size_t)(n + 1));
    int stack[PLAN_MAX_LOOP_DEPTH + 1], depth = 0;
    for (int i = 0; i < n; i++) {
        while (depth > 0 && i > end[stack[depth - 1]]) depth--;
        outer[i] = depth ? stack[0] : -1;
        inner[i] = depth ? stack[depth - 1] : -1;
        if (P->insn[i].kind == PLAN_I_LOOP) {
            end[i] = i + P->insn[i].b;
            stack[depth++] = i;
        } else {
            end[i] = i;
        }
    }
    bool *first_is_write = calloc((size_t)P->n_buf + 1, 1);
    int *loop_of = malloc(sizeof(int) * (size_t)(P->n_buf + 1));
    bool *one_loop = malloc((size_t)P->n_buf + 1);
    for (int b = 0; b < P->n_buf; b++) P->buf[b].first = P->buf[b].last = -1, loop_of[b] = -2, one_loop[b] = true;
    // What plan_arg_role reads (it takes the program as const; its fields are not).
    const plan_program view = {.insns = (plan_insn *)P->insn, .args = (uint32_t *)P->args, .attrs = (plan_attrs *)P->attrs};
    for (int i = 0; i < n; i++) {
        const plan_insn *in = &P->insn[i];
        for (int k = 0; k < in->nargs; k++) {
            int b = (int)P->args[in->args + k];
            pcc_mbuf *eb = &P->buf[b];
            if (eb->first < 0) {
                eb->first = i;
                first_is_write[b] = plan_arg_role(&view, in, (uint32_t)k) == PLAN_ARG_WRITE; // written, not read
            }
            eb->last = i;
            if (loop_of[b] == -2) loop_of[b] = inner[i];
            else if (loop_of[b] != inner[i]) one_loop[b] = false;
        }
    }
    p2p_groups(P, end, one_loop);
    for (int b = 0; b < P->n_buf; b++) {
        pcc_mbuf *eb = &P->buf[b];
        if (eb->first < 0) { // never used: no space
            eb->first = eb->last = 0;
            eb->extent = 0;
            continue;
        }
        if (eb->whole) {
            eb->first = 0, eb->last = n - 1;
            continue;
        }
        bool tight = one_loop[b] && first_is_write[b] && eb->mb_slots == 1 && eb->layer_slots == 1;
        if (!tight) {
            int lo = outer[eb->first], hi = outer[eb->last];
            if (lo >= 0) eb->first = lo;
            if (hi >= 0 && end[hi] > eb->last) eb->last = end[hi];
        }
    }
    free(outer), free(inner), free(end), free(first_is_write), free(loop_of), free(one_loop);
}

typedef struct span {
    uint64_t lo, hi;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static const mprog *g_order_prog; // the program place_cmp sorts the buffers of
static int place_cmp(const void *a, const void *b) {
    const pcc_mbuf *x = &g_order_prog->buf[*(const int *)a], *y = &g_order_prog->buf[*(const int *)b];
    if (x->whole != y->whole) return x->whole ? -1 : 1;
    if (x->extent != y->extent) return x->extent > y->extent ? -1 : 1;
    if (x->first != y->first) return x->first - y->first;
    return *(const int *)a - *(const int *)b;
}

// A contiguous bucket is one extent, its first buffer's: the buffers back to back (each at the
// end of the one before, so that one collective can cover them), one slot of all of them per
// block copy (Megatron-LM's contiguous gradient buffer). The others' extents are 0.
static int bucket_next(const mprog *P, int b) { return P->buf[b].in_bucket ? P->buf[b].bucket_next : -1; }

static void bucket_extents(mprog *P) {
    bool *follows = calloc((size_t)P->n_buf + 1, 1);
    for (int b = 0; b < P->n_buf; b++)
        if (bucket_next(P, b) >= 0) follows[bucket_next(P, b)] = true;
    for (int b = 0; b < P->n_buf; b++) {
        pcc_mbuf *eb = &P->buf[b];
        if (!eb->in_bucket || follows[b]) continue;
        uint64_t total = 0;
        for (int j = b; j >= 0; j = bucket_next(P, j)) total += P->buf[j].bytes;
        uint64_t slot = align_up(total);
        for (int j = b; j >= 0; j = bucket_next(P, j)) {
            P->buf[j].layer_stride = P->buf[j].layer_slots > 1 ? slot : 0;
            P->buf[j].extent = j == b ? slot * P->buf[j].layer_slots : 0;
        }
    }
    free(follows);
}

// Places the buffers; returns the arena size and the largest sum live at one instruction.
static uint64_t memplan(mprog *P, uint64_t *live_bound) {
    for (int b = 0; b < P->n_buf; b++) {
        pcc_mbuf *eb = &P->buf[b];
        uint64_t slot = align_up(eb->bytes);
        eb->mb_stride = eb->mb_slots > 1 ? slot : 0;
        eb->layer_stride = eb->layer_slots > 1 ? slot * eb->mb_slots : 0;
        eb->extent = slot * eb->mb_slots * eb->layer_slots;
    }
    liveness(P);
    bucket_extents(P);
    int *order = malloc(sizeof(int) * (size_t)(P->n_buf + 1));
    for (int b = 0; b < P->n_buf; b++) order[b] = b;
    g_order_prog = P;
    qsort(order, (size_t)P->n_buf, sizeof(int), place_cmp);
    span *busy = malloc(sizeof(span) * (size_t)(P->n_buf + 1));
    bool *placed = calloc((size_t)P->n_buf + 1, 1);
    uint64_t arena = 0;
    for (int k = 0; k < P->n_buf; k++) {
        pcc_mbuf *eb = &P->buf[order[k]];
        if (eb->in_bucket && eb->extent == 0) { // placed with the first of its bucket
            placed[order[k]] = true;
            continue;
        }
        if (eb->extent == 0) {
            eb->offset = 0;
            placed[order[k]] = true;
            continue;
        }
        int nb = 0;
        for (int j = 0; j < P->n_buf; j++) {
            const pcc_mbuf *o = &P->buf[j];
            if (!placed[j] || o->extent == 0 || o->last < eb->first || o->first > eb->last) continue;
            busy[nb++] = (span){o->offset, o->offset + o->extent};
        }
        qsort(busy, (size_t)nb, sizeof *busy, span_cmp);
        uint64_t at = 0;
        for (int j = 0; j < nb; j++) {
            if (busy[j].lo >= at + eb->extent) break;
            if (busy[j].hi > at) at = align_up(busy[j].hi);
        }
        eb->offset = at;
        placed[order[k]] = true;
        for (int j = bucket_next(P, order[k]), prev = order[k]; j >= 0; prev = j, j = bucket_next(P, j))
            P->buf[j].offset = P->buf[prev].offset + P->buf[prev].bytes;
        if (at + eb->extent > arena) arena = at + eb->extent;
    }
    // The lower bound: the most bytes live at one instruction.
    uint64_t best = 0;
    int64_t *delta = calloc((size_t)P->n_insn + 2, sizeof(int64_t));
    for (int b = 0; b < P->n_buf; b++) {
        const pcc_mbuf *eb = &P->buf[b];
        if (eb->extent == 0) continue;
        delta[eb->first] += (int64_t)eb->extent;
        delta[eb->last + 1] -= (int64_t)eb->extent;
    }
    int64_t run = 0;
    for (int i = 0; i <= P->n_insn; i++) {
        run += delta[i];
        if (run > (int64_t)best) best = (uint64_t)run;
    }
    *live_bound = best;
    free(delta), free(order), free(busy), free(placed);
    return arena;
}

uint64_t memplan_place(pcc_mbuf *buf, int n_buf, const plan_insn *insn, int n_insn, const uint32_t *args,
                       const plan_attrs *attrs, uint64_t *live_bound) {
    mprog P = {.buf = buf, .n_buf = n_buf, .insn = insn, .n_insn = n_insn, .args = args, .attrs = attrs};
    return memplan(&P, live_bound);
}

/* ---- writing the plan ---- */

const char *emit_strdup(plan *p, const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = plan_alloc(p, n);
    PCC_ASSERT(d);
    memcpy(d, s, n);
    return d;
}

void *emit_memdup(plan *p, const void *src, size_t n) {
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

void emit_tensors(plan *p, const pcc_graph *g) {
    p->n_tensors = (uint32_t)g->n_tensors;
    p->tensors = plan_alloc(p, sizeof(plan_tensor) * (size_t)(g->n_tensors + 1));
    PCC_ASSERT(p->tensors);
    for (int t = 0; t < g->n_tensors; t++) {
        const pcc_tensor *T = &g->tensors[t];
        plan_tensor *pt = &p->tensors[t];
        pt->name = emit_strdup(p, T->name);
        pt->dtype = (uint8_t)T->dtype, pt->kind = (uint8_t)T->kind, pt->rank = (uint8_t)T->rank;
        pt->copies = (uint32_t)tensor_copies(g, T);
        for (int i = 0; i < T->rank; i++) pt->shape[i] = g->dims[T->dims[i]].size;
        fill_source(T, pt);
    }
}

plan_buffer *emit_buffers(plan *p, const pcc_mbuf *buf, int n_buf) {
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

void emit_program(plan *p, plan_program *pr, const char *name, uint64_t arena, bool sync, const pcc_mbuf *buf, int n_buf,
                  const plan_insn *insn, int n_insn, const uint32_t *args, int n_args, const plan_attrs *attrs, int n_attrs) {
    pr->name = emit_strdup(p, name);
    pr->arena_bytes = arena;
    pr->n_streams = sync ? 2 : 1;
    pr->priority[1] = sync ? -1 : 0;
    pr->n_events = sync ? 2 : 0;
    pr->n_buffers = (uint32_t)n_buf;
    pr->buffers = emit_buffers(p, buf, n_buf);
    pr->n_insns = (uint32_t)n_insn;
    pr->insns = emit_memdup(p, insn, sizeof(plan_insn) * (size_t)n_insn);
    pr->n_args = (uint32_t)n_args;
    pr->args = emit_memdup(p, args, sizeof(uint32_t) * (size_t)n_args);
    pr->n_attrs = (uint32_t)n_attrs;
    pr->attrs = emit_memdup(p, attrs, sizeof(plan_attrs) * (size_t)n_attrs);
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
    a.i[PLAN_AI_GHOST] = s->ghost_batch;
    for (int i = 0; i < PLAN_MAX_RANK; i++) a.perm[i] = s->perm[i];
    for (int i = 0; i < 2; i++) a.win[i] = s->kernel[i], a.win[2 + i] = s->stride[i], a.win[4 + i] = s->pad[i];
    return emit_attrs_add(ar, v, n, cap, &a);
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
