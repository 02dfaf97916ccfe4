/*
 * unit_backend.c: the backend interface (runtime/rt.h, "backend.c") and the CPU backend behind
 * it: the dispatch wrappers refuse a missing handle or required entry with a message and skip
 * a missing optional one; upload and download round-trip; copy places boxes, zero-fills and
 * copies bytes; collectives and events work through the interface from threads; the first
 * failure wins.
 */
#include "rt.h"
#include "test.h"

#include <pthread.h>
#include <string.h>

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

int main(void) {
    wrappers_refuse_missing_entries();
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
