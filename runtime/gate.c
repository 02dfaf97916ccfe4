/*
 * gate.c: the admission gate of a background job (DeepPool's GPU multiplexing, arXiv
 * 2112.10065). planrun --background runs a second, one-rank training job beside every rank of
 * the foreground plan, on the same device; the gate decides when a piece of the background's
 * work may start, so that the background fills the foreground's idle time only.
 *
 * One gate per foreground rank. A piece is one instruction of the background program (an
 * operator, a copy, a collective of its one-rank groups). Two rules, DeepPool's:
 *   - at most `limit` pieces in flight at once (default 1): a piece is in flight from its
 *     admission until the backend has finished it (the CPU backend: when the call returns; the
 *     cuda backend: when the stream reaches a host function enqueued after it);
 *   - no piece is admitted while the foreground is inside a collective: the foreground's walkers
 *     mark entering and leaving every collective they issue (a count, since a rank's streams run
 *     collectives concurrently), and an admission waits until the count is zero.
 * A piece already in flight when the foreground enters a collective runs on (DeepPool's pieces
 * are short for that reason); the foreground never waits for the background.
 *
 * The marks and the releases arrive through rt_gate_cb_* (void (*)(void *), the shape of a CUDA
 * host function), which rt_backend_when_done calls at once on a backend whose calls block and
 * enqueues on the stream otherwise. Closing the gate (the foreground failed, the run is over)
 * makes every admission, waiting or later, fail, so a background never outlives its run.
 *
 * An admission that waits longer than the run's --timeout gives up (a piece whose release never
 * comes, a foreground collective that never ends: the foreground's own timeout names it).
 *
 * Every count is under the gate's mutex; rt_gate_stats_get returns a consistent copy.
 */
#include "rt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int rt_gate_init(rt_gate *g, uint32_t limit) {
    memset(g, 0, sizeof *g);
    if (limit == 0) return -1;
    g->limit = limit;
    if (pthread_mutex_init(&g->mu, NULL)) return -1;
    if (pthread_cond_init(&g->cv, NULL)) {
        pthread_mutex_destroy(&g->mu);
        return -1;
    }
    g->ready = true;
    return 0;
}

void rt_gate_free(rt_gate *g) {
    if (!g || !g->ready) return;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    g->ready = false;
}

static bool gate_open(const rt_gate *g) { return g->fg_in_coll == 0 && g->inflight < g->limit; }

int rt_gate_admit(rt_gate *g, double timeout_s) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double whole = floor(timeout_s), frac = timeout_s - whole;
    until.tv_sec += (time_t)whole;
    until.tv_nsec += (long)(frac * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&g->mu);
    if (!g->closed && !gate_open(g)) {
        g->stats.held++;
        if (g->fg_in_coll) g->stats.held_coll++;
    }
    int rc = 0;
    while (!g->closed && !gate_open(g) && !rc)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT && !gate_open(g)) rc = -2;
    if (g->closed) rc = -1;
    if (!rc) {
        g->inflight++;
        g->stats.admitted++;
        if (g->inflight > g->stats.max_inflight) g->stats.max_inflight = g->inflight;
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

void rt_gate_cb_release(void *gate) {
    rt_gate *g = gate;
    pthread_mutex_lock(&g->mu);
    if (g->inflight) g->inflight--;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void rt_gate_cb_coll_enter(void *gate) {
    rt_gate *g = gate;
    pthread_mutex_lock(&g->mu);
    g->fg_in_coll++;
    g->stats.fg_colls++;
    if (g->inflight) g->stats.overlapped++;
    pthread_mutex_unlock(&g->mu);
}

void rt_gate_cb_coll_leave(void *gate) {
    rt_gate *g = gate;
    pthread_mutex_lock(&g->mu);
    if (g->fg_in_coll) g->fg_in_coll--;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void rt_gate_close(rt_gate *g) {
    if (!g || !g->ready) return;
    pthread_mutex_lock(&g->mu);
    g->closed = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void rt_gate_stats_get(rt_gate *g, rt_gate_stats *s) {
    pthread_mutex_lock(&g->mu);
    *s = g->stats;
    pthread_mutex_unlock(&g->mu);
}
