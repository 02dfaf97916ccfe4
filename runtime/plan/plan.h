/*
 * plan.h: the plan, in memory and on disk. One small library shared by the compiler (which
 * builds and writes plans), plandump (which shows, checks and re-assembles them) and planrun
 * (which loads one rank's program and runs it). It depends on nothing but libc.
 *
 * A plan is what every rank runs for one training step:
 *   - a device mesh (up to 4 named axes, e.g. pp x dp x tp) and the world size; rank r has mesh
 *     coordinates digits(r) with the LAST axis varying fastest (Megatron's order: tp fastest);
 *   - logical tensors (the model's tensors, whole: one micro-batch's, one block copy's, with the
 *     number of copies of a repeated block; each param with its initializer, each input with its
 *     data source, so that a plan needs no model file to run), and the loss tensor;
 *   - communicator groups: the ranks that differ only along a set of mesh axes (a mask), or an
 *     explicit list of ranks;
 *   - programs, each shared by every rank that runs it (all data-parallel replicas of a stage,
 *     say), parameterized by the rank's mesh coordinates; a rank table says which rank runs
 *     which program;
 *   - per program: its arena size, buffers at static offsets (each holding the piece of a tensor
 *     that its shard names, or scratch), streams with priorities, events, and one instruction
 *     list. Repetition is a loop, not a copy: micro-batches and the copies of
 *     a repeated block are loops, and a buffer that holds a different slice per micro-batch or
 *     per block copy has slots at a fixed stride.
 *
 * File layout (all integers little-endian; every offset from the start of the file):
 *
 *   header, PLAN_HEADER_BYTES = 64:
 *     0   u8[8]  magic "PLANCC\r\n"
 *     8   u32    version (PLAN_VERSION); a reader refuses any other
 *     12  u32    header bytes (64)
 *     16  u64    file bytes (the whole file; a shorter file is truncated)
 *     24  u32    section count
 *     28  u32    CRC-32C of the section table
 *     32  u64    model hash      (FNV-1a 64 of the model file's bytes)
 *     40  u64    cluster hash    (of the cluster file's bytes)
 *     48  u64    options hash    (of the canonical option string in META)
 *     56  u32    CRC-32C of header bytes 0..55
 *     60  u32    reserved, 0
 *   section table: section count entries of 24 bytes:
 *     u32 kind (plan_section_kind), u32 index (program number for PROGRAM, else 0),
 *     u64 offset, u32 bytes, u32 CRC-32C of the section's bytes
 *   sections, each 8-byte aligned, in table order: META, STRINGS, TENSORS, GROUPS, RANKS, then
 *   one PROGRAM section per program. A rank reads the header, the table, META, STRINGS,
 *   TENSORS, GROUPS, RANKS and its own PROGRAM section only, checking each one's CRC.
 *
 * The byte layout inside each section is format.h's (documented there, and in
 * runtime/PLAN_FORMAT.md, the one document that specifies the format). The same plan always
 * serializes to the same bytes: order by index, never by pointer; no padding left uninitialized.
 *
 * Errors: every reader returns a plan_status and fills a message (a buffer the caller passes);
 * a wrong magic, another version, a bad CRC, a truncated file, an index out of range are errors,
 * never asserts.
 */
#ifndef PLAN_H
#define PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PLAN_MAGIC "PLANCC\r\n"
#define PLAN_VERSION 4u
#define PLAN_MAX_TAGS 8    // message tags 0..7 (plan_insn.tag)
#define PLAN_MAX_STREAMS 8 // streams of a program (plan_program.priority)
#define PLAN_HEADER_BYTES 64u
#define PLAN_MAX_AXES 8
#define PLAN_MAX_RANK 8
#define PLAN_NONE UINT32_MAX

typedef enum plan_status {
    PLAN_OK = 0,
    PLAN_ERR_IO = 1,        // cannot open, read or write
    PLAN_ERR_FORMAT = 2,    // not a plan, truncated, bad CRC, other version, index out of range
    PLAN_ERR_INVALID = 3,   // well-formed but fails plan_check (a deadlock, an overlap, ...)
    PLAN_ERR_STALE = 4,     // the hashes do not match the model/cluster/options given
    PLAN_ERR_LIMIT = 5,     // a plan beyond a limit of the call, not a fault: too large to check, or to simulate
} plan_status;

typedef enum plan_section_kind {
    PLAN_SEC_META = 1, PLAN_SEC_STRINGS, PLAN_SEC_TENSORS, PLAN_SEC_GROUPS, PLAN_SEC_RANKS, PLAN_SEC_PROGRAM,
} plan_section_kind;

typedef enum plan_schedule { PLAN_SCHED_NONE, PLAN_SCHED_GPIPE, PLAN_SCHED_1F1B, PLAN_SCHED_1F1B_INTERLEAVED } plan_schedule;

/* ---- what the plan holds ---- */

typedef struct plan_meta {
    char compiler[32];          // "plancc 0.1.0"
    const char *model_name;
    const char *options;        // the canonical option string the plan was compiled with
    uint64_t model_hash, cluster_hash, options_hash;
    uint32_t world;             // number of ranks = product of mesh
    uint32_t n_axes;
    uint32_t mesh[PLAN_MAX_AXES];
    char axis_names[PLAN_MAX_AXES][8]; // "pp", "dp", "tp", ...
    uint32_t micro_batches;
    plan_schedule schedule;
    uint32_t zero_stage;        // 0..3
    double est_step_s;          // the cost model's estimate of one step (seconds)
    double est_peak_bytes;      // the largest arena of any program
    double model_flops;         // FLOPs of one step as Megatron-LM counts them (matrix products of the
                                // forward, backward and recomputed forward, all ranks); 0: unknown
    double device_peak_flops;   // FLOP/s of one device at the model's dtype (tensor cores); 0: unknown
    uint32_t loss;              // the loss tensor (per micro-batch), or PLAN_NONE
    const char *notes;          // the compiler's decisions, one per line, for plandump; or NULL
} plan_meta;

// A tensor's kind: pcc_tensor_kind's values, in its order.
typedef enum plan_tensor_kind { PLAN_T_INPUT, PLAN_T_PARAM, PLAN_T_ACTIVATION, PLAN_T_GRAD, PLAN_T_STATE } plan_tensor_kind;

// Where a tensor's values come from, so that a plan alone says how to start training (the
// model file is not needed to run it). A param's source is its initializer, drawn once before
// the first step: a plan_init, with a = mean and b = std (>= 0) for NORMAL, a = low and b = high
// (low < high) for UNIFORM. An input's source says how the runtime fills it before each step: a
// plan_data, with a = high (the exclusive bound, an integer from 1 to 2^31) for RANDINT, TOKENS
// and TARGETS, a = scale (finite, >= 0) and b = bias (finite) for TEACHER. Every other kind has source 0 (optimizer state starts at zero; activations and
// gradients are computed). a and b are 0 where the source does not use them (plan_source_args).
// The orders are pcc_init_kind's and pcc_data_kind's (compiler/plancc.h), shifted by one.
typedef enum plan_init { PLAN_INIT_NONE, PLAN_INIT_ZEROS, PLAN_INIT_ONES, PLAN_INIT_NORMAL, PLAN_INIT_UNIFORM } plan_init;
typedef enum plan_data {
    PLAN_DATA_NONE,
    PLAN_DATA_NORMAL,   // float, N(0, 1)
    PLAN_DATA_BINARY,   // float, 0 or 1 (labels of bce_logits)
    PLAN_DATA_RANDINT,  // i32, uniform in [0, high)
    PLAN_DATA_TOKENS,   // i32 tokens of the corpus (random in [0, high) with synthetic data)
    PLAN_DATA_TARGETS,  // i32 next tokens of the corpus (the tokens shifted by one)
    PLAN_DATA_ARANGE,   // i32 0, 1, ... along the last dimension (positions)
    PLAN_DATA_TEACHER,  // float 0 or 1 ~ Bernoulli(sigmoid(b + a z)), z a seeded teacher of the row's inputs
} plan_data;

typedef struct plan_tensor {
    const char *name;
    uint8_t dtype;              // pcc_dtype values: 0 f32, 1 f16, 2 bf16, 3 i32
    uint8_t kind;               // plan_tensor_kind
    uint8_t rank;
    uint8_t source;             // a param's plan_init, an input's plan_data; 0 for other kinds
    uint32_t copies;            // >= 1: instances (the repeat of the block it belongs to)
    uint16_t zigzag;            // inputs: dimension zigzag_dim is stored in zigzag order of this many chunks (0: natural order;
    uint8_t zigzag_dim;         // else even, >= 4; plan_zigzag_pos): context parallelism's causal load balance
    int64_t shape[PLAN_MAX_RANK];
    double a, b;                // the source's numbers (see plan_init, plan_data); 0 where unused
} plan_tensor;

typedef struct plan_group {
    uint32_t axes;              // bit i: the group spans mesh axis i (0: an explicit group)
    uint32_t n_ranks;           // explicit groups only: the member ranks, ascending
    uint32_t *ranks;
} plan_group;

typedef struct plan_rank {
    uint32_t program;
    uint32_t coord[PLAN_MAX_AXES];
} plan_rank;

// How a buffer holds its logical tensor on the mesh (the sharding spec of GSPMD and Alpa, which
// expresses nnScaler's RVD layouts on a multi-axis mesh): for each mesh axis, map[a] is
//   PLAN_SHARD_R (0)      replicated along axis a (every rank along it holds the same data),
//   PLAN_SHARD_V (1)      partial sums along axis a (the tensor is the sum over its ranks),
//   PLAN_SHARD_D(i)       dimension i split evenly along axis a (the rank's coordinate picks the piece).
// Several axes may split one dimension: the pieces are numbered with the earlier axis the more
// significant digit. Axes past n_axes are 0. A scratch buffer (no tensor) is all R.
#define PLAN_SHARD_R 0
#define PLAN_SHARD_V 1
#define PLAN_SHARD_D(i) (2 + (i))
typedef struct plan_shard {
    uint8_t map[PLAN_MAX_AXES];
} plan_shard;

// A buffer that holds data when the step starts and keeps it across steps: the home of a
// parameter or optimizer state (initialized once, updated in place, never overwritten by another
// buffer), or of an input (filled by the runtime before each step). Other buffers of the same
// tensor are temporaries (a gathered copy of a parameter, say).
#define PLAN_BUF_PERSIST 1u
typedef struct plan_buffer {
    uint32_t tensor;            // logical tensor, or PLAN_NONE for scratch
    uint8_t dtype;
    plan_shard shard;
    uint64_t offset, bytes;     // in the program's arena; bytes of one slot
    uint32_t mb_slots;          // >= 1: slot (mb % mb_slots) for micro-batch mb ...
    uint64_t mb_stride;         // ... at offset + slot * mb_stride
    uint32_t layer_slots;       // >= 1: slot (copy index) for block copies ...
    uint64_t layer_stride;      // ... at + copy * layer_stride
    uint32_t layer_base;        // the block copy that layer slot 0 holds (layer slot l: copy layer_base + l)
    uint8_t flags;              // PLAN_BUF_PERSIST
} plan_buffer;

// The collectives, runtime/colls.def's rows in order (the compiler's pcc_coll has the same
// codes), and what the table says of each: how a pair's buffers relate (pieces), what it does
// to a shard on its group's axes (shards), whether it may run in place, who contributes
// (roots). colls.def explains each column.
typedef enum plan_coll {
#define COLL(E, name, pieces, shards, inplace, roots) PLAN_COLL_##E,
#include "../colls.def"
#undef COLL
    PLAN_COLL_COUNT
} plan_coll;
_Static_assert(PLAN_COLL_ALL_REDUCE == 0 && PLAN_COLL_ALL_GATHER == 1 && PLAN_COLL_REDUCE_SCATTER == 2 &&
               PLAN_COLL_ALL_TO_ALL == 3 && PLAN_COLL_SEND_RECV == 4 && PLAN_COLL_BROADCAST == 5,
               "plans store these codes: append rows to colls.def, never reorder them");
typedef enum plan_pieces { PLAN_PIECES_WHOLE, PLAN_PIECES_GATHER, PLAN_PIECES_SCATTER, PLAN_PIECES_SWAP, PLAN_PIECES_SHIFT } plan_pieces;
typedef enum plan_shards {
    PLAN_SHARDS_V_R, PLAN_SHARDS_D_R, PLAN_SHARDS_V_D, PLAN_SHARDS_D_D, PLAN_SHARDS_KEEP, PLAN_SHARDS_ANY
} plan_shards;
typedef enum plan_roots { PLAN_ROOTS_ALL, PLAN_ROOTS_FIRST } plan_roots;
typedef struct plan_coll_facts {
    plan_pieces pieces;
    plan_shards shards;
    bool inplace;
    plan_roots roots;
} plan_coll_facts;

typedef enum plan_insn_kind {
    PLAN_I_COMPUTE,     // code: pcc_op_kind; args: inputs then outputs; attrs: index
    PLAN_I_COLL,        // code: plan_coll; a: group; args: [in_1..in_k, out_1..out_k], k >= 1 pairs (a bucket
                        // when k > 1); in_j == out_j: in place
    PLAN_I_SEND,        // to the rank whose coord[a] is this rank's + b (other coords equal); args: [buf]
    PLAN_I_RECV,        // from the rank whose coord[a] is this rank's + b (b = -1: the previous stage)
    PLAN_I_COPY,        // args: [src, dst], local copy (or slice) between buffers
    PLAN_I_RECORD,      // a: event, recorded on this instruction's stream
    PLAN_I_WAIT,        // a: event; this stream waits until it is recorded
    PLAN_I_LOOP,        // code: plan_loop_var; a: count; b: number of instructions in the body
    PLAN_I_KIND_COUNT
} plan_insn_kind;

// BACKGROUND and BACKGROUND_HOGWILD are not loops of the step: the body is one round of a
// background program (ShadowSync) on a stream of its own, which the runtime runs once every
// `count` steps, or back to back through the step with count 0 (continuous); its body
// sets no variable. HOGWILD: its updates of params race with the foreground's (no lock).
typedef enum plan_loop_var {
    PLAN_LOOP_MB,
    PLAN_LOOP_LAYER,
    PLAN_LOOP_REVERSE_LAYER,
    PLAN_LOOP_BACKGROUND,
    PLAN_LOOP_BACKGROUND_HOGWILD,
    PLAN_LOOP_VAR_COUNT
} plan_loop_var;

static inline bool plan_loop_is_background(uint32_t var) {
    return var == PLAN_LOOP_BACKGROUND || var == PLAN_LOOP_BACKGROUND_HOGWILD;
}


// The part of the step an instruction belongs to, for tools (plandump's timelines colour by it;
// nothing runs differently): the forward or backward pass of a micro-batch, a forward operator
// run again in the backward pass (activation recomputation), the optimizer (and what follows it).
typedef enum plan_phase { PLAN_PHASE_NONE, PLAN_PHASE_FWD, PLAN_PHASE_BWD, PLAN_PHASE_RECOMPUTE, PLAN_PHASE_OPT, PLAN_PHASE_COUNT } plan_phase;

// A loop sets its variable to 0..count-1 (REVERSE_LAYER: count-1..0) around its body; a
// buffer's micro-batch slot is (mb + insn.mb_delta), its layer slot (layer + insn.layer_delta)
// with layer the innermost layer loop's variable (0 outside any). Inside a layer loop, an
// instruction whose layer + layer_delta falls outside 0..count-1 does not run (a prefetch of
// the next block copy in the loop's last iteration: plan_insn_skipped).
// t_s is the cost model's time for one execution on its stream (compute, coll, send, recv,
// copy; 0 for the other kinds, and where the plan's writer gave none): the simulator
// (runtime/sim.h) works from it.
typedef struct plan_insn {
    uint8_t kind;
    uint8_t stream;
    uint16_t code;
    uint16_t nargs;
    int16_t mb_delta;
    uint32_t args;              // index of the first of nargs buffer ids in the program's args
    int32_t a, b;
    uint32_t attrs;             // index into the program's attrs, PLAN_NONE if none
    float t_s;                  // seconds per execution, finite and >= 0
    uint8_t phase;              // plan_phase (0 for record, wait and loop)
    uint8_t tag;                // send/recv: the message's tag, below PLAN_MAX_TAGS (0 for other kinds)
    int16_t layer_delta;        // the block copy it works on, from the innermost layer loop's variable
} plan_insn;

// Whether instruction in does not run at layer loop variable `layer` of a loop of `count`
// iterations (count 0: outside any layer loop, where it always runs).
static inline bool plan_insn_skipped(const plan_insn *in, int64_t layer, int64_t count) {
    int64_t l = layer + in->layer_delta;
    return count > 0 && (l < 0 || l >= count);
}

// How many times a checker or simulator walks a loop's body in one step: its count, and once
// for a background round.
static inline uint32_t plan_loop_trips(const plan_insn *in) {
    return plan_loop_is_background(in->code) ? 1u : (uint32_t)in->a;
}

// Operator attributes as the compiler's pcc_attrs carries them, flattened for the file.
// The slots of f[] and i[] by name (PLAN_AI_ACCUMULATE != 0: the op adds into its outputs, which
// the runtime zeroes once per step; plan_check counts such outputs as written at the start):
enum { PLAN_AF_SCALE, PLAN_AF_EPS, PLAN_AF_P, PLAN_AF_LR, PLAN_AF_BETA1, PLAN_AF_BETA2, PLAN_AF_WEIGHT_DECAY, PLAN_AF_MOMENTUM };
// PLAN_AI_GHOST > 0: batch norm's statistics are over each run of that many samples (ghost
// batch norm); 0: over the whole batch the instruction sees.
// PLAN_AI_MODE: cross_entropy's bits (1: rows labelled f[PLAN_AF_SCALE] count 0; 2: the sum, not
// the mean); attention's and its gradients' form (PLAN_ATTN_*: the same function either way).
// PLAN_AI_END > 0 on dropout and dropout_grad: dimension PLAN_AI_AXIS of the input is a sequence
// in zigzag order of that many chunks (plan_zigzag_pos), and the mask is drawn by logical
// positions; on attention_block and attention_block_grad the zigzag chunks of the ring's steps.
enum { PLAN_ATTN_UNFUSED = 0, PLAN_ATTN_FLASH = 1 };
enum { PLAN_AI_SEED, PLAN_AI_AXIS, PLAN_AI_START, PLAN_AI_END, PLAN_AI_CAUSAL, PLAN_AI_ACCUMULATE, PLAN_AI_GHOST, PLAN_AI_MODE };
typedef struct plan_attrs {
    double f[8];                // scale, eps, p, lr, beta1, beta2, weight_decay, momentum
    int64_t i[8];               // seed, axis, start, end, causal, accumulate, ghost, mode
    int32_t perm[PLAN_MAX_RANK];
    int32_t win[6];             // kernel[2], stride[2], pad[2]
} plan_attrs;

typedef struct plan_program {
    const char *name;
    uint64_t arena_bytes;       // the exact peak: every buffer slot lies below it
    uint32_t n_streams;
    int32_t priority[PLAN_MAX_STREAMS]; // per stream; lower runs first (CUDA's convention)
    uint32_t n_events;
    plan_buffer *buffers;  uint32_t n_buffers;
    plan_insn *insns;      uint32_t n_insns;
    uint32_t *args;        uint32_t n_args;
    plan_attrs *attrs;     uint32_t n_attrs;
} plan_program;

typedef struct plan {
    plan_meta meta;
    plan_tensor *tensors;   uint32_t n_tensors;
    plan_group *groups;     uint32_t n_groups;
    plan_rank *ranks;       uint32_t n_ranks;   // == meta.world
    plan_program *programs; uint32_t n_programs;
    void *owner;            // the allocation(s) behind a plan that plan_read made
} plan;

/* ---- the library, file by file (runtime/plan/) ---- */

/* plan.c: the memory a plan owns, and failing with a message */

// n zeroed bytes (aligned for any type) that p owns: plan_free releases them. NULL when out of
// memory. plan_decode and plan_parse allocate this way; a compiler may too.
void *plan_alloc(plan *p, size_t n);
// Room for `need` items of elem bytes in arr, an array of n items that p owns with room for *cap
// (a count below n, 0 say, means exactly n): arr itself where *cap holds them, else a copy of its
// n items, from plan_alloc, with the room doubled until it does (the old block stays p's until
// plan_free), *cap updated. NULL when out of memory or past UINT32_MAX items. Appending one item
// at a time so costs O(items), where a copy a time cost O(items^2).
void *plan_grow(plan *p, void *arr, uint32_t n, uint32_t need, uint32_t *cap, size_t elem);
// Releases what plan_alloc gave p (plan_decode, plan_read and plan_parse allocate this way) and
// zeroes *p; accepts a zeroed plan and NULL.
void plan_free(plan *p);
// Writes the message (printf's fmt) into err (err_n bytes, NUL-terminated; err NULL: nothing) and
// returns st: every reader's way of failing with a message.
plan_status plan_errorf(plan_status st, char *err, size_t err_n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* hash.c: checksums, and the hashes that tie a plan to its inputs */

// CRC-32C (Castagnoli) and FNV-1a 64, as the header uses them.
uint32_t plan_crc32c(uint32_t crc, const void *data, size_t n);
uint64_t plan_fnv1a64(const void *data, size_t n);
// The FNV-1a 64 of a file's bytes (the header's model and cluster hashes); PLAN_ERR_IO with a
// message if it cannot be read.
plan_status plan_file_hash(const char *path, uint64_t *hash, char *err, size_t err_n);

// Refuses a stale plan: the model and cluster files' FNV-1a 64 hashes (paths NULL: not checked)
// must be the ones the header records, and the options hash must be that of META's option
// string. PLAN_ERR_STALE with a message saying which differs; PLAN_ERR_IO if a file cannot be read.
plan_status plan_verify_inputs(const plan *p, const char *model_path, const char *cluster_path, char *err, size_t err_n);

/* encode.c, decode.c: the binary form (format.h has the layout inside each section) */

// Serializes p into a malloc'd buffer (*out, *n). Deterministic: the same plan, the same bytes.
// Refuses (PLAN_ERR_FORMAT) a plan that fails plan_validate or was read for one rank.
plan_status plan_encode(const plan *p, uint8_t **out, size_t *n, char *err, size_t err_n);
// Parses a whole file's bytes. With rank >= 0, decodes only that rank's PROGRAM section (the
// other programs are left with n_insns = 0 and name NULL); with rank < 0, all of them. A rank
// >= the plan's world loads no program (the caller compares meta.world with its own world).
// On error, *out is left zeroed (nothing to free).
plan_status plan_decode(const uint8_t *data, size_t n, int rank, plan *out, char *err, size_t err_n);
plan_status plan_write(const plan *p, const char *path, char *err, size_t err_n); // plan_out_write_file (file.c)
plan_status plan_read(const char *path, int rank, plan *out, char *err, size_t err_n);

/* file.c: output files written safely, whole files read with a limit */

// An output file being written: f is where the bytes go. A regular file (or a new path) is
// written to a temporary file next to it (tmp), which commit flushes to the disk and renames
// over path; anything else that exists at path (a device such as /dev/null, a FIFO) is written
// in place (tmp NULL), never renamed over. A temporary file is removed on abort and when
// SIGINT, SIGTERM or SIGHUP ends the process (where the program left the signal's default).
typedef struct plan_out {
    FILE *f;
    const char *path;           // the caller's string: it must outlive the plan_out
    char *tmp;                  // the temporary file's name, or NULL (in place)
} plan_out;
// Whether path can be written by plan_out_open, asked before the work that produces it: not a
// directory; a device or FIFO that lets us write; else its folder exists and lets us create a
// file. PLAN_ERR_IO with a message that names path, or PLAN_OK.
plan_status plan_out_check(const char *path, char *err, size_t err_n);
// Opens o for writing path (see plan_out). PLAN_ERR_IO with a message naming path; o then
// holds nothing.
plan_status plan_out_open(plan_out *o, const char *path, char *err, size_t err_n);
// Flushes, fsyncs (a temporary file, then its folder after the rename) and closes o, renaming
// the temporary file over path. On error (PLAN_ERR_IO, with a message) the temporary file is
// removed and path is untouched.
plan_status plan_out_commit(plan_out *o, char *err, size_t err_n);
// Closes o and removes its temporary file, path untouched. Accepts NULL and a closed o.
void plan_out_abort(plan_out *o);
// The n bytes of data as the whole of path (open, write, commit).
plan_status plan_out_write_file(const char *path, const void *data, size_t n, char *err, size_t err_n);
// The whole of path (a regular file, a pipe, a device) in a malloc'd buffer of *n bytes plus a
// NUL, at most max bytes: a directory, an unreadable file or a longer one is PLAN_ERR_IO with a
// message naming path (*out NULL). The caller frees *out.
plan_status plan_file_read(const char *path, size_t max, uint8_t **out, size_t *n, char *err, size_t err_n);
// The largest plan text form plandump reads (256 MiB; compiled plans of thousands of ranks are a few MB).
#define PLAN_TEXT_MAX_BYTES ((size_t)1 << 28)

/* names.c: the name tables */

// The names the text form and every message use, NULL for a value out of range: operators in
// runtime/ops.def's order (pcc_op_kind's), collectives in runtime/colls.def's (plan_coll's:
// all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, broadcast), dtypes (f32 f16
// bf16 i32), tensor kinds (input param activation grad state), initializers (none zeros ones
// normal uniform), data sources (none normal binary randint tokens targets arange teacher),
// instruction kinds, loop variables, schedules.
const char *plan_op_name(uint32_t op);
const char *plan_coll_name(uint32_t coll);
// colls.def's row of collective `coll` (plan_coll), NULL for a value out of range.
const plan_coll_facts *plan_coll_lookup(uint32_t coll);
const char *plan_dtype_name(uint32_t dtype);
uint32_t plan_dtype_bytes(uint32_t dtype); // 0 for a value out of range
const char *plan_tensor_kind_name(uint32_t kind);
const char *plan_init_name(uint32_t init);
const char *plan_data_name(uint32_t data);
// How many of a, b a tensor's source uses, given the tensor's kind: 2 for init normal and
// uniform, 1 for data randint, tokens and targets, else 0 (the others are 0 in the file). An
// input's source is read as a plan_data, any other kind's as a plan_init (only a param may
// have one: plan_validate's rule); 0 for a value out of range. This function can't fail.
unsigned plan_source_args(uint32_t kind, uint32_t source);
const char *plan_insn_kind_name(uint32_t kind);
// What an instruction is, for messages: its operator (compute), its collective (coll), else its
// kind's name; NULL for a value out of range.
const char *plan_insn_name(const plan_insn *in);
// The events n instructions use: one more than the largest a record or wait names (0: none).
uint32_t plan_insns_events(const plan_insn *insns, uint32_t n);
const char *plan_loop_var_name(uint32_t var);
const char *plan_schedule_name(uint32_t schedule);
const char *plan_phase_name(uint32_t phase); // none fwd bwd recompute opt
// A rank as timelines name it: "rank 3: stage1 (pp 1, dp 0, tp 1)" (cut to n bytes). q must be
// below p->meta.world.
void plan_rank_label(const plan *p, uint32_t q, char *buf, size_t n);

/* shard.c: the mesh's geometry: groups and shards */

// The members of one instance of group g: the product of its axes' mesh sizes, or its explicit
// ranks; 1 for PLAN_NONE. g must be in range (plan_check has checked it).
uint64_t plan_group_size(const plan *p, uint32_t g);
// The ways shard s splits dimension d: the product of the mesh sizes of the axes that map to
// PLAN_SHARD_D(d) (1 when none does), UINT64_MAX past 2^64. Axes past the mesh are not counted.
uint64_t plan_shard_ways(const plan *p, plan_shard s, int d);
// Shards (see plan_shard). The piece of tensor t that a buffer with shard s holds on every rank:
// local[i] = shape[i] / ways(i), where ways(i) is the product of the mesh sizes of the axes that
// map to PLAN_SHARD_D(i) (1 when none does); dimensions past t's rank are 0. Returns false when
// a split does not divide its dimension (local[i] is then 0), or when s splits a dimension past
// t's rank or names an axis past the mesh; true otherwise. It does not check t's shape (a
// dimension below 1 is plan_check's to find).
bool plan_shard_local_shape(const plan *p, const plan_tensor *t, plan_shard s, int64_t local[PLAN_MAX_RANK]);
// Zigzag order (plan_tensor.zigzag; Megatron-Core's causal load balance of context parallelism):
// a dimension of n positions cut into z chunks (z even, dividing n) stores logical chunk k / 2
// at chunk k for even k and chunk z - 1 - k / 2 for odd k, so that an even split into z / 2
// pieces gives piece c the logical chunks c and z - 1 - c. The logical position that stored
// position i holds (i itself when z < 2).
int64_t plan_zigzag_pos(int64_t i, int64_t n, uint32_t z);
// The bytes one slot of a tensor buffer must have (plan_check's shard-bytes): the element count
// of its local shape times the bytes of the buffer's dtype. 0 when there is no such figure: a
// scratch buffer, a tensor out of range, an unknown dtype, a split that does not divide, or more
// than 2^64 - 1 bytes.
uint64_t plan_buffer_expected_bytes(const plan *p, const plan_buffer *b);
// s as the text form writes it: the axes that are not R, in mesh order, as AXIS=v or AXIS=dI
// separated by spaces ("dp=d0 tp=v"); "" when every axis is R. An axis past the mesh shows as
// ?A. Writes at most n bytes, NUL included (cut short if n is too small).
void plan_shard_text(const plan *p, plan_shard s, char *buf, size_t n);

/* print.c, parse.c: the text form */

// The text form: one line per item, every number exact, so that plan_parse(plan_print(p))
// encodes to the same bytes as p. plandump prints it; plandump --assemble parses it. The parser
// checks syntax, not cross-references (an out-of-range group or buffer is plan_check's to find);
// its errors are "FILE:LINE: message" with PLAN_ERR_FORMAT, and leave *out zeroed.
void plan_print(FILE *f, const plan *p, int only_rank /* -1: all */);
plan_status plan_parse(const char *text, size_t n, const char *file, plan *out, char *err, size_t err_n);

/* check*.c: the verifier (checker.h has its layers) */

// The well-formedness that the file format itself needs (plan_check's first part): every index
// in range (tensors, the loss, groups, programs, buffers, args, attrs, streams, events, mesh
// axes), every enum value known, the mesh consistent with world and the rank table, tensors with
// at least one copy, every param with an initializer and every input with a data source (and no
// other tensor with either) whose numbers are in range (normal: finite mean, finite std >= 0;
// uniform: finite low < high; randint, tokens, targets: an integral high from 1 to 2^31),
// shards that name mesh axes and (for a tensor buffer) dimensions of its tensor (all R for
// scratch), layer slots inside their tensor's copies (layer_base + layer_slots <= copies;
// layer_base 0 for scratch), loops nested inside their program (at most PLAN_MAX_LOOP_DEPTH
// deep), instruction times and META's FLOP figures finite and >= 0. plan_encode refuses and plan_decode rejects a plan
// that fails it. Returns PLAN_ERR_FORMAT with a message naming the item, or PLAN_OK.
#define PLAN_MAX_LOOP_DEPTH 32
#define PLAN_MAX_BUCKET 16384 // pairs of one collective instruction
#define PLAN_MAX_EVENTS 65536u // events of one program (plan_check; the runtime keeps state per event)
plan_status plan_validate(const plan *p, char *err, size_t err_n);

// How instruction `in` of program pg uses its argument j: PLAN_ARG_READ, PLAN_ARG_WRITE or both
// (an in-place operator; an accumulating operator's outputs), as plan_check's data flow counts
// it. The instruction must be valid (plan_validate).
#define PLAN_ARG_READ 1u
#define PLAN_ARG_WRITE 2u
unsigned plan_arg_role(const plan_program *pg, const plan_insn *in, uint32_t j);

// The verifier, run by the compiler after emitting and by every reader: indices in range;
// every buffer slot inside the arena; each tensor buffer's shard divides its tensor and its
// bytes are its piece's; collectives and copies move shards as their kinds do (see
// runtime/PLAN_FORMAT.md); no two buffers that are live at once overlap; every buffer written
// before it is read; every send has its matching receive on the peer, into the same tensor and
// shard; every member of a group issues that group's collectives in the same order (no
// deadlock); loops well nested. Returns PLAN_ERR_INVALID with a message naming the rank, program, instruction,
// or PLAN_ERR_LIMIT for a plan too large to check (its loops multiplied out past the walks' bounds).
plan_status plan_check(const plan *p, char *err, size_t err_n);

#endif
