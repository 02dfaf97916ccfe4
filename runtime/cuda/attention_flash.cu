/*
 * attention_flash.cu: attention in the FlashAttention manner on the GPU (attrs mode
 * PLAN_ATTN_FLASH), the same function as cpu/attention_flash.c and the general kernels of
 * kernels_ext.cu: cross lengths, grouped-query heads, scale, causal from the views' global
 * offsets, an additive bias with strides over [b,n,s,t], dropout drawn per global element
 * (ck_attn_keep, bit for bit the CPU's mask), accumulation; f32, f16 and bf16 operands (loads and
 * stores through common.cuh), arithmetic in float.
 *
 * Forward (k_flash_fwd): one thread block per (batch, query head, tile of FL_BR queries). The
 * block holds its query tile, one key tile and one value tile (FL_BC rows) in shared memory with
 * the tile's scores, and an output accumulator per row; each key tile updates every row's running
 * maximum and sum (online softmax) and rescales the accumulator. Key tiles wholly past the tile's
 * last query (causal) are skipped. Nothing of size s x t exists.
 * Backward (k_flash_bwd): one thread block per (batch, kv head, tile of FL_BC keys), looping over
 * the query heads that read that kv head and their query tiles, as FlashAttention-2's backward
 * does: P = exp(S - lse) recomputed per tile, dP = dy v^T (times the mask), dS = P (dP - D), dv
 * and dk gathered in shared memory and stored once, dq and dbias added into f32 scratch with
 * atomics (then stored in the operand's dtype). lse and D = rowsum(dy . y) come from the forward
 * run again first into scratch (the plan saves neither: cpu/attention_flash.c says why):
 * scratch is o [b,s,n,e] and lse [b,n,s] floats, plus dq like q and dbias like the bias, never
 * s x t.
 *
 * Shared memory per block is a few tiles of the head size (ck_flash_smem); above the default
 * 48 KiB the launch opts in (cudaFuncAttributeMaxDynamicSharedMemorySize). Written to be right
 * rather than fast (one thread per element of a tile's product; no tensor cores); never run on a
 * GPU in the session that wrote it (none was lent): tests/gpu_kernels.c holds its cases against
 * the CPU kernels.
 */
#include "common.cuh"

#define FL_BR 16      // query rows per tile
#define FL_BC 16      // keys per tile
#define FL_THREADS 128

static __device__ int64_t fl_kv(const ck_attn *a, int64_t h) { return (a->q_head0 + h) / a->group - a->k_head0; }

// Keys of local query i kept by the causal mask (the first of them; all t when not causal).
static __device__ int64_t fl_kept(const ck_attn *a, int64_t i) {
    if (!a->causal) return a->t;
    int64_t last = a->s0 + i - a->t0;
    return last < 0 ? 0 : last + 1 < a->t ? last + 1 : a->t;
}

static __device__ float fl_score(const ck_attn *a, const float *q, const float *k, int64_t bi, int64_t h, int64_t i, int64_t j) {
    float s = 0;
    for (int64_t x = 0; x < a->d; x++) s += q[x] * k[x];
    s *= a->scale;
    if (a->bias) s += ld(a->bias, bi * a->bst[0] + h * a->bst[1] + i * a->bst[2] + j * a->bst[3], a->bdt);
    return s;
}

// Loads rows r0 .. r0+rows-1 of a [b, len, heads, w] operand (batch bi, head hh) into sh [rows][w].
static __device__ void fl_load(float *sh, const void *x, int dt, int64_t bi, int64_t len, int64_t heads, int64_t hh, int64_t w, int64_t r0,
                               int64_t rows) {
    for (int64_t e = threadIdx.x; e < rows * w; e += blockDim.x) {
        int64_t r = e / w, c = e % w;
        sh[e] = ld(x, ((bi * len + r0 + r) * heads + hh) * w + c, dt);
    }
}

// Forward of one query tile; y: the output (ydt, acc), or NULL with o and lse (f32 scratch).
__global__ void k_flash_fwd(ck_attn a, void *y, int ydt, bool acc, float *o, float *lse) {
    extern __shared__ float sm[];
    int64_t tiles = (a.s + FL_BR - 1) / FL_BR, blk = blockIdx.x;
    int64_t i0 = (blk % tiles) * FL_BR, h = (blk / tiles) % a.n, bi = blk / (tiles * a.n), kh = fl_kv(&a, h);
    int64_t rows = a.s - i0 < FL_BR ? a.s - i0 : FL_BR;
    float *Q = sm, *K = Q + FL_BR * a.d, *V = K + FL_BC * a.d, *S = V + FL_BC * a.e, *O = S + FL_BR * FL_BC, *M = O + FL_BR * a.e,
          *L = M + FL_BR, *A = L + FL_BR;
    fl_load(Q, a.q, a.dt, bi, a.s, a.n, h, a.d, i0, rows);
    for (int64_t e = threadIdx.x; e < FL_BR * a.e; e += blockDim.x) O[e] = 0;
    if (threadIdx.x < FL_BR) M[threadIdx.x] = -INFINITY, L[threadIdx.x] = 0;
    __syncthreads();
    int64_t end = fl_kept(&a, i0 + rows - 1);
    for (int64_t j0 = 0; j0 < end; j0 += FL_BC) {
        int64_t cols = end - j0 < FL_BC ? end - j0 : FL_BC;
        fl_load(K, a.k, a.dt, bi, a.t, a.m, kh, a.d, j0, cols);
        fl_load(V, a.v, a.dt, bi, a.t, a.m, kh, a.e, j0, cols);
        __syncthreads();
        for (int64_t e = threadIdx.x; e < rows * FL_BC; e += blockDim.x) {
            int64_t r = e / FL_BC, c = e % FL_BC;
            S[e] = c < cols && j0 + c < fl_kept(&a, i0 + r) ? fl_score(&a, Q + r * a.d, K + c * a.d, bi, h, i0 + r, j0 + c) : -INFINITY;
        }
        __syncthreads();
        if (threadIdx.x < rows) { // one thread per row: the online softmax's update
            int64_t r = threadIdx.x;
            float *sr = S + r * FL_BC, mx = M[r];
            for (int64_t c = 0; c < cols; c++) mx = fmaxf(mx, sr[c]);
            float alpha = mx == -INFINITY || M[r] == -INFINITY ? 0.0f : expf(M[r] - mx), sum = 0;
            for (int64_t c = 0; c < FL_BC; c++) {
                float p = c < cols && sr[c] != -INFINITY ? expf(sr[c] - mx) : 0.0f;
                sum += p;
                sr[c] = a.p > 0 && p != 0 ? p * ck_attn_keep(&a, bi, h, i0 + r, j0 + c) : p;
            }
            L[r] = L[r] * alpha + sum, M[r] = mx, A[r] = alpha;
        }
        __syncthreads();
        for (int64_t e = threadIdx.x; e < rows * a.e; e += blockDim.x) {
            int64_t r = e / a.e, x = e % a.e;
            float acc2 = O[e] * A[r];
            for (int64_t c = 0; c < cols; c++) acc2 += S[r * FL_BC + c] * V[c * a.e + x];
            O[e] = acc2;
        }
        __syncthreads();
    }
    for (int64_t e = threadIdx.x; e < rows * a.e; e += blockDim.x) {
        int64_t r = e / a.e, x = e % a.e, row = (bi * a.s + i0 + r) * a.n + h;
        float v = L[r] > 0 ? O[e] / L[r] : 0.0f;
        if (y) put(y, row * a.e + x, ydt, v, acc);
        else o[row * a.e + x] = v;
    }
    if (!y && threadIdx.x < rows) {
        int64_t r = threadIdx.x;
        lse[(bi * a.n + h) * a.s + i0 + r] = L[r] > 0 ? M[r] + logf(L[r]) : -INFINITY;
    }
}

// Backward of one key tile of kv head kh, over every query head that reads it and every query
// tile that keeps one of its keys. lse, o: the forward's (scratch); dq, db: f32 scratch (added).
__global__ void k_flash_bwd(ck_attn a, const void *dy, const float *o, const float *lse, float *dq, void *dk, void *dv, int gdt, float *db,
                            bool acc) {
    extern __shared__ float sm[];
    int64_t tiles = (a.t + FL_BC - 1) / FL_BC, blk = blockIdx.x;
    int64_t j0 = (blk % tiles) * FL_BC, kh = (blk / tiles) % a.m, bi = blk / (tiles * a.m);
    int64_t cols = a.t - j0 < FL_BC ? a.t - j0 : FL_BC;
    float *K = sm, *V = K + FL_BC * a.d, *DK = V + FL_BC * a.e, *DV = DK + FL_BC * a.d, *Q = DV + FL_BC * a.e, *DY = Q + FL_BR * a.d,
          *P = DY + FL_BR * a.e, *DP = P + FL_BR * FL_BC, *LS = DP + FL_BR * FL_BC, *D = LS + FL_BR;
    fl_load(K, a.k, a.dt, bi, a.t, a.m, kh, a.d, j0, cols);
    fl_load(V, a.v, a.dt, bi, a.t, a.m, kh, a.e, j0, cols);
    for (int64_t e = threadIdx.x; e < FL_BC * (a.d + a.e); e += blockDim.x) DK[e] = 0; // DK and DV are adjacent
    __syncthreads();
    for (int64_t h = 0; h < a.n; h++) {
        if (fl_kv(&a, h) != kh) continue;
        for (int64_t i0 = 0; i0 < a.s; i0 += FL_BR) {
            int64_t rows = a.s - i0 < FL_BR ? a.s - i0 : FL_BR;
            if (fl_kept(&a, i0 + rows - 1) <= j0) continue; // causal: no query of the tile keeps these keys
            fl_load(Q, a.q, a.dt, bi, a.s, a.n, h, a.d, i0, rows);
            fl_load(DY, dy, a.dt, bi, a.s, a.n, h, a.e, i0, rows);
            if (threadIdx.x < rows) {
                int64_t r = threadIdx.x, row = (bi * a.s + i0 + r) * a.n + h;
                float dot = 0;
                for (int64_t x = 0; x < a.e; x++) dot += ld(dy, row * a.e + x, a.dt) * o[row * a.e + x];
                LS[r] = lse[(bi * a.n + h) * a.s + i0 + r], D[r] = dot;
            }
            __syncthreads();
            for (int64_t e = threadIdx.x; e < rows * FL_BC; e += blockDim.x) {
                int64_t r = e / FL_BC, c = e % FL_BC;
                bool kept = c < cols && j0 + c < fl_kept(&a, i0 + r) && LS[r] != -INFINITY;
                float p = kept ? expf(fl_score(&a, Q + r * a.d, K + c * a.d, bi, h, i0 + r, j0 + c) - LS[r]) : 0.0f, g = 0;
                for (int64_t x = 0; kept && x < a.e; x++) g += DY[r * a.e + x] * V[c * a.e + x];
                float keep = kept && a.p > 0 ? ck_attn_keep(&a, bi, h, i0 + r, j0 + c) : 1.0f;
                float ds = p * (g * keep - D[r]);
                P[e] = p * keep, DP[e] = ds;
                if (db && kept) atomicAdd(db + bi * a.bst[0] + h * a.bst[1] + (i0 + r) * a.bst[2] + (j0 + c) * a.bst[3], ds);
            }
            __syncthreads();
            for (int64_t e = threadIdx.x; e < cols * (a.d + a.e); e += blockDim.x) { // dk, dv rows of the tile
                int64_t c = e / (a.d + a.e), x = e % (a.d + a.e);
                float g = 0;
                if (x < a.d) {
                    for (int64_t r = 0; r < rows; r++) g += DP[r * FL_BC + c] * Q[r * a.d + x];
                    DK[c * a.d + x] += a.scale * g;
                } else {
                    for (int64_t r = 0; r < rows; r++) g += P[r * FL_BC + c] * DY[r * a.e + x - a.d];
                    DV[c * a.e + x - a.d] += g;
                }
            }
            for (int64_t e = threadIdx.x; dq && e < rows * a.d; e += blockDim.x) {
                int64_t r = e / a.d, x = e % a.d;
                float g = 0;
                for (int64_t c = 0; c < cols; c++) g += DP[r * FL_BC + c] * K[c * a.d + x];
                atomicAdd(dq + ((bi * a.s + i0 + r) * a.n + h) * a.d + x, a.scale * g);
            }
            __syncthreads();
        }
    }
    for (int64_t e = threadIdx.x; dk && e < cols * a.d; e += blockDim.x)
        put(dk, ((bi * a.t + j0 + e / a.d) * a.m + kh) * a.d + e % a.d, gdt, DK[e], acc);
    for (int64_t e = threadIdx.x; dv && e < cols * a.e; e += blockDim.x)
        put(dv, ((bi * a.t + j0 + e / a.e) * a.m + kh) * a.e + e % a.e, gdt, DV[e], acc);
}

__global__ void k_flash_put(int64_t n, const float *src, void *dst, int dt, bool acc) {
    CK_FOR_EACH(i, n) put(dst, i, dt, src[i], acc);
}

static size_t fwd_smem(const ck_attn *a) {
    return sizeof(float) * (size_t)(FL_BR * a->d + FL_BC * a->d + FL_BC * a->e + FL_BR * FL_BC + FL_BR * a->e + 3 * FL_BR);
}
static size_t bwd_smem(const ck_attn *a) {
    return sizeof(float) * (size_t)(2 * FL_BC * (a->d + a->e) + FL_BR * (a->d + a->e) + 2 * FL_BR * FL_BC + 2 * FL_BR);
}

extern "C" size_t ck_flash_smem(const ck_attn *a, bool grad) { return grad ? bwd_smem(a) : fwd_smem(a); }

extern "C" size_t ck_flash_scratch_bytes(const ck_attn *a, int64_t nb) {
    return sizeof(float) * (size_t)(a->b * a->s * a->n * (a->e + 1) + a->b * a->s * a->n * a->d + (nb > 0 ? nb : 0));
}

// Opts a kernel in to more than the default 48 KiB of shared memory where it needs it.
template <typename K> static cudaError_t fl_smem(K kernel, size_t bytes) {
    return bytes <= 48 * 1024 ? cudaSuccess : cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

static cudaError_t fl_fwd(cudaStream_t st, const ck_attn *a, void *y, int ydt, bool acc, float *o, float *lse) {
    int64_t blocks = a->b * a->n * ((a->s + FL_BR - 1) / FL_BR);
    if (blocks <= 0) return cudaSuccess;
    if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
    cudaError_t e = fl_smem(k_flash_fwd, fwd_smem(a));
    if (e != cudaSuccess) return e;
    k_flash_fwd<<<(unsigned)blocks, FL_THREADS, fwd_smem(a), st>>>(*a, y, ydt, acc, o, lse);
    return cudaGetLastError();
}

extern "C" cudaError_t ck_flash_attention(cudaStream_t st, const ck_attn *a, void *y, int ydt, bool acc) {
    return fl_fwd(st, a, y, ydt, acc, NULL, NULL);
}

extern "C" cudaError_t ck_flash_attention_grad(cudaStream_t st, const ck_attn *a, void *scratch, const void *dy, void *dq, void *dk, void *dv,
                                               int gdt, void *db, int64_t nb, bool acc) {
    int64_t rows = a->b * a->s * a->n;
    float *o = (float *)scratch, *lse = o + rows * a->e, *dqs = lse + rows, *dbs = dqs + rows * a->d;
    cudaError_t e = fl_fwd(st, a, NULL, 0, false, o, lse); // the output and lse again: the plan saved none
    if (e == cudaSuccess && dq) e = cudaMemsetAsync(dqs, 0, sizeof(float) * (size_t)(rows * a->d), st);
    if (e == cudaSuccess && db && nb > 0) e = cudaMemsetAsync(dbs, 0, sizeof(float) * (size_t)nb, st);
    if (e != cudaSuccess) return e;
    int64_t blocks = a->b * a->m * ((a->t + FL_BC - 1) / FL_BC);
    if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
    if (blocks > 0) {
        if ((e = fl_smem(k_flash_bwd, bwd_smem(a))) != cudaSuccess) return e;
        k_flash_bwd<<<(unsigned)blocks, FL_THREADS, bwd_smem(a), st>>>(*a, dy, o, lse, dq ? dqs : NULL, dk, dv, gdt, db ? dbs : NULL, acc);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (dq && rows * a->d > 0) k_flash_put<<<ck_grid(rows * a->d), CK_THREADS, 0, st>>>(rows * a->d, dqs, dq, gdt, acc);
    if (db && nb > 0) k_flash_put<<<ck_grid(nb), CK_THREADS, 0, st>>>(nb, dbs, db, a->bdt, acc);
    return cudaGetLastError();
}
