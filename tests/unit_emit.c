/*
 * unit_emit.c: phase 3 (reshard.c's chains, pipeline.c's schedules, preserve.c) and the memory
 * planner.
 *
 *  - Resharding: each single layout change gives the collective it should (V->R all-reduce,
 *    D->R all-gather, V->D reduce-scatter, D(i)->D(j) all-to-all, R->D and R->V a local slice),
 *    and every pair of layouts of a [4, 4] tensor on a dp 2 x tp 2 mesh (256 pairs) is carried
 *    out by a simulator of the steps' meaning (runtime/PLAN_FORMAT.md, "What instructions
 *    mean") on every rank, ending with exactly the wanted pieces: splits undone in the right
 *    order, partial sums summed once.
 *  - The micro-batch schedules (pipeline.c): GPipe, 1F1B and interleaved 1F1B, their loops
 *    unrolled, run every micro-batch's forward and backward pass once on every chunk, forward
 *    first, each interleaved pass's parts in order (receive, compute, send), with the warm-up
 *    of each device as GPipe, 1F1B and Megatron-LM's interleaving define it; the last
 *    micro-batch's backward is marked, out of any loop; the in-flight counts are the most
 *    micro-batches between forward and backward in that order.
 *  - The memory planner: plans from phase 3, the planner and emit_plan pass plan_check (no two live buffers overlap),
 *    and check_plan, which also simulates a step (and refuses a plan whose step deadlocks),
 *    every buffer lies inside the arena, the arena is reached (it is the exact peak), buffers
 *    share memory (the arena is below the sum of the buffers), and the same input gives the
 *    same bytes.
 */
#include "plancc.h"
#include "pipeline.h"
#include "sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

static const char *root;

/* ---- resharding ---- */

static plan_shard sh(int dp, int tp) {
    plan_shard s;
    memset(&s, 0, sizeof s);
    s.map[PCC_AX_DP] = (uint8_t)dp, s.map[PCC_AX_TP] = (uint8_t)tp;
    return s;
}

enum { R = PLAN_SHARD_R, V = PLAN_SHARD_V, D0 = PLAN_SHARD_D(0), D1 = PLAN_SHARD_D(1) };

static bool steps_are(plan_shard from, plan_shard to, int n, const int *kinds, const unsigned *axes) {
    pcc_reshard_step st[PCC_AXES + 1];
    int got = reshard_steps(from, to, 2, st);
    if (got != n) return false;
    for (int i = 0; i < n; i++)
        if (st[i].kind != kinds[i] || (kinds[i] >= 0 && st[i].axes != axes[i])) return false;
    return memcmp(st[n - 1].after.map, to.map, sizeof to.map) == 0;
}

static void single_changes(void) {
    pcc_reshard_step st[PCC_AXES + 1];
    EXPECT(reshard_steps(sh(D0, V), sh(D0, V), 2, st) == 0);
    unsigned tp = 1u << PCC_AX_TP, dp = 1u << PCC_AX_DP;
    EXPECT(steps_are(sh(R, V), sh(R, R), 1, (int[]){PCC_COLL_ALL_REDUCE}, &tp));
    EXPECT(steps_are(sh(R, D0), sh(R, R), 1, (int[]){PCC_COLL_ALL_GATHER}, &tp));
    EXPECT(steps_are(sh(R, V), sh(R, D1), 1, (int[]){PCC_COLL_REDUCE_SCATTER}, &tp));
    EXPECT(steps_are(sh(R, D0), sh(R, D1), 1, (int[]){PCC_COLL_ALL_TO_ALL}, &tp));
    EXPECT(steps_are(sh(R, R), sh(R, D1), 1, (int[]){-1}, &tp));
    EXPECT(steps_are(sh(R, R), sh(R, V), 1, (int[]){-1}, &tp));
    EXPECT(steps_are(sh(V, R), sh(R, R), 1, (int[]){PCC_COLL_ALL_REDUCE}, &dp));
    // Two axes on one dimension: the less significant (tp) is undone first; gathered whole, the
    // two gathers are one over both axes (dp the more significant digit of a member's piece).
    EXPECT(steps_are(sh(D0, D0), sh(R, D0), 2, (int[]){PCC_COLL_ALL_GATHER, -1}, (unsigned[]){dp | tp, 0}));
    EXPECT(steps_are(sh(D0, D0), sh(R, R), 1, (int[]){PCC_COLL_ALL_GATHER}, (unsigned[]){dp | tp}));
    EXPECT(steps_are(sh(D0, D0), sh(D0, R), 1, (int[]){PCC_COLL_ALL_GATHER}, &tp));
    // Partial sums over both axes: one all-reduce over both, or one reduce-scatter where the
    // reader splits a dimension over both (a 2-D tp group's, --tp2).
    EXPECT(steps_are(sh(V, V), sh(R, R), 1, (int[]){PCC_COLL_ALL_REDUCE}, (unsigned[]){dp | tp}));
    EXPECT(steps_are(sh(V, V), sh(D0, D0), 1, (int[]){PCC_COLL_REDUCE_SCATTER}, (unsigned[]){dp | tp}));
    EXPECT(steps_are(sh(V, V), sh(D0, D1), 2, (int[]){PCC_COLL_REDUCE_SCATTER, PCC_COLL_REDUCE_SCATTER}, (unsigned[]){tp, dp}));
    // One dimension split over both axes, moved to another over both in the same order: one
    // all-to-all over both.
    EXPECT(steps_are(sh(D0, D0), sh(D1, D1), 1, (int[]){PCC_COLL_ALL_TO_ALL}, (unsigned[]){dp | tp}));
    EXPECT(steps_are(sh(V, R), sh(D0, R), 1, (int[]){PCC_COLL_REDUCE_SCATTER}, &dp));
    // dp's split undone first where that leaves tp's an all-to-all, not a gather and a slice
    // (ZeRO-3's shard of a tied embedding read by the LM head split along the vocabulary).
    EXPECT(steps_are(sh(D0, D1), sh(R, D0), 2, (int[]){PCC_COLL_ALL_GATHER, PCC_COLL_ALL_TO_ALL}, (unsigned[]){dp, tp}));
}

// A rank's view of a [4, 4] tensor on dp 2 x tp 2 (pp 1): the value of each element it holds
// (0 where it holds none).
#define N 4
#define RANKS 4
typedef struct view {
    double v[N][N];
} view;

static int coord(int rank, int axis) { return axis == PCC_AX_DP ? rank / 2 : axis == PCC_AX_TP ? rank % 2 : 0; }

// Does `rank` hold element (i, j) under s?
static bool holds(plan_shard s, int rank, int i, int j) {
    int idx[2] = {i, j};
    for (int d = 0; d < 2; d++) {
        int ways = 1, digit = 0;
        for (int a = 0; a < PCC_AXES; a++)
            if (s.map[a] == PLAN_SHARD_D(d)) ways *= 2, digit = digit * 2 + coord(rank, a);
        int piece = N / ways;
        if (idx[d] / piece != digit) return false;
    }
    return true;
}

// The partial-sum part `rank` holds: its index among the ranks that differ only on V axes.
static void v_group(plan_shard s, int rank, int *q, int *m) {
    *q = 0, *m = 1;
    for (int a = 0; a < PCC_AXES; a++)
        if (s.map[a] == PLAN_SHARD_V) *q = *q * 2 + coord(rank, a), *m *= 2;
}

static double G(int i, int j) { return (double)(3 * i + 7 * j + 1); }

static void start(plan_shard s, view *r) {
    for (int k = 0; k < RANKS; k++) {
        int q, m;
        v_group(s, k, &q, &m);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++)
                r[k].v[i][j] = holds(s, k, i, j) ? G(i, j) / m + (q - (m - 1) / 2.0) * (i + 2 * j + 1) : 0;
    }
}

static bool same_group(int a, int b, unsigned axes) {
    for (int x = 0; x < PCC_AXES; x++)
        if (!(axes >> x & 1u) && coord(a, x) != coord(b, x)) return false;
    return true;
}

// One step, by its meaning: a collective sums what the members of the rank's group hold (the
// pieces of a split are disjoint, the parts of a sum add up) and keeps what the new layout
// names; a copy keeps what the new layout names of what the rank has (R -> V: on coordinate 0).
static bool apply(const pcc_reshard_step *st, plan_shard from, view *r) {
    view next[RANKS];
    for (int k = 0; k < RANKS; k++) {
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                double x = 0;
                if (st->kind >= 0) {
                    for (int p = 0; p < RANKS; p++)
                        if (same_group(k, p, st->axes)) x += r[p].v[i][j];
                } else {
                    x = r[k].v[i][j];
                    if (!holds(from, k, i, j) && holds(st->after, k, i, j)) return false; // not inside its piece
                    for (int a = 0; a < PCC_AXES; a++)
                        if (from.map[a] != PLAN_SHARD_V && st->after.map[a] == PLAN_SHARD_V && coord(k, a) != 0) x = 0;
                }
                next[k].v[i][j] = holds(st->after, k, i, j) ? x : 0;
            }
    }
    memcpy(r, next, sizeof next);
    return true;
}

// Each rank holds exactly its piece of the tensor (summed over the V axes' ranks).
static bool ends_as(plan_shard s, const view *r) {
    for (int k = 0; k < RANKS; k++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                if (!holds(s, k, i, j)) {
                    if (r[k].v[i][j] != 0) return false;
                    continue;
                }
                double sum = 0;
                for (int p = 0; p < RANKS; p++) {
                    bool peer = true;
                    for (int a = 0; a < PCC_AXES; a++)
                        if (s.map[a] != PLAN_SHARD_V && coord(p, a) != coord(k, a)) peer = false;
                    if (peer) sum += r[p].v[i][j];
                }
                if (fabs(sum - G(i, j)) > 1e-9) return false;
            }
    return true;
}

static void all_pairs(void) {
    static const int kinds[4] = {R, V, D0, D1};
    int ok = 0, total = 0, colls = 0;
    for (int a = 0; a < 16; a++)
        for (int b = 0; b < 16; b++) {
            plan_shard from = sh(kinds[a / 4], kinds[a % 4]), to = sh(kinds[b / 4], kinds[b % 4]);
            pcc_reshard_step st[PCC_AXES + 1];
            int n = reshard_steps(from, to, 2, st);
            view r[RANKS];
            start(from, r);
            bool good = true;
            plan_shard cur = from;
            for (int k = 0; k < n && good; k++) {
                good = apply(&st[k], cur, r);
                cur = st[k].after;
                colls += st[k].kind >= 0;
            }
            good = good && ends_as(to, r);
            if (!good) fprintf(stderr, "reshard dp %d tp %d -> dp %d tp %d: wrong result\n", from.map[1], from.map[2], to.map[1], to.map[2]);
            ok += good;
            total++;
        }
    EXPECT(ok == total);
    printf("resharding: %d of %d layout pairs correct on dp 2 x tp 2 (%d collectives)\n", ok, total, colls);
}

/* ---- the memory planner ---- */

static pcc_graph *load(pcc_arena *a, const char *model, int micro_batches) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", root, model);
    pcc_graph *g = NULL;
    if (model_load(a, path, &g)) return NULL;
    g->micro_batches = micro_batches;
    return autodiff(g) ? NULL : g;
}

static pcc_cluster *cpu(pcc_arena *a, int devices) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/clusters/cpu.json", root);
    pcc_cluster *c = NULL;
    return cluster_load(a, path, 0, devices, &c) ? NULL : c;
}

// Phases 1 and 2 as the driver runs them: phase 1 for the group sizes the search asks for.
static pcc_status strategies(const pcc_graph *g, const pcc_cluster *c, const pcc_search_opts *so, pcc_strategy ***s, int *n) {
    int ns;
    int *sizes = search_group_sizes(g, c, so, &ns);
    return search(g, c, transform_all(g, sizes, ns, so->tq), so, s, n);
}

// Phase 3, the memory planner and the emitter, as the driver runs them.
static pcc_status plan_of(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s, uint64_t bucket_bytes,
                          pcc_emitted *e) {
    pcc_preserve_opts po = {.bucket_bytes = bucket_bytes};
    pcc_emit_opts eo = {.options = "unit"};
    pcc_programs *pr;
    memset(e, 0, sizeof *e);
    pcc_status st = preserve(g, c, s, &po, &pr);
    if (st) return st;
    memplan(pr);
    emit_plan(g, c, pr, &eo, e);
    return e->peak_bytes > c->memory_bytes ? PCC_ERR_INFEASIBLE : PCC_OK;
}

static void planner(const char *model, int dp, int tp, int pp, int mb, int zero) {
    pcc_arena *a = arena_init();
    pcc_graph *g = load(a, model, mb);
    pcc_cluster *c = cpu(a, dp * tp * pp);
    EXPECT(g && c);
    if (!g || !c) {
        arena_free(a);
        return;
    }
    pcc_search_opts so = {.dp = dp, .tp = tp, .pp = pp, .zero = zero, .recompute = PCC_RECOMPUTE_NONE,
                            .ilp = {.time_limit_s = 30, .mip_gap = 1e-6}, .quiet = true};
    pcc_strategy **s;
    int n;
    EXPECT(strategies(g, c, &so, &s, &n) == PCC_OK && n == 1);
    pcc_emitted e, e2;
    EXPECT(plan_of(g, c, s[0], 0, &e) == PCC_OK);
    EXPECT(plan_of(g, c, s[0], 0, &e2) == PCC_OK);
    char err[512];
    EXPECT(plan_check(e.p, err, sizeof err) == PLAN_OK);
    uint64_t peak = 0;
    for (uint32_t k = 0; k < e.p->n_programs; k++) {
        const plan_program *pr = &e.p->programs[k];
        uint64_t end = 0, sum = 0;
        bool inside = true;
        for (uint32_t b = 0; b < pr->n_buffers; b++) {
            const plan_buffer *pb = &pr->buffers[b];
            uint64_t ext = pb->bytes + (pb->mb_slots - 1) * pb->mb_stride + (pb->layer_slots - 1) * pb->layer_stride;
            if (pb->offset + ext > end) end = pb->offset + ext;
            inside &= pb->offset + ext <= pr->arena_bytes;
            sum += ext;
        }
        EXPECT(inside);
        EXPECT(end <= pr->arena_bytes && pr->arena_bytes - end < 256); // the arena is the peak (to the alignment)
        EXPECT(pr->arena_bytes < sum);                                // memory is reused
        if (pr->arena_bytes > peak) peak = pr->arena_bytes;
    }
    EXPECT((double)peak == e.peak_bytes && e.live_bound_bytes <= e.peak_bytes);
    uint8_t *b1, *b2;
    size_t n1, n2;
    EXPECT(plan_encode(e.p, &b1, &n1, err, sizeof err) == PLAN_OK);
    EXPECT(plan_encode(e2.p, &b2, &n2, err, sizeof err) == PLAN_OK);
    EXPECT(n1 == n2 && memcmp(b1, b2, n1) == 0);
    printf("%s dp %d tp %d pp %d, %d micro-batches, zero %d: %u programs, peak %.0f bytes, live bound %.0f, %zu-byte plan\n",
           model, dp, tp, pp, mb, zero, e.p->n_programs, e.peak_bytes, e.live_bound_bytes, n1);
    EXPECT(check_plan(&e) == PCC_OK && e.sim && e.sim->step_s > 0); // and one step simulated, kept
    free(b1), free(b2);
    emitted_free(&e), emitted_free(&e2);
    arena_free(a);
}

// check_plan refuses a plan whose step cannot finish though plan_check passes it (two stages that
// each receive from the other before sending: every channel matches on its own).
static void deadlock_refused(void) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/tests/run_bad/deadlock.plan.txt", root);
    size_t n;
    char *text = test_slurp(path, &n);
    pcc_emitted e = {.p = calloc(1, sizeof(plan))};
    EXPECT(text && e.p && plan_parse(text, n, path, e.p, err, sizeof err) == PLAN_OK);
    if (!text || !e.p) return;
    EXPECT(plan_check(e.p, err, sizeof err) == PLAN_OK);
    EXPECT(check_plan(&e) == PCC_ERR_INTERNAL && !e.sim);
    emitted_free(&e);
    free(text);
}

/* ---- gradient buckets ---- */

typedef struct sync_stats {
    int insns, pairs, max_pairs;
    bool contiguous; // every bucket of in-place all-reduces lies back to back with one layer stride
} sync_stats;

// gpt-tiny on dp 2 (micro-batches mb, ZeRO zero, gradient buckets of bucket_bytes) into *e.
// gpt-tiny with `layers` copies of its block (its file has 2), written to the working directory
// for the loader and removed; NULL when it cannot be.
static pcc_graph *load_deep(pcc_arena *a, int layers, int micro_batches) {
    char path[1024], out[64];
    snprintf(path, sizeof path, "%s/models/gpt-tiny.json", root);
    snprintf(out, sizeof out, "unit_emit-gpt-tiny-%d-%ld.json", layers, (long)getpid()); // the ASan build runs beside
    static const char two[] = "\"repeat\": 2,";
    char *text = test_slurp(path, NULL), *at = text ? strstr(text, two) : NULL;
    FILE *o = at ? fopen(out, "wb") : NULL;
    pcc_graph *g = NULL;
    if (o) {
        fprintf(o, "%.*s\"repeat\": %d,%s", (int)(at - text), text, layers, at + strlen(two));
        fclose(o);
        if (!model_load(a, out, &g)) g->micro_batches = micro_batches;
        remove(out);
    }
    free(text);
    return g && !autodiff(g) ? g : NULL;
}

static bool emit_deep_dp2(pcc_arena *a, int layers, int mb, int zero, uint64_t bucket_bytes, pcc_emitted *e) {
    pcc_graph *g = layers == 2 ? load(a, "gpt-tiny.json", mb) : load_deep(a, layers, mb);
    pcc_cluster *c = cpu(a, 2);
    pcc_search_opts so = {.dp = 2, .tp = 1, .pp = 1, .zero = zero, .recompute = PCC_RECOMPUTE_NONE,
                            .ilp = {.time_limit_s = 30, .mip_gap = 1e-6}, .quiet = true};
    pcc_strategy **s;
    int n;
    bool ok = g && c && strategies(g, c, &so, &s, &n) == PCC_OK && plan_of(g, c, s[0], bucket_bytes, e) == PCC_OK;
    EXPECT(ok);
    return ok;
}

static bool emit_tiny_dp2(pcc_arena *a, int mb, int zero, uint64_t bucket_bytes, pcc_emitted *e) {
    return emit_deep_dp2(a, 2, mb, zero, bucket_bytes, e);
}

// The gradient collectives (stream 1) of gpt-tiny on dp 2 with buckets of `bucket_bytes`.
static sync_stats sync_of(uint64_t bucket_bytes, int zero) {
    sync_stats r = {0, 0, 0, true};
    pcc_arena *a = arena_init();
    pcc_emitted e;
    bool ok = emit_tiny_dp2(a, 2, zero, bucket_bytes, &e);
    if (!ok) {
        arena_free(a);
        return r;
    }
    const plan_program *pr = &e.p->programs[0];
    for (uint32_t i = 0; i < pr->n_insns; i++) {
        const plan_insn *in = &pr->insns[i];
        if (in->kind != PLAN_I_COLL || in->stream != 1) continue;
        int np = in->nargs / 2;
        r.insns++, r.pairs += np;
        if (np > r.max_pairs) r.max_pairs = np;
        const uint32_t *x = &pr->args[in->args];
        for (int j = 1; j < np && x[0] == x[np]; j++) {
            const plan_buffer *p0 = &pr->buffers[x[j - 1]], *p1 = &pr->buffers[x[j]];
            r.contiguous &= p0->offset + p0->bytes == p1->offset && p0->layer_stride == p1->layer_stride;
        }
    }
    plan_free(e.p), free(e.p);
    arena_free(a);
    return r;
}

// --bucket-mb: 0 gives one collective per gradient; a bucket as large as the model one per loop
// region (top-level gradients, one layer's in the layer loop); a small one several per layer.
// Every gradient is in exactly one, and a bucket of all-reduces lies back to back in the arena.
static void buckets(void) {
    sync_stats one = sync_of(0, 0), big = sync_of(25000000, 0), small = sync_of(20000, 0), z1 = sync_of(25000000, 1);
    EXPECT(one.pairs > 4 && one.insns == one.pairs && one.max_pairs == 1);
    EXPECT(big.pairs == one.pairs && big.insns < one.insns && big.max_pairs > 2 && big.contiguous);
    EXPECT(small.pairs == one.pairs && small.insns > big.insns && small.insns < one.insns && small.contiguous);
    EXPECT(z1.insns < z1.pairs); // ZeRO's reduce-scatters are bucketed the same way
    printf("gpt-tiny dp 2, gradient collectives: one per gradient %d; 20 KB buckets %d; 25 MB buckets %d (%d gradients)\n",
           one.insns, small.insns, big.insns, one.pairs);
}

/* ---- ZeRO-1 and ZeRO-2 ---- */

// The peak of gpt-tiny with 6 layers on dp 2 with 4 micro-batches and ZeRO `zero`, and its reduce-scatters
// (instructions, and their executions per step: loops multiplied out).
static double zero_peak(int zero, int *rs_insns, int *rs_runs) {
    pcc_arena *a = arena_init();
    pcc_emitted e;
    bool ok = emit_deep_dp2(a, 6, 4, zero, 25000000, &e);
    *rs_insns = *rs_runs = 0;
    if (!ok) {
        arena_free(a);
        return 0;
    }
    const plan_program *pr = &e.p->programs[0];
    int mult[PLAN_MAX_LOOP_DEPTH + 1] = {1}, end[PLAN_MAX_LOOP_DEPTH + 1] = {0}, depth = 0;
    for (uint32_t i = 0; i < pr->n_insns; i++) {
        while (depth > 0 && (int)i > end[depth]) depth--;
        const plan_insn *in = &pr->insns[i];
        if (in->kind == PLAN_I_LOOP) {
            depth++;
            mult[depth] = mult[depth - 1] * in->a, end[depth] = (int)i + in->b;
        } else if (in->kind == PLAN_I_COLL && in->code == PCC_COLL_REDUCE_SCATTER) {
            *rs_insns += 1, *rs_runs += mult[depth] * (int)(in->nargs / 2);
        }
    }
    double peak = e.peak_bytes;
    plan_free(e.p), free(e.p);
    arena_free(a);
    return peak;
}

// ZeRO-1 reduce-scatters each gradient once per step, after the last micro-batch; ZeRO-2 once per
// micro-batch (4 times as many), into the shard, and its peak is lower: no whole gradient lives
// across the step (two layers' during the backward pass, one reduce-scattered while the next is
// made: with 6 layers, 2 whole and 6 halves against ZeRO-1's 6 whole).
static void zero_stages(void) {
    int i1, r1, i2, r2;
    double p1 = zero_peak(1, &i1, &r1), p2 = zero_peak(2, &i2, &r2);
    EXPECT(r1 > 0 && r2 == 4 * r1);
    EXPECT(p2 > 0 && p2 < p1);
    printf("gpt-tiny with 6 layers, dp 2, 4 micro-batches: ZeRO-1 peak %.0f bytes, %d reduce-scatters per step; ZeRO-2 peak %.0f bytes, %d\n",
           p1, r1, p2, r2);
}

/* ---- the micro-batch schedules ---- */

// Units u[0..n) unrolled into out (loops expanded, each unit's micro-batch made absolute, mb
// offset `base`); *outside: whether each unrolled unit stood outside every loop. Returns the count.
static int unroll(const pcc_unit *u, int n, int base, bool top, pcc_unit *out, bool *outside, int at) {
    for (int i = 0; i < n; i++) {
        if (u[i].kind == PCC_UNIT_LOOP) {
            int depth = 1, j = i + 1;
            while (depth > 0) depth += u[j].kind == PCC_UNIT_LOOP ? 1 : u[j].kind == PCC_UNIT_END ? -1 : 0, j++;
            for (int k = 0; k < u[i].count; k++) at = unroll(&u[i + 1], j - 1 - (i + 1), base + k, false, out, outside, at);
            i = j - 1;
            continue;
        }
        out[at] = u[i];
        out[at].mb += base;
        outside[at++] = top;
    }
    return at;
}

// The schedule of pp devices, nv chunks each, M micro-batches; mid: with interlaced operators'
// phase per micro-batch (1F1B), which every device runs once per micro-batch, in order, after its
// forward pass and before its backward pass (on the last stage right after the forward pass).
static void schedule_check(int pp, int nv, int M, pcc_pipe_sched sched, bool mid) {
    pcc_arena *a = arena_init();
    pcc_pipeline pl = {.pp = pp, .V = nv, .M = M, .schedule = sched, .mid = mid};
    int ns = pp * nv, *inflight = pipeline_in_flight(a, &pl);
    int *most = calloc((size_t)ns, sizeof(int)), *now = calloc((size_t)ns, sizeof(int));
    bool ok = true, order = true, parts = true, last = true, warm = true, mids = true, meet = true;
    // per device and interlaced phase: the forward messages it has sent and received, and the
    // backward ones, before it (every device must meet the phase between the same messages)
    int *msgs = calloc((size_t)(4 * pp * M), sizeof(int));
    for (int d = 0; d < pp; d++) {
        int sent_f = 0, recv_f = 0, sent_b = 0, recv_b = 0;
        pcc_unit *u, *x = calloc((size_t)(8 * M * nv + 16), sizeof *x);
        bool *top = calloc((size_t)(8 * M * nv + 16), 1);
        int n = unroll(u, pipeline_units(a, &pl, d, &u), 0, true, x, top, 0);
        int *fwd = calloc((size_t)(ns * M), sizeof(int)), *bwd = calloc((size_t)(ns * M), sizeof(int));
        int *part = calloc((size_t)(2 * ns * M), sizeof(int)); // per pass: the parts seen so far
        // Forward passes before the first backward: all of them (GPipe, in a pipeline), else the
        // warm-up and one more (1F1B: pp - d - 1; Megatron-LM's interleaved: (pp - d - 1) 2 +
        // (V - 1) pp).
        int w = nv > 1 ? (pp - d - 1) * 2 + (nv - 1) * pp : pp > 1 && sched == PCC_PIPE_GPIPE ? M : pp - d - 1;
        int want = w + 1 < M * nv ? w + 1 : M * nv, before = 0, next_mid = 0;
        bool backward_seen = false;
        for (int i = 0; i < n; i++) {
            if (x[i].kind == PCC_UNIT_MID) { // in order, after its forward pass, before its backward pass
                int *m = &msgs[4 * (d * M + x[i].mb)];
                m[0] = sent_f, m[1] = recv_f, m[2] = sent_b, m[3] = recv_b;
                mids &= mid && x[i].mb == next_mid++ && fwd[d * M + x[i].mb] == 1 && bwd[d * M + x[i].mb] == 0;
                mids &= x[i].last == (x[i].mb == M - 1);
                if (d == pp - 1) mids &= i > 0 && x[i - 1].kind == PCC_UNIT_FWD && x[i - 1].mb == x[i].mb;
                continue;
            }
            if (x[i].kind == PCC_UNIT_BWD && (x[i].part & PCC_PART_COMPUTE)) mids &= !mid || next_mid > x[i].mb;
            if (x[i].kind != PCC_UNIT_FWD && x[i].kind != PCC_UNIT_BWD) continue;
            bool b = x[i].kind == PCC_UNIT_BWD;
            int c = x[i].chunk, mb = x[i].mb, k = c * M + mb;
            if (nv == 1 && (x[i].part & PCC_PART_SEND)) *(b ? &sent_b : &sent_f) += b ? d > 0 : d < pp - 1;
            if (nv == 1 && (x[i].part & PCC_PART_RECV)) *(b ? &recv_b : &recv_f) += b ? d < pp - 1 : d > 0;
            ok &= c % pp == d && mb >= 0 && mb < M;
            if (!ok) break;
            int *seen = &part[(b ? ns * M : 0) + k];
            // each part once, in order: receive, compute, send
            parts &= !(x[i].part & *seen) && !((x[i].part & PCC_PART_RECV) && *seen) &&
                     !((x[i].part & PCC_PART_COMPUTE) && (*seen & PCC_PART_SEND));
            *seen |= x[i].part;
            last &= x[i].last == (b && mb == M - 1) && (!x[i].last || top[i]);
            if (!(x[i].part & PCC_PART_COMPUTE)) continue;
            backward_seen |= b;
            before += !backward_seen;
            (b ? bwd : fwd)[k]++;
            order &= !b || fwd[k] == 1;
            now[c] += b ? -1 : 1;
            if (now[c] > most[c]) most[c] = now[c];
        }
        warm &= before == want;
        mids &= next_mid == (mid ? M : 0);
        for (int v = 0; v < nv; v++)
            for (int mb = 0; mb < M; mb++) {
                int k = (v * pp + d) * M + mb;
                ok &= fwd[k] == 1 && bwd[k] == 1;
                parts &= part[k] == PCC_PART_ALL && part[ns * M + k] == PCC_PART_ALL; // every pass whole
            }
        free(x), free(top), free(fwd), free(bwd), free(part);
    }
    for (int d = 0; mid && d + 1 < pp; d++) // link d -> d + 1: what one side sent, the other received
        for (int mb = 0; mb < M; mb++) {
            const int *m = &msgs[4 * (d * M + mb)], *n = &msgs[4 * ((d + 1) * M + mb)];
            meet &= m[0] == n[1] && m[3] == n[2];
        }
    free(msgs);
    for (int c = 0; c < ns; c++) ok &= inflight[c] == most[c];
    EXPECT(ok);
    EXPECT(order);
    EXPECT(parts);
    EXPECT(last);
    EXPECT(warm);
    EXPECT(mids);
    EXPECT(meet);
    if (!(ok && order && parts && last && warm && mids && meet))
        printf("schedule pp %d V %d M %d %s%s\n", pp, nv, M, sched == PCC_PIPE_GPIPE ? "gpipe" : "1f1b", mid ? " with interlaced phases" : "");
    free(most), free(now);
    arena_free(a);
}

static void schedules(void) {
    static const int cases[][4] = {{1, 1, 1, PCC_PIPE_GPIPE}, {1, 1, 4, PCC_PIPE_GPIPE}, {3, 1, 5, PCC_PIPE_GPIPE},
                                   {4, 1, 1, PCC_PIPE_GPIPE}, {2, 1, 1, PCC_PIPE_1F1B},  {2, 1, 4, PCC_PIPE_1F1B},
                                   {4, 1, 2, PCC_PIPE_1F1B},  {4, 1, 8, PCC_PIPE_1F1B},  {5, 1, 3, PCC_PIPE_1F1B},
                                   {2, 2, 4, PCC_PIPE_1F1B},  {2, 4, 6, PCC_PIPE_1F1B},  {4, 2, 8, PCC_PIPE_1F1B},
                                   {3, 3, 9, PCC_PIPE_1F1B}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        schedule_check(cases[i][0], cases[i][1], cases[i][2], (pcc_pipe_sched)cases[i][3], false);
    // 1F1B with interlaced operators between the passes (pp, M): the stages between the first and
    // the last receive their forward inputs a pass early (pipeline.c's mid)
    static const int mid_cases[][2] = {{2, 1}, {2, 4}, {3, 1}, {3, 5}, {4, 2}, {4, 3}, {4, 8}, {5, 3}, {6, 12}};
    for (size_t i = 0; i < sizeof mid_cases / sizeof mid_cases[0]; i++)
        schedule_check(mid_cases[i][0], 1, mid_cases[i][1], PCC_PIPE_1F1B, true);
}

int main(int argc, char **argv) {
    root = argc > 1 ? argv[1] : ".";
    pcc_quiet = true;
    single_changes();
    all_pairs();
    schedules();
    planner("mlp.json", 1, 1, 1, 1, 0);
    planner("mlp.json", 2, 2, 1, 2, 0);
    planner("gpt-tiny.json", 2, 2, 2, 4, 0);
    planner("gpt-tiny.json", 2, 1, 2, 4, 3);
    planner("cnn-small.json", 4, 1, 1, 2, 1);
    buckets();
    zero_stages();
    deadlock_refused();
    return test_summary();
}
