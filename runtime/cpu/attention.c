/*
 * cpu/attention.c: the CPU backend's attention, forward and backward. q, k, v [b,s,n,d] (n heads
 * of size d) -> softmax(scale q k^T) v per (batch, head), scale = attrs scale or, when that is 0
 * (the compiler never sets it), 1/sqrt(d); causal (attrs causal) masks keys after the query.
 * Each (batch, head) is an [s,d] matrix with row stride n d, so the products are strided GEMMs.
 * The backward recomputes the probabilities; scratch is two s x s matrices per call.
 */
#include "cpu.h"

#include <stdlib.h>

typedef struct attn_geom {
    int64_t b, s, n, d, ld;
    real scale;
    bool causal;
} attn_geom;

// Every operand is [b,s,n,d] like input `ref`.
static int attn_check(kctx *c, uint32_t ref, attn_geom *g) {
    const rt_view *q = &c->in[ref];
    if (cpu_rank_is(c, ref ? "input 1" : "input 0", q, 4, "[b,s,n,d]")) return -1;
    for (uint32_t i = 0; i < c->nin + c->nout; i++) {
        const rt_view *v = i < c->nin ? &c->in[i] : &c->out[i - c->nin];
        char what[32];
        snprintf(what, sizeof what, "%s %u", i < c->nin ? "input" : "output", i < c->nin ? i : i - c->nin);
        if (cpu_expect(c, what, v, cpu_shape_of(q))) return -1;
    }
    double sc = c->a->f[PLAN_AF_SCALE];
    *g = (attn_geom){.b = q->shape[0], .s = q->shape[1], .n = q->shape[2], .d = q->shape[3], .ld = q->shape[2] * q->shape[3],
                     .scale = (real)(sc != 0 ? sc : 1 / sqrt((double)(q->shape[3] > 0 ? q->shape[3] : 1))),
                     .causal = c->a->i[PLAN_AI_CAUSAL] != 0};
    return 0;
}

// p [s,s] = softmax(scale q k^T) of one head, keys after the query masked out when causal.
static void attn_probs(const attn_geom *g, const real *q, const real *k, real *p) {
    int64_t s = g->s;
    cpu_gemm(false, true, s, s, g->d, g->scale, q, g->ld, k, g->ld, 0, p, s);
    for (int64_t i = 0; i < s; i++) {
        real *row = p + i * s;
        int64_t len = g->causal ? i + 1 : s;
        real m = row[0];
        for (int64_t j = 1; j < len; j++) m = row[j] > m ? row[j] : m;
        double sum = 0;
        for (int64_t j = 0; j < len; j++) sum += row[j] = R_EXP(row[j] - m);
        real inv = (real)(1 / sum);
        for (int64_t j = 0; j < len; j++) row[j] *= inv;
        for (int64_t j = len; j < s; j++) row[j] = 0;
    }
}

// (q, k, v) -> softmax(scale q k^T) v.
int CPU_KERNEL(attention)(kctx *c) {
    attn_geom g;
    if (attn_check(c, 0, &g)) return -1;
    real *p = cpu_scratch(c, g.s * g.s);
    if (!p) return -1;
    const real *Q = cpu_r(&c->in[0]), *K = cpu_r(&c->in[1]), *V = cpu_r(&c->in[2]);
    real *Y = cpu_r(&c->out[0]);
    for (int64_t bi = 0; bi < g.b; bi++)
        for (int64_t h = 0; h < g.n; h++) {
            int64_t off = bi * g.s * g.ld + h * g.d;
            attn_probs(&g, Q + off, K + off, p);
            cpu_gemm(false, false, g.s, g.d, g.s, 1, p, g.s, V + off, g.ld, cpu_beta(c), Y + off, g.ld);
        }
    free(p);
    return 0;
}

// dS = P (dP - rowsum(dP P)), in place over dp.
static void attn_dscores(const attn_geom *g, const real *p, real *dp) {
    for (int64_t i = 0; i < g->s; i++) {
        const real *pr = p + i * g->s;
        real *dr = dp + i * g->s;
        double dot = 0;
        for (int64_t j = 0; j < g->s; j++) dot += (double)dr[j] * pr[j];
        for (int64_t j = 0; j < g->s; j++) dr[j] = pr[j] * (dr[j] - (real)dot);
    }
}

// (dy, q, k, v) -> (dq, dk, dv): dv = P^T dy, dP = dy v^T, dq = scale dS k, dk = scale dS^T q.
int CPU_KERNEL(attention_grad)(kctx *c) {
    attn_geom g;
    if (attn_check(c, 1, &g)) return -1;
    real *p = cpu_scratch(c, 2 * g.s * g.s);
    if (!p) return -1;
    real *dp = p + g.s * g.s, beta = cpu_beta(c);
    const real *DY = cpu_r(&c->in[0]), *Q = cpu_r(&c->in[1]), *K = cpu_r(&c->in[2]), *V = cpu_r(&c->in[3]);
    real *DQ = cpu_r(&c->out[0]), *DK = cpu_r(&c->out[1]), *DV = cpu_r(&c->out[2]);
    int64_t s = g.s, d = g.d, ld = g.ld;
    for (int64_t bi = 0; bi < g.b; bi++)
        for (int64_t h = 0; h < g.n; h++) {
            int64_t off = bi * s * ld + h * d;
            attn_probs(&g, Q + off, K + off, p);
            cpu_gemm(true, false, s, d, s, 1, p, s, DY + off, ld, beta, DV + off, ld);
            cpu_gemm(false, true, s, s, d, 1, DY + off, ld, V + off, ld, 0, dp, s);
            attn_dscores(&g, p, dp);
            cpu_gemm(false, false, s, d, s, g.scale, dp, s, K + off, ld, beta, DQ + off, ld);
            cpu_gemm(true, false, s, d, s, g.scale, dp, s, Q + off, ld, beta, DK + off, ld);
        }
    free(p);
    return 0;
}
