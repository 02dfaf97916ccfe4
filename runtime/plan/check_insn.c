/*
 * check_insn.c: the verifier's instructions, each on its own (after plan_validate, so every
 * index is in range):
 *   - every instruction has the arity its kind (or its operator, from runtime/ops.def) wants;
 *     send/recv name a peer other than themselves; a wait follows a record of its event;
 *   - a collective's buffers have the sizes its kind implies for its group (runtime/colls.def's
 *     pieces: all_gather out = in x n, reduce_scatter in = out x n, the others in = out); a
 *     bucket (several pairs) has one dtype and each buffer once; a chunk (attrs) is a one-pair
 *     in-place all_reduce of a range inside its buffer;
 *   - a collective on a group over mesh axes moves its tensor from one shard to the one its kind
 *     makes (colls.def's shards: all_reduce V -> R, all_gather D(i) -> R, reduce_scatter
 *     V -> D(i), all_to_all D(i) -> D(j), broadcast unchanged) on the group's axes and keeps
 *     the others; in place, only the kinds colls.def lets run in place (all_reduce), declared R
 *     there; and its pieces nest: an axis of the group that splits a dimension is the last axis
 *     to split it (no later axis off the group does), so a rank's piece on one side lies inside
 *     its piece on the other;
 *   - a copy between tensor buffers keeps its tensor and takes a piece of src (an axis R -> D(i)
 *     or V, dst's splits of each dimension extending src's); a copy with a scratch buffer copies
 *     equal sizes;
 *   - the micro-batch an instruction touches (the innermost mb loop's variable + mb_delta, 0
 *     outside any mb loop) lies in 0..micro_batches-1.
 * The walk that visits them also bounds the instructions a program executes per step (loops
 * multiplied out), which the later walks visit.
 */
#include "checker.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

// The arity of instruction i: an operator's inputs and outputs (ops.def), pairs for a collective
// (in_1..in_k, out_1..out_k: a bucket of k), 2 for a copy (src, dst), 1 for send and recv, none
// for the others.
static plan_status check_arity(checker *c, uint32_t k, uint32_t i) {
    const plan_insn *in = &c->p->programs[k].insns[i];
    if (in->kind == PLAN_I_COMPUTE) {
        const check_op_arity *a = &check_op_arities[in->code];
        int n = in->nargs;
        bool ok = a->out >= 0 ? n - a->out >= a->in_min && n - a->out <= a->in_max : n > a->in_max;
        if (ok) return PLAN_OK;
        if (a->out >= 0)
            return check_ifail(c, k, i, "%d buffers, but it takes %d to %d inputs and %d output%s", n, a->in_min, a->in_max,
                               a->out, a->out == 1 ? "" : "s");
        return check_ifail(c, k, i, "%d buffers, but it takes %d inputs and at least one output", n, a->in_max);
    }
    if (in->kind == PLAN_I_COLL) {
        if (in->nargs >= 2 && in->nargs % 2 == 0 && in->nargs / 2 <= PLAN_MAX_BUCKET) return PLAN_OK;
        return check_ifail(c, k, i, "%u buffers, but it takes pairs (in..., out...): 2 to %d, an even number", in->nargs,
                           2 * PLAN_MAX_BUCKET);
    }
    static const int want[PLAN_I_KIND_COUNT] = {[PLAN_I_SEND] = 1, [PLAN_I_RECV] = 1, [PLAN_I_COPY] = 2};
    if (in->nargs != want[in->kind])
        return check_ifail(c, k, i, "%u buffers, but it takes %d", in->nargs, want[in->kind]);
    return PLAN_OK;
}

// A collective's buffers against its kind's pieces (runtime/colls.def) and its group: GATHER
// (all_gather) out = in x n, SCATTER (reduce_scatter) in = out x n, the others in = out.
static plan_status check_coll_sizes(checker *c, uint32_t k, uint32_t i, uint32_t j) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    uint64_t n = plan_group_size(c->p, (uint32_t)in->a);
    uint32_t np = in->nargs / 2u;
    uint64_t bi = pg->buffers[pg->args[in->args + j]].bytes, bo = pg->buffers[pg->args[in->args + np + j]].bytes;
    const char *name = plan_coll_name(in->code);
    plan_pieces pieces = plan_coll_lookup(in->code)->pieces;
    bool gather = pieces == PLAN_PIECES_GATHER, scatter = pieces == PLAN_PIECES_SCATTER;
    uint64_t want_in = bi, want_out = bi; // 0: the product overflows
    if (gather && __builtin_mul_overflow(bi, n, &want_out)) want_out = 0;
    if (scatter) {
        want_out = bo;
        if (__builtin_mul_overflow(bo, n, &want_in)) want_in = 0;
    }
    if (bi == want_in && bo == want_out) return PLAN_OK;
    char pair[32] = "";
    if (np > 1) snprintf(pair, sizeof pair, "pair %u: ", j);
    return check_ifail(c, k, i, "%sin %llu bytes, out %llu bytes, but %s on group %d (%llu ranks) wants %s", pair,
                       (unsigned long long)bi, (unsigned long long)bo, name, in->a, (unsigned long long)n,
                       gather ? "out = in x ranks" : scatter ? "in = out x ranks" : "in = out");
}

// The shard rules of runtime/colls.def (its shards column), in words.
static const char *const shard_rules[] = {
    [PLAN_SHARDS_V_R] = "V -> R",          [PLAN_SHARDS_D_R] = "D(i) -> R",
    [PLAN_SHARDS_V_D] = "V -> D(i)",       [PLAN_SHARDS_D_D] = "D(i) -> D(j), i != j",
    [PLAN_SHARDS_KEEP] = "the same shard in and out", [PLAN_SHARDS_ANY] = "",
};

// Whether a collective of this kind moves a group axis from shard value `in` to `out`; its rule
// in words.
static bool coll_moves(uint32_t coll, uint8_t in, uint8_t out, const char **rule) {
    bool din = in >= PLAN_SHARD_D(0), dout = out >= PLAN_SHARD_D(0);
    plan_shards shards = plan_coll_lookup(coll)->shards;
    *rule = shard_rules[shards];
    switch (shards) {
    case PLAN_SHARDS_V_R: return in == PLAN_SHARD_V && out == PLAN_SHARD_R;
    case PLAN_SHARDS_D_R: return din && out == PLAN_SHARD_R;
    case PLAN_SHARDS_V_D: return in == PLAN_SHARD_V && dout;
    case PLAN_SHARDS_D_D: return din && dout && in != out;
    case PLAN_SHARDS_KEEP: return in == out;
    default: return true; // ANY (send_recv): no rule
    }
}

// The kinds that may run in place (colls.def's inplace column), for messages: "all_reduce".
static const char *inplace_kinds(char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (uint32_t k = 0; k < PLAN_COLL_COUNT && at < n; k++)
        if (plan_coll_lookup(k)->inplace) at += (size_t)snprintf(buf + at, n - at, "%s%s", at ? " or " : "", plan_coll_name(k));
    return buf;
}

// An in-place collective on a tensor buffer (coll-shard): only a kind that runs in place
// (colls.def: all_reduce), and the buffer's declared shard (the result) is R on the group's axes.
static plan_status check_coll_in_place(checker *c, uint32_t k, uint32_t i, uint32_t b, uint32_t axes) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    char who[160], shard[80], ax[48], kinds[64];
    check_buffer_desc(p, pg, b, who, sizeof(who));
    check_shard_desc(p, pg->buffers[b].shard, shard, sizeof(shard));
    check_axes_text(p, axes, ax, sizeof(ax));
    if (!plan_coll_lookup(in->code)->inplace)
        return check_ifail(c, k, i, "in place on %s: only %s runs in place on a tensor buffer", who,
                           inplace_kinds(kinds, sizeof kinds));
    for (uint32_t a = 0; a < p->meta.n_axes; a++)
        if (axes >> a & 1u && pg->buffers[b].shard.map[a] != PLAN_SHARD_R)
            return check_ifail(c, k, i, "in place on %s, whose shard is %s: an in-place %s leaves the whole sum (R) on "
                               "the group's axes (%s)", who, shard, plan_coll_name(in->code), ax);
    return PLAN_OK;
}

// A bucket (a collective with several pairs): one dtype, each buffer in it once (a pair in place
// names its buffer as both in and out), so a backend may run it as one collective over the
// bucket's bytes where they lie back to back.
static plan_status check_bucket(checker *c, uint32_t k, uint32_t i) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    uint32_t np = in->nargs / 2u;
    const uint32_t *a = &pg->args[in->args];
    for (uint32_t j = 1; j < in->nargs; j++)
        if (pg->buffers[a[j]].dtype != pg->buffers[a[0]].dtype)
            return check_ifail(c, k, i, "buffers %u and %u of the bucket have different dtypes", a[0], a[j]);
    for (uint32_t j = 0; j < np; j++)
        for (uint32_t q = 0; q < j; q++)
            if (a[q] == a[j] || a[np + q] == a[np + j] || a[q] == a[np + j] || a[np + q] == a[j])
                return check_ifail(c, k, i, "pairs %u and %u of the bucket share a buffer", q, j);
    return PLAN_OK;
}

static plan_status check_coll_nesting(checker *c, uint32_t k, uint32_t i, plan_shard x, plan_shard y, uint32_t axes);

// The shards of a collective on a group over mesh axes (coll-shard), when both buffers hold a
// tensor: the same tensor; off the group's axes the same shard; on them what the kind makes.
static plan_status check_coll_shard(checker *c, uint32_t k, uint32_t i, uint32_t j) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    uint32_t np = in->nargs / 2u;
    uint32_t axes = p->groups[in->a].axes, bi = pg->args[in->args + j], bo = pg->args[in->args + np + j];
    const plan_buffer *x = &pg->buffers[bi], *y = &pg->buffers[bo];
    if (!axes || x->tensor == PLAN_NONE || y->tensor == PLAN_NONE) return PLAN_OK;
    if (bi == bo) return check_coll_in_place(c, k, i, bi, axes);
    if (x->tensor != y->tensor)
        return check_ifail(c, k, i, "in holds tensor %u \"%s\", out tensor %u \"%s\": a collective keeps its tensor", x->tensor,
                           check_name_or(p->tensors[x->tensor].name, "?"), y->tensor, check_name_or(p->tensors[y->tensor].name, "?"));
    char sx[80], sy[80], ax[48], vx[8], vy[8];
    check_shard_desc(p, x->shard, sx, sizeof(sx));
    check_shard_desc(p, y->shard, sy, sizeof(sy));
    check_axes_text(p, axes, ax, sizeof(ax));
    const char *name = plan_coll_name(in->code), *rule = "";
    for (uint32_t a = 0; a < p->meta.n_axes; a++) {
        uint8_t mx = x->shard.map[a], my = y->shard.map[a];
        bool on = axes >> a & 1u;
        if (on ? coll_moves(in->code, mx, my, &rule) : mx == my) continue;
        if (!on)
            return check_ifail(c, k, i, "on group %d (axes %s) in is %s, out is %s: off the group's axes a collective keeps the "
                               "shard, but on %.8s it goes %s -> %s", in->a, ax, sx, sy, p->meta.axis_names[a],
                               check_shard_value(mx, vx), check_shard_value(my, vy));
        return check_ifail(c, k, i, "on group %d (axes %s) in is %s, out is %s: %s wants %s on each of the group's axes, but on "
                           "%.8s it goes %s -> %s", in->a, ax, sx, sy, name, rule, p->meta.axis_names[a], check_shard_value(mx, vx),
                           check_shard_value(my, vy));
    }
    return check_coll_nesting(c, k, i, x->shard, y->shard, axes);
}

// A collective's pieces nest (coll-nesting): where the group's axes split a dimension on the side
// that holds pieces (out of a reduce-scatter, in of an all-gather, both of an all-to-all), no
// axis off the group that comes later in mesh order (a less significant digit) splits it too;
// else a rank's piece after the collective does not lie inside its piece before (ZeRO's
// reduce-scatter over dp of a gradient that tp already cuts along the same dimension).
static plan_status check_coll_nesting(checker *c, uint32_t k, uint32_t i, plan_shard x, plan_shard y, uint32_t axes) {
    const plan *p = c->p;
    for (int side = 0; side < 2; side++) {
        plan_shard s = side ? y : x;
        for (uint32_t a = 0; a < p->meta.n_axes; a++) {
            if (!(axes >> a & 1u) || s.map[a] < PLAN_SHARD_D(0)) continue;
            for (uint32_t b = a + 1; b < p->meta.n_axes; b++) {
                if (axes >> b & 1u || s.map[b] != s.map[a]) continue;
                char sx[80], sy[80];
                check_shard_desc(p, x, sx, sizeof sx);
                check_shard_desc(p, y, sy, sizeof sy);
                return check_ifail(c, k, i, "on group %d in is %s, out is %s: %.8s (on the group) and %.8s (off it, later in the "
                                   "mesh, so the less significant) both split dimension %d of %s, so a rank's piece does not "
                                   "nest in the other side's: a collective's axis must be the last to split a dimension",
                                   p->programs[k].insns[i].a, sx, sy, p->meta.axis_names[a], p->meta.axis_names[b],
                                   s.map[a] - PLAN_SHARD_D(0), side ? "out" : "in");
            }
        }
    }
    return PLAN_OK;
}

// A copy (copy-shard). Between tensor buffers: the same tensor; on each axis the same shard, or
// R in src and D(i) or V in dst; for each dimension, dst's splitting axes extend src's (src's
// come first in mesh order), so dst's piece lies inside src's. With a scratch buffer on either
// side the bytes are copied as they are: the sizes are equal.
static plan_status check_copy_shard(checker *c, uint32_t k, uint32_t i) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    uint32_t bs = pg->args[in->args], bd = pg->args[in->args + 1];
    const plan_buffer *x = &pg->buffers[bs], *y = &pg->buffers[bd];
    char ws[160], wd[160], sx[80], sy[80], vx[8], vy[8];
    check_buffer_desc(p, pg, bs, ws, sizeof(ws));
    check_buffer_desc(p, pg, bd, wd, sizeof(wd));
    if (x->tensor == PLAN_NONE || y->tensor == PLAN_NONE) {
        if (x->bytes == y->bytes) return PLAN_OK;
        return check_ifail(c, k, i, "src %s is %llu bytes, dst %s %llu bytes: a copy with a scratch buffer copies bytes as they "
                           "are, so the sizes must be equal", ws, (unsigned long long)x->bytes, wd, (unsigned long long)y->bytes);
    }
    if (x->tensor != y->tensor)
        return check_ifail(c, k, i, "src %s and dst %s hold different tensors: a copy keeps its tensor", ws, wd);
    check_shard_desc(p, x->shard, sx, sizeof(sx));
    check_shard_desc(p, y->shard, sy, sizeof(sy));
    for (uint32_t a = 0; a < p->meta.n_axes; a++) {
        uint8_t ms = x->shard.map[a], md = y->shard.map[a];
        if (ms != md && ms != PLAN_SHARD_R)
            return check_ifail(c, k, i, "src %s is %s, dst %s is %s: a copy keeps each axis's shard or goes from R to a piece "
                               "(dI or v), but on %.8s it goes %s -> %s", ws, sx, wd, sy, p->meta.axis_names[a],
                               check_shard_value(ms, vx), check_shard_value(md, vy));
    }
    const plan_tensor *t = &p->tensors[x->tensor];
    for (int d = 0; d < t->rank; d++) {
        uint32_t ms = check_split_axes(p, x->shard, d), md = check_split_axes(p, y->shard, d);
        // src's axes are a prefix of dst's: dst's first extra axis comes after src's last
        uint32_t extra = md & ~ms;
        if (!extra || !ms || __builtin_ctz(extra) > 31 - __builtin_clz(ms)) continue;
        char as[48], ad[48];
        check_axes_text(p, ms, as, sizeof(as));
        check_axes_text(p, md, ad, sizeof(ad));
        return check_ifail(c, k, i, "src %s is %s, dst %s is %s: dimension %d is split over %s in src but %s in dst, so dst's "
                           "piece is not inside src's (src's axes must come first, in mesh order)", ws, sx, wd, sy, d, as, ad);
    }
    return PLAN_OK;
}

// Record before wait: a wait on an event that no earlier instruction records never ends.
static plan_status check_wait(checker *c, uint32_t k, uint32_t i) {
    const plan_program *pg = &c->p->programs[k];
    for (uint32_t j = 0; j < i; j++)
        if (pg->insns[j].kind == PLAN_I_RECORD && pg->insns[j].a == pg->insns[i].a) return PLAN_OK;
    return check_ifail(c, k, i, "waits on event %d, which no earlier instruction records", pg->insns[i].a);
}

// The micro-batch instruction i touches, mb + mb_delta for mb in 0..count-1 of the innermost mb
// loop (mb = 0 outside any), lies in 0..micro_batches-1.
static plan_status check_mb_range(checker *c, uint32_t k, uint32_t i, uint32_t mb_count) {
    const plan_insn *in = &c->p->programs[k].insns[i];
    int64_t lo = in->mb_delta, hi = (int64_t)(mb_count ? mb_count - 1 : 0) + in->mb_delta;
    int64_t m = c->p->meta.micro_batches;
    if (!in->nargs || (lo >= 0 && hi < m)) return PLAN_OK;
    int64_t bad_mb = lo < 0 ? lo : hi, at = lo < 0 ? 0 : (mb_count ? mb_count - 1 : 0);
    return check_ifail(c, k, i, "micro-batch mb%+d is %lld when mb = %lld, outside 0..%lld", in->mb_delta, (long long)bad_mb,
                       (long long)at, (long long)(m - 1));
}

// A collective with attrs reduces a chunk (PLAN_FORMAT.md): a one-pair, in-place all_reduce of
// elements i[start] .. i[end] - 1 of its buffer, 0 <= start < end <= the buffer's elements.
static plan_status check_coll_chunk(checker *c, uint32_t k, uint32_t i) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    if (in->attrs == PLAN_NONE) return PLAN_OK;
    char kinds[64];
    if (!plan_coll_lookup(in->code)->inplace || in->nargs != 2 || pg->args[in->args] != pg->args[in->args + 1])
        return check_ifail(c, k, i, "attrs %u on a collective: a chunk is for a one-pair, in-place %s only", in->attrs,
                           inplace_kinds(kinds, sizeof kinds));
    const plan_buffer *b = &pg->buffers[pg->args[in->args]];
    uint64_t eb = plan_dtype_bytes(b->dtype), n = eb ? b->bytes / eb : 0;
    int64_t lo = pg->attrs[in->attrs].i[PLAN_AI_START], hi = pg->attrs[in->attrs].i[PLAN_AI_END];
    if (lo < 0 || hi <= lo || (uint64_t)hi > n)
        return check_ifail(c, k, i, "chunk %lld..%lld (attrs %u, i start and end) of buffer %u: it wants 0 <= start < end <= %llu, the buffer's elements",
                           (long long)lo, (long long)hi, in->attrs, pg->args[in->args], (unsigned long long)n);
    return PLAN_OK;
}

// An operator's attrs hold finite numbers: a NaN learning rate or an infinite scale trains to NaN
// without a word (the hyperparameters' slots, PLAN_AF_*).
static plan_status check_attrs_finite(checker *c, uint32_t k, uint32_t i) {
    static const char *const names[8] = {"scale", "eps", "p", "lr", "beta1", "beta2", "weight_decay", "momentum"};
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    if (in->kind != PLAN_I_COMPUTE || in->attrs == PLAN_NONE) return PLAN_OK;
    const double *f = pg->attrs[in->attrs].f;
    for (int j = 0; j < 8; j++)
        if (!isfinite(f[j]))
            return check_ifail(c, k, i, "attrs %u: f[%d] (%s) is %g: a hyperparameter must be finite", in->attrs, j, names[j], f[j]);
    return PLAN_OK;
}

static plan_status check_insn(checker *c, uint32_t k, uint32_t i, uint32_t mb_count) {
    const plan_insn *in = &c->p->programs[k].insns[i];
    plan_status st = check_arity(c, k, i);
    if (!st) st = check_attrs_finite(c, k, i);
    if (!st) st = check_attrs_shapes(c, k, i);
    if (!st && in->kind == PLAN_I_COLL) st = check_coll_chunk(c, k, i);
    for (uint32_t j = 0; !st && in->kind == PLAN_I_COLL && j < in->nargs / 2u; j++) st = check_coll_sizes(c, k, i, j);
    for (uint32_t j = 0; !st && in->kind == PLAN_I_COLL && j < in->nargs / 2u; j++) st = check_coll_shard(c, k, i, j);
    if (!st && in->kind == PLAN_I_COLL) st = check_bucket(c, k, i);
    if (!st && in->kind == PLAN_I_COPY) st = check_copy_shard(c, k, i);
    if (!st && in->kind == PLAN_I_WAIT) st = check_wait(c, k, i);
    if (!st && (in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV) && in->b == 0)
        st = check_ifail(c, k, i, "peer offset 0 along mesh axis \"%s\": a rank cannot %s itself",
                         c->p->meta.axis_names[in->a], in->kind == PLAN_I_SEND ? "send to" : "receive from");
    if (!st) st = check_mb_range(c, k, i, mb_count);
    return st;
}

#define MAX_EXECUTED (1ull << 30) // instructions one program may execute per step, for the walks below

// The largest number of copies of any tensor: the most block copies a layer loop may visit.
static uint32_t max_copies(const plan *p) {
    uint32_t n = 1;
    for (uint32_t t = 0; t < p->n_tensors; t++)
        if (p->tensors[t].copies > n) n = p->tensors[t].copies;
    return n;
}

// A loop's count against what the graph implies (so that checking and simulating a plan take
// time the model justifies, and a changed count is found): an mb loop runs at most the plan's
// micro-batches and lies in no other mb loop; a layer loop at most the most copies of any
// tensor, in no other layer loop.
static plan_status check_loop_count(checker *c, uint32_t k, uint32_t i, bool in_mb, bool in_layer) {
    const plan_insn *in = &c->p->programs[k].insns[i];
    if (plan_loop_is_background(in->code)) return PLAN_OK; // its count is a period: a round is walked once
    bool mb = in->code == PLAN_LOOP_MB;
    uint32_t most = mb ? c->p->meta.micro_batches : max_copies(c->p);
    if (mb ? in_mb : in_layer)
        return check_ifail(c, k, i, "a %s loop inside another: the step has one pass over its %s", plan_loop_var_name(in->code),
                           mb ? "micro-batches" : "block copies");
    if ((uint32_t)in->a > most)
        return check_ifail(c, k, i, "%s loop of %d, but the plan has %u %s", plan_loop_var_name(in->code), in->a, most,
                           mb ? "micro-batches" : "block copies at most (the largest copies of any tensor)");
    return PLAN_OK;
}

// Instruction i's buffers against the layer loop around it (count n): a block tensor's buffer
// holds copies layer_base .. layer_base + layer_slots - 1, so the loop stays inside the tensor's
// copies, and a persistent one (a param's or state's home, whose slot l holds copy layer_base +
// l from the start) is walked exactly once: a longer loop wraps onto another copy's slot, a
// shorter one never reaches the last copies (an optimizer that skips a layer).
static plan_status check_layer_slots(checker *c, uint32_t k, uint32_t i, uint32_t loop, uint32_t n) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    for (uint32_t j = 0; j < in->nargs; j++) {
        uint32_t b = pg->args[in->args + j];
        const plan_buffer *bf = &pg->buffers[b];
        if (bf->tensor == PLAN_NONE || c->p->tensors[bf->tensor].copies < 2) continue;
        const plan_tensor *t = &c->p->tensors[bf->tensor];
        char who[160];
        check_buffer_desc(c->p, pg, b, who, sizeof who);
        if ((uint64_t)bf->layer_base + n > t->copies)
            return check_ifail(c, k, i, "in the layer loop of insn %u (%u copies from layer_base %u) it touches %s, whose tensor "
                               "has %u copies", loop, n, bf->layer_base, who, t->copies);
        if ((bf->flags & PLAN_BUF_PERSIST) && n != bf->layer_slots && (n > bf->layer_slots || bf->layer_slots > 1))
            return check_ifail(c, k, i, "the layer loop of insn %u runs %u block cop%s over %s, which holds %u (one slot "
                               "each, from the start of the step): %s", loop, n, n == 1 ? "y" : "ies", who, bf->layer_slots,
                               n > bf->layer_slots ? "a copy wraps onto another's slot" : "the last copies are never reached");
    }
    return PLAN_OK;
}

// layer_delta names a block copy: inside a layer loop of n iterations one it reaches in some
// iteration (|delta| < n; in the others it is skipped); outside any, a copy of each tensor of
// several copies it touches, and a slot of its own in each persistent buffer (which holds one
// copy per slot; other buffers' slots wrap). A background round sets no variable.
static plan_status check_layer_delta(checker *c, uint32_t k, uint32_t i, uint32_t loop) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    int64_t d = in->layer_delta;
    if (!d) return PLAN_OK;
    if (loop != PLAN_NONE) {
        int64_t n = pg->insns[loop].a;
        if (d > -n && d < n) return PLAN_OK;
        return check_ifail(c, k, i, "layer%+lld in the layer loop of insn %u (%lld iterations): it never runs", (long long)d, loop,
                           (long long)n);
    }
    if (d < 0) return check_ifail(c, k, i, "layer%+lld outside any layer loop names no block copy", (long long)d);
    for (uint32_t j = 0; j < in->nargs; j++) {
        uint32_t b = pg->args[in->args + j];
        const plan_buffer *bf = &pg->buffers[b];
        uint64_t copies = bf->tensor == PLAN_NONE ? 0 : c->p->tensors[bf->tensor].copies;
        bool wraps = (bf->flags & PLAN_BUF_PERSIST) && (uint64_t)d >= bf->layer_slots; // onto another copy's slot
        if (!wraps && (copies < 2 || bf->layer_base + (uint64_t)d < copies)) continue;
        char who[160];
        check_buffer_desc(c->p, pg, b, who, sizeof who);
        if (wraps)
            return check_ifail(c, k, i, "layer%+lld outside any layer loop: %s holds %u cop%s from the start of the step, one "
                               "slot each", (long long)d, who, bf->layer_slots, bf->layer_slots == 1 ? "y" : "ies");
        return check_ifail(c, k, i, "layer%+lld outside any layer loop: %s names copy %llu of its tensor's %llu", (long long)d,
                           who, (unsigned long long)(bf->layer_base + (uint64_t)d), (unsigned long long)copies);
    }
    return PLAN_OK;
}

// Every instruction, with the count of the innermost mb loop around it; and the instructions
// executed per step (loops multiplied out), which the communication walk visits, bounded.
plan_status check_insns(checker *c, uint32_t k) {
    const plan_program *pg = &c->p->programs[k];
    if (pg->n_events > PLAN_MAX_EVENTS) // the runtime and the simulator keep state per event
        return check_pfail(c, k, "declares %u events, more than the %u a program may have", pg->n_events, PLAN_MAX_EVENTS);
    struct insn_scope {
        uint32_t end, mb_count, layer_loop; // layer_loop: the innermost layer loop's insn, or PLAN_NONE
        uint64_t mult;
    } stack[PLAN_MAX_LOOP_DEPTH];
    int depth = 0;
    uint64_t executed = 0;
    plan_status st = PLAN_OK;
    for (uint32_t i = 0; i < pg->n_insns && !st; i++) {
        while (depth && i >= stack[depth - 1].end) depth--;
        uint32_t mb_count = depth ? stack[depth - 1].mb_count : 0;
        uint32_t layer_loop = depth ? stack[depth - 1].layer_loop : PLAN_NONE;
        uint64_t mult = depth ? stack[depth - 1].mult : 1;
        const plan_insn *in = &pg->insns[i];
        st = check_insn(c, k, i, mb_count);
        if (!st && in->kind == PLAN_I_LOOP) st = check_loop_count(c, k, i, mb_count != 0, layer_loop != PLAN_NONE);
        if (!st && layer_loop != PLAN_NONE && in->kind != PLAN_I_LOOP)
            st = check_layer_slots(c, k, i, layer_loop, (uint32_t)pg->insns[layer_loop].a);
        if (!st && in->kind != PLAN_I_LOOP) st = check_layer_delta(c, k, i, layer_loop);
        executed += mult;
        if (!st && executed > MAX_EXECUTED)
            st = check_plimit(c, k, "executes more than %llu instructions per step (loops multiplied out): too large to check",
                             MAX_EXECUTED);
        if (in->kind == PLAN_I_LOOP) {
            uint64_t m = mult * (uint64_t)plan_loop_trips(in); // mult <= 2^30, count < 2^31: no overflow
            bool layer = in->code == PLAN_LOOP_LAYER || in->code == PLAN_LOOP_REVERSE_LAYER;
            stack[depth++] = (struct insn_scope){i + 1 + (uint32_t)in->b,
                                                 in->code == PLAN_LOOP_MB ? (uint32_t)in->a : mb_count,
                                                 layer ? i : plan_loop_is_background(in->code) ? PLAN_NONE : layer_loop,
                                                 m > MAX_EXECUTED ? MAX_EXECUTED + 1 : m};
        }
    }
    return st;
}

