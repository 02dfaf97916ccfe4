/*
 * sim.h: the plan simulator. It runs a plan's programs on a model of time, from the plan alone:
 * every instruction takes the cost model's time that the compiler wrote into it (plan_insn.t_s),
 * so plandump (which has no cluster file) and plancc (which has) simulate alike.
 *
 * What it models, as runtime/PLAN_FORMAT.md defines the instructions:
 *   - each stream of a rank runs its instructions in program order (loops expanded), one at a
 *     time: an instruction starts when its stream is free and what it depends on is there;
 *   - record marks its event's ordinal done when its stream reaches it; wait holds its stream
 *     until the ordinal it counted is done (the latest record before it in program order, on any
 *     stream: CUDA's cudaStreamWaitEvent after cudaEventRecord; a wait with no record before it
 *     does not wait);
 *   - a collective starts when every member of its group instance has reached it and ends for
 *     all at once, after the longest of the members' times (the slowest member bounds it);
 *   - a maximal run of send and recv on one stream is one NCCL group: all of them are posted at
 *     once; the k-th message from a rank to a peer pairs with the peer's k-th receive from it and
 *     moves when both are posted, for the longer of the two sides' times, once the sender's link
 *     along the message's mesh axis has carried the sender's earlier messages along it and the
 *     receiver's link its earlier receipts (a rank's sends to three peers along one axis take three
 *     times one; a send and a receive do not wait for each other); the stream is free when every
 *     message of its run has moved;
 *   - record, wait and loop take no time.
 * Ranks that run alike are simulated once: the ranks are split into classes (first by program,
 * then until every rank of a class has its peers and its group instances in the same classes),
 * so that a 1024-rank plan with a dozen pipeline stages costs a dozen programs' instructions.
 * A plan that cannot finish (a wait nothing records, a collective a member never reaches, a
 * receive nothing sends) is a deadlock: sim_run says which streams wait for what.
 *
 * A background round (ShadowSync; a loop with variable background or background_hogwild) runs
 * once, from the start of the step, on its own stream and group: its stream's end is the round's
 * time alone, and it is left out of the step and of the step's figures. Beside the steps the
 * round's collectives share the links with the foreground's collectives and messages, modelled
 * simply: the round's collectives get the links only the share of the step that the
 * foreground's leave free (sim_background). Nothing else contends (below).
 * Figures (sim_result): the step time (the last stream's end), per rank class the time some
 * compute or copy runs, the time some communication runs, the part of it with no compute at the
 * same time (exposed communication), the busy time of the compute stream (the first stream with
 * a compute instruction) and so its idle share of the step (the pipeline bubble, waits included);
 * TFLOP/s per GPU and MFU from META's model_flops (Megatron-LM's count) and device_peak_flops;
 * memory: each program's arena (the plan's exact static peak) and a live-bytes curve by
 * instruction (a buffer counts from its first use to its last, widened to the loop around its
 * uses unless it lives within one iteration, as the compiler's planner counts it; persistent
 * buffers always).
 */
#ifndef PLAN_SIM_H
#define PLAN_SIM_H

#include "plan/plan.h"

// One instruction's run on a stream.
typedef struct sim_interval {
    double start, end;          // seconds from the start of the step
    uint32_t insn;              // index in the program
    uint32_t mb, layer;         // its micro-batch (loop variable + mb_delta) and layer loop variable
    uint32_t msg;               // send and recv: the message's number (> 0; the same on both sides), else 0
} sim_interval;

typedef struct sim_class {
    uint32_t program;
    uint32_t rank;              // its first rank (the one simulated)
    uint32_t n_ranks;
    uint32_t main_stream;       // the compute stream: the first with a compute instruction (0 if none)
    double end_s;               // when its last stream finishes (a background round's stream left out)
    double compute_s;           // time in which some compute or copy runs (any stream)
    double comm_s;              // time in which some collective, send or recv runs
    double exposed_comm_s;      // ... while no compute or copy runs
    double main_busy_s;         // time in which the compute stream runs anything
    uint64_t executed;          // instructions run (loops expanded; record and wait included)
    double round_s;             // a background round: when its stream finishes (0: none)
    double round_link_s;        // ... the part of it in collectives
    uint32_t round_colls;       // ... its collectives (a chunk counts as one)
    double round_coll_max_s;    // ... its longest collective
    double fg_link_s;           // the foreground's collectives, sends and receives: their summed times
    uint32_t fg_colls;          // ... how many
    bool kept;                  // its intervals were kept (sim_opts)
    sim_interval *iv[8];        // per stream, in order of start
    uint32_t n_iv[8];
} sim_class;

// A plan with a background round (ShadowSync; runtime/PLAN_FORMAT.md), as sim.c models it: the
// round runs on its own stream and group beside one step, once; the step is the foreground's.
typedef struct sim_background {
    bool present;
    int32_t period;             // the loop's count: a round every `period` steps; 0: continuous
    double round_s;             // one round alone on its stream and links (the slowest class)
    double round_link_s;        // ... of which its collectives
    uint32_t n_colls;           // its collectives per round (chunks each count)
    double coll_max_s;          // its longest collective
    double fg_link_share;       // the foreground's collective time over its step (the busiest class; capped at 1)
    double round_shared_s;      // the round beside the steps: its collectives get the links only when the
                                // foreground's do not (round_link / (1 - share)); INFINITY: starved
    double steps_per_round;     // round_shared / step
    uint32_t staleness;         // steps one round spans: ceil(steps_per_round), at least the period (1 if
                                // continuous); UINT32_MAX when starved
    double rounds_per_step;     // 1 / staleness; continuous: step / round_shared when rounds are shorter
    uint32_t fg_colls;          // the foreground's collectives and messages per step (the busiest class)
    double fg_delay_max_s;      // the most they can wait behind background collectives: fg_colls x coll_max
                                // (NCCL does not preempt; not in step_s)
} sim_background;

typedef struct sim_result {
    double step_s;              // the simulated step (with a background round: the foreground's)
    double tflops_per_gpu;      // model_flops / step / world / 1e12; 0 when the plan has no model_flops
    double mfu;                 // of device_peak_flops; 0 when either figure is missing
    double bubble, bubble_max;  // the compute stream's idle share of the step: mean over ranks, worst
    uint32_t bubble_max_rank;
    double compute_s, compute_max_s;          // per rank: mean, most
    double comm_s, exposed_comm_s, exposed_comm_max_s;
    uint32_t compute_max_rank, exposed_max_rank;
    uint64_t peak_bytes;        // the largest arena of a rank's program
    uint32_t peak_program;
    uint64_t live_peak_bytes;   // the largest live-bytes figure of any program
    uint32_t n_classes;
    sim_class *classes;
    uint32_t *rank_class;       // per rank: its class
    uint32_t n_programs;
    uint64_t **live_bytes;      // per program (NULL if not loaded), per instruction: bytes live there
    uint64_t executed;          // instructions simulated (all classes)
    double seconds;             // wall time of the simulation
    sim_background bg;          // the background round, if the plan has one
} sim_result;

typedef struct sim_opts {
    bool intervals;             // keep the intervals of the classes that hold a rank in ...
    uint32_t rank_lo, rank_hi;  // ... [rank_lo, rank_hi]
} sim_opts;

// Simulates one step of p (o NULL: figures only, no intervals). p must have every program
// loaded (not a plan read for one rank) and pass plan_validate; plan_check is not needed, but a
// plan that fails it may deadlock or have no peer for a message, which is an error here too.
// Returns PLAN_OK, PLAN_ERR_FORMAT (plan_validate's message, or a program not loaded),
// PLAN_ERR_INVALID (a deadlock, a message with no peer, a collective on a group the rank is not
// in: the plan's fault, which the compiler's check_plan refuses), PLAN_ERR_LIMIT (more
// instructions per step than it simulates) or PLAN_ERR_IO (out of memory), with a message in err
// (a deadlock's begins "deadlock:"). *r is filled on PLAN_OK and zeroed otherwise; sim_free
// releases it either way.
plan_status sim_run(const plan *p, const sim_opts *o, sim_result *r, char *err, size_t err_n);
void sim_free(sim_result *r); // accepts NULL and a zeroed result

// The summary a person reads: the simulated step against the plan's estimate, TFLOP/s per GPU
// and MFU, the bubble, compute and communication (exposed), memory. Lines start with `indent`.
void sim_print(FILE *f, const plan *p, const sim_result *r, const char *indent);

/* ---- GPU multiplexing (sim_mux.c) ---- */

typedef struct sim_mux_opts {
    double piece_s;             // the longest background piece (DeepPool's be_graph_split_ms: 0.5e-3)
    double interference;        // the foreground's slowdown while a piece overlaps its work (0.1: 10%)
    uint32_t steps;             // foreground steps to pack over; 0: enough for two background steps, at least 4
} sim_mux_opts;

typedef struct sim_mux_result {
    double fg_step_s, fg_samples_s;   // the foreground alone (its --global-batch per step)
    double bg_step_s, bg_alone_samples_s; // the background alone on one GPU
    double bg_samples_s;        // the background packed into the foreground's idle time, summed over ranks
    uint64_t fg_batch, bg_batch; // from the plans' options (0: unknown; samples/s are then steps/s)
    uint64_t n_pieces;          // background pieces per background step
    double piece_max_s;
    uint32_t steps;             // foreground steps packed over
    uint32_t idle_ranks;        // ranks whose compute stream is idle for the whole step
    uint64_t admitted;          // pieces run over those steps, all ranks
    uint64_t overrun;           // ... of which overlap the foreground's compute stream's work (0 by construction)
    uint64_t in_collective;     // ... of which overlap a foreground collective (0 by construction)
    double overlap_share;       // (overrun + in_collective) / admitted
    double slowdown;            // the foreground's: 1 + interference * overlap_share
    double util_before, util_after; // compute streams' busy share of the step, mean over ranks
    double fg_norm, bg_norm, total; // DeepPool's total cluster throughput: each job's samples/s over its own alone
                                    // on the whole cluster (this plan; the background on every GPU), summed
} sim_mux_result;

// Packs the one-rank plan bg into the idle time of every rank of fg, whose simulation fr kept
// the intervals of every class (sim_opts.intervals over all ranks); sim_mux.c says how. Returns
// PLAN_OK, PLAN_ERR_INVALID (bg has more than one rank or computes nothing, fr kept no intervals,
// piece_s not positive, or bg's own simulation fails as sim_run does), or PLAN_ERR_IO (out of
// memory), with a message in err; *m is filled on PLAN_OK.
plan_status sim_mux(const plan *fg, const sim_result *fr, const plan *bg, const sim_mux_opts *o, sim_mux_result *m, char *err,
                    size_t err_n);

// The multiplexing summary a person reads; lines start with `indent`.
void sim_mux_print(FILE *f, const sim_mux_result *m, const char *indent);

#endif
