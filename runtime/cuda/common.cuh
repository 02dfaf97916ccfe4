/*
 * common.cuh: what the .cu files share: loads and stores in any float dtype, the counter-based generator,
 * grid-stride loops, block reductions. Private to runtime/cuda/.
 *
 * Everything is written to be obviously right rather than fast: one thread per output element
 * (or one block of CK_THREADS per row), float arithmetic in the order the CPU kernels use, with
 * the compile flag -fmad=false so that a * b + c rounds twice as it does on the CPU.
 */
#ifndef RT_CUDA_COMMON_CUH
#define RT_CUDA_COMMON_CUH

#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define CK_THREADS 256 // threads per block, a power of two (the block reductions need one)

// rt.h's counter-based generator (rt_mix, rt_key, rt_uniform), bit for bit: dropout's masks must
// equal the CPU's.
static __device__ __forceinline__ uint64_t ck_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static __device__ __forceinline__ uint64_t ck_key(uint64_t key, uint64_t word) { return ck_mix(key ^ ck_mix(word)); }
static __device__ __forceinline__ double ck_uniform(uint64_t key) { return (double)(ck_mix(key) >> 11) * 0x1.0p-53; }

// Attention's dropout factor of score (bi, h, i, j) (local indices): 0 or 1 / (1 - p), drawn at
// the global index ((batch x heads + head) x queries + query) x keys + key as
// cpu/attention.c's attn_mask_row draws it; 1 without dropout.
static __device__ __forceinline__ float ck_attn_keep(const ck_attn *a, int64_t bi, int64_t h, int64_t i, int64_t j) {
    if (!(a->p > 0)) return 1.0f;
    uint64_t g = (uint64_t)((((a->b0 + bi) * a->heads + a->q_head0 + h) * a->queries + a->s0 + i) * a->keys + a->t0 + j);
    return ck_uniform(ck_key(a->key, g)) >= a->p ? (float)(1 / (1 - a->p)) : 0.0f;
}

// Element i of p (dtype dt) as float.
static __device__ __forceinline__ float ld(const void *p, int64_t i, int dt) {
    switch (dt) {
    case CK_F16: return __half2float(((const __half *)p)[i]);
    case CK_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CK_I32: return (float)((const int32_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

static __device__ __forceinline__ void st(void *p, int64_t i, int dt, float v) {
    switch (dt) {
    case CK_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    case CK_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case CK_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((float *)p)[i] = v; break;
    }
}

// Stores v, or adds it (in float) when accumulating: the CPU's cpu_put.
static __device__ __forceinline__ void put(void *p, int64_t i, int dt, float v, bool acc) {
    st(p, i, dt, acc ? ld(p, i, dt) + v : v);
}

static __device__ __forceinline__ float sigmoidf_(float x) { return 1 / (1 + expf(-x)); }

// Blocks for a grid-stride loop over n elements.
static inline unsigned ck_grid(int64_t n) {
    int64_t b = (n + CK_THREADS - 1) / CK_THREADS;
    return (unsigned)(b < 1 ? 1 : b > (1 << 20) ? (1 << 20) : b);
}

// Blocks for one block per row (rows looped when there are more).
static inline unsigned ck_row_grid(int64_t rows) { return (unsigned)(rows < 1 ? 1 : rows > (1 << 20) ? (1 << 20) : rows); }

#define CK_FOR_EACH(i, n)                                                                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)
#define CK_FOR_EACH_ROW(r, rows) for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

// The sum of every thread's v over the block, returned to all threads. Fixed tree order, so
// deterministic. sh: CK_THREADS doubles of shared memory.
static __device__ double block_sum(double v, double *sh) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = CK_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

static __device__ float block_max(float v, float *sh) {
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = CK_THREADS / 2; s > 0; s >>= 1) {
        if (t < s && sh[t + s] > sh[t]) sh[t] = sh[t + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// The first nonzero code wins.
static __device__ __forceinline__ void raise_flag(int *flag, int code) {
    if (flag) atomicCAS(flag, 0, code);
}

#endif
