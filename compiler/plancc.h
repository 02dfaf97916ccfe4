/*
 * plancc.h: the compiler's one internal header, sectioned by file.
 *
 * plancc turns a model (JSON graph) and a cluster (JSON) into a parallel training plan. main()
 * (main.c) is the pipeline, one call per box of the data flow; each is one file's entry point,
 * and the sections below follow the flow, one per file, each with its entry points and their
 * contracts (everything else in a file is static):
 *
 *   options_parse (options.c)
 *   model_load (model.c) -> batch_apply (batch.c) -> graph_check (check.c) -> autodiff
 *     (autodiff.c) -> graph_check; cluster_load (cluster.c)
 *   phase 1: transform_all (transform.c), for the group sizes search_group_sizes names
 *   phase 2: search (search.c), with the intra-operator ILP (ilp.c, solved by glpk.c), the
 *            step-time estimate (estimate.c) and the cost model (cost.c, reshard.c)
 *   phase 3: preserve (preserve.c), from layout.c's decisions (every value's stage and
 *            layout), walking the micro-batch schedule (pipeline.c) and inserting reshard.c's
 *            collectives; burst.c is DeepPool's phases 2 and 3
 *   memplan (memplan.c) -> emit_plan (emit.c, bgsync.c) -> check_plan (check.c) -> plan_write
 *
 * Around the pipeline: driver.c's two loops (the micro-batch count; which ranked strategy
 * fits), report.c's reports, util.c and json.c below everything (json.c is the only file that
 * sees cJSON, glpk.c the only one that sees GLPK). The graph IR is this header's "graph IR"
 * section; the plan is the plan library's (runtime/plan/plan.h).
 *
 * Every pass returns a pcc_status. Bad input is reported through diag() with the input file and
 * the JSON Pointer of the node at fault, and the pass returns PCC_ERR_INPUT; broken internal
 * invariants use PCC_ASSERT, which aborts with file:line. Input data never reaches an assert.
 *
 * Memory: one arena per compilation (pcc_arena); nothing in the IR is freed on its own.
 */
#ifndef PLANCC_H
#define PLANCC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "plan.h" // the plan (runtime/plan/plan.h), which the emitter writes

#define PCC_VERSION "0.1.0"

/* ---------------------------------------------------------------- util.c */

typedef enum pcc_status {
    PCC_OK = 0,
    PCC_ERR_INTERNAL = 1,   // a bug in plancc, or out of memory
    PCC_ERR_INPUT = 2,      // invalid input: model, cluster, options, unreadable file
    PCC_ERR_INFEASIBLE = 3, // nothing fits
    PCC_ERR_OUTPUT = 8,     // the plan file cannot be written (runtime/cli.h's table: an unusable output file)
    PCC_ERR_LIMIT = 14,     // beyond a limit of the tool: a plan too large to verify
} pcc_status;

#define PCC_ASSERT(x)                                                                              \
    do {                                                                                           \
        if (!(x)) pcc_assert_fail(__FILE__, __LINE__, #x);                                         \
    } while (0)

_Noreturn void pcc_assert_fail(const char *file, int line, const char *expr);

// An arena: bump allocation in chunks, freed all at once. Allocation never fails (it aborts on
// out-of-memory with a message), so callers need no NULL checks.
typedef struct pcc_arena pcc_arena;
pcc_arena *arena_init(void);
void arena_free(pcc_arena *a); // accepts NULL
void *arena_alloc(pcc_arena *a, size_t n);           // zeroed, aligned to 16
void *arena_realloc(pcc_arena *a, void *p, size_t old_n, size_t new_n);
char *arena_strdup(pcc_arena *a, const char *s);
char *arena_printf(pcc_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
size_t arena_bytes(const pcc_arena *a); // bytes held (for the memory figures of --check -v)
// Appends text to the string s (*n characters in *cap bytes of arena a), growing it; returns the
// string, which may have moved.
char *arena_append(pcc_arena *a, char *s, size_t *n, size_t *cap, const char *text);

// Growable array of T in an arena: `T *v; int n, cap;` plus VEC_PUSH(arena, v, n, cap), which
// returns a pointer to the new (zeroed) last element. Growth may move the array.
void *vec_reserve(pcc_arena *a, void *v, size_t elem, int n, int *cap);
#define VEC_PUSH(ar, v, n, cap) ((v) = vec_reserve((ar), (v), sizeof(*(v)), (n), &(cap)), &(v)[(n)++])

// String -> int map (open addressing), for name lookups. Keys are not copied.
typedef struct pcc_symtab {
    const char **keys;
    int *vals;
    int cap, n;
} pcc_symtab;
void symtab_init(pcc_symtab *t, pcc_arena *a, int expect);
int symtab_get(const pcc_symtab *t, const char *key);           // -1 if absent
bool symtab_put(pcc_symtab *t, pcc_arena *a, const char *key, int val); // false if present

// Diagnostics: "plancc: FILE:WHERE: message" on stderr. WHERE is a JSON Pointer ("/ops/3/in/1",
// "" for the whole document) or "LINE:COL" for syntax errors. Always returns PCC_ERR_INPUT so a
// check can `return diag(...)`.
extern const char *pcc_progname;
extern bool pcc_quiet; // warn() prints nothing
extern bool pcc_trial; // a trial of the search (phase 3 on a candidate, a micro-batch count): diag() says nothing
pcc_status diag(const char *file, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// The warnings warn() was given so far (also under -q), oldest first: up to max of them into
// out (valid until exit); returns how many. Can't fail.
#define PCC_MAX_WARNINGS 32
int warnings(const char **out, int max);

// Reads a whole file into an arena; NUL-terminated; *len excludes the NUL. Reports and returns
// PCC_ERR_INPUT when it cannot.
pcc_status file_read_all(pcc_arena *a, const char *path, char **out, size_t *len, size_t max_bytes);

// Seconds on a monotonic clock (for the summaries' timings).
double clock_s(void);
double clock_cpu_s(void); // this process's CPU seconds (the search's budget: a loaded machine does not shorten it)

// Human-readable counts: "124.44 M", "1.23 GiB", "3.10 TFLOP". Writes into buf, returns buf.
char *fmt_count(char *buf, size_t n, double x);
char *fmt_bytes(char *buf, size_t n, double bytes);
char *fmt_flops(char *buf, size_t n, double flops);

/* ---------------------------------------------------------------- json.c */

/* A thin checked reader over cJSON. cJSON never leaves json.c: callers see opaque pcc_json
 * handles and a reader that knows the file name and builds JSON Pointers, so each type check
 * reports "FILE:POINTER: expected an integer, got a string". */
typedef struct pcc_json pcc_json; // a cJSON node
typedef struct pcc_jreader {
    pcc_arena *arena;
    const char *file;
    void *root; // cJSON *
} pcc_jreader;

typedef enum pcc_jtype {
    PCC_J_NULL, PCC_J_BOOL, PCC_J_NUMBER, PCC_J_STRING, PCC_J_ARRAY, PCC_J_OBJECT, PCC_J_INVALID
} pcc_jtype;

pcc_status json_open(pcc_jreader *r, pcc_arena *a, const char *file, const char *text, size_t len,
                     pcc_json **root);
void json_close(pcc_jreader *r); // frees the cJSON tree; accepts a reader never opened
pcc_jtype json_type(const pcc_json *v);
const char *json_type_name(pcc_jtype t);
int json_size(const pcc_json *v);                       // array/object member count
pcc_json *json_at(const pcc_json *arr, int i);          // i-th element / member
const char *json_key(const pcc_json *member);           // key of an object member
pcc_json *json_get(const pcc_json *obj, const char *key); // NULL if absent
// Pointer of a child: ptr + "/" + escaped key, or ptr + "/" + index.
const char *json_ptr_key(pcc_jreader *r, const char *ptr, const char *key);
const char *json_ptr_idx(pcc_jreader *r, const char *ptr, int i);

// Checked accessors: each reports at ptr and returns PCC_ERR_INPUT on a wrong type or range.
pcc_status json_expect(pcc_jreader *r, const pcc_json *v, const char *ptr, pcc_jtype t);
pcc_status json_int(pcc_jreader *r, const pcc_json *v, const char *ptr, int64_t lo, int64_t hi,
                    int64_t *out);
pcc_status json_num(pcc_jreader *r, const pcc_json *v, const char *ptr, double lo, double hi,
                    double *out);
pcc_status json_str(pcc_jreader *r, const pcc_json *v, const char *ptr, const char **out);
pcc_status json_bool(pcc_jreader *r, const pcc_json *v, const char *ptr, bool *out);
// Rejects keys not in `allowed` (NULL-terminated) and duplicate keys; requires the `required` ones.
pcc_status json_keys(pcc_jreader *r, const pcc_json *obj, const char *ptr,
                     const char *const *allowed, const char *const *required);
// A name: non-empty, [A-Za-z0-9_.:-], at most 128 chars.
pcc_status json_name(pcc_jreader *r, const pcc_json *v, const char *ptr, const char **out);

/* ---------------------------------------------------------------- graph IR (graph.c) */

#define PCC_MAX_RANK 8
#define PCC_MAX_NAME 128

typedef enum pcc_dtype { PCC_F32, PCC_F16, PCC_BF16, PCC_I32, PCC_DTYPE_COUNT } pcc_dtype;
extern const char *const pcc_dtype_names[PCC_DTYPE_COUNT];
int pcc_dtype_bytes(pcc_dtype t);

typedef enum pcc_tensor_kind {
    PCC_T_INPUT,    // fed by the data loader each step
    PCC_T_PARAM,    // trained; has an initializer
    PCC_T_ACT,      // produced by a forward op
    PCC_T_GRAD,     // produced by a backward op (gradient of .of)
    PCC_T_STATE,    // optimizer state of parameter .of (momentum, Adam moments, fp32 master)
    PCC_T_KIND_COUNT
} pcc_tensor_kind;
extern const char *const pcc_tensor_kind_names[PCC_T_KIND_COUNT];

typedef enum pcc_init_kind { PCC_INIT_ZEROS, PCC_INIT_ONES, PCC_INIT_NORMAL, PCC_INIT_UNIFORM } pcc_init_kind;
typedef struct pcc_init {
    pcc_init_kind kind;
    double a, b; // normal: mean, std; uniform: low, high
} pcc_init;

typedef enum pcc_data_kind {
    PCC_DATA_NORMAL,   // float, N(0, 1)
    PCC_DATA_BINARY,   // float, 0 or 1 (labels of bce_logits)
    PCC_DATA_RANDINT,  // i32, uniform in [0, high)
    PCC_DATA_TOKENS,   // i32 tokens of the corpus (random in [0, high) with synthetic data)
    PCC_DATA_TARGETS,  // i32 next tokens of the corpus (tokens shifted by one)
    PCC_DATA_ARANGE,   // i32 0, 1, ... along the last dimension (positions)
    PCC_DATA_TEACHER,  // float, 0 or 1 drawn from a seeded teacher over the sample's other inputs
    PCC_DATA_KIND_COUNT
} pcc_data_kind;
extern const char *const pcc_data_kind_names[PCC_DATA_KIND_COUNT];
typedef struct pcc_data {
    pcc_data_kind kind;
    int64_t high;        // RANDINT/TOKENS/TARGETS: exclusive upper bound
    double scale, bias;  // TEACHER: the teacher's logit is bias + scale * z, z about N(0, 1)
} pcc_data;

typedef struct pcc_dim {
    const char *name;
    int64_t size;
    const char *ptr;
} pcc_dim;

enum {
    PCC_PROD_NONE = -1,     // inputs, params, optimizer state
    PCC_PROD_BLOCK = -2,    // an outer tensor bound by a block's "out" or "acc"
    PCC_PROD_BOUND = -3,    // an inner tensor bound by a block's "in" (and maybe "carry")
};

typedef struct pcc_tensor {
    const char *name;
    const char *ptr;        // JSON Pointer of its declaration (or of the op that made it)
    pcc_tensor_kind kind;
    pcc_dtype dtype;
    int rank;
    int dims[PCC_MAX_RANK]; // indices into graph.dims
    int block;              // -1: one instance; else one instance per copy of that block
    int producer;           // op index, or PCC_PROD_* (< 0) when no op makes it
    int of;                 // GRAD/STATE: the tensor it belongs to; else -1
    int grad;               // its gradient tensor, -1 if none
    pcc_init init;          // PARAM
    pcc_data data;          // INPUT
    bool saved;             // forward tensor read by the backward pass (an activation to keep)
    bool frozen;            // PARAM: a constant ("kind": "const", a PyTorch buffer): no gradient, no optimizer
} pcc_tensor;

typedef enum pcc_op_kind {
#define OP(E, name, imin, imax, nout, ann, flags) PCC_OP_##E,
#include "../runtime/ops.def"
#undef OP
    PCC_OP_COUNT
} pcc_op_kind;

enum {
    PCC_OPF_USER = 1 << 0,
    PCC_OPF_INTERNAL = 1 << 1,
    PCC_OPF_ELEMENTWISE = 1 << 2,
    PCC_OPF_MATMUL = 1 << 3,
    PCC_OPF_LOSS = 1 << 4,
    PCC_OPF_INPLACE = 1 << 5,
    PCC_OPF_BCAST = 1 << 6,
    PCC_OPF_RNG = 1 << 7,
};

typedef struct pcc_op_info {
    const char *name;
    int in_min, in_max, nout;
    const char *annotation;
    unsigned flags;
} pcc_op_info;
extern const pcc_op_info pcc_ops[PCC_OP_COUNT];
int op_lookup(const char *name); // -1 if unknown

typedef enum pcc_phase { PCC_PHASE_FWD, PCC_PHASE_BWD, PCC_PHASE_OPT } pcc_phase;

// cross_entropy's attrs.mode: rows labelled attrs.scale (ignore_index) count 0; the sum instead of the mean.
enum { PCC_CE_IGNORE = 1, PCC_CE_SUM = 2 };

// Operator attributes: one struct for all ops; each op reads the fields it documents. scale
// also holds pow's exponent, masked_fill's and ne's value and cross_entropy's ignore_index.
typedef struct pcc_attrs {
    double scale;       // scale: factor; fill: value
    double eps;         // layernorm, rmsnorm, batchnorm
    int64_t ghost_batch; // batchnorm: statistics over each run of this many samples (0: the whole batch)
    double p;           // dropout probability
    int64_t seed;       // dropout
    int axis;           // concat, split, slice (negative counts from the end, normalized on load)
    int64_t start, end; // slice
    int perm[PCC_MAX_RANK]; // transpose; the axis map (1-based; ops.def's last section) of broadcasts and reductions
    int kernel[2], stride[2], pad[2]; // conv2d, maxpool, avgpool
    bool causal;        // attention
    int mode;           // cross_entropy: PCC_CE_* bits; attention: PLAN_ATTN_* (unfused, flash)
    // optimizer (sgd, adamw)
    double lr, beta1, beta2, weight_decay, momentum;
} pcc_attrs;

typedef struct pcc_op {
    pcc_op_kind kind;
    pcc_phase phase;
    int block;          // -1 top level; else the block it belongs to (one instance per copy)
    int fwd;            // backward and optimizer ops: the forward op they come from (-1 if none)
    int nin, nout;
    int *in, *out;      // tensor indices
    pcc_attrs attrs;
    const char *ptr;    // JSON Pointer of the op (for derived ops, of the forward op)
    const char *label;  // the model's "name" for it, or NULL
    bool accumulate;    // adds into its output (gradient accumulation over micro-batches)
} pcc_op;

// A block is written once and stands for `repeat` identical copies in sequence. Its tensors
// (params included) have one instance per copy. Bindings connect copies to the outside:
//   in:    inner tensor <- outer tensor; every copy reads it (or copy 0 only, if it is carried)
//   carry: inner input  <- inner tensor of the previous copy          (.outer holds that inner id)
//   out:   outer tensor <- inner tensor of the last copy
//   acc:   outer tensor <- sum over all copies of an inner tensor      (backward blocks only)
// A backward block (fwd >= 0) runs its copies in reverse order; a reference from it to a forward
// block's tensor means the instance of the same copy.
typedef struct pcc_bind {
    int inner, outer;
} pcc_bind;
typedef struct pcc_block {
    const char *name;
    const char *ptr;
    int64_t repeat;
    int fwd;                 // -1 for a forward block; else the forward block it differentiates
    pcc_bind *in, *carry, *out, *acc;
    int n_in, n_carry, n_out, n_acc;
    int first_op, n_ops;     // its ops are contiguous in graph.ops
} pcc_block;

typedef enum pcc_opt_kind { PCC_OPTIM_SGD, PCC_OPTIM_ADAMW } pcc_opt_kind;
typedef struct pcc_optim {
    pcc_opt_kind kind;
    double lr, beta1, beta2, eps, weight_decay, momentum;
} pcc_optim;

typedef struct pcc_graph {
    pcc_arena *arena;
    const char *file;       // the model file, for diagnostics
    const char *name;
    pcc_dtype dtype;        // default dtype of float tensors
    pcc_dim *dims;          int n_dims, cap_dims;
    pcc_tensor *tensors;    int n_tensors, cap_tensors;
    pcc_op *ops;            int n_ops, cap_ops;   // program order: forward, backward, optimizer
    pcc_block *blocks;      int n_blocks, cap_blocks;
    int loss;               // the scalar loss tensor
    pcc_optim optim;
    int micro_batches;      // gradient accumulation: backward ops with .accumulate add into grads
    int n_fwd_ops;          // ops[0 .. n_fwd_ops) are the forward program
    pcc_symtab dim_names;
} pcc_graph;

pcc_graph *graph_init(pcc_arena *a, const char *file);
int graph_add_dim(pcc_graph *g, const char *name, int64_t size, const char *ptr);
int graph_add_tensor(pcc_graph *g, const pcc_tensor *t);   // copies *t; returns its index
int graph_add_op(pcc_graph *g, pcc_op_kind k, int block, const int *in, int nin, const int *out,
                 int nout, const char *ptr);
int64_t tensor_numel(const pcc_graph *g, const pcc_tensor *t);
double tensor_bytes(const pcc_graph *g, const pcc_tensor *t); // one instance
int64_t tensor_copies(const pcc_graph *g, const pcc_tensor *t); // 1, or its block's repeat
int64_t op_copies(const pcc_graph *g, const pcc_op *op);
// Whether param t is the table of an embedding or embedding_bag: sharded or synchronized every
// step, never trained per replica (--sync background leaves tables synchronous).
bool graph_is_table(const pcc_graph *g, int t);
// Whether the training step synchronizes the gradient of param t where it is replicated: always,
// but under --sync background (bg_dense) only a table's (dense replicas average in the background).
bool graph_step_synced(const pcc_graph *g, int t, bool bg_dense);
// Where forward op i's gradients may share a bucket (preserve.c): a block's copy, or one stretch
// of top-level ops between two blocks; phase 3 closes the open bucket at every loop boundary.
// 0..n_blocks: top-level stretches; n_blocks + 1 + b: block b's copies.
int graph_bucket_segment(const pcc_graph *g, int i);
// Block b's family: itself for a forward block, else the forward block it derives from (its backward and optimizer blocks share its copy numbering).
int graph_block_family(const pcc_graph *g, int b);
// The carry of block bl whose inner input (inner: true) or source (false) is tensor t, or -1.
int graph_carry_of(const pcc_block *bl, int t, bool inner);
// Per forward op, the inputs (bits; its first 64) that a backward op derived from it reads (a weight's gradient reads x).
uint64_t *graph_backward_reads(const pcc_graph *g);
// Whether tensor t is a gradient of a parameter (a contribution to it, or the sum itself), and whether its optimizer reads it.
bool graph_is_param_grad(const pcc_graph *g, int t);
bool graph_is_final_param_grad(const pcc_graph *g, int t);
// Whether gradient contribution t to a parameter may be summed once per step, where its readers
// run on another stage (layout.c's deferred): made by one top-level backward op that does not
// accumulate, read only by accumulating top-level backward sums (which add zeros until it comes).
bool graph_grad_deferrable(const pcc_graph *g, int t);
// The batch: axis 0 of the first input with a shape (-1: none).
int graph_batch_dim(const pcc_graph *g);
// The layers of the forward program, in order: every top-level forward op, and every copy of
// every forward block (what pipeline stages cut and the estimate walks). Can't fail.
typedef struct pcc_layer {
    int op;                 // a top-level forward op, or -1
    int block, copy;        // else a forward block and one of its copies
} pcc_layer;
pcc_layer *graph_layers(const pcc_graph *g, int *n);
// "[B,S,H]" into buf.
char *shape_str(const pcc_graph *g, const pcc_tensor *t, char *buf, size_t n);

/* ---------------------------------------------------------------- ops.c */

// Checks op's tensor shapes against its annotation and shape rule; reports against `where`
// (the op's pointer) and the input's/output's pointer. `src` is the file for diagnostics.
pcc_status op_check_shapes(const pcc_graph *g, const pcc_op *op, const char *src);
// FLOPs of one instance of op (multiply-add = 2).
double op_flops(const pcc_graph *g, const pcc_op *op);
// The part of op_flops that is matrix multiplication (tensor-core work: what Megatron-LM's
// FLOP formula counts); bias adds and everything element-wise are left out.
double op_flops_matmul(const pcc_graph *g, const pcc_op *op);
// The dimension letters of one op instance: for each, the model dimension it binds and its axis
// in every operand (inputs, then outputs; -1 where it does not occur). Variadic groups give one
// letter per dimension ("b.0", "b.1"); operators with their own shape rule get letters from it
// (concat, split, slice: every axis but the joined one; transpose: each axis and where it goes;
// reshape: the major dimension of each split or merged group). A letter's grain is the multiple
// every piece of a split must hold: 1, or a ghost batch norm's group (its batch letter is then
// splittable in whole groups). Returns the count.
#define PCC_MAX_OPERANDS 72
#define PCC_MAX_LETTERS 24
typedef struct pcc_letter {
    char name[16];
    bool reduce, nosplit;
    int dim;
    int64_t grain;      // pieces of a split hold a multiple of this many (1 but for ghost batch norm)
    signed char axis[PCC_MAX_OPERANDS];
} pcc_letter;
int op_letters(const pcc_graph *g, const pcc_op *op, pcc_letter *out);
// Whether l is cross_entropy's (or its gradient's) classes, which only phase 3's vocabulary-parallel
// form splits (compiler/vocab.c).
bool op_vocab_letter(const pcc_op *op, const pcc_letter *l);
// Axis maps (attrs perm of broadcasting and reducing ops, runtime/ops.def's last section): the
// axis of the larger operand (rank big_rank) that axis j of the smaller one (small_rank) is.
int op_map_axis(const pcc_attrs *a, int big_rank, int small_rank, int j);
// Sets a->perm to a map of small's axes into big's: zeros when small is a suffix of big, else
// each axis to big's last unclaimed axis of the same dimension, right to left. False when
// small's dimensions are not a subsequence of big's.
bool op_map_find(const pcc_graph *g, const pcc_tensor *big, const pcc_tensor *small, pcc_attrs *a);
// Clears a->perm when it maps small's axes to big's last ones (the suffix rule's zeros).
void op_map_canon(pcc_attrs *a, int big_rank, int small_rank);
// Bytes read and written by one instance (each operand once).
double op_bytes(const pcc_graph *g, const pcc_op *op);

// Totals over the graph, for the --check report and the memory the phases count: parameter
// elements, FLOPs per step by phase (all copies), and the bytes of weights, gradients,
// optimizer state and kept activations. Can't fail.
typedef struct pcc_totals {
    double params;          // parameter elements
    double flops_fwd, flops_bwd, flops_opt;
    double flops_fwd_matmul, flops_bwd_matmul;
    double bytes_weights, bytes_grads, bytes_optim, bytes_acts;
} pcc_totals;
void graph_totals(const pcc_graph *g, pcc_totals *t);

/* ---------------------------------------------------------------- check.c */

// Verifier, run after every pass: indices in range, every tensor produced once and before it is
// read (in program order, blocks respected), shapes agree with each op's rule, bindings typed
// alike. Returns PCC_ERR_INTERNAL with a message on a broken IR (input errors were caught in
// model.c already, so a failure here is plancc's bug).
pcc_status graph_check(const pcc_graph *g);

/* ---------------------------------------------------------------- model.c */

// Loads and fully checks a model file; builds the forward graph. On bad input reports one
// diagnostic with the file and JSON Pointer and returns PCC_ERR_INPUT; *out is then NULL.
pcc_status model_load(pcc_arena *a, const char *path, pcc_graph **out);

/* ---------------------------------------------------------------- batch.c */

// The batch options (--global-batch, --micro-batch-size, --micro-batches).
typedef struct pcc_batch_opts {
    int64_t global_batch;       // samples per step; 0: as the model file says
    int micro_batch_size;       // samples per micro-batch on each data-parallel replica; 0: not given
    int dp;                     // the template's data parallelism (--dp; 0: not given)
    int micro_batches;          // --micro-batches (1 when not given)
    bool micro_batches_given;
} pcc_batch_opts;

// Sets the model's batch dimension (axis 0 of its first input) to the samples of one micro-batch step over all
// replicas, and o->micro_batches and g->micro_batches:
//   global and size:  micro-batches = global / (size * dp), batch = size * dp
//   global only:      batch = global / micro-batches (as given, default 1)
//   size only:        batch = size * dp, micro-batches as given; o->global_batch is then set to
//                     the samples of the step (what the plan records)
// micro_batches_given says whether o->micro_batches came from --micro-batches (then it must agree). Call it
// after model_load, before graph_check and autodiff. PCC_ERR_INPUT (reported) when the numbers do not divide,
// the model has no batch dimension, or a ghost batch norm's group does not divide the batch so set.
pcc_status batch_apply(pcc_graph *g, pcc_batch_opts *o);
// The batch a micro-batch holds must be a multiple of this: the least common multiple of the
// ghost batch norms' groups over the batch dimension (1 if none). Can't fail.
int64_t batch_grain(const pcc_graph *g);
// Per dimension whether dp cuts it: bdim, the batch (graph_batch_dim), or one a reshape makes of
// it as its major axis (Swin's windows, the Evoformer's MSA rows). Can't fail.
bool *batch_dims(const pcc_graph *g, int bdim);

/* ---------------------------------------------------------------- autodiff.c */

// Appends the backward graph (gradients of the loss with respect to every parameter) and one
// optimizer step per parameter. Repeated blocks stay blocks: the backward of a block is one
// backward block with the same repeat. PCC_ERR_INPUT if the loss depends on no parameter.
pcc_status autodiff(pcc_graph *g);

/* ---------------------------------------------------------------- cluster.c */

typedef enum pcc_link_kind { PCC_LINK_NVLINK, PCC_LINK_PCIE, PCC_LINK_SHM, PCC_LINK_INFINIBAND, PCC_LINK_ETHERNET, PCC_LINK_NONE } pcc_link_kind;

// Peak FLOP/s by operand dtype; tf32 is f32 matrix products on tensor cores.
typedef enum pcc_math { PCC_MATH_F32, PCC_MATH_TF32, PCC_MATH_BF16, PCC_MATH_F16, PCC_MATH_COUNT } pcc_math;

typedef struct pcc_link {
    pcc_link_kind kind;
    double bandwidth_Bps;   // per device (intra) or per NIC (network), one direction
    double latency_s;       // per hop
    double efficiency;      // NCCL's bus bandwidth / bandwidth_Bps, in (0, 1]; 0: not given (1)
} pcc_link;

// A table of measured operator times (cluster file "profile"), opaque outside cluster.c.
typedef struct pcc_profile pcc_profile;

// FlashAttention-2's published forward + backward throughput (cluster device "flash_benchmark"):
// rows[r].tflops[i], by its own FLOP count, at key length seq[i], head size and causal of row r.
#define PCC_FLASH_MAX 8
typedef struct pcc_flash_table {
    int n_seq, n_rows; // 0: the file gives none
    double seq[PCC_FLASH_MAX];
    struct { int head_dim; bool causal; double tflops[PCC_FLASH_MAX]; } rows[PCC_FLASH_MAX];
} pcc_flash_table;

typedef struct pcc_cluster {
    const char *file, *name;
    bool cpu;                       // device.kind "cpu": ranks of planrun's cpu backend
    int nodes, devices_per_node;    // after --nodes / --devices
    int n_devices;                  // nodes * devices_per_node (or the --devices count)
    const char *device_name;
    double memory_bytes;            // per device
    double memory_bandwidth_Bps;    // per device
    double peak_flops[PCC_MATH_COUNT]; // a dtype the file leaves out runs at the f32 figure
    bool tf32;                      // plancc --tf32: f32 matrix products on tensor cores (planrun --tf32)
    double launch_overhead_s;       // 0 if the file gives none (the cost model has a default)
    int sm_count;                   // GPU multiprocessors, for the GEMM wave model; 0: no wave model
    double gemm_efficiency;         // fraction of the tensor peak a large GEMM sustains; 0: not given (1)
    double memory_efficiency;       // fraction of memory bandwidth a streaming kernel sustains; 0: (1)
    double flash_efficiency;        // fraction of the tensor peak FlashAttention-2's forward sustains; 0: not given (cost.c)
    pcc_flash_table flash;          // FA2's benchmark by shape; wins over flash_efficiency (cost.c)
    int n_tiles;                    // GEMM thread-block tiles (device "gemm_tiles"); 0: cost.c's cuBLAS set
    struct { int m, n; double rate; } tiles[PCC_FLASH_MAX]; // rate: relative to the fastest tile
    pcc_link intra;                 // between the devices of a node
    pcc_link network;               // between nodes (kind NONE on a single-node cluster)
    int nics_per_node;
    const pcc_profile *profile;     // measured operator times, or NULL
    const char *gemm_efficiency_source;   // the file's sources["/device/gemm_efficiency"], or NULL
    const char *memory_efficiency_source; // the file's sources["/device/memory_efficiency"], or NULL
    const char *flash_source;             // the file's sources["/device/flash_benchmark"], or NULL
    // Node groups ("groups": e.g. A100 nodes and H100 nodes in one job). With one group (the file's
    // one device and node) groups is NULL and the cluster is its own view. With several, the fields
    // above are the worst group's figures (least memory and peak, slowest links: what holds on every
    // group) and groups[i] is group i's own view, ranks group_first[i] .. group_first[i+1]-1 (ranks
    // numbered node by node, group by group); every cost function takes a view as it is.
    int n_groups;
    struct pcc_cluster *groups;
    int *group_first;               // [n_groups + 1]
} pcc_cluster;

// Loads and checks a cluster file (schemas/cluster.schema.json) with the same diagnostics as the
// model loader. nodes > 0 overrides the file's node count; devices > 0 sets the total device
// count (a whole number of nodes, or fewer devices than one node; a cpu cluster takes any count
// as one node). Both 0: as the file says. A "profile" (a file named relative to the cluster
// file, or an object in it) is loaded and checked too; its diagnostics name the file that holds
// it. Returns PCC_ERR_INPUT on bad input or overrides.
pcc_status cluster_load(pcc_arena *a, const char *path, int nodes, int devices, pcc_cluster **out);
// The view of the group that holds ranks lo .. hi-1 (the cluster itself when it has one group),
// or NULL when they span two groups. Can't fail.
const pcc_cluster *cluster_span_view(const pcc_cluster *c, int lo, int hi);
// The view of pipeline stage d of pp (pp is the mesh's outermost axis: stage d holds ranks
// d * N/pp .. (d+1) * N/pp - 1), or NULL when those ranks span two groups. Can't fail.
const pcc_cluster *cluster_stage_view(const pcc_cluster *c, int pp, int d);
// Whether every stage of pp lies inside one group. Can't fail.
bool cluster_stages_fit(const pcc_cluster *c, int pp);
// plancc --tf32 on the cluster and every group's view. Can't fail.
void cluster_set_tf32(pcc_cluster *c, bool tf32);
// The measured seconds of `key` (cost.c builds the keys: "gemm|bf16|b1|m2048|n3200|k25600" or
// "layernorm|bf16|2048x25600,25600,25600"), or -1 when the table has no such entry or p is NULL.
double profile_lookup(const pcc_profile *p, const char *key);
// Entries in the table (0 for NULL).
int profile_size(const pcc_profile *p);

/* ---------------------------------------------------------------- cost.c */

/* The cost model behind one interface: the scheduler, the step-time estimate (estimate.c) and
 * the reports ask it for times. Compute is a roofline over the cluster's datasheet figures with
 * a shape-dependent GEMM efficiency (cuBLAS tile and wave quantization, main-loop depth) and
 * the sustained fractions the cluster file gives; memory-bound operators stream at the
 * sustained memory bandwidth; each kernel pays a launch. A profile table in the cluster file
 * overrides both for the shapes it lists. Collectives are NCCL's ring and (across nodes, for
 * all-reduce) tree algorithms in the alpha-beta model over the bus bandwidth of the slowest link
 * of the group. Pipelines and stream overlap have their own helpers. */

// The collectives: runtime/colls.def's rows, in order. A plan stores the value (plan.h's
// plan_coll, from the same table, has the same codes).
typedef enum pcc_coll {
#define COLL(E, name, pieces, shards, inplace, roots) PCC_COLL_##E,
#include "../runtime/colls.def"
#undef COLL
    PCC_COLL_COUNT
} pcc_coll;
_Static_assert((int)PCC_COLL_COUNT == (int)PLAN_COLL_COUNT && (int)PCC_COLL_BROADCAST == (int)PLAN_COLL_BROADCAST,
               "pcc_coll and plan_coll are colls.def's rows");
extern const char *const pcc_coll_names[PCC_COLL_COUNT]; // colls.def's names, in order (cost.c)

// A group of `size` devices whose ranks are base + i * stride (the shape every mesh axis has).
typedef struct pcc_group_shape {
    int size, stride;
} pcc_group_shape;

// Seconds for `flops` of arithmetic moving `bytes` of memory on one device, in the given dtype;
// `matmul` work runs at the tensor-core peak times the sustained GEMM efficiency, the rest at
// the vector (f32) peak; bytes at the sustained memory bandwidth; plus one launch. No shape, so
// no quantization effects: for aggregated work (cost_op_s and cost_gemm_s know shapes).
// The device's peak FLOP/s for operators of dtype dt: matrix products (matmul) at the tensor-core
// rate of dt (TF32 for f32 under --tf32), everything else at the f32 rate. Can't fail.
double cost_peak_flops(const pcc_cluster *c, pcc_dtype dt, bool matmul);
double cost_compute_s(const pcc_cluster *c, double flops, double bytes, pcc_dtype dt, bool matmul);
// Fraction of the tensor-core peak a GEMM of `batch` independent m x n x k products reaches:
// the sustained large-GEMM efficiency times tile quantization (m, n padded to cuBLAS's tile),
// wave quantization (tiles over sm_count multiprocessors) and the main loop's depth k/(k+k0).
// In (0, 1]. Without sm_count in the cluster, the sustained figure alone.
double cost_gemm_efficiency(const pcc_cluster *c, double batch, double m, double n, double k);
// Fraction of the 16-bit tensor peak FlashAttention-2's forward reaches at head size d and key
// length t (causal or not): the cluster's flash_benchmark, interpolated in log t and log d (clamped
// to its ends), else flash_efficiency, else gemm_efficiency x FA2's A100 ratio to cuBLAS.
double cost_flash_efficiency(const pcc_cluster *c, double d, double t, bool causal);
// Seconds of one GEMM call (batched when batch > 1) in dtype dt: the profile table's time for the
// shape if it has one, else max(FLOPs at the efficiency above, operand bytes at the sustained
// bandwidth) plus a launch. `accumulate` adds into C (beta = 1), which reads C once more.
double cost_gemm_s(const pcc_cluster *c, pcc_dtype dt, double batch, double m, double n, double k, bool accumulate);
// Seconds of a memory-bound kernel moving `bytes` (read plus written), with its launch.
double cost_memory_s(const pcc_cluster *c, double bytes);
// Seconds of one instance of op on one device when axis a of its operand k (inputs, then
// outputs) is split ways[k][a] ways (ways NULL: the whole op; ways[k] NULL: operand k whole).
// Matrix products run as GEMMs of their per-device shape; attention runs unfused (two batched
// GEMMs around a softmax over the materialized s x s scores, the backward recomputing the scores
// as planrun's kernels do); everything else is a roofline of its FLOPs and bytes. The profile table overrides the whole op for its per-device input shapes
// (and a GEMM inside one for its m, n, k). This function can't fail.
double cost_op_s(const pcc_cluster *c, const pcc_graph *g, const pcc_op *op, const int *const *ways);
// Seconds for one collective over a group, `bytes` being the full tensor each member ends with
// (all-reduce, all-gather, broadcast), starts with (reduce-scatter), or sends in all
// (all-to-all, send/recv). Ring algorithm with alpha per step over the bus bandwidth of the
// slowest link; an all-reduce across nodes takes NCCL's tree instead where that is faster.
double cost_collective_s(const pcc_cluster *c, pcc_coll kind, double bytes, pcc_group_shape g);
// The bytes cost_collective_s takes for a collective from in_bytes to out_bytes per rank: the
// whole value an all-reduce, all-gather or broadcast ends with, else the piece it starts from.
double cost_coll_bytes(pcc_coll kind, double in_bytes, double out_bytes);
// Vocabulary-parallel cross-entropy's statistics (compiler/vocab.c: 3 f32 numbers a row), `rows`
// rows on each of `ways` ranks, all-gathered over group g (no launch).
double cost_vocab_stats_s(const pcc_cluster *c, double rows, int ways, pcc_group_shape g);
// One gradient's share of a bucketed collective (preserve.c's --bucket-mb buckets): `bytes` of it
// travel with others, `pool` bytes in all being ready to share buckets of up to bucket_bytes,
// so that each bucket's time (latency and launch included) is split by bytes among its members.
// A gradient as large as its bucket, or bucket_bytes 0, takes a collective of its own.
double cost_bucketed_s(const pcc_cluster *c, pcc_coll kind, double bytes, double pool, double bucket_bytes,
                       pcc_group_shape g);
// Bytes per second one member of the group can move (NCCL's bus bandwidth): NVLink inside a
// node, its share of the node's NICs across nodes, each times its link efficiency.
double cost_group_bandwidth(const pcc_cluster *c, pcc_group_shape g);
// Fixed cost of issuing one kernel or collective call (launch_overhead_s, or a few microseconds).
double cost_launch_s(const pcc_cluster *c);
bool cost_group_crosses_nodes(const pcc_cluster *c, pcc_group_shape g);
// Ranks a + x to b + x for every x < w (two pipeline stages) as one pair: the network's if any crosses nodes.
pcc_group_shape cost_pair_shape(const pcc_cluster *c, int64_t a, int64_t b, int w);
// Overlap of two streams: the part of `comm_s` on a second stream that `window_s` on the first does not hide.
double cost_exposed_s(double comm_s, double window_s);
// A micro-batch pipeline over pp devices, device d taking fwd[d] and bwd[d] seconds per
// micro-batch (all of its v model chunks together, transfers included), m micro-batches, v
// virtual stages per device (1: GPipe or 1F1B; v > 1: Megatron's interleaved 1F1B). Returns the
// time from the first forward to the last backward:
//   m * max_d(f+b) + (sum_d (f+b) - max_d (f+b)) / v
// which is (m + (pp-1)/v) (f+b) for equal stages; *bubble_s (if not NULL) gets the part beyond
// m * max_d (f+b): the fill and drain.

/* ---------------------------------------------------------------- transform.c */

/* Phase 1, model transformation: for every forward operator, the ways to run it on n devices.
 * A candidate splits one dimension letter of the operator's annotation n ways (or replicates
 * it: n = 1 on a group of size 1, or "replicate" on a larger group), and may recompute the
 * operator in the backward pass. The backward operators derived from a forward operator follow
 * its choice. Each candidate carries per-device FLOPs, parameter and activation bytes, and the
 * layout of every operand. */

// nnScaler's RVD layout of a tensor on a group of devices: r replicas, v partial-sum parts, and
// d[i] pieces along dimension i; r * v * prod(d) = the group size.
typedef struct pcc_layout {
    int r, v;
    int d[PCC_MAX_RANK];
    uint8_t ax[2];      // on a 2-D group (--tp2): each axis's part, major then minor, as plan_shard's map says it
} pcc_layout;

typedef struct pcc_cand {
    int dim;                // the model dimension split (index into graph.dims), -1: replicated
    char letter[16];        // the annotation letter it is ("" when replicated)
    int ways;               // pieces along it (1 when replicated)
    int dim2, ways2; char letter2[16]; // --tp2: a letter over the group's minor axis (dim2 -1: none); ways: the major's
    bool recompute;         // forward recomputed in the backward pass; its kept activations dropped
    double flops;           // per device, forward + backward (+ the recomputed forward)
    double flops_matmul;    // the matmul share of flops
    double param_bytes;     // per device: the parameters it reads, split or whole
    double act_bytes;       // per device: its outputs the backward pass keeps
    pcc_layout *in, *out;   // layout of each operand (nin, nout)
} pcc_cand;

typedef struct pcc_op_cands {
    int op;                 // forward op index
    pcc_cand *c;
    int n;
} pcc_op_cands;

typedef struct pcc_transform {
    int devices;            // the group size the candidates are for
    int minor;              // > 1: the group is devices/minor x minor, with two-letter candidates (--tp2)
    pcc_op_cands *ops;      // one per forward op, in op order
    int n_ops;
} pcc_transform;

// Enumerates the candidates of every forward op of g (after autodiff) on a group of `devices`.
// Splits need the dimension's size divisible by the ways; a group of 1 has the one trivial
// candidate (and its recomputed twin where recompute applies). This function can't fail on a
// checked graph. minor > 1: also every pair of letters, over the major axis (devices/minor) and the minor.
pcc_transform *transform(const pcc_graph *g, int devices, int minor);
// Phase 1 for every group size the search asks for (search_group_sizes), in the order given.
typedef struct pcc_transforms { int n; pcc_transform **t; } pcc_transforms;
pcc_transforms *transform_all(const pcc_graph *g, const int *sizes, int n, int minor);
// The candidates on a group of `devices`, or NULL when phase 1 did not make them.
const pcc_transform *transform_find(const pcc_transforms *ts, int devices);
// The layout input k's gradient comes back in: the input's where the op splits it, partial sums
// where it splits a letter the input lacks (the ILP and the estimate price its way home).
pcc_layout transform_grad_in(const pcc_cand *c, int k);
// Writes the candidates in a fixed text form (one op per line group), for -d t and tests.
void transform_dump(FILE *f, const pcc_graph *g, const pcc_transforms *ts);

/* ---------------------------------------------------------------- reshard.c */

/* Resharding: the collectives that turn a tensor's layout into another. For the scheduler, the
 * cheapest chain of steps between two layouts of a tensor on one group (nnScaler's intra-RVD
 * search, reshard_rvd). Steps, each changing one factor:
 *   D->R all-gather, V->R all-reduce, V->D reduce-scatter, D->D all-to-all (between two dims),
 *   R->D local slice, R->V local scale (no communication).
 * The search is Dijkstra over all layouts of the tensor on the group, with the cost model's
 * time per step plus a launch per collective, so that a chain of small collectives does not win
 * over one bigger one only by the alpha-beta model's count of ring hops. For phase 3, the chain
 * over the mesh axes that it emits (reshard_steps). */

typedef enum pcc_step_kind {
    PCC_STEP_ALL_GATHER, PCC_STEP_ALL_REDUCE, PCC_STEP_REDUCE_SCATTER, PCC_STEP_ALL_TO_ALL,
    PCC_STEP_SLICE, PCC_STEP_SCALE, PCC_STEP_KIND_COUNT
} pcc_step_kind;
extern const char *const pcc_step_names[PCC_STEP_KIND_COUNT];

#define PCC_MAX_STEPS 12
typedef struct pcc_reshard {
    int n_steps;
    struct {
        pcc_step_kind kind;
        int dim, dim_to;    // the dimension split or gathered (all-to-all: from dim to dim_to)
        int k;              // the factor: devices taking part in each collective
        double bytes;       // collective size as cost_collective_s takes it (0 for local steps)
        double seconds;     // the collective's time and its launch (local steps: 0)
    } step[PCC_MAX_STEPS];
    double seconds;         // total
} pcc_reshard;

// The cheapest way from `from` to `to` for tensor t on a group of `grp.size` devices (both
// layouts multiply out to it). Fills *path when non-NULL. Returns the time in seconds, 0 when
// the layouts are equal, or -1 when no chain exists (a split that does not divide a dimension).
double reshard_rvd(const pcc_cluster *c, const pcc_graph *g, const pcc_tensor *t, const pcc_layout *from,
                   const pcc_layout *to, pcc_group_shape grp, pcc_reshard *path);
// The same on a 2-D group (minor > 1: size/minor x minor), its chains by axis as phase 3 makes them.
double reshard_rvd_2d(const pcc_cluster *c, const pcc_graph *g, const pcc_tensor *t, const pcc_layout *from,
                      const pcc_layout *to, pcc_group_shape grp, int minor, pcc_reshard *path);
// "R2V1D(4,1)" into buf.
char *layout_str(const pcc_layout *l, int rank, char *buf, size_t n);
// Phase 3's resharding chain from layout `from` to `to` of a tensor of rank `rank`: collectives
// undoing splits from the least significant axis up (a dimension's gathers in a row as one over
// their axes), then at most one local slice. Returns the count (0 when equal; <= PCC_AXES + 1).
typedef struct pcc_reshard_step {
    int kind;           // a pcc_coll, or -1: the local slice to what is left
    unsigned axes;      // the mesh axes (bits) of the collective's group (0: the slice)
    plan_shard after;   // the layout after the step
} pcc_reshard_step;
int reshard_steps(plan_shard from, plan_shard to, int rank, pcc_reshard_step *steps);

/* ---------------------------------------------------------------- glpk.c */

/* A mixed-integer program builder and one GLPK solve (GLPK never leaves glpk.c), and the
 * progress line of a long compile. */
typedef struct pcc_mip pcc_mip;
typedef enum pcc_mip_sense { PCC_MIP_EQ, PCC_MIP_LE, PCC_MIP_GE } pcc_mip_sense;
typedef enum pcc_mip_status {
    PCC_MIP_OPTIMAL, PCC_MIP_GAP, PCC_MIP_TIME_LIMIT, // a solution (proven, within the gap, best so far)
    PCC_MIP_INFEASIBLE, PCC_MIP_NO_SOLUTION, PCC_MIP_ERROR,
} pcc_mip_status;
typedef struct pcc_mip_opts {
    double time_limit_s;    // > 0
    double mip_gap;         // relative, in [0, 1)
    bool progress;          // with no driver's progress line on, a line of its own on a terminal
    const char *dump_lp;    // write the model as CPLEX LP text here first (NULL: no)
    bool relax_only;        // solve only without the relaxable row; flag an answer that breaks it
} pcc_mip_opts;
typedef struct pcc_mip_result {
    pcc_mip_status status;
    double objective, bound, gap, seconds;
    int rows, cols, nonzeros;
    double *x;              // column values (when there is a solution)
    bool reused;            // from the memo: the same program was solved before in this process
    bool relaxed;           // answered by the program without its relaxable row (mip_relax_row)
    bool row_violated;      // ... with relax_only: that answer breaks the row (it is not the program's)
} pcc_mip_result;
// What the solves of this process cost: GLPK runs, answers from the memo, answers by a relaxation.
typedef struct pcc_ilp_counts {
    int solves, reused, relaxed;
    double seconds;         // inside GLPK
} pcc_ilp_counts;

// A program to build; its solutions' columns go into arena a. mip_free releases it (NULL too).
pcc_mip *mip_init(pcc_arena *a);
void mip_free(pcc_mip *p);
// Columns and rows get names (kept, not copied: arena strings; NULL: none) so --dump-ilp reads well.
int mip_add_col(pcc_mip *p, const char *name, bool binary, double lo, double hi, double cost);
int mip_add_row(pcc_mip *p, const char *name, pcc_mip_sense sense, double rhs);
void mip_set(pcc_mip *p, int row, int col, double coef);
// Marks a row (a budget) that the solve first leaves out: if the optimum without it satisfies
// it, that is the answer, and the program without it is remembered for every other budget.
void mip_relax_row(pcc_mip *p, int row);
int mip_cols(const pcc_mip *p);
int mip_rows(const pcc_mip *p);
// Solves; PCC_ERR_INPUT for bad parameters or an unwritable dump file; otherwise PCC_OK with
// the outcome in r->status (the caller decides what an infeasible model means). A program
// identical to one solved before in this process (same columns, rows, coefficients and gap)
// gets that solve's answer again (r->reused): every distinct program is solved once.
pcc_status mip_solve(pcc_mip *p, const pcc_mip_opts *o, pcc_mip_result *r);
// The solves so far in this process. Can't fail.
const pcc_ilp_counts *mip_counts(void);
// Frees the memo (at exit; the next solve starts an empty one). Can't fail.
void mip_memo_free(void);
const char *mip_status_name(pcc_mip_status s);

// The progress line of a long compile: one line on stderr, redrawn in place, with the phase and,
// during an ILP solve, its size, incumbent, bound and gap. progress_init(on) turns it on when
// `on` and stderr is a terminal (the driver passes !quiet); nothing is drawn in the first quarter
// second. progress_phase sets the phase text; progress_clear erases the line (call it before
// printing to stderr or to a terminal stdout; the next update draws it again); progress_done
// erases it and turns it off. Without a terminal these print nothing. None can fail.
void progress_init(bool on);
void progress_phase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void progress_clear(void);
void progress_done(void);

/* ---------------------------------------------------------------- ilp.c */

/* Phase 2, space-time scheduling, its intra-operator part (Alpa's formulation): one candidate
 * per forward operator on a group of devices, minimizing compute + gradient synchronization +
 * resharding on every producer->consumer edge (forward and backward), under a memory limit per
 * device. A repeated block is in the program once, its costs weighted by the repeat count, and
 * its carried state an edge from one copy to the next. When the program would be large,
 * cheap element-wise operators follow their producer (no variables of their own). */

typedef struct pcc_intra_opts {
    pcc_group_shape group;  // the devices the operators are split over
    int group_minor;        // > 1: the group is 2-D, group.size/minor x minor (--tp2)
    double memory_bytes;    // per device budget
    // What the candidates' bytes (parameters, and kept activations of the group's whole batch
    // for one micro-batch) cost a device: param_scale bytes per parameter byte (0: the model's
    // weights + gradients + optimizer state; ZeRO and pipeline stages shrink it), act_scale
    // bytes per activation byte (0: 1; data parallelism shrinks it, micro-batches in flight grow it).
    double param_scale, act_scale;
    // --sync background: a replicated dense parameter's gradient sync runs in the background
    // (bgsync.c), out of the objective; ZeRO-3 gathers every parameter whole for each reader.
    bool bg_dense, zero3;
    double bucket_bytes;    // gradients share collectives of up to this (--bucket-mb); 0: one each
    double follow_above_cols; // element-wise ops follow their producer when the program would have more columns (0: 50,000)
    pcc_mip_opts ilp;
    bool quiet;             // an infeasible program returns PCC_ERR_INFEASIBLE without a message
} pcc_intra_opts;

typedef struct pcc_intra {
    const pcc_transform *t;
    int *choice;            // per forward op (index into t->ops[i].c)
    const char **cause;     // per forward op: why ("ilp", "follow:/ops/3")
    int *leader;            // per forward op: the op whose ILP variable decides it (itself if none)
    int **follow;           // per forward op: its candidate for each of its leader's candidates
    pcc_mip_result ilp;
    double compute_s, sync_s, reshard_s; // per device per step, at the choice
    double memory_bytes;    // per device at the choice
} pcc_intra;

// Returns PCC_ERR_INFEASIBLE (with a message saying what would fit) when no choice fits memory.
pcc_status ilp_intra(const pcc_graph *g, const pcc_cluster *c, const pcc_transform *t, const pcc_intra_opts *o,
                       pcc_intra **out);
// How many ILPs of this process ended without a solution: ilp_intra says the first on stderr
// and counts the rest (a search's summary reports them).
int ilp_unsolved(void);
// The ILP's objective for a given choice (one candidate index per forward op), computed
// directly rather than by the solver; *memory gets the choice's bytes per device. -1 when an
// edge of the choice has no resharding chain. (For tests, and to cost a template's choice.)
double ilp_eval(const pcc_graph *g, const pcc_cluster *c, const pcc_transform *t, const pcc_intra_opts *o,
                  const int *choice, double *memory);
// The communication of a choice per forward op (t's order), for the step-time estimate:
// fwd_s[i] the resharding of op i's inputs in the forward pass, bwd_s[i] that of their gradients
// and of the inputs its backward reads again, both summed over its copies (per micro-batch); sync_s[i]
// the all-reduce of the gradients of the parameters it replicates over the group (all copies).
// Arrays of t->n_ops. Evaluated on g as given (the caller may pass a graph whose batch dimension
// is one data-parallel replica's). This function can't fail.
void ilp_op_comm(const pcc_graph *g, const pcc_cluster *c, const pcc_transform *t, const pcc_intra_opts *o,
                   const int *choice, double *fwd_s, double *bwd_s, double *sync_s);
// The choice per operator with its cause, and the ILP's figures.
void ilp_dump(FILE *f, const pcc_graph *g, const pcc_intra *s);

/* ---------------------------------------------------------------- search.c */

/* Phase 2, the search: how the devices factor into pp x dp x tp (tp varying fastest, so a
 * tensor-parallel group stays inside a node), which layers each pipeline stage runs, and the
 * split of every operator along the dp and tp axes (the tp split from the intra-operator ILP
 * of ilp.c on the tp group). A template (--dp --tp --pp) gives one strategy; --auto every
 * factorization the ILP fits, ranked by the cost model's step time (estimate.c). */

typedef enum pcc_recompute { PCC_RECOMPUTE_NONE, PCC_RECOMPUTE_FULL, PCC_RECOMPUTE_AUTO } pcc_recompute;
typedef enum pcc_pipe_sched { PCC_PIPE_GPIPE = 1, PCC_PIPE_1F1B = 2 } pcc_pipe_sched; // plan_schedule's values

// One point of --auto's search space (search.c enumerates them, bestfirst.c searches them): the
// mesh, the virtual stages (1: plain), the ZeRO stage, whether the ILP may split the batch over tp
// too, and the recompute candidates the ILP gets (auto: its choice under memory; none; full:
// every block operator recomputed, Megatron-LM's activation checkpointing).
typedef struct pcc_config {
    int pp, dp, tp, v, zero;
    int cp;                     // context parallelism (the template's --cp; 0 or 1: none)
    int tq;                     // the tp group's minor axis (--tp2; 0 or 1: one axis)
    bool cp_ring;               // ... in ring attention's form (--cp-form ring; preserve.c), else DeepSpeed-Ulysses'
    bool cp_zigzag;             // ... the ring over the sequence in zigzag order (--cp-form zigzag; implies cp_ring)
    bool btp;
    bool sp;                    // Megatron-LM's sequence parallelism over tp (search.c, seq_keeps)
    pcc_recompute rc;
    double budget;              // the share of a device's memory the ILP's memory model may fill (0: all)
    int round;                  // times the memory planner found it too large (bestfirst.c's tighten)
    bool late;                  // ZeRO-3 without its prefetch (--prefetch none): --auto's last remedy
} pcc_config;

typedef struct pcc_search_opts {
    int dp, tp, pp;             // 0: not given (auto)
    int cp;                     // --cp: context parallelism, DeepSpeed-Ulysses' form (0 or 1: none; search.c, cp_letter)
    int tq;                     // --tp2: the tp group as tp/tq x tq, its operators split along up to two letters
    bool cp_ring;               // --cp-form ring: ring attention instead (preserve.c)
    bool cp_zigzag;             // --cp-form zigzag: ring attention over the sequence in zigzag order (with cp_ring)
    bool auto_mesh;             // search the factorizations (--auto, the default without --dp/--tp/--pp)
    int zero;                   // 0..3
    pcc_recompute recompute;
    pcc_pipe_sched schedule;    // 0: 1F1B when pp > 1
    int virtual_stages;         // model chunks per pipeline device (interleaved 1F1B); 0 or 1: none
    bool bg_dense;              // --sync background: dense replicas are averaged off the step (pcc_intra_opts)
    bool tp_batch;              // the template's ILP may split the batch over tp too (--tp-batch; implied by bg_dense)
    bool sequence_parallel;     // Megatron-LM's sequence parallelism over tp (--sequence-parallel; search.c, seq_keeps)
    bool zero3_late;            // --prefetch none: ZeRO-3 gathers a block copy's parameters at its start, not a layer ahead
    double bucket_bytes;        // --bucket-mb in bytes: the estimate's gradient buckets (0: one collective each)
    pcc_mip_opts ilp;
    bool quiet;                 // an infeasible search returns PCC_ERR_INFEASIBLE without a message
    bool whole;                 // --check: no mesh; the ILP alone, on all the devices as one group
    const pcc_config *pick;     // --auto: build this configuration only (the driver's search chose it)
    double deadline_s;          // clock_cpu_s() when the search's time budget is spent (0: none)
    const struct pcc_preserve_opts *preserve; // phase 3's options, for the memory planner's figure
    const struct pcc_policy *policy; // --policy: pins on the mesh, the splits, recompute and stages (policy.c), or NULL
    double fit_memory_bytes;    // what must fit a device (0: the cluster's memory)
    double beat_s;              // --auto's co-shard round (driver_coshard): only what beats this estimate, no full recompute
} pcc_search_opts;

// The estimate of one training step (estimate.c), on the cost model (cost.c), and its parts. The
// per-device parts are those of the busiest pipeline device (the most seconds per micro-batch),
// summed over the step's micro-batches.
typedef struct pcc_estimate {
    double step_s;              // one training step: the pipeline, then sync and optimizer
    double pipeline_s;          // first forward to last backward, bubbles included
    double bubble_s;            // of which the pipeline's fill and drain
    double compute_s;           // operators, the recomputed forward included
    double tp_comm_s;           // resharding collectives inside the tensor-parallel group
    double p2p_s;               // pipeline sends (activations, gradients, tied parameters' gradients)
    double sync_s;              // gradient synchronization of the slowest device (dp, ZeRO, tp-replicated)
    double sync_exposed_s;      // the part of it the last backward pass does not hide
    double optimizer_s;         // the optimizer step (with ZeRO's parameter all-gather after it)
} pcc_estimate;

// The mesh axes, slowest first (Megatron-LM's rank order: tp fastest, then cp, dp, pp; with --tp2, tp's
// minor axis TQ after it). A plan without cp (tp2) leaves that axis out of its mesh (handoff.c, hand_off).
enum { PCC_AX_PP, PCC_AX_DP, PCC_AX_CP, PCC_AX_TP, PCC_AX_TQ, PCC_AXES };

#define PCC_STAGE_ALL (-3) // an interlaced operator's stage: every stage (pcc_strategy.interlaced)
enum { PCC_IL_PRE = 1, PCC_IL_MID, PCC_IL_POST }; // the phases of interlaced operators (pcc_values.ilphase)

typedef struct pcc_strategy {
    int mesh[PCC_AXES];         // pp, dp, cp, tp, tq (tp's group: mesh[TP] x mesh[TQ], strategy_tp)
    int micro_batches;          // the graph's
    pcc_pipe_sched schedule;
    int zero;
    int batch_dim;              // the model dimension data parallelism splits (-1: none found)
    int seq_dim;                // the sequence, which context parallelism splits (-1: no cp)
    // Per forward op: the letter (index into op_letters) split along dp, cp and tp, -1 none;
    // whether it is recomputed in the backward pass; why (for plandump's notes).
    int *letter[PCC_AXES];
    bool *recompute;
    const char **cause;
    // Pipeline stages: per forward top-level op its stage; per forward block, per copy. With
    // virtual stages these are model chunks, 0..pp*V-1, chunk c on pipeline device c mod pp.
    int *op_stage;              // per op (forward ops only; -1 for block ops)
    // Per forward op: interlaced (a policy's "stage": "all"): a top-level operator that runs on
    // every pipeline stage, its tp letter split over pp x tp, outside the stages' schedule
    // (layout.c, preserve.c's interlaced); NULL: none.
    bool *interlaced;
    int **copy_stage;           // per block (forward blocks), [repeat]
    int virtual_stages;         // model chunks per device (1: plain GPipe/1F1B; > 1: interleaved)
    bool bg_dense;              // planned for --sync background (the ILP and estimate leave dense syncs out)
    bool zero3_late;            // ZeRO-3's gathers at each block copy's start, none a layer ahead (pcc_search_opts)
    double bucket_bytes;        // gradient bucket size the estimate assumes (pcc_search_opts)
    double est_step_s;          // the cost model's estimate of one step (est.step_s)
    pcc_estimate est;           // ... and its parts
    double est_memory_bytes;    // the largest stage's memory per device: the planner's peak if memory_planned, else the ILP's
    bool memory_planned;        // est_memory_bytes is the memory planner's (memplan_strategy_peak)
    const pcc_intra *intra;     // the tp group's ILP and its choice (status OPTIMAL with 0 rows when tp = 1)
    pcc_config config;          // what it was built from
    bool exact;                 // its ILP answer is the ILP's (not a probe's that breaks the memory row)
    double est_even_s;          // node groups: the estimate were the stages cut by FLOPs instead (hetero.c); else 0
    const double *run_credit[2]; // per forward op: what phase 3's buckets save it a pass (estimate_runs); NULL: none
} pcc_strategy;
static inline int strategy_tp(const pcc_strategy *s) { return s->mesh[PCC_AX_TP] * s->mesh[PCC_AX_TQ]; } // the tp group's size

// The tensor-parallel group sizes the search will try for the options (the ones phase 1 must
// make candidates for): the template's tp, every tp of --auto's meshes, all the devices for
// o->whole; in ascending order, *n of them (0 for a template that does not multiply out to the
// devices: the search says why). Can't fail.
int *search_group_sizes(const pcc_graph *g, const pcc_cluster *c, const pcc_search_opts *o, int *n);
// "pp 2 x dp 2 x tp 2, 1f1b, 4 micro-batches" into buf.
char *strategy_str(const pcc_strategy *s, char *buf, size_t n);

// --auto's configurations on one graph (a micro-batch count), for bestfirst.c: space_init
// enumerates them (t: phase 1's candidates for search_group_sizes' sizes); space_bound is a
// lower bound on a configuration's estimated step that needs no ILP; space_build its strategy
// (probe: the ILP without its memory row; the strategy's `exact` says whether that was the
// ILP's answer). space_build returns PCC_ERR_INFEASIBLE when the ILP finds nothing.
typedef struct pcc_space pcc_space;
pcc_space *space_init(const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, const pcc_search_opts *o);
int space_count(const pcc_space *s);
const pcc_config *space_config(const pcc_space *s, int i);
const pcc_graph *space_graph(const pcc_space *s);
const pcc_cluster *space_cluster(const pcc_space *s);
double space_bound(const pcc_space *s, int i);
// A tighter lower bound, from the cost model's times of every operator's cheapest candidate on
// the mesh (estimate_floor, computed once per dp and tp). Can't fail.
double space_floor(pcc_space *s, const pcc_config *k);
pcc_status space_build(const pcc_space *s, const pcc_config *k, bool probe, pcc_strategy **out);
// What search() returns when --auto has nothing (last: PCC_OK when no factorization is possible,
// else the search's status): PCC_ERR_INFEASIBLE, with a message unless o->quiet.
pcc_status space_no_fit(const pcc_space *s, pcc_status last);
// search() for everything but --auto's own search (o->whole, a template, or the driver's pick):
// one strategy, built alone.
pcc_status space_one(const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, const pcc_search_opts *o,
                     pcc_strategy ***out, int *n);

/* ---------------------------------------------------------------- hetero.c */

// On a cluster of node groups: per group k, per layer l of L (graph_layers), the layer's seconds
// (its forward and backward operators, whole) on group k's view, at [k * nl + l]; NULL for a
// cluster of one group. Can't fail.
double *hetero_layer_seconds(const pcc_graph *g, const pcc_cluster *c, const pcc_layer *L, int nl);
// The layers cut into pp * v contiguous non-empty chunks (chunk c on pipeline device c mod pp, each
// device's stage inside one group: cluster_stages_fit) with the smallest largest chunk time, each
// chunk timed on its group (ls: hetero_layer_seconds); chunk[l] for every layer. Can't fail.
void hetero_partition(const pcc_cluster *c, const double *ls, int nl, int pp, int v, int *chunk);
// s->est_even_s: the estimate of strategy s (sc its ILP choice) were its layers in the chunks
// `even` (the FLOP-balanced cut) instead. Can't fail.
void hetero_compare(const pcc_graph *g, const pcc_cluster *c, const pcc_intra *sc, pcc_strategy *s, const int *even);
// The --estimate-only lines of a cluster of node groups: each stage's group and layers, and the
// step with stages cut by FLOPs instead. Nothing for a cluster of one group. Can't fail.
void hetero_report(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s);

/* ---------------------------------------------------------------- bestfirst.c */

typedef struct pcc_bf_slot {
    pcc_space *space;           // one micro-batch count's configurations
    int m;                      // that count
} pcc_bf_slot;
typedef struct pcc_bf_result {
    int slot;                   // the answer's slot (-1: nothing fits)
    pcc_config config;          // ... and configuration
    pcc_strategy **ranked;      // slot ranked_slot's strategies, the answer first, then by estimate
    int n, ranked_slot;
    int configs, expanded;      // configurations in all; looked at (their ILP probed)
    int checked, dropped;       // planned by the memory planner; left unsolved when the time ran out
    double bound;               // the answer's key: no configuration left could beat it
    double least_peak;          // the least memory-planner peak of those that did not fit
    bool out_of_time;
} pcc_bf_result;
// The best configuration of every slot's that the memory planner fits (o->fit_memory_bytes or
// the cluster's memory), by the estimate. An error of an ILP ends it (returned); nothing fitting
// is r->slot -1 with PCC_OK.
pcc_status bestfirst(pcc_bf_slot *slots, int n, const pcc_search_opts *o, pcc_bf_result *r);
// What the searches of this process did, added up (for the compile's summary). Can't fail.
typedef struct pcc_search_counts {
    int searches, configs, expanded, checked, dropped;
    double seconds, bound, least_peak; // the last search's: bound, the least peak found too large (INFINITY: none)
} pcc_search_counts;
const pcc_search_counts *bestfirst_counts(void);
// Phase 2: the candidate strategies for the options, from phase 1's candidates t (search_group_sizes'
// sizes): one for a template, all that the search finds for --auto, best first (by
// est_step_s); with o->whole, one whose only parts are the mesh (tp = all devices) and intra.
// PCC_ERR_INPUT (with a message) when a template does not fit the devices or the model (dp not
// dividing the batch, pp above the number of layers, ...); PCC_ERR_INFEASIBLE when no
// factorization is possible or nothing fits (with a message unless o->quiet).
pcc_status search(const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, const pcc_search_opts *o,
                  pcc_strategy ***out, int *n);

/* ---------------------------------------------------------------- estimate.c */

// The cost model's estimate of one training step of strategy s (its mesh, splits and stages
// set; sc its tp group's ILP choice) into s->est: the busiest pipeline device's operators,
// tensor-parallel resharding and sends per micro-batch, the schedule's bubble, then the gradient
// sync the last backward pass does not hide, the optimizer and ZeRO's all-gather. Can't fail.
void estimate_step(const pcc_graph *g, const pcc_cluster *c, const pcc_intra *sc, pcc_strategy *s);
// Per layer of L (graph_layers), the seconds estimate_step charges one device of its stage per micro-batch for it.
double *estimate_layer_seconds(const pcc_graph *g, const pcc_cluster *c, const pcc_intra *sc, pcc_strategy *s, const pcc_layer *L, int nl);
// What estimate_step charges forward op i's operators (its forward and its backward ops, one
// micro-batch, one device) at the least over the candidates of t (one tp group): fb[i], and
// with its forward run again (recompute) ffb[i]; dp_letter[i] the letter dp splits (-1: none),
// dp the replicas, batch_dim the batch dimension. Arrays of g->n_fwd_ops. Can't fail.
void estimate_floor(const pcc_graph *g, const pcc_cluster *c, const pcc_transform *t, const int *dp_letter, int dp,
                    int batch_dim, double *fb, double *ffb);

/* ---------------------------------------------------------------- bgsync.c */

// --sync: how the dense replicated parameters are kept in step across data-parallel ranks.
typedef enum pcc_sync_algo { PCC_SYNC_ALLREDUCE, PCC_SYNC_MA, PCC_SYNC_EASGD, PCC_SYNC_BMUF } pcc_sync_algo;

typedef struct pcc_sync_opts {
    pcc_sync_algo algo;         // ALLREDUCE: the gradient all-reduce in every step (the default)
    int period;                 // steps between background rounds; 0: continuous
    double alpha;               // EASGD's moving rate (per trainer); < 0: 0.5 / N (N: the parameter's replicas)
    double eta, zeta;           // BMUF's block momentum and block learning rate; < 0: 1 - 1/N, 1
    int nesterov;               // BMUF: the replicas restart from w_g + eta * delta; < 0: 1
    bool hogwild;               // apply rounds in place, racing with the foreground (no lock)
    int64_t chunk_bytes;        // a round's all-reduce in pieces of at most this; 0: whole; < 0: 4 MiB
    int64_t bucket_bytes;       // params of one group share an all-reduce up to this; 0: one a collective
} pcc_sync_opts;

// Parses --sync's value into *o (numbers not given are < 0: their defaults depend on dp, and
// bgsync_emit fills them in). On error, returns PCC_ERR_INPUT after printing what is wrong.
pcc_status sync_parse(const char *arg, pcc_sync_opts *o);
// The canonical text of o ("background:algo=ma,period=1,..."), in a; "allreduce" for the default.
const char *sync_str(pcc_arena *a, const pcc_sync_opts *o);
// One dense parameter that a background program synchronizes: its home buffer on a stage, and
// the group of its replicas (a plan group over the axes it is a replica along, and its shape).
typedef struct pcc_bg_param {
    uint32_t tensor, buffer, group;
    pcc_group_shape replicas;
    float coll_s, pass_s;       // the cost model's all-reduce of it over the replicas, and one elementwise pass over it
} pcc_bg_param;
// Appends the background program (one round in a background loop on a stream of its own; see
// runtime/PLAN_FORMAT.md) to program pr of plan p, over the n params of ps, each averaged over its own group of
// replicas (ps[i].group, ps[i].replicas.size ranks, shaped so on cluster c: each chunk of a chunked all-reduce is
// costed as an all-reduce of its own bytes, latency included; the defaults that depend on the number of trainers
// take each param's). Continuous rounds agree on stopping over plan group `stop_group`, which spans every param's
// group. Adds state tensors, buffers past the arena's end, one stream. Cannot fail (asserts on broken invariants).
void bgsync_emit(plan *p, plan_program *pr, const pcc_sync_opts *o, const pcc_bg_param *ps, int n, uint32_t stop_group,
                 const pcc_cluster *c);

/* ---------------------------------------------------------------- preserve.c */

/* Phase 3, data dependency preservation: per pipeline stage one program that every dp x tp rank
 * of the stage runs. For each operator it finds the layout of every operand from the strategy's
 * split (the backward and optimizer operators from their forward operator's), and where a
 * producer's layout differs from a consumer's it inserts the collectives that turn one into the
 * other (reshard.c's chain: all-gather, all-reduce, reduce-scatter, all-to-all, a local slice),
 * or a send/receive where they are on different stages. Gradients of parameters replicated over
 * dp are all-reduced (ZeRO: reduce-scattered, the parameters all-gathered) in buckets on a
 * second stream, overlapped with the backward pass of the last micro-batch. Micro-batches run
 * in the order pipeline.c gives, repeated blocks as loops. Its output, the programs with their
 * buffers unplaced, goes to the memory planner and then to the emitter. */

// A buffer of a program being built: what the plan's buffer will hold, and the planner's state.
typedef struct pcc_mbuf {
    uint32_t tensor;
    uint8_t dtype;
    plan_shard shard;
    uint64_t bytes;
    uint32_t mb_slots, layer_slots, layer_base;
    bool whole;                 // live for the whole program
    bool persist;               // the home of a param, optimizer state or input (PLAN_BUF_PERSIST)
    int first, last;            // liveness (instruction indices)
    uint64_t mb_stride, layer_stride, extent; // slots at aligned strides; extent: all of them
    uint64_t offset;
    bool in_bucket;             // a member of a contiguous bucket (its first places them all)
    int bucket_next;            // with in_bucket: the next buffer of its bucket, -1 for the last
} pcc_mbuf;

// One program of instructions over streams, as phase 3 builds it (preserve.c, burst.c): its
// buffers (placed by the memory planner), instructions, their arguments and attributes, as the
// plan will hold them.
typedef struct pcc_program {
    const char *name;           // "stage0", "burst2+"
    pcc_mbuf *buf;      int n_buf;
    plan_insn *insn;    int n_insn;
    uint32_t *args;     int n_args;
    plan_attrs *attrs;  int n_attrs;
    int streams;                // 1; 2 with the gradient synchronization's (and its events); 3 with ring attention's
    pcc_bg_param *bg;   int n_bg; // --sync background: the dense params its background round averages
    uint64_t arena;             // the memory planner's: the arena's bytes (the exact peak) ...
    uint64_t live_bound;        // ... and the most bytes live at one instruction (a lower bound)
} pcc_program;

// Phase 3's output: the programs, which rank runs which, the communicator groups, and what META
// says of them (the mesh: world, n_axes, mesh, axis_names; micro_batches, schedule, zero_stage,
// est_step_s, model_flops, notes in the arena; the emitter fills in the rest).
typedef struct pcc_programs {
    plan_meta meta;
    pcc_program *prog;  int n;
    uint32_t *rank_program;     // per rank (meta.world): its program
    uint32_t *group_axes;       // per communicator group: its mesh axes (bits)
    int n_groups;
    const pcc_sync_opts *bg;    // --sync background: each program gets a background round; NULL: none
    uint32_t bg_stop_group;     // the group continuous rounds agree on stopping over
    int zigzag, zigzag_dim;     // inputs with dimension zigzag_dim (g->dims) hold it in zigzag order of this many chunks (0: none)
    double *run_credit[2];      // per forward op: what phase 3's buckets of several ops' inputs save a pass (fwd, bwd)
} pcc_programs;

typedef struct pcc_preserve_opts {
    uint64_t bucket_bytes;      // gradient bytes per bucket (per rank); 0: one collective per gradient
    pcc_sync_opts sync;         // --sync
} pcc_preserve_opts;

// The programs of strategy s. PCC_ERR_INPUT (reported) for what phase 3 cannot make yet (ZeRO-2
// with interleaving, more than 8 values carried by a block (counting, where its copies are on
// several stages, the gradients its backward sums over them), such a sum over copies on several
// chunks of an interleaved pipeline, interleaving with a message that skips a chunk, a
// background-synced parameter in a repeated block).
pcc_status preserve(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s, const pcc_preserve_opts *o,
                    pcc_programs **out);
// (estimate.c) After phase 3 made strategy s into programs pr: where its buckets of several
// operators' collectives save time (pr->run_credit), s's estimate again with those savings, and
// pr's META.
void estimate_runs(const pcc_graph *g, const pcc_cluster *c, pcc_strategy *s, pcc_programs *pr);

/* ---------------------------------------------------------------- layout.c */

// (pcc_values and the rest of layout.c's interface, phase 3's own: compiler/layout.h)

// Whether strategy s reduce-scatters each micro-batch's parameter gradients onto the rank's ZeRO
// shard as soon as they are made (ZeRO-2 with several micro-batches, ZeRO-3 without
// interleaving), on the compute stream, instead of in the step's gradient buckets.
bool layout_zero_per_micro_batch(const pcc_strategy *s);
int layout_zero_dim(const pcc_graph *g, int t, const int *split, int64_t ways); // ZeRO's cut dimension, -1

/* ---------------------------------------------------------------- burst.c */

/* DeepPool's burst parallelism: every layer data-parallel on its own power-of-two number of
 * devices under a fixed global batch (burst.c's header says how, and how the plan holds it). */

typedef struct pcc_burst_opts {
    int devices;            // G, a power of two up to 2^PLAN_MAX_AXES
    double amp_limit;       // DeepPool's GPU-time amplification limit; 0: none
    const char *widths;     // "8,8,2,1": every layer's device count given (--burst-widths), or NULL
    double bucket_bytes;    // --bucket-mb: the gradient buckets the step's estimate issues (0: one per layer)
} pcc_burst_opts;

typedef struct pcc_burst {
    int devices, n_axes;    // G = 2^n_axes
    int batch_dim;          // the model dimension split
    double amp_limit, bucket_bytes;
    int n_regions;          // layers: runs of forward ops with one value crossing to the next
    int *region_of;         // per forward op
    int *cross;             // per region: the value it hands to the next (-1: none)
    int *width;             // per region: log2 of its devices (the choice)
    int *max_width;         // per region: the widest it may run (the batch divides; it splits)
    double *region_s;       // per region: its time at the choice (with its inbound move)
    double *sync_s;         // ... of which its gradient all-reduce
    double est_step_s;      // the choice's step time on the cost model
    double dp_step_s;       // every layer as wide as it goes (data parallelism), on the same model
} pcc_burst;

// Chooses every layer's width (or takes o->widths). PCC_ERR_INPUT (reported) for models it does
// not handle (repeated blocks, several micro-batches, no batch dimension) and for widths given
// that do not fit the layers (count, powers of two, batch, splittable).
pcc_status burst_plan(const pcc_graph *g, const pcc_cluster *c, const pcc_burst_opts *o, pcc_burst **out);
// Burst parallelism's phase 3: the programs of a choice, n + 1 of them on a mesh of n axes of
// size 2 (the ranks that run the same widths share one), their gradients all-reduced in buckets
// of o->bucket_bytes. Can't fail.
pcc_programs *burst_programs(const pcc_graph *g, const pcc_cluster *c, const pcc_burst *b, const pcc_preserve_opts *o);
// The per-layer table: layer, its ops, GPUs, batch per GPU, time and gradient sync. Can't fail.
void burst_table(FILE *f, const pcc_graph *g, const pcc_burst *b);

/* ---------------------------------------------------------------- memplan.c */

/* The memory planner: every buffer of every program at a static offset from its liveness. */

// Places the buffers of each program (its instructions, arguments and attributes as the plan
// will hold them) at static offsets from their liveness; sets each one's arena (the exact peak)
// and live bound (the most bytes live at one instruction). Can't fail.
void memplan(pcc_programs *pr);
// The peak per device (the largest program's arena, background rounds included) of the plan of
// strategy s: phase 3 and the planner, as a compile runs them, in g's arena. *st: phase 3's
// status (PCC_ERR_INPUT, said nothing, for what it cannot make; the peak is then INFINITY).
double memplan_strategy_peak(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s, const pcc_preserve_opts *o,
                             pcc_status *st);

/* ---------------------------------------------------------------- emit.c */

typedef struct pcc_emit_opts {
    const char *options;        // canonical option string, for META
    uint64_t model_hash, cluster_hash;
} pcc_emit_opts;

typedef struct pcc_emitted {
    plan *p;                    // malloc'd via plan_alloc; emitted_free frees it
    double peak_bytes;          // the largest program's arena
    int peak_stage;
    double live_bound_bytes;    // the largest sum of buffers live at one instruction (a lower bound)
    struct sim_result *sim;     // check_plan's simulation of a step (NULL: not run, or not possible: sim_err)
    char sim_err[1024];
} pcc_emitted;

// The plan of phase 3's programs, placed by the memory planner (and with --sync background,
// their background rounds appended by bgsync.c), into *e with its peak. Whether it fits the
// device and passes plan_check is the caller's to ask. Can't fail.
void emit_plan(const pcc_graph *g, const pcc_cluster *c, const pcc_programs *pr, const pcc_emit_opts *o, pcc_emitted *e);
// check.c: plan_check on e->p, then a step simulated into e->sim (NULL if too large: e->sim_err).
// PCC_ERR_INTERNAL with a message where either fails (a deadlock: a plancc bug), else PCC_OK.
pcc_status check_plan(pcc_emitted *e);
void emitted_free(pcc_emitted *e); // frees e's plan and simulation (either may be absent), clears them
// Appends an instruction of kind k on stream to a program being built (*insns, *n_insn, *cap_insn
// its VEC_PUSH vector) and its arguments to *argv: attrs PLAN_NONE, and phase (of its micro-batch's
// pass) only where the kind takes one (compute, coll, send, recv, copy). Returns it for the rest.
plan_insn *emit_insn(pcc_arena *ar, plan_insn **insns, int *n_insn, int *cap_insn, uint32_t **argv, int *n_args,
                     int *cap_args, plan_insn_kind k, int stream, plan_phase phase, const int *args, int nargs);
// The index of op's attributes (accumulate: add into its outputs) in a program's attrs list
// *v (n, cap: its VEC_PUSH count and capacity), added once; PLAN_NONE when all are zero.
uint32_t emit_attrs(pcc_arena *ar, plan_attrs **v, int *n, int *cap, const pcc_op *op, bool accumulate);
// Dropout(_grad) op along dim sdim in zigzag order of `chunks`: attrs axis, end = its place, chunks. Can't fail.
void emit_zigzag_dropout(const pcc_graph *g, pcc_op *op, int sdim, int chunks);
// The same for attributes given as they are.
uint32_t emit_attrs_add(pcc_arena *ar, plan_attrs **v, int *n, int *cap, const plan_attrs *a);

/* ---------------------------------------------------------------- report.c */

typedef struct pcc_report_opts {
    bool json;
    int verbose;
} pcc_report_opts;
// The --check report: per op and block, parameters, FLOPs and activation bytes; totals.
void report_print(FILE *f, const pcc_graph *g, const pcc_report_opts *o);
// The same report with a cluster section after it (in JSON, a "cluster" member): the cluster's
// shape and device, whether one step's memory fits one device, and the compute lower bound of
// one step at the peak FLOP/s of the model's dtype. c NULL: exactly report_print. Can't fail.
void report_print_cluster(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_report_opts *o);

/* ---------------------------------------------------------------- options.c */

// plancc's options, laid out as the parts each phase takes.
typedef struct pcc_options {
    const char *model;
    const char *cluster;        // NULL: no cluster (--check only)
    const char *output;         // -o; NULL: MODEL's name + .plan (options_output)
    int nodes, devices;         // 0: as the cluster file says
    bool check, quiet, estimate_only;
    bool tf32;                  // cost f32 matrix products at the TF32 tensor-core peak
    const char *dumps;          // -d letters: t (phase 1's candidates), s (phase 2's choice)
    pcc_report_opts report;     // --json, -v
    pcc_batch_opts batch;       // --global-batch, --micro-batch-size, --micro-batches
    pcc_search_opts search;     // the strategy; its ilp: --time-limit, --mip-gap, --dump-ilp
    pcc_preserve_opts preserve; // --bucket-mb in bytes, --sync
    double bucket_mb;           // --bucket-mb as given (10^6 bytes); 0: one collective per gradient
    bool burst;                 // --burst: DeepPool's burst parallelism (burst.c)
    double amp_limit;           // --amp-limit (0: none)
    const char *burst_widths;   // --burst-widths LIST
    const char *config;         // --config FILE (its options come before the command line's), or NULL
    int dtype_override;         // --bf16, --fp16: 1 + the pcc_dtype every float tensor becomes; 0: the model's
    int layers_per_vstage;      // --num-layers-per-virtual-pipeline-stage (0: not given); options_apply_model
    bool distributed_optimizer; // --use-distributed-optimizer: ZeRO-1 unless --zero says more
    int mb_searched;            // set by driver_micro_batches: the counts it planned (0: no search)
    double mb_search_s;         // ... and its seconds
    const char *policy;         // --policy FILE, or NULL (policy.c)
    int attention;              // --attention: every attention op's form, PLAN_ATTN_* (attrs.mode; options_apply_model)
    const char *coshard;        // --coshard GLOB:K[:LETTER],... or NULL (coshard.c)
    bool coshard_none;          // --coshard none: no co-shard, --auto's neither
    struct pcc_coshard_note *coshard_notes; int n_coshard_notes, cap_coshard_notes; // what coshard_apply did (coshard.h)
    char *coshard_retry;        // --auto found nothing that fits: the operators main.c co-shards in another compile (malloc'd)
    struct pcc_coshard_pick *coshard_pick; double coshard_over_s; // --auto chose co-shard (coshard.h): over a plan of this estimate
} pcc_options;

// Parses argv into *o and checks the options against each other; *done when --help or --version
// printed what was asked. PCC_ERR_INPUT after one line "plancc: ..." on a usage error.
pcc_status options_parse(int argc, char **argv, pcc_options *o, bool *done);
// What the options change in a model just loaded (call after model_load, before batch_apply):
// --bf16/--fp16 make every float tensor that dtype; --num-layers-per-virtual-pipeline-stage
// becomes o->search.virtual_stages (the model's layers over pp times it). PCC_ERR_INPUT
// (reported) when the layers do not divide so.
pcc_status options_apply_model(pcc_options *o, pcc_graph *g);
// Whether the options ask for phase 1 (transform), 2 (the search) or 3 (phase 3 and the plan):
// --check stops after its report, or after the phases its -d dumps (or --dump-ilp) need;
// --estimate-only after phase 2.
bool options_runs(const pcc_options *o, int phase);
// Whether -d asks for the dump of this letter.
bool options_dump(const pcc_options *o, char letter);
// What the plan records of its inputs: the options that decide the plan in one canonical order
// (the same options give the same bytes however they were spelled) and the model's and the
// cluster's hashes (a warning, and 0, for a file it cannot hash).
void options_emit(pcc_arena *a, const pcc_cluster *c, const pcc_options *o, pcc_emit_opts *eo);
// The plan file to write: -o, or the model file's name without .json, plus .plan.
const char *options_output(pcc_arena *a, const pcc_options *o);

/* ---------------------------------------------------------------- driver.c */

// Whether the options ask the driver to search the micro-batch count (--auto with --global-batch and no count given).
bool driver_searches_micro_batches(const pcc_options *o);
// Plans every micro-batch count of the global batch that keeps whole ghost batch norm groups,
// most first, each through the front end and phases 1 and 2 in an arena of its own, until 3 in a
// row do no better; sets o->batch.micro_batches to the fastest (and o->mb_searched,
// o->mb_search_s) and builds *g again in arena a for it. A count that does not fit is skipped;
// other errors are returned (reported). When none fits, *g stays as it was.
pcc_status driver_micro_batches(pcc_arena *a, pcc_options *o, const pcc_cluster *c, pcc_graph **g);

// The fit: which of phase 2's ranked strategies becomes the plan. main.c's loop asks
// driver_fit_next for a strategy, runs phase 3, the memory planner, the emitter and plan_check
// on it, and asks driver_fit_done whether that ends the loop.
typedef struct pcc_fit {
    pcc_strategy **cand;        // the ranking being tried, best first (phase 2's, then a tighter round's)
    int n, next;                // its length; the next one to try
    int which;                  // the one that fit (index into cand); -1 while none has
    // the driver's own
    const pcc_graph *g;
    const pcc_cluster *c;
    const pcc_transforms *t;
    const pcc_options *o;
    pcc_cluster budget;         // the ILP's memory in the tighter rounds
    double peak;                // the smallest arena of those that did not fit
    int mode, round, suggestion;
    const char *fix;            // the suggestion being tried
    bool started;
} pcc_fit;
// Starts the fit over phase 2's ranking (cand, n; t: phase 1's candidates, which every round reuses).
void driver_fit_init(pcc_fit *f, const pcc_graph *g, const pcc_cluster *c, const pcc_transforms *t, const pcc_options *o,
                     pcc_strategy **cand, int n);
// The next strategy to plan: the ranking's next; when it is spent, the best few of a search on a
// tighter budget for the ILP (up to 3 rounds, with --recompute auto); then, having said by how
// much nothing fits, those of each change that might (--recompute full, --zero 3, both). NULL
// when none is left, with *st PCC_ERR_INFEASIBLE.
const pcc_strategy *driver_fit_next(pcc_fit *f, pcc_status *st);
// After the plan of the strategy driver_fit_next gave (*st its status, *e the plan): true when
// the loop is over, with *st its end: PCC_OK (it fits: *e is the plan, f->which the strategy),
// PCC_ERR_INFEASIBLE (a suggestion fits: named on stderr), or an error. Otherwise the plan is
// freed and *st reset, for the next one.
bool driver_fit_done(pcc_fit *f, pcc_status *st, pcc_emitted *e);

/* ---------------------------------------------------------------- report.c (the compile's summaries) */

// --estimate-only: strategy s's estimate of a step and its parts (one of n candidates: the one
// the memory planner fits, peak_bytes its peak), as text or, with --json, as JSON; seconds: the
// time it took. Can't fail.
void report_estimate(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_options *o, const pcc_strategy *s,
                     double peak_bytes, int n, double seconds);
// The summary of a plan written to `out`: cand[which] of n (all with -v), the ILP, every
// program's arena, the peak, the estimate beside the plan's simulation. Nothing with -q.
void report_compile(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_options *o, pcc_strategy *const *cand, int n,
                    int which, const pcc_emitted *e, const char *out, double seconds);
// The same for a burst plan, with its per-layer table.
void report_burst(FILE *f, const pcc_graph *g, const pcc_cluster *c, const pcc_options *o, const pcc_burst *b,
                  const pcc_emitted *e, const char *out, double seconds);

/* policy.c (--policy FILE): compiler/policy.h, which the files that use a policy include. */

#endif
