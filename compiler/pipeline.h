/*
 * pipeline.h: the micro-batch schedules (compiler/pipeline.c), for phase 3 (preserve.c, layout.c),
 * which walks them, and the estimate (estimate.c), which times them.
 */
#ifndef PLANCC_PIPELINE_H
#define PLANCC_PIPELINE_H

#include "plancc.h"

/* The micro-batch schedules (GPipe, 1F1B, Megatron-LM's interleaved 1F1B): per pipeline device,
 * the order of its units (a forward or backward pass of one micro-batch on one model chunk),
 * with the loops over micro-batches, as phase 3 walks them. */

typedef enum pcc_unit_kind {
    PCC_UNIT_LOOP,      // a loop over micro-batches: `count` iterations of the units up to its END
    PCC_UNIT_END,       // closes the innermost loop
    PCC_UNIT_FWD,       // the forward pass of micro-batch `mb` on model chunk `chunk`
    PCC_UNIT_BWD,       // its backward pass
    PCC_UNIT_DEFERRED,  // interleaved, last: the once-a-step gradient sends of device `chunk`'s chunks
    PCC_UNIT_MID,       // 1F1B with interlaced operators: their phase between the passes for micro-batch `mb`
} pcc_unit_kind;
enum { PCC_PART_RECV = 1, PCC_PART_COMPUTE = 2, PCC_PART_SEND = 4, PCC_PART_ALL = 7 };
typedef struct pcc_unit {
    pcc_unit_kind kind;
    int chunk;          // FWD, BWD: the stage or model chunk (chunk c runs on device c mod pp)
    int mb;             // FWD, BWD: the micro-batch, counted from the enclosing loop's iteration
    int count;          // LOOP: iterations
    int part;           // FWD, BWD: which parts of the pass (PCC_PART_*; plain schedules: all)
    bool last;          // BWD, MID: the last micro-batch's (its gradients are final there)
} pcc_unit;

typedef struct pcc_pipeline {
    int pp, V, M;               // pipeline devices, model chunks per device, micro-batches
    pcc_pipe_sched schedule;    // GPipe or 1F1B (interleaved when V > 1)
    bool mid;                   // 1F1B: interlaced operators' phase between the passes, per micro-batch (PCC_UNIT_MID)
    double mid_s;               // ... its seconds, which every device runs together (pipeline_makespan)
} pcc_pipeline;

// The units of pipeline device d in the order it runs them, into *out (in arena a); returns their count. Can't fail.
int pipeline_units(pcc_arena *a, const pcc_pipeline *p, int d, pcc_unit **out);
// Per stage (model chunk, pp * V of them): the most micro-batches whose forward pass it has run
// and whose backward pass it has not, at once (the slots its kept activations need). Can't fail.
int *pipeline_in_flight(pcc_arena *a, const pcc_pipeline *p);
// A model chunk's seconds per micro-batch, its forward and backward passes' operators.
typedef struct pcc_chunk_times { double fwd, bwd; } pcc_chunk_times;
// A message per micro-batch from chunk `from`'s pass to chunk `to`'s (bwd: the backward passes').
typedef struct pcc_pipe_link {
    int from, to;
    bool bwd;
    double s;
} pcc_pipe_link;
// The schedule's length, chunk c taking c[c]: each unit once its device is free and its input is
// there, its receives (the links to it) and sends (from it) in runs that are one group each, a
// message once both sides reach it. done (optional, pp entries): when each device ends its last
// unit. Can't fail.
double pipeline_makespan(const pcc_pipeline *p, const pcc_chunk_times *c, const pcc_pipe_link *links, int n_links,
                         double *done);

#endif
