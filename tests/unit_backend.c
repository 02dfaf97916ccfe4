/*
 * unit_backend.c: the backend interface (runtime/rt.h, "backend.c") and the CPU backend behind
 * it: the dispatch wrappers refuse a missing handle or required entry with a message and skip
 * a missing optional one; upload and download round-trip; copy places boxes, zero-fills and
 * copies bytes; collectives and events work through the interface from threads; the first
 * failure wins; ranks that wait on each other's collectives are reported as a deadlock at once;
 * with network emulation (RT_CPU_NETWORK) a collective lasts the plan's time for it (times the
 * dilation), two on the same ranks' links go one after the other, and messages use each side of
 * a link on its own.
 */
#include "rt.h"
#include "test.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void wrappers_refuse_missing_entries(void) {
    char err[256] = "";
    rt_backend empty = {.name = "empty"};
    rt_exec x = {0, 0, 0};
    EXPECT(rt_backend_kernel(&empty, &x, NULL, err, sizeof err) == -1);
    EXPECT(strstr(err, "empty backend") && strstr(err, "kernel"));
    EXPECT(rt_backend_upload(NULL, 0, NULL, NULL, 0, err, sizeof err) == -1);
    EXPECT(strstr(err, "upload") != NULL);
    EXPECT(rt_backend_arena_alloc(&empty, 0, 16, err, sizeof err) == NULL);
    EXPECT(strstr(err, "arena_alloc") != NULL);
    // Optional entries are skipped.
    rt_backend_step_begin(&empty, 3);
    rt_backend_thread_exit(&empty, 0);
    EXPECT(rt_backend_step_end(&empty, err, sizeof err) == 0);
    EXPECT(rt_backend_error(&empty) == NULL);
    EXPECT(rt_backend_fail(&empty, "x %d", 1) == -1);
    rt_backend_free(&empty);
    rt_backend_free(NULL);
}

static void memory_and_copies(rt_backend *b) {
    char err[256] = "";
    float *arena = rt_backend_arena_alloc(b, 0, 64 * sizeof(float), err, sizeof err);
    EXPECT(arena != NULL);
    if (!arena) return;
    bool zero = true;
    for (int i = 0; i < 64; i++) zero &= arena[i] == 0;
    EXPECT(zero); // arenas start zeroed
    float host[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8] = {0};
    EXPECT(rt_backend_upload(b, 0, arena, host, sizeof host, err, sizeof err) == 0);
    EXPECT(rt_backend_download(b, 0, back, arena, sizeof back, err, sizeof err) == 0);
    EXPECT(!memcmp(host, back, sizeof host));
    rt_exec x = {0, 0, 0};
    // Bytes as they are.
    EXPECT(rt_backend_copy(b, &x, arena + 8, NULL, arena, NULL, 8 * sizeof(float), 0, err, sizeof err) == 0);
    EXPECT(!memcmp(arena + 8, host, sizeof host));
    // Boxes: a [2, 4] tensor; src holds row 1 (start [1, 0]), dst the whole tensor: row 0 zero.
    rt_box whole = {.rank = 2, .start = {0, 0}, .shape = {2, 4}, .full = {2, 4}};
    rt_box row1 = {.rank = 2, .start = {1, 0}, .shape = {1, 4}, .full = {2, 4}};
    for (int i = 0; i < 8; i++) arena[16 + i] = -1;
    EXPECT(rt_backend_copy(b, &x, arena + 16, &whole, host, &row1, 8 * sizeof(float), 0, err, sizeof err) == 0);
    EXPECT(arena[16] == 0 && arena[19] == 0 && arena[20] == 1 && arena[23] == 4);
    // Zero fill (src NULL).
    EXPECT(rt_backend_copy(b, &x, arena + 16, &whole, NULL, &row1, 8 * sizeof(float), 0, err, sizeof err) == 0);
    EXPECT(arena[20] == 0 && arena[23] == 0);
    rt_backend_arena_free(b, 0, arena);
    rt_backend_arena_free(b, 0, NULL);
}

typedef struct member {
    rt_backend *b;
    int rank;
    float in[4], out[4];
    int rc;
} member;

// Two ranks all-reduce [rank+1, ...] through the interface; rank 1 then records an event that
// rank 1's second stream (thread 3) waits for.
static void *member_main(void *arg) {
    member *m = arg;
    char err[256];
    for (int i = 0; i < 4; i++) m->in[i] = (float)(m->rank + 1) * (float)(i + 1);
    rt_box box = {.rank = 1, .start = {0}, .shape = {4}, .full = {4}};
    rt_coll c = {.kind = 0, .group = 0, .instance = 0, .seq = 1, .n_members = 2, .me = m->rank,
                 .mine = {.rank = m->rank, .in = m->in, .out = m->out, .in_box = box, .out_box = box, .contributes = true},
                 .dtype = 0, .what = "test all_reduce"};
    rt_exec x = {m->rank * 2, m->rank, 0};
    m->rc = rt_backend_coll(m->b, &x, &c, err, sizeof err);
    if (!m->rc && m->rank == 1) m->rc = rt_backend_record(m->b, &x, 0, 1, err, sizeof err);
    rt_backend_thread_exit(m->b, x.thread);
    return NULL;
}

static void *waiter_main(void *arg) {
    member *m = arg;
    char err[256];
    rt_exec x = {3, 1, 1};
    m->rc = rt_backend_wait(m->b, &x, 0, 1, "test wait", err, sizeof err);
    rt_backend_thread_exit(m->b, x.thread);
    return NULL;
}

static void collectives_and_events(rt_backend *b) {
    member m[2] = {{.b = b, .rank = 0}, {.b = b, .rank = 1}}, w = {.b = b, .rank = 1};
    pthread_t th[3];
    rt_backend_step_begin(b, 3);
    pthread_create(&th[2], NULL, waiter_main, &w);
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, member_main, &m[i]);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    EXPECT(m[0].rc == 0 && m[1].rc == 0 && w.rc == 0);
    EXPECT(m[0].out[0] == 3 && m[0].out[3] == 12 && m[1].out[2] == 9);
    EXPECT(rt_backend_error(b) == NULL);
}

static void first_failure_wins(rt_backend *b) {
    rt_backend_step_begin(b, 1);
    EXPECT(rt_backend_fail(b, "first %s", "failure") == -1);
    rt_backend_fail(b, "second");
    const char *e = rt_backend_error(b);
    EXPECT(e && !strcmp(e, "first failure"));
    // A blocked call returns -1 once the run has failed.
    char err[256];
    rt_exec x = {0, 0, 0};
    EXPECT(rt_backend_wait(b, &x, 0, 5, "never recorded", err, sizeof err) == -1);
    rt_backend_step_begin(b, 1);
    EXPECT(rt_backend_error(b) == NULL); // a new step starts clean
}

// One thread's part in the tests below: a collective (group, t_s) or a send/recv pair.
typedef struct part {
    rt_backend *b;
    int rank, stream, group, peer;
    double t_s, end;
    float in[4], out[4];
    int rc;
} part;

static void *coll_main(void *arg) {
    part *p = arg;
    char err[256];
    for (int i = 0; i < 4; i++) p->in[i] = (float)(p->rank + 1);
    rt_box box = {.rank = 1, .start = {0}, .shape = {4}, .full = {4}};
    rt_coll c = {.kind = 0, .group = (uint32_t)p->group, .instance = 0, .seq = 1, .n_members = 2, .me = p->rank,
                 .mine = {.rank = p->rank, .in = p->in, .out = p->out, .in_box = box, .out_box = box, .contributes = true},
                 .dtype = 0, .what = p->group ? "all_reduce on group 1" : "all_reduce on group 0", .t_s = p->t_s};
    rt_exec x = {p->rank * 2 + p->stream, p->rank, p->stream};
    p->rc = rt_backend_coll(p->b, &x, &c, err, sizeof err);
    p->end = mono_s();
    rt_backend_thread_exit(p->b, x.thread);
    return NULL;
}

// A send to the peer and a receive from it, as one group.
static void *exchange_main(void *arg) {
    part *p = arg;
    char err[256];
    p->in[0] = (float)p->rank;
    rt_p2p items[2] = {{.send = true, .peer = p->peer, .tag = 0, .seq = 1, .data = p->in, .bytes = sizeof(float), .what = "send", .t_s = p->t_s},
                       {.send = false, .peer = p->peer, .tag = 0, .seq = 1, .data = p->out, .bytes = sizeof(float), .what = "recv", .t_s = p->t_s}};
    rt_exec x = {p->rank * 2, p->rank, 0};
    p->rc = rt_backend_p2p(p->b, &x, items, 2, err, sizeof err);
    p->end = mono_s();
    rt_backend_thread_exit(p->b, x.thread);
    return NULL;
}

static double run_parts(rt_backend *b, part *p, int n, void *(*fn)(void *)) {
    pthread_t th[4];
    rt_backend_step_begin(b, n);
    double t0 = mono_s();
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, fn, &p[i]);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    return t0;
}

// Rank 0 waits in a collective on group 0, rank 1 in one on group 1: neither can complete.
static void collective_deadlock(void) {
    char err[256];
    rt_backend *b = rt_backend_cpu_init(2, 2, 1, 30, 0, err, sizeof err);
    EXPECT(b != NULL);
    if (!b) return;
    part p[2] = {{.b = b, .rank = 0, .group = 0}, {.b = b, .rank = 1, .group = 1}};
    double t0 = run_parts(b, p, 2, coll_main);
    const char *e = rt_backend_error(b);
    EXPECT(p[0].rc == -1 && p[1].rc == -1);
    EXPECT(e && strstr(e, "deadlock") && strstr(e, "group 0") && strstr(e, "group 1"));
    EXPECT(p[0].end - t0 < 29); // found at once, not by the 30 s timeout
    rt_backend_free(b);
}

static void network_emulation(void) {
    char err[256];
    rt_backend *b = rt_backend_cpu_init(2, 2, 1, 30, RT_CPU_NETWORK, err, sizeof err);
    EXPECT(b != NULL);
    if (!b) return;
    // One all-reduce of 0.05 s: both members return after it, with the sum.
    part one[2] = {{.b = b, .rank = 0, .t_s = 0.05}, {.b = b, .rank = 1, .t_s = 0.05}};
    double t0 = run_parts(b, one, 2, coll_main);
    EXPECT(one[0].rc == 0 && one[1].rc == 0 && one[0].out[0] == 3 && one[1].out[3] == 3);
    EXPECT(one[0].end - t0 >= 0.05 && one[1].end - t0 >= 0.05);
    // Two at once on the same two ranks (streams 0 and 1, groups 0 and 1): one link each, so
    // the second starts when the first ends.
    part two[4] = {{.b = b, .rank = 0, .group = 0, .t_s = 0.05}, {.b = b, .rank = 1, .group = 0, .t_s = 0.05},
                   {.b = b, .rank = 0, .stream = 1, .group = 1, .t_s = 0.05}, {.b = b, .rank = 1, .stream = 1, .group = 1, .t_s = 0.05}};
    t0 = run_parts(b, two, 4, coll_main);
    double last = 0;
    for (int i = 0; i < 4; i++) {
        last = two[i].end > last ? two[i].end : last;
        EXPECT(two[i].rc == 0);
    }
    EXPECT(last - t0 >= 0.1);
    // The longer time a member gives counts.
    part uneven[2] = {{.b = b, .rank = 0, .t_s = 0.01}, {.b = b, .rank = 1, .t_s = 0.08}};
    t0 = run_parts(b, uneven, 2, coll_main);
    EXPECT(uneven[0].end - t0 >= 0.08);
    // Each rank sends to the other: the two messages use opposite sides of each link.
    part ex[2] = {{.b = b, .rank = 0, .peer = 1, .t_s = 0.05}, {.b = b, .rank = 1, .peer = 0, .t_s = 0.05}};
    t0 = run_parts(b, ex, 2, exchange_main);
    EXPECT(ex[0].rc == 0 && ex[1].rc == 0 && ex[0].out[0] == 1 && ex[1].out[0] == 0);
    EXPECT(ex[0].end - t0 >= 0.05 && ex[1].end - t0 >= 0.05);
    // Dilated 3 times: 0.02 s takes 0.06 s.
    rt_backend_cpu_dilate(b, 3);
    part dil[2] = {{.b = b, .rank = 0, .t_s = 0.02}, {.b = b, .rank = 1, .t_s = 0.02}};
    t0 = run_parts(b, dil, 2, coll_main);
    EXPECT(dil[0].rc == 0 && dil[0].end - t0 >= 0.06 && dil[1].end - t0 >= 0.06);
    EXPECT(rt_backend_error(b) == NULL);
    rt_backend_free(b);
}

int main(void) {
    wrappers_refuse_missing_entries();
    collective_deadlock();
    network_emulation();
    char err[256];
    for (int serial = 0; serial < 2; serial++) {
        rt_backend *b = rt_backend_cpu_init(2, 2, 1, 10, serial ? RT_CPU_SERIAL : 0, err, sizeof err);
        EXPECT(b != NULL);
        if (!b) break;
        EXPECT(!strcmp(b->name, serial ? "cpu-serial" : "cpu") && b->thread_per_stream == !serial);
        memory_and_copies(b);
        collectives_and_events(b);
        first_failure_wins(b);
        rt_backend_free(b);
    }
    return test_summary();
}
