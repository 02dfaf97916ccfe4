/*
 * cuda/backend.c: the CUDA backend behind the backend interface (rt.h, "backend.c"): one rank
 * of the plan per process, on one GPU. This file holds the device, memory, streams, events and
 * the end of a step; ops.c runs operators and copies (cuBLAS, cuDNN and kernels.cu), nccl.c
 * communication (and waits for the GPU with NCCL's errors in view), profile.c times operators,
 * and util.c holds what they all use (errors, scratch, streams, boxes, the clock). This is the
 * top file: it calls them, none calls it.
 *
 * Issue model (thread_per_stream false): the interpreter's one walker per rank issues every
 * instruction of the rank in program order, each on the CUDA stream of its plan stream, and the
 * calls return as soon as the work is enqueued. Plan streams are CUDA streams created with the
 * plan's priorities (lower runs first, CUDA's convention, clamped to the device's range); record
 * and wait are cudaEventRecord and cudaStreamWaitEvent, which wait for the most recent record
 * issued before them, exactly the plan's rule, so the ordinals are not needed. Nothing waits
 * for the GPU during a step except the first run of a collective (nccl.c, its layout exchange).
 *
 * A background job (planrun --background) is a second instance of this backend on the same GPU
 * for a one-rank plan: rt_cuda_config.priority puts its streams at the device's least priority
 * and the foreground's at the top of the range; when_done enqueues the background gate's marks
 * and releases as host functions (cudaLaunchHostFunc), so the gate sees a piece or a collective
 * end when the GPU ends it.
 *
 * Memory: one cudaMalloc arena per rank at the plan's exact size, zeroed; upload and download
 * are cudaMemcpy between steps. Scratch that operators and collectives need (attention's
 * scores, cuDNN workspaces, pack buffers) is stream-ordered (cudaMallocAsync/cudaFreeAsync from
 * the device's default pool, whose release threshold is raised so that steady-state steps do
 * not return memory to the driver). So the device holds the arena plus that scratch plus
 * NCCL's and the libraries' own buffers: the plan's peak is the arena's size, not the whole.
 *
 * Background rounds (ShadowSync, interp.c "background rounds") outlive their step. The
 * interpreter issues a rank's round after the step's end and loss, on the round's stream, which
 * first waits for the rank's other streams (join); round_end records round_done there, and
 * step_end neither marks nor waits for that stream, so the round runs beside the next step's
 * forward and backward (which read x while it writes: ShadowSync's Hogwild-style tolerance, as
 * on the CPU backend). The next step's first optimizer operator or copy, and first collective,
 * send or receive, on each stream wait for round_done (round_fence), and so does the loss's
 * all-reduce on the side stream; the host waits for it (round_drain) before it reads or writes
 * parameters and at the end of the run, and be_free before it tears down.
 *   Why communication waits for the round too: NCCL kernels spin until their peers arrive,
 * and CUDA does not promise that two streams progress independently, so NCCL operations on two
 * communicators running at once can deadlock even when every rank issues them in the same
 * order (NCCL's user guide, "Using multiple NCCL communicators concurrently": "might work
 * provided they can fit within the GPU, but could break at any time"; its maintainers in
 * NVIDIA/nccl#195: to be safe, "a stream dependency so that the order they execute is the
 * order they were submitted in"; also #522, #783, #1174). So on a rank the round's collectives
 * and the foreground's never overlap: the round is issued after the step's last NCCL operation
 * (the loss's sum included) has completed, and the next step's are ordered after round_done.
 * What overlaps is the round (its copies, adds and collectives) with the next step's compute up
 * to each stream's first communication; a plan whose forward communicates early (tensor or
 * pipeline parallel) keeps little of that.
 *
 * The end of a step records a marker on every stream but the round's and polls them, and polls NCCL's
 * asynchronous errors, until all are done or nothing has progressed (no stream finished, no
 * communication completed) for --timeout; then every communicator is aborted and the message
 * names the first communication instruction that had not finished ("a dead rank makes the
 * others stop with an error naming the instruction"). Kernels that found bad data (an id
 * outside its table) raise a device flag, read here.
 */
#define _GNU_SOURCE 1
#include "internal.h"

#include <stdlib.h>

/* ---- the device ---- */

static int versions(rt_cuda_device *dev, char *err, size_t err_n) {
    int v = 0, mj = 0, mn = 0, pt = 0;
    NCCL_CHECK(ncclGetVersion(&v));
    dev->nccl_version = v;
    dev->cudnn_version = (int)cudnnGetVersion();
    CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &mj));
    CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &mn));
    CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &pt));
    dev->cublas_version = mj * 10000 + mn * 100 + pt;
    return 0;
}

int rt_cuda_device_open(int local_rank, rt_cuda_device *dev, char *err, size_t err_n) {
    memset(dev, 0, sizeof *dev);
    cudaRuntimeGetVersion(&dev->runtime_version);
    if (cudaDriverGetVersion(&dev->driver_version) != cudaSuccess) dev->driver_version = 0;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        cudaGetLastError();
        if (dev->driver_version == 0)
            return cu_say(err, err_n, "no GPU: there is no NVIDIA driver on this machine (cudaGetDeviceCount: %s)",
                          cudaGetErrorString(e));
        if (vis)
            return cu_say(err, err_n, "no GPU visible with CUDA_VISIBLE_DEVICES=\"%s\" (cudaGetDeviceCount: %s)", vis,
                          e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
        return cu_say(err, err_n, "no GPU: cudaGetDeviceCount: %s", e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    }
    // One visible device (a launcher that binds each task to its GPU): that one, whatever the
    // local rank. Several: the local rank's.
    int d = n == 1 ? 0 : local_rank;
    if (d < 0 || d >= n)
        return cu_say(err, err_n, "local rank %d but only %d GPUs are visible%s%s%s: start at most %d processes per node", local_rank, n,
                      vis ? " (CUDA_VISIBLE_DEVICES=\"" : "", vis ? vis : "", vis ? "\")" : "", n);
    dev->ordinal = d, dev->count = n;
    CUDA_CHECK(cudaSetDevice(d));
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    snprintf(dev->name, sizeof dev->name, "%s", prop.name);
    dev->cc_major = prop.major, dev->cc_minor = prop.minor;
    dev->mem_bytes = (uint64_t)prop.totalGlobalMem;
    CU_TRY(versions(dev, err, err_n));
    return 0;
}

/* ---- memory ---- */

static void *be_arena_alloc(rt_backend *b, int rank, uint64_t bytes, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    void *a = NULL;
    if (rank != cu->rank) {
        cu_say(err, err_n, "cuda backend: asked for rank %d's arena, but this process runs rank %d", rank, cu->rank);
        return NULL;
    }
    cudaError_t e = cudaSetDevice(cu->device);
    if (e == cudaSuccess) e = cudaMalloc(&a, bytes ? (size_t)bytes : 1);
    if (e == cudaSuccess) e = cudaMemset(a, 0, bytes ? (size_t)bytes : 1);
    if (e != cudaSuccess) {
        size_t free_b = 0, total = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total);
        cu_say(err, err_n, "rank %d: cannot allocate its arena of %.1f MiB on GPU %d (%.1f MiB free of %.1f): %s", rank,
               (double)bytes / 1048576.0, cu->device, (double)free_b / 1048576.0, (double)total / 1048576.0, cudaGetErrorString(e));
        if (a) cudaFree(a);
        return NULL;
    }
    return a;
}

static void be_arena_free(rt_backend *b, int rank, void *arena) {
    (void)rank;
    if (!arena) return;
    cudaSetDevice(cu_of(b)->device);
    cudaFree(arena);
}

static int be_upload(rt_backend *b, int rank, void *dst, const void *src, uint64_t bytes, char *err, size_t err_n) {
    (void)rank;
    CUDA_CHECK(cudaSetDevice(cu_of(b)->device));
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, (size_t)bytes, cudaMemcpyHostToDevice));
    return 0;
}

static int be_download(rt_backend *b, int rank, void *dst, const void *src, uint64_t bytes, char *err, size_t err_n) {
    (void)rank;
    CUDA_CHECK(cudaSetDevice(cu_of(b)->device));
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost));
    return 0;
}

/* ---- streams and events ---- */

static int be_record(rt_backend *b, const rt_exec *x, uint32_t event, uint64_t ordinal, char *err, size_t err_n) {
    (void)ordinal;
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    if (event >= cu->n_events) return cu_say(err, err_n, "event %u: the program has %u", event, cu->n_events);
    CUDA_CHECK(cudaEventRecord(cu->events[event], st));
    return 0;
}

static int be_wait(rt_backend *b, const rt_exec *x, uint32_t event, uint64_t ordinal, const char *what, char *err, size_t err_n) {
    (void)ordinal, (void)what;
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    if (event >= cu->n_events) return cu_say(err, err_n, "event %u: the program has %u", event, cu->n_events);
    CUDA_CHECK(cudaStreamWaitEvent(st, cu->events[event], 0));
    return 0;
}

// Calls fn(arg) when x's stream reaches this point (the background gate's marks and releases,
// planrun --background). fn only takes a mutex: it calls nothing of CUDA's, as a host function must not.
static int be_when_done(rt_backend *b, const rt_exec *x, void (*fn)(void *), void *arg, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    CUDA_CHECK(cudaLaunchHostFunc(st, fn, arg));
    return 0;
}

// Makes x's stream wait for what the rank's other streams have been given so far (a background
// round after the step's optimizer, runtime/interp.c). It borrows the end-of-step markers:
// step_end records them again before it waits on them.
static int be_join(rt_backend *b, const rt_exec *x, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    for (int s = 0; s < cu->n_streams; s++) {
        if (s == x->stream) continue;
        CUDA_CHECK(cudaEventRecord(cu->marks[s], cu->streams[s]));
        CUDA_CHECK(cudaStreamWaitEvent(st, cu->marks[s], 0));
    }
    return 0;
}

/* ---- background rounds that outlive the step ---- */

// The round issued on x's stream ends here: step_end leaves that stream running.
static int be_round_end(rt_backend *b, const rt_exec *x, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    CUDA_CHECK(cudaEventRecord(cu->round_done, st));
    cu->round_stream = x->stream, cu->round_pending = true;
    return 0;
}

// x's stream waits for the last round's end (an optimizer's first update, a stream's first
// communication in the step).
static int be_round_fence(rt_backend *b, const rt_exec *x, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    cudaStream_t st;
    CU_TRY(cu_stream(cu, x->stream, &st, err, err_n));
    if (cu->round_pending) CUDA_CHECK(cudaStreamWaitEvent(st, cu->round_done, 0));
    return 0;
}

// The host waits for the last round's end (before it reads or writes parameters, at the end).
static int be_round_drain(rt_backend *b, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    if (!cu->round_pending) return 0;
    CUDA_CHECK(cudaSetDevice(cu->device));
    CU_TRY(cu_wait_event(cu, cu->round_done, "the background round", err, err_n));
    cu->round_pending = false;
    return 0;
}

/* ---- failures ---- */

static void be_fail(rt_backend *b, const char *msg) {
    cu_state *cu = cu_of(b);
    pthread_mutex_lock(&cu->mu);
    if (!cu->failed) {
        cu->failed = true;
        snprintf(cu->error, sizeof cu->error, "%s", msg);
    }
    pthread_mutex_unlock(&cu->mu);
}

static const char *be_error(rt_backend *b) {
    cu_state *cu = cu_of(b);
    pthread_mutex_lock(&cu->mu);
    const char *e = cu->failed ? cu->error : NULL;
    pthread_mutex_unlock(&cu->mu);
    return e;
}

/* ---- steps ---- */

static void be_step_begin(rt_backend *b, int n_threads) {
    (void)n_threads;
    cu_state *cu = cu_of(b);
    cu->n_inflight = 0;
    pthread_mutex_lock(&cu->mu);
    if (!cu->aborted) cu->failed = false, cu->error[0] = 0; // after an abort nothing can run again
    pthread_mutex_unlock(&cu->mu);
}

// The first communication instruction of the step that has not finished, or NULL.
static const char *first_unfinished(cu_state *cu) {
    for (size_t i = 0; i < cu->n_inflight; i++)
        if (cudaEventQuery(cu->inflight[i].done) == cudaErrorNotReady) return cu->inflight[i].what;
    return NULL;
}

// Waits for every stream's work, polling NCCL's errors. The timeout counts from the last sign
// of progress (a stream finishing, a communication completing), so a long step is not a stuck
// one; when it passes, the message names the first communication that had not finished.
static int wait_streams(cu_state *cu, cudaEvent_t *marks, char *err, size_t err_n) {
    double deadline = cu_now() + cu->timeout_s;
    int last_busy = cu->n_streams + 1;
    size_t next = 0; // the first communication not seen complete
    for (int spins = 0;; spins++) {
        int busy = 0;
        for (int s = 0; s < cu->n_streams; s++) {
            if (s == cu->round_stream) continue; // a background round runs on past the step
            cudaError_t e = cudaEventQuery(marks[s]);
            if (e == cudaErrorNotReady) busy++;
            else if (e != cudaSuccess) {
                cu_nccl_abort(cu);
                return cu_say(err, err_n, "CUDA: %s on stream %d (an earlier kernel or copy failed)", cudaGetErrorString(e), s);
            }
        }
        if (!busy) return 0;
        size_t was = next;
        while (next < cu->n_inflight && cudaEventQuery(cu->inflight[next].done) == cudaSuccess) next++;
        if (busy < last_busy || next > was) deadline = cu_now() + cu->timeout_s, last_busy = busy;
        // After an abort NCCL's kernels end by themselves: only the timeout is watched then.
        if (!cu->aborted && cu_nccl_poll(cu, err, err_n)) {
            const char *w = first_unfinished(cu);
            size_t k = strlen(err);
            if (w && k < err_n) snprintf(err + k, err_n - k, "; the first unfinished communication: %s", w);
            cu_nccl_abort(cu);
            return -1;
        }
        if (cu_now() > deadline) {
            const char *w = first_unfinished(cu);
            bool round = cu->round_pending && cudaEventQuery(cu->round_done) == cudaErrorNotReady;
            cu_nccl_abort(cu);
            if (round) // the step's first communication and optimizer wait for it
                return cu_say(err, err_n, "the previous background round did not finish within %g s (--timeout)%s%s: a peer "
                              "rank is dead or stuck", cu->timeout_s, w ? "; the step waits at " : "", w ? w : "");
            if (w)
                return cu_say(err, err_n, "%s did not finish within %g s (--timeout): a peer rank is dead, stuck or issues "
                              "its communication in another order", w, cu->timeout_s);
            return cu_say(err, err_n, "the step's GPU work made no progress for %g s (--timeout)", cu->timeout_s);
        }
        cu_pause(spins);
    }
}

static int read_flag(cu_state *cu, char *err, size_t err_n) {
    int flag = 0;
    CUDA_CHECK(cudaMemcpy(&flag, cu->flag, sizeof flag, cudaMemcpyDeviceToHost));
    if (!flag) return 0;
    CUDA_CHECK(cudaMemset(cu->flag, 0, sizeof flag));
    static const char *const why[] = {"", "embedding: an id is outside the table", "embedding_bag: an id is outside the table",
                                      "cross_entropy: a label is outside [0, classes)"};
    return cu_say(err, err_n, "%s (found on the GPU; the CPU backend names the element)", flag > 0 && flag < 4 ? why[flag] : "a kernel raised an unknown flag");
}

static int step_end(cu_state *cu, char *err, size_t err_n) {
    CUDA_CHECK(cudaSetDevice(cu->device));
    for (int s = 0; s < cu->n_streams; s++)
        if (s != cu->round_stream) CUDA_CHECK(cudaEventRecord(cu->marks[s], cu->streams[s]));
    // After a failure in the walker the peers may never arrive: do not wait for them.
    if (cu->failed) cu_nccl_abort(cu);
    CU_TRY(wait_streams(cu, cu->marks, err, err_n));
    CU_TRY(read_flag(cu, err, err_n));
    return 0;
}

static int be_step_end(rt_backend *b, char *err, size_t err_n) {
    cu_state *cu = cu_of(b);
    int rc = step_end(cu, err, err_n);
    cu_prof_step(cu, rc == 0 && !cu->failed);
    if (rc && !cu->failed) be_fail(b, err);
    return rc;
}

/* ---- setting up and tearing down ---- */

static void be_free(rt_backend *b) {
    if (!b) return;
    cu_state *cu = cu_of(b);
    if (cu) {
        cudaSetDevice(cu->device);
        char why[256];
        if (cu->round_pending) cu_wait_event(cu, cu->round_done, "the background round", why, sizeof why); // aborts when stuck
        for (int s = 0; s < cu->n_streams; s++)
            if (cu->streams[s]) cudaStreamSynchronize(cu->streams[s]);
        cu_prof_free(cu);
        cu_stamps_free(cu);
        cu_nccl_free(cu);
        cu_ops_free(cu);
        for (int s = 0; s < CU_MAX_STREAMS; s++) {
            if (cu->blas[s]) cublasDestroy(cu->blas[s]);
            if (cu->dnn[s]) cudnnDestroy(cu->dnn[s]);
            if (cu->streams[s]) cudaStreamDestroy(cu->streams[s]);
        }
        if (cu->side) cudaStreamDestroy(cu->side);
        for (uint32_t e = 0; cu->events && e < cu->n_events; e++)
            if (cu->events[e]) cudaEventDestroy(cu->events[e]);
        for (int s = 0; s < CU_MAX_STREAMS; s++)
            if (cu->marks[s]) cudaEventDestroy(cu->marks[s]);
        if (cu->round_done) cudaEventDestroy(cu->round_done);
        free(cu->events);
        if (cu->flag) cudaFree(cu->flag);
        pthread_mutex_destroy(&cu->mu);
        free(cu);
    }
    free(b);
}

// The plan's streams (with their priorities), a cuBLAS and a cuDNN handle per stream, the
// plan's events, the flag word.
// The CUDA priority of plan stream s (lower runs first, CUDA's convention) in the device's range
// [greatest, least], as rt_cuda_config.priority says (rt_cuda.h).
static int stream_priority(const plan_program *pg, int n_streams, int s, int mode, int least, int greatest) {
    if (mode == RT_CUDA_PRIORITY_LOW) return least;
    int top = 0, bottom = INT32_MAX; // the plan's largest (last-running) and smallest priorities
    for (int k = 0; k < n_streams; k++) {
        top = pg->priority[k] > top ? pg->priority[k] : top;
        bottom = pg->priority[k] < bottom ? pg->priority[k] : bottom;
    }
    int prio = mode == RT_CUDA_PRIORITY_HIGH ? greatest + (pg->priority[s] - bottom) : least - (top - pg->priority[s]);
    int floor = mode == RT_CUDA_PRIORITY_HIGH && least > greatest ? least - 1 : least; // HIGH leaves least to the background
    return prio < greatest ? greatest : prio > floor ? floor : prio;
}

static int make_streams(cu_state *cu, const plan_program *pg, int mode, char *err, size_t err_n) {
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cu->n_streams = (int)(pg->n_streams ? pg->n_streams : 1);
    if (cu->n_streams > CU_MAX_STREAMS) return cu_say(err, err_n, "the program has %d streams; at most %d", cu->n_streams, CU_MAX_STREAMS);
    for (int s = 0; s < cu->n_streams; s++) {
        int prio = stream_priority(pg, cu->n_streams, s, mode, least, greatest);
        CUDA_CHECK(cudaStreamCreateWithPriority(&cu->streams[s], cudaStreamNonBlocking, prio));
        CUBLAS_CHECK(cublasCreate(&cu->blas[s]));
        CUBLAS_CHECK(cublasSetStream(cu->blas[s], cu->streams[s]));
        CUDNN_CHECK(cudnnCreate(&cu->dnn[s]));
        CUDNN_CHECK(cudnnSetStream(cu->dnn[s], cu->streams[s]));
        CUDA_CHECK(cudaEventCreateWithFlags(&cu->marks[s], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&cu->side, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&cu->round_done, cudaEventDisableTiming));
    cu->n_events = pg->n_events;
    cu->events = calloc(cu->n_events ? cu->n_events : 1, sizeof *cu->events);
    if (!cu->events) return cu_say(err, err_n, "out of memory");
    for (uint32_t e = 0; e < cu->n_events; e++) CUDA_CHECK(cudaEventCreateWithFlags(&cu->events[e], cudaEventDisableTiming));
    CUDA_CHECK(cudaMalloc((void **)&cu->flag, sizeof(int)));
    CUDA_CHECK(cudaMemset(cu->flag, 0, sizeof(int)));
    // Keep freed scratch in the pool: steady-state steps then allocate nothing from the driver.
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, cu->device));
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    return 0;
}

static int check_config(const plan *p, const rt_options *o, const rt_cuda_config *cfg, char *err, size_t err_n) {
    if (!cfg) return cu_say(err, err_n, "cuda backend: no configuration (rt_options.backend_config)");
    if (cfg->world != (int)p->meta.world)
        return cu_say(err, err_n, "cuda backend: the world has %d ranks but the plan was compiled for %u", cfg->world, p->meta.world);
    if (cfg->rank < 0 || cfg->rank >= cfg->world) return cu_say(err, err_n, "cuda backend: rank %d of %d", cfg->rank, cfg->world);
    if (p->meta.world > 1 && (!o->one_rank || o->rank != cfg->rank))
        return cu_say(err, err_n, "cuda backend: it runs one rank per process; this plan has %u ranks, so start %u processes "
                      "(torchrun, mpirun, srun, or --rank/--world-size)", p->meta.world, p->meta.world);
    return 0;
}

rt_backend *rt_backend_cuda_init(const plan *p, const rt_options *o, char *err, size_t err_n) {
    const rt_cuda_config *cfg = o->backend_config;
    if (check_config(p, o, cfg, err, err_n)) return NULL;
    rt_backend *b = calloc(1, sizeof *b);
    cu_state *cu = calloc(1, sizeof *cu);
    if (!b || !cu) {
        free(b), free(cu);
        cu_say(err, err_n, "cuda backend: out of memory");
        return NULL;
    }
    pthread_mutex_init(&cu->mu, NULL);
    cu->p = p, cu->device = cfg->device, cu->rank = cfg->rank, cu->world = cfg->world, cu->tf32 = cfg->tf32;
    cu->round_stream = -1;
    cu->timeout_s = o->timeout_s > 0 ? o->timeout_s : 60;
    for (int a = (int)p->meta.n_axes - 1, rest = cu->rank; a >= 0; a--)
        cu->coord[a] = (uint32_t)rest % p->meta.mesh[a], rest /= (int)p->meta.mesh[a];
    *b = (rt_backend){
        .name = "cuda",
        .thread_per_stream = false,
        .ctx = cu,
        .arena_alloc = be_arena_alloc,
        .arena_free = be_arena_free,
        .upload = be_upload,
        .download = be_download,
        .kernel = cu_op_kernel,
        .copy = cu_op_copy,
        .p2p = cu_nccl_p2p,
        .coll = cu_nccl_coll,
        .coll_bucket = cu_nccl_coll_bucket,
        .record = be_record,
        .wait = be_wait,
        .step_begin = be_step_begin,
        .step_end = be_step_end,
        .stamp = cu_stamp,
        .stamp_read = cu_stamp_read,
        .fail = be_fail,
        .error = be_error,
        .host_sum = cu_nccl_host_sum,
        .when_done = be_when_done,
        .join = be_join,
        .round_end = be_round_end,
        .round_fence = be_round_fence,
        .round_drain = be_round_drain,
        .free = be_free,
    };
    const plan_program *pg = &p->programs[p->ranks[cu->rank].program];
    char why[1536] = "";
    if (cudaSetDevice(cu->device) != cudaSuccess || make_streams(cu, pg, cfg->priority, why, sizeof why) || cu_nccl_init(cu, cfg, why, sizeof why) ||
        (cfg->priority != RT_CUDA_PRIORITY_LOW && cu_prof_init(cu, why, sizeof why))) { // a background replica: no profile
        cu_say(err, err_n, "cuda backend, rank %d on GPU %d: %s", cu->rank, cu->device, why[0] ? why : "cudaSetDevice failed");
        be_free(b);
        return NULL;
    }
    return b;
}
