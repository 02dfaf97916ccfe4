/*
 * coshard.h: co-shard's types and entry points (coshard.c), a section of plancc.h kept in a
 * header of its own: only the driver, the reports and coshard.c include it.
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

#endif
