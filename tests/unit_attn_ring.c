/*
 * unit_attn_ring.c: ring attention's per-rank sequence on the CPU backend's block kernels
 * (runtime/cpu/attention.h), with the cp ranks simulated in one process. Each of cp ranks holds
 * its sequence block of q, k and v (queries and keys c*L .. c*L+L-1 on rank c); the forward pass
 * computes the rank's queries against the k/v block it holds (attn_block_fwd), merges by
 * log-sum-exp (attn_merge) and passes the block to the next rank of the ring (c -> c+1 mod cp),
 * cp steps in all (cp - 1 passes); at step j rank c holds the block of rank (c - j) mod cp, whose
 * first global key a kernel finds from its own block's start alone: ((c - j) mod cp) * L. Blocks
 * wholly above the causal diagonal (owner > c) are skipped. The backward pass runs the ring
 * again, dk and dv travelling with their k/v block (cp passes: the last brings each block's sums
 * home), from the merged lse and D = rowsum(dy . y). Each rank's output, lse, dq, dk and dv must
 * equal its rows of one-device attention over the whole sequence (double precision, within
 * 1e-12); causal, grouped-query heads (4 over 2), dropout 0.1 (masks of the global elements),
 * cp 2 and 4. Not covered: a bias (its columns would travel with the block).
 */
#define RT_REAL_DOUBLE
#include "cpu/attention.h"
#include "test.h"

enum { B = 2, S = 64, N = 4, M = 2, D = 3, E = 5, MAXCP = 4 };

static double urand(uint64_t *s) { return rt_uniform(rt_key(0x4196, (*s)++)) * 2 - 1; }

static double *fill(int64_t n, uint64_t *s) {
    double *x = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = urand(s);
    return x;
}

// Rows j0 .. j0+L-1 (the sequence axis) of a [B, S, H, w] tensor, as a tensor of its own.
static double *rows(const double *x, int64_t j0, int64_t L, int64_t H, int64_t w) {
    double *y = malloc(sizeof(double) * (size_t)(B * L * H * w));
    for (int64_t b = 0; b < B; b++) memcpy(y + b * L * H * w, x + (b * S + j0) * H * w, sizeof(double) * (size_t)(L * H * w));
    return y;
}

static double worst(const double *a, const double *b, int64_t n) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) w = fmax(w, fabs(a[i] - b[i]) > 0 || a[i] == b[i] ? fabs(a[i] - b[i]) : INFINITY);
    return w;
}

static attn_geom geom(int64_t s, int64_t s0) {
    return (attn_geom){.b = B, .s = s, .t = s, .n = N, .m = M, .d = D, .e = E, .group = N / M, .kv_heads = M, .scale = 0.4,
                       .causal = true, .p = 0.1, .key = 91, .s0 = s0, .t0 = s0, .heads = N, .queries = S, .keys = S};
}

// One pass of the ring: every rank's buffers in x[0..cp-1] move to the next rank.
static void pass(double **x, int cp) {
    double *last = x[cp - 1];
    for (int c = cp - 1; c > 0; c--) x[c] = x[c - 1];
    x[0] = last;
}

static void ring(int cp, const double *q, const double *k, const double *v, const double *dy, const double *y, const double *lse,
                 const double *dq, const double *dk, const double *dv) {
    const int64_t L = S / cp;
    double *qb[MAXCP], *kb[MAXCP], *vb[MAXCP], *dyb[MAXCP], *yr[MAXCP], *lr[MAXCP], *dqr[MAXCP], *dkr[MAXCP], *dvr[MAXCP];
    int skipped = 0;
    for (int c = 0; c < cp; c++) {
        qb[c] = rows(q, c * L, L, N, D), kb[c] = rows(k, c * L, L, M, D), vb[c] = rows(v, c * L, L, M, E);
        dyb[c] = rows(dy, c * L, L, N, E);
        yr[c] = calloc((size_t)(B * L * N * E), sizeof(double)), lr[c] = calloc((size_t)(B * N * L), sizeof(double));
        dqr[c] = calloc((size_t)(B * L * N * D), sizeof(double));
        dkr[c] = calloc((size_t)(B * L * M * D), sizeof(double)), dvr[c] = calloc((size_t)(B * L * M * E), sizeof(double));
    }
    attn_geom g0 = geom(L, 0);
    double *work = malloc(sizeof(double) * (size_t)rt_cpu_f64_attn_block_work(&g0));
    double *hk[MAXCP], *hv[MAXCP], *hdk[MAXCP], *hdv[MAXCP]; // what each rank holds now
    // forward: cp steps, a pass between two
    for (int c = 0; c < cp; c++) hk[c] = kb[c], hv[c] = vb[c];
    for (int j = 0; j < cp; j++) {
        if (j) pass(hk, cp), pass(hv, cp);
        for (int c = 0; c < cp; c++) {
            attn_geom g = geom(L, c * L);
            int64_t t0 = ((c * L - j * L) % S + S) % S; // from the rank's own block start, as a kernel would
            if (t0 > c * L + L - 1) { skipped++; continue; } // wholly above the diagonal
            attn_kv_block blk = {hk[c], hv[c], NULL, L, t0, 0};
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < N; h++)
                    for (int64_t i0 = 0; i0 < L; i0 += ATTN_BR) {
                        int64_t n = L - i0 < ATTN_BR ? L - i0 : ATTN_BR;
                        double po[ATTN_BR * E], pl[ATTN_BR];
                        double *o = yr[c] + ((b * L + i0) * N + h) * E, *l = lr[c] + (b * N + h) * L + i0;
                        rt_cpu_f64_attn_block_fwd(&g, &blk, qb[c], b, h, i0, n, j ? po : o, j ? E : N * E, j ? pl : l, work);
                        if (j) rt_cpu_f64_attn_merge(n, E, o, N * E, l, po, E, pl);
                    }
        }
    }
    double fwd = 0, bwd = 0;
    for (int c = 0; c < cp; c++) {
        double *yw = rows(y, c * L, L, N, E);
        fwd = fmax(fwd, worst(yw, yr[c], B * L * N * E));
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < N; h++) fwd = fmax(fwd, worst(lse + (b * N + h) * S + c * L, lr[c] + (b * N + h) * L, L));
        free(yw);
    }
    // backward: the blocks start home again; dk and dv travel with them, one pass more
    for (int c = 0; c < cp; c++) hk[c] = kb[c], hv[c] = vb[c], hdk[c] = dkr[c], hdv[c] = dvr[c];
    for (int j = 0; j < cp; j++) {
        if (j) pass(hk, cp), pass(hv, cp), pass(hdk, cp), pass(hdv, cp);
        for (int c = 0; c < cp; c++) {
            attn_geom g = geom(L, c * L);
            int64_t t0 = ((c * L - j * L) % S + S) % S;
            if (t0 > c * L + L - 1) continue;
            attn_kv_block blk = {hk[c], hv[c], NULL, L, t0, 0};
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < N; h++)
                    for (int64_t i0 = 0; i0 < L; i0 += ATTN_BR) {
                        int64_t n = L - i0 < ATTN_BR ? L - i0 : ATTN_BR;
                        double Dr[ATTN_BR];
                        for (int64_t r = 0; r < n; r++) {
                            Dr[r] = 0;
                            for (int64_t x = 0; x < E; x++)
                                Dr[r] += dyb[c][((b * L + i0 + r) * N + h) * E + x] * yr[c][((b * L + i0 + r) * N + h) * E + x];
                        }
                        rt_cpu_f64_attn_block_bwd(&g, &blk, qb[c], dyb[c], b, h, i0, n, lr[c] + (b * N + h) * L + i0, Dr,
                                                  dqr[c] + ((b * L + i0) * N + h) * D, N * D, hdk[c], hdv[c], NULL, work);
                    }
        }
    }
    pass(hdk, cp), pass(hdv, cp); // home: rank c holds its own block's sums
    for (int c = 0; c < cp; c++) {
        EXPECT(hdk[c] == dkr[c] && hdv[c] == dvr[c]);
        double *dqw = rows(dq, c * L, L, N, D), *dkw = rows(dk, c * L, L, M, D), *dvw = rows(dv, c * L, L, M, E);
        bwd = fmax(bwd, fmax(worst(dqw, dqr[c], B * L * N * D), fmax(worst(dkw, dkr[c], B * L * M * D), worst(dvw, dvr[c], B * L * M * E))));
        free(dqw), free(dkw), free(dvw);
    }
    if (fwd > 1e-12 || bwd > 1e-12) fprintf(stderr, "cp %d: forward %g, backward %g from one device\n", cp, fwd, bwd);
    EXPECT(fwd <= 1e-12);
    EXPECT(bwd <= 1e-12);
    EXPECT(skipped == cp * (cp - 1) / 2); // causal: the blocks of later ranks are never computed
    for (int c = 0; c < cp; c++) free(qb[c]), free(kb[c]), free(vb[c]), free(dyb[c]), free(yr[c]), free(lr[c]), free(dqr[c]), free(dkr[c]), free(dvr[c]);
    free(work);
}

int main(void) {
    uint64_t s = 1;
    double *q = fill(B * S * N * D, &s), *k = fill(B * S * M * D, &s), *v = fill(B * S * M * E, &s), *dy = fill(B * S * N * E, &s);
    // one device: the whole sequence as one block
    attn_geom g = geom(S, 0);
    double *work = malloc(sizeof(double) * (size_t)rt_cpu_f64_attn_block_work(&g));
    double *y = calloc(B * S * N * E, sizeof(double)), *lse = calloc(B * N * S, sizeof(double));
    double *dq = calloc(B * S * N * D, sizeof(double)), *dk = calloc(B * S * M * D, sizeof(double)), *dv = calloc(B * S * M * E, sizeof(double));
    attn_kv_block whole = {k, v, NULL, S, 0, 0};
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < N; h++)
            for (int64_t i0 = 0; i0 < S; i0 += ATTN_BR) {
                int64_t n = S - i0 < ATTN_BR ? S - i0 : ATTN_BR;
                double Dr[ATTN_BR], *o = y + ((b * S + i0) * N + h) * E, *l = lse + (b * N + h) * S + i0;
                rt_cpu_f64_attn_block_fwd(&g, &whole, q, b, h, i0, n, o, N * E, l, work);
                for (int64_t r = 0; r < n; r++) {
                    Dr[r] = 0;
                    for (int64_t x = 0; x < E; x++) Dr[r] += dy[((b * S + i0 + r) * N + h) * E + x] * o[r * N * E + x];
                }
                rt_cpu_f64_attn_block_bwd(&g, &whole, q, dy, b, h, i0, n, l, Dr, dq + ((b * S + i0) * N + h) * D, N * D, dk, dv, NULL, work);
            }
    double nz = 0;
    for (int64_t i = 0; i < B * S * M * D; i++) nz += fabs(dk[i]);
    EXPECT(nz > 0); // not vacuous
    ring(2, q, k, v, dy, y, lse, dq, dk, dv);
    ring(4, q, k, v, dy, y, lse, dq, dk, dv);
    free(q), free(k), free(v), free(dy), free(work), free(y), free(lse), free(dq), free(dk), free(dv);
    return test_summary();
}
