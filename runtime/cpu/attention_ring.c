/*
 * attention_ring.c: ring attention's per-step operators (--cp N --cp-form ring; compiler/ring.c
 * emits them), on the blockwise kernels of attention_flash.c.
 *
 * Each of the cp ranks holds its piece of the sequence of q, k and v (queries and keys c*L ..
 * c*L+L-1 on rank c). At ring step j the rank holds the k/v block of rank (c - j) mod cp, passed
 * along by the `shift` collective; its first global key is ((c - j) mod cp) * L, which a kernel
 * finds from its own piece's start s0 alone: (s0 - j L) mod S. So the operators take the rank's
 * own q, k and v (their views give the geometry: sizes, heads, global offsets) and the block in
 * hand (kb, vb: flat scratch of k's and v's local sizes), and the step j in attrs.i[START].
 *
 *   attention_block      q, k, v, kb, vb, [o, lse] -> o, lse: the queries against the block
 *                        (attn_block_fwd), merged with the steps before by log-sum-exp
 *                        (attn_merge); o [b,s,n,e], lse [b,n,s].
 *   attention_block_grad dy, q, k, v, y, lse, kb, vb, [dq, dkb, dvb] -> dq, dkb, dvb: the
 *                        backward against the block from the merged y and lse (attn_block_bwd),
 *                        added to the sums so far (dq the rank's; dkb, dvb travel with the block).
 *
 * A block wholly above the causal diagonal (every key after every query of the rank) is skipped:
 * its outputs are the sums so far. Neither operator accumulates into its outputs. Self-attention
 * only (q and k of one sequence, split alike); no bias (compiler/preserve.c refuses both).
 *
 * Zigzag (attrs i[END] = z, the chunks of the sequence's zigzag order, plan_zigzag_pos; 0: the
 * natural order): the sequence as stored is cut into z chunks and the rank with stored piece c
 * holds logical chunks c and z - 1 - c, so its queries and every block are two runs of logical
 * positions. Each step runs the pairs (query run, key run) that the causal mask does not wholly
 * mask, each at its logical positions: at step 0 the rank's own block (the first query run
 * against the first key run, the second against both); at step j > 0 from rank r = c - j, the
 * first key run against both query runs where r < c, else the second query run against both key
 * runs: half of a block at every step on every rank (Megatron-Core's and ring-flash-attention's
 * causal load balance). The dropout masks are those of the logical positions.
 */
#include "cpu/attention.h"

#include <string.h>

// The runs of one ring step: its query runs (local row offset, logical first query) and key runs
// (local key offset, logical first key); one of each in the natural order, two in zigzag.
typedef struct ring_runs {
    int nq, nk;
    int64_t qlen, klen;
    int64_t qrow[2], qpos[2], krow[2], kpos[2];
} ring_runs;

// The geometry of the rank's own q (input qi), k, v, and the runs of ring step attrs.i[START]:
// the block's first stored key is (s0 - j t) mod keys. -1 (with a message) where the views or the
// zigzag chunks do not fit.
static int ring_geom(kctx *c, uint32_t qi, attn_geom *g, ring_runs *rr) {
    kctx own = *c;
    rt_view y = c->in[qi];
    y.shape[3] = c->in[qi + 2].shape[3];
    y.full[3] = c->in[qi + 2].full[3];
    own.nin = qi + 3; // no bias
    if (qi == 0) own.out = &y;
    if (CPU_KERNEL(attn_geom_init)(&own, qi, g)) return -1;
    if (g->s != g->t || g->queries != g->keys || g->s0 != g->t0 || g->bias)
        return cpu_fail(c, "ring attention wants self-attention split alike: queries %lld of %lld from %lld, keys %lld of %lld from %lld",
                        (long long)g->s, (long long)g->queries, (long long)g->s0, (long long)g->t, (long long)g->keys, (long long)g->t0);
    if (c->acc) return cpu_fail(c, "a ring step does not add into its outputs");
    int64_t j = c->a->i[PLAN_AI_START], z = c->a->i[PLAN_AI_END], S = g->keys, L = g->s;
    int64_t kb0 = ((g->s0 - j * g->t) % S + S) % S; // the block's first stored key
    if (z == 0) {
        *rr = (ring_runs){.nq = 1, .nk = 1, .qlen = L, .klen = L, .qpos = {g->s0}, .kpos = {kb0}};
        g->t0 = kb0;
        return 0;
    }
    if (z < 4 || z % 2 || S % z || L * z != 2 * S || g->s0 % L)
        return cpu_fail(c, "zigzag of %lld chunks over %lld positions does not give this rank's %lld (from %lld) two whole chunks",
                        (long long)z, (long long)S, (long long)L, (long long)g->s0);
    int64_t h = L / 2, qc = g->s0 / h, kc = kb0 / h;
    *rr = (ring_runs){.nq = 2, .nk = 2, .qlen = h, .klen = h, .qrow = {0, h}, .krow = {0, h}};
    for (int x = 0; x < 2; x++) {
        rr->qpos[x] = plan_zigzag_pos((qc + x) * h, S, (uint32_t)z);
        rr->kpos[x] = plan_zigzag_pos((kc + x) * h, S, (uint32_t)z);
    }
    return 0;
}

// Whether key run kx keeps any key for query run qx (the causal mask's test on the run's last query).
static bool ring_pair(const attn_geom *g, const ring_runs *rr, int qx, int kx) {
    return !g->causal || rr->kpos[kx] <= rr->qpos[qx] + rr->qlen - 1;
}

// g for query run qx: its local rows qrow.. hold logical queries qpos..
static attn_geom ring_qgeom(const attn_geom *g, const ring_runs *rr, int qx) {
    attn_geom q = *g;
    q.s0 = rr->qpos[qx] - rr->qrow[qx];
    return q;
}

// Key run kx of the block (k, v: the whole block, [b,t,m,*]).
static attn_kv_block ring_kv(const attn_geom *g, const ring_runs *rr, int kx, const real *k, const real *v) {
    return (attn_kv_block){k + rr->krow[kx] * g->m * g->d, v + rr->krow[kx] * g->m * g->e, NULL, rr->klen, rr->kpos[kx], g->t};
}

// Whether no pair of the step keeps a key (causal: nothing to do).
static bool ring_skip(const attn_geom *g, const ring_runs *rr) {
    for (int qx = 0; qx < rr->nq; qx++)
        for (int kx = 0; kx < rr->nk; kx++)
            if (ring_pair(g, rr, qx, kx)) return false;
    return true;
}

// Fails unless view v holds n elements.
static int ring_size(kctx *c, const char *what, const rt_view *v, int64_t n) {
    if (cpu_numel(v) == n) return 0;
    return cpu_fail(c, "%s holds %lld elements; the block wants %lld", what, (long long)cpu_numel(v), (long long)n);
}

int CPU_KERNEL(attention_block)(kctx *c) {
    attn_geom g;
    ring_runs rr;
    if (ring_geom(c, 0, &g, &rr)) return -1;
    int64_t ny = g.b * g.s * g.n * g.e, nl = g.b * g.n * g.s;
    bool prev = c->nin > 5;
    if (ring_size(c, "the k block", &c->in[3], g.b * g.t * g.m * g.d) || ring_size(c, "the v block", &c->in[4], g.b * g.t * g.m * g.e) ||
        ring_size(c, "output 0 (o)", &c->out[0], ny) || ring_size(c, "output 1 (lse)", &c->out[1], nl) ||
        (prev && (ring_size(c, "input 5 (o)", &c->in[5], ny) || ring_size(c, "input 6 (lse)", &c->in[6], nl))))
        return -1;
    if (c->nin == 6) return cpu_fail(c, "the steps before give o and lse together");
    real *O = cpu_r(&c->out[0]), *L = cpu_r(&c->out[1]);
    if (prev) {
        memcpy(O, cpu_r(&c->in[5]), (size_t)ny * sizeof(real));
        memcpy(L, cpu_r(&c->in[6]), (size_t)nl * sizeof(real));
        if (ring_skip(&g, &rr)) return 0;
    } else if (ring_skip(&g, &rr)) {
        return cpu_fail(c, "the first step's block is the rank's own, never above the diagonal");
    } else {
        memset(O, 0, (size_t)ny * sizeof(real)); // merging into nothing yet: o 0, lse -inf
        for (int64_t x = 0; x < nl; x++) L[x] = (real)-INFINITY;
    }
    int64_t w = CPU_KERNEL(attn_block_work)(&g);
    real *work = cpu_scratch(c, w + ATTN_BR * (g.e + 1));
    if (!work) return -1;
    real *po = work + w, *pl = po + ATTN_BR * g.e;
    for (int qx = 0; qx < rr.nq; qx++) {
        attn_geom gq = ring_qgeom(&g, &rr, qx);
        for (int kx = 0; kx < rr.nk; kx++) {
            if (!ring_pair(&g, &rr, qx, kx)) continue;
            attn_kv_block kv = ring_kv(&g, &rr, kx, cpu_r(&c->in[3]), cpu_r(&c->in[4]));
            for (int64_t bi = 0; bi < g.b; bi++)
                for (int64_t h = 0; h < g.n; h++)
                    for (int64_t i0 = rr.qrow[qx], end = i0 + rr.qlen; i0 < end; i0 += ATTN_BR) {
                        int64_t rows = end - i0 < ATTN_BR ? end - i0 : ATTN_BR;
                        real *o = O + ((bi * g.s + i0) * g.n + h) * g.e, *l = L + (bi * g.n + h) * g.s + i0;
                        CPU_KERNEL(attn_block_fwd)(&gq, &kv, cpu_r(&c->in[0]), bi, h, i0, rows, po, g.e, pl, work);
                        CPU_KERNEL(attn_merge)(rows, g.e, o, g.n * g.e, l, po, g.e, pl);
                    }
        }
    }
    free(work);
    return 0;
}

int CPU_KERNEL(attention_block_grad)(kctx *c) {
    attn_geom g;
    ring_runs rr;
    if (ring_geom(c, 1, &g, &rr)) return -1;
    int64_t ny = g.b * g.s * g.n * g.e, nq = g.b * g.s * g.n * g.d, nk = g.b * g.t * g.m * g.d, nv = g.b * g.t * g.m * g.e;
    bool prev = c->nin > 8;
    if (c->nin != 8 && c->nin != 11) return cpu_fail(c, "the sums so far are dq, dkb and dvb together");
    if (ring_size(c, "input 4 (y)", &c->in[4], ny) || ring_size(c, "input 5 (lse)", &c->in[5], g.b * g.n * g.s) ||
        ring_size(c, "the k block", &c->in[6], nk) || ring_size(c, "the v block", &c->in[7], nv) ||
        ring_size(c, "output 0 (dq)", &c->out[0], nq) || ring_size(c, "output 1 (dkb)", &c->out[1], nk) ||
        ring_size(c, "output 2 (dvb)", &c->out[2], nv) ||
        (prev && (ring_size(c, "input 8 (dq)", &c->in[8], nq) || ring_size(c, "input 9 (dkb)", &c->in[9], nk) ||
                  ring_size(c, "input 10 (dvb)", &c->in[10], nv))))
        return -1;
    real *DQ = cpu_r(&c->out[0]), *DK = cpu_r(&c->out[1]), *DV = cpu_r(&c->out[2]);
    const int64_t n3[3] = {nq, nk, nv};
    for (int x = 0; x < 3; x++) {
        if (prev) memcpy(cpu_r(&c->out[x]), cpu_r(&c->in[8 + x]), (size_t)n3[x] * sizeof(real));
        else memset(cpu_r(&c->out[x]), 0, (size_t)n3[x] * sizeof(real));
    }
    if (ring_skip(&g, &rr)) return 0;
    int64_t w = CPU_KERNEL(attn_block_work)(&g);
    real *work = cpu_scratch(c, w + ATTN_BR);
    if (!work) return -1;
    real *D = work + w;
    const real *DY = cpu_r(&c->in[0]), *Q = cpu_r(&c->in[1]), *Y = cpu_r(&c->in[4]), *LSE = cpu_r(&c->in[5]);
    for (int qx = 0; qx < rr.nq; qx++) {
        attn_geom gq = ring_qgeom(&g, &rr, qx);
        for (int kx = 0; kx < rr.nk; kx++) {
            if (!ring_pair(&g, &rr, qx, kx)) continue;
            attn_kv_block kv = ring_kv(&g, &rr, kx, cpu_r(&c->in[6]), cpu_r(&c->in[7]));
            real *dk = DK + rr.krow[kx] * g.m * g.d, *dv = DV + rr.krow[kx] * g.m * g.e;
            for (int64_t bi = 0; bi < g.b; bi++)
                for (int64_t h = 0; h < g.n; h++)
                    for (int64_t i0 = rr.qrow[qx], end = i0 + rr.qlen; i0 < end; i0 += ATTN_BR) {
                        int64_t rows = end - i0 < ATTN_BR ? end - i0 : ATTN_BR;
                        for (int64_t r = 0; r < rows; r++) {
                            const real *dy = DY + ((bi * g.s + i0 + r) * g.n + h) * g.e, *y = Y + ((bi * g.s + i0 + r) * g.n + h) * g.e;
                            double dot = 0;
                            for (int64_t x = 0; x < g.e; x++) dot += (double)dy[x] * y[x];
                            D[r] = (real)dot;
                        }
                        CPU_KERNEL(attn_block_bwd)(&gq, &kv, Q, DY, bi, h, i0, rows, LSE + (bi * g.n + h) * g.s + i0, D,
                                                   DQ + ((bi * g.s + i0) * g.n + h) * g.d, g.n * g.d, dk, dv, NULL, work);
                    }
        }
    }
    free(work);
    return 0;
}
