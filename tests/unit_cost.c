/*
 * unit_cost.c: unit tests of the cost model (cost.c) beyond the formulas unit_phase1.c pins:
 * the GEMM efficiency (tile and wave quantization, main-loop depth), per-device operator costs,
 * NCCL's tree against its ring, bucketed gradients' shares, stream overlap, pipelines, and the profile table (loading it
 * from a cluster file and its lookups overriding the roofline). The source root is argv[1].
 */
#include "plancc.h"
#include "pipeline.h"

#include <math.h>
#include <string.h>

#include "test.h"

static const char *root;

#define NEAR(a, b) (fabs((double)(a) - (double)(b)) <= 1e-9 * fabs((double)(b)) + 1e-15)

// An A100-like cluster with the wave model on.
static pcc_cluster a100(void) {
    return (pcc_cluster){.nodes = 2, .devices_per_node = 8, .n_devices = 16, .memory_bandwidth_Bps = 2e12,
                         .peak_flops = {19.5e12, 156e12, 312e12, 312e12}, .launch_overhead_s = 5e-6, .sm_count = 108,
                         .gemm_efficiency = 0.8, .memory_efficiency = 0.5,
                         .intra = {PCC_LINK_NVLINK, 300e9, 1e-6, 0.75}, .network = {PCC_LINK_INFINIBAND, 25e9, 3e-6, 0.9},
                         .nics_per_node = 8};
}

static void test_gemm_efficiency(void) {
    pcc_cluster c = a100();
    // Without a wave model: the sustained figure alone; without that either: 1.
    pcc_cluster flat = c;
    flat.sm_count = 0;
    EXPECT(cost_gemm_efficiency(&flat, 1, 100, 100, 100) == 0.8);
    flat.gemm_efficiency = 0;
    EXPECT(cost_gemm_efficiency(&flat, 1, 100, 100, 100) == 1);
    // A large GEMM: full tiles, nearly full waves, a deep main loop.
    double big = cost_gemm_efficiency(&c, 1, 8192, 8192, 8192);
    EXPECT(big <= 0.8 && big > 0.8 * 0.98 * 8192 / (8192 + 64));
    // Wave quantization: 108 tiles of 128 x 128 fill one wave; one tile more idles most of a second.
    EXPECT(cost_gemm_efficiency(&c, 1, 128 * 108, 128, 4096) > 1.3 * cost_gemm_efficiency(&c, 1, 128 * 109, 128, 4096));
    // Tile quantization: n = 96 pads to a 128-wide tile; a short k pays the tile's fixed cost.
    EXPECT(cost_gemm_efficiency(&c, 1, 8192, 96, 4096) < cost_gemm_efficiency(&c, 1, 8192, 128, 4096));
    EXPECT(cost_gemm_efficiency(&c, 64, 2048, 2048, 96) < 0.8 * 0.61);
    // Batching fills waves as rows do.
    EXPECT(NEAR(cost_gemm_efficiency(&c, 4, 1024, 1024, 1024), cost_gemm_efficiency(&c, 1, 4096, 1024, 1024)));
    // Split-K: a grid of 9 tiles (a convolution's weight gradient, 64 x 576) with a k of 6.4 M
    // runs its k loop on the idle SMs, nearly as well as a full grid; a short k cannot split.
    double wgrad = cost_gemm_efficiency(&c, 1, 64, 576, 6.4e6);
    EXPECT(wgrad > 0.5 * 0.8 && wgrad <= 0.8);
    EXPECT(cost_gemm_efficiency(&c, 1, 64, 576, 256) < 0.1 * 0.8);
}

// The cluster's own tiles (gemm_tiles): the same set as the built-in one gives the same figures;
// one large tile alone pads a thin GEMM (n = 64 in a 128-wide tile: half the work wasted), and a
// slower tile alone slows a large one by its rate.
static void test_gemm_tiles(pcc_arena *a) {
    pcc_cluster *f, c = a100();
    EXPECT(cluster_load(a, arena_printf(a, "%s/models/clusters/dgx-a100.json", root), 0, 0, &f) == PCC_OK);
    if (!f) return;
    EXPECT(f->n_tiles == 6 && f->tiles[5].m == 64 && f->tiles[5].rate == 0.74);
    c.gemm_efficiency = f->gemm_efficiency;
    double shapes[][4] = {{1, 8192, 8192, 8192}, {1, 8192, 96, 4096}, {64, 2048, 2048, 96}, {1, 128 * 109, 128, 4096}, {1, 64, 576, 6.4e6}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        EXPECT(NEAR(cost_gemm_efficiency(f, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]),
                    cost_gemm_efficiency(&c, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3])));
    pcc_cluster big = c;
    big.n_tiles = 1, big.tiles[0].m = 256, big.tiles[0].n = 128, big.tiles[0].rate = 1;
    EXPECT(cost_gemm_efficiency(&big, 1, 131072, 64, 8192) < 0.55 * cost_gemm_efficiency(&c, 1, 131072, 64, 8192));
    EXPECT(NEAR(cost_gemm_efficiency(&big, 1, 256 * 27, 128 * 8, 8192), cost_gemm_efficiency(&c, 1, 256 * 27, 128 * 8, 8192)));
    pcc_cluster slow = c;
    slow.n_tiles = 1, slow.tiles[0].m = 128, slow.tiles[0].n = 128, slow.tiles[0].rate = 0.5;
    EXPECT(NEAR(cost_gemm_efficiency(&slow, 1, 128 * 108, 128 * 10, 8192), 0.5 * cost_gemm_efficiency(&c, 1, 128 * 108, 128 * 10, 8192)));
}

static void test_gemm_time(void) {
    pcc_cluster c = a100();
    // Compute bound: FLOPs at the efficiency, plus the launch.
    double t = cost_gemm_s(&c, PCC_BF16, 1, 8192, 8192, 8192, false);
    EXPECT(NEAR(t, 2.0 * 8192 * 8192 * 8192 / (312e12 * cost_gemm_efficiency(&c, 1, 8192, 8192, 8192)) + 5e-6));
    // Memory bound (k = 1: an outer product): the bytes at the sustained bandwidth.
    double bytes = 2.0 * (8192 + 8192 + 8192.0 * 8192);
    EXPECT(NEAR(cost_gemm_s(&c, PCC_BF16, 1, 8192, 8192, 1, false), bytes / 1e12 + 5e-6));
    // Accumulating into C reads it once more.
    EXPECT(NEAR(cost_gemm_s(&c, PCC_BF16, 1, 8192, 8192, 1, true), (bytes + 2.0 * 8192 * 8192) / 1e12 + 5e-6));
    EXPECT(NEAR(cost_memory_s(&c, 1e9), 1e9 / 1e12 + 5e-6));
    EXPECT(cost_gemm_s(&c, PCC_BF16, 1, 0, 5, 5, false) == cost_launch_s(&c));
}

static void test_collectives(void) {
    pcc_cluster c = a100();
    // Bus bandwidth: the line rate times the link's efficiency; one member per node: one NIC's share.
    EXPECT(NEAR(cost_group_bandwidth(&c, (pcc_group_shape){8, 1}), 225e9));
    EXPECT(NEAR(cost_group_bandwidth(&c, (pcc_group_shape){16, 1}), 180e9));
    EXPECT(NEAR(cost_group_bandwidth(&c, (pcc_group_shape){2, 8}), 22.5e9));
    // Inside a node: the ring.
    double S = 1e9;
    EXPECT(NEAR(cost_collective_s(&c, PCC_COLL_ALL_REDUCE, S, (pcc_group_shape){8, 1}), 14e-6 + 1.75 * S / 225e9));
    // Megatron-LM's sequence parallelism: a reduce-scatter onto the sequence and the all-gather
    // back cost what tp's all-reduce of the same activation costs (its communication volume).
    EXPECT(NEAR(cost_collective_s(&c, PCC_COLL_REDUCE_SCATTER, S, (pcc_group_shape){8, 1}) +
                    cost_collective_s(&c, PCC_COLL_ALL_GATHER, S, (pcc_group_shape){8, 1}),
                cost_collective_s(&c, PCC_COLL_ALL_REDUCE, S, (pcc_group_shape){8, 1})));
    // Across 64 nodes, one member each: a small all-reduce takes the tree (log2(64) network hops
    // each way), a large one the ring (2(n-1)/n of the data against the tree's 2).
    pcc_cluster big = c;
    big.nodes = 64, big.n_devices = 512;
    pcc_group_shape g = {64, 8};
    double tree = 2 * 6 * 3e-6 + 2 * 1e3 / 22.5e9, ring = 2 * 63 * 3e-6 + 2 * 63.0 / 64 * 1e3 / 22.5e9;
    EXPECT(tree < ring && NEAR(cost_collective_s(&big, PCC_COLL_ALL_REDUCE, 1e3, g), tree));
    EXPECT(NEAR(cost_collective_s(&big, PCC_COLL_ALL_REDUCE, 1e10, g), 2 * 63 * 3e-6 + 2 * 63.0 / 64 * 1e10 / 22.5e9));
}

// Bucketed gradients (preserve.c's --bucket-mb): each pays its share of its bucket's collective.
static void test_buckets(void) {
    pcc_cluster c = a100();
    pcc_group_shape g = {8, 1};
    double launch = cost_launch_s(&c), one = cost_collective_s(&c, PCC_COLL_ALL_REDUCE, 1e6, g) + launch;
    // Ten gradients of 100 kB that fit one bucket together: one collective of 1 MB in all.
    double sum = 0;
    for (int i = 0; i < 10; i++) sum += cost_bucketed_s(&c, PCC_COLL_ALL_REDUCE, 1e5, 1e6, 25e6, g);
    EXPECT(NEAR(sum, one));
    // The bucket is the smaller of the pool and the cap: 10 MB of them in buckets of 1 MB, ten collectives.
    EXPECT(NEAR(cost_bucketed_s(&c, PCC_COLL_ALL_REDUCE, 1e5, 1e7, 1e6, g), one / 10));
    // A gradient as large as the cap, or no buckets (cap 0): a collective of its own.
    double own = cost_collective_s(&c, PCC_COLL_ALL_REDUCE, 2e6, g) + launch;
    EXPECT(NEAR(cost_bucketed_s(&c, PCC_COLL_ALL_REDUCE, 2e6, 1e7, 1e6, g), own));
    EXPECT(NEAR(cost_bucketed_s(&c, PCC_COLL_ALL_REDUCE, 1e5, 1e7, 0, g), cost_collective_s(&c, PCC_COLL_ALL_REDUCE, 1e5, g) + launch));
    // Nothing to synchronize: a group of one, or no bytes.
    EXPECT(cost_bucketed_s(&c, PCC_COLL_ALL_REDUCE, 1e5, 1e6, 25e6, (pcc_group_shape){1, 1}) == 0);
    EXPECT(cost_bucketed_s(&c, PCC_COLL_ALL_REDUCE, 0, 1e6, 25e6, g) == 0);
    // Buckets save latency: the shares cost less than ten collectives of their own.
    EXPECT(sum < 10 * (cost_collective_s(&c, PCC_COLL_ALL_REDUCE, 1e5, g) + launch));
}

// With a message each way between neighbouring chunks, f seconds forward and b backward.
static double makespan_msg(int pp, int v, int m, pcc_pipe_sched sched, const pcc_chunk_times *c, double f, double b, double *done) {
    pcc_pipe_link l[64];
    int n = 0;
    for (int k = 0; k + 1 < pp * v; k++) l[n++] = (pcc_pipe_link){k, k + 1, false, f}, l[n++] = (pcc_pipe_link){k + 1, k, true, b};
    return pipeline_makespan(&(pcc_pipeline){.pp = pp, .V = v, .M = m, .schedule = sched}, c, l, n, done);
}

static double makespan(int pp, int v, int m, pcc_pipe_sched sched, const pcc_chunk_times *c, double *done) {
    return makespan_msg(pp, v, m, sched, c, 0, 0, done);
}

static void test_overlap_and_pipeline(void) {
    EXPECT(cost_exposed_s(1, 3) == 0 && cost_exposed_s(3, 1) == 2);
    pcc_chunk_times eq[12];
    for (int i = 0; i < 12; i++) eq[i] = (pcc_chunk_times){1, 2};
    // Equal stages, no messages: (m + p - 1) stage-times for 1F1B and GPipe, (m + (p-1)/v)
    // interleaved (chunks a third of a stage).
    EXPECT(NEAR(makespan(4, 1, 8, PCC_PIPE_1F1B, eq, NULL), (8 + 3) * 3.0));
    EXPECT(NEAR(makespan(4, 1, 8, PCC_PIPE_GPIPE, eq, NULL), (8 + 3) * 3.0));
    pcc_chunk_times third[12];
    for (int i = 0; i < 12; i++) third[i] = (pcc_chunk_times){1.0 / 3, 2.0 / 3};
    EXPECT(NEAR(makespan(4, 3, 8, PCC_PIPE_1F1B, third, NULL), (8 + 1) * 3.0));
    EXPECT(NEAR(makespan(1, 1, 5, PCC_PIPE_GPIPE, eq, NULL), 15));
    // The busiest stage first: the stages after it fill and drain while it works, so the step is
    // its m passes alone (m times the busiest plus the others once would be 166).
    pcc_chunk_times first[4] = {{10, 10}, {1, 1}, {1, 1}, {1, 1}};
    double done[4];
    EXPECT(NEAR(makespan(4, 1, 8, PCC_PIPE_1F1B, first, done), 160) && NEAR(done[0], 160) && done[3] < done[0]);
    // The busiest stage last: every stage before it fills and drains around it.
    pcc_chunk_times last[4] = {{1, 1}, {1, 1}, {1, 1}, {10, 10}};
    EXPECT(NEAR(makespan(4, 1, 8, PCC_PIPE_1F1B, last, NULL), 160 + 6));
    // A message each way between two stages: the forward one once per micro-batch on the way to
    // the last stage, the backward one on the way back; in the steady state a backward send and
    // the next forward receive are one group, so they overlap.
    double t2 = makespan_msg(2, 1, 4, PCC_PIPE_1F1B, eq, 0.5, 0.5, done);
    EXPECT(t2 > (4 + 1) * 3.0 && t2 <= (4 + 1) * 3.0 + 2 * 4 * 0.5 && NEAR(done[0], t2) && done[1] < t2);
}

// Every schedule shape the search can ask for, with random chunk times and messages: the walk
// ends (no device waits on itself), no device ends before its own work is done, the step is at
// least the busiest device's work and at most everything one after another.
static void test_makespan_shapes(void) {
    unsigned seed = 12345;
    int bad = 0, runs = 0;
    for (int pp = 2; pp <= 8; pp++)
        for (int V = 1; V <= 4; V++)
            for (int M = 1; M <= 24; M++) {
                if (V > 1 && M % pp) continue; // interleaving runs the micro-batches in groups of pp
                for (int sched = 0; sched < (V > 1 ? 1 : 2); sched++) {
                    int ns = pp * V;
                    pcc_chunk_times c[32];
                    pcc_pipe_link l[96];
                    double work[8] = {0}, all = 0, done[8];
                    int nl = 0;
                    for (int k = 0; k < ns; k++) {
                        double r[4];
                        for (int i = 0; i < 4; i++) seed = seed * 1103515245u + 12345u, r[i] = (seed >> 8 & 0xffff) / 65536.0;
                        c[k] = (pcc_chunk_times){0.1 + r[0], 0.1 + 2 * r[1]};
                        work[k % pp] += M * (c[k].fwd + c[k].bwd);
                        all += M * (c[k].fwd + c[k].bwd);
                        // a message to the next chunk and back, and every third chunk one to the chunk after that (a skip
                        // connection), whose gradient 1F1B passes back through the chunk between (layout.c's relayed)
                        for (int j = 1; j <= (k % 3 ? 1 : 2) && k + j < ns; j++) {
                            l[nl++] = (pcc_pipe_link){k, k + j, false, r[2] / 4};
                            for (int h = k + j; h > k; h -= V == 1 && !sched ? 1 : j) l[nl++] = (pcc_pipe_link){h, V == 1 && !sched ? h - 1 : k, true, r[3] / 4};
                            all += M * (r[2] + j * r[3]) / 4;
                        }
                    }
                    double t = pipeline_makespan(&(pcc_pipeline){.pp = pp, .V = V, .M = M, .schedule = sched ? PCC_PIPE_GPIPE : PCC_PIPE_1F1B}, c, l, nl, done), busiest = 0;
                    for (int d = 0; d < pp; d++) {
                        busiest = work[d] > busiest ? work[d] : busiest;
                        bad += done[d] < work[d] * (1 - 1e-12) || done[d] > t;
                    }
                    bad += t < busiest * (1 - 1e-12) || t > all * (1 + 1e-12);
                    runs++;
                }
            }
    EXPECT(bad == 0 && runs == 456);
}

// 1F1B with interlaced operators between the passes (pipeline.c's mid): every device meets their
// phase of each micro-batch together. pp 2, 2 micro-batches, forward 1 s, backward 2 s, the phase
// 1 s, no messages: stage 0 runs F0 | mid0 | F1 B0 | mid1 | B1, stage 1 F0 | mid0 | B0 F1 | mid1 |
// B1: both end at 8 s (6 s without the phases); with the neighbours' messages the walk still ends
// and each phase adds its second. And on 2 stages with any count of micro-batches the walk never
// stops short (pipeline.c asserts it reaches every unit).
static void test_makespan_mid(void) {
    pcc_chunk_times c[2] = {{1, 2}, {1, 2}};
    double done[2];
    pcc_pipeline p = {.pp = 2, .V = 1, .M = 2, .schedule = PCC_PIPE_1F1B, .mid = true, .mid_s = 1};
    EXPECT(pipeline_makespan(&p, c, NULL, 0, done) == 8 && done[0] == 8 && done[1] == 8);
    p.mid = false;
    EXPECT(pipeline_makespan(&p, c, NULL, 0, done) == 6);
    pcc_pipe_link l[2] = {{0, 1, false, 0.25}, {1, 0, true, 0.25}};
    for (int M = 1; M <= 9; M++) {
        pcc_pipeline q = {.pp = 2, .V = 1, .M = M, .schedule = PCC_PIPE_1F1B, .mid = true, .mid_s = 0.5};
        double with = pipeline_makespan(&q, c, l, 2, done);
        q.mid = false;
        double without = pipeline_makespan(&q, c, l, 2, done);
        EXPECT(with >= without + M * 0.5 - 1e-12 && with <= without + M * (0.5 + 3.5) + 1e-12);
    }
}

static const pcc_op *find_op(const pcc_graph *g, const char *out, pcc_op_kind k) {
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].kind == k && g->ops[i].nout && strcmp(g->tensors[g->ops[i].out[0]].name, out) == 0) return &g->ops[i];
    return NULL;
}

// Per-device costs of megatron-1t's operators (B 1, S 2048, H 25600, 160 heads of 160).
// Convolutions as cuDNN's implicit GEMMs: VGG-16's conv1_2 (64 -> 64 channels, 3 x 3, 224 x 224)
// forward is M = N Ho Wo, N = O, K = C kh kw; its weight gradient costs about the same (same
// FLOPs, split-K), not several times more.
static void test_conv(pcc_arena *a) {
    pcc_graph *g;
    EXPECT(model_load(a, arena_printf(a, "%s/models/vgg16.json", root), &g) == PCC_OK && autodiff(g) == PCC_OK);
    pcc_cluster c = a100();
    const pcc_op *f = find_op(g, "conv1_2", PCC_OP_CONV2D);
    EXPECT(f);
    if (!f) return;
    const pcc_op *w = NULL;
    for (int o = 0; o < g->n_ops && !w; o++)
        if (g->ops[o].kind == PCC_OP_CONV2D_GRAD_W && g->ops[o].out[0] == g->tensors[f->in[1]].grad) w = &g->ops[o];
    EXPECT(w);
    if (!w) return;
    double n = (double)g->dims[g->tensors[f->in[0]].dims[0]].size;
    double gemm = cost_gemm_s(&c, PCC_F32, 1, n * 224 * 224, 64, 64 * 9, false);
    EXPECT(cost_op_s(&c, g, f, NULL) >= gemm && cost_op_s(&c, g, f, NULL) < gemm + 64 * 4 * n * 224 * 224 / 1e12 + 1e-9);
    double tw = cost_op_s(&c, g, w, NULL), tf = cost_op_s(&c, g, f, NULL);
    EXPECT(tw < 1.5 * tf && tw > 0.5 * tf);
}

static void test_ops(pcc_arena *a) {
    pcc_graph *g;
    EXPECT(model_load(a, arena_printf(a, "%s/models/megatron-1t.json", root), &g) == PCC_OK && autodiff(g) == PCC_OK);
    pcc_cluster c = a100();
    const pcc_op *q = find_op(g, "q", PCC_OP_LINEAR), *att = find_op(g, "o4", PCC_OP_ATTENTION);
    EXPECT(q && att);
    if (!q || !att) return;
    // q = a Wq^T + bq: an m 2048 x n 25600 x k 25600 GEMM, and the bias's bytes in its epilogue.
    double bias = 2048.0 * 25600 * 2 / 1e12;
    EXPECT(NEAR(cost_op_s(&c, g, q, NULL), cost_gemm_s(&c, PCC_BF16, 1, 2048, 25600, 25600, false) + bias));
    // Column-parallel over 8: the weight's rows, the bias and the output's last axis split.
    int one[PCC_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1}, rows8[PCC_MAX_RANK] = {8, 1, 1, 1, 1, 1, 1, 1},
        last8[PCC_MAX_RANK] = {1, 1, 8, 1, 1, 1, 1, 1};
    const int *col[4] = {one, rows8, rows8, last8};
    EXPECT(NEAR(cost_op_s(&c, g, q, col), cost_gemm_s(&c, PCC_BF16, 1, 2048, 3200, 25600, false) + bias / 8));
    // Attention over 20 heads on a device: scores, softmax, weighted sum, unfused; Megatron-LM's
    // attention dropout 0.1 (the model's): a pass reading P, writing P' and a one-byte mask.
    int heads8[PCC_MAX_RANK] = {1, 1, 8, 1, 1, 1, 1, 1};
    const int *hd[4] = {heads8, heads8, heads8, heads8};
    double scores = 20.0 * 2048 * 2048 * 2, drop = cost_memory_s(&c, 20.0 * 2048 * 2048 * 5);
    EXPECT(att->attrs.p == 0.1);
    EXPECT(NEAR(cost_op_s(&c, g, att, hd), cost_gemm_s(&c, PCC_BF16, 20, 2048, 2048, 160, false) + cost_memory_s(&c, 2 * scores) + drop +
                                               cost_gemm_s(&c, PCC_BF16, 20, 2048, 160, 2048, false)));
    // Without it, one pass less forward and two less backward (P' formed again, dP' -> dP).
    const pcc_op *ag = NULL;
    for (int i = 0; i < g->n_ops && !ag; i++)
        if (g->ops[i].kind == PCC_OP_ATTENTION_GRAD && g->ops[i].fwd == (int)(att - g->ops)) ag = &g->ops[i];
    EXPECT(ag != NULL);
    if (!ag) return;
    pcc_op att0 = *att, ag0 = *ag;
    att0.attrs.p = ag0.attrs.p = 0;
    EXPECT(NEAR(cost_op_s(&c, g, att, hd) - cost_op_s(&c, g, &att0, hd), drop));
    const int *hdg[7] = {heads8, heads8, heads8, heads8, heads8, heads8, heads8}; // dy, q, k, v -> dq, dk, dv: [b, s, n, d] alike
    EXPECT(NEAR(cost_op_s(&c, g, ag, hdg) - cost_op_s(&c, g, &ag0, hdg), 2 * drop));
    // FlashAttention-2's form (--attention flash): the products' FLOPs at the kernel's rate,
    // causal halved (megatron-1t's attention is causal), dropout free; the backward 2.5 forwards
    // at 63/73 of the rate, after one forward again.
    pcc_op fa = *att, fg = *ag;
    fa.attrs.mode = fg.attrs.mode = PLAN_ATTN_FLASH;
    EXPECT(att->attrs.causal);
    c.flash_efficiency = 0.7;
    double f = 2 * 20.0 * 2048 * 2048 * (160 + 160) * 0.5, tf = f / (312e12 * 0.7) + 5e-6;
    EXPECT(NEAR(cost_op_s(&c, g, &fa, hd), tf));
    EXPECT(NEAR(cost_op_s(&c, g, &fg, hdg), tf + 2.5 * f / (312e12 * 0.7 * 63 / 73) + 5e-6));
    EXPECT(cost_op_s(&c, g, &fa, hd) < cost_op_s(&c, g, att, hd) / 2);
    fa.attrs.causal = false;
    EXPECT(NEAR(cost_op_s(&c, g, &fa, hd), 2 * f / (312e12 * 0.7) + 5e-6));
    c.flash_efficiency = 0; // absent: the cluster's GEMM figure times FA2's ratio to cuBLAS on A100
    EXPECT(NEAR(cost_op_s(&c, g, &fa, hd), 2 * f / (312e12 * 0.8 * 0.73 / 0.83) + 5e-6));
}

// The example profile, inline in a cluster file: its entries replace the roofline, the rest do not.
static void test_profile(pcc_arena *a) {
    pcc_cluster *c;
    EXPECT(cluster_load(a, arena_printf(a, "%s/tests/schema_good/cluster-profile-inline.json", root), 0, 0, &c) == PCC_OK);
    EXPECT(profile_size(c->profile) == 3);
    EXPECT(cost_gemm_s(c, PCC_BF16, 1, 2048, 3200, 25600, false) == 1.6e-3);
    EXPECT(cost_gemm_s(c, PCC_BF16, 20, 2048, 2048, 160, false) == 1.0e-3);
    EXPECT(cost_gemm_s(c, PCC_F16, 1, 2048, 3200, 25600, false) != 1.6e-3); // another dtype
    EXPECT(cost_gemm_s(c, PCC_BF16, 1, 2048, 3200, 25599, false) != 1.6e-3);
    EXPECT(profile_lookup(c->profile, "gemm|bf16|b1|m1|n1|k1") == -1 && profile_lookup(NULL, "x") == -1);
    // The sequence-parallel layernorm of megatron-1t on tp 8: [1, 256, 25600] per device.
    pcc_graph *g;
    EXPECT(model_load(a, arena_printf(a, "%s/models/megatron-1t.json", root), &g) == PCC_OK);
    const pcc_op *ln = find_op(g, "a", PCC_OP_LAYERNORM);
    EXPECT(ln != NULL);
    if (!ln) return;
    int one[PCC_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1}, seq8[PCC_MAX_RANK] = {1, 8, 1, 1, 1, 1, 1, 1};
    const int *sp[4] = {seq8, one, one, seq8};
    EXPECT(cost_op_s(c, g, ln, sp) == 3.0e-5);
    EXPECT(cost_op_s(c, g, ln, NULL) != 3.0e-5);
    // The same file by name (relative to the cluster file) loads the same table.
    pcc_cluster *f;
    EXPECT(cluster_load(a, arena_printf(a, "%s/tests/schema_good/cluster-profile-file.json", root), 0, 0, &f) == PCC_OK);
    EXPECT(profile_size(f->profile) == 4 && cost_op_s(f, g, ln, sp) == 3.0e-5);
}

// FlashAttention-2's published benchmark (dgx-a100.json's flash_benchmark): the table's own points
// exactly, log-length interpolation between them, its ends beyond them, and the orderings the
// published figures have (longer keys, a larger head, no mask: faster).
static void test_flash_benchmark(pcc_arena *a) {
    pcc_cluster *c;
    EXPECT(cluster_load(a, arena_printf(a, "%s/models/clusters/dgx-a100.json", root), 0, 0, &c) == PCC_OK);
    if (!c) return;
    EXPECT(c->flash.n_seq == 6 && c->flash.n_rows == 4 && c->flash_source);
    double k = (1 + 2.5 * 73 / 63) / (3.5 * 312); // forward fraction per TFLOP/s of forward + backward
    EXPECT(NEAR(cost_flash_efficiency(c, 128, 16384, false), 203 * k));
    EXPECT(NEAR(cost_flash_efficiency(c, 64, 512, true), 88 * k));
    EXPECT(NEAR(cost_flash_efficiency(c, 128, 4096, true), 173 * k));
    EXPECT(NEAR(cost_flash_efficiency(c, 128, 65536, false), 203 * k) && NEAR(cost_flash_efficiency(c, 128, 64, false), 151 * k));
    EXPECT(NEAR(cost_flash_efficiency(c, 256, 2048, false), 187 * k) && NEAR(cost_flash_efficiency(c, 32, 2048, true), 140 * k));
    EXPECT(NEAR(cost_flash_efficiency(c, 64, 1024 * sqrt(2), false), (153 + 0.5 * (162 - 153)) * k)); // 1024 sqrt 2: half-way in log
    EXPECT(NEAR(cost_flash_efficiency(c, 64 * sqrt(2), 2048, false), (162 + 0.5 * (187 - 162)) * k)); // 64 sqrt 2
    for (double t = 512; t < 16384; t *= 1.5) {
        EXPECT(cost_flash_efficiency(c, 128, t, true) < cost_flash_efficiency(c, 128, t * 1.5, true));
        EXPECT(cost_flash_efficiency(c, 64, t, true) < cost_flash_efficiency(c, 128, t, true));
        EXPECT(cost_flash_efficiency(c, 96, t, true) < cost_flash_efficiency(c, 96, t, false));
    }
    EXPECT(cost_flash_efficiency(c, 128, 16384, false) <= 0.73);
    // Without the table: flash_efficiency, and without that the GEMM figure times FA2's ratio.
    pcc_cluster bare = *c;
    bare.flash.n_rows = 0;
    EXPECT(NEAR(cost_flash_efficiency(&bare, 64, 512, true), 0.83 * 0.73 / 0.83));
    bare.flash_efficiency = 0.5;
    EXPECT(cost_flash_efficiency(&bare, 64, 512, true) == 0.5);
}

// The compiler's collective names (pcc_coll_names, compiler/cost.c) are runtime/colls.def's, the
// ones a plan's reader prints (plan_coll_name): pcc_coll's codes are what a plan stores.
static void test_coll_names(void) {
    for (int k = 0; k < PCC_COLL_COUNT; k++)
        EXPECT(plan_coll_name((uint32_t)k) && strcmp(pcc_coll_names[k], plan_coll_name((uint32_t)k)) == 0);
    EXPECT(plan_coll_name(PCC_COLL_COUNT) == NULL);
}

int main(int argc, char **argv) {
    root = argc > 1 ? argv[1] : ".";
    pcc_arena *a = arena_init();
    test_gemm_efficiency();
    test_gemm_time();
    test_collectives();
    test_coll_names();
    test_flash_benchmark(a);
    test_gemm_tiles(a);
    test_buckets();
    test_overlap_and_pipeline();
    test_makespan_shapes();
    test_makespan_mid();
    test_ops(a);
    test_conv(a);
    test_profile(a);
    arena_free(a);
    return test_summary();
}
