/*
 * test.h: the unit tests' tiny harness. EXPECT(cond) counts a pass or prints the failing
 * condition with file:line and counts a failure; test_summary() prints the closing line
 * "N passed, M failed" (the form CI reads) and returns the exit code; test_slurp() reads a
 * fixture file whole.
 */
#ifndef PLANCC_TEST_H
#define PLANCC_TEST_H

#include <stdio.h>
#include <stdlib.h>

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

// A file's bytes, NUL-terminated, and their count in *n (n may be NULL); NULL if it cannot be read.
static inline char *test_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) free(buf), buf = NULL;
    fclose(f);
    if (buf) buf[len] = 0;
    if (n) *n = buf ? (size_t)len : 0;
    return buf;
}

#endif
