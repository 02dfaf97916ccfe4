/*
 * fuzz_policy.c: libFuzzer harness for user policies (--policy FILE, compiler/policy.c): the input
 * is the policy, applied to gpt-tiny on 8 CPU devices (models/clusters/cpu.json) with two
 * micro-batches as plancc --policy would: the policy read onto the options, the model through the
 * front end (a co-shard pin rewrites it), the rules bound to its operators, then phase 2 (a short
 * time limit), phase 3 (interlaced operators' phases included), the memory planner, the emitter
 * and plan_check. A refusal is fine; a crash, a sanitizer report or a plan that plan_check refuses
 * (an abort here) is a bug. Seeds: the example policies of gpt-tiny and the bad-policy corpus.
 */
#include "plancc.h"
#include "coshard.h"
#include "policy.h"
#include "fuzz_common.h"
#include "fuzz_phases.h"

#include <getopt.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n > (1u << 16) || !fuzz_write(data, n)) return 0;
    char model[1024], cluster[1024];
    snprintf(model, sizeof model, "%s/models/gpt-tiny.json", FUZZ_SRC_ROOT);
    snprintf(cluster, sizeof cluster, "%s/models/clusters/cpu.json", FUZZ_SRC_ROOT);
    char *argv[] = {"plancc", model, "--cluster", cluster, "--devices", "8", "--micro-batches", "2", "--policy", (char *)fuzz_path(),
                    "--time-limit", "1", "-q", "-o", "/dev/null", NULL};
    pcc_options o;
    bool done;
    optind = 0;
    pcc_quiet = true;
    if (options_parse(15, argv, &o, &done) || done) return 0;
    o.search.deadline_s = clock_cpu_s() + o.search.ilp.time_limit_s; // as main.c's compile
    o.search.preserve = &o.preserve;
    pcc_arena *a = arena_init();
    pcc_graph *g = NULL;
    pcc_cluster *c = NULL;
    pcc_status st = policy_read(a, &o);
    if (!st) st = model_load(a, o.model, &g);
    if (!st) st = options_apply_model(&o, g);
    if (!st) st = batch_apply(g, &o.batch);
    if (!st) st = coshard_apply(g, &o);
    if (!st) st = graph_check(g);
    if (!st) st = autodiff(g);
    if (!st) st = graph_check(g);
    if (!st) st = policy_resolve(&o, g);
    if (!st) st = cluster_load(a, o.cluster, o.nodes, o.devices, &c);
    if (!st) fuzz_phases(a, &o, g, c);
    arena_free(a);
    return 0;
}
