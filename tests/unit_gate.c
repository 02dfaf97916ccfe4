/*
 * unit_gate.c: the background job's admission gate (runtime/gate.c) and its accounting. Every
 * case is made deterministic by waiting until a thread is seen blocked (its admission counted
 * as held) before the test lets it go:
 *   - a limit of 0 is refused; admissions up to the limit pass at once and count nothing held;
 *   - one more waits (held 1) until a piece is released; max_inflight never exceeds the limit;
 *   - an admission while the foreground is inside a collective waits (held_coll 1) until the
 *     foreground leaves it; two nested collectives (two streams) both have to end;
 *   - a collective entered while a piece is in flight counts as overlapped;
 *   - closing the gate fails a waiting admission and every later one; a shut gate gives up
 *     after its timeout with -2;
 *   - under load (threads marking collectives and threads admitting pieces at random) no piece
 *     is admitted while a collective is open and never more than the limit are in flight;
 *   - rt_backend_when_done calls the function at once on a backend without the entry.
 */
#include "rt.h"
#include "test.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

static void nap(void) {
    struct timespec t = {0, 1000000}; // 1 ms
    nanosleep(&t, NULL);
}

static uint64_t held_of(rt_gate *g) {
    rt_gate_stats s;
    rt_gate_stats_get(g, &s);
    return s.held;
}

// Waits (up to 10 s) until the gate has counted `held` held admissions.
static bool wait_held(rt_gate *g, uint64_t held) {
    for (int i = 0; i < 10000; i++, nap())
        if (held_of(g) >= held) return true;
    return false;
}

typedef struct admitter {
    rt_gate *g;
    double timeout_s;
    int rc;
    bool done;
} admitter;

static void *admit_main(void *arg) {
    admitter *a = arg;
    a->rc = rt_gate_admit(a->g, a->timeout_s);
    __atomic_store_n(&a->done, true, __ATOMIC_SEQ_CST);
    return NULL;
}

static bool is_done(admitter *a) { return __atomic_load_n(&a->done, __ATOMIC_SEQ_CST); }

static void limit_and_release(void) {
    rt_gate g;
    EXPECT(rt_gate_init(&g, 0) == -1);
    rt_gate_free(&g); // a failed init is safe to free
    EXPECT(rt_gate_init(&g, 2) == 0);
    EXPECT(rt_gate_admit(&g, 10) == 0);
    EXPECT(rt_gate_admit(&g, 10) == 0);
    EXPECT(held_of(&g) == 0);
    admitter a = {&g, 10, 99, false};
    pthread_t t;
    pthread_create(&t, NULL, admit_main, &a);
    EXPECT(wait_held(&g, 1));
    EXPECT(!is_done(&a)); // the third waits for a release
    rt_gate_cb_release(&g);
    pthread_join(t, NULL);
    EXPECT(a.rc == 0);
    rt_gate_stats s;
    rt_gate_stats_get(&g, &s);
    EXPECT(s.admitted == 3 && s.held == 1 && s.held_coll == 0 && s.max_inflight == 2);
    rt_gate_free(&g);
}

static void collectives_hold(void) {
    rt_gate g;
    EXPECT(rt_gate_init(&g, 1) == 0);
    rt_gate_cb_coll_enter(&g);
    rt_gate_cb_coll_enter(&g); // a second stream's collective
    admitter a = {&g, 10, 99, false};
    pthread_t t;
    pthread_create(&t, NULL, admit_main, &a);
    EXPECT(wait_held(&g, 1));
    rt_gate_cb_coll_leave(&g);
    for (int i = 0; i < 20; i++) nap();
    EXPECT(!is_done(&a)); // one collective is still open
    rt_gate_cb_coll_leave(&g);
    pthread_join(t, NULL);
    EXPECT(a.rc == 0);
    rt_gate_cb_coll_enter(&g); // the piece is in flight: this collective overlaps it
    rt_gate_cb_coll_leave(&g);
    rt_gate_cb_release(&g);
    rt_gate_stats s;
    rt_gate_stats_get(&g, &s);
    EXPECT(s.admitted == 1 && s.held == 1 && s.held_coll == 1 && s.fg_colls == 3 && s.overlapped == 1);
    rt_gate_free(&g);
}

static void close_and_timeout(void) {
    rt_gate g;
    EXPECT(rt_gate_init(&g, 1) == 0);
    rt_gate_cb_coll_enter(&g);
    EXPECT(rt_gate_admit(&g, 0.02) == -2); // shut for longer than the timeout
    admitter a = {&g, 10, 99, false};
    pthread_t t;
    pthread_create(&t, NULL, admit_main, &a);
    EXPECT(wait_held(&g, 2));
    rt_gate_close(&g);
    pthread_join(t, NULL);
    EXPECT(a.rc == -1);
    rt_gate_cb_coll_leave(&g);
    EXPECT(rt_gate_admit(&g, 10) == -1); // closed for good
    rt_gate_close(NULL);
    rt_gate_free(&g);
    rt_gate_free(NULL);
}

/* ---- under load ---- */

typedef struct load {
    rt_gate *g;
    pthread_mutex_t mu;
    int inflight, bad;
    uint64_t seed;
} load;

static uint64_t next(uint64_t *s) { return *s = rt_mix(*s); }

// A foreground stream: collectives of random length, marked as interp.c marks them.
static void *fg_main(void *arg) {
    load *l = arg;
    pthread_mutex_lock(&l->mu);
    uint64_t s = l->seed++;
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < 300; i++) {
        rt_gate_cb_coll_enter(l->g);
        if (next(&s) % 4 == 0) nap();
        rt_gate_cb_coll_leave(l->g);
        if (next(&s) % 2 == 0) nap();
    }
    return NULL;
}

static void *bg_main(void *arg) {
    load *l = arg;
    for (int i = 0; i < 400; i++) {
        if (rt_gate_admit(l->g, 30)) {
            pthread_mutex_lock(&l->mu), l->bad++, pthread_mutex_unlock(&l->mu);
            return NULL;
        }
        pthread_mutex_lock(&l->mu);
        if (++l->inflight > (int)l->g->limit) l->bad++; // the test's own count of pieces in flight
        pthread_mutex_unlock(&l->mu);
        sched_yield();
        pthread_mutex_lock(&l->mu);
        l->inflight--;
        pthread_mutex_unlock(&l->mu);
        rt_gate_cb_release(l->g);
    }
    return NULL;
}

static void under_load(void) {
    rt_gate g;
    EXPECT(rt_gate_init(&g, 2) == 0);
    load l = {.g = &g, .seed = 7};
    pthread_mutex_init(&l.mu, NULL);
    pthread_t fg[2], bg[3];
    for (int i = 0; i < 2; i++) pthread_create(&fg[i], NULL, fg_main, &l);
    for (int i = 0; i < 3; i++) pthread_create(&bg[i], NULL, bg_main, &l);
    for (int i = 0; i < 2; i++) pthread_join(fg[i], NULL);
    for (int i = 0; i < 3; i++) pthread_join(bg[i], NULL);
    rt_gate_stats s;
    rt_gate_stats_get(&g, &s);
    EXPECT(l.bad == 0);
    EXPECT(s.admitted == 1200 && s.fg_colls == 600 && s.max_inflight <= 2 && s.held >= s.held_coll);
    EXPECT(g.inflight == 0 && g.fg_in_coll == 0);
    pthread_mutex_destroy(&l.mu);
    rt_gate_free(&g);
}

// No admission while a collective is open, seen from the piece: a collective that is open after
// the admission must have been entered after it, that is while the piece was in flight, which
// the gate counts as overlapped. A collective open and no new overlap means the piece was
// admitted inside it.
static void *strict_bg(void *arg) {
    rt_gate *g = arg;
    int bad = 0;
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&g->mu);
        uint64_t before = g->stats.overlapped;
        pthread_mutex_unlock(&g->mu);
        if (rt_gate_admit(g, 30)) return (void *)1;
        pthread_mutex_lock(&g->mu);
        bad += g->fg_in_coll != 0 && g->stats.overlapped == before;
        pthread_mutex_unlock(&g->mu);
        rt_gate_cb_release(g);
    }
    return bad ? (void *)1 : NULL;
}

static void *strict_fg(void *arg) {
    rt_gate *g = arg;
    for (int i = 0; i < 500; i++) {
        rt_gate_cb_coll_enter(g);
        rt_gate_cb_coll_leave(g);
    }
    return NULL;
}

static void strict(void) {
    rt_gate g;
    EXPECT(rt_gate_init(&g, 1) == 0);
    pthread_t a, b;
    void *ra = NULL;
    pthread_create(&a, NULL, strict_bg, &g);
    pthread_create(&b, NULL, strict_fg, &g);
    pthread_join(a, &ra);
    pthread_join(b, NULL);
    EXPECT(ra == NULL);
    rt_gate_free(&g);
}

static int calls;
static void count_call(void *arg) { (void)arg, calls++; }

static void when_done_without_entry(void) {
    rt_backend b = {.name = "blocking"};
    rt_exec x = {0, 0, 0};
    char err[128];
    EXPECT(rt_backend_when_done(&b, &x, count_call, NULL, err, sizeof err) == 0 && calls == 1);
    EXPECT(rt_backend_when_done(NULL, &x, count_call, NULL, err, sizeof err) == -1 && calls == 1);
}

int main(void) {
    limit_and_release();
    collectives_hold();
    close_and_timeout();
    under_load();
    strict();
    when_done_without_entry();
    return test_summary();
}
