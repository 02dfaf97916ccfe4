/*
 * bgjob.c: the background job of planrun --background (DeepPool's GPU multiplexing, arXiv
 * 2112.10065). A one-rank plan (the background job) runs beside every foreground rank this
 * process runs, as DeepPool runs a low-priority job on every GPU: each replica trains its own
 * copy of the background model on its own data stream, independent of the others (no
 * communication between replicas), so replica q is exactly a plain one-rank run of the plan
 * with seed seed0 + q (planrun BG.plan --seed seed0+q --steps N).
 *
 * Each replica is an rt_run of its own (its own backend instance, arena and threads: on the
 * CPU, its walker threads beside the foreground's; on CUDA, its streams on the same GPU at the
 * lowest priority) driven by a thread of its own that runs step after step: a fixed number, or
 * until rt_bgjob_stop (then the step in progress finishes, so the parameters are always those
 * after a whole number of steps). The replica's interpreter waits at the foreground rank's gate
 * (gate.c) before every piece, so the background runs only where the foreground leaves room.
 *
 * Failures: a replica whose step fails stops and keeps the message; rt_bgjob_join returns the
 * first one. Closing the gates (the foreground failed) makes every replica stop at its next
 * piece with a message saying so.
 *
 * On the CPU the replicas' threads compete with the foreground's for the same cores, which have
 * no stream priorities: with nice > 0 every thread of the replicas runs at that nice value
 * (planrun --background-nice), the nearest the CPU has to CUDA's lowest stream priority.
 */
#define _GNU_SOURCE 1
#include "rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static bool stopped(rt_bgjob *j) {
    pthread_mutex_lock(&j->mu);
    bool s = j->stop;
    pthread_mutex_unlock(&j->mu);
    return s;
}

// The CPU's analogue of a low-priority stream: this thread, and the walker threads it starts
// (Linux threads inherit their creator's nice value), at nice n. 0: leave it.
static void lower_priority(int n) {
#ifdef __linux__
    if (n > 0) setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), n);
#else
    (void)n;
#endif
}

static void *replica_main(void *arg) {
    rt_bgjob_replica *x = arg;
    rt_bgjob *j = x->job;
    lower_priority(j->nice);
    for (long s = 0; (j->steps < 0 || s < j->steps) && !(j->steps < 0 && stopped(j)); s++) {
        double loss;
        char err[sizeof x->err - 64];
        if (rt_run_step(&x->run, &loss, err, sizeof err)) {
            snprintf(x->err, sizeof x->err, "background replica beside rank %d: %s", x->rank, err);
            x->rc = -1;
            break;
        }
        if (!x->steps) x->first_loss = loss;
        x->last_loss = loss;
        x->steps++;
    }
    return NULL;
}

int rt_bgjob_init(rt_bgjob *j, const plan *p, const rt_options *base, const int *ranks, int n, uint64_t seed0,
                  rt_gate *gates, long steps, char *err, size_t err_n) {
    memset(j, 0, sizeof *j);
    j->steps = steps;
    pthread_mutex_init(&j->mu, NULL);
    j->mu_init = true;
    if (p->meta.world != 1) {
        snprintf(err, err_n, "the background plan has %u ranks; a background job is one rank (every foreground rank runs a replica of it)",
                 p->meta.world);
        return -1;
    }
    if (!(j->reps = calloc((size_t)(n > 0 ? n : 1), sizeof *j->reps))) {
        snprintf(err, err_n, "out of memory");
        return -1;
    }
    for (int k = 0; k < n; k++) {
        rt_bgjob_replica *x = &j->reps[k];
        x->job = j, x->rank = ranks[k], x->seed = seed0 + (uint64_t)ranks[k];
        rt_options o = *base;
        o.one_rank = false, o.rank = 0, o.seed = x->seed, o.corpus = NULL, o.steps = steps > 0 ? (uint64_t)steps : 0;
        o.gates = &gates[ranks[k]], o.background = true;
        char why[1024];
        if (rt_run_init(&x->run, p, &o, why, sizeof why)) {
            snprintf(err, err_n, "background replica beside rank %d: %s", ranks[k], why);
            rt_bgjob_free(j);
            return -1;
        }
        j->n = k + 1;
    }
    return 0;
}

int rt_bgjob_start(rt_bgjob *j, char *err, size_t err_n) {
    for (int k = 0; k < j->n; k++) {
        if (pthread_create(&j->reps[k].th, NULL, replica_main, &j->reps[k])) {
            snprintf(err, err_n, "cannot start the background thread beside rank %d", j->reps[k].rank);
            return -1;
        }
        j->reps[k].started = true;
    }
    return 0;
}

void rt_bgjob_stop(rt_bgjob *j) {
    if (!j->mu_init) return;
    pthread_mutex_lock(&j->mu);
    j->stop = true;
    pthread_mutex_unlock(&j->mu);
}

int rt_bgjob_join(rt_bgjob *j, char *err, size_t err_n) {
    int rc = 0;
    for (int k = 0; k < j->n; k++) {
        rt_bgjob_replica *x = &j->reps[k];
        if (!x->started) continue;
        pthread_join(x->th, NULL);
        x->started = false;
        if (x->rc && !rc) snprintf(err, err_n, "%s", x->err), rc = -1;
    }
    return rc;
}

void rt_bgjob_free(rt_bgjob *j) {
    if (!j) return;
    for (int k = 0; j->reps && k < j->n; k++) rt_run_free(&j->reps[k].run);
    free(j->reps);
    if (j->mu_init) pthread_mutex_destroy(&j->mu);
    memset(j, 0, sizeof *j);
}
