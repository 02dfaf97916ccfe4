/*
 * model.c: the front end. Reads a model file (schemas/README.md) and builds the forward graph.
 *
 * It checks the model completely before any later phase sees it, and reports the first fault as
 * "plancc: FILE:JSON-POINTER: message" (exit code 2 from the driver):
 *   - JSON syntax (line:column), unknown or duplicate keys, wrong types, non-integral or
 *     out-of-range integers, names with odd characters;
 *   - dimensions: unknown names; tensors: unknown, declared twice, produced twice, never
 *     produced, produced by no op but read, written when they are inputs or parameters;
 *   - program order and cycles (ops are listed in program order; an op that reads a tensor made
 *     later is either a cycle, reported with the path, or out of order);
 *   - each operator's arity, attributes, dtypes and shapes against its annotation (ops.c);
 *   - blocks: scoping (a block sees only its own tensors and its "in" names), bindings with
 *     matching shapes, no nesting; the loss: a float scalar that is produced.
 * Blocks stay blocks: their tensors and ops are stored once, however large "repeat" is.
 *
 * The cJSON tree is freed before model_load returns; the graph lives in the caller's arena.
 */
#include "plancc.h"

#include <string.h>

#define MODEL_MAX_BYTES ((size_t)256 << 20)
#define MAX_DIM_SIZE ((int64_t)1 << 40)
#define MAX_REPEAT 1000000

typedef struct scope {
    pcc_symtab names;   // tensor name -> tensor index
    int block;          // -1 top level
} scope;

typedef struct loader {
    pcc_jreader r;
    pcc_graph *g;
    scope top;
} loader;

static const char *file_of(loader *L) { return L->r.file; }

static const char *article(const char *noun) { return strchr("aeiou", noun[0]) ? "an" : "a"; }

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 64 || lb > 64) return 99;
    int d[65][65];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

static const char NAME_CHARS[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-";

// An object key used as a name (a dimension, a tensor): the same rule as json_name.
static pcc_status check_key_name(loader *L, const char *key, const char *ptr, const char *what) {
    size_t n = strlen(key);
    if (n == 0 || n > PCC_MAX_NAME || strspn(key, NAME_CHARS) != n)
        return diag(file_of(L), ptr, "%s name \"%s\" must be 1-%d characters of [A-Za-z0-9_.:-]", what, key, PCC_MAX_NAME);
    return PCC_OK;
}

// A number in (lo, hi]: above lo, which it may not equal (a learning rate, an epsilon).
static pcc_status num_open(loader *L, const pcc_json *v, const char *ptr, double lo, double hi, double *out) {
    pcc_status st = json_num(&L->r, v, ptr, lo, hi, out);
    if (!st && *out <= lo) return diag(file_of(L), ptr, "must be greater than %g", lo);
    return st;
}

/* ---- top level: version, dtype, dims, optimizer ---- */

static pcc_status load_dtype(loader *L, const pcc_json *v, const char *ptr, bool allow_int, pcc_dtype *out) {
    const char *s;
    pcc_status st = json_str(&L->r, v, ptr, &s);
    if (st) return st;
    for (int i = 0; i < PCC_DTYPE_COUNT; i++)
        if (strcmp(s, pcc_dtype_names[i]) == 0 && (allow_int || i != PCC_I32)) {
            *out = (pcc_dtype)i;
            return PCC_OK;
        }
    return diag(file_of(L), ptr, "unknown dtype \"%s\" (expected f32, f16, bf16%s)", s, allow_int ? " or i32" : "");
}

static pcc_status load_dims(loader *L, const pcc_json *dims) {
    pcc_status st = json_keys(&L->r, dims, "/dims", NULL, NULL);
    if (st) return st;
    if (json_size(dims) == 0) return diag(file_of(L), "/dims", "no dimensions are declared");
    for (int i = 0; i < json_size(dims); i++) {
        const pcc_json *m = json_at(dims, i);
        const char *ptr = json_ptr_key(&L->r, "/dims", json_key(m));
        const char *name = arena_strdup(L->g->arena, json_key(m));
        int64_t size;
        if ((st = check_key_name(L, name, ptr, "dimension"))) return st;
        if ((st = json_int(&L->r, m, ptr, 1, MAX_DIM_SIZE, &size))) return st;
        int id = graph_add_dim(L->g, name, size, ptr);
        symtab_put(&L->g->dim_names, L->g->arena, name, id);
    }
    return PCC_OK;
}

static pcc_status load_optimizer(loader *L, const pcc_json *o) {
    pcc_optim *opt = &L->g->optim;
    *opt = (pcc_optim){PCC_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0.01, 0};
    if (!o) return PCC_OK;
    static const char *const adamw_keys[] = {"type", "lr", "betas", "eps", "weight_decay", NULL};
    static const char *const sgd_keys[] = {"type", "lr", "momentum", "weight_decay", NULL};
    static const char *const req[] = {"type", NULL};
    pcc_status st = json_expect(&L->r, o, "/optimizer", PCC_J_OBJECT);
    if (st) return st;
    const pcc_json *t = json_get(o, "type");
    const char *type = NULL;
    if (t && (st = json_str(&L->r, t, "/optimizer/type", &type))) return st;
    bool sgd = type && strcmp(type, "sgd") == 0;
    if (type && !sgd && strcmp(type, "adamw") != 0)
        return diag(file_of(L), "/optimizer/type", "unknown optimizer \"%s\" (expected adamw or sgd)", type);
    if ((st = json_keys(&L->r, o, "/optimizer", sgd ? sgd_keys : adamw_keys, req))) return st;
    if (sgd) *opt = (pcc_optim){PCC_OPTIM_SGD, 1e-3, 0, 0, 0, 0, 0};
    const pcc_json *v;
    if ((v = json_get(o, "lr")) && (st = num_open(L, v, "/optimizer/lr", 0, 1e3, &opt->lr))) return st;
    if ((v = json_get(o, "eps")) && (st = num_open(L, v, "/optimizer/eps", 0, 1, &opt->eps))) return st;
    if ((v = json_get(o, "weight_decay")) && (st = json_num(&L->r, v, "/optimizer/weight_decay", 0, 1e3, &opt->weight_decay))) return st;
    if ((v = json_get(o, "momentum")) && (st = json_num(&L->r, v, "/optimizer/momentum", 0, 1, &opt->momentum))) return st;
    if (opt->momentum >= 1) return diag(file_of(L), "/optimizer/momentum", "momentum must be below 1");
    if ((v = json_get(o, "betas"))) {
        if ((st = json_expect(&L->r, v, "/optimizer/betas", PCC_J_ARRAY))) return st;
        if (json_size(v) != 2) return diag(file_of(L), "/optimizer/betas", "expected 2 numbers, got %d", json_size(v));
        if ((st = json_num(&L->r, json_at(v, 0), "/optimizer/betas/0", 0, 0.999999, &opt->beta1))) return st;
        if ((st = json_num(&L->r, json_at(v, 1), "/optimizer/betas/1", 0, 0.999999, &opt->beta2))) return st;
    }
    return PCC_OK;
}

/* ---- tensors ---- */

static pcc_status load_shape(loader *L, const pcc_json *v, const char *ptr, pcc_tensor *t) {
    pcc_status st = json_expect(&L->r, v, ptr, PCC_J_ARRAY);
    if (st) return st;
    if (json_size(v) > PCC_MAX_RANK)
        return diag(file_of(L), ptr, "rank %d is more than the %d dimensions plancc supports", json_size(v), PCC_MAX_RANK);
    t->rank = json_size(v);
    for (int i = 0; i < t->rank; i++) {
        const char *p = json_ptr_idx(&L->r, ptr, i), *name;
        if ((st = json_str(&L->r, json_at(v, i), p, &name))) return st;
        int d = symtab_get(&L->g->dim_names, name);
        if (d < 0) return diag(file_of(L), p, "unknown dimension \"%s\" (declare it in /dims)", name);
        t->dims[i] = d;
    }
    // Element counts are kept exactly (int64, and doubles in the cost figures): cap at 2^53.
    double numel = 1;
    for (int i = 0; i < t->rank; i++) numel *= (double)L->g->dims[t->dims[i]].size;
    if (numel > 9007199254740992.0) return diag(file_of(L), ptr, "tensor has %.3g elements, more than 2^53", numel);
    return PCC_OK;
}

static pcc_status load_init(loader *L, const pcc_json *v, const char *ptr, pcc_init *init) {
    static const char *const kinds[] = {"zeros", "ones", "normal", "uniform"};
    static const char *const k_plain[] = {"kind", NULL}, *const k_normal[] = {"kind", "mean", "std", NULL},
                             *const k_uniform[] = {"kind", "low", "high", NULL};
    static const char *const req[] = {"kind", NULL};
    pcc_status st = json_expect(&L->r, v, ptr, PCC_J_OBJECT);
    if (st) return st;
    const pcc_json *k = json_get(v, "kind");
    if (!k) return diag(file_of(L), ptr, "missing required key \"kind\"");
    const char *kind;
    if ((st = json_str(&L->r, k, json_ptr_key(&L->r, ptr, "kind"), &kind))) return st;
    int ki = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(kind, kinds[i]) == 0) ki = i;
    if (ki < 0) return diag(file_of(L), json_ptr_key(&L->r, ptr, "kind"), "unknown initializer \"%s\" (expected zeros, ones, normal or uniform)", kind);
    init->kind = (pcc_init_kind)ki;
    static const char *const req_normal[] = {"kind", "std", NULL}, *const req_uniform[] = {"kind", "low", "high", NULL};
    const char *const *allowed = ki == PCC_INIT_NORMAL ? k_normal : ki == PCC_INIT_UNIFORM ? k_uniform : k_plain;
    const char *const *required = ki == PCC_INIT_NORMAL ? req_normal : ki == PCC_INIT_UNIFORM ? req_uniform : req;
    if ((st = json_keys(&L->r, v, ptr, allowed, required))) return st;
    const pcc_json *x;
    if (ki == PCC_INIT_NORMAL) {
        init->a = 0, init->b = 1;
        if ((x = json_get(v, "mean")) && (st = json_num(&L->r, x, json_ptr_key(&L->r, ptr, "mean"), -1e6, 1e6, &init->a))) return st;
        if ((x = json_get(v, "std")) && (st = json_num(&L->r, x, json_ptr_key(&L->r, ptr, "std"), 0, 1e6, &init->b))) return st;
    } else if (ki == PCC_INIT_UNIFORM) {
        init->a = 0, init->b = 1;
        if ((x = json_get(v, "low")) && (st = json_num(&L->r, x, json_ptr_key(&L->r, ptr, "low"), -1e6, 1e6, &init->a))) return st;
        if ((x = json_get(v, "high")) && (st = json_num(&L->r, x, json_ptr_key(&L->r, ptr, "high"), -1e6, 1e6, &init->b))) return st;
        if (init->b <= init->a) return diag(file_of(L), ptr, "uniform initializer needs low < high");
    }
    return PCC_OK;
}

static pcc_status load_data(loader *L, const pcc_json *v, const char *ptr, pcc_tensor *t) {
    static const char *const k_plain[] = {"kind", NULL}, *const k_high[] = {"kind", "high", NULL};
    static const char *const k_teacher[] = {"kind", "scale", "bias", NULL};
    pcc_status st = json_expect(&L->r, v, ptr, PCC_J_OBJECT);
    if (st) return st;
    const pcc_json *k = json_get(v, "kind");
    if (!k) return diag(file_of(L), ptr, "missing required key \"kind\"");
    const char *kind, *kptr = json_ptr_key(&L->r, ptr, "kind");
    if ((st = json_str(&L->r, k, kptr, &kind))) return st;
    int ki = -1;
    for (int i = 0; i < PCC_DATA_KIND_COUNT; i++)
        if (strcmp(kind, pcc_data_kind_names[i]) == 0) ki = i;
    if (ki < 0) return diag(file_of(L), kptr, "unknown data kind \"%s\" (expected normal, binary, randint, tokens, targets, arange or teacher)", kind);
    t->data.kind = (pcc_data_kind)ki;
    bool needs_high = ki == PCC_DATA_RANDINT || ki == PCC_DATA_TOKENS || ki == PCC_DATA_TARGETS;
    static const char *const req_high[] = {"kind", "high", NULL};
    bool teacher = ki == PCC_DATA_TEACHER;
    if ((st = json_keys(&L->r, v, ptr, needs_high ? k_high : teacher ? k_teacher : k_plain, needs_high ? req_high : k_plain)))
        return st;
    bool is_int = ki >= PCC_DATA_RANDINT && !teacher;
    if (is_int && t->dtype != PCC_I32)
        return diag(file_of(L), kptr, "data \"%s\" makes integers; declare the tensor with \"dtype\": \"i32\"", kind);
    if (!is_int && t->dtype == PCC_I32)
        return diag(file_of(L), kptr, "data \"%s\" makes floats, but the tensor is i32", kind);
    if ((ki == PCC_DATA_ARANGE || teacher) && t->rank == 0)
        return diag(file_of(L), kptr, "%s needs a tensor of rank 1 or more", kind);
    if (teacher) {
        const pcc_json *x;
        t->data.scale = 2, t->data.bias = 0;
        if ((x = json_get(v, "scale")) && (st = json_num(&L->r, x, json_ptr_key(&L->r, ptr, "scale"), 0, 1e3, &t->data.scale)))
            return st;
        if ((x = json_get(v, "bias")) && (st = json_num(&L->r, x, json_ptr_key(&L->r, ptr, "bias"), -1e3, 1e3, &t->data.bias)))
            return st;
    }
    if (needs_high) {
        const pcc_json *h = json_get(v, "high");
        const char *hptr = json_ptr_key(&L->r, ptr, "high");
        if (json_type(h) == PCC_J_STRING) {
            const char *name;
            json_str(&L->r, h, hptr, &name);
            int d = symtab_get(&L->g->dim_names, name);
            if (d < 0) return diag(file_of(L), hptr, "unknown dimension \"%s\"", name);
            t->data.high = L->g->dims[d].size;
        } else if ((st = json_int(&L->r, h, hptr, 1, (int64_t)1 << 31, &t->data.high))) {
            return st;
        }
    }
    return PCC_OK;
}

static pcc_status load_tensor(loader *L, scope *sc, const pcc_json *v, const char *ptr, const char *name) {
    static const char *const keys[] = {"kind", "shape", "dtype", "data", "init", NULL};
    static const char *const req[] = {"shape", NULL};
    pcc_status st = json_keys(&L->r, v, ptr, keys, req);
    if (st) return st;
    pcc_tensor t = {.name = name, .ptr = ptr, .kind = PCC_T_ACT, .dtype = L->g->dtype, .block = sc->block,
                    .producer = -1, .of = -1, .grad = -1};
    const pcc_json *x;
    if ((x = json_get(v, "kind"))) {
        const char *kind, *kptr = json_ptr_key(&L->r, ptr, "kind");
        if ((st = json_str(&L->r, x, kptr, &kind))) return st;
        if (strcmp(kind, "input") == 0) t.kind = PCC_T_INPUT;
        else if (strcmp(kind, "param") == 0) t.kind = PCC_T_PARAM;
        else if (strcmp(kind, "const") == 0) t.kind = PCC_T_PARAM, t.frozen = true;
        else if (strcmp(kind, "activation") == 0) t.kind = PCC_T_ACT;
        else return diag(file_of(L), kptr, "unknown tensor kind \"%s\" (expected input, param, const or activation)", kind);
        if (t.kind == PCC_T_INPUT && sc->block >= 0)
            return diag(file_of(L), kptr, "inputs are declared at the top level; bind one into the block with \"in\"");
    }
    if ((st = load_shape(L, json_get(v, "shape"), json_ptr_key(&L->r, ptr, "shape"), &t))) return st;
    if ((x = json_get(v, "dtype")) && (st = load_dtype(L, x, json_ptr_key(&L->r, ptr, "dtype"), true, &t.dtype))) return st;
    const pcc_json *data = json_get(v, "data"), *init = json_get(v, "init");
    if (t.kind == PCC_T_INPUT) {
        if (!data) return diag(file_of(L), ptr, "input \"%s\" needs \"data\" (how the loader fills it)", name);
        if ((st = load_data(L, data, json_ptr_key(&L->r, ptr, "data"), &t))) return st;
    } else if (data) {
        return diag(file_of(L), json_ptr_key(&L->r, ptr, "data"), "only inputs take \"data\"");
    }
    if (t.kind == PCC_T_PARAM) {
        const char *what = t.frozen ? "constant" : "parameter";
        if (!init) return diag(file_of(L), ptr, "%s \"%s\" needs \"init\"", what, name);
        if ((st = load_init(L, init, json_ptr_key(&L->r, ptr, "init"), &t.init))) return st;
        if (t.dtype == PCC_I32) return diag(file_of(L), ptr, "%s \"%s\" must be a float tensor", what, name);
    } else if (init) {
        return diag(file_of(L), json_ptr_key(&L->r, ptr, "init"), "only parameters and constants take \"init\"");
    }
    int id = graph_add_tensor(L->g, &t);
    symtab_put(&sc->names, L->g->arena, name, id);
    return PCC_OK;
}

static pcc_status load_tensors(loader *L, scope *sc, const pcc_json *v, const char *ptr) {
    pcc_status st = json_keys(&L->r, v, ptr, NULL, NULL);
    if (st) return st;
    for (int i = 0; i < json_size(v); i++) {
        const pcc_json *m = json_at(v, i);
        const char *tptr = json_ptr_key(&L->r, ptr, json_key(m));
        const char *name = arena_strdup(L->g->arena, json_key(m));
        if ((st = check_key_name(L, name, tptr, "tensor"))) return st;
        if (symtab_get(&sc->names, name) >= 0)
            return diag(file_of(L), tptr, "tensor \"%s\" is already bound by the block's \"in\"", name);
        if ((st = load_tensor(L, sc, m, tptr, name))) return st;
    }
    return PCC_OK;
}

/* ---- operators ---- */

static pcc_status attr_pair(loader *L, const pcc_json *v, const char *ptr, int lo, int out[2]) {
    int64_t x;
    pcc_status st;
    if (json_type(v) == PCC_J_ARRAY) {
        if (json_size(v) != 2) return diag(file_of(L), ptr, "expected an integer or 2 integers, got %d", json_size(v));
        for (int i = 0; i < 2; i++) {
            if ((st = json_int(&L->r, json_at(v, i), json_ptr_idx(&L->r, ptr, i), lo, 4096, &x))) return st;
            out[i] = (int)x;
        }
        return PCC_OK;
    }
    if ((st = json_int(&L->r, v, ptr, lo, 4096, &x))) return st;
    out[0] = out[1] = (int)x;
    return PCC_OK;
}

// Allowed and required attrs per operator type.
static void attr_keys(pcc_op_kind k, const char *const **allowed, const char *const **required) {
    static const char *const none[] = {NULL};
    static const char *const scale[] = {"scale", NULL};
    static const char *const eps[] = {"eps", NULL};
    static const char *const bn[] = {"eps", "ghost_batch", NULL};
    static const char *const dropout[] = {"p", "seed", NULL}, *const dropout_req[] = {"p", NULL};
    static const char *const axis[] = {"axis", NULL};
    static const char *const slice[] = {"axis", "start", "end", NULL};
    static const char *const perm[] = {"perm", NULL};
    static const char *const conv[] = {"stride", "padding", NULL};
    static const char *const pool[] = {"kernel", "stride", "padding", NULL}, *const pool_req[] = {"kernel", NULL};
    static const char *const attn[] = {"causal", "scale", "dropout", "seed", NULL};
    static const char *const axes[] = {"axes", NULL};
    static const char *const ce[] = {"ignore_index", "reduction", NULL};
    static const char *const exponent[] = {"exponent", NULL}, *const value[] = {"value", NULL};
    static const char *const fill[] = {"value", "axes", NULL};
    *required = none;
    switch (k) {
    case PCC_OP_SUM: case PCC_OP_MEAN: case PCC_OP_MAX: *allowed = *required = axes; return;
    case PCC_OP_EXPAND: case PCC_OP_ADD: case PCC_OP_MUL: case PCC_OP_SUB: case PCC_OP_DIV: *allowed = axes; return;
    case PCC_OP_MASKED_FILL: *allowed = fill, *required = value; return;
    case PCC_OP_CROSS_ENTROPY: *allowed = ce; return;
    case PCC_OP_POW: *allowed = *required = exponent; return;
    case PCC_OP_NE: *allowed = *required = value; return;
    case PCC_OP_GATHER: case PCC_OP_INDEX_SELECT: *allowed = *required = axis; return;
    case PCC_OP_SCALE: *allowed = *required = scale; return;
    case PCC_OP_LAYERNORM: case PCC_OP_RMSNORM: *allowed = eps; return;
    case PCC_OP_BATCHNORM: *allowed = bn; return;
    case PCC_OP_DROPOUT: *allowed = dropout, *required = dropout_req; return;
    case PCC_OP_CONCAT: case PCC_OP_SPLIT: *allowed = *required = axis; return;
    case PCC_OP_SLICE: *allowed = *required = slice; return;
    case PCC_OP_TRANSPOSE: *allowed = *required = perm; return;
    case PCC_OP_CONV2D: *allowed = conv; return;
    case PCC_OP_MAXPOOL: case PCC_OP_AVGPOOL: *allowed = pool, *required = pool_req; return;
    case PCC_OP_ATTENTION: *allowed = attn; return;
    default: *allowed = none; return;
    }
}

static pcc_status load_axis(loader *L, const pcc_json *v, const char *ptr, int rank, int *out) {
    int64_t a;
    pcc_status st = json_int(&L->r, v, ptr, -PCC_MAX_RANK, PCC_MAX_RANK, &a);
    if (st) return st;
    if (a < -rank || a >= rank) return diag(file_of(L), ptr, "axis %lld is out of range for rank %d", (long long)a, rank);
    *out = (int)(a < 0 ? a + rank : a);
    return PCC_OK;
}

// Ghost batch norm's group: a positive integer that divides the batch (axis 0 of x), so every
// group is whole; batch_apply checks it again when --global-batch changes the batch.
static pcc_status load_ghost(loader *L, pcc_op *op, const pcc_json *v, const char *ptr) {
    pcc_status st = json_int(&L->r, v, ptr, 1, MAX_DIM_SIZE, &op->attrs.ghost_batch);
    if (st) return st;
    const pcc_tensor *x = &L->g->tensors[op->in[0]];
    if (x->rank == 0) return PCC_OK; // the shape rule reports it
    int64_t n = L->g->dims[x->dims[0]].size;
    if (n % op->attrs.ghost_batch != 0)
        return diag(file_of(L), ptr, "ghost_batch %lld does not divide the batch: input 0 \"%s\" has %s = %lld along axis 0",
                    (long long)op->attrs.ghost_batch, x->name, L->g->dims[x->dims[0]].name, (long long)n);
    return PCC_OK;
}

// attrs "axes": a list of distinct axes (negative counts from the end) of a tensor of rank
// `rank`; *mask gets bit i for axis i.
static pcc_status load_axes(loader *L, const pcc_json *v, const char *ptr, int rank, unsigned *mask) {
    pcc_status st = json_expect(&L->r, v, ptr, PCC_J_ARRAY);
    if (st) return st;
    *mask = 0;
    for (int i = 0; i < json_size(v); i++) {
        int a;
        const char *ip = json_ptr_idx(&L->r, ptr, i);
        if ((st = load_axis(L, json_at(v, i), ip, rank, &a))) return st;
        if (*mask & (1u << a)) return diag(file_of(L), ip, "axis %d is listed twice", a);
        *mask |= 1u << a;
    }
    return PCC_OK;
}

// The axis map (attrs perm) of the operators that broadcast or reduce (runtime/ops.def's last
// section): from "axes" where given (sum, mean, max: the input's axes reduced; expand: the
// output's axes the input lacks; add, mul, sub, div, masked_fill: the axes of input 0 that input
// 1's axes are), else found by matching dimension names (op_map_find). The shape rule checks it.
static pcc_status load_map(loader *L, pcc_op *op, const pcc_json *v, const char *ptr) {
    const pcc_graph *g = L->g;
    bool reduce = op->kind == PCC_OP_SUM || op->kind == PCC_OP_MEAN || op->kind == PCC_OP_MAX;
    const pcc_tensor *big = &g->tensors[op->kind == PCC_OP_EXPAND ? op->out[0] : op->in[0]];
    const pcc_tensor *small = &g->tensors[op->kind == PCC_OP_EXPAND ? op->in[0] : reduce ? op->out[0] : op->in[1]];
    const pcc_json *x = v ? json_get(v, "axes") : NULL;
    if (!x) {
        op_map_find(g, big, small, &op->attrs); // no map: the shape rule says what does not fit
        return PCC_OK;
    }
    unsigned mask;
    bool listed_kept = !reduce && op->kind != PCC_OP_EXPAND; // binary ops list where input 1's axes are
    pcc_status st = load_axes(L, x, json_ptr_key(&L->r, ptr, "axes"), big->rank, &mask);
    if (st) return st;
    int n = 0;
    for (int i = 0; i < big->rank; i++)
        if (((mask >> i) & 1) == listed_kept) {
            if (n >= small->rank) n++;
            else op->attrs.perm[n++] = i + 1;
        }
    if (n != small->rank)
        return diag(file_of(L), json_ptr_key(&L->r, ptr, "axes"), "leaves %d axes of %s \"%s\", but %s \"%s\" has rank %d", n,
                    op->kind == PCC_OP_EXPAND ? "output 0" : "input 0", big->name, op->kind == PCC_OP_EXPAND ? "input 0" : reduce ? "output 0" : "input 1",
                    small->name, small->rank);
    op_map_canon(&op->attrs, big->rank, small->rank);
    return PCC_OK;
}

// cross_entropy's "ignore_index" (rows with that label count 0) and "reduction" ("mean", the
// default: divided by the count of all rows; "sum"); attrs.mode bits PCC_CE_*.
static pcc_status load_ce(loader *L, pcc_op *op, const pcc_json *v, const char *ptr) {
    const pcc_json *x;
    pcc_status st;
    if ((x = json_get(v, "ignore_index"))) {
        int64_t ii;
        if ((st = json_int(&L->r, x, json_ptr_key(&L->r, ptr, "ignore_index"), -(1ll << 31), (1ll << 31) - 1, &ii))) return st;
        op->attrs.scale = (double)ii, op->attrs.mode |= PCC_CE_IGNORE;
    }
    if ((x = json_get(v, "reduction"))) {
        const char *r, *rp = json_ptr_key(&L->r, ptr, "reduction");
        if ((st = json_str(&L->r, x, rp, &r))) return st;
        if (strcmp(r, "sum") == 0) op->attrs.mode |= PCC_CE_SUM;
        else if (strcmp(r, "mean") != 0) return diag(file_of(L), rp, "reduction \"%s\" is not one of mean, sum", r);
    }
    return PCC_OK;
}

// The values some operators keep in attrs.scale: pow's exponent, masked_fill's value, ne's
// (integer) value.
static pcc_status load_value(loader *L, pcc_op *op, const pcc_json *v, const char *ptr) {
    const pcc_json *x;
    pcc_status st;
    if ((x = json_get(v, "exponent")) && (st = json_num(&L->r, x, json_ptr_key(&L->r, ptr, "exponent"), -64, 64, &op->attrs.scale)))
        return st;
    if (op->kind == PCC_OP_NE && (x = json_get(v, "value"))) {
        int64_t iv;
        if ((st = json_int(&L->r, x, json_ptr_key(&L->r, ptr, "value"), -(1ll << 31), (1ll << 31) - 1, &iv))) return st;
        op->attrs.scale = (double)iv;
    } else if ((x = json_get(v, "value")) && (st = json_num(&L->r, x, json_ptr_key(&L->r, ptr, "value"), -1e30, 1e30, &op->attrs.scale))) {
        return st;
    }
    return PCC_OK;
}

// attention's bias: its axes are some of the scores' [b,n,s,t], found by dimension name (its last
// ones when it is a suffix); the shape rule reports a bias that fits none.
static void load_attention_bias(loader *L, pcc_op *op) {
    const pcc_graph *g = L->g;
    const pcc_tensor *q = &g->tensors[op->in[0]], *k = &g->tensors[op->in[1]];
    if (op->nin < 4 || q->rank != 4 || k->rank != 4) return;
    pcc_tensor scores = {.rank = 4, .dims = {q->dims[0], q->dims[2], q->dims[1], k->dims[1]}};
    op_map_find(g, &scores, &g->tensors[op->in[3]], &op->attrs);
}

static pcc_status load_attrs_ext(loader *L, pcc_op *op, const pcc_json *v, const char *ptr) {
    pcc_status st;
    if (op->kind == PCC_OP_ATTENTION) load_attention_bias(L, op);
    if ((pcc_ops[op->kind].flags & PCC_OPF_BCAST) || op->kind == PCC_OP_SUM || op->kind == PCC_OP_MEAN || op->kind == PCC_OP_MAX ||
        op->kind == PCC_OP_EXPAND)
        if ((st = load_map(L, op, v, ptr))) return st;
    if (!v) return PCC_OK;
    if (op->kind == PCC_OP_CROSS_ENTROPY) return load_ce(L, op, v, ptr);
    return load_value(L, op, v, ptr);
}

static pcc_status load_attrs(loader *L, pcc_op *op, const pcc_json *v, const char *ptr) {
    pcc_attrs *a = &op->attrs;
    a->eps = 1e-5;
    a->causal = true;
    a->stride[0] = a->stride[1] = 1;
    const char *const *allowed, *const *required;
    attr_keys(op->kind, &allowed, &required);
    if (!v) {
        if (required[0]) return diag(file_of(L), op->ptr, "%s needs attrs: missing \"%s\"", pcc_ops[op->kind].name, required[0]);
        return PCC_OK;
    }
    pcc_status st = json_expect(&L->r, v, ptr, PCC_J_OBJECT);
    if (st) return st;
    if (!allowed[0] && json_size(v) > 0)
        return diag(file_of(L), json_ptr_key(&L->r, ptr, json_key(json_at(v, 0))), "%s takes no attrs", pcc_ops[op->kind].name);
    if ((st = json_keys(&L->r, v, ptr, allowed, required))) return st;
    const pcc_graph *g = L->g;
    int rank = g->tensors[op->in[0]].rank;
    const pcc_json *x;
#define P(key) json_ptr_key(&L->r, ptr, key)
    if ((x = json_get(v, "scale")) && (st = json_num(&L->r, x, P("scale"), -1e30, 1e30, &a->scale))) return st;
    if ((x = json_get(v, "eps")) && (st = num_open(L, x, P("eps"), 0, 1, &a->eps))) return st;
    if ((x = json_get(v, "ghost_batch")) && (st = load_ghost(L, op, x, P("ghost_batch")))) return st;
    if ((x = json_get(v, "p")) && (st = json_num(&L->r, x, P("p"), 0, 1, &a->p))) return st;
    if (a->p >= 1) return diag(file_of(L), P("p"), "dropout probability must be below 1");
    // attention's dropout of its probabilities: the same p and seed (the kernels' mask is keyed
    // on the global (batch, head, query, key) index, runtime/cpu/attention.c)
    if ((x = json_get(v, "dropout")) && (st = json_num(&L->r, x, P("dropout"), 0, 1, &a->p))) return st;
    if (a->p >= 1) return diag(file_of(L), P("dropout"), "attention dropout probability must be below 1");
    if ((x = json_get(v, "seed")) && (st = json_int(&L->r, x, P("seed"), 0, INT64_MAX / 2, &a->seed))) return st;
    // Without a seed, a dropout's seed comes from where it is in the file (its attrs' JSON
    // pointer), so two dropouts never share a mask unless the model says so.
    if (!x && (op->kind == PCC_OP_DROPOUT || (op->kind == PCC_OP_ATTENTION && a->p > 0))) a->seed = (int64_t)(plan_fnv1a64(ptr, strlen(ptr)) % (uint64_t)(INT64_MAX / 2));
    if ((x = json_get(v, "causal")) && (st = json_bool(&L->r, x, P("causal"), &a->causal))) return st;
    if ((x = json_get(v, "axis")) && (st = load_axis(L, x, P("axis"), rank, &a->axis))) return st;
    if ((x = json_get(v, "start")) && (st = json_int(&L->r, x, P("start"), 0, MAX_DIM_SIZE, &a->start))) return st;
    if ((x = json_get(v, "end")) && (st = json_int(&L->r, x, P("end"), 0, MAX_DIM_SIZE, &a->end))) return st;
    if (op->kind == PCC_OP_SLICE) {
        const pcc_tensor *in = &g->tensors[op->in[0]];
        int64_t size = g->dims[in->dims[a->axis]].size;
        if (a->start >= a->end)
            return diag(file_of(L), ptr, "slice [%lld, %lld) is empty; start must be below end", (long long)a->start, (long long)a->end);
        if (a->end > size)
            return diag(file_of(L), P("end"), "slice [%lld, %lld) is not inside [0, %lld): input 0 \"%s\" has %s = %lld along axis %d",
                        (long long)a->start, (long long)a->end, (long long)size, in->name, g->dims[in->dims[a->axis]].name, (long long)size, a->axis);
    }
    if ((x = json_get(v, "kernel")) && (st = attr_pair(L, x, P("kernel"), 1, a->kernel))) return st;
    if (op->kind == PCC_OP_MAXPOOL || op->kind == PCC_OP_AVGPOOL) a->stride[0] = a->kernel[0], a->stride[1] = a->kernel[1];
    if ((x = json_get(v, "stride")) && (st = attr_pair(L, x, P("stride"), 1, a->stride))) return st;
    if ((x = json_get(v, "padding")) && (st = attr_pair(L, x, P("padding"), 0, a->pad))) return st;
    if ((op->kind == PCC_OP_MAXPOOL || op->kind == PCC_OP_AVGPOOL) && (2 * a->pad[0] > a->kernel[0] || 2 * a->pad[1] > a->kernel[1]))
        return diag(file_of(L), P("padding"), "padding %d,%d is more than half the kernel %d,%d", a->pad[0], a->pad[1], a->kernel[0], a->kernel[1]);
    if ((x = json_get(v, "perm"))) {
        const char *pp = P("perm");
        if ((st = json_expect(&L->r, x, pp, PCC_J_ARRAY))) return st;
        if (json_size(x) != rank) return diag(file_of(L), pp, "perm has %d entries; the input has rank %d", json_size(x), rank);
        bool seen[PCC_MAX_RANK] = {0};
        for (int i = 0; i < rank; i++) {
            int64_t d;
            const char *ip = json_ptr_idx(&L->r, pp, i);
            if ((st = json_int(&L->r, json_at(x, i), ip, 0, rank - 1, &d))) return st;
            if (seen[d]) return diag(file_of(L), ip, "perm repeats %lld; it must be a permutation of 0..%d", (long long)d, rank - 1);
            seen[d] = true;
            a->perm[i] = (int)d;
        }
    }
#undef P
    return PCC_OK;
}

// Resolves a list of tensor names in scope `sc` into ids.
static pcc_status load_refs(loader *L, scope *sc, const pcc_json *v, const char *ptr, bool outputs, int **ids, int *n) {
    pcc_status st = json_expect(&L->r, v, ptr, PCC_J_ARRAY);
    if (st) return st;
    *n = json_size(v);
    *ids = arena_alloc(L->g->arena, sizeof(int) * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) {
        const char *p = json_ptr_idx(&L->r, ptr, i), *name;
        if ((st = json_str(&L->r, json_at(v, i), p, &name))) return st;
        int t = symtab_get(&sc->names, name);
        if (t < 0) {
            if (sc->block >= 0 && symtab_get(&L->top.names, name) >= 0 && outputs)
                return diag(file_of(L), p, "tensor \"%s\" is outside the block; declare a block tensor and export it with the block's \"out\"", name);
            if (sc->block >= 0 && symtab_get(&L->top.names, name) >= 0)
                return diag(file_of(L), p, "tensor \"%s\" is outside the block; bind it with the block's \"in\"", name);
            return diag(file_of(L), p, "unknown tensor \"%s\"", name);
        }
        (*ids)[i] = t;
    }
    return PCC_OK;
}

static pcc_status load_op(loader *L, scope *sc, const pcc_json *v, const char *ptr) {
    static const char *const keys[] = {"type", "in", "out", "attrs", "name", NULL};
    static const char *const req[] = {"type", "in", "out", NULL};
    pcc_status st = json_expect(&L->r, v, ptr, PCC_J_OBJECT);
    if (st) return st;
    if (json_get(v, "block") && sc->block >= 0)
        return diag(file_of(L), json_ptr_key(&L->r, ptr, "block"), "blocks do not nest");
    if ((st = json_keys(&L->r, v, ptr, keys, req))) return st;
    const char *type, *tptr = json_ptr_key(&L->r, ptr, "type");
    if ((st = json_str(&L->r, json_get(v, "type"), tptr, &type))) return st;
    int k = op_lookup(type);
    if (k >= 0 && !(pcc_ops[k].flags & PCC_OPF_USER))
        return diag(file_of(L), tptr, "\"%s\" is an operator plancc makes itself; a model may not use it", type);
    if (k < 0) {
        int best = -1, bestd = 3;
        for (int i = 0; i < PCC_OP_COUNT; i++) {
            int d = edit_distance(type, pcc_ops[i].name);
            if ((pcc_ops[i].flags & PCC_OPF_USER) && d < bestd) best = i, bestd = d;
        }
        if (best >= 0) return diag(file_of(L), tptr, "unknown operator type \"%s\"; did you mean \"%s\"?", type, pcc_ops[best].name);
        return diag(file_of(L), tptr, "unknown operator type \"%s\"", type);
    }
    const pcc_op_info *info = &pcc_ops[k];
    int *in, *out, nin, nout;
    const char *iptr = json_ptr_key(&L->r, ptr, "in"), *optr = json_ptr_key(&L->r, ptr, "out");
    if ((st = load_refs(L, sc, json_get(v, "in"), iptr, false, &in, &nin))) return st;
    if ((st = load_refs(L, sc, json_get(v, "out"), optr, true, &out, &nout))) return st;
    if (nin < info->in_min || nin > info->in_max) {
        if (info->in_min == info->in_max)
            return diag(file_of(L), iptr, "%s takes %d input%s, got %d", type, info->in_min, info->in_min == 1 ? "" : "s", nin);
        return diag(file_of(L), iptr, "%s takes %d to %d inputs, got %d", type, info->in_min, info->in_max, nin);
    }
    if (info->nout >= 0 && nout != info->nout) return diag(file_of(L), optr, "%s makes %d output%s, got %d", type, info->nout, info->nout == 1 ? "" : "s", nout);
    if (nout < 1) return diag(file_of(L), optr, "%s needs at least one output", type);
    if (k == PCC_OP_SPLIT && nout > pcc_ops[PCC_OP_CONCAT].in_max)
        return diag(file_of(L), optr, "split makes at most %d outputs, got %d", pcc_ops[PCC_OP_CONCAT].in_max, nout);
    for (int i = 0; i < nout; i++) {
        pcc_tensor *t = &L->g->tensors[out[i]];
        const char *p = json_ptr_idx(&L->r, optr, i);
        if (t->kind != PCC_T_ACT)
            return diag(file_of(L), p, "\"%s\" is %s %s; only activations can be written by an op", t->name,
                        article(pcc_tensor_kind_names[t->kind]), pcc_tensor_kind_names[t->kind]);
        if (t->producer >= 0)
            return diag(file_of(L), p, "tensor \"%s\" is produced twice: first at %s", t->name, L->g->ops[t->producer].ptr);
        if (t->producer == PCC_PROD_BLOCK)
            return diag(file_of(L), p, "tensor \"%s\" is produced twice: first by a block's \"out\"", t->name);
        if (t->producer == PCC_PROD_BOUND)
            return diag(file_of(L), p, "tensor \"%s\" is bound by the block's \"in\"; an op cannot write it", t->name);
        for (int j = 0; j < i; j++)
            if (out[j] == out[i]) return diag(file_of(L), p, "tensor \"%s\" is listed twice among the outputs", t->name);
    }
    int id = graph_add_op(L->g, (pcc_op_kind)k, sc->block, in, nin, out, nout, ptr);
    pcc_op *op = &L->g->ops[id];
    op->phase = PCC_PHASE_FWD;
    const pcc_json *name = json_get(v, "name");
    const char *label;
    if (name && (st = json_name(&L->r, name, json_ptr_key(&L->r, ptr, "name"), &label))) return st;
    if (name) op->label = label;
    if ((st = load_attrs(L, op, json_get(v, "attrs"), json_ptr_key(&L->r, ptr, "attrs")))) return st;
    if ((st = load_attrs_ext(L, op, json_get(v, "attrs"), json_ptr_key(&L->r, ptr, "attrs")))) return st;
    return op_check_shapes(L->g, op, file_of(L));
}

/* ---- program order and cycles ---- */

// A unit of program order in one scope: an op, or (at the top level) a whole block.
typedef struct item {
    const char *ptr;
    bool is_block;
    int *reads, nreads;
    const char **read_ptrs; // blocks: the pointer of each "in" binding; ops: NULL (ptr/in/i)
    int *writes, nwrites;
} item;

// The pointer of read r, built only when a diagnostic needs it.
static const char *read_ptr(loader *L, const item *it, int r) {
    return it->read_ptrs ? it->read_ptrs[r] : arena_printf(L->g->arena, "%s/in/%d", it->ptr, r);
}

// Does item `from` depend, directly or through earlier items, on item `target`'s outputs?
// Fills path[] (item indices from `from` back to `target`) when it does.
static bool depends_on(const item *it, const int *prod, int from, int target, unsigned char *seen, int *path, int *npath) {
    if (from == target) {
        path[(*npath)++] = from;
        return true;
    }
    if (seen[from]) return false;
    seen[from] = 1;
    for (int r = 0; r < it[from].nreads; r++) {
        int p = prod[it[from].reads[r]];
        if (p >= 0 && depends_on(it, prod, p, target, seen, path, npath)) {
            path[(*npath)++] = from;
            return true;
        }
    }
    return false;
}

static pcc_status check_order(loader *L, const item *it, int n) {
    pcc_graph *g = L->g;
    int *prod = arena_alloc(g->arena, sizeof(int) * (size_t)g->n_tensors);
    for (int t = 0; t < g->n_tensors; t++) prod[t] = -1;
    for (int i = 0; i < n; i++)
        for (int w = 0; w < it[i].nwrites; w++) prod[it[i].writes[w]] = i;
    for (int i = 0; i < n; i++) {
        for (int r = 0; r < it[i].nreads; r++) {
            int t = it[i].reads[r], p = prod[t];
            const pcc_tensor *x = &g->tensors[t];
            if (p < 0 && x->kind == PCC_T_ACT && x->producer != PCC_PROD_BOUND)
                return diag(file_of(L), read_ptr(L, &it[i], r), "tensor \"%s\" is read, but no op produces it", x->name);
            if (p < i) continue;
            if (p == i)
                return diag(file_of(L), read_ptr(L, &it[i], r), "cycle: the %s reads its own output \"%s\"", it[i].is_block ? "block" : "op", x->name);
            unsigned char *seen = arena_alloc(g->arena, (size_t)n);
            int *path = arena_alloc(g->arena, sizeof(int) * (size_t)(n + 1)), np = 0;
            if (depends_on(it, prod, p, i, seen, path, &np)) {
                // The path, cut in the middle when long: "A -> B -> ... -> Y -> Z".
                char buf[1024];
                size_t k = 0;
                for (int j = 0; j < np; j++) {
                    if (np > 8 && j == 4) {
                        k += (size_t)snprintf(buf + k, sizeof buf - k, "... (%d more) -> ", np - 8);
                        j = np - 4;
                    }
                    if (k < sizeof buf) k += (size_t)snprintf(buf + k, sizeof buf - k, "%s -> ", it[path[j]].ptr);
                    if (k >= sizeof buf) break;
                }
                if (k < sizeof buf) snprintf(buf + k, sizeof buf - k, "%s", it[i].ptr);
                return diag(file_of(L), read_ptr(L, &it[i], r), "cycle through tensor \"%s\": %s", x->name, buf);
            }
            return diag(file_of(L), read_ptr(L, &it[i], r), "tensor \"%s\" is read before %s produces it; list ops in program order",
                        x->name, it[p].ptr);
        }
    }
    return PCC_OK;
}

static item op_item(const pcc_op *op) {
    return (item){.ptr = op->ptr, .reads = op->in, .nreads = op->nin, .writes = op->out, .nwrites = op->nout};
}

/* ---- blocks ---- */

static pcc_status load_block_in(loader *L, scope *sc, pcc_block *bl, const pcc_json *v, const char *ptr) {
    pcc_status st = json_keys(&L->r, v, ptr, NULL, NULL);
    if (st) return st;
    if (json_size(v) == 0) return diag(file_of(L), ptr, "a block needs at least one input");
    bl->in = arena_alloc(L->g->arena, sizeof(pcc_bind) * (size_t)(json_size(v) + 1));
    for (int i = 0; i < json_size(v); i++) {
        const pcc_json *m = json_at(v, i);
        const char *p = json_ptr_key(&L->r, ptr, json_key(m)), *outer_name;
        const char *inner_name = arena_strdup(L->g->arena, json_key(m));
        if ((st = check_key_name(L, inner_name, p, "tensor"))) return st;
        if ((st = json_str(&L->r, m, p, &outer_name))) return st;
        int outer = symtab_get(&L->top.names, outer_name);
        if (outer < 0) return diag(file_of(L), p, "unknown tensor \"%s\"", outer_name);
        pcc_tensor t = L->g->tensors[outer];
        t.name = inner_name;
        t.ptr = p;
        t.kind = PCC_T_ACT;
        t.block = sc->block;
        t.producer = PCC_PROD_BOUND;
        t.grad = t.of = -1;
        int id = graph_add_tensor(L->g, &t);
        symtab_put(&sc->names, L->g->arena, inner_name, id);
        bl->in[bl->n_in++] = (pcc_bind){id, outer};
    }
    return PCC_OK;
}

static pcc_status load_block_carry(loader *L, scope *sc, pcc_block *bl, const pcc_json *v, const char *ptr) {
    pcc_status st = json_keys(&L->r, v, ptr, NULL, NULL);
    if (st) return st;
    bl->carry = arena_alloc(L->g->arena, sizeof(pcc_bind) * (size_t)(json_size(v) + 1));
    for (int i = 0; i < json_size(v); i++) {
        const pcc_json *m = json_at(v, i);
        const char *p = json_ptr_key(&L->r, ptr, json_key(m)), *src_name;
        int dst = symtab_get(&sc->names, json_key(m));
        if (dst < 0 || L->g->tensors[dst].producer != PCC_PROD_BOUND)
            return diag(file_of(L), p, "\"%s\" is not one of the block's \"in\" names; carry names an input of the next copy", json_key(m));
        if ((st = json_str(&L->r, m, p, &src_name))) return st;
        int src = symtab_get(&sc->names, src_name);
        if (src < 0) return diag(file_of(L), p, "unknown tensor \"%s\" in the block", src_name);
        const pcc_tensor *a = &L->g->tensors[dst], *b = &L->g->tensors[src];
        char sa[256], sb[256];
        if (a->rank != b->rank || memcmp(a->dims, b->dims, sizeof a->dims) || a->dtype != b->dtype)
            return diag(file_of(L), p, "carry from \"%s\" %s %s to \"%s\" %s %s: shapes and dtypes must match", src_name,
                        shape_str(L->g, b, sb, sizeof sb), pcc_dtype_names[b->dtype], a->name,
                        shape_str(L->g, a, sa, sizeof sa), pcc_dtype_names[a->dtype]);
        bl->carry[bl->n_carry++] = (pcc_bind){dst, src};
    }
    return PCC_OK;
}

static pcc_status load_block_out(loader *L, scope *sc, pcc_block *bl, const pcc_json *v, const char *ptr) {
    pcc_status st = json_keys(&L->r, v, ptr, NULL, NULL);
    if (st) return st;
    if (json_size(v) == 0) return diag(file_of(L), ptr, "a block needs at least one output");
    bl->out = arena_alloc(L->g->arena, sizeof(pcc_bind) * (size_t)json_size(v));
    for (int i = 0; i < json_size(v); i++) {
        const pcc_json *m = json_at(v, i);
        const char *p = json_ptr_key(&L->r, ptr, json_key(m)), *inner_name;
        int outer = symtab_get(&L->top.names, json_key(m));
        if (outer < 0) return diag(file_of(L), p, "unknown tensor \"%s\" (declare it in /tensors)", json_key(m));
        pcc_tensor *o = &L->g->tensors[outer];
        if (o->kind != PCC_T_ACT)
            return diag(file_of(L), p, "\"%s\" is %s %s; a block's output must be an activation", o->name,
                        article(pcc_tensor_kind_names[o->kind]), pcc_tensor_kind_names[o->kind]);
        if (o->producer >= 0) return diag(file_of(L), p, "tensor \"%s\" is produced twice: first at %s", o->name, L->g->ops[o->producer].ptr);
        if (o->producer == PCC_PROD_BLOCK) return diag(file_of(L), p, "tensor \"%s\" is produced twice: first by a block's \"out\"", o->name);
        if ((st = json_str(&L->r, m, p, &inner_name))) return st;
        int inner = symtab_get(&sc->names, inner_name);
        if (inner < 0) return diag(file_of(L), p, "unknown tensor \"%s\" in the block", inner_name);
        const pcc_tensor *t = &L->g->tensors[inner];
        char sa[256], sb[256];
        if (t->rank != o->rank || memcmp(t->dims, o->dims, sizeof t->dims) || t->dtype != o->dtype)
            return diag(file_of(L), p, "\"%s\" is %s %s but the block's \"%s\" is %s %s", o->name, shape_str(L->g, o, sa, sizeof sa),
                        pcc_dtype_names[o->dtype], inner_name, shape_str(L->g, t, sb, sizeof sb), pcc_dtype_names[t->dtype]);
        o->producer = PCC_PROD_BLOCK;
        bl->out[bl->n_out++] = (pcc_bind){inner, outer};
    }
    return PCC_OK;
}

static pcc_status load_block(loader *L, const pcc_json *v, const char *ptr) {
    static const char *const keys[] = {"block", "repeat", "in", "carry", "out", "tensors", "ops", NULL};
    static const char *const req[] = {"block", "repeat", "in", "out", "ops", NULL};
    pcc_status st = json_keys(&L->r, v, ptr, keys, req);
    if (st) return st;
    pcc_graph *g = L->g;
    int b = g->n_blocks;
    pcc_block *bl = VEC_PUSH(g->arena, g->blocks, g->n_blocks, g->cap_blocks);
    bl->ptr = ptr;
    bl->fwd = -1;
    if ((st = json_name(&L->r, json_get(v, "block"), json_ptr_key(&L->r, ptr, "block"), &bl->name))) return st;
    for (int i = 0; i < b; i++)
        if (strcmp(g->blocks[i].name, bl->name) == 0)
            return diag(file_of(L), json_ptr_key(&L->r, ptr, "block"), "block name \"%s\" is used twice (first at %s)", bl->name, g->blocks[i].ptr);
    if ((st = json_int(&L->r, json_get(v, "repeat"), json_ptr_key(&L->r, ptr, "repeat"), 1, MAX_REPEAT, &bl->repeat))) return st;
    scope sc = {.block = b};
    symtab_init(&sc.names, g->arena, 32);
    const pcc_json *x;
    if ((st = load_block_in(L, &sc, bl, json_get(v, "in"), json_ptr_key(&L->r, ptr, "in")))) return st;
    if ((x = json_get(v, "tensors")) && (st = load_tensors(L, &sc, x, json_ptr_key(&L->r, ptr, "tensors")))) return st;
    const pcc_json *ops = json_get(v, "ops");
    const char *optr = json_ptr_key(&L->r, ptr, "ops");
    if ((st = json_expect(&L->r, ops, optr, PCC_J_ARRAY))) return st;
    if (json_size(ops) == 0) return diag(file_of(L), optr, "a block needs at least one op");
    bl = &g->blocks[b];
    bl->first_op = g->n_ops;
    for (int i = 0; i < json_size(ops); i++)
        if ((st = load_op(L, &sc, json_at(ops, i), json_ptr_idx(&L->r, optr, i)))) return st;
    bl = &g->blocks[b];
    bl->n_ops = g->n_ops - bl->first_op;
    if ((x = json_get(v, "carry")) && (st = load_block_carry(L, &sc, bl, x, json_ptr_key(&L->r, ptr, "carry")))) return st;
    if ((st = load_block_out(L, &sc, bl, json_get(v, "out"), json_ptr_key(&L->r, ptr, "out")))) return st;
    // With several copies, the state that flows from copy to copy is exactly what leaves the
    // block: an output that is not carried would drop the earlier copies' values, and a carried
    // tensor that is not an output would make the last copy's work invisible.
    if (bl->repeat > 1) {
        for (int i = 0; i < bl->n_out; i++) {
            bool carried = false;
            for (int c = 0; c < bl->n_carry; c++) carried |= bl->carry[c].outer == bl->out[i].inner;
            if (!carried)
                return diag(file_of(L), json_ptr_key(&L->r, json_ptr_key(&L->r, ptr, "out"), g->tensors[bl->out[i].outer].name),
                            "block output \"%s\" must also be carried to the next copy (repeat is %lld)",
                            g->tensors[bl->out[i].inner].name, (long long)bl->repeat);
        }
        for (int c = 0; c < bl->n_carry; c++) {
            bool out = false;
            for (int i = 0; i < bl->n_out; i++) out |= bl->carry[c].outer == bl->out[i].inner;
            if (!out)
                return diag(file_of(L), json_ptr_key(&L->r, json_ptr_key(&L->r, ptr, "carry"), g->tensors[bl->carry[c].inner].name),
                            "carried tensor \"%s\" must also be an output of the block", g->tensors[bl->carry[c].outer].name);
        }
    }
    // Order inside the block: its ops are the items.
    item *it = arena_alloc(g->arena, sizeof(item) * (size_t)bl->n_ops);
    for (int i = 0; i < bl->n_ops; i++) it[i] = op_item(&g->ops[bl->first_op + i]);
    if ((st = check_order(L, it, bl->n_ops))) return st;
    // A carried input must be computed by the copy itself, or copy i+1 would read a stale value.
    for (int i = 0; i < bl->n_carry; i++)
        if (g->tensors[bl->carry[i].outer].producer < 0)
            return diag(file_of(L), json_ptr_key(&L->r, json_ptr_key(&L->r, ptr, "carry"), g->tensors[bl->carry[i].inner].name),
                        "carry source \"%s\" must be produced by an op of the block", g->tensors[bl->carry[i].outer].name);
    return PCC_OK;
}

/* ---- the whole model ---- */

static pcc_status check_top_order(loader *L) {
    pcc_graph *g = L->g;
    item *it = arena_alloc(g->arena, sizeof(item) * (size_t)(g->n_ops + 1));
    int n = 0;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->block < 0) {
            it[n++] = op_item(op);
            continue;
        }
        const pcc_block *bl = &g->blocks[op->block];
        if (o != bl->first_op) continue;
        item b = {.ptr = bl->ptr, .is_block = true, .nreads = bl->n_in, .nwrites = bl->n_out};
        b.reads = arena_alloc(g->arena, sizeof(int) * (size_t)(bl->n_in + 1));
        b.read_ptrs = arena_alloc(g->arena, sizeof(char *) * (size_t)(bl->n_in + 1));
        b.writes = arena_alloc(g->arena, sizeof(int) * (size_t)(bl->n_out + 1));
        for (int i = 0; i < bl->n_in; i++) {
            b.reads[i] = bl->in[i].outer;
            b.read_ptrs[i] = g->tensors[bl->in[i].inner].ptr;
        }
        for (int i = 0; i < bl->n_out; i++) b.writes[i] = bl->out[i].outer;
        it[n++] = b;
    }
    return check_order(L, it, n);
}

static pcc_status check_tensors_used(loader *L) {
    pcc_graph *g = L->g;
    unsigned char *read = arena_alloc(g->arena, (size_t)g->n_tensors + 1);
    for (int o = 0; o < g->n_ops; o++)
        for (int i = 0; i < g->ops[o].nin; i++) read[g->ops[o].in[i]] = 1;
    for (int b = 0; b < g->n_blocks; b++)
        for (int i = 0; i < g->blocks[b].n_in; i++) read[g->blocks[b].in[i].outer] = 1;
    for (int t = 0; t < g->n_tensors; t++) {
        const pcc_tensor *x = &g->tensors[t];
        if (x->kind == PCC_T_ACT && x->producer == PCC_PROD_NONE)
            return diag(file_of(L), x->ptr, "activation \"%s\" is declared but no op produces it", x->name);
        if (!read[t] && x->kind == PCC_T_PARAM)
            warn("%s:%s: %s \"%s\" is never used", file_of(L), x->ptr, x->frozen ? "constant" : "parameter", x->name);
        if (!read[t] && x->kind == PCC_T_INPUT)
            warn("%s:%s: input \"%s\" is never used", file_of(L), x->ptr, x->name);
    }
    return PCC_OK;
}

static pcc_status check_loss(loader *L, const pcc_json *v) {
    const char *name;
    pcc_status st = json_str(&L->r, v, "/loss", &name);
    if (st) return st;
    int t = symtab_get(&L->top.names, name);
    if (t < 0) return diag(file_of(L), "/loss", "unknown tensor \"%s\"", name);
    const pcc_tensor *x = &L->g->tensors[t];
    char sh[256];
    if (x->rank != 0) return diag(file_of(L), "/loss", "the loss \"%s\" has shape %s; it must be a scalar ([])", name, shape_str(L->g, x, sh, sizeof sh));
    if (x->kind != PCC_T_ACT)
        return diag(file_of(L), "/loss", "the loss \"%s\" is %s %s; it must be computed by an op", name,
                    article(pcc_tensor_kind_names[x->kind]), pcc_tensor_kind_names[x->kind]);
    if (x->dtype == PCC_I32) return diag(file_of(L), "/loss", "the loss \"%s\" is i32; it must be a float", name);
    L->g->loss = t;
    return PCC_OK;
}

static pcc_status load_root(loader *L, const pcc_json *root) {
    static const char *const keys[] = {"version", "name", "description", "dtype", "dims", "tensors", "ops", "loss", "optimizer", NULL};
    static const char *const req[] = {"version", "name", "dims", "tensors", "ops", "loss", NULL};
    pcc_status st = json_keys(&L->r, root, "", keys, req);
    if (st) return st;
    int64_t version;
    if ((st = json_int(&L->r, json_get(root, "version"), "/version", 0, INT32_MAX, &version))) return st;
    if (version != 1) return diag(file_of(L), "/version", "unsupported model format version %lld (this plancc reads version 1)", (long long)version);
    pcc_graph *g = L->g;
    if ((st = json_name(&L->r, json_get(root, "name"), "/name", &g->name))) return st;
    const pcc_json *x;
    const char *desc;
    if ((x = json_get(root, "description")) && (st = json_str(&L->r, x, "/description", &desc))) return st;
    g->dtype = PCC_F32;
    if ((x = json_get(root, "dtype")) && (st = load_dtype(L, x, "/dtype", false, &g->dtype))) return st;
    if ((st = load_dims(L, json_get(root, "dims")))) return st;
    if ((st = load_tensors(L, &L->top, json_get(root, "tensors"), "/tensors"))) return st;
    const pcc_json *ops = json_get(root, "ops");
    if ((st = json_expect(&L->r, ops, "/ops", PCC_J_ARRAY))) return st;
    if (json_size(ops) == 0) return diag(file_of(L), "/ops", "the model has no ops");
    for (int i = 0; i < json_size(ops); i++) {
        const pcc_json *e = json_at(ops, i);
        const char *p = json_ptr_idx(&L->r, "/ops", i);
        if (json_type(e) == PCC_J_OBJECT && json_get(e, "block")) st = load_block(L, e, p);
        else st = load_op(L, &L->top, e, p);
        if (st) return st;
    }
    g->n_fwd_ops = g->n_ops;
    if ((st = check_top_order(L))) return st;
    if ((st = check_tensors_used(L))) return st;
    if ((st = check_loss(L, json_get(root, "loss")))) return st;
    return load_optimizer(L, json_get(root, "optimizer"));
}

pcc_status model_load(pcc_arena *a, const char *path, pcc_graph **out) {
    *out = NULL;
    char *text;
    size_t len;
    pcc_status st = file_read_all(a, path, &text, &len, MODEL_MAX_BYTES);
    if (st) return st;
    loader L = {.g = graph_init(a, arena_strdup(a, path))};
    L.top.block = -1;
    symtab_init(&L.top.names, a, 64);
    pcc_json *root;
    if ((st = json_open(&L.r, a, path, text, len, &root))) return st;
    st = load_root(&L, root);
    json_close(&L.r);
    if (st) return st;
    *out = L.g;
    return PCC_OK;
}
