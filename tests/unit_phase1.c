/*
 * unit_phase1.c: phase 1 (transform) candidates read off the annotations, and the cost model's
 * roofline and ring formulas against hand-computed values.
 */
#include "plancc.h"

#include <math.h>
#include <string.h>

#include "test.h"
#define NEAR(a, b) (fabs((a) - (b)) <= 1e-9 * fabs(b) + 1e-15)

static const char *root;

static pcc_graph *load(pcc_arena *a, const char *model) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", root, model);
    pcc_graph *g = NULL;
    if (model_load(a, path, &g) || autodiff(g) || graph_check(g)) return NULL;
    return g;
}

// The candidates of the forward op whose first output is named `out`.
static const pcc_op_cands *cands_of(const pcc_graph *g, const pcc_transform *t, const char *out) {
    for (int i = 0; i < t->n_ops; i++)
        if (strcmp(g->tensors[g->ops[t->ops[i].op].out[0]].name, out) == 0) return &t->ops[i];
    return NULL;
}

static const pcc_cand *cand(const pcc_graph *g, const pcc_op_cands *oc, const char *dim, bool recompute) {
    for (int k = 0; k < oc->n; k++) {
        const pcc_cand *c = &oc->c[k];
        if (c->recompute != recompute) continue;
        if (!dim && c->dim < 0) return c;
        if (dim && c->dim >= 0 && strcmp(g->dims[c->dim].name, dim) == 0) return c;
    }
    return NULL;
}

static const pcc_cand *cand_letter(const pcc_op_cands *oc, const char *letter) {
    for (int k = 0; k < oc->n; k++)
        if (!oc->c[k].recompute && strcmp(oc->c[k].letter, letter) == 0) return &oc->c[k];
    return NULL;
}

static bool layout_is(const pcc_layout *l, int r, int v, const int *d, int rank) {
    if (l->r != r || l->v != v) return false;
    for (int i = 0; i < rank; i++)
        if (l->d[i] != d[i]) return false;
    return true;
}

static void test_linear(const pcc_graph *g, const pcc_transform *t) {
    // q = linear(a [B,S,H], w [H,H], b [H]) on 4 devices.
    const pcc_op_cands *oc = cands_of(g, t, "q");
    EXPECT(oc != NULL);
    if (!oc) return;
    const pcc_op *op = &g->ops[oc->op];
    double w_bytes = tensor_bytes(g, &g->tensors[op->in[1]]) + tensor_bytes(g, &g->tensors[op->in[2]]);
    const pcc_cand *col = cand_letter(oc, "n"), *row = cand_letter(oc, "k"), *batch = cand_letter(oc, "b.0");
    const pcc_cand *rep = cand(g, oc, NULL, false);
    EXPECT(col && row && batch && rep);
    if (!col || !row || !batch || !rep) return;
    // Column parallel: weight rows, bias and output features split; input replicated.
    EXPECT(layout_is(&col->in[0], 4, 1, (int[]){1, 1, 1}, 3));
    EXPECT(layout_is(&col->in[1], 1, 1, (int[]){4, 1}, 2));
    EXPECT(layout_is(&col->in[2], 1, 1, (int[]){4}, 1));
    EXPECT(layout_is(&col->out[0], 1, 1, (int[]){1, 1, 4}, 3));
    EXPECT(NEAR(col->param_bytes, w_bytes / 4));
    // Row parallel (the contraction): input and weight columns split, output partial sums.
    EXPECT(layout_is(&row->in[0], 1, 1, (int[]){1, 1, 4}, 3));
    EXPECT(layout_is(&row->in[1], 1, 1, (int[]){1, 4}, 2));
    EXPECT(layout_is(&row->out[0], 1, 4, (int[]){1, 1, 1}, 3));
    // Data parallel: batch split, weights whole.
    EXPECT(layout_is(&batch->out[0], 1, 1, (int[]){4, 1, 1}, 3));
    EXPECT(NEAR(batch->param_bytes, w_bytes));
    // Every split divides the work; replication does not.
    EXPECT(NEAR(col->flops * 4, rep->flops) && NEAR(batch->flops * 4, rep->flops));
}

static void test_unsplittable(const pcc_graph *g, const pcc_transform *t) {
    // layernorm's normalized dim (h^) and attention's sequence and head size (s^, d^) never split.
    const pcc_op_cands *ln = cands_of(g, t, "a"), *at = cands_of(g, t, "o4");
    EXPECT(ln && at);
    if (!ln || !at) return;
    EXPECT(cand(g, ln, "H", false) == NULL && cand(g, ln, "B", false) != NULL);
    EXPECT(cand(g, at, "S", false) == NULL && cand(g, at, "D", false) == NULL);
    EXPECT(cand(g, at, "N", false) != NULL && cand(g, at, "B", false) != NULL);
    // Recompute twins exist for ops that keep activations and drop them.
    const pcc_cand *k = cand(g, ln, "B", false), *kr = cand(g, ln, "B", true);
    EXPECT(k && kr && kr->act_bytes == 0 && kr->flops > k->flops);
}

static void test_reshape_embedding(const pcc_graph *g, const pcc_transform *t) {
    // q4 = reshape(q [B,S,H] -> [B,S,N,D]): splitting H splits N, the major axis of its group.
    const pcc_op_cands *rs = cands_of(g, t, "q4");
    EXPECT(rs != NULL);
    const pcc_cand *c = rs ? cand(g, rs, "H", false) : NULL;
    EXPECT(c && layout_is(&c->in[0], 1, 1, (int[]){1, 1, 4}, 3) && layout_is(&c->out[0], 1, 1, (int[]){1, 1, 4, 1}, 4));
    // The vocabulary split of an embedding (Megatron's vocab-parallel embedding) leaves partial sums.
    const pcc_op_cands *em = cands_of(g, t, "tok_emb");
    const pcc_cand *v = em ? cand(g, em, "V", false) : NULL;
    EXPECT(v && v->out[0].v == 4 && v->in[0].r == 4);
}

static void test_one_device(const pcc_graph *g) {
    pcc_transform *t = transform(g, 1, 1);
    double sum = 0;
    pcc_totals tot;
    graph_totals(g, &tot);
    bool only_trivial = true;
    for (int i = 0; i < t->n_ops; i++) {
        const pcc_op_cands *oc = &t->ops[i];
        for (int k = 0; k < oc->n; k++) only_trivial &= oc->c[k].dim < 0 && oc->c[k].in[0].r == 1;
        const pcc_cand *c = cand(g, oc, NULL, false);
        sum += c->flops * (double)op_copies(g, &g->ops[oc->op]);
    }
    EXPECT(only_trivial);
    // The forward ops' own costs plus their backward ops account for nearly all of fwd + bwd
    // (what is left is the gradient-sum adds and the loss seed, which belong to no forward op).
    EXPECT(sum <= tot.flops_fwd + tot.flops_bwd && sum > 0.99 * (tot.flops_fwd + tot.flops_bwd));
}

static void test_cost(void) {
    pcc_cluster c = {.nodes = 2, .devices_per_node = 8, .n_devices = 16, .memory_bandwidth_Bps = 2e12,
                     .peak_flops = {19.5e12, 156e12, 312e12, 312e12}, .launch_overhead_s = 5e-6,
                     .intra = {PCC_LINK_NVLINK, 300e9, 1e-6}, .network = {PCC_LINK_INFINIBAND, 25e9, 3e-6}, .nics_per_node = 8};
    double S = 1e9;
    // Inside a node: ring all-reduce 2(n-1) alpha + 2(n-1)/n S/B.
    EXPECT(NEAR(cost_collective_s(&c, PCC_COLL_ALL_REDUCE, S, (pcc_group_shape){8, 1}), 14 * 1e-6 + 2 * 7.0 / 8 * S / 300e9));
    EXPECT(NEAR(cost_collective_s(&c, PCC_COLL_ALL_GATHER, S, (pcc_group_shape){4, 1}), 3 * 1e-6 + 3.0 / 4 * S / 300e9));
    EXPECT(cost_collective_s(&c, PCC_COLL_ALL_REDUCE, S, (pcc_group_shape){1, 1}) == 0);
    // Both nodes, full nodes: all 8 NICs (200 GB/s); one member per node: one NIC's worth.
    EXPECT(!cost_group_crosses_nodes(&c, (pcc_group_shape){8, 1}) && cost_group_crosses_nodes(&c, (pcc_group_shape){16, 1}));
    EXPECT(NEAR(cost_group_bandwidth(&c, (pcc_group_shape){16, 1}), 200e9));
    EXPECT(NEAR(cost_group_bandwidth(&c, (pcc_group_shape){2, 8}), 25e9));
    EXPECT(NEAR(cost_collective_s(&c, PCC_COLL_SEND_RECV, S, (pcc_group_shape){2, 8}), 3e-6 + S / 25e9));
    // Roofline: a big bf16 matmul is compute bound at the tensor-core peak; a copy is memory bound.
    EXPECT(NEAR(cost_compute_s(&c, 312e12, 1e6, PCC_BF16, true), 1 + 5e-6));
    EXPECT(NEAR(cost_compute_s(&c, 1e6, 2e12, PCC_F32, false), 1 + 5e-6));
}

static pcc_layout L(int r, int v, int d0, int d1, int d2) {
    pcc_layout l = {.r = r, .v = v};
    for (int i = 0; i < PCC_MAX_RANK; i++) l.d[i] = 1;
    l.d[0] = d0, l.d[1] = d1, l.d[2] = d2;
    return l;
}

static void test_rvd(const pcc_graph *g) {
    pcc_cluster c = {.nodes = 1, .devices_per_node = 8, .n_devices = 8, .memory_bandwidth_Bps = 2e12,
                     .peak_flops = {19.5e12, 156e12, 312e12, 312e12}, .intra = {PCC_LINK_NVLINK, 300e9, 1e-6},
                     .network = {PCC_LINK_NONE, 0, 0}};
    const pcc_tensor *t = NULL; // an activation [B,S,H] of gpt-tiny (B=4, S=32, H=64)
    for (int i = 0; i < g->n_tensors && !t; i++)
        if (strcmp(g->tensors[i].name, "h_in") == 0) t = &g->tensors[i];
    EXPECT(t && t->rank == 3);
    if (!t) return;
    double T = tensor_bytes(g, t);
    pcc_group_shape grp = {4, 1};
    pcc_reshard p;
    pcc_layout part = L(1, 4, 1, 1, 1), rep = L(4, 1, 1, 1, 1), hsplit = L(1, 1, 1, 1, 4), bsplit = L(1, 1, 4, 1, 1);
    // Partial sums to replicated: one all-reduce of the whole tensor.
    double s1 = reshard_rvd(&c, g, t, &part, &rep, grp, &p);
    EXPECT(p.n_steps == 1 && p.step[0].kind == PCC_STEP_ALL_REDUCE && p.step[0].k == 4 && NEAR(p.step[0].bytes, T));
    EXPECT(NEAR(s1, cost_collective_s(&c, PCC_COLL_ALL_REDUCE, T, grp) + cost_launch_s(&c)));
    EXPECT(NEAR(reshard_rvd(&c, g, t, &part, &rep, grp, NULL), s1));
    // Partial sums to split: one reduce-scatter (Megatron's sequence-parallel step).
    reshard_rvd(&c, g, t, &part, &hsplit, grp, &p);
    EXPECT(p.n_steps == 1 && p.step[0].kind == PCC_STEP_REDUCE_SCATTER && p.step[0].dim == 2);
    // Split to replicated: one all-gather ending with the whole tensor.
    reshard_rvd(&c, g, t, &bsplit, &rep, grp, &p);
    EXPECT(p.n_steps == 1 && p.step[0].kind == PCC_STEP_ALL_GATHER && NEAR(p.step[0].bytes, T));
    // Replicated to split: a local slice, free.
    EXPECT(reshard_rvd(&c, g, t, &rep, &hsplit, grp, &p) == 0 && p.n_steps == 1 && p.step[0].kind == PCC_STEP_SLICE);
    // One split to another: an all-to-all, cheaper than gathering and slicing.
    reshard_rvd(&c, g, t, &bsplit, &hsplit, grp, &p);
    EXPECT(p.n_steps == 1 && p.step[0].kind == PCC_STEP_ALL_TO_ALL && p.step[0].dim == 0 && p.step[0].dim_to == 2);
    // Equal layouts: nothing to do. A split that does not divide the dimension: no chain.
    EXPECT(reshard_rvd(&c, g, t, &hsplit, &hsplit, grp, &p) == 0 && p.n_steps == 0);
    pcc_group_shape g3 = {3, 1};
    pcc_layout rep3 = L(3, 1, 1, 1, 1), h3 = L(1, 1, 1, 1, 3); // 64 is not divisible by 3
    EXPECT(reshard_rvd(&c, g, t, &rep3, &h3, g3, NULL) < 0);
    // B and H split two ways each on 4 devices is no chain's end: every step moves the group's
    // whole factor, as phase 3 emits it (one collective over the group's mesh axis).
    pcc_layout bh = L(1, 1, 2, 1, 2);
    EXPECT(reshard_rvd(&c, g, t, &part, &bh, grp, &p) < 0);
    // 16 devices on two nodes: S split to H split is one 16-way all-to-all, costed on the whole
    // group (across nodes), not as 4 ways then 4 more on the node's links.
    pcc_cluster c2 = c;
    c2.nodes = 2, c2.n_devices = 16, c2.nics_per_node = 8;
    c2.network = (pcc_link){.kind = PCC_LINK_INFINIBAND, .bandwidth_Bps = 25e9, .latency_s = 3e-6};
    pcc_group_shape g16 = {16, 1};
    pcc_layout s16 = L(1, 1, 1, 16, 1), h16 = L(1, 1, 1, 1, 16);
    double s2 = reshard_rvd(&c2, g, t, &s16, &h16, g16, &p);
    EXPECT(p.n_steps == 1 && p.step[0].kind == PCC_STEP_ALL_TO_ALL && p.step[0].k == 16);
    EXPECT(NEAR(s2, cost_collective_s(&c2, PCC_COLL_ALL_TO_ALL, T / 16, g16) + cost_launch_s(&c2)));
    char buf[64];
    EXPECT(strcmp(layout_str(&bh, 3, buf, sizeof buf), "R1V1D(2,1,2)") == 0);
}

int main(int argc, char **argv) {
    root = argc > 1 ? argv[1] : ".";
    pcc_arena *a = arena_init();
    pcc_graph *g = load(a, "gpt-tiny.json");
    EXPECT(g != NULL);
    if (g) {
        pcc_transform *t = transform(g, 4, 1);
        test_linear(g, t);
        test_unsplittable(g, t);
        test_reshape_embedding(g, t);
        test_one_device(g);
        test_rvd(g);
    }
    // Every model's candidates come out (no assert on any operator kind).
    static const char *const models[] = {"mlp.json", "cnn-small.json", "dlrm.json", "swin-tiny.json", "vgg16.json", "gpt2-small.json"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        pcc_graph *m = load(a, models[i]);
        EXPECT(m != NULL);
        if (m) EXPECT(transform(m, 8, 1)->n_ops == m->n_fwd_ops);
    }
    test_cost();
    arena_free(a);
    return test_summary();
}
