/*
 * checker.h: what the verifier's files share; private to runtime/plan/. The verifier's public
 * face is plan_validate and plan_check (plan.h).
 *
 * The verifier is layered, one file per layer, each with one or two entry points that check.c
 * calls in order (a later layer may assume what an earlier one proved):
 *   check_struct.c  records and ranges: plan_validate (every index and enum value, the mesh,
 *                   tensor sources, shards that name what exists) and tensor shapes;
 *   check_loops.c   loops: their nesting, the period by which the data-flow walk expands them,
 *                   and the rules of background loops;
 *   check_insn.c    each instruction on its own: arities, what collectives and copies do to
 *                   sizes and shards, events, micro-batch ranges, loop counts against the
 *                   graph (micro-batches, block copies, a persistent buffer's layer slots);
 *   check_attrs.c   shape, window and axis attrs against the buffers' local shapes; drop probabilities;
 *   check_flow.c    buffers and liveness: slots inside the arena, shard sizes, and the data
 *                   flow of each program (written before read, live buffers never overlap,
 *                   every cross-stream access ordered by record and wait, partial sums
 *                   reduced before they are read, per-micro-batch values read);
 *   check_comm.c    communication between programs: sends against receives, and each group's
 *                   collectives in the same order on every member, matched by what they
 *                   carry (tensor, micro-batch, block copy);
 *   check_common.c  what they all use: the checker, fault messages that name the program, the
 *                   instruction or the buffer, and the operators' arities from ops.def.
 * check.c runs them (plan_check). Every fault is PLAN_ERR_INVALID (plan_validate's:
 * PLAN_ERR_FORMAT) with a message; a plan past the walks' bounds is PLAN_ERR_LIMIT (check_plimit);
 * the first fault found ends the check.
 */
#ifndef PLAN_CHECKER_H
#define PLAN_CHECKER_H

#include "plan.h"

/* ---- check_common.c ---- */

// One run of plan_check: the plan (plan_validate has accepted it), where the message goes, and
// per mesh axis the rank distance between neighbours along it.
typedef struct checker {
    const plan *p;
    char *err;
    size_t err_n;
    uint64_t *stride;
} checker;

// An operator's arity, from runtime/ops.def: inputs in_min..in_max, out outputs (-1: as many as
// the instruction has past in_max); inplace: it updates its inputs (no outputs).
typedef struct check_op_arity {
    int in_min, in_max, out;
    bool inplace;
} check_op_arity;
extern const check_op_arity check_op_arities[]; // indexed by the operator (pcc_op_kind)
extern const uint32_t check_n_ops;           // rows of ops.def
// Whether operator op sums away dimension d of its input q (of rank rank_q) in its output j (of
// rank rank_out): the annotation's letter there is a reduction ('+') that output j lacks (for
// reduce_sum, a leading dimension past the output's rank). So a split of that dimension leaves
// partial sums in output j. False where the annotation says nothing (concat, reshape, ...).
bool check_op_sums_away(uint32_t op, uint32_t q, int rank_q, int d, uint32_t rank_out, uint32_t j);

// Fault messages; each returns PLAN_ERR_INVALID. check_fail writes the message as it is;
// check_pfail puts 'program k "name" (ranks ...): ' before it, check_ifail that and
// 'insn i (name): ', check_bfail that and 'buffer b: '.
plan_status check_fail(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
plan_status check_pfail(checker *c, uint32_t k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// As check_pfail, for program k past a bound of the check (too large to check): PLAN_ERR_LIMIT.
plan_status check_plimit(checker *c, uint32_t k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
plan_status check_ifail(checker *c, uint32_t k, uint32_t i, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
plan_status check_bfail(checker *c, uint32_t k, uint32_t b, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

// How messages name things. Each writes at most n bytes, NUL included.
const char *check_name_or(const char *s, const char *dflt);                     // s, or dflt when NULL
void check_shape_text(const int64_t *v, int rank, char *buf, size_t n);         // "[16,8]"
void check_axes_text(const plan *p, uint32_t mask, char *buf, size_t n);        // "dp+tp"
void check_shard_desc(const plan *p, plan_shard s, char *buf, size_t n);        // plan_shard_text, or "all R"
const char *check_shard_value(uint8_t v, char buf[8]);                          // "R", "v", "d1"
// "buffer 3 (param "w")" or "buffer 2 (scratch)"
void check_buffer_desc(const plan *p, const plan_program *pg, uint32_t b, char *buf, size_t n);
// The mesh axes on which s splits dimension d, as a mask.
uint32_t check_split_axes(const plan *p, plan_shard s, int d);

/* ---- check_struct.c (plan_validate is in plan.h) ---- */

// Every tensor's dimensions are at least 1.
plan_status check_tensors(checker *c);

/* ---- check_loops.c ---- */

// Program k's loops: each body inside the program and inside the loop around it, at most
// PLAN_MAX_LOOP_DEPTH deep. PLAN_ERR_FORMAT (plan_validate's part); the instructions' other
// fields must be in range.
plan_status check_loop_nesting(const plan *p, uint32_t k, char *err, size_t err_n);
// The period of loop instruction i: the lcm of the slot counts its body touches through its
// variable (not through an inner loop of the same variable), capped at its count; 1 for a
// background loop.
uint32_t check_loop_period(const plan_program *pg, uint32_t i);
// The iteration after j of a loop of `count` with period p that the data-flow walk visits: all
// of them when count <= 3p; else 0..2p-1, then from the first multiple of p at or after
// count - p to the end.
uint64_t check_next_iteration(uint64_t j, uint64_t count, uint64_t p);
// Program k's background loop, if any, against the rules of a background round.
plan_status check_background(checker *c, uint32_t k);

/* ---- check_insn.c ---- */

// Every instruction of program k on its own (arity, collective and copy shards and sizes,
// events, micro-batch range), and the instructions executed per step, bounded.
plan_status check_insns(checker *c, uint32_t k);

/* ---- check_ring.c ---- */

// Program k's ring attention: its steps and the shifts between them make whole rings (the
// attention-ring rule); its dropouts along a sequence in zigzag order mask by logical positions
// (the dropout-zigzag rule).
plan_status check_ring(checker *c, uint32_t k);

/* ---- check_vocab.c ---- */

// Program k's cross-entropy: cross_entropy sees whole rows of classes, and the vocabulary-parallel
// form's statistics are gathered over exactly the axes that split the classes (the vocab-ce rule).
plan_status check_vocab(checker *c, uint32_t k);

/* ---- check_attrs.c ---- */

// Instruction i of program k (its arity checked): the shapes, windows and axes of its attrs
// against its buffers' local shapes; dropout's and attention's drop probability in [0, 1).
plan_status check_attrs_shapes(checker *c, uint32_t k, uint32_t i);

/* ---- check_flow.c ---- */

// Buffer b of program k: its slots inside the arena; a tensor buffer's shard divides its tensor
// and its bytes are its piece's.
plan_status check_buffer(checker *c, uint32_t k, uint32_t b);
// The data flow of program k, loops expanded (see check_flow.c).
plan_status check_flow(checker *c, uint32_t k);
// The last instruction of program pg before i that writes buffer b (program order, loops as
// written), or UINT32_MAX (check_ring.c, check_vocab.c).
uint32_t check_last_writer(const plan_program *pg, uint32_t i, uint32_t b);

/* ---- check_comm.c ---- */

// Sends against receives and collective order across every pair of programs.
plan_status check_comm(checker *c);

#endif
