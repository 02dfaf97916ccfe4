/*
 * pipeline.c: the micro-batch schedules: GPipe, 1F1B, and Megatron-LM's interleaved 1F1B.
 *
 * A schedule is, per pipeline device, the order of its units: the forward or the backward pass
 * of one micro-batch on one model chunk (a stage; with V virtual stages, chunk c runs on
 * device c mod pp). pipeline_units lists them as phase 3 (preserve.c) walks them, with the
 * loops over micro-batches that keep a plan small (a unit inside a loop names its micro-batch
 * relative to the loop's iteration); preserve.c emits each unit's receives, operators and
 * sends, and knows nothing of the order. Plain schedules, stage s of pp, M micro-batches:
 *
 *   GPipe   loop M { F(mb) }  loop M-1 { B(mb) }  B(M-1)
 *   1F1B    w = min(pp - s - 1, M) forward passes first (the warm-up), then F(mb + w) B(mb)
 *           in one loop (steady state), then the last w backward passes (cool-down); the last
 *           micro-batch's backward always stands alone, out of any loop, so that its gradients
 *           are final there and their synchronization overlaps the rest of the backward pass.
 *           With interlaced operators between the passes (mid below), their phase for each
 *           micro-batch runs on every stage, and a stage between the first and the last
 *           receives F(mb + w + 1)'s input right after B(mb)'s send, a pass early.
 *
 * Interleaved 1F1B (Narayanan et al. SC21 section 2.2). Forward unit k (0 <= k < M V) runs local
 * chunk v = (k mod pV) / p for micro-batch (k / pV) p + k mod p: the micro-batches go in groups
 * of p through chunk 0, then the same group through chunk 1, ...; backward unit k the same with
 * v counted down from V-1. Device d first runs w = min((p - d - 1) 2 + (V - 1) p, M V) forward
 * units (warm-up), then alternates forward unit k + w and backward unit k (steady 1F1B), then
 * runs the rest of the backward units (cool-down). As Megatron-LM does, a step computes its
 * units, then sends what they made and receives what the next step's units need, as one group
 * of sends and receives (computing a forward and a backward unit before either sends is what
 * keeps blocking sends from deadlocking): so interleaved units come in parts (receive,
 * compute, send), issued apart. Units are unrolled (O(M V) of them: the plan's loops count
 * micro-batches by one, and the interleaved order steps them by p per group). The gradient
 * contributions summed once per step (preserve.c's deferred ones) go in the group of the last
 * step's sends: sent at their chunk's last backward unit, a blocking send would wait for a
 * receiver that takes them only at its own last unit, while the two still exchange the other
 * micro-batches.
 *
 * Why messages of one tag match in order: every device runs its forward units in the same order
 * of (v, micro-batch), and its backward units in the same order of (V-1-v, micro-batch). The
 * activation from chunk c to c+1 goes from device c mod p, local chunk v, to device (c+1) mod p,
 * local chunk v (or v+1 when c+1 wraps to device 0); for a fixed pair of devices that is a fixed,
 * order-keeping map of v, so the sender sends in the order the receiver receives; gradients
 * likewise. A pair of devices carries both kinds when p = 2 (and the wrap-around from device p-1
 * to 0 carries chunk boundaries), in orders that differ on the two sides: hence preserve.c's
 * message tags (one for activations, one for gradients).
 *
 * pipeline_in_flight says how many micro-batches a chunk holds between its forward and its
 * backward pass at once (the slots its kept activations need), from the same order.
 */
#include "pipeline.h"

#include <math.h>

typedef struct units {
    pcc_arena *a;
    pcc_unit *v;
    int n, cap;
    bool mid; // pcc_pipeline.mid
} units;

static void push(units *U, pcc_unit u) { *VEC_PUSH(U->a, U->v, U->n, U->cap) = u; }

static void loop(units *U, int count) { push(U, (pcc_unit){.kind = PCC_UNIT_LOOP, .count = count}); }
static void end(units *U) { push(U, (pcc_unit){.kind = PCC_UNIT_END}); }

// Parts `part` (PCC_PART_*) of micro-batch mb's forward or backward pass on a chunk.
static void pass_parts(units *U, bool bwd, int chunk, int mb, int part, bool last) {
    push(U, (pcc_unit){.kind = bwd ? PCC_UNIT_BWD : PCC_UNIT_FWD, .chunk = chunk, .mb = mb, .part = part, .last = last});
}

static void pass(units *U, bool bwd, int chunk, int mb, bool last) { pass_parts(U, bwd, chunk, mb, PCC_PART_ALL, last); }

// 1F1B with interlaced operators: their phase for micro-batch mb (layout.c's interlace), which
// every stage runs together: on the last stage between F(mb) and B(mb), on stage s before
// F(mb + w) (w its warm-up's forward passes; before B(mb) where none follows). A stage between
// the first and the last then receives its forward passes' inputs a pass early, as Megatron-LM's
// 1F1B does (B(mb)'s send with F(mb + w + 1)'s receive, the one before the steady state after the
// warm-up's last send), so that each stage meets the phase between the same pairs of grouped
// messages with its neighbours (F(mb + w)'s send with B(mb)'s receive on one side, B(mb - 1)'s
// send with F(mb + w)'s receive on the other): no message waits across it, on any number of stages.
static void mid(units *U, int mb, bool last) {
    if (U->mid) push(U, (pcc_unit){.kind = PCC_UNIT_MID, .mb = mb, .last = last});
}

static void gpipe(units *U, int s, int M) {
    loop(U, M);
    pass(U, false, s, 0, false);
    end(U);
    if (M > 1) {
        loop(U, M - 1);
        pass(U, true, s, 0, false);
        end(U);
    }
    pass(U, true, s, M - 1, true);
}

// The steady state of a stage that receives its forward inputs a pass early (mid above): F(w)'s
// receive, then per micro-batch mb its phase, F(mb + w) and B(mb), and F(mb + w + 1)'s receive
// but after the last.
static void steady_early(units *U, int s, int w, int steady) {
    pass_parts(U, false, s, w, PCC_PART_RECV, false);
    if (steady > 1) {
        loop(U, steady - 1);
        mid(U, 0, false);
        pass_parts(U, false, s, w, PCC_PART_COMPUTE | PCC_PART_SEND, false);
        pass(U, true, s, 0, false);
        pass_parts(U, false, s, w + 1, PCC_PART_RECV, false);
        end(U);
    }
    mid(U, steady - 1, false);
    pass_parts(U, false, s, steady - 1 + w, PCC_PART_COMPUTE | PCC_PART_SEND, false);
    pass(U, true, s, steady - 1, false);
}

static void one_f_one_b(units *U, int s, int pp, int M) {
    int w = pp > 1 ? (pp - s - 1 < M ? pp - s - 1 : M) : 0, steady = M - w; // F(mb + w), B(mb)
    if (w > 0) {
        loop(U, w);
        pass(U, false, s, 0, false);
        end(U);
    }
    if (w == 0) {
        if (steady > 1) {
            loop(U, steady - 1);
            pass(U, false, s, w, false);
            mid(U, 0, false);
            pass(U, true, s, 0, false);
            end(U);
        }
        pass(U, false, s, M - 1, false);
        mid(U, M - 1, true);
        pass(U, true, s, M - 1, true);
        return;
    }
    if (steady > 0 && U->mid && s > 0) {
        steady_early(U, s, w, steady);
    } else if (steady > 0) {
        loop(U, steady);
        mid(U, 0, false);
        pass(U, false, s, w, false);
        pass(U, true, s, 0, false);
        end(U);
    }
    if (w > 1) {
        loop(U, w - 1);
        mid(U, M - w, false);
        pass(U, true, s, M - w, false);
        end(U);
    }
    mid(U, M - 1, true);
    pass(U, true, s, M - 1, true);
}

/* ---- interleaved ---- */

// The forward units device d runs before its first backward unit (the warm-up).
static int warmup_units(const pcc_pipeline *p, int d) {
    int n = p->M * p->V, w = (p->pp - d - 1) * 2 + (p->V - 1) * p->pp;
    return w < n ? w : n;
}

// One part of unit u (forward or backward) of device d; nothing when u is past either end.
static void unit_part(units *U, const pcc_pipeline *p, int d, int u, bool bwd, int part) {
    if (u < 0 || u >= p->M * p->V) return;
    int pp = p->pp, V = p->V, v = (u % (pp * V)) / pp;
    int chunk = (bwd ? V - 1 - v : v) * pp + d, mb = (u / (pp * V)) * pp + u % pp;
    push(U, (pcc_unit){.kind = bwd ? PCC_UNIT_BWD : PCC_UNIT_FWD, .chunk = chunk, .mb = mb, .part = part,
                       .last = bwd && mb == p->M - 1});
}

static void interleaved(units *U, const pcc_pipeline *p, int d) {
    int n = p->M * p->V, w = warmup_units(p, d);
    unit_part(U, p, d, 0, false, PCC_PART_RECV);
    for (int k = 0; k < n + w; k++) {
        int f = k < n ? k : -1, b = k - w; // this step's forward and backward units (-1, < 0: none)
        unit_part(U, p, d, f, false, PCC_PART_COMPUTE);
        unit_part(U, p, d, b, true, PCC_PART_COMPUTE);
        unit_part(U, p, d, f, false, PCC_PART_SEND);
        unit_part(U, p, d, b, true, PCC_PART_SEND);
        if (f >= 0) unit_part(U, p, d, f + 1, false, PCC_PART_RECV);
        unit_part(U, p, d, b + 1, true, PCC_PART_RECV);
    }
    push(U, (pcc_unit){.kind = PCC_UNIT_DEFERRED, .chunk = d, .mb = p->M - 1, .part = PCC_PART_SEND, .last = true});
}

int pipeline_units(pcc_arena *a, const pcc_pipeline *p, int d, pcc_unit **out) {
    units U = {.a = a, .mid = p->mid && p->V == 1 && p->schedule != PCC_PIPE_GPIPE};
    if (p->V > 1) interleaved(&U, p, d);
    else if (p->schedule == PCC_PIPE_GPIPE && p->pp > 1) gpipe(&U, d, p->M);
    else one_f_one_b(&U, d, p->pp, p->M);
    *out = U.v;
    return U.n;
}

int *pipeline_in_flight(pcc_arena *a, const pcc_pipeline *p) {
    int ns = p->pp * p->V, *most = arena_alloc(a, sizeof(int) * (size_t)(ns + 1));
    if (p->V == 1) {
        for (int s = 0; s < ns; s++) {
            int k = p->pp - s;
            most[s] = p->schedule == PCC_PIPE_GPIPE && p->pp > 1 ? p->M : k < p->M ? k : p->M;
        }
        return most;
    }
    // Interleaved: walk each device's units (a chunk's in-flight micro-batches are always
    // consecutive, so slot mb mod that count is free when a forward pass fills it).
    int *now = arena_alloc(a, sizeof(int) * (size_t)(ns + 1));
    for (int d = 0; d < p->pp; d++) {
        pcc_unit *u;
        int n = pipeline_units(a, p, d, &u);
        for (int i = 0; i < n; i++) {
            if (!(u[i].part & PCC_PART_COMPUTE) || (u[i].kind != PCC_UNIT_FWD && u[i].kind != PCC_UNIT_BWD)) continue;
            now[u[i].chunk] += u[i].kind == PCC_UNIT_BWD ? -1 : 1;
            if (now[u[i].chunk] > most[u[i].chunk]) most[u[i].chunk] = now[u[i].chunk];
        }
    }
    return most;
}

/* ---- the schedule's length ----
 *
 * The schedule's units in each device's order, as the runtime runs them: a unit's receives, its
 * operators, its sends; a run of sends and receives (one unit's sends and the next one's
 * receives; interleaved, a step's) is one group, which ends when every message in it has arrived,
 * and a message goes once both its sender and its receiver have reached it (a send waits for its
 * receiver, as NCCL's do). Every unit starts as soon as its device is free and its input is
 * there; nothing else. With equal stages and no messages this is (m + (pp-1)/V) stage-times;
 * with unequal ones it is what the order makes of them: the stages after the busiest one fill
 * and drain while it works through its queue, and a slow first stage holds back the warm-up of
 * every stage after it. */

typedef struct member {
    int msg;            // link * M + micro-batch
    bool send;
    double s;           // how long it takes once both sides are there
} member;

typedef struct item {
    int first, n;       // a group: members[first, first + n); n -1: compute for `s` seconds; -2: a phase every
    double s;           // device runs together (interlaced operators' PCC_UNIT_MID), `s` seconds once all are there
} item;

typedef struct sched {
    pcc_arena *a;
    member *m;
    int n_m, cap_m;
    item *it;
    int n_it, cap_it;
    int open;           // first member of the group being collected
    double ahead[2];    // ... the seconds of its receives and sends so far
    double *wait;       // per message and side (2 msg + !send): the seconds of its side's earlier messages in its group
    int **in, **out;    // per chunk and pass (2 k + bwd): the links to it, from it, -1 ended
} sched;

static void flush(sched *S) {
    if (S->n_m > S->open) *VEC_PUSH(S->a, S->it, S->n_it, S->cap_it) = (item){S->open, S->n_m - S->open, 0};
    S->open = S->n_m;
    S->ahead[0] = S->ahead[1] = 0;
}

// A device's sends go one after another over its link, as do its receives (sim.c's msg_post): a
// message waits for those before it in its group on either side.
static void members(sched *S, const int *links, const pcc_pipe_link *l, int M, int mb, bool send) {
    for (; *links >= 0; links++) {
        int msg = *links * M + mb;
        *VEC_PUSH(S->a, S->m, S->n_m, S->cap_m) = (member){msg, send, l[*links].s};
        S->wait[2 * msg + !send] = S->ahead[send];
        S->ahead[send] += l[*links].s;
    }
}

// Device d's items: its units with their loops unrolled (loops do not nest), cut into groups of
// messages and computes.
static void device_items(sched *S, const pcc_pipeline *p, const pcc_chunk_times *c, const pcc_pipe_link *l, int d) {
    pcc_unit *u;
    int n = pipeline_units(S->a, p, d, &u);
    for (int i = 0; i < n; i++) {
        int from = i, to = i + 1, count = 1;
        if (u[i].kind == PCC_UNIT_LOOP) {
            for (to = i + 1; u[to].kind != PCC_UNIT_END; to++) PCC_ASSERT(u[to].kind != PCC_UNIT_LOOP);
            from = i + 1, count = u[i].count, i = to;
        }
        for (int it = 0; it < count; it++)
            for (int j = from; j < to; j++) {
                const pcc_unit *x = &u[j];
                if (x->kind == PCC_UNIT_MID) {
                    flush(S);
                    *VEC_PUSH(S->a, S->it, S->n_it, S->cap_it) = (item){0, -2, p->mid_s};
                }
                if (x->kind != PCC_UNIT_FWD && x->kind != PCC_UNIT_BWD) continue;
                bool bwd = x->kind == PCC_UNIT_BWD;
                int k = 2 * x->chunk + bwd, mb = x->mb + it;
                if (x->part & PCC_PART_RECV) members(S, S->in[k], l, p->M, mb, false);
                if (x->part & PCC_PART_COMPUTE) {
                    flush(S);
                    *VEC_PUSH(S->a, S->it, S->n_it, S->cap_it) = (item){0, -1, bwd ? c[x->chunk].bwd : c[x->chunk].fwd};
                }
                if (x->part & PCC_PART_SEND) members(S, S->out[k], l, p->M, mb, true);
            }
    }
    flush(S);
}

// Per chunk and pass, the links that end (to) or start (!to) there, each list ended by -1. A
// value between two chunks of one device is no message.
static int **link_lists(pcc_arena *a, const pcc_pipeline *p, const pcc_pipe_link *l, int n, bool to) {
    int ns = p->pp * p->V, **v = arena_alloc(a, sizeof(int *) * (size_t)(2 * ns)), *len = arena_alloc(a, sizeof(int) * (size_t)(2 * ns));
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            if (l[i].from % p->pp == l[i].to % p->pp) continue;
            int k = 2 * (to ? l[i].to : l[i].from) + l[i].bwd;
            if (pass) v[k][len[k]] = i;
            len[k]++;
        }
        for (int k = 0; k < 2 * ns; k++) {
            if (!pass) v[k] = arena_alloc(a, sizeof(int) * (size_t)(len[k] + 1));
            v[k][len[k]] = -1, len[k] = pass ? len[k] : 0;
        }
    }
    return v;
}

// When no device can go on, every device's blocked sends go as if their receivers had posted when
// they did (a buffered send): the links join what phase 3 sends as separate messages (a pair of
// chunks' values in one, a send to a later chunk that phase 3 makes in another group), which can
// make the walk wait where the plan does not. Returns whether it let any send go.
static bool eager_sends(const sched *S, const int *first, const int *at, const bool *in, double *posted, int pp) {
    bool let = false;
    for (int d = 0; d < pp; d++) {
        if (at[d] == first[d + 1] || !in[d] || S->it[at[d]].n < 0) continue;
        const item *x = &S->it[at[d]];
        for (int k = x->first; k < x->first + x->n; k++)
            if (S->m[k].send && posted[2 * S->m[k].msg + 1] < 0) posted[2 * S->m[k].msg + 1] = posted[2 * S->m[k].msg], let = true;
    }
    return let;
}

double pipeline_makespan(const pcc_pipeline *p, const pcc_chunk_times *c, const pcc_pipe_link *links, int n_links,
                         double *done) {
    if (p->pp == 1 && p->V == 1) { // no pipeline: the micro-batches back to back
        double t = p->M * (c[0].fwd + c[0].bwd);
        if (done) done[0] = t;
        return t;
    }
    int pp = p->pp, nmsg = n_links * p->M;
    sched S = {.a = arena_init()};
    S.wait = arena_alloc(S.a, sizeof(double) * (size_t)(2 * nmsg + 1));
    S.in = link_lists(S.a, p, links, n_links, true), S.out = link_lists(S.a, p, links, n_links, false);
    int *first = arena_alloc(S.a, sizeof(int) * (size_t)(pp + 1)), *at = arena_alloc(S.a, sizeof(int) * (size_t)(pp + 1));
    for (int d = 0; d < pp; d++) first[d] = S.n_it, device_items(&S, p, c, links, d);
    first[pp] = S.n_it;
    double *posted = arena_alloc(S.a, sizeof(double) * (size_t)(2 * nmsg + 1)), end = 0; // per message: sender's, receiver's
    double *t = arena_alloc(S.a, sizeof(double) * (size_t)(pp + 1));
    bool *in = arena_alloc(S.a, sizeof(bool) * (size_t)(pp + 1)); // device d has posted its current group
    // Phases every device runs together, in order on each: the latest arrival and the arrivals so far.
    int *nb = arena_alloc(S.a, sizeof(int) * (size_t)(pp + 1)), *bar_n = arena_alloc(S.a, sizeof(int) * (size_t)(p->M + 1));
    double *bar_t = arena_alloc(S.a, sizeof(double) * (size_t)(p->M + 1));
    for (int i = 0; i < 2 * nmsg; i++) posted[i] = -1;
    for (int d = 0; d < pp; d++) at[d] = first[d];
    for (bool moved = true; moved || eager_sends(&S, first, at, in, posted, pp);) {
        moved = false;
        for (int d = 0; d < pp; d++)
            for (; at[d] < first[d + 1]; at[d]++, in[d] = false, moved = true) {
                const item *x = &S.it[at[d]];
                if (x->n == -1) {
                    t[d] += x->s;
                    continue;
                }
                if (x->n == -2) {
                    int b = nb[d];
                    PCC_ASSERT(b < p->M);
                    if (!in[d]) bar_t[b] = fmax(bar_t[b], t[d]), bar_n[b]++, in[d] = moved = true;
                    if (bar_n[b] < pp) break;
                    t[d] = bar_t[b] + x->s, nb[d]++;
                    continue;
                }
                if (!in[d]) {
                    for (int k = x->first; k < x->first + x->n; k++) posted[2 * S.m[k].msg + !S.m[k].send] = t[d];
                    in[d] = moved = true;
                }
                double e = t[d];
                bool all = true;
                for (int k = x->first; k < x->first + x->n && all; k++) {
                    int msg = S.m[k].msg;
                    all = posted[2 * msg + S.m[k].send] >= 0;
                    e = fmax(e, fmax(posted[2 * msg] + S.wait[2 * msg], posted[2 * msg + 1] + S.wait[2 * msg + 1]) + S.m[k].s);
                }
                if (!all) break;
                t[d] = e;
            }
    }
    for (int d = 0; d < pp; d++) {
        PCC_ASSERT(at[d] == first[d + 1]); // no unit waits on its own future
        if (done) done[d] = t[d];
        end = fmax(end, t[d]);
    }
    arena_free(S.a);
    return end;
}
