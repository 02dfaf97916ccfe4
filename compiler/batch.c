/*
 * batch.c: the batch options' arithmetic (--global-batch, --micro-batch-size, --micro-batches).
 *
 * The model file's batch dimension (axis 0 of its first input with a shape: graph_batch_dim)
 * holds the samples of one micro-batch step over all data-parallel replicas; the options say how
 * many samples a step takes in all and how it is cut into micro-batches, as Megatron-LM's
 * --global-batch-size and --micro-batch-size do:
 *   global and size:  micro-batches = global / (size * dp), batch = size * dp
 *   global only:      batch = global / micro-batches (as given, default 1)
 *   size only:        batch = size * dp, micro-batches as given
 * batch_apply sets the dimension and the graph's micro-batch count (which autodiff reads: the
 * gradients accumulate over the micro-batches) before the graph is checked and differentiated.
 * A ghost batch norm (statistics over groups of G samples) needs whole groups in a micro-batch:
 * batch_apply refuses a batch that cuts one, and batch_grain tells the micro-batch search
 * (driver.c) which batches it may try. batch_dims says which dimensions hold the batch's samples
 * (the batch, and those reshapes make of it), which data parallelism cuts.
 */
#include "plancc.h"

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

int64_t batch_grain(const pcc_graph *g) {
    int b = graph_batch_dim(g);
    int64_t l = 1;
    for (int i = 0; i < g->n_fwd_ops && b >= 0; i++) {
        const pcc_op *op = &g->ops[i];
        int64_t G = op->attrs.ghost_batch;
        if (op->kind == PCC_OP_BATCHNORM && G > 0 && g->tensors[op->in[0]].dims[0] == b) l = l / gcd64(l, G) * G;
    }
    return l;
}

// Every ghost batch norm's group still divides the batch once the options have set it.
static pcc_status ghost_check(const pcc_graph *g, int b, int64_t global_batch) {
    for (int i = 0; i < g->n_fwd_ops; i++) {
        const pcc_op *op = &g->ops[i];
        int64_t G = op->attrs.ghost_batch;
        if (op->kind != PCC_OP_BATCHNORM || G <= 0 || g->tensors[op->in[0]].dims[0] != b || g->dims[b].size % G == 0) continue;
        return diag(g->file, arena_printf(g->arena, "%s/attrs/ghost_batch", op->ptr),
                    "ghost_batch %lld does not divide the batch: %s makes %s = %lld per micro-batch", (long long)G,
                    global_batch ? "--global-batch" : "--micro-batch-size", g->dims[b].name, (long long)g->dims[b].size);
    }
    return PCC_OK;
}

// --global-batch with --micro-batch-size: the micro-batch count follows (*batch: their samples).
static pcc_status batch_by_size(const pcc_batch_opts *o, int64_t step, int *micro_batches, int64_t *batch) {
    int64_t mbs = o->micro_batch_size, global_batch = o->global_batch;
    int dp = o->dp;
    if (global_batch % step != 0) {
        fprintf(stderr, "%s: --global-batch %lld is not a multiple of --micro-batch-size %lld x --dp %d = %lld\n",
                pcc_progname, (long long)global_batch, (long long)mbs, dp > 0 ? dp : 1, (long long)step);
        return PCC_ERR_INPUT;
    }
    int64_t m = global_batch / step;
    if (m > 65536 || (o->micro_batches_given && m != *micro_batches)) {
        fprintf(stderr, m > 65536 ? "%s: --global-batch %lld makes %lld micro-batches of %lld samples; at most 65536\n"
                                  : "%s: --global-batch %lld in micro-batches of %lld samples per replica makes %lld "
                                    "micro-batch(es), but --micro-batches says %d\n",
                pcc_progname, (long long)global_batch, m > 65536 ? (long long)m : (long long)mbs,
                m > 65536 ? (long long)step : (long long)m, *micro_batches);
        return PCC_ERR_INPUT;
    }
    *micro_batches = (int)m;
    *batch = step;
    return PCC_OK;
}

static int64_t gcd_abs(int64_t a, int64_t b) { return gcd64(a < 0 ? -a : a, b < 0 ? -b : b); }

typedef struct ratio {
    int64_t num, den;   // 1/1: unchanged
} ratio;

static ratio ratio_mul(ratio a, ratio b) {
    int64_t g1 = gcd_abs(a.num, b.den), g2 = gcd_abs(b.num, a.den);
    return (ratio){(a.num / g1) * (b.num / g2), (a.den / g2) * (b.den / g1)};
}

// One reshape group of op (old sizes): input dims [*i0, i) and output dims [*j0, j); false at the end.
static bool next_group(const pcc_graph *g, const int64_t *old, const pcc_tensor *x, const pcc_tensor *y, int *i, int *j) {
    if (*i >= x->rank && *j >= y->rank) return false;
    int64_t px = 1, py = 1;
    if (*i < x->rank) px *= old[x->dims[(*i)++]];
    if (*j < y->rank) py *= old[y->dims[(*j)++]];
    while (px != py && (*i < x->rank || *j < y->rank)) {
        if ((px < py && *i < x->rank) || *j >= y->rank) px *= old[x->dims[(*i)++]];
        else py *= old[y->dims[(*j)++]];
    }
    while (*i < x->rank && old[x->dims[*i]] == 1) (*i)++; // size-1 dimensions join the group before
    while (*j < y->rank && old[y->dims[*j]] == 1) (*j)++;
    (void)g;
    return true;
}

// The factor of a group side (NULL when none of its dims changed), and its one unchanged dim.
static bool side_factor(const pcc_tensor *t, int a, int b, const ratio *f, const bool *changed, ratio *out, int *single) {
    bool any = false;
    *out = (ratio){1, 1}, *single = b - a == 1 ? t->dims[a] : -1;
    for (int k = a; k < b; k++)
        if (changed[t->dims[k]]) any = true, *out = ratio_mul(*out, f[t->dims[k]]);
    return any;
}

// Dim d follows factor r: its new size, or a refusal naming it.
static pcc_status follow(pcc_graph *g, int d, ratio r, const int64_t *old, ratio *f, bool *changed, int b, const pcc_op *op) {
    if ((old[d] * r.num) % r.den != 0)
        return diag(g->file, g->dims[d].ptr, "dimension %s = %lld is made of the batch dimension %s (reshape at %s), and "
                    "the batch option changes %s by %lld/%lld, which leaves %s a fraction; choose a batch that keeps it whole",
                    g->dims[d].name, (long long)old[d], g->dims[b].name, op->ptr, g->dims[b].name, (long long)r.num,
                    (long long)r.den, g->dims[d].name);
    f[d] = r, changed[d] = true;
    return PCC_OK;
}

// The reshapes' groups, until no dimension changes: see the essay.
static pcc_status derived_dims(pcc_graph *g, int b, int64_t batch) {
    int64_t *old = arena_alloc(g->arena, sizeof(int64_t) * (size_t)(g->n_dims + 1));
    ratio *f = arena_alloc(g->arena, sizeof(ratio) * (size_t)(g->n_dims + 1));
    bool *changed = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_dims + 1));
    for (int d = 0; d < g->n_dims; d++) old[d] = g->dims[d].size, f[d] = (ratio){1, 1};
    int64_t q = gcd64(batch, old[b]);
    f[b] = (ratio){batch / q, old[b] / q}, changed[b] = true;
    for (bool again = true; again;) {
        again = false;
        for (int o = 0; o < g->n_ops; o++) {
            const pcc_op *op = &g->ops[o];
            if (op->kind != PCC_OP_RESHAPE) continue;
            const pcc_tensor *x = &g->tensors[op->in[0]], *y = &g->tensors[op->out[0]];
            for (int i = 0, j = 0, i0 = 0, j0 = 0; next_group(g, old, x, y, &i, &j); i0 = i, j0 = j) {
                ratio rx, ry;
                int sx, sy;
                bool cx = side_factor(x, i0, i, f, changed, &rx, &sx), cy = side_factor(y, j0, j, f, changed, &ry, &sy);
                if (cx == cy) continue;
                int d = cx ? sy : sx;
                if (d < 0) {
                    const pcc_tensor *t = cx ? y : x;
                    int k0 = cx ? j0 : i0;
                    return diag(g->file, g->dims[t->dims[k0]].ptr, "the batch dimension %s meets dimension %s and others in "
                                "reshape %s; plancc cannot tell which of them changes with the batch option",
                                g->dims[b].name, g->dims[t->dims[k0]].name, op->ptr);
                }
                pcc_status st = follow(g, d, cx ? rx : ry, old, f, changed, b, op);
                if (st) return st;
                again = true;
            }
        }
    }
    for (int d = 0; d < g->n_dims; d++)
        if (changed[d]) g->dims[d].size = old[d] * f[d].num / f[d].den;
    for (int o = 0; o < g->n_ops; o++) {
        pcc_status st = op_check_shapes(g, &g->ops[o], g->file);
        if (st) return st;
    }
    return PCC_OK;
}

pcc_status batch_apply(pcc_graph *g, pcc_batch_opts *o) {
    g->micro_batches = o->micro_batches;
    if (!o->global_batch && !o->micro_batch_size) return PCC_OK;
    int b = graph_batch_dim(g);
    if (b < 0) {
        fprintf(stderr, "%s: %s: %s needs a batch dimension (axis 0 of the model's first input), and the model has none\n",
                pcc_progname, g->file, o->global_batch ? "--global-batch" : "--micro-batch-size");
        return PCC_ERR_INPUT;
    }
    int64_t batch, step = (int64_t)o->micro_batch_size * (o->dp > 0 ? o->dp : 1);
    if (o->micro_batch_size && o->global_batch) {
        pcc_status st = batch_by_size(o, step, &o->micro_batches, &batch);
        if (st) return st;
    } else if (o->global_batch) {
        if (o->global_batch % o->micro_batches != 0) {
            fprintf(stderr, "%s: --global-batch %lld does not split into %d micro-batches\n", pcc_progname,
                    (long long)o->global_batch, o->micro_batches);
            return PCC_ERR_INPUT;
        }
        batch = o->global_batch / o->micro_batches;
    } else {
        batch = step;
    }
    pcc_status st = batch == g->dims[b].size ? PCC_OK : derived_dims(g, b, batch);
    if (st) return st;
    g->micro_batches = o->micro_batches;
    st = ghost_check(g, b, o->global_batch);
    if (!st && !o->global_batch) o->global_batch = batch * o->micro_batches; // what the plan records
    return st;
}

// The dimensions data parallelism splits: the batch, and every dimension a reshape makes of it
// as the major axis of a group (Swin's windows B x nW, the Evoformer's MSA rows B x Ns, tokens
// B x S), both ways, until none is added. Cut into dp contiguous pieces, such a dimension holds
// the same samples as the batch's pieces, so phase 3 finds the layouts agree across the reshape
// and an operator over it runs on its replica's samples only, not on all of them.
bool *batch_dims(const pcc_graph *g, int bdim) {
    bool *m = arena_alloc(g->arena, sizeof(bool) * (size_t)(g->n_dims + 1));
    if (bdim < 0) return m;
    m[bdim] = true;
    for (bool again = true; again;) {
        again = false;
        for (int o = 0; o < g->n_fwd_ops; o++) {
            const pcc_op *op = &g->ops[o];
            pcc_letter l[PCC_MAX_LETTERS];
            int n = op->kind == PCC_OP_RESHAPE ? op_letters(g, op, l) : 0;
            for (int k = 0; k < n; k++) {
                if (l[k].nosplit || l[k].axis[0] < 0 || l[k].axis[1] < 0) continue;
                int a = l[k].dim, b = g->tensors[op->out[0]].dims[(int)l[k].axis[1]];
                if (m[a] != m[b]) m[a] = m[b] = true, again = true;
            }
        }
    }
    return m;
}
