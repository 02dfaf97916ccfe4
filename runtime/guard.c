/*
 * guard.c: the run's guards against failing silently: non-finite values and the watchdog.
 *
 * Non-finite values. A diverging run (a learning rate of 1e3) used to print `loss -nan`, exit 0
 * and save an all-NaN checkpoint. Unless rt_options.allow_nonfinite is set, after every compute
 * instruction the interpreter asks the backend (its optional find_nonfinite entry) whether an
 * output holds a NaN or an infinity; the first finding of the step is kept (which tensor, which
 * element, the instruction and operator that wrote it, the rank, micro-batch and block copy),
 * the step fails at once (rt_backend_fail stops every other walker) and rt_run_step returns
 * RT_STEP_NONFINITE with that message. A backend without the entry (cuda) is checked on the
 * step's loss only, which rt_run_step reads anyway. The check costs one pass over each output
 * (on the CPU, a few percent of a step: the kernels read and write those bytes anyway).
 *
 * The watchdog. The CPU backend's waits give up after --timeout and then stop every thread that
 * waits; but a thread busy in a kernel notices only when the kernel returns, so `--timeout 2`
 * ended a run whose other ranks were computing after 55 s. A watchdog thread per run looks
 * every 50 ms: once the backend reports a failure during a step and walkers are still running
 * timeout_s later, it prints the failure and what each running walker was doing, and ends the
 * process with rt_options.watchdog_exit (planrun: 11, a step failed); with watchdog_exit 0 (a
 * library user that wants no exit) it only prints. Walkers publish the instruction they are in
 * (rt_guard_busy) with relaxed stores, one word each.
 */
#include "rt.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct rt_guard {
    pthread_mutex_t mu;         // guards found, msg, walkers and the thread's state
    pthread_cond_t cv;
    pthread_t th;
    bool started, quit, in_step;
    bool found;                 // a non-finite value was found in this step
    char msg[1024];
    int n_threads;
    uint32_t *busy;             // per walker thread: 1 + the instruction it is in, 0 idle
    int *busy_rank, *busy_stream;
};

/* ---- non-finite values ---- */

int rt_guard_outputs(rt_run *r, const rt_rank *rk, const rt_exec *x, uint32_t i, uint32_t mb, uint32_t layer) {
    const plan_program *pg = rk->pg;
    const plan_insn *in = &pg->insns[i];
    if (r->o.allow_nonfinite || !r->be->find_nonfinite || in->kind != PLAN_I_COMPUTE) return 0;
    for (uint32_t j = 0; j < in->nargs; j++) {
        if (!(plan_arg_role(pg, in, j) & PLAN_ARG_WRITE)) continue;
        uint32_t bi = pg->args[in->args + j];
        const plan_buffer *b = &pg->buffers[bi];
        if (b->dtype != 0 && b->dtype != 1 && b->dtype != 2) continue; // i32: always finite
        rt_view v;
        rt_buffer_view(r, rk, bi, mb, layer, &v);
        uint64_t n = 1;
        for (int d = 0; d < v.rank; d++) n *= (uint64_t)v.shape[d];
        uint32_t dt = b->dtype == 0 && rk->scale == 2 ? RT_DTYPE_F64 : b->dtype;
        char err[256] = "";
        int64_t at = r->be->find_nonfinite(r->be, x, v.data, n, dt, err, sizeof err);
        if (at == -2) return rt_backend_fail(r->be, "checking insn %u's outputs for non-finite values: %s", i, err);
        if (at < 0) continue;
        double val = NAN; // the element, for the message
        union { float f; double d; } e;
        uint32_t es = dt == RT_DTYPE_F64 ? 8 : dt == 0 ? 4 : 0;
        if (es && !rt_backend_download(r->be, rk->rank, &e, (const uint8_t *)v.data + es * (uint64_t)at, es, err, sizeof err))
            val = es == 8 ? e.d : e.f;
        const plan_tensor *t = b->tensor != PLAN_NONE ? &r->p->tensors[b->tensor] : NULL;
        pthread_mutex_lock(&r->guard->mu);
        if (!r->guard->found) {
            r->guard->found = true;
            snprintf(r->guard->msg, sizeof r->guard->msg, "step %llu: a non-finite value: %s%s%s%s (buffer %u) holds %g at element "
                     "%lld of rank %d's piece, written by insn %u (%s) of program %u \"%s\" at micro-batch %u, layer %u; the first "
                     "such output of the step (planrun --allow-nonfinite runs on)",
                     (unsigned long long)r->steps + 1, t ? plan_tensor_kind_name(t->kind) : "scratch", t ? " \"" : "",
                     t && t->name ? t->name : "", t ? "\"" : "", bi, val, (long long)at, rk->rank, i, plan_insn_name(in),
                     r->p->ranks[rk->rank].program, pg->name ? pg->name : "", mb, layer);
        }
        pthread_mutex_unlock(&r->guard->mu);
        return rt_backend_fail(r->be, "a non-finite value (see above)");
    }
    return 0;
}

int rt_guard_step_end(rt_run *r, double loss, char *err, size_t err_n) {
    if (r->o.allow_nonfinite || !r->guard) return 0;
    pthread_mutex_lock(&r->guard->mu);
    bool found = r->guard->found;
    if (found) snprintf(err, err_n, "%s", r->guard->msg);
    r->guard->found = false;
    pthread_mutex_unlock(&r->guard->mu);
    if (found) return RT_STEP_NONFINITE;
    if (r->p->meta.loss == PLAN_NONE || isfinite(loss)) return 0;
    const plan_tensor *t = &r->p->tensors[r->p->meta.loss];
    snprintf(err, err_n, "step %llu: a non-finite value: the loss (activation \"%s\") is %g (planrun --allow-nonfinite runs on)",
             (unsigned long long)r->steps, t->name ? t->name : "", loss);
    return RT_STEP_NONFINITE;
}

bool rt_guard_found(rt_run *r) {
    if (!r->guard) return false;
    pthread_mutex_lock(&r->guard->mu);
    bool f = r->guard->found;
    pthread_mutex_unlock(&r->guard->mu);
    return f;
}

/* ---- the watchdog ---- */

// What the walkers still running are in, for the watchdog's message.
static void describe_busy(const rt_run *r, const struct rt_guard *g, char *buf, size_t n) {
    size_t at = 0;
    int shown = 0;
    buf[0] = 0;
    for (int t = 0; t < g->n_threads && at < n; t++) {
        uint32_t b = __atomic_load_n(&g->busy[t], __ATOMIC_RELAXED);
        if (!b || g->busy_rank[t] < 0) continue;
        const rt_rank *rk = &r->ranks[g->busy_rank[t]];
        if (shown++ == 8) { at += (size_t)snprintf(buf + at, n - at, "\n  ..."); break; }
        at += (size_t)snprintf(buf + at, n - at, "\n  rank %d stream %d is still in insn %u (%s)", rk->rank, g->busy_stream[t], b - 1,
                               b - 1 < rk->pg->n_insns ? plan_insn_name(&rk->pg->insns[b - 1]) : "?");
    }
}

static void *watchdog_main(void *arg) {
    rt_run *r = arg;
    struct rt_guard *g = r->guard;
    double failed_at = -1;
    pthread_mutex_lock(&g->mu);
    while (!g->quit) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 50 * 1000000L;
        if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &dl);
        const char *e = g->in_step ? rt_backend_error(r->be) : NULL;
        if (!e) { failed_at = -1; continue; }
        if (failed_at < 0) failed_at = rt_clock_s();
        double limit = r->o.timeout_s > 0 ? r->o.timeout_s : 60;
        if (rt_clock_s() - failed_at < limit) continue;
        char busy[1200];
        describe_busy(r, g, busy, sizeof busy);
        fprintf(stderr, "%sstep %llu failed: %s\n%s: %g s later (--timeout) these walkers have not stopped, so the run ends here:%s\n",
                r->o.watchdog_prefix ? r->o.watchdog_prefix : "", (unsigned long long)r->steps + 1, e,
                r->o.watchdog_prefix ? "the watchdog" : "watchdog", limit, busy);
        fflush(stderr);
        if (r->o.watchdog_exit) _exit(r->o.watchdog_exit);
        failed_at = rt_clock_s() + 1e9; // said once
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int rt_guard_init(rt_run *r, int n_threads, char *err, size_t err_n) {
    struct rt_guard *g = calloc(1, sizeof *g);
    if (g) {
        g->n_threads = n_threads;
        g->busy = calloc((size_t)n_threads + 1, sizeof *g->busy);
        g->busy_rank = malloc(((size_t)n_threads + 1) * sizeof *g->busy_rank);
        g->busy_stream = malloc(((size_t)n_threads + 1) * sizeof *g->busy_stream);
    }
    if (!g || !g->busy || !g->busy_rank || !g->busy_stream) {
        if (g) free(g->busy), free(g->busy_rank), free(g->busy_stream);
        free(g);
        snprintf(err, err_n, "out of memory setting up the run's guards");
        return -1;
    }
    for (int t = 0; t <= n_threads; t++) g->busy_rank[t] = -1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    r->guard = g;
    g->started = pthread_create(&g->th, NULL, watchdog_main, r) == 0;
    return 0;
}

void rt_guard_step(rt_run *r, bool in_step) {
    if (!r->guard) return;
    pthread_mutex_lock(&r->guard->mu);
    r->guard->in_step = in_step;
    pthread_mutex_unlock(&r->guard->mu);
}

void rt_guard_walker(rt_run *r, int thread, int rank, int stream) {
    struct rt_guard *g = r->guard;
    if (!g || thread < 0 || thread >= g->n_threads) return;
    g->busy_rank[thread] = rank;
    g->busy_stream[thread] = stream;
    __atomic_store_n(&g->busy[thread], 0, __ATOMIC_RELAXED);
}

void rt_guard_busy(rt_run *r, int thread, uint32_t insn) {
    struct rt_guard *g = r->guard;
    if (g && thread >= 0 && thread < g->n_threads) __atomic_store_n(&g->busy[thread], insn, __ATOMIC_RELAXED);
}

void rt_guard_free(rt_run *r) {
    struct rt_guard *g = r->guard;
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->quit = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->started) pthread_join(g->th, NULL);
    pthread_mutex_destroy(&g->mu), pthread_cond_destroy(&g->cv);
    free(g->busy), free(g->busy_rank), free(g->busy_stream), free(g);
    r->guard = NULL;
}
