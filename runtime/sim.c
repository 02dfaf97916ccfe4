/*
 * sim.c: the plan simulator (sim.h says what it models and what it reports).
 *
 * How. A discrete-event simulation over one clock. The ranks are first split into classes that
 * run alike (rank_classes: partition refinement, from the program each rank runs, until the
 * ranks of a class have their message peers and the members of their group instances in the
 * same classes); one rank per class is simulated. Each class walks its program in program order
 * with its loops expanded (gen_next), handing each instruction to its stream's queue with the
 * ordinal it counts: the event ordinal of a record (and, for a wait, of the latest record before
 * it), the number of the message on its channel, the number of the collective on its group.
 * Each stream takes its queue in order (advance): record and wait at once, compute and copy for
 * their time, a collective once all the member classes of its group instance have reached it
 * (rendezvous by group, instance and number), a run of send and recv as one group whose
 * messages each move once their other side is posted (rendezvous by sender class, receiver
 * class, axis, offset, tag and number). A heap orders the moments streams become free. Because every
 * start happens at the current time, the per-class figures (busy, exposed, idle) are integrated
 * on the fly from begin/end marks in time order (acct_*), so a step of millions of instructions
 * needs no stored intervals unless the caller asks for them.
 *
 * Limits: the class split assumes that ranks with the same program and the same kinds of peers
 * take the same time, which holds because times live in the program; one rank's interval lists
 * stand for its whole class. Streams of a rank do not slow each other down (no contention for
 * SMs or memory bandwidth); collectives do not contend for links, with each other or with
 * messages, and messages contend only with messages along the same mesh axis (msg_post), which
 * stands for the link they share (the plan does not say which ranks share a node). The
 * live-bytes curve is by instruction index, not by time.
 */
#include "sim.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIM_MAX_EXECUTED (1ull << 32) // instructions a simulation may run (all classes)

// Grows *v (of elem bytes each, capacity *cap) to hold at least need; false when out of memory.
static bool grow(void *vp, uint64_t *cap, uint64_t need, size_t elem) {
    void **v = vp;
    if (need <= *cap) return true;
    uint64_t c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    if (c > SIZE_MAX / elem) return false;
    void *q = realloc(*v, (size_t)c * elem);
    if (!q) return false;
    *v = q;
    *cap = c;
    return true;
}

/* ---- what each program uses: channels (axis, offset) and groups ---- */

typedef struct pinfo {
    uint32_t n_ch;
    int32_t (*ch)[3];           // distinct (axis, offset of the peer, tag) of its sends and receives
    uint32_t *ch_of;            // per instruction: its channel (send and recv)
    uint32_t main_stream;
    int32_t bg_stream;          // a background round's stream, -1: none
    int32_t bg_period;          // its loop's count (0: continuous)
} pinfo;

static int32_t ch_index(pinfo *pi, int32_t a, int32_t b, int32_t tag) {
    for (uint32_t i = 0; i < pi->n_ch; i++)
        if (pi->ch[i][0] == a && pi->ch[i][1] == b && pi->ch[i][2] == tag) return (int32_t)i;
    return -1;
}

static bool pinfo_init(const plan_program *pg, pinfo *pi) {
    memset(pi, 0, sizeof(*pi));
    pi->ch_of = calloc(pg->n_insns + 1, sizeof(uint32_t));
    pi->ch = calloc(pg->n_insns + 1, sizeof(*pi->ch));
    if (!pi->ch_of || !pi->ch) return false;
    bool have_main = false;
    pi->bg_stream = -1;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        if (in->kind == PLAN_I_LOOP && plan_loop_is_background(in->code) && in->b > 0 && i + 1 < pg->n_insns)
            pi->bg_stream = pg->insns[i + 1].stream, pi->bg_period = in->a; // plan_check: the round has one stream
        if (in->kind == PLAN_I_COMPUTE && !have_main) pi->main_stream = in->stream, have_main = true;
        if (in->kind != PLAN_I_SEND && in->kind != PLAN_I_RECV) continue;
        int32_t c = ch_index(pi, in->a, in->b, in->tag);
        if (c < 0) {
            c = (int32_t)pi->n_ch++;
            pi->ch[c][0] = in->a, pi->ch[c][1] = in->b, pi->ch[c][2] = in->tag;
        }
        pi->ch_of[i] = (uint32_t)c;
    }
    return true;
}

/* ---- ranks and their classes ---- */

typedef struct mesh {
    uint32_t n_axes, world;
    uint32_t size[PLAN_MAX_AXES], stride[PLAN_MAX_AXES];
} mesh;

static void mesh_init(const plan *p, mesh *m) {
    m->n_axes = p->meta.n_axes;
    m->world = p->meta.world;
    uint32_t s = 1;
    for (int a = (int)m->n_axes - 1; a >= 0; a--) {
        m->size[a] = p->meta.mesh[a];
        m->stride[a] = s;
        s *= p->meta.mesh[a];
    }
}

// The rank at offset b along axis a from rank r, or PLAN_NONE past the mesh's edge.
static uint32_t peer_of(const mesh *m, uint32_t r, int32_t a, int32_t b) {
    if (a < 0 || (uint32_t)a >= m->n_axes) return PLAN_NONE;
    int64_t c = (int64_t)(r / m->stride[a] % m->size[a]) + b;
    if (c < 0 || c >= m->size[a]) return PLAN_NONE;
    return (uint32_t)((int64_t)r + (int64_t)b * m->stride[a]);
}

// The first rank of r's instance of a group over the axes in mask (its coordinates there 0).
static uint32_t instance_base(const mesh *m, uint32_t r, uint32_t mask) {
    for (uint32_t a = 0; a < m->n_axes; a++)
        if (mask >> a & 1u) r -= r / m->stride[a] % m->size[a] * m->stride[a];
    return r;
}

// Interning of u32 vectors: the same vector, the same id (ids count up from 0 in order of
// first sight).
typedef struct ient {
    uint32_t off, len;
} ient;
typedef struct intern {
    uint32_t *pool; uint64_t n_pool, cap_pool;
    ient *e; uint64_t n, cap_e;
    uint32_t *slot; uint64_t cap;   // open addressing: 0 empty, else id + 1
} intern;

static uint64_t vec_hash(const uint32_t *v, uint32_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    for (uint32_t i = 0; i < n; i++) h = (h ^ v[i]) * 0x100000001b3ull, h ^= h >> 29;
    return h * 0x9e3779b97f4a7c15ull;
}

static bool intern_rehash(intern *t) {
    uint64_t nc = t->cap ? t->cap * 2 : 64;
    uint32_t *ns = calloc(nc, sizeof(uint32_t));
    if (!ns) return false;
    for (uint64_t id = 0; id < t->n; id++) {
        uint64_t j = vec_hash(t->pool + t->e[id].off, t->e[id].len) & (nc - 1);
        while (ns[j]) j = (j + 1) & (nc - 1);
        ns[j] = (uint32_t)id + 1;
    }
    free(t->slot);
    t->slot = ns, t->cap = nc;
    return true;
}

// The id of v; UINT32_MAX when out of memory.
static uint32_t intern_id(intern *t, const uint32_t *v, uint32_t n) {
    if ((t->n + 1) * 2 > t->cap && !intern_rehash(t)) return UINT32_MAX;
    uint64_t j = vec_hash(v, n) & (t->cap - 1);
    for (; t->slot[j]; j = (j + 1) & (t->cap - 1)) {
        const ient *x = &t->e[t->slot[j] - 1];
        if (x->len == n && (!n || memcmp(t->pool + x->off, v, n * sizeof(uint32_t)) == 0)) return t->slot[j] - 1;
    }
    if (!grow(&t->pool, &t->cap_pool, t->n_pool + n + 1, sizeof(uint32_t)) || !grow(&t->e, &t->cap_e, t->n + 1, sizeof(ient)))
        return UINT32_MAX;
    if (n) memcpy(t->pool + t->n_pool, v, n * sizeof(uint32_t));
    t->e[t->n] = (ient){(uint32_t)t->n_pool, n};
    t->n_pool += n;
    t->slot[j] = (uint32_t)t->n + 1;
    return (uint32_t)t->n++;
}

static void intern_free(intern *t) {
    free(t->pool), free(t->e), free(t->slot);
    memset(t, 0, sizeof(*t));
}

static int cmp_u64(const void *x, const void *y) {
    const uint64_t *a = x, *b = y;
    return *a < *b ? -1 : *a > *b;
}

// The sorted distinct classes of pairs[i..e) (low 32 bits), interned in t; UINT32_MAX when out of memory.
static uint32_t set_id(intern *t, const uint64_t *pairs, uint32_t i, uint32_t e, uint32_t *buf) {
    uint32_t k = 0;
    for (uint32_t j = i; j < e; j++)
        if (j == i || (uint32_t)pairs[j] != (uint32_t)pairs[j - 1]) buf[k++] = (uint32_t)pairs[j];
    return intern_id(t, buf, k);
}

// For group g, per rank: the id (in t) of the set of classes of its instance's members
// (PLAN_NONE: a rank outside an explicit group). t->e[id].len is the number of classes.
static bool group_sets(const plan *p, const mesh *m, uint32_t g, const uint32_t *cls, intern *t, uint32_t *out) {
    const plan_group *gr = &p->groups[g];
    uint32_t W = m->world;
    uint64_t *pairs = malloc(sizeof(uint64_t) * ((size_t)W + 1));
    uint32_t *buf = malloc(sizeof(uint32_t) * ((size_t)W + 1));
    bool ok = pairs && buf;
    if (ok && !gr->axes) { // an explicit group: one instance
        for (uint32_t j = 0; j < gr->n_ranks; j++) pairs[j] = cls[gr->ranks[j]];
        qsort(pairs, gr->n_ranks, sizeof(uint64_t), cmp_u64);
        uint32_t id = set_id(t, pairs, 0, gr->n_ranks, buf);
        ok = id != UINT32_MAX;
        for (uint32_t r = 0; r < W; r++) out[r] = PLAN_NONE;
        for (uint32_t j = 0; ok && j < gr->n_ranks; j++) out[gr->ranks[j]] = id;
    } else if (ok) { // over mesh axes: instances by their first rank
        for (uint32_t r = 0; r < W; r++) pairs[r] = (uint64_t)instance_base(m, r, gr->axes) << 32 | cls[r];
        qsort(pairs, W, sizeof(uint64_t), cmp_u64);
        uint32_t *base_set = out; // by base rank first, then per rank (downwards: a base is <= its ranks)
        for (uint32_t i = 0, e; ok && i < W; i = e) {
            for (e = i; e < W && pairs[e] >> 32 == pairs[i] >> 32; e++) {}
            uint32_t id = set_id(t, pairs, i, e, buf);
            ok = id != UINT32_MAX;
            base_set[pairs[i] >> 32] = id;
        }
        for (uint32_t r = W; ok && r-- > 0;) out[r] = base_set[instance_base(m, r, gr->axes)];
    }
    free(pairs), free(buf);
    return ok;
}

typedef struct classes {
    uint32_t n;
    uint32_t *of;               // per rank: its class
    uint32_t *first;            // per class: its first rank
    uint32_t *count;            // per class: its ranks
    uint32_t *set;              // per rank x group: the id of its instance's set (PLAN_NONE: none)
    intern sets;                // the sets of classes (their lengths: the member classes)
} classes;

static void classes_free(classes *C) {
    free(C->of), free(C->first), free(C->count), free(C->set);
    intern_free(&C->sets);
    memset(C, 0, sizeof(*C));
}

// The ranks' signatures under the current classes: class, then the class of each message peer
// (PLAN_NONE: none), then the set of each group instance it uses. New classes in t.
static bool signatures(const plan *p, const mesh *m, const pinfo *pi, const bool *gused, classes *C, intern *t,
                       uint32_t *next) {
    uint32_t W = m->world, G = p->n_groups, cap = 1;
    for (uint32_t k = 0; k < p->n_programs; k++) cap = cap > pi[k].n_ch + G + 1 ? cap : pi[k].n_ch + G + 1;
    uint32_t *v = malloc(sizeof(uint32_t) * cap);
    if (!v) return false;
    bool ok = true;
    for (uint32_t r = 0; ok && r < W; r++) {
        uint32_t k = p->ranks[r].program, n = 0;
        v[n++] = C->of[r];
        for (uint32_t c = 0; c < pi[k].n_ch; c++) {
            uint32_t q = peer_of(m, r, pi[k].ch[c][0], pi[k].ch[c][1]);
            v[n++] = q == PLAN_NONE ? PLAN_NONE : C->of[q];
        }
        for (uint32_t g = 0; g < G; g++)
            if (gused[(size_t)k * G + g]) v[n++] = C->set[(size_t)g * W + r];
        next[r] = intern_id(t, v, n);
        ok = next[r] != UINT32_MAX;
    }
    free(v);
    return ok;
}

// Each used group's instance sets under the current classes (C->set, C->sets).
static bool all_sets(const plan *p, const mesh *m, const bool *gused, classes *C) {
    intern_free(&C->sets);
    for (uint32_t g = 0; g < p->n_groups; g++) {
        bool used = false;
        for (uint32_t k = 0; k < p->n_programs; k++) used |= gused[(size_t)k * p->n_groups + g];
        if (used && !group_sets(p, m, g, C->of, &C->sets, C->set + (size_t)g * m->world)) return false;
    }
    return true;
}

// Splits the ranks into classes that run alike: first by program, then until the classes stop
// splitting. Class ids follow their first ranks' order.
static bool rank_classes(const plan *p, const mesh *m, const pinfo *pi, const bool *gused, classes *C) {
    uint32_t W = m->world;
    C->of = malloc(sizeof(uint32_t) * ((size_t)W + 1));
    uint32_t *next = malloc(sizeof(uint32_t) * ((size_t)W + 1));
    C->set = malloc(sizeof(uint32_t) * ((size_t)W * p->n_groups + 1));
    bool ok = C->of && next && C->set;
    intern first = {0};
    for (uint32_t r = 0; ok && r < W; r++) ok = (C->of[r] = intern_id(&first, &p->ranks[r].program, 1)) != UINT32_MAX;
    C->n = (uint32_t)first.n;
    intern_free(&first);
    while (ok) {
        intern t = {0};
        ok = all_sets(p, m, gused, C) && signatures(p, m, pi, gused, C, &t, next);
        uint32_t n = (uint32_t)t.n;
        intern_free(&t);
        if (!ok) break;
        memcpy(C->of, next, sizeof(uint32_t) * W);
        if (n == C->n) break; // stable: refining split nothing
        C->n = n;
    }
    ok = ok && all_sets(p, m, gused, C);
    free(next);
    C->first = calloc((size_t)C->n + 1, sizeof(uint32_t));
    C->count = calloc((size_t)C->n + 1, sizeof(uint32_t));
    if (!ok || !C->first || !C->count) return false;
    for (uint32_t r = W; r-- > 0;) C->first[C->of[r]] = r, C->count[C->of[r]]++;
    return true;
}

/* ---- the simulation's state ---- */

typedef struct item {
    uint32_t insn, mb, layer;
    uint64_t seq;               // record/wait: event ordinal; send/recv: message number; coll: collective number
} item;

typedef struct queue {
    item *v;
    uint64_t head, n, cap;      // a ring
} queue;

enum { ST_READY, ST_BUSY, ST_WAIT_EVENT, ST_WAIT_COLL, ST_WAIT_MSG, ST_DONE };

typedef struct sstate {
    queue q;
    int state;
    item blocked;               // what a waiting stream waits at
    uint32_t msgs_left;         // of its group of sends and receives
    double msgs_end;
} sstate;

typedef struct frame {
    uint32_t start, end;
    int32_t it, count;
    uint16_t var;
    int32_t mb, layer, layers;  // the variables outside this loop, and the layer loop's count there
} frame;

typedef struct evlog {
    double *t;                  // per ordinal - 1: when it was recorded; NAN: not yet
    uint64_t n, cap;
} evlog;

typedef struct mark {
    double t;
    uint8_t flags;
} mark;

enum { F_COMPUTE = 1, F_COMM = 2, F_MAIN = 4 };

typedef struct cstate {
    const plan_program *pg;
    const pinfo *pi;
    uint32_t cls, rank;
    uint32_t pc, depth;         // the walk in program order
    frame stack[PLAN_MAX_LOOP_DEPTH];
    int32_t mb, layer;          // innermost loop variables, -1: none
    int32_t layers;             // the innermost layer loop's count, 0: none (plan_insn_skipped)
    bool walked;                // the walk reached the end
    uint64_t *ev_seen, *sent, *recvd, *colls; // per event, channel, channel, group
    evlog *ev;
    sstate st[8];
    int busy[3];                // running: compute, comm, on the compute stream
    double last_t;
    mark *marks; uint64_t n_marks, cap_marks; // pending ends, a min-heap
    uint64_t cap_iv[8];
    double out_free[PLAN_MAX_AXES], in_free[PLAN_MAX_AXES]; // its link along each mesh axis: busy until
} cstate;

typedef struct party {
    uint32_t cls, stream;
    item it;
    float t_s;
} party;

typedef struct rkey {
    uint32_t w[5];              // coll: 0, group, set; message: 1, sender class, receiver class, axis + 256 tag, offset
    uint64_t seq;
} rkey;

typedef struct rdv {
    rkey key;
    uint32_t needed, n;
    party *m; uint64_t cap_m;   // who has arrived (a message: the send, then or before it the recv)
} rdv;

typedef struct hev {
    double t;
    uint64_t seq;
    uint32_t cls, stream;
} hev;

typedef struct sim {
    const plan *p;
    mesh m;
    pinfo *pi;
    classes C;
    cstate *cs;
    sim_result *r;
    hev *heap; uint64_t n_heap, cap_heap, heap_seq;
    rdv *pool; uint64_t n_pool, cap_pool;
    uint32_t *free_rdv; uint64_t n_free, cap_free;
    uint32_t *slot; uint64_t cap_slot, n_live; // open addressing over pool indices + 1
    double now;
    uint32_t msgs;              // messages matched
    bool oom;
    char *err; size_t err_n;
    plan_status st;
} sim;

static void oom(sim *S) {
    if (!S->oom) plan_errorf(PLAN_ERR_IO, S->err, S->err_n, "out of memory");
    S->oom = true;
    S->st = PLAN_ERR_IO;
}

/* ---- the clock: a min-heap of (time, order) at which a stream is to advance ---- */

static bool hev_less(const hev *a, const hev *b) { return a->t < b->t || (a->t == b->t && a->seq < b->seq); }

static void heap_push(sim *S, double t, uint32_t cls, uint32_t stream) {
    if (!grow(&S->heap, &S->cap_heap, S->n_heap + 1, sizeof(hev))) {
        oom(S);
        return;
    }
    uint64_t i = S->n_heap++;
    hev e = {t, S->heap_seq++, cls, stream};
    while (i && hev_less(&e, &S->heap[(i - 1) / 2])) {
        S->heap[i] = S->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    S->heap[i] = e;
}

static hev heap_pop(sim *S) {
    hev top = S->heap[0], e = S->heap[--S->n_heap];
    uint64_t i = 0, n = S->n_heap;
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && hev_less(&S->heap[c + 1], &S->heap[c])) c++;
        if (!hev_less(&S->heap[c], &e)) break;
        S->heap[i] = S->heap[c];
        i = c;
    }
    if (n) S->heap[i] = e;
    return top;
}

/* ---- rendezvous: collectives and messages waiting for their other parties ---- */

static uint64_t key_hash(const rkey *k) {
    uint32_t v[7] = {k->w[0], k->w[1], k->w[2], k->w[3], k->w[4], (uint32_t)k->seq, (uint32_t)(k->seq >> 32)};
    return vec_hash(v, 7);
}

static bool key_eq(const rkey *a, const rkey *b) { return memcmp(a->w, b->w, sizeof(a->w)) == 0 && a->seq == b->seq; }

static bool rdv_rehash(sim *S) {
    uint64_t nc = S->cap_slot ? S->cap_slot * 2 : 256;
    uint32_t *ns = calloc(nc, sizeof(uint32_t));
    if (!ns) return false;
    for (uint64_t i = 0; i < S->cap_slot; i++) {
        if (!S->slot[i]) continue;
        uint64_t j = key_hash(&S->pool[S->slot[i] - 1].key) & (nc - 1);
        while (ns[j]) j = (j + 1) & (nc - 1);
        ns[j] = S->slot[i];
    }
    free(S->slot);
    S->slot = ns, S->cap_slot = nc;
    return true;
}

// The rendezvous of key (made, needing `needed` parties, if there is none); NULL when out of memory.
static rdv *rdv_get(sim *S, const rkey *k, uint32_t needed) {
    if ((S->n_live + 1) * 2 > S->cap_slot && !rdv_rehash(S)) return oom(S), (rdv *)NULL;
    uint64_t j = key_hash(k) & (S->cap_slot - 1);
    for (; S->slot[j]; j = (j + 1) & (S->cap_slot - 1))
        if (key_eq(&S->pool[S->slot[j] - 1].key, k)) return &S->pool[S->slot[j] - 1];
    uint32_t id;
    if (S->n_free) id = S->free_rdv[--S->n_free];
    else if (S->n_pool < UINT32_MAX - 1 && grow(&S->pool, &S->cap_pool, S->n_pool + 1, sizeof(rdv))) id = (uint32_t)S->n_pool++, S->pool[id].m = NULL, S->pool[id].cap_m = 0;
    else return oom(S), (rdv *)NULL;
    rdv *d = &S->pool[id];
    d->key = *k, d->needed = needed, d->n = 0;
    S->slot[j] = id + 1;
    S->n_live++;
    return d;
}

// Removes d (backward-shift deletion keeps the probe chains whole).
static void rdv_drop(sim *S, rdv *d) {
    uint32_t id = (uint32_t)(d - S->pool);
    uint64_t mask = S->cap_slot - 1, j = key_hash(&d->key) & mask;
    while (S->slot[j] != id + 1) j = (j + 1) & mask;
    for (uint64_t i = (j + 1) & mask; S->slot[i]; i = (i + 1) & mask) {
        uint64_t h = key_hash(&S->pool[S->slot[i] - 1].key) & mask;
        if (((i - h) & mask) >= ((i - j) & mask)) S->slot[j] = S->slot[i], j = i; // its home is at or before the hole
    }
    S->slot[j] = 0;
    S->n_live--;
    if (!grow(&S->free_rdv, &S->cap_free, S->n_free + 1, sizeof(uint32_t))) {
        oom(S);
        return;
    }
    S->free_rdv[S->n_free++] = id;
}

static bool rdv_add(sim *S, rdv *d, party x) {
    if (!grow(&d->m, &d->cap_m, (uint64_t)d->n + 1, sizeof(party))) return oom(S), false;
    d->m[d->n++] = x;
    return true;
}

/* ---- the walk: each class's program in program order, loops expanded ---- */

static void set_var(cstate *c, const frame *f) {
    if (plan_loop_is_background(f->var)) return; // a background round (simulated once per step) sets nothing
    int32_t v = f->var == PLAN_LOOP_REVERSE_LAYER ? f->count - 1 - f->it : f->it;
    if (f->var == PLAN_LOOP_MB) c->mb = v;
    else c->layer = v, c->layers = f->count;
}

static bool queue_push(queue *q, item x) {
    if (q->n == q->cap) {
        uint64_t nc = q->cap ? q->cap * 2 : 16;
        item *v = malloc(sizeof(item) * nc);
        if (!v) return false;
        for (uint64_t i = 0; i < q->n; i++) v[i] = q->v[(q->head + i) % q->cap];
        free(q->v);
        q->v = v, q->cap = nc, q->head = 0;
    }
    q->v[(q->head + q->n++) % q->cap] = x;
    return true;
}

static item *queue_front(queue *q) { return q->n ? &q->v[q->head] : NULL; }
static void queue_pop(queue *q) { q->head = (q->head + 1) % q->cap, q->n--; }

// Instruction i (not a loop) with the current loop variables, counted and queued on its stream.
static void dispatch(sim *S, cstate *c, uint32_t i) {
    const plan_insn *in = &c->pg->insns[i];
    item x = {i, (uint32_t)((c->mb < 0 ? 0 : c->mb) + in->mb_delta), (uint32_t)((c->layer < 0 ? 0 : c->layer) + in->layer_delta), 0};
    switch (in->kind) {
    case PLAN_I_RECORD: {
        evlog *e = &c->ev[in->a];
        x.seq = ++c->ev_seen[in->a];
        if (!grow(&e->t, &e->cap, x.seq, sizeof(double))) {
        oom(S);
        return;
    }
        e->t[e->n++] = NAN;
        break;
    }
    case PLAN_I_WAIT: x.seq = c->ev_seen[in->a]; break;
    case PLAN_I_SEND: x.seq = ++c->sent[c->pi->ch_of[i]]; break;
    case PLAN_I_RECV: x.seq = ++c->recvd[c->pi->ch_of[i]]; break;
    case PLAN_I_COLL: x.seq = ++c->colls[in->a]; break;
    default: break;
    }
    S->r->executed++;
    S->r->classes[c->cls].executed++;
    if (!queue_push(&c->st[in->stream].q, x)) oom(S);
}

// Walks class c to its next instruction and queues it (not one the loop skips in this
// iteration: plan_insn_skipped); false at the end of the program.
static bool gen_next(sim *S, cstate *c) {
    const plan_program *pg = c->pg;
    for (;;) {
        while (c->depth && c->pc == c->stack[c->depth - 1].end) {
            frame *f = &c->stack[c->depth - 1];
            if (++f->it < f->count) {
                c->pc = f->start;
                set_var(c, f);
            } else {
                c->mb = f->mb, c->layer = f->layer, c->layers = f->layers;
                c->depth--;
            }
        }
        if (c->pc >= pg->n_insns) return !(c->walked = true);
        const plan_insn *in = &pg->insns[c->pc];
        if (in->kind != PLAN_I_LOOP) {
            if (plan_insn_skipped(in, c->layer, c->layers)) {
                c->pc++;
                continue;
            }
            dispatch(S, c, c->pc++);
            return true;
        }
        frame *f = &c->stack[c->depth++];
        *f = (frame){c->pc + 1, c->pc + 1 + (uint32_t)in->b, 0, (int32_t)plan_loop_trips(in), in->code, c->mb, c->layer, c->layers};
        c->pc++;
        set_var(c, f);
    }
}

// The next item of stream s of class c (walking on as needed), or NULL when it has no more.
static item *next_item(sim *S, cstate *c, uint32_t s) {
    queue *q = &c->st[s].q;
    while (!q->n && !c->walked && !S->oom) gen_next(S, c);
    return S->oom ? NULL : queue_front(q);
}

/* ---- the figures: busy, exposed and idle time, integrated in time order ---- */

// Adds the time from c->last_t to t to the figures of what runs.
static void acct_to(sim *S, cstate *c, double t) {
    sim_class *k = &S->r->classes[c->cls];
    double dt = t - c->last_t;
    if (dt <= 0) return;
    if (c->busy[0]) k->compute_s += dt;
    if (c->busy[1]) k->comm_s += dt;
    if (c->busy[1] && !c->busy[0]) k->exposed_comm_s += dt;
    if (c->busy[2]) k->main_busy_s += dt;
    c->last_t = t;
}

static void busy_add(cstate *c, uint8_t flags, int d) {
    if (flags & F_COMPUTE) c->busy[0] += d;
    if (flags & F_COMM) c->busy[1] += d;
    if (flags & F_MAIN) c->busy[2] += d;
}

// Applies the ends due by time t, in order, then brings the figures to t.
static void acct_advance(sim *S, cstate *c, double t) {
    while (c->n_marks && c->marks[0].t <= t) {
        mark top = c->marks[0], e = c->marks[--c->n_marks];
        uint64_t i = 0, n = c->n_marks;
        for (;;) {
            uint64_t ch = 2 * i + 1;
            if (ch >= n) break;
            if (ch + 1 < n && c->marks[ch + 1].t < c->marks[ch].t) ch++;
            if (c->marks[ch].t >= e.t) break;
            c->marks[i] = c->marks[ch];
            i = ch;
        }
        if (n) c->marks[i] = e;
        acct_to(S, c, top.t);
        busy_add(c, top.flags, -1);
    }
    acct_to(S, c, t);
}

// Something of kind `flags` runs on class c from now to end.
static void acct_begin(sim *S, cstate *c, uint8_t flags, double end) {
    acct_advance(S, c, S->now);
    busy_add(c, flags, +1);
    if (!grow(&c->marks, &c->cap_marks, c->n_marks + 1, sizeof(mark))) {
        oom(S);
        return;
    }
    uint64_t i = c->n_marks++;
    while (i && end < c->marks[(i - 1) / 2].t) {
        c->marks[i] = c->marks[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    c->marks[i] = (mark){end, flags};
}

// The figures of a background round's instruction (kept apart from the foreground's step), and
// the foreground's use of the links that the round's collectives share.
static void acct_background(sim_class *k, const plan_insn *in, bool round, double d) {
    bool link = in->kind == PLAN_I_COLL || in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV;
    if (!link) return;
    if (!round) {
        k->fg_link_s += d, k->fg_colls++;
        return;
    }
    k->round_link_s += d, k->round_colls++;
    if (d > k->round_coll_max_s) k->round_coll_max_s = d;
}

// An instruction of class c runs on stream s from now to end: the figures, and its interval.
static void run(sim *S, cstate *c, uint32_t s, const item *x, double end, uint32_t msg) {
    const plan_insn *in = &c->pg->insns[x->insn];
    uint8_t flags = (in->kind == PLAN_I_COMPUTE || in->kind == PLAN_I_COPY ? F_COMPUTE : F_COMM) |
                    (s == c->pi->main_stream ? F_MAIN : 0);
    sim_class *k = &S->r->classes[c->cls];
    bool round = (int32_t)s == c->pi->bg_stream;
    acct_background(k, in, round, end - S->now);
    if (!round) acct_begin(S, c, flags, end);
    if (!k->kept) return;
    if (!grow(&k->iv[s], &c->cap_iv[s], (uint64_t)k->n_iv[s] + 1, sizeof(sim_interval))) {
        oom(S);
        return;
    }
    k->iv[s][k->n_iv[s]++] = (sim_interval){S->now, end, x->insn, x->mb, x->layer, msg};
}

// Stream s of class c runs until t.
static void busy_until(sim *S, cstate *c, uint32_t s, double t) {
    c->st[s].state = ST_BUSY;
    heap_push(S, t, c->cls, s);
}

/* ---- collectives and messages ---- */

// Class c reaches collective x on stream s; when it is the last member, all start now.
static void coll_arrive(sim *S, cstate *c, uint32_t s, const item *x) {
    const plan_insn *in = &c->pg->insns[x->insn];
    uint32_t g = (uint32_t)in->a, set = S->C.set[(size_t)g * S->m.world + c->rank];
    if (set == PLAN_NONE) {
        S->st = plan_errorf(PLAN_ERR_INVALID, S->err, S->err_n, "rank %u (program %u): insn %u (%s) is a collective on group %u, which rank %u is not a member of",
                     c->rank, S->p->ranks[c->rank].program, x->insn, plan_insn_name(in), g, c->rank);
        return;
    }
    rkey k = {{0, g, set, 0, 0}, x->seq};
    rdv *d = rdv_get(S, &k, S->C.sets.e[set].len);
    if (!d || !rdv_add(S, d, (party){c->cls, s, *x, in->t_s})) return;
    c->st[s].state = ST_WAIT_COLL;
    c->st[s].blocked = *x;
    if (d->n < d->needed) return;
    double t = 0;
    for (uint32_t i = 0; i < d->n; i++) t = t > d->m[i].t_s ? t : d->m[i].t_s;
    for (uint32_t i = 0; i < d->n; i++) {
        cstate *o = &S->cs[d->m[i].cls];
        run(S, o, d->m[i].stream, &d->m[i].it, S->now + t, 0);
        busy_until(S, o, d->m[i].stream, S->now + t);
    }
    rdv_drop(S, d);
}

// One message of a group has moved: when it was the group's last, the stream is free at its end.
static void msg_done(sim *S, cstate *c, uint32_t s, double end) {
    sstate *st = &c->st[s];
    st->msgs_end = st->msgs_end > end ? st->msgs_end : end;
    if (--st->msgs_left == 0) busy_until(S, c, s, st->msgs_end);
}

// Class c posts send or receive x on stream s; it moves now if its other side is posted.
static void msg_post(sim *S, cstate *c, uint32_t s, const item *x) {
    const plan_insn *in = &c->pg->insns[x->insn];
    uint32_t q = peer_of(&S->m, c->rank, in->a, in->b);
    if (q == PLAN_NONE) {
        S->st = plan_errorf(PLAN_ERR_INVALID, S->err, S->err_n, "rank %u (program %u): insn %u (%s) along mesh axis %d %+d has no peer",
                     c->rank, S->p->ranks[c->rank].program, x->insn, plan_insn_name(in), in->a, in->b);
        return;
    }
    bool send = in->kind == PLAN_I_SEND;
    uint32_t pc = S->C.of[q], from = send ? c->cls : pc, to = send ? pc : c->cls;
    rkey k = {{1, from, to, (uint32_t)in->a | (uint32_t)in->tag << 8, (uint32_t)(send ? in->b : -in->b)}, x->seq};
    rdv *d = rdv_get(S, &k, 2);
    if (!d || !rdv_add(S, d, (party){c->cls, s, *x, in->t_s})) return;
    if (d->n < 2) return;
    // It moves once the sender's link along the axis is free of the sender's earlier messages and
    // the receiver's of its earlier receipts (one NIC or NVLink port each way, as the cost model's
    // time has the whole link).
    cstate *sc = &S->cs[from], *rc = &S->cs[to];
    double t = d->m[0].t_s > d->m[1].t_s ? d->m[0].t_s : d->m[1].t_s;
    double end = fmax(S->now, fmax(sc->out_free[in->a], rc->in_free[in->a])) + t;
    sc->out_free[in->a] = rc->in_free[in->a] = end;
    uint32_t msg = ++S->msgs;
    for (int i = 0; i < 2; i++) run(S, &S->cs[d->m[i].cls], d->m[i].stream, &d->m[i].it, end, msg);
    party a = d->m[0], b = d->m[1];
    rdv_drop(S, d);
    msg_done(S, &S->cs[a.cls], a.stream, end);
    msg_done(S, &S->cs[b.cls], b.stream, end);
}

// Stream s of class c posts its run of sends and receives (x is the first, already taken).
static void msg_group(sim *S, cstate *c, uint32_t s, item x) {
    sstate *st = &c->st[s];
    st->state = ST_WAIT_MSG;
    st->blocked = x;
    st->msgs_left = 1; // held until every message is posted, so that none completes the group early
    st->msgs_end = S->now;
    for (;;) {
        st->msgs_left++;
        msg_post(S, c, s, &x);
        item *n = next_item(S, c, s);
        if (S->st || !n) break;
        uint8_t k = c->pg->insns[n->insn].kind;
        if (k != PLAN_I_SEND && k != PLAN_I_RECV) break;
        x = *n;
        queue_pop(&st->q);
    }
    if (!S->st) msg_done(S, c, s, S->now);
}

/* ---- streams ---- */

// Record ordinal x->seq of event e is done now: the streams of c that wait for it go on.
static void record(sim *S, cstate *c, uint32_t e, uint64_t ord) {
    c->ev[e].t[ord - 1] = S->now;
    for (uint32_t s = 0; s < c->pg->n_streams; s++) {
        sstate *o = &c->st[s];
        if (o->state != ST_WAIT_EVENT) continue;
        const plan_insn *w = &c->pg->insns[o->blocked.insn];
        if ((uint32_t)w->a == e && o->blocked.seq == ord) {
            o->state = ST_READY;
            heap_push(S, S->now, c->cls, s);
        }
    }
}

// Runs stream s of class c from now: its instructions that take no time, up to the next that
// takes time or waits.
static void advance(sim *S, cstate *c, uint32_t s) {
    sstate *st = &c->st[s];
    st->state = ST_READY;
    for (item *x; !S->st && (x = next_item(S, c, s));) {
        const plan_insn *in = &c->pg->insns[x->insn];
        item it = *x;
        if (in->kind == PLAN_I_WAIT && it.seq && isnan(c->ev[in->a].t[it.seq - 1])) {
            st->state = ST_WAIT_EVENT;
            st->blocked = it;
            return;
        }
        queue_pop(&st->q);
        switch (in->kind) {
        case PLAN_I_RECORD: record(S, c, (uint32_t)in->a, it.seq); continue;
        case PLAN_I_WAIT: continue;
        case PLAN_I_COLL: coll_arrive(S, c, s, &it); return;
        case PLAN_I_SEND:
        case PLAN_I_RECV: msg_group(S, c, s, it); return;
        default: // compute, copy
            run(S, c, s, &it, S->now + in->t_s, 0);
            busy_until(S, c, s, S->now + in->t_s);
            return;
        }
    }
    if (!S->st && st->state == ST_READY) {
        st->state = ST_DONE;
        sim_class *k = &S->r->classes[c->cls];
        double *e = (int32_t)s == c->pi->bg_stream ? &k->round_s : &k->end_s;
        *e = *e > S->now ? *e : S->now;
    }
}

/* ---- a deadlock: what each stream that cannot go on waits for ---- */

static int describe_wait(const sim *S, const cstate *c, uint32_t s, char *buf, size_t n) {
    const sstate *st = &c->st[s];
    const item *x = &st->blocked;
    const plan_insn *in = &c->pg->insns[x->insn];
    int k = snprintf(buf, n, "rank %u (program %u \"%s\") stream %u: insn %u (%s, micro-batch %u, layer %u) waits for ", c->rank,
                     S->p->ranks[c->rank].program, c->pg->name, s, x->insn, plan_insn_name(in), x->mb, x->layer);
    if (k < 0 || (size_t)k >= n) return k;
    if (st->state == ST_WAIT_EVENT)
        return k + snprintf(buf + k, n - (size_t)k, "record %llu of event %d", (unsigned long long)x->seq, in->a);
    if (st->state == ST_WAIT_COLL)
        return k + snprintf(buf + k, n - (size_t)k, "the other members of group %d (its collective %llu on it)", in->a,
                            (unsigned long long)x->seq);
    uint32_t q = peer_of(&S->m, c->rank, in->a, in->b);
    return k + snprintf(buf + k, n - (size_t)k, "%s (message %llu %s rank %u along %.8s %+d)",
                        st->msgs_left > 1 ? "its group's messages" : "its message", (unsigned long long)x->seq,
                        in->kind == PLAN_I_SEND ? "to" : "from", q, S->p->meta.axis_names[in->a], in->b);
}

static void deadlock(sim *S) {
    char msg[2048];
    int at = snprintf(msg, sizeof(msg), "deadlock: the step cannot finish at %.6g s: ", S->now), shown = 0;
    for (uint32_t k = 0; k < S->C.n && at < (int)sizeof(msg); k++)
        for (uint32_t s = 0; s < S->cs[k].pg->n_streams && at < (int)sizeof(msg); s++) {
            if (S->cs[k].st[s].state == ST_DONE) continue;
            if (shown++ == 4) {
                at += snprintf(msg + at, sizeof(msg) - (size_t)at, "; ...");
                k = S->C.n;
                break;
            }
            if (shown > 1) at += snprintf(msg + at, sizeof(msg) - (size_t)at, "; ");
            if (at < (int)sizeof(msg)) at += describe_wait(S, &S->cs[k], s, msg + at, sizeof(msg) - (size_t)at);
        }
    S->st = plan_errorf(PLAN_ERR_INVALID, S->err, S->err_n, "%s", msg);
}

static void simulate(sim *S) {
    for (uint32_t k = 0; k < S->C.n; k++)
        for (uint32_t s = 0; s < S->cs[k].pg->n_streams; s++) heap_push(S, 0, k, s);
    while (!S->st && S->n_heap) {
        hev e = heap_pop(S);
        S->now = e.t;
        advance(S, &S->cs[e.cls], e.stream);
    }
    if (S->st) return;
    for (uint32_t k = 0; k < S->C.n; k++)
        for (uint32_t s = 0; s < S->cs[k].pg->n_streams; s++)
            if (S->cs[k].st[s].state != ST_DONE) {
                deadlock(S);
                return;
            }
    for (uint32_t k = 0; k < S->C.n; k++) acct_advance(S, &S->cs[k], INFINITY);
}

/* ---- memory: bytes live at each instruction, as the compiler's planner counts them ---- */

typedef struct bufuse {
    int64_t first, last;
    int64_t loop;               // the innermost loop of its uses, -2 none yet, -3 several
    bool first_writes;
} bufuse;

// Per instruction: the innermost and outermost loop around it (-1: none) and each loop's end.
static void loop_nest(const plan_program *pg, int64_t *inner, int64_t *outer, int64_t *end) {
    int64_t stack[PLAN_MAX_LOOP_DEPTH + 1];
    int depth = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        while (depth && (int64_t)i > end[stack[depth - 1]]) depth--;
        inner[i] = depth ? stack[depth - 1] : -1;
        outer[i] = depth ? stack[0] : -1;
        end[i] = pg->insns[i].kind == PLAN_I_LOOP ? (int64_t)i + pg->insns[i].b : (int64_t)i;
        if (pg->insns[i].kind == PLAN_I_LOOP && depth < PLAN_MAX_LOOP_DEPTH) stack[depth++] = i;
    }
}

static void buffer_uses(const plan_program *pg, const int64_t *inner, bufuse *u) {
    for (uint32_t b = 0; b < pg->n_buffers; b++) u[b] = (bufuse){-1, -1, -2, false};
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        for (uint32_t j = 0; j < in->nargs; j++) {
            bufuse *x = &u[pg->args[in->args + j]];
            if (x->first < 0) x->first = i, x->first_writes = plan_arg_role(pg, in, j) == PLAN_ARG_WRITE;
            x->last = i;
            x->loop = x->loop == -2 ? inner[i] : x->loop == inner[i] ? x->loop : -3;
        }
    }
}

// Bytes live at each instruction of pg (NULL when out of memory); *peak gets the most.
static uint64_t *live_curve(const plan_program *pg, uint64_t *peak) {
    size_t n = pg->n_insns;
    int64_t *inner = malloc(sizeof(int64_t) * (n + 1)), *outer = malloc(sizeof(int64_t) * (n + 1));
    int64_t *end = malloc(sizeof(int64_t) * (n + 1)), *delta = calloc(n + 2, sizeof(int64_t));
    bufuse *u = malloc(sizeof(bufuse) * ((size_t)pg->n_buffers + 1));
    uint64_t *live = malloc(sizeof(uint64_t) * (n + 1));
    *peak = 0;
    if (inner && outer && end && delta && u && live) {
        loop_nest(pg, inner, outer, end);
        buffer_uses(pg, inner, u);
        for (uint32_t b = 0; b < pg->n_buffers; b++) {
            const plan_buffer *bf = &pg->buffers[b];
            bufuse x = u[b];
            if (x.first < 0) continue;
            bool tight = x.loop != -3 && x.first_writes && bf->mb_slots == 1 && bf->layer_slots == 1;
            if (bf->flags & PLAN_BUF_PERSIST) x.first = 0, x.last = (int64_t)n - 1;
            else if (!tight && outer[x.first] >= 0) x.first = outer[x.first];
            if (!tight && !(bf->flags & PLAN_BUF_PERSIST) && outer[x.last] >= 0 && end[outer[x.last]] > x.last) x.last = end[outer[x.last]];
            int64_t bytes = (int64_t)(bf->bytes * bf->mb_slots * bf->layer_slots);
            delta[x.first] += bytes, delta[x.last + 1] -= bytes;
        }
        int64_t run_ = 0;
        for (size_t i = 0; i < n; i++) {
            run_ += delta[i];
            live[i] = (uint64_t)run_;
            if (live[i] > *peak) *peak = live[i];
        }
    } else {
        free(live), live = NULL;
    }
    free(inner), free(outer), free(end), free(delta), free(u);
    return live;
}

/* ---- putting it together ---- */

// Instructions one run of pg executes (loops multiplied out), saturating.
static uint64_t executed_per_run(const plan_program *pg) {
    uint64_t total = 0, mult[PLAN_MAX_LOOP_DEPTH + 1] = {1};
    uint32_t end[PLAN_MAX_LOOP_DEPTH + 1];
    int depth = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        while (depth && i >= end[depth]) depth--;
        const plan_insn *in = &pg->insns[i];
        if (in->kind != PLAN_I_LOOP) {
            total = total + mult[depth] < total ? UINT64_MAX : total + mult[depth];
            continue;
        }
        if (depth == PLAN_MAX_LOOP_DEPTH) continue;
        end[depth + 1] = i + 1 + (uint32_t)in->b;
        uint64_t a = plan_loop_trips(in);
        mult[depth + 1] = a && mult[depth] > UINT64_MAX / a ? UINT64_MAX : mult[depth] * a;
        depth++;
    }
    return total;
}

// What the simulation needs of the plan, checked: every program loaded, a size it can run.
static plan_status sim_check(const plan *p, char *err, size_t err_n) {
    plan_status st = plan_validate(p, err, err_n);
    if (st) return st;
    uint64_t total = 0;
    for (uint32_t r = 0; r < p->n_ranks; r++) {
        const plan_program *pg = &p->programs[p->ranks[r].program];
        if (!pg->name)
            return plan_errorf(PLAN_ERR_FORMAT, err, err_n, "program %u (rank %u) is not loaded: the simulation needs every program",
                        p->ranks[r].program, r);
    }
    for (uint32_t k = 0; k < p->n_programs; k++) {
        uint64_t e = executed_per_run(&p->programs[k]);
        total = total + e < total ? UINT64_MAX : total + e;
    }
    if (total > SIM_MAX_EXECUTED)
        return plan_errorf(PLAN_ERR_LIMIT, err, err_n, "the programs run more than %llu instructions per step: too many to simulate",
                    (unsigned long long)SIM_MAX_EXECUTED);
    return PLAN_OK;
}

static bool sim_setup(sim *S, const sim_opts *o) {
    const plan *p = S->p;
    sim_result *r = S->r;
    mesh_init(p, &S->m);
    S->pi = calloc((size_t)p->n_programs + 1, sizeof(pinfo));
    bool *gused = calloc((size_t)p->n_programs * p->n_groups + 1, sizeof(bool));
    bool ok = S->pi && gused;
    for (uint32_t k = 0; ok && k < p->n_programs; k++) {
        const plan_program *pg = &p->programs[k];
        ok = pinfo_init(pg, &S->pi[k]);
        for (uint32_t i = 0; ok && i < pg->n_insns; i++)
            if (pg->insns[i].kind == PLAN_I_COLL) gused[(size_t)k * p->n_groups + (uint32_t)pg->insns[i].a] = true;
    }
    ok = ok && rank_classes(p, &S->m, S->pi, gused, &S->C);
    free(gused);
    if (!ok) return false;
    r->n_classes = S->C.n;
    r->classes = calloc(S->C.n, sizeof(sim_class));
    r->rank_class = malloc(sizeof(uint32_t) * ((size_t)p->n_ranks + 1));
    S->cs = calloc(S->C.n, sizeof(cstate));
    if (!r->classes || !r->rank_class || !S->cs) return false;
    memcpy(r->rank_class, S->C.of, sizeof(uint32_t) * p->n_ranks);
    for (uint32_t r0 = 0; o && o->intervals && r0 < p->n_ranks; r0++)
        if (r0 >= o->rank_lo && r0 <= o->rank_hi) r->classes[S->C.of[r0]].kept = true;
    for (uint32_t k = 0; k < S->C.n; k++) {
        cstate *c = &S->cs[k];
        sim_class *x = &r->classes[k];
        x->rank = c->rank = S->C.first[k];
        x->program = p->ranks[c->rank].program;
        x->n_ranks = S->C.count[k];
        c->cls = k;
        c->pg = &p->programs[x->program];
        c->pi = &S->pi[x->program];
        x->main_stream = c->pi->main_stream;
        c->mb = c->layer = -1, c->layers = 0;
        c->ev_seen = calloc(c->pg->n_events + 1, sizeof(uint64_t));
        c->ev = calloc(c->pg->n_events + 1, sizeof(evlog));
        c->sent = calloc(c->pi->n_ch + 1, sizeof(uint64_t));
        c->recvd = calloc(c->pi->n_ch + 1, sizeof(uint64_t));
        c->colls = calloc((size_t)p->n_groups + 1, sizeof(uint64_t));
        if (!c->ev_seen || !c->ev || !c->sent || !c->recvd || !c->colls) return false;
    }
    return true;
}

static void sim_teardown(sim *S) {
    for (uint32_t k = 0; S->cs && k < S->C.n; k++) {
        cstate *c = &S->cs[k];
        for (uint32_t e = 0; c->ev && e < c->pg->n_events; e++) free(c->ev[e].t);
        for (int s = 0; s < 8; s++) free(c->st[s].q.v);
        free(c->ev_seen), free(c->ev), free(c->sent), free(c->recvd), free(c->colls), free(c->marks);
    }
    for (uint32_t k = 0; S->pi && k < S->p->n_programs; k++) free(S->pi[k].ch), free(S->pi[k].ch_of);
    for (uint64_t i = 0; i < S->n_pool; i++) free(S->pool[i].m);
    free(S->cs), free(S->pi), free(S->heap), free(S->pool), free(S->free_rdv), free(S->slot);
    classes_free(&S->C);
}

// The step's figures from the classes' (each class counts for its ranks).
static void sim_figures(const plan *p, sim_result *r) {
    double W = p->meta.world;
    for (uint32_t k = 0; k < r->n_classes; k++) r->step_s = r->step_s > r->classes[k].end_s ? r->step_s : r->classes[k].end_s;
    for (uint32_t k = 0; k < r->n_classes; k++) {
        const sim_class *c = &r->classes[k];
        double bubble = r->step_s > 0 ? (r->step_s - c->main_busy_s) / r->step_s : 0;
        r->bubble += bubble * c->n_ranks / W;
        r->compute_s += c->compute_s * c->n_ranks / W;
        r->comm_s += c->comm_s * c->n_ranks / W;
        r->exposed_comm_s += c->exposed_comm_s * c->n_ranks / W;
        if (!k || bubble > r->bubble_max) r->bubble_max = bubble, r->bubble_max_rank = c->rank;
        if (!k || c->compute_s > r->compute_max_s) r->compute_max_s = c->compute_s, r->compute_max_rank = c->rank;
        if (!k || c->exposed_comm_s > r->exposed_comm_max_s) r->exposed_comm_max_s = c->exposed_comm_s, r->exposed_max_rank = c->rank;
    }
    if (r->step_s > 0 && p->meta.model_flops > 0) r->tflops_per_gpu = p->meta.model_flops / r->step_s / W / 1e12;
    if (p->meta.device_peak_flops > 0) r->mfu = r->tflops_per_gpu * 1e12 / p->meta.device_peak_flops;
    for (uint32_t q = 0; q < p->n_ranks; q++) {
        const plan_program *pg = &p->programs[p->ranks[q].program];
        if (pg->arena_bytes > r->peak_bytes || !q) r->peak_bytes = pg->arena_bytes, r->peak_program = p->ranks[q].program;
    }
}

/* ---- a background round beside the steps ---- */

// The round's figures (sim.h's sim_background): its time alone, then beside the steps with the
// links shared, and the steps it spans.
static void sim_background_figures(const sim *S, sim_result *r) {
    sim_background *b = &r->bg;
    for (uint32_t k = 0; k < r->n_classes; k++) {
        const sim_class *c = &r->classes[k];
        const pinfo *pi = &S->pi[c->program];
        if (pi->bg_stream < 0) continue;
        b->present = true, b->period = pi->bg_period;
        if (c->round_s > b->round_s) b->round_s = c->round_s, b->round_link_s = c->round_link_s;
        if (c->round_colls > b->n_colls) b->n_colls = c->round_colls;
        if (c->round_coll_max_s > b->coll_max_s) b->coll_max_s = c->round_coll_max_s;
        double share = r->step_s > 0 ? c->fg_link_s / r->step_s : 0;
        if (share > b->fg_link_share) b->fg_link_share = share > 1 ? 1 : share;
        if (c->fg_colls > b->fg_colls) b->fg_colls = c->fg_colls;
    }
    if (!b->present) return;
    b->fg_delay_max_s = b->fg_colls * b->coll_max_s;
    double other = b->round_s - b->round_link_s;
    b->round_shared_s = b->fg_link_share >= 1 && b->round_link_s > 0 ? INFINITY : other + b->round_link_s / (1 - b->fg_link_share);
    uint32_t floor_steps = b->period > 0 ? (uint32_t)b->period : 1;
    if (!(r->step_s > 0) || isinf(b->round_shared_s)) {
        b->steps_per_round = INFINITY, b->staleness = UINT32_MAX, b->rounds_per_step = 0;
        return;
    }
    b->steps_per_round = b->round_shared_s / r->step_s;
    double up = ceil(b->steps_per_round * (1 - 1e-9)); // a round of exactly k steps spans k
    b->staleness = up > floor_steps ? (up >= UINT32_MAX ? UINT32_MAX : (uint32_t)up) : floor_steps;
    b->rounds_per_step = 1.0 / b->staleness;
    if (b->period == 0 && b->round_shared_s > 0 && b->steps_per_round < 1) b->rounds_per_step = 1 / b->steps_per_round;
}

static bool sim_memory(const plan *p, sim_result *r) {
    r->n_programs = p->n_programs;
    r->live_bytes = calloc((size_t)p->n_programs + 1, sizeof(uint64_t *));
    if (!r->live_bytes) return false;
    for (uint32_t k = 0; k < p->n_programs; k++) {
        uint64_t peak;
        if (!p->programs[k].name) continue;
        if (!(r->live_bytes[k] = live_curve(&p->programs[k], &peak))) return false;
        if (peak > r->live_peak_bytes) r->live_peak_bytes = peak;
    }
    return true;
}

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

plan_status sim_run(const plan *p, const sim_opts *o, sim_result *r, char *err, size_t err_n) {
    memset(r, 0, sizeof(*r));
    double t0 = wall_s();
    plan_status st = sim_check(p, err, err_n);
    if (st) return st;
    sim S = {.p = p, .r = r, .err = err, .err_n = err_n};
    if (!sim_setup(&S, o) || !sim_memory(p, r)) oom(&S);
    else simulate(&S);
    st = S.st;
    if (!st) sim_figures(p, r), sim_background_figures(&S, r); // the latter reads S's pinfo
    sim_teardown(&S);
    if (st) {
        sim_free(r);
        return st;
    }
    r->seconds = wall_s() - t0;
    return PLAN_OK;
}

void sim_free(sim_result *r) {
    if (!r) return;
    for (uint32_t k = 0; r->classes && k < r->n_classes; k++)
        for (int s = 0; s < 8; s++) free(r->classes[k].iv[s]);
    for (uint32_t k = 0; r->live_bytes && k < r->n_programs; k++) free(r->live_bytes[k]);
    free(r->classes), free(r->rank_class), free(r->live_bytes);
    memset(r, 0, sizeof(*r));
}

/* ---- the summary ---- */

static const char *fmt_s(char *buf, size_t n, double s) {
    if (s >= 1 || s == 0) snprintf(buf, n, "%.4g s", s);
    else if (s >= 1e-3) snprintf(buf, n, "%.4g ms", s * 1e3);
    else snprintf(buf, n, "%.4g us", s * 1e6);
    return buf;
}

static const char *fmt_b(char *buf, size_t n, double x) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (u < 5 && x >= 1024) x /= 1024, u++;
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", x, units[u]);
    return buf;
}

static const char *fmt_flop(char *buf, size_t n, double x) {
    static const char *const units[] = {"", "K", "M", "G", "T", "P", "E"};
    int u = 0;
    while (u < 6 && x >= 1000) x /= 1000, u++;
    snprintf(buf, n, "%.3g %sFLOP", x, units[u]);
    return buf;
}

// The background round's lines (none without one); step_s is the foreground's step.
static void sim_print_background(FILE *f, const sim_background *b, double step_s, const char *in) {
    char a[32], c[32], d[32];
    if (!b->present) return;
    char period[32];
    if (b->period > 0) snprintf(period, sizeof period, "a round every %d step%s", b->period, b->period == 1 ? "" : "s");
    else snprintf(period, sizeof period, "continuous rounds");
    fprintf(f, "%sbackground      round %s alone on its stream (%u collectives, %s of them, longest %s); %s\n", in,
            fmt_s(a, sizeof a, b->round_s), b->n_colls, fmt_s(c, sizeof c, b->round_link_s), fmt_s(d, sizeof d, b->coll_max_s), period);
    if (isinf(b->round_shared_s)) {
        fprintf(f, "%s                beside the steps: starved, the foreground's communication holds the links the whole step\n", in);
    } else {
        fprintf(f, "%s                beside the steps: round %s (the foreground's communication holds the links %.1f%% of the step; the "
                   "round's collectives get the rest) = %.3g steps of %s; staleness %u step%s, %.3g rounds per step\n", in, fmt_s(a, sizeof a, b->round_shared_s),
                100 * b->fg_link_share, b->steps_per_round, fmt_s(c, sizeof c, step_s), b->staleness, b->staleness == 1 ? "" : "s",
                b->rounds_per_step);
    }
    if (b->fg_colls)
        fprintf(f, "%s                the foreground's %u collectives and messages may each wait for one background collective: "
                   "at most +%s per step (not in the step above)\n", in, b->fg_colls, fmt_s(a, sizeof a, b->fg_delay_max_s));
}

void sim_print(FILE *f, const plan *p, const sim_result *r, const char *in) {
    char a[32], b[32], c[32];
    const plan_meta *m = &p->meta;
    fprintf(f, "%ssimulated step  %s", in, fmt_s(a, sizeof(a), r->step_s));
    if (m->est_step_s > 0 && r->step_s > 0)
        fprintf(f, "; the estimate says %s (simulated / estimate %.3f)", fmt_s(b, sizeof(b), m->est_step_s), r->step_s / m->est_step_s);
    fputc('\n', f);
    if (m->model_flops > 0) {
        fprintf(f, "%sthroughput      %.4g TFLOP/s per GPU", in, r->tflops_per_gpu);
        if (m->device_peak_flops > 0) fprintf(f, ", MFU %.1f%% of %s/s", 100 * r->mfu, fmt_flop(c, sizeof(c), m->device_peak_flops));
        fprintf(f, " (%s per step, as Megatron-LM counts)\n", fmt_flop(b, sizeof(b), m->model_flops));
    } else {
        fprintf(f, "%sthroughput      unknown (the plan has no model FLOPs)\n", in);
    }
    fprintf(f, "%sbubble          %.1f%% of the step the compute stream is idle (mean over ranks; %.1f%% on rank %u)\n", in,
            100 * r->bubble, 100 * r->bubble_max, r->bubble_max_rank);
    fprintf(f, "%scompute         %s per rank (mean; %s on rank %u)\n", in, fmt_s(a, sizeof(a), r->compute_s),
            fmt_s(b, sizeof(b), r->compute_max_s), r->compute_max_rank);
    fprintf(f, "%scommunication   %s per rank, %s of it exposed (mean; %s exposed on rank %u)\n", in, fmt_s(a, sizeof(a), r->comm_s),
            fmt_s(b, sizeof(b), r->exposed_comm_s), fmt_s(c, sizeof(c), r->exposed_comm_max_s), r->exposed_max_rank);
    sim_print_background(f, &r->bg, r->step_s, in);
    fprintf(f, "%smemory          peak %s per rank (the arena of program %u); live buffers at most %s\n", in,
            fmt_b(a, sizeof(a), (double)r->peak_bytes), r->peak_program, fmt_b(b, sizeof(b), (double)r->live_peak_bytes));
    fprintf(f, "%ssimulation      %u rank%s as %u class%s, %llu instructions in %.3f s\n", in, m->world, m->world == 1 ? "" : "s",
            r->n_classes, r->n_classes == 1 ? "" : "es", (unsigned long long)r->executed, r->seconds);
}
