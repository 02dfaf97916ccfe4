/*
 * kernels_ext.cu: the CUDA kernels of the operators that imported models need (runtime/ops.def's
 * last section): the unary math and its gradients, broadcasts and reductions through an axis map
 * (sub, div, masked_fill, expand, add and mul with a map, sum, mean, max, max_grad, reduce_sum
 * with a map), ne and one_hot. Launched by ops_ext.c.
 *
 * Like kernels.cu they are written to be obviously right rather than fast: one thread per
 * output element, loads and stores in any float dtype (common.cuh), and the CPU kernels' order
 * of operations. The unary math runs in double (the CPU kernels compute in double and round
 * once); a reduction walks its group in row-major order, accumulating in double. Never run on a
 * GPU at the time of writing (no GPU in the session that wrote them): the gpu suite's
 * tests/gpu_kernels.c holds a case for every one of them against the CPU kernels.
 */
#include "common.cuh"

static __device__ double un_f(int op, double x, double e) {
    switch (op) {
    case CK_UN_SIGMOID: return 1 / (1 + exp(-x));
    case CK_UN_TANH: return tanh(x);
    case CK_UN_EXP: return exp(x);
    case CK_UN_LOG: return log(x);
    case CK_UN_GELU_ERF: return 0.5 * x * (1 + erf(x * 0.70710678118654752440));
    case CK_UN_RSQRT: return 1 / sqrt(x);
    case CK_UN_SQRT: return sqrt(x);
    case CK_UN_SIN: return sin(x);
    case CK_UN_COS: return cos(x);
    case CK_UN_ERF: return erf(x);
    default: return pow(x, e);
    }
}

static __device__ double un_df(int op, double x, double e) {
    switch (op) {
    case CK_UN_SIGMOID: { double s = 1 / (1 + exp(-x)); return s * (1 - s); }
    case CK_UN_TANH: { double t = tanh(x); return 1 - t * t; }
    case CK_UN_EXP: return exp(x);
    case CK_UN_LOG: return 1 / x;
    case CK_UN_GELU_ERF: return 0.5 * (1 + erf(x * 0.70710678118654752440)) + x * 0.39894228040143267794 * exp(-0.5 * x * x);
    case CK_UN_RSQRT: return -0.5 / (x * sqrt(x));
    case CK_UN_SQRT: return 0.5 / sqrt(x);
    case CK_UN_SIN: return cos(x);
    case CK_UN_COS: return -sin(x);
    case CK_UN_ERF: return 1.12837916709551257390 * exp(-x * x); // 2/sqrt(pi)
    default: return e == 0 ? 0 : e * pow(x, e - 1);
    }
}

__global__ void k_unary(int op, bool grad, int64_t n, void *y, int ydt, const void *x, int xdt, const void *dy, int dydt, double e,
                        bool acc) {
    CK_FOR_EACH(i, n) {
        double v = (double)ld(x, i, xdt);
        double r = grad ? (double)ld(dy, i, dydt) * un_df(op, v, e) : un_f(op, v, e);
        put(y, i, ydt, (float)r, acc);
    }
}

extern "C" cudaError_t ck_unary(cudaStream_t st, int op, bool grad, int64_t n, void *y, int ydt, const void *x, int xdt, const void *dy,
                                int dydt, double e, bool acc) {
    if (n <= 0) return cudaSuccess;
    k_unary<<<ck_grid(n), CK_THREADS, 0, st>>>(op, grad, n, y, ydt, x, xdt, dy, dydt, e, acc);
    return cudaGetLastError();
}

// The small operand's flat index of big's flat index i.
static __device__ int64_t map_index(const ck_map &m, int64_t i) {
    int64_t k = 0;
    for (int d = m.rank - 1; d >= 0; d--) {
        int64_t c = i % m.shape[d];
        i /= m.shape[d];
        k += c * m.sst[d];
    }
    return k;
}

__global__ void k_mapped(int op, ck_map m, int64_t n, void *y, int ydt, const void *a, int adt, bool ua, const void *b, int bdt, bool ub,
                         float s, bool acc) {
    CK_FOR_EACH(i, n) {
        int64_t k = map_index(m, i);
        float bv = ld(b, k, bdt), r;
        switch (op) {
        case CK_MAP_ADD: r = (ua ? ld(a, i, adt) : 0.0f) + (ub ? bv : 0.0f); break;
        case CK_MAP_MUL: r = ld(a, i, adt) * bv; break;
        case CK_MAP_SUB: r = ld(a, i, adt) - bv; break;
        case CK_MAP_DIV: r = ld(a, i, adt) / bv; break;
        case CK_MAP_FILL: r = bv != 0 ? s : ld(a, i, adt); break;
        default: r = bv; break; // expand
        }
        put(y, i, ydt, r, acc);
    }
}

static int64_t map_numel(const ck_map *m) {
    int64_t n = 1;
    for (int d = 0; d < m->rank; d++) n *= m->shape[d];
    return n;
}

extern "C" cudaError_t ck_mapped(cudaStream_t st, int op, const ck_map *m, void *y, int ydt, const void *a, int adt, bool ua, const void *b,
                                 int bdt, bool ub, float s, bool acc) {
    int64_t n = map_numel(m);
    if (n <= 0) return cudaSuccess;
    k_mapped<<<ck_grid(n), CK_THREADS, 0, st>>>(op, *m, n, y, ydt, a, adt, ua, b, bdt, ub, s, acc);
    return cudaGetLastError();
}

// The big flat index of the first element of small's group k, and each reduced axis's big
// stride and size: the group is every combination of the reduced axes.
static __device__ int64_t group_base(const ck_map &m, int64_t k, int64_t *rstride, int64_t *rsize, int *nr) {
    int64_t big_stride = 1, base = 0;
    *nr = 0;
    for (int d = m.rank - 1; d >= 0; d--) {
        if (m.sst[d] == 0) {
            rstride[*nr] = big_stride, rsize[*nr] = m.shape[d], (*nr)++;
        } else {
            base += ((k / m.sst[d]) % m.shape[d]) * big_stride;
        }
        big_stride *= m.shape[d];
    }
    return base;
}

// The g-th element of a group (reduced axes' combination g, last axis fastest... in the order
// group_base listed them: innermost first).
static __device__ int64_t group_at(int64_t base, int64_t g, const int64_t *rstride, const int64_t *rsize, int nr) {
    int64_t off = base;
    for (int r = 0; r < nr; r++) {
        off += (g % rsize[r]) * rstride[r];
        g /= rsize[r];
    }
    return off;
}

__global__ void k_reduce_map(bool is_max, ck_map m, int64_t ny, const void *x, int xdt, void *y, int ydt, double count, bool acc) {
    CK_FOR_EACH(k, ny) {
        int64_t rstride[CK_MAX_RANK], rsize[CK_MAX_RANK];
        int nr;
        int64_t base = group_base(m, k, rstride, rsize, &nr), len = 1;
        for (int r = 0; r < nr; r++) len *= rsize[r];
        double acc_v = is_max ? -INFINITY : 0;
        for (int64_t g = 0; g < len; g++) {
            double v = (double)ld(x, group_at(base, g, rstride, rsize, nr), xdt);
            acc_v = is_max ? (v > acc_v ? v : acc_v) : acc_v + v;
        }
        put(y, k, ydt, (float)(acc_v / count), acc);
    }
}

extern "C" cudaError_t ck_reduce_map(cudaStream_t st, bool is_max, const ck_map *m, int64_t ny, const void *x, int xdt, void *y, int ydt,
                                     double count, bool acc) {
    if (ny <= 0) return cudaSuccess;
    k_reduce_map<<<ck_grid(ny), CK_THREADS, 0, st>>>(is_max, *m, ny, x, xdt, y, ydt, count, acc);
    return cudaGetLastError();
}

__global__ void k_max_grad(ck_map m, int64_t ny, const void *dy, int dydt, const void *x, int xdt, void *dx, int dxdt, bool acc) {
    CK_FOR_EACH(k, ny) {
        int64_t rstride[CK_MAX_RANK], rsize[CK_MAX_RANK];
        int nr;
        int64_t base = group_base(m, k, rstride, rsize, &nr), len = 1, arg = -1;
        for (int r = 0; r < nr; r++) len *= rsize[r];
        float best = 0;
        // The first maximum in big's row-major order (the CPU kernel's): the smallest flat index.
        for (int64_t g = 0; g < len; g++) {
            int64_t at = group_at(base, g, rstride, rsize, nr);
            float v = ld(x, at, xdt);
            if (arg < 0 || v > best || (v == best && at < arg)) best = v, arg = at;
        }
        float d = ld(dy, k, dydt);
        for (int64_t g = 0; g < len; g++) {
            int64_t at = group_at(base, g, rstride, rsize, nr);
            put(dx, at, dxdt, at == arg ? d : 0.0f, acc);
        }
    }
}

extern "C" cudaError_t ck_max_grad(cudaStream_t st, const ck_map *m, int64_t ny, const void *dy, int dydt, const void *x, int xdt, void *dx,
                                   int dxdt, bool acc) {
    if (ny <= 0) return cudaSuccess;
    k_max_grad<<<ck_grid(ny), CK_THREADS, 0, st>>>(*m, ny, dy, dydt, x, xdt, dx, dxdt, acc);
    return cudaGetLastError();
}

__global__ void k_ne(int64_t n, const int32_t *x, double v, void *y, int ydt, bool acc) {
    CK_FOR_EACH(i, n) put(y, i, ydt, (double)x[i] != v ? 1.0f : 0.0f, acc);
}

extern "C" cudaError_t ck_ne(cudaStream_t st, int64_t n, const int32_t *x, double v, void *y, int ydt, bool acc) {
    if (n <= 0) return cudaSuccess;
    k_ne<<<ck_grid(n), CK_THREADS, 0, st>>>(n, x, v, y, ydt, acc);
    return cudaGetLastError();
}

__global__ void k_one_hot(int64_t n, int64_t nc, int64_t lo, int64_t classes, const int32_t *ids, void *y, int ydt, bool acc, int *flag) {
    CK_FOR_EACH(e, n * nc) {
        int64_t i = e / nc, j = e % nc;
        int32_t id = ids[i];
        if (id < 0 || id >= classes) raise_flag(flag, CK_FLAG_LABEL);
        put(y, e, ydt, id == lo + j ? 1.0f : 0.0f, acc);
    }
}

extern "C" cudaError_t ck_one_hot(cudaStream_t st, int64_t n, int64_t nc, int64_t lo, int64_t classes, const int32_t *ids, void *y, int ydt,
                                  bool acc, int *flag) {
    if (n <= 0 || nc <= 0) return cudaSuccess;
    k_one_hot<<<ck_grid(n * nc), CK_THREADS, 0, st>>>(n, nc, lo, classes, ids, y, ydt, acc, flag);
    return cudaGetLastError();
}

__global__ void k_topk(int64_t rows, int64_t n, int64_t k, const void *x, int xdt, void *v, int vdt, int32_t *idx, bool acc) {
    CK_FOR_EACH(r, rows) {
        for (int64_t j = 0; j < k; j++) {
            int64_t best = -1;
            float bv = 0;
            for (int64_t e = 0; e < n; e++) {
                bool taken = false;
                for (int64_t q = 0; q < j && !taken; q++) taken = idx[r * k + q] == e;
                float xe = ld(x, r * n + e, xdt);
                if (!taken && (best < 0 || xe > bv)) best = e, bv = xe;
            }
            idx[r * k + j] = (int32_t)best;
            put(v, r * k + j, vdt, bv, acc);
        }
    }
}

extern "C" cudaError_t ck_topk(cudaStream_t st, int64_t rows, int64_t n, int64_t k, const void *x, int xdt, void *v, int vdt, int32_t *idx,
                               bool acc) {
    if (rows <= 0 || k <= 0) return cudaSuccess;
    k_topk<<<ck_grid(rows), CK_THREADS, 0, st>>>(rows, n, k, x, xdt, v, vdt, idx, acc);
    return cudaGetLastError();
}

// One thread per row: zero the row (unless accumulating), then add dy at each index in order.
__global__ void k_topk_grad(int64_t rows, int64_t n, int64_t k, const void *dy, int dydt, const int32_t *idx, void *dx, int dxdt, bool acc,
                            int *flag) {
    CK_FOR_EACH(r, rows) {
        if (!acc)
            for (int64_t e = 0; e < n; e++) st(dx, r * n + e, dxdt, 0.0f);
        for (int64_t j = 0; j < k; j++) {
            int32_t e = idx[r * k + j];
            if (e < 0 || e >= n) {
                raise_flag(flag, CK_FLAG_LABEL);
                continue;
            }
            put(dx, r * n + e, dxdt, ld(dy, r * k + j, dydt), true);
        }
    }
}

extern "C" cudaError_t ck_topk_grad(cudaStream_t st, int64_t rows, int64_t n, int64_t k, const void *dy, int dydt, const int32_t *idx, void *dx,
                                    int dxdt, bool acc, int *flag) {
    if (rows <= 0) return cudaSuccess;
    k_topk_grad<<<ck_grid(rows), CK_THREADS, 0, st>>>(rows, n, k, dy, dydt, idx, dx, dxdt, acc, flag);
    return cudaGetLastError();
}

/* ---- attention in its general form (cross lengths, grouped-query heads, a bias): one thread
 * per query row; the probabilities (and for the backward dS) kept in scratch [b,n,s,t] ---- */

static __device__ int64_t attn_kv(const ck_attn *a, int64_t h) { return (a->q_head0 + h) / a->group - a->k_head0; }

// Row (bi, h, i) of P = softmax(scale q k^T + bias) into p (t floats).
static __device__ void attn_row(const ck_attn *a, int64_t bi, int64_t h, int64_t i, float *p) {
    int64_t kv = attn_kv(a, h), last = a->s0 + i - a->t0; // causal: keys past the query, globally
    int64_t len = a->causal ? (last < 0 ? 0 : last + 1 < a->t ? last + 1 : a->t) : a->t;
    float mx = -INFINITY;
    for (int64_t j = 0; j < len; j++) {
        double sdot = 0;
        for (int64_t c = 0; c < a->d; c++)
            sdot += (double)ld(a->q, ((bi * a->s + i) * a->n + h) * a->d + c, a->dt) * ld(a->k, ((bi * a->t + j) * a->m + kv) * a->d + c, a->dt);
        float x = (float)(a->scale * sdot);
        if (a->bias) x += ld(a->bias, bi * a->bst[0] + h * a->bst[1] + i * a->bst[2] + j * a->bst[3], a->bdt);
        p[j] = x;
        mx = fmaxf(mx, x);
    }
    double sum = 0;
    for (int64_t j = 0; j < len; j++) sum += p[j] = expf(p[j] - mx);
    for (int64_t j = 0; j < a->t; j++) p[j] = j < len ? (float)(p[j] / sum) : 0.0f;
}

__global__ void k_attn_fwd(ck_attn a, float *P, void *y, int ydt, bool acc) {
    CK_FOR_EACH(r, a.b * a.n * a.s) {
        int64_t i = r % a.s, h = (r / a.s) % a.n, bi = r / (a.s * a.n), kv = attn_kv(&a, h);
        float *p = P + r * a.t;
        attn_row(&a, bi, h, i, p);
        for (int64_t j = 0; a.p > 0 && j < a.t; j++) p[j] *= ck_attn_keep(&a, bi, h, i, j);
        for (int64_t c = 0; c < a.e; c++) {
            double o = 0;
            for (int64_t j = 0; j < a.t; j++) o += (double)p[j] * ld(a.v, ((bi * a.t + j) * a.m + kv) * a.e + c, a.dt);
            put(y, ((bi * a.s + i) * a.n + h) * a.e + c, ydt, (float)o, acc);
        }
    }
}

extern "C" cudaError_t ck_attention(cudaStream_t st, const ck_attn *a, float *scratch, void *y, int ydt, bool acc) {
    int64_t rows = a->b * a->n * a->s;
    if (rows <= 0) return cudaSuccess;
    k_attn_fwd<<<ck_grid(rows), CK_THREADS, 0, st>>>(*a, scratch, y, ydt, acc);
    return cudaGetLastError();
}

// Per query row: P, dS = P (dP - rowsum(dP P)) with dP = dy v^T (times the dropout mask, and P
// then times it too: what k_attn_kv's dv reads), and dq = scale dS k.
__global__ void k_attn_rows(ck_attn a, float *P, float *DS, const void *dy, void *dq, int dqdt, bool acc) {
    CK_FOR_EACH(r, a.b * a.n * a.s) {
        int64_t i = r % a.s, h = (r / a.s) % a.n, bi = r / (a.s * a.n), kv = attn_kv(&a, h);
        float *p = P + r * a.t, *ds = DS + r * a.t;
        attn_row(&a, bi, h, i, p);
        double dot = 0;
        for (int64_t j = 0; j < a.t; j++) {
            double g = 0;
            for (int64_t c = 0; c < a.e; c++)
                g += (double)ld(dy, ((bi * a.s + i) * a.n + h) * a.e + c, a.dt) * ld(a.v, ((bi * a.t + j) * a.m + kv) * a.e + c, a.dt);
            if (a.p > 0) g = (double)((float)g * ck_attn_keep(&a, bi, h, i, j));
            ds[j] = (float)g;
            dot += g * p[j];
        }
        for (int64_t j = 0; j < a.t; j++) ds[j] = p[j] * (ds[j] - (float)dot);
        for (int64_t j = 0; a.p > 0 && j < a.t; j++) p[j] *= ck_attn_keep(&a, bi, h, i, j);
        for (int64_t c = 0; dq && c < a.d; c++) {
            double g = 0;
            for (int64_t j = 0; j < a.t; j++) g += (double)ds[j] * ld(a.k, ((bi * a.t + j) * a.m + kv) * a.d + c, a.dt);
            put(dq, ((bi * a.s + i) * a.n + h) * a.d + c, dqdt, (float)(a.scale * g), acc);
        }
    }
}

// Per key row (bi, kv, j): dv = sum over its query heads and rows of P dy, dk = scale sum dS q.
__global__ void k_attn_kv(ck_attn a, const float *P, const float *DS, const void *dy, void *dk, void *dv, int gdt, bool acc) {
    CK_FOR_EACH(r, a.b * a.m * a.t) {
        int64_t j = r % a.t, kv = (r / a.t) % a.m, bi = r / (a.t * a.m);
        for (int64_t c = 0; c < a.e + a.d; c++) {
            double g = 0;
            for (int64_t h = 0; h < a.n; h++) {
                if (attn_kv(&a, h) != kv) continue;
                for (int64_t i = 0; i < a.s; i++) {
                    int64_t row = (bi * a.n + h) * a.s + i;
                    g += c < a.e ? (double)P[row * a.t + j] * ld(dy, ((bi * a.s + i) * a.n + h) * a.e + c, a.dt)
                                 : (double)DS[row * a.t + j] * ld(a.q, ((bi * a.s + i) * a.n + h) * a.d + (c - a.e), a.dt);
                }
            }
            if (c < a.e) put(dv, ((bi * a.t + j) * a.m + kv) * a.e + c, gdt, (float)g, acc);
            else put(dk, ((bi * a.t + j) * a.m + kv) * a.d + (c - a.e), gdt, (float)(a.scale * g), acc);
        }
    }
}

// dbias: per bias element, dS summed over the score positions that map to it.
__global__ void k_attn_dbias(ck_attn a, const float *DS, int64_t nb, const int64_t *bshape, void *db, bool acc) {
    CK_FOR_EACH(e, nb) {
        double g = 0;
        for (int64_t r = 0; r < a.b * a.n * a.s * a.t; r++) {
            int64_t j = r % a.t, i = (r / a.t) % a.s, h = (r / (a.t * a.s)) % a.n, bi = r / (a.t * a.s * a.n);
            if (bi * a.bst[0] + h * a.bst[1] + i * a.bst[2] + j * a.bst[3] == e) g += DS[r];
        }
        put(db, e, a.bdt, (float)g, acc);
    }
}

extern "C" cudaError_t ck_attention_grad(cudaStream_t st, const ck_attn *a, float *scratch, const void *dy, void *dq, void *dk, void *dv,
                                         int gdt, void *db, int64_t nb, bool acc) {
    int64_t rows = a->b * a->n * a->s;
    if (rows <= 0) return cudaSuccess;
    float *P = scratch, *DS = scratch + rows * a->t;
    k_attn_rows<<<ck_grid(rows), CK_THREADS, 0, st>>>(*a, P, DS, dy, dq, gdt, acc);
    if (dk) k_attn_kv<<<ck_grid(a->b * a->m * a->t), CK_THREADS, 0, st>>>(*a, P, DS, dy, dk, dv, gdt, acc);
    if (db && nb > 0) k_attn_dbias<<<ck_grid(nb), CK_THREADS, 0, st>>>(*a, DS, nb, NULL, db, acc);
    return cudaGetLastError();
}

/* ---- gather and index_select (cpu/reduce.c's semantics) ---- */

// x's flat index of y's element e: the same coordinates, the axis's read from idx.
static __device__ int64_t gather_src(const ck_gather_args &g, int64_t e, int *bad) {
    int64_t rest = e, xi = 0, a = 0;
    for (int i = 0; i < g.rank; i++) {
        int64_t coord = rest / g.ys[i];
        rest %= g.ys[i];
        if (i == g.axis) a = coord;
        else xi += coord * g.xs[i];
    }
    int64_t r = g.sel ? g.idx[a] : g.idx[e];
    if (r < 0 || r >= g.rows) {
        *bad = 1;
        r = 0;
    }
    return xi + r * g.xs[g.axis];
}

__global__ void k_gather(ck_gather_args g, const void *x, int xdt, void *y, int ydt, bool acc, int *flag) {
    CK_FOR_EACH(e, g.n) {
        int bad = 0;
        int64_t xi = gather_src(g, e, &bad);
        if (bad) raise_flag(flag, CK_FLAG_EMBEDDING_ID);
        put(y, e, ydt, bad ? 0.0f : ld(x, xi, xdt), acc);
    }
}

__global__ void k_gather_grad(ck_gather_args g, const void *dy, int dydt, float *dx, int *flag) {
    CK_FOR_EACH(e, g.n) {
        int bad = 0;
        int64_t xi = gather_src(g, e, &bad);
        if (bad) raise_flag(flag, CK_FLAG_EMBEDDING_ID);
        else atomicAdd(dx + xi, ld(dy, e, dydt));
    }
}

extern "C" cudaError_t ck_gather(cudaStream_t st, const ck_gather_args *g, const void *x, int xdt, void *y, int ydt, bool acc, int *flag) {
    if (g->n <= 0) return cudaSuccess;
    k_gather<<<ck_grid(g->n), CK_THREADS, 0, st>>>(*g, x, xdt, y, ydt, acc, flag);
    return cudaGetLastError();
}

extern "C" cudaError_t ck_gather_grad(cudaStream_t st, const ck_gather_args *g, const void *dy, int dydt, float *dx, int64_t nx, bool acc,
                                      int *flag) {
    if (!acc && nx > 0) {
        cudaError_t e = cudaMemsetAsync(dx, 0, (size_t)nx * sizeof(float), st);
        if (e != cudaSuccess) return e;
    }
    if (g->n <= 0) return cudaSuccess;
    k_gather_grad<<<ck_grid(g->n), CK_THREADS, 0, st>>>(*g, dy, dydt, dx, flag);
    return cudaGetLastError();
}
