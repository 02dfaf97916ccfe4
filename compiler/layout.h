/*
 * layout.h: phase 3's first half (compiler/layout.c), for phase 3's files (preserve.h includes
 * it): for a strategy, where every value of the step lives (its stage, its layout on the mesh)
 * and what the step does with it (kept for the backward pass, sent once per step, synchronized,
 * trained per replica), and what crosses between stages; preserve.c builds the programs from it.
 * layout.c's two ZeRO predicates, which the estimate asks too, stay in plancc.h.
 */
#ifndef PLANCC_LAYOUT_H
#define PLANCC_LAYOUT_H

#include "plancc.h"

typedef struct pcc_values {
    const pcc_graph *g;
    const pcc_cluster *c;
    const pcc_strategy *s;
    int pp, dp, tp, M;  // the mesh, and the micro-batches
    int cp;             // the context-parallel axis's size (1: none)
    int V, ns;          // model chunks per pipeline device (1: none) and stages in all, pp * V
    int *inflight;      // per stage: the micro-batches whose kept activations it holds at once (pipeline.c)
    plan_shard **sh;    // per op: the shard of each operand (inputs, then outputs)
    plan_shard *home_sh;// per tensor: the layout of the buffer that holds it
    plan_shard *opt_sh; // per param: the layout its optimizer runs in
    bool *sync;         // per param grad tensor: needs a gradient synchronization
    bool *zero2;        // per param grad tensor: ZeRO-2, reduce-scattered per micro-batch into its shard
    const pcc_sync_opts *bg; // --sync background (NULL: the all-reduce in every step)
    uint8_t *local;     // per param grad tensor: the mesh axes (bits) it is trained per replica along, averaged in the background
    int *tstage;        // per tensor: the stage that holds it (-1: inputs, every stage; -2: per block copy; PCC_STAGE_ALL: interlaced)
    bool *kept;         // per tensor: read in the backward pass (keep a slot per micro-batch)
    bool *deferred;     // per tensor: a gradient contribution sent to another stage once per step
    bool *xchunk;       // per tensor: interleaved, written and read by two chunks of one device
    bool *recomp;       // per op: a forward op re-run in the backward pass
    int *ostage;        // per op: stage (block ops: -2, by copy; PCC_STAGE_ALL: interlaced)
    // Interlaced operators (strategy.interlaced; NULL when none): per op its phase (0: staged;
    // PCC_IL_PRE, _MID, _POST: before the pipeline's forward passes, between them and the backward
    // passes, after those); per tensor whether it crosses between the interlaced phases and the
    // stages or from one phase to another (a slot per micro-batch), and for a value an interlaced
    // operator makes and a stage reads, the layout that reader wants, which every stage makes at
    // once (the pp axis reduced or gathered in one collective of all stages; has_xsh).
    uint8_t *ilphase;
    bool il_mid;        // 1F1B with interlaced operators between the passes (per micro-batch: layout.c's relayed)
    bool *xil;
    bool *has_xsh;
    plan_shard *xsh;
    int **copy_lo, **copy_hi; // per forward block, per stage: its copies [lo, hi)
} pcc_values;

// The decisions for strategy s into *v. PCC_ERR_INPUT (reported) for what phase 3 cannot make yet (preserve's list).
pcc_status layout_values(const pcc_graph *g, const pcc_cluster *c, const pcc_strategy *s, const pcc_preserve_opts *o,
                         pcc_values *v);
// The stage of copy `copy` of block b (any block of its family). Can't fail.
int layout_copy_stage(const pcc_values *v, int b, int copy);
// The layout parameter gradient gp has as its producer leaves it (partial sums where it sums).
plan_shard layout_grad_made(const pcc_values *v, int gp);
// The collectives that synchronize parameter gradient gp, from the layout its producer leaves
// to the one its optimizer wants: all-reduces in place where it sums and the optimizer wants the
// whole sum, a reduce-scatter over the axes that split a dimension of the optimizer's shard.
// Returns the count (at most PCC_AXES).
int layout_sync_steps(const pcc_values *v, int gp, pcc_reshard_step *steps);
// The registers that pass block bl's values from a copy to the next one in its order on another
// stage: its carries 0 .. n_carry-1, then, in a backward block, one per gradient it sums over its
// copies (acc i as register n_carry + i: the partial sum over the copies already run, which the
// next stage adds to and the stage of copy 0 adds into the sum). Can't fail.
int layout_block_regs(const pcc_block *bl);
// A value that crosses stages: a tensor (key < n_tensors) or block b's register k (key
// n_tensors + 8 b + k: layout_block_regs), the stage at the other end, and whether this stage
// only passes it on (a relay: plain 1F1B's backward messages go between neighbouring stages).
typedef struct pcc_xfer {
    int key, peer;
    bool relay;
} pcc_xfer;
// What stage `stage` sends (send) or receives in the forward (bwd false) or backward pass, in a
// fixed order (by peer, then key) that both ends share; deferred gradient contributions only in
// the last micro-batch's backward (last_mb). *out in the graph's arena; returns the count.
int layout_transfers(const pcc_values *v, int stage, bool bwd, bool send, bool last_mb, pcc_xfer **out);

#endif
