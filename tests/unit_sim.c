/*
 * unit_sim.c: unit tests of the plan simulator (runtime/sim.c) on hand-written plans with step
 * times worked out by hand: the plans in tests/plans/sim-*.plan.txt (a 2-stage 1F1B and GPipe
 * pipeline, a collective that waits for its slowest member, a communication stream hidden
 * behind compute), generated pipelines of p equal stages (1F1B and GPipe over m micro-batches,
 * each (m + p - 1)(tf + tb), with and without data parallelism, whose ranks must fold into one
 * class per stage), the intervals and messages of one pipeline, and deadlocks (the pipeline of
 * tests/run_bad/deadlock.plan.txt; two groups taken in opposite orders) reported as errors
 * that name the waiting ranks, messages that share a link (test_links), and a background round
 * beside the step (tests/plans/sim-bg.plan.txt: the step without the round, the round alone and
 * beside the steps, staleness against the period), and plans beyond the simulator's and the
 * checker's bounds (PLAN_ERR_LIMIT). The source root is argv[1].
 */
#include "plan.h"
#include "sim.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static const char *root;
static char err[2048];


// Parses text into p; false (with the message printed) if it does not parse.
static bool parse(const char *text, const char *name, plan *p) {
    plan_status st = plan_parse(text, strlen(text), name, p, err, sizeof(err));
    if (st) fprintf(stderr, "     %s\n", err);
    return st == PLAN_OK;
}

static bool load(const char *rel, plan *p) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    char *text = test_slurp(path, NULL);
    bool ok = text && parse(text, rel, p);
    if (!text) fprintf(stderr, "     cannot read %s\n", path);
    free(text);
    return ok;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (1 + fabs(b)); }

/* ---- the hand-written plans ---- */

static void test_pipeline_files(void) {
    const char *files[] = {"tests/plans/sim-1f1b.plan.txt", "tests/plans/sim-gpipe.plan.txt"};
    for (int i = 0; i < 2; i++) {
        plan p;
        EXPECT(load(files[i], &p));
        EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_OK);
        sim_opts o = {.intervals = true, .rank_lo = 0, .rank_hi = 1};
        sim_result r;
        EXPECT(sim_run(&p, &o, &r, err, sizeof(err)) == PLAN_OK);
        EXPECT(near(r.step_s, 15));
        EXPECT(r.n_classes == 2 && r.classes[0].kept && r.classes[1].kept);
        EXPECT(near(r.bubble, 0.2) && near(r.bubble_max, 0.2)); // (p - 1) / (m + p - 1)
        EXPECT(near(r.compute_s, 12) && near(r.exposed_comm_s, 0));
        // Stage 0 runs 4 forwards and 4 backwards; its first backward starts once stage 1 has
        // run F0 (1..2) and B0 (2..4); 1F1B: at 4, GPipe: stage 1's B0 comes after its F3, at 7.
        const sim_class *c = &r.classes[0];
        uint32_t backward = 0;
        for (uint32_t k = 0; k < c->n_iv[0]; k++) {
            const sim_interval *v = &c->iv[0][k];
            if (p.programs[0].insns[v->insn].phase == PLAN_PHASE_BWD && p.programs[0].insns[v->insn].kind == PLAN_I_COMPUTE &&
                backward++ == 0)
                EXPECT(near(v->start, i == 0 ? 4 : 7) && v->mb == 0);
        }
        EXPECT(backward == 4);
        EXPECT(r.executed == 32); // 16 instructions per stage, loops expanded
        sim_free(&r);
        plan_free(&p);
    }
}

static void test_collective(void) {
    plan p;
    EXPECT(load("tests/plans/sim-coll.plan.txt", &p));
    sim_opts o = {.intervals = true, .rank_lo = 0, .rank_hi = 1};
    sim_result r;
    EXPECT(sim_run(&p, &o, &r, err, sizeof(err)) == PLAN_OK);
    EXPECT(near(r.step_s, 4.75));
    EXPECT(r.n_classes == 2);
    const sim_class *fast = &r.classes[r.rank_class[0]], *slow = &r.classes[r.rank_class[1]];
    EXPECT(fast->n_iv[0] == 3 && near(fast->iv[0][1].start, 3) && near(fast->iv[0][1].end, 3.75));
    EXPECT(slow->n_iv[0] == 3 && near(slow->iv[0][1].start, 3) && near(slow->iv[0][1].end, 3.75));
    EXPECT(near(fast->main_busy_s, 2.75) && near(fast->exposed_comm_s, 0.75) && near(slow->compute_s, 4));
    EXPECT(near(r.bubble_max, 2 / 4.75) && r.bubble_max_rank == 0);
    sim_free(&r);
    plan_free(&p);
}

static void test_overlap(void) {
    plan p;
    EXPECT(load("tests/plans/sim-overlap.plan.txt", &p));
    sim_result r;
    EXPECT(sim_run(&p, NULL, &r, err, sizeof(err)) == PLAN_OK);
    EXPECT(near(r.step_s, 5) && near(r.comm_s, 2) && near(r.exposed_comm_s, 0) && near(r.bubble, 0));
    EXPECT(r.classes[0].kept == false && r.classes[0].n_iv[0] == 0);
    sim_free(&r);
    // With b taking 1 s instead of 3, stream 0 waits for the all-reduce from 2 s to 3 s: 1 s exposed.
    p.programs[0].insns[5].t_s = 1;
    EXPECT(sim_run(&p, NULL, &r, err, sizeof(err)) == PLAN_OK);
    EXPECT(near(r.step_s, 4) && near(r.exposed_comm_s, 1) && near(r.bubble, 0.25));
    sim_free(&r);
    plan_free(&p);
}

/* ---- generated pipelines ---- */

typedef struct text {
    char *s;
    size_t n, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        t->cap = t->cap * 2 + 4096;
        t->s = realloc(t->s, t->cap);
    }
}

static void pass(text *t, int *i, int s, int p, int mb, bool bwd, double tf, double tb) {
    bool in = bwd ? s < p - 1 : s > 0, out = bwd ? s > 0 : s < p - 1;
    const char *ph = bwd ? "bwd" : "fwd";
    if (in) put(t, "  %d: recv s0 mb+%d pp %+d args %d phase=%s\n", (*i)++, mb, bwd ? 1 : -1, bwd, ph);
    // forward: make or update the activation (buffer 0); backward: the gradient (buffer 1), from
    // the activation on the last stage, else from the gradient received
    if (!bwd) put(t, "  %d: compute %s s0 mb+%d args %s0 phase=fwd t=%g\n", (*i)++, s ? "scale" : "fill", mb, s ? "0 -> " : "-> ", tf);
    else put(t, "  %d: compute scale s0 mb+%d args %d -> 1 phase=bwd t=%g\n", (*i)++, mb, s < p - 1, tb);
    if (out) put(t, "  %d: send s0 mb+%d pp %+d args %d phase=%s\n", (*i)++, mb, bwd ? -1 : 1, bwd, ph);
}

// A pipeline of p equal stages (x dp ranks each), m micro-batches, unrolled: GPipe or 1F1B,
// then (with dp > 1) an all-reduce of t_ar over dp on every stage.
static char *pipeline(int p, int dp, int m, bool gpipe, double tf, double tb, double t_ar) {
    text t = {0};
    put(&t, "plan 4\nmesh pp %d dp %d\nmicro_batches %d schedule %s zero_stage 0\ngroup 0 axes dp\n", p, dp, m, gpipe ? "gpipe" : "1f1b");
    for (int s = 0; s < p; s++) put(&t, "ranks %d-%d program %d\n", s * dp, s * dp + dp - 1, s);
    for (int s = 0; s < p; s++) {
        // A micro-batch slot each: a middle stage sends mb j from a buffer and receives mb j + 1
        // into it in one group of sends and receives, which plan_check refuses on one slot, and
        // every micro-batch's value stays until its backward reads it (plan_check follows them).
        put(&t, "program %d \"stage%d\" arena %d streams 1 priority 0 events 0\n", s, s, 128 * m);
        put(&t, "  buffer 0 scratch f32 at 0 bytes 64 mb_slots %d mb_stride 128\n"
                "  buffer 1 scratch f32 at 64 bytes 64 mb_slots %d mb_stride 128\n", m, m);
        int i = 0, w = gpipe ? m : p - s - 1 < m ? p - s - 1 : m;
        for (int j = 0; j < w; j++) pass(&t, &i, s, p, j, false, tf, tb);
        for (int j = 0; j < m - w; j++) {
            pass(&t, &i, s, p, j + w, false, tf, tb);
            pass(&t, &i, s, p, j, true, tf, tb);
        }
        for (int j = m - w; j < m; j++) pass(&t, &i, s, p, j, true, tf, tb);
        if (dp > 1) put(&t, "  %d: coll all_reduce s0 group 0 args 1 -> 1 phase=bwd t=%g\n", i++, t_ar);
    }
    return t.s;
}

// A background round beside the step (tests/plans/sim-bg.plan.txt has the figures by hand).
static void test_background_round(void) {
    plan p;
    EXPECT(load("tests/plans/sim-bg.plan.txt", &p));
    sim_result r;
    EXPECT(sim_run(&p, NULL, &r, err, sizeof(err)) == PLAN_OK);
    const sim_background *b = &r.bg;
    EXPECT(near(r.step_s, 2)); // the foreground's step, not the round's 3 s
    EXPECT(near(r.compute_s, 1.5) && near(r.comm_s, 0.5)); // the round is not in the step's figures
    EXPECT(b->present && b->period == 1 && near(b->round_s, 3) && near(b->round_link_s, 2.5) && b->n_colls == 1);
    EXPECT(near(b->fg_link_share, 0.25) && near(b->round_shared_s, 0.5 + 2.5 / 0.75));
    EXPECT(near(b->steps_per_round, (0.5 + 2.5 / 0.75) / 2) && b->staleness == 2 && near(b->rounds_per_step, 0.5));
    EXPECT(b->fg_colls == 1 && near(b->fg_delay_max_s, 2.5));
    sim_free(&r);
    plan_free(&p);
    // The same round every 4 steps: the period bounds the staleness from below.
    char *src = NULL;
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/plans/sim-bg.plan.txt", root);
    EXPECT((src = test_slurp(path, NULL)) != NULL);
    char *at = src ? strstr(src, "loop background 1") : NULL;
    EXPECT(at != NULL);
    if (at) at[16] = '4';
    if (at && parse(src, "sim-bg period 4", &p)) {
        EXPECT(sim_run(&p, NULL, &r, err, sizeof(err)) == PLAN_OK);
        EXPECT(r.bg.period == 4 && r.bg.staleness == 4 && near(r.bg.rounds_per_step, 0.25));
        sim_free(&r);
        plan_free(&p);
    }
    // Foreground only: no background figures.
    EXPECT(load("tests/plans/sim-coll.plan.txt", &p));
    EXPECT(sim_run(&p, NULL, &r, err, sizeof(err)) == PLAN_OK);
    EXPECT(!r.bg.present && r.bg.staleness == 0);
    sim_free(&r);
    plan_free(&p);
    free(src);
}

static void test_generated_pipelines(void) {
    static const int ps[] = {1, 2, 3, 4, 8}, ms[] = {1, 2, 3, 4, 7, 16};
    int runs = 0, right = 0;
    for (int g = 0; g < 2; g++)
        for (size_t a = 0; a < sizeof(ps) / sizeof(ps[0]); a++)
            for (size_t b = 0; b < sizeof(ms) / sizeof(ms[0]); b++) {
                int p = ps[a], m = ms[b];
                char *txt = pipeline(p, 1, m, g == 1, 0.25, 0.5, 0);
                plan pl;
                sim_result r;
                bool ok = parse(txt, "pipeline", &pl) && plan_check(&pl, err, sizeof(err)) == PLAN_OK &&
                          sim_run(&pl, NULL, &r, err, sizeof(err)) == PLAN_OK;
                runs++;
                if (ok && near(r.step_s, (m + p - 1) * 0.75)) right++;
                else fprintf(stderr, "     %s p %d m %d: step %g, want %g (%s)\n", g ? "gpipe" : "1f1b", p, m, ok ? r.step_s : -1,
                             (m + p - 1) * 0.75, ok ? "" : err);
                if (ok) {
                    EXPECT(near(r.bubble, (p - 1) / (double)(m + p - 1)) || p == 1);
                    sim_free(&r);
                }
                plan_free(&pl);
                free(txt);
            }
    EXPECT(runs == right);
}

// Data parallelism: 4 stages of 8 ranks each fold into 4 classes; the step grows by the
// all-reduce that ends it.
static void test_classes(void) {
    char *txt = pipeline(4, 8, 6, false, 1, 2, 0.5);
    plan p;
    sim_result r;
    EXPECT(parse(txt, "pipeline-dp", &p));
    EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_OK);
    sim_opts o = {.intervals = true, .rank_lo = 9, .rank_hi = 9};
    EXPECT(sim_run(&p, &o, &r, err, sizeof(err)) == PLAN_OK);
    EXPECT(near(r.step_s, (6 + 4 - 1) * 3 + 0.5));
    EXPECT(r.n_classes == 4);
    for (uint32_t q = 0; q < 32; q++) EXPECT(r.rank_class[q] == q / 8 && r.classes[q / 8].rank == q / 8 * 8);
    EXPECT(r.classes[1].kept && !r.classes[0].kept && !r.classes[2].kept && r.classes[1].n_ranks == 8);
    // Stage 1's messages: each numbered, and each number once per side among its intervals.
    uint32_t msgs = 0;
    for (uint32_t k = 0; k < r.classes[1].n_iv[0]; k++) msgs += r.classes[1].iv[0][k].msg != 0;
    EXPECT(msgs == 4 * 6); // per micro-batch: recv and send forward, recv and send backward
    sim_free(&r);
    plan_free(&p);
    free(txt);
}

/* ---- links ---- */

// Messages along one mesh axis share their ranks' links: rank 0's sends to its three peers along
// pp move one after another, as three receipts at one rank do; a send and a receive, or two
// sends along different axes, move together.
static void test_links(void) {
    text t = {0};
    put(&t, "plan 4\nmesh dp 2 pp 4\n");
    for (int r = 0; r < 8; r++) put(&t, "ranks %d program %d\n", r, r);
    for (int r = 0; r < 8; r++) {
        int dp = r / 4, pp = r % 4;
        put(&t, "program %d \"r%d\" arena 256 streams 1 priority 0 events 0\n  buffer 0 scratch f32 at 0 bytes 64\n"
                "  buffer 1 scratch f32 at 128 bytes 64\n  0: compute fill s0 args -> 0 t=0\n", r, r);
        int i = 1;
        if (dp == 0 && pp == 0) { // to pp +1, +2, +3 and dp +1; from pp +1
            for (int k = 1; k < 4; k++) put(&t, "  %d: send s0 pp +%d args 0 t=1\n", i++, k);
            put(&t, "  %d: send s0 dp +1 args 0 t=1\n  %d: recv s0 pp +1 tag 1 args 1 t=1\n", i, i + 1);
            i += 2;
        } else if (dp == 0) { // from pp -k; stage 1 also to pp -1
            put(&t, "  %d: recv s0 pp -%d args 1 t=1\n", i++, pp);
            if (pp == 1) put(&t, "  %d: send s0 pp -1 tag 1 args 0 t=1\n", i++);
        } else if (pp == 0) {
            put(&t, "  %d: recv s0 dp -1 args 1 t=1\n", i++);
        }
        if (r != 5 && r != 6 && r != 7) put(&t, "  %d: compute scale s0 args 1 -> 1 t=0\n", i++); // reads what it received
    }
    plan p;
    sim_result r;
    EXPECT(parse(t.s, "links", &p));
    EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_OK);
    sim_opts o = {.intervals = true, .rank_lo = 0, .rank_hi = 7};
    EXPECT(sim_run(&p, &o, &r, err, sizeof(err)) == PLAN_OK);
    EXPECT(near(r.step_s, 3));
    for (int q = 1; q < 4; q++) { // rank q's receipt ends at q s
        const sim_class *c = &r.classes[r.rank_class[q]];
        EXPECT(c->n_iv[0] >= 2 && near(c->iv[0][1].end, q));
    }
    const sim_class *d = &r.classes[r.rank_class[4]];
    EXPECT(d->n_iv[0] == 3 && near(d->iv[0][1].end, 1));
    sim_free(&r);
    plan_free(&p);
    free(t.s);
    // Three ranks that send to one at once: its receipts move one after another.
    text u = {0};
    put(&u, "plan 4\nmesh pp 4\n");
    for (int q = 0; q < 4; q++) put(&u, "ranks %d program %d\n", q, q);
    put(&u, "program 0 \"sink\" arena 256 streams 1 priority 0 events 0\n");
    for (int k = 1; k < 4; k++) put(&u, "  buffer %d scratch f32 at %d bytes 64\n", k - 1, 64 * (k - 1));
    for (int k = 1; k < 4; k++) put(&u, "  %d: recv s0 pp +%d args %d t=1\n", k - 1, k, k - 1);
    for (int k = 0; k < 3; k++) put(&u, "  %d: compute scale s0 args %d -> %d t=0\n", 3 + k, k, k);
    for (int q = 1; q < 4; q++)
        put(&u, "program %d \"src%d\" arena 256 streams 1 priority 0 events 0\n  buffer 0 scratch f32 at 0 bytes 64\n"
                "  0: compute fill s0 args -> 0 t=0\n  1: send s0 pp -%d args 0 t=1\n", q, q, q);
    EXPECT(parse(u.s, "fan-in", &p));
    EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_OK);
    EXPECT(sim_run(&p, NULL, &r, err, sizeof(err)) == PLAN_OK);
    EXPECT(near(r.step_s, 3));
    sim_free(&r);
    plan_free(&p);
    free(u.s);
}

/* ---- deadlocks ---- */

static void test_deadlocks(void) {
    plan p;
    sim_result r;
    EXPECT(load("tests/run_bad/deadlock.plan.txt", &p));
    EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_OK); // each channel matches on its own
    EXPECT(sim_run(&p, NULL, &r, err, sizeof(err)) == PLAN_ERR_INVALID && strstr(err, "deadlock") && strstr(err, "rank 0") &&
           strstr(err, "rank 1") && strstr(err, "recv"));
    EXPECT(r.classes == NULL && r.step_s == 0);
    sim_free(&r);
    plan_free(&p);
    // Two groups over the same ranks, taken in opposite orders: each group's order agrees.
    const char *two = "plan 4\nmesh dp 2\ngroup 0 axes dp\ngroup 1 ranks 0,1\nranks 0 program 0\nranks 1 program 1\n"
                      "program 0 \"a\" arena 256 streams 1 priority 0 events 0\n  buffer 0 scratch f32 at 0 bytes 64\n"
                      "  0: compute fill s0 args -> 0 t=1\n  1: coll all_reduce s0 group 0 args 0 -> 0 t=1\n"
                      "  2: coll all_reduce s0 group 1 args 0 -> 0 t=1\n"
                      "program 1 \"b\" arena 256 streams 1 priority 0 events 0\n  buffer 0 scratch f32 at 0 bytes 64\n"
                      "  0: compute fill s0 args -> 0 t=1\n  1: coll all_reduce s0 group 1 args 0 -> 0 t=1\n"
                      "  2: coll all_reduce s0 group 0 args 0 -> 0 t=1\n";
    EXPECT(parse(two, "two-groups", &p));
    EXPECT(sim_run(&p, NULL, &r, err, sizeof(err)) == PLAN_ERR_INVALID && strstr(err, "deadlock: the step cannot finish at 1 s") &&
           strstr(err, "the other members of group 0") && strstr(err, "the other members of group 1"));
    plan_free(&p);
    // A plan read for one rank cannot be simulated.
    EXPECT(load("tests/plans/sim-1f1b.plan.txt", &p));
    uint8_t *bytes = NULL;
    size_t n = 0;
    plan one;
    EXPECT(plan_encode(&p, &bytes, &n, err, sizeof(err)) == PLAN_OK);
    EXPECT(plan_decode(bytes, n, 0, &one, err, sizeof(err)) == PLAN_OK);
    EXPECT(sim_run(&one, NULL, &r, err, sizeof(err)) == PLAN_ERR_FORMAT && strstr(err, "program 1 (rank 1) is not loaded"));
    free(bytes);
    plan_free(&one);
    plan_free(&p);
}

// A plan without times (every hand-written plan before them) simulates to a step of 0.
static void test_no_times(void) {
    plan p;
    sim_result r;
    EXPECT(load("tests/plans/tp2pp2.plan.txt", &p));
    EXPECT(sim_run(&p, NULL, &r, err, sizeof(err)) == PLAN_OK && r.step_s == 0 && r.executed > 0 && r.n_classes == 2);
    EXPECT(r.peak_bytes == p.programs[1].arena_bytes || r.peak_bytes == p.programs[0].arena_bytes);
    EXPECT(r.live_peak_bytes > 0 && r.live_peak_bytes <= r.peak_bytes);
    sim_free(&r);
    sim_free(NULL);
    plan_free(&p);
}

// Beyond a limit, not a fault (PLAN_ERR_LIMIT): a plan plan_check passes whose five programs run
// more than the simulator's 2^32 instructions a step, and a program past plan_check's own bound.
static void test_limits(void) {
    plan p;
    sim_result r;
    EXPECT(load("tests/run_bad/huge.plan.txt", &p));
    EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_OK);
    EXPECT(sim_run(&p, NULL, &r, err, sizeof(err)) == PLAN_ERR_LIMIT && strstr(err, "too many to simulate"));
    sim_free(&r);
    plan_free(&p);
    EXPECT(load("tests/run_bad/unchecked.plan.txt", &p));
    EXPECT(plan_check(&p, err, sizeof(err)) == PLAN_ERR_LIMIT && strstr(err, "too large to check"));
    plan_free(&p);
}

int main(int argc, char **argv) {
    root = argc > 1 ? argv[1] : ".";
    test_pipeline_files();
    test_collective();
    test_overlap();
    test_background_round();
    test_generated_pipelines();
    test_classes();
    test_links();
    test_deadlocks();
    test_no_times();
    test_limits();
    return test_summary();
}
