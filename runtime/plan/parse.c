/*
 * parse.c: the plan's text form read back into a plan (plan_parse): plandump --assemble, and
 * every test that writes a plan by hand. print.c describes the form and prints it.
 *
 * The parser reads the text line by line: a line is split into tokens at spaces (a quoted
 * string is one token), its first word names the kind of line, and a table of line kinds gives
 * the stage each kind belongs to, so that the header lines come once each and in order, then
 * tensors, groups, ranks and programs, each program with its buffers, attrs and instructions.
 * Items grow arrays that the plan owns (plan_alloc), doubling.
 *
 * It checks syntax and what the in-memory plan needs to hold the text (items numbered in order,
 * names that exist, numbers that fit their fields, ranks covering the mesh); indices into other
 * tables (a group, a buffer, a program) are left to plan_check, so that broken plans can be
 * written down and assembled. Every error is PLAN_ERR_FORMAT with "FILE:LINE: message", and
 * leaves the plan zeroed.
 */
#include "plan.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

#define MAX_TOKENS 48
#define MAX_TEXT_WORLD (1u << 24) // ranks a text plan may have

typedef struct tok {
    const char *s;
    uint32_t n;
} tok;

// The order of the lines: header lines once each, in order; then items; then programs, each
// with its buffers, attrs and instructions in that order.
enum { S_START, S_PLAN, S_COMPILER, S_MODEL, S_OPTIONS, S_HASHES, S_MESH, S_MB, S_ESTIMATE, S_LOSS, S_NOTES,
       S_TENSOR, S_GROUP, S_RANKS, S_PROGRAM, S_BUFFER, S_ATTRS, S_INSN };

typedef struct parser {
    plan *p;
    const char *file;
    uint32_t line;
    char *err;
    size_t err_n;
    int stage;
    bool have_mesh;
    uint32_t cap_tensors, cap_groups, cap_programs;
    uint32_t cap_buffers, cap_attrs, cap_insns, cap_args; // of the last program
    uint32_t next_rank;
    tok t[MAX_TOKENS];
    int nt, at;                 // the line's tokens, and the next one to read
} parser;

static plan_status perr(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static plan_status perr(parser *ps, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (ps->err && ps->err_n) snprintf(ps->err, ps->err_n, "%s:%u: %s", ps->file, ps->line, msg);
    return PLAN_ERR_FORMAT;
}

static plan_status oom(parser *ps) { return perr(ps, "out of memory"); }

// Splits a line into tokens at spaces and tabs; a quoted string is one token.
static plan_status tokenize(parser *ps, const char *s, size_t n) {
    ps->nt = ps->at = 0;
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
    if (i == n || s[i] == '#') return PLAN_OK;
    while (i < n) {
        size_t start = i;
        if (s[i] == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\' && i + 1 < n) i++;
            if (i == n) return perr(ps, "a string has no closing quote");
            i++;
        } else {
            while (i < n && s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '"') i++;
        }
        for (size_t j = start; j < i; j++)
            if ((unsigned char)s[j] < 0x20 && s[j] != '\t') return perr(ps, "control character 0x%02x in the line", (unsigned char)s[j]);
        if (ps->nt == MAX_TOKENS) return perr(ps, "more than %d words on one line", MAX_TOKENS);
        ps->t[ps->nt++] = (tok){s + start, (uint32_t)(i - start)};
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
    }
    return PLAN_OK;
}

static bool is(tok t, const char *w) { return t.n == strlen(w) && memcmp(t.s, w, t.n) == 0; }

static tok next(parser *ps) { return ps->at < ps->nt ? ps->t[ps->at++] : (tok){NULL, 0}; }

// For messages: 'word' or "the end of the line".
static const char *shown(tok t, char *buf, size_t n) {
    if (!t.s) return "the end of the line";
    snprintf(buf, n, "'%.*s'", t.n > 40 ? 40 : (int)t.n, t.s);
    return buf;
}

static plan_status expect(parser *ps, const char *w) {
    tok t = next(ps);
    char b[64];
    return is(t, w) ? PLAN_OK : perr(ps, "expected '%s', found %s", w, shown(t, b, sizeof(b)));
}

static plan_status end_of_line(parser *ps) {
    char b[64];
    return ps->at < ps->nt ? perr(ps, "unexpected %s", shown(ps->t[ps->at], b, sizeof(b))) : PLAN_OK;
}

// A decimal integer, the whole of t: its magnitude, and its sign when is_signed allows one.
static bool tok_int(tok t, bool is_signed, uint64_t *mag, bool *neg) {
    uint32_t i = 0;
    *neg = false;
    if (is_signed && t.n && (t.s[0] == '-' || t.s[0] == '+')) *neg = t.s[i++] == '-';
    if (i == t.n) return false;
    uint64_t v = 0;
    for (; i < t.n; i++) {
        if (t.s[i] < '0' || t.s[i] > '9') return false;
        if (v > (UINT64_MAX - (uint64_t)(t.s[i] - '0')) / 10) return false;
        v = v * 10 + (uint64_t)(t.s[i] - '0');
    }
    *mag = v;
    return true;
}

static plan_status tok_u64(parser *ps, tok t, const char *what, uint64_t hi, uint64_t *v) {
    bool neg;
    char b[64];
    if (!tok_int(t, false, v, &neg) || *v > hi)
        return perr(ps, "%s: expected an integer from 0 to %llu, found %s", what, (unsigned long long)hi, shown(t, b, sizeof(b)));
    return PLAN_OK;
}

static plan_status tok_i64(parser *ps, tok t, const char *what, int64_t lo, int64_t hi, int64_t *v) {
    bool neg;
    uint64_t mag;
    char b[64];
    bool ok = tok_int(t, true, &mag, &neg) && mag <= (uint64_t)INT64_MAX + neg;
    if (ok) *v = !neg ? (int64_t)mag : mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    if (!ok || *v < lo || *v > hi)
        return perr(ps, "%s: expected an integer from %lld to %lld, found %s", what, (long long)lo, (long long)hi,
                    shown(t, b, sizeof(b)));
    return PLAN_OK;
}

static plan_status get_u64(parser *ps, const char *what, uint64_t hi, uint64_t *v) {
    return tok_u64(ps, next(ps), what, hi, v);
}

static plan_status get_u32(parser *ps, const char *what, uint32_t *v) {
    uint64_t x = 0;
    plan_status st = get_u64(ps, what, UINT32_MAX, &x);
    *v = (uint32_t)x;
    return st;
}

static plan_status get_i32(parser *ps, const char *what, int32_t *v) {
    int64_t x = 0;
    plan_status st = tok_i64(ps, next(ps), what, INT32_MIN, INT32_MAX, &x);
    *v = (int32_t)x;
    return st;
}

static int hex_digit(char ch) {
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

// 0x followed by 1 to 16 hex digits.
static plan_status get_hex64(parser *ps, const char *what, uint64_t *v) {
    tok t = next(ps);
    char b[64];
    bool ok = t.n > 2 && t.n <= 18 && t.s[0] == '0' && t.s[1] == 'x';
    *v = 0;
    for (uint32_t i = 2; ok && i < t.n; i++) {
        int d = hex_digit(t.s[i]);
        ok = d >= 0;
        *v = *v << 4 | (uint64_t)(d & 15);
    }
    return ok ? PLAN_OK : perr(ps, "%s: expected 0x and up to 16 hex digits, found %s", what, shown(t, b, sizeof(b)));
}

// A double as print_f64 writes it (or anything strtod reads whole); nan:0x<bits> for a NaN.
static plan_status tok_f64(parser *ps, tok t, const char *what, double *v) {
    char buf[64], b[64];
    if (t.n == 0 || t.n >= sizeof(buf)) return perr(ps, "%s: expected a number, found %s", what, shown(t, b, sizeof(b)));
    memcpy(buf, t.s, t.n);
    buf[t.n] = 0;
    if (t.n > 4 && memcmp(buf, "nan:", 4) == 0) {
        parser sub = *ps;
        sub.t[0] = (tok){t.s + 4, t.n - 4};
        sub.nt = 1;
        sub.at = 0;
        uint64_t bits;
        if (get_hex64(&sub, what, &bits)) return PLAN_ERR_FORMAT;
        memcpy(v, &bits, sizeof(*v));
        if (!isnan(*v)) return perr(ps, "%s: %s is not a NaN", what, buf);
        return PLAN_OK;
    }
    char *end;
    *v = strtod(buf, &end);
    if (*end || isnan(*v)) return perr(ps, "%s: expected a number, found %s", what, shown(t, b, sizeof(b)));
    return PLAN_OK;
}

// The escape at t.s[*i] (just after a backslash, inside the quotes ending at t.n - 1); steps *i
// past it.
static plan_status unescape(parser *ps, tok t, uint32_t *i, const char *what, char *out) {
    char e = t.s[*i];
    if (e == 'x' && *i + 2 < t.n - 1 && hex_digit(t.s[*i + 1]) >= 0 && hex_digit(t.s[*i + 2]) >= 0) {
        *out = (char)(hex_digit(t.s[*i + 1]) << 4 | hex_digit(t.s[*i + 2]));
        *i += 2;
        return *out ? PLAN_OK : perr(ps, "%s: a string may not hold a NUL (\\x00)", what);
    }
    if (e != 'n' && e != 'r' && e != 't' && e != '\\' && e != '"')
        return perr(ps, "%s: unknown escape \\%c in a string (known: \\\\ \\\" \\n \\r \\t \\xHH)", what, e);
    *out = e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
    return PLAN_OK;
}

// A quoted string (its escapes undone, into memory the plan owns) or - for none.
static plan_status tok_str(parser *ps, tok t, const char *what, const char **out) {
    char b[64];
    *out = NULL;
    if (is(t, "-")) return PLAN_OK;
    if (t.n < 2 || t.s[0] != '"' || t.s[t.n - 1] != '"')
        return perr(ps, "%s: expected a quoted string or -, found %s", what, shown(t, b, sizeof(b)));
    char *s = plan_alloc(ps->p, t.n);
    if (!s) return oom(ps);
    size_t n = 0;
    for (uint32_t i = 1; i + 1 < t.n; i++) {
        char ch = t.s[i];
        if (ch == '\\') {
            i++;
            plan_status st = unescape(ps, t, &i, what, &ch);
            if (st) return st;
        }
        s[n++] = ch;
    }
    *out = s;
    return PLAN_OK;
}

static plan_status get_str(parser *ps, const char *what, const char **out) { return tok_str(ps, next(ps), what, out); }

// A name among table's n names; its index.
static plan_status get_name(parser *ps, const char *what, const char *const *table, uint32_t n, uint32_t *v) {
    tok t = next(ps);
    char b[64];
    for (uint32_t i = 0; i < n; i++)
        if (is(t, table[i])) return *v = i, PLAN_OK;
    return perr(ps, "%s: unknown name %s", what, shown(t, b, sizeof(b)));
}

// A name that name_of gives to some value from `first` on (name_of gives NULL past the last
// value: names.c's lookups); that value.
static plan_status get_named(parser *ps, const char *what, const char *(*name_of)(uint32_t), uint32_t first, uint32_t *v) {
    tok t = next(ps);
    char b[64];
    for (uint32_t i = first; name_of(i); i++)
        if (is(t, name_of(i))) return *v = i, PLAN_OK;
    return perr(ps, "%s: unknown name %s", what, shown(t, b, sizeof(b)));
}

// A comma list of signed integers in [lo, hi], at most max of them.
static plan_status get_list(parser *ps, const char *what, int64_t lo, int64_t hi, int64_t *out, int max, int *n) {
    tok t = next(ps);
    *n = 0;
    if (!t.s) return perr(ps, "%s: expected a list of numbers, found the end of the line", what);
    for (uint32_t i = 0;;) {
        uint32_t e = i;
        while (e < t.n && t.s[e] != ',') e++;
        if (*n == max) return perr(ps, "%s: more than %d values", what, max);
        plan_status st = tok_i64(ps, (tok){t.s + i, e - i}, what, lo, hi, &out[(*n)++]);
        if (st || e == t.n) return st;
        i = e + 1;
    }
}

// The next item's number, which must be `want` (items are numbered in order from 0).
static plan_status get_index(parser *ps, const char *what, uint32_t want) {
    uint32_t v;
    plan_status st = get_u32(ps, what, &v);
    if (!st && v != want) return perr(ps, "%s %u: expected %s %u (items are numbered in order from 0)", what, v, what, want);
    return st;
}

// Room for one more item in an array the plan owns (plan_grow: doubling; old copies stay with the plan).
static void *grow(parser *ps, void *arr, uint32_t n, uint32_t *cap, size_t elem) {
    return n == UINT32_MAX ? NULL : plan_grow(ps->p, arr, n, n + 1, cap, elem);
}

/* Header lines. */

static plan_status parse_plan(parser *ps) {
    uint64_t v;
    plan_status st = get_u64(ps, "plan", UINT32_MAX, &v);
    if (!st && v != PLAN_VERSION) return perr(ps, "version %llu (this reader knows %u)", (unsigned long long)v, PLAN_VERSION);
    return st;
}

static plan_status parse_compiler(parser *ps) {
    const char *s;
    plan_status st = get_str(ps, "compiler", &s);
    if (st) return st;
    if (s && strlen(s) >= sizeof(ps->p->meta.compiler))
        return perr(ps, "compiler: at most %zu bytes", sizeof(ps->p->meta.compiler) - 1);
    if (s) memcpy(ps->p->meta.compiler, s, strlen(s));
    return PLAN_OK;
}

static plan_status parse_model(parser *ps) { return get_str(ps, "model", &ps->p->meta.model_name); }
static plan_status parse_options(parser *ps) { return get_str(ps, "options", &ps->p->meta.options); }

static plan_status parse_hashes(parser *ps) {
    plan_meta *m = &ps->p->meta;
    plan_status st = expect(ps, "model");
    if (!st) st = get_hex64(ps, "model hash", &m->model_hash);
    if (!st) st = expect(ps, "cluster");
    if (!st) st = get_hex64(ps, "cluster hash", &m->cluster_hash);
    if (!st) st = expect(ps, "options");
    if (!st) st = get_hex64(ps, "options hash", &m->options_hash);
    return st;
}

static plan_status mesh_axis(parser *ps, uint32_t i, uint64_t *world) {
    plan_meta *m = &ps->p->meta;
    tok name = next(ps);
    bool ok = name.n >= 1 && name.n < sizeof(m->axis_names[i]);
    for (uint32_t j = 0; ok && j < name.n; j++)
        ok = (name.s[j] >= 'a' && name.s[j] <= 'z') || (name.s[j] >= 'A' && name.s[j] <= 'Z') ||
             (name.s[j] >= '0' && name.s[j] <= '9') || name.s[j] == '_';
    char b[64];
    if (!ok) return perr(ps, "mesh: axis names are 1 to 7 letters, digits or _, found %s", shown(name, b, sizeof(b)));
    memcpy(m->axis_names[i], name.s, name.n);
    plan_status st = get_u32(ps, "mesh axis size", &m->mesh[i]);
    if (!st && !m->mesh[i]) return perr(ps, "mesh: axis %.*s has size 0", (int)name.n, name.s);
    *world *= m->mesh[i];
    if (!st && *world > MAX_TEXT_WORLD) return perr(ps, "mesh: more than %u ranks", MAX_TEXT_WORLD);
    m->n_axes = i + 1;
    return st;
}

// The mesh, and with it the world and the rank table (programs filled in by the ranks lines).
static plan_status parse_mesh(parser *ps) {
    plan *p = ps->p;
    uint64_t world = 1;
    plan_status st = PLAN_OK;
    for (uint32_t i = 0; !st && ps->at < ps->nt; i++)
        st = i < PLAN_MAX_AXES ? mesh_axis(ps, i, &world) : perr(ps, "mesh: at most %d axes", PLAN_MAX_AXES);
    if (st) return st;
    ps->have_mesh = true;
    p->meta.world = (uint32_t)world;
    p->ranks = plan_alloc(p, (size_t)world * sizeof(plan_rank));
    if (!p->ranks) return oom(ps);
    p->n_ranks = (uint32_t)world;
    for (uint32_t r = 0; r < world; r++) {
        p->ranks[r].program = PLAN_NONE;
        uint32_t rest = r;
        for (int i = (int)p->meta.n_axes - 1; i >= 0; i--) {
            p->ranks[r].coord[i] = rest % p->meta.mesh[i];
            rest /= p->meta.mesh[i];
        }
    }
    return PLAN_OK;
}

static plan_status parse_micro_batches(parser *ps) {
    plan_meta *m = &ps->p->meta;
    uint32_t sched = 0;
    plan_status st = get_u32(ps, "micro_batches", &m->micro_batches);
    if (!st) st = expect(ps, "schedule");
    if (!st) st = get_named(ps, "schedule", plan_schedule_name, 0, &sched);
    m->schedule = (plan_schedule)sched;
    if (!st) st = expect(ps, "zero_stage");
    if (!st) st = get_u32(ps, "zero_stage", &m->zero_stage);
    return st;
}

static plan_status parse_estimate(parser *ps) {
    plan_status st = expect(ps, "step_s");
    if (!st) st = tok_f64(ps, next(ps), "step_s", &ps->p->meta.est_step_s);
    if (!st) st = expect(ps, "peak_bytes");
    if (!st) st = tok_f64(ps, next(ps), "peak_bytes", &ps->p->meta.est_peak_bytes);
    if (!st && ps->at < ps->nt && is(ps->t[ps->at], "model_flops") && ++ps->at)
        st = tok_f64(ps, next(ps), "model_flops", &ps->p->meta.model_flops);
    if (!st && ps->at < ps->nt && is(ps->t[ps->at], "device_peak_flops") && ++ps->at)
        st = tok_f64(ps, next(ps), "device_peak_flops", &ps->p->meta.device_peak_flops);
    return st;
}

// "loss T": the loss tensor (checked against the tensors by plan_validate).
static plan_status parse_loss(parser *ps) {
    uint64_t v = 0;
    plan_status st = get_u64(ps, "loss", UINT32_MAX - 1, &v);
    ps->p->meta.loss = (uint32_t)v;
    return st;
}

static plan_status parse_notes(parser *ps) { return get_str(ps, "notes", &ps->p->meta.notes); }

/* Tensors, groups, ranks. */

// "init NAME [A B]" (any kind but input) or "data NAME [A [B]]" (an input): the source and the
// numbers its name takes. Whether the kind may have a source at all is plan_validate's to say.
static plan_status tensor_source(parser *ps, plan_tensor *t) {
    bool data = is(next(ps), "data");
    if (data && t->kind != PLAN_T_INPUT)
        return perr(ps, "data: only an input takes 'data' (the %s's source is written 'init NAME')", plan_tensor_kind_name(t->kind));
    if (!data && t->kind == PLAN_T_INPUT) return perr(ps, "init: an input takes 'data NAME', not 'init'");
    uint32_t v = 0; // "none" (0) is not written: a tensor without a source has no init or data
    plan_status st = data ? get_named(ps, "data", plan_data_name, 1, &v) : get_named(ps, "init", plan_init_name, 1, &v);
    t->source = (uint8_t)v;
    unsigned used = plan_source_args(t->kind, t->source);
    static const char *const what[2][2] = {{"init normal mean", "init normal std"}, {"init uniform low", "init uniform high"}};
    for (unsigned k = 0; !st && k < used; k++)
        st = tok_f64(ps, next(ps), data ? (used == 2 ? (k ? "data teacher bias" : "data teacher scale") : "data high")
                                        : what[t->source == PLAN_INIT_UNIFORM][k], k ? &t->b : &t->a);
    return st;
}

static plan_status parse_tensor(parser *ps) {
    plan *p = ps->p;
    plan_tensor *v = grow(ps, p->tensors, p->n_tensors, &ps->cap_tensors, sizeof(plan_tensor));
    if (!v) return oom(ps);
    p->tensors = v;
    plan_tensor *t = &v[p->n_tensors];
    uint32_t dtype = 0, kind = 0;
    plan_status st = get_index(ps, "tensor", p->n_tensors);
    if (!st) st = get_str(ps, "tensor name", &t->name);
    if (!st) st = get_named(ps, "dtype", plan_dtype_name, 0, &dtype);
    if (!st) st = get_named(ps, "tensor kind", plan_tensor_kind_name, 0, &kind);
    tok shape = next(ps);
    char b[64];
    if (!st && (shape.n < 2 || shape.s[0] != '[' || shape.s[shape.n - 1] != ']'))
        return perr(ps, "shape: expected [d0,d1,...] without spaces, found %s", shown(shape, b, sizeof(b)));
    int n = 0;
    if (!st && shape.n > 2) {
        parser sub = *ps; // the list inside the brackets
        sub.t[0] = (tok){shape.s + 1, shape.n - 2};
        sub.nt = 1;
        sub.at = 0;
        st = get_list(&sub, "shape", INT64_MIN, INT64_MAX, t->shape, PLAN_MAX_RANK, &n);
    }
    t->dtype = (uint8_t)dtype;
    t->kind = (uint8_t)kind;
    t->rank = (uint8_t)n;
    t->copies = 1;
    if (!st && ps->at < ps->nt && is(ps->t[ps->at], "copies") && ++ps->at) st = get_u32(ps, "copies", &t->copies);
    if (!st && ps->at < ps->nt && (is(ps->t[ps->at], "init") || is(ps->t[ps->at], "data"))) st = tensor_source(ps, t);
    uint32_t zd = 0, zn = 0;
    if (!st && ps->at < ps->nt && is(ps->t[ps->at], "zigzag") && ++ps->at) {
        st = get_u32(ps, "zigzag dimension", &zd);
        if (!st) st = get_u32(ps, "zigzag chunks", &zn);
        if (!st && (zd >= PLAN_MAX_RANK || zn < 1 || zn > UINT16_MAX))
            return perr(ps, "zigzag %u %u: the dimension below %d and 1 to %u chunks", zd, zn, PLAN_MAX_RANK, UINT16_MAX);
        t->zigzag = (uint16_t)zn, t->zigzag_dim = (uint8_t)zd;
    }
    if (!st) p->n_tensors++;
    return st;
}

// "dp+tp": a mask of mesh axes by name.
static plan_status axes_mask(parser *ps, uint32_t *mask) {
    tok t = next(ps);
    const plan_meta *m = &ps->p->meta;
    *mask = 0;
    char b[64];
    if (!t.s) return perr(ps, "axes: expected mesh axis names joined by +, found the end of the line");
    for (uint32_t i = 0;;) {
        uint32_t e = i;
        while (e < t.n && t.s[e] != '+') e++;
        uint32_t a = 0;
        while (a < m->n_axes && !(strlen(m->axis_names[a]) == e - i && memcmp(m->axis_names[a], t.s + i, e - i) == 0)) a++;
        if (a == m->n_axes) return perr(ps, "axes: no mesh axis named %s", shown((tok){t.s + i, e - i}, b, sizeof(b)));
        *mask |= 1u << a;
        if (e == t.n) return PLAN_OK;
        i = e + 1;
    }
}

static plan_status group_ranks(parser *ps, plan_group *g) {
    tok t = ps->at < ps->nt ? ps->t[ps->at] : (tok){NULL, 0};
    uint32_t n = 1;
    for (uint32_t i = 0; i < t.n; i++) n += t.s[i] == ',';
    int64_t *v = malloc(n * sizeof(int64_t));
    g->ranks = plan_alloc(ps->p, n * sizeof(uint32_t));
    if (!v || !g->ranks) return free(v), oom(ps);
    int got = 0;
    plan_status st = get_list(ps, "ranks", 0, UINT32_MAX, v, (int)n, &got);
    for (int i = 0; !st && i < got; i++) g->ranks[i] = (uint32_t)v[i];
    g->n_ranks = (uint32_t)got;
    free(v);
    return st;
}

static plan_status parse_group(parser *ps) {
    plan *p = ps->p;
    plan_group *v = grow(ps, p->groups, p->n_groups, &ps->cap_groups, sizeof(plan_group));
    if (!v) return oom(ps);
    p->groups = v;
    plan_group *g = &v[p->n_groups];
    memset(g, 0, sizeof(*g));
    plan_status st = get_index(ps, "group", p->n_groups);
    tok kind = next(ps);
    char b[64];
    if (!st && is(kind, "axes")) st = axes_mask(ps, &g->axes);
    else if (!st && is(kind, "ranks")) st = group_ranks(ps, g);
    else if (!st) st = perr(ps, "group: expected 'axes' or 'ranks', found %s", shown(kind, b, sizeof(b)));
    if (!st) p->n_groups++;
    return st;
}

// "ranks A-B program K" (or "ranks A program K"): the next run of the rank table.
static plan_status parse_ranks(parser *ps) {
    tok t = next(ps);
    uint32_t dash = 0;
    while (dash < t.n && t.s[dash] != '-') dash++;
    uint64_t a, b;
    plan_status st = tok_u64(ps, (tok){t.s, dash}, "ranks", UINT32_MAX, &a);
    b = a;
    if (!st && dash < t.n) st = tok_u64(ps, (tok){t.s + dash + 1, t.n - dash - 1}, "ranks", UINT32_MAX, &b);
    uint32_t k = 0;
    if (!st) st = expect(ps, "program");
    if (!st) st = get_u32(ps, "program", &k);
    if (st) return st;
    if (a != ps->next_rank) return perr(ps, "ranks: expected rank %u next (the ranks lines list every rank in order)", ps->next_rank);
    if (b < a || b >= ps->p->n_ranks)
        return perr(ps, "ranks: %llu-%llu is not a run of ranks in 0..%u", (unsigned long long)a, (unsigned long long)b,
                    ps->p->n_ranks - 1);
    for (uint64_t r = a; r <= b; r++) ps->p->ranks[r].program = k;
    ps->next_rank = (uint32_t)b + 1;
    return PLAN_OK;
}

/* Programs. */

static plan_program *cur_program(parser *ps) { return &ps->p->programs[ps->p->n_programs - 1]; }

static plan_status parse_program(parser *ps) {
    plan *p = ps->p;
    plan_program *v = grow(ps, p->programs, p->n_programs, &ps->cap_programs, sizeof(plan_program));
    if (!v) return oom(ps);
    p->programs = v;
    plan_program *pg = &v[p->n_programs];
    memset(pg, 0, sizeof(*pg));
    plan_status st = get_index(ps, "program", p->n_programs);
    if (!st) st = get_str(ps, "program name", &pg->name);
    if (!st && !pg->name) return perr(ps, "program: a program needs a name (\"\" will do)");
    if (!st) st = expect(ps, "arena");
    if (!st) st = get_u64(ps, "arena", UINT64_MAX, &pg->arena_bytes);
    if (!st) st = expect(ps, "streams");
    if (!st) st = get_u32(ps, "streams", &pg->n_streams);
    if (!st && pg->n_streams > 8) return perr(ps, "streams: %u, at most 8", pg->n_streams);
    int64_t prio[8];
    int n = 0;
    if (!st && pg->n_streams) st = expect(ps, "priority");
    if (!st && pg->n_streams) st = get_list(ps, "priority", INT32_MIN, INT32_MAX, prio, 8, &n);
    if (!st && (uint32_t)n != pg->n_streams) return perr(ps, "priority: %d values for %u streams", n, pg->n_streams);
    for (int i = 0; i < n; i++) pg->priority[i] = (int32_t)prio[i];
    if (!st) st = expect(ps, "events");
    if (!st) st = get_u32(ps, "events", &pg->n_events);
    if (st) return st;
    p->n_programs++;
    ps->cap_buffers = ps->cap_attrs = ps->cap_insns = ps->cap_args = 0;
    return PLAN_OK;
}

// One "AXIS=v" or "AXIS=dI" of a shard (the axis not given before).
static plan_status shard_word(parser *ps, tok t, plan_shard *s) {
    const plan_meta *m = &ps->p->meta;
    char b[64];
    uint32_t eq = 0;
    while (eq < t.n && t.s[eq] != '=') eq++;
    uint32_t a = 0;
    while (a < m->n_axes && !(strlen(m->axis_names[a]) == eq && memcmp(m->axis_names[a], t.s, eq) == 0)) a++;
    if (a == m->n_axes) return perr(ps, "shard: no mesh axis named %s", shown((tok){t.s, eq}, b, sizeof(b)));
    if (s->map[a] != PLAN_SHARD_R) return perr(ps, "shard: axis %s is given twice", m->axis_names[a]);
    tok v = {t.s + eq + 1, t.n - eq - 1};
    uint64_t dim;
    bool neg;
    if (is(v, "v")) s->map[a] = PLAN_SHARD_V;
    else if (v.n >= 2 && v.s[0] == 'd' && tok_int((tok){v.s + 1, v.n - 1}, false, &dim, &neg) &&
             dim <= UINT8_MAX - PLAN_SHARD_D(0))
        s->map[a] = (uint8_t)PLAN_SHARD_D(dim);
    else return perr(ps, "shard: %s: expected AXIS=v (partial sums) or AXIS=dI (dimension I split)", shown(t, b, sizeof(b)));
    return PLAN_OK;
}

// "shard AXIS=v|dI ...": the axes that are not R (at least one), to the next word without "=".
static plan_status parse_shard(parser *ps, plan_shard *s) {
    plan_status st = PLAN_OK;
    int n = 0;
    while (!st && ps->at < ps->nt && memchr(ps->t[ps->at].s, '=', ps->t[ps->at].n)) st = shard_word(ps, next(ps), s), n++;
    if (!st && !n) return perr(ps, "shard: expected AXIS=v or AXIS=dI (an all-R shard is written without 'shard')");
    return st;
}

// The optional parts of a buffer line: slots and strides, layer base, shard.
static plan_status buffer_options(parser *ps, plan_buffer *b) {
    plan_status st = PLAN_OK;
    while (!st && ps->at < ps->nt) {
        tok k = next(ps);
        char s[64];
        if (is(k, "mb_slots")) st = get_u32(ps, "mb_slots", &b->mb_slots);
        else if (is(k, "mb_stride")) st = get_u64(ps, "mb_stride", UINT64_MAX, &b->mb_stride);
        else if (is(k, "layer_slots")) st = get_u32(ps, "layer_slots", &b->layer_slots);
        else if (is(k, "layer_stride")) st = get_u64(ps, "layer_stride", UINT64_MAX, &b->layer_stride);
        else if (is(k, "layer_base")) st = get_u32(ps, "layer_base", &b->layer_base);
        else if (is(k, "persist")) b->flags |= PLAN_BUF_PERSIST;
        else if (is(k, "shard")) st = parse_shard(ps, &b->shard);
        else st = perr(ps, "buffer: unexpected %s (known: mb_slots, mb_stride, layer_slots, layer_stride, layer_base, persist, shard)",
                       shown(k, s, sizeof(s)));
    }
    return st;
}

static plan_status parse_buffer(parser *ps) {
    plan_program *pg = cur_program(ps);
    plan_buffer *v = grow(ps, pg->buffers, pg->n_buffers, &ps->cap_buffers, sizeof(plan_buffer));
    if (!v) return oom(ps);
    pg->buffers = v;
    plan_buffer *b = &v[pg->n_buffers];
    *b = (plan_buffer){.tensor = PLAN_NONE, .mb_slots = 1, .layer_slots = 1};
    plan_status st = get_index(ps, "buffer", pg->n_buffers);
    tok t = next(ps);
    char s[64];
    uint32_t dtype = 0;
    uint64_t tensor = 0;
    if (!st && is(t, "tensor")) {
        st = get_u64(ps, "tensor", UINT32_MAX - 1, &tensor);
        b->tensor = (uint32_t)tensor;
    } else if (!st && !is(t, "scratch")) st = perr(ps, "buffer: expected 'tensor N' or 'scratch', found %s", shown(t, s, sizeof(s)));
    if (!st) st = get_named(ps, "dtype", plan_dtype_name, 0, &dtype);
    b->dtype = (uint8_t)dtype;
    if (!st) st = expect(ps, "at");
    if (!st) st = get_u64(ps, "offset", UINT64_MAX, &b->offset);
    if (!st) st = expect(ps, "bytes");
    if (!st) st = get_u64(ps, "bytes", UINT64_MAX, &b->bytes);
    if (!st) st = buffer_options(ps, b);
    if (!st) pg->n_buffers++;
    return st;
}

static plan_status parse_attrs(parser *ps) {
    plan_program *pg = cur_program(ps);
    plan_attrs *v = grow(ps, pg->attrs, pg->n_attrs, &ps->cap_attrs, sizeof(plan_attrs));
    if (!v) return oom(ps);
    pg->attrs = v;
    plan_attrs *a = &v[pg->n_attrs];
    memset(a, 0, sizeof(*a));
    plan_status st = get_index(ps, "attrs", pg->n_attrs);
    int64_t list[8];
    int n = 0;
    while (!st && ps->at < ps->nt) {
        tok k = next(ps), t;
        char s[64];
        if (is(k, "f")) {
            t = next(ps);
            n = 0;
            for (uint32_t i = 0; !st && t.s && i <= t.n; n++) {
                uint32_t e = i;
                while (e < t.n && t.s[e] != ',') e++;
                st = n == 8 ? perr(ps, "attrs f: more than 8 values") : tok_f64(ps, (tok){t.s + i, e - i}, "attrs f", &a->f[n]);
                i = e + 1;
            }
            if (!t.s) st = perr(ps, "attrs f: expected a list of numbers, found the end of the line");
        } else if (is(k, "i")) {
            st = get_list(ps, "attrs i", INT64_MIN, INT64_MAX, a->i, 8, &n);
        } else if (is(k, "perm") || is(k, "win")) {
            bool perm = is(k, "perm");
            st = get_list(ps, perm ? "attrs perm" : "attrs win", INT32_MIN, INT32_MAX, list, perm ? PLAN_MAX_RANK : 6, &n);
            for (int i = 0; i < n; i++) *(perm ? &a->perm[i] : &a->win[i]) = (int32_t)list[i];
        } else {
            st = perr(ps, "attrs: unexpected %s (known: f, i, perm, win)", shown(k, s, sizeof(s)));
        }
    }
    if (!st) pg->n_attrs++;
    return st;
}

/* Instructions. */

// "s3": a stream, then an optional "mb+1"/"mb-1".
static plan_status insn_stream(parser *ps, plan_insn *in, bool mb) {
    tok t = next(ps);
    char s[64];
    uint64_t v;
    if (t.n < 2 || t.s[0] != 's' || tok_u64(ps, (tok){t.s + 1, t.n - 1}, "stream", 255, &v))
        return perr(ps, "expected a stream (s0 to s255), found %s", shown(t, s, sizeof(s)));
    in->stream = (uint8_t)v;
    if (!mb || ps->at == ps->nt) return PLAN_OK;
    t = ps->t[ps->at];
    int64_t d;
    if (t.n >= 4 && memcmp(t.s, "mb", 2) == 0 && (t.s[2] == '+' || t.s[2] == '-')) {
        ps->at++;
        plan_status st = tok_i64(ps, (tok){t.s + 2, t.n - 2}, "mb delta", INT16_MIN, INT16_MAX, &d);
        if (st) return st;
        in->mb_delta = (int16_t)d;
        if (ps->at == ps->nt) return PLAN_OK;
        t = ps->t[ps->at];
    }
    if (t.n < 7 || memcmp(t.s, "layer", 5) != 0 || (t.s[5] != '+' && t.s[5] != '-')) return PLAN_OK;
    ps->at++;
    plan_status st = tok_i64(ps, (tok){t.s + 5, t.n - 5}, "layer delta", INT16_MIN, INT16_MAX, &d);
    in->layer_delta = (int16_t)d;
    return st;
}

// One comma list of buffer ids, appended to the program's arguments.
static plan_status args_list(parser *ps, tok t, plan_insn *in) {
    plan_program *pg = cur_program(ps);
    for (uint32_t i = 0;;) {
        uint32_t e = i;
        while (e < t.n && t.s[e] != ',') e++;
        uint64_t b;
        plan_status st = tok_u64(ps, (tok){t.s + i, e - i}, "args", UINT32_MAX, &b);
        if (st) return st;
        if (in->nargs == UINT16_MAX) return perr(ps, "args: more than %u buffers", UINT16_MAX);
        uint32_t *v = grow(ps, pg->args, pg->n_args, &ps->cap_args, sizeof(uint32_t));
        if (!v) return oom(ps);
        pg->args = v;
        pg->args[pg->n_args++] = (uint32_t)b;
        in->nargs++;
        if (e == t.n) return PLAN_OK;
        i = e + 1;
    }
}

// "phase=..." or "t=...": the optional words that end an instruction line.
static bool is_tail(tok t) { return (t.n >= 2 && memcmp(t.s, "t=", 2) == 0) || (t.n >= 6 && memcmp(t.s, "phase=", 6) == 0); }

// " args IN -> OUT" (either list may be missing; the arrow is for the reader); nothing if absent.
static plan_status insn_args(parser *ps, plan_insn *in) {
    if (ps->at == ps->nt || !is(ps->t[ps->at], "args")) return PLAN_OK;
    ps->at++;
    plan_status st = PLAN_OK;
    bool arrow = false;
    while (!st && ps->at < ps->nt && !is(ps->t[ps->at], "attrs") && !is_tail(ps->t[ps->at])) {
        tok t = next(ps);
        if (is(t, "->") && !arrow) arrow = true;
        else st = args_list(ps, t, in);
    }
    return st;
}

static plan_status insn_body(parser *ps, plan_insn *in) {
    const plan_meta *m = &ps->p->meta;
    uint32_t v = 0;
    plan_status st = PLAN_OK;
    switch (in->kind) {
    case PLAN_I_COMPUTE:
        st = get_named(ps, "operator", plan_op_name, 0, &v);
        in->code = (uint16_t)v;
        if (!st) st = insn_stream(ps, in, true);
        if (!st) st = insn_args(ps, in);
        if (!st && ps->at < ps->nt && is(ps->t[ps->at], "attrs") && ++ps->at) st = get_u32(ps, "attrs", &in->attrs);
        return st;
    case PLAN_I_COLL:
        st = get_named(ps, "collective", plan_coll_name, 0, &v);
        in->code = (uint16_t)v;
        if (!st) st = insn_stream(ps, in, true);
        if (!st) st = expect(ps, "group");
        if (!st) st = get_i32(ps, "group", &in->a);
        if (!st) st = insn_args(ps, in);
        if (!st && ps->at < ps->nt && is(ps->t[ps->at], "attrs") && ++ps->at) st = get_u32(ps, "attrs", &in->attrs); // a chunk
        return st;
    case PLAN_I_SEND:
    case PLAN_I_RECV: {
        const char *axes[PLAN_MAX_AXES];
        for (uint32_t i = 0; i < m->n_axes; i++) axes[i] = m->axis_names[i];
        st = insn_stream(ps, in, true);
        if (!st) st = get_name(ps, "mesh axis", axes, m->n_axes, &v);
        in->a = (int32_t)v;
        if (!st) st = get_i32(ps, "peer offset", &in->b);
        if (!st && ps->at < ps->nt && is(ps->t[ps->at], "tag") && ++ps->at) {
            uint64_t tag;
            st = tok_u64(ps, next(ps), "tag", PLAN_MAX_TAGS - 1, &tag);
            in->tag = (uint8_t)tag;
        }
        return st ? st : insn_args(ps, in);
    }
    case PLAN_I_COPY:
        st = insn_stream(ps, in, true);
        return st ? st : insn_args(ps, in);
    case PLAN_I_RECORD:
    case PLAN_I_WAIT:
        st = insn_stream(ps, in, false);
        if (!st) st = expect(ps, "event");
        return st ? st : get_i32(ps, "event", &in->a);
    default:
        st = get_named(ps, "loop variable", plan_loop_var_name, 0, &v);
        in->code = (uint16_t)v;
        if (!st) st = get_i32(ps, "loop count", &in->a);
        if (!st) st = expect(ps, "body");
        return st ? st : get_i32(ps, "loop body", &in->b);
    }
}

// The optional " phase=NAME" and " t=SECONDS" (a float, finite and >= 0), on the kinds that
// have them.
static plan_status insn_tail(parser *ps, plan_insn *in) {
    bool timed = in->kind <= PLAN_I_COPY;
    char b[64];
    if (ps->at < ps->nt && ps->t[ps->at].n >= 6 && memcmp(ps->t[ps->at].s, "phase=", 6) == 0) {
        tok t = next(ps);
        if (!timed) return perr(ps, "%s: a %s has no phase", shown(t, b, sizeof(b)), plan_insn_kind_name(in->kind));
        uint32_t v = PLAN_PHASE_COUNT;
        for (uint32_t i = 1; plan_phase_name(i); i++)
            if (t.n - 6 == strlen(plan_phase_name(i)) && memcmp(t.s + 6, plan_phase_name(i), t.n - 6) == 0) v = i;
        if (v == PLAN_PHASE_COUNT) return perr(ps, "unknown phase %s (known: fwd, bwd, recompute, opt)", shown(t, b, sizeof(b)));
        in->phase = (uint8_t)v;
    }
    if (ps->at < ps->nt && ps->t[ps->at].n >= 2 && memcmp(ps->t[ps->at].s, "t=", 2) == 0) {
        tok t = next(ps);
        if (!timed) return perr(ps, "%s: a %s takes no time", shown(t, b, sizeof(b)), plan_insn_kind_name(in->kind));
        double v;
        plan_status st = tok_f64(ps, (tok){t.s + 2, t.n - 2}, "t", &v);
        if (st) return st;
        float x = (float)v;
        if (!isfinite(x) || signbit(x)) return perr(ps, "t: %s seconds, expected a finite time >= 0", shown(t, b, sizeof(b)));
        in->t_s = x;
    }
    return PLAN_OK;
}

// "N: kind ...": instruction N of the current program.
static plan_status parse_insn(parser *ps) {
    plan_program *pg = cur_program(ps);
    tok t = ps->t[0];
    uint64_t idx;
    plan_status st = tok_u64(ps, (tok){t.s, t.n - 1}, "insn", UINT32_MAX, &idx);
    if (!st && idx != pg->n_insns)
        return perr(ps, "insn %llu: expected insn %u (items are numbered in order from 0)", (unsigned long long)idx, pg->n_insns);
    plan_insn *v = grow(ps, pg->insns, pg->n_insns, &ps->cap_insns, sizeof(plan_insn));
    if (!v) return oom(ps);
    pg->insns = v;
    plan_insn in = {.attrs = PLAN_NONE, .args = pg->n_args};
    uint32_t kind = 0;
    if (!st) st = get_named(ps, "instruction", plan_insn_kind_name, 0, &kind);
    in.kind = (uint8_t)kind;
    if (!st) st = insn_body(ps, &in);
    if (!st) st = insn_tail(ps, &in);
    if (!st) pg->insns[pg->n_insns++] = in;
    return st;
}

/* Lines. */

typedef struct line_kind {
    const char *word;
    int stage;
    plan_status (*parse)(parser *ps);
} line_kind;

static const line_kind line_kinds[] = {
    {"plan", S_PLAN, parse_plan},           {"compiler", S_COMPILER, parse_compiler},
    {"model", S_MODEL, parse_model},        {"options", S_OPTIONS, parse_options},
    {"hashes", S_HASHES, parse_hashes},     {"mesh", S_MESH, parse_mesh},
    {"micro_batches", S_MB, parse_micro_batches}, {"estimate", S_ESTIMATE, parse_estimate},
    {"loss", S_LOSS, parse_loss},           {"notes", S_NOTES, parse_notes},
    {"tensor", S_TENSOR, parse_tensor},     {"group", S_GROUP, parse_group},
    {"ranks", S_RANKS, parse_ranks},        {"program", S_PROGRAM, parse_program},
    {"buffer", S_BUFFER, parse_buffer},     {"attrs", S_ATTRS, parse_attrs},
};

// Whether a line of this stage may follow the lines so far.
static plan_status check_order(parser *ps, const char *word, int stage) {
    if (ps->stage == S_START && stage != S_PLAN) return perr(ps, "the first line must be 'plan %u'", PLAN_VERSION);
    if (stage <= S_NOTES && stage <= ps->stage)
        return perr(ps, "'%s' is out of place: the header lines come once each, in the order plan, compiler, model, "
                    "options, hashes, mesh, micro_batches, estimate, loss, notes", word);
    if (stage > S_NOTES && !ps->have_mesh) return perr(ps, "'%s' before 'mesh' (the mesh line is required)", word);
    if (stage >= S_TENSOR && stage <= S_RANKS && stage < ps->stage)
        return perr(ps, "'%s' is out of place: tensors, groups, ranks and programs come in that order", word);
    if (stage > S_PROGRAM && ps->stage < S_PROGRAM) return perr(ps, "'%s' outside a program", word);
    if (stage > S_PROGRAM && stage < ps->stage)
        return perr(ps, "'%s' is out of place: a program lists its buffers, then its attrs, then its instructions", word);
    return PLAN_OK;
}

static plan_status parse_line(parser *ps, const char *s, size_t n) {
    plan_status st = tokenize(ps, s, n);
    if (st || !ps->nt) return st;
    tok w = ps->t[0];
    ps->at = 1;
    if (w.n > 1 && w.s[w.n - 1] == ':') {
        st = check_order(ps, "instruction", S_INSN);
        ps->stage = S_INSN;
        if (!st) st = parse_insn(ps);
        return st ? st : end_of_line(ps);
    }
    for (uint32_t i = 0; i < COUNT(line_kinds); i++) {
        if (!is(w, line_kinds[i].word)) continue;
        st = check_order(ps, line_kinds[i].word, line_kinds[i].stage);
        ps->stage = line_kinds[i].stage;
        if (!st) st = line_kinds[i].parse(ps);
        return st ? st : end_of_line(ps);
    }
    char b[64];
    return perr(ps, "unknown line %s", shown(w, b, sizeof(b)));
}

static plan_status parse_finish(parser *ps) {
    if (ps->stage == S_START) return perr(ps, "no 'plan %u' line: not a plan's text form", PLAN_VERSION);
    if (!ps->have_mesh) return perr(ps, "no 'mesh' line");
    if (ps->next_rank != ps->p->n_ranks)
        return perr(ps, "the ranks lines cover ranks 0 to %lld, but the mesh has %u ranks", (long long)ps->next_rank - 1,
                    ps->p->n_ranks);
    return PLAN_OK;
}

plan_status plan_parse(const char *text, size_t n, const char *file, plan *out, char *err, size_t err_n) {
    memset(out, 0, sizeof(*out));
    parser ps = {.p = out, .file = file ? file : "<text>", .err = err, .err_n = err_n};
    plan_status st = PLAN_OK;
    out->meta.micro_batches = 1;
    out->meta.loss = PLAN_NONE;
    for (size_t at = 0; !st && at < n;) {
        size_t e = at;
        while (e < n && text[e] != '\n' && text[e]) e++;
        ps.line++;
        if (e < n && !text[e]) st = perr(&ps, "a NUL byte in the text");
        else st = parse_line(&ps, text + at, e - at);
        at = e + 1;
    }
    if (!st) st = parse_finish(&ps);
    if (st) plan_free(out);
    return st;
}
