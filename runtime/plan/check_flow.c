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
 * The walk is bounded (slots, overlapping pairs, steps), so a plan too large to check is
 * refused with a message rather than checked for hours.
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
    int mb_depth, layer_depth; // how many loops of each variable are around the instruction
} flow;

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
    uint64_t m = (uint64_t)(f->mb + in->mb_delta) % bf->mb_slots, l = (uint64_t)f->layer % bf->layer_slots;
    return f->base[b] + m * f->layer_n[b] + l;
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
            return check_pfail(f->c, f->k, "more than %u buffer slots: too many to check", MAX_SLOTS);
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
            if (++total > MAX_OVERLAPS) return check_pfail(f->c, f->k, "more than %llu overlapping pairs of buffer slots: too many to check", MAX_OVERLAPS);
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

static plan_status flow_insn(flow *f, uint32_t i) {
    const plan_insn *in = &f->pg->insns[i];
    f->time++;
    f->steps += 1 + (uint64_t)in->nargs * in->nargs;
    if (f->steps > MAX_STEPS)
        return check_pfail(f->c, f->k, "more than %llu steps after expanding its loops: too large to check", MAX_STEPS);
    plan_status st = flow_group(f, i);
    for (uint32_t j = 0; j < in->nargs && !st; j++)
        if (plan_arg_role(f->pg, in, j) & A_READ) st = flow_read(f, i, slot_of(f, in, j));
    for (uint32_t j = 0; j < in->nargs && !st; j++)
        if (plan_arg_role(f->pg, in, j) & A_WRITE) st = flow_write_check(f, i, j, slot_of(f, in, j));
    for (uint32_t j = 0; j < in->nargs && !st; j++)
        if (plan_arg_role(f->pg, in, j) & A_WRITE) {
            uint64_t s = slot_of(f, in, j);
            f->last[s] = f->time;
            f->writer[s] = i;
        }
    return st;
}

static plan_status flow_range(flow *f, uint32_t from, uint32_t to);

static plan_status flow_loop(flow *f, uint32_t i) {
    const plan_insn *in = &f->pg->insns[i];
    if (plan_loop_is_background(in->code)) return flow_range(f, i + 1, i + 1 + (uint32_t)in->b); // one round, no variable
    bool mb = in->code == PLAN_LOOP_MB;
    uint64_t count = (uint64_t)in->a;
    int64_t saved = mb ? f->mb : f->layer;
    if (mb) f->mb_depth++;
    else f->layer_depth++;
    plan_status st = PLAN_OK;
    for (uint64_t j = 0; j < count && !st; j = check_next_iteration(j, count, f->period[i])) {
        int64_t v = in->code == PLAN_LOOP_REVERSE_LAYER ? (int64_t)(count - 1 - j) : (int64_t)j;
        if (mb) f->mb = v;
        else f->layer = v;
        st = flow_range(f, i + 1, i + 1 + (uint32_t)in->b);
    }
    if (mb) f->mb = saved, f->mb_depth--;
    else f->layer = saved, f->layer_depth--;
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
            st = flow_insn(f, i);
            i++;
        }
    }
    return st;
}

// Param and state buffers survive the step: nothing wrote over them after their last write.
static plan_status flow_end(flow *f) {
    const plan *p = f->c->p;
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
    f.time = 1;
    if (!st) st = flow_range(&f, 0, f.pg->n_insns);
    if (!st) st = flow_end(&f);
    flow_free(&f);
    return st;
}
