/*
 * interp.c: the interpreter. It runs a plan's programs for training steps, every rank of the
 * process at once, on a backend (rt.h, "backend.c": the CPU backend, cpu/backend.c, runs every
 * rank as threads of this process). The interpreter decides what runs where and when; the
 * backend runs kernels, copies, messages, collectives and events, and owns the memory.
 *
 * Execution model, as runtime/PLAN_FORMAT.md defines it ("What instructions mean"):
 *   - a walker is a host thread that walks a rank's whole program in order with its loops
 *     expanded. With a backend whose calls block (thread_per_stream: the CPU), every stream of
 *     every rank has its own walker, which issues the instructions of its stream only; so each
 *     stream runs its instructions in program order, and streams run concurrently. With an
 *     asynchronous backend, one walker per rank issues every stream's instructions, each on its
 *     stream, and the backend's streams and events give the same order;
 *   - events: each walker counts, in program order, the records of every event it passes (on any
 *     stream). A record marks its ordinal done; a wait waits until the ordinal it counted (the
 *     most recent record before it in program order, CUDA's cudaStreamWaitEvent after
 *     cudaEventRecord) is done;
 *   - messages and collectives: each walker counts the sends per destination, the receives per
 *     source and the collectives per group in program order (all streams), and passes the count
 *     as the sequence number comm.c matches on; a maximal run of send/recv on one stream (loops
 *     expanded) is one group;
 *   - buffers: an instruction's micro-batch is the innermost mb loop's variable plus its
 *     mb_delta; its layer slot is the innermost layer loop's variable plus its layer_delta (an
 *     instruction whose slot falls outside the loop does not run: plan_insn_skipped); a buffer
 *     slot is at offset + (mb mod mb_slots) * mb_stride + (layer mod layer_slots) * layer_stride,
 *     and holds block copy layer_base + layer;
 *   - a background job (rt_options.gates, planrun --background): the foreground's walkers mark
 *     every collective on their rank's gate, a background run's walkers wait at it before every
 *     operator, copy or collective (gate.c).
 *
 * Guards (guard.c): after every compute the walker asks the backend whether an output holds a
 * NaN or an infinity (the first one fails the step with RT_STEP_NONFINITE), and publishes the
 * instruction it is in for the watchdog, which ends the process when walkers outlive a failure
 * by --timeout.
 *
 * A step: zero every accumulating operator's outputs, fill every micro-batch slot of every
 * input, run the walkers (on the run's crew of threads, which live as long as the run), then
 * read the loss from the buffers of the last operator that writes it (its value summed over its
 * V axes, averaged over micro-batches). Host data (initial parameters, inputs, the loss) is made
 * in a host staging buffer and crosses with the backend's upload and download, so the
 * interpreter never touches an arena's memory itself.
 */
#include "rt.h"
#ifdef PLANCC_HAVE_CUDA
#include "cuda/rt_cuda.h"
#endif

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHAT_BYTES 192

static void say(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}


// Inputs and outputs of every operator (runtime/ops.def); out -1: all arguments past the inputs.
static const struct { int8_t in_min, in_max, out; } op_arity[] = {
#define OP(E, name, imin, imax, nout, ann, flags) {imin, imax, nout},
#include "ops.def"
#undef OP
};

/* ---- the walker: one stream of one rank ---- */

typedef struct pending {
    rt_p2p item;
    uint32_t insn, mb, layer;   // for the trace
    char what[WHAT_BYTES];
} pending;

typedef struct walker {
    rt_run *run;
    rt_rank *rk;
    int stream, thread;         // stream -1: this walker issues every stream of its rank
    int pend_stream;            // the stream of the pending send/recv
    uint64_t *ev_seen;          // per event: records passed in program order
    uint64_t *sent, *received;  // per peer rank and tag: messages passed
    uint64_t *colls;            // per group: collectives passed
    pending *pend;              // this stream's current run of send/recv
    int n_pend, cap_pend;
    uint64_t fenced;            // streams that waited for the previous background round this step (bit s)
    bool round;                 // issues its rank's background round only (rounds that outlive the step)
    char what[WHAT_BYTES];
} walker;

typedef struct frame {
    int32_t mb, layer;          // innermost loop variables (-1: none)
    int32_t layers;             // the innermost layer loop's count (0: none)
} frame;

// "rank 2 (program 1 "stage1") stream 0: insn 15 (recv, micro-batch 3, layer 1)"
static void describe(const walker *w, char *buf, size_t n, uint32_t i, uint32_t mb, uint32_t layer, const char *extra) {
    const plan_insn *in = &w->rk->pg->insns[i];
    snprintf(buf, n, "rank %d (program %u \"%s\") stream %d: insn %u (%s%s, micro-batch %u, layer %u)", w->rk->rank,
             w->run->p->ranks[w->rk->rank].program, w->rk->pg->name ? w->rk->pg->name : "", w->stream, i, plan_insn_name(in),
             extra, mb, layer);
}

static int fail(walker *w, uint32_t i, uint32_t mb, uint32_t layer, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail(walker *w, uint32_t i, uint32_t mb, uint32_t layer, const char *fmt, ...) {
    char where[WHAT_BYTES], msg[512];
    describe(w, where, sizeof where, i, mb, layer, "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rt_backend_fail(w->run->be, "%s: %s", where, msg);
}

static rt_exec exec_of(const walker *w, int stream) { return (rt_exec){w->thread, w->rk->rank, stream}; }

/* ---- the measured timeline (planrun --trace; trace.c) ---- */

// Whether this walker records its instructions: a trace is asked for, and the walker's work ends
// with the step (a background round that outlives the step is not traced: its marks would not
// be complete when the step's are read).
static bool tracing(const walker *w) { return w->run->o.trace && !(w->round && rt_backend_has_stamps(w->run->be)); }

// A point in time on x's stream: the host clock where calls block, else a timing mark on the
// stream (its number, which rt_trace_resolve turns into a time after the step).
static int trace_point(walker *w, const rt_exec *x, double *t) {
    if (!rt_backend_has_stamps(w->run->be)) {
        *t = rt_trace_since(w->run->o.trace, rt_clock_s());
        return 0;
    }
    uint32_t mark;
    char err[256];
    if (rt_backend_stamp(w->run->be, x, &mark, err, sizeof err)) return rt_backend_fail(w->run->be, "timing mark: %s", err);
    w->rk->trace_marks++;
    *t = mark;
    return 0;
}

static void trace_slice(walker *w, int stream, uint32_t insn, uint32_t mb, uint32_t layer, double t0, double t1) {
    rt_trace_slice s = {.step = w->run->steps + 1, .insn = insn, .mb = mb, .layer = layer, .start = t0, .end = t1};
    rt_trace_add(w->run->o.trace, w->rk->rank, stream, &s);
}

// Issues the pending run of send/recv as one group (traced as one span shared by its items).
static int flush(walker *w) {
    if (!w->n_pend) return 0;
    rt_p2p items[64];
    rt_exec x = exec_of(w, w->pend_stream);
    char err[512];
    bool traced = tracing(w);
    double t0 = 0, t1 = 0;
    int rc = traced ? trace_point(w, &x, &t0) : 0;
    for (int s = 0; s < w->n_pend && !rc; s += 64) {
        int n = w->n_pend - s < 64 ? w->n_pend - s : 64;
        for (int j = 0; j < n; j++) items[j] = w->pend[s + j].item, items[j].what = w->pend[s + j].what;
        rc = rt_backend_p2p(w->run->be, &x, items, n, err, sizeof err);
        if (rc) rc = rt_backend_fail(w->run->be, "%s", err);
    }
    if (!rc && traced && !(rc = trace_point(w, &x, &t1)))
        for (int j = 0; j < w->n_pend; j++) trace_slice(w, w->pend_stream, w->pend[j].insn, w->pend[j].mb, w->pend[j].layer, t0, t1);
    w->n_pend = 0;
    return rc;
}

// The rank at this rank's coordinate + off along mesh axis a, or -1.
static int peer_of(const rt_run *r, const rt_rank *rk, int32_t a, int32_t off) {
    const plan_meta *m = &r->p->meta;
    if (a < 0 || (uint32_t)a >= m->n_axes) return -1;
    int64_t c = (int64_t)rk->coord[a] + off;
    if (c < 0 || c >= m->mesh[a]) return -1;
    int rank = 0;
    for (uint32_t x = 0; x < m->n_axes; x++) rank = rank * (int)m->mesh[x] + (int)(x == (uint32_t)a ? (uint32_t)c : rk->coord[x]);
    return rank;
}

static int do_p2p(walker *w, uint32_t i, uint32_t mb, uint32_t layer, uint64_t seq, int peer) {
    const plan_insn *in = &w->rk->pg->insns[i];
    if (w->n_pend == w->cap_pend) {
        int cap = w->cap_pend ? 2 * w->cap_pend : 16;
        pending *p = realloc(w->pend, (size_t)cap * sizeof *p);
        if (!p) return fail(w, i, mb, layer, "out of memory");
        w->pend = p, w->cap_pend = cap;
    }
    w->pend_stream = in->stream;
    pending *p = &w->pend[w->n_pend++];
    p->insn = i, p->mb = mb, p->layer = layer;
    uint32_t b = w->rk->pg->args[in->args];
    p->item = (rt_p2p){.send = in->kind == PLAN_I_SEND, .peer = peer, .tag = in->tag, .seq = seq,
                       .data = rt_slot_addr(w->rk, &w->rk->pg->buffers[b], mb, layer), .bytes = rt_slot_bytes(w->rk, &w->rk->pg->buffers[b]),
                       .t_s = in->t_s};
    char extra[64];
    snprintf(extra, sizeof extra, " %s rank %d", in->kind == PLAN_I_SEND ? "to" : "from", peer);
    describe(w, p->what, sizeof p->what, i, mb, layer, extra);
    return 0;
}

static void view_arg(walker *w, uint32_t bi, uint32_t mb, uint32_t layer, rt_view *v) {
    rt_buffer_view(w->run, w->rk, bi, mb, layer, v);
}

// Whether input buffer `inb` counts its additive contribution on this rank: false when it is R
// along an axis where the output is V and this rank's coordinate there is not 0.
static bool counts_once(const rt_run *r, const rt_rank *rk, const plan_buffer *inb, const plan_buffer *outb) {
    for (uint32_t a = 0; a < r->p->meta.n_axes; a++)
        if (outb->shard.map[a] == PLAN_SHARD_V && inb->shard.map[a] == PLAN_SHARD_R && rk->coord[a] != 0) return false;
    return true;
}

// The block copy an instruction works on: its layer slot plus the layer_base of its first block
// tensor operand.
static uint32_t block_copy(const walker *w, const plan_insn *in, uint32_t layer) {
    const plan_program *pg = w->rk->pg;
    for (uint32_t j = 0; j < in->nargs; j++) {
        const plan_buffer *b = &pg->buffers[pg->args[in->args + j]];
        if (b->tensor != PLAN_NONE && w->run->p->tensors[b->tensor].copies > 1) return b->layer_base + layer;
    }
    return layer;
}

static int do_compute(walker *w, uint32_t i, uint32_t mb, uint32_t layer) {
    const plan_program *pg = w->rk->pg;
    const plan_insn *in = &pg->insns[i];
    rt_view views[PLAN_MAX_RANK * 16];
    if (in->nargs > sizeof views / sizeof *views) return fail(w, i, mb, layer, "%u arguments, more than the runtime takes", in->nargs);
    rt_kernel k = {.op = in->code, .seed = w->run->o.seed, .step = w->run->steps + 1, .mb = mb,
                   .layer = block_copy(w, in, layer)};
    if (in->attrs != PLAN_NONE) k.attrs = pg->attrs[in->attrs];
    k.accumulate = k.attrs.i[PLAN_AI_ACCUMULATE] != 0;
    if (in->code >= sizeof op_arity / sizeof *op_arity) return fail(w, i, mb, layer, "unknown operator %u", in->code);
    int out = op_arity[in->code].out;
    uint32_t n_out = out >= 0 ? (uint32_t)out : in->nargs - (uint32_t)op_arity[in->code].in_max;
    if (n_out > in->nargs) return fail(w, i, mb, layer, "%u arguments, fewer than its %u outputs", in->nargs, n_out);
    for (uint32_t j = 0; j < in->nargs; j++) view_arg(w, pg->args[in->args + j], mb, layer, &views[j]);
    k.nin = in->nargs - n_out, k.nout = n_out;
    k.in = views, k.out = views + k.nin;
    if (n_out) {
        const plan_buffer *outb = &pg->buffers[pg->args[in->args + k.nin]];
        for (uint32_t j = 0; j < k.nin; j++) views[j].once = counts_once(w->run, w->rk, &pg->buffers[pg->args[in->args + j]], outb);
    }
    char err[384];
    rt_exec x = exec_of(w, in->stream);
    if (rt_backend_kernel(w->run->be, &x, &k, err, sizeof err)) return fail(w, i, mb, layer, "%s", err);
    return rt_guard_outputs(w->run, w->rk, &x, i, mb, layer);
}

static int do_copy(walker *w, uint32_t i, uint32_t mb, uint32_t layer) {
    const plan_program *pg = w->rk->pg;
    const plan_insn *in = &pg->insns[i];
    uint32_t s = pg->args[in->args], d = pg->args[in->args + 1];
    const plan_buffer *sb = &pg->buffers[s], *db = &pg->buffers[d];
    uint8_t *src = rt_slot_addr(w->rk, sb, mb, layer), *dst = rt_slot_addr(w->rk, db, mb, layer);
    rt_exec x = exec_of(w, in->stream);
    char err[384];
    int rc;
    if (sb->tensor == PLAN_NONE || db->tensor == PLAN_NONE) {
        if (sb->bytes != db->bytes) return fail(w, i, mb, layer, "copy of %llu bytes into %llu", (unsigned long long)sb->bytes, (unsigned long long)db->bytes);
        rc = rt_backend_copy(w->run->be, &x, dst, NULL, src, NULL, rt_slot_bytes(w->rk, sb), rt_elem_dtype(w->rk, db), err, sizeof err);
    } else {
        rt_box sbx, dbx;
        rt_shard_box(w->run->p, &w->run->p->tensors[sb->tensor], sb->shard, w->rk->coord, &sbx);
        rt_shard_box(w->run->p, &w->run->p->tensors[db->tensor], db->shard, w->rk->coord, &dbx);
        // R -> V: the data stays on coordinate 0, the others hold zeros.
        const void *from = counts_once(w->run, w->rk, sb, db) ? src : NULL;
        rc = rt_backend_copy(w->run->be, &x, dst, &dbx, from, &sbx, rt_slot_bytes(w->rk, db), rt_elem_dtype(w->rk, db), err, sizeof err);
    }
    return rc ? fail(w, i, mb, layer, "%s", err) : 0;
}

// The members of rank rk's instance of group g, ascending; returns their number and rk's index.
static int group_members(const rt_run *r, const rt_rank *rk, const plan_group *g, int *members, int *me, uint32_t *inst) {
    const plan_meta *m = &r->p->meta;
    int n = 0;
    *me = -1;
    if (!g->axes) {
        for (uint32_t j = 0; j < g->n_ranks; j++) {
            if ((int)g->ranks[j] == rk->rank) *me = n;
            members[n++] = (int)g->ranks[j];
        }
        *inst = 0xffffffffu;
        return n;
    }
    for (int q = 0; q < r->world; q++) {
        bool same = true;
        for (uint32_t a = 0; a < m->n_axes && same; a++)
            if (!(g->axes >> a & 1) && r->ranks[q].coord[a] != rk->coord[a]) same = false;
        if (!same) continue;
        if (n == 0) *inst = (uint32_t)q;
        if (q == rk->rank) *me = n;
        members[n++] = q;
    }
    return n;
}

static void buffer_box(const walker *w, uint32_t bi, rt_box *box) {
    const plan_buffer *b = &w->rk->pg->buffers[bi];
    if (b->tensor == PLAN_NONE) rt_scratch_box(b, box);
    else rt_shard_box(w->run->p, &w->run->p->tensors[b->tensor], b->shard, w->rk->coord, box);
}

// Box b as a flat vector of its elements.
static void flat_box(rt_box *b) {
    int64_t n = 1;
    for (int d = 0; d < b->rank; d++) n *= b->shape[d];
    memset(b, 0, sizeof *b);
    b->rank = 1, b->shape[0] = b->full[0] = n;
}

// A collective between scratch buffers: flat vectors, rank-major pieces, laid out as its row of
// runtime/colls.def says (pieces); -1 for a kind whose pieces cannot be told from flat vectors.
static int scratch_coll(const plan_coll_facts *kind, int me, int n, rt_coll_member *m) {
    int64_t in_n = m->in_box.shape[0], out_n = m->out_box.shape[0];
    switch (kind->pieces) {
    case PLAN_PIECES_WHOLE: return 0; // every member holds the whole vector, in and out
    case PLAN_PIECES_GATHER: m->in_box.start[0] = me * in_n, m->in_box.full[0] = m->out_box.full[0] = out_n; return 0;
    case PLAN_PIECES_SCATTER: m->out_box.start[0] = me * out_n, m->in_box.full[0] = m->out_box.full[0] = in_n; return 0;
    case PLAN_PIECES_SHIFT: // pieces of a vector n members long: mine in at piece me, out at piece me - 1
        if (in_n != out_n || n < 1) return -1;
        m->in_box.start[0] = me * in_n, m->out_box.start[0] = ((me + n - 1) % n) * in_n;
        m->in_box.full[0] = m->out_box.full[0] = n * in_n;
        return 0;
    default: return -1; // SWAP: which piece goes where is not in a flat vector
    }
}

// One pair (in ib, out ob) of collective instruction i, the seq-th collective on its group
// instance, as the backend takes it (*c; its `what` in what[WHAT_BYTES]). flat > 0: ib is the
// first of a bucket's in-place buffers that lie back to back, and the call reduces `flat`
// elements from its slot on as one vector.
static int coll_pair_of(walker *w, uint32_t i, uint32_t mb, uint32_t layer, uint64_t seq, uint32_t ib, uint32_t ob, int64_t flat,
                        rt_coll *c, char *what) {
    const plan_program *pg = w->rk->pg;
    const plan_insn *in = &pg->insns[i];
    const plan_coll_facts *kind = plan_coll_lookup(in->code); // in range: plan_validate
    const plan_group *g = &w->run->p->groups[in->a];
    int *members = malloc((size_t)w->run->world * sizeof *members), me, n;
    if (!members) return fail(w, i, mb, layer, "out of memory");
    uint32_t inst = 0;
    n = group_members(w->run, w->rk, g, members, &me, &inst);
    free(members);
    if (me < 0) return fail(w, i, mb, layer, "rank %d is not a member of group %d", w->rk->rank, in->a);
    const plan_buffer *inb = &pg->buffers[ib];
    rt_coll_member m = {.rank = w->rk->rank, .in = rt_slot_addr(w->rk, inb, mb, layer),
                        .out = rt_slot_addr(w->rk, &pg->buffers[ob], mb, layer), .contributes = true};
    buffer_box(w, ib, &m.in_box);
    buffer_box(w, ob, &m.out_box);
    if (in->attrs != PLAN_NONE) { // a chunk: elements start .. end - 1 of an in-place all-reduce (plan_check)
        const plan_attrs *at = &pg->attrs[in->attrs];
        uint64_t off = (uint64_t)at->i[PLAN_AI_START] * rt_dtype_bytes(rt_elem_dtype(w->rk, inb));
        m.in = (const uint8_t *)m.in + off, m.out = (uint8_t *)m.out + off;
        flat = at->i[PLAN_AI_END] - at->i[PLAN_AI_START];
    }
    if (flat > 0) {
        memset(&m.in_box, 0, sizeof m.in_box);
        m.in_box.rank = 1, m.in_box.shape[0] = m.in_box.full[0] = flat;
        m.out_box = m.in_box;
    } else if (kind->pieces == PLAN_PIECES_SHIFT || inb->tensor == PLAN_NONE || pg->buffers[ob].tensor == PLAN_NONE) {
        if (kind->pieces == PLAN_PIECES_SHIFT) flat_box(&m.in_box), flat_box(&m.out_box); // what moves is the rank's vector
        if (scratch_coll(kind, me, n, &m)) return fail(w, i, mb, layer, "%s between scratch buffers is not supported", plan_insn_name(in));
        m.contributes = kind->roots == PLAN_ROOTS_ALL || me == 0;
    } else if (ib == ob) {
        // In place (an all-reduce): the buffer holds partial sums before and is R only after.
    } else if (g->axes) {
        for (uint32_t a = 0; a < w->run->p->meta.n_axes; a++)
            if ((g->axes >> a & 1) && inb->shard.map[a] == PLAN_SHARD_R && w->rk->coord[a] != 0) m.contributes = false;
    } else if (kind->roots == PLAN_ROOTS_FIRST) {
        m.contributes = me == 0;
    }
    describe(w, what, WHAT_BYTES, i, mb, layer, "");
    *c = (rt_coll){.kind = in->code, .group = (uint32_t)in->a, .instance = inst, .seq = seq, .n_members = n, .me = me,
                   .mine = m, .dtype = (uint8_t)rt_elem_dtype(w->rk, inb), .what = what, .t_s = in->t_s};
    return 0;
}

// One pair of collective instruction i, issued (coll_pair_of).
static int coll_pair(walker *w, uint32_t i, uint32_t mb, uint32_t layer, uint64_t seq, uint32_t ib, uint32_t ob,
                     int64_t flat) {
    char what[WHAT_BYTES], err[512];
    rt_coll c;
    if (coll_pair_of(w, i, mb, layer, seq, ib, ob, flat, &c, what)) return -1;
    rt_exec x = exec_of(w, w->rk->pg->insns[i].stream);
    return rt_backend_coll(w->run->be, &x, &c, err, sizeof err) ? rt_backend_fail(w->run->be, "%s", err) : 0;
}

// The elements of a bucket that runs as one collective (of a kind that runs in place, colls.def:
// all_reduce): every pair in place, floating point, each slot right after the one before, and
// every member of the group running this program (so that every member decides alike); 0
// otherwise.
static int64_t bucket_flat(const walker *w, const plan_insn *in, uint32_t mb, uint32_t layer) {
    const plan_program *pg = w->rk->pg;
    uint32_t np = in->nargs / 2u;
    if (np < 2 || !plan_coll_lookup(in->code)->inplace) return 0;
    const plan_group *g = &w->run->p->groups[in->a];
    if (!g->axes) return 0;
    for (int q = 0; q < w->run->world; q++) {
        bool same = true;
        for (uint32_t a = 0; a < w->run->p->meta.n_axes && same; a++)
            if (!(g->axes >> a & 1) && w->run->ranks[q].coord[a] != w->rk->coord[a]) same = false;
        if (same && w->run->p->ranks[q].program != w->run->p->ranks[w->rk->rank].program) return 0;
    }
    const uint32_t *a = &pg->args[in->args];
    uint64_t bytes = 0;
    for (uint32_t j = 0; j < np; j++) {
        const plan_buffer *b = &pg->buffers[a[j]];
        if (a[j] != a[np + j] || b->dtype == 3) return 0;
        if (j && rt_slot_addr(w->rk, &pg->buffers[a[j - 1]], mb, layer) + rt_slot_bytes(w->rk, &pg->buffers[a[j - 1]]) !=
                     rt_slot_addr(w->rk, b, mb, layer))
            return 0;
        bytes += rt_slot_bytes(w->rk, b);
    }
    return (int64_t)(bytes / rt_dtype_bytes(rt_elem_dtype(w->rk, &pg->buffers[a[0]])));
}

// A collective instruction: its pairs are collectives seq, seq + 1, ... on the group instance
// (a bucket counts as many as it has pairs). A bucket of in-place all-reduces over buffers that
// lie back to back is one all-reduce over them (collective seq; the others are not issued).
static int do_coll(walker *w, uint32_t i, uint32_t mb, uint32_t layer, uint64_t seq) {
    const plan_program *pg = w->rk->pg;
    const plan_insn *in = &pg->insns[i];
    uint32_t np = in->nargs / 2u;
    int64_t flat = in->attrs == PLAN_NONE ? bucket_flat(w, in, mb, layer) : 0;
    if (flat > 0) return coll_pair(w, i, mb, layer, seq, pg->args[in->args], pg->args[in->args], flat);
    if (np == 1) return coll_pair(w, i, mb, layer, seq, pg->args[in->args], pg->args[in->args + np], 0);
    // A bucket of pairs the backend issues together where it can (rt_backend_coll_bucket).
    rt_coll *cs = malloc(sizeof *cs * np);
    char *what = malloc((size_t)WHAT_BYTES * np), err[512];
    if (!cs || !what) {
        free(cs), free(what);
        return fail(w, i, mb, layer, "out of memory");
    }
    int rc = 0;
    for (uint32_t j = 0; j < np && !rc; j++)
        rc = coll_pair_of(w, i, mb, layer, seq + j, pg->args[in->args + j], pg->args[in->args + np + j], 0, &cs[j], what + (size_t)j * WHAT_BYTES);
    rt_exec x = exec_of(w, in->stream);
    if (!rc && rt_backend_coll_bucket(w->run->be, &x, cs, (int)np, err, sizeof err)) rc = rt_backend_fail(w->run->be, "%s", err);
    free(cs), free(what);
    return rc;
}

static int walk(walker *w, uint32_t lo, uint32_t hi, frame f);
static int step_insn(walker *w, uint32_t i, frame f);

/* ---- the background gate (planrun --background; rt.h, "gate.c") ----
 *
 * With rt_options.gates set, a foreground walker marks every collective it issues on its rank's
 * gate (entering before, leaving after, both when the stream gets there), and a background
 * walker waits for the gate before every operator, copy or collective it issues and releases
 * it when that piece is done. A mark or a release is made even when the piece failed. */

// The gate of w's rank, or NULL where the run has none.
static rt_gate *gate_of(const walker *w) { return w->run->o.gates ? &w->run->o.gates[w->rk->rank] : NULL; }

static int gate_enter(walker *w, const plan_insn *in, const rt_exec *x) {
    rt_gate *g = gate_of(w);
    char err[256];
    if (!g) return 0;
    if (w->run->o.background) {
        double limit = w->run->o.timeout_s > 0 ? w->run->o.timeout_s : 60;
        int rc = rt_gate_admit(g, limit);
        if (rc == -1) return rt_backend_fail(w->run->be, "stopped at the gate: the foreground job stopped");
        if (rc) return rt_backend_fail(w->run->be, "the gate stayed shut for %g s (a foreground collective or a piece that did not end)", limit);
        return 0;
    }
    if (in->kind != PLAN_I_COLL) return 0;
    return rt_backend_when_done(w->run->be, x, rt_gate_cb_coll_enter, g, err, sizeof err) ? rt_backend_fail(w->run->be, "%s", err) : 0;
}

static int gate_leave(walker *w, const plan_insn *in, const rt_exec *x) {
    rt_gate *g = gate_of(w);
    char err[256];
    if (!g || (!w->run->o.background && in->kind != PLAN_I_COLL)) return 0;
    void (*fn)(void *) = w->run->o.background ? rt_gate_cb_release : rt_gate_cb_coll_leave;
    if (!rt_backend_when_done(w->run->be, x, fn, g, err, sizeof err)) return 0;
    fn(g); // the stream will never get there: do not leave the gate shut
    return rt_backend_fail(w->run->be, "%s", err);
}

/* ---- background rounds ----
 *
 * A background loop's body is one round of a background program (PLAN_FORMAT.md). The walker
 * of its stream runs it (the foreground walkers skip it: it shares no events, groups or
 * streams with them): with period K > 0 once in every step whose number (from 0) is a multiple
 * of K, so every rank runs the same rounds; with count 0 (continuous) round after round until
 * every rank's foreground has finished the step, which the ranks agree on through the round's
 * last instruction, the all-reduce of its stop flag (1 where the rank's foreground is done). The
 * walker of the background stream is a thread of its own (thread_per_stream), so rounds run
 * while the foreground trains; with one walker per rank (cpu-serial) the round runs where it
 * stands in the program (after the optimizer).
 *
 * Rounds that outlive the step (a backend with round_end: CUDA). The rank's one walker skips
 * the loop; once the step has ended and its loss has been read, run_rounds issues the round on
 * its stream, which first waits for the rank's other streams (join: the round starts after the
 * optimizer), and marks its end (round_end). step_end does not wait for that stream, so the
 * round runs beside the next step: that step's forward and backward read x while the round
 * writes it (the same Hogwild-style race as the CPU backend's threads, which ShadowSync
 * tolerates), but on each stream the first optimizer operator or copy, collective, send or
 * receive waits for the round's end first (round_fence, rt_insn_waits_for_round): the round's
 * x += target - s never races the optimizer's update (what the CPU's lock gives), and no NCCL
 * operation of the foreground runs beside one of the round's (cuda/backend.c says why). The
 * loss's cross-process sum comes before the round for the same reason. A continuous round is
 * then one round per step: every rank's foreground has finished, so every flag is 1 and the
 * flags sum to the group's size; the flag is not read back (that read would wait for the
 * round). The host waits for the round before it touches parameters (rt_run_drain). */

static bool fg_done(rt_rank *rk) {
    pthread_mutex_lock(&rk->lock);
    bool done = rk->fg_left <= 0;
    pthread_mutex_unlock(&rk->lock);
    return done;
}

// Sets (before) or reads (after the all-reduce) the stop flag, buffer fb of the round.
static int stop_flag(walker *w, uint32_t fb, double *v, bool set) {
    char err[256];
    double d = *v;
    float f = (float)d;
    void *host = w->rk->scale == 2 ? (void *)&d : (void *)&f;
    int rc = set ? rt_buffer_write(w->run, w->rk, fb, 0, 0, host, err, sizeof err)
                 : rt_buffer_read(w->run, w->rk, fb, 0, 0, host, err, sizeof err);
    if (rc) return rt_backend_fail(w->run->be, "background stop flag: %s", err);
    *v = w->rk->scale == 2 ? d : (double)f;
    return 0;
}

static int run_background(walker *w, uint32_t i, frame f) {
    rt_rank *rk = w->rk;
    const plan_insn *in = &rk->pg->insns[i];
    uint32_t lo = i + 1, hi = i + 1 + (uint32_t)in->b;
    bool outlive = w->stream < 0 && rt_backend_rounds_outlive_steps(w->run->be);
    if (w->stream >= 0 && w->stream != rk->bg_stream) return 0;
    if (outlive && !w->round) return 0; // run_rounds issues it after the step
    if (w->stream < 0) { // one walker issues every stream: the round starts after the step's optimizer
        char err[256];
        rt_exec x = exec_of(w, (int)rk->bg_stream);
        if (rt_backend_join(w->run->be, &x, err, sizeof err)) return rt_backend_fail(w->run->be, "background round: %s", err);
    }
    if (in->a > 0) {
        if (w->run->steps % (uint64_t)in->a) return 0;
        if (walk(w, lo, hi, f)) return -1;
        rk->bg_rounds++;
        return 0;
    }
    const plan_insn *last = &rk->pg->insns[hi - 1];
    uint32_t fb = rk->pg->args[last->args];
    uint64_t n = plan_group_size(w->run->p, (uint32_t)last->a);
    for (;;) {
        double flag = fg_done(rk) ? 1 : 0;
        if (walk(w, lo, hi - 1, f) || stop_flag(w, fb, &flag, true) || step_insn(w, hi - 1, f)) return -1;
        if (outlive) flag = n; // every rank's foreground has finished: the flags sum to n
        else if (stop_flag(w, fb, &flag, false)) return -1;
        rk->bg_rounds++;
        if (flag >= n - 0.5) return 0;
    }
}

bool rt_insn_waits_for_round(const plan_insn *in, int32_t bg_stream) {
    if (in->stream == bg_stream) return false;
    switch (in->kind) {
    case PLAN_I_COMPUTE: case PLAN_I_COPY: return in->phase == PLAN_PHASE_OPT;
    case PLAN_I_COLL: case PLAN_I_SEND: case PLAN_I_RECV: return true;
    default: return false;
    }
}

// Where rounds outlive the steps: the first instruction of each stream in the step that must not
// run beside the previous round (rt_insn_waits_for_round) makes its stream wait for the round.
static int round_fence(walker *w, const plan_insn *in, const rt_exec *x) {
    const rt_rank *rk = w->rk;
    if (w->stream >= 0 || w->round || rk->bg_loop < 0 || !rt_backend_rounds_outlive_steps(w->run->be)) return 0;
    _Static_assert(PLAN_MAX_STREAMS <= 64, "a walker's fenced streams fit in 64 bits");
    if ((w->fenced >> in->stream & 1u) || !rt_insn_waits_for_round(in, rk->bg_stream)) return 0;
    w->fenced |= (uint64_t)1 << in->stream;
    char err[256];
    return rt_backend_round_fence(w->run->be, x, err, sizeof err) ? rt_backend_fail(w->run->be, "background round: %s", err) : 0;
}

// Whether instruction in of rank rk's walker w runs under rk's lock: with snapshot-delta
// rounds, a round's instructions that touch a param's home and the foreground's optimizer.
static bool needs_lock(const walker *w, const plan_insn *in) {
    const rt_rank *rk = w->rk;
    if (!rk->bg_locked || w->stream < 0 || (in->kind != PLAN_I_COMPUTE && in->kind != PLAN_I_COPY)) return false;
    if (w->stream != rk->bg_stream) return in->phase == PLAN_PHASE_OPT;
    for (uint32_t a = 0; a < in->nargs; a++) {
        const plan_buffer *b = &rk->pg->buffers[rk->pg->args[in->args + a]];
        if ((b->flags & PLAN_BUF_PERSIST) && b->tensor != PLAN_NONE && w->run->p->tensors[b->tensor].kind == PLAN_T_PARAM) return true;
    }
    return false;
}

static int run_loop(walker *w, uint32_t i, frame f) {
    const plan_insn *in = &w->rk->pg->insns[i];
    if (plan_loop_is_background(in->code)) return run_background(w, i, f);
    for (int32_t it = 0; it < in->a; it++) {
        frame g = f;
        int32_t v = in->code == PLAN_LOOP_REVERSE_LAYER ? in->a - 1 - it : it;
        if (in->code == PLAN_LOOP_MB) g.mb = v;
        else g.layer = v, g.layers = in->a;
        if (walk(w, i + 1, i + 1 + (uint32_t)in->b, g)) return -1;
    }
    return 0;
}

// The micro-batch and the layer slot instruction in works on in frame f.
static void insn_at(frame f, const plan_insn *in, uint32_t *mb, uint32_t *layer) {
    *mb = (uint32_t)((f.mb < 0 ? 0 : f.mb) + in->mb_delta);
    *layer = (uint32_t)((f.layer < 0 ? 0 : f.layer) + in->layer_delta);
}

// Runs one instruction that is not a loop (counting it when it belongs to another stream).
static int step_insn(walker *w, uint32_t i, frame f) {
    const plan_insn *in = &w->rk->pg->insns[i];
    bool mine = w->stream < 0 || in->stream == w->stream, p2p = in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV;
    if (plan_insn_skipped(in, f.layer, f.layers)) return 0;
    uint32_t mb, layer;
    insn_at(f, in, &mb, &layer);
    if (mine && (!p2p || in->stream != w->pend_stream) && flush(w)) return -1;
    if (mine) rt_guard_busy(w->run, w->thread, i + 1);
    rt_exec x = exec_of(w, in->stream);
    char err[512];
    switch (in->kind) {
    case PLAN_I_RECORD: {
        uint64_t ord = ++w->ev_seen[in->a];
        if (mine && rt_backend_record(w->run->be, &x, (uint32_t)in->a, ord, err, sizeof err)) return fail(w, i, mb, layer, "%s", err);
        return 0;
    }
    case PLAN_I_WAIT:
        if (!mine) return 0;
        describe(w, w->what, sizeof w->what, i, mb, layer, "");
        if (rt_backend_wait(w->run->be, &x, (uint32_t)in->a, w->ev_seen[in->a], w->what, err, sizeof err))
            return rt_backend_fail(w->run->be, "%s", err);
        return 0;
    case PLAN_I_SEND: case PLAN_I_RECV: {
        int peer = peer_of(w->run, w->rk, in->a, in->b);
        if (peer < 0) return mine ? fail(w, i, mb, layer, "no peer at offset %d along mesh axis %d", in->b, in->a) : 0;
        size_t ch = (size_t)peer * PLAN_MAX_TAGS + in->tag;
        uint64_t seq = in->kind == PLAN_I_SEND ? ++w->sent[ch] : ++w->received[ch];
        if (!mine) return 0;
        return round_fence(w, in, &x) ? -1 : do_p2p(w, i, mb, layer, seq, peer);
    }
    case PLAN_I_COLL: {
        uint64_t seq = w->colls[in->a] + 1;
        w->colls[in->a] += in->nargs / 2u;
        if (!mine || round_fence(w, in, &x) || gate_enter(w, in, &x)) return mine ? -1 : 0;
        int rc = do_coll(w, i, mb, layer, seq);
        return gate_leave(w, in, &x) || rc ? -1 : 0;
    }
    case PLAN_I_COMPUTE:
    case PLAN_I_COPY: {
        if (!mine) return 0;
        if (round_fence(w, in, &x) || gate_enter(w, in, &x)) return -1;
        bool lock = needs_lock(w, in);
        if (lock) pthread_mutex_lock(&w->rk->lock);
        int rc = in->kind == PLAN_I_COMPUTE ? do_compute(w, i, mb, layer) : do_copy(w, i, mb, layer);
        if (lock) pthread_mutex_unlock(&w->rk->lock);
        return gate_leave(w, in, &x) || rc ? -1 : 0;
    }
    default: return fail(w, i, mb, layer, "unknown instruction kind %u", in->kind);
    }
}

// step_insn with the instruction's slice in the trace when it is this walker's to run (a send
// or receive gets its slice when its group is issued: flush).
static int traced_insn(walker *w, uint32_t i, frame f) {
    const plan_insn *in = &w->rk->pg->insns[i];
    bool mine = w->stream < 0 || in->stream == w->stream;
    if (!mine || in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV || plan_insn_skipped(in, f.layer, f.layers)) return step_insn(w, i, f);
    if (flush(w)) return -1; // step_insn would flush first too: the group's span ends before this one starts
    rt_exec x = exec_of(w, in->stream);
    double t0, t1;
    if (trace_point(w, &x, &t0) || step_insn(w, i, f) || trace_point(w, &x, &t1)) return -1;
    uint32_t mb, layer;
    insn_at(f, in, &mb, &layer);
    trace_slice(w, in->stream, i, mb, layer, t0, t1);
    return 0;
}

static int walk(walker *w, uint32_t lo, uint32_t hi, frame f) {
    bool traced = tracing(w);
    for (uint32_t i = lo; i < hi; i++) {
        const plan_insn *in = &w->rk->pg->insns[i];
        if (in->kind == PLAN_I_LOOP) {
            if (run_loop(w, i, f)) return -1;
            i += (uint32_t)in->b;
        } else if (traced ? traced_insn(w, i, f) : step_insn(w, i, f)) {
            return -1;
        }
    }
    return 0;
}

static void *walker_main(void *arg) {
    walker *w = arg;
    frame f = {-1, -1, 0};
    if (!walk(w, 0, w->rk->pg->n_insns, f)) flush(w);
    if (w->stream >= 0 && w->stream != w->rk->bg_stream) {
        pthread_mutex_lock(&w->rk->lock);
        w->rk->fg_left--;
        pthread_mutex_unlock(&w->rk->lock);
    }
    rt_guard_busy(w->run, w->thread, 0);
    rt_backend_thread_exit(w->run->be, w->thread);
    return NULL;
}

/* ---- steps ---- */

static uint32_t max_streams(const plan *p) {
    uint32_t n = 1;
    for (uint32_t k = 0; k < p->n_programs; k++)
        if (p->programs[k].n_streams > n) n = p->programs[k].n_streams;
    return n;
}

/* ---- f16 and bf16 buffers (the cuda backend) ----
 *
 * The initializers and data sources make f32 values (data.c); a 16-bit float buffer gets them
 * made in the staging buffer as f32, narrowed in place to its dtype (round to nearest even),
 * then uploaded. Its fp32 master copy ("NAME:master", optimizer state) starts at the param's
 * f32 values, as mixed-precision training starts. */

static bool is_half(uint8_t dtype) { return dtype == 1 || dtype == 2; }

static uint16_t half_of(float f, uint8_t dtype) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (dtype == 2) { // bfloat16: the top half, rounded
        if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40);
        return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
    }
    uint32_t sign = u >> 16 & 0x8000u, man = u & 0x7fffffu;
    int e = (int)(u >> 23 & 0xff) - 127 + 15;
    if ((u >> 23 & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) { // subnormal or zero
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        int shift = 14 - e;
        uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        return (uint16_t)(sign | (h + (rem > mid || (rem == mid && (h & 1)))));
    }
    uint32_t h = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fffu;
    return (uint16_t)(sign | (h + (rem > 0x1000u || (rem == 0x1000u && (h & 1)))));
}

static float float_of(uint16_t h, uint8_t dtype) {
    uint32_t u;
    if (dtype == 2) {
        u = (uint32_t)h << 16;
    } else {
        uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = h >> 10 & 0x1f, man = h & 0x3ffu;
        if (e == 0 && man) { // subnormal: normalize
            int k = -1;
            do man <<= 1, k++; while (!(man & 0x400u));
            u = sign | (uint32_t)(127 - 15 - k) << 23 | (man & 0x3ffu) << 13;
        } else {
            u = sign | (e == 0 ? 0 : e == 31 ? 0x7f800000u : (e + 127 - 15) << 23) | man << 13;
        }
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// n f32 values at p narrowed to dtype in place (front to back: element i's two bytes land on
// bytes already read).
static void narrow(void *p, int64_t n, uint8_t dtype) {
    const float *f = p;
    uint16_t *h = p;
    for (int64_t i = 0; i < n; i++) {
        float x = f[i];
        h[i] = half_of(x, dtype);
    }
}

// The param whose copy state tensor t starts as, or NULL: the fp32 master copy ("NAME:master"),
// and a background program's EASGD centre and BMUF global model (compiler/bgsync.c).
static const plan_tensor *master_of(const plan *p, const plan_tensor *t) {
    static const char *const suffixes[] = {":master", ":easgd_center", ":bmuf_global"};
    size_t n = t->name ? strlen(t->name) : 0, k = 0;
    for (size_t j = 0; j < sizeof suffixes / sizeof suffixes[0] && !k; j++) {
        size_t m = strlen(suffixes[j]);
        if (n > m && !strcmp(t->name + n - m, suffixes[j])) k = m;
    }
    if (t->kind != PLAN_T_STATE || !k) return NULL;
    for (uint32_t i = 0; i < p->n_tensors; i++) {
        const plan_tensor *q = &p->tensors[i];
        if (q->kind == PLAN_T_PARAM && q->name && strlen(q->name) == n - k && !strncmp(q->name, t->name, n - k)) return q;
    }
    return NULL;
}

// The view of a buffer slot of rank rk whose data is the run's host staging buffer.
static void staged_view(const rt_run *r, const rt_rank *rk, uint32_t bi, rt_view *v) {
    rt_buffer_view(r, rk, bi, 0, 0, v);
    v->data = r->stage;
    v->dtype = (uint8_t)rt_elem_dtype(rk, &rk->pg->buffers[bi]);
}

/* ---- prefetch: the next step's inputs while the device runs this one ----
 *
 * Synthetic inputs are drawn on the host (data.c). Drawn at the start of a step, they kept an
 * asynchronous device idle: dlrm's step (2048 samples: 27 k normals, 66 k ids) took 5.9 ms on an
 * H100 with them, 4.2 ms without. So once a step's walkers have issued its work, and before the
 * backend waits for it, the host draws the next step's inputs into blocks of its own (never
 * r->stage, which a CPU background round may use meanwhile); the next step writes them from
 * there. On the cpu backends, whose walkers return with the work done, each local rank's draws
 * run on a thread of its own beside the step's walkers instead: drawn after the step, one rank
 * after another, they were a serial quarter of dlrm-ctr's work on 2 ranks. The same values
 * either way; nothing is drawn past rt_options.steps (teacher labels count what is drawn); a
 * draw that fails is left to the next step, which draws again and reports it. */

// The micro-batch slots that buffer bi of rank rk fills as an input each step (0: not an input).
// Input slot k counts them in buffer order, micro-batch within buffer.
static uint32_t input_mbs(const rt_run *r, const rt_rank *rk, uint32_t bi) {
    const plan_buffer *x = &rk->pg->buffers[bi];
    if (!(x->flags & PLAN_BUF_PERSIST) || x->tensor == PLAN_NONE || r->p->tensors[x->tensor].kind != 0) return 0;
    return r->p->meta.micro_batches < x->mb_slots ? r->p->meta.micro_batches : x->mb_slots;
}

// Draws input slot (bi, mb) of rank rk for step `step` into *block (allocated on first use),
// narrowed to the buffer's dtype as prepare_rank writes it.
static int draw_input(const rt_run *r, const rt_rank *rk, uint32_t bi, uint32_t mb, uint64_t step, void **block, char *err,
                      size_t err_n) {
    const plan_buffer *b = &rk->pg->buffers[bi];
    rt_view v;
    rt_buffer_view(r, rk, bi, 0, 0, &v);
    v.dtype = (uint8_t)rt_elem_dtype(rk, b);
    // The draw writes f32 (f64) or int32 elements, narrowed in place after; the slot may be larger.
    size_t eb = rt_dtype_bytes(v.dtype) < 4 ? 4 : rt_dtype_bytes(v.dtype), n = (size_t)rt_view_numel(&v);
    size_t bytes = n * eb > rt_slot_bytes(rk, b) ? n * eb : (size_t)rt_slot_bytes(rk, b);
    if (!*block && !(*block = calloc(bytes ? bytes : 1, 1))) return say(err, err_n, "out of memory for the next step's inputs"), -1;
    v.data = *block;
    if (rt_fill_input(r->p, &r->p->tensors[b->tensor], r->o.seed, step, mb, r->o.corpus, &v, err, err_n)) return -1;
    if (is_half(b->dtype)) narrow(*block, (int64_t)n, b->dtype);
    return 0;
}

// Rank q's inputs of the next step into r->next_in[q]; false when a draw failed.
static bool prefetch_rank(rt_run *r, int q) {
    char err[256];
    const rt_rank *rk = &r->ranks[q];
    if (!r->next_in[q]) {
        uint32_t n = 0;
        for (uint32_t bi = 0; bi < rk->pg->n_buffers; bi++) n += input_mbs(r, rk, bi);
        if (!(r->next_in[q] = calloc(n + 1u, sizeof(void *)))) return false;
    }
    uint32_t k = 0;
    for (uint32_t bi = 0; bi < rk->pg->n_buffers; bi++)
        for (uint32_t mb = 0, n = input_mbs(r, rk, bi); mb < n; mb++, k++)
            if (draw_input(r, rk, bi, mb, r->steps + 1, &r->next_in[q][k], err, sizeof err)) return false;
    return true;
}

static void prefetch_inputs(rt_run *r) {
    r->next_step = UINT64_MAX;
    for (int q = 0; q < r->world; q++)
        if (r->ranks[q].local && !prefetch_rank(r, q)) return;
    r->next_step = r->steps + 1;
}

typedef struct drawer {
    rt_run *r;
    int rank;
    bool ok;
} drawer;

static void *drawer_main(void *arg) {
    drawer *d = arg;
    d->ok = prefetch_rank(d->r, d->rank);
    return NULL;
}

/* ---- the crew ----
 *
 * The threads that run a step's walkers and drawers, started when a step first needs them and
 * kept until rt_run_free: a step posts one job per thread and waits until all are done. (A step
 * used to create and join its threads; on the cpu backend, at one rank with a background
 * stream, that cost about a fifth of a 1 ms step: clone, a fresh stack, a migration to
 * wherever the new thread first ran.) */

typedef struct crew_job {
    void *(*fn)(void *);
    void *arg;
} crew_job;

typedef struct crew_seat {      // one thread of the crew (its address stays put: the thread holds it)
    struct rt_crew *c;
    pthread_t th;
    crew_job job;               // this batch's (fn NULL: none)
    uint64_t seen;              // the batch it has taken
} crew_seat;

struct rt_crew {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    crew_seat **seat;
    int n, cap;
    uint64_t gen;               // batches posted
    int pending;                // jobs of the batch not finished
    bool quit;
};

static void *crew_main(void *arg) {
    crew_seat *s = arg;
    struct rt_crew *c = s->c;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->quit && c->gen == s->seen) pthread_cond_wait(&c->go, &c->mu);
        if (c->quit) break;
        s->seen = c->gen;
        crew_job j = s->job;
        pthread_mutex_unlock(&c->mu);
        if (j.fn) j.fn(j.arg);
        pthread_mutex_lock(&c->mu);
        if (j.fn && --c->pending == 0) pthread_cond_signal(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

// Starts threads until the crew has k; returns how many it has (fewer where the system refuses).
static int crew_grow(rt_run *r, int k) {
    struct rt_crew *c = r->crew;
    if (!c) {
        if (!(c = calloc(1, sizeof *c))) return 0;
        pthread_mutex_init(&c->mu, NULL), pthread_cond_init(&c->go, NULL), pthread_cond_init(&c->done, NULL);
        r->crew = c;
    }
    if (k > c->cap) { // no thread reads the array between batches
        crew_seat **seat = realloc(c->seat, sizeof *seat * (size_t)k);
        if (seat) c->seat = seat, c->cap = k;
    }
    while (c->n < k && c->n < c->cap) {
        crew_seat *s = calloc(1, sizeof *s);
        if (!s) break;
        s->c = c, s->seen = c->gen;
        if (pthread_create(&s->th, NULL, crew_main, s)) {
            free(s);
            break;
        }
        c->seat[c->n++] = s;
    }
    return c->n < k ? c->n : k;
}

// Runs jobs[0..k) on the crew's first k threads (crew_grow made them) and waits for all of them.
static void crew_run(rt_run *r, const crew_job *jobs, int k) {
    struct rt_crew *c = r->crew;
    if (k == 0) return;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++) c->seat[i]->job = i < k ? jobs[i] : (crew_job){0};
    c->pending = k;
    c->gen++;
    pthread_cond_broadcast(&c->go);
    while (c->pending > 0) pthread_cond_wait(&c->done, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static void crew_free(struct rt_crew *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->quit = true;
    pthread_cond_broadcast(&c->go);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < c->n; i++) pthread_join(c->seat[i]->th, NULL), free(c->seat[i]);
    pthread_mutex_destroy(&c->mu), pthread_cond_destroy(&c->go), pthread_cond_destroy(&c->done);
    free(c->seat), free(c);
}

// Zeroes the outputs of accumulating operators and fills the inputs of rank rk.
static int prepare_rank(rt_run *r, rt_rank *rk, char *err, size_t err_n) {
    const plan_program *pg = rk->pg;
    bool zeroed = false;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        if (in->kind != PLAN_I_COMPUTE || in->attrs == PLAN_NONE || !pg->attrs[in->attrs].i[PLAN_AI_ACCUMULATE]) continue;
        for (uint32_t j = 0; j < in->nargs; j++) {
            uint32_t bi = pg->args[in->args + j];
            const plan_buffer *b = &pg->buffers[bi];
            if (!(plan_arg_role(pg, in, j) & PLAN_ARG_WRITE)) continue;
            if (!zeroed) memset(r->stage, 0, r->stage_bytes), zeroed = true;
            for (uint32_t m = 0; m < b->mb_slots; m++)
                for (uint32_t l = 0; l < b->layer_slots; l++)
                    if (rt_buffer_write(r, rk, bi, m, l, r->stage, err, err_n)) return -1;
        }
    }
    void **ready = r->next_step == r->steps && r->next_in ? r->next_in[rk - r->ranks] : NULL;
    uint32_t k = 0;
    for (uint32_t bi = 0; bi < pg->n_buffers; bi++)
        for (uint32_t mb = 0, n = input_mbs(r, rk, bi); mb < n; mb++, k++) {
            void *src = ready ? ready[k] : r->stage;
            if (!ready && draw_input(r, rk, bi, mb, r->steps, &src, err, err_n)) return -1;
            if (rt_buffer_write(r, rk, bi, mb, 0, src, err, err_n)) return -1;
        }
    return 0;
}

// The step's loss: per micro-batch, the sum over the ranks that hold the loss's buffer of their
// pieces, one rank per replica (R axes: the lowest coordinate among the holders), averaged.
static int read_loss(const rt_run *r, double *loss, char *err, size_t err_n) {
    const plan *p = r->p;
    *loss = NAN;
    if (p->meta.loss == PLAN_NONE) return 0;
    uint32_t lo[PLAN_MAX_AXES];
    for (int a = 0; a < PLAN_MAX_AXES; a++) lo[a] = UINT32_MAX;
    for (int q = 0; q < r->world; q++)
        if (r->loss_bufs[p->ranks[q].program] != PLAN_NONE)
            for (uint32_t a = 0; a < p->meta.n_axes; a++)
                if (r->ranks[q].coord[a] < lo[a]) lo[a] = r->ranks[q].coord[a];
    double sum = 0;
    for (int q = 0; q < r->world; q++) {
        const rt_rank *rk = &r->ranks[q];
        uint32_t bi = r->loss_bufs[p->ranks[q].program];
        if (bi == PLAN_NONE || !rk->local) continue;
        const plan_buffer *b = &rk->pg->buffers[bi];
        bool counted = true;
        for (uint32_t a = 0; a < p->meta.n_axes; a++)
            if (b->shard.map[a] == PLAN_SHARD_R && rk->coord[a] != lo[a]) counted = false;
        if (!counted) continue;
        for (uint32_t mb = 0; mb < p->meta.micro_batches; mb++) {
            union { float f; double d; uint16_t h; } x;
            uint64_t n = rk->scale == 2 ? 8 : is_half(b->dtype) ? 2 : 4;
            if (rt_backend_download(r->be, q, &x, rt_slot_addr(rk, b, mb, 0), n, err, err_n)) return -1;
            sum += n == 8 ? x.d : n == 2 ? (double)float_of(x.h, b->dtype) : x.f;
        }
    }
    if (rt_backend_host_sum(r->be, &sum, 1, err, err_n)) return -1;
    *loss = sum / p->meta.micro_batches;
    return 0;
}

static uint32_t most_events(const plan *p) {
    uint32_t n = 0;
    for (uint32_t k = 0; k < p->n_programs; k++)
        if (p->programs[k].n_events > n) n = p->programs[k].n_events;
    return n;
}

// The counters one walker needs (events, sends and receives per peer and tag, collectives per group).
static size_t walker_counters(const rt_run *r) {
    return most_events(r->p) + 2 * (size_t)r->world * PLAN_MAX_TAGS + r->p->n_groups + 1;
}

// Gives walker x its counters from c on; returns the first counter past them.
static uint64_t *attach_counters(const rt_run *r, walker *x, uint64_t *c) {
    x->ev_seen = c, c += most_events(r->p);
    x->sent = c, c += (size_t)r->world * PLAN_MAX_TAGS;
    x->received = c, c += (size_t)r->world * PLAN_MAX_TAGS;
    x->colls = c, c += r->p->n_groups + 1;
    return c;
}

// Where rounds outlive the steps (see "background rounds"): issues every local rank's round of
// this step, after the step's end and loss, and marks its end.
static int run_rounds(rt_run *r, char *err, size_t err_n) {
    if (r->be->thread_per_stream || !rt_backend_rounds_outlive_steps(r->be)) return 0;
    for (int q = 0; q < r->world; q++) {
        rt_rank *rk = &r->ranks[q];
        if (!rk->local || rk->bg_loop < 0) continue;
        walker w = {.run = r, .rk = rk, .stream = -1, .thread = q, .round = true};
        uint64_t *counters = calloc(walker_counters(r), sizeof *counters);
        if (!counters) return say(err, err_n, "out of memory issuing rank %d's background round", q), -1;
        attach_counters(r, &w, counters);
        uint64_t before = rk->bg_rounds;
        rt_exec x = exec_of(&w, (int)rk->bg_stream);
        char why[512] = "";
        int rc = run_background(&w, (uint32_t)rk->bg_loop, (frame){-1, -1, 0});
        if (!rc) rc = flush(&w);
        if (!rc && rk->bg_rounds != before && rt_backend_round_end(r->be, &x, why, sizeof why)) rc = rt_backend_fail(r->be, "%s", why);
        free(w.pend), free(counters);
        const char *e = rt_backend_error(r->be);
        if (rc || e) return say(err, err_n, "step %llu: background round: %s", (unsigned long long)r->steps + 1, e ? e : why), -1;
    }
    return 0;
}

int rt_run_drain(const rt_run *r, char *err, size_t err_n) {
    char why[512] = "";
    if (!r->be || !rt_backend_rounds_outlive_steps(r->be) || !rt_backend_round_drain(r->be, why, sizeof why)) return 0;
    say(err, err_n, "background round: %s", why);
    return -1;
}

// After a step (or its failure): the trace's slices of every local rank become times, and the
// step's span is recorded.
static void trace_step_end(rt_run *r, uint64_t step, double t0) {
    rt_trace *t = r->o.trace;
    char why[256];
    for (int q = 0; q < r->world; q++) {
        rt_rank *rk = &r->ranks[q];
        if (!rk->local) continue;
        if (rt_backend_has_stamps(r->be)) rt_trace_resolve(t, q, r->be, rk->trace_marks, t0, why, sizeof why);
        else rt_trace_settle(t, q);
        rk->trace_marks = 0;
    }
    rt_trace_step(t, step, t0, rt_trace_since(t, rt_clock_s()));
}

static int run_step(rt_run *r, double *loss, char *err, size_t err_n);

int rt_run_step(rt_run *r, double *loss, char *err, size_t err_n) {
    if (!r->o.trace) return run_step(r, loss, err, err_n);
    double t0 = rt_trace_since(r->o.trace, rt_clock_s());
    uint64_t step = r->steps + 1;
    int rc = run_step(r, loss, err, err_n);
    trace_step_end(r, step, t0); // a failed step's slices are kept too
    return rc;
}

static int run_step(rt_run *r, double *loss, char *err, size_t err_n) {
    *loss = NAN;
    for (int q = 0; q < r->world; q++)
        if (r->ranks[q].local && prepare_rank(r, &r->ranks[q], err, err_n)) return -1;
    // One walker per stream of every rank (thread_per_stream), else one per rank.
    bool per_stream = r->be->thread_per_stream;
    uint32_t ns = per_stream ? max_streams(r->p) : 1;
    int n = r->world * (int)ns, started = 0;
    // The next step's inputs: drawn beside the walkers (cpu), or after they issued (asynchronous).
    bool pre = r->next_in && (!r->o.steps || r->steps_here + 1 < r->o.steps), beside = pre && per_stream;
    walker *w = calloc((size_t)n, sizeof *w);
    crew_job *jobs = calloc((size_t)(n + (beside ? r->world : 0)), sizeof *jobs);
    drawer *dr = beside ? calloc((size_t)r->world, sizeof *dr) : NULL;
    uint64_t *counters = calloc((size_t)n * walker_counters(r), sizeof *counters);
    if (!w || !jobs || !counters || (beside && !dr)) {
        free(w), free(jobs), free(dr), free(counters);
        say(err, err_n, "out of memory starting step %llu", (unsigned long long)r->steps + 1);
        return -1;
    }
    int live = 0;
    for (int q = 0; q < r->world; q++) {
        rt_rank *rk = &r->ranks[q];
        live += !rk->local ? 0 : per_stream ? (int)rk->pg->n_streams : 1;
        rk->fg_left = per_stream ? (int)rk->pg->n_streams - (rk->bg_stream >= 0) : 0;
    }
    rt_backend_step_begin(r->be, live);
    int have = crew_grow(r, live + (beside ? r->world : 0));
    uint64_t *c = counters;
    for (int q = 0; q < r->world; q++)
        for (uint32_t s = 0; r->ranks[q].local && s < (per_stream ? r->ranks[q].pg->n_streams : 1); s++) {
            walker *x = &w[started];
            *x = (walker){.run = r, .rk = &r->ranks[q], .stream = per_stream ? (int)s : -1, .thread = q * (int)ns + (int)s};
            c = attach_counters(r, x, c);
            rt_guard_walker(r, x->thread, q, x->stream);
            if (started >= have) {
                rt_backend_fail(r->be, "cannot start a thread for rank %d stream %u", q, s);
                rt_backend_thread_exit(r->be, x->thread);
                continue;
            }
            jobs[started++] = (crew_job){walker_main, x};
        }
    int drawing = 0;
    for (int q = 0; beside && q < r->world; q++) {
        dr[q] = (drawer){.r = r, .rank = q, .ok = !r->ranks[q].local};
        if (r->ranks[q].local && started + drawing < have) jobs[started + drawing++] = (crew_job){drawer_main, &dr[q]};
    }
    rt_guard_step(r, true);
    crew_run(r, jobs, started + drawing);
    rt_guard_step(r, false);
    for (int t = 0; t < started; t++) free(w[t].pend);
    if (beside) {
        bool ok = true;
        for (int q = 0; q < r->world; q++) ok &= dr[q].ok;
        r->next_step = ok ? r->steps + 1 : UINT64_MAX;
    }
    free(w), free(jobs), free(dr), free(counters);
    if (pre && !beside && !rt_backend_error(r->be)) prefetch_inputs(r); // while the device runs the step
    char end_err[512] = "";
    int end_rc = rt_backend_step_end(r->be, end_err, sizeof end_err);
    const char *e = rt_backend_error(r->be);
    if (rt_guard_found(r)) return rt_guard_step_end(r, NAN, err, err_n); // an operator wrote a NaN or inf
    if (e || end_rc) {
        say(err, err_n, "step %llu: %s", (unsigned long long)r->steps + 1, e ? e : end_err);
        return -1;
    }
    int rc = read_loss(r, loss, err, err_n);
    if (!rc) rc = run_rounds(r, err, err_n);
    r->steps++, r->steps_here++;
    return rc ? rc : rt_guard_step_end(r, *loss, err, err_n);
}

/* ---- setting up ---- */

// Per program, the buffer of the last computed instruction that writes the loss tensor (the loss
// is read from it): a loss operator's output, or that of whatever operator computes a composite
// loss from losses (`add`, `scale`, ...).
static int find_loss_buffers(rt_run *r, char *err, size_t err_n) {
    const plan *p = r->p;
    for (uint32_t k = 0; k < p->n_programs; k++) {
        const plan_program *pg = &p->programs[k];
        r->loss_bufs[k] = PLAN_NONE;
        if (p->meta.loss == PLAN_NONE) continue;
        for (uint32_t i = 0; i < pg->n_insns; i++) {
            const plan_insn *in = &pg->insns[i];
            if (in->kind != PLAN_I_COMPUTE || !in->nargs) continue;
            uint32_t b = pg->args[in->args + in->nargs - 1];
            if (pg->buffers[b].tensor == p->meta.loss) r->loss_bufs[k] = b;
        }
        uint32_t b = r->loss_bufs[k];
        if (b != PLAN_NONE && pg->buffers[b].mb_slots < p->meta.micro_batches) {
            say(err, err_n, "program %u \"%s\": the loss buffer %u keeps %u slots for %u micro-batches, so the step's loss cannot be read",
                k, pg->name ? pg->name : "", b, pg->buffers[b].mb_slots, p->meta.micro_batches);
            return -1;
        }
    }
    return 0;
}

// What the CPU backend cannot run: f16/bf16 data, inputs whose data changes per micro-batch
// held in fewer slots than there are micro-batches.
static int check_supported(const plan *p, bool halves, char *err, size_t err_n) {
    for (uint32_t k = 0; k < p->n_programs; k++) {
        const plan_program *pg = &p->programs[k];
        for (uint32_t bi = 0; bi < pg->n_buffers; bi++) {
            const plan_buffer *b = &pg->buffers[bi];
            const plan_tensor *t = b->tensor == PLAN_NONE ? NULL : &p->tensors[b->tensor];
            if (b->dtype != 0 && b->dtype != 3 && !(halves && is_half(b->dtype))) {
                say(err, err_n, "program %u: buffer %u (%s) is %s: the cpu backend runs f32 and i32 plans (compile the model with \"dtype\": \"f32\")",
                    k, bi, t && t->name ? t->name : "scratch", plan_dtype_name(b->dtype));
                return -1;
            }
            if (t && t->kind == 0 && (b->flags & PLAN_BUF_PERSIST) && t->source != PLAN_DATA_ARANGE &&
                b->mb_slots < p->meta.micro_batches) {
                say(err, err_n, "program %u: input buffer %u (\"%s\") has %u slots for %u micro-batches", k, bi,
                    t->name ? t->name : "", b->mb_slots, p->meta.micro_batches);
                return -1;
            }
        }
    }
    return 0;
}

// Draws the params of rank rk (optimizer state stays zero: arenas start zeroed).
static int init_state(rt_run *r, rt_rank *rk, char *err, size_t err_n) {
    const plan_program *pg = rk->pg;
    for (uint32_t bi = 0; bi < pg->n_buffers; bi++) {
        const plan_buffer *b = &pg->buffers[bi];
        if (!(b->flags & PLAN_BUF_PERSIST) || b->tensor == PLAN_NONE) continue;
        const plan_tensor *t = &r->p->tensors[b->tensor];
        const plan_tensor *src = t->kind == PLAN_T_PARAM ? t : master_of(r->p, t); // a param, or its f32 master copy
        if (!src) continue;
        for (uint32_t l = 0; l < b->layer_slots; l++) {
            rt_view v;
            staged_view(r, rk, bi, &v);
            rt_init_param(src, r->o.seed, b->layer_base + l, &v);
            if (is_half(b->dtype)) narrow(r->stage, rt_view_numel(&v), b->dtype);
            for (uint32_t m = 0; m < b->mb_slots; m++)
                if (rt_buffer_write(r, rk, bi, m, l, r->stage, err, err_n)) return -1;
        }
    }
    return 0;
}

// The largest buffer slot of any program (the staging buffer's size, before f64's doubling); a
// 16-bit buffer's values are made as f32 there, so it counts twice its bytes.
static uint64_t largest_slot(const plan *p) {
    uint64_t n = 8;
    for (uint32_t k = 0; k < p->n_programs; k++)
        for (uint32_t bi = 0; bi < p->programs[k].n_buffers; bi++) {
            const plan_buffer *b = &p->programs[k].buffers[bi];
            uint64_t need = b->bytes * (is_half(b->dtype) ? 2 : 1);
            if (need > n) n = need;
        }
    return n;
}

// The rank's background loop and its stream (plan_check allows one per program in practice:
// the last one found counts), and whether its rounds lock against the optimizer.
static void find_background(rt_rank *rk) {
    rk->bg_loop = rk->bg_stream = -1;
    for (uint32_t i = 0; i < rk->pg->n_insns; i++) {
        const plan_insn *in = &rk->pg->insns[i];
        if (in->kind != PLAN_I_LOOP || !plan_loop_is_background(in->code)) continue;
        rk->bg_loop = (int32_t)i, rk->bg_stream = rk->pg->insns[i + 1].stream;
        rk->bg_locked = in->code == PLAN_LOOP_BACKGROUND;
    }
}

static rt_backend *backend_init(const plan *p, const rt_options *o, char *err, size_t err_n) {
    const char *name = o->backend ? o->backend : "cpu";
    uint32_t n_events = 1;
    for (uint32_t k = 0; k < p->n_programs; k++)
        if (p->programs[k].n_events > n_events) n_events = p->programs[k].n_events;
    if (!strcmp(name, "cpu-mpi")) return rt_backend_mpi_init(p, o, max_streams(p), n_events, err, err_n); // one rank per process
    bool serial = !strcmp(name, "cpu-serial");
    unsigned flags = (serial ? RT_CPU_SERIAL : 0) | (o->f64 ? RT_CPU_F64 : 0) | (o->emulate_network ? RT_CPU_NETWORK : 0);
    if (serial || !strcmp(name, "cpu")) {
        rt_backend *b = rt_backend_cpu_init((int)p->meta.world, max_streams(p), n_events, o->timeout_s, flags, err, err_n);
        if (b) rt_backend_cpu_dilate(b, o->dilation);
        return b;
    }
#ifdef PLANCC_HAVE_CUDA
    if (!strcmp(name, "cuda")) return rt_backend_cuda_init(p, o, err, err_n);
    say(err, err_n, "no backend named \"%s\" (this build has: cpu, cpu-serial, cuda)", name);
#else
    say(err, err_n, "no backend named \"%s\" (this build has: cpu, cpu-serial)", name);
#endif
    return NULL;
}

int rt_run_init(rt_run *r, const plan *p, const rt_options *o, char *err, size_t err_n) {
    memset(r, 0, sizeof *r);
    r->p = p, r->o = *o, r->world = (int)p->meta.world;
    if (o->one_rank && (o->rank < 0 || o->rank >= r->world)) {
        say(err, err_n, "rank %d is outside the plan's %d ranks", o->rank, r->world);
        return -1;
    }
    // The cuda backend runs f16 and bf16 buffers too.
    if (check_supported(p, o->backend && !strcmp(o->backend, "cuda"), err, err_n)) return -1;
    r->ranks = calloc((size_t)r->world, sizeof *r->ranks);
    r->loss_bufs = calloc(p->n_programs ? p->n_programs : 1, sizeof *r->loss_bufs);
    r->stage_bytes = largest_slot(p) * (o->f64 ? 2 : 1);
    r->stage = r->stage_bytes <= SIZE_MAX ? malloc((size_t)r->stage_bytes) : NULL;
    r->next_in = calloc((size_t)r->world, sizeof *r->next_in);
    r->next_step = UINT64_MAX;
    if (!r->ranks || !r->loss_bufs || !r->stage || !r->next_in) {
        say(err, err_n, "out of memory setting up %d ranks", r->world);
        goto fail;
    }
    if (!(r->be = backend_init(p, o, err, err_n)) || find_loss_buffers(r, err, err_n) ||
        rt_guard_init(r, r->world * (int)max_streams(p), err, err_n))
        goto fail;
    for (int q = 0; q < r->world; q++) {
        rt_rank *rk = &r->ranks[q];
        rk->rank = q;
        rk->pg = &p->programs[p->ranks[q].program];
        rk->local = !o->one_rank || q == o->rank;
        rk->scale = o->f64 ? 2 : 1;
        find_background(rk);
        pthread_mutex_init(&rk->lock, NULL);
        rk->lock_init = true;
        for (int a = (int)p->meta.n_axes - 1, rest = q; a >= 0; a--) rk->coord[a] = (uint32_t)rest % p->meta.mesh[a], rest /= (int)p->meta.mesh[a];
        if (!rk->local) continue;
        if (!(rk->arena = rt_backend_arena_alloc(r->be, q, rk->pg->arena_bytes * rk->scale, err, err_n)) || init_state(r, rk, err, err_n))
            goto fail;
    }
    return 0;
fail:
    rt_run_free(r);
    return -1;
}

void rt_run_free(rt_run *r) {
    if (!r) return;
    rt_guard_free(r);
    for (int q = 0; r->ranks && q < r->world; q++) {
        rt_backend_arena_free(r->be, q, r->ranks[q].arena);
        if (r->ranks[q].lock_init) pthread_mutex_destroy(&r->ranks[q].lock);
    }
    for (int q = 0; r->next_in && q < r->world; q++) {
        for (uint32_t k = 0; r->next_in[q] && r->next_in[q][k]; k++) free(r->next_in[q][k]);
        free(r->next_in[q]);
    }
    free(r->next_in);
    free(r->ranks);
    free(r->loss_bufs);
    free(r->stage);
    crew_free(r->crew);
    rt_backend_free(r->be);
    memset(r, 0, sizeof *r);
}
