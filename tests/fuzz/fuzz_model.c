/*
 * fuzz_model.c: libFuzzer harness for the model loader (compiler/model.c through json.c) and
 * the passes right after it: --global-batch arithmetic left at its defaults, graph_check,
 * autodiff, graph_check. Every input is refused with a diagnostic or accepted, never a crash,
 * a leak or undefined behaviour. Seeds: models/*.json and tests/bad/*.json.
 */
#include "plancc.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n > (1u << 20) || !fuzz_write(data, n)) return 0;
    pcc_quiet = true;
    pcc_arena *a = arena_init();
    pcc_graph *g = NULL;
    pcc_status st = model_load(a, fuzz_path(), &g);
    if (!st) st = graph_check(g);
    if (!st) st = autodiff(g);
    if (!st) st = graph_check(g);
    arena_free(a);
    return 0;
}
