/*
 * fuzz_compile.c: libFuzzer harness for the compile phases after --check: a model (the input)
 * that the front end accepts is compiled on two CPU devices (models/clusters/cpu.json) as
 * plancc --devices 2 --dp 2 would: phase 1 (transform), phase 2 (the search and the ILP, with
 * a short time limit), phase 3 (preserve), the memory planner, the emitter and plan_check.
 * A plan the compiler emits must pass plan_check (an abort here is a compiler bug). Seeds:
 * models/*.json small enough to compile in milliseconds.
 */
#include "plancc.h"
#include "fuzz_common.h"
#include "fuzz_phases.h"

#include <getopt.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n > (1u << 16) || !fuzz_write(data, n)) return 0;
    char cluster[1024];
    snprintf(cluster, sizeof cluster, "%s/models/clusters/cpu.json", FUZZ_SRC_ROOT);
    char *argv[] = {"plancc", (char *)fuzz_path(), "--cluster", cluster, "--devices", "2", "--dp", "2", "--time-limit", "1",
                    "-q", "-o", "/dev/null", NULL};
    pcc_options o;
    bool done;
    optind = 0;
    pcc_quiet = true;
    if (options_parse(13, argv, &o, &done) || done) return 0;
    pcc_arena *a = arena_init();
    pcc_graph *g = NULL;
    pcc_cluster *c = NULL;
    pcc_status st = model_load(a, o.model, &g);
    if (!st) st = batch_apply(g, &o.batch);
    if (!st) st = graph_check(g);
    if (!st) st = autodiff(g);
    if (!st) st = graph_check(g);
    if (!st) st = cluster_load(a, o.cluster, o.nodes, o.devices, &c);
    if (!st) fuzz_phases(a, &o, g, c);
    arena_free(a);
    return 0;
}
