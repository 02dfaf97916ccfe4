/*
 * cuda/util.c: what the CUDA backend's files share below backend.c: the error messages behind
 * CU_CHECK and CU_TRY (internal.h), stream-ordered scratch memory, a rank's streams, the plan's
 * dtypes and boxes as the kernels take them, and a clock and a pause for polling loops. It
 * calls nothing of the backend's own (backend.c, ops.c, nccl.c and profile.c call it), so the
 * backend's files form a tree with backend.c at the top.
 *
 * The error functions write into the caller's `err` and return -1, the backend's failure value;
 * they never print or abort. Scratch comes from cudaMallocAsync on the device's default pool,
 * ordered on the stream that uses it, and goes back with cudaFreeAsync after the work enqueued
 * before it (backend.c raises the pool's release threshold).
 */
#define _GNU_SOURCE 1
#include "internal.h"

#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

/* ---- errors ---- */

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cu_fail(char *err, size_t err_n, const char *lib, const char *msg, const char *stmt, const char *func, const char *file,
            int line) {
    if (!err || !err_n) return -1;
    const char *paren = strchr(stmt, '(');
    int call = paren ? (int)(paren - stmt) : (int)strlen(stmt);
    snprintf(err, err_n, "%s: %s in %.*s(...) (%s:%d %s)", lib, msg ? msg : "unknown error", call, stmt, base_name(file), line,
             func);
    return -1;
}

int cu_trace(char *err, size_t err_n, const char *func, const char *file, int line) {
    if (!err || !err_n) return -1;
    size_t k = strlen(err);
    if (k < err_n) snprintf(err + k, err_n - k, " <- %s (%s:%d)", func, base_name(file), line);
    return -1;
}

int cu_say(char *err, size_t err_n, const char *fmt, ...) {
    if (!err || !err_n) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- memory and streams ---- */

int cu_scratch(cudaStream_t st, size_t bytes, void **p, char *err, size_t err_n) {
    *p = NULL;
    if (!bytes) return 0;
    CUDA_CHECK(cudaMallocAsync(p, bytes, st));
    return 0;
}

void cu_scratch_free(cudaStream_t st, void *p) {
    if (p) cudaFreeAsync(p, st);
}

int cu_stream(cu_state *cu, int s, cudaStream_t *out, char *err, size_t err_n) {
    if (s < 0 || s >= cu->n_streams) return cu_say(err, err_n, "stream %d: the program has %d", s, cu->n_streams);
    CUDA_CHECK(cudaSetDevice(cu->device));
    *out = cu->streams[s];
    return 0;
}

/* ---- dtypes, boxes, time ---- */

size_t cu_dtype_bytes(int dtype) { return dtype == CK_F16 || dtype == CK_BF16 ? 2 : dtype == CK_F32 || dtype == CK_I32 ? 4 : 0; }

ck_box cu_box(const rt_box *b) {
    ck_box k;
    memset(&k, 0, sizeof k);
    k.rank = b->rank;
    for (int d = 0; d < b->rank && d < CK_MAX_RANK; d++) k.start[d] = b->start[d], k.shape[d] = b->shape[d], k.full[d] = b->full[d];
    return k;
}

double cu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void cu_pause(int spins) {
    if (spins < 100) {
        sched_yield();
        return;
    }
    struct timespec t = {0, 50 * 1000};
    nanosleep(&t, NULL);
}
