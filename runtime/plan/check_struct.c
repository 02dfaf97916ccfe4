/*
 * check_struct.c: the verifier's first layer, records and ranges. plan_validate checks what
 * the file format itself needs before anything may index the plan: every index in range
 * (tensors, the loss, groups, programs, buffers, args, attrs, streams, events, mesh axes),
 * every enum value known (dtypes, kinds, operators, collectives, loop variables, phases), the
 * mesh consistent with world and the rank table, axis names that are identifiers, tensors with
 * at least one copy, every param with an initializer and every input with a data source (and
 * no other tensor with either) whose numbers are in range, shards that name mesh axes and (for
 * a tensor buffer) dimensions of its tensor, layer slots inside their tensor's copies, loops
 * nested (check_loops.c), instruction times and META's FLOP figures finite and >= 0.
 *
 * plan_decode runs it on every plan it reads and plan_encode on every plan it writes, so that
 * nothing downstream sees an index out of range; its faults are PLAN_ERR_FORMAT, with a message
 * that names the item. check_tensors, run by plan_check, adds that every dimension is >= 1.
 */
#include "checker.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static plan_status vfail(plan_status st, char *err, size_t err_n, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static plan_status vfail(plan_status st, char *err, size_t err_n, const char *fmt, va_list ap) {
    if (err && err_n) vsnprintf(err, err_n, fmt, ap);
    return st;
}

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
    const char *name = check_name_or(t->name, "?");
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
    const char *name = check_name_or(t->name, "?");
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
                   check_name_or(t->name, "?"), plan_tensor_kind_name(t->kind), t->source);
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
        if (t->zigzag && ((t->kind != PLAN_T_INPUT && t->kind != PLAN_T_PARAM) || t->zigzag % 2 || t->zigzag < 4 ||
                          t->zigzag_dim >= t->rank || t->shape[t->zigzag_dim] % t->zigzag))
            return bad(v, "tensor %u \"%s\": zigzag %u %u: only an input or a parameter takes a zigzag order, of an even number of "
                       "chunks from 4 that divides its dimension (rank %u)", i, check_name_or(t->name, "?"), t->zigzag_dim, t->zigzag,
                       t->rank);
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
        if (in->code >= check_n_ops)
            return bad(v, "program %u: insn %u (%s): operator %u unknown (%u operators)", k, i, kn, in->code, check_n_ops);
        if (in->attrs != PLAN_NONE && in->attrs >= pg->n_attrs)
            return bad(v, "program %u: insn %u (%s): attrs %u out of range (%u attrs)", k, i, kn, in->attrs, pg->n_attrs);
        return PLAN_OK;
    case PLAN_I_COLL:
        if (!plan_coll_name(in->code)) return bad(v, "program %u: insn %u (%s): collective %u unknown", k, i, kn, in->code);
        if (in->a < 0 || (uint32_t)in->a >= p->n_groups)
            return bad(v, "program %u: insn %u (%s): group %d out of range (%u groups)", k, i, kn, in->a, p->n_groups);
        if (in->attrs != PLAN_NONE && in->attrs >= pg->n_attrs) // a chunk's range (check_insn.c reads it)
            return bad(v, "program %u: insn %u (%s): attrs %u out of range (%u attrs)", k, i, kn, in->attrs, pg->n_attrs);
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
    return st ? st : check_loop_nesting(v->p, k, v->err, v->err_n);
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

/* ---- tensors ---- */

plan_status check_tensors(checker *c) {
    for (uint32_t i = 0; i < c->p->n_tensors; i++) {
        const plan_tensor *t = &c->p->tensors[i];
        for (int d = 0; d < t->rank; d++)
            if (t->shape[d] < 1)
                return check_fail(c, "tensor %u \"%s\": dimension %d is %lld, at least 1", i, check_name_or(t->name, "?"), d,
                                  (long long)t->shape[d]);
    }
    return PLAN_OK;
}
