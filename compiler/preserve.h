/*
 * preserve.h: phase 3's builder, private to phase 3's files (preserve.c builds the programs from
 * p3base.c's primitives; schedule.c orders their parts; vocab.c and runs.c add their forms;
 * handoff.c makes the builder and hands on what it built): the programs being built, one per
 * pipeline stage, and what every step of building them reads.
 */
#ifndef PLANCC_PRESERVE_H
#define PLANCC_PRESERVE_H

#include "layout.h"

#define STREAM_MAIN 0
#define STREAM_SYNC 1
#define STREAM_BG 2     // the background program's (bgsync.c), where --sync background asks for one
#define STREAM_RING 2   // ring attention's k/v shifts (never with --sync background, which refuses --cp)
#define EV_GRAD 0
#define EV_SYNCED 1
#define EV_PREFETCH 2 // ZeRO-3's gathers of the next block copy's parameters
#define EV_RING_GO 3  // the compute stream reached a ring step: the ring stream may shift
#define EV_RING 4     // the ring stream's shift is done
// Message tags of interleaved plans (plain ones use 0 only): the forward pass's activations, the
// backward pass's gradients, the gradient contributions summed once per step, the parameters
// shared after the optimizer. On each pair of devices, the messages of one tag are sent and
// received in the same order (see pipeline.c); those of different tags are not.
#define TAG_FWD 0
#define TAG_BWD 1
#define TAG_DEFERRED 2
#define TAG_SHARE 3

typedef pcc_mbuf ebuf; // a buffer of a program being built (memplan.c places it)

// ZeRO-3: a parameter that a block's operators read in another layout than its home's, the steps
// of its gather (reshard_steps) and their buffers (-1 until made), two layer slots each.
typedef struct prefetch {
    int src;
    plan_shard want;
    int n, buf[PCC_AXES + 1];
    pcc_reshard_step step[PCC_AXES + 1];
} prefetch;

typedef struct cache_entry {
    int src;
    plan_shard want;
    int buf;
} cache_entry;

typedef struct p3_sig { // an operator's input collectives: one kind, over tp axes, in one dtype
    int kind, dtype;
    unsigned axes;
} p3_sig;
typedef struct p3_held { // the run being held: its operators, and a mark on each of their outputs
    int *op, n;
    p3_sig *sig;
    bool *out; // per tensor
} p3_held;

typedef struct prog {
    int stage;
    ebuf *buf;          int n_buf, cap_buf;
    plan_insn *insn;    int n_insn, cap_insn;
    uint32_t *args;     int n_args, cap_args;
    plan_attrs *attrs;  int n_attrs, cap_attrs;
    int loops[PLAN_MAX_LOOP_DEPTH], depth;
    int *home;          // per tensor: its buffer on this stage, -1
    int **carry;        // per block, per carried value: its carry register (scratch), -1
    int **chunk_home;   // interleaved: per model chunk of this device, its home (top-level tensors shared)
    int ***chunk_carry; //   ... and its carry registers
    cache_entry *cache; int n_cache, cap_cache;
    bool used_sync;
    bool used_ring;     // ring attention's shifts on STREAM_RING
    bool sharding;      // ZeRO-3: gradient reduce-scatters on stream 1 that stream 0 has not yet waited for
    bool rs_loop;       // ZeRO-2/3: a layer loop whose copies reduce-scatter behind the compute (zero2_flush)
    int *zpend;         int n_zpend, cap_zpend; // ZeRO-2/3: the block copy's final gradients, synchronized at its end
    prefetch *pref;     int n_pref, cap_pref; // ZeRO-3: the parameters the block copies at work gather (prefetch_list)
    prefetch *gath;     int n_gath, cap_gath; // ... every parameter's gather buffers, shared by the passes (prefetch_bufs)
    int *bucket;        int n_bucket, cap_bucket; // final gradients waiting for their bucket's collective
    int (*post)[2];     int n_post, cap_post; // ZeRO-1/2: updated shards (buffer) waiting to be gathered into their home (post_flush)
    int *shard_acc;     // per tensor: ZeRO-2, the buffer its gradient shard accumulates in, -1
    int *il_xbuf[4];    // per interlaced phase, per tensor: where it goes in a stage reader's layout, -1 (preserve.c's il_begin)
    int *il_home[4];    // ... and its home as the interlaced operator that makes it holds it, -1
    uint64_t bucket_bytes;                        // their bytes on this rank
    const bool **waits[2]; // forward, backward, per stage (model chunk): per op, whether it waits for its run (p3_run_plan)
    p3_held held;       // the run being held (runs.c), its arrays made once
} prog;

typedef struct builder {
    const pcc_values *v; // layout.c's decisions: every value's stage and layout, and what the step does with it
    const pcc_graph *g;  // the rest as v has them
    const pcc_cluster *c;    // the view of the group the stage being built is on
    const pcc_cluster *all;  // the whole cluster (its worst figures: the links between groups)
    const pcc_strategy *s;
    int pp, dp, tp, M;
    int cp;             // the context-parallel axis (1: none; the plan's mesh then leaves it out)
    int V, ns;          // model chunks per pipeline device (1: none) and stages in all, pp * V
    int (*groups)[2];   int n_groups, cap_groups; // (axes mask, stream) per plan group
    uint64_t bucket_cap;// gradient bytes per bucket (0: one collective per gradient)
    bool deferred_sends; // interleaved: p2p() sends the deferred gradient contributions only (else all but them)
    bool post_later;    // the optimizer: an updated shard goes into its home in post_flush's buckets
    int delta;          // the micro-batch offset of the instructions being emitted
    plan_phase phase;   // the part of the step being emitted
    double *run_credit[2]; // per forward op: what one pass's bucket saves (forward, backward; run_release)
} builder;

/* p3base.c: the builder's primitives */
// Layouts: equal; all R; the bytes of tensor t's piece in layout s.
bool p3_shard_eq(plan_shard a, plan_shard b);
plan_shard p3_shard_r(void);
uint64_t p3_shard_bytes(const builder *E, int t, plan_shard s);
// The plan group over the mesh axes in `axes` for collectives on `stream` (made on first use).
int p3_group(builder *E, int axes, int stream);
// A buffer of tensor t (-1: scratch) in layout s with its slots; a scratch buffer of `bytes` in dtype dt.
int p3_buf(builder *E, prog *P, int t, plan_shard s, uint32_t mb_slots, uint32_t layer_slots, uint32_t base);
int p3_scratch(builder *E, prog *P, pcc_dtype dt, uint64_t bytes);
// Instructions: buffer buf's cached layouts forgotten; an instruction on `stream`; an event
// (record or wait); a collective over the mesh axes in `axes`; a local copy (on `stream`, or
// the compute stream).
void p3_forget(prog *P, int buf);
plan_insn *p3_insn(builder *E, prog *P, plan_insn_kind k, int stream, const int *args, int nargs);
void p3_event(builder *E, prog *P, plan_insn_kind k, int stream, int ev);
void p3_coll(builder *E, prog *P, pcc_coll kind, unsigned axes, int stream, int in, int out);
void p3_copy_on(builder *E, prog *P, int src, int dst, int stream);
void p3_copy(builder *E, prog *P, int src, int dst);
// The attrs of op (accumulate: it adds into its outputs; sharded: ZeRO-2 sums its gradient's
// shard instead), and attrs pa, as indices into P's table.
uint32_t p3_attrs_of(builder *E, prog *P, const pcc_op *op, bool accumulate, bool sharded);
uint32_t p3_intern_attrs(builder *E, prog *P, const plan_attrs *pa);
// Times: the shape of the group over mesh axes `axes` for the cost model; a send or receive of
// buffer b to or from the stage `offset` away; a memory-bound kernel over `bytes` touching
// buffer b; op o on its operands' shards.
pcc_group_shape p3_axes_group(const builder *E, unsigned axes);
float p3_transfer_s(const builder *E, const prog *P, int b, int offset);
float p3_memory_s(const builder *E, const prog *P, double bytes, int b);
float p3_op_time_s(const builder *E, int o);
/* preserve.c */
// Builds stage P->stage's program (schedule.c, from preserve.c's parts).
void p3_program(builder *E, prog *P);

// preserve.c's helpers for schedule.c: t's home on this stage, an operator (its inputs
// resharded), a reshard into dst, the open gradient bucket closed, a loop over micro-batches
// opened and closed.
int p3_home(builder *E, prog *P, int t);
void p3_emit_op(builder *E, prog *P, int o, bool last_mb);
void p3_reshard_to(builder *E, prog *P, int src, plan_shard want, int dst);
void p3_bucket_flush(builder *E, prog *P);
void p3_loop(builder *E, prog *P, int count);
void p3_loop_end(builder *E, prog *P);
// ... and a program's parts: what it makes before its schedule, one unit's part of a pass of
// micro-batch `delta` (PCC_PART_*), interleaved model chunk c entered, the deferred gradient sends
// after the device's last unit, the epilogue (the sync's wait, the optimizer, shared parameters).
void p3_begin(builder *E, prog *P);
void p3_pass(builder *E, prog *P, int delta, bool bwd, bool last_mb, int part);
void p3_chunk_enter(builder *E, prog *P, int c);
void p3_deferred_sends(builder *E, prog *P, int d);
void p3_epilogue(builder *E, prog *P);

/* runs.c: one bucket for the input collectives of several top-level operators */

// Per op of this stage's forward (bwd false) or backward pass: whether it waits for its run.
const bool *p3_run_plan(builder *E, prog *P, bool bwd);
// Whether op o may wait for the rest of its run (or ends the run held before it).
bool p3_may_wait(const builder *E, int o);
bool p3_reads_held(const builder *E, const p3_held *h, int o);
p3_held p3_held_new(const builder *E);
void p3_hold(const builder *E, p3_held *h, int o, p3_sig sig);
void p3_release(const builder *E, p3_held *h);
// The forward op whose resharding the estimate charges input i of op o, or -1.
int p3_charged_to(const pcc_graph *g, int o, int i);
// What a run's buckets (pairs in[k] -> out[k] by step[k] over a group of shape grp[k], charged
// to forward op to[k]) save, into E->run_credit.
void p3_run_credit(builder *E, prog *P, const pcc_reshard_step *step, const int *in, const int *out, const pcc_group_shape *grp,
                   const int *to, int n);
// Whether op o is attention (or its gradient) that runs as ring attention.
bool p3_ring_op(const builder *E, int o);
/* vocab.c: vocabulary-parallel cross_entropy */
// The mesh axes (bits) that split the classes of cross_entropy (or its gradient) o; 0 for any
// other op, or classes whole.
unsigned p3_vocab_axes(const builder *E, int o);
// Op o, whose classes are split over `axes` (p3_vocab_axes), as its vocabulary-parallel steps
// over args (the op's inputs in its layouts, then its outputs' homes); attrs: the op's.
void p3_vocab_ce(builder *E, prog *P, int o, unsigned axes, const int *args, uint32_t attrs);

#endif
