/*
 * print.c: the plan's text form, and its printer (plan_print); parse.c reads it back
 * (plan_parse). The names are names.c's.
 *
 * The text form says everything the file says, one item per line, so that a plan can be read,
 * diffed, hand-written (broken ones included, for tests) and assembled back into the same bytes:
 * for every plan p, plan_encode(plan_parse(plan_print(p))) == plan_encode(p), and for every text
 * t that plan_print printed, plan_print(plan_parse(t)) == t. Integers are decimal (hashes in
 * hex), doubles with an integral value in full, other doubles the shortest "%.Ng" that reads
 * back to the same bits (inf, -inf; a NaN as nan:0x<its 64 bits>), strings in double quotes with \\ \" \n \r \t and \xHH escapes (bytes
 * below 0x20 and from 0x7f up are escaped), a missing string as -. A line's fields come in a
 * fixed order; optional ones are left out when they hold their default. Blank lines and lines
 * that start with # are comments; leading spaces are ignored (instruction lines are indented by
 * loop depth for the reader only). The lines, in this order (runtime/PLAN_FORMAT.md has them
 * all with an example):
 *
 *   plan 4                                  the format version (required, first)
 *   compiler "plancc 0.1.0"                 optional lines, in this order:
 *   model "gpt-tiny"                          model name, or -
 *   options "--pp 2"                          the canonical option string, or -
 *   hashes model 0x... cluster 0x... options 0x...
 *   mesh pp 2 tp 2                          required: axis names and sizes (world = product)
 *   micro_batches 4 schedule 1f1b zero_stage 0
 *   estimate step_s 0.5 peak_bytes 1048576 [model_flops 3.1e+12] [device_peak_flops 3.12e+14]
 *   loss 8                                    the loss tensor (absent: none)
 *   notes "tp 2: ...\n..."                    the compiler's decisions (absent: none)
 *   tensor 0 "x" f32 input [4,8] data normal    tensors, numbered from 0: name dtype kind shape,
 *   tensor 1 "w" f32 param [8,8] copies 12 init normal 0 0.02    [copies N] when N != 1 (a
 *                                             repeated block's), then an input's "data NAME
 *                                             [HIGH]" or "data teacher SCALE BIAS" or another tensor's "init NAME [A B]"
 *                                             (absent: source 0), with the numbers the name takes,
 *                                             then an input's "zigzag DIM CHUNKS" when it has one
 *   group 0 axes tp                         groups: over mesh axes (tp, dp+tp), or
 *   group 1 ranks 0,2                         an explicit list of ranks
 *   ranks 0-1 program 0                     the rank table, as runs of ranks (all ranks)
 *   program 0 "stage0" arena 4096 streams 2 priority 0,-1 events 1
 *     buffer 0 tensor 0 f32 at 0 bytes 128 [mb_slots 4 mb_stride 128] [layer_slots 2
 *       layer_stride 512] [layer_base 2] [persist] [shard pp=d0 tp=v]   (or: buffer 1 scratch f32 ...)
 *     attrs 0 f 1,1e-05 i 7 perm 1,0 win 3,3,1,1,0,0   (each list without trailing zeros)
 *     0: loop mb 4 body 2
 *     1:   compute linear s0 mb-1 args 0,1 -> 2 attrs 0 phase=fwd t=2.5e-05
 *     2:   send s1 pp +1 args 2 phase=fwd t=1e-05
 *          recv s1 pp -1 args 3          coll all_reduce s1 group 0 args 4 -> 4
 *          send s0 pp -1 tag 1 args 5    (a tag 1..7 after the offset; absent: tag 0)
 *          copy s0 args 2 -> 3           record s0 event 0     wait s1 event 0
 *
 * A shard lists the axes that are not R, in mesh order: AXIS=v (partial sums) or AXIS=dI
 * (dimension I split); "shard" is left out when every axis is R.
 *
 * An instruction line starts with its index and a colon; compute, coll, send, recv and copy end
 * with the optional "phase=fwd|bwd|recompute|opt" (absent: none) and "t=SECONDS" (the cost
 * model's time, a float; absent: 0). "args IN -> OUT" lists buffer ids; the
 * arrow only helps the reader (an operator's outputs per ops.def, a collective's or copy's
 * second buffer): the arguments are the two lists joined.
 *
 * plan_print with only_rank >= 0 prints every program but that rank's as a comment; a program
 * that was not loaded (a plan read for one rank) is a comment too. Such text describes part of
 * a plan and does not assemble.
 */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

static void print_str(FILE *f, const char *s) {
    if (!s) {
        fputc('-', f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '\\': fputs("\\\\", f); break;
        case '"': fputs("\\\"", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*c < 0x20 || *c >= 0x7f) fprintf(f, "\\x%02x", *c);
            else fputc(*c, f);
        }
    }
    fputc('"', f);
}

// An integral value in full; else the shortest %.Ng that reads back to the same bits.
static void print_f64(FILE *f, double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof(bits));
    if (isnan(x)) {
        fprintf(f, "nan:0x%016llx", (unsigned long long)bits);
        return;
    }
    if (isinf(x)) {
        fputs(x < 0 ? "-inf" : "inf", f);
        return;
    }
    char buf[40];
    if (x == floor(x) && fabs(x) < 9007199254740992.0 && !(x == 0 && signbit(x))) {
        fprintf(f, "%.0f", x); // an integer: all its digits (2960, not 2.96e+03)
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, x);
        double y = strtod(buf, NULL);
        if (memcmp(&x, &y, sizeof(x)) == 0) break;
    }
    fputs(buf, f);
}

static void print_mesh(FILE *f, const plan_meta *m) {
    fputs("mesh", f);
    for (uint32_t i = 0; i < m->n_axes && i < PLAN_MAX_AXES; i++) fprintf(f, " %.8s %u", m->axis_names[i], m->mesh[i]);
    fputc('\n', f);
}

static void print_head(FILE *f, const plan *p) {
    const plan_meta *m = &p->meta;
    fprintf(f, "# plancc plan, text form (runtime/PLAN_FORMAT.md)\nplan %u\ncompiler ", PLAN_VERSION);
    char compiler[sizeof(m->compiler) + 1] = {0};
    memcpy(compiler, m->compiler, sizeof(m->compiler));
    print_str(f, compiler);
    fputs("\nmodel ", f);
    print_str(f, m->model_name);
    fputs("\noptions ", f);
    print_str(f, m->options);
    fprintf(f, "\nhashes model 0x%016llx cluster 0x%016llx options 0x%016llx\n", (unsigned long long)m->model_hash,
            (unsigned long long)m->cluster_hash, (unsigned long long)m->options_hash);
    print_mesh(f, m);
    const char *sched = plan_schedule_name((uint32_t)m->schedule);
    fprintf(f, "micro_batches %u schedule %s zero_stage %u\nestimate step_s ", m->micro_batches, sched ? sched : "?",
            m->zero_stage);
    print_f64(f, m->est_step_s);
    fputs(" peak_bytes ", f);
    print_f64(f, m->est_peak_bytes);
    if (m->model_flops != 0 || signbit(m->model_flops)) {
        fputs(" model_flops ", f);
        print_f64(f, m->model_flops);
    }
    if (m->device_peak_flops != 0 || signbit(m->device_peak_flops)) {
        fputs(" device_peak_flops ", f);
        print_f64(f, m->device_peak_flops);
    }
    fputc('\n', f);
    if (m->loss != PLAN_NONE) fprintf(f, "loss %u\n", m->loss);
    if (m->notes) {
        fputs("notes ", f);
        print_str(f, m->notes);
        fputc('\n', f);
    }
}

static void print_tensor(FILE *f, const plan *p, uint32_t i) {
    const plan_tensor *t = &p->tensors[i];
    const char *dt = plan_dtype_name(t->dtype), *kind = plan_tensor_kind_name(t->kind);
    fprintf(f, "tensor %u ", i);
    print_str(f, t->name);
    fprintf(f, " %s %s [", dt ? dt : "?", kind ? kind : "?");
    for (int d = 0; d < t->rank && d < PLAN_MAX_RANK; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    fputc(']', f);
    if (t->copies != 1) fprintf(f, " copies %u", t->copies);
    if (t->source) { // an input's data source, any other tensor's initializer (a param's, in a valid plan)
        const char *name = t->kind == PLAN_T_INPUT ? plan_data_name(t->source) : plan_init_name(t->source);
        fprintf(f, " %s %s", t->kind == PLAN_T_INPUT ? "data" : "init", name ? name : "?");
        unsigned used = plan_source_args(t->kind, t->source);
        for (unsigned k = 0; k < used; k++) {
            fputc(' ', f);
            print_f64(f, k ? t->b : t->a);
        }
    }
    if (t->zigzag) fprintf(f, " zigzag %u %u", t->zigzag_dim, t->zigzag);
    fputc('\n', f);
}

static void print_group(FILE *f, const plan *p, uint32_t g) {
    const plan_group *gr = &p->groups[g];
    fprintf(f, "group %u ", g);
    if (gr->axes) {
        fputs("axes ", f);
        bool first = true;
        for (uint32_t i = 0; i < 32; i++)
            if (gr->axes >> i & 1u) {
                if (i < p->meta.n_axes) fprintf(f, "%s%.8s", first ? "" : "+", p->meta.axis_names[i]);
                else fprintf(f, "%s?%u", first ? "" : "+", i);
                first = false;
            }
    } else {
        fputs("ranks ", f);
        for (uint32_t j = 0; j < gr->n_ranks; j++) fprintf(f, "%s%u", j ? "," : "", gr->ranks[j]);
    }
    fputc('\n', f);
}

static void print_ranks(FILE *f, const plan *p) {
    for (uint32_t r = 0; r < p->n_ranks;) {
        uint32_t e = r;
        while (e + 1 < p->n_ranks && p->ranks[e + 1].program == p->ranks[r].program) e++;
        if (e == r) fprintf(f, "ranks %u program %u\n", r, p->ranks[r].program);
        else fprintf(f, "ranks %u-%u program %u\n", r, e, p->ranks[r].program);
        r = e + 1;
    }
}

// A comma list of n u64, without its trailing zeros; nothing when all are zero.
static void print_list(FILE *f, const char *key, const int64_t *v, int n) {
    while (n > 0 && v[n - 1] == 0) n--;
    if (!n) return;
    fprintf(f, " %s ", key);
    for (int i = 0; i < n; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)v[i]);
}

static void print_buffer(FILE *f, const plan *p, const plan_program *pg, uint32_t b) {
    const plan_buffer *bf = &pg->buffers[b];
    const char *dt = plan_dtype_name(bf->dtype);
    if (bf->tensor == PLAN_NONE) fprintf(f, "  buffer %u scratch", b);
    else fprintf(f, "  buffer %u tensor %u", b, bf->tensor);
    fprintf(f, " %s at %llu bytes %llu", dt ? dt : "?", (unsigned long long)bf->offset, (unsigned long long)bf->bytes);
    if (bf->mb_slots != 1 || bf->mb_stride)
        fprintf(f, " mb_slots %u mb_stride %llu", bf->mb_slots, (unsigned long long)bf->mb_stride);
    if (bf->layer_slots != 1 || bf->layer_stride)
        fprintf(f, " layer_slots %u layer_stride %llu", bf->layer_slots, (unsigned long long)bf->layer_stride);
    if (bf->layer_base) fprintf(f, " layer_base %u", bf->layer_base);
    if (bf->flags & PLAN_BUF_PERSIST) fprintf(f, " persist");
    char shard[80];
    plan_shard_text(p, bf->shard, shard, sizeof(shard));
    if (shard[0]) fprintf(f, " shard %s", shard);
    fputc('\n', f);
}

static void print_attrs(FILE *f, const plan_program *pg, uint32_t a) {
    const plan_attrs *at = &pg->attrs[a];
    fprintf(f, "  attrs %u", a);
    int nf = 8;
    while (nf > 0 && at->f[nf - 1] == 0 && !signbit(at->f[nf - 1])) nf--;
    if (nf) {
        fputs(" f ", f);
        for (int i = 0; i < nf; i++) {
            if (i) fputc(',', f);
            print_f64(f, at->f[i]);
        }
    }
    int64_t v[8];
    print_list(f, "i", at->i, 8);
    for (int i = 0; i < PLAN_MAX_RANK; i++) v[i] = at->perm[i];
    print_list(f, "perm", v, PLAN_MAX_RANK);
    for (int i = 0; i < 6; i++) v[i] = at->win[i];
    print_list(f, "win", v, 6);
    fputc('\n', f);
}

// " args IN -> OUT": the first `split` arguments before the arrow.
static void print_args(FILE *f, const plan_program *pg, const plan_insn *in, uint32_t split) {
    if (!in->nargs) return;
    fputs(" args", f);
    for (uint32_t j = 0; j < in->nargs; j++) {
        uint32_t b = (uint64_t)in->args + j < pg->n_args ? pg->args[in->args + j] : PLAN_NONE;
        fprintf(f, j == split ? " -> %u" : j ? ",%u" : " %u", b);
    }
}

// Where an instruction's arguments split into inputs and outputs, for the arrow.
static uint32_t args_split(const plan_insn *in) {
    if (in->kind == PLAN_I_COMPUTE) {
        // an operator's outputs (ops.def's out column) come last
        static const int op_out[] = {
#define OP(E, name, imin, imax, nout, ann, flags) nout,
#include "../ops.def"
#undef OP
        };
        static const int op_in_max[] = {
#define OP(E, name, imin, imax, nout, ann, flags) imax,
#include "../ops.def"
#undef OP
        };
        if (in->code >= COUNT(op_out)) return in->nargs;
        int out = op_out[in->code], nin = out >= 0 ? in->nargs - out : op_in_max[in->code];
        return nin < 0 ? in->nargs : nin > in->nargs ? in->nargs : (uint32_t)nin;
    }
    if (in->kind == PLAN_I_COLL) return in->nargs / 2u; // a bucket: its ins, then its outs
    if (in->kind == PLAN_I_COPY) return in->nargs ? 1 : 0;
    return in->nargs;
}

// " phase=fwd t=2.5e-05": the phase unless none, the time unless 0 (the shortest %.Ng that reads
// back to the same float; integral values in full).
static void print_time(FILE *f, const plan_insn *in) {
    const char *ph = plan_phase_name(in->phase);
    if (in->phase) {
        if (ph) fprintf(f, " phase=%s", ph);
        else fprintf(f, " phase=?%u", in->phase);
    }
    float x = in->t_s;
    if (x == 0 && !signbit(x)) return;
    if (!isfinite(x)) {
        fprintf(f, " t=%s", isnan(x) ? "nan" : x < 0 ? "-inf" : "inf");
        return;
    }
    char buf[40];
    if (x == floorf(x) && fabsf(x) < 16777216.0f) {
        fprintf(f, " t=%.0f", (double)x);
        return;
    }
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, (double)x);
        float y = strtof(buf, NULL);
        if (memcmp(&x, &y, sizeof(x)) == 0) break;
    }
    fprintf(f, " t=%s", buf);
}

static void print_mb(FILE *f, const plan_insn *in) {
    if (in->mb_delta) fprintf(f, " mb%+d", in->mb_delta);
    if (in->layer_delta) fprintf(f, " layer%+d", in->layer_delta);
}

static void print_insn(FILE *f, const plan *p, const plan_program *pg, uint32_t i, int depth) {
    const plan_insn *in = &pg->insns[i];
    const char *n;
    fprintf(f, "  %u: %*s", i, 2 * depth, "");
    switch (in->kind) {
    case PLAN_I_COMPUTE:
        n = plan_op_name(in->code);
        if (n) fprintf(f, "compute %s s%u", n, in->stream);
        else fprintf(f, "compute ?%u s%u", in->code, in->stream);
        break;
    case PLAN_I_COLL:
        n = plan_coll_name(in->code);
        fprintf(f, "coll %s s%u", n ? n : "?", in->stream);
        break;
    case PLAN_I_SEND:
    case PLAN_I_RECV:
        fprintf(f, "%s s%u", plan_insn_kind_name(in->kind), in->stream);
        break;
    case PLAN_I_COPY: fprintf(f, "copy s%u", in->stream); break;
    case PLAN_I_RECORD:
    case PLAN_I_WAIT: fprintf(f, "%s s%u event %d\n", plan_insn_kind_name(in->kind), in->stream, in->a); return;
    case PLAN_I_LOOP:
        n = plan_loop_var_name(in->code);
        fprintf(f, "loop %s %d body %d\n", n ? n : "?", in->a, in->b);
        return;
    default: fprintf(f, "? kind %u\n", in->kind); return;
    }
    print_mb(f, in);
    if (in->kind == PLAN_I_COLL) fprintf(f, " group %d", in->a);
    if (in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV)
        fprintf(f, " %.8s %+d", in->a >= 0 && (uint32_t)in->a < p->meta.n_axes ? p->meta.axis_names[in->a] : "?", in->b);
    if ((in->kind == PLAN_I_SEND || in->kind == PLAN_I_RECV) && in->tag) fprintf(f, " tag %u", in->tag);
    print_args(f, pg, in, args_split(in));
    if ((in->kind == PLAN_I_COMPUTE || in->kind == PLAN_I_COLL) && in->attrs != PLAN_NONE) fprintf(f, " attrs %u", in->attrs);
    print_time(f, in);
    fputc('\n', f);
}

static void print_program(FILE *f, const plan *p, uint32_t k) {
    const plan_program *pg = &p->programs[k];
    fprintf(f, "program %u ", k);
    print_str(f, pg->name);
    fprintf(f, " arena %llu streams %u", (unsigned long long)pg->arena_bytes, pg->n_streams);
    for (uint32_t s = 0; s < pg->n_streams && s < 8; s++) fprintf(f, s ? ",%d" : " priority %d", pg->priority[s]);
    fprintf(f, " events %u\n", pg->n_events);
    for (uint32_t b = 0; b < pg->n_buffers; b++) print_buffer(f, p, pg, b);
    for (uint32_t a = 0; a < pg->n_attrs; a++) print_attrs(f, pg, a);
    uint32_t end[PLAN_MAX_LOOP_DEPTH];
    int depth = 0;
    for (uint32_t i = 0; i < pg->n_insns; i++) {
        while (depth && i >= end[depth - 1]) depth--;
        print_insn(f, p, pg, i, depth);
        const plan_insn *in = &pg->insns[i];
        if (in->kind == PLAN_I_LOOP && depth < PLAN_MAX_LOOP_DEPTH && in->b > 0) end[depth++] = i + 1 + (uint32_t)in->b;
    }
}

void plan_print(FILE *f, const plan *p, int only_rank) {
    print_head(f, p);
    for (uint32_t i = 0; i < p->n_tensors; i++) print_tensor(f, p, i);
    for (uint32_t g = 0; g < p->n_groups; g++) print_group(f, p, g);
    print_ranks(f, p);
    uint32_t only = only_rank >= 0 && (uint32_t)only_rank < p->n_ranks ? p->ranks[only_rank].program : PLAN_NONE;
    for (uint32_t k = 0; k < p->n_programs; k++) {
        if (!p->programs[k].name) fprintf(f, "# program %u: not loaded\n", k);
        else if (only_rank >= 0 && k != only) fprintf(f, "# program %u: not shown (rank %d runs program %u)\n", k, only_rank, only);
        else print_program(f, p, k);
    }
}
