/*
 * gpu_kernels.c: every operator's CUDA kernel against the CPU backend's, ggml's test-backend-ops
 * way: fresh random inputs, the CPU kernel (runtime/cpu/, the reference) and the CUDA backend's
 * (through the backend interface, as the interpreter calls it) on the same values, and the
 * largest difference of each output, as a fraction of the output's largest magnitude, against a
 * per-operator tolerance. Every case runs overwriting and accumulating (`accumulate`), in f32,
 * in f32 with TF32 allowed (products only), and in f16 and bf16 (inputs rounded to the dtype
 * first, so both sides see the same values; the CPU computes in f32).
 *
 *   gpu_kernels             all cases; prints one line per case and "N passed, M failed"
 *   gpu_kernels -v          also the measured errors of the cases that pass
 *   gpu_kernels --op NAME   only the cases of one operator
 *   gpu_kernels --backend cpu   the harness itself, on the CPU backend (no GPU needed): every case
 *                           is valid for the reference kernels and compares bit for bit; the f32
 *                           variants only. CI runs this; the gpu suite runs the default.
 *
 * Tolerances (fraction of max |ref|): exact (0) for data movement, relu, dropout, embeddings,
 * pooling's max, fill; 1e-5 for most f32 operators (expf and summation order differ); products,
 * attention and convolution 1e-4 in f32 (cuBLAS's and cuDNN's orders), 5e-3 with TF32; f16
 * 5e-3 and bf16 3e-2 on top of the operator's own. Dropout's mask must be the CPU's bit for bit.
 *
 * Exits 77 (meson's skip) with a message where this machine has no GPU.
 */
#include "rt.h"
#ifdef PLANCC_HAVE_CUDA
#include "cuda/rt_cuda.h"
#endif
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXOP 16

typedef struct operand {
    int rank;
    int64_t shape[PLAN_MAX_RANK], start[PLAN_MAX_RANK], full[PLAN_MAX_RANK];
    bool is_int, state, not_once;   // int32 ids; f32 optimizer state; `once` false
    double lo, hi;                  // values uniform in [lo, hi) (ints: [lo, hi) too)
} operand;

typedef struct tcase {
    char name[64];
    uint32_t op;
    int nin, nout;
    operand v[MAXOP];               // inputs, then outputs
    plan_attrs attrs;
    double tol;                     // f32 tolerance (0: bit for bit)
    bool product;                   // also run with TF32 (5e-3)
    bool inplace;                   // an optimizer: compare its inputs afterwards
    bool no_acc;                    // the operator has no accumulate form (in place)
    bool no16;                      // no f16/bf16 form
    bool cpu_only;                  // the cuda backend has no kernel (it refuses the operator)
} tcase;

static int verbose;
static const char *only;
static bool on_cpu;                 // --backend cpu: the harness checks itself

/* ---- building cases ---- */

static uint32_t op_code(const char *name) {
    for (uint32_t i = 0; plan_op_name(i); i++)
        if (!strcmp(plan_op_name(i), name)) return i;
    fprintf(stderr, "no operator %s\n", name);
    exit(1);
}

static tcase mk(const char *name, const char *op, double tol) {
    tcase c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", name);
    c.op = op_code(op);
    c.tol = tol;
    return c;
}

static operand *add(tcase *c, bool out, int rank, const int64_t *d) {
    operand *o = &c->v[c->nin + c->nout];
    if (!out && c->nout) { fprintf(stderr, "%s: inputs before outputs\n", c->name); exit(1); }
    memset(o, 0, sizeof *o);
    o->rank = rank;
    for (int i = 0; i < PLAN_MAX_RANK; i++) {
        o->shape[i] = i < rank ? d[i] : 1;
        o->full[i] = o->shape[i];
    }
    o->lo = -1, o->hi = 1;
    if (out) c->nout++;
    else c->nin++;
    return o;
}
#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}
#define IN(c, ...) add(c, false, DIMS(__VA_ARGS__))
#define OUT(c, ...) add(c, true, DIMS(__VA_ARGS__))
#define SCALAR_IN(c) add(c, false, 0, NULL)
#define SCALAR_OUT(c) add(c, true, 0, NULL)

static operand *ids(operand *o, int64_t high) {
    o->is_int = true, o->lo = 0, o->hi = (double)high;
    return o;
}

static tcase cases[256];
static int n_cases;

static void push(tcase c) {
    if (n_cases == (int)(sizeof cases / sizeof *cases)) { fprintf(stderr, "too many cases\n"); exit(1); }
    cases[n_cases++] = c;
}

static void products(void) {
    tcase c = mk("matmul", "matmul", 1e-4);
    IN(&c, 2, 3, 8), IN(&c, 8, 5), OUT(&c, 2, 3, 5), c.product = true, push(c);
    c = mk("bmm", "bmm", 1e-4), IN(&c, 2, 3, 8), IN(&c, 2, 8, 5), OUT(&c, 2, 3, 5), c.product = true, push(c);
    c = mk("linear", "linear", 1e-4), IN(&c, 6, 8), IN(&c, 5, 8), IN(&c, 5), OUT(&c, 6, 5), c.product = true, push(c);
    c = mk("linear, no bias", "linear", 1e-4), IN(&c, 2, 3, 8), IN(&c, 5, 8), OUT(&c, 2, 3, 5), c.product = true, push(c);
    c = mk("linear, bias not once", "linear", 1e-4), IN(&c, 6, 8), IN(&c, 5, 8), IN(&c, 5)->not_once = true, OUT(&c, 6, 5);
    c.product = true, push(c);
    c = mk("matmul_grad_a", "matmul_grad_a", 1e-4), IN(&c, 2, 3, 5), IN(&c, 8, 5), OUT(&c, 2, 3, 8), c.product = true, push(c);
    c = mk("matmul_grad_b", "matmul_grad_b", 1e-4), IN(&c, 2, 3, 8), IN(&c, 2, 3, 5), OUT(&c, 8, 5), c.product = true, push(c);
    c = mk("bmm_grad_a", "bmm_grad_a", 1e-4), IN(&c, 2, 3, 5), IN(&c, 2, 8, 5), OUT(&c, 2, 3, 8), c.product = true, push(c);
    c = mk("bmm_grad_b", "bmm_grad_b", 1e-4), IN(&c, 2, 3, 8), IN(&c, 2, 3, 5), OUT(&c, 2, 8, 5), c.product = true, push(c);
    c = mk("linear_grad_x", "linear_grad_x", 1e-4), IN(&c, 6, 5), IN(&c, 5, 8), OUT(&c, 6, 8), c.product = true, push(c);
    c = mk("linear_grad_w", "linear_grad_w", 1e-4), IN(&c, 6, 5), IN(&c, 6, 8), OUT(&c, 5, 8), c.product = true, push(c);
    for (int causal = 0; causal < 2; causal++) {
        c = mk(causal ? "attention, causal" : "attention", "attention", 1e-4);
        IN(&c, 2, 7, 3, 4), IN(&c, 2, 7, 3, 4), IN(&c, 2, 7, 3, 4), OUT(&c, 2, 7, 3, 4);
        c.attrs.i[PLAN_AI_CAUSAL] = causal, c.product = true, push(c);
        c = mk(causal ? "attention_grad, causal" : "attention_grad", "attention_grad", 1e-4);
        for (int i = 0; i < 4; i++) IN(&c, 2, 7, 3, 4);
        for (int i = 0; i < 3; i++) OUT(&c, 2, 7, 3, 4);
        c.attrs.i[PLAN_AI_CAUSAL] = causal, c.product = true, push(c);
        // dropout of the probabilities: the cuBLAS path's mask kernels, the CPU's mask
        c = mk(causal ? "attention, causal, dropout 0.3" : "attention, dropout 0.3", "attention", 1e-4);
        IN(&c, 2, 7, 3, 4), IN(&c, 2, 7, 3, 4), IN(&c, 2, 7, 3, 4), OUT(&c, 2, 7, 3, 4);
        c.attrs.i[PLAN_AI_CAUSAL] = causal, c.attrs.f[PLAN_AF_P] = 0.3, c.attrs.i[PLAN_AI_SEED] = 6, c.product = true, push(c);
        c = mk(causal ? "attention_grad, causal, dropout 0.3" : "attention_grad, dropout 0.3", "attention_grad", 1e-4);
        for (int i = 0; i < 4; i++) IN(&c, 2, 7, 3, 4);
        for (int i = 0; i < 3; i++) OUT(&c, 2, 7, 3, 4);
        c.attrs.i[PLAN_AI_CAUSAL] = causal, c.attrs.f[PLAN_AF_P] = 0.3, c.attrs.i[PLAN_AI_SEED] = 6, c.product = true, push(c);
    }
    // Long rows: the CUDA softmax keeps 2, 4 or 8 elements a thread in registers up to 2048, and
    // reads the row again beyond.
    static const int64_t lens[] = {300, 700, 1500, 2100};
    for (int i = 0; i < 4; i++) {
        int64_t s = lens[i];
        for (int grad = 0; grad < 2; grad++) {
            char name[64];
            snprintf(name, sizeof name, "%s, s %lld%s", grad ? "attention_grad" : "attention", (long long)s, i % 2 ? "" : ", causal");
            c = mk(name, grad ? "attention_grad" : "attention", 1e-4);
            for (int k = 0; k < 3 + grad; k++) IN(&c, 1, s, 2, 4);
            for (int k = 0; k < (grad ? 3 : 1); k++) OUT(&c, 1, s, 2, 4);
            c.attrs.i[PLAN_AI_CAUSAL] = i % 2 == 0, c.product = true, push(c);
        }
    }
}

// attention in the FlashAttention form (attrs mode 1: attention_flash.cu against
// cpu/attention_flash.c): several tiles each way (s 40, t 70; the kernels' tiles are 16), cross,
// 4 query heads over 2 kv heads, value width 6, a bias [b,s,t], scale 0.5, causal with the
// queries at global 20 (the mask from the views' offsets), dropout 0.2; and self-attention of
// one shape (which the unfused form runs through cuBLAS).
static void flash_cases(void) {
    static const char *const names[] = {"attention", "attention_grad", "attention_grad_bias"};
    for (int op = 0; op < 3; op++)
        for (int drop = 0; drop < 2; drop++) {
            char name[64];
            snprintf(name, sizeof name, "%s, flash, cross, GQA, bias%s", names[op], drop ? ", dropout 0.2" : "");
            tcase c = mk(name, names[op], 1e-4);
            if (op) IN(&c, 2, 40, 4, 6);
            operand *q = IN(&c, 2, 40, 4, 3);
            IN(&c, 2, 70, 2, 3), IN(&c, 2, 70, 2, 6), IN(&c, 2, 40, 70);
            q->start[1] = 20, q->full[1] = 70;
            if (op == 0) OUT(&c, 2, 40, 4, 6);
            if (op == 1) OUT(&c, 2, 40, 4, 3), OUT(&c, 2, 70, 2, 3), OUT(&c, 2, 70, 2, 6);
            if (op == 2) OUT(&c, 2, 40, 70);
            c.attrs.perm[0] = 1, c.attrs.perm[1] = 3, c.attrs.perm[2] = 4, c.attrs.i[PLAN_AI_CAUSAL] = 1, c.attrs.f[PLAN_AF_SCALE] = 0.5;
            c.attrs.i[PLAN_AI_MODE] = PLAN_ATTN_FLASH, c.attrs.f[PLAN_AF_P] = drop ? 0.2 : 0, c.attrs.i[PLAN_AI_SEED] = 8;
            push(c);
        }
    for (int grad = 0; grad < 2; grad++) {
        tcase c = mk(grad ? "attention_grad, flash, s 33, causal" : "attention, flash, s 33, causal", grad ? "attention_grad" : "attention", 1e-4);
        for (int k = 0; k < 3 + grad; k++) IN(&c, 2, 33, 3, 8);
        for (int k = 0; k < (grad ? 3 : 1); k++) OUT(&c, 2, 33, 3, 8);
        c.attrs.i[PLAN_AI_CAUSAL] = 1, c.attrs.i[PLAN_AI_MODE] = PLAN_ATTN_FLASH, c.product = true, push(c);
    }
}

static void elementwise(void) {
    tcase c = mk("add, broadcast", "add", 0);
    IN(&c, 3, 4), IN(&c, 4), OUT(&c, 3, 4), push(c);
    c = mk("add, a not once", "add", 0), IN(&c, 3, 4)->not_once = true, IN(&c, 3, 4), OUT(&c, 3, 4), push(c);
    c = mk("mul, broadcast", "mul", 0), IN(&c, 2, 3, 4), IN(&c, 3, 4), OUT(&c, 2, 3, 4), push(c);
    c = mk("scale", "scale", 0), IN(&c, 50), OUT(&c, 50), c.attrs.f[PLAN_AF_SCALE] = 0.37, push(c);
    static const char *const acts[] = {"relu", "gelu", "silu"};
    for (int i = 0; i < 3; i++) {
        c = mk(acts[i], acts[i], i ? 1e-6 : 0), IN(&c, 300), OUT(&c, 300), c.v[0].lo = -4, c.v[0].hi = 4, push(c);
        char g[32];
        snprintf(g, sizeof g, "%s_grad", acts[i]);
        c = mk(g, g, i ? 1e-6 : 0), IN(&c, 300), IN(&c, 300), OUT(&c, 300), c.v[1].lo = -4, c.v[1].hi = 4, push(c);
    }
    c = mk("fill", "fill", 0), OUT(&c, 7, 3), c.attrs.f[PLAN_AF_SCALE] = 0.125, push(c);
    c = mk("reduce_sum", "reduce_sum", 1e-6), IN(&c, 3, 4, 5), OUT(&c, 4, 5), push(c);
    // Many rows: several chunks of the CUDA kernel's two passes, a last column tile half full.
    c = mk("reduce_sum, 600 rows", "reduce_sum", 1e-5), IN(&c, 3, 200, 70), OUT(&c, 70), push(c);
    c = mk("dropout", "dropout", 0), IN(&c, 3, 8, 16), OUT(&c, 3, 8, 16), c.attrs.f[PLAN_AF_P] = 0.3, c.attrs.i[PLAN_AI_SEED] = 5;
    for (int k = 0; k < 2; k++) c.v[k].start[0] = 1, c.v[k].full[0] = 5, c.v[k].start[2] = 16, c.v[k].full[2] = 48;
    push(c);
    c.op = op_code("dropout_grad"), snprintf(c.name, sizeof c.name, "dropout_grad"), push(c);
    // a sequence in zigzag order (--cp-form zigzag): cp 2's rank 1 holds stored chunks 2 and 3 of
    // 6 along a middle dimension, then along the last; the mask is drawn by logical positions
    for (int zd = 1; zd < 3; zd++) {
        c = mk(zd == 1 ? "dropout, zigzag rows" : "dropout, zigzag columns", "dropout", 0), IN(&c, 3, 8, 16), OUT(&c, 3, 8, 16);
        c.attrs.f[PLAN_AF_P] = 0.3, c.attrs.i[PLAN_AI_SEED] = 5, c.attrs.i[PLAN_AI_AXIS] = zd, c.attrs.i[PLAN_AI_END] = 6;
        for (int k = 0; k < 2; k++) c.v[k].start[zd] = c.v[k].shape[zd], c.v[k].full[zd] = 3 * c.v[k].shape[zd];
        push(c);
        c.op = op_code("dropout_grad"), snprintf(c.name, sizeof c.name, "dropout_grad, zigzag %s", zd == 1 ? "rows" : "columns"), push(c);
    }
}

static void rows(void) {
    tcase c = mk("layernorm", "layernorm", 1e-5);
    c.attrs.f[PLAN_AF_EPS] = 1e-5;
    IN(&c, 4, 2, 40), IN(&c, 40), IN(&c, 40), OUT(&c, 4, 2, 40), push(c);
    tcase r = mk("rmsnorm", "rmsnorm", 1e-5);
    r.attrs.f[PLAN_AF_EPS] = 1e-6, IN(&r, 5, 40), IN(&r, 40), OUT(&r, 5, 40), push(r);
    const char *gx[] = {"layernorm_grad_x", "rmsnorm_grad_x"}, *gw[] = {"layernorm_grad_w", "rmsnorm_grad_w"};
    for (int i = 0; i < 2; i++) {
        c = mk(gx[i], gx[i], 1e-5), c.attrs.f[PLAN_AF_EPS] = 1e-5, IN(&c, 5, 40), IN(&c, 5, 40), IN(&c, 40), OUT(&c, 5, 40), push(c);
        c = mk(gw[i], gw[i], 1e-5), c.attrs.f[PLAN_AF_EPS] = 1e-5, IN(&c, 5, 40), IN(&c, 5, 40), OUT(&c, 40);
        if (!i) OUT(&c, 40);
        push(c);
        char many[48];
        snprintf(many, sizeof many, "%s, 700 rows", gw[i]);
        c = mk(many, gw[i], 1e-5), c.attrs.f[PLAN_AF_EPS] = 1e-5, IN(&c, 700, 40), IN(&c, 700, 40), OUT(&c, 40);
        if (!i) OUT(&c, 40);
        push(c);
    }
    c = mk("softmax", "softmax", 1e-5), IN(&c, 4, 33), OUT(&c, 4, 33), c.v[0].lo = -6, c.v[0].hi = 6, push(c);
    c = mk("softmax_grad", "softmax_grad", 1e-5), IN(&c, 4, 33), IN(&c, 4, 33), OUT(&c, 4, 33), push(c);
}

static void losses(void) {
    tcase c = mk("cross_entropy, a piece of the batch", "cross_entropy", 1e-5);
    IN(&c, 6, 10), ids(IN(&c, 6), 10), SCALAR_OUT(&c);
    c.v[0].full[0] = 12, c.v[0].start[0] = 6, c.v[1].full[0] = 12, c.v[1].start[0] = 6, c.v[0].lo = -5, c.v[0].hi = 5, push(c);
    c = mk("cross_entropy_grad", "cross_entropy_grad", 1e-5), SCALAR_IN(&c), IN(&c, 6, 10), ids(IN(&c, 6), 10), OUT(&c, 6, 10);
    c.v[2].full[0] = 18, push(c);
    c = mk("mse_loss", "mse_loss", 1e-5), IN(&c, 40), IN(&c, 40), SCALAR_OUT(&c), c.v[0].full[0] = c.v[1].full[0] = 80, push(c);
    c = mk("bce_logits", "bce_logits", 1e-5), IN(&c, 40), IN(&c, 40), SCALAR_OUT(&c), c.v[1].lo = 0, push(c);
    c = mk("mse_loss_grad", "mse_loss_grad", 1e-6), SCALAR_IN(&c), IN(&c, 40), IN(&c, 40), OUT(&c, 40), push(c);
    c = mk("bce_logits_grad", "bce_logits_grad", 1e-6), SCALAR_IN(&c), IN(&c, 40), IN(&c, 40), OUT(&c, 40), c.v[2].lo = 0, push(c);
}

static void movement(void) {
    tcase c = mk("concat", "concat", 0);
    IN(&c, 2, 3, 2), IN(&c, 2, 2, 2), OUT(&c, 2, 5, 2), c.attrs.i[PLAN_AI_AXIS] = 1, push(c);
    c = mk("concat, int", "concat", 0), ids(IN(&c, 2, 3), 100), ids(IN(&c, 2, 2), 100), ids(OUT(&c, 2, 5), 100);
    c.attrs.i[PLAN_AI_AXIS] = 1, c.no16 = true, push(c);
    c = mk("split", "split", 0), IN(&c, 2, 5, 2), OUT(&c, 2, 3, 2), OUT(&c, 2, 2, 2), c.attrs.i[PLAN_AI_AXIS] = 1, push(c);
    c = mk("slice", "slice", 0), IN(&c, 4, 6), OUT(&c, 4, 3);
    c.attrs.i[PLAN_AI_AXIS] = 1, c.attrs.i[PLAN_AI_START] = 1, c.attrs.i[PLAN_AI_END] = 4, push(c);
    c = mk("slice_grad", "slice_grad", 0), IN(&c, 4, 3), OUT(&c, 4, 6);
    c.attrs.i[PLAN_AI_AXIS] = 1, c.attrs.i[PLAN_AI_START] = 1, c.attrs.i[PLAN_AI_END] = 4, push(c);
    c = mk("reshape", "reshape", 0), IN(&c, 2, 6), OUT(&c, 3, 4), push(c);
    c = mk("transpose", "transpose", 0), IN(&c, 2, 3, 4), OUT(&c, 4, 2, 3);
    c.attrs.perm[0] = 2, c.attrs.perm[1] = 0, c.attrs.perm[2] = 1, push(c);
}

static void embeddings(void) {
    tcase c = mk("embedding", "embedding", 0);
    ids(IN(&c, 2, 3), 10), IN(&c, 10, 4), OUT(&c, 2, 3, 4), push(c);
    c = mk("embedding, rows 4..7 of 10", "embedding", 0), ids(IN(&c, 2, 3), 10), IN(&c, 3, 4), OUT(&c, 2, 3, 4);
    c.v[1].start[0] = 4, c.v[1].full[0] = 10, push(c);
    c = mk("embedding_grad", "embedding_grad", 1e-6), IN(&c, 2, 6, 4), ids(IN(&c, 2, 6), 5), OUT(&c, 5, 4), push(c);
    c = mk("embedding_grad, rows 4..7 of 10", "embedding_grad", 1e-6), IN(&c, 2, 6, 4), ids(IN(&c, 2, 6), 10), OUT(&c, 3, 4);
    c.v[2].start[0] = 4, c.v[2].full[0] = 10, push(c);
    c = mk("embedding_bag", "embedding_bag", 1e-6), ids(IN(&c, 3, 4), 10), IN(&c, 10, 4), OUT(&c, 3, 4), push(c);
    c = mk("embedding_bag_grad", "embedding_bag_grad", 1e-6), IN(&c, 3, 4), ids(IN(&c, 3, 4), 6), OUT(&c, 6, 4), push(c);
}

static void windows(void) {
    tcase c = mk("conv2d", "conv2d", 1e-4);
    IN(&c, 2, 3, 7, 7), IN(&c, 4, 3, 3, 3), IN(&c, 4), OUT(&c, 2, 4, 4, 4), c.product = true;
    c.attrs.win[2] = c.attrs.win[3] = 2, c.attrs.win[4] = c.attrs.win[5] = 1, push(c);
    tcase g = c;
    g = mk("conv2d_grad_x", "conv2d_grad_x", 1e-4), IN(&g, 2, 4, 4, 4), IN(&g, 4, 3, 3, 3), OUT(&g, 2, 3, 7, 7), g.product = true;
    g.attrs = c.attrs, push(g);
    g = mk("conv2d_grad_w", "conv2d_grad_w", 1e-4), IN(&g, 2, 4, 4, 4), IN(&g, 2, 3, 7, 7), OUT(&g, 4, 3, 3, 3), g.product = true;
    g.attrs = c.attrs, push(g);
    g = mk("conv2d_grad_b", "conv2d_grad_b", 1e-5), IN(&g, 2, 4, 4, 4), OUT(&g, 4), push(g);
    static const char *const pools[] = {"maxpool", "avgpool"};
    for (int i = 0; i < 2; i++) {
        c = mk(pools[i], pools[i], i ? 1e-6 : 0), IN(&c, 2, 3, 6, 6), OUT(&c, 2, 3, 3, 3);
        c.attrs.win[0] = c.attrs.win[1] = 3, c.attrs.win[2] = c.attrs.win[3] = 2, c.attrs.win[4] = c.attrs.win[5] = 1, push(c);
    }
    g = mk("maxpool_grad", "maxpool_grad", 0), IN(&g, 2, 3, 3, 3), IN(&g, 2, 3, 6, 6), OUT(&g, 2, 3, 6, 6), g.attrs = c.attrs, push(g);
    g = mk("avgpool_grad", "avgpool_grad", 1e-6), IN(&g, 2, 3, 3, 3), OUT(&g, 2, 3, 6, 6), g.attrs = c.attrs, push(g);
    c = mk("batchnorm", "batchnorm", 1e-5), IN(&c, 4, 3, 2, 5), IN(&c, 3), IN(&c, 3), OUT(&c, 4, 3, 2, 5);
    c.attrs.f[PLAN_AF_EPS] = 1e-5, push(c);
    g = mk("batchnorm_grad_x", "batchnorm_grad_x", 1e-5), IN(&g, 4, 3, 2, 5), IN(&g, 4, 3, 2, 5), IN(&g, 3), OUT(&g, 4, 3, 2, 5);
    g.attrs = c.attrs, push(g);
    g = mk("batchnorm_grad_w", "batchnorm_grad_w", 1e-5), IN(&g, 4, 3, 2, 5), IN(&g, 4, 3, 2, 5), OUT(&g, 3), OUT(&g, 3);
    g.attrs = c.attrs, push(g);
    // ghost batch norm: statistics per group of 2 of the 6 samples
    c = mk("batchnorm, ghost 2", "batchnorm", 1e-5), IN(&c, 6, 3, 2, 5), IN(&c, 3), IN(&c, 3), OUT(&c, 6, 3, 2, 5);
    c.attrs.f[PLAN_AF_EPS] = 1e-5, c.attrs.i[PLAN_AI_GHOST] = 2, push(c);
    g = mk("batchnorm_grad_x, ghost 2", "batchnorm_grad_x", 1e-5), IN(&g, 6, 3, 2, 5), IN(&g, 6, 3, 2, 5), IN(&g, 3), OUT(&g, 6, 3, 2, 5);
    g.attrs = c.attrs, push(g);
    g = mk("batchnorm_grad_w, ghost 2", "batchnorm_grad_w", 1e-5), IN(&g, 6, 3, 2, 5), IN(&g, 6, 3, 2, 5), OUT(&g, 3), OUT(&g, 3);
    g.attrs = c.attrs, push(g);
}

static void optimizers(void) {
    for (int master = 0; master < 2; master++)
        for (int mom = 0; mom < 2; mom++) {
            char name[64];
            snprintf(name, sizeof name, "sgd%s%s", mom ? ", momentum" : "", master ? ", master" : "");
            tcase c = mk(name, "sgd", 1e-6);
            IN(&c, 50), IN(&c, 50);
            if (mom) IN(&c, 50)->state = true;
            if (master) IN(&c, 50)->state = true;
            c.attrs.f[PLAN_AF_LR] = 0.1, c.attrs.f[PLAN_AF_WEIGHT_DECAY] = 0.01, c.attrs.f[PLAN_AF_MOMENTUM] = mom ? 0.9 : 0;
            c.inplace = c.no_acc = true, c.no16 = !master, push(c);
        }
    for (int master = 0; master < 2; master++) {
        tcase c = mk(master ? "adamw, master" : "adamw", "adamw", 1e-6);
        IN(&c, 50), IN(&c, 50), IN(&c, 50)->state = true, IN(&c, 50)->state = true;
        c.v[3].lo = 0; // v >= 0
        if (master) IN(&c, 50)->state = true;
        c.attrs.f[PLAN_AF_LR] = 1e-3, c.attrs.f[PLAN_AF_BETA1] = 0.9, c.attrs.f[PLAN_AF_BETA2] = 0.999, c.attrs.f[PLAN_AF_EPS] = 1e-8;
        c.attrs.f[PLAN_AF_WEIGHT_DECAY] = 0.1, c.inplace = c.no_acc = true, c.no16 = !master, push(c);
    }
}

/* ---- 16-bit floats on the host ---- */

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)(u >> 16 | 0x40);
    u += 0x7fff + ((u >> 16) & 1); // round to nearest even
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, exp = (u >> 23) & 0xff, man = u & 0x7fffff;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) { // subnormal or zero
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000;
        int shift = 14 - e;
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)(sign | half);
}

static float from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (!man) u = sign;
        else {
            int e = -1;
            do man <<= 1, e++; while (!(man & 0x400));
            u = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) u = sign | 0x7f800000 | man << 13;
    else u = sign | (exp + 127 - 15) << 23 | man << 13;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float round_to(float f, int dt) { return dt == 2 ? from_bf16(to_bf16(f)) : dt == 1 ? from_f16(to_f16(f)) : f; }

/* ---- running a case ---- */

static int64_t numel(const operand *o) {
    int64_t n = 1;
    for (int i = 0; i < o->rank; i++) n *= o->shape[i];
    return n;
}

typedef struct buf {
    float *f;                       // float values (the CPU's and the reference's)
    int32_t *i;                     // ids
    int dt;                         // the GPU's dtype of this operand
    uint64_t off, bytes;            // in the GPU arena
} buf;

static void fill(const operand *o, buf *b, uint64_t key, int dt) {
    int64_t n = numel(o);
    for (int64_t j = 0; j < n; j++) {
        double u = rt_uniform(rt_key(key, (uint64_t)j));
        if (o->is_int) b->i[j] = (int32_t)(o->lo + floor(u * (o->hi - o->lo)));
        else b->f[j] = round_to((float)(o->lo + u * (o->hi - o->lo)), dt);
    }
}

static void view_of(const operand *o, rt_view *v, void *data, int dt) {
    memset(v, 0, sizeof *v);
    v->data = data, v->dtype = (uint8_t)dt, v->rank = (uint8_t)o->rank, v->once = !o->not_once;
    for (int i = 0; i < PLAN_MAX_RANK; i++) v->shape[i] = o->shape[i], v->start[i] = o->start[i], v->full[i] = o->full[i];
}

static void to_device_bytes(const buf *b, int64_t n, void *host) {
    if (b->i) memcpy(host, b->i, (size_t)n * 4);
    else if (b->dt == 0) memcpy(host, b->f, (size_t)n * 4);
    else
        for (int64_t j = 0; j < n; j++) ((uint16_t *)host)[j] = b->dt == 2 ? to_bf16(b->f[j]) : to_f16(b->f[j]);
}

static void from_device_bytes(buf *b, int64_t n, const void *host, float *out) {
    if (b->i) for (int64_t j = 0; j < n; j++) out[j] = (float)((const int32_t *)host)[j];
    else if (b->dt == 0) memcpy(out, host, (size_t)n * 4);
    else
        for (int64_t j = 0; j < n; j++) {
            uint16_t h = ((const uint16_t *)host)[j];
            out[j] = b->dt == 2 ? from_bf16(h) : from_f16(h);
        }
}

// Largest |x - ref| over max(max |ref|, 1e-6); *bits: whether every element is identical.
static double rel_err(const float *x, const float *ref, int64_t n, bool *bits) {
    double worst = 0, big = 1e-6;
    *bits = true;
    for (int64_t j = 0; j < n; j++) {
        double d = fabs((double)x[j] - ref[j]);
        if (d > worst || isnan(x[j])) worst = isnan(x[j]) ? INFINITY : d;
        if (fabs(ref[j]) > big) big = fabs(ref[j]);
        if (memcmp(&x[j], &ref[j], 4)) *bits = false;
    }
    return worst / big;
}

typedef struct variant {
    const char *name;
    int dt;                         // 0 f32, 1 f16, 2 bf16
    bool tf32, acc;
} variant;

// Runs case c in variant w on backend b; 0 when within tolerance.
static int run_case(rt_backend *b, const tcase *c, const variant *w, int seq) {
    int n = c->nin + c->nout, rc = 0;
    buf bufs[MAXOP];
    memset(bufs, 0, sizeof bufs);
    uint64_t total = 0;
    for (int j = 0; j < n; j++) {
        const operand *o = &c->v[j];
        int64_t k = numel(o);
        bufs[j].dt = o->is_int ? 3 : o->state ? 0 : w->dt;
        bufs[j].f = calloc((size_t)(k ? k : 1), sizeof(float));
        if (o->is_int) bufs[j].i = calloc((size_t)(k ? k : 1), sizeof(int32_t));
        bufs[j].off = total;
        bufs[j].bytes = (uint64_t)k * (bufs[j].dt == 1 || bufs[j].dt == 2 ? 2 : 4);
        total += (bufs[j].bytes + 255) / 256 * 256;
        if (j < c->nin || w->acc) fill(o, &bufs[j], rt_key(rt_key(7, (uint64_t)seq), (uint64_t)j), bufs[j].dt);
    }
    char err[1024] = "";
    uint8_t *arena = rt_backend_arena_alloc(b, 0, total ? total : 256, err, sizeof err);
    void *host = malloc((size_t)(total ? total : 256));
    rt_view cv[MAXOP], gv[MAXOP];
    float *got = NULL;
    if (!arena || !host) {
        printf("FAIL %s [%s]: %s\n", c->name, w->name, arena ? "out of memory" : err);
        rc = -1;
        goto done;
    }
    for (int j = 0; j < n; j++) {
        view_of(&c->v[j], &cv[j], bufs[j].i ? (void *)bufs[j].i : (void *)bufs[j].f, bufs[j].i ? 3 : 0);
        view_of(&c->v[j], &gv[j], arena + bufs[j].off, bufs[j].dt);
        to_device_bytes(&bufs[j], numel(&c->v[j]), host);
        if (rt_backend_upload(b, 0, arena + bufs[j].off, host, bufs[j].bytes, err, sizeof err)) break;
    }
    rt_kernel kc = {.op = c->op, .attrs = c->attrs, .nin = (uint32_t)c->nin, .nout = (uint32_t)c->nout, .in = cv, .out = cv + c->nin,
                    .accumulate = w->acc, .seed = 11, .step = 3, .mb = 1, .layer = 2};
    rt_kernel kg = kc;
    kg.in = gv, kg.out = gv + c->nin;
    kg.attrs.i[PLAN_AI_ACCUMULATE] = kc.attrs.i[PLAN_AI_ACCUMULATE] = w->acc;
    rt_exec x = {0, 0, 0};
    rt_backend_step_begin(b, 1);
    int gpu = rt_backend_kernel(b, &x, &kg, err, sizeof err);
    int end = rt_backend_step_end(b, err + strlen(err), sizeof err - strlen(err));
    char cerr[512] = "";
    int cpu = rt_cpu_kernel(&kc, cerr, sizeof cerr);
    if (gpu || end || cpu) {
        printf("FAIL %s [%s]: gpu %s%s cpu %s\n", c->name, w->name, gpu || end ? err : "ok", end ? "" : "", cpu ? cerr : "ok");
        rc = -1;
        goto done;
    }
    double tol = c->tol;
    if (w->tf32) tol = tol > 5e-3 ? tol : 5e-3;
    if (w->dt == 1) tol = tol > 5e-3 ? tol : 5e-3;
    if (w->dt == 2) tol = tol > 3e-2 ? tol : 3e-2;
    bool exact = tol == 0;
    int from = c->inplace ? 0 : c->nin, to = c->inplace ? c->nin : n;
    for (int j = from; j < to && !rc; j++) {
        int64_t k = numel(&c->v[j]);
        got = realloc(got, (size_t)(k ? k : 1) * sizeof *got);
        if (rt_backend_download(b, 0, host, arena + bufs[j].off, bufs[j].bytes, err, sizeof err)) {
            printf("FAIL %s [%s]: download: %s\n", c->name, w->name, err);
            rc = -1;
            break;
        }
        from_device_bytes(&bufs[j], k, host, got);
        float *ref = bufs[j].f;
        if (bufs[j].i) for (int64_t q = 0; q < k; q++) ref[q] = (float)bufs[j].i[q];
        else if (bufs[j].dt) for (int64_t q = 0; q < k; q++) ref[q] = round_to(ref[q], bufs[j].dt); // the GPU stores the dtype
        bool bits;
        double e = rel_err(got, ref, k, &bits);
        bool ok = exact || on_cpu ? bits || (w->dt && e == 0) : e <= tol;
        if (!ok || verbose)
            printf("%s %s [%s] %s %d: error %.3g of max |ref| (tolerance %g%s)\n", ok ? "ok  " : "FAIL", c->name, w->name,
                   j < c->nin ? "input" : "output", j < c->nin ? j : j - c->nin, e, tol, exact ? ", bit for bit" : "");
        if (!ok) rc = -1;
    }
done:
    rt_backend_arena_free(b, 0, arena);
    free(host), free(got);
    for (int j = 0; j < n; j++) free(bufs[j].f), free(bufs[j].i);
    return rc;
}

/* ---- a backend for a plan of one rank ---- */

#ifdef PLANCC_HAVE_CUDA
static rt_backend *backend(int device, bool tf32, plan *p, plan_program *pg, plan_rank *rk, rt_cuda_config *cfg) {
    memset(p, 0, sizeof *p), memset(pg, 0, sizeof *pg), memset(rk, 0, sizeof *rk);
    pg->n_streams = 1, pg->name = "test";
    p->meta.world = 1, p->programs = pg, p->n_programs = 1, p->ranks = rk, p->n_ranks = 1, p->meta.loss = PLAN_NONE;
    *cfg = (rt_cuda_config){.device = device, .rank = 0, .world = 1, .tf32 = tf32};
    rt_options o = {.backend = "cuda", .one_rank = true, .rank = 0, .timeout_s = 60, .backend_config = cfg};
    char err[1024];
    rt_backend *b = rt_backend_cuda_init(p, &o, err, sizeof err);
    if (!b) printf("FAIL cannot start the cuda backend: %s\n", err);
    return b;
}
#endif

static void run_all(rt_backend *b, rt_backend *b32) {
    static const variant variants[] = {{"f32", 0, false, false}, {"f32, accumulate", 0, false, true}, {"tf32", 0, true, false},
                                       {"f16", 1, false, false}, {"bf16", 2, false, false}, {"bf16, accumulate", 2, false, true}};
    bool seen[256] = {false};
    for (int i = 0; i < n_cases; i++) {
        const tcase *c = &cases[i];
        if (only && strcmp(plan_op_name(c->op), only)) continue;
        seen[c->op < 256 ? c->op : 0] = true;
        if (c->cpu_only && !on_cpu) continue;
        for (size_t v = 0; v < sizeof variants / sizeof *variants; v++) {
            const variant *w = &variants[v];
            if ((w->tf32 && !c->product) || (w->acc && c->no_acc) || (w->dt && c->no16)) continue;
            if (on_cpu && (w->tf32 || w->dt)) continue; // the CPU backend runs f32 only
            int ok = run_case(w->tf32 ? b32 : b, c, w, i * 16 + (int)v) == 0;
            EXPECT(ok);
        }
    }
    if (!only) // every operator of runtime/ops.def has a case
        for (uint32_t op = 0; plan_op_name(op); op++)
            if (!seen[op]) printf("FAIL operator %s has no case\n", plan_op_name(op)), fails++;
}

// The operators of imported models (runtime/ops.def's last section; runtime/cuda/ops_ext.c): the
// unary math on a domain where each is smooth, broadcasts and reductions through an axis map
// (attrs perm), ne and one_hot (one_hot on a piece of its class axis), cross_entropy ignoring a
// label and summing.
static void imported(void) {
    static const char *const un[] = {"sigmoid", "tanh", "exp", "log", "gelu_erf", "rsqrt", "sqrt", "sin", "cos", "pow", "erf"};
    for (int i = 0; i < 11; i++) {
        bool pos = i == 3 || i == 5 || i == 6 || i == 9;
        tcase c = mk(un[i], un[i], 1e-5);
        IN(&c, 5, 40), OUT(&c, 5, 40), c.attrs.f[PLAN_AF_SCALE] = 1.5;
        c.v[0].lo = pos ? 0.5 : -3, c.v[0].hi = pos ? 2 : 3, push(c);
        char g[32];
        snprintf(g, sizeof g, "%s_grad", un[i]);
        c = mk(g, g, 1e-5), IN(&c, 5, 40), IN(&c, 5, 40), OUT(&c, 5, 40), c.attrs.f[PLAN_AF_SCALE] = 1.5;
        c.v[1].lo = pos ? 0.5 : -3, c.v[1].hi = pos ? 2 : 3, push(c);
    }
    static const char *const bin[] = {"add", "mul", "sub", "div", "masked_fill"};
    for (int i = 0; i < 5; i++) {
        char name[48];
        snprintf(name, sizeof name, "%s, axis map", bin[i]);
        tcase c = mk(name, bin[i], 1e-6);
        IN(&c, 3, 4, 5), IN(&c, 3, 5), OUT(&c, 3, 4, 5), c.attrs.perm[0] = 1, c.attrs.perm[1] = 3, c.attrs.f[PLAN_AF_SCALE] = -2;
        if (i == 3) c.v[1].lo = 0.5, c.v[1].hi = 2;
        push(c);
    }
    static const char *const red[] = {"sum", "mean", "max", "reduce_sum"};
    for (int i = 0; i < 4; i++) {
        char name[48];
        snprintf(name, sizeof name, "%s, axes 0 and 2", red[i]);
        tcase c = mk(name, red[i], 1e-5);
        IN(&c, 3, 4, 5), OUT(&c, 4), c.attrs.perm[0] = 2, c.v[0].full[0] = 6, push(c);
    }
    tcase c = mk("expand", "expand", 0);
    IN(&c, 4), OUT(&c, 3, 4, 5), c.attrs.perm[0] = 2, push(c);
    c = mk("max_grad", "max_grad", 0), IN(&c, 4), IN(&c, 3, 4, 5), OUT(&c, 3, 4, 5), c.attrs.perm[0] = 2, push(c);
    c = mk("ne", "ne", 0), ids(IN(&c, 4, 6), 5), OUT(&c, 4, 6), c.attrs.f[PLAN_AF_SCALE] = 2, push(c);
    c = mk("one_hot, classes 2..5 of 7", "one_hot", 0), ids(IN(&c, 4, 6), 7), OUT(&c, 4, 6, 3);
    c.v[1].start[2] = 2, c.v[1].full[2] = 7, push(c);
    c = mk("topk, k 2 of 9", "topk", 0), IN(&c, 5, 9), OUT(&c, 5, 2), ids(OUT(&c, 5, 2), 9), push(c);
    // ring attention's steps (CPU only): step 1 of a ring, causal, 4 query heads over 2 kv heads
    c = mk("attention_block, step 1, GQA", "attention_block", 1e-4);
    IN(&c, 2, 4, 4, 3), IN(&c, 2, 4, 2, 3), IN(&c, 2, 4, 2, 5), IN(&c, 2, 4, 2, 3), IN(&c, 2, 4, 2, 5), IN(&c, 2, 4, 4, 5), IN(&c, 2, 4, 4);
    OUT(&c, 2, 4, 4, 5), OUT(&c, 2, 4, 4);
    c.attrs.i[PLAN_AI_START] = 1, c.attrs.i[PLAN_AI_CAUSAL] = 1, c.cpu_only = c.no_acc = c.no16 = true, push(c);
    c = mk("attention_block_grad, step 1, GQA", "attention_block_grad", 1e-4);
    IN(&c, 2, 4, 4, 5), IN(&c, 2, 4, 4, 3), IN(&c, 2, 4, 2, 3), IN(&c, 2, 4, 2, 5), IN(&c, 2, 4, 4, 5), IN(&c, 2, 4, 4);
    IN(&c, 2, 4, 2, 3), IN(&c, 2, 4, 2, 5), IN(&c, 2, 4, 4, 3), IN(&c, 2, 4, 2, 3), IN(&c, 2, 4, 2, 5);
    OUT(&c, 2, 4, 4, 3), OUT(&c, 2, 4, 2, 3), OUT(&c, 2, 4, 2, 5);
    c.attrs.i[PLAN_AI_START] = 1, c.attrs.i[PLAN_AI_CAUSAL] = 1, c.cpu_only = c.no_acc = c.no16 = true, push(c);
    c = mk("topk_grad", "topk_grad", 0), IN(&c, 5, 2), ids(IN(&c, 5, 2), 9), OUT(&c, 5, 9), push(c);
    // attention's general form: cross (s 5, t 7), 4 query heads over 2 kv heads, value width 6, a
    // bias [n,s,t] (perm 2,3,4), causal, scale 0.5; the gradients and the bias's
    for (int op = 0; op < 3; op++) {
        static const char *const names[] = {"attention", "attention_grad", "attention_grad_bias"};
        char name[64];
        snprintf(name, sizeof name, "%s, cross, GQA, bias", names[op]);
        c = mk(name, names[op], 1e-4);
        if (op) IN(&c, 2, 5, 4, 6);
        IN(&c, 2, 5, 4, 3), IN(&c, 2, 7, 2, 3), IN(&c, 2, 7, 2, 6), IN(&c, 4, 5, 7);
        if (op == 0) OUT(&c, 2, 5, 4, 6);
        if (op == 1) OUT(&c, 2, 5, 4, 3), OUT(&c, 2, 7, 2, 3), OUT(&c, 2, 7, 2, 6);
        if (op == 2) OUT(&c, 4, 5, 7);
        c.attrs.perm[0] = 2, c.attrs.perm[1] = 3, c.attrs.perm[2] = 4, c.attrs.i[PLAN_AI_CAUSAL] = 1, c.attrs.f[PLAN_AF_SCALE] = 0.5;
        push(c);
        snprintf(name, sizeof name, "%s, cross, GQA, bias, dropout 0.2", names[op]); // the general kernels' mask
        snprintf(c.name, sizeof c.name, "%s", name), c.attrs.f[PLAN_AF_P] = 0.2, c.attrs.i[PLAN_AI_SEED] = 8, push(c);
    }
    flash_cases();
    c = mk("gather, axis 1", "gather", 0), IN(&c, 2, 5, 3), ids(IN(&c, 2, 4, 3), 5), OUT(&c, 2, 4, 3), c.attrs.i[PLAN_AI_AXIS] = 1, push(c);
    c = mk("index_select, axis 1", "index_select", 0), IN(&c, 2, 5, 3), ids(IN(&c, 4), 5), OUT(&c, 2, 4, 3), c.attrs.i[PLAN_AI_AXIS] = 1, push(c);
    c = mk("gather_grad", "gather_grad", 1e-6), IN(&c, 2, 4, 3), ids(IN(&c, 2, 4, 3), 5), OUT(&c, 2, 5, 3), c.attrs.i[PLAN_AI_AXIS] = 1;
    c.no16 = true, push(c);
    c = mk("index_select_grad", "index_select_grad", 1e-6), IN(&c, 2, 4, 3), ids(IN(&c, 4), 5), OUT(&c, 2, 5, 3);
    c.attrs.i[PLAN_AI_AXIS] = 1, c.no16 = true, push(c);
    c = mk("cross_entropy, ignore_index 3, sum", "cross_entropy", 1e-5);
    IN(&c, 6, 10), ids(IN(&c, 6), 10), SCALAR_OUT(&c), c.attrs.f[PLAN_AF_SCALE] = 3, c.attrs.i[PLAN_AI_MODE] = 3, push(c);
    c = mk("cross_entropy_grad, ignore_index 3", "cross_entropy_grad", 1e-5), SCALAR_IN(&c), IN(&c, 6, 10), ids(IN(&c, 6), 10);
    OUT(&c, 6, 10), c.attrs.f[PLAN_AF_SCALE] = 3, c.attrs.i[PLAN_AI_MODE] = 1, push(c);
    // vocabulary-parallel cross_entropy (compiler/vocab.c): classes 3..6 of 10 on this rank, the
    // statistics of 2 pieces (each row's max, a positive sum of exponentials, a logit), in f32
    // whatever the logits' dtype, as the plans keep them (operand `state`: f32 in every variant)
    c = mk("vocab_ce_stats, classes 3..6 of 10", "vocab_ce_stats", 1e-5), IN(&c, 6, 4), ids(IN(&c, 6), 10), OUT(&c, 18)->state = true;
    c.v[0].start[1] = 3, c.v[0].full[1] = 10, c.no_acc = true, push(c);
    c = mk("vocab_ce, 2 pieces, ignore_index 3", "vocab_ce", 1e-5), IN(&c, 36)->state = true, ids(IN(&c, 6), 10), SCALAR_OUT(&c);
    c.v[0].lo = 0.5, c.v[0].hi = 2, c.attrs.f[PLAN_AF_SCALE] = 3, c.attrs.i[PLAN_AI_MODE] = 1, push(c);
    c = mk("vocab_ce_grad, classes 3..6 of 10", "vocab_ce_grad", 1e-5), SCALAR_IN(&c), IN(&c, 6, 4), ids(IN(&c, 6), 10);
    IN(&c, 36)->state = true, OUT(&c, 6, 4), c.v[1].start[1] = c.v[4].start[1] = 3, c.v[1].full[1] = c.v[4].full[1] = 10;
    c.v[3].lo = 0.5, c.v[3].hi = 2, c.attrs.f[PLAN_AF_SCALE] = 3, c.attrs.i[PLAN_AI_MODE] = 1, push(c);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) verbose = 1;
        else if (!strcmp(argv[i], "--op") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc && !strcmp(argv[i + 1], "cpu")) on_cpu = true, i++;
        else { fprintf(stderr, "usage: gpu_kernels [-v] [--op NAME] [--backend cpu]\n"); return 2; }
    }
    products(), elementwise(), rows(), losses(), movement(), embeddings(), windows(), optimizers(), imported();
    char err[1024];
    if (on_cpu) {
        rt_backend *b = rt_backend_cpu_init(1, 1, 1, 60, 0, err, sizeof err);
        if (!b) return printf("FAIL %s\n", err), 1;
        run_all(b, b);
        rt_backend_free(b);
        return test_summary();
    }
#ifdef PLANCC_HAVE_CUDA
    rt_cuda_device dev;
    if (rt_cuda_device_open(0, &dev, err, sizeof err)) {
        printf("SKIP: the gpu suite needs a GPU: %s\n", err);
        return 77;
    }
    printf("GPU %d: %s (sm_%d%d)\n", dev.ordinal, dev.name, dev.cc_major, dev.cc_minor);
    plan p, p32;
    plan_program pg, pg32;
    plan_rank rk, rk32;
    rt_cuda_config cfg, cfg32;
    rt_backend *b = backend(dev.ordinal, false, &p, &pg, &rk, &cfg), *b32 = backend(dev.ordinal, true, &p32, &pg32, &rk32, &cfg32);
    if (!b || !b32) return 1;
    run_all(b, b32);
    rt_backend_free(b);
    rt_backend_free(b32);
    return test_summary();
#else
    printf("SKIP: this build has no cuda backend\n");
    return 77;
#endif
}
