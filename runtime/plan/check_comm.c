/*
 * check_comm.c: the verifier's communication between programs, each (program, peer program)
 * channel and each (group, program pair) once:
 *   - every send has its receive: for each rank, the rank at the send's offset along its mesh
 *     axis exists, and its program receives from this rank, along the same axis and with the
 *     same tag, the same number of messages of the same sizes in the same order, each into a
 *     buffer of the same tensor (or scratch) with the same shard;
 *   - every member of a group issues that group's collectives in the same order, with the same
 *     kinds and sizes (members that run the same program agree by construction; members that
 *     run different programs are compared), and no rank outside an explicit group uses it.
 * Each matched pair (a message and its receive, two members' collective) must carry the same
 * value: the logical tensor of its buffers, and where the plan says it, the micro-batch (the
 * loop variable plus mb_delta, for inputs, activations and buffers kept per micro-batch) and
 * the block copy (layer_base plus the layer variable). So a rank that issues two same-size
 * collectives of a group in the other order, or receives micro-batch 1's activation as micro-
 * batch 0's, is found; kind and size alone could not tell. Scratch buffers carry nothing
 * nameable and are compared by size.
 * Communication is compared by walking both programs in step, loops multiplied out, without
 * storing the sequences (comm_iter); a loop with no communication inside is skipped whole.
 */
#include "checker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- walking a program's communication ---- */

// Walks a program's instructions in execution order, loops multiplied out, and yields those of
// one kind with a given a (and b, for send and recv): the sends along an axis and offset, or the
// collectives on a group.
typedef struct comm_iter {
    const plan_program *pg;
    const uint32_t *prefix;     // prefix[i]: send, recv and coll instructions among insns[0..i)
    uint8_t kind;
    int32_t a;
    int64_t b;
    uint8_t tag;                // send and recv: the tag too
    uint32_t pc;
    int depth;
    struct comm_loop {
        uint32_t loop, end, iter, count;
    } st[PLAN_MAX_LOOP_DEPTH];
    uint64_t n;                 // instructions yielded so far
} comm_iter;

static void comm_vars(const comm_iter *it, int64_t *mb, int64_t *layer, int64_t *layers);

// The next matching instruction that runs, or PLAN_NONE at the end of the program.
static uint32_t comm_next(comm_iter *it) {
    const plan_program *pg = it->pg;
    for (;;) {
        if (it->depth && it->pc == it->st[it->depth - 1].end) {
            if (++it->st[it->depth - 1].iter < it->st[it->depth - 1].count) it->pc = it->st[it->depth - 1].loop + 1;
            else it->depth--;
            continue;
        }
        if (it->pc >= pg->n_insns) return PLAN_NONE;
        const plan_insn *in = &pg->insns[it->pc];
        if (in->kind == PLAN_I_LOOP) {
            uint32_t end = it->pc + 1 + (uint32_t)in->b;
            if (it->prefix[end] == it->prefix[it->pc + 1]) it->pc = end; // no communication inside
            else it->st[it->depth++] = (struct comm_loop){it->pc, end, 0, plan_loop_trips(in)}, it->pc++;
            continue;
        }
        uint32_t i = it->pc++;
        if (in->kind == it->kind && in->a == it->a && (in->kind == PLAN_I_COLL || (in->b == it->b && in->tag == it->tag))) {
            int64_t mb, layer, layers;
            comm_vars(it, &mb, &layer, &layers);
            if (plan_insn_skipped(in, layer, layers)) continue; // not run in this iteration
            it->n++;
            return i;
        }
    }
}

// The loop variables where comm_next stands: the innermost mb loop's (0 outside any) and the
// innermost layer loop's (reverse_layer counts down), with that loop's count (0: none).
static void comm_vars(const comm_iter *it, int64_t *mb, int64_t *layer, int64_t *layers) {
    bool got_mb = false, got_layer = false;
    *mb = *layer = *layers = 0;
    for (int d = it->depth - 1; d >= 0; d--) {
        uint16_t var = it->pg->insns[it->st[d].loop].code;
        if (var == PLAN_LOOP_MB && !got_mb) *mb = it->st[d].iter, got_mb = true;
        if ((var == PLAN_LOOP_LAYER || var == PLAN_LOOP_REVERSE_LAYER) && !got_layer) {
            *layer = var == PLAN_LOOP_LAYER ? it->st[d].iter : (int64_t)it->st[d].count - 1 - it->st[d].iter;
            *layers = it->st[d].count;
            got_layer = true;
        }
    }
}

// What argument j of instruction i carries, as far as the plan says: its logical tensor, the
// micro-batch (for data of one micro-batch: inputs, activations, and what a buffer keeps per
// micro-batch) and the block copy (for a tensor of several copies). tensor PLAN_NONE: scratch,
// which carries nothing the checker can name.
typedef struct carried {
    uint32_t tensor;
    int64_t mb, copy;
} carried;

static carried comm_carried(const plan *p, const comm_iter *it, uint32_t i, uint32_t j) {
    const plan_insn *in = &it->pg->insns[i];
    const plan_buffer *b = &it->pg->buffers[it->pg->args[in->args + j]];
    carried c = {b->tensor, -1, -1};
    if (b->tensor == PLAN_NONE) return c;
    int64_t mb, layer, layers;
    comm_vars(it, &mb, &layer, &layers);
    const plan_tensor *t = &p->tensors[b->tensor];
    if (t->kind == PLAN_T_INPUT || t->kind == PLAN_T_ACTIVATION || b->mb_slots > 1) c.mb = mb + in->mb_delta;
    if (t->copies > 1) c.copy = (int64_t)b->layer_base + layer + in->layer_delta;
    return c;
}

// "activation "h" of micro-batch 2, copy 1"
static void carried_text(const plan *p, carried c, char *buf, size_t n) {
    if (c.tensor == PLAN_NONE) {
        snprintf(buf, n, "scratch");
        return;
    }
    const plan_tensor *t = &p->tensors[c.tensor];
    int k = snprintf(buf, n, "%s \"%s\"", plan_tensor_kind_name(t->kind), check_name_or(t->name, "?"));
    if (k > 0 && (size_t)k < n && c.mb >= 0) k += snprintf(buf + k, n - (size_t)k, " of micro-batch %lld", (long long)c.mb);
    if (k > 0 && (size_t)k < n && c.copy >= 0) snprintf(buf + k, n - (size_t)k, "%s copy %lld", c.mb >= 0 ? "," : " of block",
                                                        (long long)c.copy);
}

// Whether two sides carry the same thing (scratch on either side: nothing to compare).
static bool carried_same(carried a, carried b) {
    if (a.tensor == PLAN_NONE || b.tensor == PLAN_NONE) return true;
    return a.tensor == b.tensor && (a.mb < 0 || b.mb < 0 || a.mb == b.mb) && (a.copy < 0 || b.copy < 0 || a.copy == b.copy);
}

typedef struct comm {
    checker *c;
    uint32_t **prefix;          // per program (NULL when not loaded)
    uint32_t **before;          // per program and instruction: see reduced_before
    uint32_t *first_prog;       // per rank: scratch for the group walk
    uint32_t *first_rank;
    uint32_t *pairs;            // program pairs (a, b) already compared on the current group
    size_t n_pairs, cap_pairs;
} comm;

static comm_iter comm_iter_init(const comm *m, uint32_t k, uint8_t kind, int32_t a, int64_t b, uint8_t tag) {
    return (comm_iter){.pg = &m->c->p->programs[k], .prefix = m->prefix[k], .kind = kind, .a = a, .b = b, .tag = tag};
}

// The bytes argument j of instruction i moves (a chunk's, where a collective has attrs).
static uint64_t arg_bytes(const plan_program *pg, uint32_t i, uint32_t j) {
    const plan_insn *in = &pg->insns[i];
    const plan_buffer *b = &pg->buffers[pg->args[in->args + j]];
    if (in->kind != PLAN_I_COLL || in->attrs == PLAN_NONE) return b->bytes;
    const plan_attrs *a = &pg->attrs[in->attrs];
    return (uint64_t)(a->i[PLAN_AI_END] - a->i[PLAN_AI_START]) * plan_dtype_bytes(b->dtype);
}

/* Point to point: channels (sender program, axis, offset, tag, receiver program). */

typedef struct channel {
    uint32_t from, to;          // programs
    int32_t axis;
    int64_t delta;              // the offset the sender sends to
    uint8_t tag;
    uint32_t from_rank, to_rank; // an example pair, for messages
} channel;

static int channel_cmp(const void *x, const void *y) {
    const channel *a = x, *b = y;
    if (a->from != b->from) return a->from < b->from ? -1 : 1;
    if (a->to != b->to) return a->to < b->to ? -1 : 1;
    if (a->axis != b->axis) return a->axis < b->axis ? -1 : 1;
    if (a->tag != b->tag) return a->tag < b->tag ? -1 : 1;
    return a->delta < b->delta ? -1 : a->delta > b->delta;
}

// A message is received into a buffer of the same tensor (or scratch, as it was sent) with the
// same shard (send-recv-shard).
static plan_status check_message_shard(comm *m, const channel *ch, const comm_iter *s, uint32_t i, const comm_iter *r,
                                       uint32_t j) {
    const plan *p = m->c->p;
    uint32_t bs = s->pg->args[s->pg->insns[i].args], br = r->pg->args[r->pg->insns[j].args];
    const plan_buffer *x = &s->pg->buffers[bs], *y = &r->pg->buffers[br];
    if (x->tensor == y->tensor && memcmp(x->shard.map, y->shard.map, PLAN_MAX_AXES) == 0) return PLAN_OK;
    char ws[160], wr[160], sx[80], sy[80];
    check_buffer_desc(p, s->pg, bs, ws, sizeof(ws));
    check_buffer_desc(p, r->pg, br, wr, sizeof(wr));
    check_shard_desc(p, x->shard, sx, sizeof(sx));
    check_shard_desc(p, y->shard, sy, sizeof(sy));
    return check_fail(m->c, "send/recv shard mismatch: message %llu from rank %u (program %u, insn %u) to rank %u (program %u, "
                      "insn %u) along %s: sent from %s, %s; received into %s, %s: a message keeps its tensor and shard",
                      (unsigned long long)s->n, ch->from_rank, ch->from, i, ch->to_rank, ch->to, j,
                      p->meta.axis_names[ch->axis], ws, sx, wr, sy);
}

// Compares the sends of one channel with its receives, message by message.
static plan_status check_channel(comm *m, const channel *ch) {
    const plan *p = m->c->p;
    const char *ax = p->meta.axis_names[ch->axis];
    char tag_s[16] = "";
    if (ch->tag) snprintf(tag_s, sizeof(tag_s), " tag %u", ch->tag);
    comm_iter s = comm_iter_init(m, ch->from, PLAN_I_SEND, ch->axis, ch->delta, ch->tag);
    comm_iter r = comm_iter_init(m, ch->to, PLAN_I_RECV, ch->axis, -ch->delta, ch->tag);
    for (;;) {
        uint32_t i = comm_next(&s), j = comm_next(&r);
        if (i == PLAN_NONE && j == PLAN_NONE) return PLAN_OK;
        if (j == PLAN_NONE)
            return check_fail(m->c, "unmatched send: rank %u (program %u, insn %u) sends message %llu along %s %+lld%s to rank %u "
                              "(program %u), which receives only %llu from it", ch->from_rank, ch->from, i,
                              (unsigned long long)s.n, ax, (long long)ch->delta, tag_s, ch->to_rank, ch->to, (unsigned long long)r.n);
        if (i == PLAN_NONE)
            return check_fail(m->c, "unmatched recv: rank %u (program %u, insn %u) receives message %llu along %s %+lld%s from "
                              "rank %u (program %u), which sends only %llu to it", ch->to_rank, ch->to, j,
                              (unsigned long long)r.n, ax, (long long)-ch->delta, tag_s, ch->from_rank, ch->from, (unsigned long long)s.n);
        uint64_t bs = arg_bytes(s.pg, i, 0), br = arg_bytes(r.pg, j, 0);
        if (bs != br)
            return check_fail(m->c, "send/recv size mismatch: message %llu from rank %u (program %u, insn %u) to rank %u "
                              "(program %u, insn %u) along %s: %llu bytes sent, %llu bytes received", (unsigned long long)s.n,
                              ch->from_rank, ch->from, i, ch->to_rank, ch->to, j, ax, (unsigned long long)bs, (unsigned long long)br);
        plan_status st = check_message_shard(m, ch, &s, i, &r, j);
        carried a = comm_carried(p, &s, i, 0), b = comm_carried(p, &r, j, 0);
        if (!st && !carried_same(a, b)) {
            char ta[160], tb[160];
            carried_text(p, a, ta, sizeof ta);
            carried_text(p, b, tb, sizeof tb);
            st = check_fail(m->c, "send/recv carries another value: message %llu from rank %u (program %u, insn %u) to rank %u "
                            "(program %u, insn %u) along %s sends %s but is received as %s", (unsigned long long)s.n,
                            ch->from_rank, ch->from, i, ch->to_rank, ch->to, j, ax, ta, tb);
        }
        if (st) return st;
    }
}

// The peer of rank r at offset b along axis a, or a fault if the mesh has no such rank.
static plan_status p2p_peer(comm *m, uint32_t r, uint32_t i, uint32_t *peer) {
    const plan *p = m->c->p;
    const plan_insn *in = &p->programs[p->ranks[r].program].insns[i];
    int64_t at = (int64_t)p->ranks[r].coord[in->a] + in->b;
    if (at < 0 || at >= (int64_t)p->meta.mesh[in->a])
        return check_fail(m->c, "rank %u (program %u): insn %u: %s along %s %+d has no peer: the rank's %s coordinate is %u of "
                          "%u", r, p->ranks[r].program, i, in->kind == PLAN_I_SEND ? "send" : "recv",
                          p->meta.axis_names[in->a], in->b, p->meta.axis_names[in->a], p->ranks[r].coord[in->a],
                          p->meta.mesh[in->a]);
    *peer = (uint32_t)((int64_t)r + (int64_t)in->b * (int64_t)m->c->stride[in->a]);
    return PLAN_OK;
}

// The first send or recv of each (kind, axis, offset, tag) in program k: a list of insn indices.
static uint32_t p2p_keys(const plan_program *pg, uint32_t *keys) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        if (in->kind != PLAN_I_SEND && in->kind != PLAN_I_RECV) continue;
        bool seen = false;
        for (uint32_t j = 0; j < n && !seen; j++) {
            const plan_insn *x = &pg->insns[keys[j]];
            seen = x->kind == in->kind && x->a == in->a && x->b == in->b && x->tag == in->tag;
        }
        if (!seen) keys[n++] = i;
    }
    return n;
}

// Every rank's sends and receives: the peer exists; the channels, one entry each.
static plan_status p2p_channels(comm *m, uint32_t **keys, const uint32_t *n_keys, channel **out, size_t *n_out) {
    const plan *p = m->c->p;
    size_t n = 0, cap = 0;
    channel *v = NULL;
    for (uint32_t r = 0; r < p->n_ranks; r++) {
        uint32_t k = p->ranks[r].program;
        for (uint32_t q = 0; q < n_keys[k]; q++) {
            uint32_t i = keys[k][q], peer = 0;
            plan_status st = p2p_peer(m, r, i, &peer);
            if (st) return free(v), st;
            const plan_insn *in = &p->programs[k].insns[i];
            uint32_t pk = p->ranks[peer].program;
            if (!p->programs[pk].name) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                channel *w = realloc(v, cap * sizeof(channel));
                if (!w) return free(v), check_fail(m->c, "out of memory");
                v = w;
            }
            v[n++] = in->kind == PLAN_I_SEND ? (channel){k, pk, in->a, in->b, in->tag, r, peer}
                                             : (channel){pk, k, in->a, -(int64_t)in->b, in->tag, peer, r};
        }
    }
    *out = v;
    *n_out = n;
    return PLAN_OK;
}

static plan_status check_p2p(comm *m) {
    const plan *p = m->c->p;
    uint32_t **keys = calloc((size_t)p->n_programs + 1, sizeof(uint32_t *));
    uint32_t *n_keys = calloc((size_t)p->n_programs + 1, sizeof(uint32_t));
    plan_status st = !keys || !n_keys ? check_fail(m->c, "out of memory") : PLAN_OK;
    for (uint32_t k = 0; !st && k < p->n_programs; k++) {
        keys[k] = malloc(((size_t)p->programs[k].n_insns + 1) * sizeof(uint32_t));
        if (!keys[k]) st = check_fail(m->c, "out of memory");
        else n_keys[k] = p2p_keys(&p->programs[k], keys[k]);
    }
    channel *ch = NULL;
    size_t n = 0;
    if (!st) st = p2p_channels(m, keys, n_keys, &ch, &n);
    if (!st && n) qsort(ch, n, sizeof(channel), channel_cmp);
    for (size_t i = 0; !st && i < n; i++)
        if (i == 0 || channel_cmp(&ch[i], &ch[i - 1])) st = check_channel(m, &ch[i]);
    for (uint32_t k = 0; keys && k < p->n_programs; k++) free(keys[k]);
    free(keys);
    free(n_keys);
    free(ch);
    return st;
}

/* Collectives: each group's members that run different programs issue the same collectives. */

// The axes of group g as a mask; an explicit group (no axes) as bit 31.
static uint32_t group_mask(const plan *p, int32_t g) { return p->groups[g].axes ? p->groups[g].axes : 1u << 31; }

static bool in_place_reduce(const plan_insn *in, const plan_program *pg) {
    return in->kind == PLAN_I_COLL && in->code == PLAN_COLL_ALL_REDUCE && pg->args[in->args] == pg->args[in->args + in->nargs / 2u];
}

// For each in-place all_reduce of program pg, the groups (group_mask) of the in-place
// all_reduces of the same buffers right before it (the run of collectives, records and waits
// that leads to it): a member that reduces a gradient over dp and then tp while another does tp
// and then dp adds up different partial sums in each collective, which identity alone cannot see.
static void reduced_before(const plan *p, const plan_program *pg, uint32_t *before) {
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        before[i] = 0;
        if (!in_place_reduce(in, pg)) continue;
        for (uint32_t j = i; j-- > 0;) {
            const plan_insn *x = &pg->insns[j];
            if (x->kind == PLAN_I_RECORD || x->kind == PLAN_I_WAIT) continue;
            if (!in_place_reduce(x, pg)) break;
            bool shared = false;
            for (uint32_t a = 0; a < x->nargs / 2u && !shared; a++)
                for (uint32_t b = 0; b < in->nargs / 2u && !shared; b++) shared = pg->args[x->args + a] == pg->args[in->args + b];
            if (shared) before[i] |= group_mask(p, x->a);
        }
    }
}

// Collective x.n of group g carries the same values pair by pair on two members: the same
// tensor, micro-batch and block copy in and out (members are matched by what they carry, not
// only by kind and size: two same-size collectives issued in the other order are found).
static plan_status check_coll_carried(comm *m, uint32_t g, const comm_iter *x, uint32_t i, uint32_t ra, const comm_iter *y,
                                      uint32_t j, uint32_t rb) {
    const plan *p = m->c->p;
    const plan_insn *a = &x->pg->insns[i];
    uint32_t ka = p->ranks[ra].program, kb = p->ranks[rb].program;
    uint32_t ba = m->before[ka][i], bb = m->before[kb][j];
    if (ba != bb) {
        char ta[48], tb[48];
        check_axes_text(p, ba & 0xffu, ta, sizeof ta);
        check_axes_text(p, bb & 0xffu, tb, sizeof tb);
        return check_fail(m->c, "collective carries another value on group %u: collective %llu (%s) reduces its buffers after "
                          "in-place all-reduces over %s%s for rank %u (program %u, insn %u) but over %s%s for rank %u (program %u, "
                          "insn %u): the members add up different partial sums", g, (unsigned long long)x->n,
                          plan_coll_name(a->code), ba ? ta : "nothing", ba >> 31 ? " and an explicit group" : "", ra, ka, i,
                          bb ? tb : "nothing", bb >> 31 ? " and an explicit group" : "", rb, kb, j);
    }
    for (uint32_t q = 0, np = a->nargs / 2u; q < a->nargs; q++) {
        carried ca = comm_carried(p, x, i, q), cb = comm_carried(p, y, j, q);
        if (carried_same(ca, cb)) continue;
        char ta[160], tb[160];
        carried_text(p, ca, ta, sizeof ta);
        carried_text(p, cb, tb, sizeof tb);
        return check_fail(m->c, "collective carries another value on group %u: collective %llu (%s) %s %u %s %s for rank %u "
                          "(program %u, insn %u) but %s for rank %u (program %u, insn %u): its members are matched by what "
                          "they carry", g, (unsigned long long)x->n, plan_coll_name(a->code), q < np ? "in" : "out",
                          q < np ? q : q - np, np > 1 ? "(a pair of the bucket) is" : "is", ta, ra, ka, i, tb, rb, kb, j);
    }
    return PLAN_OK;
}

static plan_status check_coll_pair(comm *m, uint32_t g, uint32_t ra, uint32_t rb) {
    const plan *p = m->c->p;
    uint32_t ka = p->ranks[ra].program, kb = p->ranks[rb].program;
    comm_iter x = comm_iter_init(m, ka, PLAN_I_COLL, (int32_t)g, 0, 0), y = comm_iter_init(m, kb, PLAN_I_COLL, (int32_t)g, 0, 0);
    for (;;) {
        uint32_t i = comm_next(&x), j = comm_next(&y);
        if (i == PLAN_NONE && j == PLAN_NONE) return PLAN_OK;
        if (i == PLAN_NONE || j == PLAN_NONE) {
            const comm_iter *more = i == PLAN_NONE ? &y : &x, *less = i == PLAN_NONE ? &x : &y;
            uint32_t rm = i == PLAN_NONE ? rb : ra, rl = i == PLAN_NONE ? ra : rb;
            uint32_t im = i == PLAN_NONE ? j : i;
            return check_fail(m->c, "collective order differs on group %u: rank %u (program %u, insn %u) issues collective %llu "
                              "(%s) but rank %u (program %u) issues only %llu on that group", g, rm, p->ranks[rm].program, im,
                              (unsigned long long)more->n, plan_coll_name(more->pg->insns[im].code), rl,
                              p->ranks[rl].program, (unsigned long long)less->n);
        }
        const plan_insn *a = &x.pg->insns[i], *b = &y.pg->insns[j];
        if (a->code != b->code)
            return check_fail(m->c, "collective order differs on group %u: collective %llu is %s for rank %u (program %u, insn %u) "
                              "but %s for rank %u (program %u, insn %u)", g, (unsigned long long)x.n, plan_coll_name(a->code),
                              ra, ka, i, plan_coll_name(b->code), rb, kb, j);
        if (a->nargs != b->nargs)
            return check_fail(m->c, "collective bucket mismatch on group %u: collective %llu (%s) is a bucket of %u for rank %u "
                              "(program %u, insn %u) but of %u for rank %u (program %u, insn %u)", g, (unsigned long long)x.n,
                              plan_coll_name(a->code), a->nargs / 2u, ra, ka, i, b->nargs / 2u, rb, kb, j);
        for (uint32_t q = 0, np = a->nargs / 2u; q < np; q++) {
            uint64_t ai = arg_bytes(x.pg, i, q), ao = arg_bytes(x.pg, i, np + q);
            uint64_t bi = arg_bytes(y.pg, j, q), bo = arg_bytes(y.pg, j, np + q);
            if (ai != bi || ao != bo)
                return check_fail(m->c, "collective size mismatch on group %u: collective %llu (%s) moves %llu -> %llu bytes for "
                                  "rank %u (program %u, insn %u) but %llu -> %llu bytes for rank %u (program %u, insn %u)", g,
                                  (unsigned long long)x.n, plan_coll_name(a->code), (unsigned long long)ai, (unsigned long long)ao,
                                  ra, ka, i, (unsigned long long)bi, (unsigned long long)bo, rb, kb, j);
        }
        plan_status st = check_coll_carried(m, g, &x, i, ra, &y, j, rb);
        if (st) return st;
    }
}

// The first instruction of program k that issues a collective on group g, or PLAN_NONE.
static uint32_t first_coll(const plan_program *pg, uint32_t g) {
    for (uint32_t i = 0; i < pg->n_insns; i++)
        if (pg->insns[i].kind == PLAN_I_COLL && (uint32_t)pg->insns[i].a == g) return i;
    return PLAN_NONE;
}

// An explicit group: its members against the first; no rank outside it uses it.
static plan_status check_explicit_group(comm *m, uint32_t g) {
    const plan *p = m->c->p;
    const plan_group *gr = &p->groups[g];
    uint32_t *is_member = m->first_rank; // scratch: 1 for members
    memset(is_member, 0, (size_t)p->n_ranks * sizeof(uint32_t));
    for (uint32_t j = 0; j < gr->n_ranks; j++) is_member[gr->ranks[j]] = 1;
    for (uint32_t k = 0; k < p->n_programs; k++) {
        uint32_t i = p->programs[k].name ? first_coll(&p->programs[k], g) : PLAN_NONE;
        for (uint32_t r = 0; i != PLAN_NONE && r < p->n_ranks; r++)
            if (p->ranks[r].program == k && !is_member[r])
                return check_fail(m->c, "rank %u (program %u, insn %u) issues a collective on group %u but is not one of "
                                  "its members", r, k, i, g);
    }
    for (uint32_t j = 1; j < gr->n_ranks; j++) {
        uint32_t ka = p->ranks[gr->ranks[0]].program, kb = p->ranks[gr->ranks[j]].program;
        if (ka == kb || !p->programs[ka].name || !p->programs[kb].name) continue;
        plan_status st = check_coll_pair(m, g, gr->ranks[0], gr->ranks[j]);
        if (st) return st;
    }
    return PLAN_OK;
}

// Whether programs a and b were compared on the current group; records them if not.
static plan_status pair_seen(comm *m, uint32_t a, uint32_t b, bool *seen) {
    for (size_t i = 0; i < m->n_pairs; i++)
        if (m->pairs[2 * i] == a && m->pairs[2 * i + 1] == b) return *seen = true, PLAN_OK;
    *seen = false;
    if (m->n_pairs == m->cap_pairs) {
        size_t cap = m->cap_pairs ? 2 * m->cap_pairs : 16;
        uint32_t *v = realloc(m->pairs, cap * 2 * sizeof(uint32_t));
        if (!v) return check_fail(m->c, "out of memory");
        m->pairs = v;
        m->cap_pairs = cap;
    }
    m->pairs[2 * m->n_pairs] = a;
    m->pairs[2 * m->n_pairs++ + 1] = b;
    return PLAN_OK;
}

// A group over mesh axes: one instance per set of coordinates off those axes; in each, every
// rank against the first. Each pair of programs is compared once per group.
static plan_status check_mask_group(comm *m, uint32_t g) {
    const plan *p = m->c->p;
    uint32_t axes = p->groups[g].axes;
    m->n_pairs = 0;
    for (uint32_t r = 0; r < p->n_ranks; r++) m->first_prog[r] = PLAN_NONE;
    for (uint32_t r = 0; r < p->n_ranks; r++) {
        uint64_t base = r;
        for (uint32_t i = 0; i < p->meta.n_axes; i++)
            if (axes >> i & 1u) base -= p->ranks[r].coord[i] * m->c->stride[i];
        uint32_t k = p->ranks[r].program, k0 = m->first_prog[base];
        if (k0 == PLAN_NONE) {
            m->first_prog[base] = k;
            m->first_rank[base] = r;
            continue;
        }
        if (k0 == k || !p->programs[k].name || !p->programs[k0].name) continue;
        bool seen;
        plan_status st = pair_seen(m, k0, k, &seen);
        if (!st && !seen) st = check_coll_pair(m, g, m->first_rank[base], r);
        if (st) return st;
    }
    return PLAN_OK;
}

plan_status check_comm(checker *c) {
    const plan *p = c->p;
    comm m = {.c = c};
    m.prefix = calloc((size_t)p->n_programs + 1, sizeof(uint32_t *));
    m.before = calloc((size_t)p->n_programs + 1, sizeof(uint32_t *));
    m.first_prog = malloc(((size_t)p->n_ranks + 1) * sizeof(uint32_t));
    m.first_rank = malloc(((size_t)p->n_ranks + 1) * sizeof(uint32_t));
    plan_status st = !m.prefix || !m.before || !m.first_prog || !m.first_rank ? check_fail(c, "out of memory") : PLAN_OK;
    for (uint32_t k = 0; !st && k < p->n_programs; k++) {
        const plan_program *pg = &p->programs[k];
        m.prefix[k] = malloc(((size_t)pg->n_insns + 1) * sizeof(uint32_t));
        m.before[k] = m.before ? malloc(((size_t)pg->n_insns + 1) * sizeof(uint32_t)) : NULL;
        if (!m.prefix[k] || !m.before[k]) st = check_fail(c, "out of memory");
        else m.prefix[k][0] = 0, reduced_before(p, pg, m.before[k]);
        for (uint32_t i = 0; !st && i < pg->n_insns; i++) {
            uint8_t kind = pg->insns[i].kind;
            m.prefix[k][i + 1] = m.prefix[k][i] + (kind == PLAN_I_SEND || kind == PLAN_I_RECV || kind == PLAN_I_COLL);
        }
    }
    if (!st) st = check_p2p(&m);
    for (uint32_t g = 0; !st && g < p->n_groups; g++)
        st = p->groups[g].axes ? check_mask_group(&m, g) : check_explicit_group(&m, g);
    for (uint32_t k = 0; m.prefix && k < p->n_programs; k++) free(m.prefix[k]);
    for (uint32_t k = 0; m.before && k < p->n_programs; k++) free(m.before[k]);
    free(m.prefix);
    free(m.before);
    free(m.first_prog);
    free(m.first_rank);
    free(m.pairs);
    return st;
}

