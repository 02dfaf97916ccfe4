/*
 * cpu/attention.h: what attention.c (the unfused kernels) and attention_flash.c (the
 * FlashAttention-style kernels) share; private to those two files. Both are compiled once per
 * precision (cpu.h), so the shared functions carry CPU_KERNEL's precision in their names.
 *
 * attn_geom is one attention instruction's geometry, read from its views and attrs by
 * attn_geom_init: local sizes, the global offsets of the views (the first batch, query head,
 * query and key they hold, and the full sizes), the scale, causal, the bias's strides and the
 * dropout's key. Causal masks key j of a piece against query i of a piece when the GLOBAL key
 * (t0 + j) is past the GLOBAL query (s0 + i), which is PyTorch's top-left aligned is_causal on a
 * whole tensor, and stays right when a piece holds later queries or keys (ring attention).
 */
#ifndef RT_CPU_ATTENTION_H
#define RT_CPU_ATTENTION_H

#include "cpu.h"

typedef struct attn_geom {
    int64_t b, s, t, n, m, d, e;
    int64_t group, q_head0, k_head0, kv_heads; // global: query heads per kv head, first heads held
    int64_t bst[4];                            // the bias's strides along [b,n,s,t] (0: absent)
    const real *bias;
    real scale;
    bool causal;
    double p;                                  // dropout of the probabilities (0: none)
    uint64_t key;                              // its mask's key, before the element index
    int64_t b0, s0, t0, heads, queries, keys;  // global: first batch, query, key; full sizes
} attn_geom;

// Fills *g from c's views and attrs; qi is the query's input (0: attention; 1: the gradients,
// whose input 0 is dy). Fails (cpu_fail's -1) when the views do not fit attention.
int CPU_KERNEL(attn_geom_init)(kctx *c, uint32_t qi, attn_geom *g);

// The kv head (local) that local query head h reads.
static inline int64_t attn_kv(const attn_geom *g, int64_t h) { return (g->q_head0 + h) / g->group - g->k_head0; }

// Keys of local query i that the causal mask keeps, among the n keys of a block whose first is
// global key t0: the first attn_keys_kept of them (all n when not causal).
static inline int64_t attn_keys_kept(const attn_geom *g, int64_t i, int64_t t0, int64_t n) {
    if (!g->causal) return n;
    int64_t last = g->s0 + i - t0; // the last kept key, local to the block
    return last < 0 ? 0 : last + 1 < n ? last + 1 : n;
}

// The dropout factors (0 or 1 / (1 - p)) of local query i of batch bi, local head h, for the n
// keys from global key t0: the mask of the GLOBAL element, so every split draws the same.
static inline void attn_mask_keys(const attn_geom *g, int64_t bi, int64_t h, int64_t i, int64_t t0, int64_t n, real *m) {
    uint64_t row = (uint64_t)((((g->b0 + bi) * g->heads + g->q_head0 + h) * g->queries + g->s0 + i) * g->keys + t0);
    real keep = (real)(1 / (1 - g->p));
    for (int64_t j = 0; j < n; j++) m[j] = rt_uniform(rt_key(g->key, row + (uint64_t)j)) >= g->p ? keep : 0;
}

/* ---- attention_flash.c: the blockwise (FlashAttention) form ---- */

// One block of keys and values, as ring attention passes them around: k [b,t,m,d] and v
// [b,t,m,e] (the geometry's b, m, d, e; t keys here, the first of them global key t0), and the
// bias's columns for these keys (strides g->bst; NULL: none).
// tb: the keys one batch row spans in k and v (0: t; more where the block is a run of keys of a
// larger one, as zigzag ring attention's chunks are).
typedef struct attn_kv_block {
    const real *k, *v, *bias;
    int64_t t, t0, tb;
} attn_kv_block;

static inline int64_t attn_kv_tb(const attn_kv_block *kv) { return kv->tb ? kv->tb : kv->t; }

// Reals of work space attn_block_fwd and attn_block_bwd need (O(tile), whatever s and t).
int64_t CPU_KERNEL(attn_block_work)(const attn_geom *g);

// Queries i0 .. i0+rows-1 (local, at most ATTN_BR of them) of batch bi, local query head h,
// against one block of keys: o (rows x e, row stride ldo) = softmax(scale q k^T + bias) v over
// these keys only (dropped), and lse (rows) the log of the softmax's sum, -inf for a row that
// every key of the block masks (its o row 0). Q is the whole local q [b,s,n,d]. work: see
// attn_block_work. Partial results of several blocks combine with attn_merge.
void CPU_KERNEL(attn_block_fwd)(const attn_geom *g, const attn_kv_block *kv, const real *Q, int64_t bi, int64_t h, int64_t i0,
                                int64_t rows, real *o, int64_t ldo, real *lse, real *work);

// o, lse (rows x e, rows) becomes the result of both blocks: o and o2 weighted by their share of
// the sum exp(lse) + exp(lse2), lse the log of that sum.
void CPU_KERNEL(attn_merge)(int64_t rows, int64_t e, real *o, int64_t ldo, real *lse, const real *o2, int64_t ldo2, const real *lse2);

// The backward of queries i0 .. i0+rows-1 (at most ATTN_BR) of batch bi, local head h against one
// block of keys, from the GLOBAL (all blocks merged) lse and D = rowsum(dy . y) of those rows:
// dq (rows x d, row stride ldq) += scale dS k; dk, dv (the block's, [b,t,m,*]) += scale dS^T q,
// (P . M)^T dy; db (the bias's gradient at the block's columns, strides g->bst; NULL: none) +=
// dS. P is recomputed per tile from lse (FlashAttention-2's backward).
void CPU_KERNEL(attn_block_bwd)(const attn_geom *g, const attn_kv_block *kv, const real *Q, const real *DY, int64_t bi, int64_t h,
                                int64_t i0, int64_t rows, const real *lse, const real *D, real *dq, int64_t ldq, real *dk, real *dv,
                                real *db, real *work);

// The operators in the flash form (attrs i[PLAN_AI_MODE] == PLAN_ATTN_FLASH; attention.c's
// kernels hand over to these), g filled by attn_geom_init.
int CPU_KERNEL(attention_flash)(kctx *c, const attn_geom *g);
int CPU_KERNEL(attention_grad_flash)(kctx *c, const attn_geom *g, real *dq, real *dk, real *dv, real *db);

// Query rows and keys per tile.
#define ATTN_BR 32
#define ATTN_BC 64

#endif
