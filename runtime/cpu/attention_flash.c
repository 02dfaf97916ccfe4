/*
 * cpu/attention_flash.c: attention in the FlashAttention manner (Dao et al. 2022; the backward
 * in FlashAttention-2's form, Dao 2023): the same function as attention.c's unfused kernels
 * (cross lengths, grouped-query heads, scale, causal from the views' global offsets, the additive
 * bias, dropout drawn per global element, accumulation), without the s x t scores in memory.
 *
 * Forward, per (batch, query head, tile of ATTN_BR queries): the keys go by in tiles of ATTN_BC;
 * each tile's scores S = scale q k^T + bias (a small GEMM), and an online softmax keeps each
 * row's running maximum m and sum l: a new tile with maximum m' rescales what the row has
 * gathered by exp(m - m'), adds exp(S - m') to l and exp(S - m') (dropped) v to the output. At
 * the end o /= l and lse = m + log l. Causal tiles wholly past a tile's last query are skipped.
 * Backward, per query tile: P = exp(S - lse) is recomputed per key tile, dP = dy v^T (times the
 * dropout mask M), dS = P (dP - D) with D = rowsum(dy . y), and dv += (P . M)^T dy,
 * dq += scale dS k, dk += scale dS^T q, dbias += dS. Scratch: attn_block_work reals (two tiles
 * of scores and a row of mask) plus a tile of output rows, whatever s and t.
 *
 * The entry points work on one block of keys (attn_kv_block), so that ring attention (context
 * parallelism passing k/v blocks around the cp ring) runs each step as attn_block_fwd of its
 * queries against the block it holds, combines the steps' partial outputs with attn_merge, and
 * runs the backward per block with attn_block_bwd from the merged (global) lse and D. Here the
 * operators see one block, all the keys they hold.
 *
 * The forward hands nothing to the backward: the graph's attention has one output, so
 * attention_grad recomputes each query tile's output and lse (one more forward pass: the
 * backward costs 3.5 forward passes of GEMM work where FlashAttention-2, which saves lse and
 * reads y, costs 2.5; compiler/cost.c counts it so). That keeps the plan's operators, their
 * splits, layouts and memory exactly those of the unfused form.
 */
#include "attention.h"

int64_t CPU_KERNEL(attn_block_work)(const attn_geom *g) {
    (void)g;
    return 2 * ATTN_BR * ATTN_BC + ATTN_BC;
}

// Pointers to (batch bi, kv head kh, key 0) of a block, and their row strides.
typedef struct kv_rows {
    const real *k, *v;
    int64_t ldk, ldv;
} kv_rows;

static kv_rows kv_at(const attn_geom *g, const attn_kv_block *kv, int64_t bi, int64_t kh) {
    int64_t ldk = g->m * g->d, ldv = g->m * g->e;
    return (kv_rows){kv->k + bi * attn_kv_tb(kv) * ldk + kh * g->d, kv->v + bi * attn_kv_tb(kv) * ldv + kh * g->e, ldk, ldv};
}

// Row r's scores of the tile at key j0 (cols of them, the first len kept): the bias added, the
// rest -inf. Returns the row's largest kept score (-inf when none).
static double tile_row(const attn_geom *g, const attn_kv_block *kv, int64_t bi, int64_t h, int64_t i, int64_t j0, int64_t cols,
                       int64_t len, real *sr) {
    if (kv->bias) {
        const real *br = kv->bias + bi * g->bst[0] + h * g->bst[1] + i * g->bst[2] + j0 * g->bst[3];
        for (int64_t c = 0; c < len; c++) sr[c] += br[c * g->bst[3]];
    }
    double mx = -INFINITY;
    for (int64_t c = 0; c < len; c++) mx = sr[c] > mx ? sr[c] : mx;
    for (int64_t c = len; c < cols; c++) sr[c] = 0;
    return mx;
}

// Keys of local query i kept in the tile at j0 of cols keys.
static int64_t tile_len(const attn_geom *g, const attn_kv_block *kv, int64_t i, int64_t j0, int64_t cols) {
    int64_t len = attn_keys_kept(g, i, kv->t0, kv->t) - j0;
    return len < 0 ? 0 : len < cols ? len : cols;
}

void CPU_KERNEL(attn_block_fwd)(const attn_geom *g, const attn_kv_block *kv, const real *Q, int64_t bi, int64_t h, int64_t i0,
                                int64_t rows, real *o, int64_t ldo, real *lse, real *work) {
    kv_rows b = kv_at(g, kv, bi, attn_kv(g, h));
    int64_t ldq = g->n * g->d, e = g->e, end = attn_keys_kept(g, i0 + rows - 1, kv->t0, kv->t);
    const real *q = Q + (bi * g->s + i0) * ldq + h * g->d;
    real *S = work, *M = work + 2 * ATTN_BR * ATTN_BC;
    double mx[ATTN_BR], sum[ATTN_BR];
    for (int64_t r = 0; r < rows; r++) {
        mx[r] = -INFINITY, sum[r] = 0;
        memset(o + r * ldo, 0, (size_t)e * sizeof(real));
    }
    for (int64_t j0 = 0; j0 < end; j0 += ATTN_BC) { // causal: the tiles past the last query's keys are skipped
        int64_t cols = end - j0 < ATTN_BC ? end - j0 : ATTN_BC;
        cpu_gemm(false, true, rows, cols, g->d, g->scale, q, ldq, b.k + j0 * b.ldk, b.ldk, 0, S, ATTN_BC);
        for (int64_t r = 0; r < rows; r++) {
            real *sr = S + r * ATTN_BC;
            int64_t len = tile_len(g, kv, i0 + r, j0, cols);
            double tm = tile_row(g, kv, bi, h, i0 + r, j0, cols, len, sr), m = tm > mx[r] ? tm : mx[r];
            if (m == -INFINITY) { // nothing kept yet: the row gathers nothing from this tile
                for (int64_t c = 0; c < len; c++) sr[c] = 0;
                continue;
            }
            double alpha = mx[r] == -INFINITY ? 0 : exp(mx[r] - m), ts = 0;
            for (int64_t c = 0; c < len; c++) ts += sr[c] = R_EXP(sr[c] - (real)m);
            sum[r] = sum[r] * alpha + ts, mx[r] = m;
            if (g->p > 0) {
                attn_mask_keys(g, bi, h, i0 + r, kv->t0 + j0, cols, M);
                for (int64_t c = 0; c < len; c++) sr[c] *= M[c];
            }
            if (alpha != 1)
                for (int64_t c = 0; c < e; c++) o[r * ldo + c] *= (real)alpha;
        }
        cpu_gemm(false, false, rows, e, cols, 1, S, ATTN_BC, b.v + j0 * b.ldv, b.ldv, 1, o, ldo);
    }
    for (int64_t r = 0; r < rows; r++) {
        if (sum[r] > 0) {
            real inv = (real)(1 / sum[r]);
            for (int64_t c = 0; c < e; c++) o[r * ldo + c] *= inv;
        }
        lse[r] = sum[r] > 0 ? (real)(mx[r] + log(sum[r])) : (real)-INFINITY;
    }
}

void CPU_KERNEL(attn_merge)(int64_t rows, int64_t e, real *o, int64_t ldo, real *lse, const real *o2, int64_t ldo2, const real *lse2) {
    for (int64_t r = 0; r < rows; r++) {
        double l1 = lse[r], l2 = lse2[r], top = l1 > l2 ? l1 : l2;
        if (top == -INFINITY) continue; // neither block has a key for this row
        double a = exp(l1 - top), b = exp(l2 - top), tot = a + b;
        for (int64_t c = 0; c < e; c++) o[r * ldo + c] = (real)((a * o[r * ldo + c] + b * o2[r * ldo2 + c]) / tot);
        lse[r] = (real)(top + log(tot));
    }
}

// Row r of a backward tile: P = exp(S - lse) into sr; dS = P (dP . M - D) into dr; sr becomes
// P . M (what dv reads); the bias's gradient gathers dS.
static void bwd_row(const attn_geom *g, const attn_kv_block *kv, int64_t bi, int64_t h, int64_t i, int64_t j0, int64_t cols, real lse,
                    real D, real *sr, real *dr, real *M, real *db) {
    int64_t len = tile_len(g, kv, i, j0, cols);
    tile_row(g, kv, bi, h, i, j0, cols, len, sr);
    for (int64_t c = 0; c < len; c++) sr[c] = lse == -INFINITY ? 0 : R_EXP(sr[c] - lse);
    if (g->p > 0) attn_mask_keys(g, bi, h, i, kv->t0 + j0, cols, M);
    for (int64_t c = 0; c < cols; c++) {
        real dp = g->p > 0 ? dr[c] * M[c] : dr[c];
        dr[c] = c < len ? sr[c] * (dp - D) : 0;
        if (g->p > 0) sr[c] *= M[c];
    }
    if (db) {
        real *base = db + bi * g->bst[0] + h * g->bst[1] + i * g->bst[2] + j0 * g->bst[3];
        for (int64_t c = 0; c < len; c++) base[c * g->bst[3]] += dr[c];
    }
}

void CPU_KERNEL(attn_block_bwd)(const attn_geom *g, const attn_kv_block *kv, const real *Q, const real *DY, int64_t bi, int64_t h,
                                int64_t i0, int64_t rows, const real *lse, const real *D, real *dq, int64_t ldq, real *dk, real *dv,
                                real *db, real *work) {
    int64_t kh = attn_kv(g, h);
    kv_rows b = kv_at(g, kv, bi, kh);
    int64_t ldqq = g->n * g->d, ldy = g->n * g->e, end = attn_keys_kept(g, i0 + rows - 1, kv->t0, kv->t);
    const real *q = Q + (bi * g->s + i0) * ldqq + h * g->d, *dy = DY + (bi * g->s + i0) * ldy + h * g->e;
    real *S = work, *dP = work + ATTN_BR * ATTN_BC, *M = work + 2 * ATTN_BR * ATTN_BC;
    int64_t koff = bi * attn_kv_tb(kv) * b.ldk + kh * g->d, voff = bi * attn_kv_tb(kv) * b.ldv + kh * g->e;
    for (int64_t j0 = 0; j0 < end; j0 += ATTN_BC) {
        int64_t cols = end - j0 < ATTN_BC ? end - j0 : ATTN_BC;
        cpu_gemm(false, true, rows, cols, g->d, g->scale, q, ldqq, b.k + j0 * b.ldk, b.ldk, 0, S, ATTN_BC);
        cpu_gemm(false, true, rows, cols, g->e, 1, dy, ldy, b.v + j0 * b.ldv, b.ldv, 0, dP, ATTN_BC);
        for (int64_t r = 0; r < rows; r++)
            bwd_row(g, kv, bi, h, i0 + r, j0, cols, lse[r], D[r], S + r * ATTN_BC, dP + r * ATTN_BC, M, db);
        if (dv) cpu_gemm(true, false, cols, g->e, rows, 1, S, ATTN_BC, dy, ldy, 1, dv + voff + j0 * b.ldv, b.ldv);
        if (dq) cpu_gemm(false, false, rows, g->d, cols, g->scale, dP, ATTN_BC, b.k + j0 * b.ldk, b.ldk, 1, dq, ldq);
        if (dk) cpu_gemm(true, false, cols, g->d, rows, g->scale, dP, ATTN_BC, q, ldqq, 1, dk + koff + j0 * b.ldk, b.ldk);
    }
}

int CPU_KERNEL(attention_flash)(kctx *c, const attn_geom *g) {
    int64_t w = CPU_KERNEL(attn_block_work)(g);
    real *work = cpu_scratch(c, w + ATTN_BR * (g->e + 1));
    if (!work) return -1;
    real *o = work + w, *lse = o + ATTN_BR * g->e, *Y = cpu_r(&c->out[0]);
    attn_kv_block kv = {cpu_r(&c->in[1]), cpu_r(&c->in[2]), g->bias, g->t, g->t0, 0};
    for (int64_t bi = 0; bi < g->b; bi++)
        for (int64_t h = 0; h < g->n; h++)
            for (int64_t i0 = 0; i0 < g->s; i0 += ATTN_BR) {
                int64_t rows = g->s - i0 < ATTN_BR ? g->s - i0 : ATTN_BR;
                CPU_KERNEL(attn_block_fwd)(g, &kv, cpu_r(&c->in[0]), bi, h, i0, rows, o, g->e, lse, work);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t x = 0; x < g->e; x++) cpu_put(Y + ((bi * g->s + i0 + r) * g->n + h) * g->e + x, o[r * g->e + x], c->acc);
            }
    free(work);
    return 0;
}

int CPU_KERNEL(attention_grad_flash)(kctx *c, const attn_geom *g, real *DQ, real *DK, real *DV, real *DB) {
    int64_t w = CPU_KERNEL(attn_block_work)(g);
    real *work = cpu_scratch(c, w + ATTN_BR * (g->e + g->d + 2));
    if (!work) return -1;
    real *o = work + w, *dq = o + ATTN_BR * g->e, *lse = dq + ATTN_BR * g->d, *D = lse + ATTN_BR;
    const real *DY = cpu_r(&c->in[0]), *Q = cpu_r(&c->in[1]);
    attn_kv_block kv = {cpu_r(&c->in[2]), cpu_r(&c->in[3]), g->bias, g->t, g->t0, 0};
    for (int64_t bi = 0; bi < g->b; bi++)
        for (int64_t h = 0; h < g->n; h++)
            for (int64_t i0 = 0; i0 < g->s; i0 += ATTN_BR) {
                int64_t rows = g->s - i0 < ATTN_BR ? g->s - i0 : ATTN_BR;
                // this tile's output and lse again (the forward saved none), and D = rowsum(dy . y)
                CPU_KERNEL(attn_block_fwd)(g, &kv, Q, bi, h, i0, rows, o, g->e, lse, work);
                for (int64_t r = 0; r < rows; r++) {
                    const real *dy = DY + ((bi * g->s + i0 + r) * g->n + h) * g->e;
                    double dot = 0;
                    for (int64_t x = 0; x < g->e; x++) dot += (double)dy[x] * o[r * g->e + x];
                    D[r] = (real)dot;
                }
                memset(dq, 0, (size_t)(rows * g->d) * sizeof(real));
                CPU_KERNEL(attn_block_bwd)(g, &kv, Q, DY, bi, h, i0, rows, lse, D, DQ ? dq : NULL, g->d, DK, DV, DB, work);
                for (int64_t r = 0; DQ && r < rows; r++)
                    for (int64_t x = 0; x < g->d; x++) cpu_put(DQ + ((bi * g->s + i0 + r) * g->n + h) * g->d + x, dq[r * g->d + x], c->acc);
            }
    free(work);
    return 0;
}
