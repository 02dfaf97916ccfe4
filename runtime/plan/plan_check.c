/*
 * plan_check.c: the verifier. plan_validate checks what the format
 * itself needs (every index and enum value in range, the mesh consistent, every param with an
 * initializer and every input with a data source, their numbers in range, shards that name axes
 * and dimensions that exist, layer slots inside their tensor's copies, loops nested); plan_check
 * adds what makes a plan runnable: arities, shards against their tensors and the instructions
 * that move data between them, the arena, the data flow inside each program, and the matching of
 * communication between programs.
 *
 * What plan_check proves, per program (once per program, not once per rank: every rank that
 * runs a program runs the same instructions):
 *   - every instruction has the arity its kind (or its operator, from runtime/ops.def) wants;
 *     send/recv name a peer other than themselves; a wait follows a record of its event; a
 *     collective's buffers have the sizes its kind implies for its group (all_gather: out = in x
 *     n, reduce_scatter: in = out x n, the others in = out);
 *   - every buffer has at least one slot of each kind and every slot lies inside the arena; a
 *     tensor buffer's shard divides each dimension it splits, and its bytes are its piece's;
 *   - a collective on a group over mesh axes moves its tensor from one shard to the one its kind
 *     makes (all_reduce V -> R, all_gather D(i) -> R, reduce_scatter V -> D(i), all_to_all
 *     D(i) -> D(j), broadcast unchanged) on the group's axes and keeps the others; in place, only
 *     all_reduce, declared R there; a copy between tensor buffers keeps its tensor and takes a
 *     piece of src (an axis R -> D(i) or V, dst's splits of each dimension extending src's); a
 *     copy with a scratch buffer copies equal sizes;
 *   - the micro-batch an instruction touches (the innermost mb loop's variable + mb_delta, 0
 *     outside any mb loop) lies in 0..micro_batches-1;
 *   - data flow, in program order with loops expanded: every buffer slot is written before it
 *     is read; no write lands on bytes of another slot that still holds data to be read (live
 *     buffers never overlap); an instruction's outputs overlap neither each other nor its inputs
 *     (unless it is the same slot: in place); buffers of input, param and state tensors, and the
 *     outputs of accumulating operators (which the runtime zeroes once per step), hold data when
 *     the step starts, may not overlap each other, and param and state buffers must survive to
 *     the end of the step;
 *   - send/recv groups: a maximal run of sends and receives on one stream (loops expanded; a
 *     loop boundary does not end it) is one group, whose receives may land before its sends
 *     read; so no receive of a group writes bytes that a send of the same group reads, in
 *     either order (the sequential data flow above cannot see this).
 * Across programs (each (program, peer program) channel and each (group, program pair) once):
 *   - every send has its receive: for each rank, the rank at the send's offset along its mesh
 *     axis exists, and its program receives from this rank, along the same axis and with the
 *     same tag, the same number of messages of the same sizes in the same order, each into a buffer of the same tensor (or
 *     scratch) with the same shard;
 *   - every member of a group issues that group's collectives in the same order, with the same
 *     kinds and sizes (members that run the same program agree by construction; members that
 *     run different programs are compared), and no rank outside an explicit group uses it.
 *
 * Loops are expanded symbolically. A loop over micro-batches (or layers) touches buffer slots
 * (var + delta) mod slots, so the pattern of writes and reads repeats with period P, the least
 * common multiple of the slot counts its body uses through that variable. After P iterations
 * every slot the loop touches has been written inside it, and the relative order of all last
 * writes is the same after iteration j as after j + P; every check above depends on that order
 * only. So a loop of count > 3P is checked by its first 2P iterations and its last ones (from
 * the first multiple of P at or after count - P): the same faults are found, and the state after
 * the loop is the one the full loop leaves. Communication is compared by walking both programs
 * in step, loops multiplied out, without storing the sequences.
 *
 * Limits: streams are taken in program order (the check does not prove that events order the
 * streams correctly, only that each wait has a record before it: a write on one stream while
 * another stream still reads the bytes, or a send on one stream of a buffer that another
 * stream writes, is not found; a group of sends and receives is checked against itself only,
 * which is what a single-stream pipeline needs); deadlocks that need several
 * channels or groups together (rank A receives from B before sending to C while ...) are not
 * detected; a plan read for one rank is checked without the programs it did not load (their
 * channels and groups are skipped). Every fault is PLAN_ERR_INVALID with a message that names
 * the program (and the ranks that run it), or the rank, the instruction and the fault.
 */
#include "plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- operator arities, from the operator table ---- */

#define USER 0u
#define INTERNAL 0u
#define ELEMENTWISE 0u
#define MATMUL 0u
#define LOSS 0u
#define INPLACE 1u
#define BCAST 0u
#define RNG 0u
typedef struct op_arity {
    int in_min, in_max, out; // out -1: as many as the instruction has
    bool inplace;            // updates its inputs in place (no outputs)
} op_arity;
static const op_arity op_arities[] = {
#define OP(E, name, imin, imax, nout, ann, flags) {imin, imax, nout, ((flags) & INPLACE) != 0},
#include "../ops.def"
#undef OP
};
#undef USER
#undef INTERNAL
#undef ELEMENTWISE
#undef MATMUL
#undef LOSS
#undef INPLACE
#undef BCAST
#undef RNG
#define N_OPS ((uint32_t)(sizeof(op_arities) / sizeof(op_arities[0])))

static plan_status vfail(plan_status st, char *err, size_t err_n, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static plan_status vfail(plan_status st, char *err, size_t err_n, const char *fmt, va_list ap) {
    if (err && err_n) vsnprintf(err, err_n, fmt, ap);
    return st;
}

/* ---- plan_validate ---- */

typedef struct vctx {
    const plan *p;
    char *err;
    size_t err_n;
} vctx;

static plan_status bad(vctx *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static plan_status bad(vctx *v, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    plan_status st = vfail(PLAN_ERR_FORMAT, v->err, v->err_n, fmt, ap);
    va_end(ap);
    return st;
}

static const char *name_or(const char *s, const char *dflt) { return s ? s : dflt; }

static bool ident_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

static plan_status validate_axis_names(vctx *v) {
    const plan_meta *m = &v->p->meta;
    for (uint32_t i = 0; i < m->n_axes; i++) {
        const char *s = m->axis_names[i];
        size_t len = strnlen(s, sizeof(m->axis_names[i]));
        if (len == sizeof(m->axis_names[i])) return bad(v, "mesh axis %u: the name is not NUL-terminated within 8 bytes", i);
        if (len == 0) return bad(v, "mesh axis %u has no name", i);
        for (size_t j = 0; j < len; j++)
            if (!ident_char(s[j])) return bad(v, "mesh axis %u: the name has a character other than a letter, digit or _", i);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(s, m->axis_names[j]) == 0) return bad(v, "mesh axes %u and %u are both named \"%s\"", j, i, s);
    }
    return PLAN_OK;
}

static plan_status validate_meta(vctx *v) {
    const plan_meta *m = &v->p->meta;
    if (!memchr(m->compiler, 0, sizeof(m->compiler))) return bad(v, "the compiler name is not NUL-terminated within 32 bytes");
    if (m->n_axes > PLAN_MAX_AXES) return bad(v, "%u mesh axes, at most %d", m->n_axes, PLAN_MAX_AXES);
    uint64_t world = 1;
    for (uint32_t i = 0; i < m->n_axes; i++) {
        if (!m->mesh[i]) return bad(v, "mesh axis %u has size 0", i);
        world *= m->mesh[i];
        if (world > UINT32_MAX) return bad(v, "the mesh has more than 2^32 ranks");
    }
    if (world != m->world) return bad(v, "the mesh has %llu ranks, but world is %u", (unsigned long long)world, m->world);
    if (!m->micro_batches) return bad(v, "micro_batches is 0");
    if ((uint32_t)m->schedule > PLAN_SCHED_1F1B_INTERLEAVED) return bad(v, "schedule %u unknown", (uint32_t)m->schedule);
    if (m->zero_stage > 3) return bad(v, "zero_stage %u, at most 3", m->zero_stage);
    if (!isfinite(m->model_flops) || signbit(m->model_flops) || !isfinite(m->device_peak_flops) || signbit(m->device_peak_flops))
        return bad(v, "model_flops %g and device_peak_flops %g must be finite and >= 0", m->model_flops, m->device_peak_flops);
    return validate_axis_names(v);
}

// A param's initializer and its numbers (normal: finite mean, finite std >= 0; uniform:
// finite low < high).
static plan_status validate_init(vctx *v, uint32_t i, const plan_tensor *t) {
    const char *name = name_or(t->name, "?");
    if (t->source == PLAN_INIT_NONE)
        return bad(v, "tensor %u \"%s\": a param needs an initializer (init zeros, ones, normal or uniform)", i, name);
    if (!plan_init_name(t->source)) return bad(v, "tensor %u \"%s\": init %u unknown", i, name, t->source);
    if (t->source == PLAN_INIT_NORMAL && !(isfinite(t->a) && isfinite(t->b) && t->b >= 0))
        return bad(v, "tensor %u \"%s\": init normal wants a finite mean and a finite std >= 0, but has mean %g, std %g", i,
                   name, t->a, t->b);
    if (t->source == PLAN_INIT_UNIFORM && !(isfinite(t->a) && isfinite(t->b) && t->a < t->b))
        return bad(v, "tensor %u \"%s\": init uniform wants finite low < high, but has low %g, high %g", i, name, t->a, t->b);
    return PLAN_OK;
}

// An input's data source and its bound (randint, tokens, targets: an integral high, 1 to 2^31;
// teacher: a finite scale >= 0 and a finite bias, on a float tensor of rank 1 or more).
static plan_status validate_data(vctx *v, uint32_t i, const plan_tensor *t) {
    const char *name = name_or(t->name, "?");
    if (t->source == PLAN_DATA_NONE)
        return bad(v, "tensor %u \"%s\": an input needs a data source (data normal, binary, randint, tokens, targets, arange or teacher)",
                   i, name);
    if (!plan_data_name(t->source)) return bad(v, "tensor %u \"%s\": data %u unknown", i, name, t->source);
    if (t->source == PLAN_DATA_TEACHER) {
        if (!(isfinite(t->a) && isfinite(t->b) && t->a >= 0))
            return bad(v, "tensor %u \"%s\": data teacher wants a finite scale >= 0 and a finite bias, but has %g %g", i, name,
                       t->a, t->b);
        if (t->dtype == 3 || t->rank == 0)
            return bad(v, "tensor %u \"%s\": data teacher fills a float tensor of rank 1 or more", i, name);
        return PLAN_OK;
    }
    if (plan_source_args(t->kind, t->source) && !(t->a >= 1 && t->a <= 2147483648.0 && t->a == floor(t->a)))
        return bad(v, "tensor %u \"%s\": data %s wants an integral high (the exclusive bound) from 1 to 2^31, but has %g", i,
                   name, plan_data_name(t->source), t->a);
    return PLAN_OK;
}

// Only params have an initializer and only inputs a data source.
static plan_status validate_source(vctx *v, uint32_t i, const plan_tensor *t) {
    if (t->kind == PLAN_T_PARAM) return validate_init(v, i, t);
    if (t->kind == PLAN_T_INPUT) return validate_data(v, i, t);
    if (t->source)
        return bad(v, "tensor %u \"%s\" (%s): only a param takes an init and only an input data, but its source is %u", i,
                   name_or(t->name, "?"), plan_tensor_kind_name(t->kind), t->source);
    return PLAN_OK;
}

static plan_status validate_tensors(vctx *v) {
    const plan *p = v->p;
    if (p->n_tensors && !p->tensors) return bad(v, "%u tensors but no array", p->n_tensors);
    for (uint32_t i = 0; i < p->n_tensors; i++) {
        const plan_tensor *t = &p->tensors[i];
        if (!plan_dtype_name(t->dtype)) return bad(v, "tensor %u: dtype %u unknown", i, t->dtype);
        if (!plan_tensor_kind_name(t->kind)) return bad(v, "tensor %u: kind %u unknown", i, t->kind);
        if (t->rank > PLAN_MAX_RANK) return bad(v, "tensor %u: rank %u, at most %d", i, t->rank, PLAN_MAX_RANK);
        if (t->copies < 1) return bad(v, "tensor %u: copies 0, at least 1", i);
        plan_status st = validate_source(v, i, t);
        if (st) return st;
    }
    if (p->meta.loss != PLAN_NONE && p->meta.loss >= p->n_tensors)
        return bad(v, "the loss tensor %u is out of range (%u tensors)", p->meta.loss, p->n_tensors);
    return PLAN_OK;
}

static plan_status validate_group(vctx *v, uint32_t g) {
    const plan *p = v->p;
    const plan_group *gr = &p->groups[g];
    if (p->meta.n_axes < 32 && gr->axes >> p->meta.n_axes)
        return bad(v, "group %u: axes mask 0x%x names axes the mesh does not have (%u axes)", g, gr->axes, p->meta.n_axes);
    if (gr->axes && gr->n_ranks) return bad(v, "group %u: spans mesh axes and also lists %u ranks", g, gr->n_ranks);
    if (gr->axes) return PLAN_OK;
    if (!gr->n_ranks || !gr->ranks) return bad(v, "group %u: an explicit group (axes 0) without ranks", g);
    for (uint32_t j = 0; j < gr->n_ranks; j++) {
        if (gr->ranks[j] >= p->meta.world)
            return bad(v, "group %u: rank %u out of range (world %u)", g, gr->ranks[j], p->meta.world);
        if (j && gr->ranks[j] <= gr->ranks[j - 1])
            return bad(v, "group %u: ranks not strictly ascending (%u after %u)", g, gr->ranks[j], gr->ranks[j - 1]);
    }
    return PLAN_OK;
}

static plan_status validate_ranks(vctx *v) {
    const plan *p = v->p;
    if (p->n_ranks != p->meta.world) return bad(v, "the rank table has %u ranks, world is %u", p->n_ranks, p->meta.world);
    if (p->n_ranks && !p->ranks) return bad(v, "%u ranks but no array", p->n_ranks);
    for (uint32_t r = 0; r < p->n_ranks; r++) {
        if (p->ranks[r].program >= p->n_programs)
            return bad(v, "rank %u: program %u out of range (%u programs)", r, p->ranks[r].program, p->n_programs);
        uint32_t rest = r;
        for (int i = (int)p->meta.n_axes - 1; i >= 0; i--) {
            uint32_t want = rest % p->meta.mesh[i];
            rest /= p->meta.mesh[i];
            if (p->ranks[r].coord[i] != want)
                return bad(v, "rank %u: coordinate %d is %u, its mesh digit is %u", r, i, p->ranks[r].coord[i], want);
        }
    }
    return PLAN_OK;
}

// The fields of instruction i that depend on its kind: op, collective, group, axis, event, loop.
static plan_status validate_fields(vctx *v, uint32_t k, uint32_t i) {
    const plan *p = v->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    const char *kn = plan_insn_kind_name(in->kind);
    switch (in->kind) {
    case PLAN_I_COMPUTE:
        if (in->code >= N_OPS)
            return bad(v, "program %u: insn %u (%s): operator %u unknown (%u operators)", k, i, kn, in->code, N_OPS);
        if (in->attrs != PLAN_NONE && in->attrs >= pg->n_attrs)
            return bad(v, "program %u: insn %u (%s): attrs %u out of range (%u attrs)", k, i, kn, in->attrs, pg->n_attrs);
        return PLAN_OK;
    case PLAN_I_COLL:
        if (!plan_coll_name(in->code)) return bad(v, "program %u: insn %u (%s): collective %u unknown", k, i, kn, in->code);
        if (in->a < 0 || (uint32_t)in->a >= p->n_groups)
            return bad(v, "program %u: insn %u (%s): group %d out of range (%u groups)", k, i, kn, in->a, p->n_groups);
        return PLAN_OK;
    case PLAN_I_SEND:
    case PLAN_I_RECV:
        if (in->a < 0 || (uint32_t)in->a >= p->meta.n_axes)
            return bad(v, "program %u: insn %u (%s): mesh axis %d out of range (%u axes)", k, i, kn, in->a, p->meta.n_axes);
        return PLAN_OK;
    case PLAN_I_RECORD:
    case PLAN_I_WAIT:
        if (in->a < 0 || (uint32_t)in->a >= pg->n_events)
            return bad(v, "program %u: insn %u (%s): event %d out of range (%u events)", k, i, kn, in->a, pg->n_events);
        return PLAN_OK;
    case PLAN_I_COPY: return PLAN_OK;
    default: // PLAN_I_LOOP
        if (!plan_loop_var_name(in->code)) return bad(v, "program %u: insn %u (loop): loop variable %u unknown", k, i, in->code);
        if (in->a < (plan_loop_is_background(in->code) ? 0 : 1))
            return bad(v, "program %u: insn %u (loop): count %d, at least %d", k, i, in->a, plan_loop_is_background(in->code) ? 0 : 1);
        if (in->b < 1) return bad(v, "program %u: insn %u (loop): body of %d instructions, at least 1", k, i, in->b);
        return PLAN_OK;
    }
}

static plan_status validate_insn(vctx *v, uint32_t k, uint32_t i) {
    const plan_program *pg = &v->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    const char *kn = plan_insn_kind_name(in->kind);
    if (!kn) return bad(v, "program %u: insn %u: kind %u unknown", k, i, in->kind);
    if (in->kind != PLAN_I_LOOP && in->stream >= pg->n_streams)
        return bad(v, "program %u: insn %u (%s): stream %u out of range (%u streams)", k, i, kn, in->stream, pg->n_streams);
    if (!isfinite(in->t_s) || signbit(in->t_s))
        return bad(v, "program %u: insn %u (%s): time %g s, expected finite and >= 0", k, i, kn, (double)in->t_s);
    if (in->phase >= PLAN_PHASE_COUNT) return bad(v, "program %u: insn %u (%s): phase %u unknown", k, i, kn, in->phase);
    if ((uint64_t)in->args + in->nargs > pg->n_args)
        return bad(v, "program %u: insn %u (%s): arguments %u..%llu out of range (%u arguments)", k, i, kn, in->args,
                   (unsigned long long)in->args + in->nargs - 1, pg->n_args);
    for (uint32_t j = 0; j < in->nargs; j++)
        if (pg->args[in->args + j] >= pg->n_buffers)
            return bad(v, "program %u: insn %u (%s): arg %u: buffer %u out of range (%u buffers)", k, i, kn, j,
                       pg->args[in->args + j], pg->n_buffers);
    return validate_fields(v, k, i);
}

// Each loop's body lies inside the program and inside the loop around it; depth is bounded.
static plan_status validate_loops(vctx *v, uint32_t k) {
    const plan_program *pg = &v->p->programs[k];
    uint32_t end[PLAN_MAX_LOOP_DEPTH];
    int depth = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        while (depth && i >= end[depth - 1]) depth--;
        const plan_insn *in = &pg->insns[i];
        if (in->kind != PLAN_I_LOOP) continue;
        uint64_t e = (uint64_t)i + 1 + (uint64_t)in->b;
        if (depth && e > end[depth - 1])
            return bad(v, "program %u: insn %u (loop): its body of %d runs past the end of the enclosing loop's body (insn %u)",
                       k, i, in->b, end[depth - 1]);
        if (e > pg->n_insns)
            return bad(v, "program %u: insn %u (loop): its body of %d runs past the end of the program (%u insns)", k, i,
                       in->b, pg->n_insns);
        if (depth == PLAN_MAX_LOOP_DEPTH) return bad(v, "program %u: insn %u (loop): loops nested deeper than %d", k, i, PLAN_MAX_LOOP_DEPTH);
        end[depth++] = (uint32_t)e;
    }
    return PLAN_OK;
}

// A buffer's tensor and dtype; its shard names mesh axes and (for a tensor) dimensions that
// exist, and is all R for scratch; its layer slots hold copies its tensor has.
static plan_status validate_buffer(vctx *v, uint32_t k, uint32_t b) {
    const plan *p = v->p;
    const plan_buffer *bf = &p->programs[k].buffers[b];
    if (bf->tensor != PLAN_NONE && bf->tensor >= p->n_tensors)
        return bad(v, "program %u: buffer %u: tensor %u out of range (%u tensors)", k, b, bf->tensor, p->n_tensors);
    if (!plan_dtype_name(bf->dtype)) return bad(v, "program %u: buffer %u: dtype %u unknown", k, b, bf->dtype);
    const plan_tensor *t = bf->tensor == PLAN_NONE ? NULL : &p->tensors[bf->tensor];
    char shard[80];
    plan_shard_text(p, bf->shard, shard, sizeof(shard));
    for (uint32_t a = 0; a < PLAN_MAX_AXES; a++) {
        uint8_t m = bf->shard.map[a];
        if (m != PLAN_SHARD_R && a >= p->meta.n_axes)
            return bad(v, "program %u: buffer %u: shard %s names mesh axis %u, past the mesh (%u axes)", k, b, shard, a, p->meta.n_axes);
        if (m != PLAN_SHARD_R && !t)
            return bad(v, "program %u: buffer %u: shard %s on a scratch buffer, which holds no tensor (it is all R)", k, b, shard);
        if (t && m >= PLAN_SHARD_D(0) && m - PLAN_SHARD_D(0) >= t->rank)
            return bad(v, "program %u: buffer %u: shard %s splits dimension %d of tensor %u, which has rank %u", k, b, shard,
                       m - PLAN_SHARD_D(0), bf->tensor, t->rank);
    }
    if (bf->flags & ~PLAN_BUF_PERSIST) return bad(v, "program %u: buffer %u: flags %u (known: 1, persist)", k, b, bf->flags);
    if (!t && bf->flags) return bad(v, "program %u: buffer %u: a scratch buffer cannot persist (it holds no tensor)", k, b);
    if (!t && bf->layer_base)
        return bad(v, "program %u: buffer %u: layer_base %u on a scratch buffer, which holds no block copy", k, b, bf->layer_base);
    if (t && (uint64_t)bf->layer_base + bf->layer_slots > t->copies)
        return bad(v, "program %u: buffer %u: layer_base %u + layer_slots %u is more than the %u copies of tensor %u", k, b,
                   bf->layer_base, bf->layer_slots, t->copies, bf->tensor);
    return PLAN_OK;
}

static plan_status validate_program(vctx *v, uint32_t k) {
    const plan_program *pg = &v->p->programs[k];
    if (!pg->name) {
        if (pg->n_buffers || pg->n_insns || pg->n_args || pg->n_attrs) return bad(v, "program %u has no name", k);
        return PLAN_OK; // not loaded (a plan read for one rank)
    }
    if (pg->n_streams < 1 || pg->n_streams > 8) return bad(v, "program %u: %u streams, expected 1 to 8", k, pg->n_streams);
    if ((pg->n_buffers && !pg->buffers) || (pg->n_insns && !pg->insns) || (pg->n_args && !pg->args) ||
        (pg->n_attrs && !pg->attrs))
        return bad(v, "program %u: a count is not zero but its array is NULL", k);
    plan_status st = PLAN_OK;
    for (uint32_t b = 0; b < pg->n_buffers && !st; b++) st = validate_buffer(v, k, b);
    for (uint32_t i = 0; i < pg->n_insns && !st; i++) st = validate_insn(v, k, i);
    return st ? st : validate_loops(v, k);
}

plan_status plan_validate(const plan *p, char *err, size_t err_n) {
    vctx v = {p, err, err_n};
    plan_status st = validate_meta(&v);
    if (!st) st = validate_tensors(&v);
    if (!st && p->n_groups && !p->groups) st = bad(&v, "%u groups but no array", p->n_groups);
    for (uint32_t g = 0; g < p->n_groups && !st; g++) st = validate_group(&v, g);
    if (!st && p->n_programs && !p->programs) st = bad(&v, "%u programs but no array", p->n_programs);
    if (!st) st = validate_ranks(&v);
    for (uint32_t k = 0; k < p->n_programs && !st; k++) st = validate_program(&v, k);
    return st;
}

// "[16,8]"
static void shape_text(const int64_t *v, int rank, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < rank && at < n; d++) at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? "," : "", (long long)v[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

// "dp+tp": the mesh axes in mask, joined by +.
static void axes_text(const plan *p, uint32_t mask, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (uint32_t a = 0; a < p->meta.n_axes && at < n; a++)
        if (mask >> a & 1u) at += (size_t)snprintf(buf + at, n - at, "%s%.8s", at ? "+" : "", p->meta.axis_names[a]);
}

// The axes on which s splits dimension d, as a mask.
static uint32_t split_axes(const plan *p, plan_shard s, int d) {
    uint32_t mask = 0;
    for (uint32_t a = 0; a < p->meta.n_axes && a < PLAN_MAX_AXES; a++)
        if (s.map[a] == PLAN_SHARD_D(d)) mask |= 1u << a;
    return mask;
}

// plan_shard_text, or "all R" for a shard that splits nothing.
static void shard_desc(const plan *p, plan_shard s, char *buf, size_t n) {
    plan_shard_text(p, s, buf, n);
    if (!buf[0]) snprintf(buf, n, "all R");
}

// One axis's entry as the text form writes it: "R" (which the text form leaves out), "v", "d1".
static const char *shard_value(uint8_t v, char buf[8]) {
    if (v == PLAN_SHARD_R) return "R";
    if (v == PLAN_SHARD_V) return "v";
    snprintf(buf, 8, "d%u", v - PLAN_SHARD_D(0));
    return buf;
}

// "buffer 3 (param "w")" or "buffer 2 (scratch)".
static void buffer_desc(const plan *p, const plan_program *pg, uint32_t b, char *buf, size_t n) {
    const plan_buffer *bf = &pg->buffers[b];
    if (bf->tensor == PLAN_NONE) snprintf(buf, n, "buffer %u (scratch)", b);
    else
        snprintf(buf, n, "buffer %u (%s \"%s\")", b, plan_tensor_kind_name(p->tensors[bf->tensor].kind),
                 name_or(p->tensors[bf->tensor].name, "?"));
}

/* ---- plan_check: messages ---- */

typedef struct checker {
    const plan *p;
    char *err;
    size_t err_n;
    uint64_t *stride;   // per mesh axis: the rank distance between neighbours along it
} checker;

// "0-3,8-11" for the ranks that run program k, cut short with "..." past about n bytes.
static void rank_list(const plan *p, uint32_t k, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (uint32_t r = 0; r < p->n_ranks; r++) {
        if (p->ranks[r].program != k) continue;
        uint32_t e = r;
        while (e + 1 < p->n_ranks && p->ranks[e + 1].program == k) e++;
        if (at + 24 >= n) {
            snprintf(buf + at, n - at, ",...");
            return;
        }
        at += (size_t)snprintf(buf + at, n - at, e == r ? "%s%u" : "%s%u-%u", at ? "," : "", r, e);
        r = e;
    }
    if (!at) snprintf(buf, n, "none");
}

// program k "name" (ranks ...)
static void prog_label(const plan *p, uint32_t k, char *buf, size_t n) {
    char ranks[96];
    rank_list(p, k, ranks, sizeof(ranks));
    snprintf(buf, n, "program %u \"%s\" (ranks %s)", k, name_or(p->programs[k].name, "?"), ranks);
}

static plan_status cfail(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static plan_status cfail(checker *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    plan_status st = vfail(PLAN_ERR_INVALID, c->err, c->err_n, fmt, ap);
    va_end(ap);
    return st;
}

// "program k "name" (ranks ...): insn i (kind): " + the message.
static plan_status ifail(checker *c, uint32_t k, uint32_t i, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static plan_status ifail(checker *c, uint32_t k, uint32_t i, const char *fmt, ...) {
    char label[160], msg[600];
    prog_label(c->p, k, label, sizeof(label));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return cfail(c, "%s: insn %u (%s): %s", label, i, plan_insn_name(&c->p->programs[k].insns[i]), msg);
}

// "program k "name" (ranks ...): buffer b: " + the message.
static plan_status bfail(checker *c, uint32_t k, uint32_t b, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static plan_status bfail(checker *c, uint32_t k, uint32_t b, const char *fmt, ...) {
    char label[160], msg[600];
    prog_label(c->p, k, label, sizeof(label));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return cfail(c, "%s: buffer %u: %s", label, b, msg);
}

static plan_status pfail(checker *c, uint32_t k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- plan_check: items one by one ---- */

static plan_status check_tensors(checker *c) {
    for (uint32_t i = 0; i < c->p->n_tensors; i++) {
        const plan_tensor *t = &c->p->tensors[i];
        for (int d = 0; d < t->rank; d++)
            if (t->shape[d] < 1)
                return cfail(c, "tensor %u \"%s\": dimension %d is %lld, at least 1", i, name_or(t->name, "?"), d,
                             (long long)t->shape[d]);
    }
    return PLAN_OK;
}

// The end of the buffer's last slot; false on overflow.
static bool buffer_end(const plan_buffer *b, uint64_t *end) {
    uint64_t m, l;
    return !__builtin_mul_overflow((uint64_t)(b->mb_slots - 1), b->mb_stride, &m) &&
           !__builtin_mul_overflow((uint64_t)(b->layer_slots - 1), b->layer_stride, &l) &&
           !__builtin_add_overflow(b->offset, m, end) && !__builtin_add_overflow(*end, l, end) &&
           !__builtin_add_overflow(*end, b->bytes, end);
}

// A tensor buffer's shard against its tensor: each split divides its dimension (shard-divides),
// and the buffer's bytes are those of the piece it holds (shard-bytes).
static plan_status check_shard(checker *c, uint32_t k, uint32_t b) {
    const plan *p = c->p;
    const plan_buffer *bf = &p->programs[k].buffers[b];
    if (bf->tensor == PLAN_NONE) return PLAN_OK;
    const plan_tensor *t = &p->tensors[bf->tensor];
    char who[160], axes[48], shard[80], whole[200], piece[200];
    buffer_desc(p, &p->programs[k], b, who, sizeof(who));
    for (int d = 0; d < t->rank; d++) {
        uint64_t w = plan_shard_ways(p, bf->shard, d);
        if (w <= INT64_MAX && t->shape[d] % (int64_t)w == 0) continue;
        axes_text(p, split_axes(p, bf->shard, d), axes, sizeof(axes));
        return pfail(c, k, "%s: dimension %d (%lld) is split %llu ways (axes %s), which does not divide it", who, d,
                     (long long)t->shape[d], (unsigned long long)w, axes);
    }
    uint64_t want = plan_buffer_expected_bytes(p, bf);
    if (want && bf->bytes == want) return PLAN_OK;
    int64_t local[PLAN_MAX_RANK];
    plan_shard_local_shape(p, t, bf->shard, local);
    shape_text(t->shape, t->rank, whole, sizeof(whole));
    shape_text(local, t->rank, piece, sizeof(piece));
    plan_shard_text(p, bf->shard, shard, sizeof(shard));
    char is[48];
    if (want) snprintf(is, sizeof(is), "%llu bytes", (unsigned long long)want);
    else snprintf(is, sizeof(is), "more than 2^64 bytes");
    if (!shard[0])
        return pfail(c, k, "%s: %llu bytes, but the whole of %s %s (no axis splits it) is %s", who,
                     (unsigned long long)bf->bytes, whole, plan_dtype_name(bf->dtype), is);
    return pfail(c, k, "%s: %llu bytes, but its shard of %s %s on %s is %s = %s", who, (unsigned long long)bf->bytes,
                 whole, plan_dtype_name(bf->dtype), shard, piece, is);
}

static plan_status check_buffer(checker *c, uint32_t k, uint32_t b) {
    const plan_program *pg = &c->p->programs[k];
    const plan_buffer *bf = &pg->buffers[b];
    if (!bf->mb_slots || !bf->layer_slots)
        return bfail(c, k, b, "mb_slots %u, layer_slots %u: both must be at least 1", bf->mb_slots, bf->layer_slots);
    uint64_t end = 0;
    if (!buffer_end(bf, &end))
        return bfail(c, k, b, "slot (mb %u, layer %u) ends past byte 2^64, past the end of the arena (%llu bytes)",
                     bf->mb_slots - 1, bf->layer_slots - 1, (unsigned long long)pg->arena_bytes);
    if (end > pg->arena_bytes)
        return bfail(c, k, b, "slot (mb %u, layer %u) ends at byte %llu, past the end of the arena (%llu bytes)",
                     bf->mb_slots - 1, bf->layer_slots - 1, (unsigned long long)end, (unsigned long long)pg->arena_bytes);
    return check_shard(c, k, b);
}

// The arity of instruction i: an operator's inputs and outputs (ops.def), pairs for a collective
// (in_1..in_k, out_1..out_k: a bucket of k), 2 for a copy (src, dst), 1 for send and recv, none
// for the others.
static plan_status check_arity(checker *c, uint32_t k, uint32_t i) {
    const plan_insn *in = &c->p->programs[k].insns[i];
    if (in->kind == PLAN_I_COMPUTE) {
        const op_arity *a = &op_arities[in->code];
        int n = in->nargs;
        bool ok = a->out >= 0 ? n - a->out >= a->in_min && n - a->out <= a->in_max : n > a->in_max;
        if (ok) return PLAN_OK;
        if (a->out >= 0)
            return ifail(c, k, i, "%d buffers, but it takes %d to %d inputs and %d output%s", n, a->in_min, a->in_max,
                         a->out, a->out == 1 ? "" : "s");
        return ifail(c, k, i, "%d buffers, but it takes %d inputs and at least one output", n, a->in_max);
    }
    if (in->kind == PLAN_I_COLL) {
        if (in->nargs >= 2 && in->nargs % 2 == 0 && in->nargs / 2 <= PLAN_MAX_BUCKET) return PLAN_OK;
        return ifail(c, k, i, "%u buffers, but it takes pairs (in..., out...): 2 to %d, an even number", in->nargs,
                     2 * PLAN_MAX_BUCKET);
    }
    static const int want[PLAN_I_KIND_COUNT] = {[PLAN_I_SEND] = 1, [PLAN_I_RECV] = 1, [PLAN_I_COPY] = 2};
    if (in->nargs != want[in->kind])
        return ifail(c, k, i, "%u buffers, but it takes %d", in->nargs, want[in->kind]);
    return PLAN_OK;
}

// A collective's buffers against its kind and group: all_gather out = in x n, reduce_scatter
// in = out x n, the others in = out.
static plan_status check_coll_sizes(checker *c, uint32_t k, uint32_t i, uint32_t j) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    uint64_t n = plan_group_size(c->p, (uint32_t)in->a);
    uint32_t np = in->nargs / 2u;
    uint64_t bi = pg->buffers[pg->args[in->args + j]].bytes, bo = pg->buffers[pg->args[in->args + np + j]].bytes;
    const char *name = plan_coll_name(in->code);
    bool gather = strcmp(name, "all_gather") == 0, scatter = strcmp(name, "reduce_scatter") == 0;
    uint64_t want_in = bi, want_out = bi; // 0: the product overflows
    if (gather && __builtin_mul_overflow(bi, n, &want_out)) want_out = 0;
    if (scatter) {
        want_out = bo;
        if (__builtin_mul_overflow(bo, n, &want_in)) want_in = 0;
    }
    if (bi == want_in && bo == want_out) return PLAN_OK;
    char pair[32] = "";
    if (np > 1) snprintf(pair, sizeof pair, "pair %u: ", j);
    return ifail(c, k, i, "%sin %llu bytes, out %llu bytes, but %s on group %d (%llu ranks) wants %s", pair,
                 (unsigned long long)bi, (unsigned long long)bo, name, in->a, (unsigned long long)n,
                 gather ? "out = in x ranks" : scatter ? "in = out x ranks" : "in = out");
}

// The collectives' codes: pcc_coll's values, in plan_coll_name's order.
enum { COLL_ALL_REDUCE, COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_ALL_TO_ALL, COLL_SEND_RECV, COLL_BROADCAST };

// Whether a collective of this kind moves a group axis from shard value `in` to `out`; its rule
// in words.
static bool coll_moves(uint32_t coll, uint8_t in, uint8_t out, const char **rule) {
    bool din = in >= PLAN_SHARD_D(0), dout = out >= PLAN_SHARD_D(0);
    switch (coll) {
    case COLL_ALL_REDUCE: *rule = "V -> R"; return in == PLAN_SHARD_V && out == PLAN_SHARD_R;
    case COLL_ALL_GATHER: *rule = "D(i) -> R"; return din && out == PLAN_SHARD_R;
    case COLL_REDUCE_SCATTER: *rule = "V -> D(i)"; return in == PLAN_SHARD_V && dout;
    case COLL_ALL_TO_ALL: *rule = "D(i) -> D(j), i != j"; return din && dout && in != out;
    case COLL_BROADCAST: *rule = "the same shard in and out"; return in == out;
    default: *rule = ""; return true; // send_recv: no rule
    }
}

// An in-place collective on a tensor buffer (coll-shard): only all_reduce, and the buffer's
// declared shard (the result) is R on the group's axes.
static plan_status check_coll_in_place(checker *c, uint32_t k, uint32_t i, uint32_t b, uint32_t axes) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    char who[160], shard[80], ax[48];
    buffer_desc(p, pg, b, who, sizeof(who));
    shard_desc(p, pg->buffers[b].shard, shard, sizeof(shard));
    axes_text(p, axes, ax, sizeof(ax));
    if (in->code != COLL_ALL_REDUCE)
        return ifail(c, k, i, "in place on %s: only all_reduce runs in place on a tensor buffer", who);
    for (uint32_t a = 0; a < p->meta.n_axes; a++)
        if (axes >> a & 1u && pg->buffers[b].shard.map[a] != PLAN_SHARD_R)
            return ifail(c, k, i, "in place on %s, whose shard is %s: an in-place all_reduce leaves the whole sum (R) on "
                         "the group's axes (%s)", who, shard, ax);
    return PLAN_OK;
}

// A bucket (a collective with several pairs): one dtype, each buffer in it once (a pair in place
// names its buffer as both in and out), so a backend may run it as one collective over the
// bucket's bytes where they lie back to back.
static plan_status check_bucket(checker *c, uint32_t k, uint32_t i) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    uint32_t np = in->nargs / 2u;
    const uint32_t *a = &pg->args[in->args];
    for (uint32_t j = 1; j < in->nargs; j++)
        if (pg->buffers[a[j]].dtype != pg->buffers[a[0]].dtype)
            return ifail(c, k, i, "buffers %u and %u of the bucket have different dtypes", a[0], a[j]);
    for (uint32_t j = 0; j < np; j++)
        for (uint32_t q = 0; q < j; q++)
            if (a[q] == a[j] || a[np + q] == a[np + j] || a[q] == a[np + j] || a[np + q] == a[j])
                return ifail(c, k, i, "pairs %u and %u of the bucket share a buffer", q, j);
    return PLAN_OK;
}

// The shards of a collective on a group over mesh axes (coll-shard), when both buffers hold a
// tensor: the same tensor; off the group's axes the same shard; on them what the kind makes.
static plan_status check_coll_shard(checker *c, uint32_t k, uint32_t i, uint32_t j) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    uint32_t np = in->nargs / 2u;
    uint32_t axes = p->groups[in->a].axes, bi = pg->args[in->args + j], bo = pg->args[in->args + np + j];
    const plan_buffer *x = &pg->buffers[bi], *y = &pg->buffers[bo];
    if (!axes || x->tensor == PLAN_NONE || y->tensor == PLAN_NONE) return PLAN_OK;
    if (bi == bo) return check_coll_in_place(c, k, i, bi, axes);
    if (x->tensor != y->tensor)
        return ifail(c, k, i, "in holds tensor %u \"%s\", out tensor %u \"%s\": a collective keeps its tensor", x->tensor,
                     name_or(p->tensors[x->tensor].name, "?"), y->tensor, name_or(p->tensors[y->tensor].name, "?"));
    char sx[80], sy[80], ax[48], vx[8], vy[8];
    shard_desc(p, x->shard, sx, sizeof(sx));
    shard_desc(p, y->shard, sy, sizeof(sy));
    axes_text(p, axes, ax, sizeof(ax));
    const char *name = plan_coll_name(in->code), *rule = "";
    for (uint32_t a = 0; a < p->meta.n_axes; a++) {
        uint8_t mx = x->shard.map[a], my = y->shard.map[a];
        bool on = axes >> a & 1u;
        if (on ? coll_moves(in->code, mx, my, &rule) : mx == my) continue;
        if (!on)
            return ifail(c, k, i, "on group %d (axes %s) in is %s, out is %s: off the group's axes a collective keeps the "
                         "shard, but on %.8s it goes %s -> %s", in->a, ax, sx, sy, p->meta.axis_names[a],
                         shard_value(mx, vx), shard_value(my, vy));
        return ifail(c, k, i, "on group %d (axes %s) in is %s, out is %s: %s wants %s on each of the group's axes, but on "
                     "%.8s it goes %s -> %s", in->a, ax, sx, sy, name, rule, p->meta.axis_names[a], shard_value(mx, vx),
                     shard_value(my, vy));
    }
    return PLAN_OK;
}

// A copy (copy-shard). Between tensor buffers: the same tensor; on each axis the same shard, or
// R in src and D(i) or V in dst; for each dimension, dst's splitting axes extend src's (src's
// come first in mesh order), so dst's piece lies inside src's. With a scratch buffer on either
// side the bytes are copied as they are: the sizes are equal.
static plan_status check_copy_shard(checker *c, uint32_t k, uint32_t i) {
    const plan *p = c->p;
    const plan_program *pg = &p->programs[k];
    const plan_insn *in = &pg->insns[i];
    uint32_t bs = pg->args[in->args], bd = pg->args[in->args + 1];
    const plan_buffer *x = &pg->buffers[bs], *y = &pg->buffers[bd];
    char ws[160], wd[160], sx[80], sy[80], vx[8], vy[8];
    buffer_desc(p, pg, bs, ws, sizeof(ws));
    buffer_desc(p, pg, bd, wd, sizeof(wd));
    if (x->tensor == PLAN_NONE || y->tensor == PLAN_NONE) {
        if (x->bytes == y->bytes) return PLAN_OK;
        return ifail(c, k, i, "src %s is %llu bytes, dst %s %llu bytes: a copy with a scratch buffer copies bytes as they "
                     "are, so the sizes must be equal", ws, (unsigned long long)x->bytes, wd, (unsigned long long)y->bytes);
    }
    if (x->tensor != y->tensor)
        return ifail(c, k, i, "src %s and dst %s hold different tensors: a copy keeps its tensor", ws, wd);
    shard_desc(p, x->shard, sx, sizeof(sx));
    shard_desc(p, y->shard, sy, sizeof(sy));
    for (uint32_t a = 0; a < p->meta.n_axes; a++) {
        uint8_t ms = x->shard.map[a], md = y->shard.map[a];
        if (ms != md && ms != PLAN_SHARD_R)
            return ifail(c, k, i, "src %s is %s, dst %s is %s: a copy keeps each axis's shard or goes from R to a piece "
                         "(dI or v), but on %.8s it goes %s -> %s", ws, sx, wd, sy, p->meta.axis_names[a],
                         shard_value(ms, vx), shard_value(md, vy));
    }
    const plan_tensor *t = &p->tensors[x->tensor];
    for (int d = 0; d < t->rank; d++) {
        uint32_t ms = split_axes(p, x->shard, d), md = split_axes(p, y->shard, d);
        // src's axes are a prefix of dst's: dst's first extra axis comes after src's last
        uint32_t extra = md & ~ms;
        if (!extra || !ms || __builtin_ctz(extra) > 31 - __builtin_clz(ms)) continue;
        char as[48], ad[48];
        axes_text(p, ms, as, sizeof(as));
        axes_text(p, md, ad, sizeof(ad));
        return ifail(c, k, i, "src %s is %s, dst %s is %s: dimension %d is split over %s in src but %s in dst, so dst's "
                     "piece is not inside src's (src's axes must come first, in mesh order)", ws, sx, wd, sy, d, as, ad);
    }
    return PLAN_OK;
}

// Record before wait: a wait on an event that no earlier instruction records never ends.
static plan_status check_wait(checker *c, uint32_t k, uint32_t i) {
    const plan_program *pg = &c->p->programs[k];
    for (uint32_t j = 0; j < i; j++)
        if (pg->insns[j].kind == PLAN_I_RECORD && pg->insns[j].a == pg->insns[i].a) return PLAN_OK;
    return ifail(c, k, i, "waits on event %d, which no earlier instruction records", pg->insns[i].a);
}

// The micro-batch instruction i touches, mb + mb_delta for mb in 0..count-1 of the innermost mb
// loop (mb = 0 outside any), lies in 0..micro_batches-1.
static plan_status check_mb_range(checker *c, uint32_t k, uint32_t i, uint32_t mb_count) {
    const plan_insn *in = &c->p->programs[k].insns[i];
    int64_t lo = in->mb_delta, hi = (int64_t)(mb_count ? mb_count - 1 : 0) + in->mb_delta;
    int64_t m = c->p->meta.micro_batches;
    if (!in->nargs || (lo >= 0 && hi < m)) return PLAN_OK;
    int64_t bad_mb = lo < 0 ? lo : hi, at = lo < 0 ? 0 : (mb_count ? mb_count - 1 : 0);
    return ifail(c, k, i, "micro-batch mb%+d is %lld when mb = %lld, outside 0..%lld", in->mb_delta, (long long)bad_mb,
                 (long long)at, (long long)(m - 1));
}

// A collective with attrs reduces a chunk (PLAN_FORMAT.md): a one-pair, in-place all_reduce of
// elements i[start] .. i[end] - 1 of its buffer, 0 <= start < end <= the buffer's elements.
static plan_status check_coll_chunk(checker *c, uint32_t k, uint32_t i) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i];
    if (in->attrs == PLAN_NONE) return PLAN_OK;
    if (in->code != COLL_ALL_REDUCE || in->nargs != 2 || pg->args[in->args] != pg->args[in->args + 1])
        return ifail(c, k, i, "attrs %u on a collective: a chunk is for a one-pair, in-place all_reduce only", in->attrs);
    const plan_buffer *b = &pg->buffers[pg->args[in->args]];
    uint64_t eb = plan_dtype_bytes(b->dtype), n = eb ? b->bytes / eb : 0;
    int64_t lo = pg->attrs[in->attrs].i[PLAN_AI_START], hi = pg->attrs[in->attrs].i[PLAN_AI_END];
    if (lo < 0 || hi <= lo || (uint64_t)hi > n)
        return ifail(c, k, i, "chunk %lld..%lld (attrs %u, i start and end) of buffer %u: it wants 0 <= start < end <= %llu, the buffer's elements",
                     (long long)lo, (long long)hi, in->attrs, pg->args[in->args], (unsigned long long)n);
    return PLAN_OK;
}

static plan_status check_insn(checker *c, uint32_t k, uint32_t i, uint32_t mb_count) {
    const plan_insn *in = &c->p->programs[k].insns[i];
    plan_status st = check_arity(c, k, i);
    if (!st && in->kind == PLAN_I_COLL) st = check_coll_chunk(c, k, i);
    for (uint32_t j = 0; !st && in->kind == PLAN_I_COLL && j < in->nargs / 2u; j++) st = check_coll_sizes(c, k, i, j);
    for (uint32_t j = 0; !st && in->kind == PLAN_I_COLL && j < in->nargs / 2u; j++) st = check_coll_shard(c, k, i, j);
    if (!st && in->kind == PLAN_I_COLL) st = check_bucket(c, k, i);
    if (!st && in->kind == PLAN_I_COPY) st = check_copy_shard(c, k, i);
    if (!st && in->kind == PLAN_I_WAIT) st = check_wait(c, k, i);
    if (!st && (in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV) && in->b == 0)
        st = ifail(c, k, i, "peer offset 0 along mesh axis \"%s\": a rank cannot %s itself",
                   c->p->meta.axis_names[in->a], in->kind == PLAN_I_SEND ? "send to" : "receive from");
    if (!st) st = check_mb_range(c, k, i, mb_count);
    return st;
}

#define MAX_EXECUTED (1ull << 30) // instructions one program may execute per step, for the walks below

// Every instruction, with the count of the innermost mb loop around it; and the instructions
// executed per step (loops multiplied out), which the communication walk visits, bounded.
static plan_status check_insns(checker *c, uint32_t k) {
    const plan_program *pg = &c->p->programs[k];
    struct insn_scope {
        uint32_t end, mb_count;
        uint64_t mult;
    } stack[PLAN_MAX_LOOP_DEPTH];
    int depth = 0;
    uint64_t executed = 0;
    plan_status st = PLAN_OK;
    for (uint32_t i = 0; i < pg->n_insns && !st; i++) {
        while (depth && i >= stack[depth - 1].end) depth--;
        uint32_t mb_count = depth ? stack[depth - 1].mb_count : 0;
        uint64_t mult = depth ? stack[depth - 1].mult : 1;
        const plan_insn *in = &pg->insns[i];
        st = check_insn(c, k, i, mb_count);
        executed += mult;
        if (!st && executed > MAX_EXECUTED)
            st = pfail(c, k, "executes more than %llu instructions per step (loops multiplied out): too large to check",
                       MAX_EXECUTED);
        if (in->kind == PLAN_I_LOOP) {
            uint64_t m = mult * (uint64_t)plan_loop_trips(in); // mult <= 2^30, count < 2^31: no overflow
            stack[depth++] = (struct insn_scope){i + 1 + (uint32_t)in->b,
                                                 in->code == PLAN_LOOP_MB ? (uint32_t)in->a : mb_count,
                                                 m > MAX_EXECUTED ? MAX_EXECUTED + 1 : m};
        }
    }
    return st;
}

/* ---- plan_check: data flow inside one program ---- */

#define MAX_SLOTS (1u << 22)      // buffer slots one program may have for the data-flow check
#define MAX_OVERLAPS (1ull << 26) // pairs of slots that share arena bytes
#define MAX_STEPS (1ull << 28)    // instructions (weighted by arguments) the expansion may visit

enum { A_READ = PLAN_ARG_READ, A_WRITE = PLAN_ARG_WRITE };

typedef struct flow {
    checker *c;
    uint32_t k;
    const plan_program *pg;
    uint64_t n_slots;
    uint64_t *base;            // per buffer, n_buffers + 1: its first slot
    uint32_t *layer_n;         // per buffer: its layer slots that the program can touch
    uint32_t *slot_buf;        // per slot: its buffer
    uint64_t *lo, *hi;         // per slot: its bytes in the arena, [lo, hi)
    uint64_t *last;            // per slot: time of its last write; 0 never, 1 before the step
    uint32_t *writer;          // per slot: the instruction of that write
    uint64_t *ov_at, *ov;      // the slots sharing bytes with slot s: ov[ov_at[s] .. ov_at[s + 1])
    uint8_t *held;             // per buffer: holds data when the step starts
    uint32_t *period;          // per loop instruction: its period (see the top of this file)
    uint64_t *grp_rd[PLAN_MAX_STREAMS], *grp_wr[PLAN_MAX_STREAMS]; // per stream, per slot: see flow_group
    uint64_t grp_cur[PLAN_MAX_STREAMS], grp_n; // per stream: its open group (0: none); groups opened
    uint64_t time, steps;
    int64_t mb, layer;         // the loop variables
    int mb_depth, layer_depth; // how many loops of each variable are around the instruction
} flow;

static plan_status pfail(checker *c, uint32_t k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static plan_status pfail(checker *c, uint32_t k, const char *fmt, ...) {
    char label[160], msg[700];
    prog_label(c->p, k, label, sizeof(label));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return cfail(c, "%s: %s", label, msg);
}

static void flow_free(flow *f) {
    free(f->base);
    free(f->layer_n);
    free(f->slot_buf);
    free(f->lo);
    free(f->hi);
    free(f->last);
    free(f->writer);
    free(f->ov_at);
    free(f->ov);
    free(f->held);
    free(f->period);
    for (int st = 0; st < PLAN_MAX_STREAMS; st++) free(f->grp_rd[st]), free(f->grp_wr[st]);
}

static uint32_t compute_inputs(const plan_insn *in) {
    const op_arity *a = &op_arities[in->code];
    return a->out >= 0 ? in->nargs - (uint32_t)a->out : (uint32_t)a->in_max;
}

static bool accumulates(const plan_program *pg, const plan_insn *in) {
    return in->kind == PLAN_I_COMPUTE && in->attrs != PLAN_NONE && pg->attrs[in->attrs].i[PLAN_AI_ACCUMULATE] != 0;
}

unsigned plan_arg_role(const plan_program *pg, const plan_insn *in, uint32_t j) {
    switch (in->kind) {
    case PLAN_I_COMPUTE:
        if (op_arities[in->code].inplace) return A_READ | A_WRITE;
        if (j < compute_inputs(in)) return A_READ;
        return accumulates(pg, in) ? A_READ | A_WRITE : A_WRITE;
    case PLAN_I_COLL: return j < in->nargs / 2u ? A_READ : A_WRITE;
    case PLAN_I_COPY: return j == 0 ? A_READ : A_WRITE;
    case PLAN_I_SEND: return A_READ;
    default: return A_WRITE;
    }
}

static uint64_t slot_of(const flow *f, const plan_insn *in, uint32_t j) {
    uint32_t b = f->pg->args[in->args + j];
    const plan_buffer *bf = &f->pg->buffers[b];
    uint64_t m = (uint64_t)(f->mb + in->mb_delta) % bf->mb_slots, l = (uint64_t)f->layer % bf->layer_slots;
    return f->base[b] + m * f->layer_n[b] + l;
}

// "buffer 3 (activation "h") slot mb 1 layer 0"
static void slot_desc(const flow *f, uint64_t s, char *buf, size_t n) {
    uint32_t b = f->slot_buf[s];
    const plan_buffer *bf = &f->pg->buffers[b];
    uint64_t rel = s - f->base[b];
    char slot[64] = "";
    if (bf->mb_slots > 1 || bf->layer_slots > 1)
        snprintf(slot, sizeof(slot), " slot mb %llu layer %llu", (unsigned long long)(rel / f->layer_n[b]),
                 (unsigned long long)(rel % f->layer_n[b]));
    char who[160];
    buffer_desc(f->c->p, f->pg, b, who, sizeof(who));
    snprintf(buf, n, "%s%s", who, slot);
}

// "insn i (op) at mb 2 layer 1: " + the message.
static plan_status ffail(flow *f, uint32_t i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static plan_status ffail(flow *f, uint32_t i, const char *fmt, ...) {
    char msg[600], at[64] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (f->mb_depth && f->layer_depth)
        snprintf(at, sizeof(at), "at mb %lld, layer %lld: ", (long long)f->mb, (long long)f->layer);
    else if (f->mb_depth) snprintf(at, sizeof(at), "at mb %lld: ", (long long)f->mb);
    else if (f->layer_depth) snprintf(at, sizeof(at), "at layer %lld: ", (long long)f->layer);
    return ifail(f->c, f->k, i, "%s%s", at, msg);
}

static void writer_desc(const flow *f, uint64_t s, char *buf, size_t n) {
    if (f->writer[s] == PLAN_NONE) snprintf(buf, n, "which holds data from the start of the step");
    else snprintf(buf, n, "written by insn %u", f->writer[s]);
}

/* Building the slots. */

static uint32_t longest_layer_loop(const plan_program *pg) {
    uint32_t n = 1;
    for (uint32_t i = 0; i < pg->n_insns; i++)
        if (pg->insns[i].kind == PLAN_I_LOOP && pg->insns[i].code != PLAN_LOOP_MB && plan_loop_trips(&pg->insns[i]) > n)
            n = (uint32_t)pg->insns[i].a;
    return n;
}

// Slots a buffer can have touched: micro-batch slots up to micro_batches, layer slots up to the
// longest layer loop (an index past them wraps to a slot below).
static plan_status flow_slots(flow *f) {
    const plan_program *pg = f->pg;
    uint32_t lmax = longest_layer_loop(pg), m = f->c->p->meta.micro_batches;
    f->base = calloc((size_t)pg->n_buffers + 1, sizeof(uint64_t));
    f->layer_n = calloc((size_t)pg->n_buffers + 1, sizeof(uint32_t));
    if (!f->base || !f->layer_n) return pfail(f->c, f->k, "out of memory");
    for (uint32_t b = 0; b < pg->n_buffers; b++) {
        const plan_buffer *bf = &pg->buffers[b];
        uint64_t mn = bf->mb_slots < m ? bf->mb_slots : m;
        f->layer_n[b] = bf->layer_slots < lmax ? bf->layer_slots : lmax;
        f->base[b + 1] = f->base[b] + mn * f->layer_n[b];
        if (f->base[b + 1] > MAX_SLOTS)
            return pfail(f->c, f->k, "more than %u buffer slots: too many to check", MAX_SLOTS);
    }
    f->n_slots = f->base[pg->n_buffers];
    size_t n = (size_t)f->n_slots + 1;
    f->slot_buf = malloc(n * sizeof(uint32_t));
    f->lo = malloc(n * sizeof(uint64_t));
    f->hi = malloc(n * sizeof(uint64_t));
    f->last = calloc(n, sizeof(uint64_t));
    f->writer = malloc(n * sizeof(uint32_t));
    if (!f->slot_buf || !f->lo || !f->hi || !f->last || !f->writer) return pfail(f->c, f->k, "out of memory");
    for (uint32_t b = 0; b < pg->n_buffers; b++)
        for (uint64_t s = f->base[b]; s < f->base[b + 1]; s++) {
            const plan_buffer *bf = &pg->buffers[b];
            uint64_t rel = s - f->base[b];
            f->slot_buf[s] = b;
            f->lo[s] = bf->offset + rel / f->layer_n[b] * bf->mb_stride + rel % f->layer_n[b] * bf->layer_stride;
            f->hi[s] = f->lo[s] + bf->bytes;
        }
    return PLAN_OK;
}

typedef struct span {
    uint64_t lo, hi, slot;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

// Counts (fill false) or lists (fill true) the pairs of slots that share bytes.
static plan_status overlap_pass(flow *f, const span *v, uint64_t m, bool fill, uint64_t *at) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < m; i++)
        for (uint64_t j = i + 1; j < m && v[j].lo < v[i].hi; j++) {
            if (++total > MAX_OVERLAPS) return pfail(f->c, f->k, "more than %llu overlapping pairs of buffer slots: too many to check", MAX_OVERLAPS);
            if (fill) {
                f->ov[at[v[i].slot]++] = v[j].slot;
                f->ov[at[v[j].slot]++] = v[i].slot;
            } else {
                at[v[i].slot]++;
                at[v[j].slot]++;
            }
        }
    return PLAN_OK;
}

static plan_status flow_overlaps(flow *f) {
    uint64_t n = f->n_slots, m = 0;
    span *v = malloc((size_t)(n + 1) * sizeof(span));
    uint64_t *at = calloc((size_t)n + 1, sizeof(uint64_t));
    f->ov_at = calloc((size_t)n + 1, sizeof(uint64_t));
    plan_status st = !v || !at || !f->ov_at ? pfail(f->c, f->k, "out of memory") : PLAN_OK;
    for (uint64_t s = 0; !st && s < n; s++)
        if (f->hi[s] > f->lo[s]) v[m++] = (span){f->lo[s], f->hi[s], s};
    if (!st) qsort(v, (size_t)m, sizeof(span), span_cmp);
    if (!st) st = overlap_pass(f, v, m, false, at);
    if (!st) {
        for (uint64_t s = 0; s < n; s++) f->ov_at[s + 1] = f->ov_at[s] + at[s];
        memcpy(at, f->ov_at, (size_t)n * sizeof(uint64_t));
        f->ov = malloc((size_t)f->ov_at[n] * sizeof(uint64_t) + 1);
        st = f->ov ? overlap_pass(f, v, m, true, at) : pfail(f->c, f->k, "out of memory");
    }
    free(v);
    free(at);
    return st;
}

static bool holds_at_start(const plan *p, const plan_buffer *bf) {
    (void)p;
    return (bf->flags & PLAN_BUF_PERSIST) != 0;
}

// Slots that hold data when the step starts (persistent buffers: inputs, params, optimizer
// state; the outputs of accumulating operators, which the runtime zeroes); no two of them may
// share bytes.
static plan_status flow_start(flow *f) {
    const plan_program *pg = f->pg;
    f->held = calloc((size_t)pg->n_buffers + 1, 1);
    if (!f->held) return pfail(f->c, f->k, "out of memory");
    for (uint32_t b = 0; b < pg->n_buffers; b++) f->held[b] = holds_at_start(f->c->p, &pg->buffers[b]);
    for (uint32_t i = 0; i < pg->n_insns; i++)
        if (accumulates(pg, &pg->insns[i]))
            for (uint32_t j = compute_inputs(&pg->insns[i]); j < pg->insns[i].nargs; j++)
                f->held[pg->args[pg->insns[i].args + j]] = 1;
    for (uint64_t s = 0; s < f->n_slots; s++) {
        f->writer[s] = PLAN_NONE;
        f->last[s] = f->held[f->slot_buf[s]] ? 1 : 0;
    }
    for (uint64_t s = 0; s < f->n_slots; s++)
        for (uint64_t o = f->ov_at[s]; f->last[s] && o < f->ov_at[s + 1]; o++)
            if (f->last[f->ov[o]] && f->ov[o] > s) {
                char a[160], b[160];
                slot_desc(f, s, a, sizeof(a));
                slot_desc(f, f->ov[o], b, sizeof(b));
                return pfail(f->c, f->k, "%s and %s both hold data when the step starts (persistent "
                             "buffers, or outputs the runtime zeroes) and overlap in the arena", a, b);
            }
    return PLAN_OK;
}

static uint64_t gcd64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

// The period of loop i: the lcm of the slot counts its body touches through its variable (not
// through an inner loop of the same variable), capped at its count.
static uint32_t loop_period(const plan_program *pg, uint32_t i) {
    const plan_insn *L = &pg->insns[i];
    bool mb = L->code == PLAN_LOOP_MB;
    uint64_t p = 1, count = plan_loop_trips(L);
    if (plan_loop_is_background(L->code)) return 1;
    for (uint32_t j = i + 1; j < i + 1 + (uint32_t)L->b;) {
        const plan_insn *in = &pg->insns[j];
        if (in->kind == PLAN_I_LOOP) {
            j += (in->code == PLAN_LOOP_MB) == mb ? 1 + (uint32_t)in->b : 1;
            continue;
        }
        for (uint32_t a = 0; a < in->nargs; a++) {
            const plan_buffer *bf = &pg->buffers[pg->args[in->args + a]];
            uint64_t s = mb ? bf->mb_slots : bf->layer_slots;
            p = p / gcd64(p, s) * s;
            if (p >= count) return (uint32_t)count;
        }
        j++;
    }
    return (uint32_t)p;
}

/* Running the program. */

// A read of slot s: it was written, and nothing wrote over its bytes since.
static plan_status flow_read(flow *f, uint32_t i, uint64_t s) {
    char a[160], b[160], w[64];
    if (!f->last[s]) {
        slot_desc(f, s, a, sizeof(a));
        return ffail(f, i, "reads %s before anything writes it", a);
    }
    for (uint64_t o = f->ov_at[s]; o < f->ov_at[s + 1]; o++) {
        uint64_t x = f->ov[o];
        if (f->last[x] <= f->last[s]) continue;
        slot_desc(f, s, a, sizeof(a));
        slot_desc(f, x, b, sizeof(b));
        writer_desc(f, s, w, sizeof(w));
        uint64_t lo = f->lo[s] > f->lo[x] ? f->lo[s] : f->lo[x], hi = f->hi[s] < f->hi[x] ? f->hi[s] : f->hi[x];
        return ffail(f, i, "reads %s (%s), but insn %u wrote %s over its arena bytes %llu..%llu in between: live "
                     "buffers overlap", a, w, f->writer[x], b, (unsigned long long)lo, (unsigned long long)hi - 1);
    }
    return PLAN_OK;
}

// A write of argument j (slot s): no other argument of the instruction shares its bytes, except
// the same slot read in place.
static plan_status flow_write_check(flow *f, uint32_t i, uint32_t j, uint64_t s) {
    const plan_insn *in = &f->pg->insns[i];
    for (uint32_t j2 = 0; j2 < in->nargs; j2++) {
        if (j2 == j) continue;
        uint64_t s2 = slot_of(f, in, j2);
        unsigned role2 = plan_arg_role(f->pg, in, j2);
        if (s2 == s && !(role2 & A_WRITE)) continue;
        if (s2 != s && (f->hi[s] <= f->lo[s2] || f->hi[s2] <= f->lo[s] || f->hi[s] == f->lo[s] || f->hi[s2] == f->lo[s2]))
            continue;
        char a[160], b[160];
        slot_desc(f, s, a, sizeof(a));
        slot_desc(f, s2, b, sizeof(b));
        return ffail(f, i, "output %u (%s) %s %s %u (%s)", j, a, s2 == s ? "is the same slot as" : "overlaps",
                     role2 & A_WRITE ? "output" : "input", j2, b);
    }
    return PLAN_OK;
}

// The slot sharing bytes with slot s (s itself first) whose mark in `marks` is group g, or
// UINT64_MAX.
static uint64_t group_conflict(const flow *f, const uint64_t *marks, uint64_t g, uint64_t s) {
    if (f->hi[s] == f->lo[s]) return UINT64_MAX;
    if (marks[s] >> 32 == g) return s;
    for (uint64_t o = f->ov_at[s]; o < f->ov_at[s + 1]; o++)
        if (marks[f->ov[o]] >> 32 == g) return f->ov[o];
    return UINT64_MAX;
}

// Send/recv groups. A maximal run of sends and receives on one stream, in execution order (loops
// do not end it; any other instruction of that stream does), is issued as one group: its receives
// may land, and its sends may read, at any time until the whole group completes (NCCL's
// ncclGroupStart/End; comm.c posts every send, then takes every receive). So no receive of a group
// may write bytes that a send of the same group reads, whichever comes first in the run: the
// receive would overwrite data not yet sent, or the send would carry the old or the new bytes
// depending on timing. Marks per stream and slot: the group (high 32 bits; groups are numbered
// from 1, fewer than MAX_STEPS) and the instruction (low 32) of its last send from the slot
// (grp_rd) and receive into it (grp_wr).
static plan_status flow_group(flow *f, uint32_t i) {
    const plan_insn *in = &f->pg->insns[i];
    uint8_t st = in->stream;
    if (in->kind != PLAN_I_SEND && in->kind != PLAN_I_RECV) {
        f->grp_cur[st] = 0;
        return PLAN_OK;
    }
    if (!f->grp_rd[st]) {
        f->grp_rd[st] = calloc((size_t)f->n_slots + 1, sizeof(uint64_t));
        f->grp_wr[st] = calloc((size_t)f->n_slots + 1, sizeof(uint64_t));
        if (!f->grp_rd[st] || !f->grp_wr[st]) return pfail(f->c, f->k, "out of memory");
    }
    if (!f->grp_cur[st]) f->grp_cur[st] = ++f->grp_n;
    bool send = in->kind == PLAN_I_SEND;
    uint64_t s = slot_of(f, in, 0), g = f->grp_cur[st];
    uint64_t x = group_conflict(f, send ? f->grp_wr[st] : f->grp_rd[st], g, s);
    if (x != UINT64_MAX) {
        char a[160], b[160];
        slot_desc(f, s, a, sizeof(a));
        slot_desc(f, x, b, sizeof(b));
        uint32_t j = (uint32_t)((send ? f->grp_wr[st] : f->grp_rd[st])[x] & 0xffffffffu);
        if (send)
            return ffail(f, i, "sends %s, but recv insn %u of the same group of sends and receives writes %s over its "
                         "bytes: a group's receives may land before its sends read", a, j, b);
        return ffail(f, i, "receives into %s, over the bytes of %s, which send insn %u of the same group of sends and "
                     "receives reads: a group's receives may land before its sends read", a, b, j);
    }
    (send ? f->grp_rd[st] : f->grp_wr[st])[s] = g << 32 | i;
    return PLAN_OK;
}

static plan_status flow_insn(flow *f, uint32_t i) {
    const plan_insn *in = &f->pg->insns[i];
    f->time++;
    f->steps += 1 + (uint64_t)in->nargs * in->nargs;
    if (f->steps > MAX_STEPS)
        return pfail(f->c, f->k, "more than %llu steps after expanding its loops: too large to check", MAX_STEPS);
    plan_status st = flow_group(f, i);
    for (uint32_t j = 0; j < in->nargs && !st; j++)
        if (plan_arg_role(f->pg, in, j) & A_READ) st = flow_read(f, i, slot_of(f, in, j));
    for (uint32_t j = 0; j < in->nargs && !st; j++)
        if (plan_arg_role(f->pg, in, j) & A_WRITE) st = flow_write_check(f, i, j, slot_of(f, in, j));
    for (uint32_t j = 0; j < in->nargs && !st; j++)
        if (plan_arg_role(f->pg, in, j) & A_WRITE) {
            uint64_t s = slot_of(f, in, j);
            f->last[s] = f->time;
            f->writer[s] = i;
        }
    return st;
}

static plan_status flow_range(flow *f, uint32_t from, uint32_t to);

// The iteration after j of a loop of `count` with period p: all of them when count <= 3p; else
// 0..2p-1, then from the first multiple of p at or after count - p to the end.
static uint64_t next_iteration(uint64_t j, uint64_t count, uint64_t p) {
    if (count <= 3 * p || j + 1 != 2 * p) return j + 1;
    return (count - p + p - 1) / p * p;
}

static plan_status flow_loop(flow *f, uint32_t i) {
    const plan_insn *in = &f->pg->insns[i];
    if (plan_loop_is_background(in->code)) return flow_range(f, i + 1, i + 1 + (uint32_t)in->b); // one round, no variable
    bool mb = in->code == PLAN_LOOP_MB;
    uint64_t count = (uint64_t)in->a;
    int64_t saved = mb ? f->mb : f->layer;
    if (mb) f->mb_depth++;
    else f->layer_depth++;
    plan_status st = PLAN_OK;
    for (uint64_t j = 0; j < count && !st; j = next_iteration(j, count, f->period[i])) {
        int64_t v = in->code == PLAN_LOOP_REVERSE_LAYER ? (int64_t)(count - 1 - j) : (int64_t)j;
        if (mb) f->mb = v;
        else f->layer = v;
        st = flow_range(f, i + 1, i + 1 + (uint32_t)in->b);
    }
    if (mb) f->mb = saved, f->mb_depth--;
    else f->layer = saved, f->layer_depth--;
    return st;
}

static plan_status flow_range(flow *f, uint32_t from, uint32_t to) {
    plan_status st = PLAN_OK;
    for (uint32_t i = from; i < to && !st;) {
        const plan_insn *in = &f->pg->insns[i];
        if (in->kind == PLAN_I_LOOP) {
            st = flow_loop(f, i);
            i += 1 + (uint32_t)in->b;
        } else {
            st = flow_insn(f, i);
            i++;
        }
    }
    return st;
}

// Param and state buffers survive the step: nothing wrote over them after their last write.
static plan_status flow_end(flow *f) {
    const plan *p = f->c->p;
    for (uint64_t s = 0; s < f->n_slots; s++) {
        const plan_buffer *bf = &f->pg->buffers[f->slot_buf[s]];
        if (bf->tensor == PLAN_NONE) continue;
        uint8_t kind = p->tensors[bf->tensor].kind;
        if ((kind != PLAN_T_PARAM && kind != PLAN_T_STATE) || !(bf->flags & PLAN_BUF_PERSIST)) continue;
        for (uint64_t o = f->ov_at[s]; o < f->ov_at[s + 1]; o++) {
            uint64_t x = f->ov[o];
            if (f->last[x] <= f->last[s]) continue;
            char a[160], b[160], w[64];
            slot_desc(f, s, a, sizeof(a));
            slot_desc(f, x, b, sizeof(b));
            writer_desc(f, s, w, sizeof(w));
            return pfail(f->c, f->k, "%s (%s) must survive to the next step, but insn %u wrote %s over it", a, w,
                         f->writer[x], b);
        }
    }
    return PLAN_OK;
}

static plan_status check_flow(checker *c, uint32_t k) {
    flow f = {.c = c, .k = k, .pg = &c->p->programs[k]};
    plan_status st = flow_slots(&f);
    if (!st) st = flow_overlaps(&f);
    if (!st) st = flow_start(&f);
    if (!st) {
        f.period = calloc((size_t)f.pg->n_insns + 1, sizeof(uint32_t));
        if (!f.period) st = pfail(c, k, "out of memory");
        for (uint32_t i = 0; !st && i < f.pg->n_insns; i++)
            if (f.pg->insns[i].kind == PLAN_I_LOOP) f.period[i] = loop_period(f.pg, i);
    }
    f.time = 1;
    if (!st) st = flow_range(&f, 0, f.pg->n_insns);
    if (!st) st = flow_end(&f);
    flow_free(&f);
    return st;
}

/* ---- plan_check: communication between programs ---- */

// Walks a program's instructions in execution order, loops multiplied out, and yields those of
// one kind with a given a (and b, for send and recv): the sends along an axis and offset, or the
// collectives on a group.
typedef struct comm_iter {
    const plan_program *pg;
    const uint32_t *prefix;     // prefix[i]: send, recv and coll instructions among insns[0..i)
    uint8_t kind;
    int32_t a;
    int64_t b;
    uint8_t tag;                // send and recv: the tag too
    uint32_t pc;
    int depth;
    struct comm_loop {
        uint32_t loop, end, iter, count;
    } st[PLAN_MAX_LOOP_DEPTH];
    uint64_t n;                 // instructions yielded so far
} comm_iter;

// The next matching instruction, or PLAN_NONE at the end of the program.
static uint32_t comm_next(comm_iter *it) {
    const plan_program *pg = it->pg;
    for (;;) {
        if (it->depth && it->pc == it->st[it->depth - 1].end) {
            if (++it->st[it->depth - 1].iter < it->st[it->depth - 1].count) it->pc = it->st[it->depth - 1].loop + 1;
            else it->depth--;
            continue;
        }
        if (it->pc >= pg->n_insns) return PLAN_NONE;
        const plan_insn *in = &pg->insns[it->pc];
        if (in->kind == PLAN_I_LOOP) {
            uint32_t end = it->pc + 1 + (uint32_t)in->b;
            if (it->prefix[end] == it->prefix[it->pc + 1]) it->pc = end; // no communication inside
            else it->st[it->depth++] = (struct comm_loop){it->pc, end, 0, plan_loop_trips(in)}, it->pc++;
            continue;
        }
        uint32_t i = it->pc++;
        if (in->kind == it->kind && in->a == it->a && (in->kind == PLAN_I_COLL || (in->b == it->b && in->tag == it->tag))) {
            it->n++;
            return i;
        }
    }
}

typedef struct comm {
    checker *c;
    uint32_t **prefix;          // per program (NULL when not loaded)
    uint32_t *first_prog;       // per rank: scratch for the group walk
    uint32_t *first_rank;
    uint32_t *pairs;            // program pairs (a, b) already compared on the current group
    size_t n_pairs, cap_pairs;
} comm;

static comm_iter comm_iter_init(const comm *m, uint32_t k, uint8_t kind, int32_t a, int64_t b, uint8_t tag) {
    return (comm_iter){.pg = &m->c->p->programs[k], .prefix = m->prefix[k], .kind = kind, .a = a, .b = b, .tag = tag};
}

// The bytes argument j of instruction i moves (a chunk's, where a collective has attrs).
static uint64_t arg_bytes(const plan_program *pg, uint32_t i, uint32_t j) {
    const plan_insn *in = &pg->insns[i];
    const plan_buffer *b = &pg->buffers[pg->args[in->args + j]];
    if (in->kind != PLAN_I_COLL || in->attrs == PLAN_NONE) return b->bytes;
    const plan_attrs *a = &pg->attrs[in->attrs];
    return (uint64_t)(a->i[PLAN_AI_END] - a->i[PLAN_AI_START]) * plan_dtype_bytes(b->dtype);
}

/* Point to point: channels (sender program, axis, offset, tag, receiver program). */

typedef struct channel {
    uint32_t from, to;          // programs
    int32_t axis;
    int64_t delta;              // the offset the sender sends to
    uint8_t tag;
    uint32_t from_rank, to_rank; // an example pair, for messages
} channel;

static int channel_cmp(const void *x, const void *y) {
    const channel *a = x, *b = y;
    if (a->from != b->from) return a->from < b->from ? -1 : 1;
    if (a->to != b->to) return a->to < b->to ? -1 : 1;
    if (a->axis != b->axis) return a->axis < b->axis ? -1 : 1;
    if (a->tag != b->tag) return a->tag < b->tag ? -1 : 1;
    return a->delta < b->delta ? -1 : a->delta > b->delta;
}

// A message is received into a buffer of the same tensor (or scratch, as it was sent) with the
// same shard (send-recv-shard).
static plan_status check_message_shard(comm *m, const channel *ch, const comm_iter *s, uint32_t i, const comm_iter *r,
                                       uint32_t j) {
    const plan *p = m->c->p;
    uint32_t bs = s->pg->args[s->pg->insns[i].args], br = r->pg->args[r->pg->insns[j].args];
    const plan_buffer *x = &s->pg->buffers[bs], *y = &r->pg->buffers[br];
    if (x->tensor == y->tensor && memcmp(x->shard.map, y->shard.map, PLAN_MAX_AXES) == 0) return PLAN_OK;
    char ws[160], wr[160], sx[80], sy[80];
    buffer_desc(p, s->pg, bs, ws, sizeof(ws));
    buffer_desc(p, r->pg, br, wr, sizeof(wr));
    shard_desc(p, x->shard, sx, sizeof(sx));
    shard_desc(p, y->shard, sy, sizeof(sy));
    return cfail(m->c, "send/recv shard mismatch: message %llu from rank %u (program %u, insn %u) to rank %u (program %u, "
                 "insn %u) along %s: sent from %s, %s; received into %s, %s: a message keeps its tensor and shard",
                 (unsigned long long)s->n, ch->from_rank, ch->from, i, ch->to_rank, ch->to, j,
                 p->meta.axis_names[ch->axis], ws, sx, wr, sy);
}

// Compares the sends of one channel with its receives, message by message.
static plan_status check_channel(comm *m, const channel *ch) {
    const plan *p = m->c->p;
    const char *ax = p->meta.axis_names[ch->axis];
    char tag_s[16] = "";
    if (ch->tag) snprintf(tag_s, sizeof(tag_s), " tag %u", ch->tag);
    comm_iter s = comm_iter_init(m, ch->from, PLAN_I_SEND, ch->axis, ch->delta, ch->tag);
    comm_iter r = comm_iter_init(m, ch->to, PLAN_I_RECV, ch->axis, -ch->delta, ch->tag);
    for (;;) {
        uint32_t i = comm_next(&s), j = comm_next(&r);
        if (i == PLAN_NONE && j == PLAN_NONE) return PLAN_OK;
        if (j == PLAN_NONE)
            return cfail(m->c, "unmatched send: rank %u (program %u, insn %u) sends message %llu along %s %+lld%s to rank %u "
                         "(program %u), which receives only %llu from it", ch->from_rank, ch->from, i,
                         (unsigned long long)s.n, ax, (long long)ch->delta, tag_s, ch->to_rank, ch->to, (unsigned long long)r.n);
        if (i == PLAN_NONE)
            return cfail(m->c, "unmatched recv: rank %u (program %u, insn %u) receives message %llu along %s %+lld%s from "
                         "rank %u (program %u), which sends only %llu to it", ch->to_rank, ch->to, j,
                         (unsigned long long)r.n, ax, (long long)-ch->delta, tag_s, ch->from_rank, ch->from, (unsigned long long)s.n);
        uint64_t bs = arg_bytes(s.pg, i, 0), br = arg_bytes(r.pg, j, 0);
        if (bs != br)
            return cfail(m->c, "send/recv size mismatch: message %llu from rank %u (program %u, insn %u) to rank %u "
                         "(program %u, insn %u) along %s: %llu bytes sent, %llu bytes received", (unsigned long long)s.n,
                         ch->from_rank, ch->from, i, ch->to_rank, ch->to, j, ax, (unsigned long long)bs, (unsigned long long)br);
        plan_status st = check_message_shard(m, ch, &s, i, &r, j);
        if (st) return st;
    }
}

// The peer of rank r at offset b along axis a, or a fault if the mesh has no such rank.
static plan_status p2p_peer(comm *m, uint32_t r, uint32_t i, uint32_t *peer) {
    const plan *p = m->c->p;
    const plan_insn *in = &p->programs[p->ranks[r].program].insns[i];
    int64_t at = (int64_t)p->ranks[r].coord[in->a] + in->b;
    if (at < 0 || at >= (int64_t)p->meta.mesh[in->a])
        return cfail(m->c, "rank %u (program %u): insn %u: %s along %s %+d has no peer: the rank's %s coordinate is %u of "
                     "%u", r, p->ranks[r].program, i, in->kind == PLAN_I_SEND ? "send" : "recv",
                     p->meta.axis_names[in->a], in->b, p->meta.axis_names[in->a], p->ranks[r].coord[in->a],
                     p->meta.mesh[in->a]);
    *peer = (uint32_t)((int64_t)r + (int64_t)in->b * (int64_t)m->c->stride[in->a]);
    return PLAN_OK;
}

// The first send or recv of each (kind, axis, offset, tag) in program k: a list of insn indices.
static uint32_t p2p_keys(const plan_program *pg, uint32_t *keys) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        if (in->kind != PLAN_I_SEND && in->kind != PLAN_I_RECV) continue;
        bool seen = false;
        for (uint32_t j = 0; j < n && !seen; j++) {
            const plan_insn *x = &pg->insns[keys[j]];
            seen = x->kind == in->kind && x->a == in->a && x->b == in->b && x->tag == in->tag;
        }
        if (!seen) keys[n++] = i;
    }
    return n;
}

// Every rank's sends and receives: the peer exists; the channels, one entry each.
static plan_status p2p_channels(comm *m, uint32_t **keys, const uint32_t *n_keys, channel **out, size_t *n_out) {
    const plan *p = m->c->p;
    size_t n = 0, cap = 0;
    channel *v = NULL;
    for (uint32_t r = 0; r < p->n_ranks; r++) {
        uint32_t k = p->ranks[r].program;
        for (uint32_t q = 0; q < n_keys[k]; q++) {
            uint32_t i = keys[k][q], peer = 0;
            plan_status st = p2p_peer(m, r, i, &peer);
            if (st) return free(v), st;
            const plan_insn *in = &p->programs[k].insns[i];
            uint32_t pk = p->ranks[peer].program;
            if (!p->programs[pk].name) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                channel *w = realloc(v, cap * sizeof(channel));
                if (!w) return free(v), cfail(m->c, "out of memory");
                v = w;
            }
            v[n++] = in->kind == PLAN_I_SEND ? (channel){k, pk, in->a, in->b, in->tag, r, peer}
                                             : (channel){pk, k, in->a, -(int64_t)in->b, in->tag, peer, r};
        }
    }
    *out = v;
    *n_out = n;
    return PLAN_OK;
}

static plan_status check_p2p(comm *m) {
    const plan *p = m->c->p;
    uint32_t **keys = calloc((size_t)p->n_programs + 1, sizeof(uint32_t *));
    uint32_t *n_keys = calloc((size_t)p->n_programs + 1, sizeof(uint32_t));
    plan_status st = !keys || !n_keys ? cfail(m->c, "out of memory") : PLAN_OK;
    for (uint32_t k = 0; !st && k < p->n_programs; k++) {
        keys[k] = malloc(((size_t)p->programs[k].n_insns + 1) * sizeof(uint32_t));
        if (!keys[k]) st = cfail(m->c, "out of memory");
        else n_keys[k] = p2p_keys(&p->programs[k], keys[k]);
    }
    channel *ch = NULL;
    size_t n = 0;
    if (!st) st = p2p_channels(m, keys, n_keys, &ch, &n);
    if (!st && n) qsort(ch, n, sizeof(channel), channel_cmp);
    for (size_t i = 0; !st && i < n; i++)
        if (i == 0 || channel_cmp(&ch[i], &ch[i - 1])) st = check_channel(m, &ch[i]);
    for (uint32_t k = 0; keys && k < p->n_programs; k++) free(keys[k]);
    free(keys);
    free(n_keys);
    free(ch);
    return st;
}

/* Collectives: each group's members that run different programs issue the same collectives. */

static plan_status check_coll_pair(comm *m, uint32_t g, uint32_t ra, uint32_t rb) {
    const plan *p = m->c->p;
    uint32_t ka = p->ranks[ra].program, kb = p->ranks[rb].program;
    comm_iter x = comm_iter_init(m, ka, PLAN_I_COLL, (int32_t)g, 0, 0), y = comm_iter_init(m, kb, PLAN_I_COLL, (int32_t)g, 0, 0);
    for (;;) {
        uint32_t i = comm_next(&x), j = comm_next(&y);
        if (i == PLAN_NONE && j == PLAN_NONE) return PLAN_OK;
        if (i == PLAN_NONE || j == PLAN_NONE) {
            const comm_iter *more = i == PLAN_NONE ? &y : &x, *less = i == PLAN_NONE ? &x : &y;
            uint32_t rm = i == PLAN_NONE ? rb : ra, rl = i == PLAN_NONE ? ra : rb;
            uint32_t im = i == PLAN_NONE ? j : i;
            return cfail(m->c, "collective order differs on group %u: rank %u (program %u, insn %u) issues collective %llu "
                         "(%s) but rank %u (program %u) issues only %llu on that group", g, rm, p->ranks[rm].program, im,
                         (unsigned long long)more->n, plan_coll_name(more->pg->insns[im].code), rl,
                         p->ranks[rl].program, (unsigned long long)less->n);
        }
        const plan_insn *a = &x.pg->insns[i], *b = &y.pg->insns[j];
        if (a->code != b->code)
            return cfail(m->c, "collective order differs on group %u: collective %llu is %s for rank %u (program %u, insn %u) "
                         "but %s for rank %u (program %u, insn %u)", g, (unsigned long long)x.n, plan_coll_name(a->code),
                         ra, ka, i, plan_coll_name(b->code), rb, kb, j);
        if (a->nargs != b->nargs)
            return cfail(m->c, "collective bucket mismatch on group %u: collective %llu (%s) is a bucket of %u for rank %u "
                         "(program %u, insn %u) but of %u for rank %u (program %u, insn %u)", g, (unsigned long long)x.n,
                         plan_coll_name(a->code), a->nargs / 2u, ra, ka, i, b->nargs / 2u, rb, kb, j);
        for (uint32_t q = 0, np = a->nargs / 2u; q < np; q++) {
            uint64_t ai = arg_bytes(x.pg, i, q), ao = arg_bytes(x.pg, i, np + q);
            uint64_t bi = arg_bytes(y.pg, j, q), bo = arg_bytes(y.pg, j, np + q);
            if (ai != bi || ao != bo)
                return cfail(m->c, "collective size mismatch on group %u: collective %llu (%s) moves %llu -> %llu bytes for "
                             "rank %u (program %u, insn %u) but %llu -> %llu bytes for rank %u (program %u, insn %u)", g,
                             (unsigned long long)x.n, plan_coll_name(a->code), (unsigned long long)ai, (unsigned long long)ao,
                             ra, ka, i, (unsigned long long)bi, (unsigned long long)bo, rb, kb, j);
        }
    }
}

// The first instruction of program k that issues a collective on group g, or PLAN_NONE.
static uint32_t first_coll(const plan_program *pg, uint32_t g) {
    for (uint32_t i = 0; i < pg->n_insns; i++)
        if (pg->insns[i].kind == PLAN_I_COLL && (uint32_t)pg->insns[i].a == g) return i;
    return PLAN_NONE;
}

// An explicit group: its members against the first; no rank outside it uses it.
static plan_status check_explicit_group(comm *m, uint32_t g) {
    const plan *p = m->c->p;
    const plan_group *gr = &p->groups[g];
    uint32_t *is_member = m->first_rank; // scratch: 1 for members
    memset(is_member, 0, (size_t)p->n_ranks * sizeof(uint32_t));
    for (uint32_t j = 0; j < gr->n_ranks; j++) is_member[gr->ranks[j]] = 1;
    for (uint32_t k = 0; k < p->n_programs; k++) {
        uint32_t i = p->programs[k].name ? first_coll(&p->programs[k], g) : PLAN_NONE;
        for (uint32_t r = 0; i != PLAN_NONE && r < p->n_ranks; r++)
            if (p->ranks[r].program == k && !is_member[r])
                return cfail(m->c, "rank %u (program %u, insn %u) issues a collective on group %u but is not one of "
                             "its members", r, k, i, g);
    }
    for (uint32_t j = 1; j < gr->n_ranks; j++) {
        uint32_t ka = p->ranks[gr->ranks[0]].program, kb = p->ranks[gr->ranks[j]].program;
        if (ka == kb || !p->programs[ka].name || !p->programs[kb].name) continue;
        plan_status st = check_coll_pair(m, g, gr->ranks[0], gr->ranks[j]);
        if (st) return st;
    }
    return PLAN_OK;
}

// Whether programs a and b were compared on the current group; records them if not.
static plan_status pair_seen(comm *m, uint32_t a, uint32_t b, bool *seen) {
    for (size_t i = 0; i < m->n_pairs; i++)
        if (m->pairs[2 * i] == a && m->pairs[2 * i + 1] == b) return *seen = true, PLAN_OK;
    *seen = false;
    if (m->n_pairs == m->cap_pairs) {
        size_t cap = m->cap_pairs ? 2 * m->cap_pairs : 16;
        uint32_t *v = realloc(m->pairs, cap * 2 * sizeof(uint32_t));
        if (!v) return cfail(m->c, "out of memory");
        m->pairs = v;
        m->cap_pairs = cap;
    }
    m->pairs[2 * m->n_pairs] = a;
    m->pairs[2 * m->n_pairs++ + 1] = b;
    return PLAN_OK;
}

// A group over mesh axes: one instance per set of coordinates off those axes; in each, every
// rank against the first. Each pair of programs is compared once per group.
static plan_status check_mask_group(comm *m, uint32_t g) {
    const plan *p = m->c->p;
    uint32_t axes = p->groups[g].axes;
    m->n_pairs = 0;
    for (uint32_t r = 0; r < p->n_ranks; r++) m->first_prog[r] = PLAN_NONE;
    for (uint32_t r = 0; r < p->n_ranks; r++) {
        uint64_t base = r;
        for (uint32_t i = 0; i < p->meta.n_axes; i++)
            if (axes >> i & 1u) base -= p->ranks[r].coord[i] * m->c->stride[i];
        uint32_t k = p->ranks[r].program, k0 = m->first_prog[base];
        if (k0 == PLAN_NONE) {
            m->first_prog[base] = k;
            m->first_rank[base] = r;
            continue;
        }
        if (k0 == k || !p->programs[k].name || !p->programs[k0].name) continue;
        bool seen;
        plan_status st = pair_seen(m, k0, k, &seen);
        if (!st && !seen) st = check_coll_pair(m, g, m->first_rank[base], r);
        if (st) return st;
    }
    return PLAN_OK;
}

static plan_status check_comm(checker *c) {
    const plan *p = c->p;
    comm m = {.c = c};
    m.prefix = calloc((size_t)p->n_programs + 1, sizeof(uint32_t *));
    m.first_prog = malloc(((size_t)p->n_ranks + 1) * sizeof(uint32_t));
    m.first_rank = malloc(((size_t)p->n_ranks + 1) * sizeof(uint32_t));
    plan_status st = !m.prefix || !m.first_prog || !m.first_rank ? cfail(c, "out of memory") : PLAN_OK;
    for (uint32_t k = 0; !st && k < p->n_programs; k++) {
        const plan_program *pg = &p->programs[k];
        m.prefix[k] = malloc(((size_t)pg->n_insns + 1) * sizeof(uint32_t));
        if (!m.prefix[k]) st = cfail(c, "out of memory");
        else m.prefix[k][0] = 0;
        for (uint32_t i = 0; !st && i < pg->n_insns; i++) {
            uint8_t kind = pg->insns[i].kind;
            m.prefix[k][i + 1] = m.prefix[k][i] + (kind == PLAN_I_SEND || kind == PLAN_I_RECV || kind == PLAN_I_COLL);
        }
    }
    if (!st) st = check_p2p(&m);
    for (uint32_t g = 0; !st && g < p->n_groups; g++)
        st = p->groups[g].axes ? check_mask_group(&m, g) : check_explicit_group(&m, g);
    for (uint32_t k = 0; m.prefix && k < p->n_programs; k++) free(m.prefix[k]);
    free(m.prefix);
    free(m.first_prog);
    free(m.first_rank);
    free(m.pairs);
    return st;
}

/* ---- plan_check: background programs ----
 *
 * A background loop (PLAN_LOOP_BACKGROUND*) is a program that runs beside the steps, on its
 * own thread or stream, at times the runtime picks; so it must touch nothing the foreground
 * relies on except the params it synchronizes: it is at the top level and holds no loop; all
 * its instructions are on one stream that nothing else uses; it neither sends, receives,
 * records nor waits; its collectives are on groups that only background bodies use; the
 * buffers it uses other than persistent params overlap no buffer used outside it; and a
 * continuous one (count 0) ends with its stop flag: an in-place all_reduce of a 4-byte f32
 * scratch buffer, which the runtime fills with "this rank's foreground is done". */

// bg[i]: the background loop instruction i is in (PLAN_NONE: none); -1 on a fault.
static plan_status background_map(checker *c, uint32_t k, uint32_t *bg) {
    const plan_program *pg = &c->p->programs[k];
    uint32_t end = 0, cur = PLAN_NONE, seen = PLAN_NONE, depth_end[PLAN_MAX_LOOP_DEPTH];
    int depth = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        while (depth && i >= depth_end[depth - 1]) depth--;
        if (cur != PLAN_NONE && i >= end) cur = PLAN_NONE;
        const plan_insn *in = &pg->insns[i];
        bg[i] = cur;
        if (in->kind != PLAN_I_LOOP) continue;
        if (plan_loop_is_background(in->code) && depth)
            return ifail(c, k, i, "a background loop inside another loop: a background round runs outside the step's loops");
        if (cur != PLAN_NONE) return ifail(c, k, i, "a loop inside background loop %u: a round's body holds no loop", cur);
        if (plan_loop_is_background(in->code) && seen != PLAN_NONE)
            return ifail(c, k, i, "a second background loop (the first is insn %u): a program has one background round", seen);
        if (plan_loop_is_background(in->code)) cur = seen = i, end = i + 1 + (uint32_t)in->b;
        depth_end[depth++] = i + 1 + (uint32_t)in->b;
    }
    return PLAN_OK;
}

static plan_status check_background_insn(checker *c, uint32_t k, uint32_t i, const uint32_t *bg, const bool *fg_group) {
    const plan_program *pg = &c->p->programs[k];
    const plan_insn *in = &pg->insns[i], *L = &pg->insns[bg[i]];
    if (in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV || in->kind == PLAN_I_RECORD || in->kind == PLAN_I_WAIT)
        return ifail(c, k, i, "in background loop %u: a background round neither sends, receives, records nor waits", bg[i]);
    if (in->stream != pg->insns[bg[i] + 1].stream)
        return ifail(c, k, i, "in background loop %u: on stream %u, but the round runs on stream %u", bg[i], in->stream,
                     pg->insns[bg[i] + 1].stream);
    if (in->kind == PLAN_I_COLL && fg_group[in->a])
        return ifail(c, k, i, "in background loop %u: group %d is also used by the foreground: a background round needs a communicator of its own",
                     bg[i], in->a);
    if (L->a == 0 && i == bg[i] + (uint32_t)L->b) {
        uint32_t b = in->nargs ? pg->args[in->args] : PLAN_NONE;
        const plan_insn *fill = &pg->insns[i - 1];
        if (in->kind != PLAN_I_COLL || in->code != 0 || in->nargs != 2 || pg->args[in->args + 1] != b ||
            pg->buffers[b].tensor != PLAN_NONE || pg->buffers[b].dtype != 0 || pg->buffers[b].bytes != 4 || L->b < 2 ||
            fill->kind != PLAN_I_COMPUTE || strcmp(plan_op_name(fill->code), "fill") || fill->nargs != 1 || pg->args[fill->args] != b)
            return ifail(c, k, i, "continuous background loop %u must end with its stop flag: a fill of a 4-byte f32 scratch buffer, then an in-place all_reduce of it",
                         bg[i]);
    }
    return PLAN_OK;
}

// Buffer b's arena bytes [lo, hi) over all its slots.
static void buffer_extent(const plan_buffer *bf, uint64_t *lo, uint64_t *hi) {
    *lo = bf->offset;
    *hi = bf->offset + bf->bytes + (uint64_t)(bf->mb_slots - 1) * bf->mb_stride + (uint64_t)(bf->layer_slots - 1) * bf->layer_stride;
}

static bool is_param_home(const plan *p, const plan_buffer *bf) {
    return (bf->flags & PLAN_BUF_PERSIST) && bf->tensor != PLAN_NONE && p->tensors[bf->tensor].kind == PLAN_T_PARAM;
}

static plan_status check_background_memory(checker *c, uint32_t k, const uint32_t *bg) {
    const plan_program *pg = &c->p->programs[k];
    uint8_t *use = calloc((size_t)pg->n_buffers + 1, 1); // bit 0: foreground, bit 1: background
    if (!use) return pfail(c, k, "out of memory");
    for (uint32_t i = 0; i < pg->n_insns; i++)
        for (uint32_t a = 0; pg->insns[i].kind != PLAN_I_LOOP && a < pg->insns[i].nargs; a++)
            use[pg->args[pg->insns[i].args + a]] |= bg[i] == PLAN_NONE ? 1 : 2;
    plan_status st = PLAN_OK;
    for (uint32_t b = 0; b < pg->n_buffers && !st; b++) {
        if (!(use[b] & 2) || is_param_home(c->p, &pg->buffers[b])) continue;
        uint64_t lo, hi, lo2, hi2;
        buffer_extent(&pg->buffers[b], &lo, &hi);
        for (uint32_t o = 0; o < pg->n_buffers && !st; o++) {
            if (o == b || !(use[o] & 1)) continue;
            buffer_extent(&pg->buffers[o], &lo2, &hi2);
            if (lo < hi2 && lo2 < hi)
                st = bfail(c, k, b, "used by a background round, overlaps buffer %u, which the foreground uses (arena bytes %llu..%llu): the two run at the same time",
                           o, (unsigned long long)(lo > lo2 ? lo : lo2), (unsigned long long)((hi < hi2 ? hi : hi2) - 1));
        }
    }
    free(use);
    return st;
}

static plan_status check_background(checker *c, uint32_t k) {
    const plan_program *pg = &c->p->programs[k];
    uint32_t *bg = malloc(((size_t)pg->n_insns + 1) * sizeof *bg);
    bool *fg_group = calloc((size_t)c->p->n_groups + 1, sizeof *fg_group);
    bool *fg_stream = calloc(256, sizeof *fg_stream), any = false;
    plan_status st = !bg || !fg_group || !fg_stream ? pfail(c, k, "out of memory") : background_map(c, k, bg);
    for (uint32_t i = 0; !st && i < pg->n_insns; i++) {
        const plan_insn *in = &pg->insns[i];
        any |= bg[i] != PLAN_NONE;
        if (bg[i] != PLAN_NONE || in->kind == PLAN_I_LOOP) continue;
        fg_stream[in->stream] = true;
        if (in->kind == PLAN_I_COLL) fg_group[in->a] = true;
    }
    for (uint32_t i = 0; !st && any && i < pg->n_insns; i++) {
        if (bg[i] == PLAN_NONE) continue;
        if (i == bg[i] + 1 && fg_stream[pg->insns[i].stream])
            st = ifail(c, k, i, "background loop %u runs on stream %u, which the foreground uses too: a round needs a stream of its own",
                       bg[i], pg->insns[i].stream);
        if (!st) st = check_background_insn(c, k, i, bg, fg_group);
    }
    if (!st && any) st = check_background_memory(c, k, bg);
    free(bg), free(fg_group), free(fg_stream);
    return st;
}

static plan_status check_program(checker *c, uint32_t k) {
    const plan_program *pg = &c->p->programs[k];
    plan_status st = PLAN_OK;
    for (uint32_t b = 0; b < pg->n_buffers && !st; b++) st = check_buffer(c, k, b);
    if (!st) st = check_background(c, k);
    if (!st) st = check_insns(c, k);
    if (!st) st = check_flow(c, k);
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
    return st ? st : check_comm(&c);
}
