/*
 * coshard.h: co-shard's types and entry points (coshard.c), a section of plancc.h kept in a
 * header of its own: only the driver, main.c, the reports and coshard.c include it.
 */
#ifndef PLANCC_COSHARD_H
#define PLANCC_COSHARD_H

#include "plancc.h"

// One operator co-shard rewrote: its name, the letter and dimension, the ways.
typedef struct pcc_coshard_note {
    const char *op, *letter, *dim;
    int ways;
} pcc_coshard_note;

// Co-shard (nnScaler): rewrites every forward operator that --coshard or a policy rule's
// "coshard" selects into k pieces along one letter, run one after another, joined by local
// split/concat/add operators; records each in o->coshard_notes. Call after batch_apply, before
// graph_check and autodiff. PCC_ERR_INPUT (reported, naming --coshard or the policy's pointer)
// on a request that selects nothing or cannot split so.
pcc_status coshard_apply(pcc_graph *g, pcc_options *o);
// --auto's fit step: the names, comma-separated (in arena a), of the forward operators of g that
// make the largest outputs (at least half the largest) and the losses that read them, where they
// can be co-sharded k ways; NULL when none can. Can't fail.
const char *coshard_suggest(pcc_arena *a, const pcc_graph *g, int k);

// --auto's co-shard round (driver.c): what to compile instead of the plan it weighed.
typedef struct pcc_coshard_pick {
    char *spec;                 // the --coshard request (malloc'd)
    pcc_config config;          // the configuration to build (o->search.pick)
    pcc_batch_opts batch;       // the batch options of its micro-batch count
    double est_s, over_s;       // its estimate; the plan's it beat
    double seconds;             // the search so far (the compile's summary adds it)
} pcc_coshard_pick;
// Whether --auto weighs co-shard against plan s, where memory bound the choice: s recomputes (any
// operator), or a faster plan was too large (too_large: the search's memory planner or the fit
// found one; s may then use ZeRO-3, or fewer micro-batches, or more stages). With --auto, no
// --coshard, no --policy, recompute not forced full.
bool driver_coshard_wanted(const pcc_options *o, const pcc_strategy *s, bool too_large);
// The co-shard round: for k of 2, 4 and 8, the graph with coshard_suggest's operators co-sharded
// k ways (at s's micro-batch count and, where the driver searched counts, the next fewer), all
// searched in one best-first queue (bestfirst.c) against s's estimate, full recompute left out, on
// a budget of a quarter of the compile's CPU seconds (at least 2 s, at most --time-limit). *out: the
// fastest that fits and beats s (malloc'd), or NULL. An error of an ILP is returned.
pcc_status driver_coshard(const pcc_options *o, const pcc_cluster *c, const pcc_graph *g, const pcc_strategy *s,
                          pcc_coshard_pick **out);
// What the co-shard round searched (its part of bestfirst_counts; bound: the graphs, co-shard ways
// times micro-batch counts); searches 0 where it did not run. Can't fail.
const pcc_search_counts *driver_coshard_counts(void);

#endif
