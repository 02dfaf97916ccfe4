/*
 * internal.h: what the CUDA backend's C files share (backend.c, ops.c, nccl.c, profile.c,
 * util.c); private to runtime/cuda/, sectioned by the file that defines each part. The public
 * face is rt_cuda.h; the kernels' launchers are in kernels.h. backend.c is the top: it calls
 * ops.c, nccl.c and profile.c; ops.c calls profile.c; all of them call util.c, which calls none.
 *
 * Errors (STYLE.md 11). One generic macro, CU_CHECK, checks a vendor call's status; one macro
 * per library is built from it (CUDA_CHECK, CUBLAS_CHECK, CUDNN_CHECK, NCCL_CHECK). On failure it
 * writes "cuDNN: CUDNN_STATUS_BAD_PARAM in cudnnConvolutionForward(...) (ops.c:312 conv_fwd)" into
 * the function's `err` and returns -1; CU_TRY(call) passes a callee's -1 up, adding the caller's
 * "<- func (file:line)" to the message, so the message ends with a trace of the backend's levels
 * and the interpreter puts the rank, stream and instruction in front of it. Every function that
 * uses them has `char *err, size_t err_n` parameters.
 *
 * Threads. One walker thread per process issues all of its rank's work (thread_per_stream is
 * false); upload, download and host_sum come from the main thread between steps. The device is
 * made current on the calling thread at every entry (cudaSetDevice is per thread).
 */
#ifndef RT_CUDA_INTERNAL_H
#define RT_CUDA_INTERNAL_H

#include "kernels.h"
#include "rt_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- errors (util.c) ---- */

// Writes "LIB: MESSAGE in STATEMENT (FILE:LINE FUNC)" into err; returns -1.
int cu_fail(char *err, size_t err_n, const char *lib, const char *msg, const char *stmt, const char *func, const char *file,
            int line);
// Appends " <- FUNC (FILE:LINE)" to err; returns -1.
int cu_trace(char *err, size_t err_n, const char *func, const char *file, int line);
// Writes a message of our own (a shape that does not fit, ...); returns -1.
int cu_say(char *err, size_t err_n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define CU_CHECK(lib, type, is_ok, to_str, stmt)                                                                           \
    do {                                                                                                                   \
        type cu_s_ = (stmt);                                                                                               \
        if (!is_ok(cu_s_)) return cu_fail(err, err_n, lib, to_str(cu_s_), #stmt, __func__, __FILE__, __LINE__);            \
    } while (0)

#define cu_cuda_ok(s) ((s) == cudaSuccess)
#define cu_cublas_ok(s) ((s) == CUBLAS_STATUS_SUCCESS)
#define cu_cudnn_ok(s) ((s) == CUDNN_STATUS_SUCCESS)
// A nonblocking communicator's call may return ncclInProgress: not an error (cu_nccl_settle
// then waits for it).
#define cu_nccl_ok(s) ((s) == ncclSuccess || (s) == ncclInProgress)
const char *cu_nccl_str(ncclResult_t s); // nccl.c: ncclGetErrorString and ncclGetLastError together

#define CUDA_CHECK(stmt) CU_CHECK("CUDA", cudaError_t, cu_cuda_ok, cudaGetErrorString, stmt)
#define CUBLAS_CHECK(stmt) CU_CHECK("cuBLAS", cublasStatus_t, cu_cublas_ok, cublasGetStatusString, stmt)
#define CUDNN_CHECK(stmt) CU_CHECK("cuDNN", cudnnStatus_t, cu_cudnn_ok, cudnnGetErrorString, stmt)
#define NCCL_CHECK(stmt) CU_CHECK("NCCL", ncclResult_t, cu_nccl_ok, cu_nccl_str, stmt)
#define CU_TRY(call)                                                                                                       \
    do {                                                                                                                   \
        if ((call) != 0) return cu_trace(err, err_n, __func__, __FILE__, __LINE__);                                       \
    } while (0)

/* ---- the backend's state ---- */

#define CU_MAX_STREAMS 8

// A communication operation in flight this step: the event recorded after it on its stream and
// the instruction, named for a timeout's message.
typedef struct cu_inflight {
    cudaEvent_t done;
    char what[200];
} cu_inflight;

typedef struct cu_layout cu_layout; // nccl.c: how one collective instance is run (cached)
typedef struct cu_conv_algo cu_conv_algo; // ops.c: a convolution's chosen algorithms (cached)
typedef struct cu_prof cu_prof;   // profile.c: per-operator times (PLANRUN_CUDA_PROFILE)

typedef struct cu_state {
    const plan *p;
    int device, rank, world;
    bool tf32;
    double timeout_s;
    uint32_t coord[PLAN_MAX_AXES];  // this rank's mesh coordinates

    int n_streams;
    cudaStream_t streams[CU_MAX_STREAMS];
    cublasHandle_t blas[CU_MAX_STREAMS];
    cudnnHandle_t dnn[CU_MAX_STREAMS];
    cudaStream_t side;              // host_sum's all-reduce
    cudaEvent_t marks[CU_MAX_STREAMS]; // the end-of-step marker of each stream
    cudaEvent_t round_done;         // recorded at the end of the last background round
    int round_stream;               // the background rounds' stream (step_end skips it), -1 before the first
    bool round_pending;             // round_done recorded and not yet seen complete by the host
    uint32_t n_events;
    cudaEvent_t *events;            // the plan's events
    int *flag;                      // device word the kernels raise (CK_FLAG_*)

    // NCCL (nccl.c)
    ncclComm_t world_comm;          // NULL in a world of one
    ncclComm_t tag_comm[PLAN_MAX_TAGS]; // per message tag: 0 the world's; t > 0 a copy of it where some program uses t
    ncclComm_t *group_comm;         // per plan group: this rank's instance, or NULL
    int *group_size, *group_me;     // per plan group: members, this rank's index (-1: not a member)
    cu_layout **layouts;            // hash table of collective layouts, by (group, instance, seq)
    size_t n_layouts, cap_layouts;
    cu_inflight *inflight;          // this step's communication, in issue order
    size_t n_inflight, cap_inflight;
    bool aborted;                   // the communicators were aborted after a failure

    cu_conv_algo *convs;            // ops.c's cache
    size_t n_convs, cap_convs;
    cu_prof *prof;                  // NULL unless PLANRUN_CUDA_PROFILE is set
    cudaEvent_t *stamps;            // planrun --trace: this step's timing marks (profile.c), reused across steps
    uint32_t n_stamps, cap_stamps;

    pthread_mutex_t mu;
    bool failed;
    char error[2048];
} cu_state;

static inline cu_state *cu_of(rt_backend *b) { return (cu_state *)b->ctx; }

/* ---- util.c ---- */

// Stream s of the rank (the plan's stream index), checked; makes the device current.
int cu_stream(cu_state *cu, int s, cudaStream_t *out, char *err, size_t err_n);
// Device scratch of `bytes` ordered on stream st (cudaMallocAsync), and its release
// (cudaFreeAsync: after the work enqueued before it on st). *p is NULL for 0 bytes.
int cu_scratch(cudaStream_t st, size_t bytes, void **p, char *err, size_t err_n);
void cu_scratch_free(cudaStream_t st, void *p);
// Monotonic seconds; and a pause for polling loops (a yield for the first spins, then 50 us).
double cu_now(void);
void cu_pause(int spins);
// The element size of a plan dtype (0 for an unknown one).
size_t cu_dtype_bytes(int dtype);
// Converts an rt_box to a ck_box.
ck_box cu_box(const rt_box *b);

/* ---- ops.c ---- */

int cu_op_kernel(rt_backend *b, const rt_exec *x, const rt_kernel *k, char *err, size_t err_n);
// ops_ext.c: the operators of imported models (runtime/ops.def's last section), and add, mul and
// reduce_sum when attrs perm carries an axis map; after ops.c's checks of arity, views and dtypes.
int cu_ext_op(cu_state *cu, cudaStream_t st, const rt_kernel *k, const char *name, char *err, size_t err_n);
// ops_ext.c: attention's dropout into a (p, key, the global geometry ck_attn_keep reads) from
// kernel k's attrs and the query and key views; -1 (a untouched beyond p) when p is outside [0, 1).
int cu_attn_dropout(const rt_kernel *k, const rt_view *q, const rt_view *kk, ck_attn *a);
int cu_op_copy(rt_backend *b, const rt_exec *x, void *dst, const rt_box *db, const void *src, const rt_box *sb, uint64_t bytes,
               uint32_t dtype, char *err, size_t err_n);
void cu_ops_free(cu_state *cu);

/* ---- profile.c ---- */

// Reads PLANRUN_CUDA_PROFILE; without it cu->prof stays NULL and nothing below is called.
int cu_prof_init(cu_state *cu, char *err, size_t err_n);
// Brackets one operator on its stream.
int cu_prof_begin(cu_state *cu, cudaStream_t st, const rt_kernel *k, const char *name, char *err, size_t err_n);
int cu_prof_end(cu_state *cu, cudaStream_t st, char *err, size_t err_n);
// After a step's GPU work has finished (ok) or failed: collects the times.
void cu_prof_step(cu_state *cu, bool ok);
// Writes the profile file and frees it (accepts a state without one).
void cu_prof_free(cu_state *cu);
// planrun --trace's timing marks (rt_backend.stamp and stamp_read): an event with timing
// recorded on x's stream, numbered in this step; after the step, the seconds from mark 0 to each.
int cu_stamp(rt_backend *b, const rt_exec *x, uint32_t *mark, char *err, size_t err_n);
int cu_stamp_read(rt_backend *b, int rank, double *seconds, uint32_t n, char *err, size_t err_n);
void cu_stamps_free(cu_state *cu);

/* ---- nccl.c ---- */

// The world communicator and one per plan group instance that some program uses.
int cu_nccl_init(cu_state *cu, const rt_cuda_config *cfg, char *err, size_t err_n);
void cu_nccl_free(cu_state *cu);
int cu_nccl_p2p(rt_backend *b, const rt_exec *x, rt_p2p *items, int n, char *err, size_t err_n);
int cu_nccl_coll(rt_backend *b, const rt_exec *x, const rt_coll *c, char *err, size_t err_n);
int cu_nccl_coll_bucket(rt_backend *b, const rt_exec *x, const rt_coll *cs, int n, char *err, size_t err_n);
int cu_nccl_host_sum(rt_backend *b, double *v, int n, char *err, size_t err_n);
// 0, or -1 with the first asynchronous NCCL error of any communicator.
int cu_nccl_poll(cu_state *cu, char *err, size_t err_n);
// Aborts every communicator (after a failure or a timeout), once.
void cu_nccl_abort(cu_state *cu);
// Waits until ev has completed, polling so that an NCCL error or the timeout ends the wait
// (then every communicator is aborted). `what` names what is waited for.
int cu_wait_event(cu_state *cu, cudaEvent_t ev, const char *what, char *err, size_t err_n);
// Records the end of a communication operation on st, for step_end's report.
int cu_inflight_add(cu_state *cu, cudaStream_t st, const char *what, char *err, size_t err_n);

#endif
