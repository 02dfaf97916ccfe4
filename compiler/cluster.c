/*
 * cluster.c: the cluster loader. Reads a cluster file (schemas/cluster.schema.json, documented
 * in schemas/README.md, "The cluster") into a pcc_cluster, and applies the --nodes and
 * --devices overrides of the command line.
 *
 * It checks the file the way model.c checks a model, and reports the first fault as
 * "plancc: FILE:JSON-POINTER: message" (exit code 2 from the driver):
 *   - JSON syntax (line:column), unknown or duplicate keys at every level, missing required
 *     keys, wrong types, non-integral integers, the version (1), the cluster's name;
 *   - ranges: memory, bandwidths and peak FLOP/s above zero, latencies and the launch overhead
 *     zero or more, devices_per_node, nodes and nics_per_node at least 1;
 *   - the enums (device.kind, node.intra.kind, network.kind); a network of kind "none" has no
 *     other keys, and a cluster without a network has one node;
 *   - sources: keys are JSON Pointers of the form /key/key..., values non-empty strings. A
 *     pointer that names nothing in the file only gets a warning: sources are documentation.
 * Figures the file leaves out take the defaults the schema gives: peak FLOP/s of a dtype without
 * a figure is the f32 figure; launch_overhead_s 0 means "the cost model's default"; the
 * efficiencies (device gemm_efficiency and memory_efficiency, each link's efficiency) are 1
 * (stored as 0) and sm_count 0 turns the cost model's GEMM wave model off.
 *
 * The profile: "profile" is a file name (relative to the cluster file) or an object of the same
 * form, a table of measured operator times (schemas/README.md, "The profile"). Its entries are
 * checked like the rest (unknown keys, types, an operator name plancc knows, its input count,
 * integral sizes, seconds above zero, no two entries for the same key) and reported against the
 * file that holds them: "plancc: PROFILE:/entries/3/seconds: ..." for a separate file,
 * "plancc: CLUSTER:/profile/entries/3/seconds: ..." inline. A profile measured on another device
 * (its "device" differs from device.name) is refused. profile_lookup finds an entry by the key
 * cost.c builds for an operator or a GEMM at its per-device shape.
 *
 * Overrides are checked after the file, and reported against the whole file (pointer "") with
 * the flag named. The result always satisfies n_devices == nodes * devices_per_node: --devices
 * on a gpu cluster is either a whole number of nodes or one partial node (devices_per_node then
 * becomes that count), and on a cpu cluster without a network any count is one node of that
 * many ranks (a cpu cluster with one counts nodes as a gpu cluster does).
 *
 * Node groups ("groups", schemas/README.md "Node groups"): each group's nodes, device, node and
 * optional network are checked as above at /groups/N/...; every group's nodes hold the same number
 * of devices of the same kind. The pcc_cluster itself then carries the worst group's figures
 * (merge_groups: least memory, peak and bandwidth, slowest links), so what is decided once for
 * the whole cluster holds on every group, and groups[i] is group i's own view for the stages on
 * it (cluster_stage_view); ranks are numbered node by node, group by group. --nodes and
 * --devices are refused on such a cluster, and so is a profile.
 *
 * Limits: at most 2^20 nodes, 2^16 devices per node in the file and 2^24 devices in all (the
 * device count is an int everywhere downstream). The cJSON tree is freed before cluster_load
 * returns; the cluster lives in the caller's arena.
 */
#include "plancc.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLUSTER_MAX_BYTES ((size_t)1 << 20)
#define MAX_NODES (1 << 20)
#define MAX_DEVICES_PER_NODE (1 << 16)
#define MAX_DEVICES (1 << 24)
#define MAX_MEMORY_BYTES ((int64_t)1 << 53)

#define PROFILE_MAX_BYTES ((size_t)64 << 20)

/* ---- checked figures ---- */

// A finite number above zero (a bandwidth, a peak rate).
static pcc_status num_pos(pcc_jreader *r, const pcc_json *v, const char *ptr, double *out) {
    pcc_status st = json_num(r, v, ptr, -DBL_MAX, DBL_MAX, out);
    if (!st && *out <= 0) return diag(r->file, ptr, "must be greater than 0, got %g", *out);
    return st;
}

// A finite number, zero or more (a latency, an overhead).
static pcc_status num_nonneg(pcc_jreader *r, const pcc_json *v, const char *ptr, double *out) {
    pcc_status st = json_num(r, v, ptr, -DBL_MAX, DBL_MAX, out);
    if (!st && *out < 0) return diag(r->file, ptr, "must be 0 or more, got %g", *out);
    return st;
}

// A fraction in (0, 1] (an efficiency).
static pcc_status num_frac(pcc_jreader *r, const pcc_json *v, const char *ptr, double *out) {
    pcc_status st = num_pos(r, v, ptr, out);
    if (!st && *out > 1) return diag(r->file, ptr, "is a fraction of the peak, at most 1, got %g", *out);
    return st;
}

// An optional member `key` of object v at ptr through fn; absent: *out stays.
static pcc_status opt_num(pcc_jreader *r, const pcc_json *v, const char *ptr, const char *key,
                          pcc_status (*fn)(pcc_jreader *, const pcc_json *, const char *, double *), double *out) {
    const pcc_json *x = json_get(v, key);
    return x ? fn(r, x, json_ptr_key(r, ptr, key), out) : PCC_OK;
}

// A string from `names` (NULL-terminated); *out is its index. `what` names it in the message.
static pcc_status load_enum(pcc_jreader *r, const pcc_json *v, const char *ptr, const char *what,
                            const char *const *names, const char *expected, int *out) {
    const char *s;
    pcc_status st = json_str(r, v, ptr, &s);
    if (st) return st;
    for (int i = 0; names[i]; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return PCC_OK;
        }
    return diag(r->file, ptr, "unknown %s \"%s\" (expected %s)", what, s, expected);
}

/* ---- device ---- */

static pcc_status load_peak_flops(pcc_jreader *r, const pcc_json *v, const char *at, pcc_cluster *c) {
    // Indexed by pcc_math.
    static const char *const keys[] = {"f32", "tf32", "bf16", "f16", NULL};
    static const char *const req[] = {"f32", NULL};
    _Static_assert(PCC_MATH_COUNT == 4, "one key per pcc_math");
    pcc_status st = json_keys(r, v, at, keys, req);
    if (st) return st;
    if ((st = num_pos(r, json_get(v, "f32"), json_ptr_key(r, at, "f32"), &c->peak_flops[PCC_MATH_F32]))) return st;
    for (int m = PCC_MATH_TF32; m < PCC_MATH_COUNT; m++) {
        const pcc_json *x = json_get(v, keys[m]);
        c->peak_flops[m] = c->peak_flops[PCC_MATH_F32];
        if (x && (st = num_pos(r, x, json_ptr_key(r, at, keys[m]), &c->peak_flops[m]))) return st;
    }
    return PCC_OK;
}

// FlashAttention-2's published benchmark (device "flash_benchmark" at `at`): key lengths
// strictly increasing, rows of distinct (head_dim, causal), one TFLOP/s figure per length, each
// above 0 and at most the 16-bit tensor peak (forward and backward together can't exceed it).
static pcc_status load_flash_table(pcc_jreader *r, const pcc_json *v, const char *at, pcc_cluster *c) {
    static const char *const keys[] = {"seq", "rows", NULL};
    static const char *const row_keys[] = {"head_dim", "causal", "tflops", NULL};
    pcc_flash_table *t = &c->flash;
    pcc_status st = json_keys(r, v, at, keys, keys);
    if (st) return st;
    const pcc_json *seq = json_get(v, "seq"), *rows = json_get(v, "rows");
    const char *sp = json_ptr_key(r, at, "seq"), *rp = json_ptr_key(r, at, "rows");
    if ((st = json_expect(r, seq, sp, PCC_J_ARRAY)) || (st = json_expect(r, rows, rp, PCC_J_ARRAY))) return st;
    t->n_seq = json_size(seq), t->n_rows = json_size(rows);
    if (t->n_seq < 1 || t->n_seq > PCC_FLASH_MAX) return diag(r->file, sp, "needs 1 to %d key lengths, got %d", PCC_FLASH_MAX, t->n_seq);
    if (t->n_rows < 1 || t->n_rows > PCC_FLASH_MAX) return diag(r->file, rp, "needs 1 to %d rows, got %d", PCC_FLASH_MAX, t->n_rows);
    for (int i = 0; i < t->n_seq; i++) {
        int64_t n;
        const char *p = json_ptr_idx(r, sp, i);
        if ((st = json_int(r, json_at(seq, i), p, 1, 1 << 30, &n))) return st;
        t->seq[i] = (double)n;
        if (i && t->seq[i] <= t->seq[i - 1]) return diag(r->file, p, "key lengths must increase, got %g after %g", t->seq[i], t->seq[i - 1]);
    }
    double peak = fmax(c->peak_flops[PCC_MATH_BF16], c->peak_flops[PCC_MATH_F16]) / 1e12;
    for (int k = 0; k < t->n_rows; k++) {
        const pcc_json *row = json_at(rows, k), *tf;
        const char *p = json_ptr_idx(r, rp, k), *tp = json_ptr_key(r, p, "tflops");
        int64_t d;
        if ((st = json_keys(r, row, p, row_keys, row_keys))) return st;
        if ((st = json_int(r, json_get(row, "head_dim"), json_ptr_key(r, p, "head_dim"), 1, 4096, &d))) return st;
        if ((st = json_bool(r, json_get(row, "causal"), json_ptr_key(r, p, "causal"), &t->rows[k].causal))) return st;
        t->rows[k].head_dim = (int)d;
        for (int j = 0; j < k; j++)
            if (t->rows[j].head_dim == d && t->rows[j].causal == t->rows[k].causal)
                return diag(r->file, p, "a second row for head_dim %d, causal %s (row %d)", (int)d, t->rows[k].causal ? "true" : "false", j);
        if ((st = json_expect(r, tf = json_get(row, "tflops"), tp, PCC_J_ARRAY))) return st;
        if (json_size(tf) != t->n_seq) return diag(r->file, tp, "needs one figure per key length (%d), got %d", t->n_seq, json_size(tf));
        for (int i = 0; i < t->n_seq; i++) {
            double *x = &t->rows[k].tflops[i];
            const char *q = json_ptr_idx(r, tp, i);
            if ((st = num_pos(r, json_at(tf, i), q, x))) return st;
            if (*x > peak) return diag(r->file, q, "%g TFLOP/s is above the device's 16-bit peak, %g", *x, peak);
        }
    }
    return PCC_OK;
}

// The GEMM tiles (device "gemm_tiles" at `at`): 1 to PCC_FLASH_MAX tiles, each m x n (1 to 4096)
// at a rate in (0, 1] relative to the fastest, no two of one shape.
static pcc_status load_tiles(pcc_jreader *r, const pcc_json *v, const char *at, pcc_cluster *c) {
    static const char *const keys[] = {"m", "n", "rate", NULL};
    pcc_status st = json_expect(r, v, at, PCC_J_ARRAY);
    if (st) return st;
    c->n_tiles = json_size(v);
    if (c->n_tiles < 1 || c->n_tiles > PCC_FLASH_MAX) return diag(r->file, at, "needs 1 to %d tiles, got %d", PCC_FLASH_MAX, c->n_tiles);
    for (int k = 0; k < c->n_tiles; k++) {
        const pcc_json *t = json_at(v, k);
        const char *p = json_ptr_idx(r, at, k);
        int64_t m, n;
        if ((st = json_keys(r, t, p, keys, keys))) return st;
        if ((st = json_int(r, json_get(t, "m"), json_ptr_key(r, p, "m"), 1, 4096, &m))) return st;
        if ((st = json_int(r, json_get(t, "n"), json_ptr_key(r, p, "n"), 1, 4096, &n))) return st;
        if ((st = num_frac(r, json_get(t, "rate"), json_ptr_key(r, p, "rate"), &c->tiles[k].rate))) return st;
        c->tiles[k].m = (int)m, c->tiles[k].n = (int)n;
        for (int j = 0; j < k; j++)
            if (c->tiles[j].m == m && c->tiles[j].n == n) return diag(r->file, p, "a second %dx%d tile (tile %d)", (int)m, (int)n, j);
    }
    return PCC_OK;
}

// The device object v at `at` ("/device", or "/groups/N/device").
static pcc_status load_device(pcc_jreader *r, const pcc_json *v, const char *at, pcc_cluster *c) {
    static const char *const keys[] = {"kind", "name", "memory_bytes", "memory_bandwidth_Bps", "peak_flops",
                                       "launch_overhead_s", "sm_count", "gemm_efficiency", "memory_efficiency", "flash_efficiency", "flash_benchmark", "gemm_tiles", NULL};
    static const char *const req[] = {"kind", "name", "memory_bytes", "memory_bandwidth_Bps", "peak_flops", NULL};
    static const char *const kinds[] = {"gpu", "cpu", NULL};
    pcc_status st = json_keys(r, v, at, keys, req);
    if (st) return st;
    int kind;
    if ((st = load_enum(r, json_get(v, "kind"), json_ptr_key(r, at, "kind"), "device kind", kinds, "gpu or cpu", &kind))) return st;
    c->cpu = kind == 1;
    if ((st = json_str(r, json_get(v, "name"), json_ptr_key(r, at, "name"), &c->device_name))) return st;
    if (!c->device_name[0]) return diag(r->file, json_ptr_key(r, at, "name"), "the device name is empty");
    int64_t mem;
    if ((st = json_int(r, json_get(v, "memory_bytes"), json_ptr_key(r, at, "memory_bytes"), 1, MAX_MEMORY_BYTES, &mem))) return st;
    c->memory_bytes = (double)mem;
    if ((st = num_pos(r, json_get(v, "memory_bandwidth_Bps"), json_ptr_key(r, at, "memory_bandwidth_Bps"), &c->memory_bandwidth_Bps)))
        return st;
    if ((st = load_peak_flops(r, json_get(v, "peak_flops"), json_ptr_key(r, at, "peak_flops"), c))) return st;
    c->launch_overhead_s = c->gemm_efficiency = c->memory_efficiency = c->flash_efficiency = 0;
    if ((st = opt_num(r, v, at, "launch_overhead_s", num_nonneg, &c->launch_overhead_s))) return st;
    if ((st = opt_num(r, v, at, "gemm_efficiency", num_frac, &c->gemm_efficiency))) return st;
    if ((st = opt_num(r, v, at, "memory_efficiency", num_frac, &c->memory_efficiency))) return st;
    if ((st = opt_num(r, v, at, "flash_efficiency", num_frac, &c->flash_efficiency))) return st;
    c->flash.n_seq = c->flash.n_rows = c->n_tiles = 0;
    const pcc_json *tl = json_get(v, "gemm_tiles");
    if (tl && (st = load_tiles(r, tl, json_ptr_key(r, at, "gemm_tiles"), c))) return st;
    const pcc_json *fb = json_get(v, "flash_benchmark");
    if (fb && (st = load_flash_table(r, fb, json_ptr_key(r, at, "flash_benchmark"), c))) return st;
    const pcc_json *x = json_get(v, "sm_count");
    int64_t sms = 0;
    if (x && (st = json_int(r, x, json_ptr_key(r, at, "sm_count"), 1, 1 << 20, &sms))) return st;
    c->sm_count = (int)sms;
    return PCC_OK;
}

/* ---- node and network ---- */

// The node object v at `at` ("/node", or "/groups/N/node").
static pcc_status load_node(pcc_jreader *r, const pcc_json *v, const char *at, pcc_cluster *c) {
    static const char *const keys[] = {"devices_per_node", "intra", NULL};
    static const char *const intra_keys[] = {"kind", "bandwidth_Bps", "latency_s", "efficiency", NULL};
    static const char *const intra_req[] = {"kind", "bandwidth_Bps", "latency_s", NULL};
    static const char *const kinds[] = {"nvlink", "pcie", "shm", NULL};
    static const pcc_link_kind link_of[] = {PCC_LINK_NVLINK, PCC_LINK_PCIE, PCC_LINK_SHM};
    pcc_status st = json_keys(r, v, at, keys, keys);
    if (st) return st;
    int64_t dpn;
    if ((st = json_int(r, json_get(v, "devices_per_node"), json_ptr_key(r, at, "devices_per_node"), 1, MAX_DEVICES_PER_NODE, &dpn)))
        return st;
    c->devices_per_node = (int)dpn;
    const pcc_json *in = json_get(v, "intra");
    const char *ip = json_ptr_key(r, at, "intra");
    if ((st = json_keys(r, in, ip, intra_keys, intra_req))) return st;
    int kind;
    if ((st = load_enum(r, json_get(in, "kind"), json_ptr_key(r, ip, "kind"), "intra-node link kind", kinds,
                        "nvlink, pcie or shm", &kind)))
        return st;
    c->intra.kind = link_of[kind];
    if ((st = num_pos(r, json_get(in, "bandwidth_Bps"), json_ptr_key(r, ip, "bandwidth_Bps"), &c->intra.bandwidth_Bps))) return st;
    if ((st = opt_num(r, in, ip, "efficiency", num_frac, &c->intra.efficiency))) return st;
    return num_nonneg(r, json_get(in, "latency_s"), json_ptr_key(r, ip, "latency_s"), &c->intra.latency_s);
}

// The network object v at `at` (at, or "/groups/N/network").
static pcc_status load_network(pcc_jreader *r, const pcc_json *v, const char *at, pcc_cluster *c) {
    static const char *const keys[] = {"kind", "nics_per_node", "nic_bandwidth_Bps", "latency_s", "efficiency", NULL};
    static const char *const req[] = {"kind", "nics_per_node", "nic_bandwidth_Bps", "latency_s", NULL};
    static const char *const none_keys[] = {"kind", NULL};
    static const char *const kinds[] = {"infiniband", "ethernet", "none", NULL};
    static const pcc_link_kind link_of[] = {PCC_LINK_INFINIBAND, PCC_LINK_ETHERNET, PCC_LINK_NONE};
    pcc_status st = json_expect(r, v, at, PCC_J_OBJECT);
    if (st) return st;
    const pcc_json *k = json_get(v, "kind");
    if (!k) return diag(r->file, at, "missing required key \"kind\"");
    int kind;
    if ((st = load_enum(r, k, json_ptr_key(r, at, "kind"), "network kind", kinds, "infiniband, ethernet or none", &kind))) return st;
    c->network = (pcc_link){.kind = link_of[kind]};
    c->nics_per_node = 0;
    if (c->network.kind == PCC_LINK_NONE) return json_keys(r, v, at, none_keys, none_keys);
    if ((st = json_keys(r, v, at, keys, req))) return st;
    int64_t nics;
    if ((st = json_int(r, json_get(v, "nics_per_node"), json_ptr_key(r, at, "nics_per_node"), 1, MAX_DEVICES_PER_NODE, &nics)))
        return st;
    c->nics_per_node = (int)nics;
    if ((st = num_pos(r, json_get(v, "nic_bandwidth_Bps"), json_ptr_key(r, at, "nic_bandwidth_Bps"), &c->network.bandwidth_Bps)))
        return st;
    if ((st = opt_num(r, v, at, "efficiency", num_frac, &c->network.efficiency))) return st;
    return num_nonneg(r, json_get(v, "latency_s"), json_ptr_key(r, at, "latency_s"), &c->network.latency_s);
}

/* ---- sources ---- */

// The schema's pattern for a source key: ^(/[A-Za-z0-9_]+)+$.
static bool source_key_ok(const char *k) {
    static const char seg[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";
    if (*k != '/') return false;
    while (*k == '/') {
        size_t n = strspn(k + 1, seg);
        if (n == 0) return false;
        k += 1 + n;
    }
    return *k == 0;
}

// Whether pointer k (already known to match source_key_ok) names a node of the document.
static bool source_resolves(pcc_jreader *r, const pcc_json *root, const char *k) {
    const pcc_json *v = root;
    while (*k == '/' && v) {
        size_t n = strcspn(k + 1, "/");
        char *seg = arena_alloc(r->arena, n + 1);
        memcpy(seg, k + 1, n);
        char *end;
        long i = strtol(seg, &end, 10);
        if (json_type(v) == PCC_J_ARRAY) v = *seg && !*end && i >= 0 && i < json_size(v) ? json_at(v, (int)i) : NULL;
        else v = json_type(v) == PCC_J_OBJECT ? json_get(v, seg) : NULL;
        k += 1 + n;
    }
    return v != NULL;
}

// The calibrated device figures' sources are kept (plancc reports where its calibration came from).
static pcc_status load_sources(pcc_jreader *r, const pcc_json *root, const pcc_json *v, pcc_cluster *c) {
    pcc_status st = json_keys(r, v, "/sources", NULL, NULL);
    if (st) return st;
    for (int i = 0; i < json_size(v); i++) {
        const pcc_json *m = json_at(v, i);
        const char *k = json_key(m), *ptr = json_ptr_key(r, "/sources", k), *text;
        if (!source_key_ok(k))
            return diag(r->file, ptr, "\"%s\" is not a JSON Pointer into this file (/key/key..., letters, digits and _)", k);
        if ((st = json_str(r, m, ptr, &text))) return st;
        if (!text[0]) return diag(r->file, ptr, "the source is empty");
        if (!source_resolves(r, root, k)) warn("%s:%s: \"%s\" points at nothing in the file", r->file, ptr, k);
        int gi = -1, at = 0;
        pcc_cluster *to = c;
        if (sscanf(k, "/groups/%d/%n", &gi, &at) == 1 && at > 0 && c->groups && gi >= 0 && gi < c->n_groups) to = &c->groups[gi];
        if (!strcmp(k + at, "/device/gemm_efficiency" + (at > 0))) to->gemm_efficiency_source = text;
        if (!strcmp(k + at, "/device/memory_efficiency" + (at > 0))) to->memory_efficiency_source = text;
        if (!strcmp(k + at, "/device/flash_benchmark" + (at > 0))) to->flash_source = text;
    }
    return PCC_OK;
}

/* ---- the profile: measured operator times ---- */

struct pcc_profile {
    pcc_symtab index;   // key -> entry
    double *seconds;
    int n, cap;
};

double profile_lookup(const pcc_profile *p, const char *key) {
    if (!p) return -1;
    int i = symtab_get(&p->index, key);
    return i < 0 ? -1 : p->seconds[i];
}

int profile_size(const pcc_profile *p) { return p ? p->n : 0; }

static pcc_status load_dtype(pcc_jreader *r, const pcc_json *v, const char *ptr, const char **out) {
    static const char *const names[] = {"f32", "f16", "bf16", "i32", NULL};
    _Static_assert(PCC_DTYPE_COUNT == 4, "one name per dtype");
    int i;
    pcc_status st = load_enum(r, v, ptr, "dtype", names, "f32, f16, bf16 or i32", &i);
    if (!st) *out = names[i];
    return st;
}

// "gemm|bf16|b1|m2048|n3200|k25600", cost.c's key of one GEMM.
static pcc_status gemm_key(pcc_jreader *r, const pcc_json *e, const char *ptr, const char *dtype, const char **key) {
    static const char *const dims[] = {"batch", "m", "n", "k"};
    int64_t v[4] = {1, 0, 0, 0};
    pcc_status st;
    for (int i = 0; i < 4; i++) {
        const pcc_json *x = json_get(e, dims[i]);
        if (!x && i == 0) continue;
        if (!x) return diag(r->file, ptr, "\"%s\" is missing: a gemm entry gives m, n and k (batch defaults to 1)", dims[i]);
        if ((st = json_int(r, x, json_ptr_key(r, ptr, dims[i]), 1, (int64_t)1 << 40, &v[i]))) return st;
    }
    *key = arena_printf(r->arena, "gemm|%s|b%lld|m%lld|n%lld|k%lld", dtype, (long long)v[0], (long long)v[1],
                        (long long)v[2], (long long)v[3]);
    return PCC_OK;
}

// "layernorm|bf16|2048x25600,25600,25600", cost.c's key of an operator at its input shapes.
static pcc_status op_key(pcc_jreader *r, const pcc_json *e, const char *ptr, int op, const char *dtype, const char **key) {
    const pcc_json *sh = json_get(e, "shapes");
    const char *sp = json_ptr_key(r, ptr, "shapes");
    if (!sh) return diag(r->file, ptr, "an entry for operator \"%s\" needs \"shapes\", the per-device shape of each input", pcc_ops[op].name);
    pcc_status st = json_expect(r, sh, sp, PCC_J_ARRAY);
    if (st) return st;
    int n = json_size(sh);
    int lo = pcc_ops[op].in_min, hi = pcc_ops[op].in_max;
    if (n < lo || n > hi)
        return diag(r->file, sp, lo == hi ? "%s takes %d inputs%.0d, got %d shapes" : "%s takes %d to %d inputs, got %d shapes",
                    pcc_ops[op].name, lo, lo == hi ? 0 : hi, n);
    char *k = arena_printf(r->arena, "%s|%s|", pcc_ops[op].name, dtype);
    for (int i = 0; i < n; i++) {
        const pcc_json *s = json_at(sh, i);
        const char *p = json_ptr_idx(r, sp, i);
        if ((st = json_expect(r, s, p, PCC_J_ARRAY))) return st;
        if (json_size(s) > PCC_MAX_RANK) return diag(r->file, p, "rank %d is above the %d plancc supports", json_size(s), PCC_MAX_RANK);
        for (int d = 0; d < json_size(s); d++) {
            int64_t size;
            if ((st = json_int(r, json_at(s, d), json_ptr_idx(r, p, d), 1, (int64_t)1 << 40, &size))) return st;
            k = arena_printf(r->arena, "%s%s%lld", k, d ? "x" : "", (long long)size);
        }
        if (i + 1 < n) k = arena_printf(r->arena, "%s,", k);
    }
    *key = k;
    return PCC_OK;
}

static pcc_status load_entry(pcc_jreader *r, const pcc_json *e, const char *ptr, pcc_profile *p, const char **where) {
    static const char *const keys[] = {"op", "dtype", "batch", "m", "n", "k", "shapes", "seconds", "note", NULL};
    static const char *const req[] = {"op", "dtype", "seconds", NULL};
    pcc_status st = json_keys(r, e, ptr, keys, req);
    if (st) return st;
    const char *name, *dtype, *key = NULL, *note;
    double sec;
    if ((st = json_str(r, json_get(e, "op"), json_ptr_key(r, ptr, "op"), &name))) return st;
    if ((st = load_dtype(r, json_get(e, "dtype"), json_ptr_key(r, ptr, "dtype"), &dtype))) return st;
    if ((st = num_pos(r, json_get(e, "seconds"), json_ptr_key(r, ptr, "seconds"), &sec))) return st;
    const pcc_json *x = json_get(e, "note");
    if (x && (st = json_str(r, x, json_ptr_key(r, ptr, "note"), &note))) return st;
    int op = strcmp(name, "gemm") == 0 ? -1 : op_lookup(name);
    if (op < 0 && strcmp(name, "gemm") != 0)
        return diag(r->file, json_ptr_key(r, ptr, "op"), "unknown operator \"%s\" (an operator of runtime/ops.def, or \"gemm\")", name);
    bool gemm_keys = json_get(e, "batch") || json_get(e, "m") || json_get(e, "n") || json_get(e, "k");
    if (op >= 0 && gemm_keys)
        return diag(r->file, ptr, "batch, m, n and k belong to \"gemm\" entries; operator \"%s\" gives \"shapes\"", name);
    if (op < 0 && json_get(e, "shapes")) return diag(r->file, json_ptr_key(r, ptr, "shapes"), "a gemm entry gives batch, m, n and k, not shapes");
    st = op < 0 ? gemm_key(r, e, ptr, dtype, &key) : op_key(r, e, ptr, op, dtype, &key);
    if (st) return st;
    int i = p->n;
    if (!symtab_put(&p->index, r->arena, key, i))
        return diag(r->file, ptr, "the same %s as %s (each shape is measured once)", op < 0 ? "gemm shape" : "operator and input shapes",
                    where[symtab_get(&p->index, key)]);
    *VEC_PUSH(r->arena, p->seconds, p->n, p->cap) = sec;
    where[i] = ptr;
    return PCC_OK;
}

// The profile document (or the inline object) v at ptr ("" or "/profile").
static pcc_status load_profile_doc(pcc_jreader *r, const pcc_json *v, const char *ptr, const pcc_cluster *c, pcc_profile **out) {
    static const char *const keys[] = {"version", "device", "description", "entries", NULL};
    static const char *const req[] = {"version", "device", "entries", NULL};
    pcc_status st = json_keys(r, v, ptr, keys, req);
    if (st) return st;
    int64_t version;
    const char *dev, *desc;
    if ((st = json_int(r, json_get(v, "version"), json_ptr_key(r, ptr, "version"), 0, INT32_MAX, &version))) return st;
    if (version != 1)
        return diag(r->file, json_ptr_key(r, ptr, "version"), "unsupported profile format version %lld (this plancc reads version 1)",
                    (long long)version);
    if ((st = json_str(r, json_get(v, "device"), json_ptr_key(r, ptr, "device"), &dev))) return st;
    if (strcmp(dev, c->device_name) != 0)
        return diag(r->file, json_ptr_key(r, ptr, "device"), "measured on \"%s\", but the cluster's device is \"%s\"", dev, c->device_name);
    const pcc_json *x = json_get(v, "description");
    if (x && (st = json_str(r, x, json_ptr_key(r, ptr, "description"), &desc))) return st;
    const pcc_json *es = json_get(v, "entries");
    const char *ep = json_ptr_key(r, ptr, "entries");
    if ((st = json_expect(r, es, ep, PCC_J_ARRAY))) return st;
    pcc_profile *p = arena_alloc(r->arena, sizeof *p);
    symtab_init(&p->index, r->arena, json_size(es) + 1);
    const char **where = arena_alloc(r->arena, sizeof(char *) * (size_t)(json_size(es) + 1));
    for (int i = 0; i < json_size(es); i++)
        if ((st = load_entry(r, json_at(es, i), json_ptr_idx(r, ep, i), p, where))) return st;
    *out = p;
    return PCC_OK;
}

// The file named by "profile": relative to the cluster file's directory unless absolute.
static const char *profile_path(pcc_arena *a, const char *cluster_file, const char *name) {
    const char *slash = strrchr(cluster_file, '/');
    if (name[0] == '/' || !slash) return name;
    return arena_printf(a, "%.*s/%s", (int)(slash - cluster_file), cluster_file, name);
}

static pcc_status load_profile(pcc_jreader *r, const pcc_json *v, pcc_cluster *c) {
    pcc_profile *p = NULL;
    pcc_status st;
    if (json_type(v) == PCC_J_OBJECT) {
        st = load_profile_doc(r, v, "/profile", c, &p);
        c->profile = p;
        return st;
    }
    const char *name;
    if (json_type(v) != PCC_J_STRING)
        return diag(r->file, "/profile", "expected a file name or a profile object, got %s", json_type_name(json_type(v)));
    if ((st = json_str(r, v, "/profile", &name))) return st;
    if (!name[0]) return diag(r->file, "/profile", "the profile's file name is empty");
    const char *path = profile_path(r->arena, r->file, name);
    FILE *f = fopen(path, "rb");
    if (!f) return diag(r->file, "/profile", "cannot open the profile \"%s\": %s", path, strerror(errno));
    fclose(f);
    char *text;
    size_t len;
    if ((st = file_read_all(r->arena, path, &text, &len, PROFILE_MAX_BYTES))) return st;
    pcc_jreader pr;
    pcc_json *root;
    if ((st = json_open(&pr, r->arena, path, text, len, &root))) return st;
    st = load_profile_doc(&pr, root, "", c, &p);
    json_close(&pr);
    c->profile = p;
    return st;
}

/* ---- the document ---- */

/* ---- node groups ---- */

#define MAX_GROUPS 64

// The worse of two fractions of a peak (0 stands for 1, "not given").
static double worse_frac(double a, double b) {
    a = a > 0 ? a : 1, b = b > 0 ? b : 1;
    return a < b ? a : b;
}

// The slower of two links: the lower sustained bandwidth, the higher latency.
static pcc_link worse_link(pcc_link a, pcc_link b) {
    double ea = a.efficiency > 0 ? a.efficiency : 1, eb = b.efficiency > 0 ? b.efficiency : 1;
    pcc_link w = a.bandwidth_Bps * ea <= b.bandwidth_Bps * eb ? a : b;
    w.latency_s = a.latency_s > b.latency_s ? a.latency_s : b.latency_s;
    return w;
}

// The cluster as a whole, from its groups: every figure the worst group's (the least memory,
// bandwidth and peak, the slowest links, the longest launch), so that a cost or a memory check
// made on it holds on every group. The device is named after all of them ("A + B").
static void merge_groups(pcc_arena *a, pcc_cluster *c) {
    const pcc_cluster *g0 = &c->groups[0];
    int nodes = 0;
    for (int i = 0; i < c->n_groups; i++) nodes += c->groups[i].nodes;
    c->cpu = g0->cpu, c->devices_per_node = g0->devices_per_node, c->nodes = nodes;
    c->device_name = g0->device_name, c->memory_bytes = g0->memory_bytes, c->memory_bandwidth_Bps = g0->memory_bandwidth_Bps;
    memcpy(c->peak_flops, g0->peak_flops, sizeof c->peak_flops);
    c->launch_overhead_s = g0->launch_overhead_s, c->sm_count = g0->sm_count;
    c->gemm_efficiency = g0->gemm_efficiency, c->memory_efficiency = g0->memory_efficiency, c->flash_efficiency = g0->flash_efficiency;
    c->intra = g0->intra, c->network = g0->network, c->nics_per_node = g0->nics_per_node;
    c->flash = g0->flash, c->flash_source = g0->flash_source, c->n_tiles = g0->n_tiles;
    memcpy(c->tiles, g0->tiles, sizeof c->tiles);
    for (int i = 1; i < c->n_groups; i++) {
        const pcc_cluster *g = &c->groups[i];
        if (g->peak_flops[PCC_MATH_BF16] < c->peak_flops[PCC_MATH_BF16]) // the slowest device's benchmark
            c->flash = g->flash, c->flash_source = g->flash_source, c->n_tiles = g->n_tiles, memcpy(c->tiles, g->tiles, sizeof c->tiles);
        bool seen = false;
        for (int j = 0; j < i; j++) seen |= strcmp(c->groups[j].device_name, g->device_name) == 0;
        if (!seen) c->device_name = arena_printf(a, "%s + %s", c->device_name, g->device_name);
        c->memory_bytes = fmin(c->memory_bytes, g->memory_bytes);
        c->memory_bandwidth_Bps = fmin(c->memory_bandwidth_Bps, g->memory_bandwidth_Bps);
        for (int m = 0; m < PCC_MATH_COUNT; m++) c->peak_flops[m] = fmin(c->peak_flops[m], g->peak_flops[m]);
        c->launch_overhead_s = fmax(c->launch_overhead_s, g->launch_overhead_s);
        c->sm_count = c->sm_count && g->sm_count ? (c->sm_count < g->sm_count ? c->sm_count : g->sm_count) : 0;
        c->gemm_efficiency = worse_frac(c->gemm_efficiency, g->gemm_efficiency);
        c->memory_efficiency = worse_frac(c->memory_efficiency, g->memory_efficiency);
        c->flash_efficiency = worse_frac(c->flash_efficiency, g->flash_efficiency);
        c->intra = worse_link(c->intra, g->intra);
        c->network = worse_link(c->network, g->network);
        c->nics_per_node = c->nics_per_node < g->nics_per_node ? c->nics_per_node : g->nics_per_node;
    }
}

// Group i (v at ptr): its nodes, device and node, and its own network where it gives one (else
// the cluster's, in *g already).
static pcc_status load_group(pcc_jreader *r, const pcc_json *v, const char *ptr, pcc_cluster *g) {
    static const char *const keys[] = {"nodes", "device", "node", "network", NULL};
    static const char *const req[] = {"nodes", "device", "node", NULL};
    pcc_status st = json_keys(r, v, ptr, keys, req);
    if (st) return st;
    int64_t nodes;
    if ((st = json_int(r, json_get(v, "nodes"), json_ptr_key(r, ptr, "nodes"), 1, MAX_NODES, &nodes))) return st;
    g->nodes = (int)nodes;
    if ((st = load_device(r, json_get(v, "device"), json_ptr_key(r, ptr, "device"), g))) return st;
    if ((st = load_node(r, json_get(v, "node"), json_ptr_key(r, ptr, "node"), g))) return st;
    const pcc_json *x = json_get(v, "network");
    const char *np = json_ptr_key(r, ptr, "network");
    if (x && (st = load_network(r, x, np, g))) return st;
    if (x && g->network.kind == PCC_LINK_NONE)
        return diag(r->file, json_ptr_key(r, np, "kind"), "a group's own network links its nodes to the others: not \"none\"");
    return PCC_OK;
}

// "groups": node groups of one kind of device each, ranks numbered node by node, group by group.
// Every group's nodes hold the same number of devices (the mesh's tp stays inside a node) of the
// same kind (gpu or cpu); more than one node in all needs a network.
static pcc_status load_groups(pcc_jreader *r, const pcc_json *root, const pcc_json *v, pcc_cluster *c) {
    static const char *const single[] = {"device", "node", "nodes", NULL};
    for (int i = 0; single[i]; i++)
        if (json_get(root, single[i]))
            return diag(r->file, json_ptr_key(r, "", single[i]), "a cluster gives either \"groups\" or \"device\", \"node\" "
                        "and \"nodes\", not both: a group holds its own nodes, device and node");
    pcc_status st = json_expect(r, v, "/groups", PCC_J_ARRAY);
    if (st) return st;
    int n = json_size(v);
    if (n < 1 || n > MAX_GROUPS) return diag(r->file, "/groups", "%d groups: a cluster has 1 to %d node groups", n, MAX_GROUPS);
    if ((st = load_network(r, json_get(root, "network"), "/network", c))) return st;
    c->n_groups = n;
    c->groups = arena_alloc(r->arena, sizeof(pcc_cluster) * (size_t)n);
    c->group_first = arena_alloc(r->arena, sizeof(int) * (size_t)(n + 1));
    int64_t devices = 0;
    for (int i = 0; i < n; i++) {
        pcc_cluster *g = &c->groups[i];
        const char *ptr = json_ptr_idx(r, "/groups", i);
        *g = *c;
        g->groups = NULL, g->group_first = NULL, g->n_groups = 1;
        if ((st = load_group(r, json_at(v, i), ptr, g))) return st;
        if (g->cpu != c->groups[0].cpu)
            return diag(r->file, json_ptr_key(r, json_ptr_key(r, ptr, "device"), "kind"), "\"%s\", but group 0's devices are "
                        "\"%s\": the groups of one cluster are all gpu or all cpu", g->cpu ? "cpu" : "gpu", g->cpu ? "gpu" : "cpu");
        if (g->devices_per_node != c->groups[0].devices_per_node)
            return diag(r->file, json_ptr_key(r, json_ptr_key(r, ptr, "node"), "devices_per_node"), "%d, but group 0's nodes hold "
                        "%d: every group's nodes hold the same number of devices (tensor parallelism stays inside a node)",
                        g->devices_per_node, c->groups[0].devices_per_node);
        g->n_devices = g->nodes * g->devices_per_node;
        c->group_first[i] = (int)devices;
        devices += g->n_devices;
        if (devices > MAX_DEVICES)
            return diag(r->file, ptr, "the groups up to this one hold %lld devices, more than the %d plancc supports",
                        (long long)devices, MAX_DEVICES);
    }
    c->group_first[n] = (int)devices;
    merge_groups(r->arena, c);
    if (c->network.kind == PCC_LINK_NONE && c->nodes > 1)
        return diag(r->file, "/network/kind", "the groups have %d nodes in all, but a cluster without a network has one node", c->nodes);
    return PCC_OK;
}

// The single form's device, node and network at the top level.
static pcc_status load_single(pcc_jreader *r, const pcc_json *root, pcc_cluster *c) {
    static const char *const need[] = {"device", "node", NULL};
    for (int i = 0; need[i]; i++)
        if (!json_get(root, need[i])) return diag(r->file, "", "missing required key \"%s\" (or \"groups\")", need[i]);
    int64_t nodes = 1;
    const pcc_json *x = json_get(root, "nodes");
    pcc_status st;
    if (x && (st = json_int(r, x, "/nodes", 1, MAX_NODES, &nodes))) return st;
    c->nodes = (int)nodes;
    if ((st = load_device(r, json_get(root, "device"), "/device", c))) return st;
    if ((st = load_node(r, json_get(root, "node"), "/node", c))) return st;
    if ((st = load_network(r, json_get(root, "network"), "/network", c))) return st;
    if (c->network.kind == PCC_LINK_NONE && c->nodes > 1)
        return diag(r->file, "/nodes", "%d nodes, but a cluster without a network (network.kind \"none\") has one node", c->nodes);
    c->n_groups = 1;
    return PCC_OK;
}

static pcc_status load_root(pcc_jreader *r, const pcc_json *root, pcc_cluster *c) {
    static const char *const keys[] = {"version", "name", "description", "nodes", "device", "node", "network", "groups",
                                       "profile", "sources", NULL};
    static const char *const req[] = {"version", "name", "network", NULL};
    if (json_type(root) == PCC_J_OBJECT && !json_get(root, "node") && !json_get(root, "groups") &&
        (json_get(root, "ops") || json_get(root, "tensors")))
        return diag(r->file, "", "this is a model, not a cluster (it has \"%s\"): --cluster wants a cluster such as "
                    "models/clusters/dgx-a100.json, or the name of an installed one (dgx-a100)", json_get(root, "ops") ? "ops" : "tensors");
    pcc_status st = json_keys(r, root, "", keys, req);
    if (st) return st;
    int64_t version;
    if ((st = json_int(r, json_get(root, "version"), "/version", 0, INT32_MAX, &version))) return st;
    if (version != 1)
        return diag(r->file, "/version", "unsupported cluster format version %lld (this plancc reads version 1)", (long long)version);
    if ((st = json_name(r, json_get(root, "name"), "/name", &c->name))) return st;
    const pcc_json *x;
    const char *desc;
    if ((x = json_get(root, "description")) && (st = json_str(r, x, "/description", &desc))) return st;
    if ((x = json_get(root, "groups"))) st = load_groups(r, root, x, c);
    else st = load_single(r, root, c);
    if (st) return st;
    if ((x = json_get(root, "profile")) && c->groups)
        return diag(r->file, "/profile", "a profile is measured on one kind of device; a cluster of node groups takes none");
    if ((x = json_get(root, "profile")) && (st = load_profile(r, x, c))) return st;
    if ((x = json_get(root, "sources")) && (st = load_sources(r, root, x, c))) return st;
    return PCC_OK;
}

/* ---- --nodes and --devices ---- */

// The node count and node size that `devices` devices make on cluster c; PCC_ERR_INPUT (reported)
// when they make none.
static pcc_status devices_shape(const pcc_cluster *c, int devices, int *nodes, int *per_node) {
    int dpn = c->devices_per_node;
    bool one_node = c->cpu && c->network.kind == PCC_LINK_NONE;
    if (one_node || devices < dpn) {
        *nodes = 1, *per_node = devices;
        return PCC_OK;
    }
    if (devices % dpn != 0)
        return diag(c->file, "", "--devices %d is not a whole number of nodes (%d devices each) nor fewer than one node; "
                    "use 1 to %d, or a multiple of %d", devices, dpn, dpn - 1, dpn);
    *nodes = devices / dpn, *per_node = dpn;
    if (*nodes > 1 && c->network.kind == PCC_LINK_NONE)
        return diag(c->file, "", "--devices %d needs %d nodes of %d, but the cluster has no network between nodes "
                    "(network.kind \"none\"): at most %d devices", devices, *nodes, dpn, dpn);
    return PCC_OK;
}

static pcc_status apply_overrides(pcc_arena *a, pcc_cluster *c, int nodes, int devices) {
    if (c->groups && (nodes > 0 || devices > 0)) // each group's nodes are the file's
        return diag(c->file, "/groups", "%s: the cluster has %d node groups of different devices; set each group's \"nodes\" "
                    "in the file (--nodes and --devices resize a cluster of one kind of node)", nodes > 0 ? "--nodes" : "--devices",
                    c->n_groups);
    if (c->groups) {
        c->n_devices = c->group_first[c->n_groups];
        return PCC_OK;
    }
    if (nodes > 1 && c->network.kind == PCC_LINK_NONE)
        return diag(c->file, "", "--nodes %d: the cluster has no network between nodes (network.kind \"none\"), so it is "
                    "one node", nodes);
    int n = nodes > 0 ? nodes : c->nodes, per_node = c->devices_per_node;
    if (devices > 0) {
        int dn = 0;
        pcc_status st = devices_shape(c, devices, &dn, &per_node);
        if (st) return st;
        if (nodes > 0 && nodes != dn && c->cpu && c->network.kind == PCC_LINK_NONE)
            return diag(c->file, "", "--nodes %d and --devices %d disagree: on a cpu cluster --devices sets the ranks "
                        "of one node", nodes, devices);
        if (nodes > 0 && nodes != dn)
            return diag(c->file, "", "--nodes %d and --devices %d disagree: %d devices are %s (%d devices each)", nodes,
                        devices, devices, per_node < c->devices_per_node ? "part of one node" :
                        dn == 1 ? "one node" : arena_printf(a, "%d nodes", dn), c->devices_per_node);
        n = dn;
    }
    if ((int64_t)n * per_node > MAX_DEVICES)
        return diag(c->file, nodes > 0 || devices > 0 ? "" : "/nodes", "%d nodes of %d devices are more than the %d "
                    "devices plancc supports", n, per_node, MAX_DEVICES);
    c->nodes = n, c->devices_per_node = per_node, c->n_devices = n * per_node;
    return PCC_OK;
}

pcc_status cluster_load(pcc_arena *a, const char *path, int nodes, int devices, pcc_cluster **out) {
    *out = NULL;
    char *text;
    size_t len;
    pcc_status st = file_read_all(a, path, &text, &len, CLUSTER_MAX_BYTES);
    if (st) return st;
    pcc_cluster *c = arena_alloc(a, sizeof *c);
    c->file = arena_strdup(a, path);
    pcc_jreader r;
    pcc_json *root;
    if ((st = json_open(&r, a, path, text, len, &root))) return st;
    st = load_root(&r, root, c);
    json_close(&r);
    if (!st) st = apply_overrides(a, c, nodes, devices);
    if (st) return st;
    *out = c;
    return PCC_OK;
}

/* ---- the groups' views ---- */

const pcc_cluster *cluster_span_view(const pcc_cluster *c, int lo, int hi) {
    if (!c->groups) return c;
    for (int i = 0; i < c->n_groups; i++)
        if (c->group_first[i] <= lo && hi <= c->group_first[i + 1]) return &c->groups[i];
    return NULL;
}

const pcc_cluster *cluster_stage_view(const pcc_cluster *c, int pp, int d) {
    int per = c->n_devices / pp;
    return cluster_span_view(c, d * per, (d + 1) * per);
}

bool cluster_stages_fit(const pcc_cluster *c, int pp) {
    for (int d = 0; d < pp; d++)
        if (!cluster_stage_view(c, pp, d)) return false;
    return true;
}

void cluster_set_tf32(pcc_cluster *c, bool tf32) {
    c->tf32 = tf32;
    for (int i = 0; c->groups && i < c->n_groups; i++) c->groups[i].tf32 = tf32;
}
