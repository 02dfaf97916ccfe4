/*
 * comm.c: in-process communication for the CPU backend: every rank is a set of threads of one
 * process (one per stream), and this file is their NCCL.
 *
 * Matching. Ranks count their messages per channel (ordered pair of ranks and tag) and their
 * collectives per group instance in program order, and pass the count as a sequence number. A
 * receive takes the send with its channel and number; a collective gathers the members that
 * posted its group instance and number. So what matches what never depends on timing, only on
 * the program, as with NCCL (which matches in issue order per communicator).
 *
 * Blocking. A send waits until its receive has taken the data (NCCL's behaviour without buffer
 * space, the strictest one: a plan that relies on buffering deadlocks here too); a run of sends
 * and receives is one group: all of its sends are posted before any of its receives waits, so
 * the order inside the run cannot deadlock (ncclGroupStart/End). A collective's members wait
 * for the last to arrive, which runs it for all and then wakes them.
 *
 * Waking and deadlocks. One mutex guards all state. A waiting thread leaves its condition (a
 * predicate and its argument) in its slot and sleeps on a condition variable of its own; every
 * change looks at the waiting threads' conditions and wakes only those that now hold, so a
 * change does not wake every thread of every rank to look (with 8 ranks of 3 streams on 2
 * cores, waking all of them on every change cost more than the steps' work). When every live
 * thread waits and no waiter's condition holds, no thread can change anything again: that is a
 * deadlock, reported at once with what every thread waits for; it is checked whenever a thread
 * starts to wait or exits, the only moments it can begin. A timeout (in case a thread is stuck
 * outside this file) ends the rest. The first failure wakes and stops every thread.
 *
 * Network emulation (rt_comm_emulate; planrun --emulate-network). Here a collective costs a few
 * memory copies, so a plan's communication is nearly free and nothing can show what hiding it
 * is worth. With emulation every collective and message also takes the time the plan gives it
 * (its t_s: the cost model's time on the plan's cluster), as though it crossed that cluster's
 * links. Each rank has one link, a sending and a receiving side of it (full duplex). A
 * collective occupies both sides of every member's link; a message, the sender's sending side
 * and the receiver's receiving side. It starts when its last party has arrived and every side it
 * needs is free, which makes it first come, first served on each side: a background round's
 * collective that holds a link delays the foreground's next one, as a running NCCL kernel does
 * (NCCL does not preempt). Members then wait, asleep (the cores stay free for the ranks'
 * compute), until its end; the data moves at once, as before. A dilation factor multiplies every
 * time (time dilation, as in Gupta et al., "To Infinity and Beyond: Time-Warped Network
 * Emulation", NSDI 2006): where N ranks share fewer cores, each computes slower than on a core of
 * its own, and a network slowed by as much keeps the cluster's ratio of compute to
 * communication.
 */
#define _GNU_SOURCE 1
#include "rt.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_WAITERS_SHOWN 8

typedef struct msg {
    int src, dst;
    uint32_t tag;
    uint64_t seq;
    const void *data;
    uint64_t bytes;
    const char *what;
    double t_s;                 // the send's modeled time
    double end;                 // emulation: when the message has crossed the link (monotonic s)
    bool taken;
    struct msg *next;
} msg;

typedef struct cop {
    uint64_t key, seq;
    int n, posted, left;
    double t_s, end;            // the longest modeled time a member gave; emulation: its end
    bool running, done;
    rt_coll_member *m;
    struct cop *next;
} cop;

struct rt_comm {
    pthread_mutex_t mu;
    int alive, n_threads;
    // Per thread: what it waits for (NULL: not waiting), its condition, its condition variable.
    const char **waiting;
    struct waiter { bool (*ready)(struct rt_comm *c, void *arg); void *arg; pthread_cond_t cv; } *wt;
    double timeout_s;
    bool failed;
    char error[2048];
    uint64_t *event_done;       // per rank and event: the highest ordinal recorded
    int n_ranks;
    uint32_t n_events;
    msg *msgs;
    cop *cops;
    bool emulate;               // rt_comm_emulate
    double dilation;            // its factor on every modeled time
    double *tx_free, *rx_free;  // emulation, per rank: when its link's sending/receiving side is free
};

rt_comm *rt_comm_new(int n_threads, int n_ranks, uint32_t n_events, double timeout_s) {
    rt_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->waiting = calloc((size_t)n_threads, sizeof *c->waiting);
    c->event_done = calloc((size_t)n_ranks * (n_events ? n_events : 1), sizeof *c->event_done);
    c->tx_free = calloc((size_t)n_ranks, sizeof *c->tx_free);
    c->rx_free = calloc((size_t)n_ranks, sizeof *c->rx_free);
    c->wt = calloc((size_t)n_threads, sizeof *c->wt);
    if (!c->waiting || !c->event_done || !c->tx_free || !c->rx_free || !c->wt) {
        free(c->waiting), free(c->event_done), free(c->tx_free), free(c->rx_free), free(c->wt), free(c);
        return NULL;
    }
    c->n_ranks = n_ranks, c->n_events = n_events;
    pthread_mutex_init(&c->mu, NULL);
    for (int t = 0; t < n_threads; t++) pthread_cond_init(&c->wt[t].cv, NULL);
    c->n_threads = n_threads;
    c->timeout_s = timeout_s;
    c->dilation = 1;
    return c;
}

static void free_mailboxes(rt_comm *c) {
    for (msg *m = c->msgs, *n; m; m = n) n = m->next, free(m);
    for (cop *o = c->cops, *n; o; o = n) n = o->next, free(o->m), free(o);
    c->msgs = NULL, c->cops = NULL;
}

void rt_comm_free(rt_comm *c) {
    if (!c) return;
    free_mailboxes(c);
    free(c->event_done);
    free(c->waiting);
    free(c->tx_free), free(c->rx_free);
    for (int t = 0; t < c->n_threads; t++) pthread_cond_destroy(&c->wt[t].cv);
    free(c->wt);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void rt_comm_reset(rt_comm *c, int n_threads) {
    pthread_mutex_lock(&c->mu);
    free_mailboxes(c);
    memset(c->event_done, 0, (size_t)c->n_ranks * c->n_events * sizeof *c->event_done);
    c->alive = n_threads < c->n_threads ? n_threads : c->n_threads;
    c->failed = false;
    c->error[0] = 0;
    memset(c->waiting, 0, (size_t)c->n_threads * sizeof *c->waiting);
    pthread_mutex_unlock(&c->mu);
}

// Under the lock: something changed; the waiters whose condition now holds wake, and after a
// failure every thread asleep here (a waiter, or one sitting out an emulated transfer).
static void changed(rt_comm *c) {
    for (int t = 0; t < c->n_threads; t++)
        if (c->failed || (c->waiting[t] && c->wt[t].ready(c, c->wt[t].arg))) pthread_cond_signal(&c->wt[t].cv);
}

// Under the lock: every live thread waits and no waiter's condition holds.
static bool deadlocked(rt_comm *c) {
    int n = 0;
    for (int t = 0; t < c->n_threads; t++) {
        if (!c->waiting[t]) continue;
        if (c->wt[t].ready(c, c->wt[t].arg)) return false;
        n++;
    }
    return n > 0 && n >= c->alive;
}

static void report_deadlock(rt_comm *c);

static int fail_locked(rt_comm *c, const char *fmt, va_list ap) {
    if (!c->failed) {
        c->failed = true;
        vsnprintf(c->error, sizeof c->error, fmt, ap);
    }
    changed(c);
    return -1;
}

static int fail_l(rt_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_l(rt_comm *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_locked(c, fmt, ap);
    va_end(ap);
    return -1;
}

int rt_comm_fail(rt_comm *c, const char *fmt, ...) {
    pthread_mutex_lock(&c->mu);
    va_list ap;
    va_start(ap, fmt);
    fail_locked(c, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&c->mu);
    return -1;
}

const char *rt_comm_error(rt_comm *c) { return c->failed ? c->error : NULL; }

void rt_comm_emulate(rt_comm *c, bool on) { c->emulate = on; }
void rt_comm_dilate(rt_comm *c, double dilation) { c->dilation = dilation > 0 ? dilation : 1; }

void rt_comm_exit(rt_comm *c, int thread) {
    pthread_mutex_lock(&c->mu);
    c->alive--;
    c->waiting[thread] = NULL;
    changed(c);
    if (!c->failed && deadlocked(c)) report_deadlock(c);
    pthread_mutex_unlock(&c->mu);
}

// Under the lock, on a deadlock: the message lists what the threads wait for.
static void report_deadlock(rt_comm *c) {
    char buf[sizeof c->error];
    size_t n = (size_t)snprintf(buf, sizeof buf, "deadlock: every rank is blocked, none can proceed:");
    int shown = 0, more = 0;
    for (int t = 0; t < c->n_threads; t++) {
        if (!c->waiting[t]) continue;
        if (shown == MAX_WAITERS_SHOWN) { more++; continue; }
        if (n < sizeof buf) n += (size_t)snprintf(buf + n, sizeof buf - n, "\n  %s", c->waiting[t]);
        shown++;
    }
    if (more && n < sizeof buf) snprintf(buf + n, sizeof buf - n, "\n  (and %d more)", more);
    fail_l(c, "%s", buf);
}

typedef bool (*ready_fn)(rt_comm *c, void *arg);

// Under the lock: waits until ready(c, arg), a failure, a deadlock or the timeout. -1 unless ready.
static int wait_until(rt_comm *c, int thread, ready_fn ready, void *arg, const char *what) {
    if (c->failed || ready(c, arg)) return c->failed ? -1 : 0;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    double whole = (double)(long)c->timeout_s;
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((c->timeout_s - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    c->waiting[thread] = what;
    c->wt[thread].ready = ready, c->wt[thread].arg = arg;
    if (deadlocked(c)) report_deadlock(c);
    while (!c->failed && !ready(c, arg)) {
        int rc = pthread_cond_timedwait(&c->wt[thread].cv, &c->mu, &deadline);
        if (rc == ETIMEDOUT && !c->failed && !ready(c, arg)) {
            fail_l(c, "timeout: nothing happened for %g s while %s (raise --timeout if a step is that slow)",
                   c->timeout_s, what);
            break;
        }
    }
    c->waiting[thread] = NULL;
    return c->failed ? -1 : 0;
}

/* ---- network emulation ---- */

static double later(double a, double b) { return a > b ? a : b; }

// Under the lock: the end of a message of t_s seconds from src to dst, which starts when the
// sender's sending side and the receiver's receiving side are free (from now on) and holds them.
static double occupy_msg(rt_comm *c, int src, int dst, double t_s) {
    double end = later(rt_clock_s(), later(c->tx_free[src], c->rx_free[dst])) + t_s;
    c->tx_free[src] = c->rx_free[dst] = end;
    return end;
}

// Under the lock: the end of collective o (every side of every member's link).
static double occupy_coll(rt_comm *c, const cop *o) {
    double start = rt_clock_s();
    for (int i = 0; i < o->n; i++) start = later(start, later(c->tx_free[o->m[i].rank], c->rx_free[o->m[i].rank]));
    double end = start + c->dilation * o->t_s;
    for (int i = 0; i < o->n; i++) c->tx_free[o->m[i].rank] = c->rx_free[o->m[i].rank] = end;
    return end;
}

// Under the lock: sleeps until the monotonic time `end` (a transfer's), or a failure (which
// wakes it: changed). The thread is not waiting on another, so it never counts towards a
// deadlock.
static int wait_transfer(rt_comm *c, int thread, double end) {
    for (double left; !c->failed && (left = end - rt_clock_s()) > 0;) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        double whole = (double)(long)left;
        t.tv_sec += (time_t)whole;
        t.tv_nsec += (long)((left - whole) * 1e9);
        if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&c->wt[thread].cv, &c->mu, &t);
    }
    return c->failed ? -1 : 0;
}

/* ---- events ---- */

static uint64_t *event_slot(rt_comm *c, int rank, uint32_t event) {
    if (rank < 0 || rank >= c->n_ranks || event >= c->n_events) return NULL;
    return &c->event_done[(size_t)rank * c->n_events + event];
}

void rt_comm_record(rt_comm *c, int rank, uint32_t event, uint64_t ordinal) {
    pthread_mutex_lock(&c->mu);
    uint64_t *d = event_slot(c, rank, event);
    if (d && *d < ordinal) *d = ordinal;
    changed(c);
    pthread_mutex_unlock(&c->mu);
}

typedef struct { int rank; uint32_t event; uint64_t ordinal; } event_arg;

static bool event_ready(rt_comm *c, void *arg) {
    event_arg *a = arg;
    uint64_t *d = event_slot(c, a->rank, a->event);
    return !d || *d >= a->ordinal;
}

int rt_comm_wait_event(rt_comm *c, int thread, int rank, uint32_t event, uint64_t ordinal, const char *what) {
    pthread_mutex_lock(&c->mu);
    event_arg a = {rank, event, ordinal};
    int rc = wait_until(c, thread, event_ready, &a, what);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- send and receive ---- */

static msg *find_msg(rt_comm *c, int src, int dst, uint32_t tag, uint64_t seq) {
    for (msg *m = c->msgs; m; m = m->next)
        if (m->src == src && m->dst == dst && m->tag == tag && m->seq == seq) return m;
    return NULL;
}

typedef struct { int src, dst; uint32_t tag; uint64_t seq; } msg_arg;

static bool msg_posted(rt_comm *c, void *arg) {
    msg_arg *a = arg;
    return find_msg(c, a->src, a->dst, a->tag, a->seq) != NULL;
}

static bool msg_taken(rt_comm *c, void *arg) {
    msg *m = arg;
    return m->taken;
}

static void unlink_msg(rt_comm *c, msg *m) {
    for (msg **p = &c->msgs; *p; p = &(*p)->next)
        if (*p == m) { *p = m->next; break; }
    free(m);
}

// Under the lock: the receive of item r (into rank `rank`); *end: the end of its transfer.
static int receive(rt_comm *c, int thread, int rank, const rt_p2p *r, double *end) {
    msg_arg a = {r->peer, rank, r->tag, r->seq};
    if (wait_until(c, thread, msg_posted, &a, r->what)) return -1;
    msg *m = find_msg(c, r->peer, rank, r->tag, r->seq);
    if (m->bytes != r->bytes)
        return fail_l(c, "message size mismatch: %s receives %llu bytes, but %s sends %llu", r->what,
                      (unsigned long long)r->bytes, m->what, (unsigned long long)m->bytes);
    memcpy(r->data, m->data, r->bytes);
    if (c->emulate) m->end = occupy_msg(c, m->src, m->dst, c->dilation * later(m->t_s, r->t_s));
    *end = later(*end, m->end);
    m->taken = true;
    changed(c);
    return 0;
}

int rt_comm_p2p(rt_comm *c, int thread, int rank, rt_p2p *items, int n) {
    pthread_mutex_lock(&c->mu);
    msg **posted = calloc((size_t)n, sizeof *posted);
    int rc = posted ? 0 : fail_l(c, "out of memory posting %d messages", n);
    for (int i = 0; i < n && !rc; i++) {
        if (!items[i].send) continue;
        msg *m = calloc(1, sizeof *m);
        if (!m) { rc = fail_l(c, "out of memory posting %s", items[i].what); break; }
        *m = (msg){rank, items[i].peer, items[i].tag, items[i].seq, items[i].data, items[i].bytes, items[i].what, items[i].t_s, 0, false,
                   c->msgs};
        c->msgs = m;
        posted[i] = m;
    }
    if (!rc) changed(c);
    double end = 0; // emulation: when the group's last transfer ends
    for (int i = 0; i < n && !rc; i++)
        if (!items[i].send) rc = receive(c, thread, rank, &items[i], &end);
    for (int i = 0; i < n && !rc; i++)
        if (posted[i] && !(rc = wait_until(c, thread, msg_taken, posted[i], items[i].what))) end = later(end, posted[i]->end);
    // A failed step leaves its messages to rt_comm_reset (a peer may still point at them).
    for (int i = 0; i < n && !rc; i++)
        if (posted[i]) unlink_msg(c, posted[i]);
    free(posted);
    if (!rc && c->emulate) rc = wait_transfer(c, thread, end);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- collectives ---- */

static cop *find_cop(rt_comm *c, uint64_t key, uint64_t seq) {
    for (cop *o = c->cops; o; o = o->next)
        if (o->key == key && o->seq == seq) return o;
    return NULL;
}

static bool cop_done(rt_comm *c, void *arg) {
    cop *o = arg;
    return o->done;
}

// dst[0..n) += src[0..n), elements of dtype.
static void add_run(void *dst, const void *src, int64_t n, uint32_t dtype) {
    if (dtype == 3) {
        int32_t *o = dst;
        const int32_t *s = src;
        for (int64_t j = 0; j < n; j++) o[j] += s[j];
    } else if (dtype == RT_DTYPE_F64) {
        double *o = dst;
        const double *s = src;
        for (int64_t j = 0; j < n; j++) o[j] += s[j];
    } else {
        float *o = dst;
        const float *s = src;
        for (int64_t j = 0; j < n; j++) o[j] += s[j];
    }
}

void rt_box_add(void *dst, const rt_box *db, const void *src, const rt_box *sb, uint32_t dtype) {
    int r = db->rank;
    int64_t lo[PLAN_MAX_RANK], hi[PLAN_MAX_RANK];
    for (int d = 0; d < r; d++) {
        lo[d] = db->start[d] > sb->start[d] ? db->start[d] : sb->start[d];
        int64_t de = db->start[d] + db->shape[d], se = sb->start[d] + sb->shape[d];
        hi[d] = de < se ? de : se;
        if (lo[d] >= hi[d]) return;
    }
    if (r == 0) { // a scalar
        add_run(dst, src, 1, dtype);
        return;
    }
    size_t es = rt_dtype_bytes(dtype);
    int64_t idx[PLAN_MAX_RANK];
    memcpy(idx, lo, sizeof idx);
    int64_t run = hi[r - 1] - lo[r - 1];
    for (;;) {
        int64_t doff = 0, soff = 0;
        for (int d = 0; d < r; d++) {
            doff = doff * db->shape[d] + (idx[d] - db->start[d]);
            soff = soff * sb->shape[d] + (idx[d] - sb->start[d]);
        }
        add_run((uint8_t *)dst + (size_t)doff * es, (const uint8_t *)src + (size_t)soff * es, run, dtype);
        int d = r - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < hi[d]) break;
            idx[d] = lo[d];
        }
        if (d < 0) return;
    }
}

static int64_t box_numel(const rt_box *b) {
    int64_t n = 1;
    for (int d = 0; d < b->rank; d++) n *= b->shape[d];
    return n;
}

// Runs o (outside the lock: every member is waiting for it and none touches its buffers).
static int run_cop(const cop *o, uint32_t dtype) {
    size_t es = rt_dtype_bytes(dtype);
    void **tmp = calloc((size_t)o->n, sizeof *tmp);
    if (!tmp) return -1;
    int rc = 0;
    for (int r = 0; r < o->n && !rc; r++) {
        tmp[r] = calloc((size_t)box_numel(&o->m[r].out_box), es);
        if (!tmp[r]) rc = -1;
        for (int s = 0; s < o->n && !rc; s++)
            if (o->m[s].contributes) rt_box_add(tmp[r], &o->m[r].out_box, o->m[s].in, &o->m[s].in_box, dtype);
    }
    for (int r = 0; r < o->n && !rc; r++) memcpy(o->m[r].out, tmp[r], (size_t)box_numel(&o->m[r].out_box) * es);
    for (int r = 0; r < o->n; r++) free(tmp[r]);
    free(tmp);
    return rc;
}

int rt_comm_coll(rt_comm *c, int thread, uint64_t key, uint64_t seq, int n_members, int me,
                 const rt_coll_member *mine, uint32_t dtype, double t_s, const char *what) {
    pthread_mutex_lock(&c->mu);
    cop *o = find_cop(c, key, seq);
    if (!o) {
        o = calloc(1, sizeof *o);
        rt_coll_member *m = calloc((size_t)n_members, sizeof *m);
        if (!o || !m) {
            free(o), free(m);
            int rc = fail_l(c, "out of memory in %s", what);
            pthread_mutex_unlock(&c->mu);
            return rc;
        }
        *o = (cop){.key = key, .seq = seq, .n = n_members, .left = n_members, .m = m, .next = c->cops};
        c->cops = o;
    }
    int rc = 0;
    if (o->n != n_members || me < 0 || me >= o->n) {
        rc = fail_l(c, "collective mismatch: %s has %d members, another member counts %d", what, n_members, o->n);
    } else {
        o->m[me] = *mine;
        o->t_s = later(o->t_s, t_s);
        if (++o->posted == o->n) {
            if (c->emulate) o->end = occupy_coll(c, o);
            o->running = true;
            changed(c);
            pthread_mutex_unlock(&c->mu);
            int bad = run_cop(o, dtype);
            pthread_mutex_lock(&c->mu);
            if (bad) fail_l(c, "out of memory running %s", what);
            o->done = true;
            changed(c);
        } else {
            changed(c);
            rc = wait_until(c, thread, cop_done, o, what);
        }
    }
    double end = rc ? 0 : o->end;
    if (!rc && --o->left == 0) {
        for (cop **p = &c->cops; *p; p = &(*p)->next)
            if (*p == o) { *p = o->next; break; }
        free(o->m), free(o);
    }
    if (!rc && c->emulate) rc = wait_transfer(c, thread, end);
    rc = c->failed ? -1 : rc;
    pthread_mutex_unlock(&c->mu);
    return rc;
}
