/*
 * unit_sched.c: phase 2's ILP (ilp.c). The solver's choice is checked against ilp_eval, which
 * costs a choice directly (no solver): the objective must equal the evaluation of the choice, no
 * sampled feasible choice may beat it, the memory limit must hold, an impossible limit must be
 * reported as infeasible, the same problem must give the same choice, and --dump-ilp must
 * write an LP file.
 */
#include "plancc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static const char *root;

static pcc_graph *load(pcc_arena *a, const char *model) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", root, model);
    pcc_graph *g = NULL;
    if (model_load(a, path, &g) || autodiff(g)) return NULL;
    return g;
}

static pcc_cluster *cluster(pcc_arena *a, int devices) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/clusters/dgx-a100.json", root);
    pcc_cluster *c = NULL;
    return cluster_load(a, path, 0, devices, &c) ? NULL : c;
}

static void check_model(pcc_arena *a, const char *model, int devices, bool followers) {
    pcc_graph *g = load(a, model);
    pcc_cluster *c = cluster(a, devices);
    EXPECT(g && c);
    if (!g || !c) return;
    pcc_transform *t = transform(g, devices, 1);
    pcc_intra_opts o = {.group = {devices, 1}, .memory_bytes = c->memory_bytes, .ilp = {.time_limit_s = 30, .mip_gap = 0},
                        .follow_above_cols = followers ? 1 : 0};
    pcc_intra *s;
    EXPECT(ilp_intra(g, c, t, &o, &s) == PCC_OK);
    if (!s) return;
    EXPECT(s->ilp.status == PCC_MIP_OPTIMAL);
    double mem, eval = ilp_eval(g, c, t, &o, s->choice, &mem);
    EXPECT(fabs(eval - s->ilp.objective) <= 1e-6 * eval);
    EXPECT(mem <= o.memory_bytes * (1 + 1e-9));
    // Followers take their leader's mapped candidate, and each follows an element-wise op.
    int n_follow = 0;
    for (int i = 0; i < t->n_ops; i++) {
        EXPECT(s->leader[s->leader[i]] == s->leader[i] && s->leader[i] <= i);
        if (s->leader[i] != i) {
            n_follow++;
            EXPECT(pcc_ops[g->ops[i].kind].flags & PCC_OPF_ELEMENTWISE);
        }
    }
    EXPECT(followers ? n_follow > 0 : n_follow == 0); // small programs have none unless asked
    // No sampled choice does better, in the space the followers leave: random leader choices.
    int *choice = arena_alloc(g->arena, sizeof(int) * (size_t)t->n_ops), *lead = arena_alloc(g->arena, sizeof(int) * (size_t)t->n_ops);
    srand(7);
    int beaten = 0, tried = 0;
    for (int trial = 0; trial < 300; trial++) {
        for (int i = 0; i < t->n_ops; i++)
            if (s->leader[i] == i) lead[i] = trial == 0 ? 0 : rand() % t->ops[i].n; // trial 0: all candidate 0
        for (int i = 0; i < t->n_ops; i++) choice[i] = s->follow[i][lead[s->leader[i]]];
        double m, v = ilp_eval(g, c, t, &o, choice, &m);
        if (v < 0 || m > o.memory_bytes) continue;
        tried++;
        beaten += v < s->ilp.objective * (1 - 1e-9);
    }
    EXPECT(tried > 0 && beaten == 0);
    printf("%s on %d devices: %d ops, %d follow a producer; %d sampled choices, none better\n", model, devices, t->n_ops, n_follow, tried);
    // The same problem, the same choice.
    pcc_intra *s2;
    EXPECT(ilp_intra(g, c, t, &o, &s2) == PCC_OK && memcmp(s->choice, s2->choice, sizeof(int) * (size_t)t->n_ops) == 0);
}

// Followers restrict the choice: the program without them (a superset of choices) is never worse.
static void check_followers(pcc_arena *a, const char *model, int devices) {
    pcc_graph *g = load(a, model);
    pcc_cluster *c = cluster(a, devices);
    if (!g || !c) return;
    pcc_transform *t = transform(g, devices, 1);
    pcc_intra_opts o = {.group = {devices, 1}, .memory_bytes = c->memory_bytes, .ilp = {.time_limit_s = 30, .mip_gap = 0}};
    pcc_intra *full, *fol;
    EXPECT(ilp_intra(g, c, t, &o, &full) == PCC_OK);
    o.follow_above_cols = 1;
    EXPECT(ilp_intra(g, c, t, &o, &fol) == PCC_OK);
    if (full && fol) EXPECT(full->ilp.objective <= fol->ilp.objective * (1 + 1e-9));
}

static void check_limits(pcc_arena *a) {
    pcc_graph *g = load(a, "gpt-tiny.json");
    pcc_cluster *c = cluster(a, 4);
    if (!g || !c) return;
    pcc_transform *t = transform(g, 4, 1);
    pcc_intra_opts o = {.group = {4, 1}, .memory_bytes = c->memory_bytes, .ilp = {.time_limit_s = 30, .mip_gap = 0}};
    pcc_intra *loose, *tight, *none;
    EXPECT(ilp_intra(g, c, t, &o, &loose) == PCC_OK);
    // Just below what the unconstrained choice uses: the solver must find another that fits.
    o.memory_bytes = loose->memory_bytes * 0.9;
    EXPECT(ilp_intra(g, c, t, &o, &tight) == PCC_OK);
    EXPECT(tight && tight->memory_bytes <= o.memory_bytes * (1 + 1e-9) && tight->ilp.objective >= loose->ilp.objective);
    // Nothing fits in a kilobyte: infeasible, exit code 3's status.
    o.memory_bytes = 1024;
    fprintf(stderr, "(an expected 'does not fit' follows)\n");
    EXPECT(ilp_intra(g, c, t, &o, &none) == PCC_ERR_INFEASIBLE);
    // --dump-ilp writes CPLEX LP text.
    o.memory_bytes = c->memory_bytes;
    o.ilp.dump_lp = "/tmp/plancc-unit-sched.lp";
    EXPECT(ilp_intra(g, c, t, &o, &loose) == PCC_OK);
    FILE *f = fopen(o.ilp.dump_lp, "r");
    static char buf[1 << 20];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0; // the whole file
    buf[n] = 0;
    if (f) fclose(f);
    remove(o.ilp.dump_lp);
    EXPECT(strstr(buf, "Minimize") && strstr(buf, "Subject To"));
    // Bad solver parameters are refused before GLPK sees them.
    o.ilp.dump_lp = NULL;
    o.ilp.time_limit_s = -1;
    fprintf(stderr, "(an expected 'bad ILP parameters' follows)\n");
    EXPECT(ilp_intra(g, c, t, &o, &none) == PCC_ERR_INPUT);
}

int main(int argc, char **argv) {
    root = argc > 1 ? argv[1] : ".";
    pcc_arena *a = arena_init();
    for (int f = 0; f < 2; f++) {
        check_model(a, "mlp.json", 4, f);
        check_model(a, "gpt-tiny.json", 8, f);
        check_model(a, "cnn-small.json", 4, f);
        check_model(a, "dlrm.json", 8, f);
    }
    check_followers(a, "gpt-tiny.json", 8);
    check_followers(a, "dlrm.json", 8);
    check_limits(a);
    arena_free(a);
    return test_summary();
}
