/*
 * memplan.c: the memory planner.
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
 * It takes phase 3's programs as they are (preserve.c's, one per pipeline stage, or burst.c's,
 * one per set of ranks that burst parallelism runs alike), before the emitter writes them.
 *
 * The search asks it too (memplan_strategy_peak): phase 3 and the planner on a candidate
 * strategy, so that the memory figure phase 2 ranks and fits by is the peak the emitted plan will
 * have, not a model of it.
 */
#include "plancc.h"

#include <math.h>
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

// A buffer whose last use is on another stream than 0 (ZeRO-3's reduce-scatters on stream 1) is
// live until stream 0 waits for a record made on that stream after the use: stream 0 may run
// ahead of it until then. Where no such wait follows in the program, it is left as it was (the
// buffers of gradient buckets live for the whole program).
static void stream_waits(mprog *P, const int *inner, const int *loop_of, bool *one_loop) {
    for (int b = 0; b < P->n_buf; b++) {
        int i = P->buf[b].last;
        if (i < 0 || P->insn[i].stream == 0 || P->buf[b].whole) continue;
        int s = P->insn[i].stream, r = i + 1;
        while (r < P->n_insn && !(P->insn[r].kind == PLAN_I_RECORD && P->insn[r].stream == s)) r++;
        if (r >= P->n_insn) continue;
        int w = r + 1;
        while (w < P->n_insn && !(P->insn[w].kind == PLAN_I_WAIT && P->insn[w].stream == 0 && P->insn[w].a == P->insn[r].a)) w++;
        if (w >= P->n_insn) continue;
        P->buf[b].last = w;
        if (inner[w] != loop_of[b]) one_loop[b] = false;
    }
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
    stream_waits(P, inner, loop_of, one_loop);
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

// The placed buffers, indexed by time: the program's instructions cut into chunks, each with the
// buffers live in it by offset. A new buffer looks only at the chunks it lives in.
#define CHUNKS 256

typedef struct chunks {
    int n_insn;
    int *v[CHUNKS], n[CHUNKS], cap[CHUNKS];
} chunks;

static void chunks_init(chunks *X, int n_insn) {
    memset(X, 0, sizeof *X);
    X->n_insn = n_insn > 0 ? n_insn : 1;
}

static void chunks_free(chunks *X) {
    for (int c = 0; c < CHUNKS; c++) free(X->v[c]);
}

static int chunk_of(const chunks *X, int i) { return (int)((int64_t)i * CHUNKS / X->n_insn); }

// Inserts placed buffer b into the chunks of its interval, after those at offsets <= its own.
static void chunks_add(chunks *X, const mprog *P, int b) {
    const pcc_mbuf *eb = &P->buf[b];
    for (int c = chunk_of(X, eb->first); c <= chunk_of(X, eb->last); c++) {
        if (X->n[c] == X->cap[c]) {
            X->cap[c] = X->cap[c] ? 2 * X->cap[c] : 16;
            X->v[c] = realloc(X->v[c], sizeof(int) * (size_t)X->cap[c]);
            PCC_ASSERT(X->v[c]);
        }
        int lo = 0, hi = X->n[c];
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (P->buf[X->v[c][mid]].offset <= eb->offset) lo = mid + 1;
            else hi = mid;
        }
        memmove(X->v[c] + lo + 1, X->v[c] + lo, sizeof(int) * (size_t)(X->n[c] - lo));
        X->v[c][lo] = b, X->n[c]++;
    }
}

// The lowest aligned offset where buffer eb meets no placed buffer live with it: move past
// every one in the way until none is (all offsets below the current one are taken, so this is
// the first fit).
static uint64_t lowest_free(const chunks *X, const mprog *P, const pcc_mbuf *eb, uint64_t at) {
    for (bool moved = true; moved;) {
        moved = false;
        for (int c = chunk_of(X, eb->first); c <= chunk_of(X, eb->last); c++)
            for (int j = 0; j < X->n[c]; j++) {
                const pcc_mbuf *o = &P->buf[X->v[c][j]];
                if (o->offset >= at + eb->extent) break;
                if (o->offset + o->extent <= at || o->last < eb->first || o->first > eb->last) continue;
                at = align_up(o->offset + o->extent), moved = true;
            }
    }
    return at;
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
static uint64_t place(mprog *P, uint64_t *live_bound) {
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
    chunks X;
    chunks_init(&X, P->n_insn);
    bool *placed = calloc((size_t)P->n_buf + 1, 1);
    uint64_t arena = 0, whole_top = 0;
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
        // Buffers live over the whole program come first and stack from 0 with no gap (each is
        // live with every one before it): the rest start above them, and need not see them.
        uint64_t at = eb->whole ? whole_top : lowest_free(&X, P, eb, whole_top);
        eb->offset = at;
        placed[order[k]] = true;
        if (eb->whole) whole_top = align_up(at + eb->extent);
        else chunks_add(&X, P, order[k]);
        for (int j = bucket_next(P, order[k]), prev = order[k]; j >= 0; prev = j, j = bucket_next(P, j))
            P->buf[j].offset = P->buf[prev].offset + P->buf[prev].bytes;
        if (at + eb->extent > arena) arena = at + eb->extent;
    }
    chunks_free(&X);
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
    free(delta), free(order), free(placed);
    return arena;
}

void memplan(pcc_programs *pr) {
    for (int k = 0; k < pr->n; k++) {
        pcc_program *q = &pr->prog[k];
        mprog P = {.buf = q->buf, .n_buf = q->n_buf, .insn = q->insn, .n_insn = q->n_insn, .args = q->args, .attrs = q->attrs};
        q->arena = place(&P, &q->live_bound);
    }
}

double memplan_strategy_peak(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s, const pcc_preserve_opts *o,
                             pcc_status *st) {
    pcc_programs *pr;
    bool was = pcc_trial;
    pcc_trial = true; // a limit of phase 3 rules this strategy out; the compile of one would say it
    *st = preserve(g, c, s, o, &pr);
    pcc_trial = was;
    if (*st) return INFINITY;
    memplan(pr);
    if (!pr->bg) {
        uint64_t peak = 0;
        for (int k = 0; k < pr->n; k++)
            if (pr->prog[k].arena > peak) peak = pr->prog[k].arena;
        return (double)peak;
    }
    // Background rounds put their buffers past the foreground's arena as the emitter places them.
    pcc_emit_opts eo = {.options = ""};
    pcc_emitted e;
    emit_plan(g, c, pr, &eo, &e);
    double peak = e.peak_bytes;
    plan_free(e.p), free(e.p);
    return peak;
}
