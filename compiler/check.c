/*
 * check.c: the verifiers between the passes: graph_check on the IR, check_plan on the plan.
 *
 * graph_check runs after the loader and after every pass that rewrites the graph (the driver
 * calls it after model_load and the batch options, and after autodiff) and proves the
 * invariants the later passes rely on: indices in range and in scope, every tensor produced by
 * one operator before it is read (blocks respected), each operator's arity and its shapes by its
 * rule (ops.c), block bindings typed alike. Since the loader has already reported every input
 * fault with its JSON Pointer, a failure here is a bug in plancc and is reported as an internal
 * error.
 *
 * check_plan runs the plan's own verifier, plan_check (the plan library's, runtime/plan/check*.c:
 * every buffer written before it is read, live buffers never overlapping, every send matched,
 * every group's collectives in one order), on each plan the emitter writes, before the driver
 * decides whether it fits; a failure there is plancc's bug too. It then simulates one step
 * (runtime/sim.h), which runs the programs together as planrun does: a step that cannot finish
 * (ranks that wait on each other through several channels, collectives and groups, which
 * plan_check's rules, one channel at a time, do not see) is plancc's bug as well, refused
 * rather than written for planrun to find (sim_run's PLAN_ERR_INVALID: a deadlock, a message or
 * collective without its peers). The simulation is kept for the report; one it cannot run (more
 * instructions than it simulates, out of memory) is a line of the report instead.
 */
#include "plancc.h"
#include "sim.h"

#include <stdlib.h>
#include <string.h>

static pcc_status bad(const pcc_graph *g, const char *what, int idx) {
    fprintf(stderr, "%s: internal error: graph_check(%s): %s %d\n", pcc_progname,
            g->file ? g->file : "?", what, idx);
    return PCC_ERR_INTERNAL;
}

// An op may read top-level tensors and those of its block's family (graph_block_family).

static bool may_read(const pcc_graph *g, const pcc_op *op, const pcc_tensor *t) {
    if (t->block < 0) return true;
    return op->block >= 0 && graph_block_family(g, op->block) == graph_block_family(g, t->block);
}

static pcc_status check_blocks(const pcc_graph *g) {
    for (int b = 0; b < g->n_blocks; b++) {
        const pcc_block *bl = &g->blocks[b];
        if (bl->repeat < 1 || bl->first_op < 0 || bl->first_op + bl->n_ops > g->n_ops)
            return bad(g, "block range", b);
        for (int i = bl->first_op; i < bl->first_op + bl->n_ops; i++)
            if (g->ops[i].block != b) return bad(g, "op outside its block's range", i);
        for (int i = 0; i < bl->n_carry; i++) {
            const pcc_tensor *a = &g->tensors[bl->carry[i].inner], *c = &g->tensors[bl->carry[i].outer];
            if (a->rank != c->rank || a->dtype != c->dtype || memcmp(a->dims, c->dims, sizeof a->dims))
                return bad(g, "carry binds tensors of different shapes in block", b);
        }
        for (int i = 0; i < bl->n_in; i++)
            if (g->tensors[bl->in[i].inner].block != b || g->tensors[bl->in[i].outer].block >= 0)
                return bad(g, "in-binding crosses scopes in block", b);
        for (int i = 0; i < bl->n_out; i++)
            if (g->tensors[bl->out[i].outer].block >= 0 || g->tensors[bl->out[i].inner].block != b)
                return bad(g, "out-binding crosses scopes in block", b);
    }
    return PCC_OK;
}

pcc_status graph_check(const pcc_graph *g) {
    if (g->loss < 0 || g->loss >= g->n_tensors) return bad(g, "loss index", g->loss);
    pcc_status st = check_blocks(g);
    if (st) return st;
    // Every operand in range and in scope; every output produced by exactly this op; inputs
    // defined before use in program order (a tensor is defined once its producer ran, or at
    // start for inputs, params, states and block-bound tensors).
    unsigned char *defined = arena_alloc(g->arena, (size_t)g->n_tensors + 1);
    for (int t = 0; t < g->n_tensors; t++) {
        const pcc_tensor *x = &g->tensors[t];
        if (x->rank < 0 || x->rank > PCC_MAX_RANK) return bad(g, "tensor rank", t);
        for (int i = 0; i < x->rank; i++)
            if (x->dims[i] < 0 || x->dims[i] >= g->n_dims) return bad(g, "tensor dim", t);
        if (x->producer < 0) defined[t] = 1;
        if (x->producer >= g->n_ops) return bad(g, "tensor producer", t);
    }
    for (int b = 0; b < g->n_blocks; b++)
    {
        for (int i = 0; i < g->blocks[b].n_out; i++) defined[g->blocks[b].out[i].outer] = 0;
        for (int i = 0; i < g->blocks[b].n_acc; i++) defined[g->blocks[b].acc[i].outer] = 0;
    }
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        const pcc_op_info *info = &pcc_ops[op->kind];
        if (op->nin < info->in_min || op->nin > info->in_max) return bad(g, "op arity", o);
        if (info->nout >= 0 && op->nout != info->nout) return bad(g, "op output count", o);
        for (int i = 0; i < op->nin; i++) {
            int t = op->in[i];
            if (t < 0 || t >= g->n_tensors) return bad(g, "op input index", o);
            if (!defined[t]) return bad(g, "op reads a tensor before it is defined", o);
            if (!may_read(g, op, &g->tensors[t])) return bad(g, "op reads out of scope", o);
        }
        for (int i = 0; i < op->nout; i++) {
            int t = op->out[i];
            if (t < 0 || t >= g->n_tensors) return bad(g, "op output index", o);
            if (g->tensors[t].producer != o) return bad(g, "op output has another producer", o);
            if (g->tensors[t].block != op->block) return bad(g, "op writes out of scope", o);
            defined[t] = 1;
        }
        if (op_check_shapes(g, op, NULL)) return bad(g, "op shapes", o);
        // Leaving a block defines what it binds outward.
        if (op->block >= 0) {
            const pcc_block *bl = &g->blocks[op->block];
            if (o == bl->first_op + bl->n_ops - 1) {
                for (int i = 0; i < bl->n_out; i++) defined[bl->out[i].outer] = 1;
                for (int i = 0; i < bl->n_acc; i++) defined[bl->acc[i].outer] = 1;
            }
        }
    }
    if (!defined[g->loss]) return bad(g, "loss never defined", g->loss);
    return PCC_OK;
}

pcc_status check_plan(pcc_emitted *e) {
    char err[1024];
    plan_status ck = plan_check(e->p, err, sizeof err);
    if (ck == PLAN_ERR_LIMIT) { // not written unverified
        fprintf(stderr, "%s: the plan is too large for plan_check to verify, so it is not written: %s\n", pcc_progname, err);
        return PCC_ERR_LIMIT;
    }
    if (ck != PLAN_OK) {
        fprintf(stderr, "%s: internal error: the emitted plan fails plan_check: %s\n", pcc_progname, err);
        return PCC_ERR_INTERNAL;
    }
    sim_result *r = calloc(1, sizeof *r);
    plan_status st = r ? sim_run(e->p, NULL, r, err, sizeof err) : PLAN_ERR_IO;
    if (st == PLAN_OK) {
        e->sim = r;
        return PCC_OK;
    }
    bool oom = !r;
    sim_free(r);
    free(r);
    if (st == PLAN_ERR_INVALID) { // a deadlock, a collective or message without its peers
        fprintf(stderr, "%s: internal error: the emitted plan cannot finish a step: %s\n", pcc_progname, err);
        return PCC_ERR_INTERNAL;
    }
    snprintf(e->sim_err, sizeof e->sim_err, "%s", oom ? "out of memory" : err);
    return PCC_OK;
}

void emitted_free(pcc_emitted *e) {
    if (e->p) plan_free(e->p), free(e->p);
    if (e->sim) sim_free(e->sim), free(e->sim);
    e->p = NULL, e->sim = NULL, e->sim_err[0] = 0;
}
