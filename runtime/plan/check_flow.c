/*
 * check_flow.c: the verifier's buffers and liveness.
 *
 * Buffers (check_buffer): every buffer has at least one slot of each kind and every slot lies
 * inside the arena; a tensor buffer's shard divides each dimension it splits, and its bytes are
 * its piece's.
 *
 * Data flow (check_flow), in program order with loops expanded (check_loops.c says how a long
 * loop is cut short without missing a fault): every buffer slot is written before it is read;
 * no write lands on bytes of another slot that still holds data to be read (live buffers never
 * overlap); an instruction's outputs overlap neither each other nor its inputs (unless it is
 * the same slot: in place); buffers of input, param and state tensors, and the outputs of
 * accumulating operators (which the runtime zeroes once per step), hold data when the step
 * starts, may not overlap each other, and param and state buffers must survive to the end of
 * the step. plan_arg_role says how an instruction uses each argument.
 *
 * Send/recv groups: a maximal run of sends and receives on one stream (loops expanded; a loop
 * boundary does not end it) is one group, whose receives may land before its sends read; so no
 * receive of a group writes bytes that a send of the same group reads, in either order (the
 * sequential data flow above cannot see this).
 *
 * Streams (happens-before). Each stream runs its instructions in order and streams are ordered
 * only by events, so the walk keeps a vector clock per stream (how far it has seen each
 * stream: positions count a stream's instructions), a record copies its stream's clock into
 * its event and a wait merges the event's clock into its stream's. A read of a slot last
 * written on another stream must see that write (the reader's clock has reached its
 * position), and a write over bytes that another stream read must see that read; otherwise
 * the streams race (a deleted record/wait pair: results that differ run to run). The
 * instructions of a background round race on purpose (hogwild, or ordered by the runtime's
 * lock) and are left out.
 *
 * Partial sums. A compute whose output is declared R on mesh axis a while an input is V there,
 * or split there along a dimension that the operator sums away (check_op_sums_away: a
 * reduction letter of its annotation that the output lacks), holds partial sums over a that
 * its shard does not show: a weight's gradient under data parallelism, declared as what the
 * in-place all_reduce after it leaves. Until an all_reduce over a (or a reduce_scatter) sums
 * them, only an operator that keeps them partial (scale, add, an accumulation) or a copy may
 * read them; and an in-place all_reduce must find partial sums on each axis of its group, or it
 * adds up replicas (an all-reduce moved to another group). Slots written from scratch buffers
 * have no layout to follow and are not judged. A program with a background round is not
 * checked: its replicas differ between rounds on purpose.
 *
 * Unread values. A slot that holds one micro-batch's or one block copy's value of a tensor
 * (a buffer with several mb or layer slots, not persistent, not the loss) is written to be
 * read: a pure write over an unread value, or an unread value at the end of the step, means a
 * loop ran longer than the one that should read it. So is a received message (outside
 * persistent buffers, which a parameter's copy arrives in for the next step): one overwritten
 * unread, or still unread when the step ends, is dropped (a stage that zeroes the partial sum
 * of a block's gradient that the next stage sent it instead of adding to it).
 *
 * The walk is bounded (slots, overlapping pairs, steps), so a plan too large to check is
 * refused (PLAN_ERR_LIMIT) with a message rather than checked for hours.
 */
#include "checker.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers ---- */

// The end of the buffer's last slot; false on overflow.
static bool buffer_end(const plan_buffer *b, uint64_t *end) {
    uint64_t m, l;
    return !__builtin_mul_overflow((uint64_t)(b->mb_slots - 1), b->mb_stride, &m) &&
           !__builtin_mul_overflow((uint64_t)(b->layer_slots - 1), b->layer_stride, &l) &&
           !__builtin_add_overflow(b->offset, m, end) && !__builtin_add_overflow(*end, l, end) &&
           !__builtin_add_overflow(*end, b->bytes, end);
}

// A tensor buffer's shard against its tensor: each split divides its dimension (shard-divides),
// and the buffer's bytes are those of the piece it holds (shard-bytes).
static plan_status check_shard(checker *c, uint32_t k, uint32_t b) {
    const plan *p = c->p;
    const plan_buffer *bf = &p->programs[k].buffers[b];
    if (bf->tensor == PLAN_NONE) return PLAN_OK;
    const plan_tensor *t = &p->tensors[bf->tensor];
    char who[160], axes[48], shard[80], whole[200], piece[200];
    check_buffer_desc(p, &p->programs[k], b, who, sizeof(who));
    for (int d = 0; d < t->rank; d++) {
        uint64_t w = plan_shard_ways(p, bf->shard, d);
        if (w <= INT64_MAX && t->shape[d] % (int64_t)w == 0) continue;
        check_axes_text(p, check_split_axes(p, bf->shard, d), axes, sizeof(axes));
        return check_pfail(c, k, "%s: dimension %d (%lld) is split %llu ways (axes %s), which does not divide it", who, d,
                           (long long)t->shape[d], (unsigned long long)w, axes);
    }
    uint64_t want = plan_buffer_expected_bytes(p, bf);
    if (want && bf->bytes == want) return PLAN_OK;
    int64_t local[PLAN_MAX_RANK];
    plan_shard_local_shape(p, t, bf->shard, local);
    check_shape_text(t->shape, t->rank, whole, sizeof(whole));
    check_shape_text(local, t->rank, piece, sizeof(piece));
    plan_shard_text(p, bf->shard, shard, sizeof(shard));
    char is[48];
    if (want) snprintf(is, sizeof(is), "%llu bytes", (unsigned long long)want);
    else snprintf(is, sizeof(is), "more than 2^64 bytes");
    if (!shard[0])
        return check_pfail(c, k, "%s: %llu bytes, but the whole of %s %s (no axis splits it) is %s", who,
                           (unsigned long long)bf->bytes, whole, plan_dtype_name(bf->dtype), is);
    return check_pfail(c, k, "%s: %llu bytes, but its shard of %s %s on %s is %s = %s", who, (unsigned long long)bf->bytes,
                       whole, plan_dtype_name(bf->dtype), shard, piece, is);
}

plan_status check_buffer(checker *c, uint32_t k, uint32_t b) {
    const plan_program *pg = &c->p->programs[k];
    const plan_buffer *bf = &pg->buffers[b];
    if (!bf->mb_slots || !bf->layer_slots)
        return check_bfail(c, k, b, "mb_slots %u, layer_slots %u: both must be at least 1", bf->mb_slots, bf->layer_slots);
    uint64_t end = 0;
    if (!buffer_end(bf, &end))
        return check_bfail(c, k, b, "slot (mb %u, layer %u) ends past byte 2^64, past the end of the arena (%llu bytes)",
                           bf->mb_slots - 1, bf->layer_slots - 1, (unsigned long long)pg->arena_bytes);
    if (end > pg->arena_bytes)
        return check_bfail(c, k, b, "slot (mb %u, layer %u) ends at byte %llu, past the end of the arena (%llu bytes)",
                           bf->mb_slots - 1, bf->layer_slots - 1, (unsigned long long)end, (unsigned long long)pg->arena_bytes);
    return check_shard(c, k, b);
}

/* ---- data flow inside one program ---- */

#define MAX_SLOTS (1u << 22)      // buffer slots one program may have for the data-flow check
#define MAX_OVERLAPS (1ull << 26) // pairs of slots that share arena bytes
#define MAX_STEPS (1ull << 28)    // instructions (weighted by arguments) the expansion may visit

enum { A_READ = PLAN_ARG_READ, A_WRITE = PLAN_ARG_WRITE };

typedef struct flow {
    checker *c;
    uint32_t k;
    const plan_program *pg;
    uint64_t n_slots;
    uint64_t *base;            // per buffer, n_buffers + 1: its first slot
    uint32_t *layer_n;         // per buffer: its layer slots that the program can touch
    uint32_t *slot_buf;        // per slot: its buffer
    uint64_t *lo, *hi;         // per slot: its bytes in the arena, [lo, hi)
    uint64_t *last;            // per slot: time of its last write; 0 never, 1 before the step
    uint32_t *writer;          // per slot: the instruction of that write
    uint64_t *ov_at, *ov;      // the slots sharing bytes with slot s: ov[ov_at[s] .. ov_at[s + 1])
    uint8_t *held;             // per buffer: holds data when the step starts
    uint32_t *period;          // per loop instruction: its period (see the top of this file)
    uint64_t *grp_rd[PLAN_MAX_STREAMS], *grp_wr[PLAN_MAX_STREAMS]; // per stream, per slot: see flow_group
    uint64_t grp_cur[PLAN_MAX_STREAMS], grp_n; // per stream: its open group (0: none); groups opened
    uint64_t time, steps;
    int64_t mb, layer;         // the loop variables
    int64_t layers;            // the innermost layer loop's count (0: none)
    int mb_depth, layer_depth; // how many loops of each variable are around the instruction
    // Happens-before between streams (see "Streams" at the top): per stream s, vc[s][t] is how far
    // stream s has seen stream t (positions count each stream's instructions); per event, the
    // clock its last record carried; per slot, the stream and position of its last write and,
    // per stream, the position of its last read (rd[s * n_streams + t]).
    uint32_t n_streams;
    uint64_t vc[PLAN_MAX_STREAMS][PLAN_MAX_STREAMS];
    uint64_t (*evc)[PLAN_MAX_STREAMS];
    uint8_t *wstream;          // per slot: the stream of its last write; NO_STREAM: none to order
    uint64_t *wpos, *rd;
    bool in_bg;                // walking a background round (deliberate races: not ordered)
    // Partial sums (see "Partial sums" at the top): per slot, the mesh axes (bit a) over which it
    // holds partial sums that its declared shard does not show; checked unless the program has
    // a background round (its replicas diverge on purpose between rounds).
    uint16_t *pend;            // bits 0..7: axes; PEND_UNKNOWN: written from scratch, its layout unknown
    bool check_pend;
    // Per slot: written and not read since (a slot of a micro-batch or block copy that a loop of
    // the wrong count leaves behind; see flow_unread).
    uint8_t *unread;
    // Per slot: the micro-batch whose value it holds (MB_ANY: one that does not depend on the
    // micro-batch, a param's or an accumulation's; MB_UNKNOWN: from scratch); see mb_read.
    int64_t *vmb;
} flow;

#define NO_STREAM 0xffu
#define MB_ANY (-1)
#define MB_UNKNOWN (-2)
#define PEND_UNKNOWN 0x100u

static void flow_free(flow *f) {
    free(f->base);
    free(f->layer_n);
    free(f->slot_buf);
    free(f->lo);
    free(f->hi);
    free(f->last);
    free(f->writer);
    free(f->ov_at);
    free(f->ov);
    free(f->held);
    free(f->period);
    free(f->evc), free(f->wstream), free(f->wpos), free(f->rd), free(f->pend), free(f->unread), free(f->vmb);
    for (int st = 0; st < PLAN_MAX_STREAMS; st++) free(f->grp_rd[st]), free(f->grp_wr[st]);
}

static uint32_t compute_inputs(const plan_insn *in) {
    const check_op_arity *a = &check_op_arities[in->code];
    return a->out >= 0 ? in->nargs - (uint32_t)a->out : (uint32_t)a->in_max;
}

static bool accumulates(const plan_program *pg, const plan_insn *in) {
    return in->kind == PLAN_I_COMPUTE && in->attrs != PLAN_NONE && pg->attrs[in->attrs].i[PLAN_AI_ACCUMULATE] != 0;
}

unsigned plan_arg_role(const plan_program *pg, const plan_insn *in, uint32_t j) {
    switch (in->kind) {
    case PLAN_I_COMPUTE:
        if (check_op_arities[in->code].inplace) return A_READ | A_WRITE;
        if (j < compute_inputs(in)) return A_READ;
        return accumulates(pg, in) ? A_READ | A_WRITE : A_WRITE;
    case PLAN_I_COLL: return j < in->nargs / 2u ? A_READ : A_WRITE;
    case PLAN_I_COPY: return j == 0 ? A_READ : A_WRITE;
    case PLAN_I_SEND: return A_READ;
    default: return A_WRITE;
    }
}

static uint64_t slot_of(const flow *f, const plan_insn *in, uint32_t j) {
    uint32_t b = f->pg->args[in->args + j];
    const plan_buffer *bf = &f->pg->buffers[b];
    uint64_t m = (uint64_t)(f->mb + in->mb_delta) % bf->mb_slots, l = (uint64_t)(f->layer + in->layer_delta) % bf->layer_slots;
    uint64_t mn = (f->base[b + 1] - f->base[b]) / f->layer_n[b]; // the slots flow_slots keeps: past them, wrap
    return f->base[b] + m % mn * f->layer_n[b] + l % f->layer_n[b];
}

// "buffer 3 (activation "h") slot mb 1 layer 0"
static void slot_desc(const flow *f, uint64_t s, char *buf, size_t n) {
    uint32_t b = f->slot_buf[s];
    const plan_buffer *bf = &f->pg->buffers[b];
    uint64_t rel = s - f->base[b];
    char slot[64] = "";
    if (bf->mb_slots > 1 || bf->layer_slots > 1)
        snprintf(slot, sizeof(slot), " slot mb %llu layer %llu", (unsigned long long)(rel / f->layer_n[b]),
                 (unsigned long long)(rel % f->layer_n[b]));
    char who[160];
    check_buffer_desc(f->c->p, f->pg, b, who, sizeof(who));
    snprintf(buf, n, "%s%s", who, slot);
}

// "insn i (op) at mb 2 layer 1: " + the message.
static plan_status ffail(flow *f, uint32_t i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static plan_status ffail(flow *f, uint32_t i, const char *fmt, ...) {
    char msg[600], at[64] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (f->mb_depth && f->layer_depth)
        snprintf(at, sizeof(at), "at mb %lld, layer %lld: ", (long long)f->mb, (long long)f->layer);
    else if (f->mb_depth) snprintf(at, sizeof(at), "at mb %lld: ", (long long)f->mb);
    else if (f->layer_depth) snprintf(at, sizeof(at), "at layer %lld: ", (long long)f->layer);
    return check_ifail(f->c, f->k, i, "%s%s", at, msg);
}

static void writer_desc(const flow *f, uint64_t s, char *buf, size_t n) {
    if (f->writer[s] == PLAN_NONE) snprintf(buf, n, "which holds data from the start of the step");
    else snprintf(buf, n, "written by insn %u", f->writer[s]);
}

/* Building the slots. */

static uint32_t longest_layer_loop(const plan_program *pg) {
    uint32_t n = 1;
    for (uint32_t i = 0; i < pg->n_insns; i++)
        if (pg->insns[i].kind == PLAN_I_LOOP && pg->insns[i].code != PLAN_LOOP_MB && plan_loop_trips(&pg->insns[i]) > n)
            n = (uint32_t)pg->insns[i].a;
    return n;
}

// Slots a buffer can have touched: micro-batch slots up to micro_batches, layer slots up to the
// longest layer loop (an index past them wraps to a slot below).
static plan_status flow_slots(flow *f) {
    const plan_program *pg = f->pg;
    uint32_t lmax = longest_layer_loop(pg), m = f->c->p->meta.micro_batches;
    f->base = calloc((size_t)pg->n_buffers + 1, sizeof(uint64_t));
    f->layer_n = calloc((size_t)pg->n_buffers + 1, sizeof(uint32_t));
    if (!f->base || !f->layer_n) return check_pfail(f->c, f->k, "out of memory");
    for (uint32_t b = 0; b < pg->n_buffers; b++) {
        const plan_buffer *bf = &pg->buffers[b];
        uint64_t mn = bf->mb_slots < m ? bf->mb_slots : m;
        f->layer_n[b] = bf->layer_slots < lmax ? bf->layer_slots : lmax;
        f->base[b + 1] = f->base[b] + mn * f->layer_n[b];
        if (f->base[b + 1] > MAX_SLOTS)
            return check_plimit(f->c, f->k, "more than %u buffer slots: too many to check", MAX_SLOTS);
    }
    f->n_slots = f->base[pg->n_buffers];
    size_t n = (size_t)f->n_slots + 1;
    f->slot_buf = malloc(n * sizeof(uint32_t));
    f->lo = malloc(n * sizeof(uint64_t));
    f->hi = malloc(n * sizeof(uint64_t));
    f->last = calloc(n, sizeof(uint64_t));
    f->writer = malloc(n * sizeof(uint32_t));
    if (!f->slot_buf || !f->lo || !f->hi || !f->last || !f->writer) return check_pfail(f->c, f->k, "out of memory");
    for (uint32_t b = 0; b < pg->n_buffers; b++)
        for (uint64_t s = f->base[b]; s < f->base[b + 1]; s++) {
            const plan_buffer *bf = &pg->buffers[b];
            uint64_t rel = s - f->base[b];
            f->slot_buf[s] = b;
            f->lo[s] = bf->offset + rel / f->layer_n[b] * bf->mb_stride + rel % f->layer_n[b] * bf->layer_stride;
            f->hi[s] = f->lo[s] + bf->bytes;
        }
    return PLAN_OK;
}

typedef struct span {
    uint64_t lo, hi, slot;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

// Counts (fill false) or lists (fill true) the pairs of slots that share bytes.
static plan_status overlap_pass(flow *f, const span *v, uint64_t m, bool fill, uint64_t *at) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < m; i++)
        for (uint64_t j = i + 1; j < m && v[j].lo < v[i].hi; j++) {
            if (++total > MAX_OVERLAPS) return check_plimit(f->c, f->k, "more than %llu overlapping pairs of buffer slots: too many to check", MAX_OVERLAPS);
            if (fill) {
                f->ov[at[v[i].slot]++] = v[j].slot;
                f->ov[at[v[j].slot]++] = v[i].slot;
            } else {
                at[v[i].slot]++;
                at[v[j].slot]++;
            }
        }
    return PLAN_OK;
}

static plan_status flow_overlaps(flow *f) {
    uint64_t n = f->n_slots, m = 0;
    span *v = malloc((size_t)(n + 1) * sizeof(span));
    uint64_t *at = calloc((size_t)n + 1, sizeof(uint64_t));
    f->ov_at = calloc((size_t)n + 1, sizeof(uint64_t));
    plan_status st = !v || !at || !f->ov_at ? check_pfail(f->c, f->k, "out of memory") : PLAN_OK;
    for (uint64_t s = 0; !st && s < n; s++)
        if (f->hi[s] > f->lo[s]) v[m++] = (span){f->lo[s], f->hi[s], s};
    if (!st) qsort(v, (size_t)m, sizeof(span), span_cmp);
    if (!st) st = overlap_pass(f, v, m, false, at);
    if (!st) {
        for (uint64_t s = 0; s < n; s++) f->ov_at[s + 1] = f->ov_at[s] + at[s];
        memcpy(at, f->ov_at, (size_t)n * sizeof(uint64_t));
        f->ov = malloc((size_t)f->ov_at[n] * sizeof(uint64_t) + 1);
        st = f->ov ? overlap_pass(f, v, m, true, at) : check_pfail(f->c, f->k, "out of memory");
    }
    free(v);
    free(at);
    return st;
}

static bool holds_at_start(const plan *p, const plan_buffer *bf) {
    (void)p;
    return (bf->flags & PLAN_BUF_PERSIST) != 0;
}

// Slots that hold data when the step starts (persistent buffers: inputs, params, optimizer
// state; the outputs of accumulating operators, which the runtime zeroes); no two of them may
// share bytes.
static plan_status flow_start(flow *f) {
    const plan_program *pg = f->pg;
    f->held = calloc((size_t)pg->n_buffers + 1, 1);
    if (!f->held) return check_pfail(f->c, f->k, "out of memory");
    for (uint32_t b = 0; b < pg->n_buffers; b++) f->held[b] = holds_at_start(f->c->p, &pg->buffers[b]);
    for (uint32_t i = 0; i < pg->n_insns; i++)
        if (accumulates(pg, &pg->insns[i]))
            for (uint32_t j = compute_inputs(&pg->insns[i]); j < pg->insns[i].nargs; j++)
                f->held[pg->args[pg->insns[i].args + j]] = 1;
    for (uint64_t s = 0; s < f->n_slots; s++) {
        f->writer[s] = PLAN_NONE;
        f->last[s] = f->held[f->slot_buf[s]] ? 1 : 0;
    }
    for (uint64_t s = 0; s < f->n_slots; s++)
        for (uint64_t o = f->ov_at[s]; f->last[s] && o < f->ov_at[s + 1]; o++)
            if (f->last[f->ov[o]] && f->ov[o] > s) {
                char a[160], b[160];
                slot_desc(f, s, a, sizeof(a));
                slot_desc(f, f->ov[o], b, sizeof(b));
                return check_pfail(f->c, f->k, "%s and %s both hold data when the step starts (persistent "
                                   "buffers, or outputs the runtime zeroes) and overlap in the arena", a, b);
            }
    return PLAN_OK;
}

// The state of the happens-before and partial-sum checks: nothing written yet, no clock moved.
static plan_status flow_order_init(flow *f) {
    const plan_program *pg = f->pg;
    size_t n = (size_t)f->n_slots + 1;
    f->n_streams = pg->n_streams;
    uint32_t events = plan_insns_events(pg->insns, pg->n_insns); // n_events may be far larger: only the used ones get a clock
    f->evc = calloc((size_t)events + 1, sizeof *f->evc);
    f->wstream = malloc(n);
    f->wpos = calloc(n, sizeof(uint64_t));
    f->rd = calloc(n * f->n_streams, sizeof(uint64_t));
    f->pend = calloc(n, sizeof(uint16_t));
    f->unread = calloc(n, 1);
    f->vmb = malloc(n * sizeof(int64_t));
    if (!f->evc || !f->wstream || !f->wpos || !f->rd || !f->pend || !f->unread || !f->vmb)
        return check_pfail(f->c, f->k, "out of memory");
    for (uint64_t s = 0; s < f->n_slots; s++) { // what the step starts with: an input's slot m holds micro-batch m
        const plan_buffer *b = &pg->buffers[f->slot_buf[s]];
        bool per_mb = b->tensor != PLAN_NONE && f->c->p->tensors[b->tensor].kind == PLAN_T_INPUT &&
                      b->mb_slots >= f->c->p->meta.micro_batches;
        f->vmb[s] = per_mb ? (int64_t)((s - f->base[f->slot_buf[s]]) / f->layer_n[f->slot_buf[s]]) : MB_ANY;
    }
    memset(f->wstream, NO_STREAM, n);
    f->check_pend = true;
    for (uint32_t i = 0; i < pg->n_insns; i++)
        if (pg->insns[i].kind == PLAN_I_LOOP && plan_loop_is_background(pg->insns[i].code)) f->check_pend = false;
    return PLAN_OK;
}

/* Running the program. */

// A read of slot s: it was written, and nothing wrote over its bytes since.
static plan_status flow_read(flow *f, uint32_t i, uint64_t s) {
    char a[160], b[160], w[64];
    if (!f->last[s]) {
        slot_desc(f, s, a, sizeof(a));
        return ffail(f, i, "reads %s before anything writes it", a);
    }
    for (uint64_t o = f->ov_at[s]; o < f->ov_at[s + 1]; o++) {
        uint64_t x = f->ov[o];
        if (f->last[x] <= f->last[s]) continue;
        slot_desc(f, s, a, sizeof(a));
        slot_desc(f, x, b, sizeof(b));
        writer_desc(f, s, w, sizeof(w));
        uint64_t lo = f->lo[s] > f->lo[x] ? f->lo[s] : f->lo[x], hi = f->hi[s] < f->hi[x] ? f->hi[s] : f->hi[x];
        return ffail(f, i, "reads %s (%s), but insn %u wrote %s over its arena bytes %llu..%llu in between: live "
                     "buffers overlap", a, w, f->writer[x], b, (unsigned long long)lo, (unsigned long long)hi - 1);
    }
    return PLAN_OK;
}

// A write of argument j (slot s): no other argument of the instruction shares its bytes, except
// the same slot read in place.
static plan_status flow_write_check(flow *f, uint32_t i, uint32_t j, uint64_t s) {
    const plan_insn *in = &f->pg->insns[i];
    for (uint32_t j2 = 0; j2 < in->nargs; j2++) {
        if (j2 == j) continue;
        uint64_t s2 = slot_of(f, in, j2);
        unsigned role2 = plan_arg_role(f->pg, in, j2);
        if (s2 == s && !(role2 & A_WRITE)) continue;
        if (s2 != s && (f->hi[s] <= f->lo[s2] || f->hi[s2] <= f->lo[s] || f->hi[s] == f->lo[s] || f->hi[s2] == f->lo[s2]))
            continue;
        char a[160], b[160];
        slot_desc(f, s, a, sizeof(a));
        slot_desc(f, s2, b, sizeof(b));
        return ffail(f, i, "output %u (%s) %s %s %u (%s)", j, a, s2 == s ? "is the same slot as" : "overlaps",
                     role2 & A_WRITE ? "output" : "input", j2, b);
    }
    return PLAN_OK;
}

// The slot sharing bytes with slot s (s itself first) whose mark in `marks` is group g, or
// UINT64_MAX.
static uint64_t group_conflict(const flow *f, const uint64_t *marks, uint64_t g, uint64_t s) {
    if (f->hi[s] == f->lo[s]) return UINT64_MAX;
    if (marks[s] >> 32 == g) return s;
    for (uint64_t o = f->ov_at[s]; o < f->ov_at[s + 1]; o++)
        if (marks[f->ov[o]] >> 32 == g) return f->ov[o];
    return UINT64_MAX;
}

// Send/recv groups. A maximal run of sends and receives on one stream, in execution order (loops
// do not end it; any other instruction of that stream does), is issued as one group: its receives
// may land, and its sends may read, at any time until the whole group completes (NCCL's
// ncclGroupStart/End; comm.c posts every send, then takes every receive). So no receive of a group
// may write bytes that a send of the same group reads, whichever comes first in the run: the
// receive would overwrite data not yet sent, or the send would carry the old or the new bytes
// depending on timing. Marks per stream and slot: the group (high 32 bits; groups are numbered
// from 1, fewer than MAX_STEPS) and the instruction (low 32) of its last send from the slot
// (grp_rd) and receive into it (grp_wr).
static plan_status flow_group(flow *f, uint32_t i) {
    const plan_insn *in = &f->pg->insns[i];
    uint8_t st = in->stream;
    if (in->kind != PLAN_I_SEND && in->kind != PLAN_I_RECV) {
        f->grp_cur[st] = 0;
        return PLAN_OK;
    }
    if (!f->grp_rd[st]) {
        f->grp_rd[st] = calloc((size_t)f->n_slots + 1, sizeof(uint64_t));
        f->grp_wr[st] = calloc((size_t)f->n_slots + 1, sizeof(uint64_t));
        if (!f->grp_rd[st] || !f->grp_wr[st]) return check_pfail(f->c, f->k, "out of memory");
    }
    if (!f->grp_cur[st]) f->grp_cur[st] = ++f->grp_n;
    bool send = in->kind == PLAN_I_SEND;
    uint64_t s = slot_of(f, in, 0), g = f->grp_cur[st];
    uint64_t x = group_conflict(f, send ? f->grp_wr[st] : f->grp_rd[st], g, s);
    if (x != UINT64_MAX) {
        char a[160], b[160];
        slot_desc(f, s, a, sizeof(a));
        slot_desc(f, x, b, sizeof(b));
        uint32_t j = (uint32_t)((send ? f->grp_wr[st] : f->grp_rd[st])[x] & 0xffffffffu);
        if (send)
            return ffail(f, i, "sends %s, but recv insn %u of the same group of sends and receives writes %s over its "
                         "bytes: a group's receives may land before its sends read", a, j, b);
        return ffail(f, i, "receives into %s, over the bytes of %s, which send insn %u of the same group of sends and "
                     "receives reads: a group's receives may land before its sends read", a, b, j);
    }
    (send ? f->grp_rd[st] : f->grp_wr[st])[s] = g << 32 | i;
    return PLAN_OK;
}

/* Streams: happens-before. */

// A read by instruction i (on stream st) of slot s: a write on another stream happens before it
// (a record after the write on that stream, waited for on this one before the read).
static plan_status hb_read(flow *f, uint32_t i, uint8_t st, uint64_t s) {
    if (f->in_bg) return PLAN_OK;
    f->rd[s * f->n_streams + st] = f->vc[st][st];
    uint8_t w = f->wstream[s];
    if (w == NO_STREAM || w == st || f->vc[st][w] >= f->wpos[s]) return PLAN_OK;
    char a[160];
    slot_desc(f, s, a, sizeof(a));
    return ffail(f, i, "on stream %u reads %s, written by insn %u on stream %u, but no record on stream %u after that write "
                 "is waited for on stream %u before this read: the streams race", st, a, f->writer[s], w, w, st);
}

// A write by instruction i (on stream st) of slot s over slot x's bytes (x may be s): every read
// of x on another stream happens before it.
static plan_status hb_war(flow *f, uint32_t i, uint8_t st, uint64_t s, uint64_t x) {
    for (uint32_t t = 0; t < f->n_streams; t++) {
        uint64_t r = f->rd[x * f->n_streams + t];
        if (t == st || !r || f->vc[st][t] >= r) continue;
        char a[160], b[160];
        slot_desc(f, s, a, sizeof(a));
        slot_desc(f, x, b, sizeof(b));
        return ffail(f, i, "on stream %u writes %s over %s, which stream %u reads earlier, but no record on stream %u after "
                     "that read is waited for on stream %u before this write: the streams race", st, a, b, t, t, st);
    }
    return PLAN_OK;
}

// A write by instruction i (on stream st) of slot s: every read of its bytes (s or a slot over
// them) on another stream happens before it; then s was last written here.
static plan_status hb_write(flow *f, uint32_t i, uint8_t st, uint64_t s) {
    if (f->in_bg) {
        f->wstream[s] = NO_STREAM;
        return PLAN_OK;
    }
    plan_status ok = hb_war(f, i, st, s, s);
    for (uint64_t o = f->ov_at[s]; o < f->ov_at[s + 1] && !ok; o++) ok = hb_war(f, i, st, s, f->ov[o]);
    f->wstream[s] = st;
    f->wpos[s] = f->vc[st][st];
    return ok;
}

// Records and waits move the clocks: a record keeps its stream's clock in its event; a wait
// takes the event's clock into its stream's.
static void hb_event(flow *f, const plan_insn *in) {
    uint8_t st = in->stream;
    if (in->kind == PLAN_I_RECORD) memcpy(f->evc[in->a], f->vc[st], sizeof f->vc[st]);
    if (in->kind == PLAN_I_WAIT)
        for (uint32_t t = 0; t < f->n_streams; t++)
            if (f->evc[in->a][t] > f->vc[st][t]) f->vc[st][t] = f->evc[in->a][t];
}

/* Partial sums. */

static bool keeps_partial(const plan_insn *in) {
    const char *name = plan_op_name(in->code);
    return in->kind == PLAN_I_COMPUTE && name && (!strcmp(name, "scale") || !strcmp(name, "add"));
}

// attention_grad_bias (dy, q, k, v, bias) -> dbias: whether splitting dimension d of input q sums
// it away, the bias's gradient lacking the scores' axis [b,n,s,t] that dimension stands for (its
// annotation is "", so check_op_sums_away cannot say). dy and q are [b,s,n,*], k and v [b,t,m,*];
// the bias maps onto the scores by attrs perm (perm[j] - 1 the scores' axis of the bias's axis j;
// all zeros: the last axes), as runtime/cpu/cpu.h's cpu_map_strides reads it.
static bool attn_bias_sums_away(const plan_program *pg, const plan_insn *in, uint32_t q, int d, int rank_bias) {
    static const int qax[4] = {0, 2, 1, -1}, kax[4] = {0, 3, 1, -1}; // the scores' axis of each dimension
    if (q >= 4 || d < 0 || d >= 4) return false;
    int ax = q <= 1 ? qax[d] : kax[d];
    if (ax < 0) return false; // the head dimension: contracted, not a score axis (never split)
    bool given = false, has = false;
    const int32_t *perm = in->attrs != PLAN_NONE && in->attrs < pg->n_attrs ? pg->attrs[in->attrs].perm : NULL;
    for (int j = 0; perm && j < PLAN_MAX_RANK; j++) given |= perm[j] != 0;
    for (int j = 0; j < rank_bias && j < PLAN_MAX_RANK; j++) has |= (given ? perm[j] - 1 : 4 - rank_bias + j) == ax;
    return !has;
}

// The mesh axes on which argument j of a compute holds partial sums its declared shard does not
// show: it is declared R on axis a while an input is split (D) on a along a dimension that the
// operator sums away (a reduction letter of ops.def's annotation that the output lacks: a
// weight's gradient under data parallelism), or holds partial sums (V) there, until an
// in-place all_reduce over a.
static uint16_t pend_made(const flow *f, const plan_insn *in, uint32_t j) {
    const plan_program *pg = f->pg;
    const plan_buffer *o = &pg->buffers[pg->args[in->args + j]];
    if (in->kind != PLAN_I_COMPUTE || o->tensor == PLAN_NONE) return 0;
    const plan *p = f->c->p;
    uint16_t m = 0;
    uint32_t nin = compute_inputs(in);
    const char *name = plan_op_name(in->code);
    bool attn_bias = name && !strcmp(name, "attention_grad_bias");
    for (uint32_t q = 0; q < nin && q < in->nargs; q++) {
        const plan_buffer *x = &pg->buffers[pg->args[in->args + q]];
        if (x->tensor == PLAN_NONE) m |= PEND_UNKNOWN;
        if (x->tensor == PLAN_NONE) continue;
        for (uint32_t a = 0; a < p->meta.n_axes; a++) {
            uint8_t v = x->shard.map[a];
            if (o->shard.map[a] != PLAN_SHARD_R || v == PLAN_SHARD_R) continue;
            bool away = attn_bias ? attn_bias_sums_away(pg, in, q, v - PLAN_SHARD_D(0), p->tensors[o->tensor].rank)
                                  : check_op_sums_away(in->code, q, p->tensors[x->tensor].rank, v - PLAN_SHARD_D(0),
                                                       p->tensors[o->tensor].rank, j - nin);
            if (v == PLAN_SHARD_V || away)
                m |= (uint16_t)(1u << a);
        }
    }
    return m;
}

static void axes_of(const flow *f, uint16_t m, char *buf, size_t n) { check_axes_text(f->c->p, m & 0xffu, buf, n); }

// Whether collective `in` sums over its group (colls.def: V -> R, V -> D(i)).
static bool sums(const plan_insn *in) {
    if (in->kind != PLAN_I_COLL) return false;
    plan_shards sh = plan_coll_lookup(in->code)->shards;
    return sh == PLAN_SHARDS_V_R || sh == PLAN_SHARDS_V_D;
}

// Whether argument j (an input) of collective `in` is reduced in place by it: an all_reduce pair
// whose in and out are one buffer.
static bool reduced_in_place(const flow *f, const plan_insn *in, uint32_t j) {
    uint32_t np = in->nargs / 2u;
    return in->kind == PLAN_I_COLL && in->code == PLAN_COLL_ALL_REDUCE && j < np &&
           f->pg->args[in->args + j] == f->pg->args[in->args + np + j];
}

// Reads of a slot that holds partial sums (pend): only an operator that keeps them partial (scale,
// add), a copy, or an in-place all_reduce over all their axes may read them.
static plan_status pend_read(flow *f, uint32_t i, uint32_t j, uint64_t s) {
    const plan_insn *in = &f->pg->insns[i];
    uint16_t m = f->pend[s] & 0xffu;
    if (!f->check_pend || f->in_bg || !m || keeps_partial(in) || in->kind == PLAN_I_COPY) return PLAN_OK;
    if (accumulates(f->pg, in) && j >= compute_inputs(in)) return PLAN_OK; // an accumulation adds to its partial sums
    if (reduced_in_place(f, in, j)) return PLAN_OK; // pend_write checks its axes: several may reduce in turn
    if (sums(in)) return PLAN_OK; // an all_reduce or reduce_scatter into another buffer: pend_write carries what stays
    char a[160], ax[48], w[64];
    slot_desc(f, s, a, sizeof(a));
    axes_of(f, f->pend[s], ax, sizeof(ax));
    writer_desc(f, s, w, sizeof(w));
    return ffail(f, i, "reads %s (%s), which holds partial sums over %s (an input split there, the output declared R), "
                 "before an in-place all_reduce over %s reduces them", a, w, ax, ax);
}

// What a write leaves in slot s (argument j of instruction i): partial sums made, kept, summed.
static plan_status pend_write(flow *f, uint32_t i, uint32_t j, uint64_t s) {
    const plan_insn *in = &f->pg->insns[i];
    if (!f->check_pend || f->in_bg) {
        f->pend[s] = 0;
        return PLAN_OK;
    }
    uint16_t m = 0;
    if (in->kind == PLAN_I_COMPUTE) {
        m = pend_made(f, in, j);
        for (uint32_t q = 0; q < in->nargs; q++) // what an operator that keeps partial sums read (an accumulation too)
            if ((keeps_partial(in) || q == j) && (plan_arg_role(f->pg, in, q) & A_READ)) m |= f->pend[slot_of(f, in, q)];
    } else if (in->kind == PLAN_I_COPY) {
        m = f->pend[slot_of(f, in, 0)];
    } else if (in->kind == PLAN_I_COLL && reduced_in_place(f, in, j - in->nargs / 2u)) {
        uint32_t axes = f->c->p->groups[in->a].axes;
        const plan_buffer *b = &f->pg->buffers[f->pg->args[in->args + j]];
        if (axes && b->tensor != PLAN_NONE && in->attrs == PLAN_NONE && !(f->pend[s] & PEND_UNKNOWN) &&
            (f->pend[s] & axes) != axes) {
            char a[160], ax[48], have[48];
            slot_desc(f, s, a, sizeof(a));
            axes_of(f, (uint16_t)(axes & ~f->pend[s]), ax, sizeof(ax));
            axes_of(f, f->pend[s], have, sizeof(have));
            return ffail(f, i, "all-reduces %s in place over %s, but it holds no partial sums there (partial over: %s): "
                         "the sum would multiply its replicas", a, ax, f->pend[s] ? have : "none");
        }
        m = axes ? (uint16_t)(f->pend[s] & ~axes) : 0;
    } else if (sums(in)) { // into another buffer: what its group does not sum stays partial
        uint32_t axes = f->c->p->groups[in->a].axes;
        m = axes ? (uint16_t)(f->pend[slot_of(f, in, j - in->nargs / 2u)] & ~axes & 0xffu) : 0;
    }
    f->pend[s] = m;
    return PLAN_OK;
}

/* Micro-batches: each value keeps the micro-batch it belongs to. */

// A read of slot s by instruction i at micro-batch `at` (the mb loop's variable plus mb_delta):
// a value of one micro-batch is read at that micro-batch (an instruction moved to another
// micro-batch, or a slot that a loop of the wrong count left, is found here).
static plan_status mb_read(flow *f, uint32_t i, uint64_t s, int64_t at) {
    if (f->in_bg || f->vmb[s] < 0 || f->vmb[s] == at) return PLAN_OK;
    char a[160], w[64];
    slot_desc(f, s, a, sizeof(a));
    writer_desc(f, s, w, sizeof(w));
    return ffail(f, i, "reads %s (%s), which holds micro-batch %lld's value, as micro-batch %lld's", a, w, (long long)f->vmb[s],
                 (long long)at);
}

// Whether instruction in reads and writes one slot: an update in place, which sums over
// micro-batches (a gradient accumulated with add) rather than belonging to one.
static bool accumulates_in_place(const flow *f, const plan_insn *in) {
    if (accumulates(f->pg, in) || (in->kind == PLAN_I_COMPUTE && check_op_arities[in->code].inplace)) return true;
    if (in->kind != PLAN_I_COMPUTE) return false;
    for (uint32_t j = 0; j < in->nargs; j++)
        for (uint32_t q = 0; q < in->nargs; q++)
            if (j != q && (plan_arg_role(f->pg, in, j) & A_READ) && (plan_arg_role(f->pg, in, q) & A_WRITE) &&
                slot_of(f, in, j) == slot_of(f, in, q))
                return true;
    return false;
}

// Whether argument j of instruction in is a sum it adds to (an accumulating output, or an input
// it also writes: add's in-place accumulation), which holds no one micro-batch's value.
static bool accumulated_arg(const flow *f, const plan_insn *in, uint32_t j) {
    if ((plan_arg_role(f->pg, in, j) & A_WRITE) || in->kind != PLAN_I_COMPUTE) return true; // reads its own output
    uint64_t s = slot_of(f, in, j);
    for (uint32_t q = 0; q < in->nargs; q++)
        if (q != j && (plan_arg_role(f->pg, in, q) & A_WRITE) && slot_of(f, in, q) == s) return true;
    return false;
}

// The micro-batch whose value instruction i writes into its outputs: its own where it reads a
// value of one micro-batch; MB_ANY where it reads none (params only, nothing, or it accumulates
// over micro-batches, or updates in place); MB_UNKNOWN where it reads scratch of unknown origin.
static int64_t mb_written(const flow *f, const plan_insn *in, int64_t at) {
    if (accumulates_in_place(f, in)) return MB_ANY;
    if (in->kind == PLAN_I_RECV) {
        const plan_buffer *b = &f->pg->buffers[f->pg->args[in->args]];
        uint8_t kind = b->tensor == PLAN_NONE ? PLAN_T_ACTIVATION : f->c->p->tensors[b->tensor].kind;
        return kind == PLAN_T_PARAM || kind == PLAN_T_STATE ? MB_ANY : at;
    }
    int64_t v = MB_ANY;
    for (uint32_t j = 0; j < in->nargs; j++) {
        if (!(plan_arg_role(f->pg, in, j) & A_READ)) continue;
        int64_t x = f->vmb[slot_of(f, in, j)];
        if (x >= 0) return at;
        if (x == MB_UNKNOWN) v = MB_UNKNOWN;
    }
    return v;
}

// The walk skips `skip` iterations of an mb loop that began at time t0 (a multiple of its
// period: check_loops.c): the values written in it are those of micro-batches `skip` later.
static void mb_skip(flow *f, uint64_t t0, int64_t skip) {
    for (uint64_t s = 0; s < f->n_slots; s++)
        if (f->last[s] > t0 && f->vmb[s] >= 0) f->vmb[s] += skip;
}

/* Slots left unread. */

// Whether slot s holds one micro-batch's or one block copy's value of a tensor computed in the
// step (not the loss, which the runtime reads): such a value is written to be read.
static bool must_be_read(const flow *f, uint64_t s) {
    const plan_buffer *b = &f->pg->buffers[f->slot_buf[s]];
    return b->tensor != PLAN_NONE && !(b->flags & PLAN_BUF_PERSIST) && (b->mb_slots > 1 || b->layer_slots > 1) &&
           b->tensor != f->c->p->meta.loss && !f->in_bg;
}

// Whether the write of slot s by receive `in` is a message that the program must read.
static bool must_read_message(const flow *f, const plan_insn *in, uint64_t s) {
    return in->kind == PLAN_I_RECV && !(f->pg->buffers[f->slot_buf[s]].flags & PLAN_BUF_PERSIST) && !f->in_bg;
}

// A write of slot s by instruction i over a value nobody read (a forward loop that ran one
// micro-batch too many, a backward loop one too few, ...).
static plan_status flow_unread(flow *f, uint32_t i, uint64_t s) {
    if (!f->unread[s]) return PLAN_OK;
    char a[160];
    slot_desc(f, s, a, sizeof(a));
    if (f->pg->insns[f->writer[s]].kind == PLAN_I_RECV) {
        if (i == PLAN_NONE)
            return check_pfail(f->c, f->k, "%s (received by insn %u) is never read: the message is dropped", a, f->writer[s]);
        return ffail(f, i, "writes %s over the message insn %u received, which nothing read: the message is dropped", a,
                     f->writer[s]);
    }
    if (i == PLAN_NONE)
        return check_pfail(f->c, f->k, "%s (written by insn %u) is never read: a loop over micro-batches or block copies runs "
                           "longer than the one that should read it", a, f->writer[s]);
    return ffail(f, i, "writes %s over the value insn %u wrote, which nothing read: a loop over micro-batches or block copies "
                 "runs longer than the one that should read it", a, f->writer[s]);
}

static plan_status flow_insn(flow *f, uint32_t i) {
    const plan_insn *in = &f->pg->insns[i];
    f->time++;
    f->steps += 1 + (uint64_t)in->nargs * in->nargs;
    if (f->steps > MAX_STEPS)
        return check_plimit(f->c, f->k, "more than %llu steps after expanding its loops: too large to check", MAX_STEPS);
    plan_status st = flow_group(f, i);
    if (in->kind != PLAN_I_LOOP) f->vc[in->stream][in->stream]++;
    hb_event(f, in);
    for (uint32_t j = 0; j < in->nargs && !st; j++)
        if (plan_arg_role(f->pg, in, j) & A_READ) {
            uint64_t s = slot_of(f, in, j);
            st = flow_read(f, i, s);
            if (!st) st = hb_read(f, i, in->stream, s);
            if (!st) st = pend_read(f, i, j, s);
            if (!st && !(accumulates_in_place(f, in) && accumulated_arg(f, in, j))) st = mb_read(f, i, s, f->mb + in->mb_delta);
            f->unread[s] = 0;
        }
    for (uint32_t j = 0; j < in->nargs && !st; j++)
        if (plan_arg_role(f->pg, in, j) & A_WRITE) st = flow_write_check(f, i, j, slot_of(f, in, j));
    int64_t vmb = st ? MB_ANY : mb_written(f, in, f->mb + in->mb_delta);
    for (uint32_t j = 0; j < in->nargs && !st; j++)
        if (plan_arg_role(f->pg, in, j) & A_WRITE) {
            uint64_t s = slot_of(f, in, j);
            st = hb_write(f, i, in->stream, s);
            if (!st) st = pend_write(f, i, j, s);
            bool pure = !(plan_arg_role(f->pg, in, j) & A_READ); // not an update in place or an accumulation
            if (!st && pure) st = flow_unread(f, i, s);
            f->unread[s] = pure && (must_be_read(f, s) || must_read_message(f, in, s));
            f->vmb[s] = f->in_bg ? MB_ANY : vmb;
            f->last[s] = f->time;
            f->writer[s] = i;
        }
    return st;
}

static plan_status flow_range(flow *f, uint32_t from, uint32_t to);

static plan_status flow_loop(flow *f, uint32_t i) {
    const plan_insn *in = &f->pg->insns[i];
    if (plan_loop_is_background(in->code)) { // one round, no variable; its races are deliberate
        f->in_bg = true;
        plan_status st = flow_range(f, i + 1, i + 1 + (uint32_t)in->b);
        f->in_bg = false;
        return st;
    }
    bool mb = in->code == PLAN_LOOP_MB;
    uint64_t count = (uint64_t)in->a;
    int64_t saved = mb ? f->mb : f->layer, saved_layers = f->layers;
    if (!mb) f->layers = (int64_t)count;
    if (mb) f->mb_depth++;
    else f->layer_depth++;
    plan_status st = PLAN_OK;
    uint64_t t0 = f->time;
    for (uint64_t j = 0; j < count && !st;) {
        int64_t v = in->code == PLAN_LOOP_REVERSE_LAYER ? (int64_t)(count - 1 - j) : (int64_t)j;
        if (mb) f->mb = v;
        else f->layer = v;
        st = flow_range(f, i + 1, i + 1 + (uint32_t)in->b);
        uint64_t next = check_next_iteration(j, count, f->period[i]);
        if (mb && next > j + 1) mb_skip(f, t0, (int64_t)(next - j - 1));
        j = next;
    }
    if (mb) f->mb = saved, f->mb_depth--;
    else f->layer = saved, f->layers = saved_layers, f->layer_depth--;
    return st;
}

static plan_status flow_range(flow *f, uint32_t from, uint32_t to) {
    plan_status st = PLAN_OK;
    for (uint32_t i = from; i < to && !st;) {
        const plan_insn *in = &f->pg->insns[i];
        if (in->kind == PLAN_I_LOOP) {
            st = flow_loop(f, i);
            i += 1 + (uint32_t)in->b;
        } else {
            if (!plan_insn_skipped(in, f->layer, f->layers)) st = flow_insn(f, i);
            i++;
        }
    }
    return st;
}

// Param and state buffers survive the step: nothing wrote over them after their last write.
// Every value of a micro-batch or block copy written in the step was read.
static plan_status flow_end(flow *f) {
    const plan *p = f->c->p;
    for (uint64_t s = 0; s < f->n_slots; s++)
        if (f->unread[s]) return flow_unread(f, PLAN_NONE, s);
    for (uint64_t s = 0; s < f->n_slots; s++) {
        const plan_buffer *bf = &f->pg->buffers[f->slot_buf[s]];
        if (bf->tensor == PLAN_NONE) continue;
        uint8_t kind = p->tensors[bf->tensor].kind;
        if ((kind != PLAN_T_PARAM && kind != PLAN_T_STATE) || !(bf->flags & PLAN_BUF_PERSIST)) continue;
        for (uint64_t o = f->ov_at[s]; o < f->ov_at[s + 1]; o++) {
            uint64_t x = f->ov[o];
            if (f->last[x] <= f->last[s]) continue;
            char a[160], b[160], w[64];
            slot_desc(f, s, a, sizeof(a));
            slot_desc(f, x, b, sizeof(b));
            writer_desc(f, s, w, sizeof(w));
            return check_pfail(f->c, f->k, "%s (%s) must survive to the next step, but insn %u wrote %s over it", a, w,
                               f->writer[x], b);
        }
    }
    return PLAN_OK;
}

uint32_t check_last_writer(const plan_program *pg, uint32_t i, uint32_t b) {
    while (i-- > 0) {
        const plan_insn *in = &pg->insns[i];
        for (uint32_t x = 0; x < in->nargs; x++)
            if (pg->args[in->args + x] == b && (plan_arg_role(pg, in, x) & PLAN_ARG_WRITE)) return i;
    }
    return UINT32_MAX;
}

plan_status check_flow(checker *c, uint32_t k) {
    flow f = {.c = c, .k = k, .pg = &c->p->programs[k]};
    plan_status st = flow_slots(&f);
    if (!st) st = flow_overlaps(&f);
    if (!st) st = flow_start(&f);
    if (!st) {
        f.period = calloc((size_t)f.pg->n_insns + 1, sizeof(uint32_t));
        if (!f.period) st = check_pfail(c, k, "out of memory");
        for (uint32_t i = 0; !st && i < f.pg->n_insns; i++)
            if (f.pg->insns[i].kind == PLAN_I_LOOP) f.period[i] = check_loop_period(f.pg, i);
    }
    if (!st) st = flow_order_init(&f);
    f.time = 1;
    if (!st) st = flow_range(&f, 0, f.pg->n_insns);
    if (!st) st = flow_end(&f);
    flow_free(&f);
    return st;
}
