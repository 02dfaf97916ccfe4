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

// The next matching instruction, or PLAN_NONE at the end of the program.
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
            it->n++;
            return i;
        }
    }
}

typedef struct comm {
    checker *c;
    uint32_t **prefix;          // per program (NULL when not loaded)
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
    m.first_prog = malloc(((size_t)p->n_ranks + 1) * sizeof(uint32_t));
    m.first_rank = malloc(((size_t)p->n_ranks + 1) * sizeof(uint32_t));
    plan_status st = !m.prefix || !m.first_prog || !m.first_rank ? check_fail(c, "out of memory") : PLAN_OK;
    for (uint32_t k = 0; !st && k < p->n_programs; k++) {
        const plan_program *pg = &p->programs[k];
        m.prefix[k] = malloc(((size_t)pg->n_insns + 1) * sizeof(uint32_t));
        if (!m.prefix[k]) st = check_fail(c, "out of memory");
        else m.prefix[k][0] = 0;
        for (uint32_t i = 0; !st && i < pg->n_insns; i++) {
            uint8_t kind = pg->insns[i].kind;
            m.prefix[k][i + 1] = m.prefix[k][i] + (kind == PLAN_I_SEND || kind == PLAN_I_RECV || kind == PLAN_I_COLL);
        }
    }
    if (!st) st = check_p2p(&m);
    for (uint32_t g = 0; !st && g < p->n_groups; g++)
        st = p->groups[g].axes ? check_mask_group(&m, g) : check_explicit_group(&m, g);
    for (uint32_t k = 0; m.prefix && k < p->n_programs; k++) free(m.prefix[k]);
    free(m.prefix);
    free(m.first_prog);
    free(m.first_rank);
    free(m.pairs);
    return st;
}

