/*
 * check.c: the verifier's entry point, plan_check, which the compiler runs after emitting and
 * plandump and planrun run on every plan they read. checker.h lists the layers, a file each; this
 * file runs them in order: plan_validate (check_struct.c: every index and enum value, so that
 * the layers after it may index freely), the tensors' shapes, then per program its buffers
 * (check_flow.c), its background loop (check_loops.c), its instructions one by one
 * (check_insn.c), its ring attention (check_ring.c), its cross-entropy (check_vocab.c) and its data flow (check_flow.c), then
 * the communication between programs
 * (check_comm.c). A program is checked once, not once per rank: every rank that runs it runs
 * the same instructions. A program that was not loaded (a plan read for one rank) is skipped,
 * and so are its channels and groups.
 *
 * What a plan that passes has (each layer's essay has the details): every instruction has the
 * arity its kind or operator wants and moves shards as its kind does; every buffer slot lies
 * inside the arena and holds its piece's bytes; in each program every slot is written before
 * it is read and no write lands on bytes that a live slot still holds; every send has its
 * receive on the peer, of the same size, tensor, shard, micro-batch and block copy; every member
 * of a group issues the group's collectives in the same order, kinds, sizes and carried values;
 * every cross-stream read follows its write (record and wait); partial sums are reduced before
 * they are read; loops run what the graph implies; background rounds touch nothing the
 * foreground relies on.
 *
 * Order: the instructions of every program, then the communication between programs, then
 * each program's data flow (which also orders its streams by record and wait and follows
 * partial sums), so that a message or collective that carries the wrong value is named as such
 * rather than by what it breaks downstream.
 *
 * Limits: deadlocks that need several channels or groups together (rank A receives from B
 * before sending to C while ...) are not detected; operands are not checked against their
 * operator's annotation; a plan read for one rank is checked without the programs it did not
 * load. Every fault is PLAN_ERR_INVALID with a message that names the program (and the ranks
 * that run it), or the rank, the instruction and the fault; a plan that fails plan_validate
 * gives PLAN_ERR_INVALID with plan_validate's message.
 */
#include "checker.h"

static plan_status check_program(checker *c, uint32_t k) {
    const plan_program *pg = &c->p->programs[k];
    plan_status st = PLAN_OK;
    for (uint32_t b = 0; b < pg->n_buffers && !st; b++) st = check_buffer(c, k, b);
    if (!st) st = check_background(c, k);
    if (!st) st = check_insns(c, k);
    if (!st) st = check_ring(c, k);
    if (!st) st = check_vocab(c, k);
    return st;
}

plan_status plan_check(const plan *p, char *err, size_t err_n) {
    plan_status st = plan_validate(p, err, err_n);
    if (st) return PLAN_ERR_INVALID;
    uint64_t stride[PLAN_MAX_AXES + 1] = {0};
    uint64_t s = 1;
    for (int i = (int)p->meta.n_axes - 1; i >= 0; i--) {
        stride[i] = s;
        s *= p->meta.mesh[i];
    }
    checker c = {.p = p, .err = err, .err_n = err_n, .stride = stride};
    st = check_tensors(&c);
    for (uint32_t k = 0; k < p->n_programs && !st; k++)
        if (p->programs[k].name) st = check_program(&c, k);
    // What crosses programs before each program's data flow: a message or collective that
    // carries the wrong thing is named as such, not by what it then breaks downstream.
    if (!st) st = check_comm(&c);
    for (uint32_t k = 0; k < p->n_programs && !st; k++)
        if (p->programs[k].name) st = check_flow(&c, k);
    return st;
}
