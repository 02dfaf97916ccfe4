/*
 * backend.c: the dispatch wrappers of the backend interface (rt.h, "backend.c"). The interpreter
 * and the safetensors code call a backend only through these: each checks the handle and the
 * entry, so a backend that lacks a required entry fails with a message naming it instead of
 * jumping through NULL, and an optional entry left NULL is skipped.
 */
#include "rt.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static int missing(const rt_backend *b, const char *entry, char *err, size_t err_n) {
    snprintf(err, err_n, "%s backend: it has no %s entry", b && b->name ? b->name : "no", entry);
    return -1;
}

#define REQUIRE(entry)                                                                             \
    do {                                                                                           \
        if (!b || !b->entry) return missing(b, #entry, err, err_n);                                \
    } while (0)

void *rt_backend_arena_alloc(rt_backend *b, int rank, uint64_t bytes, char *err, size_t err_n) {
    if (!b || !b->arena_alloc) {
        missing(b, "arena_alloc", err, err_n);
        return NULL;
    }
    return b->arena_alloc(b, rank, bytes, err, err_n);
}

void rt_backend_arena_free(rt_backend *b, int rank, void *arena) {
    if (b && b->arena_free && arena) b->arena_free(b, rank, arena);
}

int rt_backend_upload(rt_backend *b, int rank, void *dst, const void *src, uint64_t bytes, char *err, size_t err_n) {
    REQUIRE(upload);
    return b->upload(b, rank, dst, src, bytes, err, err_n);
}

int rt_backend_download(rt_backend *b, int rank, void *dst, const void *src, uint64_t bytes, char *err, size_t err_n) {
    REQUIRE(download);
    return b->download(b, rank, dst, src, bytes, err, err_n);
}

int rt_backend_kernel(rt_backend *b, const rt_exec *x, const rt_kernel *k, char *err, size_t err_n) {
    REQUIRE(kernel);
    return b->kernel(b, x, k, err, err_n);
}

int rt_backend_copy(rt_backend *b, const rt_exec *x, void *dst, const rt_box *db, const void *src, const rt_box *sb,
                    uint64_t bytes, uint32_t dtype, char *err, size_t err_n) {
    REQUIRE(copy);
    return b->copy(b, x, dst, db, src, sb, bytes, dtype, err, err_n);
}

int rt_backend_p2p(rt_backend *b, const rt_exec *x, rt_p2p *items, int n, char *err, size_t err_n) {
    REQUIRE(p2p);
    return b->p2p(b, x, items, n, err, err_n);
}

int rt_backend_coll(rt_backend *b, const rt_exec *x, const rt_coll *c, char *err, size_t err_n) {
    REQUIRE(coll);
    return b->coll(b, x, c, err, err_n);
}

int rt_backend_coll_bucket(rt_backend *b, const rt_exec *x, const rt_coll *cs, int n, char *err, size_t err_n) {
    if (b->coll_bucket) return b->coll_bucket(b, x, cs, n, err, err_n);
    for (int k = 0; k < n; k++)
        if (rt_backend_coll(b, x, &cs[k], err, err_n)) return -1;
    return 0;
}

int rt_backend_record(rt_backend *b, const rt_exec *x, uint32_t event, uint64_t ordinal, char *err, size_t err_n) {
    REQUIRE(record);
    return b->record(b, x, event, ordinal, err, err_n);
}

int rt_backend_wait(rt_backend *b, const rt_exec *x, uint32_t event, uint64_t ordinal, const char *what, char *err, size_t err_n) {
    REQUIRE(wait);
    return b->wait(b, x, event, ordinal, what, err, err_n);
}

void rt_backend_step_begin(rt_backend *b, int n_threads) {
    if (b && b->step_begin) b->step_begin(b, n_threads);
}

void rt_backend_thread_exit(rt_backend *b, int thread) {
    if (b && b->thread_exit) b->thread_exit(b, thread);
}

int rt_backend_step_end(rt_backend *b, char *err, size_t err_n) {
    if (!b) return missing(b, "step_end", err, err_n);
    return b->step_end ? b->step_end(b, err, err_n) : 0;
}

int rt_backend_fail(rt_backend *b, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (b && b->fail) b->fail(b, msg);
    return -1;
}

int rt_say(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && n) vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

double rt_clock_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

const char *rt_backend_error(rt_backend *b) {
    if (!b) return "no backend";
    return b->error ? b->error(b) : NULL;
}

int rt_backend_host_sum(rt_backend *b, double *v, int n, char *err, size_t err_n) {
    if (!b) return missing(b, "host_sum", err, err_n);
    return b->host_sum ? b->host_sum(b, v, n, err, err_n) : 0;
}

int rt_backend_when_done(rt_backend *b, const rt_exec *x, void (*fn)(void *), void *arg, char *err, size_t err_n) {
    if (!b) return missing(b, "when_done", err, err_n);
    if (b->when_done) return b->when_done(b, x, fn, arg, err, err_n);
    fn(arg);
    return 0;
}

void rt_backend_free(rt_backend *b) {
    if (b && b->free) b->free(b);
}

int rt_backend_join(rt_backend *b, const rt_exec *x, char *err, size_t err_n) {
    if (!b) return missing(b, "join", err, err_n);
    return b->join ? b->join(b, x, err, err_n) : 0;
}

bool rt_backend_rounds_outlive_steps(const rt_backend *b) { return b && b->round_end; }

int rt_backend_round_end(rt_backend *b, const rt_exec *x, char *err, size_t err_n) {
    if (!b) return missing(b, "round_end", err, err_n);
    return b->round_end ? b->round_end(b, x, err, err_n) : 0;
}

int rt_backend_round_fence(rt_backend *b, const rt_exec *x, char *err, size_t err_n) {
    if (!b) return missing(b, "round_fence", err, err_n);
    return b->round_fence ? b->round_fence(b, x, err, err_n) : 0;
}

int rt_backend_round_drain(rt_backend *b, char *err, size_t err_n) {
    if (!b) return missing(b, "round_drain", err, err_n);
    return b->round_drain ? b->round_drain(b, err, err_n) : 0;
}

bool rt_backend_has_stamps(const rt_backend *b) { return b && b->stamp && b->stamp_read; }

int rt_backend_stamp(rt_backend *b, const rt_exec *x, uint32_t *mark, char *err, size_t err_n) {
    if (!rt_backend_has_stamps(b)) return missing(b, "stamp", err, err_n);
    return b->stamp(b, x, mark, err, err_n);
}

int rt_backend_stamp_read(rt_backend *b, int rank, double *seconds, uint32_t n, char *err, size_t err_n) {
    if (!rt_backend_has_stamps(b)) return missing(b, "stamp_read", err, err_n);
    return b->stamp_read(b, rank, seconds, n, err, err_n);
}
