/*
 * unit_cluster.c: unit tests of the cluster loader (cluster.c): the figures of every file in
 * models/clusters/, the defaults the schema gives, the --nodes/--devices arithmetic and its
 * refusals. The source root is argv[1]. Refusals print their diagnostic on stderr (announced).
 */
#include "plancc.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static const char *root;

static pcc_status load(pcc_arena *a, const char *name, int nodes, int devices, pcc_cluster **c) {
    char *path = arena_printf(a, "%s/models/clusters/%s", root, name);
    return cluster_load(a, path, nodes, devices, c);
}

// Writes `text` to a temporary file and loads it with the given overrides.
static pcc_status load_text(pcc_arena *a, const char *text, int nodes, int devices, pcc_cluster **c) {
    char path[] = "/tmp/plancc-unit-cluster-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return PCC_ERR_INTERNAL;
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    pcc_status st = cluster_load(a, path, nodes, devices, c);
    remove(path);
    return st;
}

// Every file in models/clusters/ loads, and what it loads is self-consistent.
static void test_every_file(void) {
    pcc_arena *a = arena_init();
    DIR *d = opendir(arena_printf(a, "%s/models/clusters", root));
    EXPECT(d != NULL);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        pcc_cluster *c = NULL;
        EXPECT(load(a, e->d_name, 0, 0, &c) == PCC_OK && c);
        if (!c) continue;
        n++;
        EXPECT(c->n_devices == c->nodes * c->devices_per_node && c->n_devices >= 1);
        EXPECT(c->memory_bytes >= 1 && c->memory_bandwidth_Bps > 0 && c->intra.bandwidth_Bps > 0);
        for (int m = 0; m < PCC_MATH_COUNT; m++) EXPECT(c->peak_flops[m] >= c->peak_flops[PCC_MATH_F32]);
        EXPECT((c->network.kind == PCC_LINK_NONE) == (c->nics_per_node == 0));
    }
    if (d) closedir(d);
    EXPECT(n >= 3);
    arena_free(a);
}

static void test_dgx_a100(void) {
    pcc_arena *a = arena_init();
    pcc_cluster *c = NULL;
    EXPECT(load(a, "dgx-a100.json", 0, 0, &c) == PCC_OK && c);
    if (!c) goto out;
    EXPECT(strcmp(c->name, "dgx-a100") == 0 && !c->cpu);
    EXPECT(strcmp(c->device_name, "NVIDIA A100-SXM4-80GB") == 0);
    EXPECT(c->nodes == 1 && c->devices_per_node == 8 && c->n_devices == 8);
    EXPECT(c->memory_bytes == 80e9 && c->memory_bandwidth_Bps == 2.039e12);
    EXPECT(c->peak_flops[PCC_MATH_F32] == 19.5e12 && c->peak_flops[PCC_MATH_TF32] == 156e12);
    EXPECT(c->peak_flops[PCC_MATH_BF16] == 312e12 && c->peak_flops[PCC_MATH_F16] == 312e12);
    EXPECT(c->intra.kind == PCC_LINK_NVLINK && c->intra.bandwidth_Bps == 300e9 && c->intra.latency_s == 0.6e-6);
    EXPECT(c->network.kind == PCC_LINK_INFINIBAND && c->nics_per_node == 8);
    EXPECT(c->network.bandwidth_Bps == 25e9 && c->network.latency_s == 2.7e-6);
    EXPECT(c->launch_overhead_s == 0);
out:
    arena_free(a);
}

static void test_dgx_h100_and_cpu(void) {
    pcc_arena *a = arena_init();
    pcc_cluster *h = NULL, *c = NULL;
    EXPECT(load(a, "dgx-h100.json", 0, 0, &h) == PCC_OK && h);
    if (h) {
        EXPECT(h->n_devices == 8 && h->memory_bytes == 80e9 && h->peak_flops[PCC_MATH_BF16] == 989.4e12);
        EXPECT(h->intra.bandwidth_Bps == 450e9 && h->network.bandwidth_Bps == 50e9);
    }
    EXPECT(load(a, "cpu.json", 0, 0, &c) == PCC_OK && c);
    if (c) {
        EXPECT(c->cpu && c->nodes == 1 && c->devices_per_node == 8 && c->n_devices == 8);
        EXPECT(c->memory_bytes == 4294967296.0 && c->intra.kind == PCC_LINK_SHM);
        EXPECT(c->network.kind == PCC_LINK_NONE && c->nics_per_node == 0);
        // Only f32 is given: every other dtype runs at the f32 figure.
        for (int m = 0; m < PCC_MATH_COUNT; m++) EXPECT(c->peak_flops[m] == 72e9);
    }
    arena_free(a);
}

static void test_overrides(void) {
    pcc_arena *a = arena_init();
    pcc_cluster *c;
    EXPECT(load(a, "dgx-a100.json", 128, 0, &c) == PCC_OK && c->nodes == 128 && c->n_devices == 1024);
    EXPECT(load(a, "dgx-a100.json", 0, 4, &c) == PCC_OK && c->nodes == 1 && c->devices_per_node == 4 && c->n_devices == 4);
    EXPECT(load(a, "dgx-a100.json", 0, 8, &c) == PCC_OK && c->nodes == 1 && c->devices_per_node == 8);
    EXPECT(load(a, "dgx-a100.json", 0, 64, &c) == PCC_OK && c->nodes == 8 && c->devices_per_node == 8 && c->n_devices == 64);
    EXPECT(load(a, "dgx-a100.json", 4, 32, &c) == PCC_OK && c->nodes == 4 && c->n_devices == 32);
    EXPECT(load(a, "dgx-a100.json", 1, 3, &c) == PCC_OK && c->nodes == 1 && c->n_devices == 3);
    EXPECT(load(a, "cpu.json", 0, 3, &c) == PCC_OK && c->nodes == 1 && c->devices_per_node == 3 && c->n_devices == 3);
    EXPECT(load(a, "cpu.json", 0, 20, &c) == PCC_OK && c->nodes == 1 && c->n_devices == 20);
    EXPECT(load(a, "cpu.json", 1, 1, &c) == PCC_OK && c->n_devices == 1);
    EXPECT(load(a, "cpu.json", 1, 0, &c) == PCC_OK && c->n_devices == 8);
    arena_free(a);
}

static void test_refusals(void) {
    pcc_arena *a = arena_init();
    static pcc_cluster dummy;
    pcc_cluster *c = &dummy; // not NULL, so the test sees cluster_load clear it
    fprintf(stderr, "(8 expected diagnostics follow)\n");
    EXPECT(load(a, "dgx-a100.json", 0, 12, &c) == PCC_ERR_INPUT && c == NULL); // not whole nodes
    EXPECT(load(a, "dgx-a100.json", 2, 4, &c) == PCC_ERR_INPUT);               // 4 devices are not 2 nodes
    EXPECT(load(a, "dgx-a100.json", 3, 16, &c) == PCC_ERR_INPUT);              // 16 devices are 2 nodes
    EXPECT(load(a, "cpu.json", 2, 0, &c) == PCC_ERR_INPUT);                    // no network: one node
    EXPECT(load(a, "cpu.json", 2, 6, &c) == PCC_ERR_INPUT);
    // A gpu cluster without a network takes at most one node's devices.
    const char *box = "{\"version\": 1, \"name\": \"box\", \"device\": {\"kind\": \"gpu\", \"name\": \"g\", "
                      "\"memory_bytes\": 1000, \"memory_bandwidth_Bps\": 1e9, \"peak_flops\": {\"f32\": 1e12, \"bf16\": 4e12}}, "
                      "\"node\": {\"devices_per_node\": 4, \"intra\": {\"kind\": \"pcie\", \"bandwidth_Bps\": 1e10, \"latency_s\": 0}}, "
                      "\"network\": {\"kind\": \"none\"}}";
    EXPECT(load_text(a, box, 0, 8, &c) == PCC_ERR_INPUT);
    // At most 2^24 devices in all.
    const char *wide = "{\"version\": 1, \"name\": \"wide\", \"device\": {\"kind\": \"gpu\", \"name\": \"g\", "
                       "\"memory_bytes\": 1000, \"memory_bandwidth_Bps\": 1e9, \"peak_flops\": {\"f32\": 1e12}}, "
                       "\"node\": {\"devices_per_node\": 64, \"intra\": {\"kind\": \"nvlink\", \"bandwidth_Bps\": 1e10, \"latency_s\": 0}}, "
                       "\"network\": {\"kind\": \"ethernet\", \"nics_per_node\": 1, \"nic_bandwidth_Bps\": 1e9, \"latency_s\": 1e-5}}";
    EXPECT(load_text(a, wide, 1 << 20, 0, &c) == PCC_ERR_INPUT);
    EXPECT(load_text(a, wide, 1 << 18, 0, &c) == PCC_OK && c->n_devices == 1 << 24 && c->network.kind == PCC_LINK_ETHERNET);
    EXPECT(load_text(a, box, 0, 0, &c) == PCC_OK && c->n_devices == 4 && c->intra.kind == PCC_LINK_PCIE);
    EXPECT(load_text(a, box, 0, 2, &c) == PCC_OK && c->n_devices == 2);
    // Defaults: tf32 and f16 absent run at f32; bf16 as given; nodes absent is 1.
    EXPECT(c->peak_flops[PCC_MATH_TF32] == 1e12 && c->peak_flops[PCC_MATH_F16] == 1e12 && c->peak_flops[PCC_MATH_BF16] == 4e12);
    EXPECT(c->nodes == 1);
    EXPECT(load(a, "no-such-cluster.json", 0, 0, &c) == PCC_ERR_INPUT && c == NULL);
    arena_free(a);
}

int main(int argc, char **argv) {
    root = argc > 1 ? argv[1] : ".";
    test_every_file();
    test_dgx_a100();
    test_dgx_h100_and_cpu();
    test_overrides();
    test_refusals();
    return test_summary();
}
