/*
 * unit_attn_blocks.c: the per-block entry points of the CPU backend's FlashAttention kernels
 * (runtime/cpu/attention.h, attention_flash.c), as ring attention would call them: the keys
 * and values cut into blocks (each a tensor of its own, with its global first key), each query
 * tile's attention against each block (attn_block_fwd) merged by log-sum-exp (attn_merge), must
 * give the output and lse of the whole; and the backward per block (attn_block_bwd) from the
 * merged lse and D = rowsum(dy . y) must give dq summed over the blocks and each block's rows of
 * dk, dv and the bias's gradient, as the backward against all the keys at once does. Double
 * precision, within 1e-12; causal with the queries at global 60..99 (so one block masks some
 * query rows wholly), grouped-query heads (4 over 2), a bias [b,s,t], dropout 0.2.
 */
#define RT_REAL_DOUBLE
#include "cpu/attention.h"
#include "test.h"

enum { B = 2, S = 40, T = 100, N = 4, M = 2, D = 3, E = 5, NBLK = 3 };
static const int64_t cut[NBLK + 1] = {0, 30, 70, 100};

static double urand(uint64_t *s) { return rt_uniform(rt_key(0xb10c, (*s)++)) * 2 - 1; }

static double *fill(int64_t n, uint64_t *s) {
    double *x = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = urand(s);
    return x;
}

// Rows j0 .. j1-1 of a [B, T, M, w] tensor, as a tensor of its own.
static double *rows(const double *x, int64_t j0, int64_t j1, int64_t w) {
    double *y = malloc(sizeof(double) * (size_t)(B * (j1 - j0) * M * w));
    for (int64_t b = 0; b < B; b++)
        memcpy(y + b * (j1 - j0) * M * w, x + (b * T + j0) * M * w, sizeof(double) * (size_t)((j1 - j0) * M * w));
    return y;
}

static double worst(const double *a, const double *b, int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) w = fmax(w, fabs(a[i] - b[i]) > 0 || a[i] == b[i] ? fabs(a[i] - b[i]) : INFINITY);
    return w;
}

int main(void) {
    uint64_t s = 1;
    double *q = fill(B * S * N * D, &s), *k = fill(B * T * M * D, &s), *v = fill(B * T * M * E, &s), *bias = fill(B * S * T, &s);
    double *dy = fill(B * S * N * E, &s);
    attn_geom g = {.b = B, .s = S, .t = T, .n = N, .m = M, .d = D, .e = E, .group = N / M, .kv_heads = M, .bst = {S * T, 0, T, 1},
                   .bias = bias, .scale = 0.5, .causal = true, .p = 0.2, .key = 77, .s0 = 60, .heads = N, .queries = 100, .keys = T};
    double *work = malloc(sizeof(double) * (size_t)rt_cpu_f64_attn_block_work(&g));
    attn_kv_block whole = {k, v, bias, T, 0, 0}, blk[NBLK];
    double *kb[NBLK], *vb[NBLK];
    for (int i = 0; i < NBLK; i++) {
        kb[i] = rows(k, cut[i], cut[i + 1], D), vb[i] = rows(v, cut[i], cut[i + 1], E);
        blk[i] = (attn_kv_block){kb[i], vb[i], bias + cut[i], cut[i + 1] - cut[i], cut[i], 0};
    }
    double *dq_w = calloc(B * S * N * D, sizeof(double)), *dq_r = calloc(B * S * N * D, sizeof(double));
    double *dk_w = calloc(B * T * M * D, sizeof(double)), *dv_w = calloc(B * T * M * E, sizeof(double));
    double *db_w = calloc(B * S * T, sizeof(double)), *db_r = calloc(B * S * T, sizeof(double));
    double *dkb[NBLK], *dvb[NBLK];
    for (int i = 0; i < NBLK; i++)
        dkb[i] = calloc((size_t)(B * (cut[i + 1] - cut[i]) * M * D), sizeof(double)), dvb[i] = calloc((size_t)(B * (cut[i + 1] - cut[i]) * M * E), sizeof(double));
    double fwd_err = 0, lse_err = 0;
    int empty_rows = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < N; h++)
            for (int64_t i0 = 0; i0 < S; i0 += ATTN_BR) {
                int64_t n = S - i0 < ATTN_BR ? S - i0 : ATTN_BR;
                double o[ATTN_BR * E], lse[ATTN_BR], ro[ATTN_BR * E], rl[ATTN_BR], po[ATTN_BR * E], pl[ATTN_BR], Dr[ATTN_BR];
                rt_cpu_f64_attn_block_fwd(&g, &whole, q, b, h, i0, n, o, E, lse, work);
                for (int i = 0; i < NBLK; i++) { // the ring: one block after another, merged
                    rt_cpu_f64_attn_block_fwd(&g, &blk[i], q, b, h, i0, n, i ? po : ro, E, i ? pl : rl, work);
                    for (int64_t r = 0; i && r < n; r++) empty_rows += pl[r] == -INFINITY;
                    if (i) rt_cpu_f64_attn_merge(n, E, ro, E, rl, po, E, pl);
                }
                fwd_err = fmax(fwd_err, worst(o, ro, n * E)), lse_err = fmax(lse_err, worst(lse, rl, n));
                for (int64_t r = 0; r < n; r++) {
                    Dr[r] = 0;
                    for (int64_t x = 0; x < E; x++) Dr[r] += dy[((b * S + i0 + r) * N + h) * E + x] * o[r * E + x];
                }
                double *dqw = dq_w + ((b * S + i0) * N + h) * D, *dqr = dq_r + ((b * S + i0) * N + h) * D;
                rt_cpu_f64_attn_block_bwd(&g, &whole, q, dy, b, h, i0, n, lse, Dr, dqw, N * D, dk_w, dv_w, db_w, work);
                for (int i = 0; i < NBLK; i++)
                    rt_cpu_f64_attn_block_bwd(&g, &blk[i], q, dy, b, h, i0, n, rl, Dr, dqr, N * D, dkb[i], dvb[i], db_r + cut[i], work);
            }
    EXPECT(fwd_err <= 1e-12 && lse_err <= 1e-12);
    EXPECT(empty_rows > 0); // block 2 (keys 70..99) keeps no key of queries 60..69
    if (fwd_err > 1e-12 || lse_err > 1e-12) fprintf(stderr, "ring forward: output %g, lse %g from the whole\n", fwd_err, lse_err);
    double bwd_err = fmax(worst(dq_w, dq_r, B * S * N * D), worst(db_w, db_r, B * S * T));
    for (int i = 0; i < NBLK; i++) {
        double *kw = rows(dk_w, cut[i], cut[i + 1], D), *vw = rows(dv_w, cut[i], cut[i + 1], E);
        bwd_err = fmax(bwd_err, fmax(worst(kw, dkb[i], B * (cut[i + 1] - cut[i]) * M * D), worst(vw, dvb[i], B * (cut[i + 1] - cut[i]) * M * E)));
        free(kw), free(vw), free(kb[i]), free(vb[i]), free(dkb[i]), free(dvb[i]);
    }
    if (bwd_err > 1e-12) fprintf(stderr, "ring backward: %g from the whole\n", bwd_err);
    EXPECT(bwd_err <= 1e-12);
    double nz = 0;
    for (int64_t i = 0; i < B * S * N * D; i++) nz += fabs(dq_w[i]);
    EXPECT(nz > 0); // not vacuous
    free(q), free(k), free(v), free(bias), free(dy), free(work), free(dq_w), free(dq_r), free(dk_w), free(dv_w), free(db_w), free(db_r);
    return test_summary();
}
