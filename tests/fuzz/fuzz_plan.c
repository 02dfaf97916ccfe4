/*
 * fuzz_plan.c: libFuzzer harness for the binary plan reader and the verifier. The input is a
 * plan file's bytes; the harness first repairs every CRC (the section table's, each section's
 * and the header's) so that the mutations reach past the checksums into the decoder,
 * plan_validate, plan_check and the simulator (a plan whose CRCs were repaired after mutation
 * crashed plan_check: a collective's attrs index was not range-checked). What decodes must
 * encode back to the same bytes (the canonical form). Seeds: the plans of tests/plans/,
 * assembled (tests/fuzz/run.py makes them).
 */
#include "plan.h"
#include "sim.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

// The CRCs a mutation broke, recomputed where the table says the sections are.
static void fix_crcs(uint8_t *d, size_t n) {
    if (n < 64) return;
    uint32_t count = get32(d + 24);
    if (count > 4096 || 64 + 24 * (uint64_t)count > n) return;
    for (uint32_t e = 0; e < count; e++) {
        uint8_t *t = d + 64 + 24 * e;
        uint64_t off = get64(t + 8), bytes = get32(t + 16);
        if (off <= n && bytes <= n - off) put32(t + 20, plan_crc32c(0, d + off, (size_t)bytes));
    }
    put32(d + 28, plan_crc32c(0, d + 64, 24 * (size_t)count));
    put32(d + 56, plan_crc32c(0, d, 56));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n > (1u << 20)) return 0;
    uint8_t *d = malloc(n ? n : 1);
    if (!d) return 0;
    memcpy(d, data, n);
    fix_crcs(d, n);
    char err[1024];
    plan p;
    if (plan_decode(d, n, -1, &p, err, sizeof err) == PLAN_OK) {
        uint8_t *e = NULL;
        size_t ne = 0;
        if (plan_encode(&p, &e, &ne, err, sizeof err) != PLAN_OK || ne != n || memcmp(e, d, n)) abort(); // canonical
        free(e);
        if (plan_check(&p, err, sizeof err) == PLAN_OK) {
            sim_result r;
            if (sim_run(&p, NULL, &r, err, sizeof err) == PLAN_OK) sim_free(&r);
        }
        plan_free(&p);
    }
    for (int rank = 0; rank < 2; rank++) { // one rank's read
        if (plan_decode(d, n, rank, &p, err, sizeof err) == PLAN_OK) {
            plan_check(&p, err, sizeof err);
            plan_free(&p);
        }
    }
    free(d);
    return 0;
}
