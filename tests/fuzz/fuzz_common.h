/*
 * fuzz_common.h: what the compiler's libFuzzer harnesses share: the input written to a file of
 * this process's own (the loaders read paths), and the source tree (FUZZ_SRC_ROOT, set by
 * meson) for the fixed cluster file.
 */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

// The input as the file fuzz_path() names; false when it cannot be written.
static const char *fuzz_path(void) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/plancc-fuzz-%ld.json", (long)getpid());
    return path;
}

static int fuzz_write(const uint8_t *data, size_t n) {
    FILE *f = fopen(fuzz_path(), "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

#endif
