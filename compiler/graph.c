/*
 * graph.c: the graph IR: its constructors and the questions every pass asks of it.
 *
 * The IR is flat arrays in one arena: dimensions, tensors, operators and blocks, addressed by
 * index. Operators are kept in program order; the operators of a block are contiguous and stand
 * for `repeat` copies. This file knows the IR's shape only: what an operator computes (its
 * shape rule, FLOPs, letters) is ops.c's, which reads the IR through this file; the verifier
 * that holds the two together is check.c's.
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

int graph_block_family(const pcc_graph *g, int b) { return g->blocks[b].fwd < 0 ? b : g->blocks[b].fwd; }

uint64_t *graph_backward_reads(const pcc_graph *g) {
    uint64_t *rd = arena_alloc(g->arena, sizeof(uint64_t) * (size_t)(g->n_fwd_ops + 1));
    for (int o = g->n_fwd_ops; o < g->n_ops; o++) {
        int f = g->ops[o].fwd;
        if (f < 0 || f >= g->n_fwd_ops || g->ops[o].phase != PCC_PHASE_BWD) continue;
        for (int i = 0; i < g->ops[o].nin; i++)
            for (int k = 0; k < g->ops[f].nin && k < 64; k++)
                if (g->ops[f].in[k] == g->ops[o].in[i]) rd[f] |= 1ull << k;
    }
    return rd;
}

int graph_carry_of(const pcc_block *bl, int t, bool inner) {
    for (int k = 0; k < bl->n_carry; k++)
        if ((inner ? bl->carry[k].inner : bl->carry[k].outer) == t) return k;
    return -1;
}

bool graph_is_param_grad(const pcc_graph *g, int t) {
    const pcc_tensor *T = &g->tensors[t];
    return T->kind == PCC_T_GRAD && T->of >= 0 && g->tensors[T->of].kind == PCC_T_PARAM;
}

bool graph_is_final_param_grad(const pcc_graph *g, int t) {
    return graph_is_param_grad(g, t) && g->tensors[g->tensors[t].of].grad == t;
}

bool graph_grad_deferrable(const pcc_graph *g, int t) {
    const pcc_tensor *T = &g->tensors[t];
    if (!graph_is_param_grad(g, t) || graph_is_final_param_grad(g, t) || T->producer < 0) return false;
    const pcc_op *prod = &g->ops[T->producer];
    if (prod->block >= 0 || prod->phase != PCC_PHASE_BWD || prod->accumulate) return false;
    bool read = false;
    for (int o = 0; o < g->n_ops; o++) {
        const pcc_op *op = &g->ops[o];
        for (int i = 0; i < op->nin; i++) {
            if (op->in[i] != t) continue;
            if (op->block >= 0 || op->phase != PCC_PHASE_BWD || !op->accumulate) return false;
            read = true;
        }
    }
    return read;
}

int graph_batch_dim(const pcc_graph *g) {
    for (int t = 0; t < g->n_tensors; t++)
        if (g->tensors[t].kind == PCC_T_INPUT && g->tensors[t].rank > 0) return g->tensors[t].dims[0];
    return -1;
}

pcc_layer *graph_layers(const pcc_graph *g, int *n_out) {
    pcc_layer *v = NULL;
    int n = 0, cap = 0;
    for (int o = 0; o < g->n_fwd_ops; o++) {
        const pcc_op *op = &g->ops[o];
        if (op->block < 0) {
            *VEC_PUSH(g->arena, v, n, cap) = (pcc_layer){o, -1, 0};
            continue;
        }
        const pcc_block *bl = &g->blocks[op->block];
        for (int64_t c = 0; c < bl->repeat; c++) *VEC_PUSH(g->arena, v, n, cap) = (pcc_layer){-1, op->block, (int)c};
        o = bl->first_op + bl->n_ops - 1;
    }
    *n_out = n;
    return v;
}

char *shape_str(const pcc_graph *g, const pcc_tensor *t, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < t->rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "", g->dims[t->dims[i]].name);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}
