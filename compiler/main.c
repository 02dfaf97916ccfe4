/*
 * main.c: the plancc driver. main() is the pipeline: one call per phase, a verifier between
 * the phases that rewrite the graph, and one after the plan is written in memory:
 *
 *   options_parse -> model_load -> batch_apply -> graph_check -> autodiff -> graph_check
 *     -> cluster_load -> transform_all (phase 1) -> search (phase 2) -> preserve (phase 3)
 *     -> memplan -> emit_plan -> check_plan -> the plan file
 *
 * Each phase's entry point and contract is in plancc.h, its reasoning in its file's essay.
 * Around the pipeline, driver.c holds the two loops that are not phases: the micro-batch count
 * (--auto --global-batch plans every count through the front end and phases 1 and 2 and keeps
 * the fastest), and the fit (phase 2 ranks strategies by the cost model; the first whose plan
 * the memory planner fits into the device's memory becomes the plan, phase 2 running again with
 * a tighter budget when none does). The options say where the pipeline stops: --check after
 * its report of the model, or after the phases its -d dumps show (t: phase 1's candidates, s:
 * phase 2's choice, the ILP on all the devices as one group); --estimate-only after the fit
 * (phase 3 and the memory planner, no plan_check, no file), with the estimate of a step and the
 * planner's peak, so it exits 3 with the compile's message when nothing fits. In a compile, -d shows phase 1's candidates for every group size
 * the search tries and the ILP choice of phase 2's best-ranked strategy (the fit may end on
 * another). --burst (DeepPool's burst parallelism)
 * has a phase 2 and a phase 3 of its own (burst.c), and the same memory planner, emitter and
 * verifier (compile_burst). report.c prints what the options ask to be told.
 *
 * Exit codes (runtime/cli.h's table, printed by --help): 0 success, 1 internal error, 2 invalid
 * input or usage, 3 infeasible, 8 the plan file cannot be written.
 */
#include "plancc.h"
#include "coshard.h"
#include "policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static pcc_status write_plan(const plan *p, const char *out) {
    char err[512];
    if (plan_write(p, out, err, sizeof err) == PLAN_OK) return PCC_OK;
    fprintf(stderr, "plancc: %s: %s\n", out, err);
    return PCC_ERR_OUTPUT;
}

// The plan's file can be written (runtime/plan/file.c), asked before the work that makes it.
static pcc_status check_output(const char *out) {
    char err[512];
    if (plan_out_check(out, err, sizeof err) == PLAN_OK) return PCC_OK;
    fprintf(stderr, "plancc: -o %s\n", err);
    return PCC_ERR_OUTPUT;
}

// Whether the model's parameter state (weights, gradients, optimizer state) could fit at all: no
// plan holds less of it per device than its share sharded over every device (ZeRO-3 over all of
// them), so where that share exceeds the largest device's memory nothing fits, and the search,
// which would have to prove it configuration by configuration, is not run. PCC_ERR_INFEASIBLE
// with the device count it would take.
static pcc_status state_fits(const pcc_graph *g, const pcc_cluster *c) {
    pcc_totals t;
    graph_totals(g, &t);
    double state = t.bytes_weights + t.bytes_grads + t.bytes_optim, mem = c->memory_bytes;
    for (int i = 0; c->groups && i < c->n_groups; i++) mem = fmax(mem, c->groups[i].memory_bytes);
    if (state / c->n_devices <= mem) return PCC_OK;
    char all[32], each[32], have[32];
    fprintf(stderr, "plancc: %s: does not fit: its parameters, gradients and optimizer state are %s, %s per device even "
                    "sharded over all %d devices (ZeRO-3 over every one), and a %s has %s: use at least %.0f devices "
                    "(--nodes, --devices)\n", g->file, fmt_bytes(all, sizeof all, state), fmt_bytes(each, sizeof each, state / c->n_devices),
            c->n_devices, c->device_name, fmt_bytes(have, sizeof have, mem), ceil(state / mem));
    return PCC_ERR_INFEASIBLE;
}

// --burst: a phase 2 (every layer's width) and a phase 3 (its programs) of its own, burst.c's;
// the memory planner, the emitter and the verifier as for any plan.
static pcc_status compile_burst(pcc_arena *a, const pcc_graph *g, const pcc_cluster *c, const pcc_options *o) {
    double t0 = clock_s();
    if (c->n_devices & (c->n_devices - 1) || c->n_devices > (1 << PLAN_MAX_AXES)) {
        fprintf(stderr, "plancc: --burst needs a power-of-two device count up to %d (the layers run on 1, 2, 4, ... devices), "
                        "got %d devices\n", 1 << PLAN_MAX_AXES, c->n_devices);
        return PCC_ERR_INPUT;
    }
    pcc_burst_opts bo = {.devices = c->n_devices, .amp_limit = o->amp_limit, .widths = o->burst_widths,
                         .bucket_bytes = o->preserve.bucket_bytes};
    pcc_burst *b;
    pcc_emit_opts eo;
    pcc_emitted e = {0};
    progress_phase("phase 2: burst parallelism, every layer's device count");
    pcc_status st = burst_plan(g, c, &bo, &b);                                  // phase 2
    if (st) return st;
    options_emit(a, c, o, &eo);
    progress_phase("phase 3: burst plan, memory plan and plan_check");
    pcc_programs *pr = burst_programs(g, c, b, &o->preserve);                   // phase 3
    memplan(pr);                                                                // the memory planner
    emit_plan(g, c, pr, &eo, &e);                                               // the plan
    st = check_plan(&e);                                                        // the verifier
    progress_done();
    char b1[32], b2[32];
    if (!st && e.peak_bytes > c->memory_bytes) {
        fprintf(stderr, "plancc: %s: does not fit: the burst plan needs %s per device, and a %s has %s\n", g->file,
                fmt_bytes(b1, sizeof b1, e.peak_bytes), c->device_name, fmt_bytes(b2, sizeof b2, c->memory_bytes));
        st = PCC_ERR_INFEASIBLE;
    }
    const char *out = options_output(a, o);
    if (!st) st = write_plan(e.p, out);
    if (!st) report_burst(stdout, g, c, o, b, &e, out, clock_s() - t0);
    emitted_free(&e);
    return st;
}

static const pcc_options *finish_opts;

// The end of a run: the report flushed (a full disk is an error), everything freed.
static int finish(pcc_arena *a, pcc_emitted *e, pcc_status st) {
    st = policy_blame(finish_opts, st);                                         // exit 3 under --policy names it
    emitted_free(e);
    if (!st && fflush(stdout) != 0) {
        fprintf(stderr, "plancc: cannot write the report\n");
        st = PCC_ERR_INTERNAL;
    }
    progress_done();
    arena_free(a);
    mip_memo_free();
    return st;
}

// Phase 3 on candidate s. A candidate of --auto's that phase 3 cannot make (a limit of plancc's,
// such as a gradient summed over block copies on two stages) gives way to the next one quietly
// while more are left (more); the last one says why.
static pcc_status phase3(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s, const pcc_options *o, bool more,
                         pcc_programs **pr) {
    bool was = pcc_trial;
    pcc_trial = was || (o->search.auto_mesh && more);
    pcc_status st = preserve(g, c, s, &o->preserve, pr);
    pcc_trial = was;
    return st;
}

// After the fit of an --auto compile (*st its status): whether main compiles again with co-shard.
// The co-shard round, where memory bound the plan (it recomputes, or a faster one was too large):
// a faster plan that co-shards (op->coshard_pick) is compiled next and this one is not written.
// The co-shard step, where every plan was too large (not where phase 3 met a limit): the
// operators main co-shards 4, 8, then 16 ways (op->coshard_retry), *st still infeasible.
static bool coshard_next(pcc_arena *a, pcc_options *op, const pcc_options *o, const pcc_cluster *c, const pcc_graph *g,
                         const pcc_fit *fit, pcc_status *st) {
    bool too_large = isfinite(fit->peak) || isfinite(bestfirst_counts()->least_peak);
    if (!*st && driver_coshard_wanted(o, fit->cand[fit->which], too_large)) {
        if (driver_coshard(o, c, g, fit->cand[fit->which], &op->coshard_pick)) op->coshard_pick = NULL; // an ILP's error: the plan stays
        op->mb_searched = o->mb_searched;
        return op->coshard_pick;
    }
    if (*st == PCC_ERR_INFEASIBLE && o->search.auto_mesh && !o->coshard && !o->coshard_none && fit->n > 0 &&
        isfinite(fit->peak) && fit->peak > c->memory_bytes) {
        const char *cs = coshard_suggest(a, g, 4);
        if (cs) op->coshard_retry = strdup(cs);
    }
    return false;
}

// One compile of the options, from the front end to the plan and its report.
static pcc_status compile(pcc_options *op) {
    pcc_options o = *op;
    pcc_status st = PCC_OK;
    o.search.preserve = &o.preserve; // the search's memory figure is phase 3's and the planner's
    o.search.deadline_s = clock_cpu_s() + o.search.ilp.time_limit_s; // one time budget for the whole search
    pcc_quiet = o.quiet;
    progress_init(!o.quiet && !o.check);
    pcc_arena *a = arena_init();
    pcc_graph *g = NULL;
    pcc_cluster *c = NULL;
    pcc_strategy **cand = NULL;
    const pcc_strategy *s;
    int n = 0, n_sizes;
    pcc_fit fit = {0};
    pcc_emit_opts eo;
    pcc_programs *pr;
    pcc_emitted e = {0};

    finish_opts = &o;
    if (options_runs(&o, 3)) st = check_output(options_output(a, &o));          // -o, before any work
    if (!st) st = policy_read(a, &o);                                           // --policy: its mesh onto the options
    if (!st) st = model_load(a, o.model, &g);                                   // the front end
    if (!st) st = options_apply_model(&o, g);                                   // --bf16, Megatron-LM's layer counts
    if (!st) st = batch_apply(g, &o.batch);                                     // --global-batch and the like
    if (!st) st = coshard_apply(g, &o);                                         // --coshard, policy "coshard"
    if (!st) st = graph_check(g);
    if (!st) st = autodiff(g);                                                  // backward pass, optimizer step
    if (!st) st = graph_check(g);
    if (!st) st = policy_resolve(&o, g);                                        // --policy: its rules onto the operators
    if (!st && o.cluster) st = cluster_load(a, o.cluster, o.nodes, o.devices, &c);
    if (!st && c) cluster_set_tf32(c, o.tf32);
    if (!st && o.check) report_print_cluster(stdout, g, c, &o.report);          // --check: the model's figures
    if (!st && c && options_runs(&o, 2)) st = state_fits(g, c);                // hopeless before any search
    if (!st && o.burst) st = compile_burst(a, g, c, &o);                        // DeepPool's burst parallelism
    if (!st && driver_searches_micro_batches(&o)) st = driver_micro_batches(a, &o, c, &g);
    if (st || o.burst || !options_runs(&o, 1)) return finish(a, &e, st);
    double t0 = clock_s();
    int *sizes = search_group_sizes(g, c, &o.search, &n_sizes);                 // phase 2's tp groups
    pcc_transforms *t = transform_all(g, sizes, n_sizes, o.search.tq);          // phase 1
    if (options_dump(&o, 't')) transform_dump(stdout, g, t);
    if (options_runs(&o, 2)) st = search(g, c, t, &o.search, &cand, &n);        // phase 2
    if (!st && options_dump(&o, 's')) ilp_dump(stdout, g, cand[0]->intra);
    if (st || !options_runs(&o, 2) || (!options_runs(&o, 3) && !o.estimate_only)) return finish(a, &e, st);
    options_emit(a, c, &o, &eo);
    driver_fit_init(&fit, g, c, t, &o, cand, n);
    while (!st && (s = driver_fit_next(&fit, &st))) {                           // best first, until one fits
        st = phase3(g, c, s, &o, fit.next < fit.n, &pr);                        // phase 3
        if (st == PCC_ERR_INPUT && o.search.auto_mesh && fit.next < fit.n) {
            st = PCC_OK;                                                        // a limit: the next candidate
            continue;
        }
        if (st == PCC_ERR_INPUT && o.search.auto_mesh) {                        // the last one said why
            fprintf(stderr, "plancc: --auto: every plan it ranked for %d devices meets that limit: use fewer devices "
                            "(--devices, --nodes) or a larger batch (--global-batch)\n", c->n_devices);
            st = PCC_ERR_INFEASIBLE;
            break;
        }
        if (!st) estimate_runs(g, c, fit.cand[fit.next - 1], pr);               // phase 3's buckets in the estimate
        if (!st) memplan(pr);                                                   // the memory planner
        if (!st) emit_plan(g, c, pr, &eo, &e);                                  // the plan
        if (!st && !o.estimate_only) st = check_plan(&e);                       // the verifier
        if (driver_fit_done(&fit, &st, &e)) break;
    }
    if (coshard_next(a, op, &o, c, g, &fit, &st)) {                           // --auto's co-shard: compile again
        op->coshard_pick->seconds += clock_s() - t0 + o.mb_search_s;
        return finish(a, &e, st);
    }
    if (o.estimate_only) {                                                      // --estimate-only: the fit, no file
        if (!st) report_estimate(stdout, g, c, &o, fit.cand[fit.which], e.peak_bytes, fit.n, clock_s() - t0 + o.mb_search_s);
        return finish(a, &e, st);
    }
    const char *out = options_output(a, &o);
    if (!st) st = write_plan(e.p, out);
    if (!st) report_compile(stdout, g, c, &o, fit.cand, fit.n, fit.which, &e, out, clock_s() - t0 + o.mb_search_s);
    return finish(a, &e, st);
}

// "a:k,b:k" from "a,b", in arena a.
static const char *coshard_spec(pcc_arena *a, const char *names, int k) {
    const char *s = "";
    char *copy = arena_printf(a, "%s", names), *save = NULL;
    for (char *n = strtok_r(copy, ",", &save); n; n = strtok_r(NULL, ",", &save))
        s = arena_printf(a, "%s%s%s:%d", s, *s ? "," : "", n, k);
    return s;
}

int main(int argc, char **argv) {
    pcc_options o;
    bool done;
    pcc_status st = options_parse(argc, argv, &o, &done);
    if (st || done) return st;
    pcc_options again = o;
    st = compile(&o);
    pcc_coshard_pick *pk = o.coshard_pick;
    if (!st && pk) { // --auto's co-shard round found a faster plan: it is the compile
        pcc_options x = again;
        x.coshard = pk->spec, x.search.pick = &pk->config, x.batch = pk->batch, x.coshard_over_s = pk->over_s;
        x.mb_searched = o.mb_searched, x.mb_search_s = pk->seconds; // the summary's counts and time are the whole search's
        if (!o.quiet) fprintf(stderr, "plancc: --auto: co-shard (--coshard %s) is faster than the best plan without it: "
                                      "estimated step %.4g s, not %.4g s\n",
                              pk->spec, pk->est_s, pk->over_s);
        st = compile(&x);
        free(pk->spec), free(pk);
        return st;
    }
    if (st != PCC_ERR_INFEASIBLE || !o.coshard_retry) return st;
    // Nothing fit under --auto, recompute and ZeRO-3 included: co-shard the operators that make the
    // largest outputs (the LM head and its loss, an MLP's 4h activation) 4, 8, then 16 ways, and
    // compile again each time until one fits. A count they cannot take (exit 2) ends it: exit 3.
    pcc_arena *a = arena_init();
    for (int k = 4; k <= 16; k *= 2) {
        pcc_options x = again;
        x.coshard = coshard_spec(a, o.coshard_retry, k);
        if (!o.quiet) fprintf(stderr, "plancc: --auto: trying co-shard: --coshard %s\n", x.coshard);
        pcc_status r = compile(&x);
        free(x.coshard_retry);
        if (r != PCC_ERR_INFEASIBLE) {
            st = r == PCC_ERR_INPUT ? st : r;
            break;
        }
    }
    arena_free(a);
    free(o.coshard_retry);
    return st;
}
