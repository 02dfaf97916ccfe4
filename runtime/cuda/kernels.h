/*
 * kernels.h: the CUDA backend's own kernels, as C-callable launchers (kernels.cu, kernels_nn.cu);
 * private to runtime/cuda/. Read by C (ops.c, nccl.c) and by nvcc, so it holds only C types.
 *
 * Conventions:
 *   - dtypes are the plan's codes: 0 f32, 1 f16, 2 bf16, 3 i32. A float operand of any of the
 *     three float dtypes is loaded as float and stored back in its own dtype (one kernel per
 *     operation, a uniform switch per load; no templates, so nvcc builds each kernel once per
 *     GPU architecture). Arithmetic is float, with double for the row reductions that the CPU
 *     kernels accumulate in double;
 *   - `acc` (the plan's accumulate attribute): add into the output instead of overwriting it;
 *   - every launcher enqueues on `stream` and returns cudaGetLastError() (cudaSuccess, or the
 *     launch's error), which the caller checks with CUDA_CHECK;
 *   - kernels that meet bad data (an id or label outside its range) do not stop: they treat it
 *     as zero and set *flag (device memory) to a nonzero code, which the backend reads at the
 *     end of the step (CK_FLAG_*);
 *   - every sum is deterministic (a fixed order per output element) except the embedding
 *     gradients, which add with atomics.
 */
#ifndef RT_CUDA_KERNELS_H
#define RT_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CK_MAX_RANK 8

enum { CK_F32 = 0, CK_F16 = 1, CK_BF16 = 2, CK_I32 = 3 };

// Codes a kernel leaves in the flag word (the first one wins).
enum { CK_FLAG_NONE = 0, CK_FLAG_EMBEDDING_ID = 1, CK_FLAG_BAG_ID = 2, CK_FLAG_LABEL = 3 };

// A piece of a logical tensor (rt.h's rt_box): local sizes, where it starts, logical sizes.
typedef struct ck_box {
    int rank;
    int64_t start[CK_MAX_RANK], shape[CK_MAX_RANK], full[CK_MAX_RANK];
} ck_box;

/* ---- element-wise (kernels.cu) ---- */

typedef enum ck_ew_op {
    CK_EW_ADD,          // y = (ua ? a[i] : 0) + (ub ? b[bi] : 0)
    CK_EW_MUL,          // y = a[i] b[bi]
    CK_EW_SCALE,        // y = s a[i]
    CK_EW_RELU, CK_EW_GELU, CK_EW_SILU,                 // y = f(a[i])
    CK_EW_RELU_GRAD, CK_EW_GELU_GRAD, CK_EW_SILU_GRAD,  // y = a[i] f'(b[i])  (a = dy, b = x)
    CK_EW_FILL,         // y = s
    CK_EW_MSE_GRAD,     // y = 2 k (a[i] - b[i]),        k = *kptr / count
    CK_EW_BCE_GRAD,     // y = k (sigmoid(a[i]) - b[i]), k = *kptr / count
    CK_EW_CONVERT,      // y = a[i] (between float dtypes)
} ck_ew_op;

// Broadcast of b: bi = (i / b_inner) % b_n (b_inner 1: b repeats over a's leading dimensions,
// add's and mul's suffix rule; b_inner h w: a per-channel bias of [n,c,h,w]).
typedef struct ck_ew_args {
    ck_ew_op op;
    int64_t n;                      // elements of y
    void *y; int ydt;
    const void *a; int adt; bool ua;
    const void *b; int bdt; bool ub;
    int64_t b_n, b_inner;
    float s;                        // scale, fill value
    const void *kptr; int kdt;      // the loss gradient's seed (a device scalar)
    double count;
    bool acc;
} ck_ew_args;
cudaError_t ck_ew(cudaStream_t st, const ck_ew_args *a);

// Dropout and its gradient: y = x / (1 - p) where rt_uniform(rt_key(key, g)) >= p, else 0; g is
// the element's row-major index in the logical tensor described by box (x's local piece), its
// index along dimension zdim the logical position (plan_zigzag_pos) of the stored one where that
// dimension is in zigzag order of z chunks (z >= 2, dividing box->full[zdim]; 0: natural order).
cudaError_t ck_dropout(cudaStream_t st, void *y, int ydt, const void *x, int xdt, const ck_box *box, int zdim, uint32_t z,
                       uint64_t key, double p, float keep, bool acc);

/* ---- rows: norms, softmax, cross-entropy (kernels.cu); one block per row of h ---- */

// layernorm (center) or rmsnorm: y = (x - mean) rstd g (+ b).
cudaError_t ck_norm(cudaStream_t st, int64_t rows, int64_t h, const void *x, int xdt, const void *g, int gdt, const void *b,
                    int bdt, void *y, int ydt, double eps, bool center, bool acc);
// dx = rstd (g dy - mean(g dy) - xhat mean(g dy xhat)) (rmsnorm: no middle term).
cudaError_t ck_norm_grad_x(cudaStream_t st, int64_t rows, int64_t h, const void *dy, int dydt, const void *x, int xdt,
                           const void *g, int gdt, void *dx, int dxdt, double eps, bool center, bool acc);
// Per row: mean (0 unless center) and rstd, as doubles.
cudaError_t ck_row_stats(cudaStream_t st, int64_t rows, int64_t h, const void *x, int xdt, double eps, bool center,
                         double *mean, double *rstd);
// Column sums (ck_norm_grad_w, ck_sum_leading) run in two passes through `part`, device scratch
// of ck_col_chunks(rows, cols) * cols doubles (twice that for ck_norm_grad_w), in double, in a
// fixed order that depends on the shape alone.
int64_t ck_col_chunks(int64_t rows, int64_t cols);
// dg[j] = sum_r dy xhat (and db[j] = sum_r dy when db), over the rows.
cudaError_t ck_norm_grad_w(cudaStream_t st, int64_t rows, int64_t h, const void *dy, int dydt, const void *x, int xdt,
                           const double *mean, const double *rstd, double *part, void *dg, int dgdt, void *db, int dbdt, bool acc);
// softmax over rows; softmax_grad dx = y (dy - sum(dy y)).
cudaError_t ck_softmax(cudaStream_t st, int64_t rows, int64_t n, const void *x, int xdt, void *y, int ydt, bool acc);
cudaError_t ck_softmax_grad(cudaStream_t st, int64_t rows, int64_t n, const void *dy, int dydt, const void *y, int ydt,
                            void *dx, int dxdt, bool acc);
// Per row r: lse(x_r) - x_r[label_r] into out[r] (double); a row labelled `ignore` (CK_NO_IGNORE:
// none) counts 0; a label outside [0, v) counts 0 and sets the flag.
#define CK_NO_IGNORE INT64_MIN
cudaError_t ck_ce_rows(cudaStream_t st, int64_t rows, int64_t v, const void *x, int xdt, const int32_t *labels, int64_t ignore,
                       double *out, int *flag);
// dx = (*dy / count) (softmax(x) - onehot(label)); 0 on a row labelled `ignore`.
cudaError_t ck_ce_grad(cudaStream_t st, int64_t rows, int64_t v, const void *dy, int dydt, double count, const void *x,
                       int xdt, const int32_t *labels, int64_t ignore, void *dx, int dxdt, bool acc, int *flag);
// Vocabulary-parallel cross_entropy (runtime/ops.def's vocab_ce rows): a piece's stats per row
// (max, sum of exp(x - max), the label's logit where lo <= label < lo + v; flag on a label
// outside [0, vfull)); per row the loss from k pieces' stats (ignored rows 0); the piece's gradient.
cudaError_t ck_vce_stats(cudaStream_t st, int64_t rows, int64_t v, int64_t lo, int64_t vfull, const void *x, int xdt,
                         const int32_t *labels, int64_t ignore, void *stats, int stdt, int *flag);
cudaError_t ck_vce_rows(cudaStream_t st, int64_t rows, int64_t k, const void *stats, int stdt, const int32_t *labels, int64_t ignore,
                        double *out);
cudaError_t ck_vce_grad(cudaStream_t st, int64_t rows, int64_t v, int64_t lo, int64_t k, const void *dy, int dydt, double count,
                        const void *x, int xdt, const int32_t *labels, int64_t ignore, const void *stats, int stdt, void *dx, int dxdt,
                        bool acc);
// Pointwise loss terms into `partial` (one double per block of the launch, at most
// CK_LOSS_BLOCKS): mse (a - b)^2, bce max(a, 0) - a b + log1p(exp(-|a|)).
#define CK_LOSS_BLOCKS 256
cudaError_t ck_loss_terms(cudaStream_t st, bool bce, int64_t n, const void *a, int adt, const void *b, int bdt, double *partial);
// out = (acc ? out : 0) + sum(v[0..n)) / count, summed in order by one block.
cudaError_t ck_sum_into(cudaStream_t st, int64_t n, const double *v, double count, void *out, int odt, bool acc);
// y[j] = (acc ? y[j] : 0) + sum_o x[o inner + j] (reduce_sum over leading dimensions).
cudaError_t ck_sum_leading(cudaStream_t st, int64_t outer, int64_t inner, const void *x, int xdt, double *part, void *y, int ydt,
                           bool acc);

/* ---- data movement (kernels.cu) ---- */

// rows x cols elements of esize bytes: dst[r ldd + c] = src[r lds + c] (src NULL: 0). With
// acc (float dtype dt or i32), adds instead.
cudaError_t ck_copy2d(cudaStream_t st, void *dst, int64_t ldd, const void *src, int64_t lds, int64_t rows, int64_t cols,
                      int dt, bool acc);
// y = x permuted: y dimension i is x dimension perm[i].
cudaError_t ck_permute(cudaStream_t st, void *y, const void *x, int rank, const int64_t *xshape, const int32_t *perm, int dt,
                       bool acc);
// For every element of dst (holding box db): mode SET: the src element (holding sb) at the same
// logical position, or 0 where sb does not reach; mode ADD: adds it where sb reaches (in dtype
// dt); mode SET_INSIDE: sets it where sb reaches, leaves the rest. esize 2 or 4 for SET modes
// (bits are moved), dt for ADD.
enum { CK_BOX_SET = 0, CK_BOX_ADD = 1, CK_BOX_SET_INSIDE = 2 };
cudaError_t ck_box_move(cudaStream_t st, void *dst, const ck_box *db, const void *src, const ck_box *sb, int dt, int mode);

// Writes n (at most CK_PUT_MAX) bytes of host memory to dst on the stream, carried as a kernel
// argument: asynchronous, and src may be reused at once.
#define CK_PUT_MAX 1024
cudaError_t ck_put_bytes(cudaStream_t st, void *dst, const void *src, int n);

/* ---- embeddings (kernels.cu) ---- */

// y[i, :] = table[ids[i] - lo, :] when lo <= ids[i] < lo + nrows, else 0 (ids outside [0, vfull)
// set the flag).
cudaError_t ck_embedding(cudaStream_t st, int64_t n_ids, int64_t h, const int32_t *ids, const void *table, int tdt, int64_t lo,
                         int64_t nrows, int64_t vfull, void *y, int ydt, bool acc, int *flag);
// dt[ids[i] - lo, :] += dy[i, :] for ids in [lo, lo + nrows); dt is f32 (atomics).
cudaError_t ck_embedding_grad(cudaStream_t st, int64_t n_ids, int64_t h, const void *dy, int dydt, const int32_t *ids,
                              int64_t lo, int64_t nrows, float *dt);
// y[b, :] = (acc ? y : 0) + sum_l table[ids[b, l] - lo, :] (rows this piece holds).
cudaError_t ck_bag(cudaStream_t st, int64_t bags, int64_t l, int64_t e, const int32_t *ids, const void *table, int tdt, int64_t lo,
                   int64_t nrows, int64_t vfull, void *y, int ydt, bool acc, int *flag);
// dt[ids[b, l] - lo, :] += dy[b, :] (f32, atomics).
cudaError_t ck_bag_grad(cudaStream_t st, int64_t bags, int64_t l, int64_t e, const void *dy, int dydt, const int32_t *ids,
                        int64_t lo, int64_t nrows, float *dt);

/* ---- optimizers (kernels.cu) ---- */

// PyTorch's SGD with coupled weight decay; buf NULL without momentum; w the f32 master weights
// or NULL (then p, in its dtype, is the weight).
cudaError_t ck_sgd(cudaStream_t st, int64_t n, void *p, int pdt, const void *g, int gdt, float *buf, float *w, float lr, float wd,
                   float momentum);
// AdamW with the constants the CPU kernel forms (decay = 1 - lr wd, step = lr / (1 - b1^t),
// rc2 = 1 / sqrt(1 - b2^t), cb = 1 - b formed in double).
typedef struct ck_adamw_args {
    float decay, step, rc2, eps, b1, b2, cb1, cb2;
} ck_adamw_args;
cudaError_t ck_adamw(cudaStream_t st, int64_t n, void *p, int pdt, const void *g, int gdt, float *m, float *v, float *w,
                     const ck_adamw_args *a);

/* ---- windows, batch norm, attention helpers (kernels_nn.cu) ---- */

typedef struct ck_win {
    int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, ho, wo;
} ck_win;
// maxpool (first maximum; padding excluded; an empty window gives 0) or avgpool (divides by kh
// kw, padding included).
cudaError_t ck_pool(cudaStream_t st, bool max, const ck_win *g, const void *x, int xdt, void *y, int ydt, bool acc);
// The gradients: each dx element gathers the dy of the windows that contain it (maxpool: those
// whose first maximum it is), so the sums are deterministic.
cudaError_t ck_pool_grad(cudaStream_t st, bool max, const ck_win *g, const void *dy, int dydt, const void *x, int xdt, void *dx,
                         int dxdt, bool acc);
// Batch norm over x [ng n, c, hw]: ng groups of n samples (ghost batch norm; ng = 1: the whole
// batch), statistics per (group, channel) in rows r = gi c + ch of mean, rstd, s1, s2.
// Per row: mean and rstd = 1/sqrt(var + eps) (biased), in double.
cudaError_t ck_bn_stats(cudaStream_t st, int64_t ng, int64_t n, int64_t c, int64_t hw, const void *x, int xdt, double eps,
                        double *mean, double *rstd);
// Per row: s1 = sum dy, s2 = sum dy xhat (x NULL: s2 not computed).
cudaError_t ck_bn_sums(cudaStream_t st, int64_t ng, int64_t n, int64_t c, int64_t hw, const void *dy, int dydt, const void *x,
                       int xdt, const double *mean, const double *rstd, double *s1, double *s2);
// y = xhat g + b, xhat on its row's statistics.
cudaError_t ck_bn_fwd(cudaStream_t st, int64_t ng, int64_t n, int64_t c, int64_t hw, const void *x, int xdt, const double *mean,
                      const double *rstd, const void *g, int gdt, const void *b, int bdt, void *y, int ydt, bool acc);
// dx = g rstd (dy - s1/cnt - xhat s2/cnt), cnt = n hw, on its row's sums.
cudaError_t ck_bn_grad_x(cudaStream_t st, int64_t ng, int64_t n, int64_t c, int64_t hw, const void *dy, int dydt, const void *x,
                         int xdt, const double *mean, const double *rstd, const double *s1, const double *s2, const void *g, int gdt,
                         void *dx, int dxdt, bool acc);
// out[ch] = (acc ? out : 0) + sum over gi < ng of v[gi c + ch] (double into a float dtype).
cudaError_t ck_put_channels(cudaStream_t st, int64_t ng, int64_t c, const double *v, void *out, int odt, bool acc);
// Attention scores [heads, s, s] (f32) in place: softmax of each row, keys after the query
// masked when causal.
cudaError_t ck_attn_softmax(cudaStream_t st, int64_t heads, int64_t s, float *p, bool causal);
// dS = P (dP - rowsum(dP P)) in place over dp (f32, [heads, s, s]).
cudaError_t ck_attn_dscores(cudaStream_t st, int64_t heads, int64_t s, const float *p, float *dp);

/* ---- the operators of imported models (kernels_ext.cu; runtime/ops.def's last section) ---- */

// Unary math: y = f(x), or with dy: y = dy f'(x). op: ck_un_op; e: pow's exponent.
typedef enum ck_un_op {
    CK_UN_SIGMOID, CK_UN_TANH, CK_UN_EXP, CK_UN_LOG, CK_UN_GELU_ERF, CK_UN_RSQRT, CK_UN_SQRT, CK_UN_SIN, CK_UN_COS, CK_UN_POW, CK_UN_ERF
} ck_un_op;
cudaError_t ck_unary(cudaStream_t st, int op, bool grad, int64_t n, void *y, int ydt, const void *x, int xdt, const void *dy,
                     int dydt, double e, bool acc);

// An axis map between a big operand and a small one (rt: cpu_map_strides): big's local shape,
// and per big axis the small operand's stride (0: small lacks the axis).
typedef struct ck_map {
    int rank;
    int64_t shape[CK_MAX_RANK], sst[CK_MAX_RANK];
} ck_map;

// Element-wise over big with small broadcast: y[i] = a[i] OP b[k] (add with ua/ub, mul, sub,
// div), masked_fill (b != 0 ? s : a[i]), expand (y[i] = b[k], a unused).
typedef enum ck_map_op { CK_MAP_ADD, CK_MAP_MUL, CK_MAP_SUB, CK_MAP_DIV, CK_MAP_FILL, CK_MAP_EXPAND } ck_map_op;
cudaError_t ck_mapped(cudaStream_t st, int op, const ck_map *m, void *y, int ydt, const void *a, int adt, bool ua, const void *b,
                      int bdt, bool ub, float s, bool acc);
// Reductions of big x into small y (one thread per element of y): the sum (divided by count)
// or the maximum. ny: elements of y.
cudaError_t ck_reduce_map(cudaStream_t st, bool is_max, const ck_map *m, int64_t ny, const void *x, int xdt, void *y, int ydt,
                          double count, bool acc);
// max_grad: dx (big, dxdt) gets dy[k] at the first maximum of x in each group k, 0 elsewhere.
cudaError_t ck_max_grad(cudaStream_t st, const ck_map *m, int64_t ny, const void *dy, int dydt, const void *x, int xdt, void *dx,
                        int dxdt, bool acc);
// ne: y = x != v; one_hot: y[i, j] = ids[i] == lo + j (nc columns, classes the logical count;
// an id outside [0, classes) sets the flag).
cudaError_t ck_ne(cudaStream_t st, int64_t n, const int32_t *x, double v, void *y, int ydt, bool acc);
cudaError_t ck_one_hot(cudaStream_t st, int64_t n, int64_t nc, int64_t lo, int64_t classes, const int32_t *ids, void *y, int ydt,
                       bool acc, int *flag);
// topk over rows of n: the k largest (ties: the lower index) into v, their indices into idx;
// topk_grad: dx (rows of n) = dy scattered to idx (an index outside [0, n) sets the flag).
// Attention in its general form (cpu/attention.c's semantics): q [b,s,n,d], k [b,t,m,d],
// v [b,t,m,e] of one float dtype, an optional bias with strides bst along [b,n,s,t]; scratch:
// b n s t floats for the forward, twice that for the backward; a->p > 0: dropout of the
// probabilities (ck_attn_keep, common.cuh). The backward makes dq (when
// not NULL), dk and dv (when dk is not NULL; summed over each kv head's query heads) and dbias
// (db, nb elements, when not NULL).
typedef struct ck_attn {
    int64_t b, s, t, n, m, d, e, group, q_head0, k_head0;
    const void *q, *k, *v, *bias;
    int dt, bdt;
    int64_t bst[4];
    float scale;
    bool causal;
    double p;                                 // dropout of the probabilities (0: none)
    uint64_t key;                             // its mask's key, before the element index
    int64_t b0, s0, t0, heads, queries, keys; // global: first batch, query, key; full sizes
} ck_attn;
cudaError_t ck_attention(cudaStream_t st, const ck_attn *a, float *scratch, void *y, int ydt, bool acc);
cudaError_t ck_attention_grad(cudaStream_t st, const ck_attn *a, float *scratch, const void *dy, void *dq, void *dk, void *dv, int gdt,
                              void *db, int64_t nb, bool acc);
// The same in the FlashAttention manner (attention_flash.cu; attrs mode PLAN_ATTN_FLASH): no
// scratch for the forward; the backward's scratch is ck_flash_scratch_bytes (nb: the bias's
// elements for db, else 0), [b,s,n] rows of o, lse and dq in f32, never s x t. ck_flash_smem: the
// shared memory a block needs (grad: the backward's), which the device must offer.
size_t ck_flash_scratch_bytes(const ck_attn *a, int64_t nb);
size_t ck_flash_smem(const ck_attn *a, bool grad);
cudaError_t ck_flash_attention(cudaStream_t st, const ck_attn *a, void *y, int ydt, bool acc);
cudaError_t ck_flash_attention_grad(cudaStream_t st, const ck_attn *a, void *scratch, const void *dy, void *dq, void *dk, void *dv, int gdt,
                                    void *db, int64_t nb, bool acc);
// The cuBLAS path's attention dropout (a->p > 0; kernels_nn.cu) on batch element bi's [a->n, s, s] (f32, in place): ck_attn_drop
// multiplies the probabilities by the mask; ck_attn_dscores_drop takes dp = dy v^T (the dropped
// probabilities' gradient), multiplies it by the mask, makes dS = P (dP - rowsum(dP P)) in
// place and leaves p = P . mask (what dv reads). The geometry and key come from a (its
// pointers unused).
cudaError_t ck_attn_drop(cudaStream_t st, const ck_attn *a, int64_t bi, float *p);
cudaError_t ck_attn_dscores_drop(cudaStream_t st, const ck_attn *a, int64_t bi, float *p, float *dp);
// gather and index_select: y (n elements, strides ys) from x (strides xs) with the axis's
// coordinate read from idx (idx like y; sel: idx[coordinate], index_select); an index outside
// [0, rows) reads 0 and sets the flag. The gradient adds dy into f32 dx with atomics (zeroed
// first unless acc).
typedef struct ck_gather_args {
    int rank, axis;
    bool sel;
    int64_t n, rows, xs[CK_MAX_RANK], ys[CK_MAX_RANK];
    const int32_t *idx;
} ck_gather_args;
cudaError_t ck_gather(cudaStream_t st, const ck_gather_args *g, const void *x, int xdt, void *y, int ydt, bool acc, int *flag);
cudaError_t ck_gather_grad(cudaStream_t st, const ck_gather_args *g, const void *dy, int dydt, float *dx, int64_t nx, bool acc,
                           int *flag);
cudaError_t ck_topk(cudaStream_t st, int64_t rows, int64_t n, int64_t k, const void *x, int xdt, void *v, int vdt, int32_t *idx, bool acc);
cudaError_t ck_topk_grad(cudaStream_t st, int64_t rows, int64_t n, int64_t k, const void *dy, int dydt, const int32_t *idx, void *dx,
                         int dxdt, bool acc, int *flag);

#ifdef __cplusplus
}
#endif

#endif
