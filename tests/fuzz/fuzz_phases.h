/*
 * fuzz_phases.h: what fuzz_compile.c and fuzz_policy.c share: a graph through the front end
 * compiled as main.c's compile does after it: phase 1, phase 2 (the search), then the fit of
 * its ranked strategies through phase 3, the memory planner, the emitter and plan_check (a
 * candidate phase 3 cannot make goes to the next under --auto, as main.c does). A plan the
 * compiler emits must pass plan_check: an abort here is a compiler bug.
 */
#ifndef FUZZ_PHASES_H
#define FUZZ_PHASES_H

#include "plancc.h"

#include <stdlib.h>

static pcc_status fuzz_phases(pcc_arena *a, pcc_options *o, pcc_graph *g, pcc_cluster *c) {
    int *sizes, n_sizes, n = 0;
    pcc_strategy **cand = NULL;
    const pcc_strategy *s;
    pcc_fit fit;
    pcc_emit_opts eo;
    pcc_programs *pr;
    pcc_emitted e = {0};
    sizes = search_group_sizes(g, c, &o->search, &n_sizes);
    pcc_transforms *t = transform_all(g, sizes, n_sizes, o->search.tq);
    pcc_status st = search(g, c, t, &o->search, &cand, &n);
    if (st) return st;
    options_emit(a, c, o, &eo);
    driver_fit_init(&fit, g, c, t, o, cand, n);
    while (!st && (s = driver_fit_next(&fit, &st))) {
        st = preserve(g, c, s, &o->preserve, &pr);
        if (st == PCC_ERR_INPUT && o->search.auto_mesh && fit.next < fit.n) { // a limit of phase 3's: the next candidate
            st = PCC_OK;
            continue;
        }
        if (!st) memplan(pr);
        if (!st) emit_plan(g, c, pr, &eo, &e);
        if (!st && check_plan(&e)) abort(); // the compiler emitted a plan its verifier refuses, or one that deadlocks
        if (driver_fit_done(&fit, &st, &e)) break;
    }
    emitted_free(&e);
    return st;
}

#endif
