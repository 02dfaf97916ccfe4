/*
 * cpu/backend.c: the CPU backend behind the backend interface (rt.h, "backend.c").
 *
 * Every rank of the plan is a set of threads of this process and its arena is host memory, so
 * upload and download are memcpy; kernels are rt_cpu_kernel (dispatch.c and the operator family
 * files); copies are rt_box_add; send/recv, collectives and events go through comm.c, the
 * in-process NCCL, whose deadlock detection and timeout make a plan that would hang under NCCL
 * fail here with the waiting instructions named. Each stream runs on a host thread of its own
 * (thread_per_stream) and each call returns when its work is done.
 *
 * Serial (planrun --backend cpu-serial): one host thread per rank issues all of its streams'
 * work in program order, as an asynchronous backend's walker does, but every call still blocks
 * (CUDA_LAUNCH_BLOCKING's spirit). It runs the interpreter's one-walker-per-rank path on any
 * machine, and a plan that deadlocks only this way depends on two streams of one rank
 * overlapping where the plan's events do not say so.
 *
 * This backend is the reference: its kernels are checked against finite differences
 * (tests/unit_kernels.c) and every other backend's results are compared with its.
 */
#include "cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static rt_comm *comm_of(rt_backend *b);

// An error recorded by comm.c (it has already failed the run) copied into err.
static int comm_status(rt_backend *b, int rc, char *err, size_t err_n) {
    if (rc) {
        const char *e = rt_comm_error(comm_of(b));
        snprintf(err, err_n, "%s", e ? e : "communication failed");
    }
    return rc;
}

static void *be_arena_alloc(rt_backend *b, int rank, uint64_t bytes, char *err, size_t err_n) {
    (void)b;
    void *a = bytes <= SIZE_MAX ? calloc(1, bytes ? (size_t)bytes : 1) : NULL;
    if (!a) snprintf(err, err_n, "rank %d: cannot allocate its arena of %llu bytes", rank, (unsigned long long)bytes);
    return a;
}

static void be_arena_free(rt_backend *b, int rank, void *arena) {
    (void)b, (void)rank;
    free(arena);
}

static int be_move(rt_backend *b, int rank, void *dst, const void *src, uint64_t bytes, char *err, size_t err_n) {
    (void)b, (void)rank, (void)err, (void)err_n;
    if (bytes) memmove(dst, src, (size_t)bytes);
    return 0;
}

// Whether any of n floats (their bits) is a NaN or an infinity. |x|'s bits reach the
// exponent's all-ones (0x7f800000) exactly when adding 0x00800000 sets bit 31, so an OR of
// those sums tells, two floats to a 64-bit word (a half never carries into the other) and four
// words at a time: the check runs after every operator (guard.c) and must cost little next to
// the kernels (a plain isfinite loop was 16% of gpt-tiny's instructions).
static bool any_nonfinite32(const uint32_t *u, uint64_t n) {
    const uint64_t mask = 0x7fffffff7fffffffull, add = 0x0080000000800000ull;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w[4];
        memcpy(w, u + i, sizeof w);
        a0 |= (w[0] & mask) + add, a1 |= (w[1] & mask) + add, a2 |= (w[2] & mask) + add, a3 |= (w[3] & mask) + add;
    }
    uint64_t a = a0 | a1 | a2 | a3;
    for (; i < n; i++) a |= (u[i] & 0x7fffffffu) + 0x00800000u;
    return (a & 0x8000000080000000ull) != 0;
}

// The same for doubles: |x| + 2^52 sets bit 63 exactly when the exponent is all ones.
static bool any_nonfinite64(const uint64_t *u, uint64_t n) {
    const uint64_t mask = 0x7fffffffffffffffull, add = 0x0010000000000000ull;
    uint64_t a0 = 0, a1 = 0, i = 0;
    for (; i + 2 <= n; i += 2) a0 |= (u[i] & mask) + add, a1 |= (u[i + 1] & mask) + add;
    if (i < n) a0 |= (u[i] & mask) + add;
    return ((a0 | a1) >> 63) != 0;
}

// The first NaN or infinity among n elements (guard.c): the arena is host memory and every
// call has returned when the walker asks. f16 and bf16 buffers do not reach the cpu backend.
static int64_t be_find_nonfinite(rt_backend *b, const rt_exec *x, const void *data, uint64_t n, uint32_t dtype, char *err,
                                 size_t err_n) {
    (void)b, (void)x, (void)err, (void)err_n;
    if (dtype == RT_DTYPE_F64 && any_nonfinite64(data, n)) {
        const double *d = data;
        for (uint64_t i = 0; i < n; i++)
            if (!isfinite(d[i])) return (int64_t)i;
    } else if (dtype == 0 && any_nonfinite32(data, n)) {
        const float *f = data;
        for (uint64_t i = 0; i < n; i++)
            if (!isfinite(f[i])) return (int64_t)i;
    }
    return -1;
}

// What rt_backend_cpu_init's flags make of the backend; ctx points here.
typedef struct cpu_backend {
    rt_backend b;
    rt_comm *comm;
    bool f64;
} cpu_backend;

static int be_kernel(rt_backend *b, const rt_exec *x, const rt_kernel *k, char *err, size_t err_n) {
    (void)x;
    return ((cpu_backend *)b->ctx)->f64 ? rt_cpu_kernel_f64(k, err, err_n) : rt_cpu_kernel(k, err, err_n);
}

static int be_copy(rt_backend *b, const rt_exec *x, void *dst, const rt_box *db, const void *src, const rt_box *sb,
                    uint64_t bytes, uint32_t dtype, char *err, size_t err_n) {
    (void)b, (void)x, (void)err, (void)err_n;
    if (!db || !sb) {
        if (src) memmove(dst, src, (size_t)bytes);
        else memset(dst, 0, (size_t)bytes);
        return 0;
    }
    memset(dst, 0, (size_t)bytes);
    if (src) rt_box_add(dst, db, src, sb, dtype);
    return 0;
}

static int be_p2p(rt_backend *b, const rt_exec *x, rt_p2p *items, int n, char *err, size_t err_n) {
    return comm_status(b, rt_comm_p2p(comm_of(b), x->thread, x->rank, items, n), err, err_n);
}

static int be_coll(rt_backend *b, const rt_exec *x, const rt_coll *c, char *err, size_t err_n) {
    uint64_t key = (uint64_t)c->group << 32 | c->instance;
    int rc = rt_comm_coll(comm_of(b), x->thread, key, c->seq, c->n_members, c->me, &c->mine, c->dtype, c->t_s, c->what);
    return comm_status(b, rc, err, err_n);
}

static int be_record(rt_backend *b, const rt_exec *x, uint32_t event, uint64_t ordinal, char *err, size_t err_n) {
    (void)err, (void)err_n;
    rt_comm_record(comm_of(b), x->rank, event, ordinal);
    return 0;
}

static int be_wait(rt_backend *b, const rt_exec *x, uint32_t event, uint64_t ordinal, const char *what, char *err, size_t err_n) {
    return comm_status(b, rt_comm_wait_event(comm_of(b), x->thread, x->rank, event, ordinal, what), err, err_n);
}

static void be_step_begin(rt_backend *b, int n_threads) { rt_comm_reset(comm_of(b), n_threads); }
static void be_thread_exit(rt_backend *b, int thread) { rt_comm_exit(comm_of(b), thread); }
static void be_fail(rt_backend *b, const char *msg) { rt_comm_fail(comm_of(b), "%s", msg); }
static const char *be_error(rt_backend *b) { return rt_comm_error(comm_of(b)); }

static void be_free(rt_backend *b) {
    rt_comm_free(comm_of(b));
    free(b->ctx);
}

static rt_comm *comm_of(rt_backend *b) { return ((cpu_backend *)b->ctx)->comm; }

void rt_backend_cpu_dilate(rt_backend *b, double dilation) { rt_comm_dilate(comm_of(b), dilation); }

rt_backend *rt_backend_cpu_init(int n_ranks, uint32_t streams, uint32_t events, double timeout_s, unsigned flags, char *err, size_t err_n) {
    bool serial = flags & RT_CPU_SERIAL;
    // One BLAS thread per call: the ranks are the parallelism, and a GEMM then sums in the same
    // order on every run (a resumed run equals an uninterrupted one bit for bit).
    openblas_set_num_threads(1);
    cpu_backend *cb = malloc(sizeof *cb);
    rt_comm *c = rt_comm_new(n_ranks * (int)(streams ? streams : 1), n_ranks, events ? events : 1, timeout_s);
    if (!cb || !c) {
        free(cb), rt_comm_free(c);
        snprintf(err, err_n, "cpu backend: out of memory setting up %d ranks", n_ranks);
        return NULL;
    }
    cb->comm = c, cb->f64 = flags & RT_CPU_F64;
    rt_comm_emulate(c, flags & RT_CPU_NETWORK);
    rt_backend *b = &cb->b;
    *b = (rt_backend){
        .name = serial ? "cpu-serial" : "cpu",
        .thread_per_stream = !serial,
        .ctx = cb,
        .arena_alloc = be_arena_alloc,
        .arena_free = be_arena_free,
        .upload = be_move,
        .download = be_move,
        .kernel = be_kernel,
        .find_nonfinite = be_find_nonfinite,
        .copy = be_copy,
        .p2p = be_p2p,
        .coll = be_coll,
        .record = be_record,
        .wait = be_wait,
        .step_begin = be_step_begin,
        .thread_exit = be_thread_exit,
        .fail = be_fail,
        .error = be_error,
        .free = be_free,
    };
    return b;
}
