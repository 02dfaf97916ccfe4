/*
 * bestfirst.c: phase 2's --auto search: best first over every configuration, with lower bounds,
 * one time budget, and the memory planner's word on what fits.
 *
 * A configuration (pcc_config, search.c) is a mesh pp x dp x tp, a ZeRO stage, whether the ILP
 * may split the batch over tp, the recompute the ILP may use (auto, none, full) and the virtual
 * stages; with the driver's search over micro-batch counts, one set of configurations per count
 * (a slot: that count's graph in an arena of its own). Every configuration sits in one priority
 * queue, keyed by what its step cannot beat, and moves through four levels:
 *
 *   0. key: a lower bound that needs no ILP (search.c's space_bound: every operator's FLOPs at
 *      the best rate the cost model ever gives, split perfectly over dp x tp, through the
 *      pipeline's fill and drain). Popped: the cost model's floor of its mesh.
 *   1. key: that floor (space_floor: every operator at its cheapest candidate on the mesh, as the
 *      estimator times it, through the pipeline; computed once per dp x tp). Popped: the ILP
 *      without its memory row, which the memo shares between every mesh, ZeRO stage and
 *      pipeline depth of one tp group and batch. If that answer keeps the memory row, it is the
 *      ILP's answer: level 3, keyed by its estimate. Otherwise level 2, keyed still by the
 *      floor: the choice the ILP makes under the row may have a better estimate than the one it
 *      makes without (the ILP's objective leaves out the optimizer and the data-parallel
 *      synchronization, which splitting more shrinks), so the estimate without the row bounds
 *      nothing. (With recompute auto the answer without the row is recompute none's, searched
 *      as its own configuration; the recompute auto one is set aside, and comes back, tightened,
 *      if the memory planner finds recompute none's too large.)
 *   2. key: the floor. Popped: the ILP with its memory row (the hard solve), level 3 with its
 *      estimate.
 *   3. key: the estimate of the strategy. Popped: the memory planner plans it (phase 3 and
 *      memplan.c, what the compile will do), so the memory figure the search ranks by is the
 *      emitted plan's peak. The first that fits is the answer: every configuration left in the
 *      queue has a key at least as large. One that does not fit, with recompute auto, comes back
 *      at level 2 with a smaller share of the memory for its ILP (two rounds, as the driver's fit
 *      tightens a template); then one with ZeRO-3 comes back once more without the prefetch of
 *      the next layer's parameters (--prefetch none: one gathered layer, slower by the estimate,
 *      so it wins only where nothing faster fits).
 *
 * Every key is a lower bound on the estimate of what the configuration can still become (the
 * estimator's pipeline grows with every stage's time, and every operator costs at least its
 * cheapest candidate), so the answer is the configuration with the best estimate that fits,
 * among all the search has (every template among them). Two exceptions: a configuration the
 * memory planner finds too large comes back with a smaller share, keyed by its estimate, which
 * is the driver's heuristic for a template with recompute auto, not a bound; and the hard solve
 * of recompute auto is keyed by its probe's pipeline time, 2% off (probe_key), which holds as a
 * bound as far as the ILP's costs and the estimate's agree. What the search did
 * is reported: the configurations it looked at of how many, the ones it planned, the ILPs it
 * solved and reused.
 *
 * The time budget (--time-limit, for the whole search) shortens every ILP's own limit to the
 * time left, and to a twelfth of the budget (search.c's tp_schedule); once spent, level-2
 * configurations are dropped instead of solved (the hard solves) and the search finishes on
 * what is cheap, with a warning that says so. Ties break by level,
 * slot, configuration and round, so the result is deterministic unless the budget runs out.
 *
 * The co-shard round (driver.c, driver_coshard) searches co-sharded graphs against a plan it has
 * (o->beat_s, that plan's estimate): it stops at the first key no better, nothing found; once its
 * budget is spent it drops the ILP probes too, not only the hard solves.
 *
 * Progress: the search updates the progress line (glpk.c) with what it has searched, the best
 * estimate of a strategy built so far (whether it fits is the memory planner's word, later: the
 * answer may be slower) and the bound.
 *
 * search(), phase 2's entry, is here too: it runs this search over one graph's configurations for
 * --auto, and hands everything else (a template, the driver's pick, --check -d s) to search.c's
 * space_one, so that search.c never calls back up into this file.
 */
#include "plancc.h"

#include <math.h>
#include <stdlib.h>

typedef struct bf_node {
    double key;
    int level, slot, k;         // k: the configuration's index in its slot (ties)
    pcc_config config;
    pcc_strategy *s;            // level 1, 2: the strategy built so far
} bf_node;

typedef struct bf_heap {
    bf_node *v;
    int n, cap;
} bf_heap;

static bool node_less(const bf_node *a, const bf_node *b) {
    if (a->key != b->key) return a->key < b->key;
    if (a->level != b->level) return a->level > b->level; // the surest first
    if (a->slot != b->slot) return a->slot < b->slot;
    if (a->k != b->k) return a->k < b->k;
    return a->config.round < b->config.round;
}

static void heap_push(bf_heap *h, bf_node x) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 256;
        h->v = realloc(h->v, sizeof(bf_node) * (size_t)h->cap);
        PCC_ASSERT(h->v);
    }
    int i = h->n++;
    while (i > 0 && node_less(&x, &h->v[(i - 1) / 2])) h->v[i] = h->v[(i - 1) / 2], i = (i - 1) / 2;
    h->v[i] = x;
}

static bf_node heap_pop(bf_heap *h) {
    bf_node top = h->v[0], x = h->v[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && node_less(&h->v[c + 1], &h->v[c])) c++;
        if (!node_less(&h->v[c], &x)) break;
        h->v[i] = h->v[c], i = c;
    }
    if (h->n) h->v[i] = x;
    return top;
}

typedef struct bf {
    pcc_bf_slot *slots;
    int ns;
    const pcc_search_opts *o;
    bf_heap heap;
    double best_s;              // the least estimate of a strategy built so far (INFINITY: none)
    double fit_bytes;           // what a device holds
    pcc_bf_result *r;
    pcc_strategy ***built;      // per slot: its level-2 strategies
    int *n_built, *cap_built;
    bf_node *aside;             // recompute auto configurations expand set aside as recompute none's twins
    int n_aside, cap_aside;
} bf;

static bool same_but_recompute(const pcc_config *a, const pcc_config *b) {
    return a->pp == b->pp && a->dp == b->dp && a->tp == b->tp && a->v == b->v && a->zero == b->zero && a->cp == b->cp &&
           a->tq == b->tq && a->cp_ring == b->cp_ring && a->cp_zigzag == b->cp_zigzag && a->btp == b->btp && a->sp == b->sp &&
           a->budget == b->budget && a->round == b->round && a->late == b->late;
}

static void progress(const bf *B, double bound) {
    char best[64] = "";
    if (isfinite(B->best_s)) snprintf(best, sizeof best, ", best estimate so far %.4g s (fit unchecked)", B->best_s);
    const pcc_ilp_counts *n = mip_counts();
    progress_phase("phase 2: searched %d of %d candidates%s, bound %.4g s; %d ILPs solved, %d reused", B->r->expanded,
                   B->r->configs, best, bound, n->solves, n->reused + n->relaxed);
}

static void keep(bf *B, int slot, pcc_strategy *s) {
    *VEC_PUSH(space_graph(B->slots[slot].space)->arena, B->built[slot], B->n_built[slot], B->cap_built[slot]) = s;
    if (s->est_step_s < B->best_s) B->best_s = s->est_step_s;
}

// Level 2: whether the memory planner fits the strategy (its peak into s->est_memory_bytes).
static bool fits(bf *B, int slot, pcc_strategy *s) {
    const pcc_space *S = B->slots[slot].space;
    pcc_status st;
    double peak = memplan_strategy_peak(space_graph(S), space_cluster(S), s, B->o->preserve, &st);
    if (st) return false; // phase 3 cannot make this one (a limit of plancc's, said when compiled alone)
    s->est_memory_bytes = peak;
    s->memory_planned = true;
    if (peak <= B->fit_bytes) return true;
    if (peak < B->r->least_peak) B->r->least_peak = peak;
    return false;
}

// A configuration the memory planner found too large. With recompute auto: its ILP again with a
// smaller share of the memory, by the overshoot (at most to 3/4 a round, two rounds; the third
// of the driver's fit, every block operator recomputed, is the configuration with --recompute
// full). Then, with ZeRO-3 (its own prefetch not already off): the same again without the
// prefetch (late, --prefetch none), one gathered layer instead of two, its gathers exposed.
// Its key: the estimate it had, which more recompute, splitting or exposed gathers hardly lower.
// Recompute none's configuration under --recompute auto hands the smaller share to its recompute
// auto twin where expand set the twin aside (its ILP kept the memory row without it: the same
// answer, by the ILP's memory model): the planner's peak can still be over, and then only the
// twin can recompute its way under.
static void tighten(bf *B, const bf_node *x, double peak) {
    pcc_config k = x->config;
    if (!isfinite(peak)) return;
    if (k.rc == PCC_RECOMPUTE_NONE && k.round == 0 && !k.late)
        for (int i = 0; i < B->n_aside; i++) {
            bf_node t = B->aside[i];
            if (t.slot != x->slot || !same_but_recompute(&t.config, &k)) continue;
            t.config.budget = fmax(0.75, 0.98 * B->fit_bytes / peak), t.config.round = 1;
            heap_push(&B->heap, (bf_node){x->key, 2, t.slot, t.k, t.config, NULL});
            B->aside[i] = B->aside[--B->n_aside];
            break;
        }
    if (k.rc == PCC_RECOMPUTE_AUTO && k.round < 2 && !k.late)
        k.budget = (k.budget > 0 ? k.budget : 1) * fmax(0.75, 0.98 * B->fit_bytes / peak);
    else if (k.zero == 3 && k.dp * (k.cp > 1 ? k.cp : 1) > 1 && !k.late && !B->o->zero3_late)
        k.late = true;
    else
        return;
    k.round++;
    heap_push(&B->heap, (bf_node){x->key, 2, x->slot, x->k, k, NULL});
}

// The key of a hard solve with recompute auto from its probe s (the program without the memory
// row is recompute none's, the least its objective can be): the row can only force recompute,
// which adds compute, and splits the ILP found costlier, so the pipeline part of the probe's
// estimate, 2% off for what the ILP's costs (the group's whole batch) and the estimate's (one
// replica's pieces) weigh differently, is what the hard solve's estimate is not below. Not the
// optimizer and the data-parallel synchronization, which a memory-forced split may shrink; with
// ZeRO-3, whose exposed gathers are in the pipeline and shrink so too, only the busiest device's
// operators and tp collectives; not with cp. Without it the Evoformer's memory-bound dp x tp
// solves (20 s each) ran where their probes were 15% slower than the answer, and LLaMA-2-7B's
// ZeRO-3 ones (1-3 s each) alike. The search's second exception to "every key is a bound".
static double probe_key(const pcc_config *k, const pcc_strategy *s) {
    if (k->rc != PCC_RECOMPUTE_AUTO || k->cp > 1) return 0;
    return 0.98 * (k->zero >= 3 ? s->est.compute_s + s->est.tp_comm_s : s->est.pipeline_s);
}

// One step of the search on node x; true when x is the answer.
static pcc_status expand(bf *B, bf_node x, bool *done) {
    pcc_space *S = B->slots[x.slot].space;
    pcc_strategy *s = x.s;
    *done = false;
    switch (x.level) {
    case 0: // FLOPs bound -> the cost model's floor of the mesh
        heap_push(&B->heap, (bf_node){fmax(x.key, space_floor(S, &x.config)), 1, x.slot, x.k, x.config, NULL});
        return PCC_OK;
    case 3: // an exact strategy: does it fit?
        B->r->checked++;
        *done = fits(B, x.slot, s);
        if (!*done) tighten(B, &x, s->est_memory_bytes);
        return PCC_OK;
    case 2: // the hard solve, unless the time is spent
        if (B->o->deadline_s > 0 && clock_cpu_s() > B->o->deadline_s) {
            B->r->dropped++;
            return PCC_OK;
        }
        break;
    default:
        if (B->o->beat_s > 0 && B->o->deadline_s > 0 && clock_cpu_s() > B->o->deadline_s) {
            B->r->dropped++; // the co-shard round, out of time: no probe either
            return PCC_OK;
        }
        B->r->expanded++;
    }
    pcc_status st = space_build(S, &x.config, x.level == 1, &s);
    if (st == PCC_ERR_INFEASIBLE) return PCC_OK;
    if (st) return st;
    // recompute auto whose ILP without the memory row fits the row: the same strategy as
    // recompute none's (the row left out, recompute only costs), which is searched too
    if (x.level == 1 && s->exact && x.config.rc == PCC_RECOMPUTE_AUTO && B->o->recompute == PCC_RECOMPUTE_AUTO && x.config.round == 0) {
        if (B->n_aside == B->cap_aside) { // for tighten
            B->cap_aside = B->cap_aside ? 2 * B->cap_aside : 64;
            B->aside = realloc(B->aside, sizeof(bf_node) * (size_t)B->cap_aside);
            PCC_ASSERT(B->aside);
        }
        B->aside[B->n_aside++] = x;
        return PCC_OK;
    }
    bool exact = x.level == 2 || s->exact;
    // An inexact probe's estimate is no bound (a choice forced to save memory may be faster by
    // the estimate): the hard solve keeps the floor's key, and only an exact estimate raises it;
    // but see probe_key.
    double key = exact ? fmax(x.key, s->est_step_s) : fmax(x.key, probe_key(&x.config, s));
    if (exact) keep(B, x.slot, s);
    heap_push(&B->heap, (bf_node){key, exact ? 3 : 2, x.slot, x.k, x.config, s});
    return PCC_OK;
}

static int by_time(const void *a, const void *b) {
    const pcc_strategy *x = *(pcc_strategy *const *)a, *y = *(pcc_strategy *const *)b;
    if (x->est_step_s != y->est_step_s) return x->est_step_s < y->est_step_s ? -1 : 1;
    for (int i = 0; i < PCC_AXES; i++) // ties: fewer pipeline stages, then less tp
        if (x->mesh[i] != y->mesh[i]) return x->mesh[i] < y->mesh[i] ? -1 : 1;
    if (x->zero != y->zero) return x->zero - y->zero; // then the least sharding
    if (x->config.rc != y->config.rc) return (int)x->config.rc - (int)y->config.rc;
    if (x->config.btp != y->config.btp) return (int)x->config.btp - (int)y->config.btp;
    if (x->config.sp != y->config.sp) return (int)x->config.sp - (int)y->config.sp;
    if (x->zero3_late != y->zero3_late) return (int)x->zero3_late - (int)y->zero3_late; // then the prefetch
    return x->virtual_stages - y->virtual_stages; // then no interleaving
}

// The answer's slot's strategies, the answer first, then the rest by their estimates (or, when
// nothing fits, every strategy of the slot with the least estimate, by their estimates).
static void rank(bf *B, pcc_strategy *win) {
    pcc_bf_result *r = B->r;
    int slot = r->slot;
    if (slot < 0) { // nothing fits: the slot of the best estimate
        double best = INFINITY;
        for (int i = 0; i < B->ns; i++)
            for (int k = 0; k < B->n_built[i]; k++)
                if (B->built[i][k]->est_step_s < best) best = B->built[i][k]->est_step_s, slot = i;
        if (slot < 0) return;
    }
    pcc_strategy **v = B->built[slot];
    int n = B->n_built[slot];
    qsort(v, (size_t)n, sizeof *v, by_time);
    for (int i = 0; win && i < n; i++)
        if (v[i] == win) {
            for (int j = i; j > 0; j--) v[j] = v[j - 1];
            v[0] = win;
            break;
        }
    r->ranked = v, r->n = n, r->ranked_slot = slot;
}

static void bf_free(bf *B) {
    free(B->heap.v), free(B->aside);
    free(B->built), free(B->n_built), free(B->cap_built);
}

static pcc_search_counts counts = {.least_peak = INFINITY};

pcc_status bestfirst(pcc_bf_slot *slots, int ns, const pcc_search_opts *o, pcc_bf_result *r) {
    double t0 = clock_s();
    *r = (pcc_bf_result){.slot = -1, .ranked_slot = -1, .least_peak = INFINITY, .bound = INFINITY};
    bf B = {.slots = slots, .ns = ns, .o = o, .best_s = INFINITY, .r = r};
    B.built = calloc((size_t)ns, sizeof *B.built), B.n_built = calloc((size_t)ns, sizeof(int));
    B.cap_built = calloc((size_t)ns, sizeof(int));
    PCC_ASSERT(B.built && B.n_built && B.cap_built);
    for (int i = 0; i < ns; i++) {
        const pcc_space *S = slots[i].space;
        if (i == 0) B.fit_bytes = o->fit_memory_bytes > 0 ? o->fit_memory_bytes : space_cluster(S)->memory_bytes;
        for (int k = 0; k < space_count(S); k++) heap_push(&B.heap, (bf_node){space_bound(S, k), 0, i, k, *space_config(S, k), NULL});
        r->configs += space_count(S);
    }
    pcc_strategy *win = NULL;
    pcc_status st = PCC_OK;
    while (B.heap.n > 0) {
        bf_node x = heap_pop(&B.heap);
        if (o->beat_s > 0 && x.key >= o->beat_s) break; // the co-shard round: nothing left beats the plan it weighs
        r->bound = x.key;
        if (!o->quiet) progress(&B, x.key);
        bool done;
        st = expand(&B, x, &done);
        if (st) break;
        if (done) {
            win = x.s, r->slot = x.slot, r->config = x.config;
            break;
        }
    }
    if (!win) r->bound = INFINITY;
    r->out_of_time = r->dropped > 0;
    if (r->out_of_time && !o->quiet)
        warn("the search's time budget (--time-limit %g s) ran out after %d of %d candidates: %d were left without their "
             "ILP and %d ILPs found no solution in the time they had, and the plan is the best of the rest (raise "
             "--time-limit to search them)", o->ilp.time_limit_s, r->expanded, r->configs, r->dropped, ilp_unsolved());
    if (!st) rank(&B, win);
    bf_free(&B);
    counts.searches++, counts.configs += r->configs, counts.expanded += r->expanded, counts.checked += r->checked;
    counts.dropped += r->dropped, counts.seconds += clock_s() - t0, counts.bound = r->bound;
    counts.least_peak = r->least_peak;
    return st;
}

const pcc_search_counts *bestfirst_counts(void) { return &counts; }

// Phase 2's entry (plancc.h): --auto without the driver's pick searches best first over one
// graph's configurations; a template, the pick and --check -d s are one configuration each.
pcc_status search(const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, const pcc_search_opts *o,
                  pcc_strategy ***out, int *n_out) {
    *out = NULL, *n_out = 0;
    if (!o->quiet && !o->whole) progress_phase("phase 2: the device mesh and the splits (%s)", o->auto_mesh ? "--auto" : "template");
    if (o->whole || !o->auto_mesh || o->pick) return space_one(g, c, t, o, out, n_out);
    pcc_space *S = space_init(g, c, t, o);
    if (space_count(S) == 0) return space_no_fit(S, PCC_OK);
    pcc_bf_slot slot = {.space = S, .m = g->micro_batches};
    pcc_bf_result r;
    pcc_status st = bestfirst(&slot, 1, o, &r);
    if (st) return st;
    if (r.n == 0) return space_no_fit(S, PCC_ERR_INFEASIBLE);
    *out = r.ranked, *n_out = r.n;
    return PCC_OK;
}
