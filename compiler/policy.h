/*
 * policy.h: the user policy's types and entry points (policy.c, --policy FILE), a section of
 * plancc.h kept in a header of its own: only the driver, the option parser, phase 2's search
 * and policy.c itself include it.
 */
#ifndef PLANCC_POLICY_H
#define PLANCC_POLICY_H

#include "plancc.h"

// A user policy (schemas/policy.schema.json, docs/policy.md): nnScaler's op-trans and op-assign
// as constraints. The mesh keys pin the search's; each rule selects forward operators (by name
// glob, by the parameters they read, by type) and pins their split over the tp group, their
// recompute and their stage. The first rule that selects an operator holds it.
enum { PCC_POL_DP, PCC_POL_TP, PCC_POL_PP, PCC_POL_MB, PCC_POL_ZERO, PCC_POL_VS, PCC_POL_RC, PCC_POL_SCHED, PCC_POL_TQ, PCC_POL_KEYS };
typedef struct pcc_policy_rule {
    const char *ptr;            // its JSON Pointer, /rules/i
    const char *ops, *params;   // globs over operator names and the names of the parameters they read (NULL: any)
    int kind;                   // the operator type (pcc_op_kind), -1: any
    const char *split;          // the letter split over the tp group; "" replicated; NULL: open
    const char *split2, *split2_ptr; // with --tp2: split over its major axis, this letter over its minor; NULL: none
    int recompute;              // 0 or 1; -1: open
    int stage;                  // the stage (model chunk with virtual stages); -1: open
    bool all_stages;            // "stage": "all": interlaced, on every stage (pcc_strategy.interlaced)
    int coshard;                // co-shard ways (coshard.c); 0: none
    const char *coshard_letter; // its letter, NULL: coshard.c chooses
    const char *split_ptr, *recompute_ptr, *stage_ptr, *coshard_ptr;
    int matched;                // operators it holds (policy_resolve)
} pcc_policy_rule;
typedef struct pcc_policy {
    const char *file;
    int mesh[PCC_POL_KEYS];     // pinned values (recompute: pcc_recompute, schedule: pcc_pipe_sched); -1: open
    const char *mesh_ptr[PCC_POL_KEYS];
    int *stages;                // layers per stage (model chunk), in order; NULL: open
    int n_stages;
    const char *stages_ptr;
    pcc_policy_rule *rules;
    int n_rules;
    int *rule;                  // per forward op: the rule that holds it, -1 none (policy_resolve)
    bool pins_stage;            // a rule pins a stage
    bool coshards;              // a rule co-shards
    bool interlaces;            // a rule interlaces ("stage": "all")
    uint64_t hash;              // of the file's bytes (the plan's recorded options)
} pcc_policy;

// Reads o->policy (when set) into a policy in arena a and applies its mesh to o (a key the command
// line also gives must agree); o->search.policy points at it. PCC_ERR_INPUT (reported
// "plancc: FILE:/pointer: ...") on a file that is not a policy.
pcc_status policy_read(pcc_arena *a, pcc_options *o);
// Binds the rules to g's forward operators and checks them against the model: every rule selects
// one at least, a split names a letter the operator has and may split, recompute a block operator,
// stage a top-level one; with the template's mesh (not --auto) also the divisions and the
// stage counts. PCC_ERR_INPUT (reported) otherwise. A NULL policy is fine.
pcc_status policy_resolve(const pcc_options *o, const pcc_graph *g);
// Whether candidate cd of forward op `op` keeps the policy's split (the tp group has tp devices);
// recompute pins are recompute's (policy_recompute). True for an op no rule holds.
bool policy_keeps(const pcc_policy *p, int op, const pcc_cand *cd, int tp);
// The op's recompute pin: 0, 1, or -1 (open, or no policy).
int policy_recompute(const pcc_policy *p, int op);
// Whether the policy interlaces forward op `op` ("stage": "all"): false for an op no rule holds.
bool policy_interlaced(const pcc_policy *p, int op);
// The letter the policy splits forward op `op` along ("split"): NULL when open or replicated.
const char *policy_split_letter(const pcc_policy *p, int op);
// Whether the policy lets the op's tp candidates split the batch letter bname.
bool policy_splits(const pcc_policy *p, int op, const char *bname);
// Whether --auto's configuration k keeps the policy's mesh pins, divisions and stages.
bool policy_config_ok(const pcc_policy *p, const pcc_graph *g, const pcc_config *k, const pcc_layer *L, const double *flops,
                      int nl);
// The stages of the layers under the policy (chunks stages, flops per layer) into chunk: its
// /stages, or the balanced cut (the smallest largest FLOP sum) that keeps its pinned layers where
// pinned. 1: cut; 0: the policy leaves the stages open (chunk untouched, the caller cuts); -1: no
// cut keeps the pins (every stage needs a layer). Can't fail otherwise.
int policy_stages(const pcc_policy *p, const pcc_layer *L, const double *flops, int nl, int chunks, int *chunk);
// Phase 2 found no candidate of a forward op (oc: all of phase 1's for it) that keeps its pins
// (full: the mesh recomputes every block operator): quiet (a configuration of --auto's),
// PCC_ERR_INFEASIBLE; else the diagnostic at the rule's pin that fails, PCC_ERR_INPUT.
pcc_status policy_bare(const pcc_policy *p, const pcc_graph *g, const pcc_op_cands *oc, bool full, bool quiet);
// Why op has its split, for the plan's notes: the rule that pinned it or its recompute ("/rules/2"), else cause.
const char *policy_cause(const pcc_policy *p, int op, const char *cause);
// At the end of a compile: an infeasible one under a policy says so, naming the policy; st back.
pcc_status policy_blame(const pcc_options *o, pcc_status st);
// The co-shard ways of the first rule that selects forward op `op` of g (before autodiff and
// coshard.c's rewrite), with its letter (NULL: open) and the rule's pointer; 0 when that rule
// (or none) co-shards. Can't fail.
int policy_coshard(const pcc_policy *p, const pcc_graph *g, const pcc_op *op, const char **letter, const char **ptr);
// The text the plan records of the policy (" --policy HASH"), "" for none.
const char *policy_option(pcc_arena *a, const pcc_policy *p);

#endif
