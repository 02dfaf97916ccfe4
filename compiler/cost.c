/*
 * cost.c: the cost model, one interface for the scheduler and the reports.
 *
 * This is the first-principles model the compiler issue asks for, kept deliberately simple so
 * the cost-model issue can replace its inside without touching a caller:
 *
 *   compute     t = max(FLOPs / peak, bytes / memory bandwidth) + launch overhead
 *               (matmul FLOPs at the tensor-core peak of the dtype, the rest at the f32 peak;
 *               no shape-dependent efficiency yet)
 *   collective  NCCL's ring algorithm (nccl-tests' PERFORMANCE.md): with n members, alpha the
 *               per-hop latency and B the bus bandwidth of the slowest link,
 *                 all-reduce                          2(n-1) alpha + 2(n-1)/n * S / B
 *                 all-gather, reduce-scatter, all-to-all (n-1) alpha +  (n-1)/n * S / B
 *                 broadcast                            (n-1) alpha +          S / B
 *                 send/recv                                  alpha +          S / B
 *
 * Bus bandwidth of a group: NVLink (node.intra) while the group stays inside a node. Across
 * nodes, NCCL runs one ring per NIC, so a group with m members on each node moves at most
 * m / devices_per_node of the node's NIC bandwidth (nics * nic_bw): a full node reaches all of
 * it, a group with one member per node only that device's share. Never above the intra link.
 *
 * Figures come from the cluster file (models/clusters/, each with its datasheet source).
 */
#include "plancc.h"

const char *const pcc_coll_names[PCC_COLL_COUNT] = {"all_reduce", "all_gather", "reduce_scatter",
                                                    "all_to_all", "send_recv", "broadcast"};

// Kernel launch and framework overhead per operator when the cluster file gives none: the
// order of a CUDA kernel launch (a few microseconds).
#define DEFAULT_LAUNCH_S 4e-6

static double peak_for(const pcc_cluster *c, pcc_dtype dt, bool matmul) {
    if (!matmul) return c->peak_flops[PCC_MATH_F32];
    switch (dt) {
    case PCC_BF16: return c->peak_flops[PCC_MATH_BF16];
    case PCC_F16: return c->peak_flops[PCC_MATH_F16];
    default: return c->peak_flops[PCC_MATH_F32];
    }
}

double cost_launch_s(const pcc_cluster *c) { return c->launch_overhead_s > 0 ? c->launch_overhead_s : DEFAULT_LAUNCH_S; }

double cost_compute_s(const pcc_cluster *c, double flops, double bytes, pcc_dtype dt, bool matmul) {
    double t_flops = flops / peak_for(c, dt, matmul);
    double t_bytes = bytes / c->memory_bandwidth_Bps;
    return (t_flops > t_bytes ? t_flops : t_bytes) + cost_launch_s(c);
}

bool cost_group_crosses_nodes(const pcc_cluster *c, pcc_group_shape g) {
    return g.size > 1 && (int64_t)(g.size - 1) * g.stride + 1 > c->devices_per_node;
}

double cost_group_bandwidth(const pcc_cluster *c, pcc_group_shape g) {
    double intra = c->intra.bandwidth_Bps;
    if (!cost_group_crosses_nodes(c, g)) return intra;
    int per_node = g.stride >= c->devices_per_node ? 1 : c->devices_per_node / g.stride;
    if (per_node > g.size) per_node = g.size;
    double nic = c->network.bandwidth_Bps * c->nics_per_node * per_node / c->devices_per_node;
    return nic < intra ? nic : intra;
}

double cost_collective_s(const pcc_cluster *c, pcc_coll kind, double bytes, pcc_group_shape g) {
    int n = g.size;
    if (n <= 1 || bytes <= 0) return 0;
    double bw = cost_group_bandwidth(c, g);
    double alpha = cost_group_crosses_nodes(c, g) ? c->network.latency_s : c->intra.latency_s;
    double steps = n - 1, frac = (double)(n - 1) / n;
    switch (kind) {
    case PCC_COLL_ALL_REDUCE: return 2 * steps * alpha + 2 * frac * bytes / bw;
    case PCC_COLL_ALL_GATHER:
    case PCC_COLL_REDUCE_SCATTER:
    case PCC_COLL_ALL_TO_ALL: return steps * alpha + frac * bytes / bw;
    case PCC_COLL_BROADCAST: return steps * alpha + bytes / bw;
    case PCC_COLL_SEND_RECV: return alpha + bytes / bw;
    default: PCC_ASSERT(!"bad collective");
    }
}
