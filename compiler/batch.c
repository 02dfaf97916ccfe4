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
 * (driver.c) which batches it may try.
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
    g->dims[b].size = batch;
    g->micro_batches = o->micro_batches;
    pcc_status st = ghost_check(g, b, o->global_batch);
    if (!st && !o->global_batch) o->global_batch = batch * o->micro_batches; // what the plan records
    return st;
}
