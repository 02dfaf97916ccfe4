/*
 * unit_rounds.c: background rounds that outlive the step (runtime/interp.c, "background
 * rounds"), on the CPU. The CUDA backend is the one that has round_end, round_fence and
 * round_drain; here cpu-serial gets the three as hooks that only log (its calls still block),
 * so the interpreter's side of it runs: a one-rank ShadowSync plan (tests/plans/bg-ma-1.plan.txt,
 * MA, one trainer, a continuous round, or every 2nd step) must train bit for bit as plain
 * cpu-serial does, while each step's round is issued after every foreground instruction, its
 * end is marked once and last, the foreground stream waits for the previous round right
 * before its first optimizer operator, and rt_run_drain waits for the round. Also
 * rt_insn_waits_for_round on hand-made instructions, and the crew of threads that runs the
 * steps' walkers on the cpu backend: started by the first step, the same threads for every
 * later one, all joined by rt_run_free.
 */
#include "rt.h"
#include "test.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *root;

/* ---- the log of a step's calls ---- */

typedef struct entry {
    char what;                      // 'k' kernel or copy, 'c' collective, 'f' fence, 'e' round end, 'd' drain
    int stream;
} entry;

static entry log_[4096];
static int n_log;
static rt_backend cpu_entries;      // the cpu-serial backend's own entries

static void note(char what, int stream) {
    if (n_log < (int)(sizeof log_ / sizeof *log_)) log_[n_log++] = (entry){what, stream};
}

static int log_kernel(rt_backend *b, const rt_exec *x, const rt_kernel *k, char *err, size_t err_n) {
    note('k', x->stream);
    return cpu_entries.kernel(b, x, k, err, err_n);
}

static int log_copy(rt_backend *b, const rt_exec *x, void *dst, const rt_box *db, const void *src, const rt_box *sb,
                    uint64_t bytes, uint32_t dtype, char *err, size_t err_n) {
    note('k', x->stream);
    return cpu_entries.copy(b, x, dst, db, src, sb, bytes, dtype, err, err_n);
}

static int log_coll(rt_backend *b, const rt_exec *x, const rt_coll *c, char *err, size_t err_n) {
    note('c', x->stream);
    return cpu_entries.coll(b, x, c, err, err_n);
}

static int log_end(rt_backend *b, const rt_exec *x, char *err, size_t err_n) { return note('e', x->stream), 0; }
static int log_fence(rt_backend *b, const rt_exec *x, char *err, size_t err_n) { return note('f', x->stream), 0; }
static int log_drain(rt_backend *b, char *err, size_t err_n) { return note('d', -1), 0; }

static void hook(rt_backend *b) {
    cpu_entries = *b;
    b->kernel = log_kernel, b->copy = log_copy, b->coll = log_coll;
    b->round_end = log_end, b->round_fence = log_fence, b->round_drain = log_drain;
}

/* ---- the plan ---- */


// The plan, its round every `period` steps (0: continuous, as written).
static bool load(plan *p, int period) {
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/tests/plans/bg-ma-1.plan.txt", root);
    char *text = test_slurp(path, NULL), *at = text ? strstr(text, "loop background 0") : NULL;
    if (!at) return fprintf(stderr, "     cannot read %s\n", path), free(text), false;
    at[strlen("loop background ")] = (char)('0' + period);
    plan_status st = plan_parse(text, strlen(text), path, p, err, sizeof err);
    if (st) fprintf(stderr, "     %s\n", err);
    free(text);
    return st == PLAN_OK;
}

// Operators and copies of the foreground's stream 0 before its first optimizer one.
static int before_opt(const plan_program *pg) {
    int n = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        if (in->kind == PLAN_I_LOOP) break; // the round (the program has no other loop)
        if (in->stream != 0 || (in->kind != PLAN_I_COMPUTE && in->kind != PLAN_I_COPY)) continue;
        if (in->phase == PLAN_PHASE_OPT) return n;
        n++;
    }
    return -1;
}

/* ---- runs ---- */

typedef struct result {
    double loss[3];
    uint8_t params[1 << 17];        // every param's bytes, back to back
    size_t n_params;
    uint64_t rounds;
} result;

static bool params_of(rt_run *r, result *out) {
    char err[512];
    rt_rank *rk = &r->ranks[0];
    out->n_params = 0;
    for (uint32_t bi = 0; bi < rk->pg->n_buffers; bi++) {
        const plan_buffer *b = &rk->pg->buffers[bi];
        if (!(b->flags & PLAN_BUF_PERSIST) || b->tensor == PLAN_NONE || r->p->tensors[b->tensor].kind != PLAN_T_PARAM) continue;
        if (out->n_params + b->bytes > sizeof out->params) return false;
        if (rt_buffer_read(r, rk, bi, 0, 0, out->params + out->n_params, err, sizeof err)) return false;
        out->n_params += b->bytes;
    }
    return true;
}

// One step's log, checked: the round after every foreground call, its end once and last (when
// a round ran), the fence on stream 0 right before its first optimizer operator.
static void check_step(const plan_program *pg, int bg, bool round_ran) {
    int last_fg = -1, first_bg = n_log, ends = 0, fences = 0, fg_calls = 0, fence_at = -1;
    for (int i = 0; i < n_log; i++) {
        const entry *e = &log_[i];
        if (e->what == 'e') {
            ends++;
            EXPECT(e->stream == bg && i == n_log - 1);
        } else if (e->what == 'f') {
            fences++, fence_at = fg_calls;
            EXPECT(e->stream == 0);
        } else if (e->stream == bg && i < first_bg) first_bg = i;
        else if (e->stream != bg) last_fg = i, fg_calls += e->what == 'k';
    }
    EXPECT(last_fg < first_bg);
    EXPECT(ends == (round_ran ? 1 : 0));
    EXPECT(round_ran == (first_bg < n_log));
    EXPECT(fences == 1 && fence_at == before_opt(pg));
}

static bool run(int period, bool hooked, result *out) {
    plan p;
    char err[1024];
    if (!load(&p, period)) return false;
    rt_options o = {.backend = "cpu-serial", .seed = 7, .timeout_s = 30};
    rt_run r;
    if (rt_run_init(&r, &p, &o, err, sizeof err)) {
        fprintf(stderr, "     %s\n", err);
        plan_free(&p);
        return false;
    }
    if (hooked) hook(r.be);
    EXPECT(rt_backend_rounds_outlive_steps(r.be) == hooked);
    bool ok = true;
    for (int s = 0; s < 3 && ok; s++) {
        n_log = 0;
        if (rt_run_step(&r, &out->loss[s], err, sizeof err)) fprintf(stderr, "     %s\n", err), ok = false;
        else if (hooked) check_step(r.ranks[0].pg, r.ranks[0].bg_stream, period == 0 || s % period == 0);
    }
    n_log = 0;
    EXPECT(rt_run_drain(&r, err, sizeof err) == 0);
    EXPECT(n_log == (hooked ? 1 : 0) && (!hooked || log_[0].what == 'd'));
    out->rounds = r.ranks[0].bg_rounds;
    ok = ok && params_of(&r, out);
    rt_run_free(&r);
    plan_free(&p);
    return ok;
}

static void rounds_outlive_steps(int period) {
    static result plain, hooked;
    bool ok = run(period, false, &plain) && run(period, true, &hooked);
    EXPECT(ok);
    if (!ok) return;
    EXPECT(!memcmp(plain.loss, hooked.loss, sizeof plain.loss) && !isnan(plain.loss[0]));
    EXPECT(plain.n_params > 0 && plain.n_params == hooked.n_params && !memcmp(plain.params, hooked.params, plain.n_params));
    uint64_t want = period ? (3 + (uint64_t)period - 1) / (uint64_t)period : 3;
    EXPECT(plain.rounds == want && hooked.rounds == want);
}

static void which_instructions_wait(void) {
    plan_insn opt = {.kind = PLAN_I_COMPUTE, .stream = 0, .phase = PLAN_PHASE_OPT};
    plan_insn fwd = {.kind = PLAN_I_COMPUTE, .stream = 0, .phase = PLAN_PHASE_FWD};
    plan_insn copy_opt = {.kind = PLAN_I_COPY, .stream = 1, .phase = PLAN_PHASE_OPT};
    plan_insn coll = {.kind = PLAN_I_COLL, .stream = 1, .phase = PLAN_PHASE_BWD};
    plan_insn recv = {.kind = PLAN_I_RECV, .stream = 0, .phase = PLAN_PHASE_FWD};
    plan_insn wait = {.kind = PLAN_I_WAIT, .stream = 0, .phase = PLAN_PHASE_OPT};
    plan_insn round_coll = {.kind = PLAN_I_COLL, .stream = 2};
    EXPECT(rt_insn_waits_for_round(&opt, 2) && rt_insn_waits_for_round(&copy_opt, 2));
    EXPECT(rt_insn_waits_for_round(&coll, 2) && rt_insn_waits_for_round(&recv, 2));
    EXPECT(!rt_insn_waits_for_round(&fwd, 2) && !rt_insn_waits_for_round(&wait, 2));
    EXPECT(!rt_insn_waits_for_round(&round_coll, 2) && !rt_insn_waits_for_round(&opt, 0));
}

// Threads of this process (Linux's /proc/self/task); -1 where that cannot be read.
static int threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

// On the cpu backend (a walker per stream, and a drawer per rank for the next step's inputs),
// the first step starts the crew and later steps reuse it; rt_run_free joins it.
static void crew_lasts_the_run(void) {
    plan p;
    char err[1024];
    int before = threads();
    if (before < 0) {
        printf("     (no /proc/self/task: the crew's threads are not counted)\n");
        return;
    }
    EXPECT(load(&p, 1));
    rt_options o = {.backend = "cpu", .seed = 7, .timeout_s = 30};
    rt_run r;
    if (rt_run_init(&r, &p, &o, err, sizeof err)) {
        fprintf(stderr, "     %s\n", err);
        EXPECT(false);
        plan_free(&p);
        return;
    }
    double loss;
    int after[4];
    for (int s = 0; s < 4; s++) {
        EXPECT(rt_run_step(&r, &loss, err, sizeof err) == 0 && !isnan(loss));
        after[s] = threads();
    }
    // Two streams (foreground, background), one drawer and the run's watchdog (guard.c): four
    // threads beside this one.
    EXPECT(after[0] == before + 4);
    EXPECT(after[1] == after[0] && after[2] == after[0] && after[3] == after[0]);
    EXPECT(r.ranks[0].bg_rounds == 4);
    rt_run_free(&r);
    // pthread_join returns once a thread has cleared its tid, which the kernel does before it
    // takes the thread out of /proc/self/task: give the count up to 2 s to come down.
    int left = threads();
    for (int i = 0; i < 200 && left != before; i++) nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL), left = threads();
    EXPECT(left == before);
    plan_free(&p);
}

int main(int argc, char **argv) {
    root = argc > 1 ? argv[1] : ".";
    crew_lasts_the_run();
    which_instructions_wait();
    rounds_outlive_steps(0);
    rounds_outlive_steps(2);
    return test_summary();
}
