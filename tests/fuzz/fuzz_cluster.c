/*
 * fuzz_cluster.c: libFuzzer harness for the cluster loader (compiler/cluster.c), with and
 * without --devices. Seeds: models/clusters/*.json and tests/bad_cluster/*.json.
 */
#include "plancc.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n > (1u << 20) || !fuzz_write(data, n)) return 0;
    pcc_quiet = true;
    pcc_arena *a = arena_init();
    pcc_cluster *c = NULL;
    cluster_load(a, fuzz_path(), 0, 0, &c);
    arena_free(a);
    a = arena_init();
    cluster_load(a, fuzz_path(), 0, 2, &c);
    arena_free(a);
    return 0;
}
