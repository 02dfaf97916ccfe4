/*
 * test.h: the unit tests' tiny harness. EXPECT(cond) counts a pass or prints the failing
 * condition with file:line and counts a failure; test_summary() prints the closing line
 * "N passed, M failed" (the form CI reads) and returns the exit code.
 */
#ifndef PLANCC_TEST_H
#define PLANCC_TEST_H

#include <stdio.h>

static int fails, passes;

#define EXPECT(c)                                                                                  \
    do {                                                                                           \
        if (c) passes++;                                                                           \
        else {                                                                                     \
            fails++;                                                                               \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);                          \
        }                                                                                          \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", passes, fails);
    return fails ? 1 : 0;
}

#endif
