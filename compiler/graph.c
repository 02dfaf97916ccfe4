/*
 * graph.c: the graph IR's constructors and its verifier.
 *
 * The IR is flat arrays in one arena: dimensions, tensors, operators and blocks, addressed by
 * index. Operators are kept in program order; the operators of a block are contiguous and stand
 * for `repeat` copies. graph_check runs after every pass and proves the invariants the passes
 * rely on; since the loader has already reported every input fault with its JSON Pointer, a
 * failure here is a bug in plancc and is reported as an internal error.
 */
#include "plancc.h"

#include <string.h>

const char *const pcc_dtype_names[PCC_DTYPE_COUNT] = {"f32", "f16", "bf16", "i32"};
const char *const pcc_tensor_kind_names[PCC_T_KIND_COUNT] = {"input", "param", "activation",
                                                             "grad", "state"};
const char *const pcc_data_kind_names[PCC_DATA_KIND_COUNT] = {"normal", "binary", "randint",
                                                              "tokens", "targets", "arange", "teacher"};

int pcc_dtype_bytes(pcc_dtype t) {
    switch (t) {
    case PCC_F32: return 4;
    case PCC_F16: return 2;
    case PCC_BF16: return 2;
    case PCC_I32: return 4;
    default: PCC_ASSERT(!"bad dtype");
    }
}

pcc_graph *graph_init(pcc_arena *a, const char *file) {
    pcc_graph *g = arena_alloc(a, sizeof(*g));
    g->arena = a;
    g->file = file;
    g->loss = -1;
    g->micro_batches = 1;
    symtab_init(&g->dim_names, a, 16);
    return g;
}

int graph_add_dim(pcc_graph *g, const char *name, int64_t size, const char *ptr) {
    int id = g->n_dims;
    pcc_dim *d = VEC_PUSH(g->arena, g->dims, g->n_dims, g->cap_dims);
    d->name = name;
    d->size = size;
    d->ptr = ptr;
    return id;
}

int graph_add_tensor(pcc_graph *g, const pcc_tensor *t) {
    int id = g->n_tensors;
    *VEC_PUSH(g->arena, g->tensors, g->n_tensors, g->cap_tensors) = *t;
    return id;
}

int graph_add_op(pcc_graph *g, pcc_op_kind k, int block, const int *in, int nin, const int *out,
                 int nout, const char *ptr) {
    int id = g->n_ops;
    pcc_op *op = VEC_PUSH(g->arena, g->ops, g->n_ops, g->cap_ops);
    op->kind = k;
    op->block = block;
    op->fwd = -1;
    op->nin = nin;
    op->nout = nout;
    op->in = arena_alloc(g->arena, sizeof(int) * (size_t)(nin ? nin : 1));
    op->out = arena_alloc(g->arena, sizeof(int) * (size_t)(nout ? nout : 1));
    if (nin) memcpy(op->in, in, sizeof(int) * (size_t)nin);
    if (nout) memcpy(op->out, out, sizeof(int) * (size_t)nout);
    op->ptr = ptr;
    for (int i = 0; i < nout; i++) g->tensors[out[i]].producer = id;
    return id;
}

int64_t tensor_numel(const pcc_graph *g, const pcc_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= g->dims[t->dims[i]].size;
    return n;
}

double tensor_bytes(const pcc_graph *g, const pcc_tensor *t) {
    return (double)tensor_numel(g, t) * pcc_dtype_bytes(t->dtype);
}

int64_t tensor_copies(const pcc_graph *g, const pcc_tensor *t) {
    return t->block < 0 ? 1 : g->blocks[t->block].repeat;
}

int64_t op_copies(const pcc_graph *g, const pcc_op *op) {
    return op->block < 0 ? 1 : g->blocks[op->block].repeat;
}

bool graph_is_table(const pcc_graph *g, int t) {
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if ((op->kind == PCC_OP_EMBEDDING || op->kind == PCC_OP_EMBEDDING_BAG) && op->nin > 1 && op->in[1] == t) return true;
    }
    return false;
}

bool graph_step_synced(const pcc_graph *g, int t, bool bg_dense) { return !bg_dense || graph_is_table(g, t); }

int graph_bucket_segment(const pcc_graph *g, int i) {
    const pcc_op *op = &g->ops[i];
    if (op->block >= 0) return g->n_blocks + 1 + op->block;
    int s = 0;
    for (int b = 0; b < g->n_blocks; b++) s += g->blocks[b].first_op < i;
    return s;
}

char *shape_str(const pcc_graph *g, const pcc_tensor *t, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < t->rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "", g->dims[t->dims[i]].name);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* ---- verifier ---- */

static pcc_status bad(const pcc_graph *g, const char *what, int idx) {
    fprintf(stderr, "%s: internal error: graph_check(%s): %s %d\n", pcc_progname,
            g->file ? g->file : "?", what, idx);
    return PCC_ERR_INTERNAL;
}

// An op may read top-level tensors and those of its block's family: a forward block and the
// backward and optimizer blocks derived from it share one copy numbering.
static int family(const pcc_graph *g, int b) { return g->blocks[b].fwd >= 0 ? g->blocks[b].fwd : b; }

static bool may_read(const pcc_graph *g, const pcc_op *op, const pcc_tensor *t) {
    if (t->block < 0) return true;
    return op->block >= 0 && family(g, op->block) == family(g, t->block);
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
