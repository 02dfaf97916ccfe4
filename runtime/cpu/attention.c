/*
 * cpu/attention.c: the CPU backend's attention, forward and backward, in its general form:
 * q [b,s,n,d], k [b,t,m,d], v [b,t,m,e] -> y [b,s,n,e], y = softmax(scale q k^T + bias) v per
 * (batch, query head), where
 *   - the key/value length t may differ from the query length s (cross-attention);
 *   - n query heads share m key/value heads, n a multiple of m (grouped-query attention): query
 *     head h (global index, from q's view start) reads kv head h / (n/m) (global; the local one
 *     from k's view start), so a split of the query heads over ranks that keep every kv head,
 *     or split the kv heads alike, computes the same;
 *   - scale is attrs scale, or 1/sqrt(d) when that is 0;
 *   - causal (attrs causal) masks key j > query i, counted globally from the views' start
 *     (top-left aligned, PyTorch's is_causal, on the whole tensor);
 *   - an optional fourth input is an additive bias whose axes are some of the scores' [b,n,s,t]
 *     (attrs perm, cpu_map_strides: padding masks, relative position biases, pair biases).
 * Each (batch, head) is a matrix with a row stride of heads x width, so the products are strided
 * GEMMs. The backward recomputes the probabilities: attention_grad (dy, q, k, v[, bias]) ->
 * dq, dk, dv (dk and dv summed over the query heads that share them: zeroed first unless
 * accumulating), attention_grad_bias (dy, q, k, v, bias) -> dbias (dS summed over the axes the
 * bias lacks). Scratch is two s x t matrices and a row of t per call.
 * attrs mode PLAN_ATTN_FLASH hands each operator to attention_flash.c's blockwise kernels (the
 * same function without the s x t scratch); attention.h holds what both forms share.
 *
 * Dropout of the probabilities (attrs p, Megatron-LM's attention_dropout): O = (P . M) V with
 * M = keep / (1 - p) per element, drawn from rt.h's counter-based generator keyed by (the run's
 * seed, attrs seed, step, micro-batch, block copy) and the GLOBAL index ((batch x heads + head)
 * x queries + query) x keys + key, from the views' start and full. So a split of the batch, the
 * heads, the queries or the keys, a recompute and the backward all draw the same mask. The
 * backward regenerates M rather than reading a stored one, as FlashAttention does with its
 * Philox offsets (Megatron-LM's unfused path stores it instead; compiler/cost.c counts that):
 * dV = (P . M)^T dY, dP = (dY V^T) . M, dS = P (dP - rowsum(dP P)). Masked-out (causal) keys
 * draw a value too but hold 0 either way.
 */
#include "attention.h"

#include <stdlib.h>

int CPU_KERNEL(attn_geom_init)(kctx *c, uint32_t qi, attn_geom *g) {
    const rt_view *q = &c->in[qi], *k = &c->in[qi + 1], *v = &c->in[qi + 2];
    const rt_view *y = qi ? &c->in[0] : &c->out[0];
    if (cpu_rank_is(c, "the query", q, 4, "[b,s,n,d]") || cpu_rank_is(c, "the keys", k, 4, "[b,t,m,d]") ||
        cpu_rank_is(c, "the values", v, 4, "[b,t,m,e]") || cpu_rank_is(c, qi ? "dy" : "output 0", y, 4, "[b,s,n,e]"))
        return -1;
    *g = (attn_geom){.b = q->shape[0], .s = q->shape[1], .n = q->shape[2], .d = q->shape[3], .t = k->shape[1], .m = k->shape[2],
                     .e = v->shape[3], .q_head0 = q->start[2], .k_head0 = k->start[2], .kv_heads = k->full[2]};
    if (cpu_expect(c, "the keys", k, (kshape){4, {g->b, g->t, g->m, g->d}}) || cpu_expect(c, "the values", v, (kshape){4, {g->b, g->t, g->m, g->e}}) ||
        cpu_expect(c, qi ? "dy" : "output 0", y, (kshape){4, {g->b, g->s, g->n, g->e}}))
        return -1;
    if (g->kv_heads <= 0 || q->full[2] % g->kv_heads != 0)
        return cpu_fail(c, "%lld query heads are not a multiple of %lld kv heads", (long long)q->full[2], (long long)g->kv_heads);
    g->group = q->full[2] / g->kv_heads;
    for (int64_t h = 0; h < g->n; h++) {
        int64_t kv = (g->q_head0 + h) / g->group - g->k_head0;
        if (kv < 0 || kv >= g->m)
            return cpu_fail(c, "query head %lld reads kv head %lld, which this piece of the keys (heads %lld..%lld) does not hold",
                            (long long)(g->q_head0 + h), (long long)(kv + g->k_head0), (long long)g->k_head0, (long long)(g->k_head0 + g->m - 1));
    }
    uint32_t bi = qi + 3;
    if (bi < c->nin) {
        rt_view scores = {.rank = 4, .shape = {g->b, g->n, g->s, g->t}};
        if (cpu_map(c, &scores, "the scores [b,n,s,t]", &c->in[bi], "the bias", g->bst)) return -1;
        g->bias = cpu_r(&c->in[bi]);
    }
    double sc = c->a->f[PLAN_AF_SCALE];
    g->scale = (real)(sc != 0 ? sc : 1 / sqrt((double)(g->d > 0 ? g->d : 1)));
    g->causal = c->a->i[PLAN_AI_CAUSAL] != 0;
    g->p = c->a->f[PLAN_AF_P];
    if (!(g->p >= 0 && g->p < 1)) return cpu_fail(c, "dropout p = %g; the drop probability must be in [0, 1)", g->p);
    const rt_kernel *kk = c->k;
    g->key = rt_key(rt_key(rt_key(rt_key(kk->seed, (uint64_t)c->a->i[PLAN_AI_SEED]), kk->step), kk->mb), kk->layer);
    g->b0 = q->start[0], g->s0 = q->start[1], g->t0 = k->start[1];
    g->heads = q->full[2], g->queries = q->full[1], g->keys = k->full[1];
    return 0;
}

// The dropout factors of row i (local query) of batch bi, head h (local): 0 or 1 / (1 - p).
static void attn_mask_row(const attn_geom *g, int64_t bi, int64_t h, int64_t i, real *m) { attn_mask_keys(g, bi, h, i, g->t0, g->t, m); }

// p [s,t] *= the mask of batch bi, head h (m: t reals of scratch).
static void attn_drop(const attn_geom *g, int64_t bi, int64_t h, real *p, real *m) {
    for (int64_t i = 0; i < g->s; i++) {
        attn_mask_row(g, bi, h, i, m);
        for (int64_t j = 0; j < g->t; j++) p[i * g->t + j] *= m[j];
    }
}

// p [s,t] = softmax(scale q k^T + bias) of batch bi, query head h (kv head kv).
static void attn_probs(const attn_geom *g, const real *q, const real *k, int64_t bi, int64_t h, real *p) {
    int64_t s = g->s, t = g->t;
    cpu_gemm(false, true, s, t, g->d, g->scale, q, g->n * g->d, k, g->m * g->d, 0, p, t);
    for (int64_t i = 0; i < s; i++) {
        real *row = p + i * t;
        if (g->bias) {
            const real *br = g->bias + bi * g->bst[0] + h * g->bst[1] + i * g->bst[2];
            for (int64_t j = 0; j < t; j++) row[j] += br[j * g->bst[3]];
        }
        int64_t len = attn_keys_kept(g, i, g->t0, t);
        real mx = len ? row[0] : 0;
        for (int64_t j = 1; j < len; j++) mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < len; j++) sum += row[j] = R_EXP(row[j] - mx);
        real inv = (real)(sum > 0 ? 1 / sum : 0);
        for (int64_t j = 0; j < len; j++) row[j] *= inv;
        for (int64_t j = len; j < t; j++) row[j] = 0;
    }
}

// (q, k, v[, bias]) -> softmax(scale q k^T + bias) v.
int CPU_KERNEL(attention)(kctx *c) {
    attn_geom g;
    if (CPU_KERNEL(attn_geom_init)(c, 0, &g)) return -1;
    if (c->a->i[PLAN_AI_MODE] == PLAN_ATTN_FLASH) return CPU_KERNEL(attention_flash)(c, &g);
    real *p = cpu_scratch(c, g.s * g.t + g.t);
    if (!p) return -1;
    const real *Q = cpu_r(&c->in[0]), *K = cpu_r(&c->in[1]), *V = cpu_r(&c->in[2]);
    real *Y = cpu_r(&c->out[0]);
    for (int64_t bi = 0; bi < g.b; bi++)
        for (int64_t h = 0; h < g.n; h++) {
            int64_t kv = attn_kv(&g, h);
            attn_probs(&g, Q + bi * g.s * g.n * g.d + h * g.d, K + bi * g.t * g.m * g.d + kv * g.d, bi, h, p);
            if (g.p > 0) attn_drop(&g, bi, h, p, p + g.s * g.t);
            cpu_gemm(false, false, g.s, g.e, g.t, 1, p, g.t, V + bi * g.t * g.m * g.e + kv * g.e, g.m * g.e, cpu_beta(c),
                     Y + bi * g.s * g.n * g.e + h * g.e, g.n * g.e);
        }
    free(p);
    return 0;
}

// dS = P (dP - rowsum(dP P)), in place over dp. With dropout, dp holds dY V^T (the gradient of
// the dropped probabilities): each row is first multiplied by its mask, and p becomes P . M (what
// dV reads); m is t reals of scratch.
static void attn_dscores(const attn_geom *g, int64_t bi, int64_t h, real *p, real *dp, real *m) {
    for (int64_t i = 0; i < g->s; i++) {
        real *pr = p + i * g->t, *dr = dp + i * g->t;
        if (g->p > 0) {
            attn_mask_row(g, bi, h, i, m);
            for (int64_t j = 0; j < g->t; j++) dr[j] *= m[j];
        }
        double dot = 0;
        for (int64_t j = 0; j < g->t; j++) dot += (double)dr[j] * pr[j];
        for (int64_t j = 0; j < g->t; j++) dr[j] = pr[j] * (dr[j] - (real)dot);
        if (g->p > 0)
            for (int64_t j = 0; j < g->t; j++) pr[j] *= m[j];
    }
}

// dS of batch bi, head h into dp; p: the probabilities, recomputed, as dV reads them (dropped).
static void attn_ds(const attn_geom *g, const real *DY, const real *Q, const real *K, const real *V, int64_t bi, int64_t h, real *p,
                    real *dp) {
    int64_t kv = attn_kv(g, h);
    attn_probs(g, Q + bi * g->s * g->n * g->d + h * g->d, K + bi * g->t * g->m * g->d + kv * g->d, bi, h, p);
    cpu_gemm(false, true, g->s, g->t, g->e, 1, DY + bi * g->s * g->n * g->e + h * g->e, g->n * g->e, V + bi * g->t * g->m * g->e + kv * g->e,
             g->m * g->e, 0, dp, g->t);
    attn_dscores(g, bi, h, p, dp, dp + g->s * g->t);
}

// (dy, q, k, v[, bias]) -> (dq, dk, dv): dv = P^T dy, dP = dy v^T, dq = scale dS k, dk = scale dS^T q.
int CPU_KERNEL(attention_grad)(kctx *c) {
    attn_geom g;
    if (CPU_KERNEL(attn_geom_init)(c, 1, &g)) return -1;
    for (uint32_t i = 0; i < 3; i++)
        if (cpu_like(c, i == 0 ? "dq" : i == 1 ? "dk" : "dv", &c->out[i], &c->in[1 + i])) return -1;
    if (c->a->i[PLAN_AI_MODE] == PLAN_ATTN_FLASH) {
        cpu_clear(c, 1), cpu_clear(c, 2);
        return CPU_KERNEL(attention_grad_flash)(c, &g, cpu_r(&c->out[0]), cpu_r(&c->out[1]), cpu_r(&c->out[2]), NULL);
    }
    real *p = cpu_scratch(c, 2 * g.s * g.t + g.t);
    if (!p) return -1;
    real *dp = p + g.s * g.t;
    const real *DY = cpu_r(&c->in[0]), *Q = cpu_r(&c->in[1]), *K = cpu_r(&c->in[2]), *V = cpu_r(&c->in[3]);
    real *DQ = cpu_r(&c->out[0]), *DK = cpu_r(&c->out[1]), *DV = cpu_r(&c->out[2]);
    cpu_clear(c, 1), cpu_clear(c, 2); // dk and dv gather the query heads of their group
    for (int64_t bi = 0; bi < g.b; bi++)
        for (int64_t h = 0; h < g.n; h++) {
            int64_t kv = attn_kv(&g, h), qo = bi * g.s * g.n * g.d + h * g.d, ko = bi * g.t * g.m * g.d + kv * g.d;
            attn_ds(&g, DY, Q, K, V, bi, h, p, dp);
            // p holds the probabilities as the forward multiplied V by (dropped), dp now dS
            cpu_gemm(true, false, g.t, g.e, g.s, 1, p, g.t, DY + bi * g.s * g.n * g.e + h * g.e, g.n * g.e, 1,
                     DV + bi * g.t * g.m * g.e + kv * g.e, g.m * g.e);
            cpu_gemm(false, false, g.s, g.d, g.t, g.scale, dp, g.t, K + ko, g.m * g.d, cpu_beta(c), DQ + qo, g.n * g.d);
            cpu_gemm(true, false, g.t, g.d, g.s, g.scale, dp, g.t, Q + qo, g.n * g.d, 1, DK + ko, g.m * g.d);
        }
    free(p);
    return 0;
}

// (dy, q, k, v, bias) -> dbias: dS summed over the axes the bias lacks.
int CPU_KERNEL(attention_grad_bias)(kctx *c) {
    attn_geom g;
    if (CPU_KERNEL(attn_geom_init)(c, 1, &g) || cpu_like(c, "output 0", &c->out[0], &c->in[4])) return -1;
    if (c->a->i[PLAN_AI_MODE] == PLAN_ATTN_FLASH) {
        cpu_clear(c, 0);
        return CPU_KERNEL(attention_grad_flash)(c, &g, NULL, NULL, NULL, cpu_r(&c->out[0]));
    }
    real *p = cpu_scratch(c, 2 * g.s * g.t + g.t);
    if (!p) return -1;
    real *dp = p + g.s * g.t, *DB = cpu_r(&c->out[0]);
    const real *DY = cpu_r(&c->in[0]), *Q = cpu_r(&c->in[1]), *K = cpu_r(&c->in[2]), *V = cpu_r(&c->in[3]);
    cpu_clear(c, 0);
    for (int64_t bi = 0; bi < g.b; bi++)
        for (int64_t h = 0; h < g.n; h++) {
            attn_ds(&g, DY, Q, K, V, bi, h, p, dp);
            real *base = DB + bi * g.bst[0] + h * g.bst[1];
            for (int64_t i = 0; i < g.s; i++)
                for (int64_t j = 0; j < g.t; j++) base[i * g.bst[2] + j * g.bst[3]] += dp[i * g.t + j];
        }
    free(p);
    return 0;
}
