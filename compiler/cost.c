/*
 * cost.c: the cost model, one interface for the scheduler, the step-time estimate and reports.
 *
 * What it models, and from what (every constant here or in the cluster file names its source;
 * models/clusters/README.md explains the cluster figures and how they were checked against
 * Megatron-LM's published throughput):
 *
 *   GEMM        t = max(2 b m n k / (peak(dtype) * eff), bytes / (bw * mem_eff)) + launch
 *               eff = gemm_efficiency * tile * wave * k / (k + K0)
 *                 gemm_efficiency  the sustained fraction of the tensor-core peak that large
 *                                  GEMMs reach (cluster file: a measured fraction, models/clusters/README.md,
 *                                  "Calibration").
 *                 tile, wave       cuBLAS computes C in tiles, one thread block each, in waves
 *                                  of one block per multiprocessor: m and n are padded to the
 *                                  tile, the last wave may be partly idle (NVIDIA, "Matrix
 *                                  Multiplication Background User's Guide", DU-09799-001,
 *                                  sections 2.3 and 3). The tile is the one of TILES that gives
 *                                  the best product, as cuBLAS's heuristics aim to (the cluster's gemm_tiles, each
 *                                  at its relative rate; without them TILES below).
 *                 k / (k + K0)     the main loop over k runs behind a fixed cost per tile
 *                                  (pipeline fill, epilogue store) worth K0 of k.
 *   elementwise t = max(flops / vector peak, bytes / (bw * mem_eff)) + launch
 *   attention   unfused, as Megatron-LM (2021) and planrun's kernels run it: S = Q K^T as a
 *               batched GEMM written to memory, a softmax over S (read and write), O = P V as a
 *               batched GEMM reading P; the backward recomputes S and P (its operands are q, k,
 *               v and dO), then dV = P^T dO, dP = dO V^T, dS = softmax' (reads P and dP, writes
 *               dS), dQ = dS K, dK = dS^T Q. Causal masking does not skip work (Megatron-LM
 *               masks a full s x s product, and its FLOP count, the paper's, counts it).
 *               Dropout of the probabilities (attrs p > 0, Megatron-LM's attention_dropout: a
 *               torch dropout, unfused) is one more pass over them wherever they are formed: it
 *               reads P, writes the dropped P' and its one-byte mask (b s s (2 dtype + 1)
 *               bytes); the backward forms P' again (attention_grad recomputes it; Megatron-LM's
 *               full recompute re-runs its forward) and passes dP' to dP through the mask,
 *               another such pass. Memory: planrun's kernels regenerate the mask from the
 *               counter-based generator, so nothing is saved for the backward (the memory
 *               planner has nothing to add).
 *   flash       --attention flash (attrs mode 1): FlashAttention-2's fused kernel (Dao 2023,
 *               "FlashAttention-2: Faster Attention with Better Parallelism and Work
 *               Partitioning", arXiv 2307.08691). Forward: the two products' FLOPs, 2 b s t (d + e),
 *               at the kernel's own fraction of the tensor peak by shape (cost_flash_efficiency:
 *               the cluster's flash_benchmark, FA2's published forward + backward TFLOP/s by
 *               head size, key length and causal, its Figures 4 and 7, interpolated in log t and
 *               log d; without one, the cluster's single flash_efficiency; without that,
 *               gemm_efficiency x 0.73/0.83, the ratio of the paper's 73% on A100, section 4.1,
 *               to cuBLAS's 0.83 there), with
 *               q, k, v read and o written once as its memory floor: S and P never reach memory.
 *               Causal halves the FLOPs (FA2 skips the key tiles past the diagonal). Dropout is
 *               drawn in the kernel: no pass. Backward: the paper's count, 2.5 forwards of FLOPs
 *               (S recomputed, dP, dV, dQ, dK), at 63/73 of the forward's rate (its A100 figures:
 *               63% of the peak backward, 73% forward), after one more forward that recomputes each
 *               query tile's output and log-sum-exp (planrun's kernels save neither: the graph's
 *               attention has one output), 3.5 forwards in all where FA2 itself takes 2.5.
 *               Memory: O(tile) scratch in the kernel, outside the plan's arena, as the unfused
 *               kernels' s x t scratch is; nothing saved, so the memory planner adds nothing.
 *   profile     a table of measured times (cluster "profile") replaces the roofline for every
 *               per-device shape it lists: whole operators, or one GEMM.
 *   collectives NCCL's ring (nccl-tests doc/PERFORMANCE.md): n members, alpha per hop, B the bus
 *               bandwidth of the slowest link of the group:
 *                 all-reduce                            2(n-1) alpha + 2(n-1)/n S / B
 *                 all-gather, reduce-scatter, all-to-all (n-1) alpha +  (n-1)/n S / B
 *                 broadcast                              (n-1) alpha +         S / B
 *                 send/recv                                    alpha +         S / B
 *               Across nodes NCCL may run all-reduce as a double binary tree: about 2 S / B
 *               of bandwidth and 2 (log2(nodes) alpha_net + (m-1) alpha_intra) of latency for m
 *               members per node; the cheaper of the two counts, as NCCL's tuner picks.
 *               B: NVLink inside a node; across nodes NCCL runs one ring per NIC, so a group
 *               with m members on each node moves at most m / devices_per_node of the node's NIC
 *               bandwidth; each link's efficiency (NCCL's measured bus bandwidth over the line
 *               rate) scales it. Never above the intra-node figure.
 *   overlap     a collective on a second stream is hidden by the work it runs beside.
 *   pipeline    1F1B/GPipe and interleaved 1F1B: the schedule's units in order, each once its
 *               device is free and its input there (pipeline.c's pipeline_makespan); (m + (p-1)/v)
 *               stage-times for equal stages.
 *
 * Figures the cluster file leaves out default to the ideal (efficiency 1, no wave model), so a
 * bare cluster is a pure roofline. Known limits: the tiles' relative rates are derived for the
 * A100 only (dgx-h100.json takes them too); no contention
 * between a collective and the compute it overlaps; no NVLS/SHARP in-network reductions.
 */
#include "plancc.h"

#include <math.h>
#include <string.h>

const char *const pcc_coll_names[PCC_COLL_COUNT] = {
#define COLL(E, name, pieces, shards, inplace, roots) #name,
#include "../runtime/colls.def"
#undef COLL
};

// Kernel launch and framework overhead per operator when the cluster file gives none: the
// order of a CUDA kernel launch (a few microseconds).
#define DEFAULT_LAUNCH_S 4e-6

// The k worth of fixed cost per output tile: two 32-deep k-slices of an Ampere/Hopper cuBLAS
// main loop (one for the cp.async pipeline's fill, one for the epilogue's store of the tile).
#define K0 64.0

// Thread-block tiles of cuBLAS's tensor-core kernels and their rates relative to the largest, for
// a cluster file without "gemm_tiles" (dgx-a100.json and dgx-h100.json give this set, with its
// sources). DU-09799-001 section 2.3 lists 256x128, 128x128, 64x128 and 64x64 among the typical ones.
// A tile needs (TM + TN) / (TM TN) operand elements per multiply-add from L2; at an A100 SM's
// 1024 dense FP16 multiply-adds per clock that is 24, 32, 48 and 64 bytes per clock for these
// tiles, against 5120 / 108 = 47 bytes per clock of L2 read bandwidth per SM (NVIDIA A100
// Tensor Core GPU Architecture whitepaper: 5120 bytes/clk of L2 read bandwidth). So the two
// large tiles run at full rate, 128x64 at about 47/48 and 64x64 at about 47/64 of it.
static const struct {
    int m, n;
    double eff;
} TILES[] = {{256, 128, 1.0}, {128, 256, 1.0}, {128, 128, 1.0}, {128, 64, 0.98}, {64, 128, 0.98}, {64, 64, 0.74}};

// The shortest k slice of a split-K GEMM: four tile loads of K0 (cuBLASLt's split-K heuristics
// keep slices of a few hundred).
#define SPLIT_K_MIN (4 * K0)

static double or_one(double x) { return x > 0 ? x : 1; }

double cost_peak_flops(const pcc_cluster *c, pcc_dtype dt, bool matmul) {
    if (!matmul) return c->peak_flops[PCC_MATH_F32];
    switch (dt) {
    case PCC_BF16: return c->peak_flops[PCC_MATH_BF16];
    case PCC_F16: return c->peak_flops[PCC_MATH_F16];
    default: return c->tf32 ? c->peak_flops[PCC_MATH_TF32] : c->peak_flops[PCC_MATH_F32];
    }
}

static double mem_bw(const pcc_cluster *c) { return c->memory_bandwidth_Bps * or_one(c->memory_efficiency); }

double cost_launch_s(const pcc_cluster *c) { return c->launch_overhead_s > 0 ? c->launch_overhead_s : DEFAULT_LAUNCH_S; }

double cost_compute_s(const pcc_cluster *c, double flops, double bytes, pcc_dtype dt, bool matmul) {
    double t_flops = flops / (cost_peak_flops(c, dt, matmul) * (matmul ? or_one(c->gemm_efficiency) : 1));
    double t_bytes = bytes / mem_bw(c);
    return (t_flops > t_bytes ? t_flops : t_bytes) + cost_launch_s(c);
}

double cost_memory_s(const pcc_cluster *c, double bytes) { return bytes / mem_bw(c) + cost_launch_s(c); }

/* ---- GEMM ---- */

double cost_gemm_efficiency(const pcc_cluster *c, double batch, double m, double n, double k) {
    double eff = or_one(c->gemm_efficiency);
    if (c->sm_count <= 0 || m < 1 || n < 1 || k < 1 || batch < 1) return eff;
    double best = 0;
    int nt = c->n_tiles ? c->n_tiles : (int)(sizeof TILES / sizeof TILES[0]);
    for (int i = 0; i < nt; i++) {
        double tile_m = c->n_tiles ? c->tiles[i].m : TILES[i].m, tile_n = c->n_tiles ? c->tiles[i].n : TILES[i].n;
        double rate = c->n_tiles ? c->tiles[i].rate : TILES[i].eff;
        double tm = ceil(m / tile_m), tn = ceil(n / tile_n), tiles = tm * tn * batch;
        // Split-K (cuBLAS's and cuDNN's answer to a grid that underfills the GPU, e.g. a
        // convolution's weight gradient: M = O, N = C kh kw, K = N Ho Wo): the k loop cut into s
        // slices of at least SPLIT_K_MIN that run on idle SMs, their partial tiles summed after.
        double s = 1;
        if (tiles < c->sm_count) s = fmax(1, fmin(floor(c->sm_count / tiles), floor(k / SPLIT_K_MIN)));
        double waves = ceil(tiles * s / c->sm_count), ks = k / s;
        double used = m * n * batch * s / (waves * c->sm_count * tile_m * tile_n);
        double e = used * rate * ks / (ks + K0);
        if (e > best) best = e;
    }
    return eff * best;
}

/* ---- operators ---- */

// An operator at its per-device shape: operand k's axis a holds 1/ways[k][a] of the tensor's.
typedef struct dev_op {
    const pcc_graph *g;
    const pcc_op *op;
    const int *const *ways;     // NULL: the whole op; ways[k] NULL: operand k whole
    pcc_letter l[PCC_MAX_LETTERS];
    int nl;
    double letter_size[PCC_MAX_LETTERS]; // per device
    double share;               // per-device share of the op's FLOPs
} dev_op;

static int tensor_of(const pcc_op *op, int k) { return k < op->nin ? op->in[k] : op->out[k - op->nin]; }

static int ways_at(const dev_op *d, int k, int a) { return d->ways && d->ways[k] && d->ways[k][a] > 1 ? d->ways[k][a] : 1; }

static void dev_op_init(dev_op *d, const pcc_graph *g, const pcc_op *op, const int *const *ways) {
    d->g = g, d->op = op, d->ways = ways, d->share = 1;
    d->nl = op_letters(g, op, d->l);
    for (int i = 0; i < d->nl; i++) {
        double full = d->l[i].dim >= 0 ? (double)g->dims[d->l[i].dim].size : 1;
        int w = 1;
        for (int k = 0; k < op->nin + op->nout && w == 1; k++)
            if (d->l[i].axis[k] >= 0) w = ways_at(d, k, d->l[i].axis[k]);
        d->letter_size[i] = ceil(full / w);
        d->share *= d->letter_size[i] / full;
    }
}

// Per-device size of axis a of operand k.
static double dev_dim(const dev_op *d, int k, int a) {
    const pcc_tensor *t = &d->g->tensors[tensor_of(d->op, k)];
    return ceil((double)d->g->dims[t->dims[a]].size / ways_at(d, k, a));
}

static double dev_bytes(const dev_op *d) {
    double b = 0;
    const pcc_op *op = d->op;
    for (int k = 0; k < op->nin + op->nout; k++) {
        const pcc_tensor *t = &d->g->tensors[tensor_of(op, k)];
        double n = pcc_dtype_bytes(t->dtype);
        for (int a = 0; a < t->rank; a++) n *= dev_dim(d, k, a);
        b += n;
        if ((pcc_ops[op->kind].flags & PCC_OPF_INPLACE) && k != 1) b += n; // read and written back: all but the gradient
    }
    return b;
}

static const char *dtype_name(pcc_dtype dt) { return dt < PCC_DTYPE_COUNT ? pcc_dtype_names[dt] : "?"; }

static pcc_dtype op_dtype(const pcc_graph *g, const pcc_op *op) {
    return g->tensors[op->nout ? op->out[0] : op->in[0]].dtype;
}

// "layernorm|bf16|2048x25600,25600,25600": the profile key of an op at its per-device shapes.
static void op_key(const dev_op *d, char *buf, size_t n) {
    const pcc_op *op = d->op;
    size_t k = (size_t)snprintf(buf, n, "%s|%s|", pcc_ops[op->kind].name, dtype_name(op_dtype(d->g, op)));
    for (int i = 0; i < op->nin && k < n; i++) {
        const pcc_tensor *t = &d->g->tensors[op->in[i]];
        if (i) k += (size_t)snprintf(buf + k, n - k, ",");
        for (int a = 0; a < t->rank && k < n; a++) k += (size_t)snprintf(buf + k, n - k, "%s%.0f", a ? "x" : "", dev_dim(d, i, a));
    }
}

double cost_gemm_s(const pcc_cluster *c, pcc_dtype dt, double batch, double m, double n, double k, bool accumulate) {
    if (batch <= 0 || m <= 0 || n <= 0 || k <= 0) return cost_launch_s(c);
    if (c->profile) {
        char key[160];
        snprintf(key, sizeof key, "gemm|%s|b%.0f|m%.0f|n%.0f|k%.0f", dtype_name(dt), batch, m, n, k);
        double t = profile_lookup(c->profile, key);
        if (t >= 0) return t;
    }
    double flops = 2 * batch * m * n * k;
    double bytes = pcc_dtype_bytes(dt) * batch * (m * k + k * n + m * n * (accumulate ? 2 : 1));
    double t_flops = flops / (cost_peak_flops(c, dt, true) * cost_gemm_efficiency(c, batch, m, n, k));
    double t_bytes = bytes / mem_bw(c);
    return (t_flops > t_bytes ? t_flops : t_bytes) + cost_launch_s(c);
}

// FlashAttention-2's forward rate over the large-GEMM rate, both measured on A100: 0.73 of the
// peak (Dao 2023, section 4.1) against cuBLAS's 0.83 (dgx-a100.json's gemm_efficiency), for a
// cluster file without flash_efficiency; and its backward's rate over its forward's, 63% of the
// peak against 73% (the same section).
#define FA2_VS_GEMM (0.73 / 0.83)
#define FA2_BWD_VS_FWD (63.0 / 73.0)

// Row r of the benchmark at key length t: linear in log t between its lengths, the end figures
// beyond them.
static double flash_row_at(const pcc_flash_table *f, int r, double t) {
    const double *y = f->rows[r].tflops;
    if (t <= f->seq[0]) return y[0];
    for (int i = 1; i < f->n_seq; i++)
        if (t <= f->seq[i]) {
            double w = log(t / f->seq[i - 1]) / log(f->seq[i] / f->seq[i - 1]);
            return y[i - 1] + w * (y[i] - y[i - 1]);
        }
    return y[f->n_seq - 1];
}

// FA2's forward and backward together, TFLOP/s, at head size d and key length t: the rows of the
// same causal form nearest d below and above, linear in log d between them; -1 without such rows.
static double flash_tflops(const pcc_flash_table *f, double d, double t, bool causal) {
    int lo = -1, hi = -1;
    for (int r = 0; r < f->n_rows; r++) {
        if (f->rows[r].causal != causal) continue;
        int h = f->rows[r].head_dim;
        if (h <= d && (lo < 0 || h > f->rows[lo].head_dim)) lo = r;
        if (h >= d && (hi < 0 || h < f->rows[hi].head_dim)) hi = r;
    }
    if (lo < 0 && hi < 0) return -1;
    if (lo < 0 || hi < 0 || lo == hi) return flash_row_at(f, lo < 0 ? hi : lo, t);
    double w = log(d / f->rows[lo].head_dim) / log((double)f->rows[hi].head_dim / f->rows[lo].head_dim);
    return flash_row_at(f, lo, t) + w * (flash_row_at(f, hi, t) - flash_row_at(f, lo, t));
}

double cost_flash_efficiency(const pcc_cluster *c, double d, double t, bool causal) {
    double tf = c->flash.n_rows ? flash_tflops(&c->flash, d, t, causal) : -1;
    // The benchmark counts the backward as 2.5 forwards of FLOPs: 3.5 f at tf TFLOP/s is the
    // forward at rate e and the backward at e x FA2_BWD_VS_FWD, so e = tf (1 + 2.5 / r) / 3.5.
    if (tf > 0)
        return fmin(1, tf * 1e12 * (1 + 2.5 / FA2_BWD_VS_FWD) / (3.5 * fmax(c->peak_flops[PCC_MATH_BF16], c->peak_flops[PCC_MATH_F16])));
    return c->flash_efficiency > 0 ? c->flash_efficiency : or_one(c->gemm_efficiency) * FA2_VS_GEMM;
}

// Attention in FlashAttention-2's fused form (attrs mode PLAN_ATTN_FLASH) on b (batch x heads)
// rows of s queries against t keys, head sizes dh (q, k) and e (v), per device.
static double flash_s(const pcc_cluster *c, const dev_op *d, pcc_dtype dt, double b, double s, double t, double dh, double e) {
    const pcc_op *op = d->op;
    double f = 2 * b * s * t * (dh + e) * (op->attrs.causal ? 0.5 : 1); // causal: the tiles past the diagonal are skipped
    double eff = cost_flash_efficiency(c, dh, t, op->attrs.causal);
    double peak = cost_peak_flops(c, dt, true), io = b * pcc_dtype_bytes(dt) * (s * dh + t * dh + t * e + s * e);
    double fwd = fmax(f / (peak * eff), io / mem_bw(c)) + cost_launch_s(c); // q, k, v in, o out; no S or P in memory
    if (op->kind == PCC_OP_ATTENTION) return fwd;
    // Backward: FA2's 2.5 forwards of FLOPs (S again, dP = dO V^T, dV, dQ, dK) at its backward's
    // rate, after the forward again (the output and log-sum-exp of each query tile, which the
    // plan does not save: runtime/cpu/attention_flash.c).
    return fwd + fmax(2.5 * f / (peak * eff * FA2_BWD_VS_FWD), 2 * io / mem_bw(c)) + cost_launch_s(c);
}

// Attention forward or backward, unfused (or flash_s), on q [b, s, n, d] (per device).
static double attention_s(const pcc_cluster *c, const dev_op *d) {
    const pcc_op *op = d->op;
    int qk = op->kind == PCC_OP_ATTENTION ? 0 : 1; // the backward's operands: dO, q, k, v
    pcc_dtype dt = op_dtype(d->g, op);
    double b = dev_dim(d, qk, 0) * dev_dim(d, qk, 2), s = dev_dim(d, qk, 1), h = dev_dim(d, qk, 3);
    if (op->attrs.mode == PLAN_ATTN_FLASH) return flash_s(c, d, dt, b, s, dev_dim(d, qk + 1, 1), h, dev_dim(d, qk + 2, 3));
    double scores = b * s * s * pcc_dtype_bytes(dt);
    double t_qk = cost_gemm_s(c, dt, b, s, s, h, false), t_pv = cost_gemm_s(c, dt, b, s, h, s, op->accumulate);
    // dropout of P: read P, write P' and the mask (one byte an element)
    double t_drop = op->attrs.p > 0 ? cost_memory_s(c, b * s * s * (2.0 * pcc_dtype_bytes(dt) + 1)) : 0;
    double fwd = t_qk + cost_memory_s(c, 2 * scores) + t_drop + t_pv; // S = QK^T; P = softmax(S); P' = drop(P); O = P'V
    if (op->kind == PCC_OP_ATTENTION) return fwd;
    // Backward: S, P and P' again, dV = P'^T dO, dP' = dO V^T, dP = drop'(dP'), dS = softmax'(P, dP),
    // dQ = dS K, dK = dS^T Q.
    return t_qk + cost_memory_s(c, 2 * scores) + t_drop + 3 * t_pv + t_qk + t_drop + cost_memory_s(c, 3 * scores);
}

// A matrix product at its per-device shape: batch letters are in both inputs and the output,
// n in the second input and the output, k (reduced) in both inputs only; m follows from the FLOPs
// (convolutions have their own mapping: conv_s).
static double matmul_s(const pcc_cluster *c, const dev_op *d) {
    const pcc_op *op = d->op;
    double batch = 1, n = 1, k = 1;
    int o0 = op->nin; // the output's operand index
    for (int i = 0; i < d->nl; i++) {
        const signed char *ax = d->l[i].axis;
        bool a = ax[0] >= 0, b = op->nin > 1 && ax[1] >= 0, y = op->nout && ax[o0] >= 0;
        if (a && b && y) batch *= d->letter_size[i];
        else if (b && y) n *= d->letter_size[i];
        else if (a && b) k *= d->letter_size[i];
    }
    pcc_dtype dt = op_dtype(d->g, op);
    double f = op_flops_matmul(d->g, op) * d->share, m = f / (2 * batch * n * k);
    double t = cost_gemm_s(c, dt, batch, m < 1 ? 1 : m, n, k, op->accumulate);
    double rest = (op_flops(d->g, op) - op_flops_matmul(d->g, op)) * d->share; // a bias add, in the epilogue
    return rest > 0 ? t + rest * pcc_dtype_bytes(dt) / mem_bw(c) : t;
}

// A convolution as the implicit GEMM cuDNN runs (NVIDIA, Convolutional Layers User's Guide,
// "convolution algorithms"): forward M = N Ho Wo, N = O, K = C kh kw; data gradient M = N H W,
// N = C, K = O kh kw; weight gradient M = O, N = C kh kw, K = N Ho Wo. The window letters are in
// one operand only, so the generic letter rule of matmul_s would leave them out of K (or N) and
// cost a 3x3 convolution as a GEMM of 9 times the rows and a ninth of the depth. The free side
// follows from the FLOPs, as in matmul_s (strided and padded windows). Operands, per device:
// x [n c h w], w [o c kh kw], y [n o ho wo].
static double conv_s(const pcc_cluster *c, const dev_op *d) {
    const pcc_op *op = d->op;
    double f = op_flops_matmul(d->g, op) * d->share, m, n, k;
    if (op->kind == PCC_OP_CONV2D) { // x, w -> y
        n = dev_dim(d, 1, 0), k = dev_dim(d, 1, 1) * dev_dim(d, 1, 2) * dev_dim(d, 1, 3), m = f / (2 * n * k);
    } else if (op->kind == PCC_OP_CONV2D_GRAD_X) { // dy, w -> dx
        n = dev_dim(d, 1, 1), k = dev_dim(d, 1, 0) * dev_dim(d, 1, 2) * dev_dim(d, 1, 3), m = f / (2 * n * k);
    } else { // dy, x -> dw [o c kh kw]
        m = dev_dim(d, 2, 0), n = dev_dim(d, 2, 1) * dev_dim(d, 2, 2) * dev_dim(d, 2, 3), k = f / (2 * m * n);
    }
    pcc_dtype dt = op_dtype(d->g, op);
    double t = cost_gemm_s(c, dt, 1, m < 1 ? 1 : m, n, k < 1 ? 1 : k, op->accumulate);
    double rest = (op_flops(d->g, op) - op_flops_matmul(d->g, op)) * d->share; // the bias, in the epilogue
    return rest > 0 ? t + rest * pcc_dtype_bytes(dt) / mem_bw(c) : t;
}

double cost_op_s(const pcc_cluster *c, const pcc_graph *g, const pcc_op *op, const int *const *ways) {
    dev_op d;
    dev_op_init(&d, g, op, ways);
    if (c->profile) {
        char key[512];
        op_key(&d, key, sizeof key);
        double t = profile_lookup(c->profile, key);
        if (t >= 0) return t;
    }
    if (op->kind == PCC_OP_ATTENTION || op->kind == PCC_OP_ATTENTION_GRAD || op->kind == PCC_OP_ATTENTION_GRAD_BIAS)
        return attention_s(c, &d); // the bias's gradient recomputes what attention_grad does
    if (op->kind == PCC_OP_CONV2D || op->kind == PCC_OP_CONV2D_GRAD_X || op->kind == PCC_OP_CONV2D_GRAD_W)
        return conv_s(c, &d);
    if (pcc_ops[op->kind].flags & PCC_OPF_MATMUL) return matmul_s(c, &d);
    return cost_compute_s(c, op_flops(g, op) * d.share, dev_bytes(&d), op_dtype(g, op), false);
}

/* ---- collectives ---- */

bool cost_group_crosses_nodes(const pcc_cluster *c, pcc_group_shape g) {
    return g.size > 1 && (int64_t)(g.size - 1) * g.stride + 1 > c->devices_per_node;
}

pcc_group_shape cost_pair_shape(const pcc_cluster *c, int64_t a, int64_t b, int w) {
    int64_t n = c->devices_per_node > 0 ? c->devices_per_node : 1;
    for (int64_t x = 0; x < w; x++)
        if ((a + x) / n != (b + x) / n) return (pcc_group_shape){2, (int)n};
    return (pcc_group_shape){2, 1};
}

// Members of the group on each node it spans.
static int members_per_node(const pcc_cluster *c, pcc_group_shape g) {
    int per_node = g.stride >= c->devices_per_node ? 1 : c->devices_per_node / g.stride;
    return per_node > g.size ? g.size : per_node;
}

double cost_group_bandwidth(const pcc_cluster *c, pcc_group_shape g) {
    double intra = c->intra.bandwidth_Bps * or_one(c->intra.efficiency);
    if (!cost_group_crosses_nodes(c, g)) return intra;
    double nic = c->network.bandwidth_Bps * or_one(c->network.efficiency) * c->nics_per_node * members_per_node(c, g) /
                 c->devices_per_node;
    return nic < intra ? nic : intra;
}

// NCCL's double binary tree all-reduce across nodes (intra-node chains, a tree between nodes).
static double tree_all_reduce_s(const pcc_cluster *c, double bytes, pcc_group_shape g) {
    int m = members_per_node(c, g), nodes = (g.size + m - 1) / m;
    double lat = 2 * (ceil(log2(nodes)) * c->network.latency_s + (m - 1) * c->intra.latency_s);
    return lat + 2 * bytes / cost_group_bandwidth(c, g);
}

double cost_coll_bytes(pcc_coll kind, double in_bytes, double out_bytes) {
    return kind == PCC_COLL_ALL_REDUCE || kind == PCC_COLL_ALL_GATHER || kind == PCC_COLL_BROADCAST ? out_bytes : in_bytes;
}

double cost_vocab_stats_s(const pcc_cluster *c, double rows, int ways, pcc_group_shape g) {
    double st = 3 * rows * pcc_dtype_bytes(PCC_F32);
    return cost_collective_s(c, PCC_COLL_ALL_GATHER, cost_coll_bytes(PCC_COLL_ALL_GATHER, st, ways * st), g);
}

double cost_collective_s(const pcc_cluster *c, pcc_coll kind, double bytes, pcc_group_shape g) {
    int n = g.size;
    if (n <= 1 || bytes <= 0) return 0;
    double bw = cost_group_bandwidth(c, g);
    bool cross = cost_group_crosses_nodes(c, g);
    double alpha = cross ? c->network.latency_s : c->intra.latency_s;
    double steps = n - 1, frac = (double)(n - 1) / n;
    switch (kind) {
    case PCC_COLL_ALL_REDUCE: {
        double ring = 2 * steps * alpha + 2 * frac * bytes / bw;
        if (!cross) return ring;
        double tree = tree_all_reduce_s(c, bytes, g);
        return tree < ring ? tree : ring;
    }
    case PCC_COLL_ALL_GATHER:
    case PCC_COLL_REDUCE_SCATTER:
    case PCC_COLL_ALL_TO_ALL: return steps * alpha + frac * bytes / bw;
    case PCC_COLL_BROADCAST: return steps * alpha + bytes / bw;
    case PCC_COLL_SEND_RECV:
    case PCC_COLL_SHIFT: return alpha + bytes / bw; // every member sends its piece to the next at once
    default: PCC_ASSERT(!"bad collective");
    }
}

double cost_bucketed_s(const pcc_cluster *c, pcc_coll kind, double bytes, double pool, double bucket_bytes,
                       pcc_group_shape g) {
    if (bytes <= 0 || g.size <= 1) return 0;
    double b = pool < bucket_bytes ? pool : bucket_bytes;
    if (b <= bytes) return cost_collective_s(c, kind, bytes, g) + cost_launch_s(c);
    return bytes / b * (cost_collective_s(c, kind, b, g) + cost_launch_s(c));
}

/* ---- streams ---- */

double cost_exposed_s(double comm_s, double window_s) { return comm_s > window_s ? comm_s - window_s : 0; }

