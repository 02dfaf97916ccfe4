/*
 * driver.c: the two loops around main.c's pipeline: which micro-batch count to compile
 * (driver_micro_batches), and which of phase 2's ranked strategies becomes the plan (the fit:
 * driver_fit_*).
 *
 * The micro-batch search. With --auto and no micro-batch count (or size) given, the count is
 * searched too, as Megatron-LM users search --micro-batch-size: every divisor m of the global
 * batch (the model's batch when --global-batch is not given) that leaves whole ghost batch norm
 * groups in a micro-batch gets its own graph (the front end, phase 1 and its configurations, in
 * an arena of its own; a count the batch arithmetic refuses is left out), and bestfirst.c
 * searches all the counts' configurations in one queue, so a count is only planned while it
 * could still win. The chosen count and configuration go to the compile (o->batch,
 * o->search.pick), which builds the pipeline's graph again for that count.
 *
 * The fit. Phase 2 ranks strategies by the cost model; whether one fits is known only once the
 * memory planner has placed its buffers. main.c's loop runs phase 3, the memory planner, the
 * emitter and plan_check on the strategy driver_fit_next gives, and driver_fit_done says whether
 * the result ends the loop. The strategies come in this order:
 *   1. phase 2's ranking, best first (with --auto the search's memory planner has fit the
 *      first already, and candidates it found too large are not planned again);
 *   2. when none fits and the ILP chose recompute itself (--recompute auto): phase 2 again, up to
 *      three rounds, with a tighter memory budget for the ILP. Its memory model (parameters and
 *      kept activations, spread evenly over the stages) is not the memory planner's exact arena
 *      (transient buffers, the first and last stages' extra operators): the budget shrinks by
 *      the overshoot of the smallest arena, at most to 3/4 a round, so that it recomputes or
 *      splits more; the last round recomputes every block operator. Each round tries its best
 *      few (each plan of a large model takes a while);
 *   3. when still none fits: it says by how much, and tries what the message would suggest,
 *      quietly: --recompute full, then ZeRO-3, then both; the first that fits is named, and the
 *      compile still fails (exit 3).
 * --auto's own search tightens every configuration and covers full recompute, ZeRO-3 and ZeRO-3
 * without its prefetch, so with --auto steps 2 and 3's searches run only for what it left out.
 * Phase 1's candidates serve every round (its group sizes do not depend on the memory or on
 * recompute and ZeRO). An error other than "does not fit" ends the loop, but in step 3, where
 * it only rules that suggestion out.
 *
 * The co-shard round (driver_coshard). Co-shard changes the graph (coshard.c rewrites it before
 * autodiff), so the search cannot take it as one more option of a configuration: like a
 * micro-batch count, each co-shard is a slot of its own graph. Where memory bound --auto's plan
 * (it recomputes, or a faster plan was too large), the round builds a slot for each of 2, 4 and
 * 8 ways (coshard_suggest's operators: the largest outputs and their losses) at the plan's
 * micro-batch count and the next fewer, and bestfirst searches them against the plan's estimate
 * (o->beat_s: nothing is solved that could not beat it), full recompute left out, on a budget of
 * its own. main.c compiles the winner, if any, in place of the plan (o->coshard_pick).
 */
#include "plancc.h"
#include "coshard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the micro-batch search ---- */

// The front end as main.c runs it: the model loaded, the batch options applied, checked,
// differentiated, checked.
static pcc_status front_end(pcc_arena *a, pcc_options *o, pcc_graph **out) {
    pcc_graph *g = NULL;
    pcc_status st = model_load(a, o->model, &g);
    if (!st) st = options_apply_model(o, g);
    if (!st) st = batch_apply(g, &o->batch);
    if (!st) st = coshard_apply(g, o);
    if (!st) st = graph_check(g);
    if (!st) st = autodiff(g);
    if (!st) st = graph_check(g);
    *out = g;
    return st;
}

// The micro-batch counts to search: every divisor of the global batch (the model's batch when
// none is given) that leaves whole samples and whole ghost batch norm groups in a micro-batch.
static int *counts(pcc_arena *a, const pcc_graph *g, int64_t gb, int *n) {
    int64_t grain = batch_grain(g);
    int *v = NULL, cap = 0;
    *n = 0;
    for (int64_t m = gb < 65536 ? gb : 65536; m >= 1; m--)
        if (gb % m == 0 && (gb / m) % grain == 0) *VEC_PUSH(a, v, *n, cap) = (int)m;
    return v;
}

// One count's slot: its graph through the front end, phase 1 and its configurations, in arena a.
static pcc_status slot_init(pcc_arena *a, const pcc_options *o, const pcc_cluster *c, int64_t gb, int m, pcc_bf_slot *slot) {
    pcc_options t = *o;
    t.batch.micro_batches = m, t.batch.micro_batches_given = true, t.batch.global_batch = gb;
    pcc_graph *g;
    pcc_status st = front_end(a, &t, &g);
    if (st) return st;
    int ns;
    int *sizes = search_group_sizes(g, c, &o->search, &ns);
    slot->space = space_init(g, c, transform_all(g, sizes, ns, o->search.tq), &o->search);
    slot->m = m;
    return PCC_OK;
}

bool driver_searches_micro_batches(const pcc_options *o) {
    return !o->check && !o->burst && o->search.auto_mesh && !o->batch.micro_batches_given && !o->batch.micro_batch_size;
}

pcc_status driver_micro_batches(pcc_arena *a, pcc_options *o, const pcc_cluster *c, pcc_graph **g) {
    double t0 = clock_s();
    int b = graph_batch_dim(*g), n;
    int64_t gb = o->batch.global_batch ? o->batch.global_batch : b >= 0 ? (*g)->dims[b].size : 1;
    int *m = counts(a, *g, gb, &n);
    if (n <= 1) return PCC_OK;
    pcc_bf_slot *slots = arena_alloc(a, sizeof(pcc_bf_slot) * (size_t)n);
    pcc_arena **arenas = arena_alloc(a, sizeof(pcc_arena *) * (size_t)n);
    pcc_status st = PCC_OK;
    int ns = 0;
    for (int i = 0; i < n && !st; i++) {
        progress_phase("phase 2: %d micro-batches of %lld samples", m[i], (long long)(gb / m[i]));
        arenas[ns] = arena_init();
        bool was = pcc_trial;
        pcc_trial = true; // a count the batch arithmetic refuses is left out; the compile of it would say why
        st = slot_init(arenas[ns], o, c, gb, m[i], &slots[ns]);
        pcc_trial = was;
        if (!st) ns++;
        else arena_free(arenas[ns]);
        if (st == PCC_ERR_INPUT) st = PCC_OK;
    }
    pcc_bf_result r = {.slot = -1};
    if (!st && ns) st = bestfirst(slots, ns, &o->search, &r);
    if (!st && r.slot >= 0) {
        pcc_config *pick = arena_alloc(a, sizeof *pick);
        *pick = r.config;
        o->search.pick = pick;
        o->batch.micro_batches = slots[r.slot].m, o->batch.micro_batches_given = true;
        if (slots[r.slot].m > 1 || o->batch.global_batch) o->batch.global_batch = gb;
    }
    for (int i = 0; i < ns; i++) arena_free(arenas[i]);
    o->mb_searched = n;
    o->mb_search_s = clock_s() - t0;
    if (st || r.slot < 0) return st; // nothing fit: the plain compile (one micro-batch) says why
    return front_end(a, o, g);
}

/* ---- the co-shard round ---- */

static pcc_search_counts round_counts; // what the round searched (bound: the graphs it searched)

// Whether plan s recomputes: any operator (recompute only costs time; memory chose it).
static bool recomputes(const pcc_strategy *s) {
    if (s->config.rc == PCC_RECOMPUTE_FULL) return true;
    const pcc_intra *in = s->intra;
    for (int i = 0; in && i < in->t->n_ops; i++)
        if (in->t->ops[i].c[in->choice[i]].recompute) return true;
    return false;
}

bool driver_coshard_wanted(const pcc_options *o, const pcc_strategy *s, bool too_large) {
    return o->search.auto_mesh && !o->coshard && !o->coshard_none && !o->policy && !o->check && !o->burst &&
           o->search.recompute != PCC_RECOMPUTE_FULL && (too_large || recomputes(s));
}

pcc_status driver_coshard(const pcc_options *o, const pcc_cluster *c, const pcc_graph *g, const pcc_strategy *s,
                          pcc_coshard_pick **out) {
    static const int ways[] = {2, 4, 8};
    enum { NK = sizeof ways / sizeof ways[0] };
    double t0 = clock_s();
    *out = NULL;
    pcc_arena *a = arena_init();
    // The micro-batch counts: the plan's, and where the driver searched them, the next fewer (a
    // larger micro-batch, which memory may have ruled out).
    int b = graph_batch_dim(g), n = 1, nc, m[2] = {g->micro_batches, 0};
    int64_t gb = (b >= 0 ? g->dims[b].size : 1) * g->micro_batches;
    const int *all = o->mb_searched ? counts(a, g, gb, &nc) : NULL;
    for (int i = 0; all && i < nc && n < 2; i++)
        if (all[i] < m[0]) m[n++] = all[i];
    pcc_search_counts before = *bestfirst_counts();
    pcc_search_opts so = o->search;
    so.pick = NULL, so.quiet = true, so.ilp.progress = false, so.ilp.dump_lp = NULL, so.beat_s = s->est_step_s;
    // Its own time budget: a quarter of the CPU seconds the compile has spent so far (its search
    // began at deadline_s - --time-limit), at least 2 s, at most --time-limit; best first, so what
    // it leaves unsolved is what could win least.
    double limit = o->search.ilp.time_limit_s, now = clock_cpu_s();
    double budget = fmax(2.0, 0.25 * (o->search.deadline_s > 0 ? now - (o->search.deadline_s - limit) : before.seconds));
    so.deadline_s = now + (limit > 0 ? fmin(limit, budget) : budget);
    pcc_bf_slot *slots = arena_alloc(a, sizeof(pcc_bf_slot) * (size_t)(n * NK));
    pcc_arena **arenas = arena_alloc(a, sizeof(pcc_arena *) * (size_t)(n * NK));
    const char **spec = arena_alloc(a, sizeof(char *) * (size_t)(n * NK));
    pcc_batch_opts *batch = arena_alloc(a, sizeof(pcc_batch_opts) * (size_t)(n * NK));
    pcc_status st = PCC_OK;
    int ns = 0;
    for (int k = 0; k < NK && !st; k++) {
        const char *names = coshard_suggest(a, g, ways[k]);
        if (!names) continue;
        const char *sp = "";
        char *copy = arena_printf(a, "%s", names), *save = NULL;
        for (char *x = strtok_r(copy, ",", &save); x; x = strtok_r(NULL, ",", &save))
            sp = arena_printf(a, "%s%s%s:%d", sp, *sp ? "," : "", x, ways[k]);
        for (int i = 0; i < n && !st; i++) {
            progress_phase("phase 2: co-shard %d ways (%s), %d micro-batch%s", ways[k], names, m[i], m[i] == 1 ? "" : "es");
            pcc_options t = *o;
            t.coshard = sp;
            if (o->mb_searched) t.batch.micro_batches = m[i], t.batch.micro_batches_given = true, t.batch.global_batch = gb;
            batch[ns] = t.batch, spec[ns] = sp, arenas[ns] = arena_init();
            bool was = pcc_trial;
            pcc_trial = true; // a count or a co-shard the graph refuses is left out
            pcc_graph *h;
            st = front_end(arenas[ns], &t, &h);
            pcc_trial = was;
            if (!st) {
                int nz;
                int *sizes = search_group_sizes(h, c, &so, &nz);
                slots[ns].space = space_init(h, c, transform_all(h, sizes, nz, so.tq), &so);
                slots[ns++].m = m[i];
            } else {
                arena_free(arenas[ns]);
            }
            if (st == PCC_ERR_INPUT) st = PCC_OK;
        }
    }
    pcc_bf_result r = {.slot = -1};
    if (!st && ns) st = bestfirst(slots, ns, &so, &r);
    if (!st && r.slot >= 0) {
        pcc_coshard_pick *p = calloc(1, sizeof *p);
        PCC_ASSERT(p && r.n > 0);
        *p = (pcc_coshard_pick){strdup(spec[r.slot]), r.config, batch[r.slot], r.ranked[0]->est_step_s, s->est_step_s, 0};
        PCC_ASSERT(p->spec);
        *out = p;
    }
    for (int i = 0; i < ns; i++) arena_free(arenas[i]);
    arena_free(a);
    const pcc_search_counts *k = bestfirst_counts();
    round_counts = (pcc_search_counts){k->searches - before.searches, k->configs - before.configs, k->expanded - before.expanded,
                                       k->checked - before.checked, k->dropped - before.dropped, clock_s() - t0, ns, 0};
    if (*out) (*out)->seconds = clock_s() - t0;
    return st;
}

const pcc_search_counts *driver_coshard_counts(void) { return &round_counts; }

/* ---- the fit ---- */

enum { FIT_RANKED, FIT_TIGHTER, FIT_EXPLAIN, FIT_OVER };

void driver_fit_init(pcc_fit *f, const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, const pcc_options *o,
                     pcc_strategy **cand, int n) {
    *f = (pcc_fit){.cand = cand, .n = n, .which = -1, .g = g, .c = c, .t = t, .o = o, .budget = *c, .peak = INFINITY};
}

// Step 2: phase 2 again on a tighter budget, its best few; false when no round is left.
static bool fit_tighter(pcc_fit *f) {
    pcc_search_opts so = f->o->search;
    if (so.auto_mesh && !so.pick) return false; // --auto's search tightens every configuration itself
    while (f->round < 3 && so.recompute == PCC_RECOMPUTE_AUTO && isfinite(f->peak)) {
        bool last = f->round == 2;
        progress_phase("phase 2 again: nothing fit in memory; a tighter budget for the ILP (round %d)", ++f->round);
        f->budget.memory_bytes *= fmax(0.75, 0.98 * f->c->memory_bytes / f->peak);
        pcc_search_opts r = so;
        if (last) f->budget.memory_bytes = f->c->memory_bytes, r.recompute = PCC_RECOMPUTE_FULL;
        r.quiet = true;
        pcc_strategy **v;
        int nv;
        if (search(f->g, &f->budget, f->t, &r, &v, &nv)) continue; // keep the first round's figures
        f->cand = v, f->n = nv > 4 ? 4 : nv, f->next = 0, f->mode = FIT_TIGHTER;
        return true;
    }
    return false;
}

// Step 3's suggestions, in order: their search options (the ILP quiet, no dump) and names.
static bool fit_suggestion(const pcc_fit *f, int k, pcc_search_opts *so, const char **name) {
    *so = f->o->search;
    so->quiet = true, so->ilp.progress = false, so->ilp.dump_lp = NULL;
    // --auto's own search has tried full recompute (with --recompute auto) and every ZeRO stage
    // from the one asked for: only what it left out is worth a search.
    bool searched = so->auto_mesh && !so->pick, rc = f->o->search.recompute != PCC_RECOMPUTE_FULL;
    bool sharded = so->dp * (so->cp > 1 ? so->cp : 1) > 1; // ZeRO's dp x cp
    bool zero3 = so->zero < 3 && (so->auto_mesh || sharded) && !searched;
    // ZeRO-3 one layer at a time (--prefetch none): a template's search has not tried it unless
    // asked; --auto's tries it on every ZeRO-3 configuration that does not fit (bestfirst.c,
    // tighten), so with full recompute unless --recompute none left that out.
    bool late = !so->zero3_late && (so->zero == 3 || so->auto_mesh || sharded);
    if (searched) rc = f->o->search.recompute == PCC_RECOMPUTE_NONE, late = late && rc;
    switch (k) {
    case 0: so->recompute = PCC_RECOMPUTE_FULL, *name = "--recompute full"; return rc;
    case 1: so->zero = 3, *name = "--zero 3"; return zero3;
    case 2: so->zero = 3, so->recompute = PCC_RECOMPUTE_FULL, *name = "--zero 3 --recompute full"; return zero3;
    case 3:
        so->zero = 3, so->recompute = PCC_RECOMPUTE_FULL, so->zero3_late = true;
        *name = "--zero 3 --recompute full --prefetch none";
        return late;
    default: return false;
    }
}

// Step 3: the next suggestion whose search succeeds; false when none is left.
static bool fit_explain(pcc_fit *f) {
    if (f->mode != FIT_EXPLAIN) {
        progress_done();
        char need[32], have[32];
        fmt_bytes(need, sizeof need, f->peak);
        fmt_bytes(have, sizeof have, f->c->memory_bytes);
        fprintf(stderr, "plancc: %s: does not fit: the smallest plan needs %s per device (its largest stage's arena), and "
                        "a %s has %s\n", f->g->file, need, f->c->device_name, have);
        f->mode = FIT_EXPLAIN, f->suggestion = -1;
    }
    pcc_search_opts so;
    while (++f->suggestion < 4) {
        if (!fit_suggestion(f, f->suggestion, &so, &f->fix)) continue;
        pcc_strategy **v;
        int nv;
        if (search(f->g, f->c, f->t, &so, &v, &nv)) continue;
        f->cand = v, f->n = nv, f->next = 0;
        return true;
    }
    fprintf(stderr, "plancc: neither recompute nor ZeRO-3 (with or without its prefetch) make it fit: use more devices "
                    "(--nodes, --devices, or more pipeline stages with --pp), or a smaller micro-batch (the batch dimension "
                    "in the model)\n");
    f->mode = FIT_OVER;
    return false;
}

const pcc_strategy *driver_fit_next(pcc_fit *f, pcc_status *st) {
    if (!f->started)
        progress_phase("phase 3: communication, memory plan and plan_check (%d candidate%s)", f->n, f->n == 1 ? "" : "s");
    f->started = true;
    // The search's memory planner has already found these too large: their peaks, no second plan.
    while (f->next < f->n && f->mode != FIT_EXPLAIN && f->cand[f->next]->memory_planned &&
           f->cand[f->next]->est_memory_bytes > f->c->memory_bytes)
        f->peak = fmin(f->peak, f->cand[f->next++]->est_memory_bytes);
    if (f->next < f->n) return f->cand[f->next++];
    if (f->mode != FIT_EXPLAIN && f->mode != FIT_OVER && fit_tighter(f)) return f->cand[f->next++];
    if (f->mode != FIT_OVER && fit_explain(f)) return f->cand[f->next++];
    *st = PCC_ERR_INFEASIBLE;
    return NULL;
}

bool driver_fit_done(pcc_fit *f, pcc_status *st, pcc_emitted *e) {
    bool fits = !*st && e->peak_bytes <= f->c->memory_bytes;
    if (fits && f->mode != FIT_EXPLAIN) {
        f->which = f->next - 1, f->mode = FIT_OVER;
        progress_done();
        return true;
    }
    if (!*st) *st = PCC_ERR_INFEASIBLE; // it does not fit
    emitted_free(e);
    if (f->mode == FIT_EXPLAIN) {
        if (fits) {
            fprintf(stderr, "plancc: it fits with %s\n", f->fix);
            f->mode = FIT_OVER, *st = PCC_ERR_INFEASIBLE;
            return true;
        }
        if (*st != PCC_ERR_INFEASIBLE) f->next = f->n; // an error rules this suggestion out
        *st = PCC_OK;
        return false;
    }
    if (*st != PCC_ERR_INFEASIBLE) return true; // an error ends the compile
    f->peak = fmin(f->peak, e->peak_bytes);
    *st = PCC_OK;
    return false;
}
