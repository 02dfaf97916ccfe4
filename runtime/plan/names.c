/*
 * names.c: the plan library's name tables: the names the text form, plandump and every message
 * use for operators (runtime/ops.def's rows, in order), collectives (runtime/colls.def's),
 * dtypes, tensor kinds, initializers, data sources, instruction kinds, loop variables,
 * schedules and phases; each dtype's bytes; how many numbers a tensor's source takes; and what
 * colls.def says of each collective (plan_coll_lookup); and a rank's label in timelines
 * (plan_rank_label: plandump --trace and planrun --trace name their tracks alike).
 *
 * Each table is in the order of the enum whose values the file stores (plan.h says which), so
 * a value is its name's index; a lookup out of range gives NULL, never an assert, because the
 * values come from files. _Static_asserts tie each table's length to its enum.
 */
#include "plan.h"

#include <stdio.h>

static const char *const op_names[] = {
#define OP(E, name, imin, imax, nout, ann, flags) #name,
#include "../ops.def"
#undef OP
};
// The operator count, computed from ops.def on its own, against the table above.
enum {
#define OP(E, name, imin, imax, nout, ann, flags) OP_COUNTER_##E,
#include "../ops.def"
#undef OP
    OPS_IN_DEF
};
_Static_assert(sizeof(op_names) / sizeof(op_names[0]) == OPS_IN_DEF, "op_names must list every row of ops.def");

// The collectives, from runtime/colls.def: a plan stores the row's place (plan_coll).
static const char *const coll_names[] = {
#define COLL(E, name, pieces, shards, inplace, roots) #name,
#include "../colls.def"
#undef COLL
};
static const plan_coll_facts coll_facts[] = {
#define COLL(E, name, pieces, shards, inplace, roots) {PLAN_PIECES_##pieces, PLAN_SHARDS_##shards, inplace, PLAN_ROOTS_##roots},
#include "../colls.def"
#undef COLL
};
_Static_assert(sizeof(coll_names) / sizeof(coll_names[0]) == PLAN_COLL_COUNT, "one name per row of colls.def");
_Static_assert(sizeof(coll_facts) / sizeof(coll_facts[0]) == PLAN_COLL_COUNT, "one row of facts per row of colls.def");

static const char *const dtype_names[] = {"f32", "f16", "bf16", "i32"}; // pcc_dtype's order
static const uint32_t dtype_bytes[] = {4, 2, 2, 4};
static const char *const tensor_kind_names[] = {"input", "param", "activation", "grad", "state"}; // pcc_tensor_kind's
static const char *const init_names[] = {"none", "zeros", "ones", "normal", "uniform"};   // plan_init's
static const char *const data_names[] = {"none", "normal", "binary", "randint", "tokens", "targets", "arange", "teacher"}; // plan_data's
static const char *const insn_kind_names[] = {"compute", "coll", "send", "recv", "copy", "record", "wait", "loop"};
_Static_assert(sizeof(insn_kind_names) / sizeof(insn_kind_names[0]) == PLAN_I_KIND_COUNT, "one name per insn kind");
static const char *const loop_var_names[] = {"mb", "layer", "reverse_layer", "background", "background_hogwild"};
_Static_assert(sizeof(loop_var_names) / sizeof(loop_var_names[0]) == PLAN_LOOP_VAR_COUNT, "one name per loop variable");
static const char *const schedule_names[] = {"none", "gpipe", "1f1b", "1f1b_interleaved"};
static const char *const phase_names[] = {"none", "fwd", "bwd", "recompute", "opt"};
_Static_assert(sizeof(phase_names) / sizeof(phase_names[0]) == PLAN_PHASE_COUNT, "one name per plan_phase");

#define COUNT(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))
#define NAME_OR_NULL(table, v) ((v) < COUNT(table) ? (table)[v] : NULL)

const char *plan_op_name(uint32_t op) { return NAME_OR_NULL(op_names, op); }
const char *plan_coll_name(uint32_t coll) { return NAME_OR_NULL(coll_names, coll); }
const plan_coll_facts *plan_coll_lookup(uint32_t coll) { return coll < PLAN_COLL_COUNT ? &coll_facts[coll] : NULL; }
const char *plan_dtype_name(uint32_t dtype) { return NAME_OR_NULL(dtype_names, dtype); }
uint32_t plan_dtype_bytes(uint32_t dtype) { return dtype < COUNT(dtype_bytes) ? dtype_bytes[dtype] : 0; }
const char *plan_tensor_kind_name(uint32_t kind) { return NAME_OR_NULL(tensor_kind_names, kind); }
const char *plan_init_name(uint32_t init) { return NAME_OR_NULL(init_names, init); }
const char *plan_data_name(uint32_t data) { return NAME_OR_NULL(data_names, data); }
const char *plan_insn_kind_name(uint32_t kind) { return NAME_OR_NULL(insn_kind_names, kind); }
const char *plan_insn_name(const plan_insn *in) {
    return in->kind == PLAN_I_COMPUTE ? plan_op_name(in->code)
         : in->kind == PLAN_I_COLL    ? plan_coll_name(in->code)
                                      : plan_insn_kind_name(in->kind);
}
uint32_t plan_insns_events(const plan_insn *insns, uint32_t n) {
    uint32_t events = 0;
    for (uint32_t i = 0; i < n; i++)
        if ((insns[i].kind == PLAN_I_RECORD || insns[i].kind == PLAN_I_WAIT) && (uint32_t)insns[i].a + 1 > events)
            events = (uint32_t)insns[i].a + 1;
    return events;
}
const char *plan_loop_var_name(uint32_t var) { return NAME_OR_NULL(loop_var_names, var); }
const char *plan_schedule_name(uint32_t schedule) { return NAME_OR_NULL(schedule_names, schedule); }
const char *plan_phase_name(uint32_t phase) { return NAME_OR_NULL(phase_names, phase); }
void plan_rank_label(const plan *p, uint32_t q, char *buf, size_t n) {
    const plan_program *pg = &p->programs[p->ranks[q].program];
    int k = snprintf(buf, n, "rank %u: %s (", q, pg->name ? pg->name : "");
    for (uint32_t a = 0; a < p->meta.n_axes && k > 0 && (size_t)k < n; a++)
        k += snprintf(buf + k, n - (size_t)k, "%s%.8s %u", a ? ", " : "", p->meta.axis_names[a], p->ranks[q].coord[a]);
    if (k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, ")");
}
_Static_assert(COUNT(init_names) == PLAN_INIT_UNIFORM + 1, "one name per plan_init");
_Static_assert(COUNT(data_names) == PLAN_DATA_TEACHER + 1, "one name per plan_data");

unsigned plan_source_args(uint32_t kind, uint32_t source) {
    if (kind == PLAN_T_INPUT)
        return source == PLAN_DATA_TEACHER ? 2
             : source == PLAN_DATA_RANDINT || source == PLAN_DATA_TOKENS || source == PLAN_DATA_TARGETS ? 1 : 0;
    return source == PLAN_INIT_NORMAL || source == PLAN_INIT_UNIFORM ? 2 : 0;
}
