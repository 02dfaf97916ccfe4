/*
 * fuzz_text.c: libFuzzer harness for the text form's assembler (plan_parse), then plan_check
 * and the printer: what parses and passes plan_validate must print and parse back to the same
 * bytes. Seeds: tests/plans/*.plan.txt and tests/bad_plans/*.plan.txt.
 */
#include "plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n > (1u << 20)) return 0;
    char err[1024];
    plan p;
    if (plan_parse((const char *)data, n, "fuzz", &p, err, sizeof err) != PLAN_OK) return 0;
    uint8_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (plan_check(&p, err, sizeof err) == PLAN_OK && plan_encode(&p, &a, &na, err, sizeof err) == PLAN_OK) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (f) {
            plan_print(f, &p, -1);
            fclose(f);
            plan q;
            if (plan_parse(text, len, "printed", &q, err, sizeof err) != PLAN_OK) abort(); // the printer's text parses
            if (plan_encode(&q, &b, &nb, err, sizeof err) != PLAN_OK || nb != na || memcmp(a, b, na)) abort(); // round trip
            plan_free(&q);
        }
        free(text);
    }
    free(a), free(b);
    plan_free(&p);
    return 0;
}
