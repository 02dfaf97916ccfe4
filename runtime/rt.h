/*
 * rt.h: planrun's runtime, its one internal header, sectioned by file.
 *
 *   rand.c      the counter-based random numbers every part shares (data, init, dropout)
 *   cpu/        the CPU backend's operators: every row of runtime/ops.def, forward and
 *               backward, in plain C with GEMMs through CBLAS: dispatch.c, one file per
 *               operator family (matmul.c, norm.c, attention.c, ...), backend.c around them
 *   data.c      synthetic data, initializers and token files
 *   comm.c      in-process collectives and send/recv for the CPU backend (ranks are threads)
 *   comm_mpi.c  the CPU backend with one rank per process, communicating through MPI
 *   metrics.c   planrun's per-step figures: JSON lines, CSV, the SVG curves
 *   gate.c      the admission gate of a background job (planrun --background)
 *   interp.c    the interpreter: one rank's program, its loops, streams and events
 *   bgjob.c     the background job: a replica of a one-rank plan beside every foreground rank
 *   st.c        safetensors files (save, load, compare parameters)
 *   launch.c    rank discovery (flags, torchrun, OpenMPI, SLURM) and the NCCL-id rendezvous
 *   planrun.c   the command line
 *
 * The runtime trusts nothing it reads: a plan passes plan_check before it runs, and a kernel
 * that meets shapes it cannot handle returns an error naming them rather than asserting.
 */
#ifndef RT_H
#define RT_H

#include "plan/plan.h"

#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

/* ---- rand.c: counter-based random numbers ----
 *
 * Every random value plancc's runtime draws is a pure function of a key: no generator state,
 * so a value does not depend on which rank draws it or in which order (a tensor-parallel piece
 * of an initializer, a dropout mask under another split, a sample on another data-parallel rank
 * all come out the same). The mixer is splitmix64's finalizer; keys are built by chaining. */

static inline uint64_t rt_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
// The key of a sequence of words: rt_key(rt_key(a, b), c) ...
static inline uint64_t rt_key(uint64_t key, uint64_t word) { return rt_mix(key ^ rt_mix(word)); }
// A double uniform in [0, 1) from the top 53 bits of rt_mix(key).
static inline double rt_uniform(uint64_t key) { return (double)(rt_mix(key) >> 11) * 0x1.0p-53; }
// A standard normal (Box-Muller over rt_uniform(rt_key(key, 0)) and rt_uniform(rt_key(key, 1))).
double rt_normal(uint64_t key);

/* ---- cpu/dispatch.c: the CPU backend's operators ----
 *
 * A kernel runs one operator on the local pieces of its operands. Each operand is a view: its
 * data (row-major, contiguous), the local sizes, where the piece starts in the logical tensor
 * and the logical sizes. The compiler guarantees that the pieces are consistent with one split
 * of the operator's annotation letters (runtime/ops.def), so most kernels compute on the local
 * shapes as if they were whole. The cases where the split shows (runtime/PLAN_FORMAT.md, "What
 * instructions mean"):
 *   - an input whose `once` is false is R along a mesh axis where the output holds partial sums
 *     (V): its additive contribution (a bias, an addend of add) is counted on one rank of that
 *     axis only, so the kernel leaves it out on this one;
 *   - a loss whose batch letters are split produces its local sum divided by the GLOBAL count
 *     (the logical sizes); its gradient divides by the same count;
 *   - an embedding table split by rows (start[0] > 0 or shape[0] < full[0]) looks up only the
 *     indices in its range (others contribute 0: the output is V); embedding_grad likewise;
 *   - dropout's mask is drawn per GLOBAL element index (from start and full), keyed by
 *     (k->seed, attrs seed, step, micro-batch, block copy, index), so recompute and any split
 *     reproduce it.
 * With accumulate set the kernel adds its result into its outputs instead of overwriting them.
 */
// The element types the runtime computes in: the plan's dtypes (0 f32, 1 f16, 2 bf16, 3 i32),
// and f64, which the CPU backend runs f32 tensors in under planrun --precision f64 (a run that
// checks a plan's algebra without float32's rounding noise). A kernel's view says 0 for it (the
// double instantiation of the kernels reads dtype 0 as double); host code sees RT_DTYPE_F64.
#define RT_DTYPE_F64 8u
// Bytes of one element of dtype (plan dtypes and RT_DTYPE_F64); 0 for an unknown one.
static inline uint32_t rt_dtype_bytes(uint32_t dtype) { return dtype == RT_DTYPE_F64 ? 8 : plan_dtype_bytes(dtype); }

typedef struct rt_view {
    void *data;                     // the local piece, row-major, contiguous
    uint8_t dtype;                  // plan dtype (0 f32, 3 i32; the CPU backend runs only these), or RT_DTYPE_F64
    uint8_t rank;
    bool once;                      // inputs: count an additive contribution on this rank
    int64_t shape[PLAN_MAX_RANK];   // local sizes (dimensions past rank: 1)
    int64_t start[PLAN_MAX_RANK];   // offset of the local piece in the logical tensor (past rank: 0)
    int64_t full[PLAN_MAX_RANK];    // logical sizes (past rank: 1)
} rt_view;

typedef struct rt_kernel {
    uint32_t op;                    // pcc_op_kind: the row of runtime/ops.def
    plan_attrs attrs;               // all zero when the instruction has none
    uint32_t nin, nout;
    const rt_view *in, *out;
    bool accumulate;                // attrs.i[PLAN_AI_ACCUMULATE] != 0: add into the outputs
    uint64_t seed;                  // the run's seed (dropout)
    uint64_t step;                  // 1-based training step (adamw's bias correction, dropout)
    uint32_t mb, layer;             // micro-batch and block copy (dropout)
} rt_kernel;

// Runs k. Returns 0, or -1 with a message in err (an operator or dtype it does not run, shapes
// that do not fit the operator). It never asserts on its arguments' shapes. Thread-safe: ranks
// run kernels concurrently.
int rt_cpu_kernel(const rt_kernel *k, char *err, size_t err_n);
// The same kernels instantiated for doubles (dtype 0 means double here): the unit tests check
// every backward against finite differences of the forward in double precision.
int rt_cpu_kernel_f64(const rt_kernel *k, char *err, size_t err_n);
// The number of elements of a view (the product of its local sizes).
int64_t rt_view_numel(const rt_view *v);

// Runs the statements after li, gi for every element of view v's piece, in local order: li its
// index in the piece, gi its row-major index in the whole logical tensor.
#define RT_FOR_EACH_ELEMENT(v, gi, li, ...)                                                          \
    do {                                                                                           \
        int r_ = (v)->rank;                                                                        \
        int64_t idx_[PLAN_MAX_RANK] = {0}, n_ = rt_view_numel(v);                                  \
        for (int64_t li = 0; li < n_; li++) {                                                      \
            int64_t gi = 0;                                                                        \
            for (int d_ = 0; d_ < r_; d_++) gi = gi * (v)->full[d_] + (v)->start[d_] + idx_[d_];   \
            __VA_ARGS__;                                                                           \
            for (int d_ = r_ - 1; d_ >= 0 && ++idx_[d_] == (v)->shape[d_]; d_--) idx_[d_] = 0;     \
        }                                                                                          \
    } while (0)

/* ---- data.c: initializers, synthetic data and token files ----
 *
 * Every value is keyed by the tensor's NAME (its FNV-1a 64), never its index, so two plans of
 * one model (whatever tensors their strategies add) initialize and feed the same model:
 *   param  element i of block copy c:            key(seed, "init", name, c, i)
 *   input  element i of micro-batch m of step s:  key(seed, "data", name, s, m, i)
 *   tokens and targets: row r (all dimensions but the last) of micro-batch m of step s reads the
 *          corpus from offset o = rt_sample_offset(seed, s, m, r, n - len - 1): tokens[r][j] =
 *          corpus[o + j], targets[r][j] = corpus[o + j + 1]. The corpus is a token file (--data),
 *          or without one a virtual corpus of 2^40 random tokens in [0, high).
 */
typedef struct rt_corpus {
    const uint16_t *tok;            // NULL: the synthetic corpus
    uint64_t n;                     // tokens
    uint16_t max_token;
    void *map; size_t map_bytes;    // the mapping behind tok
} rt_corpus;

// Maps a file of little-endian uint16 tokens (nanoGPT's train.bin). -1 with a message naming
// the file if it cannot be read or holds fewer than 2 tokens.
int rt_corpus_open(rt_corpus *c, const char *path, char *err, size_t err_n);
void rt_corpus_free(rt_corpus *c); // accepts a zeroed corpus
// -1 with a message naming the file when c does not fit p's token inputs (a token outside the
// vocabulary, fewer tokens than a row needs).
int rt_corpus_check(const rt_corpus *c, const plan *p, const char *path, char *err, size_t err_n);
// What the teacher inputs drew so far, summed over every rank and step of the process (each label
// element once per fill). sum_entropy / labels is the best mean loss reachable on them (nats).
typedef struct rt_teacher_stats {
    double labels, sum_label, sum_prob, sum_entropy;
} rt_teacher_stats;
void rt_teacher_stats_get(rt_teacher_stats *s); // thread-safe; zeros when no teacher input was filled
uint64_t rt_sample_offset(uint64_t seed, uint64_t step, uint32_t mb, uint64_t row, uint64_t range);
// Fills a param's or input's piece v (an f32, f64 or i32 view; full/start/shape say which piece).
void rt_init_param(const plan_tensor *t, uint64_t seed, uint32_t copy, const rt_view *v);
// The logical index of element gi of tensor t (a row-major index of the whole tensor as stored,
// v its view): gi itself, or with t's zigzag order the element that stored position holds
// (plan_zigzag_pos along t's zigzag dimension).
int64_t rt_logical_index(const plan_tensor *t, const rt_view *v, int64_t gi);
// -1 with a message when a token file does not fit the tensor (a token outside the vocabulary,
// a corpus shorter than a row). p is the plan t belongs to (a teacher's features are its inputs).
int rt_fill_input(const plan *p, const plan_tensor *t, uint64_t seed, uint64_t step, uint32_t mb, const rt_corpus *c,
                  const rt_view *v, char *err, size_t err_n);

/* ---- comm.c: in-process communication (the CPU backend's NCCL) ----
 *
 * All ranks are threads of one process; every stream of every rank is one thread. Messages and
 * collectives are matched by sequence numbers that each rank counts in program order (per
 * channel: the ordered pair of ranks; per group instance), so matching does not depend on
 * timing. A send waits until its receive has taken the data, as NCCL's does when it has no
 * buffer space; a run of sends and receives is posted as a group first (ncclGroupStart/End), so
 * the order inside it cannot deadlock. One lock guards everything; a waiting thread that sees
 * every other live thread waiting too, with nothing changed since, reports a deadlock at once
 * and names what each thread waits for; a timeout catches the rest. */
typedef struct rt_comm rt_comm;

// A box: the piece of a logical tensor that one member holds (rank <= PLAN_MAX_RANK dims).
typedef struct rt_box {
    uint8_t rank;
    int64_t start[PLAN_MAX_RANK], shape[PLAN_MAX_RANK], full[PLAN_MAX_RANK];
} rt_box;

// One member's part in a collective: where its input and output live, which pieces they hold,
// and whether its input contributes (false where its input is R along a group axis and its
// coordinate there is not 0: a copy of data that another member contributes).
typedef struct rt_coll_member {
    int rank;
    const void *in; void *out;
    rt_box in_box, out_box;
    bool contributes;
} rt_coll_member;

// n_threads: ranks x streams (thread ids index them); events per rank: the most any program has.
// NULL when out of memory.
// Adds into dst (holding box db) the part of src (holding box sb) that lies inside db, elements
// of dtype (f32, i32 or RT_DTYPE_F64). Boxes of rank 0 are scalars.
void rt_box_add(void *dst, const rt_box *db, const void *src, const rt_box *sb, uint32_t dtype);
rt_comm *rt_comm_new(int n_threads, int n_ranks, uint32_t n_events, double timeout_s);
void rt_comm_free(rt_comm *c);              // accepts NULL
// Starts a step: n live threads, all counters and mailboxes empty, no failure.
void rt_comm_reset(rt_comm *c, int n_threads);
// Marks the calling thread finished (it no longer counts as live in the deadlock test).
void rt_comm_exit(rt_comm *c, int thread);
// Makes every other thread stop with msg (the first failure wins). Returns -1.
int rt_comm_fail(rt_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The first failure's message, or NULL.
const char *rt_comm_error(rt_comm *c);

// Events of a rank: record marks ordinal k of event e done; wait blocks until it is.
void rt_comm_record(rt_comm *c, int rank, uint32_t event, uint64_t ordinal);
int rt_comm_wait_event(rt_comm *c, int thread, int rank, uint32_t event, uint64_t ordinal, const char *what);

// A group of sends and receives (one stream's run of them). Each item: peer rank, tag, its
// sequence number on the channel (this rank, the peer, the tag), the data and its bytes. Returns 0, or -1 after a failure (size mismatch,
// deadlock, timeout, another thread's failure).
typedef struct rt_p2p {
    bool send;
    int peer;
    uint32_t tag;                   // the plan's message tag (< PLAN_MAX_TAGS)
    uint64_t seq;
    void *data;
    uint64_t bytes;
    const char *what;               // "rank 0 stream 0 insn 12 (send along pp +1, micro-batch 3)"
    double t_s;                     // the plan's time for it (network emulation; 0: none)
} rt_p2p;
int rt_comm_p2p(rt_comm *c, int thread, int rank, rt_p2p *items, int n);

// A collective on one group instance (key: group and instance), the seq-th on it; `me` is this
// member's index (0..n_members-1) and `mine` its part. The last member to arrive runs it for
// all: each output element is the sum of the contributing members' inputs that hold it (an
// all-reduce sums V pieces; an all-gather or all-to-all places disjoint D pieces; R copies
// contribute once). Elements are of dtype (f32, i32, RT_DTYPE_F64). Each member returns when
// its output is written; with network emulation, when the plan's time for it (t_s, the longest
// any member gives) has passed too.
int rt_comm_coll(rt_comm *c, int thread, uint64_t key, uint64_t seq, int n_members, int me,
                 const rt_coll_member *mine, uint32_t dtype, double t_s, const char *what);
// Network emulation on or off (off at first): collectives and messages take the plan's times on
// links of their own (comm.c, "Network emulation"); dilate multiplies every time by `dilation`
// (<= 0: 1; 1 at first). Set before the first step.
void rt_comm_emulate(rt_comm *c, bool on);
void rt_comm_dilate(rt_comm *c, double dilation);

/* ---- metrics.c: the figures of each step (planrun --json, --metrics, --plot) ---- */
typedef struct rt_step_figures {
    uint64_t step, steps;           // 1-based; of the run's
    double loss;                    // NAN: none
    double time_s;                  // the step's wall time
    double samples_per_s;           // samples of the step (all micro-batches) over its time
    double tokens_per_s;            // ... tokens (a model fed by a token input); < 0: not a token model
    uint64_t arena_bytes;           // the largest arena of a rank (the plan's exact peak)
    uint64_t rss_bytes;             // this process's largest resident set so far
} rt_step_figures;

typedef struct rt_metrics {
    FILE *f;                        // --metrics, or NULL
    bool csv;                       // the file's name ends in .csv (else JSON lines)
    const char *path;
    double *loss, *time_s;          // every step's, for the picture
    size_t n, cap;
} rt_metrics;

// One step's figures as one JSON object, no newline ("type": "step"; schemas/planrun.schema.json).
void rt_step_json(FILE *f, const rt_step_figures *s);
// Starts the figures; path (NULL: kept in memory only) is written as CSV when it ends in .csv,
// else as JSON lines. -1 with a message when the file cannot be opened or is not a regular file.
int rt_metrics_open(rt_metrics *m, const char *path, char *err, size_t err_n);
// Adds a step (to the file, too). -1 with a message when out of memory or the file fails.
int rt_metrics_add(rt_metrics *m, const rt_step_figures *s, char *err, size_t err_n);
// Closes the file; -1 with a message when it could not be written whole.
int rt_metrics_close(rt_metrics *m, char *err, size_t err_n);
void rt_metrics_free(rt_metrics *m); // accepts a zeroed one
// The loss and the step time over the steps as an SVG picture at path, titled. -1 with a message.
int rt_metrics_svg(const rt_metrics *m, const char *path, const char *title, char *err, size_t err_n);

/* ---- gate.c: the admission gate of a background job ----
 *
 * planrun --background runs a one-rank plan beside every foreground rank on the same device
 * (DeepPool's GPU multiplexing). One gate per foreground rank admits the background's pieces
 * (its instructions): at most `limit` in flight, none while the foreground is inside a
 * collective. The foreground's interpreter marks its collectives and the background's asks
 * before each piece (interp.c, through rt_options.gates); the marks and releases reach the gate
 * through rt_backend_when_done, at once on the CPU and when the stream gets there on CUDA. */
typedef struct rt_gate_stats {
    uint64_t admitted;              // background pieces admitted
    uint64_t held;                  // admissions that had to wait (the gate was shut when asked)
    uint64_t held_coll;             // of which: shut because the foreground was inside a collective
    uint64_t fg_colls;              // foreground collectives marked
    uint64_t overlapped;            // of which: entered while a background piece was in flight
    uint32_t max_inflight;          // the most pieces in flight at once (never above limit)
} rt_gate_stats;

typedef struct rt_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t limit;                 // pieces in flight at most
    uint32_t inflight;              // pieces admitted and not yet released
    uint32_t fg_in_coll;            // foreground collectives entered and not yet left
    bool closed, ready;
    rt_gate_stats stats;
} rt_gate;

// A gate that admits up to limit pieces at once. -1 when limit is 0 or the mutex cannot be made.
int rt_gate_init(rt_gate *g, uint32_t limit);
void rt_gate_free(rt_gate *g);      // accepts NULL and a gate whose init failed
// Blocks until a piece may start (nothing of the foreground's collectives in progress, fewer
// than limit in flight) and counts it in flight. 0; -1 once the gate is closed; -2 when it
// stayed shut for timeout_s seconds.
int rt_gate_admit(rt_gate *g, double timeout_s);
// The callbacks (arg: the gate): a piece finished; the foreground enters or leaves a collective.
void rt_gate_cb_release(void *gate);
void rt_gate_cb_coll_enter(void *gate);
void rt_gate_cb_coll_leave(void *gate);
// Wakes every waiting admission and fails every later one. Accepts NULL.
void rt_gate_close(rt_gate *g);
void rt_gate_stats_get(rt_gate *g, rt_gate_stats *s);

/* ---- backend.c: the backend interface ----
 *
 * The interpreter (interp.c) decides what runs, in which order, on which stream, with which
 * buffers; a backend runs it. A backend is a struct of function pointers (ggml's pattern), one
 * per thing the interpreter asks for, filled with designated initializers by the backend's init
 * function (rt_backend_cpu_init; the CUDA backend's rt_backend_cuda_init, cuda/rt_cuda.h). The
 * interpreter calls them only through the rt_backend_* wrappers below, which check the handle
 * and skip an optional entry that is NULL.
 *
 * Memory: every rank's arena is one allocation (arena_alloc), and every pointer the interpreter
 * passes back (a kernel's views, a copy's or collective's operands) points into an arena, so a
 * backend may hand out device memory: the interpreter never dereferences it. Host data (initial
 * parameters, inputs, the loss, safetensors files) crosses with upload and download.
 *
 * Issue model: with thread_per_stream, the interpreter runs every stream of every rank on a host
 * thread of its own, and each call returns when its work is done (the CPU backend: a collective
 * blocks until its group has arrived). Without it, one host thread per rank walks the program
 * and issues the work of all its streams in program order, and a call may return before its work
 * is done (CUDA: kernels and NCCL calls enqueued on the stream named in rt_exec; record and wait
 * are cudaEventRecord and cudaStreamWaitEvent, which need no ordinals); step_end then waits.
 *
 * Errors: every entry returns 0, or -1 with a message in err; the interpreter adds the rank,
 * stream and instruction. fail() makes every other thread of the run give up (the first failure
 * wins, error() returns it); a blocked call returns -1 when it sees a failure.
 *
 * Required: name, arena_alloc, arena_free, upload, download, kernel, copy, p2p, coll, record,
 * wait, fail, error. Optional (NULL: nothing to do): step_begin, step_end, thread_exit,
 * host_sum, when_done, join, round_end, round_fence, round_drain, stamp, stamp_read, free, coll_bucket. */

// Who issues a call: the host thread (0 .. ranks x streams - 1), the rank, and the stream the
// work belongs to.
typedef struct rt_exec {
    int thread, rank, stream;
} rt_exec;

// One collective instruction as a member issues it. The group instance is (group, instance):
// instance is the lowest member rank for a mesh-axis group, UINT32_MAX for an explicit group;
// seq counts this member's collectives on the instance, from 1, in program order.
typedef struct rt_coll {
    uint32_t kind;                  // plan_coll: a row of runtime/colls.def (all_reduce, all_gather, ...)
    uint32_t group, instance;
    uint64_t seq;
    int n_members, me;              // the group's size and this member's index in it (ascending ranks)
    rt_coll_member mine;
    uint8_t dtype;                  // the elements' dtype (rt_dtype_bytes)
    const char *what;               // the instruction, for messages
    double t_s;                     // the plan's time for it (network emulation)
} rt_coll;

typedef struct rt_backend rt_backend;
typedef struct rt_trace rt_trace;   // trace.c: the measured timeline
struct rt_backend {
    const char *name;               // "cpu", "cuda"
    bool thread_per_stream;         // see the issue model above
    void *ctx;                      // the backend's own state

    // An arena of `bytes` (zeroed) for rank; NULL with a message when it cannot.
    void *(*arena_alloc)(rt_backend *b, int rank, uint64_t bytes, char *err, size_t err_n);
    void (*arena_free)(rt_backend *b, int rank, void *arena);           // accepts NULL
    // Copies between host memory and an arena (dst or src inside rank's arena), synchronously.
    int (*upload)(rt_backend *b, int rank, void *dst, const void *src, uint64_t bytes, char *err, size_t err_n);
    int (*download)(rt_backend *b, int rank, void *dst, const void *src, uint64_t bytes, char *err, size_t err_n);

    // Runs one operator (rt_kernel; its views point into the arena).
    int (*kernel)(rt_backend *b, const rt_exec *x, const rt_kernel *k, char *err, size_t err_n);
    // A local copy: with boxes, dst (holding db) becomes the part of src (holding sb) inside db,
    // zero elsewhere; with src NULL, dst becomes zero; with db and sb NULL, `bytes` bytes are
    // copied as they are. Elements are of dtype (rt_dtype_bytes).
    int (*copy)(rt_backend *b, const rt_exec *x, void *dst, const rt_box *db, const void *src, const rt_box *sb,
                uint64_t bytes, uint32_t dtype, char *err, size_t err_n);
    // A group of sends and receives (one stream's run of them; rt_p2p).
    int (*p2p)(rt_backend *b, const rt_exec *x, rt_p2p *items, int n, char *err, size_t err_n);
    // One member's part of a collective.
    int (*coll)(rt_backend *b, const rt_exec *x, const rt_coll *c, char *err, size_t err_n);
    // One member's part of a bucket: the n > 1 pairs of one collective instruction on one group,
    // in order, as one unit where the backend can (CUDA: one ncclGroupStart/End, one launch).
    // Optional: without it, coll for each pair in order.
    int (*coll_bucket)(rt_backend *b, const rt_exec *x, const rt_coll *cs, int n, char *err, size_t err_n);
    // Events of a rank: record marks ordinal k of event e on x's stream; wait makes x's stream
    // wait for ordinal k (the record that precedes the wait in program order). `what` names the
    // waiting instruction for a deadlock report.
    int (*record)(rt_backend *b, const rt_exec *x, uint32_t event, uint64_t ordinal, char *err, size_t err_n);
    int (*wait)(rt_backend *b, const rt_exec *x, uint32_t event, uint64_t ordinal, const char *what, char *err, size_t err_n);

    // A step starts with n_threads host threads live; each calls thread_exit when its walk ends.
    void (*step_begin)(rt_backend *b, int n_threads);
    void (*thread_exit)(rt_backend *b, int thread);
    // After every thread has ended: the step's work is complete (0) or failed (-1).
    int (*step_end)(rt_backend *b, char *err, size_t err_n);
    // Stops every other thread with msg (the first failure wins); error() is that message or NULL.
    void (*fail)(rt_backend *b, const char *msg);
    const char *(*error)(rt_backend *b);
    // Sums n host doubles over every process of the run, in place (the step's loss when each
    // process runs one rank). NULL: this process runs every rank, nothing to sum.
    int (*host_sum)(rt_backend *b, double *v, int n, char *err, size_t err_n);
    // Calls fn(arg) once the work issued on x's stream so far is done (cuda: cudaLaunchHostFunc;
    // fn must not call the backend). NULL: calls block, so the wrapper calls fn at once.
    int (*when_done)(rt_backend *b, const rt_exec *x, void (*fn)(void *), void *arg, char *err, size_t err_n);
    // Makes x's stream wait for the work issued so far on every other stream of x's rank (cuda:
    // an event per stream and cudaStreamWaitEvent). NULL: calls block, nothing to order.
    int (*join)(rt_backend *b, const rt_exec *x, char *err, size_t err_n);
    // Background rounds that outlive the step (ShadowSync on an asynchronous backend; all three
    // or none, NULL: calls block, a round is done when its last call returns). round_end marks
    // the end of a round issued on x's stream: that stream then runs on past step_end, which no
    // longer waits for it. round_fence makes x's stream wait for the last round_end (nothing
    // before the first). round_drain makes the host wait for it (-1 on a failure or --timeout).
    // With round_end set, the interpreter issues a rank's round after the step's end and loss
    // (interp.c, "background rounds"), one rank after the other: only for a backend whose calls
    // never wait for another rank's (one rank per process).
    int (*round_end)(rt_backend *b, const rt_exec *x, char *err, size_t err_n);
    int (*round_fence)(rt_backend *b, const rt_exec *x, char *err, size_t err_n);
    int (*round_drain)(rt_backend *b, char *err, size_t err_n);
    // Timing marks (planrun --trace on an asynchronous backend; both or neither; NULL: calls
    // block and the interpreter reads the host clock). stamp records a mark on x's stream after
    // the work issued there so far and gives its number: marks count from 0 for each rank and
    // step, in the order of the stamp calls. stamp_read, after step_end, gives the seconds from
    // the rank's mark 0 to each of its marks 0 .. n-1 of the step, and starts the next count.
    int (*stamp)(rt_backend *b, const rt_exec *x, uint32_t *mark, char *err, size_t err_n);
    int (*stamp_read)(rt_backend *b, int rank, double *seconds, uint32_t n, char *err, size_t err_n);
    // The index of the first of the n elements of dtype (0 f32, 1 f16, 2 bf16, RT_DTYPE_F64) at
    // data, in rank x->rank's arena, that is a NaN or an infinity once the work issued on x's
    // stream so far is done; -1 when all are finite, -2 (with a message) on a failure. NULL: the
    // backend cannot look, and guard.c checks the step's loss only.
    int64_t (*find_nonfinite)(rt_backend *b, const rt_exec *x, const void *data, uint64_t n, uint32_t dtype, char *err,
                              size_t err_n);
    void (*free)(rt_backend *b);    // frees b itself too
};

// The CPU backend (cpu/backend.c): n_ranks ranks as threads of this process with in-process
// communication (comm.c), up to `streams` streams per rank and `events` events per rank; a
// blocked stream gives up after timeout_s. Flags: RT_CPU_SERIAL, one thread per rank issues
// every stream (the walker path of an asynchronous backend), each call still blocking;
// RT_CPU_F64, kernels in double (rt_cpu_kernel_f64; the run's f32 buffers hold doubles). NULL
// with a message when out of memory.
#define RT_CPU_SERIAL 1u
#define RT_CPU_F64 2u
#define RT_CPU_NETWORK 4u          // emulate the plan's network (rt_comm_emulate)
rt_backend *rt_backend_cpu_init(int n_ranks, uint32_t streams, uint32_t events, double timeout_s, unsigned flags, char *err, size_t err_n);
// With RT_CPU_NETWORK: every modeled time times `dilation` (time dilation; comm.c). Before the
// first step.
void rt_backend_cpu_dilate(rt_backend *b, double dilation);

// The dispatch wrappers: -1 with a message when b or a required entry is missing, else the
// entry's result. rt_backend_fail returns -1 (for `return rt_backend_fail(...)`).
void *rt_backend_arena_alloc(rt_backend *b, int rank, uint64_t bytes, char *err, size_t err_n);
void rt_backend_arena_free(rt_backend *b, int rank, void *arena);
int rt_backend_upload(rt_backend *b, int rank, void *dst, const void *src, uint64_t bytes, char *err, size_t err_n);
int rt_backend_download(rt_backend *b, int rank, void *dst, const void *src, uint64_t bytes, char *err, size_t err_n);
int rt_backend_kernel(rt_backend *b, const rt_exec *x, const rt_kernel *k, char *err, size_t err_n);
int rt_backend_copy(rt_backend *b, const rt_exec *x, void *dst, const rt_box *db, const void *src, const rt_box *sb,
                    uint64_t bytes, uint32_t dtype, char *err, size_t err_n);
int rt_backend_p2p(rt_backend *b, const rt_exec *x, rt_p2p *items, int n, char *err, size_t err_n);
int rt_backend_coll(rt_backend *b, const rt_exec *x, const rt_coll *c, char *err, size_t err_n);
int rt_backend_coll_bucket(rt_backend *b, const rt_exec *x, const rt_coll *cs, int n, char *err, size_t err_n);
int rt_backend_record(rt_backend *b, const rt_exec *x, uint32_t event, uint64_t ordinal, char *err, size_t err_n);
int rt_backend_wait(rt_backend *b, const rt_exec *x, uint32_t event, uint64_t ordinal, const char *what, char *err, size_t err_n);
void rt_backend_step_begin(rt_backend *b, int n_threads);
void rt_backend_thread_exit(rt_backend *b, int thread);
int rt_backend_step_end(rt_backend *b, char *err, size_t err_n);
int rt_backend_fail(rt_backend *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A message into err (n bytes; nothing when err is NULL or n 0); returns -1, for
// `return rt_say(err, n, ...)`.
int rt_say(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Seconds on the host's monotonic clock (timeouts, progress, traces).
double rt_clock_s(void);
const char *rt_backend_error(rt_backend *b);
int rt_backend_host_sum(rt_backend *b, double *v, int n, char *err, size_t err_n);
int rt_backend_when_done(rt_backend *b, const rt_exec *x, void (*fn)(void *), void *arg, char *err, size_t err_n);
int rt_backend_join(rt_backend *b, const rt_exec *x, char *err, size_t err_n);
bool rt_backend_rounds_outlive_steps(const rt_backend *b); // round_end is set
int rt_backend_round_end(rt_backend *b, const rt_exec *x, char *err, size_t err_n);
int rt_backend_round_fence(rt_backend *b, const rt_exec *x, char *err, size_t err_n);
int rt_backend_round_drain(rt_backend *b, char *err, size_t err_n);
void rt_backend_free(rt_backend *b); // accepts NULL
bool rt_backend_has_stamps(const rt_backend *b); // stamp and stamp_read are set
int rt_backend_stamp(rt_backend *b, const rt_exec *x, uint32_t *mark, char *err, size_t err_n);
int rt_backend_stamp_read(rt_backend *b, int rank, double *seconds, uint32_t n, char *err, size_t err_n);

/* ---- interp.c: the interpreter ----
 *
 * A run holds every rank of the plan; the ones this process executes (the CPU backend: all of
 * them; a GPU backend: its own) are local and have their arena, allocated once at the plan's
 * exact size. The plan is read whole: every rank's program says who holds what. A step fills the inputs, zeroes the
 * accumulators, and runs every stream of every rank as a thread that walks its program with the
 * loops expanded. */
typedef struct rt_options {
    const char *backend;            // "cpu", "cpu-serial", "cuda" (NULL: cpu)
    bool f64;                       // f32 tensors computed in double (the cpu backends only)
    bool one_rank;                  // this process runs only rank `rank` (one process per GPU);
    int rank;                       // false: every rank of the plan (the cpu backend)
    uint64_t seed;                  // initializers, synthetic data, dropout
    double timeout_s;               // a blocked stream gives up after this long
    const rt_corpus *corpus;        // NULL: synthetic tokens
    uint64_t steps;                 // the steps the caller will run (0: not known): no step's inputs
                                    // are drawn ahead past them (interp.c, "prefetch")
    const void *backend_config;     // the backend's own settings (cuda: a rt_cuda_config, cuda/rt_cuda.h)
    // planrun --background: gates[r] is rank r's gate (NULL: no background job). A foreground
    // run marks its collectives there; a background run (one rank) waits at gates[0] before
    // every piece of work.
    rt_gate *gates;
    bool background;
    bool emulate_network;           // the cpu backends: communication takes the plan's times (comm.c),
    double dilation;                // times this (0: 1)
    rt_trace *trace;                // planrun --trace: every instruction's slice goes here (NULL: none)
    bool allow_nonfinite;           // run on through NaN and infinite values (guard.c: else a step that
                                    // makes one fails with RT_STEP_NONFINITE)
    int watchdog_exit;              // guard.c's watchdog ends the process with this code when walkers
                                    // outlive a failure by timeout_s (0: it only prints)
    const char *watchdog_prefix;    // its message's start ("planrun: "), or NULL
} rt_options;

typedef struct rt_rank {
    int rank;
    bool local;                     // this process runs it (else only its coordinates are used)
    uint32_t coord[PLAN_MAX_AXES];
    const plan_program *pg;
    uint8_t *arena;                 // pg->arena_bytes x scale, the backend's memory (never dereferenced here)
    uint32_t scale;                 // 2 with f64 (every offset, stride and size doubles), else 1
    // A background round (PLAN_LOOP_BACKGROUND*): the loop's instruction and body stream (-1: none)
    int32_t bg_loop, bg_stream;
    bool bg_locked;                 // snapshot-delta: rounds and the optimizer take `lock` (not hogwild)
    pthread_mutex_t lock;           // orders a round's reads and writes of params with the optimizer's
    int fg_left;                    // foreground walkers of this step still running (under lock)
    uint64_t bg_rounds;             // background rounds run so far
    bool lock_init;
    uint32_t trace_marks;           // timing marks issued this step (planrun --trace, asynchronous backend)
} rt_rank;

typedef struct rt_run {
    const plan *p;
    rt_options o;
    int world;
    rt_rank *ranks;
    rt_backend *be;                 // owned by the run
    uint64_t steps;                 // steps run so far (--load may start it past 0)
    uint64_t steps_here;            // steps this run has run (rt_options.steps counts these)
    uint32_t *loss_bufs;            // per program: the buffer the loss is read from, or PLAN_NONE
    void *stage;                    // host staging, as large as the largest buffer slot
    uint64_t stage_bytes;
    // The next step's synthetic inputs, drawn while the device runs this step (interp.c,
    // "prefetch"): per local rank, one host block per input slot; valid for step next_step.
    void ***next_in;
    uint64_t next_step;
    struct rt_crew *crew;           // the threads that run a step's walkers and drawers (interp.c)
    struct rt_guard *guard;         // non-finite values and the watchdog (guard.c)
} rt_run;

// Starts the backend o->backend names, checks that it can run p (dtypes, inputs' micro-batch
// slots, the loss buffer), allocates every local rank's arena and initializes its parameters
// (optimizer state: zero). p must be read whole (plan_read with rank -1). -1 with a message
// otherwise; *r is then freed.
int rt_run_init(rt_run *r, const plan *p, const rt_options *o, char *err, size_t err_n);
// Runs one training step; *loss is the step's loss (the mean over micro-batches; NAN when the
// plan has none). -1 with the failing rank, stream and instruction in err; RT_STEP_NONFINITE
// when an operator wrote a NaN or an infinity, or the loss is one (unless
// rt_options.allow_nonfinite), with the step, the first such tensor and its operator in err.
#define RT_STEP_NONFINITE (-2)
int rt_run_step(rt_run *r, double *loss, char *err, size_t err_n);
// Waits until no background round is in flight (a backend whose rounds outlive the steps; else
// returns 0 at once): before the host reads or writes parameters (st.c does) and at the end of
// a run. -1 with a message when the round failed or did not end within the timeout.
int rt_run_drain(const rt_run *r, char *err, size_t err_n);
// Whether instruction in of a program whose background round runs on stream bg_stream must wait
// for the previous round first, where rounds outlive the steps: an operator or copy of the
// optimizer (phase opt), which writes the params the round's "x += target - s" writes, and any
// collective, send or receive (NCCL: another communicator must not run beside the round's, see
// cuda/backend.c), on any stream but the round's. The walker waits before the first such
// instruction of each stream in each step.
bool rt_insn_waits_for_round(const plan_insn *in, int32_t bg_stream);
void rt_run_free(rt_run *r); // accepts a zeroed run
// The view of buffer b of rank rk for micro-batch mb and layer slot l (local piece, logical
// shape; a scratch buffer is a flat vector of its dtype). Its data points into the backend's arena.
void rt_buffer_view(const rt_run *r, const rt_rank *rk, uint32_t b, uint32_t mb, uint32_t l, rt_view *v);
// The same slot's bytes copied to host memory (read: into host, b's bytes) or from it (write).
int rt_buffer_read(const rt_run *r, const rt_rank *rk, uint32_t b, uint32_t mb, uint32_t l, void *host, char *err, size_t err_n);
int rt_buffer_write(const rt_run *r, const rt_rank *rk, uint32_t b, uint32_t mb, uint32_t l, const void *host, char *err, size_t err_n);
// The piece of tensor t that shard s names on the rank with coordinates coord.
void rt_shard_box(const plan *p, const plan_tensor *t, plan_shard s, const uint32_t *coord, rt_box *box);
// buffers.c: the address of buffer b's slot for micro-batch mb and layer slot l in rank rk's
// arena, and its size in bytes (both doubled with f64); the type its elements have there (f32
// ones are doubles with f64); a view of a box's piece at data; a scratch buffer as a flat box.
uint8_t *rt_slot_addr(const rt_rank *rk, const plan_buffer *b, uint32_t mb, uint32_t l);
uint64_t rt_slot_bytes(const rt_rank *rk, const plan_buffer *b);
uint32_t rt_elem_dtype(const rt_rank *rk, const plan_buffer *b);
void rt_view_of_box(rt_view *v, const rt_box *box, void *data, uint8_t dtype);
void rt_scratch_box(const plan_buffer *b, rt_box *box);

/* ---- trace.c: the measured timeline (planrun --trace) ----
 *
 * A slice per instruction run, per rank and stream, in plandump --trace's tracks (trace.c's
 * essay). The interpreter fills it when rt_options.trace is set; planrun writes it. */
typedef struct rt_trace_slice {
    uint64_t step;                  // the run's step, from 1 (--load may start past 1)
    uint32_t insn, mb, layer;       // the instruction, its micro-batch and layer loop variable
    double start, end;              // seconds since the trace began (timing marks until resolved)
} rt_trace_slice;
typedef struct rt_trace_info {
    const char *plan_path, *backend;
    bool f64;
} rt_trace_info;
enum { RT_TRACE_STEP_TID = 1000 };  // the track of each step's span

// A trace of world x n_streams tracks that records at most max_slices slices (the rest are
// counted as dropped). NULL when out of memory or world or n_streams is 0.
rt_trace *rt_trace_new(int world, uint32_t n_streams, uint64_t max_slices);
void rt_trace_free(rt_trace *t); // accepts NULL
// Seconds since the trace began of a host clock reading.
double rt_trace_since(const rt_trace *t, double clock);
// Appends a slice to the track of (rank, stream); only that track's one writer may call it.
// Out of range, past the cap or out of memory: the slice is dropped (counted). Can't fail.
void rt_trace_add(rt_trace *t, int rank, int stream, const rt_trace_slice *s);
// Records a step's span (seconds since the trace began). -1 when out of memory.
int rt_trace_step(rt_trace *t, uint64_t step, double start, double end);
// After a step on an asynchronous backend: the rank's slices added since the last call hold
// timing marks (0 .. n_marks - 1); they become base + the seconds from mark 0 (the backend's
// stamp_read). -1 with a message when the backend cannot read them (the slices then sit at base).
int rt_trace_resolve(rt_trace *t, int rank, rt_backend *be, uint32_t n_marks, double base, char *err, size_t err_n);
// After a step where calls block: the rank's slices hold seconds already.
void rt_trace_settle(rt_trace *t, int rank);
// Writes the trace of the ranks with local[q] (NULL: all) as Chrome trace JSON. -1 on a write error.
int rt_trace_write(const rt_trace *t, const plan *p, const bool *local, const rt_trace_info *info, FILE *f);
uint64_t rt_trace_dropped(const rt_trace *t); // slices not recorded (0 for NULL)
/* ---- comm_mpi.c: one rank per process, through MPI ----
 *
 * Under mpirun, planrun's cpu backend runs one rank of the plan per process: the CPU backend
 * with its sends, receives, collectives and the loss's sum through MPI, computing what the
 * threaded backend computes bit for bit (comm_mpi.c says how). */
// Starts MPI (once; MPI_THREAD_SERIALIZED) and says which process this is. -1 with a message when
// it cannot, or when this build has no MPI.
int rt_mpi_begin(int *rank, int *world, char *err, size_t err_n);
// Ends MPI at planrun's exit: MPI_Abort(exit_code) when it is not 0, rank r after r x 0.1 s (mpirun stops every
// other rank at once), else MPI_Finalize. agreed: every rank fails alike, before any message
// (a refused launch or option): MPI_Finalize, and each process exits with its code, since a
// world of simultaneous MPI_Aborts can crash OpenMPI's mpirun. Nothing when MPI was not started.
void rt_mpi_end(int exit_code, bool agreed);
// The backend "cpu-mpi" (interp.c asks for it by that name): rank o->rank of p's world, which
// must be MPI's; up to `streams` streams and `events` events per rank. NULL with a message.
rt_backend *rt_backend_mpi_init(const plan *p, const rt_options *o, uint32_t streams, uint32_t events, char *err, size_t err_n);

/* ---- bgjob.c: the background job (planrun --background) ----
 *
 * A one-rank plan run beside every foreground rank of this process, each replica an rt_run of
 * its own (seed seed0 + its foreground rank, synthetic data) on a thread of its own, waiting at
 * that rank's gate before every piece of work. Replica q after N steps equals a plain run of
 * the plan with --seed seed0+q --steps N. */
typedef struct rt_bgjob rt_bgjob;
typedef struct rt_bgjob_replica {
    rt_bgjob *job;
    int rank;                       // the foreground rank it runs beside (its gate)
    uint64_t seed;
    rt_run run;
    pthread_t th;
    bool started;
    uint64_t steps;                 // steps finished
    double first_loss, last_loss;
    int rc;                         // -1: a step failed (err says why)
    char err[1536];
} rt_bgjob_replica;

struct rt_bgjob {
    long steps;                     // per replica; -1: until rt_bgjob_stop
    int nice;                       // > 0: the replicas' threads run at this nice value (Linux)
    int n;
    rt_bgjob_replica *reps;         // one per foreground rank given to rt_bgjob_init
    pthread_mutex_t mu;
    bool stop, mu_init;
};

// Sets up a replica of the one-rank plan p beside each of the n foreground ranks ranks[]: an
// rt_run with base's backend, precision, timeout and backend_config, seed seed0 + rank, no
// corpus, waiting at gates[rank]. -1 with a message (p has more than one rank, a replica's
// rt_run_init failed); *j is then freed.
int rt_bgjob_init(rt_bgjob *j, const plan *p, const rt_options *base, const int *ranks, int n, uint64_t seed0,
                  rt_gate *gates, long steps, char *err, size_t err_n);
// Starts every replica's thread (set j->nice before, if wanted). -1 with a message when a thread cannot start (the ones that
// did run on: stop, close the gates and join them).
int rt_bgjob_start(rt_bgjob *j, char *err, size_t err_n);
// With steps -1: every replica stops after the step it is running. Can't fail; accepts a
// zeroed job.
void rt_bgjob_stop(rt_bgjob *j);
// Waits for every started replica. 0, or -1 with the first failed replica's message.
int rt_bgjob_join(rt_bgjob *j, char *err, size_t err_n);
void rt_bgjob_free(rt_bgjob *j);    // accepts NULL and a zeroed job; join first

/* ---- st.c: parameters and optimizer state as safetensors files ----
 *
 * The run's params (and optimizer state) gathered into whole logical tensors, one per tensor
 * and block copy ("wq" with 4 copies: "wq.0" .. "wq.3"), f32, in one safetensors file: what
 * PyTorch's safetensors.torch.load_file opens. The CPU backend holds every rank, so one file
 * holds the whole model. */
typedef struct rt_named {
    char *name;
    uint8_t rank;
    int64_t shape[PLAN_MAX_RANK];
    double *data;
    int64_t n;
} rt_named;

// Gathers every param (and with state, every optimizer state tensor) of the run, in double
// (what an f32 run holds, exactly; or an f64 run's values). -1 when out of memory or when some
// element is held by no rank.
int rt_gather(const rt_run *r, bool state, rt_named **out, int *n, char *err, size_t err_n);
// Writes the run's params and optimizer state into one safetensors file (plan_out: a temp file,
// fsync, rename; a device in place): F32, or F64 for an f64 run; __metadata__ holds the steps
// taken and each tensor's CRC-32C.
int rt_save(const rt_run *r, const char *path, char *err, size_t err_n);
// Sets the run's params and optimizer state, and its step count, from a file rt_save wrote (same
// model): every tensor of the run must be in the file with its shape, F32 or F64 (converted to
// the run's), and match its checksum; the step must be there. -1 with a message (nothing
// changed) otherwise.
int rt_load(rt_run *r, const char *path, char *err, size_t err_n);
// Compares the run's params with a file's, element by element as torch.testing.assert_close
// does: |x - ref| <= atol + rtol |ref|. 0 when all are within, 1 when one is not (err names
// the first such element), -1 on an error. *worst: the largest |x - ref| and its tensor.
// The absolute term is needed: a parameter whose gradient is zero in exact arithmetic (a key
// bias under softmax) trains on fp32 rounding noise alone, differently under every split.
typedef struct rt_diff {
    double abs;
    char tensor[128];
} rt_diff;
int rt_compare(const rt_run *r, const char *path, double rtol, double atol, rt_diff *worst, char *err, size_t err_n);
void rt_named_free(rt_named *t, int n);

/* ---- guard.c: non-finite values and the watchdog ---- */

// Sets up r's guards for n_threads walker threads and starts the watchdog thread. -1 when out of
// memory.
int rt_guard_init(rt_run *r, int n_threads, char *err, size_t err_n);
// Stops the watchdog and frees the guards; accepts a run without them.
void rt_guard_free(rt_run *r);
// A step starts (true) or its walkers have all returned (false): the watchdog watches steps only.
void rt_guard_step(rt_run *r, bool in_step);
// Walker thread `thread` runs rank `rank`'s stream `stream` (-1: all) in this step; it is in
// instruction insn - 1 (rt_guard_busy; 0: between instructions). Relaxed stores: cheap.
void rt_guard_walker(rt_run *r, int thread, int rank, int stream);
void rt_guard_busy(rt_run *r, int thread, uint32_t insn);
// After compute instruction i of rank rk ran at (mb, layer) on x: 0 when its outputs are finite
// (or nothing is checked: allow_nonfinite, a backend without find_nonfinite); else the first
// finding of the step is kept and the backend is failed (-1).
int rt_guard_outputs(rt_run *r, const rt_rank *rk, const rt_exec *x, uint32_t i, uint32_t mb, uint32_t layer);
// Whether the step found a non-finite output.
bool rt_guard_found(rt_run *r);
// At the end of a step: RT_STEP_NONFINITE with the message when an output or the loss was
// non-finite (unless allow_nonfinite); the finding is then cleared. 0 otherwise.
int rt_guard_step_end(rt_run *r, double loss, char *err, size_t err_n);

/* ---- launch.c: who this process is, and the rendezvous ----
 *
 * One process per GPU: rank, world size and local rank come from the first source that has each,
 * in this order: flags (--rank, --world-size, --local-rank); torchrun's RANK, WORLD_SIZE,
 * LOCAL_RANK; OpenMPI's OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK; SLURM's SLURM_PROCID,
 * SLURM_NTASKS, SLURM_LOCALID. The rendezvous hands a small blob (the ncclUniqueId) from rank 0
 * to every rank: MPI_Bcast (built with MPI), a TCP server on rank 0 (MASTER_ADDR:MASTER_PORT or
 * --rendezvous tcp:HOST:PORT), or a file on a shared filesystem (--rendezvous file:PATH). Needs
 * no GPU. */
typedef const char *rt_getenv_fn(const char *name);

typedef struct rt_launch {
    bool launched;                  // a rank and world size were found (else: no launcher)
    bool by_mpi;                    // the rank came from OMPI_COMM_WORLD_RANK (mpirun started us)
    int rank, world, local_rank;    // -1 where not found (when !launched)
    const char *rank_from, *world_from, *local_from; // "--rank", "RANK", "SLURM_PROCID", "default", ...
    char master_addr[256];          // MASTER_ADDR, or ""
    int master_port;                // MASTER_PORT, or 0
} rt_launch;

// Fills l from the flags (-1: not given) and the environment (get: NULL for getenv). A value that
// is not a whole number in range, a rank without a world size (or the reverse), a rank not below
// the world size or a bad MASTER_PORT is -1 with a message naming the flag or variable. Without
// any rank or world size, l->launched is false and the result is 0. A missing local rank is 0 in
// a world of one, else the rank (one node), and says so in local_from.
int rt_launch_discover(rt_launch *l, int flag_rank, int flag_world, int flag_local, rt_getenv_fn *get, char *err,
                       size_t err_n);
// "rank 3 (RANK), world size 8 (WORLD_SIZE), local rank 3 (LOCAL_RANK)".
void rt_launch_describe(const rt_launch *l, char *buf, size_t n);

typedef enum { RT_RDV_NONE, RT_RDV_TCP, RT_RDV_FILE, RT_RDV_MPI } rt_rdv_kind;
typedef struct rt_rendezvous {
    rt_rdv_kind kind;
    char host[256];                 // tcp
    int port;
    char path[4096];                // file
} rt_rendezvous;

// The rendezvous that spec names ("tcp:HOST:PORT", "file:PATH", "mpi"), or with spec NULL the
// default for l: none for one process; MPI under mpirun when built with MPI; else tcp at
// MASTER_ADDR:MASTER_PORT; else -1 with a message saying what to set.
int rt_rendezvous_choose(rt_rendezvous *r, const char *spec, const rt_launch *l, char *err, size_t err_n);
void rt_rendezvous_describe(const rt_rendezvous *r, char *buf, size_t n);
// Rank 0's `bytes` (at most 4096) at blob reach every rank's blob. Every rank of the world must
// call it; each gives up after timeout_s with a message naming what it waited for (rank 0 names
// the ranks that did not come). A world of one goes through the motions (listens, writes the
// file) unless r is RT_RDV_NONE. Returns 0 or -1.
int rt_rendezvous_run(const rt_rendezvous *r, int rank, int world, void *blob, size_t bytes, double timeout_s, char *err,
                      size_t err_n);
// Ends MPI if the rendezvous started it. Safe to call always.
void rt_rendezvous_finish(void);

#endif
