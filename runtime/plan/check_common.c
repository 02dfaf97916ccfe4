/*
 * check_common.c: what the verifier's layers share (checker.h): the operators' arities from
 * runtime/ops.def, how a message names a shape, an axis set, a shard or a buffer, and the fault
 * messages, which start with the program, its name and the ranks that run it ("program 1
 * \"stage1\" (ranks 2-3): insn 7 (linear): ..."), so that a fault in a program that many ranks
 * share names all of them.
 */
#include "checker.h"

#include <string.h>

#include <stdarg.h>
#include <stdio.h>

/* ---- operator arities, from the operator table ---- */

#define USER 0u
#define INTERNAL 0u
#define ELEMENTWISE 0u
#define MATMUL 0u
#define LOSS 0u
#define INPLACE 1u
#define BCAST 0u
#define RNG 0u
const check_op_arity check_op_arities[] = {
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
const uint32_t check_n_ops = (uint32_t)(sizeof(check_op_arities) / sizeof(check_op_arities[0]));

/* ---- which dimensions an operator sums away, from its annotation ---- */

static const char *const op_annotations[] = {
#define OP(E, name, imin, imax, nout, ann, flags) ann,
#include "../ops.def"
#undef OP
};

// Token t (0-based; spaces between) of the comma-separated part `part` of annotation side s,
// copied into buf without its marks; *reduce: it carries '+'; *variadic: it starts with '*'.
// The number of tokens of that part when t is -1. -1 when there is no such part or token.
static int ann_token(const char *s, int part, int t, char *buf, size_t n, bool *reduce, bool *variadic) {
    for (int k = 0; k < part && s; k++) s = strchr(s, ','), s = s ? s + 1 : NULL;
    if (!s) return -1;
    int count = 0;
    while (*s && *s != ',') {
        while (*s == ' ') s++;
        if (!*s || *s == ',') break;
        const char *e = s;
        while (*e && *e != ' ' && *e != ',') e++;
        if (count == t) {
            size_t m = 0;
            *reduce = *variadic = false;
            for (const char *c = s; c < e; c++) {
                if (*c == '+') *reduce = true;
                else if (*c == '*') *variadic = true;
                else if (*c != '^' && m + 1 < n) buf[m++] = *c;
            }
            buf[m] = 0;
            return t;
        }
        count++;
        s = e;
    }
    return t < 0 ? count : -1;
}

bool check_op_sums_away(uint32_t op, uint32_t q, int rank_q, int d, uint32_t rank_out, uint32_t j) {
    const char *name = plan_op_name(op);
    if (name && !strcmp(name, "reduce_sum")) return d < rank_q - (int)rank_out; // its leading axes are summed
    if (op >= check_n_ops || !op_annotations[op][0]) return false;
    const char *ann = op_annotations[op], *arrow = strstr(ann, "->");
    if (!arrow) return false;
    char in[32], letter[32];
    size_t left_n = (size_t)(arrow - ann);
    if (left_n >= 256) return false;
    char left[256];
    memcpy(left, ann, left_n), left[left_n] = 0;
    bool reduce, variadic;
    int n = ann_token(left, (int)q, -1, in, sizeof in, &reduce, &variadic);
    if (n <= 0 || ann_token(left, (int)q, 0, in, sizeof in, &reduce, &variadic) < 0) return false;
    int t = d; // a leading variadic group covers rank_q - (n - 1) dimensions
    if (variadic) t = d < rank_q - (n - 1) ? 0 : d - (rank_q - (n - 1)) + 1;
    if (ann_token(left, (int)q, t, letter, sizeof letter, &reduce, &variadic) < 0 || !reduce) return false;
    const char *right = arrow + 2;
    int m = ann_token(right, (int)j, -1, in, sizeof in, &reduce, &variadic);
    for (int k = 0; k < m; k++) {
        bool r2, v2;
        if (ann_token(right, (int)j, k, in, sizeof in, &r2, &v2) >= 0 && !strcmp(in, letter)) return false;
    }
    return true;
}

/* ---- naming things ---- */

const char *check_name_or(const char *s, const char *dflt) { return s ? s : dflt; }

// "[16,8]"
void check_shape_text(const int64_t *v, int rank, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < rank && at < n; d++) at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? "," : "", (long long)v[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

// "dp+tp": the mesh axes in mask, joined by +.
void check_axes_text(const plan *p, uint32_t mask, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (uint32_t a = 0; a < p->meta.n_axes && at < n; a++)
        if (mask >> a & 1u) at += (size_t)snprintf(buf + at, n - at, "%s%.8s", at ? "+" : "", p->meta.axis_names[a]);
}

// The axes on which s splits dimension d, as a mask.
uint32_t check_split_axes(const plan *p, plan_shard s, int d) {
    uint32_t mask = 0;
    for (uint32_t a = 0; a < p->meta.n_axes && a < PLAN_MAX_AXES; a++)
        if (s.map[a] == PLAN_SHARD_D(d)) mask |= 1u << a;
    return mask;
}

// plan_shard_text, or "all R" for a shard that splits nothing.
void check_shard_desc(const plan *p, plan_shard s, char *buf, size_t n) {
    plan_shard_text(p, s, buf, n);
    if (!buf[0]) snprintf(buf, n, "all R");
}

// One axis's entry as the text form writes it: "R" (which the text form leaves out), "v", "d1".
const char *check_shard_value(uint8_t v, char buf[8]) {
    if (v == PLAN_SHARD_R) return "R";
    if (v == PLAN_SHARD_V) return "v";
    snprintf(buf, 8, "d%u", v - PLAN_SHARD_D(0));
    return buf;
}

// "buffer 3 (param "w")" or "buffer 2 (scratch)".
void check_buffer_desc(const plan *p, const plan_program *pg, uint32_t b, char *buf, size_t n) {
    const plan_buffer *bf = &pg->buffers[b];
    if (bf->tensor == PLAN_NONE) snprintf(buf, n, "buffer %u (scratch)", b);
    else
        snprintf(buf, n, "buffer %u (%s \"%s\")", b, plan_tensor_kind_name(p->tensors[bf->tensor].kind),
                 check_name_or(p->tensors[bf->tensor].name, "?"));
}

/* ---- fault messages ---- */

static plan_status vfail(plan_status st, char *err, size_t err_n, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static plan_status vfail(plan_status st, char *err, size_t err_n, const char *fmt, va_list ap) {
    if (err && err_n) vsnprintf(err, err_n, fmt, ap);
    return st;
}

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
    snprintf(buf, n, "program %u \"%s\" (ranks %s)", k, check_name_or(p->programs[k].name, "?"), ranks);
}

plan_status check_fail(checker *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    plan_status st = vfail(PLAN_ERR_INVALID, c->err, c->err_n, fmt, ap);
    va_end(ap);
    return st;
}

// "program k "name" (ranks ...): insn i (kind): " + the message.
plan_status check_ifail(checker *c, uint32_t k, uint32_t i, const char *fmt, ...) {
    char label[160], msg[600];
    prog_label(c->p, k, label, sizeof(label));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return check_fail(c, "%s: insn %u (%s): %s", label, i, plan_insn_name(&c->p->programs[k].insns[i]), msg);
}

// "program k "name" (ranks ...): buffer b: " + the message.
plan_status check_bfail(checker *c, uint32_t k, uint32_t b, const char *fmt, ...) {
    char label[160], msg[600];
    prog_label(c->p, k, label, sizeof(label));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return check_fail(c, "%s: buffer %u: %s", label, b, msg);
}

// "program k "name" (ranks ...): " + the message.
plan_status check_pfail(checker *c, uint32_t k, const char *fmt, ...) {
    char label[160], msg[700];
    prog_label(c->p, k, label, sizeof(label));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return check_fail(c, "%s: %s", label, msg);
}

// check_pfail's message, PLAN_ERR_LIMIT's status.
plan_status check_plimit(checker *c, uint32_t k, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    check_pfail(c, k, "%s", msg);
    return PLAN_ERR_LIMIT;
}
