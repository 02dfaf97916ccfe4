/*
 * cpu/dispatch.c: the CPU backend's operator entry, rt_cpu_kernel (float) and rt_cpu_kernel_f64
 * (double, the unit tests' finite differences): the table from operator (runtime/ops.def's
 * row) to kernel, and the checks that run before any kernel. The kernels live in one file per
 * operator family (cpu.h lists them); this file and they are compiled twice, once per
 * precision (meson.build), and the double build's symbols carry f64 in their names.
 *
 * Dispatch checks before any kernel runs: the operator is known, the arity is ops.def's, every
 * view has a rank up to 8, sizes >= 0, a piece inside its logical tensor (start + shape <= full),
 * data when it is not empty and at most INT_MAX elements (CBLAS takes int sizes), and the dtypes
 * are the ones the CPU backend runs (0: real, 3: int32 ids and labels; data movement keeps its
 * input's dtype). Each kernel then checks how its views relate and returns -1 with a message
 * naming the operands ("linear: input 1 is [64,32] but input 0's last dimension is 48") rather
 * than computing on shapes that do not fit. Kernels keep no state: ranks call them from several
 * threads at once.
 *
 * Known limits: f16 and bf16 operands are refused (the CPU backend runs f32 only); a kernel
 * whose output overlaps an input works only where it reads each element before writing it
 * (the element-wise operators).
 */
#include "cpu.h"

#include <limits.h>

#ifdef RT_REAL_DOUBLE
#define CPU_ENTRY rt_cpu_kernel_f64
#else
#define CPU_ENTRY rt_cpu_kernel
#endif

typedef int kernel_fn(kctx *c);

static kernel_fn *const kernels[CPU_OP_COUNT] = {
    [CPU_OP_MATMUL] = CPU_KERNEL(matmul),
    [CPU_OP_BMM] = CPU_KERNEL(bmm),
    [CPU_OP_LINEAR] = CPU_KERNEL(linear),
    [CPU_OP_ADD] = CPU_KERNEL(add),
    [CPU_OP_MUL] = CPU_KERNEL(mul),
    [CPU_OP_SCALE] = CPU_KERNEL(scale),
    [CPU_OP_RELU] = CPU_KERNEL(activation),
    [CPU_OP_GELU] = CPU_KERNEL(activation),
    [CPU_OP_SILU] = CPU_KERNEL(activation),
    [CPU_OP_LAYERNORM] = CPU_KERNEL(norm),
    [CPU_OP_RMSNORM] = CPU_KERNEL(norm),
    [CPU_OP_SOFTMAX] = CPU_KERNEL(softmax),
    [CPU_OP_ATTENTION] = CPU_KERNEL(attention),
    [CPU_OP_EMBEDDING] = CPU_KERNEL(embedding),
    [CPU_OP_EMBEDDING_BAG] = CPU_KERNEL(embedding_bag),
    [CPU_OP_CONCAT] = CPU_KERNEL(concat),
    [CPU_OP_SPLIT] = CPU_KERNEL(split),
    [CPU_OP_SLICE] = CPU_KERNEL(slice),
    [CPU_OP_RESHAPE] = CPU_KERNEL(reshape),
    [CPU_OP_TRANSPOSE] = CPU_KERNEL(transpose),
    [CPU_OP_CONV2D] = CPU_KERNEL(conv2d),
    [CPU_OP_MAXPOOL] = CPU_KERNEL(maxpool),
    [CPU_OP_AVGPOOL] = CPU_KERNEL(avgpool),
    [CPU_OP_BATCHNORM] = CPU_KERNEL(batchnorm),
    [CPU_OP_DROPOUT] = CPU_KERNEL(dropout),
    [CPU_OP_CROSS_ENTROPY] = CPU_KERNEL(cross_entropy),
    [CPU_OP_MSE_LOSS] = CPU_KERNEL(pointwise_loss),
    [CPU_OP_BCE_LOGITS] = CPU_KERNEL(pointwise_loss),
    [CPU_OP_FILL] = CPU_KERNEL(fill),
    [CPU_OP_REDUCE_SUM] = CPU_KERNEL(reduce_sum),
    [CPU_OP_MATMUL_GRAD_A] = CPU_KERNEL(matmul_grad_a),
    [CPU_OP_MATMUL_GRAD_B] = CPU_KERNEL(matmul_grad_b),
    [CPU_OP_BMM_GRAD_A] = CPU_KERNEL(bmm_grad_a),
    [CPU_OP_BMM_GRAD_B] = CPU_KERNEL(bmm_grad_b),
    [CPU_OP_LINEAR_GRAD_X] = CPU_KERNEL(linear_grad_x),
    [CPU_OP_LINEAR_GRAD_W] = CPU_KERNEL(linear_grad_w),
    [CPU_OP_RELU_GRAD] = CPU_KERNEL(activation_grad),
    [CPU_OP_GELU_GRAD] = CPU_KERNEL(activation_grad),
    [CPU_OP_SILU_GRAD] = CPU_KERNEL(activation_grad),
    [CPU_OP_LAYERNORM_GRAD_X] = CPU_KERNEL(norm_grad_x),
    [CPU_OP_LAYERNORM_GRAD_W] = CPU_KERNEL(norm_grad_w),
    [CPU_OP_RMSNORM_GRAD_X] = CPU_KERNEL(norm_grad_x),
    [CPU_OP_RMSNORM_GRAD_W] = CPU_KERNEL(norm_grad_w),
    [CPU_OP_SOFTMAX_GRAD] = CPU_KERNEL(softmax_grad),
    [CPU_OP_ATTENTION_GRAD] = CPU_KERNEL(attention_grad),
    [CPU_OP_EMBEDDING_GRAD] = CPU_KERNEL(embedding_grad),
    [CPU_OP_EMBEDDING_BAG_GRAD] = CPU_KERNEL(embedding_bag_grad),
    [CPU_OP_SLICE_GRAD] = CPU_KERNEL(slice_grad),
    [CPU_OP_CONV2D_GRAD_X] = CPU_KERNEL(conv2d_grad_x),
    [CPU_OP_CONV2D_GRAD_W] = CPU_KERNEL(conv2d_grad_w),
    [CPU_OP_CONV2D_GRAD_B] = CPU_KERNEL(conv2d_grad_b),
    [CPU_OP_MAXPOOL_GRAD] = CPU_KERNEL(maxpool_grad),
    [CPU_OP_AVGPOOL_GRAD] = CPU_KERNEL(avgpool_grad),
    [CPU_OP_BATCHNORM_GRAD_X] = CPU_KERNEL(batchnorm_grad_x),
    [CPU_OP_BATCHNORM_GRAD_W] = CPU_KERNEL(batchnorm_grad_w),
    [CPU_OP_DROPOUT_GRAD] = CPU_KERNEL(dropout),
    [CPU_OP_CROSS_ENTROPY_GRAD] = CPU_KERNEL(cross_entropy_grad),
    [CPU_OP_MSE_LOSS_GRAD] = CPU_KERNEL(pointwise_loss_grad),
    [CPU_OP_BCE_LOGITS_GRAD] = CPU_KERNEL(pointwise_loss_grad),
    [CPU_OP_SGD] = CPU_KERNEL(sgd),
    [CPU_OP_ADAMW] = CPU_KERNEL(adamw),
    [CPU_OP_SUB] = CPU_KERNEL(sub_div),
    [CPU_OP_DIV] = CPU_KERNEL(sub_div),
    [CPU_OP_MASKED_FILL] = CPU_KERNEL(masked_fill),
    [CPU_OP_SIGMOID] = CPU_KERNEL(unary),
    [CPU_OP_TANH] = CPU_KERNEL(unary),
    [CPU_OP_EXP] = CPU_KERNEL(unary),
    [CPU_OP_LOG] = CPU_KERNEL(unary),
    [CPU_OP_GELU_ERF] = CPU_KERNEL(unary),
    [CPU_OP_RSQRT] = CPU_KERNEL(unary),
    [CPU_OP_SQRT] = CPU_KERNEL(unary),
    [CPU_OP_SIN] = CPU_KERNEL(unary),
    [CPU_OP_COS] = CPU_KERNEL(unary),
    [CPU_OP_POW] = CPU_KERNEL(unary),
    [CPU_OP_NE] = CPU_KERNEL(ne),
    [CPU_OP_SUM] = CPU_KERNEL(reduce),
    [CPU_OP_MEAN] = CPU_KERNEL(reduce),
    [CPU_OP_MAX] = CPU_KERNEL(reduce),
    [CPU_OP_EXPAND] = CPU_KERNEL(expand),
    [CPU_OP_ONE_HOT] = CPU_KERNEL(one_hot),
    [CPU_OP_SIGMOID_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_TANH_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_EXP_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_LOG_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_GELU_ERF_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_RSQRT_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_SQRT_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_SIN_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_COS_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_POW_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_MAX_GRAD] = CPU_KERNEL(max_grad),
    [CPU_OP_TOPK] = CPU_KERNEL(topk),
    [CPU_OP_TOPK_GRAD] = CPU_KERNEL(topk_grad),
    [CPU_OP_ATTENTION_GRAD_BIAS] = CPU_KERNEL(attention_grad_bias),
    [CPU_OP_ERF] = CPU_KERNEL(unary),
    [CPU_OP_ERF_GRAD] = CPU_KERNEL(unary_grad),
    [CPU_OP_GATHER] = CPU_KERNEL(gather),
    [CPU_OP_INDEX_SELECT] = CPU_KERNEL(gather),
    [CPU_OP_GATHER_GRAD] = CPU_KERNEL(gather_grad),
    [CPU_OP_INDEX_SELECT_GRAD] = CPU_KERNEL(gather_grad),
    [CPU_OP_ATTENTION_BLOCK] = CPU_KERNEL(attention_block),
    [CPU_OP_ATTENTION_BLOCK_GRAD] = CPU_KERNEL(attention_block_grad),
    [CPU_OP_VOCAB_CE_STATS] = CPU_KERNEL(vocab_ce_stats),
    [CPU_OP_VOCAB_CE] = CPU_KERNEL(vocab_ce),
    [CPU_OP_VOCAB_CE_GRAD] = CPU_KERNEL(vocab_ce_grad),
};

static const struct op_row {
    const char *name;
    int in_min, in_max, out; // out -1: one or more
} op_rows[CPU_OP_COUNT] = {
#define OP(E, name, imin, imax, nout, ann, flags) [CPU_OP_##E] = {#name, imin, imax, nout},
#include "../ops.def"
#undef OP
};

// Operand j (inputs, then outputs) holds int32 ids or labels (compiler/ops.c's int_operand).
static bool int_operand(uint32_t op, uint32_t j) {
    switch (op) {
    case CPU_OP_EMBEDDING: case CPU_OP_EMBEDDING_BAG: return j == 0;
    case CPU_OP_CROSS_ENTROPY: case CPU_OP_EMBEDDING_GRAD: case CPU_OP_EMBEDDING_BAG_GRAD: return j == 1;
    case CPU_OP_CROSS_ENTROPY_GRAD: case CPU_OP_VOCAB_CE_GRAD: return j == 2;
    case CPU_OP_VOCAB_CE_STATS: case CPU_OP_VOCAB_CE: return j == 1;
    case CPU_OP_NE: case CPU_OP_ONE_HOT: return j == 0;
    case CPU_OP_TOPK: return j == 2;          // its indices (output 1)
    case CPU_OP_TOPK_GRAD: return j == 1;
    case CPU_OP_GATHER: case CPU_OP_INDEX_SELECT: case CPU_OP_GATHER_GRAD: case CPU_OP_INDEX_SELECT_GRAD: return j == 1;
    default: return false;
    }
}

static bool moves_data(uint32_t op) {
    return op == CPU_OP_CONCAT || op == CPU_OP_SPLIT || op == CPU_OP_SLICE || op == CPU_OP_SLICE_GRAD ||
           op == CPU_OP_RESHAPE || op == CPU_OP_TRANSPOSE;
}

static const char *dtype_name(uint8_t t) {
    static const char *const names[] = {"f32", "f16", "bf16", "i32"};
    return t < 4 ? names[t] : "an unknown dtype";
}

// One view on its own: rank, sizes, the piece inside its logical tensor, data, dtype.
static int check_view(kctx *c, const rt_view *v, const char *side, uint32_t j, uint32_t operand) {
    if (v->rank > PLAN_MAX_RANK) return cpu_fail(c, "%s %u has rank %d; at most %d", side, j, v->rank, PLAN_MAX_RANK);
    for (int i = 0; i < v->rank; i++)
        if (v->shape[i] < 0 || v->start[i] < 0 || v->start[i] + v->shape[i] > v->full[i])
            return cpu_fail(c, "%s %u: dimension %d holds [%lld, %lld) of a logical size %lld", side, j, i,
                            (long long)v->start[i], (long long)(v->start[i] + v->shape[i]), (long long)v->full[i]);
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++)
        if ((n *= v->shape[i]) > INT_MAX)
            return cpu_fail(c, "%s %u is %s: more than %d elements", side, j, CPU_SHAPE(v), INT_MAX);
    if (n > 0 && !v->data) return cpu_fail(c, "%s %u is %s but has no data", side, j, CPU_SHAPE(v));
    uint8_t want = int_operand(c->k->op, operand) ? CPU_DT_I32 : CPU_DT_REAL;
    if (moves_data(c->k->op)) want = c->in[0].dtype == CPU_DT_I32 ? CPU_DT_I32 : CPU_DT_REAL;
    if (v->dtype != want)
        return cpu_fail(c, "%s %u is %s; the CPU backend wants %s here", side, j, dtype_name(v->dtype), dtype_name(want));
    return 0;
}

static int check_arity(kctx *c) {
    const struct op_row *r = &op_rows[c->k->op];
    bool out_ok = r->out < 0 ? c->nout >= 1 : c->nout == (uint32_t)r->out;
    if (c->nin < (uint32_t)r->in_min || c->nin > (uint32_t)r->in_max || !out_ok)
        return cpu_fail(c, "%u input%s and %u output%s, but it takes %d to %d inputs and %s%d output%s", c->nin,
                        c->nin == 1 ? "" : "s", c->nout, c->nout == 1 ? "" : "s", r->in_min, r->in_max,
                        r->out < 0 ? "at least " : "", r->out < 0 ? 1 : r->out, r->out == 1 || r->out < 0 ? "" : "s");
    if ((c->nin && !c->in) || (c->nout && !c->out)) return cpu_fail(c, "its operand views are missing");
    return 0;
}

int CPU_ENTRY(const rt_kernel *k, char *err, size_t err_n) {
    kctx c = {.k = k, .name = "kernel", .err = err, .err_n = err_n};
    if (err && err_n) err[0] = 0;
    if (!k) return cpu_fail(&c, "no kernel given");
    if (k->op >= CPU_OP_COUNT || !kernels[k->op]) return cpu_fail(&c, "operator %u is not one the CPU backend runs", k->op);
    c = (kctx){.k = k, .a = &k->attrs, .in = k->in, .out = k->out, .nin = k->nin, .nout = k->nout, .name = op_rows[k->op].name,
               .acc = k->accumulate, .err = err, .err_n = err_n};
    if (check_arity(&c)) return -1;
    for (uint32_t j = 0; j < c.nin; j++)
        if (check_view(&c, &c.in[j], "input", j, j)) return -1;
    for (uint32_t j = 0; j < c.nout; j++)
        if (check_view(&c, &c.out[j], "output", j, c.nin + j)) return -1;
    return kernels[k->op](&c);
}

#ifndef RT_REAL_DOUBLE
int64_t rt_view_numel(const rt_view *v) { return cpu_numel(v); }
#endif
